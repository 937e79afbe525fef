//! One direction's byte stream put back in order: retransmitted bytes skipped, segments past a
//! hole held in a small bounded out-of-order buffer, a hole never filled declared a gap.

use crate::time::Timestamp;

/// Out-of-order data held per direction before a hole is declared a gap.
pub const MAX_OOO_BYTES: usize = 256 * 1024;
/// Most out-of-order segments held per direction before a hole is declared a gap.
pub const MAX_OOO_SEGMENTS: usize = 64;
/// Segments further ahead than this are not plausible for this connection.
const MAX_AHEAD: u32 = 64 * 1024 * 1024;

pub(super) use crate::wire::seq_lt;

/// One direction's byte stream.
#[derive(Debug, Default)]
pub struct HalfStream {
    pub(super) started: bool,
    /// Next sequence number expected in order.
    pub(super) next: u32,
    pub(super) fin_seen: bool,
    /// Payload bytes carried in order, seen or absent (excluding gaps).
    pub bytes: u64,
    /// Bytes declared missing.
    pub gap_bytes: u64,
    /// Segments that repeated data already delivered.
    pub retransmits: u32,
    /// Time of the last segment that carried new data.
    pub last_data: Option<Timestamp>,
    /// Highest sequence number the receiver acknowledged (seen here).
    acked: Option<u32>,
    /// The stream is inside a body nothing reads, whose segments the kernel need not report
    /// (body cuts), which ends before `unread_until`: a segment past a hole fills the hole as
    /// absent bytes at once ([`HalfStream::set_unread`]). (A flag and a number rather than an
    /// `Option`, which would take 8 bytes: the connection's budget is 512.)
    unread: bool,
    unread_until: u32,
    ooo: Option<Box<OooBuf>>,
}

impl HalfStream {
    /// Heap bytes held in out-of-order segments.
    pub fn held_bytes(&self) -> usize {
        self.ooo.as_ref().map_or(0, |o| o.bytes + o.segs.capacity() * std::mem::size_of::<(u32, Vec<u8>, u32)>())
    }
}

#[derive(Debug, Default)]
struct OooBuf {
    /// (seq, the bytes seen, the length on the wire), sorted by seq.
    segs: Vec<(u32, Vec<u8>, u32)>,
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
    /// Bytes in order that the wire carried now but rlm did not get (the end of a cut frame):
    /// their place and length are known, their content is not.
    Absent {
        /// Sequence number of the first.
        seq: u32,
        /// How many.
        len: u32,
    },
    /// Bytes in order inside a body nothing reads whose segments the kernel did not report
    /// ([`HalfStream::set_unread`]): handed on as absent ones are, counted apart.
    Unreported {
        /// Sequence number of the first.
        seq: u32,
        /// How many.
        len: u32,
    },
    /// A segment carrying only bytes already delivered, `seq` to `end`, that the receiver had
    /// not acknowledged: the sender retransmitted them because the receiver did not get them
    /// (lost past the appliance), or because its acknowledgement of them was lost or late.
    Retransmitted {
        /// The first byte resent (its sequence number).
        seq: u32,
        /// The sequence number after the last.
        end: u32,
    },
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
    pub(super) fn start_at(&mut self, next: u32) {
        self.started = true;
        self.next = next;
    }

    /// Next expected sequence number, once started.
    pub fn next_seq(&self) -> Option<u32> {
        self.started.then_some(self.next)
    }

    /// The stream is inside a body nothing reads with `left` bytes to come (`None`: it is not):
    /// while it is, a segment that comes past a hole (the kernel left the segments before it
    /// unreported: it reports one a MiB and the one that ends the body) fills the hole as
    /// absent bytes, carried now, instead of waiting for it. The engine sets it after each
    /// segment, from its HTTP reader.
    pub fn set_unread(&mut self, left: Option<u64>) {
        // A body past a gigabyte is bounded a gigabyte ahead (sequence numbers wrap at 4 GiB).
        self.unread = left.is_some();
        self.unread_until = self.next.wrapping_add(left.unwrap_or(0).min(1 << 30) as u32);
    }

    /// The highest sequence number the receiver acknowledged (as seen here), if any.
    pub fn acked(&self) -> Option<u32> {
        self.acked
    }

    /// Take a segment's payload, `len` bytes on the wire of which `payload` (its first bytes)
    /// was seen; call `sink` with what is now in order.
    pub(super) fn accept(&mut self, now: Timestamp, seq: u32, payload: &[u8], len: u32, sink: &mut dyn FnMut(Chunk<'_>)) -> SegFate {
        debug_assert!(payload.len() <= len as usize);
        if len == 0 {
            return SegFate::Empty;
        }
        if len >= MAX_AHEAD {
            // Longer than any window this stream could have (a length no TCP segment has, as a
            // report's made-up wire length may claim): taken, it would wrap `next` back behind
            // the bytes held past a hole.
            return SegFate::Ignored;
        }
        if !self.started {
            self.start_at(seq);
        }
        let mut ahead = seq.wrapping_sub(self.next);
        if self.unread && ahead != 0 && ahead < MAX_AHEAD && !seq_lt(seq, self.next) {
            // Inside a body nothing reads: the segments before this one were not reported.
            let at = self.next;
            self.next = seq;
            self.bytes += u64::from(ahead);
            sink(Chunk::Unreported { seq: at, len: ahead });
            ahead = 0;
        }
        if ahead == 0 || seq_lt(seq, self.next) {
            let skip = self.next.wrapping_sub(seq);
            if skip >= len {
                self.retransmits += 1;
                // Resent bytes the receiver had acknowledged are spurious: it had them already.
                let end = seq.wrapping_add(len);
                if self.acked.is_none_or(|a| seq_lt(a, end)) {
                    sink(Chunk::Retransmitted { seq, end });
                }
                return SegFate::Retransmission;
            }
            if skip > 0 {
                self.retransmits += 1;
            }
            self.deliver_from(now, payload, len, skip, sink);
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
                return self.accept(now, seq, payload, len, sink);
            }
            match ooo.segs.binary_search_by(|(s, _, _)| {
                if seq_lt(*s, seq) {
                    std::cmp::Ordering::Less
                } else if *s == seq {
                    std::cmp::Ordering::Equal
                } else {
                    std::cmp::Ordering::Greater
                }
            }) {
                Ok(i) => {
                    let held = &mut ooo.segs[i];
                    // The longer copy stays, or the one with more seen.
                    if (held.2, held.1.len()) < (len, payload.len()) {
                        ooo.bytes = ooo.bytes - held.1.len() + payload.len();
                        *held = (seq, payload.to_vec(), len);
                    } else {
                        self.retransmits += 1;
                    }
                }
                Err(i) => {
                    ooo.bytes += payload.len();
                    ooo.segs.insert(i, (seq, payload.to_vec(), len));
                }
            }
            SegFate::Ahead
        } else {
            // Far outside any window we could be in.
            SegFate::Ignored
        }
    }

    /// Deliver a segment's bytes from `skip` on (the stream is at `seq + skip`): the seen ones
    /// as data, then the rest of its `len` as absent.
    fn deliver_from(&mut self, now: Timestamp, seen: &[u8], len: u32, skip: u32, sink: &mut dyn FnMut(Chunk<'_>)) {
        if (skip as usize) < seen.len() {
            let data = &seen[skip as usize..];
            let seq = self.next;
            self.next = self.next.wrapping_add(data.len() as u32);
            self.bytes += data.len() as u64;
            sink(Chunk::Data { seq, data });
        }
        let from = skip.max(seen.len() as u32);
        if from < len {
            let (seq, n) = (self.next, len - from);
            self.next = self.next.wrapping_add(n);
            self.bytes += u64::from(n);
            sink(Chunk::Absent { seq, len: n });
        }
        self.last_data = Some(now);
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
            let Some((seq, _, _)) = ooo.segs.first() else {
                self.ooo = None;
                return;
            };
            if seq_lt(self.next, *seq) {
                return;
            }
            let (seq, data, len) = ooo.segs.remove(0);
            ooo.bytes -= data.len();
            let skip = self.next.wrapping_sub(seq);
            if skip < len {
                self.deliver_from(now, &data, len, skip, sink);
            }
        }
    }

    /// The peer acknowledged up to `ack`: bytes before it that we never saw were lost by the capture.
    pub(super) fn on_peer_ack(&mut self, now: Timestamp, ack: u32, sink: &mut dyn FnMut(Chunk<'_>)) {
        if self.acked.is_none_or(|a| seq_lt(a, ack)) {
            self.acked = Some(ack);
        }
        if !self.started || self.fin_seen {
            return;
        }
        if self.unread {
            let until = self.unread_until;
            // Inside a body nothing reads, an acknowledgement up to its end covers segments the
            // kernel did not report (a client's D-SACK is reported there), not bytes the capture
            // lost: the next segment reported fills the hole. One at or past its end says the
            // body's rest came (the report of its last segment, which the kernel always sends,
            // was lost): it is taken as unreported, and what lies past the body is judged as
            // elsewhere.
            if seq_lt(ack, until) {
                return;
            }
            let left = until.wrapping_sub(self.next);
            if left > 0 && left < MAX_AHEAD && self.ooo.is_none() {
                let at = self.next;
                self.next = until;
                self.bytes += u64::from(left);
                sink(Chunk::Unreported { seq: at, len: left });
            }
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

    /// Anything still waiting in the out-of-order buffer is delivered after a gap (end of
    /// connection). Each turn delivers or drops the first segment held, so it ends; a segment
    /// further ahead than a gap may span is dropped with the rest.
    pub(super) fn flush_all(&mut self, now: Timestamp, sink: &mut dyn FnMut(Chunk<'_>)) {
        while let Some(first) = self.ooo.as_ref().and_then(|o| o.segs.first().map(|s| s.0)) {
            if seq_lt(self.next, first) && first.wrapping_sub(self.next) >= MAX_AHEAD {
                break;
            }
            self.gap_to(first, sink);
            self.flush_ooo(now, sink);
        }
        self.ooo = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            fates.push(h.accept(Timestamp::ZERO, *seq, p, p.len() as u32, &mut |c| match c {
                Chunk::Data { seq, data: b } => {
                    assert_eq!(at.unwrap_or(seq), seq, "a piece starts where the stream was");
                    at = Some(seq.wrapping_add(b.len() as u32));
                    data.extend_from_slice(b)
                }
                Chunk::Gap(n) => {
                    gaps += n;
                    at = at.map(|a| a.wrapping_add(n as u32));
                }
                Chunk::Absent { .. } | Chunk::Unreported { .. } => unreachable!("whole segments only"),
                Chunk::Retransmitted { .. } => {}
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
    fn a_segment_longer_than_any_window_is_ignored_and_the_end_flushes() {
        // Found by the ring_record fuzz target: a report claiming a wire length near 2^32 took
        // in order wrapped `next` back behind a segment held past a hole, and the connection's
        // end then looped for ever in `flush_all`.
        crate::testkit::ends_within(std::time::Duration::from_secs(10), || {
            let mut h = HalfStream::default();
            h.start_at(0);
            assert_eq!(pieces(&mut h, &[(1000, b"held", 4)]), Vec::<String>::new());
            assert_eq!(h.accept(Timestamp::ZERO, 0, b"ab", u32::MAX - 100, &mut |_| {}), SegFate::Ignored);
            assert_eq!(h.next, 0);
            let mut out = Vec::new();
            h.flush_all(Timestamp::ZERO, &mut |c| out.push(matches!(c, Chunk::Gap(_))));
            assert_eq!(out, [true, false], "a gap, then the held bytes");
        });
        // Whatever moved `next`, the end's flush ends: a held segment beyond any gap is dropped.
        crate::testkit::ends_within(std::time::Duration::from_secs(10), || {
            let mut h = HalfStream::default();
            h.start_at(0);
            pieces(&mut h, &[(1000, b"held", 4)]);
            h.next = 1000u32.wrapping_sub(MAX_AHEAD + 1);
            h.flush_all(Timestamp::ZERO, &mut |_| {});
            assert!(h.ooo.is_none());
        });
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
            Chunk::Absent { len, .. } => out.push(format!("a{len}")),
            Chunk::Unreported { len, .. } => out.push(format!("u{len}")),
            Chunk::Retransmitted { .. } => out.push("r".into()),
        });
        assert_eq!(out, vec!["g8", "d2"]);
        assert_eq!(h.gap_bytes, 8);
    }

    #[test]
    fn peer_ack_inside_an_unread_body_declares_no_gap() {
        let mut h = HalfStream::default();
        h.start_at(0);
        h.set_unread(Some(5000));
        let _ = collect(&mut h, &[(0, b"aa")]);
        let mut out = Vec::new();
        let mut sink = |c: Chunk<'_>| match c {
            Chunk::Data { data, .. } => out.push(format!("d{}", data.len())),
            Chunk::Gap(n) => out.push(format!("g{n}")),
            Chunk::Absent { len, .. } => out.push(format!("a{len}")),
            Chunk::Unreported { len, .. } => out.push(format!("u{len}")),
            Chunk::Retransmitted { .. } => out.push("r".into()),
        };
        // The kernel reported neither the body's middle nor the ACKs of it; then a D-SACK, then
        // the segment that ends the body.
        h.on_peer_ack(Timestamp::ZERO, 3000, &mut sink);
        h.accept(Timestamp::ZERO, 4000, b"zz", 2, &mut sink);
        assert_eq!(out, vec!["u3998", "d2"]);
        assert_eq!(h.gap_bytes, 0);
        assert_eq!(h.acked(), Some(3000));
    }

    /// What an acknowledgement up to `ack` hands on: `u` unreported, `g` gap bytes.
    fn on_ack(h: &mut HalfStream, ack: u32) -> Vec<String> {
        let mut out = Vec::new();
        h.on_peer_ack(Timestamp::ZERO, ack, &mut |c| match c {
            Chunk::Gap(n) => out.push(format!("g{n}")),
            Chunk::Unreported { len, .. } => out.push(format!("u{len}")),
            _ => out.push("other".into()),
        });
        out
    }

    #[test]
    fn peer_ack_past_an_unread_body_takes_its_rest_as_unreported_and_what_follows_as_a_gap() {
        // Two bytes of a body in, 998 left: it ends before 1000.
        let body = || {
            let mut h = HalfStream::default();
            h.start_at(0);
            let _ = collect(&mut h, &[(0, b"aa")]);
            h.set_unread(Some(998));
            h
        };
        assert_eq!(on_ack(&mut body(), 1000), vec!["u998"], "the body's end acknowledged: its last report lost");
        let mut h = body();
        assert_eq!(on_ack(&mut h, 1500), vec!["u998", "g500"], "past the body: the next response's bytes lost");
        assert_eq!(h.gap_bytes, 500);
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

    /// What a stream hands on, written as "dN" (N bytes seen), "aN" (absent), "gN" (gap).
    fn pieces(h: &mut HalfStream, segs: &[(u32, &[u8], u32)]) -> Vec<String> {
        let mut out = Vec::new();
        for (seq, seen, len) in segs {
            h.accept(Timestamp::ZERO, *seq, seen, *len, &mut |c| match c {
                Chunk::Data { data, .. } => out.push(format!("d{}", data.len())),
                Chunk::Absent { len, .. } => out.push(format!("a{len}")),
                Chunk::Unreported { len, .. } => out.push(format!("u{len}")),
                Chunk::Gap(n) => out.push(format!("g{n}")),
                Chunk::Retransmitted { .. } => out.push("r".into()),
            });
        }
        out
    }

    #[test]
    fn cut_segments_hand_on_their_unseen_bytes_as_absent_in_order() {
        let mut h = HalfStream::default();
        h.start_at(0);
        // In order: 4 seen of 10, then a whole one.
        assert_eq!(pieces(&mut h, &[(0, b"abcd", 10), (10, b"xy", 2)]), ["d4", "a6", "d2"]);
        assert_eq!((h.next, h.bytes, h.gap_bytes), (12, 12, 0));
        // Out of order: the cut segment waits for the hole, then goes on whole.
        assert_eq!(pieces(&mut h, &[(20, b"ab", 30), (12, b"12345678", 8)]), ["d8", "d2", "a28"]);
        assert_eq!(h.next, 50);
        // A retransmission overlapping absent bytes repeats nothing; one that reaches past
        // them hands on only what is new (seen first, then absent).
        assert_eq!(pieces(&mut h, &[(40, b"0123456789", 10)]), ["r"]);
        assert_eq!(pieces(&mut h, &[(45, b"0123456789", 20)]), ["d5", "a10"]);
        assert_eq!(pieces(&mut h, &[(70, b"ab", 5)]).len(), 0, "ahead of the stream: held");
        assert_eq!(pieces(&mut h, &[(65, b"", 5)]), ["a5", "d2", "a3"]);
        assert_eq!((h.next, h.bytes, h.gap_bytes), (75, 75, 0));
    }
}
