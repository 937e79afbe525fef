//! The sans-IO engine: frames and time in; verdicts, frames to send, events and deadlines out.
//!
//! ```text
//! driver ──(now, port, frame)──▶ Engine::handle ──▶ Verdict
//!        ◀──────────────────────  Engine::poll_event     (transactions, pageviews, decisions)
//!        ◀──────────────────────  Engine::poll_transmit  (frames sent on the endpoints' behalf)
//!        ◀──────────────────────  Engine::poll_fastpath  (what a kernel fast path may decide)
//!        ◀──────────────────────  Engine::poll_timeout   (the next deadline: the one clock)
//!        ──(now)───────────────▶ Engine::handle_timeout
//! ```
//! The engine reads no clock and does no I/O; every behaviour is testable by feeding it frames
//! with chosen timestamps.
//!
//! A frame goes through stages, each in its own module, each handing back what it decided:
//! [`crate::wire`] decodes it; `segment` finds its connection, runs the TCP tracker
//! ([`crate::flow`]) and the connection's application analyzer ([`crate::http`]), and feeds
//! the pageviews ([`crate::pageview`]); `syn` is the SYN and SYN/ACK nodes and their
//! actions; `adaptation` the response and request nodes (content adaptation). The verdict is
//! made once from what they decided (`FrameOutcome`). `fastpath` publishes what a kernel
//! fast path may decide, `records` are the Zeek-style records reported.

mod adaptation;
mod application;
mod budget;
mod config;
mod fastpath;
mod records;
mod segment;
mod shard;
mod stats;
mod syn;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::net::IpAddr;

use crate::adapt::patch::Edit;
use crate::analyzer::Analyzer;
use crate::flow::{CloseReason, ConnId, ConnState, FlowTable};
use crate::pageview::{Acts, PageviewRecord, Pageviews};
use crate::policy::{Policy, SynDecision};
use crate::time::Timestamp;
use crate::wire::{self, Datagram, Decoded, Endpoint, Ignored, LinkType, Malformed};
use adaptation::Adaptation;
use fastpath::{Fastpath, FastpathNeeds};
use rules::{ClassId, RuleId, RuleSet};
use syn::{Keep, SynNode};

pub use config::{Config, WELL_KNOWN_HTTP_PORTS};
pub use fastpath::{FastpathUpdate, SynMode, FASTPATH_REFRESH};
pub use records::{conn_uid, DecisionRecord, ExchangeFacts, TlsRecord, TransactionRecord, UNPROVEN_EVENTS, UNPROVEN_FIELD, UNPROVEN_URIS};
pub use shard::{ClassSample, Sharding};
pub use stats::{Stats, TableSizes};

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

/// What the engine reports.
#[derive(Clone, Debug)]
pub enum Event {
    /// A finished HTTP transaction (when [`Config::transaction_records`] is on).
    Transaction(TransactionRecord),
    /// A finished pageview.
    Pageview(PageviewRecord),
    /// A TLS connection that ended (when [`Config::tls_records`] is on).
    Tls(TlsRecord),
    /// A rule acted: a SYN dropped (`DROP SYN`, or `LIMIT SYN` with an empty bucket), once per
    /// connection a SYN or SYN/ACK kept to send (`FAST SYN`, `DELAY FIRST SYN`, `FAST SYN/ACK`),
    /// once per reference a reference blanked or a request rewritten (`REMOVE EMBEDS`, `REWRITE
    /// EMBEDS`).
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

/// Why a frame goes no further.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DropCause {
    /// A client's own retransmission of a SYN rlm sends for it.
    SynAbsorbed,
    /// `DROP SYN`, or `LIMIT SYN` with an empty bucket.
    SynDropped,
    /// `DELAY FIRST SYN`: held back, sent later from its kept copy.
    SynDelayed,
    /// A server segment past a hole while a removal is under way.
    AheadOfHole,
    /// A request `REJECT` answered, and what came after it on its connection.
    Rejected,
}

/// What the stages decided about the frame being handled; its verdict is made from it once, in
/// [`Engine::handle_link`].
#[derive(Debug, Default)]
struct FrameOutcome {
    /// Why it goes no further, if it does not.
    drop: Option<DropCause>,
    /// Keep its frame, to send it again (the SYN and SYN/ACK nodes).
    keep: Option<(ConnId, Keep)>,
    /// Blanks to write into it (content adaptation).
    edits: Option<Vec<Edit>>,
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
    /// An `ABORT IDLE` connection's idle time may have run out.
    AbortIdle,
}

/// The engine.
pub struct Engine {
    cfg: Config,
    flows: FlowTable<Analyzer>,
    pageviews: Pageviews,
    timers: BinaryHeap<Reverse<(Timestamp, ConnId, TimerKind)>>,
    /// The heap's size after its last compaction ([`Engine::push_timer`]).
    timers_compacted: usize,
    /// The next look at the class statistics without a packet ([`FASTPATH_REFRESH`]).
    next_refresh: Option<Timestamp>,
    events: VecDeque<Event>,
    transmits: VecDeque<Transmit>,
    stats: Stats,
    last_now: Timestamp,
    /// The request headers the rules in force test (`RuleSet::headers_used`), kept in the heads
    /// of the requests of connections opened since they came into force.
    keep_headers: Option<crate::http::KeepHeaders>,
    /// Connections whose request `REJECT` answered (the server reset, the client answered and
    /// sent a FIN): the sequence number of the appliance's next byte to the client.
    rejected: ahash::AHashMap<ConnId, u32>,
    /// Connections whose last request an `ABORT IDLE` fired at: how long they may be idle after
    /// its response, and the rule.
    abort_idle: ahash::AHashMap<ConnId, (std::time::Duration, RuleId)>,
    /// `REJECT` (or what answers or closes in the server's stead: `LIMIT REQUESTS`, the SLA
    /// controller, `ABORT IDLE`) is in the rules and carried out: the link addresses of the ends
    /// are learnt.
    rejecting: bool,
    policy: Option<Policy>,
    fastpath: Option<Fastpath>,
    /// The SYN and SYN/ACK nodes' state.
    syn: SynNode,
    /// Content adaptation's state.
    adapt: Adaptation,
    /// The bytes connections hold for later, against `max_held_bytes`.
    held: budget::Held,
    /// The rate of records of unproven things ([`Config::unproven_records_per_s`]).
    unproven: records::UnprovenRecords,
    /// QUIC's flows on the servers' UDP ports, counted.
    quic: crate::quic::QuicFlows<ClassId>,
    /// Rule sets put in force ([`Engine::set_rules`]): the numbering a class id belongs to.
    rule_sets: u64,
    /// The samples this engine's pageviews gave the class windows, kept for the engines side by
    /// side with it ([`Engine::share_class_samples`]); None: not shared.
    shared_samples: Option<Vec<ClassSample>>,
}

impl Engine {
    /// An engine configured by `cfg`, tracking nothing, with no rules in force (every malformed and
    /// ignored reason counted from zero).
    pub fn new(cfg: Config) -> Engine {
        let mut stats = Stats::default();
        for m in Malformed::ALL {
            stats.malformed.insert(m.name(), 0);
        }
        for i in Ignored::ALL {
            stats.ignored.insert(i.name(), 0);
        }
        for b in crate::tls::TlsBad::ALL.iter().map(|b| b.name()).chain(["server_not_tls"]) {
            stats.tls_bad.insert(b, 0);
        }
        // Compacted at twice the connections plus 4,096 (`push_timer`): reserved whole, so that
        // it never doubles in one call.
        let timers = BinaryHeap::with_capacity(2 * cfg.max_connections.max(1) + 4097);
        Engine {
            flows: FlowTable::new(cfg.max_connections),
            pageviews: Pageviews::new(cfg.pageview.clone()),
            syn: SynNode::new(cfg.inject_budget.clone(), cfg.fast_release_per_s),
            unproven: records::UnprovenRecords::new(cfg.unproven_records_per_s),
            quic: Default::default(),
            cfg,
            timers,
            timers_compacted: 0,
            next_refresh: None,
            events: VecDeque::new(),
            transmits: VecDeque::new(),
            stats,
            last_now: Timestamp::ZERO,
            keep_headers: None,
            rejected: ahash::AHashMap::new(),
            abort_idle: ahash::AHashMap::new(),
            rejecting: false,
            policy: None,
            fastpath: None,
            adapt: Adaptation::default(),
            held: budget::Held::default(),
            rule_sets: 0,
            shared_samples: None,
        }
    }

    /// The next frame to send, if any ([`Config::inject`]).
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    /// Make [`FastpathUpdate`]s for a kernel fast path (the inline driver), starting with the
    /// current SYN mode.
    pub fn enable_fastpath(&mut self) {
        self.fastpath = Some(Fastpath::new(self.fastpath_needs()));
        self.note_fastpath();
        self.arm_refresh();
    }

    /// Make [`FastpathUpdate::ResponseSize`] and [`FastpathUpdate::FlowEnd`] for the kernel's
    /// SRPT classifier (after [`Engine::enable_fastpath`]; IPv4 connections only).
    pub fn enable_srpt(&mut self) {
        if let Some(fp) = self.fastpath.as_mut() {
            fp.srpt = true;
        }
    }

    /// Make [`FastpathUpdate::BodyUnread`]: where the body of a response nothing reads ends, so
    /// that the kernel reports its segments cut to their headers (after
    /// [`Engine::enable_fastpath`]; IPv4 connections only).
    pub fn enable_body_cuts(&mut self) {
        if let Some(fp) = self.fastpath.as_mut() {
            fp.cut_bodies = true;
        }
    }

    fn fastpath_needs(&self) -> FastpathNeeds {
        FastpathNeeds::of(self.policy.as_ref(), self.cfg.adapt, self.cfg.reject)
    }

    /// The next update for the kernel fast path, if any.
    pub fn poll_fastpath(&mut self) -> Option<FastpathUpdate> {
        self.fastpath.as_mut()?.pop()
    }

    /// Queue a [`FastpathUpdate::Mode`] if the SYN mode or generation changed.
    fn note_fastpath(&mut self) {
        if let Some(fp) = self.fastpath.as_mut() {
            fp.note(self.policy.as_ref());
        }
    }

    /// With a fast path and rules in force, look at the class statistics again
    /// [`FASTPATH_REFRESH`] from now.
    fn arm_refresh(&mut self) {
        self.next_refresh = (self.fastpath.is_some() && self.policy.is_some()).then(|| self.last_now + FASTPATH_REFRESH);
    }

    /// A client's SYN that a kernel fast path already decided (passed or dropped) on a
    /// [`FastpathUpdate::SynVerdict`]: accounted as [`Engine::handle_link`] would, without deciding
    /// again.
    pub fn handle_decided(&mut self, now: Timestamp, port: Port, link: LinkType, frame: &[u8], decision: SynDecision) {
        self.handle_frame(now, port, link, frame, frame.len(), Some(decision));
    }

    /// Put a rule set in force (or none). Flows, pageviews and class statistics carry over: a
    /// reload loses nothing.
    pub fn set_rules(&mut self, rules: Option<RuleSet>) {
        self.rule_sets += 1;
        match (rules, self.policy.as_mut()) {
            (Some(r), Some(p)) => p.replace_rules(r),
            (Some(r), None) => {
                let mut p = Policy::new(r, self.cfg.class_window);
                p.inject_carried_out = self.cfg.inject;
                p.adapt_carried_out = self.cfg.adapt;
                p.reject_carried_out = self.cfg.reject;
                self.policy = Some(p);
            }
            (None, _) => self.policy = None,
        }
        self.quic.on_rules();
        let p = self.policy.as_ref();
        let keep = p.map(|p| p.rules().headers_used()).unwrap_or_default();
        self.keep_headers = (!keep.is_empty()).then(|| std::sync::Arc::new(keep.into_iter().map(String::into_boxed_str).collect()));
        self.syn.injecting = p.is_some_and(Policy::injects);
        self.syn.injecting_synack = p.is_some_and(Policy::injects_at_synack);
        self.rejecting = self.cfg.reject && p.is_some_and(Policy::at_requests);
        self.adapt.on_rules(p);
        let needs = self.fastpath_needs();
        if let Some(fp) = self.fastpath.as_mut() {
            fp.on_rules(needs);
        }
        self.note_fastpath();
        self.arm_refresh();
    }

    /// The rules in force and their state.
    pub fn policy(&self) -> Option<&Policy> {
        self.policy.as_ref()
    }

    /// The configuration the engine was made with.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The counters.
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
        let (open_pageviews, pageview_deadlines, client_rtts, pending_acts) = self.pageviews.table_sizes();
        TableSizes {
            connections: self.flows.len(),
            timers: self.timers.len(),
            open_pageviews,
            pageview_deadlines,
            client_rtts,
            pending_acts,
            held_bytes: self.held_bytes(),
            pageview_list_bytes: self.pageviews.list_bytes(),
            quic_flows: self.quic.len(),
            body_cuts: self.fastpath.as_ref().map_or(0, |f| f.cuts()),
        }
    }

    /// Rule `rule` took `action` (as the rule language spells it) on connection `id`, on the
    /// reference `target` if any: its decision record, with the connection's class read again.
    fn record_decision(&mut self, now: Timestamp, id: ConnId, rule: RuleId, action: &'static str, target: Option<String>) {
        let (Some(policy), Some(c)) = (self.policy.as_ref(), self.flows.get(id)) else { return };
        let class = policy.classify(c.client.into(), c.server.into());
        let record = DecisionRecord { target, ..DecisionRecord::of(policy, now, rule, action, class, c.client, c.server) };
        self.events.push_back(Event::Decision(record));
    }

    /// rlm acted on connection `id`'s handshake (a SYN absorbed, delayed or resent, a SYN/ACK
    /// resent): counted for the pageview the connection serves. Not on a connection already
    /// closed: its acts went to a pageview, or were let go, at the close (so that they never
    /// outlive it).
    fn count_conn_act(&mut self, id: ConnId, act: impl FnOnce(&mut Acts)) {
        if self.flows.get(id).is_some_and(|c| c.state != ConnState::Closed) {
            self.pageviews.on_conn_act(id, act);
        }
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
            let half_open = |id: &ConnId| flows.get(*id).is_some_and(|c| matches!(c.state, ConnState::SynSent | ConnState::SynReceived));
            self.timers
                .retain(|Reverse((_, id, kind))| matches!(kind, TimerKind::Idle | TimerKind::AbortIdle) && flows.get(*id).is_some() || half_open(id));
            self.timers_compacted = self.timers.len();
            self.syn.retain(half_open);
        }
    }

    /// An Ethernet frame arrived on `port` at `now`.
    pub fn handle(&mut self, now: Timestamp, port: Port, frame: &[u8]) -> Verdict {
        self.handle_link(now, port, LinkType::Ethernet, frame)
    }

    /// A frame of the given link type arrived on `port` at `now`.
    pub fn handle_link(&mut self, now: Timestamp, port: Port, link: LinkType, frame: &[u8]) -> Verdict {
        self.handle_frame(now, port, link, frame, frame.len(), None)
    }

    /// A frame the wire carried `wire_len` bytes long, of which only the first `frame.len()`
    /// reached rlm (a fast path's report cut at its copy limit, a GRO/GSO super-frame): its
    /// headers are read from what came ([`wire::decode_cut`]) and the payload that did not
    /// come is counted by its length, at this time, so that transactions and pageviews are
    /// measured as from the whole frame; references in the unseen part of a container are not
    /// listed (its list is then not trusted). The frame itself went on: this is measurement
    /// only, and the verdict is always to accept. A whole frame (`wire_len <= frame.len()`) is
    /// [`Engine::handle_link`]'s.
    pub fn handle_cut(&mut self, now: Timestamp, port: Port, link: LinkType, frame: &[u8], wire_len: usize) -> Verdict {
        if wire_len <= frame.len() {
            return self.handle_link(now, port, link, frame);
        }
        self.stats.cut_frames += 1;
        self.handle_frame(now, port, link, frame, wire_len, None);
        Verdict::Accept
    }

    /// Time never runs backwards for the engine, whatever the capture says.
    fn advance(&mut self, now: Timestamp) -> Timestamp {
        self.last_now = now.max(self.last_now);
        self.last_now
    }

    fn handle_frame(&mut self, now: Timestamp, port: Port, link: LinkType, frame: &[u8], wire_len: usize, decided: Option<SynDecision>) -> Verdict {
        self.stats.frames += 1;
        self.stats.bytes += wire_len.max(frame.len()) as u64;
        let now = self.advance(now);
        let verdict = match wire::decode_cut(link, frame, wire_len) {
            Decoded::Tcp(seg) => {
                self.stats.tcp_segments += 1;
                if (self.syn.injecting || self.rejecting) && seg.flags.syn {
                    self.syn.links.learn(link, frame, &seg);
                }
                let out = self.on_segment(now, port, &seg, decided);
                self.verdict_of(now, out, link, frame)
            }
            Decoded::Udp(d) => {
                self.on_datagram(now, &d);
                Verdict::Accept
            }
            Decoded::Ignored(i) => {
                *self.stats.ignored.entry(i.name()).or_default() += 1;
                Verdict::Accept
            }
            Decoded::Malformed(m) => {
                *self.stats.malformed.entry(m.name()).or_default() += 1;
                Verdict::Accept
            }
        };
        self.control(now);
        self.note_fastpath();
        verdict
    }

    /// A UDP datagram: QUIC's when it is to or from a server's port (any port when none is
    /// configured: [`crate::quic::QUIC_PORT`]), counted for its flow and the client's class.
    fn on_datagram(&mut self, now: Timestamp, d: &Datagram) {
        let quic_port = |p: u16| if self.cfg.server_ports.is_empty() { p == crate::quic::QUIC_PORT } else { self.is_server_port(p) };
        let (client, server, from_client) = match (quic_port(d.src.port), quic_port(d.dst.port)) {
            (_, true) => (d.src, d.dst, true),
            (true, false) => (d.dst, d.src, false),
            (false, false) => {
                *self.stats.ignored.entry(Ignored::NotTcp.name()).or_default() += 1;
                return;
            }
        };
        let policy = self.policy.as_ref();
        let seen = self.quic.on_datagram(&mut self.stats.quic, now, client, server, from_client, d.payload, d.payload_len, || {
            policy.map(|p| p.classify(client.into(), server.into()))
        });
        if let (Some(p), Some(class)) = (self.policy.as_mut(), seen.class) {
            if let Some(c) = p.class_counters.get_mut(class.index()) {
                c.quic_flows += u64::from(seen.new_flow);
                c.quic_bytes += u64::from(d.payload_len);
            }
        }
    }

    /// The frame's verdict, made once from what the stages decided: a frame some stage stops
    /// is dropped (a `DELAY FIRST SYN` whose frame could not be kept goes on instead, rather
    /// than be lost); one with blanks goes on as a rewritten copy; the rest as they are.
    fn verdict_of(&mut self, now: Timestamp, out: FrameOutcome, link: LinkType, frame: &[u8]) -> Verdict {
        let mut drop = out.drop;
        if let Some((id, keep)) = out.keep {
            if !self.keep_frame(now, id, keep, link, frame) && drop == Some(DropCause::SynDelayed) {
                drop = None;
            }
        }
        match (drop, out.edits) {
            (Some(_), _) => Verdict::Drop,
            (None, Some(edits)) => adaptation::write_blanks(&mut self.stats, link, frame, &edits).map_or(Verdict::Accept, Verdict::Replace),
            (None, None) => Verdict::Accept,
        }
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When the engine next needs [`Engine::handle_timeout`]: the engine's one clock (timers,
    /// pageview deadlines, and with a fast path the next look at the class statistics).
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        let timer = self.timers.peek().map(|Reverse((t, _, _))| *t);
        let control = self.policy.as_ref().and_then(|p| p.controller()).and_then(|c| c.next_step());
        [timer, self.pageviews.next_deadline(), self.next_refresh, control].into_iter().flatten().min()
    }

    /// Time passed: fire every deadline up to `now`. A timer that firing re-arms at `now` or
    /// before (only when time has stopped at the largest timestamp, where `now + gap` is `now`)
    /// waits for the next call: each call pops at most the timers there were when it began.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        let now = self.advance(now);
        let mut budget = self.timers.len();
        while let Some(Reverse((t, id, kind))) = self.timers.peek().copied() {
            if t > now || budget == 0 {
                break;
            }
            budget -= 1;
            self.timers.pop();
            let Some(c) = self.flows.get(id) else {
                continue;
            };
            match kind {
                TimerKind::Connect => {
                    if matches!(c.state, ConnState::SynSent | ConnState::SynReceived) {
                        self.remove_conn(t, id, CloseReason::ConnectTimeout);
                    }
                }
                TimerKind::FastSyn => self.fast_syn_due(now, id),
                TimerKind::FastSynAck => self.fast_synack_due(now, id),
                TimerKind::AbortIdle => self.abort_idle_due(now, id),
                TimerKind::Idle => {
                    let limit = if c.state == ConnState::Closed { self.cfg.closed_linger } else { self.cfg.idle_timeout };
                    let due = c.last_seen + limit;
                    if due <= now {
                        self.remove_conn(now, id, CloseReason::Idle);
                    } else {
                        self.push_timer(due, id, TimerKind::Idle);
                    }
                }
            }
        }
        self.pageviews.on_timeout(now);
        self.collect_pageviews();
        self.control(now);
        if self.next_refresh.is_some_and(|t| t <= now) {
            // Windows slide and FOR tests settle without a packet.
            if let Some(p) = self.policy.as_mut() {
                p.refresh(now);
            }
            self.arm_refresh();
        }
        self.note_fastpath();
    }

    /// Step the SLA controller, if the rules have one and its period has passed, with the ages
    /// of each class's pageviews in flight.
    fn control(&mut self, now: Timestamp) {
        let Some(p) = self.policy.as_mut() else { return };
        if p.controller().is_none_or(|c| c.next_step().is_some_and(|t| now < t)) {
            return;
        }
        let ages: Vec<(rules::ClassId, f64)> =
            self.pageviews.in_flight_ages(now).map(|(client, server, host, age)| (records::pageview_class(p, client, server, host), age)).collect();
        p.control(now, |class| ages.iter().filter(|(c, _)| *c == class).map(|(_, a)| *a).collect());
    }

    /// Shut down: close every connection and pageview, reporting what they have.
    pub fn shutdown(&mut self, now: Timestamp) {
        let now = self.advance(now);
        self.handle_timeout(now);
        for id in self.flows.ids() {
            self.remove_conn(now, id, CloseReason::Shutdown);
        }
        self.timers.clear();
        self.next_refresh = None;
        self.pageviews.finish_all();
        self.collect_pageviews();
    }

    /// The client address of a tracked connection (for drivers and tests).
    pub fn client_of_conn(&self, a: Endpoint, b: Endpoint) -> Option<IpAddr> {
        self.flows.lookup(a, b).and_then(|id| self.flows.get(id)).map(|c| c.client.ip)
    }
}
