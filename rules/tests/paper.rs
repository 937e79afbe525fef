//! Every rule printed in 004 section 6, as printed there, and the rules its prose describes.

use std::time::Duration;

use rules::ast::{ActionKind, Cond, Item, Test};
use rules::{compile, parse, AddrPattern, Cmp, EmbedSelect, End, Stat};

/// The classes 004 section 6.3 describes in prose: "one-third high priority clients from
/// subnet 10.4.*.* and two-thirds low priority clients from other subnets".
const CLASSES: &str = "CLASS HIGH IF IP.SRC == 10.4.*.*\nCLASS LOW IF IP.SRC != 10.4.*.*\n";

/// Section 6.2 (Table 1), with `*.*.*` as printed (see `the_typo_in_6_2`).
const RULE_6_2_AS_PRINTED: &str = "IF IP.SRC == *.*.* THEN\nFAST SYN/ACK GAP 500ms\n";
/// The same with the typo mended.
const RULE_6_2: &str = "IF IP.SRC == *.*.*.* THEN\nFAST SYN/ACK GAP 500ms\n";
/// Section 6.3, Figure 15.
const RULE_6_3_FIG15: &str = "IF IP.SRC != 10.4.*.* AND RT.HIGH > 3.0s THEN\n  DROP SYN\n";
/// Section 6.3, Figure 16.
const RULE_6_3_FIG16: &str =
    "IF IP.SRC == *.*.*.* THEN\n  FAST SYN + SYN/ACK GAP 500ms\nIF IP.SRC != 10.4.*.* AND RT.HIGH > 3.0s THEN\n  DROP SYN\n  HALT FAST SYN\n";
/// Section 6.4, Figure 18 (leftmost points).
const RULE_6_4_REMOVE: &str = "IF IP.SRC = *.*.*.* THEN REMOVE EMBEDS\n";
/// Section 6.4, before Figure 20.
const RULE_6_4_REWRITE: &str = "IF RT > 2s THEN REWRITE EMBEDS\n";

/// Rules the prose of section 6 describes without printing them, in this language's words.
const PROSE: &[(&str, &str)] = &[
    // Figure 17: the Figure 16 rule plus: initial SYNs of the first connection of low priority
    // pageviews dropped, fast-retransmitted 3 s later and every 500 ms after that.
    (
        "Figure 17",
        "IF IP.SRC == *.*.*.* THEN\n  FAST SYN + SYN/ACK GAP 500ms\nIF IP.SRC != 10.4.*.* AND RT.HIGH > 3.0s THEN\n  DROP SYN\n  HALT FAST SYN\nIF CLASS == LOW THEN\n  DELAY FIRST SYN 3s\n  FAST SYN GAP 500ms\n",
    ),
    // Figure 18, x = 3: "the first 3 embedded objects are retrieved while the rest of the objects are removed".
    ("Figure 18, x = 3", "IF IP.SRC = *.*.*.* THEN REMOVE EMBEDS AFTER 3\n"),
    // "By configuring RLM to remove only the second image".
    ("6.4, only the second image", "IF IP.SRC = *.*.*.* THEN REMOVE EMBEDS AT 2\n"),
    // Figure 20: rewrite when the predicted transfer would take the pageview past the threshold.
    ("Figure 20", "IF IP.SRC = *.*.*.* THEN REWRITE EMBEDS IF PREDICTED RT > 3s\n"),
    // 6.4: 160, 220 and 300 ms RTT groups given different numbers of objects.
    (
        "Figure 18, per group",
        "CLASS FAR IF IP.SRC == 10.3.0.0/16\nCLASS MID IF IP.SRC == 10.2.0.0/16\nIF CLASS == MID THEN REMOVE EMBEDS AFTER 2\nIF CLASS == FAR THEN REMOVE EMBEDS AFTER 1\n",
    ),
];

fn rules_of(src: &str) -> Vec<rules::ast::Rule> {
    parse("004.rlm", src)
        .unwrap_or_else(|e| panic!("{e}"))
        .items
        .into_iter()
        .filter_map(|i| match i {
            Item::Rule(r) => Some(r),
            _ => None,
        })
        .collect()
}

fn atom(c: &Cond) -> &Test {
    match c {
        Cond::Atom(a) => &a.test,
        other => panic!("not an atom: {other:?}"),
    }
}

#[test]
fn every_printed_rule_parses_as_printed() {
    for src in [RULE_6_2, RULE_6_3_FIG15, RULE_6_3_FIG16, RULE_6_4_REMOVE, RULE_6_4_REWRITE] {
        parse("004.rlm", src).unwrap_or_else(|e| panic!("{src}\n{e}"));
        let file = format!("{CLASSES}{src}");
        compile("004.rlm", &file).unwrap_or_else(|e| panic!("{file}\n{e}"));
    }
}

#[test]
fn the_printed_rules_mean_what_the_paper_says() {
    let all4 = AddrPattern::V4Wildcard([None; 4]);
    let r = rules_of(RULE_6_2);
    assert_eq!(*atom(&r[0].cond), Test::Addr { end: End::Src, negated: false, pattern: all4 });
    assert_eq!(r[0].actions[0].kind, ActionKind::Fast { syn: false, synack: true, gap: Duration::from_millis(500), gap_written: true });

    let r = rules_of(RULE_6_3_FIG16);
    assert_eq!(r.len(), 2);
    assert_eq!(r[0].actions[0].kind, ActionKind::Fast { syn: true, synack: true, gap: Duration::from_millis(500), gap_written: true });
    let Cond::And(tests) = &r[1].cond else { panic!("{:?}", r[1].cond) };
    assert_eq!(*atom(&tests[0]), Test::Addr { end: End::Src, negated: true, pattern: AddrPattern::V4Wildcard([Some(10), Some(4), None, None]) });
    let Test::ClassRt { stat, cmp, limit, hold, .. } = atom(&tests[1]) else { panic!() };
    assert_eq!((*stat, *cmp, *limit, *hold), (Stat::Mean, Cmp::Gt, Duration::from_secs(3), None));
    assert_eq!(r[1].actions.iter().map(|a| a.kind.clone()).collect::<Vec<_>>(), [ActionKind::DropSyn, ActionKind::HaltFastSyn]);

    let r = rules_of(RULE_6_4_REMOVE);
    assert_eq!(*atom(&r[0].cond), Test::Addr { end: End::Src, negated: false, pattern: all4 }, "= is ==");
    assert_eq!(r[0].actions[0].kind, ActionKind::RemoveEmbeds { select: EmbedSelect::All });

    let r = rules_of(RULE_6_4_REWRITE);
    assert_eq!(*atom(&r[0].cond), Test::Rt { cmp: Cmp::Gt, limit: Duration::from_secs(2) });
    assert_eq!(r[0].actions[0].kind, ActionKind::RewriteEmbeds { select: EmbedSelect::All, mapping: None });
}

#[test]
fn the_whole_of_section_6_in_one_file() {
    let file = format!("# 004 section 6\n{CLASSES}{RULE_6_2}{RULE_6_3_FIG16}{RULE_6_4_REMOVE}{RULE_6_4_REWRITE}");
    let set = compile("004.rlm", &file).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(set.rule_count(), 5);
    assert_eq!(set.class_count(), 3, "HIGH, LOW and DEFAULT");
    assert_eq!(set.rule_position(rules::RuleId(1)), Some((6, 1)));
}

#[test]
fn the_prose_rules() {
    for (what, src) in PROSE {
        let file = format!("{CLASSES}{src}");
        compile("004.rlm", &file).unwrap_or_else(|e| panic!("{what}:\n{e}"));
    }
}

/// 004 section 6.2 prints `IF IP.SRC == *.*.* THEN`: three parts, a typo for `*.*.*.*`. It is
/// an error that says so and points at the pattern.
#[test]
fn the_typo_in_6_2() {
    let e = parse("004.rlm", RULE_6_2_AS_PRINTED).unwrap_err();
    assert_eq!(e.len(), 1);
    let d = e.first().unwrap();
    assert_eq!((d.line, d.col, d.len), (1, 14, 5));
    assert!(d.message.contains("has 3 parts; an IPv4 pattern has four"), "{d}");
    assert!(d.help.as_deref().unwrap().starts_with("did you mean *.*.*.*?"), "{d}");
    assert_eq!(
        d.to_string(),
        "004.rlm:1:14: error: '*.*.*' has 3 parts; an IPv4 pattern has four\n 1 | IF IP.SRC == *.*.* THEN\n   |              ^^^^^ expected an address pattern: 10.4.*.*, 10.4.0.0/16, 10.4.0.1, 2001:db8::/32 or *\n   = help: did you mean *.*.*.*? (004 section 6.2 prints *.*.*, a typo for *.*.*.*)"
    );
    // Mended as the help says, it is the 6.2 rule.
    assert_eq!(RULE_6_2_AS_PRINTED.replacen("*.*.*", "*.*.*.*", 1), RULE_6_2);
}

/// The paper uses RT.HIGH without declaring HIGH; here a class must be declared.
#[test]
fn rt_high_needs_its_class() {
    parse("004.rlm", RULE_6_3_FIG15).unwrap();
    let e = compile("004.rlm", RULE_6_3_FIG15).unwrap_err();
    let d = e.first().unwrap();
    assert_eq!((d.line, d.col), (1, 30));
    assert!(d.message.contains("no class is named HIGH"), "{d}");
    assert!(d.help.as_deref().unwrap().contains("CLASS HIGH IF"), "{d}");
}

/// Keywords, fields and class names are read in any case.
#[test]
fn any_case() {
    let src = "class high if ip.src == 10.4.*.*\nif ip.src != 10.4.*.* and rt.High > 3.0s then drop syn halt fast syn\n";
    let set = compile("lower.rlm", src).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(set.class_name(rules::ClassId(0)), "high");
    assert_eq!(set.class_id("HIGH"), Some(rules::ClassId(0)));
}

/// The canonical form of the section 6 rules is the paper's notation.
#[test]
fn printing_back() {
    let file = parse("004.rlm", &format!("{CLASSES}{RULE_6_3_FIG16}{RULE_6_4_REMOVE}")).unwrap();
    assert_eq!(
        file.to_string(),
        "CLASS HIGH IF IP.SRC == 10.4.*.*\nCLASS LOW IF IP.SRC != 10.4.*.*\nIF IP.SRC == *.*.*.* THEN\n  FAST SYN + SYN/ACK GAP 500ms\nIF IP.SRC != 10.4.*.* AND RT.HIGH > 3s THEN\n  DROP SYN\n  HALT FAST SYN\nIF IP.SRC == *.*.*.* THEN\n  REMOVE EMBEDS\n"
    );
}
