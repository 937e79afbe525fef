//! The state of an open pageview: its connections, its transactions and the objects its
//! container (and its stylesheets and frames) listed.
//!
//! Every question the tracker asks of an open pageview on a packet's path is answered in O(1):
//! the connection and the transaction are found through indexes, and what a scan of its lists
//! would say (a handshake pending, every required object fetched, the container answered) is
//! kept as counts updated where the lists change. Its lists are bounded by the caps of
//! [`super::PageviewConfig`]: what comes past a cap is counted in `capped`, not kept.

use std::net::IpAddr;
use std::time::Duration;

use ahash::{AHashMap, AHashSet};

use crate::flow::ConnId;
use crate::http::EmbedKind;
use crate::time::Timestamp;
use crate::wire::{seq_lt, seq_span};

/// A connection of an open pageview, with its handshake as seen at the appliance.
#[derive(Clone, Debug)]
pub(super) struct PvConn {
    pub(super) conn: ConnId,
    pub(super) first_syn: Option<Timestamp>,
    pub(super) syns: u16,
    pub(super) synacks: u16,
    pub(super) first_synack: Option<Timestamp>,
    pub(super) established: Option<Timestamp>,
    pub(super) failed_at: Option<Timestamp>,
    /// Handshake under way (blocks the pageview from ending).
    pub(super) pending: bool,
    pub(super) rtt: Duration,
    /// Its handshake completed with the client's ACK of the server's SYN/ACK (evidence of a
    /// real client; data alone is not).
    pub(super) acked: bool,
    /// Its transactions in the pageview, as indexes into `txns`, in the order they came.
    pub(super) txns: Vec<u32>,
    /// Its transaction whose response began last (index into `txns`).
    pub(super) last_responded: Option<u32>,
    /// The server's latest burst of retransmissions that moved that transaction's end, until a
    /// D-SACK shows it spurious.
    pub(super) resent: Option<Resent>,
}

/// A burst of server retransmissions on a connection (segments resent within a quarter RTT of
/// each other), to a transaction that had ended, that moved its end
/// ([`super::Pageviews::on_server_retransmission`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct Resent {
    /// The transaction (index into the pageview's `txns`).
    pub(super) txn: u32,
    /// The bytes resent, first to last (sequence numbers).
    pub(super) seq: u32,
    pub(super) end: u32,
    /// The transaction's end before the burst, and the end the burst's last segment gave it.
    pub(super) before: Timestamp,
    pub(super) moved_to: Timestamp,
    /// The parts of `seq`..`end` the client's D-SACKs reported received twice (the burst was
    /// spurious once they cover it).
    pub(super) twice: Twice,
}

/// The runs of sequence numbers a client's D-SACKs reported received twice, in whatever order
/// the reports came: up to four runs apart, merged as reports join them. A report that would
/// make a fifth is not kept (the burst then stays, as if it had not come).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Twice {
    runs: [(u32, u32); 4],
    n: u8,
}

impl Twice {
    /// The client reported `seq` to `end` received twice.
    pub(super) fn add(&mut self, seq: u32, end: u32) {
        let (mut run, mut runs, mut n) = ((seq, end), self.runs, self.n as usize);
        let mut i = 0;
        while i < n {
            let (a, b) = runs[i];
            if !seq_lt(b, run.0) && !seq_lt(run.1, a) {
                // It overlaps or touches run i: one run (the runs kept touch none of each other,
                // so the grown run reaches no run it did not reach before); then look at the run
                // moved into i's place.
                run = seq_span(run, (a, b));
                runs[i] = runs[n - 1];
                n -= 1;
            } else {
                i += 1;
            }
        }
        if n < runs.len() {
            runs[n] = run;
            (self.runs, self.n) = (runs, n as u8 + 1);
        }
    }

    /// Every byte of `seq` to `end` was reported received twice.
    pub(super) fn covers(&self, seq: u32, end: u32) -> bool {
        self.runs[..self.n as usize].iter().any(|&(a, b)| !seq_lt(seq, a) && !seq_lt(b, end))
    }
}

impl PvConn {
    /// A connection seen first at its SYN or at a request (`pending`: its handshake is under way).
    pub(super) fn new(conn: ConnId, first_syn: Option<Timestamp>, syns: u16, pending: bool, rtt: Duration) -> PvConn {
        PvConn {
            conn,
            first_syn,
            syns,
            synacks: 0,
            first_synack: None,
            established: None,
            failed_at: None,
            pending,
            rtt,
            acked: false,
            txns: Vec::new(),
            last_responded: None,
            resent: None,
        }
    }
}

/// A transaction of an open pageview.
#[derive(Clone, Debug)]
pub(super) struct PvTxn {
    pub(super) conn: u16,
    pub(super) depth: u32,
    /// Its request target as sent; empty for an encrypted exchange.
    pub(super) uri: String,
    /// An exchange of encrypted records (TLS), not a request read.
    pub(super) encrypted: bool,
    /// Requests it carried: 1 for HTTP; an encrypted exchange's estimate.
    pub(super) requests: u32,
    /// Counted in its pageview's `in_flight`: from its request to its end (HTTP) or to its
    /// response's first record (encrypted).
    pub(super) in_flight: bool,
    /// In flight with server records held that may be TLS 1.3 tickets or its whole response
    /// ([`crate::tls::exchange`]): counted in its pageview's `held` too.
    pub(super) held: bool,
    pub(super) request_ts: Timestamp,
    pub(super) response_first: Option<Timestamp>,
    pub(super) response_last: Option<Timestamp>,
    pub(super) done: bool,
    /// Counts towards the end of the pageview (icons do not: the load event does not wait for them).
    pub(super) extends_end: bool,
    pub(super) container: bool,
    /// The object of the container's embed list it fetches (index in `expected`).
    pub(super) embed: Option<u32>,
}

/// An object an open pageview's container (or one of its stylesheets or frames) listed.
#[derive(Clone, Debug)]
pub(super) struct Expected {
    pub(super) required: bool,
    pub(super) kind: EmbedKind,
    pub(super) fetched: bool,
}

/// A pageview not finished yet.
pub(super) struct OpenPv {
    pub(super) id: u64,
    pub(super) client: IpAddr,
    /// The server of its first request ("ip:port").
    pub(super) server: Option<String>,
    pub(super) host: Option<String>,
    pub(super) container: Option<String>,
    pub(super) base: Option<url::Url>,
    /// (Host, server, target) of the container request, when its URL was not made yet: `base`
    /// is made from it when embedded references come.
    pub(super) base_target: Option<(Option<String>, String, String)>,
    /// Client-side start estimate.
    pub(super) start: Timestamp,
    /// Its connections; read them, change them through the methods below (they keep the
    /// indexes and counts).
    pub(super) conns: Vec<PvConn>,
    pub(super) txns: Vec<PvTxn>,
    pub(super) expected: Vec<Expected>,
    /// Resolved URL key → index in `expected`.
    pub(super) index: AHashMap<String, usize>,
    /// URL keys of the container and of objects that may refer to further objects (CSS, frames).
    pub(super) referrers: AHashSet<String>,
    /// Connection → index in `conns`.
    conn_ix: AHashMap<ConnId, u16>,
    /// (index in `conns`, depth) → index in `txns` (the first such transaction).
    txn_ix: AHashMap<(u16, u32), u32>,
    /// Connections whose handshake is under way.
    pending: u32,
    /// Listed objects a browser always fetches, not fetched yet.
    unfetched_required: u32,
    /// The container's response has begun.
    container_responded: bool,
    /// Connections, requests and listed references left out past the caps.
    pub(super) capped: u32,
    /// Heap bytes its lists hold (the tracker's budget), and what the tracker counted of them.
    pub(super) bytes: usize,
    pub(super) bytes_counted: usize,
    /// The container's embed list is complete and trustworthy (scanned, not encoded).
    pub(super) list_reliable: bool,
    /// Started by an encrypted exchange (TLS): its requests are joined by time alone.
    pub(super) encrypted: bool,
    pub(super) in_flight: u32,
    /// Of those in flight, encrypted exchanges with records held ([`PvTxn::held`]).
    pub(super) held: u32,
    pub(super) last_activity: Timestamp,
    /// Generation of the finalisation check, to drop stale deadlines.
    pub(super) check_gen: u32,
    /// What rlm did to it so far.
    pub(super) acts: Acts,
}

impl OpenPv {
    /// A pageview of `client` that starts at `start`, with nothing in it yet.
    pub(super) fn new(id: u64, client: IpAddr, start: Timestamp, now: Timestamp) -> OpenPv {
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
            referrers: AHashSet::new(),
            conn_ix: AHashMap::new(),
            txn_ix: AHashMap::new(),
            pending: 0,
            unfetched_required: 0,
            container_responded: false,
            capped: 0,
            bytes: 0,
            bytes_counted: 0,
            list_reliable: false,
            encrypted: false,
            in_flight: 0,
            held: 0,
            last_activity: now,
            check_gen: 0,
            acts: Acts::default(),
        }
    }

    /// The index of a connection among the pageview's.
    pub(super) fn conn_index(&self, conn: ConnId) -> Option<usize> {
        self.conn_ix.get(&conn).map(|&i| usize::from(i))
    }

    /// The index in `txns` of transaction `depth` of connection `conn`.
    pub(super) fn txn_index(&self, conn: ConnId, depth: u32) -> Option<usize> {
        let ci = *self.conn_ix.get(&conn)?;
        self.txn_ix.get(&(ci, depth)).map(|&t| t as usize)
    }

    /// Whether a handshake of its connections is under way.
    pub(super) fn pending_handshakes(&self) -> bool {
        self.pending > 0
    }

    /// Whether every listed object a browser always fetches was fetched.
    pub(super) fn all_required_fetched(&self) -> bool {
        self.unfetched_required == 0
    }

    /// Whether the container's response has begun.
    pub(super) fn has_container_response(&self) -> bool {
        self.container_responded
    }

    /// Add a connection; its index, or `None` (counted in `capped`) past `max` connections.
    pub(super) fn push_conn(&mut self, c: PvConn, max: usize) -> Option<usize> {
        if self.conns.len() >= max.min(usize::from(u16::MAX)) {
            self.capped = self.capped.saturating_add(1);
            return None;
        }
        let i = self.conns.len();
        self.bytes += std::mem::size_of::<PvConn>() + 32;
        self.conn_ix.insert(c.conn, i as u16);
        self.pending += u32::from(c.pending);
        self.conns.push(c);
        Some(i)
    }

    /// Whether connection `i`'s handshake is under way.
    pub(super) fn set_pending(&mut self, i: usize, pending: bool) {
        let c = &mut self.conns[i];
        if c.pending != pending {
            c.pending = pending;
            if pending {
                self.pending += 1;
            } else {
                self.pending -= 1;
            }
        }
    }

    /// Take connection `i` out (it has no transaction here: it joined another pageview). The
    /// indexes are made again, which is O(its lists): a connection leaves a pageview at most once.
    pub(super) fn remove_conn(&mut self, i: usize) {
        let c = self.conns.remove(i);
        debug_assert!(c.txns.is_empty());
        self.pending -= u32::from(c.pending);
        for t in self.txns.iter_mut() {
            if usize::from(t.conn) > i {
                t.conn -= 1;
            }
        }
        self.conn_ix = self.conns.iter().enumerate().map(|(i, c)| (c.conn, i as u16)).collect();
        self.txn_ix.clear();
        for (ti, t) in self.txns.iter().enumerate() {
            self.txn_ix.entry((t.conn, t.depth)).or_insert(ti as u32);
        }
    }

    /// Add a transaction on connection `t.conn`; false (counted in `capped`) past `max`.
    pub(super) fn push_txn(&mut self, t: PvTxn, max: usize) -> bool {
        if self.txns.len() >= max.min(u32::MAX as usize) {
            self.capped = self.capped.saturating_add(1);
            return false;
        }
        let ti = self.txns.len() as u32;
        self.bytes += std::mem::size_of::<PvTxn>() + t.uri.capacity() + 32;
        self.txn_ix.entry((t.conn, t.depth)).or_insert(ti);
        self.conns[usize::from(t.conn)].txns.push(ti);
        self.txns.push(t);
        true
    }

    /// Transaction `ti`'s response began at `at` (if it had not already).
    pub(super) fn respond(&mut self, ti: usize, at: Timestamp) {
        let t = &mut self.txns[ti];
        if t.response_first.is_some() {
            return;
        }
        t.response_first = Some(at);
        self.container_responded |= t.container;
        let c = &mut self.conns[usize::from(t.conn)];
        let later = c.last_responded.and_then(|l| self.txns[l as usize].response_first).is_none_or(|l| l <= at);
        if later {
            c.last_responded = Some(ti as u32);
        }
    }

    /// Transaction `ti` is no longer in flight (if it was).
    pub(super) fn land(&mut self, ti: usize) {
        let t = &mut self.txns[ti];
        if std::mem::take(&mut t.in_flight) {
            self.in_flight = self.in_flight.saturating_sub(1);
        }
        if std::mem::take(&mut t.held) {
            self.held = self.held.saturating_sub(1);
        }
    }

    /// Transaction `ti`, in flight, has server records held that may be tickets or its response.
    pub(super) fn hold(&mut self, ti: usize) {
        let t = &mut self.txns[ti];
        if t.in_flight && !std::mem::replace(&mut t.held, true) {
            self.held += 1;
        }
    }

    /// Add a listed object; its index, or `None` (counted in `capped`) past `max`.
    pub(super) fn push_expected(&mut self, e: Expected, max: usize) -> Option<usize> {
        if self.expected.len() >= max {
            self.capped = self.capped.saturating_add(1);
            return None;
        }
        self.unfetched_required += u32::from(e.required && !e.fetched);
        self.bytes += std::mem::size_of::<Expected>();
        self.expected.push(e);
        Some(self.expected.len() - 1)
    }

    /// Listed object `i` was asked for.
    pub(super) fn fetched(&mut self, i: usize) {
        let e = &mut self.expected[i];
        if !e.fetched {
            e.fetched = true;
            self.unfetched_required -= u32::from(e.required);
        }
    }

    /// Note a URL key that may refer to further objects; past `max` of them, counted in `capped`.
    pub(super) fn add_referrer(&mut self, key: String, max: usize) {
        if self.referrers.len() >= max && !self.referrers.contains(&key) {
            self.capped = self.capped.saturating_add(1);
            return;
        }
        self.bytes += key.capacity() + 16;
        self.referrers.insert(key);
    }
}

/// What rlm did to a pageview: its connections' SYNs and SYN/ACKs (counted when the connection
/// serves a request of the pageview, or fails as one of its connections) and its container's
/// references. A pageview record's `actions`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Acts {
    /// Client SYNs `DROP SYN` dropped (the client waited for its retransmission).
    pub syns_dropped: u32,
    /// Client SYNs `LIMIT SYN` dropped for want of a token.
    pub syns_limited: u32,
    /// First SYNs held back by `DELAY FIRST SYN` (sent later from rlm's copy).
    pub syns_delayed: u32,
    /// The client's own SYN retransmissions absorbed while rlm sent the SYN for it.
    pub syns_absorbed: u32,
    /// Copies of its SYNs rlm sent to the server (`FAST SYN`, and a delayed first SYN's).
    pub syns_resent: u32,
    /// Copies of the server's SYN/ACKs rlm sent to the client (`FAST SYN/ACK`).
    pub synacks_resent: u32,
    /// Image references blanked out of its container (`REMOVE EMBEDS`).
    pub embeds_blanked: u32,
    /// Requests of its embedded images rewritten to their variant (`REWRITE EMBEDS`).
    pub embeds_rewritten: u32,
    /// Its requests `REJECT` answered in the server's stead (the client got the appliance's
    /// error page).
    pub requests_rejected: u32,
}

impl Acts {
    /// Add the counts of `other`.
    pub(super) fn add(&mut self, other: &Acts) {
        self.syns_dropped += other.syns_dropped;
        self.syns_limited += other.syns_limited;
        self.syns_delayed += other.syns_delayed;
        self.syns_absorbed += other.syns_absorbed;
        self.syns_resent += other.syns_resent;
        self.synacks_resent += other.synacks_resent;
        self.embeds_blanked += other.embeds_blanked;
        self.embeds_rewritten += other.embeds_rewritten;
        self.requests_rejected += other.requests_rejected;
    }
}

#[cfg(test)]
mod tests {
    use super::Twice;

    #[test]
    fn reports_received_twice_merge_in_any_order_and_across_the_wrap() {
        // Three blocks reported last first: covered once the middle one joins them.
        let mut t = Twice::default();
        t.add(300, 400);
        t.add(100, 200);
        assert!(!t.covers(100, 400));
        t.add(200, 300);
        assert!(t.covers(100, 400) && t.covers(150, 350) && !t.covers(99, 400));
        // Across the sequence numbers' wrap.
        let mut t = Twice::default();
        t.add(10, 50);
        t.add(u32::MAX - 20, 10);
        assert!(t.covers(u32::MAX - 20, 50));
        // Four runs apart are kept; a fifth apart is not, one that joins them still is.
        let mut t = Twice::default();
        for k in 0..5u32 {
            t.add(k * 100, k * 100 + 10);
        }
        assert!(t.covers(300, 310) && !t.covers(400, 410));
        t.add(10, 300);
        assert!(t.covers(0, 310));
    }
}
