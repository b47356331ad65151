"""A small client for Confluent's Schema Registry REST API, as the Avro converter needs it.

It speaks the API that Confluent Schema Registry, Karapace, Redpanda and Apicurio's ``ccompat``
endpoint share: register a schema under a subject, look one up, fetch the latest version, fetch a
schema by id. Every answer is cached, so a steady stream of records with known schemas makes no
requests at all.

Failures say what went wrong in the user's terms. A registry that cannot be reached (refused
connection, timeout, HTTP 5xx) raises :class:`RetriableError`, so ``errors.retry.timeout``
applies; an answer that refuses the request (an incompatible schema, an unknown subject or id)
raises :class:`DataError` quoting the registry's message and error code; a refused login raises
:class:`ConnectError`, which no error tolerance skips.
"""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Mapping
from typing import Any

import httpx
import orjson

from sluice.connectors.api.errors import ConnectError, DataError, RetriableError

__all__ = ["RegisteredSchema", "SchemaRegistryClient", "SubjectNotFound"]

log = logging.getLogger(__name__)

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
# Confluent's error codes (also used by the other implementations of the API).
SUBJECT_NOT_FOUND = 40401
VERSION_NOT_FOUND = 40402
SCHEMA_NOT_FOUND = 40403


class SubjectNotFound(DataError):
    """The subject, or the schema under it, is not registered."""


class RegisteredSchema:
    """A schema as the registry stores it: its global id, subject version and text."""

    __slots__ = ("id", "schema", "subject", "version")

    def __init__(self, id: int, schema: str, subject: str | None = None, version: int | None = None) -> None:  # noqa: A002
        self.id = id
        self.schema = schema
        self.subject = subject
        self.version = version


class SchemaRegistryClient:
    """Registers and fetches Avro schemas over the Schema Registry REST API.

    ``urls`` is the ``schema.registry.url`` setting: one or more base URLs, comma-separated; a URL
    that cannot be reached is skipped for the next. ``user_info`` (``user:password``) enables HTTP
    basic authentication; credentials embedded in a URL are used when it is ``None``. ``token``
    sends a bearer token instead. Not thread-safe; each converter has its own client.
    """

    def __init__(
        self,
        urls: str,
        *,
        user_info: str | None = None,
        token: str | None = None,
        timeout_s: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.urls: list[str] = []
        auth: tuple[str, str] | None = None
        for raw in urls.split(","):
            url = raw.strip().rstrip("/")
            if not url:
                continue
            parts = urllib.parse.urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"{url!r} is not an http:// or https:// URL")
            if parts.username is not None:
                auth = auth or (urllib.parse.unquote(parts.username), urllib.parse.unquote(parts.password or ""))
                netloc = parts.hostname + (f":{parts.port}" if parts.port else "")
                url = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
            self.urls.append(url)
        if not self.urls:
            raise ValueError("no Schema Registry URL given")
        if user_info is not None:
            user, _, password = user_info.partition(":")
            auth = (user, password)
        headers = {"Accept": CONTENT_TYPE, "Content-Type": CONTENT_TYPE}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
            auth = None
        # Made on the first request: a converter configured only to validate a config never connects.
        self._client_args: dict[str, Any] = {
            "headers": headers,
            "auth": auth,
            "timeout": timeout_s,
            "transport": transport,
        }
        self._client: httpx.Client | None = None
        self._ids: dict[tuple[str, str], int] = {}
        self._by_id: dict[int, str] = {}
        self._versions: dict[tuple[str, int], int | None] = {}

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    # -- the calls --------------------------------------------------------------------------------

    def register(self, subject: str, schema: str) -> int:
        """The id of ``schema`` under ``subject``, registering it as a new version if it is new."""
        cached = self._ids.get((subject, schema))
        if cached is not None:
            return cached
        answer = self._call("POST", f"/subjects/{_quote(subject)}/versions", {"schema": schema}, subject=subject)
        schema_id = int(answer["id"])
        self._ids[(subject, schema)] = schema_id
        self._by_id.setdefault(schema_id, schema)
        return schema_id

    def lookup(self, subject: str, schema: str) -> RegisteredSchema:
        """The registered version of ``schema`` under ``subject``; :class:`SubjectNotFound` if it has none."""
        answer = self._call("POST", f"/subjects/{_quote(subject)}", {"schema": schema}, subject=subject)
        found = RegisteredSchema(int(answer["id"]), answer.get("schema", schema), subject, answer.get("version"))
        self._ids[(subject, schema)] = found.id
        self._by_id.setdefault(found.id, found.schema)
        return found

    def latest(self, subject: str) -> RegisteredSchema:
        """The latest version registered under ``subject``."""
        answer = self._call("GET", f"/subjects/{_quote(subject)}/versions/latest", subject=subject)
        found = RegisteredSchema(int(answer["id"]), answer["schema"], subject, answer.get("version"))
        self._by_id.setdefault(found.id, found.schema)
        return found

    def schema(self, schema_id: int) -> str:
        """The text of the schema with global id ``schema_id``."""
        cached = self._by_id.get(schema_id)
        if cached is not None:
            return cached
        answer = self._call("GET", f"/schemas/ids/{schema_id}", what=f"schema id {schema_id}")
        text: str = answer["schema"]
        self._by_id[schema_id] = text
        return text

    def version(self, subject: str, schema_id: int) -> int | None:
        """The version under ``subject`` of the schema with id ``schema_id``, or ``None`` if it is not there."""
        key = (subject, schema_id)
        if key not in self._versions:
            try:
                self._versions[key] = self.lookup(subject, self.schema(schema_id)).version
            except SubjectNotFound:
                self._versions[key] = None
        return self._versions[key]

    # -- plumbing ---------------------------------------------------------------------------------

    def _call(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        subject: str | None = None,
        what: str | None = None,
    ) -> Any:
        content = orjson.dumps(body) if body is not None else None
        failures: list[str] = []
        if self._client is None:
            self._client = httpx.Client(**self._client_args)
        for index, base in enumerate(self.urls):
            try:
                response = self._client.request(method, base + path, content=content)
            except httpx.HTTPError as exc:
                failures.append(f"{base}: {type(exc).__name__}: {exc}")
                continue
            if response.status_code >= 500:
                failures.append(f"{base}: HTTP {response.status_code} {_message(response)}")
                continue
            if index:  # remember the URL that answered
                self.urls.insert(0, self.urls.pop(index))
            if response.status_code < 300:
                return response.json()
            raise _refusal(response, subject, what, base)
        raise RetriableError("Schema Registry unreachable: " + "; ".join(failures))


def _quote(subject: str) -> str:
    return urllib.parse.quote(subject, safe="")


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:300]
    if isinstance(body, Mapping):
        code = body.get("error_code")
        text = body.get("message") or body.get("detail") or body.get("title") or ""
        return f"{text} (error code {code})" if code is not None else str(text)
    return str(body)[:300]


def _refusal(response: httpx.Response, subject: str | None, what: str | None, base: str) -> ConnectError:
    status = response.status_code
    message = _message(response)
    target = what or (f"subject {subject!r}" if subject is not None else "the request")
    if status in (401, 403):
        return ConnectError(
            f"Schema Registry at {base} refused the credentials (HTTP {status}) for {target}: {message}; "
            "check basic.auth.user.info / basic.auth.credentials.source"
        )
    try:
        code = response.json().get("error_code")
    except (ValueError, AttributeError):
        code = None
    if status == 404 and code in (SUBJECT_NOT_FOUND, SCHEMA_NOT_FOUND, VERSION_NOT_FOUND, None):
        return SubjectNotFound(f"Schema Registry has no {target}: {message}")
    if status == 409:
        return DataError(
            f"Schema Registry refused the schema for {target} as incompatible with an earlier version (HTTP 409): {message}"
        )
    return DataError(f"Schema Registry refused the request for {target} (HTTP {status}): {message}")
