"""The REST API: Kafka Connect's surface over the herder façade."""

from sluice.rest.app import create_app

__all__ = ["create_app"]
