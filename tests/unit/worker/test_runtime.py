"""Process-wide runtime settings."""

from __future__ import annotations


def test_retaining_freed_memory_is_set_once_per_process() -> None:
    from sluice.worker.runtime import retain_freed_memory

    first = retain_freed_memory()
    assert retain_freed_memory() is first
