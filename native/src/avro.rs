//! Connect struct values → Avro binary in Confluent's wire format, for flat records.
//!
//! An `AvroRecordWriter` is built per (topic, Connect schema) by `converters/avro.py` when the
//! schema is a struct of primitive fields (logical types included). It reads each field of the
//! value dict, checks it the way the Python encoder does (exact int in range, float, bool, str,
//! bytes; null only where the field is optional), and appends its Avro encoding after the
//! 5-byte header. A field whose Connect value needs converting (Decimal, Date, Time, Timestamp,
//! a default for null) goes through the Python function the plan gives for it, which returns
//! the Avro-ready value.
//!
//! Anything it does not take as it is (a value of another type, an int out of range, a field
//! the schema does not have, a string with lone surrogates) makes it return `None` for that
//! record, and the caller encodes it the Python way, which is the one place that decides what
//! such a value becomes: usually a DataError naming the field. The tests compare both paths
//! byte for byte.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString};

#[derive(Clone, Copy)]
enum Kind {
    /// Avro int or long (zigzag varint), the value within `lo..=hi`.
    Int,
    /// Avro float: 4 bytes little-endian.
    Float,
    /// Avro double: 8 bytes little-endian.
    Double,
    Boolean,
    /// UTF-8 bytes with their length.
    String,
    /// Bytes with their length.
    Bytes,
}

#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Null {
    /// A required field: null is refused.
    No,
    /// `["null", T]`: null is branch 0.
    First,
    /// `[T, "null"]`: null is branch 1.
    Second,
}

struct Field {
    name: Py<PyString>,
    kind: Kind,
    null: Null,
    lo: i64,
    hi: i64,
    convert: Option<PyObject>,
}

#[pyclass(frozen, module = "sluice_native")]
pub struct AvroRecordWriter {
    header: Vec<u8>,
    fields: Vec<Field>,
}

fn put_long(out: &mut Vec<u8>, value: i64) {
    let mut n = ((value << 1) ^ (value >> 63)) as u64;
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// Appends `value`'s encoding for `field`; `false` if the value is not one this writer takes.
fn put_value(out: &mut Vec<u8>, field: &Field, value: &Bound<'_, PyAny>) -> bool {
    match field.kind {
        Kind::Int => {
            if value.is_instance_of::<PyBool>() || !value.is_instance_of::<PyInt>() {
                return false;
            }
            match value.extract::<i64>() {
                Ok(n) if n >= field.lo && n <= field.hi => put_long(out, n),
                _ => return false,
            }
        }
        Kind::Float | Kind::Double => {
            let x = if let Ok(f) = value.downcast::<PyFloat>() {
                f.value()
            } else if value.is_instance_of::<PyInt>() && !value.is_instance_of::<PyBool>() {
                match value.extract::<f64>() {
                    Ok(x) => x,
                    Err(_) => return false,
                }
            } else {
                return false;
            };
            if let Kind::Float = field.kind {
                out.extend_from_slice(&(x as f32).to_le_bytes());
            } else {
                out.extend_from_slice(&x.to_le_bytes());
            }
        }
        Kind::Boolean => match value.downcast::<PyBool>() {
            Ok(b) => out.push(b.is_true() as u8),
            Err(_) => return false,
        },
        Kind::String => match value.downcast::<PyString>() {
            Ok(s) => match s.to_str() {
                Ok(text) => {
                    put_long(out, text.len() as i64);
                    out.extend_from_slice(text.as_bytes());
                }
                Err(_) => return false,
            },
            Err(_) => return false,
        },
        Kind::Bytes => match value.downcast::<PyBytes>() {
            Ok(b) => {
                let data = b.as_bytes();
                put_long(out, data.len() as i64);
                out.extend_from_slice(data);
            }
            Err(_) => return false,
        },
    }
    true
}

impl AvroRecordWriter {
    /// Appends one record's body to `out`; `Ok(false)` if the Python path must encode it.
    fn body(&self, py: Python<'_>, value: &Bound<'_, PyAny>, out: &mut Vec<u8>) -> PyResult<bool> {
        let Ok(dict) = value.downcast::<PyDict>() else {
            return Ok(false);
        };
        let mut found = 0usize;
        for field in &self.fields {
            let raw = dict.get_item(field.name.bind(py))?;
            if raw.is_some() {
                found += 1;
            }
            let mut item = match raw {
                Some(v) if !v.is_none() => Some(v),
                _ => None,
            };
            if let Some(convert) = &field.convert {
                let arg = item.unwrap_or_else(|| py.None().into_bound(py));
                let converted = match convert.bind(py).call1((arg,)) {
                    Ok(c) => c,
                    Err(_) => return Ok(false),
                };
                item = if converted.is_none() {
                    None
                } else {
                    Some(converted)
                };
            }
            match (item, field.null) {
                (None, Null::No) => return Ok(false),
                (None, Null::First) => out.push(0),
                (None, Null::Second) => out.push(2),
                (Some(v), null) => {
                    match null {
                        Null::First => out.push(2),
                        Null::Second => out.push(0),
                        Null::No => {}
                    }
                    if !put_value(out, field, &v) {
                        return Ok(false);
                    }
                }
            }
        }
        // A key the schema does not have: the Python path names it in its error.
        Ok(found == dict.len())
    }
}

#[pymethods]
impl AvroRecordWriter {
    /// `header`: the 5 bytes before each body. `fields`: `(name, kind, null, lo, hi, convert)` in
    /// schema order, kind one of `int`, `float`, `double`, `boolean`, `string`, `bytes`, null one
    /// of `no`, `first`, `second`, `convert` a function or `None`.
    #[new]
    #[allow(clippy::type_complexity)]
    fn new(
        header: Vec<u8>,
        fields: Vec<(Py<PyString>, String, String, i64, i64, Option<PyObject>)>,
    ) -> PyResult<Self> {
        let mut plan = Vec::with_capacity(fields.len());
        for (name, kind, null, lo, hi, convert) in fields {
            let kind = parse_kind(&kind)?;
            let null = parse_null(&null)?;
            plan.push(Field {
                name,
                kind,
                null,
                lo,
                hi,
                convert,
            });
        }
        Ok(AvroRecordWriter {
            header,
            fields: plan,
        })
    }

    /// The wire-format bytes of one struct value, or `None` if the Python path must encode it.
    fn write<'py>(
        &self,
        py: Python<'py>,
        value: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let mut out = Vec::with_capacity(self.header.len() + 16 * self.fields.len());
        out.extend_from_slice(&self.header);
        if self.body(py, value, &mut out)? {
            Ok(Some(PyBytes::new(py, &out)))
        } else {
            Ok(None)
        }
    }

    /// `write` for each value of `values` (a list); `None` stays `None` (a tombstone).
    fn write_batch<'py>(
        &self,
        py: Python<'py>,
        values: &Bound<'py, PyList>,
    ) -> PyResult<Bound<'py, PyList>> {
        let result = PyList::empty(py);
        let mut out = Vec::with_capacity(self.header.len() + 16 * self.fields.len());
        for value in values.iter() {
            if value.is_none() {
                result.append(py.None())?;
                continue;
            }
            out.clear();
            out.extend_from_slice(&self.header);
            if self.body(py, &value, &mut out)? {
                result.append(PyBytes::new(py, &out))?;
            } else {
                result.append(py.None())?;
            }
        }
        Ok(result)
    }
}

/// One field of a record read by `AvroRecordReader`.
struct ReadField {
    name: Py<PyString>,
    kind: Kind,
    null: Null,
    /// Avro int (32 bits) rather than long: a wider varint is malformed.
    int32: bool,
    convert: Option<PyObject>,
}

/// Avro binary of a flat record → the dict of its Connect values.
///
/// Built from the writer's schema when it is a record of primitive fields (each maybe in a union
/// with null). Each field is decoded into its Python value; fields with a logical type go
/// through the Python function the plan gives (days → date, …). A body that is truncated, has a
/// union branch out of range, or holds text that is not UTF-8 makes it return `None`, and the
/// caller reads the record the Python way, which raises the error that says what is wrong.
#[pyclass(frozen, module = "sluice_native")]
pub struct AvroRecordReader {
    fields: Vec<ReadField>,
}

struct Input<'a> {
    data: &'a [u8],
    at: usize,
}

impl Input<'_> {
    fn long(&mut self) -> Option<i64> {
        let mut n: u64 = 0;
        let mut shift = 0u32;
        loop {
            let byte = *self.data.get(self.at)?;
            self.at += 1;
            if shift >= 64 || (shift == 63 && byte > 1) {
                return None;
            }
            n |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                break;
            }
            shift += 7;
        }
        Some(((n >> 1) as i64) ^ -((n & 1) as i64))
    }

    fn take(&mut self, len: usize) -> Option<&[u8]> {
        let end = self.at.checked_add(len)?;
        let slice = self.data.get(self.at..end)?;
        self.at = end;
        Some(slice)
    }
}

impl AvroRecordReader {
    fn value<'py>(
        &self,
        py: Python<'py>,
        field: &ReadField,
        input: &mut Input,
    ) -> Option<Bound<'py, PyAny>> {
        Some(match field.kind {
            Kind::Int => {
                let n = input.long()?;
                if field.int32 && (n < i64::from(i32::MIN) || n > i64::from(i32::MAX)) {
                    return None;
                }
                n.into_pyobject(py).ok()?.into_any()
            }
            Kind::Float => {
                let raw: [u8; 4] = input.take(4)?.try_into().ok()?;
                PyFloat::new(py, f64::from(f32::from_le_bytes(raw))).into_any()
            }
            Kind::Double => {
                let raw: [u8; 8] = input.take(8)?.try_into().ok()?;
                PyFloat::new(py, f64::from_le_bytes(raw)).into_any()
            }
            Kind::Boolean => match input.take(1)?[0] {
                0 => PyBool::new(py, false).to_owned().into_any(),
                1 => PyBool::new(py, true).to_owned().into_any(),
                _ => return None,
            },
            Kind::String => {
                let len = usize::try_from(input.long()?).ok()?;
                let text = std::str::from_utf8(input.take(len)?).ok()?;
                PyString::new(py, text).into_any()
            }
            Kind::Bytes => {
                let len = usize::try_from(input.long()?).ok()?;
                PyBytes::new(py, input.take(len)?).into_any()
            }
        })
    }
}

#[pymethods]
impl AvroRecordReader {
    /// `fields`: `(name, kind, null, int32, convert)` in the writer's field order, kind and null
    /// as for `AvroRecordWriter`, `int32` true for Avro `int`, `convert` a function or `None`.
    #[new]
    #[allow(clippy::type_complexity)]
    fn new(fields: Vec<(Py<PyString>, String, String, bool, Option<PyObject>)>) -> PyResult<Self> {
        let mut plan = Vec::with_capacity(fields.len());
        for (name, kind, null, int32, convert) in fields {
            plan.push(ReadField {
                name,
                kind: parse_kind(&kind)?,
                null: parse_null(&null)?,
                int32,
                convert,
            });
        }
        Ok(AvroRecordReader { fields: plan })
    }

    /// The record in `data` from byte `offset` on, as a dict; `None` if the Python path must read it.
    fn read<'py>(
        &self,
        py: Python<'py>,
        data: &[u8],
        offset: usize,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        let mut input = Input { data, at: offset };
        let out = PyDict::new(py);
        for field in &self.fields {
            let present = match field.null {
                Null::No => true,
                Null::First => match input.long() {
                    Some(0) => false,
                    Some(1) => true,
                    _ => return Ok(None),
                },
                Null::Second => match input.long() {
                    Some(0) => true,
                    Some(1) => false,
                    _ => return Ok(None),
                },
            };
            if !present {
                out.set_item(field.name.bind(py), py.None())?;
                continue;
            }
            let Some(mut value) = self.value(py, field, &mut input) else {
                return Ok(None);
            };
            if let Some(convert) = &field.convert {
                value = match convert.bind(py).call1((value,)) {
                    Ok(v) => v,
                    Err(_) => return Ok(None),
                };
            }
            out.set_item(field.name.bind(py), value)?;
        }
        Ok(Some(out))
    }
}

fn parse_kind(kind: &str) -> PyResult<Kind> {
    Ok(match kind {
        "int" => Kind::Int,
        "float" => Kind::Float,
        "double" => Kind::Double,
        "boolean" => Kind::Boolean,
        "string" => Kind::String,
        "bytes" => Kind::Bytes,
        other => {
            return Err(PyValueError::new_err(format!(
                "unknown field kind {other:?}"
            )))
        }
    })
}

pub(crate) fn parse_null(null: &str) -> PyResult<Null> {
    Ok(match null {
        "no" => Null::No,
        "first" => Null::First,
        "second" => Null::Second,
        other => {
            return Err(PyValueError::new_err(format!(
                "unknown null position {other:?}"
            )))
        }
    })
}
