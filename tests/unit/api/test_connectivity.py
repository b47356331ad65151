"""Connectivity failures come back as fixed categories: the far side's words never do."""

from __future__ import annotations

import socket
import ssl
import traceback

import httpx
import psycopg
import pymysql

from sluice.connectors.api.connectivity import (
    ConnectFailure,
    ConnectivityError,
    FailureKind,
    classify_network_error,
    connectivity_message,
    error_code,
    host_port,
    http_status_failure,
)
from sluice.connectors.jdbc_common.connect_failures import Blame, classify_database_error
from sluice.connectors.sink.elasticsearch.client import node_address, transport_failure
from sluice.worker.status import format_trace

MARKER = "SECRET-MARKER-7f3a"


def _raised_from(outer: BaseException, inner: BaseException) -> BaseException:
    try:
        try:
            raise inner
        except BaseException as exc:
            raise outer from exc
    except BaseException as caught:  # noqa: BLE001 - returns whatever was raised
        return caught


def test_network_errors_map_to_their_category_through_the_chain() -> None:
    cases = {
        ConnectionRefusedError(111, "Connection refused"): "connection refused",
        TimeoutError("timed out"): "timed out",
        socket.gaierror(-2, "Name or service not known"): "host not found",
        ssl.SSLCertVerificationError(1, "certificate verify failed"): "TLS failure",
        ConnectionResetError(104, "reset"): "unreachable",
    }
    for inner, text in cases.items():
        found = classify_network_error(_raised_from(RuntimeError(MARKER), inner))
        assert found is not None and found.describe() == text
    assert classify_network_error(ValueError(MARKER)) is None


def test_http_statuses_keep_only_the_code() -> None:
    assert http_status_failure(401).describe() == "authentication failed (HTTP 401)"
    assert http_status_failure(403).describe() == "authentication failed (HTTP 403)"
    assert http_status_failure(500).describe() == "HTTP 500"
    assert (
        ConnectFailure(FailureKind.WRONG_SERVICE, service="Elasticsearch").describe() == "not an Elasticsearch server"
    )
    assert ConnectFailure(FailureKind.WRONG_SERVICE, service="MySQL").describe() == "not a MySQL server"


def test_error_codes_are_repeated_only_when_they_look_like_codes() -> None:
    assert error_code("SQLSTATE", "53300") == "SQLSTATE 53300"
    assert error_code("SQLSTATE", f"x {MARKER}") is None
    assert error_code("MySQL", 1040) == "MySQL 1040"


def test_the_message_names_key_target_and_category() -> None:
    failure = ConnectFailure(FailureKind.REFUSED)
    assert connectivity_message("connection.url", host_port("db", 5432), failure) == (
        "connection.url: cannot connect to db:5432: connection refused"
    )
    assert host_port("::1", 9200) == "[::1]:9200"
    assert node_address("https://user:pw@es.example:9243/x") == "es.example:9243"
    assert node_address("http://es.example") == "es.example:80"


def test_postgres_driver_texts_become_categories() -> None:
    def pg(text: str) -> str:
        found = classify_database_error(psycopg.OperationalError(text), "postgresql")
        return found.failure.describe()

    assert pg('connection to server at "127.0.0.1", port 1 failed: Connection refused') == "connection refused"
    assert pg("connection timeout expired") == "timed out"
    assert (
        pg(f"server closed the connection unexpectedly {MARKER}\nSSL SYSCALL error: reset") == "not a PostgreSQL server"
    )
    assert pg(f"received invalid response to SSL negotiation: {MARKER}") == "not a PostgreSQL server"
    assert pg('could not translate host name "nohost" to address') == "host not found"
    assert pg("SSL error: certificate verify failed") == "TLS failure"
    refused = classify_database_error(
        psycopg.OperationalError('FATAL: password authentication failed for user "u"'), "postgresql"
    )
    assert refused.failure.describe() == "authentication failed" and refused.blame is Blame.PASSWORD
    missing = classify_database_error(psycopg.OperationalError('FATAL: database "nope" does not exist'), "postgresql")
    assert missing.failure.describe() == "database not found" and missing.blame is Blame.DATABASE


def test_mysql_driver_errors_become_categories() -> None:
    def my(error: BaseException) -> str:
        return classify_database_error(error, "mysql").failure.describe()

    assert (
        my(pymysql.err.InternalError(f"Packet sequence number wrong - got 82 expected 0 {MARKER}"))
        == "not a MySQL server"
    )
    assert my(
        _raised_from(pymysql.err.OperationalError(2003, "Can't connect"), ConnectionRefusedError(111, "refused"))
    ) == ("connection refused")
    assert (
        my(_raised_from(pymysql.err.OperationalError(2013, "Lost connection (timed out)"), TimeoutError()))
        == "timed out"
    )
    assert (
        my(pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query")) == "not a MySQL server"
    )
    assert my(pymysql.err.OperationalError(1045, f"Access denied for user {MARKER}")) == "authentication failed"
    assert my(pymysql.err.OperationalError(1040, f"Too many connections {MARKER}")) == "server error (MySQL 1040)"
    assert my(struct_error()) == "not a MySQL server"


def struct_error() -> BaseException:
    import struct

    try:
        struct.unpack("<I", b"\x00")
    except struct.error as exc:
        return exc
    raise AssertionError("unreachable")


def test_httpx_transport_errors_become_categories() -> None:
    assert transport_failure(httpx.RemoteProtocolError(f"illegal status line: {MARKER}")).describe() == (
        "not an Elasticsearch server"
    )
    assert transport_failure(httpx.ReadTimeout("timed out")).describe() == "timed out"
    refused = _raised_from(httpx.ConnectError("[Errno 111] Connection refused"), ConnectionRefusedError(111, "x"))
    assert isinstance(refused, httpx.ConnectError)
    assert transport_failure(refused).describe() == "connection refused"


def test_a_status_trace_stops_at_the_categorised_error() -> None:
    inner = _raised_from(
        ConnectivityError("connection.url", "h:1", ConnectFailure(FailureKind.REFUSED)), ValueError(MARKER)
    )
    outer = _raised_from(RuntimeError("task failed"), inner)
    trace = format_trace(outer)
    assert "connection.url: cannot connect to h:1: connection refused" in trace
    assert "task failed" in trace
    assert MARKER not in trace
    # Nothing else of the chain is cut: an ordinary error shows its causes as before.
    plain = _raised_from(RuntimeError("outer"), ValueError("inner cause"))
    assert format_trace(plain) == "".join(traceback.format_exception(plain)).rstrip()
