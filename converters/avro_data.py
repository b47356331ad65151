"""Connect schemas and values ↔ Avro schemas and datums, as Confluent's ``AvroData`` maps them.

The Avro schema a Connect schema becomes is the one Confluent's ``AvroConverter`` registers, so a
subject shared with Java workers keeps one history and consumers written against those schemas
read Sluice's records unchanged:

* ``int8``/``int16`` are Avro ``int`` with ``"connect.type"``; ``int32``, ``int64``, ``float32``,
  ``float64``, ``boolean``, ``string``, ``bytes`` are their Avro namesakes.
* Decimal is ``bytes`` with ``logicalType: decimal``, its scale, and precision from the
  ``connect.decimal.precision`` parameter (64 without it); Date is ``int``/``date``, Time
  ``int``/``time-millis``, Timestamp ``long``/``timestamp-millis``.
* A struct is a record named after the schema (``a.b.C`` → namespace ``a.b``, name ``C``); an
  unnamed one is ``io.confluent.connect.avro.ConnectDefault`` (then ``ConnectDefault2``, … for
  further distinct unnamed structs in the same schema). A map with non-string keys is an array of
  ``MapEntry`` records with ``key`` and ``value``.
* An optional schema is a union with ``null`` first, or second when it has a default; an optional
  field defaults to ``null``.
* With ``connect.meta.data`` (the default), ``connect.name``, ``connect.version``, ``connect.doc``,
  ``connect.parameters`` and ``connect.default`` carry what Avro has no place for, so reading
  gives back the Connect schema that was written.

Reading accepts any Avro schema: enums become strings (their symbols in parameters), ``fixed``
becomes bytes, ``null``-plus-one unions become optional schemas and other unions become
``io.confluent.connect.avro.Union`` structs with one field per branch.

Logical values are converted by Connect's own rules (:mod:`sluice.connectors.api.schema`), and the Avro
schema handed to fastavro has its logical types stripped: the bytes are the same, and fastavro
then neither second-guesses nor converts them.
"""

from __future__ import annotations

from typing import Any

from sluice.connectors.api.schema import Schema
from sluice.converters.avro_decode import Decoder, ToConnect, native_read_plan
from sluice.converters.avro_encode import Encoder, encoder, native_plan
from sluice.converters.avro_schema import (
    AVRO_NAMESPACE,
    DEFAULT_SCHEMA_NAME,
    UNION_NAME,
    ToAvro,
    scrub_name,
    strip_logical_types,
)

__all__ = [
    "AVRO_NAMESPACE",
    "AvroData",
    "DEFAULT_SCHEMA_NAME",
    "Decoder",
    "Encoder",
    "UNION_NAME",
    "encoder",
    "native_plan",
    "native_read_plan",
    "scrub_name",
    "strip_logical_types",
]


class AvroData:
    """Converts schemas and values between Connect and Avro with Confluent's conventions.

    ``connect_meta_data`` writes (and reads) the ``connect.*`` attributes; ``scrub_invalid_names``
    replaces characters Avro refuses in record and field names; ``enhanced_schema_support`` writes
    strings that came from an Avro enum back as that enum.
    """

    def __init__(
        self,
        *,
        connect_meta_data: bool = True,
        scrub_invalid_names: bool = False,
        enhanced_schema_support: bool = False,
    ) -> None:
        self.connect_meta_data = connect_meta_data
        self.scrub_invalid_names = scrub_invalid_names
        self.enhanced_schema_support = enhanced_schema_support

    def avro_schema(self, schema: Schema) -> Any:
        """The Avro schema (as JSON data) that ``schema`` is written with."""
        return ToAvro(self.connect_meta_data, self.scrub_invalid_names, self.enhanced_schema_support).schema(schema)

    def encoder(self, schema: Schema) -> Encoder:
        """A function from a Connect value of ``schema`` to its Avro datum; raises :class:`DataError`."""
        return encoder(schema, scrub=self.scrub_invalid_names)

    def connect_schema(self, avro: Any) -> tuple[Schema, Decoder | None]:
        """The Connect schema an Avro schema (JSON data) reads as, and a datum → value function
        (``None`` when datums already are Connect values)."""
        return ToConnect(self.connect_meta_data).convert(avro, None)
