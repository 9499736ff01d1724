# Helpers shared by the benchmark scripts in this folder. Source it after setting
# BENCH_NAME (the script's name, used in log lines) and HOST (the loopback address).
# shellcheck shell=bash
# shellcheck disable=SC2034 # PRIO_CMD is read by the scripts that source this file

declare -a AWAKE_PIDS=()

log() { printf '[%s] %s\n' "$BENCH_NAME" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# choose_prio: turns PRIO (auto | rt | nice | none) into PRIO_CMD, the prefix that
# runs servers and load generators at a raised priority. auto = SCHED_FIFO when root.
choose_prio() {
    if [[ "$PRIO" == auto ]]; then
        # rt needs CAP_SYS_NICE (root, outside a container that drops it).
        if chrt -f 50 true 2>/dev/null; then PRIO=rt; else PRIO=none; fi
    fi
    case "$PRIO" in
        rt) PRIO_CMD=(chrt -f 50) ;;
        nice) PRIO_CMD=(nice -n -10) ;;
        none) PRIO_CMD=() ;;
        *) die "PRIO must be auto, rt, nice or none" ;;
    esac
}

# wait_port PORT: succeeds once HOST:PORT accepts connections (at most 5 s).
wait_port() {
    local i
    for ((i = 0; i < 50; i++)); do
        (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

# median: the median of the numbers on stdin, one per line (nothing for no input).
median() { sort -g | awk '{ a[NR] = $1 } END { if (NR) print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2) }'; }

# size_name BYTES: "64 B", "4 KiB".
size_name() { if (($1 >= 1024 && $1 % 1024 == 0)); then echo "$(($1 / 1024)) KiB"; else echo "$1 B"; fi; }

# replace_docs_block NAME FILE: replaces the text between <!-- NAME:begin --> and
# <!-- NAME:end --> in docs/benchmarks.md with FILE's contents.
replace_docs_block() {
    local doc="$ROOT/docs/benchmarks.md" begin="<!-- $1:begin -->" end="<!-- $1:end -->"
    if ! grep -qF "$begin" "$doc"; then
        log "docs/benchmarks.md has no $begin marker; not updated"
        return 1
    fi
    awk -v b="$begin" -v e="$end" -v f="$2" '
        $0 == b { print; while ((getline line < f) > 0) print line; skip = 1; next }
        $0 == e { skip = 0 }
        !skip { print }' "$doc" >"$doc.new"
    mv "$doc.new" "$doc"
}

# build_release_bins: builds netaccel-node and netaccel-bench (release) when NODE_BIN or
# BENCH_BIN is missing.
build_release_bins() {
    local pkg bin
    for pkg in netaccel-node netaccel-bench; do
        bin=$NODE_BIN
        [[ $pkg == netaccel-bench ]] && bin=$BENCH_BIN
        if [[ ! -x "$bin" ]]; then
            log "$pkg missing: cargo build --release -p $pkg"
            (cd "$ROOT" && cargo build --release -p "$pkg" >&2) || die "cargo build -p $pkg failed"
        fi
    done
}

# awake_start CPUS / awake_stop [N]: a SCHED_IDLE busy loop on each CPU in the list
# CPUS (as for taskset -c: "0", "0,1", "0-1") until awake_stop, which stops the loops
# started after the first N (default: all). An idle virtual CPU halts, and waking it
# waits for the host's scheduler: tens of µs to milliseconds on a shared machine, which
# then shows up in the latencies measured. Any thread of another class preempts these
# loops at once; threads of the SCHED_IDLE class (the node's slot workers by default)
# share the CPU with them, so scripts keep them off CPUs where such threads work.
# Nothing happens with KEEP_AWAKE=0. The loops end by themselves after an hour.
awake_start() {
    [[ ${KEEP_AWAKE:-1} == 1 ]] || return 0
    local c
    for c in $(echo "$1" | tr ',' ' '); do
        if [[ $c == *-* ]]; then c=$(seq "${c%-*}" "${c#*-}"); fi
        for c in $c; do
            chrt -i 0 taskset -c "$c" timeout 3600 sh -c 'while :; do :; done' &
            AWAKE_PIDS+=($!)
        done
    done
}
awake_stop() {
    local keep=${1:-0} p
    for p in "${AWAKE_PIDS[@]:$keep}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    AWAKE_PIDS=("${AWAKE_PIDS[@]:0:$keep}")
}
