package io.netaccel.client;

/** The registry gave the instance no usable binding within the wait. */
public final class NoBindingException extends NetaccelException {
  private static final long serialVersionUID = 1L;

  /** No binding, as {@code message} says; {@code cause} is the call's failure, if any. */
  public NoBindingException(String message, Throwable cause) {
    super(message, cause);
  }
}
