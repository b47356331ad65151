"""The backfill session gets Spark's extra jars from whoever provisions them, never from deploy itself:
the provider's own source first, else the process's (which the ``sluice`` CLI sets), else none."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.cli.standalone import run_standalone
from sluice.connectors.backfill import session
from sluice.connectors.backfill.session import SparkSessionProvider, SparkUnavailable, use_jar_source
from sluice.deploy import spark as deploy_spark


@pytest.fixture(autouse=True)
def no_process_source() -> Iterator[None]:
    use_jar_source(None)
    yield
    use_jar_source(None)


def test_without_a_source_no_jars_are_added() -> None:
    assert SparkSessionProvider()._extra_jars() == []


def test_the_process_source_serves_providers_without_their_own() -> None:
    use_jar_source(lambda: ("/opt/jars/a.jar", "/opt/jars/b.jar"))
    assert SparkSessionProvider()._extra_jars() == ["/opt/jars/a.jar", "/opt/jars/b.jar"]
    assert SparkSessionProvider(jars=lambda: ["/own.jar"])._extra_jars() == ["/own.jar"]
    assert SparkSessionProvider(fetch_jars=False)._extra_jars() == []


def test_a_failing_source_makes_spark_unavailable_with_its_message() -> None:
    def no_maven() -> list[str]:
        raise deploy_spark.SparkJarsError("mvn not found on PATH")

    with pytest.raises(SparkUnavailable, match="mvn not found on PATH"):
        SparkSessionProvider(jars=no_maven)._extra_jars()


def test_the_cli_hands_the_dev_stack_fetcher_to_the_worker_without_fetching(tmp_path: Path) -> None:
    assert run_standalone(str(tmp_path / "missing.properties"), []) == 2
    assert session._process_jar_source is deploy_spark.provisioned_jars
