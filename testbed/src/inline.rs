//! The real appliance inline in the lab: `rlm run` on the appliance namespace's bridge.
//!
//! [`Inline::start`] writes the arm's rule file, starts
//! `ip netns exec {p}-app rlm run --bridge br0 --client-port app-c --server-port app-s --rules FILE
//! --metrics 127.0.0.1:PORT --transactions ... --pageviews ... --decisions ... [extra]` with its
//! log and its records in the arm's directory and waits until `GET /status` answers; while it
//! runs, its resident memory, open descriptors and classes' response times are sampled each
//! second ([`RlmSample`]); [`Inline::stop`] saves `/status` and `/metrics`, sends SIGTERM, and checks that rlm exited 0
//! and left no netfilter rule behind. rlm runs with a guard process (`rlm guard`, which cleans up
//! when rlm dies without a clean exit): [`Inline::stop`] and [`Inline::kill`] return once it has
//! exited too, [`Inline::kill_with_guard`] kills both as a stop of the whole service would. What rlm reports (its SYN drops, its verdict latency, its
//! live pageviews) is recorded next to the lab's own measurements, never instead of them.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::live::RecordCount;

/// The appliance in an arm: its rule file, its records and any extra `rlm run` flags.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default)]
pub struct RlmArm {
    /// The rule file's text (004 section 6's language), written to the arm's directory; empty:
    /// rlm runs without rules (it measures, classifies nothing and acts on nothing).
    pub rules: String,
    /// More `rlm run` flags, e.g. `--class-window 10`.
    pub extra_args: Vec<String>,
    /// rlm writes its transaction, pageview and decision records into the arm's directory
    /// ([`RlmRecords`]), which the lab reads back for the live fidelity. On unless an arm
    /// measures rlm's cost without them.
    pub records: bool,
    /// Each [`MAP_SAMPLE_EVERY`]th second the lab also counts the entries of the fast path's
    /// tables ([`FASTPATH_MAPS`], with [`crate::bpfmaps`]) into the sample.
    pub count_maps: bool,
    /// rlm (its threads and its guard) runs on these CPUs only ([`crate::cpus`]); None: on any.
    pub cpus: Option<Vec<usize>>,
}

impl Default for RlmArm {
    fn default() -> Self {
        RlmArm { rules: String::new(), extra_args: Vec::new(), records: true, count_maps: false, cpus: None }
    }
}

/// The fast path's tables keyed by what arrives (`kmod-fastpath/bpf`): LRU hashes, bounded by
/// their size, whose entries a soak watches.
pub const FASTPATH_MAPS: &[&str] = &["syn_verdicts", "handshakes", "resp_size", "flow_state"];

/// How often (in samples, one a second) the fast path's entries are counted: a walk of 65,536
/// keys is a syscall each.
pub const MAP_SAMPLE_EVERY: usize = 10;

/// The lab's `REWRITE EMBEDS` mapping (`testbed/maps/ims.map`: every image to its small
/// variant), written beside every arm's rule file so that rules can say `USING "ims.map"`.
pub const IMS_MAP: &str = include_str!("../maps/ims.map");

/// The lab's bridge and its ports, as `rlm run` is told them.
pub const BRIDGE: &str = "br0";
pub const CLIENT_PORT: &str = "app-c";
pub const SERVER_PORT: &str = "app-s";
/// Where rlm serves /metrics and /status, on the appliance namespace's loopback.
pub const METRICS_PORT: u16 = 9464;

/// The `rlm` executable: `$RLM_BIN`, else next to `rlm-lab` (target/release/rlm when the lab
/// runs from target/release), else the workspace's target/release or target/debug.
pub fn rlm_binary() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("RLM_BIN") {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        bail!("RLM_BIN={} is not a file", p.display());
    }
    let me = std::env::current_exe()?;
    let mut dirs: Vec<PathBuf> = [me.parent(), me.parent().and_then(|p| p.parent())].into_iter().flatten().map(Path::to_path_buf).collect();
    let ws = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("target");
    dirs.extend([ws.join("release"), ws.join("debug")]);
    for d in &dirs {
        let cand = d.join("rlm");
        if cand.is_file() {
            return Ok(cand);
        }
    }
    bail!(
        "the rlm binary is not next to {} nor in the workspace's target/: build it with `cargo build --release -p rlm` (or set RLM_BIN)",
        me.display()
    )
}

/// What one `rlm run` did, for result.json (`arms[].rlm`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct RlmOutcome {
    /// rlm's exit code after SIGTERM; None if it had to be killed or died of a signal.
    pub exit_code: Option<i32>,
    /// Seconds from the SIGTERM to rlm's exit (None if it had to be killed).
    pub exit_s: Option<f64>,
    /// When the SIGTERM was sent, in Unix seconds.
    pub term_unix_s: Option<f64>,
    /// Exited 0 on SIGTERM and removed its rules.
    pub clean_exit: bool,
    /// Lines of rlm's netfilter state still there after it exited (should be none).
    pub rules_left: Vec<String>,
    /// rlm was in the path while it ran (seen right after it started): its eBPF fast path
    /// attached (its /status read the programs' counters) or its netfilter rules in place.
    pub installed: bool,
    /// `rlm_syn_drops` by class, from /metrics at the end of the arm (rlm's own count).
    pub syn_drops: BTreeMap<String, f64>,
    /// `rlm_verdicts` by verdict.
    pub verdicts: BTreeMap<String, f64>,
    /// Quantiles of rlm's `rlm_verdict_latency_seconds` histogram (rlm's own figure).
    pub verdict_latency_p50_us: Option<f64>,
    pub verdict_latency_p99_us: Option<f64>,
    /// The kernel fast path's counters (`rlm_fastpath_packets`: SYNs passed, dropped and queued
    /// in the kernel, packets reported, reports lost to a full ring, bare ACKs kept back).
    pub fastpath: BTreeMap<String, f64>,
    /// Packets rlm should have measured but lost (ring buffer full, or the tap's drops): 0 when
    /// rlm kept up with the load.
    pub reports_lost: f64,
    /// The engine's counts at the end (from /status): HTTP transactions and pageviews measured.
    pub transactions: Option<u64>,
    pub pageviews: Option<u64>,
    /// Frames rlm got cut (longer on the wire than the fast path copies: offloads on) and
    /// frames it counted truncated (from /status).
    pub cut_frames: Option<u64>,
    pub truncated: Option<u64>,
    /// Exchanges of encrypted records it read (from /status), and TLS connections.
    pub tls_exchanges: Option<u64>,
    pub tls_connections: Option<u64>,
    /// Frames rlm sent or held back itself (from /status, see [`injection_counters`]): fast
    /// SYN and SYN/ACK retransmissions, client SYNs absorbed, first SYNs delayed, frames the
    /// injection budget refused, and the injector's own counts. A counter rlm did not report is
    /// absent.
    pub injected: BTreeMap<String, f64>,
    /// What content adaptation did (from /status, [`ADAPT_STATS`]).
    pub adapted: BTreeMap<String, f64>,
    /// The SRPT classifier's figures (/status `srpt`: mode, packets and bytes per band, data
    /// packets ranked by remaining or by sent bytes), and the response sizes the engine
    /// published; null without `--srpt`.
    pub srpt: Option<serde_json::Value>,
    /// CPU rlm used (user + system), from /proc.
    pub cpu_s: f64,
    pub wall_s: f64,
    pub log: PathBuf,
    /// The rule file; None when rlm ran without rules.
    pub rules: Option<PathBuf>,
    pub status: Option<PathBuf>,
    pub metrics: Option<PathBuf>,
    /// rlm's records of the arm; None when they were off.
    pub records: Option<RlmRecords>,
    /// rlm's resident memory and open descriptors each second while it ran (`/proc/PID`), with
    /// its classes' response times from `/status` at that second.
    pub samples: Vec<RlmSample>,
    /// The largest of the samples' resident memory (KiB) and open descriptors.
    pub rss_max_kib: Option<u64>,
    pub fds_max: Option<u64>,
    /// `/status`'s `engine_call_us` at the end: how long the engine's calls took (one call in
    /// `sample` timed; `timed`, `p50`, `p99`, `p9999`, `max` in µs).
    pub engine_call_us: Option<serde_json::Value>,
    /// The counters of `/status` `stats` about what rlm refused or evicted ([`ROBUSTNESS_STATS`]).
    pub robustness: BTreeMap<String, f64>,
    /// `/status`'s `limits`: rlm's `[limits]` as it derived them (`memory_mb`, its bounds); None
    /// from an rlm without them.
    pub limits: Option<serde_json::Value>,
}

/// One second of a running rlm.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RlmSample {
    pub unix_s: f64,
    pub rss_kib: u64,
    pub fds: u64,
    /// Each class's `rt_mean_s` in `/status` (the rules' `RT.CLASS`); a class without one (an
    /// empty window) is absent.
    pub rt_mean_s: BTreeMap<String, f64>,
    /// `/status`'s `tables` (connections, timers, open pageviews, bytes held, ...).
    pub tables: BTreeMap<String, f64>,
    /// The fast path's map entries, counted by the lab ([`RlmArm::count_maps`]; empty in the
    /// samples between counts).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub map_entries: BTreeMap<String, u64>,
}

/// `/status`'s `tables`, each a number.
fn status_tables(status: &serde_json::Value) -> BTreeMap<String, f64> {
    let t = status["tables"].as_object().into_iter().flatten();
    t.filter_map(|(k, v)| Some((k.clone(), v.as_f64()?))).collect()
}

/// Where rlm wrote its records in an arm, and how many it said it wrote and dropped.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RlmRecords {
    pub transactions: PathBuf,
    pub pageviews: PathBuf,
    pub decisions: PathBuf,
    /// rlm's count at exit by kind ([`crate::live::exit_counts`]); None when its log has none
    /// (it was killed), and then the records lost are not known.
    pub counts: Option<BTreeMap<String, RecordCount>>,
}

impl RlmRecords {
    /// The record files of an arm's directory.
    pub fn in_dir(dir: &Path) -> RlmRecords {
        let file = |kind: &str| dir.join(format!("rlm-{kind}.jsonl"));
        RlmRecords { transactions: file("transactions"), pageviews: file("pageviews"), decisions: file("decisions"), counts: None }
    }
}

/// The counters of rlm's /status `stats` about the frames it sends or holds back (004 section
/// 6.2-6.3: fast SYN and SYN/ACK retransmission, DELAY FIRST SYN).
pub const INJECTION_STATS: [&str; 6] =
    ["fast_syns_sent", "fast_synacks_sent", "fast_syns_absorbed", "fast_syns_client_passed", "syns_delayed", "inject_denied"];

/// The counters of rlm's /status `stats` about content adaptation (004 section 5).
pub const ADAPT_STATS: [&str; 14] = [
    "embeds_removed",
    "embeds_kept_split",
    "embeds_kept_unmapped",
    "embeds_rewritten",
    "rewrites_unmapped",
    "rewrites_split",
    "rewrites_unplaced",
    "predictions_measured",
    "predictions_model",
    "predictions_no_size",
    "adapt_segments_edited",
    "adapt_ooo_dropped",
    "adapt_skipped_encoded",
    "adapt_patch_failed",
];

/// The counters of rlm's /status `stats` about what it refused, evicted or did not count (issue
/// 24: evidence, sides, windows and budgets).
pub const ROBUSTNESS_STATS: [&str; 10] = [
    "connections_midstream",
    "failures_unproven",
    "pageviews_unproven",
    "wrong_side",
    "out_of_window",
    "evicted_held",
    "pageviews_evicted",
    "connections_evicted",
    "window_evicted",
    "untracked_segments",
];

/// Those of `keys` that a /status document's `stats` has.
fn stats_of(status: &serde_json::Value, keys: &[&str]) -> BTreeMap<String, f64> {
    keys.iter().filter_map(|&k| status["stats"][k].as_f64().map(|x| (k.to_string(), x))).collect()
}

/// [`INJECTION_STATS`] from a /status document, and every number of its top-level `injector`
/// object as `injector_NAME` (`injector_sent`, `injector_failed`, `injector_no_mac`). Missing
/// keys are left out.
pub fn injection_counters(status: &serde_json::Value) -> BTreeMap<String, f64> {
    let mut out = stats_of(status, &INJECTION_STATS);
    for (k, x) in status["injector"].as_object().into_iter().flatten() {
        if let Some(x) = x.as_f64() {
            out.insert(format!("injector_{k}"), x);
        }
    }
    out
}

/// A running `rlm run`. Killed (SIGKILL) on drop if not stopped.
pub struct Inline {
    child: Option<Child>,
    pub pid: u32,
    /// rlm's guard process (`rlm guard`, which cleans up when rlm dies without a clean exit), as
    /// found once rlm runs.
    guard: Option<u32>,
    ns: String,
    addr: SocketAddr,
    dir: PathBuf,
    log: PathBuf,
    rules: Option<PathBuf>,
    records: Option<RlmRecords>,
    started: Instant,
    installed: bool,
    /// The sampler of rlm's memory, descriptors and class response times, and its stop.
    sampler: Option<(Arc<AtomicBool>, std::thread::JoinHandle<Vec<RlmSample>>)>,
}

/// GET `path` from `addr` inside namespace `ns`; returns (status code, body).
pub fn http_get(ns: &str, addr: SocketAddr, path: &str, timeout: Duration) -> Result<(u16, String)> {
    let (ns, path) = (ns.to_string(), path.to_string());
    std::thread::spawn(move || -> Result<(u16, String)> {
        crate::netns::enter(&ns)?;
        let mut s = TcpStream::connect_timeout(&addr, timeout)?;
        s.set_read_timeout(Some(timeout))?;
        s.set_write_timeout(Some(timeout))?;
        write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf)?;
        let text = String::from_utf8_lossy(&buf).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").ok_or_else(|| anyhow!("no HTTP head from {addr}{path}"))?;
        let code: u16 = head.get(9..12).and_then(|c| c.parse().ok()).ok_or_else(|| anyhow!("bad status line from {addr}{path}"))?;
        let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") { dechunk(body) } else { body.to_string() };
        Ok((code, body))
    })
    .join()
    .map_err(|_| anyhow!("HTTP client thread panicked"))?
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else { break };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// rlm's netfilter state in a namespace: iptables/ip6tables mangle lines naming an RLM chain,
/// and nft tables named rlm_*.
pub fn rlm_rules(ns: &str) -> Vec<String> {
    let mut out = Vec::new();
    for cmd in ["iptables", "ip6tables"] {
        if let Ok(t) = crate::topology::in_ns(ns, cmd, &["-t", "mangle", "-S"]) {
            out.extend(t.lines().filter(|l| l.contains("RLM")).map(|l| format!("{cmd}: {l}")));
        }
    }
    if let Ok(t) = crate::topology::in_ns(ns, "nft", &["list", "tables"]) {
        out.extend(t.lines().filter(|l| l.contains(" rlm_")).map(|l| format!("nft: {l}")));
    }
    out
}

/// What rlm may change in the appliance's namespace, as text to compare before it starts and
/// after it stops: the nft ruleset, `iptables-save` and `ip6tables-save` (their comment lines,
/// which carry the time, left out), every qdisc, the tc filters of `ports` both ways, and the
/// br_netfilter sysctls.
pub fn host_state(ns: &str, ports: &[&str]) -> Vec<(String, String)> {
    let run = |cmd: &str, args: &[&str]| crate::topology::in_ns(ns, cmd, args).unwrap_or_else(|e| format!("({cmd} failed: {e:#})"));
    let mut out = vec![("nft list ruleset".to_string(), run("nft", &["list", "ruleset"]))];
    for cmd in ["iptables-save", "ip6tables-save"] {
        let text = run(cmd, &[]);
        out.push((cmd.to_string(), text.lines().filter(|l| !l.starts_with('#')).collect::<Vec<_>>().join("\n")));
    }
    out.push(("tc qdisc show".to_string(), run("tc", &["qdisc", "show"])));
    for p in ports {
        for dir in ["ingress", "egress"] {
            out.push((format!("tc filter show dev {p} {dir}"), run("tc", &["filter", "show", "dev", p, dir])));
        }
    }
    out.push(("sysctl net.bridge".to_string(), run("sysctl", &["net.bridge"])));
    out
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let v: Vec<&str> = text.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

/// The resident memory of a process (KiB, `VmRSS` of /proc/PID/status); None once it is gone.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next()).and_then(|v| v.parse().ok())
}

/// The open descriptors of a process (entries of /proc/PID/fd); None once it is gone.
pub fn open_fds(pid: u32) -> Option<u64> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64)
}

/// Each class's `rt_mean_s` in a /status document.
fn class_rts(status: &serde_json::Value) -> BTreeMap<String, f64> {
    let classes = status["classes"].as_array().into_iter().flatten();
    classes.filter_map(|c| Some((c["class"].as_str()?.to_string(), c["rt_mean_s"].as_f64()?))).collect()
}

/// Sample rlm (`pid`, its /status at `addr` in `ns`) each second until `stop` is set.
fn sample_each_second(pid: u32, ns: String, addr: SocketAddr, count_maps: bool, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<RlmSample>> {
    std::thread::spawn(move || {
        let mut out = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let next = Instant::now() + Duration::from_secs(1);
            let (Some(rss_kib), Some(fds)) = (rss_kib(pid), open_fds(pid)) else { break };
            let status = match http_get(&ns, addr, "/status", Duration::from_millis(500)) {
                Ok((200, body)) => serde_json::from_str(&body).unwrap_or_default(),
                _ => serde_json::Value::Null,
            };
            let (rt_mean_s, tables) = (class_rts(&status), status_tables(&status));
            let map_entries = if count_maps && out.len() % MAP_SAMPLE_EVERY == 0 {
                crate::bpfmaps::entries(FASTPATH_MAPS).unwrap_or_default()
            } else {
                BTreeMap::new()
            };
            let unix_s = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
            out.push(RlmSample { unix_s, rss_kib, fds, rt_mean_s, tables, map_entries });
            while Instant::now() < next && !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        out
    })
}

/// CPU seconds (user + system) of a process, from /proc/PID/stat.
fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0.0 };
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let ut: f64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    let st: f64 = f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    (ut + st) / tick
}

impl Inline {
    /// Start rlm in namespace `ns` (the lab's appliance namespace) with the arm's rules; files
    /// go to `dir` (rules.rlm, the lab's mapping ims.map beside it, rlm.log, the records
    /// rlm-{transactions,pageviews,decisions}.jsonl). Fails, with the end of rlm's log, if rlm
    /// exits or `/status` does not answer within `ready_timeout`.
    pub fn start(ns: &str, arm: &RlmArm, dir: &Path, ready_timeout: Duration) -> Result<Inline> {
        std::fs::create_dir_all(dir)?;
        let rlm = rlm_binary()?;
        let rules = (!arm.rules.is_empty()).then(|| dir.join("rules.rlm"));
        if let Some(r) = &rules {
            std::fs::write(r, &arm.rules)?;
        }
        std::fs::write(dir.join("ims.map"), IMS_MAP)?;
        let records = arm.records.then(|| RlmRecords::in_dir(dir));
        // rlm run appends to its record files; an arm compares what rlm says it wrote with the
        // lines it reads back, so it starts from none.
        for f in records.iter().flat_map(|r| [&r.transactions, &r.pageviews, &r.decisions]) {
            match std::fs::remove_file(f) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e).with_context(|| format!("removing {}", f.display())),
                _ => {}
            }
        }
        let log = dir.join("rlm.log");
        let addr: SocketAddr = ([127, 0, 0, 1], METRICS_PORT).into();
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns]).arg(&rlm).args(["run", "--bridge", BRIDGE, "--client-port", CLIENT_PORT, "--server-port", SERVER_PORT]);
        if let Some(r) = &rules {
            cmd.arg("--rules").arg(r);
        }
        if let Some(r) = &records {
            cmd.arg("--transactions").arg(&r.transactions).arg("--pageviews").arg(&r.pageviews).arg("--decisions").arg(&r.decisions);
        }
        cmd.args(["--metrics", &addr.to_string()])
            .args(&arm.extra_args)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log)?)
            .stderr(std::fs::File::options().append(true).open(&log)?);
        if let Some(cpus) = arm.cpus.clone() {
            use std::os::unix::process::CommandExt;
            // SAFETY: between fork and exec the closure makes one system call.
            unsafe { cmd.pre_exec(move || crate::cpus::set(0, &cpus)) };
        }
        std::fs::write(dir.join("rlm.cmd"), format!("{cmd:?}{}\n", arm.cpus.as_ref().map_or(String::new(), |c| format!(" on CPUs {c:?}"))))?;
        let child = cmd.spawn().with_context(|| format!("starting {}", rlm.display()))?;
        let pid = child.id();
        let mut me = Inline {
            child: Some(child),
            pid,
            ns: ns.to_string(),
            addr,
            dir: dir.to_path_buf(),
            log,
            rules,
            records,
            started: Instant::now(),
            installed: false,
            guard: None,
            sampler: None,
        };
        let deadline = Instant::now() + ready_timeout;
        let fastpath;
        loop {
            if let Some(st) = me.child.as_mut().expect("running").try_wait()? {
                me.child = None;
                bail!("rlm run exited at start ({st}); its log ({}):\n{}", me.log.display(), tail(&me.log, 30));
            }
            if let Ok((200, body)) = http_get(ns, addr, "/status", Duration::from_millis(500)) {
                // The metrics server comes up before the rules; wait for the loop to run.
                let status = serde_json::from_str::<serde_json::Value>(&body).unwrap_or_default();
                if status.get("state").and_then(|s| s.as_str()).is_none_or(|s| s == "running") {
                    // Its programs' counters read from the kernel: the fast path is attached.
                    fastpath = status["fastpath"]["syn_passed"].is_u64();
                    break;
                }
            }
            if Instant::now() > deadline {
                let _ = me.kill();
                bail!("rlm's /status did not answer within {ready_timeout:?}; its log ({}):\n{}", me.log.display(), tail(&me.log, 30));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        me.installed = fastpath || !rlm_rules(ns).is_empty();
        let stop = Arc::new(AtomicBool::new(false));
        me.sampler = Some((stop.clone(), sample_each_second(pid, ns.to_string(), addr, arm.count_maps, stop)));
        // rlm starts its guard before it installs anything; the guard names itself at once.
        let until = Instant::now() + Duration::from_secs(1);
        while me.guard.is_none() && Instant::now() < until {
            me.guard = guard_of(pid);
            if me.guard.is_none() {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        Ok(me)
    }

    /// The pid of rlm's guard process, if it has one.
    pub fn guard_pid(&self) -> Option<u32> {
        self.guard
    }

    /// Whether rlm is still running.
    pub fn running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    pub fn get(&self, path: &str) -> Result<String> {
        match http_get(&self.ns, self.addr, path, Duration::from_secs(3))? {
            (200, body) => Ok(body),
            (code, body) => bail!("rlm {path}: HTTP {code}: {body}"),
        }
    }

    /// SIGKILL, as a crash would: rlm cleans nothing up itself; its guard process does, and this
    /// waits for the guard to finish (at most 5 s).
    pub fn kill(&mut self) -> Result<()> {
        if let Some((stop, _)) = &self.sampler {
            stop.store(true, Ordering::Relaxed);
        }
        if let Some(mut c) = self.child.take() {
            c.kill()?;
            c.wait()?;
        }
        self.wait_guard();
        Ok(())
    }

    /// Send rlm `signal` (SIGSTOP, SIGCONT: a hung or stopped rlm, as the fast path sees it).
    pub fn signal(&mut self, signal: i32) -> Result<()> {
        let Some(c) = self.child.as_ref() else { bail!("rlm is not running") };
        // SAFETY: kill(2) on our own child's pid, not yet reaped (so not reused).
        if unsafe { libc::kill(c.id() as i32, signal) } != 0 {
            bail!("kill({}, {signal}): {}", c.id(), std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// SIGKILL rlm's guard alone (rlm goes on; it then has only its own `Drop`s to clean up
    /// with).
    pub fn kill_guard(&mut self) {
        if let Some(g) = self.guard.take() {
            if alive(g) {
                // SAFETY: kill(2) on the guard's pid, checked alive just now (its parent, rlm,
                // is still running, so the pid cannot have been reused).
                unsafe { libc::kill(g as i32, libc::SIGKILL) };
            }
            let until = Instant::now() + Duration::from_secs(5);
            while alive(g) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }

    /// Wait up to `timeout` for rlm to exit by itself; its exit status, None if it still runs.
    pub fn wait_exit(&mut self, timeout: Duration) -> Result<Option<std::process::ExitStatus>> {
        let until = Instant::now() + timeout;
        loop {
            let Some(c) = self.child.as_mut() else { bail!("rlm was already stopped") };
            if let Some(st) = c.try_wait()? {
                self.child = None;
                return Ok(Some(st));
            }
            if Instant::now() > until {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// SIGKILL rlm and its guard together, as a stop that kills the whole service does
    /// (systemd's SIGKILL past `TimeoutStopSec`): nothing is cleaned up (the queue rules stay,
    /// bypassed; the qdisc and clsact filters stay).
    pub fn kill_with_guard(&mut self) -> Result<()> {
        self.kill_guard();
        self.kill()
    }

    /// Wait (at most 5 s) for the guard to exit: it cleans up after a kill, and exits at once
    /// after rlm's clean exit (rlm waits for that itself). One still there is killed.
    fn wait_guard(&mut self) {
        let Some(g) = self.guard.take() else { return };
        let until = Instant::now() + Duration::from_secs(5);
        while alive(g) {
            if Instant::now() > until {
                eprintln!("rlm-lab: rlm's guard (pid {g}) did not exit within 5 s; killing it");
                // SAFETY: kill(2) on a pid that is rlm's guard's (seen alive with that name).
                unsafe { libc::kill(g as i32, libc::SIGKILL) };
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Save /status and /metrics into the directory, SIGTERM rlm, wait for it (10 s, then
    /// SIGKILL), check what it left and read what it said of its records at exit.
    pub fn stop(mut self) -> Result<RlmOutcome> {
        let mut out = RlmOutcome { log: self.log.clone(), rules: self.rules.clone(), installed: self.installed, ..RlmOutcome::default() };
        let mut metrics_text = String::new();
        // rlm refreshes /status every second: wait for a refresh that covers the arm's end.
        std::thread::sleep(Duration::from_millis(1100));
        if let Ok(s) = self.get("/status") {
            let p = self.dir.join("rlm-status.json");
            std::fs::write(&p, &s)?;
            out.status = Some(p);
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&s) {
                out.engine_call_us = (!v["engine_call_us"].is_null()).then(|| v["engine_call_us"].clone());
                out.robustness = stats_of(&v, &ROBUSTNESS_STATS);
                out.limits = (!v["limits"].is_null()).then(|| v["limits"].clone());
                out.transactions = v["stats"]["transactions"].as_u64();
                out.cut_frames = v["stats"]["cut_frames"].as_u64();
                out.truncated = v["stats"]["malformed"]["truncated"].as_u64();
                out.tls_exchanges = v["stats"]["tls_exchanges"].as_u64();
                out.tls_connections = v["stats"]["tls_connections"].as_u64();
                out.pageviews = v["stats"]["pageviews"].as_u64();
                out.injected = injection_counters(&v);
                out.adapted = stats_of(&v, &ADAPT_STATS);
                if !v["srpt"].is_null() {
                    let mut srpt = v["srpt"].clone();
                    srpt["sizes_published"] = v["stats"]["srpt_sizes_published"].clone();
                    out.srpt = Some(srpt);
                }
            }
        }
        if let Ok(m) = self.get("/metrics") {
            let p = self.dir.join("rlm-metrics.txt");
            std::fs::write(&p, &m)?;
            out.metrics = Some(p);
            metrics_text = m;
        }
        if let Some((stop, sampler)) = self.sampler.take() {
            stop.store(true, Ordering::Relaxed);
            out.samples = sampler.join().unwrap_or_default();
            out.rss_max_kib = out.samples.iter().map(|s| s.rss_kib).max();
            out.fds_max = out.samples.iter().map(|s| s.fds).max();
        }
        out.cpu_s = cpu_seconds(self.pid);
        out.wall_s = self.started.elapsed().as_secs_f64();
        let samples = prom::parse(&metrics_text);
        out.syn_drops = prom::by_label(&samples, "rlm_syn_drops", "class");
        out.verdicts = prom::by_label(&samples, "rlm_verdicts", "verdict");
        out.fastpath = prom::by_label(&samples, "rlm_fastpath_packets", "counter");
        let tap_dropped: f64 = samples.iter().filter(|s| s.name == "rlm_tap_dropped").map(|s| s.value).sum();
        out.reports_lost = out.fastpath.get("ring_full").copied().unwrap_or(0.0) + tap_dropped;
        let h = prom::histogram(&samples, "rlm_verdict_latency_seconds");
        out.verdict_latency_p50_us = prom::quantile(&h, 0.5).map(|s| s * 1e6);
        out.verdict_latency_p99_us = prom::quantile(&h, 0.99).map(|s| s * 1e6);
        if let Some(mut c) = self.child.take() {
            // SAFETY: kill(2) on our own child's pid; it has not been reaped, so the pid is its.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let termed = Instant::now();
            out.term_unix_s = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).ok().map(|d| d.as_secs_f64());
            let deadline = termed + Duration::from_secs(10);
            let status = loop {
                if let Some(st) = c.try_wait()? {
                    out.exit_s = Some(termed.elapsed().as_secs_f64());
                    break Some(st);
                }
                if Instant::now() > deadline {
                    let _ = c.kill();
                    let _ = c.wait();
                    break None;
                }
                std::thread::sleep(Duration::from_millis(20));
            };
            out.exit_code = status.and_then(|s| s.code());
        }
        self.wait_guard();
        out.rules_left = rlm_rules(&self.ns);
        out.clean_exit = out.exit_code == Some(0) && out.rules_left.is_empty();
        out.records = self.records.take().map(|mut r| {
            r.counts = std::fs::read_to_string(&self.log).ok().and_then(|log| crate::live::exit_counts(&log));
            r
        });
        if !out.clean_exit {
            eprintln!(
                "rlm-lab: rlm did not stop cleanly (exit {:?}, rules left {:?}); its log ({}):\n{}",
                out.exit_code,
                out.rules_left,
                self.log.display(),
                tail(&self.log, 20)
            );
        }
        Ok(out)
    }
}

/// The state letter of process `pid` (`/proc/PID/stat`) and its name, if it exists.
fn proc_state(pid: u32) -> Option<(char, String)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (head, rest) = stat.rsplit_once(')')?;
    let name = head.split_once('(')?.1.to_string();
    Some((rest.trim_start().chars().next()?, name))
}

/// Whether `pid` is a running rlm guard (a zombie is not: where nothing reaps orphans, an
/// exited guard stays one).
fn alive(pid: u32) -> bool {
    proc_state(pid).is_some_and(|(state, name)| !matches!(state, 'Z' | 'X') && name == "rlm-guard")
}

/// The guard process of rlm `pid`: its child named `rlm-guard`.
pub fn guard_of(pid: u32) -> Option<u32> {
    processes().find(|(_, comm, ppid)| comm == "rlm-guard" && *ppid == pid).map(|(p, _, _)| p)
}

/// Every process now: (pid, command name, parent's pid), from /proc/PID/stat.
pub fn processes() -> impl Iterator<Item = (u32, String, u32)> {
    std::fs::read_dir("/proc").into_iter().flatten().flatten().filter_map(|e| {
        let p = e.file_name().to_str()?.parse::<u32>().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
        // The command sits in parentheses and may hold spaces and parentheses itself; after it:
        // state, ppid.
        let (head, rest) = stat.rsplit_once(')')?;
        let comm = head.split_once('(')?.1.to_string();
        let ppid = rest.split_whitespace().nth(1)?.parse::<u32>().ok()?;
        Some((p, comm, ppid))
    })
}

/// Running rlm guards whose name and namespace say they belong to the lab's appliance
/// namespace `ns`: the inode of their network namespace is `ns`'s.
pub fn guards_in(ns: &str) -> Vec<u32> {
    let Ok(target) = std::fs::metadata(format!("/run/netns/{ns}")) else { return Vec::new() };
    use std::os::unix::fs::MetadataExt;
    let ino = target.ino();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| alive(p) && std::fs::metadata(format!("/proc/{p}/ns/net")).is_ok_and(|m| m.ino() == ino))
        .collect()
}

impl Drop for Inline {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

/// Just enough of the Prometheus/OpenMetrics text format to read rlm's counters and histograms.
pub mod prom {
    use std::collections::BTreeMap;

    /// One sample line: metric name, labels, value.
    #[derive(Clone, Debug, PartialEq)]
    pub struct Sample {
        pub name: String,
        pub labels: BTreeMap<String, String>,
        pub value: f64,
    }

    fn parse_value(v: &str) -> Option<f64> {
        match v {
            "+Inf" | "Inf" => Some(f64::INFINITY),
            "-Inf" => Some(f64::NEG_INFINITY),
            "NaN" => Some(f64::NAN),
            v => v.parse().ok(),
        }
    }

    /// Every sample line of a text exposition (comments and `# EOF` skipped).
    pub fn parse(text: &str) -> Vec<Sample> {
        let mut out = Vec::new();
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
            let (name, labels, rest) = match line.find('{') {
                Some(open) => {
                    let Some(close) = line[open..].find('}').map(|c| open + c) else { continue };
                    (&line[..open], &line[open + 1..close], &line[close + 1..])
                }
                None => match line.split_once(' ') {
                    Some((n, r)) => (n, "", r),
                    None => continue,
                },
            };
            let Some(value) = rest.split_whitespace().next().and_then(parse_value) else { continue };
            let mut map = BTreeMap::new();
            // Label values are quoted; rlm's never hold commas or quotes.
            for kv in labels.split(',').filter(|s| !s.trim().is_empty()) {
                if let Some((k, v)) = kv.split_once('=') {
                    map.insert(k.trim().to_string(), v.trim().trim_matches('"').to_string());
                }
            }
            out.push(Sample { name: name.to_string(), labels: map, value });
        }
        out
    }

    /// A counter family by one label: `name` or `name_total` (OpenMetrics adds the suffix).
    pub fn by_label(samples: &[Sample], name: &str, label: &str) -> BTreeMap<String, f64> {
        let total = format!("{name}_total");
        let mut out = BTreeMap::new();
        for s in samples.iter().filter(|s| s.name == name || s.name == total) {
            if let Some(l) = s.labels.get(label) {
                *out.entry(l.clone()).or_insert(0.0) += s.value;
            }
        }
        out
    }

    /// A histogram's cumulative buckets (upper bound, count), ascending, summed over labels
    /// other than `le`.
    pub fn histogram(samples: &[Sample], name: &str) -> Vec<(f64, f64)> {
        let bucket = format!("{name}_bucket");
        let mut by_le: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
        for s in samples.iter().filter(|s| s.name == bucket) {
            if let Some(le) = s.labels.get("le").and_then(|v| parse_value(v)) {
                // Ordered by the bound's bits: positive floats order like their bit patterns.
                by_le.entry(le.to_bits()).or_insert((le, 0.0)).1 += s.value;
            }
        }
        by_le.into_values().collect()
    }

    /// The q-quantile (0..1) of a cumulative histogram, interpolated linearly within its bucket
    /// (as Prometheus' histogram_quantile does); None when it is empty. A quantile in the +Inf
    /// bucket is the largest finite bound.
    pub fn quantile(buckets: &[(f64, f64)], q: f64) -> Option<f64> {
        let total = buckets.last()?.1;
        if total <= 0.0 {
            return None;
        }
        let rank = q * total;
        let (mut lo_bound, mut lo_count) = (0.0, 0.0);
        for &(le, count) in buckets {
            if count >= rank {
                if le.is_infinite() {
                    return Some(lo_bound);
                }
                let within = if count > lo_count { (rank - lo_count) / (count - lo_count) } else { 1.0 };
                return Some(lo_bound + (le - lo_bound) * within);
            }
            (lo_bound, lo_count) = (le, count);
        }
        Some(lo_bound)
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        const TEXT: &str = "# HELP rlm_syn_drops SYNs dropped by rules, by the client's class.\n\
            # TYPE rlm_syn_drops counter\n\
            rlm_syn_drops_total{class=\"LOW\"} 42\n\
            rlm_syn_drops_total{class=\"HIGH\"} 0\n\
            rlm_verdicts_total{verdict=\"accept\"} 1000\n\
            rlm_verdicts_total{verdict=\"drop\"} 42\n\
            # TYPE rlm_verdict_latency_seconds histogram\n\
            rlm_verdict_latency_seconds_sum 0.05\n\
            rlm_verdict_latency_seconds_count 100\n\
            rlm_verdict_latency_seconds_bucket{le=\"1e-6\"} 0\n\
            rlm_verdict_latency_seconds_bucket{le=\"2e-6\"} 10\n\
            rlm_verdict_latency_seconds_bucket{le=\"4e-6\"} 60\n\
            rlm_verdict_latency_seconds_bucket{le=\"8e-6\"} 98\n\
            rlm_verdict_latency_seconds_bucket{le=\"+Inf\"} 100\n\
            rlm_connections 7\n\
            # EOF\n";

        #[test]
        fn counters_and_histogram_quantiles() {
            let s = parse(TEXT);
            assert_eq!(s.len(), 12);
            let d = by_label(&s, "rlm_syn_drops", "class");
            assert_eq!(d["LOW"], 42.0);
            assert_eq!(d["HIGH"], 0.0);
            assert_eq!(by_label(&s, "rlm_verdicts", "verdict")["drop"], 42.0);
            assert_eq!(s.iter().find(|x| x.name == "rlm_connections").unwrap().value, 7.0);
            let h = histogram(&s, "rlm_verdict_latency_seconds");
            assert_eq!(h.len(), 5);
            // The median is in (2, 4] µs: 40 of the 50 samples it needs past the 10 below 2 µs.
            let p50 = quantile(&h, 0.5).unwrap();
            assert!((p50 - 3.6e-6).abs() < 1e-12, "{p50}");
            // The 99th is in the +Inf bucket: the largest finite bound.
            assert_eq!(quantile(&h, 0.99).unwrap(), 8e-6);
            assert_eq!(quantile(&[], 0.5), None);
            assert_eq!(quantile(&[(1.0, 0.0), (f64::INFINITY, 0.0)], 0.5), None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_table_names_a_child_and_its_parent() {
        // A child whose name holds a space and a parenthesis, as /proc/PID/stat allows.
        let dir = std::env::temp_dir().join(format!("rlm-proc-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let exe = dir.join("a (b");
        std::fs::copy("/bin/sleep", &exe).unwrap();
        let mut child = Command::new(&exe).arg("30").spawn().unwrap();
        let me = std::process::id();
        let found = processes().find(|(p, _, _)| *p == child.id());
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(found, Some((child.id(), "a (b".to_string(), me)));
    }

    #[test]
    fn injection_counters_from_status() {
        let status = serde_json::json!({
            "state": "running",
            "stats": {"transactions": 10, "fast_syns_sent": 4, "fast_synacks_sent": 7, "syns_delayed": 0, "inject_denied": 1},
            "injector": {"sent": 11, "failed": 0, "no_mac": 2, "iface": "app-c"}
        });
        let c = injection_counters(&status);
        let want: BTreeMap<String, f64> = [
            ("fast_syns_sent", 4.0),
            ("fast_synacks_sent", 7.0),
            ("syns_delayed", 0.0),
            ("inject_denied", 1.0),
            ("injector_sent", 11.0),
            ("injector_failed", 0.0),
            ("injector_no_mac", 2.0),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(c, want);
        // An rlm without the counters (or no /status at all): nothing recorded.
        assert!(injection_counters(&serde_json::json!({"stats": {"transactions": 3}})).is_empty());
        assert!(injection_counters(&serde_json::Value::Null).is_empty());
    }
}

/// rlm's status page, published on the host's loopback while an arm runs (rlm serves it on the
/// appliance namespace's own loopback, which no browser on the host reaches): each connection to
/// the host's `127.0.0.1:9464` (or a free port if that one is taken) is relayed to the page.
/// Stops accepting when dropped; a relayed connection ends when either side closes (a page's
/// event stream when rlm stops).
pub struct PageRelay {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl PageRelay {
    /// Relay to rlm's page in namespace `ns`; call from a thread in the host's namespace.
    pub fn start(ns: &str) -> Result<PageRelay> {
        let listener = std::net::TcpListener::bind(("127.0.0.1", METRICS_PORT)).or_else(|_| std::net::TcpListener::bind(("127.0.0.1", 0)))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let (stop, ns) = (stop.clone(), ns.to_string());
            move || {
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((client, _)) => {
                            let ns = ns.clone();
                            std::thread::spawn(move || relay(client, &ns));
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(100)),
                    }
                }
            }
        });
        Ok(PageRelay { addr, stop, thread: Some(thread) })
    }

    /// The page's address on the host.
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }
}

impl Drop for PageRelay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Copy both ways between `client` and rlm's page in `ns` until either side closes.
fn relay(client: TcpStream, ns: &str) {
    let _ = client.set_nonblocking(false);
    let Ok(()) = crate::netns::enter(ns) else { return };
    let Ok(upstream) = TcpStream::connect(("127.0.0.1", METRICS_PORT)) else { return };
    let (Ok(mut c2), Ok(mut u2)) = (client.try_clone(), upstream.try_clone()) else { return };
    let up = std::thread::spawn(move || {
        let _ = std::io::copy(&mut c2, &mut u2);
        let _ = u2.shutdown(std::net::Shutdown::Write);
    });
    let (mut u, mut c) = (upstream, client);
    let _ = std::io::copy(&mut u, &mut c);
    let _ = c.shutdown(std::net::Shutdown::Both);
    let _ = up.join();
}
