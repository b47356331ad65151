"""Backfill job kinds are plugins: the worker finds them by name through the ``sluice.backfill_kinds``
entry points, refuses an unknown kind with a clear error, reports a kind that fails to load and keeps
the others, and checks a spec (its source URL, the hand-off guard) through the kind's hooks."""

from __future__ import annotations

import logging
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest

from sluice.connectors.api import ConfigError
from sluice.connectors.backfill.context import BackfillRuntime, JobContext
from sluice.connectors.backfill.kinds import ENTRY_POINT_GROUP, BackfillKind
from sluice.worker.backfill import BackfillManager, JobState, MemoryBackfillStore, models
from sluice.worker.backfill import manager as backfill_manager
from sluice.worker.backfill.kind_registry import BackfillKindRegistry, installed_kinds
from sluice.worker.herder import BadRequest

REPO = Path(__file__).resolve().parents[3]


def _echo(spark: Any, spec: Any, ctx: JobContext, bootstrap: str, runtime: BackfillRuntime) -> dict[str, Any]:
    ctx.progress(rows_total=3, rows_done=3)
    return {"kind": spec.kind, "bootstrap": bootstrap, "job_group": ctx.job_group}


#: A third party's kind, as an entry point would name it.
TOPIC_TO_SINK_ECHO = BackfillKind("topic_to_sink", _echo)
NOT_A_KIND = object()


def entry_point(name: str, target: str) -> EntryPoint:
    return EntryPoint(name=name, value=target, group=ENTRY_POINT_GROUP)


def registry(**targets: str) -> BackfillKindRegistry:
    return BackfillKindRegistry([entry_point(name, target) for name, target in targets.items()])


def test_sluice_declares_its_four_kinds_as_entry_points() -> None:
    kinds = installed_kinds()
    assert {"jdbc_to_topic", "s3_to_topic", "topic_to_s3", "topic_to_sink"} <= set(kinds.names())
    for name in ("jdbc_to_topic", "s3_to_topic", "topic_to_s3", "topic_to_sink"):
        assert kinds.get(name).name == name
    assert kinds.get("jdbc_to_topic").source_url_problem is not None
    assert kinds.get("jdbc_to_topic").topic_owner is not None


def test_a_kind_is_found_by_its_entry_point_name() -> None:
    kinds = registry(echo_kind=f"{__name__}:TOPIC_TO_SINK_ECHO", topic_to_sink=f"{__name__}:TOPIC_TO_SINK_ECHO")
    assert kinds.names() == ["echo_kind", "topic_to_sink"]
    assert kinds.get("topic_to_sink") is TOPIC_TO_SINK_ECHO


def test_an_unknown_kind_is_a_config_error_on_kind() -> None:
    with pytest.raises(ConfigError) as info:
        registry().get("csv_to_topic")
    assert str(info.value) == "kind: unknown job kind 'csv_to_topic'"
    assert info.value.key == "kind"


def test_a_kind_that_fails_to_load_is_reported_once_and_the_others_still_load(caplog: pytest.LogCaptureFixture) -> None:
    kinds = registry(
        broken="sluice_no_such_plugin.kinds:KIND",
        impostor=f"{__name__}:NOT_A_KIND",
        topic_to_sink=f"{__name__}:TOPIC_TO_SINK_ECHO",
    )
    with caplog.at_level(logging.ERROR, logger="sluice.worker.backfill.kind_registry"):
        for _ in range(2):
            with pytest.raises(ConfigError, match="kind: job kind 'broken' cannot be loaded on this worker") as info:
                kinds.get("broken")
            assert "No module named 'sluice_no_such_plugin'" in str(info.value)
        with pytest.raises(ConfigError, match="is not a BackfillKind named 'impostor'"):
            kinds.get("impostor")
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        "Cannot load backfill job kind broken from entry point sluice_no_such_plugin.kinds",
        "Cannot load backfill job kind impostor from entry point tests.unit.backfill.test_kind_registry",
    ]
    assert kinds.get("topic_to_sink") is TOPIC_TO_SINK_ECHO


def test_the_first_of_two_entry_points_with_one_name_wins(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="sluice.worker.backfill.kind_registry"):
        kinds = BackfillKindRegistry(
            [entry_point("topic_to_sink", f"{__name__}:TOPIC_TO_SINK_ECHO"), entry_point("topic_to_sink", "x:Y")]
        )
    assert kinds.get("topic_to_sink") is TOPIC_TO_SINK_ECHO
    assert "declared twice" in caplog.text


JDBC_SPEC = {"id": "j", "kind": "jdbc_to_topic", "source": {"table": "t"}, "target": {"topic": "x"}}


def test_the_source_url_is_checked_by_the_kind_at_parse_time(monkeypatch: pytest.MonkeyPatch) -> None:
    good = {**JDBC_SPEC, "source": {"connection.url": "jdbc:postgresql://db/shop", "table": "t"}}
    parsed = models.parse_spec(good)
    assert isinstance(parsed, models.JdbcToTopicSpec)
    assert parsed.source.connection_url == "jdbc:postgresql://db/shop"
    with pytest.raises(ConfigError, match=r"^source\.connection\.url: ") as info:
        models.parse_spec({**JDBC_SPEC, "source": {"connection.url": "jdbc:sqlite:/srv/x.db", "table": "t"}})
    assert info.value.key == "source.connection.url"
    # Without the kind there is nobody to vouch for the URL: refused, not passed through.
    monkeypatch.setattr(models, "installed_kinds", lambda: registry())
    with pytest.raises(ConfigError, match="source.connection.url: cannot be checked: kind: unknown job kind"):
        models.parse_spec(good)


class _FakeSpark:
    """What run_job touches of a SparkSession."""

    def __init__(self) -> None:
        self.sparkContext = self
        self.conf = self
        self.groups: list[str] = []

    def setJobGroup(self, group: str, description: str, interruptOnCancel: bool) -> None:  # noqa: N802, N803
        self.groups.append(group)

    def setLocalProperty(self, key: str, value: Any) -> None:  # noqa: N802
        pass

    def set(self, key: str, value: str) -> None:
        pass


class _FakeProvider:
    def __init__(self) -> None:
        self.spark = _FakeSpark()

    def session(self, confs: Any = None) -> _FakeSpark:
        return self.spark

    def stop(self) -> None:
        pass


SINK_SPEC = {
    "id": "s",
    "kind": "topic_to_sink",
    "source": {"topic": "t"},
    "target": {"config": {"connector.class": "J"}},
}


def test_the_worker_runs_the_kind_its_registry_finds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        backfill_manager, "installed_kinds", lambda: registry(topic_to_sink=f"{__name__}:TOPIC_TO_SINK_ECHO")
    )
    provider = _FakeProvider()
    m = BackfillManager(MemoryBackfillStore(), bootstrap_servers="kafka:9092", provider=provider)
    m.start()
    try:
        m.submit(SINK_SPEC)
        status = m.wait("s", 10)
    finally:
        m.stop()
    assert status.state is JobState.SUCCEEDED, status.error
    assert status.details == {"kind": "topic_to_sink", "bootstrap": "kafka:9092", "job_group": provider.spark.groups[0]}
    assert status.rows_done == 3


def test_a_spec_of_a_kind_this_worker_cannot_load_is_refused_at_submit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        backfill_manager, "installed_kinds", lambda: registry(topic_to_sink="sluice_no_such_plugin:KIND")
    )
    m = BackfillManager(MemoryBackfillStore(), provider=_FakeProvider())
    with pytest.raises(BadRequest, match="Invalid backfill spec: kind: job kind 'topic_to_sink' cannot be loaded"):
        m.submit(SINK_SPEC)
    monkeypatch.setattr(backfill_manager, "installed_kinds", lambda: registry())
    with pytest.raises(BadRequest, match="^Invalid backfill spec: kind: unknown job kind 'topic_to_sink'$"):
        m.submit(SINK_SPEC)
    assert m.store.list() == []


def test_checking_a_spec_loads_no_kind_module_and_no_connector() -> None:
    code = (
        "import sys\n"
        "from sluice.worker.backfill.models import parse_spec\n"
        "parse_spec({'id': 'j', 'kind': 'jdbc_to_topic', "
        "'source': {'connection.url': 'jdbc:postgresql://db/shop', 'table': 't'}, 'target': {'topic': 'x'}})\n"
        "loaded = [m for m in sys.modules if m.startswith(('sluice.connectors.source', 'sluice.connectors.sink',\n"
        "    'sluice.connectors.backfill.jdbc_topic', 'sluice.connectors.backfill.cdc_topic', 'sluice.connectors.backfill.s3_topic'))]\n"
        "assert loaded == [], loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, timeout=60)
