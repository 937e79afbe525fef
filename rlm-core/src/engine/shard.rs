//! Engines side by side: a frame's shard, and the share of the limits each shard's engine gets.
//!
//! A pageview is one client's: its connections, its requests and the event nodes that join them
//! never reach another client's state. So engines that each see every frame of some clients and
//! none of the others' measure what one engine would: the frames are split by client, a client
//! being its IPv4 address or its IPv6 /64 ([`crate::policy::source_of`], the unit the class
//! windows' shares count), and the client end of a frame being the end that is not a server's
//! port ([`Config::server_ports`]). What spans clients is not split this way: the per-class
//! response-time windows the rules read and the SLA controller's measurements are shared
//! ([`ClassSample`]: each engine hands the others what its pageviews gave its windows, and
//! takes theirs, at the driver's tick), while the injection budget and the controller's
//! arrivals stay each engine's.

use std::net::IpAddr;

use crate::policy::source_of;
use crate::time::Timestamp;
use crate::wire::{self, Decoded, LinkType};

use super::{Config, Engine};

/// Samples of an engine's own pageviews kept for the others, at most, between two takes
/// ([`Engine::take_class_samples`]); past it they are counted (`class_samples_unshared`).
pub const MAX_SHARED_SAMPLES: usize = 1 << 16;

/// What a pageview gave the class windows, as engines side by side share it: each engine's
/// windows (and SLA controller) then see every engine's pageviews, while its class counters
/// count its own.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClassSample {
    /// When its engine took it (that engine's time).
    pub at: Timestamp,
    /// Its class's id, in the numbering of rule set `rule_set`.
    pub class: u16,
    /// Its response time, in seconds.
    pub rt_s: f64,
    /// Its client's source ([`source_of`]), for the windows' shares.
    pub source: u64,
    /// The rule sets its engine had put in force by then ([`Engine::set_rules`] calls): engines
    /// that are given the same rule sets number classes alike.
    pub rule_set: u64,
}

/// Keep `sample` for the other engines, or count it when `MAX_SHARED_SAMPLES` wait already.
pub(super) fn share(shared: &mut Vec<ClassSample>, sample: ClassSample, unshared: &mut u64) {
    if shared.len() < MAX_SHARED_SAMPLES {
        shared.push(sample);
    } else {
        *unshared += 1;
    }
}

impl Engine {
    /// This engine is one of several side by side, each given the same rule sets: keep what
    /// its pageviews give the class windows for [`Engine::take_class_samples`].
    pub fn share_class_samples(&mut self) {
        self.shared_samples.get_or_insert_with(Vec::new);
    }

    /// The samples this engine's pageviews gave its class windows since the last take, oldest
    /// first, for the other engines' [`Engine::add_class_samples`].
    pub fn take_class_samples(&mut self) -> Vec<ClassSample> {
        self.shared_samples.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// The samples other engines side by side took: into this engine's class windows and SLA
    /// controller (not its class counters), the statistics then read at this engine's time
    /// (never moved ahead by another engine's: a sample from ahead of it waits in the window).
    /// A sample whose classes are numbered in another rule set (one taken across a reload) is
    /// left out. Like a frame, this may change the generation of the SYN verdicts
    /// ([`crate::FastpathUpdate::Mode`]).
    pub fn add_class_samples(&mut self, samples: &[ClassSample]) {
        let Some(policy) = self.policy.as_mut() else { return };
        let now = self.last_now;
        for s in samples {
            if s.rule_set != self.rule_sets {
                self.stats.class_samples_stale += 1;
                continue;
            }
            let taken = policy.on_shared_pageview(now, s.at, rules::ClassId(s.class), s.rt_s, s.source);
            self.stats.class_samples_shared += 1;
            self.stats.window_evicted += taken.evicted;
        }
        self.note_fastpath();
    }
}

/// Connections whose client the dealer learnt from their SYN, at most (past it, forgotten all
/// at once: their next frames go by ports until their next SYN, as a mid-stream join does).
const MAX_LEARNT: usize = 1 << 20;

/// A connection's two ends, in one order whichever way the frame goes.
type ConnEnds = ((IpAddr, u16), (IpAddr, u16));

/// Which of `n` engines handles a frame.
#[derive(Clone, Debug)]
pub struct Sharding {
    shards: usize,
    server_ports: Vec<u16>,
    /// With no server ports configured: the client of each connection whose SYN was seen (the
    /// end that sent it, as the engine takes it).
    learnt: ahash::AHashMap<ConnEnds, IpAddr>,
}

impl Sharding {
    /// Frames split over `shards` engines (at least one) configured by `cfg`.
    pub fn new(cfg: &Config, shards: usize) -> Sharding {
        Sharding { shards: shards.max(1), server_ports: cfg.server_ports.clone(), learnt: ahash::AHashMap::new() }
    }

    /// How many shards.
    pub fn shards(&self) -> usize {
        self.shards
    }

    /// The shard of a frame: its client's. The client end is the one whose port is not a
    /// server's. With no server ports configured (HTTP on any port), or both or neither a
    /// server's, it is the end that sent the connection's SYN, as the engine takes it, when the
    /// SYN was dealt; else (a connection joined mid-stream) the end with the higher port
    /// (clients' ports are ephemeral, from 32768 on Linux, 49152 on Windows; servers listen
    /// low), and between equal ports the higher address, so that both directions of a
    /// connection meet. A frame that is not TCP or UDP over IP goes to shard 0 (where it is
    /// counted as ignored or malformed, as one engine would).
    pub fn shard_of(&mut self, link: LinkType, frame: &[u8]) -> usize {
        if self.shards == 1 {
            return 0;
        }
        let (src, dst, syn) = match wire::decode(link, frame) {
            Decoded::Tcp(s) => (s.src, s.dst, Some(s.flags.syn && !s.flags.ack)),
            Decoded::Udp(d) => (d.src, d.dst, None),
            _ => return 0,
        };
        let client = match (self.is_server(src.port), self.is_server(dst.port)) {
            (true, false) => dst.ip,
            (false, true) => src.ip,
            _ => {
                let (a, b) = ((src.ip, src.port), (dst.ip, dst.port));
                let ends = if a < b { (a, b) } else { (b, a) };
                let learnt = match syn {
                    Some(true) => {
                        if self.learnt.len() >= MAX_LEARNT {
                            self.learnt.clear();
                        }
                        self.learnt.insert(ends, src.ip);
                        Some(src.ip)
                    }
                    Some(false) => self.learnt.get(&ends).copied(),
                    None => None,
                };
                learnt.unwrap_or_else(|| std::cmp::max((src.port, src.ip), (dst.port, dst.ip)).1)
            }
        };
        self.shard_of_client(client)
    }

    /// The shard of a client's address.
    pub fn shard_of_client(&self, client: IpAddr) -> usize {
        // Fibonacci hashing: the high bits of the product mix every bit of the source.
        let h = source_of(client).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (((h >> 32) * self.shards as u64) >> 32) as usize
    }

    fn is_server(&self, port: u16) -> bool {
        self.server_ports.contains(&port)
    }
}

impl Config {
    /// The configuration of engine `index` of `shards` that share this one's work: the limits
    /// on what all connections and pageviews hold together (connections, held bytes,
    /// remembered client RTTs, the pageviews' lists, the rate of unproven records) and on what
    /// rlm sends (the injection's rate, burst and kept frames, the held SYNs released a second)
    /// divided among them, so that the shards together hold and send no more than one engine
    /// would, and the pageviews numbered apart (shard `i` of `n`: `1 + i`, `1 + i + n`, ...).
    pub fn for_shard(&self, index: usize, shards: usize) -> Config {
        let n = shards.max(1);
        let part = |v: usize| v.div_ceil(n).max(1);
        let mut c = self.clone();
        c.max_connections = part(c.max_connections);
        c.max_held_bytes = part(c.max_held_bytes);
        c.pageview.max_client_rtts = part(c.pageview.max_client_rtts);
        c.pageview.max_list_bytes = part(c.pageview.max_list_bytes);
        c.unproven_records_per_s = c.unproven_records_per_s.map(|r| r / n as f64);
        // What bounds the frames rlm sends over all clients: the rate and its burst, the
        // connections with a kept frame, the held SYNs released a second.
        c.inject_budget.max_per_s /= n as f64;
        c.inject_budget.burst /= n as f64;
        c.inject_budget.max_pending = part(c.inject_budget.max_pending);
        c.fast_release_per_s /= n as f64;
        c.pageview.first_id = self.pageview.first_id + index as u64 * self.pageview.id_step;
        c.pageview.id_step = self.pageview.id_step * n as u64;
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{tcp_frame, ACK, SYN};
    use std::net::{Ipv4Addr, SocketAddr};

    fn cfg() -> Config {
        Config { server_ports: vec![80], ..Config::default() }
    }

    fn frame(src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
        tcp_frame(LinkType::Ethernet, src, dst, 1, 0, SYN, b"")
    }

    #[test]
    fn both_directions_of_a_client_go_to_one_shard_and_clients_spread() {
        let mut s = Sharding::new(&cfg(), 4);
        let mut seen = [0usize; 4];
        let server: SocketAddr = "10.9.0.1:80".parse().unwrap();
        for i in 0..400u32 {
            let client = Ipv4Addr::from(0x0a00_0000 + i * 7);
            let port = 40000 + i as u16;
            let up = frame((client, port).into(), server);
            let down = tcp_frame(LinkType::Ethernet, server, (client, port).into(), 1, 2, SYN | ACK, b"");
            let k = s.shard_of(LinkType::Ethernet, &up);
            assert_eq!(k, s.shard_of(LinkType::Ethernet, &down));
            assert_eq!(k, s.shard_of_client(client.into()));
            // Another server, another port of the client: the same client, the same shard.
            let other = frame((client, 50000).into(), "10.9.0.2:80".parse().unwrap());
            assert_eq!(k, s.shard_of(LinkType::Ethernet, &other));
            // No server ports configured and no SYN seen (joined mid-stream): the higher port
            // is the client's.
            let mut any = Sharding::new(&Config::default(), 4);
            let data = |a: SocketAddr, b: SocketAddr| tcp_frame(LinkType::Ethernet, a, b, 1, 1, ACK, b"x");
            for server in [server, "10.200.0.1:8080".parse().unwrap(), "10.200.0.2:443".parse().unwrap()] {
                assert_eq!(any.shard_of(LinkType::Ethernet, &data((client, port).into(), server)), k);
                assert_eq!(any.shard_of(LinkType::Ethernet, &data(server, (client, port).into())), k);
            }
            // Equal ports: the higher address, both ways alike.
            let a: SocketAddr = (client, 7000).into();
            let b: SocketAddr = "10.200.0.1:7000".parse().unwrap();
            assert_eq!(any.shard_of(LinkType::Ethernet, &data(a, b)), any.shard_of(LinkType::Ethernet, &data(b, a)));
            seen[k] += 1;
        }
        // Spread: every shard has a fair part of 400 clients.
        assert!(seen.iter().all(|&n| (60..=140).contains(&n)), "{seen:?}");
        assert_eq!(Sharding::new(&cfg(), 1).shard_of(LinkType::Ethernet, &[0u8; 14]), 0);
        // No server ports: a connection whose SYN was dealt goes by the end that sent it,
        // whatever its ports (a server on 50000, a client on 3000, behind a NAT).
        let mut any = Sharding::new(&Config::default(), 4);
        let (client, server): (SocketAddr, SocketAddr) = ("10.1.2.3:3000".parse().unwrap(), "10.200.0.9:50000".parse().unwrap());
        let k = any.shard_of_client(client.ip());
        assert_ne!(k, any.shard_of_client(server.ip()), "pick addresses in two shards");
        assert_eq!(any.shard_of(LinkType::Ethernet, &frame(client, server)), k);
        let back = tcp_frame(LinkType::Ethernet, server, client, 1, 2, SYN | ACK, b"");
        assert_eq!(any.shard_of(LinkType::Ethernet, &back), k);
        let data = tcp_frame(LinkType::Ethernet, server, client, 2, 2, ACK, b"data");
        assert_eq!(any.shard_of(LinkType::Ethernet, &data), k);
        // Without its SYN, the higher port's end.
        let mut fresh = Sharding::new(&Config::default(), 4);
        assert_eq!(fresh.shard_of(LinkType::Ethernet, &data), any.shard_of_client(server.ip()));
        assert_eq!(s.shard_of(LinkType::Ethernet, &[0u8; 3]), 0);
    }

    #[test]
    fn the_shards_together_hold_what_one_engine_would() {
        let one = Config { max_connections: 1001, unproven_records_per_s: Some(100.0), ..cfg() };
        let part = one.for_shard(1, 2);
        assert_eq!(part.max_connections, 501);
        assert_eq!(part.max_held_bytes, one.max_held_bytes.div_ceil(2));
        assert_eq!(part.pageview.max_client_rtts, one.pageview.max_client_rtts.div_ceil(2));
        assert_eq!(part.pageview.max_list_bytes, one.pageview.max_list_bytes.div_ceil(2));
        assert_eq!(part.unproven_records_per_s, Some(50.0));
        assert_eq!((part.pageview.first_id, part.pageview.id_step), (2, 2));
        let b = &one.inject_budget;
        assert_eq!(
            (part.inject_budget.max_per_s, part.inject_budget.burst, part.inject_budget.max_pending, part.fast_release_per_s),
            (b.max_per_s / 2.0, b.burst / 2.0, b.max_pending.div_ceil(2), one.fast_release_per_s / 2.0)
        );
        assert_eq!(part.inject_budget.per_handshake, b.per_handshake, "each handshake is one engine's");
        assert_eq!((one.for_shard(0, 2).pageview.first_id, one.for_shard(0, 2).pageview.id_step), (1, 2));
        let alone = one.for_shard(0, 1);
        assert_eq!((alone.max_connections, alone.pageview.first_id, alone.pageview.id_step), (1001, 1, 1));
    }
}

#[cfg(test)]
mod sharing_tests {
    use super::*;
    use crate::testkit::TcpConv;
    use crate::{Port, Verdict};
    use rules::Stat;

    const RULES: &str = "CLASS HIGH IF IP.SRC == 10.4.*.*\nCLASS LOW IF IP.SRC != 10.4.*.*\nIF IP.SRC != 10.4.*.* AND RT.HIGH > 3.0s THEN DROP SYN\n";

    fn engine(cfg: &Config) -> Engine {
        let mut e = Engine::new(cfg.clone());
        e.enable_fastpath();
        e.set_rules(Some(rules::compile("test.rlm", RULES).unwrap_or_else(|d| panic!("{d}"))));
        e
    }

    /// One HIGH client's pageview that takes `rt_ms` from its SYN (a slow handshake).
    fn slow_page(client: &str, rt_ms: u64, t0: u64) -> Vec<(u64, Vec<u8>)> {
        let mut c = TcpConv::new(&format!("{client}:40001"), "10.9.0.1:80");
        let mut out = vec![(t0, c.syn()), (t0 + rt_ms - 200, c.synack()), (t0 + rt_ms - 190, c.ack())];
        out.push((t0 + rt_ms - 180, c.client_data(b"GET / HTTP/1.1\r\nHost: shop\r\n\r\n")));
        for f in c.server_data(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello") {
            out.push((t0 + rt_ms, f));
        }
        out
    }

    fn ts(ms: u64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    /// Two engines side by side, each given its clients' frames and the other's class samples
    /// every 100 ms, hold the class windows one engine would: the same HIGH mean and count,
    /// their class counters adding up to its. All HIGH clients are engine 0's, and a LOW
    /// client of engine 1 is dropped by engine 1 from what engine 0 measured.
    #[test]
    fn engines_that_share_class_samples_read_the_windows_one_engine_would() {
        let cfg = Config { server_ports: vec![80], ..Config::default() };
        let mut sharding = Sharding::new(&cfg, 2);
        let mut solo = engine(&cfg);
        let mut shards: Vec<Engine> = (0..2).map(|i| engine(&cfg.for_shard(i, 2))).collect();
        for e in &mut shards {
            e.share_class_samples();
        }
        let high: Vec<String> = (0..200u32)
            .map(|i| format!("10.4.{}.{}", i / 200, i % 200 + 1))
            .filter(|c| sharding.shard_of_client(c.parse().unwrap()) == 0)
            .take(12)
            .collect();
        assert_eq!(high.len(), 12);
        let mut frames: Vec<(u64, Vec<u8>)> = Vec::new();
        for (i, c) in high.iter().enumerate() {
            frames.extend(slow_page(c, 4_000 + 100 * i as u64, 1_000 + 50 * i as u64));
        }
        frames.sort_by_key(|(t, _)| *t);
        let exchange = |shards: &mut Vec<Engine>| {
            let (a, b) = (shards[0].take_class_samples(), shards[1].take_class_samples());
            shards[1].add_class_samples(&a);
            shards[0].add_class_samples(&b);
        };
        let mut next_tick = 100;
        for (t, f) in frames {
            while next_tick <= t {
                exchange(&mut shards);
                next_tick += 100;
            }
            solo.handle(ts(t), Port::Unknown, &f);
            let shard = sharding.shard_of(crate::wire::LinkType::Ethernet, &f);
            shards[shard].handle(ts(t), Port::Unknown, &f);
        }
        let end = 60_000;
        solo.shutdown(ts(end));
        for e in &mut shards {
            e.shutdown(ts(end));
        }
        exchange(&mut shards);
        let class = |e: &Engine| e.policy().unwrap().rules().class_id("HIGH").unwrap();
        let read = |e: &Engine| {
            let p = e.policy().unwrap();
            (p.class_samples(class(e)), p.class_rt(class(e), Stat::Mean))
        };
        let (n, mean) = read(&solo);
        assert_eq!(n, 12, "every HIGH pageview in the one engine's window");
        assert!(mean.unwrap() > 3.0);
        for (i, e) in shards.iter().enumerate() {
            let (m, got) = read(e);
            assert_eq!(m, n, "engine {i}'s HIGH window holds every engine's pageviews");
            assert!((got.unwrap() - mean.unwrap()).abs() < 1e-9, "engine {i}: {got:?} against {mean:?}");
        }
        let counted: u64 = shards.iter().map(|e| e.policy().unwrap().class_counters[class(e).index()].pageviews).sum();
        assert_eq!(counted, solo.policy().unwrap().class_counters[class(&solo).index()].pageviews, "each engine counts its own");
        assert_eq!((shards[0].stats().class_samples_shared, shards[1].stats().class_samples_shared), (0, 12));
        // A LOW client of engine 1, which saw no HIGH pageview itself: dropped by RT.HIGH.
        let low = (1..250u8).map(|i| format!("10.5.0.{i}")).find(|c| sharding.shard_of_client(c.parse().unwrap()) == 1).unwrap();
        let syn = TcpConv::new(&format!("{low}:40100"), "10.9.0.1:80").syn();
        assert_eq!(shards[1].handle(ts(end + 10), Port::Unknown, &syn), Verdict::Drop);
        assert_eq!(solo.handle(ts(end + 10), Port::Unknown, &syn), Verdict::Drop);
    }

    /// A sample whose classes are numbered in another rule set than the engine's (taken across
    /// a reload) is left out and counted.
    #[test]
    fn a_sample_of_another_rule_set_is_left_out() {
        let cfg = Config::default();
        let mut e = engine(&cfg);
        let s = ClassSample { at: ts(1_000), class: 0, rt_s: 9.0, source: 1, rule_set: 1 };
        e.add_class_samples(&[s, ClassSample { rule_set: 2, ..s }]);
        let high = e.policy().unwrap().rules().class_id("HIGH").unwrap();
        assert_eq!(e.policy().unwrap().class_samples(high), 1);
        assert_eq!((e.stats().class_samples_shared, e.stats().class_samples_stale), (1, 1));
    }
}
