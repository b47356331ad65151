"""The JDBC sink task: writes each batch of records to database tables in one transaction.

Delivery: every chunk of records is written and committed in one transaction. On PostgreSQL the
last chunk of a :meth:`JdbcSinkTask.put` is sent as a whole transaction without waiting for the
server (:mod:`sluice.connectors.sink.jdbc.pgsend`), which works on it while the runtime consumes the
next batch and the next ``put`` renders its rows; that ``put`` (or ``flush``, ``pre_commit``)
then reads the outcome before sending anything else (and on failure writes the chunk again with
the full handling below), so :meth:`pre_commit` hands back only offsets of committed records:
every consumed offset, except for partitions with records whose write failed (those stop at the
first record that is not in the database). Replays after a crash rewrite the same rows: use
``insert.mode=upsert`` with a primary key for idempotent writes.

Pipelining: a batch of schemaless JSON values bound for a table the task has written to already
goes to a helper thread, which parses it into COPY data (Arrow, which releases the GIL), reads
the outcome of the chunk in flight and sends this one; ``put`` returns at once, so the runtime
consumes the next batch while the helper parses this one and the server commits the one before. Until the helper is done it alone uses the connection: every other entry point
(``put``, ``flush``, ``pre_commit``) waits for it first. A chunk the helper could not send (Arrow
reads it differently from the ordinary path, or the chunk before it failed) is written the
ordinary way by the next call. Should its values not convert then (the task takes them unchecked,
``value_format`` is raw JSON: malformed JSON, or a number that overflows a double), the task gives
the chunk back with :class:`UnusableRawValues`, so the runtime delivers it again decoded, record
by record under ``errors.*``.

Small batches: a batch the helper would take that is smaller than ``batch.size`` (Connect's
default polls are 500 records, its ``batch.size`` 3000) is held back, and consecutive ones of the
same topic and formats are joined (:meth:`SinkRecordBatch.concat`) until ``batch.size`` records
are held, a batch that cannot join them comes, or the consumer has caught up (the runtime's
empty ``put``, after a poll that came back short): one COPY transaction per ``batch.size``
records instead of one per poll, and nothing waits longer than the poll that finds no more
records. ``flush`` and ``pre_commit`` write what is held first, so offsets never pass a held record.

Failures: a dropped connection is retried ``max.retries`` times, ``retry.backoff.ms`` apart
(each attempt raises :class:`RetriableError` so the runtime offers the batch again); a row the
database rejects is located by replaying the batch row by row inside savepoints, then either
reported through the errant record reporter (and the other rows written) or raised as a
:class:`DataError` naming its topic, partition and offset. Nothing is skipped silently.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any, NoReturn

from sluice.connectors.api import (
    ConnectError,
    DataError,
    SinkRecordBatch,
    SinkTask,
    SinkTaskContext,
    TopicPartition,
    UnusableRawValues,
    UnwritableRecordError,
    ValueFormat,
)
from sluice.connectors.api.connectivity import host_port
from sluice.connectors.jdbc_common.connect_failures import JDBC_KEYS, open_categorised
from sluice.connectors.jdbc_common.connection import create_engine, safe_url, to_sqlalchemy_url
from sluice.connectors.jdbc_common.dialects import dialect_for
from sluice.connectors.jdbc_common.errors import Failure, classify, describe
from sluice.connectors.jdbc_common.types import timezone
from sluice.connectors.sink.jdbc import progress
from sluice.connectors.sink.jdbc.config import InsertMode, JdbcSinkConfig, PkMode
from sluice.connectors.sink.jdbc.json_path import Helper, HelperJob, JsonFastPath, PreparedChunk, undecoded_json
from sluice.connectors.sink.jdbc.pgsend import InFlight
from sluice.connectors.sink.jdbc.progress import HeldBatches, Rejected, RowRejected, Unwritten, WriteRetries
from sluice.connectors.sink.jdbc.rows import RowBuilder, TopicRecords, first_offsets, log_ignored_tombstones, segments
from sluice.connectors.sink.jdbc.tables import TableManager
from sluice.connectors.sink.jdbc.writer import PipelinedWriter, writer_for

log = logging.getLogger(__name__)


class JdbcSinkTask(SinkTask):
    """Writes records to tables named by ``table.name.format``.

    :meth:`start`, :meth:`put` and :meth:`pre_commit` run on the task thread; :meth:`stop` may come
    from a control thread and interrupts a retry backoff at once.
    """

    version = "0.1.0"
    # Batches of JSON (with or without schemas) or Avro may be written from their consumed bytes,
    # keys too (json_path.py, pgjson.py), which the fast path parses into Arrow columns, refusing
    # what the converter would; every other batch reads ``values`` and ``keys``, decoded on first read.
    value_format = ValueFormat.RAW_TYPED

    def __init__(self) -> None:
        self._stopping = threading.Event()
        self._config: JdbcSinkConfig | None = None
        self._engine: Any = None
        self._conn: Any = None
        self._retries = WriteRetries(0, 0, self._stopping, "")  # made by start()
        # Per partition, the first offset that a failed put() did not write; pre_commit stops there.
        self._unwritten = Unwritten()
        self._in_flight: tuple[InFlight, list[TopicRecords]] | None = None
        # The helper thread's work on the latest chunk (parse, settle the one in flight, send this one).
        self._job: HelperJob | None = None
        # A chunk whose sent transaction failed and whose retry has not succeeded yet.
        self._pending: list[TopicRecords] | None = None
        # Counts connection drops and cache resets: a chunk prepared before one is not sent.
        self._resets = 0
        self.tombstones_ignored = 0  # null values not applied (delete.enabled=false), each one logged
        self._json = JsonFastPath()
        # The writer's pipelined side (PostgreSQL): prepared chunks, sent without waiting.
        self._pipeline: PipelinedWriter | None = None
        # Batches held back to go to the helper as one chunk (put, _release), and their records.
        self._held = HeldBatches()
        self._helper_thread: Helper | None = None  # started on the first chunk it takes

    @property
    def records_written(self) -> int:
        """Records committed to the database."""
        return self._unwritten.written

    @property
    def records_from_json(self) -> int:
        """Records sent by the JSON fast path (pgjson.py); a failed send is rewritten the ordinary way."""
        return self._json.records

    @property
    def records_from_json_binary(self) -> int:
        """Of :attr:`records_from_json`, those sent as COPY binary data."""
        return self._json.records_binary

    # -- SPI -------------------------------------------------------------------------------------

    def start(self, config: Mapping[str, Any], context: SinkTaskContext) -> None:
        """Parse the configuration and prepare the engine (connections open on first use)."""
        self.context = context
        cfg: JdbcSinkConfig = JdbcSinkConfig.from_task_config(config)
        self._config = cfg
        self._stopping.clear()
        url = to_sqlalchemy_url(cfg.connection_url, cfg.connection_user, cfg.password)
        self._url_text = safe_url(url)
        self._target = host_port(url.host, url.port)
        self._retries = WriteRetries(cfg.max_retries, cfg.retry_backoff_ms, self._stopping, self._url_text)
        self._engine = create_engine(url, db_timezone=cfg.db_timezone, pool_size=1)
        backend = self._engine.dialect.name
        self._dialect = dialect_for(backend, self._engine.dialect.paramstyle)
        if cfg.insert_mode is InsertMode.UPSERT and not self._dialect.supports_upsert:
            raise ConnectError(f"insert.mode=upsert is not supported for {backend} databases")
        self._tz = timezone(cfg.db_timezone)
        self._builder = RowBuilder(cfg, backend, self._tz)
        self._tables = TableManager(self._dialect, auto_create=cfg.auto_create, auto_evolve=cfg.auto_evolve)
        self._writer = writer_for(self._dialect)
        self._pipeline = self._writer.pipelined()
        self._pending = None
        self._in_flight = None
        self._job = None
        self._held.clear()
        # The JSON fast path (json_path.py) applies to these settings; after a batch it could not
        # take, it waits a few batches before trying again (a topic it never fits costs little).
        self._json.enabled = (
            self._pipeline is not None
            and cfg.insert_mode in (InsertMode.INSERT, InsertMode.UPSERT)
            and cfg.pk_mode in (PkMode.NONE, PkMode.RECORD_VALUE, PkMode.RECORD_KEY)
            and not cfg.fields_whitelist
        )
        self._json.skip = 0
        log.info(
            "Writing to %s (%s, insert.mode=%s, pk.mode=%s)", self._url_text, backend, cfg.insert_mode, cfg.pk_mode
        )

    def put(self, records: SinkRecordBatch) -> None:
        """Write ``records`` in transactions of at most ``batch.size`` records, holding small
        batches for the fast path back until ``batch.size`` records or an empty ``put`` (the
        consumer caught up) come. Thread: the task thread."""
        cfg = self._require_config()
        if not records:  # the consumer caught up: what is held goes now, without waiting for it
            self._release()
            if self._job is not None and self._job.done():
                self._join()
            if self._job is None and self._pending is not None:  # a chunk failed in the background:
                self._give_back_unconvertible([])
                self._settle()  # written again now, so an outage shows while the topic is quiet
            return
        if not self._held.fits(records, cfg.batch_size):
            self._release()
        if len(records) < cfg.batch_size and self._pipelined([TopicRecords(records.topic, records)]):
            self._held.add(records)
            if self._held.full(cfg.batch_size):
                self._release()
            return
        self._release()
        self._join()
        groups = [TopicRecords(records.topic, records)]
        self._give_back_unconvertible(groups)
        size = cfg.batch_size
        chunks: list[list[TopicRecords]] = []
        if sum(len(g) for g in groups) <= size:
            chunks.append(groups)
        else:
            chunks += [[group.slice(start, start + size)] for group in groups for start in range(0, len(group), size)]
        if self._pending is not None and self._in_flight is None:
            self._settle()  # a chunk left unwritten goes first, the ordinary way (evolving the table, say)
        if len(chunks) == 1 and self._pipelined(groups):
            self._submit(groups)
            return
        # A single chunk is turned into COPY data while the previous one may still be in flight,
        # so the server's work on that one overlaps this Python work too.
        resets = self._resets
        prepared = self._prepare(chunks[0]) if len(chunks) == 1 else None
        self._settle()
        if resets != self._resets:  # the connection or the table cache changed meanwhile: start afresh
            prepared = None
        for chunk in chunks[:-1]:
            self._write_chunk(chunk)
        # Only the last chunk is sent without waiting: a RetriableError from an earlier one makes
        # the runtime offer all of ``records`` again, and none of them may be in flight then.
        if prepared is None and len(chunks) > 1:
            prepared = self._prepare(chunks[-1])
        if prepared is None or not self._send(prepared):
            self._write_chunk(chunks[-1])

    def flush(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Write what is held and wait for the chunk in flight (a failure is handled here). Thread: the task thread."""
        self._release()
        self._join()
        self._give_back_unconvertible([])
        self._settle()

    def pre_commit(self, offsets: Mapping[TopicPartition, int]) -> Mapping[TopicPartition, int]:
        """Everything consumed is committed, except past the first record a failed put() left out.
        A chunk that failed in the background is written again here; if that fails too, the
        :class:`RetriableError` goes to the runtime, which commits nothing and reports the outage
        (no put() may come to report it: the chunk may hold the last records consumed)."""
        self._release()
        self._join()
        self._give_back_unconvertible([])
        self._settle()
        return self._unwritten.safe(offsets)

    def stop(self) -> None:
        """Interrupt a retry backoff and close the connection. Thread: any; never raises."""
        self._stopping.set()
        self._held.clear()  # uncommitted: consumed again after a restart
        job = self._job
        if job is not None and not job.wait(_HELPER_STOP_WAIT_S):
            # Closing a connection the helper is using could free it under libpq's feet: leave it.
            log.warning(
                "The JSON helper is still busy after %.0f s; leaving its connection open", _HELPER_STOP_WAIT_S
            )
            self._conn = None
        helper, self._helper_thread = self._helper_thread, None
        if helper is not None:
            helper.close()
        self._in_flight = None  # uncommitted as far as offsets go; closing the connection ends it
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # a connection being used by the task thread may refuse
                log.debug("Closing the connection failed", exc_info=True)
        if self._engine is not None:
            try:
                self._engine.dispose()
            except Exception:
                log.debug("Disposing the engine failed", exc_info=True)

    # -- writing -----------------------------------------------------------------------------------

    def _settle(self) -> None:
        """Read the outcome of the chunk in flight; if it failed, write it again here, with full error handling."""
        self._collect()
        if self._pending is not None:
            try:
                self._write_chunk(self._pending)  # raises (keeping it pending) until it succeeds
            except (UnwritableRecordError, UnusableRawValues):
                raise  # it names its record (or raw values): the runtime handles that one
            except DataError as exc:
                # Not about the batch of this put(): the runtime must not look for the record there.
                raise ConnectError(f"Records written earlier were refused: {exc}") from exc
            self._pending = None

    def _collect(self) -> None:
        """Read the outcome of the chunk in flight: its records are written, or pending (to write again)."""
        if self._in_flight is None:
            return
        sent, chunk = self._in_flight
        self._in_flight = None
        try:
            sent.collect()
        except Exception as exc:  # noqa: BLE001 - the driver's error types vary; the chunk is written again
            log.debug("A sent chunk failed, writing it again: %s", describe(exc))
            self._unwritten.mark(chunk)
            self._resets += 1
            self._writer.reset()
            self._tables.invalidate()
            if classify(exc) is Failure.TRANSIENT:
                self._drop_connection()
            self._pending = chunk
        else:
            self._retries.in_a_row = 0
            self._unwritten.written_now(chunk)
            if not self._require_config().delete_enabled:  # tombstones the fast path left out
                self.tombstones_ignored += log_ignored_tombstones(self._json.tombstones_left_out(chunk))

    # -- the helper thread -------------------------------------------------------------------------

    def _pipelined(self, groups: list[TopicRecords]) -> bool:
        """Whether the helper takes this chunk: one topic of undecoded schemaless JSON, for a table
        whose column types are known, while the fast path is on and nothing waits to be rewritten."""
        if not self._json.enabled or self._json.skip or self._conn is None or self._pending is not None:
            return False
        if len(groups) != 1 or not undecoded_json(groups[0]):
            return False
        table = self._require_config().table_name(groups[0].topic)
        pipeline = self._pipeline
        return pipeline is not None and pipeline.column_types(table) is not None

    def _send_json(self, groups: list[TopicRecords], resets: int) -> bool:
        """Helper thread: parse the chunk, settle the one in flight, send this one; ``False`` if it
        was not sent (the task thread then writes it). The connection is the helper's meanwhile."""
        fast = self._json.try_prepare(groups[0], self._require_config(), self._require_pipeline(), self._tables)
        self._collect()  # the server had this long to commit the chunk before
        if fast is None or self._pending is not None or resets != self._resets or self._stopping.is_set():
            return False
        return self._send(PreparedChunk(groups, fast))

    def _release(self) -> None:
        """Hand the held batches, joined into one chunk, to the helper; if it cannot take them
        now, they are pending, written the ordinary way by :meth:`_settle` (as a chunk the
        helper did not send), so no failure loses them and ``pre_commit`` stops before them."""
        if not self._held:
            return
        self._join()
        if self._pending is not None:  # a chunk before them failed in the background: it goes first
            try:
                self._give_back_unconvertible([TopicRecords(b.topic, b) for b in self._held.batches])
            except UnusableRawValues:
                self._held.clear()  # given back with it: consumed again
                raise
            self._settle()  # raises while it fails, the held batches staying held
        batch = self._held.take()
        groups = [TopicRecords(batch.topic, batch)]
        if self._pipelined(groups):
            self._submit(groups)
        else:
            self._defer(groups)

    def _submit(self, groups: list[TopicRecords]) -> None:
        """Hand the chunk to the helper thread (started on first use)."""
        if self._helper_thread is None:
            self._helper_thread = Helper()
        self._job = self._helper_thread.submit(HelperJob(groups, self._send_json, self._resets))

    def _defer(self, groups: list[TopicRecords]) -> None:
        """Leave the chunk to write the ordinary way (pending), its offsets not committed meanwhile."""
        self._unwritten.mark(groups)
        self._pending = groups if self._pending is None else self._pending + groups

    def _join(self) -> None:
        """Wait for the helper; a chunk it did not send is left to write the ordinary way (pending)."""
        job, self._job = self._job, None
        if job is None:
            return
        if not job.result():
            self._defer(job.groups)

    def _give_back_unconvertible(self, groups: list[TopicRecords]) -> None:
        """If the pending chunk's raw values do not convert, drop it (and ``groups``, not taken)
        and raise :class:`UnusableRawValues` from its first records: the runtime delivers them
        again decoded, converting record by record under ``errors.*``."""
        pending = self._pending
        if pending is None or self._in_flight is not None:
            return
        for group in pending:
            batch = group.batch
            if batch is None or batch.raw_values is None:
                continue
            try:
                batch.values, batch.keys  # noqa: B018 - decodes the columns (raw keys come only with raw values)
            except UnusableRawValues as exc:
                self._pending = None
                self._json.sit_out()
                self._unwritten.mark(groups)
                raise UnusableRawValues(str(exc), first_offsets(pending + groups)) from exc

    def _prepare(self, groups: list[TopicRecords]) -> PreparedChunk | None:
        """The rows of ``groups`` ready to send as one transaction, if the writer and the records allow it.

        Only the plain case goes this way: one topic, one value schema, no tombstones, a table
        whose columns are known already. Everything else (and any surprise) returns ``None``
        and takes the ordinary path, which also produces the proper errors.
        """
        pipeline = self._pipeline
        if pipeline is None or len(groups) != 1 or self._conn is None:
            return None
        cfg = self._require_config()
        group = groups[0]
        upsert = cfg.insert_mode is InsertMode.UPSERT
        if self._json.enabled:
            fast = self._json.try_prepare(group, cfg, pipeline, self._tables)
            if fast is not None:
                return PreparedChunk(groups, fast)
        try:
            segs = segments(group, split_tombstones=not upsert)
            if len(segs) != 1 or segs[0].tombstones:
                return None
            rows = self._builder.build(group, segs[0], dedupe=cfg.insert_mode is not InsertMode.INSERT)
            if rows.deletes or rows.ignored or not len(rows):
                return None  # the ordinary path applies or reports the tombstones
            table = cfg.table_name(group.topic)
            names = self._tables.known(table, rows.columns)
            if names is None:
                return None
            statements = pipeline.prepare(table, names, names[: rows.key_count], rows, cfg.insert_mode)
        except Exception as exc:  # noqa: BLE001 - falls back to the ordinary path
            log.debug("Preparing a chunk to send failed, writing it the ordinary way: %s", describe(exc))
            return None
        return None if statements is None else PreparedChunk(groups, statements)

    def _send(self, prepared: PreparedChunk) -> bool:
        """Send a prepared chunk as one transaction without waiting; ``False`` if it did not go."""
        pipeline = self._require_pipeline()
        if self._conn is None:
            return False
        try:
            sent = pipeline.send(self._conn, prepared.statements)
        except Exception as exc:  # noqa: BLE001 - the connection may be mid-query: start afresh
            log.debug("Sending a chunk failed, writing it the ordinary way: %s", describe(exc))
            self._drop_connection()
            return False
        if sent is None:
            return False
        self._in_flight = (sent, prepared.groups)
        return True

    def _write_chunk(self, groups: list[TopicRecords]) -> None:
        try:
            self._transaction(groups, exclude=set())
        except Rejected as rejected:
            self._handle_rejected(groups, rejected.cause)
        except Exception as exc:  # noqa: BLE001 - _raise_for classifies the driver's error
            self._unwritten.mark(groups)
            self._raise_for(exc, groups)
        self._retries.in_a_row = 0
        self._unwritten.written_now(groups)

    def _transaction(
        self, groups: list[TopicRecords], exclude: set[tuple[int, int]], probe: bool = False
    ) -> list[RowRejected]:
        """Write every group in one transaction (``probe``: row by row, collecting rejected rows, then roll back)."""
        cfg = self._require_config()
        conn = self._connection()
        upsert = cfg.insert_mode is InsertMode.UPSERT
        rejected: list[RowRejected] = []
        ignored: dict[str, list[int]] = {}  # tombstones not applied, per topic (their offsets)
        trans = conn.begin()
        try:
            for gi, group in enumerate(groups):
                table = cfg.table_name(group.topic)
                for seg in segments(group, split_tombstones=not upsert):
                    rows = self._builder.build(group, seg, dedupe=cfg.insert_mode is not InsertMode.INSERT)
                    if exclude:
                        progress.drop_rejected(rows, gi, exclude)
                    if len(rows):
                        names = self._tables.ensure(conn, table, rows.columns)
                        keys = names[: rows.key_count]
                        if probe:
                            rejected += self._probe(conn, gi, table, names, keys, rows.rows, rows.row_records)
                        else:
                            self._writer.write(conn, table, names, keys, rows, cfg.insert_mode)
                    if rows.deletes:
                        self._delete(conn, table, rows)
                    if rows.ignored:
                        ignored.setdefault(group.topic, []).extend(group.offsets[i] for i in rows.ignored)
            if probe:
                trans.rollback()
            else:
                trans.commit()
                self.tombstones_ignored += log_ignored_tombstones(ignored)
        except BaseException as exc:
            self._rollback(trans)
            if not probe and isinstance(exc, Exception) and classify(exc) is Failure.ROW:
                raise Rejected(exc) from exc
            raise
        finally:
            if probe:
                self._resets += 1
                self._writer.reset()
            else:
                self._writer.end_transaction()
        return rejected

    def _delete(self, conn: Any, table: str, rows: Any) -> None:
        names = self._tables.ensure(conn, table, rows.delete_columns)
        self._writer.delete(conn, table, names, rows.deletes)

    def _probe(
        self, conn: Any, gi: int, table: str, names: list[str], keys: list[str], rows: list[Any], records: list[int]
    ) -> list[RowRejected]:
        cfg = self._require_config()
        rejected = []
        for row, rec in zip(rows, records):
            savepoint = conn.begin_nested()
            try:
                self._writer.write_one(conn, table, names, keys, row, cfg.insert_mode)
                savepoint.commit()
            except Exception as exc:
                savepoint.rollback()
                if classify(exc) is not Failure.ROW:
                    raise
                rejected.append(RowRejected(gi, rec, describe(exc)))
        return rejected

    def _handle_rejected(self, groups: list[TopicRecords], cause: BaseException) -> None:
        """The batch failed on data: find the rows, then report them or fail naming the first."""
        try:
            rejected = self._transaction(groups, exclude=set(), probe=True)
        except Exception as exc:  # noqa: BLE001 - _raise_for classifies the driver's error
            self._unwritten.mark(groups)
            self._raise_for(exc, groups)
        if not rejected:  # the batch failed as a whole but no single row does: a constraint across rows
            self._unwritten.mark(groups)
            raise DataError(f"The database rejected a batch of records: {describe(cause)}") from cause
        reporter = self.context.errant_record_reporter if self.context is not None else None
        if reporter is None:
            first = rejected[0]
            self._unwritten.mark(groups)
            raise UnwritableRecordError(
                f"The database rejected the record at {groups[first.group].coordinates(first.record)}: {first}",
                groups[first.group].record(first.record),
            ) from cause
        for r in rejected:
            group = groups[r.group]
            log.warning("The database rejected the record at %s: %s", group.coordinates(r.record), r)
            reporter.report(group.record(r.record), DataError(str(r)))
        try:
            self._transaction(groups, exclude={(r.group, r.record) for r in rejected})
        except Exception as exc:  # noqa: BLE001 - _raise_for classifies the driver's error
            self._unwritten.mark(groups)
            self._raise_for(exc, groups)

    def _raise_for(self, exc: Exception, groups: list[TopicRecords]) -> NoReturn:
        if isinstance(exc, ConnectError):
            raise exc
        if classify(exc) is Failure.TRANSIENT:
            self._drop_connection()
            self._retries.failed(exc)
        cfg = self._require_config()
        tables = ", ".join(sorted({cfg.table_name(g.topic) for g in groups}))
        raise ConnectError(f"Writing to table {tables} failed: {describe(exc)}") from exc

    # -- connection ----------------------------------------------------------------------------------

    def _connection(self) -> Any:
        if self._stopping.is_set():
            raise ConnectError("The JDBC sink task is stopping")
        if self._conn is None:
            self._conn = open_categorised(self._engine.connect, self._engine.dialect.name, self._target, JDBC_KEYS)
            self._resets += 1
            self._writer.reset()
            self._tables.invalidate()
        return self._conn

    def _drop_connection(self) -> None:
        self._in_flight = None
        self._resets += 1
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.invalidate()
                conn.close()
            except Exception:
                log.debug("Discarding a broken connection failed", exc_info=True)
        self._writer.reset()
        self._tables.invalidate()

    def _rollback(self, trans: Any) -> None:
        self._resets += 1
        self._tables.invalidate()
        self._writer.reset()
        try:
            if trans.is_active:
                trans.rollback()
        except Exception:
            log.debug("Rollback failed; discarding the connection", exc_info=True)
            self._drop_connection()

    def _require_config(self) -> JdbcSinkConfig:
        if self._config is None:
            raise ConnectError("The JDBC sink task is not started")
        return self._config

    def _require_pipeline(self) -> PipelinedWriter:
        """The pipelined writer, for a chunk that only such a writer prepared."""
        if self._pipeline is None:
            raise ConnectError("The JDBC sink task's writer cannot send a prepared chunk")
        return self._pipeline


_HELPER_STOP_WAIT_S = 10.0  # how long stop() waits for the helper before leaving its connection alone

