"""What a converter's bytes are (:class:`WireFormat`), declared so that the runtime and a task can agree on a fast path.

Its own module so that the records (:class:`~connectors.api.records.SinkRecordBatch.raw_format`)
and the converters (:meth:`~connectors.api.converter.Converter.wire_format`) can both name it.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["OPAQUE", "WireFormat"]


class WireFormat(NamedTuple):
    """The bytes a converter writes, as a declaration (see :meth:`~connectors.api.converter.Converter.wire_format`)."""

    #: ``"json"`` (Connect's JsonConverter format), ``"avro"`` (Confluent's wire format: a zero
    #: byte, the writer schema's registry id, the Avro body; the converter's
    #: :meth:`~connectors.api.converter.Converter.writer_schema` gives the schema of an id), ``"bytes"`` (the value is the
    #: bytes), ``"string"`` (UTF-8 text) or ``"opaque"`` (anything else: nothing may be assumed).
    kind: str
    #: For ``json``: each value is the ``{"schema": …, "payload": …}`` envelope.
    schemas: bool = False
    #: For ``json``: how decimals are written, ``"BASE64"`` (Connect's default) or ``"NUMERIC"``.
    decimal_format: str = "BASE64"
    #: For ``json`` with schemas: a null field with a schema default reads as the default
    #: (``replace.null.with.default``, Connect's default) rather than as null.
    replace_null_with_default: bool = True

    @property
    def schemaless_json(self) -> bool:
        """Whether every value is one plain JSON document (or a null)."""
        return self.kind == "json" and not self.schemas


#: What a converter that declares nothing writes.
OPAQUE = WireFormat("opaque")
