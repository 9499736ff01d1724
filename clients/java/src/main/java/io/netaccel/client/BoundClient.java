package io.netaccel.client;

import java.time.Duration;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * Calls through a netaccel registry's binding; the same behaviour as the Rust ({@code
 * crates/client/src/registry.rs}) and Python ({@code netaccel.registry}) clients.
 *
 * <p>The registry never carries calls. {@link #bind} asks it once for an instance of a
 * function, then calls the node that instance is bound to, directly, over RAC. A daemon
 * thread keeps a long poll open ({@code GET …/instances/ID?after=G&wait_ms=T}), so a
 * migration is seen as soon as the registry makes it; the old node's connection is then
 * closed, and a call out there fails at once and is retried on the new binding. When a
 * call fails in a way that means "this binding is stale" — the node cannot be reached or
 * the connection breaks ({@link ClosedException}), or it answers UNKNOWN_ACCELERATOR or
 * UNAVAILABLE — the client waits (at most {@code rebindWait}) for the registry to rebind
 * the instance and retries once there. A node that cannot be reached (or, with {@code
 * unreachableAfter}, has not answered that long) is first reported to the registry
 * ({@code POST …/instances/ID/unreachable}), which moves the instance at once instead of
 * when the node's lease runs out. Any other failure, and a second one, is thrown.
 * Thread-safe.
 */
public final class BoundClient implements AutoCloseable {
  /** Longest long poll the watcher asks for: a closed client's thread ends within it. */
  public static final Duration WATCH_WAIT = Duration.ofSeconds(5);
  /** Longest wait of one long poll while rebinding (the registry refuses longer ones). */
  public static final Duration REBIND_POLL_WAIT_MAX = Duration.ofSeconds(60);
  /** Pause after a failed poll, so an unreachable registry is not asked in a loop. */
  public static final Duration WATCH_RETRY_PAUSE = Duration.ofMillis(500);

  private final RegistryClient registry;
  private final String function;
  private final String accelerator;
  private final boolean owned;
  private final Duration rebindWait;
  private final Duration unreachableAfter;
  private final Tls tls;
  private Binding binding;
  private Client node;
  private String nodeAddr;
  private volatile boolean stopped;
  /** Held while a node connection is made. */
  private final Object connecting = new Object();

  /** Abandons calls that went without an answer for {@code unreachableAfter}. */
  private static final ScheduledExecutorService SILENCE = Executors.newSingleThreadScheduledExecutor(r -> {
    Thread t = new Thread(r, "netaccel-unreachable-after");
    t.setDaemon(true);
    return t;
  });

  private BoundClient(RegistryClient registry, String function, String instance, Duration rebindWait, Tls tls, Duration unreachableAfter) {
    this.registry = registry;
    this.function = function;
    this.rebindWait = rebindWait;
    this.unreachableAfter = unreachableAfter;
    this.tls = tls;
    this.owned = instance == null;
    this.accelerator = String.valueOf(registry.function(function).get("accelerator"));
    this.binding = registry.createInstance(function, instance, null);
  }

  /**
   * Binds an instance of {@code function} through the registry at {@code url} (replicas
   * comma-separated): {@code instance} names one to bind (kept on close), null makes a new
   * one (released on close); {@code tls} (may be null) calls the node's RAC-over-TLS
   * listener; {@code watch} follows migrations by long poll.
   */
  public static BoundClient bind(RegistryClient registry, String function, String instance, Duration rebindWait, Tls tls, boolean watch) {
    return bind(registry, function, instance, rebindWait, tls, watch, null);
  }

  /**
   * {@link #bind(RegistryClient, String, String, Duration, Tls, boolean)}, and a call that
   * has had no answer for {@code unreachableAfter} (null: no bound) is abandoned as if its
   * node could not be reached ({@link ClosedException}): reported to the registry, which
   * moves the instance to another node, and retried once on the new binding. For a node
   * cut off from its clients while the registry still reaches it. Set it above the
   * longest call the function makes (the call may run twice).
   */
  public static BoundClient bind(RegistryClient registry, String function, String instance, Duration rebindWait, Tls tls, boolean watch,
      Duration unreachableAfter) {
    BoundClient b = new BoundClient(registry, function, instance, rebindWait, tls, unreachableAfter);
    if (watch) {
      Thread t = new Thread(b::watch, "netaccel-binding-watch");
      t.setDaemon(true);
      t.start();
    }
    return b;
  }

  /** The binding as last seen. */
  public synchronized Binding binding() {
    return binding;
  }

  /** Calls the function's accelerator on the bound node; rebinds and retries once on a stale binding. */
  public byte[] call(byte[] payload, CallOptions opts) {
    Binding b = binding();
    if (!b.bound()) {
      b = rebind(b, null);
    }
    try {
      return callNode(b, payload, opts);
    } catch (RuntimeException first) {
      if (!isStale(first)) {
        throw first;
      }
      if (first instanceof ClosedException) {
        reportUnreachable(b); // not an answer of the node's: it could not be reached
      }
      b = rebind(b, first);
    }
    return callNode(b, payload, opts);
  }

  /** True for failures that mean the node no longer serves this binding. */
  public static boolean isStale(Throwable e) {
    if (e instanceof RacException r) {
      return r.status() == Rac.Status.UNKNOWN_ACCELERATOR || r.status() == Rac.Status.UNAVAILABLE;
    }
    return e instanceof ClosedException;
  }

  private byte[] callNode(Binding b, byte[] payload, CallOptions opts) {
    String addr = b.racAddress(tls != null);
    if (addr == null) {
      throw new NoBindingException("instance " + b.id() + " is bound to node " + b.node() + ", which has no "
          + (tls != null ? "RAC-over-TLS" : "RAC") + " listener", null);
    }
    Client c = nodeFor(addr);
    AtomicBoolean silent = new AtomicBoolean();
    ScheduledFuture<?> timer = unreachableAfter == null ? null : SILENCE.schedule(() -> {
      silent.set(true);
      c.close();
    }, unreachableAfter.toNanos(), TimeUnit.NANOSECONDS);
    try {
      return c.call(accelerator, payload, opts);
    } catch (ClosedException e) {
      dropNode(c); // a broken connection is never reused
      if (silent.get()) {
        throw new ClosedException("no answer from " + addr + " within " + unreachableAfter.toMillis() + " ms (unreachableAfter)", e);
      }
      throw e;
    } finally {
      if (timer != null) {
        timer.cancel(false);
      }
    }
  }

  /**
   * Tells the registry this client cannot reach {@code b}'s node (unless the instance has
   * moved already) and keeps the binding it answers. A failed report changes nothing: the
   * rebind waits as it would have.
   */
  private void reportUnreachable(Binding b) {
    if (!b.bound() || binding().generation() != b.generation()) {
      return;
    }
    Binding fresh;
    try {
      fresh = registry.reportUnreachable(function, b.id(), b.generation());
    } catch (RuntimeException e) {
      return;
    }
    synchronized (this) {
      if (fresh.id().equals(binding.id()) && fresh.generation() > binding.generation()) {
        binding = fresh;
      }
    }
  }

  /**
   * The connection to {@code addr}, made once however many threads call at once (a
   * connection one thread replaced under another's call would look like a lost node).
   */
  private Client nodeFor(String addr) {
    synchronized (connecting) {
      synchronized (this) {
        if (node != null && addr.equals(nodeAddr) && !node.isClosed()) {
          return node;
        }
      }
      return connect(addr);
    }
  }

  private Client connect(String addr) {
    int colon = addr.lastIndexOf(':');
    String host = addr.substring(0, colon).replaceAll("^\\[|\\]$", "");
    Client c = Client.connect(new Client.Options().address(host, Integer.parseInt(addr.substring(colon + 1))).tls(tls));
    Client old;
    synchronized (this) {
      old = node;
      node = c;
      nodeAddr = addr;
      if (!addr.equals(binding.racAddress(tls != null))) {
        c.close(); // moved while connecting: the call fails over to the new binding
      }
    }
    if (old != null) {
      old.close();
    }
    return c;
  }

  private void dropNode(Client c) {
    synchronized (this) {
      if (node == c) {
        node = null;
        nodeAddr = null;
      }
    }
    c.close();
  }

  private Binding rebind(Binding stale, Throwable cause) {
    long deadline = System.nanoTime() + rebindWait.toNanos();
    long seen = stale.generation();
    while (true) {
      Binding current = binding();
      if (current.generation() != stale.generation() && current.bound()) {
        return current;
      }
      seen = Math.max(seen, current.generation());
      long left = deadline - System.nanoTime();
      if (left <= 0) {
        throw new NoBindingException("instance " + stale.id() + " has no usable binding: the registry did not move it off "
            + stale.node() + " within " + rebindWait.toMillis() + " ms" + (cause != null ? "; the call failed with: " + cause.getMessage() : ""), cause);
      }
      Binding polled;
      try {
        Duration wait = Duration.ofNanos(Math.min(left, REBIND_POLL_WAIT_MAX.toNanos()));
        polled = registry.instance(function, stale.id(), seen, wait);
      } catch (RegistryException e) {
        if (e.status() != 404) {
          throw e;
        }
        polled = registry.createInstance(function, stale.id(), null);
      }
      // The registry's answer is the truth, even if older than what the watcher saw.
      synchronized (this) {
        binding = polled;
      }
    }
  }

  private void watch() {
    while (!stopped) {
      Binding current = binding();
      Binding fresh;
      try {
        fresh = registry.instance(function, current.id(), current.generation(), WATCH_WAIT);
      } catch (RuntimeException e) {
        RegistryClient.pause(WATCH_RETRY_PAUSE);
        continue;
      }
      Client stale = null;
      synchronized (this) {
        if (!stopped && fresh.id().equals(binding.id()) && fresh.generation() > binding.generation()) {
          binding = fresh;
          if (node != null && !String.valueOf(nodeAddr).equals(fresh.racAddress(tls != null))) {
            stale = node;
          }
        }
      }
      if (stale != null) {
        // A call out on the old node fails now and is retried on the new binding.
        stale.close();
      }
    }
  }

  /** Stops following, closes the node connection, and releases the instance if this client created it. */
  @Override
  public void close() {
    stopped = true;
    Client c;
    synchronized (this) {
      c = node;
      node = null;
    }
    if (c != null) {
      c.close();
    }
    if (owned) {
      try {
        registry.deleteInstance(function, binding().id());
      } catch (RegistryException e) {
        // gone already, or the registry is away: it is not ours to wait for
      }
    }
  }
}
