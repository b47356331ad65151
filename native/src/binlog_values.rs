//! The binlog's value encodings (integers, DECIMAL, DATE, TIME2, DATETIME2, TIMESTAMP2 fractions)
//! and the calendar arithmetic `binlog_rows.rs` turns them into Debezium's numbers with.

pub(crate) type Failure = String;

pub(crate) struct Cursor<'a> {
    pub(crate) data: &'a [u8],
    pub(crate) pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], Failure> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.data.len())
            .ok_or("the event ends inside a row")?;
        let bytes = &self.data[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    pub(crate) fn le(&mut self, n: usize) -> Result<u64, Failure> {
        Ok(self
            .take(n)?
            .iter()
            .rev()
            .fold(0u64, |acc, &b| (acc << 8) | b as u64))
    }

    pub(crate) fn be(&mut self, n: usize) -> Result<u64, Failure> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |acc, &b| (acc << 8) | b as u64))
    }

    /// A signed big-endian integer of `n` bytes (1 to 4).
    pub(crate) fn be_signed(&mut self, n: usize) -> Result<i64, Failure> {
        let v = self.be(n)? as i64;
        let bits = 8 * n as u32;
        Ok(if v >= 1 << (bits - 1) {
            v - (1 << bits)
        } else {
            v
        })
    }
}

pub(crate) fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

pub(crate) fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (
        if m <= 2 {
            yoe + era * 400 + 1
        } else {
            yoe + era * 400
        },
        m,
        d,
    )
}

fn month_days(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

pub(crate) fn valid_date(y: i64, m: i64, d: i64) -> bool {
    (1..=9999).contains(&y) && (1..=12).contains(&m) && d >= 1 && d <= month_days(y, m)
}

/// The fractional part as the library reads it: `ceil(fsp/2)` signed big-endian bytes, a
/// digit dropped for an odd `fsp`, scaled to microseconds.
pub(crate) fn fsp_micros(cur: &mut Cursor, fsp: u32) -> Result<i64, Failure> {
    if fsp == 0 {
        return Ok(0);
    }
    if fsp > 6 {
        return Err(format!("fractional digits {fsp}"));
    }
    let mut v = cur.be_signed(fsp.div_ceil(2) as usize)?;
    if fsp % 2 == 1 {
        v /= 10; // truncates towards zero, as Python's int(v / 10)
    }
    Ok(v * 10i64.pow(6 - fsp))
}

/// TIME2 in microseconds, as the server packs it (`my_time_packed_from_binary`).
pub(crate) fn time2_micros(cur: &mut Cursor, fsp: u32) -> Result<i64, Failure> {
    let packed: i64 = match fsp {
        0 => (cur.be(3)? as i64 - 0x80_0000) << 24,
        1 | 2 => {
            let mut int = cur.be(3)? as i64 - 0x80_0000;
            let mut frac = cur.be(1)? as i64;
            if int < 0 && frac != 0 {
                int += 1;
                frac -= 0x100;
            }
            (int << 24) + frac * 10_000
        }
        3 | 4 => {
            let mut int = cur.be(3)? as i64 - 0x80_0000;
            let mut frac = cur.be(2)? as i64;
            if int < 0 && frac != 0 {
                int += 1;
                frac -= 0x10000;
            }
            (int << 24) + frac * 100
        }
        5 | 6 => cur.be(6)? as i64 - 0x8000_0000_0000,
        _ => return Err(format!("fractional digits {fsp}")),
    };
    let magnitude = packed.unsigned_abs() as i64;
    let hms = magnitude >> 24;
    let frac = magnitude % (1 << 24);
    let (h, m, s) = (
        (hms >> 12) % (1 << 10),
        (hms >> 6) % (1 << 6),
        hms % (1 << 6),
    );
    let micros = (h * 3600 + m * 60 + s) * 1_000_000 + frac;
    Ok(if packed < 0 { -micros } else { micros })
}

/// DECIMAL as the library spells it before `decimal.Decimal` reads it (`"-12.340"`, `"5."`).
pub(crate) fn decimal_text(
    cur: &mut Cursor,
    precision: u32,
    scale: u32,
) -> Result<String, Failure> {
    const SIZES: [usize; 10] = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4];
    if scale > precision || precision > 65 {
        return Err(format!("DECIMAL({precision},{scale})"));
    }
    let integral = (precision - scale) as usize;
    let (int_words, frac_words) = (integral / 9, scale as usize / 9);
    let (int_rest, frac_rest) = (integral % 9, scale as usize % 9);
    let size = SIZES[int_rest] + 4 * (int_words + frac_words) + SIZES[frac_rest];
    let mut bytes = cur.take(size)?.to_vec();
    if bytes.is_empty() {
        return Err("an empty DECIMAL".into());
    }
    let negative = bytes[0] & 0x80 == 0;
    bytes[0] ^= 0x80;
    if negative {
        bytes.iter_mut().for_each(|b| *b ^= 0xff);
    }
    let mut part = Cursor {
        data: &bytes,
        pos: 0,
    };
    let mut text = String::with_capacity(precision as usize + 3);
    if negative {
        text.push('-');
    }
    use std::fmt::Write;
    if SIZES[int_rest] > 0 {
        write!(text, "{}", part.be(SIZES[int_rest])?).unwrap();
    }
    for _ in 0..int_words {
        write!(text, "{:09}", part.be(4)?).unwrap();
    }
    text.push('.');
    for _ in 0..frac_words {
        write!(text, "{:09}", part.be(4)?).unwrap();
    }
    if SIZES[frac_rest] > 0 {
        write!(
            text,
            "{:0width$}",
            part.be(SIZES[frac_rest])?,
            width = frac_rest
        )
        .unwrap();
    }
    Ok(text)
}

/// A FLOAT as the shortest of 6 to 9 significant digits that packs back into the same float32.
pub(crate) fn float32(value: f32) -> f64 {
    for digits in 6..=9 {
        let text = format!("{:.*e}", digits - 1, value as f64);
        if let Ok(parsed) = text.parse::<f64>() {
            if (parsed as f32).to_bits() == value.to_bits() {
                return parsed;
            }
        }
    }
    value as f64
}

/// `YYYY-MM-DDTHH:MM:SS[.fff]Z` for seconds since the epoch (UTC) and microseconds.
pub(crate) fn zoned(secs: i64, micros: i64, digits: usize) -> Result<String, Failure> {
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    if !(1000..=9999).contains(&y) {
        return Err(format!("TIMESTAMP in year {y}"));
    }
    let t = secs.rem_euclid(86_400);
    let mut text = format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
        t / 3600,
        t / 60 % 60,
        t % 60
    );
    if digits > 0 {
        let fraction = format!("{micros:06}");
        text.push('.');
        text.push_str(&fraction[..digits]);
    }
    text.push('Z');
    Ok(text)
}
