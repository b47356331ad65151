"""AvroConverter settings and the registry client's error translation (no registry needed).

The registry's answers here come from ``httpx.MockTransport`` handlers that return what a
Confluent-API registry returns for each case; ``tests/integration/test_avro_converter.py`` runs
the converter against a real one.
"""

from __future__ import annotations

import json
import logging

import httpx
import pytest

from sluice.connectors.api.errors import ConfigError, ConnectError, DataError, RetriableError
from sluice.connectors.api.schema import STRING_SCHEMA
from sluice.converters.avro import AvroConverter
from sluice.converters.schema_registry import SchemaRegistryClient, SubjectNotFound
from sluice.plugins.registry import PluginRegistry

URL = "http://127.0.0.1:1/apis/ccompat/v7"


def test_the_confluent_class_name_finds_the_converter() -> None:
    assert PluginRegistry().converter("io.confluent.connect.avro.AvroConverter", "value.converter") is AvroConverter


def test_schema_registry_url_is_required_and_checked() -> None:
    with pytest.raises(ConfigError) as missing:
        AvroConverter().configure({}, False)
    assert missing.value.key == "schema.registry.url"
    with pytest.raises(ConfigError, match="schema.registry.url.*'localhost:8081' is not an http"):
        AvroConverter().configure({"schema.registry.url": "localhost:8081"}, False)


def test_subject_name_strategies_take_confluent_class_names_and_refuse_others() -> None:
    converter = AvroConverter()
    converter.configure(
        {
            "schema.registry.url": URL,
            "value.subject.name.strategy": "io.confluent.kafka.serializers.subject.RecordNameStrategy",
        },
        False,
    )
    assert converter.config is not None and converter.config.value_subject_name_strategy == "RecordNameStrategy"
    with pytest.raises(ConfigError, match="unknown subject name strategy 'TopicStrategy'"):
        AvroConverter().configure({"schema.registry.url": URL, "key.subject.name.strategy": "TopicStrategy"}, True)


def test_user_info_credentials_are_required_when_chosen() -> None:
    with pytest.raises(ConfigError, match="USER_INFO needs basic.auth.user.info"):
        AvroConverter().configure({"schema.registry.url": URL, "basic.auth.credentials.source": "USER_INFO"}, False)


def test_unknown_settings_are_logged_and_ignored(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="sluice.converters.avro"):
        AvroConverter().configure({"schema.registry.url": URL, "schemas.enable": "false"}, False)
    assert "ignores the settings it does not know: schemas.enable" in caplog.text


def test_bytes_not_in_the_wire_format_are_refused_before_any_request() -> None:
    converter = AvroConverter()
    converter.configure({"schema.registry.url": URL}, False)
    with pytest.raises(DataError, match="Unknown magic byte.*topic 'orders'"):
        converter.to_connect_data("orders", b'{"id": 1}')
    with pytest.raises(DataError, match="Unknown magic byte"):
        converter.to_connect_data("orders", b"\x00\x00")
    assert converter.to_connect_data("orders", None).value is None
    assert converter.from_connect_data("orders", STRING_SCHEMA, None) is None


def test_a_schemaless_map_is_refused_with_what_to_do_instead() -> None:
    converter = AvroConverter()
    converter.configure({"schema.registry.url": URL}, False)
    with pytest.raises(DataError, match="needs a schema for a dict value.*schemas.enable=true"):
        converter.from_connect_data("orders", None, {"id": 1})


def _client(handler: object, urls: str = "http://sr1:8081") -> SchemaRegistryClient:
    return SchemaRegistryClient(urls, transport=httpx.MockTransport(handler))  # type: ignore[arg-type]


def test_refusals_name_the_subject_and_quote_the_registry() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/versions"):
            return httpx.Response(409, json={"error_code": 409, "message": "Schema being registered is incompatible"})
        return httpx.Response(404, json={"error_code": 40401, "message": "Subject 'orders-value' not found."})

    client = _client(handler)
    with pytest.raises(
        DataError,
        match=r"subject 'orders-value' as incompatible.*HTTP 409.*being registered is incompatible \(error code 409\)",
    ):
        client.register("orders-value", '"string"')
    with pytest.raises(SubjectNotFound, match="no subject 'orders-value'.*not found. \\(error code 40401\\)"):
        client.lookup("orders-value", '"string"')


def test_refused_credentials_fail_the_task_rather_than_skip_records() -> None:
    client = _client(lambda request: httpx.Response(401, json={"error_code": 401, "message": "Unauthorized"}))
    with pytest.raises(ConnectError, match="refused the credentials \\(HTTP 401\\)") as caught:
        client.schema(1)
    assert not isinstance(caught.value, DataError)


def test_an_unreachable_registry_is_retriable_and_the_next_url_is_tried() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.host)
        if request.url.host == "sr1":
            raise httpx.ConnectError("connection refused")
        assert request.headers["content-type"] == "application/vnd.schemaregistry.v1+json"
        return httpx.Response(200, json={"id": 42})

    client = _client(handler, "http://sr1:8081, http://sr2:8081/")
    assert client.register("t-value", '"string"') == 42
    assert client.register("t-value", '"string"') == 42  # cached: no second request
    assert client.register("u-value", '"string"') == 42  # sr2 answered, so it is asked first now
    assert seen == ["sr1", "sr2", "sr2"]

    down = _client(lambda request: httpx.Response(503, text="starting"))
    with pytest.raises(RetriableError, match="Schema Registry unreachable: http://sr1:8081: HTTP 503 starting"):
        down.schema(7)


def test_subjects_are_url_quoted_and_credentials_in_the_url_become_basic_auth() -> None:
    requests: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return httpx.Response(200, json={"id": 3})

    client = SchemaRegistryClient("http://alice:s%40cret@sr:8081", transport=httpx.MockTransport(handler))
    client.register("my topic/value", json.dumps({"type": "string"}))
    assert requests[0].url.raw_path == b"/subjects/my%20topic%2Fvalue/versions"
    assert requests[0].url.host == "sr" and requests[0].url.username == ""
    assert requests[0].headers["authorization"] == "Basic " + __import__("base64").b64encode(b"alice:s@cret").decode()
