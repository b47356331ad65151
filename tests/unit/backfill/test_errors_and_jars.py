"""Spark errors as one readable message; the jar set deploy.spark hands to Spark."""

from __future__ import annotations

from typing import Any

from sluice.connectors.backfill.errors import spark_error_message
from sluice.deploy import spark as deploy_spark


class JavaThrowable:
    def __init__(self, name: str, message: str | None, cause: Any = None) -> None:
        self._name, self._message, self._cause = name, message, cause

    def getMessage(self) -> str | None:  # noqa: N802 - the Java method name
        return self._message

    def getCause(self) -> Any:  # noqa: N802
        return self._cause

    def getClass(self) -> Any:  # noqa: N802
        name = self._name

        class Cls:
            def getName(self) -> str:  # noqa: N802
                return name

        return Cls()


class Py4JLike(Exception):
    def __init__(self, java: JavaThrowable) -> None:
        super().__init__("An error occurred while calling o123.save.\n: org.apache.spark.SparkException: ...\n\tat org.apache.spark.Foo(Foo.scala:1)")
        self.java_exception = java


def test_the_innermost_java_cause_is_the_message() -> None:
    root = JavaThrowable("org.postgresql.util.PSQLException", "ERROR: division by zero")
    wrapper = JavaThrowable(
        "org.apache.spark.SparkException",
        "Job aborted due to stage failure: Task 0 in stage 1.0 failed 1 times, most recent failure: Lost task 0.0 in stage 1.0 (TID 1) (127.0.0.1 executor driver): org.postgresql.util.PSQLException: ERROR: division by zero",
        root,
    )
    assert spark_error_message(Py4JLike(wrapper)) == "PSQLException: ERROR: division by zero"


def test_python_worker_tracebacks_are_reduced_to_their_last_line() -> None:
    text = (
        "An exception was thrown from the Python worker:\nTraceback (most recent call last):\n"
        '  File "x.py", line 1, in run\n    raise\n'
        "sluice.connectors.api.errors.ConfigError: connection.url: no host\n SQLSTATE: 38000)"
    )
    assert spark_error_message(RuntimeError(text)) == "connection.url: no host"


def test_jars_pyspark_bundles_are_not_added_twice() -> None:
    assert deploy_spark._artifact("commons-pool2-2.12.0.jar") == "commons-pool2"
    assert deploy_spark._artifact("spark-sql-kafka-0-10_2.13-4.0.0.jar") == "spark-sql-kafka-0-10_2.13"
    assert deploy_spark._artifact("hadoop-client-api-3.4.1.jar") == "hadoop-client-api"


def test_kafka_connector_versions_fall_back_to_earlier_releases() -> None:
    candidates = deploy_spark._kafka_connector_candidates("4.3.0")
    assert candidates[:2] == ["4.3.0", "4.2.3"]
    assert "4.0.0" in candidates and candidates.index("4.1.0") < candidates.index("4.0.0")
