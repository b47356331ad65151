"""Kubernetes OpenAPI → kubeconform JSON schemas (tests.services.kube_schemas), on a tiny API document; the
cache of tests.services.helm_tools gaining a CRD's schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from sluice.deploy.maven import COMPLETE_MARKER
from tests.services import helm_tools
from tests.services.kube_schemas import layout_dir, schema_file_name, schemas_from_crd, schemas_from_openapi

DOCUMENT: dict[str, Any] = {
    "definitions": {
        "io.k8s.api.apps.v1.Widget": {
            "type": "object",
            "properties": {
                "spec": {"$ref": "#/definitions/io.k8s.api.apps.v1.WidgetSpec"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            },
            "x-kubernetes-group-version-kind": [{"group": "apps", "kind": "Widget", "version": "v1"}],
        },
        "io.k8s.api.apps.v1.WidgetSpec": {
            "type": "object",
            "properties": {
                "port": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.util.intstr.IntOrString"},
                "child": {"$ref": "#/definitions/io.k8s.api.apps.v1.WidgetSpec"},
            },
        },
        "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {"type": "string", "format": "int-or-string"},
        "io.k8s.api.core.v1.Unrelated": {"type": "object", "properties": {"x": {"type": "string"}}},
        "io.k8s.api.core.v1.Thing": {
            "type": "object",
            "properties": {"x": {"type": "string"}},
            "x-kubernetes-group-version-kind": [{"group": "", "kind": "Thing", "version": "v1"}],
        },
    }
}


def test_file_names_follow_kubeconform() -> None:
    assert schema_file_name("Deployment", "apps", "v1") == "deployment-apps-v1.json"
    assert schema_file_name("Service", "", "v1") == "service-v1.json"
    assert schema_file_name("ServiceMonitor", "monitoring.coreos.com", "v1") == "servicemonitor-monitoring-v1.json"


def test_a_kind_carries_only_what_it_reaches_strictly_and_nullably() -> None:
    files = schemas_from_openapi(DOCUMENT)
    assert sorted(files) == ["thing-v1.json", "widget-apps-v1.json"]
    widget = files["widget-apps-v1.json"]
    assert sorted(widget["definitions"]) == [
        "io.k8s.api.apps.v1.WidgetSpec", "io.k8s.apimachinery.pkg.util.intstr.IntOrString",
    ]
    assert widget["additionalProperties"] is False and widget["type"] == ["object", "null"]
    # A map keeps accepting any key.
    assert widget["properties"]["labels"]["additionalProperties"] == {"type": ["string", "null"]}
    int_or_string = widget["definitions"]["io.k8s.apimachinery.pkg.util.intstr.IntOrString"]
    assert {"type": "integer"} in int_or_string["oneOf"] and {"type": "string"} in int_or_string["oneOf"]


def test_a_crd_schema_keeps_its_open_objects_open() -> None:
    crd = {
        "kind": "CustomResourceDefinition",
        "spec": {
            "group": "monitoring.coreos.com",
            "names": {"kind": "ServiceMonitor"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {"type": "object", "properties": {"a": {"type": "string"}}},
                                "extra": {"type": "object", "properties": {}, "x-kubernetes-preserve-unknown-fields": True},
                            },
                        }
                    },
                }
            ],
        },
    }
    [(name, schema)] = schemas_from_crd(crd).items()
    assert name == "servicemonitor-monitoring-v1.json"
    assert schema["properties"]["spec"]["additionalProperties"] is False
    assert "additionalProperties" not in schema["properties"]["extra"]


def _crd(kind: str) -> dict[str, object]:
    body = {"type": "object", "properties": {"spec": {"type": "object", "properties": {"x": {"type": "string"}}}}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "spec": {
            "group": "monitoring.coreos.com",
            "names": {"kind": kind},
            "versions": [{"name": "v1", "served": True, "schema": {"openAPIV3Schema": body}}],
        },
    }


def test_a_cache_made_before_the_prometheus_rule_crd_gets_its_schema_added(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``make helm-tools`` on a cache holding only the ServiceMonitor's schema adds the
    PrometheusRule's from the operator module, leaving the rest; then the cache counts as complete."""
    module = tmp_path / "operator"
    for kind, path in helm_tools.OPERATOR_CRDS:
        (module / path).parent.mkdir(parents=True, exist_ok=True)
        (module / path).write_text(yaml.safe_dump(_crd(kind)))
    monkeypatch.setattr(helm_tools, "_module_dir", lambda name, version: module)
    root = tmp_path / "schemas"
    layout = layout_dir(root, helm_tools.KUBERNETES_VERSION)
    layout.mkdir(parents=True)
    (root / COMPLETE_MARKER).write_text("old\n")
    (layout / "deployment-apps-v1.json").write_text("{}")
    (layout / "servicemonitor-monitoring-v1.json").write_text("{}")
    rule = schema_file_name("PrometheusRule", "monitoring.coreos.com", "v1")
    assert helm_tools._missing_operator_schemas(root) == [helm_tools.OPERATOR_CRDS[1][1]]

    helm_tools._build_schemas(root)

    assert helm_tools._missing_operator_schemas(root) == []
    assert json.loads((layout / rule).read_text())["properties"]["spec"]["properties"]["x"]["type"] == ["string", "null"]
    assert (layout / "deployment-apps-v1.json").read_text() == "{}"  # not rebuilt
