package io.netaccel.client;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;

/** The repository's spec folder, found from the build (or the working directory). */
final class Spec {
  private Spec() {}

  static Path dir() {
    String given = System.getProperty("netaccel.spec");
    Path p = given != null ? Path.of(given) : Path.of("../../spec");
    if (!Files.isDirectory(p)) {
      throw new IllegalStateException("no spec folder at " + p.toAbsolutePath());
    }
    return p;
  }

  static Object json(String relative) throws IOException {
    return Json.parse(Files.readString(dir().resolve(relative)));
  }

  @SuppressWarnings("unchecked")
  static List<Map<String, Object>> vectors() throws IOException {
    return (List<Map<String, Object>>) json("rac-v1-vectors.json");
  }

  static byte[] hex(String h) {
    return HexFormat.of().parseHex(h);
  }

  static String hex(byte[] b) {
    return HexFormat.of().formatHex(b);
  }
}
