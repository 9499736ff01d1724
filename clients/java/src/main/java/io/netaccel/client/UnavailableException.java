package io.netaccel.client;

import java.time.Duration;

/** UNAVAILABLE: the accelerator's slots are reconfiguring or failed, or the node drains. */
public final class UnavailableException extends RacException {
  private static final long serialVersionUID = 1L;

  /** An UNAVAILABLE answer to request {@code requestId}. */
  public UnavailableException(long requestId, String detail) {
    super(Rac.Status.UNAVAILABLE, requestId, detail);
  }

  /** How long to wait before retrying. */
  public Duration retryAfter() {
    return RETRY_AFTER_DEFAULT;
  }
}
