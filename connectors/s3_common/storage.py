"""Object storage: the S3 operations the connectors use, over boto3 or in memory.

:class:`S3Storage` talks to any S3-compatible endpoint with boto3 and turns failures into the SPI's
errors: throttling, 5xx and dropped connections become :class:`RetriableError` (after botocore's
own retries), while access denied, a missing bucket or bad credentials become a
:class:`ConnectError` that names the bucket and the operation, so the task is FAILED with a
message the user can act on. :class:`MemoryStorage` is the same surface in a dict, for unit tests.

:class:`ObjectUpload` streams one object: bytes are buffered up to ``part_size`` and sent as a
multipart-upload part as soon as they reach it, so an open object never holds more than one part
in memory. An object smaller than one part is sent with a single ``PutObject`` when committed.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Iterator, Mapping
from concurrent.futures import Executor, Future
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass, replace
from typing import Any, Protocol

from sluice.connectors.api import ConnectError, RetriableError
from sluice.connectors.s3_common import require_module

log = logging.getLogger(__name__)

#: S3 refuses parts smaller than this (except the last one).
MIN_PART_SIZE = 5 * 1024 * 1024

_FATAL_CODES = frozenset(
    {
        "AccessDenied",
        "AllAccessDisabled",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "NoSuchBucket",
        "InvalidBucketName",
        "AccountProblem",
        "InvalidObjectState",
        "403",
    }
)


class ObjectStorage(Protocol):
    """The object-store operations the S3 connectors need (one bucket)."""

    bucket: str

    def put_object(self, key: str, data: bytes) -> None: ...

    def create_multipart_upload(self, key: str) -> str: ...

    def upload_part(self, key: str, upload_id: str, part_number: int, data: bytes) -> str: ...

    def complete_multipart_upload(self, key: str, upload_id: str, etags: list[str]) -> None: ...

    def abort_multipart_upload(self, key: str, upload_id: str) -> None: ...

    def delete_object(self, key: str) -> None: ...

    def list_keys(self, prefix: str, start_after: str = "") -> Iterator[str]: ...

    def get_object(self, key: str) -> bytes: ...

    def list_prefixes(self, prefix: str, delimiter: str) -> list[str]: ...


# -- in memory ----------------------------------------------------------------------------------


class MemoryStorage:
    """An in-memory bucket with S3's multipart semantics; for unit tests and benchmarks only."""

    def __init__(self, bucket: str = "test-bucket") -> None:
        self.bucket = bucket
        self.objects: dict[str, bytes] = {}
        self.uploads: dict[str, tuple[str, dict[int, bytes]]] = {}
        self.requests: list[tuple[str, str]] = []
        self._next_id = 0
        self._lock = threading.Lock()
        #: S3's minimum size of every part but the last (tests of streaming may lower it).
        self.min_part_size = MIN_PART_SIZE
        #: Set to an exception to make the next request raise it (then cleared).
        self.fail_next: BaseException | None = None

    def _request(self, op: str, key: str) -> None:
        self.requests.append((op, key))
        if self.fail_next is not None:
            exc, self.fail_next = self.fail_next, None
            raise exc

    def put_object(self, key: str, data: bytes) -> None:
        self._request("PutObject", key)
        self.objects[key] = bytes(data)

    def create_multipart_upload(self, key: str) -> str:
        self._request("CreateMultipartUpload", key)
        with self._lock:
            self._next_id += 1
            upload_id = f"upload-{self._next_id}"
        self.uploads[upload_id] = (key, {})
        return upload_id

    def upload_part(self, key: str, upload_id: str, part_number: int, data: bytes) -> str:
        self._request("UploadPart", key)
        self.uploads[upload_id][1][part_number] = bytes(data)
        return f"etag-{part_number}"

    def complete_multipart_upload(self, key: str, upload_id: str, etags: list[str]) -> None:
        self._request("CompleteMultipartUpload", key)
        stored_key, parts = self.uploads.pop(upload_id)
        assert stored_key == key and len(parts) == len(etags)
        for number, data in parts.items():
            if number < len(parts) and len(data) < self.min_part_size:
                raise ConnectError(f"part {number} of {key} is smaller than the S3 minimum")
        self.objects[key] = b"".join(parts[n] for n in sorted(parts))

    def abort_multipart_upload(self, key: str, upload_id: str) -> None:
        self._request("AbortMultipartUpload", key)
        self.uploads.pop(upload_id, None)

    def delete_object(self, key: str) -> None:
        self._request("DeleteObject", key)
        self.objects.pop(key, None)

    def list_keys(self, prefix: str, start_after: str = "") -> Iterator[str]:
        self._request("ListObjectsV2", prefix)
        return iter(sorted(k for k in self.objects if k.startswith(prefix) and k > start_after))

    def list_prefixes(self, prefix: str, delimiter: str) -> list[str]:
        self._request("ListObjectsV2", prefix)
        found = {
            prefix + k[len(prefix) :].split(delimiter, 1)[0] + delimiter
            for k in self.objects
            if k.startswith(prefix) and delimiter in k[len(prefix) :]
        }
        return sorted(found)

    def get_object(self, key: str) -> bytes:
        self._request("GetObject", key)
        try:
            return self.objects[key]
        except KeyError:
            raise ConnectError(f"S3 GetObject of {key!r} in bucket {self.bucket!r} failed: NoSuchKey") from None


# -- boto3 --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class S3Connection:
    """Where and how to reach the bucket (from the connectors' ``s3.*`` / ``aws.*`` keys)."""

    bucket: str
    region: str = "us-west-2"
    endpoint_url: str | None = None
    path_style: bool = True
    access_key_id: str | None = None
    secret_access_key: str | None = None
    max_attempts: int = 4
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 60.0


class S3Storage:
    """One bucket of an S3-compatible service, through a boto3 client.

    Thread-safe as boto3 clients are. Credentials come from the configuration when both keys are
    set, else from boto3's default chain (environment, shared files, instance/role metadata).
    """

    def __init__(self, conn: S3Connection, client: Any | None = None) -> None:
        self.bucket = conn.bucket
        self.conn = conn
        self._client = client if client is not None else shared_client(conn)

    @staticmethod
    def _new_client(conn: S3Connection) -> Any:
        boto3 = require_module("boto3", "The S3 connectors")
        botocore_config = require_module("botocore.config", "The S3 connectors")
        config = botocore_config.Config(
            region_name=conn.region,
            retries={"max_attempts": conn.max_attempts, "mode": "standard"},
            connect_timeout=conn.connect_timeout_s,
            read_timeout=conn.read_timeout_s,
            s3={"addressing_style": "path" if conn.path_style else "auto"},
            # Newer botocore adds CRC checksums with aws-chunked trailers to every upload, which
            # several S3-compatible servers (S3Proxy, older MinIO) reject as NotImplemented.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            max_pool_connections=32,
        )
        kwargs: dict[str, Any] = {"config": config}
        if conn.endpoint_url:
            kwargs["endpoint_url"] = conn.endpoint_url
        if conn.access_key_id and conn.secret_access_key:
            kwargs["aws_access_key_id"] = conn.access_key_id
            kwargs["aws_secret_access_key"] = conn.secret_access_key
        return boto3.session.Session().client("s3", **kwargs)

    @property
    def client(self) -> Any:
        """The underlying boto3 client."""
        return self._client

    def _call(self, op: str, key: str, fn: Any, **kwargs: Any) -> Any:
        try:
            return fn(Bucket=self.bucket, **kwargs)
        except Exception as exc:  # botocore's exceptions are built dynamically
            raise translate_error(exc, op, self.bucket, key) from exc

    def check_bucket(self) -> None:
        """Fail clearly now if the bucket is missing or not accessible (HeadBucket)."""
        self._call("HeadBucket", "", self._client.head_bucket)

    def check_listing(self) -> None:
        """ListObjectsV2 of at most one key: the permission HeadBucket needs, with an error body.

        A refused HeadBucket is a bare 403 (a HEAD response carries no body), the same for refused
        credentials as for a bucket policy; this call's error names which (``InvalidAccessKeyId``,
        ``SignatureDoesNotMatch``, ``AccessDenied``)."""
        self._call("ListObjectsV2", "", self._client.list_objects_v2, MaxKeys=1)

    def put_object(self, key: str, data: bytes) -> None:
        self._call("PutObject", key, self._client.put_object, Key=key, Body=data)

    def create_multipart_upload(self, key: str) -> str:
        response = self._call("CreateMultipartUpload", key, self._client.create_multipart_upload, Key=key)
        return str(response["UploadId"])

    def upload_part(self, key: str, upload_id: str, part_number: int, data: bytes) -> str:
        response = self._call(
            "UploadPart", key, self._client.upload_part, Key=key, UploadId=upload_id, PartNumber=part_number, Body=data
        )
        return str(response["ETag"])

    def complete_multipart_upload(self, key: str, upload_id: str, etags: list[str]) -> None:
        parts = [{"PartNumber": n, "ETag": etag} for n, etag in enumerate(etags, start=1)]
        self._call(
            "CompleteMultipartUpload",
            key,
            self._client.complete_multipart_upload,
            Key=key,
            UploadId=upload_id,
            MultipartUpload={"Parts": parts},
        )

    def abort_multipart_upload(self, key: str, upload_id: str) -> None:
        self._call("AbortMultipartUpload", key, self._client.abort_multipart_upload, Key=key, UploadId=upload_id)

    def delete_object(self, key: str) -> None:
        self._call("DeleteObject", key, self._client.delete_object, Key=key)

    def list_keys(self, prefix: str, start_after: str = "") -> Iterator[str]:
        kwargs: dict[str, Any] = {"Prefix": prefix}
        if start_after:
            kwargs["StartAfter"] = start_after
        while True:
            response = self._call("ListObjectsV2", prefix, self._client.list_objects_v2, **kwargs)
            for item in response.get("Contents", ()):
                yield str(item["Key"])
            token = response.get("NextContinuationToken")
            if not response.get("IsTruncated") or not token:
                return
            kwargs["ContinuationToken"] = token

    def list_prefixes(self, prefix: str, delimiter: str) -> list[str]:
        """The "directories" right below ``prefix`` (CommonPrefixes), each ending with ``delimiter``."""
        kwargs: dict[str, Any] = {"Prefix": prefix, "Delimiter": delimiter}
        found: list[str] = []
        while True:
            response = self._call("ListObjectsV2", prefix, self._client.list_objects_v2, **kwargs)
            found.extend(str(p["Prefix"]) for p in response.get("CommonPrefixes", ()))
            token = response.get("NextContinuationToken")
            if not response.get("IsTruncated") or not token:
                return found
            kwargs["ContinuationToken"] = token

    def get_object(self, key: str) -> bytes:
        response = self._call("GetObject", key, self._client.get_object, Key=key)
        return bytes(response["Body"].read())


def translate_error(exc: BaseException, op: str, bucket: str, key: str) -> ConnectError:
    """The SPI error for a failed S3 call: retriable for transient failures, fatal otherwise."""
    where = f"S3 {op} of {key!r} in bucket {bucket!r}" if key else f"S3 {op} on bucket {bucket!r}"
    response: Mapping[str, Any] | None = getattr(exc, "response", None)
    if response is not None:
        error = response.get("Error", {})
        code = str(error.get("Code", ""))
        status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        message = error.get("Message") or code
        if code in _FATAL_CODES or status in (401, 403) or (op == "HeadBucket" and status == 404):
            if op == "HeadBucket" and status == 404:
                code, message = "NoSuchBucket", "the bucket does not exist"
            return ConnectError(f"{where} failed: {code}: {message}")
        if status >= 500 or status in (408, 429) or code in ("SlowDown", "Throttling", "RequestTimeout"):
            return RetriableError(f"{where} failed after retries: {code or status}: {message}")
        return ConnectError(f"{where} failed: {code or status}: {message}")
    name = type(exc).__name__
    if name in (
        "EndpointConnectionError",
        "ConnectionClosedError",
        "ReadTimeoutError",
        "ConnectTimeoutError",
    ) or isinstance(exc, (ConnectionError, TimeoutError)):
        return RetriableError(f"{where} failed: {exc}")
    if name in ("NoCredentialsError", "PartialCredentialsError"):
        return ConnectError(f"{where} failed: no AWS credentials ({exc}); set aws.access.key.id/aws.secret.access.key")
    return ConnectError(f"{where} failed: {name}: {exc}")


_clients: dict[S3Connection, Any] = {}
_clients_lock = threading.Lock()
_MAX_CLIENTS = 32


def shared_client(conn: S3Connection) -> Any:
    """A boto3 client for ``conn``, shared by every task of the process that uses the same settings.

    Building a client loads and parses botocore's S3 service model, which takes 0.1-0.4 s of CPU
    (holding the GIL) on every task start, restart and rebalance; clients are thread-safe, so
    tasks share them instead.
    """
    key = replace(conn, bucket="")  # a client is not tied to a bucket
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            if len(_clients) >= _MAX_CLIENTS:
                del _clients[next(iter(_clients))]
            client = _clients[key] = S3Storage._new_client(conn)
        return client


# -- streaming one object -----------------------------------------------------------------------


class ObjectUpload:
    """A write-only stream into one object, uploaded part by part as it grows.

    The upload is retry-safe: a failed part or completion leaves the state as it was, so calling
    :meth:`commit` again resumes. Nothing is visible in the bucket until :meth:`commit` returns.
    Implements enough of a binary file (``write``/``tell``/``flush``/``closed``) for pyarrow and
    fastavro to write into it.

    :meth:`write` never raises for the storage: a part that cannot be sent stays buffered, and
    :meth:`check` (called before each batch of records) or :meth:`commit` send it again and raise
    if that fails, so a failure never reaches a format's encoder mid-object and never leaves a
    batch half-written.

    With an ``executor``, full parts are sent on its threads while the writer goes on: at most
    ``max_inflight`` parts of this object are in flight (a write waits for the oldest beyond
    that), and they count in :attr:`buffered_bytes` until S3 has accepted them. A part that failed
    in the background is sent again inline when it is next waited for. :meth:`commit` may itself
    run on the executor: a part it needs that no thread has started yet is cancelled and sent
    inline, so it never waits for work queued behind it.
    """

    def __init__(
        self, storage: ObjectStorage, key: str, part_size: int, executor: Executor | None = None, max_inflight: int = 2
    ) -> None:
        self.storage = storage
        self.key = key
        self.part_size = part_size
        self.executor = executor
        self.max_inflight = max(1, max_inflight)
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._position = 0
        self._upload_id: str | None = None
        self._etags: list[str] = []
        #: Parts handed to the executor, in part-number order: (number, data, future or None to resend).
        self._inflight: deque[tuple[int, bytes, Future[str] | None]] = deque()
        self._inflight_bytes = 0
        self._next_part = 1
        self.committed = False
        # A background encoder (Parquet) may write while the task thread checks: one at a time.
        self._lock = threading.Lock()

    # file-like surface
    closed = False

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readable(self) -> bool:
        return False

    def tell(self) -> int:
        return self._position

    def close(self) -> None:
        """Nothing: :meth:`commit` or :meth:`abort` ends the object. (pyarrow closes the file it
        wrote into when a discarded Parquet writer is collected.)"""

    def flush(self) -> None:
        pass

    def write(self, data: bytes | bytearray | memoryview) -> int:
        """Take ``data``; never fails because of the storage (see :meth:`check`)."""
        size = len(data)
        if size:
            with self._lock:
                self._chunks.append(bytes(data))
                self._buffered += size
                self._position += size
                if self._buffered >= self.part_size:
                    try:
                        self._upload_full_parts()
                    except Exception as exc:  # noqa: BLE001 - kept buffered; check() and commit() send it again
                        log.debug("Sending a part of %s failed, will retry: %s", self.key, exc)
        return size

    def check(self) -> None:
        """Send what an earlier :meth:`write` could not and raise if that still fails.

        Called before a batch of records is written, so a storage failure is raised before the
        object took any of them (a retried ``put`` must not write them twice) and never inside a
        format's encoder, which could not resume. While the storage fails, the buffer exceeds a
        part by about one batch.
        """
        with self._lock:
            if self._buffered >= self.part_size:
                self._upload_full_parts()
            while self._inflight:
                future = self._inflight[0][2]
                if future is not None and not future.done():
                    break
                self._settle_oldest()

    @property
    def buffered_bytes(self) -> int:
        """Bytes held in memory, not yet accepted by S3 (buffered and in-flight parts)."""
        return self._buffered + self._inflight_bytes

    @property
    def size(self) -> int:
        """Bytes written so far."""
        return self._position

    def _upload_full_parts(self) -> None:
        data = b"".join(self._chunks)
        self._chunks = [data]
        while len(data) >= self.part_size:
            self._send_part(data[: self.part_size])
            # Drop what was sent only once it was accepted (or queued), so a failed part is sent again.
            data = data[self.part_size :]
            self._chunks = [data] if data else []
            self._buffered = len(data)

    def _send_part(self, part: bytes) -> None:
        if self._upload_id is None:
            self._upload_id = self.storage.create_multipart_upload(self.key)
        if self.executor is None:
            etag = self.storage.upload_part(self.key, self._upload_id, self._next_part, part)
            self._etags.append(etag)
            self._next_part += 1
            return
        while len(self._inflight) >= self.max_inflight:
            self._settle_oldest()
        number, self._next_part = self._next_part, self._next_part + 1
        future = self.executor.submit(self.storage.upload_part, self.key, self._upload_id, number, part)
        self._inflight.append((number, part, future))
        self._inflight_bytes += len(part)

    def _settle_oldest(self) -> None:
        """Wait for the oldest in-flight part (sending it here if no thread started it or it
        failed before); on failure it stays queued, to be sent again by the next attempt."""
        number, part, future = self._inflight[0]
        assert self._upload_id is not None
        etag: str | None = None
        if future is not None and not future.cancel():
            try:
                etag = future.result()
            except Exception:  # noqa: BLE001 - any failure: the part is sent again just below
                self._inflight[0] = (number, part, None)  # sent again just below
        if etag is None:
            etag = self.storage.upload_part(self.key, self._upload_id, number, part)
        self._inflight.popleft()
        self._inflight_bytes -= len(part)
        self._etags.append(etag)

    def commit(self) -> None:
        """Make the object visible with everything written. Idempotent; safe to retry."""
        with self._lock:
            self._commit()

    def _commit(self) -> None:
        if self.committed:
            return
        while self._inflight:
            self._settle_oldest()
        data = b"".join(self._chunks)
        self._chunks = [data] if data else []
        if self._upload_id is None:
            self.storage.put_object(self.key, data)
        else:
            if data or not self._etags:
                etag = self.storage.upload_part(self.key, self._upload_id, self._next_part, data)
                self._etags.append(etag)
                self._next_part += 1
                self._chunks = []
                self._buffered = 0
            self.storage.complete_multipart_upload(self.key, self._upload_id, self._etags)
        self._chunks = []
        self._buffered = 0
        self.committed = True

    def abort(self) -> None:
        """Drop the object: abort its multipart upload if one started. Never raises."""
        self._chunks = []
        self._buffered = 0
        for _, _, future in self._inflight:
            if future is not None and not future.cancel():
                futures_wait([future])  # abort only once no part of it is still being sent
        self._inflight.clear()
        self._inflight_bytes = 0
        if self._upload_id is not None and not self.committed:
            try:
                self.storage.abort_multipart_upload(self.key, self._upload_id)
            except Exception:  # an orphaned upload is only a cost; lifecycle rules clean it up
                log.warning("Could not abort the multipart upload of %s", self.key, exc_info=True)
            self._upload_id = None


def bucket_problems(conn: S3Connection, timeout_s: float) -> dict[str, str]:
    """HeadBucket with a client of its own (no retries, ``timeout_s`` timeouts): ``{}`` when the
    bucket answers, else the problem on the key to fix — ``store.url`` (or ``s3.region`` without
    one) when the service cannot be reached, ``aws.access.key.id`` when it refuses the credentials,
    ``s3.bucket.name`` when the bucket is missing or forbidden. Messages hold no secret."""
    quick = replace(conn, max_attempts=1, connect_timeout_s=timeout_s, read_timeout_s=timeout_s)
    storage = S3Storage(quick, client=S3Storage._new_client(quick))
    try:
        storage.check_bucket()
    except RetriableError as exc:
        return {"store.url" if conn.endpoint_url else "s3.region": str(exc)}
    except ConnectError as exc:
        text = _refusal_cause(storage, str(exc))
        if any(code in text for code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "no AWS credentials")):
            return {"aws.access.key.id": text}
        return {"s3.bucket.name": text}
    return {}


def _refusal_cause(storage: S3Storage, text: str) -> str:
    """HeadBucket's bare 403 replaced by the error of a listing, which says whose refusal it was."""
    if ": 403: " not in text:
        return text
    try:
        storage.check_listing()
    except ConnectError as exc:
        return str(exc)
    return text
