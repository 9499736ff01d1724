"""The monitoring files in deploy/monitoring/ and the metrics reference of
docs/monitoring.md, held against a live node.

- The metrics reference lists exactly the metrics the node exports, with their types
  and labels.
- The Grafana dashboard is well-formed, and every query in it and in the alert rules
  names only metrics and labels the node exports; promtool parses every expression.
- The alert rules pass `promtool check rules` and their unit tests
  (`promtool test rules`); the Prometheus configuration passes `promtool check config`.
- A real Prometheus, run with the checked-in configuration pointed at the node,
  scrapes it, loads the alert rules, and answers every dashboard query and every
  query of docs/monitoring.md with data.

The node runs with its defaults, so remote OpenCL sessions run in isolated runtime
processes (`opencl_isolation = "session"`), whose metrics the node sums into the same
`netaccel_ocl_*` series as in process (crates/node/tests/opencl_isolation_metrics.rs
checks the values in every mode). `netaccel_ocl_runtime_crashes_total` has a series
only once a runtime process has crashed (crates/node/tests/opencl_isolation.rs reads
it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Set

import pytest

from conftest import ROOT, require, running_node
from docblocks import tagged_blocks
from promql import uses

MONITORING = ROOT / "deploy" / "monitoring"
DASHBOARD = MONITORING / "grafana-netaccel-node.json"
ALERTS = MONITORING / "netaccel-alerts.yml"
ALERT_TESTS = MONITORING / "netaccel-alerts.test.yml"
PROMETHEUS_CONFIG = MONITORING / "prometheus.yml"
PAGE = ROOT / "docs" / "monitoring.md"
#: Labels Prometheus adds to every scraped series.
TARGET_LABELS = {"instance", "job"}
#: Grafana's own variables, and what the tests put in their place.
GRAFANA_BUILTINS = {"$__rate_interval": "15s", "$__interval": "5s", "$__range": "1m"}
PROMETHEUS_TIMEOUT_S = 90


def promtool(*args: str) -> subprocess.CompletedProcess:
    require(shutil.which("promtool") is not None, "promtool is not installed (Debian: prometheus)")
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=120)


def traffic(node) -> None:
    """A few calls over HTTP, so that series created on first use exist."""
    for name, body, query in [
        ("to_uppercase", b"abc", ""),
        ("topk", b"\x01\x00\x00\x00", "?k=1"),
        ("topk", b"abc", "?k=1"),  # a refusal: 400 BAD_REQUEST
    ]:
        request = urllib.request.Request(f"{node.url}/v1/fn/{name}{query}", data=body, method="POST")
        try:
            urllib.request.urlopen(request, timeout=10).read()
        except urllib.error.HTTPError as e:
            e.read()


class Exposition:
    """What a node's /metrics says: families with their type, and the label names of
    each family's series."""

    def __init__(self, text: str):
        self.types: Dict[str, str] = {}
        self.sample_labels: Dict[str, Set[str]] = defaultdict(set)
        for line in text.splitlines():
            if line.startswith("# TYPE "):
                _, _, family, kind = line.split(maxsplit=3)
                self.types[family] = kind
            elif line and not line.startswith("#"):
                m = re.match(r"([A-Za-z_:][\w:]*)(?:\{(.*)\})?\s", line)
                assert m, f"unreadable /metrics line: {line!r}"
                labels = re.findall(r'(\w+)="', m.group(2) or "")
                self.sample_labels[m.group(1)].update(labels)

    def queryable(self) -> Dict[str, Set[str]]:
        """Names a PromQL query can use (counters with `_total`, histograms with
        `_bucket`, `_sum`, `_count`), each with its label names."""
        return dict(self.sample_labels)

    def reference(self) -> Dict[str, tuple]:
        """One entry per metric as a reference page lists it: the name as queried
        (histograms by their base name), its type, and its labels (without `le`)."""
        out = {}
        for family, kind in self.types.items():
            if kind == "counter":
                names = [family + "_total"]
                shown = family + "_total"
            elif kind == "histogram":
                names = [family + s for s in ("_bucket", "_sum", "_count")]
                shown = family
            else:
                names = [family]
                shown = family
            labels = set().union(*(self.sample_labels.get(n, set()) for n in names)) - {"le"}
            out[shown] = (kind, labels)
        return out


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """A node with its defaults (see the module docs)."""
    with running_node(tmp_path_factory.mktemp("monitoring-node")) as n:
        yield n


@pytest.fixture(scope="module")
def exposition(node) -> Exposition:
    traffic(node)
    return Exposition(node.get("/metrics").decode())


def require_opencl(node) -> None:
    require(node.opencl is not None, "no OpenCL runtime: the node exports no netaccel_ocl_* metrics")


# --- the metrics reference ------------------------------------------------------------


def documented_metrics() -> Dict[str, tuple]:
    """Rows of the reference table: | `name` | type | `label`, ... | meaning |"""
    rows = {}
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or not re.fullmatch(r"`netaccel_\w+`", cells[0]):
            continue
        name = cells[0].strip("`")
        assert name not in rows, f"{PAGE.name}: {name} listed twice"
        labels = set(re.findall(r"`(\w+)`", cells[2])) - {"le"}
        rows[name] = (cells[1], labels)
    return rows


def test_the_metrics_reference_lists_every_exported_metric_with_type_and_labels(node, exposition):
    documented = documented_metrics()
    exported = exposition.reference()
    if node.opencl is None:
        documented = {k: v for k, v in documented.items() if not k.startswith("netaccel_ocl_")}
    # A family without series until a runtime process crashes (see the module docs).
    documented.pop("netaccel_ocl_runtime_crashes_total", None)
    exported.pop("netaccel_ocl_runtime_crashes_total", None)
    # Nor before a tenant with an OpenCL memory quota opens a session, which the test
    # node has none of (crates/node/tests/opencl_tenants.rs reads them).
    for name in ("netaccel_ocl_tenant_memory_bytes", "netaccel_ocl_tenant_memory_refusals_total"):
        documented.pop(name, None)
        exported.pop(name, None)
    # The test node has no RTL device (those metrics are tested in crates/node/tests/rtl.rs).
    documented = {k: v for k, v in documented.items() if not k.startswith("netaccel_rtl_")}
    # Nor TLS (crates/node/tests/tls.rs and docs/tests/test_tls.py read those metrics).
    documented = {k: v for k, v in documented.items() if not k.startswith("netaccel_tls_")}
    assert sorted(set(exported) - set(documented)) == [], "exported but not in the reference"
    assert sorted(set(documented) - set(exported)) == [], "in the reference but not exported"
    for name, (kind, labels) in exported.items():
        assert documented[name] == (kind, labels), f"{name}: the reference says {documented[name]}"
    require_opencl(node)


# --- the dashboard ----------------------------------------------------------------------


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def dashboard_exprs() -> List[str]:
    return [t["expr"] for p in dashboard()["panels"] for t in p.get("targets", [])]


def for_prometheus(expr: str) -> str:
    """A dashboard expression with Grafana's variables replaced by values Prometheus
    accepts: every node, and fixed windows."""
    expr = expr.replace("$instance", ".*")
    for var, value in GRAFANA_BUILTINS.items():
        expr = expr.replace(var, value)
    assert "$" not in expr, f"unknown variable in {expr}"
    return expr


def test_the_dashboard_is_a_well_formed_grafana_dashboard():
    d = dashboard()
    for key, kind in [("title", str), ("uid", str), ("schemaVersion", int), ("panels", list),
                      ("templating", dict), ("time", dict)]:
        assert isinstance(d.get(key), kind), f"dashboard `{key}` missing or not a {kind.__name__}"
    variables = {v["name"] for v in d["templating"]["list"]}
    assert {"datasource", "instance"} <= variables
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    cells = {}
    for p in d["panels"]:
        assert p["type"] in {"row", "timeseries", "table", "stat", "gauge"}, p["type"]
        assert p.get("title"), f"panel {p['id']} has no title"
        g = p["gridPos"]
        assert all(isinstance(g[k], int) for k in "hwxy") and g["x"] + g["w"] <= 24, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"`{p['title']}` overlaps `{cells[(x, y)]}`"
                cells[(x, y)] = p["title"]
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p.get("description"), f"`{p['title']}` has no description"
        ref_ids = [t["refId"] for t in p["targets"]]
        assert ref_ids and len(ref_ids) == len(set(ref_ids)), p["title"]
        for t in p["targets"]:
            for var in re.findall(r"\$\w+", t["expr"]):
                assert var in GRAFANA_BUILTINS or var[1:] in variables, f"{p['title']}: {var}"


def check_uses(expr: str, exported: Dict[str, Set[str]], extra: Dict[str, Set[str]]) -> None:
    u = uses(expr)
    known = {**exported, **extra}
    assert u.metrics, f"no metric in {expr}"
    labels_in_expr = set(TARGET_LABELS)
    for name, matchers in u.metrics.items():
        assert name in known, f"{name} is not exported by the node (in {expr})"
        assert matchers <= known[name] | TARGET_LABELS, f"{name} has no label {matchers - known[name]}"
        labels_in_expr |= known[name]
    assert u.grouping <= labels_in_expr, f"no metric of `{expr}` has {u.grouping - labels_in_expr}"


def test_dashboard_queries_use_only_exported_metrics_and_labels(node, exposition):
    exported = exposition.queryable()
    for expr in dashboard_exprs():
        if node.opencl is None and "netaccel_ocl_" in expr:
            continue
        check_uses(expr, exported, {})
    require_opencl(node)


def expressions_as_rules(exprs: List[str], path: Path) -> None:
    """Writes the expressions as recording rules, the form promtool can parse."""
    lines = ["groups:", "  - name: expressions", "    rules:"]
    for i, expr in enumerate(exprs):
        lines += [f"      - record: expression_{i}", f"        expr: {json.dumps(expr)}"]
    path.write_text("\n".join(lines) + "\n")


def test_promtool_parses_every_dashboard_query(tmp_path):
    rules = tmp_path / "dashboard-rules.yml"
    expressions_as_rules([for_prometheus(e) for e in dashboard_exprs()], rules)
    done = promtool("check", "rules", str(rules))
    assert done.returncode == 0, done.stdout + done.stderr


# --- alert rules and the Prometheus configuration -------------------------------------


def alert_exprs() -> List[str]:
    # The rules file is YAML; its expressions are the `expr:` entries, plain or `|`.
    text = ALERTS.read_text(encoding="utf-8")
    exprs = []
    for m in re.finditer(r"^(\s*)expr: (\|\n((?:\1  .*\n)+)|(.*)\n)", text, re.M):
        exprs.append(" ".join(m.group(3).split()) if m.group(3) else m.group(4))
    return exprs


def test_alert_rules_pass_promtool_check_and_their_unit_tests():
    done = promtool("check", "rules", str(ALERTS))
    assert done.returncode == 0, done.stdout + done.stderr
    done = subprocess.run(
        ["promtool", "test", "rules", ALERT_TESTS.name],
        cwd=MONITORING, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_alert_rules_use_only_exported_metrics_and_labels(node, exposition):
    exprs = alert_exprs()
    assert len(exprs) == ALERTS.read_text().count("- alert:"), "an expression was not found"
    for expr in exprs:
        if node.opencl is None and "netaccel_ocl_" in expr:
            continue
        check_uses(expr, exposition.queryable(), {"up": set()})
    require_opencl(node)


def test_prometheus_configuration_passes_promtool_check():
    done = promtool("check", "config", str(PROMETHEUS_CONFIG))
    assert done.returncode == 0, done.stdout + done.stderr


# --- a real Prometheus scraping the node ------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    def __init__(self, url: str):
        self.url = url

    def query(self, expr: str) -> list:
        q = urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{q}", timeout=10) as r:
            doc = json.load(r)
        assert doc["status"] == "success", doc
        return doc["data"]["result"]

    def get(self, path: str):
        with urllib.request.urlopen(self.url + path, timeout=10) as r:
            return json.load(r)["data"]


def poll(what: str, check, timeout_s: float = PROMETHEUS_TIMEOUT_S, on_wait=None):
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            result = check()
            if result:
                return result
        except (OSError, urllib.error.URLError):
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        if on_wait:
            on_wait()
        time.sleep(0.5)


@pytest.fixture(scope="module")
def prometheus(node, tmp_path_factory):
    """Prometheus with the checked-in configuration and rules, scraping the test node
    every second (the only changes: the target and the intervals)."""
    require(shutil.which("prometheus") is not None, "prometheus is not installed (Debian: prometheus)")
    work = tmp_path_factory.mktemp("prometheus")
    config = PROMETHEUS_CONFIG.read_text()
    assert "127.0.0.1:8080" in config and "15s" in config
    config = config.replace("127.0.0.1:8080", node.http).replace("15s", "1s")
    (work / "prometheus.yml").write_text(config)
    shutil.copy(ALERTS, work / ALERTS.name)
    for attempt in range(3):
        # The port is free when picked; if another program takes it before Prometheus
        # binds it, Prometheus exits and the next attempt picks another.
        port = free_port()
        log = open(work / "prometheus.log", "w")
        proc = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={work / 'prometheus.yml'}",
                f"--storage.tsdb.path={work / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        )
        prom = Prometheus(f"http://127.0.0.1:{port}")
        try:
            poll("Prometheus to answer", lambda: proc.poll() is not None or prom.get("/api/v1/status/buildinfo"),
                 timeout_s=30)
        except AssertionError:
            pass
        if proc.poll() is None:
            break
        log.close()
        if attempt == 2:
            raise AssertionError("Prometheus did not start:\n" + (work / "prometheus.log").read_text())
    try:
        yield prom
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture(scope="module")
def scraped(node, prometheus) -> Prometheus:
    """Prometheus once it has scraped the node several times (rates need two samples
    in their window), with calls in between so that rates are not all zero."""
    poll("the node to be up in Prometheus",
         lambda: prometheus.query('up{job="netaccel-node"} == 1'), on_wait=lambda: traffic(node))
    poll("five scrapes of the node",
         lambda: prometheus.query('count_over_time(up{job="netaccel-node"}[1m]) >= 5'),
         on_wait=lambda: traffic(node))
    return prometheus


def test_prometheus_loads_the_alert_rules_and_evaluates_them(scraped):
    def evaluated():
        groups = scraped.get("/api/v1/rules")["groups"]
        rules = [r for g in groups for r in g["rules"]]
        return rules if rules and all(r["health"] == "ok" for r in rules) else None

    rules = poll("every alert rule to be evaluated", evaluated)
    assert {r["name"] for r in rules} == set(re.findall(r"- alert: (\w+)", ALERTS.read_text()))
    firing = [r["name"] for r in rules if r["state"] != "inactive"]
    assert firing == [], f"alerts pending or firing on a healthy, idle node: {firing}"


def test_every_dashboard_query_returns_data_from_a_live_node(node, scraped):
    empty = []
    for expr in dashboard_exprs():
        if node.opencl is None and "netaccel_ocl_" in expr:
            continue
        if not scraped.query(for_prometheus(expr)):
            empty.append(expr)
    assert empty == [], "dashboard queries with no data:\n" + "\n".join(empty)
    require_opencl(node)


def test_every_query_of_the_monitoring_page_returns_data(scraped):
    blocks = [b for b in tagged_blocks(PAGE) if b.kind == "query"]
    assert blocks, f"{PAGE.name} has no tagged queries"
    for b in blocks:
        assert scraped.query(b.text.strip()), f"{PAGE.name}:{b.line} `{b.name}` returned no data"
