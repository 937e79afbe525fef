//! How long the engine's calls take, as the loop sees them: one call in [`SAMPLE`] is timed
//! (two reads of the monotonic clock) into an HDR histogram of nanoseconds, so the tail of a
//! call's cost under any load (an attack's included) can be read from `/status`
//! (`engine_call_us`: calls timed, p50, p99, p99.99, max) without timing every packet.

use std::time::Instant;

use hdrhistogram::Histogram;

/// One call in this many is timed.
pub const SAMPLE: u32 = 8;

/// The timed calls.
pub struct CallTimes {
    hist: Histogram<u64>,
    /// Calls since the last one timed.
    skipped: u32,
}

impl Default for CallTimes {
    fn default() -> Self {
        // 1 ns to 60 s at three significant digits.
        CallTimes { hist: Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds"), skipped: 0 }
    }
}

impl CallTimes {
    /// Run `f` (an engine call), timing it if its turn has come.
    pub fn time<R>(&mut self, f: impl FnOnce() -> R) -> R {
        self.skipped += 1;
        if self.skipped < SAMPLE {
            return f();
        }
        self.skipped = 0;
        let t0 = Instant::now();
        let r = f();
        self.record(t0.elapsed().as_nanos() as u64);
        r
    }

    fn record(&mut self, ns: u64) {
        self.hist.saturating_record(ns.max(1));
    }

    /// Calls timed and their percentiles in microseconds (null before the first).
    pub fn summary(&self) -> serde_json::Value {
        if self.hist.is_empty() {
            return serde_json::Value::Null;
        }
        let us = |q: f64| self.hist.value_at_quantile(q) as f64 / 1e3;
        serde_json::json!({
            "timed": self.hist.len(),
            "sample": SAMPLE,
            "p50": us(0.5),
            "p99": us(0.99),
            "p9999": us(0.9999),
            "max": self.hist.max() as f64 / 1e3,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_call_in_sample_is_timed_and_summarised() {
        let mut c = CallTimes::default();
        assert!(c.summary().is_null());
        let mut ran = 0;
        for _ in 0..SAMPLE * 100 {
            c.time(|| ran += 1);
        }
        assert_eq!(ran, SAMPLE * 100, "every call runs");
        let s = c.summary();
        assert_eq!(s["timed"], 100);
        assert_eq!(s["sample"], SAMPLE);
        // Known times: 99 of 1 µs and one of 5 ms.
        let mut c = CallTimes::default();
        for _ in 0..9_999 {
            c.record(1_000);
        }
        c.record(5_000_000);
        let s = c.summary();
        assert!((s["p50"].as_f64().unwrap() - 1.0).abs() < 0.01, "{s}");
        assert!((s["p99"].as_f64().unwrap() - 1.0).abs() < 0.01, "{s}");
        assert!((s["max"].as_f64().unwrap() - 5_000.0).abs() < 5.0, "{s}");
        assert!(s["p9999"].as_f64().unwrap() <= 5_000.0 + 5.0, "{s}");
    }
}
