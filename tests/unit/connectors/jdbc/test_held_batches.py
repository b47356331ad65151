"""The JDBC sink's held polls (connectors/sink/jdbc/progress.py): bounded by batch.size and by count."""

from __future__ import annotations

from sluice.connectors.sink.jdbc.progress import MAX_HELD_BATCHES, HeldBatches
from tests.unit.api.test_batches import _raw_batch


def test_the_jdbc_sink_holds_at_most_batch_size_records_and_a_bounded_number_of_polls() -> None:
    """A huge batch.size must not hold a flush interval's records: the held polls are capped."""
    held = HeldBatches()
    for i in range(MAX_HELD_BATCHES - 1):
        held.add(_raw_batch([i], [i]))
        assert not held.full(10**9)
    held.add(_raw_batch([MAX_HELD_BATCHES], [0]))
    assert held.full(10**9) and held.take().offsets == list(range(MAX_HELD_BATCHES - 1)) + [MAX_HELD_BATCHES]
    held.add(_raw_batch([1, 2, 3], [1, 2, 3]))
    assert held.full(3) and not held.full(4) and held.fits(_raw_batch([4], [4]), 4)
    assert not held.fits(_raw_batch([4], [4]), 3)
