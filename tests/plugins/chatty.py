"""The sequence source, with a DEBUG line from its task on every poll.

Tests of ``PUT /admin/loggers/{name}`` set this module's logger to DEBUG and look for the line in
the worker's log, whichever executor (thread or process) runs the task.
"""

from __future__ import annotations

import logging

from sluice.connectors.api import SourceRecordBatch
from sluice.connectors.source.sequence.connector import SequenceSourceConnector, SequenceSourceTask

log = logging.getLogger(__name__)

#: What every poll logs at DEBUG; tests search the worker's log for it.
POLL_LINE = "chatty poll"


class ChattySequenceTask(SequenceSourceTask):
    def poll(self) -> SourceRecordBatch | None:
        log.debug("%s at seq %d", POLL_LINE, self.next)
        return super().poll()


class ChattySequenceSource(SequenceSourceConnector):
    task_class = ChattySequenceTask
