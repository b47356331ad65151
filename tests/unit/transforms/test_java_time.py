from __future__ import annotations

import datetime as dt

import pytest

from sluice.connectors.api import ConfigError, DataError
from sluice.transforms import JavaDateFormat

INSTANT = dt.datetime(2024, 3, 5, 7, 8, 9, 45000, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("pattern", "text"),
    [
        ("yyyyMMdd", "20240305"),
        ("yyyy-MM-dd'T'HH:mm:ss.SSS", "2024-03-05T07:08:09.045"),
        ("yyyy-MM-dd'T'HH:mm:ss.SSSXXX", "2024-03-05T07:08:09.045Z"),
        ("yyyy-MM-dd HH:mm:ss Z", "2024-03-05 07:08:09 +0000"),
        ("dd MMM yyyy hh:mm a", "05 Mar 2024 07:08 AM"),
        ("EEEE, MMMM d, yy", "Tuesday, March 5, 24"),
        ("yyyy.DDD 'day''s' k", "2024.065 day's 7"),
    ],
)
def test_format(pattern: str, text: str) -> None:
    assert JavaDateFormat(pattern).format(INSTANT) == text


def test_parse_round_trips_and_offsets() -> None:
    fmt = JavaDateFormat("yyyy-MM-dd'T'HH:mm:ss.SSS")
    assert fmt.parse("2024-03-05T07:08:09.045") == INSTANT
    assert JavaDateFormat("yyyyMMdd").parse("20240305") == dt.datetime(2024, 3, 5, tzinfo=dt.UTC)
    assert JavaDateFormat("yyyy-MM-dd HH:mmXXX").parse("2024-03-05 09:08+02:00") == INSTANT.replace(
        second=0, microsecond=0
    )
    assert JavaDateFormat("dd MMM yyyy hh:mm a").parse("05 Mar 2024 07:08 PM").hour == 19
    with pytest.raises(DataError, match="does not match"):
        fmt.parse("2024-03-05")


def test_bad_patterns_and_units() -> None:
    with pytest.raises(ConfigError, match="Illegal pattern character 'q'"):
        JavaDateFormat("yyyyqq")
    with pytest.raises(ConfigError, match="Unterminated quote"):
        JavaDateFormat("yyyy'T")
    assert JavaDateFormat("yyyyMMdd").unit_ms == 86_400_000
    assert JavaDateFormat("yyyyMMddHHmm").unit_ms == 60_000
