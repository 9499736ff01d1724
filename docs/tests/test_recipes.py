"""The recipes of docs/accelerators.md, docs/extending.md, docs/security.md and
docs/quotas.md, run against real nodes (security.md's against a node with an admin
token and a tenant, and its `production-*` recipes against a node under its production
profile, its `registry-*` recipes against a registry with the page's credentials and a
node registered with it; quotas.md's against a node with the quotas the page
configures).

Each `<!-- recipe: NAME LANG -->` block is run as a reader would run it, from the
repository root (shell blocks with bash, Python blocks as a file with python3), and
must print exactly the block tagged `<!-- output: NAME LANG -->`, or else
`<!-- output: NAME -->`; a recipe with neither (allowed in extending.md only) must
succeed. Separately, each accelerator's documented output is checked against the
semantics in the table at the top of accelerators.md, computed here from the recipe's
inputs, so a page whose recipes and outputs agree with each other but not with the
specification fails too.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

from conftest import ADMIN_TOKEN, PRODUCTION_CONFIG, ROOT
from docblocks import tagged_blocks

PAGE = ROOT / "docs" / "accelerators.md"
EXTENDING = ROOT / "docs" / "extending.md"
SECURITY = ROOT / "docs" / "security.md"
QUOTAS = ROOT / "docs" / "quotas.md"
#: Each page, and the node its recipes run against (a fixture of conftest.py).
NODE_OF_PAGE = {PAGE: "node", EXTENDING: "node", SECURITY: "secured_node", QUOTAS: "quota_node"}
BLOCKS = {page: tagged_blocks(page) for page in NODE_OF_PAGE}
OUTPUTS = {b.name: b for b in BLOCKS[PAGE] if b.kind == "output"}
RECIPES = [(page, b) for page, blocks in BLOCKS.items() for b in blocks if b.kind == "recipe"]
#: Generous: a recipe may build an example with cargo on a loaded machine.
RECIPE_TIMEOUT_S = 300


def node_fixture(page: Path, block) -> str:
    """The node a recipe runs against: security.md's `production-*` recipes against
    the production profile, every other recipe against its page's node."""
    if page == SECURITY and block.name.startswith("production"):
        return "production_node"
    if page == SECURITY and block.name.startswith("registry"):
        return "secured_registry"
    return NODE_OF_PAGE[page]


def documented_output(page: Path, recipe_name: str) -> Optional[str]:
    outputs = {b.name: b.text for b in BLOCKS[page] if b.kind == "output"}
    return outputs.get(recipe_name, outputs.get(recipe_name.split()[0]))


def run_recipe(page: Path, block, node, tmp_path: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["NETACCEL_NODE"] = node.url
    env["NETACCEL_RAC_ADDR"] = node.rac
    env["NETACCEL_TOKEN"] = ADMIN_TOKEN
    if getattr(node, "registry", None):
        env["NETACCEL_REGISTRY"] = node.registry
    env["PATH"] = f"{node.bin_dir}{os.pathsep}{env.get('PATH', '')}"
    client = str(ROOT / "clients" / "python")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (client, env.get("PYTHONPATH")) if p)
    if block.lang == "python":
        script = tmp_path / "recipe.py"
        script.write_text(block.text, encoding="utf-8")
        args = [sys.executable, str(script)]
    elif block.lang == "sh":
        # -e and pipefail so that a failing curl in the middle of a pipe fails the test
        # instead of feeding an empty result to the decoder.
        args = ["bash", "-e", "-o", "pipefail", "-c", block.text]
    else:
        raise AssertionError(f"{page.name}:{block.line}: no runner for ```{block.lang}")
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, timeout=RECIPE_TIMEOUT_S)


@pytest.mark.parametrize(
    "page,block", RECIPES, ids=[f"{p.stem}:{b.name.replace(' ', '-')}" for p, b in RECIPES]
)
def test_recipe_prints_the_documented_output(page, block, request, tmp_path):
    node = request.getfixturevalue(node_fixture(page, block))
    done = run_recipe(page, block, node, tmp_path)
    stderr = done.stderr.decode(errors="replace")
    where = f"{page.name}:{block.line} `{block.name}`"
    assert done.returncode == 0, f"{where} failed:\n{stderr}"
    want = documented_output(page, block.name)
    if want is not None:
        assert done.stdout.decode("utf-8") == want, (
            f"{where} printed something else than the page says (stderr: {stderr!r})"
        )


def test_every_recipe_of_the_accelerators_page_has_a_documented_output():
    missing = [b.name for p, b in RECIPES if p == PAGE and documented_output(p, b.name) is None]
    assert not missing, f"{PAGE.name}: recipes with no output block: {missing}"


def test_every_accelerator_of_the_node_has_a_shell_and_a_python_recipe(node):
    catalog = {a["name"] for a in node.get_json("/v1/accelerators")}
    recipes = {tuple(b.name.split()[:2]) for p, b in RECIPES if p == PAGE}
    missing = sorted(
        f"{name} {lang}" for name in catalog for lang in ("sh", "python")
        if (name, lang) not in recipes
    )
    assert not missing, f"{PAGE.name} has no recipe for: {', '.join(missing)}"


# --- what the specification table says each recipe's output must be -----------------
#
# The inputs are those of the recipes; each reference follows the table's wording.


def floats(text: str):
    return [float(v) for v in text.split()]


def ints(text: str):
    return [int(v) for v in text.split()]


def close(got, want, tol):
    return len(got) == len(want) and all(
        (math.isnan(g) and math.isnan(w)) or abs(g - w) <= tol for g, w in zip(got, want)
    )


def spec_echo(out: str):
    assert bytes(int(h, 16) for h in out.split()) == b"a\0b\nc\xff"


def spec_to_uppercase(out: str):
    payload = "héllo, accelerator! 123\n".encode()
    want = bytes(b - 0x20 if 0x61 <= b <= 0x7A else b for b in payload)
    assert out.encode() == want


def spec_topk(out: str):
    values, k = [5, -3, 9, 9, 0, 2], 3
    assert ints(out) == sorted(values, reverse=True)[: min(k, len(values))]


def spec_logit(out: str):
    xs, eps = [0.0, 0.25, 0.5, 0.9], 0.001
    want = []
    for x in xs:
        c = min(max(x, eps), 1 - eps)
        want.append(math.log(c / (1 - c)))
    # Printed with 4 decimals: half a unit of the last one, plus the kernel's accuracy.
    assert close(floats(out), want, 0.5e-4 + 1e-5 * max(1, max(abs(w) for w in want)))


def spec_minmax(out: str):
    xs = [2.0, 4.0, 6.0, 10.0]
    lo, hi = min(xs), max(xs)
    want = [(x - lo) / (hi - lo) if hi > lo else 0.0 for x in xs]
    assert close(floats(out), want, 0.5e-4 + 1e-6)


def spec_sobel(out: str):
    width, height = 5, 4
    img = [[0, 0, 0, 50, 50] for _ in range(height)]
    gx = [[-1, 0, 1], [-2, 0, 2], [-1, 0, 1]]
    gy = [[-1, -2, -1], [0, 0, 0], [1, 2, 1]]
    want = []
    for y in range(height):
        for x in range(width):
            if x in (0, width - 1) or y in (0, height - 1):
                want.append(0)
                continue
            sx = sum(gx[j][i] * img[y + j - 1][x + i - 1] for j in range(3) for i in range(3))
            sy = sum(gy[j][i] * img[y + j - 1][x + i - 1] for j in range(3) for i in range(3))
            want.append(min(255, abs(sx) + abs(sy)))
    rows = out.splitlines()
    assert len(rows) == height and all(len(r.split()) == width for r in rows)
    assert ints(out) == want


def spec_matmul(out: str):
    n = 2
    a = [[1, 2], [3, 4]]
    b = [[5, 6], [7, 8]]
    want = [sum(a[i][k] * b[k][j] for k in range(n)) for i in range(n) for j in range(n)]
    tol = [1e-4 * sum(abs(a[i][k] * b[k][j]) for k in range(n)) + 1e-6
           for i in range(n) for j in range(n)]
    got = floats(out)
    assert len(got) == n * n and all(abs(g - w) <= t for g, w, t in zip(got, want, tol))


SPEC = {
    "echo": spec_echo,
    "to_uppercase": spec_to_uppercase,
    "topk": spec_topk,
    "logit": spec_logit,
    "minmax": spec_minmax,
    "sobel": spec_sobel,
    "matmul": spec_matmul,
}


@pytest.mark.parametrize("name", sorted(SPEC))
def test_documented_output_follows_the_specification(name):
    assert name in OUTPUTS, f"{PAGE.name} has no output block for {name}"
    SPEC[name](OUTPUTS[name].text)


def test_every_documented_output_is_checked_against_the_specification():
    unchecked = {name.split()[0] for name in OUTPUTS} - set(SPEC) - {"refused"}
    assert not unchecked, f"outputs with no specification check: {sorted(unchecked)}"


# --- code quoted from the repository --------------------------------------------------


EXCERPTS = [(page, b) for page, blocks in BLOCKS.items() for b in blocks if b.kind == "excerpt"]


@pytest.mark.parametrize("page,block", EXCERPTS, ids=[f"{p.stem}:{b.line}" for p, b in EXCERPTS])
def test_quoted_code_is_in_the_file_it_is_quoted_from(page, block):
    """An `<!-- excerpt: PATH -->` block must appear in PATH (indentation aside), so
    that the page cannot drift from the code it quotes."""

    def flat(text: str) -> str:
        return "\n".join(line.strip() for line in text.splitlines() if line.strip())

    source = (ROOT / block.name).read_text(encoding="utf-8")
    assert flat(block.text) in flat(source), f"{page.name}:{block.line}: not found in {block.name}"


def test_the_production_profile_on_the_page_is_the_one_tested():
    """security.md's production `node.toml` is the configuration its `production-*`
    recipes run against, word for word."""
    text = SECURITY.read_text(encoding="utf-8")
    assert f"```toml\n{PRODUCTION_CONFIG}```" in text, "security.md's production profile drifted"
