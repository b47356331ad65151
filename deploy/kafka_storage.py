"""The KRaft storage of a single-node broker: its cluster id and ``kafka-storage format``."""

from __future__ import annotations

import base64
import datetime as dt
import logging
import shlex
import subprocess
import uuid
from pathlib import Path
from typing import Final

from sluice.deploy import maven
from sluice.deploy.kafka_errors import KafkaStartError
from sluice.deploy.kafka_jars import LOG4J2_CONFIG

log = logging.getLogger(__name__)

_FORMAT_TIMEOUT_S: Final = 120.0


def new_cluster_id() -> str:
    """A random Kafka cluster id, as ``kafka-storage random-uuid`` prints but without a JVM.

    16 random bytes, URL-safe base64 without padding (22 characters).
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")
        # Kafka's Uuid.randomUuid() rejects ids starting with '-': they parse as CLI flags.
        if not cluster_id.startswith("-"):
            return cluster_id


def logging_options() -> list[str]:
    """The JVM options that point log4j2 at Sluice's configuration."""
    return [
        f"-Dlog4j2.configurationFile={LOG4J2_CONFIG}",
        # log4j's own shutdown hook would race Kafka's and drop the shutdown messages.
        "-Dlog4j2.shutdownHookEnabled=false",
    ]


def format_storage(java: str, libs: Path, config_path: Path, log_dirs: Path, log_path: Path) -> None:
    """Run ``kafka-storage format --standalone`` for the broker configured in ``config_path``,
    appending its output to ``log_path``; raises :class:`KafkaStartError` when it fails."""
    cluster_id = new_cluster_id()
    cmd = [
        # A short-lived tool: a small heap and C1 only start it faster.
        java,
        "-Xmx256m",
        "-XX:TieredStopAtLevel=1",
        "-XX:+UseSerialGC",
        "-XX:-UsePerfData",
        *logging_options(),
        "-cp",
        str(libs / "*"),
        "kafka.tools.StorageTool",
        "format",
        "--standalone",
        "--cluster-id",
        cluster_id,
        "--config",
        str(config_path),
    ]
    try:
        result = subprocess.run(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            timeout=_FORMAT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise KafkaStartError(f"formatting Kafka storage in {log_dirs} failed: {exc}") from exc
    with open(log_path, "a", encoding="utf-8") as console:
        console.write(f"\n=== sluice: {shlex.join(cmd[-8:])} at {now()} ===\n{result.stdout}")
    if result.returncode != 0:
        raise KafkaStartError(
            f"formatting Kafka storage in {log_dirs} failed (exit code {result.returncode}):\n"
            + maven.indent(maven.tail_text(result.stdout))
        )
    log.debug("Formatted %s with cluster id %s", log_dirs, cluster_id)


def now() -> str:
    """The current UTC time, as the broker log's Sluice markers show it."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
