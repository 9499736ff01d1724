package io.netaccel.client;

/** The node's reply cannot be trusted (a malformed or unexpected header); the connection is closed. */
public final class ProtocolException extends NetaccelException {
  private static final long serialVersionUID = 1L;

  /** A malformed reply, said in {@code message}. */
  public ProtocolException(String message) {
    super(message);
  }
}
