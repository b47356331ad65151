//! `parse_json_envelopes`: JsonConverter's `{"schema": …, "payload": …}` envelopes (with
//! `schemas.enable=true`), read as the columns of their payloads plus the distinct schemas.
//!
//! Each value must be an object of exactly the two members `schema` and `payload` (in either
//! order, as Connect's JsonConverter requires), the payload a flat object read exactly as
//! `parse_json_objects` reads one. The schema is not interpreted here: its bytes are skipped and
//! kept once per distinct text, so that the caller parses and checks each distinct schema once,
//! not once per record. Anything else (a tombstone, a null payload, a third member, a payload
//! that is not a flat object) refuses the whole batch with `None`.

use std::collections::HashMap;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use crate::{borrow_values, buffers, Batch, ColumnBuffers, Cursor, Parsed, Refused, Values};

/// What a parsed batch of envelopes holds besides its payload columns.
struct Envelopes {
    batch: Batch,
    /// The distinct schema texts, in the order first seen.
    schemas: Vec<(*const u8, usize)>,
    /// Per row, the index of its schema in `schemas`.
    schema_of_row: Vec<u32>,
}

// SAFETY: the schema pointers point into the caller's bytes, held until the parse is done.
unsafe impl Send for Envelopes {}

fn parse_envelopes(values: &Values) -> Parsed<Envelopes> {
    let mut batch = Batch::new(values.0.len());
    let mut distinct: HashMap<&[u8], u32> = HashMap::new();
    let mut schemas = Vec::new();
    let mut schema_of_row = Vec::with_capacity(values.0.len());
    let mut last: &[u8] = &[];
    let mut last_index = 0u32;
    for &(ptr, len) in &values.0 {
        // SAFETY: see `Values`.
        let raw: &[u8] = unsafe { std::slice::from_raw_parts(ptr, len) };
        if !raw.is_ascii() && std::str::from_utf8(raw).is_err() {
            return Err(Refused);
        }
        let schema = envelope(&mut batch, raw, last)?;
        // Records of a topic almost always repeat the schema of the one before: one comparison.
        let index = if !schema_of_row.is_empty() && schema == last {
            last_index
        } else {
            let next = u32::try_from(schemas.len()).map_err(|_| Refused)?;
            let index = *distinct.entry(schema).or_insert(next);
            if index == next {
                schemas.push((schema.as_ptr(), schema.len()));
            }
            index
        };
        last = schema;
        last_index = index;
        schema_of_row.push(index);
    }
    Ok(Envelopes {
        batch,
        schemas,
        schema_of_row,
    })
}

/// One envelope: its payload becomes the batch's next row; returns the schema's bytes. `last` is
/// the previous envelope's schema (empty for the first).
fn envelope<'a>(batch: &mut Batch, raw: &'a [u8], last: &[u8]) -> Parsed<&'a [u8]> {
    let mut p = Cursor { buf: raw, pos: 0 };
    p.skip_ws();
    p.expect(b'{')?;
    let mut schema: Option<&[u8]> = None;
    let mut payload = false;
    loop {
        p.skip_ws();
        p.expect(b'"')?;
        let member = if raw[p.pos..].starts_with(b"schema\"") {
            p.pos += 7;
            0
        } else if raw[p.pos..].starts_with(b"payload\"") {
            p.pos += 8;
            1
        } else {
            return Err(Refused); // another member (or an escaped name): the converter decides
        };
        p.skip_ws();
        p.expect(b':')?;
        p.skip_ws();
        if member == 0 {
            if schema.is_some() {
                return Err(Refused);
            }
            let start = p.pos;
            // The same bytes as the last schema, an object found whole there: it ends where that
            // one did (an object's extent is fixed by its own bytes), so it need not be scanned.
            if last.first() == Some(&b'{') && raw[start..].starts_with(last) {
                p.pos += last.len();
            } else {
                skip_value(&mut p, 0)?;
            }
            schema = Some(&raw[start..p.pos]);
        } else {
            if payload || p.peek() != Some(b'{') {
                return Err(Refused); // a second payload, or one that is not an object
            }
            batch.object(&mut p)?;
            payload = true;
        }
        p.skip_ws();
        match p.next() {
            Some(b',') => {}
            Some(b'}') => break,
            _ => return Err(Refused),
        }
    }
    p.skip_ws();
    match schema {
        Some(schema) if payload && p.pos == raw.len() => Ok(schema),
        _ => Err(Refused),
    }
}

/// Moves the cursor past one JSON value (checked only as far as finding its end takes: the
/// caller parses the schema text itself).
pub(crate) fn skip_value(p: &mut Cursor, depth: usize) -> Parsed<()> {
    if depth > 64 {
        return Err(Refused);
    }
    match p.peek().ok_or(Refused)? {
        b'"' => {
            p.pos += 1;
            let mut scratch = Vec::new();
            p.string_into(&mut scratch)
        }
        open @ (b'{' | b'[') => {
            let close = if open == b'{' { b'}' } else { b']' };
            p.pos += 1;
            p.skip_ws();
            if p.peek() == Some(close) {
                p.pos += 1;
                return Ok(());
            }
            loop {
                if open == b'{' {
                    p.expect(b'"')?;
                    let mut scratch = Vec::new();
                    p.string_into(&mut scratch)?;
                    p.skip_ws();
                    p.expect(b':')?;
                    p.skip_ws();
                }
                skip_value(p, depth + 1)?;
                p.skip_ws();
                match p.next() {
                    Some(b',') => p.skip_ws(),
                    Some(byte) if byte == close => return Ok(()),
                    _ => return Err(Refused),
                }
            }
        }
        b't' => p.literal(b"true"),
        b'f' => p.literal(b"false"),
        b'n' => p.literal(b"null"),
        b'-' | b'0'..=b'9' => p.number().map(|_| ()),
        _ => Err(Refused),
    }
}

/// The payload columns, the distinct schema texts and each row's schema, for Python.
type EnvelopeBuffers<'py> = (
    usize,
    Vec<ColumnBuffers<'py>>,
    Vec<Bound<'py, PyBytes>>,
    Bound<'py, PyBytes>,
);

/// Parse a list of JsonConverter envelopes (bytes) into the Arrow column buffers of their
/// payloads, as `parse_json_objects` does for plain objects.
///
/// Returns ``(rows, columns, schemas, schema_of_row)``: ``columns`` as `parse_json_objects`
/// gives them; ``schemas`` the distinct texts of the ``schema`` members, in the order first seen;
/// ``schema_of_row`` the index into ``schemas`` of each row, as little-endian ``uint32`` bytes. Or
/// ``None`` if any value is not such an envelope (see the module docs). The GIL is released while
/// parsing.
#[pyfunction]
pub fn parse_json_envelopes<'py>(
    py: Python<'py>,
    raws: &Bound<'py, PyList>,
) -> PyResult<Option<EnvelopeBuffers<'py>>> {
    let Some((owned, values)) = borrow_values(raws) else {
        return Ok(None); // a tombstone, or not bytes
    };
    let parsed = py.allow_threads(move || parse_envelopes(&values));
    let Ok(envelopes) = parsed else {
        return Ok(None);
    };
    let schemas = envelopes
        .schemas
        .iter()
        // SAFETY: the pointers point into `owned`, still alive here.
        .map(|&(ptr, len)| PyBytes::new(py, unsafe { std::slice::from_raw_parts(ptr, len) }))
        .collect();
    drop(owned);
    let columns = envelopes
        .batch
        .columns
        .iter()
        .map(|c| buffers(py, c))
        .collect::<Parsed<Vec<_>>>();
    let Ok(columns) = columns else {
        return Ok(None);
    };
    let rows: Vec<u8> = envelopes
        .schema_of_row
        .iter()
        .flat_map(|i| i.to_le_bytes())
        .collect();
    Ok(Some((
        envelopes.batch.rows,
        columns,
        schemas,
        PyBytes::new(py, &rows),
    )))
}
