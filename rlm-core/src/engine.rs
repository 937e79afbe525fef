//! The sans-IO engine: frames and timer ticks in; verdicts, events and deadlines out.
//!
//! ```text
//! driver ──(now, port, frame)──▶ Engine::handle ──▶ Verdict
//!        ◀──────────────────────  Engine::poll_event   (transactions, pageviews)
//!        ◀──────────────────────  Engine::poll_timeout (next deadline)
//!        ──(now)───────────────▶ Engine::handle_timeout
//!        ◀──────────────────────  Engine::poll_fastpath (what a kernel fast path may decide)
//! ```
//! The engine reads no clock and does no I/O; every behaviour is testable by
//! feeding it frames with chosen timestamps.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::net::{IpAddr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use serde::Serialize;

use crate::actions::{Budgets, InjectBudget, Kept, LinkAddrs, Release};
use crate::adapt::patch::{self, Edit};
use crate::adapt::predict::{self, size_key, Basis, ClientLoss, Predictor, SizeCache, Standing};
use crate::adapt::rewrite;
use crate::adapt::remove::Removal;
use crate::adapt::AdaptConn;
use crate::flow::{CloseReason, Conn, ConnId, ConnState, Dir, FlowNote, FlowTable, HttpOptions, SegFate};
use crate::http::{EmbedKind, EmbedRef, HttpEvent, Txn};
use crate::pageview::{PageviewConfig, PageviewRecord, Pageviews, RequestInfo};
use crate::policy::{Admission, Policy, SynDecision, SynOutcome};
use crate::time::Timestamp;
use crate::wire::{self, Decoded, Endpoint, Ignored, LinkType, Malformed, Segment};
use rules::{ClassId, RuleSet};

/// Ports Zeek reads as HTTP without looking at the bytes first (its `HTTP::ports`).
pub const WELL_KNOWN_HTTP_PORTS: &[u16] = &[80, 81, 631, 1080, 3128, 8000, 8080, 8888];

/// Which side of the bridge a frame came in on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Port {
    /// The port facing the clients (the Internet).
    Client,
    /// The port facing the server farm.
    Server,
    /// Not known (a capture file): direction is inferred from the handshake and ports.
    Unknown,
}

/// What to do with the frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Forward it unchanged.
    Accept,
    /// Do not forward it.
    Drop,
    /// Forward this instead (the whole frame as it was given, rewritten: content adaptation).
    Replace(Box<[u8]>),
}

/// Engine configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// TCP ports the servers listen on. Empty: any port, with HTTP detected from the first bytes.
    pub server_ports: Vec<u16>,
    /// Most connections tracked at once; the least recently seen are evicted beyond it.
    pub max_connections: usize,
    /// An established connection with no traffic for this long is forgotten.
    pub idle_timeout: Duration,
    /// A closed connection is kept this long to absorb stragglers (final ACKs, retransmitted FINs).
    pub closed_linger: Duration,
    /// Scan HTML and CSS bodies for embedded objects.
    pub scan_embeds: bool,
    /// Decode gzip/deflate bodies so that body lengths are decoded sizes, as Zeek's.
    pub decode_bodies: bool,
    /// Carry out the actions that send frames, with frames from [`Engine::poll_transmit`]:
    /// `FAST SYN` (retransmit a client's SYN to the server every GAP until it answers, absorbing
    /// the client's own retransmissions meanwhile), `HALT FAST SYN`, `FAST SYN/ACK` (retransmit
    /// the server's SYN/ACK to the client every GAP until its ACK comes) and `DELAY FIRST SYN`.
    /// Only for a driver that sends those frames; otherwise the actions are counted as deferred.
    pub inject: bool,
    /// Carry out `REMOVE EMBEDS`: server segments that carry blanked references come back as
    /// [`Verdict::Replace`]. Only for a driver that forwards rewritten frames (NFQUEUE);
    /// otherwise the rules are counted as deferred.
    pub adapt: bool,
    /// Most fast retransmissions of one SYN, and of one SYN/ACK.
    pub fast_limit: u32,
    /// What rlm may inject, per class and in all ([`InjectBudget`]).
    pub inject_budget: InjectBudget,
    /// Held SYNs released per second and class once `HALT FAST SYN` lets go ([`Release`]).
    pub fast_release_per_s: f64,
    /// Report each finished HTTP transaction as an [`Event::Transaction`] (the inline driver,
    /// which keeps pageviews only, turns it off and saves building them).
    pub transaction_records: bool,
    /// Sliding window of the per-class response-time statistics the rules read (`RT.<CLASS>`).
    pub class_window: Duration,
    pub pageview: PageviewConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            server_ports: Vec::new(),
            max_connections: 262_144,
            idle_timeout: Duration::from_secs(300),
            closed_linger: Duration::from_secs(4),
            scan_embeds: true,
            decode_bodies: true,
            transaction_records: true,
            inject: false,
            adapt: false,
            fast_limit: 20,
            inject_budget: InjectBudget::default(),
            fast_release_per_s: 20.0,
            class_window: Duration::from_secs(30),
            pageview: PageviewConfig::default(),
        }
    }
}

/// A finished HTTP transaction, as reported. Fields named like a field of Zeek's http.log
/// mean what Zeek's means (`docs/architecture.md` lists them); the others are rlm's own.
#[derive(Clone, Debug, Serialize)]
pub struct TransactionRecord {
    /// Zeek `ts`: when the request started (its first byte), Unix seconds to the microsecond.
    pub ts: UnixMicros,
    /// Zeek `uid`: the connection's identifier (stable for a connection within one analysis).
    pub uid: String,
    #[serde(rename = "id.orig_h")]
    pub orig_h: IpAddr,
    #[serde(rename = "id.orig_p")]
    pub orig_p: u16,
    #[serde(rename = "id.resp_h")]
    pub resp_h: IpAddr,
    #[serde(rename = "id.resp_p")]
    pub resp_p: u16,
    /// Zeek `trans_depth`: position on its connection, from 1.
    pub trans_depth: u32,
    pub method: Option<String>,
    /// The Host header as sent.
    pub host: Option<String>,
    /// Zeek `uri`: the request target, percent-decoded.
    pub uri: Option<String>,
    /// The request target exactly as sent.
    pub original_uri: Option<String>,
    pub referrer: Option<String>,
    /// Zeek `version`: the HTTP version of the response.
    pub version: Option<String>,
    /// The HTTP version of the request (0.9 for a request line without one).
    pub request_version: Option<String>,
    pub user_agent: Option<String>,
    /// Zeek `request_body_len`: size after content decoding (gzip, deflate).
    pub request_body_len: u64,
    /// Zeek `response_body_len`: size after content decoding (gzip, deflate). `rlm analyze`
    /// decodes; the inline appliance does not, and reports the wire size here.
    pub response_body_len: u64,
    /// Body bytes on the wire (de-chunked, not decoded).
    pub request_body_wire_len: u64,
    pub response_body_wire_len: u64,
    /// Zeek `status_code`: the final status.
    pub status_code: Option<u16>,
    pub status_msg: Option<String>,
    /// Zeek `info_code`: the last informational (1xx) status before the final one.
    pub info_code: Option<u16>,
    pub content_type: Option<String>,
    /// First and last byte of the response, as seen.
    pub response_first_ts: Option<UnixMicros>,
    pub response_last_ts: Option<UnixMicros>,
    /// The pageview it belongs to.
    pub pageview: Option<u64>,
    /// What was odd about it (bad_content_length, bad_chunking, capture_gap, incomplete, ...).
    pub anomalies: Vec<&'static str>,
}

/// Unix seconds, rounded to the microsecond, serialised without float noise
/// (`1320279566.452687`, not `1320279566.4526870251`).
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct UnixMicros(pub f64);

impl UnixMicros {
    pub fn of(t: Timestamp) -> UnixMicros {
        let us = t.as_nanos().saturating_add(500) / 1_000;
        // The f64 nearest the decimal, so that the shortest round-trip form is the decimal.
        UnixMicros(format!("{}.{:06}", us / 1_000_000, us % 1_000_000).parse().unwrap_or(0.0))
    }
    pub fn secs(self) -> f64 {
        self.0
    }
}

impl Serialize for UnixMicros {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.0)
    }
}

/// Zeek-style connection identifier: `C` and 17 base-62 digits, a hash of the 5-tuple and the
/// time the connection was first seen.
pub fn conn_uid(client: Endpoint, server: Endpoint, first_seen: Timestamp) -> String {
    use std::hash::{BuildHasher, Hash, Hasher};
    let state = ahash::RandomState::with_seeds(0x726c6d, 0x7569, 0x64, 0x2a);
    let mut h = state.build_hasher();
    (client, server, first_seen).hash(&mut h);
    let mut a = h.finish();
    let mut h2 = state.build_hasher();
    (a, first_seen, server).hash(&mut h2);
    let mut b = h2.finish();
    const DIGITS: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut out = String::with_capacity(18);
    out.push('C');
    for i in 0..17 {
        let x = if i < 9 { &mut a } else { &mut b };
        out.push(DIGITS[(*x % 62) as usize] as char);
        *x /= 62;
    }
    out
}

/// A rule acted on a packet (or would have, when replaying a capture).
#[derive(Clone, Debug, Serialize)]
pub struct DecisionRecord {
    pub ts: UnixMicros,
    /// `FILE:LINE:COL` of the rule.
    pub rule: String,
    /// `DROP SYN`, or `LIMIT SYN` when the bucket was empty.
    pub action: &'static str,
    pub class: String,
    pub client: String,
    pub server: String,
    /// The SYN was a retransmission by the client.
    pub retransmission: bool,
}

/// What the engine reports.
#[derive(Clone, Debug)]
pub enum Event {
    Transaction(TransactionRecord),
    Pageview(PageviewRecord),
    Decision(DecisionRecord),
}

/// A frame for the driver to send out of a bridge port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// The port to send it out of: `Server` toward the farm, `Client` toward the clients.
    pub port: Port,
    /// A whole Ethernet frame, checksums computed.
    pub frame: Box<[u8]>,
}

/// Server segments past a hole dropped in a row while a removal is under way; past it they go
/// on unblanked (the hole may never fill in rlm's view: a segment that went around it while its
/// queue was full, say, and the client's bare ACKs do not come to rlm).
const MAX_AHEAD_DROPS: u32 = 32;

/// The segment size assumed when a connection's loss is estimated from its bytes (Ethernet's).
const MSS_GUESS: u32 = 1448;

/// Blanks further behind a server segment than this are let go.
const RECORD_HORIZON: u32 = 1 << 26;

/// How often a held-back SYN without a `FAST SYN` gap is looked at again.
const HELD_SYN_RECHECK: Duration = Duration::from_millis(500);
/// The longest SYN or SYN/ACK frame kept to be sent again (a handshake's frames are under 100
/// bytes; a SYN with data, TCP Fast Open, is not kept): kept frames stay small in memory.
const MAX_KEPT_FRAME: usize = 256;
/// How soon a released SYN that found no release token tries again.
const RELEASE_RETRY: Duration = Duration::from_millis(50);

/// A frame to keep once the frame being handled is through (set at the SYN and SYN/ACK nodes).
#[derive(Clone, Copy, Debug)]
enum Keep {
    /// A client's SYN: retransmit it every `gap`, first after `delay` if it is held back.
    Syn { gap: Option<Duration>, delay: Option<Duration>, class: usize },
    /// A server's SYN/ACK: retransmit it every `gap` until the client's ACK.
    SynAck { gap: Duration, class: usize },
}

/// How a kernel fast path treats the clients' SYNs to the servers' ports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SynMode {
    /// Every SYN comes to the engine for a verdict (some rule's decision reads more than the
    /// addresses: the client's port or the pageview's elapsed time).
    QueueAll,
    /// SYNs with an [`FastpathUpdate::SynVerdict`] of the current generation are decided in the
    /// kernel (and reported with [`Engine::handle_decided`]); the others come for a verdict.
    Verdicts,
    /// No rule acts at the SYN: every SYN passes and is reported.
    PassAll,
}

/// What a kernel fast path may decide without the engine, in the order to apply it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FastpathUpdate {
    /// The SYN mode, and the generation a verdict must carry to apply.
    Mode { mode: SynMode, generation: u64 },
    /// A LIMIT SYN bucket (a rule's, for one class): rate per second and burst, full.
    Bucket { slot: u32, rate_per_s: f64, burst: u32 },
    /// The verdict for SYNs from `client` to `server` while `generation` is in force.
    SynVerdict { client: std::net::Ipv4Addr, server: SocketAddrV4, generation: u64, admission: Admission },
    /// Send the servers' segments through the queue (content adaptation is carried out by the
    /// rules in force), or stop.
    QueueResponses(bool),
    /// Send the clients' segments through the queue (a `REWRITE EMBEDS` is carried out), or
    /// stop.
    QueueRequests(bool),
    /// The connection's current response starts at sequence number `start` and ends before
    /// `end` (`None`: not known; the SRPT classifier ranks it by the bytes sent). Made only with
    /// SRPT on ([`Engine::enable_srpt`]).
    ResponseSize { client: SocketAddrV4, server: SocketAddrV4, start: u32, end: Option<u32> },
    /// The connection is gone: the kernel may forget its flow.
    FlowEnd { client: SocketAddrV4, server: SocketAddrV4 },
}

/// The engine's side of a kernel fast path ([`Engine::enable_fastpath`]).
#[derive(Debug)]
struct Fastpath {
    updates: VecDeque<FastpathUpdate>,
    /// Bumped with every new rule set.
    epoch: u64,
    /// The SYN mode of the rule set in force (it changes only with the rule set).
    mode: SynMode,
    /// What the generation was last derived from: (epoch, policy generation).
    seen: Option<(u64, u64)>,
    generation: u64,
    buckets: ahash::AHashSet<u32>,
    /// What the last [`FastpathUpdate::QueueResponses`] said (the kernel starts with false).
    queue_responses: bool,
    /// And the last [`FastpathUpdate::QueueRequests`].
    queue_requests: bool,
    /// Publish each response's size for the SRPT classifier.
    srpt: bool,
}

/// Sizes of the engine's tables.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TableSizes {
    pub connections: usize,
    pub timers: usize,
    pub open_pageviews: usize,
    pub pageview_deadlines: usize,
    pub client_rtts: usize,
}

/// Counters, all monotonic.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Stats {
    pub frames: u64,
    pub bytes: u64,
    pub tcp_segments: u64,
    /// Frames that did not decode, by reason.
    pub malformed: std::collections::BTreeMap<&'static str, u64>,
    /// Frames that are not ours (not IP, not TCP, fragments), by reason.
    pub ignored: std::collections::BTreeMap<&'static str, u64>,
    /// TCP segments to ports we were told not to watch.
    pub other_port_segments: u64,
    /// Segments of no tracked connection that could not start one (bare ACKs, FINs, RSTs).
    pub untracked_segments: u64,
    pub connections: u64,
    pub connections_midstream: u64,
    pub connections_failed: u64,
    pub connections_evicted: u64,
    pub connections_not_http: u64,
    pub syn_retransmissions: u64,
    pub synack_retransmissions: u64,
    /// SYNs the rules dropped (DROP SYN, or LIMIT SYN with an empty bucket).
    pub syns_dropped: u64,
    /// SYNs retransmitted to the servers on the clients' behalf (`FAST SYN`).
    pub fast_syns_sent: u64,
    /// Responses whose place in the sequence space went to the SRPT classifier.
    pub srpt_sizes_published: u64,
    /// Clients' own retransmissions absorbed while rlm was retransmitting for them.
    pub fast_syns_absorbed: u64,
    /// Clients' own retransmissions of a held SYN let through: the rule had let go before the
    /// paced release reached the SYN.
    pub fast_syns_client_passed: u64,
    /// SYN/ACKs retransmitted to the clients on the servers' behalf (`FAST SYN/ACK`).
    pub fast_synacks_sent: u64,
    /// First SYNs of pageviews held back (`DELAY FIRST SYN`).
    pub syns_delayed: u64,
    /// Frames the injection budget refused (the retransmissions stop; the endpoints' own TCP
    /// takes over), or not kept because too many were pending.
    pub inject_denied: u64,
    /// Frames not sent because no link address was known for where they go.
    pub inject_no_mac: u64,
    /// Image references blanked out of container pages (`REMOVE EMBEDS`).
    pub embeds_removed: u64,
    /// References a rule took but that stayed: part of their attributes had gone on in an
    /// earlier segment (`split`), or the scanner could not place them on the wire (`unmapped`),
    /// or the connection's record of blanks was full.
    pub embeds_kept_split: u64,
    pub embeds_kept_unmapped: u64,
    pub adapt_record_full: u64,
    /// Requests of embedded images rewritten to the mapping's variant (`REWRITE EMBEDS`).
    pub embeds_rewritten: u64,
    /// Requests a rewrite took that went on as they were: the mapping has no variant for the
    /// target (`unmapped`), the target was not wholly in the segment that completed the head
    /// (`split`), or the request line was not spaced as parsed (`unplaced`).
    pub rewrites_unmapped: u64,
    pub rewrites_split: u64,
    pub rewrites_unplaced: u64,
    /// `IF PREDICTED` decisions: made from a cell's measured mean, from the model, or not made
    /// because the object's size was not known yet (the object is left alone).
    pub predictions_measured: u64,
    pub predictions_model: u64,
    pub predictions_no_size: u64,
    /// Containers a rule took but left alone: their body came content-encoded.
    pub adapt_skipped_encoded: u64,
    /// Server segments past a hole dropped while a removal was under way (the server resends
    /// them, and the resend is blanked).
    pub adapt_ooo_dropped: u64,
    /// Server segments forwarded with blanks (first copies and retransmissions).
    pub adapt_segments_edited: u64,
    /// Segments whose blanks could not be written (left as they were).
    pub adapt_patch_failed: u64,
    pub retransmitted_segments: u64,
    pub gap_bytes: u64,
    pub transactions: u64,
    pub transactions_with_anomalies: u64,
    pub pageviews: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum TimerKind {
    /// The client's connect timeout after the first SYN.
    Connect,
    /// Idle (or closed-linger) expiry; re-armed lazily.
    Idle,
    /// The next fast retransmission of a SYN the server has not answered.
    FastSyn,
    /// The next fast retransmission of a SYN/ACK the client has not acknowledged.
    FastSynAck,
}

/// The engine.
pub struct Engine {
    cfg: Config,
    flows: FlowTable,
    pageviews: Pageviews,
    timers: BinaryHeap<Reverse<(Timestamp, ConnId, TimerKind)>>,
    /// The heap's size after its last compaction ([`Engine::push_timer`]).
    timers_compacted: usize,
    events: VecDeque<Event>,
    stats: Stats,
    notes: Vec<FlowNote>,
    http_events: Vec<HttpEvent>,
    last_now: Timestamp,
    policy: Option<Policy>,
    /// The verdict on the frame being handled.
    verdict: Verdict,
    /// The decision a kernel fast path carried out on the SYN being handled.
    decided: Option<SynDecision>,
    fastpath: Option<Fastpath>,
    /// SYNs being fast-retransmitted (or held back), by connection.
    fast_syns: ahash::AHashMap<ConnId, Kept>,
    /// SYN/ACKs being fast-retransmitted, by connection.
    fast_synacks: ahash::AHashMap<ConnId, Kept>,
    /// The frame being handled, to be kept once its handling is over.
    keep: Option<(ConnId, Keep)>,
    transmits: VecDeque<Transmit>,
    links: LinkAddrs,
    budgets: Budgets,
    release: Release,
    /// The rules in force send frames ([`Policy::injects`]), at the SYN/ACK node too.
    injecting: bool,
    injecting_synack: bool,
    /// Some rule has `REMOVE EMBEDS` ([`Policy::removes_embeds`]).
    removing: bool,
    /// A `REWRITE EMBEDS` is in the rules.
    rewriting: bool,
    /// An `IF PREDICTED` selector is in the rules: sizes and transfer times are learnt.
    predicting: bool,
    /// Requests whose heads completed in the segment being handled, for a rewrite (connection
    /// and depth; those of another connection, from a flush at a close, are let go).
    rewrite_due: Vec<(ConnId, u32)>,
    /// Content adaptation's state, by connection.
    adapt: ahash::AHashMap<ConnId, AdaptConn>,
    /// Transactions whose request rlm rewrote, with the target the server was asked for.
    rewritten: ahash::AHashMap<(ConnId, u32), String>,
    /// Transfer times measured per (size, RTT, loss), the model behind them (`IF PREDICTED`).
    predictor: Predictor,
    client_loss: ClientLoss,
    sizes: SizeCache,
    /// The server segment being handled: the sequence number of its first byte new to the
    /// stream (blanks before it can no longer be written into a copy the client gets first),
    /// and of the byte past its end.
    adapt_window: Option<(u32, u32)>,
    /// The blanks to write into the frame being handled.
    adapt_edits: Option<Vec<Edit>>,
}

impl Engine {
    pub fn new(cfg: Config) -> Engine {
        let mut stats = Stats::default();
        for m in Malformed::ALL {
            stats.malformed.insert(m.name(), 0);
        }
        for i in Ignored::ALL {
            stats.ignored.insert(i.name(), 0);
        }
        let budgets = Budgets::new(cfg.inject_budget.clone());
        let release = Release::new(cfg.fast_release_per_s);
        Engine {
            flows: FlowTable::new(cfg.max_connections),
            pageviews: Pageviews::new(cfg.pageview.clone()),
            cfg,
            timers: BinaryHeap::new(),
            timers_compacted: 0,
            events: VecDeque::new(),
            stats,
            notes: Vec::new(),
            http_events: Vec::new(),
            last_now: Timestamp::ZERO,
            policy: None,
            verdict: Verdict::Accept,
            decided: None,
            fastpath: None,
            fast_syns: ahash::AHashMap::new(),
            fast_synacks: ahash::AHashMap::new(),
            keep: None,
            transmits: VecDeque::new(),
            links: LinkAddrs::default(),
            budgets,
            release,
            injecting: false,
            injecting_synack: false,
            removing: false,
            rewriting: false,
            predicting: false,
            rewrite_due: Vec::new(),
            adapt: ahash::AHashMap::new(),
            rewritten: ahash::AHashMap::new(),
            predictor: Predictor::default(),
            client_loss: ClientLoss::default(),
            sizes: SizeCache::default(),
            adapt_window: None,
            adapt_edits: None,
        }
    }

    /// The next frame to send, if any ([`Config::inject`]).
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    /// Make [`FastpathUpdate`]s for a kernel fast path (the inline driver), starting with the
    /// current SYN mode.
    pub fn enable_fastpath(&mut self) {
        let mode = self.syn_mode();
        let queue_responses = self.queues_responses();
        let queue_requests = self.queues_requests();
        let updates = queue_responses
            .then_some(FastpathUpdate::QueueResponses(true))
            .into_iter()
            .chain(queue_requests.then_some(FastpathUpdate::QueueRequests(true)))
            .collect();
        self.fastpath =
            Some(Fastpath {
            updates,
            epoch: 0,
            mode,
            seen: None,
            generation: 0,
            buckets: ahash::AHashSet::new(),
            queue_responses,
            queue_requests,
            srpt: false,
        });
        self.note_fastpath();
    }

    /// Make [`FastpathUpdate::ResponseSize`] and [`FastpathUpdate::FlowEnd`] for the kernel's
    /// SRPT classifier (after [`Engine::enable_fastpath`]; IPv4 connections only).
    pub fn enable_srpt(&mut self) {
        if let Some(fp) = self.fastpath.as_mut() {
            fp.srpt = true;
        }
    }

    /// Whether response sizes are published.
    fn publishes_sizes(&self) -> bool {
        self.fastpath.as_ref().is_some_and(|fp| fp.srpt)
    }

    /// The connection's addresses as the SRPT classifier keys them (IPv4 only).
    fn v4_pair(&self, id: ConnId) -> Option<(SocketAddrV4, SocketAddrV4)> {
        let c = self.flows.get(id)?;
        match (SocketAddr::from(c.client), SocketAddr::from(c.server)) {
            (SocketAddr::V4(client), SocketAddr::V4(server)) => Some((client, server)),
            _ => None,
        }
    }

    /// Publish the place in the sequence space of the response whose head was just parsed, for
    /// the SRPT classifier: from its transaction on the connection, or, when the response
    /// completed in the same segment, from its `Done` later in the batch (`rest`).
    fn publish_at_head(&mut self, id: ConnId, depth: u32, rest: &[HttpEvent]) {
        let on_conn = self.flows.get(id).and_then(|c| c.http.as_ref()).and_then(|h| h.txn(depth));
        let done = || {
            rest.iter().find_map(|e| match e {
                HttpEvent::Done(t) if t.depth == depth => Some(&**t),
                _ => None,
            })
        };
        let Some(txn) = on_conn.or_else(done) else { return };
        let (Some(start), end) = (txn.response_seq, txn.response_end_seq) else { return };
        let Some((client, server)) = self.v4_pair(id) else { return };
        if let Some(fp) = self.fastpath.as_mut() {
            fp.updates.push_back(FastpathUpdate::ResponseSize { client, server, start, end });
            self.stats.srpt_sizes_published += 1;
        }
    }

    /// Whether the servers' segments must come through the queue: a `REMOVE EMBEDS` is carried
    /// out.
    fn queues_responses(&self) -> bool {
        self.cfg.adapt && self.removing
    }

    /// Whether the clients' segments must come through the queue: a `REWRITE EMBEDS` is carried
    /// out.
    fn queues_requests(&self) -> bool {
        self.cfg.adapt && self.rewriting && self.policy.as_ref().is_some_and(Policy::rewrites_with_mapping)
    }

    /// How the rule set in force lets a kernel fast path treat SYNs.
    fn syn_mode(&self) -> SynMode {
        match &self.policy {
            Some(p) if p.acts_at_syn() => {
                if p.syn_decided_by_address() && !p.needs_every_syn() {
                    SynMode::Verdicts
                } else {
                    SynMode::QueueAll
                }
            }
            _ => SynMode::PassAll,
        }
    }

    /// The next update for the kernel fast path, if any.
    pub fn poll_fastpath(&mut self) -> Option<FastpathUpdate> {
        self.fastpath.as_mut()?.updates.pop_front()
    }

    /// The SYN mode and generation now; queue a [`FastpathUpdate::Mode`] if they changed.
    /// Called after every frame: it only compares two numbers.
    fn note_fastpath(&mut self) {
        let Some(fp) = self.fastpath.as_mut() else { return };
        let policy_gen = match (&self.policy, fp.mode) {
            (Some(p), SynMode::Verdicts | SynMode::QueueAll) => p.generation(),
            _ => 0,
        };
        let now = (fp.epoch, policy_gen);
        if fp.seen != Some(now) {
            fp.seen = Some(now);
            fp.generation += 1;
            fp.updates.push_back(FastpathUpdate::Mode { mode: fp.mode, generation: fp.generation });
        }
    }

    /// Let time pass for the class statistics (windows slide, `FOR` tests settle) without a
    /// packet, so that a kernel fast path learns of a changed generation. Call it often (every
    /// few tens of milliseconds) when [`Engine::enable_fastpath`] is on.
    pub fn tick(&mut self, now: Timestamp) {
        let now = now.max(self.last_now);
        self.last_now = now;
        if let Some(p) = self.policy.as_mut() {
            p.refresh(now);
        }
        self.note_fastpath();
    }

    /// A client's SYN that a kernel fast path already decided (passed or dropped) on a
    /// [`FastpathUpdate::SynVerdict`]: accounted as [`Engine::handle_link`] would, without deciding
    /// again.
    pub fn handle_decided(&mut self, now: Timestamp, port: Port, link: LinkType, frame: &[u8], decision: SynDecision) {
        self.decided = Some(decision);
        self.handle_link(now, port, link, frame);
        self.decided = None;
    }

    /// Put a rule set in force (or none). Flows, pageviews and class statistics carry over: a
    /// reload loses nothing.
    pub fn set_rules(&mut self, rules: Option<RuleSet>) {
        self.set_policy(rules);
        let mode = self.syn_mode();
        let queue_responses = self.queues_responses();
        let queue_requests = self.queues_requests();
        if let Some(fp) = self.fastpath.as_mut() {
            fp.epoch += 1;
            fp.mode = mode;
            fp.buckets.clear();
            if fp.queue_responses != queue_responses {
                fp.queue_responses = queue_responses;
                fp.updates.push_back(FastpathUpdate::QueueResponses(queue_responses));
            }
            if fp.queue_requests != queue_requests {
                fp.queue_requests = queue_requests;
                fp.updates.push_back(FastpathUpdate::QueueRequests(queue_requests));
            }
        }
        self.note_fastpath();
    }

    fn set_policy(&mut self, rules: Option<RuleSet>) {
        match (rules, self.policy.as_mut()) {
            (Some(r), Some(p)) => p.replace_rules(r),
            (Some(r), None) => {
                let mut p = Policy::new(r, self.cfg.class_window);
                p.inject_carried_out = self.cfg.inject;
                p.adapt_carried_out = self.cfg.adapt;
                self.policy = Some(p);
            }
            (None, _) => self.policy = None,
        }
        self.injecting = self.policy.as_ref().is_some_and(Policy::injects);
        self.injecting_synack = self.policy.as_ref().is_some_and(Policy::injects_at_synack);
        self.removing = self.policy.as_ref().is_some_and(Policy::removes_embeds);
        self.rewriting = self.policy.as_ref().is_some_and(Policy::rewrites_embeds);
        self.predicting = self.policy.as_ref().is_some_and(Policy::predicts);
    }

    /// The rules in force and their state.
    pub fn policy(&self) -> Option<&Policy> {
        self.policy.as_ref()
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Connections tracked now.
    pub fn connections(&self) -> usize {
        self.flows.len()
    }

    /// Pageviews open now.
    pub fn open_pageviews(&self) -> usize {
        self.pageviews.open_count()
    }

    /// Sizes of every table the engine keeps, for bounds tests and metrics.
    pub fn table_sizes(&self) -> TableSizes {
        let (open_pageviews, pageview_deadlines, client_rtts) = self.pageviews.table_sizes();
        TableSizes { connections: self.flows.len(), timers: self.timers.len(), open_pageviews, pageview_deadlines, client_rtts }
    }

    fn push_timer(&mut self, t: Timestamp, id: ConnId, kind: TimerKind) {
        self.timers.push(Reverse((t, id, kind)));
        // Timers of connections that left the table (evicted, refused, closed) or that no longer
        // matter (the connect timer of an established connection) are not removed when they go;
        // drop them once they outnumber the live ones, so that a SYN flood cannot grow the heap
        // with its rate times the idle timeout. Compared with the size after the last compaction
        // too, so that compactions stay rare (amortised O(1) per timer) when most timers live.
        if self.timers.len() > 2 * self.flows.len().max(self.timers_compacted) + 4096 {
            let flows = &self.flows;
            self.timers.retain(|Reverse((_, id, kind))| {
                flows.get(*id).is_some_and(|c| *kind == TimerKind::Idle || matches!(c.state, ConnState::SynSent | ConnState::SynReceived))
            });
            self.timers_compacted = self.timers.len();
            let half_open = |id: &ConnId| flows.get(*id).is_some_and(|c| matches!(c.state, ConnState::SynSent | ConnState::SynReceived));
            self.fast_syns.retain(|id, _| half_open(id));
            let fast_syns = &self.fast_syns;
            self.release.retain(|id| fast_syns.contains_key(id));
            self.fast_synacks.retain(|id, _| half_open(id));
        }
    }

    /// An Ethernet frame arrived on `port` at `now`.
    pub fn handle(&mut self, now: Timestamp, port: Port, frame: &[u8]) -> Verdict {
        self.handle_link(now, port, LinkType::Ethernet, frame)
    }

    /// A frame of the given link type arrived on `port` at `now`.
    pub fn handle_link(&mut self, now: Timestamp, port: Port, link: LinkType, frame: &[u8]) -> Verdict {
        self.stats.frames += 1;
        self.stats.bytes += frame.len() as u64;
        // Time never runs backwards for the engine, whatever the capture says.
        let now = now.max(self.last_now);
        self.last_now = now;
        self.verdict = Verdict::Accept;
        match wire::decode(link, frame) {
            Decoded::Tcp(seg) => {
                self.stats.tcp_segments += 1;
                if self.injecting && seg.flags.syn {
                    self.links.learn(link, frame, &seg);
                }
                self.on_segment(now, port, &seg);
                if let Some((id, keep)) = self.keep.take() {
                    self.keep_frame(now, id, keep, link, frame);
                }
                if let Some(edits) = self.adapt_edits.take() {
                    self.write_blanks(link, frame, &edits);
                }
            }
            Decoded::Ignored(i) => *self.stats.ignored.entry(i.name()).or_default() += 1,
            Decoded::Malformed(m) => *self.stats.malformed.entry(m.name()).or_default() += 1,
        }
        self.note_fastpath();
        std::mem::replace(&mut self.verdict, Verdict::Accept)
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When the engine next needs [`Engine::handle_timeout`].
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        let t = self.timers.peek().map(|Reverse((t, _, _))| *t);
        match (t, self.pageviews.next_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Time passed: fire every deadline up to `now`.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        let now = now.max(self.last_now);
        self.last_now = now;
        while let Some(Reverse((t, id, kind))) = self.timers.peek().copied() {
            if t > now {
                break;
            }
            self.timers.pop();
            let Some(c) = self.flows.get(id) else {
                continue;
            };
            match kind {
                TimerKind::Connect => {
                    if matches!(c.state, ConnState::SynSent | ConnState::SynReceived) {
                        self.close_conn(t, id, CloseReason::ConnectTimeout);
                        self.flows.remove(id);
                    }
                }
                TimerKind::FastSyn => self.fast_syn_due(now, id),
                TimerKind::FastSynAck => self.fast_synack_due(now, id),
                TimerKind::Idle => {
                    let limit = if c.state == ConnState::Closed { self.cfg.closed_linger } else { self.cfg.idle_timeout };
                    let due = c.last_seen + limit;
                    if due <= now {
                        self.close_conn(now, id, CloseReason::Idle);
                        self.flows.remove(id);
                    } else {
                        self.push_timer(due, id, TimerKind::Idle);
                    }
                }
            }
        }
        self.pageviews.on_timeout(now);
        self.collect_pageviews();
        self.note_fastpath();
    }

    /// Shut down: close every connection and pageview, reporting what they have.
    pub fn shutdown(&mut self, now: Timestamp) {
        let now = now.max(self.last_now);
        self.handle_timeout(now);
        for id in self.flows.ids() {
            self.close_conn(now, id, CloseReason::Shutdown);
            self.flows.remove(id);
        }
        self.timers.clear();
        self.pageviews.finish_all();
        self.collect_pageviews();
    }

    fn is_server_port(&self, p: u16) -> bool {
        self.cfg.server_ports.contains(&p)
    }

    /// Which endpoint of a segment of an unknown connection is the client.
    fn client_of(&self, port: Port, seg: &Segment<'_>) -> (Endpoint, Endpoint) {
        let (s, d) = (seg.src, seg.dst);
        match port {
            Port::Client => return (s, d),
            Port::Server => return (d, s),
            Port::Unknown => {}
        }
        if seg.flags.syn {
            return if seg.flags.ack { (d, s) } else { (s, d) };
        }
        match (self.is_server_port(s.port), self.is_server_port(d.port)) {
            (true, false) => (d, s),
            (false, true) => (s, d),
            _ => {
                if s.port < d.port {
                    (d, s)
                } else {
                    (s, d)
                }
            }
        }
    }

    fn on_segment(&mut self, now: Timestamp, port: Port, seg: &Segment<'_>) {
        let f = seg.flags;
        let mut id = self.flows.lookup(seg.src, seg.dst);
        // A new SYN on a finished connection's ports starts a new connection.
        if let (Some(old), true) = (id, f.syn && !f.ack) {
            let c = self.flows.get(old).expect("looked up");
            let same_attempt = seg.src == c.client && c.c2s.next_seq() == Some(seg.seq.wrapping_add(1)) && c.state != ConnState::Closed;
            if !same_attempt && (c.state == ConnState::Closed || c.state == ConnState::Established || seg.src != c.client) {
                self.close_conn(now, old, CloseReason::Reused);
                self.flows.remove(old);
                id = None;
            }
        }
        let id = match id {
            Some(id) => id,
            None => {
                if !(f.syn || !seg.payload.is_empty()) || f.rst {
                    self.stats.untracked_segments += 1;
                    return;
                }
                let (client, server) = self.client_of(port, seg);
                if !self.cfg.server_ports.is_empty() && !self.is_server_port(server.port) {
                    self.stats.other_port_segments += 1;
                    return;
                }
                let midstream = !f.syn;
                if self.flows.is_full() {
                    if let Some(victim) = self.flows.eviction_candidate() {
                        self.close_conn(now, victim, CloseReason::Evicted);
                        self.flows.remove(victim);
                        self.stats.connections_evicted += 1;
                    }
                }
                let http = HttpOptions {
                    scan_embeds: self.cfg.scan_embeds,
                    // With no ports configured, Zeek's HTTP ports are read as HTTP whatever they
                    // carry; other ports only when the client's first bytes look like a request.
                    detect: self.cfg.server_ports.is_empty() && !WELL_KNOWN_HTTP_PORTS.contains(&server.port),
                    decode_bodies: self.cfg.decode_bodies,
                };
                let id = self.flows.insert(now, client, server, midstream, Some(http));
                self.stats.connections += 1;
                if midstream {
                    self.stats.connections_midstream += 1;
                }
                self.push_timer(now + self.cfg.idle_timeout, id, TimerKind::Idle);
                id
            }
        };
        let mut notes = std::mem::take(&mut self.notes);
        let mut http_events = std::mem::take(&mut self.http_events);
        let c = self.flows.get_mut(id).expect("live id");
        let before_retx = c.c2s.retransmits + c.s2c.retransmits;
        let before_gap = c.c2s.gap_bytes + c.s2c.gap_bytes;
        let dir = c.dir_of(seg);
        self.adapt_window = match (dir, c.s2c.next_seq()) {
            (Dir::ToClient, Some(from)) => Some((from, seg.seq.wrapping_add(seg.payload.len() as u32))),
            _ => None,
        };
        let fate = c.on_segment(now, seg, &mut notes, &mut http_events);
        self.stats.retransmitted_segments += (c.c2s.retransmits + c.s2c.retransmits - before_retx) as u64;
        self.stats.gap_bytes += c.c2s.gap_bytes + c.s2c.gap_bytes - before_gap;
        let mut close: Option<CloseReason> = None;
        for note in notes.drain(..) {
            match note {
                FlowNote::Syn { retransmission } => {
                    if retransmission {
                        self.stats.syn_retransmissions += 1;
                    } else {
                        self.push_timer(now + self.cfg.pageview.connect_timeout, id, TimerKind::Connect);
                    }
                    let c = self.flows.get(id).expect("live");
                    let (client, server) = (c.client, c.server);
                    self.at_syn(now, id, client, server, retransmission);
                    self.pageviews.on_syn(now, id, client.ip, retransmission);
                }
                FlowNote::SynAck { retransmission } => {
                    if retransmission {
                        self.stats.synack_retransmissions += 1;
                    }
                    // The server answered: no more fast retransmissions.
                    self.forget_fast_syn(id);
                    self.pageviews.on_synack(now, id);
                    if self.injecting_synack && !retransmission {
                        self.at_synack(now, id);
                    }
                }
                FlowNote::Established => {
                    let c = self.flows.get(id).expect("live");
                    let (client, rtt) = (c.client.ip, c.rtt());
                    // The handshake is done: no more SYN/ACKs.
                    self.fast_synacks.remove(&id);
                    if self.injecting && rtt.is_some() {
                        // A real client (its ACK matched the SYN/ACK, which a blind spoofer
                        // cannot do) earns its class some injections.
                        if let Some(p) = &self.policy {
                            let class = p.classify(c.client.into(), c.server.into());
                            self.budgets.earn(class.index());
                        }
                    }
                    self.pageviews.on_established(now, id, client, rtt);
                }
                FlowNote::ServerRetransmission => self.pageviews.on_server_retransmission(now, id),
                FlowNote::Refused => close = Some(CloseReason::Refused),
                FlowNote::Rst => close = Some(CloseReason::Rst),
                FlowNote::Fin(_) => {
                    if self.flows.get(id).expect("live").both_fins() {
                        close = Some(CloseReason::Fin);
                    }
                }
            }
        }
        self.notes = notes;
        self.process_http(now, id, &mut http_events);
        self.http_events = http_events;
        self.adapt_window = None;
        if self.rewriting {
            for (conn, depth) in std::mem::take(&mut self.rewrite_due) {
                if conn == id {
                    self.decide_rewrite(now, id, depth, seg);
                }
            }
        }
        self.rewrite_due.clear();
        if (self.removing || self.rewriting) && self.cfg.adapt {
            self.adapt_segment(id, dir, fate, seg);
        }
        if let Some(reason) = close {
            self.close_conn(now, id, reason);
            if reason == CloseReason::Refused {
                self.flows.remove(id);
            }
        }
        self.collect_pageviews();
    }

    fn process_http(&mut self, now: Timestamp, id: ConnId, evs: &mut Vec<HttpEvent>) {
        let mut i = 0;
        while i < evs.len() {
            // Taken out in order; what follows stays readable (a transaction that ended in the
            // same segment is no longer on the connection, only in its `Done` further on).
            let ev = std::mem::replace(&mut evs[i], HttpEvent::Request { depth: 0 });
            i += 1;
            match ev {
                HttpEvent::Request { depth } => {
                    let c = self.flows.get(id).expect("live");
                    let Some(txn) = c.http.as_ref().and_then(|h| h.txn(depth)) else {
                        continue;
                    };
                    let Some(head) = txn.request.as_ref() else {
                        continue;
                    };
                    let info = RequestInfo {
                        conn: id,
                        client: c.client.ip,
                        server: c.server.to_string(),
                        depth,
                        head,
                        ts: txn.request_ts,
                        conn_first_syn: c.hs.syn.first,
                        conn_established: c.hs.established,
                        conn_syns: c.hs.syn.count,
                        conn_synacks: c.hs.synack.count,
                        conn_first_synack: c.hs.synack.first,
                        rtt: c.rtt(),
                    };
                    self.pageviews.on_request(now, &info);
                    if self.rewriting {
                        self.rewrite_due.push((id, depth));
                    }
                }
                HttpEvent::ResponseHead { depth } => {
                    let c = self.flows.get(id).expect("live");
                    if let Some(txn) = c.http.as_ref().and_then(|h| h.txn(depth)) {
                        let encoded = txn.response.as_ref().is_some_and(|r| r.encoded);
                        let first = txn.response_first_ts.unwrap_or(now);
                        let html = txn.is_html();
                        self.pageviews.on_response_head(first, id, depth, html, encoded);
                    }
                    if self.publishes_sizes() {
                        self.publish_at_head(id, depth, &evs[i..]);
                    }
                    if self.removing {
                        let done = evs[i..].iter().find_map(|e| match e {
                            HttpEvent::Done(t) if t.depth == depth => Some(&**t),
                            _ => None,
                        });
                        self.decide_removal(now, id, depth, done);
                    }
                }
                HttpEvent::Embeds { depth, mut refs } => {
                    if !self.adapt.is_empty() {
                        self.remove_embeds(now, id, depth, &mut refs);
                    }
                    self.pageviews.on_embeds(now, id, depth, &refs)
                }
                HttpEvent::Done(txn) => {
                    if let Some(a) = self.adapt.get_mut(&id) {
                        a.removals.retain(|r| r.depth != txn.depth);
                    }
                    self.txn_done(now, id, txn)
                }
            }
        }
        evs.clear();
        if let Some(c) = self.flows.get(id) {
            if c.http.as_ref().is_some_and(|h| h.not_http) {
                // Counted once: the parser is dropped.
                self.stats.connections_not_http += 1;
                if let Some(c) = self.flows.get_mut(id) {
                    c.http = None;
                }
            }
        }
    }

    fn txn_done(&mut self, now: Timestamp, id: ConnId, mut txn: Box<Txn>) {
        let c = self.flows.get(id).expect("live");
        let (client, server, first_seen) = (c.client, c.server, c.first_seen);
        if c.midstream {
            // Read from a resynchronisation point: what came before the capture joined is unknown.
            txn.anomalies.insert(crate::http::Anomalies::MIDSTREAM);
        }
        let pv = self.pageviews.on_txn_done(now, id, txn.depth, txn.response_first_ts, txn.response_last_ts);
        self.learn_transfer(id, &txn);
        self.stats.transactions += 1;
        if !txn.anomalies.is_empty() {
            self.stats.transactions_with_anomalies += 1;
        }
        if !self.cfg.transaction_records {
            return;
        }
        let req = txn.request.as_ref();
        let resp = txn.response.as_ref();
        let uri = req.map(|r| crate::http::head::unescape_uri(&r.zeek_uri));
        let status = resp.map(|r| r.status);
        self.events.push_back(Event::Transaction(TransactionRecord {
            ts: UnixMicros::of(txn.request_ts),
            uid: conn_uid(client, server, first_seen),
            orig_h: client.ip,
            orig_p: client.port,
            resp_h: server.ip,
            resp_p: server.port,
            trans_depth: txn.depth,
            method: req.map(|r| r.method.clone()),
            host: req.and_then(|r| r.host.clone()),
            uri,
            original_uri: req.map(|r| r.uri.clone()),
            referrer: req.and_then(|r| r.referrer.clone()),
            version: resp.map(|r| r.version.as_str().to_string()),
            request_version: req.map(|r| r.version.as_str().to_string()),
            user_agent: req.and_then(|r| r.user_agent.clone()),
            request_body_len: txn.request_body_len_decoded(),
            response_body_len: txn.response_body_len_decoded(),
            request_body_wire_len: txn.request_body_len,
            response_body_wire_len: txn.response_body_len,
            status_code: status,
            // As Zeek: a response without a reason phrase says `<empty>`.
            status_msg: resp.map(|r| r.reason.clone().unwrap_or_else(|| "<empty>".into())),
            info_code: txn.interim.or(status.filter(|s| (100..200).contains(s))),
            content_type: resp.and_then(|r| r.content_type.clone()),
            response_first_ts: txn.response_first_ts.map(UnixMicros::of),
            response_last_ts: txn.response_last_ts.map(UnixMicros::of),
            pageview: pv,
            anomalies: txn.anomalies.labels().collect(),
        }));
    }

    /// Close a connection: flush HTTP, tell the pageviews. It stays in the table (Closed) until
    /// its linger expires, unless the caller removes it.
    fn close_conn(&mut self, now: Timestamp, id: ConnId, reason: CloseReason) {
        let mut evs = std::mem::take(&mut self.http_events);
        let Some(c) = self.flows.get_mut(id) else {
            return;
        };
        if c.state == ConnState::Closed {
            return;
        }
        let never_established = !c.was_established();
        self.fast_syns.remove(&id);
        self.release.forget(id);
        self.fast_synacks.remove(&id);
        c.close(now, reason == CloseReason::Shutdown, &mut evs);
        let client = c.client.ip;
        if let (Some(fp), SocketAddr::V4(client), SocketAddr::V4(server)) =
            (self.fastpath.as_mut().filter(|fp| fp.srpt), SocketAddr::from(c.client), SocketAddr::from(c.server))
        {
            fp.updates.push_back(FastpathUpdate::FlowEnd { client, server });
        }
        if self.predicting && c.s2c.bytes > 0 {
            self.client_loss.on_conn(client, c.s2c.bytes, c.s2c.retransmits, MSS_GUESS);
        }
        let first_syn = c.hs.syn.first;
        let syns = c.hs.syn.count;
        self.process_http(now, id, &mut evs);
        self.http_events = evs;
        // After the flush, which can start a removal.
        self.adapt.remove(&id);
        if !self.rewritten.is_empty() {
            self.rewritten.retain(|k, _| k.0 != id);
        }
        // A closed connection stays only to absorb stragglers: its slot is freed after the
        // linger, not after the idle timeout armed when it opened.
        if !matches!(reason, CloseReason::Shutdown | CloseReason::Refused | CloseReason::ConnectTimeout | CloseReason::Evicted) {
            self.push_timer(now + self.cfg.closed_linger, id, TimerKind::Idle);
        }
        let failed = match (reason, never_established, first_syn) {
            (CloseReason::ConnectTimeout, _, Some(s)) => Some((s, s + self.cfg.pageview.connect_timeout, syns)),
            (CloseReason::Refused, _, Some(s)) => Some((s, now, syns)),
            _ => None,
        };
        if failed.is_some() {
            self.stats.connections_failed += 1;
        }
        self.pageviews.on_conn_closed(now, id, client, failed);
        self.collect_pageviews();
    }

    /// The SYN node: the rules decide whether the client's SYN goes on. A dropped SYN stays in
    /// the pageview's accounting: the client will retransmit it and wait.
    fn at_syn(&mut self, now: Timestamp, id: ConnId, client: Endpoint, server: Endpoint, retransmission: bool) {
        if retransmission && self.fast_syns.contains_key(&id) {
            if self.client_passes_held_syn(now, id, client, server) {
                return;
            }
            // rlm sends this SYN for the client (every GAP, or after a delay): the client's own
            // retransmission is absorbed, so that the server sees one SYN stream. It is not a
            // SYN of the class for the rules (no token, no counter).
            self.verdict = Verdict::Drop;
            self.stats.fast_syns_absorbed += 1;
            return;
        }
        let Some(policy) = self.policy.as_mut() else { return };
        let (c, s) = (SocketAddr::from(client), SocketAddr::from(server));
        let class = policy.classify(c, s);
        let rt = self.pageviews.elapsed_for_client(client.ip, now);
        let decided = self.decided.take();
        let SynOutcome { decision, admission, fast_syn, delay_first, .. } = policy.at_syn_decided(now, c, s, class, Some(rt), decided);
        // DELAY FIRST SYN: a SYN that opens a pageview (its client has none open) is held back
        // and sent after the delay (004 Figure 17).
        let delay = delay_first.filter(|d| !retransmission && rt.is_zero() && decision == SynDecision::Pass && *d < self.cfg.pageview.connect_timeout);
        if !retransmission && (fast_syn.is_some() || delay.is_some()) {
            // Keep this SYN's frame (once its handling is over) and send it after GAP (or the
            // delay) unless the server answers first.
            self.keep = Some((id, Keep::Syn { gap: fast_syn, delay, class: class.index() }));
        }
        if delay.is_some() {
            self.verdict = Verdict::Drop;
            self.stats.syns_delayed += 1;
        }
        if let SynDecision::Drop { rule, limited } = decision {
            self.verdict = Verdict::Drop;
            self.stats.syns_dropped += 1;
            self.events.push_back(Event::Decision(DecisionRecord {
                ts: UnixMicros::of(now),
                rule: policy.rule_label(rule).to_string(),
                action: if limited { "LIMIT SYN" } else { "DROP SYN" },
                class: policy.class_name(class).to_string(),
                client: client.to_string(),
                server: server.to_string(),
                retransmission,
            }));
        }
        // A SYN that came for a verdict: tell the kernel what to do with the next ones, under the
        // generation in force after this SYN's look at the class statistics.
        if let (Some(admission), None, IpAddr::V4(cip), IpAddr::V4(sip)) = (admission, decided, client.ip, server.ip) {
            self.note_fastpath();
            if let Some(fp) = self.fastpath.as_mut() {
                if let Admission::Limit { slot, rate, burst, .. } = admission {
                    if fp.buckets.insert(slot) {
                        fp.updates.push_back(FastpathUpdate::Bucket { slot, rate_per_s: rate, burst });
                    }
                }
                let server = SocketAddrV4::new(sip, server.port);
                fp.updates.push_back(FastpathUpdate::SynVerdict { client: cip, server, generation: fp.generation, admission });
            }
        }
    }

    /// The SYN node again for a SYN rlm holds or resends ([`Policy::at_syn_again`]): the client's
    /// class and the decision. `None` without rules.
    fn syn_again(&mut self, now: Timestamp, client: Endpoint, server: Endpoint) -> Option<(ClassId, SynOutcome)> {
        let policy = self.policy.as_mut()?;
        let (c, s) = (SocketAddr::from(client), SocketAddr::from(server));
        let class = policy.classify(c, s);
        let rt = self.pageviews.elapsed_for_client(client.ip, now);
        Some((class, policy.at_syn_again(now, c, s, class, Some(rt))))
    }

    /// A client's own retransmission of a SYN that rlm holds (`HALT FAST SYN`), arriving when
    /// the rule has let go but the paced release has not reached it yet: it goes on to the
    /// server, as it would without rlm's retransmissions, so that the paced release never makes
    /// a SYN wait longer than the client's own backoff. rlm's retransmissions go on a gap after
    /// it. True if it was let through.
    fn client_passes_held_syn(&mut self, now: Timestamp, id: ConnId, client: Endpoint, server: Endpoint) -> bool {
        if !self.fast_syns.get(&id).is_some_and(|k| k.held) {
            return false;
        }
        let Some((_, out)) = self.syn_again(now, client, server) else { return false };
        if out.halt_fast_syn || out.decision != SynDecision::Pass {
            return false;
        }
        if let Some(k) = self.fast_syns.get_mut(&id) {
            k.held = false;
            k.client_sent = Some(now);
        }
        self.release.forget(id);
        self.stats.fast_syns_client_passed += 1;
        true
    }

    /// The response node at a response's head: whether a `REMOVE EMBEDS` takes this
    /// container. Not when its body comes content-encoded (it cannot be blanked).
    /// `done`: the transaction, when it has ended already (within the same segment).
    fn decide_removal(&mut self, now: Timestamp, id: ConnId, depth: u32, done: Option<&Txn>) {
        let (Some(policy), Some(c)) = (self.policy.as_mut(), self.flows.get(id)) else { return };
        let Some(txn) = c.http.as_ref().and_then(|h| h.txn(depth)).or(done).filter(|t| t.is_html()) else { return };
        let Some(resp) = txn.response.as_ref().filter(|r| (200..300).contains(&r.status)) else { return };
        // The fast path queues (and so lets rlm rewrite) IPv4 segments only.
        if !c.server.ip.is_ipv4() {
            return;
        }
        let (cl, sv) = (SocketAddr::from(c.client), SocketAddr::from(c.server));
        let class = policy.classify(cl, sv);
        let rt = self.pageviews.elapsed_for_client(c.client.ip, now);
        let req = txn.request.as_ref();
        let url = req.map(|r| r.uri.as_str());
        let host = req.and_then(|r| r.host.as_deref());
        let Some((rule, select)) = policy.at_response(now, cl, sv, class, url, host, resp.content_type.as_deref(), Some(rt)) else { return };
        if resp.encoded {
            self.stats.adapt_skipped_encoded += 1;
        } else {
            let mut removal = Removal::new(depth, rule, select);
            if matches!(removal.select, rules::EmbedSelect::Predicted { .. }) {
                let server = c.server.to_string();
                let host = req.and_then(|r| r.host.clone()).filter(|h| !h.is_empty()).unwrap_or_else(|| server.clone());
                removal.base = url.and_then(|u| crate::pageview::request_url(Some(&host), &server, u)).map(|b| (b, host));
            }
            self.adapt.entry(id).or_default().removals.push(removal);
        }
    }

    /// The request node at an embedded image's request head (completed by `seg`, a client's
    /// segment): whether a `REWRITE EMBEDS` takes it, and if so its target is rewritten in this
    /// segment and in every resend of it (the connection's request record).
    fn decide_rewrite(&mut self, now: Timestamp, id: ConnId, depth: u32, seg: &Segment<'_>) {
        let Some(c) = self.flows.get(id) else { return };
        // The fast path queues (and so lets rlm rewrite) IPv4 segments only.
        if !c.server.ip.is_ipv4() || c.dir_of(seg) != Dir::ToServer {
            return;
        }
        let Some(txn) = c.http.as_ref().and_then(|h| h.txn(depth)) else { return };
        let (Some(req), Some(request_seq)) = (txn.request.as_ref(), txn.request_seq) else { return };
        // Only the images a container listed.
        let Some(position) = self.pageviews.image_position(id, depth) else { return };
        let (Some(at), Some(policy)) = (self.standing(now, id, depth), self.policy.as_mut()) else { return };
        let (cl, sv) = (SocketAddr::from(c.client), SocketAddr::from(c.server));
        let class = policy.classify(cl, sv);
        let Some((_rule, select, map)) = policy.at_request(now, cl, sv, class, &req.uri, req.host.as_deref(), at.elapsed) else { return };
        let take = match select {
            rules::EmbedSelect::Predicted { cmp, goal } => {
                // 004 Figure 20: rewritten if its predicted transfer would take the pageview's
                // elapsed time past the goal.
                let size = self.sizes.get(&size_key(req.host.as_deref(), &sv.to_string(), &req.uri));
                count_prediction(&mut self.stats, self.predictor.judge(size, &at, cmp == rules::Cmp::Ge, goal))
            }
            ref s => crate::adapt::remove::selects(s, position, &req.uri),
        };
        if !take {
            return;
        }
        let Some(new) = map.map(&req.uri) else {
            self.stats.rewrites_unmapped += 1;
            return;
        };
        match rewrite::target_edit(seg.payload, seg.seq, request_seq, &req.method, &req.uri, &new) {
            Ok((seq, bytes)) => {
                if self.adapt.entry(id).or_default().requests.add_bytes(seq, &bytes) {
                    self.stats.embeds_rewritten += 1;
                    self.rewritten.insert((id, depth), new);
                } else {
                    self.stats.adapt_record_full += 1;
                }
            }
            Err(rewrite::Missed::NotInSegment) => self.stats.rewrites_split += 1,
            Err(rewrite::Missed::Unplaced) => self.stats.rewrites_unplaced += 1,
        }
    }

    /// A 2xx answer ended: its size goes into the size cache under the target the server was
    /// asked for (the variant, when rlm rewrote the request), and an object's transfer time
    /// (not a page's: pages wait for the server) into the predictor's cell.
    fn learn_transfer(&mut self, id: ConnId, txn: &Txn) {
        let variant = if self.rewritten.is_empty() { None } else { self.rewritten.remove(&(id, txn.depth)) };
        if !self.predicting {
            return;
        }
        let (Some(c), Some(req), Some(resp)) = (self.flows.get(id), txn.request.as_ref(), txn.response.as_ref()) else { return };
        if !(200..300).contains(&resp.status) {
            return;
        }
        let size = txn.response_body_len;
        let target = variant.as_deref().unwrap_or(&req.uri);
        self.sizes.insert(size_key(req.host.as_deref(), &c.server.to_string(), target), size);
        if txn.is_html() || size == 0 {
            return;
        }
        let (Some(first), Some(last)) = (txn.response_first_ts, txn.response_last_ts) else { return };
        let Some(rtt) = self.client_rtt(c) else { return };
        let transfer = last.saturating_since(first) + rtt / 2;
        self.predictor.observe(size, rtt, self.client_loss.of(c.client.ip), transfer);
    }

    /// A container's references, in document order, as the scanner finds them: those its
    /// removal takes are blanked (kept in the connection's record) and no longer expected by the
    /// pageview. A reference whose attributes began in a segment that went on already stays.
    fn remove_embeds(&mut self, now: Timestamp, id: ConnId, depth: u32, refs: &mut Vec<EmbedRef>) {
        let ahead = self.removal_standing(now, id, depth);
        let Engine { adapt, stats, adapt_window, predictor, sizes, .. } = self;
        let Some(a) = adapt.get_mut(&id) else { return };
        let Some(i) = a.removals.iter().position(|r| r.depth == depth) else { return };
        let (removal, record, ahead_sent_to) = (&mut a.removals[i], &mut a.record, a.ahead_sent_to);
        let at_or_after = |x: u32, y: u32| (x.wrapping_sub(y) as i32) >= 0;
        // A range can still be blanked on every copy: it lies in the bytes this segment brings,
        // or past it in data that waited behind a hole and did not go on (dropped, or sent back
        // again later).
        let reachable = |&(seq, len): &(u32, u32)| {
            adapt_window.is_some_and(|(from, seg_end)| {
                at_or_after(seq, from) && (at_or_after(seg_end, seq.wrapping_add(len)) || ahead_sent_to.is_none_or(|to| at_or_after(seq, to)))
            })
        };
        refs.retain(|e| {
            if e.kind != EmbedKind::Image {
                return true;
            }
            let take = match (&removal.select, &ahead, &removal.base) {
                // Blanked if fetching it would take the pageview past the goal (the object's
                // size as last served, the client's path, the pageview's time so far).
                (rules::EmbedSelect::Predicted { cmp, goal }, Some(at), Some((base, host))) => {
                    removal.seen += 1;
                    let size = base.join(&e.urls[0]).ok().and_then(|u| sizes.get(&object_key(&u, base, host)));
                    count_prediction(stats, predictor.judge(size, at, *cmp == rules::Cmp::Ge, *goal))
                }
                _ => removal.takes(&e.urls[0]),
            };
            if !take {
                return true;
            }
            if e.wire.is_empty() {
                stats.embeds_kept_unmapped += 1;
                return true;
            }
            if !e.wire.iter().all(reachable) {
                stats.embeds_kept_split += 1;
                return true;
            }
            if !record.add(&e.wire) {
                stats.adapt_record_full += 1;
                return true;
            }
            stats.embeds_removed += 1;
            false
        });
    }

    /// For a removal by `IF PREDICTED` of the container at `depth`: where its pageview stands.
    fn removal_standing(&self, now: Timestamp, id: ConnId, depth: u32) -> Option<Standing> {
        let a = self.adapt.get(&id)?;
        a.removals.iter().find(|r| r.depth == depth)?.base.as_ref()?;
        self.standing(now, id, depth)
    }

    /// Where the pageview of transaction `depth` on `id` stands: its elapsed time and its
    /// client's path (what `IF PREDICTED` adds an object's transfer to).
    fn standing(&self, now: Timestamp, id: ConnId, depth: u32) -> Option<Standing> {
        let c = self.flows.get(id)?;
        let elapsed = self.pageviews.pageview_of_txn(id, depth).and_then(|pv| self.pageviews.elapsed(pv, now)).unwrap_or_default();
        Some(Standing { elapsed, rtt: self.client_rtt(c).unwrap_or_default(), loss: self.client_loss.of(c.client.ip) })
    }

    /// The RTT of a connection's client: its last handshake's at the appliance, else this one's.
    fn client_rtt(&self, c: &Conn) -> Option<Duration> {
        self.pageviews.client_rtt(c.client.ip).or(c.rtt())
    }

    /// After a segment of an adapted connection: a server segment gets the blanks that fall in
    /// it (or is dropped, past a hole while a removal is under way); the client's
    /// acknowledgements let go of blanks it can no longer ask for.
    fn adapt_segment(&mut self, id: ConnId, dir: Dir, fate: SegFate, seg: &Segment<'_>) {
        let to_client = dir == Dir::ToClient && !seg.payload.is_empty();
        let removing = self.adapt.get(&id).is_some_and(|a| !a.removals.is_empty());
        if to_client && fate == SegFate::Ahead {
            let a = self.adapt.entry(id).or_default();
            if removing && a.ahead_dropped < MAX_AHEAD_DROPS {
                // The server sends it again once the hole fills, and the resend is blanked.
                a.ahead_dropped += 1;
                self.verdict = Verdict::Drop;
                self.stats.adapt_ooo_dropped += 1;
                return;
            }
            // It goes on as it is (no removal under way, or a hole that does not fill: the
            // bytes before it may have gone around rlm): references found in it once the hole
            // fills stay whole.
            let end = seg.seq.wrapping_add(seg.payload.len() as u32);
            if a.ahead_sent_to.is_none_or(|to| (end.wrapping_sub(to) as i32) > 0) {
                a.ahead_sent_to = Some(end);
            }
            return;
        }
        let Some(a) = self.adapt.get_mut(&id) else { return };
        match dir {
            Dir::ToClient if to_client => {
                if fate == SegFate::New {
                    a.ahead_dropped = 0;
                }
                // Blanks this far behind the stream cannot be asked for again (the client's
                // window is far smaller), and their sequence numbers will come round again.
                a.record.prune(seg.seq.wrapping_sub(RECORD_HORIZON));
                let edits = a.record.edits(seg.seq, seg.payload.len());
                if !edits.is_empty() {
                    self.adapt_edits = Some(edits);
                }
            }
            Dir::ToServer => {
                if seg.flags.ack {
                    a.record.prune(seg.ack);
                }
                if !seg.payload.is_empty() && !a.requests.is_empty() {
                    a.requests.prune(seg.seq.wrapping_sub(RECORD_HORIZON));
                    let edits = a.requests.edits(seg.seq, seg.payload.len());
                    if !edits.is_empty() {
                        self.adapt_edits = Some(edits);
                    }
                }
                if a.is_idle() {
                    self.adapt.remove(&id);
                }
            }
            _ => {}
        }
        if dir == Dir::ToClient && seg.flags.ack {
            if let Some(a) = self.adapt.get_mut(&id) {
                a.requests.prune(seg.ack);
            }
        }
    }

    /// Write the blanks into a copy of the frame being handled: its verdict becomes that copy.
    fn write_blanks(&mut self, link: LinkType, frame: &[u8], edits: &[Edit]) {
        if !matches!(self.verdict, Verdict::Accept) {
            return;
        }
        let mut copy = frame.to_vec();
        match patch::apply(&mut copy, link, edits) {
            Ok(_) => {
                self.verdict = Verdict::Replace(copy.into());
                self.stats.adapt_segments_edited += 1;
            }
            Err(_) => self.stats.adapt_patch_failed += 1,
        }
    }

    /// The SYN/ACK node: with `FAST SYN/ACK` in force for the connection, keep the SYN/ACK to
    /// send it again every gap until the client's ACK comes.
    fn at_synack(&mut self, now: Timestamp, id: ConnId) {
        let (Some(policy), Some(c)) = (self.policy.as_mut(), self.flows.get(id)) else { return };
        let (cl, sv) = (SocketAddr::from(c.client), SocketAddr::from(c.server));
        let class = policy.classify(cl, sv);
        if let Some(gap) = policy.at_synack(now, cl, sv, class) {
            self.keep = Some((id, Keep::SynAck { gap, class: class.index() }));
        }
    }

    /// Keep the frame just handled, as the SYN or SYN/ACK node asked, and arm its timer.
    fn keep_frame(&mut self, now: Timestamp, id: ConnId, keep: Keep, link: LinkType, frame: &[u8]) {
        let (map, gap, delayed, class, kind) = match keep {
            Keep::Syn { gap, delay, class } => (&mut self.fast_syns, gap, delay.is_some(), class, TimerKind::FastSyn),
            Keep::SynAck { gap, class } => (&mut self.fast_synacks, Some(gap), false, class, TimerKind::FastSynAck),
        };
        if (map.len() >= self.budgets.config().max_pending && !map.contains_key(&id)) || frame.len() > MAX_KEPT_FRAME {
            self.stats.inject_denied += 1;
            if delayed {
                // Held back but not kept: let it go now rather than lose it.
                self.verdict = Verdict::Accept;
                self.stats.syns_delayed -= 1;
            }
            return;
        }
        map.insert(id, Kept { gap, link, frame: frame.into(), sent: 0, delayed, held: false, client_sent: None, class });
        let first = match keep {
            Keep::Syn { delay: Some(d), .. } => d,
            _ => gap.unwrap_or(Duration::ZERO),
        };
        self.push_timer(now + first, id, kind);
    }

    /// Send a kept frame toward the server or the client if the budget allows; false if it did
    /// not (the retransmissions then stop).
    fn send_kept(&mut self, now: Timestamp, id: ConnId, to_server: bool) -> bool {
        let Some(c) = self.flows.get(id) else { return false };
        let (client, server) = (c.client.ip, c.server.ip);
        let map = if to_server { &mut self.fast_syns } else { &mut self.fast_synacks };
        let Some(kept) = map.get_mut(&id) else { return false };
        if !self.budgets.take(now, kept.class) {
            self.stats.inject_denied += 1;
            return false;
        }
        let Some(frame) = self.links.frame(kept, client, server, to_server) else {
            self.stats.inject_no_mac += 1;
            return false;
        };
        kept.sent += 1;
        kept.delayed = false;
        self.transmits.push_back(Transmit { port: if to_server { Port::Server } else { Port::Client }, frame });
        true
    }

    /// A SYN's timer: send it (again) to the server (through the SYN node's rules once more:
    /// `HALT FAST SYN` or a `DROP SYN` holding for this client hold it back) unless the server
    /// answered, the client has given up (its connect timeout) or the limit is reached.
    fn fast_syn_due(&mut self, now: Timestamp, id: ConnId) {
        let Some(c) = self.flows.get(id).filter(|c| c.state == ConnState::SynSent) else {
            self.forget_fast_syn(id);
            return;
        };
        let (client, server, first) = (c.client, c.server, c.hs.syn.first.unwrap_or(now));
        let Some(fs) = self.fast_syns.get(&id) else { return };
        let delayed = fs.delayed;
        if now.saturating_since(first) >= self.cfg.pageview.connect_timeout || fs.sent >= self.cfg.fast_limit {
            self.forget_fast_syn(id);
            return;
        }
        let Some((class, out)) = self.syn_again(now, client, server) else {
            self.forget_fast_syn(id);
            return;
        };
        if out.fast_syn.is_none() && !delayed {
            // The rule no longer applies (a new rule file): the client's own TCP takes over.
            self.forget_fast_syn(id);
            return;
        }
        let held = self.fast_syns.get(&id).is_some_and(|k| k.held);
        if let Some(at) = self.fast_syns.get(&id).and_then(|k| k.client_sent) {
            // The client's own copy went a moment ago: rlm's next goes a gap after it.
            let next = at + out.fast_syn.unwrap_or(HELD_SYN_RECHECK);
            if !held && now < next {
                self.push_timer(next, id, TimerKind::FastSyn);
                return;
            }
        }
        if !out.halt_fast_syn && out.decision == SynDecision::Pass {
            if held && !self.release.try_release(now, class.index(), first, id, self.cfg.pageview.connect_timeout) {
                // Released, but paced (oldest first): look again shortly.
                self.push_timer(now + RELEASE_RETRY, id, TimerKind::FastSyn);
                return;
            }
            if let Some(k) = self.fast_syns.get_mut(&id) {
                k.held = false;
            }
            if !self.send_kept(now, id, true) {
                self.forget_fast_syn(id);
                return;
            }
            self.stats.fast_syns_sent += 1;
            if out.fast_syn.is_none() {
                // A held-back first SYN without FAST SYN: sent once; the client's TCP goes on.
                self.forget_fast_syn(id);
                return;
            }
        } else if let Some(k) = self.fast_syns.get_mut(&id) {
            k.held = true;
            self.release.forget(id);
        }
        self.push_timer(now + out.fast_syn.unwrap_or(HELD_SYN_RECHECK), id, TimerKind::FastSyn);
    }

    /// Stop fast-retransmitting (or holding) the SYN of `id`.
    fn forget_fast_syn(&mut self, id: ConnId) {
        self.fast_syns.remove(&id);
        self.release.forget(id);
    }

    /// A SYN/ACK's timer: send it again to the client unless its ACK came, it has given up or
    /// the limit is reached.
    fn fast_synack_due(&mut self, now: Timestamp, id: ConnId) {
        let Some(c) = self.flows.get(id).filter(|c| c.state == ConnState::SynReceived) else {
            self.fast_synacks.remove(&id);
            return;
        };
        let first = c.hs.syn.first.unwrap_or(now);
        let Some(k) = self.fast_synacks.get(&id) else { return };
        let gap = k.gap.unwrap_or(HELD_SYN_RECHECK);
        if now.saturating_since(first) >= self.cfg.pageview.connect_timeout || k.sent >= self.cfg.fast_limit || !self.send_kept(now, id, false) {
            self.fast_synacks.remove(&id);
            return;
        }
        self.stats.fast_synacks_sent += 1;
        self.push_timer(now + gap, id, TimerKind::FastSynAck);
    }

    fn collect_pageviews(&mut self) {
        for mut pv in self.pageviews.take_done() {
            self.stats.pageviews += 1;
            if let Some(policy) = self.policy.as_mut() {
                let client: Option<IpAddr> = pv.client.parse().ok();
                let server: SocketAddr = pv.server.as_deref().and_then(|s| s.parse().ok()).unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0)));
                if let Some(ip) = client {
                    let class = policy.classify_ip(ip, server);
                    pv.class = Some(policy.class_name(class).to_string());
                    if !pv.incomplete {
                        policy.on_pageview(self.last_now, class, pv.rt_s);
                    }
                }
            }
            self.events.push_back(Event::Pageview(pv));
        }
    }

    /// The client address of a tracked connection (for drivers and tests).
    pub fn client_of_conn(&self, a: Endpoint, b: Endpoint) -> Option<IpAddr> {
        self.flows.lookup(a, b).and_then(|id| self.flows.get(id)).map(|c| c.client.ip)
    }
}

/// Count an `IF PREDICTED` verdict; whether it takes the object.
fn count_prediction(stats: &mut Stats, v: predict::Verdict) -> bool {
    match v {
        predict::Verdict::NoSize => {
            stats.predictions_no_size += 1;
            false
        }
        predict::Verdict::Made { passes, basis } => {
            match basis {
                Basis::Measured(_) => stats.predictions_measured += 1,
                Basis::Model => stats.predictions_model += 1,
            }
            passes
        }
    }
}

/// The size-cache key of a reference resolved to `u` in a page at `base`: the page's host as
/// its requests name it (`host`) when the reference is to the same place, else its own.
fn object_key(u: &url::Url, base: &url::Url, host: &str) -> String {
    let target = match u.query() {
        Some(q) => format!("{}?{q}", u.path()),
        None => u.path().to_string(),
    };
    if u.host_str() == base.host_str() && u.port_or_known_default() == base.port_or_known_default() {
        size_key(Some(host), "", &target)
    } else {
        let authority = match u.port() {
            Some(p) => format!("{}:{p}", u.host_str().unwrap_or("")),
            None => u.host_str().unwrap_or("").to_string(),
        };
        size_key(Some(&authority), "", &target)
    }
}

