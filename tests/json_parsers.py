"""The two parsers the sinks read batches of schemaless JSON with, as a fixture.

A test module that imports :func:`parser_fixture` (the fixture ``parser``) runs each of its tests
twice: with Sluice's native parser (``converters/json_arrow.py``, built by ``make setup``) and with
pyarrow's JSON reader, which the sinks fall back to when the native one is not installed. A missing
native parser fails its half of the tests: it never turns them into skips.
"""

from __future__ import annotations

import pytest

from sluice.converters import json_arrow


def require_native() -> None:
    if not json_arrow.available():
        pytest.fail("sluice_native is not installed: `make setup` builds it from native/ (needs cargo)")


@pytest.fixture(name="parser", autouse=True, params=["native", "arrow"])
def parser_fixture(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "arrow":
        monkeypatch.setattr(json_arrow, "sluice_native", None)
    else:
        require_native()
    return str(request.param)
