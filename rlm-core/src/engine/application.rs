//! The application analyzer's events on a connection into the pageviews and the nodes that
//! act on them: requests and response heads (the request and response nodes, the SRPT sizes,
//! body cuts), finished transactions (records, learnt transfer sizes), TLS sessions and
//! exchanges. The segment's stage ([`super::segment`]) hands them over in order.

use std::net::SocketAddr;

use super::records::Writing;
use super::{Engine, Event, TimerKind, TlsRecord, TransactionRecord};
use crate::analyzer::{Analyzer, AppEvent};
use crate::flow::{Conn, ConnId};
use crate::http::{HttpEvent, Txn};
use crate::pageview::{Asked, RequestInfo};
use crate::time::Timestamp;
use crate::tls::exchange::ExchangeEvent;
use crate::tls::TlsEvent;

impl Engine {
    /// The application analyzer's events on a connection, in order: HTTP's into the pageviews
    /// and the response and request nodes, TLS's sessions into records. `window`: the server
    /// segment being handled ([`Engine::remove_embeds`]). Returns the depths of the requests
    /// whose heads completed, for a `REWRITE EMBEDS` (when one is in the rules).
    pub(super) fn process_app(
        &mut self,
        now: Timestamp,
        id: ConnId,
        evs: &mut Vec<AppEvent>,
        window: Option<(u32, u32)>,
    ) -> (Vec<u32>, Option<Rejection>) {
        let mut rewrite_due = Vec::new();
        let mut reject = None;
        let mut i = 0;
        while i < evs.len() {
            // Taken out in order; what follows stays readable (a transaction that ended in the
            // same segment is no longer on the connection, only in its `Done` further on).
            let ev = match std::mem::replace(&mut evs[i], AppEvent::Http(HttpEvent::Request { depth: 0 })) {
                AppEvent::Http(ev) => ev,
                AppEvent::Tls(TlsEvent::Session(s)) => {
                    i += 1;
                    self.tls_session(id, &s);
                    continue;
                }
                AppEvent::Tls(TlsEvent::Exchange(x)) => {
                    i += 1;
                    self.on_exchange(now, id, x, &evs[i..]);
                    continue;
                }
                AppEvent::Tls(TlsEvent::Handshake { done }) => {
                    i += 1;
                    self.pageviews.on_tls_handshake(now, id, !done);
                    continue;
                }
            };
            i += 1;
            match ev {
                HttpEvent::Request { depth } => {
                    reject = reject.or(self.on_request(now, id, depth));
                    if self.adapt.rewriting {
                        rewrite_due.push(depth);
                    }
                }
                HttpEvent::ResponseHead { depth } => self.on_response_head(now, id, depth, &evs[i..]),
                HttpEvent::Embeds { depth, mut refs } => {
                    if self.adapt.is_active() {
                        self.remove_embeds(now, id, depth, &mut refs, window);
                    }
                    self.pageviews.on_embeds(now, id, depth, &refs)
                }
                HttpEvent::BodyUnseen { depth } => self.pageviews.on_body_unseen(id, depth),
                HttpEvent::Done(txn) => {
                    self.adapt.txn_done(id, txn.depth);
                    self.txn_done(now, id, txn)
                }
            }
        }
        evs.clear();
        // An analyzer that gave up is dropped, counted once (a TLS one with its session).
        let gave_up = self.flows.get_mut(id).filter(|c| c.app.as_ref().is_some_and(Analyzer::gave_up)).and_then(|c| c.app.take());
        match gave_up {
            Some(Analyzer::Tls(mut t)) => {
                self.stats.connections_not_tls += 1;
                let mut sessions = Vec::new();
                t.close(&mut sessions);
                for ev in sessions {
                    if let TlsEvent::Session(s) = ev {
                        self.tls_session(id, &s);
                    }
                }
            }
            Some(_) => self.stats.connections_not_http += 1,
            None => {}
        }
        (rewrite_due, reject)
    }

    /// A TLS connection ended: counted, and its record reported when asked for.
    fn tls_session(&mut self, id: ConnId, s: &crate::tls::TlsSession) {
        self.stats.tls_connections += 1;
        if s.established {
            self.stats.tls_established += 1;
        }
        for bad in &s.bad {
            *self.stats.tls_bad.entry(bad).or_default() += 1;
        }
        if self.cfg.tls_records {
            let c = self.flows.get(id).expect("live");
            self.events.push_back(Event::Tls(TlsRecord::of(s, c.client, c.server, c.first_seen)));
        }
    }

    /// An exchange of encrypted records began, was answered (a server record), or ended: into
    /// the pageviews as a transaction whose request is the client's burst; its record reported
    /// when it ends. `rest`: the events after it from the same bytes (the connection's session,
    /// when it closed).
    fn on_exchange(&mut self, now: Timestamp, id: ConnId, ev: ExchangeEvent, rest: &[AppEvent]) {
        match ev {
            ExchangeEvent::Request { depth, at } => {
                let c = self.flows.get(id).expect("live");
                let Some(tls) = c.tls() else { return };
                let site = tls.session().server_name.as_deref().and_then(|s| std::str::from_utf8(s).ok());
                if let (Some(p), Some(site)) = (self.policy.as_mut(), site) {
                    p.learn_site(c.client.ip, site);
                }
                if self.adapt.edits_content() {
                    // REMOVE and REWRITE EMBEDS need the plaintext: not applicable here.
                    self.stats.adapt_not_applicable_tls += 1;
                }
                let info = request_info(c, id, depth, Asked::Encrypted { site }, at, tls.ready().or(c.hs.established));
                self.pageviews.on_request(now, &info);
            }
            ExchangeEvent::Response { depth, first, last, requests, .. } => self.pageviews.on_encrypted_response(id, depth, first, last, requests),
            ExchangeEvent::Held { depth, at } => self.pageviews.on_encrypted_held(id, depth, at),
            ExchangeEvent::Done(x) => {
                let pv = self.pageviews.on_txn_done(now, id, x.depth, x.response_first, x.response_last);
                self.stats.transactions += 1;
                self.stats.tls_exchanges += 1;
                if !self.cfg.transaction_records {
                    return;
                }
                let c = self.flows.get(id).expect("live");
                // Unanswered, on a connection the server never sent on: nothing shows it is real.
                let unproven = x.response_first.is_none() && !c.server_heard();
                let writing = self.unproven.writing(now, unproven, &mut self.stats.records_unproven_skipped);
                if writing == Writing::Skip {
                    return;
                }
                // The site from the connection's session, or, when it closed, from its record.
                let session = rest.iter().find_map(|e| match e {
                    AppEvent::Tls(TlsEvent::Session(s)) => Some(&**s),
                    _ => None,
                });
                let sni =
                    session.or(c.tls().map(|t| t.session())).and_then(|s| s.server_name.as_deref()).map(|s| String::from_utf8_lossy(s).into_owned());
                let mut record = TransactionRecord::of_exchange(&x, c.client, c.server, c.first_seen, sni, c.midstream, pv);
                if writing == Writing::Cut {
                    record.cut_unproven();
                }
                self.events.push_back(Event::Transaction(record));
            }
        }
    }

    /// A request's head: into the pageviews.
    fn on_request(&mut self, now: Timestamp, id: ConnId, depth: u32) -> Option<Rejection> {
        let c = self.flows.get(id).expect("live");
        let txn = c.http().and_then(|h| h.txn(depth))?;
        let head = txn.request.as_ref()?;
        if let (Some(p), Some(host)) = (self.policy.as_mut(), head.host.as_deref()) {
            p.learn_site(c.client.ip, host);
        }
        // The request node's REJECT: carried out when the driver holds requests for a verdict,
        // else counted deferred.
        let mut reject = None;
        if let Some(p) = self.policy.as_mut().filter(|p| p.at_requests()) {
            let (cl, sv) = (SocketAddr::from(c.client), SocketAddr::from(c.server));
            let class = p.classify(cl, sv);
            let rt = self.pageviews.elapsed_for_client(c.client.ip, now);
            let v = p.at_request_head(now, (cl, sv, class), (head, depth), rt);
            if v.answer.is_none() {
                self.stats.rejects_deferred += u64::from(v.fired);
            }
            reject = v.answer.map(|(status, retry_after)| Rejection { depth, status, retry_after });
            // ABORT IDLE: decided at each request of the connection, for the idle time after it.
            match v.abort_idle.filter(|_| reject.is_none()) {
                Some(mark) => self.abort_idle.insert(id, mark),
                None => self.abort_idle.remove(&id),
            };
        }
        let info = request_info(c, id, depth, Asked::Head(head), txn.request_ts, c.hs.established);
        self.pageviews.on_request(now, &info);
        reject
    }

    /// A response's head: into the pageviews, its size to the SRPT classifier, and the
    /// response node (`REMOVE EMBEDS`). `rest`: the events after it from the same segment.
    fn on_response_head(&mut self, now: Timestamp, id: ConnId, depth: u32, rest: &[AppEvent]) {
        let c = self.flows.get(id).expect("live");
        let on_conn = c.http().and_then(|h| h.txn(depth));
        if let Some(txn) = on_conn {
            let encoded = txn.response.as_ref().is_some_and(|r| r.encoded);
            let first = txn.response_first_ts.unwrap_or(now);
            self.pageviews.on_response_head(first, id, depth, txn.is_html(), encoded);
        }
        // The server time of a request of a group with a target (its transaction on the
        // connection, or done in the same segment).
        if let Some(p) = self.policy.as_mut().filter(|p| p.times_requests()) {
            let first = on_conn.or_else(|| done_in(rest, depth)).and_then(|t| t.response_first_ts).unwrap_or(now);
            p.response_head(first, (SocketAddr::from(c.client), SocketAddr::from(c.server)), depth);
        }
        // The response's place in the sequence space, for the SRPT classifier: from its
        // transaction on the connection, or, when it completed in the same segment, from its
        // `Done` later in the batch.
        if let (Some(fp), Some(txn)) = (self.fastpath.as_mut().filter(|fp| fp.srpt), on_conn.or_else(|| done_in(rest, depth))) {
            if let (Some(start), end, SocketAddr::V4(client), SocketAddr::V4(server)) =
                (txn.response_seq, txn.response_end_seq, SocketAddr::from(c.client), SocketAddr::from(c.server))
            {
                fp.response_size(client, server, start, end);
                self.stats.srpt_sizes_published += 1;
            }
        }
        // The rest of a body nothing reads: the kernel may cut its segments to their headers,
        // or leave them unreported (it reports one a MiB and the last), which the server's
        // stream then takes as absent bytes (`on_segment` marks it unread).
        if let (Some(fp), Some(txn)) = (self.fastpath.as_mut().filter(|fp| fp.cut_bodies), on_conn) {
            if let (Some(until), true, SocketAddr::V4(client), SocketAddr::V4(server)) = (
                txn.response_end_seq,
                c.http().is_some_and(|h| h.response_body_unread(depth)),
                SocketAddr::from(c.client),
                SocketAddr::from(c.server),
            ) {
                fp.body_unread(client, server, until);
                self.stats.bodies_cut += 1;
            }
        }
        if self.adapt.removing {
            self.decide_removal(now, id, depth, done_in(rest, depth));
        }
    }

    fn txn_done(&mut self, now: Timestamp, id: ConnId, mut txn: Box<Txn>) {
        let c = self.flows.get(id).expect("live");
        let (client, server, first_seen, server_heard) = (c.client, c.server, c.first_seen, c.server_heard());
        if c.midstream {
            // Read from a resynchronisation point: what came before the capture joined is unknown.
            txn.anomalies.insert(crate::http::Anomalies::MIDSTREAM);
        }
        let pv = self.pageviews.on_txn_done(now, id, txn.depth, txn.response_first_ts, txn.response_last_ts);
        if let (Some(fp), Some(until), SocketAddr::V4(client), SocketAddr::V4(server)) =
            (self.fastpath.as_mut().filter(|fp| fp.cut_bodies), txn.response_end_seq, SocketAddr::from(client), SocketAddr::from(server))
        {
            fp.body_over(client, server, until);
        }
        if let Some(&(after, _)) = self.abort_idle.get(&id) {
            self.push_timer(now + after, id, TimerKind::AbortIdle);
        }
        self.learn_transfer(id, &txn);
        self.stats.transactions += 1;
        if !txn.anomalies.is_empty() {
            self.stats.transactions_with_anomalies += 1;
        }
        if self.cfg.transaction_records {
            // Unanswered, on a connection the server never sent on: nothing shows it is real.
            let unproven = txn.response_first_ts.is_none() && !server_heard;
            let writing = self.unproven.writing(now, unproven, &mut self.stats.records_unproven_skipped);
            if writing != Writing::Skip {
                let mut record = TransactionRecord::of(&txn, client, server, first_seen, pv);
                if writing == Writing::Cut {
                    record.cut_unproven();
                }
                self.events.push_back(Event::Transaction(record));
            }
        }
    }
}

/// What the pageviews need of request `depth` of connection `c` (`id`), asked at `ts` on a
/// connection ready for requests from `ready` (its handshake's end; on TLS its TLS handshake's).
fn request_info<'a>(c: &'a Conn<Analyzer>, id: ConnId, depth: u32, asked: Asked<'a>, ts: Timestamp, ready: Option<Timestamp>) -> RequestInfo<'a> {
    RequestInfo {
        conn: id,
        client: c.client.ip,
        server: c.server.to_string(),
        depth,
        asked,
        ts,
        conn_first_syn: c.hs.syn.first,
        conn_established: c.hs.established,
        conn_ready: ready,
        conn_syns: c.hs.syn.count,
        conn_synacks: c.hs.synack.count,
        conn_first_synack: c.hs.synack.first,
        conn_answered: c.hs.answered,
        rtt: c.rtt(),
    }
}

/// A transaction that ended among `rest` (the events after its response's head, from the same
/// segment): it is no longer on its connection.
fn done_in(rest: &[AppEvent], depth: u32) -> Option<&Txn> {
    rest.iter().find_map(|e| match e {
        AppEvent::Http(HttpEvent::Done(t)) if t.depth == depth => Some(&**t),
        _ => None,
    })
}

/// A `REJECT` decided at a request head: the answer the client gets.
#[derive(Clone, Copy, Debug)]
pub(super) struct Rejection {
    /// The rejected request's depth on its connection.
    pub(super) depth: u32,
    pub(super) status: u16,
    pub(super) retry_after: Option<std::time::Duration>,
}
