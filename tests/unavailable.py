"""What a test does when something it needs is not installed: under ``CI=true`` the run fails (a
skipped integration test proves nothing, and CI installs everything); elsewhere the test skips,
saying what to install."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def unavailable(message: str, *, allow_module_level: bool = False) -> NoReturn:
    """Fail under CI=true, skip elsewhere; ``message`` says what is missing and how to get it."""
    if in_ci():
        pytest.fail(f"{message} (CI=true: a missing service or tool is a failure)", pytrace=False)
    pytest.skip(message, allow_module_level=allow_module_level)
