//! Sluice's native helpers: `parse_json_objects` below, `CdcEncoder` (the CDC source's
//! change events, see `cdc.rs`) and `BinlogRowsDecoder` (binlog row images, see `binlog_rows.rs`).
//!
//! `parse_json_objects` turns a batch of consumed JSON values, each a flat object (every member a
//! string, number, boolean or null), into Arrow column buffers that Python wraps with
//! `pyarrow.Array.from_buffers` without copying. The sinks that parse raw JSON themselves (the
//! JDBC sink's COPY path) use it instead of pyarrow's JSON reader, which costs four to five times
//! as much per row on small records.
//!
//! It accepts exactly what a strict JSON parser (orjson, which the ordinary path uses) reads the
//! same way and refuses everything else by returning `None`, so that the caller takes its
//! ordinary path and the converter reports the bad record: invalid UTF-8, lone surrogate escapes,
//! control characters in strings, `NaN`/`Infinity` and numbers that overflow a double, integers
//! above int64 that fit 64 bits unsigned (orjson reads those as unsigned), duplicate keys, nested
//! objects and arrays, members whose values mix types (other than integers and doubles, which
//! become doubles), and anything after the object.
//!
//! Columns come in the order their keys first appear; a row without a key holds null there. The
//! integer `-0` is 0, as orjson reads it; the double `-0.0` stays negative; integers beyond 64 bits
//! are doubles, as orjson reads them.

mod avro;
mod avro_arrow;
mod binlog_rows;
mod binlog_values;
mod cdc;
mod envelope;
mod envelope_docs;

use std::collections::HashMap;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

#[cfg(not(target_endian = "little"))]
compile_error!(
    "Arrow buffers are little-endian; this crate writes them as the machine lays them out"
);

/// Why a batch is refused; never surfaced (the caller's ordinary path names the problem).
struct Refused;

type Parsed<T> = Result<T, Refused>;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Null,
    Int,
    Float,
    Bool,
    Str,
}

impl Kind {
    fn arrow_name(self) -> &'static str {
        match self {
            Kind::Null => "null",
            Kind::Int => "int64",
            Kind::Float => "double",
            Kind::Bool => "bool",
            Kind::Str => "string",
        }
    }
}

/// One member's values so far: `filled` rows, each a value or a null (with a placeholder value).
struct Column {
    name: Vec<u8>,
    kind: Kind,
    ints: Vec<i64>,
    floats: Vec<f64>,
    bools: Vec<bool>,
    offsets: Vec<i32>, // strings: where each row's bytes start in `data`, and the end (Arrow's offsets)
    data: Vec<u8>,
    valid: Vec<bool>,
    nulls: usize,
    capacity: usize, // the rows of the batch: every vector grows to this size
}

impl Column {
    fn new(name: Vec<u8>, rows_before: usize, capacity: usize) -> Self {
        let mut valid = Vec::with_capacity(capacity);
        valid.resize(rows_before, false);
        Column {
            name,
            kind: Kind::Null,
            ints: Vec::new(),
            floats: Vec::new(),
            bools: Vec::new(),
            offsets: Vec::new(),
            data: Vec::new(),
            valid,
            nulls: rows_before,
            capacity,
        }
    }

    fn filled(&self) -> usize {
        self.valid.len()
    }

    /// Becomes `kind`, converting the values so far (placeholders for a column of nulls).
    fn become_kind(&mut self, kind: Kind) -> Parsed<()> {
        if self.kind == kind {
            return Ok(());
        }
        let n = self.filled();
        let capacity = self.capacity;
        match (self.kind, kind) {
            (Kind::Null, Kind::Int) => self.ints = filled_vec(n, 0, capacity),
            (Kind::Null, Kind::Float) => self.floats = filled_vec(n, 0.0, capacity),
            (Kind::Null, Kind::Bool) => self.bools = filled_vec(n, false, capacity),
            (Kind::Null, Kind::Str) => self.offsets = filled_vec(n + 1, 0, capacity + 1),
            (Kind::Int, Kind::Float) => {
                let mut floats = Vec::with_capacity(capacity);
                floats.extend(self.ints.iter().map(|&v| v as f64));
                self.floats = floats;
                self.ints = Vec::new();
            }
            _ => return Err(Refused),
        }
        self.kind = kind;
        Ok(())
    }

    fn push_null(&mut self) {
        match self.kind {
            Kind::Null => {}
            Kind::Int => self.ints.push(0),
            Kind::Float => self.floats.push(0.0),
            Kind::Bool => self.bools.push(false),
            Kind::Str => self.offsets.push(self.offsets[self.offsets.len() - 1]),
        }
        self.valid.push(false);
        self.nulls += 1;
    }
}

fn filled_vec<T: Clone>(len: usize, value: T, capacity: usize) -> Vec<T> {
    let mut out = Vec::with_capacity(capacity.max(len));
    out.resize(len, value);
    out
}

#[derive(Clone, Copy)]
enum Number {
    Int(i64),
    Float(f64),
}

/// The columns of a batch, filled one object at a time.
struct Batch {
    columns: Vec<Column>,
    index: HashMap<Vec<u8>, usize>,
    rows: usize,
    capacity: usize,
    key: Vec<u8>,
}

impl Batch {
    fn new(capacity: usize) -> Self {
        Batch {
            columns: Vec::new(),
            index: HashMap::new(),
            rows: 0,
            capacity,
            key: Vec::new(),
        }
    }

    fn add(&mut self, raw: &[u8]) -> Parsed<()> {
        if !raw.is_ascii() && std::str::from_utf8(raw).is_err() {
            return Err(Refused);
        }
        let mut p = Cursor { buf: raw, pos: 0 };
        p.skip_ws();
        self.object(&mut p)?;
        p.skip_ws();
        if p.pos != raw.len() {
            return Err(Refused);
        }
        Ok(())
    }

    /// One flat object at the cursor as the batch's next row (the caller checked the UTF-8).
    fn object(&mut self, p: &mut Cursor) -> Parsed<()> {
        let raw = p.buf;
        p.expect(b'{')?;
        p.skip_ws();
        let mut hint = 0usize; // members usually come in the same order in every object
        if p.peek() == Some(b'}') {
            p.pos += 1;
        } else {
            loop {
                p.expect(b'"')?;
                let start = p.pos;
                let end = plain_run(raw, start);
                let at = if raw.get(end) == Some(&b'"') {
                    p.pos = end + 1;
                    self.column_for_key(&raw[start..end], hint)
                } else {
                    let mut key = std::mem::take(&mut self.key); // a key with escapes
                    key.clear();
                    p.string_into(&mut key)?;
                    let at = self.column_for_key(&key, hint);
                    self.key = key;
                    at
                };
                hint = at + 1;
                p.skip_ws();
                p.expect(b':')?;
                p.skip_ws();
                self.value(p, at)?;
                p.skip_ws();
                match p.next() {
                    Some(b',') => p.skip_ws(),
                    Some(b'}') => break,
                    _ => return Err(Refused),
                }
            }
        }
        self.rows += 1;
        for column in &mut self.columns {
            if column.filled() < self.rows {
                column.push_null();
            }
        }
        Ok(())
    }

    fn column_for_key(&mut self, key: &[u8], hint: usize) -> usize {
        if let Some(column) = self.columns.get(hint) {
            if column.name == key {
                return hint;
            }
        }
        if let Some(&at) = self.index.get(key) {
            return at;
        }
        let at = self.columns.len();
        self.index.insert(key.to_vec(), at);
        self.columns
            .push(Column::new(key.to_vec(), self.rows, self.capacity));
        at
    }

    fn value(&mut self, p: &mut Cursor, at: usize) -> Parsed<()> {
        let column = &mut self.columns[at];
        if column.filled() != self.rows {
            return Err(Refused); // the key came twice in this object
        }
        match p.peek().ok_or(Refused)? {
            b'"' => {
                p.pos += 1;
                column.become_kind(Kind::Str)?;
                p.string_into(&mut column.data)?;
                column
                    .offsets
                    .push(i32::try_from(column.data.len()).map_err(|_| Refused)?);
            }
            b't' => {
                p.literal(b"true")?;
                column.become_kind(Kind::Bool)?;
                column.bools.push(true);
            }
            b'f' => {
                p.literal(b"false")?;
                column.become_kind(Kind::Bool)?;
                column.bools.push(false);
            }
            b'n' => {
                p.literal(b"null")?;
                column.push_null();
                return Ok(());
            }
            b'-' | b'0'..=b'9' => match p.number()? {
                Number::Int(v) if column.kind != Kind::Float => {
                    column.become_kind(Kind::Int)?;
                    column.ints.push(v);
                }
                Number::Int(v) => column.floats.push(v as f64),
                Number::Float(v) => {
                    column.become_kind(Kind::Float)?;
                    column.floats.push(v);
                }
            },
            _ => return Err(Refused), // nested values, or not JSON
        }
        column.valid.push(true);
        Ok(())
    }
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.buf.get(self.pos).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let byte = self.peek();
        self.pos += 1;
        byte
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn expect(&mut self, byte: u8) -> Parsed<()> {
        if self.next() == Some(byte) {
            Ok(())
        } else {
            Err(Refused)
        }
    }

    fn literal(&mut self, word: &[u8]) -> Parsed<()> {
        if self.buf[self.pos..].starts_with(word) {
            self.pos += word.len();
            Ok(())
        } else {
            Err(Refused)
        }
    }

    /// A string's contents, unescaped, appended to `out`; the opening quote is consumed already.
    fn string_into(&mut self, out: &mut Vec<u8>) -> Parsed<()> {
        let buf = self.buf;
        loop {
            let start = self.pos;
            let i = plain_run(buf, start);
            out.extend_from_slice(&buf[start..i]);
            match buf.get(i) {
                Some(b'"') => {
                    self.pos = i + 1;
                    return Ok(());
                }
                Some(b'\\') => {}
                _ => return Err(Refused), // the end of the value, or a raw control character
            }
            let escape = *buf.get(i + 1).ok_or(Refused)?;
            let mut i = i + 2;
            match escape {
                b'"' | b'\\' | b'/' => out.push(escape),
                b'b' => out.push(0x08),
                b'f' => out.push(0x0c),
                b'n' => out.push(b'\n'),
                b'r' => out.push(b'\r'),
                b't' => out.push(b'\t'),
                b'u' => {
                    let high = hex4(buf, i)?;
                    i += 4;
                    let code = if (0xD800..0xDC00).contains(&high) {
                        if buf.get(i) != Some(&b'\\') || buf.get(i + 1) != Some(&b'u') {
                            return Err(Refused); // a lone high surrogate
                        }
                        let low = hex4(buf, i + 2)?;
                        if !(0xDC00..0xE000).contains(&low) {
                            return Err(Refused);
                        }
                        i += 6;
                        0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00..0xE000).contains(&high) {
                        return Err(Refused); // a lone low surrogate
                    } else {
                        high
                    };
                    let ch = char::from_u32(code).ok_or(Refused)?;
                    out.extend_from_slice(ch.encode_utf8(&mut [0u8; 4]).as_bytes());
                }
                _ => return Err(Refused),
            }
            self.pos = i;
        }
    }

    /// A number as JSON writes it: an integer (int64) without fraction or exponent, else a finite
    /// double; integers beyond 64 bits are doubles too, as orjson reads them.
    fn number(&mut self) -> Parsed<Number> {
        let buf = self.buf;
        let start = self.pos;
        let mut i = start;
        let negative = buf[i] == b'-';
        if negative {
            i += 1;
        }
        let digits_start = i;
        i = match buf.get(i) {
            Some(b'0') => i + 1,
            Some(b'1'..=b'9') => digits_end(buf, i),
            _ => return Err(Refused),
        };
        let digits_end_at = i;
        let mut float = false;
        if buf.get(i) == Some(&b'.') {
            i = some_digits(buf, i + 1)?;
            float = true;
        }
        if matches!(buf.get(i), Some(b'e' | b'E')) {
            i += 1;
            if matches!(buf.get(i), Some(b'+' | b'-')) {
                i += 1;
            }
            i = some_digits(buf, i)?;
            float = true;
        }
        self.pos = i;
        if !float {
            if let Some(value) = int64(&buf[digits_start..digits_end_at], negative) {
                return Ok(Number::Int(value));
            }
            // orjson reads an integer beyond int64 as an unsigned one while it fits 64 bits (no
            // int64 column can hold that), and beyond that as a double, as below.
            let digits = &buf[digits_start..digits_end_at];
            if !negative
                && std::str::from_utf8(digits)
                    .ok()
                    .and_then(|t| t.parse::<u64>().ok())
                    .is_some()
            {
                return Err(Refused);
            }
        }
        // ASCII digits, sign, point and exponent only: valid UTF-8, and a grammar Rust parses exactly.
        let text = std::str::from_utf8(&buf[start..i]).map_err(|_| Refused)?;
        let value: f64 = text.parse().map_err(|_| Refused)?;
        if value.is_finite() {
            Ok(Number::Float(value))
        } else {
            Err(Refused)
        }
    }
}

/// Where the run of bytes a string holds as they are (no quote, backslash or control character)
/// that starts at `at` ends: eight bytes at a time, then byte by byte.
fn plain_run(buf: &[u8], at: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let has_zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
    let mut i = at;
    while let Some(chunk) = buf.get(i..i + 8) {
        let x = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
        let special = has_zero(x ^ (ONES * u64::from(b'"')))
            | has_zero(x ^ (ONES * u64::from(b'\\')))
            | (x.wrapping_sub(ONES * 0x20) & !x & HIGH);
        if special != 0 {
            break;
        }
        i += 8;
    }
    while i < buf.len() && buf[i] != b'"' && buf[i] != b'\\' && buf[i] >= 0x20 {
        i += 1;
    }
    i
}

/// Where the run of ASCII digits starting at `at` ends.
fn digits_end(buf: &[u8], at: usize) -> usize {
    let mut i = at;
    while matches!(buf.get(i), Some(b'0'..=b'9')) {
        i += 1;
    }
    i
}

/// Where the run of ASCII digits starting at `at` ends; there must be at least one.
fn some_digits(buf: &[u8], at: usize) -> Parsed<usize> {
    let end = digits_end(buf, at);
    if end == at {
        Err(Refused)
    } else {
        Ok(end)
    }
}

/// The integer of `digits` (ASCII, no sign), negated if `negative`, if it fits an i64; -0 is 0.
fn int64(digits: &[u8], negative: bool) -> Option<i64> {
    let mut value: i64 = 0; // accumulated negatively, so that i64::MIN fits
    for &d in digits {
        value = value.checked_mul(10)?.checked_sub(i64::from(d - b'0'))?;
    }
    if negative {
        Some(value)
    } else {
        value.checked_neg()
    }
}

fn hex4(buf: &[u8], at: usize) -> Parsed<u32> {
    let digits = buf.get(at..at + 4).ok_or(Refused)?;
    let mut value = 0u32;
    for &d in digits {
        let nibble = match d {
            b'0'..=b'9' => d - b'0',
            b'a'..=b'f' => d - b'a' + 10,
            b'A'..=b'F' => d - b'A' + 10,
            _ => return Err(Refused),
        };
        value = value * 16 + u32::from(nibble);
    }
    Ok(value)
}

/// Bits, least significant first, as Arrow packs validity and boolean buffers.
pub(crate) fn pack_bits(bits: &[bool]) -> Vec<u8> {
    let mut out = vec![0u8; bits.len().div_ceil(8)];
    for (i, &bit) in bits.iter().enumerate() {
        if bit {
            out[i / 8] |= 1 << (i % 8);
        }
    }
    out
}

pub(crate) fn as_bytes<T: Copy>(values: &[T]) -> &[u8] {
    // SAFETY: i64, f64 and i32 have no padding and every bit pattern is a valid byte.
    unsafe {
        std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values))
    }
}

/// Raw pointers to the bytes of the batch's values, read while the GIL is released; the owning
/// references are held by the caller until the parse is done, and bytes are immutable.
struct Values(Vec<(*const u8, usize)>);

// SAFETY: see `Values`: the memory outlives the parse and nobody writes to it.
unsafe impl Send for Values {}

/// The batch's values as bytes objects (the owning references, to hold while the pointers are
/// read) and their `Values`; `None` when one is not bytes (a tombstone).
pub(crate) fn borrow_values<'py>(
    raws: &Bound<'py, PyList>,
) -> Option<(Vec<Bound<'py, PyBytes>>, Values)> {
    let mut owned: Vec<Bound<'py, PyBytes>> = Vec::with_capacity(raws.len());
    for item in raws.iter() {
        owned.push(item.downcast_into::<PyBytes>().ok()?);
    }
    let values = Values(
        owned
            .iter()
            .map(|b| (b.as_bytes().as_ptr(), b.as_bytes().len()))
            .collect(),
    );
    Some((owned, values))
}

fn parse(values: &Values) -> Parsed<Batch> {
    let mut batch = Batch::new(values.0.len());
    for &(ptr, len) in &values.0 {
        // SAFETY: see `Values`.
        let raw = unsafe { std::slice::from_raw_parts(ptr, len) };
        batch.add(raw)?;
    }
    Ok(batch)
}

/// A column's Arrow buffers: (name, type, validity or None, values or None, offsets or None).
type ColumnBuffers<'py> = (
    String,
    &'static str,
    Option<Bound<'py, PyBytes>>,
    Option<Bound<'py, PyBytes>>,
    Option<Bound<'py, PyBytes>>,
);

fn buffers<'py>(py: Python<'py>, column: &Column) -> Parsed<ColumnBuffers<'py>> {
    let name = String::from_utf8(column.name.clone()).map_err(|_| Refused)?;
    let bytes = |data: &[u8]| Some(PyBytes::new(py, data));
    let validity = if column.nulls > 0 && column.kind != Kind::Null {
        bytes(&pack_bits(&column.valid))
    } else {
        None
    };
    let (values, offsets) = match column.kind {
        Kind::Null => (None, None),
        Kind::Int => (bytes(as_bytes(&column.ints)), None),
        Kind::Float => (bytes(as_bytes(&column.floats)), None),
        Kind::Bool => (bytes(&pack_bits(&column.bools)), None),
        Kind::Str => (bytes(&column.data), bytes(as_bytes(&column.offsets))),
    };
    Ok((name, column.kind.arrow_name(), validity, values, offsets))
}

/// Parse a list of JSON values (bytes), each a flat object, into Arrow column buffers.
///
/// Returns ``(rows, [(name, type, validity, values, offsets), ...])`` with ``type`` one of
/// ``"null"``, ``"int64"``, ``"double"``, ``"bool"``, ``"string"`` (32-bit offsets), each buffer
/// ``bytes`` or ``None``; or ``None`` if any value is not such an object (see the module docs).
/// The GIL is released while parsing.
#[pyfunction]
fn parse_json_objects<'py>(
    py: Python<'py>,
    raws: &Bound<'py, PyList>,
) -> PyResult<Option<(usize, Vec<ColumnBuffers<'py>>)>> {
    let Some((owned, values)) = borrow_values(raws) else {
        return Ok(None); // a tombstone, or not bytes
    };
    let parsed = py.allow_threads(move || parse(&values));
    drop(owned);
    let Ok(batch) = parsed else { return Ok(None) };
    let columns = batch
        .columns
        .iter()
        .map(|c| buffers(py, c))
        .collect::<Parsed<Vec<_>>>();
    Ok(columns.ok().map(|columns| (batch.rows, columns)))
}

#[pymodule]
fn sluice_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(parse_json_objects, m)?)?;
    m.add_function(wrap_pyfunction!(avro_arrow::read_avro_arrow, m)?)?;
    m.add_function(wrap_pyfunction!(envelope::parse_json_envelopes, m)?)?;
    m.add_function(wrap_pyfunction!(envelope_docs::envelope_documents, m)?)?;
    m.add_function(wrap_pyfunction!(envelope_docs::envelope_ids, m)?)?;
    m.add_class::<cdc::CdcEncoder>()?;
    m.add_class::<binlog_rows::BinlogRowsDecoder>()?;
    m.add_class::<avro::AvroRecordWriter>()?;
    m.add_class::<avro::AvroRecordReader>()?;
    Ok(())
}
