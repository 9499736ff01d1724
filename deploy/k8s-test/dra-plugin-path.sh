#!/usr/bin/env bash
# Prints where deploy/k8s-test/build.sh caches the DRA kubelet plugin built from the
# sources as they are now: the cache is keyed by the hash of deploy/dra-kubelet-plugin's
# go.mod, go.sum and Go files (tests aside), so a change to them is a new path (and a
# rebuild).
set -euo pipefail
src=$(cd "$(dirname "$0")/../dra-kubelet-plugin" && pwd)
hash=$(cd "$src" && cat go.mod go.sum $(ls ./*.go | grep -v '_test\.go$') | sha256sum | cut -c1-16)
echo "${NETACCEL_DRA_PLUGIN_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/netaccel/dra-kubelet-plugin-$hash}/netaccel-dra-plugin"
