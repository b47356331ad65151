"""The job-kind SPI: what a backfill job kind gives the worker, which finds it through an entry point.

A kind is a :class:`BackfillKind` object named by an entry point of the ``sluice.backfill_kinds``
group (``pyproject.toml``), as a connector is named by one of ``sluice.connectors``: the worker never
imports a kind's module by name (the ``runtime-no-concrete-connectors`` import contract), so the
kinds may reuse any connector's code. Sluice's own are in :mod:`sluice.connectors.backfill.builtin_kinds`
(``jdbc_to_topic``, ``s3_to_topic``) and ``sluice.worker.backfill.topic_sink`` (``topic_to_s3``,
``topic_to_sink``, which run a sink connector's task in the worker).

The worker loads a kind the first time it needs it, to check a submitted spec or to run one, so the
module an entry point names should import little: a kind's :attr:`~BackfillKind.run` imports the
heavy modules (and the optional extras they need) when a job of that kind runs. The spec a kind
receives is validated by the worker's model of that kind (:mod:`sluice.worker.backfill.models`): a
new kind needs its model there too.

This module imports nothing of Sluice but the job context, so the worker may import it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from sluice.connectors.backfill.context import BackfillRuntime, JobContext

#: The entry-point group the worker reads the job kinds from; an entry point's name is the ``kind``
#: a spec gives.
ENTRY_POINT_GROUP = "sluice.backfill_kinds"

#: Runs one job to completion on the driver: ``(spark, spec, ctx, bootstrap servers, runtime) -> summary``.
#: ``spec`` is the worker's validated spec model (:mod:`sluice.worker.backfill.models`), ``bootstrap``
#: the Kafka bootstrap servers (the spec's, else the worker's), ``runtime`` what the worker lends.
#: The summary (JSON-able) becomes the run's ``details``. Called on the run's own thread.
KindRunner = Callable[[Any, Any, JobContext, str, BackfillRuntime], dict[str, Any]]

#: Why a URL cannot be the source of a job of this kind (``None`` when it can); the text follows
#: ``source.connection.url: `` in the 400 response. Called from any thread when a spec is parsed.
SourceUrlCheck = Callable[[str], str | None]


@dataclass(frozen=True)
class TopicOwner:
    """A connector that writes the topic a backfill would write, and how (for the message the user reads)."""

    connector: str
    how: str
    #: Whether the connector's records pass through transforms: ``target.cdc`` cannot reproduce those.
    transformed: bool


#: Whether the stored connector ``name`` (its ``config``; ``written``: the topics its topic tracking
#: recorded) writes ``topic``, which a backfill of ``source_table`` is about to write:
#: ``(topic, source_table, name, config, written) -> TopicOwner | None``. Called from any thread at submit.
TopicOwnerLookup = Callable[[str, str, str, Mapping[str, Any], Collection[str]], TopicOwner | None]


@dataclass(frozen=True)
class BackfillKind:
    """One job kind: the ``kind`` of a spec, how a job of it runs, and the checks the worker makes at submit.

    ``name`` must be the entry point's name. The hooks are optional; the worker calls them when present:

    * ``source_url_problem``: refuses a spec's ``source.connection.url`` when it is submitted, before
      Spark starts (parsed by the code the job itself uses);
    * ``topic_owner``: the hand-off guard's question about every stored connector for a spec that
      writes a topic without ``target.cdc`` (see ``sluice.worker.backfill.handoff_guard``).
    """

    name: str
    run: KindRunner
    source_url_problem: SourceUrlCheck | None = None
    topic_owner: TopicOwnerLookup | None = None
