#!/usr/bin/env python3
"""Prints the paths of integration-test executables the workspace's `cargo test` built.

    cargo test --workspace --no-run --message-format=json | \\
        bench/tools/test_executables.py CRATE_DIR NAME [NAME ...]

CRATE_DIR is the crate's folder relative to the repository (crates/node), each NAME
one of its tests/NAME.rs; the paths are printed in NAME order, one per line. Exits
non-zero naming any test it did not find. Running these executables again (rather
than `cargo test -p CRATE --test NAME`) reuses the workspace's build: a build of one
package resolves features for it alone and compiles a second copy of much of the tree.
"""
import json
import sys


def main() -> int:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    manifest = sys.argv[1].rstrip("/") + "/Cargo.toml"
    want = sys.argv[2:]
    found = {}
    for line in sys.stdin:
        m = json.loads(line)
        if (m.get("reason") == "compiler-artifact" and m["target"]["kind"] == ["test"]
                and m["target"]["name"] in want and m["manifest_path"].endswith(manifest)):
            found[m["target"]["name"]] = m["executable"]
    missing = [n for n in want if n not in found]
    if missing:
        sys.exit(f"no test executable in {manifest} for " + ", ".join(missing))
    print("\n".join(found[n] for n in want))
    return 0


if __name__ == "__main__":
    sys.exit(main())
