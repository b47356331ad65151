"""The web console at /ui in a real headless Chromium, against a real worker, Kafka and PostgreSQL.

One worker (REST authentication on: an admin, a viewer and a viewer scoped to ``console-pg-*``)
and one browser serve the whole module. The tests create a JDBC source through the form (a
validation error shown on its field first), watch it run and count, read a failed sink task's
trace, pause and resume through the buttons, and check what each principal sees — and that a
``${env:…}`` password never reaches the page. Increment 2: a sink's dead letter read in the DLQ
inspector and redriven, a backfill's progress bar reaching 100 %, a stopped source's offset edited.
Increment 3: a running source's next records on its live tap page (a viewer gets no tap), and the
overview's workers from ``GET /cluster``. Increment 4: the overview's workers each with their own
health, the connector page's last-hour chart from the worker's samples, a backfill spec built in the
generated form (its live validation on the field, *Run now*, the masked spec, cancel), offsets edited
in their form, a binary dead letter shown as hex and redriven byte for byte, and a tenant's scoped
admin reaching its own connectors' DLQ and tap only. Every page is saved as a screenshot under the
test's ``tmp_path``.
"""

from __future__ import annotations

import base64
import fnmatch
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.integration.console_browser import (
    chromium_driver,
    connector_state,
    overview_row,
    set_json,
    shot,
    text_of,
    wait_for,
)
from tests.integration.kafka_helpers import OutgoingRecord, consume_all, create_topic, produce, unique_topic_name
from tests.integration.worker_process import WorkerFactory, WorkerProcess
from tests.services.postgres import PostgresServer
from tests.unavailable import unavailable

try:  # a dev extra: without it the module skips (fails under CI=true), as without Chromium
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select
except ImportError:
    unavailable("selenium is not installed: pip install -e '.[dev]'", allow_module_level=True)

pytestmark = pytest.mark.integration

USERS = {"admin": "admin-pw", "viewer": "viewer-pw", "scoped": "scoped-pw", "team": "team-pw"}
#: The password the connectors' ${env:...} reference resolves to: it must appear nowhere in the page.
SECRET = f"pg-secret-{uuid.uuid4().hex}"
SECRET_REF = "${env:SLUICE_TEST_CONSOLE_PASSWORD}"
JDBC_SOURCE = "sluice.connectors.source.jdbc.connector.JdbcSourceConnector"
SEQUENCE = "console-seq"


@pytest.fixture(scope="module")
def worker(module_worker_process: WorkerFactory) -> WorkerProcess:
    return module_worker_process(
        env={"SLUICE_TEST_CONSOLE_PASSWORD": SECRET},
        **{
            "rest.auth.basic.users": ",".join(f"{u}:{p}" for u, p in USERS.items()),
            # team: a tenant's admin, scoped to its connectors and their topics (a data scope).
            "rest.auth.roles": "admin:admin,viewer:viewer,scoped:viewer:console-pg-*,"
            "team:admin:console-team-*;topics=console-team-*",
            "config.providers": "env",
            "config.providers.env.param.allowlist.pattern": "SLUICE_TEST_.*",
            # Spark starts with the first backfill run only (test_a_backfill_reaches_100_percent).
            "backfill.spark.master": "local[1]",
            "backfill.spark.driver.memory": "1g",
            "backfill.spark.sql.shuffle.partitions": "1",
            "metrics.history.interval.ms": "1000",  # the connector page's last-hour chart: a sample a second
        },
    )


@pytest.fixture(scope="module")
def database(postgres: PostgresServer) -> str:
    """A database with a table ``orders`` of three rows; its SQLAlchemy URL."""
    url = postgres.create_database(f"console_{uuid.uuid4().hex[:8]}")
    with psycopg.connect(url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id serial PRIMARY KEY, item text NOT NULL)")
        conn.execute("INSERT INTO orders (item) VALUES ('apples'), ('pears'), ('plums')")
    return url


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    yield from chromium_driver(tmp_path_factory.mktemp("downloads"))


def api(worker: WorkerProcess, method: str, path: str, user: str = "admin", **kwargs: Any) -> httpx.Response:
    return httpx.request(method, f"{worker.url}{path}", auth=(user, USERS[user]), timeout=10, **kwargs)


def create(worker: WorkerProcess, name: str, config: dict[str, str]) -> None:
    response = api(worker, "PUT", f"/connectors/{name}/config", json=config)
    assert response.status_code in (200, 201), response.text


def jdbc_config(database: str, prefix: str) -> dict[str, str]:
    return {
        "connector.class": JDBC_SOURCE,
        "connection.url": database,
        "connection.user": "postgres",
        "connection.password": SECRET_REF,
        "mode": "incrementing",
        "incrementing.column.name": "id",
        "tables": "orders",
        "topic.prefix": prefix,
        "poll.interval.ms": "300",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
    }


@pytest.fixture(scope="module")
def sequence(worker: WorkerProcess) -> str:
    """A running sequence source every principal but ``scoped`` may see."""
    create(
        worker,
        SEQUENCE,
        {
            "connector.class": "SequenceSource",
            "topic": unique_topic_name("console-seq"),
            "sequence.rate": "20",
            "sequence.batch.size": "10",
            # JSON values: the live tap's page shows them as objects (test_the_live_tap_...).
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter.schemas.enable": "false",
        },
    )
    return SEQUENCE


def dlq_sink_config(topic: str, dlq: str, file: Path) -> dict[str, str]:
    """A FileStream sink that dead-letters every value that is not a JSON envelope (its converter's
    schemas.enable=true), with the error context headers."""
    return {
        "connector.class": "FileStreamSink",
        "topics": topic,
        "file": str(file),
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "true",
        "errors.tolerance": "all",
        "errors.deadletterqueue.topic.name": dlq,
        "errors.deadletterqueue.topic.replication.factor": "1",
        "errors.deadletterqueue.context.headers.enable": "true",
    }


def sign_in(driver: Any, worker: WorkerProcess, user: str, page: str = "") -> None:
    """Opens the console with no stored credential and signs in as ``user`` through its form."""
    driver.get(f"{worker.url}/ui/")
    driver.execute_script("sessionStorage.clear()")
    driver.get("about:blank")  # a fresh page load next, not a hash change the signed-in page would serve
    driver.get(f"{worker.url}/ui/#/{page}")
    wait_for(lambda: driver.find_element(By.ID, "signin-user").is_displayed(), "the sign-in form")
    driver.find_element(By.ID, "signin-user").send_keys(user)
    driver.find_element(By.ID, "signin-password").send_keys(USERS[user])
    driver.find_element(By.ID, "signin-submit").click()
    wait_for(lambda: user in driver.find_element(By.ID, "whoami").text, f"{user} to be signed in")


def test_create_a_jdbc_source_through_the_form(
    driver: Any, worker: WorkerProcess, database: str, tmp_path: Path
) -> None:
    name = "console-pg-orders"
    sign_in(driver, worker, "admin", "new")
    Select(wait_for(lambda: driver.find_element(By.ID, "plugin"), "the plugin list")).select_by_value(JDBC_SOURCE)
    password = wait_for(lambda: driver.find_element(By.ID, "field-connection.password"), "the generated form")
    assert password.get_attribute("type") == "password"
    assert "${provider:...}" in text_of(driver, "editor")

    # The whole config through the JSON view, with a mode the plugin does not know.
    config = {"name": name, **jdbc_config(database, "console-pg-"), "mode": "sometimes"}
    json_view = driver.find_element(By.ID, "json-view")
    json_view.clear()
    driver.execute_script(
        "arguments[0].value = arguments[1]; arguments[0].dispatchEvent(new Event('input'))",
        json_view,
        json.dumps(config, indent=2),
    )
    mode = wait_for(lambda: driver.find_element(By.ID, "field-mode"), "the mode field")
    assert mode.get_attribute("value") == "sometimes"  # JSON → form
    driver.find_element(By.ID, "btn-create").click()
    error = wait_for(lambda: text_of(driver, "error-mode"), "the error on the mode field")
    assert "sometimes" in error, error
    assert "incrementing" in error, error
    assert not text_of(driver, "error-connection.url")
    assert api(worker, "GET", f"/connectors/{name}").status_code == 404  # nothing was created
    shot(driver, tmp_path, "editor-error")

    mode.clear()
    mode.send_keys("incrementing")
    wait_for(
        lambda: '"mode": "incrementing"' in driver.find_element(By.ID, "json-view").get_attribute("value"),
        "form → JSON",
    )
    wait_for(lambda: not text_of(driver, "error-mode"), "the mode error to clear")
    driver.find_element(By.ID, "btn-create").click()

    wait_for(lambda: driver.current_url.endswith(f"#/connectors/{name}"), "the connector page")
    wait_for(lambda: connector_state(driver) == "RUNNING", "RUNNING", timeout=30)
    wait_for(
        lambda: driver.find_elements(By.CSS_SELECTOR, '#tasks tr[data-task="0"] .badge.state-running'), "task 0 RUNNING"
    )
    wait_for(lambda: text_of(driver, "records-out") not in ("", "0", "—"), "the record counter to move", timeout=30)
    assert text_of(driver, "records-out") == "3"
    assert api(worker, "GET", f"/connectors/{name}/config").json()["mode"] == "incrementing"
    shot(driver, tmp_path, "connector")

    driver.get(f"{worker.url}/ui/#/")
    row = wait_for(lambda: overview_row(driver, name), "the connector on the overview")
    wait_for(lambda: "RUNNING" in row.find_element(By.CSS_SELECTOR, ".state").text, "RUNNING on the overview")
    wait_for(
        lambda: driver.find_elements(By.CSS_SELECTOR, f'tr[data-connector="{name}"] svg.spark polyline'), "a sparkline"
    )
    cluster = api(worker, "GET", "/cluster").json()  # a standalone worker: itself, no leader
    mine = wait_for(
        lambda: driver.find_element(By.CSS_SELECTOR, f'#cluster-workers li[data-worker="{cluster["worker_id"]}"]'),
        "the workers",
    )
    assert "this worker" in mine.text and not driver.find_elements(By.CSS_SELECTOR, "#cluster-workers .worker-leader")
    assert mine.get_attribute("data-health") == "healthy"  # its own /health, through GET /cluster?health=true
    assert mine.find_element(By.CSS_SELECTOR, ".worker-health").text == "healthy"
    assert driver.find_element(By.ID, "cluster").get_attribute("data-mode") == "standalone"
    render_ms = driver.find_element(By.ID, "overview").get_attribute("data-render-ms")
    print(
        f"overview rendered {driver.find_element(By.ID, 'overview').get_attribute('data-rows')} rows in {render_ms} ms"
    )
    shot(driver, tmp_path, "overview")


def test_a_failed_task_shows_its_trace(
    driver: Any, worker: WorkerProcess, database: str, kafka: Any, tmp_path: Path
) -> None:
    name = "console-pg-sink"
    topic = unique_topic_name("console-sink")
    create(
        worker,
        name,
        {
            "connector.class": "JdbcSink",
            "connection.url": database,
            "topics": topic,
            "auto.create": "true",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter.schemas.enable": "false",
        },
    )
    produce(kafka.bootstrap_servers, topic, [OutgoingRecord(value=b"this is not JSON")])
    sign_in(driver, worker, "admin", f"connectors/{name}")
    trace = wait_for(
        lambda: driver.find_element(By.CSS_SELECTOR, '#tasks tr[data-task="0"] pre.trace').text,
        "the failed task's trace",
        timeout=40,
    )
    status = api(worker, "GET", f"/connectors/{name}/status").json()
    assert status["tasks"][0]["state"] == "FAILED"
    assert trace.strip() == status["tasks"][0]["trace"].strip()  # the full trace, as the API has it
    assert len(trace.splitlines()) > 1
    assert "FAILED" in driver.find_element(By.CSS_SELECTOR, '#tasks tr[data-task="0"] .state').text
    assert driver.find_element(By.CSS_SELECTOR, '#tasks tr[data-task="0"] .worker').text
    shot(driver, tmp_path, "failed-task")

    # Restart with its failed tasks, confirmed in the page's dialog.
    driver.find_element(By.ID, "restart-include-tasks").click()
    driver.find_element(By.ID, "restart-only-failed").click()
    driver.find_element(By.ID, "btn-restart").click()
    wait_for(lambda: driver.find_element(By.ID, "confirm").is_displayed(), "the restart confirmation")
    assert "only failed" in text_of(driver, "confirm-text")
    driver.find_element(By.ID, "confirm-ok").click()
    wait_for(lambda: text_of(driver, "action-message") == "Restart: done.", "the restart to be accepted")

    # Delete, confirmed in the page's dialog: back to the overview, and the worker has no such connector.
    driver.find_element(By.ID, "btn-delete").click()
    wait_for(lambda: driver.find_element(By.ID, "confirm").is_displayed(), "the confirmation")
    driver.find_element(By.ID, "confirm-ok").click()
    wait_for(lambda: api(worker, "GET", f"/connectors/{name}").status_code == 404, "the connector to be deleted")
    wait_for(lambda: driver.current_url.endswith("#/"), "the overview")


def test_pause_and_resume_through_the_buttons(
    driver: Any, worker: WorkerProcess, sequence: str, tmp_path: Path
) -> None:
    sign_in(driver, worker, "admin", f"connectors/{sequence}")
    wait_for(lambda: connector_state(driver) == "RUNNING", "RUNNING", timeout=30)
    driver.find_element(By.ID, "btn-pause").click()
    wait_for(lambda: connector_state(driver) == "PAUSED", "PAUSED")
    assert api(worker, "GET", f"/connectors/{sequence}/status").json()["connector"]["state"] == "PAUSED"
    shot(driver, tmp_path, "paused")
    driver.find_element(By.ID, "btn-resume").click()
    wait_for(lambda: connector_state(driver) == "RUNNING", "RUNNING again")
    assert api(worker, "GET", f"/connectors/{sequence}/status").json()["connector"]["state"] == "RUNNING"

    # Delete asks first; cancelling leaves the connector alone.
    driver.find_element(By.ID, "btn-delete").click()
    wait_for(lambda: driver.find_element(By.ID, "confirm").is_displayed(), "the confirmation")
    assert sequence in text_of(driver, "confirm-text")
    driver.find_element(By.ID, "confirm-cancel").click()
    wait_for(lambda: not driver.find_element(By.ID, "confirm").is_displayed(), "the confirmation to close")
    time.sleep(0.5)  # what a click that went through would have had time to do
    assert api(worker, "GET", f"/connectors/{sequence}").status_code == 200


def test_the_connector_page_charts_the_last_hour_as_the_worker_sampled_it(
    driver: Any, worker: WorkerProcess, sequence: str, tmp_path: Path
) -> None:
    def sampled() -> dict[str, Any] | None:
        history = api(worker, "GET", f"/connectors/{sequence}/metrics/history", user="viewer").json()
        return history if sum(p["out"] > 0 for p in history["points"]) >= 3 else None

    history = wait_for(sampled, "three samples of the sequence's output", timeout=20)
    assert history["interval_ms"] == 1000, history
    sign_in(driver, worker, "viewer", f"connectors/{sequence}")
    wait_for(lambda: driver.find_element(By.CSS_SELECTOR, "#chart-throughput svg.chart"), "the charts")
    assert driver.find_element(By.ID, "charts").get_attribute("data-source") == "tab"  # the last 5 min: this tab's polls
    Select(driver.find_element(By.ID, "chart-span")).select_by_value("1h")
    charts = driver.find_element(By.ID, "charts")
    wait_for(lambda: charts.get_attribute("data-source") == "workers", "the worker's history")
    wait_for(lambda: int(charts.get_attribute("data-points")) >= 3, "three samples on the chart", timeout=20)
    line = wait_for(
        lambda: driver.find_element(By.CSS_SELECTOR, "#chart-throughput svg.chart polyline.line-out"), "the out line"
    )
    assert int(line.get_attribute("data-points")) >= 2
    assert float(driver.find_element(By.CSS_SELECTOR, "#chart-throughput svg.chart").get_attribute("data-max")) > 0
    assert "every 1 s" in text_of(driver, "chart-source")
    assert not driver.find_elements(By.CSS_SELECTOR, "#chart-lag")  # a source has no consumer lag
    shot(driver, tmp_path, "charts")


def test_the_live_tap_shows_a_running_sources_next_records(
    driver: Any, worker: WorkerProcess, sequence: str, tmp_path: Path
) -> None:
    topic = api(worker, "GET", f"/connectors/{sequence}/config").json()["topic"]
    sign_in(driver, worker, "admin", f"connectors/{sequence}")
    wait_for(lambda: driver.find_element(By.ID, "btn-tap-page"), "the live tap link").click()
    count = wait_for(lambda: driver.find_element(By.ID, "tap-count"), "the tap form")
    count.clear()
    count.send_keys("5")
    driver.find_element(By.ID, "btn-tap").click()
    status = driver.find_element(By.ID, "tap-status")
    wait_for(lambda: status.get_attribute("data-state") == "complete", "the sample", timeout=20)
    assert status.text == "Complete: 5 record(s).", status.text
    rows = driver.find_elements(By.CSS_SELECTOR, "#tap-records tbody tr[data-index]")
    assert len(rows) == 5
    for row in rows:
        value = json.loads(row.find_element(By.CSS_SELECTOR, ".tap-value pre").text)  # pretty-printed JSON
        assert set(value) == {"task", "seq", "payload"}, value
        assert row.find_element(By.CSS_SELECTOR, ".tap-key").text == f"{value['task']}-{value['seq']}"
        assert row.find_element(By.CSS_SELECTOR, ".tap-topic").text == topic
        assert row.find_element(By.CSS_SELECTOR, ".tap-position").text == "—"  # a source's records have none yet
    shot(driver, tmp_path, "tap")


def test_credentials_roles_and_scopes(
    driver: Any, worker: WorkerProcess, database: str, sequence: str, tmp_path: Path
) -> None:
    secret_holder = "console-pg-secret"
    create(worker, secret_holder, jdbc_config(database, "console-secret-"))

    # No credentials: the shell loads, its data calls are refused, and it asks.
    driver.get(f"{worker.url}/ui/")
    driver.execute_script("sessionStorage.clear()")
    driver.refresh()
    wait_for(lambda: driver.find_element(By.ID, "signin").is_displayed(), "the sign-in form")
    driver.find_element(By.ID, "signin-user").send_keys("admin")
    driver.find_element(By.ID, "signin-password").send_keys("wrong")
    driver.find_element(By.ID, "signin-submit").click()
    wait_for(lambda: "refused" in text_of(driver, "signin-error"), "the refusal")
    shot(driver, tmp_path, "sign-in")

    # A viewer sees the connectors but no button that changes anything.
    sign_in(driver, worker, "viewer", f"connectors/{sequence}")
    wait_for(lambda: connector_state(driver) == "RUNNING", "the viewer's connector page", timeout=30)
    assert "Read-only" in text_of(driver, "controls")
    for button in ("btn-pause", "btn-resume", "btn-stop", "btn-restart", "btn-delete", "btn-edit", "btn-tap-page"):
        assert not driver.find_elements(By.ID, button), button
    assert not driver.find_element(By.ID, "nav-new").is_displayed()
    shot(driver, tmp_path, "viewer")
    driver.get(f"{worker.url}/ui/#/connectors/{sequence}/tap")  # no link, and the tap's route says why
    wait_for(lambda: "operator role" in text_of(driver, "tap-status"), "the viewer's refusal to tap")
    assert not driver.find_elements(By.ID, "btn-tap")
    driver.find_element(By.ID, "nav-backfills").click()  # listed, but no form and no cancel
    wait_for(lambda: driver.find_element(By.CSS_SELECTOR, "#backfills tbody tr"), "the viewer's backfills page")
    assert not driver.find_elements(By.ID, "backfill-create")
    assert not driver.find_elements(By.CSS_SELECTOR, ".btn-backfill-cancel, .btn-backfill-remove")

    # A principal scoped to console-pg-* sees only those connectors.
    sign_in(driver, worker, "scoped", "")
    wait_for(lambda: overview_row(driver, secret_holder), "the scoped principal's connectors")
    names = {
        row.get_attribute("data-connector")
        for row in driver.find_elements(By.CSS_SELECTOR, "#connectors tr[data-connector]")
    }
    assert secret_holder in names and sequence not in names, names
    assert all(n.startswith("console-pg-") for n in names), names
    assert not driver.find_element(By.ID, "nav-backfills").is_displayed()  # GET /backfills needs view on *
    shot(driver, tmp_path, "scoped")

    # The ${env:...} password: the reference shows, its value nowhere, as admin on every page.
    sign_in(driver, worker, "admin", f"connectors/{secret_holder}")
    wait_for(lambda: SECRET_REF in text_of(driver, "config"), "the config with its reference")
    assert SECRET not in driver.page_source
    driver.get(f"{worker.url}/ui/#/connectors/{secret_holder}/edit")
    field = wait_for(lambda: driver.find_element(By.ID, "field-connection.password"), "the edit form")
    assert field.get_attribute("value") == SECRET_REF
    assert SECRET not in driver.page_source
    assert SECRET not in str(driver.execute_script("return document.getElementById('json-view').value"))
    driver.get(f"{worker.url}/ui/#/")
    wait_for(lambda: overview_row(driver, secret_holder), "the overview")
    assert SECRET not in driver.page_source
    wait_for(
        lambda: driver.find_elements(By.CSS_SELECTOR, f'tr[data-connector="{sequence}"] svg.spark polyline'),
        "the sequence's sparkline",
    )
    shot(driver, tmp_path, "overview-all")


def test_the_console_matches_connector_patterns_as_the_worker_does(driver: Any, worker: WorkerProcess) -> None:
    """The console hides buttons by the grants' patterns: its glob must match what the worker's fnmatchcase does."""
    patterns = [
        "*",
        "orders-*",
        "orders-?",
        "o[rx]ders",
        "o[!r]ders",
        "a.b*",
        "x+y",
        "(a)",
        "[a-c]*",
        "ORDERS-*",
        "*-eu",
        "[abc",
        "a]b",
    ]
    names = [
        "orders-1",
        "orders-12",
        "oxders",
        "orders",
        "a.b.c",
        "aXb",
        "x+y",
        "xxy",
        "(a)",
        "b-eu",
        "c",
        "ORDERS-1",
        "d",
        "[abc",
        "a]b",
    ]
    driver.get(f"{worker.url}/ui/")
    got = driver.execute_async_script(
        """
        const [patterns, names, done] = arguments;
        import("/ui/api.js").then((api) => done(patterns.map((p) => names.map((n) => api.globRegExp(p).test(n)))))
          .catch((error) => done(String(error)));
        """,
        patterns,
        names,
    )
    expected = [[fnmatch.fnmatchcase(n, p) for n in names] for p in patterns]
    assert got == expected


def test_the_dlq_inspector_reads_a_dead_letter_and_redrives_it(
    driver: Any, worker: WorkerProcess, kafka: Any, tmp_path: Path
) -> None:
    name, topic, dlq = "console-dlq-sink", unique_topic_name("console-dlq-in"), unique_topic_name("console-dlq")
    create_topic(kafka.bootstrap_servers, topic)
    # schemas.enable=true and a value without the envelope: the value converter fails, the record is dead-lettered.
    produce(
        kafka.bootstrap_servers,
        topic,
        [OutgoingRecord(b'{"plain": "json"}', key="k1", headers=[("origin", b"console")])],
    )
    create(
        worker,
        name,
        dlq_sink_config(topic, dlq, tmp_path / "out.txt"),
    )
    sign_in(driver, worker, "admin", f"connectors/{name}")
    wait_for(lambda: driver.find_element(By.ID, "btn-dlq"), "the DLQ link").click()
    row = wait_for(
        lambda: driver.find_element(By.CSS_SELECTOR, '#dlq-records tr[data-offset="0"]'), "the dead letter", timeout=30
    )
    record = api(worker, "GET", f"/connectors/{name}/dlq").json()["records"][0]
    error = record["error"]
    assert row.find_element(By.CSS_SELECTOR, ".dlq-stage").text == error["stage"] == "VALUE_CONVERTER"
    assert row.find_element(By.CSS_SELECTOR, ".dlq-exception").text == error["exception"]
    assert error["exception"].endswith("DataError")
    assert row.find_element(By.CSS_SELECTOR, ".dlq-error-message").text == error["message"].strip() and error["message"]
    assert row.find_element(By.CSS_SELECTOR, ".dlq-key").text == "k1"
    assert row.find_element(By.CSS_SELECTOR, ".dlq-value").text == '{"plain": "json"}'
    assert row.find_element(By.CSS_SELECTOR, ".dlq-headers").text == "origin: console"
    assert dlq in text_of(driver, "dlq-topic")
    row.find_element(By.CSS_SELECTOR, "details summary").click()  # the stack trace opens
    assert row.find_element(By.CSS_SELECTOR, "pre.dlq-stacktrace").text.strip() == error["stacktrace"].strip()
    shot(driver, tmp_path, "dlq")

    row.find_element(By.CSS_SELECTOR, "input.dlq-pick").click()
    assert driver.find_element(By.ID, "dlq-from").get_attribute("value") == "0"
    driver.find_element(By.ID, "btn-redrive").click()
    wait_for(lambda: driver.find_element(By.ID, "confirm").is_displayed(), "the redrive confirmation")
    assert "max_redrives" in text_of(driver, "confirm-text") and "3 time(s)" in text_of(driver, "confirm-text")
    driver.find_element(By.ID, "confirm-ok").click()
    wait_for(lambda: text_of(driver, "dlq-redriven") == "Redriven: 1", "the redrive's answer")
    assert text_of(driver, "dlq-redriven-topics") == f"{topic}: 1"
    shot(driver, tmp_path, "dlq-redriven")
    back = consume_all(kafka.bootstrap_servers, topic, 2)
    assert [r.value for r in back] == [b'{"plain": "json"}'] * 2
    assert dict(back[1].headers).get("sluice.redrive.count") == b"1"
    assert dict(back[1].headers).get("origin") == b"console"
    assert not any(k.startswith("__connect.errors.") for k, _ in back[1].headers)


#: Bytes that are not UTF-8; the value is longer than the 64 bytes the inspector shows as hex.
BINARY_KEY = b"\xff\xfe\x00binary"
BINARY_VALUE = b"\xff\xfe\x00binary" + bytes(range(256))
BINARY_HEADER = b"\x00\x01\xfe"


def test_a_binary_dlq_record_shows_as_hex_and_is_redriven_byte_for_byte(
    driver: Any, worker: WorkerProcess, kafka: Any, tmp_path: Path
) -> None:
    """Key, value and a header that are not UTF-8: a binary badge, the length and the hex, never a mangled
    string; the base64 to copy is exact, and redriving sends the same bytes back."""
    name, topic, dlq = "console-dlq-binary", unique_topic_name("console-bin-in"), unique_topic_name("console-bin-dlq")
    create_topic(kafka.bootstrap_servers, topic)
    produce(
        kafka.bootstrap_servers,
        topic,
        [OutgoingRecord(BINARY_VALUE, key=BINARY_KEY, headers=[("blob", BINARY_HEADER), ("origin", b"console")])],
    )
    create(
        worker,
        name,
        dlq_sink_config(topic, dlq, tmp_path / "out.txt"),
    )
    sign_in(driver, worker, "admin", f"connectors/{name}/dlq")
    row = wait_for(
        lambda: driver.find_element(By.CSS_SELECTOR, '#dlq-records tr[data-offset="0"]'), "the dead letter", timeout=30
    )
    record = api(worker, "GET", f"/connectors/{name}/dlq").json()["records"][0]
    assert base64.b64decode(record["value"]["base64"]) == BINARY_VALUE and "text" not in record["value"]
    for cell, data in ((".dlq-key", BINARY_KEY), (".dlq-value", BINARY_VALUE)):
        shown = row.find_element(By.CSS_SELECTOR, cell)
        assert shown.find_element(By.CSS_SELECTOR, ".binary-tag").text == "binary"
        assert shown.find_element(By.CSS_SELECTOR, ".byte-count").text == f"{len(data)} bytes"
        hex_text = data[:64].hex(" ") + (" …" if len(data) > 64 else "")
        assert shown.find_element(By.CSS_SELECTOR, ".hex").text == hex_text
        copy = shown.find_element(By.CSS_SELECTOR, "input.base64").get_attribute("value")
        assert base64.b64decode(copy) == data
        assert "\ufffd" not in shown.text and "binary" in shown.text
    blob = [h for h in row.find_elements(By.CSS_SELECTOR, ".dlq-headers > div") if h.text.startswith("blob:")]
    assert len(blob) == 1 and blob[0].find_element(By.CSS_SELECTOR, ".hex").text == "00 01 fe"
    assert "origin: console" in row.find_element(By.CSS_SELECTOR, ".dlq-headers").text  # UTF-8 stays text
    row.find_element(By.CSS_SELECTOR, ".dlq-value details.base64-copy summary").click()
    shot(driver, tmp_path, "dlq-binary")

    row.find_element(By.CSS_SELECTOR, "input.dlq-pick").click()
    driver.find_element(By.ID, "btn-redrive").click()
    wait_for(lambda: driver.find_element(By.ID, "confirm").is_displayed(), "the redrive confirmation")
    driver.find_element(By.ID, "confirm-ok").click()
    wait_for(lambda: text_of(driver, "dlq-redriven") == "Redriven: 1", "the redrive's answer")
    back = consume_all(kafka.bootstrap_servers, topic, 2)
    assert [(r.key, r.value) for r in back] == [(BINARY_KEY, BINARY_VALUE)] * 2
    headers = dict(back[1].headers)
    assert headers.get("sluice.redrive.count") == b"1" and headers.get("blob") == BINARY_HEADER
    api(worker, "DELETE", f"/connectors/{name}")


def test_a_scoped_admin_reaches_only_its_own_connectors_dlq_and_tap(
    driver: Any, worker: WorkerProcess, kafka: Any, sequence: str, tmp_path: Path
) -> None:
    """A tenant's admin (connectors console-team-*, topics console-team-*): its own sink's dead
    letters and tap; of the other connectors, nothing in the list, and refusals on their pages."""
    name, topic, dlq = "console-team-sink", unique_topic_name("console-team-in"), unique_topic_name("console-team-dlq")
    create_topic(kafka.bootstrap_servers, topic)
    produce(kafka.bootstrap_servers, topic, [OutgoingRecord(b"not an envelope", key="t1")])
    config = dlq_sink_config(topic, dlq, tmp_path / "team.txt")
    outside = api(worker, "PUT", f"/connectors/{name}/config", user="team", json={**config, "topics": "orders"})
    assert outside.status_code == 400 and "topics" in outside.json()["message"], outside.text  # its data scope
    response = api(worker, "PUT", f"/connectors/{name}/config", user="team", json=config)
    assert response.status_code == 201, response.text

    sign_in(driver, worker, "team", "")
    wait_for(lambda: overview_row(driver, name), "the team's connector on the overview")
    names = {r.get_attribute("data-connector") for r in driver.find_elements(By.CSS_SELECTOR, "#connectors tr[data-connector]")}
    assert names and all(n.startswith("console-team-") for n in names), names
    driver.get(f"{worker.url}/ui/#/connectors/{name}")
    wait_for(lambda: driver.find_element(By.ID, "btn-dlq"), "its DLQ link").click()
    row = wait_for(lambda: driver.find_element(By.CSS_SELECTOR, '#dlq-records tr[data-offset="0"]'), "its dead letter", timeout=30)
    assert row.find_element(By.CSS_SELECTOR, ".dlq-key").text == "t1"
    driver.get(f"{worker.url}/ui/#/connectors/{name}/tap")
    assert wait_for(lambda: driver.find_element(By.ID, "btn-tap"), "its tap form").is_displayed()
    shot(driver, tmp_path, "team-dlq")

    # Another team's connector: refused by the API, and the console says so rather than showing anything.
    assert api(worker, "GET", f"/connectors/{sequence}/dlq", user="team").status_code == 403
    assert api(worker, "POST", f"/connectors/{sequence}/tap", user="team").status_code == 403
    driver.get(f"{worker.url}/ui/#/connectors/{sequence}/tap")
    wait_for(lambda: "operator role" in text_of(driver, "tap-status"), "the refusal to tap another's connector")
    assert not driver.find_elements(By.ID, "btn-tap")
    driver.get(f"{worker.url}/ui/#/connectors/{sequence}/dlq")
    wait_for(lambda: "operator role" in text_of(driver, "dlq-message"), "the refusal of another's DLQ")
    assert not driver.find_elements(By.CSS_SELECTOR, "#dlq-records")
    api(worker, "DELETE", f"/connectors/{name}")


def test_a_source_dlq_is_read_only_and_a_viewer_has_no_inspector(
    driver: Any, worker: WorkerProcess, tmp_path: Path
) -> None:
    """A source's dead letters can be read, not redriven (no button); a viewer gets no DLQ link."""
    name, dlq = "console-dlq-source", unique_topic_name("console-src-dlq")
    config = {
        "connector.class": "FileStreamSource",
        "file": str(tmp_path / "in.txt"),
        "topic": unique_topic_name("console-src"),
    }
    create(worker, name, {**config, "errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq})
    sign_in(driver, worker, "admin", f"connectors/{name}/dlq")
    wait_for(lambda: "not redriven" in text_of(driver, "dlq-redrive"), "the source's DLQ page")
    assert not driver.find_elements(By.ID, "btn-redrive")
    assert dlq in text_of(driver, "dlq-topic")
    sign_in(driver, worker, "viewer", f"connectors/{name}")
    wait_for(lambda: "operator role" in text_of(driver, "dlq-link"), "the viewer's DLQ note")
    assert not driver.find_elements(By.ID, "btn-dlq")
    api(worker, "DELETE", f"/connectors/{name}")


def test_a_backfill_reaches_100_percent_on_the_backfills_page(
    driver: Any, worker: WorkerProcess, database: str, postgres: PostgresServer, tmp_path: Path
) -> None:
    """A 3-row JDBC backfill made through the generated form (the cheapest real run: most of its time
    is Spark's JVM starting in the worker), its spec as the worker shows it, and Run now."""
    job, topic = "console-orders", unique_topic_name("console-bf")
    sign_in(driver, worker, "admin", "")
    driver.find_element(By.ID, "nav-backfills").click()

    def field(key: str) -> Any:  # found anew each time: the JSON view redraws the form
        return driver.find_element(By.ID, f"backfill-field-{key}")

    wait_for(lambda: field("source.connection.url"), "the form generated from GET /backfills/kinds")
    assert Select(driver.find_element(By.ID, "backfill-kind")).first_selected_option.text == "jdbc_to_topic"
    assert field("source.connection.password").get_attribute("type") == "password"
    assert "${provider:...}" in text_of(driver, "backfill-create")
    assert field("source.numeric.mapping").tag_name == "select"
    assert field("target.key.converter.schemas.enable").get_attribute("type") == "checkbox"
    assert field("target.producer").tag_name == "textarea"
    assert field("source.num.partitions").get_attribute("placeholder") == "4"
    for key, value in (
        ("id", job), ("source.table", "orders"), ("source.connection.user", "postgres"),
        ("source.connection.password", SECRET_REF), ("target.topic", topic),
    ):  # fmt: skip
        field(key).send_keys(value)
    field("source.connection.url").send_keys("localhost:5432/shop")  # no scheme: not a database URL

    # Live validation (POST /backfills/validate) names the field, and stores nothing.
    error = wait_for(
        lambda: text_of(driver, "backfill-error-source.connection.url"), "the error on source.connection.url"
    )
    assert "not a database URL" in error, error
    assert not text_of(driver, "backfill-error-source.table") and not text_of(driver, "backfill-error-id")
    assert api(worker, "GET", "/backfills").json() == []
    spec_box = driver.find_element(By.ID, "backfill-spec")
    spec = json.loads(spec_box.get_attribute("value"))  # form → JSON
    assert spec["source"] == {
        "table": "orders", "connection.user": "postgres", "connection.password": SECRET_REF, "connection.url": "localhost:5432/shop",
    }  # fmt: skip
    assert (spec["id"], spec["kind"], spec["target"]) == (job, "jdbc_to_topic", {"topic": topic})
    shot(driver, tmp_path, "backfill-form-error")

    jdbc = postgres.jdbc_url(database.rsplit("/", 1)[1])
    spec["source"]["connection.url"] = jdbc
    set_json(driver, spec_box, spec)
    wait_for(lambda: field("source.connection.url").get_attribute("value") == jdbc, "JSON → form")
    wait_for(lambda: not text_of(driver, "backfill-error-source.connection.url"), "the error to clear")
    driver.find_element(By.ID, "btn-backfill-submit").click()
    wait_for(lambda: "submitted" in text_of(driver, "backfill-create-message"), "the worker's answer")
    row = f'#backfills tr[data-job="{job}"]'
    wait_for(
        lambda: driver.find_element(By.CSS_SELECTOR, row).get_attribute("data-state") == "SUCCEEDED",
        "SUCCEEDED",
        timeout=120,
    )
    status = api(worker, "GET", f"/backfills/{job}").json()["status"]
    assert status["state"] == "SUCCEEDED" and status["rows_done"] == 3, status
    progress = driver.find_element(By.CSS_SELECTOR, f"{row} progress")
    assert progress.get_attribute("value") == "100" and progress.get_attribute("max") == "100"
    assert driver.find_element(By.CSS_SELECTOR, f"{row} .backfill-percent").text == "100 %"
    assert driver.find_element(By.CSS_SELECTOR, f"{row} .backfill-rows").text == "3 / 3"
    if status.get("source_position", {}).get("lsn"):
        assert driver.find_element(By.CSS_SELECTOR, f"{row} .backfill-lsn").text == status["source_position"]["lsn"]
    shot(driver, tmp_path, "backfills")

    # The spec as GET /backfills/{id} gives it: the reference shown as written, its value nowhere.
    driver.find_element(By.CSS_SELECTOR, f"{row} details.backfill-spec-view summary").click()
    shown = wait_for(
        lambda: json.loads(driver.find_element(By.CSS_SELECTOR, f"{row} .backfill-spec-json").text), "the job's spec"
    )
    assert shown["source"]["connection.password"] == SECRET_REF and shown["source"]["connection.url"] == jdbc
    assert SECRET not in driver.page_source
    shot(driver, tmp_path, "backfill-spec")

    # Run now: a second run of the stored spec, three rows again.
    driver.find_element(By.CSS_SELECTOR, f"{row} .btn-backfill-run").click()
    wait_for(lambda: "started" in text_of(driver, "backfills-message"), "the run's start")
    again = wait_for(
        lambda: (
            (s := api(worker, "GET", f"/backfills/{job}").json()["status"])["run_id"] != status["run_id"]
            and s["state"] == "SUCCEEDED"
            and s
        ),
        "a second run to succeed",
        timeout=60,
    )
    assert again["rows_done"] == 3, again
    wait_for(lambda: driver.find_element(By.CSS_SELECTOR, row).get_attribute("data-state") == "SUCCEEDED", "the row")
    assert driver.find_element(By.CSS_SELECTOR, f"{row} details.backfill-spec-view").get_attribute("open") is not None


def test_a_running_backfill_is_cancelled_from_its_row(
    driver: Any, worker: WorkerProcess, database: str, postgres: PostgresServer, tmp_path: Path
) -> None:
    """A read that takes minutes (a view whose column sleeps half a second a row), cancelled by its button.

    The sleep is a STABLE function, so the row count taken before the read skips the column (PostgreSQL
    drops unused non-volatile outputs), while Spark's read, one row per fetch (``fetch.size`` 1: pgjdbc
    uses a cursor, Spark turns autocommit off for it), evaluates it row by row: Spark checks for a
    cancel between rows. Spark is already up from the backfill test before (same worker).
    """
    with psycopg.connect(database.replace("postgresql+psycopg", "postgresql"), autocommit=True) as conn:
        conn.execute(
            "CREATE OR REPLACE FUNCTION console_nap(n int) RETURNS int LANGUAGE plpgsql STABLE"
            " AS $$ BEGIN PERFORM pg_sleep(0.5); RETURN n; END $$"
        )
        conn.execute(
            "CREATE OR REPLACE VIEW slow_orders AS SELECT g AS id, console_nap(g) AS nap FROM generate_series(1, 600) AS g"
        )
    job, literal = "console-slow", f"literal-{uuid.uuid4().hex}"
    spec = {
        "id": job,
        "kind": "jdbc_to_topic",
        "source": {
            "connection.url": postgres.jdbc_url(database.rsplit("/", 1)[1]),
            "connection.user": "postgres",
            "connection.password": literal,  # trust authentication: any password; masked on the way out
            "table": "slow_orders",
            "fetch.size": 1,
            "cdc.position": "off",
        },
        "target": {"topic": unique_topic_name("console-slow"), "partitions": 1},
    }
    assert api(worker, "POST", "/backfills", json=spec).status_code == 201
    sign_in(driver, worker, "admin", "backfills")
    row = f'#backfills tr[data-job="{job}"]'
    wait_for(
        lambda: (
            driver.find_element(By.CSS_SELECTOR, f"{row} .backfill-rows").text.endswith("/ 600")
            and not driver.find_element(By.CSS_SELECTOR, f"{row} .backfill-rows").text.startswith("0 ")
        ),
        "the first rows of 600 written",
        timeout=60,
    )
    assert not driver.find_elements(By.CSS_SELECTOR, f"{row} .btn-backfill-run")  # no Run now while it runs
    driver.find_element(By.CSS_SELECTOR, f"{row} details.backfill-spec-view summary").click()
    shown = wait_for(lambda: driver.find_element(By.CSS_SELECTOR, f"{row} .backfill-spec-json").text, "the spec")
    assert '"connection.password": "[hidden]"' in shown and literal not in driver.page_source
    driver.find_element(By.CSS_SELECTOR, f"{row} .btn-backfill-cancel").click()
    wait_for(lambda: driver.find_element(By.ID, "confirm").is_displayed(), "the cancel confirmation")
    assert "CANCELLED" in text_of(driver, "confirm-text")
    driver.find_element(By.ID, "confirm-ok").click()
    wait_for(
        lambda: driver.find_element(By.CSS_SELECTOR, row).get_attribute("data-state") == "CANCELLED",
        "CANCELLED",
        timeout=60,
    )
    status = api(worker, "GET", f"/backfills/{job}").json()["status"]
    assert status["state"] == "CANCELLED" and 0 < status["rows_done"] < 600, status
    assert driver.find_element(By.CSS_SELECTOR, f"{row} .btn-backfill-run")  # finished: it may run again
    shot(driver, tmp_path, "backfill-cancelled")
    assert api(worker, "DELETE", f"/backfills/{job}", params={"forget": "true"}).status_code == 204


def test_a_stopped_sources_offset_is_edited_on_its_page(driver: Any, worker: WorkerProcess, tmp_path: Path) -> None:
    """Through the form (a field keeps its JSON type), round-tripped through the JSON view, a bad value
    refused in the page, then a partition reset and another added."""
    name = "console-offsets-seq"
    create(
        worker,
        name,
        {
            "connector.class": "SequenceSource",
            "topic": unique_topic_name("console-off"),
            "sequence.rate": "20",
            "sequence.batch.size": "10",
        },
    )
    wait_for(lambda: api(worker, "GET", f"/connectors/{name}/offsets").json()["offsets"], "a first offset")
    sign_in(driver, worker, "admin", f"connectors/{name}")
    wait_for(lambda: "Stop the connector" in text_of(driver, "offsets-note"), "the offsets note")
    assert not driver.find_element(By.ID, "offsets-form").is_displayed()
    assert not driver.find_element(By.ID, "offsets-editor").is_displayed()
    driver.find_element(By.ID, "btn-stop").click()
    wait_for(lambda: driver.find_element(By.ID, "confirm").is_displayed(), "the stop confirmation")
    driver.find_element(By.ID, "confirm-ok").click()
    path = f"/connectors/{name}/offsets"
    # The form of a STOPPED connector, showing the offset the task committed as it stopped.
    wait_for(lambda: driver.find_element(By.ID, "offsets-form").is_displayed(), "the offsets form", timeout=30)
    wait_for(
        lambda: (
            offset_input(driver, 0, "seq").get_attribute("value")
            == str(api(worker, "GET", path).json()["offsets"][0]["offset"]["seq"])
        ),
        "the stored offset in the form",
    )
    row = driver.find_element(By.CSS_SELECTOR, '#offsets-form tr[data-offset-row="0"]')
    assert [chip.text for chip in row.find_elements(By.CSS_SELECTOR, ".chip")] == ["task=0"]
    assert offset_input(driver, 0, "seq").get_attribute("data-type") == "integer"
    assert not driver.find_element(By.ID, "offsets-editor").is_displayed()
    type_into(offset_input(driver, 0, "seq"), "424242")
    driver.find_element(By.ID, "btn-offsets-save").click()
    message = wait_for(lambda: text_of(driver, "offsets-message"), "the server's message")
    assert message.startswith("Offsets saved: "), message
    edited = {"offsets": [{"partition": {"task": 0}, "offset": {"seq": 424242}}]}
    assert api(worker, "GET", path).json() == edited  # a number stays a number
    shot(driver, tmp_path, "offsets-form")

    round_trip_through_the_json_view(driver, tmp_path, edited)

    # Text in a numeric field: refused in the page, naming the field; nothing reaches the worker.
    type_into(offset_input(driver, 0, "seq"), "lots")
    driver.find_element(By.ID, "btn-offsets-save").click()
    refused = wait_for(lambda: text_of(driver, "offsets-message"), "the refusal")
    assert "seq" in refused and "whole number" in refused and '"lots"' in refused, refused
    assert api(worker, "GET", path).json() == edited
    shot(driver, tmp_path, "offsets-refused")
    reset_one_partition_and_add_another(driver, worker, path)
    api(worker, "DELETE", f"/connectors/{name}")


def offset_input(driver: Any, row: int, field: str) -> Any:
    """The input of one offset field in one row of the offsets form."""
    return driver.find_element(
        By.CSS_SELECTOR, f'#offsets-form tr[data-offset-row="{row}"] input[data-offset-field="{field}"]'
    )


def round_trip_through_the_json_view(driver: Any, tmp_path: Path, stored: dict[str, Any]) -> None:
    """The JSON view holds what the form holds; an edit there (seq 515151, not saved) comes back to the form."""
    driver.find_element(By.ID, "btn-offsets-json").click()
    editor = driver.find_element(By.ID, "offsets-editor")
    assert editor.is_displayed() and not driver.find_element(By.ID, "offsets-form").is_displayed()
    assert json.loads(editor.get_attribute("value")) == stored
    set_json(driver, editor, {"offsets": [{"partition": {"task": 0}, "offset": {"seq": 515151}}]})
    shot(driver, tmp_path, "offsets-json")
    driver.find_element(By.ID, "btn-offsets-json").click()
    wait_for(lambda: offset_input(driver, 0, "seq").get_attribute("value") == "515151", "JSON → form")


def type_into(element: Any, text: str) -> None:
    element.clear()
    element.send_keys(text)


def reset_one_partition_and_add_another(driver: Any, worker: WorkerProcess, path: str) -> None:
    """Ticks reset on row 0 (offset null: the partition goes) and adds a partition given as JSON, in one save."""
    driver.find_element(By.CSS_SELECTOR, '#offsets-form tr[data-offset-row="0"] .offset-reset').click()
    assert not offset_input(driver, 0, "seq").is_enabled()
    driver.find_element(By.ID, "btn-offsets-add").click()
    added = driver.find_element(By.CSS_SELECTOR, '#offsets-form tr[data-offset-row="1"]')
    type_into(added.find_element(By.CSS_SELECTOR, 'input[data-offset-json="partition"]'), '{"task": 1}')
    type_into(added.find_element(By.CSS_SELECTOR, 'input[data-offset-json="offset"]'), '{"seq": 7, "note": "by hand"}')
    driver.find_element(By.ID, "btn-offsets-save").click()
    expected = {"offsets": [{"partition": {"task": 1}, "offset": {"seq": 7, "note": "by hand"}}]}
    wait_for(lambda: api(worker, "GET", path).json() == expected, "the reset and the added partition")
    wait_for(lambda: offset_input(driver, 0, "note").get_attribute("data-type") == "string", "the new row in the form")
    assert offset_input(driver, 0, "seq").get_attribute("value") == "7"
    assert not driver.find_elements(By.CSS_SELECTOR, '#offsets-form tr[data-offset-row="1"]')
