//! rules → actions: a checked rule set applied at the engine's nodes, with the per-class
//! response-time statistics its conditions read and the token buckets of `LIMIT SYN`.
//!
//! Classes: a pageview belongs to the class of its client (the first `CLASS` whose condition
//! holds for its first connection). Each class, and all pageviews together (`RT.ALL`), keep the
//! response times of the pageviews that finished within the last `window` (sliding): the mean
//! is kept as a running sum, and each percentile read (by a rule, or status) is kept from its
//! first read on, updated with each pageview and expiry in O(log n), not sorted at each read. A
//! rule with `FOR d` sees its test change only after the raw comparison has held its new value
//! for `d` (hysteresis, `rules::RuleSet::update_holds`).
//!
//! Actions carried out here: `DROP SYN`, `LIMIT SYN` (a token bucket per rule and class, as in
//! Voigt's TCP SYN policing). The others are decided here and carried out by the engine: fast
//! retransmission and the delayed first SYN by the SYN and SYN/ACK nodes (`engine/syn.rs`, with
//! the frames of `actions.rs`), embed removal and rewrite by content adaptation
//! (`engine/adaptation.rs`). Under a driver that cannot carry one out (no injection, no
//! rewritten frames) it is counted as `deferred` when its rule fires.
//!
//! [`Policy`] is here: the rule set in force and its reload, the classes, the refresh of the class
//! statistics and the counters. Its nodes are evaluated in `syn` (the SYN and SYN/ACK nodes) and
//! `adaptation` (the response and request nodes: content adaptation), `request` (the request
//! node's `REJECT`); `class_windows` keeps the per-class
//! response-time windows, `token_bucket` the buckets of `LIMIT SYN`.

mod adaptation;
mod class_windows;
pub mod controller;
pub use controller::{Controller, ControllerState, GroupState};
mod request;
pub use request::RequestVerdict;
mod syn;
mod token_bucket;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use ahash::AHashMap;
use rules::{BucketId, ClassId, Firing, Holds, RuleId, RuleSet, Stat};
use serde::Serialize;

use crate::bounded::GenMap;
use crate::time::Timestamp;
use class_windows::{ClassWindows, Window};

pub use syn::{Admission, SynDecision, SynOutcome};
pub(crate) use token_bucket::TokenBucket;

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
    /// QUIC flows of the class's clients (seen, not managed: [`crate::quic`]).
    pub quic_flows: u64,
    /// Their UDP payload bytes, both ways.
    pub quic_bytes: u64,
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

/// A class-aggregate test of the rule that made a decision, read at the decision: a decision
/// record's `aggregates` ([`Policy::readings`]).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AggregateReading {
    /// `RT.` and the class as declared (`RT.HIGH`, as the pageview records' `class` names it), or
    /// `RT.ALL`.
    pub name: String,
    /// The statistic as the rule language writes it: `MEAN`, `P95`.
    pub stat: String,
    /// The statistic over the window at the decision, in seconds; `None` when the window holds
    /// no pageview (the test is unknown).
    pub value_s: Option<f64>,
    /// The comparison: `>`, `>=`, `<`, `<=`, `==`, `!=`.
    pub cmp: &'static str,
    /// The limit it is compared with, in seconds.
    pub limit_s: f64,
    /// Pageviews in the window at the decision: the class's (every class's for `RT.ALL`) whose
    /// `window_ts` lies in `[ts - window_s, ts]`.
    pub pageviews: u64,
    /// The window's length, in seconds.
    pub window_s: f64,
    /// For a `FOR` test, how long its comparison had held (0 when it did not hold); `None`
    /// without `FOR`.
    pub held_s: Option<f64>,
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

/// What the class statistics made of a pageview ([`Policy::on_pageview`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PageviewTaken {
    /// Its class's window took it.
    pub counted: bool,
    /// Its source held its share of its class's window already.
    pub over_share: bool,
    /// Samples that left full windows before their time to make room.
    pub evicted: u64,
}

/// A client's source for the windows' shares: its IPv4 address, or its IPv6 /64 (one host
/// commonly has a whole /64).
pub fn source_of(ip: std::net::IpAddr) -> u64 {
    match ip {
        std::net::IpAddr::V4(a) => (1 << 32) | u64::from(u32::from(a)),
        std::net::IpAddr::V6(a) => (u128::from(a) >> 64) as u64,
    }
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
    /// `LIMIT REQUESTS`' buckets, per (rule's bucket, class, URL group).
    request_buckets: AHashMap<(BucketId, ClassId, Option<rules::GroupId>), TokenBucket>,
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
    /// The engine carries out `REJECT` (its driver holds the clients' requests for a verdict and
    /// sends the engine's frames): not counted as deferred.
    pub reject_carried_out: bool,
    /// Each client's latest site (its request's Host, its connection's SNI), lower case, when
    /// a class is declared by SITE: a SYN's class is decided by it.
    sites: GenMap<IpAddr, Box<str>, CLIENT_SITES>,
    /// The SLA controller, when the rules have class targets and `SHED`, or group targets.
    controller: Option<Controller>,
}

/// Clients whose latest site is remembered (the newest half of them at least).
pub const CLIENT_SITES: usize = 65_536;

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
        let controller = Controller::of(&rules);
        Policy {
            holds,
            windows,
            buckets: AHashMap::new(),
            request_buckets: AHashMap::new(),
            firings: Vec::new(),
            signature,
            generation: 1,
            inject_carried_out: false,
            adapt_carried_out: false,
            reject_carried_out: false,
            class_counters: vec![ClassCounters::default(); n],
            rule_counters: vec![RuleCounters::default(); rules.rule_count()],
            labels: (0..rules.rule_count())
                .map(|i| rule_label(&rules, RuleId(i as u32)))
                .chain(std::iter::once(format!("{}:SLA", rules.file_name())))
                .collect(),
            syn_by_address: rules.syn_decided_by_addresses() && !controller.as_ref().is_some_and(Controller::sheds_syns),
            controller,
            rules,
            window,
            sites: GenMap::default(),
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
        self.sites = std::mem::take(&mut old.sites);
        self.adapt_carried_out = old.adapt_carried_out;
        self.reject_carried_out = old.reject_carried_out;
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
        // The percentiles the old rules read need not be kept; the new ones are made at their
        // first read.
        for w in &mut self.windows.0 {
            w.forget_percentiles();
        }
        self.signature = self.rules.syn_aggregate_signature(&self.windows, Some(&self.holds));
    }

    /// The class of a connection from `client` to `server` (by its client's latest site too,
    /// when a class is declared by SITE).
    pub fn classify(&self, client: SocketAddr, server: SocketAddr) -> ClassId {
        let site = self.sites.get(&client.ip()).map(|s| &**s);
        self.rules.classify_site(client, server, site)
    }

    /// The class of a pageview of `client` on `server` for `site` (its own, when known; else its
    /// client's latest).
    pub fn classify_pageview(&self, client: IpAddr, server: SocketAddr, site: Option<&str>) -> ClassId {
        let client = SocketAddr::new(client, 0);
        match site.filter(|_| self.rules.classes_by_site()) {
            Some(site) => self.rules.classify_site(client, server, Some(site)),
            None => self.classify(client, server),
        }
    }

    /// A request of `client` named `site` (a Host header, an SNI): remembered as its latest,
    /// when a class is declared by SITE.
    pub fn learn_site(&mut self, client: IpAddr, site: &str) {
        if !self.rules.classes_by_site() {
            return;
        }
        let name = rules::host_name(site);
        if self.sites.get(&client).is_some_and(|s| s.eq_ignore_ascii_case(name)) {
            return;
        }
        self.sites.insert(client, name.to_ascii_lowercase().into_boxed_str());
    }

    /// A class's name, as the rules give it.
    pub fn class_name(&self, c: ClassId) -> &str {
        self.rules.class_name(c)
    }

    /// A pageview of a client (`source`: [`source_of`] its address) finished at `now` with this
    /// response time. Returns whether its class's window took it (not if the source holds its
    /// share of it already, see `class_windows`), and the samples that left full windows (its
    /// class's, all pageviews') before their time to make room (`MAX_WINDOW_SAMPLES`): 0, 1 or 2.
    pub fn on_pageview(&mut self, now: Timestamp, class: ClassId, rt_s: f64, source: u64) -> PageviewTaken {
        if let Some(c) = self.class_counters.get_mut(class.index()) {
            c.pageviews += 1;
        }
        self.take_sample(now, class, rt_s, source)
    }

    /// A pageview an engine side by side with this one measured (its `on_pageview` took it), so
    /// that the class windows and the SLA controller of each engine see every pageview: as
    /// [`Policy::on_pageview`], but not counted among this policy's class counters (each
    /// engine counts its own).
    /// `at`: when the other engine took it; `now`: this engine's time, at or after it.
    pub fn on_shared_pageview(&mut self, now: Timestamp, at: Timestamp, class: ClassId, rt_s: f64, source: u64) -> PageviewTaken {
        self.take_sample_at(now, at, class, rt_s, source)
    }

    fn take_sample(&mut self, now: Timestamp, class: ClassId, rt_s: f64, source: u64) -> PageviewTaken {
        self.take_sample_at(now, now, class, rt_s, source)
    }

    /// A sample taken at `at` into the windows and the controller, the statistics then looked
    /// at again at `now`.
    fn take_sample_at(&mut self, now: Timestamp, at: Timestamp, class: ClassId, rt_s: f64, source: u64) -> PageviewTaken {
        let mut taken = PageviewTaken::default();
        if let Some(w) = self.windows.0.get_mut(class.index()) {
            match w.push_from(at, rt_s, source) {
                Some(evicted) => {
                    taken.counted = true;
                    taken.evicted += u64::from(evicted);
                }
                None => taken.over_share = true,
            }
        }
        if let Some(all) = self.windows.0.last_mut() {
            taken.evicted += u64::from(all.push_from(at, rt_s, source).unwrap_or(false));
        }
        if let Some(ctl) = self.controller.as_mut() {
            ctl.on_pageview(at, class, rt_s);
        }
        self.refresh(now);
        taken
    }

    /// The SLA controller, if the rules have one.
    pub fn controller(&self) -> Option<&Controller> {
        self.controller.as_ref()
    }

    /// Step the SLA controller ([`Controller::step`]); `open_ages(class)`: the ages of the
    /// class's pageviews in flight. A limit set or lifted is a new generation.
    pub fn control(&mut self, now: Timestamp, open_ages: impl Fn(ClassId) -> Vec<f64>) {
        let Some(ctl) = self.controller.as_mut() else { return };
        let before = ctl.generation;
        ctl.step(now, open_ages);
        if ctl.generation != before {
            self.generation += 1;
        }
    }

    /// The rule id the controller's drops carry (one past the file's rules: no rule's).
    pub fn controller_rule(&self) -> RuleId {
        RuleId(self.rules.rule_count() as u32)
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

    /// The statistic of a class now (for status and metrics).
    pub fn class_rt(&self, class: ClassId, stat: Stat) -> Option<f64> {
        self.windows.0.get(class.index()).and_then(|w| w.stat(stat))
    }

    /// Pageviews in a class's window (as of the last refresh), for status.
    pub fn class_samples(&self, class: ClassId) -> usize {
        self.windows.0.get(class.index()).map_or(0, Window::len)
    }

    /// The class-aggregate tests of `rule`, in file order, read with the windows and `FOR` states
    /// as of the last refresh (the SYN node refreshes at `now` before it decides): what made the
    /// rule fire, for its decision record. Empty for a rule that names no aggregate.
    pub fn readings(&self, now: Timestamp, rule: RuleId) -> Vec<AggregateReading> {
        self.rules
            .aggregate_tests(rule)
            .into_iter()
            .map(|t| {
                let w = self.windows.get(t.scope);
                AggregateReading {
                    stat: t.stat.to_string(),
                    value_s: w.and_then(|w| w.stat(t.stat)),
                    cmp: t.cmp.as_str(),
                    limit_s: t.limit.as_secs_f64(),
                    pageviews: w.map_or(0, |w| w.len() as u64),
                    window_s: self.window.as_secs_f64(),
                    held_s: t.held.map(|i| self.holds.held_for(i, since_epoch(now)).map_or(0.0, |d| d.as_secs_f64())),
                    name: t.name,
                }
            })
            .collect()
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
        self.classify(SocketAddr::new(client, 0), server)
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
        let empty = p.readings(ts(0), RuleId(0));
        assert_eq!((empty.len(), empty[0].value_s, empty[0].pageviews), (1, None, 0));
        p.on_pageview(ts(1_000), high, 5.0, 0);
        p.on_pageview(ts(2_000), high, 2.0, 0);
        assert!(matches!(p.at_syn(ts(2_500), sa("10.5.0.1:1001"), srv, low, None), SynDecision::Drop { limited: false, .. }));
        // What made it fire: the mean of the two HIGH pageviews in the window.
        let mean = AggregateReading {
            name: "RT.HIGH".to_string(),
            stat: "MEAN".to_string(),
            value_s: Some(3.5),
            cmp: ">",
            limit_s: 3.0,
            pageviews: 2,
            window_s: 10.0,
            held_s: None,
        };
        assert_eq!(p.readings(ts(2_500), RuleId(0)), [mean]);
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
        assert!(p.readings(ts(5_000), RuleId(0)).is_empty(), "the rule names no class aggregate");
    }

    #[test]
    fn percentiles_and_hysteresis() {
        let mut p = policy("CLASS HIGH IF IP.SRC == 10.4.*.*\nIF RT.HIGH.P95 > 4s FOR 2s THEN DROP SYN\n");
        let high = p.rules().class_id("HIGH").unwrap();
        let srv = sa("10.9.0.1:80");
        for i in 0..19 {
            p.on_pageview(ts(100 + i), high, 1.0, 0);
        }
        p.on_pageview(ts(200), high, 9.0, 0);
        assert_eq!(p.class_rt(high, Stat::Percentile(95)), Some(1.0));
        p.on_pageview(ts(300), high, 9.0, 0);
        assert_eq!(p.class_rt(high, Stat::Percentile(95)), Some(9.0));
        // The raw comparison holds from 0.3 s; the rule sees it only 2 s later.
        assert_eq!(p.at_syn(ts(1_000), sa("10.4.0.1:3000"), srv, high, None), SynDecision::Pass);
        assert!(matches!(p.at_syn(ts(2_400), sa("10.4.0.1:3001"), srv, high, None), SynDecision::Drop { .. }));
        // Its decision says how long the comparison had held: since 0.3 s.
        let r = p.readings(ts(2_400), RuleId(0));
        assert_eq!((r.len(), r[0].name.as_str(), r[0].stat.as_str(), r[0].value_s, r[0].pageviews), (1, "RT.HIGH", "P95", Some(9.0), 21));
        assert!(r[0].held_s.is_some_and(|h| (h - 2.1).abs() < 1e-9), "{r:?}");
    }

    #[test]
    fn a_full_window_drops_its_oldest_and_says_so() {
        let mut p = policy("CLASS HIGH IF IP.SRC == 10.4.*.*\nIF RT.HIGH.P95 > 4s THEN DROP SYN\n");
        let high = p.rules().class_id("HIGH").unwrap();
        let n = class_windows::MAX_WINDOW_SAMPLES;
        let evicted: u64 = (0..n).map(|i| p.on_pageview(ts(1_000), high, if i == 0 { 9.0 } else { 1.0 }, 0).evicted).sum();
        assert_eq!((evicted, p.class_samples(high)), (0, n));
        assert_eq!(p.class_rt(high, Stat::Percentile(100)), Some(9.0));
        // One more: the class's window and all pageviews' each drop their oldest, the 9 s one.
        assert_eq!(p.on_pageview(ts(1_001), high, 1.0, 0).evicted, 2);
        assert_eq!(p.class_samples(high), n);
        assert_eq!(p.class_rt(high, Stat::Percentile(100)), Some(1.0));
    }

    #[test]
    fn reload_keeps_class_statistics_by_name() {
        let mut p = policy("CLASS HIGH IF IP.SRC == 10.4.*.*\nIF RT.HIGH > 3s THEN DROP SYN\n");
        let high = p.rules().class_id("HIGH").unwrap();
        p.on_pageview(ts(100), high, 5.0, 0);
        p.replace_rules(rules::compile("new.rlm", "CLASS LOW IF IP.SRC == 10.5.*.*\nCLASS HIGH IF IP.SRC == 10.4.*.*\n").unwrap());
        let high2 = p.rules().class_id("HIGH").unwrap();
        assert_ne!(high, high2);
        assert_eq!(p.class_rt(high2, Stat::Mean), Some(5.0));
        assert_eq!(p.class_counters[high2.index()].pageviews, 1);
    }

    #[test]
    fn a_source_is_an_ipv4_address_or_an_ipv6_64() {
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        assert_ne!(source_of(ip("10.4.0.1")), source_of(ip("10.4.0.2")));
        assert_eq!(source_of(ip("2001:db8:1:2::1")), source_of(ip("2001:db8:1:2:ffff::9")));
        assert_ne!(source_of(ip("2001:db8:1:2::1")), source_of(ip("2001:db8:1:3::1")));
        assert_ne!(source_of(ip("0.0.0.0")), source_of(ip("::")));
    }

    /// The policy takes a pageview's source: a heavy client among others stops counting at
    /// twice its share, a class's only client never does.
    #[test]
    fn a_heavy_source_stops_counting_at_twice_its_share() {
        let rules = rules::compile("t.rlm", "CLASS HIGH IF IP.SRC == 10.4.*.*\nIF RT.HIGH > 5s THEN DROP SYN\n").unwrap();
        let mut p = Policy::new(rules, Duration::from_secs(600));
        let high = ClassId(0);
        for i in 0..100u64 {
            assert!(p.on_pageview(ts(1_000 + i), high, 1.0, i % 10).counted);
        }
        let heavy: Vec<PageviewTaken> = (0..100).map(|i| p.on_pageview(ts(2_000 + i), high, 30.0, 99)).collect();
        let counted = heavy.iter().filter(|t| t.counted).count();
        // Taken while it holds less than twice the mean per source: 11 h < 2 (100 + h) up to h = 22.
        assert_eq!(counted, 23, "twice the mean per source of 11 sources");
        assert!(heavy.iter().all(|t| t.counted != t.over_share));
        let mean = p.class_rt(high, Stat::Mean).unwrap();
        assert!((mean - (100.0 + 30.0 * 23.0) / 123.0).abs() < 1e-9, "{mean}");
    }
}
