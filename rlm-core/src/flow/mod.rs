//! Flow: TCP connections tracked in both directions from the segments seen.
//!
//! Tolerant by design: it follows handshakes (counting and timing SYN and
//! SYN/ACK retransmissions), puts segments back in order through a small
//! bounded out-of-order buffer, skips retransmitted bytes, declares a gap
//! when a hole is never filled (capture loss) and copes with connections
//! that started before the capture did. The table is bounded; the
//! least-recently-seen connections are evicted when it is full.
//!
//! [`FlowTable`] (`table`) holds the connections; each is a [`Conn`] (`conn`): its handshake,
//! its state and what a segment does to it. Each direction's bytes are put in order by a
//! [`HalfStream`] (`stream`), and handed to the connection's application analyzer through
//! [`StreamAnalyzer`], here.

mod conn;
mod stream;
mod table;

use crate::time::Timestamp;

pub use conn::{CloseReason, Conn, ConnState, FlowNote, Handshake, Sends};
pub use stream::{Chunk, HalfStream, SegFate, MAX_OOO_BYTES, MAX_OOO_SEGMENTS};
pub use table::{ConnId, FlowKey, FlowTable};

/// Which way a segment travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// Client to server.
    ToServer,
    /// Server to client.
    ToClient,
}

/// What the TCP tracker hands a connection's application analyzer: its bytes each way in order,
/// the holes it will never see, the ends. The tracker knows TCP only; what the bytes mean is the
/// analyzer's ([`crate::analyzer`]).
pub trait StreamAnalyzer {
    /// What the analyzer reports.
    type Event;
    /// In-order bytes of `dir` starting at sequence number `seq`.
    fn on_data(&mut self, now: Timestamp, dir: Dir, seq: u32, data: &[u8], out: &mut Vec<Self::Event>);
    /// `len` bytes of `dir` that will never be seen (a capture gap, or acknowledged past a hole).
    fn on_gap(&mut self, now: Timestamp, dir: Dir, len: u64, out: &mut Vec<Self::Event>);
    /// `len` bytes of `dir` in order from sequence number `seq`, carried now but not seen (the
    /// end of a cut frame): unlike a gap, nothing was lost on the wire, and they are timed.
    fn on_absent(&mut self, now: Timestamp, dir: Dir, seq: u32, len: u32, out: &mut Vec<Self::Event>);
    /// `dir` ended (its FIN, in order).
    fn on_end(&mut self, now: Timestamp, dir: Dir, out: &mut Vec<Self::Event>);
    /// The connection ended; `cut_off`: by the end of the capture or a shutdown, not the peers.
    fn on_close(&mut self, now: Timestamp, cut_off: bool, out: &mut Vec<Self::Event>);
}
