"""Connector-defined transaction boundaries for a CDC task (exactly once, ``transaction.boundary=connector``).

A Kafka transaction must hold whole database transactions. After each poll the task asks the
runtime for a commit only when everything it handed out so far belongs to committed database
transactions; and since a busy database never pauses between transactions (so a poll cut at
``max.batch.size`` nearly always ends inside one), a poll that read past a commit hands out only
the events up to it and keeps the rest for the next poll (:meth:`~.emitter.ChangeBuffer.take_settled`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from sluice.connectors.api import TransactionContext

_Batch = TypeVar("_Batch")


class SettlingBuffer(Protocol):
    """What the boundaries need of a decoder (:class:`~.emitter.ChangeBuffer`)."""

    outbox: list

    def settled(self) -> bool: ...

    def take_settled(self) -> object | None: ...


class WholeTransactions:
    """One task's commit requests; :attr:`split`: the last batch ended at a commit before the
    transaction being decoded (its heartbeat would carry the tail's offset: it waits)."""

    def __init__(self, context: TransactionContext) -> None:
        self._context = context
        self.split = False

    def take(self, decoder: SettlingBuffer, take_all: Callable[[], _Batch]) -> _Batch:
        """The poll's batch: ``take_all()``, or, when a transaction is being decoded and one committed
        since the last batch, the events up to that commit."""
        if decoder.outbox or decoder.settled():
            return take_all()
        head = decoder.take_settled()
        if head is None:  # inside one transaction since the last batch: it spans polls
            return take_all()
        self.split = True
        return head  # type: ignore[return-value]  # a batch of the decoder's own kind

    def after_poll(self, between: Callable[[], bool]) -> None:
        """Ask for a commit when the poll ended between database transactions: it was cut at a
        commit, or ``between()`` (nothing waits in the task's outbox and the decoder is settled)."""
        if self.split:
            self.split = False
            self._context.commit_transaction()
        elif between():
            self._context.commit_transaction()
