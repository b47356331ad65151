"""The extra jars a Spark backfill needs, fetched from Maven Central with ``mvn`` to match PySpark.

PySpark ships Spark's core jars but not its Kafka data source, S3A or a JDBC driver. They are
resolved with ``mvn dependency:copy-dependencies`` (never ``spark.jars.packages``: Ivy fetching is
not allowed everywhere Maven is) into ``~/.cache/sluice/spark-extra-<spark version>/libs`` through
:mod:`sluice.deploy.maven`, once per Spark version:

* ``org.apache.spark:spark-sql-kafka-0-10_<scala>:<spark>`` with the ``kafka-clients``,
  ``spark-token-provider-kafka`` and ``commons-pool2`` it pins. A PySpark release can reach PyPI
  before its Kafka connector reaches Maven Central (4.3.0 did); then the newest published earlier
  release of the same major version *whose every reference to a Spark class resolves in the
  installed Spark* is used, with a warning. That check matters: Spark renames internal classes
  between minor releases (``LogKeys$CONSUMER$`` is gone from 4.3.0), and a connector built
  against them fails only on the code path that touches one — an executor logging at INFO;
* ``org.apache.hadoop:hadoop-aws:<hadoop>`` (the Hadoop version bundled with PySpark) and its AWS SDK,
  so jobs may also read and write ``s3a://`` paths;
* ``org.postgresql:postgresql`` and ``com.mysql:mysql-connector-j`` for the JDBC reads.

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
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sluice.deploy import maven

log = logging.getLogger(__name__)

POSTGRESQL_JDBC_VERSION: Final = "42.7.4"
MYSQL_JDBC_VERSION: Final = "26.10.0"
#: The dependency plugin named in full: its bare prefix resolves to Maven's default 2.8, whose ``get``
#: also asks for test jars some mirrors do not hold.
_DEPENDENCY_PLUGIN: Final = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
#: Bumped when the set of fetched jars changes, so an older cache is not taken for this one.
_LAYOUT: Final = "r2"

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
    <mysql.version>0</mysql.version>
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
    <dependency>
      <groupId>com.mysql</groupId>
      <artifactId>mysql-connector-j</artifactId>
      <version>${mysql.version}</version>
      <exclusions>
        <!-- Only its X DevAPI and Oracle Cloud authentication use these; JDBC reads do not. -->
        <exclusion><groupId>com.google.protobuf</groupId><artifactId>*</artifactId></exclusion>
        <exclusion><groupId>com.oracle.oci.sdk</groupId><artifactId>*</artifactId></exclusion>
      </exclusions>
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
    return f"{v.spark}-scala{v.scala_binary}-hadoop{v.hadoop}-pg{POSTGRESQL_JDBC_VERSION}-mysql{MYSQL_JDBC_VERSION}-{_LAYOUT}"


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


def _mvn_quiet(args: list[str], mvn: str | None, settings: Path | None) -> bool:
    """Run ``mvn args`` (with Sluice's settings, see ``_SETTINGS``); True if it succeeded.

    ``-U``: Maven otherwise remembers a failed download for a day, so one network blip (or two
    processes racing on the local repository) would keep a published jar "missing" until tomorrow.
    """
    exe = mvn or shutil.which("mvn")
    if not exe:
        return False
    cmd = [exe, "-B", "-q", "-U", *(["-s", str(settings)] if settings else []), *args]
    try:
        result = subprocess.run(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=300,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0


def _published_jar(coordinate: str, mvn: str | None, settings: Path | None, probe_dir: Path) -> Path | None:
    """The jar of ``coordinate`` copied into ``probe_dir`` if it and everything it depends on resolve
    (some mirrors hold only part of a release), else None."""
    if not _mvn_quiet([f"{_DEPENDENCY_PLUGIN}:get", f"-Dartifact={coordinate}"], mvn, settings):
        return None
    if not _mvn_quiet(
        [f"{_DEPENDENCY_PLUGIN}:copy", f"-Dartifact={coordinate}", f"-DoutputDirectory={probe_dir}"], mvn, settings
    ):
        return None
    group, artifact, version = coordinate.split(":")
    jar = probe_dir / f"{artifact}-{version}.jar"
    return jar if jar.is_file() else None


def spark_classes(jar_paths: list[Path]) -> set[str]:
    """The ``org/apache/spark/...`` class names (no ``.class``) the jars define."""
    names: set[str] = set()
    for path in jar_paths:
        with zipfile.ZipFile(path) as jar:
            names.update(
                n[: -len(".class")]
                for n in jar.namelist()
                if n.startswith("org/apache/spark/") and n.endswith(".class")
            )
    return names


def missing_spark_classes(jar: Path, available: set[str]) -> list[str]:
    """The Spark classes ``jar`` refers to that are not in ``available``: what would be a
    ``ClassNotFoundException`` (or ``NoClassDefFoundError``) once the code using them runs.

    A class file names every class it uses in its constant pool, as ``org/apache/spark/...`` UTF-8
    strings (alone or inside ``L...;`` descriptors), so a byte scan finds them without a parser.
    """
    missing: set[str] = set()
    with zipfile.ZipFile(jar) as archive:
        for name in archive.namelist():
            if not name.endswith(".class"):
                continue
            for ref in _SPARK_CLASS_REF.findall(archive.read(name)):
                text = ref.decode("ascii")
                if text not in available and not text.endswith("/"):
                    missing.add(text)
    return sorted(missing)


_SPARK_CLASS_REF: Final = re.compile(rb"org/apache/spark/[A-Za-z0-9_/$]+")


def _connector_jars(
    v: SparkVersions, candidate: str, mvn: str | None, settings: Path | None, probe: Path
) -> list[Path] | str | None:
    """The Kafka connector jar of ``candidate`` and its token provider (the only other Spark jar
    it brings, holding classes the connector uses, e.g. ``KafkaConfigUpdater``); None when the
    release is not published, or why it could not be checked."""
    jar = _published_jar(f"org.apache.spark:spark-sql-kafka-0-10_{v.scala_binary}:{candidate}", mvn, settings, probe)
    if jar is None:
        return None
    coordinate = f"org.apache.spark:spark-token-provider-kafka-0-10_{v.scala_binary}:{candidate}"
    # Published with the connector, so a failure here is the network or the local repository:
    # try once more rather than judge the release on half its classes.
    tokens = _published_jar(coordinate, mvn, settings, probe) or _published_jar(coordinate, mvn, settings, probe)
    if tokens is None:
        return f"{candidate} (its spark-token-provider-kafka-0-10 could not be fetched)"
    return [jar, tokens]


def kafka_connector_version(v: SparkVersions, mvn: str | None = None, settings: Path | None = None) -> str:
    """The spark-sql-kafka version to fetch: the installed Spark's, else the newest published earlier
    one that uses no Spark class the installed Spark lacks (checked against PySpark's jars plus the
    release's own Kafka connector and token-provider jars)."""
    available = spark_classes(sorted(pyspark_jars_dir().glob("*.jar")))
    rejected: list[str] = []
    unchecked: list[str] = []
    with tempfile.TemporaryDirectory(prefix="sluice-spark-probe-") as probe:
        for candidate in _kafka_connector_candidates(v.spark):
            jars = _connector_jars(v, candidate, mvn, settings, Path(probe))
            if jars is None:
                continue
            if isinstance(jars, str):
                unchecked.append(jars)
                continue
            try:
                own = spark_classes(jars)
                missing = sorted({m for j in jars for m in missing_spark_classes(j, available | own)})
            except (OSError, zipfile.BadZipFile) as exc:
                unchecked.append(f"{candidate} (its jars could not be read: {exc})")
                continue
            if missing:
                rejected.append(f"{candidate} (needs {missing[0]} and {len(missing) - 1} more)")
                continue
            if candidate != v.spark:
                log.warning(
                    "spark-sql-kafka-0-10_%s:%s is not on Maven Central; using %s, whose Spark classes all exist in PySpark %s",
                    v.scala_binary,
                    v.spark,
                    candidate,
                    v.spark,
                )
            return candidate
    raise SparkJarsError(
        f"no spark-sql-kafka-0-10_{v.scala_binary} release for Spark {v.spark} (or an earlier {v.spark.split('.')[0]}.x) "
        "that runs on it could be found on Maven Central with mvn"
        + (f"; rejected as incompatible: {', '.join(rejected)}" if rejected else "")
        + (f"; not checked: {', '.join(unchecked)} (retry when Maven Central is reachable)" if unchecked else "")
    )


def _chosen_kafka_version(home: Path, v: SparkVersions, mvn: str | None, settings: Path) -> str:
    """:func:`kafka_connector_version`, remembered in ``home`` so the dozens of Maven calls of the
    check run once per installed Spark, not once per process (or per failed fetch)."""
    remembered = home / "spark-sql-kafka.version"
    if remembered.is_file():
        text = remembered.read_text(encoding="utf-8").strip()
        if re.fullmatch(r"\d+\.\d+\.\d+", text):
            return text
    chosen = kafka_connector_version(v, mvn, settings)
    maven.write_atomically(remembered, chosen + "\n")
    return chosen


def ensure_spark_jars(versions: SparkVersions | None = None, *, mvn: str | None = None) -> Path:
    """The directory of the extra jars, fetched with Maven on first use (see :mod:`sluice.deploy.maven`)."""
    v = versions or installed_versions()
    version = _cache_version(v)
    libs = maven.libs_dir("spark-extra", version)
    if maven.is_cached("spark-extra", version):
        return libs
    home = libs.parent
    home.mkdir(parents=True, exist_ok=True)
    # A lock of its own (ensure_jars takes ".lock" for the fetch): without it the first backfill of
    # a worker, a test session and `make spark` would choose at once, racing in Maven's local
    # repository, where a half-written jar looks unpublished.
    with maven.exclusive_lock(home / ".choose.lock"):
        if maven.is_cached("spark-extra", version):  # another process finished while we waited
            return libs
        pom = home / "pom.xml"
        if not pom.is_file() or pom.read_text(encoding="utf-8") != _POM:
            maven.write_atomically(pom, _POM)
        # mvn reads .mvn/maven.config from the project directory (the pom's), which deploy.maven's
        # command line does not otherwise let us extend.
        settings = home / "settings.xml"
        maven.write_atomically(settings, _SETTINGS)
        (home / ".mvn").mkdir(exist_ok=True)
        maven.write_atomically(home / ".mvn" / "maven.config", f"-s\n{settings}\n")
        kafka_version = _chosen_kafka_version(home, v, mvn, settings)
        return maven.ensure_jars(
            "spark-extra",
            version,
            pom=pom,
            properties={
                "spark.kafka.version": kafka_version,
                "scala.binary": v.scala_binary,
                "hadoop.version": v.hadoop,
                "postgresql.version": POSTGRESQL_JDBC_VERSION,
                "mysql.version": MYSQL_JDBC_VERSION,
            },
            artifact=f"spark-sql-kafka-0-10_{v.scala_binary}:{kafka_version}, hadoop-aws:{v.hadoop}, "
            f"postgresql:{POSTGRESQL_JDBC_VERSION}, mysql-connector-j:{MYSQL_JDBC_VERSION}",
            check=lambda jars: _missing_from_fetch(jars, v, kafka_version),
            mvn=mvn,
            error=SparkJarsError,
        )


def _missing_from_fetch(jars: list[str], v: SparkVersions, kafka_version: str) -> str | None:
    """What the fetched jar names lack (a name ending in ``-`` matches any version), or None."""
    wanted = [
        f"spark-sql-kafka-0-10_{v.scala_binary}-{kafka_version}.jar",
        f"spark-token-provider-kafka-0-10_{v.scala_binary}-{kafka_version}.jar",
        "commons-pool2-",
        "kafka-clients-",
        f"hadoop-aws-{v.hadoop}.jar",
        "bundle-",  # the AWS SDK v2 bundle hadoop-aws uses
        f"postgresql-{POSTGRESQL_JDBC_VERSION}.jar",
        f"mysql-connector-j-{MYSQL_JDBC_VERSION}.jar",
    ]
    missing = [w for w in wanted if not any(j == w or (w.endswith("-") and j.startswith(w)) for j in jars)]
    return f"{', '.join(missing)} missing from its output" if missing else None


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
