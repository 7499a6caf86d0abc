"""The Prometheus example of the dashboard page (examples/prometheus/): both files parse, the
config loads the rules, every metric the rules query is one /metrics really serves (a renamed
or misspelt metric is an alert that never fires, silently), and docs/dashboard.md shows the
files themselves (a snippet of each in a yaml block, so the page cannot drift from them)."""

from __future__ import annotations

import re
from typing import Any

import httpx
import redis
import yaml  # type: ignore[import-untyped]  # (no stubs installed: types-PyYAML is no dependency)
from prometheus_client.parser import text_string_to_metric_families

from keyqueue import Queue
from keyqueue.server import RedisServer
from keyqueue.web import create_app

from ..support.helpers import ROOT
from ..support.web_support import Served

EXAMPLE = ROOT / "examples" / "prometheus"
#: PromQL words that look like names but are no metric (functions are told by their "(").
PROMQL_WORDS = {
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "inf",
    "nan",
}


def load(name: str) -> Any:
    return yaml.safe_load((EXAMPLE / name).read_text())


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: its identifiers, less strings, label
    matchers, ranges, label lists (``by (queue)``), functions and keywords."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"|\{[^}]*\}|\[[^\]]*\]', " ", expr)
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    names = set()
    for m in re.finditer(r"(?<![0-9.])[a-zA-Z_:][a-zA-Z0-9_:]*", expr):
        if not expr[m.end() :].lstrip().startswith("(") and m.group().lower() not in PROMQL_WORDS:
            names.add(m.group())
    return names


def test_metric_names_reads_promql() -> None:
    assert metric_names('sum by (queue) (rate(a_total{queue=~"x|y"}[5m])) / on(queue) b > 1e3') == {"a_total", "b"}


def test_prometheus_yml_loads_rules_yml() -> None:
    config = load("prometheus.yml")
    assert config["rule_files"] == ["rules.yml"]  # relative to prometheus.yml: the file beside it
    assert (EXAMPLE / "rules.yml").is_file()
    assert {job["job_name"] for job in config["scrape_configs"]} == {"keyqueue", "keyqueue-workers"}


def test_every_metric_the_rules_query_is_one_metrics_serves(redis_server: RedisServer, r: redis.Redis) -> None:
    rules = [rule for group in load("rules.yml")["groups"] for rule in group["rules"]]
    assert rules and all(rule["alert"] and rule["expr"] for rule in rules)
    used = set().union(*(metric_names(str(rule["expr"])) for rule in rules))
    assert used, "no metric found in the rules"
    q = Queue("emails", client=r, max_receives=1)  # every metric present: one waiting, one dead
    q.enqueue_many(["a", "b"])
    m = q.claim()
    assert m is not None and m.dead_letter("RuntimeError: x")
    served = Served(create_app(url=redis_server.url))
    try:
        text = httpx.get(served.url + "/metrics", timeout=20).text
    finally:
        served.stop()
    served_names = {s.name for family in text_string_to_metric_families(text) for s in family.samples}
    assert used <= served_names, used - served_names


def test_the_dashboard_page_shows_the_files_themselves() -> None:
    page = (ROOT / "docs" / "dashboard.md").read_text()
    for name in ("prometheus.yml", "rules.yml"):
        shown = f'`examples/prometheus/{name}`:\n\n```yaml\n--8<-- "examples/prometheus/{name}"\n```'
        assert shown in page, f"docs/dashboard.md does not include examples/prometheus/{name} in a yaml block"
