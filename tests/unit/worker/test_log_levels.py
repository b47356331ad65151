"""Logger levels set at runtime: applied to a logger and its descendants, remembered in order, told to subscribers."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from sluice.worker.observability.log_levels import LoggerLevelOverrides, apply_logger_levels, set_logger_level


@pytest.fixture
def loggers() -> Iterator[list[logging.Logger]]:
    names = ["sluice_test_levels", "sluice_test_levels.a", "sluice_test_levels.a.b", "sluice_test_levels_other"]
    made = [logging.getLogger(n) for n in names]
    yield made
    for logger in made:
        logger.setLevel(logging.NOTSET)


def test_a_level_applies_to_the_logger_and_its_descendants_only(loggers: list[logging.Logger]) -> None:
    parent, child, grandchild, sibling = loggers
    child.setLevel(logging.ERROR)
    affected = set_logger_level("sluice_test_levels", logging.DEBUG)
    assert set(affected) == {"sluice_test_levels", "sluice_test_levels.a", "sluice_test_levels.a.b"}
    assert [lg.getEffectiveLevel() for lg in (parent, child, grandchild)] == [logging.DEBUG] * 3
    assert sibling.level == logging.NOTSET
    # A logger created afterwards inherits it.
    assert logging.getLogger("sluice_test_levels.later").getEffectiveLevel() == logging.DEBUG


def test_replaying_the_levels_in_order_rebuilds_the_state(loggers: list[logging.Logger]) -> None:
    overrides = LoggerLevelOverrides()
    overrides.set("sluice_test_levels.a", logging.DEBUG)
    overrides.set("sluice_test_levels", logging.WARNING)  # covers .a again
    overrides.set("sluice_test_levels.a.b", logging.ERROR)
    expected = [lg.level for lg in loggers]
    for logger in loggers:
        logger.setLevel(logging.NOTSET)
    apply_logger_levels(overrides.current())
    assert [lg.level for lg in loggers] == expected == [logging.WARNING, logging.WARNING, logging.ERROR, logging.NOTSET]


def test_a_level_set_again_moves_to_the_end(loggers: list[logging.Logger]) -> None:
    overrides = LoggerLevelOverrides()
    overrides.set("sluice_test_levels.a", logging.DEBUG)
    overrides.set("sluice_test_levels", logging.INFO)
    overrides.set("sluice_test_levels.a", logging.ERROR)
    assert overrides.current() == [("sluice_test_levels", logging.INFO), ("sluice_test_levels.a", logging.ERROR)]


def test_subscribers_get_the_levels_so_far_then_each_change_until_they_unsubscribe(loggers: list[logging.Logger]) -> None:
    overrides = LoggerLevelOverrides()
    overrides.set("sluice_test_levels", logging.INFO)
    heard: list[tuple[str, int]] = []
    so_far, unsubscribe = overrides.subscribe(lambda name, level: heard.append((name, level)))
    assert so_far == [("sluice_test_levels", logging.INFO)]
    overrides.set("sluice_test_levels.a", logging.DEBUG)
    unsubscribe()
    overrides.set("sluice_test_levels.a", logging.ERROR)
    assert heard == [("sluice_test_levels.a", logging.DEBUG)]


def test_a_failing_subscriber_does_not_stop_the_change(loggers: list[logging.Logger]) -> None:
    overrides = LoggerLevelOverrides()

    def broken(name: str, level: int) -> None:
        raise OSError("pipe closed")

    overrides.subscribe(broken)
    assert overrides.set("sluice_test_levels", logging.DEBUG)[0] == "sluice_test_levels"
    assert loggers[0].level == logging.DEBUG
