"""Builds each RTL accelerator with Verilator and runs its cocotb testbench.

Usage: python3 rtl/tb/run.py [NAME | FOLDER ...]
  NAME    a built-in under rtl/accelerators, tested by test_accelerator.py
  FOLDER  any accelerator folder with its own test_*.py (docs/rtl.md's example)
  default: every built-in, and the worked example of docs/rtl.md

Exits non-zero when a build fails or any test fails; the per-design results are in
rtl/tb/build/NAME/results.xml. The designs' sources and top modules are read from their
accelerator.toml, the same manifest the node serves them from.
"""

import os
import sys
import tomllib
from pathlib import Path

from cocotb.runner import get_results, get_runner

HERE = Path(__file__).resolve().parent
DESIGNS = HERE.parent / "accelerators"


DOCS_EXAMPLE = HERE.parents[1] / "crates/node/tests/fixtures/rtl/xorbytes"


def run(name: str) -> int:
    own = "/" in name
    folder = Path(name).resolve() if own else DESIGNS / name
    manifest = tomllib.loads((folder / "accelerator.toml").read_text())
    name = manifest["name"]
    rtl = manifest["rtl"]
    build_dir = HERE / "build" / name
    runner = get_runner("verilator")
    runner.build(
        verilog_sources=[folder / source for source in rtl["sources"]],
        hdl_toplevel=rtl["top"],
        build_dir=build_dir,
        build_args=["-Wno-fatal", "-O2"],
        always=False,
    )
    if own:
        tests = sorted(folder.glob("test_*.py"))
        assert tests, f"{folder} has no test_*.py"
        module, test_dir = tests[0].stem, folder
    else:
        module, test_dir = "test_accelerator", HERE
    results = runner.test(
        hdl_toplevel=rtl["top"],
        test_module=module,
        test_dir=test_dir,
        build_dir=build_dir,
        # Into the build folder: the default is the test's own folder, which for a
        # design outside rtl/ (the docs' example) is part of the source tree.
        results_xml=str(build_dir / "results.xml"),
        extra_env={"ACCELERATOR": name, "PYTHONPATH": str(test_dir), "COCOTB_LOG_LEVEL": "WARNING"},
    )
    total, failed = get_results(results)
    print(f"==> {name}: {total - failed}/{total} tests passed")
    return failed


def main() -> int:
    names = sys.argv[1:] or [
        *sorted(p.parent.name for p in DESIGNS.glob("*/accelerator.toml")),
        str(DOCS_EXAMPLE),
    ]
    names = [str(Path(n).resolve()) if "/" in n else n for n in names]
    os.chdir(HERE)
    failed = sum(run(name) for name in names)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
