"""The registry's JSON bodies, declared once for the Python client.

Each body of the registry's HTTP API (``spec/registry-api.md``) is a schema here: its
fields, each with a type, whether ``null`` is allowed, a default when absent, and
whether it is left out when empty. :func:`parse` checks a document against a schema
and fills in defaults; :func:`dump` writes a value back as the registry would. The
client's registry code reads every answer through :func:`parse`, so a field is added
here once. The schemas mirror the Rust crate ``registry-api``; both round-trip the
golden fixtures of ``spec/registry/`` in their tests.

Not here: HTTP, retries, following the leader (``netaccel.registry``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple, Union

#: Largest slot id: the node numbers its slots with 16 bits.
SLOT_ID_MAX = 0xFFFF


class ShapeError(ValueError):
    """A document does not have the shape its schema declares."""


@dataclass(frozen=True)
class F:
    """A field: ``kind`` is a type name (``str``, ``int``, ``u16``, ``u32``, ``float``,
    ``bool``, ``addr``), a schema name, or ``[kind]`` for a list of them."""

    kind: Union[str, Tuple[str]]
    nullable: bool = False
    #: Absent means this value (``REQUIRED``: absence is an error).
    default: Any = "__required__"
    #: Left out of a dump when it equals this (``KEEP``: always written).
    omit: Any = "__keep__"


REQUIRED = "__required__"
KEEP = "__keep__"

ADDR = F("addr", nullable=True, default=None)
NAME_OR_NULL = F("str", nullable=True, default=None)

SCHEMAS: Dict[str, Dict[str, F]] = {
    "slot-registration": {
        "id": F("u16"),
        "accelerator": F("str"),
        "hash": F("str", default=""),
        "busy_ratio": F("float", default=0.0),
        "queue_depth": F("u32", default=0),
    },
    "device-registration": {
        "id": F("str"),
        "backend": F("str"),
        "vendor": F("str", default=""),
        "platform": F("str", default=""),
        "accelerators": F(("str",), nullable=True, default=None, omit=None),
        "slots": F(("slot-registration",)),
    },
    "node-registration": {
        "http": F("addr"),
        "rac": F("addr"),
        "opencl": ADDR,
        "https": ADDR,
        "rac_tls": ADDR,
        "grpc": ADDR,
        "grpc_tls": ADDR,
        "devices": F(("device-registration",)),
    },
    "lease-grant": {"lease_ms": F("int")},
    "slot": {
        "id": F("u16"),
        "accelerator": F("str"),
        "hash": F("str"),
        "busy_ratio": F("float"),
        "queue_depth": F("u32"),
        "utilization": F("float"),
        "reconfiguring": F("str", nullable=True),
        "released": F("bool"),
        "instances": F(("str",)),
    },
    "device": {
        "id": F("str"),
        "backend": F("str"),
        "vendor": F("str"),
        "platform": F("str"),
        "accelerators": F(("str",), nullable=True),
        "slots": F(("slot",)),
    },
    "node": {
        "name": F("str"),
        "state": F("str"),
        "http": F("addr"),
        "rac": F("addr"),
        "opencl": ADDR,
        "https": ADDR,
        "rac_tls": ADDR,
        "grpc": ADDR,
        "grpc_tls": ADDR,
        "devices": F(("device",)),
    },
    "query": {"backend": NAME_OR_NULL, "vendor": NAME_OR_NULL, "node": NAME_OR_NULL},
    "function-spec": {
        "accelerator": F("str"),
        "hash": NAME_OR_NULL,
        "query": F("query", default={}),
        "instances": F("u32", default=1),
    },
    "binding": {
        "id": F("str"),
        "function": F("str"),
        "node": NAME_OR_NULL,
        "device": NAME_OR_NULL,
        "slot": F("u16", nullable=True, default=None),
        "http": ADDR,
        "rac": ADDR,
        "opencl": ADDR,
        "https": ADDR,
        "rac_tls": ADDR,
        "grpc": ADDR,
        "grpc_tls": ADDR,
        "generation": F("int"),
        "pinned": F("bool", default=False, omit=False),
    },
    "function": {
        "name": F("str"),
        "accelerator": F("str"),
        "hash": F("str", nullable=True),
        "query": F("query"),
        "instances": F(("binding",)),
    },
    "instance-spec": {
        "id": F("str", nullable=True, default=None, omit=None),
        "node": F("str", nullable=True, default=None, omit=None),
    },
    "reconfiguration-request": {
        "node": F("str"),
        "device": F("str"),
        "slot": F("u16"),
        "accelerator": F("str"),
        "instance": F("str", nullable=True, default=None, omit=None),
    },
    "verdict": {
        "allowed": F("bool"),
        "migrated": F(("str",), nullable=True, default=None, omit=None),
        "reason": F("str", nullable=True, default=None, omit=None),
    },
    "unreachable-report": {"generation": F("int")},
    "error": {"error": F("str"), "code": F("str")},
    "health": {"status": F("str")},
}

#: Bodies that are a list of another: ``nodes`` is ``GET /v1/nodes``.
LISTS = {"nodes": "node", "functions": "function"}

#: Bodies whose unknown fields are refused (what the registry parses); answers
#: tolerate fields a newer registry adds.
STRICT = {
    "node-registration",
    "device-registration",
    "slot-registration",
    "function-spec",
    "query",
    "instance-spec",
    "reconfiguration-request",
    "unreachable-report",
    "health",
}

_INTS = {"int": (0, 2**64 - 1), "u16": (0, SLOT_ID_MAX), "u32": (0, 2**32 - 1)}


def _addr(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ShapeError(f"{where}: expected HOST:PORT, got {value!r}")
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 0xFFFF:
        raise ShapeError(f"{where}: {value!r} is not HOST:PORT")
    return value


def _value(kind: Any, value: Any, where: str) -> Any:
    if isinstance(kind, tuple):
        if not isinstance(value, list):
            raise ShapeError(f"{where}: expected a list, got {value!r}")
        return [_value(kind[0], v, f"{where}[{i}]") for i, v in enumerate(value)]
    if kind in SCHEMAS:
        return parse(kind, value, where)
    if kind == "str":
        if not isinstance(value, str):
            raise ShapeError(f"{where}: expected a string, got {value!r}")
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            raise ShapeError(f"{where}: expected true or false, got {value!r}")
        return value
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ShapeError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if kind in _INTS:
        low, high = _INTS[kind]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ShapeError(f"{where}: expected an integer in {low}..={high}, got {value!r}")
        return value
    if kind == "addr":
        return _addr(value, where)
    raise AssertionError(f"unknown kind {kind!r}")


def parse(schema: str, doc: Any, where: str = "") -> Any:
    """``doc`` checked against ``schema`` (a name of :data:`SCHEMAS` or
    :data:`LISTS`), with defaults filled in; :class:`ShapeError` says what is wrong."""
    where = where or schema
    if schema in LISTS:
        return _value((LISTS[schema],), doc, where)
    fields = SCHEMAS[schema]
    if not isinstance(doc, dict):
        raise ShapeError(f"{where}: expected an object, got {doc!r}")
    unknown = set(doc) - set(fields)
    if unknown and schema in STRICT:
        raise ShapeError(f"{where}: unknown fields {sorted(unknown)}")
    out: Dict[str, Any] = {}
    for name, field in fields.items():
        if name not in doc:
            if field.default == REQUIRED:
                raise ShapeError(f"{where}: {name} is missing")
            out[name] = _default(field)
            continue
        value = doc[name]
        if value is None:
            if not field.nullable:
                raise ShapeError(f"{where}.{name}: must not be null")
            out[name] = None
        else:
            out[name] = _value(field.kind, value, f"{where}.{name}")
    return out


def _default(field: F) -> Any:
    if field.kind in SCHEMAS and isinstance(field.default, dict):
        return parse(field.kind, field.default)
    return field.default


def dump(schema: str, value: Any) -> Any:
    """``value`` (as :func:`parse` gives it) as the JSON document the registry writes."""
    if schema in LISTS:
        return [dump(LISTS[schema], v) for v in value]
    out: Dict[str, Any] = {}
    for name, field in SCHEMAS[schema].items():
        v = value.get(name, _default(field))
        if field.omit != KEEP and v == field.omit:
            continue
        out[name] = _dump_value(field.kind, v)
    return out


def _dump_value(kind: Any, v: Any) -> Any:
    if v is None:
        return None
    if isinstance(kind, tuple):
        return [_dump_value(kind[0], x) for x in v]
    if kind in SCHEMAS:
        return dump(kind, v)
    return v


def schema_of_fixture(name: str) -> Optional[str]:
    """The schema a fixture of ``spec/registry/`` holds: its name up to the first ``.``."""
    kind = name.split(".", 1)[0]
    return kind if kind in SCHEMAS or kind in LISTS else None


def bodies() -> List[str]:
    """Every top-level body of the API (what ``spec/registry/`` must have a file of)."""
    return [
        "node-registration",
        "lease-grant",
        "nodes",
        "function-spec",
        "function",
        "functions",
        "instance-spec",
        "binding",
        "reconfiguration-request",
        "verdict",
        "unreachable-report",
        "error",
        "health",
    ]
