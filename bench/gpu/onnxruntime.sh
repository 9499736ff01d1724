#!/usr/bin/env bash
# The check that needs a GPU (issue 30, item 7): a model run by ONNX Runtime's CUDA
# execution provider answers what the CPU provider answers, and how long each takes.
#
#   bench/gpu/onnxruntime.sh            # needs an NVIDIA GPU, its driver, and pip
#
# It installs the onnxruntime-gpu wheel in a virtual environment (with the CUDA and
# cuDNN wheels it depends on), builds the node, serves the digits CNN twice from one
# repository — `digits_cpu` (execution_provider = "cpu") and `digits_cuda` ("cuda") —
# runs crates/node/tests/onnx.rs's provider test against that library, then calls both
# models with the same batches over HTTP: the logits must agree within 1e-3 relative,
# and it prints each model's median per batch size. Exits non-zero when the CUDA model
# is refused, answers differently, or no GPU is found.
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v nvidia-smi >/dev/null || { echo "no nvidia-smi: this check needs an NVIDIA GPU" >&2; exit 2; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader

work=$(mktemp -d)
node_pid=
cleanup() { [[ -n "$node_pid" ]] && kill "$node_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q onnxruntime-gpu numpy
lib=$("$work/venv/bin/python" -c 'import glob, os, onnxruntime as o; print(sorted(glob.glob(os.path.join(os.path.dirname(o.__file__), "capi", "libonnxruntime.so*")))[0])')
echo "ONNX Runtime: $lib"
# The CUDA and cuDNN libraries the wheel depends on, where the dynamic loader finds them.
export LD_LIBRARY_PATH="$("$work/venv/bin/python" -c 'import glob, os, site; print(":".join(sorted(set(os.path.dirname(p) for d in site.getsitepackages() for p in glob.glob(os.path.join(d, "nvidia", "*", "lib", "*.so*"))))))'):${LD_LIBRARY_PATH:-}"

cargo build -q --release -p netaccel-node
# The test finds the library through `python3 -c 'import onnxruntime'`: the venv's.
PATH="$work/venv/bin:$PATH" cargo test -q -p netaccel-node --test onnx a_gpu_execution_provider -- --nocapture

for p in cpu cuda; do
  mkdir -p "$work/models/digits_$p/1"
  cp models/digits/1/model.onnx "$work/models/digits_$p/1/"
  { printf 'backend = "onnxruntime"\nexecution_provider = "%s"\n' "$p"; cat models/digits/config.toml; } >"$work/models/digits_$p/config.toml"
done
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
printf 'models_dir = "%s"\nonnxruntime_library = "%s"\ngrpc = "off"\n' "$work/models" "$lib" >"$work/node.toml"
target/release/netaccel-node --config "$work/node.toml" --http "127.0.0.1:$port" --rac 127.0.0.1:0 >"$work/node.log" 2>&1 &
node_pid=$!
for _ in $(seq 100); do curl -fs "127.0.0.1:$port/health" >/dev/null && break; sleep 0.1; done
grep -q 'digits_cuda' <(curl -fs "127.0.0.1:$port/v1/accelerators") || { cat "$work/node.log"; echo "digits_cuda was not served" >&2; exit 1; }

"$work/venv/bin/python" - "$port" <<'PY'
import statistics, sys, time, urllib.request
import numpy as np
port = sys.argv[1]
def call(model, batch):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/fn/{model}", data=batch.tobytes(), method="POST")
    t = time.perf_counter()
    with urllib.request.urlopen(req) as r:
        out = r.read()
    return np.frombuffer(out, dtype="<f4"), time.perf_counter() - t
rng = np.random.default_rng(30)
print("| batch | cpu p50 (ms) | cuda p50 (ms) | cpu/cuda |")
print("| ---: | ---: | ---: | ---: |")
for n in (1, 8, 64):
    batch = rng.random((n, 1, 8, 8), dtype=np.float32)
    want, _ = call("digits_cpu", batch)
    got, _ = call("digits_cuda", batch)
    assert np.allclose(got, want, rtol=1e-3, atol=1e-4), (n, got[:5], want[:5])
    times = {m: statistics.median(call(m, batch)[1] for _ in range(200)) for m in ("digits_cpu", "digits_cuda")}
    print(f"| {n} | {times['digits_cpu']*1e3:.3f} | {times['digits_cuda']*1e3:.3f} | {times['digits_cpu']/times['digits_cuda']:.2f} |")
PY
