//! `rlm run`: the engine inline on a bridge.
//!
//! ```text
//!  client port ──▶ br0 ──▶ server port        packets forwarded by the kernel
//!   │ syn_admit (tc)         │ observe (tc, both ways): every packet of the servers' ports
//!   │  SYN with a verdict:   │   but the clients' SYNs, copied into the ring buffer
//!   │  pass/drop, reported   ▼
//!   │  SYN without: marked ─▶ NFQUEUE (--queue-bypass, fail-open): the engine decides,
//!   ▼                         and publishes the verdict for that client's next SYNs
//!      rlm event loop ◀── ring buffer (reports)  ◀── NFQUEUE (marked SYNs)
//! ```
//! With `observer = "ebpf"` (the default) the kernel fast path of `kmod-fastpath` admits SYNs
//! from the verdicts the engine publishes ([`rlm_core::engine::FastpathUpdate`]) and reports every
//! packet the engine measures through a ring buffer: in steady state no packet waits for user
//! space. With `observer = "pcap"` every client SYN is queued and a libpcap tap on the server
//! port feeds the engine.
//!
//! With `[ebpf] engines` above 1, one thread per engine reads the ring of its clients and the
//! main thread keeps the rest ([`engines`]). With one engine, one thread, driven by tokio:
//! the NFQUEUE socket and the ring buffer (or tap) are drained in
//! batches when readable or every few milliseconds, the engine's timers fire when due, and
//! SIGHUP/SIGINT/SIGTERM are handled in the same loop, so the sans-IO engine needs no locking.
//! Everything that can fail is opened and checked before any rule is installed. What an earlier
//! rlm left is removed first ([`cleanup`]); once installed, the rules and the shaper are removed
//! on a clean exit and, by their `Drop`, on a panic; when rlm dies without running its code
//! (SIGKILL, abort, OOM) its guard process removes them and the clsact filters ([`guard`]).
//! `--queue-bypass` keeps the bridge forwarding meanwhile, and tcx links go with the process.
//!
//! The engine's records (`--transactions`, `--pageviews`, `--decisions`) go to a writer thread
//! ([`records::RecordWriter`]) that the loop never waits on. SIGHUP reopens its files (after
//! logrotate renamed them) and puts the rule file in force again only if it changed; at
//! SIGINT/SIGTERM the engine closes its open pageviews and their records are written before
//! the rules are removed.

mod calls;
pub mod cleanup;
pub mod config;
pub mod engines;
pub mod guard;
pub mod inject;
pub mod metrics;
pub mod netfilter;
pub mod nfqueue;
pub mod records;
pub mod shaper;
pub mod status_page;
pub mod tap;

use std::hash::{Hash, Hasher};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use kmod_fastpath::inline::{EventKind, EventRing, InlinePath, Mode, SynAction};
use kmod_fastpath::{FlowKey, SrptEgress};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::signal::unix::{signal, SignalKind};
use tracing::{info, warn};

pub use config::{Fault, Observer, RunConfig, SrptRunMode};
use records::{RecordCounts, RecordOutputs, RecordWriter};
use rlm_core::engine::{Config, Engine, Event, FastpathUpdate, Port, SynMode, Verdict};
use rlm_core::policy::{Admission, SynDecision};
use rlm_core::wire::LinkType;

use crate::records::Dest;

/// The longest the ring buffer waits to be drained (the kernel wakes rlm only when it fills).
const RING_DRAIN: Duration = Duration::from_millis(5);
/// Reports handled before the queue gets a turn.
const RING_BATCH: usize = 4096;
/// Ring batches one turn of the loop hands the engine at most, or as many as fit in
/// [`TURN_BUDGET`]: then timers, transmits, events, the status and signals get their turn, even
/// when the ring fills faster than the engine empties it.
const RING_TURN: usize = 4;
const TURN_BUDGET: Duration = Duration::from_millis(2);
/// How often the loop tells the fast path's programs that the engine is alive: they fail open
/// once its last beat is [`kmod_fastpath::HEARTBEAT_STALE`] (500 ms) old.
const BEAT_EVERY: Duration = Duration::from_millis(50);

/// What drives the engines: the event loop (one engine, the queue, the tap or the fast path's
/// one ring) or engines side by side on threads of their own ([`engines`]).
enum Driver {
    Loop(Source),
    Engines(Box<engines::Sharded>),
}

/// Where the measured packets come from.
enum Source {
    Tap(tap::Tap),
    Fast(Box<Fast>),
}

struct Fast {
    path: InlinePath,
    /// The one engine's door to the maps (shard 0's).
    door: kmod_fastpath::inline::ShardDoor,
    /// The SRPT classifier on the client port's egress (`[srpt] mode` fair or srpt).
    srpt: Option<SrptEgress>,
    ring: EventRing,
    update_errors: u64,
    last_beat: Instant,
}

impl Fast {
    /// Tell the programs the engine is alive (every [`BEAT_EVERY`] at most, or now with `force`).
    fn beat(&mut self, force: bool) {
        if !force && self.last_beat.elapsed() < BEAT_EVERY {
            return;
        }
        self.last_beat = Instant::now();
        let r = self.path.beat().and_then(|()| self.srpt.as_mut().map_or(Ok(()), |e| e.beat()));
        if let Err(e) = r {
            // The programs then fail open within HEARTBEAT_STALE: nothing is dropped wrongly.
            self.update_errors += 1;
            warn!("fast path: heartbeat not written: {e:#}");
        }
    }
}

/// The fast path's counters as the metrics (`rlm_fastpath`) and the status show them.
fn fastpath_counters(c: &kmod_fastpath::inline::Counters) -> [(&'static str, u64); 18] {
    [
        ("syn_passed", c.syn_passed),
        ("syn_dropped", c.syn_dropped),
        ("syn_queued", c.syn_queued),
        ("syn_held", c.syn_held),
        ("hold_failed", c.hold_failed),
        ("hold_late", c.hold_late),
        ("observed", c.observed),
        ("ring_full", c.ring_full),
        ("ack_skipped", c.ack_skipped),
        ("body_armed", c.body_armed),
        ("body_cut", c.body_cut),
        ("body_silent", c.body_silent),
        ("resp_queued", c.resp_queued),
        ("req_queued", c.req_queued),
        ("rej_queued", c.rej_queued),
        ("rej_dropped", c.rej_dropped),
        ("stale", c.stale),
        ("tiny_frag", c.tiny_frag),
    ]
}

fn clock_ns(clock: libc::clockid_t) -> i64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec, which `ts` is.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as i64 * 1_000_000_000 + ts.tv_nsec as i64
}

fn mono_to_real() -> i64 {
    clock_ns(libc::CLOCK_REALTIME) - clock_ns(libc::CLOCK_MONOTONIC)
}

/// rlm's clock (the engine's time, its records' timestamps): CLOCK_MONOTONIC, shifted once, at
/// the first reading, to read as the wall clock did then. It never steps: when the wall clock
/// stepped back (NTP) and the engine's time followed it, every frame after came at the engine's
/// last instant (response times of 0) and no timer fired until the wall clock caught up. The
/// price: after a step of the wall clock the records are that far off it (slewing moves both
/// clocks alike).
fn clock_shift() -> i64 {
    static SHIFT: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *SHIFT.get_or_init(mono_to_real)
}

/// A CLOCK_MONOTONIC reading (the eBPF programs' `bpf_ktime_get_ns`) on rlm's clock.
fn from_mono(ns: u64) -> rlm_core::Timestamp {
    on_clock(i64::try_from(ns).unwrap_or(i64::MAX), clock_shift())
}

/// A wall-clock reading (a queued packet's receive stamp, libpcap's) on rlm's clock, through
/// where the wall clock is now against CLOCK_MONOTONIC.
fn from_real(ns: u64) -> rlm_core::Timestamp {
    on_clock(i64::try_from(ns).unwrap_or(i64::MAX).saturating_sub(mono_to_real()), clock_shift())
}

/// Whether a ring batch that has taken `n` reports since `started` stops here (looked at every
/// 64 reports): a batch is bounded in time too. When each report costs the engine much
/// (connections evicted and made at every frame, a debug build), 4,096 of them took a second,
/// and the turn's signals and verdicts (and with `--engines`, the heartbeat) waited for them.
fn batch_out_of_time(n: usize, started: Instant) -> bool {
    n % 64 == 63 && started.elapsed() >= TURN_BUDGET
}

/// A report's stamp `ts`, or now if it claims a later time (the kernel's stamps are on the
/// same clock, so only a broken one does: taken, it would hold the engine's time there and stop
/// every timer until the clock caught up). `now` is the last reading, read again only when a
/// stamp passes it.
fn not_after_now(ts: rlm_core::Timestamp, now: &mut rlm_core::Timestamp) -> rlm_core::Timestamp {
    if ts > *now {
        *now = now_ts();
    }
    ts.min(*now)
}

fn on_clock(mono_ns: i64, shift: i64) -> rlm_core::Timestamp {
    rlm_core::Timestamp(mono_ns.saturating_add(shift).max(0) as u64)
}

impl Source {
    fn fd(&self) -> RawFd {
        match self {
            Source::Tap(t) => t.fd(),
            Source::Fast(f) => f.ring.as_raw_fd(),
        }
    }
}

/// Frames handled per readiness before the loop looks at the other source.
const BATCH: usize = 256;

struct Fd(RawFd);

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// Now on rlm's clock ([`clock_shift`]).
fn now_ts() -> rlm_core::Timestamp {
    on_clock(clock_ns(libc::CLOCK_MONOTONIC), clock_shift())
}

/// When a queued packet reached the kernel: its receive stamp (see `nfqueue::Nfq`) on rlm's
/// clock, if it has one that is plausible (not after `now`, at most a second before).
fn kernel_stamp(msg: &nfq::Message, now: rlm_core::Timestamp) -> Option<rlm_core::Timestamp> {
    let t = msg.get_timestamp()?.duration_since(UNIX_EPOCH).ok()?;
    let t = from_real(t.as_nanos() as u64);
    (t <= now && now.as_nanos() - t.as_nanos() < 1_000_000_000).then_some(t)
}

fn ifindex(name: &str) -> Result<u32> {
    let p = format!("/sys/class/net/{name}/ifindex");
    std::fs::read_to_string(&p).with_context(|| format!("no such interface {name}"))?.trim().parse().context("bad ifindex")
}

/// Whether this process may install netfilter rules and capture.
pub fn check_privileges() -> Result<()> {
    check_capabilities(&[caps::Capability::CAP_NET_ADMIN, caps::Capability::CAP_NET_RAW], "rlm")
}

/// Whether this process holds `needed` (effective), else an error naming those it lacks.
fn check_capabilities(needed: &[caps::Capability], who: &str) -> Result<()> {
    let missing: Vec<String> =
        needed.iter().filter(|c| !caps::has_cap(None, caps::CapSet::Effective, **c).unwrap_or(false)).map(|c| c.to_string()).collect();
    if !missing.is_empty() {
        let all: Vec<String> = needed.iter().map(|c| c.to_string()).collect();
        bail!("{who} needs {} (run it as root, or grant them; missing: {})", all.join(", "), missing.join(", "));
    }
    Ok(())
}

/// What `rlm run` needs to set up, as `cfg` says: the eBPF observer (which SRPT needs too, as
/// `validate` holds) loads and attaches programs (CAP_BPF, CAP_PERFMON for their packet reads,
/// CAP_NET_ADMIN), and rlm drops what it does not keep from its bounding set (CAP_SETPCAP).
/// deploy/rlm.service's CapabilityBoundingSet.
fn check_run_privileges(cfg: &RunConfig) -> Result<()> {
    use caps::Capability::*;
    let mut needed = vec![CAP_NET_ADMIN, CAP_NET_RAW, CAP_SETPCAP];
    if cfg.observer == Observer::Ebpf {
        needed.extend([CAP_BPF, CAP_PERFMON]);
    }
    check_capabilities(&needed, "rlm run")
}

/// After setup keep only what is still needed: CAP_NET_ADMIN (verdicts, removing the rules at
/// exit) and CAP_NET_RAW (iptables). The bounding set is cut too, so that the iptables run at
/// exit cannot regain anything either.
pub(crate) fn drop_capabilities() -> Result<()> {
    keep_capabilities(&[caps::Capability::CAP_NET_ADMIN, caps::Capability::CAP_NET_RAW])
}

/// Keep `keep` and nothing else, in the calling thread's every set (capabilities are a thread's
/// own): the bounding set first, while CAP_SETPCAP is still there to cut it.
pub(crate) fn keep_capabilities(keep: &[caps::Capability]) -> Result<()> {
    use caps::CapSet;
    let keep: caps::CapsHashSet = keep.iter().copied().collect();
    for c in caps::all() {
        if !keep.contains(&c) {
            caps::drop(None, CapSet::Bounding, c).with_context(|| format!("dropping {c} from the bounding set"))?;
        }
    }
    caps::clear(None, CapSet::Ambient)?;
    caps::clear(None, CapSet::Inheritable)?;
    caps::set(None, CapSet::Effective, &keep)?;
    caps::set(None, CapSet::Permitted, &keep)?;
    Ok(())
}

/// Tell systemd (a `Type=notify` unit, deploy/rlm.service) how rlm stands: ready once it is
/// inline, reloading during a SIGHUP, stopping. Nothing without `NOTIFY_SOCKET` (not under
/// systemd); a failure is logged, never fatal.
pub(crate) fn notify(state: &[sd_notify::NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(false, state) {
        warn!("telling systemd {state:?} failed: {e}");
    }
}

/// [`notify`] around a reload: RELOADING=1 (with the monotonic time systemd asks of it), then
/// READY=1 once the reload is done, whatever its outcome.
pub(crate) fn notify_reloading(reload: impl FnOnce()) {
    let now = sd_notify::NotifyState::monotonic_usec_now().ok();
    let mut state = vec![sd_notify::NotifyState::Reloading];
    state.extend(now);
    notify(&state);
    reload();
    notify(&[sd_notify::NotifyState::Ready]);
}

/// Read and check the rule file; its diagnostics (`FILE:LINE:COL`, the line, a caret) as one
/// error.
pub fn load_rules(path: &std::path::Path) -> Result<rules::RuleSet> {
    rules::check_file(path).map_err(|e| anyhow::anyhow!("{e}"))
}

/// A digest of what the rule set at `path` is read from: the rule file's bytes and those of the
/// mapping files it names (`REWRITE EMBEDS ... USING`), found as [`rules::check_file`] finds
/// them; None when the rule file cannot be read. SIGHUP compares it with the digest taken when
/// the rules in force were loaded. It is taken before loading, so that a change made while the
/// rules load shows at the next SIGHUP instead of being taken for what was loaded.
fn rules_digest(path: &std::path::Path) -> Option<u64> {
    let bytes = rules::read_bounded(path, rules::MAX_FILE_SIZE, "rule file").ok()?;
    let mut h = std::hash::DefaultHasher::new();
    bytes.hash(&mut h);
    let compiled = std::str::from_utf8(&bytes).ok().and_then(|src| rules::compile(&path.display().to_string(), src).ok());
    if let Some(r) = compiled {
        let dir = path.parent().unwrap_or(std::path::Path::new("."));
        for i in 0..r.embeds_count() {
            if let Some(name) = r.embeds(rules::EmbedsId(i as u32)).mapping.as_deref() {
                rules::read_bounded(&dir.join(name), rules::mapping::MAX_MAPPING_SIZE, "mapping file").ok().hash(&mut h);
            }
        }
    }
    Some(h.finish())
}

/// How the log names where a kind of record goes.
fn shown(dest: &Option<Dest>) -> String {
    match dest {
        None => "off".into(),
        Some(Dest::Stdout) => "standard output".into(),
        Some(Dest::File(p)) => p.display().to_string(),
    }
}

/// Run until SIGINT or SIGTERM. Errors before anything is installed leave nothing behind.
/// `outputs` are the record outputs, checked by [`RunConfig::record_outputs`].
pub fn run(cfg: RunConfig, outputs: RecordOutputs) -> Result<()> {
    cfg.validate()?;
    netfilter::check_bridge(&cfg.bridge, &cfg.client_port, &cfg.server_port)?;
    if let Some(p) = &cfg.rules {
        load_rules(p)?;
    }
    check_run_privileges(&cfg)?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, run_inline(cfg, outputs))
}

async fn run_inline(cfg: RunConfig, outputs: RecordOutputs) -> Result<()> {
    let client_ifindex = ifindex(&cfg.client_port)?;
    let server_ifindex = ifindex(&cfg.server_port)?;
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = metrics::Metrics::new(&mut registry);
    let token = cfg.status_token_file.as_deref().map(metrics::read_token).transpose()?;
    let status = metrics::Board::new(serde_json::json!({"state": "starting"}), token);
    metrics::serve(cfg.metrics, Arc::new(registry), status.clone()).await?;
    let nfq = nfqueue::open(cfg.queue_base, cfg.queues, cfg.queue_max_len)?;
    // What an earlier rlm on this bridge left when it did not exit cleanly, whatever its
    // configuration: before anything of this run's is attached (leftover filters are found by
    // name), and after the queue is bound (an rlm still running holds it: this one has failed).
    let cleanup_plan =
        cleanup::CleanupPlan { bridge: cfg.bridge.clone(), client_port: cfg.client_port.clone(), server_port: cfg.server_port.clone() };
    let cleaned = cleanup::cleanup(&cleanup_plan);
    if !cleaned.is_empty() {
        warn!("an earlier rlm did not exit cleanly: {}", cleaned.summary(&cleanup_plan));
    }
    // Before anything is installed and while rlm has every capability: if rlm dies without a
    // clean exit from here on, the guard removes what it installed. Declared before what it
    // guards, so that it is dropped after them.
    let guard = guard::Guard::spawn(&cleanup_plan, cfg.log_json)?;
    info!(pid = guard.pid(), "guard process started");
    // SYN/ACKs are never queued: FAST SYN/ACK keeps them from the copies the fast path (or the
    // tap) reports.
    let queue_synacks = false;
    // The clsact qdiscs and SRPT pins rlm makes, removed when this function returns, however
    // it returns. Declared before the fast path, so that its programs are gone first.
    let mut made = Made {
        cfg: &cfg,
        clsact: match cfg.observer {
            Observer::Ebpf if cfg.ebpf.attach.mode().is_clsact() => cleanup::without_clsact(&[&cfg.client_port, &cfg.server_port]),
            _ => Vec::new(),
        },
        pinned: None,
        state_root_created: false,
    };
    let engine_count = cfg.ebpf.engine_count();
    let source = match cfg.observer {
        Observer::Pcap => Driver::Loop(Source::Tap(tap::open(&cfg.server_port, cfg.tap_snaplen, &cfg.server_ports, queue_synacks)?)),
        Observer::Ebpf if engine_count > 1 => {
            let mut path = InlinePath::attach_sharded(
                &cfg.client_port,
                &cfg.server_port,
                &cfg.server_ports,
                cfg.queue_mark,
                cfg.ebpf.attach.mode(),
                kmod_fastpath::inline::Rings { count: engine_count, bytes: cfg.ebpf.ring_bytes() },
            )
            .context("cannot set up the eBPF fast path")?;
            path.set_hold_syns(true)?;
            let rules = cfg.rules.as_deref().map(load_rules).transpose()?;
            if let Some(why) = rules.as_ref().and_then(engines::not_shardable) {
                bail!("the rules cannot be carried out by {engine_count} engines side by side: {why} (run one engine: [ebpf] engines = 1)");
            }
            let srpt = srpt_egress(&cfg, &mut made.pinned, &mut made.state_root_created)?;
            let base = engine_config(&cfg, cfg.inject, true);
            let parts = engines::parts(&base, &mut path, srpt.as_ref(), rules.as_ref(), (client_ifindex, server_ifindex))?;
            Driver::Engines(Box::new(engines::Sharded { path, srpt, parts, rules_digest: cfg.rules.as_deref().and_then(rules_digest) }))
        }
        Observer::Ebpf => {
            let rings = kmod_fastpath::inline::Rings { count: 1, bytes: cfg.ebpf.ring_bytes() };
            let mut path =
                InlinePath::attach_sharded(&cfg.client_port, &cfg.server_port, &cfg.server_ports, cfg.queue_mark, cfg.ebpf.attach.mode(), rings)
                    .context("cannot set up the eBPF fast path (observer = \"pcap\" works without it)")?;
            let ring = path.take_events()?;
            let door = path.shard_door(0)?;
            let srpt = srpt_egress(&cfg, &mut made.pinned, &mut made.state_root_created)?;
            path.set_hold_syns(cfg.holds_syns())?;
            let mut fast = Fast { path, door, srpt, ring, update_errors: 0, last_beat: Instant::now() };
            // Acting from now (the programs act on nothing before the first beat): what comes
            // before the loop starts waits in the ring and the queue.
            fast.beat(true);
            Driver::Loop(Source::Fast(Box::new(fast)))
        }
    };
    let fast = !matches!(source, Driver::Loop(Source::Tap(_)));
    let plan = netfilter::QueuePlan {
        bridge: cfg.bridge.clone(),
        client_port: cfg.client_port.clone(),
        server_port: cfg.server_port.clone(),
        queue_base: cfg.queue_base,
        queues: cfg.queues,
        server_ports: cfg.server_ports.clone(),
        queue_synacks,
        queue_mark: fast.then_some(cfg.queue_mark),
        // The segments the fast path marks: for content adaptation, and for REJECT, which
        // answers from the injector.
        queue_content: (cfg.adapt || cfg.inject) && fast,
    };
    // Opened before any rule is installed: a failure leaves nothing behind.
    let injector = match cfg.inject {
        true => Some(inject::Injector::open(client_ifindex, server_ifindex)?),
        false => None,
    };
    // The record outputs too (an unwritable path fails before any rule or qdisc is installed;
    // the programs, the clsact qdiscs and pins made so far go as this returns), and before the
    // capabilities are dropped: a log directory may be writable by root only.
    // Without any output there is no writer thread.
    let records = if outputs == RecordOutputs::default() {
        None
    } else {
        info!(
            transactions = %shown(&outputs.transactions), pageviews = %shown(&outputs.pageviews), decisions = %shown(&outputs.decisions),
            "records: writing JSON lines"
        );
        Some(RecordWriter::spawn(outputs, cfg.writer_options())?)
    };
    // The shaper goes first: if it cannot be set up, nothing else is installed yet.
    let shaper = match cfg.srpt.mode {
        SrptRunMode::Off => None,
        mode => {
            let bands = cfg.srpt.leaves();
            let plan = shaper::ShaperPlan {
                dev: cfg.client_port.clone(),
                rate_bps: cfg.srpt.rate_bps(),
                bands,
                band_limit: cfg.srpt.band_limit_packets,
                overhead: cfg.srpt.overhead_bytes,
                floor: cfg.srpt.floor(),
            };
            let s = shaper::install(&plan)?;
            info!(dev = %plan.dev, rate_bps = plan.rate_bps, bands, mode = ?mode, cutoffs = ?cfg.srpt.cutoffs, floor = ?plan.floor, "SRPT: the client port's egress is shaped");
            Some(s)
        }
    };
    // The queue rules: now when SYNs go through NFQUEUE; with held SYNs only once the rules in
    // force carry out content adaptation or REJECT (the loop installs them then).
    let mut queue = QueueRules { plan, installed: None, failed: None };
    if !cfg.holds_syns() {
        if let Err(e) = queue.install() {
            if let Some(s) = shaper {
                let _ = s.remove();
            }
            return Err(e);
        }
    }
    let what = match &source {
        Driver::Engines(e) => format!(
            "eBPF syn_admit on the client port, observe on the server port ({}), each client's packets dealt to one of {} engines; SYNs without a verdict in the kernel are held for rlm, which sends them on",
            if cfg.ebpf.attach.mode().is_clsact() { "clsact filters" } else { "tcx links" },
            e.parts.len()
        ),
        Driver::Loop(Source::Fast(_)) => format!(
            "eBPF syn_admit on the client port, observe on the server port ({}); SYNs without a verdict in the kernel are {}",
            if cfg.ebpf.attach.mode().is_clsact() { "clsact filters" } else { "tcx links" },
            if cfg.holds_syns() { "held for rlm, which sends them on" } else { "queued" }
        ),
        Driver::Loop(Source::Tap(_)) => "the clients' SYNs are queued; the rest is measured from the tap on the server port".into(),
    };
    info!(
        bridge = %cfg.bridge, client_port = %cfg.client_port, server_port = %cfg.server_port,
        queue_rules = ?queue.installed.as_ref().map(netfilter::Installed::backend), queues = ?nfq.queues,
        queue_mark = ?queue.plan.queue_mark.map(|m| format!("{m:#x}")), metrics = %cfg.metrics,
        "installed: {what} (fail-open when rlm is gone)"
    );
    let dropped = drop_capabilities();
    if dropped.is_ok() {
        notify(&[sd_notify::NotifyState::Ready, sd_notify::NotifyState::Status("running inline")]);
    }
    let (result, queue_rules) = match (dropped, source) {
        (Ok(()), Driver::Loop(source)) => {
            let mut lp = Loop::new(&cfg, nfq, source, injector, records, metrics, status, client_ifindex, server_ifindex, queue);
            let result = lp.run().await;
            lp.finish();
            (result, lp.queue.installed.take())
        }
        (Ok(()), Driver::Engines(e)) => (engines::run(&cfg, *e, records, metrics, status).await, queue.installed.take()),
        (Err(e), _) => (Err(e), queue.installed.take()),
    };
    notify(&[sd_notify::NotifyState::Stopping]);
    // The loop is gone, and its programs with it: the clsact qdiscs rlm made go too, with the
    // SRPT pins.
    drop(made);
    let removed = queue_rules.map_or(Ok(()), netfilter::Installed::remove);
    match &removed {
        Ok(()) => info!("removed rlm's rules; the bridge forwards plainly"),
        Err(e) => warn!("removing rlm's rules failed: {e:#}"),
    }
    let unshaped = shaper.map_or(Ok(()), shaper::Installed::remove);
    match &unshaped {
        Ok(()) if cfg.srpt.mode != SrptRunMode::Off => info!("removed rlm's qdisc from {}", cfg.client_port),
        Ok(()) => {}
        Err(e) => warn!("removing rlm's qdisc from {} failed: {e:#}", cfg.client_port),
    }
    // Everything is removed (the programs went with the loop's source): the guard has nothing
    // to do. If a removal failed, the guard tries again.
    if removed.is_ok() && unshaped.is_ok() {
        guard.disarm();
    }
    result.and(removed).and(unshaped)
}

/// What `rlm run` makes at its start beside its programs and leaves when they go: the clsact
/// qdiscs of the ports that had none, and the SRPT classifier's pinned state (unless told to
/// keep it for the next rlm). Removed when dropped: at the end of a run, and when a start fails
/// after making them (a record output that cannot be written, a root qdisc that is not rlm's),
/// which left them behind for good before (neither the guard nor the next start removes them).
struct Made<'a> {
    cfg: &'a RunConfig,
    /// The ports without a clsact qdisc before rlm's filters.
    clsact: Vec<String>,
    /// The classifier's pinned state, if kept.
    pinned: Option<std::path::PathBuf>,
    /// Whether rlm made the SRPT state directory (then it goes with the pins).
    state_root_created: bool,
}

impl Drop for Made<'_> {
    fn drop(&mut self) {
        match cleanup::remove_clsact_made(&self.clsact) {
            Ok(ports) if !ports.is_empty() => info!(?ports, "removed the clsact qdiscs rlm made"),
            Ok(_) => {}
            Err(e) => warn!("removing the clsact qdiscs rlm made failed: {e:#}"),
        }
        match self.pinned.take() {
            Some(dir) if self.cfg.srpt.keep_state_on_exit => info!(dir = %dir.display(), "SRPT: per-flow state left pinned for the next rlm"),
            Some(dir) => match SrptEgress::forget_state(&dir) {
                Ok(()) => {
                    // The state directory too, if rlm made it and no other port's state is in it.
                    if self.state_root_created {
                        let _ = std::fs::remove_dir(&self.cfg.srpt.state_dir);
                    }
                    info!(dir = %dir.display(), "SRPT: pinned state removed")
                }
                Err(e) => warn!("removing the pinned SRPT state in {} failed: {e:#}", dir.display()),
            },
            None => {}
        }
    }
}

/// rlm's netfilter rules ([`netfilter`]): installed at start when SYNs go through NFQUEUE,
/// otherwise by the loop the first time the rules in force need the queue (content adaptation,
/// `REJECT`); removed at exit.
struct QueueRules {
    plan: netfilter::QueuePlan,
    installed: Option<netfilter::Installed>,
    /// Installing them when the rules in force needed them failed: the error.
    failed: Option<String>,
}

impl QueueRules {
    /// Install the rules unless they are.
    fn install(&mut self) -> Result<()> {
        if self.installed.is_none() {
            let i = netfilter::install(&self.plan)?;
            info!(backend = ?i.backend(), "installed the netfilter queue rules (br_netfilter on)");
            self.installed = Some(i);
        }
        Ok(())
    }

    /// The rules in force need the queue (`on`) or no longer do: whether the fast path may
    /// mark segments for it. A failed install is logged and kept in `failed` (then nothing is
    /// marked: those segments pass unedited, and a start fails).
    fn needed(&mut self, on: bool) -> bool {
        match on.then(|| self.install()).transpose() {
            Ok(_) => true,
            Err(e) => {
                warn!("the netfilter queue rules could not be installed: {e:#}; content adaptation and REJECT are not carried out");
                self.failed = Some(format!("{e:#}"));
                false
            }
        }
    }
}

struct Loop {
    engine: Engine,
    /// The netfilter rules, installed or to be.
    queue: QueueRules,
    nfq: nfqueue::Nfq,
    source: Source,
    /// Sends the engine's frames (FAST SYN, FAST SYN/ACK, DELAY FIRST SYN); None: `inject = false`.
    injector: Option<inject::Injector>,
    /// Writes the engine's records; None: no record output.
    records: Option<RecordWriter>,
    metrics: metrics::Metrics,
    status: metrics::Status,
    client_ifindex: u32,
    server_ifindex: u32,
    started: Instant,
    bridge: String,
    rules_path: Option<std::path::PathBuf>,
    /// [`rules_digest`] of the rules in force when they were loaded; None: none loaded.
    rules_digest: Option<u64>,
    /// `[srpt] mode` as the status shows it, and the bands it reports.
    srpt_mode: SrptRunMode,
    srpt_bands: usize,
    /// `--fault panic-after`: when the loop panics.
    panic_at: Option<Instant>,
    /// How long the engine's calls take (one in [`calls::SAMPLE`] timed).
    calls: calls::CallTimes,
    /// The SLA controller's decreases and increases when last logged.
    controller_logged: (u64, u64),
    /// The time of the last ring report handed to the engine.
    last_report: rlm_core::Timestamp,
    /// The worst lag of a report behind the wall clock since the last status, in nanoseconds.
    lag_max_ns: u64,
    /// `[limits]`, derived.
    limits: config::Limits,
}

impl Loop {
    #[allow(clippy::too_many_arguments)]
    fn new(
        cfg: &RunConfig,
        nfq: nfqueue::Nfq,
        source: Source,
        injector: Option<inject::Injector>,
        records: Option<RecordWriter>,
        metrics: metrics::Metrics,
        status: metrics::Status,
        client_ifindex: u32,
        server_ifindex: u32,
        queue: QueueRules,
    ) -> Loop {
        let limits = cfg.limits.derive();
        // Rewriting needs the servers' segments in the queue, and REJECT answers for requests
        // the queue holds: only the eBPF fast path sends them there.
        let ecfg = engine_config(cfg, injector.is_some(), matches!(source, Source::Fast(_)));
        let mut engine = Engine::new(ecfg);
        if matches!(source, Source::Fast(_)) {
            engine.enable_fastpath();
            // The bodies nothing reads cross as their segments' headers (`body_cut`).
            engine.enable_body_cuts();
            // FAIR publishes too, so that both modes cost the same.
            if cfg.srpt.mode != SrptRunMode::Off {
                engine.enable_srpt();
            }
        }
        let mut digest = None;
        if let Some(p) = &cfg.rules {
            let read = rules_digest(p);
            match load_rules(p) {
                Ok(r) => {
                    info!(rules = %p.display(), summary = %rules::summary(&r).replace('\n', ";"), "rules in force");
                    engine.set_rules(Some(r));
                    digest = read;
                }
                Err(e) => warn!("{e:#}"),
            }
        }
        Loop {
            engine,
            queue,
            nfq,
            source,
            injector,
            records,
            metrics,
            status,
            client_ifindex,
            server_ifindex,
            started: Instant::now(),
            bridge: cfg.bridge.clone(),
            rules_path: cfg.rules.clone(),
            rules_digest: digest,
            srpt_mode: cfg.srpt.mode,
            srpt_bands: cfg.srpt.leaves() as usize,
            panic_at: cfg.fault.map(|Fault::PanicAfter(d)| Instant::now() + d),
            calls: calls::CallTimes::default(),
            lag_max_ns: 0,
            controller_logged: (0, 0),
            last_report: rlm_core::Timestamp::ZERO,
            limits,
        }
    }

    async fn run(&mut self) -> Result<()> {
        // SAFETY: both descriptors are owned by `self.nfq` and `self.source`, which outlive these
        // registrations (dropped at the end of this function) and never close or replace them.
        let nfq_fd = unsafe { AsyncFd::register_with_interest(Fd(self.nfq.fd), Interest::READABLE)? };
        let source_fd = unsafe { AsyncFd::register_with_interest(Fd(self.source.fd()), Interest::READABLE)? };
        let fast = matches!(self.source, Source::Fast(_));
        self.apply_fastpath();
        if let Some(e) = self.queue.failed.take() {
            bail!("the rules in force need the netfilter queue, which could not be installed: {e}");
        }
        if let Source::Fast(f) = &mut self.source {
            f.beat(true);
        }
        let mut hup = signal(SignalKind::hangup())?;
        let mut int = signal(SignalKind::interrupt())?;
        let mut term = signal(SignalKind::terminate())?;
        let mut last_status = Instant::now() - Duration::from_secs(10);
        self.publish_status();
        // The ring was not emptied in the last turn: the next comes at once.
        let mut behind = false;
        loop {
            if behind {
                // The runtime has one thread: the status server's tasks run when the loop yields.
                tokio::task::yield_now().await;
            }
            let most = if behind {
                Duration::ZERO
            } else if fast {
                RING_DRAIN
            } else {
                Duration::from_secs(1)
            };
            let wait = match self.engine.poll_timeout() {
                Some(t) => Duration::from_nanos(t.as_nanos().saturating_sub(now_ts().as_nanos())).min(most),
                None => most,
            };
            tokio::select! {
                biased;
                _ = int.recv() => { info!("SIGINT: stopping"); break; }
                _ = term.recv() => { info!("SIGTERM: stopping"); break; }
                _ = hup.recv() => self.hangup(),
                g = nfq_fd.readable() => {
                    let mut g = g?;
                    if fast {
                        // What the ring holds came before what waits in the queue (a request
                        // before its response): the engine takes it first, as much as a turn
                        // allows (under overload a response can then be judged before its
                        // request, and passes unedited).
                        self.drain_ring_turn(false)?;
                    }
                    if self.drain_queue()? < BATCH {
                        g.clear_ready();
                    }
                }
                g = source_fd.readable() => {
                    let mut g = g?;
                    let limit = if fast { RING_BATCH } else { BATCH };
                    if self.drain_source() < limit {
                        g.clear_ready();
                    }
                }
                _ = tokio::time::sleep(wait) => {}
            }
            // The clock is read before the last drain: every report stamped before `now` is
            // handed to the engine before its timers run at `now`, so none arrives after the
            // engine's clock passed it (the engine would move it forward to its own time, and a
            // pageview's last byte would be late by the drain's wait, up to `RING_DRAIN`).
            let mut now = now_ts();
            if fast {
                // The kernel wakes rlm only when the ring fills up: drain it every turn.
                behind = !self.drain_ring_turn(true)?;
                if behind {
                    // Reports stamped before `now` are still in the ring: the timers run at
                    // the last one handed, so that none of those is moved to the engine's time.
                    now = now.min(self.last_report);
                }
            }
            if self.engine.poll_timeout().is_some_and(|t| t <= now) {
                self.calls.time(|| self.engine.handle_timeout(now));
            }
            self.apply_fastpath();
            if let Source::Fast(f) = &mut self.source {
                f.beat(false);
            }
            self.send_transmits();
            self.drain_events();
            if last_status.elapsed() >= Duration::from_secs(1) {
                last_status = Instant::now();
                self.publish_status();
            }
            if self.panic_at.is_some_and(|t| Instant::now() >= t) {
                panic!("--fault panic-after: the event loop panics as asked");
            }
        }
        Ok(())
    }

    /// At exit, whatever ended the loop: hand the engine what the source still holds, close
    /// every connection and pageview (each client's last pageview is otherwise lost), write
    /// their records and close the outputs (bounded: [`RecordWriter::close`]), and log what was
    /// written and lost. Nothing more goes to the fast path's maps: the programs go with the
    /// process, and pinned SRPT state keeps its flows for the next rlm.
    fn finish(&mut self) {
        // From here on SYNs without a verdict pass undecided (marked, and queued while the queue
        // rules are still in): none is held for a loop that no longer sends them on.
        if let Source::Fast(f) = &mut self.source {
            if let Err(e) = f.path.set_hold_syns(false) {
                warn!("fast path: SYNs are still held while rlm stops: {e:#}");
            }
        }
        let batch = match self.source {
            Source::Fast(_) => RING_BATCH,
            Source::Tap(_) => BATCH,
        };
        // What the source held at the signal, not what keeps coming under load: at most a
        // second of it.
        let until = Instant::now() + Duration::from_secs(1);
        while self.drain_source() == batch && Instant::now() < until {}
        self.engine.shutdown(now_ts());
        self.drain_events();
        let counts = self.records.take().map_or_else(RecordCounts::default, RecordWriter::close);
        let [t, p, d] = counts.by_kind();
        info!(
            "records: transactions written={} dropped={}, pageviews written={} dropped={}, decisions written={} dropped={}",
            t.1, t.2, p.1, p.2, d.1, d.2
        );
    }

    /// One turn's drain of the ring: at most [`RING_TURN`] batches, stopping after
    /// [`TURN_BUDGET`], the queue given a turn after each batch (`with_queue`). True if the ring
    /// was emptied.
    fn drain_ring_turn(&mut self, with_queue: bool) -> Result<bool> {
        let start = Instant::now();
        for _ in 0..RING_TURN {
            if self.drain_source() < RING_BATCH {
                return Ok(true);
            }
            if with_queue && self.drain_queue()? > 0 {
                self.apply_fastpath();
            }
            if start.elapsed() >= TURN_BUDGET {
                break;
            }
        }
        Ok(false)
    }

    /// Verdict every queued packet that is waiting (up to a batch); returns how many.
    fn drain_queue(&mut self) -> Result<usize> {
        let mut n = 0;
        while n < BATCH {
            if n > 0 && matches!(self.source, Source::Fast(_)) {
                // What the ring got while the last packets were verdicted came before the next
                // one in the queue: on a short path a SYN's verdict, the SYN/ACK (reported) and
                // the request (queued) all fit in one drain, and the request must find its
                // handshake, and the link addresses it taught, already handled.
                self.drain_source();
            }
            let mut msg = match self.nfq.queue.recv() {
                Ok(m) => m,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e).context("reading NFQUEUE"),
            };
            let arrived = Instant::now();
            let port = match msg.get_physindev() {
                i if i == self.client_ifindex => Port::Client,
                i if i == self.server_ifindex => Port::Server,
                _ => Port::Unknown,
            };
            // The packet's time is its arrival in the kernel: under load the queue's wait is not
            // added to a SYN's time. Without a stamp, the time rlm read it.
            let now = now_ts();
            let at = match kernel_stamp(&msg, now) {
                Some(t) => {
                    self.metrics.queue_wait.observe((now.as_nanos() - t.as_nanos()) as f64 / 1e9);
                    t
                }
                None => {
                    self.metrics.queue_unstamped.inc();
                    now
                }
            };
            let verdict = self.calls.time(|| self.engine.handle_link(at, port, LinkType::RawIp, msg.get_payload()));
            // What the engine published for the kernel (a queued SYN's verdict for its client's
            // next SYNs, a new generation) reaches the maps before this packet goes on: the
            // client's next SYN, which can follow within a millisecond, is then decided in the
            // kernel instead of coming for a verdict too.
            self.apply_fastpath();
            let label = match verdict {
                Verdict::Accept => {
                    msg.set_verdict(nfq::Verdict::Accept);
                    "accept"
                }
                Verdict::Drop => {
                    msg.set_verdict(nfq::Verdict::Drop);
                    "drop"
                }
                Verdict::Replace(bytes) => {
                    msg.set_payload(bytes.into_vec());
                    msg.set_verdict(nfq::Verdict::Accept);
                    "replace"
                }
            };
            self.nfq.queue.verdict(msg).context("sending a verdict")?;
            self.metrics.verdict_latency.observe(arrived.elapsed().as_secs_f64());
            self.metrics.verdicts.get_or_create(&metrics::VerdictLabel { verdict: label }).inc();
            self.metrics.frames.get_or_create(&metrics::SourceLabel { source: "queue" }).inc();
            n += 1;
        }
        Ok(n)
    }

    /// Hand the waiting measured packets to the engine (up to a batch, and for the ring at most
    /// [`TURN_BUDGET`] of them); returns how many, or a whole batch when the ring still holds more.
    fn drain_source(&mut self) -> usize {
        match self.source {
            Source::Tap(_) => self.drain_tap(),
            Source::Fast(_) => self.drain_ring(),
        }
    }

    /// The fast path's reports, oldest first, until the ring is empty or `RING_BATCH` were
    /// handled (then the queue gets a turn); returns how many.
    fn drain_ring(&mut self) -> usize {
        let mut n = 0;
        let mut observed = 0u64;
        let mut syns = 0u64;
        // The stamp of the last held SYN taken in this drain.
        let mut held_taken = None;
        let (started, mut ceiling) = (Instant::now(), now_ts());
        while n < RING_BATCH {
            let Source::Fast(f) = &mut self.source else { return 0 };
            if batch_out_of_time(n, started) {
                n = RING_BATCH;
                break;
            }
            let Some(item) = f.ring.next() else { break };
            n += 1;
            let Some(ev) = kmod_fastpath::inline::Event::parse(&item) else { continue };
            let ts = not_after_now(from_mono(ev.ts_ns), &mut ceiling);
            match ev.kind {
                EventKind::SynHeld { .. } => {
                    syns += 1;
                    let frame = ev.whole_frame().into_owned();
                    held_taken = Some(ev.ts_ns);
                    // The record goes back to the kernel before the SYN is sent on.
                    drop(item);
                    self.send_on_held_syn(ts, frame);
                }
                EventKind::Observed { .. } => {
                    observed += 1;
                    hand_report(&mut self.engine, &mut self.calls, &ev, ts);
                }
                _ => {
                    syns += 1;
                    hand_report(&mut self.engine, &mut self.calls, &ev, ts);
                }
            }
            if n == 1 {
                let lag = now_ts().as_nanos().saturating_sub(ts.as_nanos());
                self.metrics.loop_lag.observe(lag as f64 / 1e9);
                self.lag_max_ns = self.lag_max_ns.max(lag);
            }
            self.last_report = ts;
        }
        // Taken, once per drain (a drain lasts at most TURN_BUDGET): the kernel bounds the wait
        // of those held after them.
        if let (Some(stamp), Source::Fast(f)) = (held_taken, &mut self.source) {
            if let Err(e) = f.door.held_taken(stamp) {
                f.update_errors += 1;
                warn!("fast path: the held SYNs' progress not written ({e:#}): the next SYNs may pass undecided");
            }
        }
        if n > 0 {
            self.metrics.frames.get_or_create(&metrics::SourceLabel { source: "fastpath" }).inc_by(observed + syns);
        }
        n
    }

    /// A SYN the kernel held for the engine ([`send_on_held_syn`]), what the engine published
    /// applied first.
    fn send_on_held_syn(&mut self, at: rlm_core::Timestamp, frame: Vec<u8>) {
        let verdict = self.calls.time(|| self.engine.handle_link(at, Port::Client, LinkType::Ethernet, &frame));
        self.apply_fastpath();
        forward_held_syn(self.injector.as_mut(), &self.metrics, verdict, at, frame);
    }

    /// Send the frames the engine made (its timers and frames just handled made them).
    fn send_transmits(&mut self) {
        while let Some(t) = self.engine.poll_transmit() {
            if let Some(inj) = self.injector.as_mut() {
                inj.send(&t);
            }
        }
    }

    /// Hand the engine's fast-path updates to the kernel's maps, in order.
    fn apply_fastpath(&mut self) {
        let Source::Fast(f) = &mut self.source else { return };
        while let Some(u) = self.engine.poll_fastpath() {
            let r = match u {
                FastpathUpdate::QueueResponses(on) => {
                    info!(on, "fast path: the servers' segments go through the queue (REMOVE EMBEDS)");
                    match self.queue.needed(on) {
                        true => f.path.set_queue_responses(on),
                        false => Ok(()),
                    }
                }
                FastpathUpdate::QueueRequests(on) => {
                    info!(on, "fast path: the clients' segments go through the queue (REWRITE EMBEDS, REJECT)");
                    match self.queue.needed(on) {
                        true => f.path.set_queue_requests(on),
                        false => Ok(()),
                    }
                }
                FastpathUpdate::ResponseSize { client, server, start, end } => match f.srpt.as_mut() {
                    Some(e) => e.set_response(FlowKey::new(server, client), start, end),
                    None => Ok(()),
                },
                FastpathUpdate::FlowEnd { client, server } => match f.srpt.as_mut() {
                    Some(e) => e.end_flow(FlowKey::new(server, client)),
                    None => Ok(()),
                },
                other => publish(&mut f.door, &other).unwrap_or(Ok(())),
            };
            if let Err(e) = r {
                // Without the entry the kernel keeps queueing those SYNs: nothing is lost.
                if f.update_errors == 0 {
                    warn!("fast path: cannot update a map ({e:#}); the kernel goes on without that entry (its SYNs stay queued; a response is ranked by the bytes sent)");
                }
                f.update_errors += 1;
            }
        }
    }

    /// Hand the tap's waiting packets to the engine (up to a batch); returns how many.
    fn drain_tap(&mut self) -> usize {
        let Source::Tap(tap) = &mut self.source else { return 0 };
        let mut n = 0;
        while n < BATCH {
            let p = match tap.cap.next_packet() {
                Ok(p) => p,
                Err(_) => break,
            };
            n += 1;
            let now = now_ts();
            let ts = from_real(p.header.ts.tv_sec.max(0) as u64 * 1_000_000_000 + p.header.ts.tv_usec.max(0) as u64 * 1_000).min(now);
            let lag = now.as_nanos().saturating_sub(ts.as_nanos());
            self.metrics.loop_lag.observe(lag as f64 / 1e9);
            self.lag_max_ns = self.lag_max_ns.max(lag);
            // IPv4 SYNs are filtered out in the kernel; only IPv6 frames need a look here.
            if p.data.get(12..14) == Some(&[0x86, 0xdd][..]) && tap::is_queued_syn(p.data, false) {
                continue;
            }
            // Cut at the snap length: measured by its length on the wire.
            self.calls.time(|| self.engine.handle_cut(ts, Port::Unknown, LinkType::Ethernet, p.data, p.header.len as usize));
        }
        if n > 0 {
            self.metrics.frames.get_or_create(&metrics::SourceLabel { source: "tap" }).inc_by(n as u64);
        }
        n
    }

    /// The engine's events: finished pageviews' response times and the rules' decisions into
    /// the metrics, and every record to the writer, which never waits (a record it has no room
    /// for is counted as dropped).
    fn drain_events(&mut self) {
        while let Some(ev) = self.engine.poll_event() {
            observe_event(&self.metrics, &ev);
            if let Some(w) = &mut self.records {
                w.send(ev);
            }
        }
        if let Some(w) = &mut self.records {
            w.tick();
        }
    }

    /// SIGHUP, which logrotate sends after renaming the record files: reopen them, and put the
    /// rule file in force again if it changed.
    fn hangup(&mut self) {
        if let Some(w) = &self.records {
            w.request_reopen();
            info!("SIGHUP: reopening the record files");
        }
        notify_reloading(|| self.reload());
    }

    /// Read the rule file again; put it in force if it changed since the rules in force were
    /// loaded and it checks, else keep the rules in force. An unchanged file leaves them
    /// untouched: rules put in force anew, even the same ones, start with full LIMIT SYN
    /// buckets and no FOR holds, which a nightly logrotate must not cause. Flows, pageviews and
    /// class statistics carry over either way, and no packet waits: the loop is the only reader
    /// of the queue, so packets queued meanwhile are handled right after.
    fn reload(&mut self) {
        let Some(path) = self.rules_path.clone() else {
            info!("SIGHUP: no rule file given; nothing to reload");
            return;
        };
        if let Some((r, digest)) = changed_rules(&path, self.rules_digest) {
            info!(rules = %path.display(), summary = %rules::summary(&r).replace('\n', ";"), "SIGHUP: new rules in force");
            self.engine.set_rules(Some(r));
            self.rules_digest = digest;
        }
    }

    /// QUIC's flows and bytes by class into the metrics (the engine's counters are cumulative).
    fn publish_quic(&mut self) {
        let set = |family, class: &str, n| metrics::store_total(family, metrics::ClassLabel { class: class.to_string() }, n);
        match self.engine.policy() {
            Some(p) => {
                for (i, c) in p.class_counters.iter().enumerate() {
                    let class = p.class_name(rules::ClassId(i as u16));
                    set(&self.metrics.quic_flows, class, c.quic_flows);
                    set(&self.metrics.quic_bytes, class, c.quic_bytes);
                }
            }
            None => {
                let q = &self.engine.stats().quic;
                set(&self.metrics.quic_flows, "-", q.flows);
                set(&self.metrics.quic_bytes, "-", q.bytes);
            }
        }
    }

    /// The SLA controller's state into the metrics, and as the status' `controller` (null
    /// without one).
    fn publish_controller(&mut self) -> serde_json::Value {
        let Some(p) = self.engine.policy() else { return serde_json::Value::Null };
        let Some(ctl) = p.controller() else { return serde_json::Value::Null };
        let st = ctl.state();
        let label = |c| metrics::ClassLabel { class: p.class_name(c).to_string() };
        let targets: Vec<serde_json::Value> = st
            .targets
            .iter()
            .map(|&(class, stat, limit, measured)| {
                self.metrics.controller_target.get_or_create(&label(class)).set(limit);
                if let Some(m) = measured {
                    self.metrics.controller_measured.get_or_create(&label(class)).set(m);
                }
                serde_json::json!({ "class": p.class_name(class), "stat": stat.to_string(), "limit_s": limit, "measured_s": measured })
            })
            .collect();
        let stages: Vec<serde_json::Value> = st
            .stages
            .iter()
            .map(|&(class, rate, arrivals)| {
                self.metrics.controller_rate.get_or_create(&label(class)).set(rate.unwrap_or(-1.0));
                serde_json::json!({ "class": p.class_name(class), "admitted_syn_per_s": rate, "arriving_syn_per_s": arrivals })
            })
            .collect();
        let groups: Vec<serde_json::Value> = st
            .groups
            .iter()
            .map(|g| {
                let name = p.rules().group_name(g.group);
                let label = metrics::GroupLabel { group: name.to_string() };
                self.metrics.group_rate.get_or_create(&label).set(g.admitted_per_s.unwrap_or(-1.0));
                self.metrics.group_target.get_or_create(&label).set(g.limit_s);
                if let Some(m) = g.measured_s {
                    self.metrics.group_measured.get_or_create(&label).set(m);
                }
                serde_json::json!({
                    "group": name, "stat": g.stat.to_string(), "limit_s": g.limit_s, "measured_s": g.measured_s,
                    "admitted_per_s": g.admitted_per_s, "arriving_per_s": g.arriving_per_s,
                })
            })
            .collect();
        let state = serde_json::json!({
            "targets": targets, "shed": stages, "groups": groups, "requests_shed": st.requests_shed,
            "requests_limited": st.requests_limited, "pageviews_turned_away": st.pageviews_turned_away, "decreases": st.decreases, "increases": st.increases,
        });
        // Each second the controller changed a rate, what it measured and set, in the log.
        if (st.decreases, st.increases) != self.controller_logged {
            self.controller_logged = (st.decreases, st.increases);
            info!(state = %state, "SLA controller changed a rate");
        }
        state
    }

    fn publish_status(&mut self) {
        let sizes = self.engine.table_sizes();
        self.metrics.connections.set(sizes.connections as i64);
        for (bound, held, limit) in [
            ("connections", sizes.connections, self.limits.max_connections),
            ("held_bytes", sizes.held_bytes, self.limits.max_held_bytes),
            ("pageview_list_bytes", sizes.pageview_list_bytes, self.limits.max_list_bytes),
        ] {
            self.metrics.held.get_or_create(&metrics::BoundLabel { bound }).set(held as i64);
            self.metrics.limit.get_or_create(&metrics::BoundLabel { bound }).set(limit as i64);
        }
        self.metrics.open_pageviews.set(sizes.open_pageviews as i64);
        if let Source::Tap(t) = &mut self.source {
            self.metrics.tap_dropped.set(t.kernel_drops() as i64);
        }
        for (reason, n) in &self.engine.stats().malformed {
            if *n > 0 {
                metrics::store_total(&self.metrics.malformed, metrics::ReasonLabel { reason: reason.to_string() }, *n);
            }
        }
        self.publish_quic();
        let now = now_ts();
        let mut part = engine_status(&self.engine, now);
        publish_rule_firing(&self.metrics, &part);
        let (classes, rules_state, slowest) = (part["classes"].take(), part["rules"].take(), part["slowest"].take());
        let controller = self.publish_controller();
        let lag_max_ns = std::mem::take(&mut self.lag_max_ns);
        let (path, classifier, fastpath) = match &self.source {
            Source::Fast(f) => (Some(&f.path), f.srpt.as_ref(), fastpath_status(&self.metrics, &f.path, f.update_errors)),
            Source::Tap(_) => (None, None, serde_json::Value::Null),
        };
        let datapath = datapath_status(&self.metrics, path, &self.nfq.queues, Some(lag_max_ns), self.engine.config().inject_budget.max_per_s);
        let srpt = srpt_status(&self.metrics, classifier, self.srpt_mode, self.srpt_bands);
        let records = records_status(&self.metrics, self.records.as_ref());
        let st = self.engine.stats();
        let c = self.injector.as_ref().map(|i| i.counters).unwrap_or_default();
        let (sent, failed) = (c.sent, c.failed);
        let injector = match self.injector {
            Some(_) => serde_json::json!({
                "sent": sent, "failed": failed, "no_mac": st.inject_no_mac,
                "forwarded": c.forwarded, "forward_failed": c.forward_failed,
            }),
            None => serde_json::Value::Null,
        };
        for (counter, v) in [
            ("fast_syns_sent", st.fast_syns_sent),
            ("fast_synacks_sent", st.fast_synacks_sent),
            ("fast_syns_absorbed", st.fast_syns_absorbed),
            ("fast_syns_client_passed", st.fast_syns_client_passed),
            ("syns_delayed", st.syns_delayed),
            ("denied", st.inject_denied),
            ("no_mac", st.inject_no_mac),
            ("sent", sent),
            ("failed", failed),
            ("forwarded", c.forwarded),
            ("forward_failed", c.forward_failed),
        ] {
            self.metrics.injected.get_or_create(&metrics::CounterLabel { counter }).set(v as i64);
        }
        let v = serde_json::json!({
            "state": "running",
            "injector": injector,
            "observer": if fastpath.is_null() { "pcap" } else { "ebpf" },
            "fastpath": fastpath,
            "srpt": srpt,
            "bridge": self.bridge,
            "uptime_s": self.started.elapsed().as_secs(),
            "rules_file": self.rules_path,
            "classes": classes,
            "rules": rules_state,
            "controller": controller,
            "tables": sizes,
            "limits": self.limits,
            "stats": self.engine.stats(),
            "engine_call_us": self.calls.summary(),
            "records": records,
            "datapath": datapath,
            "slowest": slowest,
        });
        self.status.set(v, unix_ms());
    }
}

/// A report of the fast path's ring handed to `engine`: a packet measured, or a SYN the kernel
/// decided (a held SYN is the caller's to decide and send on: [`send_on_held_syn`]).
fn hand_report(engine: &mut Engine, calls: &mut calls::CallTimes, ev: &kmod_fastpath::inline::Event<'_>, ts: rlm_core::Timestamp) {
    match ev.kind {
        EventKind::Observed { from_server } => {
            // The side it came from, as the program saw it: a server's segment that came from
            // the clients' side is a spoofer's, and the engine ignores it.
            let port = if from_server { Port::Server } else { Port::Client };
            // A frame longer than the report's copy (a GRO/GSO super-frame, a body segment) is
            // measured by its length on the wire.
            calls.time(|| engine.handle_cut(ts, port, LinkType::Ethernet, ev.frame, ev.wire_len as usize));
        }
        EventKind::SynPassed => {
            calls.time(|| engine.handle_decided(ts, Port::Client, LinkType::Ethernet, ev.frame, SynDecision::Pass));
        }
        EventKind::SynDropped { rule, limited } => {
            let d = SynDecision::Drop { rule: rules::RuleId(rule), limited };
            calls.time(|| engine.handle_decided(ts, Port::Client, LinkType::Ethernet, ev.frame, d));
        }
        // The caller's: it decides it and sends it on.
        EventKind::SynHeld { .. } => {}
    }
}

/// A SYN the kernel held for the engine (it has no verdict for it), decided as a queued one is
/// (`verdict`; what the engine published is in the maps by now, so that the client's next SYNs
/// are decided in the kernel): sent on out of the server port unless dropped.
fn forward_held_syn(injector: Option<&mut inject::Injector>, metrics: &metrics::Metrics, verdict: Verdict, at: rlm_core::Timestamp, frame: Vec<u8>) {
    let (label, out) = match verdict {
        Verdict::Accept => ("accept", Some(frame.into_boxed_slice())),
        Verdict::Drop => ("drop", None),
        Verdict::Replace(bytes) => ("replace", Some(bytes)),
    };
    if let (Some(mut frame), Some(inj)) = (out, injector) {
        // The copy has the checksums as the sender's stack left them: with checksum offload
        // (a veth's default) only the pseudo-header's sum, which the kernel would have
        // finished on the way out of a device but not for a frame sent as it is.
        rlm_core::actions::fix_checksums(&mut frame);
        inj.forward(&rlm_core::engine::Transmit { port: Port::Server, frame });
    }
    // From the SYN's arrival in the kernel to its departure.
    metrics.verdict_latency.observe(now_ts().as_nanos().saturating_sub(at.as_nanos()) as f64 / 1e9);
    metrics.verdicts.get_or_create(&metrics::VerdictLabel { verdict: label }).inc();
}

/// A held SYN decided by `engine`, `publish` writing what it published, then sent on
/// ([`forward_held_syn`]): an engine thread's way.
fn send_on_held_syn(
    engine: &mut Engine,
    calls: &mut calls::CallTimes,
    injector: Option<&mut inject::Injector>,
    metrics: &metrics::Metrics,
    at: rlm_core::Timestamp,
    frame: Vec<u8>,
    publish: impl FnOnce(&mut Engine),
) {
    let verdict = calls.time(|| engine.handle_link(at, Port::Client, LinkType::Ethernet, &frame));
    publish(engine);
    forward_held_syn(injector, metrics, verdict, at, frame);
}

/// What an engine publishes for its own clients, written through its door (its SYN mode and
/// generation, its clients' verdicts, the buckets, body cuts, rejected connections); None for
/// the updates that are not a door's (the queue's, the SRPT classifier's).
fn publish(door: &mut kmod_fastpath::inline::ShardDoor, u: &FastpathUpdate) -> Option<Result<()>> {
    Some(match *u {
        FastpathUpdate::Mode { mode, generation } => {
            let mode = match mode {
                SynMode::QueueAll => Mode::QueueAll,
                SynMode::Verdicts => Mode::Verdicts,
                SynMode::PassAll => Mode::PassAll,
            };
            tracing::debug!(?mode, generation, shard = door.shard(), "fast path: SYN mode");
            door.set_mode(mode, generation)
        }
        FastpathUpdate::Bucket { slot, rate_per_s, burst } => door.set_bucket(slot, rate_per_s, burst),
        FastpathUpdate::BodyUnread { client, server, until } => door.set_body_unread(client, server, until),
        FastpathUpdate::BodyOver { client, server, until } => door.end_body_unread(client, server, until),
        FastpathUpdate::Rejected { client, server } => door.set_rejected(client, server),
        FastpathUpdate::SynVerdict { client, server, generation, admission } => {
            let action = match admission {
                Admission::Pass => SynAction::Pass,
                Admission::Drop { rule } => SynAction::Drop { rule: rule.0 },
                Admission::Limit { rule, slot, .. } => SynAction::Limit { rule: rule.0, slot },
            };
            door.set_syn_verdict(client, server, generation, action)
        }
        FastpathUpdate::QueueResponses(_)
        | FastpathUpdate::QueueRequests(_)
        | FastpathUpdate::ResponseSize { .. }
        | FastpathUpdate::FlowEnd { .. } => return None,
    })
}

/// An engine's event into the metrics: a finished pageview's response time, a rule's SYN drop.
fn observe_event(metrics: &metrics::Metrics, ev: &Event) {
    match ev {
        Event::Pageview(p) if !p.incomplete => {
            let class = p.class.clone().unwrap_or_else(|| "ALL".into());
            metrics.pageview_rt.get_or_create(&metrics::ClassLabel { class }).observe(p.rt_s);
        }
        Event::Decision(d) => {
            if d.drops_syn() {
                metrics.syn_drops.get_or_create(&metrics::ClassLabel { class: d.class.clone() }).inc();
            }
            tracing::debug!(rule = %d.rule, action = d.action, class = %d.class, client = %d.client, reference = ?d.target, "rule acted");
        }
        _ => {}
    }
}

/// What an engine's status holds of it: its classes (response times over the window, pageviews
/// in it, counters), its rules (firing in the last 2 s, counters), its tables' sizes and its
/// counters.
fn engine_status(engine: &Engine, now: rlm_core::Timestamp) -> serde_json::Value {
    let (classes, rules_state) = match engine.policy() {
        None => (serde_json::Value::Null, serde_json::Value::Null),
        Some(p) => {
            let classes: Vec<serde_json::Value> = (0..p.rules().class_count())
                .map(|i| {
                    let c = rules::ClassId(i as u16);
                    serde_json::json!({
                        "class": p.class_name(c),
                        "rt_mean_s": p.class_rt(c, rules::Stat::Mean),
                        "rt_p50_s": p.class_rt(c, rules::Stat::Percentile(50)),
                        "rt_p95_s": p.class_rt(c, rules::Stat::Percentile(95)),
                        "window_pageviews": p.class_samples(c),
                        "counters": p.class_counters[i],
                    })
                })
                .collect();
            let rules_state: Vec<serde_json::Value> = (0..p.rules().rule_count())
                .map(|i| {
                    let id = rules::RuleId(i as u32);
                    serde_json::json!({
                        "rule": p.rule_label(id),
                        "text": p.rule_text(id),
                        "firing": p.rule_firing(i, now, Duration::from_secs(2)),
                        "counters": p.rule_counters[i],
                        "tests": p.readings(now, id),
                    })
                })
                .collect();
            (serde_json::Value::Array(classes), serde_json::Value::Array(rules_state))
        }
    };
    serde_json::json!({
        "classes": classes,
        "rules": rules_state,
        "tables": engine.table_sizes(),
        "stats": engine.stats(),
        "slowest": engine.slowest_open_pageviews(now, SLOWEST_SHOWN),
    })
}

/// The open pageviews the status shows with their event graphs ([`Engine::slowest_open_pageviews`]).
const SLOWEST_SHOWN: usize = 5;

/// The wall clock in Unix milliseconds (the status page's time axis).
fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// The data path's health as the status shows it (`datapath`), and the queues' into the
/// metrics: how many bytes each ring of the fast path holds that no engine took yet, and its
/// size; how many packets each of rlm's queues holds and dropped; the worst lag of a report
/// behind the wall clock since the last status (`None`: not measured); the injection's limit
/// of frames a second. (Reports lost and packets passed unseen are the fast path's counters
/// `ring_full` and `stale`.)
fn datapath_status(
    m: &metrics::Metrics,
    path: Option<&InlinePath>,
    queues: &[u16],
    lag_max_ns: Option<u64>,
    inject_max_per_s: f64,
) -> serde_json::Value {
    let rings: Vec<serde_json::Value> = path
        .map(|p| p.rings_waiting())
        .unwrap_or_default()
        .into_iter()
        .map(|(waiting, size)| serde_json::json!({ "waiting_bytes": waiting, "size_bytes": size }))
        .collect();
    let queues: Vec<serde_json::Value> = metrics::queue_counters()
        .into_iter()
        .filter(|q| queues.contains(&q.queue))
        .map(|q| {
            let l = metrics::QueueLabel { queue: q.queue.to_string() };
            m.queue_dropped.get_or_create(&l).set(q.dropped as i64);
            m.queue_user_dropped.get_or_create(&l).set(q.user_dropped as i64);
            serde_json::json!({ "queue": q.queue, "waiting": q.waiting, "dropped": q.dropped, "user_dropped": q.user_dropped })
        })
        .collect();
    serde_json::json!({
        "rings": rings,
        "queues": queues,
        "lag_max_ms": lag_max_ns.map(|ns| ns as f64 / 1e6),
        "inject_max_per_s": inject_max_per_s,
    })
}

/// Each rule's `firing` of a status into the metrics (`rlm_rule_firing`).
fn publish_rule_firing(metrics: &metrics::Metrics, status: &serde_json::Value) {
    for r in status["rules"].as_array().into_iter().flatten() {
        if let (Some(rule), Some(firing)) = (r["rule"].as_str(), r["firing"].as_bool()) {
            metrics.rule_firing.get_or_create(&metrics::RuleLabel { rule: rule.to_string() }).set(i64::from(firing));
        }
    }
}

/// The engine's configuration for `rlm run`: `inject`, whether rlm sends frames; `fast`,
/// whether the eBPF fast path (which alone queues the segments content adaptation and REJECT
/// need) is in use.
fn engine_config(cfg: &RunConfig, inject: bool, fast: bool) -> Config {
    let limits = cfg.limits.derive();
    let mut ecfg = Config {
        server_ports: cfg.server_ports.clone(),
        decode_bodies: false,
        // Building transaction records costs the engine: only for their output.
        transaction_records: cfg.transactions.is_some(),
        class_window: Duration::from_secs_f64(cfg.class_window_s),
        inject,
        adapt: cfg.adapt && fast,
        reject: inject && fast,
        fast_limit: cfg.fast_limit,
        fast_release_per_s: cfg.fast_release_per_s,
        inject_budget: rlm_core::actions::InjectBudget {
            per_handshake: cfg.inject_per_handshake,
            burst: cfg.inject_burst,
            max_per_s: cfg.inject_max_per_s,
            ..Default::default()
        },
        max_connections: limits.max_connections,
        max_held_bytes: limits.max_held_bytes,
        unproven_records_per_s: Some(f64::from(limits.unproven_records_per_s)),
        ..Config::default()
    };
    ecfg.pageview.max_list_bytes = limits.max_list_bytes;
    ecfg.pageview.connect_timeout = Duration::from_secs_f64(cfg.connect_timeout_s);
    // A pageview's event graph is only written in its record; without the pageview output
    // only its response time and class are used, and the graph would cost memory for nothing.
    if cfg.pageviews.is_none() {
        ecfg.pageview.max_events = 0;
    }
    ecfg
}

/// The fast path's counters, into the metrics and as the status shows them (with the map
/// updates that failed).
fn fastpath_status(m: &metrics::Metrics, path: &InlinePath, update_errors: u64) -> serde_json::Value {
    match path.counters() {
        Ok(c) => {
            let counters = fastpath_counters(&c);
            for (counter, v) in counters {
                m.fastpath.get_or_create(&metrics::CounterLabel { counter }).set(v as i64);
            }
            let mut o: serde_json::Map<String, serde_json::Value> = counters.into_iter().map(|(k, v)| (k.to_string(), v.into())).collect();
            o.insert("map_update_errors".into(), update_errors.into());
            serde_json::Value::Object(o)
        }
        Err(e) => serde_json::json!({ "error": format!("{e:#}") }),
    }
}

/// The records written and dropped by kind, into the metrics and as the status shows them.
fn records_status(m: &metrics::Metrics, records: Option<&RecordWriter>) -> serde_json::Value {
    let counts = records.map_or_else(RecordCounts::default, RecordWriter::counts);
    let mut out = serde_json::Map::new();
    for (kind, written, dropped) in counts.by_kind() {
        let l = metrics::KindLabel { kind };
        metrics::store_total(&m.records_written, l.clone(), written);
        metrics::store_total(&m.records_dropped, l, dropped);
        out.insert(kind.to_string(), serde_json::json!({ "written": written, "dropped": dropped }));
    }
    out.insert("reopen_errors".to_string(), counts.reopen_errors.into());
    serde_json::Value::Object(out)
}

/// SIGHUP's reading of the rule file at `path`: the rule set and its digest if the file changed
/// since the rules in force were read (their digest `in_force`) and it checks; None, logged,
/// if it is unchanged (the rules in force are kept untouched) or rejected (they stay).
fn changed_rules(path: &std::path::Path, in_force: Option<u64>) -> Option<(rules::RuleSet, Option<u64>)> {
    let digest = rules_digest(path);
    if digest.is_some() && digest == in_force {
        info!(rules = %path.display(), "SIGHUP: the rule file is unchanged; the rules in force are kept as they are");
        return None;
    }
    match load_rules(path) {
        Ok(r) => Some((r, digest)),
        Err(e) => {
            warn!("SIGHUP: {} rejected, the old rules stay in force: {}", path.display(), format!("{e:#}").replace('\n', " | "));
            None
        }
    }
}

/// The SRPT classifier on the client port's egress, loaded and attached, its per-flow state
/// pinned if `[srpt] state_dir` says so (`pinned`: where; `state_root_created`: whether rlm
/// made the directory); None with `[srpt] mode = "off"`.
fn srpt_egress(cfg: &RunConfig, pinned: &mut Option<std::path::PathBuf>, state_root_created: &mut bool) -> Result<Option<SrptEgress>> {
    if cfg.srpt.mode == SrptRunMode::Off {
        return Ok(None);
    }
    let params = cfg.srpt.params(kmod_fastpath::classid(shaper::MAJOR, shaper::FIRST_LEAF));
    let mut e = SrptEgress::load(&cfg.server_ports, &params).context("cannot set up the SRPT classifier")?;
    if let Some(dir) = cfg.srpt.state_path(&cfg.client_port) {
        *state_root_created = !std::path::Path::new(&cfg.srpt.state_dir).exists();
        match e.keep_state(&dir) {
            Ok(k) => {
                match k.flows + k.responses {
                    0 => info!(dir = %dir.display(), "SRPT: per-flow state pinned"),
                    _ => {
                        info!(dir = %dir.display(), responses = k.responses, flows = k.flows, "SRPT: per-flow state pinned; flows taken over from an earlier rlm")
                    }
                }
                *pinned = Some(dir);
            }
            Err(err) => warn!("SRPT: per-flow state is not kept across restarts: {err:#}"),
        }
    }
    e.attach_to(&cfg.client_port, cfg.ebpf.attach.mode()).context("cannot attach the SRPT classifier")?;
    Ok(Some(e))
}

/// The SRPT classifier's bands and counters, into the metrics and as the status shows them
/// (null without one).
fn srpt_status(m: &metrics::Metrics, classifier: Option<&SrptEgress>, mode: SrptRunMode, bands_shown: usize) -> serde_json::Value {
    let Some(e) = classifier else { return serde_json::Value::Null };
    match (e.class_stats(), e.counters()) {
        (Ok(bands), Ok(c)) => {
            for (band, b) in bands.iter().enumerate().take(bands_shown) {
                metrics::store_total(&m.srpt_band_packets, metrics::BandLabel { band: band as u32 }, b.packets);
            }
            serde_json::json!({
                "mode": mode,
                "bands": bands.iter().take(bands_shown).map(|b| serde_json::json!({"packets": b.packets, "bytes": b.bytes})).collect::<Vec<_>>(),
                "known": c.known, "attained": c.attained, "retx": c.retx, "adopted": c.adopted, "rolled": c.rolled, "midflow": c.midflow,
                "stale": c.stale,
            })
        }
        (Err(e), _) | (_, Err(e)) => serde_json::json!({ "error": format!("{e:#}") }),
    }
}

#[cfg(test)]
mod clock_tests {
    use super::*;

    /// rlm's clock is CLOCK_MONOTONIC shifted once: the wall clock's readings come onto it through
    /// where the wall clock is now, monotonic stamps through the shift taken at the start, and a
    /// stamp past now is brought back to now.
    #[test]
    fn stamps_of_both_clocks_land_on_rlms_clock_and_none_after_now() {
        let now = now_ts();
        let real = clock_ns(libc::CLOCK_REALTIME) as u64;
        let mono = clock_ns(libc::CLOCK_MONOTONIC) as u64;
        // Within a second: the readings are taken one after the other, and a wrong shift is decades.
        let close = |a: rlm_core::Timestamp, b: rlm_core::Timestamp| a.as_nanos().abs_diff(b.as_nanos()) < 1_000_000_000;
        assert!(close(from_real(real), now) && close(from_mono(mono), now), "{now} {} {}", from_real(real), from_mono(mono));
        // Out-of-range readings saturate instead of wrapping.
        assert_eq!(on_clock(i64::MAX, 5), rlm_core::Timestamp(i64::MAX as u64));
        assert_eq!(on_clock(-10, 5), rlm_core::Timestamp(0));
        assert!(from_mono(u64::MAX) > now);
        // A report stamped in 2262 is taken as now; one of a moment ago as it is.
        let mut ceiling = now;
        let t = not_after_now(from_mono(u64::MAX), &mut ceiling);
        assert!(t >= now && t <= now_ts(), "{t}");
        let before = rlm_core::Timestamp(now.as_nanos() - 1_000);
        assert_eq!(not_after_now(before, &mut ceiling), before);
    }
}

#[cfg(test)]
mod fastpath_counter_tests {
    use super::*;

    /// Every counter of the fast path reaches /status and /metrics: the struct is written out
    /// whole here, so that a counter added to it fails to compile until it is listed too
    /// (`req_queued`, `rej_queued` and `rej_dropped` were counted in the kernel and shown nowhere).
    #[test]
    fn every_fast_path_counter_is_shown() {
        let c = kmod_fastpath::inline::Counters {
            syn_passed: 1,
            syn_dropped: 2,
            syn_queued: 3,
            observed: 4,
            ring_full: 5,
            ack_skipped: 6,
            resp_queued: 7,
            req_queued: 8,
            stale: 9,
            rej_queued: 10,
            rej_dropped: 11,
            syn_held: 12,
            hold_failed: 13,
            hold_late: 14,
            body_cut: 15,
            body_armed: 16,
            body_silent: 17,
            tiny_frag: 18,
        };
        let mut shown: Vec<u64> = fastpath_counters(&c).iter().map(|&(_, v)| v).collect();
        shown.sort_unstable();
        assert_eq!(shown, (1..=18).collect::<Vec<u64>>(), "each counter shown once");
        let mut names: Vec<&str> = fastpath_counters(&c).iter().map(|&(k, _)| k).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), 18, "each under a name of its own");
    }
}
