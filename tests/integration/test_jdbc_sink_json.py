"""The JDBC sink's JSON fast path (``connectors/sink/jdbc/pgjson.py``) against real PostgreSQL.

Every case writes the same schemaless JSON records twice, each into its own copy of one table:
once as the runtime hands them to a raw-JSON task (undecoded, so the fast path may take
them) and once decoded up front (so only the ordinary path can). The two tables must then hold
the same rows, compared through PostgreSQL's own text form of each row (exact for every type,
doubles included). Each case also says whether the fast path must have been taken, so a case
meant to exercise it cannot pass by quietly falling back.

The first batch a task writes to a table always takes the ordinary path (it reads the table's
column types); the cases therefore write a one-record batch first.

Every case runs with each of the fast path's two parsers: the native one (``converters/json_arrow.py``)
and pyarrow's JSON reader, which the sink uses when the native one is not installed.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from functools import partial
from typing import Any

import orjson
import pytest

from sluice.connectors.api import SinkRecordBatch, TopicPartition, UnusableRawValues
from sluice.connectors.sink.jdbc.task import JdbcSinkTask
from sluice.converters.json import JsonConverter
from tests.integration.jdbc_fast_pair import FastAndDecoded, pairs
from tests.integration.jdbc_helpers import sql
from tests.integration.postgres_fixtures import postgres_db_fixture, postgres_server_fixture  # noqa: F401
from tests.json_parsers import parser_fixture  # noqa: F401 - every test runs with each parser
from tests.unit.connectors.jdbc.conftest import FakeReporter, FakeSinkContext

TOPIC = "events"


_CONVERTER = JsonConverter()
_CONVERTER.configure({"schemas.enable": "false"}, False)


def _batch(raws: Sequence[bytes | None], first_offset: int, *, lazy: bool) -> SinkRecordBatch:
    """A poll's batch as the sink runner builds it: with its raw values when ``lazy``."""
    raws = list(raws)
    n = len(raws)

    def load(column: str) -> Any:
        if column == "partition":
            return [0] * n
        if column == "kafka_offset":
            return list(range(first_offset, first_offset + n))
        if column in ("timestamp", "headers"):
            return [None] * n
        if column == "timestamp_type":
            return [0] * n
        raise KeyError(column)

    if lazy:
        decode = partial(_CONVERTER.to_connect_batch, TOPIC, raws)
        return SinkRecordBatch(TOPIC, None, None, [None] * n, [None] * n, load, raw_values=raws, decode=decode)
    schemas, values = _CONVERTER.to_connect_batch(TOPIC, raws)
    return SinkRecordBatch(TOPIC, values, schemas, [None] * n, [None] * n, load)


class Pair(FastAndDecoded[bytes | None]):
    """Two copies of a table, written through the fast path (if it applies) and the ordinary path."""

    def __init__(self, url: str, columns: str) -> None:
        super().__init__(url, TOPIC, {}, columns)

    def write(self, batches: Sequence[Sequence[bytes | None]], **config: str) -> JdbcSinkTask:
        """Write ``batches`` through both paths; return the task of the fast table."""
        return self.write_with(lambda raws, offset, raw: _batch(raws, offset, lazy=raw), batches, config)


@pytest.fixture
def pair(postgres_db: str) -> Iterator[Any]:
    yield from pairs(partial(Pair, postgres_db))


def _lines(*objects: dict[str, Any]) -> list[bytes]:
    return [orjson.dumps(o) for o in objects]


WIDE = (
    "id bigint, name text, email text, amount double precision, qty integer, active boolean, "
    "city text, score double precision, price numeric, at timestamptz, note text"
)


def test_flat_objects_land_exactly_as_on_the_ordinary_path(pair: Any) -> None:
    p = pair(WIDE)
    tricky = [
        "",
        'say "hi", then\nleave',
        "tab\there\rcr",
        "back\\slash \\N \\.",
        "\\.",
        "ünïcødé ✓ 🚀 \u2028",
        "NULL",
        ",",
        '"',
    ]
    records = [
        {
            "id": i,
            "name": text,
            "email": None if i % 3 == 0 else f"u{i}@example.com",
            "amount": [0.1, 1 / 3, 1e22, 5e-324, 2.0, -2.5, 123456789.125, -1.5e-300, 7, 2**53 + 1][i % 10],
            "qty": [0, -1, 2**31 - 1, None][i % 4],
            "active": [True, False, None][i % 3],
            "city": "Lisbon",
            "score": i / 7,
            "price": ["1.50", "0", "-12345678901234567890.123", None][i % 4],
            "at": ["2024-02-29T12:30:00+02:00", "2024-01-01 00:00:00", None][i % 3],
            "note": ["2024-01-01", "12:30:00", "true"][i % 3],
        }
        for i, text in enumerate(tricky * 4)
    ]
    records.append({"id": 2**62, "name": "big", "amount": 2**63 - 1})  # missing fields are NULL
    records.append({"id": -(2**63), "name": "small", "qty": None})
    rest = _lines(*records[1:]) + [b'{"id":7,"name":"beyond 64 bits","score":18446744073709551616}']
    fast = p.write([_lines(records[0]), rest])
    assert fast.records_from_json == len(rest)
    assert fast.records_from_json_binary == 0  # strings for numeric and timestamptz columns: CSV
    rows = p.assert_same()
    assert len(rows) == len(records) + 1
    assert '(7,"beyond 64 bits",,,,,,1.8446744073709552e+19,,,)' in rows  # orjson and Arrow: the same double


def test_columns_of_plain_types_are_sent_as_binary_copy_data(pair: Any) -> None:
    """Integers, doubles, booleans and strings into columns of their own types go as COPY binary:
    the rows must still be exactly the ordinary path's, NULLs, extremes and odd text included."""
    p = pair(
        "id bigint, small smallint, qty integer, score double precision, active boolean, name varchar(40), note text, gone text"
    )
    texts = ["", "\\N", 'say "hi",\nthen', "ünïcødé ✓ 🚀", "\t\r", "NULL"]
    records = [
        {
            "id": [0, -(2**63), 2**63 - 1, 2**53 + 1][i % 4],
            "small": [-(2**15), 2**15 - 1, None, 0][i % 4],
            "qty": [-(2**31), 2**31 - 1, 5, None][i % 4],
            "score": [1 / 3, 5e-324, -1.5e300, None, 2.0, -0.0][i % 6],
            "active": [True, False, None][i % 3],
            "name": texts[i % len(texts)],
            "note": None if i % 2 else texts[(i + 1) % len(texts)],
            "gone": None,
        }
        for i in range(48)
    ]
    rest = _lines(*records[1:])
    fast = p.write([_lines(records[0]), rest])
    assert fast.records_from_json_binary == len(rest)
    rows = p.assert_same()
    assert len(rows) == 48


def test_a_value_too_long_for_its_column_is_reported_after_a_binary_copy(pair: Any) -> None:
    """The server refuses the binary COPY; the batch is written again row by row and only the
    offending record is reported, as with CSV data."""
    p = pair("id bigint, code varchar(3)")
    batch = _lines(*({"id": i, "code": "toolong" if i == 4 else f"c{i}"} for i in range(1, 8)))
    fast = p.write([_lines({"id": 0, "code": "ok"}), batch])
    assert fast.records_from_json_binary == len(batch)
    assert len(p.assert_same()) == 7
    reported = p.reporters[p.fast_table].reported
    assert [(r.kafka_offset, r.value) for r, _ in reported] == [(4, {"id": 4, "code": "toolong"})]


@pytest.mark.parametrize(
    ("columns", "value"),
    [
        ("id bigint, v text", True),  # a boolean into text: the ordinary path writes "t"
        ("id bigint, v numeric", 1.50),  # a JSON float into numeric: orjson's text decides the scale
        ("id bigint, v text", 2.0),  # … and into text
        ("id bigint, v text", {"nested": [1, 2]}),  # nested values become JSON text
        ("id bigint, v jsonb", [1, "two", None]),
    ],
)
def test_batches_the_fast_path_cannot_take_are_written_the_ordinary_way(pair: Any, columns: str, value: Any) -> None:
    p = pair(columns)
    first = _lines({"id": 0, "v": None})
    rest = _lines(*({"id": i, "v": value} for i in range(1, 5)))
    fast = p.write([first, rest])
    assert fast.records_from_json == 0
    p.assert_same()


@pytest.mark.parametrize(
    ("raws", "native_takes_it"),
    [
        ([b'{"id":1,"v":1}', b'{"id":2,"v":"one"}'], False),  # one field, two types
        ([b'{"id":1,"v":-0}', b'{"id":2,"v":1.5}'], True),  # the integer -0 into a double column
        ([b'{"id":1,"v":1.5}', b'{"id":2,\n"v":2.5}'], True),  # a newline between tokens
        ([b'{"id":1,"v":1.5,"v":2.5}', b'{"id":2,"v":2.5}'], False),  # a duplicate key
    ],
)
def test_json_a_parser_reads_differently_goes_the_ordinary_way(
    pair: Any, parser: str, raws: list[bytes], native_takes_it: bool
) -> None:
    """Arrow's reader differs from orjson on all four; the native parser reads -0 and whitespace as
    orjson does and refuses the other two. Either way the rows are the ordinary path's."""
    p = pair("id bigint, v double precision")
    task = p.write([[b'{"id":0,"v":0.5}'], raws])
    assert task.records_from_json == (len(raws) if parser == "native" and native_takes_it else 0)
    p.assert_same()


def test_the_double_minus_zero_takes_the_fast_path(pair: Any) -> None:
    """-0.0 and -0e1 are doubles on both paths (only the integer -0 is read differently): the fast
    path takes them and the column holds -0 either way."""
    p = pair("id bigint, v double precision")
    task = p.write([[b'{"id":0,"v":0.5}'], [b'{"id":1,"v":-0.0}', b'{"id":2,"v":-0e1}', b'{"id":3,"v":1.5}']])
    assert task.records_from_json == 3
    assert p.assert_same() == ["(0,0.5)", "(1,-0)", "(2,-0)", "(3,1.5)"]


def test_a_row_the_database_rejects_is_reported_and_the_rest_written(pair: Any) -> None:
    p = pair("id bigint, qty integer CHECK (qty >= 0)")
    batch = _lines(*({"id": i, "qty": -5 if i == 3 else i} for i in range(1, 8)))
    fast = p.write([_lines({"id": 0, "qty": 0}), batch])
    assert fast.records_from_json == len(batch)  # sent the fast way, rejected, then written row by row
    rows = p.assert_same()
    assert len(rows) == 7
    reported = p.reporters[p.fast_table].reported
    assert [(r.kafka_offset, r.value) for r, _ in reported] == [(3, {"id": 3, "qty": -5})]


def test_upsert_by_value_fields(pair: Any) -> None:
    p = pair("id bigint PRIMARY KEY, name text, score double precision")
    config = {"insert.mode": "upsert", "pk.mode": "record_value", "pk.fields": "id"}
    unique = _lines(*({"id": i, "name": f"n{i}", "score": i / 3} for i in range(10)))
    repeated = _lines(
        {"id": 1, "name": "first", "score": 1.0},
        {"id": 2, "name": "two", "score": 2.0},
        {"id": 1, "name": "last", "score": 2.5},
    )
    fast = p.write([_lines({"id": 0, "name": "zero", "score": 0.0}), unique, repeated], **config)
    assert fast.records_from_json == len(unique) + len(repeated)  # repeated keys too: the last one wins
    rows = p.assert_same()
    assert "(1,last,2.5)" in rows and "(2,two,2)" in rows


@pytest.mark.parametrize("mode", ["insert", "upsert"])
def test_tombstones_are_left_out_of_upserts_and_inserts_go_the_ordinary_way(pair: Any, mode: str) -> None:
    """Tombstones are not applied here (``delete.enabled`` needs record keys). An upsert batch comes
    the fast way without them, its fields those of all its records; an insert batch goes the
    ordinary way, which writes the runs between tombstones apart, each run with its own fields: the
    first run lacks ``b``, so its row gets the column's default, not NULL."""
    p = pair("id bigint PRIMARY KEY, a text, b text DEFAULT 'default'")
    config = {"insert.mode": mode, "pk.mode": "record_value", "pk.fields": "id"}
    batch = [*_lines({"id": 1, "a": "x"}), None, *_lines({"id": 2, "a": "y", "b": "z"}), None]
    fast = p.write([_lines({"id": 0, "a": "w", "b": "v"}), batch], **config)
    assert fast.records_from_json == (len(batch) if mode == "upsert" else 0)
    assert p.assert_same() == ["(0,w,v)", "(1,x,)" if mode == "upsert" else "(1,x,default)", "(2,y,z)"]
    assert [task.tombstones_ignored for task in p.tasks] == [2, 2]


def test_a_new_field_evolves_the_table_then_the_fast_path_resumes(pair: Any) -> None:
    p = pair("id bigint, a text")
    batches = [
        _lines({"id": 0, "a": "x"}),
        _lines({"id": 1, "a": "y"}, {"id": 2, "a": "z"}),
        _lines({"id": 3, "a": "w", "b": 1.5}),  # a field the table lacks: auto.evolve adds it
        _lines({"id": 4, "a": "v", "b": 2.5}, {"id": 5, "a": None, "b": None}),
    ]
    fast = p.write(batches, **{"auto.evolve": "true"})
    assert fast.records_from_json == 4
    assert p.assert_same() == ["(0,x,)", "(1,y,)", "(2,z,)", "(3,w,1.5)", "(4,v,2.5)", "(5,,)"]


def test_a_batch_of_json_that_does_not_convert_is_given_back_to_the_runtime(postgres_db: str) -> None:
    """``1e999`` is valid JSON but no double: Arrow refuses the batch on the helper thread, and the
    ordinary path cannot convert it either. The task must not write any of it, nor the batch
    consumed after it, and must give both back from the first record of the two
    (``UnusableRawValues``), so the runtime delivers them again decoded, record by record."""
    table = f"t_{uuid.uuid4().hex[:8]}"
    sql(postgres_db, f'CREATE TABLE "{table}" (id bigint PRIMARY KEY, v double precision)')
    task = JdbcSinkTask()
    task.start({"connection.url": postgres_db, "topics": TOPIC, "table.name.format": table}, FakeSinkContext(FakeReporter()))
    try:
        task.put(_batch([b'{"id":0,"v":0.5}'], 0, lazy=True))  # the ordinary way: reads the column types
        bad = [b'{"id":1,"v":1.5}', b'{"id":2,"v":1e999}', b'{"id":3,"v":3.5}']
        task.put(_batch(bad, 1, lazy=True))  # held back ...
        task.put(_batch([], 4, lazy=True))  # ... until the consumer caught up; the helper cannot take it
        task.put(_batch([b'{"id":4,"v":4.5}'], 4, lazy=True))  # held back: the helper is not done yet
        with pytest.raises(UnusableRawValues) as given_back:  # writing it finds the chunk before unconvertible
            task.put(_batch([], 5, lazy=True))
        assert given_back.value.offsets == {TopicPartition(TOPIC, 0): 1}
        assert task.pre_commit({TopicPartition(TOPIC, 0): 5}) == {TopicPartition(TOPIC, 0): 1}
        assert sql(postgres_db, f'SELECT id FROM "{table}" ORDER BY id') == [(0,)]
        # Delivered again, record by record as the runtime converts them: the good ones are written.
        for offset, raw in ((1, bad[0]), (3, bad[2]), (4, b'{"id":4,"v":4.5}')):
            task.put(_batch([raw], offset, lazy=False))
        task.flush({})
        assert task.pre_commit({TopicPartition(TOPIC, 0): 5}) == {TopicPartition(TOPIC, 0): 5}
        assert sql(postgres_db, f'SELECT id, v FROM "{table}" ORDER BY id') == [(0, 0.5), (1, 1.5), (3, 3.5), (4, 4.5)]
    finally:
        task.stop()


def test_pipelined_batches_keep_their_order_across_a_failed_one(pair: Any) -> None:
    """Fast batches are sent by the helper thread while the next is consumed; one the database
    rejects is written again row by row, before anything consumed after it."""
    p = pair("id bigint PRIMARY KEY, qty integer CHECK (qty >= 0)")
    batches = [_lines({"id": 0, "qty": 0})]
    batches += [
        _lines(*({"id": b * 10 + i, "qty": -1 if (b, i) == (2, 5) else i} for i in range(10))) for b in (1, 2, 3)
    ]
    fast = p.write(batches, **{"insert.mode": "upsert", "pk.mode": "record_value", "pk.fields": "id"})
    assert fast.records_from_json == 30
    rows = p.assert_same()
    assert len(rows) == 30  # 31 records, one rejected
    assert [r.kafka_offset for r, _ in p.reporters[p.fast_table].reported] == [16]


def test_small_batches_are_held_back_and_written_together_up_to_batch_size(postgres_db: str) -> None:
    """Connect's 500-record polls under its batch.size of 3000: batches the fast path takes are
    joined into one transaction of at most batch.size records (the rows of a transaction share
    its xmin); an empty put (the consumer caught up) and pre_commit write what is held, and
    pre_commit never passes a held record."""
    table = f"t_{uuid.uuid4().hex[:8]}"
    sql(postgres_db, f'CREATE TABLE "{table}" (id bigint, v double precision)')
    task = JdbcSinkTask()
    task.start(
        {"connection.url": postgres_db, "topics": TOPIC, "table.name.format": table, "batch.size": "250"},
        FakeSinkContext(),
    )
    tp = TopicPartition(TOPIC, 0)

    def put(first: int, n: int = 100) -> None:
        task.put(_batch(_lines(*({"id": i, "v": i / 2} for i in range(first, first + n))), first, lazy=True))

    try:
        put(0)  # the ordinary way: the table's column types are learnt
        for first in (100, 200, 300):
            put(first)  # 100 and 200 held, then written as one chunk when 300 would pass 250
        assert task.pre_commit({tp: 400}) == {tp: 400}  # writes what is held (300-399) first
        for first in (400, 500):
            put(first)
        task.put(_batch([], 600, lazy=True))  # caught up: 400-599 go now
        assert task.pre_commit({tp: 600}) == {tp: 600}
        transactions = sql(postgres_db, f'SELECT min(id), max(id) FROM "{table}" GROUP BY xmin::text ORDER BY 1')
        assert transactions == [(0, 99), (100, 299), (300, 399), (400, 599)]
        assert task.records_from_json == 500 and task.records_written == 600
        assert sql(postgres_db, f'SELECT count(DISTINCT id), sum(v) FROM "{table}"') == [(600, sum(range(600)) / 2)]
    finally:
        task.stop()


def test_stop_leaves_the_connection_to_a_helper_that_is_still_busy(
    postgres_db: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Closing a connection while the helper thread sends on it could free it under libpq: stop()
    waits for the helper, and one that stays busy keeps its connection."""
    import threading

    from sluice.connectors.sink.jdbc import task as task_module

    table = f"t_{uuid.uuid4().hex[:8]}"
    sql(postgres_db, f'CREATE TABLE "{table}" (id bigint, v double precision)')
    task = JdbcSinkTask()
    task.start({"connection.url": postgres_db, "topics": TOPIC, "table.name.format": table}, FakeSinkContext())
    task.put(_batch([b'{"id":0,"v":0.5}'], 0, lazy=True))
    conn = task._conn
    release = threading.Event()
    monkeypatch.setattr(task, "_send_json", lambda groups, resets: release.wait(30) and False)
    monkeypatch.setattr(task_module, "_HELPER_STOP_WAIT_S", 0.2)
    task.put(_batch([b'{"id":1,"v":1.5}'], 1, lazy=True))  # held back for the helper ...
    task.put(_batch([], 2, lazy=True))  # ... which gets it, and sticks, once the consumer caught up
    task.stop()
    assert "still busy" in caplog.text
    assert not conn.closed
    release.set()
    conn.close()
