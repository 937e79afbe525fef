//! Pageviews: transactions and connections correlated into what a client sees.
//!
//! Each client address has a few open pageviews. A request joins an open
//! pageview when the container listed it (its embed list), when its
//! Referer names the container or one of its objects and the headers say it
//! is a sub-resource, or when the container's list is unknown and timing
//! fits. Anything else (a link click, a download, a favicon nobody listed,
//! a request on a connection opened long before and left idle) starts a
//! pageview of its own. A connection whose handshake never completes is a
//! failed connection; it charges its pageview the client's connect timeout.
//!
//! The appliance sits next to the servers, so its clock runs half a round
//! trip behind the client's on the way in and half a round trip ahead on the
//! way out. Times are moved to the client's side with the connection's
//! measured RTT (SYN/ACK → ACK): start = first SYN seen − RTT/2, end = last
//! response byte seen + RTT/2 (see docs/architecture.md).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::IpAddr;
use std::time::Duration;

use ahash::AHashMap;
use serde::Serialize;

use crate::flow::ConnId;
use crate::http::{Destination, EmbedKind, EmbedRef, RequestHead};
use crate::time::Timestamp;

/// Tunables of the correlation.
#[derive(Clone, Debug)]
pub struct PageviewConfig {
    /// How long the client's TCP tries to connect before reporting failure (004: Windows XP, 21 s).
    pub connect_timeout: Duration,
    /// A pageview with nothing in flight and every listed object fetched ends after this much quiet.
    pub linger: Duration,
    /// A pageview with nothing in flight but listed objects never fetched ends after this much quiet.
    pub quiet: Duration,
    /// A connection idle longer than this between its handshake and its first request was opened in
    /// advance: its pageview starts at the request, not at the SYN.
    pub preconnect_idle: Duration,
    /// Open pageviews kept per client; the oldest is closed beyond this.
    pub max_open_per_client: usize,
    /// Event nodes kept per pageview.
    pub max_events: usize,
    /// Clients whose last RTT is remembered (for their connections that have none).
    pub max_client_rtts: usize,
    /// A remembered RTT not refreshed for this long may be forgotten.
    pub client_rtt_ttl: Duration,
}

impl Default for PageviewConfig {
    fn default() -> Self {
        PageviewConfig {
            connect_timeout: Duration::from_secs(21),
            linger: Duration::from_millis(1500),
            quiet: Duration::from_secs(5),
            preconnect_idle: Duration::from_secs(1),
            max_open_per_client: 4,
            max_events: 512,
            max_client_rtts: 65_536,
            client_rtt_ttl: Duration::from_secs(600),
        }
    }
}

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
    /// Its transactions other than the container's.
    pub objects: u32,
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
    /// Cut off by the end of the capture (or a shutdown) with something still in flight:
    /// a transaction unanswered, a handshake pending or listed objects not yet fetched.
    /// Its `rt_s` is a lower bound; summaries leave it out of the response-time statistics.
    pub incomplete: bool,
}

#[derive(Clone, Debug)]
struct PvConn {
    conn: ConnId,
    first_syn: Option<Timestamp>,
    syns: u16,
    synacks: u16,
    first_synack: Option<Timestamp>,
    established: Option<Timestamp>,
    failed_at: Option<Timestamp>,
    /// Handshake under way (blocks the pageview from ending).
    pending: bool,
    rtt: Duration,
}

#[derive(Clone, Debug)]
struct PvTxn {
    conn: u16,
    depth: u32,
    uri: String,
    request_ts: Timestamp,
    response_first: Option<Timestamp>,
    response_last: Option<Timestamp>,
    done: bool,
    /// Counts towards the end of the pageview (icons do not: the load event does not wait for them).
    extends_end: bool,
    container: bool,
    /// The object of the container's embed list it fetches (index in `expected`).
    embed: Option<u32>,
}

#[derive(Clone, Debug)]
struct Expected {
    required: bool,
    kind: EmbedKind,
    fetched: bool,
}

struct OpenPv {
    id: u64,
    client: IpAddr,
    /// The server of its first request ("ip:port").
    server: Option<String>,
    host: Option<String>,
    container: Option<String>,
    base: Option<url::Url>,
    /// (Host, server, target) of the container request, when its URL was not made yet: `base`
    /// is made from it when embedded references come.
    base_target: Option<(Option<String>, String, String)>,
    /// Client-side start estimate.
    start: Timestamp,
    conns: Vec<PvConn>,
    txns: Vec<PvTxn>,
    expected: Vec<Expected>,
    /// Resolved URL key → index in `expected`.
    index: AHashMap<String, usize>,
    /// URL keys of the container and of objects that may refer to further objects (CSS, frames).
    referrers: Vec<String>,
    /// The container's embed list is complete and trustworthy (scanned, not encoded).
    list_reliable: bool,
    in_flight: u32,
    last_activity: Timestamp,
    /// Generation of the finalisation check, to drop stale deadlines.
    check_gen: u32,
}

impl OpenPv {
    fn conn_index(&self, conn: ConnId) -> Option<usize> {
        self.conns.iter().position(|c| c.conn == conn)
    }
    fn pending_handshakes(&self) -> bool {
        self.conns.iter().any(|c| c.pending)
    }
    fn all_required_fetched(&self) -> bool {
        self.expected.iter().all(|e| !e.required || e.fetched)
    }
    fn has_container_response(&self) -> bool {
        self.txns.iter().any(|t| t.container && t.response_first.is_some())
    }
}

/// What the pageview layer needs to know about a request.
pub struct RequestInfo<'a> {
    /// The connection it came on.
    pub conn: ConnId,
    /// The client's IP address.
    pub client: IpAddr,
    /// The server, as `ip:port`.
    pub server: String,
    /// Its position on the connection ([`crate::http::Txn::depth`]).
    pub depth: u32,
    /// Its parsed head.
    pub head: &'a RequestHead,
    /// When it began: the segment with its head's first byte.
    pub ts: Timestamp,
    /// The connection's handshake (first SYN seen, completion), if it was seen.
    pub conn_first_syn: Option<Timestamp>,
    /// When the connection's handshake completed, if that was seen.
    pub conn_established: Option<Timestamp>,
    /// SYNs seen on the connection.
    pub conn_syns: u16,
    /// SYN/ACKs seen on the connection.
    pub conn_synacks: u16,
    /// When the connection's first SYN/ACK was seen.
    pub conn_first_synack: Option<Timestamp>,
    /// The connection's measured RTT (SYN/ACK to ACK), if it has one.
    pub rtt: Option<Duration>,
}

/// Normalised key of a URL: host (with a non-default port) + path + query.
pub fn url_key(u: &url::Url) -> Option<String> {
    let host = u.host_str()?.to_ascii_lowercase();
    let mut k = host;
    if let Some(p) = u.port() {
        k.push(':');
        k.push_str(&p.to_string());
    }
    k.push_str(u.path());
    if let Some(q) = u.query() {
        k.push('?');
        k.push_str(q);
    }
    Some(k)
}

/// [`url_key`] of [`request_url`] without building a URL, for the common simple case: a host of
/// lowercase-able ASCII letters, digits, hyphens and dots (or a canonical dotted quad), an optional
/// port, and an origin-form target whose path and query the URL parser would leave as they are
/// (no dot segments, no characters it escapes or rewrites, no fragment). `None`: not simple, ask
/// the URL parser. Property-tested against it.
pub fn simple_request_key(host: Option<&str>, server: &str, uri: &str) -> Option<String> {
    let h = host.filter(|h| !h.is_empty()).unwrap_or(server);
    let (name, port) = match h.rsplit_once(':') {
        Some((n, p)) => (n, Some(p)),
        None => (h, None),
    };
    let port = match port {
        None => None,
        Some(p) if !p.is_empty() && p.len() <= 5 && !p.starts_with('0') && p.bytes().all(|b| b.is_ascii_digit()) => {
            let n: u32 = p.parse().ok()?;
            if n > 65_535 {
                return None;
            }
            (n != 80).then_some(p)
        }
        Some(_) => return None,
    };
    let labels_ok = !name.is_empty()
        && name
            .split('.')
            .all(|l| !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') && !l.starts_with('-'))
        && !name.as_bytes()[..name.len().min(4)].eq_ignore_ascii_case(b"xn--")
        && !name.contains(".xn--")
        && !name.contains(".XN--");
    if !labels_ok {
        return None;
    }
    // A name whose last label starts with a digit is an IPv4 address to the URL parser: only a
    // canonical dotted quad stays as written.
    if name.rsplit('.').next().is_some_and(|l| l.as_bytes()[0].is_ascii_digit()) {
        let parts: Vec<&str> = name.split('.').collect();
        let canonical = parts.len() == 4
            && parts
                .iter()
                .all(|p| p.bytes().all(|b| b.is_ascii_digit()) && (p.len() == 1 || !p.starts_with('0')) && p.parse::<u16>().is_ok_and(|n| n <= 255));
        if !canonical {
            return None;
        }
    }
    let (path, query) = match uri.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (uri, None),
    };
    let plain = |b: u8| b.is_ascii_alphanumeric() || b"/-_.~!$&()*+,;=:@".contains(&b);
    if !path.starts_with('/')
        || path.starts_with("//")
        || !path.bytes().all(plain)
        || query.is_some_and(|q| !q.bytes().all(|b| plain(b) || b == b'?'))
    {
        return None;
    }
    // Dot segments (`/./`, `/../`, a trailing `/.`) are resolved by the parser.
    if path.split('/').any(|seg| seg == "." || seg == "..") {
        return None;
    }
    let mut k = String::with_capacity(name.len() + uri.len() + 7);
    k.extend(name.chars().map(|c| c.to_ascii_lowercase()));
    if let Some(p) = port {
        k.push(':');
        k.push_str(p);
    }
    k.push_str(path);
    if let Some(q) = query {
        k.push('?');
        k.push_str(q);
    }
    Some(k)
}

/// The URL a request asks for (origin-form URI + Host, or absolute-form).
pub fn request_url(host: Option<&str>, server: &str, uri: &str) -> Option<url::Url> {
    if uri.starts_with("http://") || uri.starts_with("https://") {
        return url::Url::parse(uri).ok();
    }
    if !uri.starts_with('/') {
        return None;
    }
    let h = host.filter(|h| !h.is_empty()).unwrap_or(server);
    url::Url::parse(&format!("http://{h}{uri}")).ok()
}

/// The pageview tracker.
pub struct Pageviews {
    cfg: PageviewConfig,
    open: AHashMap<u64, OpenPv>,
    by_client: AHashMap<IpAddr, Vec<u64>>,
    /// Connection → pageview it is attached to.
    conn_pv: AHashMap<ConnId, u64>,
    /// (connection, depth) → pageview of that transaction.
    txn_pv: AHashMap<(ConnId, u32), u64>,
    /// Each client's last measured RTT and when it was learnt (bounded: see `learn_rtt`).
    client_rtt: AHashMap<IpAddr, (Duration, Timestamp)>,
    deadlines: BinaryHeap<Reverse<(Timestamp, u64, u32)>>,
    /// The heap's size after its last compaction ([`Pageviews::schedule`]).
    deadlines_compacted: usize,
    next_id: u64,
    done: Vec<PageviewRecord>,
}

impl Pageviews {
    /// A tracker with no pageview open.
    pub fn new(cfg: PageviewConfig) -> Pageviews {
        Pageviews {
            cfg,
            open: AHashMap::new(),
            by_client: AHashMap::new(),
            conn_pv: AHashMap::new(),
            txn_pv: AHashMap::new(),
            client_rtt: AHashMap::new(),
            deadlines: BinaryHeap::new(),
            deadlines_compacted: 0,
            next_id: 1,
            done: Vec::new(),
        }
    }

    /// The tunables it runs with.
    pub fn config(&self) -> &PageviewConfig {
        &self.cfg
    }

    /// Finished pageviews, oldest first.
    pub fn take_done(&mut self) -> std::vec::Drain<'_, PageviewRecord> {
        self.done.drain(..)
    }

    /// Pageviews open now.
    pub fn open_count(&self) -> usize {
        self.open.len()
    }

    /// The pageview a transaction was assigned to.
    pub fn pageview_of_txn(&self, conn: ConnId, depth: u32) -> Option<u64> {
        self.txn_pv.get(&(conn, depth)).copied()
    }

    /// A transaction that fetches an image its pageview's container (or one of its stylesheets)
    /// listed: the image's position among the listed images (1-based, in the order found).
    pub fn image_position(&self, conn: ConnId, depth: u32) -> Option<u32> {
        let p = self.open.get(self.txn_pv.get(&(conn, depth))?)?;
        let ci = p.conn_index(conn)?;
        let t = p.txns.iter().rev().find(|t| t.conn as usize == ci && t.depth == depth)?;
        let i = t.embed? as usize;
        let listed = p.expected.get(..=i)?;
        (listed[i].kind == EmbedKind::Image).then(|| listed.iter().filter(|e| e.kind == EmbedKind::Image).count() as u32)
    }

    /// Elapsed client-perceived time of an open pageview (what rules look at while it runs).
    pub fn elapsed(&self, id: u64, now: Timestamp) -> Option<Duration> {
        self.open.get(&id).map(|p| now.saturating_since(p.start))
    }

    /// The client's last measured RTT (its handshakes at the appliance), if known.
    pub fn client_rtt(&self, client: IpAddr) -> Option<Duration> {
        self.client_rtt.get(&client).map(|(r, _)| *r)
    }

    fn rtt_for(&self, client: IpAddr, rtt: Option<Duration>) -> Duration {
        rtt.or_else(|| self.client_rtt.get(&client).map(|(r, _)| *r)).unwrap_or(Duration::ZERO)
    }

    /// A client's RTT became known. The table is bounded: past `max_client_rtts` entries, those
    /// not refreshed for `client_rtt_ttl` go, and if that is not enough, the older half.
    pub fn learn_rtt(&mut self, client: IpAddr, rtt: Duration, now: Timestamp) {
        self.client_rtt.insert(client, (rtt, now));
        if self.client_rtt.len() > self.cfg.max_client_rtts {
            let ttl = self.cfg.client_rtt_ttl;
            self.client_rtt.retain(|_, (_, t)| now.saturating_since(*t) < ttl);
            if self.client_rtt.len() > self.cfg.max_client_rtts / 2 {
                let mut ts: Vec<Timestamp> = self.client_rtt.values().map(|(_, t)| *t).collect();
                let mid = ts.len() / 2;
                let (_, cut, _) = ts.select_nth_unstable(mid);
                let cut = *cut;
                self.client_rtt.retain(|_, (_, t)| *t > cut);
            }
        }
    }

    /// Sizes of the pageview layer's tables (for bounds tests and metrics).
    pub fn table_sizes(&self) -> (usize, usize, usize) {
        (self.open.len(), self.deadlines.len(), self.client_rtt.len())
    }

    fn touch(&mut self, id: u64, now: Timestamp) {
        if let Some(p) = self.open.get_mut(&id) {
            if now > p.last_activity {
                p.last_activity = now;
            }
            self.schedule(id);
        }
    }

    fn schedule(&mut self, id: u64) {
        let Some(p) = self.open.get_mut(&id) else { return };
        p.check_gen = p.check_gen.wrapping_add(1);
        let wait = if p.all_required_fetched() && p.has_container_response() { self.cfg.linger } else { self.cfg.quiet };
        // Failed-handshake deadlines are the flow layer's; here only quiet periods.
        self.deadlines.push(Reverse((p.last_activity + wait, id, p.check_gen)));
        // Deadlines are superseded, not removed: drop the stale ones once they dominate (and
        // the heap has doubled since the last time, so that compactions stay rare).
        if self.deadlines.len() > (4 * self.open.len()).max(2 * self.deadlines_compacted) + 1024 {
            let open = &self.open;
            self.deadlines.retain(|Reverse((_, id, gen))| open.get(id).is_some_and(|p| p.check_gen == *gen));
            self.deadlines_compacted = self.deadlines.len();
        }
    }

    /// Earliest time at which a pageview may end.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        self.deadlines.peek().map(|Reverse((t, _, _))| *t)
    }

    /// The elapsed time of the pageview a new SYN of this client would belong to (zero for a
    /// new pageview), for rules that test `RT`.
    pub fn elapsed_for_client(&self, client: IpAddr, now: Timestamp) -> Duration {
        self.active_for_client(client, now).and_then(|id| self.open.get(&id)).map_or(Duration::ZERO, |p| now.saturating_since(p.start))
    }

    /// The most recent open pageview of a client that could still be fetching objects.
    fn active_for_client(&self, client: IpAddr, now: Timestamp) -> Option<u64> {
        let ids = self.by_client.get(&client)?;
        ids.iter().rev().copied().find(|id| {
            let p = &self.open[id];
            p.has_container_response() && (!p.all_required_fetched() || p.in_flight > 0 || now.saturating_since(p.last_activity) < self.cfg.linger)
        })
    }

    /// A client sent a SYN (`retransmission` if not its first on this connection).
    pub fn on_syn(&mut self, now: Timestamp, conn: ConnId, client: IpAddr, retransmission: bool) {
        if let Some(&id) = self.conn_pv.get(&conn) {
            if let Some(p) = self.open.get_mut(&id) {
                if let Some(i) = p.conn_index(conn) {
                    p.conns[i].syns += 1;
                }
            }
            self.touch(id, now);
            return;
        }
        if retransmission {
            return;
        }
        if let Some(id) = self.active_for_client(client, now) {
            let rtt = self.rtt_for(client, None);
            let p = self.open.get_mut(&id).expect("active id is open");
            p.conns.push(PvConn {
                conn,
                first_syn: Some(now),
                syns: 1,
                synacks: 0,
                first_synack: None,
                established: None,
                failed_at: None,
                pending: true,
                rtt,
            });
            self.conn_pv.insert(conn, id);
            self.touch(id, now);
        }
    }

    /// A server's SYN/ACK on `conn`: counted on the pageview the connection is attached to, if any.
    pub fn on_synack(&mut self, now: Timestamp, conn: ConnId) {
        if let Some(&id) = self.conn_pv.get(&conn) {
            if let Some(p) = self.open.get_mut(&id) {
                if let Some(i) = p.conn_index(conn) {
                    let c = &mut p.conns[i];
                    c.synacks += 1;
                    c.first_synack.get_or_insert(now);
                }
            }
        }
    }

    /// A connection's handshake completed (`rtt`: its measured RTT, learnt for the client): its
    /// pageview no longer waits for it.
    pub fn on_established(&mut self, now: Timestamp, conn: ConnId, client: IpAddr, rtt: Option<Duration>) {
        if let Some(r) = rtt {
            self.learn_rtt(client, r, now);
        }
        if let Some(&id) = self.conn_pv.get(&conn) {
            if let Some(p) = self.open.get_mut(&id) {
                if let Some(i) = p.conn_index(conn) {
                    let c = &mut p.conns[i];
                    c.established = Some(now);
                    c.pending = false;
                    if let Some(r) = rtt {
                        c.rtt = r;
                    }
                }
            }
            self.touch(id, now);
        }
    }

    /// A connection ended. `failed` is `(first SYN, when it failed, SYNs sent)` when its handshake
    /// never completed (it failed when the client's TCP gives up, on the appliance's clock) or
    /// the server refused it.
    pub fn on_conn_closed(&mut self, now: Timestamp, conn: ConnId, client: IpAddr, failed: Option<(Timestamp, Timestamp, u16)>) {
        let id = self.conn_pv.remove(&conn);
        match (id, failed) {
            (Some(id), Some((first_syn, at, syns))) => {
                if let Some(p) = self.open.get_mut(&id) {
                    if let Some(i) = p.conn_index(conn) {
                        let c = &mut p.conns[i];
                        c.failed_at = Some(at);
                        c.pending = false;
                        c.first_syn.get_or_insert(first_syn);
                        c.syns = c.syns.max(syns);
                    }
                }
                self.touch(id, now);
            }
            (Some(id), None) => {
                if let Some(p) = self.open.get_mut(&id) {
                    if let Some(i) = p.conn_index(conn) {
                        p.conns[i].pending = false;
                    }
                }
                self.schedule(id);
            }
            (None, Some((first_syn, at, syns))) => {
                // The first connection of a page never got through: the client saw nothing but a failure.
                let rtt = self.rtt_for(client, None);
                let id = self.new_pageview(client, first_syn - rtt / 2, now);
                let p = self.open.get_mut(&id).expect("just created");
                p.conns.push(PvConn {
                    conn,
                    first_syn: Some(first_syn),
                    syns,
                    synacks: 0,
                    first_synack: None,
                    established: None,
                    failed_at: Some(at),
                    pending: false,
                    rtt,
                });
                self.finish(id);
            }
            (None, None) => {}
        }
    }

    fn new_pageview(&mut self, client: IpAddr, start: Timestamp, now: Timestamp) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let list = self.by_client.entry(client).or_default();
        list.push(id);
        let overflow = if list.len() > self.cfg.max_open_per_client { Some(list[0]) } else { None };
        self.open.insert(
            id,
            OpenPv {
                id,
                client,
                server: None,
                host: None,
                container: None,
                base: None,
                base_target: None,
                start,
                conns: Vec::new(),
                txns: Vec::new(),
                expected: Vec::new(),
                index: AHashMap::new(),
                referrers: Vec::new(),
                list_reliable: false,
                in_flight: 0,
                last_activity: now,
                check_gen: 0,
            },
        );
        if let Some(old) = overflow {
            self.finish(old);
        }
        id
    }

    /// Decide which pageview a request belongs to; returns its id.
    pub fn on_request(&mut self, now: Timestamp, r: &RequestInfo<'_>) -> u64 {
        // The URL itself is needed only as the base of a new pageview's embedded references, and
        // is then made when the container's embeds come; the key is made without it when simple.
        let (url, key) = match simple_request_key(r.head.host.as_deref(), &r.server, &r.head.uri) {
            Some(k) => (None, Some(k)),
            None => {
                let url = request_url(r.head.host.as_deref(), &r.server, &r.head.uri);
                let key = url.as_ref().and_then(url_key);
                (url, key)
            }
        };
        let referrer_key = r.head.referrer.as_deref().and_then(|s| url::Url::parse(s).ok()).as_ref().and_then(url_key);
        let is_favicon = match &url {
            Some(u) => u.path() == "/favicon.ico",
            None => key.is_some() && r.head.uri.split('?').next() == Some("/favicon.ico"),
        };

        let mut embed_of: Option<(u64, Option<usize>)> = None;
        if let Some(ids) = self.by_client.get(&r.client) {
            for &id in ids.iter().rev() {
                let p = &self.open[&id];
                if let Some(&i) = key.as_ref().and_then(|k| p.index.get(k)) {
                    embed_of = Some((id, Some(i)));
                    break;
                }
                if is_favicon {
                    continue;
                }
                let referred = referrer_key.as_ref().is_some_and(|rk| p.referrers.contains(rk));
                let recent = now.saturating_since(p.last_activity) < self.cfg.quiet || p.in_flight > 0;
                let sub = r.head.destination == Destination::Subresource;
                let weak_ok = !p.list_reliable && r.head.destination != Destination::Document && recent && p.has_container_response();
                if (referred && (sub || weak_ok)) || (r.head.referrer.is_none() && weak_ok && sub) {
                    embed_of = Some((id, None));
                    break;
                }
            }
        }

        let rtt = self.rtt_for(r.client, r.rtt);
        let id = match embed_of {
            Some((id, idx)) => {
                let p = self.open.get_mut(&id).expect("open");
                if let Some(i) = idx {
                    p.expected[i].fetched = true;
                }
                id
            }
            None => {
                // A navigation: a pageview of its own. It starts at the connection's first SYN if the
                // request went out right after the handshake, else at the request itself.
                let fresh = r.depth == 1
                    && r.conn_first_syn.is_some()
                    && r.conn_established.is_some_and(|e| r.ts.saturating_since(e) <= self.cfg.preconnect_idle);
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
                p.host = r.head.host.clone().or_else(|| Some(r.server.clone()));
                p.server = Some(r.server.clone());
                p.container = Some(r.head.uri.clone());
                p.base = url.clone();
                if url.is_none() && key.is_some() {
                    p.base_target = Some((r.head.host.clone(), r.server.clone(), r.head.uri.clone()));
                }
                if let Some(k) = &key {
                    p.referrers.push(k.clone());
                }
                id
            }
        };

        // Attach the connection to this pageview (moving it from another if it was tentatively there).
        let prev = self.conn_pv.insert(r.conn, id);
        if let Some(prev) = prev.filter(|p| *p != id) {
            if let Some(pp) = self.open.get_mut(&prev) {
                if let Some(i) = pp.conn_index(r.conn) {
                    if !pp.txns.iter().any(|t| t.conn == i as u16) {
                        pp.conns.remove(i);
                        for t in pp.txns.iter_mut() {
                            if t.conn as usize > i {
                                t.conn -= 1;
                            }
                        }
                    }
                }
            }
            self.schedule(prev);
        }
        let is_container = embed_of.is_none();
        let p = self.open.get_mut(&id).expect("open");
        let ci = match p.conn_index(r.conn) {
            Some(i) => i,
            None => {
                let from_syn = r.depth == 1 && (is_container || p.conns.is_empty() || r.conn_first_syn.is_some_and(|s| s >= p.start));
                p.conns.push(PvConn {
                    conn: r.conn,
                    first_syn: if from_syn { r.conn_first_syn } else { None },
                    syns: if from_syn { r.conn_syns } else { 0 },
                    synacks: if from_syn { r.conn_synacks } else { 0 },
                    first_synack: if from_syn { r.conn_first_synack } else { None },
                    established: if from_syn { r.conn_established } else { None },
                    failed_at: None,
                    pending: false,
                    rtt,
                });
                p.conns.len() - 1
            }
        };
        let extends_end = !matches!(embed_of, Some((_, Some(i))) if p.expected[i].kind == EmbedKind::Icon);
        p.txns.push(PvTxn {
            conn: ci as u16,
            depth: r.depth,
            uri: r.head.uri.clone(),
            request_ts: r.ts,
            response_first: None,
            response_last: None,
            done: false,
            extends_end,
            container: is_container,
            embed: embed_of.and_then(|(_, i)| i).map(|i| i as u32),
        });
        p.in_flight += 1;
        self.txn_pv.insert((r.conn, r.depth), id);
        self.touch(id, now);
        id
    }

    /// The response head of a transaction arrived.
    pub fn on_response_head(&mut self, now: Timestamp, conn: ConnId, depth: u32, html: bool, encoded: bool) {
        let Some(&id) = self.txn_pv.get(&(conn, depth)) else { return };
        let Some(p) = self.open.get_mut(&id) else { return };
        let ci = p.conn_index(conn);
        if let Some(t) = p.txns.iter_mut().find(|t| Some(t.conn as usize) == ci && t.depth == depth) {
            t.response_first.get_or_insert(now);
            if t.container && html {
                p.list_reliable = !encoded;
            }
        }
        self.touch(id, now);
    }

    /// Embedded references found in a response body: the container's, or a stylesheet's / frame's.
    pub fn on_embeds(&mut self, now: Timestamp, conn: ConnId, depth: u32, refs: &[EmbedRef]) {
        let Some(&id) = self.txn_pv.get(&(conn, depth)) else { return };
        let Some(p) = self.open.get_mut(&id) else { return };
        let ci = p.conn_index(conn);
        if p.base.is_none() {
            if let Some((host, server, uri)) = p.base_target.take() {
                p.base = request_url(host.as_deref(), &server, &uri);
            }
        }
        let Some(t) = p.txns.iter().find(|t| Some(t.conn as usize) == ci && t.depth == depth) else { return };
        // The base for relative references is the document that holds them.
        let base = if t.container { p.base.clone() } else { p.base.as_ref().and_then(|b| b.join(&t.uri).ok()) };
        let Some(base) = base else { return };
        for r in refs {
            let keys: Vec<String> = r.urls.iter().filter_map(|u| base.join(u).ok()).filter_map(|u| url_key(&u)).collect();
            if keys.is_empty() || keys.iter().any(|k| p.index.contains_key(k)) {
                continue;
            }
            let i = p.expected.len();
            p.expected.push(Expected { required: r.required, kind: r.kind, fetched: false });
            for k in &keys {
                p.index.insert(k.clone(), i);
            }
            if matches!(r.kind, EmbedKind::Stylesheet | EmbedKind::Frame) {
                p.referrers.extend(keys);
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
            let ci = p.conn_index(conn);
            if let Some(t) = p.txns.iter_mut().find(|t| Some(t.conn as usize) == ci && t.depth == depth && !t.done) {
                t.done = true;
                if t.response_first.is_none() {
                    t.response_first = response_first;
                }
                // A retransmission seen earlier may already have moved the end later.
                t.response_last = match (t.response_last, response_last) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    (a, b) => a.or(b),
                };
                p.in_flight = p.in_flight.saturating_sub(1);
            }
            self.touch(id, now);
        }
        Some(id)
    }

    /// The server resent data on a connection that the client had not received (lost past the
    /// appliance): the client gets the response it belongs to (the connection's latest) only now.
    pub fn on_server_retransmission(&mut self, now: Timestamp, conn: ConnId) {
        let Some(&id) = self.conn_pv.get(&conn) else { return };
        let Some(p) = self.open.get_mut(&id) else { return };
        let Some(ci) = p.conn_index(conn) else { return };
        if let Some(t) = p.txns.iter_mut().filter(|t| t.conn as usize == ci && t.response_first.is_some()).max_by_key(|t| t.response_first) {
            if t.response_last.is_none_or(|l| now > l) {
                t.response_last = Some(now);
            }
        }
        self.touch(id, now);
    }

    /// Close pageviews whose quiet period is over.
    pub fn on_timeout(&mut self, now: Timestamp) {
        while let Some(Reverse((t, id, gen))) = self.deadlines.peek().copied() {
            if t > now {
                break;
            }
            self.deadlines.pop();
            let Some(p) = self.open.get(&id) else { continue };
            if p.check_gen != gen || p.in_flight > 0 || p.pending_handshakes() {
                continue;
            }
            self.finish(id);
        }
    }

    /// Close everything (end of capture or shutdown).
    pub fn finish_all(&mut self) {
        let mut ids: Vec<u64> = self.open.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            self.finish_cut(id);
        }
    }

    /// Finish a pageview at a shutdown: flagged incomplete when it was not done yet.
    fn finish_cut(&mut self, id: u64) {
        let cut = self.open.get(&id).is_some_and(|p| p.in_flight > 0 || p.pending_handshakes() || !p.all_required_fetched());
        self.finish(id);
        if cut {
            if let Some(rec) = self.done.last_mut() {
                rec.incomplete = true;
            }
        }
    }

    fn finish(&mut self, id: u64) {
        let Some(p) = self.open.remove(&id) else { return };
        if let Some(list) = self.by_client.get_mut(&p.client) {
            list.retain(|x| *x != id);
            if list.is_empty() {
                self.by_client.remove(&p.client);
            }
        }
        for c in &p.conns {
            if self.conn_pv.get(&c.conn) == Some(&id) {
                self.conn_pv.remove(&c.conn);
            }
        }
        for t in &p.txns {
            if !t.done {
                self.txn_pv.remove(&(p.conns[t.conn as usize].conn, t.depth));
            }
        }
        let rec = build_record(&p, &self.cfg);
        self.done.push(rec);
    }
}

/// Client-side end of the pageview, on the appliance's clock shifted by half an RTT.
fn build_record(p: &OpenPv, cfg: &PageviewConfig) -> PageviewRecord {
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
    let rel = |t: Timestamp, c: &PvConn, outbound: bool| {
        let shifted = if outbound { t + c.rtt / 2 } else { t - c.rtt / 2 };
        shifted.saturating_since(p.start).as_secs_f64()
    };
    let mut events = Vec::new();
    // With `max_events` 0 (the inline driver, which keeps the response time only) no graph is made.
    let conns = if cfg.max_events == 0 { &p.conns[..0] } else { &p.conns[..] };
    for (i, c) in conns.iter().enumerate() {
        let i = i as u16;
        if let Some(s) = c.first_syn {
            events.push(EventNode { kind: "syn", conn: i, t_s: rel(s, c, false), uri: None });
        }
        for _ in 1..c.syns.max(1) {
            events.push(EventNode { kind: "syn_retransmit", conn: i, t_s: rel(c.first_syn.unwrap_or(p.start), c, false), uri: None });
        }
        if let Some(s) = c.first_synack {
            events.push(EventNode { kind: "synack", conn: i, t_s: rel(s, c, true), uri: None });
            for _ in 1..c.synacks {
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
    let txns = if cfg.max_events == 0 { &p.txns[..0] } else { &p.txns[..] };
    for t in txns {
        let c = &p.conns[t.conn as usize];
        events.push(EventNode { kind: "request", conn: t.conn, t_s: rel(t.request_ts, c, false), uri: Some(t.uri.clone()) });
        if let Some(f) = t.response_first {
            events.push(EventNode { kind: "response_head", conn: t.conn, t_s: rel(f, c, true), uri: None });
        }
        if let Some(l) = t.response_last.filter(|_| t.done) {
            events.push(EventNode { kind: "last_byte", conn: t.conn, t_s: rel(l, c, true), uri: None });
        }
    }
    events.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
    events.truncate(cfg.max_events);

    let (t_conn, t_server, t_transfer) = critical_path(p);
    let objects: Vec<&PvTxn> = p.txns.iter().filter(|t| !t.container).collect();
    PageviewRecord {
        id: p.id,
        client: p.client.to_string(),
        host: p.host.clone(),
        container: p.container.clone(),
        start_ts: p.start.as_secs_f64(),
        end_ts: end.as_secs_f64(),
        rt_s: end.saturating_since(p.start).as_secs_f64(),
        objects: objects.len() as u32,
        object_uris: objects.iter().map(|t| t.uri.clone()).collect(),
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
        incomplete: false,
    }
}

/// T_conn, T_server and T_transfer along the critical path (004 Figure 2): walk back from whatever
/// ended last, through the transactions before it on its connection, its handshake, and the
/// transaction that made the browser open that connection.
fn critical_path(p: &OpenPv) -> (Duration, Duration, Duration) {
    let (mut conn, mut server, mut transfer) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    // The item that ended last: a failed connection or a transaction.
    let last_txn = p.txns.iter().filter(|t| t.extends_end).max_by_key(|t| t.response_last.or(t.response_first).unwrap_or(t.request_ts));
    let last_fail = p.conns.iter().enumerate().filter_map(|(i, c)| c.failed_at.map(|f| (i, f))).max_by_key(|(_, f)| *f);
    let txn_end = |t: &PvTxn| t.response_last.or(t.response_first).unwrap_or(t.request_ts);
    let mut cursor_txn: Option<&PvTxn> = last_txn;
    if let (Some((ci, f)), lt) = (last_fail, last_txn) {
        if lt.is_none_or(|t| f > txn_end(t)) {
            let c = &p.conns[ci];
            let s = c.first_syn.unwrap_or(f);
            conn += f.saturating_since(s);
            cursor_txn = p.txns.iter().filter(|t| txn_end(t) <= s).max_by_key(|t| txn_end(t));
        }
    }
    let mut guard = 0;
    while let Some(t) = cursor_txn {
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
        // The transaction before it on its connection, if any.
        let prev_same = p.txns.iter().filter(|x| x.conn == t.conn && x.depth < t.depth && txn_end(x) <= t.request_ts).max_by_key(|x| x.depth);
        if let Some(x) = prev_same {
            cursor_txn = Some(x);
            continue;
        }
        let c = &p.conns[t.conn as usize];
        if let (Some(s), Some(e)) = (c.first_syn, c.established) {
            conn += e.saturating_since(s);
            cursor_txn = p.txns.iter().filter(|x| x.conn != t.conn && txn_end(x) <= s).max_by_key(|x| txn_end(x));
        } else {
            cursor_txn = None;
        }
    }
    (conn, server, transfer)
}
