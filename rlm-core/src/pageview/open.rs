//! The state of an open pageview: its connections, its transactions and the objects its
//! container (and its stylesheets and frames) listed.

use std::net::IpAddr;
use std::time::Duration;

use ahash::AHashMap;

use super::record::Acts;
use crate::flow::ConnId;
use crate::http::EmbedKind;
use crate::time::Timestamp;

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
}

/// A transaction of an open pageview.
#[derive(Clone, Debug)]
pub(super) struct PvTxn {
    pub(super) conn: u16,
    pub(super) depth: u32,
    pub(super) uri: String,
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
    pub(super) conns: Vec<PvConn>,
    pub(super) txns: Vec<PvTxn>,
    pub(super) expected: Vec<Expected>,
    /// Resolved URL key → index in `expected`.
    pub(super) index: AHashMap<String, usize>,
    /// URL keys of the container and of objects that may refer to further objects (CSS, frames).
    pub(super) referrers: Vec<String>,
    /// The container's embed list is complete and trustworthy (scanned, not encoded).
    pub(super) list_reliable: bool,
    pub(super) in_flight: u32,
    pub(super) last_activity: Timestamp,
    /// Generation of the finalisation check, to drop stale deadlines.
    pub(super) check_gen: u32,
    /// What rlm did to it so far.
    pub(super) acts: Acts,
}

impl OpenPv {
    /// The index of a connection among the pageview's.
    pub(super) fn conn_index(&self, conn: ConnId) -> Option<usize> {
        self.conns.iter().position(|c| c.conn == conn)
    }
    /// Whether a handshake of its connections is under way.
    pub(super) fn pending_handshakes(&self) -> bool {
        self.conns.iter().any(|c| c.pending)
    }
    /// Whether every listed object a browser always fetches was fetched.
    pub(super) fn all_required_fetched(&self) -> bool {
        self.expected.iter().all(|e| !e.required || e.fetched)
    }
    /// Whether the container's response has begun.
    pub(super) fn has_container_response(&self) -> bool {
        self.txns.iter().any(|t| t.container && t.response_first.is_some())
    }
}
