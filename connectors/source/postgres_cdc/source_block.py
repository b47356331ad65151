"""What every event's ``source`` block says about its producer, as Debezium's PostgreSQL connector writes it.

Its own module because both lanes write it (:mod:`sluice.connectors.source.postgres_cdc.emitters`):
the Python one and the native encoder (:mod:`sluice.connectors.source.postgres_cdc.native`).
"""

from __future__ import annotations

VERSION = "2.7.0.Final"  # the Debezium event format these events follow
CONNECTOR = "postgresql"
