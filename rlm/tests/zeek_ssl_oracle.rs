//! The Zeek TLS oracle: every real capture in tests/data/zeek-ssl (vendored, see its README) is
//! replayed through the engine with TLS records on, and each TLS connection rlm reports is
//! compared with the ssl.log row Zeek's own test suite expects for it: `version`, `cipher`,
//! `curve`, `server_name`, `next_protocol`, `resumed` and `established`. A row and a record are the same connection when they have the same `id.orig_h`,
//! `id.orig_p` (when the baseline has it), `id.resp_h` and `id.resp_p`. A connection agrees
//! when every compared field agrees; a row with no record is a disagreement. Run with
//! `-- --nocapture` to see the figures.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rlm_core::{Config, Event, TlsRecord};

#[path = "common/zeek_log.rs"]
mod zeek_log;
use zeek_log::{print_breakdown, read_baseline, replay_records, zeek_str, Tally};

/// The bar: at least 95% of the connections agree.
const BAR: f64 = 0.95;

/// Fields compared, by their Zeek names.
const FIELDS: &[&str] = &["version", "cipher", "server_name", "next_protocol", "resumed", "established", "curve"];

fn testdata() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/zeek-ssl");
    assert!(p.join("MANIFEST.tsv").exists(), "vendored Zeek TLS test data missing at {}", p.display());
    p
}

fn run_trace(path: PathBuf) -> Result<Vec<TlsRecord>, String> {
    replay_records(path, Config { tls_records: true, ..Config::default() }, |ev| if let Event::Tls(t) = ev { Some(t) } else { None })
}

/// Zeek's `T`/`F` as rlm's booleans print.
fn zeek_value(field: &str, v: Option<&String>) -> Option<String> {
    match (field, v.map(String::as_str)) {
        ("resumed" | "established", Some("T")) => Some("true".into()),
        ("resumed" | "established", Some("F")) => Some("false".into()),
        _ => zeek_str(v),
    }
}

fn ours(t: &TlsRecord, field: &str) -> Option<String> {
    match field {
        "version" => t.version.clone(),
        "cipher" => t.cipher.clone(),
        "server_name" => t.server_name.clone(),
        "next_protocol" => t.next_protocol.clone(),
        "resumed" => Some(t.resumed.to_string()),
        "established" => Some(t.established.to_string()),
        "curve" => t.curve.clone(),
        _ => unreachable!("unknown field {field}"),
    }
}

/// Whether record `t` is the connection of `row` (by the connection columns the row has).
fn same_connection(row: &BTreeMap<String, String>, t: &TlsRecord) -> bool {
    let ours = [
        ("id.orig_h", t.orig_h.to_string()),
        ("id.orig_p", t.orig_p.to_string()),
        ("id.resp_h", t.resp_h.to_string()),
        ("id.resp_p", t.resp_p.to_string()),
    ];
    ours.iter().all(|(k, v)| row.get(*k).is_none_or(|r| r == v)) && row.contains_key("id.orig_h")
}

#[test]
fn zeek_ssl_logs_agree_and_every_trace_survives() {
    let dir = testdata();
    let manifest = std::fs::read_to_string(dir.join("MANIFEST.tsv")).unwrap();
    let mut all = Tally::default();
    let mut per_field: BTreeMap<&str, Tally> = BTreeMap::new();
    let (mut report, mut failures, mut per_trace) = (Vec::new(), Vec::new(), Vec::new());
    let mut traces = 0;
    for line in manifest.lines().filter(|l| !l.trim().is_empty()) {
        let trace = line.split('\t').next().unwrap_or_default();
        let name = trace.trim_end_matches(".pcap");
        traces += 1;
        let records = match run_trace(dir.join("traces").join(trace)) {
            Ok(o) => o,
            Err(e) => {
                failures.push(format!("{trace}: {e}"));
                continue;
            }
        };
        let rows = read_baseline(&dir.join("baselines").join(format!("{name}.ssl.log")));
        let mut tally = Tally::default();
        let mut used = vec![false; records.len()];
        for row in &rows {
            tally.total += 1;
            let Some(i) = (0..records.len()).find(|i| !used[*i] && same_connection(row, &records[*i])) else {
                report.push(format!("{trace} {:?} -> {:?}: missing from rlm", row.get("id.orig_h"), row.get("id.resp_h")));
                continue;
            };
            used[i] = true;
            let mut diffs = Vec::new();
            for f in FIELDS.iter().filter(|f| row.contains_key(**f)) {
                let (theirs, mine) = (zeek_value(f, row.get(*f)), ours(&records[i], f));
                let e = per_field.entry(f).or_default();
                e.total += 1;
                if theirs == mine {
                    e.agree += 1;
                } else {
                    diffs.push(format!("{f}: zeek {theirs:?}, rlm {mine:?}"));
                }
            }
            if diffs.is_empty() {
                tally.agree += 1;
            } else {
                report.push(format!(
                    "{trace} {}:{}: {} (history {})",
                    records[i].orig_h,
                    records[i].orig_p,
                    diffs.join("; "),
                    records[i].ssl_history
                ));
            }
        }
        all.agree += tally.agree;
        all.total += tally.total;
        per_trace.push(format!("  {:>3}/{:<3} {trace} ({} records)", tally.agree, tally.total, records.len()));
    }
    let share = all.agree as f64 / all.total.max(1) as f64;
    println!("Zeek TLS agreement: {}/{} connections ({:.1}%) over {traces} traces", all.agree, all.total, share * 100.0);
    print_breakdown(&per_trace, &per_field, &report);
    assert!(failures.is_empty(), "traces that did not survive: {failures:#?}");
    assert!(traces >= 18 && all.total >= 26, "expected the whole oracle, found {traces} traces and {} connections", all.total);
    assert!(share >= BAR, "agreement {:.1}% is below {:.0}%", share * 100.0, BAR * 100.0);
}
