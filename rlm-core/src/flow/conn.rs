//! One tracked TCP connection: its handshake (SYNs and SYN/ACKs counted and timed), its state
//! and how it ended, and what each of its segments does to it and its two streams.

use std::time::Duration;

use super::stream::{seq_lt, Chunk, HalfStream, SegFate};
use super::{Dir, StreamAnalyzer};
use crate::time::Timestamp;
use crate::wire::seq_span;
use crate::wire::{Endpoint, Segment};

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

    /// Whether the sends show a sender's retransmission schedule: at least two, the last at
    /// least [`BACKOFF_EVIDENCE`] after the first. A client's TCP resends an unanswered SYN
    /// after its initial RTO (1 s or more, RFC 6298; 3 s on older stacks); one SYN, or a burst,
    /// is what a spoofer sends.
    pub fn shows_backoff(&self) -> bool {
        self.count >= 2 && self.first.is_some_and(|f| self.last_at.saturating_since(f) >= BACKOFF_EVIDENCE)
    }
}

/// The least time between a connection's first and last SYN that counts as its client's
/// retransmission schedule ([`Sends::shows_backoff`]): half the shortest initial RTO (1 s),
/// leaving room for the network's jitter.
pub const BACKOFF_EVIDENCE: Duration = Duration::from_millis(500);

/// Handshake timing, as seen at the appliance.
#[derive(Clone, Copy, Debug, Default)]
pub struct Handshake {
    /// The client's SYN.
    pub syn: Sends,
    /// The server's SYN/ACK.
    pub synack: Sends,
    /// The client's ACK that completed the handshake (or the first data, if that ACK was not seen).
    pub established: Option<Timestamp>,
    /// The client acknowledged the server's SYN/ACK (its ISN + 1, which a blind spoofer cannot
    /// know), by a bare ACK or by data carrying that ACK: proof of a real client even where the
    /// handshake is not timed.
    pub answered: bool,
    /// A later SYN carried another initial sequence number than the first: not the client's
    /// TCP resending its SYN (which repeats it), so no evidence of a retransmission schedule.
    pub syn_renumbered: bool,
}

impl Handshake {
    /// Whether the client's SYNs show its TCP's retransmission schedule: resent (the same
    /// initial sequence number) over at least [`BACKOFF_EVIDENCE`].
    pub fn syn_shows_backoff(&self) -> bool {
        self.syn.shows_backoff() && !self.syn_renumbered
    }
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
    /// The appliance answered a request in the server's stead (`REJECT`) and reset the server's
    /// side: the connection is the appliance's to finish.
    Rejected,
    /// `ABORT IDLE` closed the idle connection: the server's side reset, the client's sent a FIN.
    Aborted,
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
            CloseReason::Rejected => "rejected",
            CloseReason::Aborted => "aborted",
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
    /// An RST (other than a refusal) inside its sender's window.
    Rst,
    /// An RST, or a FIN, whose sequence number lies outside its sender's window: not the
    /// endpoint's (a blind spoofer's, or a stale copy), so it changes nothing.
    OutOfWindow,
    /// The server resent data, `seq` to `end`, that the client had not acknowledged: the client
    /// gets it only now, unless it had it already ([`FlowNote::ClientGotTwice`]).
    ServerRetransmission {
        /// The first byte resent (its sequence number).
        seq: u32,
        /// The sequence number after the last.
        end: u32,
    },
    /// The client reported, with a D-SACK (RFC 2883), server bytes `seq` to `end` that it
    /// received twice: a retransmission of them was spurious, and the client had them at first.
    ClientGotTwice {
        /// The first byte received twice (its sequence number).
        seq: u32,
        /// The sequence number after the last.
        end: u32,
    },
    /// This many bytes of a body nothing reads came unreported by the kernel (body cuts) and
    /// went on as absent ones.
    Unreported(u32),
}

/// How far behind its stream's next byte an RST may be and still be the sender's (bytes).
const RST_BEHIND: i32 = 64 * 1024;
/// How far past it (bytes).
const RST_AHEAD: i32 = 1024 * 1024;

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
    /// Bytes it holds for later, as the engine last counted them (its budget).
    pub held: u32,
    /// Timer generation, so stale timers are recognised.
    pub gen: u32,
}

impl<A: StreamAnalyzer> Conn<A> {
    /// Whether the server has sent on it (a SYN/ACK, or any segment): what a spoofer cannot
    /// bring about from the clients' side.
    pub fn server_heard(&self) -> bool {
        self.hs.synack.count > 0 || self.s2c.started
    }

    pub(super) fn new(now: Timestamp, client: Endpoint, server: Endpoint, midstream: bool, app: Option<A>) -> Conn<A> {
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
            held: 0,
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
                // A refusal acknowledges the SYN (RFC 9293 3.10.7.3); any other RST to a
                // pending SYN is not the server's.
                if f.ack && Some(seg.ack) == self.c2s.next_seq() {
                    notes.push(FlowNote::Refused);
                } else {
                    notes.push(FlowNote::OutOfWindow);
                }
            } else if self.rst_acceptable(seg.seq, dir) {
                notes.push(FlowNote::Rst);
            } else {
                notes.push(FlowNote::OutOfWindow);
            }
            return SegFate::Empty;
        }
        if self.on_handshake(now, seg, dir, notes) {
            return SegFate::Empty;
        }
        if f.fin && !self.fin_in_window(seg, dir) {
            // Not the sender's: none of it counts, its acknowledgement included (one far ahead
            // would declare the other way's bytes lost).
            notes.push(FlowNote::OutOfWindow);
            return SegFate::Empty;
        }
        if seg.payload_len > 0 && matches!(self.state, ConnState::SynSent | ConnState::SynReceived) {
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
                    } else if retransmission && self.state == ConnState::SynSent && self.c2s.next_seq() != Some(seg.seq.wrapping_add(1)) {
                        self.hs.syn_renumbered = true;
                    }
                    notes.push(FlowNote::Syn { retransmission });
                    return true;
                }
                if self.state == ConnState::SynReceived && f.ack && self.s2c.next_seq() == Some(seg.ack) {
                    // Timed by a bare ACK only: data that carries the handshake's ACK may be the
                    // client's retransmission of a request lost with that ACK, one RTO late (Karn).
                    self.hs.answered = true;
                    self.establish(now, seg.payload_len == 0);
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
        // The server's bytes this segment resent, first to last.
        let mut server_resent: Option<(u32, u32)> = None;
        let mut unreported = 0;
        let mut sink = |c: Chunk<'_>, d: Dir| {
            match (&c, d) {
                (&Chunk::Retransmitted { seq, end }, Dir::ToClient) => {
                    server_resent = Some(server_resent.map_or((seq, end), |span| seq_span(span, (seq, end))))
                }
                (Chunk::Unreported { len, .. }, _) => unreported += len,
                _ => {}
            }
            if let Some(a) = app.as_mut() {
                deliver(a, now, c, d, app_out);
            }
        };
        if seg.flags.ack {
            other.on_peer_ack(now, seg.ack, &mut |c| sink(c, opposite(dir)));
        }
        let fate = this.accept(now, seg.seq, seg.payload, seg.payload_len, &mut |c| sink(c, dir));
        if let Some((seq, end)) = server_resent {
            notes.push(FlowNote::ServerRetransmission { seq, end });
        }
        if let (Dir::ToServer, Some((seq, end))) = (dir, seg.dsack) {
            notes.push(FlowNote::ClientGotTwice { seq, end });
        }
        if unreported > 0 {
            notes.push(FlowNote::Unreported(unreported));
        }
        fate
    }

    /// The stream `dir`'s sender writes.
    fn stream(&self, dir: Dir) -> &HalfStream {
        match dir {
            Dir::ToServer => &self.c2s,
            Dir::ToClient => &self.s2c,
        }
    }

    /// Whether an RST from `dir`'s sender resets the connection as its receiver takes it (RFC
    /// 5961 3.2: only an RST at exactly the next byte it expects does; one elsewhere in its window
    /// gets a challenge ACK). The receiver expects a byte between its last acknowledgement of the
    /// stream and the stream's next byte as seen here (both the same unless bytes are in
    /// flight): an RST there, or anywhere while the stream has not started. A blind spoofer then
    /// has one chance in 2^32 per packet on a quiet connection (with a window of 1 MiB it had
    /// one in about 4,000, and ended rlm's view of live kept-alive connections).
    fn rst_acceptable(&self, seq: u32, dir: Dir) -> bool {
        let this = self.stream(dir);
        let Some(next) = this.next_seq() else { return true };
        let acked = this.acked().unwrap_or(next);
        // The span between the two, whichever is first (the capture may have missed bytes the
        // receiver acknowledged); a span wider than any window is not trusted.
        let (lo, hi) = if seq_lt(next, acked) { (next, acked) } else { (acked, next) };
        let span = hi.wrapping_sub(lo);
        if span > RST_AHEAD as u32 {
            return seq == next;
        }
        seq.wrapping_sub(lo) <= span
    }

    /// Whether a FIN from `dir`'s sender can be the sender's: its place (after the segment's
    /// payload) is not behind the stream's next byte while the stream has not ended (a FIN up to
    /// 2^31 behind would rewind it), nor further ahead than [`RST_AHEAD`]; and what it
    /// acknowledges of the other way is near what the other way sent (RFC 5961 5: from
    /// [`RST_BEHIND`] before the sender's last acknowledgement to [`RST_AHEAD`] past the other
    /// way's next byte, room for bytes the capture missed), which a blind spoofer guesses one
    /// time in about 4,000.
    fn fin_in_window(&self, seg: &Segment<'_>, dir: Dir) -> bool {
        let this = self.stream(dir);
        let Some(next) = this.next_seq().filter(|_| !this.fin_seen) else { return true };
        let d = seg.seq.wrapping_add(seg.payload_len).wrapping_sub(next) as i32;
        if !(0..=RST_AHEAD).contains(&d) {
            return false;
        }
        let other = self.stream(opposite(dir));
        match (seg.flags.ack, other.next_seq()) {
            (true, Some(other_next)) => {
                let from = other.acked().unwrap_or(other_next).wrapping_sub(RST_BEHIND as u32);
                seg.ack.wrapping_sub(from) <= other_next.wrapping_add(RST_AHEAD as u32).wrapping_sub(from)
            }
            _ => true,
        }
    }

    /// A segment with the FIN flag: the direction ends once every byte before the FIN has been
    /// delivered.
    fn on_fin(&mut self, now: Timestamp, seg: &Segment<'_>, dir: Dir, notes: &mut Vec<FlowNote>, app_out: &mut Vec<A::Event>) {
        let this = match dir {
            Dir::ToServer => &mut self.c2s,
            Dir::ToClient => &mut self.s2c,
        };
        if !this.fin_seen {
            let fin_seq = seg.seq.wrapping_add(seg.payload_len);
            if !this.started {
                this.start_at(fin_seq);
            }
            if this.next == fin_seq {
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
        Chunk::Absent { seq, len } | Chunk::Unreported { seq, len } => a.on_absent(now, dir, seq, len, out),
        Chunk::Retransmitted { .. } => {}
    }
}

fn opposite(d: Dir) -> Dir {
    match d {
        Dir::ToServer => Dir::ToClient,
        Dir::ToClient => Dir::ToServer,
    }
}
