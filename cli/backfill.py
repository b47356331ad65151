"""``sluice backfill``: submit Spark backfill jobs to a worker and watch them.

``run job.json`` submits the spec (``POST /backfills``) and follows the run with a live progress
bar until it ends; Ctrl-C cancels the run. ``list``, ``status`` and ``cancel`` are one REST call
each. The worker does the work (its SparkSession is shared by all jobs, so the JVM start-up is
paid once per worker, not per command).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click
import orjson

from sluice.cli.rest_client import ConnectRestClient, open_client, rest_path

DEFAULT_URL = "http://127.0.0.1:8083"
_FINISHED = ("SUCCEEDED", "FAILED", "CANCELLED")
_EXIT = {"SUCCEEDED": 0, "FAILED": 1, "CANCELLED": 3}


def _client(ctx: click.Context) -> ConnectRestClient:
    client = ctx.find_object(ConnectRestClient)
    assert client is not None, "the backfill group creates the client"
    return client


@click.group(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    short_help="Run and watch Spark backfill jobs on a worker.",
)
@click.option("--url", envvar="SLUICE_URL", default=DEFAULT_URL, show_default=True, metavar="URL", help="REST address of the worker (env SLUICE_URL).")
@click.option("--token", envvar="SLUICE_TOKEN", metavar="TOKEN", help="Bearer token (env SLUICE_TOKEN).")
@click.option("--user", envvar="SLUICE_USER", metavar="USER", help="User for HTTP basic auth (env SLUICE_USER).")
@click.option("--password", envvar="SLUICE_PASSWORD", metavar="PASSWORD", help="Password for HTTP basic auth (env SLUICE_PASSWORD).")
@click.option("--timeout", default=30.0, show_default=True, metavar="SECONDS", help="Timeout of each request.")
@click.pass_context
def backfill(ctx: click.Context, url: str, token: str | None, user: str | None, password: str | None, timeout: float) -> None:
    """Bulk loads and reprocessing on Spark, through a worker's /backfills API.

    \b
    Examples:
      sluice backfill run orders-backfill.json      submit and follow with a progress bar
      sluice backfill list
      sluice backfill status orders-backfill
      sluice backfill cancel orders-backfill
    """
    client = open_client(ctx, url, user, password, token, timeout)
    ctx.obj = client


def _load_spec(path: str) -> dict[str, Any]:
    try:
        data = orjson.loads(Path(path).read_bytes())
    except OSError as exc:
        raise click.BadParameter(f"cannot read {path}: {exc.strerror}", param_hint="JOB_FILE") from None
    except orjson.JSONDecodeError as exc:
        raise click.BadParameter(f"{path} is not valid JSON: {exc}", param_hint="JOB_FILE") from None
    if not isinstance(data, dict):
        raise click.BadParameter(f"{path} must hold a JSON object", param_hint="JOB_FILE")
    return data


@backfill.command("run")
@click.argument("job_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--detach", is_flag=True, help="Submit and return at once instead of following the run.")
@click.option("--interval", default=1.0, show_default=True, help="Seconds between progress updates.")
@click.pass_context
def run(ctx: click.Context, job_file: str, detach: bool, interval: float) -> None:
    """Submit JOB_FILE (a JSON backfill spec) and follow it until it ends.

    Exits 0 when the run succeeded, 1 when it failed (the Spark error is printed), 3 when it was
    cancelled. Ctrl-C cancels the run on the worker. A spec with a schedule is only registered.
    """
    client = _client(ctx)
    spec = _load_spec(job_file)
    _, info = client.call("POST", "/backfills", body=spec)
    job_id = info["id"]
    for warning in info.get("warnings", ()):
        click.echo(f"Warning: {warning}", err=True)
    if info.get("schedule"):
        click.echo(f"Scheduled backfill {job_id} ({info['schedule'].get('cron')}); next run {info.get('next_run')}")
        return
    click.echo(f"Submitted backfill {job_id} ({info.get('kind')})", err=True)
    if detach:
        return
    try:
        status = _follow(client, job_id, interval)
    except KeyboardInterrupt:
        click.echo("\nCancelling…", err=True)
        client.call("DELETE", rest_path("backfills", job_id))
        status = _follow(client, job_id, interval, quiet=True)
    _print_outcome(job_id, status)
    sys.exit(_EXIT.get(status.get("state", ""), 1))


def _follow(client: ConnectRestClient, job_id: str, interval: float, quiet: bool = False) -> dict[str, Any]:
    tty = sys.stderr.isatty()
    last_line = ""
    while True:
        status = client.get(rest_path("backfills", job_id))["status"]
        line = progress_line(status)
        if not quiet and line != last_line:
            if tty:
                click.echo("\r\x1b[2K" + line, nl=False, err=True)
            else:
                click.echo(line, err=True)
            last_line = line
        if status.get("state") in _FINISHED:
            if tty and not quiet:
                click.echo("", err=True)
            return status  # type: ignore[no-any-return]
        time.sleep(interval)


def progress_line(status: dict[str, Any], width: int = 30) -> str:
    """``RUNNING [#########.........]  31.0%  310,000/1,000,000 rows  52,000 rows/s  ETA 13s``."""
    state = status.get("state", "?")
    done = int(status.get("rows_done") or 0)
    total = status.get("rows_total")
    parts = [f"{state:<9}"]
    percent = status.get("percent")
    if percent is not None:
        filled = int(width * float(percent) / 100)
        parts.append("[" + "#" * filled + "." * (width - filled) + f"] {float(percent):5.1f}%")
    parts.append(f"{done:,}/{int(total):,} rows" if total is not None else f"{done:,} rows")
    if status.get("bytes_done"):
        parts.append(_human_bytes(int(status["bytes_done"])))
    if status.get("rows_per_s"):
        parts.append(f"{float(status['rows_per_s']):,.0f} rows/s")
    if status.get("eta_s") is not None and state == "RUNNING":
        parts.append(f"ETA {float(status['eta_s']):.0f}s")
    return "  ".join(parts)


def _human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:,.1f} {unit}" if unit != "B" else f"{n} B"
        size /= 1024
    return f"{n} B"


def _print_outcome(job_id: str, status: dict[str, Any]) -> None:
    state = status.get("state")
    if state == "SUCCEEDED":
        click.echo(f"Backfill {job_id} succeeded: {int(status.get('rows_done') or 0):,} rows")
        for line in handoff_lines(status.get("source_position")):
            click.echo(line)
    elif state == "CANCELLED":
        click.echo(f"Backfill {job_id} was cancelled after {int(status.get('rows_done') or 0):,} rows", err=True)
    else:
        click.echo(f"Backfill {job_id} failed: {status.get('error')}", err=True)


def handoff_lines(position: dict[str, Any] | None) -> list[str]:
    """The recorded read position and the CDC connector settings that continue from it."""
    if not position:
        return []
    if "lsn" not in position:
        return [f"Source position: {orjson.dumps(position).decode()}"]
    slot = position.get("slot")
    where = f" (slot {slot}{', created by this run' if position.get('slot_created') else ''})" if slot else ""
    lines = [f"Read at LSN {position['lsn']}{where}"]
    cdc = position.get("cdc") or {}
    if cdc:
        settings = " ".join(f"{k}={v}" for k, v in cdc.items())
        lines.append(f"Continue with the PostgreSQL CDC connector: {settings}")
    return lines


@backfill.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the server's JSON response.")
@click.pass_context
def list_jobs(ctx: click.Context, as_json: bool) -> None:
    """List jobs with their latest run's state and progress."""
    jobs = _client(ctx).get("/backfills")
    if as_json:
        click.echo(orjson.dumps(jobs, option=orjson.OPT_INDENT_2).decode())
        return
    rows = [("ID", "KIND", "STATE", "ROWS", "PERCENT", "SCHEDULE", "NEXT RUN")]
    for job in jobs:
        s = job.get("status", {})
        rows.append((
            job["id"], job.get("kind") or "", s.get("state", ""), f"{int(s.get('rows_done') or 0):,}",
            "" if s.get("percent") is None else f"{s['percent']}%", (job.get("schedule") or {}).get("cron", ""),
            job.get("next_run") or "",
        ))
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())


#: What the worker shows instead of a secret (see worker.backfill.models.masked_spec).
HIDDEN = "[hidden]"


def handoff_connector(info: dict[str, Any], overrides: dict[str, str]) -> dict[str, Any] | None:
    """The CDC connector to create (``{"name", "config"}``: the job's ``target.cdc`` merged with the
    recorded start position and ``overrides``), or ``None`` when the job names no connector."""
    cdc = ((info.get("spec") or {}).get("target") or {}).get("cdc")
    position = (info.get("status") or {}).get("source_position") or {}
    if not cdc:
        return None
    return {"name": cdc["name"], "config": {**cdc.get("config", {}), **position.get("cdc", {}), **overrides}}


def _overrides(pairs: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--set")
        out[key] = value
    return out


@backfill.command("status")
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="Print the server's JSON response.")
@click.option(
    "--handoff",
    is_flag=True,
    help="Print the CDC connector to start from the read: the job's target.cdc connector with its start position "
    "({name, config}, for POST /connectors), or only the settings to merge when the job names no connector.",
)
@click.option("--apply", is_flag=True, help="With --handoff: create that connector on the worker (POST /connectors).")
@click.option(
    "--set", "settings", multiple=True, metavar="KEY=VALUE", help="With --handoff: set a connector key (e.g. a password the worker hides)."
)
@click.pass_context
def status(ctx: click.Context, job_id: str, as_json: bool, handoff: bool, apply: bool, settings: tuple[str, ...]) -> None:
    """Show a job's state, progress, rate, ETA, error and recorded source position."""
    client = _client(ctx)
    info = client.get(rest_path("backfills", job_id))
    if apply and not handoff:
        raise click.UsageError("--apply needs --handoff")
    if handoff:
        state = info["status"].get("state")
        position = info["status"].get("source_position") or {}
        if not position.get("cdc"):
            raise click.ClickException(f"Backfill {job_id} recorded no CDC hand-off position (state {state})")
        connector = handoff_connector(info, _overrides(settings))
        if connector is None:
            if apply:
                raise click.ClickException(f"Backfill {job_id} names no CDC connector (target.cdc); merge these settings into its config")
            click.echo(orjson.dumps(position["cdc"], option=orjson.OPT_INDENT_2).decode())
            return
        if not apply:
            click.echo(orjson.dumps(connector, option=orjson.OPT_INDENT_2).decode())
            return
        if state != "SUCCEEDED":
            raise click.ClickException(f"Backfill {job_id} is {state}: start the CDC connector once it SUCCEEDED")
        hidden = sorted(k for k, v in connector["config"].items() if v == HIDDEN)
        if hidden:
            raise click.ClickException(
                f"the worker hides {', '.join(hidden)}: pass --set {hidden[0]}=… (or use a config provider reference "
                "such as ${env:PG_PASSWORD} in the job's target.cdc.config)"
            )
        _, created = client.call("POST", "/connectors", body=connector)
        click.echo(f"Created connector {created.get('name', connector['name'])}: streaming from {position['cdc'].get('streaming.start.lsn')}")
        return
    if as_json:
        click.echo(orjson.dumps(info, option=orjson.OPT_INDENT_2).decode())
        return
    s = info["status"]
    click.echo(f"{info['id']} ({info.get('kind')})")
    click.echo("  " + progress_line(s))
    if s.get("error"):
        click.echo(f"  error: {s['error']}")
    for line in handoff_lines(s.get("source_position")):
        click.echo(f"  {line}")
    if info.get("schedule"):
        click.echo(f"  schedule: {info['schedule'].get('cron')} ({info['schedule'].get('timezone', 'UTC')}), next run {info.get('next_run')}")


@backfill.command("cancel")
@click.argument("job_id")
@click.option("--forget", is_flag=True, help="Also delete the job and its schedule.")
@click.pass_context
def cancel(ctx: click.Context, job_id: str, forget: bool) -> None:
    """Cancel a job's running run (its Spark jobs stop; the state becomes CANCELLED)."""
    client = _client(ctx)
    if forget:
        client.call("DELETE", rest_path("backfills", job_id), params={"forget": "true"})
        click.echo(f"Backfill {job_id} cancelled and deleted")
        return
    client.call("DELETE", rest_path("backfills", job_id))
    click.echo(f"Cancel requested for backfill {job_id}")
