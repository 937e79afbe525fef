//! The SYN and SYN/ACK nodes (004 section 4): the rules decide whether a client's SYN goes on
//! (`DROP SYN`, `LIMIT SYN`), and the actions that send frames keep a SYN or SYN/ACK to send
//! it again faster than TCP's backoff (`FAST SYN`, `HALT FAST SYN`, `FAST SYN/ACK`,
//! `DELAY FIRST SYN`). The frames, budgets and link addresses are [`crate::actions`]'; this
//! module holds the node's state by connection and its timers' work.

use std::net::{IpAddr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use super::records::Writing;
use super::{DecisionRecord, DropCause, Engine, Event, Port, TimerKind, Transmit};
use crate::actions::{Budgets, InjectBudget, Kept, LinkAddrs, Release};
use crate::flow::{ConnId, ConnState};
use crate::policy::{SynDecision, SynOutcome};
use crate::time::Timestamp;
use crate::wire::{Endpoint, LinkType};
use rules::{ClassId, RuleId};

/// How often a held-back SYN without a `FAST SYN` gap is looked at again.
const HELD_SYN_RECHECK: Duration = Duration::from_millis(500);
/// The longest SYN or SYN/ACK frame kept to be sent again (a handshake's frames are under 100
/// bytes; a SYN with data, TCP Fast Open, is not kept): kept frames stay small in memory.
const MAX_KEPT_FRAME: usize = 256;
/// How soon a released SYN that found no release token tries again.
const RELEASE_RETRY: Duration = Duration::from_millis(50);

/// A frame to keep once the frame being handled is through (asked by the SYN and SYN/ACK nodes),
/// with the rules that asked, for their decision records.
#[derive(Clone, Copy, Debug)]
pub(super) enum Keep {
    /// A client's SYN: retransmit it every `gap` (`FAST SYN`), first after `delay` if it is held
    /// back (`DELAY FIRST SYN`).
    Syn { gap: Option<(Duration, RuleId)>, delay: Option<(Duration, RuleId)>, class: usize },
    /// A server's SYN/ACK: retransmit it every `gap` until the client's ACK (`FAST SYN/ACK`).
    SynAck { gap: Duration, rule: RuleId, class: usize },
}

/// What the SYN node decided about the SYN being handled.
#[derive(Debug, Default)]
pub(super) struct SynStep {
    /// Why the SYN goes no further, if it does not.
    pub drop: Option<DropCause>,
    /// Keep its frame to send it again.
    pub keep: Option<Keep>,
}

/// The SYN and SYN/ACK nodes' state.
pub(super) struct SynNode {
    /// SYNs being fast-retransmitted (or held back), by connection.
    pub fast_syns: ahash::AHashMap<ConnId, Kept>,
    /// SYN/ACKs being fast-retransmitted, by connection.
    pub fast_synacks: ahash::AHashMap<ConnId, Kept>,
    pub links: LinkAddrs,
    pub budgets: Budgets,
    pub release: Release,
    /// The rules in force send frames ([`crate::policy::Policy::injects`]), at the SYN/ACK node
    /// too.
    pub injecting: bool,
    pub injecting_synack: bool,
}

impl SynNode {
    pub fn new(budget: InjectBudget, release_per_s: f64) -> SynNode {
        SynNode {
            fast_syns: ahash::AHashMap::new(),
            fast_synacks: ahash::AHashMap::new(),
            links: LinkAddrs::default(),
            budgets: Budgets::new(budget),
            release: Release::new(release_per_s),
            injecting: false,
            injecting_synack: false,
        }
    }

    /// Stop fast-retransmitting (or holding) the SYN of `id`.
    pub fn forget_syn(&mut self, id: ConnId) {
        self.fast_syns.remove(&id);
        self.release.forget(id);
    }

    /// The connection is gone: nothing of it is sent again.
    pub fn forget(&mut self, id: ConnId) {
        self.forget_syn(id);
        self.fast_synacks.remove(&id);
    }

    /// Keep only the connections still half open (`half_open`): a compaction of the timers.
    pub fn retain(&mut self, half_open: impl Fn(&ConnId) -> bool) {
        self.fast_syns.retain(|id, _| half_open(id));
        let fast_syns = &self.fast_syns;
        self.release.retain(|id| fast_syns.contains_key(id));
        self.fast_synacks.retain(|id, _| half_open(id));
    }
}

impl Engine {
    /// The SYN node: the rules decide whether the client's SYN goes on. A dropped SYN stays in
    /// the pageview's accounting: the client will retransmit it and wait (and the pageview the
    /// connection serves counts it among its `actions`). `decided`: what a kernel fast path
    /// already decided for it.
    pub(super) fn at_syn(
        &mut self,
        now: Timestamp,
        id: ConnId,
        client: Endpoint,
        server: Endpoint,
        retransmission: bool,
        decided: Option<SynDecision>,
    ) -> SynStep {
        let mut step = SynStep::default();
        if retransmission && self.syn.fast_syns.contains_key(&id) {
            if self.client_passes_held_syn(now, id, client, server) {
                return step;
            }
            // rlm sends this SYN for the client (every GAP, or after a delay): the client's own
            // retransmission is absorbed, so that the server sees one SYN stream. It is not a
            // SYN of the class for the rules (no token, no counter).
            self.stats.fast_syns_absorbed += 1;
            self.count_conn_act(id, |a| a.syns_absorbed += 1);
            step.drop = Some(DropCause::SynAbsorbed);
            return step;
        }
        let Some(policy) = self.policy.as_mut() else { return step };
        let (c, s) = (SocketAddr::from(client), SocketAddr::from(server));
        let class = policy.classify(c, s);
        let rt = self.pageviews.elapsed_for_client(client.ip, now);
        let SynOutcome { decision, admission, fast_syn, delay_first, .. } = policy.at_syn_decided(now, c, s, class, Some(rt), decided);
        // DELAY FIRST SYN: a SYN that opens a pageview (its client has none open) is held back
        // and sent after the delay (004 Figure 17).
        let delay =
            delay_first.filter(|(d, _)| !retransmission && rt.is_zero() && decision == SynDecision::Pass && *d < self.cfg.pageview.connect_timeout);
        if !retransmission && (fast_syn.is_some() || delay.is_some()) {
            // Keep this SYN's frame (once its handling is over) and send it after GAP (or the
            // delay) unless the server answers first.
            step.keep = Some(Keep::Syn { gap: fast_syn, delay, class: class.index() });
        }
        if delay.is_some() {
            step.drop = Some(DropCause::SynDelayed);
            self.stats.syns_delayed += 1;
        }
        if let SynDecision::Drop { rule, limited } = decision {
            step.drop = Some(DropCause::SynDropped);
            self.stats.syns_dropped += 1;
            let action = if limited { "LIMIT SYN" } else { "DROP SYN" };
            let mut record = DecisionRecord { retransmission, ..DecisionRecord::of(policy, now, rule, action, class, client, server) };
            // A first SYN from a client with no handshake seen lately: anyone's to spoof.
            let unproven = !retransmission && !self.pageviews.client_known(client.ip, now);
            record.unwritten = self.unproven.writing(now, unproven, &mut self.stats.records_unproven_skipped) == Writing::Skip;
            self.events.push_back(Event::Decision(record));
            self.pageviews.on_conn_act(id, |a| if limited { a.syns_limited += 1 } else { a.syns_dropped += 1 });
        }
        // A SYN that came for a verdict: tell the kernel what to do with the next ones, under the
        // generation in force after this SYN's look at the class statistics.
        if let (Some(admission), None, IpAddr::V4(cip), IpAddr::V4(sip), Some(fp)) =
            (admission, decided, client.ip, server.ip, self.fastpath.as_mut())
        {
            fp.note(self.policy.as_ref());
            fp.syn_verdict(cip, SocketAddrV4::new(sip, server.port), admission);
        }
        step
    }

    /// The SYN node again for a SYN rlm holds or resends
    /// ([`crate::policy::Policy::at_syn_again`]): the client's class and the decision. `None`
    /// without rules.
    fn syn_again(&mut self, now: Timestamp, client: Endpoint, server: Endpoint) -> Option<(ClassId, SynOutcome)> {
        let policy = self.policy.as_mut()?;
        let (c, s) = (SocketAddr::from(client), SocketAddr::from(server));
        let class = policy.classify(c, s);
        let rt = self.pageviews.elapsed_for_client(client.ip, now);
        Some((class, policy.at_syn_again(now, c, s, class, Some(rt))))
    }

    /// A client's own retransmission of a SYN that rlm holds (`HALT FAST SYN`), arriving when
    /// the rule has let go but the paced release has not reached it yet: it goes on to the
    /// server, as it would without rlm's retransmissions, so that the paced release never makes
    /// a SYN wait longer than the client's own backoff. rlm's retransmissions go on a gap after
    /// it. True if it was let through.
    fn client_passes_held_syn(&mut self, now: Timestamp, id: ConnId, client: Endpoint, server: Endpoint) -> bool {
        if !self.syn.fast_syns.get(&id).is_some_and(|k| k.held) {
            return false;
        }
        let Some((_, out)) = self.syn_again(now, client, server) else { return false };
        if out.halt_fast_syn || out.decision != SynDecision::Pass {
            return false;
        }
        if let Some(k) = self.syn.fast_syns.get_mut(&id) {
            k.held = false;
            k.client_sent = Some(now);
        }
        self.syn.release.forget(id);
        self.stats.fast_syns_client_passed += 1;
        true
    }

    /// The SYN/ACK node: with `FAST SYN/ACK` in force for the connection, keep the SYN/ACK to
    /// send it again every gap until the client's ACK comes.
    pub(super) fn at_synack(&mut self, now: Timestamp, id: ConnId) -> Option<Keep> {
        let (Some(policy), Some(c)) = (self.policy.as_mut(), self.flows.get(id)) else { return None };
        let (cl, sv) = (SocketAddr::from(c.client), SocketAddr::from(c.server));
        let class = policy.classify(cl, sv);
        policy.at_synack(now, cl, sv, class).map(|(gap, rule)| Keep::SynAck { gap, rule, class: class.index() })
    }

    /// Keep the frame just handled, as the SYN or SYN/ACK node asked, and arm its timer. False
    /// if it could not be kept (too many pending, or too long).
    pub(super) fn keep_frame(&mut self, now: Timestamp, id: ConnId, keep: Keep, link: LinkType, frame: &[u8]) -> bool {
        let (map, gap, delayed, class, kind) = match keep {
            Keep::Syn { gap, delay, class } => (&mut self.syn.fast_syns, gap.map(|(g, _)| g), delay.is_some(), class, TimerKind::FastSyn),
            Keep::SynAck { gap, class, .. } => (&mut self.syn.fast_synacks, Some(gap), false, class, TimerKind::FastSynAck),
        };
        if (map.len() >= self.syn.budgets.config().max_pending && !map.contains_key(&id)) || frame.len() > MAX_KEPT_FRAME {
            self.stats.inject_denied += 1;
            if delayed {
                // Held back but not kept: it goes on now rather than be lost.
                self.stats.syns_delayed -= 1;
            }
            return false;
        }
        let fresh = map.insert(id, Kept { gap, link, frame: frame.into(), sent: 0, delayed, held: false, client_sent: None, class }).is_none();
        let first = match keep {
            Keep::Syn { delay: Some((d, _)), .. } => d,
            _ => gap.unwrap_or(Duration::ZERO),
        };
        self.push_timer(now + first, id, kind);
        if fresh {
            self.on_kept(now, id, keep);
        }
        true
    }

    /// A frame kept for the first time on connection `id`: the decision of each rule that asked
    /// for it (once per connection, not at each copy sent), and a held-back first SYN counted for
    /// the pageview the connection serves.
    fn on_kept(&mut self, now: Timestamp, id: ConnId, keep: Keep) {
        match keep {
            Keep::Syn { gap, delay, .. } => {
                if let Some((_, rule)) = delay {
                    self.count_conn_act(id, |a| a.syns_delayed += 1);
                    self.record_decision(now, id, rule, "DELAY FIRST SYN", None);
                }
                if let Some((_, rule)) = gap {
                    self.record_decision(now, id, rule, "FAST SYN", None);
                }
            }
            Keep::SynAck { rule, .. } => self.record_decision(now, id, rule, "FAST SYN/ACK", None),
        }
    }

    /// Send a kept frame toward the server or the client if the budget allows; false if it did
    /// not (the retransmissions then stop).
    fn send_kept(&mut self, now: Timestamp, id: ConnId, to_server: bool) -> bool {
        let Some(c) = self.flows.get(id) else { return false };
        let (client, server) = (c.client.ip, c.server.ip);
        let node = &mut self.syn;
        let map = if to_server { &mut node.fast_syns } else { &mut node.fast_synacks };
        let Some(kept) = map.get_mut(&id) else { return false };
        if !node.budgets.take(now, kept.class) {
            self.stats.inject_denied += 1;
            return false;
        }
        let Some(frame) = node.links.frame(kept, client, server, to_server) else {
            self.stats.inject_no_mac += 1;
            return false;
        };
        kept.sent += 1;
        kept.delayed = false;
        self.transmits.push_back(Transmit { port: if to_server { Port::Server } else { Port::Client }, frame });
        self.count_conn_act(id, |a| if to_server { a.syns_resent += 1 } else { a.synacks_resent += 1 });
        true
    }

    /// A SYN's timer: send it (again) to the server (through the SYN node's rules once more:
    /// `HALT FAST SYN` or a `DROP SYN` holding for this client hold it back) unless the server
    /// answered, the client has given up (its connect timeout) or the limit is reached.
    pub(super) fn fast_syn_due(&mut self, now: Timestamp, id: ConnId) {
        let Some(c) = self.flows.get(id).filter(|c| c.state == ConnState::SynSent) else {
            self.syn.forget_syn(id);
            return;
        };
        let (client, server, first) = (c.client, c.server, c.hs.syn.first.unwrap_or(now));
        let Some(fs) = self.syn.fast_syns.get(&id) else { return };
        let delayed = fs.delayed;
        if now.saturating_since(first) >= self.cfg.pageview.connect_timeout || fs.sent >= self.cfg.fast_limit {
            self.syn.forget_syn(id);
            return;
        }
        let Some((class, out)) = self.syn_again(now, client, server) else {
            self.syn.forget_syn(id);
            return;
        };
        let gap = out.fast_syn.map(|(g, _)| g);
        if gap.is_none() && !delayed {
            // The rule no longer applies (a new rule file): the client's own TCP takes over.
            self.syn.forget_syn(id);
            return;
        }
        let held = self.syn.fast_syns.get(&id).is_some_and(|k| k.held);
        if let Some(at) = self.syn.fast_syns.get(&id).and_then(|k| k.client_sent) {
            // The client's own copy went a moment ago: rlm's next goes a gap after it.
            let next = at + gap.unwrap_or(HELD_SYN_RECHECK);
            if !held && now < next {
                self.push_timer(next, id, TimerKind::FastSyn);
                return;
            }
        }
        if !out.halt_fast_syn && out.decision == SynDecision::Pass {
            if held && !self.syn.release.try_release(now, class.index(), first, id, self.cfg.pageview.connect_timeout) {
                // Released, but paced (oldest first): look again shortly.
                self.push_timer(now + RELEASE_RETRY, id, TimerKind::FastSyn);
                return;
            }
            if let Some(k) = self.syn.fast_syns.get_mut(&id) {
                k.held = false;
            }
            if !self.send_kept(now, id, true) {
                self.syn.forget_syn(id);
                return;
            }
            self.stats.fast_syns_sent += 1;
            if gap.is_none() {
                // A held-back first SYN without FAST SYN: sent once; the client's TCP goes on.
                self.syn.forget_syn(id);
                return;
            }
        } else if let Some(k) = self.syn.fast_syns.get_mut(&id) {
            k.held = true;
            self.syn.release.forget(id);
        }
        self.push_timer(now + gap.unwrap_or(HELD_SYN_RECHECK), id, TimerKind::FastSyn);
    }

    /// A SYN/ACK's timer: send it again to the client unless its ACK came, it has given up or
    /// the limit is reached.
    pub(super) fn fast_synack_due(&mut self, now: Timestamp, id: ConnId) {
        let Some(c) = self.flows.get(id).filter(|c| c.state == ConnState::SynReceived) else {
            self.syn.fast_synacks.remove(&id);
            return;
        };
        let first = c.hs.syn.first.unwrap_or(now);
        let Some(k) = self.syn.fast_synacks.get(&id) else { return };
        let gap = k.gap.unwrap_or(HELD_SYN_RECHECK);
        if now.saturating_since(first) >= self.cfg.pageview.connect_timeout || k.sent >= self.cfg.fast_limit || !self.send_kept(now, id, false) {
            self.syn.fast_synacks.remove(&id);
            return;
        }
        self.stats.fast_synacks_sent += 1;
        self.push_timer(now + gap, id, TimerKind::FastSynAck);
    }
}
