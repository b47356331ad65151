"""A headless Chromium driven by Selenium, for the web console's tests (tests/integration/test_console.py).

Debian's ``chromium`` and ``chromium-driver`` packages (deploy/bootstrap.sh installs them) put the
browser and its WebDriver at :data:`CHROMIUM` and :data:`CHROMEDRIVER`; Selenium is a dev extra.
Without them the tests skip, and under ``CI=true`` fail (:func:`tests.unavailable.unavailable`).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.unavailable import unavailable

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")

T = TypeVar("T")


def chromium_driver(downloads: Path) -> Iterator[Any]:
    """One headless Chromium for a module's tests, quit afterwards."""
    try:
        # Imported here: selenium is a dev extra, and its absence must say what to install.
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        unavailable("selenium is not installed: pip install -e '.[dev]'")
    for binary, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not binary.exists() and shutil.which(binary.name) is None:
            unavailable(f"{binary} is missing: apt-get install {package} (deploy/bootstrap.sh does)")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM if CHROMIUM.exists() else shutil.which(CHROMIUM.name))
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,1000",
    ):
        # --no-sandbox: the tests may run as root (CI does), where Chromium's own sandbox refuses to start.
        options.add_argument(argument)
    options.add_experimental_option("prefs", {"download.default_directory": str(downloads)})
    service = Service(executable_path=str(CHROMEDRIVER if CHROMEDRIVER.exists() else shutil.which(CHROMEDRIVER.name)))
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(check: Callable[[], T | None], what: str, timeout: float = 20.0, interval: float = 0.1) -> T:
    """Polls ``check`` until it returns something truthy (returned); fails naming ``what``.

    Exceptions from the page (an element not there yet, or replaced while read) count as "not yet".
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            result = check()
        except Exception as error:  # noqa: BLE001 - a stale or missing element is "not yet"
            last = error
        else:
            if result:
                return result
            last = result
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def set_json(driver: Any, field: Any, value: Any) -> None:
    """Puts ``value`` as indented JSON into a text field, as typing would (an ``input`` event follows)."""
    driver.execute_script(
        "arguments[0].value = arguments[1]; arguments[0].dispatchEvent(new Event('input'))",
        field,
        json.dumps(value, indent=2),
    )


# The locators below are Selenium's By.ID and By.CSS_SELECTOR values, written out: this module
# imports selenium only where a browser is made, so that its absence can say what to install.


def text_of(driver: Any, element_id: str) -> str:
    return str(driver.find_element("id", element_id).text)


def connector_state(driver: Any) -> str:
    return str(driver.find_element("id", "connector-state").get_attribute("data-state"))


def shot(driver: Any, tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.png"
    assert driver.save_screenshot(str(path)), f"no screenshot of {name}"
    return path


def overview_row(driver: Any, name: str) -> Any:
    return driver.find_element("css selector", f'#connectors tr[data-connector="{name}"]')

