"""The context a source task sees (:class:`~connectors.api.SourceTaskContext`), as the source
runner builds it: the task's id, its offset reader, what the runtime offers to produce as it is,
the files it may open, and — exactly once, with ``transaction.boundary=connector`` — its
transaction requests."""

from __future__ import annotations

from sluice.connectors.api import LocalFiles, Serialization
from sluice.offsets import StoreOffsetReader
from sluice.worker.config.local_paths import NO_LOCAL_FILES
from sluice.worker.runners.source_transactions import TransactionRequests
from sluice.worker.status import ConnectorTaskId


class SourceTaskContextImpl:
    """The context a source task sees."""

    def __init__(
        self,
        task_id: ConnectorTaskId,
        offset_reader: StoreOffsetReader,
        serialization: Serialization | None = None,
        local_files: LocalFiles = NO_LOCAL_FILES,
        transactions: TransactionRequests | None = None,
    ) -> None:
        self._id = task_id
        self._reader = offset_reader
        self._serialization = serialization
        self._local_files = local_files
        self._transactions = transactions

    @property
    def connector_name(self) -> str:
        return self._id.connector

    @property
    def task_id(self) -> int:
        return self._id.task

    @property
    def offset_reader(self) -> StoreOffsetReader:
        return self._reader

    @property
    def serialization(self) -> Serialization | None:
        return self._serialization

    @property
    def local_files(self) -> LocalFiles:
        return self._local_files

    @property
    def transaction_context(self) -> TransactionRequests | None:
        return self._transactions
