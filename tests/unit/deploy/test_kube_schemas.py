"""Kubernetes OpenAPI → kubeconform JSON schemas (deploy.kube_schemas), on a tiny API document."""

from __future__ import annotations

from typing import Any

from sluice.deploy.kube_schemas import schema_file_name, schemas_from_crd, schemas_from_openapi

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
