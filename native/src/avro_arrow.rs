//! Confluent-wire-format Avro values of one writer schema → Arrow column buffers.
//!
//! `read_avro_arrow` decodes a batch of values (each a zero byte, a 4-byte schema id, then the
//! Avro binary body of a record of primitive fields) column by column, with no Python object per
//! record, and returns the Arrow buffers that `converters/avro_arrow.py` wraps with
//! `pyarrow.Array.from_buffers` without copying. The GIL is released while it decodes.
//!
//! The field plan comes from Python, which derives it from the writer's schema and the Connect
//! schema the ordinary decoder gives it; this side only reads bytes and checks values. It refuses
//! the whole batch (returns `None`, and the caller decodes it the ordinary way) whenever a value
//! would not come out of the ordinary path as the same Arrow value: a value that is not in the
//! wire format or carries another schema id, a body that is truncated or has bytes after the
//! record, a union branch other than the two of a null union, a varint longer than a long, an int
//! beyond its Connect type's range, text that is not UTF-8, a boolean byte other than 0 or 1, an
//! enum index beyond its symbols, a date, time or timestamp Python's `datetime` cannot hold (or a
//! time beyond one day, which Connect refuses), and a decimal whose unscaled value has more digits
//! than its precision or than Python's default decimal context keeps (28: beyond that the
//! ordinary path rounds).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use crate::avro::{parse_null, Null};
use crate::{as_bytes, pack_bits};

#[path = "avro_json.rs"]
pub(crate) mod json;

/// Why a batch is refused; never surfaced (the ordinary path names the problem).
struct Refused;

type Read<T> = Result<T, Refused>;

/// The days from 1970-01-01 to 0001-01-01 and to 9999-12-31: the dates Python's `date` holds.
const DAYS: (i64, i64) = (-719_162, 2_932_896);
/// The milliseconds from the epoch to 0001-01-01T00:00 and to 9999-12-31T23:59:59.999 (UTC).
const MILLIS: (i64, i64) = (-62_135_596_800_000, 253_402_300_799_999);
/// Python's default decimal context keeps 28 significant digits; `scaleb` rounds beyond them.
const PYTHON_DECIMAL_DIGITS: u32 = 28;

/// How one field's present values are read and stored.
enum Decode {
    /// An Avro int or long (zigzag varint) within `lo..=hi`, stored in `width` bytes.
    Int {
        lo: i64,
        hi: i64,
        width: u8,
    },
    Float,
    Double,
    Boolean,
    /// UTF-8 text with its length.
    String,
    /// Bytes with their length.
    Bytes,
    /// Exactly this many bytes.
    Fixed(usize),
    /// An index into the enum's symbols, stored as the symbol's text.
    Enum(Vec<Vec<u8>>),
    /// Big-endian two's-complement bytes (with their length, or `fixed` many) whose value is
    /// below `limit` in magnitude, stored as a little-endian i128.
    Decimal {
        fixed: Option<usize>,
        limit: i128,
    },
}

enum Values {
    I8(Vec<i8>),
    I16(Vec<i16>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Bool(Vec<bool>),
    Binary { offsets: Vec<i32>, data: Vec<u8> },
    Dec(Vec<i128>),
}

struct Column {
    decode: Decode,
    null: Null,
    values: Values,
    valid: Vec<bool>,
    nulls: usize,
}

impl Column {
    fn new(decode: Decode, null: Null, rows: usize) -> Self {
        let values = match &decode {
            Decode::Int { width: 1, .. } => Values::I8(Vec::with_capacity(rows)),
            Decode::Int { width: 2, .. } => Values::I16(Vec::with_capacity(rows)),
            Decode::Int { width: 4, .. } => Values::I32(Vec::with_capacity(rows)),
            Decode::Int { .. } => Values::I64(Vec::with_capacity(rows)),
            Decode::Float => Values::F32(Vec::with_capacity(rows)),
            Decode::Double => Values::F64(Vec::with_capacity(rows)),
            Decode::Boolean => Values::Bool(Vec::with_capacity(rows)),
            Decode::String | Decode::Bytes | Decode::Fixed(_) | Decode::Enum(_) => {
                let mut offsets = Vec::with_capacity(rows + 1);
                offsets.push(0);
                Values::Binary {
                    offsets,
                    data: Vec::new(),
                }
            }
            Decode::Decimal { .. } => Values::Dec(Vec::with_capacity(rows)),
        };
        Column {
            decode,
            null,
            values,
            valid: Vec::with_capacity(rows),
            nulls: 0,
        }
    }

    fn push_null(&mut self) {
        match &mut self.values {
            Values::I8(v) => v.push(0),
            Values::I16(v) => v.push(0),
            Values::I32(v) => v.push(0),
            Values::I64(v) => v.push(0),
            Values::F32(v) => v.push(0.0),
            Values::F64(v) => v.push(0.0),
            Values::Bool(v) => v.push(false),
            Values::Binary { offsets, .. } => offsets.push(offsets[offsets.len() - 1]),
            Values::Dec(v) => v.push(0),
        }
        self.valid.push(false);
        self.nulls += 1;
    }

    /// Reads one value (its union branch first) and appends it.
    fn read(&mut self, input: &mut Input) -> Read<()> {
        if !present(self.null, input)? {
            self.push_null();
            return Ok(());
        }
        let value = self.decode.read(input)?;
        // The decoder's range checks keep every cast below exact.
        match (value, &mut self.values) {
            (Value::Int(n), Values::I8(v)) => v.push(n as i8),
            (Value::Int(n), Values::I16(v)) => v.push(n as i16),
            (Value::Int(n), Values::I32(v)) => v.push(n as i32),
            (Value::Int(n), Values::I64(v)) => v.push(n),
            // Through a double and back, as Python reads it and pyarrow stores it (a signalling
            // NaN comes out quiet both ways).
            (Value::F32(x), Values::F32(v)) => v.push(f64::from(x) as f32),
            (Value::F64(x), Values::F64(v)) => v.push(x),
            (Value::Bool(b), Values::Bool(v)) => v.push(b),
            (Value::Text(bytes) | Value::Binary(bytes), Values::Binary { offsets, data }) => {
                data.extend_from_slice(bytes);
                offsets.push(i32::try_from(data.len()).map_err(|_| Refused)?);
            }
            (Value::Symbol(index), Values::Binary { offsets, data }) => {
                let Decode::Enum(symbols) = &self.decode else {
                    return Err(Refused);
                };
                data.extend_from_slice(&symbols[index]);
                offsets.push(i32::try_from(data.len()).map_err(|_| Refused)?);
            }
            (Value::Dec(n), Values::Dec(v)) => v.push(n),
            _ => return Err(Refused),
        }
        self.valid.push(true);
        Ok(())
    }
}

/// Whether the next value is present: its union branch for an optional field.
fn present(null: Null, input: &mut Input) -> Read<bool> {
    Ok(match null {
        Null::No => true,
        Null::First => input.branch()? == 1,
        Null::Second => input.branch()? == 0,
    })
}

/// One present value as read and checked.
enum Value<'a> {
    Int(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    /// UTF-8 text.
    Text(&'a [u8]),
    Binary(&'a [u8]),
    /// An index into the enum's symbols (checked).
    Symbol(usize),
    Dec(i128),
}

impl Decode {
    fn read<'a>(&self, input: &mut Input<'a>) -> Read<Value<'a>> {
        Ok(match self {
            Decode::Int { lo, hi, .. } => {
                let n = input.long()?;
                if n < *lo || n > *hi {
                    return Err(Refused);
                }
                Value::Int(n)
            }
            Decode::Float => {
                let raw: [u8; 4] = input.take(4)?.try_into().map_err(|_| Refused)?;
                Value::F32(f32::from_le_bytes(raw))
            }
            Decode::Double => {
                let raw: [u8; 8] = input.take(8)?.try_into().map_err(|_| Refused)?;
                Value::F64(f64::from_le_bytes(raw))
            }
            Decode::Boolean => match input.take(1)?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                _ => return Err(Refused),
            },
            Decode::String => {
                let len = input.length()?;
                let text = input.take(len)?;
                if !text.is_ascii() && std::str::from_utf8(text).is_err() {
                    return Err(Refused);
                }
                Value::Text(text)
            }
            Decode::Bytes => {
                let len = input.length()?;
                Value::Binary(input.take(len)?)
            }
            Decode::Fixed(size) => Value::Binary(input.take(*size)?),
            Decode::Enum(symbols) => {
                let index = usize::try_from(input.long()?).map_err(|_| Refused)?;
                if index >= symbols.len() {
                    return Err(Refused);
                }
                Value::Symbol(index)
            }
            Decode::Decimal { fixed, limit } => {
                let len = match fixed {
                    Some(size) => *size,
                    None => input.length()?,
                };
                let n = big_endian_i128(input.take(len)?)?;
                if n >= *limit || n <= -*limit {
                    return Err(Refused);
                }
                Value::Dec(n)
            }
        })
    }
}

/// Two's-complement big-endian bytes as an i128 (empty is 0, as Python's `int.from_bytes` reads
/// it); longer than 16 bytes only with sign-extension bytes in front.
fn big_endian_i128(bytes: &[u8]) -> Read<i128> {
    let Some(&first) = bytes.first() else {
        return Ok(0);
    };
    let fill = if first & 0x80 != 0 { 0xff } else { 0x00 };
    let keep = bytes.len().min(16);
    let (head, tail) = bytes.split_at(bytes.len() - keep);
    if head.iter().any(|&b| b != fill)
        || (!head.is_empty() && (tail[0] & 0x80 != 0) != (fill == 0xff))
    {
        return Err(Refused);
    }
    let mut buf = [fill; 16];
    buf[16 - keep..].copy_from_slice(tail);
    Ok(i128::from_be_bytes(buf))
}

struct Input<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Input<'a> {
    /// A zigzag varint of at most 64 bits.
    fn long(&mut self) -> Read<i64> {
        let mut n: u64 = 0;
        let mut shift = 0u32;
        loop {
            let byte = *self.data.get(self.at).ok_or(Refused)?;
            self.at += 1;
            if shift >= 64 || (shift == 63 && byte > 1) {
                return Err(Refused);
            }
            n |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                break;
            }
            shift += 7;
        }
        Ok(((n >> 1) as i64) ^ -((n & 1) as i64))
    }

    /// The branch of a two-branch union: 0 or 1.
    fn branch(&mut self) -> Read<i64> {
        match self.long()? {
            b @ (0 | 1) => Ok(b),
            _ => Err(Refused),
        }
    }

    fn length(&mut self) -> Read<usize> {
        usize::try_from(self.long()?).map_err(|_| Refused)
    }

    fn take(&mut self, len: usize) -> Read<&'a [u8]> {
        let end = self.at.checked_add(len).ok_or(Refused)?;
        let slice = self.data.get(self.at..end).ok_or(Refused)?;
        self.at = end;
        Ok(slice)
    }
}

/// Raw pointers to the batch's bytes values, read while the GIL is released; the caller holds
/// the owning references until decoding is done, and bytes objects are immutable.
struct Raws(Vec<Option<(*const u8, usize)>>);

// SAFETY: see `Raws`: the memory outlives the decoding and nobody writes to it.
unsafe impl Send for Raws {}

/// The Avro body of one value: after the magic byte and a schema id, the same for the whole batch.
fn body<'a>(raw: &'a [u8], id: &mut Option<[u8; 4]>) -> Read<Input<'a>> {
    if raw.len() < 5 || raw[0] != 0 {
        return Err(Refused);
    }
    let this: [u8; 4] = raw[1..5].try_into().map_err(|_| Refused)?;
    match id {
        None => *id = Some(this),
        Some(first) if *first == this => {}
        Some(_) => return Err(Refused),
    }
    Ok(Input { data: raw, at: 5 })
}

fn decode_batch(raws: &Raws, columns: &mut [Column]) -> Read<()> {
    let mut id = None;
    for &raw in &raws.0 {
        let (ptr, len) = raw.ok_or(Refused)?;
        // SAFETY: see `Raws`.
        let raw = unsafe { std::slice::from_raw_parts(ptr, len) };
        let mut input = body(raw, &mut id)?;
        for column in columns.iter_mut() {
            column.read(&mut input)?;
        }
        if input.at != raw.len() {
            return Err(Refused);
        }
    }
    Ok(())
}

/// A column's Arrow buffers: (validity or None, values, offsets or None).
type ColumnBuffers<'py> = (
    Option<Bound<'py, PyBytes>>,
    Bound<'py, PyBytes>,
    Option<Bound<'py, PyBytes>>,
);

fn buffers<'py>(py: Python<'py>, column: &Column) -> ColumnBuffers<'py> {
    let validity = (column.nulls > 0).then(|| PyBytes::new(py, &pack_bits(&column.valid)));
    let (values, offsets) = match &column.values {
        Values::I8(v) => (PyBytes::new(py, as_bytes(v)), None),
        Values::I16(v) => (PyBytes::new(py, as_bytes(v)), None),
        Values::I32(v) => (PyBytes::new(py, as_bytes(v)), None),
        Values::I64(v) => (PyBytes::new(py, as_bytes(v)), None),
        Values::F32(v) => (PyBytes::new(py, as_bytes(v)), None),
        Values::F64(v) => (PyBytes::new(py, as_bytes(v)), None),
        Values::Bool(v) => (PyBytes::new(py, &pack_bits(v)), None),
        Values::Binary { offsets, data } => (
            PyBytes::new(py, data),
            Some(PyBytes::new(py, as_bytes(offsets))),
        ),
        Values::Dec(v) => (PyBytes::new(py, as_bytes(v)), None),
    };
    (validity, values, offsets)
}

/// One field of the plan: (kind, null, size, precision, symbols); see `read_avro_arrow`.
type FieldPlan = (String, String, i64, u32, Vec<Vec<u8>>);

fn decode_of(kind: &str, size: i64, precision: u32, symbols: Vec<Vec<u8>>) -> PyResult<Decode> {
    let int = |lo: i64, hi: i64, width: u8| Decode::Int { lo, hi, width };
    let fixed = if size >= 0 {
        Some(usize::try_from(size).map_err(|_| PyValueError::new_err("fixed size too large"))?)
    } else {
        None
    };
    Ok(match kind {
        "int8" => int(i64::from(i8::MIN), i64::from(i8::MAX), 1),
        "int16" => int(i64::from(i16::MIN), i64::from(i16::MAX), 2),
        "int32" => int(i64::from(i32::MIN), i64::from(i32::MAX), 4),
        "int64" => int(i64::MIN, i64::MAX, 8),
        "date" => int(DAYS.0, DAYS.1, 4),
        "time-millis" => int(0, 86_399_999, 4),
        "timestamp-millis" => int(MILLIS.0, MILLIS.1, 8),
        "float" => Decode::Float,
        "double" => Decode::Double,
        "boolean" => Decode::Boolean,
        "string" => Decode::String,
        "bytes" => Decode::Bytes,
        "fixed" => Decode::Fixed(fixed.ok_or_else(|| PyValueError::new_err("fixed needs a size"))?),
        "enum" => Decode::Enum(symbols),
        "decimal" => {
            if !(1..=38).contains(&precision) {
                return Err(PyValueError::new_err("decimal precision must be 1 to 38"));
            }
            Decode::Decimal {
                fixed,
                limit: 10i128.pow(precision.min(PYTHON_DECIMAL_DIGITS)),
            }
        }
        other => {
            return Err(PyValueError::new_err(format!(
                "unknown field kind {other:?}"
            )))
        }
    })
}

/// One field of a JSON document: its decoding, its key (JSON text) and how its value is written.
struct JsonField {
    decode: Decode,
    null: Null,
    key: Vec<u8>,
    style: json::Style,
}

/// Each value's JSON document appended to one buffer: (buffer, each document's span or `None`
/// for a tombstone).
type Documents = (Vec<u8>, Vec<Option<(usize, usize)>>);

fn write_documents(raws: &Raws, fields: &[JsonField]) -> Read<Documents> {
    let mut out = Vec::new();
    let mut spans = Vec::with_capacity(raws.0.len());
    let mut id = None;
    for &raw in &raws.0 {
        let Some((ptr, len)) = raw else {
            spans.push(None);
            continue;
        };
        // SAFETY: see `Raws`.
        let raw = unsafe { std::slice::from_raw_parts(ptr, len) };
        let mut input = body(raw, &mut id)?;
        let start = out.len();
        out.push(b'{');
        for (i, field) in fields.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(&field.key);
            out.push(b':');
            if present(field.null, &mut input)? {
                let value = field.decode.read(&mut input)?;
                json::put_value(&mut out, field.style, &value, &field.decode);
            } else {
                out.extend_from_slice(b"null");
            }
        }
        out.push(b'}');
        if input.at != raw.len() {
            return Err(Refused);
        }
        spans.push(Some((start, out.len())));
    }
    Ok((out, spans))
}

/// Decode `raws` (a list of bytes, Confluent's wire format, one writer schema) into Arrow buffers,
/// or with `json_keys` into JSON documents.
///
/// `fields`: one `(kind, null, size, precision, symbols)` per field in the writer's order; kind
/// one of `int8`, `int16`, `int32`, `int64`, `date`, `time-millis`, `timestamp-millis` (Avro int
/// or long, checked against the range and stored at the width they name: date and time-millis
/// as int32, timestamp-millis as int64), `float`, `double`, `boolean`, `string`, `bytes`, `fixed`
/// (`size` bytes), `enum` (`symbols`), `decimal` (with its `precision`, on `size` fixed bytes or
/// on bytes when `size` is negative); null one of `no`, `first` (`["null", T]`), `second`.
///
/// Returns `(rows, [(validity, values, offsets), ...])`, one per field: values as Arrow lays
/// them out (bit-packed booleans, little-endian numbers, i128 decimals, string and binary data
/// with int32 offsets), validity `None` without nulls; or `None` for a batch it refuses (see
/// the module docs). The GIL is released while decoding.
///
/// With `json_keys` (one `(key as JSON text, decimal scale)` per field) it returns instead a list
/// with each value's JSON document (`bytes`; see `avro_json.rs`), `None` for a `None` value (a
/// tombstone), or `None` for a batch it refuses.
#[pyfunction]
#[pyo3(signature = (raws, fields, json_keys=None))]
pub fn read_avro_arrow<'py>(
    py: Python<'py>,
    raws: &Bound<'py, PyList>,
    fields: Vec<FieldPlan>,
    json_keys: Option<Vec<(Vec<u8>, u32)>>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let rows = raws.len();
    let mut plan = Vec::with_capacity(fields.len());
    for (kind, null, size, precision, symbols) in fields {
        plan.push((
            kind.clone(),
            parse_null(&null)?,
            decode_of(&kind, size, precision, symbols)?,
        ));
    }
    let mut owned: Vec<Option<Bound<'py, PyBytes>>> = Vec::with_capacity(rows);
    for item in raws.iter() {
        if json_keys.is_some() && item.is_none() {
            owned.push(None);
            continue;
        }
        match item.downcast_into::<PyBytes>() {
            Ok(bytes) => owned.push(Some(bytes)),
            Err(_) => return Ok(None), // a tombstone, or not bytes
        }
    }
    let pointers = Raws(
        owned
            .iter()
            .map(|b| {
                b.as_ref()
                    .map(|b| (b.as_bytes().as_ptr(), b.as_bytes().len()))
            })
            .collect(),
    );
    if let Some(keys) = json_keys {
        if keys.len() != plan.len() {
            return Err(PyValueError::new_err("one JSON key per field"));
        }
        let fields: Vec<JsonField> = plan
            .into_iter()
            .zip(keys)
            .map(|((kind, null, decode), (key, scale))| JsonField {
                decode,
                null,
                key,
                style: json::style_of(&kind, scale),
            })
            .collect();
        let written = py.allow_threads(move || write_documents(&pointers, &fields));
        drop(owned);
        let Ok((data, spans)) = written else {
            return Ok(None);
        };
        let list = PyList::empty(py);
        for span in spans {
            match span {
                Some((start, end)) => list.append(PyBytes::new(py, &data[start..end]))?,
                None => list.append(py.None())?,
            }
        }
        return Ok(Some(list.into_any()));
    }
    let columns = plan
        .into_iter()
        .map(|(_, null, decode)| Column::new(decode, null, rows))
        .collect();
    let decoded = py.allow_threads(move || {
        let mut columns: Vec<Column> = columns;
        decode_batch(&pointers, &mut columns).map(|()| columns)
    });
    drop(owned);
    let Ok(columns) = decoded else {
        return Ok(None);
    };
    let buffers: Vec<ColumnBuffers<'py>> = columns.iter().map(|c| buffers(py, c)).collect();
    Ok(Some((rows, buffers).into_pyobject(py)?.into_any()))
}
