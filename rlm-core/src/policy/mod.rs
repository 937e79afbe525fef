//! rules → actions: a checked rule set applied at the engine's nodes, with the per-class
//! response-time statistics its conditions read and the token buckets of `LIMIT SYN`.
//!
//! Classes: a pageview belongs to the class of its client (the first `CLASS` whose condition
//! holds for its first connection). Each class, and all pageviews together (`RT.ALL`), keep the
//! response times of the pageviews that finished within the last `window` (sliding): the mean
//! is kept as a running sum, percentiles are computed from a sorted copy made only when a rule
//! reads one after the window changed. A rule with `FOR d` sees its test change only after the
//! raw comparison has held its new value for `d` (hysteresis, `rules::RuleSet::update_holds`).
//!
//! Actions carried out here: `DROP SYN`, `LIMIT SYN` (a token bucket per rule and class, as in
//! Voigt's TCP SYN policing). The others are decided here and carried out by the engine: fast
//! retransmission and the delayed first SYN by the SYN and SYN/ACK nodes (`engine/syn.rs`, with
//! the frames of `actions.rs`), embed removal and rewrite by content adaptation
//! (`engine/adaptation.rs`). Under a driver that cannot carry one out (no injection, no
//! rewritten frames) it is counted as `deferred` when its rule fires.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use ahash::AHashMap;
use rules::{Aggregates, BucketId, ClassId, Effect, EmbedSelect, Facts, Firing, Holds, Mapping, RuleId, RuleSet, Scope, Stat};
use serde::Serialize;

use crate::time::Timestamp;

/// Response times of the pageviews that finished within a sliding window.
#[derive(Debug, Default)]
struct Window {
    samples: VecDeque<(Timestamp, f64)>,
    sum: f64,
    sorted: RefCell<Option<Vec<f64>>>,
}

impl Window {
    fn push(&mut self, at: Timestamp, rt: f64) {
        self.samples.push_back((at, rt));
        self.sum += rt;
        self.sorted.replace(None);
    }

    fn expire(&mut self, now: Timestamp, window: Duration) {
        let mut changed = false;
        while self.samples.front().is_some_and(|(t, _)| now.saturating_since(*t) > window) {
            let (_, rt) = self.samples.pop_front().expect("front checked");
            self.sum -= rt;
            changed = true;
        }
        if changed {
            self.sorted.replace(None);
            if self.samples.is_empty() {
                self.sum = 0.0;
            }
        }
    }

    fn mean(&self) -> Option<f64> {
        (!self.samples.is_empty()).then(|| (self.sum / self.samples.len() as f64).max(0.0))
    }

    /// Nearest-rank percentile.
    fn percentile(&self, p: u8) -> Option<f64> {
        if self.samples.is_empty() {
            return None;
        }
        let mut cache = self.sorted.borrow_mut();
        let v = cache.get_or_insert_with(|| {
            let mut v: Vec<f64> = self.samples.iter().map(|(_, r)| *r).collect();
            v.sort_by(f64::total_cmp);
            v
        });
        let rank = ((f64::from(p) / 100.0) * v.len() as f64).ceil() as usize;
        Some(v[rank.clamp(1, v.len()) - 1])
    }

    fn stat(&self, stat: Stat) -> Option<f64> {
        match stat {
            Stat::Mean => self.mean(),
            Stat::Percentile(p) => self.percentile(p),
        }
    }
}

/// Per-class windows; index = class id, the last one all pageviews.
struct ClassWindows(Vec<Window>);

impl Aggregates for ClassWindows {
    fn rt(&self, scope: Scope, stat: Stat) -> Option<Duration> {
        let w = match scope {
            Scope::All => self.0.last()?,
            Scope::Class(c) => self.0.get(c.index())?,
        };
        w.stat(stat).map(|s| Duration::from_secs_f64(s.clamp(0.0, 1e9)))
    }
}

/// A token bucket: refilled at a rate up to a cap, one token for each thing let through
/// (`LIMIT SYN`, and the injection budgets and paced release of [`crate::actions`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct TokenBucket {
    tokens: f64,
    last: Timestamp,
}

impl TokenBucket {
    pub(crate) fn full(cap: f64, now: Timestamp) -> TokenBucket {
        TokenBucket { tokens: cap, last: now }
    }

    /// Add what `rate` per second brought since the last look, up to `cap`.
    pub(crate) fn refill(&mut self, now: Timestamp, rate: f64, cap: f64) {
        self.tokens = (self.tokens + now.saturating_since(self.last).as_secs_f64() * rate).min(cap);
        self.last = now.max(self.last);
    }

    /// Add `n` tokens, up to `cap`.
    pub(crate) fn add(&mut self, n: f64, cap: f64) {
        self.tokens = (self.tokens + n).min(cap);
    }

    /// Tokens held (whole and part).
    pub(crate) fn tokens(&self) -> f64 {
        self.tokens
    }

    pub(crate) fn has_token(&self) -> bool {
        self.tokens >= 1.0
    }

    /// Take a token if there is one.
    pub(crate) fn take(&mut self) -> bool {
        let ok = self.has_token();
        if ok {
            self.tokens -= 1.0;
        }
        ok
    }
}

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
    /// `FAST SYN GAP g` holds: retransmit this SYN to the server every `g` until it answers.
    pub fast_syn: Option<Duration>,
    /// `HALT FAST SYN` holds: no fast retransmission for this client now.
    pub halt_fast_syn: bool,
    /// `DELAY FIRST SYN d` holds: if this SYN opens a pageview, hold it back `d`.
    pub delay_first: Option<Duration>,
}

/// Counters of one class.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ClassCounters {
    /// SYNs of the class the SYN node evaluated (not rlm's own resends, nor the client
    /// retransmissions they absorb).
    pub syns: u64,
    /// Of them, dropped by `DROP SYN`.
    pub syns_dropped: u64,
    /// Of them, dropped by `LIMIT SYN` for want of a token.
    pub syns_limited: u64,
    /// Pageviews of the class that finished.
    pub pageviews: u64,
}

/// Counters of one rule.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RuleCounters {
    /// Times its condition held at a node where it has an action.
    pub fired: u64,
    /// Firings of actions the driver cannot carry out (no injection, no rewritten frames):
    /// decided, counted, not done.
    pub deferred: u64,
    /// When it last fired (for status; not serialised).
    #[serde(skip)]
    pub last_fired: Option<Timestamp>,
}

/// `FILE:LINE:COL` of a rule, for logs and records.
pub fn rule_label(rules: &RuleSet, rule: RuleId) -> String {
    match rules.rule_position(rule) {
        Some((l, c)) => format!("{}:{l}:{c}", rules.file_name()),
        None => format!("{}:rule {}", rules.file_name(), rule.0),
    }
}

/// A rule's text in canonical form, on one line.
pub fn rule_text(rules: &RuleSet, rule: RuleId) -> String {
    rules.rule(rule).map(|r| r.to_string().replace("\n  ", " ")).unwrap_or_default()
}

/// What the content-adaptation nodes know of the transaction, for the rules' facts.
struct AdaptFacts<'a> {
    url: Option<&'a str>,
    host: Option<&'a str>,
    content_type: Option<&'a str>,
    rt: Option<Duration>,
}

/// The rule set in force and its state.
pub struct Policy {
    rules: RuleSet,
    /// Each rule's `FILE:LINE:COL`, for the decision records of every dropped SYN.
    labels: Vec<String>,
    window: Duration,
    windows: ClassWindows,
    holds: Holds,
    buckets: AHashMap<(BucketId, ClassId), TokenBucket>,
    firings: Vec<Firing>,
    /// The SYN node's view of the class statistics ([`rules::RuleSet::syn_aggregate_signature`])
    /// and a number that changes with it.
    signature: u64,
    generation: u64,
    syn_by_address: bool,
    /// Counters per class, by class index.
    pub class_counters: Vec<ClassCounters>,
    /// Counters per rule, by rule index.
    pub rule_counters: Vec<RuleCounters>,
    /// The engine carries out the actions that send frames (`FAST SYN`, `FAST SYN/ACK`, `DELAY
    /// FIRST SYN`, `HALT FAST SYN`): they are not counted as deferred.
    pub inject_carried_out: bool,
    /// The engine carries out `REMOVE EMBEDS` (its driver forwards rewritten frames): not
    /// counted as deferred.
    pub adapt_carried_out: bool,
}

fn since_epoch(t: Timestamp) -> Duration {
    Duration::from_nanos(t.as_nanos())
}

impl Policy {
    /// The policy of `rules`, its class statistics kept over a sliding `window` (empty to start).
    pub fn new(rules: RuleSet, window: Duration) -> Policy {
        let n = rules.class_count();
        let holds = rules.new_holds();
        let windows = ClassWindows((0..=n).map(|_| Window::default()).collect());
        let signature = rules.syn_aggregate_signature(&windows, Some(&holds));
        Policy {
            holds,
            windows,
            buckets: AHashMap::new(),
            firings: Vec::new(),
            signature,
            generation: 1,
            syn_by_address: rules.syn_decided_by_addresses(),
            inject_carried_out: false,
            adapt_carried_out: false,
            class_counters: vec![ClassCounters::default(); n],
            rule_counters: vec![RuleCounters::default(); rules.rule_count()],
            labels: (0..rules.rule_count()).map(|i| rule_label(&rules, RuleId(i as u32))).collect(),
            rules,
            window,
        }
    }

    /// The rule set in force.
    pub fn rules(&self) -> &RuleSet {
        &self.rules
    }

    /// Put a new rule set in force (SIGHUP). Class statistics and counters carry over to the
    /// classes of the same name; buckets and `FOR` states start afresh.
    pub fn replace_rules(&mut self, rules: RuleSet) {
        let mut old = Policy::new(rules, self.window);
        std::mem::swap(self, &mut old);
        self.inject_carried_out = old.inject_carried_out;
        self.adapt_carried_out = old.adapt_carried_out;
        let (old_rules, mut old_windows, old_counters) = (old.rules, old.windows, old.class_counters);
        for i in 0..old_rules.class_count() {
            let name = old_rules.class_name(ClassId(i as u16));
            if let Some(new) = self.rules.class_id(name) {
                self.windows.0[new.index()] = std::mem::take(&mut old_windows.0[i]);
                self.class_counters[new.index()] = old_counters[i].clone();
            }
        }
        if let (Some(all), Some(last)) = (old_windows.0.pop(), self.windows.0.last_mut()) {
            *last = all;
        }
        self.signature = self.rules.syn_aggregate_signature(&self.windows, Some(&self.holds));
    }

    /// The class of a connection from `client` to `server`.
    pub fn classify(&self, client: SocketAddr, server: SocketAddr) -> ClassId {
        self.rules.classify(client, server)
    }

    /// A class's name, as the rules give it.
    pub fn class_name(&self, c: ClassId) -> &str {
        self.rules.class_name(c)
    }

    /// A pageview of a client finished at `now` with this response time.
    pub fn on_pageview(&mut self, now: Timestamp, class: ClassId, rt_s: f64) {
        if let Some(w) = self.windows.0.get_mut(class.index()) {
            w.push(now, rt_s);
        }
        if let Some(all) = self.windows.0.last_mut() {
            all.push(now, rt_s);
        }
        if let Some(c) = self.class_counters.get_mut(class.index()) {
            c.pageviews += 1;
        }
        self.refresh(now);
    }

    /// Expire old samples and advance the `FOR` tests.
    pub fn refresh(&mut self, now: Timestamp) {
        for w in &mut self.windows.0 {
            w.expire(now, self.window);
        }
        self.rules.update_holds(&mut self.holds, since_epoch(now), &self.windows);
        let sig = self.rules.syn_aggregate_signature(&self.windows, Some(&self.holds));
        if sig != self.signature {
            self.signature = sig;
            self.generation += 1;
        }
    }

    /// Changes whenever a class statistic test read at the SYN changes value: within one rule
    /// set, an [`Admission`] holds only for the generation it was made in (the engine numbers
    /// rule sets itself). Never 0.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether any rule acts at the SYN.
    pub fn acts_at_syn(&self) -> bool {
        self.rules.rules_at(rules::Node::Syn).next().is_some()
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
    /// force for this connection, if any.
    pub fn at_synack(&mut self, now: Timestamp, client: SocketAddr, server: SocketAddr, class: ClassId) -> Option<Duration> {
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
                        gap.get_or_insert(g);
                    } else {
                        rc.deferred += 1;
                    }
                }
            }
        }
        self.firings = firings;
        gap
    }

    /// Whether some rule has `REMOVE EMBEDS` (container responses are worth evaluating: for
    /// the removal, or for the counters when it is not carried out).
    pub fn removes_embeds(&self) -> bool {
        self.rules.any_effect_at(rules::Node::Response, |e| matches!(e, rules::Effect::RemoveEmbeds(_)))
    }

    /// The response node (transition 3 to 4 of 004 Figure 3), at a container page's head: the
    /// first `REMOVE EMBEDS` in force for it, with its rule. `url`, `host` and `content_type`
    /// are the transaction's; `pageview_rt` the elapsed time of the client's pageview.
    #[allow(clippy::too_many_arguments)]
    pub fn at_response(
        &mut self,
        now: Timestamp,
        client: SocketAddr,
        server: SocketAddr,
        class: ClassId,
        url: Option<&str>,
        host: Option<&str>,
        content_type: Option<&str>,
        pageview_rt: Option<Duration>,
    ) -> Option<(RuleId, EmbedSelect)> {
        let facts = AdaptFacts { url, host, content_type, rt: pageview_rt };
        self.embeds_at(rules::Node::Response, now, (client, server, class), facts, |rules, effect| match effect {
            Effect::RemoveEmbeds(id) => Some(Some(rules.embeds(id).select.clone())),
            _ => None,
        })
    }

    /// The rules at a content-adaptation node (`node`: request or response), every firing
    /// counted: the first action that `take` can carry out, with its rule; one it cannot (`take`
    /// gives `Some(None)`), or any while adaptation is not carried out, counts as deferred.
    /// `take` gives `None` for the effects of other actions.
    fn embeds_at<T>(
        &mut self,
        node: rules::Node,
        now: Timestamp,
        (client, server, class): (SocketAddr, SocketAddr, ClassId),
        a: AdaptFacts<'_>,
        take: impl Fn(&RuleSet, Effect) -> Option<Option<T>>,
    ) -> Option<(RuleId, T)> {
        self.refresh(now);
        let mut facts = Facts::new(client, server, class, &self.windows);
        facts.holds = Some(&self.holds);
        (facts.url, facts.host, facts.content_type, facts.rt) = (a.url, a.host, a.content_type, a.rt);
        let mut firings = std::mem::take(&mut self.firings);
        firings.clear();
        self.rules.eval(node, &facts, &mut firings);
        let mut found = None;
        for f in &firings {
            let Some(rc) = self.rule_counters.get_mut(f.rule.0 as usize) else { continue };
            rc.fired += 1;
            rc.last_fired = Some(now);
            match take(&self.rules, f.effect) {
                None => {}
                Some(Some(t)) if self.adapt_carried_out => {
                    if found.is_none() {
                        found = Some((f.rule, t));
                    }
                }
                Some(_) => rc.deferred += 1,
            }
        }
        self.firings = firings;
        found
    }

    /// Whether some rule has `REWRITE EMBEDS` (embedded objects' requests are worth evaluating:
    /// for the rewrite, or for the counters when it is not carried out).
    pub fn rewrites_embeds(&self) -> bool {
        self.rules.any_effect_at(rules::Node::Request, |e| matches!(e, Effect::RewriteEmbeds(_)))
    }

    /// Whether some `REMOVE EMBEDS` or `REWRITE EMBEDS` selects by `IF PREDICTED`: object sizes
    /// and transfer times are worth learning.
    pub fn predicts(&self) -> bool {
        let rules = &self.rules;
        [rules::Node::Request, rules::Node::Response].into_iter().any(|n| {
            rules.any_effect_at(n, |e| match e {
                Effect::RewriteEmbeds(id) | Effect::RemoveEmbeds(id) => matches!(rules.embeds(*id).select, EmbedSelect::Predicted { .. }),
                _ => false,
            })
        })
    }

    /// Whether some rule has `REWRITE EMBEDS` with its mapping read: requests must come through
    /// the queue to be rewritten.
    pub fn rewrites_with_mapping(&self) -> bool {
        let rules = &self.rules;
        rules.any_effect_at(rules::Node::Request, |e| matches!(e, Effect::RewriteEmbeds(id) if rules.embeds(*id).map.is_some()))
    }

    /// The request node (transitions 5 and 7 of 004 Figure 3), at an embedded object's request
    /// head: the first `REWRITE EMBEDS` in force for it whose mapping was read, with its rule.
    /// `url` is the request's target, `pageview_rt` the elapsed time of its pageview. A
    /// rewrite with no mapping read (no `USING`, or rules compiled without reading files) is
    /// counted as deferred.
    pub fn at_request(
        &mut self,
        now: Timestamp,
        client: SocketAddr,
        server: SocketAddr,
        class: ClassId,
        url: &str,
        host: Option<&str>,
        pageview_rt: Duration,
    ) -> Option<(RuleId, EmbedSelect, Arc<Mapping>)> {
        let facts = AdaptFacts { url: Some(url), host, content_type: None, rt: Some(pageview_rt) };
        let found = self.embeds_at(rules::Node::Request, now, (client, server, class), facts, |rules, effect| match effect {
            Effect::RewriteEmbeds(id) => {
                let e = rules.embeds(id);
                Some(e.map.as_ref().map(|map| (e.select.clone(), map.clone())))
            }
            _ => None,
        });
        found.map(|(rule, (select, map))| (rule, select, map))
    }

    /// Whether the SYN decision depends only on the client's and server's addresses and the
    /// class statistics, so that [`Admission`]s can be made.
    pub fn syn_decided_by_address(&self) -> bool {
        self.syn_by_address
    }

    /// The statistic of a class now (for status and metrics).
    pub fn class_rt(&self, class: ClassId, stat: Stat) -> Option<f64> {
        self.windows.0.get(class.index()).and_then(|w| w.stat(stat))
    }

    /// Pageviews in a class's window (as of the last refresh), for status.
    pub fn class_samples(&self, class: ClassId) -> usize {
        self.windows.0.get(class.index()).map_or(0, |w| w.samples.len())
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
            if self.syn_injection(f.effect, &mut outcome) {
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
    /// FIRST SYN`) while the engine carries them out: noted in `outcome`. Whether it was one.
    fn syn_injection(&self, effect: Effect, outcome: &mut SynOutcome) -> bool {
        match effect {
            Effect::FastSyn { gap } if self.inject_carried_out => {
                outcome.fast_syn.get_or_insert(gap);
                true
            }
            Effect::HaltFastSyn if self.inject_carried_out => {
                outcome.halt_fast_syn = true;
                true
            }
            Effect::DelayFirstSyn { delay } if self.inject_carried_out => {
                outcome.delay_first.get_or_insert(delay);
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
                b.refill(now, rate.per_second(), f64::from(burst.max(1)));
                if b.take() {
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

    /// `FILE:LINE:COL` of a rule, for logs and records (made once per rule set).
    pub fn rule_label(&self, rule: RuleId) -> &str {
        self.labels.get(rule.0 as usize).map_or("", String::as_str)
    }

    /// A rule's text in canonical form, on one line.
    pub fn rule_text(&self, rule: RuleId) -> String {
        rule_text(&self.rules, rule)
    }

    /// Whether a rule fired within the last `recent` (for status: "firing").
    pub fn rule_firing(&self, rule: usize, now: Timestamp, recent: Duration) -> bool {
        self.rule_counters.get(rule).and_then(|r| r.last_fired).is_some_and(|t| now.saturating_since(t) <= recent)
    }

    /// A client's class, looked up from text addresses (for records).
    pub fn classify_ip(&self, client: IpAddr, server: SocketAddr) -> ClassId {
        self.rules.classify(SocketAddr::new(client, 0), server)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(ms: u64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    fn policy(text: &str) -> Policy {
        Policy::new(rules::compile("test.rlm", text).unwrap_or_else(|d| panic!("{d}")), Duration::from_secs(10))
    }

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn drop_syn_follows_the_class_mean_over_the_window() {
        let mut p =
            policy("CLASS HIGH IF IP.SRC == 10.4.*.*\nCLASS LOW IF IP.SRC != 10.4.*.*\nIF IP.SRC != 10.4.*.* AND RT.HIGH > 3.0s THEN DROP SYN\n");
        let (high, low) = (p.rules().class_id("HIGH").unwrap(), p.rules().class_id("LOW").unwrap());
        let srv = sa("10.9.0.1:80");
        assert_eq!(p.classify(sa("10.4.0.1:1000"), srv), high);
        assert_eq!(p.classify(sa("10.5.0.1:1000"), srv), low);
        // No HIGH pageview yet: RT.HIGH is unknown, the rule does not fire.
        assert_eq!(p.at_syn(ts(0), sa("10.5.0.1:1000"), srv, low, Some(Duration::ZERO)), SynDecision::Pass);
        p.on_pageview(ts(1_000), high, 5.0);
        p.on_pageview(ts(2_000), high, 2.0);
        assert!(matches!(p.at_syn(ts(2_500), sa("10.5.0.1:1001"), srv, low, None), SynDecision::Drop { limited: false, .. }));
        // HIGH's own SYNs pass.
        assert_eq!(p.at_syn(ts(2_500), sa("10.4.0.1:1001"), srv, high, None), SynDecision::Pass);
        // The 5 s sample leaves the 10 s window: mean 2 s, LOW passes again.
        assert_eq!(p.at_syn(ts(11_500), sa("10.5.0.1:1002"), srv, low, None), SynDecision::Pass);
        assert_eq!(p.class_counters[low.index()].syns_dropped, 1);
        assert_eq!(p.rule_counters[0].fired, 1);
    }

    #[test]
    fn limit_syn_is_a_token_bucket_per_class() {
        let mut p = policy("CLASS LOW IF IP.SRC == 10.5.*.*\nIF CLASS == LOW THEN LIMIT SYN 10/s BURST 2\n");
        let low = p.rules().class_id("LOW").unwrap();
        let srv = sa("10.9.0.1:80");
        let mut passed = 0;
        // 100 SYNs a second for 5 s: 2 from the burst, then 10 a second.
        for i in 0..500u64 {
            if p.at_syn(ts(i * 10), sa("10.5.0.1:2000"), srv, low, None) == SynDecision::Pass {
                passed += 1;
            }
        }
        assert!((50..=53).contains(&passed), "{passed}");
        assert_eq!(p.class_counters[low.index()].syns_limited, 500 - passed);
    }

    #[test]
    fn percentiles_and_hysteresis() {
        let mut p = policy("CLASS HIGH IF IP.SRC == 10.4.*.*\nIF RT.HIGH.P95 > 4s FOR 2s THEN DROP SYN\n");
        let high = p.rules().class_id("HIGH").unwrap();
        let srv = sa("10.9.0.1:80");
        for i in 0..19 {
            p.on_pageview(ts(100 + i), high, 1.0);
        }
        p.on_pageview(ts(200), high, 9.0);
        assert_eq!(p.class_rt(high, Stat::Percentile(95)), Some(1.0));
        p.on_pageview(ts(300), high, 9.0);
        assert_eq!(p.class_rt(high, Stat::Percentile(95)), Some(9.0));
        // The raw comparison holds from 0.3 s; the rule sees it only 2 s later.
        assert_eq!(p.at_syn(ts(1_000), sa("10.4.0.1:3000"), srv, high, None), SynDecision::Pass);
        assert!(matches!(p.at_syn(ts(2_400), sa("10.4.0.1:3001"), srv, high, None), SynDecision::Drop { .. }));
    }

    #[test]
    fn reload_keeps_class_statistics_by_name() {
        let mut p = policy("CLASS HIGH IF IP.SRC == 10.4.*.*\nIF RT.HIGH > 3s THEN DROP SYN\n");
        let high = p.rules().class_id("HIGH").unwrap();
        p.on_pageview(ts(100), high, 5.0);
        p.replace_rules(rules::compile("new.rlm", "CLASS LOW IF IP.SRC == 10.5.*.*\nCLASS HIGH IF IP.SRC == 10.4.*.*\n").unwrap());
        let high2 = p.rules().class_id("HIGH").unwrap();
        assert_ne!(high, high2);
        assert_eq!(p.class_rt(high2, Stat::Mean), Some(5.0));
        assert_eq!(p.class_counters[high2.index()].pageviews, 1);
    }
}
