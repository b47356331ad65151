"""Logical decoding messages → Debezium message events, without a database."""

from __future__ import annotations

import base64
import struct
from typing import Any

import pytest

from sluice.connectors.api import Type
from sluice.connectors.cdc.snapshot import WATERMARK_PREFIX
from sluice.connectors.source.postgres_cdc.config import PostgresCdcConfig
from sluice.connectors.source.postgres_cdc.decoder import ChangeDecoder
from sluice.connectors.source.postgres_cdc.messages import MESSAGE_KEY_SCHEMA, message_hook, render_content
from sluice.connectors.source.postgres_cdc.types import INT4
from tests.unit.connectors.postgres_cdc import pgoutput_messages as pg
from tests.unit.connectors.postgres_cdc.test_decoder import T0, decoder, feed


def message(lsn: int, prefix: str, content: bytes, transactional: bool) -> bytes:
    body = struct.pack(">BQ", int(transactional), lsn) + prefix.encode() + b"\0" + struct.pack(">I", len(content))
    return pg.xlog(lsn, b"M" + body + content)


def wired(watermarks: list[tuple[str, bytes, int]] | None = None, **keys: str) -> ChangeDecoder:
    config = PostgresCdcConfig.parse({"database.dbname": "db", "topic.prefix": "srv", **keys})
    d = decoder()
    seen = watermarks if watermarks is not None else []
    d.on_message = message_hook(config, d, lambda *args: seen.append(args))
    return d


def test_transactional_and_non_transactional_messages() -> None:
    d = wired()
    records = feed(
        d,
        message(50, "audit", b"now", transactional=False),
        pg.relation(1, "public", "t", [("id", INT4, -1, True)]),
        pg.begin(100, T0, 7),
        pg.insert(80, 1, [b"1"]),
        message(90, "audit", b"\x00\xff", transactional=True),
        pg.commit(100, 110, T0),
    )
    now, row, tx = records
    assert [r.topic for r in records] == ["srv.message", "srv.public.t", "srv.message"]
    assert (tx.key, tx.key_schema) == ({"prefix": "audit"}, MESSAGE_KEY_SCHEMA)
    assert tx.value_schema.name == "io.debezium.connector.postgresql.MessageValue"
    assert [f.name for f in tx.value_schema.fields] == ["op", "ts_ms", "source", "transaction", "message"]
    assert tx.value["op"] == "m" and tx.value["message"] == {"prefix": "audit", "content": b"\x00\xff"}
    source = tx.value["source"]
    assert (source["txId"], source["lsn"], source["ts_us"], source["schema"], source["table"]) == (7, 90, T0, "", "")
    assert now.value["source"]["txId"] is None and now.value["message"]["content"] == b"now"
    assert row.value["source"]["txId"] == 7
    assert d.offset()["lsn_commit"] == 100


def test_prefix_lists_and_watermarks() -> None:
    seen: list[tuple[str, bytes, int]] = []
    d = wired(seen, **{"message.prefix.include.list": "keep.*,other"})
    records = feed(
        d,
        message(10, "keep-1", b"a", False),
        message(20, "drop", b"b", False),
        message(30, WATERMARK_PREFIX, b"L:x", False),
        message(40, "other", b"c", False),
    )
    assert [r.value["message"]["prefix"] for r in records] == ["keep-1", "other"]
    assert [s[0] for s in seen] == ["keep-1", "drop", WATERMARK_PREFIX, "other"]  # the snapshot sees every message
    excluded = wired(**{"message.prefix.exclude.list": "drop"})
    assert [r.value["message"]["prefix"] for r in feed(excluded, message(20, "drop", b"", False))] == []
    assert len(feed(excluded, message(21, "dropped", b"", False))) == 1  # the whole prefix must match


def test_replayed_messages_are_skipped() -> None:
    d = wired()
    d.resume_from(100, 95)
    records = feed(
        d,
        message(50, "early", b"", False),
        pg.begin(100, T0, 7),
        message(90, "delivered", b"", True),
        pg.commit(100, 110, T0),
        pg.begin(200, T0, 8),
        message(150, "new", b"", True),
        pg.commit(200, 210, T0),
        message(220, "late", b"", False),
    )
    assert [r.value["message"]["prefix"] for r in records] == ["new", "late"]


@pytest.mark.parametrize(
    ("mode", "expected", "kind"),
    [("bytes", b"\xfb\xff", Type.BYTES), ("base64", "+/8=", Type.STRING), ("base64-url-safe", "-_8=", Type.STRING),
     ("hex", "fbff", Type.STRING)],
)  # fmt: skip
def test_content_follows_binary_handling_mode(mode: str, expected: Any, kind: Type) -> None:
    assert render_content(b"\xfb\xff", mode) == expected
    d = wired(**{"binary.handling.mode": mode})
    (record,) = feed(d, message(10, "p", b"\xfb\xff", False))
    assert record.value["message"]["content"] == expected
    block = record.value_schema.field("message").schema
    assert block.field("content").schema.type is kind
    assert base64.b64decode(render_content(b"x", "base64")) == b"x"
