//! Flow: TCP connections tracked in both directions from the segments seen.
//!
//! Tolerant by design: it follows handshakes (counting and timing SYN and
//! SYN/ACK retransmissions), puts segments back in order through a small
//! bounded out-of-order buffer, skips retransmitted bytes, declares a gap
//! when a hole is never filled (capture loss) and copes with connections
//! that started before the capture did. The table is bounded; the
//! least-recently-seen connections are evicted when it is full.

use std::time::Duration;

use ahash::AHashMap;

use crate::time::Timestamp;
use crate::wire::{Endpoint, Segment};

/// Out-of-order data held per direction before a hole is declared a gap.
pub const MAX_OOO_BYTES: usize = 256 * 1024;
/// Most out-of-order segments held per direction before a hole is declared a gap.
pub const MAX_OOO_SEGMENTS: usize = 64;
/// Segments further ahead than this are not plausible for this connection.
const MAX_AHEAD: u32 = 64 * 1024 * 1024;

/// Which way a segment travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// Client to server.
    ToServer,
    /// Server to client.
    ToClient,
}

/// Sequence comparison modulo 2^32.
fn seq_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// One direction's byte stream.
#[derive(Debug, Default)]
pub struct HalfStream {
    started: bool,
    /// Next sequence number expected in order.
    next: u32,
    fin_seen: bool,
    /// Payload bytes delivered in order (excluding gaps).
    pub bytes: u64,
    /// Bytes declared missing.
    pub gap_bytes: u64,
    /// Segments that repeated data already delivered.
    pub retransmits: u32,
    /// Time of the last segment that carried new data.
    pub last_data: Option<Timestamp>,
    /// Highest sequence number the receiver acknowledged (seen here).
    acked: Option<u32>,
    ooo: Option<Box<OooBuf>>,
}

#[derive(Debug, Default)]
struct OooBuf {
    /// (seq, data), sorted by seq.
    segs: Vec<(u32, Vec<u8>)>,
    bytes: usize,
}

/// A piece of a direction's stream, in order.
pub enum Chunk<'a> {
    /// Bytes in order; `seq` is the sequence number of the first (content adaptation maps the
    /// stream's positions back onto the wire with it).
    Data {
        /// Sequence number of `data`'s first byte.
        seq: u32,
        /// The bytes.
        data: &'a [u8],
    },
    /// This many bytes will never be seen: a hole declared a gap (the out-of-order buffer
    /// overflowed, or the receiver acknowledged past it, or the connection closed with it open).
    Gap(u64),
    /// A segment carrying only bytes already delivered: the sender retransmitted them because
    /// the receiver did not get them (lost past the appliance).
    Retransmitted,
}

/// What became of a segment's payload in its direction's stream. Content adaptation edits
/// every copy of a byte alike, and needs to know which copies carry bytes it has not scanned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegFate {
    /// No payload went to the stream (a handshake segment, a bare ACK, an RST, a closed connection).
    Empty,
    /// Every byte new, in order.
    New,
    /// Some bytes delivered before, the rest new.
    Partial,
    /// Every byte delivered before.
    Retransmission,
    /// Past a hole: kept until the hole fills.
    Ahead,
    /// Too far from the stream to belong to it.
    Ignored,
}

impl HalfStream {
    fn start_at(&mut self, next: u32) {
        self.started = true;
        self.next = next;
    }

    /// Next expected sequence number, once started.
    pub fn next_seq(&self) -> Option<u32> {
        self.started.then_some(self.next)
    }

    /// Take a segment's payload; call `sink` with what is now in order.
    fn accept(&mut self, now: Timestamp, seq: u32, payload: &[u8], sink: &mut dyn FnMut(Chunk<'_>)) -> SegFate {
        if payload.is_empty() {
            return SegFate::Empty;
        }
        if !self.started {
            self.start_at(seq);
        }
        let ahead = seq.wrapping_sub(self.next);
        if ahead == 0 || seq_lt(seq, self.next) {
            let skip = self.next.wrapping_sub(seq) as usize;
            if skip >= payload.len() {
                self.retransmits += 1;
                // Resent bytes the receiver had acknowledged are spurious: it had them already.
                let end = seq.wrapping_add(payload.len() as u32);
                if self.acked.is_none_or(|a| seq_lt(a, end)) {
                    sink(Chunk::Retransmitted);
                }
                return SegFate::Retransmission;
            }
            if skip > 0 {
                self.retransmits += 1;
            }
            self.deliver(now, &payload[skip..], sink);
            self.flush_ooo(now, sink);
            if skip > 0 {
                SegFate::Partial
            } else {
                SegFate::New
            }
        } else if ahead < MAX_AHEAD {
            let ooo = self.ooo.get_or_insert_with(Default::default);
            if ooo.segs.len() >= MAX_OOO_SEGMENTS || ooo.bytes + payload.len() > MAX_OOO_BYTES {
                // Too much waiting on one hole: the hole is a capture gap.
                let first = ooo.segs.first().map(|s| s.0).unwrap_or(seq);
                let to = if seq_lt(seq, first) { seq } else { first };
                self.gap_to(to, sink);
                self.flush_ooo(now, sink);
                return self.accept(now, seq, payload, sink);
            }
            match ooo.segs.binary_search_by(|(s, _)| {
                if seq_lt(*s, seq) {
                    std::cmp::Ordering::Less
                } else if *s == seq {
                    std::cmp::Ordering::Equal
                } else {
                    std::cmp::Ordering::Greater
                }
            }) {
                Ok(i) => {
                    if ooo.segs[i].1.len() < payload.len() {
                        ooo.bytes += payload.len() - ooo.segs[i].1.len();
                        ooo.segs[i].1 = payload.to_vec();
                    } else {
                        self.retransmits += 1;
                    }
                }
                Err(i) => {
                    ooo.bytes += payload.len();
                    ooo.segs.insert(i, (seq, payload.to_vec()));
                }
            }
            SegFate::Ahead
        } else {
            // Far outside any window we could be in.
            SegFate::Ignored
        }
    }

    fn deliver(&mut self, now: Timestamp, data: &[u8], sink: &mut dyn FnMut(Chunk<'_>)) {
        let seq = self.next;
        self.next = self.next.wrapping_add(data.len() as u32);
        self.bytes += data.len() as u64;
        self.last_data = Some(now);
        sink(Chunk::Data { seq, data });
    }

    fn gap_to(&mut self, to: u32, sink: &mut dyn FnMut(Chunk<'_>)) {
        let len = to.wrapping_sub(self.next);
        if len > 0 && len < MAX_AHEAD {
            self.next = to;
            self.gap_bytes += len as u64;
            sink(Chunk::Gap(len as u64));
        }
    }

    fn flush_ooo(&mut self, now: Timestamp, sink: &mut dyn FnMut(Chunk<'_>)) {
        loop {
            let Some(ooo) = self.ooo.as_mut() else { return };
            let Some((seq, _)) = ooo.segs.first() else {
                self.ooo = None;
                return;
            };
            if seq_lt(self.next, *seq) {
                return;
            }
            let (seq, data) = ooo.segs.remove(0);
            ooo.bytes -= data.len();
            let skip = self.next.wrapping_sub(seq) as usize;
            if skip < data.len() {
                self.deliver(now, &data[skip..], sink);
            }
        }
    }

    /// The peer acknowledged up to `ack`: bytes before it that we never saw were lost by the capture.
    fn on_peer_ack(&mut self, now: Timestamp, ack: u32, sink: &mut dyn FnMut(Chunk<'_>)) {
        if self.acked.is_none_or(|a| seq_lt(a, ack)) {
            self.acked = Some(ack);
        }
        if !self.started || self.fin_seen {
            return;
        }
        let ahead = ack.wrapping_sub(self.next);
        // More than one byte (one could be a FIN we did not see), within reason.
        if ahead > 1 && ahead < MAX_AHEAD {
            while let Some(first) = self.ooo.as_ref().and_then(|o| o.segs.first().map(|s| s.0)) {
                if seq_lt(first, ack) {
                    self.gap_to(first, sink);
                    self.flush_ooo(now, sink);
                } else {
                    break;
                }
            }
            if seq_lt(self.next, ack.wrapping_sub(1)) {
                self.gap_to(ack, sink);
                self.flush_ooo(now, sink);
            }
        }
    }

    /// Anything still waiting in the out-of-order buffer is delivered after a gap (end of connection).
    fn flush_all(&mut self, now: Timestamp, sink: &mut dyn FnMut(Chunk<'_>)) {
        while let Some(first) = self.ooo.as_ref().and_then(|o| o.segs.first().map(|s| s.0)) {
            self.gap_to(first, sink);
            self.flush_ooo(now, sink);
        }
        self.ooo = None;
    }
}

/// The sends of one handshake packet (the SYN, or the SYN/ACK) seen at the appliance.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sends {
    /// When the first send was seen.
    pub first: Option<Timestamp>,
    /// Meaningful once `count > 0` (kept bare to keep a connection within its 512 bytes).
    last_at: Timestamp,
    /// Sends seen, the first included (saturating).
    pub count: u16,
}

impl Sends {
    /// Record one send; true if it repeats an earlier one (a retransmission).
    fn record(&mut self, now: Timestamp) -> bool {
        let retransmission = self.count > 0;
        self.count = self.count.saturating_add(1);
        self.first.get_or_insert(now);
        self.last_at = now;
        retransmission
    }

    /// When the latest send was seen.
    pub fn last(&self) -> Option<Timestamp> {
        (self.count > 0).then_some(self.last_at)
    }
}

/// Handshake timing, as seen at the appliance.
#[derive(Clone, Copy, Debug, Default)]
pub struct Handshake {
    /// The client's SYN.
    pub syn: Sends,
    /// The server's SYN/ACK.
    pub synack: Sends,
    /// The client's ACK that completed the handshake (or the first data, if that ACK was not seen).
    pub established: Option<Timestamp>,
}

/// Where a connection is in its handshake and life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnState {
    /// The state a connection starts in (unless joined midstream): no SYN/ACK seen yet.
    SynSent,
    /// The server's SYN/ACK seen; the client's ACK not yet.
    SynReceived,
    /// The handshake completed (by the client's ACK, or by data when that ACK was not seen), or the
    /// connection was joined midstream.
    Established,
    /// Closed by FINs or RST; kept briefly to absorb stragglers.
    Closed,
}

/// Why a connection left the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloseReason {
    /// Both directions' FINs seen.
    Fin,
    /// An RST from either side (other than one refusing the SYN).
    Rst,
    /// The server answered the SYN with a RST (connection refused).
    Refused,
    /// The handshake never completed within the client's connect timeout.
    ConnectTimeout,
    /// No segment for the idle timeout.
    Idle,
    /// Taken out of a full table to make room for a new connection.
    Evicted,
    /// The driver is shutting down (end of capture).
    Shutdown,
    /// The port was reused by a new connection (a new SYN).
    Reused,
}

impl CloseReason {
    /// The reason's name in lower snake case (`fin`, `connect_timeout`, ...).
    pub fn name(self) -> &'static str {
        match self {
            CloseReason::Fin => "fin",
            CloseReason::Rst => "rst",
            CloseReason::Refused => "refused",
            CloseReason::ConnectTimeout => "connect_timeout",
            CloseReason::Idle => "idle",
            CloseReason::Evicted => "evicted",
            CloseReason::Shutdown => "shutdown",
            CloseReason::Reused => "reused",
        }
    }
    /// Whether the connection never got established from the client's point of view.
    pub fn is_failure(self) -> bool {
        matches!(self, CloseReason::Refused | CloseReason::ConnectTimeout)
    }
}

/// What a segment did to a connection, for the layers above.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowNote {
    /// A client's SYN (no ACK flag).
    Syn {
        /// An earlier SYN of this connection was seen.
        retransmission: bool,
    },
    /// A server's SYN/ACK.
    SynAck {
        /// An earlier SYN/ACK of this connection was seen.
        retransmission: bool,
    },
    /// The handshake completed: the client acknowledged the SYN/ACK, or data came before that ACK
    /// was seen.
    Established,
    /// The server answered the SYN with an RST before any SYN/ACK.
    Refused,
    /// The FIN of this direction, once every byte before it has been delivered.
    Fin(Dir),
    /// An RST (other than a refusal).
    Rst,
    /// The server resent data the client had not received: the client gets it only now.
    ServerRetransmission,
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
    /// `dir` ended (its FIN, in order).
    fn on_end(&mut self, now: Timestamp, dir: Dir, out: &mut Vec<Self::Event>);
    /// The connection ended; `cut_off`: by the end of the capture or a shutdown, not the peers.
    fn on_close(&mut self, now: Timestamp, cut_off: bool, out: &mut Vec<Self::Event>);
}

/// One tracked TCP connection, with its application analyzer `A`.
#[derive(Debug)]
pub struct Conn<A> {
    /// The endpoint that opened the connection: the SYN's sender (joined midstream: judged from
    /// the side the segment came in on, else the server ports).
    pub client: Endpoint,
    /// The endpoint that accepted it.
    pub server: Endpoint,
    /// Where it is in its handshake and life.
    pub state: ConnState,
    /// Its handshake's SYNs and SYN/ACKs and when it completed.
    pub hs: Handshake,
    /// The client-to-server stream.
    pub c2s: HalfStream,
    /// The server-to-client stream.
    pub s2c: HalfStream,
    /// When its first segment was seen.
    pub first_seen: Timestamp,
    /// When its latest segment was seen (idle timeouts and evictions go by it).
    pub last_seen: Timestamp,
    /// The capture joined after the connection started.
    pub midstream: bool,
    /// Round-trip time client↔appliance, from the handshake (SYN/ACK → ACK), in microseconds.
    pub rtt_us: Option<u32>,
    /// The application analyzer reading its bytes (none: not read, or given up).
    pub app: Option<A>,
    /// Set by the engine: the pageview this connection is attached to and its index there.
    pub pageview: Option<(u64, u16)>,
    /// Timer generation, so stale timers are recognised.
    pub gen: u32,
}

impl<A: StreamAnalyzer> Conn<A> {
    fn new(now: Timestamp, client: Endpoint, server: Endpoint, midstream: bool, app: Option<A>) -> Conn<A> {
        Conn {
            client,
            server,
            state: if midstream { ConnState::Established } else { ConnState::SynSent },
            hs: Handshake::default(),
            c2s: HalfStream::default(),
            s2c: HalfStream::default(),
            first_seen: now,
            last_seen: now,
            midstream,
            rtt_us: None,
            app,
            pageview: None,
            gen: 0,
        }
    }

    /// [`Conn::rtt_us`] as a duration.
    pub fn rtt(&self) -> Option<Duration> {
        self.rtt_us.map(|us| Duration::from_micros(us as u64))
    }

    /// Which way `seg` travels: toward the server if it comes from the client, else toward the
    /// client.
    pub fn dir_of(&self, seg: &Segment<'_>) -> Dir {
        if seg.src == self.client {
            Dir::ToServer
        } else {
            Dir::ToClient
        }
    }

    /// Whether this connection ever completed its handshake (or was joined established).
    pub fn was_established(&self) -> bool {
        self.hs.established.is_some() || self.midstream
    }

    /// Process one segment of this connection; what became of its payload.
    pub fn on_segment(&mut self, now: Timestamp, seg: &Segment<'_>, notes: &mut Vec<FlowNote>, app_out: &mut Vec<A::Event>) -> SegFate {
        self.last_seen = now;
        let dir = self.dir_of(seg);
        let f = seg.flags;
        if self.state == ConnState::Closed {
            return SegFate::Empty;
        }
        if f.rst {
            if self.state == ConnState::SynSent && dir == Dir::ToClient {
                notes.push(FlowNote::Refused);
            } else {
                notes.push(FlowNote::Rst);
            }
            return SegFate::Empty;
        }
        if self.on_handshake(now, seg, dir, notes) {
            return SegFate::Empty;
        }
        if !seg.payload.is_empty() && matches!(self.state, ConnState::SynSent | ConnState::SynReceived) {
            // Data before we saw the handshake finish: the ACK was not captured.
            self.establish(now, false);
            notes.push(FlowNote::Established);
        }
        let fate = self.on_stream(now, seg, dir, notes, app_out);
        if f.fin {
            self.on_fin(now, seg, dir, notes, app_out);
        }
        fate
    }

    /// The handshake's part of a segment: a client's SYN or a server's SYN/ACK is recorded (and
    /// starts its stream), and the client's ACK of the SYN/ACK completes the handshake. Whether
    /// the segment was a SYN or SYN/ACK (nothing more to do with it).
    fn on_handshake(&mut self, now: Timestamp, seg: &Segment<'_>, dir: Dir, notes: &mut Vec<FlowNote>) -> bool {
        let f = seg.flags;
        match dir {
            Dir::ToServer => {
                if f.syn && !f.ack {
                    let retransmission = self.hs.syn.record(now);
                    if !self.c2s.started {
                        self.c2s.start_at(seg.seq.wrapping_add(1));
                    }
                    notes.push(FlowNote::Syn { retransmission });
                    return true;
                }
                if self.state == ConnState::SynReceived && f.ack && self.s2c.next_seq() == Some(seg.ack) {
                    self.establish(now, true);
                    notes.push(FlowNote::Established);
                }
            }
            Dir::ToClient => {
                if f.syn && f.ack {
                    let retransmission = self.hs.synack.record(now);
                    if !self.s2c.started {
                        self.s2c.start_at(seg.seq.wrapping_add(1));
                    }
                    if self.state == ConnState::SynSent {
                        self.state = ConnState::SynReceived;
                    }
                    notes.push(FlowNote::SynAck { retransmission });
                    return true;
                }
            }
        }
        false
    }

    /// The streams' part of a segment: its acknowledgement moves the other direction's stream
    /// on, its payload goes into its own; what comes out in order goes to the analyzer. What
    /// became of its payload.
    fn on_stream(&mut self, now: Timestamp, seg: &Segment<'_>, dir: Dir, notes: &mut Vec<FlowNote>, app_out: &mut Vec<A::Event>) -> SegFate {
        let (this, other) = match dir {
            Dir::ToServer => (&mut self.c2s, &mut self.s2c),
            Dir::ToClient => (&mut self.s2c, &mut self.c2s),
        };
        let app = &mut self.app;
        let mut server_retransmitted = false;
        let mut sink = |c: Chunk<'_>, d: Dir| {
            if let (Chunk::Retransmitted, Dir::ToClient) = (&c, d) {
                server_retransmitted = true;
            }
            if let Some(a) = app.as_mut() {
                deliver(a, now, c, d, app_out);
            }
        };
        if seg.flags.ack {
            other.on_peer_ack(now, seg.ack, &mut |c| sink(c, opposite(dir)));
        }
        let fate = this.accept(now, seg.seq, seg.payload, &mut |c| sink(c, dir));
        if server_retransmitted {
            notes.push(FlowNote::ServerRetransmission);
        }
        fate
    }

    /// A segment with the FIN flag: the direction ends once every byte before the FIN has been
    /// delivered.
    fn on_fin(&mut self, now: Timestamp, seg: &Segment<'_>, dir: Dir, notes: &mut Vec<FlowNote>, app_out: &mut Vec<A::Event>) {
        let this = match dir {
            Dir::ToServer => &mut self.c2s,
            Dir::ToClient => &mut self.s2c,
        };
        if !this.fin_seen {
            let fin_seq = seg.seq.wrapping_add(seg.payload.len() as u32);
            if !this.started {
                this.start_at(fin_seq);
            }
            if !seq_lt(this.next, fin_seq) {
                this.fin_seen = true;
                this.next = fin_seq.wrapping_add(1);
                if let Some(a) = self.app.as_mut() {
                    a.on_end(now, dir, app_out);
                }
                notes.push(FlowNote::Fin(dir));
            }
        }
    }

    fn establish(&mut self, now: Timestamp, by_ack: bool) {
        self.state = ConnState::Established;
        self.hs.established = Some(now);
        if by_ack {
            if let Some(sa) = self.hs.synack.last() {
                self.rtt_us = Some(now.saturating_since(sa).as_micros().min(u32::MAX as u128) as u32);
            }
        }
    }

    /// Both directions finished (FIN each way).
    pub fn both_fins(&self) -> bool {
        self.c2s.fin_seen && self.s2c.fin_seen
    }

    /// End the connection: flush what waits and report every open transaction.
    /// `cut_off`: ended by the end of the capture or a shutdown, not by the peers.
    pub fn close(&mut self, now: Timestamp, cut_off: bool, app_out: &mut Vec<A::Event>) {
        if self.state == ConnState::Closed {
            return;
        }
        self.state = ConnState::Closed;
        let app = &mut self.app;
        self.c2s.flush_all(now, &mut |c| {
            if let Some(a) = app.as_mut() {
                deliver(a, now, c, Dir::ToServer, app_out);
            }
        });
        self.s2c.flush_all(now, &mut |c| {
            if let Some(a) = app.as_mut() {
                deliver(a, now, c, Dir::ToClient, app_out);
            }
        });
        if let Some(a) = self.app.as_mut() {
            a.on_close(now, cut_off, app_out);
        }
    }
}

/// Hand a chunk of `dir`'s stream to the analyzer.
fn deliver<A: StreamAnalyzer>(a: &mut A, now: Timestamp, c: Chunk<'_>, dir: Dir, out: &mut Vec<A::Event>) {
    match c {
        Chunk::Data { seq, data } => a.on_data(now, dir, seq, data, out),
        Chunk::Gap(n) => a.on_gap(now, dir, n, out),
        Chunk::Retransmitted => {}
    }
}

fn opposite(d: Dir) -> Dir {
    match d {
        Dir::ToServer => Dir::ToClient,
        Dir::ToClient => Dir::ToServer,
    }
}

/// Key of a connection regardless of direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlowKey(Endpoint, Endpoint);

impl FlowKey {
    /// The key of the connection between `a` and `b`, whichever of them sent.
    pub fn of(a: Endpoint, b: Endpoint) -> FlowKey {
        if a <= b {
            FlowKey(a, b)
        } else {
            FlowKey(b, a)
        }
    }
}

/// Handle of a connection in the table: slot and generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId {
    /// The connection's slot in the table.
    pub slot: u32,
    /// The slot's generation when the connection went in; it moves on when the connection leaves,
    /// so an old handle finds nothing.
    pub gen: u32,
}

/// The bounded connection table; each connection has an application analyzer `A`.
pub struct FlowTable<A> {
    map: AHashMap<FlowKey, u32>,
    slots: Vec<Option<Conn<A>>>,
    free: Vec<u32>,
    gens: Vec<u32>,
    capacity: usize,
    /// Where the next eviction sample starts.
    clock: usize,
}

/// How many live slots an eviction looks at to pick the least recently seen.
const EVICTION_SAMPLE: usize = 16;

impl<A: StreamAnalyzer> FlowTable<A> {
    /// An empty table for at most `capacity` connections (at least one).
    pub fn new(capacity: usize) -> FlowTable<A> {
        FlowTable { map: AHashMap::new(), slots: Vec::new(), free: Vec::new(), gens: Vec::new(), capacity: capacity.max(1), clock: 0 }
    }

    /// Connections in the table (closed ones lingering included).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the table holds no connection.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The connection between `a` and `b`, whichever of them is the client.
    pub fn lookup(&self, a: Endpoint, b: Endpoint) -> Option<ConnId> {
        self.map.get(&FlowKey::of(a, b)).map(|&slot| ConnId { slot, gen: self.gens[slot as usize] })
    }

    /// The connection `id` names, unless it has left the table.
    pub fn get(&self, id: ConnId) -> Option<&Conn<A>> {
        (self.gens.get(id.slot as usize) == Some(&id.gen)).then(|| self.slots[id.slot as usize].as_ref()).flatten()
    }

    /// The connection `id` names, to change, unless it has left the table.
    pub fn get_mut(&mut self, id: ConnId) -> Option<&mut Conn<A>> {
        if self.gens.get(id.slot as usize) == Some(&id.gen) {
            self.slots[id.slot as usize].as_mut()
        } else {
            None
        }
    }

    /// Whether inserting needs an eviction first.
    pub fn is_full(&self) -> bool {
        self.map.len() >= self.capacity
    }

    /// The least recently seen of a sample of connections (sampled LRU, deterministic).
    pub fn eviction_candidate(&mut self) -> Option<ConnId> {
        let n = self.slots.len();
        if n == 0 {
            return None;
        }
        let mut best: Option<(Timestamp, u32)> = None;
        let mut looked = 0;
        let mut i = 0;
        while looked < EVICTION_SAMPLE && i < n {
            let slot = (self.clock + i) % n;
            if let Some(c) = &self.slots[slot] {
                looked += 1;
                // Closed connections go first.
                let key = if c.state == ConnState::Closed { Timestamp::ZERO } else { c.last_seen };
                if best.is_none_or(|(t, _)| key < t) {
                    best = Some((key, slot as u32));
                }
            }
            i += 1;
        }
        self.clock = (self.clock + i) % n;
        best.map(|(_, slot)| ConnId { slot, gen: self.gens[slot as usize] })
    }

    /// Insert a new connection (the caller evicted first if full).
    pub fn insert(&mut self, now: Timestamp, client: Endpoint, server: Endpoint, midstream: bool, app: Option<A>) -> ConnId {
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(None);
                self.gens.push(0);
                (self.slots.len() - 1) as u32
            }
        };
        let gen = self.gens[slot as usize];
        let mut c = Conn::new(now, client, server, midstream, app);
        c.gen = gen;
        self.slots[slot as usize] = Some(c);
        self.map.insert(FlowKey::of(client, server), slot);
        ConnId { slot, gen }
    }

    /// Remove a connection; returns it.
    pub fn remove(&mut self, id: ConnId) -> Option<Conn<A>> {
        if self.gens.get(id.slot as usize) != Some(&id.gen) {
            return None;
        }
        let c = self.slots[id.slot as usize].take()?;
        self.map.remove(&FlowKey::of(c.client, c.server));
        self.gens[id.slot as usize] = id.gen.wrapping_add(1);
        self.free.push(id.slot);
        Some(c)
    }

    /// All live connection ids, in slot order.
    pub fn ids(&self) -> Vec<ConnId> {
        self.slots.iter().enumerate().filter(|(_, c)| c.is_some()).map(|(i, _)| ConnId { slot: i as u32, gen: self.gens[i] }).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyzer::Analyzer;

    fn collect(h: &mut HalfStream, segs: &[(u32, &[u8])]) -> (Vec<u8>, u64) {
        let (data, gaps, _) = collect_fates(h, segs);
        (data, gaps)
    }

    /// The bytes delivered, the gap bytes, and each segment's fate; checks that every delivered
    /// piece starts where the stream was.
    fn collect_fates(h: &mut HalfStream, segs: &[(u32, &[u8])]) -> (Vec<u8>, u64, Vec<SegFate>) {
        let mut data = Vec::new();
        let mut gaps = 0;
        let mut fates = Vec::new();
        let mut at = h.next_seq();
        for (seq, p) in segs {
            fates.push(h.accept(Timestamp::ZERO, *seq, p, &mut |c| match c {
                Chunk::Data { seq, data: b } => {
                    assert_eq!(at.unwrap_or(seq), seq, "a piece starts where the stream was");
                    at = Some(seq.wrapping_add(b.len() as u32));
                    data.extend_from_slice(b)
                }
                Chunk::Gap(n) => {
                    gaps += n;
                    at = at.map(|a| a.wrapping_add(n as u32));
                }
                Chunk::Retransmitted => {}
            }));
        }
        (data, gaps, fates)
    }

    #[test]
    fn each_segment_says_what_became_of_it() {
        let mut h = HalfStream::default();
        h.start_at(u32::MAX - 2);
        let segs: [(u32, &[u8]); 6] = [(3, b"gh"), (u32::MAX - 2, b"abc"), (u32::MAX - 2, b"abcdef"), (1, b"ef"), (0, b""), (1 << 30, b"x")];
        let (d, g, fates) = collect_fates(&mut h, &segs);
        assert_eq!(d, b"abcdefgh");
        assert_eq!(g, 0);
        use SegFate::*;
        assert_eq!(fates, vec![Ahead, New, Partial, Retransmission, Empty, Ignored]);
    }

    #[test]
    fn reorders_and_drops_retransmissions() {
        let mut h = HalfStream::default();
        h.start_at(100);
        let (d, g) = collect(&mut h, &[(106, b"world"), (100, b"hello "), (100, b"hello "), (103, b"lo wo")]);
        assert_eq!(d, b"hello world");
        assert_eq!(g, 0);
        assert_eq!(h.retransmits, 2);
    }

    #[test]
    fn sequence_wraparound() {
        let mut h = HalfStream::default();
        h.start_at(u32::MAX - 2);
        let (d, _) = collect(&mut h, &[(0, b"def"), (u32::MAX - 2, b"abc"), (3, b"g")]);
        assert_eq!(d, b"abcdefg");
    }

    #[test]
    fn peer_ack_past_a_hole_declares_a_gap() {
        let mut h = HalfStream::default();
        h.start_at(0);
        let (_, _) = collect(&mut h, &[(0, b"aa"), (10, b"bb")]);
        let mut out = Vec::new();
        h.on_peer_ack(Timestamp::ZERO, 12, &mut |c| match c {
            Chunk::Data { data, .. } => out.push(format!("d{}", data.len())),
            Chunk::Gap(n) => out.push(format!("g{n}")),
            Chunk::Retransmitted => out.push("r".into()),
        });
        assert_eq!(out, vec!["g8", "d2"]);
        assert_eq!(h.gap_bytes, 8);
    }

    #[test]
    fn overflowing_ooo_buffer_becomes_a_gap() {
        let mut h = HalfStream::default();
        h.start_at(0);
        let big = vec![b'x'; 1000];
        let mut segs: Vec<(u32, &[u8])> = Vec::new();
        for i in 0..(MAX_OOO_SEGMENTS as u32 + 2) {
            segs.push((1000 + i * 1000, &big));
        }
        let (d, g) = collect(&mut h, &segs);
        assert_eq!(g, 1000);
        assert_eq!(d.len(), (MAX_OOO_SEGMENTS + 2) * 1000);
    }

    #[test]
    fn table_evicts_and_reuses_slots_with_new_generation() {
        let ep = |p| Endpoint { ip: "10.0.0.1".parse().unwrap(), port: p };
        let srv = Endpoint { ip: "10.9.0.1".parse().unwrap(), port: 80 };
        let mut t = FlowTable::<Analyzer>::new(2);
        let a = t.insert(Timestamp(1), ep(1), srv, false, None);
        let _b = t.insert(Timestamp(2), ep(2), srv, false, None);
        assert!(t.is_full());
        let victim = t.eviction_candidate().unwrap();
        assert_eq!(victim, a, "least recently seen goes first");
        t.remove(victim).unwrap();
        let c = t.insert(Timestamp(3), ep(3), srv, false, None);
        assert_eq!(c.slot, a.slot);
        assert_ne!(c.gen, a.gen);
        assert!(t.get(a).is_none(), "stale handle must not reach the new connection");
        assert_eq!(t.lookup(srv, ep(3)), Some(c));
    }
}

#[cfg(test)]
mod size_tests {
    use super::*;

    /// The per-connection budget of the brief: 512 bytes, not counting head buffers (which are
    /// empty between messages) and the out-of-order buffer (allocated only while a hole is open).
    #[test]
    fn connection_state_fits_512_bytes() {
        // With the largest analyzer (HTTP's).
        let conn = std::mem::size_of::<Conn<crate::analyzer::Analyzer>>();
        // Each table entry also costs its map slot (key + slot index) and a generation.
        let entry = std::mem::size_of::<FlowKey>() + std::mem::size_of::<u32>() * 2 + 1;
        println!("Conn {conn} B, table entry {entry} B");
        assert!(conn + entry <= 512, "{conn} + {entry} bytes per connection");
    }
}
