"""A source that counts: deterministic records for demos, benchmarks and failover drills."""

from sluice.connectors.source.sequence.connector import SequenceSourceConnector, SequenceSourceTask

__all__ = ["SequenceSourceConnector", "SequenceSourceTask"]
