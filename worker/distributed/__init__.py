"""Distributed mode: a cluster of workers sharing connector configs, statuses and offsets through Kafka topics."""
