//! `rlm run` with engines side by side (`[ebpf] engines = N`, `--engines N`): one thread per
//! engine, each reading the ring of its shard.
//!
//! ```text
//!  syn_admit / observe (tc) ── a client's reports ──▶ ring of its shard (kernel: shard_of_key)
//!                                                        │
//!   engine thread i: its ring ─▶ its engine ─▶ its door to the maps (mode, generation,
//!     verdicts, held SYNs' progress), its injector (held SYNs sent on, FAST SYN frames)
//!     │ class samples to the others, theirs in (every turn)      │ records, in batches
//!     ▼                                                           ▼
//!   main thread (tokio): signals, SIGHUP (records reopened, rules to every engine), the
//!     heartbeat (only while every engine turns), the record writer, /status and /metrics
//! ```
//!
//! The kernel deals each client's reports to one ring ([`kmod_fastpath::inline::InlinePath::load_sharded`]),
//! so each engine sees all of its clients' packets and none of the others' and needs no lock:
//! a pageview is one client's. What spans clients is shared between the threads without a
//! lock on the packet path: each engine hands the others the samples its pageviews gave its
//! class windows ([`rlm_core::engine::ClassSample`]) through channels, every turn (at most
//! [`RING_DRAIN`] apart), so that every engine's RT.CLASS reads every pageview; the limits on
//! what connections hold are divided ([`Config::for_shard`]). Each engine has its own SYN
//! mode and generation in the kernel (a verdict applies under its client's engine's).
//!
//! What one engine does that several do not (refused at start, and at a reload the old rules
//! stay): content adaptation and `REJECT`/`LIMIT REQUESTS` (the netfilter queue is one socket),
//! SLA targets (one controller per engine would each set a rate), `observer = "pcap"` and
//! `undecided_syns = "queue"`. SRPT's classifier is shared: each engine writes its flows'
//! response sizes through a door of its own (`SrptEgress::door`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use kmod_fastpath::inline::{EventKind, EventRing, ShardDoor};
use rlm_core::engine::{ClassSample, Config, Engine, Event};
use rlm_core::Timestamp;
use tracing::{info, warn};

use super::calls::CallTimes;
use super::inject::Injector;
use super::metrics::{self, Metrics};
use super::records::RecordWriter;
use super::{batch_out_of_time, from_mono, hand_report, not_after_now, now_ts, publish, send_on_held_syn, RING_BATCH, RING_DRAIN, TURN_BUDGET};

/// The most engines (the kernel's rings).
pub const MAX_ENGINES: usize = kmod_fastpath::inline::MAX_SHARDS;

/// Batches of records waiting for the main thread, at most (past it, counted as lost).
const RECORD_BATCHES: usize = 1024;

/// Why a rule set cannot be carried out by engines side by side; None if it can.
pub fn not_shardable(r: &rules::RuleSet) -> Option<&'static str> {
    let p = rlm_core::policy::Policy::new(r.clone(), Duration::from_secs(10));
    if p.removes_embeds() || p.rewrites_embeds() || p.predicts() {
        return Some("content adaptation (REMOVE/REWRITE EMBEDS) goes through the netfilter queue, which one engine reads");
    }
    if p.at_requests() {
        return Some("REJECT and ABORT IDLE go through the netfilter queue, which one engine reads");
    }
    if p.controller().is_some() {
        return Some("SLA targets and LIMIT REQUESTS need one controller, which engines side by side would each be");
    }
    None
}

/// What the main thread tells an engine.
enum Command {
    /// A new rule set (SIGHUP).
    Rules(rules::RuleSet),
    /// Stop: close every pageview, hand the records, end.
    Stop,
}

/// What an engine's thread shows the main thread, renewed each second.
#[derive(Default)]
struct Shown {
    status: serde_json::Value,
    calls: Option<CallTimes>,
}

/// The engines' threads, seen from the main thread.
pub struct Engines {
    threads: Vec<std::thread::JoinHandle<()>>,
    commands: Vec<Sender<Command>>,
    shown: Vec<Arc<Mutex<Shown>>>,
    /// When each engine last turned (CLOCK_MONOTONIC-based [`Instant`] offsets, in ns since
    /// `epoch`).
    turns: Vec<Arc<AtomicU64>>,
    epoch: Instant,
    /// The engines' records, in batches.
    pub records: tokio::sync::mpsc::Receiver<Vec<Event>>,
}

/// One engine's parts, made before its thread starts.
pub struct EngineParts {
    pub engine: Engine,
    pub ring: EventRing,
    pub door: ShardDoor,
    /// Its door to the SRPT classifier's per-flow maps (`[srpt]` on).
    pub srpt: Option<kmod_fastpath::SrptDoor>,
    pub injector: Injector,
}

impl Engines {
    /// Start one thread per engine (`parts`, in shard order). `panic_at`: `--fault
    /// panic-after` (engine 0's thread panics then).
    /// `writing`: whether any record is written (else each engine drops its events itself, so
    /// that their memory is freed by the thread that made it).
    pub fn start(parts: Vec<EngineParts>, metrics: &Metrics, writing: bool, panic_at: Option<Instant>) -> Result<Engines> {
        let n = parts.len();
        let (record_tx, records) = tokio::sync::mpsc::channel(RECORD_BATCHES);
        let (sample_tx, sample_rx): (Vec<_>, Vec<_>) = (0..n).map(|_| std::sync::mpsc::channel::<Arc<[ClassSample]>>()).unzip();
        let epoch = Instant::now();
        let mut e = Engines { threads: Vec::new(), commands: Vec::new(), shown: Vec::new(), turns: Vec::new(), epoch, records };
        for (i, (p, inbox)) in parts.into_iter().zip(sample_rx).enumerate() {
            let (ctx, crx) = std::sync::mpsc::channel();
            let shown = Arc::new(Mutex::new(Shown::default()));
            let turn = Arc::new(AtomicU64::new(0));
            let peers: Vec<Sender<Arc<[ClassSample]>>> = sample_tx.iter().enumerate().filter(|&(j, _)| j != i).map(|(_, s)| s.clone()).collect();
            let mut lp = EngineLoop {
                index: i,
                engine: p.engine,
                ring: p.ring,
                door: p.door,
                srpt: p.srpt,
                injector: p.injector,
                calls: CallTimes::default(),
                metrics: metrics.clone(),
                records: writing.then(|| record_tx.clone()),
                records_lost: 0,
                peers,
                inbox,
                commands: crx,
                update_errors: 0,
                last_report: Timestamp::ZERO,
                turn: turn.clone(),
                epoch,
                shown: shown.clone(),
                panic_at: if i == 0 { panic_at } else { None },
            };
            let t = std::thread::Builder::new()
                .name(format!("rlm-engine-{i}"))
                .spawn(move || lp.run())
                .with_context(|| format!("cannot start engine thread {i}"))?;
            e.threads.push(t);
            e.commands.push(ctx);
            e.shown.push(shown);
            e.turns.push(turn);
        }
        Ok(e)
    }

    /// Whether every engine turned within `within` (the heartbeat is written only then: an
    /// engine that stalls or died makes the programs fail open).
    pub fn all_turning(&self, within: Duration) -> bool {
        let now = self.epoch.elapsed().as_nanos() as u64;
        self.turns.iter().all(|t| now.saturating_sub(t.load(Ordering::Acquire)) <= within.as_nanos() as u64)
    }

    /// An engine whose thread ended before it was told to stop (a panic).
    pub fn ended(&self) -> Option<usize> {
        self.threads.iter().position(|t| t.is_finished())
    }

    /// Put a rule set in force in every engine.
    pub fn set_rules(&self, r: &rules::RuleSet) {
        for c in &self.commands {
            let _ = c.send(Command::Rules(r.clone()));
        }
    }

    /// Stop every engine and wait for their threads (they close their pageviews and hand
    /// their last records first).
    pub fn stop(&mut self) {
        for c in &self.commands {
            let _ = c.send(Command::Stop);
        }
        for (i, t) in self.threads.drain(..).enumerate() {
            if t.join().is_err() {
                warn!(engine = i, "an engine thread panicked");
            }
        }
    }

    /// The engines' part of the status: their counters and table sizes added up, the classes
    /// and rules of engine 0 (whose windows hold every engine's samples) with every engine's
    /// counters added, and each engine's own (`engines`).
    pub fn status(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut parts = Vec::new();
        let mut calls: Option<CallTimes> = None;
        for s in &self.shown {
            let Ok(s) = s.lock() else { continue };
            parts.push(s.status.clone());
            if let Some(c) = &s.calls {
                match calls.as_mut() {
                    Some(all) => all.merge(c),
                    None => calls = Some(c.clone()),
                }
            }
        }
        let mut out = serde_json::Map::new();
        for key in ["stats", "tables", "injector", "classes", "rules"] {
            let mut v = serde_json::Value::Null;
            for (i, p) in parts.iter().enumerate() {
                let part = p.get(key).cloned().unwrap_or(serde_json::Value::Null);
                if i == 0 {
                    v = part;
                } else {
                    add_json(&mut v, &part);
                }
            }
            out.insert(key.to_string(), v);
        }
        // The slowest open pageviews of all the engines.
        let mut slowest: Vec<serde_json::Value> = parts.iter().flat_map(|p| p["slowest"].as_array().cloned().unwrap_or_default()).collect();
        slowest.sort_by(|a, b| b["rt_s"].as_f64().unwrap_or(0.0).total_cmp(&a["rt_s"].as_f64().unwrap_or(0.0)));
        slowest.truncate(super::SLOWEST_SHOWN);
        out.insert("slowest".into(), serde_json::Value::Array(slowest));
        out.insert("engine_call_us".into(), calls.map_or(serde_json::Value::Null, |c| c.summary()));
        out.insert("engines".into(), serde_json::Value::Array(parts));
        out
    }
}

/// Add `b` into `a`: numbers summed, objects key by key, arrays item by item, booleans or'ed;
/// anything else (text, a class's response time, which every engine's windows share) kept as
/// `a` has it. Keys named `rt_*`, `window_pageviews` and `tests` (a rule's readings of the
/// shared windows) are kept too (shared, not summed).
fn add_json(a: &mut serde_json::Value, b: &serde_json::Value) {
    use serde_json::Value;
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let sum = match (x.as_u64(), y.as_u64()) {
                (Some(p), Some(q)) => Value::from(p.saturating_add(q)),
                _ => Value::from(x.as_f64().unwrap_or(0.0) + y.as_f64().unwrap_or(0.0)),
            };
            *x = match sum {
                Value::Number(n) => n,
                _ => return,
            };
        }
        (Value::Bool(x), Value::Bool(y)) => *x |= *y,
        (Value::Object(x), Value::Object(y)) => {
            for (k, v) in y {
                if k.starts_with("rt_") || k == "window_pageviews" || k == "tests" {
                    continue;
                }
                match x.get_mut(k) {
                    Some(slot) => add_json(slot, v),
                    None => {
                        x.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            for (slot, v) in x.iter_mut().zip(y) {
                add_json(slot, v);
            }
        }
        _ => {}
    }
}

/// One engine's thread.
struct EngineLoop {
    index: usize,
    engine: Engine,
    ring: EventRing,
    door: ShardDoor,
    srpt: Option<kmod_fastpath::SrptDoor>,
    injector: Injector,
    calls: CallTimes,
    metrics: Metrics,
    /// To the main thread's record writer; None: no record output.
    records: Option<tokio::sync::mpsc::Sender<Vec<Event>>>,
    /// Records the main thread had no room for.
    records_lost: u64,
    /// The other engines' inboxes, and this one's.
    peers: Vec<Sender<Arc<[ClassSample]>>>,
    inbox: Receiver<Arc<[ClassSample]>>,
    commands: Receiver<Command>,
    update_errors: u64,
    last_report: Timestamp,
    turn: Arc<AtomicU64>,
    epoch: Instant,
    shown: Arc<Mutex<Shown>>,
    panic_at: Option<Instant>,
}

impl EngineLoop {
    fn run(&mut self) {
        let mut last_shown = Instant::now() - Duration::from_secs(10);
        loop {
            match self.commands.try_recv() {
                Ok(Command::Rules(r)) => self.engine.set_rules(Some(r)),
                Ok(Command::Stop) | Err(TryRecvError::Disconnected) => break,
                Err(TryRecvError::Empty) => {}
            }
            let wait = match self.engine.poll_timeout() {
                Some(t) => Duration::from_nanos(t.as_nanos().saturating_sub(now_ts().as_nanos())).min(RING_DRAIN),
                None => RING_DRAIN,
            };
            self.wait_ring(wait);
            let mut now = now_ts();
            let emptied = self.drain_turn();
            if !emptied {
                now = now.min(self.last_report);
            }
            if self.engine.poll_timeout().is_some_and(|t| t <= now) {
                self.calls.time(|| self.engine.handle_timeout(now));
            }
            self.share_samples();
            self.apply_fastpath();
            self.send_transmits();
            self.hand_events();
            self.turn.store(self.epoch.elapsed().as_nanos() as u64, Ordering::Release);
            if last_shown.elapsed() >= Duration::from_secs(1) {
                last_shown = Instant::now();
                self.show();
            }
            if self.panic_at.is_some_and(|t| Instant::now() >= t) {
                panic!("--fault panic-after: engine 0's thread panics as asked");
            }
        }
        self.finish();
    }

    /// Wait until the ring's descriptor is readable (the kernel wakes it for a held SYN and
    /// when a quarter of the ring waits) or `wait` passed.
    fn wait_ring(&self, wait: Duration) {
        use std::os::fd::AsRawFd;
        let mut pfd = libc::pollfd { fd: self.ring.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // Rounded up: a wait under a millisecond is not a busy loop.
        let ms = wait.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd, for the length given.
        unsafe { libc::poll(&mut pfd, 1, ms) };
    }

    /// Reports until the ring is empty (true) or [`TURN_BUDGET`] passed (false).
    fn drain_turn(&mut self) -> bool {
        let start = Instant::now();
        loop {
            if self.drain_ring() < RING_BATCH {
                return true;
            }
            if start.elapsed() >= TURN_BUDGET {
                return false;
            }
        }
    }

    fn drain_ring(&mut self) -> usize {
        let mut n = 0;
        let mut held_taken = None;
        let (started, mut out_of_time, mut ceiling) = (Instant::now(), false, now_ts());
        while n < RING_BATCH {
            if batch_out_of_time(n, started) {
                out_of_time = true;
                break;
            }
            let Some(item) = self.ring.next() else { break };
            n += 1;
            let Some(ev) = kmod_fastpath::inline::Event::parse(&item) else { continue };
            let ts = not_after_now(from_mono(ev.ts_ns), &mut ceiling);
            self.last_report = ts;
            if let EventKind::SynHeld { .. } = ev.kind {
                let frame = ev.whole_frame().into_owned();
                held_taken = Some(ev.ts_ns);
                drop(item);
                let (door, srpt, errors) = (&mut self.door, &mut self.srpt, &mut self.update_errors);
                send_on_held_syn(&mut self.engine, &mut self.calls, Some(&mut self.injector), &self.metrics, ts, frame, |e| {
                    *errors += publish_all(e, door, srpt.as_mut())
                });
                continue;
            }
            hand_report(&mut self.engine, &mut self.calls, &ev, ts);
        }
        if let Some(stamp) = held_taken {
            if let Err(e) = self.door.held_taken(stamp) {
                self.update_errors += 1;
                warn!(engine = self.index, "fast path: the held SYNs' progress not written ({e:#})");
            }
        }
        if n > 0 {
            self.metrics.frames.get_or_create(&metrics::SourceLabel { source: "fastpath" }).inc_by(n as u64);
        }
        // Out of time counts as a full batch: the caller's turn ends with reports still waiting.
        if out_of_time {
            RING_BATCH
        } else {
            n
        }
    }

    /// This engine's new class samples to the others, theirs into its windows.
    fn share_samples(&mut self) {
        let mine = self.engine.take_class_samples();
        if !mine.is_empty() {
            let mine: Arc<[ClassSample]> = mine.into();
            for p in &self.peers {
                let _ = p.send(mine.clone());
            }
        }
        while let Ok(theirs) = self.inbox.try_recv() {
            self.engine.add_class_samples(&theirs);
        }
    }

    fn apply_fastpath(&mut self) {
        self.update_errors += publish_all(&mut self.engine, &mut self.door, self.srpt.as_mut());
    }

    fn send_transmits(&mut self) {
        while let Some(t) = self.engine.poll_transmit() {
            self.injector.send(&t);
        }
    }

    /// The engine's events: the metrics, and the records to the main thread in one batch (a
    /// batch it has no room for is counted as lost).
    fn hand_events(&mut self) {
        let mut batch = Vec::new();
        while let Some(ev) = self.engine.poll_event() {
            super::observe_event(&self.metrics, &ev);
            if self.records.is_some() {
                batch.push(ev);
            }
        }
        let Some(tx) = &self.records else { return };
        if batch.is_empty() {
            return;
        }
        let n = batch.len() as u64;
        if tx.try_send(batch).is_err() {
            self.records_lost += n;
        }
    }

    /// This engine's part of the status.
    fn show(&mut self) {
        let status = super::engine_status(&self.engine, Timestamp(now_ts().as_nanos()));
        let c = self.injector.counters;
        let mut status = match status {
            serde_json::Value::Object(m) => m,
            _ => serde_json::Map::new(),
        };
        status.insert(
            "injector".into(),
            serde_json::json!({ "sent": c.sent, "failed": c.failed, "forwarded": c.forwarded, "forward_failed": c.forward_failed }),
        );
        status.insert("map_update_errors".into(), self.update_errors.into());
        status.insert("records_lost".into(), self.records_lost.into());
        status.insert("engine".into(), self.index.into());
        if let Ok(mut s) = self.shown.lock() {
            s.status = serde_json::Value::Object(status);
            s.calls = Some(self.calls.clone());
        }
    }

    /// At stop: what the ring holds (at most a second of it), then every pageview closed and
    /// its records handed on.
    fn finish(&mut self) {
        let until = Instant::now() + Duration::from_secs(1);
        while self.drain_ring() == RING_BATCH && Instant::now() < until {}
        self.engine.shutdown(now_ts());
        self.share_samples();
        self.hand_events();
        self.show();
        info!(engine = self.index, "engine stopped");
    }
}

/// Write what the engine published through its doors; returns the updates that failed (the
/// kernel goes on without them: their SYNs are held again, a response is ranked by the bytes
/// sent).
fn publish_all(engine: &mut Engine, door: &mut ShardDoor, mut srpt: Option<&mut kmod_fastpath::SrptDoor>) -> u64 {
    use kmod_fastpath::FlowKey;
    use rlm_core::FastpathUpdate;
    let mut failed = 0;
    while let Some(u) = engine.poll_fastpath() {
        let r = match (&u, srpt.as_deref_mut()) {
            (FastpathUpdate::ResponseSize { client, server, start, end }, Some(s)) => {
                Some(s.set_response(FlowKey::new(*server, *client), *start, *end))
            }
            (FastpathUpdate::FlowEnd { client, server }, Some(s)) => Some(s.end_flow(FlowKey::new(*server, *client))),
            _ => publish(door, &u),
        };
        match r {
            Some(Ok(())) | None => {}
            Some(Err(e)) => {
                if failed == 0 {
                    warn!(shard = door.shard(), "fast path: cannot update a map ({e:#})");
                }
                failed += 1;
            }
        }
    }
    failed
}

/// The fast path and the engines' parts, made before the capabilities are dropped.
pub struct Sharded {
    pub path: kmod_fastpath::inline::InlinePath,
    /// The SRPT classifier (`[srpt]` on): beaten and shown here, its flows written by the
    /// engines through their doors.
    pub srpt: Option<kmod_fastpath::SrptEgress>,
    pub parts: Vec<EngineParts>,
    /// [`super::rules_digest`] of the rules the engines were given.
    pub rules_digest: Option<u64>,
}

/// The main thread while the engines run: signals (SIGHUP reopens the record files and puts a
/// changed rule file in force in every engine, if they can carry it out), the heartbeat
/// (written only while every engine turns, so that one that stalls or dies makes the programs
/// fail open), the records to the writer, the status and metrics each second. At SIGINT or
/// SIGTERM, holding is turned off and the engines stop (each closes its pageviews and hands
/// their records on); the records are written and counted.
pub async fn run(
    cfg: &super::RunConfig,
    sharded: Sharded,
    mut records: Option<RecordWriter>,
    metrics: Metrics,
    status: super::metrics::Status,
) -> Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let Sharded { mut path, mut srpt, parts, mut rules_digest } = sharded;
    let n = parts.len();
    let panic_at = cfg.fault.map(|super::Fault::PanicAfter(d)| Instant::now() + d);
    let mut engines = Engines::start(parts, &metrics, records.is_some(), panic_at)?;
    let beat = |path: &mut kmod_fastpath::inline::InlinePath, srpt: &mut Option<kmod_fastpath::SrptEgress>| {
        if let Err(e) = path.beat().and_then(|()| srpt.as_mut().map_or(Ok(()), |e| e.beat())) {
            warn!("fast path: heartbeat not written: {e:#}");
        }
    };
    beat(&mut path, &mut srpt);
    let (mut hup, mut int, mut term) = (signal(SignalKind::hangup())?, signal(SignalKind::interrupt())?, signal(SignalKind::terminate())?);
    let started = Instant::now();
    let mut tick = tokio::time::interval(super::BEAT_EVERY);
    let mut last_status = Instant::now() - Duration::from_secs(10);
    let result = loop {
        tokio::select! {
            biased;
            _ = int.recv() => { info!("SIGINT: stopping"); break Ok(()); }
            _ = term.recv() => { info!("SIGTERM: stopping"); break Ok(()); }
            _ = hup.recv() => {
                if let Some(w) = &records {
                    w.request_reopen();
                    info!("SIGHUP: reopening the record files");
                }
                super::notify_reloading(|| match &cfg.rules {
                    None => info!("SIGHUP: no rule file given; nothing to reload"),
                    Some(p) => {
                        if let Some((r, digest)) = super::changed_rules(p, rules_digest) {
                            match not_shardable(&r) {
                                Some(why) => warn!("SIGHUP: {} rejected, the old rules stay in force: {n} engines side by side cannot carry it out: {why}", p.display()),
                                None => {
                                    info!(rules = %p.display(), summary = %rules::summary(&r).replace('\n', ";"), engines = n, "SIGHUP: new rules in force");
                                    engines.set_rules(&r);
                                    rules_digest = digest;
                                }
                            }
                        }
                    }
                });
            }
            Some(batch) = engines.records.recv() => {
                if let Some(w) = records.as_mut() {
                    for ev in batch {
                        w.send(ev);
                    }
                }
            }
            _ = tick.tick() => {}
        }
        if let Some(i) = engines.ended() {
            break Err(anyhow::anyhow!("engine {i}'s thread ended on its own (it panicked): rlm stops"));
        }
        // Beaten only while every engine turns: within HEARTBEAT_STALE of one stalling the
        // programs pass everything.
        if engines.all_turning(kmod_fastpath::HEARTBEAT_STALE / 2) {
            beat(&mut path, &mut srpt);
        }
        if let Some(w) = records.as_mut() {
            w.tick();
        }
        if last_status.elapsed() >= Duration::from_secs(1) {
            last_status = Instant::now();
            publish_status(cfg, &engines, &path, srpt.as_ref(), records.as_ref(), &metrics, &status, started);
        }
    };
    // SYNs held from here on would wait for engines that no longer send them on.
    if let Err(e) = path.set_hold_syns(false) {
        warn!("fast path: SYNs are still held while rlm stops: {e:#}");
    }
    engines.stop();
    while let Ok(batch) = engines.records.try_recv() {
        if let Some(w) = records.as_mut() {
            for ev in batch {
                w.send(ev);
            }
        }
    }
    let counts = records.take().map_or_else(super::RecordCounts::default, RecordWriter::close);
    let [t, p, d] = counts.by_kind();
    info!(
        "records: transactions written={} dropped={}, pageviews written={} dropped={}, decisions written={} dropped={}",
        t.1, t.2, p.1, p.2, d.1, d.2
    );
    result
}

/// The status (`/status`) and the metrics of the engines side by side.
#[allow(clippy::too_many_arguments)]
fn publish_status(
    cfg: &super::RunConfig,
    engines: &Engines,
    path: &kmod_fastpath::inline::InlinePath,
    srpt: Option<&kmod_fastpath::SrptEgress>,
    records: Option<&RecordWriter>,
    m: &Metrics,
    status: &super::metrics::Status,
    started: Instant,
) {
    let parts = engines.status();
    let errors: u64 = parts["engines"].as_array().into_iter().flatten().filter_map(|e| e["map_update_errors"].as_u64()).sum();
    let tables = &parts["tables"];
    let limits = cfg.limits.derive();
    m.connections.set(tables["connections"].as_i64().unwrap_or(0));
    m.open_pageviews.set(tables["open_pageviews"].as_i64().unwrap_or(0));
    for (bound, key, limit) in [
        ("connections", "connections", limits.max_connections),
        ("held_bytes", "held_bytes", limits.max_held_bytes),
        ("pageview_list_bytes", "pageview_list_bytes", limits.max_list_bytes),
    ] {
        m.held.get_or_create(&metrics::BoundLabel { bound }).set(tables[key].as_i64().unwrap_or(0));
        m.limit.get_or_create(&metrics::BoundLabel { bound }).set(limit as i64);
    }
    super::publish_rule_firing(m, &serde_json::Value::Object(parts.clone()));
    let mut v = serde_json::json!({
        "state": "running",
        "observer": "ebpf",
        "fastpath": super::fastpath_status(m, path, errors),
        "srpt": super::srpt_status(m, srpt, cfg.srpt.mode, cfg.srpt.leaves() as usize),
        "controller": null,
        "bridge": cfg.bridge,
        "uptime_s": started.elapsed().as_secs(),
        "rules_file": cfg.rules,
        "limits": limits,
        "records": super::records_status(m, records),
        "datapath": super::datapath_status(m, Some(path), &[], None, cfg.inject_max_per_s),
    });
    if let serde_json::Value::Object(o) = &mut v {
        o.extend(parts);
    }
    status.set(v, super::unix_ms());
}

/// The engines' configuration checks: how many, and what they need.
pub fn check(engines: usize, cfg: &super::RunConfig) -> Result<()> {
    if !(1..=MAX_ENGINES).contains(&engines) {
        bail!("[ebpf] engines must be 1 to {MAX_ENGINES} (got {engines})");
    }
    if engines == 1 {
        return Ok(());
    }
    if cfg.observer != super::Observer::Ebpf || !cfg.holds_syns() {
        bail!("[ebpf] engines above 1 needs observer = \"ebpf\", inject = true and undecided_syns = \"hold\" (the kernel deals the reports to the engines' rings; a queue is one socket)");
    }
    Ok(())
}

/// Make the engines' parts: engine `i` of `n` configured by `base.for_shard(i, n)`, sharing
/// its class samples, with `rules` in force, its ring, its door and its injector.
pub fn parts(
    base: &Config,
    path: &mut kmod_fastpath::inline::InlinePath,
    srpt: Option<&kmod_fastpath::SrptEgress>,
    rules: Option<&rules::RuleSet>,
    ports: (u32, u32),
) -> Result<Vec<EngineParts>> {
    let n = path.shards();
    let rings = path.take_rings()?;
    let mut out = Vec::with_capacity(n);
    for (i, ring) in rings.into_iter().enumerate() {
        let mut engine = Engine::new(base.for_shard(i, n));
        engine.enable_fastpath();
        engine.enable_body_cuts();
        engine.share_class_samples();
        if srpt.is_some() {
            engine.enable_srpt();
        }
        if let Some(r) = rules {
            engine.set_rules(Some(r.clone()));
        }
        let srpt_door = srpt.map(kmod_fastpath::SrptEgress::door).transpose()?;
        out.push(EngineParts { engine, ring, door: path.shard_door(i)?, srpt: srpt_door, injector: Injector::open(ports.0, ports.1)? });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engines_status_parts_add_up_and_shared_figures_are_kept() {
        let mut a = serde_json::json!({"stats": {"frames": 3, "malformed": {"short": 1}}, "classes": [{"class": "HIGH", "rt_mean_s": 2.5, "window_pageviews": 4, "counters": {"syns": 2}}], "rules": [{"firing": false, "counters": {"fired": 1}}]});
        let b = serde_json::json!({"stats": {"frames": 4, "malformed": {"short": 2, "long": 1}}, "classes": [{"class": "HIGH", "rt_mean_s": 2.5, "window_pageviews": 4, "counters": {"syns": 5}}], "rules": [{"firing": true, "counters": {"fired": 2}}]});
        add_json(&mut a, &b);
        assert_eq!(
            a,
            serde_json::json!({"stats": {"frames": 7, "malformed": {"short": 3, "long": 1}}, "classes": [{"class": "HIGH", "rt_mean_s": 2.5, "window_pageviews": 4, "counters": {"syns": 7}}], "rules": [{"firing": true, "counters": {"fired": 3}}]})
        );
    }
}
