"""Task runners: the threads that drive source and sink tasks through their lifecycle."""

from sluice.worker.runners.base import TaskRunner, TaskStatusListener, WorkerTask
from sluice.worker.runners.sink import SinkTaskRunner
from sluice.worker.runners.source import SourceTaskRunner

__all__ = ["TaskRunner", "TaskStatusListener", "WorkerTask", "SinkTaskRunner", "SourceTaskRunner"]
