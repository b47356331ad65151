"""What ``sluice connectors`` reads and prints, and how its ``--wait`` polls.

Configs come from JSON or ``.properties`` files and ``KEY=VALUE`` flags; responses are printed as
the server's JSON, as tables, or as a status summary with a one-line cause per failure.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import click
import orjson

from sluice.cli.rest_client import ConnectRestClient, rest_path
from sluice.worker.config.properties import parse_properties

TARGET_STATES = ("RUNNING", "PAUSED", "STOPPED")


# --- input ---------------------------------------------------------------------------------------


def parse_pairs(pairs: Iterable[str], option: str) -> dict[str, str]:
    result: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected key=value, got {pair!r}", param_hint=option)
        result[key.strip()] = value
    return result


def load_mapping(path: str, option: str) -> dict[str, Any]:
    """A JSON object from a ``.json`` file, otherwise a ``.properties`` file."""
    file = Path(path)
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise click.BadParameter(f"cannot read {path}: {exc.strerror}", param_hint=option) from None
    if file.suffix.lower() != ".json":
        return dict(parse_properties(raw.decode("utf-8")))
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise click.BadParameter(f"{path} is not valid JSON: {exc}", param_hint=option) from None
    if not isinstance(data, dict):
        raise click.BadParameter(f"{path} must hold a JSON object", param_hint=option)
    return data


def connector_file(path: str, option: str = "--file") -> tuple[str | None, dict[str, Any]]:
    """A connector file holds the REST body ``{"name", "config"}`` or a flat config map."""
    data = load_mapping(path, option)
    if isinstance(data.get("config"), dict):
        config = dict(data["config"])
        name = data.get("name") or config.get("name")
    else:
        config = data
        name = config.get("name")
    return (str(name) if name else None), config


def gather_config(name: str | None, file: str | None, pairs: Iterable[str]) -> tuple[str | None, dict[str, Any]]:
    """The connector's name and config from ``--file`` and ``-c`` pairs; NAME wins over the file's."""
    if not file and not pairs:
        raise click.UsageError("give the config with --file and/or -c key=value")
    file_name, config = connector_file(file) if file else (None, {})
    config.update(parse_pairs(pairs, "-c/--config"))
    name = name or file_name or config.get("name")
    if name and "name" in config:
        config["name"] = name
    return name, config


# --- output --------------------------------------------------------------------------------------


def echo_json(value: Any) -> None:
    click.echo(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode())


def echo_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    body = [[("" if c is None else str(c)) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in [list(headers), *body]) for i in range(len(headers))]
    for row in [list(headers), *body]:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())


def trace_summary(trace: str | None) -> str:
    """One line that says what went wrong.

    Java traces open with the exception (``org.apache...Exception: message``), but Python's open
    with ``Traceback (most recent call last):`` and name the exception on their last unindented
    line, so for those that line is the one worth showing.
    """
    if not trace:
        return ""
    lines = [line for line in trace.splitlines() if line.strip()]
    if not lines:
        return ""
    if lines[0].startswith("Traceback (most recent call last)"):
        unindented = [line for line in lines[1:] if not line[0].isspace()]
        if unindented:
            return unindented[-1].strip()
    return lines[0].strip()


def echo_status(status: Mapping[str, Any], *, title: str = "Connector", traces: bool = False) -> None:
    connector = status.get("connector") or {}
    click.echo(f"{title} {status.get('name')} ({status.get('type', 'unknown')})")
    click.echo()
    instances = [("connector", connector)] + [(f"task {t.get('id')}", t) for t in status.get("tasks") or []]
    rows = [(label, i.get("state"), i.get("worker_id"), trace_summary(i.get("trace"))) for label, i in instances]
    echo_table(("INSTANCE", "STATE", "WORKER", "ERROR"), rows)
    if not status.get("tasks"):
        click.echo("(no tasks)")
    if traces:
        for label, instance in instances:
            if instance.get("trace"):
                click.echo(f"\n--- {label} trace ---\n{instance['trace']}")


def task_summary(tasks: Iterable[Mapping[str, Any]]) -> str:
    counts: dict[str, int] = {}
    for task in tasks:
        counts[str(task.get("state"))] = counts.get(str(task.get("state")), 0) + 1
    return ", ".join(f"{n} {state}" for state, n in sorted(counts.items())) or "-"


# --- waiting -------------------------------------------------------------------------------------


def wait_for(client: ConnectRestClient, name: str, target: str, timeout: float) -> None:
    """Poll the status until the connector and its tasks reach ``target``; fail fast on FAILED."""
    deadline = time.monotonic() + timeout
    while True:
        status = client.get(rest_path("connectors", name, "status"))
        connector_state = status["connector"]["state"]
        tasks = status.get("tasks") or []
        failed = [t for t in tasks if t.get("state") == "FAILED"]
        if connector_state == "FAILED" or failed:
            what = status["connector"] if connector_state == "FAILED" else failed[0]
            raise click.ClickException(
                f"connector {name} failed while waiting for {target}: {trace_summary(what.get('trace'))}"
            )
        # A running connector needs tasks; a stopped one has none (Connect empties its task configs).
        tasks_ready = all(t.get("state") == target for t in tasks) and (bool(tasks) or target != "RUNNING")
        if connector_state == target and tasks_ready:
            return
        if time.monotonic() >= deadline:
            states = f"connector {connector_state}, tasks: {task_summary(tasks)}"
            raise click.ClickException(f"connector {name} did not reach {target} within {timeout:g}s ({states})")
        time.sleep(0.2)
