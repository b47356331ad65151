"""MySQL/MariaDB column types → Debezium's schemas, and the binlog reader's values → Debezium's."""

from __future__ import annotations

import datetime as dt
import decimal

import pytest

from sluice.connectors.api import Type
from sluice.connectors.source.binlog_cdc.types import ColumnInfo, TypeModes, allowed_values, column_type, float32

DEFAULT = TypeModes()


def _type(data_type: str, column_type_: str | None = None, modes: TypeModes = DEFAULT, **info: object):  # type: ignore[no-untyped-def]
    ctype = column_type(ColumnInfo("c", data_type, column_type_ or data_type, True, **info), modes)  # type: ignore[arg-type]
    assert ctype is not None
    return ctype


def _convert(ctype, value):  # type: ignore[no-untyped-def]
    return value if ctype.convert is None else ctype.convert(value)


@pytest.mark.parametrize(
    ("data_type", "column_type_", "kind"),
    [
        ("tinyint", "tinyint(4)", Type.INT16),
        ("tinyint", "tinyint(3) unsigned", Type.INT16),
        ("tinyint", "tinyint(1)", Type.INT16),  # BOOLEAN as the server stores it
        ("smallint", "smallint(6)", Type.INT16),
        ("smallint", "smallint(5) unsigned", Type.INT32),
        ("mediumint", "mediumint(8) unsigned", Type.INT32),
        ("int", "int(11)", Type.INT32),
        ("int", "int(10) unsigned", Type.INT64),
        ("bigint", "bigint(20)", Type.INT64),
        ("bigint", "bigint(20) unsigned", Type.INT64),
        ("float", "float", Type.FLOAT32),
        ("float", "float(7,3)", Type.FLOAT64),
        ("double", "double", Type.FLOAT64),
        ("varchar", "varchar(20)", Type.STRING),
        ("longtext", "longtext", Type.STRING),
        ("varbinary", "varbinary(8)", Type.BYTES),
    ],
)
def test_integer_float_string_and_binary_schemas(data_type: str, column_type_: str, kind: Type) -> None:
    schema = _type(data_type, column_type_).schema
    assert schema.type is kind and schema.name is None


def test_unsigned_bigint_wraps_as_a_long_or_stays_precise() -> None:
    assert _convert(_type("bigint", "bigint(20) unsigned"), 2**64 - 1) == -1
    assert _convert(_type("bigint", "bigint(20) unsigned"), 2**63 - 1) == 2**63 - 1
    precise = _type("bigint", "bigint(20) unsigned", TypeModes(bigint_unsigned_handling_mode="precise"))
    assert precise.schema.name == "org.apache.kafka.connect.data.Decimal"
    assert precise.schema.parameters == {"scale": "0", "connect.decimal.precision": "20"}
    assert _convert(precise, 2**64 - 1) == decimal.Decimal(2**64 - 1)


def test_float_is_the_shortest_decimal_of_its_32_bits() -> None:
    assert float32(0.10000000149011612) == 0.1
    assert float32(3.4028234663852886e38) == 3.4028235e38
    assert float32(0.0) == 0.0 and float32(-1.5) == -1.5


def test_decimal_in_each_handling_mode() -> None:
    precise = _type("decimal", "decimal(10,3)", precision=10, scale=3)
    assert precise.schema.parameters == {"scale": "3", "connect.decimal.precision": "10"}
    assert _convert(precise, decimal.Decimal("-1.500")) == decimal.Decimal("-1.500")
    as_double = _type("decimal", "decimal(10,3)", TypeModes(decimal_handling_mode="double"), precision=10, scale=3)
    assert as_double.schema.type is Type.FLOAT64 and _convert(as_double, decimal.Decimal("1.25")) == 1.25
    as_string = _type("decimal", "decimal(30,10)", TypeModes(decimal_handling_mode="string"), precision=30, scale=10)
    assert _convert(as_string, decimal.Decimal("1E+3")) == "1000"


def test_temporal_types_adaptive_time_microseconds() -> None:
    date = _type("date")
    assert date.schema.name == "io.debezium.time.Date" and _convert(date, dt.date(1969, 12, 31)) == -1
    time = _type("time", datetime_precision=6)
    assert time.schema.name == "io.debezium.time.MicroTime"
    assert _convert(time, dt.timedelta(hours=-838, minutes=-59, seconds=-59)) == -3020399000000
    assert _convert(time, dt.timedelta(hours=12, microseconds=5)) == 43200000005
    # A negative TIME with a fraction, as mysql-replication hands it over: -00:00:00.000001 as -0.999999 s.
    assert _convert(time, dt.timedelta(microseconds=-999_999)) == -1
    assert _convert(time, -dt.timedelta(hours=12, minutes=34, seconds=57) + dt.timedelta(microseconds=789_012)) == (
        -45_296_789_012
    )
    ms = _type("datetime", datetime_precision=3)
    assert ms.schema.name == "io.debezium.time.Timestamp"
    assert _convert(ms, dt.datetime(1970, 1, 1, 0, 0, 1, 999999)) == 1999
    us = _type("datetime", datetime_precision=6)
    assert us.schema.name == "io.debezium.time.MicroTimestamp"
    assert _convert(us, dt.datetime(1969, 12, 31, 23, 59, 59, 999999)) == -1
    zoned = _type("timestamp", datetime_precision=0)
    assert zoned.schema.name == "io.debezium.time.ZonedTimestamp"
    assert _convert(zoned, dt.datetime(2038, 1, 19, 3, 14, 7)) == "2038-01-19T03:14:07Z"
    assert _convert(_type("timestamp", datetime_precision=3), dt.datetime(2024, 3, 1, 10, 11, 12, 500000)) == (
        "2024-03-01T10:11:12.500Z"
    )
    year = _type("year")
    assert year.schema.name == "io.debezium.time.Year" and year.schema.type is Type.INT32


def test_temporal_types_connect_mode() -> None:
    connect = TypeModes(time_precision_mode="connect")
    assert _type("date", modes=connect).schema.name == "org.apache.kafka.connect.data.Date"
    assert _convert(_type("time", modes=connect), dt.timedelta(hours=1, microseconds=1500)) == dt.time(1, 0, 0, 1500)
    # Outside a day: null, as Debezium writes it (checked by tests/integration/test_debezium_parity.py).
    assert _convert(_type("time", modes=connect), dt.timedelta(hours=-1)) is None
    assert _convert(_type("time", modes=connect), dt.timedelta(hours=24)) is None
    stamp = _type("datetime", modes=connect)
    assert stamp.schema.name == "org.apache.kafka.connect.data.Timestamp"
    assert _convert(stamp, dt.datetime(2024, 1, 1)) == dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def test_enum_set_json_and_bits() -> None:
    assert allowed_values("enum('a','it''s','c,d')") == ("a", "it's", "c,d")
    enum = _type("enum", "enum('small','large')")
    assert enum.schema.name == "io.debezium.data.Enum" and enum.schema.parameters == {"allowed": "small,large"}
    members = _type("set", "set('a','b','c')")
    assert members.schema.name == "io.debezium.data.EnumSet"
    assert _convert(members, {"c", "a"}) == "a,c"
    json = _type("longtext", "longtext", json=True)  # MariaDB's JSON: Debezium's MariaDB connector writes a STRING
    assert json.schema.name is None and _convert(json, '{"a": 1}') == '{"a": 1}'
    assert _type("json").schema.name == "io.debezium.data.Json"
    assert _convert(_type("json"), {b"a": [1, b"x"]}) == '{"a": [1, "x"]}'  # MySQL's binary JSON, decoded
    bit1 = _type("bit", "bit(1)", precision=1)
    assert bit1.schema.type is Type.BOOLEAN and _convert(bit1, "1") is True and _convert(bit1, "0") is False
    bits = _type("bit", "bit(12)", precision=12)
    assert bits.schema.name == "io.debezium.data.Bits" and bits.schema.parameters == {"length": "12"}
    assert _convert(bits, "100000000001") == b"\x01\x08" and _convert(bits, "000000000000") == b"\x00\x00"


def test_binary_padding_and_handling_modes() -> None:
    fixed = _type("binary", "binary(4)", length=4)
    assert _convert(fixed, b"\x01") == b"\x01\x00\x00\x00"
    hexed = _type("binary", "binary(2)", TypeModes(binary_handling_mode="hex"), length=2)
    assert hexed.schema.type is Type.STRING and _convert(hexed, b"\xff") == "ff00"
    b64 = _type("blob", "blob", TypeModes(binary_handling_mode="base64"))
    assert _convert(b64, b"\xfb\xff") == "+/8="
    url = _type("blob", "blob", TypeModes(binary_handling_mode="base64-url-safe"))
    assert _convert(url, b"\xfb\xff") == "-_8="


def test_unsupported_types_are_not_captured() -> None:
    assert column_type(ColumnInfo("g", "geometry", "geometry", True), DEFAULT) is None
