"""Object formats: round trips, determinism, schemas and names (no services)."""

from __future__ import annotations

import datetime as dt
import decimal
import gzip
import io
from collections.abc import Sequence
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sluice.connectors.api import (
    INT64_SCHEMA,
    OPTIONAL_STRING_SCHEMA,
    STRING_SCHEMA,
    ConfigError,
    DataError,
    Date,
    Decimal,
    Schema,
    SchemaAndValue,
    Timestamp,
    Type,
)
from sluice.connectors.s3_common.formats import (
    FormatSettings,
    arrow_schema,
    avro_schema,
    make_format,
    short_format_name,
)
from sluice.connectors.s3_common.storage import MemoryStorage, ObjectUpload
from sluice.connectors.sink.s3.open_object import encode_headers
from sluice.converters.json import JsonConverter

ROWS = [{"id": i, "name": f"n{i}", "score": i / 4, "ok": i % 2 == 0} for i in range(20)]


def _encode(
    settings: FormatSettings, batches: Sequence[Sequence[Any]], schema: Schema | None = None, key: str = "k"
) -> bytes:
    fmt = make_format(settings)
    storage = MemoryStorage()
    upload = ObjectUpload(storage, key, 5 * 1024 * 1024)
    writer = fmt.writer(upload, key)
    for batch in batches:
        writer.write(batch, schema)
    writer.close()
    upload.commit()
    return storage.objects[key]


@pytest.mark.parametrize(
    ("name", "short"),
    [
        ("io.confluent.connect.s3.format.json.JsonFormat", "json"),
        ("io.confluent.connect.s3.format.parquet.ParquetFormat", "parquet"),
        ("io.confluent.connect.s3.format.avro.AvroFormat", "avro"),
        ("io.confluent.connect.s3.format.bytearray.ByteArrayFormat", "bytearray"),
        ("JsonFormat", "json"),
        ("parquet", "parquet"),
        ("bytes", "bytearray"),
    ],
)
def test_format_names(name: str, short: str) -> None:
    assert short_format_name(name) == short


def test_unknown_format_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="Unknown format"):
        short_format_name("CsvFormat")


@pytest.mark.parametrize(
    "settings",
    [
        FormatSettings("json"),
        FormatSettings("json", compression="gzip"),
        FormatSettings("parquet", parquet_codec="zstd", parquet_row_group_rows=7),
        FormatSettings("parquet", parquet_codec="snappy"),
        FormatSettings("avro", avro_codec="deflate"),
        FormatSettings("avro"),
    ],
    ids=lambda s: f"{s.format}-{s.compression}-{s.parquet_codec}-{s.avro_codec}",
)
def test_round_trip_is_exact_and_deterministic(settings: FormatSettings) -> None:
    batches = [ROWS[:5], ROWS[5:12], ROWS[12:]]
    data = _encode(settings, batches)
    assert list(make_format(settings).read(data)) == ROWS
    assert _encode(settings, batches) == data  # same values, same bytes: replays rewrite identical objects


def test_gzip_json_is_a_valid_gzip_stream_without_a_timestamp() -> None:
    data = _encode(FormatSettings("json", compression="gzip"), [ROWS])
    assert gzip.decompress(data).count(b"\n") == len(ROWS)
    assert data[4:8] == b"\x00\x00\x00\x00"  # MTIME field: zero, so output does not depend on the clock


@pytest.mark.parametrize("decimal_format", ["BASE64", "NUMERIC"])
def test_json_lines_encode_connect_types_like_the_json_converter(decimal_format: str) -> None:
    """Each line is what Connect's JsonConverter writes with ``schemas.enable=false`` and the
    sink's ``json.decimal.format`` as its ``decimal.format`` (Confluent's JsonFormat)."""
    schema = Schema.struct(
        [
            ("b", Schema(Type.BYTES)),
            ("d", Decimal.schema(2)),
            ("neg", Decimal.schema(0)),
            ("ts", Timestamp.SCHEMA),
            ("day", Date.SCHEMA),
        ]
    )
    row = {
        "b": b"\x00\x01",
        "d": decimal.Decimal("12.50"),
        "neg": decimal.Decimal("-128"),
        "ts": dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=dt.UTC),
        "day": dt.date(1970, 1, 3),
    }
    data = _encode(FormatSettings("json", json_decimal_format=decimal_format), [[row, "text", None, 5]])
    decimals = '"d":"BOI=","neg":"gA=="' if decimal_format == "BASE64" else '"d":12.50,"neg":-128'
    assert data == b'{"b":"AAE=",' + decimals.encode() + b',"ts":1000,"day":2}\n"text"\nnull\n5\n'
    converter = JsonConverter()
    converter.configure({"schemas.enable": "false", "decimal.format": decimal_format}, False)
    assert orjson.loads(data.splitlines()[0]) == orjson.loads(converter.from_connect_data("t", schema, row) or b"")


def test_bytearray_format_joins_raw_values_with_the_separator() -> None:
    settings = FormatSettings("bytearray", bytearray_separator=b"|")
    data = _encode(settings, [[b"a", "b", b"c\n"]])
    assert data == b"a|b|c\n|"
    assert list(make_format(settings).read(data)) == [b"a", b"b", b"c\n"]
    assert make_format(FormatSettings("bytearray", compression="gzip")).extension == ".bin.gz"
    with pytest.raises(DataError, match="bytes or string"):
        _encode(settings, [[{"a": 1}]])


def test_parquet_schema_comes_from_the_connect_schema_with_logical_types() -> None:
    schema = Schema.struct(
        [
            ("id", INT64_SCHEMA),
            ("name", OPTIONAL_STRING_SCHEMA),
            ("price", Decimal.schema(2)),
            ("day", Date.SCHEMA),
            ("at", Timestamp.SCHEMA),
            ("tags", Schema.array(STRING_SCHEMA)),
            ("attrs", Schema.map(STRING_SCHEMA, INT64_SCHEMA)),
        ]
    )
    expected = arrow_schema(schema)
    assert expected.field("price").type == pa.decimal128(38, 2)
    assert expected.field("at").type == pa.timestamp("ms", tz="UTC")
    assert not expected.field("id").nullable and expected.field("name").nullable
    row = {
        "id": 1,
        "name": None,
        "price": decimal.Decimal("9.99"),
        "day": dt.date(2024, 1, 2),
        "at": dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
        "tags": ["a"],
        "attrs": {"x": 1},
    }
    data = _encode(FormatSettings("parquet"), [[row]], schema)
    assert pq.read_table(io.BytesIO(data)).schema.field("price").type == pa.decimal128(38, 2)
    assert list(make_format(FormatSettings("parquet")).read(data)) == [row]


def test_parquet_rejects_non_struct_values_clearly() -> None:
    with pytest.raises(DataError, match="struct"):
        _encode(FormatSettings("parquet"), [["just text"]])
    with pytest.raises(DataError, match="struct"):
        arrow_schema(STRING_SCHEMA)


def test_avro_files_carry_the_schema_confluents_avro_data_makes() -> None:
    schema = Schema.struct(
        [
            ("id", INT64_SCHEMA),
            ("name", OPTIONAL_STRING_SCHEMA),
            ("at", Timestamp.SCHEMA),
            ("price", Decimal.schema(2)),
        ],
        name="my-db.acme.Order",
    )
    assert avro_schema(schema) == {
        "type": "record",
        "name": "Order",
        "namespace": "my_db.acme",  # Avro refuses '-' in names; connect.name keeps the original
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "name", "type": ["null", "string"], "default": None},
            {
                "name": "at",
                "type": {
                    "type": "long",
                    "connect.version": 1,
                    "connect.name": "org.apache.kafka.connect.data.Timestamp",
                    "logicalType": "timestamp-millis",
                },
            },
            {
                "name": "price",
                "type": {
                    "type": "bytes",
                    "scale": 2,
                    "precision": 64,
                    "connect.version": 1,
                    "connect.parameters": {"scale": "2"},
                    "connect.name": "org.apache.kafka.connect.data.Decimal",
                    "logicalType": "decimal",
                },
            },
        ],
        "connect.name": "my-db.acme.Order",
    }
    rows = [{"id": 1, "name": None, "at": dt.datetime(2024, 1, 1, tzinfo=dt.UTC), "price": decimal.Decimal("-3.10")}]
    data = _encode(FormatSettings("avro"), [rows], schema)
    assert list(make_format(FormatSettings("avro")).read(data)) == rows
    with pytest.raises(DataError, match="value.id: a str where the schema says int64"):
        _encode(FormatSettings("avro"), [[{**rows[0], "id": "1"}]], schema)


def test_avro_sync_marker_depends_on_the_key() -> None:
    a = _encode(FormatSettings("avro"), [ROWS], key="a")
    b = _encode(FormatSettings("avro"), [ROWS], key="b")
    assert a != b and list(make_format(FormatSettings("avro")).read(b)) == ROWS


def test_s3_errors_map_to_retriable_or_fatal_errors_naming_bucket_and_operation() -> None:
    from botocore.exceptions import ClientError, EndpointConnectionError

    from sluice.connectors.api import ConnectError, RetriableError
    from sluice.connectors.s3_common.storage import translate_error

    def client_error(code: str, status: int) -> ClientError:
        return ClientError(
            {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}, "op"
        )

    denied = translate_error(client_error("AccessDenied", 403), "PutObject", "bkt", "a/b")
    assert type(denied) is ConnectError and "PutObject of 'a/b' in bucket 'bkt'" in str(denied)
    missing = translate_error(client_error("404", 404), "HeadBucket", "bkt", "")
    assert type(missing) is ConnectError and "NoSuchBucket" in str(missing)
    assert isinstance(translate_error(client_error("SlowDown", 503), "UploadPart", "bkt", "k"), RetriableError)
    assert isinstance(translate_error(client_error("InternalError", 500), "PutObject", "bkt", "k"), RetriableError)
    assert isinstance(
        translate_error(EndpointConnectionError(endpoint_url="http://x"), "PutObject", "bkt", "k"), RetriableError
    )


def test_a_bare_403_to_head_bucket_is_blamed_on_whoever_the_listing_names(monkeypatch: Any) -> None:
    """HeadBucket refuses with a bodiless 403 whatever the cause; validate asks ListObjectsV2, whose
    error code says whether the credentials (aws.access.key.id) or the bucket (s3.bucket.name) failed."""
    from botocore.exceptions import ClientError

    from sluice.connectors.s3_common import storage

    def client_error(code: str, status: int) -> ClientError:
        return ClientError(
            {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "op"
        )

    class Refusing:
        def __init__(self, listing_code: str) -> None:
            self.listing_code = listing_code

        def head_bucket(self, **_: Any) -> None:
            raise client_error("403", 403)

        def list_objects_v2(self, **_: Any) -> None:
            raise client_error(self.listing_code, 403)

    conn = storage.S3Connection(bucket="bkt", endpoint_url="http://127.0.0.1:1")
    for code, key in (("SignatureDoesNotMatch", "aws.access.key.id"), ("InvalidAccessKeyId", "aws.access.key.id"),
                      ("AccessDenied", "s3.bucket.name")):  # fmt: skip
        monkeypatch.setattr(storage.S3Storage, "_new_client", staticmethod(lambda _conn, c=code: Refusing(c)))
        problems = storage.bucket_problems(conn, 1.0)
        assert list(problems) == [key] and code in problems[key]


def test_headers_with_a_schema_attached_by_a_transform_are_stored_as_their_values() -> None:
    """ExtractNewRecordState's ``add.headers`` on a sink gives header values with a schema: the
    headers sidecar stores the value, as for a plain header, and bytes still restore as bytes."""
    headers = [("__op", SchemaAndValue(OPTIONAL_STRING_SCHEMA, "c")), ("raw", b"\x01"), ("plain", "x")]
    assert encode_headers(headers) == [["__op", "c"], ["raw", {"$bytes": "AQ=="}], ["plain", "x"]]
