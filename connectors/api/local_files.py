"""The local files a task may open: the operator's grant, checked again at every open.

The worker confines keys typed :data:`~connectors.api.LocalPath` to ``connector.allowed.paths``
when a config is validated, but the file system can change after that: a symlink planted inside an
allowed directory later would lead an ``open()`` anywhere the worker's user can reach. A task
therefore opens the files its config names through :attr:`TaskContext.local_files
<connectors.api.TaskContext.local_files>`, which resolves the path at that moment, refuses what
lies outside the grant and does not follow a symlink out of it.
"""

from __future__ import annotations

from typing import IO, Any, Protocol


class LocalFiles(Protocol):
    """Opens local files within what the worker's operator granted to connectors.

    The runtime hands every task one (``context.local_files``); a task opens the files its config
    names through it instead of with :func:`open`. Every call may come from any thread.
    """

    def open(
        self,
        path: str,
        mode: str = "rb",
        *,
        key: str,
        encoding: str | None = None,
        errors: str | None = None,
        newline: str | None = None,
        buffering: int = -1,
    ) -> IO[Any]:
        """Open ``path`` as :func:`open` would (modes ``r``, ``w``, ``a``, ``x``, with ``b`` or ``t``).

        ``key`` is the config key that named the path; a refusal names it. The path is resolved
        when it is opened — a relative one from the worker's working directory, symlinks followed
        only while they stay inside the grant — and the descriptor opened is checked to be the file
        that was allowed. Raises :class:`~connectors.api.ConfigError` (naming ``key``) when the
        path lies outside the grant, and :class:`OSError` as :func:`open` does otherwise
        (:class:`FileNotFoundError` for a file that does not exist yet, when reading).
        """
        ...
