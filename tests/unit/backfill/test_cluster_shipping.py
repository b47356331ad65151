"""Backfills on a Spark cluster, without one: the Kafka connector version chosen for the installed
Spark, the Python the executors start, what is packed for them, and the worker keys it reads."""

from __future__ import annotations

import logging
import os
import sys
import zipfile
from pathlib import Path

import pytest

from sluice.connectors.backfill import pyenv, session
from sluice.connectors.backfill.session import SparkSessionProvider, executor_python
from sluice.deploy import spark
from sluice.worker.config.models import WorkerConfig


def _jar(path: Path, classes: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as jar:
        for name, body in classes.items():
            jar.writestr(name + ".class", body)
    return path


def test_a_connector_referring_to_a_class_spark_lacks_is_reported(tmp_path: Path) -> None:
    jar = _jar(
        tmp_path / "kafka.jar",
        {
            "org/apache/spark/sql/kafka010/KafkaDataConsumer": b"\x00\x2aorg/apache/spark/internal/LogKeys$CONSUMER$\x01"
            b"(Lorg/apache/spark/sql/SparkSession;)V\x00org/apache/spark/sql/kafka010/KafkaDataConsumer",
        },
    )
    available = {"org/apache/spark/sql/SparkSession", "org/apache/spark/sql/kafka010/KafkaDataConsumer"}
    assert spark.missing_spark_classes(jar, available) == ["org/apache/spark/internal/LogKeys$CONSUMER$"]
    assert spark.missing_spark_classes(jar, available | {"org/apache/spark/internal/LogKeys$CONSUMER$"}) == []


def test_the_newest_connector_whose_classes_all_exist_is_chosen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    pyspark_jars = tmp_path / "pyspark-jars"
    pyspark_jars.mkdir()
    _jar(pyspark_jars / "spark-common-utils_2.13-4.3.0.jar", {"org/apache/spark/internal/LogKeys$TOPIC$": b""})
    monkeypatch.setattr(spark, "pyspark_jars_dir", lambda: pyspark_jars)
    refs = {  # what each published release's classes refer to
        "4.2.1": b"org/apache/spark/internal/LogKeys$CONSUMER$",
        "4.2.0": b"org/apache/spark/internal/LogKeys$TOPIC$",
    }

    def published(coordinate: str, mvn: object, settings: object, probe: Path) -> Path | None:
        _, artifact, version = coordinate.split(":")
        if version not in refs:
            return None
        return _jar(probe / f"{artifact}-{version}.jar", {f"org/apache/spark/{artifact}/Own": refs[version]})

    monkeypatch.setattr(spark, "_published_jar", published)
    versions = spark.SparkVersions(spark="4.3.0", scala_binary="2.13", hadoop="3.5.0")
    with caplog.at_level(logging.WARNING):
        assert spark.kafka_connector_version(versions) == "4.2.0"
    assert "using 4.2.0, whose Spark classes all exist in PySpark 4.3.0" in caplog.text

    refs.pop("4.2.0")
    with pytest.raises(
        spark.SparkJarsError,
        match=r"rejected as incompatible: 4\.2\.1 \(needs org/apache/spark/internal/LogKeys\$CONSUMER\$",
    ):
        spark.kafka_connector_version(versions)


def test_a_token_provider_that_cannot_be_fetched_is_retried_and_never_taken_for_incompatibility(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pyspark_jars = tmp_path / "pyspark-jars"
    pyspark_jars.mkdir()
    _jar(pyspark_jars / "spark-core_2.13-4.3.0.jar", {"org/apache/spark/SparkConf": b""})
    monkeypatch.setattr(spark, "pyspark_jars_dir", lambda: pyspark_jars)
    failures = {"spark-token-provider-kafka-0-10_2.13:4.2.0": 1}  # one blip, then it resolves
    calls: list[str] = []

    def published(coordinate: str, mvn: object, settings: object, probe: Path) -> Path | None:
        _, artifact, version = coordinate.split(":")
        calls.append(f"{artifact}:{version}")
        if version != "4.2.0" or failures.get(f"{artifact}:{version}", 0) > 0:
            failures[f"{artifact}:{version}"] = failures.get(f"{artifact}:{version}", 1) - 1
            return None
        if artifact.startswith("spark-sql-kafka"):  # the connector uses a class of the token provider
            return _jar(
                probe / f"{artifact}-{version}.jar",
                {"org/apache/spark/sql/kafka010/Source": b"org/apache/spark/kafka010/KafkaConfigUpdater"},
            )
        return _jar(
            probe / f"{artifact}-{version}.jar",
            {"org/apache/spark/kafka010/KafkaConfigUpdater": b"org/apache/spark/SparkConf"},
        )

    monkeypatch.setattr(spark, "_published_jar", published)
    versions = spark.SparkVersions(spark="4.3.0", scala_binary="2.13", hadoop="3.5.0")
    assert spark.kafka_connector_version(versions) == "4.2.0"

    failures["spark-token-provider-kafka-0-10_2.13:4.2.0"] = 2  # never resolves: said so, not "incompatible"
    with pytest.raises(spark.SparkJarsError, match=r"not checked: 4\.2\.0 \(its spark-token-provider") as raised:
        spark.kafka_connector_version(versions)
    assert "rejected" not in str(raised.value)

    # The choice is remembered beside the jars: a second process does not probe Maven again.
    monkeypatch.setattr(spark, "kafka_connector_version", lambda *a: "4.2.0")
    assert spark._chosen_kafka_version(tmp_path, versions, None, tmp_path / "settings.xml") == "4.2.0"
    monkeypatch.setattr(spark, "kafka_connector_version", lambda *a: pytest.fail("checked twice"))
    assert spark._chosen_kafka_version(tmp_path, versions, None, tmp_path / "settings.xml") == "4.2.0"


def test_executors_start_the_configured_python_and_on_a_cluster_never_this_path() -> None:
    assert (
        executor_python({"spark.master": "spark://h:7077", "spark.pyspark.python": "/opt/py/bin/python"})
        == "/opt/py/bin/python"
    )
    assert executor_python({"spark.master": "spark://h:7077"}) == f"python{sys.version_info[0]}.{sys.version_info[1]}"
    assert executor_python({"spark.master": "local[2]"}) in (sys.executable, session.os.environ.get("PYSPARK_PYTHON"))


def test_the_executor_archive_holds_sluice_and_its_dependencies_but_not_pyspark() -> None:
    names = {d.metadata["Name"].lower().replace("_", "-") for d in pyenv.executor_distributions()}
    assert {"sluice", "pydantic", "pydantic-core", "confluent-kafka", "pyarrow", "boto3", "psycopg-binary"} <= names
    assert not names & {"pyspark", "py4j", "pytest", "mypy", "ruff"}
    contents = pyenv._contents()
    assert "sluice/connectors/backfill/session.py" in contents
    assert "sluice/worker/backfill/sink_runner.py" in contents  # the tasks' code, through the editable links
    assert any(
        n.endswith(".dist-info/entry_points.txt") and n.startswith("sluice-") for n in contents
    )  # plugin discovery
    assert not any(n.startswith(("pyspark/", "py4j/")) or "__pycache__" in n for n in contents)


def test_a_cluster_session_ships_the_archive_beside_what_the_operator_ships(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(session, "executor_archive", lambda: tmp_path / "env.zip")
    confs = {
        "spark.master": "spark://h:7077",
        "spark.archives": "s3a://b/extra.tgz#extra",
        "spark.executorEnv.PYTHONPATH": "extra",
    }
    SparkSessionProvider()._ship_python(confs)
    assert confs["spark.archives"] == f"s3a://b/extra.tgz#extra,{tmp_path / 'env.zip'}#sluice-pyenv"
    assert confs["spark.executorEnv.PYTHONPATH"].split(":") == ["sluice-pyenv", "extra"]


def test_the_failing_executor_line_is_the_message() -> None:
    error = RuntimeError(
        "Job aborted due to stage failure: Task 0 failed\n  File \"x\", line 1\nModuleNotFoundError: No module named 'sluice'\n\tat org.x"
    )
    assert session._first_error_line(error) == "ModuleNotFoundError: No module named 'sluice'"


def test_backfill_keys_are_not_reported_as_unused(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="sluice.worker.config.models"):
        WorkerConfig.from_mapping(
            {
                "bootstrap.servers": "b:9092",
                "backfill.spark.master": "spark://h:7077",
                "backfill.storage.file.filename": "x",
                "frobnicate": "1",
            }
        )
    assert "'frobnicate' is not used by Sluice" in caplog.text
    assert "backfill." not in caplog.text


def test_the_three_most_recently_used_executor_archives_are_kept(tmp_path: Path) -> None:
    for age, name in enumerate(["e", "d", "c", "b", "a"]):  # "a" the oldest
        archive = tmp_path / f"sluice-pyenv-py3.11-{name}.zip"
        archive.write_bytes(b"")
        os.utime(archive, (1_000_000 - age * 60, 1_000_000 - age * 60))
    pyenv._prune(tmp_path, "sluice-pyenv-py3.11-*.zip")
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"sluice-pyenv-py3.11-{n}.zip" for n in "cde"]
