//! Properties: no input makes the parser, checker or evaluator panic; what is printed back
//! parses to the same rules; NOT is the complement of a known condition.

use std::net::SocketAddr;
use std::time::Duration;

use proptest::prelude::*;
use rules::{compile, parse, ClassId, Facts, Node, Scope, Stat};

/// Pieces of the language and of what goes wrong with it.
const FRAGMENTS: &[&str] = &[
    "IF",
    "THEN",
    "CLASS",
    "AND",
    "OR",
    "NOT",
    "(",
    ")",
    "(",
    ")",
    "==",
    "=",
    "!=",
    "<",
    "<=",
    ">",
    ">=",
    "!",
    "+",
    ",",
    "#",
    "# c\n",
    "\n",
    "\n",
    " ",
    "\t",
    "\r\n",
    "IP.SRC",
    "IP.DST",
    "PORT.SRC",
    "PORT.DST",
    "RT",
    "RT.HIGH",
    "RT.LOW.P95",
    "RT.ALL",
    "RT.HIGH.MEAN",
    "RT.X.P0",
    "RT.",
    "RT..",
    "URL",
    "HOST",
    "CONTENT-TYPE",
    "HIGH",
    "LOW",
    "DEFAULT",
    "ALL",
    "10.4.*.*",
    "*.*.*.*",
    "*.*.*",
    "*",
    "10.4.0.0/16",
    "10.4.1.0/16",
    "2001:db8::/32",
    "::1",
    "::/0",
    "1.2.3.4.5",
    "300.1.1.1",
    "10.4.0.0/",
    "/",
    ":",
    "::",
    "*.*",
    "3.0s",
    "500ms",
    "2s",
    "1e30s",
    "1e-30s",
    "0s",
    "3",
    "-1s",
    ".5s",
    "1.s",
    "1e",
    "1e+",
    "99999999999999999999999999999999999999999s",
    "80",
    "65536",
    "0",
    "200/s",
    "600/min",
    "0/s",
    "/s",
    "DROP",
    "SYN",
    "LIMIT",
    "BURST",
    "20",
    "FAST",
    "SYN/ACK",
    "GAP",
    "DELAY",
    "FIRST",
    "HALT",
    "REMOVE",
    "REWRITE",
    "EMBEDS",
    "AFTER",
    "AT",
    "MATCHING",
    "USING",
    "PREDICTED",
    "FOR",
    "REJECT",
    "RETRY-AFTER",
    "429",
    "METHOD",
    "COOKIE.cart",
    "HEADER.X-Tier",
    "COOKIE.",
    "EXISTS",
    "\"/images/*\"",
    "\"text/html\"",
    "\"",
    "\"unterminated",
    "\"a\\\"b\"",
    "\"\\q\"",
    "é",
    "∀",
    "\u{0}",
    ";",
    "RT_HIGH",
    "TCP.DPORT",
];

fn soup() -> impl Strategy<Value = String> {
    prop::collection::vec((prop::sample::select(FRAGMENTS), prop::sample::select(&[" ", "", "\n", " "][..])), 0..60)
        .prop_map(|v| v.into_iter().map(|(a, b)| format!("{a}{b}")).collect())
}

/// Exercise a rule set that compiled: classify and evaluate at every node with odd facts.
fn exercise(src: &str) {
    let Ok(rs) = compile("p.rlm", src) else { return };
    let agg = |_: Scope, _: Stat| Some(Duration::from_secs(3));
    let mut holds = rs.new_holds();
    rs.update_holds(&mut holds, Duration::from_secs(5), &agg);
    for client in ["10.4.1.1:80", "[2001:db8::1]:1", "[::ffff:10.4.0.1]:0"] {
        let client: SocketAddr = client.parse().unwrap();
        let server: SocketAddr = "10.9.0.1:80".parse().unwrap();
        let class = rs.classify(client, server);
        assert!(class.index() < rs.class_count());
        let mut f = Facts::new(client, server, class, &agg);
        f.rt = Some(Duration::from_secs(2));
        f.url = Some("/images/é.gif");
        f.host = Some("[::1]:8080");
        f.content_type = Some("text/html;");
        f.holds = Some(&holds);
        let mut out = Vec::new();
        for node in Node::ALL {
            rs.eval(node, &f, &mut out);
        }
        for firing in out {
            assert!(rs.rule(firing.rule).is_some());
            assert!(rs.rule_position(firing.rule).is_some());
        }
    }
    // What compiled prints back to something that compiles to the same text.
    let printed = rs.ast().to_string();
    let again = compile("p.rlm", &printed).unwrap_or_else(|e| panic!("printed form of\n{src}\ndoes not compile:\n{printed}\n{e}"));
    assert_eq!(again.ast().to_string(), printed);
}

fn check_no_panic(src: &str) {
    match parse("p.rlm", src) {
        Ok(_) => exercise(src),
        Err(e) => {
            // Every diagnostic renders and names a real line.
            let lines = src.split('\n').count() as u32;
            for d in e.iter() {
                assert!(d.line >= 1 && d.line <= lines.max(1), "{d}");
                let _ = d.to_string();
            }
            let _ = compile("p.rlm", src);
        }
    }
}

// Valid rules, built from their grammar.

fn atom_anywhere() -> impl Strategy<Value = String> {
    prop_oneof![
        (
            prop::sample::select(&["SRC", "DST"][..]),
            prop::sample::select(&["==", "=", "!="][..]),
            prop::sample::select(&["10.4.*.*", "*.*.*.*", "*", "10.4.0.0/16", "10.4.0.1", "2001:db8::/32", "::1", "0.0.0.0/0", "*.4.*.9"][..])
        )
            .prop_map(|(e, op, p)| format!("IP.{e} {op} {p}")),
        (prop::sample::select(&["SRC", "DST"][..]), prop::sample::select(&["==", "!=", "<", "<=", ">", ">="][..]), 0u32..=65535)
            .prop_map(|(e, op, p)| format!("PORT.{e} {op} {p}")),
        (prop::sample::select(&["<", ">", ">=", "<=", "==", "!="][..]), 0u64..3_600_000).prop_map(|(op, ms)| format!("RT {op} {ms}ms")),
        (
            prop::sample::select(&["HIGH", "LOW", "ALL", "high", "DEFAULT"][..]),
            prop::sample::select(&["", ".MEAN", ".P95", ".P50", ".P1", ".P99"][..]),
            prop::sample::select(&[">", "<"][..]),
            0u64..3_600_000,
            prop::option::of(0u64..3_600_000)
        )
            .prop_map(|(c, s, op, us, hold)| {
                let hold = hold.map(|h| format!(" FOR {}.{:03}s", h / 1000, h % 1000)).unwrap_or_default();
                format!("RT.{c}{s} {op} {}e-3s{hold}", us)
            }),
        (prop::sample::select(&["==", "!="][..]), prop::sample::select(&["HIGH", "LOW", "DEFAULT"][..]))
            .prop_map(|(op, c)| format!("CLASS {op} {c}")),
    ]
}

fn atom_request() -> impl Strategy<Value = String> {
    prop_oneof![
        atom_anywhere(),
        (prop::sample::select(&["URL", "HOST"][..]), prop::sample::select(&["==", "!="][..]), "[a-z/*?.\"\\\\é]{0,12}")
            .prop_map(|(f, op, s)| format!("{f} {op} \"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))),
        (prop::sample::select(&["==", "!="][..]), prop::sample::select(&["GET", "POST", "\"P*\""][..]))
            .prop_map(|(op, m)| format!("METHOD {op} {m}")),
        (
            prop::sample::select(&["COOKIE", "HEADER"][..]),
            "[A-Za-z0-9_.-]{1,10}",
            prop::option::of((prop::sample::select(&["==", "!="][..]), "[a-z*?]{0,6}"))
        )
            .prop_map(|(f, n, v)| match v {
                None => format!("{f}.{n} EXISTS"),
                Some((op, g)) => format!("{f}.{n} {op} \"{g}\""),
            }),
    ]
}

fn cond(atom: BoxedStrategy<String>) -> impl Strategy<Value = String> {
    atom.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 2..4).prop_map(|v| v.join(" AND ")),
            prop::collection::vec(inner.clone(), 2..4).prop_map(|v| v.join(" OR ")),
            inner.clone().prop_map(|c| format!("NOT {c}")),
            inner.prop_map(|c| format!("({c})")),
        ]
    })
}

fn syn_action() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("DROP SYN".to_string()),
        (1u32..=1_000_000, prop::sample::select(&["s", "min"][..]), 1u32..=1_000_000).prop_map(|(r, u, b)| format!("LIMIT SYN {r}/{u} BURST {b}")),
        (prop::sample::select(&["SYN", "SYN/ACK", "SYN + SYN/ACK", "SYN/ACK + SYN"][..]), prop::option::of(1u64..=60_000))
            .prop_map(|(t, gap)| format!("FAST {t}{}", gap.map(|g| format!(" GAP {g}ms")).unwrap_or_default())),
        (1u64..=60_000).prop_map(|d| format!("DELAY FIRST SYN {d}ms")),
        Just("HALT FAST SYN".to_string()),
    ]
}

fn embeds_action() -> impl Strategy<Value = String> {
    let select = prop_oneof![
        Just(String::new()),
        (0u32..=10_000).prop_map(|n| format!(" AFTER {n}")),
        prop::collection::btree_set(1u32..=10_000, 1..5)
            .prop_map(|s| format!(" AT {}", s.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(", "))),
        "[a-z/*.]{0,10}".prop_map(|g| format!(" MATCHING \"{g}\"")),
        (prop::sample::select(&[">", ">="][..]), 0u64..3_600_000).prop_map(|(op, ms)| format!(" IF PREDICTED RT {op} {ms}ms")),
    ];
    let reject = (prop::option::of(400u16..=599), prop::option::of(1u64..=86_400)).prop_map(|(st, ra)| {
        format!("REJECT{}{}", st.map(|s| format!(" {s}")).unwrap_or_default(), ra.map(|r| format!(" RETRY-AFTER {r}s")).unwrap_or_default())
    });
    prop_oneof![
        (prop::bool::ANY, select, prop::option::of("[a-z./]{1,10}")).prop_map(|(remove, sel, map)| {
            if remove {
                format!("REMOVE EMBEDS{sel}")
            } else {
                format!("REWRITE EMBEDS{sel}{}", map.map(|m| format!(" USING \"{m}\"")).unwrap_or_default())
            }
        }),
        reject,
    ]
}

fn rule() -> impl Strategy<Value = String> {
    prop_oneof![
        (cond(atom_anywhere().boxed()), syn_action()).prop_map(|(c, a)| format!("IF {c} THEN\n  {a}")),
        (cond(atom_request().boxed()), embeds_action()).prop_map(|(c, a)| format!("IF {c} THEN {a}")),
    ]
}

fn file() -> impl Strategy<Value = String> {
    prop::collection::vec(rule(), 0..6)
        .prop_map(|rules| format!("CLASS HIGH IF IP.SRC == 10.4.*.*\nCLASS LOW IF IP.SRC != 10.4.*.* AND PORT.DST == 80\n{}\n", rules.join("\n")))
}

/// Conditions on what is always known, for the NOT property.
fn known_atom() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(&["10.4.*.*", "10.4.0.0/24", "2001:db8::/32", "*.*.*.*", "10.4.0.7"][..]).prop_map(|p| format!("IP.SRC == {p}")),
        (prop::sample::select(&["<", ">="][..]), 0u32..10).prop_map(|(op, p)| format!("PORT.SRC {op} {p}")),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        check_no_panic(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn random_text_never_panics(s in "\\PC{0,200}") {
        check_no_panic(&s);
    }

    #[test]
    fn token_soups_never_panic(s in soup()) {
        check_no_panic(&s);
    }

    #[test]
    fn mutated_valid_files_never_panic(f in file(), cut in any::<prop::sample::Index>(), junk in prop::sample::select(FRAGMENTS), drop in 0usize..8) {
        let mut at = cut.index(f.len() + 1);
        while !f.is_char_boundary(at) { at -= 1; }
        let mut end = (at + drop).min(f.len());
        while !f.is_char_boundary(end) { end -= 1; }
        let end = end.max(at);
        check_no_panic(&format!("{}{junk}{}", &f[..at], &f[end..]));
    }

    #[test]
    fn valid_files_compile_and_print_back(f in file()) {
        let rs = compile("p.rlm", &f).unwrap_or_else(|e| panic!("{f}\n{e}"));
        prop_assert_eq!(rs.class_count(), 3);
        exercise(&f);
    }

    #[test]
    fn not_is_the_complement(c in cond(known_atom().boxed()), last in 0u8..12, port in 0u16..12, v6 in any::<bool>()) {
        let rs = compile("p.rlm", &format!("IF {c} THEN DROP SYN\nIF NOT ({c}) THEN DROP SYN\n")).unwrap();
        let client: SocketAddr = if v6 { format!("[2001:db8::{last}]:{port}") } else { format!("10.4.0.{last}:{port}") }.parse().unwrap();
        let agg = rules::NoAggregates;
        let f = Facts::new(client, "10.9.0.1:80".parse().unwrap(), ClassId(0), &agg);
        let mut out = Vec::new();
        rs.eval_syn(&f, &mut out);
        prop_assert_eq!(out.len(), 1, "exactly one of c and NOT c fires for {}", c);
    }
}
