"""Secrets are masked in configs shown to users, in free text and in every log line."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest
from pydantic import SecretStr

from sluice.worker.config.masking import (
    MASK,
    SECRETS,
    SecretMaskingFilter,
    is_secret_key,
    mask_config,
    mask_text,
    register_config_secrets,
    register_secret,
)
from sluice.worker.observability.logcontext import LOG_FORMAT, ContextFilter


@pytest.fixture(autouse=True)
def _forget_secrets() -> Iterator[None]:
    SECRETS.clear()
    yield
    SECRETS.clear()


@pytest.fixture
def log_stream() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger whose handler is set up as ``configure_logging`` sets up the CLI's."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(ContextFilter())
    handler.addFilter(SecretMaskingFilter())
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    logger = logging.getLogger("tests.masking")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    yield logger, stream
    logger.removeHandler(handler)


@pytest.mark.parametrize(
    "key",
    ["password", "connection.password", "ssl.key.password", "sasl.jaas.config", "aws.secret", "api.key", "apikey",
     "basic.auth.user.info", "oauth.token", "gcp.credentials"],
)
def test_secret_key_names(key: str) -> None:
    assert is_secret_key(key)


@pytest.mark.parametrize("key", ["topic", "password.encoder", "tokens.max", "file", "connection.user"])
def test_ordinary_key_names(key: str) -> None:
    assert not is_secret_key(key)


def test_mask_config_hides_secret_keys_keeps_placeholders_and_masks_registered_tokens() -> None:
    register_secret("resolved-topic-xyz")
    config = {
        "connection.password": "hunter22",
        "db.pass": "declared-secret",
        "ssl.key.password": "${env:KEY_PASSWORD}",
        "topic": "resolved-topic-xyz",
        "url": "kafka://u:resolved-topic-xyz@h:9092",
        "batch.size": 10,
        "empty.password": "",
    }
    assert mask_config(config, {"db.pass"}) == {
        "connection.password": MASK,
        "db.pass": MASK,
        "ssl.key.password": "${env:KEY_PASSWORD}",
        # A plain key is never hidden as a whole: the same word may be a secret elsewhere.
        "topic": "resolved-topic-xyz",
        "url": f"kafka://u:{MASK}@h:9092",
        "batch.size": 10,
        "empty.password": "",
    }


def test_mask_text_hides_every_registered_secret_longest_first() -> None:
    register_secret("abcd")
    register_secret(SecretStr("abcdefgh"))
    assert mask_text("x abcdefgh y abcd z") == f"x {MASK} y {MASK} z"
    assert mask_text("nothing here") == "nothing here"


def test_short_and_boolean_values_are_not_treated_as_secrets() -> None:
    for value in ("1", "abc", "true", "FALSE", 5432, None):
        register_secret(value)
    assert mask_text("1 abc true FALSE 5432") == "1 abc true FALSE 5432"


def test_a_secret_quoted_by_repr_is_hidden_too() -> None:
    register_secret("it's\na secret")
    assert MASK in mask_text(repr({"password": "it's\na secret"}))


def test_register_config_secrets_takes_declared_and_conventional_keys() -> None:
    register_config_secrets(
        {"password": "pw-literal", "auth": "declared-one", "topic": "plain-topic", "token": "${env:T}"}, {"auth"}
    )
    assert mask_text("pw-literal declared-one plain-topic ${env:T}") == f"{MASK} {MASK} plain-topic ${{env:T}}"


def test_log_messages_and_arguments_are_masked(log_stream: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = log_stream
    register_secret("s3cr3t-pass")
    logger.info("connecting with %s to %s", "s3cr3t-pass", "db")
    logger.info("config %s", {"password": "s3cr3t-pass"})
    logger.info("no secret in this one: %d", 42)
    out = stream.getvalue()
    assert "s3cr3t-pass" not in out
    assert out.count(MASK) == 2
    assert "no secret in this one: 42" in out


def test_exception_tracebacks_are_masked(log_stream: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = log_stream
    register_secret("s3cr3t-pass")
    try:
        try:
            raise ValueError("bad password s3cr3t-pass")
        except ValueError as inner:
            raise RuntimeError("login failed") from inner
    except RuntimeError as exc:
        logger.error("Task failed: %s", exc, exc_info=exc)
        logger.exception("again")
    out = stream.getvalue()
    assert "s3cr3t-pass" not in out
    assert "ValueError: bad password [hidden]" in out
    assert "Traceback" in out


def test_stack_info_is_masked(log_stream: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = log_stream
    register_secret("stack-secret-value")
    # The stack shows this source line, and with it the secret.
    logger.info("here", stack_info=True, extra={"unused": "stack-secret-value"})
    out = stream.getvalue()
    assert "Stack (most recent call last)" in out and "stack-secret-value" not in out


def test_records_pass_untouched_when_nothing_is_registered() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "value %s", ("v",), None)
    assert SecretMaskingFilter().filter(record)
    assert record.args == ("v",) and record.msg == "value %s"


def test_config_values_hide_a_secret_only_where_it_stands_as_a_token_inside_them() -> None:
    register_secret("postgres", connector="cdc")
    shown = mask_config(
        {
            "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "database.user": "postgres",
            "connection.url": "postgresql://app:postgres@db:5432/shop",
            "database.password": "postgres",
        },
        connector="cdc",
    )
    assert shown == {
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "database.user": "postgres",  # a plain key: the user's word, even when it is also the password
        "connection.url": f"postgresql://app:{MASK}@db:5432/shop",
        "database.password": MASK,
    }
