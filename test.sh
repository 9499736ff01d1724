#!/usr/bin/env bash
# Runs the whole netaccel test suite: formatting, lints, unit and property tests,
# black-box tests that start the real node and drive it with curl and Rust clients,
# fuzz-corpus regression tests, the Python client's tests, and the check that
# netaccel-bench agrees with wrk (one connection, short).
#
# Installs what it needs: Debian packages via apt-get (when run as root and missing),
# crates via cargo, Python test tools via pip, the TypeScript client's dev dependencies via
# npm and the Java client's test libraries via Maven.
#
# No test binds a fixed port. NETACCEL_TEST_HOLD_PORTS="8080 9400 9500 8001 19090" shows it:
# bench/tools/hold_ports.py stands in for other programs on those loopback ports (the node's
# defaults, the old benchmark port) for the whole run, which must pass all the same; CI
# sets it (.ci/run). When a step fails, the last line names it.
set -euo pipefail
cd "$(dirname "$0")"

step=""
cleanups=()
finish() {
  local status=$? c
  for c in "${cleanups[@]}"; do eval "$c" || true; done
  if ((status != 0)); then echo "==> FAILED (exit status $status) in step: $step" >&2; fi
}
trap finish EXIT
# Each step says when it starts (minutes into the run), so a slow step shows in CI's log.
begin() { step=$1; echo "==> $1 (at $((SECONDS / 60)) min $((SECONDS % 60)) s)"; }

step="installing Debian packages"
debian_packages=(curl openssl iproute2 nftables make gcc wrk strace pkg-config ocl-icd-opencl-dev ocl-icd-libopencl1 opencl-headers pocl-opencl-icd clinfo prometheus chromium etcd-server protobuf-compiler verilator yosys)

missing=()
for p in "${debian_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    echo "==> installing Debian packages: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "missing Debian packages: ${missing[*]} (run as root to install them)" >&2
    exit 1
  fi
fi

if [[ -n "${NETACCEL_TEST_HOLD_PORTS:-}" ]]; then
  step="holding ports $NETACCEL_TEST_HOLD_PORTS"
  hold_ready=$(mktemp)
  # shellcheck disable=SC2086 # a list of ports
  python3 bench/tools/hold_ports.py "$hold_ready" $NETACCEL_TEST_HOLD_PORTS &
  cleanups+=("kill $! 2>/dev/null; rm -f '$hold_ready'")
  for _ in $(seq 100); do [[ -s "$hold_ready" ]] && break; sleep 0.1; done
  [[ -s "$hold_ready" ]] || { echo "bench/tools/hold_ports.py did not start" >&2; exit 1; }
  echo "==> loopback ports taken for this run: $(cat "$hold_ready")"
fi

# Python test tools from PyPI: pytest for the client's tests; pyopencl (with numpy)
# for the check that an unmodified pyopencl program runs against a remote device.
step="installing Python test tools"
for module in pytest pyopencl; do
  if ! python3 -c "import $module" >/dev/null 2>&1; then
    echo "==> installing $module"
    python3 -m pip install -q "$module"
  fi
done
# tritonclient[http,grpc] (with numpy, grpcio) for the Open Inference Protocol v2 tests
# (docs/tests/test_inference.py, test_inference_grpc.py): the client people already run
# against Triton.
if ! python3 -c "import tritonclient.http, tritonclient.grpc" >/dev/null 2>&1; then
  echo "==> installing tritonclient[http,grpc]"
  python3 -m pip install -q "tritonclient[http,grpc]"
fi

# scikit-learn (the digits data set and its held-out split) and onnxruntime (the
# reference the node's ONNX models are checked against) for docs/tests/test_onnx.py;
# onnx (the helper API) for the models of Triton's examples
# (bench/triton_examples/make_models.py) and the Identity models of every datatype that
# crates/node/tests/oip_datatypes.rs writes at test time (crates/node/tests/oip/);
# pillow (PIL) to encode and preprocess the pictures of the image ensemble's test
# (crates/node/tests/triton_examples/test_image_ensemble.py).
for module in sklearn onnxruntime onnx PIL; do
  if ! python3 -c "import $module" >/dev/null 2>&1; then
    echo "==> installing $module"
    case $module in
    sklearn) python3 -m pip install -q scikit-learn ;;
    PIL) python3 -m pip install -q pillow ;;
    *) python3 -m pip install -q "$module" ;;
    esac
  fi
done

# cocotb and cocotbext-axi for the RTL testbenches (rtl/test.sh), at versions that work
# with Debian's Verilator 5.006: cocotb 1.9, and cocotb-bus 0.1.1 (later releases list
# the design's signals in a way that makes Verilator 5.006 ignore every value written).
step="installing cocotb"
rtl_python=("cocotb==1.9.2" "cocotb-bus==0.1.1" "cocotbext-axi==0.1.24")
rtl_python_found=$(python3 -m pip freeze 2>/dev/null | grep -cixF "${rtl_python[@]/#/-e}" || true)
if ((rtl_python_found != ${#rtl_python[@]})); then
  echo "==> installing ${rtl_python[*]}"
  python3 -m pip install -q "${rtl_python[@]}"
fi

begin "cargo fmt --check"
cargo fmt --all -- --check

begin "cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings

# The Kubernetes tests (crates/registry/tests/kubernetes*.rs) run a real control plane:
# kube-apiserver, controller manager, scheduler, kubectl and helm, built from the Go
# module proxy (Go >= 1.24) once and cached under ~/.cache/netaccel (about 15 minutes
# on 2 cores the first time, nothing afterwards). See docs/kubernetes.md.
# The tests that run Pods (kubernetes_pods.rs) add a kubelet, containerd 2.x (Go >= 1.26.6,
# fetched by GOTOOLCHAIN), a static pause and the DRA kubelet plugin, built and cached
# by the same script, and Debian's runc, CNI plugins, iptables and static busybox.
# Without Go (or the proxy) the Kubernetes tests skip themselves, except under CI.
step="installing the Kubernetes node's Debian packages"
k8s_node_packages=()
for p in runc containernetworking-plugins iptables busybox-static gcc libc6-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || k8s_node_packages+=("$p")
done
if ((${#k8s_node_packages[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "missing Debian packages: ${k8s_node_packages[*]} (run as root to install them)" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${k8s_node_packages[@]}" >/dev/null
fi
begin "Kubernetes control plane, kubelet, containerd and helm (built once, cached)"
if ! deploy/k8s-test/build.sh; then
  [[ -z "${CI:-}" ]] || exit 1
  echo "==> the Kubernetes control plane could not be built: its tests will be skipped (CI unset)"
fi

# The DRA kubelet plugin's own tests (checkpoint, CDI spec, waiting for the registry's
# record, refusals), with Go's vet; its modules are in the Go cache once build.sh ran.
begin "DRA kubelet plugin: go vet and go test"
if command -v go >/dev/null || [[ -x /usr/local/go/bin/go ]]; then
  (cd deploy/dra-kubelet-plugin && PATH="$PATH:/usr/local/go/bin" && go vet ./... && go test ./...)
elif [[ -n "${CI:-}" ]]; then
  echo "go is needed for the DRA kubelet plugin's tests" >&2
  exit 1
else
  echo "==> no go: the DRA kubelet plugin's tests are skipped (CI unset)"
fi

# Among them crates/node/tests/budget.rs, the per-call budget of a small call (issue 28):
# system calls, wake-ups, allocations and timers per call, counted (strace, a counting
# allocator), not timed; it fails under CI when strace cannot trace.
# Among them too the remote OpenCL tests with identities (issue 31), on PoCL with gcc
# (certificates made by rcgen), about 10 s: crates/node/tests/opencl_tenants.rs (tokens,
# the opencl policy key, per-tenant memory quotas, guessed ids, SIGHUP, audit lines, a
# real program through the ICD), opencl_tls.rs (the ICD over tls://, client
# certificates), opencl_devices.rs (per-device grants, `opencl_devices`: PoCL's CPU
# device twice, a tenant sees and uses only its own, forged device ids refused, SIGHUP;
# a few seconds), crates/ocl-remote/tests/gate.rs (the gate in and out of process) and
# multi_device.rs (a session's device mask, in and out of process).
# Among them too the fair sharing of one OpenCL device on PoCL, about 35 s:
# crates/node/tests/opencl_slots_load.rs (slot calls and remote programs, each keeps at
# least 0.3 of its rate alone) and crates/ocl-remote/tests/fair_shares.rs (two sessions).
begin "cargo test (workspace)"
# A CI checkout is built once: incremental compilation's caches would only take disk.
if [[ -n "${CI:-}" ]]; then export CARGO_INCREMENTAL=0; fi
cargo test --workspace

# The other network paths run the same front-end, connection, cancellation, overload
# and drain tests as the default (the node's own epoll loop), and the hostile-tenant
# suite (authentication and policies on every port, about a second; it ran on the
# default with the workspace above): io_uring (network = "io_uring";
# crates/node/tests/uring.rs checks the node is really on io_uring, and fails under CI
# when the kernel refuses io_uring) and epoll through tokio's runtime
# (network = "tokio").
begin "cargo test: the node's front ends again on the io_uring and tokio network paths"
# The executables the workspace's cargo test built, run again: `cargo test -p
# netaccel-node` would resolve features for that one package and build a second copy of
# the node and much of its dependency tree (minutes, and gigabytes of disk).
path_tests=$(cargo test --workspace --no-run --message-format=json 2>/dev/null |
  bench/tools/test_executables.py crates/node cancellation connections hostile_tenants http_api overload overload_drain rac)
for network in io_uring tokio; do
  for t in $path_tests; do
    (cd crates/node && NETACCEL_TEST_NETWORK=$network "$t")
  done
done

# netaccel-sim (docs/simulation.md): its own checks (same seed, same bytes; M/D/1 and
# M/M/1 mean waits within 3 % over 10^6 calls; Little's law; the golden trace of the
# dispatch core's decisions; the watchdog, network threads and inline calls in
# tests/node_paths.rs) ran in the workspace's cargo test above, in debug, about a
# minute on 2 cores; its page's recipes run with the documentation tests. Here: every
# scenario and experiment shipped in crates/sim/scenarios still loads and runs (2,000
# calls a run, a few seconds), and so does the scenario bench/sim/validate.sh writes
# for its simulator side.
begin "netaccel-sim: the shipped scenarios and experiments run"
cargo build -q -p netaccel-sim
sim_dir=$(mktemp -d)
cleanups+=("rm -rf '$sim_dir'")
sim_bin="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')/debug/netaccel-sim"
for s in crates/sim/scenarios/*.toml; do
  case $s in
    *.experiment.toml) cmd=(experiment "$s" --out "$sim_dir" --calls 2000) ;;
    *) cmd=(run "$s" --out "$sim_dir" --calls 2000 --no-calls) ;;
  esac
  "$sim_bin" "${cmd[@]}" >"$sim_dir/log" 2>&1 || { cat "$sim_dir/log"; exit 1; }
done
python3 bench/sim/validate.py scenario 2000 0.6 0 10 20 0.5 1 echo:a:64 echo:b:4096 logit:a:256 >"$sim_dir/validate.toml"
"$sim_bin" run "$sim_dir/validate.toml" --out "$sim_dir" --calls 2000 --no-calls >"$sim_dir/log" 2>&1 || { cat "$sim_dir/log"; exit 1; }

begin "RTL accelerators: cocotb testbenches on Verilator"
rtl/test.sh

begin "Python client tests (against a live node, and a registry with two nodes)"
cargo build -q -p netaccel-node -p netaccel-registry
node_dir=$(mktemp -d)
cleanups+=("rm -rf '$node_dir'")
# Two distinct free ports: both sockets are bound before either is released.
read -r http_port rac_port < <(python3 -c 'import socket
socks = [socket.socket() for _ in range(2)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))')
printf 'http = "127.0.0.1:%s"\nrac = "127.0.0.1:%s"\nlog_level = "warn"\n' "$http_port" "$rac_port" > "$node_dir/node.toml"
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
"$target_dir/debug/netaccel-node" --config "$node_dir/node.toml" &
node_pid=$!
cleanups=("kill $node_pid 2>/dev/null" "${cleanups[@]}")
for _ in $(seq 100); do
  # The node prints its own error (a port taken, say) on stderr before it exits.
  kill -0 "$node_pid" 2>/dev/null || { echo "the node (HTTP port $http_port, RAC port $rac_port) exited at start-up" >&2; exit 1; }
  curl -sf "http://127.0.0.1:$http_port/health" >/dev/null && break
  sleep 0.1
done
curl -sSf "http://127.0.0.1:$http_port/health" >/dev/null || { echo "the node did not answer on port $http_port within 10 s" >&2; exit 1; }
# The registry tests (tests/test_registry.py) start their own registry and nodes from
# these binaries.
NETACCEL_RAC_ADDR="127.0.0.1:$rac_port" \
  NETACCEL_REGISTRY_BIN="$target_dir/debug/netaccel-registry" \
  NETACCEL_NODE_BIN="$target_dir/debug/netaccel-node" \
  python3 -m pytest -q clients/python

# The TypeScript and Java clients' toolchains (Node.js with npm; a JDK 17 with Maven) from
# Debian when a command is missing: their unit tests below and their conformance drivers
# need them.
step="installing the TypeScript and Java clients' toolchains"
client_toolchain=()
command -v node >/dev/null && command -v npm >/dev/null || client_toolchain+=(nodejs npm)
command -v javac >/dev/null || client_toolchain+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null || client_toolchain+=(maven)
if ((${#client_toolchain[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "missing Debian packages: ${client_toolchain[*]} (run as root to install them)" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${client_toolchain[@]}" >/dev/null
fi

# The TypeScript client (clients/typescript), its dev dependencies (typescript,
# @types/node) from npm: the shared vectors and registry fixtures byte for byte, hostile
# headers, and the client against a scripted fake node and fake registry replicas
# (node:test, each test bounded at 20 s).
begin "clients: TypeScript client unit tests (npm test)"
(cd clients/typescript && npm ci --no-audit --no-fund --silent && npm test --silent)

# The Java client (clients/java), JUnit 5 from Maven Central: the same tests as the
# TypeScript client's, with javac's lints as errors.
begin "clients: Java client unit tests (mvn test)"
(cd clients/java && mvn -q -B test)

# The Java Open Inference Protocol example (clients/java/examples/oip-grpc): grpc-java
# stubs generated from crates/node/proto by the protobuf-maven-plugin, protoc and
# protoc-gen-grpc-java fetched from Maven Central as artifacts (about 30 MB on a cold
# cache). Built here; docs/tests/test_clients.py (below) runs it against a live node
# as docs/clients.md's recipe.
begin "clients: Java OIP gRPC example (stubs generated from the vendored protos)"
(cd clients/java/examples/oip-grpc && mvn -q -B compile)

# The clients' shared conformance suite (clients/conformance/README.md): every case of
# cases.json run by every client's driver (clients/conformance/drivers/*.sh, each
# building its client with that language's own tools) against real nodes, a fake node
# that sends broken replies and fake registry replicas, and the registry cases again
# against real registry replicas in HA mode on one etcd (etcd-server, above) with real
# nodes, shared by every driver; all on free ports.
begin "C client: installed with pkg-config, its example compiled by gcc and run"
c_prefix=$(mktemp -d)
cleanups+=("rm -rf '$c_prefix'")
PROFILE=debug crates/client-c/install.sh "$c_prefix" >/dev/null
# shellcheck disable=SC2046 # pkg-config prints several flags
gcc -std=c11 -Wall -Wextra -Werror crates/client-c/examples/hello.c \
  $(PKG_CONFIG_PATH="$c_prefix/lib/pkgconfig" pkg-config --cflags --libs netaccel) -o "$c_prefix/hello"
"$c_prefix/hello" "127.0.0.1:$rac_port"

# The Go client (clients/go, standard library only): Go >= 1.22, from Debian's
# golang-go when the host has no go command; its unit tests read spec/rac-v1-vectors.json
# and spec/registry/*.json.
begin "Go client: go vet and go test"
if ! command -v go >/dev/null && [[ $(id -u) -eq 0 ]]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go >/dev/null
fi
if command -v go >/dev/null; then
  (cd clients/go && go vet ./... && go test -count=1 ./...)
else
  [[ -z "${CI:-}" ]] || { echo "go is not installed" >&2; exit 1; }
  echo "==> go is not installed: the Go client's tests are skipped (CI unset)"
fi

# The Go and C++ Open Inference Protocol examples (clients/go/examples/oip-grpc,
# clients/cpp/oip-grpc): stubs generated from crates/node/proto by protoc — grpc-go's
# generators and modules from the Go module proxy, grpc++'s plugin and libraries from
# Debian (protobuf-compiler-grpc, libgrpc++-dev). Built here (about a minute on 2 cores,
# most of it compiling the generated C++); docs/tests/test_clients.py (below) runs both
# against a live node as docs/clients.md's recipes.
begin "clients: Go and C++ OIP gRPC examples (stubs generated from the vendored protos)"
oip_packages=()
command -v g++ >/dev/null || oip_packages+=(g++)
command -v grpc_cpp_plugin >/dev/null || oip_packages+=(protobuf-compiler-grpc)
pkg-config --exists grpc++ || oip_packages+=(libgrpc++-dev)
if ((${#oip_packages[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "missing Debian packages: ${oip_packages[*]} (run as root to install them)" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${oip_packages[@]}" >/dev/null
fi
make -s -C clients/cpp/oip-grpc
if command -v go >/dev/null; then
  clients/go/examples/oip-grpc/build.sh
else
  [[ -z "${CI:-}" ]] || { echo "go is not installed" >&2; exit 1; }
  echo "==> go is not installed: the Go OIP example is skipped (CI unset)"
fi

# The registry's replicas under faults (bench/jepsen, docs/jepsen.md): the checker's model
# tests, then 60 s of 10 clients against 3 replicas on a 3-member etcd while a nemesis
# kills, pauses and partitions replicas and kills etcd members (network namespaces: root;
# without them a skip, under CI a failure), the history decided by porcupine (from the
# Go module proxy); then 10 s of the planted bug (cargo feature
# jepsen-plant-follower-acks-writes), which must be caught. 1 min 50 s on 2 cores shared
# with other builds, the planted registry's build included.
begin "registry under faults: bench/jepsen (model tests, 60 s of faults, the planted bug)"
if command -v go >/dev/null; then
  (cd bench/jepsen && go vet ./... && go test -count=1 ./...)
  jepsen_out=$(mktemp -d)
  cleanups+=("rm -rf '$jepsen_out'")
  # Every fault kind, etcd-member-loss included (docs/jepsen.md, anomaly 7, fixed).
  JEPSEN_FAULTS=kill-leader,kill-follower,pause-leader,pause-follower,partition-leader,partition-follower,netem-leader,loss-leader,etcd-member-loss,node-loss \
    JEPSEN_OUT="$jepsen_out" bench/jepsen/run.sh 1 10
else
  [[ -z "${CI:-}" ]] || { echo "go is not installed" >&2; exit 1; }
  echo "==> go is not installed: bench/jepsen is skipped (CI unset)"
fi

# Data-path faults for nodes under load (bench/faults, docs/faults.md): three real nodes
# in network namespaces and a real registry, six clients calling over HTTP and RAC
# through their bindings, every answer checked against its call's tag, while one fault
# at a time is on for 3 s (a node cut from its clients, cut from the registry, slowed
# by SIGSTOP bursts, its cache disk full; a hung kernel in a slot being reconfigured;
# Prometheus down): no call answered wrong, none left unanswered. Namespaces and the
# tmpfs need root: without them the test skips, under CI it fails.
begin "data-path faults: bench/faults (six faults under load, 3 s each)"
faults_out=$(mktemp -d)
cleanups+=("rm -rf '$faults_out'")
FAULTS_OUT="$faults_out" bench/faults/run.sh 3

begin "clients: the shared conformance suite (every client, every case)"
NETACCEL_NODE_BIN="$target_dir/debug/netaccel-node" NETACCEL_REGISTRY_BIN="$target_dir/debug/netaccel-registry" \
  python3 -m pytest -q clients/conformance

# The documentation's promises, against nodes it starts on free ports: every recipe of
# docs/accelerators.md, extending.md and security.md prints what the page says (and
# opencl.md's, through the ICD with clinfo: tenants and tokens on the OpenCL port); the
# monitoring files and the metrics reference match what a live node exports
# (promtool, and a real Prometheus scraping the node).
begin "documentation tests (recipes, monitoring, metrics reference)"
python3 -m pytest -q docs/tests

# What Triton's own Python client examples do (statistics, model repository, infer with
# each of their models, over HTTP and gRPC, image classification, the image ensemble
# from encoded files, dims a call gives, cancelled calls) with tritonclient, against a node serving the examples' models
# generated by bench/triton_examples/make_models.py (10 to 40 s on 2 cores). The examples
# themselves (not downloadable here) run with bench/triton_examples/run.sh.
begin "Triton's examples' calls with tritonclient (crates/node/tests/triton_examples)"
python3 -m pytest -q crates/node/tests/triton_examples

# netaccel-bench and wrk against the same C HTTP responder, 1 connection, 7 rounds of
# 2 s (wrk counts its start-up in its rate, which weighs on 1 s runs): the medians of
# the per-round ratios of calls/s and p50 within 10% of 1. At 16 connections the p50s
# differ by about 10% on this 2-core machine; that comparison is in
# bench/wrk_agreement/run.sh and docs/benchmarks.md, not in this gate. On a shared machine
# a burst of noise can move several rounds of one tool (+24 % in two of seven rounds
# here), so a failed check is run once more; a real disagreement fails both.
begin "netaccel-bench agrees with wrk (1 connection)"
cargo build --release -q -p netaccel-bench
wrk_check() { BENCH_BIN="$target_dir/release/netaccel-bench" CONNS_LIST=1 ROUNDS=7 DURATION=2 bench/wrk_agreement/run.sh; }
wrk_check || { echo "==> wrk agreement failed once; measuring again"; wrk_check; }

step="done"
echo "==> all tests passed in $((SECONDS / 60)) min $((SECONDS % 60)) s"
