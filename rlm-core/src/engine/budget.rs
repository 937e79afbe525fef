//! What connections hold for later (partial heads, requests waiting for their responses,
//! out-of-order segments), counted against one global budget, [`Config::max_held_bytes`]:
//! each connection's limits alone let 262,144 connections hold gigabytes. Over the budget, the
//! connections that began holding first are evicted: a real client's request waits for its
//! response for a second, an attacker's are held as long as it can make them.

use std::collections::VecDeque;

use super::Engine;
use crate::flow::{CloseReason, ConnId};
use crate::time::Timestamp;

/// The budget's state.
#[derive(Debug, Default)]
pub(super) struct Held {
    /// Bytes held by all connections, as last counted.
    total: usize,
    /// Connections in the order they began holding (one may be there more than once, or gone:
    /// checked when it comes to the front).
    holders: VecDeque<ConnId>,
    /// `holders`'s length after its last compaction.
    compacted: usize,
}

impl Engine {
    /// Count what connection `id` holds after a segment; over the budget, evict the
    /// connections that began holding first until it is met.
    pub(super) fn account_held(&mut self, now: Timestamp, id: ConnId) {
        let Some(c) = self.flows.get_mut(id) else { return };
        let held = c.app.as_ref().map_or(0, |a| a.held_bytes()) + c.c2s.held_bytes() + c.s2c.held_bytes();
        let held = held.min(u32::MAX as usize) as u32;
        let old = std::mem::replace(&mut c.held, held);
        self.held.total = self.held.total + held as usize - old as usize;
        if old == 0 && held > 0 {
            self.held.holders.push_back(id);
        }
        while self.held.total > self.cfg.max_held_bytes {
            let Some(victim) = self.held.holders.pop_front() else { break };
            if self.flows.get(victim).is_some_and(|c| c.held > 0) {
                self.remove_conn(now, victim, CloseReason::Evicted);
                self.stats.evicted_held += 1;
            }
        }
        if self.held.holders.len() > 2 * self.held.compacted + 1024 {
            let flows = &self.flows;
            let mut seen = ahash::AHashSet::new();
            self.held.holders.retain(|id| flows.get(*id).is_some_and(|c| c.held > 0) && seen.insert(*id));
            self.held.compacted = self.held.holders.len();
        }
    }

    /// Connection `id` holds nothing any more (it closed): out of the count.
    pub(super) fn release_held(&mut self, id: ConnId) {
        if let Some(c) = self.flows.get_mut(id) {
            self.held.total -= std::mem::take(&mut c.held) as usize;
        }
    }

    /// Bytes all connections hold for later, as last counted.
    pub fn held_bytes(&self) -> usize {
        self.held.total
    }
}
