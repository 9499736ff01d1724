package io.netaccel.client;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The registry's JSON bodies, declared once for the Java client.
 *
 * <p>Each body of the registry's HTTP API ({@code spec/registry-api.md}) is a schema here:
 * its fields, each with a type, whether {@code null} is allowed, a default when absent,
 * and whether it is left out when equal to a value. {@link #parse} checks a document
 * against a schema and fills in defaults; {@link #dump} writes it back as the registry
 * would. The schemas mirror the Rust crate {@code registry-api} and the Python and
 * TypeScript clients; all round-trip the golden fixtures of {@code spec/registry/}.
 *
 * <p>Not here: HTTP, retries, following the leader ({@link RegistryClient}).
 */
public final class RegistryApi {
  private RegistryApi() {}

  /** A document does not have the shape its schema declares. */
  public static final class ShapeException extends IllegalArgumentException {
    private static final long serialVersionUID = 1L;

    ShapeException(String message) {
      super(message);
    }
  }

  private static final Object REQUIRED = new Object();
  private static final Object KEEP = new Object();

  /** A field: {@code kind} a scalar or schema name, {@code list} for a list of them. */
  private record F(String kind, boolean list, boolean nullable, Object dflt, Object omit) {}

  private static F f(String kind) {
    return new F(kind, false, false, REQUIRED, KEEP);
  }

  private static F opt(String kind, Object dflt) {
    return new F(kind, false, false, dflt, KEEP);
  }

  private static F nullable(String kind) {
    return new F(kind, false, true, REQUIRED, KEEP);
  }

  private static F nullOr(String kind) {
    return new F(kind, false, true, null, KEEP);
  }

  private static F nullOmitted(String kind) {
    return new F(kind, false, true, null, null);
  }

  private static F list(String kind) {
    return new F(kind, true, false, REQUIRED, KEEP);
  }

  @SafeVarargs
  private static Map<String, F> schema(Map.Entry<String, F>... fields) {
    Map<String, F> m = new LinkedHashMap<>();
    for (Map.Entry<String, F> e : fields) {
      m.put(e.getKey(), e.getValue());
    }
    return m;
  }

  private static Map.Entry<String, F> e(String name, F field) {
    return Map.entry(name, field);
  }

  private static final Map<String, Map<String, F>> SCHEMAS = new LinkedHashMap<>();

  static {
    SCHEMAS.put("slot-registration", schema(e("id", f("u16")), e("accelerator", f("str")), e("hash", opt("str", "")),
        e("busy_ratio", opt("float", 0.0)), e("queue_depth", opt("u32", 0L))));
    SCHEMAS.put("device-registration", schema(e("id", f("str")), e("backend", f("str")), e("vendor", opt("str", "")),
        e("platform", opt("str", "")), e("accelerators", new F("str", true, true, null, null)),
        e("slots", list("slot-registration"))));
    SCHEMAS.put("node-registration", schema(e("http", f("addr")), e("rac", f("addr")), e("opencl", nullOr("addr")),
        e("https", nullOr("addr")), e("rac_tls", nullOr("addr")), e("grpc", nullOr("addr")),
        e("grpc_tls", nullOr("addr")), e("devices", list("device-registration"))));
    SCHEMAS.put("lease-grant", schema(e("lease_ms", f("int"))));
    SCHEMAS.put("slot", schema(e("id", f("u16")), e("accelerator", f("str")), e("hash", f("str")),
        e("busy_ratio", f("float")), e("queue_depth", f("u32")), e("utilization", f("float")),
        e("reconfiguring", nullable("str")), e("released", f("bool")), e("instances", list("str"))));
    SCHEMAS.put("device", schema(e("id", f("str")), e("backend", f("str")), e("vendor", f("str")),
        e("platform", f("str")), e("accelerators", new F("str", true, true, REQUIRED, KEEP)), e("slots", list("slot"))));
    SCHEMAS.put("node", schema(e("name", f("str")), e("state", f("str")), e("http", f("addr")), e("rac", f("addr")),
        e("opencl", nullOr("addr")), e("https", nullOr("addr")), e("rac_tls", nullOr("addr")),
        e("grpc", nullOr("addr")), e("grpc_tls", nullOr("addr")), e("devices", list("device"))));
    SCHEMAS.put("query", schema(e("backend", nullOr("str")), e("vendor", nullOr("str")), e("node", nullOr("str"))));
    SCHEMAS.put("function-spec", schema(e("accelerator", f("str")), e("hash", nullOr("str")),
        e("query", opt("query", Map.of())), e("instances", opt("u32", 1L))));
    SCHEMAS.put("binding", schema(e("id", f("str")), e("function", f("str")), e("node", nullOr("str")),
        e("device", nullOr("str")), e("slot", nullOr("u16")), e("http", nullOr("addr")), e("rac", nullOr("addr")),
        e("opencl", nullOr("addr")), e("https", nullOr("addr")), e("rac_tls", nullOr("addr")),
        e("grpc", nullOr("addr")), e("grpc_tls", nullOr("addr")), e("generation", f("int")),
        e("pinned", new F("bool", false, false, false, false))));
    SCHEMAS.put("function", schema(e("name", f("str")), e("accelerator", f("str")), e("hash", nullable("str")),
        e("query", f("query")), e("instances", list("binding"))));
    SCHEMAS.put("instance-spec", schema(e("id", nullOmitted("str")), e("node", nullOmitted("str"))));
    SCHEMAS.put("reconfiguration-request", schema(e("node", f("str")), e("device", f("str")), e("slot", f("u16")),
        e("accelerator", f("str")), e("instance", nullOmitted("str"))));
    SCHEMAS.put("verdict", schema(e("allowed", f("bool")), e("migrated", new F("str", true, true, null, null)),
        e("reason", nullOmitted("str"))));
    SCHEMAS.put("unreachable-report", schema(e("generation", f("int"))));
    SCHEMAS.put("error", schema(e("error", f("str")), e("code", f("str"))));
    SCHEMAS.put("health", schema(e("status", f("str"))));
  }

  /** Bodies that are a list of another: {@code nodes} is {@code GET /v1/nodes}. */
  private static final Map<String, String> LISTS = Map.of("nodes", "node", "functions", "function");

  /** Bodies whose unknown fields are refused (what the registry parses); answers tolerate new fields. */
  private static final Set<String> STRICT = Set.of("node-registration", "device-registration", "slot-registration",
      "function-spec", "query", "instance-spec", "reconfiguration-request", "unreachable-report", "health");

  /** Every top-level body of the API (what {@code spec/registry/} must have a file of). */
  public static final List<String> BODIES = List.of("node-registration", "lease-grant", "nodes", "function-spec",
      "function", "functions", "instance-spec", "binding", "reconfiguration-request", "verdict", "unreachable-report",
      "error", "health");

  /** The schema a fixture of {@code spec/registry/} holds: its name up to the first dot, or null. */
  public static String schemaOfFixture(String fileName) {
    String kind = fileName.split("\\.", 2)[0];
    return SCHEMAS.containsKey(kind) || LISTS.containsKey(kind) ? kind : null;
  }

  /** {@code doc} checked against {@code schema}, with defaults filled in. */
  public static Object parse(String schema, Object doc) {
    return parse(schema, doc, schema);
  }

  private static Object parse(String schema, Object doc, String where) {
    if (LISTS.containsKey(schema)) {
      return listOf(LISTS.get(schema), doc, where);
    }
    Map<String, F> fields = SCHEMAS.get(schema);
    if (!(doc instanceof Map<?, ?> m)) {
      throw new ShapeException(where + ": expected an object, got " + Json.write(doc));
    }
    if (STRICT.contains(schema)) {
      List<String> unknown = m.keySet().stream().map(String::valueOf).filter(k -> !fields.containsKey(k)).sorted().toList();
      if (!unknown.isEmpty()) {
        throw new ShapeException(where + ": unknown fields " + unknown);
      }
    }
    Map<String, Object> out = new LinkedHashMap<>();
    for (Map.Entry<String, F> e : fields.entrySet()) {
      String name = e.getKey();
      F field = e.getValue();
      if (!m.containsKey(name)) {
        if (field.dflt() == REQUIRED) {
          throw new ShapeException(where + ": " + name + " is missing");
        }
        out.put(name, dflt(field));
      } else if (m.get(name) == null) {
        if (!field.nullable()) {
          throw new ShapeException(where + "." + name + ": must not be null");
        }
        out.put(name, null);
      } else {
        Object v = m.get(name);
        out.put(name, field.list() ? listOf(field.kind(), v, where + "." + name) : value(field.kind(), v, where + "." + name));
      }
    }
    return out;
  }

  private static List<Object> listOf(String kind, Object v, String where) {
    if (!(v instanceof List<?> l)) {
      throw new ShapeException(where + ": expected a list, got " + Json.write(v));
    }
    List<Object> out = new ArrayList<>();
    for (int i = 0; i < l.size(); i++) {
      out.add(value(kind, l.get(i), where + "[" + i + "]"));
    }
    return out;
  }

  private static Object value(String kind, Object v, String where) {
    if (SCHEMAS.containsKey(kind)) {
      return parse(kind, v, where);
    }
    switch (kind) {
      case "str":
        if (!(v instanceof String)) {
          throw new ShapeException(where + ": expected a string, got " + Json.write(v));
        }
        return v;
      case "bool":
        if (!(v instanceof Boolean)) {
          throw new ShapeException(where + ": expected true or false, got " + Json.write(v));
        }
        return v;
      case "float":
        if (!(v instanceof Number n)) {
          throw new ShapeException(where + ": expected a number, got " + Json.write(v));
        }
        return n.doubleValue();
      case "addr":
        return addr(v, where);
      default:
        long max = switch (kind) {
          case "u16" -> 0xFFFF;
          case "u32" -> Rac.U32_MAX;
          default -> Long.MAX_VALUE;
        };
        if (!(v instanceof Long n) || n < 0 || n > max) {
          throw new ShapeException(where + ": expected an integer in 0..=" + max + ", got " + Json.write(v));
        }
        return n;
    }
  }

  private static String addr(Object v, String where) {
    if (!(v instanceof String s)) {
      throw new ShapeException(where + ": expected HOST:PORT, got " + Json.write(v));
    }
    int colon = s.lastIndexOf(':');
    String port = colon < 0 ? "" : s.substring(colon + 1);
    if (colon <= 0 || port.isEmpty() || !port.chars().allMatch(Character::isDigit) || port.length() > 5
        || Integer.parseInt(port) > 0xFFFF) {
      throw new ShapeException(where + ": \"" + s + "\" is not HOST:PORT");
    }
    return s;
  }

  private static Object dflt(F field) {
    if (SCHEMAS.containsKey(field.kind()) && field.dflt() instanceof Map<?, ?> m) {
      return parse(field.kind(), m);
    }
    return field.dflt();
  }

  /** {@code doc} (as {@link #parse} gives it) as the JSON document the registry writes. */
  public static Object dump(String schema, Object doc) {
    if (LISTS.containsKey(schema)) {
      return ((List<?>) doc).stream().map(d -> dump(LISTS.get(schema), d)).toList();
    }
    Map<?, ?> m = (Map<?, ?>) doc;
    Map<String, Object> out = new LinkedHashMap<>();
    for (Map.Entry<String, F> e : SCHEMAS.get(schema).entrySet()) {
      F field = e.getValue();
      Object v = m.containsKey(e.getKey()) ? m.get(e.getKey()) : dflt(field);
      if (field.omit() != KEEP && java.util.Objects.equals(v, field.omit())) {
        continue;
      }
      out.put(e.getKey(), dumpValue(field, v));
    }
    return out;
  }

  private static Object dumpValue(F field, Object v) {
    if (v == null) {
      return null;
    }
    if (field.list()) {
      return ((List<?>) v).stream().map(x -> SCHEMAS.containsKey(field.kind()) ? dump(field.kind(), x) : x).toList();
    }
    return SCHEMAS.containsKey(field.kind()) ? dump(field.kind(), v) : v;
  }
}
