//! `rlm analyze` as an operator runs it.

use std::path::{Path, PathBuf};
use std::process::Command;

fn rlm() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rlm"))
}

fn trace(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/zeek-http/traces").join(name)
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rlm-cli-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

fn one_line_error(out: &std::process::Output) -> String {
    assert!(!out.status.success(), "expected failure");
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
    assert!(err.starts_with("rlm: "), "{err:?}");
    err
}

#[test]
fn writes_json_lines_with_the_documented_fields() {
    let (tx, pv) = (tmp("tx.jsonl"), tmp("pv.jsonl"));
    let out = rlm().args(["analyze", "--quiet", "--transactions"]).arg(&tx).arg("--pageviews").arg(&pv).arg(trace("get.pcap")).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(summary.contains("transactions 1"), "{summary}");
    assert!(summary.contains("pageviews 1: mean"), "{summary}");
    let t: serde_json::Value = serde_json::from_str(std::fs::read_to_string(&tx).unwrap().lines().next().unwrap()).unwrap();
    for f in [
        "ts",
        "uid",
        "id.orig_h",
        "id.orig_p",
        "id.resp_h",
        "id.resp_p",
        "trans_depth",
        "method",
        "host",
        "uri",
        "original_uri",
        "referrer",
        "version",
        "request_version",
        "user_agent",
        "status_code",
        "status_msg",
        "info_code",
        "request_body_len",
        "response_body_len",
        "request_body_wire_len",
        "response_body_wire_len",
        "content_type",
        "response_first_ts",
        "response_last_ts",
        "pageview",
        "anomalies",
    ] {
        assert!(t.get(f).is_some(), "transaction lacks {f}: {t}");
    }
    assert_eq!((&t["id.resp_h"], &t["id.resp_p"]), (&serde_json::json!("192.150.187.43"), &serde_json::json!(80)));
    assert_eq!(t["status_code"], 200);
    // Zeek's ts for this transaction, to the microsecond and without float noise.
    assert_eq!(t["ts"].to_string(), "1362692526.939527");
    assert_eq!(t["response_body_len"], 4705);
    let p: serde_json::Value = serde_json::from_str(std::fs::read_to_string(&pv).unwrap().lines().next().unwrap()).unwrap();
    for f in [
        "id",
        "client",
        "host",
        "container",
        "start_ts",
        "end_ts",
        "rt_s",
        "objects",
        "object_uris",
        "syn_retransmissions",
        "failed_connections",
        "t_conn_s",
        "t_server_s",
        "t_transfer_s",
        "events",
    ] {
        assert!(p.get(f).is_some(), "pageview lacks {f}: {p}");
    }
    assert_eq!(p["id"], t["pageview"]);
}

#[test]
fn missing_file_is_a_one_line_error() {
    let out = rlm().args(["analyze", "/nonexistent/capture.pcap"]).output().unwrap();
    assert!(one_line_error(&out).contains("/nonexistent/capture.pcap"));
}

#[test]
fn non_capture_file_is_a_one_line_error() {
    let f = tmp("not-a-capture.pcap");
    std::fs::write(&f, b"this is not a capture file at all, just text\n").unwrap();
    let out = rlm().arg("analyze").arg(&f).output().unwrap();
    one_line_error(&out);
}

#[test]
fn truncated_capture_is_a_one_line_error_after_reporting_what_it_read() {
    let whole = std::fs::read(trace("get.pcap")).unwrap();
    let f = tmp("truncated.pcap");
    std::fs::write(&f, &whole[..whole.len() - 7]).unwrap();
    let out = rlm().arg("analyze").arg(&f).output().unwrap();
    let err = one_line_error(&out);
    assert!(err.contains("damaged") || err.contains("truncated"), "{err}");
}

#[test]
fn directory_is_a_one_line_error() {
    let out = rlm().arg("analyze").arg(std::env::temp_dir()).output().unwrap();
    one_line_error(&out);
}
