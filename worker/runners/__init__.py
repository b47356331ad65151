"""Task runners: the threads that drive source and sink tasks through their lifecycle."""

from worker.runners.base import TaskStatusListener, WorkerTask
from worker.runners.sink import SinkTaskRunner
from worker.runners.source import SourceTaskRunner

__all__ = ["TaskStatusListener", "WorkerTask", "SinkTaskRunner", "SourceTaskRunner"]
