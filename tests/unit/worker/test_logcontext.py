"""The ``[connector|task-N]`` tag and the JSON line format (``log.format=json``)."""

from __future__ import annotations

import io
import logging
import threading
from collections.abc import Iterator

import orjson
import pytest

from sluice.worker.config.masking import SECRETS, SecretMaskingFilter, register_secret
from sluice.worker.observability.logcontext import (
    LOG_FORMAT,
    ContextFilter,
    JsonFormatter,
    clear_context,
    connector_context,
    current_context,
    inherit_in_new_threads,
    set_context,
)
from sluice.worker.runners.base import _TaskLibrdkafkaLog
from sluice.worker.status import ConnectorTaskId


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    SECRETS.clear()
    clear_context()
    yield
    SECRETS.clear()
    clear_context()


def _logger(formatter: logging.Formatter, name: str = "tests.logcontext") -> tuple[logging.Logger, io.StringIO]:
    """A logger whose handler is set up as ``configure_logging`` sets up the CLI's."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(ContextFilter())
    handler.addFilter(SecretMaskingFilter())
    handler.setFormatter(formatter)
    logger = logging.getLogger(name)
    logger.handlers[:] = [handler]
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    return logger, stream


def _json_lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in stream.getvalue().splitlines()]


def test_a_json_line_has_the_fields_and_names_the_task() -> None:
    logger, stream = _logger(JsonFormatter())
    set_context("orders", 2)
    logger.info("wrote %d rows", 10)
    (line,) = _json_lines(stream)
    assert line["message"] == "wrote 10 rows"
    assert line["level"] == "INFO" and line["logger"] == "tests.logcontext"
    assert line["connector"] == "orders" and line["task"] == 2
    assert line["thread"] == threading.current_thread().name
    assert str(line["ts"]).endswith("+00:00") and "T" in str(line["ts"])
    assert "exc" not in line


def test_task_is_absent_outside_a_task_and_connector_outside_a_connector() -> None:
    logger, stream = _logger(JsonFormatter())
    logger.info("worker line")
    set_context("orders")
    logger.info("connector line")
    worker, connector = _json_lines(stream)
    assert "connector" not in worker and "task" not in worker
    assert connector["connector"] == "orders" and "task" not in connector


def test_json_masks_secrets_in_the_message_and_the_traceback() -> None:
    register_secret("hunter2-password")
    logger, stream = _logger(JsonFormatter())
    try:
        raise RuntimeError("login failed with hunter2-password")
    except RuntimeError:
        logger.exception("cannot connect with %s", "hunter2-password")
    (line,) = _json_lines(stream)
    assert "hunter2" not in stream.getvalue()
    assert line["message"] == "cannot connect with [hidden]"
    assert "RuntimeError: login failed with [hidden]" in str(line["exc"])


def test_text_lines_carry_the_tag() -> None:
    logger, stream = _logger(logging.Formatter(LOG_FORMAT))
    with connector_context("orders", 0):
        logger.info("polled")
    logger.info("after")
    first, second = stream.getvalue().splitlines()
    assert "INFO [orders|task-0] polled" in first
    assert "INFO after" in second  # the block's tag is gone again


def test_connector_context_restores_the_previous_tag() -> None:
    set_context("outer", 1)
    with connector_context("inner"):
        assert current_context().connector == "inner" and current_context().task is None
    assert current_context()[:2] == ("outer", 1)


def test_threads_started_by_a_task_carry_its_tag() -> None:
    inherit_in_new_threads()
    seen: dict[str, object] = {}

    def helper() -> None:
        seen["tag"] = current_context()[:2]

    def untagged() -> None:
        seen["none"] = current_context()[:2]

    set_context("orders", 3)
    thread = threading.Thread(target=helper)
    thread.start()
    thread.join()
    clear_context()
    other = threading.Thread(target=untagged)
    other.start()
    other.join()
    assert seen == {"tag": ("orders", 3), "none": ("", None)}


def test_librdkafka_lines_of_a_task_client_carry_the_task_on_any_thread() -> None:
    logger, stream = _logger(JsonFormatter(), name="librdkafka")
    client_log = _TaskLibrdkafkaLog(ConnectorTaskId("orders", 1))
    # librdkafka may hand its lines over on a thread of its own: no tag there.
    thread = threading.Thread(target=client_log.log, args=(logging.WARNING, "%s|%s", "CONFWARN", "unknown property"))
    thread.start()
    thread.join()
    (line,) = _json_lines(stream)
    assert line["connector"] == "orders" and line["task"] == 1
    assert line["message"] == "CONFWARN|unknown property"
    logger.handlers.clear()
    logger.propagate = True
    logger.setLevel(logging.NOTSET)
