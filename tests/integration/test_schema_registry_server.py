"""The local Schema Registry (Apicurio's Confluent API) behaves as a Confluent client expects.

Each test uses subjects of its own: the session's registry is shared and keeps everything in memory.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest

from sluice.deploy.schema_registry import SchemaRegistryServer

pytestmark = pytest.mark.integration

CONTENT_TYPE = {"Content-Type": "application/vnd.schemaregistry.v1+json"}


def _subject() -> str:
    return f"test-{uuid.uuid4().hex[:12]}-value"


def _record(name: str, *fields: dict[str, Any]) -> str:
    return json.dumps({"type": "record", "name": name, "fields": list(fields)})


def _register(registry: SchemaRegistryServer, subject: str, schema: str) -> httpx.Response:
    return httpx.post(f"{registry.url}/subjects/{subject}/versions", headers=CONTENT_TYPE, json={"schema": schema})


def test_registration_returns_an_id_that_reads_back_the_same_schema(schema_registry: SchemaRegistryServer) -> None:
    order = _record("Order", {"name": "id", "type": "long"})
    customer = _record("Customer", {"name": "email", "type": "string"})
    order_subject, customer_subject = _subject(), _subject()

    order_id = _register(schema_registry, order_subject, order).raise_for_status().json()["id"]
    customer_id = _register(schema_registry, customer_subject, customer).raise_for_status().json()["id"]

    assert isinstance(order_id, int) and isinstance(customer_id, int) and order_id != customer_id
    for schema_id, schema in ((order_id, order), (customer_id, customer)):
        answer = httpx.get(f"{schema_registry.url}/schemas/ids/{schema_id}").raise_for_status().json()
        assert json.loads(answer["schema"]) == json.loads(schema)
    latest = httpx.get(f"{schema_registry.url}/subjects/{order_subject}/versions/latest").raise_for_status().json()
    assert {k: latest[k] for k in ("subject", "version", "id")} == {"subject": order_subject, "version": 1, "id": order_id}
    assert json.loads(latest["schema"]) == json.loads(order)


def test_the_same_schema_under_the_same_subject_keeps_its_id_and_version(schema_registry: SchemaRegistryServer) -> None:
    subject = _subject()
    schema = _record("Payment", {"name": "amount", "type": "double"})

    first = _register(schema_registry, subject, schema).raise_for_status().json()["id"]
    second = _register(schema_registry, subject, schema).raise_for_status().json()["id"]

    assert first == second
    assert httpx.get(f"{schema_registry.url}/subjects/{subject}/versions").json() == [1]


def test_backward_compatibility_refuses_an_incompatible_change_with_409(schema_registry: SchemaRegistryServer) -> None:
    subject = _subject()
    _register(schema_registry, subject, _record("Item", {"name": "sku", "type": "string"})).raise_for_status()
    assert schema_registry.set_compatibility("BACKWARD", subject) == {"compatibilityLevel": "BACKWARD"}

    # A new field without a default cannot be read from old data.
    refused = _register(
        schema_registry, subject, _record("Item", {"name": "sku", "type": "string"}, {"name": "qty", "type": "int"})
    )
    assert refused.status_code == 409, refused.text
    assert refused.json()["error_code"] == 409
    assert "Incompatible" in refused.json()["message"]

    # With a default it can, and becomes version 2.
    added = _register(
        schema_registry,
        subject,
        _record("Item", {"name": "sku", "type": "string"}, {"name": "qty", "type": "int", "default": 1}),
    )
    assert added.status_code == 200, added.text
    assert httpx.get(f"{schema_registry.url}/subjects/{subject}/versions").json() == [1, 2]


def test_subjects_lists_a_registered_subject(schema_registry: SchemaRegistryServer) -> None:
    subject = _subject()
    _register(schema_registry, subject, _record("Listed", {"name": "n", "type": "int"})).raise_for_status()

    subjects = httpx.get(f"{schema_registry.url}/subjects").raise_for_status().json()

    assert subject in subjects
