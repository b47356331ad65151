"""The ``sluice`` command."""

from __future__ import annotations

import sys

import click

from sluice.cli.apply import apply, export, test_command
from sluice.cli.backfill import backfill
from sluice.cli.connectors import connectors
from sluice.connectors.api import ConfigError
from sluice.worker.observability import tracing
from sluice.worker.observability.logcontext import LOG_FORMATS, configure_logging


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="sluice", prog_name="sluice")
def main() -> None:
    """Sluice: Kafka Connect style data integration in Python.

    \b
    Quick start:
      sluice dev up                                   start a local Kafka broker
      sluice standalone worker.properties conn.json   run a worker with a connector
      sluice distributed cluster.properties           ... or join a cluster of workers
      curl localhost:8083/connectors                  talk to it over the Connect REST API
      sluice connectors status my-connector           ... or with this CLI
      sluice apply connectors/ --diff --dry-run       keep connector configs in git
    """


@main.command()
@click.argument("worker_config", type=click.Path(exists=True, dir_okay=False))
@click.argument("connector_configs", nargs=-1, type=click.Path(exists=True, dir_okay=False))
@click.option("--log-level", default="INFO", show_default=True, help="Root log level (DEBUG, INFO, WARNING, ERROR).")
@click.option(
    "--log-format", type=click.Choice(LOG_FORMATS), help="Log lines as text or JSON objects [default: the worker's log.format, else text]."
)
def standalone(worker_config: str, connector_configs: tuple[str, ...], log_level: str, log_format: str | None) -> None:
    """Run a standalone worker, like Kafka Connect's connect-standalone.

    WORKER_CONFIG is a worker .properties (or .json) file with Connect's keys:
    bootstrap.servers, key.converter, value.converter, offset.storage.file.filename,
    offset.flush.interval.ms, listeners, producer.*, consumer.*, ...

    Each CONNECTOR_CONFIG is a .properties file, or a .json file holding either the
    REST body {"name": ..., "config": {...}} or a flat config map. More connectors
    can be created later over the REST API (default http://127.0.0.1:8083).

    SIGTERM or Ctrl-C stops the worker cleanly: tasks flush and commit their offsets.
    """
    # Here: the client commands start without loading the worker and its REST server.
    from sluice.cli.standalone import run_standalone

    _configure_observability(worker_config, log_level, log_format)
    sys.exit(run_standalone(worker_config, list(connector_configs)))


@main.command()
@click.argument("worker_config", type=click.Path(exists=True, dir_okay=False))
@click.option("--log-level", default="INFO", show_default=True, help="Root log level (DEBUG, INFO, WARNING, ERROR).")
@click.option(
    "--log-format", type=click.Choice(LOG_FORMATS), help="Log lines as text or JSON objects [default: the worker's log.format, else text]."
)
def distributed(worker_config: str, log_level: str, log_format: str | None) -> None:
    """Run one worker of a cluster, like Kafka Connect's connect-distributed.

    WORKER_CONFIG holds the standalone keys plus the cluster's: group.id,
    config.storage.topic, offset.storage.topic (+ .partitions), status.storage.topic
    (+ .partitions), their .replication.factor, session.timeout.ms,
    heartbeat.interval.ms, rebalance.timeout.ms, scheduled.rebalance.max.delay.ms and
    rest.advertised.host.name / .port / .listener.

    Start more workers with the same group.id to share the work; any of them accepts
    any REST call. Missing internal topics are created (compacted). SIGTERM leaves the
    group at once, so the others take over without waiting for the session timeout.
    """
    # Here: the client commands start without loading the worker and its REST server.
    from sluice.cli.distributed import run_distributed

    _configure_observability(worker_config, log_level, log_format)
    sys.exit(run_distributed(worker_config))


def _configure_observability(worker_config: str, log_level: str, log_format: str | None) -> None:
    """Logging (``--log-format``, else the worker's ``log.format``) and tracing
    (``tracing.otlp.endpoint``) of a worker process, before the worker is built."""
    # Here: the client commands start without loading the worker (the worker commands load it next).
    from sluice.cli.standalone import load_config_file

    try:
        settings = load_config_file(worker_config)
    except ConfigError:  # the worker reports a broken file itself
        settings = {}
    chosen = log_format or str(settings.get("log.format") or "text").strip().lower()
    if chosen not in LOG_FORMATS:
        raise click.BadParameter(f"log.format must be one of {', '.join(LOG_FORMATS)}, got {chosen!r}", param_hint="WORKER_CONFIG")
    configure_logging(log_level, chosen)
    tracing.configure(str(settings.get("tracing.otlp.endpoint") or "") or None)


@main.command()
@click.option("--all", "show_all", is_flag=True, help="Also list converters, transforms and predicates.")
@click.option("--plugin-path", default="", help="Comma-separated extra plugin directories.")
def plugins(show_all: bool, plugin_path: str) -> None:
    """List installed plugins with their type and version."""
    from sluice.plugins import PluginKind, PluginRegistry  # here: only this command scans the plugins

    registry = PluginRegistry([p for p in plugin_path.split(",") if p])
    kinds = None if show_all else [PluginKind.SOURCE, PluginKind.SINK]
    rows = [(p.kind.value, p.name, p.version, p.class_name, ", ".join(p.aliases)) for p in registry.plugins(kinds)]
    headers = ("TYPE", "NAME", "VERSION", "CLASS", "ALIASES")
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    for row in [headers, *rows]:
        click.echo("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())


@main.command()
@click.option("--seconds", type=click.IntRange(min=1), help="Stop by itself after this many seconds.")
@click.option("--kafka-port", default=9092, show_default=True, help="Port of the local broker.")
@click.option("--rest-port", default=8083, show_default=True, help="Port of the worker's REST API.")
def quickstart(seconds: int | None, kafka_port: int, rest_port: int) -> None:
    """Run the quickstart: a local Kafka, a standalone worker and a file → topic → file pipeline.

    State (input.txt, output.txt, the worker's log and offsets) goes to ./.sluice/quickstart.
    Ctrl-C stops everything cleanly.
    """
    import os
    from importlib.resources import files

    script = files("sluice.deploy").joinpath("quickstart", "run.sh")
    env = dict(os.environ, KAFKA_PORT=str(kafka_port), REST_PORT=str(rest_port))
    # The script calls `sluice`: this installation's (beside its Python), whatever else is on PATH.
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    if seconds is not None:
        env["QUICKSTART_SECONDS"] = str(seconds)
    os.execvpe("bash", ["bash", str(script)], env)


main.add_command(connectors)
main.add_command(backfill)
main.add_command(apply)
main.add_command(export)
main.add_command(test_command, name="test")


def _attach_dev() -> None:
    try:
        from sluice.deploy.devstack import dev
    except ImportError as exc:  # keep the rest of the CLI usable
        reason = str(exc)

        @main.command(name="dev")
        def dev_missing() -> None:
            """Local development stack (unavailable)."""
            raise click.ClickException(f"the dev stack cannot be loaded: {reason}")

        return
    main.add_command(dev, name="dev")


_attach_dev()

if __name__ == "__main__":
    main()
