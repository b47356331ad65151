"""Whose secret hides where: a connector's only in its own configs, messages and log lines, as
whole tokens; the worker's everywhere; short ones never in free text (issue #37, item 5)."""

from __future__ import annotations

import io
import logging
import threading
from collections.abc import Iterator

import pytest

from sluice.connectors.jdbc_common.connection import _hide
from sluice.worker.config.masking import (
    MASK,
    SECRETS,
    SecretMaskingFilter,
    mask_config,
    mask_secrets,
    mask_text,
    register_config_secrets,
    register_secret,
    scrub_secrets,
)
from sluice.worker.observability.logcontext import LOG_FORMAT, ContextFilter, connector_context, current_connector

URL = "postgresql+psycopg://postgres@127.0.0.1:29997/shop"
REFUSED = "connection.url: cannot connect to 127.0.0.1:29997: connection refused (port 29997)"


@pytest.fixture(autouse=True)
def _forget_secrets() -> Iterator[None]:
    SECRETS.clear()
    yield
    SECRETS.clear()


def test_another_connectors_password_leaves_this_connectors_values_and_messages_alone() -> None:
    register_config_secrets({"database.password": "postgres"}, connector="cdc")
    config = {"connection.user": "postgres", "connection.url": URL, "connection.password": "other-pw"}
    assert mask_config(config, {"connection.password"}, connector="jdbc") == {**config, "connection.password": MASK}
    message = f"Cannot connect to {URL} as postgres"
    assert mask_text(message, "jdbc") == message
    # In the owner's own text the password is hidden where it stands alone, not inside a word.
    assert mask_text(message, "cdc") == f"Cannot connect to postgresql+psycopg://{MASK}@127.0.0.1:29997/shop as {MASK}"


def test_the_workers_credentials_hide_in_every_connectors_text() -> None:
    register_config_secrets({"producer.sasl.jaas.config": 'PlainLoginModule required password="w0rker";'})
    register_secret("w0rker-token")
    for connector in ("a", "b", None):
        assert mask_text("sent w0rker-token", connector) == f"sent {MASK}"


def test_text_about_no_connector_hides_every_connectors_secret() -> None:
    register_secret("alpha-secret", connector="a")
    register_secret("beta-secret", connector="b")
    assert mask_text("alpha-secret beta-secret") == f"{MASK} {MASK}"
    assert mask_text("alpha-secret beta-secret", "a") == f"{MASK} beta-secret"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("postgresql+psycopg://h/db", "postgresql+psycopg://h/db"),
        ("db postgres_shop and mypostgres", "db postgres_shop and mypostgres"),
        ("user=postgres&sslmode=require", f"user={MASK}&sslmode=require"),
        ("u:postgres@h", f"u:{MASK}@h"),
        ("password='postgres'.", f"password='{MASK}'."),
        ("POSTGRES", "POSTGRES"),
    ],
)
def test_a_secret_is_a_token_only_between_non_word_characters(text: str, shown: str) -> None:
    register_secret("postgres", connector="a")
    assert mask_text(text, "a") == shown


def test_a_secret_with_punctuation_at_its_edges_and_percent_encoded_in_a_url() -> None:
    register_secret("p@ss:word!", connector="a")
    assert mask_text("login p@ss:word!x", "a") == f"login {MASK}x"  # no word boundary needed after "!"
    assert mask_text("postgresql://u:p%40ss%3Aword%21@h/db", "a") == f"postgresql://u:{MASK}@h/db"


@pytest.mark.parametrize("password", ["p", "po", "pos"])
def test_a_short_password_is_hidden_as_its_value_but_never_searched_for_in_messages(password: str) -> None:
    register_config_secrets({"connection.password": password}, connector="a")
    assert mask_text(REFUSED, "a") == REFUSED
    assert mask_text(REFUSED) == REFUSED
    assert mask_secrets(REFUSED, [password]) == REFUSED
    assert mask_config({"connection.password": password, "topic": "pos"}, connector="a") == {
        "connection.password": MASK,
        "topic": "pos",
    }


def test_a_status_trace_loses_the_connectors_secrets_as_tokens_only() -> None:
    trace = f"OperationalError: {URL}: password postgres refused"
    scrubbed = scrub_secrets(trace, {"connection.password": "postgres", "connection.user": "postgres"})
    assert scrubbed == f"OperationalError: postgresql+psycopg://{MASK}@127.0.0.1:29997/shop: password {MASK} refused"
    assert scrub_secrets(REFUSED, {"connection.password": "p"}) == REFUSED


def test_a_driver_message_hides_the_password_only_where_it_stands_alone() -> None:
    assert _hide("invalid dsn: password=p port=29997", "p") == "invalid dsn: password=**** port=29997"
    assert _hide(f"bad option in {URL}", "postgres") == "bad option in postgresql+psycopg://****@127.0.0.1:29997/shop"


def test_a_secret_registered_after_a_connector_was_shown_is_hidden_next_time() -> None:
    register_secret("first-secret", connector="a")
    assert mask_text("second-secret", "a") == "second-secret"
    register_secret("second-secret", connector="a")
    assert mask_text("first-secret second-secret", "a") == f"{MASK} {MASK}"


def test_registering_from_many_threads_loses_nothing() -> None:
    def register(n: int) -> None:
        for i in range(50):
            register_secret(f"secret-{n}-{i}", connector=f"c{n % 3}")

    threads = [threading.Thread(target=register, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(mask_text(f"secret-{n}-{i}") == MASK for n in range(6) for i in range(50))
    assert mask_text("secret-1-7", "c1") == MASK and mask_text("secret-1-7", "c2") == "secret-1-7"


@pytest.fixture
def tagged_log() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger whose handler masks as ``configure_logging`` sets up the CLI's: by the line's connector."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(ContextFilter())
    handler.addFilter(SecretMaskingFilter(owner=current_connector))
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    logger = logging.getLogger("tests.masking.scopes")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    yield logger, stream
    logger.removeHandler(handler)


def test_log_lines_hide_the_secrets_of_the_connector_they_are_tagged_with(
    tagged_log: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = tagged_log
    register_secret("postgres", connector="cdc")
    with connector_context("jdbc", 0):
        logger.warning("Cannot connect to %s as %s", URL, "postgres")
    with connector_context("cdc", 0):
        logger.warning("login as %s failed", "postgres")
    logger.warning("untagged: postgres")
    lines = stream.getvalue().splitlines()
    assert lines[0].endswith(f"[jdbc|task-0] Cannot connect to {URL} as postgres (tests.masking.scopes)")
    assert f"[cdc|task-0] login as {MASK} failed" in lines[1]
    assert f"untagged: {MASK}" in lines[2]
