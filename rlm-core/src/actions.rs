//! Actions that send frames: fast SYN and SYN/ACK retransmission and the delayed first SYN
//! (004 section 4, Figures 6, 7 and 17).
//!
//! The engine decides when a frame goes ([`crate::engine::Engine::poll_transmit`]); this module
//! keeps the frames to send, learns the link addresses to send them with, and holds the budgets
//! that keep a flood from being amplified.
//!
//! Frames go out as whole Ethernet frames: a frame kept from a source without a link header
//! (NFQUEUE) gets one, from the MAC addresses seen on the handshakes of the same hosts (or, for
//! a host not seen yet, the last address seen on that side of the bridge: a router's); and the
//! IPv4 header and TCP checksums are computed afresh (a frame read before the NIC's checksum
//! offload may carry a partial sum).

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::Duration;

use ahash::AHashMap;

use etherparse::{NetSlice, SlicedPacket, TransportSlice};

use crate::bounded::GenMap;
use crate::flow::ConnId;
use crate::policy::TokenBucket;
use crate::time::Timestamp;
use crate::wire::{Endpoint, LinkType, Segment};

/// A frame kept to be sent again: a client's SYN toward the server (`FAST SYN`, `DELAY FIRST
/// SYN`) or a server's SYN/ACK toward the client (`FAST SYN/ACK`).
#[derive(Debug)]
pub struct Kept {
    /// The gap between retransmissions (`None`: a delayed first SYN without a `FAST SYN` rule,
    /// sent once after its delay).
    pub gap: Option<Duration>,
    /// The link type of `frame`: which header it starts with (a raw IP frame gets an Ethernet
    /// header when sent).
    pub link: LinkType,
    /// The frame as it came, link header included.
    pub frame: Box<[u8]>,
    /// Copies sent so far.
    pub sent: u32,
    /// A first SYN held back by `DELAY FIRST SYN`, not sent yet.
    pub delayed: bool,
    /// Held back by `HALT FAST SYN` or a `DROP SYN` at its last turn: its release is paced.
    pub held: bool,
    /// When the client's own retransmission of a held SYN was let through (the rule had let go
    /// before the paced release reached it): rlm's next copy goes a gap after it.
    pub client_sent: Option<Timestamp>,
    /// The class whose budget pays for it (index).
    pub class: usize,
}

/// How much rlm may inject: per class, a token bucket that each completed handshake of the class
/// fills by `per_handshake` (so that a flood from spoofed sources, which completes none, earns
/// nothing), up to `burst`; and a global cap per second over all classes.
#[derive(Clone, Debug, PartialEq)]
pub struct InjectBudget {
    /// Tokens a class earns with each completed handshake.
    pub per_handshake: f64,
    /// Most tokens a class holds (it starts full).
    pub burst: f64,
    /// Most frames injected per second over all classes (burst: a tenth of a second's worth).
    pub max_per_s: f64,
    /// Most connections with a kept frame at once (fast SYN and fast SYN/ACK each): memory stays
    /// bounded whatever arrives.
    pub max_pending: usize,
}

impl Default for InjectBudget {
    fn default() -> Self {
        // 004's 10 ms gap over an 80 ms RTT sends about 8 SYN/ACKs per handshake before the ACK
        // can come back; 10 per handshake lets it, while a spoofed flood gets only the burst.
        InjectBudget { per_handshake: 10.0, burst: 1000.0, max_per_s: 5000.0, max_pending: 65_536 }
    }
}

/// The budgets' state.
#[derive(Debug)]
pub struct Budgets {
    cfg: InjectBudget,
    /// By class index (grown on demand; a new class starts full): filled by handshakes only.
    classes: Vec<TokenBucket>,
    global: TokenBucket,
}

impl Budgets {
    /// Budgets from `cfg`: every class bucket starts full at `burst`, and the global bucket holds a
    /// tenth of a second's worth of `max_per_s`.
    pub fn new(cfg: InjectBudget) -> Budgets {
        let global = TokenBucket::full(Budgets::global_cap(&cfg), Timestamp::ZERO);
        Budgets { cfg, classes: Vec::new(), global }
    }

    /// The global bucket holds a tenth of a second's worth.
    fn global_cap(cfg: &InjectBudget) -> f64 {
        (cfg.max_per_s / 10.0).max(1.0)
    }

    /// The configuration the budgets were made with.
    pub fn config(&self) -> &InjectBudget {
        &self.cfg
    }

    fn class(&mut self, class: usize) -> &mut TokenBucket {
        if self.classes.len() <= class {
            self.classes.resize(class + 1, TokenBucket::full(self.cfg.burst, Timestamp::ZERO));
        }
        &mut self.classes[class]
    }

    /// A handshake of `class` completed.
    pub fn earn(&mut self, class: usize) {
        let (add, cap) = (self.cfg.per_handshake, self.cfg.burst);
        self.class(class).add(add, cap);
    }

    /// Take a token for one frame of `class` at `now`; false if the class or the global budget
    /// is spent.
    pub fn take(&mut self, now: Timestamp, class: usize) -> bool {
        self.global.refill(now, self.cfg.max_per_s, Budgets::global_cap(&self.cfg));
        if !(self.global.has_token() && self.class(class).has_token()) {
            return false;
        }
        self.global.take() && self.class(class).take()
    }
}

type Mac = [u8; 6];

/// Paces the release of held SYNs, per class: when `HALT FAST SYN` (or the `DROP SYN` beside it)
/// lets go, every SYN it held would reach the farm within one gap, a burst that can push the
/// protected class back over its goal at once. A token bucket per class lets them go at
/// `rate` per second (burst: a quarter second's worth), oldest first: a SYN held longest is
/// nearest to its client giving up.
#[derive(Debug)]
pub struct Release {
    rate: f64,
    classes: Vec<TokenBucket>,
    /// SYNs the rule lets go that wait for a token: (class, first SYN seen, connection).
    waiting: BTreeSet<(usize, Timestamp, ConnId)>,
    /// The key in `waiting` of each waiting connection.
    keys: AHashMap<ConnId, (usize, Timestamp)>,
}

/// The least connection handle (a range's start).
const FIRST_CONN: ConnId = ConnId { slot: 0, gen: 0 };

impl Release {
    /// A pacer that lets `rate` held SYNs go per second and class (burst: a quarter second's worth,
    /// at least one).
    pub fn new(rate: f64) -> Release {
        Release { rate, classes: Vec::new(), waiting: BTreeSet::new(), keys: AHashMap::new() }
    }

    /// The held SYN `id` of `class`, first seen `since`, may go: true if it gets a token now,
    /// that is, fewer SYNs of its class have waited longer than there are tokens. Otherwise it
    /// waits in line (ask again shortly). Entries older than `max_age` (their client has given
    /// up) are forgotten.
    pub fn try_release(&mut self, now: Timestamp, class: usize, since: Timestamp, id: ConnId, max_age: Duration) -> bool {
        let cap = (self.rate / 4.0).max(1.0);
        if self.classes.len() <= class {
            self.classes.resize(class + 1, TokenBucket::full(cap, now));
        }
        self.classes[class].refill(now, self.rate, cap);
        let expired: Vec<ConnId> = self.line(class).take_while(|(since, _)| now.saturating_since(*since) > max_age).map(|e| e.1).collect();
        for old in expired {
            self.forget(old);
        }
        if self.keys.insert(id, (class, since)).is_none() {
            self.waiting.insert((class, since, id));
        }
        let tokens = self.classes[class].tokens() as usize;
        let ahead = self.line(class).take(tokens).any(|e| e.1 == id);
        if ahead && self.classes[class].take() {
            self.forget(id);
            return true;
        }
        false
    }

    /// The SYNs of `class` waiting, oldest first: (first SYN seen, connection).
    fn line(&self, class: usize) -> impl Iterator<Item = (Timestamp, ConnId)> + '_ {
        self.waiting.range((class, Timestamp(0), FIRST_CONN)..).take_while(move |e| e.0 == class).map(|e| (e.1, e.2))
    }

    /// `id` no longer waits (sent, held again, or gone).
    pub fn forget(&mut self, id: ConnId) {
        if let Some((class, since)) = self.keys.remove(&id) {
            self.waiting.remove(&(class, since, id));
        }
    }

    /// Keep only the waiting connections `keep` says to.
    pub fn retain(&mut self, mut keep: impl FnMut(&ConnId) -> bool) {
        self.keys.retain(|id, _| keep(id));
        let keys = &self.keys;
        self.waiting.retain(|(_, _, id)| keys.contains_key(id));
    }

    /// SYNs waiting for a token (all classes).
    pub fn waiting(&self) -> usize {
        self.keys.len()
    }
}

/// The link (MAC) addresses to send frames with, learned from the handshakes' Ethernet frames.
#[derive(Debug, Default)]
pub struct LinkAddrs {
    by_ip: GenMap<IpAddr, Mac, MAX_HOSTS>,
    /// The last address seen for a host on the clients' side and on the servers' side.
    client_side: Option<Mac>,
    server_side: Option<Mac>,
}

/// Most hosts remembered: past half of it, a new host makes those seen least recently (the older
/// half) go; the `MAX_HOSTS / 2` seen last always stay.
const MAX_HOSTS: usize = 65_536;

impl LinkAddrs {
    /// Learn from a SYN (client → server) or SYN/ACK (server → client) frame.
    pub fn learn(&mut self, link: LinkType, frame: &[u8], seg: &Segment<'_>) {
        if link != LinkType::Ethernet || frame.len() < 14 || !seg.flags.syn {
            return;
        }
        let (dst, src): (Mac, Mac) = (frame[0..6].try_into().expect("6 bytes"), frame[6..12].try_into().expect("6 bytes"));
        let (client_mac, server_mac, client, server) =
            if seg.flags.ack { (dst, src, seg.dst.ip, seg.src.ip) } else { (src, dst, seg.src.ip, seg.dst.ip) };
        self.by_ip.insert(client, client_mac);
        self.by_ip.insert(server, server_mac);
        self.client_side = Some(client_mac);
        self.server_side = Some(server_mac);
    }

    fn mac(&self, ip: IpAddr, side: Option<Mac>) -> Option<Mac> {
        self.by_ip.get(&ip).copied().or(side)
    }

    /// The link addresses of a client and a server, if both are known.
    fn macs(&self, client: IpAddr, server: IpAddr) -> Option<(Mac, Mac)> {
        Some((self.mac(client, self.client_side)?, self.mac(server, self.server_side)?))
    }

    /// `kept` as a whole Ethernet frame with fresh checksums, going from the client `client` to
    /// the server `server` (`to_server`) or back. None if the frame does not parse or no address
    /// is known for the side it goes to.
    pub fn frame(&self, kept: &Kept, client: IpAddr, server: IpAddr, to_server: bool) -> Option<Box<[u8]>> {
        let mut f = match kept.link {
            LinkType::Ethernet => kept.frame.to_vec(),
            LinkType::RawIp => {
                let (cm, sm) = (self.mac(client, self.client_side), self.mac(server, self.server_side));
                let (dst, src) = if to_server { (sm?, cm.unwrap_or(sm?)) } else { (cm?, sm.unwrap_or(cm?)) };
                let ethertype: u16 = match kept.frame.first()? >> 4 {
                    4 => 0x0800,
                    6 => 0x86dd,
                    _ => return None,
                };
                let mut f = Vec::with_capacity(14 + kept.frame.len());
                f.extend_from_slice(&dst);
                f.extend_from_slice(&src);
                f.extend_from_slice(&ethertype.to_be_bytes());
                f.extend_from_slice(&kept.frame);
                f
            }
            LinkType::LinuxSll | LinkType::Null => return None,
        };
        fix_checksums(&mut f).then(|| f.into_boxed_slice())
    }
}

/// Compute the IPv4 header checksum and the TCP checksum of an Ethernet frame afresh, in place.
/// False if the frame is not TCP over IP.
pub fn fix_checksums(frame: &mut [u8]) -> bool {
    let base = frame.as_ptr() as usize;
    let (ip_sum, tcp_sum) = {
        let Ok(p) = SlicedPacket::from_ethernet(frame) else { return false };
        let Some(TransportSlice::Tcp(tcp)) = &p.transport else { return false };
        let tcp_off = tcp.slice().as_ptr() as usize - base;
        match &p.net {
            Some(NetSlice::Ipv4(v4)) => {
                let h = v4.header();
                let ip_off = h.slice().as_ptr() as usize - base;
                let Ok(sum) = tcp.calc_checksum_ipv4(h.source(), h.destination()) else { return false };
                (Some((ip_off + 10, h.to_header().calc_header_checksum())), (tcp_off + 16, sum))
            }
            Some(NetSlice::Ipv6(v6)) => {
                let h = v6.header();
                let Ok(sum) = tcp.calc_checksum_ipv6(h.source(), h.destination()) else { return false };
                (None, (tcp_off + 16, sum))
            }
            _ => return false,
        }
    };
    if let Some((at, sum)) = ip_sum {
        frame[at..at + 2].copy_from_slice(&sum.to_be_bytes());
    }
    frame[tcp_sum.0..tcp_sum.0 + 2].copy_from_slice(&tcp_sum.1.to_be_bytes());
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{decode, Decoded};

    fn syn_frame() -> Vec<u8> {
        let b = etherparse::PacketBuilder::ethernet2([1; 6], [2; 6])
            .ipv4([10, 5, 0, 7], [10, 9, 0, 1], 64)
            .tcp(40001, 80, 1000, 64240)
            .syn()
            .options(&[etherparse::TcpOptionElement::MaximumSegmentSize(1460), etherparse::TcpOptionElement::SelectiveAcknowledgementPermitted])
            .unwrap();
        let mut v = Vec::new();
        b.write(&mut v, &[]).unwrap();
        v
    }

    #[test]
    fn checksums_are_computed_afresh() {
        let good = syn_frame();
        let mut bad = good.clone();
        // A partial sum (checksum offload) and a zeroed IP header checksum.
        bad[14 + 10] = 0;
        bad[14 + 11] = 0;
        bad[14 + 20 + 16] ^= 0x5a;
        assert!(fix_checksums(&mut bad));
        assert_eq!(bad, good);
        assert!(!fix_checksums(&mut [0u8; 20]));
    }

    #[test]
    fn a_raw_ip_frame_gets_the_learned_addresses() {
        let eth = syn_frame();
        let Decoded::Tcp(seg) = decode(LinkType::Ethernet, &eth) else { panic!() };
        let mut links = LinkAddrs::default();
        let kept =
            Kept { gap: None, link: LinkType::RawIp, frame: eth[14..].into(), sent: 0, delayed: false, held: false, client_sent: None, class: 0 };
        let (client, server) = (seg.src.ip, seg.dst.ip);
        assert!(links.frame(&kept, client, server, true).is_none(), "no address known yet");
        links.learn(LinkType::Ethernet, &eth, &seg);
        assert_eq!(&links.frame(&kept, client, server, true).unwrap()[..], &eth[..]);
        // A client not seen yet goes with the last client-side address (a router's).
        let other: IpAddr = "10.5.9.9".parse().unwrap();
        let f = links.frame(&kept, other, server, true).unwrap();
        assert_eq!((&f[0..6], &f[6..12]), (&[2u8; 6][..], &[1u8; 6][..]));
    }

    #[test]
    fn made_up_hosts_leave_the_newest_half_of_link_addresses() {
        let mut links = LinkAddrs::default();
        let mut eth = syn_frame();
        // Client `i`: its address and MAC hold `i` (the SYN's source, bytes 6..12 and 26..30).
        let mut learn = |links: &mut LinkAddrs, i: u32| -> IpAddr {
            eth[8..12].copy_from_slice(&i.to_be_bytes());
            eth[14 + 12..14 + 16].copy_from_slice(&i.to_be_bytes());
            let Decoded::Tcp(seg) = decode(LinkType::Ethernet, &eth) else { panic!() };
            links.learn(LinkType::Ethernet, &eth, &seg);
            seg.src.ip
        };
        let mac = |i: u32| -> Mac {
            let mut m = [1u8; 6];
            m[2..].copy_from_slice(&i.to_be_bytes());
            m
        };
        let real: Vec<IpAddr> = (1..=100).map(|i| learn(&mut links, i)).collect();
        assert!(real.iter().zip(1..).all(|(&ip, i)| links.by_ip.get(&ip) == Some(&mac(i))));
        let mut made_up = Vec::new();
        for i in 0..MAX_HOSTS as u32 {
            made_up.push(learn(&mut links, 0x0b00_0000 + i));
            // The hosts seen: the clients and the one server.
            let seen = real.len() + made_up.len() + 1;
            assert!(links.by_ip.len() >= seen.min(MAX_HOSTS / 2) && links.by_ip.len() <= MAX_HOSTS, "{seen} hosts, {} kept", links.by_ip.len());
        }
        // The newest half: the server (seen on every SYN) and the clients seen last.
        assert_eq!(links.by_ip.get(&"10.9.0.1".parse().unwrap()), Some(&[2u8; 6]));
        for (&ip, i) in made_up.iter().zip(0x0b00_0000..).skip(MAX_HOSTS / 2 + 1) {
            assert_eq!(links.by_ip.get(&ip), Some(&mac(i)), "{ip} is kept");
        }
    }

    #[test]
    fn budgets_are_earned_by_handshakes_and_capped_per_second() {
        let cfg = InjectBudget { per_handshake: 2.0, burst: 3.0, max_per_s: 1000.0, max_pending: 10 };
        let mut b = Budgets::new(cfg);
        let t = Timestamp::from_millis(1_000);
        assert_eq!((0..5).filter(|_| b.take(t, 1)).count(), 3, "the burst");
        b.earn(1);
        assert_eq!((0..5).filter(|_| b.take(t, 1)).count(), 2, "two per handshake");
        // Another class has its own bucket, but the global cap (100 at once) binds it.
        let mut g = Budgets::new(InjectBudget { per_handshake: 0.0, burst: 1e9, max_per_s: 1000.0, max_pending: 10 });
        assert_eq!((0..500).filter(|_| g.take(t, 0)).count(), 100);
        assert_eq!((0..500).filter(|_| g.take(Timestamp::from_millis(1_050), 0)).count(), 50);
    }

    #[test]
    fn held_syns_are_released_oldest_first_at_the_rate() {
        let mut r = Release::new(4.0); // burst 1
        let conn = |slot| ConnId { slot, gen: 1 };
        let max_age = Duration::from_secs(21);
        let t = |ms| Timestamp::from_millis(ms);
        // Alone in line, the first to ask takes the burst's token; two more wait, the younger
        // asking first.
        assert!(r.try_release(t(1_000), 0, t(100), conn(1), max_age));
        assert!(!r.try_release(t(1_000), 0, t(300), conn(3), max_age), "no token left");
        assert!(!r.try_release(t(1_000), 0, t(200), conn(2), max_age));
        // A quarter second later one token: it goes to the older, whoever asks first.
        assert!(!r.try_release(t(1_250), 0, t(300), conn(3), max_age), "not the youngest's turn");
        assert!(r.try_release(t(1_250), 0, t(200), conn(2), max_age));
        // Another class has its own line and bucket.
        assert!(r.try_release(t(1_250), 1, t(900), conn(9), max_age));
        // One that is held again steps out of line, and the next in line gets the token.
        r.try_release(t(1_300), 0, t(250), conn(4), max_age);
        r.forget(conn(4));
        assert!(r.try_release(t(1_500), 0, t(300), conn(3), max_age));
        assert_eq!(r.waiting(), 0);
        // A line's head whose client gave up long ago does not block it.
        r.try_release(t(1_500), 0, t(400), conn(5), max_age);
        assert!(r.try_release(t(30_000), 0, t(20_000), conn(6), max_age), "the stale head is forgotten");
        assert_eq!(r.waiting(), 0);
    }
}

/// The frames that answer a rejected request (`REJECT`, issue 26), from the request's segment
/// `seg` (client to server): an RST to the server at the segment's first sequence number, so that
/// it drops what of the request it has; and to the client, in the server's sequence space (at the
/// client's acknowledgement number, acknowledging the segment), a small HTTP/1.1 answer with
/// `status`, `Retry-After` when given, `Connection: close`, and a FIN. `None` when the link
/// addresses of either end are not known (no handshake of theirs was seen). Also the answer's
/// length (what the server's sequence space moves by, before its FIN).
pub fn reject_frames(links: &LinkAddrs, seg: &Segment<'_>, status: u16, retry_after: Option<Duration>) -> Option<(Box<[u8]>, Box<[u8]>, u32)> {
    let (client, server) = (seg.src, seg.dst);
    let macs = links.macs(client.ip, server.ip)?;
    let reason = match status {
        429 => "Too Many Requests",
        503 => "Service Unavailable",
        403 => "Forbidden",
        _ => "Rejected",
    };
    let body = format!("<html><body><h1>{status} {reason}</h1><p>The site is busy; please try again shortly.</p></body></html>\n");
    let retry = retry_after.map(|d| format!("Retry-After: {}\r\n", d.as_secs() + u64::from(d.subsec_nanos() > 0))).unwrap_or_default();
    let answer = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/html\r\nContent-Length: {}\r\n{retry}Connection: close\r\nCache-Control: no-store\r\n\r\n{body}",
        body.len()
    );
    let end = seg.seq.wrapping_add(seg.payload_len);
    let (to_server, to_client) = reset_and_close(macs, (client, server), (seg.seq, seg.ack, end), answer.as_bytes())?;
    Some((to_server, to_client, answer.len() as u32))
}

/// `ABORT IDLE`'s frames for the idle connection of `client` and `server` whose streams' next
/// sequence numbers are `to_server` (the client's) and `to_client` (the server's): a RST to the
/// server as from the client, and a FIN to the client as from the server (a server closing an
/// idle keep-alive connection).
pub fn abort_frames(links: &LinkAddrs, (client, server): (Endpoint, Endpoint), to_server: u32, to_client: u32) -> Option<(Box<[u8]>, Box<[u8]>)> {
    reset_and_close(links.macs(client.ip, server.ip)?, (client, server), (to_server, to_client, to_server), &[])
}

/// The appliance ends a connection for both ends (REJECT, ABORT IDLE): an RST to the server as
/// from the client, at `rst_seq` acknowledging `server_seq`; and to the client, as from the
/// server at `server_seq`, `answer` (pushed, when there is one) and a FIN, acknowledging
/// `client_ack`. `macs`: the client's and the server's link addresses.
fn reset_and_close(
    (cm, sm): (Mac, Mac),
    (client, server): (Endpoint, Endpoint),
    (rst_seq, server_seq, client_ack): (u32, u32, u32),
    answer: &[u8],
) -> Option<(Box<[u8]>, Box<[u8]>)> {
    let rst = ip_builder(cm, sm, client.ip, server.ip)?.tcp(client.port, server.port, rst_seq, 0).rst().ack(server_seq);
    let mut to_server = Vec::with_capacity(rst.size(0));
    rst.write(&mut to_server, &[]).ok()?;
    let fin = ip_builder(sm, cm, server.ip, client.ip)?.tcp(server.port, client.port, server_seq, 65_535).ack(client_ack);
    let fin = if answer.is_empty() { fin.fin() } else { fin.psh().fin() };
    let mut to_client = Vec::with_capacity(fin.size(answer.len()));
    fin.write(&mut to_client, answer).ok()?;
    Some((to_server.into_boxed_slice(), to_client.into_boxed_slice()))
}

/// An Ethernet frame's builder from `src_mac` to `dst_mac`, IPv4 or IPv6 from `from` to `to`
/// (`None` for a mixed pair).
fn ip_builder(src_mac: Mac, dst_mac: Mac, from: IpAddr, to: IpAddr) -> Option<etherparse::PacketBuilderStep<etherparse::IpHeaders>> {
    match (from, to) {
        (IpAddr::V4(s), IpAddr::V4(d)) => Some(etherparse::PacketBuilder::ethernet2(src_mac, dst_mac).ipv4(s.octets(), d.octets(), 64)),
        (IpAddr::V6(s), IpAddr::V6(d)) => Some(etherparse::PacketBuilder::ethernet2(src_mac, dst_mac).ipv6(s.octets(), d.octets(), 64)),
        _ => None,
    }
}

/// The appliance's ACK of a client's FIN (`seg`) on a connection whose request it rejected: from
/// the server's address at `next` (past the answer and its FIN), acknowledging the FIN.
pub fn ack_fin(links: &LinkAddrs, seg: &Segment<'_>, next: u32) -> Option<Box<[u8]>> {
    let (client, server) = (seg.src, seg.dst);
    let (cm, sm) = links.macs(client.ip, server.ip)?;
    let end = seg.seq.wrapping_add(seg.payload_len).wrapping_add(1);
    let b = ip_builder(sm, cm, server.ip, client.ip)?.tcp(server.port, client.port, next, 65_535).ack(end);
    let mut f = Vec::with_capacity(b.size(0));
    b.write(&mut f, &[]).ok()?;
    Some(f.into_boxed_slice())
}
