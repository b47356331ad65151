"""The REST listener's own accept loop: a global connection cap, a descriptor reserve, and back-off.

asyncio's server accepts for uvicorn, and when the process runs out of file descriptors (EMFILE)
it logs an ERROR for every failed ``accept()`` of a readiness event, up to the backlog (2048 under
uvicorn), and schedules as many retries: a flood of idle connections turned that into 163,652
log lines in 35 s while the worker had no descriptor left for its tasks. This listener accepts
itself, so that:

- the listener never holds more than ``rest.connections.max`` connections, and at the cap a new
  one displaces the oldest connection still waiting for its request headers (the flood's), so a
  client that asks promptly, such as a health check, is still served;
- a connection that would leave fewer than ``rest.connections.fd.reserve`` descriptors free is
  answered 503 and closed unread, keeping those descriptors for tasks, clients and offset files;
- when ``accept()`` fails for lack of descriptors the listener stops reading the listening socket
  for a growing pause (the kernel queues what arrives meanwhile) and logs one line per
  :data:`REPORT_INTERVAL_S` with the count of failures since the last one.

Accepted connections are handed to asyncio with :meth:`asyncio.AbstractEventLoop.connect_accepted_socket`,
so TLS and the protocol behave as under ``loop.create_server``.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import resource
import socket
import ssl
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger(__name__)

#: errno values of ``accept()`` that mean "out of descriptors or kernel memory": retried after a pause.
OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
#: At most one log line per kind of refusal in this many seconds.
REPORT_INTERVAL_S = 10.0
#: Connections accepted per readiness event, so that a flood cannot starve the loop's other work.
ACCEPT_BATCH = 64
#: The pause after a failed ``accept()`` starts here and doubles up to the maximum while it repeats.
BACKOFF_INITIAL_S = 0.05
BACKOFF_MAX_S = 2.0
#: Auto-sized cap: this share of the soft RLIMIT_NOFILE, within these bounds.
AUTO_SHARE = 4
AUTO_MAX_CONNECTIONS = 1024
AUTO_MIN_CONNECTIONS = 16

_BUSY_BODY = b'{"error_code":503,"message":"The REST listener is at its connection limit; try again shortly"}'
#: Sent to a connection refused for the cap or the reserve, without reading its request.
BUSY_RESPONSE = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\nretry-after: 1\r\n"
    b"content-length: " + str(len(_BUSY_BODY)).encode() + b"\r\n\r\n" + _BUSY_BODY
)


def soft_nofile_limit() -> int | None:
    """The process's soft ``RLIMIT_NOFILE``, ``None`` when unlimited."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else int(soft)


def auto_max_connections(soft_limit: int | None) -> int:
    """``rest.connections.max`` when unset: a quarter of the descriptors, at least 16 and at most 1024."""
    if soft_limit is None:
        return AUTO_MAX_CONNECTIONS
    return max(AUTO_MIN_CONNECTIONS, min(AUTO_MAX_CONNECTIONS, soft_limit // AUTO_SHARE))


def auto_fd_reserve(soft_limit: int | None) -> int:
    """``rest.connections.fd.reserve`` when unset: a quarter of the descriptors."""
    return 0 if soft_limit is None else soft_limit // AUTO_SHARE


class RateLimitedReport:
    """One warning per interval for a recurring condition, with how often it happened meanwhile."""

    def __init__(
        self, message: str, interval_s: float = REPORT_INTERVAL_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.message = message
        self.interval_s = interval_s
        self._clock = clock
        self._last: float | None = None
        self._since = 0

    def occurred(self, *args: object) -> bool:
        """Count one occurrence; log (and return True) if the last line is older than the interval."""
        self._since += 1
        now = self._clock()
        if self._last is not None and now - self._last < self.interval_s:
            return False
        log.warning(self.message + " (%d time(s) since the last report)", *args, self._since)
        self._last = now
        self._since = 0
        return True


class DescriptorBudget:
    """Whether the process still has ``reserve`` descriptors free beyond a newly accepted one.

    Linux hands out the lowest free descriptor number, so a new socket's number is a free lower
    bound on how many are open; descriptors freed low in the table while high ones stay open are
    caught by counting ``/proc/self/fd`` (at most once per ``recount_s``, as it costs a directory read).
    """

    def __init__(
        self, soft_limit: int | None, reserve: int, recount_s: float = 0.5, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.soft_limit = soft_limit
        self.reserve = reserve
        self._recount_s = recount_s
        self._clock = clock
        self._counted_at: float | None = None
        self._count = 0

    def exhausted(self, newest_fd: int) -> bool:
        """True when accepting the connection on ``newest_fd`` would eat into the reserve."""
        if self.soft_limit is None or self.reserve <= 0:
            return False
        ceiling = self.soft_limit - self.reserve
        return newest_fd >= ceiling or self._open_count() > ceiling

    def _open_count(self) -> int:
        now = self._clock()
        if self._counted_at is None or now - self._counted_at >= self._recount_s:
            try:
                self._count = len(os.listdir("/proc/self/fd"))
            except OSError:
                self._count = 0  # no procfs (or no descriptor to read it): the number check still holds
            self._counted_at = now
        return self._count


class WaitingConnection(Protocol):
    """What the listener may displace at its cap: a connection still owing its request headers."""

    def displace(self) -> None:
        """Close the connection at once, without an answer."""


class ListenerLimits:
    """The listener-wide cap and the connections it may displace; used on the event loop thread only."""

    def __init__(self, max_connections: int, budget: DescriptorBudget) -> None:
        self.max_connections = max_connections
        self.budget = budget
        self._open: set[socket.socket] = set()
        self._waiting: OrderedDict[WaitingConnection, None] = OrderedDict()

    def waiting(self, conn: WaitingConnection) -> None:
        """``conn`` now waits for request headers; it joins the end of the displacement queue."""
        self._waiting.pop(conn, None)
        self._waiting[conn] = None

    def not_waiting(self, conn: WaitingConnection) -> None:
        self._waiting.pop(conn, None)

    def open_count(self) -> int:
        # The transport closes the socket object the listener handed over: a closed one has fileno -1.
        self._open = {s for s in self._open if s.fileno() != -1}
        return len(self._open)

    def make_room(self) -> bool:
        """Room for one more connection, displacing the oldest waiting one if at the cap."""
        if len(self._open) < self.max_connections or self.open_count() < self.max_connections:
            return True
        if not self._waiting:
            return False
        oldest, _ = self._waiting.popitem(last=False)
        oldest.displace()
        # Its socket closes on the loop's next iteration; the batch bound keeps the overshoot small.
        return True

    def opened(self, sock: socket.socket) -> None:
        self._open.add(sock)


class GuardedListener:
    """Listening sockets whose accepts apply :class:`ListenerLimits`; quacks like the ``asyncio.Server`` uvicorn closes."""

    def __init__(
        self,
        sockets: list[socket.socket],
        protocol_factory: Callable[[], asyncio.Protocol],
        limits: ListenerLimits,
        *,
        ssl_context: ssl.SSLContext | None = None,
        ssl_handshake_timeout_s: float | None = None,
    ) -> None:
        self.sockets = sockets
        self._factory = protocol_factory
        self.limits = limits
        self._ssl = ssl_context
        self._handshake_timeout_s = ssl_handshake_timeout_s
        self._loop = asyncio.get_running_loop()
        self._handovers: set[asyncio.Task[None]] = set()
        self._paused: asyncio.TimerHandle | None = None
        self._backoff_s = BACKOFF_INITIAL_S
        self._closed = False
        self._out_of_fds = RateLimitedReport(
            "The REST listener cannot accept connections: %s; it pauses accepting and retries"
        )
        self._refused = RateLimitedReport("The REST listener answers new connections 503: %s")
        for sock in sockets:
            sock.setblocking(False)
            self._loop.add_reader(sock.fileno(), self._accept_ready, sock)

    @classmethod
    def bind(cls, host: str, port: int, backlog: int) -> list[socket.socket]:
        """Listening sockets for every address ``host`` resolves to, as ``loop.create_server`` binds them."""
        infos = socket.getaddrinfo(host or None, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
        sockets: list[socket.socket] = []
        try:
            for family, kind, proto, _, address in dict.fromkeys(infos):
                sock = socket.socket(family, kind, proto)
                sockets.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(address)
                sock.listen(backlog)
        except OSError:
            for sock in sockets:
                sock.close()
            raise
        return sockets

    def _accept_ready(self, sock: socket.socket) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                conn, _ = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in OUT_OF_RESOURCES:
                    self._pause(exc)
                    return
                # A connection that failed between the kernel's queue and us (reset, aborted): the next one.
                log.debug("accept() failed: %s", exc)
                continue
            self._backoff_s = BACKOFF_INITIAL_S
            self._admit(conn)

    def _admit(self, conn: socket.socket) -> None:
        if self.limits.budget.exhausted(conn.fileno()):
            self._refuse(
                conn,
                f"fewer than rest.connections.fd.reserve={self.limits.budget.reserve} file descriptors "
                f"of {self.limits.budget.soft_limit} would stay free",
            )
            return
        if not self.limits.make_room():
            self._refuse(conn, f"rest.connections.max={self.limits.max_connections} connections are open")
            return
        conn.setblocking(False)
        self.limits.opened(conn)
        task = self._loop.create_task(self._hand_over(conn))
        self._handovers.add(task)
        task.add_done_callback(self._handovers.discard)

    async def _hand_over(self, conn: socket.socket) -> None:
        try:
            await self._loop.connect_accepted_socket(
                self._factory,
                conn,
                ssl=self._ssl,
                ssl_handshake_timeout=self._handshake_timeout_s if self._ssl else None,
            )
        except asyncio.CancelledError:
            conn.close()
            raise
        except (OSError, TimeoutError) as exc:  # ssl.SSLError is an OSError
            # A failed TLS handshake or a client gone before it began: nothing to answer.
            log.debug("Dropped a connection before it was set up: %s", exc)
            conn.close()

    def _refuse(self, conn: socket.socket, why: str) -> None:
        self._refused.occurred(why)
        try:
            conn.setblocking(False)
            if self._ssl is None:
                conn.send(BUSY_RESPONSE)  # fits the socket buffer; a TLS client just sees the close
        except OSError:
            pass
        finally:
            conn.close()

    def _pause(self, exc: OSError) -> None:
        self._out_of_fds.occurred(exc.strerror or exc)
        if self._paused is not None or self._closed:
            return
        for sock in self.sockets:
            self._loop.remove_reader(sock.fileno())
        self._paused = self._loop.call_later(self._backoff_s, self._resume)
        self._backoff_s = min(BACKOFF_MAX_S, self._backoff_s * 2)

    def _resume(self) -> None:
        self._paused = None
        if self._closed:
            return
        for sock in self.sockets:
            self._loop.add_reader(sock.fileno(), self._accept_ready, sock)

    def close(self) -> None:
        """Stop accepting and close the listening sockets; open connections are uvicorn's to finish."""
        if self._closed:
            return
        self._closed = True
        if self._paused is not None:
            self._paused.cancel()
            self._paused = None
        for sock in self.sockets:
            if sock.fileno() != -1:
                self._loop.remove_reader(sock.fileno())
                sock.close()

    async def wait_closed(self) -> None:
        """Wait for the connections still being set up (TLS handshakes)."""
        if self._handovers:
            await asyncio.gather(*self._handovers, return_exceptions=True)
