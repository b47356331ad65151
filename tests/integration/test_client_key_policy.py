"""A connector config cannot reach code, commands, local files or URLs through its Kafka clients.

Against a real worker (override policy ``All``, tasks in processes) and broker: each dangerous
client key is refused at create with the key named, and nothing it would have done happens — no
marker file from a library's start-up code, no request to the token endpoint. The same key in the
worker's own configuration is the operator's and does reach the client.
"""

from __future__ import annotations

import http.server
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.kafka_helpers import consume_all, unique_topic_name
from tests.integration.worker_process import WorkerFactory, WorkerProcess

pytestmark = pytest.mark.integration

# A librdkafka plugin: its constructor runs as the library loads and leaves a marker file.
PLUGIN_SOURCE = r"""
#include <stdio.h>
#include <stddef.h>
static void __attribute__((constructor)) loaded(void) {
    FILE *f = fopen(MARKER, "w");
    if (f) { fputs("loaded\n", f); fclose(f); }
}
int conf_init(void *conf, void **opaque, char *errstr, size_t errstr_size) { return 0; }
"""


def build_plugin(directory: Path, marker: Path) -> Path:
    source = directory / "evil.c"
    source.write_text(PLUGIN_SOURCE)
    library = directory / "evil.so"
    subprocess.run(["cc", "-shared", "-fPIC", f'-DMARKER="{marker}"', "-o", str(library), str(source)], check=True)
    return library


class _Recorder(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self) -> None:
        self.hits.append(self.path)
        self.send_response(500)
        self.end_headers()

    do_POST = do_GET  # noqa: N815

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def token_endpoint() -> Iterator[tuple[str, list[str]]]:
    """An HTTP server on loopback that records every request an OAuth client would send."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/token", _Recorder.hits
    server.shutdown()


@pytest.fixture(scope="module")
def worker(module_worker_process: WorkerFactory) -> WorkerProcess:
    return module_worker_process(**{"task.executor": "process", "connector.client.config.override.policy": "All"})


def source_config(topic: str, input_file: Path, **extra: str) -> dict[str, str]:
    return {"connector.class": "FileStreamSource", "file": str(input_file), "topic": topic, **extra}


@pytest.mark.parametrize(
    ("key", "value_of"),
    [
        ("producer.override.plugin.library.paths", lambda t: str(t["library"])),
        ("producer.override.sasl.kerberos.kinit.cmd", lambda t: f"touch {t['marker']}"),
        ("producer.override.ssl.engine.location", lambda t: str(t["library"])),
        ("producer.override.ssl.providers", lambda t: str(t["library"])),
        ("producer.override.sasl.oauthbearer.token.endpoint.url", lambda t: t["url"]),
        ("producer.override.ssl.ca.location", lambda t: "/etc/passwd"),
        ("producer.override.ssl.key.location", lambda t: "/etc/shadow"),
        ("producer.override.ssl.certificate.location", lambda t: "/etc/passwd"),
        ("producer.override.sasl.kerberos.keytab", lambda t: "/etc/krb5.keytab"),
        ("consumer.override.plugin.library.paths", lambda t: str(t["library"])),
        ("admin.override.plugin.library.paths", lambda t: str(t["library"])),
        (
            "producer.override.sasl.jaas.config",
            lambda t: "com.sun.security.auth.module.JndiLoginModule required user.provider.url=\"ldap://127.0.0.1/x\";",
        ),
    ],
)
def test_dangerous_client_key_is_refused_and_has_no_effect(
    worker: WorkerProcess, tmp_path: Path, token_endpoint: tuple[str, list[str]], key: str, value_of
) -> None:
    marker = tmp_path / "marker"
    things = {"library": build_plugin(tmp_path, marker), "marker": marker, "url": token_endpoint[0]}
    name = f"evil-{key.replace('.', '-')}"
    config = source_config(unique_topic_name("evil"), tmp_path / "in.txt", **{key: value_of(things)})
    # Connect's validate endpoint names the key too, before anything is created.
    validate = httpx.put(f"{worker.url}/connector-plugins/FileStreamSource/config/validate", json={**config, "name": name}, timeout=10)
    assert validate.status_code == 200, validate.text
    assert validate.json()["error_count"] >= 1
    flagged = {c["value"]["name"]: c["value"]["errors"] for c in validate.json()["configs"] if c["value"]["errors"]}
    assert key in flagged, flagged

    response = httpx.post(f"{worker.url}/connectors", json={"name": name, "config": config}, timeout=10)
    assert response.status_code == 400, response.text
    assert key in response.json()["message"]
    assert httpx.get(f"{worker.url}/connectors/{name}", timeout=10).status_code == 404

    time.sleep(1)  # had anything been started, a client would have loaded, run or fetched by now
    assert not marker.exists()
    assert token_endpoint[1] == []


def test_the_worker_policy_none_refuses_overrides_at_create(worker_process: WorkerFactory, tmp_path: Path) -> None:
    w = worker_process(**{"connector.client.config.override.policy": "None"})
    config = source_config(unique_topic_name("none"), tmp_path / "in.txt", **{"producer.override.linger.ms": "5"})
    response = httpx.post(f"{w.url}/connectors", json={"name": "over", "config": config}, timeout=10)
    assert response.status_code == 400, response.text
    assert "producer.override.linger.ms" in response.json()["message"]


def test_allowlist_policy(worker_process: WorkerFactory, kafka, tmp_path: Path) -> None:
    w = worker_process(
        **{
            "connector.client.config.override.policy": "Allowlist",
            "connector.client.config.override.allowlist": "linger.ms,compression.type",
        },
    )
    (tmp_path / "in.txt").write_text("a\nb\n")
    topic = unique_topic_name("allow")
    refused = source_config(topic, tmp_path / "in.txt", **{"producer.override.acks": "1"})
    response = httpx.post(f"{w.url}/connectors", json={"name": "refused", "config": refused}, timeout=10)
    assert response.status_code == 400, response.text
    assert "producer.override.acks" in response.json()["message"]
    assert "linger.ms" in response.json()["message"]  # says what is allowed

    allowed = source_config(topic, tmp_path / "in.txt", **{"producer.override.linger.ms": "1"})
    response = httpx.post(f"{w.url}/connectors", json={"name": "allowed", "config": allowed}, timeout=10)
    assert response.status_code == 201, response.text
    w.wait_running("allowed")
    assert [m.value for m in consume_all(kafka.bootstrap_servers, topic, 2)] == [b"a", b"b"]


def test_the_same_key_in_the_worker_config_reaches_the_client(
    worker_process: WorkerFactory, kafka, tmp_path: Path
) -> None:
    """The operator may load a librdkafka plugin; the task's producer then loads it."""
    marker = tmp_path / "operator-marker"
    library = build_plugin(tmp_path, marker)
    w = worker_process(**{"task.executor": "process", "producer.plugin.library.paths": str(library)})
    (tmp_path / "in.txt").write_text("x\n")
    topic = unique_topic_name("operator")
    response = httpx.post(
        f"{w.url}/connectors", json={"name": "trusted", "config": source_config(topic, tmp_path / "in.txt")}, timeout=10
    )
    assert response.status_code == 201, response.text
    w.wait_running("trusted")
    assert [m.value for m in consume_all(kafka.bootstrap_servers, topic, 1)] == [b"x"]
    assert marker.read_text() == "loaded\n"
