package io.netaccel.client;

/** The registry answered with an error ({@link #status()} 0: it could not be reached). */
public final class RegistryException extends NetaccelException {
  private static final long serialVersionUID = 1L;
  private final int status;
  private final String code;

  /** An answer {@code status} with the error {@code code} and its message. */
  public RegistryException(int status, String code, String message) {
    super(status != 0 ? "registry answered " + status + " " + code + ": " + message : message);
    this.status = status;
    this.code = code;
  }

  /** The HTTP status, 0 when no replica could be reached. */
  public int status() {
    return status;
  }

  /** The error's code ({@code NOT_LEADER}, {@code UNAVAILABLE}, …; {@code UNREACHABLE}). */
  public String code() {
    return code;
  }
}
