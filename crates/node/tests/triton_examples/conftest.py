"""Fixtures of the Triton examples harness: the examples' models generated into a
temporary repository (bench/triton_examples/make_models.py) and a node from this
checkout serving them, on ports the kernel picks. The node is started as the
documentation tests start theirs (docs/tests/conftest.py, loaded here under another
name so that the two conftest modules do not collide)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]
_spec = importlib.util.spec_from_file_location(
    "netaccel_docs_conftest", ROOT / "docs" / "tests" / "conftest.py"
)
docs_conftest = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = docs_conftest
_spec.loader.exec_module(docs_conftest)
require = docs_conftest.require


def ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="session")
def repository(tmp_path_factory) -> Path:
    """The examples' models, written by the generator the page documents."""
    out = tmp_path_factory.mktemp("triton-models")
    script = ROOT / "bench" / "triton_examples" / "make_models.py"
    done = subprocess.run([sys.executable, str(script), str(out)], capture_output=True, text=True)
    if done.returncode != 0:
        require(False, f"the example models could not be generated: {done.stderr.strip()}")
    bounded_sequences(out)
    return out


@pytest.fixture(scope="session")
def oldest_sequence():
    """The copy of `simple_sequence` whose sequences batch together (oldest)."""
    return OLDEST_SEQUENCE


@pytest.fixture(scope="session")
def bounded_sequence():
    """The bounded copy of `simple_sequence`: (name, idle seconds, live sequences max)."""
    return BOUNDED_SEQUENCE, BOUNDED_IDLE_S, BOUNDED_SEQUENCES_MAX


#: A copy of `simple_sequence` with short bounds, for the tests of idle release and
#: of the bound on live sequences, on two slots (a sequence keeps to one).
BOUNDED_SEQUENCE = "simple_sequence_bounded"
BOUNDED_IDLE_S = 0.3
BOUNDED_SEQUENCES_MAX = 2
#: A copy of `simple_sequence` with the oldest strategy: calls of different
#: sequences batched, waiting up to this long for each other.
OLDEST_SEQUENCE = "simple_sequence_oldest"
OLDEST_DELAY_US = 20_000


def bounded_sequences(repository: Path) -> None:
    source = repository / "simple_sequence"
    target = repository / BOUNDED_SEQUENCE
    shutil.copytree(source, target)
    config = (source / "config.toml").read_text()
    idle = "max_sequence_idle_microseconds = 5000000"
    assert idle in config, "make_models.py's simple_sequence changed"
    config = config.replace(
        idle,
        f"max_sequence_idle_microseconds = {int(BOUNDED_IDLE_S * 1e6)}\n"
        f"max_sequences = {BOUNDED_SEQUENCES_MAX}",
    )
    (target / "config.toml").write_text(config + "\n[[instance_group]]\ncount = 2\n")
    oldest = repository / OLDEST_SEQUENCE
    shutil.copytree(source, oldest)
    original = (source / "config.toml").read_text()
    direct = "[sequence_batching.direct]"
    assert direct in original
    batched = f"[sequence_batching.oldest]\nmax_queue_delay_microseconds = {OLDEST_DELAY_US}"
    (oldest / "config.toml").write_text(original.replace(direct, batched))


@pytest.fixture(scope="session")
def node(tmp_path_factory, repository):
    config = f'models_dir = "{repository}"\n'
    with docs_conftest.running_node(tmp_path_factory.mktemp("node"), config) as n:
        yield n
