"""The console with 200 real connectors of 4 tasks each (800 running tasks in one worker's task
hosts), in a real headless Chromium: the overview lists them all with their task badges, counts and
throughput from every task's metrics; the filter and a connector page work at that size.

The times a person waits (the overview's first full draw after navigation, a whole refresh with its
REST calls, drawing the rows, filtering) are measured in the page and printed for the note, never
asserted: a loaded CI machine is not a slow console.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.console_browser import chromium_driver, shot, text_of, wait_for
from tests.integration.kafka_helpers import unique_topic_name
from tests.integration.worker_process import WorkerFactory, WorkerProcess
from tests.unavailable import unavailable

try:
    from selenium.webdriver.common.by import By
except ImportError:
    unavailable("selenium is not installed: pip install -e '.[dev]'", allow_module_level=True)

pytestmark = pytest.mark.integration

CONNECTORS, TASKS = 200, 4


@pytest.fixture(scope="module")
def worker(module_worker_process: WorkerFactory) -> WorkerProcess:
    worker = module_worker_process()
    topic = unique_topic_name("console-scale")

    def create(i: int) -> None:
        config = {
            "connector.class": "SequenceSource",
            "topic": topic,
            "tasks.max": str(TASKS),
            "sequence.rate": "1",
            "sequence.batch.size": "1",
        }
        response = httpx.put(f"{worker.url}/connectors/scale-{i:03d}/config", json=config, timeout=30)
        assert response.status_code == 201, response.text

    started = time.monotonic()
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(create, range(CONNECTORS)))

    def running() -> bool:
        body = httpx.get(f"{worker.url}/connectors?expand=status", timeout=30).json()
        states = [t["state"] for entry in body.values() for t in entry["status"]["tasks"]]
        return len(states) == CONNECTORS * TASKS and set(states) == {"RUNNING"}

    wait_for(running, f"{CONNECTORS * TASKS} running tasks", timeout=120, interval=1)
    print(f"{CONNECTORS} connectors of {TASKS} tasks created and RUNNING in {time.monotonic() - started:.1f} s")
    return worker


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    yield from chromium_driver(tmp_path_factory.mktemp("downloads"))


def _overview(driver: Any) -> Any:
    return driver.find_element(By.ID, "overview")


def test_the_overview_lists_200_connectors_of_4_tasks(driver: Any, worker: WorkerProcess, tmp_path: Path) -> None:
    driver.get(f"{worker.url}/ui/#/")
    rows = "#connectors tr[data-connector]"
    wait_for(lambda: len(driver.find_elements(By.CSS_SELECTOR, rows)) == CONNECTORS, "200 rows", timeout=30)
    first_draw = driver.execute_script("return performance.now()")  # since navigation started
    assert len(driver.find_elements(By.CSS_SELECTOR, f"{rows} td.tasks .badge.state-running")) == CONNECTORS * TASKS
    assert text_of(driver, "count-total") == str(CONNECTORS) and text_of(driver, "count-running") == str(CONNECTORS)
    # Rates need two polls; then every connector's output shows (each task writes a record a second).
    moving: set[str] = set()

    def every_connector_moved() -> bool:
        # One script reads every row at once: the table is redrawn every 2 s, under any slower reader.
        rates = driver.execute_script(
            "return [...document.querySelectorAll('#connectors tr[data-connector]')]"
            ".map((row) => [row.dataset.connector, row.querySelector('td.rate-out').textContent])"
        )
        moving.update(name for name, rate in rates if rate not in ("—", "0", "0.0"))
        return len(moving) == CONNECTORS

    wait_for(every_connector_moved, "every connector's output rate", timeout=60, interval=1)
    wait_for(
        lambda: len(driver.find_elements(By.CSS_SELECTOR, f"{rows} svg.spark polyline")) == CONNECTORS, "200 sparklines"
    )

    refreshes, draws = [], []
    seen = int(_overview(driver).get_attribute("data-refreshes"))
    for _ in range(5):
        wait_for(
            lambda after=seen: int(_overview(driver).get_attribute("data-refreshes")) > after,
            "the next refresh",
            timeout=20,
        )
        seen = int(_overview(driver).get_attribute("data-refreshes"))
        refreshes.append(float(_overview(driver).get_attribute("data-refresh-ms")))
        draws.append(float(_overview(driver).get_attribute("data-render-ms")))
    shot(driver, tmp_path, "overview-200")

    search = driver.find_element(By.ID, "filter")
    search.send_keys("scale-19")
    wait_for(lambda: len(driver.find_elements(By.CSS_SELECTOR, rows)) == 10, "the filtered rows")
    filtered = float(_overview(driver).get_attribute("data-render-ms"))
    print(
        f"overview of {CONNECTORS} connectors / {CONNECTORS * TASKS} tasks: first full draw {first_draw:.0f} ms after "
        f"navigation; refresh (REST calls + parse + draw) median {statistics.median(refreshes):.0f} ms "
        f"(max {max(refreshes):.0f}); drawing the rows median {statistics.median(draws):.0f} ms "
        f"(max {max(draws):.0f}); filtering to 10 rows {filtered:.0f} ms"
    )


def test_a_connector_page_among_200(driver: Any, worker: WorkerProcess, tmp_path: Path) -> None:
    driver.get(f"{worker.url}/ui/#/connectors/scale-123")
    wait_for(
        lambda: len(driver.find_elements(By.CSS_SELECTOR, "#tasks .badge.state-running")) == TASKS, "4 running tasks"
    )
    before = wait_for(lambda: int(text_of(driver, "records-out") or 0) or None, "records out")
    wait_for(lambda: int(text_of(driver, "records-out")) > before, "the counter to move", timeout=20)
    workers = {cell.text for cell in driver.find_elements(By.CSS_SELECTOR, "#tasks td.worker")}
    assert workers == {worker.url.removeprefix("http://")}, workers
    wait_for(
        lambda: driver.find_elements(By.CSS_SELECTOR, "#chart-throughput svg.chart polyline.line-out"),
        "the throughput chart",
        timeout=20,
    )
    shot(driver, tmp_path, "connector-200")
