"""``sluice apply`` / ``export`` against a real worker: a directory of files becomes the cluster's
connectors, re-applying restarts nothing, one changed key restarts one connector, ``--prune`` and
``--dry-run`` do what they say, and bad files are refused naming the file and the key.

The connectors are :class:`tests.plugins.counting.CountingSequenceSource`: each task start adds a
line to its ``starts.file``, so "nothing restarted" is checked on what the tasks did, not on what the
CLI printed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from click.testing import CliRunner, Result

from sluice.cli.main import main
from tests.integration.kafka_helpers import unique_topic_name
from tests.integration.worker_process import WorkerFactory, WorkerProcess

COUNTING = "tests.plugins.counting.CountingSequenceSource"
#: Rewriting a file must not change its topic: one topic name per connector for this run.
RUN = unique_topic_name("apply")


@pytest.fixture(scope="module")
def worker(module_worker_process: WorkerFactory) -> WorkerProcess:
    return module_worker_process(**{"task.executor": "thread"})


def run(worker: WorkerProcess, *args: str) -> Result:
    result = CliRunner().invoke(main, [*args, "--url", worker.url])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def ok(worker: WorkerProcess, *args: str) -> str:
    result = run(worker, *args)
    assert result.exit_code == 0, f"sluice {' '.join(args)} exited {result.exit_code}:\n{result.output}"
    return result.stdout


def connector_file(directory: Path, name: str, starts: Path, *, fmt: str = "yaml", **extra: object) -> Path:
    config = {
        "connector.class": COUNTING,
        "topic": f"{RUN}-{name}",
        "sequence.count": 5,
        "sequence.rate": 50,
        "starts.file": str(starts),
        **extra,
    }
    path = directory / f"{name}.{fmt}"
    document = {"name": name, "config": config}
    path.write_text(yaml.safe_dump(document) if fmt == "yaml" else json.dumps(document))
    return path


def starts(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def connectors(worker: WorkerProcess) -> list[str]:
    return sorted(httpx.get(f"{worker.url}/connectors", timeout=5).json())


@pytest.fixture
def clean(worker: WorkerProcess) -> Iterator[None]:
    yield
    for name in connectors(worker):
        httpx.delete(f"{worker.url}/connectors/{name}", timeout=30)


def test_apply_is_idempotent_and_changes_only_what_differs(worker: WorkerProcess, tmp_path: Path, clean: None) -> None:
    repo = tmp_path / "connectors"
    repo.mkdir()
    a_starts, b_starts = tmp_path / "a.starts", tmp_path / "b.starts"
    connector_file(repo, "apply-a", a_starts)
    connector_file(repo, "apply-b", b_starts, fmt="json")

    dry = ok(worker, "apply", str(repo), "--dry-run")
    assert "  + apply-a: create" in dry and "Plan: 2 to create, 0 to update, 0 to delete, 0 unchanged." in dry
    assert connectors(worker) == []  # --dry-run changes nothing

    out = ok(worker, "apply", str(repo), "--wait")
    assert "Created apply-a." in out and "Created apply-b." in out
    assert connectors(worker) == ["apply-a", "apply-b"]
    worker.wait_running("apply-a")
    worker.wait_running("apply-b")
    assert (starts(a_starts), starts(b_starts)) == (1, 1)
    before = {n: httpx.get(f"{worker.url}/connectors/{n}/status", timeout=5).json() for n in ("apply-a", "apply-b")}

    again = ok(worker, "apply", str(repo), "--wait")
    assert "Plan: 0 to create, 0 to update, 0 to delete, 2 unchanged." in again
    assert "Created" not in again and "Updated" not in again
    assert (starts(a_starts), starts(b_starts)) == (1, 1)  # no task was restarted
    after = {n: httpx.get(f"{worker.url}/connectors/{n}/status", timeout=5).json() for n in ("apply-a", "apply-b")}
    assert after == before

    connector_file(repo, "apply-a", a_starts, **{"sequence.rate": 60})
    diff = ok(worker, "apply", str(repo), "--diff", "--dry-run")
    assert "      ~ sequence.rate: 50 -> 60" in diff.splitlines()
    assert starts(a_starts) == 1
    changed = ok(worker, "apply", str(repo), "--wait")
    assert "Updated apply-a (sequence.rate); its tasks restart." in changed and "apply-b" not in changed.split("Plan:")[1]
    worker.wait_running("apply-a")
    assert (starts(a_starts), starts(b_starts)) == (2, 1)  # only the changed connector restarted
    assert httpx.get(f"{worker.url}/connectors/apply-a/config", timeout=5).json()["sequence.rate"] == "60"

    (repo / "apply-b.json").unlink()
    kept = ok(worker, "apply", str(repo))
    assert "  ? apply-b: on the worker, not in the files (kept; --prune deletes it)" in kept
    assert connectors(worker) == ["apply-a", "apply-b"]
    pruned = ok(worker, "apply", str(repo), "--prune")
    assert "Deleted apply-b." in pruned
    assert connectors(worker) == ["apply-a"]
    assert starts(a_starts) == 2


def test_prune_dry_run_deletes_nothing(worker: WorkerProcess, tmp_path: Path, clean: None) -> None:
    repo = tmp_path / "connectors"
    repo.mkdir()
    connector_file(repo, "prune-a", tmp_path / "a.starts")
    connector_file(repo, "prune-b", tmp_path / "b.starts")
    ok(worker, "apply", str(repo))
    (repo / "prune-b.yaml").unlink()
    out = ok(worker, "apply", str(repo), "--prune", "--dry-run")
    assert "  - prune-b: delete" in out and "Plan: 0 to create, 0 to update, 1 to delete, 1 unchanged." in out
    assert connectors(worker) == ["prune-a", "prune-b"]


def test_bad_files_are_refused_naming_the_file_and_the_key(worker: WorkerProcess, tmp_path: Path, clean: None) -> None:
    repo = tmp_path / "connectors"
    repo.mkdir()
    good = connector_file(repo, "bad-good", tmp_path / "good.starts")
    unparsable = repo / "nested.yaml"
    unparsable.write_text("name: nested\nconfig:\n  connector.class: FileStreamSource\n  topics: [a, b]\n")
    result = run(worker, "apply", str(repo))
    assert result.exit_code == 1
    assert f"Error: {unparsable}: config.topics: a list is not a config value" in result.stderr
    assert connectors(worker) == []

    unparsable.unlink()
    invalid = connector_file(repo, "bad-invalid", tmp_path / "invalid.starts", **{"sequence.rate": "fast"})
    unknown = repo / "unknown.json"
    unknown.write_text(json.dumps({"name": "bad-unknown", "config": {"connector.class": "NoSuchConnector"}}))
    result = run(worker, "apply", str(repo))
    assert result.exit_code == 1
    assert f"Error: {invalid}: config.sequence.rate: " in result.stderr
    assert f"Error: {unknown}: config.connector.class: " in result.stderr
    assert str(good) not in result.stderr
    assert connectors(worker) == []  # one bad file stops the whole run before anything changes


def test_export_round_trips(worker: WorkerProcess, tmp_path: Path, clean: None) -> None:
    repo = tmp_path / "connectors"
    repo.mkdir()
    a_starts = tmp_path / "a.starts"
    connector_file(repo, "export-a", a_starts, **{"tasks.max": 1})
    connector_file(repo, "export-b", tmp_path / "b.starts", fmt="json")
    ok(worker, "apply", str(repo))
    worker.wait_running("export-a")

    for fmt in ("yaml", "json"):
        exported = tmp_path / f"exported-{fmt}"
        assert ok(worker, "export", str(exported), "--format", fmt) == f"Exported 2 connector(s) to {exported}.\n"
        assert sorted(p.name for p in exported.iterdir()) == [f"export-a.{fmt}", f"export-b.{fmt}"]
        document = yaml.safe_load((exported / f"export-a.{fmt}").read_text())
        assert document["name"] == "export-a" and document["config"]["tasks.max"] == "1"
        assert "name" not in document["config"]
        again = ok(worker, "apply", str(exported), "--prune")
        assert "Plan: 0 to create, 0 to update, 0 to delete, 2 unchanged." in again
    assert starts(a_starts) == 1

    printed = json.loads(ok(worker, "export", "-c", "export-b"))
    assert [d["name"] for d in printed] == ["export-b"]
    missing = run(worker, "export", "-c", "nope")
    assert missing.exit_code == 1 and "no such connector on the cluster: nope" in missing.stderr


def test_secrets_stay_masked_and_an_exported_mask_keeps_the_stored_secret(
    worker: WorkerProcess, tmp_path: Path, clean: None
) -> None:
    repo = tmp_path / "connectors"
    repo.mkdir()
    config = {
        "connector.class": "tests.plugins.controllable.ControllableSource",
        "topic": f"{RUN}-secret",
        "fail.flag": str(tmp_path / "no-such-flag"),
        "password": "hunter2-secret",
        "interval.ms": 1000,
    }
    (repo / "secret.yaml").write_text(yaml.safe_dump({"name": "secret-src", "config": config}))
    created = ok(worker, "apply", str(repo), "--diff")
    assert "hunter2-secret" not in created and "      + password = [hidden]" in created.splitlines()
    worker.wait_running("secret-src")

    again = ok(worker, "apply", str(repo), "--diff")
    assert "Plan: 0 to create, 0 to update, 0 to delete, 1 unchanged." in again
    assert "      ! password: the worker hides this secret" in again

    exported = tmp_path / "exported"
    result = run(worker, "export", str(exported))
    assert result.exit_code == 0 and "Note: secret-src: password is exported as [hidden]" in result.stderr
    assert yaml.safe_load((exported / "secret-src.json").read_text())["config"]["password"] == "[hidden]"
    assert "1 unchanged" in ok(worker, "apply", str(exported))

    httpx.delete(f"{worker.url}/connectors/secret-src", timeout=30)
    refused = run(worker, "apply", str(exported))
    assert refused.exit_code == 1
    assert f"Error: {exported / 'secret-src.json'}: config.password: is [hidden]" in refused.stderr
    assert connectors(worker) == []
