#!/usr/bin/env bash
# A fuzzing campaign over every fuzz target of the workspace (each crate's fuzz/), with
# libFuzzer through cargo-fuzz, on the stable toolchain (RUSTC_BOOTSTRAP=1 lets cargo-fuzz
# pass the unstable flags it needs).
#
#   bench/fuzz/run.sh [TARGET ...]     default: every target
#
# Each target runs from its checked-in corpus (crates/*/fuzz/corpus/TARGET) into a
# scratch corpus until RUNS executions (default 10^7) or SECONDS_MAX seconds (default
# 1800), whichever comes first, with debug assertions on (the bodies' invariants are
# assertions). A crash stops that target: its input is kept under OUT/crashes/ and the
# run fails at the end. Afterwards the finds are merged into the checked-in corpus with
# libFuzzer's set-cover merge (only inputs that add coverage), unless MERGE=0.
#
# Environment: RUNS, SECONDS_MAX, JOBS (parallel targets, default 1), MAX_LEN (default
# 4096), SANITIZER (default none: the parsers are safe Rust, and without AddressSanitizer
# a target runs about twice as fast; "address" for unsafe code), OUT (default
# bench/out/fuzz-DATE). Writes OUT/summary.tsv: target, executions, seconds, execs/s,
# coverage at start and end, corpus files before and after, crashes, and the CPU
# seconds (user + system) the fuzzing took, which on a shared machine is not its
# wall time.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
RUNS=${RUNS:-10000000}
SECONDS_MAX=${SECONDS_MAX:-1800}
MAX_LEN=${MAX_LEN:-4096}
SANITIZER=${SANITIZER:-none}
MERGE=${MERGE:-1}
OUT=${OUT:-$ROOT/bench/out/fuzz-$(date -u +%Y%m%d-%H%M)}
mkdir -p "$OUT/crashes"
export RUSTC_BOOTSTRAP=1

command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked

# Every (crate dir, target) pair.
targets=()
for toml in crates/*/fuzz/Cargo.toml; do
    dir=$(dirname "$(dirname "$toml")")
    for t in $(sed -n 's/^name = "\(.*\)"$/\1/p' "$toml" | tail -n +2); do
        if [[ $# -eq 0 ]] || printf '%s\n' "$@" | grep -qx "$t"; then targets+=("$dir:$t"); fi
    done
done
[[ ${#targets[@]} -gt 0 ]] || { echo "no fuzz target matches: $*" >&2; exit 2; }

# CPU seconds (user + system) of this shell's finished children, the fuzzers among them,
# from `times` (run here, not in a subshell, which would count its own children only).
children_cpu() {
    times > "$OUT/times"
    tail -1 "$OUT/times" | python3 -c 'import re, sys
print(sum(int(m) * 60 + float(s) for m, s in re.findall(r"(\d+)m([\d.]+)s", sys.stdin.read())))'
}

printf 'target\texecutions\tseconds\texecs_per_s\tcov_start\tcov_end\tcorpus_before\tcorpus_after\tcrashes\tcpu_s\n' > "$OUT/summary.tsv"
failed=0
for pair in "${targets[@]}"; do
    dir=${pair%%:*}; t=${pair##*:}
    corpus="$ROOT/$dir/fuzz/corpus/$t"
    scratch="$OUT/scratch/$t"; mkdir -p "$scratch"
    before=$(ls "$corpus" | wc -l)
    echo "== $t ($dir): building"
    # A fuzz crate is a workspace of its own: it starts from the main workspace's lock,
    # so it builds the dependency versions the project is tested with.
    [[ -f $dir/fuzz/Cargo.lock ]] || cp Cargo.lock "$dir/fuzz/Cargo.lock"
    (cd "$dir" && cargo fuzz build --sanitizer "$SANITIZER" --debug-assertions "$t" >"$OUT/$t.build.log" 2>&1) \
        || { echo "build failed: $OUT/$t.build.log" >&2; failed=1; continue; }
    bin=$(ls -t "$dir"/fuzz/target/*/release/"$t" | head -1)
    echo "== $t: fuzzing (up to $RUNS runs or $SECONDS_MAX s)"
    start=$(date +%s.%N)
    children_cpu > "$OUT/cpu0"
    set +e
    # Each input is also written here before it runs (targets that read it: session),
    # for a crash that ends the process without libFuzzer's report (see below).
    last="$OUT/$t.last-input"
    rm -f "$last"
    (cd "$OUT/crashes" && FUZZ_LAST_INPUT="$last" "$ROOT/$bin" -runs="$RUNS" -max_total_time="$SECONDS_MAX" \
        -max_len="$MAX_LEN" -print_final_stats=1 -artifact_prefix="$OUT/crashes/$t-" \
        "$scratch" "$corpus") >"$OUT/$t.log" 2>&1
    rc=$?
    set -e
    end=$(date +%s.%N)
    children_cpu > "$OUT/cpu1"
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$OUT/$t.log" | tail -1)
    cov0=$(grep -m1 -o 'INITED cov: [0-9]*' "$OUT/$t.log" | grep -o '[0-9]*$' || true)
    cov1=$(grep -o 'cov: [0-9]*' "$OUT/$t.log" | tail -1 | grep -o '[0-9]*$' || true)
    # A target that died without a crash input of libFuzzer's (an abort its handler
    # never saw, as PoCL's assertion was) leaves the input it was running; a run
    # stopped with SIGINT ("run interrupted") did not die of its input.
    if [[ $rc -ne 0 && -f $last ]] && ! grep -q "run interrupted" "$OUT/$t.log" \
        && ! ls "$OUT/crashes" | grep -qE "^$t-(crash|leak|timeout|oom)-"; then
        cp "$last" "$OUT/crashes/$t-crash-last-input"
    fi
    # libFuzzer's failures; a `slow-unit-` input (one that took over 10 s, which a
    # compile on a loaded machine may) is kept beside them but fails nothing.
    crashes=$(ls "$OUT/crashes" | grep -cE "^$t-(crash|leak|timeout|oom)-" || true)
    slow=$(ls "$OUT/crashes" | grep -c "^$t-slow-unit-" || true)
    [[ $slow -eq 0 ]] || echo "   $t: $slow slow input(s) in $OUT/crashes (not failures)"
    if [[ $rc -ne 0 || $crashes -ne 0 ]]; then
        echo "!! $t: exit $rc, $crashes crash input(s) in $OUT/crashes (log $OUT/$t.log)" >&2
        failed=1
    elif [[ $MERGE == 1 ]]; then
        "$ROOT/$bin" -set_cover_merge=1 "$corpus" "$scratch" >"$OUT/$t.merge.log" 2>&1
    fi
    after=$(ls "$corpus" | wc -l)
    secs=$(python3 -c "print(round($end - $start, 1))")
    rate=$(python3 -c "print(round(${execs:-0} / max($end - $start, 1e-9)))")
    cpu=$(python3 -c "print(round($(cat "$OUT/cpu1") - $(cat "$OUT/cpu0"), 1))")
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "${execs:-0}" "$secs" "$rate" \
        "${cov0:-?}" "${cov1:-?}" "$before" "$after" "$crashes" "$cpu" | tee -a "$OUT/summary.tsv"
done
column -t "$OUT/summary.tsv"
echo "summary: $OUT/summary.tsv"
exit $failed
