//! Zeek's TSV logs as the oracles read them (`zeek_oracle.rs`, `zeek_ssl_oracle.rs`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use rlm::capture::replay;
use rlm_core::{Config, Engine, Event};

/// The records `pick` takes of what an engine configured by `config` reports over the capture
/// at `path`; an error when the replay fails, hangs or crashes (no answer in 30 s).
pub fn replay_records<T: Send + 'static>(path: PathBuf, config: Config, pick: fn(Event) -> Option<T>) -> Result<Vec<T>, String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut engine = Engine::new(config);
        let mut out = Vec::new();
        let r = replay(
            &path,
            &mut engine,
            &mut |ev| {
                out.extend(pick(ev));
                Ok(())
            },
            None,
        );
        let _ = tx.send(r.map(|_| out).map_err(|e| e.to_string()));
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(r) => r,
        Err(_) => Err("hung or crashed (no answer in 30 s)".into()),
    }
}

/// Baseline rows as column → value maps.
pub fn read_baseline(path: &Path) -> Vec<BTreeMap<String, String>> {
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

/// A value of Zeek's TSV log: `-` unset, `(empty)` empty; the log's own escapes (`\xNN` for a
/// byte it would not print, `\\` for a backslash) are undone, and the bytes rendered as rlm
/// renders them (UTF-8 as it is, other bytes as `\xNN`), so that values are compared, not
/// log formats.
pub fn zeek_str(v: Option<&String>) -> Option<String> {
    let s = match v.map(String::as_str) {
        None | Some("-") => return None,
        Some("(empty)") => return Some(String::new()),
        Some(s) => s,
    };
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match &b[i..] {
            [b'\\', b'\\', ..] => {
                out.push(b'\\');
                i += 2;
            }
            [b'\\', b'x', h, l, ..] if hex(*h).is_some() && hex(*l).is_some() => {
                out.push((hex(*h).unwrap_or(0) * 16 + hex(*l).unwrap_or(0)) as u8);
                i += 4;
            }
            [c, ..] => {
                out.push(*c);
                i += 1;
            }
            [] => break,
        }
    }
    Some(rlm_core::http::head::escape_bytes(&out))
}

/// Rows agreed and rows compared.
#[derive(Default)]
pub struct Tally {
    pub agree: usize,
    pub total: usize,
}

/// The agreement per trace, per field, and each disagreement.
pub fn print_breakdown(per_trace: &[String], per_field: &BTreeMap<&str, Tally>, report: &[String]) {
    println!("per trace:");
    for l in per_trace {
        println!("{l}");
    }
    println!("per field:");
    for (f, t) in per_field {
        println!("  {f:<18} {}/{} ({:.1}%)", t.agree, t.total, 100.0 * t.agree as f64 / t.total.max(1) as f64);
    }
    for r in report {
        println!("  disagreement: {r}");
    }
}
