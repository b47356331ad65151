"""How much data a test moves: the smallest size that still exercises its paths, or the large one.

CI runs the small sizes; each reduced test says in its docstring what the small size still covers
(chunk boundaries, batch splits, rebalances). ``SLUICE_TEST_FULL_SIZES=1`` restores the sizes the
tests were written with (a million-row snapshot, a hundred thousand change events, ...) for a run
that wants them; ``benchmarks/`` measures the large sizes' speed.
"""

from __future__ import annotations

import os

FULL = os.environ.get("SLUICE_TEST_FULL_SIZES", "").strip().lower() in ("1", "true", "yes")


def size(small: int, full: int) -> int:
    """``small`` in a normal run, ``full`` with ``SLUICE_TEST_FULL_SIZES=1``."""
    return full if FULL else small
