package io.netaccel.client;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Map;

/**
 * RAC v1 wire format: the 64-byte headers and status codes, as pure functions over bytes
 * (no sockets).
 *
 * <p>This class mirrors the Rust crate {@code rac-proto} and is held to the same vectors
 * ({@code spec/rac-v1-vectors.json}). A decoder takes the bytes received so far: it
 * returns {@code null} while fewer than 64 are in, throws {@link HeaderException} as soon
 * as the bytes can never become a valid header (a wrong magic is refused at 4 bytes, a
 * wrong kind at 5), and returns the header otherwise. Not here: parameter blocks
 * ({@link Params}), connections ({@link Client}).
 */
public final class Rac {
  private Rac() {}

  /** Length of every header. */
  public static final int HEADER_LEN = 64;
  /** Length of the parameter block of a call header (bytes 20..64). */
  public static final int PARAMS_LEN = 44;
  /** The accelerator id of control messages. */
  public static final int CONTROL_ACCEL_ID = 0xFFFF;
  /** The slot id of a result no slot ran. */
  public static final int NO_SLOT = 0xFFFF;
  /** The port a node listens on for RAC by default. */
  public static final int DEFAULT_PORT = 9400;
  /** Upper bound on a control message's JSON payload. */
  public static final int CONTROL_PAYLOAD_LEN_MAX = 4096;
  /** Largest value of a u32 header field. */
  public static final long U32_MAX = 0xFFFF_FFFFL;

  static final byte[] MAGIC = {'R', 'A', 'C', '1'};

  /** Kind byte of a call. */
  public static final int KIND_CALL = 1;
  /** Kind byte of a result. */
  public static final int KIND_RESULT = 2;
  /** Kind byte of a control message. */
  public static final int KIND_CONTROL = 3;
  /** Kind byte of a control result. */
  public static final int KIND_CONTROL_RESULT = 4;

  /** Ids of the built-in accelerators; ids from 256 on come from a node's catalog. */
  public static final Map<String, Integer> BUILTIN_IDS =
      Map.of(
          "echo", 1, "to_uppercase", 2, "topk", 3, "logit", 4, "minmax", 5, "sobel", 6, "matmul",
          7);

  /** Result status; the names are the protocol's. */
  public enum Status {
    OK,
    BAD_REQUEST,
    UNKNOWN_ACCELERATOR,
    BUSY,
    TOO_LARGE,
    DEADLINE_EXCEEDED,
    UNAVAILABLE,
    UNAUTHORIZED,
    INTERNAL,
    PROTOCOL_ERROR;

    /** The status of wire code {@code code}, or {@code null} for a code v1 does not define. */
    public static Status of(int code) {
      Status[] all = values();
      return code >= 0 && code < all.length ? all[code] : null;
    }

    /** True when the node closes the connection right after a result with this status. */
    public boolean closesConnection() {
      return this == TOO_LARGE || this == PROTOCOL_ERROR;
    }
  }

  /**
   * Header of a call (kind 1) or control message (kind 3), client to node. Unsigned
   * 32-bit fields are held in {@code long}s.
   */
  public record CallHeader(
      int kind, int accelId, long payloadLen, long requestId, long deadlineUs, byte[] params) {
    /** Checks every field fits its wire width and the kind matches the accelerator id. */
    public CallHeader {
      if (kind != KIND_CALL && kind != KIND_CONTROL) {
        throw new IllegalArgumentException("a call header's kind is 1 or 3, not " + kind);
      }
      checkU(accelId, 0xFFFF, "accelerator id");
      checkU(payloadLen, U32_MAX, "payload length");
      checkU(requestId, U32_MAX, "request id");
      checkU(deadlineUs, U32_MAX, "deadline");
      if (params.length != PARAMS_LEN) {
        throw new IllegalArgumentException(
            "params must be " + PARAMS_LEN + " bytes, got " + params.length);
      }
      if ((accelId == CONTROL_ACCEL_ID) != (kind == KIND_CONTROL)) {
        throw new IllegalArgumentException(
            "accelerator id 0xffff is for control messages, and only they use it");
      }
    }

    /** The 64 bytes of this header. */
    public byte[] encode() {
      byte[] out = new byte[HEADER_LEN];
      encodeInto(out, 0);
      return out;
    }

    /** Writes the 64 bytes of this header at {@code off} of {@code out}. */
    public void encodeInto(byte[] out, int off) {
      ByteBuffer b = ByteBuffer.wrap(out, off, HEADER_LEN).order(ByteOrder.LITTLE_ENDIAN);
      b.put(MAGIC).put((byte) kind).put((byte) 0).putShort((short) accelId);
      b.putInt((int) payloadLen).putInt((int) requestId).putInt((int) deadlineUs).put(params);
    }
  }

  /** Header of a result (kind 2) or control result (kind 4), node to client. */
  public record ResultHeader(
      int kind,
      Status status,
      long payloadLen,
      long requestId,
      int accelId,
      int slotId,
      long queueNs,
      long execNs) {
    /** Checks every field fits its wire width. */
    public ResultHeader {
      if (kind != KIND_RESULT && kind != KIND_CONTROL_RESULT) {
        throw new IllegalArgumentException("a result header's kind is 2 or 4, not " + kind);
      }
      checkU(payloadLen, U32_MAX, "payload length");
      checkU(requestId, U32_MAX, "request id");
      checkU(accelId, 0xFFFF, "accelerator id");
      checkU(slotId, 0xFFFF, "slot id");
    }

    /** The 64 bytes of this header (what a node sends; for tests and fakes). */
    public byte[] encode() {
      ByteBuffer b = ByteBuffer.allocate(HEADER_LEN).order(ByteOrder.LITTLE_ENDIAN);
      b.put(MAGIC).put((byte) kind).put((byte) 0).putShort((short) status.ordinal());
      b.putInt((int) payloadLen).putInt((int) requestId);
      b.putShort((short) accelId).putShort((short) slotId).putInt(0);
      b.putLong(queueNs).putLong(execNs);
      return b.array();
    }
  }

  private static void checkU(long value, long max, String what) {
    if (value < 0 || value > max) {
      throw new IllegalArgumentException(what + " must be in 0..=" + max + ", got " + value);
    }
  }

  /** Magic once four bytes are present, kind once five are (as the Rust decoder). */
  private static int checkStart(byte[] buf, int off, int len, boolean wantRequest) {
    if (len >= 4) {
      for (int i = 0; i < 4; i++) {
        if (buf[off + i] != MAGIC[i]) {
          throw new HeaderException(
              HeaderException.Reason.BAD_MAGIC,
              String.format(
                  "bad magic %02x %02x %02x %02x: not a RAC1 message",
                  buf[off], buf[off + 1], buf[off + 2], buf[off + 3]),
              0);
        }
      }
    }
    if (len < 5) {
      return 0;
    }
    int kind = buf[off + 4] & 0xFF;
    if (kind < KIND_CALL || kind > KIND_CONTROL_RESULT) {
      throw new HeaderException(
          HeaderException.Reason.UNKNOWN_KIND, "unknown message kind " + kind, 0);
    }
    boolean isRequest = kind == KIND_CALL || kind == KIND_CONTROL;
    if (isRequest != wantRequest) {
      throw new HeaderException(
          HeaderException.Reason.WRONG_DIRECTION,
          "message kind " + kind + " is sent by a " + (isRequest ? "client" : "node") + ", not to one",
          0);
    }
    return kind;
  }

  /**
   * Decodes a call header from {@code len} bytes at {@code off}, with the checks of
   * {@code rac_proto::CallHeader::decode} in the same order; {@code null} while fewer
   * than 64 bytes are in.
   */
  public static CallHeader decodeCall(byte[] buf, int off, int len, long maxPayloadLen) {
    int kind = checkStart(buf, off, len, true);
    if (len < HEADER_LEN) {
      return null;
    }
    ByteBuffer b = ByteBuffer.wrap(buf, off, HEADER_LEN).order(ByteOrder.LITTLE_ENDIAN);
    int flags = b.get(off + 5) & 0xFF;
    int accelId = b.getShort(off + 6) & 0xFFFF;
    long payloadLen = b.getInt(off + 8) & U32_MAX;
    long requestId = b.getInt(off + 12) & U32_MAX;
    long deadlineUs = b.getInt(off + 16) & U32_MAX;
    if (flags != 0) {
      throw new HeaderException(
          HeaderException.Reason.NON_ZERO_FLAGS,
          String.format("flags byte is 0x%02x; v1 requires 0", flags),
          requestId);
    }
    if ((accelId == CONTROL_ACCEL_ID) != (kind == KIND_CONTROL)) {
      throw new HeaderException(
          HeaderException.Reason.ACCELERATOR_ID_MISMATCH,
          String.format(
              "kind %d with accelerator id 0x%04x: control messages and only they use 0xffff",
              kind, accelId),
          requestId);
    }
    long max = kind == KIND_CONTROL ? Math.min(maxPayloadLen, CONTROL_PAYLOAD_LEN_MAX) : maxPayloadLen;
    if (payloadLen > max) {
      throw tooLarge(payloadLen, max, requestId);
    }
    byte[] params = java.util.Arrays.copyOfRange(buf, off + 20, off + HEADER_LEN);
    return new CallHeader(kind, accelId, payloadLen, requestId, deadlineUs, params);
  }

  /**
   * Decodes a result header from {@code len} bytes at {@code off}, with the checks of
   * {@code rac_proto::ResultHeader::decode}: an undefined status or a non-zero reserved
   * byte means the stream is not what it claims to be; {@code null} while fewer than 64
   * bytes are in.
   */
  public static ResultHeader decodeResult(byte[] buf, int off, int len, long maxPayloadLen) {
    int kind = checkStart(buf, off, len, false);
    if (len < HEADER_LEN) {
      return null;
    }
    ByteBuffer b = ByteBuffer.wrap(buf, off, HEADER_LEN).order(ByteOrder.LITTLE_ENDIAN);
    int flags = b.get(off + 5) & 0xFF;
    int code = b.getShort(off + 6) & 0xFFFF;
    long payloadLen = b.getInt(off + 8) & U32_MAX;
    long requestId = b.getInt(off + 12) & U32_MAX;
    if (flags != 0) {
      throw new HeaderException(
          HeaderException.Reason.NON_ZERO_FLAGS,
          String.format("flags byte is 0x%02x; v1 requires 0", flags),
          requestId);
    }
    Status status = Status.of(code);
    if (status == null) {
      throw new HeaderException(
          HeaderException.Reason.UNKNOWN_STATUS, "unknown status code " + code, requestId);
    }
    for (int i = 20; i < HEADER_LEN; i = i == 23 ? 40 : i + 1) {
      if (buf[off + i] != 0) {
        throw new HeaderException(
            HeaderException.Reason.NON_ZERO_RESERVED,
            "reserved byte at offset " + i + " is not zero",
            requestId);
      }
    }
    if (payloadLen > maxPayloadLen) {
      throw tooLarge(payloadLen, maxPayloadLen, requestId);
    }
    return new ResultHeader(
        kind,
        status,
        payloadLen,
        requestId,
        b.getShort(off + 16) & 0xFFFF,
        b.getShort(off + 18) & 0xFFFF,
        b.getLong(off + 24),
        b.getLong(off + 32));
  }

  private static HeaderException tooLarge(long payloadLen, long max, long requestId) {
    return new HeaderException(
        HeaderException.Reason.PAYLOAD_TOO_LARGE,
        "payload of " + payloadLen + " bytes is above the limit of " + max + " bytes",
        requestId);
  }
}
