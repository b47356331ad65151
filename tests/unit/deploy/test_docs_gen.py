"""The generated reference pages match the code, and every transform example on them is valid."""

from __future__ import annotations

import json
import re

import pytest

from sluice.connectors.api import ConfigError
from sluice.deploy import docs_gen
from sluice.plugins import PluginRegistry
from sluice.rest.settings import RestSettings
from sluice.transforms import BUILTIN_PREDICATES, BUILTIN_TRANSFORMS
from sluice.worker.config.models import WorkerConfig
from sluice.worker.execution.transform_chain import build_chain

ROOT = docs_gen.docs_dir().parent  # the checkout (SLUICE_SOURCE_DIR when the suite runs from the wheel)
TRANSFORMS_PAGE = ROOT / "docs" / "transforms.md"


@pytest.fixture(scope="module")
def registry() -> PluginRegistry:
    return PluginRegistry()


def test_generated_pages_match_the_code(registry: PluginRegistry) -> None:
    for path, regenerate in docs_gen.pages(registry).items():
        text = path.read_text()
        assert regenerate(text) == text, (
            f"docs/{path.name} no longer matches the config models; regenerate it with {docs_gen.REGENERATE}"
        )


def _examples() -> list[tuple[str, dict[str, str]]]:
    """``(section heading, config)`` for every JSON block of the transforms page."""
    heading = ""
    found = []
    for match in re.finditer(r"^(#+ [^\n]*)$|^```json\n(.*?)^```$", TRANSFORMS_PAGE.read_text(), re.M | re.S):
        if match.group(1):
            heading = match.group(1).lstrip("# ").strip()
        else:
            found.append((heading, json.loads(match.group(2))))
    return found


def test_every_transform_example_builds_a_chain(registry: PluginRegistry) -> None:
    examples = _examples()
    assert len(examples) > 20
    for heading, config in examples:
        chain = build_chain(config, registry)  # a ConfigError here names the example's bad key
        assert chain is not None, heading
        if heading in ("Configuring a chain",):
            continue
        used = {docs_gen.family(type(step.transform)) for step in chain.steps}
        used |= {docs_gen.family(type(step.predicate)) for step in chain.steps if step.predicate is not None}
        # "ExtractNewRecordState (Debezium)" is about ExtractNewRecordState.
        assert heading.split()[0] in used, f"the example under '{heading}' does not use {heading.split()[0]}"


def test_every_shipped_transform_and_predicate_has_a_section() -> None:
    text = TRANSFORMS_PAGE.read_text()
    blocks = set(re.findall(r"<!-- BEGIN GENERATED: (\S+) -->", text))
    headings = {h.split()[0] for h, _ in _examples()}
    for cls in [*BUILTIN_TRANSFORMS.values(), *BUILTIN_PREDICATES.values()]:
        name = docs_gen.family(cls)
        assert name in blocks, f"docs/transforms.md has no generated block for {name}"
        assert name in headings, f"docs/transforms.md has no example for {name}"


def test_a_wrong_example_fails(registry: PluginRegistry) -> None:
    """The check above has teeth: an example without a required setting is refused, naming it."""
    with pytest.raises(ConfigError, match="transforms.cast.spec"):
        build_chain({"transforms": "cast", "transforms.cast.type": "Cast$Value"}, registry)


def test_every_rest_key_has_a_type_and_default() -> None:
    model_keys = {info.alias for info in WorkerConfig.model_fields.values()}
    documented = {key for keys, _ in docs_gen.rest_docstring_keys() for key in keys} - model_keys
    assert documented == set(docs_gen.REST_KEY_TYPES)


def test_rest_defaults_shown_are_the_ones_used() -> None:
    settings = RestSettings.from_worker_config({})
    shown = {key: default for key, (_, default) in docs_gen.REST_KEY_TYPES.items()}
    assert shown["rest.request.max.bytes"] == str(settings.max_request_bytes)
    assert shown["rest.request.header.timeout.ms"] == str(settings.request_header_timeout_ms)
    assert shown["rest.request.body.timeout.ms"] == str(settings.request_body_timeout_ms)
    assert shown["rest.connections.per.client.max"] == str(settings.max_connections_per_client)
    assert shown["listeners.https.ssl.client.authentication"] == settings.client_auth
    assert shown["rest.auth.allow.unauthenticated"] == str(settings.allow_unauthenticated).lower()


def test_hand_listed_worker_keys_are_still_read() -> None:
    sources = "\n".join(
        p.read_text() for folder in ("worker", "rest") for p in (ROOT / folder).rglob("*.py")
    )
    for entry, *_ in docs_gen.OTHER_WORKER_KEYS:
        for key in (part.strip() for part in entry.split(",")):
            literal = key.split("<")[0].rstrip("*")
            assert f'"{literal}' in sources, f"{key} is listed in docs/worker-config.md but no code reads it"
