//! Synthetic TCP conversations as Ethernet frames, for tests, benchmarks and fuzzing.
//!
//! Builds real frames with etherparse, so every test goes through the same
//! decoding path as live traffic.

use std::net::{IpAddr, SocketAddr};

use etherparse::{PacketBuilder, TcpOptionElement};

pub mod tls;

use crate::wire::LinkType;

/// One TCP connection between a client and a server, generating frames in either direction.
#[derive(Clone, Debug)]
pub struct TcpConv {
    /// The client's address and port.
    pub client: SocketAddr,
    /// The server's address and port.
    pub server: SocketAddr,
    /// Next sequence number each side sends.
    pub cseq: u32,
    /// The server's next sequence number.
    pub sseq: u32,
    client_isn: u32,
    server_isn: u32,
    /// Largest payload [`TcpConv::server_data`] puts in one segment (1448 to start).
    pub mss: usize,
}

/// The TCP header's FIN bit, as [`tcp_frame`] takes the flags.
pub const FIN: u8 = 0x01;
/// SYN.
pub const SYN: u8 = 0x02;
/// RST.
pub const RST: u8 = 0x04;
/// PSH.
pub const PSH: u8 = 0x08;
/// ACK (the acknowledgement number is then set).
pub const ACK: u8 = 0x10;

/// A TCP segment from `src` to `dst` as an Ethernet frame or a bare IP packet (`link`), built
/// with etherparse (checksums computed): sequence `seq`, the TCP header's `flags` ([`SYN`],
/// [`ACK`], ...; `ack` is the acknowledgement number when [`ACK`] is set), and `payload`. An
/// IPv4 address paired with an IPv6 one is sent IPv4-mapped. The one place the workspace's
/// tests, benches and fuzz targets build TCP frames.
pub fn tcp_frame(link: LinkType, src: SocketAddr, dst: SocketAddr, seq: u32, ack: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
    tcp_frame_with(link, src, dst, seq, ack, flags, &[], payload)
}

/// A bare ACK as [`tcp_frame`] builds it, with a SACK option of `blocks` (1 to 4 `(left,
/// right)` sequence numbers, the first a D-SACK when below `ack`) behind two NOPs.
pub fn tcp_sack(link: LinkType, src: SocketAddr, dst: SocketAddr, seq: u32, ack: u32, blocks: &[(u32, u32)]) -> Vec<u8> {
    let mut rest = [None; 3];
    for (r, b) in rest.iter_mut().zip(&blocks[1..]) {
        *r = Some(*b);
    }
    let sack = [TcpOptionElement::Noop, TcpOptionElement::Noop, TcpOptionElement::SelectiveAcknowledgement(blocks[0], rest)];
    tcp_frame_with(link, src, dst, seq, ack, ACK, &sack, &[])
}

#[allow(clippy::too_many_arguments)]
fn tcp_frame_with(
    link: LinkType,
    src: SocketAddr,
    dst: SocketAddr,
    seq: u32,
    ack: u32,
    flags: u8,
    options: &[TcpOptionElement],
    payload: &[u8],
) -> Vec<u8> {
    fn v6(a: IpAddr) -> std::net::Ipv6Addr {
        match a {
            IpAddr::V6(a) => a,
            IpAddr::V4(a) => a.to_ipv6_mapped(),
        }
    }
    let eth = link == LinkType::Ethernet;
    let (mac_src, mac_dst) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
    let ip = match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) if eth => PacketBuilder::ethernet2(mac_src, mac_dst).ipv4(s.octets(), d.octets(), 64),
        (IpAddr::V4(s), IpAddr::V4(d)) => PacketBuilder::ipv4(s.octets(), d.octets(), 64),
        (s, d) if eth => PacketBuilder::ethernet2(mac_src, mac_dst).ipv6(v6(s).octets(), v6(d).octets(), 64),
        (s, d) => PacketBuilder::ipv6(v6(s).octets(), v6(d).octets(), 64),
    };
    let mut tcp = ip.tcp(src.port(), dst.port(), seq, 65535);
    if flags & SYN != 0 {
        tcp = tcp.syn();
    }
    if flags & ACK != 0 {
        tcp = tcp.ack(ack);
    }
    if flags & FIN != 0 {
        tcp = tcp.fin();
    }
    if flags & RST != 0 {
        tcp = tcp.rst();
    }
    if flags & PSH != 0 {
        tcp = tcp.psh();
    }
    if !options.is_empty() {
        tcp = tcp.options(options).expect("at most 40 bytes of options");
    }
    let mut v = Vec::with_capacity(tcp.size(payload.len()));
    // Only a payload too long for IP fails (an empty or partial frame then); no caller's is.
    let _ = tcp.write(&mut v, payload);
    v
}

/// A UDP datagram from `src` to `dst` (IPv4) in an Ethernet frame, built with etherparse
/// (checksums computed): the one place tests build UDP frames (QUIC's).
pub fn udp_frame(src: std::net::SocketAddrV4, dst: std::net::SocketAddrV4, payload: &[u8]) -> Vec<u8> {
    let b =
        PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]).ipv4(src.ip().octets(), dst.ip().octets(), 64).udp(src.port(), dst.port());
    let mut v = Vec::with_capacity(b.size(payload.len()));
    // Only a payload too long for IP fails; no caller's is.
    let _ = b.write(&mut v, payload);
    v
}

/// An Ethernet frame of a conversation: `ack` set means the ACK flag with it; `flags` adds
/// `S`, `F`, `R`, `P`.
fn frame(src: SocketAddr, dst: SocketAddr, seq: u32, ack: Option<u32>, flags: &str, payload: &[u8]) -> Vec<u8> {
    let mut bits = if ack.is_some() { ACK } else { 0 };
    for (c, b) in [('S', SYN), ('F', FIN), ('R', RST), ('P', PSH)] {
        if flags.contains(c) {
            bits |= b;
        }
    }
    tcp_frame(LinkType::Ethernet, src, dst, seq, ack.unwrap_or(0), bits, payload)
}

impl TcpConv {
    /// `client` and `server` as "ip:port".
    pub fn new(client: &str, server: &str) -> TcpConv {
        let client: SocketAddr = client.parse().expect("client ip:port");
        let server: SocketAddr = server.parse().expect("server ip:port");
        let client_isn = 1_000 + client.port() as u32 * 7;
        let server_isn = 9_000_000 + client.port() as u32 * 13;
        TcpConv { client, server, cseq: client_isn, sseq: server_isn, client_isn, server_isn, mss: 1448 }
    }

    /// The same conversation with the client's initial sequence number `isn` (a new
    /// conversation's is made from its port).
    pub fn with_isn(mut self, isn: u32) -> TcpConv {
        self.client_isn = isn;
        self.cseq = isn;
        self
    }

    /// The client's SYN.
    pub fn syn(&self) -> Vec<u8> {
        frame(self.client, self.server, self.client_isn, None, "S", &[])
    }
    /// The server's SYN/ACK.
    pub fn synack(&self) -> Vec<u8> {
        frame(self.server, self.client, self.server_isn, Some(self.client_isn.wrapping_add(1)), "S", &[])
    }
    /// The client's ACK completing the handshake; afterwards both sides send data.
    pub fn ack(&mut self) -> Vec<u8> {
        self.cseq = self.client_isn.wrapping_add(1);
        self.sseq = self.server_isn.wrapping_add(1);
        frame(self.client, self.server, self.cseq, Some(self.sseq), "", &[])
    }
    /// Client data in one segment.
    pub fn client_data(&mut self, data: &[u8]) -> Vec<u8> {
        let f = frame(self.client, self.server, self.cseq, Some(self.sseq), "P", data);
        self.cseq = self.cseq.wrapping_add(data.len() as u32);
        f
    }
    /// Server data cut into MSS-sized segments.
    pub fn server_data(&mut self, data: &[u8]) -> Vec<Vec<u8>> {
        data.chunks(self.mss)
            .map(|c| {
                let f = frame(self.server, self.client, self.sseq, Some(self.cseq), "P", c);
                self.sseq = self.sseq.wrapping_add(c.len() as u32);
                f
            })
            .collect()
    }
    /// Server data in segments of exactly `size` bytes (to split tags anywhere).
    pub fn server_data_in(&mut self, data: &[u8], size: usize) -> Vec<Vec<u8>> {
        let mss = self.mss;
        self.mss = size.max(1);
        let v = self.server_data(data);
        self.mss = mss;
        v
    }
    /// A client ACK of everything the server sent.
    pub fn client_ack(&self) -> Vec<u8> {
        frame(self.client, self.server, self.cseq, Some(self.sseq), "", &[])
    }
    /// A client ACK of everything the server sent, with a D-SACK of `len` server bytes ending
    /// `back` bytes before the server's next: the client received them twice.
    pub fn client_dsack(&self, back: u32, len: u32) -> Vec<u8> {
        let end = self.sseq.wrapping_sub(back);
        tcp_sack(LinkType::Ethernet, self.client, self.server, self.cseq, self.sseq, &[(end.wrapping_sub(len), end)])
    }
    /// The client's FIN (it takes a sequence number).
    pub fn client_fin(&mut self) -> Vec<u8> {
        let f = frame(self.client, self.server, self.cseq, Some(self.sseq), "F", &[]);
        self.cseq = self.cseq.wrapping_add(1);
        f
    }
    /// The server's FIN (it takes a sequence number).
    pub fn server_fin(&mut self) -> Vec<u8> {
        let f = frame(self.server, self.client, self.sseq, Some(self.cseq), "F", &[]);
        self.sseq = self.sseq.wrapping_add(1);
        f
    }
    /// A server RST at its next sequence number.
    pub fn server_rst(&self) -> Vec<u8> {
        frame(self.server, self.client, self.sseq, Some(self.cseq), "R", &[])
    }
    /// A segment with `flags` ("R", "F", ...) and no payload, from the server (`from_server`)
    /// or the client, its sequence number `offset` from that side's next one: what a blind
    /// spoofer or a stale copy sends.
    pub fn forged(&self, from_server: bool, offset: i64, flags: &str) -> Vec<u8> {
        self.forged_ack(from_server, offset, 0, flags)
    }
    /// The same, its acknowledgement number `ack_offset` from the other side's next byte.
    pub fn forged_ack(&self, from_server: bool, offset: i64, ack_offset: i64, flags: &str) -> Vec<u8> {
        let (src, dst, next, ack) =
            if from_server { (self.server, self.client, self.sseq, self.cseq) } else { (self.client, self.server, self.cseq, self.sseq) };
        frame(src, dst, next.wrapping_add(offset as u32), Some(ack.wrapping_add(ack_offset as u32)), flags, &[])
    }
    /// RST answering a SYN (connection refused).
    pub fn refuse(&self) -> Vec<u8> {
        frame(self.server, self.client, 0, Some(self.client_isn.wrapping_add(1)), "R", &[])
    }
}

/// A small xorshift generator, so tests and benchmarks are reproducible without a dependency.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (0 is taken as 1: xorshift would stay at 0).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    /// The next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// A number below `n`, by modulo (slightly biased; `n` of 0 is taken as 1).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// A global allocator that counts the heap bytes live, for tests that bound memory. A test
/// binary installs it with `#[global_allocator] static ALLOC: CountingAlloc = CountingAlloc;`
/// and reads [`heap_bytes`]; the count is the whole process's, so such a test runs alone in
/// its binary (or its tests one at a time).
pub struct CountingAlloc;

static HEAP_LIVE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

static HEAP_PEAK: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Heap bytes live now, as [`CountingAlloc`] counts them (0 when it is not installed).
pub fn heap_bytes() -> usize {
    HEAP_LIVE.load(std::sync::atomic::Ordering::Relaxed)
}

/// The most heap bytes live at once since the last call (which starts the next span at what is
/// live now), as [`CountingAlloc`] counts them: what a step allocated for a moment.
pub fn heap_peak_since_last() -> usize {
    HEAP_PEAK.swap(heap_bytes(), std::sync::atomic::Ordering::Relaxed)
}

fn count_up(n: usize) {
    let live = HEAP_LIVE.fetch_add(n, std::sync::atomic::Ordering::Relaxed) + n;
    HEAP_PEAK.fetch_max(live, std::sync::atomic::Ordering::Relaxed);
}

// SAFETY: every call is passed on to the system allocator unchanged; only a counter is added.
unsafe impl std::alloc::GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, l: std::alloc::Layout) -> *mut u8 {
        count_up(l.size());
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { std::alloc::System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: std::alloc::Layout) {
        HEAP_LIVE.fetch_sub(l.size(), std::sync::atomic::Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { std::alloc::System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: std::alloc::Layout, new: usize) -> *mut u8 {
        count_up(new);
        HEAP_LIVE.fetch_sub(l.size(), std::sync::atomic::Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { std::alloc::System.realloc(p, l, new) }
    }
}

/// Runs `f` in a thread and panics if it has not returned within `limit`, so that a test of
/// something that must end fails instead of hanging the run.
pub fn ends_within(limit: std::time::Duration, f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    match rx.recv_timeout(limit) {
        Ok(()) => {}
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("did not end within {limit:?}"),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => panic!("failed (its panic is above)"),
    }
}
