"""A backfill job from the REST API may tune Spark but not load code, touch files or reach hosts."""

from __future__ import annotations

from typing import Any

import pytest

from sluice.connectors.api import ConfigError
from sluice.worker.backfill.models import parse_spec


def job(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "id": "j1",
        "kind": "topic_to_s3",
        "source": {"topic": "orders"},
        "target": {"config": {"s3.bucket.name": "b", "format.class": "JsonFormat"}},
    }
    spec.update(overrides)
    return spec


@pytest.mark.parametrize(
    "conf",
    [
        {"spark.driver.extraJavaOptions": "-javaagent:/tmp/evil.jar"},
        {"spark.executor.extraClassPath": "/tmp"},
        {"spark.jars": "/tmp/evil.jar"},
        {"spark.jars.packages": "org.evil:evil:1"},
        {"spark.executorEnv.LD_PRELOAD": "/tmp/evil.so"},
        {"spark.plugins": "org.evil.Plugin"},
        {"spark.extraListeners": "org.evil.Listener"},
        {"spark.sql.extensions": "org.evil.Ext"},
        {"spark.sql.catalog.evil": "org.evil.Catalog"},
        {"spark.sql.sources.commitProtocolClass": "org.evil.Commit"},
        {"spark.eventLog.dir": "file:///etc"},
        {"spark.hadoop.fs.s3a.aws.credentials.provider": "org.evil.Creds"},
        {"spark.master": "spark://10.0.0.1:7077"},
        {"spark.ui.enabled": "true"},
        {"spark.pyspark.python": "/tmp/evil"},
    ],
)
def test_dangerous_spark_confs_are_refused(conf: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as info:
        parse_spec(job(spark={"conf": conf}))
    assert next(iter(conf)) in str(info.value)


def test_tuning_confs_and_local_masters_pass() -> None:
    spec = parse_spec(
        job(spark={"master": "local[2]", "conf": {"spark.master": "local[*]", "spark.executor.memory": "2g", "spark.sql.shuffle.partitions": "4", "spark.driver.memory": "1g"}})
    )
    assert spec.spark.conf["spark.executor.memory"] == "2g"


def test_a_cluster_master_is_the_operators() -> None:
    with pytest.raises(ConfigError, match="backfill.spark.master"):
        parse_spec(job(spark={"master": "yarn"}))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("sasl.jaas.config", 'com.sun.security.auth.module.JndiLoginModule required user.provider.url="ldap://x";'),
        ("kafka.sasl.jaas.config", 'com.sun.security.auth.module.JndiLoginModule required;'),
        ("sasl.oauthbearer.token.endpoint.url", "http://127.0.0.1:1/"),
        ("ssl.truststore.location", "/etc/passwd"),
        ("sasl.login.callback.handler.class", "org.evil.Handler"),
    ],
)
def test_kafka_options_pass_the_client_deny_list(key: str, value: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_spec(job(source={"topic": "orders", "consumer": {key: value}}))
    assert key in str(info.value)
    plain = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p";'
    assert parse_spec(job(source={"topic": "orders", "consumer": {"sasl.jaas.config": plain}})).source.consumer
