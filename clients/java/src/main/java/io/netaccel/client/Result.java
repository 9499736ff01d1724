package io.netaccel.client;

import java.nio.charset.StandardCharsets;

/**
 * A result with its header's fields, whatever its status.
 *
 * @param status the result's status
 * @param payload the output when OK, else the node's sentence saying why
 * @param requestId the request id of the call answered
 * @param accelId the accelerator id of the call answered
 * @param slotId the slot that ran the call, {@link Rac#NO_SLOT} when none did
 * @param queueNs from the call being whole at the node to the start of its execution
 * @param execNs execution time in the slot
 */
public record Result(
    Rac.Status status, byte[] payload, long requestId, int accelId, int slotId, long queueNs, long execNs) {

  /** True when the status is OK. */
  public boolean ok() {
    return status == Rac.Status.OK;
  }

  /** The payload as UTF-8 (the sentence of a refusal, the JSON of a control result). */
  public String text() {
    return new String(payload, StandardCharsets.UTF_8);
  }

  /** The payload when OK; else the typed exception of the status ({@link RacException#of}). */
  public byte[] orThrow() {
    if (!ok()) {
      throw RacException.of(status, requestId, text());
    }
    return payload;
  }
}
