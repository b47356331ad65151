//! The row images of a MySQL/MariaDB binlog rows event → the values of Debezium's `before`/`after`.
//!
//! A `BinlogRowsDecoder` is built per captured table and table map from what the Python side
//! knows: each table-map column's binlog type and metadata (lengths, precision and scale,
//! fractional digits, ENUM/SET labels) and, for each captured column in table order, its name,
//! the table-map column it reads and the conversion its Connect schema needs. `decode` takes the
//! body of a WRITE/UPDATE/DELETE_ROWS event (v1 or v2: the header, the extra data and the
//! columns-present bitmaps are parsed by `mysql-replication`, which hands over the rest) and
//! returns every row at once as dicts: the very values `Table.row` builds from the library's
//! decoding, including its quirks (a zero or invalid date is null, then a required column's
//! fallback; an empty SET is `""`; YEAR is the stored byte plus 1900), but a negative TIME with a
//! fraction is read as the server wrote it (the Python path corrects the library's misreading).
//!
//! Anything it does not read the same way (invalid UTF-8, an ENUM index past the labels, an
//! impossible date, a BIT value wider than its column, a body that ends inside a row) raises
//! `ValueError` before anything is returned, and the caller decodes the event the Python way,
//! which is the one place that decides what such an event becomes. The tests compare both paths.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyList, PyString, PyTuple};

use crate::binlog_values::{
    days_from_civil, decimal_text, float32, fsp_micros, time2_micros, valid_date, zoned, Cursor,
    Failure,
};

// The binlog's column types (`enum_field_types`).
const TINY: u8 = 1;
const SHORT: u8 = 2;
const LONG: u8 = 3;
const FLOAT: u8 = 4;
const DOUBLE: u8 = 5;
const TIMESTAMP: u8 = 7;
const LONGLONG: u8 = 8;
const INT24: u8 = 9;
const DATE: u8 = 10;
const TIME: u8 = 11;
const YEAR: u8 = 13;
const VARCHAR: u8 = 15;
const BIT: u8 = 16;
const TIMESTAMP2: u8 = 17;
const DATETIME2: u8 = 18;
const TIME2: u8 = 19;
const JSON: u8 = 245;
const NEWDECIMAL: u8 = 246;
const ENUM: u8 = 247;
const SET: u8 = 248;
const BLOB: u8 = 252;
const STRING: u8 = 254;
const GEOMETRY: u8 = 255;

/// What a captured column's value becomes (the Python path's conversion).
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// Integers and YEAR as read.
    Int,
    /// BIGINT UNSIGNED as Java's long (wraps above 2^63-1).
    ULong,
    /// BIGINT UNSIGNED as `decimal.Decimal` (`bigint.unsigned.handling.mode=precise`).
    DecimalInt,
    /// FLOAT as the shortest of 6-9 significant digits that reads back as the same float32.
    F32,
    /// FLOAT (widened) or DOUBLE as read.
    Float,
    /// DECIMAL as `decimal.Decimal`.
    Decimal,
    /// A character string (UTF-8).
    Text,
    Bytes,
    /// BINARY(n): right-padded with zero bytes to n.
    Pad(usize),
    Enum,
    Set,
    /// BIT(1) as a boolean.
    Bit1,
    /// BIT(n) as n little-endian bytes.
    Bits(usize),
    /// Days since the epoch.
    Date,
    /// Microseconds (may be negative).
    Time,
    /// DATETIME as milliseconds / microseconds since the epoch.
    Millis,
    Micros,
    /// TIMESTAMP as ISO 8601 in UTC with that many fractional digits.
    Zoned(usize),
}

fn parse_kind(kind: &str) -> Option<Kind> {
    let (name, arg) = match kind.split_once(':') {
        Some((name, arg)) => (name, arg.parse::<usize>().ok()?),
        None => (kind, 0),
    };
    Some(match name {
        "int" => Kind::Int,
        "ulong" => Kind::ULong,
        "decimal_int" => Kind::DecimalInt,
        "f32" => Kind::F32,
        "float" => Kind::Float,
        "decimal" => Kind::Decimal,
        "text" => Kind::Text,
        "bytes" => Kind::Bytes,
        "pad" => Kind::Pad(arg),
        "enum" => Kind::Enum,
        "set" => Kind::Set,
        "bit1" => Kind::Bit1,
        "bits" => Kind::Bits(arg),
        "date" => Kind::Date,
        "time" => Kind::Time,
        "millis" => Kind::Millis,
        "micros" => Kind::Micros,
        "zoned" if arg <= 6 => Kind::Zoned(arg),
        _ => return None,
    })
}

/// Whether a column of binlog type `ty` can take the conversion `kind`.
fn fits(kind: Kind, ty: u8, col: &MapColumn) -> bool {
    match kind {
        Kind::Int => matches!(ty, TINY | SHORT | INT24 | LONG | LONGLONG | YEAR),
        Kind::ULong => ty == LONGLONG,
        Kind::DecimalInt => ty == LONGLONG && col.unsigned,
        Kind::F32 => ty == FLOAT,
        Kind::Float => matches!(ty, FLOAT | DOUBLE),
        Kind::Decimal => ty == NEWDECIMAL,
        Kind::Text | Kind::Bytes | Kind::Pad(_) => matches!(ty, VARCHAR | STRING | BLOB),
        Kind::Enum => ty == ENUM && !col.labels.is_empty(),
        Kind::Set => ty == SET && !col.labels.is_empty(),
        Kind::Bit1 => ty == BIT && col.a == 1,
        Kind::Bits(size) => ty == BIT && size >= (col.a as usize).div_ceil(8),
        Kind::Date => ty == DATE,
        Kind::Time => matches!(ty, TIME | TIME2),
        Kind::Millis | Kind::Micros => ty == DATETIME2,
        Kind::Zoned(_) => matches!(ty, TIMESTAMP | TIMESTAMP2),
    }
}

/// One column of the table map.
struct MapColumn {
    ty: u8,
    /// VARCHAR/STRING: the maximum length in bytes; BLOB/JSON/GEOMETRY: the length's size;
    /// NEWDECIMAL: the precision; temporal types: the fractional digits; BIT: the bits;
    /// ENUM/SET: the value's size in bytes.
    a: u32,
    /// NEWDECIMAL: the scale.
    b: u32,
    unsigned: bool,
    /// ENUM: `""` and the labels (the library's list); SET: the members in definition order.
    labels: Vec<Py<PyString>>,
    /// The captured column reading this one (its index among the outputs) and its conversion.
    out: Option<(usize, Kind)>,
}

/// One captured column, in table order.
struct Output {
    name: Py<PyString>,
    /// What the column holds when the image has no value for it: null for an optional column,
    /// Debezium's fallback for a required one.
    fallback: PyObject,
}

#[pyclass(frozen, module = "sluice_native")]
pub struct BinlogRowsDecoder {
    map: Vec<MapColumn>,
    outputs: Vec<Output>,
    decimal: PyObject,
    empty: Py<PyString>,
}

/// A decoded value before the null rules: SQL NULL (or what the library reads as null: a zero
/// date, an invalid DATETIME, a column the image lacks), an empty SET, or the value.
enum Value {
    Null,
    EmptySet,
    Some(PyObject),
}

impl BinlogRowsDecoder {
    /// One column's value; `out` is its conversion when captured (`None`: read past).
    fn value(
        &self,
        py: Python<'_>,
        cur: &mut Cursor,
        col: &MapColumn,
        out: Option<Kind>,
    ) -> Result<Value, Failure> {
        let obj = |v: Bound<'_, PyAny>| Ok(Value::Some(v.unbind()));
        let int = |v: i64| -> Result<Value, Failure> {
            match out {
                Some(Kind::DecimalInt) => Ok(Value::Some(
                    self.decimal
                        .call1(py, ((v as u64).into_pyobject(py).unwrap(),))
                        .map_err(|e| e.to_string())?,
                )),
                Some(_) => obj(v.into_pyobject(py).unwrap().into_any()),
                None => Ok(Value::Null),
            }
        };
        match col.ty {
            TINY => int(if col.unsigned {
                cur.le(1)? as i64
            } else {
                cur.le(1)? as u8 as i8 as i64
            }),
            SHORT => int(if col.unsigned {
                cur.le(2)? as i64
            } else {
                cur.le(2)? as u16 as i16 as i64
            }),
            INT24 => {
                let v = cur.le(3)? as i64;
                int(if col.unsigned || v < 0x80_0000 {
                    v
                } else {
                    v - 0x100_0000
                })
            }
            LONG => int(if col.unsigned {
                cur.le(4)? as i64
            } else {
                cur.le(4)? as u32 as i32 as i64
            }),
            // Unsigned values above 2^63-1 keep their bits: `ulong` wants them wrapped, `decimal_int`
            // reads them back as u64, and `int` never meets them (a precise column is `decimal_int`).
            LONGLONG => {
                let v = cur.le(8)?;
                if col.unsigned && v > i64::MAX as u64 && out == Some(Kind::Int) {
                    return obj(v.into_pyobject(py).unwrap().into_any());
                }
                int(v as i64)
            }
            YEAR => int(cur.le(1)? as i64 + 1900),
            FLOAT => {
                let v = f32::from_bits(cur.le(4)? as u32);
                let v = if out == Some(Kind::F32) {
                    float32(v)
                } else {
                    v as f64
                };
                obj(v.into_pyobject(py).unwrap().into_any())
            }
            DOUBLE => obj(f64::from_bits(cur.le(8)?)
                .into_pyobject(py)
                .unwrap()
                .into_any()),
            NEWDECIMAL => {
                let text = decimal_text(cur, col.a, col.b)?;
                match out {
                    Some(_) => Ok(Value::Some(
                        self.decimal.call1(py, (text,)).map_err(|e| e.to_string())?,
                    )),
                    None => Ok(Value::Null),
                }
            }
            VARCHAR | STRING | BLOB | JSON | GEOMETRY => {
                let len_size = match col.ty {
                    VARCHAR | STRING if col.a > 255 => 2,
                    VARCHAR | STRING => 1,
                    _ => col.a as usize,
                };
                if !(1..=4).contains(&len_size) {
                    return Err(format!("length size {len_size}"));
                }
                let len = cur.le(len_size)? as usize;
                let bytes = cur.take(len)?;
                match out {
                    Some(Kind::Text) => {
                        let text = std::str::from_utf8(bytes).map_err(|e| e.to_string())?;
                        obj(PyString::new(py, text).into_any())
                    }
                    Some(Kind::Pad(n)) if bytes.len() < n => {
                        let mut padded = bytes.to_vec();
                        padded.resize(n, 0);
                        obj(PyBytes::new(py, &padded).into_any())
                    }
                    Some(_) => obj(PyBytes::new(py, bytes).into_any()),
                    None => Ok(Value::Null),
                }
            }
            ENUM => {
                let index = cur.le(col.a as usize)? as usize;
                match out {
                    Some(_) => {
                        let label = col
                            .labels
                            .get(index)
                            .ok_or_else(|| format!("ENUM index {index}"))?;
                        Ok(Value::Some(label.clone_ref(py).into_any()))
                    }
                    None => Ok(Value::Null),
                }
            }
            SET => {
                let size = col.a as usize;
                if !(1..=8).contains(&size) {
                    return Err(format!("SET of {size} bytes"));
                }
                let mask = cur.le(size)?;
                if out.is_none() {
                    return Ok(Value::Null);
                }
                let members: Vec<&str> = col
                    .labels
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i < 64 && mask & (1 << i) != 0)
                    .map(|(_, label)| label.bind(py).to_str())
                    .collect::<PyResult<_>>()
                    .map_err(|e| e.to_string())?;
                if members.is_empty() {
                    return Ok(Value::EmptySet);
                }
                obj(PyString::new(py, &members.join(",")).into_any())
            }
            BIT => {
                let bits = col.a as usize;
                let size = bits.div_ceil(8);
                if size == 0 || size > 8 {
                    return Err(format!("BIT({bits})"));
                }
                let raw = cur.be(size)?;
                let v = if bits >= 64 {
                    raw
                } else {
                    raw & ((1u64 << bits) - 1)
                };
                match out {
                    Some(Kind::Bit1) => obj(PyBool::new(py, v != 0).to_owned().into_any()),
                    Some(Kind::Bits(n)) => {
                        if n < 8 && v >> (8 * n) != 0 {
                            return Err(format!("BIT value wider than {n} bytes"));
                        }
                        let mut bytes = v.to_le_bytes().to_vec();
                        bytes.resize(n, 0);
                        obj(PyBytes::new(py, &bytes).into_any())
                    }
                    _ => Ok(Value::Null),
                }
            }
            DATE => {
                let v = cur.le(3)? as i64;
                let (y, m, d) = ((v >> 9) & 0x7fff, (v >> 5) & 0xf, v & 0x1f);
                if y == 0 || m == 0 || d == 0 {
                    return Ok(Value::Null); // a zero date
                }
                if !valid_date(y, m, d) {
                    return Err(format!("DATE {y}-{m}-{d}"));
                }
                int(days_from_civil(y, m, d))
            }
            TIME => {
                let v = cur.le(3)? as i64;
                int(((v / 10000) * 3600 + (v % 10000 / 100) * 60 + v % 100) * 1_000_000)
            }
            TIME2 => int(time2_micros(cur, col.a)?),
            DATETIME2 => {
                let v = cur.be(5)? as i64;
                let ym = (v >> 22) & 0x1ffff;
                let (y, m, d) = (ym / 13, ym % 13, (v >> 17) & 0x1f);
                let (h, mi, s) = ((v >> 12) & 0x1f, (v >> 6) & 0x3f, v & 0x3f);
                let micros = fsp_micros(cur, col.a)?;
                if !valid_date(y, m, d) || h > 23 || mi > 59 || s > 59 {
                    return Ok(Value::Null); // the library reads an invalid DATETIME as null
                }
                if micros < 0 {
                    return Err("a negative DATETIME fraction".into());
                }
                let total = (days_from_civil(y, m, d) * 86_400 + h * 3600 + mi * 60 + s)
                    * 1_000_000
                    + micros;
                int(if out == Some(Kind::Millis) {
                    total.div_euclid(1000)
                } else {
                    total
                })
            }
            TIMESTAMP | TIMESTAMP2 => {
                let (secs, micros) = if col.ty == TIMESTAMP {
                    (cur.le(4)? as i64, 0)
                } else {
                    (cur.be_signed(4)?, fsp_micros(cur, col.a)?)
                };
                if micros < 0 {
                    return Err("a negative TIMESTAMP fraction".into());
                }
                match out {
                    Some(Kind::Zoned(digits)) => {
                        obj(PyString::new(py, &zoned(secs, micros, digits)?).into_any())
                    }
                    _ => Ok(Value::Null),
                }
            }
            ty => Err(format!("column type {ty}")),
        }
    }

    /// One row image (its null bitmap and values) → the captured columns' values by name.
    fn image<'py>(
        &self,
        py: Python<'py>,
        cur: &mut Cursor,
        present: &[u8],
    ) -> Result<Bound<'py, PyDict>, Failure> {
        let bit = |bits: &[u8], i: usize| bits.get(i / 8).is_some_and(|b| b & (1 << (i % 8)) != 0);
        // As the library counts: every bit of the bitmap.
        let count = present
            .iter()
            .map(|b| b.count_ones() as usize)
            .sum::<usize>();
        let nulls = cur.take(count.div_ceil(8))?;
        let mut values: Vec<Option<Value>> = (0..self.outputs.len()).map(|_| None).collect();
        let mut null_index = 0;
        for (i, col) in self.map.iter().enumerate() {
            if !bit(present, i) {
                continue; // not in this image (binlog_row_image=MINIMAL): null
            }
            let null = bit(nulls, null_index);
            null_index += 1;
            if null {
                continue;
            }
            let value = self.value(py, cur, col, col.out.map(|(_, kind)| kind))?;
            if let Some((slot, _)) = col.out {
                values[slot] = Some(value);
            }
        }
        let dict = PyDict::new(py);
        for (output, value) in self.outputs.iter().zip(values) {
            let value = match value {
                Some(Value::Some(v)) => v,
                Some(Value::EmptySet) => self.empty.clone_ref(py).into_any(),
                Some(Value::Null) | None => output.fallback.clone_ref(py),
            };
            dict.set_item(output.name.bind(py), value)
                .map_err(|e| e.to_string())?;
        }
        Ok(dict)
    }
}

#[pymethods]
impl BinlogRowsDecoder {
    /// `columns`: the table map's columns, `(type, a, b, unsigned, labels)` each (see
    /// `MapColumn`); `outputs`: the captured columns in table order, `(name, table-map index or
    /// -1, kind, fallback)` each. Raises `ValueError` for a conversion it does not do.
    #[new]
    #[allow(clippy::type_complexity)]
    fn new(
        py: Python<'_>,
        columns: Vec<(u8, u32, u32, bool, Vec<Py<PyString>>)>,
        outputs: Vec<(Py<PyString>, i64, String, PyObject)>,
    ) -> PyResult<Self> {
        let mut map: Vec<MapColumn> = columns
            .into_iter()
            .map(|(ty, a, b, unsigned, labels)| MapColumn {
                ty,
                a,
                b,
                unsigned,
                labels,
                out: None,
            })
            .collect();
        const KNOWN: [u8; 23] = [
            TINY, SHORT, LONG, FLOAT, DOUBLE, TIMESTAMP, LONGLONG, INT24, DATE, TIME, YEAR,
            VARCHAR, BIT, TIMESTAMP2, DATETIME2, TIME2, JSON, NEWDECIMAL, ENUM, SET, BLOB, STRING,
            GEOMETRY,
        ];
        if let Some(col) = map.iter().find(|c| !KNOWN.contains(&c.ty)) {
            return Err(PyValueError::new_err(format!("binlog type {}", col.ty)));
        }
        let mut outs = Vec::with_capacity(outputs.len());
        for (slot, (name, index, kind, fallback)) in outputs.into_iter().enumerate() {
            if index >= 0 {
                let col = map
                    .get_mut(index as usize)
                    .ok_or_else(|| PyValueError::new_err(format!("no table map column {index}")))?;
                let parsed = parse_kind(&kind)
                    .filter(|k| fits(*k, col.ty, col))
                    .ok_or_else(|| {
                        PyValueError::new_err(format!(
                            "no conversion {kind:?} for binlog type {}",
                            col.ty
                        ))
                    })?;
                if col.out.is_some() {
                    return Err(PyValueError::new_err(format!(
                        "table map column {index} captured twice"
                    )));
                }
                col.out = Some((slot, parsed));
            }
            outs.push(Output { name, fallback });
        }
        let decimal = py.import("decimal")?.getattr("Decimal")?.unbind();
        Ok(Self {
            map,
            outputs: outs,
            decimal,
            empty: PyString::new(py, "").unbind(),
        })
    }

    /// The rows of one event: `data[start:end]` holds its row images, each image's columns those
    /// set in `present` (`present_after` for an update's after images). A list of dicts (write,
    /// delete) or of `(before, after)` tuples (update).
    #[pyo3(signature = (data, start, end, present, present_after=None))]
    fn decode<'py>(
        &self,
        py: Python<'py>,
        data: &[u8],
        start: usize,
        end: usize,
        present: &[u8],
        present_after: Option<&[u8]>,
    ) -> PyResult<Bound<'py, PyList>> {
        if start > end || end > data.len() {
            return Err(PyValueError::new_err("rows outside the event"));
        }
        let mut cur = Cursor {
            data: &data[..end],
            pos: start,
        };
        let rows = PyList::empty(py);
        let fail = |e: Failure| PyValueError::new_err(e);
        while cur.pos < end {
            let first = self.image(py, &mut cur, present).map_err(fail)?;
            match present_after {
                Some(after) => {
                    let second = self.image(py, &mut cur, after).map_err(fail)?;
                    rows.append(PyTuple::new(py, [first, second])?)?;
                }
                None => rows.append(first)?,
            }
        }
        Ok(rows)
    }
}
