//! Content adaptation on the packets (004 section 5): embedded objects removed from container
//! pages and image requests rewritten to smaller variants, in place, with the sequence space
//! unchanged and no copy of the content kept. The plan is docs/adapt-design.md.
//!
//! [`patch`] edits a segment's payload and keeps its TCP checksum right; [`remove`] decides which
//! image references of a container go; [`rewrite`] places a request's new target; [`record`]
//! keeps what was changed, so that every copy is changed alike.

pub mod patch;
pub mod predict;
pub mod record;
pub mod remove;
pub mod rewrite;

use record::Record;
use remove::Removal;

/// What content adaptation keeps for one connection.
#[derive(Clone, Debug, Default)]
pub struct AdaptConn {
    /// Container responses under way with a removal decided (pipelined ones wait their turn).
    pub removals: Vec<Removal>,
    /// What was blanked on the server-to-client stream.
    pub record: Record,
    /// What was rewritten on the client-to-server stream (request targets).
    pub requests: Record,
    /// The end of the furthest server segment past a hole that went on unblanked (no removal
    /// was under way): references in it, found once the hole fills, stay.
    pub ahead_sent_to: Option<u32>,
    /// Server segments past a hole dropped in a row.
    pub ahead_dropped: u32,
}

impl AdaptConn {
    /// Nothing under way and nothing to change: the connection can be forgotten.
    pub fn is_idle(&self) -> bool {
        self.removals.is_empty() && self.record.is_empty() && self.requests.is_empty() && self.ahead_sent_to.is_none()
    }
}
