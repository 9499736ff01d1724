"""docs/rtl.md's cocotb example, run as the page says: the page's test_xorbytes.py
against the xorbytes design, with the page's command, in a folder laid out as the
page's `accelerators/xorbytes/`. The test passes, and the folder the node scans holds
only the accelerator's files afterwards (no `sim_build/`, `results.xml` or
`__pycache__`).
"""

from __future__ import annotations

import os
import shutil
import subprocess

from conftest import ROOT, require
from docblocks import tagged_blocks

PAGE = ROOT / "docs" / "rtl.md"
DESIGN = ROOT / "crates" / "node" / "tests" / "fixtures" / "rtl" / "xorbytes"
#: Verilator builds the design first: minutes on a loaded 2-core machine.
TIMEOUT_S = 900


def test_the_cocotb_example_passes_and_leaves_the_folder_clean(tmp_path):
    require(shutil.which("verilator") is not None, "verilator is not installed")
    require(shutil.which("cocotb-config") is not None, "cocotb is not installed (see test.sh)")
    blocks = {b.name: b.text for b in tagged_blocks(PAGE) if b.kind == "rtl"}
    folder = tmp_path / "accelerators" / "xorbytes"
    folder.mkdir(parents=True)
    for name in ("accelerator.toml", "xorbytes.v"):
        shutil.copy(DESIGN / name, folder / name)
    (folder / "test_xorbytes.py").write_text(blocks["test_xorbytes.py"])
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # mktemp's build folder, removed with tmp_path
    run = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", blocks["cocotb-run"]],
        cwd=folder, env=env, capture_output=True, text=True, timeout=TIMEOUT_S,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "FAIL=0" in run.stdout and "PASS=1" in run.stdout, run.stdout[-3000:]
    assert sorted(p.name for p in folder.iterdir()) == ["accelerator.toml", "test_xorbytes.py", "xorbytes.v"]
    assert run.stdout.split()[-3:] == ["accelerator.toml", "test_xorbytes.py", "xorbytes.v"]
