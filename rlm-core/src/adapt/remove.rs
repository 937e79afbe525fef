//! `REMOVE EMBEDS` (004 section 5; transition 3 to 4 of Figure 3): which image references of a
//! container page go, and the blanks that carry it out on every copy of their bytes.
//!
//! The decision is taken per container response at its head ([`Removal`]), then per image
//! reference in document order at the tag's `>`. A reference that goes is blanked from its
//! attribute name's first byte through the value's end (`<img           alt="x">`): the element
//! stays, with no URL to fetch. What was blanked is kept per connection in sequence space
//! ([`Record`]), so that a retransmission, however the server cuts it, is blanked alike.

use rules::{EmbedSelect, RuleId};

use super::patch::Edit;

/// Most blanked ranges kept per connection (those the client has acknowledged are let go); past
/// it, further references are kept.
pub const MAX_RECORD: usize = 256;

/// The removal decided at one container response's head.
#[derive(Clone, Debug)]
pub struct Removal {
    /// The transaction (its position on the connection).
    pub depth: u32,
    pub rule: RuleId,
    pub select: EmbedSelect,
    /// Image references of the container seen so far.
    pub seen: u32,
}

impl Removal {
    pub fn new(depth: u32, rule: RuleId, select: EmbedSelect) -> Removal {
        Removal { depth, rule, select, seen: 0 }
    }

    /// The container's next image reference, in document order: whether it goes.
    pub fn takes(&mut self, url: &str) -> bool {
        self.seen += 1;
        selects(&self.select, self.seen, url)
    }
}

/// Whether `select` takes the image reference at `position` (1-based, document order) with
/// `url` (as written in the page). `IF PREDICTED` takes nothing yet: prediction comes later.
pub fn selects(select: &EmbedSelect, position: u32, url: &str) -> bool {
    match select {
        EmbedSelect::All => true,
        EmbedSelect::After(n) => position > *n,
        EmbedSelect::At(at) => at.contains(&position),
        EmbedSelect::Matching(glob) => glob.matches(url, false),
        EmbedSelect::Predicted { .. } => false,
    }
}

/// The ranges blanked on one connection's server-to-client stream, as `(seq, len)`.
#[derive(Clone, Debug, Default)]
pub struct Record {
    ranges: Vec<(u32, u32)>,
}

impl Record {
    /// Blank `[seq, seq + len)` on every copy from now on; false (nothing added) when full.
    pub fn add(&mut self, ranges: &[(u32, u32)]) -> bool {
        if self.ranges.len() + ranges.len() > MAX_RECORD {
            return false;
        }
        self.ranges.extend_from_slice(ranges);
        true
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// The edits of a segment whose payload of `len` bytes starts at `seq`.
    pub fn edits(&self, seq: u32, len: usize) -> Vec<Edit> {
        let mut out = Vec::new();
        for &(start, n) in &self.ranges {
            // Offsets from the segment's first byte; the stream's window is far below 2^31.
            let from = start.wrapping_sub(seq) as i32 as i64;
            let (a, b) = (from.max(0), (from + n as i64).min(len as i64));
            if a < b {
                out.push(Edit::spaces(a as usize, (b - a) as usize));
            }
        }
        out.sort_by_key(|e| e.at);
        out
    }

    /// The client acknowledged every byte before `acked`: ranges wholly below it cannot be
    /// asked for again.
    pub fn prune(&mut self, acked: u32) {
        self.ranges.retain(|&(start, n)| (acked.wrapping_sub(start.wrapping_add(n)) as i32) < 0);
    }
}

/// What content adaptation keeps for one connection.
#[derive(Clone, Debug, Default)]
pub struct AdaptConn {
    /// Container responses under way with a removal decided (pipelined ones wait their turn).
    pub removals: Vec<Removal>,
    pub record: Record,
    /// The end of the furthest server segment past a hole that went on unblanked (no removal
    /// was under way): references in it, found once the hole fills, stay.
    pub ahead_sent_to: Option<u32>,
    /// Server segments past a hole dropped in a row.
    pub ahead_dropped: u32,
}

impl AdaptConn {
    /// Nothing under way and nothing to blank: the connection can be forgotten.
    pub fn is_idle(&self) -> bool {
        self.removals.is_empty() && self.record.is_empty() && self.ahead_sent_to.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapt::patch::Fill;
    use rules::Glob;

    #[test]
    fn selectors_take_by_position_and_by_url() {
        let take = |s: EmbedSelect| (1..=4).map(|p| selects(&s, p, &format!("/img/{p}.gif"))).collect::<Vec<_>>();
        assert_eq!(take(EmbedSelect::All), [true, true, true, true]);
        assert_eq!(take(EmbedSelect::After(1)), [false, true, true, true]);
        assert_eq!(take(EmbedSelect::At(vec![2, 4])), [false, true, false, true]);
        assert_eq!(take(EmbedSelect::Matching(Glob::new("*/3.gif"))), [false, false, true, false]);
        let mut r = Removal::new(1, RuleId(0), EmbedSelect::At(vec![2]));
        assert_eq!([r.takes("/a"), r.takes("/b"), r.takes("/c")], [false, true, false]);
    }

    #[test]
    fn a_record_blanks_every_copy_however_cut_and_across_the_wrap() {
        let mut rec = Record::default();
        let base = u32::MAX - 9;
        // Bytes 5..15 and 30..34 of a stream starting just below the wrap.
        assert!(rec.add(&[(base.wrapping_add(5), 10), (base.wrapping_add(30), 4)]));
        let spans = |rec: &Record, seq_off: u32, len: usize| {
            rec.edits(base.wrapping_add(seq_off), len).iter().map(|e| (e.at, e.len(), e.fill == Fill::Spaces(e.len()))).collect::<Vec<_>>()
        };
        assert_eq!(spans(&rec, 0, 40), [(5, 10, true), (30, 4, true)]);
        assert_eq!(spans(&rec, 8, 4), [(0, 4, true)]);
        assert_eq!(spans(&rec, 12, 20), [(0, 3, true), (18, 2, true)]);
        assert_eq!(spans(&rec, 15, 15), []);
        assert_eq!(spans(&rec, 34, 100), []);
        // Acknowledged past the first range: it goes, the second stays.
        rec.prune(base.wrapping_add(20));
        assert_eq!(rec.len(), 1);
        assert_eq!(spans(&rec, 0, 40), [(30, 4, true)]);
        rec.prune(base.wrapping_add(34));
        assert!(rec.is_empty());
    }

    #[test]
    fn a_full_record_takes_nothing_more() {
        let mut rec = Record::default();
        for i in 0..MAX_RECORD as u32 {
            assert!(rec.add(&[(i * 100, 10)]));
        }
        assert!(!rec.add(&[(1_000_000, 10)]));
        assert_eq!(rec.len(), MAX_RECORD);
    }
}
