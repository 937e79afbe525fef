//! `rlm run`'s settings: a TOML file (`--config`), each setting also a flag that overrides it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Deserialize;

use super::records::{RecordOutputs, WriterOptions};
use crate::records::{check_outputs, Protected, UsageError};

/// Everything `rlm run` needs. Field names are the TOML keys (see `rlm.sample.toml`).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RunConfig {
    /// The bridge rlm sits on, and its two ports.
    pub bridge: String,
    pub client_port: String,
    pub server_port: String,
    /// The rule file (004 section 6's language; `rlm check` validates it).
    pub rules: Option<PathBuf>,
    /// Prometheus `/metrics`, the JSON `/status`, the status page (`/`) and its live view
    /// (`/view`, `/events`); localhost unless said otherwise.
    pub metrics: SocketAddr,
    /// A file holding the token every request to `metrics` must carry (`Authorization: Bearer
    /// TOKEN`, or `?token=TOKEN` for the page in a browser); required when `metrics` is not a
    /// loopback address.
    pub status_token_file: Option<PathBuf>,
    /// TCP ports the servers listen on.
    pub server_ports: Vec<u16>,
    /// NFQUEUE numbers `queue_base ..= queue_base + queues - 1`, balanced by flow.
    pub queue_base: u16,
    pub queues: u16,
    /// Packets each queue may hold before the kernel accepts further ones unseen (fail-open).
    pub queue_max_len: u32,
    /// How rlm sees the packets it measures and admits SYNs: `ebpf` (the kernel fast path: SYNs
    /// decided in the kernel from the engine's verdicts, packets reported through a ring buffer)
    /// or `pcap` (every client SYN queued, a libpcap tap on the server port).
    pub observer: Observer,
    /// The packet mark bit(s) with which the fast path sends a SYN to NFQUEUE for a verdict
    /// (`ebpf` only); pick bits no other rule on the box uses.
    pub queue_mark: u32,
    /// Bytes of each packet the measurement tap copies (`pcap` only).
    pub tap_snaplen: u32,
    /// The clients' connect timeout charged to a failed connection, in seconds.
    pub connect_timeout_s: f64,
    /// Sliding window of the per-class response-time aggregates, in seconds.
    pub class_window_s: f64,
    /// Carry out the rule actions that send frames (`FAST SYN`, `FAST SYN/ACK`, `DELAY FIRST
    /// SYN`, `HALT FAST SYN`) from an AF_PACKET socket on each port; off: they are only counted.
    pub inject: bool,
    /// Injection budget: frames a class earns with each completed handshake, most it holds,
    /// and most frames per second in all (a flood from spoofed sources completes no handshake
    /// and gets no more than one burst).
    pub inject_per_handshake: f64,
    pub inject_burst: f64,
    pub inject_max_per_s: f64,
    /// Most fast retransmissions of one SYN or SYN/ACK.
    pub fast_limit: u32,
    /// SYNs held by `HALT FAST SYN` are released at most this many per second and class when it
    /// lets go.
    pub fast_release_per_s: f64,
    /// Carry out `REMOVE EMBEDS` (needs observer = "ebpf"): while such a rule is in force, the
    /// servers' IPv4 segments go through NFQUEUE and come out with the chosen references
    /// blanked; off (or with the pcap observer): the rules are only counted.
    pub adapt: bool,
    /// Log as JSON lines instead of text.
    pub log_json: bool,
    /// Write one JSON line per finished transaction, pageview, or decision a rule took, to this
    /// file (`-`: standard output, for one of them at most): the records `rlm analyze` writes.
    /// Transactions cost the engine their building, pageviews their event graph; neither is
    /// made without its output.
    pub transactions: Option<PathBuf>,
    pub pageviews: Option<PathBuf>,
    pub decisions: Option<PathBuf>,
    /// Rotate a record file (`F` to `F.1`, ..., up to `F.records_keep`) once it passes this many
    /// bytes; 0: never (logrotate and SIGHUP work either way).
    pub records_max_bytes: u64,
    /// Rotated record files kept.
    pub records_keep: usize,
    /// Records waiting for the writer; records past it are dropped, counted, and no packet waits.
    pub records_queue: usize,
    /// SRPT on the outbound link (the `[srpt]` table).
    pub srpt: SrptConfig,
    /// How the eBPF programs are attached (the `[ebpf]` table).
    pub ebpf: EbpfConfig,
    /// How much memory rlm may use, and how it is shared (the `[limits]` table).
    pub limits: LimitsConfig,
    /// A fault rlm makes itself, for the fail-open tests (the hidden `--fault`; no TOML key).
    #[serde(skip)]
    pub fault: Option<Fault>,
}

/// A fault `rlm run` makes itself (`--fault`, hidden from `--help`): the fail-open tests use it
/// to see what an rlm that fails leaves behind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// `panic-after=SECS`: the event loop panics this long after it started (the panic unwinds,
    /// as a bug's would).
    PanicAfter(std::time::Duration),
}

impl std::str::FromStr for Fault {
    type Err = String;

    fn from_str(s: &str) -> Result<Fault, String> {
        match s.split_once('=') {
            Some(("panic-after", v)) => match v.parse::<f64>() {
                Ok(secs) if secs.is_finite() && (0.0..=86_400.0).contains(&secs) => Ok(Fault::PanicAfter(std::time::Duration::from_secs_f64(secs))),
                _ => Err(format!("{s}: panic-after takes seconds (0 to 86400)")),
            },
            _ => Err(format!("{s}: the only fault is panic-after=SECS")),
        }
    }
}

/// What rlm may hold in memory (`[limits]`): a whole budget, `memory_mb`, from which each
/// bounded part is derived unless it is given. What an attacker can make rlm keep (connections,
/// bytes held for later, pageview lists, records waiting for the writer) is bounded by these;
/// the rest is fixed, [`LimitsConfig::FIXED_MB`]: the fast path's ring buffer (16 MiB, mapped
/// into rlm twice, as the kernel maps a ring's data pages to read across its end: 32 MiB
/// resident once the ring has gone round) and a base (the binary and its libraries, the
/// runtime, the metrics, the class windows: 16 MiB).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// rlm's whole budget, in MiB (at least [`LimitsConfig::MIN_MB`]).
    pub memory_mb: u64,
    /// Connections tracked at once (the least recently seen are evicted past it).
    pub connections: Option<usize>,
    /// MiB all connections may hold for later: partial heads, requests waiting for their
    /// responses, out-of-order segments (the connections that began holding first are evicted).
    pub held_mb: Option<u64>,
    /// MiB the open pageviews' lists may hold (the oldest open pageview with no evidence of a
    /// real client is cut short, else the oldest).
    pub pageview_lists_mb: Option<u64>,
    /// MiB of records waiting for the writer (further records are dropped, counted).
    pub records_queue_mb: Option<u64>,
    /// Records a second of what nothing shows is real (a pageview with no evidence, an
    /// unanswered request on a connection the server never sent on, a dropped first SYN from
    /// an address with no handshake seen), each cut to 256 bytes a field; the rest are counted
    /// (`stats.records_unproven_skipped`), not written. Not memory: what an attacker can make
    /// rlm write to disk.
    pub unproven_records_per_s: u32,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig { memory_mb: 128, connections: None, held_mb: None, pageview_lists_mb: None, records_queue_mb: None, unproven_records_per_s: 20 }
    }
}

/// The bounds [`LimitsConfig`] derives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Limits {
    pub memory_mb: u64,
    pub max_connections: usize,
    pub max_held_bytes: usize,
    pub max_list_bytes: usize,
    pub records_queue_bytes: usize,
    pub unproven_records_per_s: u32,
}

impl LimitsConfig {
    /// The ring buffer as mapped (32 MiB) and the base (16 MiB).
    pub const FIXED_MB: u64 = 48;
    pub const MIN_MB: u64 = 64;
    /// Heap per tracked connection, its timers included: 5,000 connections of a SYN flood hold
    /// 3.7 MB, the table reserved whole (`rlm-core/tests/flood.rs`), so 1 KiB with a margin.
    pub const CONNECTION_BYTES: u64 = 1024;
    /// Shares of what is left past [`LimitsConfig::FIXED_MB`], in percent: connections, bytes
    /// held, pageview lists, the records' queue; the remaining 10% is for the other tables
    /// (class windows, learned sizes, client RTTs), bounded by their own caps.
    const SHARES: [u64; 4] = [48, 28, 6, 8];

    /// The bounds: each given one, or its share of `memory_mb` less the fixed part.
    pub fn derive(&self) -> Limits {
        let rest = self.memory_mb.saturating_sub(Self::FIXED_MB) << 20;
        let share = |i: usize| rest.saturating_mul(Self::SHARES[i]) / 100;
        let mb = |v: Option<u64>, i: usize| usize::try_from(v.map_or(share(i), |m| m.saturating_mul(1 << 20))).unwrap_or(usize::MAX);
        Limits {
            memory_mb: self.memory_mb,
            max_connections: self.connections.unwrap_or_else(|| usize::try_from(share(0) / Self::CONNECTION_BYTES).unwrap_or(usize::MAX)),
            max_held_bytes: mb(self.held_mb, 1),
            max_list_bytes: mb(self.pageview_lists_mb, 2),
            records_queue_bytes: mb(self.records_queue_mb, 3),
            unproven_records_per_s: self.unproven_records_per_s,
        }
    }

    /// Refused: a budget under [`LimitsConfig::MIN_MB`] or over 1 TiB, a part of 0, or parts
    /// given that add up to more than the budget less its fixed part.
    pub fn validate(&self) -> Result<()> {
        if !(Self::MIN_MB..=1 << 20).contains(&self.memory_mb) {
            bail!("[limits] memory_mb must be between {} and 1048576 (MiB)", Self::MIN_MB);
        }
        if self.connections == Some(0)
            || [self.held_mb, self.pageview_lists_mb, self.records_queue_mb].contains(&Some(0))
            || self.unproven_records_per_s == 0
        {
            bail!("[limits] connections, held_mb, pageview_lists_mb, records_queue_mb and unproven_records_per_s must be at least 1");
        }
        let l = self.derive();
        // Saturating: parts given in the billions of MiB must not wrap the sum under the budget.
        let used = (l.max_connections as u64)
            .saturating_mul(Self::CONNECTION_BYTES)
            .saturating_add(l.max_held_bytes as u64)
            .saturating_add(l.max_list_bytes as u64)
            .saturating_add(l.records_queue_bytes as u64);
        let room = (self.memory_mb - Self::FIXED_MB) << 20;
        if used > room {
            bail!(
                "[limits] the parts need {} MiB ({} connections at 1 KiB, held {} MiB, pageview lists {} MiB, records queue {} MiB) but memory_mb = {} leaves {} MiB past the fixed {} MiB",
                used >> 20,
                l.max_connections,
                l.max_held_bytes >> 20,
                l.max_list_bytes >> 20,
                l.records_queue_bytes >> 20,
                self.memory_mb,
                room >> 20,
                Self::FIXED_MB
            );
        }
        Ok(())
    }
}

/// The eBPF programs (`[ebpf]`): `syn_admit`, `observe`, and with `[srpt]` `classify` and
/// `srpt_acks`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct EbpfConfig {
    /// How they are attached to the ports.
    pub attach: EbpfAttach,
    /// What `syn_admit` does with a client's SYN it has no verdict for.
    pub undecided_syns: UndecidedSyns,
    /// Engines side by side, each on a thread of its own reading the ring of its clients
    /// (1 to 8; 0 is 1: the default). See `live::engines` for what several engines do not do.
    pub engines: usize,
    /// Each engine's ring of reports, in MiB (a power of two, 1 to 1024; 0: the default, 16):
    /// what the kernel can hold for an engine that is behind before it loses reports
    /// (`ring_full`).
    pub ring_mb: u32,
}

impl EbpfConfig {
    /// The engines to run: `engines`, 0 read as 1.
    pub fn engine_count(&self) -> usize {
        self.engines.max(1)
    }

    /// Each ring's size in bytes.
    pub fn ring_bytes(&self) -> u32 {
        match self.ring_mb {
            0 => kmod_fastpath::inline::Rings::default().bytes,
            mb => mb << 20,
        }
    }

    fn validate(&self) -> Result<()> {
        if self.ring_mb != 0 && !(self.ring_mb.is_power_of_two() && self.ring_mb <= 1024) {
            bail!("[ebpf] ring_mb must be a power of two from 1 to 1024 (got {})", self.ring_mb);
        }
        Ok(())
    }
}

/// What `syn_admit` does with a SYN it has no verdict for ([`EbpfConfig::undecided_syns`]).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum UndecidedSyns {
    /// The kernel hands it to rlm whole (waking it at once) and drops it; rlm decides it and
    /// sends it on out of the server port itself. No netfilter rule and no br_netfilter unless
    /// the rules carry out content adaptation or `REJECT`. Needs `inject = true` (else rlm
    /// queues them).
    #[default]
    Hold,
    /// The kernel marks it, and a netfilter rule sends it through NFQUEUE (br_netfilter on).
    Queue,
}

/// How the tc programs are attached ([`EbpfConfig::attach`]).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum EbpfAttach {
    /// tcx links where the kernel has tcx (6.6 and later), which go when rlm's process goes;
    /// clsact filters on older kernels.
    #[default]
    Auto,
    /// Filters of a clsact qdisc (netlink), as on kernels without tcx, even where tcx exists:
    /// they outlive rlm's process, and rlm's guard and its next start remove them.
    Clsact,
}

impl EbpfAttach {
    pub fn mode(self) -> kmod_fastpath::AttachMode {
        match self {
            EbpfAttach::Auto => kmod_fastpath::AttachMode::Auto,
            EbpfAttach::Clsact => kmod_fastpath::AttachMode::Clsact,
        }
    }
}

/// What the client port's egress does ([`SrptConfig::mode`]).
#[derive(Clone, Copy, Debug, Default, Deserialize, serde::Serialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum SrptRunMode {
    /// rlm leaves the link alone (it never shapes a link whose rate it was not told).
    #[default]
    Off,
    /// The baseline: the link shaped, one FIFO class.
    Fair,
    /// The link shaped, strict-priority bands by each response's remaining bytes (002).
    Srpt,
}

/// SRPT priority classes on the client port's egress (002 section 2, 000 section 3).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SrptConfig {
    pub mode: SrptRunMode,
    /// The real rate of the link toward the clients, bits per second (required for fair/srpt).
    pub link_bps: u64,
    /// rlm shapes the port at this share of `link_bps`, a little under it, so that the queue
    /// forms in rlm's bands and not further down.
    pub rate_pct: f64,
    /// Response-size cutoffs in bytes (head included), 1 to 6, increasing: the data bands'
    /// boundaries. 002's rule for choosing them: the smallest leaves about half of the responses
    /// below it, the largest leaves 0.5 to 1% above it (docs/deployment.md).
    pub cutoffs: Vec<u32>,
    /// Packets each band's FIFO holds. 000's server queued 100 packets in its NIC and the rest
    /// in its sockets; a bump in the wire holds the whole backlog, and a starved band must not
    /// drop what the server will only resend after its RTO: 1000.
    pub band_limit_packets: u32,
    /// Bytes HTB adds to each packet for the wire (preamble, FCS, gap: 24; 0: none).
    pub overhead_bytes: u32,
    /// Resends of the lowest data band's bytes go to a band of their own below it: when that
    /// band starves past a server's RTO, the server resends segments still queued in rlm, and
    /// the copies would otherwise take the starved band's capacity (at most 5 cutoffs then).
    pub resend_band: bool,
    /// The lowest data band's guaranteed share of the shaped rate, percent (0: none, the 8 kbit
    /// of every leaf). In a bump in the wire a starved band's packets are in flight for the
    /// server: past its RTO it backs off and resends, and the largest responses pay for it.
    pub floor_pct: f64,
    /// Where the classifier's per-flow state is pinned (a BPF filesystem), in a directory named
    /// after the client port, so that a restarted rlm goes on ranking the flows under way
    /// ("": not kept). Without a BPF filesystem there, rlm warns and runs without.
    pub state_dir: String,
    /// Leave the pinned state at a clean exit too (a planned restart); by default rlm removes it
    /// and keeps it only when it did not exit cleanly.
    pub keep_state_on_exit: bool,
}

impl Default for SrptConfig {
    fn default() -> Self {
        SrptConfig {
            mode: SrptRunMode::Off,
            link_bps: 0,
            rate_pct: 95.0,
            cutoffs: kmod_fastpath::classify::DEFAULT_CUTOFFS.to_vec(),
            band_limit_packets: 1000,
            overhead_bytes: 24,
            resend_band: true,
            floor_pct: 0.0,
            state_dir: "/sys/fs/bpf/rlm".into(),
            keep_state_on_exit: false,
        }
    }
}

impl SrptConfig {
    /// The rate rlm shapes the port at, bits per second.
    pub fn rate_bps(&self) -> u64 {
        (self.link_bps as f64 * self.rate_pct / 100.0) as u64
    }

    /// Where the state of the classifier on `client_port` is pinned, if it is kept.
    pub fn state_path(&self, client_port: &str) -> Option<std::path::PathBuf> {
        (!self.state_dir.is_empty()).then(|| std::path::Path::new(&self.state_dir).join(client_port))
    }

    /// The lowest data band and its guaranteed rate (SRPT with a floor only).
    pub fn floor(&self) -> Option<(u32, u64)> {
        let bps = (self.rate_bps() as f64 * self.floor_pct / 100.0) as u64;
        (self.mode == SrptRunMode::Srpt && bps > 0).then(|| (self.params(0).other_band, bps))
    }

    pub fn validate(&self, observer: Observer) -> Result<()> {
        if self.mode == SrptRunMode::Off {
            return Ok(());
        }
        if observer != Observer::Ebpf {
            bail!("[srpt] mode = fair or srpt needs observer = \"ebpf\" (the classifier is an eBPF program)");
        }
        if self.link_bps < 64_000 {
            bail!("[srpt] link_bps must be the link's rate toward the clients, at least 64000 bits/s (got {})", self.link_bps);
        }
        if !(self.rate_pct > 50.0 && self.rate_pct <= 100.0) {
            bail!("[srpt] rate_pct must be over 50 and at most 100 (got {})", self.rate_pct);
        }
        if !(1..=100_000).contains(&self.band_limit_packets) || self.overhead_bytes > 256 {
            bail!("[srpt] band_limit_packets must be 1 to 100000, overhead_bytes at most 256");
        }
        if !(0.0..=50.0).contains(&self.floor_pct) {
            bail!("[srpt] floor_pct must be 0 to 50 (got {})", self.floor_pct);
        }
        self.params(0).validate().map_err(|e| anyhow::anyhow!("[srpt] {e}"))
    }

    /// The classifier's parameters, band 0 at classid `base`, other traffic in the lowest data
    /// band.
    pub fn params(&self, base: u32) -> kmod_fastpath::SrptParams {
        let mode = if self.mode == SrptRunMode::Fair { kmod_fastpath::SrptMode::Fair } else { kmod_fastpath::SrptMode::Srpt };
        let mut p = kmod_fastpath::SrptParams::new(mode, base);
        p.cutoffs = self.cutoffs.clone();
        p.other_band = self.cutoffs.len() as u32 + 1;
        p.resend_band = self.resend_band;
        p
    }

    /// The leaves of rlm's tree: one for FAIR, every band for SRPT.
    pub fn leaves(&self) -> u32 {
        match self.mode {
            SrptRunMode::Off => 0,
            SrptRunMode::Fair => 1,
            SrptRunMode::Srpt => self.params(0).bands(),
        }
    }
}

/// How `rlm run` sees packets ([`RunConfig::observer`]).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Observer {
    /// eBPF programs on the bridge ports: SYN admission in the kernel, a ring buffer of reports.
    #[default]
    Ebpf,
    /// NFQUEUE for every client SYN and a libpcap tap on the server port.
    Pcap,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            bridge: String::new(),
            client_port: String::new(),
            server_port: String::new(),
            rules: None,
            metrics: "127.0.0.1:9464".parse().expect("literal address"),
            status_token_file: None,
            server_ports: vec![80],
            queue_base: 0,
            queues: 1,
            queue_max_len: 16_384,
            observer: Observer::Ebpf,
            queue_mark: 0x0080_0000,
            tap_snaplen: 65_535,
            connect_timeout_s: 21.0,
            class_window_s: 30.0,
            inject: true,
            inject_per_handshake: 10.0,
            inject_burst: 1000.0,
            inject_max_per_s: 5000.0,
            fast_limit: 20,
            fast_release_per_s: 20.0,
            adapt: true,
            log_json: false,
            transactions: None,
            pageviews: None,
            decisions: None,
            records_max_bytes: 0,
            records_keep: 5,
            records_queue: 16_384,
            srpt: SrptConfig::default(),
            ebpf: EbpfConfig::default(),
            limits: LimitsConfig::default(),
            fault: None,
        }
    }
}

impl RunConfig {
    /// Read a TOML file; a missing file or a bad key is a one-line error naming it.
    pub fn from_file(path: &Path) -> Result<RunConfig> {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read config {}", path.display()))?;
        RunConfig::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
    }

    /// Read TOML text; a bad key or value is a one-line error (not yet [`RunConfig::validate`]d).
    pub fn parse(text: &str) -> Result<RunConfig> {
        toml::from_str(text).map_err(|e| anyhow::anyhow!("{}", e.to_string().lines().collect::<Vec<_>>().join(" ")))
    }

    /// Check what can be checked without touching the system.
    pub fn validate(&self) -> Result<()> {
        if self.bridge.is_empty() || self.client_port.is_empty() || self.server_port.is_empty() {
            bail!("--bridge, --client-port and --server-port are required (or bridge, client_port, server_port in the config)");
        }
        if self.queues == 0 || u32::from(self.queue_base) + u32::from(self.queues) > 65_536 {
            bail!("queues must be between 1 and 65536 - queue_base");
        }
        if !(self.connect_timeout_s.is_finite() && self.connect_timeout_s > 0.0 && self.connect_timeout_s < 3600.0) {
            bail!("connect_timeout_s must be a positive number of seconds below an hour");
        }
        if !(self.class_window_s.is_finite() && self.class_window_s >= 1.0 && self.class_window_s <= 86_400.0) {
            bail!("class_window_s must be between 1 and 86400 seconds");
        }
        if self.observer == Observer::Ebpf && self.server_ports.is_empty() {
            bail!("observer = \"ebpf\" needs the servers' ports (server_ports); \"pcap\" can watch every port");
        }
        if self.queue_mark == 0 {
            bail!("queue_mark needs at least one bit set");
        }
        if !self.metrics.ip().is_loopback() && self.status_token_file.is_none() {
            bail!(
                "metrics = {} is not a loopback address: set status_token_file (a file holding the token its clients must send) to serve the status page and metrics beyond this box",
                self.metrics
            );
        }
        let budget = [self.inject_per_handshake, self.inject_burst, self.inject_max_per_s, self.fast_release_per_s];
        if !budget.iter().all(|v| v.is_finite() && *v >= 0.0 && *v <= 1e9) {
            bail!("inject_per_handshake, inject_burst, inject_max_per_s and fast_release_per_s must be between 0 and 1e9");
        }
        if self.inject_max_per_s < 1.0 || self.fast_release_per_s < 1.0 {
            bail!("inject_max_per_s and fast_release_per_s must be at least 1 (use inject = false to send nothing)");
        }
        if !(1..=1000).contains(&self.fast_limit) {
            bail!("fast_limit must be between 1 and 1000");
        }
        if !(64..=262_144).contains(&self.tap_snaplen) {
            bail!("tap_snaplen must be between 64 and 262144 bytes");
        }
        // The queue is allocated whole, a few hundred bytes a record; rotation renames every
        // kept file.
        if !(1..=MAX_RECORDS_QUEUE).contains(&self.records_queue) {
            bail!("records_queue must be between 1 and {MAX_RECORDS_QUEUE}");
        }
        if self.records_keep > MAX_RECORDS_KEEP {
            bail!("records_keep must be at most {MAX_RECORDS_KEEP}");
        }
        self.limits.validate()?;
        self.srpt.validate(self.observer)?;
        self.ebpf.validate()?;
        super::engines::check(self.ebpf.engine_count(), self)
    }

    /// Where the records go, refused before anything is opened when an output is a file rlm
    /// reads (the rule file, a mapping file its rules name, the status token file, the
    /// configuration file: `config_file`, when one was read) or another output, or when two
    /// outputs are `-`: a usage error, like the same refusals of `rlm analyze`.
    pub fn record_outputs(&self, config_file: Option<&Path>) -> Result<RecordOutputs, UsageError> {
        let mut inputs = Vec::new();
        if let Some(p) = &self.rules {
            inputs.push(Protected::file("the rule file", p));
            // A rule file that does not check names no mapping: rlm refuses it anyway.
            let checked = rules::check_file(p).ok();
            let dir = p.parent().unwrap_or(Path::new("."));
            for m in checked.iter().flat_map(|r| r.mapping_files()) {
                inputs.push(Protected::file("a mapping file of the rules", &dir.join(m)));
            }
        }
        if let Some(p) = &self.status_token_file {
            inputs.push(Protected::file("the status token file", p));
        }
        if let Some(p) = config_file {
            inputs.push(Protected::file("the configuration file", p));
        }
        let outputs = [("--transactions", &self.transactions), ("--pageviews", &self.pageviews), ("--decisions", &self.decisions)];
        let mut dests = check_outputs(&inputs, &outputs)?.into_iter();
        Ok(RecordOutputs { transactions: dests.next().flatten(), pageviews: dests.next().flatten(), decisions: dests.next().flatten() })
    }

    /// Whether the kernel holds the SYNs it has no verdict for and rlm sends them on
    /// ([`UndecidedSyns::Hold`]): with the eBPF fast path and injection only; otherwise they
    /// go through NFQUEUE.
    pub fn holds_syns(&self) -> bool {
        self.observer == Observer::Ebpf && self.ebpf.undecided_syns == UndecidedSyns::Hold && self.inject
    }

    /// How the record writer queues and rotates.
    pub fn writer_options(&self) -> WriterOptions {
        WriterOptions {
            capacity: self.records_queue,
            capacity_bytes: self.limits.derive().records_queue_bytes,
            max_bytes: (self.records_max_bytes > 0).then_some(self.records_max_bytes),
            keep: self.records_keep,
            ..WriterOptions::default()
        }
    }
}

/// The record writer's options as `rlm run` has them by default (here, with the `[limits]` they
/// derive from, so that the writer's module does not import the configuration's).
impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            capacity: 16_384,
            // The default `[limits]`' share for records.
            capacity_bytes: LimitsConfig::default().derive().records_queue_bytes,
            max_bytes: None,
            keep: 5,
            close_timeout: std::time::Duration::from_secs(5),
        }
    }
}

/// The most records the writer's queue may hold.
const MAX_RECORDS_QUEUE: usize = 1 << 20;
/// The most rotated record files kept.
const MAX_RECORDS_KEEP: usize = 1000;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::Dest;

    #[test]
    fn sample_config_parses_and_unknown_keys_are_refused() {
        let sample = include_str!("../../../rlm.sample.toml");
        let c: RunConfig = toml::from_str(sample).unwrap();
        assert_eq!(c.bridge, "br0");
        c.validate().unwrap();
        // The package's rule file (deploy/rules.rlm, as /etc/rlm/rules.rlm, the sample's
        // `rules`) checks, and so does its rule once uncommented.
        assert_eq!(c.rules.as_deref(), Some(Path::new("/etc/rlm/rules.rlm")));
        let packaged = include_str!("../../../deploy/rules.rlm");
        assert_eq!(rules::compile("rules.rlm", packaged).unwrap().rule_count(), 0);
        let uncommented = packaged.replace("# IF ", "IF ");
        assert_eq!(rules::compile("rules.rlm", &uncommented).unwrap_or_else(|d| panic!("{d}")).rule_count(), 1);
        assert!(toml::from_str::<RunConfig>("bridge = \"br0\"\nbrige = 1\n").is_err());
        let mut d = RunConfig::default();
        assert!(d.validate().is_err());
        d.bridge = "br0".into();
        d.client_port = "a".into();
        d.server_port = "b".into();
        d.validate().unwrap();
        assert_eq!(d.metrics.ip().to_string(), "127.0.0.1");
        // Beyond localhost only with a token.
        d.metrics = "0.0.0.0:9464".parse().unwrap();
        assert!(d.validate().unwrap_err().to_string().contains("status_token_file"));
        d.status_token_file = Some("/etc/rlm/status.token".into());
        d.validate().unwrap();
    }

    #[test]
    fn srpt_needs_a_link_rate_and_sane_cutoffs() {
        let mut d = RunConfig { bridge: "br0".into(), client_port: "a".into(), server_port: "b".into(), ..RunConfig::default() };
        d.srpt.mode = SrptRunMode::Srpt;
        assert!(d.validate().unwrap_err().to_string().contains("link_bps"));
        d.srpt.link_bps = 10_000_000;
        d.validate().unwrap();
        assert_eq!(d.srpt.rate_bps(), 9_500_000);
        d.srpt.cutoffs = vec![2048, 1024];
        assert!(d.validate().unwrap_err().to_string().contains("increase"));
        d.srpt.cutoffs = vec![1, 2, 3, 4, 5, 6, 7];
        assert!(d.validate().is_err());
        d.srpt.cutoffs = vec![1, 2, 3, 4, 5, 6];
        assert!(d.validate().unwrap_err().to_string().contains("8 priorities"));
        d.srpt.resend_band = false;
        d.validate().unwrap();
        assert_eq!(d.srpt.leaves(), 8);
        d.srpt.cutoffs = vec![1000];
        d.srpt.rate_pct = 40.0;
        assert!(d.validate().unwrap_err().to_string().contains("rate_pct"));
        d.srpt.rate_pct = 95.0;
        d.observer = Observer::Pcap;
        assert!(d.validate().unwrap_err().to_string().contains("ebpf"));
        let t: RunConfig = toml::from_str("[srpt]\nmode = \"fair\"\nlink_bps = 1000000\n").unwrap();
        assert_eq!(t.ebpf.attach, EbpfAttach::Auto);
        assert_eq!((t.srpt.mode, t.srpt.cutoffs.len()), (SrptRunMode::Fair, 5));
        assert!(toml::from_str::<RunConfig>("[srpt]\nmode = \"lifo\"\n").is_err());
    }

    #[test]
    fn ebpf_attach_is_auto_or_clsact() {
        let t: RunConfig = toml::from_str("[ebpf]\nattach = \"clsact\"\n").unwrap();
        assert_eq!(t.ebpf.attach.mode(), kmod_fastpath::AttachMode::Clsact);
        assert!(t.ebpf.attach.mode().is_clsact());
        assert_eq!(RunConfig::default().ebpf.attach.mode(), kmod_fastpath::AttachMode::Auto);
        assert!(toml::from_str::<RunConfig>("[ebpf]\nattach = \"tcx\"\n").is_err());
        assert!(toml::from_str::<RunConfig>("[ebpf]\nattch = \"auto\"\n").is_err());
    }

    #[test]
    fn engines_side_by_side_need_the_fast_path_and_held_syns() {
        let ok = |toml_text: &str| {
            let mut c: RunConfig = toml::from_str(toml_text).unwrap();
            (c.bridge, c.client_port, c.server_port) = ("br0".into(), "a".into(), "b".into());
            c.validate()
        };
        assert_eq!(RunConfig::default().ebpf.engine_count(), 1);
        ok("[ebpf]\nengines = 2\n").expect("two engines");
        ok("[ebpf]\nengines = 8\n").expect("eight engines");
        ok("[ebpf]\nengines = 2\nring_mb = 256\n").expect("rings of 256 MiB");
        ok("[ebpf]\nengines = 2\n[srpt]\nmode = \"srpt\"\nlink_bps = 100000000\n").expect("two engines and SRPT");
        assert!(ok("[ebpf]\nring_mb = 3\n").unwrap_err().to_string().contains("ring_mb"));
        for bad in [
            "[ebpf]\nengines = 9\n",
            "observer = \"pcap\"\n[ebpf]\nengines = 2\n",
            "[ebpf]\nengines = 2\nundecided_syns = \"queue\"\n",
            "inject = false\n[ebpf]\nengines = 2\n",
        ] {
            let e = ok(bad).expect_err(bad);
            assert!(e.to_string().contains("engines"), "{bad}: {e}");
        }
    }

    #[test]
    fn undecided_syns_are_held_by_default_and_queued_without_injection_or_the_fast_path() {
        let d = RunConfig::default();
        assert_eq!(d.ebpf.undecided_syns, UndecidedSyns::Hold);
        assert!(d.holds_syns());
        let q: RunConfig = toml::from_str("[ebpf]\nundecided_syns = \"queue\"\n").unwrap();
        assert!(!q.holds_syns());
        assert!(!RunConfig { inject: false, ..RunConfig::default() }.holds_syns(), "rlm cannot send them on");
        assert!(!RunConfig { observer: Observer::Pcap, ..RunConfig::default() }.holds_syns());
        assert!(toml::from_str::<RunConfig>("[ebpf]\nundecided_syns = \"drop\"\n").is_err());
    }

    #[test]
    fn faults_parse() {
        assert_eq!("panic-after=3".parse::<Fault>(), Ok(Fault::PanicAfter(std::time::Duration::from_secs(3))));
        assert_eq!("panic-after=0.5".parse::<Fault>(), Ok(Fault::PanicAfter(std::time::Duration::from_millis(500))));
        for bad in ["panic-after=", "panic-after=-1", "panic-after=nan", "abort", "panic=3"] {
            assert!(bad.parse::<Fault>().is_err(), "{bad}");
        }
        // Not a TOML key.
        assert!(toml::from_str::<RunConfig>("fault = \"panic-after=3\"\n").is_err());
    }

    #[test]
    fn record_keys_parse_and_give_the_writers_options() {
        let t: RunConfig = toml::from_str(
            "pageviews = \"/var/log/rlm/pv.jsonl\"\ndecisions = \"-\"\nrecords_max_bytes = 1000000\nrecords_keep = 3\nrecords_queue = 64\n",
        )
        .unwrap();
        assert_eq!(t.transactions, None);
        assert_eq!((t.pageviews.as_deref(), t.decisions.as_deref()), (Some(Path::new("/var/log/rlm/pv.jsonl")), Some(Path::new("-"))));
        assert_eq!(t.writer_options(), WriterOptions { capacity: 64, max_bytes: Some(1_000_000), keep: 3, ..WriterOptions::default() });
        // 0 bytes: never rotated; the defaults are the writer's.
        let d = RunConfig::default();
        assert_eq!(d.writer_options(), WriterOptions::default());
        let mut d = RunConfig { bridge: "br0".into(), client_port: "a".into(), server_port: "b".into(), ..RunConfig::default() };
        d.records_queue = 0;
        assert!(d.validate().unwrap_err().to_string().contains("records_queue"));
        d.records_queue = 16;
        d.records_keep = 100_000;
        assert!(d.validate().unwrap_err().to_string().contains("records_keep"));
    }

    #[test]
    fn sample_config_documents_the_record_keys() {
        let keys = ["transactions", "pageviews", "decisions", "records_max_bytes", "records_keep", "records_queue"];
        // Its commented examples, taken in.
        let sample: Vec<&str> = include_str!("../../../rlm.sample.toml")
            .lines()
            .map(|l| match l.strip_prefix('#') {
                Some(example) if keys.iter().any(|k| example.starts_with(&format!("{k} = "))) => example,
                _ => l,
            })
            .collect();
        let c: RunConfig = toml::from_str(&sample.join("\n")).unwrap();
        assert_eq!(c.pageviews.as_deref(), Some(Path::new("/var/log/rlm/pageviews.jsonl")));
        assert!(c.transactions.is_some() && c.decisions.is_some());
        let d = RunConfig::default();
        assert_eq!((c.records_max_bytes, c.records_keep, c.records_queue), (d.records_max_bytes, d.records_keep, d.records_queue));
        c.validate().unwrap();
    }

    #[test]
    fn record_outputs_may_not_be_an_input_or_each_other() {
        let d = crate::records::tests::temp_dir("run-config-outputs");
        let (rules, config, pv, dec) = (d.join("rules.rlm"), d.join("rlm.toml"), d.join("pv.jsonl"), d.join("dec.jsonl"));
        std::fs::write(&rules, "").unwrap();
        std::fs::write(&config, "").unwrap();
        let c = RunConfig { rules: Some(rules.clone()), pageviews: Some(pv.clone()), decisions: Some(dec.clone()), ..RunConfig::default() };
        let outputs = c.record_outputs(Some(config.as_path())).unwrap();
        assert_eq!(outputs, RecordOutputs { transactions: None, pageviews: Some(Dest::File(pv.clone())), decisions: Some(Dest::File(dec.clone())) });
        // Two outputs that are one file, however it is spelled: a usage error.
        let same = RunConfig { transactions: Some(d.join(".").join("pv.jsonl")), ..c.clone() };
        let e = same.record_outputs(Some(config.as_path())).unwrap_err();
        assert!(e.0.starts_with("--transactions ") && e.0.ends_with("are the same file; give each output its own"), "{e}");
        // Standard output for two of them.
        let dashes = RunConfig { transactions: Some("-".into()), pageviews: None, decisions: Some("-".into()), ..c.clone() };
        let e = dashes.record_outputs(None).unwrap_err();
        assert!(e.0.contains("only one output may be `-`"), "{e}");
        // The rule file and the configuration file are inputs.
        let e = RunConfig { decisions: Some(rules.clone()), ..c.clone() }.record_outputs(Some(config.as_path())).unwrap_err();
        assert!(e.0.contains("is the rule file; refusing to overwrite it"), "{e}");
        let e = RunConfig { pageviews: Some(config.clone()), ..c.clone() }.record_outputs(Some(config.as_path())).unwrap_err();
        assert!(e.0.contains("is the configuration file; refusing to overwrite it"), "{e}");
        // So are the status token and the mapping files the rules name.
        let (token, map) = (d.join("status.token"), d.join("ims.map"));
        std::fs::write(&token, "0123456789abcdefXYZ\n").unwrap();
        std::fs::write(&map, "/a.png /b.png\n").unwrap();
        let e =
            RunConfig { status_token_file: Some(token.clone()), transactions: Some(token.clone()), ..c.clone() }.record_outputs(None).unwrap_err();
        assert!(e.0.contains("is the status token file; refusing to overwrite it"), "{e}");
        std::fs::write(&rules, "CLASS WEB IF IP.SRC == *.*.*.*\nIF IP.SRC == *.*.*.* THEN\n  REWRITE EMBEDS USING \"ims.map\"\n").unwrap();
        let e = RunConfig { transactions: Some(map.clone()), ..c.clone() }.record_outputs(None).unwrap_err();
        assert!(e.0.contains("is a mapping file of the rules; refusing to overwrite it"), "{e}");
        assert_eq!(std::fs::read(&token).unwrap(), b"0123456789abcdefXYZ\n");
        std::fs::write(&rules, "").unwrap();
        // Refused before anything is opened.
        assert!(!pv.exists() && !dec.exists());
        assert_eq!(std::fs::read(&rules).unwrap(), b"");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn limits_derive_from_memory_mb_and_are_checked() {
        let mib = 1usize << 20;
        // The default: 128 MiB, 80 of them shared: 48%, 28%, 6% and 8% of 83,886,080 bytes.
        let l = RunConfig::default().limits.derive();
        assert_eq!(
            l,
            Limits {
                memory_mb: 128,
                max_connections: 39_321,
                max_held_bytes: 23_488_102,
                max_list_bytes: 5_033_164,
                records_queue_bytes: 6_710_886,
                unproven_records_per_s: 20
            }
        );
        // What the parts take adds up to 90% of what is left past the fixed 48 MiB.
        let parts = l.max_connections * 1024 + l.max_held_bytes + l.max_list_bytes + l.records_queue_bytes;
        assert!(parts <= 80 * mib * 9 / 10 && parts > 80 * mib * 9 / 10 - 2048, "{parts}");
        // A bigger budget scales every part; a part given is taken as it is.
        let c = RunConfig::parse("[limits]\nmemory_mb = 1028\nheld_mb = 100\n").unwrap();
        c.limits.validate().unwrap();
        let l = c.limits.derive();
        assert_eq!((l.max_connections, l.max_held_bytes, l.max_list_bytes), (481_689, 100 * mib, 61_656_268));
        // Refused: too small a budget, parts of 0, parts that do not fit, unknown keys.
        for (text, says) in [
            ("memory_mb = 32", "memory_mb must be between 64"),
            ("connections = 0", "at least 1"),
            ("unproven_records_per_s = 0", "at least 1"),
            ("held_mb = 200", "the parts need"),
            ("memory_mb = 64\nconnections = 40000", "the parts need"),
            // Parts so large that their bytes wrapped the sum under the budget (accepted before).
            ("held_mb = 17592186044415", "the parts need"),
            ("pageview_lists_mb = 17592186044416", "the parts need"),
        ] {
            let c = RunConfig::parse(&format!("[limits]\n{text}\n")).unwrap();
            let e = c.limits.validate().unwrap_err().to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
        assert!(RunConfig::parse("[limits]\nmemory = 128\n").is_err());
        // The writer's queue takes its bytes from the limits.
        let c = RunConfig::parse("[limits]\nrecords_queue_mb = 3\n").unwrap();
        assert_eq!(c.writer_options().capacity_bytes, 3 * mib);
    }
}
