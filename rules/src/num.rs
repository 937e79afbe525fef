//! Numbers with units, read exactly (decimal, no floating point): durations (`500ms`, `3.0s`,
//! `1e3ms`), rates (`200/s`, `600/min`) and plain counts. Out-of-range values are diagnostics.

use std::fmt;
use std::time::Duration;

use crate::diag::{Error, Span};

/// Where a duration is used and the range allowed there.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DurRange {
    pub what: &'static str,
    pub min: Duration,
    pub max: Duration,
}

pub(crate) const HOUR: Duration = Duration::from_secs(3600);
pub(crate) const MINUTE: Duration = Duration::from_secs(60);

pub(crate) const THRESHOLD: DurRange = DurRange { what: "a response-time threshold", min: Duration::ZERO, max: HOUR };
pub(crate) const HOLD: DurRange = DurRange { what: "a FOR hold time", min: Duration::ZERO, max: HOUR };
pub(crate) const GAP: DurRange = DurRange { what: "a retransmission GAP", min: Duration::from_millis(1), max: MINUTE };
pub(crate) const DELAY: DurRange = DurRange { what: "a DELAY", min: Duration::from_millis(1), max: MINUTE };
/// `ABORT IDLE AFTER d`: how long a connection is idle after a response before it is closed.
pub(crate) const IDLE_AFTER: DurRange = DurRange { what: "an ABORT IDLE AFTER", min: Duration::from_millis(10), max: HOUR };
/// `REJECT ... RETRY-AFTER d`: whole seconds in the response's `Retry-After` header.
pub(crate) const RETRY_AFTER: DurRange = DurRange { what: "a RETRY-AFTER", min: Duration::from_secs(1), max: Duration::from_secs(86_400) };

/// Shows a duration the way it can be written back: `3s`, `500ms`, `2.5ms`.
pub fn fmt_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns.is_multiple_of(1_000_000_000) {
        format!("{}s", ns / 1_000_000_000)
    } else if ns.is_multiple_of(1_000_000) {
        format!("{}ms", ns / 1_000_000)
    } else {
        let frac = format!("{:06}", ns % 1_000_000);
        format!("{}.{}ms", ns / 1_000_000, frac.trim_end_matches('0'))
    }
}

/// The parts of a decimal number at the start of a word: the digits without the point, where
/// the point was (count of fraction digits), the exponent, and the byte length read.
struct Decimal {
    digits: String,
    frac_len: i64,
    exp: i64,
    len: usize,
}

fn read_decimal(s: &str) -> Option<Decimal> {
    let b = s.as_bytes();
    let mut i = 0;
    let mut digits = String::new();
    while i < b.len() && b[i].is_ascii_digit() {
        digits.push(b[i] as char);
        i += 1;
    }
    let mut frac_len = 0i64;
    if i < b.len() && b[i] == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit) {
        i += 1;
        while i < b.len() && b[i].is_ascii_digit() {
            digits.push(b[i] as char);
            frac_len += 1;
            i += 1;
        }
    }
    if digits.is_empty() {
        return None;
    }
    let mut exp = 0i64;
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        let mut j = i + 1;
        let neg = match b.get(j) {
            Some(b'-') => {
                j += 1;
                true
            }
            Some(b'+') => {
                j += 1;
                false
            }
            _ => false,
        };
        if b.get(j).is_some_and(u8::is_ascii_digit) {
            while j < b.len() && b[j].is_ascii_digit() {
                // Saturate: anything past a few digits is out of every range anyway.
                exp = (exp * 10 + (b[j] - b'0') as i64).min(1_000_000);
                j += 1;
            }
            if neg {
                exp = -exp;
            }
            i = j;
        }
    }
    Some(Decimal { digits, frac_len, exp, len: i })
}

/// `digits × 10^pow` as an integer, if it is one and fits under `max`.
enum Scaled {
    Value(u128),
    TooBig,
    Fraction,
}

fn scale(digits: &str, pow: i64, max: u128) -> Scaled {
    let trimmed = digits.trim_start_matches('0');
    if trimmed.is_empty() {
        return Scaled::Value(0);
    }
    // Trailing zeros move into the power.
    let sig = trimmed.trim_end_matches('0');
    let pow = pow + (trimmed.len() - sig.len()) as i64;
    if pow < 0 {
        return Scaled::Fraction;
    }
    if sig.len() as i64 + pow > 38 {
        return Scaled::TooBig;
    }
    let mut v: u128 = 0;
    for c in sig.bytes() {
        v = v * 10 + (c - b'0') as u128;
    }
    for _ in 0..pow {
        v = match v.checked_mul(10) {
            Some(v) => v,
            None => return Scaled::TooBig,
        };
    }
    if v > max {
        Scaled::TooBig
    } else {
        Scaled::Value(v)
    }
}

pub(crate) fn duration(word: &str, span: Span, range: DurRange) -> Result<Duration, Error> {
    let expected = || format!("{} from {} to {}", range.what, fmt_duration(range.min), fmt_duration(range.max));
    if word.starts_with('-') {
        return Err(Error::new(span, format!("'{word}' is negative: a duration cannot be")).expected(expected()));
    }
    let Some(dec) = read_decimal(word) else {
        return Err(Error::new(span, format!("'{word}' is not a duration")).expected(format!("{} such as 500ms or 3.0s", range.what)));
    };
    let unit = &word[dec.len..];
    let unit_pow = match unit {
        "s" | "S" => 9,
        "ms" | "MS" | "Ms" | "mS" => 6,
        "" => {
            return Err(Error::new(span, format!("the duration '{word}' has no unit"))
                .expected(format!("{} such as 500ms or 3.0s", range.what))
                .help(format!("write {word}s for seconds or {word}ms for milliseconds")))
        }
        _ => {
            let u = span.sub(dec.len, word.len());
            return Err(Error::new(u, format!("unknown unit '{unit}' in '{word}'")).expected("ms or s"));
        }
    };
    let pow = dec.exp - dec.frac_len + unit_pow;
    let ns = match scale(&dec.digits, pow, range.max.as_nanos()) {
        Scaled::Value(v) => v as u64,
        Scaled::TooBig => {
            return Err(Error::new(span, format!("'{word}' is longer than {} may be ({})", range.what, fmt_duration(range.max))).expected(expected()))
        }
        Scaled::Fraction => return Err(Error::new(span, format!("'{word}' is finer than a nanosecond")).expected(expected())),
    };
    let d = Duration::from_nanos(ns);
    if d < range.min {
        return Err(Error::new(span, format!("'{word}' is shorter than {} may be ({})", range.what, fmt_duration(range.min))).expected(expected()));
    }
    Ok(d)
}

/// A whole number such as a port, a count or a position.
pub(crate) fn integer(word: &str, span: Span, what: &str, min: u64, max: u64) -> Result<u64, Error> {
    let expected = || format!("{what} from {min} to {max}");
    if word.is_empty() || !word.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Error::new(span, format!("'{word}' is not a whole number")).expected(expected()));
    }
    let v = match scale(word, 0, max as u128) {
        Scaled::Value(v) => v as u64,
        _ => return Err(Error::new(span, format!("{word} is too large for {what}")).expected(expected())),
    };
    if v < min {
        return Err(Error::new(span, format!("{word} is too small for {what}")).expected(expected()));
    }
    Ok(v)
}

/// The per-time unit of a rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Per {
    Second,
    Minute,
}

/// `200/s`: how many tokens a bucket gains per second or per minute.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rate {
    pub count: u32,
    pub per: Per,
}

impl Rate {
    pub const MAX_COUNT: u32 = 1_000_000;

    /// Tokens per second.
    pub fn per_second(self) -> f64 {
        match self.per {
            Per::Second => self.count as f64,
            Per::Minute => self.count as f64 / 60.0,
        }
    }

    /// The time in which the bucket gains one token.
    pub fn interval(self) -> Duration {
        let period = match self.per {
            Per::Second => Duration::from_secs(1),
            Per::Minute => MINUTE,
        };
        period / self.count.max(1)
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = match self.per {
            Per::Second => "s",
            Per::Minute => "min",
        };
        write!(f, "{}/{unit}", self.count)
    }
}

pub(crate) fn rate(word: &str, span: Span) -> Result<Rate, Error> {
    let expected = || format!("a rate such as 200/s or 600/min (1 to {} per second or minute)", Rate::MAX_COUNT);
    let Some((n, unit)) = word.split_once('/') else {
        return Err(Error::new(span, format!("'{word}' is not a rate")).expected(expected()).help(format!("write {word}/s")));
    };
    let per = match unit.to_ascii_lowercase().as_str() {
        "s" => Per::Second,
        "min" => Per::Minute,
        _ => return Err(Error::new(span.sub(n.len() + 1, word.len()), format!("unknown rate unit '{unit}'")).expected("s or min")),
    };
    let count = integer(n, span.sub(0, n.len()), "a rate", 1, Rate::MAX_COUNT as u64)? as u32;
    Ok(Rate { count, per })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Result<Duration, String> {
        duration(s, Span::new(0, s.len()), THRESHOLD).map_err(|e| e.message)
    }

    #[test]
    fn durations() {
        assert_eq!(d("3.0s"), Ok(Duration::from_secs(3)));
        assert_eq!(d("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(d("0.1s"), Ok(Duration::from_millis(100)));
        assert_eq!(d("1e3ms"), Ok(Duration::from_secs(1)));
        assert_eq!(d("2.5E-1s"), Ok(Duration::from_millis(250)));
        assert_eq!(d("0.000000001s"), Ok(Duration::from_nanos(1)));
        assert_eq!(d("3600s"), Ok(HOUR));
        assert_eq!(d("0000000000000000000000000000000000000000001s"), Ok(Duration::from_secs(1)));
        assert_eq!(d("1.000000000000000000000000000000000000000000s"), Ok(Duration::from_secs(1)));
        assert_eq!(d("0e999999999999999s"), Ok(Duration::ZERO));
        for bad in ["1e30s", "3601s", "1e999999999999s", "99999999999999999999999999999999999999999s", "0.0000000001s", "1e-99999999s"] {
            assert!(d(bad).is_err(), "{bad}");
        }
        assert!(d("3").unwrap_err().contains("no unit"));
        assert!(d("3min").unwrap_err().contains("unknown unit"));
        assert!(d("-3s").unwrap_err().contains("negative"));
        assert!(d("s").is_err() && d(".s").is_err() && d("e5s").is_err());
        assert!(duration("0s", Span::default(), GAP).is_err());
        for x in ["3s", "500ms", "2.5ms", "0s", "1.000001ms"] {
            assert_eq!(fmt_duration(d(x).unwrap()), x);
        }
    }

    #[test]
    fn rates_and_integers() {
        assert_eq!(rate("200/s", Span::default()), Ok(Rate { count: 200, per: Per::Second }));
        assert_eq!(rate("600/min", Span::default()).unwrap().to_string(), "600/min");
        assert!(rate("0/s", Span::default()).is_err());
        assert!(rate("200", Span::default()).is_err());
        assert!(rate("200/h", Span::default()).is_err());
        assert!(rate("99999999999999999999999999/s", Span::default()).is_err());
        assert_eq!(Rate { count: 200, per: Per::Second }.interval(), Duration::from_millis(5));
        assert_eq!(integer("65535", Span::default(), "a port", 0, 65535), Ok(65535));
        assert!(integer("65536", Span::default(), "a port", 0, 65535).is_err());
        assert!(integer("1x", Span::default(), "a port", 0, 65535).is_err());
    }
}
