"""The guarded accept loop when the process runs out of descriptors, and its helpers.

``accept()`` failing with EMFILE is played by a listening socket whose first accepts fail; the
connection the kernel queued meanwhile must still be served once they stop failing, with one log
line for the lot (asyncio's loop logged one ERROR per failed accept).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket

import pytest

from sluice.rest.listener import (
    BUSY_RESPONSE,
    DescriptorBudget,
    GuardedListener,
    ListenerLimits,
    RateLimitedReport,
    auto_fd_reserve,
    auto_max_connections,
)


class _ExhaustedSocket(socket.socket):
    """A listening socket whose first ``failures`` accepts fail as if no descriptor were left."""

    failures = 0

    def accept(self) -> tuple[socket.socket, object]:
        if self.failures > 0:
            self.failures -= 1
            raise OSError(errno.EMFILE, "Too many open files")
        return super().accept()


class _Greeting(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.write(b"hello")
        transport.close()


async def _serve_through_exhaustion(failures: int) -> bytes:
    listening = _ExhaustedSocket(socket.AF_INET, socket.SOCK_STREAM)
    listening.bind(("127.0.0.1", 0))
    listening.listen(16)
    listening.failures = failures
    listener = GuardedListener([listening], _Greeting, ListenerLimits(10, DescriptorBudget(None, 0)))
    try:
        reader, writer = await asyncio.open_connection(*listening.getsockname())
        data = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        return data
    finally:
        listener.close()
        await listener.wait_closed()


def test_accept_pauses_when_descriptors_run_out_logs_once_and_serves_what_waited(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, "sluice.rest.listener")
    assert asyncio.run(_serve_through_exhaustion(failures=6)) == b"hello"
    # The listener's own lines: another test's worker may still log on its way down.
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name == "sluice.rest.listener"]
    assert len(lines) == 1, lines
    assert "cannot accept connections: Too many open files" in lines[0]


def test_the_rate_limited_report_counts_what_it_did_not_log(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    report = RateLimitedReport("Out of %s", interval_s=10, clock=lambda: now[0])
    logged = []
    for step in range(25):
        now[0] = step
        logged.append(report.occurred("descriptors"))
    assert [i for i, was in enumerate(logged) if was] == [0, 10, 20]
    assert caplog.messages[1] == "Out of descriptors (10 time(s) since the last report)"


def test_the_descriptor_budget_keeps_the_reserve() -> None:
    budget = DescriptorBudget(soft_limit=1024, reserve=256, recount_s=60)
    assert not budget.exhausted(100)
    assert budget.exhausted(768)
    assert not DescriptorBudget(soft_limit=1024, reserve=0).exhausted(1023)
    assert not DescriptorBudget(soft_limit=None, reserve=256).exhausted(10**6)


def test_defaults_are_sized_from_the_soft_limit() -> None:
    assert (auto_max_connections(1024), auto_fd_reserve(1024)) == (256, 256)
    assert (auto_max_connections(40), auto_max_connections(1 << 20), auto_max_connections(None)) == (16, 1024, 1024)
    assert auto_fd_reserve(None) == 0


def test_the_busy_answer_is_a_complete_http_response() -> None:
    head, _, body = BUSY_RESPONSE.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503 ")
    assert f"content-length: {len(body)}".encode() in head
