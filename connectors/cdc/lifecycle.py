"""What a database source's task does when it is stopped from a control thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


def close_unless_polled(poll_interval_ms: int | None, close: Callable[[], None], name: str) -> None:
    """After ``stop``: ``poll`` notices the stop flag within ``poll.interval.ms`` and closes the
    connections on the task thread; this calls ``close`` (which must do nothing the second time)
    a second after that anyway, on a daemon thread named ``name``, for a runner that does not call
    ``poll`` again."""
    delay = (poll_interval_ms if poll_interval_ms is not None else 500) / 1000 + 1.0

    def later() -> None:
        time.sleep(delay)
        close()

    threading.Thread(target=later, daemon=True, name=name).start()
