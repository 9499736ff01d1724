package io.netaccel.client;

import java.time.Duration;

/** The node answered a call with a status other than OK. */
public class RacException extends NetaccelException {
  private static final long serialVersionUID = 1L;

  /**
   * How long to wait before retrying a BUSY or UNAVAILABLE call. RAC carries no hint of its
   * own; this is what the node's HTTP front end sends for the same refusals ({@code
   * Retry-After: 1}).
   */
  public static final Duration RETRY_AFTER_DEFAULT = Duration.ofSeconds(1);

  private final Rac.Status status;
  private final long requestId;
  private final String detail;

  /** A refusal with its status, the call's request id, and the node's sentence. */
  public RacException(Rac.Status status, long requestId, String detail) {
    super(status + " (request " + requestId + ")" + (detail.isEmpty() ? "" : ": " + detail));
    this.status = status;
    this.requestId = requestId;
    this.detail = detail;
  }

  /** The exception class for a non-OK status. */
  public static RacException of(Rac.Status status, long requestId, String detail) {
    switch (status) {
      case BUSY:
        return new BusyException(requestId, detail);
      case UNAVAILABLE:
        return new UnavailableException(requestId, detail);
      case DEADLINE_EXCEEDED:
        return new DeadlineException(requestId, detail, false);
      default:
        return new RacException(status, requestId, detail);
    }
  }

  /** The result's status. */
  public Rac.Status status() {
    return status;
  }

  /** The request id of the call answered (0: an answer to the connection). */
  public long requestId() {
    return requestId;
  }

  /** The node's sentence saying why (the result's payload as UTF-8). */
  public String detail() {
    return detail;
  }
}
