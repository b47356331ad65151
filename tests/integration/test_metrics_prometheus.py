"""``GET /metrics`` read by a real Prometheus: a worker runs a file source and a file sink, then the
PostgreSQL CDC source and the JDBC sink (each task in its own process, the ``sluice`` command's
default) while Prometheus scrapes it every second.

What an operator checks on a dashboard: the totals equal the lines written and delivered, the
rates equal the pace the lines were written at, the sink's consumer lag shows the records
waiting (and their age) while it is paused and drops to zero once it has caught up, and ``promtool`` reads the
exposition.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import httpx
import orjson
import pytest

from tests.integration.cdc_helpers import JSON, cdc_config, dbname, run_sql
from tests.integration.cdc_helpers import worker as cdc_worker
from tests.integration.jdbc_helpers import JDBC_SINK
from tests.integration.kafka_helpers import unique_topic_name
from tests.integration.worker_process import WorkerProcess

pytestmark = pytest.mark.integration

PACE = 200  # lines per second while streaming
STREAM_S = 36  # longer than the 30 s a rate covers
PAUSED_LINES = 700


def _append(path: Path, start: int, count: int) -> None:
    with path.open("a") as f:
        f.write("".join(f"line {i}\n" for i in range(start, start + count)))


def _stream(path: Path, start: int, seconds: float) -> int:
    """Append PACE lines a second, in tenths; the number written."""
    written, began = 0, time.monotonic()
    while time.monotonic() - began < seconds:
        _append(path, start + written, PACE // 10)
        written += PACE // 10
        time.sleep(max(0.0, began + written / PACE - time.monotonic()))
    return written


def _wait_lines(path: Path, count: int, worker: WorkerProcess, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and sum(1 for _ in path.open("rb")) >= count:
            return
        time.sleep(0.2)
    raise AssertionError(f"{path} never held {count} lines\n{worker.log()}")


def _connector(worker: WorkerProcess, name: str, config: dict[str, str]) -> None:
    r = httpx.post(f"{worker.url}/connectors", content=orjson.dumps({"name": name, "config": config}), headers={"Content-Type": "application/json"}, timeout=30)
    assert r.status_code == 201, r.text
    worker.wait_running(name)


def test_prometheus_scrapes_totals_rates_and_lag(kafka, prometheus, tmp_path: Path) -> None:
    topic = unique_topic_name("metrics")
    source_file, sink_file = tmp_path / "in.txt", tmp_path / "out.txt"
    source_file.write_text("")
    worker = WorkerProcess(tmp_path, kafka.bootstrap_servers).start()
    try:
        prom = prometheus(worker.url)
        _connector(worker, "file-source", {"connector.class": "FileStreamSource", "file": str(source_file), "topic": topic})
        _connector(worker, "file-sink", {"connector.class": "FileStreamSink", "file": str(sink_file), "topics": topic})
        poll_total = 'kafka_connect_source_task_metrics_source_record_poll_total{connector="file-source",task="0"}'
        prom.wait_for(poll_total, lambda v: v == 0)  # scraped before any line: what follows is all ours

        streamed = _stream(source_file, 0, STREAM_S)
        ours = prom.value('kafka_connect_source_task_metrics_source_record_poll_rate{connector="file-source"}')
        theirs = prom.value(f"rate({poll_total}[30s])")
        assert ours is not None and theirs is not None
        assert ours == pytest.approx(PACE, rel=0.3) and theirs == pytest.approx(PACE, rel=0.3), (ours, theirs)
        _wait_lines(sink_file, streamed, worker)

        for name in (
            poll_total,
            'kafka_connect_source_task_metrics_source_record_write_total{connector="file-source"}',
            'kafka_connect_sink_task_metrics_sink_record_read_total{connector="file-sink"}',
            'kafka_connect_sink_task_metrics_sink_record_send_total{connector="file-sink"}',
        ):
            prom.wait_for(name, lambda v, n=streamed: v == n)
        send_rate = prom.value('kafka_connect_sink_task_metrics_sink_record_send_rate{connector="file-sink"}')
        assert send_rate is not None and send_rate > 0
        lag = f'kafka_consumer_consumer_fetch_manager_metrics_records_lag{{connector="file-sink",topic="{topic}",partition="0"}}'
        prom.wait_for(lag, lambda v: v == 0)
        assert prom.value('kafka_connect_task_error_metrics_total_record_failures{connector="file-sink"}') == 0
        assert prom.value('kafka_connect_connector_task_status{connector="file-sink",status="running"}') == 1
        assert prom.value('kafka_connect_connect_worker_metrics_connector_running_task_count{connector="file-sink"}') == 1
        assert prom.value("kafka_connect_connect_worker_metrics_task_startup_success_total") == 2

        # Paused, the sink falls behind by exactly what is written meanwhile; resumed, it catches up.
        assert httpx.put(f"{worker.url}/connectors/file-sink/pause", timeout=10).status_code == 202
        prom.wait_for('kafka_connect_connector_task_status{connector="file-sink",status="paused"}', lambda v: v == 1)
        _append(source_file, streamed, PAUSED_LINES)
        prom.wait_for(lag, lambda v: v == PAUSED_LINES)
        # ... and in time: the age of the last record it consumed before the pause.
        lag_seconds = f'sluice_sink_task_partition_lag_seconds{{connector="file-sink",topic="{topic}",partition="0"}}'
        prom.wait_for(lag_seconds, lambda v: v > 0)
        prom.wait_for('kafka_connect_connector_task_metrics_pause_ratio{connector="file-sink"}', lambda v: v > 0)
        assert httpx.put(f"{worker.url}/connectors/file-sink/resume", timeout=10).status_code == 202
        _wait_lines(sink_file, streamed + PAUSED_LINES, worker)
        prom.wait_for(lag, lambda v: v == 0)
        prom.wait_for(lag_seconds, lambda v: v == 0)
        prom.wait_for(
            'kafka_connect_sink_task_metrics_sink_record_send_total{connector="file-sink"}', lambda v: v == streamed + PAUSED_LINES
        )

        _check_with_promtool(worker)
    finally:
        worker.stop()


def _check_with_promtool(worker: WorkerProcess) -> None:
    """``promtool check metrics`` parses the exposition; its linter flags only the names the JMX
    exporter gives Connect's and Debezium's attributes (``*_ms``, Debezium's camelCase), which
    dashboards query and so are kept."""
    exposition = httpx.get(f"{worker.url}/metrics", timeout=10)
    assert exposition.headers["content-type"].startswith("text/plain; version=0.0.4")
    check = subprocess.run(["promtool", "check", "metrics"], input=exposition.content, capture_output=True, timeout=30)
    problems = [line for line in check.stderr.decode().splitlines() if line.strip()]
    assert check.returncode in (0, 3), problems  # 1 would be an exposition it cannot parse
    for problem in problems:
        name, _, text = problem.partition(" ")
        connect_ms = name.startswith("kafka_connect_") and name.endswith("_ms") and "abbreviated units" in text
        debezium = name.startswith("debezium_metrics_") and ("camelCase" in text or "abbreviated units" in text)
        assert connect_ms or debezium, problem


def test_cdc_source_and_jdbc_sink_metrics_reach_prometheus(kafka, postgres, postgres_db: str, prometheus, tmp_path: Path) -> None:
    """Debezium's snapshot and streaming figures, the slot's lag in bytes while the CDC source is
    paused, and the JDBC sink's totals and lag, as Prometheus returns them."""
    snapshot_rows, streamed_rows = 300, 200
    prefix = f"m{time.time_ns() % 10**9}"
    run_sql(postgres_db, "CREATE TABLE src (id int PRIMARY KEY, name text)")
    run_sql(postgres_db, f"INSERT INTO src SELECT g, 'row ' || g FROM generate_series(1, {snapshot_rows}) g")
    # No heartbeats: every record the source writes is then a change the test made.
    cdc = cdc_config(postgres.port, dbname(postgres_db), prefix, **{"table.include.list": r"public\.src", "heartbeat.interval.ms": "0"})
    topic = f"{prefix}.public.src"
    worker = cdc_worker(tmp_path, kafka.bootstrap_servers).start()
    try:
        prom = prometheus(worker.url)
        _connector(worker, "cdc", cdc)
        labels = f'connector="cdc",name="{prefix}",plugin="postgres"'
        prom.wait_for(f'debezium_metrics_SnapshotCompleted{{{labels},context="snapshot"}}', lambda v: v == 1)
        assert prom.value(f'debezium_metrics_TotalTableCount{{{labels},context="snapshot"}}') == 1
        assert prom.value(f'debezium_metrics_RemainingTableCount{{{labels},context="snapshot"}}') == 0
        prom.wait_for(f'debezium_metrics_RowsScanned{{{labels},context="snapshot",table="public.src"}}', lambda v: v == snapshot_rows)
        _connector(worker, "jdbc", {
            "connector.class": JDBC_SINK, "topics": topic, "connection.url": postgres_db,
            "insert.mode": "upsert", "pk.mode": "record_key", "auto.create": "true", "table.name.format": "dst",
            "key.converter": JSON, "value.converter": JSON,
            "transforms": "unwrap", "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
        })
        for i in range(snapshot_rows + 1, snapshot_rows + streamed_rows + 1):
            run_sql(postgres_db, f"INSERT INTO src VALUES ({i}, 'streamed')")
        total = snapshot_rows + streamed_rows
        prom.wait_for(f'debezium_metrics_TotalNumberOfEventsSeen{{{labels},context="streaming"}}', lambda v: v == total)
        # Streamed as they were committed, on one host: well under a minute behind.
        prom.wait_for(f'debezium_metrics_MilliSecondsBehindSource{{{labels},context="streaming"}}', lambda v: 0 <= v < 60_000)
        prom.wait_for('kafka_connect_source_task_metrics_source_record_write_total{connector="cdc"}', lambda v: v == total)
        prom.wait_for('kafka_connect_sink_task_metrics_sink_record_send_total{connector="jdbc"}', lambda v: v == total)
        assert run_sql(postgres_db, "SELECT count(*) FROM dst") == [(total,)]
        prom.wait_for(f'kafka_consumer_consumer_fetch_manager_metrics_records_lag{{connector="jdbc",topic="{topic}"}}', lambda v: v == 0)

        # Paused, the source confirms nothing: the slot holds at least the WAL written meanwhile.
        slot_lag = f'sluice_postgres_replication_slot_lag_bytes{{connector="cdc",slot="{cdc["slot.name"]}"}}'
        assert httpx.put(f"{worker.url}/connectors/cdc/pause", timeout=10).status_code == 202
        prom.wait_for('kafka_connect_connector_task_status{connector="cdc",status="paused"}', lambda v: v == 1)
        before = _wal_lsn(postgres_db)
        run_sql(postgres_db, "INSERT INTO src SELECT g, repeat('x', 200) FROM generate_series(100000, 105000) g")
        written = _wal_lsn(postgres_db) - before
        prom.wait_for(slot_lag, lambda v: v >= written, timeout=30)
        # The WAL the server keeps (from the slot's restart position) covers at least what it has not confirmed.
        retained = slot_lag.replace("_lag_bytes", "_retained_wal_bytes")
        prom.wait_for(retained, lambda v: v >= written, timeout=30)
        assert httpx.put(f"{worker.url}/connectors/cdc/resume", timeout=10).status_code == 202
        prom.wait_for(slot_lag, lambda v: v < written, timeout=60)
        _check_with_promtool(worker)
    finally:
        worker.stop()


def _wal_lsn(url: str) -> int:
    return int(run_sql(url, "SELECT (pg_current_wal_lsn() - '0/0')::bigint")[0][0])
