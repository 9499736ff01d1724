"""Builds each RTL accelerator with Verilator and runs its cocotb testbench.

Usage: python3 rtl/tb/run.py [NAME ...]   (default: every design under rtl/accelerators)

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


def run(name: str) -> int:
    folder = DESIGNS / name
    manifest = tomllib.loads((folder / "accelerator.toml").read_text())
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
    results = runner.test(
        hdl_toplevel=rtl["top"],
        test_module="test_accelerator",
        test_dir=HERE,
        build_dir=build_dir,
        extra_env={"ACCELERATOR": name, "PYTHONPATH": str(HERE), "COCOTB_LOG_LEVEL": "WARNING"},
    )
    total, failed = get_results(results)
    print(f"==> {name}: {total - failed}/{total} tests passed")
    return failed


def main() -> int:
    names = sys.argv[1:] or sorted(p.parent.name for p in DESIGNS.glob("*/accelerator.toml"))
    os.chdir(HERE)
    failed = sum(run(name) for name in names)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
