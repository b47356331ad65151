"""``sluice apply``, ``sluice export`` and ``sluice test``: connectors as code.

Connector configs live in files under version control (:mod:`sluice.cli.connector_files`); ``apply``
makes a cluster match them through Connect's REST API, ``export`` writes a cluster's connectors out
as such files, and ``test`` runs a connector's transforms and converters over sample records
without Kafka (:mod:`sluice.cli.offline_pipeline`). ``apply`` changes only what differs, so running it
again, from CI or from the Helm chart's hook, restarts nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from sluice.cli.connector_diff import (
    Action,
    ConnectorChange,
    hidden_values_without_source,
    plan_changes,
    render_plan,
)
from sluice.cli.connector_files import (
    ConnectorFile,
    ConnectorFileError,
    ConnectorFileErrors,
    dump_document,
    exported_document,
    load_connector_files,
    read_connector_file,
)
from sluice.cli.connector_io import wait_for
from sluice.cli.connectors import DEFAULT_URL
from sluice.cli.offline_pipeline import CaseError, OfflinePipeline
from sluice.cli.rest_client import ConnectRestClient, WorkerRequestFailed, open_client, rest_path
from sluice.connectors.api import ConfigError
from sluice.offsets.memory import MemoryOffsetStore
from sluice.plugins import PluginRegistry
from sluice.worker.config.masking import MASK
from sluice.worker.config.models import WorkerConfig
from sluice.worker.config.properties import load_properties
from sluice.worker.worker import Worker

F = TypeVar("F", bound=Callable[..., Any])
_STATES = ("RUNNING", "PAUSED", "STOPPED")


# --- the worker's address, shared by apply and export --------------------------------------------


def rest_options(command: F) -> F:
    """The options of ``sluice connectors`` that say which worker to talk to and how."""
    options = [
        click.option("--url", envvar="SLUICE_URL", default=DEFAULT_URL, show_default=True, metavar="URL",
                     help="REST address of a worker of the cluster (env SLUICE_URL)."),
        click.option("--user", envvar="SLUICE_USER", metavar="USER", help="User for HTTP basic auth (env SLUICE_USER)."),
        click.option("--password", envvar="SLUICE_PASSWORD", metavar="PASSWORD",
                     help="Password for HTTP basic auth (env SLUICE_PASSWORD)."),
        click.option("--token", envvar="SLUICE_TOKEN", metavar="TOKEN", help="Bearer token (env SLUICE_TOKEN)."),
        click.option("--timeout", default=30.0, show_default=True, metavar="SECONDS", help="Timeout of each request."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _open_client(ctx: click.Context, url: str, user: str | None, password: str | None, token: str | None,
                 timeout: float) -> ConnectRestClient:
    return open_client(ctx, url, user, password, token, timeout)


def _cluster_connectors(client: ConnectRestClient) -> dict[str, dict[str, Any]]:
    """Every connector on the cluster: ``{name: {"config": ..., "state": ...}}`` in one request."""
    body = client.get("/connectors", params=(("expand", "info"), ("expand", "status"))) or {}
    result: dict[str, dict[str, Any]] = {}
    for name, entry in body.items():
        info, status = entry.get("info") or {}, entry.get("status") or {}
        state = (status.get("connector") or {}).get("state")
        result[name] = {"config": dict(info.get("config") or {}), "state": state}
    return result


# --- apply ---------------------------------------------------------------------------------------


def _validate(client: ConnectRestClient, file: ConnectorFile) -> tuple[list[str], set[str]]:
    """The worker's verdict on one file: error lines naming the file and key, and the password-typed keys."""
    plugin = file.config["connector.class"]
    try:
        result = client.call("PUT", rest_path("connector-plugins", plugin, "config", "validate"), body=file.config)[1]
    except WorkerRequestFailed as exc:
        if exc.status >= 500:
            raise
        return [f"{file.path}: config.connector.class: {exc.message}"], set()
    errors: list[str] = []
    secrets: set[str] = set()
    for entry in result.get("configs") or []:
        definition, value = entry.get("definition") or {}, entry.get("value") or {}
        key = value.get("name") or definition.get("name")
        if definition.get("type") == "PASSWORD" and key:
            secrets.add(key)
        errors.extend(f"{file.path}: config.{key}: {message}" for message in value.get("errors") or [])
    if result.get("error_count") and not errors:
        errors.append(f"{file.path}: the worker reports {result['error_count']} error(s) without naming the keys")
    return errors, secrets


def _validate_all(
    client: ConnectRestClient, files: Sequence[ConnectorFile], cluster: dict[str, dict[str, Any]]
) -> tuple[list[str], dict[str, set[str]]]:
    """Every file's errors (the worker's, and [hidden] values with nothing to keep), and each connector's password keys."""
    errors: list[str] = []
    secret_keys: dict[str, set[str]] = {}
    for file in files:
        file_errors, secret_keys[file.name] = _validate(client, file)
        stored = cluster.get(file.name, {}).get("config")
        errors += file_errors + [
            f"{file.path}: config.{key}: is {MASK} (as export writes secrets), but the worker has no value to keep; "
            "give the value or a ${file:...}/${env:...} placeholder"
            for key in hidden_values_without_source(file.config, stored)
        ]
    return errors, secret_keys


def _execute(client: ConnectRestClient, plan: Sequence[ConnectorChange], files: dict[str, ConnectorFile]) -> list[str]:
    """Carry ``plan`` out: creates and updates first, deletes last. The errors, one line each."""
    errors: list[str] = []
    ordered = [c for c in plan if c.action in (Action.CREATE, Action.UPDATE)] + [
        c for c in plan if c.action is Action.DELETE
    ]
    for change in ordered:
        try:
            if change.action is Action.DELETE:
                client.call("DELETE", rest_path("connectors", change.name))
                click.echo(f"Deleted {change.name}.")
                continue
            client.call("PUT", rest_path("connectors", change.name, "config"), body=files[change.name].config)
            if change.action is Action.CREATE:
                click.echo(f"Created {change.name}.")
            else:
                click.echo(f"Updated {change.name} ({', '.join(k.key for k in change.keys)}); its tasks restart.")
        except click.ClickException as exc:
            errors.append(f"{change.action.value} {change.name}: {exc.message}")
    return errors


def _report_errors(ctx: click.Context, errors: Sequence[str], what: str) -> None:
    for line in errors:
        click.echo(f"Error: {line}", err=True)
    click.echo(f"{len(errors)} error(s) {what}; nothing was changed.", err=True)
    ctx.exit(1)


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--dry-run", is_flag=True, help="Validate and show the plan; change nothing.")
@click.option("--diff", "detailed", is_flag=True, help="Show every key that changes (secrets masked).")
@click.option("--prune", is_flag=True, help="Delete connectors on the cluster that no file declares.")
@click.option("--wait", is_flag=True, help="Return once created and updated connectors are back in their state.")
@click.option("--wait-timeout", default=120.0, show_default=True, metavar="SECONDS", help="How long --wait waits.")
@rest_options
@click.pass_context
def apply(ctx: click.Context, paths: tuple[str, ...], dry_run: bool, detailed: bool, prune: bool, wait: bool,
          wait_timeout: float, url: str, user: str | None, password: str | None, token: str | None,
          timeout: float) -> None:
    """Make the cluster's connectors match the files in PATHS.

    Each PATH is a connector file or a directory whose .json, .yaml and .yml files are read (not
    its subdirectories). A file holds one connector in the shape of Connect's POST /connectors
    body: {"name": ..., "config": {...}}; numbers and booleans become strings.

    \b
    Every config is first validated by the worker (PUT /connector-plugins/CLASS/config/validate);
    any error, named by file and key, stops the run before anything changes. Then:
      + create   a connector no worker has yet
      ~ update   a connector whose config differs (its tasks restart)
      - delete   a connector no file declares (only with --prune)
      = unchanged connectors are not touched, so re-running apply restarts nothing.

    Secrets are masked in the output. The worker never returns secret values, so write them as
    config-provider placeholders (${file:/path:key}, ${env:VAR}), which compare exactly; a literal
    secret's changes cannot be seen. A value of [hidden] (what export writes) keeps the stored one.

    Exit status: 0 when everything was applied (or, with --dry-run, would apply); 1 on any error.

    \b
    Examples:
      sluice apply connectors/ --dry-run --diff     # what would change, key by key
      sluice apply connectors/ --prune --wait       # make it so, and wait for RUNNING
      sluice apply orders.yaml --url http://connect:8083 --token "$TOKEN"
    """
    try:
        files = load_connector_files(paths)
    except ConnectorFileErrors as exc:
        _report_errors(ctx, [str(e) for e in exc.errors], "in the connector files")
        return
    client = _open_client(ctx, url, user, password, token, timeout)
    cluster = _cluster_connectors(client)
    errors, secret_keys = _validate_all(client, files, cluster)
    desired = {f.name: f.config for f in files}
    current = {name: entry["config"] for name, entry in cluster.items()}
    plan = plan_changes(desired, current, prune=prune, secret_keys=secret_keys)
    for line in render_plan(plan, detailed=detailed, sources={f.name: str(f.path) for f in files}):
        click.echo(line)
    if errors:
        _report_errors(ctx, errors, "found by validation")
    if dry_run:
        click.echo("Dry run: nothing was changed.")
        return
    failures = _execute(client, plan, {f.name: f for f in files})
    if wait:
        failures += _wait_all(client, plan, cluster, wait_timeout)
    for line in failures:
        click.echo(f"Error: {line}", err=True)
    if failures:
        ctx.exit(1)


def _wait_all(client: ConnectRestClient, plan: Sequence[ConnectorChange], cluster: dict[str, dict[str, Any]],
              timeout: float) -> list[str]:
    errors = []
    for change in plan:
        if change.action not in (Action.CREATE, Action.UPDATE):
            continue
        previous = cluster.get(change.name, {}).get("state")
        target = previous if previous in _STATES else "RUNNING"
        try:
            wait_for(client, change.name, target, timeout)
        except click.ClickException as exc:
            errors.append(exc.message)
    return errors


# --- export --------------------------------------------------------------------------------------


def _file_name(name: str, suffix: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".") + suffix


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.argument("directory", required=False, type=click.Path(file_okay=False))
@click.option("--format", "fmt", type=click.Choice(["json", "yaml"]), default="json", show_default=True,
              help="File format.")
@click.option("-c", "--connector", "names", multiple=True, metavar="NAME", help="Export only this connector. Repeatable.")
@rest_options
@click.pass_context
def export(ctx: click.Context, directory: str | None, fmt: str, names: tuple[str, ...], url: str, user: str | None,
           password: str | None, token: str | None, timeout: float) -> None:
    """Write the cluster's connectors out as files that `sluice apply` reads.

    With DIRECTORY, one file per connector (NAME.json or NAME.yaml; characters unsafe in a file
    name become _), overwriting files of the same name. Without it, print them: a JSON list, or
    YAML documents separated by ---. Keys are sorted, so exports diff well in git.

    Secret values come back from the worker as [hidden]. Re-applying such a file to the same
    cluster keeps the stored secret; before applying it elsewhere, replace each [hidden] with a
    placeholder such as ${file:/etc/sluice/secrets/db.properties:password} (apply refuses a
    [hidden] value where the worker has nothing to keep).

    \b
    Examples:
      sluice export connectors/ --format yaml
      sluice export -c orders-sink | jq '.[0].config'
    """
    client = _open_client(ctx, url, user, password, token, timeout)
    cluster = _cluster_connectors(client)
    missing = [n for n in names if n not in cluster]
    if missing:
        raise click.ClickException(f"no such connector on the cluster: {', '.join(missing)}")
    documents = [exported_document(n, cluster[n]["config"]) for n in sorted(names or cluster)]
    for document in documents:
        for key in [k for k, v in document["config"].items() if v == MASK]:
            click.echo(f"Note: {document['name']}: {key} is exported as {MASK}; see `sluice export --help`.", err=True)
    if directory is None:
        if fmt == "json":
            click.echo(dump_document(documents, "json"), nl=False)
        else:
            click.echo("---\n".join(dump_document(d, "yaml") for d in documents), nl=False)
        return
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    written: dict[str, str] = {}
    for document in documents:
        file_name = _file_name(document["name"], f".{fmt}")
        if file_name in written:
            raise click.ClickException(f"{document['name']} and {written[file_name]} would both be written to {file_name}")
        written[file_name] = document["name"]
        (target / file_name).write_text(dump_document(document, fmt), encoding="utf-8")
    click.echo(f"Exported {len(documents)} connector(s) to {target}.")


# --- test ----------------------------------------------------------------------------------------


def _offline_worker(worker_config: str | None, plugin_path: str) -> Worker:
    """A worker object that only builds things: the converter defaults and config providers of
    WORKER_CONFIG; no Kafka, no REST."""
    raw = load_properties(worker_config) if worker_config else {}
    registry = PluginRegistry([p for p in plugin_path.split(",") if p])
    return Worker(WorkerConfig.from_mapping(raw), registry, MemoryOffsetStore())


def _run_file(path: str, worker: Worker) -> tuple[int, int]:
    """Run the cases of one file, printing a line per case; ``(passed, failed)``."""
    try:
        file = read_connector_file(Path(path))
    except ConnectorFileError as exc:
        raise click.ClickException(str(exc)) from None
    if not file.tests:
        raise click.ClickException(f"{path}: tests: the file has no test cases")
    try:
        pipeline = OfflinePipeline(file.config, worker)
    except ConfigError as exc:
        raise click.ClickException(f"{file.path}: config.{exc.key}: {exc}" if exc.key else f"{file.path}: {exc}") from None
    passed = failed = 0
    try:
        for number, case in enumerate(file.tests, 1):
            try:
                result = pipeline.run_case(case, number)
            except CaseError as exc:
                click.echo(f"FAIL {path}: {exc}")
                failed += 1
                continue
            if result.passed:
                click.echo(f"PASS {path}: case {result.name} ({result.produced} record(s))")
                passed += 1
            else:
                click.echo(f"FAIL {path}: case {result.name}")
                for line in result.failures:
                    click.echo(f"  {line}")
                failed += 1
    finally:
        pipeline.close()
    return passed, failed


@click.command("test", context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--worker-config", type=click.Path(exists=True, dir_okay=False), metavar="FILE",
              help="A worker .properties file: its key.converter/value.converter defaults and config providers.")
@click.option("--plugin-path", default="", help="Comma-separated extra plugin directories.")
def test_command(files: tuple[str, ...], worker_config: str | None, plugin_path: str) -> None:
    """Run a connector's transforms and converters over sample records, without Kafka.

    Each FILE is a connector file (as `sluice apply` reads) with a "tests" list, or a test
    file {"connector": "path/to/connector.yaml", "tests": [...]} (apply passes over those). A
    case gives "input" records and the "expected" output; each expected record is compared on
    the fields it gives. A source connector's input is what its task returns from poll() and the
    output the Kafka records produced (an expected string is compared as text, other JSON values
    with the bytes parsed as JSON); a sink connector's input is Kafka records and the output what
    its task's put() receives.

    \b
    Example (orders.yaml):
      name: orders
      config:
        connector.class: FileStreamSource
        file: /data/orders.txt
        topic: orders-raw
        transforms: route
        transforms.route.type: RegexRouter
        transforms.route.regex: (.*)-raw
        transforms.route.replacement: $1
      tests:
        - name: drops the -raw suffix
          input:    [{topic: orders-raw, value: "o-1"}]
          expected: [{topic: orders, value: "o-1"}]

    Prints PASS or FAIL per case (a failure names the case, the record and the field) and exits
    1 when any case fails.
    """
    worker = _offline_worker(worker_config, plugin_path)
    passed = failed = 0
    for path in files:
        p, f = _run_file(path, worker)
        passed, failed = passed + p, failed + f
    click.echo(f"{passed} of {passed + failed} case(s) passed.")
    if failed:
        raise SystemExit(1)
