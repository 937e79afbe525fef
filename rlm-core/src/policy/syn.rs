//! The SYN node (a client's SYN: `DROP SYN`, `LIMIT SYN` and its token buckets, what a kernel
//! fast path may do with the next SYNs, and the actions that send frames: `FAST SYN`, `HALT FAST
//! SYN`, `DELAY FIRST SYN`) and the SYN/ACK node (`FAST SYN/ACK`).

use std::net::SocketAddr;
use std::time::Duration;

use rules::{ClassId, Effect, Facts, Firing, RuleId};

use super::token_bucket::TokenBucket;
use super::{Controller, Policy};
use crate::time::Timestamp;

/// What the SYN node decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SynDecision {
    /// The SYN goes on.
    Pass,
    /// Dropped by this rule's `DROP SYN` or by its `LIMIT SYN` bucket being empty.
    Drop {
        /// The rule that dropped it.
        rule: RuleId,
        /// Dropped by `LIMIT SYN` for want of a token, not by `DROP SYN`.
        limited: bool,
    },
}

/// What a kernel fast path may do with the later SYNs of the same client and server while the
/// rule set and the policy's [`Policy::generation`] stay the same (see [`rules::RuleSet::syn_decided_by_addresses`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Admission {
    /// Let them through.
    Pass,
    /// Drop them.
    Drop {
        /// The `DROP SYN` rule.
        rule: RuleId,
    },
    /// Pass while the bucket in `slot` has a token (`rate` per second, `burst`), else drop.
    Limit {
        /// The `LIMIT SYN` rule.
        rule: RuleId,
        /// The bucket's slot in the fast path's table (one per `LIMIT SYN` bucket and class).
        slot: u32,
        /// Tokens added per second.
        rate: f64,
        /// Most tokens the bucket holds.
        burst: u32,
    },
}

/// Everything the SYN node decided ([`Policy::at_syn_decided`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SynOutcome {
    /// Whether the SYN goes on (the kernel fast path's decision, when it had made one).
    pub decision: SynDecision,
    /// What a kernel fast path may do with the next SYNs of this client and server.
    pub admission: Option<Admission>,
    /// `FAST SYN GAP g` holds: retransmit this SYN to the server every `g` until it answers;
    /// with the rule, for its decision record.
    pub fast_syn: Option<(Duration, RuleId)>,
    /// `HALT FAST SYN` holds: no fast retransmission for this client now.
    pub halt_fast_syn: bool,
    /// `DELAY FIRST SYN d` holds: if this SYN opens a pageview, hold it back `d`; with the rule.
    pub delay_first: Option<(Duration, RuleId)>,
}

impl Policy {
    /// Whether any rule acts at the SYN.
    pub fn acts_at_syn(&self) -> bool {
        self.rules.rules_at(rules::Node::Syn).next().is_some() || self.controller.as_ref().is_some_and(Controller::sheds_syns)
    }

    /// Whether the engine must see every client SYN: a `FAST SYN` rule (to absorb the clients'
    /// retransmissions) or a `DELAY FIRST SYN` rule (whether a SYN opens a pageview is known only
    /// to the engine) is carried out.
    pub fn needs_every_syn(&self) -> bool {
        self.inject_carried_out
            && self.rules.any_effect_at(rules::Node::Syn, |e| matches!(e, rules::Effect::FastSyn { .. } | rules::Effect::DelayFirstSyn { .. }))
    }

    /// Whether some rule sends frames (carried out): `FAST SYN`, `DELAY FIRST SYN` or `FAST
    /// SYN/ACK`.
    pub fn injects(&self) -> bool {
        self.needs_every_syn() || self.injects_at_synack()
    }

    /// Whether a `FAST SYN/ACK` rule is carried out (the SYN/ACK node is worth evaluating).
    pub fn injects_at_synack(&self) -> bool {
        self.inject_carried_out && self.rules.any_effect_at(rules::Node::SynAck, |e| matches!(e, rules::Effect::FastSynAck { .. }))
    }

    /// The SYN/ACK node (transitions 2 and 8 of 004 Figure 3): the gap of the `FAST SYN/ACK` in
    /// force for this connection, if any, with its rule.
    pub fn at_synack(&mut self, now: Timestamp, client: SocketAddr, server: SocketAddr, class: ClassId) -> Option<(Duration, RuleId)> {
        self.refresh(now);
        let mut facts = Facts::new(client, server, class, &self.windows);
        facts.holds = Some(&self.holds);
        let mut firings = std::mem::take(&mut self.firings);
        firings.clear();
        self.rules.eval_synack(&facts, &mut firings);
        let mut gap = None;
        for f in &firings {
            if let Some(rc) = self.rule_counters.get_mut(f.rule.0 as usize) {
                rc.fired += 1;
                rc.last_fired = Some(now);
                if let rules::Effect::FastSynAck { gap: g } = f.effect {
                    if self.inject_carried_out {
                        gap.get_or_insert((g, f.rule));
                    } else {
                        rc.deferred += 1;
                    }
                }
            }
        }
        self.firings = firings;
        gap
    }

    /// Whether the SYN decision depends only on the client's and server's addresses and the
    /// class statistics, so that [`Admission`]s can be made.
    pub fn syn_decided_by_address(&self) -> bool {
        self.syn_by_address
    }

    /// A client's SYN (first or retransmitted). `pageview_rt`: the elapsed time of the pageview
    /// it belongs to (zero for a new one).
    pub fn at_syn(&mut self, now: Timestamp, client: SocketAddr, server: SocketAddr, class: ClassId, pageview_rt: Option<Duration>) -> SynDecision {
        self.at_syn_decided(now, client, server, class, pageview_rt, None).decision
    }

    /// [`Policy::at_syn`], where `decided` is the decision a kernel fast path already carried out
    /// (the rules are evaluated for their counters, the buckets left alone), and with what the
    /// fast path may do with the next SYNs of this client and server: `None` when it cannot say
    /// (the decision reads more than addresses, or takes more than one bucket).
    pub fn at_syn_decided(
        &mut self,
        now: Timestamp,
        client: SocketAddr,
        server: SocketAddr,
        class: ClassId,
        pageview_rt: Option<Duration>,
        decided: Option<SynDecision>,
    ) -> SynOutcome {
        self.syn_node(now, client, server, class, pageview_rt, decided, true)
    }

    /// The SYN node again for a SYN rlm holds or resends (`FAST SYN`, `DELAY FIRST SYN`): the
    /// same decision, but not counted again (no class SYN, rule firing or drop) and no `LIMIT
    /// SYN` token taken: the SYN was counted, and policed, when it came.
    pub fn at_syn_again(
        &mut self,
        now: Timestamp,
        client: SocketAddr,
        server: SocketAddr,
        class: ClassId,
        pageview_rt: Option<Duration>,
    ) -> SynOutcome {
        self.syn_node(now, client, server, class, pageview_rt, None, false)
    }

    /// The SYN node: the rules at the SYN evaluated and what their firings decide. `decided`: the
    /// decision a kernel fast path already carried out (no token taken); `count`: the SYN and the
    /// rules' firings are counted (not for a SYN rlm holds or resends).
    #[allow(clippy::too_many_arguments)]
    fn syn_node(
        &mut self,
        now: Timestamp,
        client: SocketAddr,
        server: SocketAddr,
        class: ClassId,
        pageview_rt: Option<Duration>,
        decided: Option<SynDecision>,
        count: bool,
    ) -> SynOutcome {
        self.refresh(now);
        if let (true, Some(c)) = (count, self.class_counters.get_mut(class.index())) {
            c.syns += 1;
        }
        let mut facts = Facts::new(client, server, class, &self.windows);
        facts.rt = pageview_rt;
        facts.holds = Some(&self.holds);
        let mut firings = std::mem::take(&mut self.firings);
        firings.clear();
        self.rules.eval_syn(&facts, &mut firings);
        let mut outcome = SynOutcome {
            decision: SynDecision::Pass,
            admission: self.syn_by_address.then_some(Admission::Pass),
            fast_syn: None,
            halt_fast_syn: false,
            delay_first: None,
        };
        let mut last_rule: Option<RuleId> = None;
        for f in &firings {
            if count && last_rule != Some(f.rule) {
                last_rule = Some(f.rule);
                if let Some(rc) = self.rule_counters.get_mut(f.rule.0 as usize) {
                    rc.fired += 1;
                    rc.last_fired = Some(now);
                }
            }
            if self.syn_injection(f, &mut outcome) {
                continue;
            }
            if outcome.decision != SynDecision::Pass {
                continue;
            }
            outcome.admission = self.syn_admission(outcome.admission, f, class);
            if let Some(decision) = self.syn_firing_decision(now, f, class, decided, count) {
                outcome.decision = decision;
            }
        }
        self.firings = firings;
        // The SLA controller's limit on a shed class, for a SYN the rules let pass. Where REJECT
        // is carried out it admits pageviews: a SYN that opens one takes a token, or passes and
        // its connection's first request is answered 503 (a dropped SYN comes back 3 s later, a
        // page that can no longer meet any target and costs the farm as much); the other SYNs
        // of an admitted page pass. Elsewhere, and to HTTPS's ports (whose requests are
        // encrypted), the SYN over the rate is dropped.
        if let (true, None, Some(ctl)) = (count, decided, self.controller.as_mut()) {
            let pass = outcome.decision == SynDecision::Pass;
            if self.reject_carried_out && !rules::TLS_PORTS.contains(&server.port()) {
                let opens = pageview_rt.is_some_and(|rt| rt.is_zero());
                if opens && !ctl.admit_syn(now, class, pass) {
                    ctl.turn_away((client, server));
                }
            } else if !ctl.admit_syn(now, class, pass) {
                outcome.decision = SynDecision::Drop { rule: self.controller_rule(), limited: true };
            }
        }
        outcome.decision = decided.unwrap_or(outcome.decision);
        if let (SynDecision::Drop { limited, .. }, true, Some(c)) = (outcome.decision, count, self.class_counters.get_mut(class.index())) {
            if limited {
                c.syns_limited += 1;
            } else {
                c.syns_dropped += 1;
            }
        }
        outcome
    }

    /// A firing of an action at the SYN that sends frames (`FAST SYN`, `HALT FAST SYN`, `DELAY
    /// FIRST SYN`) while the engine carries them out: noted in `outcome` (the first rule's). Whether
    /// it was one.
    fn syn_injection(&self, f: &Firing, outcome: &mut SynOutcome) -> bool {
        match f.effect {
            Effect::FastSyn { gap } if self.inject_carried_out => {
                outcome.fast_syn.get_or_insert((gap, f.rule));
                true
            }
            Effect::HaltFastSyn if self.inject_carried_out => {
                outcome.halt_fast_syn = true;
                true
            }
            Effect::DelayFirstSyn { delay } if self.inject_carried_out => {
                outcome.delay_first.get_or_insert((delay, f.rule));
                true
            }
            _ => false,
        }
    }

    /// What a kernel fast path may do with the next SYNs, from `admission` as it stood, after a
    /// firing: the first `DROP SYN` or `LIMIT SYN` firing makes it that rule's; a second one, or a
    /// bucket slot that does not fit a `u32`, leaves none. Other firings leave it as it was.
    fn syn_admission(&self, admission: Option<Admission>, f: &Firing, class: ClassId) -> Option<Admission> {
        match f.effect {
            Effect::DropSyn | Effect::LimitSyn { .. } => match (admission, f.effect) {
                (Some(Admission::Pass), Effect::DropSyn) => Some(Admission::Drop { rule: f.rule }),
                (Some(Admission::Pass), Effect::LimitSyn { bucket, rate, burst }) => {
                    let slot = bucket.0 as usize * self.rules.class_count() + class.index();
                    u32::try_from(slot).ok().map(|slot| Admission::Limit { rule: f.rule, slot, rate: rate.per_second(), burst })
                }
                _ => None,
            },
            _ => admission,
        }
    }

    /// What a firing decides for the SYN, if anything: `DROP SYN` drops it, `LIMIT SYN` takes a
    /// token from its bucket or drops it for want of one. The firing of an action not carried
    /// out here is counted as deferred (when `count`).
    fn syn_firing_decision(&mut self, now: Timestamp, f: &Firing, class: ClassId, decided: Option<SynDecision>, count: bool) -> Option<SynDecision> {
        match f.effect {
            Effect::DropSyn => Some(SynDecision::Drop { rule: f.rule, limited: false }),
            // A SYN already decided in the kernel, or looked at again while rlm holds or
            // resends it (it took its token when it came): no token.
            Effect::LimitSyn { .. } if decided.is_some() || !count => None,
            Effect::LimitSyn { bucket, rate, burst } => {
                let b = self.buckets.entry((bucket, class)).or_insert(TokenBucket::full(f64::from(burst), now));
                if b.admit(now, rate.per_second(), f64::from(burst.max(1))) {
                    None
                } else {
                    Some(SynDecision::Drop { rule: f.rule, limited: true })
                }
            }
            _ => {
                if let (true, Some(rc)) = (count, self.rule_counters.get_mut(f.rule.0 as usize)) {
                    rc.deferred += 1;
                }
                None
            }
        }
    }
}
