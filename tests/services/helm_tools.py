"""Helm, kubeconform and Kubernetes API schemas for the Helm chart's tests, fetched once and cached.

Everything comes through the Go module proxy with the machine's ``go``:

- ``go install helm.sh/helm/v3/cmd/helm@<version>`` and
  ``go install github.com/yannh/kubeconform/cmd/kubeconform@<version>`` build the two tools;
- ``go mod download k8s.io/kubernetes@v<version>`` brings the Kubernetes source, whose
  ``api/openapi-spec/swagger.json`` describes every built-in kind of that release, and the
  Prometheus Operator's module brings the CustomResourceDefinitions of the kinds the chart renders
  besides (``ServiceMonitor``, ``PrometheusRule``: :data:`OPERATOR_CRDS`);
  :mod:`tests.services.kube_schemas` turns both into the JSON schemas kubeconform reads offline, so
  every document of the chart's renders is validated, none skipped.

Layout under the cache (``$SLUICE_CACHE_DIR``, default ``~/.cache/sluice``)::

    helm-tools/bin/helm-v3.22.0
    helm-tools/bin/kubeconform-v0.8.0
    kube-schemas-1.34.4/v1.34.4-standalone-strict/*.json   (+ .complete)

Each piece is written under a temporary name and renamed into place, so an interrupted fetch is
never taken for a complete one; concurrent fetches serialise on a lock file. A cache lacking the
schema of a CRD added to :data:`OPERATOR_CRDS` since it was made is not complete: the next fetch
adds that schema (from Go's module cache) without rebuilding the rest.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sluice.deploy.maven import COMPLETE_MARKER, cache_dir, exclusive_lock
from tests.services import kube_schemas

log = logging.getLogger(__name__)

HELM_VERSION: Final = "v3.22.0"
KUBECONFORM_VERSION: Final = "v0.8.0"
#: The Kubernetes release whose API the rendered manifests are validated against.
KUBERNETES_VERSION: Final = "1.34.4"
PROMETHEUS_OPERATOR_VERSION: Final = "v0.85.0"
#: The Prometheus Operator's CRDs (paths in its Go module) of the kinds the chart renders, with the
#: kind each defines: kubeconform knows only Kubernetes' own kinds.
OPERATOR_CRDS: Final = (
    ("ServiceMonitor", "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml"),
    ("PrometheusRule", "example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml"),
)
_OPERATOR_MODULE: Final = "github.com/prometheus-operator/prometheus-operator"
GO_TIMEOUT_S: Final = 1800.0


class HelmToolsError(RuntimeError):
    """Go is missing or a fetch failed; the message says which and how to retry."""


@dataclass(frozen=True)
class HelmTools:
    """The cached tools and the schema directory kubeconform is pointed at."""

    helm: Path
    kubeconform: Path
    schemas: Path
    kubernetes_version: str = KUBERNETES_VERSION

    def kubeconform_args(self) -> list[str]:
        """kubeconform's options for strict, offline validation against :attr:`kubernetes_version`."""
        return [
            str(self.kubeconform), "-strict", "-summary", "-schema-location", str(self.schemas),
            "-kubernetes-version", self.kubernetes_version,
        ]


def _bin_dir() -> Path:
    return cache_dir() / "helm-tools" / "bin"


def _schema_root() -> Path:
    return cache_dir() / f"kube-schemas-{KUBERNETES_VERSION}"


def _missing_operator_schemas(root: Path) -> list[str]:
    """The CRD paths of :data:`OPERATOR_CRDS` whose schema ``root`` lacks."""
    directory = kube_schemas.layout_dir(root, KUBERNETES_VERSION)
    return [
        path for kind, path in OPERATOR_CRDS
        if not (directory / kube_schemas.schema_file_name(kind, "monitoring.coreos.com", "v1")).is_file()
    ]


def cached_tools() -> HelmTools | None:
    """The tools if a complete fetch is in the cache; never downloads."""
    tools = HelmTools(
        _bin_dir() / f"helm-{HELM_VERSION}", _bin_dir() / f"kubeconform-{KUBECONFORM_VERSION}", _schema_root()
    )
    complete = (tools.schemas / COMPLETE_MARKER).is_file() and not _missing_operator_schemas(tools.schemas)
    return tools if complete and os.access(tools.helm, os.X_OK) and os.access(tools.kubeconform, os.X_OK) else None


def _go() -> str:
    go = shutil.which("go") or next((p for p in ("/usr/local/go/bin/go", "/usr/lib/go/bin/go") if Path(p).is_file()), None)
    if go is None:
        raise HelmToolsError("`go` is not installed: the Helm tools are built from the Go module proxy (install Go 1.24+)")
    return go


def _run_go(args: Sequence[str], env: dict[str, str] | None = None) -> str:
    started = time.monotonic()
    try:
        done = subprocess.run(
            [_go(), *args], capture_output=True, text=True, timeout=GO_TIMEOUT_S, env={**os.environ, **(env or {})}
        )
    except subprocess.TimeoutExpired:
        raise HelmToolsError(f"`go {' '.join(args)}` did not finish within {GO_TIMEOUT_S:g}s") from None
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-20:])
        raise HelmToolsError(f"`go {' '.join(args)}` failed (exit {done.returncode}):\n{tail}")
    log.info("go %s: %.0f s", " ".join(args), time.monotonic() - started)
    return done.stdout


def _install(package: str, version: str, target: Path) -> None:
    """``go install package@version`` into a scratch GOBIN, then renamed to ``target``."""
    if os.access(target, os.X_OK):
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        _run_go(["install", f"{package}@{version}"], env={"GOBIN": scratch, "CGO_ENABLED": "0"})
        os.replace(Path(scratch) / package.rsplit("/", 1)[-1], target)


def _module_dir(module: str, version: str) -> Path:
    """The unpacked source of a module, downloaded into Go's module cache."""
    info = json.loads(_run_go(["mod", "download", "-json", f"{module}@{version}"]))
    if info.get("Error") or not info.get("Dir"):
        raise HelmToolsError(f"go mod download {module}@{version}: {info.get('Error', 'no directory')}")
    return Path(info["Dir"])


def _add_operator_schemas(root: Path, crds: Sequence[Path]) -> None:
    """Add the schemas of ``crds`` to a complete cache, each file renamed into place."""
    target = kube_schemas.layout_dir(root, KUBERNETES_VERSION)
    with tempfile.TemporaryDirectory(dir=root.parent) as scratch:
        for crd in crds:
            kube_schemas.write_schemas(kube_schemas.schemas_from_crd_file(crd), Path(scratch))
        for made in Path(scratch).iterdir():
            os.replace(made, target / made.name)


def _build_schemas(root: Path) -> None:
    missing = _missing_operator_schemas(root)
    if (root / COMPLETE_MARKER).is_file() and not missing:
        return
    operator = _module_dir(_OPERATOR_MODULE, PROMETHEUS_OPERATOR_VERSION)
    root.parent.mkdir(parents=True, exist_ok=True)
    if (root / COMPLETE_MARKER).is_file():  # made before a CRD joined OPERATOR_CRDS
        _add_operator_schemas(root, [operator / path for path in missing])
        return
    swagger = _module_dir("k8s.io/kubernetes", f"v{KUBERNETES_VERSION}") / "api/openapi-spec/swagger.json"
    crds = [operator / path for _, path in OPERATOR_CRDS]
    with tempfile.TemporaryDirectory(dir=root.parent) as scratch:
        kube_schemas.generate(swagger, crds, Path(scratch) / "schemas", KUBERNETES_VERSION)
        (Path(scratch) / "schemas" / COMPLETE_MARKER).write_text(f"k8s.io/kubernetes@v{KUBERNETES_VERSION}\n")
        if root.exists():
            shutil.rmtree(root)
        os.replace(Path(scratch) / "schemas", root)


def ensure_helm_tools() -> HelmTools:
    """Helm, kubeconform and the schemas, fetched and built unless already cached."""
    cached = cached_tools()
    if cached is not None:
        return cached
    _bin_dir().mkdir(parents=True, exist_ok=True)
    with exclusive_lock(_bin_dir().parent / ".lock"):
        _install("helm.sh/helm/v3/cmd/helm", HELM_VERSION, _bin_dir() / f"helm-{HELM_VERSION}")
        _install("github.com/yannh/kubeconform/cmd/kubeconform", KUBECONFORM_VERSION,
                 _bin_dir() / f"kubeconform-{KUBECONFORM_VERSION}")
        _build_schemas(_schema_root())
    tools = cached_tools()
    if tools is None:
        raise HelmToolsError("the Helm tools were fetched but are not where they should be")
    return tools


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tests.services.helm_tools fetch``: fetch once, print where everything is."""
    parser = argparse.ArgumentParser(prog="python -m tests.services.helm_tools", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["fetch", "where"], help="fetch: build/download what is missing; where: only look")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        tools = ensure_helm_tools() if args.command == "fetch" else cached_tools()
    except HelmToolsError as exc:
        print(f"helm_tools: {exc}", file=sys.stderr)
        return 1
    if tools is None:
        print("helm_tools: not fetched yet (make helm-tools)", file=sys.stderr)
        return 1
    print(f"helm={tools.helm}\nkubeconform={tools.kubeconform}\nschemas={tools.schemas}\nkubernetes={tools.kubernetes_version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
