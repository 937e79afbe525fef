//! The engine with rules in force, configured from the input: its servers' ports, a table of 4
//! to 64 connections, injection and adaptation on unless the input turns them off, tight
//! limits or the defaults, the fast path enabled (SRPT too, if asked). The rules are one of the
//! rule files ([`crate::rulefiles`]) or the input's own text when it compiles. Operations:
//! segments of 16 connections (12 hosts, IPv4 and IPv6) on the port their direction comes in
//! on, whole or cut, at increasing times; SYNs the fast path decided (`handle_decided`, with any
//! rule number); ticks; the next deadline (`handle_timeout`); a reload of the rules.
//!
//! After every operation the engine's tables stay within the configured bounds
//! (`table_sizes`), a rewritten frame is as long as the one given and a well-formed segment
//! with good checksums, and every frame the engine sends decodes with good IPv4 and TCP checksums.

use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};
use rlm_core::engine::TableSizes;
use rlm_core::policy::SynDecision;
use rlm_core::wire::LinkType;
use rlm_core::{Config, Engine, Port, Timestamp, Verdict};

use crate::net::{self, Seg, Seqs, CLIENT_HOSTS, SYN};
use crate::rulefiles;
use crate::seed::Enc;

/// The engine's configuration and rules.
#[derive(Arbitrary, Clone, Debug, PartialEq)]
pub struct Setup {
    /// The servers' ports: one of [`PORT_SETS`].
    pub ports: u8,
    /// `max_connections` is 4 + this % 61.
    pub max_connections: u8,
    /// Bits: [`NO_INJECT`], [`NO_ADAPT`], [`TIGHT`], [`NO_FASTPATH`], [`SRPT`].
    pub flags: u8,
    /// Rule file `rules`; past the last, `text` if it compiles (else rule file `rules % COUNT`).
    pub rules: u8,
    pub text: Vec<u8>,
}

pub const NO_INJECT: u8 = 1;
pub const NO_ADAPT: u8 = 2;
pub const TIGHT: u8 = 4;
pub const NO_FASTPATH: u8 = 8;
pub const SRPT: u8 = 16;

/// The servers' ports a setup may give (none: any port, HTTP found by its first bytes).
pub const PORT_SETS: &[&[u16]] = &[&[80], &[80, 8080], &[8080], &[]];

/// One operation.
#[derive(Arbitrary, Clone, Debug, PartialEq)]
pub enum Op {
    /// A segment of connection `conn % 16` to server port `server_port` (an index into the
    /// setup's ports; with none, 80 or 5000).
    Segment {
        conn: u8,
        to_server: bool,
        server_port: u8,
        seq_delta: i16,
        ack_delta: i16,
        flags: u8,
        snippet: u8,
        payload: Vec<u8>,
        cut: Option<(u16, u16)>,
    },
    /// Connection `conn`'s SYN, decided by the fast path: passed, or dropped by rule `rule`
    /// (limited or not).
    Decided {
        conn: u8,
        server_port: u8,
        drop: Option<(u8, bool)>,
    },
    Tick {
        ms: u16,
    },
    /// Time jumps to the next deadline, if any, and it fires.
    Timeout,
    /// The rules are put in force again (rule file `rules`).
    Reload {
        rules: u8,
    },
}

/// The input: the setup, then the operations.
#[derive(Arbitrary, Clone, Debug, PartialEq)]
pub struct Input {
    pub setup: Setup,
    pub ops: Vec<Op>,
}

fn config(s: &Setup) -> Config {
    let mut cfg = Config {
        server_ports: PORT_SETS[usize::from(s.ports) % PORT_SETS.len()].to_vec(),
        max_connections: 4 + usize::from(s.max_connections) % 61,
        inject: s.flags & NO_INJECT == 0,
        adapt: s.flags & NO_ADAPT == 0,
        ..Config::default()
    };
    if s.flags & TIGHT != 0 {
        cfg.idle_timeout = Duration::from_secs(2);
        cfg.closed_linger = Duration::from_millis(500);
        cfg.fast_limit = 3;
        cfg.class_window = Duration::from_secs(2);
        cfg.inject_budget.burst = 4.0;
        cfg.inject_budget.per_handshake = 2.0;
        cfg.inject_budget.max_per_s = 20.0;
        cfg.inject_budget.max_pending = 4;
        let pv = &mut cfg.pageview;
        pv.connect_timeout = Duration::from_secs(3);
        pv.max_open_per_client = 2;
        pv.max_events = 16;
        pv.max_client_rtts = 4;
        pv.max_conns = 4;
        pv.max_txns = 8;
        pv.max_expected = 8;
        pv.max_referrers = 2;
    }
    cfg
}

fn rules_of(s: &Setup) -> rules::RuleSet {
    let i = usize::from(s.rules);
    if i < rulefiles::COUNT {
        return rulefiles::compiled(i);
    }
    rules::compile("fuzz.rlm", &String::from_utf8_lossy(&s.text)).unwrap_or_else(|_| rulefiles::compiled(i))
}

/// Why `s` is past the bounds `cfg` sets, if it is.
fn out_of_bounds(cfg: &Config, s: &TableSizes) -> Option<&'static str> {
    let max = cfg.max_connections;
    let open = CLIENT_HOSTS * cfg.pageview.max_open_per_client;
    // A compaction keeps the timers of live connections (a few each) and runs when the heap
    // passes twice what it kept, plus 4096.
    let timers = 2 * (8 * max) + 4096 + 1;
    // A compaction keeps one deadline per open pageview and runs past max(4 open, 2 kept) + 1024.
    let deadlines = 4 * open + 1024 + 1;
    [
        (s.connections > max, "connections past max_connections"),
        (s.pending_acts > s.connections, "pending acts past the connections"),
        (s.client_rtts > cfg.pageview.max_client_rtts, "client RTTs past max_client_rtts"),
        (s.open_pageviews > open, "open pageviews past max_open_per_client per host"),
        (s.pageview_deadlines > deadlines, "pageview deadlines past their compaction bound"),
        (s.timers > timers, "timers past their compaction bound"),
    ]
    .into_iter()
    .find_map(|(bad, why)| bad.then_some(why))
}

/// The target.
pub fn engine_rules(data: &[u8]) {
    let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) else { return };
    let cfg = config(&input.setup);
    let ports = if cfg.server_ports.is_empty() { vec![80, 5000] } else { cfg.server_ports.clone() };
    let mut e = Engine::new(cfg.clone());
    e.set_rules(Some(rules_of(&input.setup)));
    if input.setup.flags & NO_FASTPATH == 0 {
        e.enable_fastpath();
        if input.setup.flags & SRPT != 0 {
            e.enable_srpt();
        }
    }
    let mut now = 1_000_000_000u64;
    let mut seqs = Seqs::default();
    for (n, op) in input.ops.iter().take(2000).enumerate() {
        match op {
            Op::Segment { conn, to_server, server_port, seq_delta, ack_delta, flags, snippet, payload, cut } => {
                let server_port = ports[usize::from(*server_port) % ports.len()];
                let s = Seg {
                    conn: *conn,
                    to_server: *to_server,
                    server_port,
                    seq_delta: *seq_delta,
                    ack_delta: *ack_delta,
                    flags: *flags,
                    snippet: *snippet,
                    payload,
                };
                let frame = seqs.frame(LinkType::Ethernet, s);
                let port = if *to_server { Port::Client } else { Port::Server };
                match cut {
                    None => {
                        if let Verdict::Replace(b) = e.handle(Timestamp(now), port, &frame) {
                            assert_eq!(b.len(), frame.len(), "op {n}: a rewritten frame of another length");
                            if let Err(why) = net::check_tcp(LinkType::Ethernet, &b) {
                                panic!("op {n}: a rewritten frame {why}: {b:02x?}");
                            }
                        }
                    }
                    Some((keep, more)) => {
                        let keep = usize::from(*keep).min(frame.len());
                        let v = e.handle_cut(Timestamp(now), port, LinkType::Ethernet, &frame[..keep], frame.len() + usize::from(*more));
                        assert!(*more == 0 && keep == frame.len() || v == Verdict::Accept, "op {n}: a cut frame not accepted: {v:?}");
                    }
                }
            }
            Op::Decided { conn, server_port, drop } => {
                let server_port = ports[usize::from(*server_port) % ports.len()];
                let s = Seg { conn: *conn, to_server: true, server_port, seq_delta: 0, ack_delta: 0, flags: SYN, snippet: u8::MAX, payload: &[] };
                let frame = seqs.frame(LinkType::Ethernet, s);
                let d = match drop {
                    None => SynDecision::Pass,
                    Some((rule, limited)) => SynDecision::Drop { rule: rules::RuleId(u32::from(*rule)), limited: *limited },
                };
                e.handle_decided(Timestamp(now), Port::Client, LinkType::Ethernet, &frame, d);
            }
            Op::Tick { ms } => {
                now += u64::from(*ms) * 1_000_000;
                while let Some(t) = e.poll_timeout() {
                    if t.as_nanos() > now {
                        break;
                    }
                    e.handle_timeout(t);
                }
            }
            Op::Timeout => {
                if let Some(t) = e.poll_timeout() {
                    now = now.max(t.as_nanos());
                    e.handle_timeout(Timestamp(now));
                }
            }
            Op::Reload { rules } => e.set_rules(Some(rulefiles::compiled(usize::from(*rules)))),
        }
        now += 1_000;
        while e.poll_event().is_some() {}
        while e.poll_fastpath().is_some() {}
        while let Some(t) = e.poll_transmit() {
            if let Err(why) = net::check_tcp(LinkType::Ethernet, &t.frame) {
                panic!("op {n}: a frame sent {why}: {:02x?}", t.frame);
            }
        }
        let sizes = e.table_sizes();
        if let Some(why) = out_of_bounds(&cfg, &sizes) {
            panic!("op {n}: {why}: {sizes:?}");
        }
    }
    e.shutdown(Timestamp(now));
    while e.poll_event().is_some() {}
}

/// `input` in the bytes [`engine_rules`] reads it from.
pub fn encode(input: &Input) -> Vec<u8> {
    let mut w = Enc::default();
    let s = &input.setup;
    w.u8(s.ports).u8(s.max_connections).u8(s.flags).u8(s.rules).bytes(&s.text);
    for op in &input.ops {
        w.more();
        match op {
            Op::Segment { conn, to_server, server_port, seq_delta, ack_delta, flags, snippet, payload, cut } => w
                .variant(0, 5)
                .u8(*conn)
                .bool(*to_server)
                .u8(*server_port)
                .i16(*seq_delta)
                .i16(*ack_delta)
                .u8(*flags)
                .u8(*snippet)
                .bytes(payload)
                .opt_u16_pair(*cut),
            Op::Decided { conn, server_port, drop } => {
                w.variant(1, 5).u8(*conn).u8(*server_port);
                match drop {
                    None => w.bool(false),
                    Some((rule, limited)) => w.bool(true).u8(*rule).bool(*limited),
                }
            }
            Op::Tick { ms } => w.variant(2, 5).u16(*ms),
            Op::Timeout => w.variant(3, 5),
            Op::Reload { rules } => w.variant(4, 5).u8(*rules),
        };
    }
    w.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoded_inputs_decode_to_themselves() {
        let input = Input {
            setup: Setup { ports: 1, max_connections: 9, flags: TIGHT | SRPT, rules: 200, text: b"IF RT > 1s THEN DROP SYN".to_vec() },
            ops: vec![
                Op::Segment {
                    conn: 1,
                    to_server: true,
                    server_port: 0,
                    seq_delta: 0,
                    ack_delta: 0,
                    flags: SYN,
                    snippet: 255,
                    payload: vec![],
                    cut: None,
                },
                Op::Decided { conn: 2, server_port: 1, drop: Some((3, true)) },
                Op::Decided { conn: 2, server_port: 1, drop: None },
                Op::Tick { ms: 3 },
                Op::Timeout,
                Op::Reload { rules: 4 },
            ],
        };
        assert_eq!(Input::arbitrary_take_rest(Unstructured::new(&encode(&input))).unwrap(), input);
    }
}
