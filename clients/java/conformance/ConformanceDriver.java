import io.netaccel.client.BoundClient;
import io.netaccel.client.BusyException;
import io.netaccel.client.CallOptions;
import io.netaccel.client.Client;
import io.netaccel.client.ClosedException;
import io.netaccel.client.DeadlineException;
import io.netaccel.client.Json;
import io.netaccel.client.NoBindingException;
import io.netaccel.client.ProtocolException;
import io.netaccel.client.Rac;
import io.netaccel.client.RacException;
import io.netaccel.client.RegistryClient;
import io.netaccel.client.RegistryException;
import io.netaccel.client.Tls;
import io.netaccel.client.UnavailableException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;

/**
 * The conformance driver of the Java client: runs one case of
 * clients/conformance/cases.json with the library's public API and prints one JSON line of
 * what it observed (the format is in clients/conformance/README.md).
 */
public final class ConformanceDriver {
  private ConformanceDriver() {}

  private static final Map<Rac.Status, String> KINDS = new HashMap<>();

  static {
    KINDS.put(Rac.Status.BAD_REQUEST, "bad_request");
    KINDS.put(Rac.Status.UNKNOWN_ACCELERATOR, "unknown_accelerator");
    KINDS.put(Rac.Status.BUSY, "busy");
    KINDS.put(Rac.Status.TOO_LARGE, "too_large");
    KINDS.put(Rac.Status.DEADLINE_EXCEEDED, "deadline");
    KINDS.put(Rac.Status.UNAVAILABLE, "unavailable");
    KINDS.put(Rac.Status.UNAUTHORIZED, "unauthorized");
    KINDS.put(Rac.Status.INTERNAL, "internal");
    KINDS.put(Rac.Status.PROTOCOL_ERROR, "protocol");
  }

  static Map<String, Object> errorOf(Throwable e) {
    if (e instanceof CompletionException && e.getCause() != null) {
      e = e.getCause();
    }
    Map<String, Object> m = new LinkedHashMap<>();
    String message = String.valueOf(e.getMessage());
    if (e instanceof DeadlineException d && d.local()) {
      m.put("kind", "deadline");
    } else if (e instanceof RacException r) {
      m.put("kind", KINDS.get(r.status()));
      m.put("status", r.status().name());
      m.put("retryable", r.status() == Rac.Status.BUSY || r.status() == Rac.Status.UNAVAILABLE);
      if (r instanceof BusyException b) {
        m.put("retry_after_ms", b.retryAfter().toMillis());
      } else if (r instanceof UnavailableException u) {
        m.put("retry_after_ms", u.retryAfter().toMillis());
      }
    } else if (e instanceof ProtocolException) {
      m.put("kind", "protocol");
    } else if (e instanceof ClosedException) {
      m.put("kind", "closed");
    } else if (e instanceof RegistryException) {
      m.put("kind", "registry");
    } else if (e instanceof NoBindingException) {
      m.put("kind", "unavailable");
    } else if (e instanceof IllegalArgumentException) {
      m.put("kind", "bad_request");
    } else {
      m.put("kind", "internal");
      message = e.getClass().getSimpleName() + ": " + message;
    }
    m.put("message", message);
    return m;
  }

  static byte[] payloadOf(Map<?, ?> call) {
    if (call.get("payload_fill") instanceof Map<?, ?> fill) {
      byte[] b = new byte[((Number) fill.get("len")).intValue()];
      Arrays.fill(b, (byte) Integer.parseInt((String) fill.get("byte"), 16));
      return b;
    }
    return HexFormat.of().parseHex((String) call.get("payload_hex"));
  }

  static CallOptions optionsOf(Map<?, ?> call) {
    CallOptions o = CallOptions.none();
    if (call.get("params") instanceof Map<?, ?> params) {
      for (Map.Entry<?, ?> e : params.entrySet()) {
        o = o.param((String) e.getKey(), (Number) e.getValue());
      }
    }
    if (call.get("deadline_us") instanceof Number d && d.longValue() > 0) {
      o = o.deadline(Duration.ofNanos(d.longValue() * 1000));
    }
    return o;
  }

  static CompletableFuture<byte[]> send(Client client, Map<?, ?> call) {
    try {
      if (call.get("accelerator_id") instanceof Number id) {
        return client.requestAsync(id.intValue(), payloadOf(call), optionsOf(call)).thenApply(r -> r.orThrow());
      }
      return client.callAsync((String) call.get("accelerator"), payloadOf(call), optionsOf(call));
    } catch (RuntimeException e) {
      return CompletableFuture.failedFuture(e);
    }
  }

  static void runCalls(Client client, Map<?, ?> c, Map<String, Object> report) {
    List<?> calls = (List<?>) c.get("calls");
    List<Object> outputs = castList(report.get("outputs"));
    List<Object> order = castList(report.get("order"));
    List<Map<String, Object>> errors = new ArrayList<>();
    List<CompletableFuture<Void>> all = new ArrayList<>();
    for (int i = 0; i < calls.size(); i++) {
      errors.add(null);
    }
    for (int i = 0; i < calls.size(); i++) {
      int index = i;
      CompletableFuture<Void> done = send(client, (Map<?, ?>) calls.get(i)).handle((out, e) -> {
        synchronized (report) {
          if (e == null) {
            order.add(index);
            outputs.set(index, HexFormat.of().formatHex(out));
          } else {
            Throwable cause = e instanceof CompletionException && e.getCause() != null ? e.getCause() : e;
            if (cause instanceof RacException r && r.requestId() != 0) {
              order.add(index);
            }
            errors.set(index, errorOf(cause));
          }
        }
        return null;
      });
      if ("sync".equals(c.get("mode"))) {
        done.join();
      }
      all.add(done);
    }
    CompletableFuture.allOf(all.toArray(new CompletableFuture<?>[0])).join();
    for (int i = 0; i < errors.size(); i++) {
      if (errors.get(i) != null) {
        report.put("ok", false);
        Map<String, Object> e = new LinkedHashMap<>(errors.get(i));
        e.put("call", i);
        report.put("error", e);
        return;
      }
    }
  }

  @SuppressWarnings("unchecked")
  static List<Object> castList(Object o) {
    return (List<Object>) o;
  }

  static void runRegistry(Map<String, String> args, Map<?, ?> c, Map<String, Object> report) {
    RegistryClient registry = new RegistryClient(args.get("--registry"), args.get("--token"));
    try (BoundClient bound = BoundClient.bind(registry, (String) c.get("function"), null, Duration.ofSeconds(10), null, true)) {
      List<?> calls = (List<?>) c.get("calls");
      for (int i = 0; i < calls.size(); i++) {
        Map<?, ?> call = (Map<?, ?>) calls.get(i);
        castList(report.get("outputs")).set(i, HexFormat.of().formatHex(bound.call(payloadOf(call), optionsOf(call))));
        castList(report.get("order")).add(i);
      }
    }
  }

  static Client connect(Map<String, String> args) {
    String node = args.get("--node");
    int colon = node.lastIndexOf(':');
    Client.Options o = new Client.Options().address(node.substring(0, colon), Integer.parseInt(node.substring(colon + 1))).maxInFlight(256);
    if (args.containsKey("--tls-ca")) {
      Path cert = args.containsKey("--cert") ? Path.of(args.get("--cert")) : null;
      Path key = args.containsKey("--key") ? Path.of(args.get("--key")) : null;
      o.tls(new Tls(Path.of(args.get("--tls-ca")), cert, key));
    }
    if (args.containsKey("--tenant")) {
      o.tenant(args.get("--tenant"), args.get("--token"));
    }
    return Client.connect(o);
  }

  public static void main(String[] argv) throws Exception {
    Map<String, String> args = new HashMap<>();
    for (int i = 0; i + 1 < argv.length; i += 2) {
      args.put(argv[i], argv[i + 1]);
    }
    Map<?, ?> cases = (Map<?, ?>) Json.parse(Files.readString(Path.of(args.get("--cases"))));
    Map<?, ?> c = ((List<?>) cases.get("cases")).stream().map(x -> (Map<?, ?>) x)
        .filter(x -> x.get("name").equals(args.get("--case"))).findFirst().orElseThrow();
    Map<String, Object> report = new LinkedHashMap<>();
    report.put("ok", true);
    List<Object> outputs = new ArrayList<>();
    for (int i = 0; i < ((List<?>) c.get("calls")).size(); i++) {
      outputs.add(null);
    }
    report.put("outputs", outputs);
    report.put("order", new ArrayList<>());
    try {
      if (args.containsKey("--registry")) {
        runRegistry(args, c, report);
      } else {
        Client client;
        try {
          client = connect(args);
        } catch (RacException e) {
          throw e;
        } catch (ClosedException e) {
          Map<String, Object> err = new LinkedHashMap<>();
          err.put("kind", "connect");
          err.put("call", 0);
          err.put("message", String.valueOf(e.getMessage()));
          report.put("ok", false);
          report.put("error", err);
          System.out.println(Json.write(report));
          return;
        }
        try (client) {
          runCalls(client, c, report);
        }
      }
    } catch (RuntimeException e) {
      report.put("ok", false);
      Map<String, Object> err = errorOf(e);
      err.put("call", castList(report.get("order")).size());
      report.put("error", err);
    }
    System.out.println(Json.write(report));
  }
}
