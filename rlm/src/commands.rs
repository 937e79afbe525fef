//! The appliance's commands other than `analyze`: `run` (inline on a bridge) and `status`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use rlm::live::records::RecordOutputs;
use rlm::live::{self, RunConfig};

/// `rlm run`'s flags; each overrides the same key of `--config`.
#[derive(Args, Debug, Default)]
pub struct RunArgs {
    #[command(flatten)]
    pub at: BridgeArgs,
    /// The rule file (`rlm check FILE` validates it).
    #[arg(long, value_name = "FILE")]
    pub rules: Option<PathBuf>,
    /// Where /metrics and /status listen (default 127.0.0.1:9464).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<SocketAddr>,
    /// A TCP port the servers listen on (repeatable; default 80).
    #[arg(long = "server-ports", value_name = "PORT", num_args = 1..)]
    pub server_ports: Vec<u16>,
    /// First NFQUEUE number.
    #[arg(long, value_name = "N")]
    pub queue_base: Option<u16>,
    /// How many NFQUEUEs (flows are balanced across them).
    #[arg(long, value_name = "N")]
    pub queues: Option<u16>,
    /// Packets each queue may hold before the kernel accepts unseen (fail-open).
    #[arg(long, value_name = "N")]
    pub queue_max_len: Option<u32>,
    /// How to see packets: ebpf (kernel fast path, default) or pcap (NFQUEUE for every SYN and
    /// a libpcap tap).
    #[arg(long, value_enum)]
    pub observer: Option<live::config::Observer>,
    /// Mark bit(s) with which the eBPF fast path sends a SYN to NFQUEUE for a verdict.
    #[arg(long, value_name = "MASK", value_parser = parse_u32_any_base)]
    pub queue_mark: Option<u32>,
    /// Bytes of each packet the measurement tap copies (pcap).
    #[arg(long, value_name = "BYTES")]
    pub tap_snaplen: Option<u32>,
    /// The clients' connect timeout charged to a failed connection, in seconds.
    #[arg(long, value_name = "SECONDS")]
    pub connect_timeout: Option<f64>,
    /// Window of the per-class response-time aggregates, in seconds.
    #[arg(long, value_name = "SECONDS")]
    pub class_window: Option<f64>,
    /// Do not send frames: FAST SYN, FAST SYN/ACK, DELAY FIRST SYN, REJECT, LIMIT REQUESTS and ABORT IDLE are only counted, and SYNs without a verdict in the kernel go through NFQUEUE.
    #[arg(long)]
    pub no_inject: bool,
    /// Do not rewrite content: REMOVE EMBEDS and REWRITE EMBEDS are only counted.
    #[arg(long)]
    pub no_adapt: bool,
    /// Frames a class may inject per completed handshake of its clients.
    #[arg(long, value_name = "N")]
    pub inject_per_handshake: Option<f64>,
    /// Most frames a class may inject at once (its budget starts full).
    #[arg(long, value_name = "N")]
    pub inject_burst: Option<f64>,
    /// Most frames injected per second over all classes.
    #[arg(long, value_name = "N")]
    pub inject_max_per_s: Option<f64>,
    /// Most fast retransmissions of one SYN or SYN/ACK.
    #[arg(long, value_name = "N")]
    pub fast_limit: Option<u32>,
    /// Held SYNs released per second and class when HALT FAST SYN lets go.
    #[arg(long, value_name = "N")]
    pub fast_release_per_s: Option<f64>,
    /// Log JSON lines instead of text.
    #[arg(long)]
    pub log_json: bool,
    /// Write one JSON line per finished transaction to this file (`-`: standard output): the
    /// records `rlm analyze --transactions` writes.
    #[arg(long, value_name = "FILE")]
    pub transactions: Option<PathBuf>,
    /// Write one JSON line per finished pageview to this file (`-`: standard output).
    #[arg(long, value_name = "FILE")]
    pub pageviews: Option<PathBuf>,
    /// Write one JSON line per decision a rule took (a SYN dropped; once per connection a SYN or
    /// SYN/ACK kept to resend; once per reference a reference blanked or a request rewritten) to
    /// this file (`-`: standard output).
    #[arg(long, value_name = "FILE")]
    pub decisions: Option<PathBuf>,
    /// Rotate a record file once it passes this many bytes (0: never; SIGHUP reopens the files
    /// after logrotate either way).
    #[arg(long, value_name = "BYTES")]
    pub records_max_bytes: Option<u64>,
    /// Rotated record files kept (FILE.1 the newest; default 5).
    #[arg(long, value_name = "N")]
    pub records_keep: Option<usize>,
    /// Records waiting to be written; past it records are dropped and counted, packets never
    /// wait (default 16384).
    #[arg(long, value_name = "N")]
    pub records_queue: Option<usize>,
    /// SRPT on the client port's egress: off, fair (shaped, one FIFO) or srpt.
    #[arg(long, value_enum, value_name = "MODE")]
    pub srpt: Option<rlm::live::config::SrptRunMode>,
    /// The link's real rate toward the clients, bits per second (fair and srpt).
    #[arg(long, value_name = "BPS")]
    pub srpt_link_bps: Option<u64>,
    /// rlm shapes the port at this percentage of the link rate.
    #[arg(long, value_name = "PCT")]
    pub srpt_rate_pct: Option<f64>,
    /// Response-size cutoffs in bytes, increasing (e.g. 1024,2048,5120,20480,51200).
    #[arg(long, value_name = "BYTES", value_delimiter = ',')]
    pub srpt_cutoffs: Vec<u32>,
    /// Bytes HTB adds to each packet for the wire (0: none).
    #[arg(long, value_name = "BYTES")]
    pub srpt_overhead: Option<u32>,
    /// Packets each band's FIFO holds.
    #[arg(long, value_name = "N")]
    pub srpt_band_limit: Option<u32>,
    /// The lowest data band's guaranteed share of the shaped rate, percent (0: none).
    #[arg(long, value_name = "PCT")]
    pub srpt_floor_pct: Option<f64>,
    /// Where the classifier's per-flow state is pinned (a BPF filesystem; "" : not kept).
    #[arg(long, value_name = "DIR")]
    pub srpt_state_dir: Option<String>,
    /// Leave the pinned state at exit, for a planned restart.
    #[arg(long)]
    pub srpt_keep_state: bool,
    /// How the eBPF programs are attached: auto (tcx where the kernel has it, else clsact) or
    /// clsact (clsact filters even where tcx exists).
    #[arg(long, value_enum, value_name = "HOW")]
    pub ebpf_attach: Option<live::config::EbpfAttach>,
    /// What the kernel does with a client's SYN it has no verdict for: hold (hand it to rlm,
    /// which sends it on after deciding; no netfilter for SYNs) or queue (NFQUEUE through
    /// br_netfilter).
    #[arg(long, value_enum, value_name = "HOW")]
    pub undecided_syns: Option<live::config::UndecidedSyns>,
    /// Engines side by side (`[ebpf] engines`, 1 to 8, default 1), one thread each, the kernel
    /// dealing each client's packets to one of them: with the eBPF fast path and held SYNs,
    /// without content adaptation, REJECT, ABORT IDLE or SLA targets.
    #[arg(long, value_name = "N")]
    pub engines: Option<usize>,
    /// Each engine's ring of reports in MiB (`[ebpf] ring_mb`, a power of two, default 16).
    #[arg(long, value_name = "MIB")]
    pub ring_mb: Option<u32>,
    /// rlm's memory budget in MiB (`[limits] memory_mb`, default 128): the connections tracked,
    /// the bytes held for later, the pageview lists and the records' queue are derived from it.
    #[arg(long, value_name = "MIB")]
    pub memory_mb: Option<u64>,
    /// Make a fault, for the fail-open tests: `panic-after=SECS` (the event loop panics).
    #[arg(long, hide = true, value_name = "FAULT")]
    pub fault: Option<live::config::Fault>,
}

/// Where rlm sits, for `rlm run` and `rlm cleanup`: the configuration file and the bridge and
/// ports, each flag overriding its key of the file.
#[derive(Args, Debug, Default)]
pub struct BridgeArgs {
    /// A TOML file with `rlm run`'s settings (see rlm.sample.toml); flags override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The bridge rlm sits on.
    #[arg(long, value_name = "BR")]
    pub bridge: Option<String>,
    /// The bridge port toward the clients.
    #[arg(long, value_name = "IF")]
    pub client_port: Option<String>,
    /// The bridge port toward the servers.
    #[arg(long, value_name = "IF")]
    pub server_port: Option<String>,
}

impl BridgeArgs {
    /// The configuration file read (or the defaults), with the bridge and ports given here.
    fn load(self) -> anyhow::Result<RunConfig> {
        let mut c = match &self.config {
            Some(p) => RunConfig::from_file(p)?,
            None => RunConfig::default(),
        };
        if let Some(v) = self.bridge {
            c.bridge = v;
        }
        if let Some(v) = self.client_port {
            c.client_port = v;
        }
        if let Some(v) = self.server_port {
            c.server_port = v;
        }
        Ok(c)
    }
}

impl RunArgs {
    fn into_config(self) -> anyhow::Result<RunConfig> {
        let mut c = self.at.load()?;
        if self.rules.is_some() {
            c.rules = self.rules;
        }
        if let Some(v) = self.metrics {
            c.metrics = v;
        }
        if !self.server_ports.is_empty() {
            c.server_ports = self.server_ports;
        }
        if let Some(v) = self.queue_base {
            c.queue_base = v;
        }
        if let Some(v) = self.queues {
            c.queues = v;
        }
        if let Some(v) = self.queue_max_len {
            c.queue_max_len = v;
        }
        if let Some(v) = self.observer {
            c.observer = v;
        }
        if let Some(v) = self.queue_mark {
            c.queue_mark = v;
        }
        if let Some(v) = self.tap_snaplen {
            c.tap_snaplen = v;
        }
        if let Some(v) = self.connect_timeout {
            c.connect_timeout_s = v;
        }
        if let Some(v) = self.class_window {
            c.class_window_s = v;
        }
        c.inject &= !self.no_inject;
        c.adapt &= !self.no_adapt;
        if let Some(v) = self.inject_per_handshake {
            c.inject_per_handshake = v;
        }
        if let Some(v) = self.inject_burst {
            c.inject_burst = v;
        }
        if let Some(v) = self.inject_max_per_s {
            c.inject_max_per_s = v;
        }
        if let Some(v) = self.fast_limit {
            c.fast_limit = v;
        }
        if let Some(v) = self.fast_release_per_s {
            c.fast_release_per_s = v;
        }
        c.log_json |= self.log_json;
        if self.transactions.is_some() {
            c.transactions = self.transactions;
        }
        if self.pageviews.is_some() {
            c.pageviews = self.pageviews;
        }
        if self.decisions.is_some() {
            c.decisions = self.decisions;
        }
        if let Some(v) = self.records_max_bytes {
            c.records_max_bytes = v;
        }
        if let Some(v) = self.records_keep {
            c.records_keep = v;
        }
        if let Some(v) = self.records_queue {
            c.records_queue = v;
        }
        if let Some(v) = self.srpt {
            c.srpt.mode = v;
        }
        if let Some(v) = self.srpt_link_bps {
            c.srpt.link_bps = v;
        }
        if let Some(v) = self.srpt_rate_pct {
            c.srpt.rate_pct = v;
        }
        if !self.srpt_cutoffs.is_empty() {
            c.srpt.cutoffs = self.srpt_cutoffs;
        }
        if let Some(v) = self.srpt_overhead {
            c.srpt.overhead_bytes = v;
        }
        if let Some(v) = self.srpt_band_limit {
            c.srpt.band_limit_packets = v;
        }
        if let Some(v) = self.srpt_floor_pct {
            c.srpt.floor_pct = v;
        }
        if let Some(v) = self.srpt_state_dir {
            c.srpt.state_dir = v;
        }
        c.srpt.keep_state_on_exit |= self.srpt_keep_state;
        if let Some(v) = self.ebpf_attach {
            c.ebpf.attach = v;
        }
        if let Some(v) = self.undecided_syns {
            c.ebpf.undecided_syns = v;
        }
        if let Some(v) = self.engines {
            c.ebpf.engines = v;
        }
        if let Some(v) = self.ring_mb {
            c.ebpf.ring_mb = v;
        }
        if let Some(v) = self.memory_mb {
            c.limits.memory_mb = v;
        }
        c.fault = self.fault;
        Ok(c)
    }

    /// The settings and where the records go. The outputs are checked here, before anything is
    /// opened or installed and without privileges: one that would overwrite the rule file, the
    /// configuration file or another output is a usage error.
    fn into_settings(self) -> anyhow::Result<(RunConfig, RecordOutputs)> {
        let config_file = self.at.config.clone();
        let c = self.into_config()?;
        let outputs = c.record_outputs(config_file.as_deref())?;
        Ok((c, outputs))
    }
}

/// `rlm cleanup`'s flags; each overrides the same key of `--config`.
#[derive(Args, Debug, Default)]
pub struct CleanupArgs {
    /// (Only the configuration's bridge and ports are read.)
    #[command(flatten)]
    pub at: BridgeArgs,
}

impl CleanupArgs {
    fn into_plan(self) -> anyhow::Result<live::cleanup::CleanupPlan> {
        let c = self.at.load()?;
        let plan = live::cleanup::CleanupPlan { bridge: c.bridge, client_port: c.client_port, server_port: c.server_port };
        if plan.bridge.is_empty() || plan.client_port.is_empty() || plan.server_port.is_empty() {
            anyhow::bail!("--bridge, --client-port and --server-port are required (or bridge, client_port, server_port in the config)");
        }
        Ok(plan)
    }
}

/// `rlm cleanup`: remove what an `rlm run` that did not exit cleanly left.
pub fn cleanup(args: CleanupArgs) -> ExitCode {
    let plan = match args.into_plan() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("rlm: {}", one_line(&e));
            return ExitCode::from(2);
        }
    };
    match live::check_privileges().and_then(|()| live::cleanup::run(&plan)) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rlm: {}", one_line(&e));
            ExitCode::from(1)
        }
    }
}

/// `0x800000` or `8388608`.
fn parse_u32_any_base(s: &str) -> Result<u32, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u32::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|e| format!("{s}: {e}"))
}

fn one_line(e: &anyhow::Error) -> String {
    format!("{e:#}").replace('\n', " ")
}

pub fn run(args: RunArgs) -> ExitCode {
    let (cfg, outputs) = match args.into_settings() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("rlm: {}", one_line(&e));
            return ExitCode::from(2);
        }
    };
    init_log(cfg.log_json);
    match live::run(cfg, outputs) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rlm: {}", one_line(&e));
            ExitCode::from(1)
        }
    }
}

/// Logs on stderr, text or JSON lines; under systemd (stderr is the journal's: `JOURNAL_STREAM`
/// names it) and without `--log-json`, straight to journald instead, each event's fields as
/// journal fields and its level as the priority (`journalctl -u rlm -p warning`, `RULE=...`).
fn init_log(json: bool) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    if !json && stderr_is_journal() {
        if let Ok(journald) = tracing_journald::layer() {
            tracing_subscriber::registry().with(filter).with(journald.with_syslog_identifier("rlm".into())).init();
            return;
        }
    }
    if json {
        tracing_subscriber::fmt().json().with_env_filter(filter).with_writer(std::io::stderr).init();
    } else {
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    }
}

/// Whether stderr is the journal's stream (systemd sets `JOURNAL_STREAM` to its `device:inode`).
fn stderr_is_journal() -> bool {
    use std::os::unix::fs::MetadataExt;
    let Some(want) = std::env::var_os("JOURNAL_STREAM") else { return false };
    let Ok(meta) = std::fs::metadata("/proc/self/fd/2") else { return false };
    want.to_string_lossy() == format!("{}:{}", meta.dev(), meta.ino())
}

/// `rlm guard` (hidden): `rlm run`'s guard process.
pub fn guard(plan: &str, log_json: bool) -> ExitCode {
    init_log(log_json);
    live::guard::main(plan)
}

/// `rlm status`: ask a running rlm (its /status endpoint) and print what it says.
pub fn status(addr: SocketAddr, token_file: Option<&Path>) -> ExitCode {
    let token = match token_file.map(rlm::live::metrics::read_token).transpose() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("rlm: {e:#}");
            return ExitCode::from(2);
        }
    };
    match rlm::live::metrics::get_local(addr, "/status", token.as_deref()) {
        Ok(body) => {
            println!("{}", body.trim_end());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rlm: {e:#}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use clap::Parser;

    use super::*;

    /// `rlm run`'s flags alone.
    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        run: RunArgs,
    }

    fn parse(args: &[&str]) -> RunArgs {
        Cmd::try_parse_from(std::iter::once("rlm-run").chain(args.iter().copied())).unwrap().run
    }

    /// A fresh directory of test `name`'s own.
    fn temp_dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rlm-run-args-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn record_flags_override_the_config_file_key_by_key() {
        let d = temp_dir("override");
        let toml = d.join("rlm.toml");
        let keys = [
            "transactions = \"/var/log/rlm/tx.jsonl\"",
            "pageviews = \"/var/log/rlm/pv.jsonl\"",
            "records_max_bytes = 1000",
            "records_keep = 2",
            "records_queue = 64",
        ];
        std::fs::write(&toml, keys.join("\n")).unwrap();
        let config = toml.to_str().unwrap();
        // Without flags: the file's.
        let c = parse(&["--config", config]).into_config().unwrap();
        assert_eq!(
            (c.transactions.as_deref(), c.pageviews.as_deref(), c.decisions.as_deref()),
            (Some(Path::new("/var/log/rlm/tx.jsonl")), Some(Path::new("/var/log/rlm/pv.jsonl")), None)
        );
        assert_eq!((c.records_max_bytes, c.records_keep, c.records_queue), (1000, 2, 64));
        // Each flag wins over its key; the keys no flag names stay the file's.
        let flags = "--pageviews /tmp/pv.jsonl --decisions - --records-max-bytes 0 --records-keep 7 --records-queue 128";
        let args: Vec<&str> = ["--config", config].into_iter().chain(flags.split_whitespace()).collect();
        let c = parse(&args).into_config().unwrap();
        assert_eq!(
            (c.transactions.as_deref(), c.pageviews.as_deref(), c.decisions.as_deref()),
            (Some(Path::new("/var/log/rlm/tx.jsonl")), Some(Path::new("/tmp/pv.jsonl")), Some(Path::new("-")))
        );
        assert_eq!((c.records_max_bytes, c.records_keep, c.records_queue), (0, 7, 128));
        // No file: the defaults.
        let c = parse(&[]).into_config().unwrap();
        assert_eq!((c.transactions, c.pageviews, c.decisions), (None, None, None));
        assert_eq!((c.records_max_bytes, c.records_keep, c.records_queue), (0, 5, 16_384));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn outputs_from_flags_and_file_together_are_checked_before_anything_is_opened() {
        let d = temp_dir("check");
        let (toml, pv) = (d.join("rlm.toml"), d.join("pv.jsonl"));
        std::fs::write(&toml, format!("pageviews = {:?}\n", pv.to_str().unwrap())).unwrap();
        let (config, pv_arg) = (toml.to_str().unwrap(), pv.to_str().unwrap());
        // A flag naming the file's output for another kind.
        let e = parse(&["--config", config, "--transactions", pv_arg]).into_settings().unwrap_err();
        assert!(e.is::<rlm::records::UsageError>(), "{e:#}");
        assert!(format!("{e:#}").contains("are the same file"), "{e:#}");
        // The flag that overrides the key lifts the collision.
        let other = d.join("other.jsonl");
        let (_, outputs) = parse(&["--config", config, "--transactions", pv_arg, "--pageviews", other.to_str().unwrap()]).into_settings().unwrap();
        assert_eq!(outputs.transactions, Some(rlm::records::Dest::File(pv.clone())));
        assert_eq!(outputs.pageviews, Some(rlm::records::Dest::File(other.clone())));
        // The configuration file is an input.
        let e = parse(&["--config", config, "--decisions", config]).into_settings().unwrap_err();
        assert!(format!("{e:#}").contains("is the configuration file; refusing to overwrite it"), "{e:#}");
        let e = parse(&["--pageviews", "-", "--decisions", "-"]).into_settings().unwrap_err();
        assert!(format!("{e:#}").contains("only one output may be `-`"), "{e:#}");
        assert!(!pv.exists() && !other.exists(), "nothing is created");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
