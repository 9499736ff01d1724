import io.netaccel.client.CallOptions;
import io.netaccel.client.Client;
import java.lang.management.ManagementFactory;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicLong;

/**
 * 64 B echo over one connection with the Java client (clients/java): the p50 and p99 of
 * synchronous calls (one in flight), then calls/s with 32 in flight, and the bytes every
 * thread of the JVM allocated per pipelined call (HotSpot's per-thread counters). Prints
 * one JSON line. Usage: java -cp CLIENT.jar Bench.java --node HOST:PORT [--seconds S]
 * [--inflight N] [--size BYTES]
 */
public final class Bench {
  private Bench() {}

  static String arg(String[] argv, String name, String dflt) {
    for (int i = 0; i + 1 < argv.length; i++) {
      if (argv[i].equals(name)) {
        return argv[i + 1];
      }
    }
    return dflt;
  }

  static long[] sync(Client node, byte[] payload, double seconds) {
    long[] lat = new long[1 << 22];
    int n = 0;
    long end = System.nanoTime() + (long) (seconds * 1e9);
    while (System.nanoTime() < end && n < lat.length) {
      long t0 = System.nanoTime();
      node.call("echo", payload);
      lat[n++] = System.nanoTime() - t0;
    }
    long[] out = Arrays.copyOf(lat, n);
    Arrays.sort(out);
    return out;
  }

  /** Calls/s with {@code inFlight} calls out: each answer sends the next call. */
  static double pipelined(Client node, byte[] payload, double seconds, int inFlight) {
    long t0 = System.nanoTime();
    long end = t0 + (long) (seconds * 1e9);
    AtomicLong done = new AtomicLong();
    List<CompletableFuture<Void>> lanes = new ArrayList<>();
    for (int i = 0; i < inFlight; i++) {
      CompletableFuture<Void> lane = new CompletableFuture<>();
      lanes.add(lane);
      next(node, payload, end, done, lane);
    }
    CompletableFuture.allOf(lanes.toArray(new CompletableFuture<?>[0])).join();
    return done.get() / ((System.nanoTime() - t0) / 1e9);
  }

  static void next(Client node, byte[] payload, long end, AtomicLong done, CompletableFuture<Void> lane) {
    if (System.nanoTime() >= end) {
      lane.complete(null);
      return;
    }
    node.callAsync("echo", payload, CallOptions.none()).whenComplete((out, e) -> {
      if (e != null) {
        lane.completeExceptionally(e);
        return;
      }
      done.incrementAndGet();
      next(node, payload, end, done, lane);
    });
  }

  static long allocatedBytes() {
    com.sun.management.ThreadMXBean threads = (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();
    return Arrays.stream(threads.getThreadAllocatedBytes(threads.getAllThreadIds())).filter(b -> b > 0).sum();
  }

  public static void main(String[] argv) {
    String[] addr = arg(argv, "--node", "127.0.0.1:9400").split(":");
    double seconds = Double.parseDouble(arg(argv, "--seconds", "3"));
    int inFlight = Integer.parseInt(arg(argv, "--inflight", "32"));
    byte[] payload = new byte[Integer.parseInt(arg(argv, "--size", "64"))];
    Arrays.fill(payload, (byte) 'a');
    try (Client node = Client.connect(new Client.Options().address(addr[0], Integer.parseInt(addr[1])).maxInFlight(inFlight))) {
      pipelined(node, payload, 2, inFlight); // warm-up: the JIT, the node's buffers
      long[] lat = sync(node, payload, seconds);
      long bytes0 = allocatedBytes();
      double callsPerS = pipelined(node, payload, seconds, inFlight);
      double bytesPerCall = (allocatedBytes() - bytes0) / Math.max(1.0, callsPerS * seconds);
      System.out.printf(
          "{\"client\":\"java\",\"payload_bytes\":%d,\"sync_calls\":%d,\"sync_p50_us\":%.1f,\"sync_p99_us\":%.1f,"
              + "\"in_flight\":%d,\"pipelined_calls_per_s\":%d,\"allocated_bytes_per_call\":%d}%n",
          payload.length, lat.length, lat[lat.length / 2] / 1e3, lat[Math.min(lat.length - 1, (int) (lat.length * 0.99))] / 1e3,
          inFlight, Math.round(callsPerS), Math.round(bytesPerCall));
    }
  }
}
