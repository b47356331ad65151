"""``${provider:...}`` references in a backfill spec: resolved with the worker's config providers
when a run starts (the stored spec keeps the reference), refused at submit and validate when they
cannot be resolved, with the path of the key."""

from __future__ import annotations

from typing import Any

import pytest

from sluice.worker.backfill import BackfillManager, MemoryBackfillStore
from sluice.worker.backfill.progress import RunTracker
from sluice.worker.config.providers import ConfigProviders
from sluice.worker.herder import BadRequest

PASSWORD_REF = "${env:SLUICE_TEST_BACKFILL_PASSWORD}"


def _spec(password: str, user: str = "u") -> dict[str, Any]:
    url = "jdbc:postgresql://db:5432/shop"
    return {
        "id": "customers",
        "kind": "jdbc_to_topic",
        "source": {"connection.url": url, "connection.user": user, "connection.password": password, "table": "customers"},
        "target": {"topic": "shop.customers"},
    }


class Capture:
    def __init__(self) -> None:
        self.specs: list[Any] = []

    def __call__(self, provider: Any, spec: Any, tracker: RunTracker, bootstrap: str) -> dict[str, Any]:
        self.specs.append(spec)
        return {}


@pytest.fixture
def providers(monkeypatch: pytest.MonkeyPatch) -> ConfigProviders:
    monkeypatch.setenv("SLUICE_TEST_BACKFILL_PASSWORD", "s3cret-value")
    monkeypatch.setenv("SLUICE_TEST_BACKFILL_USER", "loader")
    return ConfigProviders.from_worker_config(
        {"config.providers": "env", "config.providers.env.param.allowlist.pattern": "SLUICE_TEST_.*"}
    )


def _manager(runner: Capture, providers: ConfigProviders) -> BackfillManager:
    m = BackfillManager(MemoryBackfillStore(), runner=runner)
    m.resolve_references = providers.resolve
    m.start()
    return m


def test_a_run_gets_the_values_and_the_stored_spec_keeps_the_references(providers: ConfigProviders) -> None:
    runner = Capture()
    m = _manager(runner, providers)
    try:
        user = "${env:SLUICE_TEST_BACKFILL_USER}"
        m.submit(_spec(PASSWORD_REF, user))
        m.wait("customers", 5)
        [ran] = runner.specs
        assert ran.source.connection_password.get_secret_value() == "s3cret-value"
        assert ran.source.connection_user == "loader"
        stored = m.store.get("customers")
        assert stored is not None and stored.spec["source"]["connection.password"] == PASSWORD_REF
        assert stored.spec["source"]["connection.user"] == user
        shown = m.get("customers")["spec"]["source"]
        assert shown["connection.password"] != "s3cret-value" and "s3cret-value" not in str(m.get("customers"))
    finally:
        m.stop()


def test_a_reference_that_cannot_be_resolved_is_refused_with_its_path(providers: ConfigProviders) -> None:
    m = _manager(Capture(), providers)
    try:
        for password, why in (
            ("${vault:secret/db:password}", "'vault' is not declared"),
            ("${env:SLUICE_TEST_NOT_SET}", "SLUICE_TEST_NOT_SET"),
        ):
            answer = m.validate(_spec(password))
            assert not answer["valid"], answer
            [error] = answer["errors"]
            assert error["path"] == ["source", "connection.password"], error
            assert why in error["message"], error
            with pytest.raises(BadRequest, match="source.connection.password"):
                m.submit(_spec(password))
        assert m.list() == []
        assert m.validate(_spec(PASSWORD_REF))["valid"]
    finally:
        m.stop()
