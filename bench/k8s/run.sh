#!/usr/bin/env bash
# The Kubernetes figures of docs/benchmarks.md: the admission webhook's latency, Pods
# admitted per second in a 0 -> 100 scale-up, and the time from a reconfiguration to
# every displaced Pod bound anew — on the test control plane (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler; no kubelet), with a release build of the
# registry. Prints the FIGURE lines.
#
#   bench/k8s/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
deploy/k8s-test/build.sh >/dev/null
cargo test --release -q -p netaccel-registry --test kubernetes -- \
  --ignored --nocapture bench_kubernetes_figures 2>&1 | grep -E '^(FIGURE|control plane|test result)'
