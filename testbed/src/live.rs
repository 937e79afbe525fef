//! What `rlm run` wrote about an arm, read by the lab itself: its live pageview records (JSON
//! lines in `rlm analyze`'s schema) and the line it logs at exit with the records it wrote and
//! dropped. Nothing of rlm's own types is used: the lab reads the schema as an operator's log
//! stack would, so that a renamed or retyped field fails here.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

/// One live pageview record: the fields the lab's fidelity needs (the others are ignored).
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct LivePageview {
    /// The client's address.
    pub client: String,
    /// The container page's URL; null when rlm saw no container.
    pub container: Option<String>,
    /// Unix seconds.
    pub start_ts: f64,
    pub rt_s: f64,
    pub actions: Actions,
    /// Read from encrypted traffic (TLS): no container, objects estimated.
    #[serde(default)]
    pub tls: bool,
}

/// What rlm did to a pageview: the counters of the record's `actions` that make it one rlm acted
/// on. A SYN dropped, limited or delayed puts rlm's doing into the client's wait (a dropped SYN's
/// 3 s must be in the measured time); a reference blanked or rewritten changes what the client
/// fetches (what it no longer fetches must not be waited for). SYNs and SYN/ACKs rlm resent or
/// absorbed are in the record too, and not read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Actions {
    pub syns_dropped: u64,
    pub syns_limited: u64,
    pub syns_delayed: u64,
    pub embeds_blanked: u64,
    pub embeds_rewritten: u64,
}

impl LivePageview {
    /// Whether rlm acted on it: dropped, limited or delayed one of its SYNs, or blanked or
    /// rewrote one of its references ([`Actions`]).
    pub fn acted(&self) -> bool {
        let a = &self.actions;
        a.syns_dropped + a.syns_limited + a.syns_delayed + a.embeds_blanked + a.embeds_rewritten > 0
    }
}

/// Every pageview of a `--pageviews` file.
pub fn read_pageviews(path: &Path) -> Result<Vec<LivePageview>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| serde_json::from_str(l).with_context(|| format!("{}:{}", path.display(), i + 1)))
        .collect()
}

/// Records of one kind rlm wrote and dropped (its writer fell behind, or closed with some
/// still queued).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RecordCount {
    pub written: u64,
    pub dropped: u64,
}

/// The counts of rlm's exit line in its log, by kind (`transactions`, `pageviews`,
/// `decisions`): `records: transactions written=12 dropped=0, pageviews written=5 dropped=0,
/// ...`, after the log's timestamp, level and target (coloured or not). None when the log has no
/// such line (rlm was killed, or records were off). The last one counts.
pub fn exit_counts(log: &str) -> Option<BTreeMap<String, RecordCount>> {
    log.lines().rev().find_map(|line| {
        let plain = strip_ansi(line);
        let (_, rest) = plain.split_once("records: ")?;
        let mut counts = BTreeMap::new();
        for part in rest.trim_end().split(", ") {
            let mut words = part.split(' ');
            let kind = words.next()?;
            let mut count = |key: &str| words.next()?.strip_prefix(key)?.parse::<u64>().ok();
            let c = RecordCount { written: count("written=")?, dropped: count("dropped=")? };
            counts.insert(kind.to_string(), c);
        }
        Some(counts)
    })
}

/// A line without its ANSI escape sequences (`ESC [ ... letter`: the log's colours).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // The sequence's parameters, up to and with its final letter.
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pageview line exactly as `rlm analyze --rules classes.rlm --pageviews` wrote it
    /// (`rlm/tests/data/zeek-http/traces/wikipedia.pcap`): the schema `rlm run` writes live.
    const ANALYZE_LINE: &str = include_str!("../tests/data/rlm-analyze-pageview.jsonl");

    #[test]
    fn reads_a_pageview_line_of_rlm_analyze() {
        let dir = std::env::temp_dir().join(format!("rlm-lab-live-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("pv.jsonl");
        std::fs::write(&path, format!("{ANALYZE_LINE}\n{ANALYZE_LINE}")).unwrap();
        let pvs = read_pageviews(&path).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(pvs.len(), 2);
        let p = &pvs[0];
        assert_eq!((p.client.as_str(), p.container.as_deref()), ("141.142.220.118", Some("/")));
        assert_eq!((p.start_ts, p.rt_s), (1300475168.652003, 0.4230665));
        assert_eq!(p.actions, Actions::default());
        assert!(!p.acted());
        // A field the lab needs, renamed: the line is refused, not read as zeros.
        let renamed = ANALYZE_LINE.replace("\"embeds_blanked\"", "\"embeds_removed\"");
        assert!(serde_json::from_str::<LivePageview>(&renamed).is_err());
    }

    #[test]
    fn acted_on_by_what_changes_the_wait() {
        let mut p: LivePageview = serde_json::from_str(ANALYZE_LINE).unwrap();
        p.actions.syns_dropped = 1;
        assert!(p.acted());
        p.actions = Actions { embeds_rewritten: 2, ..Actions::default() };
        assert!(p.acted());
        // Resent or absorbed SYNs are not in the lab's reading: not acted on.
        let resent = ANALYZE_LINE.replace("\"syns_resent\":0", "\"syns_resent\":3");
        assert!(!serde_json::from_str::<LivePageview>(&resent).unwrap().acted());
    }

    #[test]
    fn exit_counts_from_a_coloured_log() {
        let log = "\u{1b}[2m2026-11-26T10:00:22.685470Z\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m \u{1b}[2mrlm::live\u{1b}[0m\u{1b}[2m:\u{1b}[0m records: writing JSON lines \u{1b}[3mpageviews\u{1b}[0m\u{1b}[2m=\u{1b}[0m/tmp/a/rlm-pageviews.jsonl\n\
                   \u{1b}[2m2026-11-26T10:00:23.685470Z\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m \u{1b}[2mrlm::live\u{1b}[0m\u{1b}[2m:\u{1b}[0m SIGTERM: stopping\n\
                   \u{1b}[2m2026-11-26T10:00:23.785547Z\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m \u{1b}[2mrlm::live\u{1b}[0m\u{1b}[2m:\u{1b}[0m records: transactions written=12 dropped=0, pageviews written=5 dropped=2, decisions written=3 dropped=0\n\
                   \u{1b}[2m2026-11-26T10:00:23.885547Z\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m \u{1b}[2mrlm::live\u{1b}[0m\u{1b}[2m:\u{1b}[0m removed rlm's rules; the bridge forwards plainly\n";
        let c = exit_counts(log).expect("an exit line");
        assert_eq!(c.len(), 3);
        assert_eq!(c["transactions"], RecordCount { written: 12, dropped: 0 });
        assert_eq!(c["pageviews"], RecordCount { written: 5, dropped: 2 });
        assert_eq!(c["decisions"], RecordCount { written: 3, dropped: 0 });
        // Plain text reads the same; a log without the line (rlm killed) has no counts, nor one
        // with only the writer's warnings.
        assert_eq!(exit_counts(&strip_ansi(log)), Some(c));
        let warned = "WARN rlm::live::records: records: the writer did not finish within 5s; the records not yet written are dropped\n";
        assert_eq!(exit_counts(&log.lines().take(2).collect::<Vec<_>>().join("\n")), None);
        assert_eq!(exit_counts(warned), None);
    }
}
