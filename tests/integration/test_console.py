"""The web console at /ui in a real headless Chromium, against a real worker, Kafka and PostgreSQL.

One worker (REST authentication on: an admin, a viewer and a viewer scoped to ``console-pg-*``)
and one browser serve the whole module. The tests create a JDBC source through the form (a
validation error shown on its field first), watch it run and count, read a failed sink task's
trace, pause and resume through the buttons, and check what each principal sees — and that a
``${env:…}`` password never reaches the page. Increment 2: a sink's dead letter read in the DLQ
inspector and redriven, a backfill's progress bar reaching 100 %, a stopped source's offset edited.
Increment 3: a running source's next records on its live tap page (a viewer gets no tap), and the
overview's workers from ``GET /cluster``. Every page is saved as a screenshot under the test's ``tmp_path``.
"""

from __future__ import annotations

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
    DRAW_200,
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

USERS = {"admin": "admin-pw", "viewer": "viewer-pw", "scoped": "scoped-pw"}
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
            "rest.auth.roles": "admin:admin,viewer:viewer,scoped:viewer:console-pg-*",
            "config.providers": "env",
            "config.providers.env.param.allowlist.pattern": "SLUICE_TEST_.*",
            # Spark starts with the first backfill run only (test_a_backfill_reaches_100_percent).
            "backfill.spark.master": "local[1]",
            "backfill.spark.driver.memory": "1g",
            "backfill.spark.sql.shuffle.partitions": "1",
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


def sign_in(driver: Any, worker: WorkerProcess, user: str, page: str = "") -> None:
    """Opens the console with no stored credential and signs in as ``user`` through its form."""
    driver.get(f"{worker.url}/ui/")
    driver.execute_script("sessionStorage.clear()")
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


def test_the_overview_draws_200_connectors_of_4_tasks(driver: Any, worker: WorkerProcess) -> None:
    """The overview's drawing code on 200 connectors of 4 tasks; the time is printed, not asserted."""
    sign_in(driver, worker, "admin", "")
    wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, "#connectors tr[data-connector]"), "the overview")
    driver.set_script_timeout(30)
    result = driver.execute_async_script(DRAW_200)
    assert "error" not in result, result
    assert result["rows"] == 200 and result["badges"] == 800 and result["sparks"] == 200, result
    print(f"overview: 200 connectors of 4 tasks drawn (with layout) in {result['total']:.1f} ms")


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
        {
            "connector.class": "FileStreamSink",
            "topics": topic,
            "file": str(tmp_path / "out.txt"),
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter.schemas.enable": "true",
            "errors.tolerance": "all",
            "errors.deadletterqueue.topic.name": dlq,
            "errors.deadletterqueue.topic.replication.factor": "1",
            "errors.deadletterqueue.context.headers.enable": "true",
        },
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
    """A 3-row JDBC backfill (the cheapest real run: most of its time is Spark's JVM starting in the worker)."""
    sign_in(driver, worker, "admin", "")
    driver.find_element(By.ID, "nav-backfills").click()
    spec_box = wait_for(lambda: driver.find_element(By.ID, "backfill-spec"), "the backfill form")
    spec: dict[str, Any] = {
        "id": "console-orders",
        "kind": "jdbc_to_topic",
        "source": {"table": "orders"},
        "target": {"topic": unique_topic_name("console-bf")},
    }
    set_json(driver, spec_box, spec)
    driver.find_element(By.ID, "btn-backfill-submit").click()
    refused = wait_for(lambda: text_of(driver, "backfill-create-message"), "the validation error")
    assert "source.connection.url" in refused, refused  # the worker's message, naming the key
    assert api(worker, "GET", "/backfills").json() == []

    spec["source"] |= {"connection.url": postgres.jdbc_url(database.rsplit("/", 1)[1]), "connection.user": "postgres"}
    set_json(driver, spec_box, spec)
    driver.find_element(By.ID, "btn-backfill-submit").click()
    row = '#backfills tr[data-job="console-orders"]'
    wait_for(
        lambda: driver.find_element(By.CSS_SELECTOR, row).get_attribute("data-state") == "SUCCEEDED",
        "SUCCEEDED",
        timeout=120,
    )
    status = api(worker, "GET", "/backfills/console-orders").json()["status"]
    assert status["state"] == "SUCCEEDED" and status["rows_done"] == 3, status
    progress = driver.find_element(By.CSS_SELECTOR, f"{row} progress")
    assert progress.get_attribute("value") == "100" and progress.get_attribute("max") == "100"
    assert driver.find_element(By.CSS_SELECTOR, f"{row} .backfill-percent").text == "100 %"
    assert driver.find_element(By.CSS_SELECTOR, f"{row} .backfill-rows").text == "3 / 3"
    if status.get("source_position", {}).get("lsn"):
        assert driver.find_element(By.CSS_SELECTOR, f"{row} .backfill-lsn").text == status["source_position"]["lsn"]
    shot(driver, tmp_path, "backfills")


def test_a_stopped_sources_offset_is_edited_on_its_page(driver: Any, worker: WorkerProcess, tmp_path: Path) -> None:
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
    assert not driver.find_element(By.ID, "offsets-editor").is_displayed()
    driver.find_element(By.ID, "btn-stop").click()
    wait_for(lambda: driver.find_element(By.ID, "confirm").is_displayed(), "the stop confirmation")
    driver.find_element(By.ID, "confirm-ok").click()
    editor = wait_for(lambda: driver.find_element(By.ID, "offsets-editor"), "the offsets editor")
    wait_for(editor.is_displayed, "the editor of a STOPPED connector", timeout=30)
    # The offsets the task committed as it stopped, loaded into the editor.
    wait_for(lambda: '"seq": ' in editor.get_attribute("value"), "the stored offset in the editor")
    edited = {"offsets": [{"partition": {"task": 0}, "offset": {"seq": 424242}}]}
    set_json(driver, editor, edited)
    driver.find_element(By.ID, "btn-offsets-save").click()
    message = wait_for(lambda: text_of(driver, "offsets-message"), "the server's message")
    assert message.startswith("Offsets saved: "), message
    assert api(worker, "GET", f"/connectors/{name}/offsets").json() == edited
    wait_for(lambda: '"seq": 424242' in editor.get_attribute("value"), "the stored offsets reloaded")
    shot(driver, tmp_path, "offsets")
    api(worker, "DELETE", f"/connectors/{name}")
