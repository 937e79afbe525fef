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
//!
//! [`Pageviews`] is the tracker: its tables, the queries on them and the closing of pageviews
//! are here; what a connection's handshake and end do to them is in `connections`, what a
//! transaction does (which pageview a request joins, its response, its embedded references, its
//! end) in `requests`. `open` is the state of an open pageview, `record` the finished pageview
//! reported (its event graph and critical path), `urls` the keys requests are matched by.

mod connections;
mod open;
mod record;
mod requests;
mod urls;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::net::IpAddr;
use std::time::Duration;

use ahash::AHashMap;

use crate::flow::ConnId;
use crate::http::EmbedKind;
use crate::time::Timestamp;
use open::OpenPv;
use record::{build_record, evidence};

pub use open::Acts;
pub use record::{EventNode, Evidence, PageviewRecord};
pub use requests::{Asked, RequestInfo};
pub use urls::{request_url, simple_request_key, url_key};

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
    /// A pageview of encrypted exchanges (TLS) ends after this much quiet with nothing in flight,
    /// and its client's next exchange then starts a pageview of its own: the gap that tells a
    /// page's objects from the next page when nothing names them.
    pub encrypted_gap: Duration,
    /// Open pageviews kept per client; the oldest is closed beyond this.
    pub max_open_per_client: usize,
    /// Event nodes kept per pageview.
    pub max_events: usize,
    /// Clients whose last RTT is remembered (for their connections that have none).
    pub max_client_rtts: usize,
    /// A remembered RTT not refreshed for this long may be forgotten.
    pub client_rtt_ttl: Duration,
    /// Connections kept per pageview; a SYN or request on a further one is left out of it and
    /// counted in the record's `capped` (a browser opens a few per host).
    pub max_conns: usize,
    /// Transactions kept per pageview; further requests are left out and counted in `capped`.
    pub max_txns: usize,
    /// References a pageview's container (and its stylesheets and frames) may list; further ones
    /// are left out and counted in `capped`.
    pub max_expected: usize,
    /// URL keys of documents that may refer to a pageview's objects (its container, stylesheets
    /// and frames); further ones are left out and counted in `capped`.
    pub max_referrers: usize,
    /// Most bytes the open pageviews' lists may hold together (their connections, requests and
    /// listed references). Past it the oldest open pageview with no evidence of a real client
    /// (else the oldest) is finished, cut short (`incomplete`), until it is met again.
    pub max_list_bytes: usize,
    /// Pageviews are numbered `first_id`, `first_id + id_step`, ...: engines side by side
    /// ([`crate::engine::Config::for_shard`]) number theirs apart.
    pub first_id: u64,
    #[allow(missing_docs)]
    pub id_step: u64,
}

impl Default for PageviewConfig {
    fn default() -> Self {
        PageviewConfig {
            connect_timeout: Duration::from_secs(21),
            linger: Duration::from_millis(1500),
            quiet: Duration::from_secs(5),
            preconnect_idle: Duration::from_secs(1),
            encrypted_gap: Duration::from_secs(1),
            max_open_per_client: 4,
            max_events: 512,
            max_client_rtts: 65_536,
            client_rtt_ttl: Duration::from_secs(600),
            max_conns: 256,
            max_txns: 1024,
            max_expected: 2048,
            max_referrers: 64,
            max_list_bytes: 32 << 20,
            first_id: 1,
            id_step: 1,
        }
    }
}

/// A connection whose handshake failed: its first SYN, when it failed (the client's TCP gave
/// up, or the server refused it), the SYNs seen, and whether that shows a real client
/// (`proven`: see docs/architecture.md, "Evidence").
#[derive(Clone, Copy, Debug)]
pub struct Failure {
    /// The connection's first SYN seen.
    pub first_syn: Timestamp,
    /// When it failed: the first SYN plus the connect timeout, or the refusal.
    pub at: Timestamp,
    /// SYNs seen on it.
    pub syns: u16,
    /// Whether it shows a real client.
    pub proven: bool,
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
    /// What rlm did to connections' handshakes, kept until the connection joins a pageview: its
    /// next request, or its failure. Sparse (connections rlm acted on), and left at each
    /// connection's close, so bounded by the flow table; nothing of it in the connection's own
    /// state, which has a budget.
    pending_acts: AHashMap<ConnId, Acts>,
    /// Each client that answered a SYN/ACK: its last measured RTT and when it was measured (none
    /// if no bare ACK timed one), and when it last answered (bounded: see `learn_client`).
    client_rtt: AHashMap<IpAddr, (Option<(Duration, Timestamp)>, Timestamp)>,
    deadlines: BinaryHeap<Reverse<(Timestamp, u64, u32)>>,
    /// Bytes the open pageviews' lists hold, against `max_list_bytes`.
    list_bytes: usize,
    /// Open pageviews in the order they opened (finished ones are dropped when they come to the
    /// front, or at a compaction).
    opened: VecDeque<u64>,
    /// The same, less those found since with evidence of a real client (a handshake, an
    /// answered request: evidence is never lost, so each leaves at most once): the lists'
    /// budget cuts these short first, so that what a spoofer or a connection joined mid-stream
    /// opens cannot push a real client's pageview out.
    opened_unproven: VecDeque<u64>,
    /// Pageviews finished early to keep `max_list_bytes`.
    evicted: u64,
    /// The heap's size after its last compaction ([`Pageviews::schedule`]).
    deadlines_compacted: usize,
    next_id: u64,
    done: Vec<PageviewRecord>,
}

impl Pageviews {
    /// A tracker with no pageview open.
    pub fn new(cfg: PageviewConfig) -> Pageviews {
        Pageviews {
            next_id: cfg.first_id,
            cfg,
            open: AHashMap::new(),
            by_client: AHashMap::new(),
            conn_pv: AHashMap::new(),
            txn_pv: AHashMap::new(),
            pending_acts: AHashMap::new(),
            client_rtt: AHashMap::new(),
            deadlines: BinaryHeap::new(),
            list_bytes: 0,
            opened: VecDeque::new(),
            opened_unproven: VecDeque::new(),
            evicted: 0,
            deadlines_compacted: 0,
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
        let t = &p.txns[p.txn_index(conn, depth)?];
        let i = t.embed? as usize;
        let listed = p.expected.get(..=i)?;
        (listed[i].kind == EmbedKind::Image).then(|| listed.iter().filter(|e| e.kind == EmbedKind::Image).count() as u32)
    }

    /// Elapsed client-perceived time of an open pageview (what rules look at while it runs).
    pub fn elapsed(&self, id: u64, now: Timestamp) -> Option<Duration> {
        self.open.get(&id).map(|p| now.saturating_since(p.start))
    }

    /// Whether rlm saw a handshake of the client complete within `client_rtt_ttl` (it answered a
    /// server's SYN/ACK: a spoofer cannot).
    pub fn client_known(&self, client: IpAddr, now: Timestamp) -> bool {
        self.client_rtt.get(&client).is_some_and(|(_, t)| now.saturating_since(*t) < self.cfg.client_rtt_ttl)
    }

    /// The client's last measured RTT (its handshakes at the appliance), if known.
    pub fn client_rtt(&self, client: IpAddr) -> Option<Duration> {
        self.client_rtt.get(&client).and_then(|(r, _)| r.map(|(r, _)| r))
    }

    /// The RTT a connection's times are shifted by: its own, else its client's last, else zero.
    fn rtt_for(&self, client: IpAddr, rtt: Option<Duration>) -> Duration {
        rtt.or_else(|| self.client_rtt(client)).unwrap_or(Duration::ZERO)
    }

    /// A client answered a server's SYN/ACK (`rtt`: the handshake's time, when a bare ACK timed
    /// it; else the RTT it is remembered with stays, if measured within `client_rtt_ttl`: untimed
    /// answers do not keep an old RTT for ever). The table is bounded: past `max_client_rtts`
    /// entries, those not refreshed for `client_rtt_ttl` go, and if that is not enough, the
    /// older half.
    pub fn learn_client(&mut self, client: IpAddr, rtt: Option<Duration>, now: Timestamp) {
        let ttl = self.cfg.client_rtt_ttl;
        let e = self.client_rtt.entry(client).or_insert((None, now));
        *e = (rtt.map(|r| (r, now)).or(e.0.filter(|(_, at)| now.saturating_since(*at) < ttl)), now);
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

    /// Sizes of the pageview layer's tables (for bounds tests and metrics): open pageviews, their
    /// deadlines, remembered RTTs, connections with acts pending.
    pub fn table_sizes(&self) -> (usize, usize, usize, usize) {
        (self.open.len(), self.deadlines.len(), self.client_rtt.len(), self.pending_acts.len())
    }

    /// Bytes the open pageviews' lists hold, as last counted (against `max_list_bytes`).
    pub fn list_bytes(&self) -> usize {
        self.list_bytes
    }

    /// rlm acted on connection `conn`'s handshake (`DROP SYN`, `FAST SYN`, ...): kept until the
    /// connection joins a pageview (its next request, or its failure), which counts it. A
    /// connection is joined to its client's active pageview at its SYN only tentatively (its
    /// request may start another), hence the wait.
    pub fn on_conn_act(&mut self, conn: ConnId, act: impl FnOnce(&mut Acts)) {
        act(self.pending_acts.entry(conn).or_default());
    }

    /// rlm acted on transaction `depth` of `conn` (`REMOVE EMBEDS` blanked one of its container's
    /// references, `REWRITE EMBEDS` rewrote its request): counted on its pageview at once.
    pub fn on_txn_act(&mut self, conn: ConnId, depth: u32, act: impl FnOnce(&mut Acts)) {
        let Some(&id) = self.txn_pv.get(&(conn, depth)) else { return };
        if let Some(p) = self.open.get_mut(&id) {
            act(&mut p.acts);
        }
    }

    /// Connection `conn` joined pageview `id`: what rlm did to it so far counts there.
    fn settle_acts(&mut self, conn: ConnId, id: u64) {
        if let (Some(a), Some(p)) = (self.pending_acts.remove(&conn), self.open.get_mut(&id)) {
            p.acts.add(&a);
        }
    }

    /// Activity on a pageview: its quiet period starts again, and what its lists grew by is
    /// counted (over `max_list_bytes`, the oldest open pageviews, those with no evidence of a
    /// real client first, are cut short, possibly it).
    fn touch(&mut self, id: u64, now: Timestamp) {
        if let Some(p) = self.open.get_mut(&id) {
            if now > p.last_activity {
                p.last_activity = now;
            }
            self.list_bytes += p.bytes - p.bytes_counted;
            p.bytes_counted = p.bytes;
            self.schedule(id);
        }
        while self.list_bytes > self.cfg.max_list_bytes {
            let Some(oldest) = self.oldest_unproven().or_else(|| self.opened.pop_front()) else { break };
            if self.open.contains_key(&oldest) {
                self.finish_cut(oldest);
                self.evicted += 1;
            }
        }
    }

    /// The oldest open pageview with no evidence of a real client, taken off
    /// `opened_unproven` with those before it that closed or have shown evidence since.
    fn oldest_unproven(&mut self) -> Option<u64> {
        while let Some(id) = self.opened_unproven.pop_front() {
            if self.open.get(&id).is_some_and(|p| evidence(p) == Evidence::None) {
                return Some(id);
            }
        }
        None
    }

    /// Pageviews finished early to keep the lists within `max_list_bytes`.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// A new deadline for the end of a pageview's quiet period (superseding its earlier ones).
    fn schedule(&mut self, id: u64) {
        let Some(p) = self.open.get_mut(&id) else { return };
        p.check_gen = p.check_gen.wrapping_add(1);
        let wait = if p.encrypted {
            self.cfg.encrypted_gap
        } else if p.all_required_fetched() && p.has_container_response() {
            self.cfg.linger
        } else {
            self.cfg.quiet
        };
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

    /// The open pageviews with a request in flight: their client, server (`ip:port` of their
    /// first request), host and age at `now`, in seconds (the SLA controller's early view of
    /// response times to come).
    pub fn in_flight_ages(&self, now: Timestamp) -> impl Iterator<Item = (IpAddr, Option<&str>, Option<&str>, f64)> + '_ {
        self.open
            .values()
            .filter(|p| p.in_flight > 0)
            .map(move |p| (p.client, p.server.as_deref(), p.host.as_deref(), now.saturating_since(p.start).as_secs_f64()))
    }

    /// The `n` open pageviews with evidence of a real client that began first (the slowest so
    /// far, oldest first; a spoofer's half-open ones are left out), as records built at `now` for
    /// a person to read: their event graph of at most `max_events` nodes (whatever the tracker's
    /// own `max_events`), `end_ts` now, `rt_s` their age, `incomplete` set.
    pub fn oldest_open(&self, now: Timestamp, n: usize, max_events: usize) -> Vec<PageviewRecord> {
        let mut open: Vec<&OpenPv> = self.open.values().filter(|p| evidence(p) != Evidence::None).collect();
        if open.len() > n {
            if n == 0 {
                return Vec::new();
            }
            open.select_nth_unstable_by_key(n - 1, |p| (p.start, p.id));
            open.truncate(n);
        }
        open.sort_by_key(|p| (p.start, p.id));
        let cfg = PageviewConfig { max_events, ..self.cfg.clone() };
        open.into_iter()
            .map(|p| {
                let mut r = build_record(p, &cfg);
                r.end_ts = now.as_secs_f64();
                r.rt_s = now.saturating_since(p.start).as_secs_f64();
                r.incomplete = true;
                r
            })
            .collect()
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
            if p.encrypted {
                return p.has_container_response() && self.is_active(p, now);
            }
            p.has_container_response() && (!p.all_required_fetched() || p.in_flight > 0 || now.saturating_since(p.last_activity) < self.cfg.linger)
        })
    }

    /// Whether a pageview of encrypted exchanges is active: something in flight (not counting
    /// exchanges whose records are held: they may be answered already), a handshake of it under
    /// way, or quiet for less than `encrypted_gap`.
    fn is_active(&self, p: &OpenPv, now: Timestamp) -> bool {
        p.in_flight > p.held || p.pending_handshakes() || now.saturating_since(p.last_activity) < self.cfg.encrypted_gap
    }

    /// Open a pageview of `client` that started at `start` (closing the client's oldest beyond
    /// `max_open_per_client`); returns its id.
    fn new_pageview(&mut self, client: IpAddr, start: Timestamp, now: Timestamp) -> u64 {
        let id = self.next_id;
        self.next_id += self.cfg.id_step.max(1);
        if self.opened.len() > 2 * self.open.len() + 1024 {
            let open = &self.open;
            self.opened.retain(|i| open.contains_key(i));
            self.opened_unproven.retain(|i| open.get(i).is_some_and(|p| evidence(p) == Evidence::None));
        }
        self.opened.push_back(id);
        self.opened_unproven.push_back(id);
        let list = self.by_client.entry(client).or_default();
        list.push(id);
        let overflow = if list.len() > self.cfg.max_open_per_client { Some(list[0]) } else { None };
        self.open.insert(id, OpenPv::new(id, client, start, now));
        if let Some(old) = overflow {
            self.finish(old);
        }
        id
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

    /// Close a pageview: out of the tables, its record reported.
    fn finish(&mut self, id: u64) {
        let Some(p) = self.open.remove(&id) else { return };
        self.list_bytes -= p.bytes_counted;
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
        // An encrypted exchange is done only at its connection's next burst or end, which can
        // come long after its pageview: its entry stays until then (one a connection at most),
        // so that its record still names the pageview.
        for t in &p.txns {
            if !t.done && !t.encrypted {
                self.txn_pv.remove(&(p.conns[t.conn as usize].conn, t.depth));
            }
        }
        let mut rec = build_record(&p, &self.cfg);
        if rec.evidence == Evidence::None && self.client_known(p.client, p.last_activity) {
            rec.evidence = Evidence::Address;
        }
        self.done.push(rec);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client's RTT stays remembered only `client_rtt_ttl` past its measure when untimed
    /// answers (handshakes completed by data) alone keep the client known.
    #[test]
    fn untimed_answers_keep_the_client_known_but_not_an_old_rtt() {
        let mut p = Pageviews::new(PageviewConfig::default());
        let client: IpAddr = "10.4.0.1".parse().unwrap();
        let s = |secs: u64| Timestamp::ZERO + Duration::from_secs(secs);
        p.learn_client(client, Some(Duration::from_millis(80)), s(0));
        p.learn_client(client, None, s(300));
        assert_eq!(p.client_rtt(client), Some(Duration::from_millis(80)));
        p.learn_client(client, None, s(700));
        assert!(p.client_known(client, s(700)));
        assert_eq!(p.client_rtt(client), None, "measured 700 s ago, past the 600 s");
        p.learn_client(client, Some(Duration::from_millis(90)), s(800));
        assert_eq!(p.client_rtt(client), Some(Duration::from_millis(90)));
    }
}
