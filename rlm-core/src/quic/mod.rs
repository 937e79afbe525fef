//! QUIC seen, not managed: the UDP datagrams to and from the servers' ports are HTTP/3's (QUIC
//! runs on UDP 443). rlm cannot measure or act on them yet, but it counts them, flows and bytes
//! per class, so that an operator sees the share of the farm's traffic it does not manage.
//!
//! The same rooms as the other analyzers, in small: the parser ([`long_header`]: the one
//! header field read, the version of a long header, RFC 8999 section 5.1 and RFC 9000 section
//! 17.2), the per-flow state ([`QuicFlows`], a bounded table of the flows seen lately) and the
//! record ([`QuicStats`], counters in the engine's statistics, and the class's counters in the
//! policy's). A flow is a client's address and port with a server's; it is new when it was not
//! seen for [`QUIC_IDLE`] (QUIC's idle timeout: a flow quiet for longer is closed). Its class
//! is the client's, as the rules classify it at its first datagram (and again after a reload).

use std::time::Duration;

use serde::Serialize;

use crate::bounded::GenMap;
use crate::time::Timestamp;
use crate::wire::Endpoint;

/// The UDP port taken for QUIC when the servers' ports are not configured (any port).
pub const QUIC_PORT: u16 = 443;

/// A flow not seen for this long is over; its next datagram starts a new one.
pub const QUIC_IDLE: Duration = Duration::from_secs(30);

/// Most flows remembered at once (the newest half always kept; [`GenMap`]): a flood of made-up
/// flows costs at most this, and a real flow forgotten is counted again as new.
pub const MAX_QUIC_FLOWS: usize = 65_536;

/// The version of a QUIC long header (the first bit of the first byte set, then a 32-bit
/// version), if the payload starts with one: a client's Initial starts a flow with it. Version 0
/// is a version negotiation.
pub fn long_header(payload: &[u8]) -> Option<u32> {
    match payload {
        [first, v0, v1, v2, v3, ..] if first & 0x80 != 0 => Some(u32::from_be_bytes([*v0, *v1, *v2, *v3])),
        _ => None,
    }
}

/// QUIC's counters (the engine's `stats.quic`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct QuicStats {
    /// Flows seen (a flow quiet for [`QUIC_IDLE`] counts again when it resumes).
    pub flows: u64,
    /// Of them, begun by a client's long header (a handshake seen; the others were under way
    /// when rlm first saw them, or were forgotten).
    pub handshakes: u64,
    /// Datagrams, both ways.
    pub datagrams: u64,
    /// Their UDP payload bytes, both ways.
    pub bytes: u64,
}

impl QuicStats {
    /// Adds `o`'s counts to these ([`crate::engine::Stats::add`]).
    pub fn add(&mut self, o: &QuicStats) {
        let QuicStats { flows, handshakes, datagrams, bytes } = o;
        self.flows += flows;
        self.handshakes += handshakes;
        self.datagrams += datagrams;
        self.bytes += bytes;
    }
}

/// One flow's state.
#[derive(Clone, Copy, Debug)]
struct Flow<C> {
    last: Timestamp,
    class: Option<C>,
    /// The rules' epoch its class was found under.
    epoch: u32,
}

/// What a datagram was to its flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen<C> {
    /// It began a flow.
    pub new_flow: bool,
    /// The flow's class.
    pub class: Option<C>,
}

/// The flows seen lately, with their classes (`C`: the policy's class id).
#[derive(Debug)]
pub struct QuicFlows<C> {
    flows: GenMap<(Endpoint, Endpoint), Flow<C>, MAX_QUIC_FLOWS>,
    /// Bumped when the rules change: a flow of an older epoch is classified again.
    epoch: u32,
}

impl<C> Default for QuicFlows<C> {
    fn default() -> Self {
        QuicFlows { flows: GenMap::default(), epoch: 0 }
    }
}

impl<C: Copy> QuicFlows<C> {
    /// A datagram of `payload_len` bytes between `client` and `server` at `now` (`payload`: its
    /// first bytes, as they came), counted in `stats`; `classify` gives the client's class when
    /// the flow needs one.
    #[allow(clippy::too_many_arguments)]
    pub fn on_datagram(
        &mut self,
        stats: &mut QuicStats,
        now: Timestamp,
        client: Endpoint,
        server: Endpoint,
        from_client: bool,
        payload: &[u8],
        payload_len: u32,
        classify: impl FnOnce() -> Option<C>,
    ) -> Seen<C> {
        stats.datagrams += 1;
        stats.bytes += u64::from(payload_len);
        let epoch = self.epoch;
        let mut new_flow = false;
        let flow = self.flows.get_or_insert_with((client, server), || {
            new_flow = true;
            Flow { last: now, class: None, epoch: epoch.wrapping_sub(1) }
        });
        if !new_flow && now.saturating_since(flow.last) >= QUIC_IDLE {
            new_flow = true;
        }
        flow.last = flow.last.max(now);
        if flow.epoch != epoch {
            flow.class = classify();
            flow.epoch = epoch;
        }
        if new_flow {
            stats.flows += 1;
            if from_client && long_header(payload).is_some() {
                stats.handshakes += 1;
            }
        }
        Seen { new_flow, class: flow.class }
    }

    /// The rules changed: every flow's class is found again at its next datagram.
    pub fn on_rules(&mut self) {
        self.epoch = self.epoch.wrapping_add(1);
    }

    /// Flows remembered.
    pub fn len(&self) -> usize {
        self.flows.len()
    }

    /// Whether no flow is remembered.
    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(s: &str) -> Endpoint {
        let a: std::net::SocketAddr = s.parse().unwrap();
        Endpoint { ip: a.ip(), port: a.port() }
    }

    #[test]
    fn long_headers_give_their_version() {
        assert_eq!(long_header(&[0xc0, 0, 0, 0, 1, 8]), Some(1));
        assert_eq!(long_header(&[0xc3, 0x6b, 0x33, 0x43, 0xcf]), Some(0x6b33_43cf));
        assert_eq!(long_header(&[0x40, 0, 0, 0, 1]), None, "a short header");
        assert_eq!(long_header(&[0xc0, 0, 0]), None, "cut short");
        assert_eq!(long_header(&[]), None);
    }

    #[test]
    fn flows_count_once_until_idle_and_keep_their_class_until_the_rules_change() {
        let (mut q, mut st): (QuicFlows<u16>, QuicStats) = Default::default();
        let (c, s) = (ep("10.4.0.1:50000"), ep("10.9.0.1:443"));
        let t = |ms: u64| Timestamp::from_millis(ms);
        let initial = [0xc0, 0, 0, 0, 1];
        assert_eq!(q.on_datagram(&mut st, t(0), c, s, true, &initial, 1200, || Some(3)), Seen { new_flow: true, class: Some(3) });
        // The class is not asked again for the flow's other datagrams, either way.
        assert_eq!(
            q.on_datagram(&mut st, t(10), c, s, false, &[0x40], 1200, || panic!("classified again")),
            Seen { new_flow: false, class: Some(3) }
        );
        assert_eq!(q.on_datagram(&mut st, t(20_000), c, s, true, &[0x40], 50, || panic!("classified again")).new_flow, false);
        // Another client port is another flow, begun without a long header.
        assert!(q.on_datagram(&mut st, t(20_001), ep("10.4.0.1:50001"), s, false, &[0x40], 100, || Some(3)).new_flow);
        // Quiet for the idle timeout: new again.
        assert!(q.on_datagram(&mut st, t(50_000), c, s, true, &[0x40], 50, || Some(3)).new_flow);
        q.on_rules();
        assert_eq!(q.on_datagram(&mut st, t(50_001), c, s, true, &[0x40], 50, || Some(5)), Seen { new_flow: false, class: Some(5) });
        assert_eq!((st.flows, st.handshakes, st.datagrams, st.bytes), (3, 1, 6, 1200 + 1200 + 50 + 100 + 50 + 50));
        assert_eq!(q.len(), 2);
    }

    #[test]
    fn a_flood_of_flows_is_bounded() {
        let (mut q, mut st): (QuicFlows<u16>, QuicStats) = Default::default();
        for i in 0..(3 * MAX_QUIC_FLOWS as u32) {
            let c = Endpoint { ip: std::net::IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + i)), port: 1 };
            q.on_datagram(&mut st, Timestamp::from_millis(u64::from(i)), c, ep("10.9.0.1:443"), true, &[0xc0, 0, 0, 0, 1], 1200, || None);
        }
        assert!(q.len() <= MAX_QUIC_FLOWS);
        assert_eq!(st.flows, 3 * MAX_QUIC_FLOWS as u64);
    }
}
