//! pgoutput row changes → the JSON bytes of Debezium change events.
//!
//! A `CdcEncoder` is built per captured table from what the Python decoder knows (each column's
//! conversion, the converters' settings, the constant parts of the envelope) and turns one
//! Insert, Update or Delete message into the key and value bytes that the JsonConverter would
//! write for the records the Python decoder would build: the same fields in the same order, the
//! same number and string layout (Java's for doubles, Jackson's string escapes).
//!
//! It covers the column conversions that make up most tables (integers, booleans, doubles,
//! text, bytea, fixed-scale numerics, timestamps, dates, times) and the common shapes of their
//! values. Anything else (an unchanged TOASTed value, a required column that is null, a double
//! Java would print in exponent form, a timestamp not in UTC, a column count that does not match
//! the relation) returns 0 before anything is appended, and the caller decodes the message the
//! ordinary way, which is the one place that decides what such a value becomes. The tests
//! compare both paths byte for byte.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

/// How one column's text becomes JSON.
#[derive(Clone, Copy)]
enum Kind {
    /// int2/int4/int8/oid: the text is the number.
    Int,
    /// `t` is true, anything else false.
    Bool,
    /// A double, printed as orjson prints it where that agrees with Java (1e-3 <= |x| < 1e7, 0).
    F64,
    /// A JSON string of the (UTF-8) text.
    Str,
    /// A fixed-scale numeric as Connect's Decimal with base64 bytes: the unscaled value.
    Decimal(u32),
    /// timestamptz as Debezium's ZonedTimestamp, the fraction padded to this many digits.
    Zoned(u32),
    /// timestamp as microseconds since the epoch.
    Micros,
    /// timestamp as milliseconds since the epoch (floored).
    Millis,
    /// date as days since the epoch.
    Date,
    /// time as microseconds of the day.
    TimeMicros,
    /// time as milliseconds of the day (floored).
    TimeMillis,
    /// time as Connect's `Time`: milliseconds of the day, 24:00:00 wrapping to midnight.
    TimeOfDayMillis,
    /// bytea (hex output) as base64 bytes.
    Bytea,
}

struct Col {
    kind: Kind,
    /// `"name":`, escaped.
    name: Vec<u8>,
    keep: bool,
    optional: bool,
    /// What a required column holds in an old-key tuple that does not carry it (Debezium's zero).
    zero: Vec<u8>,
}

#[pyclass(frozen, module = "sluice_native")]
pub struct CdcEncoder {
    cols: Vec<Col>,
    /// Indexes of the key columns (all kept), in key order; empty for a table without a key.
    key: Vec<usize>,
    /// Columns whose old-key null is replaced by `zero` (required, kept, not in the key).
    fill: Vec<bool>,
    key_head: Vec<u8>,
    key_tail: Vec<u8>,
    value_head: Vec<u8>,
    value_tail: Vec<u8>,
    /// `,"source":{"version":…,"name":…,"ts_ms":`
    source_head: Vec<u8>,
    /// `,"snapshot":"false","db":…,"sequence":"[\"`
    source_db: Vec<u8>,
    /// `,"schema":…,"table":…,"txId":`
    source_table: Vec<u8>,
    /// The database name as a JSON string (snapshot rows' `source.db`).
    db: Vec<u8>,
    tombstones: bool,
}

/// One event's position and times.
struct Stamp {
    lsn: u64,
    xid: i64,
    commit_us: i64,
    last_commit_lsn: u64,
    now_ns: i64,
}

type Tuple<'a> = Vec<Option<&'a [u8]>>;

const INSERT: i32 = 1;
const UPDATE: i32 = 2;
const DELETE: i32 = 3;

#[pymethods]
impl CdcEncoder {
    /// `columns`: `(kind, "name":, keep, optional, zero)` per column in relation order, with kind
    /// one of `int`, `bool`, `f64`, `str`, `decimal:<scale>`, `zoned:<digits>`, `micros`,
    /// `millis`, `date`, `time_micros`, `time_millis`, `bytea`. `key`: key column indexes. `envelope`: `(key_head, key_tail, value_head,
    /// value_tail, source_head, source_db, source_table, db)`.
    #[new]
    #[allow(clippy::type_complexity)]
    fn new(
        columns: Vec<(String, Vec<u8>, bool, bool, Vec<u8>)>,
        key: Vec<usize>,
        envelope: (
            Vec<u8>,
            Vec<u8>,
            Vec<u8>,
            Vec<u8>,
            Vec<u8>,
            Vec<u8>,
            Vec<u8>,
            Vec<u8>,
        ),
        tombstones: bool,
    ) -> PyResult<Self> {
        let mut cols = Vec::with_capacity(columns.len());
        for (kind, name, keep, optional, zero) in columns {
            let kind = parse_kind(&kind).ok_or_else(|| {
                pyo3::exceptions::PyValueError::new_err(format!("unknown column kind {kind:?}"))
            })?;
            cols.push(Col {
                kind,
                name,
                keep,
                optional,
                zero,
            });
        }
        if key.iter().any(|&i| i >= cols.len() || !cols[i].keep) {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "key columns must be kept columns",
            ));
        }
        let fill = cols
            .iter()
            .enumerate()
            .map(|(i, c)| c.keep && !c.optional && !key.contains(&i))
            .collect();
        let (key_head, key_tail, value_head, value_tail, source_head, source_db, source_table, db) =
            envelope;
        Ok(CdcEncoder {
            cols,
            key,
            fill,
            key_head,
            key_tail,
            value_head,
            value_tail,
            source_head,
            source_db,
            source_table,
            db,
            tombstones,
        })
    }

    /// Encode one XLogData message (`w`, its 25-byte header, then an Insert, Update or Delete)
    /// and append each record's key and value to `keys` and `values` (a tombstone's value is
    /// `None`). Returns 1, 2 or 3 for an insert, update or delete (what the last record is), or
    /// 0, with nothing appended, when the ordinary decoder must take the message.
    #[allow(clippy::too_many_arguments)]
    fn encode(
        &self,
        py: Python<'_>,
        buf: &[u8],
        xid: i64,
        commit_us: i64,
        last_commit_lsn: u64,
        now_ns: i64,
        keys: &Bound<'_, PyList>,
        values: &Bound<'_, PyList>,
    ) -> PyResult<i32> {
        if buf.len() < 31 || buf[0] != b'w' {
            return Ok(0);
        }
        let stamp = Stamp {
            lsn: u64::from_be_bytes(buf[1..9].try_into().unwrap()),
            xid,
            commit_us,
            last_commit_lsn,
            now_ns,
        };
        let Some(out) = self.events(buf, &stamp) else {
            return Ok(0);
        };
        let (code, events) = out;
        self.append(py, events, keys, values)?;
        Ok(code)
    }

    /// Encode a snapshot chunk: `blob` is the text of `COPY (SELECT <kept columns> …) TO STDOUT`,
    /// one row per line. Appends every row's key and `r` event value and returns `True`, or
    /// returns `False` with nothing appended when any row needs the ordinary path. `snapshot` is
    /// the `source.snapshot` value (`true` or `incremental`); `first` and `last`, when given, are
    /// the markers of the first and the last row (Debezium's `first`, `last_in_data_collection`,
    /// ...); a single row that is both keeps the one Debezium ranks first.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (blob, snapshot, first, last, lsn, txid, now_ns, keys, values))]
    fn encode_copy(
        &self,
        py: Python<'_>,
        blob: &[u8],
        snapshot: &str,
        first: Option<&str>,
        last: Option<&str>,
        lsn: u64,
        txid: Option<i64>,
        now_ns: i64,
        keys: &Bound<'_, PyList>,
        values: &Bound<'_, PyList>,
    ) -> PyResult<bool> {
        let body = blob.strip_suffix(b"\n").unwrap_or(blob);
        if body.is_empty() {
            return Ok(true);
        }
        let lines: Vec<&[u8]> = body.split(|&b| b == b'\n').collect();
        let mut events = Vec::with_capacity(lines.len());
        let count = lines.len();
        for (i, line) in lines.iter().enumerate() {
            let as_first = if i == 0 { first } else { None };
            let as_last = if i + 1 == count { last } else { None };
            let kind = match (as_first, as_last) {
                (Some(f), Some(l)) => {
                    if marker_rank(l) <= marker_rank(f) {
                        l
                    } else {
                        f
                    }
                }
                (Some(f), None) => f,
                (None, Some(l)) => l,
                (None, None) => snapshot,
            };
            let Some(event) = self.snapshot_event(line, kind, lsn, txid, now_ns) else {
                return Ok(false);
            };
            events.push((event.0, Some(event.1)));
        }
        self.append(py, events, keys, values)?;
        Ok(true)
    }
}

/// An event's key and value bodies: the payload only, without the converters' envelope, which
/// [`CdcEncoder::append`] puts around them.
type Event = (Option<Vec<u8>>, Option<Vec<u8>>);

impl CdcEncoder {
    /// Each event's key and value as `bytes` (or `None`) onto the two lists, the schema envelope's
    /// head and tail around each body.
    fn append(
        &self,
        py: Python<'_>,
        events: Vec<Event>,
        keys: &Bound<'_, PyList>,
        values: &Bound<'_, PyList>,
    ) -> PyResult<()> {
        for (key, value) in events {
            match key {
                Some(k) => keys.append(framed(py, &self.key_head, &k, &self.key_tail)?)?,
                None => keys.append(py.None())?,
            }
            match value {
                Some(v) => values.append(framed(py, &self.value_head, &v, &self.value_tail)?)?,
                None => values.append(py.None())?,
            }
        }
        Ok(())
    }

    fn events(&self, buf: &[u8], stamp: &Stamp) -> Option<(i32, Vec<Event>)> {
        let marker = buf[30];
        match buf[25] {
            b'I' => {
                if marker != b'N' {
                    return None;
                }
                let (after, _) = self.tuple(buf, 31)?;
                let key = self.key_json(&after)?;
                let value = self.value(Row::Null, Row::Tuple(&after, false), b'c', stamp)?;
                Some((INSERT, vec![(key, Some(value))]))
            }
            b'U' => {
                let mut pos = 31;
                let mut before = None;
                if marker == b'K' || marker == b'O' {
                    let (old, end) = self.tuple(buf, 31)?;
                    if buf.get(end) != Some(&b'N') {
                        return None;
                    }
                    before = Some((old, marker == b'K'));
                    pos = end + 1;
                } else if marker != b'N' {
                    return None;
                }
                let (after, _) = self.tuple(buf, pos)?;
                let key = self.key_json(&after)?;
                let before_row = match &before {
                    Some((old, old_key)) => {
                        let old_key_json = self.key_json(old)?;
                        if let (Some(old_k), Some(new_k)) = (&old_key_json, &key) {
                            if old_k != new_k {
                                // A primary key change: a delete (and its tombstone) of the old
                                // key, then a create.
                                let deleted =
                                    self.value(Row::Tuple(old, *old_key), Row::Null, b'd', stamp)?;
                                let created =
                                    self.value(Row::Null, Row::Tuple(&after, false), b'c', stamp)?;
                                let mut events = vec![(old_key_json.clone(), Some(deleted))];
                                if self.tombstones {
                                    events.push((old_key_json, None));
                                }
                                events.push((key, Some(created)));
                                return Some((INSERT, events));
                            }
                        }
                        Row::Tuple(old, *old_key)
                    }
                    None => Row::Null,
                };
                let value = self.value(before_row, Row::Tuple(&after, false), b'u', stamp)?;
                Some((UPDATE, vec![(key, Some(value))]))
            }
            b'D' => {
                if marker != b'K' && marker != b'O' {
                    return None;
                }
                let (old, _) = self.tuple(buf, 31)?;
                let key = self.key_json(&old)?;
                let value = self.value(Row::Tuple(&old, marker == b'K'), Row::Null, b'd', stamp)?;
                let mut events = vec![(key.clone(), Some(value))];
                if self.tombstones && key.is_some() {
                    events.push((key, None));
                }
                Some((DELETE, events))
            }
            _ => None,
        }
    }

    /// The column values of a TupleData at `pos`, and where it ends; `None` for an unchanged
    /// TOASTed value, a binary value, or a column count other than the relation's.
    fn tuple<'a>(&self, buf: &'a [u8], mut pos: usize) -> Option<(Tuple<'a>, usize)> {
        let n = u16::from_be_bytes(buf.get(pos..pos + 2)?.try_into().ok()?) as usize;
        if n != self.cols.len() {
            return None;
        }
        pos += 2;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            match *buf.get(pos)? {
                b'n' => {
                    out.push(None);
                    pos += 1;
                }
                b't' => {
                    let len = i32::from_be_bytes(buf.get(pos + 1..pos + 5)?.try_into().ok()?);
                    let len = usize::try_from(len).ok()?;
                    out.push(Some(buf.get(pos + 5..pos + 5 + len)?));
                    pos += 5 + len;
                }
                _ => return None,
            }
        }
        Some((out, pos))
    }

    /// The row's JSON object (kept columns); `old_key`: a REPLICA IDENTITY DEFAULT old tuple, whose
    /// missing required columns get their zero value.
    fn row(&self, out: &mut Vec<u8>, tuple: &Tuple<'_>, old_key: bool) -> Option<()> {
        out.push(b'{');
        let mut first = true;
        for (i, (col, value)) in self.cols.iter().zip(tuple).enumerate() {
            if !col.keep {
                continue;
            }
            if !first {
                out.push(b',');
            }
            first = false;
            out.extend_from_slice(&col.name);
            match value {
                Some(text) => write_value(out, col.kind, text)?,
                None if col.optional => out.extend_from_slice(b"null"),
                None if old_key && self.fill[i] => out.extend_from_slice(&col.zero),
                None => return None, // the converter refuses it: the ordinary path reports it
            }
        }
        out.push(b'}');
        Some(())
    }

    /// The key's bytes (with the key converter's envelope), `None` for a table without a key.
    fn key_json(&self, tuple: &Tuple<'_>) -> Option<Option<Vec<u8>>> {
        if self.key.is_empty() {
            return Some(None);
        }
        let mut out = Vec::with_capacity(32);
        out.push(b'{');
        for (n, &i) in self.key.iter().enumerate() {
            if n > 0 {
                out.push(b',');
            }
            let col = &self.cols[i];
            out.extend_from_slice(&col.name);
            match tuple[i] {
                Some(text) => write_value(&mut out, col.kind, text)?,
                None => return None, // a required key column: the converter refuses it
            }
        }
        out.push(b'}');
        Some(Some(out))
    }

    /// The event's value; `None` when a row holds a value the ordinary path must take.
    fn value(&self, before: Row<'_, '_>, after: Row<'_, '_>, op: u8, s: &Stamp) -> Option<Vec<u8>> {
        let rows = usize::from(!before.is_null()) + usize::from(!after.is_null());
        let size = self.source_head.len()
            + self.source_db.len()
            + self.source_table.len()
            + 200
            + 48 * self.cols.len() * rows;
        let mut out = Vec::with_capacity(size);
        out.extend_from_slice(b"{\"before\":");
        self.write_row(&mut out, before)?;
        out.extend_from_slice(b",\"after\":");
        self.write_row(&mut out, after)?;
        out.extend_from_slice(&self.source_head);
        int(&mut out, s.commit_us.div_euclid(1000));
        out.extend_from_slice(&self.source_db);
        int(&mut out, s.last_commit_lsn);
        out.extend_from_slice(b"\\\",\\\"");
        int(&mut out, s.lsn);
        out.extend_from_slice(b"\\\"]\",\"ts_us\":");
        int(&mut out, s.commit_us);
        out.extend_from_slice(b",\"ts_ns\":");
        int(&mut out, s.commit_us as i128 * 1000);
        out.extend_from_slice(&self.source_table);
        int(&mut out, s.xid);
        out.extend_from_slice(b",\"lsn\":");
        int(&mut out, s.lsn);
        out.extend_from_slice(
            b",\"xmin\":null,\"origin\":null,\"origin_lsn\":null},\"transaction\":null,\"op\":\"",
        );
        out.push(op);
        out.extend_from_slice(b"\",\"ts_ms\":");
        int(&mut out, s.now_ns.div_euclid(1_000_000));
        out.extend_from_slice(b",\"ts_us\":");
        int(&mut out, s.now_ns.div_euclid(1000));
        out.extend_from_slice(b",\"ts_ns\":");
        int(&mut out, s.now_ns);
        out.push(b'}');
        Some(out)
    }

    /// One COPY text line (the kept columns, tab-separated) → the row's key and `r` event value.
    fn snapshot_event(
        &self,
        line: &[u8],
        snapshot: &str,
        lsn: u64,
        txid: Option<i64>,
        now_ns: i64,
    ) -> Option<(Option<Vec<u8>>, Vec<u8>)> {
        let mut fields = line.split(|&b| b == b'\t');
        let mut owned: Vec<Option<Vec<u8>>> = Vec::with_capacity(self.cols.len());
        let mut raw: Vec<Option<&[u8]>> = Vec::with_capacity(self.cols.len());
        for col in &self.cols {
            if !col.keep {
                owned.push(None);
                raw.push(None);
                continue;
            }
            let field = fields.next()?;
            if field == b"\\N" {
                owned.push(None);
                raw.push(None);
            } else if field.contains(&b'\\') {
                owned.push(Some(unescape_copy(field)?));
                raw.push(Some(b""));
            } else {
                owned.push(None);
                raw.push(Some(field));
            }
        }
        if fields.next().is_some() {
            return None; // more fields than kept columns
        }
        let tuple: Tuple<'_> = raw
            .iter()
            .zip(&owned)
            .map(|(r, o)| match (r, o) {
                (_, Some(v)) => Some(v.as_slice()),
                (r, None) => *r,
            })
            .collect();
        let key = self.key_json(&tuple)?;
        let mut out = Vec::with_capacity(256 + 48 * self.cols.len());
        out.extend_from_slice(b"{\"before\":null,\"after\":");
        self.row(&mut out, &tuple, false)?;
        out.extend_from_slice(&self.source_head);
        int(&mut out, now_ns.div_euclid(1_000_000));
        out.extend_from_slice(b",\"snapshot\":\"");
        out.extend_from_slice(snapshot.as_bytes());
        out.extend_from_slice(b"\",\"db\":");
        out.extend_from_slice(&self.db);
        // The initial snapshot's point (`txid` given): `[null,"<lsn>"]` as the sequence, as
        // Debezium writes it; incremental snapshot rows have none.
        if txid.is_some() {
            out.extend_from_slice(b",\"sequence\":\"[null,\\\"");
            int(&mut out, lsn);
            out.extend_from_slice(b"\\\"]\",\"ts_us\":");
        } else {
            out.extend_from_slice(b",\"sequence\":null,\"ts_us\":");
        }
        int(&mut out, now_ns.div_euclid(1000));
        out.extend_from_slice(b",\"ts_ns\":");
        int(&mut out, now_ns);
        out.extend_from_slice(&self.source_table);
        match txid {
            Some(id) => int(&mut out, id),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"lsn\":");
        int(&mut out, lsn);
        out.extend_from_slice(b",\"xmin\":null,\"origin\":null,\"origin_lsn\":null},\"transaction\":null,\"op\":\"r\",\"ts_ms\":");
        int(&mut out, now_ns.div_euclid(1_000_000));
        out.extend_from_slice(b",\"ts_us\":");
        int(&mut out, now_ns.div_euclid(1000));
        out.extend_from_slice(b",\"ts_ns\":");
        int(&mut out, now_ns);
        out.push(b'}');
        Some((key, out))
    }

    fn write_row(&self, out: &mut Vec<u8>, row: Row<'_, '_>) -> Option<()> {
        match row {
            Row::Null => {
                out.extend_from_slice(b"null");
                Some(())
            }
            Row::Tuple(tuple, old_key) => self.row(out, tuple, old_key),
        }
    }
}

/// `before` or `after`: null, or a tuple (`true`: a REPLICA IDENTITY DEFAULT old key).
#[derive(Clone, Copy)]
enum Row<'t, 'b> {
    Null,
    Tuple(&'t Tuple<'b>, bool),
}

impl Row<'_, '_> {
    fn is_null(&self) -> bool {
        matches!(self, Row::Null)
    }
}

fn parse_kind(kind: &str) -> Option<Kind> {
    Some(match kind {
        "int" => Kind::Int,
        "bool" => Kind::Bool,
        "f64" => Kind::F64,
        "str" => Kind::Str,
        "micros" => Kind::Micros,
        "millis" => Kind::Millis,
        "date" => Kind::Date,
        "time_micros" => Kind::TimeMicros,
        "time_millis" => Kind::TimeMillis,
        "time_of_day_millis" => Kind::TimeOfDayMillis,
        "bytea" => Kind::Bytea,
        _ => {
            let (name, n) = kind.split_once(':')?;
            let n: u32 = n.parse().ok()?;
            match name {
                "decimal" if n <= 38 => Kind::Decimal(n),
                "zoned" if n <= 9 => Kind::Zoned(n),
                _ => return None,
            }
        }
    })
}

/// `head`, `body` and `tail` as one new `bytes`, written straight into it: with the schema
/// envelope the constant head is most of a record, and building the record in a buffer first
/// copied (and allocated) it twice.
fn framed<'py>(
    py: Python<'py>,
    head: &[u8],
    body: &[u8],
    tail: &[u8],
) -> PyResult<Bound<'py, PyAny>> {
    if head.is_empty() && tail.is_empty() {
        return Ok(PyBytes::new(py, body).into_any());
    }
    let len = head.len() + body.len() + tail.len();
    let size = pyo3::ffi::Py_ssize_t::try_from(len)
        .map_err(|_| pyo3::exceptions::PyOverflowError::new_err("record too large"))?;
    // SAFETY: PyBytes_FromStringAndSize(NULL, n) returns a new bytes object (or NULL with an
    // exception set) whose n bytes are ours to fill before anyone else sees it; the three copies
    // fill exactly those n bytes.
    unsafe {
        let ptr = pyo3::ffi::PyBytes_FromStringAndSize(std::ptr::null(), size);
        let bytes = Bound::from_owned_ptr_or_err(py, ptr)?;
        let dst = pyo3::ffi::PyBytes_AsString(ptr).cast::<u8>();
        std::ptr::copy_nonoverlapping(head.as_ptr(), dst, head.len());
        std::ptr::copy_nonoverlapping(body.as_ptr(), dst.add(head.len()), body.len());
        std::ptr::copy_nonoverlapping(tail.as_ptr(), dst.add(head.len() + body.len()), tail.len());
        Ok(bytes)
    }
}

fn int(out: &mut Vec<u8>, n: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// One column value's JSON; `None` when it is not in the shape this module handles.
fn write_value(out: &mut Vec<u8>, kind: Kind, text: &[u8]) -> Option<()> {
    match kind {
        Kind::Int => {
            let digits = text.strip_prefix(b"-").unwrap_or(text);
            if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
                return None;
            }
            if digits.len() > 1 && digits[0] == b'0' {
                return None;
            }
            out.extend_from_slice(text);
        }
        Kind::Bool => out.extend_from_slice(if text == b"t" { b"true" } else { b"false" }),
        Kind::F64 => {
            let x: f64 = std::str::from_utf8(text).ok()?.parse().ok()?;
            let a = x.abs();
            if !(x == 0.0 || (1e-3..1e7).contains(&a)) {
                return None; // Java's exponent form, or not finite: the ordinary path
            }
            let mut b = ryu::Buffer::new();
            out.extend_from_slice(b.format_finite(x).as_bytes());
        }
        Kind::Str => json_string(out, text)?,
        Kind::Decimal(scale) => decimal_base64(out, text, scale)?,
        Kind::Zoned(digits) => zoned(out, text, digits)?,
        Kind::Micros => int(out, timestamp_micros(text)?),
        Kind::Millis => int(out, timestamp_micros(text)?.div_euclid(1000)),
        Kind::Date => {
            if text.len() != 10 {
                return None;
            }
            int(out, date_days(text)?);
        }
        Kind::TimeMicros => int(out, time_micros(text)?),
        Kind::TimeMillis => int(out, time_micros(text)? / 1000),
        Kind::TimeOfDayMillis => int(out, time_micros(text)? % 86_400_000_000 / 1000),
        Kind::Bytea => {
            let hex = text.strip_prefix(b"\\x")?; // bytea_output=escape goes the ordinary way
            if hex.len() % 2 != 0 {
                return None;
            }
            let mut bytes = Vec::with_capacity(hex.len() / 2);
            for pair in hex.chunks(2) {
                bytes.push((hex_digit(pair[0])? << 4) | hex_digit(pair[1])?);
            }
            out.push(b'"');
            base64_into(out, &bytes);
            out.push(b'"');
        }
    }
    Some(())
}

/// A JSON string as orjson writes it with Jackson's escapes applied: `"` and `\` escaped,
/// `\b \t \n \f \r` short, other control characters `\u00XX` (upper-case hex), characters beyond
/// the BMP as an upper-case surrogate pair, everything else as UTF-8.
fn json_string(out: &mut Vec<u8>, text: &[u8]) -> Option<()> {
    let s = std::str::from_utf8(text).ok()?;
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            b'\t' => b"\\t",
            b'\n' => b"\\n",
            0x0c => b"\\f",
            b'\r' => b"\\r",
            0..=0x1f => b"",
            0xf0..=0xf4 => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        if !escape.is_empty() {
            out.extend_from_slice(escape);
            start = i + 1;
        } else if b < 0x20 {
            out.extend_from_slice(format!("\\u{:04X}", b).as_bytes());
            start = i + 1;
        } else {
            // The lead byte of a four-byte sequence: a character beyond the BMP.
            let c = s[i..].chars().next()? as u32 - 0x10000;
            out.extend_from_slice(
                format!(
                    "\\u{:04X}\\u{:04X}",
                    0xD800 + (c >> 10),
                    0xDC00 + (c & 0x3FF)
                )
                .as_bytes(),
            );
            start = i + 4;
        }
    }
    // `start` may point past bytes already consumed by a four-byte sequence
    if start < bytes.len() {
        out.extend_from_slice(&bytes[start..]);
    }
    out.push(b'"');
    Some(())
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// numeric text with exactly `scale` fraction digits → `"<base64 of the unscaled value's minimal
/// big-endian two's complement>"`.
fn decimal_base64(out: &mut Vec<u8>, text: &[u8], scale: u32) -> Option<()> {
    let (negative, body) = match text.strip_prefix(b"-") {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (whole, fraction) = match body.iter().position(|&b| b == b'.') {
        Some(p) => (&body[..p], &body[p + 1..]),
        None => (body, &b""[..]),
    };
    if whole.is_empty() || fraction.len() != scale as usize || (scale > 0 && fraction.is_empty()) {
        return None;
    }
    if whole.len() + fraction.len() > 38 {
        return None;
    }
    let mut n: i128 = 0;
    for &d in whole.iter().chain(fraction) {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n * 10 + i128::from(d - b'0');
    }
    if negative {
        n = -n;
    }
    // Minimal two's complement: (bits of n, or of -n-1 when negative) / 8 + 1 bytes.
    let magnitude = if n < 0 { -(n + 1) } else { n };
    let bits = 128 - magnitude.leading_zeros() as usize;
    let len = bits / 8 + 1;
    let all = n.to_be_bytes();
    out.push(b'"');
    base64_into(out, &all[16 - len..]);
    out.push(b'"');
    Some(())
}

fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// `HH:MM:SS[.f{1,6}]` → microseconds of the day (`24:00:00` included, as PostgreSQL allows).
fn time_micros(text: &[u8]) -> Option<i64> {
    if text.len() < 8 || text[2] != b':' || text[5] != b':' {
        return None;
    }
    let (h, m, s) = (two(text, 0)?, two(text, 3)?, two(text, 6)?);
    Some((h * 3600 + m * 60 + s) * 1_000_000 + fraction_micros(&text[8..])?)
}

/// `.f{1,6}` (or nothing) after a clock → microseconds.
fn fraction_micros(rest: &[u8]) -> Option<i64> {
    if rest.is_empty() {
        return Some(0);
    }
    let fraction = rest.strip_prefix(b".")?;
    if fraction.is_empty() || fraction.len() > 6 || !fraction.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut micros = 0;
    for i in 0..6 {
        micros = micros * 10 + fraction.get(i).map_or(0, |d| i64::from(d - b'0'));
    }
    Some(micros)
}

/// Standard base64, padded.
fn base64_into(out: &mut Vec<u8>, bytes: &[u8]) {
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let v = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        out.push(B64[(v >> 18) as usize & 63]);
        out.push(B64[(v >> 12) as usize & 63]);
        out.push(if chunk.len() > 1 {
            B64[(v >> 6) as usize & 63]
        } else {
            b'='
        });
        out.push(if chunk.len() > 2 {
            B64[v as usize & 63]
        } else {
            b'='
        });
    }
}

/// `YYYY-MM-DD HH:MM:SS[.ffffff]+00` → `"YYYY-MM-DDTHH:MM:SS.ffffffZ"` with the fraction padded or
/// cut to `digits` (none when 0); other offsets and shapes go the ordinary way.
fn zoned(out: &mut Vec<u8>, text: &[u8], digits: u32) -> Option<()> {
    if text.len() < 22 || !text.ends_with(b"+00") {
        return None;
    }
    let body = &text[..text.len() - 3];
    if !body
        .iter()
        .all(|&b| b.is_ascii_digit() || b == b'-' || b == b':' || b == b'.' || b == b' ')
    {
        return None;
    }
    let space = body.iter().position(|&b| b == b' ')?;
    let (date, clock) = (&body[..space], &body[space + 1..]);
    let (whole, fraction) = match clock.iter().position(|&b| b == b'.') {
        Some(p) => (&clock[..p], &clock[p + 1..]),
        None => (clock, &b""[..]),
    };
    out.push(b'"');
    out.extend_from_slice(date);
    out.push(b'T');
    out.extend_from_slice(whole);
    if digits > 0 {
        out.push(b'.');
        let d = digits as usize;
        let take = fraction.len().min(d);
        out.extend_from_slice(&fraction[..take]);
        out.extend(std::iter::repeat_n(b'0', d - take));
    }
    out.extend_from_slice(b"Z\"");
    Some(())
}

fn two(text: &[u8], at: usize) -> Option<i64> {
    let (a, b) = (*text.get(at)?, *text.get(at + 1)?);
    if !a.is_ascii_digit() || !b.is_ascii_digit() {
        return None;
    }
    Some(i64::from(a - b'0') * 10 + i64::from(b - b'0'))
}

/// Days since 1970-01-01 of `YYYY-MM-DD` (years 1-9999).
fn date_days(text: &[u8]) -> Option<i64> {
    if text.len() < 10 || text[4] != b'-' || text[7] != b'-' {
        return None;
    }
    let year = two(text, 0)? * 100 + two(text, 2)?;
    let (month, day) = (two(text, 5)?, two(text, 8)?);
    if year < 1 || !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    // Howard Hinnant's days_from_civil
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    Some(era * 146_097 + doe - 719_468)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        4 | 6 | 9 | 11 => 30,
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        _ => 31,
    }
}

/// `YYYY-MM-DD HH:MM:SS[.f{1,6}]` → microseconds since the epoch.
fn timestamp_micros(text: &[u8]) -> Option<i64> {
    if text.len() < 19 || text[10] != b' ' || text[13] != b':' || text[16] != b':' {
        return None;
    }
    let days = date_days(&text[..10])?;
    let (h, m, s) = (two(text, 11)?, two(text, 14)?, two(text, 17)?);
    if h > 23 || m > 59 || s > 59 {
        return None;
    }
    Some(((days * 86_400 + h * 3600 + m * 60 + s) * 1_000_000) + fraction_micros(&text[19..])?)
}

/// COPY text-format escapes as `COPY … TO STDOUT` writes them (backslash and b, f, n, r, t, v or a backslash);
/// anything else (octal or hex escapes, which PostgreSQL does not write) goes the ordinary way.
fn unescape_copy(field: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(field.len());
    let mut bytes = field.iter();
    while let Some(&b) = bytes.next() {
        if b != b'\\' {
            out.push(b);
            continue;
        }
        out.push(match bytes.next()? {
            b'b' => 8,
            b'f' => 12,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'v' => 11,
            b'\\' => b'\\',
            _ => return None,
        });
    }
    Some(out)
}

/// Debezium's order among snapshot markers when one row could take two: `last` first.
fn marker_rank(marker: &str) -> u8 {
    match marker {
        "last" => 0,
        "first" => 1,
        "last_in_data_collection" => 2,
        "first_in_data_collection" => 3,
        _ => 4,
    }
}
