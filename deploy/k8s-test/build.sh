#!/usr/bin/env bash
# Builds the Kubernetes control plane the Kubernetes tests run against: kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl and the kubelet of one release, and
# helm, from the Go module proxy; and for the tests that run Pods, containerd with `ctr`
# and its runc shim (Go module proxy), the static `pause` of that Kubernetes release
# (its pause.c, with gcc) and netaccel's DRA kubelet plugin (deploy/dra-kubelet-plugin). Debian ships no control plane and its kubectl (1.20) predates
# resource.k8s.io/v1, so both come from source; the binaries are cached by version and a
# second run with them present does nothing.
#
#   deploy/k8s-test/build.sh            # builds into $NETACCEL_K8S_BIN or the default cache
#
# k8s.io/kubernetes cannot be required like an ordinary module: its go.mod asks for its
# staging modules (k8s.io/api, client-go, ...) at v0.0.0 and reaches them through replace
# directives, which Go ignores outside the main module. A small wrapper module therefore
# requires k8s.io/kubernetes at the release and replaces every staging module by its
# published v0.<minor>.<patch>; `go build k8s.io/kubernetes/cmd/X` then builds from it.
# By default Go builds as many packages at once as there are CPUs (about 10 minutes for
# the four on 2 idle cores); NETACCEL_GO_JOBS=1 keeps a shared machine usable meanwhile.
set -euo pipefail

k8s_version=${NETACCEL_K8S_VERSION:-v1.34.2}
helm_version=${NETACCEL_HELM_VERSION:-v3.19.5}
containerd_version=${NETACCEL_CONTAINERD_VERSION:-v2.4.2}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/netaccel
containerd_out=${NETACCEL_CONTAINERD_BIN:-$cache/containerd-$containerd_version}
out=${NETACCEL_K8S_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/netaccel/kubernetes-$k8s_version}
helm_out=${NETACCEL_HELM_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/netaccel/helm-$helm_version}
k8s_cmds=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet)
export GOFLAGS="${GOFLAGS:-} -p=${NETACCEL_GO_JOBS:-$(nproc)}"
# Go's official tarball installs into /usr/local/go without touching PATH.
if ! command -v go >/dev/null && [[ -x /usr/local/go/bin/go ]]; then PATH="$PATH:/usr/local/go/bin"; fi
export CGO_ENABLED=0

# k8s.io/kubernetes v1.34 needs Go 1.24; Go 1.21 or later fetches that toolchain itself.
need_go() {
  command -v go >/dev/null || { echo "go (1.21 or later) is needed to build $1: install it from go.dev" >&2; exit 1; }
  local v
  v=$(go env GOVERSION)
  v=${v#go}
  if [[ ${v%%.*} -lt 1 || ( ${v%%.*} -eq 1 && $(echo "$v" | cut -d. -f2) -lt 21 ) ]]; then
    echo "go $v is too old to build $1 (1.21 or later; Debian 12's golang-go is 1.19): install it from go.dev" >&2
    exit 1
  fi
}

# Only what is missing is built: a cache from before the kubelet joined keeps its four.
missing=()
for c in "${k8s_cmds[@]}"; do [[ -x "$out/$c" ]] || missing+=("$c"); done
if ((${#missing[@]})); then
  need_go "Kubernetes $k8s_version"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  staging_version="v0.${k8s_version#v1.}"
  staging=(api apiextensions-apiserver apimachinery apiserver cli-runtime client-go
    cloud-provider cluster-bootstrap code-generator component-base component-helpers
    controller-manager cri-api cri-client csi-translation-lib dynamic-resource-allocation
    endpointslice externaljwt kms kube-aggregator kube-controller-manager kube-proxy
    kube-scheduler kubectl kubelet metrics mount-utils pod-security-admission
    sample-apiserver sample-cli-plugin sample-controller)
  {
    echo "module netaccel.io/k8s-test-control-plane"
    echo
    echo "go 1.24"
    echo
    echo "require k8s.io/kubernetes $k8s_version"
    echo
    echo "replace ("
    for m in "${staging[@]}"; do echo "	k8s.io/$m => k8s.io/$m $staging_version"; done
    echo ")"
  } > "$work/go.mod"
  # The wrapper's main imports what the four commands import, so that `go mod tidy`
  # keeps every module they need in the wrapper's go.mod.
  cat > "$work/main.go" <<'GO'
// Package main only pulls the control plane's packages into this module's build list.
package main

import (
	_ "k8s.io/client-go/plugin/pkg/client/auth"
	_ "k8s.io/component-base/cli"
	_ "k8s.io/kubectl/pkg/cmd"
	_ "k8s.io/kubernetes/cmd/kube-apiserver/app"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	_ "k8s.io/kubernetes/cmd/kube-scheduler/app"
	_ "k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {}
GO
  major=${k8s_version#v}; major=${major%%.*}
  minor=${k8s_version#v*.}; minor=${minor%%.*}
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
  done
  (
    cd "$work"
    echo "==> resolving Kubernetes $k8s_version modules"
    go mod tidy
    mkdir -p bin
    for c in "${missing[@]}"; do
      echo "==> building $c $k8s_version (this takes minutes)"
      go build -trimpath -ldflags "$ldflags" -o "bin/$c" "k8s.io/kubernetes/cmd/$c"
    done
  )
  mkdir -p "$out"
  for c in "${missing[@]}"; do mv "$work/bin/$c" "$out/$c.tmp" && mv "$out/$c.tmp" "$out/$c"; done
fi

if [[ ! -x "$helm_out/helm" ]]; then
  need_go "helm $helm_version"
  echo "==> building helm $helm_version "
  mkdir -p "$helm_out"
  GOBIN="$helm_out/.tmp" go install -trimpath -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$helm_version" \
    "helm.sh/helm/v3/cmd/helm@$helm_version"
  mv "$helm_out/.tmp/helm" "$helm_out/helm"
  rmdir "$helm_out/.tmp"
fi

# containerd 2.x needs Go >= 1.26.6 (its go.mod says so): GOTOOLCHAIN=auto lets an older
# Go fetch that toolchain. Without cgo, hence without the btrfs, devmapper and zfs
# snapshotters; the tests use overlayfs.
containerd_cmds=(containerd ctr containerd-shim-runc-v2)
containerd_missing=()
for c in "${containerd_cmds[@]}"; do [[ -x "$containerd_out/$c" ]] || containerd_missing+=("$c"); done
if ((${#containerd_missing[@]})); then
  need_go "containerd $containerd_version"
  echo "==> building containerd $containerd_version (${containerd_missing[*]}; minutes)"
  mkdir -p "$containerd_out"
  pkgs=()
  for c in "${containerd_missing[@]}"; do pkgs+=("github.com/containerd/containerd/v2/cmd/$c@$containerd_version"); done
  GOTOOLCHAIN=${NETACCEL_GOTOOLCHAIN:-auto} GOBIN="$containerd_out/.tmp" go install -trimpath \
    -tags "no_btrfs no_devmapper no_zfs" \
    -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$containerd_version" "${pkgs[@]}"
  for c in "${containerd_missing[@]}"; do mv "$containerd_out/.tmp/$c" "$containerd_out/$c"; done
  rmdir "$containerd_out/.tmp"
fi

# The Pods' sandbox image's only program: Kubernetes' own pause.c, linked statically.
if [[ ! -x "$out/pause" ]]; then
  need_go "pause $k8s_version"
  command -v gcc >/dev/null || { echo "gcc is needed to build pause (apt-get install gcc)" >&2; exit 1; }
  # Outside any module (the module cache keeps the source; nothing is built from it).
  src=$(cd / && GOFLAGS= go mod download -json "k8s.io/kubernetes@$k8s_version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  echo "==> building pause from $src/build/pause/linux/pause.c"
  gcc -Os -static -DVERSION="$k8s_version" -o "$out/pause.tmp" "$src/build/pause/linux/pause.c"
  strip "$out/pause.tmp"
  mv "$out/pause.tmp" "$out/pause"
fi

# The DRA kubelet plugin, cached by the hash of its sources (a change rebuilds it).
plugin=$("$(dirname "$0")/dra-plugin-path.sh")
if [[ ! -x "$plugin" ]]; then
  need_go "the DRA kubelet plugin"
  echo "==> building the DRA kubelet plugin into $plugin"
  mkdir -p "$(dirname "$plugin")"
  (cd "$(dirname "$0")/../dra-kubelet-plugin" && go build -trimpath -ldflags "-s -w" -o "$plugin.tmp" .)
  mv "$plugin.tmp" "$plugin"
fi
echo "$out"
