"""The conformance driver of the Python client (clients/python): runs one case of
clients/conformance/cases.json with the client's public API and prints one JSON line
of what it observed (the format is in clients/conformance/README.md)."""

from __future__ import annotations

import argparse
import json
import ssl
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

from netaccel import Client, HeaderError, RacError, Status  # noqa: E402
from netaccel.registry import NoBinding, RegistryError  # noqa: E402

#: A status's error kind (README.md, "Error kinds").
KINDS = {
    Status.BAD_REQUEST: "bad_request", Status.UNKNOWN_ACCELERATOR: "unknown_accelerator",
    Status.BUSY: "busy", Status.TOO_LARGE: "too_large", Status.DEADLINE_EXCEEDED: "deadline",
    Status.UNAVAILABLE: "unavailable", Status.UNAUTHORIZED: "unauthorized",
    Status.INTERNAL: "internal", Status.PROTOCOL_ERROR: "protocol",
}


def status_error(status: Status, message: str) -> Dict[str, Any]:
    return {"kind": KINDS[status], "status": status.name, "retryable": status.retryable, "message": message}


def exception_error(e: BaseException) -> Dict[str, Any]:
    if isinstance(e, RacError):
        return status_error(e.result.status, e.result.message)
    if isinstance(e, HeaderError):
        return {"kind": "protocol", "message": str(e)}
    if isinstance(e, (ConnectionError, EOFError)):
        return {"kind": "closed", "message": str(e)}
    return {"kind": "internal", "message": f"{type(e).__name__}: {e}"}


def payload_of(call: Dict[str, Any]) -> bytes:
    if "payload_fill" in call:
        fill = call["payload_fill"]
        return bytes.fromhex(fill["byte"]) * fill["len"]
    return bytes.fromhex(call["payload_hex"])


def connect(args) -> Client:
    context: Optional[ssl.SSLContext] = None
    if args.tls_ca:
        context = ssl.create_default_context(cafile=args.tls_ca)
        if args.cert:
            context.load_cert_chain(args.cert, args.key)
    client = Client.from_addr(args.node, timeout=30, ssl=context)
    if args.tenant:
        try:
            client.hello(args.tenant, token=args.token)
        except BaseException:
            client.close()
            raise
    return client


def accelerator_of(client: Client, call: Dict[str, Any]):
    if "accelerator_id" in call:
        return call["accelerator_id"]
    try:
        client.resolve(call["accelerator"])
    except ValueError as e:
        raise LookupError(str(e)) from None
    return call["accelerator"]


def run_calls(client: Client, case: Dict[str, Any], report: Dict[str, Any]) -> None:
    calls = case["calls"]
    outputs: List[Optional[str]] = report["outputs"]
    errors: List[Optional[Dict]] = [None] * len(calls)
    ids: Dict[int, int] = {}
    for i, call in enumerate(calls):
        try:
            accel = accelerator_of(client, call)
            rid = client.submit(accel, payload_of(call), deadline_us=call.get("deadline_us", 0),
                                **call.get("params", {}))
        except LookupError as e:
            errors[i] = {"kind": "unknown_accelerator", "message": str(e)}
            continue
        except (ValueError, TypeError) as e:
            errors[i] = {"kind": "bad_request", "message": str(e)}
            continue
        if case["mode"] == "sync":
            take(client, rid, i, outputs, errors, report)
        else:
            ids[rid] = i
    while ids:
        r = client.result()
        if r.request_id == 0:
            for i in ids.values():
                errors[i] = status_error(r.status, r.message)
            break
        take_result(r, ids.pop(r.request_id), outputs, errors, report)
    failed = [i for i, e in enumerate(errors) if e is not None]
    if failed:
        report["ok"] = False
        report["error"] = dict(errors[failed[0]], call=failed[0])


def take(client: Client, rid: int, i: int, outputs, errors, report) -> None:
    take_result(client.result(rid), i, outputs, errors, report)


def take_result(r, i: int, outputs, errors, report) -> None:
    report["order"].append(i)
    if r.ok:
        outputs[i] = bytes(r.payload).hex()
    else:
        errors[i] = status_error(r.status, r.message)


def run_registry(args, case: Dict[str, Any], report: Dict[str, Any]) -> None:
    with Client.from_registry(args.registry, case["function"], token=args.token, timeout=30,
                              rebind_wait=10.0) as bound:
        for i, call in enumerate(case["calls"]):
            report["outputs"][i] = bytes(bound.call(payload_of(call), **call.get("params", {}))).hex()
            report["order"].append(i)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--cases", default=str(Path(__file__).resolve().parents[1] / "cases.json"))
    p.add_argument("--case", required=True)
    p.add_argument("--node")
    p.add_argument("--registry")
    p.add_argument("--tls-ca")
    p.add_argument("--cert")
    p.add_argument("--key")
    p.add_argument("--tenant")
    p.add_argument("--token")
    args = p.parse_args()
    case = next(c for c in json.loads(Path(args.cases).read_text())["cases"] if c["name"] == args.case)
    report: Dict[str, Any] = {"ok": True, "outputs": [None] * len(case["calls"]), "order": []}
    try:
        if args.registry:
            run_registry(args, case, report)
        else:
            try:
                client = connect(args)
            except RacError:
                raise
            except OSError as e:  # refused, unreachable, a failed TLS handshake
                report.update(ok=False, error={"kind": "connect", "call": 0, "message": str(e)})
                print(json.dumps(report))
                return
            with client:
                run_calls(client, case, report)
    except (RacError, HeaderError, ConnectionError, EOFError, RegistryError, NoBinding) as e:
        failed = len(report["order"])
        report.update(ok=False, error=dict(exception_error(e), call=failed))
    print(json.dumps(report))


if __name__ == "__main__":
    main()
