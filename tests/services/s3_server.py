"""A real S3-compatible HTTP server on loopback: S3Proxy from Maven Central, moto as a fallback.

* :func:`ensure_s3proxy_jars` resolves ``org.gaul:s3proxy`` (Jetty is shaded into it) with
  ``mvn dependency:copy-dependencies``, once per version, into
  ``~/.cache/sluice/s3proxy-<version>/libs`` (the same cache and locking as the Kafka jars).
* :class:`S3Server` runs ``org.gaul.s3proxy.Main`` with jclouds' ``filesystem`` backend in a
  data directory, on a free loopback port, with fixed credentials (AWS SigV2/V4), and waits
  until it answers HTTP. Not ``filesystem-nio2``: in S3Proxy 2.7.0 its ListObjects fails with a
  500 while a PutObject to the same bucket is in flight (it lists the temporary file). The
  ``filesystem`` backend has one quirk of its own: ListObjects without a delimiter also returns
  the directories as ``…/`` keys, which real S3 does not; skip keys ending with ``/``. Only when S3Proxy cannot be fetched (no Maven, no Maven Central) does it
  fall back to moto's standalone server (``moto_server``, in memory), and it logs that it did.

Command line::

    python -m tests.services.s3_server fetch                 # prints the libs directory
    python -m tests.services.s3_server run [--port 9000]     # foreground server, Ctrl-C stops it
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Final

from sluice.deploy import maven
from sluice.deploy.managed_server import ManagedServer
from sluice.deploy.processes import find_java

log = logging.getLogger(__name__)

DEFAULT_S3PROXY_VERSION: Final = "2.7.0"
LOOPBACK: Final = "127.0.0.1"
S3_FILES_DIR: Final = Path(__file__).resolve().parent / "s3"
POM_PATH: Final = S3_FILES_DIR / "pom.xml"
LOGBACK_CONFIG: Final = S3_FILES_DIR / "logback.xml"
DEFAULT_ACCESS_KEY: Final = "sluice-access"
DEFAULT_SECRET_KEY: Final = "sluice-secret-key"
DEFAULT_REGION: Final = "us-east-1"


class S3ServerError(RuntimeError):
    """Base class for errors fetching or running the local S3 server."""


class S3ServerFetchError(S3ServerError):
    """S3Proxy's jars could not be fetched from Maven Central."""


class S3ServerStartError(S3ServerError):
    """The server could not be launched, exited during startup, or did not become ready."""


# -- jars ---------------------------------------------------------------------------------------


def s3proxy_libs_dir(version: str = DEFAULT_S3PROXY_VERSION) -> Path:
    """Where the jars of S3Proxy ``version`` live once fetched."""
    return maven.libs_dir("s3proxy", version)


def is_s3proxy_cached(version: str = DEFAULT_S3PROXY_VERSION) -> bool:
    return maven.is_cached("s3proxy", version)


def ensure_s3proxy_jars(version: str = DEFAULT_S3PROXY_VERSION, *, mvn: str | None = None) -> Path:
    """The directory of S3Proxy ``version``'s runtime jars, fetched with Maven on first use
    (see :mod:`sluice.deploy.maven`). Raises :class:`S3ServerFetchError` with Maven's output tail."""
    if not version.replace(".", "").replace("-", "").isalnum():
        raise ValueError(f"unsupported S3Proxy version {version!r}")

    def check(jars: list[str]) -> str | None:
        return None if f"s3proxy-{version}.jar" in jars else f"s3proxy-{version}.jar is missing from its output"

    return maven.ensure_jars(
        "s3proxy",
        version,
        pom=POM_PATH,
        properties={"s3proxy.version": version},
        artifact=f"org.gaul:s3proxy:{version}",
        check=check,
        mvn=mvn,
        error=S3ServerFetchError,
    )


# -- the server ---------------------------------------------------------------------------------


class S3Server(ManagedServer):
    """An S3-compatible server on ``127.0.0.1`` for tests, benchmarks and the local stack.

    ``backend="auto"`` runs S3Proxy (filesystem backend under :attr:`data_dir`) and falls back to
    ``moto_server`` only if S3Proxy's jars cannot be fetched; ``"s3proxy"`` or ``"moto"`` force
    one. Use :attr:`endpoint_url`, :attr:`access_key`, :attr:`secret_key` and :attr:`region`
    in clients; :meth:`client` builds a boto3 client and :meth:`create_bucket` a bucket.
    """

    temp_prefix = "sluice-s3-"

    def __init__(
        self,
        *,
        version: str = DEFAULT_S3PROXY_VERSION,
        backend: str = "auto",
        port: int | None = None,
        data_dir: str | os.PathLike[str] | None = None,
        access_key: str = DEFAULT_ACCESS_KEY,
        secret_key: str = DEFAULT_SECRET_KEY,
        start_timeout: float = 60.0,
        kill_with_parent: bool = False,
        provider: str = "filesystem",
    ) -> None:
        if backend not in ("auto", "s3proxy", "moto"):
            raise ValueError(f"backend must be auto, s3proxy or moto, not {backend!r}")
        super().__init__(port=port, data_dir=data_dir, start_timeout=start_timeout, kill_with_parent=kill_with_parent)
        self.version = version
        self.backend = backend
        self.access_key = access_key
        self.secret_key = secret_key
        self.region = DEFAULT_REGION
        #: The jclouds blob-store provider S3Proxy serves from.
        self.provider = provider
        #: Which server actually runs: ``"s3proxy"`` or ``"moto"`` (``None`` before :meth:`start`).
        self.kind: str | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> None:
        """Launch the server and wait until it answers; raises :class:`S3ServerError` on failure."""
        if self.is_running():
            return
        self._data_dir.mkdir(parents=True, exist_ok=True)  # _command writes S3Proxy's config there
        self._spawn(self._command(), S3ServerStartError)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        log.info("%s serves S3 on %s (data in %s)", self.kind, self.endpoint_url, self._data_dir)

    def _command(self) -> list[str]:
        if self.backend in ("auto", "s3proxy"):
            try:
                libs = ensure_s3proxy_jars(self.version)
            except S3ServerFetchError as exc:
                if self.backend == "s3proxy" or not shutil.which("moto_server"):
                    raise
                log.warning("S3Proxy could not be fetched, falling back to moto_server (in memory): %s", exc)
            else:
                self.kind = "s3proxy"
                return self._s3proxy_command(libs)
        moto = shutil.which("moto_server")
        if not moto:
            raise S3ServerStartError("moto_server is not on PATH (pip install 'moto[server]')")
        self.kind = "moto"
        return [moto, "-H", self.host, "-p", str(self.port)]

    def _s3proxy_command(self, libs: Path) -> list[str]:
        blobs = self._data_dir / "blobs"
        blobs.mkdir(exist_ok=True)
        conf = self._data_dir / "s3proxy.conf"
        conf.write_text(
            "\n".join(
                [
                    f"s3proxy.endpoint={self.endpoint_url}",
                    "s3proxy.authorization=aws-v2-or-v4",
                    f"s3proxy.identity={self.access_key}",
                    f"s3proxy.credential={self.secret_key}",
                    f"jclouds.provider={self.provider}",
                    f"jclouds.filesystem.basedir={blobs}",
                    # The filesystem provider ignores these, but S3Proxy refuses to start without them.
                    "jclouds.identity=local",
                    "jclouds.credential=local",
                    "",
                ]
            ),
            encoding="utf-8",
        )
        return [
            find_java(S3ServerStartError, "S3Proxy needs Java 17 or newer"),
            "-Xms64m",
            "-Xmx512m",
            "-XX:+UseSerialGC",
            "-XX:-UsePerfData",
            f"-Dlogback.configurationFile={LOGBACK_CONFIG}",
            "-cp",
            str(libs / "*"),
            "org.gaul.s3proxy.Main",
            "--properties",
            str(conf),
        ]

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            self._raise_if_exited(str(self.kind), S3ServerStartError)
            try:
                urllib.request.urlopen(self.endpoint_url + "/", timeout=1).close()  # noqa: S310 - http:// URL of the server this module started
                return
            except urllib.error.HTTPError:
                return  # any HTTP answer (S3Proxy: 403 for anonymous requests) means it serves
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)
        raise S3ServerStartError(
            f"{self.kind} did not answer on {self.endpoint_url} within {self.start_timeout:.0f}s; "
            f"log tail:\n{self._log_tail()}"
        )

    # -- client helpers -----------------------------------------------------------------------

    def client(self) -> Any:
        """A boto3 S3 client for this server (path-style addressing)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
            config=Config(
                s3={"addressing_style": "path"},
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
            ),
        )

    def create_bucket(self, name: str) -> str:
        """Create bucket ``name`` (3-63 lower-case characters) and return its name."""
        self.client().create_bucket(Bucket=name)
        return name

    def connector_config(self, bucket: str) -> dict[str, str]:
        """The S3 connector keys that reach this server's ``bucket``."""
        return {
            "s3.bucket.name": bucket,
            "s3.region": self.region,
            "store.url": self.endpoint_url,
            "s3.path.style.access.enabled": "true",
            "aws.access.key.id": self.access_key,
            "aws.secret.access.key": self.secret_key,
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.services.s3_server", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    fetch = sub.add_parser("fetch", help="fetch S3Proxy's jars into the cache and print their directory")
    fetch.add_argument("--version", default=DEFAULT_S3PROXY_VERSION)
    run = sub.add_parser("run", help="run a server in the foreground until Ctrl-C")
    run.add_argument("--version", default=DEFAULT_S3PROXY_VERSION)
    run.add_argument("--port", type=int, default=None)
    run.add_argument("--backend", choices=("auto", "s3proxy", "moto"), default="auto")
    run.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    try:
        if args.command == "fetch":
            print(ensure_s3proxy_jars(args.version))
            return 0
        server = S3Server(version=args.version, port=args.port, backend=args.backend, data_dir=args.data_dir)
        server.start()
    except S3ServerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"endpoint={server.endpoint_url} access_key={server.access_key} secret_key={server.secret_key}", flush=True)
    server.serve_until_interrupted()
    return 0


if __name__ == "__main__":
    sys.exit(main())
