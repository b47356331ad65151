"""The root cause of a Spark failure, whether the driver got it as a Java object or only as text.

The texts are real Spark 4 / py4j output of a JDBC read failing in an executor (abridged frames).
The same failure reaches the driver in two shapes: with the task's exception deserialized as the
``SparkException``'s cause, or — when the driver cannot deserialize it — only as text embedded in
the ``SparkException``'s message. A user must get the same message from both.
"""

from __future__ import annotations

from typing import Any

import pytest

from sluice.connectors.backfill.errors import spark_error_message
from tests.unit.backfill.test_errors_and_jars import JavaThrowable

TASK_FAILURE = (
    "Job aborted due to stage failure: Task 0 in stage 3.0 failed 1 times, most recent failure: Lost task 0.0 in stage 3.0 "
    "(TID 9) (localhost executor driver): org.postgresql.util.PSQLException: ERROR: division by zero\n"
    "\tat org.postgresql.core.v3.QueryExecutorImpl.receiveErrorResponse(QueryExecutorImpl.java:2733)\n"
    "\tat org.postgresql.jdbc.PgPreparedStatement.executeQuery(PgPreparedStatement.java:137)\n"
    "\tat org.apache.spark.sql.execution.datasources.jdbc.JDBCRDD.$anonfun$compute$9(JDBCRDD.scala:375)\n"
    "\tat org.apache.spark.sql.execution.metric.SQLMetrics$.withTimingNs(SQLMetrics.scala:234)\n"
    "\tat org.apache.spark.scheduler.ResultTask.runTask(ResultTask.scala:93)\n"
    "\tat org.apache.spark.executor.Executor$TaskRunner.run(Executor.scala:906)\n"
    "\tat java.base/java.util.concurrent.ThreadPoolExecutor.runWorker(ThreadPoolExecutor.java:1136)\n"
    "\tat java.base/java.util.concurrent.ThreadPoolExecutor$Worker.run(ThreadPoolExecutor.java:635)\n"
    "\tat java.base/java.lang.Thread.run(Thread.java:840)\n"
    "\n"
    "Driver stacktrace:"
)
DRIVER_FRAMES = (
    "\tat org.apache.spark.scheduler.DAGScheduler.$anonfun$abortStage$3(DAGScheduler.scala:4568)\n"
    "\tat scala.Option.getOrElse(Option.scala:201)\n"
    "\tat org.apache.spark.SparkContext.runJob(SparkContext.scala:2499)\n"
    "\tat java.base/jdk.internal.reflect.DirectMethodHandleAccessor.invoke(DirectMethodHandleAccessor.java:103)\n"
    "\tat py4j.reflection.MethodInvoker.invoke(MethodInvoker.java:244)\n"
    "\tat java.base/java.lang.Thread.run(Thread.java:840)\n"
)
#: ``str(Py4JJavaError)``: the call, then the Java ``printStackTrace`` of the SparkException.
PY4J_STR = (
    "An error occurred while calling o52.save.\n: org.apache.spark.SparkException: "
    + TASK_FAILURE
    + "\n"
    + DRIVER_FRAMES
    + "Caused by: org.postgresql.util.PSQLException: ERROR: division by zero\n"
    "\tat org.postgresql.core.v3.QueryExecutorImpl.receiveErrorResponse(QueryExecutorImpl.java:2733)\n"
    "\t... 24 more\n"
)
ROOT = "PSQLException: ERROR: division by zero"


class DeadJvm(JavaThrowable):
    def getMessage(self) -> str | None:  # noqa: N802
        raise ConnectionError("Answer from Java side is empty")


class Py4JJavaErrorLike(Exception):
    def __init__(self, java: Any, text: str = PY4J_STR) -> None:
        super().__init__(text)
        self.java_exception = java


class CapturedLike(Exception):
    """PySpark's CapturedException: ``desc`` and the Java throwable as ``_origin``."""

    def __init__(self, java: Any, desc: str) -> None:
        super().__init__(desc)
        self.desc = desc
        self._origin = java


def _assert_clean(message: str) -> None:
    assert "py4j" not in message.lower()
    assert "\tat " not in message and "\n    at " not in message and " at java.base/" not in message
    assert "Driver stacktrace" not in message and "more" not in message.split(": ", 1)[-1]


def test_the_cause_object_gives_the_database_error() -> None:
    java = JavaThrowable("org.apache.spark.SparkException", TASK_FAILURE, JavaThrowable("org.postgresql.util.PSQLException", "ERROR: division by zero"))
    message = spark_error_message(Py4JJavaErrorLike(java))
    assert message == ROOT
    _assert_clean(message)


def test_a_task_failure_the_driver_could_not_deserialize_gives_the_same_message() -> None:
    # getCause() is None: only the task's printed exception, inside the stage failure's text.
    java = JavaThrowable("org.apache.spark.SparkException", TASK_FAILURE)
    message = spark_error_message(Py4JJavaErrorLike(java, "An error occurred while calling o52.save.\n: org.apache.spark.SparkException: " + TASK_FAILURE + "\n" + DRIVER_FRAMES))
    assert message == ROOT
    _assert_clean(message)


@pytest.mark.parametrize(
    "text",
    [
        PY4J_STR,
        # no "Caused by:" section: the root is only in the head
        "An error occurred while calling o52.save.\n: org.apache.spark.SparkException: " + TASK_FAILURE + "\n" + DRIVER_FRAMES,
        # the pre-3.0 "Lost task" spelling
        PY4J_STR.replace("(TID 9) (localhost executor driver)", "(TID 9, localhost, executor driver)"),
    ],
)
def test_the_printed_stack_alone_gives_the_same_message(text: str) -> None:
    """When the JVM cannot be asked (it is shutting down), ``str(exc)`` is all there is."""
    message = spark_error_message(Py4JJavaErrorLike(DeadJvm("x", None), text))
    assert message == ROOT
    _assert_clean(message)


def test_the_whole_chain_is_walked_through_several_wrappers() -> None:
    # Spark 4 wraps a write task's failure twice ([TASK_WRITE_FAILED], an ExecutionException of the
    # write's future) before the database error, whose message has PostgreSQL's detail lines.
    pg = "ERROR: insert or update on table \"orders\" violates foreign key constraint \"orders_customer_fkey\"\n  Detail: Key (customer)=(7) is not present in table \"customers\"."
    root = JavaThrowable("org.postgresql.util.PSQLException", pg)
    batch = JavaThrowable("java.sql.BatchUpdateException", "Batch entry 0 INSERT INTO orders VALUES (1, 7) was aborted: " + pg.split("\n")[0] + "  Call getNextException to see other errors in the batch.", root)
    write = JavaThrowable("org.apache.spark.SparkException", "[TASK_WRITE_FAILED] Task failed while writing rows to orders. SQLSTATE: 58030", batch)
    future = JavaThrowable("java.util.concurrent.ExecutionException", "org.apache.spark.SparkException: [TASK_WRITE_FAILED] Task failed while writing rows", write)
    top = JavaThrowable("org.apache.spark.SparkException", "Job aborted due to stage failure: " + TASK_FAILURE.split(": ", 1)[1], future)
    message = spark_error_message(Py4JJavaErrorLike(top))
    assert message == "PSQLException: " + pg  # the detail line too: nothing after the cause is cut
    _assert_clean(message)


def test_a_messageless_root_does_not_hide_the_message_above_it() -> None:
    interrupted = JavaThrowable("java.lang.InterruptedException", None)
    kafka = JavaThrowable("org.apache.kafka.common.errors.InterruptException", "Flush interrupted.", interrupted)
    top = JavaThrowable("org.apache.spark.SparkException", "Job aborted.", kafka)
    assert spark_error_message(Py4JJavaErrorLike(top)) == "InterruptException: Flush interrupted."


def test_a_driver_side_failure_without_a_cause_keeps_its_message() -> None:
    shut = JavaThrowable("org.apache.spark.SparkException", "Job 3 cancelled because SparkContext was shut down")
    assert spark_error_message(Py4JJavaErrorLike(shut)) == "Job 3 cancelled because SparkContext was shut down"


def test_pyspark_captured_exceptions_use_their_java_origin() -> None:
    java = JavaThrowable(
        "org.apache.spark.sql.AnalysisException",
        "[TABLE_OR_VIEW_NOT_FOUND] The table or view `missing` cannot be found. SQLSTATE: 42P01",
    )
    message = spark_error_message(CapturedLike(java, "[TABLE_OR_VIEW_NOT_FOUND] …\n\nJVM stacktrace:\norg.apache.spark.sql.AnalysisException"))
    assert message == "AnalysisException: [TABLE_OR_VIEW_NOT_FOUND] The table or view `missing` cannot be found. SQLSTATE: 42P01"


def test_a_long_root_message_is_kept_whole_up_to_a_generous_cap() -> None:
    detail = "ERROR: division by zero\n  Where: " + "x" * 1500
    root = JavaThrowable("org.postgresql.util.PSQLException", detail)
    message = spark_error_message(Py4JJavaErrorLike(JavaThrowable("org.apache.spark.SparkException", TASK_FAILURE, root)))
    assert message == "PSQLException: " + detail
    huge = JavaThrowable("org.postgresql.util.PSQLException", "ERROR: division by zero " + "y" * 10_000)
    capped = spark_error_message(Py4JJavaErrorLike(JavaThrowable("org.apache.spark.SparkException", TASK_FAILURE, huge)))
    assert capped.startswith("PSQLException: ERROR: division by zero") and len(capped) <= 4000


def test_errors_that_are_not_spark_ones_keep_their_text() -> None:
    assert spark_error_message(RuntimeError("cannot create topic t: Broker: Invalid replication factor")) == (
        "cannot create topic t: Broker: Invalid replication factor"
    )
