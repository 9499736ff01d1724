"""The recipes of docs/opencl.md, run against a node with the page's `config: node toml`
block (tenants, tokens, the `opencl` policy key) and remote OpenCL on a loopback port,
through the ICD built here (`libnetaccel_opencl.so`, the only platform the recipes'
OpenCL loader sees).

Each `<!-- recipe: NAME sh -->` block runs with bash from the repository root, with
`OCL_ICD_VENDORS` and `NETACCEL_OPENCL_NODES` set as the page's *Install and use*
says, and must print exactly its `<!-- output: NAME sh -->` block. Needs an OpenCL
runtime (PoCL) and clinfo: without them the tests skip, except in CI.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from conftest import ROOT, build, require, running_node
from docblocks import tagged_blocks

PAGE = ROOT / "docs" / "opencl.md"
BLOCKS = tagged_blocks(PAGE)
RECIPES = [b for b in BLOCKS if b.kind == "recipe"]
RECIPE_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def opencl_node(tmp_path_factory):
    """A node with the page's configuration, and a vendors directory naming the ICD."""
    (config,) = [b.text for b in BLOCKS if b.kind == "config"]
    tmp = tmp_path_factory.mktemp("opencl-node")
    lib = build("ocl-icd") / "libnetaccel_opencl.so"
    vendors = tmp / "vendors"
    vendors.mkdir()
    (vendors / "netaccel.icd").write_text(f"{lib}\n")
    with running_node(tmp, config) as node:
        yield node, vendors


@pytest.mark.parametrize("block", RECIPES, ids=[b.name.split()[0] for b in RECIPES])
def test_recipe_prints_the_documented_output(block, opencl_node):
    node, vendors = opencl_node
    require(node.opencl is not None, "no OpenCL runtime: the node shares no device")
    require(shutil.which("clinfo") is not None, "clinfo is not installed")
    assert block.lang == "sh", f"{PAGE.name}:{block.line}: no runner for ```{block.lang}"
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("NETACCEL_") and k != "OCL_ICD_VENDORS"
    }
    env["OCL_ICD_VENDORS"] = str(vendors)
    env["NETACCEL_OPENCL_NODES"] = node.opencl
    done = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", block.text],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=RECIPE_TIMEOUT_S,
    )
    assert done.returncode == 0, f"{PAGE.name}:{block.line}: {done.stderr}"
    outputs = {b.name: b.text for b in BLOCKS if b.kind == "output"}
    assert done.stdout == outputs[block.name], f"{PAGE.name}:{block.line}"
