"""Asking the other workers of the cluster at once: each one's ``/health`` for ``GET /cluster?health=true``
and its ``/metrics`` for ``GET /cluster/metrics``.

Every worker is asked on its own thread, with the caller's credentials (the REST request's context
goes with each thread) and a short timeout, so one slow or departed worker costs the caller that
timeout once, never one per worker. A worker that does not answer is reported as such; it never
fails the whole answer.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from sluice.connectors.api import ConnectError
from sluice.worker.herder.api import ClusterWorker, Health
from sluice.worker.herder.strategy import AssignmentStrategy

#: How long a worker is given to answer another's question about itself.
PEER_TIMEOUT_S = 2.0

#: What ``GET /health`` means by each status code (KIP-1017), for a worker whose body says nothing.
_STATUS_BY_CODE = {200: "healthy", 503: "starting", 500: "unhealthy"}


@dataclass(frozen=True)
class PeerAnswer:
    """Another worker's answer to a GET: its status code and body, or why it gave none."""

    worker: ClusterWorker
    status: int | None
    body: bytes = b""
    error: str | None = None


def ask_peers(
    strategy: AssignmentStrategy, peers: Sequence[ClusterWorker], path: str, timeout_s: float
) -> list[PeerAnswer]:
    """``GET path`` on each of ``peers`` at once; the answers in the order of ``peers``."""
    answers: list[PeerAnswer | None] = [None] * len(peers)

    def ask(index: int, peer: ClusterWorker) -> None:
        if not peer.url:
            answers[index] = PeerAnswer(peer, None, error="no REST URL is known for this worker yet")
            return
        try:
            status, body = strategy.peek(peer.url, path, timeout_s)
        except ConnectError as exc:
            answers[index] = PeerAnswer(peer, None, error=str(exc))
        else:
            answers[index] = PeerAnswer(peer, status, body)

    threads = [
        threading.Thread(target=contextvars.copy_context().run, args=(ask, i, peer), name=f"ask-{peer.id}", daemon=True)
        for i, peer in enumerate(peers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout_s + 1)
    return [
        answer if answer is not None else PeerAnswer(peer, None, error=f"no answer within {timeout_s:g} s")
        for peer, answer in zip(peers, answers, strict=True)
    ]


def health_of(answer: PeerAnswer) -> dict[str, str]:
    """``{"status", "message"}`` of a peer's ``/health`` answer; ``unreachable`` when it gave none."""
    if answer.status is None:
        return {"status": "unreachable", "message": answer.error or ""}
    try:
        body = orjson.loads(answer.body)
    except orjson.JSONDecodeError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("status"), str):
        return {"status": body["status"], "message": str(body.get("message") or "")}
    return {"status": _STATUS_BY_CODE.get(answer.status, "unknown"), "message": f"HTTP {answer.status}"}


def own_health(report: Health) -> dict[str, str]:
    return {"status": report.status, "message": report.message}
