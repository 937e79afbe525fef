//! The machine's speed while an arm runs: a probe that does a fixed piece of work every few
//! seconds and times it in its own thread's CPU time.
//!
//! This machine is shared: its speed changed by 1.7x from one day to the next (the calibration
//! measured a pageview at 5.9 and at 3.5 ms of the farm's CPU), and within one fast-syn run the
//! farm's CPU a page grew by 60% over twelve minutes at the same quota, the last arm drawing every
//! failure. Alternating arms cancels a steady drift, not one that speeds up. The probe tells
//! the two apart from the farm's own pathologies: its work does not change, so its CPU time
//! follows only what the machine gives an instruction (a busier neighbour on the host, a shared
//! core, a lower clock). Thread CPU time, not wall time, so that the lab's own load taking
//! turns on the cores does not count; the farm's CPU a page is counted the same way (cpuacct).
//!
//! What it cannot tell apart: the machine from the arm's own load where that load fills the
//! cores. In the throughput experiment (wrk, nginx and rlm on both cores) its samples ranged
//! from 1.1 to 2.8 ms within one arm, the arms writing records the highest: the caches and the
//! memory it shares with them. Compared across arms that load the machine alike (fast-syn's),
//! its medians are the machine's.
//!
//! The work: random reads and writes over 4 MiB (more than a core's L2, like a server's working
//! set) and the integer arithmetic that picks them, done twice and the second time timed (about
//! 1 ms here): timed cold, after the probe's sleep, it took 2.4 to 3.3 ms on a quiet machine,
//! mostly the refetching of what others had evicted meanwhile, which follows the lab's own
//! load; timed warm, 0.96 to 1.21 ms with two fuzzers on both cores.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::stats::percentile;

/// Words of the probe's working set (4 MiB).
const WORDS: usize = 1 << 19;
/// Steps of one piece of work.
const STEPS: u32 = 400_000;

/// The calling thread's CPU time.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given; the clock exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// One piece of the probe's work over `mem`; returns a value that depends on all of it (so that
/// none of it can be left out).
fn work(mem: &mut [u64]) -> u64 {
    let mask = mem.len() - 1;
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut acc = 0u64;
    for _ in 0..STEPS {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let i = (x as usize) & mask;
        acc = acc.wrapping_add(mem[i]).rotate_left(5);
        mem[i] = mem[i].wrapping_add(x | 1);
    }
    acc
}

/// The probe's samples over an arm, and their spread.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MachineSpeed {
    /// CPU time of one piece of work (ms), each sample.
    pub samples_ms: Vec<f64>,
    /// When each was taken, seconds after the probe started.
    pub at_s: Vec<f64>,
    pub median_ms: f64,
    pub p10_ms: f64,
    pub p90_ms: f64,
}

impl MachineSpeed {
    /// The summary of `samples` (ms, each taken at `at_s`).
    pub fn of(samples_ms: Vec<f64>, at_s: Vec<f64>) -> MachineSpeed {
        MachineSpeed {
            median_ms: percentile(&samples_ms, 50.0),
            p10_ms: percentile(&samples_ms, 10.0),
            p90_ms: percentile(&samples_ms, 90.0),
            samples_ms,
            at_s,
        }
    }
}

/// A running probe; [`SpeedProbe::finish`] stops it and gives its samples (dropped, it stops
/// too: an arm that fails on the way leaves no probe running).
pub struct SpeedProbe {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<MachineSpeed>>,
}

impl SpeedProbe {
    /// Start probing every `every`, the first at once.
    pub fn start(every: Duration) -> SpeedProbe {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let stop = stop.clone();
            move || {
                let mut mem: Vec<u64> = (0..WORDS as u64).collect();
                // Once before timing: the pages touched, the code in the cache.
                let mut sink = work(&mut mem);
                let start = Instant::now();
                let (mut samples, mut at) = (Vec::new(), Vec::new());
                let mut next = start;
                while !stop.load(Ordering::Relaxed) {
                    let now = Instant::now();
                    if now < next {
                        std::thread::sleep((next - now).min(Duration::from_millis(100)));
                        continue;
                    }
                    sink ^= work(&mut mem);
                    let t = thread_cpu();
                    sink ^= work(&mut mem);
                    samples.push((thread_cpu() - t).as_secs_f64() * 1e3);
                    at.push((now - start).as_secs_f64());
                    // From this sample, not from the schedule: a late one is not followed by a
                    // burst that catches up.
                    next = now + every;
                }
                std::hint::black_box(sink);
                MachineSpeed::of(samples, at)
            }
        });
        SpeedProbe { stop, thread: Some(thread) }
    }

    /// Stop and give what it measured.
    pub fn finish(mut self) -> MachineSpeed {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().and_then(|t| t.join().ok()).unwrap_or_default()
    }
}

impl Drop for SpeedProbe {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_samples_at_its_period_and_summarises() {
        let p = SpeedProbe::start(Duration::from_millis(100));
        std::thread::sleep(Duration::from_millis(450));
        let s = p.finish();
        // The first at once, then one each 100 ms at the soonest (later on a busy machine: a
        // sleep ends when the kernel gets to it).
        assert!((1..=5).contains(&s.samples_ms.len()), "{s:?}");
        assert_eq!(s.samples_ms.len(), s.at_s.len());
        assert!(s.samples_ms.iter().all(|&ms| ms > 0.0), "{s:?}");
        assert!(s.p10_ms <= s.median_ms && s.median_ms <= s.p90_ms, "{s:?}");
        assert!(s.at_s.windows(2).all(|w| w[1] - w[0] >= 0.1), "{s:?}");
    }

    #[test]
    fn a_dropped_probe_stops() {
        let mut p = SpeedProbe::start(Duration::from_millis(10));
        let thread = p.thread.take().expect("its thread");
        drop(p);
        let until = Instant::now() + Duration::from_secs(10);
        while !thread.is_finished() {
            assert!(Instant::now() < until, "the probe's thread still runs 10 s after its drop");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn the_summary_is_the_samples_percentiles() {
        let s = MachineSpeed::of((1..=10).map(f64::from).collect(), (0..10).map(f64::from).collect());
        assert_eq!((s.p10_ms, s.median_ms, s.p90_ms), (1.0, 5.0, 9.0));
    }
}
