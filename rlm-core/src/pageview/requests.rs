//! What a transaction does to the pageviews: the pageview its request joins (or starts), its
//! response, the embedded references its body lists, its end.
//!
//! An exchange of encrypted records (TLS: no URL, no header, no list of references) joins by
//! time alone: the pageview its connection joined (at its SYN, or with an earlier exchange), else
//! its client's latest, while that pageview is active (something in flight, a handshake under
//! way, or quiet for less than `encrypted_gap`); else it starts a pageview of its own.

use std::net::IpAddr;
use std::time::Duration;

use super::open::{Expected, OpenPv, PvConn, PvTxn, Resent, Twice};
use super::urls::{request_url, simple_request_key, url_key};
use super::Pageviews;
use crate::flow::ConnId;
use crate::http::{Destination, EmbedKind, EmbedRef, RequestHead};
use crate::time::Timestamp;
use crate::wire::{seq_lt, seq_span};

/// What the pageview layer needs to know about a request.
pub struct RequestInfo<'a> {
    /// The connection it came on.
    pub conn: ConnId,
    /// The client's IP address.
    pub client: IpAddr,
    /// The server, as `ip:port`.
    pub server: String,
    /// Its position on the connection ([`crate::http::Txn::depth`], or an exchange's).
    pub depth: u32,
    /// What was asked.
    pub asked: Asked<'a>,
    /// When it began: the segment with its head's first byte.
    pub ts: Timestamp,
    /// The connection's handshake (first SYN seen, completion), if it was seen.
    pub conn_first_syn: Option<Timestamp>,
    /// When the connection's handshake completed, if that was seen.
    pub conn_established: Option<Timestamp>,
    /// When the connection was ready for the client's requests: its handshake's completion, or,
    /// on TLS, its TLS handshake's (a connection idle longer than `preconnect_idle` after this
    /// was opened in advance).
    pub conn_ready: Option<Timestamp>,
    /// SYNs seen on the connection.
    pub conn_syns: u16,
    /// SYN/ACKs seen on the connection.
    pub conn_synacks: u16,
    /// When the connection's first SYN/ACK was seen.
    pub conn_first_synack: Option<Timestamp>,
    /// The client acknowledged the connection's SYN/ACK (see [`crate::flow::Handshake::answered`]).
    pub conn_answered: bool,
    /// The connection's measured RTT (SYN/ACK to ACK), if it has one.
    pub rtt: Option<Duration>,
}

/// What a request asked, as far as it can be read.
#[derive(Clone, Copy)]
pub enum Asked<'a> {
    /// An HTTP request: its parsed head.
    Head(&'a RequestHead),
    /// A burst of encrypted records (TLS): the site its ClientHello named (SNI), if any.
    Encrypted {
        /// The SNI.
        site: Option<&'a str>,
    },
}

/// What a request is matched against the open pageviews by.
struct RequestKeys {
    /// Its URL, made only when its key could not be made without it.
    url: Option<url::Url>,
    /// Its URL's key ([`url_key`]).
    key: Option<String>,
    /// The key of its Referer.
    referrer_key: Option<String>,
    /// It asks for `/favicon.ico`.
    is_favicon: bool,
}

impl RequestKeys {
    fn of(r: &RequestInfo<'_>, head: &RequestHead) -> RequestKeys {
        // The URL itself is needed only as the base of a new pageview's embedded references, and
        // is then made when the container's embeds come; the key is made without it when simple.
        let (url, key) = match simple_request_key(head.host.as_deref(), &r.server, &head.uri) {
            Some(k) => (None, Some(k)),
            None => {
                let url = request_url(head.host.as_deref(), &r.server, &head.uri);
                let key = url.as_ref().and_then(url_key);
                (url, key)
            }
        };
        let referrer_key = head.referrer.as_deref().and_then(|s| url::Url::parse(s).ok()).as_ref().and_then(url_key);
        let is_favicon = match &url {
            Some(u) => u.path() == "/favicon.ico",
            None => key.is_some() && head.uri.split('?').next() == Some("/favicon.ico"),
        };
        RequestKeys { url, key, referrer_key, is_favicon }
    }
}

/// The connection of a request among its pageview's (added if it is not there yet; `None` past
/// `max` connections).
fn request_conn(p: &mut OpenPv, r: &RequestInfo<'_>, is_container: bool, rtt: Duration, max: usize) -> Option<usize> {
    if let Some(i) = p.conn_index(r.conn) {
        return Some(i);
    }
    let from_syn = r.depth == 1 && (is_container || p.conns.is_empty() || r.conn_first_syn.is_some_and(|s| s >= p.start));
    let c = if from_syn {
        PvConn {
            synacks: r.conn_synacks,
            first_synack: r.conn_first_synack,
            established: r.conn_established,
            ..PvConn::new(r.conn, r.conn_first_syn, r.conn_syns, false, rtt)
        }
    } else {
        PvConn::new(r.conn, None, 0, false, rtt)
    };
    // The client acknowledged its SYN/ACK.
    let c = PvConn { acked: r.conn_answered, ..c };
    p.push_conn(c, max)
}

impl Pageviews {
    /// Decide which pageview a request belongs to; returns its id.
    pub fn on_request(&mut self, now: Timestamp, r: &RequestInfo<'_>) -> u64 {
        let (keys, embed_of) = match r.asked {
            Asked::Head(head) => {
                let keys = RequestKeys::of(r, head);
                let joined = self.joined_pageview(now, r, head, &keys);
                (Some(keys), joined)
            }
            Asked::Encrypted { .. } => (None, self.joined_by_time(now, r).map(|id| (id, None))),
        };
        let rtt = self.rtt_for(r.client, r.rtt);
        let id = match embed_of {
            Some((id, idx)) => {
                let p = self.open.get_mut(&id).expect("open");
                if let Some(i) = idx {
                    p.fetched(i);
                }
                id
            }
            None => match self.retried_container(now, r) {
                Some(id) => id,
                None => self.start_pageview(now, r, keys.as_ref(), rtt),
            },
        };
        self.attach_conn(r.conn, id);
        self.settle_acts(r.conn, id);
        self.add_txn(now, r, id, embed_of, rtt);
        id
    }

    /// The open pageview of the client a request joins, with the index of the listed object it
    /// fetches if it was listed; `None`: it starts a pageview of its own.
    fn joined_pageview(&self, now: Timestamp, r: &RequestInfo<'_>, head: &RequestHead, keys: &RequestKeys) -> Option<(u64, Option<usize>)> {
        let ids = self.by_client.get(&r.client)?;
        for &id in ids.iter().rev() {
            let p = &self.open[&id];
            if let Some(&i) = keys.key.as_ref().and_then(|k| p.index.get(k)) {
                return Some((id, Some(i)));
            }
            if keys.is_favicon {
                continue;
            }
            let referred = keys.referrer_key.as_ref().is_some_and(|rk| p.referrers.contains(rk));
            let recent = now.saturating_since(p.last_activity) < self.cfg.quiet || p.in_flight > 0;
            let sub = head.destination == Destination::Subresource;
            let weak_ok = !p.list_reliable && head.destination != Destination::Document && recent && p.has_container_response();
            if (referred && (sub || weak_ok)) || (head.referrer.is_none() && weak_ok && sub) {
                return Some((id, None));
            }
        }
        None
    }

    /// The open pageview an encrypted request joins: its connection's, else its client's
    /// latest, if active ([`Pageviews::is_active`]).
    fn joined_by_time(&self, now: Timestamp, r: &RequestInfo<'_>) -> Option<u64> {
        let active = |id: &u64| self.open.get(id).is_some_and(|p| self.is_active(p, now));
        if let Some(id) = self.conn_pv.get(&r.conn).filter(|id| active(id)) {
            return Some(*id);
        }
        self.by_client.get(&r.client)?.iter().rev().copied().find(active)
    }

    /// The client's latest pageview if this request asks its container again after the first
    /// ask got no answer but its connection's end: a browser that sent it on a kept-alive
    /// connection as the server closed that connection (the request crossed the server's FIN,
    /// and got an RST) sends it again on a new connection (RFC 9112 9.3.1), and its visitor
    /// waits from the first ask. The retry joins that pageview as its container, so that it
    /// starts at the first ask (the lab's browsers did so for 2 to 4 of 290 pageviews in a quick
    /// fidelity run of 2026-11-28, each then measured as two: an empty one and one short by
    /// the retry's wait). Only as browsers retry (Chromium's `ShouldResendRequest`, any method):
    /// the first ask went on a connection that had served an earlier request or waited idle
    /// before it (a preconnected one; a fresh connection's unanswered request is an error the
    /// visitor sees), and the retry's connection began within `linger` of that one's end.
    fn retried_container(&self, now: Timestamp, r: &RequestInfo<'_>) -> Option<u64> {
        let Asked::Head(head) = r.asked else { return None };
        let &id = self.by_client.get(&r.client)?.last()?;
        let p = &self.open[&id];
        let [t] = p.txns.as_slice() else { return None };
        let reused = t.depth > 1
            || p.conns
                .get(usize::from(t.conn))
                .and_then(|c| c.established)
                .is_some_and(|e| t.request_ts.saturating_since(e) > self.cfg.preconnect_idle);
        let began = r.conn_first_syn.unwrap_or(now);
        let unanswered = t.container && reused && t.done && t.response_first.is_none() && began.saturating_since(p.last_activity) < self.cfg.linger;
        let host: &str = head.host.as_deref().unwrap_or(&r.server);
        (unanswered && p.container.as_deref() == Some(head.uri.as_str()) && p.host.as_deref() == Some(host)).then_some(id)
    }

    /// Start the pageview of a request that joined none, with it as the container; returns its id.
    fn start_pageview(&mut self, now: Timestamp, r: &RequestInfo<'_>, keys: Option<&RequestKeys>, rtt: Duration) -> u64 {
        // A navigation: a pageview of its own. It starts at the connection's first SYN if the
        // request went out right after the handshake, else at the request itself.
        let fresh = r.depth == 1 && r.conn_first_syn.is_some() && r.conn_ready.is_some_and(|e| r.ts.saturating_since(e) <= self.cfg.preconnect_idle);
        let start = if fresh { r.conn_first_syn.expect("checked") } else { r.ts } - rtt / 2;
        // Previous pageviews of this client with nothing in flight are over.
        let idle: Vec<u64> = self
            .by_client
            .get(&r.client)
            .map(|ids| ids.iter().copied().filter(|i| self.open[i].in_flight == 0 && !self.open[i].pending_handshakes()).collect())
            .unwrap_or_default();
        for old in idle {
            self.finish(old);
        }
        let id = self.new_pageview(r.client, start, now);
        let p = self.open.get_mut(&id).expect("just created");
        p.server = Some(r.server.clone());
        let (Asked::Head(head), Some(keys)) = (r.asked, keys) else {
            // Encrypted: the site its ClientHello named, else the server.
            let Asked::Encrypted { site } = r.asked else { unreachable!("a head has its keys") };
            p.host = Some(site.map_or_else(|| r.server.clone(), str::to_string));
            p.encrypted = true;
            p.bytes += 2 * r.server.len() + site.map_or(0, str::len);
            return id;
        };
        p.host = head.host.clone().or_else(|| Some(r.server.clone()));
        p.container = Some(head.uri.clone());
        p.base = keys.url.clone();
        if keys.url.is_none() && keys.key.is_some() {
            p.base_target = Some((head.host.clone(), r.server.clone(), head.uri.clone()));
        }
        // Its container's target, host and URL, kept twice at most.
        p.bytes +=
            2 * (head.uri.len() + head.host.as_ref().map_or(0, String::len) + r.server.len()) + keys.url.as_ref().map_or(0, |u| u.as_str().len());
        if let Some(k) = &keys.key {
            p.add_referrer(k.clone(), self.cfg.max_referrers);
        }
        id
    }

    /// Attach the connection to pageview `id` (moving it from another if it was tentatively there).
    fn attach_conn(&mut self, conn: ConnId, id: u64) {
        let prev = self.conn_pv.insert(conn, id);
        if let Some(prev) = prev.filter(|p| *p != id) {
            if let Some(pp) = self.open.get_mut(&prev) {
                if let Some(i) = pp.conn_index(conn) {
                    if pp.conns[i].txns.is_empty() {
                        pp.remove_conn(i);
                    }
                }
            }
            self.schedule(prev);
        }
    }

    /// The request's transaction, added to its pageview `id` (with its connection if that is new
    /// there) and counted in flight; past the pageview's caps, only counted in its `capped`.
    fn add_txn(&mut self, now: Timestamp, r: &RequestInfo<'_>, id: u64, embed_of: Option<(u64, Option<usize>)>, rtt: Duration) {
        let is_container = embed_of.is_none();
        let p = self.open.get_mut(&id).expect("open");
        if p.txns.len() >= self.cfg.max_txns {
            p.capped = p.capped.saturating_add(1);
            self.touch(id, now);
            return;
        }
        let Some(ci) = request_conn(p, r, is_container, rtt, self.cfg.max_conns) else {
            self.touch(id, now);
            return;
        };
        let extends_end = !matches!(embed_of, Some((_, Some(i))) if p.expected[i].kind == EmbedKind::Icon);
        let added = p.push_txn(
            PvTxn {
                conn: ci as u16,
                depth: r.depth,
                uri: match r.asked {
                    Asked::Head(h) => h.uri.clone(),
                    Asked::Encrypted { .. } => String::new(),
                },
                encrypted: matches!(r.asked, Asked::Encrypted { .. }),
                requests: 1,
                in_flight: true,
                held: false,
                request_ts: r.ts,
                response_first: None,
                response_last: None,
                done: false,
                extends_end,
                container: is_container,
                embed: embed_of.and_then(|(_, i)| i).map(|i| i as u32),
            },
            self.cfg.max_txns,
        );
        if added {
            p.in_flight += 1;
            self.txn_pv.insert((r.conn, r.depth), id);
        }
        self.touch(id, now);
    }

    /// The response head of a transaction arrived.
    pub fn on_response_head(&mut self, now: Timestamp, conn: ConnId, depth: u32, html: bool, encoded: bool) {
        let Some(&id) = self.txn_pv.get(&(conn, depth)) else { return };
        let Some(p) = self.open.get_mut(&id) else { return };
        if let Some(ti) = p.txn_index(conn, depth) {
            p.respond(ti, now);
            if p.txns[ti].container && html {
                p.list_reliable = !encoded;
            }
        }
        self.touch(id, now);
    }

    /// Part of a response body went by unseen (a cut frame): if it is a container's, its list
    /// of references is incomplete, and requests it does not name may still belong to it.
    pub fn on_body_unseen(&mut self, conn: ConnId, depth: u32) {
        let Some(&id) = self.txn_pv.get(&(conn, depth)) else { return };
        let Some(p) = self.open.get_mut(&id) else { return };
        if p.txn_index(conn, depth).is_some_and(|ti| p.txns[ti].container) {
            p.list_reliable = false;
        }
    }

    /// Embedded references found in a response body: the container's, or a stylesheet's / frame's.
    pub fn on_embeds(&mut self, now: Timestamp, conn: ConnId, depth: u32, refs: &[EmbedRef]) {
        let Some(&id) = self.txn_pv.get(&(conn, depth)) else { return };
        let Some(p) = self.open.get_mut(&id) else { return };
        if p.base.is_none() {
            if let Some((host, server, uri)) = p.base_target.take() {
                p.base = request_url(host.as_deref(), &server, &uri);
            }
        }
        let Some(ti) = p.txn_index(conn, depth) else { return };
        let t = &p.txns[ti];
        // The base for relative references is the document that holds them.
        let base = if t.container { p.base.clone() } else { p.base.as_ref().and_then(|b| b.join(&t.uri).ok()) };
        let Some(base) = base else { return };
        for r in refs {
            let keys: Vec<String> = r.urls.iter().filter_map(|u| base.join(u).ok()).filter_map(|u| url_key(&u)).collect();
            if keys.is_empty() || keys.iter().any(|k| p.index.contains_key(k)) {
                continue;
            }
            let Some(i) = p.push_expected(Expected { required: r.required, kind: r.kind, fetched: false }, self.cfg.max_expected) else {
                continue;
            };
            for k in &keys {
                p.bytes += k.len() + 32;
                p.index.insert(k.clone(), i);
            }
            if matches!(r.kind, EmbedKind::Stylesheet | EmbedKind::Frame) {
                for k in keys {
                    p.add_referrer(k, self.cfg.max_referrers);
                }
            }
        }
        self.touch(id, now);
    }

    /// A transaction finished. Returns its pageview.
    pub fn on_txn_done(
        &mut self,
        now: Timestamp,
        conn: ConnId,
        depth: u32,
        response_first: Option<Timestamp>,
        response_last: Option<Timestamp>,
    ) -> Option<u64> {
        let id = self.txn_pv.remove(&(conn, depth))?;
        if let Some(p) = self.open.get_mut(&id) {
            let mut active = now;
            if let Some(ti) = p.txn_index(conn, depth).filter(|&ti| !p.txns[ti].done) {
                if let Some(f) = response_first {
                    p.respond(ti, f);
                }
                let t = &mut p.txns[ti];
                t.done = true;
                // A retransmission seen earlier may already have moved the end later.
                t.response_last = match (t.response_last, response_last) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    (a, b) => a.or(b),
                };
                // An encrypted exchange ends at the client's next burst, or its connection's end,
                // long after its last record: that is no activity of its pageview.
                if t.encrypted {
                    active = t.response_last.unwrap_or(t.request_ts).min(now);
                }
                p.land(ti);
            }
            self.touch(id, active);
        }
        Some(id)
    }

    /// A server record of encrypted exchange `depth` on `conn`, from `first` to `last`, after a
    /// burst of `requests` requests (as estimated): its response began (it is no longer in
    /// flight: whether more is coming, only the quiet after it tells) or goes on.
    pub fn on_encrypted_response(&mut self, conn: ConnId, depth: u32, first: Timestamp, last: Timestamp, requests: u32) {
        let Some(&id) = self.txn_pv.get(&(conn, depth)) else { return };
        let Some(p) = self.open.get_mut(&id) else { return };
        if let Some(ti) = p.txn_index(conn, depth) {
            p.respond(ti, first);
            p.land(ti);
            let t = &mut p.txns[ti];
            t.requests = requests;
            t.response_last = Some(t.response_last.map_or(last, |l| l.max(last)));
        }
        self.touch(id, last);
    }

    /// A server record of encrypted exchange `depth` on `conn` came at `at` that may be a TLS 1.3
    /// session ticket or the exchange's whole response: the exchange stays in flight (a ticket
    /// says nothing of the response, which may take long under overload) until its next server
    /// record or its end tells; meanwhile it holds its pageview open but does not keep it active
    /// for other connections' requests past `encrypted_gap` ([`Pageviews::is_active`]).
    pub fn on_encrypted_held(&mut self, conn: ConnId, depth: u32, at: Timestamp) {
        let Some(&id) = self.txn_pv.get(&(conn, depth)) else { return };
        let Some(p) = self.open.get_mut(&id) else { return };
        if let Some(ti) = p.txn_index(conn, depth) {
            p.hold(ti);
        }
        self.touch(id, at);
    }

    /// The server resent data (`seq` to `end`) on a connection that the client had not
    /// acknowledged: the client gets the response it belongs to (the connection's latest) only
    /// now, unless a D-SACK later shows it had the data already ([`Pageviews::on_client_got_twice`]).
    pub fn on_server_retransmission(&mut self, now: Timestamp, conn: ConnId, seq: u32, end: u32) {
        let Some(&id) = self.conn_pv.get(&conn) else { return };
        let Some(p) = self.open.get_mut(&id) else { return };
        let Some(ci) = p.conn_index(conn) else { return };
        if let Some(last) = p.conns[ci].last_responded {
            let t = &mut p.txns[last as usize];
            if t.response_last.is_none_or(|l| now > l) {
                let before = t.response_last.filter(|_| t.done);
                t.response_last = Some(now);
                let c = &mut p.conns[ci];
                // Segments resent within a quarter of a round trip of the last are one burst.
                let burst = (c.rtt / 4).max(Duration::from_millis(1));
                c.resent = match (c.resent.filter(|r| r.txn == last && now.saturating_since(r.moved_to) <= burst), before) {
                    (Some(r), _) => {
                        // What was reported received twice stays so as the burst grows, even
                        // backwards.
                        let (seq, end) = seq_span((r.seq, r.end), (seq, end));
                        Some(Resent { seq, end, moved_to: now, ..r })
                    }
                    // A new burst after the transaction ended (its end before it kept).
                    (None, Some(before)) => Some(Resent { txn: last, seq, end, before, moved_to: now, twice: Twice::default() }),
                    // One while its response was still coming: that end is the response's own.
                    (None, None) => None,
                };
            }
        }
        self.touch(id, now);
    }

    /// The client reported, with a D-SACK, that it received the server's bytes `seq` to `end`
    /// twice. Once such reports, in any order (`open::Twice`), cover the latest burst of
    /// retransmissions that moved the end of the connection's latest transaction (and nothing
    /// moved it since), that burst was spurious (an acknowledgement was lost or late: the client
    /// had those bytes from an earlier copy) and the end goes back to what it was before it. A
    /// report only counts inside the burst (a
    /// block wider than what was resent is not a D-SACK of it), and one of part of it leaves the
    /// end: the rest may have been resent because it was lost. An earlier burst stays: a D-SACK
    /// tells of one copy received twice, not which earlier copy arrived. The lab's WAN made 8
    /// and 14 of about 290 pageviews of a quick fidelity run each end 0.17 to 0.65 s late so
    /// (2026-11-28).
    pub fn on_client_got_twice(&mut self, conn: ConnId, seq: u32, end: u32) {
        let Some(&id) = self.conn_pv.get(&conn) else { return };
        let Some(p) = self.open.get_mut(&id) else { return };
        let Some(ci) = p.conn_index(conn) else { return };
        let c = &mut p.conns[ci];
        let Some(r) = c.resent.as_mut() else { return };
        let inside = !seq_lt(seq, r.seq) && !seq_lt(r.end, end) && seq_lt(seq, end);
        if !inside || c.last_responded != Some(r.txn) {
            return;
        }
        r.twice.add(seq, end);
        if !r.twice.covers(r.seq, r.end) {
            return;
        }
        let r = p.conns[ci].resent.take().expect("just seen");
        let t = &mut p.txns[r.txn as usize];
        if t.response_last == Some(r.moved_to) {
            t.response_last = Some(r.before);
        }
    }
}
