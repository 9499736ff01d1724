"""netaccel: call hardware-accelerated functions on a netaccel node over RAC v1.

>>> from netaccel import Client
>>> with Client("127.0.0.1", 9400) as c:                     # doctest: +SKIP
...     c.call("to_uppercase", b"hello")
b'HELLO'

``netaccel.rac`` has the wire format; ``netaccel.aio.AsyncClient`` is the asyncio client;
``Client.from_registry(url, function)`` calls through a registry's binding
(``netaccel.registry``).
"""

from .client import CallsInterrupted, Client, parse_addr
from .registry import Binding, BoundClient, NoBinding, RegistryClient, RegistryError
from .rac import (
    BUILTIN_IDS,
    DEFAULT_PORT,
    CallHeader,
    HeaderError,
    Kind,
    Partial,
    RacError,
    Result,
    ResultHeader,
    Status,
)

__version__ = "0.1.0"

__all__ = [
    "BUILTIN_IDS",
    "Binding",
    "BoundClient",
    "CallsInterrupted",
    "NoBinding",
    "RegistryClient",
    "RegistryError",
    "DEFAULT_PORT",
    "CallHeader",
    "Client",
    "HeaderError",
    "Kind",
    "Partial",
    "RacError",
    "Result",
    "ResultHeader",
    "Status",
    "parse_addr",
]
