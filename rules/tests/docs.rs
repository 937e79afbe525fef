//! docs/rules.md stays true: every `rules` block compiles, and every diagnostic it shows is
//! what `compile` says for that line.

const PAPER_CLASSES: &str = "CLASS HIGH IF IP.SRC == 10.4.*.*\nCLASS LOW IF IP.SRC != 10.4.*.*\n";

fn doc() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/rules.md");
    std::fs::read_to_string(path).expect("docs/rules.md")
}

/// (info string, body) of each fenced block.
fn blocks(md: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut cur: Option<(String, String)> = None;
    for line in md.lines() {
        match (&mut cur, line.strip_prefix("```")) {
            (None, Some(info)) => cur = Some((info.trim().to_string(), String::new())),
            (Some(_), Some("")) => out.push(cur.take().expect("open block")),
            (Some((_, body)), _) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, None) => {}
        }
    }
    out
}

#[test]
fn rules_blocks_compile() {
    let md = doc();
    let mut n = 0;
    for (info, body) in blocks(&md) {
        if info != "rules" {
            continue;
        }
        n += 1;
        let declares = body.lines().any(|l| l.trim_start().to_ascii_uppercase().starts_with("CLASS "));
        let src = if declares { body.clone() } else { format!("{PAPER_CLASSES}{body}") };
        rules::compile("rules.md", &src).unwrap_or_else(|e| panic!("docs/rules.md block does not compile:\n{body}\n{e}"));
    }
    assert!(n >= 10, "only {n} rules blocks");
}

#[test]
fn diagnostics_shown_are_real() {
    let md = doc();
    let mut n = 0;
    for (info, body) in blocks(&md) {
        if info != "text" || !body.starts_with("rules.rlm:") {
            continue;
        }
        for para in body.trim_end().split("\n\n") {
            let header = para.lines().next().unwrap();
            if !header.contains(": error: ") {
                continue;
            }
            let line: usize = header.split(':').nth(1).unwrap().parse().unwrap();
            let shown = para.lines().nth(1).unwrap();
            let text = shown.split_once(" | ").unwrap().1;
            // The line where it was, and a next line (so a rule cut short ends at a line end).
            let src = format!("{}{text}\n  DROP SYN\n", "#\n".repeat(line - 1));
            let e = rules::compile("rules.rlm", &src).expect_err(para);
            assert_eq!(e.first().unwrap().to_string(), para);
            n += 1;
        }
    }
    assert!(n >= 4, "only {n} diagnostics checked");
}

#[test]
fn the_summary_shown_is_real() {
    let md = doc();
    let all = blocks(&md);
    let first = &all.iter().find(|(i, _)| i == "rules").unwrap().1;
    let shown = &all.iter().find(|(i, b)| i == "text" && b.starts_with("rules.rlm: ok:")).unwrap().1;
    let set = rules::compile("rules.rlm", first).unwrap();
    assert_eq!(rules::summary(&set), shown.trim_end());
}
