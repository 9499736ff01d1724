package io.netaccel.client;

import java.io.IOException;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The registry's HTTP API, with the replica failover of the Rust and Python clients.
 *
 * <p>{@code url} is one registry, or several replicas comma-separated. A request goes to
 * the replica that answered last, then to the next one (or, right after a follower's
 * {@code 503 NOT_LEADER}, to the leader its {@code Location} names) when a replica cannot
 * be reached or answers 503, each at most once per round. While no replica takes a request
 * but some answer 503 (an election settling), rounds repeat every {@link #ROUND_PAUSE} for
 * up to the election wait; a round in which nobody answered ends at once.
 */
public final class RegistryClient {
  /** Registry replicas a client may list (more are ignored). */
  public static final int REPLICAS_MAX = 8;
  /** How long a request goes round the replicas while some answer 503 (default). */
  public static final Duration ELECTION_WAIT = Duration.ofSeconds(10);
  /** Pause between two rounds. */
  public static final Duration ROUND_PAUSE = Duration.ofMillis(100);
  /** Longest a registry request may take (it must outlast the longest long poll). */
  public static final Duration REQUEST_TIMEOUT = Duration.ofSeconds(90);
  /** Largest registry answer read. */
  public static final int RESPONSE_BYTES_MAX = 64 << 20;

  private final List<String> urls;
  private final String token;
  private final Duration electionWait;
  private final HttpClient http;
  private volatile int preferred;

  /** A client of the registry (or replicas) at {@code url}, with a bearer {@code token} (may be null). */
  public RegistryClient(String url, String token) {
    this(url, token, ELECTION_WAIT);
  }

  /** As above, with the election wait given. */
  public RegistryClient(String url, String token, Duration electionWait) {
    List<String> bases = new ArrayList<>();
    for (String u : url.split(",")) {
      if (!u.isBlank() && bases.size() < REPLICAS_MAX) {
        bases.add(base(u));
      }
    }
    this.urls = bases.isEmpty() ? List.of(base(url)) : List.copyOf(bases);
    this.token = token;
    this.electionWait = electionWait;
    this.http = HttpClient.newBuilder().followRedirects(HttpClient.Redirect.NEVER).connectTimeout(Duration.ofSeconds(10)).build();
  }

  private static String base(String url) {
    String u = url.strip().replaceAll("/+$", "");
    return u.contains("://") ? u : "http://" + u;
  }

  /** The replicas, as given. */
  public List<String> urls() {
    return urls;
  }

  /** One request, in rounds; the parsed JSON answer ({@code null} for an empty one). */
  public Object request(String method, String path, Object body) {
    String data = body == null ? null : Json.write(body);
    long settled = System.nanoTime() + electionWait.toNanos();
    List<String> unreachable = new ArrayList<>();
    RegistryException refusal = null;
    while (true) {
      Object[] round = round(method, path, data, unreachable);
      if (round[0] != null) {
        String text = (String) round[0];
        return text.isEmpty() ? null : Json.parse(text);
      }
      RegistryException last = (RegistryException) round[1];
      refusal = last != null ? last : refusal;
      if (last == null || System.nanoTime() + ROUND_PAUSE.toNanos() >= settled) {
        break;
      }
      pause(ROUND_PAUSE);
    }
    throw refusal != null ? refusal : new RegistryException(0, "UNREACHABLE", String.join("; ", unreachable));
  }

  /** One round: {@code [text, null]} with an answer, else {@code [null, the last 503]}. */
  private Object[] round(String method, String path, String data, List<String> unreachable) {
    Deque<String> order = new ArrayDeque<>();
    for (int i = 0; i < urls.size(); i++) {
      order.add(urls.get((preferred + i) % urls.size()));
    }
    Set<String> asked = new HashSet<>();
    RegistryException refusal = null;
    while (!order.isEmpty()) {
      String at = order.poll();
      if (!asked.add(at)) {
        continue;
      }
      HttpResponse<String> res;
      try {
        res = send(at, method, path, data);
      } catch (IOException e) {
        unreachable.add("cannot reach the registry at " + at + ": " + e);
        continue;
      }
      if (res.statusCode() < 400) {
        int i = urls.indexOf(at);
        if (i >= 0) {
          preferred = i;
        }
        return new Object[] {res.body(), null};
      }
      RegistryException error = error(res);
      if (res.statusCode() != 503) {
        throw error;
      }
      res.headers().firstValue("Location").map(RegistryClient::origin).ifPresent(order::addFirst);
      refusal = error;
    }
    return new Object[] {null, refusal};
  }

  private HttpResponse<String> send(String at, String method, String path, String data) throws IOException {
    HttpRequest.Builder b = HttpRequest.newBuilder(URI.create(at + path)).timeout(REQUEST_TIMEOUT);
    b.method(method, data == null ? HttpRequest.BodyPublishers.noBody() : HttpRequest.BodyPublishers.ofString(data));
    if (data != null) {
      b.header("Content-Type", "application/json");
    }
    if (token != null && !token.isEmpty()) {
      b.header("Authorization", "Bearer " + token);
    }
    try {
      HttpResponse<String> res = http.send(b.build(), HttpResponse.BodyHandlers.ofString(StandardCharsets.UTF_8));
      if (res.body().length() > RESPONSE_BYTES_MAX) {
        throw new IOException("answer above " + RESPONSE_BYTES_MAX + " bytes");
      }
      return res;
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IOException("interrupted", e);
    }
  }

  private static RegistryException error(HttpResponse<String> res) {
    String code = "UNKNOWN";
    String message = res.body();
    try {
      if (Json.parse(res.body()) instanceof Map<?, ?> doc) {
        code = String.valueOf(doc.containsKey("code") ? doc.get("code") : code);
        message = String.valueOf(doc.containsKey("error") ? doc.get("error") : "");
      }
    } catch (IllegalArgumentException notJson) {
      // the text is the message
    }
    return new RegistryException(res.statusCode(), code, message);
  }

  private static String origin(String location) {
    try {
      URI u = URI.create(location);
      return u.getScheme() != null && u.getRawAuthority() != null ? u.getScheme() + "://" + u.getRawAuthority() : null;
    } catch (IllegalArgumentException e) {
      return null;
    }
  }

  private static String q(String segment) {
    return URLEncoder.encode(segment, StandardCharsets.UTF_8).replace("+", "%20");
  }

  static void pause(Duration d) {
    try {
      Thread.sleep(d.toMillis());
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  /** {@code GET /v1/nodes}. */
  public List<?> nodes() {
    return (List<?>) RegistryApi.parse("nodes", request("GET", "/v1/nodes", null));
  }

  /** A function and its instances' bindings. */
  public Map<?, ?> function(String name) {
    return (Map<?, ?>) RegistryApi.parse("function", request("GET", "/v1/functions/" + q(name), null));
  }

  /** Creates or replaces a function. */
  public Map<?, ?> putFunction(String name, String accelerator, long instances, Map<String, String> query) {
    Map<String, Object> spec = new LinkedHashMap<>();
    spec.put("accelerator", accelerator);
    spec.put("instances", instances);
    spec.put("query", new LinkedHashMap<>(query));
    Object body = RegistryApi.dump("function-spec", RegistryApi.parse("function-spec", spec));
    return (Map<?, ?>) RegistryApi.parse("function", request("PUT", "/v1/functions/" + q(name), body));
  }

  /** Deletes a function. */
  public void deleteFunction(String name) {
    request("DELETE", "/v1/functions/" + q(name), null);
  }

  /** Binds a new instance (or the one named {@code id}), on {@code node} if given; both may be null. */
  public Binding createInstance(String function, String id, String node) {
    Map<String, Object> spec = new LinkedHashMap<>();
    spec.put("id", id);
    spec.put("node", node);
    Object body = RegistryApi.dump("instance-spec", RegistryApi.parse("instance-spec", spec));
    return Binding.fromJson(request("POST", "/v1/functions/" + q(function) + "/instances", body));
  }

  /** The binding; with {@code after}, waits up to {@code wait} for one whose generation is not {@code after}. */
  public Binding instance(String function, String id, Long after, Duration wait) {
    String path = "/v1/functions/" + q(function) + "/instances/" + q(id);
    if (after != null) {
      path += "?after=" + after + "&wait_ms=" + wait.toMillis();
    }
    return Binding.fromJson(request("GET", path, null));
  }

  /**
   * Tells the registry this client could not reach the node of the instance's binding
   * {@code generation}: if that binding is still current, the registry moves the instance
   * to another node. Returns the binding then.
   */
  public Binding reportUnreachable(String function, String id, long generation) {
    Map<String, Object> report = new LinkedHashMap<>();
    report.put("generation", generation);
    return Binding.fromJson(request("POST", "/v1/functions/" + q(function) + "/instances/" + q(id) + "/unreachable", report));
  }

  /** Releases an instance. */
  public void deleteInstance(String function, String id) {
    request("DELETE", "/v1/functions/" + q(function) + "/instances/" + q(id), null);
  }
}
