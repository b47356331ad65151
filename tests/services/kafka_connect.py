"""A real Apache Kafka Connect worker's jars from Maven Central: the peer the migration tests run
beside Sluice, and the worker Debezium's connector runs in (:mod:`tests.services.debezium`).

``connect-runtime`` with Connect's own ``connect-file`` and ``connect-json`` (see
``tests/services/connect/connect-pom.xml``) is resolved like the broker's jars, by
:func:`sluice.deploy.kafka_jars.ensure_kafka_artifact`, once per version, into
``~/.cache/sluice/kafka-connect-<version>/libs``. Sluice itself never starts a Connect worker,
so none of this ships in the wheel.

Command line (the Makefile's ``kafka-connect`` target)::

    python -m tests.services.kafka_connect fetch [--kafka-version 4.3.1]   # prints the libs directory
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from sluice.deploy.kafka_errors import KafkaStackError
from sluice.deploy.kafka_jars import DEFAULT_KAFKA_VERSION, ensure_kafka_artifact

CONNECT_FILES_DIR: Final = Path(__file__).resolve().parent / "connect"
CONNECT_POM_PATH: Final = CONNECT_FILES_DIR / "connect-pom.xml"


def ensure_connect_jars(version: str = DEFAULT_KAFKA_VERSION, *, mvn: str | None = None) -> Path:
    """The directory holding a Kafka Connect ``version`` worker's runtime jars (the whole classpath
    of ``org.apache.kafka.connect.cli.ConnectDistributed``, FileStream connectors included),
    fetched on first use (about 5 s from a warm Maven repository)."""
    wanted = [f"connect-runtime-{version}.jar", f"connect-file-{version}.jar", f"connect-json-{version}.jar"]
    return ensure_kafka_artifact(
        "kafka-connect",
        version,
        CONNECT_POM_PATH,
        f"org.apache.kafka:connect-runtime:{version}",
        wanted,
        mvn,
        slf4j=True,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tests.services.kafka_connect fetch``: fetch once, print the libs directory."""
    parser = argparse.ArgumentParser(prog="python -m tests.services.kafka_connect", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    fetch = commands.add_parser("fetch", help="fetch a Kafka Connect worker's jars into the cache (once) and print their directory")
    fetch.add_argument("--kafka-version", default=DEFAULT_KAFKA_VERSION)
    args = parser.parse_args(argv)
    try:
        print(ensure_connect_jars(args.kafka_version))
    except (KafkaStackError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
