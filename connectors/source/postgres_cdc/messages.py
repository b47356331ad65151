"""Logical decoding messages (``pg_logical_emit_message``) as Debezium message events.

pgoutput sends a message (type ``M``) when ``START_REPLICATION`` asks for ``messages``: a
transactional one when its transaction commits, between that transaction's changes; a
non-transactional one as soon as it is written, outside any transaction. Debezium turns each into
an event on ``<topic.prefix>.message`` with op ``m``: key ``{"prefix"}``
(``io.debezium.connector.postgresql.MessageKey``), value ``{op, ts_ms, source, message: {prefix,
content}}`` (``io.debezium.connector.postgresql.MessageValue``), the content rendered per
``binary.handling.mode``, the ``source`` block naming no schema or table (empty strings), and a
non-transactional message carrying no ``txId``. ``message.prefix.include.list`` /
``message.prefix.exclude.list`` (regular expressions matching the whole prefix) choose which are
emitted. The snapshot's own watermark messages are never emitted.

These events are rare, so they are built here in Python and appended to the decoder's records,
after anything the native encoder serialized (which goes out first, in its own batch).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sluice.connectors.api import Schema, SourceRecord, Type
from sluice.connectors.cdc.envelope import TRANSACTION_BLOCK_SCHEMA
from sluice.connectors.cdc.snapshot import WATERMARK_PREFIX
from sluice.connectors.source.postgres_cdc.source_block import CONNECTOR, VERSION
from sluice.connectors.source.postgres_cdc.tables import SOURCE_SCHEMA

if TYPE_CHECKING:
    from sluice.connectors.source.postgres_cdc.config import PostgresCdcConfig
    from sluice.connectors.source.postgres_cdc.decoder import ChangeDecoder

MessageHook = Callable[[str, bytes, int], None]

MESSAGE_KEY_SCHEMA = Schema.struct(
    [("prefix", Schema(Type.STRING, optional=True))], name="io.debezium.connector.postgresql.MessageKey", version=1
)


def message_value_schema(binary_mode: str) -> Schema:
    """Debezium's ``MessageValue`` schema; ``content`` is bytes, or a string for the text encodings."""
    content = Schema(Type.BYTES if binary_mode == "bytes" else Type.STRING, optional=True)
    block = Schema.struct(
        [("prefix", Schema(Type.STRING, optional=True)), ("content", content)],
        name="io.debezium.connector.postgresql.Message",
        version=1,
    )
    return Schema.struct(
        [
            ("op", Schema(Type.STRING)),
            ("ts_ms", Schema(Type.INT64, optional=True)),
            ("source", SOURCE_SCHEMA),
            ("transaction", TRANSACTION_BLOCK_SCHEMA),  # always null: Debezium's schema has it
            ("message", block),
        ],
        name="io.debezium.connector.postgresql.MessageValue",
        version=1,
    )


def render_content(content: bytes, binary_mode: str) -> Any:
    """The message content as ``binary.handling.mode`` renders bytes."""
    if binary_mode == "base64":
        return base64.b64encode(content).decode()
    if binary_mode == "base64-url-safe":
        return base64.urlsafe_b64encode(content).decode()
    if binary_mode == "hex":
        return content.hex()
    return content


class MessageEvents:
    """The decoder's ``on_message`` hook: hands every message to the snapshot (its watermarks), then
    turns the chosen ones into message events. Thread: the task thread (from ``ChangeDecoder.handle``)."""

    def __init__(self, config: PostgresCdcConfig, decoder: ChangeDecoder, watermarks: MessageHook) -> None:
        self.decoder = decoder
        self.watermarks = watermarks
        self.topic = f"{config.topic_prefix}.message"
        self.binary_mode = config.binary_handling_mode
        self.schema = message_value_schema(self.binary_mode)
        self.include = [re.compile(p) for p in config.message_prefix_include_list]
        self.exclude = [re.compile(p) for p in config.message_prefix_exclude_list]

    def wants(self, prefix: str) -> bool:
        """Whether a message with this prefix becomes an event (the include list wins when both are set)."""
        if prefix == WATERMARK_PREFIX:
            return False
        if self.include:
            return any(p.fullmatch(prefix) for p in self.include)
        return not any(p.fullmatch(prefix) for p in self.exclude)

    def __call__(self, prefix: str, content: bytes, lsn: int) -> None:
        self.watermarks(prefix, content, lsn)
        if not self.wants(prefix):
            return
        decoder = self.decoder
        transactional = bool(decoder.message_flags & 1)
        if transactional:
            if decoder.replayed(lsn):  # replayed after a restart: delivered before
                return
            position = (decoder.final_lsn, lsn)
        else:
            if lsn <= decoder.position[1]:
                return
            position = (decoder.position[0], lsn)
        self._append(prefix, content, lsn, transactional, position)

    def _append(self, prefix: str, content: bytes, lsn: int, transactional: bool, position: tuple[int, int]) -> None:
        decoder = self.decoder
        if decoder.encoded:  # serialized records first, in their own batch
            decoder.outbox.append(decoder.take_encoded())
        decoder.position = position
        ts_ms, _, _ = decoder.now
        commit_us = decoder.commit_us if transactional else ts_ms * 1000
        source = {
            "version": VERSION,
            "connector": CONNECTOR,
            "name": decoder.prefix,
            "ts_ms": commit_us // 1000,
            "snapshot": "false",
            "db": decoder.database,
            "sequence": f'["{decoder.sequence_lsn}","{lsn}"]',
            "ts_us": commit_us,
            "ts_ns": commit_us * 1000,
            "schema": "",
            "table": "",
            "txId": decoder.xid if transactional else None,
            "lsn": lsn,
            "xmin": None,
            "origin": None,
            "origin_lsn": None,
        }
        value = {
            "op": "m",
            "ts_ms": ts_ms,
            "source": source,
            "message": {"prefix": prefix, "content": render_content(bytes(content), self.binary_mode)},
            "transaction": None,
        }
        decoder.message_type = "MESSAGE"
        decoder.records.append(
            SourceRecord(
                self.topic,
                value,
                self.schema,
                {"prefix": prefix},
                MESSAGE_KEY_SCHEMA,
                source_partition=decoder.partition,
                source_offset=decoder.batch_offset,
            )
        )


def message_hook(config: PostgresCdcConfig, decoder: ChangeDecoder, watermarks: MessageHook) -> MessageHook:
    """The decoder's ``on_message``: the snapshot's watermark handling, plus message events."""
    return MessageEvents(config, decoder, watermarks)
