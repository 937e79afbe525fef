//! Rule files the engine targets run under: the lab's experiments' rules (`testbed/src/experiments/`,
//! at one of their settings) and the examples of `docs/rules.md`, with the lab's mapping
//! (`testbed/maps/ims.map`) for `REWRITE EMBEDS ... USING`.

use std::path::Path;
use std::sync::OnceLock;

use rules::RuleSet;

/// The lab's classes (`CLASS_RULES`).
const CLASSES: &str = "CLASS HIGH IF IP.SRC == 10.4.*.*\nCLASS LOW IF IP.SRC != 10.4.*.*\n";
/// The classes of remove-embeds, rewrite-embeds and predict (`RTT_GROUPS`).
const RTT_CLASSES: &str = "CLASS rtt160 IF IP.SRC == 10.4.*.*\nCLASS rtt220 IF IP.SRC == 10.5.*.*\nCLASS rtt300 IF IP.SRC == 10.6.*.*\n";

/// (name, rules without their classes, classes).
const FILES: &[(&str, &str, &str)] = &[
    // docs/rules.md: the paper's rules.
    ("paper", "IF IP.SRC == *.*.*.* THEN\n  FAST SYN + SYN/ACK GAP 500ms\nIF IP.SRC != 10.4.*.* AND RT.HIGH > 3.0s THEN\n  DROP SYN\n  HALT FAST SYN\n", CLASSES),
    // fast-syn (quick).
    ("fast-syn", "IF IP.SRC == *.*.*.* THEN\n  FAST SYN + SYN/ACK GAP 500ms\nIF IP.SRC != 10.4.*.* AND RT.HIGH > 1.5s THEN\n  DROP SYN\n  HALT FAST SYN\n", CLASSES),
    // fast-synack.
    ("fast-synack", "IF IP.SRC == *.*.*.* THEN\n  FAST SYN/ACK GAP 500ms\n", CLASSES),
    // syn-police.
    ("syn-police", "IF IP.SRC == 10.5.*.* THEN LIMIT SYN 50/s BURST 5\n", CLASSES),
    // syn-throttle.
    ("syn-throttle", "IF IP.SRC != 10.4.*.* AND RT.HIGH > 1.5s THEN DROP SYN\n", CLASSES),
    // think-gap.
    (
        "think-gap",
        "IF IP.SRC == *.*.*.* THEN\n  FAST SYN + SYN/ACK GAP 500ms\nIF IP.SRC != 10.4.*.* AND RT.HIGH > 1.5s THEN\n  DROP SYN\n  HALT FAST SYN\nIF IP.SRC != 10.4.*.* THEN\n  DELAY FIRST SYN 3s\n",
        CLASSES,
    ),
    // remove-embeds, keep-2.
    ("remove-embeds", "IF IP.SRC == *.*.*.* THEN REMOVE EMBEDS AFTER 2\n", RTT_CLASSES),
    // rewrite-embeds, keep-0.
    ("rewrite-embeds", "IF IP.SRC == *.*.*.* THEN REWRITE EMBEDS USING \"ims.map\"\n", RTT_CLASSES),
    // rewrite-embeds, rt-1s.
    ("rewrite-rt", "IF RT > 1.0s THEN REWRITE EMBEDS USING \"ims.map\"\n", RTT_CLASSES),
    // predict, goal-2s.
    ("predict", "IF IP.SRC == *.*.*.* THEN REWRITE EMBEDS IF PREDICTED RT > 2s USING \"ims.map\"\n", RTT_CLASSES),
    // docs/rules.md: DELAY FIRST SYN with the paper's rules.
    (
        "delay-first-syn",
        "IF IP.SRC == *.*.*.* THEN\n  FAST SYN + SYN/ACK GAP 500ms\nIF IP.SRC != 10.4.*.* AND RT.HIGH > 3.0s THEN\n  DROP SYN\n  HALT FAST SYN\nIF CLASS == LOW THEN\n  DELAY FIRST SYN 3s\n  FAST SYN GAP 500ms\n",
        CLASSES,
    ),
    // docs/rules.md: REMOVE EMBEDS by class.
    (
        "remove-by-class",
        "CLASS MID IF IP.SRC == 10.2.0.0/16\nCLASS FAR IF IP.SRC == 10.3.0.0/16\nIF CLASS == MID THEN REMOVE EMBEDS AFTER 2\nIF CLASS == FAR THEN REMOVE EMBEDS AFTER 1\nIF CLASS == DEFAULT THEN REMOVE EMBEDS AT 2\n",
        "",
    ),
    // docs/rules.md: the example with every kind of rule (its mapping the lab's), and FOR.
    (
        "police",
        "# Police low priority SYNs instead of dropping them all, with hysteresis on the trigger.\n\
         CLASS HIGH IF IP.SRC == 10.4.*.* OR IP.SRC == 2001:db8:4::/48\n\
         CLASS LOW  IF IP.SRC != 10.4.*.*\n\
         IF CLASS == LOW AND RT.HIGH.P95 > 5s FOR 10s THEN LIMIT SYN 200/s BURST 20\n\
         IF CLASS == LOW AND RT.HIGH > 3.0s FOR 5s THEN\n  DROP SYN\n  HALT FAST SYN\n\
         IF RT.ALL > 2s AND NOT (CLASS == HIGH) THEN\n  REMOVE EMBEDS MATCHING \"/images/large/*\"\n\
         IF URL == \"/images/*.jpg\" AND HOST == \"shop.example.com\" THEN\n  REWRITE EMBEDS AFTER 4 USING \"ims.map\"\n\
         IF CONTENT-TYPE == \"text/html\" AND (RT > 1s OR RT.HIGH > 3s) THEN\n  REMOVE EMBEDS IF PREDICTED RT >= 3s\n",
        "",
    ),
];

/// How many rule files there are.
pub const COUNT: usize = FILES.len();

/// The rule file `ring_record` runs under (it limits, drops and resends SYNs).
pub const RING_RULES: usize = 12;

/// Rule file `i`'s name and text.
pub fn text(i: usize) -> (&'static str, String) {
    let (name, rules, classes) = FILES[i % COUNT];
    (name, format!("{classes}{rules}"))
}

/// The lab's mapping, beside which the rule files' `USING "ims.map"` is read.
fn maps_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../testbed/maps"))
}

/// Rule file `i`, compiled with its mapping (once per process).
pub fn compiled(i: usize) -> RuleSet {
    static SETS: OnceLock<Vec<RuleSet>> = OnceLock::new();
    let sets = SETS.get_or_init(|| {
        (0..COUNT)
            .map(|i| {
                let (name, src) = text(i);
                let file = format!("{name}.rlm");
                let mut set = rules::compile(&file, &src).unwrap_or_else(|d| panic!("{file}: {d}"));
                rules::load_mappings(&mut set, &file, &src, maps_dir()).unwrap_or_else(|d| panic!("{file}: {d}"));
                set
            })
            .collect()
    });
    sets[i % COUNT].clone()
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_rule_file_compiles_with_its_mapping() {
        for i in 0..super::COUNT {
            super::compiled(i);
        }
        assert_eq!(super::text(super::RING_RULES).0, "police");
    }
}
