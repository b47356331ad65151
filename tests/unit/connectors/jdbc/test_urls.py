"""Database URLs are parsed into allow-listed parts: what a driver would be given, what is refused."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from sluice.connectors.api import ConfigError
from sluice.connectors.backfill.jdbc_topic import jdbc_url
from sluice.connectors.backfill.pg_position import libpq_params
from sluice.connectors.jdbc_common.connection import create_engine, engine_connect_args, to_sqlalchemy_url
from sluice.connectors.jdbc_common.urls import NO_FILE, parse_connection_url
from sluice.connectors.sink.jdbc.config import JdbcSinkConfig
from sluice.connectors.sink.jdbc.connector import JdbcSinkConnector
from sluice.connectors.source.postgres_cdc.config import PostgresCdcConfig


@pytest.mark.parametrize(
    ("url", "backend", "host", "port", "database", "params"),
    [
        (
            "postgresql://u@db:5433/shop?sslmode=require&connect_timeout=5",
            "postgresql",
            "db",
            5433,
            "shop",
            {"sslmode": "require", "connect_timeout": "5"},
        ),
        (
            "postgresql+psycopg://u@db/shop?application_name=etl&keepalives_idle=30",
            "postgresql",
            "db",
            None,
            "shop",
            {"application_name": "etl", "keepalives_idle": "30"},
        ),
        (
            "jdbc:postgresql://db/shop?ApplicationName=etl&connectTimeout=3&user=u",
            "postgresql",
            "db",
            None,
            "shop",
            {"application_name": "etl", "connect_timeout": "3"},
        ),
        ("jdbc:postgresql://db/shop?ssl=false", "postgresql", "db", None, "shop", {"sslmode": "disable"}),
        (
            "postgresql://u@[::1]:5432/shop?sslmode=verify-full&sslrootcert=system",
            "postgresql",
            "::1",
            5432,
            "shop",
            {"sslmode": "verify-full", "sslrootcert": "system"},
        ),
        (
            "mysql+pymysql://u@db/shop?charset=utf8mb4&connect_timeout=4",
            "mysql",
            "db",
            None,
            "shop",
            {"charset": "utf8mb4", "connect_timeout": "4"},
        ),
        ("jdbc:mariadb://db:3307/shop?connectTimeout=2500", "mysql", "db", 3307, "shop", {"connect_timeout": "3"}),
        (
            "mariadb://u@db/shop?ssl_check_hostname=false&ssl_cipher=ECDHE-RSA-AES128-GCM-SHA256",
            "mysql",
            "db",
            None,
            "shop",
            {"ssl_check_hostname": "false", "ssl_cipher": "ECDHE-RSA-AES128-GCM-SHA256"},
        ),
        ("sqlite:///rel/x.db", "sqlite", None, None, "rel/x.db", {}),
        ("sqlite:////abs/x.db", "sqlite", None, None, "/abs/x.db", {}),
        ("sqlite://", "sqlite", None, None, ":memory:", {}),
        ("jdbc:sqlite:/abs/x.db", "sqlite", None, None, "/abs/x.db", {}),
        ("jdbc:sqlite::memory:", "sqlite", None, None, ":memory:", {}),
    ],
)
def test_allowed_urls_in_both_spellings(
    url: str, backend: str, host: str | None, port: int | None, database: str, params: dict[str, str]
) -> None:
    parsed = parse_connection_url(url)
    assert (parsed.backend, parsed.host, parsed.port, parsed.database, dict(parsed.params)) == (
        backend,
        host,
        port,
        database,
        params,
    )


@pytest.mark.parametrize(
    ("url", "named"),
    [
        # PyMySQL: the reproductions of issue #36, and their JDBC spellings
        ("mysql+pymysql://u@h/db?local_infile=1", "local_infile"),
        ("mysql://u@h/db?read_default_file=/etc/passwd", "read_default_file"),
        ("mysql://u@h/db?read_default_group=client", "read_default_group"),
        ("mysql://u@h/db?client_flag=128", "client_flag"),
        ("mysql://u@h/db?init_command=SELECT+1", "init_command"),
        ("mysql://u@h/db?unix_socket=/run/mysqld/mysqld.sock", "unix_socket"),
        ("jdbc:mysql://h/db?allowLoadLocalInfile=true", "allowLoadLocalInfile"),
        ("jdbc:mysql://h/db?autoDeserialize=true", "autoDeserialize"),
        # libpq
        ("postgresql://u@h/db?service=prod", "service"),
        ("postgresql://u@h/db?servicefile=/etc/pg_service.conf", "servicefile"),
        ("postgresql://u@h/db?options=-c+log_statement%3Dall", "options"),
        ("postgresql://u@h/db?host=/var/run/postgresql", "host"),
        ("postgresql://u@h/db?sslkeylogfile=/tmp/keys", "sslkeylogfile"),
        ("postgresql://u@h/db?sslpassword=x", "sslpassword"),
        ("postgresql://u@h/db?krbsrvname=x", "krbsrvname"),
        (
            "jdbc:postgresql://h/db?socketFactory=org.springframework.context.support.ClassPathXmlApplicationContext",
            "socketFactory",
        ),
        ("jdbc:postgresql://h/db?loggerFile=/tmp/x", "loggerFile"),
        # SQLite URI filenames
        ("sqlite:///x.db?mode=rwc", "mode"),
        ("sqlite:///x.db?uri=true", "uri"),
        ("jdbc:sqlite:x.db?vfs=unix-dotfile", "vfs"),
    ],
)
def test_refused_parameters_name_the_key_and_the_parameter(url: str, named: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_connection_url(url)
    assert info.value.key == "connection.url"
    assert f"'{named}'" in str(info.value)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+psycopg2://u@h/db",  # another driver: its parameters are not allow-listed
        "mysql+mysqldb://u@h/db",
        "postgresql:///db",  # no host: libpq's Unix socket (peer authentication as the worker's user)
        "postgresql://u@%2Fvar%2Frun%2Fpostgresql/db",
        "postgresql://h1,h2/db",
        "postgresql://u@h/db?sslmode=verify-full",  # would read ~/.postgresql/root.crt
        "postgresql://u@h/db?sslmode=bogus",
        "postgresql://u@h/db?connect_timeout=5s",
        "postgresql://u@h/host=evil%20passfile=x",  # a dbname libpq could expand into a conninfo
        "postgresql://u@h/db?sslmode=require&sslmode=disable",
        "jdbc:sqlite:file:/tmp/x.db",
        "sqlite:///file:x.db",
        "jdbc:oracle:thin:@h:1521:x",
        "",
    ],
)
def test_malformed_or_unsafe_urls_are_refused(url: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_connection_url(url)
    assert info.value.key == "connection.url"


def test_files_a_url_names_are_reported_for_confinement() -> None:
    assert parse_connection_url("sqlite:///data/x.db").files() == ("data/x.db",)
    assert parse_connection_url("sqlite://").files() == ()
    pg = "postgresql://u@h/db?sslmode=verify-ca&sslrootcert=/d/ca.pem&sslcert=/d/c.pem&sslkey=/d/k.pem&passfile=/d/pw"
    assert set(parse_connection_url(pg).files()) == {"/d/ca.pem", "/d/c.pem", "/d/k.pem", "/d/pw"}
    assert parse_connection_url("postgresql://u@h/db?sslmode=verify-full&sslrootcert=system").files() == ()
    assert set(parse_connection_url("mysql://u@h/db?ssl_ca=/d/ca.pem&ssl_key=/d/k.pem").files()) == {
        "/d/ca.pem",
        "/d/k.pem",
    }
    with pytest.raises(ConfigError, match="name a local file"):
        parse_connection_url(pg, key="source.connection.url", allow_files=False)


def test_jdbc_configs_report_url_files_under_connection_url() -> None:
    base = {"topics": "t"}
    sqlite = JdbcSinkConfig.parse({**base, "connection.url": "jdbc:sqlite:/srv/data/x.db"})
    assert sqlite.local_paths() == {"connection.url": ("/srv/data/x.db",)}
    memory = JdbcSinkConfig.parse({**base, "connection.url": "jdbc:sqlite::memory:"})
    assert memory.local_paths() == {}


def test_connector_validate_refuses_before_any_connection() -> None:
    with pytest.raises(ConfigError) as info:
        JdbcSinkConnector.validate({"topics": "t", "connection.url": "mysql+pymysql://u@127.0.0.1:1/db?local_infile=1"})
    assert info.value.key == "connection.url"


def test_engines_never_read_default_credential_files_nor_allow_local_infile() -> None:
    pg = engine_connect_args(to_sqlalchemy_url("postgresql://u@h/db?sslcert=/d/c.pem&sslkey=/d/k.pem"))
    assert pg == {"passfile": NO_FILE, "sslrootcert": NO_FILE, "sslcrl": NO_FILE}
    assert engine_connect_args(to_sqlalchemy_url("mysql://u@h/db")) == {"local_infile": False}
    # A URL that did not come through the parser is checked all the same.
    from sqlalchemy.engine import make_url

    with pytest.raises(ConfigError, match="local_infile"):
        create_engine(make_url("mysql+pymysql://u@h/db?local_infile=1"))
    with pytest.raises(ConfigError, match="unsupported driver"):
        create_engine(make_url("postgresql+psycopg2://u@h/db"))


def test_sqlite_sql_cannot_open_other_files(tmp_path: Path) -> None:
    engine = create_engine(to_sqlalchemy_url(f"sqlite:///{tmp_path / 'x.db'}"))
    try:
        with engine.connect() as conn:
            for sql in (f"ATTACH DATABASE '{tmp_path / 'evil.db'}' AS evil", f"VACUUM INTO '{tmp_path / 'evil2.db'}'"):
                with pytest.raises(Exception, match="not authorized|authorization denied|cannot VACUUM"):
                    conn.exec_driver_sql(sql)
                conn.rollback()
        raw = sqlite3.connect(tmp_path / "x.db")
        raw.close()
    finally:
        engine.dispose()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.db"]


def test_backfill_urls_are_rebuilt_not_passed_to_spark() -> None:
    assert jdbc_url("jdbc:postgresql://db:5432/shop?sslmode=require&ApplicationName=bf&user=u") == (
        "jdbc:postgresql://db:5432/shop?sslmode=require&ApplicationName=bf"
    )
    assert jdbc_url("mysql://u@db/shop") == (
        "jdbc:mysql://db/shop?allowLoadLocalInfile=false&allowUrlInLocalInfile=false&autoDeserialize=false"
    )
    for bad in ("jdbc:postgresql://db/shop?socketFactory=x", "jdbc:sqlite:/x.db", "jdbc:postgresql://db/s?sslkey=/k"):
        with pytest.raises(ConfigError) as info:
            jdbc_url(bad)
        assert info.value.key == "source.connection.url"
    params = libpq_params(to_sqlalchemy_url("jdbc:postgresql://db/shop?sslmode=require&user=u"))
    assert params["passfile"] == NO_FILE and params["sslmode"] == "require" and params["user"] == "u"


def test_cdc_connections_never_read_default_credential_files() -> None:
    base = {"database.hostname": "db", "database.dbname": "shop", "topic.prefix": "p"}
    info = PostgresCdcConfig.parse(base).conninfo(replication=True)
    assert {info[k] for k in ("passfile", "sslcert", "sslkey", "sslrootcert", "sslcrl")} == {NO_FILE}
    verified = PostgresCdcConfig.parse(
        {**base, "database.sslmode": "verify-full", "database.sslrootcert": "/d/ca.pem", "database.sslcert": "/d/c.pem"}
    )
    assert verified.conninfo()["sslrootcert"] == "/d/ca.pem" and verified.conninfo()["sslkey"] == NO_FILE
    assert verified.local_paths() == {"database.sslrootcert": "/d/ca.pem", "database.sslcert": "/d/c.pem"}
    system = PostgresCdcConfig.parse({**base, "database.sslmode": "verify-full", "database.sslrootcert": "system"})
    assert system.local_paths() == {}
    for bad in (
        {"database.hostname": "/var/run/postgresql"},
        {"database.hostname": "a,b"},
        {"database.dbname": "host=evil"},
        {"database.sslmode": "verify-ca"},
        {"database.sslmode": "sometimes"},
    ):
        with pytest.raises(ConfigError):
            PostgresCdcConfig.parse({**base, **bad})
