"""``sluice connectors``: operate connectors through a worker's Kafka Connect REST API.

A thin client for people who prefer a command to curl. Every command is one or two REST
calls; the server stays the only authority on configs, states and errors, so the CLI prints the
server's own ``message`` when a call fails and never second-guesses it. Because it speaks only
Connect's REST API, it works against Apache Kafka Connect workers too.
"""

from __future__ import annotations

from typing import IO, Any

import click
import orjson

from sluice.cli.connector_io import (
    TARGET_STATES,
    connector_file,
    echo_json,
    echo_status,
    echo_table,
    gather_config,
    parse_pairs,
    task_summary,
    trace_summary,
    wait_for,
)
from sluice.cli.rest_client import ConnectRestClient, WorkerRequestFailed, open_client, rest_path

__all__ = ["DEFAULT_URL", "connectors", "trace_summary"]

DEFAULT_URL = "http://127.0.0.1:8083"


def _client(ctx: click.Context) -> ConnectRestClient:
    client = ctx.find_object(ConnectRestClient)
    assert client is not None, "the connectors group creates the client"
    return client


_wait_option = click.option("--wait", is_flag=True, help="Return once the connector and its tasks reach the state.")
_wait_timeout_option = click.option(
    "--wait-timeout", default=60.0, show_default=True, metavar="SECONDS", help="How long --wait waits."
)
_json_option = click.option("--json", "as_json", is_flag=True, help="Print the server's JSON response.")


# --- the group -----------------------------------------------------------------------------------


@click.group(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    short_help="Manage connectors on a running worker over its REST API.",
    epilog="These commands speak only Kafka Connect's REST API, so they work against Apache Kafka Connect workers too.",
)
@click.option(
    "--url",
    envvar="SLUICE_URL",
    default=DEFAULT_URL,
    show_default=True,
    metavar="URL",
    help="REST address of the worker (env SLUICE_URL). 'host:port' means http://host:port.",
)
@click.option("--user", envvar="SLUICE_USER", metavar="USER", help="User for HTTP basic auth (env SLUICE_USER).")
@click.option(
    "--password",
    envvar="SLUICE_PASSWORD",
    metavar="PASSWORD",
    help="Password for HTTP basic auth (env SLUICE_PASSWORD); asked for when --user is given without it.",
)
@click.option("--token", envvar="SLUICE_TOKEN", metavar="TOKEN", help="Bearer token (env SLUICE_TOKEN).")
@click.option("--timeout", default=30.0, show_default=True, metavar="SECONDS", help="Timeout of each request.")
@click.pass_context
def connectors(
    ctx: click.Context, url: str, user: str | None, password: str | None, token: str | None, timeout: float
) -> None:
    """Operate connectors on a running worker over the Kafka Connect REST API.

    \b
    Examples:
      sluice connectors list --expand status
      sluice connectors create my-source --file my-source.json
      sluice connectors create my-source -c connector.class=FileStreamSource \\
          -c file=/tmp/in.txt -c topic=lines
      sluice connectors status my-source
      sluice connectors config my-source --set tasks.max=2
      sluice connectors restart my-source --include-tasks --only-failed
      sluice connectors --url http://worker-2:8083 --token "$TOKEN" list
    """
    if password and not user:
        raise click.UsageError("--password needs --user")
    if user and password is None and not token:
        password = click.prompt(f"Password for {user}", hide_input=True, err=True)
    client = open_client(ctx, url, user, password, token, timeout)
    ctx.obj = client


@connectors.command("list")
@click.option(
    "--expand",
    type=click.Choice(["status", "info"], case_sensitive=False),
    multiple=True,
    help="Add each connector's state and tasks (status) and/or class and config (info). Repeatable.",
)
@_json_option
@click.pass_context
def list_connectors(ctx: click.Context, expand: tuple[str, ...], as_json: bool) -> None:
    """List connectors: their names, or a table with --expand.

    \b
    Examples:
      sluice connectors list
      sluice connectors list --expand status
      sluice connectors list --expand status --expand info --json
    """
    client = _client(ctx)
    expand = tuple(dict.fromkeys(e.lower() for e in expand))
    result = client.get("/connectors", params=tuple(("expand", e) for e in expand))
    if as_json:
        echo_json(result)
        return
    if not result:
        click.echo("No connectors.", err=True)
        return
    if not expand:
        for name in result:
            click.echo(name)
        return
    headers = ["NAME", "TYPE"]
    if "info" in expand:
        headers += ["CLASS"]
    headers += ["STATE", "TASKS", "WORKER"] if "status" in expand else ["TASKS"]
    rows = []
    for name, entry in sorted(result.items()):
        info, status = entry.get("info") or {}, entry.get("status") or {}
        row = [name, status.get("type") or info.get("type")]
        if "info" in expand:
            row.append(info.get("config", {}).get("connector.class"))
        if "status" in expand:
            connector = status.get("connector") or {}
            row += [connector.get("state"), task_summary(status.get("tasks") or []), connector.get("worker_id")]
        else:
            row.append(len(info.get("tasks") or []))
        rows.append(row)
    echo_table(headers, rows)


@connectors.command()
@click.argument("name", required=False)
@click.option(
    "-c", "--config", "pairs", multiple=True, metavar="KEY=VALUE", help="A config entry. Repeatable; overrides --file."
)
@click.option(
    "-f",
    "--file",
    "file",
    type=click.Path(exists=True, dir_okay=False),
    help='A .json file with {"name": ..., "config": {...}} or a flat config, or a .properties file.',
)
@click.option(
    "--initial-state",
    type=click.Choice(TARGET_STATES, case_sensitive=False),
    metavar="[RUNNING|PAUSED|STOPPED]",
    help="Create the connector RUNNING (the default), PAUSED or STOPPED.",
)
@_wait_option
@_wait_timeout_option
@_json_option
@click.pass_context
def create(
    ctx: click.Context,
    name: str | None,
    pairs: tuple[str, ...],
    file: str | None,
    initial_state: str | None,
    wait: bool,
    wait_timeout: float,
    as_json: bool,
) -> None:
    """Create a connector.

    Sends POST /connectors. NAME may be left out when the file names the connector; when
    given, it wins over the file's name, so one file can serve as a template for several
    connectors.

    \b
    Examples:
      sluice connectors create --file my-source.json
      sluice connectors create my-source --file source.properties -c topic=other
      sluice connectors create my-sink -c connector.class=FileStreamSink \\
          -c topics=lines -c file=/tmp/out.txt --initial-state PAUSED
      sluice connectors create my-source --file my-source.json --wait
    """
    name, config = gather_config(name, file, pairs)
    if not name:
        raise click.UsageError("name the connector: sluice connectors create NAME ...")
    body: dict[str, Any] = {"name": name, "config": config}
    if initial_state:
        body["initial_state"] = initial_state.upper()
    client = _client(ctx)
    _, info = client.call("POST", "/connectors", body=body)
    if wait:
        wait_for(client, name, (initial_state or "RUNNING").upper(), wait_timeout)
    if as_json:
        echo_json(info)
        return
    kind = f"{info['type']} " if info.get("type") else ""
    click.echo(f"Created {kind}connector {name}.")
    if not wait:
        click.echo(f"Follow it with: sluice connectors status {name}")


@connectors.command()
@click.argument("name")
@_json_option
@click.pass_context
def get(ctx: click.Context, name: str, as_json: bool) -> None:
    """Show a connector's type, tasks and config.

    Sends GET /connectors/NAME; --json prints Connect's ConnectorInfo body.
    """
    info = _client(ctx).get(rest_path("connectors", name))
    if as_json:
        echo_json(info)
        return
    tasks = ", ".join(str(t.get("task")) for t in info.get("tasks") or []) or "none"
    click.echo(f"Name:   {info.get('name')}\nType:   {info.get('type')}\nTasks:  {tasks}\nConfig:")
    for key, value in sorted((info.get("config") or {}).items()):
        click.echo(f"  {key}={value}")


@connectors.command()
@click.argument("name")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Set a key. Repeatable.")
@click.option("--unset", "unsets", multiple=True, metavar="KEY", help="Remove a key. Repeatable.")
@click.option(
    "-f",
    "--file",
    "file",
    type=click.Path(exists=True, dir_okay=False),
    help="Replace the whole config with this .json or .properties file (creates the connector if needed).",
)
@_json_option
@click.pass_context
def config(
    ctx: click.Context, name: str, sets: tuple[str, ...], unsets: tuple[str, ...], file: str | None, as_json: bool
) -> None:
    """Show or change a connector's config.

    Without options, print it as key=value lines (GET). --set/--unset change only the keys
    named (PATCH, merged on the worker); --file replaces the whole config (PUT), with any
    --set/--unset applied on top of the file. Placeholders such as ${env:VAR} are shown as
    written, never resolved.

    \b
    Examples:
      sluice connectors config my-source
      sluice connectors config my-source --json > my-source.json
      sluice connectors config my-source --set tasks.max=4 --unset batch.size
      sluice connectors config my-source --file my-source.properties
    """
    client = _client(ctx)
    to_set = parse_pairs(sets, "--set")
    updates: dict[str, Any] = {**to_set, **dict.fromkeys(unsets)}
    if file:
        _, replacement = connector_file(file)
        replacement.update(updates)
        code, result = _put_config(client, name, {k: v for k, v in replacement.items() if v is not None})
        message = f"Created connector {name}." if code == 201 else f"Replaced the config of {name}."
    elif updates:
        result = _patch_config(client, name, updates)
        changes = ([f"set {', '.join(to_set)}"] if to_set else []) + (
            [f"removed {', '.join(unsets)}"] if unsets else []
        )
        message = f"Updated the config of {name}: {'; '.join(changes)}."
    else:
        result = client.get(rest_path("connectors", name, "config"))
        if not as_json:
            for key, value in sorted(result.items()):
                click.echo(f"{key}={value}")
            return
    if as_json:
        echo_json(result)
    else:
        click.echo(message)


def _put_config(client: ConnectRestClient, name: str, config: dict[str, Any]) -> tuple[int, Any]:
    if "name" in config:
        config["name"] = name
    return client.call("PUT", rest_path("connectors", name, "config"), body=config)


def _patch_config(client: ConnectRestClient, name: str, updates: dict[str, Any]) -> Any:
    try:
        return client.call("PATCH", rest_path("connectors", name, "config"), body=updates)[1]
    except WorkerRequestFailed as exc:
        if exc.status != 405:
            raise
    # Workers older than KIP-477 (Connect 3.8) have no PATCH: merge here and PUT the result.
    config = dict(client.get(rest_path("connectors", name, "config")))
    for key, value in updates.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    return _put_config(client, name, config)[1]


@connectors.command()
@click.argument("name")
@click.option("--traces", is_flag=True, help="Also print the full trace of every failed instance.")
@_json_option
@click.pass_context
def status(ctx: click.Context, name: str, traces: bool, as_json: bool) -> None:
    """Show the state of a connector and each of its tasks.

    The ERROR column holds the exception of a FAILED connector or task; --traces prints the
    whole trace.

    \b
    Examples:
      sluice connectors status my-source
      sluice connectors status my-source --traces
      sluice connectors status my-source --json | jq -r .connector.state
    """
    body = _client(ctx).get(rest_path("connectors", name, "status"))
    if as_json:
        echo_json(body)
    else:
        echo_status(body, traces=traces)


def _state_command(verb: str, endpoint: str, target: str, doc: str) -> None:
    @connectors.command(verb, help=doc)
    @click.argument("name")
    @_wait_option
    @_wait_timeout_option
    @click.pass_context
    def command(ctx: click.Context, name: str, wait: bool, wait_timeout: float) -> None:
        client = _client(ctx)
        client.call("PUT", rest_path("connectors", name, endpoint))
        if wait:
            wait_for(client, name, target, wait_timeout)
            click.echo(f"Connector {name} is {target}.")
        else:
            click.echo(f"Asked {name} to {verb}; it moves to {target} shortly (see: sluice connectors status {name}).")


_state_command(
    "pause",
    "pause",
    "PAUSED",
    """Pause a connector and its tasks.

    Sends PUT /connectors/NAME/pause. Tasks stay assigned but stop moving data until
    `sluice connectors resume NAME`.

    \b
    Example:
      sluice connectors pause my-source --wait
    """,
)
_state_command(
    "resume",
    "resume",
    "RUNNING",
    """Resume a paused or stopped connector.

    Sends PUT /connectors/NAME/resume.

    \b
    Example:
      sluice connectors resume my-source --wait
    """,
)
_state_command(
    "stop",
    "stop",
    "STOPPED",
    """Stop a connector: its tasks shut down.

    Sends PUT /connectors/NAME/stop. A stopped connector keeps its config; its offsets can then be changed with
    `sluice connectors offsets NAME --set/--reset`. Start it again with `resume`.

    \b
    Example:
      sluice connectors stop my-source --wait
    """,
)


@connectors.command()
@click.argument("name")
@click.option("--include-tasks", is_flag=True, help="Restart the tasks as well as the connector.")
@click.option("--only-failed", is_flag=True, help="Restart only the instances that are FAILED.")
@click.option("--task", type=click.IntRange(min=0), metavar="N", help="Restart only task N.")
@_json_option
@click.pass_context
def restart(
    ctx: click.Context, name: str, include_tasks: bool, only_failed: bool, task: int | None, as_json: bool
) -> None:
    """Restart a connector, its tasks, or one task.

    Without options only the connector instance restarts; its tasks keep running. With
    --include-tasks the worker restarts asynchronously and this prints which instances
    are RESTARTING; --only-failed limits that to the FAILED ones.

    \b
    Examples:
      sluice connectors restart my-source
      sluice connectors restart my-source --include-tasks --only-failed
      sluice connectors restart my-source --task 0
    """
    client = _client(ctx)
    if task is not None:
        if include_tasks or only_failed:
            raise click.UsageError("--task restarts one task; it cannot be combined with --include-tasks/--only-failed")
        client.call("POST", rest_path("connectors", name, "tasks", task, "restart"))
        click.echo(f"Restarted task {task} of {name}.")
        return
    params = {k: "true" for k, on in (("includeTasks", include_tasks), ("onlyFailed", only_failed)) if on}
    code, body = client.call("POST", rest_path("connectors", name, "restart"), params=params)
    if as_json:
        echo_json(body)
    elif code == 202 and isinstance(body, dict):
        # KIP-745: the restart runs asynchronously; the body shows what is RESTARTING.
        echo_status(body, title="Restarting")
    else:
        click.echo(f"Restarted connector {name}.")


@connectors.command()
@click.argument("name")
@click.pass_context
def delete(ctx: click.Context, name: str) -> None:
    """Delete a connector and stop its tasks.

    Sends DELETE /connectors/NAME. Source offsets are kept, as in Kafka Connect: a new connector with the same name carries on
    where this one stopped. Reset them first (stop, then `offsets NAME --reset`) to start over.
    """
    _client(ctx).call("DELETE", rest_path("connectors", name))
    click.echo(f"Deleted connector {name}.")


@connectors.command()
@click.argument("name")
@click.option("--reset", is_flag=True, help="Forget all offsets (DELETE). The connector must be STOPPED.")
@click.option(
    "--set",
    "offsets_file",
    type=click.File("rb"),
    metavar="FILE",
    help='Alter offsets (PATCH) from a JSON file ("-" for stdin) with {"offsets": [{"partition": ..., '
    '"offset": ...}]}; an offset of null resets that partition. The connector must be STOPPED.',
)
@_json_option
@click.pass_context
def offsets(ctx: click.Context, name: str, reset: bool, offsets_file: IO[bytes] | None, as_json: bool) -> None:
    """Show, alter or reset a connector's offsets.

    \b
    Examples:
      sluice connectors offsets my-source
      sluice connectors offsets my-source --json > offsets.json
      sluice connectors stop my-source --wait
      sluice connectors offsets my-source --set offsets.json
      sluice connectors offsets my-source --reset
      sluice connectors resume my-source
    """
    client = _client(ctx)
    if reset and offsets_file:
        raise click.UsageError("give --reset or --set, not both")
    if reset or offsets_file:
        if reset:
            _, body = client.call("DELETE", rest_path("connectors", name, "offsets"))
        else:
            assert offsets_file is not None
            _, body = client.call("PATCH", rest_path("connectors", name, "offsets"), body=_offsets_body(offsets_file))
        if as_json:
            echo_json(body)
        else:
            default = "Offsets reset." if reset else "Offsets altered."
            click.echo(body.get("message", default) if isinstance(body, dict) else default)
        return
    body = client.get(rest_path("connectors", name, "offsets"))
    if as_json:
        echo_json(body)
        return
    entries = body.get("offsets") or []
    if not entries:
        click.echo(f"No offsets committed for {name}.", err=True)
        return

    def compact(value: Any) -> str:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()

    echo_table(("PARTITION", "OFFSET"), [(compact(e.get("partition")), compact(e.get("offset"))) for e in entries])


def _offsets_body(file: IO[bytes]) -> dict[str, Any]:
    try:
        data = orjson.loads(file.read())
    except orjson.JSONDecodeError as exc:
        raise click.BadParameter(f"{file.name} is not valid JSON: {exc}", param_hint="--set") from None
    if isinstance(data, list):  # a bare list of {partition, offset} is accepted too
        data = {"offsets": data}
    if not isinstance(data, dict) or not isinstance(data.get("offsets"), list):
        raise click.BadParameter(
            f'{file.name} must hold {{"offsets": [{{"partition": ..., "offset": ...}}]}}', param_hint="--set"
        )
    return data


@connectors.command()
@click.argument("name", required=False)
@click.option(
    "-f",
    "--file",
    "file",
    type=click.Path(exists=True, dir_okay=False),
    help="A .json or .properties connector config.",
)
@click.option(
    "-c", "--config", "pairs", multiple=True, metavar="KEY=VALUE", help="A config entry. Repeatable; overrides --file."
)
@_json_option
@click.pass_context
def validate(ctx: click.Context, name: str | None, file: str | None, pairs: tuple[str, ...], as_json: bool) -> None:
    """Check a connector config without creating anything.

    Sends it to PUT /connector-plugins/CLASS/config/validate, where CLASS is its
    connector.class, and prints each key's errors. Exits 1 when there are errors, so it can
    guard a deployment script. NAME (or the file's name) fills in the config's required
    "name" key.

    \b
    Examples:
      sluice connectors validate --file my-source.json
      sluice connectors validate my-source -c connector.class=FileStreamSource -c topic=lines
    """
    name, config = gather_config(name, file, pairs)
    if name:
        config["name"] = name
    plugin = config.get("connector.class")
    if not plugin:
        raise click.UsageError("the config has no connector.class, so there is no plugin to validate it against")
    result = _client(ctx).call("PUT", rest_path("connector-plugins", plugin, "config", "validate"), body=config)[1]
    if as_json:
        echo_json(result)
    else:
        errors = [
            (value.get("name"), message)
            for entry in result.get("configs") or []
            for value in [entry.get("value") or {}]
            for message in value.get("errors") or []
        ]
        count = result.get("error_count", len(errors))
        if not count:
            click.echo(f"The config is valid for {result.get('name', plugin)}.")
        else:
            click.echo(f"{count} error(s) in the config for {result.get('name', plugin)}:")
            for key, message in errors:
                click.echo(f"  {key}: {message}")
    if result.get("error_count"):
        ctx.exit(1)


@connectors.command()
@click.option("--all", "show_all", is_flag=True, help="Also list converters, transforms and predicates.")
@_json_option
@click.pass_context
def plugins(ctx: click.Context, show_all: bool, as_json: bool) -> None:
    """List the connector plugins installed on the worker.

    Sends GET /connector-plugins. Unlike `sluice plugins`, which lists what this machine has installed, this asks the worker.
    """
    params = {"connectorsOnly": "false"} if show_all else None
    result = _client(ctx).get("/connector-plugins", params=params)
    if as_json:
        echo_json(result)
    else:
        echo_table(("TYPE", "CLASS", "VERSION"), [(p.get("type"), p.get("class"), p.get("version")) for p in result])
