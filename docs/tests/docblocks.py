"""Tagged fenced blocks of a markdown page.

A tag is an HTML comment on the line before a fenced block: invisible when the page is
rendered, and it makes the block addressable by a test, so the page itself stays the
one copy of every recipe a reader follows.

    <!-- recipe: topk sh -->
    ```sh
    ...
    ```
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import List

_TAG = re.compile(r"^<!--\s*(\w[\w-]*):\s*(.+?)\s*-->\s*$")
_FENCE = re.compile(r"^(```+)\s*([\w-]*)")


@dataclass(frozen=True)
class Block:
    kind: str  # the word before the colon: "recipe", "output", ...
    name: str  # the rest of the tag: "topk sh"
    lang: str  # the fence's info string: "sh", "python", "text"
    text: str  # the block's content, ending with a newline
    line: int  # 1-based line of the tag, for messages


def tagged_blocks(path: Path) -> List[Block]:
    """Every tagged block of the page, in order. A tag not followed by a fenced block,
    or a block that is never closed, is an error in the page."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks = []
    i = 0
    while i < len(lines):
        tag = _TAG.match(lines[i])
        if not tag:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        fence = _FENCE.match(lines[j]) if j < len(lines) else None
        if not fence:
            raise ValueError(f"{path}:{i + 1}: tag `{tag.group(0)}` is not followed by a fenced block")
        end = j + 1
        while end < len(lines) and lines[end].strip() != fence.group(1):
            end += 1
        if end == len(lines):
            raise ValueError(f"{path}:{j + 1}: fenced block never closed")
        body = "".join(line + "\n" for line in lines[j + 1 : end])
        blocks.append(Block(tag.group(1), tag.group(2), fence.group(2), body, i + 1))
        i = end + 1
    return blocks
