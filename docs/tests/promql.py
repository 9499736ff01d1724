"""Just enough PromQL reading to say which metrics and labels an expression uses.

Not a parser: promtool parses the expressions (the tests run `promtool check rules` on
them). This only finds the names a dashboard or an alert depends on, so a test can
hold them against what a live node exports.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, Set

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_SELECTOR = re.compile(r"([A-Za-z_:][\w:]*)\s*\{([^}]*)\}")
_MATCHER = re.compile(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_IDENT = re.compile(r"(?<![\w.:$])[A-Za-z_:][\w:]*")
_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or",
    "unless", "bool", "offset", "inf", "nan", "atan2",
}


@dataclass
class Uses:
    #: Metric names, each with the label names its selector matches on.
    metrics: Dict[str, Set[str]] = field(default_factory=dict)
    #: Label names in by/without/on/ignoring/group_* clauses.
    grouping: Set[str] = field(default_factory=set)


def uses(expr: str) -> Uses:
    """The metrics and labels `expr` refers to."""
    out = Uses()
    text = _STRING.sub('""', expr)
    for name, matchers in _SELECTOR.findall(text):
        out.metrics.setdefault(name, set()).update(_MATCHER.findall(matchers))
    for labels in _GROUPING.findall(text):
        out.grouping.update(l.strip() for l in labels.split(",") if l.strip())
    rest = _GROUPING.sub(" ", text)
    rest = re.sub(r"\{[^}]*\}", " ", rest)
    rest = re.sub(r"\[[^\]]*\]", " ", rest)
    for m in _IDENT.finditer(rest):
        name = m.group(0)
        after = rest[m.end():].lstrip()
        if name.lower() in _KEYWORDS or after.startswith("("):
            continue  # an operator, or a function or aggregation
        out.metrics.setdefault(name, set())
    return out
