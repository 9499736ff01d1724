package io.netaccel.client;

/**
 * The call's deadline passed: the node answered DEADLINE_EXCEEDED (the call never ran),
 * or, when {@link #local()}, the client stopped waiting after the call's timeout (the call
 * may still run; its late answer is dropped).
 */
public final class DeadlineException extends RacException {
  private static final long serialVersionUID = 1L;
  private final boolean local;

  /** A deadline passed for request {@code requestId}; {@code local}: the client's timeout. */
  public DeadlineException(long requestId, String detail, boolean local) {
    super(Rac.Status.DEADLINE_EXCEEDED, requestId, detail);
    this.local = local;
  }

  /** True when the client gave up waiting, false when the node answered DEADLINE_EXCEEDED. */
  public boolean local() {
    return local;
  }
}
