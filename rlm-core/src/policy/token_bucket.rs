//! The token bucket of `LIMIT SYN` (one per rule's bucket and class), also used by the injection
//! budgets and paced release of [`crate::actions`].

use crate::time::Timestamp;

/// A token bucket: refilled at a rate up to a cap, one token for each thing let through
/// (`LIMIT SYN`, and the injection budgets and paced release of [`crate::actions`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct TokenBucket {
    tokens: f64,
    last: Timestamp,
}

impl TokenBucket {
    /// A bucket holding `cap` tokens, as of `now`.
    pub(crate) fn full(cap: f64, now: Timestamp) -> TokenBucket {
        TokenBucket { tokens: cap, last: now }
    }

    /// Add what `rate` per second brought since the last look, up to `cap`.
    pub(crate) fn refill(&mut self, now: Timestamp, rate: f64, cap: f64) {
        self.tokens = (self.tokens + now.saturating_since(self.last).as_secs_f64() * rate).min(cap);
        self.last = now.max(self.last);
    }

    /// Add `n` tokens, up to `cap`.
    pub(crate) fn add(&mut self, n: f64, cap: f64) {
        self.tokens = (self.tokens + n).min(cap);
    }

    /// Tokens held (whole and part).
    pub(crate) fn tokens(&self) -> f64 {
        self.tokens
    }

    /// Whether there is a token to take.
    pub(crate) fn has_token(&self) -> bool {
        self.tokens >= 1.0
    }

    /// Refill at `rate` up to `cap` as of `now`, then take a token if there is one: a policer's
    /// one step (`LIMIT SYN`, `LIMIT REQUESTS`, the SLA controller, unproven records).
    pub(crate) fn admit(&mut self, now: Timestamp, rate: f64, cap: f64) -> bool {
        self.refill(now, rate, cap);
        self.take()
    }

    /// Take a token if there is one.
    pub(crate) fn take(&mut self) -> bool {
        let ok = self.has_token();
        if ok {
            self.tokens -= 1.0;
        }
        ok
    }
}
