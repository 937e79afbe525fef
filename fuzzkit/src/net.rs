//! Frames for the engine targets, and the checks on what the engine sends.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use etherparse::{NetSlice, SlicedPacket, TransportSlice};
use rlm_core::wire::LinkType;

/// TCP flag bits of an operation's `flags` (the inputs' encoding, kept so that the corpora and
/// regressions keep their meaning; [`tcp_bits`] turns them into the header's).
pub const SYN: u8 = 1;
pub const ACK: u8 = 2;
pub const FIN: u8 = 4;
pub const RST: u8 = 8;
pub const PSH: u8 = 16;

/// An operation's `flags` as the TCP header's bits.
pub fn tcp_bits(flags: u8) -> u8 {
    use rlm_core::testkit as t;
    [(SYN, t::SYN), (ACK, t::ACK), (FIN, t::FIN), (RST, t::RST), (PSH, t::PSH)]
        .iter()
        .filter(|(ours, _)| flags & ours != 0)
        .fold(0, |b, (_, tcp)| b | tcp)
}

/// A TCP segment from `src` to `dst` with an operation's `flags`, as an Ethernet frame or a
/// bare IP packet (`link`), checksums computed ([`rlm_core::testkit::tcp_frame`]).
pub fn tcp_frame(link: LinkType, src: SocketAddr, dst: SocketAddr, seq: u32, ack: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
    rlm_core::testkit::tcp_frame(link, src, dst, seq, ack, tcp_bits(flags), payload)
}

/// Why `frame` (of `link`) is not a well-formed TCP/IP frame with good IPv4 and TCP
/// checksums, if it is not.
pub fn check_tcp(link: LinkType, frame: &[u8]) -> Result<(), String> {
    let p = match link {
        LinkType::Ethernet => SlicedPacket::from_ethernet(frame),
        _ => SlicedPacket::from_ip(frame),
    }
    .map_err(|e| format!("does not decode: {e}"))?;
    let Some(TransportSlice::Tcp(tcp)) = &p.transport else { return Err("no TCP segment".into()) };
    let sum = match &p.net {
        Some(NetSlice::Ipv4(ip)) => {
            let h = ip.header();
            if h.to_header().calc_header_checksum() != h.header_checksum() {
                return Err("bad IPv4 header checksum".into());
            }
            tcp.calc_checksum_ipv4(h.source(), h.destination())
        }
        Some(NetSlice::Ipv6(ip)) => tcp.calc_checksum_ipv6(ip.header().source(), ip.header().destination()),
        _ => return Err("not IP".into()),
    };
    match sum {
        Ok(s) if s == tcp.checksum() => Ok(()),
        Ok(s) => Err(format!("bad TCP checksum {:#06x} (should be {s:#06x})", tcp.checksum())),
        Err(e) => Err(format!("TCP checksum: {e}")),
    }
}

/// A client's address: connection `conn` of 16, from 12 hosts (four at 10.4.0.x, four at
/// 10.5.0.x, four IPv6), each with two ports.
pub fn client_of(conn: u8) -> SocketAddr {
    let c = conn % 16;
    let host = c % 4 + 1;
    let ip: IpAddr = match c / 4 {
        0 | 1 => Ipv4Addr::new(10, 4, 0, host).into(),
        2 => Ipv4Addr::new(10, 5, 0, host).into(),
        _ => Ipv6Addr::new(0x2001, 0xdb8, 4, 0, 0, 0, 0, u16::from(host)).into(),
    };
    SocketAddr::new(ip, 40_000 + u16::from(c))
}

/// Distinct client hosts of [`client_of`].
pub const CLIENT_HOSTS: usize = 12;

/// The server connection `conn` talks to, on `port`.
pub fn server_of(conn: u8, port: u16) -> SocketAddr {
    let ip: IpAddr =
        if client_of(conn).is_ipv4() { Ipv4Addr::new(10, 9, 0, 1).into() } else { Ipv6Addr::new(0x2001, 0xdb8, 9, 0, 0, 0, 0, 1).into() };
    SocketAddr::new(ip, port)
}

/// HTTP-shaped starts of payloads: requests for a container and its objects (`/img/` is what
/// the lab's mapping rewrites), containers whose references adaptation blanks, other answers.
pub const SNIPPETS: &[&[u8]] = &[
    b"GET / HTTP/1.1\r\nHost: shop.example.com\r\n\r\n",
    b"GET /img/cover.jpg HTTP/1.1\r\nHost: shop.example.com\r\nReferer: http://shop.example.com/\r\n\r\n",
    b"GET /images/large/a.jpg HTTP/1.1\r\nHost: shop.example.com\r\nReferer: http://shop.example.com/\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 150\r\n\r\n<html><img src=\"/img/cover.jpg\"><img src=\"/img/b.gif\"><link rel=stylesheet href=\"/s.css\"><script src=\"/j.js\"></script><img src=/images/large/a.jpg>",
    b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nTransfer-Encoding: chunked\r\n\r\n3a\r\n<img src=\"/images/large/a.jpg\"><img src=/img/x.png><img src=\"/y\">\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Type: image/jpeg\r\nContent-Length: 10\r\n\r\n",
    b"HTTP/1.1 304 Not Modified\r\n\r\n",
    b"HTTP/1.1 100 Continue\r\n\r\n",
    b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n",
    b"5\r\nhello\r\n0\r\n\r\n",
];

/// The next sequence numbers of each direction of 16 connections, for segments given as
/// offsets from them.
pub struct Seqs([[u32; 2]; 16]);

impl Default for Seqs {
    fn default() -> Self {
        Seqs([[1000; 2]; 16])
    }
}

/// A segment of connection `conn` (see [`client_of`]), given relative to what came before.
#[derive(Clone, Copy, Debug)]
pub struct Seg<'a> {
    pub conn: u8,
    pub to_server: bool,
    pub server_port: u16,
    pub seq_delta: i16,
    pub ack_delta: i16,
    pub flags: u8,
    /// A [`SNIPPETS`] entry the payload starts with, if in range.
    pub snippet: u8,
    pub payload: &'a [u8],
}

impl Seqs {
    /// The segment's frame; its direction's next sequence number moves past it.
    pub fn frame(&mut self, link: LinkType, s: Seg<'_>) -> Vec<u8> {
        let c = usize::from(s.conn % 16);
        let dir = usize::from(!s.to_server);
        let mut data = Vec::new();
        if let Some(snip) = SNIPPETS.get(usize::from(s.snippet)) {
            data.extend_from_slice(snip);
        }
        data.extend_from_slice(s.payload);
        let seq = self.0[c][dir].wrapping_add(s.seq_delta as i32 as u32);
        let ack = self.0[c][1 - dir].wrapping_add(s.ack_delta as i32 as u32);
        let (client, server) = (client_of(s.conn), server_of(s.conn, s.server_port));
        let (src, dst) = if s.to_server { (client, server) } else { (server, client) };
        let f = tcp_frame(link, src, dst, seq, ack, s.flags, &data);
        self.0[c][dir] = seq.wrapping_add(data.len() as u32 + u32::from(s.flags & (SYN | FIN) != 0));
        f
    }
}
