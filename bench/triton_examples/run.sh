#!/usr/bin/env bash
# Triton's own Python client examples, unmodified, against a netaccel node: starts a
# node serving the examples' models (bench/triton_examples/make_models.py, written to
# a temporary folder) and, for the two model control examples, a node each serving a
# repository of the size they check (see below), runs every example of EXAMPLES_DIR (`src/python/examples` of
# triton-inference-server/client; not part of this repository) with `-u` pointing at
# the node's HTTP or gRPC port (gRPC for the files whose name says grpc), and prints a
# table: example, pass or fail, and for a failure the last line it printed (why).
#
# Usage: bench/triton_examples/run.sh EXAMPLES_DIR
#   git clone --depth 1 https://github.com/triton-inference-server/client triton-client
#   bench/triton_examples/run.sh triton-client/src/python/examples
#
# Needs: python3; tritonclient[http,grpc], onnx, pillow and attrdict (the image
# clients) are installed with pip when missing. The image clients classify one
# picture the runner draws (a colour gradient), top 3 classes: image_client.py and
# grpc_image_client.py with `densenet_onnx`, ensemble_image_client.py sending the PNG
# file's bytes to `preprocess_inception_ensemble`. The node listens on Triton's own ports, 8000 (HTTP)
# and 8001 (gRPC), when they are free: memory_growth_test.py takes no address and
# calls those; otherwise on free ports, and that example fails saying so.
# Environment: NODE_BIN [target/debug/netaccel-node, built when missing], TIMEOUT [60]
# s per example. Exit status 0; the last line is "N passed, N failed".
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BENCH_NAME=triton_examples
# shellcheck source=bench/common/lib.sh
source "$ROOT/bench/common/lib.sh"
EXAMPLES=${1:?usage: bench/triton_examples/run.sh EXAMPLES_DIR}
[[ -d "$EXAMPLES" ]] || die "$EXAMPLES is not a folder"
EXAMPLES=$(cd "$EXAMPLES" && pwd)
TIMEOUT=${TIMEOUT:-60}
HOST=127.0.0.1
NODE_BIN=${NODE_BIN:-$ROOT/target/debug/netaccel-node}
[[ -x "$NODE_BIN" ]] || (cd "$ROOT" && cargo build -q -p netaccel-node)
for module in tritonclient.http:"tritonclient[http,grpc]" tritonclient.grpc:"tritonclient[http,grpc]" \
    onnx:onnx PIL:pillow attrdict:attrdict; do
    if ! python3 -c "import ${module%%:*}" >/dev/null 2>&1; then
        log "installing ${module#*:}"
        python3 -m pip install -q "${module#*:}"
    fi
done

SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/netaccel-triton-examples.XXXXXX")
NODE_PID=""
CONTROL_PIDS=()
cleanup() {
    [[ -z "$NODE_PID" ]] || kill "$NODE_PID" 2>/dev/null || true
    for pid in "${CONTROL_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    rm -rf "$SCRATCH"
}
trap cleanup EXIT

python3 "$ROOT/bench/triton_examples/make_models.py" "$SCRATCH/models" >&2
HTTP_PORT="" GRPC_PORT="" RAC_PORT=""
# Triton's ports when both are free (see above).
if [[ -z "$(port_probe 8000 8001 | tr -d '[:space:]')" ]]; then
    HTTP_PORT=8000 GRPC_PORT=8001
fi
pick_ports HTTP_PORT GRPC_PORT RAC_PORT
"$NODE_BIN" --http "$HOST:$HTTP_PORT" --grpc "$HOST:$GRPC_PORT" --rac "$HOST:$RAC_PORT" \
    --models "$SCRATCH/models" --log-level warn 2>"$SCRATCH/node.log" &
NODE_PID=$!
server_up netaccel-node "$NODE_PID" "$HTTP_PORT" "$SCRATCH/node.log" || exit 1
server_up netaccel-node "$NODE_PID" "$GRPC_PORT" "$SCRATCH/node.log" || exit 1

# The model control examples count the index of Triton's test repository (7 models
# for the HTTP one, 8 for the gRPC one) before they load `simple` with a max_batch_size
# override: each gets a node of its own whose repository holds that many of the
# examples' models (make_models.py --control) and whose index lists the repository
# only (repository_index).
printf 'repository_index = "models"\n' >"$SCRATCH/control.toml"
declare -A CONTROL_PORT
for count in 7 8; do
    python3 "$ROOT/bench/triton_examples/make_models.py" --control "$count" \
        "$SCRATCH/control-$count" >&2
    CTRL_HTTP="" CTRL_GRPC="" CTRL_RAC=""
    pick_ports CTRL_HTTP CTRL_GRPC CTRL_RAC
    "$NODE_BIN" --config "$SCRATCH/control.toml" --http "$HOST:$CTRL_HTTP" \
        --grpc "$HOST:$CTRL_GRPC" --rac "$HOST:$CTRL_RAC" --models "$SCRATCH/control-$count" \
        --log-level warn 2>"$SCRATCH/control-$count.log" &
    CONTROL_PIDS+=($!)
    server_up netaccel-node "$!" "$CTRL_GRPC" "$SCRATCH/control-$count.log" || exit 1
    CONTROL_PORT[http-$count]=$CTRL_HTTP CONTROL_PORT[grpc-$count]=$CTRL_GRPC
done

# The image clients' picture.
python3 -c 'import sys
from PIL import Image
img = Image.new("RGB", (320, 240))
img.putdata([(x * 255 // 319, y * 255 // 239, 96) for y in range(240) for x in range(320)])
img.save(sys.argv[1])' "$SCRATCH/picture.png"

passed=0 failed=0
printf '| example | result | why it fails |\n| --- | --- | --- |\n'
for example in "$EXAMPLES"/*.py; do
    name=$(basename "$example")
    args=(-u "$HOST:$HTTP_PORT")
    [[ "$name" != *grpc* ]] || args=(-u "$HOST:$GRPC_PORT")
    # It has no address option: it calls localhost:8000 (or 8001 with `-i grpc`).
    if [[ "$name" == memory_growth_test.py ]]; then
        args=(-r 20)
        if [[ "$HTTP_PORT" != 8000 ]]; then
            failed=$((failed + 1))
            printf '| %s | FAIL | ports 8000/8001 were taken%s: it calls only those |\n' \
                "$name" "$(port_holder 8000)$(port_holder 8001)"
            continue
        fi
    fi
    case "$name" in
    simple_http_model_control.py) args=(-u "$HOST:${CONTROL_PORT[http-7]}") ;;
    simple_grpc_model_control.py) args=(-u "$HOST:${CONTROL_PORT[grpc-8]}") ;;
    image_client.py | grpc_image_client.py)
        args+=(-m densenet_onnx -c 3 -s INCEPTION "$SCRATCH/picture.png")
        ;;
    # Its default model, preprocess_inception_ensemble: the file's bytes are sent.
    ensemble_image_client.py)
        args+=(-c 3 "$SCRATCH/picture.png")
        ;;
    esac
    if (cd "$SCRATCH" && timeout "$TIMEOUT" python3 "$example" "${args[@]}") >"$SCRATCH/out" 2>&1; then
        passed=$((passed + 1))
        printf '| %s | pass | |\n' "$name"
    else
        rc=$?
        failed=$((failed + 1))
        # The last line that says what went wrong, else the last line printed.
        why=$({ grep -iE 'error|exception|fail|unknown|not (found|supported)' "$SCRATCH/out" ||
            grep -v '^\s*$' "$SCRATCH/out" || echo "(printed nothing)"; } | tail -n 1 | cut -c1-160 | tr '|' '/')
        ((rc != 124)) || why="timed out after $TIMEOUT s"
        printf '| %s | FAIL (%s) | %s |\n' "$name" "$rc" "$why"
    fi
done
echo "$passed passed, $failed failed"
