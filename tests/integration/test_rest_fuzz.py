"""Schema-driven fuzzing of a live worker's REST API, and the error cases it must refuse cleanly.

A real ``sluice standalone`` worker (over the session Kafka broker) gets a FileStreamSource and a
FileStreamSink, so paths with real connector names exist; then schemathesis reads the worker's own
``/openapi.json`` and sends every operation (GET, PUT, PATCH, POST and DELETE: the worker is
throwaway) examples, coverage-phase edge cases (wrong types, missing keys, unexpected methods and
content types) and generated fuzz cases, positive and negative. The run must find no 5xx and no
request that does not answer within its timeout. ``pytest -s`` shows the run's figures.

The explicit cases below pin what the fuzzer might not generate: malformed JSON, a wrong content
type, a 2 MiB body (declared and streamed), every connector route with an unknown name, unknown
plugins, configs with wrong types, and the inputs that used to crash the worker (non-ASCII
connector names in ``Location``, offsets outside Kafka's integer ranges, invalid topic names).

The same fuzz then runs against a second worker with authentication and ``rest.auth.roles`` on,
once per role (admin, operator, viewer, an operator limited to one connector, a user without a
grant, no credentials), with fewer examples: every request of every role must still answer without
a 5xx, and a role must never get a 2xx for a request its role does not allow. The six role runs
send about 3,700 requests, roughly 45 s on two shared cores (the open run: about 25 s).

Environment: ``SLUICE_FUZZ_EXAMPLES`` (default 40 per operation and phase),
``SLUICE_FUZZ_ROLE_EXAMPLES`` (default 8, for each role run) and ``SLUICE_FUZZ_SEED`` (default
fixed, for a reproducible suite) widen or vary the run locally.
"""

from __future__ import annotations

import base64
import collections
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import schemathesis
from hypothesis.configuration import set_hypothesis_home_dir
from schemathesis.engine import Status, events, from_schema

from sluice.rest.authz import ACCESS_RULES, Permission
from tests.integration.kafka_helpers import create_topic, unique_topic_name
from tests.integration.worker_process import WorkerFactory, WorkerProcess

pytestmark = pytest.mark.integration

#: Every request must answer within this (a hang fails, it does not stall the suite).
TIMEOUT_S = 10.0
#: Slower than this is a failure of the max_response_time check.
MAX_RESPONSE_S = 5.0
MAX_EXAMPLES = int(os.environ.get("SLUICE_FUZZ_EXAMPLES", "40"))
ROLE_EXAMPLES = int(os.environ.get("SLUICE_FUZZ_ROLE_EXAMPLES", "8"))
SEED = int(os.environ.get("SLUICE_FUZZ_SEED", "20240611"))

SOURCE, SINK = "fz-src", "fz-sink"
JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def worker(module_worker_process: WorkerFactory) -> WorkerProcess:
    return module_worker_process()


@pytest.fixture(scope="module")
def files(kafka, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The two connectors' files and topic."""
    base = tmp_path_factory.mktemp("rest-fuzz-files")
    source = base / "in.txt"
    source.write_text("one\ntwo\nthree\n")
    topic = unique_topic_name("rest-fuzz")
    create_topic(kafka.bootstrap_servers, topic)
    return {"source": str(source), "sink": str(base / "out.txt"), "topic": topic}


def _source_config(files: dict[str, str]) -> dict[str, str]:
    return {"connector.class": "FileStreamSource", "file": files["source"], "topic": files["topic"]}


def _sink_config(files: dict[str, str]) -> dict[str, str]:
    return {"connector.class": "FileStreamSink", "file": files["sink"], "topics": files["topic"]}


def _ensure_connectors(worker: WorkerProcess, files: dict[str, str], headers: dict[str, str] | None = None) -> None:
    """(Re)create the two named connectors: the fuzzer may have deleted, changed or stopped them.
    Connectors still running with their config are left alone (a PUT restarts them, ~1.5 s each)."""
    for name, config in ((SOURCE, _source_config(files)), (SINK, _sink_config(files))):
        if _intact(worker, name, config, headers):
            continue
        r = httpx.put(f"{worker.url}/connectors/{name}/config", json=config, headers=headers, timeout=TIMEOUT_S)
        assert r.status_code in (200, 201), r.text
        assert httpx.put(f"{worker.url}/connectors/{name}/resume", headers=headers, timeout=TIMEOUT_S).status_code == 202


def _intact(worker: WorkerProcess, name: str, config: dict[str, str], headers: dict[str, str] | None) -> bool:
    """Whether the connector exists with ``config`` and it and its tasks are RUNNING."""
    r = httpx.get(f"{worker.url}/connectors/{name}", headers=headers, timeout=TIMEOUT_S)
    if r.status_code != 200 or {k: v for k, v in r.json()["config"].items() if k != "name"} != config:
        return False
    status = httpx.get(f"{worker.url}/connectors/{name}/status", headers=headers, timeout=TIMEOUT_S).json()
    states = [status["connector"]["state"], *(t["state"] for t in status["tasks"])]
    return len(states) > 1 and set(states) == {"RUNNING"}


def _assert_error(r: httpx.Response, *statuses: int, mentions: str | None = None) -> dict[str, Any]:
    assert r.status_code in statuses, f"{r.request.method} {r.request.url}: {r.status_code} {r.text[:500]}"
    body = r.json()
    assert set(body) == {"error_code", "message"} and body["error_code"] == r.status_code, body
    assert isinstance(body["message"], str) and body["message"], body
    if mentions is not None:
        assert mentions in body["message"], body
    return body


# -- the fuzz run ------------------------------------------------------------------------------------


@pytest.fixture
def hypothesis_home(tmp_path: Path) -> Iterator[Path]:
    """Hypothesis keeps caches under ./.hypothesis by default; keep them out of the repository."""
    set_hypothesis_home_dir(tmp_path / "hypothesis")
    yield tmp_path / "hypothesis"
    set_hypothesis_home_dir(None)


def _fuzz_config(max_examples: int = MAX_EXAMPLES, **project: Any) -> Any:
    """The run's settings; ``project`` adds keys such as ``headers`` and ``base-url``."""
    return schemathesis.Config.from_dict(
        {
            **project,
            "seed": SEED,
            "workers": 1,
            "request-timeout": TIMEOUT_S,
            "continue-on-failure": True,
            "generation": {"mode": "all", "max-examples": max_examples, "database": "none"},
            "checks": {
                "enabled": False,
                "not_a_server_error": {"enabled": True},
                "max_response_time": MAX_RESPONSE_S,
            },
            "phases": {
                "examples": {"enabled": True},
                "coverage": {"enabled": True},
                "fuzzing": {"enabled": True},
                # The API has no OpenAPI links; stateful sequences would only repeat the fuzzing phase.
                "stateful": {"enabled": False},
            },
            # Half of the path parameters are real names, so the fuzzer gets past the 404s
            # (``path.name`` is the logger's name in /admin/loggers/{name} too).
            "dictionaries": {
                "connectors": {"values": [SOURCE, SINK]},
                "plugins": {"values": ["FileStreamSource", "FileStreamSink", "org.apache.kafka.connect.file.FileStreamSinkConnector"]},
                "tasks": {"values": [0]},
            },
            "parameters": {
                "path.name": {"dictionary": "connectors", "probability": 0.5},
                "path.plugin": {"dictionary": "plugins", "probability": 0.5},
                "path.task": {"dictionary": "tasks", "probability": 0.5},
            },
        }
    )


@dataclass
class FuzzRun:
    """What one schemathesis run sent and got back."""

    operations: set[str] = field(default_factory=set)
    cases: int = 0
    requests: int = 0
    per_phase: collections.Counter[str] = field(default_factory=collections.Counter)
    status_classes: collections.Counter[str] = field(default_factory=collections.Counter)
    server_errors: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: (method, operation label, status) of every answered request, for the role checks.
    answers: list[tuple[str, str, int]] = field(default_factory=list)
    finished: events.EngineFinished | None = None
    elapsed: float = 0.0

    def summary(self, title: str, documented: set[str], max_examples: int) -> str:
        return (
            f"\n{title} (schemathesis {schemathesis.__version__}, seed {SEED}, max {max_examples} examples per operation and phase, mode all)\n"
            f"  operations tested: {len(self.operations)} of {len(documented)} documented\n"
            f"  test cases: {self.cases}, HTTP requests: {self.requests} "
            f"({', '.join(f'{phase} {n}' for phase, n in sorted(self.per_phase.items()))})\n"
            f"  responses: {', '.join(f'{cls} {n}' for cls, n in sorted(self.status_classes.items()))}\n"
            f"  5xx: {len(self.server_errors)}, check failures: {len(self.failures)}, errors/timeouts: {len(self.errors)}\n"
            f"  stop reason: {self.finished.stop_reason.value if self.finished else 'none'}, time: {self.elapsed:.1f}s"
        )

    def assert_clean(self, documented: set[str]) -> None:
        assert self.finished is not None and self.finished.stop_reason.value == "completed", self.finished
        assert not self.server_errors, "5xx responses:\n" + "\n".join(self.server_errors[:20])
        assert not self.failures, "check failures:\n" + "\n".join(self.failures[:20])
        assert not self.errors, "errors (timeouts, transport):\n" + "\n".join(self.errors[:20])
        assert self.operations == documented, f"untested: {sorted(documented - self.operations)}"


def _fuzz(schema: Any) -> FuzzRun:
    run = FuzzRun()
    started = time.monotonic()
    for event in from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            recorder = event.recorder
            run.operations.add(recorder.label)
            run.cases += len(recorder.cases)
            if event.status == Status.ERROR:
                run.errors.append(f"{recorder.label} ({event.phase.value}): scenario errored")
            for interaction in recorder.interactions.values():
                run.requests += 1
                run.per_phase[event.phase.value] += 1
                response = interaction.response
                if response is None:
                    run.errors.append(f"{interaction.request.method} {interaction.request.uri}: no response")
                    continue
                run.status_classes[f"{response.status_code // 100}xx"] += 1
                run.answers.append((interaction.request.method.upper(), recorder.label, response.status_code))
                if response.status_code >= 500:
                    body = (interaction.request.body or b"")[:300]
                    run.server_errors.append(
                        f"{interaction.request.method} {interaction.request.uri} body={body!r} -> "
                        f"{response.status_code} {response.content[:300]!r}"
                    )
            for checks in recorder.checks.values():
                for check in checks:
                    if check.failure_info is not None:
                        failure = check.failure_info.failure
                        run.failures.append(f"{recorder.label}: {check.name}: {failure.title}\n{check.failure_info.code_sample}")
                    elif check.status == Status.ERROR:
                        run.errors.append(f"{recorder.label}: check {check.name} errored")
        elif isinstance(event, events.NonFatalError):
            run.errors.append(f"{event.label} ({event.phase}): {event.value!r}")
        elif isinstance(event, events.FatalError):
            run.errors.append(f"fatal: {event.exception!r}")
        elif isinstance(event, events.EngineFinished):
            run.finished = event
    run.elapsed = time.monotonic() - started
    return run


#: Long polls: every valid call waits its whole ``timeout`` (up to 30 s) for records by design, so
#: the fuzzer would spend minutes there and trip max_response_time. Their bounds and errors have
#: their own tests (tests/integration/test_live_tap.py).
LONG_POLLS = ("/connectors/{name}/tap",)


def _fuzzable(url: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
    """The worker's OpenAPI document without the long polls."""
    spec: dict[str, Any] = httpx.get(f"{url}/openapi.json", headers=headers, timeout=TIMEOUT_S).json()
    for path in LONG_POLLS:
        assert spec["paths"].pop(path, None) is not None, f"{path} is no longer documented"
    return spec


def _documented(spec: dict[str, Any]) -> set[str]:
    return {f"{method.upper()} {path}" for path, item in spec["paths"].items() for method in item}


def test_schemathesis_finds_no_server_errors(worker: WorkerProcess, files: dict[str, str], hypothesis_home: Path) -> None:
    _ensure_connectors(worker, files)
    worker.wait_running(SOURCE)
    worker.wait_running(SINK)
    spec = _fuzzable(worker.url)
    run = _fuzz(schemathesis.openapi.from_dict(spec, config=_fuzz_config(**{"base-url": worker.url})))
    documented = _documented(spec)
    print(run.summary(f"open API at {worker.url}", documented, MAX_EXAMPLES))
    run.assert_clean(documented)
    assert httpx.get(f"{worker.url}/health", timeout=TIMEOUT_S).status_code == 200
    log = worker.log_path.read_text(errors="replace")
    assert "failed unexpectedly" not in log and "Exception in ASGI application" not in log, worker.log()


# -- the same fuzz with authentication and roles --------------------------------------------------------

#: One user per role, and an operator of the source connector only.
ROLE_USERS = {"fz-admin": "pw-admin", "fz-operator": "pw-operator", "fz-viewer": "pw-viewer", "fz-scoped": "pw-scoped", "fz-nobody": "pw-nobody"}
ROLE_GRANTS = f"fz-admin:admin,fz-operator:operator,fz-viewer:viewer,fz-scoped:operator:{SOURCE}"


def _basic(user: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{ROLE_USERS[user]}".encode()).decode()}


@dataclass(frozen=True)
class RoleRun:
    """One fuzz run's caller, and the permissions under which a 2xx is allowed.

    ``on_connector=None``: the caller's grant depends on the connector name, so connector routes
    are not judged (the unit role test covers them name by name).
    """

    name: str
    user: str | None
    worker_wide: frozenset[Permission]
    on_connector: frozenset[Permission] | None

    def may_succeed(self, method: str, label: str) -> bool:
        rule = ACCESS_RULES.get((method, label.split(" ", 1)[1]))
        if rule is None or rule.permission is Permission.INTERNAL:
            return False  # no rule, or unsigned internal requests: refused for every user
        if rule.connector is None:
            return rule.permission in self.worker_wide
        return self.on_connector is None or rule.permission in self.on_connector


_P = Permission
ROLE_RUNS = [
    RoleRun("admin", "fz-admin", frozenset(_P), frozenset(_P)),
    RoleRun("operator", "fz-operator", frozenset({_P.OPEN, _P.LIST, _P.VIEW}), frozenset({_P.VIEW, _P.OPERATE})),
    RoleRun("viewer", "fz-viewer", frozenset({_P.OPEN, _P.LIST, _P.VIEW}), frozenset({_P.VIEW})),
    RoleRun("operator of one connector", "fz-scoped", frozenset({_P.OPEN, _P.LIST}), None),
    RoleRun("no grant", "fz-nobody", frozenset({_P.OPEN}), frozenset()),
    RoleRun("no credentials", None, frozenset({_P.OPEN}), frozenset()),
]


@pytest.fixture(scope="module")
def secured_worker(kafka, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    settings: dict[str, Any] = {
        "rest.auth.basic.users": ",".join(f"{user}:{password}" for user, password in ROLE_USERS.items()),
        "rest.auth.roles": ROLE_GRANTS,
    }
    w = WorkerProcess(tmp_path_factory.mktemp("rest-fuzz-roles"), kafka.bootstrap_servers, **settings)
    w.start()
    yield w
    assert w.stop() == 0, w.log()


@pytest.mark.parametrize("role", ROLE_RUNS, ids=lambda r: r.name)
def test_schemathesis_finds_no_server_errors_for_any_role(
    secured_worker: WorkerProcess, files: dict[str, str], hypothesis_home: Path, role: RoleRun
) -> None:
    admin = _basic("fz-admin")
    _ensure_connectors(secured_worker, files, headers=admin)
    spec = _fuzzable(secured_worker.url, headers=admin)
    project: dict[str, Any] = {"base-url": secured_worker.url}
    if role.user is not None:
        project["headers"] = _basic(role.user)
    run = _fuzz(schemathesis.openapi.from_dict(spec, config=_fuzz_config(ROLE_EXAMPLES, **project)))
    documented = _documented(spec)
    print(run.summary(f"role {role.name} at {secured_worker.url}", documented, ROLE_EXAMPLES))
    run.assert_clean(documented)
    wrongly_allowed = sorted({f"{method} {label} -> {status}" for method, label, status in run.answers
                              if 200 <= status < 300 and not role.may_succeed(method, label)})
    assert not wrongly_allowed, f"{role.name} succeeded where its role forbids it:\n" + "\n".join(wrongly_allowed[:20])
    log = secured_worker.log_path.read_text(errors="replace")
    assert "failed unexpectedly" not in log and "Exception in ASGI application" not in log, secured_worker.log()


# -- explicit negative cases ---------------------------------------------------------------------------

#: Every route that takes a JSON body, with a path whose resource exists (or may be created).
BODY_ROUTES = [
    ("POST", "/connectors"),
    ("PUT", f"/connectors/{SOURCE}/config"),
    ("PATCH", f"/connectors/{SOURCE}/config"),
    ("PATCH", f"/connectors/{SOURCE}/offsets"),
    ("PUT", "/connector-plugins/FileStreamSource/config/validate"),
    ("PUT", "/admin/loggers/sluice.fuzz"),
]


@pytest.fixture
def live(worker: WorkerProcess, files: dict[str, str]) -> WorkerProcess:
    _ensure_connectors(worker, files)
    return worker


@pytest.mark.parametrize(("method", "path"), BODY_ROUTES)
def test_malformed_json_is_400(live: WorkerProcess, method: str, path: str) -> None:
    for content in (b'{"name": ', b"{not json}", b"\xff\xfe\x00", b"[1, 2,]", b'{"a": 1}}'):
        r = httpx.request(method, f"{live.url}{path}", content=content, headers=JSON, timeout=TIMEOUT_S)
        _assert_error(r, 400)


@pytest.mark.parametrize(("method", "path"), BODY_ROUTES)
def test_wrong_content_type_is_415(live: WorkerProcess, method: str, path: str) -> None:
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "application/xml"):
        r = httpx.request(method, f"{live.url}{path}", content=b'{"a": "b"}', headers={"content-type": content_type}, timeout=TIMEOUT_S)
        _assert_error(r, 415, mentions="application/json")


@pytest.mark.parametrize(("method", "path"), BODY_ROUTES)
def test_two_mib_body_is_413(live: WorkerProcess, method: str, path: str) -> None:
    body = b'{"a": "' + b"x" * (2 * 1024 * 1024) + b'"}'
    declared = httpx.request(method, f"{live.url}{path}", content=body, headers=JSON, timeout=TIMEOUT_S)
    _assert_error(declared, 413, mentions="limit")

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit must hold while streaming
        for start in range(0, len(body), 64 * 1024):
            yield body[start : start + 64 * 1024]

    streamed = httpx.request(method, f"{live.url}{path}", content=chunks(), headers=JSON, timeout=TIMEOUT_S)
    _assert_error(streamed, 413, mentions="limit")


def _connector_routes(worker: WorkerProcess) -> list[tuple[str, str]]:
    paths = httpx.get(f"{worker.url}/openapi.json", timeout=TIMEOUT_S).json()["paths"]
    return [
        (method.upper(), path)
        for path, item in paths.items()
        if path.startswith("/connectors/{name}")
        for method in item
        if (method, path) != ("put", "/connectors/{name}/config")  # creates the connector
    ]


def test_unknown_connector_is_404_on_every_route(live: WorkerProcess) -> None:
    routes = _connector_routes(live)
    assert len(routes) >= 17, routes
    bodies = {
        "/connectors/{name}/config": {"tasks.max": "2"},
        "/connectors/{name}/offsets": {"offsets": [{"partition": {"filename": "x"}, "offset": None}]},
        "/connectors/{name}/dlq/redrive": {"from_offset": 0, "to_offset": 0},
    }
    for method, path in routes:
        url = live.url + path.replace("{name}", "no-such-connector").replace("{task}", "0")
        if (method, path) == ("POST", "/connectors/{name}/tasks"):
            # The internal route answers every unsigned caller alike, before any lookup (403).
            _assert_error(httpx.request(method, url, json=[], timeout=TIMEOUT_S), 403)
            continue
        kwargs: dict[str, Any] = {"json": bodies[path]} if method in ("PATCH", "POST", "PUT") and path in bodies else {}
        r = httpx.request(method, url, timeout=TIMEOUT_S, **kwargs)
        _assert_error(r, 404, mentions="no-such-connector")
        if path.endswith("/restart"):
            r = httpx.request(method, url, params={"includeTasks": "true", "onlyFailed": "true"}, timeout=TIMEOUT_S)
            _assert_error(r, 404, mentions="no-such-connector")


def test_unknown_task_is_404(live: WorkerProcess) -> None:
    for task in ("7", "-1", "99999999999999999999999999"):
        _assert_error(httpx.get(f"{live.url}/connectors/{SOURCE}/tasks/{task}/status", timeout=TIMEOUT_S), 404)
        _assert_error(httpx.post(f"{live.url}/connectors/{SOURCE}/tasks/{task}/restart", timeout=TIMEOUT_S), 404)
    _assert_error(httpx.get(f"{live.url}/connectors/{SOURCE}/tasks/zero/status", timeout=TIMEOUT_S), 400, mentions="task")


def test_unknown_plugin_is_404(live: WorkerProcess) -> None:
    for plugin in ("NoSuchConnector", "no.such.module.Connector", "sluice.worker.herder.Herder"):
        quoted = quote(plugin, safe="")
        _assert_error(httpx.get(f"{live.url}/connector-plugins/{quoted}/config", timeout=TIMEOUT_S), 404, mentions=plugin)
        r = httpx.put(f"{live.url}/connector-plugins/{quoted}/config/validate", json={"connector.class": plugin}, timeout=TIMEOUT_S)
        _assert_error(r, 404, mentions=plugin)


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"tasks.max": "many"}, "tasks.max"),
        ({"tasks.max": {"n": 1}}, "tasks.max"),
        ({"tasks.max": [1, 2]}, "tasks.max"),
        ({"tasks.max": 0}, "tasks.max"),
        ({"topic": {"nested": "object"}}, "topic"),
        ({"connector.class": ["FileStreamSource"]}, "connector.class"),
        # An undefined key ("tpoic") is accepted and ignored, as in Connect: test_rest_lifecycle.
    ],
)
def test_config_with_wrong_types_is_400_naming_the_key(live: WorkerProcess, files: dict[str, str], config: dict[str, Any], key: str) -> None:
    full = {**_source_config(files), **config}
    create = httpx.post(f"{live.url}/connectors", json={"name": "fz-bad", "config": full}, timeout=TIMEOUT_S)
    _assert_error(create, 400, mentions=key)
    put = httpx.put(f"{live.url}/connectors/{SOURCE}/config", json=full, timeout=TIMEOUT_S)
    _assert_error(put, 400, mentions=key)
    patch = httpx.patch(f"{live.url}/connectors/{SOURCE}/config", json=config, timeout=TIMEOUT_S)
    _assert_error(patch, 400, mentions=key)
    assert httpx.get(f"{live.url}/connectors/fz-bad", timeout=TIMEOUT_S).status_code == 404
    assert httpx.get(f"{live.url}/connectors/{SOURCE}/config", timeout=TIMEOUT_S).json() == {**_source_config(files), "name": SOURCE}


def test_request_bodies_of_the_wrong_shape_are_400(live: WorkerProcess, files: dict[str, str]) -> None:
    url = live.url
    cases = [
        ("POST", "/connectors", ["not", "an", "object"], "body"),
        ("POST", "/connectors", {"name": 5, "config": _source_config(files)}, "name"),
        ("POST", "/connectors", {"name": "x", "config": "not a map"}, "config"),
        ("POST", "/connectors", {"config": _source_config(files)}, "name"),
        ("POST", "/connectors", {"name": "x", "config": _source_config(files), "initial_state": "SLEEPING"}, "initial_state"),
        ("PUT", f"/connectors/{SOURCE}/config", ["a"], None),
        ("PATCH", f"/connectors/{SOURCE}/config", "string", None),
        ("PATCH", f"/connectors/{SOURCE}/offsets", {"offsets": "all"}, "offsets"),
        ("PUT", "/connector-plugins/FileStreamSource/config/validate", [1], None),
        ("PUT", "/admin/loggers/sluice.fuzz", {"level": "LOUD"}, "LOUD"),
        ("PUT", "/admin/loggers/sluice.fuzz", {"level": 3}, "level"),
    ]
    for method, path, body, mentions in cases:
        r = httpx.request(method, f"{url}{path}", json=body, timeout=TIMEOUT_S)
        _assert_error(r, 400, mentions=mentions)
    _assert_error(httpx.get(f"{url}/connector-plugins", params={"connectorsOnly": "maybe"}, timeout=TIMEOUT_S), 400)
    _assert_error(httpx.post(f"{url}/connectors/{SOURCE}/restart", params={"includeTasks": "perhaps"}, timeout=TIMEOUT_S), 400)


# -- regressions: inputs that used to answer 500 or hang ---------------------------------------------


def test_non_ascii_connector_name_gets_an_encoded_location(live: WorkerProcess, files: dict[str, str]) -> None:
    # The Location header used to carry the raw name: a non-Latin-1 name was a 500 after the
    # connector had been created, a Latin-1 one (é) a dropped connection.
    for name in ("fz-snow\u2603", "fz-caf\u00e9", "fz a b\u00a0c"):
        r = httpx.post(f"{live.url}/connectors", json={"name": name, "config": _source_config(files)}, timeout=TIMEOUT_S)
        assert r.status_code == 201, r.text
        assert r.headers["location"] == f"/connectors/{quote(name, safe='')}"
        assert httpx.get(f"{live.url}{r.headers['location']}", timeout=TIMEOUT_S).json()["name"] == name
        assert httpx.delete(f"{live.url}{r.headers['location']}", timeout=TIMEOUT_S).status_code == 204
    # A line separator would break a log line or a terminal: the name rule refuses it.
    r = httpx.post(f"{live.url}/connectors", json={"name": "fz a\u2028b", "config": _source_config(files)}, timeout=TIMEOUT_S)
    _assert_error(r, 400, mentions="name")


def _stopped(worker: WorkerProcess, name: str) -> None:
    assert httpx.put(f"{worker.url}/connectors/{name}/stop", timeout=TIMEOUT_S).status_code == 204


@pytest.mark.parametrize(
    ("partition", "offset", "mentions"),
    [
        ({"kafka_topic": "t", "kafka_partition": 2**40}, {"kafka_offset": 1}, "partitions"),
        ({"kafka_topic": "t", "kafka_partition": 0}, {"kafka_offset": 2**63}, "offsets"),
        ({"kafka_topic": "t", "kafka_partition": 0}, {"kafka_offset": 2**70}, "64-bit"),
        ({"kafka_topic": "a\x00b", "kafka_partition": 0}, None, "topic name"),
        ({"kafka_topic": "caf\u00e9", "kafka_partition": 0}, None, "topic name"),
        ({"kafka_topic": "x" * 250, "kafka_partition": 0}, {"kafka_offset": 1}, "topic name"),
        ({"kafka_topic": "bad topic!", "kafka_partition": 0}, {"kafka_offset": 1}, "topic name"),
        ({"kafka_topic": "..", "kafka_partition": 0}, None, "topic name"),
    ],
)
def test_sink_offsets_out_of_kafkas_ranges_are_400(live: WorkerProcess, partition: dict, offset: dict | None, mentions: str) -> None:
    # These were 500s (OverflowError, ValueError) or a 30 s hang that held the herder's lock.
    _stopped(live, SINK)
    started = time.monotonic()
    r = httpx.patch(f"{live.url}/connectors/{SINK}/offsets", json={"offsets": [{"partition": partition, "offset": offset}]}, timeout=TIMEOUT_S)
    _assert_error(r, 400, mentions=mentions)
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    ("body", "mentions"),
    [
        (b'{"offsets": [{"partition": {"filename": "x"}, "offset": {"position": 1180591620717411303424}}]}', "64-bit"),
        (b'{"offsets": [{"partition": {"filename": "x", "n": -9223372036854775809}, "offset": null}]}', "64-bit"),
        (b'{"offsets": [{"partition": {"filename": "x"}, "offset": {"position": NaN}}]}', "finite"),
        (b'{"offsets": [{"partition": {"filename": "x"}, "offset": {"position": 1, "deep": [1e999]}}]}', "finite"),
    ],
)
def test_source_offsets_no_store_can_hold_are_400(live: WorkerProcess, body: bytes, mentions: str) -> None:
    _stopped(live, SOURCE)
    r = httpx.patch(f"{live.url}/connectors/{SOURCE}/offsets", content=body, headers=JSON, timeout=TIMEOUT_S)
    _assert_error(r, 400, mentions=mentions)
    assert httpx.get(f"{live.url}/connectors/{SOURCE}/offsets", timeout=TIMEOUT_S).status_code == 200
