"""Converters: Connect data ↔ the bytes stored in Kafka.

Each converter is found by the worker through entry points (``sluice.converters`` /
``sluice.header_converters``); ``aliases`` carries the Kafka Connect class name so existing
``key.converter=org.apache.kafka.connect.json.JsonConverter`` configurations keep working.
"""

from __future__ import annotations
