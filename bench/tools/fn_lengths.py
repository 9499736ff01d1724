#!/usr/bin/env python3
"""Counts for a structure review of the Rust code (standard library only).

    bench/tools/fn_lengths.py [--max 70] [--list] [--asserts PATH ...] [CRATE_DIR ...]

1. Functions longer than --max lines (default 70), per crate: every `.rs` file under
   each CRATE_DIR (default: every folder of crates/ with a Cargo.toml), except test
   code: folders named `tests`, `fuzz` or `target`, items under `#[cfg(test)]` or
   `#[test]`, and the files of out-of-line test modules (`#[cfg(test)] mod tests;`,
   with or without `#[path]`). --list prints each long function as well.
2. With --asserts, the assertions per 1,000 lines of each PATH (a file, or a folder:
   its `.rs` files), test code left out as above.

What it counts, exactly:
- A function runs from the line of its `fn` keyword to the line of its closing brace
  (attributes and doc comments before it are not counted; its signature is). A
  function nested in another counts on its own, and inside the outer one too. A
  declaration without a body (`fn f();`) is not a function here. `fn` inside a
  `macro_rules!` body counts like any other.
- Lines of a file are its lines outside test items, blank lines and comments included.
- Assertions are the macro calls `assert!`, `assert_eq!`, `assert_ne!`,
  `debug_assert!`, `debug_assert_eq!`, `debug_assert_ne!` and `assert_matches!`
  (also inside `const _: () = assert!(..)`), outside comments and strings; `panic!`,
  `unreachable!`, `.expect()` and `.unwrap()` are not counted.
- The scan is lexical: comments, strings (raw ones too) and character literals are
  blanked, then braces are matched. It does not expand macros and does not know which
  `cfg`s a build enables: an item under `cfg(any(test, ...))` counts as non-test.
"""

import argparse
import os
import re
import sys

ASSERT_RE = re.compile(
    r"\b(?:debug_)?assert(?:_eq|_ne)?!|\bassert_matches!"
)
FN_RE = re.compile(r"\bfn\s+([A-Za-z_][A-Za-z0-9_]*)")
TEST_ATTR_RE = re.compile(r"#\[\s*(?:cfg\s*\(\s*test\s*\)|test)\s*\]")
MOD_DECL_RE = re.compile(r"\bmod\s+([A-Za-z_][A-Za-z0-9_]*)\s*;")
PATH_ATTR_RE = re.compile(r'#\[\s*path\s*=\s*"([^"]+)"\s*\]')
SKIP_DIRS = {"tests", "fuzz", "target"}


def blank(src):
    """src with comments, strings and char literals replaced by spaces (newlines kept),
    so that braces and `fn` inside them are not seen. Raw strings (r#"..."#) and nested
    block comments are handled; a lifetime ('a) is not taken for a char literal."""
    out = []
    i, n = 0, len(src)

    def keep_newlines(text):
        return "".join(c if c == "\n" else " " for c in text)

    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(keep_newlines(src[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', src[i:i + 258]) and _literal_start(src, i):
            hashes = re.match(r"r(#*)\"", src[i:]).group(1)
            end = src.find('"' + hashes, i + 2 + len(hashes))
            j = n if end < 0 else end + 1 + len(hashes)
            out.append(keep_newlines(src[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(keep_newlines(src[i:j]))
            i = j
        elif c == "'":
            m = re.match(r"'(?:[^'\\\n]|\\(?:u\{[0-9a-fA-F_]+\}|x[0-9a-fA-F]{2}|.))'", src[i:i + 16])
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:  # a lifetime or a label
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _literal_start(src, i):
    """True when the `r` at src[i] starts a raw string literal (r"", br"", cr""), not
    the end of an identifier such as `bar`."""
    if i > 0 and src[i - 1] in "bc":
        i -= 1
    return i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")


def item_end(text, start):
    """The offset just past the item that begins at or after start: its first `;` or
    its body's matching `}`, whichever comes first outside parentheses and brackets;
    or the offset of a `}` that closes the enclosing block first. None when the text
    ends first."""
    depth, i, n = 0, start, len(text)
    while i < n:
        c = text[i]
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif depth <= 0 and c == ";":
            return i + 1
        elif depth <= 0 and c == "{":
            return match_brace(text, i)
        elif depth <= 0 and c == "}":
            return i
        i += 1
    return None


def match_brace(text, open_at):
    """The offset just past the `}` that closes the `{` at open_at (or the end)."""
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    return len(text)


def test_spans(text):
    """(start, end) offsets of the items under #[cfg(test)] or #[test], and the names
    (with their #[path], if any) of out-of-line modules declared under #[cfg(test)]."""
    spans, test_mods = [], []
    for m in TEST_ATTR_RE.finditer(text):
        end = item_end(text, m.end())
        if end is None:
            continue
        spans.append((m.start(), end))
        item = text[m.end():end]
        decl = MOD_DECL_RE.search(item)
        if decl and item.rstrip().endswith(";"):
            path = PATH_ATTR_RE.search(item)
            test_mods.append((decl.group(1), path.group(1) if path else None))
    return spans, test_mods


def merged(spans):
    """spans with those inside another (a #[test] in a #[cfg(test)] module) dropped."""
    out = []
    for start, end in sorted(spans):
        if out and start < out[-1][1]:
            out[-1] = (out[-1][0], max(end, out[-1][1]))
        else:
            out.append((start, end))
    return out


def inside(spans, offset):
    return any(start <= offset < end for start, end in spans)


def test_module_files(path, test_mods):
    """The files that hold the out-of-line test modules declared in path."""
    folder = os.path.dirname(path)
    stem = os.path.splitext(os.path.basename(path))[0]
    # A module declared in lib.rs, main.rs or mod.rs lives beside it; in x.rs, in x/.
    own = folder if stem in ("lib", "main", "mod") else os.path.join(folder, stem)
    files = []
    for name, path_attr in test_mods:
        if path_attr:
            files.append(os.path.normpath(os.path.join(folder, path_attr)))
        else:
            files.append(os.path.normpath(os.path.join(own, name + ".rs")))
            files.append(os.path.normpath(os.path.join(own, name, "mod.rs")))
    return files


class Scan:
    """One file's non-test functions (name, first line, lines), lines and assertions."""

    def __init__(self, path):
        with open(path, encoding="utf-8", errors="replace") as f:
            src = f.read()
        text = blank(src)
        spans, test_mods = test_spans(text)
        self.test_files = test_module_files(path, test_mods)
        self.functions = []
        for m in FN_RE.finditer(text):
            if inside(spans, m.start()):
                continue
            body = item_end(text, m.end())
            if body is None or text[body - 1] != "}":
                continue
            first = text.count("\n", 0, m.start()) + 1
            last = text.count("\n", 0, body - 1) + 1
            self.functions.append((m.group(1), first, last - first + 1))
        test_lines = sum(text.count("\n", start, end) + 1 for start, end in merged(spans))
        self.lines = max(src.count("\n") + (0 if src.endswith("\n") else 1) - test_lines, 0)
        self.asserts = sum(1 for m in ASSERT_RE.finditer(text) if not inside(spans, m.start()))


def rust_files(root):
    """The .rs files under root, test folders left out, in name order."""
    if os.path.isfile(root):
        return [root]
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("."))
        found += [os.path.join(folder, f) for f in sorted(files) if f.endswith(".rs")]
    return found


def scan_all(paths):
    """Scans of the non-test files among paths (out-of-line test modules dropped)."""
    scans = {os.path.normpath(p): Scan(p) for p in paths}
    test_files = {t for s in scans.values() for t in s.test_files}
    return {p: s for p, s in scans.items() if p not in test_files}


def default_crates(repo):
    crates = os.path.join(repo, "crates")
    return sorted(
        os.path.join(crates, d)
        for d in os.listdir(crates)
        if os.path.isfile(os.path.join(crates, d, "Cargo.toml"))
    )


def print_table(header, rows):
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    line = lambda r: "| " + " | ".join(str(v).ljust(w) for v, w in zip(r, widths)) + " |"
    print(line(header))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print(line(r))


def function_table(crate_dirs, limit, listing):
    rows, long_ones, totals = [], [], [0, 0]
    for crate in crate_dirs:
        scans = scan_all(rust_files(crate))
        fns = [(p, name, line, n) for p, s in scans.items() for name, line, n in s.functions]
        over = [f for f in fns if f[3] > limit]
        longest = max(fns, key=lambda f: f[3], default=None)
        rows.append((
            os.path.basename(crate.rstrip("/")),
            len(fns),
            len(over),
            f"{longest[1]} {longest[3]}" if longest else "-",
        ))
        totals[0] += len(fns)
        totals[1] += len(over)
        long_ones += over
    rows.append(("total", totals[0], totals[1], ""))
    print(f"Non-test functions over {limit} lines, per crate:\n")
    print_table(("crate", "functions", f"> {limit} lines", "longest (lines)"), rows)
    if listing and long_ones:
        print()
        print_table(
            ("lines", "function", "where"),
            [(n, name, f"{p}:{line}") for p, name, line, n in sorted(long_ones, key=lambda f: -f[3])],
        )


def assert_table(paths):
    rows, lines, asserts = [], 0, 0
    for root in paths:
        for p, s in scan_all(rust_files(root)).items():
            rows.append((p, s.lines, s.asserts, per_k(s.asserts, s.lines)))
            lines += s.lines
            asserts += s.asserts
    rows.append(("total", lines, asserts, per_k(asserts, lines)))
    print("Assertions in non-test code:\n")
    print_table(("file", "lines", "assertions", "per 1,000 lines"), rows)


def per_k(count, lines):
    return f"{1000 * count / lines:.2f}" if lines else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("crates", nargs="*", help="crate folders (default: crates/*)")
    ap.add_argument("--max", type=int, default=70, help="the longest a function may be (lines)")
    ap.add_argument("--list", action="store_true", help="list every function over --max")
    ap.add_argument("--asserts", nargs="+", metavar="PATH", help="files or folders to count assertions in")
    args = ap.parse_args()
    repo = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    crate_dirs = args.crates or [os.path.relpath(c) for c in default_crates(repo)]
    # Function lengths unless only assertions were asked for.
    functions = not args.asserts or bool(args.crates)
    if functions:
        function_table(crate_dirs, args.max, args.list)
    if args.asserts:
        if functions:
            print()
        assert_table(args.asserts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
