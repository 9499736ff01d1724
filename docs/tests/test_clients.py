"""docs/clients.md: each language's recipe, run as a reader runs it (in an empty
folder, with $NETACCEL_RAC, $NETACCEL_GRPC and $NETACCEL_REPO set), prints what the
page says. The C recipe installs a debug build (PROFILE=debug: already built by the
suite) under a temporary $HOME; the Go recipe resolves the module offline
(GOPROXY=off); npm and Maven keep the real home's caches.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, require
from docblocks import tagged_blocks

PAGE = ROOT / "docs" / "clients.md"
BLOCKS = tagged_blocks(PAGE)
RECIPES = [b for b in BLOCKS if b.kind == "recipe"]
OUTPUTS = {b.name: b.text for b in BLOCKS if b.kind == "output"}
#: A cold build of the C library or of Go's standard packages on a loaded machine.
RECIPE_TIMEOUT_S = 900
TOOLS = {
    "c-example": ("cc", "pkg-config", "cargo"),
    "go-example": ("go",),
    "go-grpc": ("go", "protoc"),
    "cpp-grpc": ("g++", "make", "pkg-config", "protoc", "grpc_cpp_plugin"),
    "typescript-example": ("node", "npm"),
    "typescript-grpc": ("node", "npm"),
    "java-example": ("java", "javac", "mvn"),
    "java-grpc": ("java", "javac", "mvn"),
}


def go_env(name: str) -> str:
    return subprocess.run(["go", "env", name], capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.parametrize("block", RECIPES, ids=[b.name.split()[0] for b in RECIPES])
def test_recipe_prints_the_documented_output(block, node, tmp_path: Path) -> None:
    name = block.name.split()[0]
    for tool in TOOLS.get(name, ()):
        require(shutil.which(tool) is not None, f"{tool} is not installed")
    env = dict(os.environ, NETACCEL_RAC=node.rac, NETACCEL_GRPC=node.grpc or "", NETACCEL_REPO=str(ROOT),
               HOME=str(tmp_path / "home"),
               PROFILE="debug")
    # The toolchains stay where the real home has them (rustup and cargo find theirs
    # through $HOME unless told).
    real_home = Path.home()
    env.setdefault("RUSTUP_HOME", os.environ.get("RUSTUP_HOME", str(real_home / ".rustup")))
    env.setdefault("CARGO_HOME", os.environ.get("CARGO_HOME", str(real_home / ".cargo")))
    if name.startswith("go-"):
        # Keep the build and module caches of the real home: only the module is local
        # (the gRPC example's modules are in the cache once test.sh built it).
        env.update(GOCACHE=go_env("GOCACHE"), GOMODCACHE=go_env("GOMODCACHE"), GOPATH=go_env("GOPATH"))
    if name == "go-example":
        env.update(GOPROXY="off")
    if name.startswith("typescript-"):
        # npm's cache stays the real home's: the package's dev dependencies are not
        # downloaded again for each run.
        env.update(npm_config_cache=str(real_home / ".npm"))
    if name.startswith("java-"):
        # Maven's local repository (its plugins) stays the real home's, for the same reason.
        env.update(MAVEN_OPTS=f"-Dmaven.repo.local={real_home / '.m2' / 'repository'}")
    (tmp_path / "home").mkdir()
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block.text], cwd=work, env=env,
                          capture_output=True, timeout=RECIPE_TIMEOUT_S)
    stderr = done.stderr.decode(errors="replace")
    assert done.returncode == 0, f"{PAGE.name}:{block.line} `{block.name}` failed:\n{stderr}"
    assert done.stdout.decode() == OUTPUTS[name], f"{PAGE.name}:{block.line} printed:\n{done.stdout.decode()}"


def test_every_recipe_has_its_output() -> None:
    assert {b.name.split()[0] for b in RECIPES} == set(OUTPUTS) == set(TOOLS)
