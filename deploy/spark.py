"""The extra jars a Spark backfill needs, fetched from Maven Central with ``mvn`` to match PySpark.

PySpark ships Spark's core jars but not its Kafka data source, S3A or a JDBC driver. They are
resolved with ``mvn dependency:copy-dependencies`` (never ``spark.jars.packages``: Ivy fetching is
not allowed everywhere Maven is) into ``~/.cache/sluice/spark-extra-<spark version>/libs`` through
:mod:`sluice.deploy.maven`, once per Spark version:

* ``org.apache.spark:spark-sql-kafka-0-10_<scala>:<spark>`` with the ``kafka-clients`` Spark pins. A
  PySpark release can reach PyPI before its Kafka connector reaches Maven Central (4.3.0 did); then
  the newest published earlier release of the same major version is used, with a warning;
* ``org.apache.hadoop:hadoop-aws:<hadoop>`` (the Hadoop version bundled with PySpark) and its AWS SDK,
  so jobs may also read and write ``s3a://`` paths;
* ``org.postgresql:postgresql`` for the JDBC reads.

The Spark, Scala and Hadoop versions are read from the installed PySpark's jar names, so an
upgraded PySpark fetches a matching set instead of mixing Scala or Hadoop versions.

Command line::

    python -m sluice.deploy.spark fetch        # prints the libs directory
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sluice.deploy import maven

logger = logging.getLogger(__name__)

POSTGRESQL_JDBC_VERSION: Final = "42.7.4"

_POM: Final = """<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by deploy/spark.py: the runtime classpath Sluice adds to PySpark for backfills. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.sluice.deploy</groupId>
  <artifactId>sluice-spark-extra</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <properties>
    <spark.kafka.version>0</spark.kafka.version>
    <scala.binary>2.13</scala.binary>
    <hadoop.version>0</hadoop.version>
    <postgresql.version>0</postgresql.version>
  </properties>
  <dependencies>
    <dependency>
      <groupId>org.apache.spark</groupId>
      <artifactId>spark-sql-kafka-0-10_${scala.binary}</artifactId>
      <version>${spark.kafka.version}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.hadoop</groupId>
      <artifactId>hadoop-aws</artifactId>
      <version>${hadoop.version}</version>
    </dependency>
    <dependency>
      <groupId>org.postgresql</groupId>
      <artifactId>postgresql</artifactId>
      <version>${postgresql.version}</version>
    </dependency>
  </dependencies>
</project>
"""


# Spark's parent pom declares a Google Cloud Storage mirror of Central as a repository; where that
# host is unreachable (or not allowed) resolution fails, so point it back at Central itself.
_SETTINGS: Final = """<?xml version="1.0" encoding="UTF-8"?>
<settings xmlns="http://maven.apache.org/SETTINGS/1.0.0">
  <mirrors>
    <mirror>
      <id>sluice-central-for-gcs</id>
      <mirrorOf>gcs-maven-central-mirror</mirrorOf>
      <url>https://repo.maven.apache.org/maven2</url>
    </mirror>
  </mirrors>
</settings>
"""


class SparkJarsError(RuntimeError):
    """PySpark is missing, or its extra jars could not be fetched."""


@dataclass(frozen=True)
class SparkVersions:
    """The versions of the installed PySpark's bundled Spark, Scala and Hadoop jars."""

    spark: str
    scala_binary: str
    hadoop: str


def pyspark_jars_dir() -> Path:
    """The ``jars`` directory of the installed PySpark (found without importing it)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.origin:
        raise SparkJarsError("PySpark is not installed; install Sluice's spark extra: pip install -e '.[spark]'")
    return Path(spec.origin).resolve().parent / "jars"


def installed_versions(jars_dir: Path | None = None) -> SparkVersions:
    """Spark, Scala binary and Hadoop versions from the jar names PySpark ships."""
    names = [p.name for p in (jars_dir or pyspark_jars_dir()).glob("*.jar")]
    spark = _first(names, r"spark-core_(\d+\.\d+)-(.+)\.jar")
    hadoop = _first(names, r"hadoop-client-api-(.+)\.jar")
    if spark is None or hadoop is None:
        raise SparkJarsError(f"cannot tell the Spark/Hadoop versions from PySpark's jars in {jars_dir}")
    return SparkVersions(spark=spark[1], scala_binary=spark[0], hadoop=hadoop[0])


def _first(names: list[str], pattern: str) -> tuple[str, ...] | None:
    for name in names:
        match = re.fullmatch(pattern, name)
        if match:
            return match.groups()
    return None


def extra_libs_dir(versions: SparkVersions | None = None) -> Path:
    """Where the extra jars for ``versions`` (default: the installed PySpark) live once fetched."""
    v = versions or installed_versions()
    return maven.libs_dir("spark-extra", _cache_version(v))


def _cache_version(v: SparkVersions) -> str:
    return f"{v.spark}-scala{v.scala_binary}-hadoop{v.hadoop}-pg{POSTGRESQL_JDBC_VERSION}"


def _kafka_connector_candidates(spark: str) -> list[str]:
    """``4.3.0`` → ``["4.3.0", "4.2.0", "4.1.1", "4.1.0", "4.0.1", "4.0.0"]``-like: the exact version, then
    earlier minor releases of the same major (newest patch first, as far as we can guess them)."""
    parts = spark.split(".")
    if len(parts) < 3 or not all(p.isdigit() for p in parts[:3]):
        return [spark]
    major, minor, patch = (int(p) for p in parts[:3])
    out = [spark] + [f"{major}.{minor}.{p}" for p in range(patch - 1, -1, -1)]
    for m in range(minor - 1, -1, -1):
        out += [f"{major}.{m}.{p}" for p in range(3, -1, -1)]
    return out


def _published(coordinate: str, mvn: str | None) -> bool:
    """True if ``coordinate`` and everything it depends on resolve (some mirrors hold only part of a release)."""
    exe = mvn or shutil.which("mvn")
    if not exe:
        return False
    result = subprocess.run(
        [exe, "-B", "-q", "dependency:get", f"-Dartifact={coordinate}"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300, check=False,
    )
    return result.returncode == 0


def kafka_connector_version(v: SparkVersions, mvn: str | None = None) -> str:
    """The spark-sql-kafka version to fetch: the installed Spark's, else the newest published earlier one."""
    for candidate in _kafka_connector_candidates(v.spark):
        if _published(f"org.apache.spark:spark-sql-kafka-0-10_{v.scala_binary}:{candidate}", mvn):
            if candidate != v.spark:
                logger.warning(
                    "spark-sql-kafka-0-10_%s:%s is not on Maven Central; using %s with PySpark %s",
                    v.scala_binary, v.spark, candidate, v.spark,
                )
            return candidate
    raise SparkJarsError(
        f"no spark-sql-kafka-0-10_{v.scala_binary} release for Spark {v.spark} (or an earlier {v.spark.split('.')[0]}.x) "
        "could be found on Maven Central with mvn"
    )


def ensure_spark_jars(versions: SparkVersions | None = None, *, mvn: str | None = None) -> Path:
    """The directory of the extra jars, fetched with Maven on first use (see :mod:`sluice.deploy.maven`)."""
    v = versions or installed_versions()
    version = _cache_version(v)
    home = maven.libs_dir("spark-extra", version).parent
    home.mkdir(parents=True, exist_ok=True)
    if maven.is_cached("spark-extra", version):
        return maven.libs_dir("spark-extra", version)
    pom = home / "pom.xml"
    if not pom.is_file() or pom.read_text(encoding="utf-8") != _POM:
        maven.write_atomically(pom, _POM)
    # mvn reads .mvn/maven.config from the project directory (the pom's), which deploy.maven's
    # command line does not otherwise let us extend.
    settings = home / "settings.xml"
    maven.write_atomically(settings, _SETTINGS)
    (home / ".mvn").mkdir(exist_ok=True)
    maven.write_atomically(home / ".mvn" / "maven.config", f"-s\n{settings}\n")
    kafka_version = kafka_connector_version(v, mvn)
    kafka_jar = f"spark-sql-kafka-0-10_{v.scala_binary}-{kafka_version}.jar"

    def check(jars: list[str]) -> str | None:
        wanted = [kafka_jar, f"hadoop-aws-{v.hadoop}.jar", f"postgresql-{POSTGRESQL_JDBC_VERSION}.jar"]
        missing = [j for j in wanted if j not in jars]
        return f"{', '.join(missing)} missing from its output" if missing else None

    return maven.ensure_jars(
        "spark-extra",
        version,
        pom=pom,
        properties={
            "spark.kafka.version": kafka_version,
            "scala.binary": v.scala_binary,
            "hadoop.version": v.hadoop,
            "postgresql.version": POSTGRESQL_JDBC_VERSION,
        },
        artifact=f"spark-sql-kafka-0-10_{v.scala_binary}:{kafka_version}, hadoop-aws:{v.hadoop}, postgresql:{POSTGRESQL_JDBC_VERSION}",
        check=check,
        mvn=mvn,
        error=SparkJarsError,
    )


def spark_jars(libs: Path) -> list[str]:
    """The jars to put on ``spark.jars``: the fetched set minus what PySpark already bundles.

    Maven resolves some of Spark's own transitive dependencies again (at possibly different
    versions); two copies of a class on the classpath is how ``NoSuchMethodError`` happens.
    """
    bundled = {_artifact(p.name) for p in pyspark_jars_dir().glob("*.jar")}
    return sorted(str(p) for p in libs.glob("*.jar") if _artifact(p.name) not in bundled)


def provisioned_jars() -> list[str]:
    """The jars a backfill session needs, fetched now if they are not cached: what the ``sluice``
    CLI hands to :func:`sluice.connectors.backfill.session.use_jar_source`."""
    return spark_jars(ensure_spark_jars())


def _artifact(jar_name: str) -> str:
    """``commons-pool2-2.12.0.jar`` → ``commons-pool2`` (the name without its version)."""
    match = re.match(r"(.+)-\d[\w.]*(?:-[A-Za-z]\w*)?\.jar$", jar_name)
    return match.group(1) if match else jar_name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sluice.deploy.spark", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("fetch", help="fetch the jars matching the installed PySpark and print their directory")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.command == "fetch":
        try:
            print(ensure_spark_jars())
        except SparkJarsError as exc:
            print(f"sluice.deploy.spark: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
