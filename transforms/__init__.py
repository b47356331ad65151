"""Sluice's built-in single message transforms and predicates: Kafka Connect's set plus the CDC unwrap.

Every class carries Connect's (or Debezium's) class names in ``aliases``, so configs written for
Connect (``org.apache.kafka.connect.transforms.InsertField$Value``) work unchanged. The runtime
finds them through the ``sluice.transforms`` and ``sluice.predicates`` entry points; the two dicts
below are the same name → class mapping for code and tests that want it without discovery.
"""

from __future__ import annotations

from sluice.connectors.api.transform import Predicate, Transformation
from sluice.transforms.cast import Cast, CastKey, CastValue
from sluice.transforms.field import (
    ExtractField,
    ExtractFieldKey,
    ExtractFieldValue,
    HoistField,
    HoistFieldKey,
    HoistFieldValue,
    InsertField,
    InsertFieldKey,
    InsertFieldValue,
    MaskField,
    MaskFieldKey,
    MaskFieldValue,
    ReplaceField,
    ReplaceFieldKey,
    ReplaceFieldValue,
    ValueToKey,
)
from sluice.transforms.filter import Filter
from sluice.transforms.flatten import Flatten, FlattenKey, FlattenValue
from sluice.transforms.headers import DropHeaders, HeaderFrom, HeaderFromKey, HeaderFromValue, InsertHeader
from sluice.transforms.java_time import JavaDateFormat
from sluice.transforms.metadata import SetSchemaMetadata, SetSchemaMetadataKey, SetSchemaMetadataValue
from sluice.transforms.outbox import EventRouter
from sluice.transforms.predicates import HasHeaderKey, RecordIsTombstone, TopicNameMatches
from sluice.transforms.routing import RegexRouter, TimestampRouter
from sluice.transforms.timestamp import TimestampConverter, TimestampConverterKey, TimestampConverterValue
from sluice.transforms.unwrap import ExtractNewRecordState

#: Entry-point name → transform class (only concrete classes; ``Cast`` itself is abstract over key/value).
BUILTIN_TRANSFORMS: dict[str, type[Transformation]] = {
    cls.__name__: cls
    for cls in (
        CastKey,
        CastValue,
        DropHeaders,
        EventRouter,
        ExtractFieldKey,
        ExtractFieldValue,
        ExtractNewRecordState,
        Filter,
        FlattenKey,
        FlattenValue,
        HeaderFromKey,
        HeaderFromValue,
        HoistFieldKey,
        HoistFieldValue,
        InsertFieldKey,
        InsertFieldValue,
        InsertHeader,
        MaskFieldKey,
        MaskFieldValue,
        RegexRouter,
        ReplaceFieldKey,
        ReplaceFieldValue,
        SetSchemaMetadataKey,
        SetSchemaMetadataValue,
        TimestampConverterKey,
        TimestampConverterValue,
        TimestampRouter,
        ValueToKey,
    )
}

#: Entry-point name → predicate class.
BUILTIN_PREDICATES: dict[str, type[Predicate]] = {
    cls.__name__: cls for cls in (HasHeaderKey, RecordIsTombstone, TopicNameMatches)
}

__all__ = [
    "BUILTIN_PREDICATES",
    "BUILTIN_TRANSFORMS",
    "Cast",
    "CastKey",
    "CastValue",
    "DropHeaders",
    "EventRouter",
    "ExtractField",
    "ExtractFieldKey",
    "ExtractFieldValue",
    "ExtractNewRecordState",
    "Filter",
    "Flatten",
    "FlattenKey",
    "FlattenValue",
    "HasHeaderKey",
    "HeaderFrom",
    "HeaderFromKey",
    "HeaderFromValue",
    "HoistField",
    "HoistFieldKey",
    "HoistFieldValue",
    "InsertField",
    "InsertFieldKey",
    "InsertFieldValue",
    "InsertHeader",
    "JavaDateFormat",
    "MaskField",
    "MaskFieldKey",
    "MaskFieldValue",
    "RecordIsTombstone",
    "RegexRouter",
    "ReplaceField",
    "ReplaceFieldKey",
    "ReplaceFieldValue",
    "SetSchemaMetadata",
    "SetSchemaMetadataKey",
    "SetSchemaMetadataValue",
    "TimestampConverter",
    "TimestampConverterKey",
    "TimestampConverterValue",
    "TimestampRouter",
    "TopicNameMatches",
    "ValueToKey",
]
