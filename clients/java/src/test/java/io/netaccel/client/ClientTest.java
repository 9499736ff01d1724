package io.netaccel.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.ServerSocket;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** The client against a scripted fake node: pipelining, the bound, typed errors, every ending. */
@Timeout(value = 30, unit = TimeUnit.SECONDS)
class ClientTest {
  private static byte[] text(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  private static Throwable failure(CompletableFuture<?> f) {
    ExecutionException e = assertThrows(ExecutionException.class, () -> f.get(10, TimeUnit.SECONDS));
    return e.getCause();
  }

  @Test
  void pipelinedCallsAreMatchedByIdWhenAnsweredInReverse() throws Exception {
    List<FakeNode.Call> held = Collections.synchronizedList(new ArrayList<>());
    try (FakeNode node = new FakeNode(c -> {
          held.add(c);
          if (held.size() == 16) {
            for (int i = 15; i >= 0; i--) {
              c.conn().answer(held.get(i), Rac.Status.OK, held.get(i).payload());
            }
          }
        });
        Client client = Client.connect("127.0.0.1", node.port())) {
      List<CompletableFuture<byte[]>> fs = new ArrayList<>();
      for (int i = 0; i < 16; i++) {
        fs.add(client.callAsync("echo", text("call " + i), CallOptions.none()));
      }
      for (int i = 0; i < 16; i++) {
        assertEquals("call " + i, new String(fs.get(i).get(), StandardCharsets.UTF_8));
      }
      assertEquals(0, client.inFlight());
    }
  }

  @Test
  void pastMaxInFlightCallersWaitUntilAnswersFreePlaces() throws Exception {
    AtomicInteger out = new AtomicInteger();
    AtomicInteger most = new AtomicInteger();
    try (FakeNode node = new FakeNode(c -> {
          most.accumulateAndGet(out.incrementAndGet(), Math::max);
          Thread t = new Thread(() -> {
            sleep(2);
            out.decrementAndGet();
            c.conn().answer(c, Rac.Status.OK, c.payload());
          });
          t.start();
        });
        Client client = Client.connect(new Client.Options().address("127.0.0.1", node.port()).maxInFlight(4))) {
      List<CompletableFuture<byte[]>> fs = new ArrayList<>();
      for (int i = 0; i < 40; i++) {
        fs.add(client.callAsync("echo", text(String.valueOf(i)), CallOptions.none()));
      }
      for (CompletableFuture<byte[]> f : fs) {
        f.get();
      }
      assertEquals(4, most.get());
    }
  }

  @Test
  void byDefaultAtMost32CallsAreOutTheNodesOwnBound() throws Exception {
    // The node holds its answers until 32 calls are out and 200 ms passed with no 33rd,
    // then answers them all, and every later call at once.
    List<FakeNode.Call> held = new ArrayList<>();
    AtomicInteger most = new AtomicInteger();
    try (FakeNode node = new FakeNode(c -> {
          synchronized (held) {
            if (most.get() > 0) {
              c.conn().answer(c, Rac.Status.OK, c.payload());
              return;
            }
            held.add(c);
            if (held.size() == 32) {
              Thread t = new Thread(() -> {
                sleep(200);
                synchronized (held) {
                  most.set(held.size());
                  held.forEach(h -> h.conn().answer(h, Rac.Status.OK, h.payload()));
                }
              });
              t.start();
            }
          }
        });
        Client client = Client.connect(new Client.Options().address("127.0.0.1", node.port()))) {
      List<CompletableFuture<byte[]>> fs = new ArrayList<>();
      for (int i = 0; i < 40; i++) {
        fs.add(client.callAsync("echo", text(String.valueOf(i)), CallOptions.none()));
      }
      for (CompletableFuture<byte[]> f : fs) {
        f.get();
      }
      assertEquals(32, Client.MAX_IN_FLIGHT_DEFAULT);
      assertEquals(32, most.get());
    }
  }

  @Test
  void refusalsAreTyped() throws Exception {
    Rac.Status[] statuses = {Rac.Status.BUSY, Rac.Status.UNAVAILABLE, Rac.Status.DEADLINE_EXCEEDED, Rac.Status.BAD_REQUEST};
    try (FakeNode node = new FakeNode(c -> c.conn().answer(c, statuses[Integer.parseInt(new String(c.payload(), StandardCharsets.UTF_8))], text("why")));
        Client client = Client.connect("127.0.0.1", node.port())) {
      BusyException busy = assertThrows(BusyException.class, () -> client.call("echo", text("0")));
      assertTrue(busy.retryAfter().toMillis() > 0);
      assertEquals("why", busy.detail());
      assertTrue(assertThrows(UnavailableException.class, () -> client.call("echo", text("1"))).retryAfter().toMillis() > 0);
      assertFalse(assertThrows(DeadlineException.class, () -> client.call("echo", text("2"))).local());
      assertEquals(Rac.Status.BAD_REQUEST, assertThrows(RacException.class, () -> client.call("echo", text("3"))).status());
      assertInstanceOf(BusyException.class, failure(client.callAsync("echo", text("0"), CallOptions.none())));
      assertFalse(client.isClosed(), "refusals leave the connection open");
    }
  }

  @Test
  void deadlineAndParamsAreOnTheWireAndNamesComeFromTheCatalog() throws Exception {
    String catalog = "[{\"id\":300,\"name\":\"scale\",\"params\":[{\"name\":\"factor\",\"type\":\"f32\",\"offset\":4,\"default\":null}]}]";
    AtomicReference<Rac.CallHeader> seen = new AtomicReference<>();
    try (FakeNode node = new FakeNode(c -> {
          if (c.header().kind() == Rac.KIND_CONTROL) {
            c.conn().answer(c, Rac.Status.OK, text(catalog));
          } else {
            seen.set(c.header());
            c.conn().answer(c, Rac.Status.OK, c.payload());
          }
        });
        Client client = Client.connect("127.0.0.1", node.port())) {
      client.call("scale", text("x"), CallOptions.none().param("factor", 2).deadline(Duration.ofNanos(1_500_000)));
      assertEquals(300, seen.get().accelId());
      assertEquals(1500, seen.get().deadlineUs());
      assertEquals(2.0f, ByteBuffer.wrap(seen.get().params()).order(ByteOrder.LITTLE_ENDIAN).getFloat(4));
      assertThrows(IllegalArgumentException.class, () -> client.call("scale", text("x"), CallOptions.none().param("bogus", 1)));
      assertEquals(Rac.Status.UNKNOWN_ACCELERATOR, assertThrows(RacException.class, () -> client.call("nothing", text("x"))).status());
      client.call("topk", new byte[8], CallOptions.none().params(Map.of("k", 1)));
      assertEquals(3, seen.get().accelId());
    }
  }

  @Test
  void aNodeThatClosesMidCallFailsEveryCallOut() throws Exception {
    AtomicInteger n = new AtomicInteger();
    try (FakeNode node = new FakeNode(c -> {
          if (n.incrementAndGet() == 2) {
            c.conn().close();
          }
        });
        Client client = Client.connect(new Client.Options().address("127.0.0.1", node.port()).maxInFlight(2))) {
      List<CompletableFuture<byte[]>> fs = new ArrayList<>();
      for (int i = 0; i < 2; i++) {
        fs.add(client.callAsync("echo", text("x"), CallOptions.none()));
      }
      for (CompletableFuture<byte[]> f : fs) {
        assertInstanceOf(ClosedException.class, failure(f));
      }
      assertThrows(ClosedException.class, () -> client.call("echo", text("x")));
    }
  }

  @Test
  void aMalformedReplyIsAProtocolException() throws Exception {
    try (FakeNode node = new FakeNode(c -> {
          byte[] h = new Rac.ResultHeader(Rac.KIND_RESULT, Rac.Status.OK, 0, c.header().requestId(), 1, 0, 0, 0).encode();
          h[40] = 7;
          c.conn().write(h);
        });
        Client client = Client.connect("127.0.0.1", node.port())) {
      ProtocolException e = assertThrows(ProtocolException.class, () -> client.call("echo", text("x")));
      assertTrue(e.getMessage().contains("non_zero_reserved"), e.getMessage());
      assertTrue(client.isClosed());
    }
  }

  @Test
  void aTruncatedReplyThenACloseIsClosedNeverAHang() throws Exception {
    try (FakeNode node = new FakeNode(c -> {
          byte[] h = new Rac.ResultHeader(Rac.KIND_RESULT, Rac.Status.OK, 10, c.header().requestId(), 1, 0, 0, 0).encode();
          c.conn().write(h);
          c.conn().write(text("abc"));
          c.conn().close();
        });
        Client client = Client.connect("127.0.0.1", node.port())) {
      assertThrows(ClosedException.class, () -> client.call("echo", text("x")));
    }
  }

  @Test
  void anAnswerForNoCallOrOfTheWrongKindIsAProtocolException() throws Exception {
    try (FakeNode node = new FakeNode(c -> c.conn().answer(c, c.header().requestId() + 100, Rac.Status.OK, new byte[0]));
        Client client = Client.connect("127.0.0.1", node.port())) {
      assertTrue(assertThrows(ProtocolException.class, () -> client.call("echo", text("x"))).getMessage().contains("not in flight"));
    }
    try (FakeNode node = new FakeNode(c -> {
          FakeNode.Call asControl = new FakeNode.Call(new Rac.CallHeader(Rac.KIND_CONTROL, 0xFFFF, 0, c.header().requestId(), 0, Params.none()), c.payload(), c.conn());
          c.conn().answer(asControl, Rac.Status.OK, new byte[0]);
        });
        Client client = Client.connect("127.0.0.1", node.port())) {
      assertTrue(assertThrows(ProtocolException.class, () -> client.call("echo", text("x"))).getMessage().contains("kind 4"));
    }
  }

  @Test
  void anAnswerToTheConnectionEndsEveryCallWithItsStatus() throws Exception {
    try (FakeNode node = new FakeNode(c -> {
          c.conn().answer(c, 0, Rac.Status.BUSY, text("at the connection limit"));
          c.conn().close();
        });
        Client client = Client.connect("127.0.0.1", node.port())) {
      assertThrows(BusyException.class, () -> client.call("echo", text("x")));
      assertThrows(ClosedException.class, () -> client.call("echo", text("x")));
    }
  }

  @Test
  void aTimeoutEndsACallTheNodeNeverAnswers() throws Exception {
    try (FakeNode node = new FakeNode(c -> {});
        Client client = Client.connect("127.0.0.1", node.port())) {
      long t0 = System.nanoTime();
      DeadlineException e = assertThrows(DeadlineException.class, () -> client.call("echo", text("x"), CallOptions.none().timeout(Duration.ofMillis(50))));
      assertTrue(e.local());
      assertTrue(System.nanoTime() - t0 < 5_000_000_000L);
    }
  }

  @Test
  void helloAndARefusedHello() throws Exception {
    try (FakeNode node = new FakeNode(c -> {
          Map<?, ?> req = (Map<?, ?>) Json.parse(new String(c.payload(), StandardCharsets.UTF_8));
          if (!"right".equals(req.get("token"))) {
            c.conn().answer(c, Rac.Status.UNAUTHORIZED, text("wrong token"));
          } else {
            c.conn().answer(c, Rac.Status.OK, text("{\"tenant\":\"" + req.get("tenant") + "\"}"));
          }
        })) {
      try (Client client = Client.connect(new Client.Options().address("127.0.0.1", node.port()).tenant("team-a", "right"))) {
        assertEquals(Map.of("tenant", "team-b"), client.hello("team-b", "right"));
      }
      RacException e = assertThrows(RacException.class, () -> Client.connect(new Client.Options().address("127.0.0.1", node.port()).tenant("team-a", "wrong")));
      assertEquals(Rac.Status.UNAUTHORIZED, e.status());
    }
  }

  @Test
  void connectingWhereNobodyListensIsClosed() throws Exception {
    int port;
    try (ServerSocket s = new ServerSocket(0)) {
      port = s.getLocalPort();
    }
    assertThrows(ClosedException.class, () -> Client.connect("127.0.0.1", port));
  }

  @Test
  void jsonReadsAndWritesWhatTheNodeSends() {
    Object doc = Json.parse("{\"a\":[1,-2.5,true,null,\"\\u00e9\\n\"],\"b\":{}}");
    assertEquals("{\"a\":[1,-2.5,true,null,\"é\\n\"],\"b\":{}}", Json.write(doc));
    assertThrows(IllegalArgumentException.class, () -> Json.parse("{\"a\":1} x"));
    assertThrows(IllegalArgumentException.class, () -> Json.parse("[".repeat(100)));
    assertArrayEquals(new byte[44], Params.none());
  }

  private static void sleep(long ms) {
    try {
      Thread.sleep(ms);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }
}
