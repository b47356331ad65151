"""The Sluice connector SPI.

Everything a connector, converter or transform author needs, and nothing else: this package
imports only the standard library and pydantic (a test enforces it).
"""

from __future__ import annotations

from connectors.api.config import PluginConfig, config_problems, dotted
from connectors.api.connector import (
    Connector,
    ConnectorContext,
    SinkConnector,
    SourceConnector,
    SourceConnectorContext,
)
from connectors.api.converter import Converter, HeaderConverter
from connectors.api.errors import (
    AlreadyExistsError,
    ConfigError,
    ConnectError,
    DataError,
    NotFoundError,
    RetriableError,
)
from connectors.api.records import Headers, RecordMetadata, SinkRecord, SourceRecord, TopicPartition
from connectors.api.schema import (
    BOOLEAN_SCHEMA,
    BYTES_SCHEMA,
    FLOAT32_SCHEMA,
    FLOAT64_SCHEMA,
    INT8_SCHEMA,
    INT16_SCHEMA,
    INT32_SCHEMA,
    INT64_SCHEMA,
    OPTIONAL_BOOLEAN_SCHEMA,
    OPTIONAL_BYTES_SCHEMA,
    OPTIONAL_FLOAT32_SCHEMA,
    OPTIONAL_FLOAT64_SCHEMA,
    OPTIONAL_INT8_SCHEMA,
    OPTIONAL_INT16_SCHEMA,
    OPTIONAL_INT32_SCHEMA,
    OPTIONAL_INT64_SCHEMA,
    OPTIONAL_STRING_SCHEMA,
    STRING_SCHEMA,
    Date,
    Decimal,
    Field,
    Schema,
    SchemaAndValue,
    Time,
    Timestamp,
    Type,
    infer_schema,
    validate_value,
)
from connectors.api.task import (
    ErrantRecordReporter,
    OffsetReader,
    SinkTask,
    SinkTaskContext,
    SourceTask,
    SourceTaskContext,
    Task,
    TaskContext,
)
from connectors.api.transform import Predicate, Transformation

__all__ = [name for name in dir() if not name.startswith("_") and name != "annotations"]
