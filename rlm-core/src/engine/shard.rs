//! Engines side by side: a frame's shard, and the share of the limits each shard's engine gets.
//!
//! A pageview is one client's: its connections, its requests and the event nodes that join them
//! never reach another client's state. So engines that each see every frame of some clients and
//! none of the others' measure what one engine would: the frames are split by client, a client
//! being its IPv4 address or its IPv6 /64 ([`crate::policy::source_of`], the unit the class
//! windows' shares count), and the client end of a frame being the end that is not a server's
//! port ([`Config::server_ports`]). What spans clients (the per-class response-time windows
//! the rules read, the SLA controller, the injection budget) is not split this way: a driver
//! shards only an engine without rules, or merges those itself.

use std::net::IpAddr;

use crate::policy::source_of;
use crate::wire::{self, Decoded, LinkType};

use super::Config;

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
    /// remembered client RTTs, the pageviews' lists, the rate of unproven records) divided
    /// among them, so that the shards together hold no more than one engine would, and the
    /// pageviews numbered apart (shard `i` of `n`: `1 + i`, `1 + i + n`, ...).
    pub fn for_shard(&self, index: usize, shards: usize) -> Config {
        let n = shards.max(1);
        let part = |v: usize| v.div_ceil(n).max(1);
        let mut c = self.clone();
        c.max_connections = part(c.max_connections);
        c.max_held_bytes = part(c.max_held_bytes);
        c.pageview.max_client_rtts = part(c.pageview.max_client_rtts);
        c.pageview.max_list_bytes = part(c.pageview.max_list_bytes);
        c.unproven_records_per_s = c.unproven_records_per_s.map(|r| r / n as f64);
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
        assert_eq!((one.for_shard(0, 2).pageview.first_id, one.for_shard(0, 2).pageview.id_step), (1, 2));
        let alone = one.for_shard(0, 1);
        assert_eq!((alone.max_connections, alone.pageview.first_id, alone.pageview.id_step), (1001, 1, 1));
    }
}
