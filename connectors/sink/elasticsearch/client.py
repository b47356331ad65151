"""The HTTP side of the sink: ``_bulk`` and a handful of index calls, over httpx.

Elasticsearch 7/8/9 and OpenSearch 1/2/3 share the document, index and ``_bulk`` APIs the sink
uses, so a plain HTTP client serves both and no vendor client pins a server version.

Several ``connection.url`` values are used round robin; a request that cannot reach its node
(connection refused, reset, timeout) moves to the next URL, so a node going away costs one retry.
Each sending lane has its own :class:`httpx.Client` (connection pool), so lanes never wait on each
other for a connection.
"""

from __future__ import annotations

import gzip
import itertools
import logging
import re
import ssl
import threading
import urllib.parse
from typing import Any

import httpx
import orjson

from sluice.connectors.api import ConfigError
from sluice.connectors.api.connectivity import (
    ConnectFailure,
    FailureKind,
    classify_network_error,
    host_port,
    http_status_failure,
)
from sluice.connectors.sink.elasticsearch.config import ElasticsearchSinkConfig, SecurityProtocol

log = logging.getLogger(__name__)

_ERROR_TYPE = re.compile(r"[a-z_]{1,80}")

#: What a port that is not a search cluster is "not" (OpenSearch answers the same API).
SERVICE = "Elasticsearch"

#: Failures worth retrying: the node is unreachable, overloaded or restarting.
RETRIABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})


class _HttpError(Exception):
    """A failed request; ``failure`` is its category when it is about reaching the cluster (the
    message then holds the category, never what the far side answered)."""

    def __init__(self, message: str, failure: ConnectFailure | None = None) -> None:
        super().__init__(message)
        self.failure = failure


class TransientHttpError(_HttpError):
    """A request failed in a way a retry may fix (connection, timeout, 429, 5xx)."""


class FatalHttpError(_HttpError):
    """A request failed in a way a retry will not fix (authentication, a refused request)."""


def transport_failure(exc: httpx.TransportError) -> ConnectFailure:
    """The category of an httpx transport error. A port that answers something other than HTTP
    is "not an Elasticsearch server"; h11's own message would quote the bytes it got."""
    if isinstance(exc, httpx.TimeoutException):
        return ConnectFailure(FailureKind.TIMED_OUT)
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.LocalProtocolError, httpx.DecodingError)):
        return ConnectFailure(FailureKind.WRONG_SERVICE, service=SERVICE)
    if isinstance(exc, (httpx.ReadError, httpx.WriteError)):
        # The port accepted the connection, then dropped it instead of answering HTTP (a service
        # that speaks first and hangs up on what it does not understand).
        return ConnectFailure(FailureKind.WRONG_SERVICE, service=SERVICE)
    if "CERTIFICATE_VERIFY_FAILED" in str(exc):
        return ConnectFailure(FailureKind.TLS)
    return classify_network_error(exc) or ConnectFailure(FailureKind.UNREACHABLE)


def node_address(url: str) -> str:
    """``host:port`` of a ``connection.url`` entry, as the user wrote them (no credentials)."""
    split = urllib.parse.urlsplit(url)
    try:
        port = split.port
    except ValueError:
        port = None
    default = 443 if split.scheme == "https" else 80
    return host_port(split.hostname, port if port is not None else default)


def ssl_context(config: ElasticsearchSinkConfig) -> ssl.SSLContext | bool:
    """The TLS settings of ``elastic.https.*`` as an :class:`ssl.SSLContext` (or httpx's default)."""
    https = any(u.lower().startswith("https://") for u in config.connection_url)
    if config.elastic_security_protocol is not SecurityProtocol.SSL:
        return True if https else False
    if not config.elastic_https_ssl_verify:
        return False
    try:
        ctx = ssl.create_default_context(cafile=config.elastic_https_ssl_truststore_location)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"Cannot read the truststore {config.elastic_https_ssl_truststore_location}: {exc}",
            key="elastic.https.ssl.truststore.location",
        ) from None
    if config.elastic_https_ssl_endpoint_identification_algorithm.strip() == "":
        ctx.check_hostname = False
    if config.elastic_https_ssl_keystore_location:
        password = config.elastic_https_ssl_key_password or config.elastic_https_ssl_keystore_password
        try:
            ctx.load_cert_chain(
                config.elastic_https_ssl_keystore_location,
                keyfile=config.elastic_https_ssl_key_location,
                password=password.get_secret_value() if password is not None else None,
            )
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                f"Cannot load the client certificate {config.elastic_https_ssl_keystore_location}: {exc}",
                key="elastic.https.ssl.keystore.location",
            ) from None
    return ctx


#: The bulk endpoint, answering only what the sink reads: an item's full answer (index, id,
#: version, shards, sequence numbers) is about 180 bytes of JSON, and parsing that cost the sending
#: lanes about as much CPU per document as building the documents does.
BULK_PATH = "/_bulk?filter_path=errors,error,status,items.*.status,items.*.error"


class SearchClient:
    """Talks to the cluster at ``connection.url``. Thread-safe: each thread gets its own pool."""

    def __init__(self, config: ElasticsearchSinkConfig) -> None:
        self.urls = list(config.connection_url)
        self._next_url = itertools.count()
        self._compress = config.connection_compression
        self._timeout = httpx.Timeout(
            connect=config.connection_timeout_ms / 1000,
            read=config.read_timeout_ms / 1000,
            write=max(config.read_timeout_ms / 1000, 10.0),
            pool=10.0,
        )
        self._verify = ssl_context(config)
        self._auth = (
            httpx.BasicAuth(config.connection_username, config.connection_password.get_secret_value())
            if config.connection_username is not None and config.connection_password is not None
            else None
        )
        self._keepalive = config.max_connection_idle_time_ms / 1000
        self._local = threading.local()
        self._clients: list[httpx.Client] = []
        self._lock = threading.Lock()
        self._closed = False

    # -- plumbing ---------------------------------------------------------------------------------

    def _client(self) -> httpx.Client:
        client: httpx.Client | None = getattr(self._local, "client", None)
        if client is None:
            client = httpx.Client(
                timeout=self._timeout,
                verify=self._verify,
                auth=self._auth,
                limits=httpx.Limits(max_connections=4, max_keepalive_connections=2, keepalive_expiry=self._keepalive),
                headers={"Accept": "application/json"},
            )
            with self._lock:
                if self._closed:
                    client.close()
                    raise TransientHttpError("the client is closed")
                self._clients.append(client)
            self._local.client = client
        return client

    def request(
        self, method: str, path: str, *, body: bytes | None = None, content_type: str = "application/json"
    ) -> tuple[int, Any]:
        """``(status, parsed body)``; raises :class:`TransientHttpError` when no node could be
        reached or the answer is a retriable status, :class:`FatalHttpError` for 401/403."""
        url = self.urls[next(self._next_url) % len(self.urls)]
        headers = {"Content-Type": content_type} if body is not None else {}
        if body is not None and self._compress:
            body = gzip.compress(body, compresslevel=1)
            headers["Content-Encoding"] = "gzip"
        where = f"{method} {path} on {node_address(url)}"
        try:
            response = self._client().request(method, url + path, content=body, headers=headers)
        except httpx.TransportError as exc:
            # The category only, raised from nothing: httpx's text may quote what the port sent.
            failure = transport_failure(exc)
            log.debug("%s failed: %s: %s", where, type(exc).__name__, exc)
            if failure.kind is FailureKind.TLS:  # retrying cannot fix a certificate
                raise FatalHttpError(
                    f"{where}: {failure.describe()}; check elastic.https.ssl.truststore.location", failure
                ) from None
            raise TransientHttpError(f"{where}: {failure.describe()}", failure) from None
        status = response.status_code
        raw = response.content
        try:
            parsed = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            parsed = raw.decode(errors="replace")
        if status >= 400:
            log.debug("%s answered HTTP %d: %s", where, status, _reason(parsed))
        if status in RETRIABLE_STATUS:
            raise TransientHttpError(f"{where}: HTTP {status}", http_status_failure(status))
        if status in (401, 403) and not _is_cluster_block(parsed):
            failure = http_status_failure(status)
            raise FatalHttpError(f"{where}: {failure.describe()} (check connection.username/password)", failure)
        if status == 403:  # a read-only block (disk flood stage) lifts by itself
            raise TransientHttpError(f"{where}: HTTP 403 (cluster_block_exception)", http_status_failure(status))
        return status, parsed

    def close(self) -> None:
        """Close every pool (in-flight requests fail with a transport error). Thread: any."""
        with self._lock:
            self._closed = True
            clients, self._clients = self._clients, []
        for client in clients:
            try:
                client.close()
            except Exception:  # closing from another thread may race a request; it fails anyway
                log.debug("Closing an HTTP client failed", exc_info=True)

    # -- API ----------------------------------------------------------------------------------------

    def bulk(self, body: bytes) -> dict[str, Any]:
        """Send one ``_bulk`` request; the parsed response (``items`` in request order, each with
        its ``status`` and ``error`` only)."""
        status, parsed = self.request("POST", BULK_PATH, body=body, content_type="application/x-ndjson")
        if status == 413:
            raise FatalHttpError(
                f"the bulk request of {len(body)} bytes is too large for the server; lower bulk.size.bytes"
            )
        if status != 200 or not isinstance(parsed, dict) or "items" not in parsed:
            raise _refused("_bulk", status, parsed)
        return parsed

    def index_exists(self, index: str) -> bool:
        status, _ = self.request("HEAD", f"/{_quote(index)}")
        return status == 200

    def create_index(self, index: str, mappings: dict[str, Any] | None) -> None:
        """Create ``index`` (with ``mappings``); an index created meanwhile by another task is fine."""
        body = orjson.dumps({"mappings": mappings} if mappings else {})
        status, parsed = self.request("PUT", f"/{_quote(index)}", body=body)
        if status == 200 or _error_type(parsed) == "resource_already_exists_exception":
            return
        raise _refused(f"creating index {index!r}", status, parsed)

    def mapping_is_empty(self, index: str) -> bool:
        status, parsed = self.request("GET", f"/{_quote(index)}/_mapping")
        if status != 200 or not isinstance(parsed, dict):
            return False
        for entry in parsed.values():
            if isinstance(entry, dict) and entry.get("mappings", {}).get("properties"):
                return False
        return True

    def put_mapping(self, index: str, mappings: dict[str, Any]) -> None:
        status, parsed = self.request("PUT", f"/{_quote(index)}/_mapping", body=orjson.dumps(mappings))
        if status != 200:
            raise _refused(f"putting the mapping of {index!r}", status, parsed)

    def data_stream_exists(self, name: str) -> bool:
        status, _ = self.request("GET", f"/_data_stream/{_quote(name)}")
        return status == 200

    def create_data_stream(self, name: str, mappings: dict[str, Any] | None) -> None:
        """Create data stream ``name``, adding an index template for it when the cluster has none
        (Elasticsearch ships templates for ``logs-*-*``/``metrics-*-*``; OpenSearch does not)."""
        status, parsed = self.request("PUT", f"/_data_stream/{_quote(name)}")
        if status == 200 or _error_type(parsed) == "resource_already_exists_exception":
            return
        template: dict[str, Any] = {"index_patterns": [name], "data_stream": {}, "priority": 200}
        if mappings:
            template["template"] = {"mappings": mappings}
        t_status, t_parsed = self.request("PUT", f"/_index_template/sluice-{_quote(name)}", body=orjson.dumps(template))
        if t_status != 200:
            log.warning("Creating data stream %r failed: %s", name, _reason(parsed))
            raise _refused(
                f"creating data stream {name!r} ({_error_label(parsed)}) and adding an index template for it",
                t_status,
                t_parsed,
            )
        status, parsed = self.request("PUT", f"/_data_stream/{_quote(name)}")
        if status != 200 and _error_type(parsed) != "resource_already_exists_exception":
            raise _refused(f"creating data stream {name!r}", status, parsed)


def _quote(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def _error_type(parsed: Any) -> str | None:
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
        kind = parsed["error"].get("type")
        return kind if isinstance(kind, str) else None
    return None


def _is_cluster_block(parsed: Any) -> bool:
    return _error_type(parsed) == "cluster_block_exception"


def _error_label(parsed: Any) -> str:
    """The cluster's error type (``mapper_parsing_exception``) when the answer is an Elasticsearch
    error, else a fixed text: the body of something that is not a cluster is never repeated."""
    kind = _error_type(parsed)
    return kind if kind is not None and _ERROR_TYPE.fullmatch(kind) else "no Elasticsearch error in the answer"


def _refused(what: str, status: int, parsed: Any) -> FatalHttpError:
    """The error for a request the cluster refused: the status and error type for the status
    trace, the cluster's full reason in the worker's log."""
    log.warning("%s failed with HTTP %d: %s", what, status, _reason(parsed))
    return FatalHttpError(
        f"{what} failed with HTTP {status} ({_error_label(parsed)}; the reason is in the worker's log)"
    )


def _reason(parsed: Any) -> str:
    if isinstance(parsed, dict):
        error = parsed.get("error")
        if isinstance(error, dict):
            return f"{error.get('type')}: {error.get('reason')}"
        if error is not None:
            return str(error)
    text = str(parsed)
    return text if len(text) <= 500 else text[:500] + "…"
