"""The schema history: every DDL the binlog source saw, so a restart decodes rows with their own shapes.

Debezium's MySQL and MariaDB connectors keep the table definitions in force at each binlog
position in a Kafka topic of their own (``schema.history.internal.kafka.topic``, one partition,
kept forever). This module does the same, in Debezium's record format, so its topic reads as
Debezium's: one JSON value per DDL statement with ``source`` (``{"server": <topic.prefix>}``),
``position`` (the binlog offset just after the statement), ``ts_ms``, ``databaseName``, ``ddl``
and ``tableChanges`` (the changed tables' shapes after the statement, :func:`~.shapes.table_document`).

What holds:

* **First start** (no stored offsets): every captured table's current shape (from
  ``information_schema``; its ``SHOW CREATE TABLE`` text as ``ddl``) is recorded at the start
  position before anything is streamed.
* **A DDL** in the stream (:meth:`SchemaHistory.apply_ddl`) changes the model (:mod:`.ddl`) and is
  written (produced and flushed, synchronously) before any event behind it is handed out, so no
  stored offset is ever ahead of the history. A statement the parser does not follow
  re-describes, from ``information_schema``, the tables it names (a warning names the
  statement); with ``schema.history.internal.skip.unparseable.ddl`` it is ignored.
* **A restart** reads the topic from the beginning and applies the records up to the stored
  offset (by binlog file and position), their ``tableChanges`` rather than their text; records
  beyond it are DDL the stream reads again, and are not written twice.
* **A missing or empty topic** with stored offsets fails the task, naming the topic:
  ``snapshot.mode=recovery`` rebuilds it from the tables' current shapes (right only when no DDL
  ran since the stored offset, as in Debezium).
* ``schema.history.internal=io.debezium.relational.history.MemorySchemaHistory`` keeps the
  history in the task only (tests, experiments): after a restart tables are described from
  ``information_schema`` when the stream meets them, as before the schema history existed.

The producer and consumer are the connector's own clients: ``bootstrap.servers`` from
``schema.history.internal.kafka.bootstrap.servers`` and the ``schema.history.internal.producer.*``
/ ``.consumer.*`` settings, never the worker's credentials (the precedent of the Kafka signal
channel, :mod:`sluice.connectors.cdc.signals`).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple, Protocol

import orjson

from sluice.connectors.api import ConfigError, RetriableError
from sluice.connectors.cdc.filters import CollectionFilter
from sluice.connectors.source.binlog_cdc.config import MEMORY_HISTORY
from sluice.connectors.source.binlog_cdc.ddl import DdlError, SchemaModel, Statement, UnknownTable
from sluice.connectors.source.binlog_cdc.ddl_syntax import tokenize
from sluice.connectors.source.binlog_cdc.shapes import (
    TableChange,
    TableId,
    TableShape,
    describe_shape,
    parse_id,
    quoted_id,
    shape_from_document,
    table_document,
)

log = logging.getLogger(__name__)

#: How long a history write or read may wait on the brokers.
KAFKA_TIMEOUT_S = 30.0


class HistorySettings(Protocol):
    """What the schema history reads of the connector's configuration."""

    topic_prefix: str
    schema_history_internal: str
    schema_history_internal_kafka_topic: str
    schema_history_internal_kafka_bootstrap_servers: str
    schema_history_internal_producer: dict[str, str]
    schema_history_internal_consumer: dict[str, str]
    schema_history_internal_store_only_captured_tables_ddl: bool
    schema_history_internal_store_only_captured_databases_ddl: bool
    schema_history_internal_skip_unparseable_ddl: bool


# -- where records are kept ---------------------------------------------------------------------------------


class HistoryStore(Protocol):
    def exists(self) -> bool: ...
    def read(self) -> Iterator[dict[str, Any]]: ...
    def append(self, records: list[dict[str, Any]]) -> None: ...
    def close(self) -> None: ...


class MemoryHistoryStore:
    """The records in the task's memory only (``MemorySchemaHistory``)."""

    durable = False

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def exists(self) -> bool:
        return bool(self.records)

    def read(self) -> Iterator[dict[str, Any]]:
        yield from self.records

    def append(self, records: list[dict[str, Any]]) -> None:
        self.records.extend(records)

    def close(self) -> None:
        pass


class KafkaHistoryStore:
    """One partition of ``schema.history.internal.kafka.topic``; created (one partition, unlimited
    retention) when first written. Thread: the task thread."""

    durable = True

    def __init__(self, settings: HistorySettings) -> None:
        self.topic = settings.schema_history_internal_kafka_topic
        self.common = {"bootstrap.servers": settings.schema_history_internal_kafka_bootstrap_servers}
        self.producer_settings: dict[str, Any] = {
            **self.common,
            "enable.idempotence": True,
            **settings.schema_history_internal_producer,
        }
        self.consumer_settings = {
            **self.common,
            "group.id": f"{settings.topic_prefix}-schemahistory",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            **settings.schema_history_internal_consumer,
        }
        self._producer: Any = None

    def _metadata(self) -> Any:
        from confluent_kafka.admin import AdminClient  # the worker's client; loaded only when used

        admin = AdminClient({**self.common, **self.producer_settings})
        try:
            return admin, admin.list_topics(self.topic, timeout=KAFKA_TIMEOUT_S).topics.get(self.topic)
        except Exception as exc:  # librdkafka's errors are many; all mean "not reachable now"
            raise RetriableError(f"schema.history.internal.kafka.bootstrap.servers: cannot reach Kafka: {exc}") from exc

    def exists(self) -> bool:
        """Whether the topic exists and holds records."""
        from confluent_kafka import Consumer, TopicPartition  # the worker's client; loaded only when used

        _, meta = self._metadata()
        if meta is None or meta.error is not None or not meta.partitions:
            return False
        consumer = Consumer(self.consumer_settings)
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(self.topic, 0), timeout=KAFKA_TIMEOUT_S)
        finally:
            consumer.close()
        return bool(high > low)

    def read(self) -> Iterator[dict[str, Any]]:
        """Every record, oldest first, up to the end the topic had when reading started."""
        from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

        consumer = Consumer(self.consumer_settings)
        try:
            _, high = consumer.get_watermark_offsets(TopicPartition(self.topic, 0), timeout=KAFKA_TIMEOUT_S)
            consumer.assign([TopicPartition(self.topic, 0, OFFSET_BEGINNING)])
            deadline = time.monotonic() + KAFKA_TIMEOUT_S
            while high > 0:
                message = consumer.poll(0.5)
                if message is None:
                    if time.monotonic() > deadline:
                        raise RetriableError(f"schema.history.internal.kafka.topic: reading {self.topic} timed out")
                    continue
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        break
                    raise RetriableError(f"schema.history.internal.kafka.topic: reading {self.topic}: {error}")
                deadline = time.monotonic() + KAFKA_TIMEOUT_S
                payload = message.value()
                if payload:
                    yield orjson.loads(payload)
                if (message.offset() or 0) + 1 >= high:
                    break
        finally:
            consumer.close()

    def append(self, records: list[dict[str, Any]]) -> None:
        """Write and wait until the brokers have every record (raises :class:`RetriableError`)."""
        if self._producer is None:
            self._create_topic()
            from confluent_kafka import Producer

            self._producer = Producer(self.producer_settings)
        failures: list[str] = []

        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                failures.append(str(err))

        for record in records:
            self._producer.produce(self.topic, orjson.dumps(record), partition=0, on_delivery=delivered)
        if self._producer.flush(KAFKA_TIMEOUT_S) or failures:
            raise RetriableError(
                f"schema.history.internal.kafka.topic: writing to {self.topic} failed: {failures or 'timed out'}"
            )

    def _create_topic(self) -> None:
        from confluent_kafka.admin import NewTopic

        admin, meta = self._metadata()
        if meta is not None and meta.error is None:
            return
        spec = NewTopic(self.topic, num_partitions=1, config={"retention.ms": "-1", "retention.bytes": "-1"})
        for future in admin.create_topics([spec], operation_timeout=KAFKA_TIMEOUT_S).values():
            try:
                future.result()
            except Exception as exc:  # noqa: BLE001 - an existing topic (a race) is fine; others surface on produce
                log.debug("Creating %s: %s", self.topic, exc)

    def close(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            producer.flush(KAFKA_TIMEOUT_S)


def history_store(settings: HistorySettings) -> HistoryStore:
    if settings.schema_history_internal == MEMORY_HISTORY:
        return MemoryHistoryStore()
    return KafkaHistoryStore(settings)


# -- positions -------------------------------------------------------------------------------------------------

_FILE_NUMBER = re.compile(r"(\d+)$")


def position_key(offset: Mapping[str, Any]) -> tuple[int, int]:
    """An offset's place in the binlog: ``(the file's sequence number, the position)``."""
    m = _FILE_NUMBER.search(str(offset.get("file") or ""))
    return (int(m.group(1)) if m else 0, int(offset.get("pos") or 0))


# -- the history -------------------------------------------------------------------------------------------------


class Recorded(NamedTuple):
    """What one DDL did, per database: the schema change events' content."""

    database: str
    ddl: str
    changes: list[TableChange]


class SchemaHistory:
    """The table shapes in force at the stream's position, and the history that rebuilds them.

    ``table_filter`` is the captured tables' filter; ``cursor`` opens a cursor of the task's SQL
    connection. Thread: the task thread."""

    def __init__(
        self,
        settings: HistorySettings,
        table_filter: CollectionFilter,
        cursor: Callable[[], Any],
        store: HistoryStore | None = None,
    ) -> None:
        self.settings = settings
        self.filter = table_filter
        self.cursor = cursor
        self.store = store if store is not None else history_store(settings)
        self.model = SchemaModel()
        #: Records beyond the stored offset: DDL the stream reads again (``(position, ddl)``).
        self._ahead: set[tuple[tuple[int, int], str]] = set()
        self._server_known = False
        self._charsets: dict[str, str | None] = {}
        self.model.database_charset = self._database_charset

    @property
    def durable(self) -> bool:
        return bool(getattr(self.store, "durable", False))

    def shape(self, database: str, name: str) -> TableShape | None:
        return self.model.tables.get((database, name))

    def _database_charset(self, database: str) -> str | None:
        if database not in self._charsets:
            with self.cursor() as cur:
                cur.execute(
                    "SELECT DEFAULT_CHARACTER_SET_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s",
                    (database,),
                )
                row = cur.fetchone()
            self._charsets[database] = str(row[0]) if row and row[0] else None
        return self._charsets[database]

    def _know_server(self) -> None:
        """Whether the server is MariaDB, whose ``JSON`` the parser reads as ``LONGTEXT``."""
        if not self._server_known:
            with self.cursor() as cur:
                cur.execute("SELECT VERSION()")
                self.model.mariadb = "mariadb" in str(cur.fetchone()[0]).lower()
            self._server_known = True

    # -- start ---------------------------------------------------------------------------------------------

    def record_current(self, position: Mapping[str, Any], captured: list[TableId]) -> None:
        """Record the captured tables' current shapes at ``position`` (a first start, ``recovery``)."""
        self._know_server()
        records = []
        with self.cursor() as cur:
            for table in captured:
                shape = describe_shape(cur, *table)
                if shape is None:
                    continue
                self.model.put(shape)
                cur.execute(f"SHOW CREATE TABLE {_quote(table[0])}.{_quote(table[1])}")
                row = cur.fetchone()
                ddl = str(row[1]) if row else ""
                change = TableChange("CREATE", table, shape)
                records.append(self._document(position, table[0], ddl, [change], int(time.time() * 1000)))
        self.store.append(records)
        log.info("Schema history: recorded the shapes of %d captured tables", len(records))

    def recover(self, stored: Mapping[str, Any]) -> None:
        """Rebuild the model from the history up to the ``stored`` offset; raises
        :class:`ConfigError` when a durable history is missing or empty."""
        self._know_server()
        if not self.durable:
            log.info("schema.history.internal=%s: tables are described when the stream meets them", MEMORY_HISTORY)
            return
        topic = self.settings.schema_history_internal_kafka_topic
        if not self.store.exists():
            raise ConfigError(
                f"schema.history.internal.kafka.topic: the schema history topic {topic!r} is missing or empty, but "
                "the connector has stored offsets: the table shapes behind them are unknown. Set "
                "snapshot.mode=recovery to rebuild the history from the tables' current shapes (right only if no "
                "DDL ran since the stored offset), or reset the connector's offsets to start over.",
                key="schema.history.internal.kafka.topic",
            )
        until = position_key(stored)
        applied = 0
        for record in self.store.read():
            if (record.get("source") or {}).get("server") != self.settings.topic_prefix:
                continue
            where = position_key(record.get("position") or {})
            if where > until:
                self._ahead.add((where, str(record.get("ddl") or "")))
                continue
            self._replay(record)
            applied += 1
        log.info("Schema history: %d records applied from %s, %d tables known", applied, topic, len(self.model.tables))

    def _replay(self, record: Mapping[str, Any]) -> None:
        changes = record.get("tableChanges")
        if not changes:
            ddl = record.get("ddl")
            if ddl:
                try:
                    self.model.apply(str(ddl), record.get("databaseName"))
                except DdlError:
                    pass  # recorded because unparseable, with the re-described tables as changes
            return
        for change in changes:
            table = parse_id(str(change["id"]))
            if change.get("previousId"):
                self.model.drop(parse_id(str(change["previousId"])))
            if change.get("type") == "DROP":
                self.model.drop(table)
            elif change.get("table") is not None:
                self.model.put(shape_from_document(table, change["table"], mariadb=self.model.mariadb))

    # -- DDL in the stream -----------------------------------------------------------------------------------

    def apply_ddl(self, ddl: str, database: str | None, position: Mapping[str, Any], ts_ms: int) -> list[Recorded]:
        """One statement of the stream, ending at ``position``: the model follows it, the history
        records it; the captured tables' changes come back per database (for the events)."""
        self._know_server()
        try:
            statement = self.model.apply(ddl, database)
        except UnknownTable as exc:
            if not self.filter.captures(*exc.table):  # a table the model never held: recorded as it is
                self._store(ddl, database, position, ts_ms, Statement([], [], True))
                return []
            statement = self._redescribe(ddl, database, exc)
        except DdlError as exc:
            if self.settings.schema_history_internal_skip_unparseable_ddl:
                log.warning("Ignoring a DDL statement that cannot be parsed (%s): %s", exc, ddl)
                return []
            statement = self._redescribe(ddl, database, exc)
        if not statement.is_ddl:
            return []
        for name in statement.databases:  # created or altered: its default character set may differ now
            self._charsets.pop(name, None)
        return self._store(ddl, database, position, ts_ms, statement)

    def _redescribe(self, ddl: str, database: str | None, exc: DdlError) -> Statement:
        """The tables a statement names, described from ``information_schema`` now."""
        named = self._named_tables(ddl, database)
        log.warning(
            "Cannot follow a DDL statement (%s); re-describing %s from information_schema: %s",
            exc, ", ".join(f"{d}.{t}" for d, t in named) or "no captured table", ddl,
        )  # fmt: skip
        changes = []
        with self.cursor() as cur:
            for table in named:
                shape = describe_shape(cur, *table)
                if shape is not None:
                    kind = "ALTER" if table in self.model.tables else "CREATE"
                    self.model.put(shape)
                    changes.append(TableChange(kind, table, shape))
                elif table in self.model.tables:
                    changes.append(TableChange("DROP", table, None))
                    self.model.drop(table)
        return Statement(changes, [], True)

    def _named_tables(self, ddl: str, database: str | None) -> list[TableId]:
        """The tables a statement names where table names go (after ``TABLE``, ``TO``, ``LIKE``,
        ``ON``, ``EXISTS`` or a list's comma), qualified or in ``database``, that the model holds
        or the filter captures."""
        try:
            names = [t.text for t in tokenize(ddl) if t.kind in ("word", "id", "op")]
        except DdlError:
            names = [quoted or word for quoted, word in re.findall(r"`((?:[^`]|``)+)`|(\w+|[.,])", ddl)]
        found: list[TableId] = []
        for i, name in enumerate(names):
            if i == 0 or names[i - 1].upper() not in _BEFORE_TABLE_NAMES or name in (".", ","):
                continue
            qualified = i + 2 < len(names) and names[i + 1] == "."
            db, table_name = (name, names[i + 2]) if qualified else (database, name)
            if not db:
                continue
            table = (db, table_name)
            if table not in found and (table in self.model.tables or self.filter.captures(*table)):
                found.append(table)
        return found

    def _store(
        self, ddl: str, database: str | None, position: Mapping[str, Any], ts_ms: int, statement: Statement
    ) -> list[Recorded]:
        by_database: dict[str, list[TableChange]] = {}
        for change in statement.changes:
            by_database.setdefault(change.id[0], []).append(change)
        for name in statement.databases:
            by_database.setdefault(name, [])
        if not by_database and database:
            by_database[database] = []
        s = self.settings
        recorded = []
        records = []
        for db, changes in by_database.items():
            if self.filter.system(db):
                continue
            captured_db = self.filter.captures_namespace(db)
            captured = [c for c in changes if self._captured(c)]
            if s.schema_history_internal_store_only_captured_databases_ddl and not captured_db:
                continue
            if s.schema_history_internal_store_only_captured_tables_ddl and changes and not captured:
                continue
            records.append(self._document(position, db, ddl, changes, ts_ms))
            if captured or (captured_db and db in statement.databases):
                recorded.append(Recorded(db, ddl, captured))
        if records and (position_key(position), ddl) not in self._ahead:
            self.store.append(records)
        return recorded

    def _captured(self, change: TableChange) -> bool:
        return self.filter.captures(*change.id) or (
            change.previous is not None and self.filter.captures(*change.previous)
        )

    def _document(
        self, position: Mapping[str, Any], database: str, ddl: str, changes: list[TableChange], ts_ms: int
    ) -> dict[str, Any]:
        table_changes = []
        for c in changes:
            doc: dict[str, Any] = {"type": c.kind, "id": quoted_id(c.id)}
            if c.previous is not None:
                doc["previousId"] = quoted_id(c.previous)
            if c.shape is not None:
                doc["table"] = table_document(c.shape)
                doc["comment"] = c.shape.comment
            table_changes.append(doc)
        return {
            "source": {"server": self.settings.topic_prefix},
            "position": dict(position),
            "ts_ms": ts_ms,
            "databaseName": database,
            "ddl": ddl,
            "tableChanges": table_changes,
        }

    def close(self) -> None:
        self.store.close()


#: Words after which a statement names a table.
_BEFORE_TABLE_NAMES = frozenset({"TABLE", "TABLES", "TO", "LIKE", "ON", "EXISTS", ","})


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"
