"""The Grafana dashboard and the Prometheus alert rules under deploy/ (canonical copies in the Helm
chart's files/, which deploy/grafana and deploy/prometheus link to).

- ``promtool check rules`` accepts the rules and ``promtool test rules`` passes their unit tests;
- every metric name a dashboard panel, a template variable or a rule queries is one a real worker
  serves: a distributed worker runs a file source, a file sink and the PostgreSQL CDC source, and
  its ``GET /metrics`` is read. The few families that scenario cannot produce are allowed by an
  explicit list, itself checked against the code that names them. A real Prometheus scraping the
  same worker evaluates every dashboard query, so each one parses;
- the dashboard loads, its panel ids are unique and every panel queries the ``${datasource}``
  variable.

promtool and prometheus come from Debian's ``prometheus`` package (deploy/bootstrap.sh). Without
them this module skips locally and fails under ``CI=true``.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import yaml

from sluice.worker.observability.metrics import Exposition, _backfill_metrics
from tests.integration.cdc_helpers import cdc_config, dbname, run_sql
from tests.integration.distributed_helpers import cluster_settings
from tests.integration.kafka_helpers import unique_topic_name
from tests.integration.worker_process import WorkerProcess
from tests.unavailable import unavailable

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "sluice-dashboard.json"
RULES = ROOT / "deploy" / "prometheus" / "sluice-alerts.yaml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "sluice-alerts.test.yaml"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}

#: Series Prometheus itself writes for every target: not in any exposition.
PROMETHEUS_SERIES = {"up"}


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        message = "promtool is not installed (Debian's prometheus package; deploy/bootstrap.sh installs it)"
        unavailable(message)
    return found


# -- PromQL ----------------------------------------------------------------------------------------

_TOKENS = re.compile(
    r"""
    (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
    |(?P<variable>\$\{[^}]*\}|\$\w+|\[\[\w+\]\])
    |(?P<range>\[[^\]]*\])
    |(?P<duration>\d+(?:ms|[smhdwy])\b)
    |(?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
    |(?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
    |(?P<punct>[(){},]|[=!<>]=|=~|!~|[=<>+\-*/^%])
    |(?P<space>\s+)
    """,
    re.VERBOSE,
)
#: Binary operators and modifiers; a word followed by "(" is a function or aggregation instead.
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right"}
_AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk", "quantile"}
#: Followed by a parenthesised list of label names, not of expressions.
_LABEL_LISTS = {"by", "without", "on", "ignoring", "group_left", "group_right"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers outside label matchers, range
    brackets and strings that are neither functions, aggregations, keywords nor the label names
    of a grouping clause. Grafana's variables count as opaque values."""
    tokens: list[tuple[str, str]] = []
    pos = 0
    while pos < len(expr):
        match = _TOKENS.match(expr, pos)
        if match is None:
            raise ValueError(f"cannot tokenize {expr[pos:]!r} in {expr!r}")
        if match.lastgroup != "space":
            tokens.append((match.lastgroup or "", match.group()))
        pos = match.end()
    names: set[str] = set()
    braces, skip_list, i = 0, False, 0
    while i < len(tokens):
        kind, text = tokens[i]
        following = tokens[i + 1][1] if i + 1 < len(tokens) else ""
        if text == "{":
            braces += 1
        elif text == "}":
            braces -= 1
        elif kind == "ident" and braces == 0:
            if text in _LABEL_LISTS and following == "(":
                skip_list = True
            elif following != "(" and text not in _KEYWORDS and text not in _AGGREGATIONS:
                names.add(text)
        if skip_list and text == "(":
            close = next(j for j in range(i, len(tokens)) if tokens[j][1] == ")")
            i, skip_list = close, False
        i += 1
    return names


def test_metric_names_reads_what_the_files_use() -> None:
    expr = (
        'sum by (connector, task) (rate(a_total{connector=~"$connector", task=~"${task}"}[$__rate_interval]))'
        ' > on (job) group_left(instance) b offset 15m unless count without(x) (c{status="failed"} == 1)'
        ' / max(d_bytes > 1073741824) or vector(0) + time() - e_ms / 1000'
    )
    assert metric_names(expr) == {"a_total", "b", "c", "d_bytes", "e_ms"}
    assert metric_names("debezium_metrics_TotalTableCount{context=\"snapshot\"} - up") == {
        "debezium_metrics_TotalTableCount", "up",
    }


def dashboard_queries(dashboard: dict[str, Any]) -> dict[str, str]:
    """Every PromQL query of the dashboard, keyed by where it is."""
    queries: dict[str, str] = {}
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            queries[f"panel {panel['id']} ({panel['title']}) {target['refId']}"] = target["expr"]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            definition = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
            # label_values(<series selector>, <label>): only the selector is PromQL.
            match = re.fullmatch(r"label_values\((.+),\s*\w+\)", definition)
            assert match, definition
            queries[f"variable {variable['name']}"] = match.group(1)
    return queries


def rule_queries(rules: dict[str, Any]) -> dict[str, str]:
    return {f"rule {rule['alert']}": rule["expr"] for group in rules["groups"] for rule in group["rules"]}


def all_queries() -> dict[str, str]:
    return {
        **dashboard_queries(json.loads(DASHBOARD.read_text())),
        **rule_queries(yaml.safe_load(RULES.read_text())),
    }


# -- promtool --------------------------------------------------------------------------------------


def test_promtool_checks_the_alert_rules(promtool: str) -> None:
    done = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    count = sum(len(group["rules"]) for group in yaml.safe_load(RULES.read_text())["groups"])
    assert f"SUCCESS: {count} rules found" in done.stdout


def test_alert_rule_unit_tests_pass(promtool: str) -> None:
    done = subprocess.run([promtool, "test", "rules", str(RULE_TESTS)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout
    # Every alert has a case where it fires.
    tested = {
        case["alertname"]
        for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert tested == {name.removeprefix("rule ") for name in rule_queries(yaml.safe_load(RULES.read_text()))}


def test_every_rule_names_its_connector_and_severity() -> None:
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
            assert set(rule["annotations"]) == {"summary", "description"}, rule["alert"]
            text = rule["annotations"]["summary"] + rule["annotations"]["description"]
            # What the alert's series carry: a worker's `up` has no connector, a connector's status no task.
            carried = {"SluiceWorkerDown": ("instance",), "SluiceConnectorFailed": ("connector",)}
            for label in carried.get(rule["alert"], ("connector", "task")):
                assert f"$labels.{label} }}}}" in text, (rule["alert"], label)


# -- the dashboard ---------------------------------------------------------------------------------


def test_the_dashboard_loads_with_unique_panels_on_the_datasource_variable() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["schemaVersion"] >= 39
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)), sorted(ids)
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for name in ("connector", "task"):
        assert variables[name]["type"] == "query" and variables[name]["datasource"] == DATASOURCE
        assert variables[name]["definition"].startswith("label_values(")
    queried = [panel for panel in dashboard["panels"] if panel["type"] != "row"]
    assert len(queried) >= 30
    occupied: set[tuple[int, int]] = set()
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"] == DATASOURCE, panel["title"]
            assert panel["targets"], panel["title"]
            for target in panel["targets"]:
                assert target.get("datasource", DATASOURCE) == DATASOURCE, panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        cells = {(grid["x"] + dx, grid["y"] + dy) for dx in range(grid["w"]) for dy in range(grid["h"])}
        assert not cells & occupied, f"{panel['title']} overlaps another panel"
        occupied |= cells


def test_backfill_panels_name_jobs_by_the_backfill_label() -> None:
    """The job id is the ``backfill`` label (``job`` is the scrape job's; Prometheus would have
    renamed a second one ``exported_job``)."""
    text = DASHBOARD.read_text()
    assert "exported_job" not in text
    panels = [p for p in json.loads(text)["panels"] if any("sluice_backfill_" in t["expr"] for t in p.get("targets", []))]
    legends = [t.get("legendFormat", "") for p in panels if p["type"] != "table" for t in p["targets"]]
    assert legends and all("{{backfill}}" in legend for legend in legends), legends
    renamed = [tr["options"]["renameByName"] for p in panels for tr in p.get("transformations", []) if "renameByName" in tr["options"]]
    assert renamed and all("backfill" in names for names in renamed), renamed


def test_every_query_selects_a_metric() -> None:
    for where, expr in all_queries().items():
        assert metric_names(expr), f"{where}: {expr}"


# -- the names a worker serves ---------------------------------------------------------------------


def exposition_names(text: str) -> set[str]:
    return {re.split(r"[{\s]", line, maxsplit=1)[0] for line in text.splitlines() if line and not line.startswith("#")}


def backfill_names() -> set[str]:
    """The ``sluice_backfill_*`` families, from the code that writes them, for a job whose run
    reports every figure: the worker above runs no backfill job (that needs Spark or a
    database-to-topic copy and minutes)."""
    out = Exposition()
    job = {"id": "j1", "kind": "jdbc_to_topic",
           "status": {"state": "RUNNING", "rows_done": 5, "rows_total": 10, "percent": 50.0, "rows_per_s": 2.0}}
    _backfill_metrics(out, [job], "w1")
    text = out.render()
    # The job is the `backfill` label: a `job` label would clash with the scrape job's.
    assert 'backfill="j1"' in text and "job=" not in text
    return exposition_names(text)


@pytest.fixture
def served(kafka, postgres, postgres_db: str, tmp_path: Path) -> Iterator[tuple[WorkerProcess, set[str]]]:
    """A distributed worker (so its rebalance metrics exist) running a file source, a file sink
    reading the source's topic, and the CDC source on a table with rows; yields it and the
    metric names of its ``GET /metrics`` once every family those tasks report has appeared."""
    group = f"dash-{uuid.uuid4().hex[:8]}"
    topic = unique_topic_name("dash")
    source_file, sink_file = tmp_path / "in.txt", tmp_path / "out.txt"
    source_file.write_text("".join(f"line {i}\n" for i in range(50)))
    run_sql(postgres_db, "CREATE TABLE src (id int PRIMARY KEY, name text)")
    run_sql(postgres_db, "INSERT INTO src SELECT g, 'row ' || g FROM generate_series(1, 20) g")
    prefix = f"d{time.time_ns() % 10**9}"
    workdir = tmp_path / "worker"
    workdir.mkdir()
    worker = WorkerProcess(workdir, kafka.bootstrap_servers, mode="distributed", **cluster_settings(group)).start()
    try:
        for name, config in (
            ("file-source", {"connector.class": "FileStreamSource", "file": str(source_file), "topic": topic}),
            ("file-sink", {"connector.class": "FileStreamSink", "file": str(sink_file), "topics": topic}),
            # A guard bound far above what the scenario writes: its bound is exported, nothing fires.
            ("cdc", cdc_config(postgres.port, dbname(postgres_db), prefix, **{
                "table.include.list": r"public\.src", "slot.max.retained.wal.bytes": str(64 << 30),
            })),
        ):
            r = httpx.post(f"{worker.url}/connectors", content=orjson.dumps({"name": name, "config": config}),
                           headers={"Content-Type": "application/json"}, timeout=30)
            assert r.status_code == 201, r.text
            worker.wait_running(name, timeout=60)
        # Families that appear only once a task has reported: lag after the sink's first
        # statistics, Debezium's and the slot's after the CDC task's first metrics() call.
        awaited = {
            "kafka_consumer_consumer_fetch_manager_metrics_records_lag",
            "debezium_metrics_TotalNumberOfEventsSeen",
            "debezium_metrics_MilliSecondsBehindSource",
            "debezium_metrics_RowsScanned",
            "sluice_postgres_replication_slot_lag_bytes",
            "sluice_postgres_replication_slot_retained_wal_bytes",
            "sluice_postgres_replication_slot_max_retained_wal_bytes",
            "kafka_connect_connect_worker_rebalance_metrics_completed_rebalances_total",
        }
        deadline, names = time.monotonic() + 60, set()
        while time.monotonic() < deadline:
            names = exposition_names(httpx.get(f"{worker.url}/metrics", timeout=10).text)
            if awaited <= names:
                break
            time.sleep(0.5)
        assert awaited <= names, f"never served: {sorted(awaited - names)}\n{worker.log()}"
        yield worker, names
    finally:
        worker.stop()


def test_dashboard_and_rules_query_only_metrics_the_worker_serves(served, prometheus) -> None:
    worker, names = served
    # Not produced by the scenario, each checked against where it comes from: Prometheus's own
    # per-target series (queried from a real Prometheus below), and the backfill families
    # (written by the code that renders backfill jobs).
    allowed = PROMETHEUS_SERIES | backfill_names()
    assert {"sluice_backfill_progress_ratio", "sluice_backfill_rows_done", "sluice_backfill_state"} <= allowed
    unknown = {
        where: sorted(metric_names(expr) - names - allowed)
        for where, expr in all_queries().items()
        if metric_names(expr) - names - allowed
    }
    assert not unknown, unknown

    # A real Prometheus scraping this worker: `up` exists, and every dashboard query (Grafana's
    # variables filled in as Grafana would) and rule parses and evaluates.
    prom = prometheus(worker.url)
    prom.wait_for("up", lambda v: v == 1)
    grafana = {"$__rate_interval": "1m", "$__range": "5m", '"$connector"': '".*"', '"$task"': '".*"'}
    for where, expr in all_queries().items():
        for variable, value in grafana.items():
            expr = expr.replace(variable, value)
        r = httpx.get(f"{prom.url}/api/v1/query", params={"query": expr}, timeout=10)
        assert r.status_code == 200 and r.json()["status"] == "success", f"{where}: {expr}: {r.text}"
    # The queries find the scenario's series (not only names that parse).
    for expr in (
        'kafka_connect_source_task_metrics_source_record_poll_total{connector="file-source"}',
        'kafka_consumer_consumer_fetch_manager_metrics_records_lag{connector="file-sink"}',
        'sluice_postgres_replication_slot_lag_bytes{connector="cdc"}',
        'sluice_postgres_replication_slot_retained_wal_bytes{connector="cdc"}',
        'debezium_metrics_RowsScanned{connector="cdc",context="snapshot",table="public.src"}',
        'debezium_metrics_TotalTableCount{connector="cdc",context="snapshot"}',
        "kafka_connect_connect_worker_rebalance_metrics_epoch",
    ):
        prom.wait_for(expr, lambda v: v >= 0)
