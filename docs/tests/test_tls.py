"""docs/tls.md: a node with HTTPS and RAC over TLS, called by the real clients people
use: the unmodified `tritonclient[http]` and `tritonclient[grpc]` from PyPI with
``ssl=True``, and netaccel's
own Python RAC clients (blocking and asyncio) with an ``ssl.SSLContext``; with mutual
TLS, the client certificate's tenant shows in /metrics.

Certificates are made at test time with the openssl command, as docs/tls.md does.
"""
from __future__ import annotations

import asyncio
import re
import shutil
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, build, require, running_node

sys.path.insert(0, str(ROOT / "clients" / "python"))

from netaccel.aio import AsyncClient  # noqa: E402
from netaccel.client import Client  # noqa: E402


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(d: Path) -> None:
    """ca.pem; server.pem/server.key for localhost and 127.0.0.1; client certificates
    alice.pem/alice.key (CN alice) and mallory.pem/mallory.key from another CA."""
    for ca in ("ca", "other-ca"):
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                "-nodes", "-keyout", f"{ca}.key", "-out", f"{ca}.pem", "-days", "2",
                "-subj", f"/CN=netaccel test {ca}", cwd=d)
    leaves = [("server", "ca", "localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1"),
              ("alice", "ca", "alice", "extendedKeyUsage=clientAuth"),
              ("mallory", "other-ca", "alice", "extendedKeyUsage=clientAuth")]
    for name, ca, cn, ext in leaves:
        (d / f"{name}.ext").write_text(ext + "\n")
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={cn}", cwd=d)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
                "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext",
                cwd=d)


def listening(node, key: str) -> str:
    """The address the node logged for listener `key` (https, rac_tls)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for line in list(node.log):
            m = re.search(rf"\b{key}=(\S+:\d+)", line)
            if m:
                return m.group(1)
        time.sleep(0.05)
    raise AssertionError(f"the node did not log its {key} address")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    require(shutil.which("openssl") is not None, "the openssl command is not installed")
    d = tmp_path_factory.mktemp("pki")
    make_pki(d)
    return d


def tls_config(pki: Path, listeners: str) -> str:
    """The node's [tls] section: `listeners` (TOML lines), the test PKI's server
    certificate, client certificates optional, CN alice as tenant team-a."""
    return f"""
[tls]
{listeners}
cert = "{pki / 'server.pem'}"
key = "{pki / 'server.key'}"
client_ca = "{pki / 'ca.pem'}"
client_certs = "optional"

[tls.subjects]
alice = "team-a"
"""


@pytest.fixture(scope="module")
def mtls_node(pki, tmp_path_factory):
    config = tls_config(pki, 'https = "127.0.0.1:0"\nrac = "127.0.0.1:0"\ngrpc = "127.0.0.1:0"')
    with running_node(tmp_path_factory.mktemp("tls-node"), config) as n:
        yield n, listening(n, "https"), listening(n, "rac_tls"), listening(n, "grpc_tls")


def context(pki: Path, client: str | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    if client:
        ctx.load_cert_chain(str(pki / f"{client}.pem"), str(pki / f"{client}.key"))
    return ctx


def tenant_connections(node, tenant: str) -> float:
    text = node.get("/metrics").decode()
    m = re.search(rf'^netaccel_tls_connections_total{{tenant="{tenant}"}} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


def test_tritonclient_over_https_with_and_without_a_client_certificate(mtls_node, pki):
    try:
        import numpy as np
        import tritonclient.http as triton
    except ImportError as e:
        require(False, f"tritonclient[http] is not installed ({e})")
    node, https, _, _ = mtls_node
    url = https.replace("127.0.0.1", "localhost")
    before = tenant_connections(node, "team-a")
    for client_cert in (None, "alice"):
        options = {"ca_certs": str(pki / "ca.pem")}
        if client_cert:
            options.update(certfile=str(pki / "alice.pem"), keyfile=str(pki / "alice.key"))
        with triton.InferenceServerClient(url, ssl=True, ssl_options=options,
                                          network_timeout=30) as c:
            assert c.is_server_ready()
            data = np.frombuffer(b"over tls", dtype=np.uint8)
            inp = triton.InferInput("INPUT0", [len(data)], "UINT8")
            inp.set_data_from_numpy(data, binary_data=True)
            out = c.infer("to_uppercase", [inp]).as_numpy("OUTPUT0")
            assert out.tobytes() == b"OVER TLS"
    assert tenant_connections(node, "team-a") >= before + 1


def test_python_rac_clients_over_tls_and_the_tenant_in_metrics(mtls_node, pki):
    node, _, rac_tls, _ = mtls_node
    host, port = rac_tls.rsplit(":", 1)
    before = tenant_connections(node, "team-a")
    with Client("localhost", int(port), timeout=30, ssl=context(pki, "alice")) as c:
        assert bytes(c.call("to_uppercase", b"blocking rac")) == b"BLOCKING RAC"

    async def run() -> bytes:
        async with await AsyncClient.connect("localhost", int(port), ssl=context(pki, "alice")) as c:
            return bytes(await c.call("to_uppercase", b"asyncio rac"))

    assert asyncio.run(run()) == b"ASYNCIO RAC"
    assert tenant_connections(node, "team-a") == before + 2


def test_a_certificate_from_another_ca_is_refused(mtls_node, pki):
    node, _, rac_tls, _ = mtls_node
    _, port = rac_tls.rsplit(":", 1)
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        with Client("localhost", int(port), timeout=30, ssl=context(pki, "mallory")) as c:
            c.call("to_uppercase", b"forged")


def test_tritonclient_grpc_over_tls_with_a_client_certificate(mtls_node, pki):
    try:
        import numpy as np
        import tritonclient.grpc as triton
        from tritonclient.utils import InferenceServerException
    except ImportError as e:
        require(False, f"tritonclient[grpc] is not installed ({e})")
    node, _, _, grpc_tls = mtls_node
    url = grpc_tls.replace("127.0.0.1", "localhost")
    before = tenant_connections(node, "team-a")
    with triton.InferenceServerClient(url, ssl=True,
                                      root_certificates=str(pki / "ca.pem"),
                                      private_key=str(pki / "alice.key"),
                                      certificate_chain=str(pki / "alice.pem")) as c:
        assert c.is_server_ready()
        data = np.frombuffer(b"grpc over tls", dtype=np.uint8)
        inp = triton.InferInput("INPUT0", [len(data)], "UINT8")
        inp.set_data_from_numpy(data)
        out = c.infer("to_uppercase", [inp]).as_numpy("OUTPUT0")
        assert out.tobytes() == b"GRPC OVER TLS"
    assert tenant_connections(node, "team-a") == before + 1
    # A certificate from another CA: the handshake fails, the call with it.
    with triton.InferenceServerClient(url, ssl=True,
                                      root_certificates=str(pki / "ca.pem"),
                                      private_key=str(pki / "mallory.key"),
                                      certificate_chain=str(pki / "mallory.pem")) as c:
        with pytest.raises(InferenceServerException):
            c.infer("to_uppercase", [inp], client_timeout=10)
    # The listener still serves after the refused handshake.
    with triton.InferenceServerClient(url, ssl=True,
                                      root_certificates=str(pki / "ca.pem")) as c:
        assert c.infer("to_uppercase", [inp]).as_numpy("OUTPUT0").tobytes() == b"GRPC OVER TLS"


def test_through_the_registry_a_client_with_an_ssl_context_calls_the_nodes_tls_listener(pki, tmp_path):
    """`Client.from_registry(..., ssl=ctx)`: the registry hands out the node's
    registered RAC-over-TLS address, and the call goes there (the client
    certificate's tenant shows it); without `ssl` the same instance is called over
    plain RAC."""
    import socket
    import urllib.request

    from netaccel import RegistryClient

    bin_dir = build("netaccel-registry")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        registry_port = s.getsockname()[1]
    url = f"http://127.0.0.1:{registry_port}"
    registry = subprocess.Popen(
        [str(bin_dir / "netaccel-registry"), "--listen", f"127.0.0.1:{registry_port}", "--log-level", "warn"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        config = f'registry = "{url}"\nname = "tls-node"\n' + tls_config(pki, 'rac = "127.0.0.1:0"')
        with running_node(tmp_path, config) as node:
            deadline = time.monotonic() + 30
            while True:
                try:
                    with urllib.request.urlopen(f"{url}/v1/nodes", timeout=5) as r:
                        if "tls-node" in r.read().decode():
                            break
                except OSError:
                    pass
                assert time.monotonic() < deadline, "the node did not register"
                time.sleep(0.1)
            RegistryClient(url).put_function("shout", "to_uppercase")
            before = tenant_connections(node, "team-a")
            with Client.from_registry(url, "shout", ssl=context(pki, "alice"), timeout=30) as c:
                binding = c.binding
                assert binding.rac_tls == listening(node, "rac_tls"), binding
                assert binding.rac_tls != binding.rac
                assert c.call(b"registered tls") == b"REGISTERED TLS"
            assert tenant_connections(node, "team-a") == before + 1
            with Client.from_registry(url, "shout", timeout=30) as c:
                assert c.call(b"plain") == b"PLAIN"
            assert tenant_connections(node, "team-a") == before + 1
    finally:
        registry.terminate()
        registry.wait(timeout=30)
