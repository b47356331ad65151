//! Avro values → JSON documents, written as `orjson.dumps` writes the ordinary path's Connect
//! values with the Elasticsearch sink's fallback (decimals as floats, bytes as base64).
//!
//! orjson's formats: integers in decimal; floats as the shortest text that reads back, in
//! positional form while the decimal exponent is within -5..=15 (with `.0` for integral values)
//! and otherwise as `d.ddde±x` with `+` for positive exponents, NaN and infinities as `null`;
//! strings with `"`, `\` and control characters escaped (`\b \t \n \f \r`, else `\u00xx`) and
//! everything else as UTF-8; dates `YYYY-MM-DD`; times `HH:MM:SS` with `.ffffff` when there are
//! microseconds; timestamps (aware, UTC) as a date, `T`, a time and `+00:00`.

use super::{Decode, Value};

/// How one field's value is written.
#[derive(Clone, Copy)]
pub(super) enum Style {
    Int,
    Float,
    Bool,
    Text,
    Base64,
    /// A decimal of this scale, written as the nearest double (Python's `float(Decimal)`).
    Decimal(u32),
    Date,
    Time,
    Timestamp,
}

pub(super) fn style_of(kind: &str, scale: u32) -> Style {
    match kind {
        "float" | "double" => Style::Float,
        "boolean" => Style::Bool,
        "string" | "enum" => Style::Text,
        "bytes" | "fixed" => Style::Base64,
        "decimal" => Style::Decimal(scale),
        "date" => Style::Date,
        "time-millis" => Style::Time,
        "timestamp-millis" => Style::Timestamp,
        _ => Style::Int,
    }
}

pub(super) fn put_value(out: &mut Vec<u8>, style: Style, value: &Value, decode: &Decode) {
    match (value, style) {
        (Value::Int(days), Style::Date) => put_date(out, *days),
        (Value::Int(ms), Style::Time) => {
            out.push(b'"');
            put_time(out, *ms);
            out.push(b'"');
        }
        (Value::Int(ms), Style::Timestamp) => {
            out.push(b'"');
            put_date_text(out, ms.div_euclid(86_400_000));
            out.push(b'T');
            put_time(out, ms.rem_euclid(86_400_000));
            out.extend_from_slice(b"+00:00\"");
        }
        (Value::Int(n), _) => put_int(out, *n),
        (Value::F32(x), _) => put_float(out, f64::from(*x)),
        (Value::F64(x), _) => put_float(out, *x),
        (Value::Bool(b), _) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        (Value::Text(text), _) => put_text(out, text),
        (Value::Binary(bytes), _) => put_base64(out, bytes),
        (Value::Symbol(index), _) => {
            if let Decode::Enum(symbols) = decode {
                put_text(out, &symbols[*index]);
            }
        }
        (Value::Dec(n), Style::Decimal(scale)) => put_float(out, decimal_to_f64(*n, scale)),
        (Value::Dec(n), _) => out.extend_from_slice(n.to_string().as_bytes()),
    }
}

/// The double nearest `n` × 10^-`scale`, as Python's `float(Decimal)` gives it.
pub(crate) fn decimal_to_f64(n: i128, scale: u32) -> f64 {
    const EXACT: i128 = 1 << 53;
    if n.abs() < EXACT && scale <= 22 {
        // Both exact as doubles, so the one division rounds correctly.
        return n as f64 / 10f64.powi(scale as i32);
    }
    // Rust parses decimal text to the nearest double.
    format!("{n}e-{scale}").parse().unwrap_or(f64::NAN)
}

pub(crate) fn put_int(out: &mut Vec<u8>, n: i64) {
    let mut buf = [0u8; 20];
    let mut at = buf.len();
    let mut rest = n.unsigned_abs();
    loop {
        at -= 1;
        buf[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    if n < 0 {
        at -= 1;
        buf[at] = b'-';
    }
    out.extend_from_slice(&buf[at..]);
}

/// `value` (not negative) in decimal, zero-padded to at least `width` digits.
fn put_padded(out: &mut Vec<u8>, value: i64, width: usize) {
    let mut buf = [b'0'; 20];
    let mut at = buf.len();
    let mut rest = value;
    while rest > 0 {
        at -= 1;
        buf[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    out.extend_from_slice(&buf[(buf.len() - width).min(at)..]);
}

fn put_float(out: &mut Vec<u8>, x: f64) {
    use std::io::Write;
    if !x.is_finite() {
        out.extend_from_slice(b"null");
        return;
    }
    // `{:e}` gives the shortest digits that read back: "-1.2345e-7", "0e0".
    let mut buf = [0u8; 40];
    let mut cursor = std::io::Cursor::new(&mut buf[..]);
    if write!(cursor, "{x:e}").is_err() {
        out.extend_from_slice(b"null");
        return;
    }
    let len = cursor.position() as usize;
    let text = std::str::from_utf8(&buf[..len]).unwrap_or("0e0");
    let (mantissa, exponent) = text.split_once('e').unwrap_or((text, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let (negative, mantissa) = match mantissa.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, mantissa),
    };
    let digits: Vec<u8> = mantissa.bytes().filter(|&b| b != b'.').collect();
    let (digits, exponent) = even_on_tie(x, digits, exponent);
    if negative {
        out.push(b'-');
    }
    if (-5..=15).contains(&exponent) {
        if exponent >= 0 {
            let int_len = exponent as usize + 1;
            for i in 0..int_len {
                out.push(*digits.get(i).unwrap_or(&b'0'));
            }
            out.push(b'.');
            if digits.len() > int_len {
                out.extend_from_slice(&digits[int_len..]);
            } else {
                out.push(b'0');
            }
        } else {
            out.extend_from_slice(b"0.");
            out.extend(std::iter::repeat_n(b'0', (-exponent - 1) as usize));
            out.extend_from_slice(&digits);
        }
    } else {
        out.push(digits[0]);
        if digits.len() > 1 {
            out.push(b'.');
            out.extend_from_slice(&digits[1..]);
        }
        out.push(b'e');
        if exponent > 0 {
            out.push(b'+');
        }
        out.extend_from_slice(exponent.to_string().as_bytes());
    }
}

/// The shortest `digits` (× 10^`exponent`, first digit before the point) of `x`, or when `x` lies
/// exactly halfway between two such candidates, the one ending in an even digit, as orjson (Ryu)
/// and Python choose (Rust's shortest formatting may pick the other).
fn even_on_tie(x: f64, digits: Vec<u8>, exponent: i32) -> (Vec<u8>, i32) {
    let n = digits.len();
    // x = m × 2^e exactly; a tie needs x's exact decimal expansion to be n + 1 digits (ending in
    // 5), which only a fraction with a short odd part can have: odd / 2^j = odd × 5^j / 10^j.
    let bits = x.abs().to_bits();
    let (mut m, mut e) = match (bits >> 52) as i32 {
        0 => (bits, -1074),
        biased => (bits & ((1 << 52) - 1) | (1 << 52), biased - 1075),
    };
    if m == 0 {
        return (digits, exponent);
    }
    let zeros = m.trailing_zeros();
    m >>= zeros;
    e += zeros as i32;
    if !(-27..0).contains(&e) {
        return (digits, exponent); // an integer (its shortest digits are exact), or too long
    }
    let exact = (u128::from(m) * 5u128.pow((-e) as u32))
        .to_string()
        .into_bytes();
    if exact.len() != n + 1 || exact.len() as i32 - 1 + e != exponent {
        return (digits, exponent);
    }
    let mut low = exact[..n].to_vec();
    if low[n - 1] & 1 == 0 {
        return (low, exponent);
    }
    // Round up: the last digit is odd, so at most a run of nines carries.
    let mut exponent = exponent;
    let mut i = n;
    loop {
        if i == 0 {
            low.insert(0, b'1');
            exponent += 1;
            break;
        }
        i -= 1;
        if low[i] == b'9' {
            low[i] = b'0';
        } else {
            low[i] += 1;
            break;
        }
    }
    while low.len() > 1 && low.last() == Some(&b'0') {
        low.pop();
    }
    (low, exponent)
}

pub(crate) fn put_text(out: &mut Vec<u8>, text: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    for &b in text {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            0x08 => out.extend_from_slice(b"\\b"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            0x0c => out.extend_from_slice(b"\\f"),
            b'\r' => out.extend_from_slice(b"\\r"),
            0x00..=0x1f => {
                out.extend_from_slice(b"\\u00");
                out.push(HEX[usize::from(b >> 4)]);
                out.push(HEX[usize::from(b & 0xf)]);
            }
            _ => out.push(b),
        }
    }
    out.push(b'"');
}

pub(crate) fn put_base64(out: &mut Vec<u8>, bytes: &[u8]) {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    out.push(b'"');
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]);
            } else {
                out.push(b'=');
            }
        }
    }
    out.push(b'"');
}

pub(crate) fn put_date(out: &mut Vec<u8>, days: i64) {
    out.push(b'"');
    put_date_text(out, days);
    out.push(b'"');
}

/// The proleptic Gregorian date `days` after 1970-01-01 as `YYYY-MM-DD` (years 1 to 9999).
pub(crate) fn put_date_text(out: &mut Vec<u8>, days: i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    put_padded(out, year, 4);
    out.push(b'-');
    put_padded(out, month, 2);
    out.push(b'-');
    put_padded(out, day, 2);
}

/// `ms` milliseconds after midnight as `HH:MM:SS` or `HH:MM:SS.ffffff`.
pub(crate) fn put_time(out: &mut Vec<u8>, ms: i64) {
    let (seconds, millis) = (ms / 1000, ms % 1000);
    put_padded(out, seconds / 3600, 2);
    out.push(b':');
    put_padded(out, seconds / 60 % 60, 2);
    out.push(b':');
    put_padded(out, seconds % 60, 2);
    if millis != 0 {
        out.push(b'.');
        put_padded(out, millis * 1000, 6);
    }
}
