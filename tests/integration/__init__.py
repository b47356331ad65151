"""Integration tests: real services (a Kafka broker, ...) started by session fixtures."""
