#!/usr/bin/env bash
# Writes a one-layer OCI image layout tarball from a directory, for `ctr images import`:
# the Kubernetes tests' images (pause, and busybox with the netaccel CLI) are made this
# way on the test machine, with no registry and no image builder.
#
#   deploy/k8s-test/image.sh NAME:TAG ROOTFS OUT.tar CMD [ARG...]
#
# NAME:TAG is the full reference (e.g. registry.k8s.io/pause:3.10), written both as the
# OCI ref name and as containerd's image name annotation, so the import names the image
# by it. The layer is uncompressed (its digest is its diff id) and owned by root; CMD is
# the image's entrypoint. Nothing is fetched.
set -euo pipefail
[[ $# -ge 4 ]] || { echo "usage: $0 NAME:TAG ROOTFS OUT.tar CMD [ARG...]" >&2; exit 2; }
ref=$1 rootfs=$2 out=$3
shift 3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
blobs="$work/blobs/sha256"
mkdir -p "$blobs"

# A blob from stdin: prints "sha256:<hex> <size>".
put() {
  local tmp="$work/blob" hex
  cat > "$tmp"
  hex=$(sha256sum "$tmp" | cut -d' ' -f1)
  mv "$tmp" "$blobs/$hex"
  echo "sha256:$hex $(stat -c %s "$blobs/$hex")"
}

read -r layer layer_size < <(tar -C "$rootfs" --sort=name --owner=0 --group=0 --numeric-owner \
  --mtime=@0 -cf - . | put)
entry=$(printf '"%s",' "$@")
entry="[${entry%,}]"
read -r config config_size < <(printf '%s' \
  "{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"Entrypoint\":$entry,\"Env\":[\"PATH=/usr/local/bin:/bin:/usr/bin\"]},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"$layer\"]}}" | put)
read -r manifest manifest_size < <(printf '%s' \
  "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\",\"digest\":\"$config\",\"size\":$config_size},\"layers\":[{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar\",\"digest\":\"$layer\",\"size\":$layer_size}]}" | put)
printf '%s' "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"$manifest\",\"size\":$manifest_size,\"platform\":{\"architecture\":\"amd64\",\"os\":\"linux\"},\"annotations\":{\"io.containerd.image.name\":\"$ref\",\"org.opencontainers.image.ref.name\":\"$ref\"}}]}" > "$work/index.json"
printf '{"imageLayoutVersion":"1.0.0"}' > "$work/oci-layout"
tar -C "$work" --owner=0 --group=0 --numeric-owner -cf "$out" oci-layout index.json blobs
