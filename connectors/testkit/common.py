"""Checks every connector passes, source or sink: configuration validation and the lifecycle."""

from __future__ import annotations

import json
from collections.abc import Hashable
from typing import Any, ClassVar

from sluice.connectors.api import ConfigError, Connector
from sluice.connectors.testkit.harness import own_keys, runtime_task_configs, stringified

#: A key no connector defines, for the unknown-key check.
UNKNOWN_KEY = "sluice.testkit.unknown.key"


class InvalidConfig:
    """A configuration ``validate`` must refuse, and the key its ``ConfigError`` must name."""

    __slots__ = ("config", "key", "why")

    def __init__(self, config: dict[str, Any], key: str, why: str = "") -> None:
        self.config = config
        self.key = key
        self.why = why

    def __repr__(self) -> str:
        return f"InvalidConfig(key={self.key!r}, why={self.why!r})"


def frozen(value: Any) -> Hashable:
    """A hashable stand-in for a record's key or value (dicts and lists as canonical JSON)."""
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=True, default=repr)
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    return value if isinstance(value, Hashable) else repr(value)


class ConnectorChecks:
    """What source and sink checks share. Subclass :class:`SourceConnectorChecks` or
    :class:`SinkConnectorChecks`, not this.

    Hooks: :attr:`connector_class`, :meth:`valid_config`, and optionally :meth:`invalid_configs`.
    Set up what a hook needs (a file, a table, a bucket) in an ``autouse`` fixture of the subclass:
    pytest binds it to the same instance the check runs on.
    """

    #: The connector under test.
    connector_class: ClassVar[type[Connector]]
    #: ``tasks.max`` values the lifecycle check asks ``task_configs`` for.
    max_tasks_values: ClassVar[tuple[int, ...]] = (1, 3)

    # -- hooks ------------------------------------------------------------------------------------

    def valid_config(self) -> dict[str, Any]:
        """A configuration that works against the test's system: the connector's own keys (for a
        sink, with ``topics``). ``connector.class``, ``name`` and ``tasks.max`` are not needed."""
        raise NotImplementedError(f"{type(self).__name__} must define valid_config()")

    def invalid_configs(self) -> list[InvalidConfig]:
        """Configurations ``validate`` must refuse, each with the key the error must name.

        The kit adds two of its own: the valid configuration without each required key, and with an
        unknown key.
        """
        return []

    # -- checks -----------------------------------------------------------------------------------

    def test_validate_accepts_the_valid_config(self) -> None:
        own = own_keys(self.connector_class, self.valid_config())
        self.connector_class.validate(own)
        # As a .properties file or a REST body of strings gives it.
        self.connector_class.validate(stringified(own))

    def test_validate_names_the_key_of_each_invalid_config(self) -> None:
        failures = []
        for case in [*self._derived_invalid_configs(), *self.invalid_configs()]:
            try:
                self.connector_class.validate(own_keys(self.connector_class, case.config))
            except ConfigError as exc:
                if case.key != exc.key and case.key not in exc.problems:
                    failures.append(f"{case}: the error names {exc.key!r} / {sorted(exc.problems)}: {exc}")
            except Exception as exc:  # noqa: BLE001 - the finding is which exception it was
                failures.append(f"{case}: raised {type(exc).__name__} instead of ConfigError: {exc}")
            else:
                failures.append(f"{case}: accepted")
        assert not failures, "validate() did not refuse as expected:\n" + "\n".join(failures)

    def test_connector_starts_splits_work_and_its_tasks_start_and_stop(self) -> None:
        for max_tasks in self.max_tasks_values:
            configs = runtime_task_configs(self.connector_class, self.valid_config(), max_tasks)
            assert 1 <= len(configs) <= max_tasks, f"task_configs({max_tasks}) returned {len(configs)} configurations"
            for config in configs:
                json.dumps(config)  # the runtime stores them as JSON
            self.start_and_stop_tasks(configs)

    def start_and_stop_tasks(self, configs: list[dict[str, Any]]) -> None:
        """Start a task for each configuration (together, as a worker would), then stop them.
        :class:`SourceConnectorChecks` and :class:`SinkConnectorChecks` define it."""
        raise NotImplementedError(f"{type(self).__name__}: subclass SourceConnectorChecks or SinkConnectorChecks")

    def _derived_invalid_configs(self) -> list[InvalidConfig]:
        valid = self.valid_config()
        cases = [InvalidConfig({**valid, UNKNOWN_KEY: "x"}, UNKNOWN_KEY, "unknown key")]
        for name, info in self.connector_class.Config.model_fields.items():
            key = info.alias or name
            if info.is_required() and key in valid:
                cases.append(InvalidConfig({k: v for k, v in valid.items() if k != key}, key, "required key missing"))
        return cases
