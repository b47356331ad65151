"""Errors of the local Kafka stack: fetching its jars, formatting its storage, running the broker."""

from __future__ import annotations

from sluice.deploy.processes import LOOPBACK


class KafkaStackError(RuntimeError):
    """Base class for errors fetching or running the local Kafka broker."""


class KafkaFetchError(KafkaStackError):
    """The Kafka jars could not be fetched from Maven Central."""


class KafkaStartError(KafkaStackError):
    """The broker could not be launched, exited during startup, or did not become ready."""


class PortInUseError(KafkaStartError):
    """A port the broker must listen on is already taken by another process."""

    def __init__(self, port: int, host: str = LOOPBACK, listener: str = "PLAINTEXT") -> None:
        self.port = port
        self.host = host
        self.listener = listener
        super().__init__(f"port {port} on {host} (the {listener} listener) is already in use by another process")
