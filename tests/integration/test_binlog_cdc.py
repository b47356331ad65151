"""MariaDB (binlog: ROW format, FULL images and metadata, GTIDs) → the binlog CDC source → Kafka.

What a Debezium user checks: the change events in the topic, field by field, for every common
column type (nulls and edge values included), the key, the schemas' logical type names, the
``source`` block, tombstones, and that a restarted connector resumes from its stored offsets with
no change lost and none repeated, also from the middle of a transaction.
"""

from __future__ import annotations

import base64
import decimal
from pathlib import Path
from typing import Any

import orjson
import pytest

from sluice.connectors.source.binlog_cdc.connector import MariaDbCdcSourceConnector
from sluice.connectors.source.binlog_cdc.task import BinlogCdcTask
from tests.integration.binlog_helpers import connector_config
from tests.integration.binlog_helpers import mysql as _mysql
from tests.integration.binlog_helpers import start_task as _task
from tests.integration.cdc_helpers import key, read_events, read_until, value, worker, write_connector
from tests.integration.kafka_helpers import unique_topic_name
from tests.services.mariadb import MariaDbServer

pytestmark = pytest.mark.integration

TYPES_TABLE = """
CREATE TABLE types (
  id INT PRIMARY KEY,
  t TINYINT, tu TINYINT UNSIGNED, s SMALLINT, su SMALLINT UNSIGNED, m MEDIUMINT, i INT, iu INT UNSIGNED,
  b BIGINT NOT NULL DEFAULT 0, bu BIGINT UNSIGNED,
  dec_ DECIMAL(10,3), f FLOAT, d DOUBLE,
  c CHAR(3), vc VARCHAR(20), tx TEXT,
  bin BINARY(4), vbin VARBINARY(8), bl BLOB,
  dt DATE, dz DATE NOT NULL DEFAULT '2000-01-01', dtm DATETIME, dtm6 DATETIME(6), ts TIMESTAMP NULL, ts3 TIMESTAMP(3) NULL,
  tm TIME, tm6 TIME(6), yr YEAR,
  e ENUM('small','medium','large'), st SET('a','b','c'),
  js JSON, bt BIT(1), b12 BIT(12), flag BOOLEAN
)
"""

ROW_1 = (
    "INSERT INTO types VALUES (1, -128, 255, -32768, 65535, -8388608, -2147483648, 4294967295,"
    " 9223372036854775807, 18446744073709551615, -1234567.891, 0.1, 2.718281828459045,"
    " 'ab', 'héllo wörld ✓', 'long text', x'0001', x'00ff00', x'deadbeef',"
    " '2024-02-29', '0000-00-00', '2024-03-01 10:11:12', '1969-12-31 23:59:59.999999', '2038-01-19 03:14:07',"
    " '2024-03-01 10:11:12.5', '-838:59:59', '12:34:56.789012', 2155,"
    " 'medium', 'c,a', '{\"k\": [1, 2, null]}', b'1', b'100000000001', true)"
)


def _config(server: MariaDbServer, database: str, prefix: str, **extra: str) -> dict[str, str]:
    return connector_config(
        server,
        prefix,
        **{
            "database.include.list": database,
            "snapshot.mode": "no_data",
            "schema.history.internal": "io.debezium.relational.history.MemorySchemaHistory",
            "poll.interval.ms": "200",
            **extra,
        },
    )


def _b64(text: str) -> bytes:
    return base64.b64decode(text)


def _decimal(encoded: str, scale: int) -> decimal.Decimal:
    return decimal.Decimal(int.from_bytes(_b64(encoded), "big", signed=True)).scaleb(-scale)


def test_changes_of_every_type_match_debezium_and_survive_a_restart(
    kafka: Any, mariadb: MariaDbServer, mariadb_db: str, tmp_path: Path
) -> None:
    bootstrap = kafka.bootstrap_servers
    database = mariadb_db.rsplit("/", 1)[-1]
    prefix = unique_topic_name("binlog")
    topic = f"{prefix}.{database}.types"
    _mysql(mariadb, database, TYPES_TABLE, "CREATE TABLE other (id INT PRIMARY KEY, note VARCHAR(10))")
    config = _config(mariadb, database, prefix, **{"table.include.list": rf"{database}\.types"})
    connector_file = write_connector(tmp_path / "binlog.json", "binlog", config)
    w = worker(tmp_path, bootstrap).start(connector_file)
    try:
        w.wait_running("binlog")
        _mysql(
            mariadb, database,
            ROW_1,
            "INSERT INTO types (id) VALUES (2)",  # every other column null (or its default)
            "INSERT INTO other VALUES (1, 'ignored')",  # not captured: table.include.list
            "UPDATE types SET vc = 'changed', st = '', e = NULL WHERE id = 1",
            "DELETE FROM types WHERE id = 2",
        )  # fmt: skip
        events = read_events(bootstrap, topic, 5)
        assert [(value(r) or {}).get("op") for r in events] == ["c", "c", "u", "d", None]
        assert [key(r) for r in events] == [{"id": 1}, {"id": 2}, {"id": 1}, {"id": 2}, {"id": 2}]
        assert events[-1].value is None  # the tombstone after the delete

        created = value(events[0])
        assert set(created) == {"before", "after", "source", "transaction", "op", "ts_ms", "ts_us", "ts_ns"}
        assert created["before"] is None
        after = created["after"]
        assert (after["t"], after["tu"], after["s"], after["su"], after["m"]) == (-128, 255, -32768, 65535, -8388608)
        assert (after["i"], after["iu"], after["b"]) == (-2147483648, 4294967295, 9223372036854775807)
        assert after["bu"] == -1  # bigint.unsigned.handling.mode=long: 2^64-1 wraps as Java's long does
        assert _decimal(after["dec_"], 3) == decimal.Decimal("-1234567.891")
        assert after["f"] == 0.1 and after["d"] == 2.718281828459045
        assert (after["c"], after["vc"], after["tx"]) == ("ab", "héllo wörld ✓", "long text")
        assert _b64(after["bin"]) == b"\x00\x01\x00\x00"  # BINARY(4) keeps its zero padding
        assert _b64(after["vbin"]) == b"\x00\xff\x00" and _b64(after["bl"]) == b"\xde\xad\xbe\xef"
        assert after["dt"] == 19782  # io.debezium.time.Date: days since the epoch
        assert after["dz"] == 0  # a zero date in a NOT NULL column: the epoch
        assert after["dtm"] == 1709287872000  # io.debezium.time.Timestamp (DATETIME(0..3)): ms
        assert after["dtm6"] == -1  # io.debezium.time.MicroTimestamp (DATETIME(4..6)): µs, before the epoch
        assert after["ts"] == "2038-01-19T03:14:07Z" and after["ts3"] == "2024-03-01T10:11:12.500Z"
        assert after["tm"] == -(838 * 3600 + 59 * 60 + 59) * 1_000_000  # io.debezium.time.MicroTime
        assert after["tm6"] == 45296789012 and after["yr"] == 2155
        assert after["e"] == "medium" and after["st"] == "a,c"  # SET members in definition order
        assert orjson.loads(after["js"]) == {"k": [1, 2, None]}
        assert after["bt"] is True and _b64(after["b12"]) == (2049).to_bytes(2, "little")
        assert after["flag"] == 1  # BOOLEAN is TINYINT(1): INT16, as for a table Debezium learnt from its snapshot

        nulls = value(events[1])["after"]
        assert nulls["b"] == 0 and nulls["dz"] == 10957  # defaults the server filled in
        assert all(nulls[c] is None for c in nulls if c not in ("id", "b", "dz"))

        updated = value(events[2])
        assert updated["before"]["vc"] == "héllo wörld ✓" and updated["after"]["vc"] == "changed"
        assert updated["before"]["st"] == "a,c" and updated["after"]["st"] == ""  # the empty SET is not null
        assert updated["before"]["e"] == "medium" and updated["after"]["e"] is None
        deleted = value(events[3])
        assert deleted["after"] is None and deleted["before"]["id"] == 2

        source = created["source"]
        assert list(source) == [
            "version", "connector", "name", "ts_ms", "snapshot", "db", "sequence", "ts_us", "ts_ns",
            "table", "server_id", "gtid", "file", "pos", "row", "thread", "query",
        ]  # fmt: skip
        assert source["connector"] == "mariadb" and source["name"] == prefix and source["snapshot"] == "false"
        assert source["db"] == database and source["table"] == "types" and source["server_id"] == 1
        assert source["file"].startswith("mariadb-bin.") and source["pos"] > 4 and source["row"] == 0
        assert source["gtid"].startswith("0-1-") and source["query"] is None
        assert source["ts_ms"] % 1000 == 0 and source["ts_ms"] <= created["ts_ms"]
        # one GTID per transaction (autocommit statements here)
        assert value(events[1])["source"]["gtid"] != source["gtid"]

        schema = orjson.loads(events[0].value or b"{}")["schema"]
        assert schema["name"] == f"{prefix}.{database}.types.Envelope"
        fields = {f["field"]: f for f in schema["fields"]}
        assert fields["source"]["name"] == "io.debezium.connector.mariadb.Source"
        columns = {f["field"]: f for f in fields["after"]["fields"]}
        logical = {name: columns[name].get("name") for name in columns}
        assert logical["dec_"] == "org.apache.kafka.connect.data.Decimal"
        assert columns["dec_"]["parameters"] == {"scale": "3", "connect.decimal.precision": "10"}
        assert logical["dt"] == "io.debezium.time.Date" and logical["dtm"] == "io.debezium.time.Timestamp"
        assert logical["dtm6"] == "io.debezium.time.MicroTimestamp" and logical["ts"] == "io.debezium.time.ZonedTimestamp"
        assert logical["tm"] == "io.debezium.time.MicroTime" and logical["yr"] == "io.debezium.time.Year"
        assert logical["e"] == "io.debezium.data.Enum" and columns["e"]["parameters"] == {"allowed": "small,medium,large"}
        assert logical["st"] == "io.debezium.data.EnumSet" and columns["st"]["parameters"] == {"allowed": "a,b,c"}
        assert logical["js"] is None and logical["b12"] == "io.debezium.data.Bits"  # MariaDB's JSON: a LONGTEXT
        assert columns["b12"]["parameters"] == {"length": "12"}
        types = {name: columns[name]["type"] for name in columns}
        assert [types[c] for c in ("t", "tu", "s", "su", "m", "i", "iu", "b", "bu")] == [
            "int16", "int16", "int16", "int32", "int32", "int32", "int64", "int64", "int64",
        ]  # fmt: skip
        assert (types["f"], types["d"], types["bin"], types["bt"], types["flag"]) == ("float", "double", "bytes", "boolean", "int16")
        assert columns["b"]["optional"] is False and columns["i"]["optional"] is True
        key_schema = orjson.loads(events[0].key or b"{}")["schema"]
        assert key_schema["name"] == f"{prefix}.{database}.types.Key"

        # A restart: changes made while the worker is down arrive once, after the stored offset.
        assert w.stop() == 0
        _mysql(
            mariadb, database,
            "BEGIN", "INSERT INTO types (id, vc) VALUES (3, 'down-1')", "INSERT INTO types (id, vc) VALUES (4, 'down-2')",
            "COMMIT",
            "UPDATE types SET vc = 'down-3' WHERE id = 1",
        )  # fmt: skip
        w = worker(tmp_path, bootstrap).start(connector_file)
        w.wait_running("binlog")
        records = read_until(bootstrap, topic, lambda rs: len(rs) >= 8, what="the changes made while down")
        later = [(value(r)["op"], key(r)["id"], value(r)["after"]["vc"]) for r in records[5:]]
        assert later == [("c", 3, "down-1"), ("c", 4, "down-2"), ("u", 1, "down-3")]
        assert value(records[5])["source"]["gtid"] == value(records[6])["source"]["gtid"]  # one transaction
    finally:
        w.stop()


def _poll_until(task: BinlogCdcTask, count: int) -> list[Any]:
    records: list[Any] = []
    for _ in range(50):
        polled = task.poll()
        if polled:
            records.extend(polled)
        if len(records) >= count:
            break
    return records


def test_a_restart_inside_a_transaction_skips_what_was_delivered(mariadb: MariaDbServer, mariadb_db: str) -> None:
    """Batches can end in the middle of a transaction; a task started from such a batch's offset
    emits the rest of the transaction, and nothing twice."""
    database = mariadb_db.rsplit("/", 1)[-1]
    _mysql(mariadb, database, "CREATE TABLE rows_ (id INT PRIMARY KEY, v INT)")
    connector = MariaDbCdcSourceConnector()
    raw = _config(mariadb, database, "mid", **{"max.batch.size": "2"})
    connector.start(connector.validate({k: v for k, v in raw.items() if not k.endswith(("converter", "class"))}))
    config = connector.task_configs(1)[0]
    first = _task(config, None)
    try:
        inserts = [f"INSERT INTO rows_ VALUES ({n}, {n})" for n in range(1, 6)]
        _mysql(
            mariadb, database,
            "BEGIN", *inserts, "INSERT INTO rows_ VALUES (6, 6), (7, 7), (8, 8)", "COMMIT",
            "UPDATE rows_ SET v = 0 WHERE id <= 2",  # one event, two rows
        )  # fmt: skip
        batch = _poll_until(first, 2)
        assert [r.value["after"]["id"] for r in batch] == [1, 2]
        offset = dict(batch[-1].source_offset)
        assert offset["event"] > 0 and offset["gtids"] and offset["file"].startswith("mariadb-bin.")
        rest = _poll_until(first, 8)
    finally:
        first.stop()
        first.poll()
    expected = [(r.value["op"], r.value["after"]["id"]) for r in rest]
    assert expected == [("c", 3), ("c", 4), ("c", 5), ("c", 6), ("c", 7), ("c", 8), ("u", 1), ("u", 2)]

    # Resume from the first batch's offset: the transaction's other rows, then the update.
    second = _task(config, offset)
    try:
        resumed = _poll_until(second, 8)
    finally:
        second.stop()
        second.poll()
    assert [(r.value["op"], r.value["after"]["id"]) for r in resumed] == expected
    assert [r.value["source"]["row"] for r in resumed[3:]] == [0, 1, 2, 0, 1]  # rows of multi-row events
