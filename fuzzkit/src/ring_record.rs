//! Arbitrary bytes as the fast path's ring buffer: a sequence of records (`struct event`: a
//! header, then the frame cut at the copy limit, the next record 8-aligned after it), each read
//! with `Event::parse` and handed to an engine as `rlm run` hands it: an observed packet to
//! `Engine::handle_cut` with its length on the wire, a SYN the kernel passed or dropped (by
//! whatever rule number the record says) to `Engine::handle_decided`. Reading stops at the first
//! bytes that are not a record. Nothing may panic, and what the engine sends must decode with
//! good checksums.

use kmod_fastpath::ring::{Event, EventKind};
use rlm_core::policy::SynDecision;
use rlm_core::wire::LinkType;
use rlm_core::{Config, Engine, Port, Timestamp, Verdict};

use crate::{net, rulefiles};

/// Most records read from one input.
const MAX_RECORDS: usize = 2000;
/// The header's size (`offsetof(struct event, data)`).
const HEADER: usize = 24;

/// The engine `rlm run` would have: the servers' ports, injection and adaptation on, the fast
/// path enabled, rules that drop, limit and resend SYNs.
fn engine() -> Engine {
    let cfg = Config { server_ports: vec![80, 8080], max_connections: 16, inject: true, adapt: true, ..Config::default() };
    let mut e = Engine::new(cfg);
    e.set_rules(Some(rulefiles::compiled(rulefiles::RING_RULES)));
    e.enable_fastpath();
    e
}

/// The target: `data` as records.
pub fn ring_record(data: &[u8]) {
    let mut e = engine();
    let mut rest = data;
    for _ in 0..MAX_RECORDS {
        let Some(ev) = Event::parse(rest) else { break };
        assert!(ev.frame.len() <= rest.len() - HEADER);
        // As rlm run does: the deadlines passed by the record's time fire at that time, at once
        // (not one by one: with the fast path, one falls every 50 ms, and a record's time may
        // be centuries ahead).
        let ts = Timestamp(ev.ts_ns);
        if e.poll_timeout().is_some_and(|t| t <= ts) {
            e.handle_timeout(ts);
        }
        match ev.kind {
            EventKind::Observed { from_server } => {
                let port = if from_server { Port::Server } else { Port::Client };
                e.handle_cut(ts, port, LinkType::Ethernet, ev.frame, ev.wire_len as usize);
            }
            EventKind::SynPassed => e.handle_decided(ts, Port::Client, LinkType::Ethernet, ev.frame, SynDecision::Pass),
            EventKind::SynDropped { rule, limited } => {
                let d = SynDecision::Drop { rule: rules::RuleId(rule), limited };
                e.handle_decided(ts, Port::Client, LinkType::Ethernet, ev.frame, d);
            }
            EventKind::SynHeld { .. } => {
                // rlm sends on what the engine accepts or gives instead: a frame for the wire.
                if let Verdict::Replace(f) = e.handle_link(ts, Port::Client, LinkType::Ethernet, &ev.whole_frame()) {
                    if let Err(why) = net::check_tcp(LinkType::Ethernet, &f) {
                        panic!("a held SYN replaced by a frame that {why}: {f:02x?}");
                    }
                }
            }
        }
        drain(&mut e);
        let next = (HEADER + ev.frame.len()).next_multiple_of(8);
        rest = rest.get(next..).unwrap_or(&[]);
    }
    e.shutdown(Timestamp(u64::MAX / 2));
    drain(&mut e);
}

fn drain(e: &mut Engine) {
    while e.poll_event().is_some() {}
    while e.poll_fastpath().is_some() {}
    while let Some(t) = e.poll_transmit() {
        if let Err(why) = net::check_tcp(LinkType::Ethernet, &t.frame) {
            panic!("a frame sent {why}: {:02x?}", t.frame);
        }
    }
}

/// `events` as the ring would hold them, each 8-aligned.
pub fn encode(events: &[Event<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    for ev in events {
        out.extend_from_slice(&ev.to_bytes());
        out.resize(out.len().next_multiple_of(8), 0);
    }
    out
}
