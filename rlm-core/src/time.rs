//! Time as the engine sees it: whatever the driver says it is.
//!
//! The engine never reads a clock. Drivers pass a [`Timestamp`] with every
//! frame and timer tick: the capture's own timestamps when replaying a file,
//! Unix wall-clock time when running live (the kernel's monotonic stamps of the
//! fast path's reports converted to it).

use std::fmt;
use std::ops::{Add, Sub};
use std::time::Duration;

/// A point in time, in nanoseconds since an epoch chosen by the driver
/// (the Unix epoch for captures).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// The epoch itself.
    pub const ZERO: Timestamp = Timestamp(0);

    /// From seconds since the epoch (negative values clamp to zero; sub-nanosecond digits are
    /// dropped).
    pub fn from_secs_f64(s: f64) -> Self {
        Timestamp((s.max(0.0) * 1e9) as u64)
    }
    /// From microseconds since the epoch (saturating).
    pub fn from_micros(us: u64) -> Self {
        Timestamp(us.saturating_mul(1_000))
    }
    /// From milliseconds since the epoch (saturating).
    pub fn from_millis(ms: u64) -> Self {
        Timestamp(ms.saturating_mul(1_000_000))
    }
    /// Nanoseconds since the epoch.
    pub fn as_nanos(self) -> u64 {
        self.0
    }
    /// Seconds since the epoch, with the nanoseconds as a fraction.
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }
    /// `self - earlier`, or zero when `earlier` is later (clocks in captures can step back).
    pub fn saturating_since(self, earlier: Timestamp) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
    /// `self - d`, or the epoch when `d` reaches back past it.
    pub fn saturating_sub(self, d: Duration) -> Timestamp {
        Timestamp(self.0.saturating_sub(d.as_nanos() as u64))
    }
}

impl Add<Duration> for Timestamp {
    type Output = Timestamp;
    fn add(self, d: Duration) -> Timestamp {
        Timestamp(self.0.saturating_add(d.as_nanos() as u64))
    }
}

impl Sub<Duration> for Timestamp {
    type Output = Timestamp;
    fn sub(self, d: Duration) -> Timestamp {
        self.saturating_sub(d)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:09}", self.0 / 1_000_000_000, self.0 % 1_000_000_000)
    }
}

/// Unix seconds, rounded to the microsecond, serialised without float noise
/// (`1320279566.452687`, not `1320279566.4526870251`).
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct UnixMicros(pub f64);

impl UnixMicros {
    /// `t` rounded to the nearest microsecond.
    pub fn of(t: Timestamp) -> UnixMicros {
        let us = t.as_nanos().saturating_add(500) / 1_000;
        // The f64 nearest the decimal, so that the shortest round-trip form is the decimal: both
        // operands are exact (`us` < 2^53 until the year 2255), and IEEE division rounds the
        // exact quotient, the decimal itself, to the nearest f64.
        UnixMicros(us as f64 / 1e6)
    }
    /// The seconds, with the microseconds as a fraction.
    pub fn secs(self) -> f64 {
        self.0
    }
}

impl serde::Serialize for UnixMicros {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates_instead_of_panicking() {
        let t = Timestamp::from_millis(5);
        assert_eq!(t.saturating_since(Timestamp::from_millis(9)), Duration::ZERO);
        assert_eq!(t - Duration::from_secs(1), Timestamp::ZERO);
        assert_eq!((t + Duration::from_millis(995)).as_secs_f64(), 1.0);
        assert_eq!(Timestamp::from_micros(1_500_000).to_string(), "1.500000000");
    }

    /// The division gives the f64 that parsing the decimal gives, over a spread of times.
    #[test]
    fn the_microseconds_are_the_decimals_nearest_f64() {
        let mut rng = crate::testkit::Rng::new(7);
        for i in 0..200_000u64 {
            let ns = if i % 2 == 0 { 1_000_000_000_000_000_000 + rng.below(4_000_000_000_000_000_000) } else { rng.below(1 << 62) };
            let t = Timestamp(ns);
            let us = t.as_nanos().saturating_add(500) / 1_000;
            let decimal: f64 = format!("{}.{:06}", us / 1_000_000, us % 1_000_000).parse().unwrap();
            assert_eq!(UnixMicros::of(t).secs().to_bits(), decimal.to_bits(), "{ns} ns");
        }
    }
}
