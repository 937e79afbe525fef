//! A finished pageview as reported: its times, counts, event graph (004 Figure 3) and the
//! critical-path breakdown of its response time (004 Figure 2).

use std::time::Duration;

use serde::Serialize;

use super::open::{Acts, OpenPv, PvConn, PvTxn};
use super::PageviewConfig;
use crate::time::{Timestamp, UnixMicros};

/// A node of the pageview's event graph (004 Figure 3).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct EventNode {
    /// syn, syn_retransmit, synack, synack_retransmit, ack, request, response_head, last_byte, conn_failed
    pub kind: &'static str,
    /// Index of the connection within the pageview.
    pub conn: u16,
    /// Seconds since the pageview's start (client's clock).
    pub t_s: f64,
    /// The request target, as sent (`request` nodes only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
}

/// A finished pageview, as reported.
#[derive(Clone, Debug, Serialize)]
pub struct PageviewRecord {
    /// The pageview's number, from 1 in the order pageviews began.
    pub id: u64,
    /// The client's IP address.
    pub client: String,
    /// The host its first request named (the Host header, else the server's `ip:port`).
    pub host: Option<String>,
    /// The target of its first request (the container), as sent.
    pub container: Option<String>,
    /// When it began on the client's clock, in seconds since the driver's epoch (Unix time for
    /// captures): the first request's connection's first SYN (when that request was the
    /// connection's first and followed its handshake within `preconnect_idle`), else the request,
    /// less half the RTT.
    pub start_ts: f64,
    /// When it ended on the client's clock, in seconds like `start_ts`: the last response byte of
    /// the transactions that count (icons do not) plus half the RTT, or when the client gave up on
    /// a failed connection.
    pub end_ts: f64,
    /// The response time the client saw: `end_ts - start_ts`, in seconds.
    pub rt_s: f64,
    /// Its transactions other than the container's (over TLS: the requests its exchanges are
    /// estimated to have carried, less the container).
    pub objects: u32,
    /// Read from encrypted exchanges (TLS): `host` is the SNI, `container` and `object_uris`
    /// are unknown, `objects` is estimated ([`crate::tls::exchange`]).
    pub tls: bool,
    /// Connections, requests and listed references left out of it past the per-pageview caps
    /// (`max_conns`, `max_txns`, `max_expected`, `max_referrers`): 0 for a browser's page; more
    /// says the client sent what no browser does, and the counts above stop at the caps.
    pub capped: u32,
    /// Their request targets, as sent, in request order.
    pub object_uris: Vec<String>,
    /// References the container (and its stylesheets and frames) listed that a browser always
    /// fetches.
    pub expected_objects: u32,
    /// SYN retransmissions on its connections.
    pub syn_retransmissions: u32,
    /// Its connections whose handshake failed (timed out or refused).
    pub failed_connections: u32,
    /// Connections it used or opened while it was active.
    pub connections: u32,
    /// T_conn along the critical path (004 Figure 2): time in handshakes and failed connection
    /// attempts, in seconds.
    pub t_conn_s: f64,
    /// T_server along the critical path: from each request to its first response byte, in seconds.
    pub t_server_s: f64,
    /// T_transfer along the critical path: from each first response byte to the last, in seconds.
    pub t_transfer_s: f64,
    /// Its event graph (004 Figure 3), in time order: at most `max_events` nodes (none at 0).
    pub events: Vec<EventNode>,
    /// The server of its first request ("ip:port"), when it made one.
    pub server: Option<String>,
    /// The service class of its client, when a rule file is in force.
    pub class: Option<String>,
    /// When it entered its class's window of response times (and `RT.ALL`'s), in Unix seconds to
    /// the microsecond like a decision's `ts`: the pageviews behind a decision's aggregate are
    /// those of its class with `window_ts` in `[ts - window_s, ts]`. `None` when it entered none
    /// (no rule file in force, or incomplete).
    pub window_ts: Option<UnixMicros>,
    /// What rlm did to its connections and references (all zero when it did nothing).
    pub actions: Acts,
    /// What shows its client is real, without which it enters no class statistics
    /// (docs/architecture.md, "Evidence").
    pub evidence: Evidence,
    /// Cut off by the end of the capture (or a shutdown) with something still in flight:
    /// a transaction unanswered, a handshake pending or listed objects not yet fetched.
    /// Its `rt_s` is a lower bound; summaries leave it out of the response-time statistics.
    pub incomplete: bool,
}

/// What shows that a pageview's client is real and not a spoofed address: a pageview enters
/// its class's statistics only with some.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Evidence {
    /// One of its connections completed its handshake (the client's ACK of the server's
    /// SYN/ACK), or a request of it was answered.
    Handshake,
    /// rlm saw a handshake of its client complete recently (within `client_rtt_ttl`).
    Address,
    /// Its connections failed, and their SYNs show the client's retransmission schedule.
    Retransmissions,
    /// None of these: SYNs that were never answered nor resent (what a spoofer sends).
    None,
}

/// The record of a finished pageview (`incomplete`, `class` and `window_ts` are the caller's to
/// set).
pub(super) fn build_record(p: &OpenPv, cfg: &PageviewConfig) -> PageviewRecord {
    let end = client_end(p);
    let events = event_graph(p, cfg.max_events);
    let (t_conn, t_server, t_transfer) = critical_path(p);
    let objects: Vec<&PvTxn> = p.txns.iter().filter(|t| !t.container).collect();
    // Each transaction's requests (an encrypted exchange's estimate), less the container's (a
    // container asked again after its connection closed unanswered is asked twice).
    let requests: u32 = p.txns.iter().map(|t| t.requests).sum::<u32>().saturating_sub(p.txns.iter().filter(|t| t.container).count() as u32);
    PageviewRecord {
        id: p.id,
        client: p.client.to_string(),
        host: p.host.clone(),
        container: p.container.clone(),
        start_ts: p.start.as_secs_f64(),
        end_ts: end.as_secs_f64(),
        rt_s: end.saturating_since(p.start).as_secs_f64(),
        objects: requests,
        tls: p.encrypted,
        capped: p.capped,
        object_uris: objects.iter().filter(|t| !t.encrypted).map(|t| t.uri.clone()).collect(),
        expected_objects: p.expected.iter().filter(|e| e.required).count() as u32,
        syn_retransmissions: p.conns.iter().map(|c| c.syns.saturating_sub(1) as u32).sum(),
        failed_connections: p.conns.iter().filter(|c| c.failed_at.is_some()).count() as u32,
        connections: p.conns.len() as u32,
        t_conn_s: t_conn.as_secs_f64(),
        t_server_s: t_server.as_secs_f64(),
        t_transfer_s: t_transfer.as_secs_f64(),
        events,
        server: p.server.clone(),
        class: None,
        window_ts: None,
        actions: p.acts,
        evidence: evidence(p),
        incomplete: false,
    }
}

/// What the pageview itself shows of its client (`Address` is the tracker's to add): a
/// handshake or an answered request, else failures that are there only when proven.
pub(super) fn evidence(p: &OpenPv) -> Evidence {
    if p.conns.iter().any(|c| c.acked) || p.txns.iter().any(|t| t.response_first.is_some()) {
        Evidence::Handshake
    } else if p.conns.iter().any(|c| c.failed_at.is_some()) {
        Evidence::Retransmissions
    } else {
        Evidence::None
    }
}

/// Client-side end of the pageview, on the appliance's clock shifted by half an RTT.
fn client_end(p: &OpenPv) -> Timestamp {
    let mut end = p.start;
    for t in &p.txns {
        if !t.extends_end {
            continue;
        }
        let rtt = p.conns[t.conn as usize].rtt;
        if let Some(l) = t.response_last.or(t.response_first) {
            end = end.max(l + rtt / 2);
        }
    }
    for c in &p.conns {
        if let Some(f) = c.failed_at {
            end = end.max(f - c.rtt / 2);
        }
    }
    end
}

/// The pageview's event graph (004 Figure 3): its connections' handshake nodes and its
/// transactions' nodes, in time order on the client's clock, at most `max_events` of them.
fn event_graph(p: &OpenPv, max_events: usize) -> Vec<EventNode> {
    let rel = |t: Timestamp, c: &PvConn, outbound: bool| {
        let shifted = if outbound { t + c.rtt / 2 } else { t - c.rtt / 2 };
        shifted.saturating_since(p.start).as_secs_f64()
    };
    let mut events = Vec::new();
    // With `max_events` 0 (the inline driver, which keeps the response time only) no graph is made.
    let conns = if max_events == 0 { &p.conns[..0] } else { &p.conns[..] };
    for (i, c) in conns.iter().enumerate() {
        let i = i as u16;
        if let Some(s) = c.first_syn {
            events.push(EventNode { kind: "syn", conn: i, t_s: rel(s, c, false), uri: None });
        }
        // At most `max_events` of a kind a connection (they share one time, and the graph keeps
        // the earliest `max_events` nodes): 65,535 SYNs on one connection would otherwise make
        // as many nodes, for each of its pageview's connections, before the cut.
        for _ in (1..c.syns.max(1)).take(max_events) {
            events.push(EventNode { kind: "syn_retransmit", conn: i, t_s: rel(c.first_syn.unwrap_or(p.start), c, false), uri: None });
        }
        if let Some(s) = c.first_synack {
            events.push(EventNode { kind: "synack", conn: i, t_s: rel(s, c, true), uri: None });
            for _ in (1..c.synacks).take(max_events) {
                events.push(EventNode { kind: "synack_retransmit", conn: i, t_s: rel(s, c, true), uri: None });
            }
        }
        if let Some(e) = c.established {
            events.push(EventNode { kind: "ack", conn: i, t_s: rel(e, c, false), uri: None });
        }
        if let Some(f) = c.failed_at {
            events.push(EventNode { kind: "conn_failed", conn: i, t_s: rel(f, c, false), uri: None });
        }
    }
    let txns = if max_events == 0 { &p.txns[..0] } else { &p.txns[..] };
    for t in txns {
        let c = &p.conns[t.conn as usize];
        let uri = Some(t.uri.clone()).filter(|_| !t.encrypted);
        events.push(EventNode { kind: "request", conn: t.conn, t_s: rel(t.request_ts, c, false), uri });
        if let Some(f) = t.response_first {
            events.push(EventNode { kind: "response_head", conn: t.conn, t_s: rel(f, c, true), uri: None });
        }
        // An encrypted exchange's end is its last record seen, whether it is done or not.
        if let Some(l) = t.response_last.filter(|_| t.done || t.encrypted) {
            events.push(EventNode { kind: "last_byte", conn: t.conn, t_s: rel(l, c, true), uri: None });
        }
    }
    events.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
    events.truncate(max_events);
    events
}

/// T_conn, T_server and T_transfer along the critical path (004 Figure 2): walk back from whatever
/// ended last, through the transactions before it on its connection, its handshake, and the
/// transaction that made the browser open that connection. O(t log t) in its transactions: one
/// sort by end, then each step a search of it or of its connection's list.
fn critical_path(p: &OpenPv) -> (Duration, Duration, Duration) {
    let (mut conn, mut server, mut transfer) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let txn_end = |t: &PvTxn| t.response_last.or(t.response_first).unwrap_or(t.request_ts);
    // The transactions by end (ties in their order), for "the last to end by s".
    let mut by_end: Vec<(Timestamp, usize)> = p.txns.iter().enumerate().map(|(i, t)| (txn_end(t), i)).collect();
    by_end.sort_unstable();
    // The one that ended last by `s` on a connection other than `not_conn`: as
    // `max_by_key(end)` over the transactions in order would pick it (the last of equal ends).
    let last_by = |s: Timestamp, not_conn: Option<u16>| -> Option<usize> {
        let upto = by_end.partition_point(|(e, _)| *e <= s);
        by_end[..upto].iter().rev().map(|(_, i)| *i).find(|&i| Some(p.txns[i].conn) != not_conn)
    };
    // The item that ended last: a failed connection or a transaction.
    let last_txn = p.txns.iter().enumerate().filter(|(_, t)| t.extends_end).max_by_key(|(_, t)| txn_end(t)).map(|(i, _)| i);
    let last_fail = p.conns.iter().enumerate().filter_map(|(i, c)| c.failed_at.map(|f| (i, f))).max_by_key(|(_, f)| *f);
    let mut cursor: Option<usize> = last_txn;
    if let (Some((ci, f)), lt) = (last_fail, last_txn) {
        if lt.is_none_or(|t| f > txn_end(&p.txns[t])) {
            let c = &p.conns[ci];
            let s = c.first_syn.unwrap_or(f);
            conn += f.saturating_since(s);
            cursor = last_by(s, None);
        }
    }
    let mut guard = 0;
    while let Some(ti) = cursor {
        let t = &p.txns[ti];
        guard += 1;
        if guard > p.txns.len() + 1 {
            break;
        }
        if let Some(first) = t.response_first {
            server += first.saturating_since(t.request_ts);
            if let Some(l) = t.response_last {
                transfer += l.saturating_since(first);
            }
        }
        // The transaction before it on its connection, if any: the deepest that ended by its
        // request. A connection's list is in request order, which is depth order, so the first
        // found from its end is the deepest.
        let c = &p.conns[usize::from(t.conn)];
        let prev_same = c.txns.iter().rev().map(|&x| x as usize).find(|&x| p.txns[x].depth < t.depth && txn_end(&p.txns[x]) <= t.request_ts);
        if let Some(x) = prev_same {
            cursor = Some(x);
            continue;
        }
        if let (Some(s), Some(e)) = (c.first_syn, c.established) {
            conn += e.saturating_since(s);
            cursor = last_by(s, Some(t.conn));
        } else {
            cursor = None;
        }
    }
    (conn, server, transfer)
}
