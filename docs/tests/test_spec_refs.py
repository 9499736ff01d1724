"""Every `spec/<name>` that the repository cites exists.

Code comments, docs and tests cite the project's specifications by path
(`spec/rac-v1.md`, `../spec/registry-api.md`, `spec/rac-v1-vectors.json`). This test
reads every file git tracks, finds each such citation of a file and fails naming every
one that names no file in the checkout, with where it was cited. Folder citations
(`spec/registry/`) are not checked: only paths that end in a file name with an
extension.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Dict, Iterable, List, Tuple

ROOT = Path(__file__).resolve().parents[2]

#: `spec/` then a path ending in NAME.EXT. Preceded by `../` (a relative link), or by
#: anything that cannot be part of a longer path (so `crates/x/spec/y.md` is not it).
CITATION = re.compile(
    r"(?:(?<=\.\./)|(?<![\w./-]))(spec/(?:[\w.-]+/)*[\w-][\w.-]*\.[A-Za-z0-9]+)"
)

#: Files larger than this are data, not prose that cites specs.
TEXT_BYTES_MAX = 2 << 20


def tracked_files(root: Path) -> List[str]:
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=root, check=True, capture_output=True
    ).stdout
    return [name for name in out.decode("utf-8", "replace").split("\0") if name]


def citations(text: str) -> Iterable[Tuple[int, str]]:
    """(line number, cited path) for every citation in `text`."""
    for number, line in enumerate(text.splitlines(), start=1):
        for match in CITATION.finditer(line):
            yield number, match.group(1)


def dead_citations(root: Path, files: Iterable[str]) -> Dict[str, List[str]]:
    """Cited path -> the places (`file:line`) that cite it, for paths that do not exist."""
    dead: Dict[str, List[str]] = {}
    for name in files:
        path = root / name
        if not path.is_file() or path.stat().st_size > TEXT_BYTES_MAX:
            continue
        data = path.read_bytes()
        if b"\0" in data:
            continue  # binary
        for number, cited in citations(data.decode("utf-8", "replace")):
            if not (root / cited).is_file():
                dead.setdefault(cited, []).append(f"{name}:{number}")
    return dead


def report(dead: Dict[str, List[str]]) -> str:
    return "\n".join(
        f"{cited} does not exist; cited at {', '.join(places)}"
        for cited, places in sorted(dead.items())
    )


def test_every_cited_spec_exists():
    dead = dead_citations(ROOT, tracked_files(ROOT))
    assert not dead, "dead spec citations:\n" + report(dead)


def test_the_pages_the_code_cites_are_there():
    # The pages issue 27 found missing, and the index.
    for name in [
        "README.md",
        "rac-v1.md",
        "rac-v1-vectors.json",
        "http-api.md",
        "accelerators.md",
        "registry-api.md",
        "accelerator-manifest.md",
        "rtl-accelerators.md",
    ]:
        assert (ROOT / "spec" / name).is_file(), name


def cite(text: str) -> str:
    """`text` with `S/` written as the specs folder: the examples below must not be
    citations of this file themselves, which the scan of the repository reads."""
    return text.replace("S/", "spec/")


def test_a_dead_citation_is_found_and_named(tmp_path):
    (tmp_path / "spec").mkdir()
    (tmp_path / "spec" / "there.md").write_text("# here\n")
    (tmp_path / "a.rs").write_text(
        cite("//! See `S/there.md` and `S/gone.md`.\n")
        + cite("let v = join(\"../../S/vectors.json\");\n")
    )
    (tmp_path / "b.md").write_text(
        cite("[ok](../S/there.md), crates/x/S/other.md, S/registry/, S/*.md\n")
    )
    dead = dead_citations(tmp_path, ["a.rs", "b.md"])
    assert dead == {
        cite("S/gone.md"): ["a.rs:1"],
        cite("S/vectors.json"): ["a.rs:2"],
    }
    assert report(dead) == cite(
        "S/gone.md does not exist; cited at a.rs:1\n"
        "S/vectors.json does not exist; cited at a.rs:2"
    )


def test_citations_are_read_as_paths():
    text = cite(
        "S/rac-v1.md. (`S/http-api.md`), \"/../../S/rac-v1-vectors.json\", "
        "docs/S/x.md, myS/y.md, S/registry/node.json"
    )
    found = [c for _, c in citations(text)]
    assert found == [
        cite("S/rac-v1.md"),
        cite("S/http-api.md"),
        cite("S/rac-v1-vectors.json"),
        cite("S/registry/node.json"),
    ]
