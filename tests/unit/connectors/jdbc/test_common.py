"""Connection URLs, SQL generation per dialect, type mapping and error classification."""

from __future__ import annotations

import datetime as dt
import decimal
import sqlite3

import pytest
from sqlalchemy import types as t
from sqlalchemy.dialects import postgresql

from sluice.connectors.api import (
    INT32_SCHEMA,
    INT64_SCHEMA,
    OPTIONAL_STRING_SCHEMA,
    ConfigError,
    Date,
    Decimal,
    Schema,
    Time,
    Timestamp,
    Type,
)
from sluice.connectors.jdbc_common.connection import to_sqlalchemy_url
from sluice.connectors.jdbc_common.dialects import Column, MySqlDialect, PostgresDialect, SqlDialect, SqliteDialect
from sluice.connectors.jdbc_common.errors import Failure, classify
from sluice.connectors.jdbc_common.types import NumericMapping, column_schema, value_adapter


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("jdbc:postgresql://db.example:5433/shop", "postgresql+psycopg://db.example:5433/shop"),
        (
            "jdbc:postgresql://h/shop?user=u&password=p&sslmode=require",
            "postgresql+psycopg://u:***@h/shop?sslmode=require",
        ),
        ("jdbc:mysql://h:3306/shop", "mysql+pymysql://h:3306/shop"),
        ("jdbc:mariadb://h/shop", "mysql+pymysql://h/shop"),
        ("jdbc:sqlite:/var/db/x.db", "sqlite:////var/db/x.db"),
        ("postgresql://u@h/db", "postgresql+psycopg://u@h/db"),
        ("postgresql+psycopg://u@h/db", "postgresql+psycopg://u@h/db"),
        ("sqlite:///rel.db", "sqlite:///rel.db"),
    ],
)
def test_connection_urls_in_jdbc_and_sqlalchemy_spelling(url: str, expected: str) -> None:
    assert to_sqlalchemy_url(url).render_as_string(hide_password=True) == expected


def test_connection_user_and_password_override_the_url() -> None:
    url = to_sqlalchemy_url("jdbc:postgresql://h/db?user=a&password=b", "alice", "s3cret")
    assert (url.username, url.password) == ("alice", "s3cret")


@pytest.mark.parametrize("url", ["", "jdbc:oracle:thin:@h:1521:x", "jdbc:postgresql:///nohost", "not a url ::"])
def test_bad_connection_urls_name_the_key(url: str) -> None:
    with pytest.raises(ConfigError) as info:
        to_sqlalchemy_url(url)
    assert info.value.key == "connection.url"


def test_upsert_statements_per_dialect() -> None:
    cols, keys = ["id", "name", "score"], ["id"]
    assert PostgresDialect().upsert("t", cols, keys) == (
        'INSERT INTO "t" ("id", "name", "score") VALUES (%s, %s, %s) '
        'ON CONFLICT ("id") DO UPDATE SET "name" = EXCLUDED."name", "score" = EXCLUDED."score"'
    )
    assert SqliteDialect().upsert("t", cols, keys) == (
        'INSERT INTO "t" ("id", "name", "score") VALUES (?, ?, ?) '
        'ON CONFLICT ("id") DO UPDATE SET "name" = excluded."name", "score" = excluded."score"'
    )
    assert MySqlDialect().upsert("t", cols, keys) == (
        "INSERT INTO `t` (`id`, `name`, `score`) VALUES (%s, %s, %s) "
        "ON DUPLICATE KEY UPDATE `name` = VALUES(`name`), `score` = VALUES(`score`)"
    )
    assert PostgresDialect().upsert("s.t", ["id"], ["id"]).endswith('ON CONFLICT ("id") DO NOTHING')
    with pytest.raises(ConfigError):
        SqlDialect().upsert("t", cols, keys)


def test_update_and_delete_statements() -> None:
    d = SqliteDialect()
    assert d.update("t", ["a", "b", "c"], ["a"]) == 'UPDATE "t" SET "b" = ?, "c" = ? WHERE "a" = ?'
    assert d.delete("t", ["a", "b"]) == 'DELETE FROM "t" WHERE "a" = ? AND "b" = ?'
    assert PostgresDialect().table('my"schema.tab') == '"my""schema"."tab"'


def test_create_table_maps_connect_types_per_dialect() -> None:
    columns = [
        Column("id", INT64_SCHEMA, True),
        Column("name", OPTIONAL_STRING_SCHEMA),
        Column("amount", Decimal.schema(2, optional=True, precision=10)),
        Column("day", Date.SCHEMA),
        Column("at", Timestamp.OPTIONAL_SCHEMA),
        Column("tags", Schema.array(Schema(Type.STRING), optional=True)),
        Column("n", INT32_SCHEMA.with_(default=7)),
    ]
    assert PostgresDialect().create_table("t", columns) == (
        'CREATE TABLE "t" (\n'
        '  "id" BIGINT NOT NULL,\n'
        '  "name" TEXT NULL,\n'
        '  "amount" NUMERIC(10,2) NULL,\n'
        '  "day" DATE NOT NULL,\n'
        '  "at" TIMESTAMP NULL,\n'
        '  "tags" TEXT[] NULL,\n'
        '  "n" INTEGER DEFAULT 7 NOT NULL,\n'
        '  PRIMARY KEY("id")\n'
        ")"
    )
    mysql = MySqlDialect()
    assert mysql.sql_type(Schema(Type.STRING), primary_key=True) == "VARCHAR(256)"
    assert mysql.sql_type(Timestamp.SCHEMA) == "DATETIME(3)"
    assert SqliteDialect().sql_type(Schema(Type.INT16)) == "INTEGER"
    assert SqliteDialect().add_column("t", Column("x", OPTIONAL_STRING_SCHEMA)) == 'ALTER TABLE "t" ADD "x" TEXT NULL'


@pytest.mark.parametrize(
    ("sa_type", "backend", "expected_type", "expected_name"),
    [
        (t.Integer(), "postgresql", Type.INT32, None),
        (t.Integer(), "sqlite", Type.INT64, None),
        (t.BigInteger(), "postgresql", Type.INT64, None),
        (t.SmallInteger(), "postgresql", Type.INT16, None),
        (t.REAL(), "postgresql", Type.FLOAT32, None),
        (postgresql.DOUBLE_PRECISION(), "postgresql", Type.FLOAT64, None),
        (t.Numeric(10, 2), "postgresql", Type.BYTES, Decimal.LOGICAL_NAME),
        (t.Boolean(), "postgresql", Type.BOOLEAN, None),
        (t.Text(), "postgresql", Type.STRING, None),
        (t.LargeBinary(), "postgresql", Type.BYTES, None),
        (postgresql.BYTEA(), "postgresql", Type.BYTES, None),
        (t.Date(), "postgresql", Type.INT32, Date.LOGICAL_NAME),
        (t.Time(), "postgresql", Type.INT32, Time.LOGICAL_NAME),
        (t.DateTime(timezone=True), "postgresql", Type.INT64, Timestamp.LOGICAL_NAME),
        (postgresql.JSONB(), "postgresql", Type.STRING, None),
        (postgresql.UUID(), "postgresql", Type.STRING, None),
        (postgresql.ARRAY(t.Integer()), "postgresql", Type.ARRAY, None),
        (postgresql.INTERVAL(), "postgresql", Type.STRING, None),
    ],
)
def test_column_types_map_to_connect_schemas(
    sa_type: object, backend: str, expected_type: Type, expected_name: str | None
) -> None:
    schema, _ = column_schema(sa_type, optional=True, numeric_mapping=NumericMapping.NONE, tz=dt.UTC, backend=backend)
    assert (schema.type, schema.name, schema.optional) == (expected_type, expected_name, True)


@pytest.mark.parametrize(
    ("mapping", "precision", "scale", "expected"),
    [
        (NumericMapping.BEST_FIT, 2, 0, Type.INT8),
        (NumericMapping.BEST_FIT, 4, 0, Type.INT16),
        (NumericMapping.BEST_FIT, 9, 0, Type.INT32),
        (NumericMapping.BEST_FIT, 18, 0, Type.INT64),
        (NumericMapping.BEST_FIT, 10, 2, Type.FLOAT64),
        (NumericMapping.BEST_FIT, 30, 2, Type.BYTES),
        (NumericMapping.PRECISION_ONLY, 10, 2, Type.BYTES),
        (NumericMapping.PRECISION_ONLY, 5, 0, Type.INT32),
        (NumericMapping.BEST_FIT_EAGER_DOUBLE, 30, 2, Type.FLOAT64),
        (NumericMapping.NONE, 5, 0, Type.BYTES),
        (NumericMapping.NONE, 30, 2, Type.BYTES),
        (NumericMapping.BEST_FIT, 5, -2, Type.INT32),
        (NumericMapping.PRECISION_ONLY, 5, -2, Type.BYTES),
        (NumericMapping.BEST_FIT_EAGER_DOUBLE, 5, 0, Type.INT32),
    ],
)
def test_numeric_mapping(mapping: NumericMapping, precision: int, scale: int, expected: Type) -> None:
    schema, convert = column_schema(t.Numeric(precision, scale), optional=False, numeric_mapping=mapping, tz=dt.UTC)
    assert schema.type is expected
    if expected in (Type.INT8, Type.INT16, Type.INT32, Type.INT64):
        assert convert is not None and convert(decimal.Decimal("12")) == 12


@pytest.mark.parametrize("mapping", [NumericMapping.NONE, NumericMapping.BEST_FIT, NumericMapping.PRECISION_ONLY])
def test_numeric_without_precision_stays_an_exact_decimal(mapping: NumericMapping) -> None:
    # PostgreSQL's unconstrained numeric: nothing to fit, so never a float (that would lose digits).
    schema, convert = column_schema(t.Numeric(), optional=True, numeric_mapping=mapping, tz=dt.UTC)
    assert schema.name == "org.apache.kafka.connect.data.Decimal" and schema.type is Type.BYTES
    assert schema.parameters == {"scale": "127"}  # no precision: a sink recreates an unconstrained NUMERIC
    assert convert is not None
    value = convert(decimal.Decimal("12345678901234567890.123456789012345678901"))
    assert value == decimal.Decimal("12345678901234567890.123456789012345678901")
    assert value.as_tuple().exponent == -127
    assert convert(None) is None


def test_numeric_without_precision_with_eager_double_is_float64() -> None:
    schema, convert = column_schema(
        t.Numeric(), optional=False, numeric_mapping=NumericMapping.BEST_FIT_EAGER_DOUBLE, tz=dt.UTC
    )
    assert schema.type is Type.FLOAT64 and convert is not None and convert(decimal.Decimal("1.5")) == 1.5


def test_json_columns_become_text_and_naive_timestamps_get_the_db_timezone() -> None:
    _, to_text = column_schema(postgresql.JSONB(), optional=True, numeric_mapping=NumericMapping.NONE, tz=dt.UTC)
    assert to_text is not None and to_text({"a": [1, 2]}) == '{"a":[1,2]}' and to_text(None) is None
    berlin = __import__("zoneinfo").ZoneInfo("Europe/Berlin")
    _, to_aware = column_schema(t.DateTime(), optional=False, numeric_mapping=NumericMapping.NONE, tz=berlin)
    assert to_aware is not None
    assert to_aware(dt.datetime(2024, 1, 1, 12)) == dt.datetime(2024, 1, 1, 11, tzinfo=dt.UTC)


def test_sink_adapters_make_timestamps_naive_and_nested_values_json() -> None:
    adapt = value_adapter(Timestamp.SCHEMA, "postgresql", dt.UTC)
    assert adapt is not None and adapt(
        dt.datetime(2024, 1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    ) == dt.datetime(2024, 1, 1)
    nested = value_adapter(Schema.map(Schema(Type.STRING), Schema(Type.INT32)), "postgresql", dt.UTC)
    assert nested is not None and nested({"a": 1}) == '{"a":1}'
    assert value_adapter(Schema.array(Schema(Type.INT32)), "postgresql", dt.UTC) is None  # a native array
    sqlite_decimal = value_adapter(Decimal.schema(2), "sqlite", dt.UTC)
    assert sqlite_decimal is not None and sqlite_decimal(decimal.Decimal("1.50")) == "1.50"
    assert value_adapter(INT64_SCHEMA, "postgresql", dt.UTC) is None


def test_errors_are_classified_by_their_pep249_names() -> None:
    assert classify(sqlite3.IntegrityError("UNIQUE constraint failed")) is Failure.ROW
    assert classify(sqlite3.OperationalError("database is locked")) is Failure.TRANSIENT
    assert classify(sqlite3.ProgrammingError("no such table")) is Failure.OTHER
    assert classify(ConnectionResetError()) is Failure.TRANSIENT
