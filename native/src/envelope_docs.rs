//! JsonConverter envelopes (`schemas.enable=true`) → what the Elasticsearch sink writes for their
//! decoded Connect data, without decoding them in Python: `envelope_documents` (values of a flat
//! struct schema → JSON documents) and `envelope_ids` (keys of a primitive schema → document ids).
//!
//! The caller (Python) reads each distinct schema text once and describes it here as a plan: per
//! field its name, how the converter decodes it and what a null becomes. A value is then read as
//! the converter reads it (exactly two members, `schema` first, as JsonConverter writes them; the
//! payload's members looked up by name, unknown members ignored, missing ones null) and written
//! as `orjson.dumps` writes the decoded value with the sink's fallback (decimals as the nearest
//! double, bytes as base64; see `avro_json.rs` for orjson's formats), fields in schema order.
//!
//! Anything the converter would read differently or refuse, or that this reader does not take
//! (invalid UTF-8 or JSON, a payload before its schema, a null payload, duplicate members, a value
//! of another JSON type than its field's, numbers out of a field's range, decimals of more than
//! 128 bits, dates outside years 1-9999), refuses the whole batch: the caller then decodes it.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString};

use crate::avro_arrow::json::{
    decimal_to_f64, put_base64, put_date, put_date_text, put_int, put_text, put_time,
};
use crate::envelope::skip_value;
use crate::{plain_run, Cursor, Number, Parsed, Refused};

/// How the converter decodes a field, and so how its value is written.
#[derive(Clone, Copy)]
enum Kind {
    /// An integer type, with its range.
    Int(i64, i64),
    /// float32 or float64: a Python float either way.
    Float,
    Bool,
    Text,
    Bytes,
    /// A Connect Decimal (base64 of the unscaled value) of this scale.
    Decimal(u32),
    Date,
    Time,
    Timestamp,
}

/// Days from 1970-01-01 of 0001-01-01 and 9999-12-31 (Python's date range).
const DAYS: (i64, i64) = (-719_162, 2_932_896);
/// Milliseconds from the epoch of 0001-01-01T00:00:00 and 9999-12-31T23:59:59.999.
const MILLIS: (i64, i64) = (-62_135_596_800_000, 253_402_300_799_999);

fn kind_of(name: &str, lo: i64, hi: i64, scale: u32) -> PyResult<Kind> {
    Ok(match name {
        "int" => Kind::Int(lo, hi),
        "float" => Kind::Float,
        "boolean" => Kind::Bool,
        "string" => Kind::Text,
        "bytes" => Kind::Bytes,
        "decimal" => Kind::Decimal(scale),
        "date" => Kind::Date,
        "time" => Kind::Time,
        "timestamp" => Kind::Timestamp,
        other => {
            return Err(PyValueError::new_err(format!(
                "unknown field kind {other:?}"
            )))
        }
    })
}

/// One field of a value schema.
struct Field {
    /// The member name as it reads in the payload (unescaped UTF-8).
    name: Vec<u8>,
    /// The document's `"name":` (JSON text of the name and the colon).
    key: Vec<u8>,
    kind: Kind,
    /// What a null or missing member becomes (JSON text), `None` when the converter refuses it.
    null: Option<Vec<u8>>,
}

/// A schema text and what its values are read as.
struct Plan<T> {
    schema: Vec<u8>,
    body: T,
}

/// Why a value was not written.
enum Stop {
    Refused,
    /// Its schema text is not among the plans: (index of the value, start, end in it).
    Unknown(usize, usize, usize),
}

impl From<Refused> for Stop {
    fn from(_: Refused) -> Self {
        Stop::Refused
    }
}

/// Reads `{"schema":` and a schema among `plans`, then `,"payload":`, leaving the cursor on the
/// payload; returns the plan's index. `last` is tried first (records repeat their schema).
fn open<T>(p: &mut Cursor, plans: &[Plan<T>], last: usize) -> Result<usize, Stop> {
    let raw = p.buf;
    if !raw.is_ascii() && std::str::from_utf8(raw).is_err() {
        return Err(Stop::Refused);
    }
    p.skip_ws();
    p.expect(b'{')?;
    p.skip_ws();
    if !raw[p.pos..].starts_with(b"\"schema\"") {
        return Err(Stop::Refused); // the payload first, or another member: the converter decides
    }
    p.pos += 8;
    p.skip_ws();
    p.expect(b':')?;
    p.skip_ws();
    let start = p.pos;
    // A plan's schema text is a whole JSON object, so a value starting with it ends where it does.
    let found = std::iter::once(last)
        .chain(0..plans.len())
        .find(|&i| i < plans.len() && raw[start..].starts_with(&plans[i].schema));
    match found {
        Some(i) if plans[i].schema.first() == Some(&b'{') => p.pos += plans[i].schema.len(),
        _ => {
            skip_value(p, 0)?;
            return Err(Stop::Unknown(0, start, p.pos));
        }
    }
    let index = found.unwrap_or(0);
    p.skip_ws();
    p.expect(b',')?;
    p.skip_ws();
    if !raw[p.pos..].starts_with(b"\"payload\"") {
        return Err(Stop::Refused);
    }
    p.pos += 9;
    p.skip_ws();
    p.expect(b':')?;
    p.skip_ws();
    Ok(index)
}

/// Reads the envelope's closing brace: nothing may follow but whitespace.
fn close(p: &mut Cursor) -> Parsed<()> {
    p.skip_ws();
    p.expect(b'}')?;
    p.skip_ws();
    if p.pos == p.buf.len() {
        Ok(())
    } else {
        Err(Refused)
    }
}

/// A JSON string's contents (the cursor on its opening quote), unescaped into `out` (cleared).
fn string(p: &mut Cursor, out: &mut Vec<u8>) -> Parsed<()> {
    out.clear();
    p.expect(b'"')?;
    p.string_into(out)
}

/// Standard base64 with padding, as Python's `a2b_base64(strict_mode=True)` reads it (bits past
/// the last whole byte are dropped), into `out` (cleared); anything else is refused.
fn base64(text: &[u8], out: &mut Vec<u8>) -> Parsed<()> {
    fn sextet(c: u8) -> Parsed<u32> {
        Ok(u32::from(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return Err(Refused),
        }))
    }
    out.clear();
    if !text.len().is_multiple_of(4) {
        return Err(Refused);
    }
    let padding = text.iter().rev().take_while(|&&c| c == b'=').count();
    if padding > 2 {
        return Err(Refused);
    }
    let data = &text[..text.len() - padding];
    for chunk in data.chunks(4) {
        let mut n = 0u32;
        for &c in chunk {
            n = (n << 6) | sextet(c)?;
        }
        n <<= 6 * (4 - chunk.len() as u32);
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..chunk.len() - 1]);
    }
    Ok(())
}

/// A double as orjson writes it: the shortest digits that read back (Ryu's, as orjson's, ties to
/// even), positional while the decimal exponent is within -5..=15 (`.0` when integral), else
/// `d.ddde±x` with an explicit `+`; non-finite numbers as `null`. The `ryu` crate lays digits out
/// the same way but for that `+`.
fn put_double(out: &mut Vec<u8>, x: f64) {
    if !x.is_finite() {
        out.extend_from_slice(b"null");
        return;
    }
    let mut buffer = ryu::Buffer::new();
    let text = buffer.format_finite(x).as_bytes();
    match text.iter().position(|&c| c == b'e') {
        Some(at) if text.get(at + 1) != Some(&b'-') => {
            out.extend_from_slice(&text[..=at]);
            out.push(b'+');
            out.extend_from_slice(&text[at + 1..]);
        }
        _ => out.extend_from_slice(text),
    }
}

/// The decimal `n` × 10^-`scale` as orjson writes the double nearest it (Python's
/// `float(Decimal)`). A decimal of at most 15 significant digits in the normal range reads back
/// from that double (`DBL_DIG`), so those digits are the double's shortest: written without
/// converting. Others go through the double.
fn put_decimal(out: &mut Vec<u8>, n: i128, scale: u32) {
    if n == 0 {
        out.extend_from_slice(b"0.0");
        return;
    }
    let mut digits = n.unsigned_abs();
    let mut stripped = i64::from(scale);
    while digits.is_multiple_of(10) {
        digits /= 10;
        stripped -= 1;
    }
    let mut buffer = itoa::Buffer::new();
    let text = buffer.format(digits).as_bytes();
    let exponent = text.len() as i64 - 1 - stripped; // of the first digit
    if text.len() > 15 || !(-300..=300).contains(&exponent) {
        put_double(out, decimal_to_f64(n, scale));
        return;
    }
    if n < 0 {
        out.push(b'-');
    }
    if (-5..=15).contains(&exponent) {
        if exponent >= 0 {
            let whole = exponent as usize + 1;
            out.extend_from_slice(&text[..whole.min(text.len())]);
            out.extend(std::iter::repeat_n(b'0', whole.saturating_sub(text.len())));
            out.push(b'.');
            if text.len() > whole {
                out.extend_from_slice(&text[whole..]);
            } else {
                out.push(b'0');
            }
        } else {
            out.extend_from_slice(b"0.");
            out.extend(std::iter::repeat_n(b'0', (-exponent - 1) as usize));
            out.extend_from_slice(text);
        }
    } else {
        out.push(text[0]);
        if text.len() > 1 {
            out.push(b'.');
            out.extend_from_slice(&text[1..]);
        }
        out.push(b'e');
        if exponent > 0 {
            out.push(b'+');
        }
        out.extend_from_slice(itoa::Buffer::new().format(exponent).as_bytes());
    }
}

/// Scratch buffers reused from value to value.
#[derive(Default)]
struct Scratch {
    text: Vec<u8>,
    bytes: Vec<u8>,
    key: Vec<u8>,
}

/// One member's value, read as `kind` and written to `out`; `Ok(false)` for a null.
fn put_member(p: &mut Cursor, kind: Kind, out: &mut Vec<u8>, s: &mut Scratch) -> Parsed<bool> {
    match p.peek().ok_or(Refused)? {
        b'n' => {
            p.literal(b"null")?;
            return Ok(false);
        }
        b't' if matches!(kind, Kind::Bool) => {
            p.literal(b"true")?;
            out.extend_from_slice(b"true");
        }
        b'f' if matches!(kind, Kind::Bool) => {
            p.literal(b"false")?;
            out.extend_from_slice(b"false");
        }
        b'"' if matches!(kind, Kind::Text) => {
            // Without escapes the text is already as orjson writes it (no quote, backslash or
            // control character in it): copied as it is.
            let end = plain_run(p.buf, p.pos + 1);
            if p.buf.get(end) == Some(&b'"') {
                out.extend_from_slice(&p.buf[p.pos..=end]);
                p.pos = end + 1;
            } else {
                string(p, &mut s.text)?;
                put_text(out, &s.text);
            }
        }
        b'"' => {
            string(p, &mut s.text)?;
            match kind {
                Kind::Bytes => {
                    base64(&s.text, &mut s.bytes)?;
                    put_base64(out, &s.bytes);
                }
                Kind::Decimal(scale) => {
                    base64(&s.text, &mut s.bytes)?;
                    if s.bytes.len() > 16 {
                        return Err(Refused);
                    }
                    // Big-endian two's complement, sign-extended to 128 bits.
                    let fill = if s.bytes.first().is_some_and(|&b| b & 0x80 != 0) {
                        0xff
                    } else {
                        0
                    };
                    let mut wide = [fill; 16];
                    wide[16 - s.bytes.len()..].copy_from_slice(&s.bytes);
                    put_decimal(out, i128::from_be_bytes(wide), scale);
                }
                // How Jackson writes non-finite doubles; orjson writes them as null.
                Kind::Float if matches!(&s.text[..], b"NaN" | b"Infinity" | b"-Infinity") => {
                    out.extend_from_slice(b"null");
                }
                _ => return Err(Refused),
            }
        }
        b'-' | b'0'..=b'9' => match (p.number()?, kind) {
            (Number::Int(n), Kind::Int(lo, hi)) if (lo..=hi).contains(&n) => put_int(out, n),
            (Number::Int(n), Kind::Float) => put_double(out, n as f64),
            (Number::Float(x), Kind::Float) => put_double(out, x),
            (Number::Int(days), Kind::Date) if (DAYS.0..=DAYS.1).contains(&days) => {
                put_date(out, days)
            }
            (Number::Int(ms), Kind::Time) if (0..86_400_000).contains(&ms) => {
                out.push(b'"');
                put_time(out, ms);
                out.push(b'"');
            }
            (Number::Int(ms), Kind::Timestamp) if (MILLIS.0..=MILLIS.1).contains(&ms) => {
                out.push(b'"');
                put_date_text(out, ms.div_euclid(86_400_000));
                out.push(b'T');
                put_time(out, ms.rem_euclid(86_400_000));
                out.extend_from_slice(b"+00:00\"");
            }
            _ => return Err(Refused),
        },
        _ => return Err(Refused),
    }
    Ok(true)
}

/// Where each field's value was written in the scratch document: (start, end), or none yet.
type Spans = Vec<Option<(usize, usize)>>;

/// One envelope's document appended to `out`.
fn document(
    raw: &[u8],
    plans: &[Plan<Vec<Field>>],
    last: &mut usize,
    out: &mut Vec<u8>,
    values: &mut Vec<u8>,
    spans: &mut Spans,
    s: &mut Scratch,
) -> Result<(), Stop> {
    let mut p = Cursor { buf: raw, pos: 0 };
    *last = open(&mut p, plans, *last)?;
    let fields = &plans[*last].body;
    if p.peek() != Some(b'{') {
        return Err(Stop::Refused); // a null payload (the value would be a tombstone), or not a struct
    }
    p.pos += 1;
    values.clear();
    spans.clear();
    spans.resize(fields.len(), None);
    let mut next = 0; // the field expected next: payloads usually follow the schema's order
    p.skip_ws();
    if p.peek() == Some(b'}') {
        p.pos += 1;
    } else {
        loop {
            p.skip_ws();
            string(&mut p, &mut s.key)?;
            p.skip_ws();
            p.expect(b':')?;
            p.skip_ws();
            let at = if next < fields.len() && fields[next].name == s.key {
                Some(next)
            } else {
                fields.iter().position(|f| f.name == s.key)
            };
            match at {
                Some(i) => {
                    if spans[i].is_some() {
                        return Err(Stop::Refused); // a duplicate member: orjson keeps the last
                    }
                    let start = values.len();
                    let present = put_member(&mut p, fields[i].kind, values, s)?;
                    if !present {
                        values.extend_from_slice(fields[i].null.as_deref().ok_or(Refused)?);
                    }
                    spans[i] = Some((start, values.len()));
                    next = i + 1;
                }
                None => skip_value(&mut p, 0)?, // not in the schema: the converter ignores it
            }
            p.skip_ws();
            match p.next() {
                Some(b',') => {}
                Some(b'}') => break,
                _ => return Err(Stop::Refused),
            }
        }
    }
    close(&mut p)?;
    out.push(b'{');
    for (i, (field, span)) in fields.iter().zip(spans.iter()).enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(&field.key);
        match span {
            Some((start, end)) => out.extend_from_slice(&values[*start..*end]),
            None => out.extend_from_slice(field.null.as_deref().ok_or(Refused)?),
        }
    }
    out.push(b'}');
    Ok(())
}

/// The batch's values as borrowed bytes (`None` for a tombstone), with the owning references.
type Borrowed<'py> = (
    Vec<Option<Bound<'py, PyBytes>>>,
    Vec<Option<(usize, usize)>>,
);

fn borrow<'py>(raws: &Bound<'py, PyList>) -> Option<Borrowed<'py>> {
    let mut owned = Vec::with_capacity(raws.len());
    for item in raws.iter() {
        if item.is_none() {
            owned.push(None);
        } else {
            owned.push(Some(item.downcast_into::<PyBytes>().ok()?));
        }
    }
    let pointers = owned
        .iter()
        .map(|b| {
            b.as_ref()
                .map(|b| (b.as_bytes().as_ptr() as usize, b.as_bytes().len()))
        })
        .collect();
    Some((owned, pointers))
}

/// What a batch came to: per value the span of its output (`None` for a tombstone), or a stop.
type Written = Result<(Vec<u8>, Vec<Option<(usize, usize)>>), Stop>;

/// Runs `each` over the borrowed values with the GIL released, collecting the outputs' spans.
fn write_all(
    pointers: &[Option<(usize, usize)>],
    mut each: impl FnMut(&[u8], &mut Vec<u8>) -> Result<(), Stop>,
) -> Written {
    let mut out = Vec::with_capacity(pointers.len() * 256);
    let mut spans = Vec::with_capacity(pointers.len());
    for (i, pointer) in pointers.iter().enumerate() {
        let Some((ptr, len)) = *pointer else {
            spans.push(None);
            continue;
        };
        // SAFETY: the pointers point into bytes objects the caller holds until the batch is done.
        let raw = unsafe { std::slice::from_raw_parts(ptr as *const u8, len) };
        let start = out.len();
        each(raw, &mut out).map_err(|stop| match stop {
            Stop::Unknown(_, start, end) => Stop::Unknown(i, start, end),
            refused => refused,
        })?;
        spans.push(Some((start, out.len())));
    }
    Ok((out, spans))
}

/// The Python answer for a written batch: its outputs made by `make`, the unknown schema's text,
/// or `None` (refused).
fn answer<'py>(
    py: Python<'py>,
    raws: &Bound<'py, PyList>,
    written: Written,
    mut make: impl FnMut(&[u8]) -> PyResult<Bound<'py, PyAny>>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    match written {
        Ok((data, spans)) => {
            let list = PyList::empty(py);
            for span in spans {
                match span {
                    Some((start, end)) => list.append(make(&data[start..end])?)?,
                    None => list.append(py.None())?,
                }
            }
            Ok(Some(list.into_any()))
        }
        Err(Stop::Unknown(index, start, end)) => {
            let value = raws.get_item(index)?;
            let raw = value.downcast::<PyBytes>()?.as_bytes();
            Ok(Some(PyBytes::new(py, &raw[start..end]).into_any()))
        }
        Err(Stop::Refused) => Ok(None),
    }
}

/// A value plan from Python: one `(name, key, kind, lo, hi, scale, null)` per field.
type FieldPlan = (Vec<u8>, Vec<u8>, String, i64, i64, u32, Option<Vec<u8>>);

/// Each of `raws` (JsonConverter envelopes, or `None` for a tombstone) as the JSON document
/// `orjson.dumps` writes for its decoded value with the Elasticsearch sink's fallback.
///
/// `plans`: one `(schema text, fields)` per schema known, `fields` one `(name, key, kind, lo, hi,
/// scale, null)` per field of the struct in schema order: `name` the member name (UTF-8), `key`
/// its JSON text followed by a colon, `kind` one of `int` (within `lo..=hi`), `float`, `boolean`,
/// `string`, `bytes`, `decimal` (of `scale`), `date`, `time`, `timestamp`; `null` the JSON text a
/// null or missing member becomes, or `None` when it is refused.
///
/// Returns the list of documents (`bytes`, `None` for a tombstone); or `bytes`, the text of the
/// first schema not among `plans` (plan it and call again); or `None` for a batch it refuses (see
/// the module docs). The GIL is released while reading.
#[pyfunction]
pub fn envelope_documents<'py>(
    py: Python<'py>,
    raws: &Bound<'py, PyList>,
    plans: Vec<(Vec<u8>, Vec<FieldPlan>)>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let mut built = Vec::with_capacity(plans.len());
    for (schema, fields) in plans {
        let mut body = Vec::with_capacity(fields.len());
        for (name, key, kind, lo, hi, scale, null) in fields {
            body.push(Field {
                name,
                key,
                kind: kind_of(&kind, lo, hi, scale)?,
                null,
            });
        }
        built.push(Plan { schema, body });
    }
    let Some((owned, pointers)) = borrow(raws) else {
        return Ok(None);
    };
    let written = py.allow_threads(|| {
        let (mut last, mut values, mut spans, mut scratch) =
            (0, Vec::new(), Vec::new(), Scratch::default());
        write_all(&pointers, |raw, out| {
            document(
                raw,
                &built,
                &mut last,
                out,
                &mut values,
                &mut spans,
                &mut scratch,
            )
        })
    });
    let answer = answer(
        py,
        raws,
        written,
        |doc| Ok(PyBytes::new(py, doc).into_any()),
    );
    drop(owned);
    answer
}

/// How a key schema is read: its kind (`int` or `string`), an int's range, and whether a null
/// payload is allowed (an optional schema without a default).
type KeyPlan = (String, i64, i64, bool);

/// One key envelope's id (UTF-8 text) appended to `out`; a null key writes nothing and is told
/// apart by `nulls`.
fn id(
    raw: &[u8],
    plans: &[Plan<KeyPlan>],
    last: &mut usize,
    out: &mut Vec<u8>,
    nulls: &mut Vec<bool>,
    scratch: &mut Vec<u8>,
) -> Result<(), Stop> {
    let mut p = Cursor { buf: raw, pos: 0 };
    *last = open(&mut p, plans, *last)?;
    let (kind, lo, hi, nullable) = &plans[*last].body;
    match p.peek().ok_or(Refused)? {
        b'n' if *nullable => {
            p.literal(b"null")?;
            nulls.push(true);
            close(&mut p)?;
            return Ok(());
        }
        b'"' if kind == "string" => {
            string(&mut p, scratch)?;
            out.extend_from_slice(scratch);
        }
        b'-' | b'0'..=b'9' if kind == "int" => match p.number()? {
            Number::Int(n) if (*lo..=*hi).contains(&n) => put_int(out, n),
            _ => return Err(Stop::Refused),
        },
        _ => return Err(Stop::Refused),
    }
    nulls.push(false);
    close(&mut p)?;
    Ok(())
}

/// Each of `raws` (JsonConverter envelopes of a primitive key, or `None`) as the document id the
/// Elasticsearch sink makes of its decoded key: an integer's decimal text, a string itself.
///
/// `plans`: one `(schema text, (kind, lo, hi, nullable))` per key schema known: `kind` `int`
/// (within `lo..=hi`) or `string`; `nullable` whether a null payload reads as a null key.
///
/// Returns the list of ids (`str`, `None` for a null key or a `None` value); or `bytes`, the text
/// of the first schema not among `plans`; or `None` for a batch it refuses.
#[pyfunction]
pub fn envelope_ids<'py>(
    py: Python<'py>,
    raws: &Bound<'py, PyList>,
    plans: Vec<(Vec<u8>, KeyPlan)>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    for (_, (kind, ..)) in &plans {
        if kind != "int" && kind != "string" {
            return Err(PyValueError::new_err(format!("unknown key kind {kind:?}")));
        }
    }
    let built: Vec<Plan<KeyPlan>> = plans
        .into_iter()
        .map(|(schema, body)| Plan { schema, body })
        .collect();
    let Some((owned, pointers)) = borrow(raws) else {
        return Ok(None);
    };
    let mut nulls = Vec::with_capacity(pointers.len());
    let written = py.allow_threads(|| {
        let (mut last, mut scratch) = (0, Vec::new());
        write_all(&pointers, |raw, out| {
            id(raw, &built, &mut last, out, &mut nulls, &mut scratch)
        })
    });
    let mut null_at = nulls.into_iter();
    let answer = answer(py, raws, written, |text| {
        if null_at.next().unwrap_or(false) {
            return Ok(py.None().into_bound(py));
        }
        // The ids were checked as UTF-8 with the whole value.
        let text = std::str::from_utf8(text).map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(PyString::new(py, text).into_any())
    });
    drop(owned);
    answer
}
