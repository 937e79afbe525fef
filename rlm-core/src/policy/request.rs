//! The request node's admission (003, issue 26): `REJECT` at each HTTP request head, with the
//! request's method, headers and cookies for `METHOD`, `HEADER.<name>` and `COOKIE.<name>`.
//! Each firing is counted in its rule's `fired`; carried out (the engine answers for the server,
//! [`Policy::reject_carried_out`]) or counted `deferred`.

use std::net::SocketAddr;
use std::time::Duration;

use rules::{ClassId, Effect, Facts, Node};

use super::Policy;
use crate::http::RequestHead;
use crate::time::Timestamp;

impl Policy {
    /// Whether some rule has `REJECT` (every request head is worth evaluating).
    pub fn rejects(&self) -> bool {
        self.rules.any_effect_at(Node::Request, |e| matches!(e, Effect::Reject { .. }))
    }

    /// The request node at a request head of `client` to `server` (its class `class`, its
    /// pageview `pageview_rt` old): the `REJECT`s that fire, each counted in its rule's `fired`.
    /// Returns how many fired, and the first one's status and Retry-After when rejects are
    /// carried out (else each is counted `deferred`).
    pub fn at_request_head(
        &mut self,
        now: Timestamp,
        (client, server, class): (SocketAddr, SocketAddr, ClassId),
        head: &RequestHead,
        pageview_rt: Duration,
    ) -> (u32, Option<(u16, Option<Duration>)>) {
        self.refresh(now);
        let mut facts = Facts::new(client, server, class, &self.windows);
        facts.holds = Some(&self.holds);
        facts.rt = Some(pageview_rt);
        (facts.url, facts.host, facts.site) = (Some(head.uri.as_str()), head.host.as_deref(), head.host.as_deref());
        facts.request = Some(head);
        let mut firings = std::mem::take(&mut self.firings);
        firings.clear();
        self.rules.eval(Node::Request, &facts, &mut firings);
        let (mut n, mut answer) = (0, None);
        for f in &firings {
            let Effect::Reject { status, retry_after } = f.effect else { continue };
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
        (n, answer)
    }
}
