package io.netaccel.client;

import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The JSON this client reads and writes (control payloads, the catalog, registry
 * bodies), without a dependency: objects are {@code LinkedHashMap<String, Object>} in the
 * document's order, arrays {@code List<Object>}, numbers {@code Long} when integral and
 * {@code Double} otherwise, and {@code null}. Nesting is bounded by {@link #DEPTH_MAX}.
 */
public final class Json {
  private Json() {}

  /** Deepest nesting of arrays and objects accepted. */
  public static final int DEPTH_MAX = 64;

  /** Parses one JSON document; {@link IllegalArgumentException} says where it is wrong. */
  public static Object parse(String text) {
    Json.Parser p = new Json.Parser(text);
    Object v = p.value(0);
    p.ws();
    if (p.i != text.length()) {
      throw p.error("text after the document");
    }
    return v;
  }

  /** Writes {@code value} compactly (as serde_json and Python's separators=(",", ":") do). */
  public static String write(Object value) {
    StringBuilder sb = new StringBuilder();
    write(sb, value);
    return sb.toString();
  }

  private static void write(StringBuilder sb, Object v) {
    if (v == null) {
      sb.append("null");
    } else if (v instanceof String s) {
      string(sb, s);
    } else if (v instanceof Boolean || v instanceof Long || v instanceof Integer) {
      sb.append(v);
    } else if (v instanceof Number n) {
      double d = n.doubleValue();
      sb.append(d == Math.rint(d) && Math.abs(d) < 1e15 ? Long.toString((long) d) + ".0" : Double.toString(d));
    } else if (v instanceof Map<?, ?> m) {
      sb.append('{');
      Iterator<? extends Map.Entry<?, ?>> it = m.entrySet().iterator();
      while (it.hasNext()) {
        Map.Entry<?, ?> e = it.next();
        string(sb, (String) e.getKey());
        sb.append(':');
        write(sb, e.getValue());
        if (it.hasNext()) {
          sb.append(',');
        }
      }
      sb.append('}');
    } else if (v instanceof List<?> l) {
      sb.append('[');
      for (int i = 0; i < l.size(); i++) {
        if (i > 0) {
          sb.append(',');
        }
        write(sb, l.get(i));
      }
      sb.append(']');
    } else {
      throw new IllegalArgumentException("cannot write " + v.getClass().getName() + " as JSON");
    }
  }

  private static void string(StringBuilder sb, String s) {
    sb.append('"');
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      switch (c) {
        case '"' -> sb.append("\\\"");
        case '\\' -> sb.append("\\\\");
        case '\n' -> sb.append("\\n");
        case '\r' -> sb.append("\\r");
        case '\t' -> sb.append("\\t");
        case '\b' -> sb.append("\\b");
        case '\f' -> sb.append("\\f");
        default -> {
          if (c < 0x20) {
            sb.append(String.format("\\u%04x", (int) c));
          } else {
            sb.append(c);
          }
        }
      }
    }
    sb.append('"');
  }

  private static final class Parser {
    private final String s;
    private int i;

    Parser(String s) {
      this.s = s;
    }

    IllegalArgumentException error(String what) {
      return new IllegalArgumentException("bad JSON at offset " + i + ": " + what);
    }

    void ws() {
      while (i < s.length() && " \t\r\n".indexOf(s.charAt(i)) >= 0) {
        i++;
      }
    }

    Object value(int depth) {
      if (depth > DEPTH_MAX) {
        throw error("nested deeper than " + DEPTH_MAX);
      }
      ws();
      if (i >= s.length()) {
        throw error("unexpected end");
      }
      char c = s.charAt(i);
      switch (c) {
        case '{':
          return object(depth);
        case '[':
          return array(depth);
        case '"':
          return string();
        case 't':
          return literal("true", Boolean.TRUE);
        case 'f':
          return literal("false", Boolean.FALSE);
        case 'n':
          return literal("null", null);
        default:
          return number();
      }
    }

    Object literal(String word, Object v) {
      if (!s.startsWith(word, i)) {
        throw error("expected " + word);
      }
      i += word.length();
      return v;
    }

    Map<String, Object> object(int depth) {
      Map<String, Object> m = new LinkedHashMap<>();
      i++;
      ws();
      if (i < s.length() && s.charAt(i) == '}') {
        i++;
        return m;
      }
      while (true) {
        ws();
        if (i >= s.length() || s.charAt(i) != '"') {
          throw error("expected a key");
        }
        String k = string();
        ws();
        expect(':');
        m.put(k, value(depth + 1));
        ws();
        if (i < s.length() && s.charAt(i) == ',') {
          i++;
          continue;
        }
        expect('}');
        return m;
      }
    }

    List<Object> array(int depth) {
      List<Object> l = new ArrayList<>();
      i++;
      ws();
      if (i < s.length() && s.charAt(i) == ']') {
        i++;
        return l;
      }
      while (true) {
        l.add(value(depth + 1));
        ws();
        if (i < s.length() && s.charAt(i) == ',') {
          i++;
          continue;
        }
        expect(']');
        return l;
      }
    }

    void expect(char c) {
      if (i >= s.length() || s.charAt(i) != c) {
        throw error("expected '" + c + "'");
      }
      i++;
    }

    String string() {
      i++;
      StringBuilder sb = new StringBuilder();
      while (true) {
        if (i >= s.length()) {
          throw error("unterminated string");
        }
        char c = s.charAt(i++);
        if (c == '"') {
          return sb.toString();
        }
        if (c != '\\') {
          sb.append(c);
          continue;
        }
        if (i >= s.length()) {
          throw error("unterminated escape");
        }
        char e = s.charAt(i++);
        switch (e) {
          case '"', '\\', '/' -> sb.append(e);
          case 'n' -> sb.append('\n');
          case 'r' -> sb.append('\r');
          case 't' -> sb.append('\t');
          case 'b' -> sb.append('\b');
          case 'f' -> sb.append('\f');
          case 'u' -> {
            if (i + 4 > s.length()) {
              throw error("short \\u escape");
            }
            sb.append((char) Integer.parseInt(s.substring(i, i + 4), 16));
            i += 4;
          }
          default -> throw error("bad escape \\" + e);
        }
      }
    }

    Object number() {
      int start = i;
      while (i < s.length() && "+-0123456789.eE".indexOf(s.charAt(i)) >= 0) {
        i++;
      }
      String t = s.substring(start, i);
      if (t.isEmpty()) {
        throw error("unexpected character");
      }
      try {
        if (t.indexOf('.') < 0 && t.indexOf('e') < 0 && t.indexOf('E') < 0) {
          return Long.parseLong(t);
        }
        return Double.parseDouble(t);
      } catch (NumberFormatException ex) {
        throw error("bad number " + t);
      }
    }
  }
}
