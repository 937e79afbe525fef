//! The evaluator: classes, precedence, addresses, aggregates, hysteresis, nodes and effects.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use rules::{
    compile, AggregateTest, Aggregates, ClassId, Cmp, Effect, EmbedSelect, Facts, Firing, NoAggregates, Node, Per, Rate, RuleId, RuleSet, Scope, Stat,
};

fn set(src: &str) -> RuleSet {
    compile("t.rlm", src).unwrap_or_else(|e| panic!("{e}"))
}

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

const SERVER: &str = "10.9.0.1:80";

#[derive(Default)]
struct Stats(HashMap<(Scope, Stat), Duration>);

impl Stats {
    fn with(mut self, scope: Scope, stat: Stat, ms: u64) -> Self {
        self.0.insert((scope, stat), Duration::from_millis(ms));
        self
    }
}

impl Aggregates for Stats {
    fn rt(&self, scope: Scope, stat: Stat) -> Option<Duration> {
        self.0.get(&(scope, stat)).copied()
    }
}

fn fired(rs: &RuleSet, node: Node, f: &Facts<'_>) -> Vec<(u32, Effect)> {
    let mut out = Vec::new();
    rs.eval(node, f, &mut out);
    out.into_iter().map(|Firing { rule, effect }| (rule.0, effect)).collect()
}

/// Which rules fire at the SYN node for a client, classified by the set.
fn syn_rules(rs: &RuleSet, client: &str, agg: &dyn Aggregates) -> Vec<u32> {
    let client = sa(client);
    let class = rs.classify(client, sa(SERVER));
    let mut f = Facts::new(client, sa(SERVER), class, agg);
    f.rt = Some(Duration::ZERO);
    let mut v: Vec<u32> = fired(rs, Node::Syn, &f).into_iter().map(|(r, _)| r).collect();
    v.dedup();
    v
}

#[test]
fn classes_first_match_wins() {
    let rs = set("CLASS VIP IF IP.SRC == 10.4.1.0/24\nCLASS HIGH IF IP.SRC == 10.4.*.*\nCLASS V6 IF IP.SRC == 2001:db8::/32\nCLASS WEB IF PORT.DST == 8080 AND IP.DST == 10.9.0.0/16\n");
    let c = |client: &str, server: &str| rs.class_name(rs.classify(sa(client), sa(server))).to_string();
    assert_eq!(c("10.4.1.7:1000", SERVER), "VIP", "matches VIP and HIGH: the first wins");
    assert_eq!(c("10.4.2.7:1000", SERVER), "HIGH");
    assert_eq!(c("[2001:db8:1::5]:1000", "[2001:db8::80]:80"), "V6");
    assert_eq!(c("10.5.0.1:1000", "10.9.3.3:8080"), "WEB");
    assert_eq!(c("10.5.0.1:1000", SERVER), "DEFAULT");
    assert_eq!(c("[::ffff:10.4.2.7]:1000", SERVER), "HIGH", "IPv4-mapped");
    assert_eq!(rs.default_class(), ClassId(4));
    assert_eq!(rs.class_count(), 5);
    assert_eq!(rs.class_id("web"), Some(ClassId(3)));
    assert_eq!(rs.class_id("default"), Some(ClassId(4)));
    assert_eq!(rs.class_id("nope"), None);
    // No classes: everyone is DEFAULT.
    let rs = set("IF RT > 1s THEN DROP SYN");
    assert_eq!(rs.classify(sa("1.2.3.4:5"), sa(SERVER)), ClassId(0));
    assert_eq!(rs.class_name(ClassId(0)), "DEFAULT");
}

#[test]
fn precedence_not_and_or() {
    // NOT binds tighter than AND, AND tighter than OR.
    let rs = set("IF IP.SRC == 1.0.0.1 OR IP.SRC == 1.0.0.2 AND PORT.SRC == 7 THEN DROP SYN\n\
         IF (IP.SRC == 1.0.0.1 OR IP.SRC == 1.0.0.2) AND PORT.SRC == 7 THEN DROP SYN\n\
         IF NOT IP.SRC == 1.0.0.1 AND PORT.SRC == 7 THEN DROP SYN\n\
         IF NOT (IP.SRC == 1.0.0.1 AND PORT.SRC == 7) THEN DROP SYN\n");
    let a = NoAggregates;
    assert_eq!(syn_rules(&rs, "1.0.0.1:9", &a), [0, 3], "1.0.0.1 alone satisfies the OR; port 9");
    assert_eq!(syn_rules(&rs, "1.0.0.1:7", &a), [0, 1]);
    assert_eq!(syn_rules(&rs, "1.0.0.2:9", &a), [3]);
    assert_eq!(syn_rules(&rs, "1.0.0.2:7", &a), [0, 1, 2, 3]);
    assert_eq!(syn_rules(&rs, "1.0.0.3:7", &a), [2, 3]);
}

#[test]
fn the_papers_admission_control() {
    let rs = set("CLASS HIGH IF IP.SRC == 10.4.*.*\nCLASS LOW IF IP.SRC != 10.4.*.*\n\
         IF IP.SRC == *.*.*.* THEN\n  FAST SYN + SYN/ACK GAP 500ms\n\
         IF IP.SRC != 10.4.*.* AND RT.HIGH > 3.0s THEN\n  DROP SYN\n  HALT FAST SYN\n");
    let high = ClassId(0);
    let slow = Stats::default().with(Scope::Class(high), Stat::Mean, 3100);
    let fine = Stats::default().with(Scope::Class(high), Stat::Mean, 2900);
    let gap = Duration::from_millis(500);
    let low_client = sa("10.5.0.9:40000");
    let class = rs.classify(low_client, sa(SERVER));
    assert_eq!(rs.class_name(class), "LOW");

    let f = Facts::new(low_client, sa(SERVER), class, &slow);
    assert_eq!(fired(&rs, Node::Syn, &f), [(0, Effect::FastSyn { gap }), (1, Effect::DropSyn), (1, Effect::HaltFastSyn)]);
    assert_eq!(fired(&rs, Node::SynAck, &f), [(0, Effect::FastSynAck { gap })], "the SYN/ACK half of FAST SYN + SYN/ACK");
    assert_eq!(fired(&rs, Node::Request, &f), []);

    let f = Facts::new(low_client, sa(SERVER), class, &fine);
    assert_eq!(fired(&rs, Node::Syn, &f), [(0, Effect::FastSyn { gap })], "RT.HIGH within 3 s");

    let f = Facts::new(low_client, sa(SERVER), class, &NoAggregates);
    assert_eq!(fired(&rs, Node::Syn, &f), [(0, Effect::FastSyn { gap })], "no HIGH pageviews yet: RT.HIGH unknown, no drop");

    let hi = sa("10.4.0.9:40000");
    let f = Facts::new(hi, sa(SERVER), rs.classify(hi, sa(SERVER)), &slow);
    assert_eq!(fired(&rs, Node::Syn, &f), [(0, Effect::FastSyn { gap })], "HIGH clients are never dropped");

    assert_eq!(rs.rules_at(Node::Syn).collect::<Vec<_>>(), [RuleId(0), RuleId(1)]);
    assert_eq!(rs.rules_at(Node::SynAck).collect::<Vec<_>>(), [RuleId(0)]);
    assert_eq!(rs.aggregates_used(), [(Scope::Class(high), Stat::Mean)]);
    assert_eq!(rs.rule(RuleId(1)).unwrap().to_string(), "IF IP.SRC != 10.4.*.* AND RT.HIGH > 3s THEN\n  DROP SYN\n  HALT FAST SYN");
}

#[test]
fn unknown_facts_never_fire() {
    // Kleene logic: unknown AND false is false, unknown OR true is true, NOT unknown is unknown.
    let rs = set("CLASS H IF IP.SRC == 10.4.*.*\nIF NOT RT.H > 3s THEN DROP SYN\nIF RT.H > 3s OR PORT.SRC == 7 THEN DROP SYN\nIF RT.H > 3s AND PORT.SRC == 8 THEN DROP SYN\nIF NOT (RT.H > 3s AND PORT.SRC == 8) THEN DROP SYN\nIF RT > 0s THEN DROP SYN\nIF NOT RT > 0s THEN DROP SYN\n");
    let a = NoAggregates;
    let f = |client: &str| {
        let mut f = Facts::new(sa(client), sa(SERVER), ClassId(1), &a);
        f.rt = None;
        let mut v: Vec<u32> = fired(&rs, Node::Syn, &f).into_iter().map(|x| x.0).collect();
        v.dedup();
        v
    };
    assert_eq!(f("1.1.1.1:7"), [1, 3]);
    assert_eq!(f("1.1.1.1:8"), Vec::<u32>::new());
}

#[test]
fn addresses_and_ports() {
    let rs = set("IF IP.SRC == 2001:db8::/32 THEN DROP SYN\n\
         IF IP.SRC != 2001:db8::/32 THEN DROP SYN\n\
         IF IP.SRC == * THEN DROP SYN\n\
         IF IP.SRC == *.*.*.* THEN DROP SYN\n\
         IF IP.DST == 10.9.0.1 AND PORT.DST == 80 AND PORT.SRC >= 1024 THEN DROP SYN\n\
         IF IP.SRC == 2001:db8::1 THEN DROP SYN\n");
    let a = NoAggregates;
    assert_eq!(syn_rules(&rs, "[2001:db8:aa::1]:5000", &a), [0, 2, 4]);
    assert_eq!(syn_rules(&rs, "[2001:db8::1]:5000", &a), [0, 2, 4, 5]);
    assert_eq!(syn_rules(&rs, "[2001:db9::1]:80", &a), [1, 2]);
    assert_eq!(syn_rules(&rs, "10.4.0.1:5000", &a), [1, 2, 3, 4]);
    assert_eq!(syn_rules(&rs, "10.4.0.1:80", &a), [1, 2, 3]);
}

#[test]
fn percentiles_all_and_class_tests() {
    let rs = set("CLASS HIGH IF IP.SRC == 10.4.*.*\n\
         IF RT.HIGH.P95 > 5s THEN DROP SYN\n\
         IF RT.HIGH.MEAN > 2s THEN DROP SYN\n\
         IF RT.ALL.P50 >= 1s AND CLASS != HIGH THEN DROP SYN\n\
         IF CLASS == DEFAULT THEN FAST SYN\n");
    let high = Scope::Class(ClassId(0));
    let agg = Stats::default().with(high, Stat::Percentile(95), 6000).with(high, Stat::Mean, 1500).with(Scope::All, Stat::Percentile(50), 1000);
    assert_eq!(syn_rules(&rs, "10.5.0.1:1", &agg), [0, 2, 3]);
    assert_eq!(syn_rules(&rs, "10.4.0.1:1", &agg), [0]);
    assert_eq!(rs.aggregates_used(), [(Scope::All, Stat::Percentile(50)), (high, Stat::Mean), (high, Stat::Percentile(95))]);
    // A closure is an Aggregates too.
    let closure = |s: Scope, st: Stat| (s == high && st == Stat::Mean).then_some(Duration::from_secs(3));
    assert_eq!(syn_rules(&rs, "10.4.0.1:1", &closure), [1]);
}

#[test]
fn pageview_rt() {
    let rs = set("IF RT > 2s THEN REWRITE EMBEDS\nIF RT <= 0s THEN DELAY FIRST SYN 3s\n");
    let a = NoAggregates;
    let mut f = Facts::new(sa("1.1.1.1:1"), sa(SERVER), ClassId(0), &a);
    f.rt = Some(Duration::from_millis(2001));
    assert_eq!(fired(&rs, Node::Request, &f), [(0, Effect::RewriteEmbeds(rules::EmbedsId(0)))]);
    f.rt = Some(Duration::from_secs(2));
    assert_eq!(fired(&rs, Node::Request, &f), []);
    f.rt = Some(Duration::ZERO);
    assert_eq!(fired(&rs, Node::Syn, &f), [(1, Effect::DelayFirstSyn { delay: Duration::from_secs(3) })], "first SYN of a new pageview: RT is 0");
    f.rt = None;
    assert_eq!(fired(&rs, Node::Syn, &f), []);
}

#[test]
fn urls_hosts_content_types() {
    let rs = set("IF URL == \"/images/*.gif\" THEN REWRITE EMBEDS USING \"small.map\"\n\
         IF HOST == \"shop.example.com\" AND CONTENT-TYPE == \"text/html\" THEN REMOVE EMBEDS AT 2\n\
         IF URL != \"/tpcw/*\" THEN REMOVE EMBEDS AFTER 3\n\
         IF CONTENT-TYPE == \"image/*\" THEN REMOVE EMBEDS MATCHING \"*.jpg\"\n\
         IF RT > 1s THEN REWRITE EMBEDS IF PREDICTED RT > 3s\n");
    let a = NoAggregates;
    let mut f = Facts::new(sa("1.1.1.1:1"), sa(SERVER), ClassId(0), &a);
    f.url = Some("/images/big_1.gif");
    f.host = Some("SHOP.example.com:8080");
    assert_eq!(fired(&rs, Node::Request, &f), [(0, Effect::RewriteEmbeds(rules::EmbedsId(0)))]);
    f.url = Some("/Images/big_1.gif");
    assert_eq!(fired(&rs, Node::Request, &f), [], "URLs compare case-sensitively");
    f.url = Some("/tpcw/home");
    f.content_type = Some("Text/HTML; charset=ISO-8859-1");
    assert_eq!(fired(&rs, Node::Response, &f), [(1, Effect::RemoveEmbeds(rules::EmbedsId(1)))]);
    f.url = Some("/other");
    f.content_type = None;
    assert_eq!(fired(&rs, Node::Response, &f), [(2, Effect::RemoveEmbeds(rules::EmbedsId(2)))], "content type unknown: rule 1 does not fire");
    f.rt = Some(Duration::from_secs(2));
    f.url = Some("/x.png");
    let got = fired(&rs, Node::Request, &f);
    assert_eq!(got, [(4, Effect::RewriteEmbeds(rules::EmbedsId(4)))]);
    assert_eq!(rs.embeds(rules::EmbedsId(0)).mapping.as_deref(), Some("small.map"));
    assert_eq!(rs.embeds(rules::EmbedsId(1)).select, EmbedSelect::At(vec![2]));
    assert_eq!(rs.embeds(rules::EmbedsId(2)).select, EmbedSelect::After(3));
    assert_eq!(rs.embeds(rules::EmbedsId(3)).select, EmbedSelect::Matching(rules::Glob::new("*.jpg")));
    assert_eq!(rs.embeds(rules::EmbedsId(4)).select, EmbedSelect::Predicted { cmp: rules::Cmp::Gt, goal: Duration::from_secs(3) });
}

#[test]
fn limit_syn_buckets() {
    let rs =
        set("CLASS LOW IF IP.SRC != 10.4.*.*\nIF CLASS == LOW THEN LIMIT SYN 200/s BURST 20\nIF RT > 5s THEN LIMIT SYN 600/min BURST 1 FAST SYN\n");
    assert_eq!(rs.buckets().len(), 2);
    assert_eq!(rs.buckets()[0].rate, Rate { count: 200, per: Per::Second });
    assert_eq!(rs.buckets()[1].rate.per_second(), 10.0);
    assert_eq!(rs.buckets()[1].rule, RuleId(1));
    let a = NoAggregates;
    let c = sa("10.5.0.1:1");
    let f = Facts::new(c, sa(SERVER), rs.classify(c, sa(SERVER)), &a);
    assert_eq!(
        fired(&rs, Node::Syn, &f),
        [(0, Effect::LimitSyn { bucket: rules::BucketId(0), rate: Rate { count: 200, per: Per::Second }, burst: 20 })]
    );
}

#[test]
fn fast_gaps() {
    let rs = set("IF RT >= 0s THEN FAST SYN\nIF RT >= 0s THEN FAST SYN/ACK GAP 10ms\n");
    let a = NoAggregates;
    let mut f = Facts::new(sa("1.1.1.1:1"), sa(SERVER), ClassId(0), &a);
    f.rt = Some(Duration::ZERO);
    assert_eq!(fired(&rs, Node::Syn, &f), [(0, Effect::FastSyn { gap: rules::DEFAULT_GAP })]);
    assert_eq!(fired(&rs, Node::SynAck, &f), [(1, Effect::FastSynAck { gap: Duration::from_millis(10) })]);
}

#[test]
fn hysteresis() {
    let rs = set("CLASS HIGH IF IP.SRC == 10.4.*.*\nIF RT.HIGH > 3s FOR 2s THEN DROP SYN\nIF RT.HIGH > 3s FOR 0s THEN FAST SYN\n");
    assert_eq!(rs.held_tests().len(), 1, "FOR 0s is no hold");
    let mut holds = rs.new_holds();
    let high = Scope::Class(ClassId(0));
    let at = |ms: u64| Stats::default().with(high, Stat::Mean, ms);
    let client = sa("10.5.0.1:1");
    let drops = |holds: &rules::Holds, agg: &Stats| {
        let mut f = Facts::new(client, sa(SERVER), ClassId(1), agg);
        f.holds = Some(holds);
        fired(&rs, Node::Syn, &f).iter().any(|(_, e)| *e == Effect::DropSyn)
    };
    let s = |secs: f64| Duration::from_secs_f64(secs);
    // Above 3 s from t=0: the drop starts at t=2.
    for (t, rt, want) in [
        (0.0, 3500, false),
        (1.0, 3600, false),
        (1.9, 3200, false),
        (2.0, 3300, true),
        (3.0, 2500, true),
        (4.0, 3500, true),
        (5.0, 2000, true),
        (6.9, 2000, true),
        (7.0, 2000, false),
        (8.0, 4000, false),
    ] {
        rs.update_holds(&mut holds, s(t), &at(rt));
        assert_eq!(drops(&holds, &at(rt)), want, "t={t} RT.HIGH={rt}ms");
    }
    // A short dip below resets the count.
    rs.update_holds(&mut holds, s(9.0), &at(4000));
    rs.update_holds(&mut holds, s(9.5), &at(1000));
    assert_eq!(holds.held_for(0, s(9.5)), None, "the comparison does not hold");
    rs.update_holds(&mut holds, s(10.5), &at(4000));
    assert!(!drops(&holds, &at(4000)));
    rs.update_holds(&mut holds, s(12.5), &at(4000));
    assert!(drops(&holds, &at(4000)));
    assert_eq!(holds.held_for(0, s(12.5)), Some(s(2.0)), "held since the dip ended at 10.5 s");
    // Without holds the held test is unknown; the unheld one needs none.
    let high_slow = at(4000);
    let f = Facts::new(client, sa(SERVER), ClassId(1), &high_slow);
    assert_eq!(fired(&rs, Node::Syn, &f), [(1, Effect::FastSyn { gap: rules::DEFAULT_GAP })]);
    // Holds from another rule set are reset, not misread.
    let mut other = set("CLASS H IF IP.SRC == 1.1.1.1\nIF RT.H > 1s FOR 1s THEN DROP SYN\nIF RT.H > 1s FOR 1s THEN DROP SYN\n").new_holds();
    rs.update_holds(&mut other, s(0.0), &at(4000));
    assert!(!other.value(0));
}

#[test]
fn a_rules_aggregate_tests_come_in_file_order_through_and_or_not_and_for() {
    let rs = set("CLASS HIGH IF IP.SRC == 10.4.*.*\n\
         IF CLASS != HIGH AND (RT.high.mean > 1.5s OR NOT RT.ALL.P95 <= 4s) AND RT.HIGH.P90 >= 2s FOR 10s THEN DROP SYN\n\
         IF IP.SRC == 10.5.*.* THEN DROP SYN\n");
    let high = Scope::Class(ClassId(0));
    let ms = Duration::from_millis;
    let t = |name: &str, scope, stat, cmp, limit, held| AggregateTest { name: name.to_string(), scope, stat, cmp, limit, held };
    assert_eq!(
        rs.aggregate_tests(RuleId(0)),
        [
            t("RT.HIGH", high, Stat::Mean, Cmp::Gt, ms(1_500), None),
            t("RT.ALL", Scope::All, Stat::Percentile(95), Cmp::Le, ms(4_000), None),
            t("RT.HIGH", high, Stat::Percentile(90), Cmp::Ge, ms(2_000), Some(0)),
        ],
        "named as the class is declared, the FOR test pointing at its hold"
    );
    assert_eq!(rs.held_tests()[0].hold, ms(10_000));
    assert_eq!(rs.aggregate_tests(RuleId(1)), [], "an address rule names no aggregate");
    assert_eq!(rs.aggregate_tests(RuleId(2)), [], "no such rule");
    assert_eq!(rs.aggregates_used(), [(Scope::All, Stat::Percentile(95)), (high, Stat::Mean), (high, Stat::Percentile(90))]);
}

#[test]
fn evaluation_reuses_the_buffer() {
    let rs = set("IF RT >= 0s THEN FAST SYN DROP SYN\n");
    let a = NoAggregates;
    let mut f = Facts::new(sa("1.1.1.1:1"), sa(SERVER), ClassId(0), &a);
    f.rt = Some(Duration::ZERO);
    let mut out = Vec::with_capacity(8);
    let cap = out.capacity();
    for _ in 0..1000 {
        out.clear();
        rs.eval_syn(&f, &mut out);
    }
    assert_eq!(out.len(), 2);
    assert_eq!(out.capacity(), cap);
    out.clear();
    rs.eval_synack(&f, &mut out);
    rs.eval_request(&f, &mut out);
    rs.eval_response(&f, &mut out);
    assert!(out.is_empty());
}

#[test]
fn undecidable_at_the_node_is_an_error() {
    // Each test at each node where it cannot be decided, with the action that acts there.
    let cases = [
        ("URL == \"/x\"", "DROP SYN", false),
        ("URL == \"/x\"", "LIMIT SYN 1/s BURST 1", false),
        ("URL == \"/x\"", "FAST SYN", false),
        ("URL == \"/x\"", "FAST SYN/ACK", false),
        ("URL == \"/x\"", "DELAY FIRST SYN 1s", false),
        ("URL == \"/x\"", "HALT FAST SYN", false),
        ("URL == \"/x\"", "REWRITE EMBEDS", true),
        ("URL == \"/x\"", "REMOVE EMBEDS", true),
        ("HOST == \"a\"", "FAST SYN + SYN/ACK", false),
        ("HOST == \"a\"", "REWRITE EMBEDS", true),
        ("CONTENT-TYPE == \"text/html\"", "REWRITE EMBEDS", false),
        ("CONTENT-TYPE == \"text/html\"", "REMOVE EMBEDS", true),
        ("CONTENT-TYPE == \"text/html\"", "DROP SYN", false),
        ("RT > 1s", "DROP SYN", true),
        ("IP.DST == 10.0.0.1", "REMOVE EMBEDS", true),
        ("PORT.SRC > 1", "FAST SYN/ACK", true),
    ];
    for (test, action, ok) in cases {
        let src = format!("IF {test} THEN {action}");
        let r = compile("t.rlm", &src);
        assert_eq!(r.is_ok(), ok, "{src}: {:?}", r.err().map(|e| e.to_string()));
        if let Err(e) = r {
            let d = e.first().unwrap();
            assert_eq!((d.line, d.col), (1, 4));
            assert!(d.message.contains("cannot be decided at the"), "{d}");
        }
    }
}

#[test]
fn shareable_across_threads() {
    fn send_sync<T: Send + Sync + Clone>() {}
    send_sync::<RuleSet>();
    send_sync::<rules::Holds>();
    send_sync::<Firing>();
}

/// Classes by site: a pageview's class by the site it is for (the Host header, the SNI), a
/// SYN's by its client's latest site; a client whose site is not known matches no SITE
/// declaration; SITE written plain or as a glob, in any case.
#[test]
fn classes_by_site() {
    let rs = set("CLASS SHOP IF SITE == shop.example.com\nCLASS NEWS IF SITE == \"*.news.example\"\nCLASS HIGH IF IP.SRC == 10.4.*.*\n");
    assert!(rs.classes_by_site());
    let (c, s) = (sa("10.5.0.1:4000"), sa(SERVER));
    let class = |site: Option<&str>| rs.class_name(rs.classify_site(c, s, site)).to_string();
    assert_eq!(class(Some("Shop.Example.com:443")), "SHOP");
    assert_eq!(class(Some("www.news.example")), "NEWS");
    assert_eq!(class(Some("other.example")), "DEFAULT");
    // No site known: the SITE tests are unknown, the declarations by address still decide.
    assert_eq!(class(None), "DEFAULT");
    assert_eq!(rs.class_name(rs.classify_site(sa("10.4.0.1:4000"), s, None)), "HIGH");
    assert_eq!(rs.class_name(rs.classify(sa("10.4.0.1:4000"), s)), "HIGH");
    assert!(!set("CLASS HIGH IF IP.SRC == 10.4.*.*\n").classes_by_site());
    // At the request node a rule reads the site as HOST reads the Host header.
    let rs = set("IF SITE != shop.example.com THEN REWRITE EMBEDS\n");
    let facts = |site| Facts { site: Some(site), ..Facts::new(c, s, ClassId(0), &NoAggregates) };
    assert_eq!(fired(&rs, Node::Request, &facts("news.example")).len(), 1);
    assert!(fired(&rs, Node::Request, &facts("SHOP.example.com")).is_empty());
}

/// Content rules where only TLS goes (issue 25): `rlm check`'s summary names a rule that edits
/// content on a class whose declaration admits only HTTPS's ports, or whose own condition
/// does; not one that may hold on plain HTTP too.
#[test]
fn content_rules_on_tls_only_classes_are_named() {
    let src = "CLASS SECURE IF PORT.DST == 443 AND IP.SRC == 10.4.*.*\n\
               CLASS ALT IF PORT.DST == 8443 OR PORT.DST == 443\n\
               CLASS PLAIN IF PORT.DST == 80 OR PORT.DST == 443\n\
               IF CLASS == SECURE AND RT > 1s THEN REMOVE EMBEDS\n\
               IF CLASS == ALT OR CLASS == SECURE THEN REWRITE EMBEDS AFTER 2\n\
               IF CLASS == PLAIN THEN REMOVE EMBEDS\n\
               IF CLASS == SECURE OR IP.SRC == 10.5.*.* THEN REMOVE EMBEDS\n\
               IF NOT CLASS == PLAIN THEN REMOVE EMBEDS\n\
               IF PORT.DST == 443 AND RT > 2s THEN REMOVE EMBEDS AT 1\n\
               IF CLASS == SECURE THEN DROP SYN\n";
    let rs = set(src);
    let lines: Vec<u32> = rs.content_rules_on_tls_only().into_iter().map(|id| rs.rule_position(id).unwrap().0).collect();
    assert_eq!(lines, [4, 5, 9]);
    let summary = rules::summary(&rs);
    assert_eq!(summary.matches("not applicable: tls").count(), 3, "{summary}");
    assert!(summary.contains("not applicable: tls: line 4 edits content"), "{summary}");
    assert!(!rules::summary(&set("CLASS HIGH IF IP.SRC == 10.4.*.*\nIF CLASS == HIGH THEN REMOVE EMBEDS\n")).contains("not applicable"));
}

/// A request's fields as the engine would give them.
struct Req {
    method: &'static str,
    headers: &'static [(&'static str, &'static str)],
}

impl rules::RequestFields for Req {
    fn method(&self) -> &str {
        self.method
    }
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| *v)
    }
}

/// The request node's own tests (issue 26): METHOD, COOKIE.<name> and HEADER.<name>, and
/// REJECT with its status and Retry-After; unknown without the request's fields; the headers
/// the engine must keep for them.
#[test]
fn requests_by_method_cookie_and_header_are_rejected() {
    let rs = set("IF METHOD == POST AND NOT COOKIE.tier == \"gold\" THEN REJECT 429 RETRY-AFTER 5s\n\
                  IF COOKIE.cart EXISTS OR HEADER.X-Tier != \"paid*\" THEN REJECT\n");
    assert_eq!(rs.headers_used(), vec!["cookie".to_string(), "x-tier".to_string()]);
    let (c, s) = (sa("10.5.0.1:4000"), sa(SERVER));
    let at = |req: &Req| fired(&rs, Node::Request, &Facts { request: Some(req), ..Facts::new(c, s, ClassId(0), &NoAggregates) });
    let slow = Effect::Reject { status: 429, retry_after: Some(Duration::from_secs(5)) };
    let plain = Effect::Reject { status: 503, retry_after: None };
    // A POST without the gold cookie, with another cookie and a paid tier: the first rule only.
    let post = Req { method: "POST", headers: &[("Cookie", "sid=1; tier=silver"), ("x-tier", "paid-2")] };
    assert_eq!(at(&post), vec![(0, slow)]);
    // Gold: not the first; a cart cookie: the second.
    let gold = Req { method: "POST", headers: &[("cookie", "cart=3;tier=gold"), ("X-TIER", "paid")] };
    assert_eq!(at(&gold), vec![(1, plain)]);
    // A GET with no X-Tier header: `!=` holds when the header is not there.
    assert_eq!(at(&Req { method: "GET", headers: &[] }), vec![(1, plain)]);
    assert!(at(&Req { method: "GET", headers: &[("X-Tier", "paid")] }).is_empty());
    // Methods compare as sent: "post" is not POST.
    assert_eq!(at(&Req { method: "post", headers: &[("X-Tier", "paid")] }), vec![]);
    // Without the request's fields the tests are unknown: nothing fires.
    assert!(fired(&rs, Node::Request, &Facts::new(c, s, ClassId(0), &NoAggregates)).is_empty());
    // `rlm check` says where REJECT is carried out.
    let summary = rules::summary(&rs);
    assert!(summary.contains("REJECT, LIMIT REQUESTS (line 1, line 2): rlm answers plain HTTP requests"), "{summary}");
    assert!(!rules::summary(&set("IF RT > 1s THEN DROP SYN")).contains("REJECT"));
    // Printed back, parsed again: the same rules.
    let printed = rs.ast().to_string();
    assert_eq!(set(&printed).ast().to_string(), printed, "{printed}");
    assert!(printed.contains("REJECT 429 RETRY-AFTER 5s") && printed.contains("\n  REJECT\n"), "{printed}");
    assert!(printed.contains("COOKIE.cart EXISTS") && printed.contains("HEADER.X-Tier != \"paid*\""), "{printed}");
}

/// ABORT IDLE (003 Paper C): a request-node action, with its idle time (1 s unless written);
/// printed back as written; `rlm check` says where it is carried out.
#[test]
fn abort_idle_fires_at_the_request_of_a_client_without_a_cart() {
    let rs = set("IF NOT COOKIE.cart EXISTS THEN ABORT IDLE\nIF HEADER.X-Tier == \"free\" THEN ABORT IDLE AFTER 250ms\n");
    let (c, s) = (sa("10.5.0.1:4000"), sa(SERVER));
    let at = |req: &Req| fired(&rs, Node::Request, &Facts { request: Some(req), ..Facts::new(c, s, ClassId(0), &NoAggregates) });
    let plain = Effect::AbortIdle { after: Duration::from_secs(1) };
    assert_eq!(at(&Req { method: "GET", headers: &[] }), vec![(0, plain)]);
    assert!(at(&Req { method: "GET", headers: &[("Cookie", "cart=2")] }).is_empty(), "a cart session is spared");
    let free = Req { method: "GET", headers: &[("Cookie", "cart=2"), ("X-Tier", "free")] };
    assert_eq!(at(&free), vec![(1, Effect::AbortIdle { after: Duration::from_millis(250) })]);
    assert!(fired(&rs, Node::Syn, &Facts::new(c, s, ClassId(0), &NoAggregates)).is_empty(), "nothing at the SYN");
    let summary = rules::summary(&rs);
    assert!(summary.contains("ABORT IDLE (line 1, line 2): rlm closes a plain HTTP keep-alive connection"), "{summary}");
    let printed = rs.ast().to_string();
    assert_eq!(set(&printed).ast().to_string(), printed, "{printed}");
    assert!(printed.contains("ABORT IDLE AFTER 250ms"), "{printed}");
    // Anywhere among a rule's actions, on its line or the next (it was taken first only).
    for src in
        ["IF NOT COOKIE.cart EXISTS THEN REWRITE EMBEDS ABORT IDLE AFTER 2s\n", "IF NOT COOKIE.cart EXISTS THEN\n  REWRITE EMBEDS\n  ABORT IDLE\n"]
    {
        let rs = set(src);
        let fired =
            fired(&rs, Node::Request, &Facts { request: Some(&Req { method: "GET", headers: &[] }), ..Facts::new(c, s, ClassId(0), &NoAggregates) });
        assert!(fired.iter().any(|(_, e)| matches!(e, Effect::AbortIdle { .. })), "{src}: {fired:?}");
        assert_eq!(rs.ast().to_string().matches("ABORT IDLE").count(), 1, "{src}");
    }
}

/// Cookies as browsers send them: `name=value` pairs split by `;`, spaces around them ignored,
/// names compared as sent.
#[test]
fn cookie_values() {
    assert_eq!(rules::cookie_value("a=1; tier=gold", "tier"), Some("gold"));
    assert_eq!(rules::cookie_value("tier=\"gold\";b=2", "tier"), Some("gold"));
    assert_eq!(rules::cookie_value(" tier = gold ", "tier"), Some("gold"));
    assert_eq!(rules::cookie_value("Tier=gold", "tier"), None);
    assert_eq!(rules::cookie_value("cart", "cart"), None);
    assert_eq!(rules::cookie_value("cart=", "cart"), Some(""));
}

/// URL groups (issue 26): a request's group is the first declaration its head matches; `GROUP
/// ==` tests it at the request node (unknown without a request); `LIMIT REQUESTS` is an effect
/// there with its own bucket; `SLA` targets and `SHED` come out in file order; all prints back.
#[test]
fn groups_targets_and_request_limits() {
    let rs = set(concat!(
        "CLASS HIGH IF IP.SRC == 10.4.*.*\n",
        "CLASS LOW IF IP.SRC != 10.4.*.*\n",
        "GROUP db IF URL == \"/search*\" OR URL == \"/best-sellers*\"\n",
        "GROUP carts IF COOKIE.cart EXISTS\n",
        "SLA HIGH RT.P95 < 2s\n",
        "SLA GROUP db RT < 500ms\n",
        "SHED LOW, DEFAULT\n",
        "IF GROUP == db AND CLASS == LOW THEN LIMIT REQUESTS 20/s BURST 5\n",
        "IF GROUP != carts THEN LIMIT REQUESTS 50/s BURST 10\n",
    ));
    let (c, s) = (sa("10.5.0.2:4000"), sa(SERVER));
    let low = rs.class_id("LOW").unwrap();
    let group = |url: &'static str, req: &'static Req| {
        let mut f = Facts::new(c, s, low, &NoAggregates);
        f.url = Some(url);
        f.request = Some(req);
        rs.group_of(&f).map(|g| rs.group_name(g).to_string())
    };
    static PLAIN: Req = Req { method: "GET", headers: &[] };
    static CART: Req = Req { method: "GET", headers: &[("Cookie", "a=1; cart=7")] };
    assert_eq!(group("/search?q=x", &PLAIN).as_deref(), Some("db"));
    assert_eq!(group("/best-sellers", &CART).as_deref(), Some("db"), "the first declaration wins");
    assert_eq!(group("/item/3", &CART).as_deref(), Some("carts"));
    assert_eq!(group("/item/3", &PLAIN), None);
    assert_eq!(rs.group_count(), 2);
    assert_eq!(rs.headers_used(), vec!["cookie".to_string()], "a group's cookie test keeps the header");

    // At the request node: GROUP == db by the group the engine found.
    let mut f = Facts::new(c, s, low, &NoAggregates);
    f.url = Some("/search?q=x");
    f.request = Some(&PLAIN);
    f.group = rs.group_of(&f);
    let got = fired(&rs, Node::Request, &f);
    let rates: Vec<(u32, u32, u32)> = got
        .iter()
        .map(|(r, e)| match e {
            Effect::LimitRequests { bucket, rate, burst } => (*r, bucket.0, (rate.per_second() as u32) * 1000 + *burst),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(rates, vec![(0, 0, 20_005), (1, 1, 50_010)]);
    assert_eq!(rs.request_buckets().len(), 2);
    // Without a request the GROUP tests are unknown: nothing fires.
    let mut f = Facts::new(c, s, low, &NoAggregates);
    f.group = None;
    assert!(fired(&rs, Node::Request, &f).is_empty());

    // Targets and the shedding order.
    let slas: Vec<String> = rs
        .slas()
        .iter()
        .map(|t| match t.scope {
            rules::SlaScope::Class(k) => format!("{} {:?} {:?} line {}", rs.class_name(k), t.stat, t.limit, t.line),
            rules::SlaScope::Group(g) => format!("group {} {:?} {:?} line {}", rs.group_name(g), t.stat, t.limit, t.line),
        })
        .collect();
    assert_eq!(slas, vec!["HIGH Percentile(95) 2s line 5", "group db Mean 500ms line 6"]);
    let shed: Vec<&str> = rs.shed_order().iter().map(|&k| rs.class_name(k)).collect();
    assert_eq!(shed, vec!["LOW", "DEFAULT"]);

    // Printed back, parsed again: the same.
    let printed = rs.ast().to_string();
    assert_eq!(set(&printed).ast().to_string(), printed, "{printed}");
    for line in
        ["GROUP db IF URL == \"/search*\" OR URL == \"/best-sellers*\"", "SLA HIGH RT.P95 < 2s", "SLA GROUP db RT < 500ms", "SHED LOW, DEFAULT"]
    {
        assert!(printed.contains(line), "{line} in {printed}");
    }
    assert!(printed.contains("LIMIT REQUESTS 20/s BURST 5"), "{printed}");
}
