"""What every event's ``source`` block says about its producer, as Debezium's PostgreSQL connector writes it.

Its own module because both serializers need it: the Python path
(:mod:`sluice.connectors.source.postgres_cdc.decoder`) and the native one
(:mod:`sluice.connectors.source.postgres_cdc.native`), which the decoder uses.
"""

from __future__ import annotations

VERSION = "2.7.0.Final"  # the Debezium event format these events follow
CONNECTOR = "postgresql"
