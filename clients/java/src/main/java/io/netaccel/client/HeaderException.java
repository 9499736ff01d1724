package io.netaccel.client;

/**
 * A header that can never be valid. {@link #status()} is what a node answers it with
 * (TOO_LARGE or PROTOCOL_ERROR, both close the connection) and {@link #requestId()} the id
 * to answer with (0 when magic or kind were unreadable).
 */
public final class HeaderException extends IllegalArgumentException {
  private static final long serialVersionUID = 1L;

  /** Why a header was refused; the same words as the Rust and Python decoders. */
  public enum Reason {
    BAD_MAGIC,
    UNKNOWN_KIND,
    WRONG_DIRECTION,
    NON_ZERO_FLAGS,
    ACCELERATOR_ID_MISMATCH,
    PAYLOAD_TOO_LARGE,
    UNKNOWN_STATUS,
    NON_ZERO_RESERVED;

    /** The reason as the other decoders spell it ({@code bad_magic}, …). */
    public String wireName() {
      return name().toLowerCase(java.util.Locale.ROOT);
    }
  }

  private final Reason reason;
  private final long requestId;

  HeaderException(Reason reason, String message, long requestId) {
    super(message);
    this.reason = reason;
    this.requestId = requestId;
  }

  /** Why the header was refused. */
  public Reason reason() {
    return reason;
  }

  /** The request id to answer with. */
  public long requestId() {
    return requestId;
  }

  /** The status a node answers this header with. */
  public Rac.Status status() {
    return reason == Reason.PAYLOAD_TOO_LARGE ? Rac.Status.TOO_LARGE : Rac.Status.PROTOCOL_ERROR;
  }
}
