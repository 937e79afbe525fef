//! Fast-path publishing: what a kernel fast path may decide without the engine
//! ([`FastpathUpdate`]), derived from the rules in force and the engine's measurements, queued
//! in the order the driver is to apply it ([`crate::Engine::poll_fastpath`]). Plain data: the
//! driver (the `rlm` crate) writes it into the kernel's maps.

use std::collections::VecDeque;
use std::net::{SocketAddr, SocketAddrV4};
use std::time::Duration;

use crate::policy::{Admission, Policy};
use crate::wire::Endpoint;

/// How a kernel fast path treats the clients' SYNs to the servers' ports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SynMode {
    /// Every SYN comes to the engine for a verdict (some rule's decision reads more than the
    /// addresses: the client's port or the pageview's elapsed time).
    QueueAll,
    /// SYNs with an [`FastpathUpdate::SynVerdict`] of the current generation are decided in the
    /// kernel (and reported with [`Engine::handle_decided`](crate::Engine::handle_decided)); the
    /// others come for a verdict.
    Verdicts,
    /// No rule acts at the SYN: every SYN passes and is reported.
    PassAll,
}

/// What a kernel fast path may decide without the engine, in the order to apply it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FastpathUpdate {
    /// The SYN mode, and the generation a verdict must carry to apply.
    Mode {
        /// How SYNs are treated from now on.
        mode: SynMode,
        /// The generation a [`FastpathUpdate::SynVerdict`] must carry to apply: it changes with
        /// the rule set, and with the class statistics the SYN rules read.
        generation: u64,
    },
    /// A LIMIT SYN bucket (a rule's, for one class): rate per second and burst, full.
    Bucket {
        /// The bucket's slot, as an [`Admission::Limit`] names it.
        slot: u32,
        /// Tokens added per second.
        rate_per_s: f64,
        /// Most tokens it holds.
        burst: u32,
    },
    /// The verdict for SYNs from `client` to `server` while `generation` is in force.
    SynVerdict {
        /// The client's address (any port).
        client: std::net::Ipv4Addr,
        /// The server's address and port.
        server: SocketAddrV4,
        /// The generation it was made under.
        generation: u64,
        /// What to do with those SYNs.
        admission: Admission,
    },
    /// Send the servers' segments through the queue (content adaptation is carried out by the
    /// rules in force), or stop.
    QueueResponses(bool),
    /// Send the clients' segments through the queue (a `REWRITE EMBEDS` is carried out), or
    /// stop.
    QueueRequests(bool),
    /// The connection's current response starts at sequence number `start` and ends before
    /// `end` (`None`: not known; the SRPT classifier ranks it by the bytes sent). Made only with
    /// SRPT on ([`Engine::enable_srpt`](crate::Engine::enable_srpt)).
    ResponseSize {
        /// The connection's client.
        client: SocketAddrV4,
        /// The connection's server.
        server: SocketAddrV4,
        /// Sequence number of the response's first byte (its status line's).
        start: u32,
        /// Sequence number of the byte after the response's end, when its head says where that is.
        end: Option<u32>,
    },
    /// The server's bytes of this connection before sequence number `until` (the end of the
    /// response under way, whose body nothing reads) need not be seen: the kernel may report
    /// its segments that lie wholly before it cut to their headers, their length on the wire
    /// (the engine counts and times their payload as absent). Made only with body cuts on
    /// ([`Engine::enable_body_cuts`](crate::Engine::enable_body_cuts)).
    BodyUnread {
        /// The connection's client.
        client: SocketAddrV4,
        /// The connection's server.
        server: SocketAddrV4,
        /// Sequence number of the byte after the response's end.
        until: u32,
    },
    /// The response whose body ends before `until` is over, and a [`FastpathUpdate::BodyUnread`]
    /// of it was taken: the kernel's range for it goes if it is still there and still ends at
    /// `until` (its segments all passed the kernel before the range was written, which would
    /// otherwise outlive them).
    BodyOver {
        /// The connection's client.
        client: SocketAddrV4,
        /// The connection's server.
        server: SocketAddrV4,
        /// Where the range ends.
        until: u32,
    },
    /// `REJECT` answered a request of this connection: the kernel sends the client's further
    /// segments of it through the queue and drops the server's, until a new SYN on its ports
    /// (or a while).
    Rejected {
        /// The connection's client.
        client: SocketAddrV4,
        /// The connection's server.
        server: SocketAddrV4,
    },
    /// The connection is gone: the kernel may forget its flow.
    FlowEnd {
        /// The connection's client.
        client: SocketAddrV4,
        /// The connection's server.
        server: SocketAddrV4,
    },
}

/// With a kernel fast path and rules in force, how often the class statistics are looked at
/// without a packet (windows slide, `FOR` tests settle), so that the fast path learns of a
/// changed generation: a deadline of [`crate::Engine::poll_timeout`].
pub const FASTPATH_REFRESH: Duration = Duration::from_millis(50);

/// The engine's side of a kernel fast path ([`crate::Engine::enable_fastpath`]).
#[derive(Debug)]
pub(super) struct Fastpath {
    updates: VecDeque<FastpathUpdate>,
    /// Bumped with every new rule set.
    epoch: u64,
    /// The SYN mode of the rule set in force (it changes only with the rule set).
    mode: SynMode,
    /// What the generation was last derived from: (epoch, policy generation).
    seen: Option<(u64, u64)>,
    generation: u64,
    buckets: ahash::AHashSet<u32>,
    /// What the last [`FastpathUpdate::QueueResponses`] said (the kernel starts with false).
    queue_responses: bool,
    /// And the last [`FastpathUpdate::QueueRequests`].
    queue_requests: bool,
    /// Publish each response's size for the SRPT classifier.
    pub(super) srpt: bool,
    /// Publish where the bodies nothing reads end ([`FastpathUpdate::BodyUnread`]).
    pub(super) cut_bodies: bool,
    /// Each connection's latest [`FastpathUpdate::BodyUnread`] until its body is over or the
    /// connection ends (bounded by the connections open).
    cuts: ahash::AHashMap<(SocketAddrV4, SocketAddrV4), Cut>,
}

/// A [`FastpathUpdate::BodyUnread`] made for a connection: where its range ends, and whether the
/// driver took it.
#[derive(Clone, Copy, Debug)]
struct Cut {
    until: u32,
    taken: bool,
}

/// What the rules in force ask of a kernel fast path.
#[derive(Clone, Copy, Debug)]
pub(super) struct FastpathNeeds {
    pub mode: SynMode,
    /// The servers' segments must come through the queue (a `REMOVE EMBEDS` is carried out).
    pub queue_responses: bool,
    /// The clients' segments must come through the queue (a `REWRITE EMBEDS`, a `REJECT` or an
    /// `ABORT IDLE` is carried out: the kernel then also hands over the segments of the
    /// connections the engine rejected or aborted).
    pub queue_requests: bool,
}

impl FastpathNeeds {
    /// What `policy` (the rules in force, if any) needs, with content adaptation carried out or
    /// not (`adapt`), and `REJECT` (`reject`).
    pub fn of(policy: Option<&Policy>, adapt: bool, reject: bool) -> FastpathNeeds {
        let mode = match policy {
            Some(p) if p.acts_at_syn() => {
                if p.syn_decided_by_address() && !p.needs_every_syn() {
                    SynMode::Verdicts
                } else {
                    SynMode::QueueAll
                }
            }
            _ => SynMode::PassAll,
        };
        let queue_responses = adapt && policy.is_some_and(Policy::removes_embeds);
        let queue_requests = (adapt && policy.is_some_and(|p| p.rewrites_embeds() && p.rewrites_with_mapping()))
            || (reject && policy.is_some_and(Policy::at_requests));
        FastpathNeeds { mode, queue_responses, queue_requests }
    }
}

impl Fastpath {
    /// A fast path starting under `needs` (the kernel starts with nothing queued).
    pub fn new(needs: FastpathNeeds) -> Fastpath {
        let updates = needs
            .queue_responses
            .then_some(FastpathUpdate::QueueResponses(true))
            .into_iter()
            .chain(needs.queue_requests.then_some(FastpathUpdate::QueueRequests(true)))
            .collect();
        Fastpath {
            updates,
            epoch: 0,
            mode: needs.mode,
            seen: None,
            generation: 0,
            buckets: ahash::AHashSet::new(),
            queue_responses: needs.queue_responses,
            queue_requests: needs.queue_requests,
            srpt: false,
            cut_bodies: false,
            cuts: ahash::AHashMap::new(),
        }
    }

    /// A new rule set is in force: a new epoch (so a new generation), its buckets unpublished,
    /// and the queues it needs.
    pub fn on_rules(&mut self, needs: FastpathNeeds) {
        self.epoch += 1;
        self.mode = needs.mode;
        self.buckets.clear();
        if self.queue_responses != needs.queue_responses {
            self.queue_responses = needs.queue_responses;
            self.updates.push_back(FastpathUpdate::QueueResponses(needs.queue_responses));
        }
        if self.queue_requests != needs.queue_requests {
            self.queue_requests = needs.queue_requests;
            self.updates.push_back(FastpathUpdate::QueueRequests(needs.queue_requests));
        }
    }

    /// The SYN mode and generation now; queue a [`FastpathUpdate::Mode`] if they changed.
    /// Called after every frame: it only compares two numbers.
    pub fn note(&mut self, policy: Option<&Policy>) {
        let policy_gen = match (policy, self.mode) {
            (Some(p), SynMode::Verdicts | SynMode::QueueAll) => p.generation(),
            _ => 0,
        };
        let now = (self.epoch, policy_gen);
        if self.seen != Some(now) {
            self.seen = Some(now);
            self.generation += 1;
            self.updates.push_back(FastpathUpdate::Mode { mode: self.mode, generation: self.generation });
        }
    }

    /// The verdict a SYN that came for one got: for the next SYNs of its client to its server,
    /// under the generation in force (its bucket first, once per rule set).
    pub fn syn_verdict(&mut self, client: std::net::Ipv4Addr, server: SocketAddrV4, admission: Admission) {
        if let Admission::Limit { slot, rate, burst, .. } = admission {
            if self.buckets.insert(slot) {
                self.updates.push_back(FastpathUpdate::Bucket { slot, rate_per_s: rate, burst });
            }
        }
        self.updates.push_back(FastpathUpdate::SynVerdict { client, server, generation: self.generation, admission });
    }

    /// A response's place in the sequence space, for the SRPT classifier.
    pub fn response_size(&mut self, client: SocketAddrV4, server: SocketAddrV4, start: u32, end: Option<u32>) {
        self.updates.push_back(FastpathUpdate::ResponseSize { client, server, start, end });
    }

    /// The server's bytes before `until` need not be seen ([`FastpathUpdate::BodyUnread`]).
    pub fn body_unread(&mut self, client: SocketAddrV4, server: SocketAddrV4, until: u32) {
        self.updates.push_back(FastpathUpdate::BodyUnread { client, server, until });
        self.cuts.insert((client, server), Cut { until, taken: false });
    }

    /// The response whose body ends before `until` is over. Its segments have all passed the
    /// kernel; a range of it written now would outlive them (the kernel drops a range when a
    /// segment reaches its end) and keep a later retransmission of the body's bytes from the
    /// engine, which then could not tell that the client got the response only with it. The
    /// engine reads its reports in batches, and a short body's segments come in one (the lab's
    /// images: ~100 ms too early an end for 3 to 7 of about 290 pageviews of a quick fidelity
    /// run, 2026-11-28). So a [`FastpathUpdate::BodyUnread`] of it still queued is withdrawn,
    /// and one taken is followed by a [`FastpathUpdate::BodyOver`].
    pub fn body_over(&mut self, client: SocketAddrV4, server: SocketAddrV4, until: u32) {
        if let std::collections::hash_map::Entry::Occupied(e) = self.cuts.entry((client, server)) {
            if e.get().until == until {
                let cut = e.remove();
                self.settle(client, server, cut);
            }
        }
    }

    /// A cut whose body is over, or whose connection ended: withdrawn if still queued, else
    /// ended in the kernel.
    fn settle(&mut self, client: SocketAddrV4, server: SocketAddrV4, cut: Cut) {
        let until = cut.until;
        if cut.taken {
            self.updates.push_back(FastpathUpdate::BodyOver { client, server, until });
        } else {
            let queued = FastpathUpdate::BodyUnread { client, server, until };
            if let Some(i) = self.updates.iter().rposition(|u| *u == queued) {
                self.updates.remove(i);
            }
        }
    }

    /// `REJECT` answered a request on the connection from `src` (its client) to `dst` (IPv4 only:
    /// the kernel queues IPv4 segments only).
    pub fn rejected(&mut self, src: SocketAddr, dst: SocketAddr) {
        if let (SocketAddr::V4(client), SocketAddr::V4(server)) = (src, dst) {
            self.updates.push_back(FastpathUpdate::Rejected { client, server });
        }
    }

    /// A connection is gone: its body cut is settled (the kernel ends a range on the server's
    /// FIN or RST only, not on the client's RST, an idle timeout or an eviction), and with SRPT
    /// on, the classifier may forget its flow (IPv4 only).
    pub fn flow_end(&mut self, client: Endpoint, server: Endpoint) {
        if let (SocketAddr::V4(client), SocketAddr::V4(server)) = (SocketAddr::from(client), SocketAddr::from(server)) {
            if let Some(cut) = self.cuts.remove(&(client, server)) {
                self.settle(client, server, cut);
            }
            if self.srpt {
                self.updates.push_back(FastpathUpdate::FlowEnd { client, server });
            }
        }
    }

    /// Connections with a body cut remembered (for bounds tests).
    pub fn cuts(&self) -> usize {
        self.cuts.len()
    }

    /// The next update, if any.
    pub fn pop(&mut self) -> Option<FastpathUpdate> {
        let u = self.updates.pop_front();
        if let Some(FastpathUpdate::BodyUnread { client, server, until }) = u {
            if let Some(c) = self.cuts.get_mut(&(client, server)).filter(|c| c.until == until) {
                c.taken = true;
            }
        }
        u
    }
}
