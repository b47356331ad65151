"""Local stack for development and integration tests.

``sluice.deploy.kafka_stack`` fetches Apache Kafka from Maven Central and runs a single-node KRaft
broker on loopback; ``sluice.deploy.devstack`` is the ``sluice dev up | down | status`` command
group built on it. Static files (the Maven pom, the broker's log4j2 configuration) live in
``deploy/kafka/``.
"""
