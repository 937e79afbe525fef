//! Broken rule files: the right line, column and message; overflows are errors, not panics.

use rules::{compile, Diagnostic};

fn first_error(src: &str) -> Diagnostic {
    match compile("t.rlm", src) {
        Ok(_) => panic!("accepted:\n{src}"),
        Err(e) => e.first().expect("an error").clone(),
    }
}

/// (file, line, column, part of the message or help)
const CASES: &[(&str, u32, u32, &str)] = &[
    ("IF RT > 1e30s THEN DROP SYN", 1, 9, "longer than a response-time threshold may be (3600s)"),
    ("IF RT > 3 THEN DROP SYN", 1, 9, "has no unit"),
    ("IF RT > 3min THEN DROP SYN", 1, 10, "unknown unit 'min'"),
    ("IF RT > -1s THEN DROP SYN", 1, 9, "negative"),
    ("IF RT > THEN DROP SYN", 1, 9, "'THEN' is not a duration"),
    ("IF IP.SRC > 10.4.*.* THEN DROP SYN", 1, 11, "compares only for equality"),
    ("IF IP.SRC == 10.400.*.* THEN DROP SYN", 1, 17, "400 is not an octet"),
    ("IF IP.SRC == 10.4.1.0/16 THEN DROP SYN", 1, 14, "did you mean 10.4.0.0/16?"),
    ("IF IP.SRC == 10.4.0.0/33 THEN DROP SYN", 1, 23, "not a prefix length"),
    ("IF IP.SRC == 2001:db8::/200 THEN DROP SYN", 1, 25, "not a prefix length"),
    ("IF IP.SRC == 2001:db8::1/32 THEN DROP SYN", 1, 14, "did you mean 2001:db8::/32?"),
    ("IF IP.SRC == 2001:zz8::/32 THEN DROP SYN", 1, 14, "not an IPv6 address"),
    ("IF IP.SRC == 10.4.* THEN DROP SYN", 1, 14, "did you mean 10.4.*.*?"),
    ("IF IP.SRC == \"10.4.*.*\" THEN DROP SYN", 1, 14, "write it without quotes"),
    ("IF SITE == shop.example.com THEN DROP SYN", 1, 4, "a site with an address of its own is IP.DST"),
    ("CLASS S IF SITE == shop.example.com AND URL == \"/a\"", 1, 41, "a class cannot test URL"),
    ("IF IP.SRC == 10.4.*.* THEN EXPLODE", 1, 28, "expected an action, found 'EXPLODE'"),
    ("IF IP.SRC == 10.4.*.*", 1, 22, "found the end of the file"),
    ("IF IP.SRC == 10.4.*.*\n  DROP SYN", 1, 22, "expected AND, OR or THEN after the condition, found the end of the line"),
    ("IF IP.SRC == 10.4.*.* THEN DROP SYN ;", 1, 37, "unexpected character ';'"),
    ("IF RT > 2s THEN\n", 1, 16, "expected an action, found the end of the file"),
    ("IF RT > 2s THEN\nIF RT > 3s THEN DROP SYN", 1, 16, "expected an action, found the end of the line"),
    ("\n\nIF (RT > 2s THEN DROP SYN", 3, 13, "expected ')' to close the '(' at 3:4, found 'THEN'"),
    ("IF RT > 2s AND THEN DROP SYN", 1, 16, "expected a test"),
    ("IF NOT THEN DROP SYN", 1, 8, "expected a test"),
    ("IF RT > 2s OR ) THEN DROP SYN", 1, 15, "expected a test"),
    ("THEN DROP SYN", 1, 1, "expected a statement, found 'THEN'"),
    ("IF RT.HIGH.P100 > 2s THEN DROP SYN", 1, 12, "'P100' is not a percentile"),
    ("IF RT.HIGH.P0 > 2s THEN DROP SYN", 1, 12, "'P0' is not a percentile"),
    ("IF RT.HIGH.AVG > 2s THEN DROP SYN", 1, 12, "unknown statistic 'AVG'"),
    ("IF RT.9X > 2s THEN DROP SYN", 1, 4, "'RT.9X' is not a class response time"),
    ("IF RT_HIGH > 3s THEN DROP SYN", 1, 4, "did you mean RT.HIGH?"),
    ("IF TCP.DPORT == 80 THEN DROP SYN", 1, 4, "did you mean PORT.DST?"),
    ("IF PORT.DST == 70000 THEN DROP SYN", 1, 16, "too large for a port"),
    ("IF PORT.DST == http THEN DROP SYN", 1, 16, "not a whole number"),
    ("IF RT > 2s FOR 3s THEN DROP SYN", 1, 12, "FOR holds a class's RT.<class> test"),
    ("CLASS H IF IP.SRC == 1.2.3.4\nIF RT.H > 2s FOR 2h THEN DROP SYN", 2, 19, "unknown unit 'h'"),
    ("CLASS 9X IF IP.SRC == 1.2.3.4", 1, 7, "'9X' is not a class name"),
    ("CLASS HIGH IP.SRC == 1.2.3.4", 1, 12, "expected IF after the class name"),
    ("CLASS HIGH IF IP.SRC == 1.2.3.4 THEN DROP SYN", 1, 33, "a class declaration has no THEN"),
    ("CLASS HIGH IF IP.SRC == 1.2.3.4\nIF RT > 1s AND\nCLASS = HIGH THEN DROP SYN\nCLASS X IF", 4, 11, "expected a test, found the end of the file"),
    ("IF RT > 2s THEN FAST SYN GAP 0ms", 1, 30, "shorter than a retransmission GAP may be (1ms)"),
    ("IF RT > 2s THEN FAST SYN GAP 2min", 1, 31, "unknown unit"),
    ("IF RT > 2s THEN FAST SYN GAP 61s", 1, 30, "longer than a retransmission GAP may be (60s)"),
    ("IF RT > 2s THEN FAST SYNACK GAP 1s", 1, 22, "write SYN/ACK"),
    ("IF RT > 2s THEN FAST SYN + SYN GAP 1s", 1, 28, "SYN is already in this FAST"),
    ("IF RT > 2s THEN FAST GAP 1s", 1, 22, "expected SYN or SYN/ACK after FAST, found 'GAP'"),
    ("IF RT > 2s THEN LIMIT SYN 200 BURST 20", 1, 27, "'200' is not a rate"),
    ("IF RT > 2s THEN LIMIT SYN 200/h BURST 20", 1, 31, "unknown rate unit 'h'"),
    ("IF RT > 2s THEN LIMIT SYN 0/s BURST 20", 1, 27, "too small for a rate"),
    ("IF RT > 2s THEN LIMIT SYN 200/s", 1, 32, "BURST"),
    ("IF COOKIE.cart EXISTS THEN DROP SYN", 1, 4, "COOKIE.<name> cannot be decided at the SYN node"),
    ("IF METHOD == POST THEN FAST SYN/ACK", 1, 4, "METHOD cannot be decided at the SYN/ACK node"),
    ("IF HEADER.X-Tier == \"free\" THEN REMOVE EMBEDS\nIF HEADER.X == \"a\" THEN DROP SYN", 2, 4, "METHOD, COOKIE and HEADER are the request's"),
    ("CLASS GOLD IF COOKIE.tier == \"gold\"", 1, 15, "a class cannot test COOKIE.<name>"),
    ("IF COOKIE. EXISTS THEN REJECT", 1, 11, "COOKIE needs a name after the dot"),
    ("IF COOKIE.a/b EXISTS THEN REJECT", 1, 12, "'/' cannot be in a cookie's name"),
    ("IF COOKIE.cart > \"1\" THEN REJECT", 1, 16, "compares only for equality"),
    ("IF COOKIE.cart THEN REJECT", 1, 16, "EXISTS, or ==, = or != and a \"string\", after COOKIE.<name>"),
    ("IF HEADER.X-Tier == free THEN REJECT", 1, 21, "'free' needs quotes"),
    ("IF URL == \"/search*\" THEN REJECT 200", 1, 34, "too small for a REJECT status"),
    ("IF URL == \"/search*\" THEN REJECT 600", 1, 34, "too large for a REJECT status"),
    ("IF URL == \"/search*\" THEN REJECT RETRY-AFTER 0s", 1, 46, "shorter than a RETRY-AFTER may be (1s)"),
    ("IF URL == \"/search*\" THEN REJECT RETRY-AFTER 2d", 1, 47, "unknown unit"),
    ("IF URL == \"/a\" THEN REJECT REJECT", 1, 28, "REJECT is already an action of this rule"),
    ("IF NOT COOKIE.cart EXISTS THEN ABORT", 1, 37, "expected IDLE after ABORT"),
    ("IF NOT COOKIE.cart EXISTS THEN ABORT IDLE AFTER", 1, 48, "a duration"),
    ("IF NOT COOKIE.cart EXISTS THEN ABORT IDLE AFTER 5ms", 1, 49, "shorter than an ABORT IDLE AFTER may be (10ms)"),
    ("IF NOT COOKIE.cart EXISTS THEN ABORT IDLE DROP SYN", 1, 8, "COOKIE.<name> cannot be decided at the SYN node"),
    ("IF CONTENT-TYPE == \"text/html\" THEN ABORT IDLE", 1, 4, "CONTENT-TYPE cannot be decided at the request node"),
    ("IF RT > 1s THEN REJECT\nIF URL == \"/a\" THEN REJECT DROP SYN", 2, 4, "URL cannot be decided at the SYN node, where DROP SYN (2:28) acts"),
    ("IF RT > 2s THEN LIMIT SYN 200/s BURST 0", 1, 39, "too small for a BURST"),
    ("IF RT > 2s THEN DELAY SYN 3s", 1, 23, "expected FIRST SYN after DELAY"),
    ("IF RT > 2s THEN DELAY FIRST SYN 0s", 1, 33, "shorter than a DELAY may be (1ms)"),
    ("IF RT > 2s THEN HALT SYN", 1, 22, "expected FAST SYN after HALT"),
    ("IF RT > 2s THEN REMOVE EMBEDS AFTER 2 AT 3", 1, 39, "an action takes one selector"),
    ("IF RT > 2s THEN REMOVE EMBEDS AT 0", 1, 34, "too small for a position"),
    ("IF RT > 2s THEN REMOVE EMBEDS AT 2, 2", 1, 37, "position 2 is already listed"),
    ("IF RT > 2s THEN REMOVE EMBEDS MATCHING *.gif", 1, 40, "needs quotes"),
    ("IF RT > 2s THEN REMOVE EMBEDS IF PREDICTED RT < 3s", 1, 47, "compares only with > or >="),
    ("IF RT > 2s THEN REMOVE EMBEDS USING \"m\"", 1, 31, "expected another action or the next rule, found 'USING'"),
    ("IF RT > 2s THEN REWRITE EMBEDS USING \"\"", 1, 38, "the mapping file name is empty"),
    ("IF RT > 2s THEN REWRITE EMBEDS USING \"a\" USING \"b\"", 1, 42, "already has USING"),
    ("IF URL == /x THEN REWRITE EMBEDS", 1, 11, "'/x' needs quotes"),
    ("IF URL == \"/a THEN REWRITE EMBEDS", 1, 11, "no closing quote"),
    ("IF URL == \"/a\\q\" THEN REWRITE EMBEDS", 1, 14, "unknown escape"),
    ("IF URL ! \"/a\" THEN REWRITE EMBEDS", 1, 8, "'!' on its own is not an operator"),
    ("IF RT > 2s THEN DROP SYN\nDROP SYN", 2, 1, "DROP SYN is already an action of this rule, at 1:17"),
    ("IF RT > 2s THEN FAST SYN + SYN/ACK FAST SYN/ACK", 1, 36, "FAST SYN/ACK is already an action of this rule"),
    ("IF RT > 2s THEN DROP SYN AND RT > 3s", 1, 26, "expected another action or the next rule, found 'AND'"),
    // Columns count characters, not bytes.
    ("IF URL == \"/é\" AND RT > 3 THEN REWRITE EMBEDS", 1, 25, "has no unit"),
    // Type errors.
    ("IF RT.HIGH > 3s THEN DROP SYN", 1, 7, "no class is named HIGH"),
    ("CLASS HIGH IF IP.SRC == 10.4.*.*\nIF RT.HGIH > 3s THEN DROP SYN", 2, 7, "did you mean HIGH?"),
    ("CLASS HIGH IF IP.SRC == 10.4.*.*\nIF CLASS == LOW THEN DROP SYN", 2, 13, "no class is named LOW"),
    ("CLASS HIGH IF IP.SRC == 10.4.*.*\nCLASS high IF IP.SRC == 10.5.*.*", 2, 7, "class high is already declared at 1:7"),
    ("CLASS ALL IF IP.SRC == 10.4.*.*", 1, 7, "a class cannot be called ALL"),
    ("CLASS DEFAULT IF IP.SRC == 10.4.*.*", 1, 7, "a class cannot be called DEFAULT"),
    ("CLASS THEN IF IP.SRC == 10.4.*.*", 1, 7, "a class cannot be called THEN"),
    ("CLASS ABORT IF IP.SRC == 10.4.*.*", 1, 7, "a class cannot be called ABORT"),
    ("CLASS IDLE IF IP.SRC == 10.4.*.*", 1, 7, "a class cannot be called IDLE"),
    ("CLASS MEAN IF IP.SRC == 10.4.*.*", 1, 7, "a class cannot be called MEAN"),
    ("CLASS SLOW IF RT > 3s", 1, 15, "a class cannot test RT"),
    ("CLASS WEB IF URL == \"/x\"", 1, 14, "a class cannot test URL"),
    ("CLASS A IF IP.SRC == 1.2.3.4\nCLASS B IF CLASS == A", 2, 12, "a class cannot test CLASS"),
    ("CLASS EPH IF PORT.SRC > 30000", 1, 14, "a class cannot test PORT.SRC"),
    ("IF URL == \"/x/*\" THEN DROP SYN", 1, 4, "URL cannot be decided at the SYN node, where DROP SYN (1:23) acts"),
    ("IF HOST == \"a\" THEN FAST SYN/ACK", 1, 4, "HOST cannot be decided at the SYN/ACK node"),
    ("IF RT > 1s AND NOT (URL == \"/a\") THEN LIMIT SYN 10/s BURST 1", 1, 21, "URL cannot be decided at the SYN node"),
    ("IF CONTENT-TYPE == \"text/html\" THEN REWRITE EMBEDS", 1, 4, "CONTENT-TYPE cannot be decided at the request node"),
    ("IF URL == \"/\" THEN REMOVE EMBEDS DROP SYN", 1, 4, "where DROP SYN (1:34) acts"),
    // Groups, targets and what to shed (issue 26).
    ("GROUP db IF IP.SRC == 10.4.*.*", 1, 13, "a group cannot test IP.SRC"),
    ("GROUP db IF URL == \"/s*\" AND RT > 1s", 1, 30, "a group cannot test RT"),
    ("IF GROUP == db THEN REJECT", 1, 13, "no group is named db"),
    ("GROUP db IF URL == \"/s*\"\nIF GROUP == bd THEN REJECT", 2, 13, "did you mean db?"),
    ("GROUP db IF URL == \"/s*\"\nIF GROUP == db THEN DROP SYN", 2, 4, "a request's GROUP is known at the request and response nodes"),
    ("GROUP db IF URL == \"/a\"\nGROUP DB IF URL == \"/b\"", 2, 7, "group DB is already declared at 1:7"),
    ("GROUP shed IF URL == \"/a\"", 1, 7, "a group cannot be called shed"),
    ("GROUP 1db IF URL == \"/a\"", 1, 7, "'1db' is not a group name"),
    ("GROUP db IF URL == \"/a\" THEN REJECT", 1, 25, "a group declaration has no THEN"),
    ("CLASS HIGH IF IP.SRC == 10.4.*.*\nSLA HIGH RT.P95 > 2s\nSHED DEFAULT", 2, 17, "expected < after RT.P95"),
    ("CLASS HIGH IF IP.SRC == 10.4.*.*\nSLA HIGH RT.P100 < 2s\nSHED DEFAULT", 2, 10, "'RT.P100' is not a statistic"),
    ("CLASS HIGH IF IP.SRC == 10.4.*.*\nSLA HIGH RT.P95 < 2\nSHED DEFAULT", 2, 19, "has no unit"),
    ("CLASS HIGH IF IP.SRC == 10.4.*.*\nSLA HIGH RT.P95 < 2s", 2, 1, "SLA HIGH needs classes the controller may shed"),
    ("CLASS HIGH IF IP.SRC == 10.4.*.*\nSLA HIGH RT.P95 < 2s\nSHED HIGH", 2, 5, "HIGH is shed (SHED, 3:6)"),
    ("CLASS HIGH IF IP.SRC == 10.4.*.*\nSLA HGIH RT < 2s\nSHED DEFAULT", 2, 5, "did you mean HIGH?"),
    ("CLASS HIGH IF IP.SRC == 10.4.*.*\nSHED DEFAULT\nSHED HIGH", 3, 1, "SHED is already given at 2:1"),
    ("CLASS LOW IF IP.SRC == 10.4.*.*\nSHED LOW, LOW", 2, 11, "LOW is already in SHED, at 2:6"),
    ("CLASS LOW IF IP.SRC == 10.4.*.*\nSHED LOW,", 2, 10, "expected a class name"),
    ("CLASS HIGH IF IP.SRC == 10.4.*.*\nSLA HIGH RT < 2s\nSLA HIGH RT.P95 < 3s\nSHED DEFAULT", 3, 1, "already has one, at 2:1"),
    ("SLA GROUP db RT.P95 < 500ms", 1, 11, "no group is named db"),
    ("IF RT > 2s THEN LIMIT REQUESTS 50/s", 1, 36, "BURST"),
    ("IF RT > 2s THEN LIMIT REQUESTS 50/s BURST 5 LIMIT REQUESTS 10/s BURST 1", 1, 45, "LIMIT REQUESTS is already an action"),
    ("IF RT > 2s THEN LIMIT SYNS 5/s BURST 1", 1, 23, "expected SYN or REQUESTS after LIMIT"),
    ("IF URL == \"/a\" THEN LIMIT REQUESTS 5/s BURST 1 DROP SYN", 1, 4, "URL cannot be decided at the SYN node"),
];

#[test]
fn broken_files_point_at_the_fault() {
    let mut failures = Vec::new();
    for &(src, line, col, what) in CASES {
        let d = first_error(src);
        let text = format!("{} {}", d.message, d.help.clone().unwrap_or_default());
        if (d.line, d.col) != (line, col) || !text.contains(what) {
            failures.push(format!("{src:?}: want {line}:{col} {what:?}\n{d}\n"));
        }
    }
    assert!(failures.is_empty(), "{} of {} cases wrong:\n{}", failures.len(), CASES.len(), failures.join("\n"));
}

#[test]
fn every_error_says_what_was_expected() {
    for &(src, ..) in CASES {
        let d = first_error(src);
        assert!(d.expected.is_some() || d.message.contains("expected"), "{d}");
    }
}

#[test]
fn rendering() {
    let d = first_error("IF IP.SRC == 10.4.*.* THEN\n  DROP SYN\nIF RT > 3 THEN DROP SYN\n");
    assert_eq!(
        d.to_string(),
        "t.rlm:3:9: error: the duration '3' has no unit\n 3 | IF RT > 3 THEN DROP SYN\n   |         ^ expected a response-time threshold such as 500ms or 3.0s\n   = help: write 3s for seconds or 3ms for milliseconds"
    );
    // Tabs are kept in the caret line, so the caret stands under the fault at any tab width.
    let d = first_error("\tIF\tRT > 3\tTHEN DROP SYN");
    assert_eq!(d.col, 10);
    assert!(d.to_string().contains("\n   | \t  \t     ^ expected"), "{d}");
    // The caret underlines the whole word at fault.
    let d = first_error("IF IP.SRC == 10.4.*.* THEN EXPLODE");
    assert!(d.to_string().contains("\n   |                            ^^^^^^^ expected an action"), "{d}");
    // A missing token is shown just past the line's last one.
    let d = first_error("IF IP.SRC == 10.4.*.*   # comment\n  DROP SYN");
    assert_eq!((d.line, d.col), (1, 22));
    // CRLF line ends are not shown.
    let d = first_error("IF RT > 1s THEN DROP SYN\r\nIF RT > 3 THEN DROP SYN\r\n");
    assert_eq!(d.source_line, "IF RT > 3 THEN DROP SYN");
}

#[test]
fn several_errors_at_once() {
    let src = "IF RT > 3 THEN DROP SYN\nIF RT > 2s THEN DROP SYN\nIF IP.SRC == 10.4.* THEN\n  DROP SYN\n# fine\nIF RT > 2s THEN EXPLODE\n  NOW\nIF RT > 2s THEN DROP SYN\n";
    let e = compile("t.rlm", src).unwrap_err();
    let at: Vec<(u32, u32)> = e.iter().map(|d| (d.line, d.col)).collect();
    assert_eq!(at, [(1, 9), (3, 14), (6, 17)], "{e}");
    assert!(e.to_string().ends_with("\n\n3 errors"), "{e}");

    // Type errors too, all of them.
    let src = "IF RT.A > 1s THEN DROP SYN\nIF URL == \"/\" THEN DROP SYN\nIF CLASS == B THEN DROP SYN\n";
    let e = compile("t.rlm", src).unwrap_err();
    assert_eq!(e.iter().map(|d| d.line).collect::<Vec<_>>(), [1, 2, 3], "{e}");
}

#[test]
fn the_number_of_errors_is_bounded() {
    let src = "IF RT > 3 THEN DROP SYN\n".repeat(10_000);
    let e = compile("t.rlm", &src).unwrap_err();
    assert_eq!(e.len(), rules::MAX_ERRORS);
}

#[test]
fn overflows_are_errors() {
    let cases = [
        "IF RT > 1e30s THEN DROP SYN",
        "IF RT > 1e308s THEN DROP SYN",
        "IF RT > 1e999999999999999999999s THEN DROP SYN",
        "IF RT > 340282366920938463463374607431768211456ms THEN DROP SYN",
        "IF RT > 99999999999999999999999999999999999999999999999999999999999999999999999999999999s THEN DROP SYN",
        "IF RT > 1.00000000000000000000000000000000000000000000000000000000000000000000000000001s THEN DROP SYN",
        "IF RT > 1e-30s THEN DROP SYN",
        "IF RT > 18446744073.709551616s THEN DROP SYN",
        "IF RT > 2s THEN FAST SYN GAP 1e-3000000ms",
        "IF RT > 2s THEN FAST SYN GAP 4294967296ms",
        "IF RT > 2s THEN LIMIT SYN 18446744073709551616/s BURST 1",
        "IF RT > 2s THEN LIMIT SYN 10/s BURST 99999999999999999999999999",
        "IF RT > 2s THEN LIMIT SYN 4294967296/s BURST 1",
        "IF RT > 2s THEN REMOVE EMBEDS AT 4294967296",
        "IF RT > 2s THEN REMOVE EMBEDS AFTER 99999999999999999999",
        "IF RT > 2s THEN DELAY FIRST SYN 1e30s",
        "IF PORT.DST == 99999999999999999999999999999 THEN DROP SYN",
        "CLASS H IF IP.SRC == 1.2.3.4\nIF RT.H.P99999999999999999999 > 1s THEN DROP SYN",
        "CLASS H IF IP.SRC == 1.2.3.4\nIF RT.H > 1s FOR 1e30s THEN DROP SYN",
        "IF IP.SRC == 10.4.0.0/99999999999999999999 THEN DROP SYN",
        "IF IP.SRC == 99999999999.4.*.* THEN DROP SYN",
    ];
    for src in cases {
        let r = std::panic::catch_unwind(|| compile("t.rlm", src));
        match r {
            Ok(Err(_)) => {}
            Ok(Ok(_)) => panic!("accepted {src}"),
            Err(_) => panic!("panicked on {src}"),
        }
    }
}

#[test]
fn deep_nesting_is_an_error() {
    let deep = format!("IF {}RT > 1s{} THEN DROP SYN", "(".repeat(100_000), ")".repeat(100_000));
    let d = first_error(&deep);
    assert!(d.message.contains("nest deeper than 64"), "{d}");
    let nots = format!("IF {}RT > 1s THEN DROP SYN", "NOT ".repeat(100_000));
    assert!(first_error(&nots).message.contains("nest deeper than 64"));
    // 64 levels are fine; long flat chains too.
    compile("t.rlm", &format!("IF {}RT > 1s{} THEN DROP SYN", "(".repeat(64), ")".repeat(64))).unwrap();
    let chain = vec!["RT > 1s"; 50_000].join(" AND ");
    compile("t.rlm", &format!("IF {chain} THEN DROP SYN")).unwrap();
}

#[test]
fn oversized_files_are_refused() {
    let big = format!("{}\n", "#".repeat(rules::MAX_FILE_SIZE + 1));
    let d = first_error(&big);
    assert!(d.message.contains("at most"), "{d}");
}

#[test]
fn what_is_fine() {
    for src in [
        "",
        "# nothing\n\n   \n",
        "IF RT > 2s THEN DROP SYN # after\n",
        "IF RT>2s THEN DROP SYN",
        "IF (RT > 2s) THEN FAST SYN",
        "IF IP.SRC == * THEN FAST SYN/ACK",
        "IF IP.SRC == 0.0.0.0/0 OR IP.SRC == ::/0 THEN FAST SYN/ACK",
        "IF IP.DST == 10.9.0.1 AND PORT.DST == 80 THEN FAST SYN/ACK + SYN GAP 10ms",
        "IF RT.ALL.P95 > 5s FOR 10s THEN DROP SYN",
        "IF RT >= 0s THEN REMOVE EMBEDS AFTER 0",
        "IF URL == \"/search?q=*\" THEN REWRITE EMBEDS USING \"small.map\" MATCHING \"*.gif\"",
        "IF HOST != \"*.example.com\" AND CONTENT-TYPE = \"text/*\" THEN REMOVE EMBEDS MATCHING \"/images/large/*\"",
        "IF RT > 1s THEN REMOVE EMBEDS AT 2, 5, 7 REWRITE EMBEDS IF PREDICTED RT >= 2.5s",
        "IF RT > 1s THEN REMOVE EMBEDS\n  IF PREDICTED RT > 3s\nIF RT > 2s THEN DROP SYN",
        "IF IP.SRC == 10.4.*.* THEN LIMIT SYN 600/min BURST 5",
        "IF URL == \"quote\\\"d\\\\\" THEN REWRITE EMBEDS",
        "IF METHOD == POST AND COOKIE.cart EXISTS THEN REJECT 429 RETRY-AFTER 5s",
        "IF NOT COOKIE.tier == \"gold\" AND HEADER.User-Agent == \"*bot*\" THEN REJECT",
        "IF method != \"G*\" OR header.x-tier != \"paid\" THEN reject retry-after 2.5s REWRITE EMBEDS",
        "CLASS HIGH IF IP.SRC == 10.4.*.*\nIF RT > 1s AND\nCLASS == HIGH OR\nCLASS != DEFAULT THEN\nDROP SYN\nCLASS LOW IF IP.SRC == 10.5.*.*",
    ] {
        compile("t.rlm", src).unwrap_or_else(|e| panic!("{src:?}\n{e}"));
    }
}

#[test]
fn rlm_check_binary() {
    let dir = std::env::temp_dir().join(format!("rules-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.rlm");
    let bad = dir.join("bad.rlm");
    std::fs::write(&good, "CLASS HIGH IF IP.SRC == 10.4.*.*\nIF IP.SRC != 10.4.*.* AND RT.HIGH > 3.0s THEN DROP SYN\n").unwrap();
    std::fs::write(&bad, "IF RT > 1e30s THEN DROP SYN\n").unwrap();
    let run = |args: &[&std::path::Path]| std::process::Command::new(env!("CARGO_BIN_EXE_rlm-check")).args(args).output().unwrap();
    let o = run(&[&good]);
    assert_eq!(o.status.code(), Some(0));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("good.rlm: ok: 1 rule, classes HIGH, DEFAULT"), "{out}");
    let o = run(&[&good, &bad]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("bad.rlm:1:9: error: '1e30s' is longer"), "{err}");
    let o = run(&[&dir.join("missing.rlm")]);
    assert_eq!(o.status.code(), Some(1));
    let o = run(&[&dir]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("is a directory"));
    std::fs::write(&bad, b"IF RT > 1s THEN\n DROP SYN \xff\n").unwrap();
    let o = run(&[&bad]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("bad.rlm:2: error: the file is not UTF-8"), "{o:?}");
    assert_eq!(run(&[]).status.code(), Some(2));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// As many classes and groups as the checker keeps, and one more: the one past the bound is the
/// error, at its name.
#[test]
fn one_class_or_group_past_the_bound_is_an_error_at_its_name() {
    for (kw, max, plural, cond) in
        [("CLASS", rules::MAX_CLASSES, "classes", "IP.SRC == 10.4.*.*"), ("GROUP", rules::MAX_GROUPS, "groups", "URL == \"/a\"")]
    {
        let decl = |i: usize| format!("{kw} N{i} IF {cond}\n");
        let at_bound: String = (0..max).map(decl).collect();
        assert!(compile("t.rlm", &at_bound).is_ok(), "{max} {plural} are allowed");
        let past = format!("{at_bound}{}", decl(max));
        let d = first_error(&past);
        assert_eq!((d.line as usize, d.col), (max + 1, kw.len() as u32 + 2), "{d}");
        assert_eq!(d.message, format!("more than {max} {plural}"));
    }
}
