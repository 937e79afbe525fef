//! What a connection's handshake and end do to the pageviews: a SYN while a pageview of its
//! client is active joins it, a completed handshake no longer holds it open, a failed one charges
//! it the client's connect timeout (or is a pageview of its own).

use std::net::IpAddr;
use std::time::Duration;

use super::open::PvConn;
use super::{Failure, Pageviews};
use crate::flow::ConnId;
use crate::time::Timestamp;

impl Pageviews {
    /// A client sent a SYN (`retransmission` if not its first on this connection).
    pub fn on_syn(&mut self, now: Timestamp, conn: ConnId, client: IpAddr, retransmission: bool) {
        if let Some(&id) = self.conn_pv.get(&conn) {
            if let Some(p) = self.open.get_mut(&id) {
                if let Some(i) = p.conn_index(conn) {
                    p.conns[i].syns = p.conns[i].syns.saturating_add(1);
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
            if p.push_conn(PvConn::new(conn, Some(now), 1, true, rtt), self.cfg.max_conns).is_some() {
                self.conn_pv.insert(conn, id);
            }
            self.touch(id, now);
        }
    }

    /// A server's SYN/ACK on `conn`: counted on the pageview the connection is attached to, if any.
    pub fn on_synack(&mut self, now: Timestamp, conn: ConnId) {
        if let Some(&id) = self.conn_pv.get(&conn) {
            if let Some(p) = self.open.get_mut(&id) {
                if let Some(i) = p.conn_index(conn) {
                    let c = &mut p.conns[i];
                    c.synacks = c.synacks.saturating_add(1);
                    c.first_synack.get_or_insert(now);
                }
            }
        }
    }

    /// A connection's handshake completed: its pageview no longer waits for it. `answered`: the
    /// client acknowledged the SYN/ACK (proof of a real client, remembered); `rtt`: the time a
    /// bare ACK gave the handshake, learnt for the client.
    pub fn on_established(&mut self, now: Timestamp, conn: ConnId, client: IpAddr, answered: bool, rtt: Option<Duration>) {
        if answered {
            self.learn_client(client, rtt, now);
        }
        if let Some(&id) = self.conn_pv.get(&conn) {
            if let Some(p) = self.open.get_mut(&id) {
                if let Some(i) = p.conn_index(conn) {
                    p.set_pending(i, false);
                    let c = &mut p.conns[i];
                    c.established = Some(now);
                    if let Some(r) = rtt {
                        c.rtt = r;
                    }
                    c.acked |= answered;
                }
            }
            self.touch(id, now);
        }
    }

    /// A connection's TLS handshake began (`under_way`) or ended: while it is under way, the
    /// connection is not ready for the page's requests and holds its pageview open, as its TCP
    /// handshake does (a server slow to answer a ClientHello under overload would otherwise
    /// leave the pageview quiet, and ended, before the connection's first request).
    pub fn on_tls_handshake(&mut self, now: Timestamp, conn: ConnId, under_way: bool) {
        let Some(&id) = self.conn_pv.get(&conn) else { return };
        let Some(p) = self.open.get_mut(&id) else { return };
        if let Some(i) = p.conn_index(conn) {
            p.set_pending(i, under_way);
        }
        self.touch(id, now);
    }

    /// A connection ended. `failed` when its handshake never completed (it failed when the
    /// client's TCP gives up, on the appliance's clock) or the server refused it. A failure
    /// charges the pageview it is in (or is a failed pageview of its own) only when `proven`; an
    /// unproven one leaves the pageview it was in (if nothing else of it is there) and makes
    /// none. What rlm did to it and no pageview counted yet goes to the pageview it is in (or
    /// the failed pageview it makes), else nowhere.
    pub fn on_conn_closed(&mut self, now: Timestamp, conn: ConnId, client: IpAddr, failed: Option<Failure>) {
        let id = self.conn_pv.remove(&conn);
        if let Some(id) = id {
            self.settle_acts(conn, id);
        }
        let acts = self.pending_acts.remove(&conn).unwrap_or_default();
        let unproven = failed.as_ref().is_some_and(|f| !f.proven);
        match (id, failed.filter(|f| f.proven)) {
            (Some(id), Some(Failure { first_syn, at, syns, .. })) => {
                if let Some(p) = self.open.get_mut(&id) {
                    if let Some(i) = p.conn_index(conn) {
                        p.set_pending(i, false);
                        let c = &mut p.conns[i];
                        c.failed_at = Some(at);
                        c.first_syn.get_or_insert(first_syn);
                        c.syns = c.syns.max(syns);
                    }
                }
                self.touch(id, now);
            }
            (Some(id), None) => {
                if let Some(p) = self.open.get_mut(&id) {
                    if let Some(i) = p.conn_index(conn) {
                        p.set_pending(i, false);
                        if unproven && p.conns[i].txns.is_empty() {
                            p.remove_conn(i);
                        }
                    }
                }
                self.schedule(id);
            }
            (None, Some(Failure { first_syn, at, syns, .. })) => {
                // The first connection of a page never got through: the client saw nothing but a failure.
                let rtt = self.rtt_for(client, None);
                let id = self.new_pageview(client, first_syn - rtt / 2, now);
                let p = self.open.get_mut(&id).expect("just created");
                let c = PvConn { failed_at: Some(at), ..PvConn::new(conn, Some(first_syn), syns, false, rtt) };
                p.push_conn(c, self.cfg.max_conns);
                p.acts = acts;
                self.finish(id);
            }
            (None, None) => {}
        }
    }
}
