package io.netaccel.client;

import java.time.Duration;
import java.util.Map;

/**
 * Options of one call, built by chaining: {@code CallOptions.none().param("k", 3)
 * .deadline(Duration.ofMillis(5))}.
 *
 * @param params params by name (checked against the built-ins or the node's catalog)
 * @param rawParams the 44-byte block itself, instead of {@code params}; {@code null} if not given
 * @param deadline the call must start within this of reaching the node, or is answered
 *     DEADLINE_EXCEEDED; {@code null}: none
 * @param timeout the client stops waiting after this and fails the call with a local
 *     {@link DeadlineException}; {@code null}: waits for the answer or the connection's end
 */
public record CallOptions(
    Map<String, Number> params, byte[] rawParams, Duration deadline, Duration timeout) {

  /** No params, no deadline, no timeout. */
  public static CallOptions none() {
    return new CallOptions(Map.of(), null, null, null);
  }

  /** These options with one more param by name. */
  public CallOptions param(String name, Number value) {
    Map<String, Number> more = new java.util.LinkedHashMap<>(params);
    more.put(name, value);
    return new CallOptions(Map.copyOf(more), rawParams, deadline, timeout);
  }

  /** These options with params by name. */
  public CallOptions params(Map<String, ? extends Number> values) {
    return new CallOptions(Map.copyOf(values), rawParams, deadline, timeout);
  }

  /** These options with the raw 44-byte parameter block. */
  public CallOptions rawParams(byte[] block) {
    return new CallOptions(params, block.clone(), deadline, timeout);
  }

  /** These options with a deadline (whole microseconds on the wire). */
  public CallOptions deadline(Duration d) {
    return new CallOptions(params, rawParams, d, timeout);
  }

  /** These options with a client-side timeout. */
  public CallOptions timeout(Duration t) {
    return new CallOptions(params, rawParams, deadline, t);
  }
}
