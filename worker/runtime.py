"""Process-wide settings of a worker (and of each task process)."""

from __future__ import annotations

import ctypes
import gc
import logging
import os
import sys
from collections.abc import Callable

log = logging.getLogger(__name__)

# Records are short-lived tuples allocated by the hundred thousand per second; with CPython's
# default gen-0 threshold (700) the collector runs thousands of times a second and each run walks
# the worker's long-lived objects too. A larger threshold plus gc.freeze() of what start-up
# created measured ~2x faster record paths (file source: 1.0M → 2.0-2.7M lines/s).
GEN0_THRESHOLD = 50_000


def tune_gc() -> None:
    """Call once the worker has started: freeze start-up objects and collect less often, and keep
    freed heap memory for the next batch (:func:`retain_freed_memory`)."""
    retain_freed_memory()
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, gen1, gen2)


# Batches allocate megabytes (records, converted bytes) that all die together when the runtime
# drops them. With glibc's default trim threshold (128 KiB) that memory goes back to the kernel at
# once and the next batch page-faults it in again: measured on the CDC benchmark, JSON conversion
# took ~1.9x longer (10 µs instead of 5.5 µs per event) and decoding ~10 % longer. A higher
# M_TRIM_THRESHOLD keeps that much free memory in the heap (RSS stays at its high-water mark, at
# most the threshold above the live data). Not applied when MALLOC_TRIM_THRESHOLD_ is set (the
# operator chose) or without glibc.
M_TRIM_THRESHOLD = -1  # glibc <malloc.h>
TRIM_THRESHOLD_BYTES = 32 << 20

_applied = False


def retain_freed_memory(threshold: int = TRIM_THRESHOLD_BYTES) -> bool:
    """Set glibc's trim threshold to ``threshold`` bytes (once per process); whether it is set."""
    global _applied
    if _applied:
        return True
    if not sys.platform.startswith("linux") or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    if mallopt(M_TRIM_THRESHOLD, threshold) != 1:
        return False
    _applied = True
    log.debug("malloc trim threshold set to %d bytes", threshold)
    return True


def parent_death_signal() -> Callable[[int, int], None] | None:
    """``arm(signal, parent_pid)``: have Linux send ``signal`` to this process when the thread that
    created it ends (``PR_SET_PDEATHSIG``), and exit at once if ``parent_pid`` is already gone (it
    died before the call took effect). ``None`` where the call does not exist.

    ``prctl`` is looked up here, so a ``preexec_fn`` built before ``fork`` loads nothing in the child.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def arm(sig: int, parent_pid: int) -> None:
        prctl(1, sig)  # PR_SET_PDEATHSIG
        if os.getppid() != parent_pid:
            os._exit(1)

    return arm
