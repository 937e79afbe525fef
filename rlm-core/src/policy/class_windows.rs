//! The class statistics: each class's, and all pageviews', response times over a sliding window,
//! read by the rules' `RT` conditions. The mean is a running sum. A percentile is kept, from the
//! first time it is read, as a split of the window's samples in two ordered sets (the ones at or
//! below its nearest rank, and the rest), updated with each pageview and each expiry: O(log n)
//! per sample and percentile kept, and O(log n) per read, never a sort of the window once it is
//! kept. A window holds at most [`MAX_WINDOW_SAMPLES`] samples: past it the oldest leaves first.
//!
//! Each sample has a source (its client's address, an IPv6 client's /64), and no source holds
//! more than twice its fair share of a window: once a source holds [`SOURCE_MIN`] samples, a
//! further one is refused while it holds at least `2 n / k` of the window's `n` samples from
//! `k` sources. One client alone in its class is never refused (its fair share is everything),
//! and one real client that makes many slow pageviews among sixty others moves its class's
//! statistics by at most twice as much as each of them.

use std::cell::RefCell;
use std::cmp::Ordering;
use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use rules::{Aggregates, Scope, Stat};

use crate::time::Timestamp;

/// Most samples one window holds: a pageview into a full window pushes its oldest sample out
/// before its time (counted, `Stats::window_evicted`), so the window then covers less than its
/// length. Bounds a window's memory (with a few percentiles kept, about 100 bytes a sample) and
/// the depth of its ordered sets.
pub(super) const MAX_WINDOW_SAMPLES: usize = 65_536;

/// Samples a source holds in a window before its share is looked at.
pub(super) const SOURCE_MIN: u32 = 16;

/// A sample in a percentile's ordered sets: its response time, ordered by `f64::total_cmp` (the
/// order the nearest rank is taken in), then its sequence number in the window, so that equal
/// times are distinct and an expiring sample is found exactly.
#[derive(Clone, Copy, Debug)]
struct Key {
    rt: f64,
    seq: u64,
}

#[cfg(test)]
thread_local! {
    /// `Key` comparisons made on this thread (the cost test counts them).
    static COMPARISONS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

impl Ord for Key {
    fn cmp(&self, other: &Self) -> Ordering {
        #[cfg(test)]
        COMPARISONS.with(|c| c.set(c.get() + 1));
        self.rt.total_cmp(&other.rt).then(self.seq.cmp(&other.seq))
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Key {}

/// The nearest rank of percentile `p` among `n` samples: `ceil(p/100 * n)`, within `1..=n` (0
/// when there is none).
pub(super) fn rank(p: u8, n: usize) -> usize {
    if n == 0 {
        return 0;
    }
    let r = ((f64::from(p) / 100.0) * n as f64).ceil() as usize;
    r.clamp(1, n)
}

/// One percentile of a window, kept across its pushes and expiries: `lower` holds the window's
/// `rank(p, n)` smallest samples, `upper` the others (every key of `lower` below every key of
/// `upper`), so the percentile is `lower`'s largest.
#[derive(Debug)]
struct Split {
    p: u8,
    lower: BTreeSet<Key>,
    upper: BTreeSet<Key>,
}

impl Split {
    /// The split of `keys` (a window's samples) for percentile `p`: one sort, O(n log n).
    fn new(p: u8, keys: impl Iterator<Item = Key>) -> Split {
        let mut lower: Vec<Key> = keys.collect();
        lower.sort_unstable();
        let upper = lower.split_off(rank(p, lower.len()));
        Split { p, lower: lower.into_iter().collect(), upper: upper.into_iter().collect() }
    }

    /// A sample joined the window, which now holds `n`.
    fn insert(&mut self, k: Key, n: usize) {
        match self.lower.last() {
            Some(max) if k > *max => self.upper.insert(k),
            _ => self.lower.insert(k),
        };
        self.rebalance(n);
    }

    /// A sample left the window, which now holds `n`.
    fn remove(&mut self, k: Key, n: usize) {
        if !self.lower.remove(&k) {
            let found = self.upper.remove(&k);
            debug_assert!(found, "a sample leaving the window is in one of its percentile's sets");
        }
        self.rebalance(n);
    }

    /// Bring `lower` back to the rank of `n` samples, moving its largest up or `upper`'s
    /// smallest down (one move after one insert or removal).
    fn rebalance(&mut self, n: usize) {
        let want = rank(self.p, n);
        while self.lower.len() > want {
            let k = self.lower.pop_last().expect("lower is longer than the rank");
            self.upper.insert(k);
        }
        while self.lower.len() < want {
            let Some(k) = self.upper.pop_first() else { break };
            self.lower.insert(k);
        }
    }

    fn value(&self) -> Option<f64> {
        self.lower.last().map(|k| k.rt)
    }
}

/// Response times of the pageviews that finished within a sliding window.
#[derive(Debug)]
pub(super) struct Window {
    /// (when, response time, source), oldest first.
    samples: VecDeque<(Timestamp, f64, u64)>,
    /// Samples each source holds.
    per_source: ahash::AHashMap<u64, u32>,
    /// Sequence number of the oldest sample: the `i`-th sample's is `first_seq + i`.
    first_seq: u64,
    sum: f64,
    /// The percentiles read since the window was made or [`Window::forget_percentiles`], each
    /// kept from its first read on.
    splits: RefCell<Vec<Split>>,
    /// Most samples held ([`MAX_WINDOW_SAMPLES`]; fewer in tests).
    cap: usize,
    /// Splits made (each made once, at its percentile's first read).
    #[cfg(test)]
    builds: std::cell::Cell<u64>,
}

impl Default for Window {
    fn default() -> Self {
        Window::with_cap(MAX_WINDOW_SAMPLES)
    }
}

impl Window {
    fn with_cap(cap: usize) -> Window {
        Window {
            samples: VecDeque::new(),
            per_source: ahash::AHashMap::new(),
            first_seq: 0,
            sum: 0.0,
            splits: RefCell::new(Vec::new()),
            cap: cap.max(1),
            #[cfg(test)]
            builds: std::cell::Cell::new(0),
        }
    }

    /// Samples in the window.
    pub(super) fn len(&self) -> usize {
        self.samples.len()
    }

    /// A pageview finished at `at`, from one source. True when the window was full and its
    /// oldest sample left first.
    #[cfg(test)]
    pub(super) fn push(&mut self, at: Timestamp, rt: f64) -> bool {
        self.push_from(at, rt, 0).expect("one source is never over its share")
    }

    /// Whether `source` holds its share of the window already: [`SOURCE_MIN`] samples or more,
    /// and at least twice the window's mean per source.
    fn over_share(&self, source: u64) -> bool {
        let held = self.per_source.get(&source).copied().unwrap_or(0);
        held >= SOURCE_MIN && u64::from(held) * self.per_source.len() as u64 >= 2 * self.samples.len() as u64
    }

    /// A pageview of `source` finished at `at`: `None` when the source holds its share of the
    /// window already (the sample is not taken), else whether the window was full and its
    /// oldest sample left first.
    pub(super) fn push_from(&mut self, at: Timestamp, rt: f64, source: u64) -> Option<bool> {
        if self.over_share(source) {
            return None;
        }
        let evicted = self.samples.len() >= self.cap;
        if evicted {
            self.pop_front();
        }
        let key = Key { rt, seq: self.first_seq + self.samples.len() as u64 };
        self.samples.push_back((at, rt, source));
        *self.per_source.entry(source).or_insert(0) += 1;
        self.sum += rt;
        let n = self.samples.len();
        for s in self.splits.get_mut() {
            s.insert(key, n);
        }
        Some(evicted)
    }

    fn pop_front(&mut self) {
        let Some((_, rt, source)) = self.samples.pop_front() else { return };
        if let std::collections::hash_map::Entry::Occupied(mut e) = self.per_source.entry(source) {
            *e.get_mut() -= 1;
            if *e.get() == 0 {
                e.remove();
            }
        }
        let key = Key { rt, seq: self.first_seq };
        self.first_seq += 1;
        self.sum -= rt;
        let n = self.samples.len();
        for s in self.splits.get_mut() {
            s.remove(key, n);
        }
        if n == 0 {
            self.sum = 0.0;
        }
    }

    pub(super) fn expire(&mut self, now: Timestamp, window: Duration) {
        while self.samples.front().is_some_and(|(t, _, _)| now.saturating_since(*t) > window) {
            self.pop_front();
        }
    }

    /// Stop keeping the percentiles read so far (a new rule set may read others); the next
    /// read of one makes it again.
    pub(super) fn forget_percentiles(&mut self) {
        self.splits.get_mut().clear();
    }

    fn mean(&self) -> Option<f64> {
        (!self.samples.is_empty()).then(|| (self.sum / self.samples.len() as f64).max(0.0))
    }

    /// Nearest-rank percentile: the sample at rank `ceil(p/100 * n)` (within `1..=n`) in
    /// `f64::total_cmp` order. Its first read makes its split (one sort); later reads and
    /// updates keep it.
    fn percentile(&self, p: u8) -> Option<f64> {
        let mut splits = self.splits.borrow_mut();
        if let Some(s) = splits.iter().find(|s| s.p == p) {
            return s.value();
        }
        let keys = self.samples.iter().enumerate().map(|(i, &(_, rt, _))| Key { rt, seq: self.first_seq + i as u64 });
        let s = Split::new(p, keys);
        #[cfg(test)]
        self.builds.set(self.builds.get() + 1);
        let v = s.value();
        splits.push(s);
        v
    }

    pub(super) fn stat(&self, stat: Stat) -> Option<f64> {
        match stat {
            Stat::Mean => self.mean(),
            Stat::Percentile(p) => self.percentile(p),
        }
    }
}

/// Per-class windows; index = class id, the last one all pageviews.
pub(super) struct ClassWindows(pub(super) Vec<Window>);

impl ClassWindows {
    /// The window a scope reads: its class's, or all pageviews' for `RT.ALL`.
    pub(super) fn get(&self, scope: Scope) -> Option<&Window> {
        match scope {
            Scope::All => self.0.last(),
            Scope::Class(c) => self.0.get(c.index()),
        }
    }
}

impl Aggregates for ClassWindows {
    fn rt(&self, scope: Scope, stat: Stat) -> Option<Duration> {
        self.get(scope)?.stat(stat).map(|s| Duration::from_secs_f64(s.clamp(0.0, 1e9)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const PS: [u8; 6] = [1, 50, 90, 95, 99, 100];

    /// The nearest-rank percentile of `samples` by sorting them, as the windows did before.
    fn naive_percentile<S>(samples: &VecDeque<(Timestamp, f64, S)>, p: u8) -> Option<f64> {
        let mut v: Vec<f64> = samples.iter().map(|s| s.1).collect();
        v.sort_by(f64::total_cmp);
        (!v.is_empty()).then(|| v[rank(p, v.len()) - 1])
    }

    #[derive(Clone, Debug)]
    enum Op {
        /// Time goes on by this many ms and a pageview with this response time finishes.
        Push(u64, f64),
        /// Time goes on by this many ms and the window slides.
        Expire(u64),
    }

    fn rt() -> impl Strategy<Value = f64> {
        prop_oneof![
            // Few distinct values: many duplicates.
            (0u32..8).prop_map(|k| f64::from(k) * 0.5),
            0.0..60.0f64,
            Just(-0.0),
            Just(1e6),
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![3 => (0u64..400, rt()).prop_map(|(dt, v)| Op::Push(dt, v)), 1 => (0u64..1_500).prop_map(Op::Expire)]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// After every push and expiry, each percentile and the mean are those of the samples
        /// left in the window, as a sort of them gives; a full window drops its oldest first.
        #[test]
        fn percentiles_match_a_sort_after_every_push_and_expiry(
            ops in prop::collection::vec(op(), 1..200),
            window_ms in 1u64..3_000,
            cap in prop_oneof![Just(MAX_WINDOW_SAMPLES), 1usize..12],
            // Percentiles read from the start, or first read after this many operations.
            first_read in 0usize..40,
        ) {
            let window = Duration::from_millis(window_ms);
            let mut w = Window::with_cap(cap);
            let mut model: VecDeque<(Timestamp, f64, ())> = VecDeque::new();
            let mut now = 0;
            // The running sum's rounding: at most an ulp of the samples' total per operation.
            let mut pushed = 0.0;
            let i_end = ops.len();
            for (i, op) in ops.into_iter().enumerate() {
                match op {
                    Op::Push(dt, v) => {
                        now += dt;
                        pushed += v.abs();
                        let full = model.len() >= cap;
                        if full {
                            model.pop_front();
                        }
                        model.push_back((Timestamp::from_millis(now), v, ()));
                        prop_assert_eq!(w.push(Timestamp::from_millis(now), v), full);
                    }
                    Op::Expire(dt) => {
                        now += dt;
                        let t = Timestamp::from_millis(now);
                        while model.front().is_some_and(|(s, _, _)| t.saturating_since(*s) > window) {
                            model.pop_front();
                        }
                        w.expire(t, window);
                    }
                }
                prop_assert_eq!(w.len(), model.len());
                if i < first_read {
                    continue;
                }
                for p in PS {
                    let (got, want) = (w.stat(Stat::Percentile(p)), naive_percentile(&model, p));
                    prop_assert_eq!(got.map(f64::to_bits), want.map(f64::to_bits), "P{} of {:?}", p, model);
                }
                let want = (!model.is_empty()).then(|| model.iter().map(|s| s.1).sum::<f64>() / model.len() as f64);
                match (w.stat(Stat::Mean), want) {
                    (None, None) => {}
                    (Some(a), Some(b)) if a == b || (a - b.max(0.0)).abs() <= 1e-15 * pushed * (i + 1) as f64 => {}
                    (a, b) => prop_assert!(false, "mean {:?}, want {:?} of {:?}", a, b, model),
                }
            }
            // Each percentile made once, at its first read, then kept.
            let read = first_read < i_end;
            prop_assert_eq!(w.builds.get(), if read { PS.len() as u64 } else { 0 });
        }
    }

    /// 20,000 pageviews into a window read after each: its P95 is made once and then kept, each
    /// pageview and expiry costing a few dozen comparisons (a sort per read would cost hundreds of
    /// thousands). Counts comparisons, not time.
    #[test]
    fn a_percentile_is_made_once_then_kept_in_logarithmic_comparisons() {
        let mut w = Window::default();
        let window = Duration::from_secs(1_000);
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            // xorshift: response times in ms, many of them equal
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 5_000) as f64 / 1_000.0
        };
        for i in 0..20_000u64 {
            w.push(Timestamp::from_millis(i), next());
            w.expire(Timestamp::from_millis(i), window);
            assert!(w.stat(Stat::Percentile(95)).is_some());
        }
        assert_eq!(w.len(), 20_000);
        assert_eq!(w.builds.get(), 1);
        // Now the window is full and slides: each pageview pushes one in and expires one.
        let before = COMPARISONS.with(|c| c.get());
        let ops = 2_000u64;
        for i in 0..ops {
            let t = Timestamp::from_millis(1_000_001 + i);
            w.push(t, next());
            w.expire(t, window);
            let got = w.stat(Stat::Percentile(95));
            if i % 100 == 0 {
                assert_eq!(got, naive_percentile(&w.samples, 95));
            }
        }
        let per_op = (COMPARISONS.with(|c| c.get()) - before) / ops;
        assert_eq!(w.builds.get(), 1, "kept, not made again");
        // A pageview is at most five searches of a B-tree of 20,000 keys (the push, the expiry
        // from either set, a move each way between the sets), each at most 11 keys a node on at
        // most 7 levels; about 43 were measured. One sort of the window is some 280,000.
        assert!(per_op <= 5 * 11 * 7, "{per_op} comparisons per pageview");
        // A reload forgets it; the next read makes it again, once.
        w.forget_percentiles();
        assert_eq!(w.stat(Stat::Percentile(95)), naive_percentile(&w.samples, 95));
        assert_eq!(w.stat(Stat::Percentile(95)), naive_percentile(&w.samples, 95));
        assert_eq!(w.builds.get(), 2);
    }

    #[test]
    fn a_full_window_drops_its_oldest_first() {
        let mut w = Window::default();
        for i in 0..MAX_WINDOW_SAMPLES as u64 {
            assert!(!w.push(Timestamp::from_millis(i), (i % 100) as f64));
        }
        assert_eq!((w.stat(Stat::Percentile(1)), w.stat(Stat::Percentile(100))), (Some(0.0), Some(99.0)));
        // The oldest (0.0) leaves for the new one.
        assert!(w.push(Timestamp::from_millis(1 << 20), 1_000.0));
        assert_eq!(w.len(), MAX_WINDOW_SAMPLES);
        assert_eq!(w.stat(Stat::Percentile(100)), Some(1_000.0));
        assert_eq!(w.stat(Stat::Percentile(1)), naive_percentile(&w.samples, 1));
        assert_eq!(w.samples.front().map(|s| s.1), Some(1.0));
    }

    /// One source among sixty holds at most twice its fair share; one source alone in its
    /// window, or one of two, is never refused; a source's refused samples come back in once
    /// its old ones expire.
    #[test]
    fn no_source_holds_more_than_twice_its_share() {
        let mut w = Window::default();
        let t = Timestamp::from_millis;
        for i in 0..600u64 {
            assert_eq!(w.push_from(t(i), 1.0, i % 60), Some(false));
        }
        let taken = (0..1_000).filter(|i| w.push_from(t(600 + i), 21.0, 999).is_some()).count();
        // 20 samples of the 61st source (twice the others' 10), and no more.
        let held = w.per_source[&999];
        assert!(held as usize == taken && (20..=21).contains(&held), "held {held}");
        let mean = w.stat(Stat::Mean).unwrap();
        assert!(mean < 1.0 + 21.0 * 21.0 / 600.0, "mean {mean}");
        // Alone: every sample counts.
        let mut one = Window::default();
        assert!((0..1_000).all(|i| one.push_from(t(i), 1.0, 7) == Some(false)));
        // One of two: never refused either (each holds at most the whole).
        let mut two = Window::default();
        assert!((0..1_000).all(|i| two.push_from(t(i), 1.0, if i < 10 { 1 } else { 2 }) == Some(false)));
        // Expiry gives the heavy source room again.
        w.expire(t(600 + 1_000 + 10_000), Duration::from_millis(5_000));
        assert!(w.per_source.is_empty());
        assert_eq!(w.push_from(t(11_600), 21.0, 999), Some(false));
    }
}
