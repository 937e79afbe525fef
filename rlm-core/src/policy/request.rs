//! The request node's admission (003, issue 26): `REJECT` at each HTTP request head, with the
//! request's method, headers and cookies for `METHOD`, `HEADER.<name>` and `COOKIE.<name>`.
//! Each firing is counted in its rule's `fired`; carried out (the engine answers for the server,
//! [`Policy::reject_carried_out`]) or counted `deferred`.

use std::net::SocketAddr;
use std::time::Duration;

use rules::{ClassId, Effect, Facts, Node, RuleId};

use super::token_bucket::TokenBucket;
use super::{Controller, Policy};
use crate::http::RequestHead;
use crate::time::Timestamp;

/// What a request `LIMIT REQUESTS` turns away is answered with, as `REJECT 503 RETRY-AFTER 1s`
/// would: its bucket has a token again within a second at any rate of 1/s or more.
pub const LIMIT_STATUS: u16 = 503;
/// The Retry-After of that answer.
pub const LIMIT_RETRY_AFTER: Duration = Duration::from_secs(1);

/// What the request node decided at a request head.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RequestVerdict {
    /// `REJECT`s and `LIMIT REQUESTS` that fired, and the controller's sheds.
    pub fired: u32,
    /// The answer in the server's stead (status, Retry-After), when rejects are carried out.
    pub answer: Option<(u16, Option<Duration>)>,
    /// An `ABORT IDLE` fired: how long the connection may be idle after this request's response,
    /// and the rule.
    pub abort_idle: Option<(Duration, RuleId)>,
}

impl Policy {
    /// Whether some rule has `REJECT` or `LIMIT REQUESTS`, or an SLA controller may shed requests
    /// or admits a group's (every request head is worth evaluating, and may be answered in the
    /// server's stead).
    pub fn rejects(&self) -> bool {
        self.rules.any_effect_at(Node::Request, |e| matches!(e, Effect::Reject { .. } | Effect::LimitRequests { .. })) || self.controller.is_some()
    }

    /// Whether some rule has `ABORT IDLE`.
    pub fn aborts_idle(&self) -> bool {
        self.rules.any_effect_at(Node::Request, |e| matches!(e, Effect::AbortIdle { .. }))
    }

    /// Whether request heads are evaluated: something may reject them or abort their connections.
    pub fn at_requests(&self) -> bool {
        self.rejects() || self.aborts_idle()
    }

    /// An `ABORT IDLE` of `rule` is due on an idle connection: counted in its rule's `fired`.
    /// Whether it is carried out (else counted `deferred`).
    pub fn abort_due(&mut self, now: Timestamp, rule: RuleId) -> bool {
        if let Some(rc) = self.rule_counters.get_mut(rule.0 as usize) {
            rc.fired += 1;
            rc.last_fired = Some(now);
            rc.deferred += u64::from(!self.reject_carried_out);
        }
        self.reject_carried_out
    }

    /// The request node at a request head of `client` to `server` (its class `class`, its
    /// pageview `pageview_rt` old, `depth` its place on the connection): the `REJECT`s that
    /// fire, each counted in its rule's `fired`. A `LIMIT REQUESTS` fires when its bucket (per
    /// rule, class and the request's URL group) has no token; the SLA controller sheds a shed
    /// class's requests while a class target is missed, and holds a group with a target to its
    /// admitted rate. Returns how many fired, and the first one's status and Retry-After when
    /// rejects are carried out (else each is counted `deferred`); and the first `ABORT IDLE`
    /// that fired (counted when the abort is due, [`Policy::abort_due`]).
    pub fn at_request_head(
        &mut self,
        now: Timestamp,
        (client, server, class): (SocketAddr, SocketAddr, ClassId),
        (head, depth): (&RequestHead, u32),
        pageview_rt: Duration,
    ) -> RequestVerdict {
        self.refresh(now);
        let mut facts = Facts::new(client, server, class, &self.windows);
        facts.holds = Some(&self.holds);
        facts.rt = Some(pageview_rt);
        (facts.url, facts.host, facts.site) = (Some(head.uri.as_str()), head.host.as_deref(), head.host.as_deref());
        facts.request = Some(head);
        facts.group = self.rules.group_of(&facts);
        let group = facts.group;
        let mut firings = std::mem::take(&mut self.firings);
        firings.clear();
        self.rules.eval(Node::Request, &facts, &mut firings);
        let (mut n, mut answer, mut abort_idle) = (0, None, None);
        for f in &firings {
            let (status, retry_after) = match f.effect {
                Effect::AbortIdle { after } => {
                    abort_idle = abort_idle.or(Some((after, f.rule)));
                    continue;
                }
                Effect::Reject { status, retry_after } => (status, retry_after),
                Effect::LimitRequests { bucket, rate, burst } => {
                    // One bucket per (rule's bucket, class, group), full when first used.
                    let cap = f64::from(burst);
                    let b = self.request_buckets.entry((bucket, class, group)).or_insert_with(|| TokenBucket::full(cap, now));
                    if b.admit(now, rate.per_second(), cap) {
                        continue;
                    }
                    (LIMIT_STATUS, Some(LIMIT_RETRY_AFTER))
                }
                _ => continue,
            };
            let Some(rc) = self.rule_counters.get_mut(f.rule.0 as usize) else { continue };
            rc.fired += 1;
            rc.last_fired = Some(now);
            n += 1;
            if !self.reject_carried_out {
                rc.deferred += 1;
            } else if answer.is_none() {
                answer = Some((status, retry_after));
            }
        }
        self.firings = firings;
        // The SLA controller: a shed class's requests while a target is missed, a group's beyond
        // its admitted rate; what goes on to the server is timed for its group's target.
        if let Some(ctl) = self.controller.as_mut() {
            let turned_away = ctl.take_turned_away((client, server));
            if answer.is_none() && (turned_away || ctl.shed_request(class) || !ctl.admit_request(now, class, group)) {
                n += 1;
                if self.reject_carried_out {
                    answer = Some((LIMIT_STATUS, Some(LIMIT_RETRY_AFTER)));
                }
            }
            if answer.is_none() {
                ctl.request_sent(now, (client, server), depth, group);
            }
        }
        RequestVerdict { fired: n, answer, abort_idle }
    }

    /// Whether the engine is to tell [`Policy::response_head`]: the SLA controller times a
    /// group's requests.
    pub fn times_requests(&self) -> bool {
        self.controller.as_ref().is_some_and(Controller::has_groups)
    }

    /// The response to the request at `depth` on the connection of `client` and `server` began
    /// at `first_byte`.
    pub fn response_head(&mut self, first_byte: Timestamp, conn: (SocketAddr, SocketAddr), depth: u32) {
        if let Some(ctl) = self.controller.as_mut() {
            ctl.response_head(first_byte, conn, depth);
        }
    }

    /// The connection of `client` and `server` closed.
    pub fn conn_closed(&mut self, conn: (SocketAddr, SocketAddr)) {
        if let Some(ctl) = self.controller.as_mut() {
            ctl.conn_closed(conn);
        }
    }
}
