//! In-place edits of a TCP segment's payload, with the TCP checksum updated incrementally
//! (RFC 1624, equation 3: HC' = ~(~HC + ~m + m')) over the 16-bit words the edits touch.
//!
//! Incremental rather than recomputed: a frame that came through NFQUEUE carries its full
//! checksum (the queue is not asked for GSO packets, so the kernel completes partial sums
//! before the copy), and updating it keeps a segment that arrived corrupt detectably corrupt,
//! where a recomputation would launder it. The IPv4 header is not touched: no header byte
//! changes. Frames to be sent afresh (injected copies) are recomputed instead
//! ([`crate::actions::fix_checksums`]).

use etherparse::checksum::Sum16BitWords;

use crate::wire::{decode, Decoded, LinkType};

/// What an edit writes, and so how long its range is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fill {
    /// This many spaces (a reference blanked).
    Spaces(usize),
    /// These bytes (a URL rewritten).
    Bytes(Box<[u8]>),
}

/// One edit of the TCP payload from offset `at`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edit {
    /// Offset in the TCP payload of the first byte it writes.
    pub at: usize,
    /// What it writes there.
    pub fill: Fill,
}

impl Edit {
    /// Blank `len` bytes from payload offset `at`.
    pub fn spaces(at: usize, len: usize) -> Edit {
        Edit { at, fill: Fill::Spaces(len) }
    }

    /// Write `bytes` from payload offset `at`.
    pub fn bytes(at: usize, bytes: &[u8]) -> Edit {
        Edit { at, fill: Fill::Bytes(bytes.into()) }
    }

    /// The bytes it covers.
    pub fn len(&self) -> usize {
        match &self.fill {
            Fill::Spaces(n) => *n,
            Fill::Bytes(b) => b.len(),
        }
    }

    /// Whether it covers no byte.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Why a frame was not edited (it is left as it was).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchError {
    /// Not a TCP segment over IP that we can read.
    NotTcp,
    /// An edit reaches past the payload's end.
    OutOfRange,
}

/// The complement of the one's complement sum of `data`'s 16-bit words (an odd last byte
/// padded with zero), as its two bytes on the wire: etherparse sums the words in the machine's
/// byte order, so words go in and come out as bytes, never as numbers.
fn complement_of_sum(data: &[u8]) -> [u8; 2] {
    Sum16BitWords::new().add_slice(data).ones_complement().to_ne_bytes()
}

/// Apply `edits` to the TCP payload of `frame` (of link type `link`) and update the TCP
/// checksum. All or nothing: on an error the frame is unchanged. Returns the bytes changed.
pub fn apply(frame: &mut [u8], link: LinkType, edits: &[Edit]) -> Result<usize, PatchError> {
    let (payload_at, payload_len, sum_at) = match decode(link, frame) {
        Decoded::Tcp(seg) => (seg.payload_offset, seg.payload.len(), seg.tcp_offset + 16),
        _ => return Err(PatchError::NotTcp),
    };
    if edits.iter().any(|e| e.at.checked_add(e.len()).map_or(true, |end| end > payload_len)) {
        return Err(PatchError::OutOfRange);
    }
    let mut hc = [frame[sum_at], frame[sum_at + 1]];
    let mut changed = 0;
    for e in edits.iter().filter(|e| !e.is_empty()) {
        // The words the edit touches, counted from the payload's start: the TCP header's length
        // is a multiple of 4, so the payload's words are the checksum's words.
        let start = e.at & !1;
        let end = ((e.at + e.len() + 1) & !1).min(payload_len);
        let span = &mut frame[payload_at + start..payload_at + end];
        let not_old = complement_of_sum(span);
        let target = &mut span[e.at - start..e.at - start + e.len()];
        match &e.fill {
            Fill::Spaces(_) => {
                changed += target.iter().filter(|b| **b != b' ').count();
                target.fill(b' ');
            }
            Fill::Bytes(b) => {
                changed += target.iter().zip(b.iter()).filter(|(x, y)| x != y).count();
                target.copy_from_slice(b);
            }
        }
        let new = complement_of_sum(span).map(|b| !b);
        // RFC 1624 eq. 3: HC' = ~(~HC + ~m + m').
        hc = Sum16BitWords::new().add_2bytes(hc.map(|b| !b)).add_2bytes(not_old).add_2bytes(new).ones_complement().to_ne_bytes();
    }
    frame[sum_at..sum_at + 2].copy_from_slice(&hc);
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{PacketBuilder, SlicedPacket, TransportSlice};
    use proptest::prelude::*;

    fn frame(v6: bool, payload: &[u8]) -> Vec<u8> {
        let b = PacketBuilder::ethernet2([1; 6], [2; 6]);
        let b = if v6 { b.ipv6([0xfd; 16], [0xfe; 16], 64) } else { b.ipv4([10, 9, 0, 1], [10, 5, 0, 7], 64) };
        let b = b.tcp(80, 40001, 7, 65535).ack(1000).psh();
        let mut v = Vec::new();
        b.write(&mut v, payload).unwrap();
        v
    }

    /// The TCP checksum a full computation gives, and the one the frame carries.
    fn sums(f: &[u8]) -> (u16, u16) {
        let p = SlicedPacket::from_ethernet(f).unwrap();
        let Some(TransportSlice::Tcp(t)) = &p.transport else { panic!() };
        let full = match &p.net {
            Some(etherparse::NetSlice::Ipv4(v4)) => t.calc_checksum_ipv4(v4.header().source(), v4.header().destination()).unwrap(),
            Some(etherparse::NetSlice::Ipv6(v6)) => t.calc_checksum_ipv6(v6.header().source(), v6.header().destination()).unwrap(),
            _ => panic!(),
        };
        (full, t.checksum())
    }

    /// Equal as one's complement numbers (0x0000 and 0xffff are both zero).
    fn same(a: u16, b: u16) -> bool {
        a == b || (a | b == 0xffff && a & b == 0)
    }

    #[test]
    fn blanks_a_reference_and_keeps_the_checksum_right() {
        let html = b"<p><img src=\"/img/cover.gif\" alt=\"x\"></p>";
        let mut f = frame(false, html);
        let at = html.windows(4).position(|w| w == b"src=").unwrap();
        let len = "src=\"/img/cover.gif\"".len();
        assert_eq!(apply(&mut f, LinkType::Ethernet, &[Edit::spaces(at, len)]), Ok(len));
        let Decoded::Tcp(seg) = decode(LinkType::Ethernet, &f) else { panic!() };
        assert_eq!(seg.payload, b"<p><img                      alt=\"x\"></p>");
        let (full, carried) = sums(&f);
        assert!(same(full, carried), "{full:#06x} against {carried:#06x}");
    }

    #[test]
    fn a_corrupt_segment_stays_corrupt() {
        let mut f = frame(false, b"GET /img/a.gif HTTP/1.1\r\n\r\n");
        let n = f.len();
        f[n - 5] ^= 0x20; // damaged in flight, checksum not updated
        let (full, carried) = sums(&f);
        assert!(!same(full, carried));
        apply(&mut f, LinkType::Ethernet, &[Edit::bytes(4, b"/ims/a.gif")]).unwrap();
        let (full, carried) = sums(&f);
        assert!(!same(full, carried), "the edit must not launder the damage");
    }

    #[test]
    fn bad_edits_leave_the_frame_alone() {
        let f0 = frame(false, b"abcdef");
        let mut f = f0.clone();
        assert_eq!(apply(&mut f, LinkType::Ethernet, &[Edit::spaces(0, 2), Edit::spaces(4, 3)]), Err(PatchError::OutOfRange));
        assert_eq!(apply(&mut f, LinkType::Ethernet, &[Edit::bytes(5, b"xy")]), Err(PatchError::OutOfRange));
        assert_eq!(apply(&mut f, LinkType::Ethernet, &[Edit::spaces(usize::MAX, 2)]), Err(PatchError::OutOfRange));
        assert_eq!(f, f0);
        assert_eq!(apply(&mut f[..20], LinkType::Ethernet, &[]), Err(PatchError::NotTcp));
    }

    #[test]
    fn a_raw_ip_packet_as_nfqueue_gives_it() {
        let f = frame(false, b"0123456789");
        let mut ip = f[14..].to_vec();
        apply(&mut ip, LinkType::RawIp, &[Edit::spaces(3, 3)]).unwrap();
        let mut back = f[..14].to_vec();
        back.extend_from_slice(&ip);
        let (full, carried) = sums(&back);
        assert!(same(full, carried));
        assert!(back.ends_with(b"012   6789"));
    }

    proptest! {
        /// Any edits at any offsets (odd and even, the odd last byte) of IPv4 and IPv6 segments:
        /// the checksum carried equals a full computation, and only the edited bytes change.
        #[test]
        fn incremental_equals_full(
            payload in proptest::collection::vec(any::<u8>(), 1..1400),
            v6 in any::<bool>(),
            raw in proptest::collection::vec((any::<usize>(), 0usize..40, any::<bool>(), any::<u8>()), 0..6),
        ) {
            let mut f = frame(v6, &payload);
            let base = f.len() - payload.len();
            let edits: Vec<Edit> = raw
                .iter()
                .map(|&(at, len, spaces, byte)| {
                    let at = at % payload.len();
                    let len = len.min(payload.len() - at);
                    if spaces { Edit::spaces(at, len) } else { Edit::bytes(at, &vec![byte; len]) }
                })
                .collect();
            let mut want = payload.clone();
            for e in &edits {
                match &e.fill {
                    Fill::Spaces(n) => want[e.at..e.at + n].fill(b' '),
                    Fill::Bytes(b) => want[e.at..e.at + b.len()].copy_from_slice(b),
                }
            }
            prop_assert!(apply(&mut f, LinkType::Ethernet, &edits).is_ok());
            prop_assert_eq!(&f[base..], &want[..]);
            let (full, carried) = sums(&f);
            prop_assert!(same(full, carried), "{:#06x} against {:#06x}", full, carried);
        }
    }
}
