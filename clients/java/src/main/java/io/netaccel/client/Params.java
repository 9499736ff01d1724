package io.netaccel.client;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.List;
import java.util.Map;

/**
 * Parameter blocks: the 44 bytes of a call header that carry an accelerator's
 * parameters, built by name from a spec (the built-ins' below, or a node's catalog).
 */
public final class Params {
  private Params() {}

  /** A block of zeros: the params of an accelerator that takes none. */
  public static byte[] none() {
    return new byte[Rac.PARAMS_LEN];
  }

  /**
   * One parameter of an accelerator: an entry of the catalog's {@code params}. {@code type}
   * is {@code u8}, {@code u16}, {@code u32}, {@code i32}, {@code u64} or {@code f32};
   * {@code defaultValue} is {@code null} for a required parameter.
   */
  public record Spec(String name, String type, int offset, Number defaultValue) {
    /** Reads an entry of the catalog's {@code params}. */
    static Spec fromJson(Map<?, ?> doc) {
      return new Spec(
          (String) doc.get("name"),
          (String) doc.get("type"),
          ((Number) doc.get("offset")).intValue(),
          (Number) doc.get("default"));
    }
  }

  /** Parameters of the built-ins ({@code spec/accelerators.md}), by accelerator name. */
  public static final Map<String, List<Spec>> BUILTIN =
      Map.of(
          "echo", List.of(),
          "to_uppercase", List.of(),
          "topk", List.of(new Spec("k", "u32", 0, null)),
          "logit", List.of(new Spec("eps", "f32", 0, 0.0)),
          "minmax", List.of(),
          "sobel", List.of(new Spec("width", "u32", 0, null), new Spec("height", "u32", 4, null)),
          "matmul", List.of(new Spec("n", "u32", 0, null)));

  /**
   * Builds a 44-byte block from {@code values} by {@code specs}; an unknown or missing
   * name, or a value out of its type's range, throws {@link IllegalArgumentException}
   * naming it. The node checks the catalog's bounds (BAD_REQUEST), not the client.
   */
  public static byte[] pack(List<Spec> specs, Map<String, ? extends Number> values, String accelerator) {
    for (String name : values.keySet()) {
      if (specs.stream().noneMatch(s -> s.name().equals(name))) {
        String takes = String.join(", ", specs.stream().map(Spec::name).toList());
        throw new IllegalArgumentException(
            "unknown parameter '" + name + "' for " + accelerator + "; it takes "
                + (takes.isEmpty() ? "none" : takes));
      }
    }
    ByteBuffer b = ByteBuffer.allocate(Rac.PARAMS_LEN).order(ByteOrder.LITTLE_ENDIAN);
    for (Spec s : specs) {
      Number v = values.containsKey(s.name()) ? values.get(s.name()) : s.defaultValue();
      if (v == null) {
        throw new IllegalArgumentException(
            "missing required parameter '" + s.name() + "' for " + accelerator);
      }
      put(b, s, v, accelerator);
    }
    return b.array();
  }

  private static void put(ByteBuffer b, Spec s, Number v, String accelerator) {
    int width = switch (s.type()) {
      case "u8" -> 1;
      case "u16" -> 2;
      case "u32", "i32", "f32" -> 4;
      case "u64" -> 8;
      default -> throw new IllegalArgumentException(
          "parameter '" + s.name() + "' has unknown type " + s.type());
    };
    if (s.offset() < 0 || s.offset() + width > Rac.PARAMS_LEN) {
      throw new IllegalArgumentException(
          "parameter '" + s.name() + "' at offset " + s.offset() + " does not fit the block");
    }
    if (s.type().equals("f32")) {
      b.putFloat(s.offset(), v.floatValue());
      return;
    }
    if (v instanceof Double || v instanceof Float) {
      if (v.doubleValue() != Math.rint(v.doubleValue())) {
        throw range(s, v, accelerator, "is not an integer (" + s.type() + ")");
      }
    }
    java.math.BigInteger big = v instanceof java.math.BigInteger bi ? bi : java.math.BigInteger.valueOf(v.longValue());
    java.math.BigInteger lo = s.type().equals("i32") ? java.math.BigInteger.valueOf(Integer.MIN_VALUE) : java.math.BigInteger.ZERO;
    java.math.BigInteger hi = switch (s.type()) {
      case "u8" -> java.math.BigInteger.valueOf(0xFF);
      case "u16" -> java.math.BigInteger.valueOf(0xFFFF);
      case "u32" -> java.math.BigInteger.valueOf(Rac.U32_MAX);
      case "i32" -> java.math.BigInteger.valueOf(Integer.MAX_VALUE);
      default -> java.math.BigInteger.ONE.shiftLeft(64).subtract(java.math.BigInteger.ONE);
    };
    if (big.compareTo(lo) < 0 || big.compareTo(hi) > 0) {
      throw range(s, v, accelerator, "is out of the range of " + s.type());
    }
    long x = big.longValue();
    switch (width) {
      case 1 -> b.put(s.offset(), (byte) x);
      case 2 -> b.putShort(s.offset(), (short) x);
      case 4 -> b.putInt(s.offset(), (int) x);
      default -> b.putLong(s.offset(), x);
    }
  }

  private static IllegalArgumentException range(Spec s, Number v, String accelerator, String why) {
    return new IllegalArgumentException(
        "parameter '" + s.name() + "' of " + accelerator + ": " + v + " " + why);
  }

  /** The block of a built-in accelerator by name: {@code builtin("sobel", Map.of("width", 4, "height", 4))}. */
  public static byte[] builtin(String accelerator, Map<String, ? extends Number> values) {
    List<Spec> specs = BUILTIN.get(accelerator);
    if (specs == null) {
      throw new IllegalArgumentException("no built-in accelerator named '" + accelerator + "'");
    }
    return pack(specs, values, accelerator);
  }

  /**
   * The JSON payload of a control message, byte-identical to the Rust encoder's: {@code
   * op} first, then the op's fields in the order given, {@code token} last and only when
   * given.
   */
  public static byte[] control(String op, Map<String, Object> fields, String token) {
    List<String> takes = switch (op) {
      case "catalog", "slots" -> List.of();
      case "load" -> List.of("slot", "accelerator");
      case "hello" -> List.of("tenant");
      default -> throw new IllegalArgumentException(
          "unknown control op '" + op + "'; expected one of catalog, slots, load, hello");
    };
    for (String f : fields.keySet()) {
      if (!takes.contains(f)) {
        throw new IllegalArgumentException("control op '" + op + "' does not take field '" + f + "'");
      }
    }
    Map<String, Object> doc = new java.util.LinkedHashMap<>();
    doc.put("op", op);
    for (String f : takes) {
      if (!fields.containsKey(f)) {
        throw new IllegalArgumentException("control op '" + op + "' requires field '" + f + "'");
      }
      doc.put(f, fields.get(f));
    }
    if (token != null) {
      doc.put("token", token);
    }
    byte[] payload = Json.write(doc).getBytes(java.nio.charset.StandardCharsets.UTF_8);
    if (payload.length > Rac.CONTROL_PAYLOAD_LEN_MAX) {
      throw new IllegalArgumentException(
          "control payload of " + payload.length + " bytes is above " + Rac.CONTROL_PAYLOAD_LEN_MAX);
    }
    return payload;
  }
}
