//! How long the engine's calls take, as the loop sees them: one call in [`SAMPLE`] is timed
//! into HDR histograms of nanoseconds, so the tail of a call's cost under any load (an attack's
//! included) can be read from `/status` (`engine_call_us`: calls timed, p50, p99, p99.99, max)
//! without timing every packet. Each timed call is measured twice: on the monotonic clock (the
//! time it took, preemption by other processes included) and on the thread's CPU clock
//! (`cpu`: the engine's own work; on a machine whose cores the traffic's senders share, as the
//! lab's two, the two differ by the time the scheduler gave others).

use std::time::Instant;

use hdrhistogram::Histogram;

/// The calling thread's CPU time, in nanoseconds.
fn thread_cpu_ns() -> u64 {
    super::clock_ns(libc::CLOCK_THREAD_CPUTIME_ID).max(0) as u64
}

/// One call in this many is timed.
pub const SAMPLE: u32 = 8;

/// The timed calls.
#[derive(Clone)]
pub struct CallTimes {
    hist: Histogram<u64>,
    /// The same calls on the thread's CPU clock.
    cpu: Histogram<u64>,
    /// Calls since the last one timed.
    skipped: u32,
}

impl Default for CallTimes {
    fn default() -> Self {
        // 1 ns to 60 s at three significant digits.
        let h = || Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds");
        CallTimes { hist: h(), cpu: h(), skipped: 0 }
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
        let (t0, c0) = (Instant::now(), thread_cpu_ns());
        let r = f();
        let (c1, wall) = (thread_cpu_ns(), t0.elapsed().as_nanos() as u64);
        self.record(wall, c1.saturating_sub(c0));
        r
    }

    /// Add `other`'s timed calls (another engine's) to these.
    pub fn merge(&mut self, other: &CallTimes) {
        // Same bounds on both sides: adding cannot fail.
        let _ = self.hist.add(&other.hist);
        let _ = self.cpu.add(&other.cpu);
    }

    fn record(&mut self, wall_ns: u64, cpu_ns: u64) {
        self.hist.saturating_record(wall_ns.max(1));
        self.cpu.saturating_record(cpu_ns.max(1));
    }

    /// Calls timed and their percentiles in microseconds (null before the first).
    pub fn summary(&self) -> serde_json::Value {
        if self.hist.is_empty() {
            return serde_json::Value::Null;
        }
        let us = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1e3;
        serde_json::json!({
            "timed": self.hist.len(),
            "sample": SAMPLE,
            "p50": us(&self.hist, 0.5),
            "p99": us(&self.hist, 0.99),
            "p9999": us(&self.hist, 0.9999),
            "max": self.hist.max() as f64 / 1e3,
            "cpu": {
                "p50": us(&self.cpu, 0.5),
                "p99": us(&self.cpu, 0.99),
                "p9999": us(&self.cpu, 0.9999),
                "max": self.cpu.max() as f64 / 1e3,
            },
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
            c.record(1_000, 900);
        }
        c.record(5_000_000, 700_000);
        let s = c.summary();
        assert!((s["cpu"]["p50"].as_f64().unwrap() - 0.9).abs() < 0.01, "{s}");
        assert!((s["cpu"]["max"].as_f64().unwrap() - 700.0).abs() < 1.0, "{s}");
        assert!((s["p50"].as_f64().unwrap() - 1.0).abs() < 0.01, "{s}");
        assert!((s["p99"].as_f64().unwrap() - 1.0).abs() < 0.01, "{s}");
        assert!((s["max"].as_f64().unwrap() - 5_000.0).abs() < 5.0, "{s}");
        assert!(s["p9999"].as_f64().unwrap() <= 5_000.0 + 5.0, "{s}");
    }

    /// A call that spins 2 ms of CPU is timed at 2 ms or more on the CPU clock; one that sleeps
    /// 20 ms takes 20 ms and next to no CPU.
    #[test]
    fn the_cpu_clock_leaves_out_what_the_thread_did_not_run() {
        let mut c = CallTimes { skipped: SAMPLE, ..CallTimes::default() };
        c.time(|| std::thread::sleep(std::time::Duration::from_millis(20)));
        let s = c.summary();
        assert!(s["max"].as_f64().unwrap() >= 20_000.0, "{s}");
        assert!(s["cpu"]["max"].as_f64().unwrap() < 5_000.0, "{s}");
        let mut c = CallTimes { skipped: SAMPLE, ..CallTimes::default() };
        c.time(|| {
            // Spin until the thread has run 2 ms (not 2 ms of the wall: a busy machine may
            // preempt it meanwhile).
            let t = thread_cpu_ns();
            while thread_cpu_ns() < t + 2_000_000 {
                std::hint::black_box(0);
            }
        });
        let s = c.summary();
        assert!(s["cpu"]["max"].as_f64().unwrap() >= 1_000.0, "{s}");
    }
}
