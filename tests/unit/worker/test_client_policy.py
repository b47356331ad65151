from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from sluice.connectors.api import ConfigError
from sluice.worker.config.client_policy import (
    AllowlistOverridePolicy,
    ClientOverridePolicy,
    denied_reason,
    override_policy,
)


@pytest.mark.parametrize(
    "key",
    [
        "plugin.library.paths",
        "sasl.kerberos.kinit.cmd",
        "ssl.engine.location",
        "ssl.providers",
        "ssl.ca.location",
        "ssl.key.location",
        "ssl.keystore.location",
        "ssl.truststore.location",
        "sasl.kerberos.keytab",
        "sasl.oauthbearer.token.endpoint.url",
        "sasl.oauthbearer.jwks.endpoint.url",
        "sasl.oauthbearer.assertion.private.key.file",
        "https.ca.location",
        "sasl.login.callback.handler.class",
        "interceptor.classes",
        "config.providers",
        "SSL.CA.LOCATION",
    ],
)
def test_denied_keys(key: str) -> None:
    assert denied_reason(key, "x") is not None


@pytest.mark.parametrize(
    "key", ["linger.ms", "acks", "compression.type", "security.protocol", "sasl.mechanism", "ssl.ca.pem"]
)
def test_ordinary_keys_pass(key: str) -> None:
    assert denied_reason(key, "x") is None


def test_jaas_configs_only_with_credential_modules() -> None:
    plain = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p";'
    scram = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="p";'
    assert denied_reason("sasl.jaas.config", plain) is None
    assert denied_reason("sasl.jaas.config", scram) is None
    jndi = 'com.sun.security.auth.module.JndiLoginModule required user.provider.url="ldap://x/";'
    assert denied_reason("sasl.jaas.config", jndi) is not None
    assert denied_reason("sasl.jaas.config", plain + jndi) is not None  # a second entry is checked too
    assert denied_reason("sasl.jaas.config", "") is not None


def test_policies_from_the_worker_config() -> None:
    # Sluice's default is an allowlist of tuning keys (Connect's is All): see SECURITY.md.
    default = override_policy({})
    assert default.name == "Allowlist"
    default.check_config({"name": "c", "producer.override.linger.ms": "5", "consumer.override.max.poll.records": "10"})
    with pytest.raises(ConfigError, match="allows only") as refused:
        default.check_config({"name": "c", "producer.override.bootstrap.servers": "evil:9092"})
    assert refused.value.key == "producer.override.bootstrap.servers"
    assert override_policy({"connector.client.config.override.policy": "All"}).name == "All"
    policy = override_policy(
        {
            "connector.client.config.override.policy": "org.apache.kafka.connect.connector.policy.NoneConnectorClientConfigOverridePolicy"
        }
    )
    with pytest.raises(ConfigError, match="None forbids") as info:
        policy.check_config({"producer.override.linger.ms": "5"})
    assert info.value.key == "producer.override.linger.ms"

    principal = override_policy({"connector.client.config.override.policy": "Principal"})
    principal.check_config({"consumer.override.security.protocol": "SASL_SSL"})
    with pytest.raises(ConfigError, match="allows only"):
        principal.check_config({"consumer.override.fetch.min.bytes": "1"})


def test_the_deny_list_holds_under_all_and_under_an_allowlist_that_names_the_key() -> None:
    with pytest.raises(ConfigError) as info:
        override_policy({"connector.client.config.override.policy": "All"}).check_config(
            {"admin.override.plugin.library.paths": "/tmp/x.so"}
        )
    assert info.value.key == "admin.override.plugin.library.paths"
    assert "loads code" in str(info.value)
    with pytest.raises(ConfigError, match="no connector may set") as info:
        override_policy(
            {
                "connector.client.config.override.policy": "Allowlist",
                "connector.client.config.override.allowlist": "linger.ms,ssl.ca.location",
            }
        )
    assert info.value.key == "connector.client.config.override.allowlist"


def test_allowlist() -> None:
    policy = override_policy(
        {
            "connector.client.config.override.policy": "Allowlist",
            "connector.client.config.override.allowlist": " linger.ms , acks",
        }
    )
    assert isinstance(policy, AllowlistOverridePolicy)
    policy.check_config({"producer.override.linger.ms": "1", "producer.override.acks": "all", "name": "c"})
    with pytest.raises(ConfigError, match="allows only acks, linger.ms"):
        policy.check_config({"producer.override.batch.size": "1"})


class OnlyLinger(ClientOverridePolicy):
    name = "OnlyLinger"

    def refused(self, what: str, overrides: Mapping[str, Any]) -> list[str]:
        return sorted(k for k in overrides if k != "linger.ms")


def test_a_policy_class_by_python_path() -> None:
    policy = override_policy({"connector.client.config.override.policy": f"{__name__}.OnlyLinger"})
    policy.check_config({"producer.override.linger.ms": "1"})
    with pytest.raises(ConfigError):
        policy.check_config({"producer.override.acks": "1"})
    with pytest.raises(ConfigError, match="not a known policy") as info:
        override_policy({"connector.client.config.override.policy": "os.system"})
    assert info.value.key == "connector.client.config.override.policy"


# -- cluster keys and client identities (issue #36, items 4 and 5) ---------------------------------

ALL = {"connector.client.config.override.policy": "All"}
SCOPED = {"sluice.scope.topics": "orders-*"}


@pytest.mark.parametrize(
    "key",
    [
        "bootstrap.servers",
        "security.protocol",
        "sasl.mechanism",
        "sasl.jaas.config",
        "sasl.username",
        "ssl.endpoint.identification.algorithm",
    ],
)
def test_a_scoped_connector_may_not_set_cluster_keys_under_all(key: str) -> None:
    value = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p";'
    config = {"name": "orders-x", f"producer.override.{key}": value, **SCOPED}
    with pytest.raises(ConfigError, match="admin role on every connector") as info:
        override_policy(ALL).check_config(config)
    assert info.value.key == f"producer.override.{key}"
    # An unrestricted admin's connector may (the worker's security settings then stay behind).
    override_policy(ALL).check_config({k: v for k, v in config.items() if not k.startswith("sluice.")})


def test_a_policy_that_names_a_cluster_key_allows_it_for_a_scoped_connector() -> None:
    policy = override_policy(
        {
            "connector.client.config.override.policy": "Allowlist",
            "connector.client.config.override.allowlist": "bootstrap.servers",
        }
    )
    policy.check_config({"name": "orders-x", "producer.override.bootstrap.servers": "other:9092", **SCOPED})


@pytest.mark.parametrize(
    ("key", "value", "ok"),
    [
        ("consumer.override.group.id", "connect-orders-x", True),
        ("consumer.override.group.id", "connect-orders-x-v2", True),
        ("consumer.override.group.id", "connect-payments-sink", False),
        ("consumer.override.group.id", "connect-orders-xy", False),
        ("producer.override.transactional.id", "connect-orders-x-tx", True),
        ("producer.override.transactional.id", "sluice-connect-cluster-leader", False),
    ],
)
def test_group_and_transactional_ids_stay_in_the_connectors_namespace(key: str, value: str, ok: bool) -> None:
    config = {"name": "orders-x", key: value}
    if ok:
        override_policy(ALL).check_config(config)
    else:
        with pytest.raises(ConfigError, match="must be connect-orders-x") as info:
            override_policy(ALL).check_config(config)
        assert info.value.key == key


def test_a_granted_group_is_allowed() -> None:
    override_policy(ALL).check_config(
        {"name": "orders-x", "consumer.override.group.id": "legacy-orders", "sluice.scope.groups": "legacy-*"}
    )


def test_a_client_overriding_cluster_keys_inherits_no_worker_security_settings() -> None:
    from sluice.worker.execution.clients import client_config

    worker = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "worker",
        "sasl.password": "s3cret",
        "ssl.ca.pem": "X",
        "linger.ms": 7,
    }
    policy = override_policy(ALL)
    same = client_config("kafka:9092", {}, worker, {"linger.ms": 1}, policy, what="producer")
    assert same["sasl.password"] == "s3cret"
    for override in (
        {"bootstrap.servers": "evil:9092"},
        {"sasl.mechanism": "PLAIN"},
        {"security.protocol": "SASL_PLAINTEXT"},
        {"metadata.broker.list": "evil:1"},
    ):
        merged = client_config("kafka:9092", {}, worker, override, policy, what="producer")
        assert not any(k.startswith(("sasl.username", "sasl.password", "ssl.")) for k in merged), merged
        assert merged.get("security.protocol") == override.get("security.protocol")
        assert merged["linger.ms"] == 7  # tuning still inherited
