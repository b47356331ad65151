"""JSON schemas for kubeconform, made offline from the Kubernetes API's OpenAPI document.

kubeconform validates manifests against one JSON schema per kind, found by a path template; with
``-schema-location DIR`` it reads ``DIR/v<version>-standalone-strict/<kind><suffix>.json`` where
the suffix is ``-<first word of the API group>-<version>`` (``deployment-apps-v1.json``) or
``-<version>`` for the core group (``service-v1.json``). This module writes that layout from:

- the Kubernetes source's ``api/openapi-spec/swagger.json`` (OpenAPI 2, every built-in kind), and
- CustomResourceDefinition manifests (the Prometheus Operator's ``ServiceMonitor`` and
  ``PrometheusRule``), whose ``openAPIV3Schema`` already is a JSON schema.

Each file holds its kind's schema plus only the definitions it reaches, under ``definitions``,
so ``$ref``s stay local and recursive types stay finite. What the API server accepts but the
OpenAPI document does not say is written in: an ``IntOrString`` is a string or an integer, a
``Quantity`` a string or a number, and an optional field may be ``null``. "Strict" schemas refuse
properties a type does not declare, so a misspelt field fails validation as the API server's
strict field validation would.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

_REF = re.compile(r"^#/definitions/(.+)$")
_INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
_QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
_SCHEMA_DIALECT = "http://json-schema.org/draft-07/schema#"


def layout_dir(root: Path, kubernetes_version: str) -> Path:
    """Where kubeconform looks for strict schemas of ``kubernetes_version`` (``1.34.4``) under ``root``."""
    return root / f"v{kubernetes_version.lstrip('v')}-standalone-strict"


def schema_file_name(kind: str, group: str, version: str) -> str:
    """kubeconform's file name for a kind: ``deployment-apps-v1.json``, ``service-v1.json``."""
    suffix = f"-{group.split('.')[0].lower()}-{version}" if group else f"-{version}"
    return f"{kind.lower()}{suffix}.json"


def _nullable(node: dict[str, Any]) -> None:
    kind = node.get("type")
    if isinstance(kind, str):
        node["type"] = [kind, "null"]


def convert(node: Any, *, strict: bool) -> Any:
    """An OpenAPI schema node as a JSON schema node (recursively): optional values may be null and,
    when ``strict``, an object with declared properties admits no others."""
    if isinstance(node, list):
        return [convert(item, strict=strict) for item in node]
    if not isinstance(node, dict):
        return node
    result = {key: convert(value, strict=strict) for key, value in node.items() if key != "properties"}
    if "properties" in node:
        result["properties"] = {name: convert(value, strict=strict) for name, value in node["properties"].items()}
        open_object = node.get("x-kubernetes-preserve-unknown-fields") or "additionalProperties" in node
        if strict and not open_object:
            result["additionalProperties"] = False
    if node.get("format") == "int-or-string":
        result.pop("type", None)
        result.pop("format", None)
        result["oneOf"] = [{"type": "string"}, {"type": "integer"}]
    _nullable(result)
    return result


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        match = _REF.match(str(node.get("$ref", "")))
        if match:
            yield match.group(1)
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)


def _reachable(start: str, definitions: Mapping[str, Any]) -> list[str]:
    seen: set[str] = set()
    pending = [start]
    while pending:
        name = pending.pop()
        if name in seen or name not in definitions:
            continue
        seen.add(name)
        pending.extend(_refs(definitions[name]))
    return sorted(seen)


def _special_types(definitions: dict[str, Any]) -> None:
    """What the API server accepts for the two scalar types the OpenAPI document types as strings."""
    if _INT_OR_STRING in definitions:
        definitions[_INT_OR_STRING] = {"oneOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]}
    if _QUANTITY in definitions:
        definitions[_QUANTITY] = {"oneOf": [{"type": "string"}, {"type": "number"}, {"type": "null"}]}


def schemas_from_openapi(document: Mapping[str, Any], *, strict: bool = True) -> dict[str, dict[str, Any]]:
    """File name → JSON schema for every kind of an OpenAPI 2 document (``swagger.json``)."""
    definitions = {name: convert(body, strict=strict) for name, body in document.get("definitions", {}).items()}
    _special_types(definitions)
    files: dict[str, dict[str, Any]] = {}
    for name, original in document.get("definitions", {}).items():
        for gvk in original.get("x-kubernetes-group-version-kind", []):
            schema = copy.deepcopy(definitions[name])
            needed = [d for d in _reachable(name, definitions) if d != name]
            schema["definitions"] = {d: definitions[d] for d in needed}
            schema["$schema"] = _SCHEMA_DIALECT
            files[schema_file_name(gvk["kind"], gvk.get("group", ""), gvk["version"])] = schema
    return files


def schemas_from_crd(crd: Mapping[str, Any], *, strict: bool = True) -> dict[str, dict[str, Any]]:
    """File name → JSON schema for every served version of a CustomResourceDefinition."""
    spec = crd["spec"]
    group, kind = spec["group"], spec["names"]["kind"]
    files: dict[str, dict[str, Any]] = {}
    for version in spec.get("versions", []):
        body = (version.get("schema") or {}).get("openAPIV3Schema")
        if not version.get("served", True) or not body:
            continue
        schema = convert(body, strict=strict)
        schema["$schema"] = _SCHEMA_DIALECT
        files[schema_file_name(kind, group, version["name"])] = schema
    return files


def schemas_from_crd_file(path: Path, *, strict: bool = True) -> dict[str, dict[str, Any]]:
    """File name → JSON schema for every CustomResourceDefinition in a manifest file."""
    files: dict[str, dict[str, Any]] = {}
    for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
        if isinstance(document, dict) and document.get("kind") == "CustomResourceDefinition":
            files.update(schemas_from_crd(document, strict=strict))
    return files


def write_schemas(files: Mapping[str, Mapping[str, Any]], directory: Path) -> int:
    """Write ``files`` into ``directory``; the number written."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, schema in files.items():
        (directory / name).write_text(json.dumps(schema, separators=(",", ":")), encoding="utf-8")
    return len(files)


def generate(swagger: Path, crds: Iterable[Path], out: Path, kubernetes_version: str) -> Path:
    """The strict schemas of ``swagger`` and ``crds`` under kubeconform's layout in ``out``; that directory."""
    directory = layout_dir(out, kubernetes_version)
    write_schemas(schemas_from_openapi(json.loads(swagger.read_text(encoding="utf-8"))), directory)
    for path in crds:
        write_schemas(schemas_from_crd_file(path), directory)
    return directory


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.services.kube_schemas", description=__doc__.split("\n\n")[0])
    parser.add_argument("swagger", type=Path, help="the Kubernetes api/openapi-spec/swagger.json")
    parser.add_argument("out", type=Path, help="directory to pass to kubeconform -schema-location")
    parser.add_argument("--kubernetes-version", required=True, help="e.g. 1.34.4 (kubeconform -kubernetes-version)")
    parser.add_argument("--crd", type=Path, action="append", default=[], help="a CustomResourceDefinition manifest")
    args = parser.parse_args(argv)
    print(generate(args.swagger, args.crd, args.out, args.kubernetes_version))
    return 0


if __name__ == "__main__":
    sys.exit(main())
