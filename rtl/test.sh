#!/usr/bin/env bash
# Runs the cocotb testbench of every RTL accelerator under rtl/accelerators on Verilator
# (rtl/tb/run.py), bounded in time: a design that hangs fails the run instead of stalling
# the suite. Needs verilator and the Python packages test.sh installs (cocotb 1.9 with
# cocotb-bus 0.1.1: later cocotb-bus releases list the design's signals through VPI in a
# way that stops Verilator 5.006 from seeing any value cocotb writes).
#
# Usage: rtl/test.sh [NAME | FOLDER ...] (see rtl/tb/run.py; default: everything).
set -euo pipefail
# Folders are taken relative to where the script is called from.
args=()
for a in "$@"; do
  if [[ $a == */* ]]; then a=$(realpath "$a"); fi
  args+=("$a")
done
cd "$(dirname "$0")"
timeout "${RTL_TB_TIMEOUT_S:-900}" python3 tb/run.py "${args[@]}"
