package io.netaccel.client;

import java.io.BufferedInputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.SSLSocket;

/**
 * A RAC v1 client over one TCP or TLS connection, with pipelining; thread-safe.
 *
 * <p>{@link #callAsync} sends at once and returns a {@link CompletableFuture}; many calls
 * can be out on the one connection, and the node answers them in completion order, matched
 * here by request id on a reader thread. At most {@code maxInFlight} calls are out at a
 * time: a caller past the bound blocks until an answer frees a place (or its timeout
 * passes). Every future completes: with the output, with a typed exception ({@link
 * BusyException}, {@link DeadlineException}, …) when the node refuses the call, with
 * {@link ProtocolException} when its reply is malformed, or with {@link ClosedException}
 * when the connection ends first. {@link #call} is the same, waiting, and throws the typed
 * exception itself.
 *
 * <p>Not here: the byte layout ({@link Rac}, {@link Params}), the registry ({@link
 * BoundClient}).
 */
public final class Client implements AutoCloseable {
  /**
   * The default bound on calls in flight: the node's own bound per connection ({@code
   * rac_in_flight_max}), as in every netaccel client. Past it the node stops reading, so
   * more calls out would only wait in the socket, out of reach of the client's timeouts,
   * and add no throughput.
   */
  public static final int MAX_IN_FLIGHT_DEFAULT = 32;

  /** How to reach a node, and the client's bounds; chain the setters. */
  public static final class Options {
    String host = "127.0.0.1";
    int port = Rac.DEFAULT_PORT;
    Tls tls;
    String tenant;
    String token;
    int maxInFlight = MAX_IN_FLIGHT_DEFAULT;
    long maxPayloadLen = 1L << 30;
    Duration connectTimeout = Duration.ofSeconds(10);

    /** The node's host and RAC port. */
    public Options address(String host, int port) {
      this.host = host;
      this.port = port;
      return this;
    }

    /** Speak TLS to the node's RAC-over-TLS listener. */
    public Options tls(Tls tls) {
      this.tls = tls;
      return this;
    }

    /** Say {@code hello} as {@code tenant} with {@code token} (may be null) once connected. */
    public Options tenant(String tenant, String token) {
      this.tenant = tenant;
      this.token = token;
      return this;
    }

    /** Calls out on the connection at once (default {@link #MAX_IN_FLIGHT_DEFAULT}). */
    public Options maxInFlight(int n) {
      if (n < 1) {
        throw new IllegalArgumentException("maxInFlight must be at least 1");
      }
      this.maxInFlight = n;
      return this;
    }

    /** Largest result payload accepted (default 1 GiB, at most 2 GiB - 9: one Java array); a larger one is a {@link ProtocolException}. */
    public Options maxPayloadLen(long n) {
      if (n < 0 || n > Integer.MAX_VALUE - 8) {
        throw new IllegalArgumentException("maxPayloadLen must be in 0..=" + (Integer.MAX_VALUE - 8));
      }
      this.maxPayloadLen = n;
      return this;
    }

    /** How long connecting and the TLS handshake may take (default 10 s). */
    public Options connectTimeout(Duration d) {
      this.connectTimeout = d;
      return this;
    }
  }

  private record Pending(int kind, CompletableFuture<Result> future) {}

  /** Fires local timeouts; one daemon thread for every client. */
  private static final ScheduledExecutorService TIMERS =
      Executors.newSingleThreadScheduledExecutor(
          r -> {
            Thread t = new Thread(r, "netaccel-timeouts");
            t.setDaemon(true);
            return t;
          });
  /** Permits handed out on close so that every blocked caller wakes. */
  private static final int WAKE_ALL = Integer.MAX_VALUE / 2;

  private final Socket socket;
  private final OutputStream out;
  private final InputStream in;
  private final Semaphore places;
  private final int maxInFlight;
  private final long maxPayloadLen;
  private final Map<Long, Pending> pending = new ConcurrentHashMap<>();
  private final Map<String, Integer> names = new ConcurrentHashMap<>(Rac.BUILTIN_IDS);
  private final Map<Integer, List<Params.Spec>> specs = new ConcurrentHashMap<>();
  private final AtomicLong nextId = new AtomicLong(1);
  private volatile NetaccelException closedBy;

  private Client(Socket socket, Options o) throws IOException {
    this.socket = socket;
    this.out = socket.getOutputStream();
    this.in = new BufferedInputStream(socket.getInputStream(), 64 * 1024);
    this.places = new Semaphore(o.maxInFlight);
    this.maxInFlight = o.maxInFlight;
    this.maxPayloadLen = o.maxPayloadLen;
    Rac.BUILTIN_IDS.forEach((name, id) -> specs.put(id, Params.BUILTIN.get(name)));
    Thread reader = new Thread(this::readLoop, "netaccel-reader-" + o.host + ":" + o.port);
    reader.setDaemon(true);
    reader.start();
  }

  /** Connects to a node at {@code host:port} over plain TCP. */
  public static Client connect(String host, int port) {
    return connect(new Options().address(host, port));
  }

  /** Connects to a node (and says {@code hello} when a tenant is given). */
  public static Client connect(Options o) {
    Client c;
    try {
      c = new Client(open(o), o);
    } catch (IOException | GeneralSecurityException e) {
      throw new ClosedException("cannot connect to " + o.host + ":" + o.port + ": " + e.getMessage(), e);
    }
    if (o.tenant != null) {
      try {
        c.hello(o.tenant, o.token);
      } catch (RuntimeException e) {
        c.close();
        throw e;
      }
    }
    return c;
  }

  private static Socket open(Options o) throws IOException, GeneralSecurityException {
    int timeoutMs = (int) Math.min(Integer.MAX_VALUE, o.connectTimeout.toMillis());
    Socket plain = new Socket();
    try {
      plain.setTcpNoDelay(true);
      plain.connect(new InetSocketAddress(o.host, o.port), timeoutMs);
      if (o.tls == null) {
        return plain;
      }
      SSLSocket s = (SSLSocket) o.tls.context().getSocketFactory().createSocket(plain, o.host, o.port, true);
      SSLParameters p = s.getSSLParameters();
      p.setEndpointIdentificationAlgorithm("HTTPS");
      s.setSSLParameters(p);
      s.setSoTimeout(timeoutMs);
      s.startHandshake();
      s.setSoTimeout(0);
      return s;
    } catch (IOException | GeneralSecurityException | RuntimeException e) {
      plain.close();
      throw e;
    }
  }

  /** Calls out whose answer has not arrived. */
  public int inFlight() {
    return pending.size();
  }

  /** True once the connection is closed (by either side); every later call fails. */
  public boolean isClosed() {
    return closedBy != null;
  }

  /** Closes the connection; calls still out fail with {@link ClosedException}. */
  @Override
  public void close() {
    fail(new ClosedException("the client closed the connection"));
  }

  /** Calls {@code accelerator} with {@code payload} and waits; returns the output or throws the typed exception. */
  public byte[] call(String accelerator, byte[] payload) {
    return call(accelerator, payload, CallOptions.none());
  }

  /** As {@link #call(String, byte[])}, with options. */
  public byte[] call(String accelerator, byte[] payload, CallOptions opts) {
    return await(callAsync(accelerator, payload, opts));
  }

  /** Sends a call by accelerator name; the future completes with the output, or the typed exception. */
  public CompletableFuture<byte[]> callAsync(String accelerator, byte[] payload, CallOptions opts) {
    return requestAsync(accelerator, payload, opts).thenApply(Result::orThrow);
  }

  /** Sends a call by accelerator name; the future completes with the {@link Result}, whatever its status. */
  public CompletableFuture<Result> requestAsync(String accelerator, byte[] payload, CallOptions opts) {
    return requestAsync(resolve(accelerator), accelerator, payload, opts);
  }

  /** Sends a call by accelerator id; the future completes with the {@link Result}, whatever its status. */
  public CompletableFuture<Result> requestAsync(int accelId, byte[] payload, CallOptions opts) {
    return requestAsync(accelId, "accelerator " + accelId, payload, opts);
  }

  private CompletableFuture<Result> requestAsync(int accelId, String name, byte[] payload, CallOptions opts) {
    if (accelId == Rac.CONTROL_ACCEL_ID) {
      throw new IllegalArgumentException("accelerator id 0xffff is reserved for control messages");
    }
    byte[] params = opts.rawParams() != null ? opts.rawParams() : paramsFor(accelId, name, opts.params());
    long deadlineUs = opts.deadline() == null ? 0 : opts.deadline().toNanos() / 1000;
    return send(Rac.KIND_CALL, accelId, payload, params, deadlineUs, opts.timeout());
  }

  /** Says {@code hello}: the connection now belongs to {@code tenant}. */
  public Map<?, ?> hello(String tenant, String token) {
    return (Map<?, ?>) control("hello", Map.of("tenant", tenant), token);
  }

  /** The node's catalog; names and params learnt from it serve later calls. */
  public List<?> catalog() {
    List<?> entries = (List<?>) control("catalog", Map.of(), null);
    for (Object e : entries) {
      Map<?, ?> m = (Map<?, ?>) e;
      int id = ((Number) m.get("id")).intValue();
      names.put((String) m.get("name"), id);
      List<Params.Spec> ps = ((List<?>) m.get("params")).stream().map(p -> Params.Spec.fromJson((Map<?, ?>) p)).toList();
      specs.put(id, ps);
    }
    return entries;
  }

  /** The node's slots ({@code GET /v1/slots}). */
  public List<?> slots() {
    return (List<?>) control("slots", Map.of(), null);
  }

  /** Loads {@code accelerator} into {@code slot} (needs the node's admin token when it has one). */
  public Object load(int slot, String accelerator, String token) {
    Map<String, Object> fields = new java.util.LinkedHashMap<>();
    fields.put("slot", slot);
    fields.put("accelerator", accelerator);
    return control("load", fields, token);
  }

  /** Sends a control message and waits; returns its parsed JSON answer or throws unless OK. */
  public Object control(String op, Map<String, Object> fields, String token) {
    byte[] payload = Params.control(op, fields, token);
    Result r = await(send(Rac.KIND_CONTROL, Rac.CONTROL_ACCEL_ID, payload, Params.none(), 0, null));
    try {
      return Json.parse(new String(r.orThrow(), StandardCharsets.UTF_8));
    } catch (IllegalArgumentException e) {
      throw new ProtocolException("the answer to control op '" + op + "' is not JSON: " + e.getMessage());
    }
  }

  private int resolve(String name) {
    Integer id = names.get(name);
    if (id == null) {
      catalog();
      id = names.get(name);
    }
    if (id == null) {
      throw new RacException(
          Rac.Status.UNKNOWN_ACCELERATOR, 0, "the node's catalog has no accelerator named '" + name + "'");
    }
    return id;
  }

  private byte[] paramsFor(int accelId, String name, Map<String, Number> values) {
    List<Params.Spec> known = specs.get(accelId);
    if (known == null && values.isEmpty()) {
      return Params.none();
    }
    if (known == null) {
      catalog();
      known = specs.get(accelId);
    }
    if (known == null) {
      throw new IllegalArgumentException(
          "the node's catalog has no accelerator with id " + accelId + ": give params as 44 bytes");
    }
    return Params.pack(known, values, name);
  }

  private CompletableFuture<Result> send(
      int kind, int accelId, byte[] payload, byte[] params, long deadlineUs, Duration timeout) {
    NetaccelException closed = closedBy;
    if (closed != null) {
      return CompletableFuture.failedFuture(closed);
    }
    // Encoded first (the request id patched in below), so a bad field throws before
    // the call takes a place.
    byte[] frame = new byte[Rac.HEADER_LEN + payload.length];
    new Rac.CallHeader(kind, accelId, payload.length, 0, deadlineUs, params).encodeInto(frame, 0);
    System.arraycopy(payload, 0, frame, Rac.HEADER_LEN, payload.length);
    acquire(timeout);
    CompletableFuture<Result> future = new CompletableFuture<>();
    long id = newRequestId(new Pending(kind, future));
    if (closedBy != null && pending.remove(id) != null) {
      places.release();
      future.completeExceptionally(closedBy);
      return future;
    }
    if (timeout != null) {
      // The call stays out (and holds its place) until its late answer or the close.
      TIMERS.schedule(
          () -> future.completeExceptionally(new DeadlineException(id, "no answer within " + timeout.toMillis() + " ms", true)),
          timeout.toNanos(),
          TimeUnit.NANOSECONDS);
    }
    java.nio.ByteBuffer.wrap(frame).order(java.nio.ByteOrder.LITTLE_ENDIAN).putInt(12, (int) id);
    try {
      synchronized (out) {
        out.write(frame);
        out.flush();
      }
    } catch (IOException e) {
      // The node may have refused the call and closed; its answer may still be readable,
      // so the reader, not this write, settles the call.
    }
    return future;
  }

  private void acquire(Duration timeout) {
    boolean got;
    try {
      if (timeout == null) {
        places.acquire();
        got = true;
      } else {
        got = places.tryAcquire(timeout.toNanos(), TimeUnit.NANOSECONDS);
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new ClosedException("interrupted while waiting for a place in flight", e);
    }
    if (!got) {
      throw new DeadlineException(0, "no place in flight within " + timeout.toMillis() + " ms", true);
    }
    NetaccelException closed = closedBy;
    if (closed != null) {
      places.release();
      throw closed;
    }
  }

  /** Registers {@code p} under the next id not in flight; ids wrap at 2^32 and skip 0. */
  private long newRequestId(Pending p) {
    while (true) {
      long id = nextId.getAndIncrement() & Rac.U32_MAX;
      if (id != 0 && pending.putIfAbsent(id, p) == null) {
        return id;
      }
    }
  }

  private void readLoop() {
    byte[] head = new byte[Rac.HEADER_LEN];
    try {
      while (closedBy == null) {
        readFully(head, Rac.HEADER_LEN);
        Rac.ResultHeader h = Rac.decodeResult(head, 0, Rac.HEADER_LEN, maxPayloadLen);
        byte[] payload = new byte[(int) h.payloadLen()];
        readFully(payload, payload.length);
        deliver(h, payload);
      }
    } catch (HeaderException e) {
      fail(new ProtocolException("malformed result header (" + e.reason().wireName() + "): " + e.getMessage()));
    } catch (NetaccelException e) {
      fail(e);
    } catch (IOException e) {
      fail(new ClosedException("the connection ended: " + e.getMessage(), e));
    }
  }

  private void readFully(byte[] b, int n) throws IOException {
    int got = 0;
    while (got < n) {
      int k = in.read(b, got, n - got);
      if (k < 0) {
        throw new EOFException(got == 0 ? "the node closed the connection" : "the node closed the connection mid-message");
      }
      got += k;
    }
  }

  private void deliver(Rac.ResultHeader h, byte[] payload) {
    Result r = new Result(h.status(), payload, h.requestId(), h.accelId(), h.slotId(), h.queueNs(), h.execNs());
    if (h.requestId() == 0) {
      // An answer to the connection, not a call (0 is never a call's id): BUSY at the
      // node's connection bound, or PROTOCOL_ERROR. The node closes after it.
      throw RacException.of(h.status(), 0, "the node answered the connection: " + r.text());
    }
    Pending p = pending.get(h.requestId());
    if (p == null) {
      throw new ProtocolException("a result for request " + h.requestId() + ", which is not in flight");
    }
    int want = p.kind() == Rac.KIND_CALL ? Rac.KIND_RESULT : Rac.KIND_CONTROL_RESULT;
    if (h.kind() != want) {
      throw new ProtocolException(
          "a result of kind " + h.kind() + " for request " + h.requestId() + ", which expects kind " + want);
    }
    if (pending.remove(h.requestId()) != null) {
      places.release();
    }
    assert pending.size() <= maxInFlight : "more calls out than places";
    p.future().complete(r);
    if (h.status().closesConnection()) {
      fail(new ClosedException("the node answered " + h.status() + " and closes the connection"));
    }
  }

  /** Ends the connection: every call out fails with {@code error}, and later ones with a ClosedException. */
  private void fail(NetaccelException error) {
    synchronized (this) {
      if (closedBy != null) {
        return;
      }
      closedBy = error instanceof RacException ? new ClosedException("connection unusable: " + error.getMessage()) : error;
    }
    try {
      socket.close();
    } catch (IOException ignored) {
      // closing is all that is left to do
    }
    for (Long id : new java.util.ArrayList<>(pending.keySet())) {
      Pending p = pending.remove(id);
      if (p != null) {
        p.future().completeExceptionally(error);
      }
    }
    places.release(WAKE_ALL);
  }

  /** Waits for a future of this client and throws its typed exception as itself. */
  static <T> T await(CompletableFuture<T> f) {
    try {
      return f.get();
    } catch (ExecutionException | CompletionException e) {
      Throwable cause = e.getCause();
      if (cause instanceof RuntimeException re) {
        throw re;
      }
      throw new NetaccelException(String.valueOf(cause), cause);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new ClosedException("interrupted while waiting for an answer", e);
    }
  }
}
