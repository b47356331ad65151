"""Column default values in the schemas, as Debezium derives them from the catalog.

Debezium reads each column's default expression (``pg_get_expr(adbin, adrelid)``, which is what
``information_schema.columns.column_default`` shows) and, for a handful of types, turns it into
the field schema's ``default``; everything else gets no default. Its rules, reproduced here so the
schemas agree field for field:

* The type is chosen by the column's own type name (``pg_type.typname``): enums, domains, arrays,
  money, bytea, network and geometric types have no parser, so no default.
* An expression that *starts* like a function call (``nextval('t_id_seq'::regclass)``, ``now()``,
  ``(now())::date``), or is one of SQL's current date/time keywords (``CURRENT_TIMESTAMP``,
  ``CURRENT_DATE``, ``LOCALTIME``, ...), stands for a generated value: a fixed placeholder of the
  type takes its place, ``0`` for numbers, ``false``, ``''``, ``1970-01-01`` and so on.
* Otherwise the value is the text between the first pair of single quotes (``'x'::character
  varying`` → ``x``; the match is lazy, so ``'it''s'`` gives ``it``, as Debezium's does), or the
  whole expression when it has no quote (``42``, ``true``).
* An enum's default is the label of ``'label'::enum_name``, whole; any other form is none.
* ``NULL::type`` is no default; anything that does not parse as the type
  (``CURRENT_TIMESTAMP``, ``(1 + 2)``) is no default.
* The parsed value then goes through the column's ordinary conversion, so it follows the handling
  modes (a ``numeric(p,s)`` default is padded to the column's scale); a value that would be a
  struct (a ``numeric`` without scale, as ``VariableScaleDecimal``) is no default.
"""

from __future__ import annotations

import decimal
import logging
import re
import uuid
from collections.abc import Callable
from typing import Any

from sluice.connectors.source.postgres_cdc.types import ColumnType

log = logging.getLogger(__name__)

_LITERAL = re.compile(r"'(.*?)'", re.DOTALL)
_FUNCTION_CALL = re.compile(r"^\(?[A-Za-z0-9_.]+\((?:.+)?\)", re.DOTALL)
_CURRENT_DATE_TIMES = {"current_timestamp", "current_time", "current_date", "localtime", "localtimestamp"}
_INTEGER = re.compile(r"[+-]?[0-9]+")
#: What Java's ``Double.parseDouble`` reads, short of hexadecimal and type suffixes.
_FLOAT = re.compile(r"\s*[+-]?(NaN|Infinity|([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?)\s*")


def literal(expression: str, placeholder: str) -> str:
    """The literal text of a default expression, or ``placeholder`` for a function call."""
    if _FUNCTION_CALL.match(expression) or expression.lower() in _CURRENT_DATE_TIMES:
        return placeholder
    if "'" not in expression:
        if expression.startswith("NULL::"):
            raise ValueError("NULL")
        return expression
    match = _LITERAL.search(expression)
    if match is None:  # one lone quote: Debezium's matcher throws, so there is no default
        raise ValueError(f"no quoted literal in {expression!r}")
    return match.group(1)


def _integer(text: str) -> str:
    if not _INTEGER.fullmatch(text):
        raise ValueError(f"not an integer: {text!r}")
    return text


def _float(text: str) -> str:
    if not _FLOAT.fullmatch(text):
        raise ValueError(f"not a floating-point number: {text!r}")
    return text.strip()


def _boolean(text: str) -> str:
    return "t" if text.lower() == "true" else "f"


def _uuid(text: str) -> str:
    if len(text.split("-")) != 5:
        raise ValueError(f"not a UUID: {text!r}")
    return str(uuid.UUID(text))


def _same(text: str) -> str:
    return text


#: Per type name: the placeholder of a generated value, the text as the column's conversion
#: reads it (PostgreSQL's output form), and whether the expression is trimmed first.
_PARSERS: dict[str, tuple[str, Callable[[str], str], bool]] = {
    "int2": ("0", _integer, True),
    "int4": ("0", _integer, True),
    "int8": ("0", _integer, True),
    "float4": ("0.0", _float, True),
    "float8": ("0.0", _float, True),
    "numeric": ("0.0", _same, True),  # checked and scaled in :func:`_numeric`
    "bool": ("false", _boolean, True),
    "bpchar": ("", _same, False),
    "varchar": ("", _same, False),
    "text": ("", _same, False),
    "json": ("{}", _same, False),
    "jsonb": ("{}", _same, False),
    "xml": ("", _same, False),
    "uuid": ("00000000-0000-0000-0000-000000000000", _uuid, True),
    "date": ("1970-01-01", _same, True),
    "time": ("00:00:00", _same, True),
    "timestamp": ("1970-01-01", _same, True),
    "timestamptz": ("1970-01-01", _same, True),
    "interval": ("00:00:00", _same, True),
    "bit": ("00", _same, True),
    "varbit": ("0", _same, True),
}


def _numeric(text: str, typmod: int) -> str:
    value = decimal.Decimal(text.strip())
    if not value.is_finite():
        raise ValueError(f"not a finite number: {text!r}")
    scale = (typmod - 4) & 0xFFFF if typmod >= 4 else None
    exponent = value.as_tuple().exponent
    if scale is not None and isinstance(exponent, int) and -exponent < scale:
        value = value.quantize(decimal.Decimal(1).scaleb(-scale))
    return str(value)


def _enum_label(expression: str, type_name: str) -> str:
    label, cast, rest = expression.rpartition(f"::{type_name}")
    if not cast or rest or len(label) < 2 or label[0] != "'" or label[-1] != "'":
        raise ValueError(f"not a label of {type_name}: {expression!r}")
    return label[1:-1]


def column_default(expression: str | None, type_name: str, typmod: int, ctype: ColumnType, enum: bool = False) -> Any:
    """The schema default of a column of type ``type_name`` (``pg_type.typname``; ``enum``: an enum
    type) whose default is ``expression`` (``None``: none), in the column's representation (what
    ``ctype`` makes of a value), or ``None`` for no default."""
    if expression is None or (type_name not in _PARSERS and not enum):
        return None
    try:
        if type_name in _PARSERS:
            placeholder, parse, trim = _PARSERS[type_name]
            if expression.startswith("NULL::"):
                return None
            text = parse(literal(expression.strip() if trim else expression, placeholder))
        else:
            text = _enum_label(expression, type_name)
        if type_name == "numeric":
            text = _numeric(text, typmod)
        value = ctype.fn(text.encode())
        if value is not None and not isinstance(value, dict):
            ctype.schema.with_(default=value)  # raises if the value does not fit the schema
            return value
    except Exception as exc:  # noqa: BLE001 -- as in Debezium: whatever does not parse is no default
        log.debug("Column default %r of type %s has no schema default: %s", expression, type_name, exc)
    return None
