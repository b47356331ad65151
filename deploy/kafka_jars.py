"""Apache Kafka's jars from Maven Central: the broker's and ``kafka-tools``'.

Each artifact is resolved with ``mvn dependency:copy-dependencies`` on its pom in ``deploy/kafka/``,
once per version, into ``~/.cache/sluice/<name>-<version>/libs`` (see :mod:`sluice.deploy.maven`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

from sluice.deploy import maven
from sluice.deploy.kafka_errors import KafkaFetchError

DEFAULT_KAFKA_VERSION: Final = "4.3.1"
"""Newest Kafka 4.x whose full dependency tree resolved from Maven Central (4.4.0's
``kafka-tools-api`` was missing there when this was chosen)."""

KAFKA_FILES_DIR: Final = Path(__file__).resolve().parent / "kafka"
POM_PATH: Final = KAFKA_FILES_DIR / "pom.xml"
TOOLS_POM_PATH: Final = KAFKA_FILES_DIR / "tools-pom.xml"
LOG4J2_CONFIG: Final = KAFKA_FILES_DIR / "log4j2.properties"
_VERSION_RE: Final = re.compile(r"^4\.\d+\.\d+(?:[.-][A-Za-z0-9]+)*$")


def kafka_libs_dir(version: str = DEFAULT_KAFKA_VERSION) -> Path:
    """Where the jars of ``version`` live once fetched (whether or not they are yet)."""
    return maven.libs_dir("kafka", version)


def is_kafka_cached(version: str = DEFAULT_KAFKA_VERSION) -> bool:
    """True if a completed fetch of ``version`` is in the cache."""
    return maven.is_cached("kafka", version)


def ensure_kafka_jars(version: str = DEFAULT_KAFKA_VERSION, *, mvn: str | None = None) -> Path:
    """Return the directory holding Kafka ``version``'s runtime jars, fetching them if needed.

    The first call runs ``mvn dependency:copy-dependencies -DincludeScope=runtime`` on
    ``deploy/kafka/pom.xml`` (about 5-60 s, depending on the local Maven repository); later
    calls only check a marker file (see :mod:`sluice.deploy.maven`).

    Raises:
        ValueError: ``version`` is not a Kafka 4.x version string.
        KafkaFetchError: Maven is missing or failed; the message ends with Maven's output.
    """
    return ensure_kafka_artifact(
        "kafka",
        version,
        POM_PATH,
        f"org.apache.kafka:kafka_2.13:{version}",
        [f"kafka_2.13-{version}.jar"],
        mvn,
        slf4j=True,
    )


def ensure_kafka_tools_jars(version: str = DEFAULT_KAFKA_VERSION, *, mvn: str | None = None) -> Path:
    """The directory holding ``kafka-tools`` ``version`` alone (Kafka's load generators, for the
    benchmarks); with :func:`ensure_kafka_jars`' directory it makes their classpath."""
    return ensure_kafka_artifact(
        "kafka-tools",
        version,
        TOOLS_POM_PATH,
        f"org.apache.kafka:kafka-tools:{version}",
        [f"kafka-tools-{version}.jar"],
        mvn,
    )


def ensure_kafka_artifact(
    name: str, version: str, pom: Path, artifact: str, wanted: list[str], mvn: str | None, *, slf4j: bool = False
) -> Path:
    """One Kafka 4.x artifact's jars (``artifact`` resolved from ``pom``, cached as ``name``) through
    :func:`sluice.deploy.maven.ensure_jars`, checked for ``wanted`` (and the log4j SLF4J binding when
    ``slf4j``) once fetched. The test bench fetches a Kafka Connect worker this way too."""
    if not _VERSION_RE.match(version):
        # The poms, the log4j2 binding and the broker settings are all Kafka 4.x specific;
        # the check also keeps the version from escaping the cache directory.
        raise ValueError(f"unsupported Kafka version {version!r}: expected 4.x.y")

    def check(jars: list[str]) -> str | None:
        missing = [j for j in wanted if j not in jars]
        if slf4j and not any(j.startswith("log4j-slf4j-impl-") for j in jars):
            missing.append("the log4j SLF4J binding")
        return f"{', '.join(missing)} missing from its output" if missing else None

    return maven.ensure_jars(
        name,
        version,
        pom=pom,
        properties={"kafka.version": version},
        artifact=artifact,
        check=check,
        mvn=mvn,
        error=KafkaFetchError,
    )
