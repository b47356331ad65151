from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from sluice.connectors.api import ConfigError
from sluice.worker.client_policy import (
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


@pytest.mark.parametrize("key", ["linger.ms", "acks", "compression.type", "security.protocol", "sasl.mechanism", "ssl.ca.pem"])
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
    assert override_policy({}).name == "All"
    policy = override_policy({"connector.client.config.override.policy": "org.apache.kafka.connect.connector.policy.NoneConnectorClientConfigOverridePolicy"})
    with pytest.raises(ConfigError, match="None forbids") as info:
        policy.check_config({"producer.override.linger.ms": "5"})
    assert info.value.key == "producer.override.linger.ms"

    principal = override_policy({"connector.client.config.override.policy": "Principal"})
    principal.check_config({"consumer.override.security.protocol": "SASL_SSL"})
    with pytest.raises(ConfigError, match="allows only"):
        principal.check_config({"consumer.override.fetch.min.bytes": "1"})


def test_the_deny_list_holds_under_all_and_under_an_allowlist_that_names_the_key() -> None:
    with pytest.raises(ConfigError) as info:
        override_policy({}).check_config({"admin.override.plugin.library.paths": "/tmp/x.so"})
    assert info.value.key == "admin.override.plugin.library.paths"
    assert "loads code" in str(info.value)
    with pytest.raises(ConfigError, match="no connector may set") as info:
        override_policy({"connector.client.config.override.policy": "Allowlist", "connector.client.config.override.allowlist": "linger.ms,ssl.ca.location"})
    assert info.value.key == "connector.client.config.override.allowlist"


def test_allowlist() -> None:
    policy = override_policy({"connector.client.config.override.policy": "Allowlist", "connector.client.config.override.allowlist": " linger.ms , acks"})
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
