package io.netaccel.client;

/**
 * Base class of every exception this library throws about a node or the registry. The
 * subclasses say what a caller does next: retry later ({@link BusyException},
 * {@link UnavailableException}), give up on this call ({@link DeadlineException}), fix
 * the call ({@link RacException} and its status), or make a new connection
 * ({@link ClosedException}, {@link ProtocolException}).
 */
public class NetaccelException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  /** An exception with a message. */
  public NetaccelException(String message) {
    super(message);
  }

  /** An exception with a message and its cause. */
  public NetaccelException(String message, Throwable cause) {
    super(message, cause);
  }
}
