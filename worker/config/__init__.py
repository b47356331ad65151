"""Configuration and what it may reach: the worker's and each connector's settings, config providers,
the Kafka client keys and local paths a connector may name, its data scope, and secret masking."""
