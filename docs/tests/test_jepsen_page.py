"""The recipes of docs/jepsen.md print what the page says.

Each `<!-- recipe: NAME sh -->` block runs with bash from the repository's root and its
stdout must be the `<!-- output: NAME -->` block's text byte for byte: the recipes
check saved histories (bench/jepsen/testdata/), which is a function of the file. The
runs against a live cluster (minutes, root for the network faults) are
bench/jepsen/run.sh's, in ./test.sh, not here. Needs Go: a skip without it, a failure
with CI set.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from conftest import ROOT
from docblocks import tagged_blocks

PAGE = ROOT / "docs" / "jepsen.md"
BLOCKS = tagged_blocks(PAGE)
RECIPES = [b for b in BLOCKS if b.kind == "recipe"]
OUTPUTS = {b.name: b.text for b in BLOCKS if b.kind == "output"}


def go_or_skip() -> None:
    if shutil.which("go") is None:
        if os.environ.get("CI"):
            pytest.fail("go is not installed (CI is set)")
        pytest.skip("go is not installed")


def test_the_page_has_recipes_and_each_its_output():
    assert RECIPES, "docs/jepsen.md has no recipe"
    for r in RECIPES:
        assert r.name.split()[0] in OUTPUTS, f"recipe `{r.name}` has no output block"


@pytest.mark.parametrize("block", RECIPES, ids=[b.name.replace(" ", "-") for b in RECIPES])
def test_recipe_prints_the_documented_output(block):
    go_or_skip()
    done = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", block.text],
        cwd=ROOT,
        capture_output=True,
        timeout=300,
    )
    where = f"jepsen.md:{block.line} `{block.name}`"
    assert done.returncode == 0, f"{where} failed:\n{done.stderr.decode(errors='replace')}"
    assert done.stdout.decode() == OUTPUTS[block.name.split()[0]], f"{where} printed:\n{done.stdout.decode()}"
