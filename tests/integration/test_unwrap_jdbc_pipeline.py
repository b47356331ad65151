"""The sink half of the pipeline people build most, PostgreSQL CDC → ExtractNewRecordState → JDBC
upsert, on a real Kafka broker and a real PostgreSQL: Debezium change events (JsonConverter with
schemas, the PostgreSQL source's envelope and ``source`` block) consumed by the runtime's own sink
runner into the JDBC sink with ``transforms=unwrap``, in the delete modes such a pipeline uses.

The sink keeps its fast path through the transform (raw values, rewritten as the unwrapped rows):
its ``records_from_json`` counts the records it wrote that way. The table holds what the events
say (the last row of each key, deletes applied or marked, truncates and tombstones dropped), row
for row what the same events give when the sink takes decoded values (a second table).
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from sluice.connectors.api import Decimal, Schema, SinkTask, Timestamp, TopicPartition, Type, ValueFormat
from sluice.connectors.sink.jdbc.task import JdbcSinkTask
from sluice.converters import json_arrow
from sluice.converters.header import SimpleHeaderConverter
from sluice.converters.json import JsonConverter
from sluice.plugins import PluginRegistry
from sluice.worker.execution.clients import SINK_CONSUMER_DEFAULTS
from sluice.worker.execution.transform_chain import build_chain
from sluice.worker.runners.sink import SinkTaskRunner
from sluice.worker.status import ConnectorTaskId, TargetState
from tests.debezium_events import COLUMNS, Table
from tests.integration.jdbc_helpers import sql
from tests.integration.kafka_helpers import OutgoingRecord, create_topic, produce
from tests.unit.worker.test_errors import Listener

pytestmark = pytest.mark.integration

#: Columns the JDBC sink's fast path writes (flat values; no float32, which it leaves to the ordinary path).
_FAST = {"small", "big", "flag", "score", "name", "price", "day", "at", "at_us", "mood", "uid", "zoned"}


class DecodedJdbcSinkTask(JdbcSinkTask):
    """The JDBC sink taking decoded values: the reference the fast path's table is compared with."""

    value_format = ValueFormat.CONNECT


def _converter(is_key: bool) -> JsonConverter:
    converter = JsonConverter()
    converter.configure({"schemas.enable": "true"}, is_key)
    return converter


def _table(rng: random.Random) -> Table:
    makers = {name: make for name, _, make in COLUMNS}
    columns = [(name, schema.as_optional(), make) for name, schema, make in COLUMNS if name in _FAST]
    columns.append(("price_due", Decimal.schema(2, optional=True, precision=12), makers["price"]))
    columns.append(("seen", Timestamp.SCHEMA, makers["at"]))  # required
    columns.append(("qty", Schema(Type.INT32, default=1), lambda r: r.randrange(100)))
    return Table(rng, "orders", columns)


class Pipeline:
    """One connector's sink task driven by the runtime's sink runner, reading ``topic`` from the start."""

    def __init__(self, bootstrap: str, topic: str, url: str, table: str, task: SinkTask, mode: str) -> None:
        config = {
            "connector.class": "JdbcSink",
            "connection.url": url,
            "topics": topic,
            "table.name.format": table,
            "auto.create": "true",
            "insert.mode": "upsert",
            "pk.mode": "record_key",
            "delete.enabled": "true",
            "transforms": "unwrap",
            "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
            "transforms.unwrap.add.fields": "op,table,lsn,source.ts_ms",
            "transforms.unwrap.delete.tombstone.handling.mode": mode,
        }
        headers = SimpleHeaderConverter()
        headers.configure({})
        self.task = task
        self.tp = TopicPartition(topic, 0)
        self.runner = SinkTaskRunner(
            ConnectorTaskId(f"unwrap-{table}", 0), task, config, listener=Listener(),
            initial_state=TargetState.STARTED,
            consumer_config={"bootstrap.servers": bootstrap, **SINK_CONSUMER_DEFAULTS, "group.id": f"connect-{table}"},
            topics=[topic], topics_regex=None, key_converter=_converter(True), value_converter=_converter(False),
            header_converter=headers, transform=build_chain(config, PluginRegistry()), offset_flush_interval_ms=600_000,
        )  # fmt: skip
        self.runner.initialize()

    def drain(self, end: int, timeout: float = 60.0) -> None:
        """Consume up to offset ``end`` and commit (the task makes everything durable first)."""
        deadline = time.monotonic() + timeout
        while self.runner.offsets.consumed.get(self.tp, 0) < end:
            assert time.monotonic() < deadline, f"consumed {self.runner.offsets.consumed} of {end}"
            self.runner.iteration()
        self.runner.commit()

    def close(self) -> None:
        self.runner.close()


@pytest.fixture
def pipelines(kafka: Any, postgres_db: str) -> Iterator[Any]:
    if not json_arrow.available():
        pytest.fail("sluice_native is not installed: `make setup` builds it from native/ (needs cargo)")
    made: list[Pipeline] = []

    def make(topic: str, table: str, task: SinkTask, mode: str) -> Pipeline:
        made.append(Pipeline(kafka.bootstrap_servers, topic, postgres_db, table, task, mode))
        return made[-1]

    yield make
    for pipeline in made:
        pipeline.close()


def _expected(events: list[tuple[dict[str, Any], dict[str, Any] | None]], mode: str) -> dict[int, str]:
    """Each key's last row as the events say (``__op`` of it): deleted rows removed, or in the
    rewrite mode kept as the row before the delete (``d``)."""
    rows: dict[int, str] = {}
    for key, value in events:
        if value is None or value["op"] == "t":
            continue
        if value["after"] is None and mode != "rewrite":
            rows.pop(key["id"], None)
        else:
            rows[key["id"]] = value["op"]
    return rows


#: ``delete.tombstone.handling.mode`` → whether the JDBC fast path takes batches with deletes.
#: Debezium 3's default mode makes a delete a null value under ``after``'s schema, which JsonConverter
#: writes ``{"schema":…,"payload":null}``: the JDBC fast path reads Kafka tombstones as deletes, not
#: yet such values, so a batch with one is written the ordinary way (rows the same).
MODES = {"tombstone": False, "delete-to-tombstone": True, "rewrite": True}


@pytest.mark.parametrize("mode", list(MODES))
def test_unwrapped_change_events_take_the_jdbc_sinks_fast_path(
    kafka: Any, postgres_db: str, pipelines: Any, mode: str
) -> None:
    rng = random.Random(40)
    table = _table(rng)
    topic = f"srv.public.orders-{uuid.uuid4().hex[:8]}"
    create_topic(kafka.bootstrap_servers, topic)
    keys, values = _converter(True), _converter(False)

    def events(ops: list[tuple[str, int]]) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
        out: list[tuple[dict[str, Any], dict[str, Any] | None]] = []
        for i, (op, row_id) in enumerate(ops):
            out.append(({"id": row_id}, table.event(op, row_id, 1000 + i)))
            if op == "d":
                out.append(({"id": row_id}, None))
        return out

    def send(batch: list[tuple[dict[str, Any], dict[str, Any] | None]]) -> None:
        produce(kafka.bootstrap_servers, topic, [
            OutgoingRecord(
                value=None if v is None else values.from_connect_data(topic, table.envelope_schema, v),
                key=keys.from_connect_data(topic, table.key_schema, k), partition=0,
            )
            for k, v in batch
        ])  # fmt: skip

    fast_table, slow_table = f"fast_{uuid.uuid4().hex[:8]}", f"slow_{uuid.uuid4().hex[:8]}"
    fast_task = JdbcSinkTask()
    fast = pipelines(topic, fast_table, fast_task, mode)
    slow = pipelines(topic, slow_table, DecodedJdbcSinkTask(), mode)
    assert fast.runner.redelivery.format is not None  # the chain keeps raw values: the task gets them
    assert slow.runner.redelivery.format is None
    # The snapshot's first row creates the table (the first batch a table gets goes the ordinary way) …
    phases = [events([("r", 1)]), events([("c", i) for i in range(2, 302)])]
    # … then updates, deletes with their tombstones and a truncate, mixed.
    later = [("u", i) for i in range(2, 120)] + [("d", i) for i in range(250, 262)] + [("t", 0), ("c", 400)]
    rng.shuffle(later)
    phases.append(events(later))
    produced = 0
    for phase in phases:
        send(phase)
        produced += len(phase)
        fast.drain(produced)
    slow.drain(produced)

    everything = [e for phase in phases for e in phase]
    kept = sum(1 for _, v in everything if v is not None and v["op"] != "t")  # tombstones, truncates dropped
    if MODES[mode]:
        assert fast_task.records_from_json == kept - 1  # every record but the first, which creates the table
    else:
        assert fast_task.records_from_json >= 300  # the creates, at least
    expected = _expected(everything, mode)
    rows = sql(postgres_db, f'SELECT id, "__op", "__table", "__source_ts_ms" FROM "{fast_table}" ORDER BY id')
    assert {r[0]: r[1] for r in rows} == expected
    assert {r[2] for r in rows} == {"orders"} and all(r[3] > 0 for r in rows)
    if mode == "rewrite":
        marked = sql(postgres_db, f'SELECT id FROM "{fast_table}" WHERE "__deleted" = \'true\' ORDER BY id')
        assert [r[0] for r in marked] == [i for i, op in expected.items() if op == "d"] == list(range(250, 262))
    fast_rows = sql(postgres_db, f'SELECT t::text FROM "{fast_table}" t ORDER BY t.id')
    assert fast_rows == sql(postgres_db, f'SELECT t::text FROM "{slow_table}" t ORDER BY t.id')
