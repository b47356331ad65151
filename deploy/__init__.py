"""What users run and what ships: the dev stack, the quickstart, the container image, the Helm chart.

``sluice.deploy.kafka_stack`` fetches Apache Kafka from Maven Central and runs a single-node KRaft
broker on loopback; ``sluice.deploy.devstack`` is the ``sluice dev up | down | status`` command
group built on it (with ``sluice.deploy.schema_registry`` for ``up --schema-registry``), and the
quickstart (``quickstart/run.sh``) runs the same broker. ``sluice.deploy.spark`` provisions Spark's
jars for backfills, ``sluice.deploy.container_image`` builds the image of ``container/``, and
``sluice.deploy.sources`` knows the checkout's layout. Static files (the Maven pom, the broker's
log4j2 configuration) live in ``deploy/kafka/``.

The services only the tests start (PostgreSQL, MariaDB, S3Proxy, OpenSearch, Kafka Connect with
Debezium, Helm's tools) have their launchers in the checkout's ``tests/services/``, not here: the
wheel does not ship them.
"""
