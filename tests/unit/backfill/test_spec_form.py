"""The backfill spec as a form (``GET /backfills/kinds``): derived from the models, not written per field."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from sluice.worker.backfill.models import KINDS, SPEC_MODELS, JdbcTableSource, parse_spec, spec_to_json
from sluice.worker.backfill.spec_form import SECTIONS, describe_kind, describe_kinds


def fields_of(form: dict[str, Any], section: str) -> dict[str, dict[str, Any]]:
    (found,) = [s for s in form["sections"] if s["name"] == section]
    return {f["name"]: f for f in found["fields"]}


@pytest.mark.parametrize("kind", KINDS)
def test_every_key_of_every_section_is_a_field_with_its_description(kind: str) -> None:
    form = describe_kind(kind)
    assert [s["name"] for s in form["sections"]] == list(SECTIONS)
    assert [f["key"] for f in form["fields"]] == ["id"]
    for section in form["sections"]:
        annotation = SPEC_MODELS[kind].model_fields[section["name"]].annotation
        model = next(
            a
            for a in getattr(annotation, "__args__", (annotation,))
            if isinstance(a, type) and issubclass(a, BaseModel)
        )
        expected = [info.alias or name for name, info in model.model_fields.items()]
        fields = section["fields"]
        assert [f["name"] for f in fields] == expected
        for field in fields:
            assert field["key"] == f"{section['name']}.{field['name']}"
            assert field["path"] == [section["name"], field["name"]]  # the dotted name stays one part
            assert field["documentation"], field
    json.dumps(form)  # defaults are JSON


def test_types_defaults_choices_and_secrets_of_the_jdbc_kind() -> None:
    form = describe_kind("jdbc_to_topic")
    source, target = fields_of(form, "source"), fields_of(form, "target")
    assert source["connection.url"] | {"documentation": ""} == {
        "key": "source.connection.url", "path": ["source", "connection.url"], "name": "connection.url",
        "type": "string", "required": True, "default": None, "documentation": "", "secret": False,
    }  # fmt: skip
    assert source["connection.password"]["secret"] is True and source["connection.password"]["type"] == "string"
    assert (source["num.partitions"]["type"], source["num.partitions"]["default"]) == ("integer", 4)
    assert source["numeric.mapping"]["type"] == "enum"
    assert source["numeric.mapping"]["choices"] == ["none", "best_fit", "best_fit_eager_double", "precision_only"]
    assert source["key.columns"]["type"] == "list"
    assert target["cdc"]["type"] == "object"
    assert (target["producer"]["type"], target["producer"]["default"]) == ("map", {})
    assert (target["key.converter.schemas.enable"]["type"], target["key.converter.schemas.enable"]["default"]) == (
        "boolean",
        True,
    )
    sections = {s["name"]: s["required"] for s in form["sections"]}
    assert sections == {"source": True, "target": True, "spark": False, "schedule": False}
    assert fields_of(form, "schedule")["cron"]["required"] is True
    assert form["documentation"] and fields_of(form, "spark")["conf"]["type"] == "map"


def test_an_s3_replays_target_is_optional_and_installed_kinds_are_marked() -> None:
    forms = {f["kind"]: f for f in describe_kinds({"jdbc_to_topic"})}
    assert list(forms) == list(KINDS)
    assert forms["jdbc_to_topic"]["installed"] is True and forms["s3_to_topic"]["installed"] is False
    assert {s["name"]: s["required"] for s in forms["s3_to_topic"]["sections"]}["target"] is False
    assert "installed" not in describe_kind("topic_to_sink")


def test_the_defaults_the_form_shows_are_the_ones_a_spec_gets() -> None:
    """A spec that spells out every default the form shows parses to the same job as one that leaves them out."""
    form = describe_kind("jdbc_to_topic")
    minimal = {
        "id": "orders",
        "kind": "jdbc_to_topic",
        "source": {"connection.url": "jdbc:postgresql://db/shop", "table": "orders"},
        "target": {"topic": "orders"},
    }
    spelled: dict[str, Any] = json.loads(json.dumps(minimal))
    for section in ("source", "target", "spark"):
        for field in fields_of(form, section).values():
            if field["default"] is not None:
                spelled.setdefault(section, {}).setdefault(field["name"], field["default"])
    assert spelled["source"]["num.partitions"] == 4 and spelled["spark"] == {"conf": {}}
    assert spec_to_json(parse_spec(spelled)) == spec_to_json(parse_spec(minimal))
    assert JdbcTableSource.model_fields["fetch_size"].default == fields_of(form, "source")["fetch.size"]["default"]
