//! The engine's configuration: what a driver sets once, before the first frame.

use std::time::Duration;

use crate::actions::InjectBudget;
use crate::pageview::PageviewConfig;

/// Ports Zeek reads as HTTP without looking at the bytes first (its `HTTP::ports`).
pub const WELL_KNOWN_HTTP_PORTS: &[u16] = &[80, 81, 631, 1080, 3128, 8000, 8080, 8888];

/// Engine configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// TCP ports the servers listen on. Empty: any port, with HTTP detected from the first bytes.
    pub server_ports: Vec<u16>,
    /// Most connections tracked at once; the least recently seen are evicted beyond it.
    pub max_connections: usize,
    /// Most bytes all connections may hold for later at once: partial heads, requests waiting
    /// for their responses, out-of-order segments. Past it, the connections that have held
    /// longest are evicted (`stats.evicted_held`) until it is met again.
    pub max_held_bytes: usize,
    /// An established connection with no traffic for this long is forgotten.
    pub idle_timeout: Duration,
    /// A closed connection is kept this long to absorb stragglers (final ACKs, retransmitted FINs).
    pub closed_linger: Duration,
    /// Scan HTML and CSS bodies for embedded objects.
    pub scan_embeds: bool,
    /// Decode gzip/deflate bodies so that body lengths are decoded sizes, as Zeek's.
    pub decode_bodies: bool,
    /// Carry out the actions that send frames, with frames from [`Engine::poll_transmit`](super::Engine::poll_transmit):
    /// `FAST SYN` (retransmit a client's SYN to the server every GAP until it answers, absorbing
    /// the client's own retransmissions meanwhile), `HALT FAST SYN`, `FAST SYN/ACK` (retransmit
    /// the server's SYN/ACK to the client every GAP until its ACK comes) and `DELAY FIRST SYN`.
    /// Only for a driver that sends those frames; otherwise the actions are counted as deferred.
    pub inject: bool,
    /// Carry out `REMOVE EMBEDS`: server segments that carry blanked references come back as
    /// [`Verdict::Replace`](super::Verdict::Replace). Only for a driver that forwards rewritten frames (NFQUEUE);
    /// otherwise the rules are counted as deferred.
    pub adapt: bool,
    /// Carry out `REJECT`: the request's segment is dropped, the server reset and the client
    /// answered ([`Engine::poll_transmit`](super::Engine::poll_transmit)). Only for a driver that holds the clients' requests
    /// for a verdict and sends frames (`rlm run` with the eBPF observer and injection); otherwise
    /// the rules are counted as deferred.
    pub reject: bool,
    /// Most fast retransmissions of one SYN, and of one SYN/ACK.
    pub fast_limit: u32,
    /// What rlm may inject, per class and in all ([`InjectBudget`]).
    pub inject_budget: InjectBudget,
    /// Held SYNs released per second and class once `HALT FAST SYN` lets go
    /// ([`Release`](crate::actions::Release)).
    pub fast_release_per_s: f64,
    /// Report each finished HTTP transaction as an [`Event::Transaction`](super::Event::Transaction) (the inline driver,
    /// which keeps pageviews only, turns it off and saves building them).
    pub transaction_records: bool,
    /// Report each TLS connection as an [`Event::Tls`](super::Event::Tls) when it ends (`rlm analyze --tls`).
    pub tls_records: bool,
    /// Records of what nothing shows is real, at most this many a second (one second's worth at
    /// once), each cut to [`UNPROVEN_FIELD`](super::UNPROVEN_FIELD) bytes a field and [`UNPROVEN_URIS`](super::UNPROVEN_URIS) object URIs; the
    /// rest counted in `stats.records_unproven_skipped`. Unproven are a pageview with no
    /// `evidence`, a transaction that was not answered on a connection the server never sent
    /// on, and a dropped first SYN from a client with no handshake seen within
    /// `client_rtt_ttl`: what a spoofer or a connection joined mid-stream makes, so that an
    /// attack cannot make rlm write more than this. None (`rlm analyze`): every record whole.
    pub unproven_records_per_s: Option<f64>,
    /// Sliding window of the per-class response-time statistics the rules read (`RT.<CLASS>`).
    pub class_window: Duration,
    /// Tunables of the pageview correlation.
    pub pageview: PageviewConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            server_ports: Vec::new(),
            max_connections: 262_144,
            max_held_bytes: 64 << 20,
            idle_timeout: Duration::from_secs(300),
            closed_linger: Duration::from_secs(4),
            scan_embeds: true,
            decode_bodies: true,
            transaction_records: true,
            tls_records: false,
            inject: false,
            adapt: false,
            reject: false,
            fast_limit: 20,
            inject_budget: InjectBudget::default(),
            fast_release_per_s: 20.0,
            unproven_records_per_s: None,
            class_window: Duration::from_secs(30),
            pageview: PageviewConfig::default(),
        }
    }
}
