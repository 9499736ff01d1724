/**
 * The errors a call can end with, one class per thing a caller does differently:
 * retry later ({@link BusyError}, {@link UnavailableError}), give up on this call
 * ({@link DeadlineError}), fix the call ({@link RacError} with its status), or make a
 * new connection ({@link ClosedError}, {@link ProtocolError}).
 *
 * @module
 */

import { Status } from "./rac";

/**
 * How long to wait before retrying a BUSY or UNAVAILABLE call. RAC carries no hint of
 * its own; this is what the node's HTTP front end sends for the same refusals
 * (`Retry-After: 1`).
 */
export const RETRY_AFTER_MS_DEFAULT = 1000;

/** Base class of every error this package throws about a node or the registry. */
export class NetaccelError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/** The node answered a call with a status other than OK. */
export class RacError extends NetaccelError {
  constructor(
    readonly status: Status,
    readonly requestId: number,
    /** The node's sentence saying why (the result's payload as UTF-8). */
    readonly detail: string,
  ) {
    super(`${Status[status] ?? status} (request ${requestId})${detail ? `: ${detail}` : ""}`);
  }

  /** The error class for a non-OK status. */
  static of(status: Status, requestId: number, detail: string): RacError {
    switch (status) {
      case Status.BUSY:
        return new BusyError(requestId, detail);
      case Status.UNAVAILABLE:
        return new UnavailableError(requestId, detail);
      case Status.DEADLINE_EXCEEDED:
        return new DeadlineError(requestId, detail);
      default:
        return new RacError(status, requestId, detail);
    }
  }
}

/** BUSY: no room in the node's reassembly pool or slot queue; retry after `retryAfterMs`. */
export class BusyError extends RacError {
  readonly retryAfterMs = RETRY_AFTER_MS_DEFAULT;
  constructor(requestId: number, detail: string) {
    super(Status.BUSY, requestId, detail);
  }
}

/** UNAVAILABLE: the accelerator's slots are reconfiguring or failed, or the node drains. */
export class UnavailableError extends RacError {
  readonly retryAfterMs = RETRY_AFTER_MS_DEFAULT;
  constructor(requestId: number, detail: string) {
    super(Status.UNAVAILABLE, requestId, detail);
  }
}

/**
 * The call's deadline passed: the node answered DEADLINE_EXCEEDED (the call never ran),
 * or, with `local` true, the client stopped waiting after the call's `timeoutMs` (the
 * call may still run; its late answer is dropped).
 */
export class DeadlineError extends RacError {
  constructor(
    requestId: number,
    detail: string,
    readonly local = false,
  ) {
    super(Status.DEADLINE_EXCEEDED, requestId, detail);
  }
}

/** The node's reply cannot be trusted (a malformed or unexpected header); the connection is closed. */
export class ProtocolError extends NetaccelError {}

/** The connection closed (or was closed) before the call was answered; it may or may not have run. */
export class ClosedError extends NetaccelError {}
