//! The class statistics: each class's, and all pageviews', response times over a sliding window,
//! read by the rules' `RT` conditions (mean as a running sum, percentiles from a sorted copy made
//! only when one is read after the window changed).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::time::Duration;

use rules::{Aggregates, Scope, Stat};

use crate::time::Timestamp;

/// Response times of the pageviews that finished within a sliding window.
#[derive(Debug, Default)]
pub(super) struct Window {
    pub(super) samples: VecDeque<(Timestamp, f64)>,
    sum: f64,
    sorted: RefCell<Option<Vec<f64>>>,
}

impl Window {
    pub(super) fn push(&mut self, at: Timestamp, rt: f64) {
        self.samples.push_back((at, rt));
        self.sum += rt;
        self.sorted.replace(None);
    }

    pub(super) fn expire(&mut self, now: Timestamp, window: Duration) {
        let mut changed = false;
        while self.samples.front().is_some_and(|(t, _)| now.saturating_since(*t) > window) {
            let (_, rt) = self.samples.pop_front().expect("front checked");
            self.sum -= rt;
            changed = true;
        }
        if changed {
            self.sorted.replace(None);
            if self.samples.is_empty() {
                self.sum = 0.0;
            }
        }
    }

    fn mean(&self) -> Option<f64> {
        (!self.samples.is_empty()).then(|| (self.sum / self.samples.len() as f64).max(0.0))
    }

    /// Nearest-rank percentile.
    fn percentile(&self, p: u8) -> Option<f64> {
        if self.samples.is_empty() {
            return None;
        }
        let mut cache = self.sorted.borrow_mut();
        let v = cache.get_or_insert_with(|| {
            let mut v: Vec<f64> = self.samples.iter().map(|(_, r)| *r).collect();
            v.sort_by(f64::total_cmp);
            v
        });
        let rank = ((f64::from(p) / 100.0) * v.len() as f64).ceil() as usize;
        Some(v[rank.clamp(1, v.len()) - 1])
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
