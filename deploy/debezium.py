"""Debezium's PostgreSQL connector from Maven Central, as a Kafka Connect plugin directory.

The differential test runs it in a real Kafka Connect worker beside Sluice's CDC source, on the same
database and broker::

    python -m sluice.deploy.debezium fetch [--version 3.6.1.Final]   # prints the plugin directory

The jars are cached like Kafka's (see :mod:`sluice.deploy.maven`); a worker loads them through
``plugin.path`` set to :func:`plugin_path`.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from sluice.deploy import maven

DEFAULT_DEBEZIUM_VERSION = "3.6.1.Final"
POM_PATH = Path(__file__).resolve().parent / "kafka" / "debezium-pom.xml"
_VERSION_RE = re.compile(r"^\d+\.\d+\.\d+\.(Final|CR\d+|Beta\d+|Alpha\d+)$")


class DebeziumFetchError(RuntimeError):
    """Debezium's jars could not be fetched; carries Maven's output tail."""


def ensure_debezium_jars(version: str = DEFAULT_DEBEZIUM_VERSION, *, mvn: str | None = None) -> Path:
    """The directory of ``debezium-connector-postgres`` ``version``'s runtime jars, fetched on first use."""
    if not _VERSION_RE.match(version):  # also keeps the version from escaping the cache directory
        raise ValueError(f"unsupported Debezium version {version!r}: expected e.g. {DEFAULT_DEBEZIUM_VERSION}")
    wanted = f"debezium-connector-postgres-{version}.jar"

    def check(jars: list[str]) -> str | None:
        if wanted not in jars:
            return f"{wanted} missing from its output"
        clashing = [j for j in jars if j.startswith(("connect-api-", "kafka-clients-"))]
        return f"Kafka's own jars {clashing} would shadow the worker's" if clashing else None

    return maven.ensure_jars(
        "debezium-postgres",
        version,
        pom=POM_PATH,
        properties={"debezium.version": version},
        artifact=f"io.debezium:debezium-connector-postgres:{version}",
        check=check,
        mvn=mvn,
        error=DebeziumFetchError,
    )


def plugin_path(version: str = DEFAULT_DEBEZIUM_VERSION) -> Path:
    """A ``plugin.path`` entry holding exactly one plugin, Debezium's PostgreSQL connector: Connect
    treats each directory under a plugin path entry as one plugin with its own class loader."""
    libs = ensure_debezium_jars(version)
    return libs.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sluice.deploy.debezium", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    fetch = sub.add_parser("fetch", help="fetch the jars once; print the plugin directory")
    fetch.add_argument("--version", default=DEFAULT_DEBEZIUM_VERSION)
    args = parser.parse_args(argv)
    try:
        print(plugin_path(args.version))
    except (DebeziumFetchError, ValueError) as exc:
        print(f"sluice.deploy.debezium: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
