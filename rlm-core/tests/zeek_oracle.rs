//! The Zeek oracle: every real capture in tests/data/zeek-http (vendored) is replayed through the
//! engine and its transactions are compared with the http.log Zeek's own test suite expects.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use rlm_core::capture::replay;
use rlm_core::{Config, Engine, Event, TransactionRecord};

fn testdata() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/zeek-http");
    assert!(p.join("MANIFEST.tsv").exists(), "vendored Zeek test data missing at {}", p.display());
    p
}

/// Baseline rows as column → value maps.
fn read_baseline(path: &Path) -> Vec<BTreeMap<String, String>> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut header: Option<Vec<String>> = None;
    let mut rows = Vec::new();
    for line in text.lines() {
        if let Some(f) = line.strip_prefix("#fields\t") {
            header = Some(f.split('\t').map(String::from).collect());
            continue;
        }
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        match &header {
            None => header = Some(line.split('\t').map(String::from).collect()),
            Some(h) => rows.push(h.iter().cloned().zip(line.split('\t').map(String::from)).collect()),
        }
    }
    rows
}

fn run_trace(path: PathBuf) -> Result<Vec<TransactionRecord>, String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut engine = Engine::new(Config::default());
        let mut out = Vec::new();
        let r = replay(&path, &mut engine, &mut |ev| {
            if let Event::Transaction(t) = ev {
                out.push(t);
            }
            Ok(())
        }, None);
        let _ = tx.send(r.map(|_| out).map_err(|e| e.to_string()));
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(r) => r,
        Err(_) => Err("hung or crashed (no answer in 30 s)".into()),
    }
}

fn zeek_str(v: Option<&String>) -> Option<String> {
    match v.map(String::as_str) {
        None | Some("-") => None,
        Some("(empty)") => Some(String::new()),
        Some(s) => Some(s.to_string()),
    }
}

/// Compare one baseline row with one of our transactions; returns the fields that differ.
fn differences(row: &BTreeMap<String, String>, t: &TransactionRecord) -> Vec<String> {
    let mut d = Vec::new();
    let mut cmp = |field: &str, ours: Option<String>| {
        if !row.contains_key(field) {
            return;
        }
        let theirs = zeek_str(row.get(field));
        let norm = |v: Option<String>| if field == "status_code" && v.as_deref() == Some("0") { None } else { v };
        if norm(theirs.clone()) != norm(ours.clone()) {
            d.push(format!("{field}: zeek {:?}, rlm {:?}", theirs, ours));
        }
    };
    cmp("method", t.method.clone());
    cmp("host", t.host.clone());
    cmp("uri", t.uri.clone());
    cmp("referrer", t.referrer.clone());
    cmp("status_code", t.status.map(|s| s.to_string()));
    cmp("request_body_len", Some(t.request_body_len.to_string()));
    cmp("response_body_len", Some(t.response_body_len.to_string()));
    d
}

#[test]
fn zeek_http_logs_agree_and_every_trace_survives() {
    let dir = testdata();
    let manifest = std::fs::read_to_string(dir.join("MANIFEST.tsv")).unwrap();
    let (mut total, mut agree) = (0usize, 0usize);
    let mut report = Vec::new();
    let mut failures = Vec::new();
    let mut traces = 0;
    for line in manifest.lines().filter(|l| !l.trim().is_empty()) {
        let cols: Vec<&str> = line.split('\t').collect();
        let (trace, baseline) = (cols[0], cols[1]);
        traces += 1;
        let ours = match run_trace(dir.join("traces").join(trace)) {
            Ok(o) => o,
            Err(e) => {
                failures.push(format!("{trace}: {e}"));
                continue;
            }
        };
        let rows = read_baseline(&dir.join("baselines").join(baseline));
        let mut used = vec![false; ours.len()];
        for row in rows.iter().filter(|r| zeek_str(r.get("method")).is_some()) {
            total += 1;
            let (m, u) = (zeek_str(row.get("method")), zeek_str(row.get("uri")));
            // Zeek logs URIs percent-decoded; rlm keeps them as sent.
            let decoded = |t: &TransactionRecord| t.uri.as_ref().map(|x| percent_encoding::percent_decode_str(x).decode_utf8_lossy().into_owned());
            let found = ours.iter().enumerate().position(|(i, t)| !used[i] && t.method == m && decoded(t) == u);
            match found {
                Some(i) => {
                    used[i] = true;
                    let mut t = ours[i].clone();
                    t.uri = decoded(&t);
                    let d = differences(row, &t);
                    if d.is_empty() {
                        agree += 1;
                    } else {
                        report.push(format!("{trace} {:?} {:?}: {}", m, u, d.join("; ")));
                    }
                }
                None => report.push(format!("{trace} {:?} {:?}: missing from rlm", m, u)),
            }
        }
    }
    let share = agree as f64 / total.max(1) as f64;
    println!("Zeek agreement: {agree}/{total} well-formed transactions ({:.1}%)", share * 100.0);
    for r in &report {
        println!("  disagreement: {r}");
    }
    assert!(failures.is_empty(), "traces that did not survive: {failures:#?}");
    assert!(traces >= 28 && total >= 35, "expected the whole oracle, found {traces} traces and {total} transactions");
    assert!(share >= 0.90, "agreement {:.1}% is below 90%", share * 100.0);
}
