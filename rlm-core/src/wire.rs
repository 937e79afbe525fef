//! Wire: frames in, TCP segments (and UDP datagrams) out.
//!
//! Decoding is etherparse's. This module only turns its result into the
//! views the rest of the engine needs ([`Segment`], [`Datagram`]) and every
//! failure into a [`Malformed`] reason that is counted, never panicked on.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use etherparse::err::packet::SliceError;
use etherparse::{LaxNetSlice, LaxSlicedPacket, NetSlice, SlicedPacket, TcpSlice, TransportSlice, UdpSlice};

/// How a frame starts: the link types of the captures and ports we read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkType {
    /// Ethernet II, with any 802.1Q/802.1ad VLAN tags.
    Ethernet,
    /// A bare IPv4 or IPv6 packet (DLT_RAW).
    RawIp,
    /// Linux "cooked" capture v1 (DLT_LINUX_SLL).
    LinuxSll,
    /// BSD loopback: a 4-byte address family in host order, then IP (DLT_NULL / DLT_LOOP).
    Null,
}

impl LinkType {
    /// The link type for a pcap DLT / LINKTYPE number, if we can read it.
    pub fn from_dlt(dlt: i32) -> Option<LinkType> {
        match dlt {
            1 => Some(LinkType::Ethernet),
            12 | 14 | 101 | 228 | 229 => Some(LinkType::RawIp),
            113 => Some(LinkType::LinuxSll),
            0 | 108 => Some(LinkType::Null),
            _ => None,
        }
    }
}

/// One end of a TCP connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Endpoint {
    /// Its IP address.
    pub ip: IpAddr,
    /// Its TCP port.
    pub port: u16,
}

impl From<Endpoint> for SocketAddr {
    fn from(e: Endpoint) -> SocketAddr {
        SocketAddr::new(e.ip, e.port)
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.ip {
            IpAddr::V4(a) => write!(f, "{}:{}", a, self.port),
            IpAddr::V6(a) => write!(f, "[{}]:{}", a, self.port),
        }
    }
}

/// TCP flags we act on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpFlags {
    /// SYN: opening a connection (with ACK: the server's answer).
    pub syn: bool,
    /// ACK: the acknowledgement number is meaningful.
    pub ack: bool,
    /// FIN: the sender has no more to send.
    pub fin: bool,
    /// RST: the connection is reset.
    pub rst: bool,
}

/// A decoded TCP segment, borrowing the frame.
#[derive(Clone, Debug)]
pub struct Segment<'a> {
    /// The sender.
    pub src: Endpoint,
    /// The receiver.
    pub dst: Endpoint,
    /// The TCP sequence number (a SYN's: the initial one, one before the first data byte).
    pub seq: u32,
    /// Acknowledgement number (meaningful when `flags.ack`).
    pub ack: u32,
    /// The flags we act on.
    pub flags: TcpFlags,
    /// The advertised receive window, as on the wire (not scaled).
    pub window: u16,
    /// The TCP payload, a slice of the frame: all of it, or its first bytes when the frame
    /// reached rlm cut ([`decode_cut`]).
    pub payload: &'a [u8],
    /// The payload's length on the wire: `payload.len()`, or more for a cut frame (the rest
    /// was carried at the same time, unseen).
    pub payload_len: u32,
    /// Offset of the TCP payload in the frame (for in-place rewrites).
    pub payload_offset: usize,
    /// Offset of the TCP header in the frame (its checksum is 16 bytes in).
    pub tcp_offset: usize,
    /// The acknowledgement's D-SACK block (RFC 2883), as `(left, right)` sequence numbers: the
    /// bytes its sender received twice, so that the other side's retransmission of them was
    /// spurious (its first send had arrived; an acknowledgement of it was lost or late).
    pub dsack: Option<(u32, u32)>,
}

/// A decoded UDP datagram, borrowing the frame (the engine counts QUIC's from it).
#[derive(Clone, Debug)]
pub struct Datagram<'a> {
    /// The sender.
    pub src: Endpoint,
    /// The receiver.
    pub dst: Endpoint,
    /// The UDP payload, a slice of the frame: all of it, or its first bytes when the frame
    /// reached rlm cut ([`decode_cut`]).
    pub payload: &'a [u8],
    /// The payload's length on the wire.
    pub payload_len: u32,
}

/// Why a frame was not decoded into a TCP segment although it claimed to carry one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Malformed {
    /// Shorter than the headers it announces (link, VLAN, IP or TCP), or cut by the snap length.
    Truncated,
    /// A bad Linux SLL or loopback header.
    BadLinkHeader,
    /// A bad 802.1AE MACsec header.
    BadMacsec,
    /// Not IPv4 or IPv6 where IP was expected.
    BadIpVersion,
    /// An IPv4 header that does not add up (length, IHL, total length).
    BadIpv4Header,
    /// An IPv6 header that does not add up.
    BadIpv6Header,
    /// A broken IP extension header.
    BadIpExtension,
    /// A TCP header with a data offset below 5 or past the segment.
    BadTcpHeader,
}

impl Malformed {
    /// Every reason, in declaration order (so that each counter is reported from zero).
    pub const ALL: [Malformed; 8] = [
        Malformed::Truncated,
        Malformed::BadLinkHeader,
        Malformed::BadMacsec,
        Malformed::BadIpVersion,
        Malformed::BadIpv4Header,
        Malformed::BadIpv6Header,
        Malformed::BadIpExtension,
        Malformed::BadTcpHeader,
    ];
    /// The reason's name in the statistics (lower snake case).
    pub fn name(self) -> &'static str {
        match self {
            Malformed::Truncated => "truncated",
            Malformed::BadLinkHeader => "bad_link_header",
            Malformed::BadMacsec => "bad_macsec",
            Malformed::BadIpVersion => "bad_ip_version",
            Malformed::BadIpv4Header => "bad_ipv4_header",
            Malformed::BadIpv6Header => "bad_ipv6_header",
            Malformed::BadIpExtension => "bad_ip_extension",
            Malformed::BadTcpHeader => "bad_tcp_header",
        }
    }
}

/// Frames that parse but are not ours to track.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Ignored {
    /// Not IP at all (ARP, LLDP, ...).
    NotIp,
    /// IP, but neither TCP nor UDP (ICMP, ...); in the engine, also UDP not to or from a
    /// server's port.
    NotTcp,
    /// An IP fragment: not reassembled (web traffic with PMTU discovery does not fragment).
    IpFragment,
}

impl Ignored {
    /// Every reason, in declaration order (so that each counter is reported from zero).
    pub const ALL: [Ignored; 3] = [Ignored::NotIp, Ignored::NotTcp, Ignored::IpFragment];
    /// The reason's name in the statistics (lower snake case).
    pub fn name(self) -> &'static str {
        match self {
            Ignored::NotIp => "not_ip",
            Ignored::NotTcp => "not_tcp",
            Ignored::IpFragment => "ip_fragment",
        }
    }
}

/// What a frame turned out to be.
#[derive(Debug)]
pub enum Decoded<'a> {
    /// A TCP segment.
    Tcp(Segment<'a>),
    /// A UDP datagram.
    Udp(Datagram<'a>),
    /// A frame that is not ours to track, and why.
    Ignored(Ignored),
    /// A frame that did not decode, and why.
    Malformed(Malformed),
}

fn classify(err: &SliceError) -> Malformed {
    match err {
        SliceError::Len(_) => Malformed::Truncated,
        SliceError::LinuxSll(_) => Malformed::BadLinkHeader,
        SliceError::Macsec(_) => Malformed::BadMacsec,
        SliceError::Ip(_) => Malformed::BadIpVersion,
        SliceError::Ipv4(_) => Malformed::BadIpv4Header,
        SliceError::Ipv6(_) => Malformed::BadIpv6Header,
        SliceError::Ipv4Exts(_) | SliceError::Ipv6Exts(_) => Malformed::BadIpExtension,
        SliceError::Tcp(_) => Malformed::BadTcpHeader,
    }
}

/// An 802.3 frame (length, not EtherType) carrying IPv4 or IPv6 behind an LLC/SNAP header.
fn is_llc_snap_ip(frame: &[u8]) -> bool {
    frame.len() >= 22
        && u16::from_be_bytes([frame[12], frame[13]]) < 0x0600
        && frame[14..17] == [0xaa, 0xaa, 0x03]
        && matches!(u16::from_be_bytes([frame[20], frame[21]]), 0x0800 | 0x86dd)
}

/// Decode one frame of link type `link`: a TCP segment, or why not. Never panics.
pub fn decode(link: LinkType, frame: &[u8]) -> Decoded<'_> {
    let (sliced, base) = match link {
        // IEEE 802.3 with an LLC/SNAP header (a length where the EtherType would be, then
        // AA AA 03, an OUI and the EtherType): the IP packet starts after those 22 bytes.
        LinkType::Ethernet if is_llc_snap_ip(frame) => (SlicedPacket::from_ip(&frame[22..]), 22),
        LinkType::Ethernet => (SlicedPacket::from_ethernet(frame), 0),
        LinkType::LinuxSll => (SlicedPacket::from_linux_sll(frame), 0),
        LinkType::RawIp => (SlicedPacket::from_ip(frame), 0),
        LinkType::Null => {
            if frame.len() < 4 {
                return Decoded::Malformed(Malformed::BadLinkHeader);
            }
            (SlicedPacket::from_ip(&frame[4..]), 4)
        }
    };
    let sliced = match sliced {
        Ok(s) => s,
        Err(e) => return Decoded::Malformed(classify(&e)),
    };
    let (src_ip, dst_ip, fragmented) = match &sliced.net {
        Some(NetSlice::Ipv4(v4)) => (IpAddr::V4(v4.header().source_addr()), IpAddr::V4(v4.header().destination_addr()), v4.is_payload_fragmented()),
        Some(NetSlice::Ipv6(v6)) => (IpAddr::V6(v6.header().source_addr()), IpAddr::V6(v6.header().destination_addr()), v6.is_payload_fragmented()),
        _ => return Decoded::Ignored(Ignored::NotIp),
    };
    if fragmented {
        return Decoded::Ignored(Ignored::IpFragment);
    }
    match &sliced.transport {
        Some(TransportSlice::Tcp(tcp)) => segment(frame, base, src_ip, dst_ip, tcp, None),
        Some(TransportSlice::Udp(udp)) => datagram(src_ip, dst_ip, udp, None),
        _ => Decoded::Ignored(Ignored::NotTcp),
    }
}

/// The datagram of a decoded UDP header; `wire_payload`: its payload's length on the wire when
/// the frame was cut (from the IP header), else the payload is whole.
fn datagram<'a>(src_ip: IpAddr, dst_ip: IpAddr, udp: &UdpSlice<'a>, wire_payload: Option<usize>) -> Decoded<'a> {
    let payload = udp.payload();
    let payload_len = wire_payload.unwrap_or(payload.len()).max(payload.len());
    let Ok(payload_len) = u32::try_from(payload_len) else { return Decoded::Malformed(Malformed::Truncated) };
    Decoded::Udp(Datagram {
        src: Endpoint { ip: src_ip, port: udp.source_port() },
        dst: Endpoint { ip: dst_ip, port: udp.destination_port() },
        payload,
        payload_len,
    })
}

/// The segment of a decoded TCP header; `payload_end`: where the IP packet ends in `frame`'s
/// coordinates when that is past the frame's end (a cut frame), else the payload is whole.
fn segment<'a>(frame: &'a [u8], base: usize, src_ip: IpAddr, dst_ip: IpAddr, tcp: &TcpSlice<'a>, payload_end: Option<usize>) -> Decoded<'a> {
    let payload = tcp.payload();
    // The payload is a sub-slice of `frame` (or of frame[4..]); its offset lets actions rewrite in place.
    let payload_offset = base + (payload.as_ptr() as usize - frame[base..].as_ptr() as usize);
    let tcp_offset = base + (tcp.slice().as_ptr() as usize - frame[base..].as_ptr() as usize);
    let payload_len = match payload_end {
        Some(end) if end >= payload_offset + payload.len() => end - payload_offset,
        Some(_) => return Decoded::Malformed(Malformed::Truncated),
        None => payload.len(),
    };
    let Ok(payload_len) = u32::try_from(payload_len) else { return Decoded::Malformed(Malformed::Truncated) };
    Decoded::Tcp(Segment {
        src: Endpoint { ip: src_ip, port: tcp.source_port() },
        dst: Endpoint { ip: dst_ip, port: tcp.destination_port() },
        seq: tcp.sequence_number(),
        ack: tcp.acknowledgment_number(),
        flags: TcpFlags { syn: tcp.syn(), ack: tcp.ack(), fin: tcp.fin(), rst: tcp.rst() },
        window: tcp.window_size(),
        payload,
        payload_len,
        payload_offset,
        tcp_offset,
        dsack: dsack(tcp),
    })
}

/// TCP sequence comparison modulo 2^32: `a` comes before `b`.
pub(crate) fn seq_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// The span of sequence numbers from the first start of `a` and `b` to the last end, each a
/// `(start, end)` pair, modulo 2^32.
pub(crate) fn seq_span(a: (u32, u32), b: (u32, u32)) -> (u32, u32) {
    (if seq_lt(b.0, a.0) { b.0 } else { a.0 }, if seq_lt(a.1, b.1) { b.1 } else { a.1 })
}

/// A segment's D-SACK block (RFC 2883 4): its first SACK block when that lies below the
/// acknowledgement number, or within its second block. The options are walked as the kernel's
/// fast path walks them (kind, length), so that an option of a kind etherparse does not know
/// (MD5, TCP-AO, MPTCP), before the SACK, does not hide it: etherparse's iterator stops there.
fn dsack(tcp: &TcpSlice<'_>) -> Option<(u32, u32)> {
    let o = tcp.options();
    // Most segments carry no option, or only timestamps (NOP, NOP, TS): nothing to read.
    if !tcp.ack() || o.is_empty() || (o.len() == 12 && o[..4] == [1, 1, 8, 10]) {
        return None;
    }
    let word = |b: &[u8], at: usize| u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    let mut i = 0;
    while i < o.len() {
        match o[i] {
            0 => return None,
            1 => i += 1,
            kind => {
                let len = usize::from(*o.get(i + 1)?);
                if len < 2 || i + len > o.len() {
                    return None;
                }
                if kind == 5 {
                    let blocks = &o[i + 2..i + len];
                    if blocks.is_empty() || blocks.len() % 8 != 0 {
                        return None;
                    }
                    let first = (word(blocks, 0), word(blocks, 4));
                    let below = seq_lt(first.0, tcp.acknowledgment_number());
                    let within = blocks.len() >= 16 && !seq_lt(first.0, word(blocks, 8)) && !seq_lt(word(blocks, 12), first.1);
                    return (below || within).then_some(first);
                }
                i += len;
            }
        }
    }
    None
}

/// Decode a frame the wire carried `wire_len` bytes long of which only the first `frame.len()`
/// reached rlm (a fast-path report cut at its copy limit, a GRO/GSO super-frame): its headers
/// are read from what came, and its payload's length on the wire from the IP header (or from
/// `wire_len` when the IP length is 0, as in a TSO or BIG TCP packet). A whole frame
/// (`wire_len <= frame.len()`) is decoded as [`decode`] does, strictly. Ethernet and raw IP
/// only (what the drivers cut); other link types are decoded strictly. Never panics.
pub fn decode_cut(link: LinkType, frame: &[u8], wire_len: usize) -> Decoded<'_> {
    if wire_len <= frame.len() {
        return decode(link, frame);
    }
    let (sliced, base) = match link {
        LinkType::Ethernet if is_llc_snap_ip(frame) => (LaxSlicedPacket::from_ip(&frame[22..]).ok(), 22),
        LinkType::Ethernet => (LaxSlicedPacket::from_ethernet(frame).ok(), 0),
        LinkType::RawIp => (LaxSlicedPacket::from_ip(frame).ok(), 0),
        LinkType::LinuxSll | LinkType::Null => return decode(link, frame),
    };
    let Some(sliced) = sliced else { return Decoded::Malformed(Malformed::Truncated) };
    // Where the IP packet starts in `frame`, and its length as its header declares it.
    let offset = |header: &[u8]| base + (header.as_ptr() as usize - frame[base..].as_ptr() as usize);
    let (src_ip, dst_ip, fragmented, ip_end) = match &sliced.net {
        Some(LaxNetSlice::Ipv4(v4)) => {
            let h = v4.header();
            let end = (h.total_len() != 0).then(|| offset(h.slice()) + usize::from(h.total_len()));
            (IpAddr::V4(h.source_addr()), IpAddr::V4(h.destination_addr()), v4.is_payload_fragmented(), end)
        }
        Some(LaxNetSlice::Ipv6(v6)) => {
            let h = v6.header();
            let end = (h.payload_length() != 0).then(|| offset(h.slice()) + h.slice().len() + usize::from(h.payload_length()));
            (IpAddr::V6(h.source_addr()), IpAddr::V6(h.destination_addr()), v6.is_payload_fragmented(), end)
        }
        _ => match &sliced.stop_err {
            Some((e, _)) => return Decoded::Malformed(classify(e)),
            None => return Decoded::Ignored(Ignored::NotIp),
        },
    };
    if fragmented {
        return Decoded::Ignored(Ignored::IpFragment);
    }
    // The packet cannot end past what the wire carried.
    let end = ip_end.unwrap_or(wire_len);
    match &sliced.transport {
        Some(TransportSlice::Tcp(_) | TransportSlice::Udp(_)) if end > wire_len => Decoded::Malformed(Malformed::Truncated),
        Some(TransportSlice::Tcp(tcp)) => segment(frame, base, src_ip, dst_ip, tcp, Some(end)),
        Some(TransportSlice::Udp(udp)) => {
            // The payload's offset in `frame`, then its length up to the packet's end.
            let at = base + (udp.payload().as_ptr() as usize - frame[base..].as_ptr() as usize);
            match end.checked_sub(at) {
                Some(n) => datagram(src_ip, dst_ip, udp, Some(n)),
                None => Decoded::Malformed(Malformed::Truncated),
            }
        }
        _ => match &sliced.stop_err {
            Some((e, _)) => Decoded::Malformed(classify(e)),
            None => Decoded::Ignored(Ignored::NotTcp),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::PacketBuilder;

    fn tcp_frame(payload: &[u8]) -> Vec<u8> {
        let b = PacketBuilder::ethernet2([1; 6], [2; 6])
            .single_vlan(etherparse::VlanId::try_new(10).unwrap())
            .ipv4([10, 4, 0, 1], [10, 9, 0, 1], 64)
            .tcp(40000, 80, 1000, 65535)
            .ack(7);
        let mut v = Vec::new();
        b.write(&mut v, payload).unwrap();
        v
    }

    #[test]
    fn decodes_vlan_tagged_ipv4_tcp_with_payload_offset() {
        let f = tcp_frame(b"GET / HTTP/1.1\r\n\r\n");
        let Decoded::Tcp(s) = decode(LinkType::Ethernet, &f) else { panic!("not tcp") };
        assert_eq!(s.src.to_string(), "10.4.0.1:40000");
        assert_eq!(s.dst.port, 80);
        assert_eq!(s.seq, 1000);
        assert_eq!(s.ack, 7);
        assert!(s.flags.ack && !s.flags.syn);
        assert_eq!(&f[s.payload_offset..], b"GET / HTTP/1.1\r\n\r\n");
        // Ethernet 14, VLAN tag 4, IPv4 20: the TCP header, 20 bytes before the payload.
        assert_eq!((s.tcp_offset, s.payload_offset), (38, 58));
    }

    #[test]
    fn a_sequence_span_runs_from_the_first_start_to_the_last_end_across_the_wrap() {
        assert_eq!(seq_span((100, 200), (150, 300)), (100, 300));
        assert_eq!(seq_span((150, 300), (100, 200)), (100, 300));
        assert_eq!(seq_span((10, 20), (30, 40)), (10, 40));
        assert_eq!(seq_span((u32::MAX - 9, 5), (3, 50)), (u32::MAX - 9, 50));
    }

    #[test]
    fn reads_a_d_sack_below_the_ack_or_within_the_second_block_only() {
        use crate::testkit::tcp_sack;
        let (c, s) = ("10.4.0.1:40000".parse().unwrap(), "10.9.0.1:80".parse().unwrap());
        let dsack = |blocks: &[(u32, u32)]| match decode(LinkType::Ethernet, &tcp_sack(LinkType::Ethernet, c, s, 1, 5_000, blocks)) {
            Decoded::Tcp(seg) => seg.dsack,
            other => panic!("{other:?}"),
        };
        // Bytes below the acknowledgement, received twice.
        assert_eq!(dsack(&[(4_000, 4_500)]), Some((4_000, 4_500)));
        // Above it, within the second block (RFC 2883 4.2.1's second case).
        assert_eq!(dsack(&[(6_000, 6_500), (5_500, 7_000)]), Some((6_000, 6_500)));
        // Plain SACKs: data received out of order, nothing twice.
        assert_eq!(dsack(&[(6_000, 6_500)]), None);
        assert_eq!(dsack(&[(6_000, 6_500), (7_000, 7_500)]), None);
        // Across the 2^32 wrap.
        let wrapped = tcp_sack(LinkType::Ethernet, c, s, 1, 100, &[(u32::MAX - 99, 50)]);
        assert!(matches!(decode(LinkType::Ethernet, &wrapped), Decoded::Tcp(seg) if seg.dsack == Some((u32::MAX - 99, 50))));
        // Behind an option of a kind etherparse does not read (its two NOPs made an MPTCP
        // option of two bytes), as the fast path reads it.
        let mut mptcp = tcp_sack(LinkType::Ethernet, c, s, 1, 5_000, &[(4_000, 4_500)]);
        assert_eq!(mptcp[54..56], [1, 1]);
        mptcp[54..56].copy_from_slice(&[30, 2]);
        assert!(matches!(decode(LinkType::Ethernet, &mptcp), Decoded::Tcp(seg) if seg.dsack == Some((4_000, 4_500))));
        // An option whose length runs past the header: none.
        mptcp[54..56].copy_from_slice(&[30, 40]);
        assert!(matches!(decode(LinkType::Ethernet, &mptcp), Decoded::Tcp(seg) if seg.dsack.is_none()));
        // Timestamps only, or no option: none.
        let plain = crate::testkit::tcp_frame(LinkType::Ethernet, c, s, 1, 5_000, crate::testkit::ACK, &[]);
        assert!(matches!(decode(LinkType::Ethernet, &plain), Decoded::Tcp(seg) if seg.dsack.is_none()));
    }

    #[test]
    fn decodes_ipv6() {
        let b = PacketBuilder::ethernet2([1; 6], [2; 6]).ipv6([1; 16], [2; 16], 64).tcp(1, 443, 5, 100).syn();
        let mut v = Vec::new();
        b.write(&mut v, &[]).unwrap();
        let Decoded::Tcp(s) = decode(LinkType::Ethernet, &v) else { panic!() };
        assert!(s.flags.syn);
        assert!(s.src.to_string().starts_with("[101:"));
    }

    #[test]
    fn every_truncation_is_counted_not_panicked() {
        let f = tcp_frame(b"hello");
        let mut reasons = std::collections::BTreeSet::new();
        for n in 0..f.len() {
            match decode(LinkType::Ethernet, &f[..n]) {
                Decoded::Malformed(m) => {
                    reasons.insert(m);
                }
                Decoded::Tcp(_) | Decoded::Udp(_) | Decoded::Ignored(_) => panic!("prefix of {n} bytes decoded"),
            }
        }
        assert!(reasons.contains(&Malformed::Truncated));
    }

    #[test]
    fn udp_is_a_datagram_icmp_and_arp_are_ignored() {
        let b = PacketBuilder::ethernet2([1; 6], [2; 6]).ipv4([1, 1, 1, 1], [2, 2, 2, 2], 9).udp(53, 443);
        let mut v = Vec::new();
        b.write(&mut v, &[7u8; 1200]).unwrap();
        let Decoded::Udp(d) = decode(LinkType::Ethernet, &v) else { panic!("not udp") };
        assert_eq!((d.src.to_string().as_str(), d.dst.port, d.payload.len(), d.payload_len), ("1.1.1.1:53", 443, 1200, 1200));
        // Cut after 50 bytes of payload: its length on the wire from the IP header.
        let Decoded::Udp(d) = decode_cut(LinkType::Ethernet, &v[..14 + 20 + 8 + 50], v.len()) else { panic!("not udp") };
        assert_eq!((d.payload.len(), d.payload_len), (50, 1200));
        // A cut frame whose IP header claims more than the wire carried.
        assert!(matches!(decode_cut(LinkType::Ethernet, &v[..100], v.len() - 10), Decoded::Malformed(Malformed::Truncated)));
        let icmp = PacketBuilder::ethernet2([1; 6], [2; 6]).ipv4([1, 1, 1, 1], [2, 2, 2, 2], 9).icmpv4_echo_request(1, 1);
        let mut v = Vec::new();
        icmp.write(&mut v, b"x").unwrap();
        assert!(matches!(decode(LinkType::Ethernet, &v), Decoded::Ignored(Ignored::NotTcp)));
        let mut arp = vec![0xff; 12];
        arp.extend_from_slice(&[0x08, 0x06]);
        arp.extend_from_slice(&[0; 28]);
        assert!(matches!(decode(LinkType::Ethernet, &arp), Decoded::Ignored(Ignored::NotIp)));
    }

    #[test]
    fn null_link_skips_family_word() {
        let b = PacketBuilder::ipv4([127, 0, 0, 1], [127, 0, 0, 1], 64).tcp(5, 80, 1, 1);
        let mut v = vec![2, 0, 0, 0];
        b.write(&mut v, b"abc").unwrap();
        let Decoded::Tcp(s) = decode(LinkType::Null, &v) else { panic!() };
        assert_eq!(&v[s.payload_offset..], b"abc");
        assert!(matches!(decode(LinkType::Null, &v[..2]), Decoded::Malformed(Malformed::BadLinkHeader)));
    }

    #[test]
    fn a_cut_frame_gives_its_headers_what_came_of_its_payload_and_its_length_on_the_wire() {
        let body = vec![b'x'; 3000];
        let f = tcp_frame(&body);
        let Decoded::Tcp(whole) = decode(LinkType::Ethernet, &f) else { panic!("whole") };
        assert_eq!(whole.payload_len, 3000);
        let Decoded::Tcp(s) = decode_cut(LinkType::Ethernet, &f[..1000], f.len()) else { panic!("cut") };
        assert_eq!((s.src, s.dst, s.seq, s.ack), (whole.src, whole.dst, whole.seq, whole.ack));
        assert_eq!(s.payload, &f[whole.payload_offset..1000]);
        assert_eq!(s.payload_len, 3000);
        // Strict decoding still calls it truncated, and so does a cut one whose IP header
        // claims more than the wire carried.
        assert!(matches!(decode(LinkType::Ethernet, &f[..1000]), Decoded::Malformed(Malformed::Truncated)));
        assert!(matches!(decode_cut(LinkType::Ethernet, &f[..1000], f.len() - 1), Decoded::Malformed(Malformed::Truncated)));
        // Cut inside the TCP header: nothing to measure.
        assert!(matches!(decode_cut(LinkType::Ethernet, &f[..whole.tcp_offset + 10], f.len()), Decoded::Malformed(Malformed::Truncated)));
        // An IP length of 0 (TSO, BIG TCP): the wire's length says where it ends.
        let mut tso = f.clone();
        tso[18 + 2..18 + 4].copy_from_slice(&[0, 0]);
        let Decoded::Tcp(s) = decode_cut(LinkType::Ethernet, &tso[..1000], tso.len() + 500) else { panic!("tso") };
        assert_eq!(s.payload_len, 3500);
        // A whole frame decodes as strictly as ever.
        let Decoded::Tcp(s) = decode_cut(LinkType::Ethernet, &f, f.len()) else { panic!("whole") };
        assert_eq!(s.payload_len as usize, s.payload.len());
    }

    #[test]
    fn cut_ipv6_frames_take_their_length_from_the_payload_length() {
        let b = PacketBuilder::ethernet2([1; 6], [2; 6]).ipv6([1; 16], [2; 16], 64).tcp(40000, 80, 1, 1000);
        let mut f = Vec::new();
        b.write(&mut f, &[b'y'; 4000]).unwrap();
        let Decoded::Tcp(s) = decode_cut(LinkType::Ethernet, &f[..2048], f.len()) else { panic!("cut") };
        assert_eq!((s.payload.len(), s.payload_len), (2048 - 14 - 40 - 20, 4000));
    }
}
