"""What a form for a backfill spec needs to know, derived from the spec models (``GET /backfills/kinds``).

For each job kind: the top-level ``id``, then one section per part of the spec (``source``,
``target``, ``spark``, ``schedule``) with one field per key of its model, each with its JSON name,
type, whether it is required, its default, its description, its choices (a ``Literal``) and whether
it is a secret (``SecretStr``). Nothing here is written per field: a key added to a model shows up
in the console's form with its description. A value the form cannot edit as one input (a nested
model such as ``target.cdc``, a dict, a list of strings) is typed ``object``, ``map`` or ``list`` and
edited as JSON.
"""

from __future__ import annotations

import types
import typing
from typing import Any, Literal

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from sluice.worker.backfill.models import SPEC_MODELS

#: The parts of a spec that are sections of the form, in the order it shows them.
SECTIONS = ("source", "target", "spark", "schedule")

_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean", SecretStr: "string"}


def describe_kinds(installed: frozenset[str] | set[str] | None = None) -> list[dict[str, Any]]:
    """One form description per job kind; ``installed`` (when given) marks the kinds this worker can run."""
    return [describe_kind(kind, installed) for kind in SPEC_MODELS]


def describe_kind(kind: str, installed: frozenset[str] | set[str] | None = None) -> dict[str, Any]:
    """The form description of ``kind``: its ``id`` field and its sections."""
    model = SPEC_MODELS[kind]
    sections = []
    for name in SECTIONS:
        info = model.model_fields[name]
        section_model = _section_model(info.annotation)
        sections.append(
            {
                "name": name,
                "required": info.is_required(),
                "documentation": (section_model.__doc__ or "").strip(),
                "fields": [_field((name, key), field) for key, field in _fields(section_model)],
            }
        )
    out: dict[str, Any] = {
        "kind": kind,
        "documentation": (model.__doc__ or "").strip(),
        "fields": [_field(("id",), model.model_fields["id"])],
        "sections": sections,
    }
    if installed is not None:
        out["installed"] = kind in installed
    return out


def _fields(model: type[BaseModel]) -> list[tuple[str, FieldInfo]]:
    """``(JSON name, field)`` of each key of ``model``, in declaration order."""
    return [(info.alias or name, info) for name, info in model.model_fields.items()]


def _section_model(annotation: Any) -> type[BaseModel]:
    """The model of a section, through ``Optional``."""
    for candidate in _without_none(annotation):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    raise TypeError(f"a spec section must be a model, not {annotation!r}")


def _without_none(annotation: Any) -> list[Any]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    return [annotation]


def _field(path: tuple[str, ...], info: FieldInfo) -> dict[str, Any]:
    """One field of the form: ``key`` is the dotted path the validation errors name, ``path`` its parts."""
    annotation = _without_none(info.annotation)[0]
    field: dict[str, Any] = {
        "key": ".".join(path),
        "path": list(path),
        "name": path[-1],
        "type": _type_name(annotation),
        "required": info.is_required(),
        "default": _default(info),
        "documentation": info.description or "",
        "secret": annotation is SecretStr,
    }
    if typing.get_origin(annotation) is Literal:
        field["choices"] = [str(choice) for choice in typing.get_args(annotation)]
    return field


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return "enum"
    if origin is dict:
        return "map"
    if origin is list:
        return "list"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "object"
    scalar = _SCALARS.get(annotation)
    if scalar is None:
        raise TypeError(f"no form type for {annotation!r}")
    return scalar


def _default(info: FieldInfo) -> Any:
    """The default as JSON (``None`` when the key is required or defaults to nothing)."""
    if info.is_required():
        return None
    value = info.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return value.model_dump(by_alias=True, exclude_none=True, mode="json")
    if isinstance(value, SecretStr):
        return None  # a default secret is never shown
    return value
