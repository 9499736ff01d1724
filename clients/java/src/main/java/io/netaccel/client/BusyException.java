package io.netaccel.client;

import java.time.Duration;

/** BUSY: no room in the node's reassembly pool or slot queue; retry after {@link #retryAfter()}. */
public final class BusyException extends RacException {
  private static final long serialVersionUID = 1L;

  /** A BUSY answer to request {@code requestId}. */
  public BusyException(long requestId, String detail) {
    super(Rac.Status.BUSY, requestId, detail);
  }

  /** How long to wait before retrying. */
  public Duration retryAfter() {
    return RETRY_AFTER_DEFAULT;
  }
}
