package io.netaccel.client;

/** The connection closed (or was closed) before the call was answered; it may or may not have run. */
public final class ClosedException extends NetaccelException {
  private static final long serialVersionUID = 1L;

  /** The connection ended, as {@code message} says. */
  public ClosedException(String message) {
    super(message);
  }

  /** The connection ended because of {@code cause}. */
  public ClosedException(String message, Throwable cause) {
    super(message, cause);
  }
}
