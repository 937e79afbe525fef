//! What rlm changed on one direction of a connection, in sequence space: so that every copy of
//! those bytes (a retransmission, however the sender cuts it) is changed alike.

use super::patch::{Edit, Fill};

/// Most changed ranges kept per direction of a connection (those the receiver has acknowledged
/// are let go); past it, nothing more is changed.
pub const MAX_RECORD: usize = 256;

/// The ranges changed on one direction of a connection: `(seq, fill)`, blanks (the
/// server-to-client stream, `REMOVE EMBEDS`) or bytes (the client-to-server stream, `REWRITE
/// EMBEDS`).
#[derive(Clone, Debug, Default)]
pub struct Record {
    ranges: Vec<(u32, Fill)>,
}

impl Record {
    /// Blank `[seq, seq + len)` on every copy from now on; false (nothing added) when full.
    pub fn add(&mut self, ranges: &[(u32, u32)]) -> bool {
        if self.ranges.len() + ranges.len() > MAX_RECORD {
            return false;
        }
        self.ranges.extend(ranges.iter().map(|&(seq, len)| (seq, Fill::Spaces(len as usize))));
        true
    }

    /// Write `bytes` from `seq` on every copy from now on; false (nothing added) when full.
    pub fn add_bytes(&mut self, seq: u32, bytes: &[u8]) -> bool {
        if self.ranges.len() >= MAX_RECORD {
            return false;
        }
        self.ranges.push((seq, Fill::Bytes(bytes.into())));
        true
    }

    /// Whether no range is kept.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Ranges kept.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// The edits of a segment whose payload of `len` bytes starts at `seq`.
    pub fn edits(&self, seq: u32, len: usize) -> Vec<Edit> {
        let mut out = Vec::new();
        for (start, fill) in &self.ranges {
            let n = match fill {
                Fill::Spaces(n) => *n,
                Fill::Bytes(b) => b.len(),
            };
            // Offsets from the segment's first byte; the stream's window is far below 2^31.
            let from = start.wrapping_sub(seq) as i32 as i64;
            let (a, b) = (from.max(0), (from + n as i64).min(len as i64));
            if a < b {
                let (skip, take) = ((a - from) as usize, (b - a) as usize);
                out.push(match fill {
                    Fill::Spaces(_) => Edit::spaces(a as usize, take),
                    Fill::Bytes(bytes) => Edit::bytes(a as usize, &bytes[skip..skip + take]),
                });
            }
        }
        out.sort_by_key(|e| e.at);
        out
    }

    /// The receiver acknowledged every byte before `acked`: ranges wholly below it cannot be
    /// asked for again.
    pub fn prune(&mut self, acked: u32) {
        self.ranges.retain(|(start, fill)| {
            let n = match fill {
                Fill::Spaces(n) => *n,
                Fill::Bytes(b) => b.len(),
            } as u32;
            (acked.wrapping_sub(start.wrapping_add(n)) as i32) < 0
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn rewritten_bytes_are_cut_with_the_segment() {
        let mut rec = Record::default();
        // "/ims/" over bytes 4..9 of a request starting at 1000.
        assert!(rec.add_bytes(1004, b"/ims/"));
        let bytes = |seq: u32, len: usize| rec.edits(seq, len).into_iter().map(|e| (e.at, e.fill)).collect::<Vec<_>>();
        assert_eq!(bytes(1000, 100), [(4, Fill::Bytes(b"/ims/".as_slice().into()))]);
        // A resend cut inside the target: each piece gets its part.
        assert_eq!(bytes(1000, 6), [(4, Fill::Bytes(b"/i".as_slice().into()))]);
        assert_eq!(bytes(1006, 50), [(0, Fill::Bytes(b"ms/".as_slice().into()))]);
        assert_eq!(bytes(1009, 50), []);
        rec.prune(1008);
        assert_eq!(rec.len(), 1);
        rec.prune(1009);
        assert!(rec.is_empty());
    }
}
