"""The local Kafka stack: the broker the fixtures start, the jar cache, and ``sluice dev``."""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import stat
import subprocess
import sys
import time
import urllib.request
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

import sluice.deploy as deploy
from sluice.deploy.devstack import DevStack, _pid_alive
from sluice.deploy.kafka_stack import (
    DEFAULT_KAFKA_VERSION,
    KafkaBroker,
    KafkaFetchError,
    KafkaStartError,
    PortInUseError,
    ensure_kafka_jars,
    find_free_port,
    is_kafka_cached,
    is_port_free,
    is_port_open,
)
from sluice.deploy.schema_registry import CONTENT_TYPE
from tests.integration.kafka_helpers import (
    OutgoingRecord,
    close_producer,
    consume_all,
    create_topic,
    produce,
    unique_topic_name,
)

REPO_ROOT = Path(deploy.__file__).resolve().parents[1]

# --------------------------------------------------------------------------------------
# The broker (session fixture)
# --------------------------------------------------------------------------------------


def test_topic_with_three_partitions_round_trips_1000_messages(kafka: KafkaBroker, kafka_admin: AdminClient) -> None:
    topic = unique_topic_name("roundtrip")
    create_topic(kafka.bootstrap_servers, topic, partitions=3)
    assert len(kafka_admin.list_topics(topic, timeout=10).topics[topic].partitions) == 3

    before_ms = int(time.time() * 1000)
    outgoing = [
        OutgoingRecord(
            key=f"customer-{i % 37}",
            value=json.dumps({"seq": i, "customer": i % 37}),
            headers=[("seq", str(i)), ("source", b"test")],
        )
        for i in range(1000)
    ]
    delivered = produce(kafka.bootstrap_servers, topic, outgoing)
    after_ms = int(time.time() * 1000)

    records = consume_all(kafka.bootstrap_servers, topic, expected_count=1000, timeout=60)

    assert len(records) == 1000
    by_seq = {int(dict(r.headers)["seq"] or b""): r for r in records}
    assert sorted(by_seq) == list(range(1000))
    for seq, record in by_seq.items():
        assert record.key == f"customer-{seq % 37}".encode()
        assert record.value is not None and json.loads(record.value) == {"seq": seq, "customer": seq % 37}
        assert dict(record.headers)["source"] == b"test"
        assert (record.partition, record.offset) == delivered[seq]
        assert before_ms - 1000 <= record.timestamp <= after_ms + 1000
    assert {r.partition for r in records} == {0, 1, 2}
    # The default partitioner keeps a key on one partition, and a partition keeps send order.
    partitions_by_key: dict[bytes | None, set[int]] = defaultdict(set)
    for record in records:
        partitions_by_key[record.key].add(record.partition)
    assert all(len(p) == 1 for p in partitions_by_key.values())
    for partition in range(3):
        seqs = [int(dict(r.headers)["seq"] or b"") for r in records if r.partition == partition]
        assert seqs == sorted(seqs)


def test_producing_to_an_unknown_topic_auto_creates_it_with_one_partition(
    kafka: KafkaBroker, kafka_admin: AdminClient
) -> None:
    topic = unique_topic_name("auto")
    produce(kafka.bootstrap_servers, topic, [OutgoingRecord(key=b"k", value=b"v")])

    assert len(kafka_admin.list_topics(topic, timeout=10).topics[topic].partitions) == 1
    assert [r.value for r in consume_all(kafka.bootstrap_servers, topic, 1)] == [b"v"]


def test_consumer_group_resumes_from_committed_offsets(kafka: KafkaBroker) -> None:
    topic = unique_topic_name("group")
    group = unique_topic_name("group")
    create_topic(kafka.bootstrap_servers, topic)
    produce(kafka.bootstrap_servers, topic, [OutgoingRecord(value=f"first-{i}") for i in range(10)])

    assert _consume_in_group(kafka.bootstrap_servers, topic, group, 10) == [f"first-{i}" for i in range(10)]
    produce(kafka.bootstrap_servers, topic, [OutgoingRecord(value=f"second-{i}") for i in range(5)])
    # A new member of the same group starts after the committed offsets.
    assert _consume_in_group(kafka.bootstrap_servers, topic, group, 5) == [f"second-{i}" for i in range(5)]


def test_transactions_hide_aborted_records_from_read_committed(kafka: KafkaBroker) -> None:
    topic = unique_topic_name("txn")
    create_topic(kafka.bootstrap_servers, topic)
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "transactional.id": unique_topic_name("tx")})
    try:
        producer.init_transactions(30)
        producer.begin_transaction()
        for i in range(5):
            producer.produce(topic, value=f"committed-{i}".encode())
        producer.commit_transaction(30)
        producer.begin_transaction()
        producer.produce(topic, value=b"aborted")
        producer.abort_transaction(30)
    finally:
        close_producer(producer)

    records = consume_all(kafka.bootstrap_servers, topic, expected_count=5, settle=1.0)

    assert [r.value for r in records] == [f"committed-{i}".encode() for i in range(5)]


def _consume_in_group(bootstrap: str, topic: str, group: str, count: int, timeout: float = 30.0) -> list[str]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    values: list[str] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout
        while len(values) < count and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=count - len(values), timeout=0.5):
                assert msg.error() is None, msg.error()
                values.append((msg.value() or b"").decode())
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return values


# --------------------------------------------------------------------------------------
# Broker failures
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        # Rejected by `kafka-storage format`, before the broker JVM starts.
        ({"extra_config": {"num.network.threads": 0}}, "Invalid value 0 for configuration num.network.threads"),
        # The broker JVM itself dies; the message quotes broker.log.
        ({"jvm_options": ["-XX:+NoSuchOption"]}, "Unrecognized VM option 'NoSuchOption'"),
        # Never ready in time.
        ({"start_timeout": 0.01}, "within 0.01s"),
    ],
    ids=["bad-config", "jvm-dies", "timeout"],
)
def test_broker_that_cannot_start_raises_with_the_reason(
    tmp_path: Path, options: dict[str, Any], expected: str
) -> None:
    broker = KafkaBroker(data_dir=tmp_path, **options)

    with pytest.raises(KafkaStartError, match=re.escape(expected)):
        broker.start()

    assert not broker.is_running()
    assert not is_port_open(broker.port)


def test_broker_refuses_a_port_in_use(tmp_path: Path) -> None:
    with _listening_socket() as port:
        broker = KafkaBroker(data_dir=tmp_path, port=port)
        with pytest.raises(PortInUseError, match=f"port {port} on 127.0.0.1"):
            broker.start()
        assert not broker.is_running()


# --------------------------------------------------------------------------------------
# Jar cache (a fake mvn keeps these hermetic; the session broker ran the real one)
# --------------------------------------------------------------------------------------


def test_cached_jars_are_reused_without_running_maven(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    libs = ensure_kafka_jars()
    assert (libs / f"kafka_2.13-{DEFAULT_KAFKA_VERSION}.jar").is_file()

    monkeypatch.setenv("PATH", str(tmp_path))  # no mvn to be found
    assert ensure_kafka_jars() == libs


def test_failed_fetch_reports_maven_output_and_leaves_nothing_behind(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_mvn = _fake_mvn(
        tmp_path,
        """
        mkdir -p "$out" && touch "$out/kafka_2.13-4.0.99.jar"   # partial output, then failure
        echo "[ERROR] Failed to execute goal: Could not find artifact org.apache.kafka:kafka_2.13:jar:4.0.99"
        exit 1
        """,
    )
    monkeypatch.setenv("SLUICE_CACHE_DIR", str(tmp_path / "cache"))

    with pytest.raises(KafkaFetchError) as failure:
        ensure_kafka_jars("4.0.99", mvn=str(fake_mvn))

    assert "exit code 1" in str(failure.value)
    assert "Could not find artifact org.apache.kafka:kafka_2.13:jar:4.0.99" in str(failure.value)
    assert not is_kafka_cached("4.0.99")
    assert sorted(p.name for p in (tmp_path / "cache" / "kafka-4.0.99").iterdir()) == [".lock"]


def test_successful_fetch_is_marked_complete_and_runs_maven_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls = tmp_path / "calls"
    fake_mvn = _fake_mvn(
        tmp_path,
        f"""
        echo call >> {calls}
        mkdir -p "$out" && touch "$out/kafka_2.13-4.0.99.jar" "$out/log4j-slf4j-impl-2.25.4.jar"
        """,
    )
    monkeypatch.setenv("SLUICE_CACHE_DIR", str(tmp_path / "cache"))

    first = ensure_kafka_jars("4.0.99", mvn=str(fake_mvn))
    second = ensure_kafka_jars("4.0.99", mvn=str(fake_mvn))

    assert first == second == tmp_path / "cache" / "kafka-4.0.99" / "libs"
    assert sorted(p.name for p in first.iterdir()) == ["kafka_2.13-4.0.99.jar", "log4j-slf4j-impl-2.25.4.jar"]
    assert is_kafka_cached("4.0.99")
    assert calls.read_text().count("call") == 1


def _fake_mvn(directory: Path, body: str) -> Path:
    script = directory / "mvn"
    script.write_text(
        "#!/bin/sh\n"
        'for arg in "$@"; do case "$arg" in -DoutputDirectory=*) out="${arg#-DoutputDirectory=}";; esac; done\n'
        + "\n".join(line.strip() for line in body.strip().splitlines())
        + "\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


# --------------------------------------------------------------------------------------
# sluice dev up | status | down (run as a separate process, as a user would)
# --------------------------------------------------------------------------------------


@pytest.fixture
def dev_state_dir(tmp_path: Path) -> Iterator[Path]:
    state_dir = tmp_path / "dev"
    yield state_dir
    DevStack(state_dir).down(timeout=10)  # if the test failed half-way, stop what it started


def _dev(state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sluice.deploy.devstack", *args, "--state-dir", str(state_dir)],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_dev_up_status_down(dev_state_dir: Path) -> None:
    port = find_free_port()
    bootstrap = f"127.0.0.1:{port}"

    stopped = _dev(dev_state_dir, "status")
    assert (stopped.returncode, stopped.stdout.strip()) == (1, "Kafka: stopped")
    nothing = _dev(dev_state_dir, "down")
    assert nothing.returncode == 0 and "not running" in nothing.stdout

    up = _dev(dev_state_dir, "up", "--port", str(port))
    assert up.returncode == 0, up.stderr
    assert f"Kafka {DEFAULT_KAFKA_VERSION} ready at {bootstrap}" in up.stdout
    # `up` has exited and the broker outlived it.
    state = json.loads((dev_state_dir / "state.json").read_text())
    assert is_port_open(port)

    running = _dev(dev_state_dir, "status")
    assert running.returncode == 0, running.stdout
    assert "Kafka: running" in running.stdout
    assert f"pid:        {state['pid']}" in running.stdout
    assert f"bootstrap:  {bootstrap}" in running.stdout
    assert f"version:    {DEFAULT_KAFKA_VERSION}" in running.stdout
    assert f"data dir:   {dev_state_dir.resolve() / 'kafka'}" in running.stdout

    again = _dev(dev_state_dir, "up", "--port", str(port))
    assert again.returncode == 0
    assert f"already running at {bootstrap} (pid {state['pid']})" in again.stdout

    topic = unique_topic_name("dev")
    create_topic(bootstrap, topic)
    produce(bootstrap, topic, [OutgoingRecord(key=b"k", value=b"kept across down/up")])

    wrong_port = _dev(dev_state_dir, "down", "--port", str(port + 1))
    assert wrong_port.returncode == 1 and f"not on port {port + 1}; nothing stopped" in wrong_port.stderr
    assert is_port_open(port)
    down = _dev(dev_state_dir, "down", "--port", str(port))
    assert down.returncode == 0
    assert f"Stopped Kafka {DEFAULT_KAFKA_VERSION} at {bootstrap} (pid {state['pid']})" in down.stdout
    assert not is_port_open(port)
    assert _dev(dev_state_dir, "status").returncode == 1

    # Data survive down/up (only `down --purge` deletes them).
    assert _dev(dev_state_dir, "up", "--port", str(port)).returncode == 0
    assert [r.value for r in consume_all(bootstrap, topic, 1)] == [b"kept across down/up"]
    purge = _dev(dev_state_dir, "down", "--purge")
    assert purge.returncode == 0 and "Deleted" in purge.stdout
    assert not is_port_open(port)
    assert not (dev_state_dir / "kafka").exists()


def test_dev_up_with_a_schema_registry(dev_state_dir: Path) -> None:
    port = find_free_port()
    registry_port = find_free_port(exclude=[port])
    url = f"http://127.0.0.1:{registry_port}/apis/ccompat/v7"

    with _listening_socket() as taken:
        busy = _dev(dev_state_dir, "up", "--port", str(port), "--schema-registry", "--schema-registry-port", str(taken))
    assert busy.returncode == 1
    assert f"Port {taken} on 127.0.0.1 is already in use" in busy.stderr and "--schema-registry-port" in busy.stderr
    assert not is_port_open(port)  # nothing was started

    up = _dev(
        dev_state_dir, "up", "--port", str(port), "--schema-registry", "--schema-registry-port", str(registry_port)
    )
    assert up.returncode == 0, up.stderr
    assert f"schema.registry.url={url}" in up.stdout.splitlines()
    state = json.loads((dev_state_dir / "state.json").read_text())
    assert (state["schema_registry_port"], state["schema_registry_url"]) == (registry_port, url)
    registry_pid = state["schema_registry_pid"]
    assert Path(state["schema_registry_log_file"]) == dev_state_dir.resolve() / "schema-registry" / "server.log"

    # `up` has exited and the registry outlived it.
    request = urllib.request.Request(  # noqa: S310 - the registry URL `sluice dev` printed
        url + "/subjects/t-value/versions",
        data=json.dumps({"schema": '"string"'}).encode(),
        method="POST",
        headers={"Content-Type": CONTENT_TYPE, "Accept": CONTENT_TYPE},
    )
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - the registry URL `sluice dev` printed
        assert isinstance(json.load(response)["id"], int)

    running = _dev(dev_state_dir, "status")
    assert running.returncode == 0, running.stdout
    assert f"Schema Registry: running at {url} (pid {registry_pid})" in running.stdout
    again = _dev(
        dev_state_dir, "up", "--port", str(port), "--schema-registry", "--schema-registry-port", str(registry_port)
    )
    assert again.returncode == 0 and f"already running at {url} (pid {registry_pid})" in again.stdout

    down = _dev(dev_state_dir, "down", "--purge")
    assert down.returncode == 0, down.stderr
    assert f"Stopped the Schema Registry at {url} (pid {registry_pid})" in down.stdout
    assert not _pid_alive(registry_pid)  # (a zombie until init reaps it: `up` was its parent)
    assert not is_port_open(registry_port) and is_port_free(registry_port)
    assert not is_port_open(port)
    assert not (dev_state_dir / "schema-registry").exists()
    assert _dev(dev_state_dir, "status").stdout.strip() == "Kafka: stopped"


def test_dev_up_says_when_the_port_is_taken(dev_state_dir: Path) -> None:
    with _listening_socket() as port:
        result = _dev(dev_state_dir, "up", "--port", str(port))

    assert result.returncode == 1
    assert f"Port {port} on 127.0.0.1 is already in use" in result.stderr
    assert not (dev_state_dir / "state.json").exists()


@contextlib.contextmanager
def _listening_socket() -> Iterator[int]:
    """A loopback socket listening on a free port, for as long as the ``with`` block runs."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]
