package io.netaccel.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** The wire format against the shared vectors (spec/rac-v1-vectors.json) and hostile headers. */
class RacTest {
  private static final long ANY = Rac.U32_MAX;

  @Test
  void everyCallVectorDecodesAndEncodesBackByteForByte() throws IOException {
    int n = 0;
    for (Map<String, Object> v : Spec.vectors()) {
      byte[] head = Spec.hex((String) v.get("header_hex"));
      if (head[4] != Rac.KIND_CALL && head[4] != Rac.KIND_CONTROL) {
        continue;
      }
      Rac.CallHeader h = Rac.decodeCall(head, 0, head.length, ANY);
      assertNotNull(h, (String) v.get("name"));
      assertEquals(((String) v.get("payload_hex")).length() / 2, h.payloadLen(), (String) v.get("name"));
      assertEquals(v.get("header_hex"), Spec.hex(h.encode()), (String) v.get("name"));
      n++;
    }
    assertTrue(n >= 4);
  }

  @Test
  void everyResultVectorDecodesAndEncodesBackByteForByte() throws IOException {
    int n = 0;
    for (Map<String, Object> v : Spec.vectors()) {
      byte[] head = Spec.hex((String) v.get("header_hex"));
      if (head[4] != Rac.KIND_RESULT && head[4] != Rac.KIND_CONTROL_RESULT) {
        continue;
      }
      Rac.ResultHeader h = Rac.decodeResult(head, 0, head.length, ANY);
      assertNotNull(h, (String) v.get("name"));
      assertEquals(((String) v.get("payload_hex")).length() / 2, h.payloadLen(), (String) v.get("name"));
      assertEquals(v.get("header_hex"), Spec.hex(h.encode()), (String) v.get("name"));
      n++;
    }
    assertTrue(n >= 2);
  }

  @Test
  void theFieldsOfTheVectorsAreTheOnesTheirNamesSay() throws IOException {
    List<byte[]> h = Spec.vectors().stream().map(v -> Spec.hex((String) v.get("header_hex"))).toList();
    Rac.CallHeader upper = Rac.decodeCall(h.get(0), 0, 64, ANY);
    assertEquals(List.of(2, 7L, 0L), List.of(upper.accelId(), upper.requestId(), upper.deadlineUs()));
    assertArrayEquals(Params.builtin("topk", Map.of("k", 3)), Rac.decodeCall(h.get(1), 0, 64, ANY).params());
    assertArrayEquals(
        Params.builtin("sobel", Map.of("width", 4, "height", 4)), Rac.decodeCall(h.get(2), 0, 64, ANY).params());
    Rac.CallHeader echo = Rac.decodeCall(h.get(3), 0, 64, ANY);
    assertEquals(List.of(0xFFFFFFFEL, 1000L, 0L), List.of(echo.requestId(), echo.deadlineUs(), echo.payloadLen()));
    Rac.ResultHeader ok = Rac.decodeResult(h.get(4), 0, 64, ANY);
    assertEquals(
        List.of(Rac.Status.OK, 7L, 2, 0, 1500L, 800L),
        List.of(ok.status(), ok.requestId(), ok.accelId(), ok.slotId(), ok.queueNs(), ok.execNs()));
    Rac.ResultHeader busy = Rac.decodeResult(h.get(5), 0, 64, ANY);
    assertEquals(List.of(Rac.Status.BUSY, 9L, 3, Rac.NO_SLOT), List.of(busy.status(), busy.requestId(), busy.accelId(), busy.slotId()));
  }

  private static void refused(HeaderException.Reason reason, Runnable r) {
    HeaderException e = assertThrows(HeaderException.class, r::run);
    assertEquals(reason, e.reason(), e.getMessage());
  }

  @Test
  void aHeaderIsPartialUntil64BytesAndRefusedAsSoonAsItsStartIsWrong() throws IOException {
    byte[] ok = Spec.hex((String) Spec.vectors().get(4).get("header_hex"));
    for (int n = 0; n < 64; n++) {
      assertNull(Rac.decodeResult(ok, 0, n, ANY));
    }
    refused(HeaderException.Reason.BAD_MAGIC, () -> Rac.decodeResult(Spec.hex("52414332"), 0, 4, ANY));
    refused(HeaderException.Reason.UNKNOWN_KIND, () -> Rac.decodeResult(Spec.hex("5241433109"), 0, 5, ANY));
    refused(HeaderException.Reason.WRONG_DIRECTION, () -> Rac.decodeResult(Spec.hex("5241433101"), 0, 5, ANY));
  }

  @Test
  void malformedResultHeadersAreRefusedWithTheReason() throws IOException {
    byte[] ok = Spec.hex((String) Spec.vectors().get(4).get("header_hex"));
    Object[][] cases = {
      {5, HeaderException.Reason.NON_ZERO_FLAGS},
      {6, HeaderException.Reason.UNKNOWN_STATUS},
      {7, HeaderException.Reason.UNKNOWN_STATUS},
      {20, HeaderException.Reason.NON_ZERO_RESERVED},
      {23, HeaderException.Reason.NON_ZERO_RESERVED},
      {40, HeaderException.Reason.NON_ZERO_RESERVED},
      {63, HeaderException.Reason.NON_ZERO_RESERVED},
    };
    for (Object[] c : cases) {
      byte[] b = ok.clone();
      b[(int) c[0]] = 10;
      HeaderException e = assertThrows(HeaderException.class, () -> Rac.decodeResult(b, 0, 64, ANY));
      assertEquals(c[1], e.reason(), "byte " + c[0]);
      assertEquals(7, e.requestId());
      assertEquals(Rac.Status.PROTOCOL_ERROR, e.status());
    }
    HeaderException big = assertThrows(HeaderException.class, () -> Rac.decodeResult(ok, 0, 64, 4));
    assertEquals(Rac.Status.TOO_LARGE, big.status());
  }

  @Test
  void malformedCallHeadersAreRefusedInTheNodesOrder() throws IOException {
    byte[] call = Spec.hex((String) Spec.vectors().get(0).get("header_hex"));
    byte[] flags = call.clone();
    flags[5] = 1;
    refused(HeaderException.Reason.NON_ZERO_FLAGS, () -> Rac.decodeCall(flags, 0, 64, ANY));
    byte[] control = call.clone();
    control[4] = Rac.KIND_CONTROL;
    refused(HeaderException.Reason.ACCELERATOR_ID_MISMATCH, () -> Rac.decodeCall(control, 0, 64, ANY));
    byte[] ffff = call.clone();
    ffff[6] = (byte) 0xFF;
    ffff[7] = (byte) 0xFF;
    refused(HeaderException.Reason.ACCELERATOR_ID_MISMATCH, () -> Rac.decodeCall(ffff, 0, 64, ANY));
    refused(HeaderException.Reason.PAYLOAD_TOO_LARGE, () -> Rac.decodeCall(call, 0, 64, 4));
    byte[] bigControl = new Rac.CallHeader(Rac.KIND_CONTROL, 0xFFFF, 4097, 1, 0, Params.none()).encode();
    refused(HeaderException.Reason.PAYLOAD_TOO_LARGE, () -> Rac.decodeCall(bigControl, 0, 64, ANY));
  }

  @Test
  void everyHeaderOfTheRefusedFileIsRefusedWithItsReason() throws IOException {
    List<?> refused = (List<?>) Spec.json("rac-v1-refused.json");
    assertTrue(refused.size() >= 6);
    for (Object o : refused) {
      Map<?, ?> r = (Map<?, ?>) o;
      byte[] head = Spec.hex((String) r.get("header_hex"));
      HeaderException e = assertThrows(HeaderException.class, () -> Rac.decodeResult(head, 0, head.length, ANY), (String) r.get("name"));
      assertEquals(r.get("reason"), e.reason().wireName(), (String) r.get("name"));
    }
  }

  @Test
  void theVectorsCarryEveryStatusAndBothKindsOfEachDirection() throws IOException {
    java.util.Set<Rac.Status> statuses = new java.util.HashSet<>();
    java.util.Set<Integer> kinds = new java.util.HashSet<>();
    for (Map<String, Object> v : Spec.vectors()) {
      byte[] head = Spec.hex((String) v.get("header_hex"));
      kinds.add((int) head[4]);
      if (head[4] == Rac.KIND_RESULT || head[4] == Rac.KIND_CONTROL_RESULT) {
        statuses.add(Rac.decodeResult(head, 0, 64, ANY).status());
      }
    }
    assertEquals(java.util.EnumSet.allOf(Rac.Status.class), statuses);
    assertEquals(java.util.Set.of(1, 2, 3, 4), kinds);
  }

  @Test
  void theEncoderRefusesWhatNoHeaderCanCarry() {
    assertThrows(IllegalArgumentException.class, () -> new Rac.CallHeader(1, 1, 0, 1L << 32, 0, Params.none()));
    assertThrows(IllegalArgumentException.class, () -> new Rac.CallHeader(1, 0xFFFF, 0, 1, 0, Params.none()));
    assertThrows(IllegalArgumentException.class, () -> new Rac.CallHeader(1, 1, 0, 1, 0, new byte[43]));
    assertThrows(IllegalArgumentException.class, () -> new Rac.CallHeader(1, 1, 0, 1, -1, Params.none()));
  }

  @Test
  void paramsByNameEveryTypeAtItsOffset() {
    List<Params.Spec> specs =
        List.of(
            new Params.Spec("a", "u8", 0, null),
            new Params.Spec("b", "u16", 2, null),
            new Params.Spec("c", "u32", 4, null),
            new Params.Spec("d", "i32", 8, null),
            new Params.Spec("e", "u64", 12, null),
            new Params.Spec("f", "f32", 20, 0.5));
    Map<String, Number> v = new LinkedHashMap<>();
    v.put("a", 255);
    v.put("b", 0xFFFF);
    v.put("c", 0xFFFFFFFFL);
    v.put("d", -2);
    v.put("e", BigInteger.ONE.shiftLeft(64).subtract(BigInteger.ONE));
    byte[] block = Params.pack(specs, v, "t");
    assertEquals("ff00ffffffffffff" + "feffffff" + "ffffffffffffffff" + "0000003f", Spec.hex(block).substring(0, 48));
    v.put("a", 256);
    assertThrows(IllegalArgumentException.class, () -> Params.pack(specs, v, "t"), "u8 range");
    v.put("a", 1.5);
    assertThrows(IllegalArgumentException.class, () -> Params.pack(specs, v, "t"), "not an integer");
    v.put("a", 0);
    v.put("zz", 1);
    IllegalArgumentException unknown = assertThrows(IllegalArgumentException.class, () -> Params.pack(specs, v, "t"));
    assertTrue(unknown.getMessage().contains("unknown parameter 'zz'"));
    v.remove("zz");
    v.remove("e");
    IllegalArgumentException missing = assertThrows(IllegalArgumentException.class, () -> Params.pack(specs, v, "t"));
    assertTrue(missing.getMessage().contains("missing required parameter 'e'"));
  }

  @Test
  void controlPayloadsAreTheRustEncodersBytes() {
    assertEquals("{\"op\":\"catalog\"}", new String(Params.control("catalog", Map.of(), null), StandardCharsets.UTF_8));
    Map<String, Object> load = new LinkedHashMap<>();
    load.put("accelerator", "echo");
    load.put("slot", 0);
    assertEquals(
        "{\"op\":\"load\",\"slot\":0,\"accelerator\":\"echo\",\"token\":\"t\"}",
        new String(Params.control("load", load, "t"), StandardCharsets.UTF_8));
    assertEquals(
        "{\"op\":\"hello\",\"tenant\":\"é\\\"\"}",
        new String(Params.control("hello", Map.of("tenant", "é\""), null), StandardCharsets.UTF_8));
    assertThrows(IllegalArgumentException.class, () -> Params.control("reboot", Map.of(), null));
    assertThrows(IllegalArgumentException.class, () -> Params.control("hello", Map.of(), null));
    assertThrows(IllegalArgumentException.class, () -> Params.control("hello", Map.of("tenant", "x".repeat(5000)), null));
  }
}
