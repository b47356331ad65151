"""The Helm chart (deploy/helm/sluice): ``helm lint`` passes, ``helm template`` renders with the default
values and with every option on, and kubeconform validates the manifests offline against the
Kubernetes API schema of a named release (tests.services.helm_tools.KUBERNETES_VERSION).

Beyond the schema, what the chart renders is checked with Sluice's own parsers: the worker
properties are a valid distributed config whose listener is allowed to start, and the connectors
declared in values are files that ``sluice apply`` reads. The dashboard ConfigMap and the
PrometheusRule carry the files under the chart's ``files/`` (which deploy/grafana and
deploy/prometheus link to); tests/integration/test_dashboards.py checks their content.

The tools come from ``make helm-tools`` (part of ``make test``). Without them this module is
skipped, except under ``CI=true``, where that is a failure.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from sluice.cli.connector_files import load_connector_files
from sluice.rest.settings import RestSettings
from sluice.worker.config.models import with_cli_defaults
from sluice.worker.config.properties import parse_properties
from sluice.worker.distributed.config import DistributedConfig
from tests.integration.worker_process import free_port
from tests.services.helm_tools import HelmTools, cached_tools
from tests.unavailable import unavailable

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "sluice"
ALL_ON = CHART / "ci" / "all-on-values.yaml"
DASHBOARD = CHART / "files" / "sluice-dashboard.json"
ALERTS = CHART / "files" / "sluice-alerts.yaml"
#: What a cluster running the Prometheus Operator serves; `helm template` knows of no CRDs unless told.
OPERATOR_APIS = ("monitoring.coreos.com/v1/ServiceMonitor", "monitoring.coreos.com/v1/PrometheusRule")


@pytest.fixture(scope="module")
def tools() -> HelmTools:
    found = cached_tools()
    if found is None:
        message = "helm, kubeconform and the Kubernetes schemas are not cached: run `make helm-tools`"
        unavailable(message)
    return found


def run(args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, input=stdin, capture_output=True, text=True, timeout=120)


def render(tools: HelmTools, *values: Path, api_versions: tuple[str, ...] = (), chart: Path = CHART) -> str:
    args = [str(tools.helm), "template", "rel", str(chart), "--namespace", "data", "--kube-version", tools.kubernetes_version]
    for path in values:
        args += ["-f", str(path)]
    for api in api_versions:
        args += ["--api-versions", api]
    done = run(args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def validate(tools: HelmTools, manifests: str) -> subprocess.CompletedProcess[str]:
    """kubeconform against the cached schemas only (what ``make helm-tools`` made), offline."""
    return run([*tools.kubeconform_args(), "-"], stdin=manifests)


def by_kind(manifests: str) -> dict[str, list[dict[str, Any]]]:
    kinds: dict[str, list[dict[str, Any]]] = {}
    for document in yaml.safe_load_all(manifests):
        if document:
            kinds.setdefault(document["kind"], []).append(document)
    return kinds


@pytest.mark.parametrize("values", [[], [ALL_ON]], ids=["default", "all-on"])
def test_helm_lint(tools: HelmTools, values: list[Path]) -> None:
    done = run([str(tools.helm), "lint", "--strict", str(CHART), *[a for v in values for a in ("-f", str(v))]])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout


def test_helm_lint_refuses_values_the_chart_does_not_know(tools: HelmTools) -> None:
    done = run([str(tools.helm), "lint", "--strict", str(CHART), "--set", "rest.auth.mode=tokn", "--set", "replicas=3",
                "--set", "connectors.orders.topic=orders"])
    assert done.returncode == 1
    assert "'/rest/auth/mode': value must be one of 'token', 'none'" in done.stdout
    assert "additional properties 'replicas' not allowed" in done.stdout
    assert "'/connectors/orders': missing property 'connector.class'" in done.stdout


def test_default_values_render_valid_manifests(tools: HelmTools) -> None:
    manifests = render(tools)
    done = validate(tools, manifests)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Invalid: 0, Errors: 0, Skipped: 0" in done.stdout
    kinds = by_kind(manifests)
    assert sorted(kinds) == ["ConfigMap", "Deployment", "PodDisruptionBudget", "Secret", "Service", "ServiceAccount"]
    container = kinds["Deployment"][0]["spec"]["template"]["spec"]["containers"][0]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": "http"}
    assert kinds["Deployment"][0]["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}


def test_default_values_add_a_service_monitor_where_the_operator_runs(tools: HelmTools) -> None:
    """The ServiceMonitor is on by default, and rendered only where the cluster serves its API (so
    the default values install on a cluster without the Prometheus Operator)."""
    manifests = render(tools, api_versions=OPERATOR_APIS)
    done = validate(tools, manifests)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Valid: 7, Invalid: 0, Errors: 0, Skipped: 0" in done.stdout
    kinds = by_kind(manifests)
    [monitor], [service] = kinds["ServiceMonitor"], kinds["Service"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    assert "PrometheusRule" not in kinds  # the rules and the dashboard are opt-in
    assert [c["metadata"]["name"] for c in kinds["ConfigMap"]] == ["rel-sluice-worker"]


def test_every_option_renders_valid_manifests(tools: HelmTools) -> None:
    """Every document validates against ``make helm-tools``'s cache alone: 100 %, the ServiceMonitor
    and the PrometheusRule (the Prometheus Operator's CRDs) included, none skipped."""
    manifests = render(tools, ALL_ON, api_versions=OPERATOR_APIS)
    done = validate(tools, manifests)
    assert done.returncode == 0, done.stdout + done.stderr
    kinds = by_kind(manifests)
    documents = sum(len(found) for found in kinds.values())
    assert documents == 12
    assert f"Valid: {documents}, Invalid: 0, Errors: 0, Skipped: 0" in done.stdout
    assert sorted(kinds) == [
        "ConfigMap", "Deployment", "Job", "PodDisruptionBudget", "PrometheusRule", "Secret", "Service", "ServiceAccount",
        "ServiceMonitor",
    ]
    [job] = kinds["Job"]
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade"
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:3] == ["sluice", "apply", "/etc/sluice/connectors"] and "--prune" in command
    mounts = kinds["Deployment"][0]["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert {"name": "secret-db", "mountPath": "/etc/sluice/secrets/db", "readOnly": True} in mounts


def test_the_dashboard_and_rules_are_the_files_deploy_links_to(tools: HelmTools, tmp_path: Path) -> None:
    """The dashboard ConfigMap and the PrometheusRule hold the chart's files/ unchanged (but for
    the worker-down rule's job, which becomes the ServiceMonitor's), also from the packaged chart;
    deploy/grafana and deploy/prometheus are links to the same files, not copies."""
    root = CHART.parents[2]
    assert (root / "deploy" / "grafana" / "sluice-dashboard.json").resolve() == DASHBOARD.resolve()
    assert (root / "deploy" / "prometheus" / "sluice-alerts.yaml").resolve() == ALERTS.resolve()
    packaged = run([str(tools.helm), "package", str(CHART), "--destination", str(tmp_path)])
    assert packaged.returncode == 0, packaged.stderr
    [archive] = tmp_path.glob("sluice-*.tgz")
    for chart in (CHART, archive):
        kinds = by_kind(render(tools, ALL_ON, api_versions=OPERATOR_APIS, chart=chart))
        [dashboard] = [c for c in kinds["ConfigMap"] if c["metadata"]["name"] == "sluice-all-dashboard"]
        assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert dashboard["metadata"]["namespace"] == "monitoring"
        assert json.loads(dashboard["data"]["sluice-dashboard.json"]) == json.loads(DASHBOARD.read_text())
        [rule] = kinds["PrometheusRule"]
        assert rule["metadata"]["labels"]["release"] == "prometheus"
        generic = yaml.safe_load(ALERTS.read_text())
        assert rule["spec"] != generic  # the worker-down matcher was found and replaced
        assert rule["spec"] == yaml.safe_load(ALERTS.read_text().replace('up{job=~".*sluice.*"}', 'up{job="sluice-all"}'))


def worker_properties(manifests: str, *, pod_ip: str, token: str | None) -> dict[str, str]:
    """worker.properties as the pod's start script completes it."""
    [config_map] = [c for c in by_kind(manifests)["ConfigMap"] if c["metadata"]["name"].endswith("-worker")]
    text = config_map["data"]["worker.properties"] + f"rest.advertised.host.name={pod_ip}\n"
    if token:
        text += f"rest.auth.bearer.tokens={token}\n"
    return parse_properties(text)


@pytest.mark.parametrize("values", [[], [ALL_ON]], ids=["default", "all-on"])
def test_the_worker_properties_start_a_distributed_worker(tools: HelmTools, values: list[Path]) -> None:
    properties = worker_properties(render(tools, *values), pod_ip="10.1.2.3", token="t0ken")
    config = DistributedConfig.from_mapping(with_cli_defaults(properties))
    assert config.worker_id == "10.1.2.3:8083"
    assert config.config_storage_topic == f"{config.group_id}-configs"
    settings = RestSettings.from_worker_config(config.raw)
    settings.check_exposure(config.listener[1])  # raises if 0.0.0.0 were served without authentication
    assert settings.bearer_tokens


def test_connectors_in_values_are_files_sluice_apply_reads(tools: HelmTools, tmp_path: Path) -> None:
    [config_map] = [c for c in by_kind(render(tools, ALL_ON))["ConfigMap"] if c["metadata"]["name"].endswith("-connectors")]
    for key, text in config_map["data"].items():
        (tmp_path / key).write_text(text)
    files = {f.name: f.config for f in load_connector_files([tmp_path])}
    values = yaml.safe_load(ALL_ON.read_text())["connectors"]
    assert sorted(files) == sorted(values)
    assert files["orders-source"]["tasks.max"] == "1"
    assert files["orders-sink"]["connection.password"] == "${dir:/etc/sluice/secrets/db:password}"


def test_kubeconform_refuses_a_misspelt_field_and_a_wrong_type(tools: HelmTools) -> None:
    [deployment] = by_kind(render(tools))["Deployment"]
    misspelt = copy.deepcopy(deployment)
    misspelt["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGett"] = {"path": "/health"}
    done = validate(tools, yaml.safe_dump(misspelt))
    assert done.returncode == 1 and "'httpGett' not allowed" in done.stdout
    wrong = copy.deepcopy(deployment)
    wrong["spec"]["replicas"] = "two"
    done = validate(tools, yaml.safe_dump(wrong))
    assert done.returncode == 1 and "/spec/replicas" in done.stdout


def _container(manifests: str, kind: str) -> dict[str, Any]:
    [workload] = by_kind(manifests)[kind]
    return workload["spec"]["template"]["spec"]["containers"][0]


def _wait_healthy(url: str, worker: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert worker.poll() is None, f"the worker exited with {worker.returncode}:\n{log.read_text()[-3000:]}"
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"the worker was not healthy after {timeout}s:\n{log.read_text()[-3000:]}")


def test_the_rendered_worker_and_apply_job_run_against_kafka(tools: HelmTools, kafka, tmp_path: Path) -> None:
    """The Deployment's start script and the apply Job's command, as rendered, run on this machine:
    mount paths point at temporary directories, and the listener is moved to loopback."""
    port, group = free_port(), f"helm-{uuid.uuid4().hex[:8]}"
    # The connectors' directory apart from the mounts: an allowed path may not hold the worker's config.
    data = tmp_path / "data"
    data.mkdir()
    (data / "in.txt").write_text("one\ntwo\n")
    values = {
        "kafka": {"bootstrapServers": kafka.bootstrap_servers},
        "cluster": {"groupId": group, "replicationFactor": 1, "offsetStoragePartitions": 3, "statusStoragePartitions": 1},
        "rest": {"port": port, "auth": {"mode": "token"}},
        "worker": {
            "taskExecutor": "thread",
            "connectorAllowedPaths": str(data),
            "properties": {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000, "rebalance.timeout.ms": 20000},
        },
        "connectors": {"helm-lines": {"connector.class": "FileStreamSource", "file": str(data / "in.txt"), "topic": group}},
    }
    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    manifests = render(tools, values_file)
    kinds = by_kind(manifests)
    [secret] = [s for s in kinds["Secret"] if s["metadata"]["name"].endswith("-rest-auth")]
    token = base64.b64decode(secret["data"]["token"]).decode()
    mounts = {name: tmp_path / name for name in ("worker", "run", "connectors")}
    for directory in mounts.values():
        directory.mkdir()
    for config_map in kinds["ConfigMap"]:
        target = mounts["worker" if config_map["metadata"]["name"].endswith("-worker") else "connectors"]
        for key, text in config_map["data"].items():
            (target / key).write_text(text.replace("http://0.0.0.0:", "http://127.0.0.1:"))
    script = _container(manifests, "Deployment")["args"][0]
    script = script.replace("/etc/sluice/worker", str(mounts["worker"])).replace("/var/run/sluice", str(mounts["run"]))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "PYTHONUNBUFFERED": "1"}
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(["/bin/sh", "-c", script], stdout=out, stderr=subprocess.STDOUT,
                                  env={**env, "POD_IP": "127.0.0.1", "SLUICE_REST_TOKEN": token})
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_healthy(url, worker, log)
        assert httpx.get(f"{url}/connectors", timeout=5).status_code == 401  # the token is required
        job = _container(manifests, "Job")
        command = [str(mounts["connectors"]) if part == "/etc/sluice/connectors" else part for part in job["command"]]
        job_env = {e["name"]: e.get("value") for e in job["env"]}
        assert job_env["SLUICE_URL"] == "http://rel-sluice:8083"  # the Service, which targets the pods' port
        apply_env = {**env, "SLUICE_URL": url, "SLUICE_TOKEN": token}
        first = subprocess.run(command, env=apply_env, capture_output=True, text=True, timeout=180)
        assert first.returncode == 0, first.stdout + first.stderr + log.read_text()[-3000:]
        assert "Created helm-lines." in first.stdout
        status = httpx.get(f"{url}/connectors/helm-lines/status", headers={"Authorization": f"Bearer {token}"}, timeout=5).json()
        assert status["tasks"][0]["state"] == "RUNNING" and status["tasks"][0]["worker_id"] == f"127.0.0.1:{port}"
        again = subprocess.run(command, env=apply_env, capture_output=True, text=True, timeout=180)
        assert again.returncode == 0 and "Plan: 0 to create, 0 to update, 0 to delete, 1 unchanged." in again.stdout
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(10)
