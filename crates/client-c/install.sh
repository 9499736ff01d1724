#!/usr/bin/env bash
# Builds the C client and installs it under PREFIX (default /usr/local): the header
# include/netaccel.h, lib/libnetaccel.so and lib/libnetaccel.a, and
# lib/pkgconfig/netaccel.pc, so that `pkg-config --cflags --libs netaccel` works.
#
#   crates/client-c/install.sh "$HOME/.local"
#   PKG_CONFIG_PATH="$HOME/.local/lib/pkgconfig" pkg-config --cflags --libs netaccel
#
# PROFILE=debug installs a debug build (the tests do: it is already built).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
prefix=${1:-/usr/local}
profile=${PROFILE:-release}
cd "$here"
if [[ $profile == release ]]; then cargo build -q --release -p netaccel-client-c; else cargo build -q -p netaccel-client-c; fi
target=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
version=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "netaccel-client-c"))')
mkdir -p "$prefix/include" "$prefix/lib/pkgconfig"
install -m 644 include/netaccel.h "$prefix/include/"
install -m 755 "$target/$profile/libnetaccel.so" "$prefix/lib/"
install -m 644 "$target/$profile/libnetaccel.a" "$prefix/lib/"
# The static library needs what Rust's standard library links against.
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" netaccel.pc.in > "$prefix/lib/pkgconfig/netaccel.pc"
echo "installed netaccel $version under $prefix"
