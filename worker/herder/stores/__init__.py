"""Where the herders keep the cluster's state: connector configs and the statuses of connectors and tasks.

Each kind of state has a store for each worker mode, as in Kafka Connect's backing stores:

* :mod:`.config_store` — the :class:`~.config_store.ConfigStore` protocol the herder core writes
  through, the records of Connect's config topic, and the in-memory store (standalone);
* :mod:`.kafka_config_store` — the same records in ``config.storage.topic`` (distributed);
* :mod:`.status_store` — statuses in memory (standalone);
* :mod:`.kafka_status_store` — statuses in ``status.storage.topic`` (distributed).
"""
