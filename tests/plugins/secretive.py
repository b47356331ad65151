"""A source connector with a password, whose task fails quoting it (``tests.plugins.secretive.SecretiveSource``).

Used to check that a secret in an exception reaches neither the status trace nor the worker log.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import SecretStr

from sluice.connectors.api import (
    ConnectError,
    PluginConfig,
    SourceConnector,
    SourceRecord,
    SourceTask,
    SourceTaskContext,
)


class SecretiveSourceConfig(PluginConfig):
    topic: str
    password: SecretStr


class SecretiveSourceTask(SourceTask):
    """Fails on start with an error that carries the password, as a careless driver might."""

    def start(self, config: Mapping[str, Any], context: SourceTaskContext) -> None:
        password = config["password"]
        try:
            raise ValueError(f"authentication failed for password={password!r}")
        except ValueError as exc:
            raise ConnectError(f"cannot log in with {password}") from exc

    def poll(self) -> list[SourceRecord] | None:
        return None

    def stop(self) -> None:
        pass


class SecretiveSource(SourceConnector):
    Config = SecretiveSourceConfig
    task_class = SecretiveSourceTask

    def start(self, config: Any) -> None:
        self.config = config

    def task_configs(self, max_tasks: int) -> list[dict[str, Any]]:
        return [{"topic": self.config.topic, "password": self.config.password.get_secret_value()}]
