package io.netaccel.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** The registry's bodies against the golden fixtures, and the bound client against a fake registry. */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class RegistryTest {
  private static List<Path> fixtures() throws IOException {
    try (Stream<Path> s = Files.list(Spec.dir().resolve("registry"))) {
      return s.filter(p -> p.toString().endsWith(".json")).sorted().toList();
    }
  }

  /** JSON trees equal, numbers by value (0 and 0.0 are one number in JSON). */
  private static boolean same(Object a, Object b) {
    if (a instanceof Number x && b instanceof Number y) {
      return x.doubleValue() == y.doubleValue();
    }
    if (a instanceof Map<?, ?> x && b instanceof Map<?, ?> y) {
      return x.keySet().equals(y.keySet()) && x.keySet().stream().allMatch(k -> same(x.get(k), y.get(k)));
    }
    if (a instanceof List<?> x && b instanceof List<?> y) {
      if (x.size() != y.size()) {
        return false;
      }
      for (int i = 0; i < x.size(); i++) {
        if (!same(x.get(i), y.get(i))) {
          return false;
        }
      }
      return true;
    }
    return java.util.Objects.equals(a, b);
  }

  @Test
  void everyFixtureRoundTripsThroughItsSchema() throws IOException {
    assertTrue(fixtures().size() >= RegistryApi.BODIES.size());
    for (Path p : fixtures()) {
      String schema = RegistryApi.schemaOfFixture(p.getFileName().toString());
      assertNotNull(schema, p + ": no schema for it");
      Object doc = Json.parse(Files.readString(p));
      Object back = RegistryApi.dump(schema, RegistryApi.parse(schema, doc));
      assertTrue(same(doc, back), p.getFileName() + ": " + Json.write(back));
    }
  }

  @Test
  void everyBodyHasAFixture() throws IOException {
    Set<String> have = fixtures().stream().map(p -> RegistryApi.schemaOfFixture(p.getFileName().toString())).collect(Collectors.toSet());
    for (String body : RegistryApi.BODIES) {
      assertTrue(have.contains(body), body);
    }
  }

  @SuppressWarnings("unchecked")
  private static Map<String, Object> load(String name) throws IOException {
    return (Map<String, Object>) Json.parse(Files.readString(Spec.dir().resolve("registry").resolve(name)));
  }

  @Test
  void documentsOfTheWrongShapeAreRefused() throws IOException {
    Map<String, Object> binding = load("binding.json");
    Object[][] cases = {{"slot", 70000L, "0..=65535"}, {"generation", "4", "integer"}, {"http", "nowhere", "HOST:PORT"}, {"id", null, "null"}};
    for (Object[] c : cases) {
      Map<String, Object> changed = new LinkedHashMap<>(binding);
      changed.put((String) c[0], c[1]);
      RegistryApi.ShapeException e = assertThrows(RegistryApi.ShapeException.class, () -> RegistryApi.parse("binding", changed));
      assertTrue(e.getMessage().contains((String) c[2]), e.getMessage());
    }
    Map<String, Object> without = new LinkedHashMap<>(binding);
    without.remove("function");
    assertTrue(assertThrows(RegistryApi.ShapeException.class, () -> RegistryApi.parse("binding", without)).getMessage().contains("function is missing"));
    Map<String, Object> reg = new LinkedHashMap<>(load("node-registration.json"));
    reg.put("temperature", 40L);
    assertTrue(assertThrows(RegistryApi.ShapeException.class, () -> RegistryApi.parse("node-registration", reg)).getMessage().contains("unknown fields"));
    Map<String, Object> newer = new LinkedHashMap<>(binding);
    newer.put("zone", "b");
    assertEquals(binding.get("id"), Binding.fromJson(newer).id());
  }

  interface Route {
    Object[] answer(String method, String uri) throws Exception;
  }

  /** A registry replica: each request answered with {status, body, location-or-null}. */
  private static HttpServer registry(Route route) throws IOException {
    HttpServer s = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 16);
    s.createContext("/", ex -> {
      try {
        ex.getRequestBody().readAllBytes();
        Object[] a = route.answer(ex.getRequestMethod(), ex.getRequestURI().toString());
        byte[] body = a[1] == null ? new byte[0] : Json.write(a[1]).getBytes(StandardCharsets.UTF_8);
        if (a.length > 2 && a[2] != null) {
          ex.getResponseHeaders().add("Location", (String) a[2]);
        }
        ex.sendResponseHeaders((Integer) a[0], body.length == 0 ? -1 : body.length);
        try (OutputStream out = ex.getResponseBody()) {
          out.write(body);
        }
      } catch (Exception e) {
        ex.sendResponseHeaders(500, -1);
      }
    });
    s.setExecutor(java.util.concurrent.Executors.newCachedThreadPool(r -> {
      Thread t = new Thread(r);
      t.setDaemon(true);
      return t;
    }));
    s.start();
    return s;
  }

  private static String url(HttpServer s) {
    return "http://127.0.0.1:" + s.getAddress().getPort();
  }

  private static Map<String, Object> binding(long generation, String rac) throws IOException {
    Map<String, Object> b = new LinkedHashMap<>(load("binding.json"));
    b.put("id", "i1");
    b.put("function", "shout");
    b.put("generation", generation);
    b.put("rac", rac);
    b.put("rac_tls", null);
    b.put("slot", rac == null ? null : 0L);
    return b;
  }

  private static Map<String, Object> function() throws IOException {
    Map<String, Object> f = new LinkedHashMap<>(load("function.json"));
    f.put("name", "shout");
    f.put("accelerator", "echo");
    return f;
  }

  @Test
  void aFollowersNotLeaderSendsTheWriteToTheLeaderItNames() throws Exception {
    List<String> asked = Collections.synchronizedList(new ArrayList<>());
    Map<String, Object> b1 = binding(1, "127.0.0.1:1");
    HttpServer leader = registry((m, u) -> {
      asked.add("leader " + m + " " + u);
      return new Object[] {200, b1};
    });
    HttpServer follower = registry((m, u) -> {
      asked.add("follower " + m + " " + u);
      return new Object[] {503, Map.of("error", "not the leader", "code", "NOT_LEADER"), url(leader) + u};
    });
    try {
      RegistryClient reg = new RegistryClient("http://127.0.0.1:1," + url(follower), null);
      assertEquals(1, reg.createInstance("shout", null, null).generation());
      assertEquals(List.of("follower POST /v1/functions/shout/instances", "leader POST /v1/functions/shout/instances"), asked);
    } finally {
      leader.stop(0);
      follower.stop(0);
    }
  }

  @Test
  void whileEveryReplicaAnswers503TheRequestGoesRoundUntilTheElectionWait() throws Exception {
    AtomicInteger n = new AtomicInteger();
    HttpServer r = registry((m, u) -> {
      n.incrementAndGet();
      return new Object[] {503, Map.of("error", "electing", "code", "UNAVAILABLE")};
    });
    try {
      RegistryClient reg = new RegistryClient(url(r), null, Duration.ofMillis(400));
      RegistryException e = assertThrows(RegistryException.class, () -> reg.function("shout"));
      assertEquals(503, e.status());
      assertEquals("UNAVAILABLE", e.code());
      assertTrue(n.get() >= 3, "asked " + n.get() + " times");
      assertEquals(0, assertThrows(RegistryException.class, () -> new RegistryClient("http://127.0.0.1:1", null).function("x")).status());
    } finally {
      r.stop(0);
    }
  }

  @Test
  void aBoundClientFollowsAMigrationAndRebindsAfterALostNode() throws Exception {
    FakeNode a = new FakeNode(c -> c.conn().answer(c, Rac.Status.OK, c.payload()));
    FakeNode b = new FakeNode(c -> c.conn().answer(c, Rac.Status.OK, c.payload()));
    AtomicReference<Map<String, Object>> current = new AtomicReference<>(binding(1, a.addr()));
    Map<String, Object> fn = function();
    HttpServer r = registry((m, u) -> {
      if (m.equals("GET") && u.equals("/v1/functions/shout")) {
        return new Object[] {200, fn};
      }
      if (m.equals("DELETE")) {
        return new Object[] {204, null};
      }
      if (m.equals("GET") && u.contains("after=" + current.get().get("generation"))) {
        Thread.sleep(100);
      }
      return new Object[] {200, current.get()};
    });
    try (BoundClient bound = BoundClient.bind(new RegistryClient(url(r), null), "shout", null, Duration.ofSeconds(5), null, true)) {
      assertEquals("one", new String(bound.call("one".getBytes(StandardCharsets.UTF_8), CallOptions.none()), StandardCharsets.UTF_8));
      current.set(binding(2, b.addr()));
      a.close();
      assertEquals("two", new String(bound.call("two".getBytes(StandardCharsets.UTF_8), CallOptions.none()), StandardCharsets.UTF_8));
      // The client follows the migration: its watcher takes generation 2 within one of
      // the registry's polls (100 ms here) if the call itself did not. Asserted at once,
      // this failed now and then under load with the call answered and generation 1
      // still held (once in a CI run, once in six local runs under load).
      long until = System.nanoTime() + 5_000_000_000L;
      while (!b.addr().equals(bound.binding().rac()) && System.nanoTime() < until) {
        Thread.sleep(10);
      }
      assertEquals(b.addr(), bound.binding().rac(), "a=" + a.addr() + " b=" + b.addr() + " binding=" + bound.binding());
    } finally {
      b.close();
      r.stop(0);
    }
  }

  @Test
  void threadsCallingAtOnceShareOneNodeConnection() throws Exception {
    AtomicInteger answered = new AtomicInteger();
    FakeNode node = new FakeNode(c -> c.conn().answer(c, Rac.Status.OK, c.payload()));
    Map<String, Object> b1 = binding(1, node.addr());
    Map<String, Object> fn = function();
    HttpServer r = registry((m, u) -> {
      if (m.equals("GET") && u.equals("/v1/functions/shout")) {
        return new Object[] {200, fn};
      }
      if (m.equals("GET") && u.contains("after=")) {
        Thread.sleep(200);
      }
      return new Object[] {m.equals("DELETE") ? 204 : 200, m.equals("DELETE") ? null : b1};
    });
    try (BoundClient bound = BoundClient.bind(new RegistryClient(url(r), null), "shout", null, Duration.ofSeconds(2), null, true)) {
      List<Thread> threads = new ArrayList<>();
      List<Throwable> failures = Collections.synchronizedList(new ArrayList<>());
      for (int i = 0; i < 8; i++) {
        byte[] payload = ("t" + i).getBytes(StandardCharsets.UTF_8);
        Thread t = new Thread(() -> {
          try {
            assertEquals(new String(payload, StandardCharsets.UTF_8), new String(bound.call(payload, CallOptions.none()), StandardCharsets.UTF_8));
            answered.incrementAndGet();
          } catch (Throwable e) {
            failures.add(e);
          }
        });
        threads.add(t);
        t.start();
      }
      for (Thread t : threads) {
        t.join();
      }
      assertEquals(List.of(), failures);
      assertEquals(8, answered.get());
    } finally {
      node.close();
      r.stop(0);
    }
  }

  @Test
  void aNodeAnsweringUnavailableIsAStaleBinding() throws Exception {
    FakeNode sick = new FakeNode(c -> c.conn().answer(c, Rac.Status.UNAVAILABLE, "no".getBytes(StandardCharsets.UTF_8)));
    FakeNode well = new FakeNode(c -> c.conn().answer(c, Rac.Status.OK, c.payload()));
    AtomicReference<Map<String, Object>> current = new AtomicReference<>(binding(1, sick.addr()));
    Map<String, Object> fn = function();
    HttpServer r = registry((m, u) -> {
      if (m.equals("GET") && u.equals("/v1/functions/shout")) {
        return new Object[] {200, fn};
      }
      if (m.equals("GET") && u.contains("after=1")) {
        current.set(binding(2, well.addr()));
      }
      return new Object[] {m.equals("DELETE") ? 204 : 200, m.equals("DELETE") ? null : current.get()};
    });
    try (BoundClient bound = BoundClient.bind(new RegistryClient(url(r), null), "shout", "i1", Duration.ofSeconds(5), null, false)) {
      assertEquals("x", new String(bound.call("x".getBytes(StandardCharsets.UTF_8), CallOptions.none()), StandardCharsets.UTF_8));
    } finally {
      sick.close();
      well.close();
      r.stop(0);
    }
  }

  @Test
  void anUnreachableOrSilentNodeIsReportedAndTheCallRetriedOnTheAnsweredBinding() throws Exception {
    FakeNode well = new FakeNode(c -> c.conn().answer(c, Rac.Status.OK, c.payload()));
    FakeNode silent = new FakeNode(c -> { }); // reads calls, never answers
    Map<String, Object> fn = function();
    try {
      for (Object[] c : new Object[][] {{"127.0.0.1:1", null}, {silent.addr(), Duration.ofMillis(300)}}) {
        AtomicReference<Map<String, Object>> current = new AtomicReference<>(binding(1, (String) c[0]));
        List<String> reports = Collections.synchronizedList(new ArrayList<>());
        HttpServer r = registry((m, u) -> {
          if (m.equals("GET") && u.equals("/v1/functions/shout")) {
            return new Object[] {200, fn};
          }
          if (m.equals("POST") && u.endsWith("/unreachable")) {
            reports.add(u);
            current.set(binding(2, well.addr()));
          }
          if (m.equals("GET") && u.contains("after=")) {
            Thread.sleep(100); // nothing moves on its own
          }
          return new Object[] {m.equals("DELETE") ? 204 : 200, m.equals("DELETE") ? null : current.get()};
        });
        long started = System.nanoTime();
        try (BoundClient bound = BoundClient.bind(new RegistryClient(url(r), null), "shout", null, Duration.ofSeconds(60), null, true, (Duration) c[1])) {
          assertEquals("x", new String(bound.call("x".getBytes(StandardCharsets.UTF_8), CallOptions.none()), StandardCharsets.UTF_8));
          assertEquals(List.of("/v1/functions/shout/instances/i1/unreachable"), reports, (String) c[0]);
          assertEquals(2, bound.binding().generation());
          assertTrue(System.nanoTime() - started < 5_000_000_000L, "the call took " + (System.nanoTime() - started) / 1_000_000 + " ms");
        } finally {
          r.stop(0);
        }
      }
    } finally {
      well.close();
      silent.close();
    }
  }
}
