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

# Ports. No script binds a fixed port: another program may hold it (a web server on
# 8080, a node on 9400), and a server that cannot bind must not leave the benchmark
# measuring that other program. Each port variable left unset gets a port the kernel
# reports free at start; one set by the caller is checked, and a taken one stops the
# script with its number and, when `ss` can tell, the program holding it.

# port_probe [--free N] [PORT...]: with --free, prints N distinct ports that are free
# on HOST (bound to port 0 together, then released), none of them among the PORTs;
# without, prints each PORT that cannot be bound on HOST (taken). SO_REUSEADDR as the
# servers use it, so that connections in TIME_WAIT do not count as taken.
port_probe() {
    command -v python3 >/dev/null || die "python3 is needed to choose free ports"
    python3 - "$HOST" "$@" <<'EOF'
import socket, sys
host, args = sys.argv[1], sys.argv[2:]
free = 0
if args[:1] == ["--free"]:
    free, args = int(args[1]), args[2:]
def sock():
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    return s
held, out = [], []
while len(out) < free:
    s = sock()
    s.bind((host, 0))
    held.append(s)
    port = s.getsockname()[1]
    if str(port) not in args:
        out.append(port)
for port in ([] if free else args):
    try:
        sock().bind((host, int(port)))
    except OSError:
        out.append(port)
print(*out, sep="\n")
EOF
}

# port_holder PORT: " (held by PROGRAM, pid N)" when `ss` shows who listens on PORT.
port_holder() {
    local who
    who=$(ss -Hltnp "sport = :$1" 2>/dev/null | grep -o 'users:(("[^"]*",pid=[0-9]*' | head -n 1) || true
    [[ -n "$who" ]] || return 0
    who=${who#users:((\"}
    printf ' (held by %s, pid %s)' "${who%%\"*}" "${who##*pid=}"
}

# pick_ports VAR...: sets each VAR that is unset or empty to a free port on HOST, all
# distinct; dies naming the port, the variable and the holder if a VAR given by the
# caller is taken.
pick_ports() {
    local var taken=() given=() wanted=() ports=() i=0
    for var; do
        if [[ -n "${!var:-}" ]]; then given+=("${!var}"); else wanted+=("$var"); fi
    done
    if ((${#given[@]})); then
        mapfile -t taken < <(port_probe "${given[@]}")
        for var; do
            [[ -n "${!var:-}" && " ${taken[*]} " == *" ${!var} "* ]] || continue
            die "port ${!var} ($var) on $HOST is taken$(port_holder "${!var}"); set $var to a free port, or leave it unset and a free one is chosen"
        done
    fi
    ((${#wanted[@]})) || return 0
    mapfile -t ports < <(port_probe --free "${#wanted[@]}" "${given[@]}")
    ((${#ports[@]} == ${#wanted[@]})) || die "could not find ${#wanted[@]} free ports on $HOST"
    for var in "${wanted[@]}"; do printf -v "$var" '%s' "${ports[i++]}"; done
}

# server_up NAME PID PORT LOG: waits (at most 10 s) until process PID accepts
# connections on HOST:PORT. On failure says why on stderr, with the end of LOG (where
# the server's own error, such as a failed bind, is), and returns 1.
server_up() {
    local name=$1 pid=$2 port=$3 logf=$4 i
    for ((i = 0; i < 100; i++)); do
        if ! kill -0 "$pid" 2>/dev/null; then
            log "$name exited at start-up (port $port$(port_holder "$port")); the end of ${logf#"${ROOT:-}"/}:"
            tail -n 5 "$logf" | sed 's/^/    /' >&2
            return 1
        fi
        # The port was free when chosen (pick_ports), so a listener there while PID
        # lives is PID's: a server that failed to bind exits.
        if (exec 3<>"/dev/tcp/$HOST/$port") 2>/dev/null && kill -0 "$pid" 2>/dev/null; then
            return 0
        fi
        sleep 0.1
    done
    log "$name did not accept connections on $HOST:$port within 10 s; the end of ${logf#"${ROOT:-}"/}:"
    tail -n 5 "$logf" | sed 's/^/    /' >&2
    return 1
}

# median: the median of the numbers on stdin, one per line (nothing for no input).
# stop_process PID [SECONDS]: ends a server: SIGTERM, then SIGKILL if it has not exited
# within SECONDS (default 5), and reaps it. Under valgrind give it 10: valgrind runs one
# thread of the program at a time, and a thread asleep in an `io_uring_enter` that
# waits (the node's io_uring path sleeps in its ring) keeps the others, the one that
# handles SIGTERM among them, from running; natively the node drains and exits.
stop_process() {
    local i tenths=$((${2:-5} * 10))
    kill -TERM "$1" 2>/dev/null || true
    for ((i = 0; i < tenths; i++)); do
        kill -0 "$1" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}

# cpu_ns PID: nanoseconds a process (all its threads) and its children have run: the first
# field of each thread's schedstat. Exact, where utime+stime are rounded to ticks.
cpu_ns() {
    local pid=$1 total=0 p t ns rest
    for p in "$pid" $(pgrep -P "$pid" || true); do
        for t in /proc/"$p"/task/*/schedstat; do
            read -r ns rest 2>/dev/null <"$t" || continue
            total=$((total + ns))
        done
    done
    echo "$total"
}

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
#
# "Preempts at once" is the kernel's promise, and some kernels break it: on one (6.18 on
# a shared VM) a task woken on a CPU running such a loop waited for the next tick, so
# every call took 2-5 ms, the floors' too. So the first awake_start of a script checks
# (awake_probe): a round trip between two processes pinned to the CPUs, without and then
# with the loops; if the loops make it more than 10x slower, they are not used (the run
# says so, as if KEEP_AWAKE=0 had been given).
awake_probe() {
    local cpus=$1 a b quiet loaded p pids=()
    a=${cpus%%[,-]*}; b=${cpus##*[,-]}
    quiet=$(awake_rtt "$a" "$b") || return 0
    for p in $(echo "$cpus" | tr ',' ' '); do
        if [[ $p == *-* ]]; then p=$(seq "${p%-*}" "${p#*-}"); fi
        for p in $p; do
            chrt -i 0 taskset -c "$p" timeout 60 sh -c 'while :; do :; done' &
            pids+=($!)
        done
    done
    loaded=$(awake_rtt "$a" "$b") || loaded=$quiet
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    if python3 -c "import sys; sys.exit(0 if float('$loaded') > 10 * float('$quiet') else 1)"; then
        log "keep-awake loops make a round trip between CPUs $a and $b ${loaded} µs (without: ${quiet} µs): this kernel does not let a woken task preempt them, so they are not used (KEEP_AWAKE=0)"
        return 1
    fi
    return 0
}

# awake_rtt CPU_A CPU_B: the median round trip, µs, of 1 byte over a socket pair
# between two processes pinned to the two CPUs (500 round trips).
awake_rtt() {
    python3 - "$1" "$2" <<'PY'
import os, socket, statistics, sys, time
a, b = int(sys.argv[1]), int(sys.argv[2])
x, y = socket.socketpair()
if os.fork() == 0:
    x.close()
    os.sched_setaffinity(0, {b})
    while (d := y.recv(1)):
        y.send(d)
    os._exit(0)
y.close()
os.sched_setaffinity(0, {a})
times = []
for _ in range(500):
    t = time.perf_counter_ns()
    x.send(b"x")
    x.recv(1)
    times.append(time.perf_counter_ns() - t)
x.close()
os.wait()
print(round(statistics.median(times) / 1000, 1))
PY
}

awake_start() {
    [[ ${KEEP_AWAKE:-1} == 1 ]] || return 0
    if [[ -z ${AWAKE_CHECKED:-} ]]; then
        AWAKE_CHECKED=1
        awake_probe "$1" || { KEEP_AWAKE=0; return 0; }
    fi
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
