"""Imported by the fork server of the task hosts only (never by the worker): loads what every host
needs, then freezes it, so that hosts forked afterwards share those pages with the fork server.

What it loads: the host's code and every plugin the installed distributions declare (the plugin
registry imports them all as it discovers them). A connector's task is not among them: connectors
name it with :class:`~sluice.connectors.api.Deferred`, so its module and drivers (pyarrow, psycopg,
numpy: 20 MB of Python objects and 30 MB of libraries for the built-in ones) load in the host that
starts such a task, and only there. The fork server imports before this module the task modules of
the connectors ``task.host.preload`` names (see ``TaskHostPool``), which every host then shares.
``gc.freeze()`` last moves every object created so far out of the collector's reach: a collection
in a host then never writes to those objects' headers, which would copy their pages into the host
one by one.
"""

from __future__ import annotations

import gc

from sluice.plugins import PluginRegistry
from sluice.worker.execution import task_host

__all__ = ["task_host"]

PluginRegistry()  # the discovery imports every entry-point plugin module
gc.collect()
gc.freeze()
