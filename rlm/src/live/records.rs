//! The live record writer: `rlm run`'s transactions, pageviews and decisions, written as JSON
//! lines by a thread of their own so that the packet path never waits on a disk or a pipe.
//!
//! The event loop hands each record to [`RecordWriter::send`], which gathers them and hands
//! them to the writer in batches ([`RecordWriter::tick`]): one wakeup of the writer thread per
//! batch, not per record (per record, at 7,000 transactions a second, the wakeups cost the
//! bridge 11% of its connection rate on this two-core machine). A batch goes into a bounded
//! queue or, when the queue is full, is counted as dropped: a slow output costs records, never
//! packets.
//! The writer thread serialises the records through [`RecordOut`], so its lines are byte for byte
//! those `rlm analyze` writes for the same records. It reopens its files on request (SIGHUP after
//! logrotate renamed them), rotates them by size when configured to, flushes within a second of
//! a write and at close.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rlm_core::engine::Event;
use serde::Serialize;
use tracing::warn;

use crate::records::{Dest, RecordOut};

/// A record is flushed to its output at most this long after it was written.
const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// Records gathered before they go to the writer as a batch (or fewer, when the queue is
/// smaller)...
const BATCH: usize = 256;

/// ... or when the oldest of them waited this long ([`RecordWriter::tick`]).
const BATCH_WAIT: Duration = Duration::from_millis(50);

/// How often [`RecordWriter::close`] looks whether the writer has finished.
const CLOSE_POLL: Duration = Duration::from_millis(5);

/// The kinds of record, in the order of the per-kind arrays.
const KINDS: [&str; 3] = ["transactions", "pageviews", "decisions"];

/// The index of `ev`'s kind in [`KINDS`]; None for a TLS connection's record, which `rlm run`
/// does not ask the engine for (`rlm analyze --tls` writes them).
fn kind_of(ev: &Event) -> Option<usize> {
    match ev {
        Event::Transaction(_) => Some(0),
        Event::Pageview(_) => Some(1),
        Event::Decision(_) => Some(2),
        Event::Tls(_) => None,
    }
}

/// Where each kind of record goes; a kind without a destination is neither written nor counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordOutputs {
    pub transactions: Option<Dest>,
    pub pageviews: Option<Dest>,
    pub decisions: Option<Dest>,
}

/// How the writer queues, rotates and closes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriterOptions {
    /// Records the queue holds (at least 1); records sent while it is full are dropped, counted.
    /// Records are handed over in batches of up to 256 (fewer when this is smaller), so up to
    /// one batch more waits on the event loop's side.
    pub capacity: usize,
    /// Bytes the queued records may hold in all, as [`record_bytes`] estimates them (at least
    /// one record's worth is always taken when the queue is empty); records past it are dropped,
    /// counted, like records past `capacity`. A batch is handed over once it holds an eighth of
    /// it, so that the event loop's side holds little more.
    pub capacity_bytes: usize,
    /// Rotate a file right after the write that takes it past this many bytes, so a rotated file
    /// holds at most this much plus one record. None: never rotate.
    pub max_bytes: Option<u64>,
    /// Rotated files kept, `F.1` (newest) to `F.keep` (oldest); with 0 a full file is deleted.
    pub keep: usize,
    /// How long [`RecordWriter::close`] waits for the queued records to be written.
    pub close_timeout: Duration,
}

/// Records written and dropped per kind, and the reopens and rotations that failed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RecordCounts {
    pub transactions_written: u64,
    pub transactions_dropped: u64,
    pub pageviews_written: u64,
    pub pageviews_dropped: u64,
    pub decisions_written: u64,
    pub decisions_dropped: u64,
    pub reopen_errors: u64,
}

impl RecordCounts {
    fn of(written: [u64; 3], dropped: [u64; 3], reopen_errors: u64) -> RecordCounts {
        RecordCounts {
            transactions_written: written[0],
            transactions_dropped: dropped[0],
            pageviews_written: written[1],
            pageviews_dropped: dropped[1],
            decisions_written: written[2],
            decisions_dropped: dropped[2],
            reopen_errors,
        }
    }

    /// `(kind, written, dropped)` for `transactions`, `pageviews` and `decisions`, in that order.
    pub fn by_kind(&self) -> [(&'static str, u64, u64); 3] {
        [
            (KINDS[0], self.transactions_written, self.transactions_dropped),
            (KINDS[1], self.pageviews_written, self.pageviews_dropped),
            (KINDS[2], self.decisions_written, self.decisions_dropped),
        ]
    }
}

fn load(a: &[AtomicU64; 3]) -> [u64; 3] {
    std::array::from_fn(|k| a[k].load(Ordering::Relaxed))
}

/// About the bytes a record holds: its struct, and what its strings and lists hold on the heap
/// (a few words of allocator overhead not counted). The same on both sides of the queue.
pub fn record_bytes(ev: &Event) -> usize {
    fn o(s: &Option<String>) -> usize {
        s.as_ref().map_or(0, String::capacity)
    }
    std::mem::size_of::<Event>()
        + match ev {
            Event::Transaction(t) => {
                t.uid.capacity()
                    + [
                        &t.method,
                        &t.host,
                        &t.uri,
                        &t.original_uri,
                        &t.referrer,
                        &t.version,
                        &t.request_version,
                        &t.user_agent,
                        &t.status_msg,
                        &t.content_type,
                    ]
                    .into_iter()
                    .map(o)
                    .sum::<usize>()
                    + t.anomalies.capacity() * std::mem::size_of::<&str>()
            }
            Event::Pageview(p) => {
                p.client.capacity()
                    + o(&p.host)
                    + o(&p.container)
                    + o(&p.server)
                    + o(&p.class)
                    + p.object_uris.capacity() * std::mem::size_of::<String>()
                    + p.object_uris.iter().map(String::capacity).sum::<usize>()
                    + p.events.capacity() * std::mem::size_of::<rlm_core::pageview::EventNode>()
                    + p.events.iter().map(|e| o(&e.uri)).sum::<usize>()
            }
            Event::Decision(d) => d.rule.capacity() + d.class.capacity() + d.client.capacity() + d.server.capacity() + o(&d.target),
            Event::Tls(_) => 0,
        }
}

/// Counters and requests shared by the event loop and the writer thread.
#[derive(Default)]
struct Shared {
    /// Records sent for a kind that has an output (counted by the event loop).
    sent: [AtomicU64; 3],
    /// Records written.
    written: [AtomicU64; 3],
    /// Records dropped: refused by a full queue or a finished writer, or failed to write.
    dropped: [AtomicU64; 3],
    /// Records in the queue (handed over, not yet written), and their bytes ([`record_bytes`]).
    queued: AtomicUsize,
    queued_bytes: AtomicUsize,
    reopen_errors: AtomicU64,
    /// Reopen every file before the next record.
    reopen: AtomicBool,
    /// [`RecordWriter::close`] stopped waiting: write nothing more.
    abandon: AtomicBool,
}

impl Shared {
    fn counts(&self) -> RecordCounts {
        RecordCounts::of(load(&self.written), load(&self.dropped), self.reopen_errors.load(Ordering::Relaxed))
    }

    /// The counts once nothing more is sent: every record sent and not written is dropped,
    /// including those still queued.
    fn final_counts(&self) -> RecordCounts {
        let (sent, written) = (load(&self.sent), load(&self.written));
        let dropped: [u64; 3] = std::array::from_fn(|k| sent[k].saturating_sub(written[k]));
        RecordCounts::of(written, dropped, self.reopen_errors.load(Ordering::Relaxed))
    }
}

/// The event loop's end of the live record writer. Dropping it without [`RecordWriter::close`]
/// lets the thread write what is queued and finish on its own.
pub struct RecordWriter {
    queue: SyncSender<Vec<Event>>,
    /// Batches the writer has written, coming back to be freed here: memory is freed by the
    /// thread that allocated it, so the event loop's allocator does not take back memory last
    /// touched by the writer's core (with the writer freeing them, allocating was a tenth of
    /// the loop's time under the throughput experiment's connection rate).
    written: Receiver<Vec<Event>>,
    /// Records gathered for the next batch, and when the first of them was.
    batch: Vec<Event>,
    batch_bytes: usize,
    batch_since: Option<Instant>,
    /// Records a batch holds at most, and the queue.
    batch_max: usize,
    capacity: usize,
    capacity_bytes: usize,
    /// Which kinds have an output.
    enabled: [bool; 3],
    shared: Arc<Shared>,
    thread: JoinHandle<()>,
    close_timeout: Duration,
}

impl RecordWriter {
    /// Opens the outputs (appending to a file that exists, else creating it: [`RecordOut::append`]) and starts the writer
    /// thread. Fails when an output cannot be opened or the thread cannot be started.
    pub fn spawn(outputs: RecordOutputs, opts: WriterOptions) -> Result<RecordWriter> {
        let mut outs: [Option<RecordOut>; 3] = [None, None, None];
        for (slot, dest) in outs.iter_mut().zip([&outputs.transactions, &outputs.pageviews, &outputs.decisions]) {
            *slot = dest.as_ref().map(RecordOut::append).transpose()?;
        }
        RecordWriter::start(outs, opts)
    }

    /// Starts the writer thread over opened outputs, one per kind in the order of [`KINDS`].
    fn start(outs: [Option<RecordOut>; 3], opts: WriterOptions) -> Result<RecordWriter> {
        let capacity = opts.capacity.max(1);
        let batch_max = BATCH.min(capacity);
        // Batches are bounded by `capacity` records (`Shared::queued`), the channel by the
        // most batches that can fit.
        let (queue, rx) = mpsc::sync_channel::<Vec<Event>>(capacity.div_ceil(batch_max).max(1));
        let (back, written) = mpsc::sync_channel::<Vec<Event>>(capacity.div_ceil(batch_max).max(1));
        let shared = Arc::new(Shared::default());
        let enabled = [outs[0].is_some(), outs[1].is_some(), outs[2].is_some()];
        let worker = Worker {
            sinks: outs.map(|o| o.map(|out| Sink::new(out, opts.max_bytes))),
            rx,
            shared: Arc::clone(&shared),
            max_bytes: opts.max_bytes,
            keep: opts.keep,
            dirty_since: None,
            back,
        };
        let thread =
            std::thread::Builder::new().name("rlm-records".into()).spawn(move || worker.run()).context("cannot start the record writer thread")?;
        Ok(RecordWriter {
            queue,
            written,
            batch: Vec::new(),
            batch_bytes: 0,
            batch_since: None,
            batch_max,
            capacity,
            capacity_bytes: opts.capacity_bytes.max(1),
            enabled,
            shared,
            thread,
            close_timeout: opts.close_timeout,
        })
    }

    /// Takes `ev` for the writer without ever waiting: it joins the next batch, which goes to
    /// the writer once full or at the next [`RecordWriter::tick`] past [`BATCH_WAIT`]. A record
    /// of a kind with no output is ignored, and so is a decision the engine marked `unwritten`
    /// (past `[limits] unproven_records_per_s`, counted by the engine).
    pub fn send(&mut self, ev: Event) {
        let Some(k) = kind_of(&ev) else { return };
        if !self.enabled[k] || matches!(&ev, Event::Decision(d) if d.unwritten) {
            return;
        }
        self.shared.sent[k].fetch_add(1, Ordering::Relaxed);
        self.batch_since.get_or_insert_with(Instant::now);
        self.batch_bytes += record_bytes(&ev);
        self.batch.push(ev);
        if self.batch.len() >= self.batch_max || self.batch_bytes >= self.capacity_bytes / 8 {
            self.hand_over();
        }
    }

    /// Hands the records gathered to the writer if the oldest has waited [`BATCH_WAIT`]: the
    /// event loop calls it every turn.
    pub fn tick(&mut self) {
        while let Ok(done) = self.written.try_recv() {
            drop(done);
        }
        if self.batch_since.is_some_and(|t| t.elapsed() >= BATCH_WAIT) {
            self.hand_over();
        }
    }

    /// Hands the batch to the writer without waiting; when the queue has no room for it, or the
    /// writer is gone, its records are counted as dropped.
    fn hand_over(&mut self) {
        self.batch_since = None;
        if self.batch.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut self.batch);
        let bytes = std::mem::take(&mut self.batch_bytes);
        let n = batch.len();
        let queued_bytes = self.shared.queued_bytes.load(Ordering::Acquire);
        let room =
            self.shared.queued.load(Ordering::Acquire) + n <= self.capacity && (queued_bytes == 0 || queued_bytes + bytes <= self.capacity_bytes);
        let refused = if room {
            self.shared.queued.fetch_add(n, Ordering::AcqRel);
            self.shared.queued_bytes.fetch_add(bytes, Ordering::AcqRel);
            self.queue.try_send(batch).err().map(|e| {
                self.shared.queued.fetch_sub(n, Ordering::AcqRel);
                self.shared.queued_bytes.fetch_sub(bytes, Ordering::AcqRel);
                match e {
                    mpsc::TrySendError::Full(b) | mpsc::TrySendError::Disconnected(b) => b,
                }
            })
        } else {
            Some(batch)
        };
        for k in refused.iter().flatten().filter_map(kind_of) {
            self.shared.dropped[k].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Asks the writer to reopen its files before its next record (SIGHUP, after logrotate
    /// renamed them): each record goes to exactly one file, the old one or the new one.
    pub fn request_reopen(&self) {
        self.shared.reopen.store(true, Ordering::Release);
    }

    /// Records written and dropped so far (records still queued are in neither).
    pub fn counts(&self) -> RecordCounts {
        self.shared.counts()
    }

    /// Stops taking records and waits up to `close_timeout` for the queued ones to be written
    /// and flushed. Returns the final counts, in which written plus dropped is what was sent.
    /// When the writer does not finish in time, the records sent but not written count as
    /// dropped and the thread is left to stop at its next record; a record it was writing at
    /// that moment may still reach the file.
    pub fn close(mut self) -> RecordCounts {
        self.hand_over();
        let RecordWriter { queue, shared, thread, close_timeout, .. } = self;
        drop(queue);
        // A timeout too long to add is as good as a year.
        let deadline = Instant::now().checked_add(close_timeout).unwrap_or_else(|| Instant::now() + Duration::from_secs(365 * 86_400));
        while !thread.is_finished() && Instant::now() < deadline {
            std::thread::sleep(CLOSE_POLL.min(deadline.saturating_duration_since(Instant::now())));
        }
        if !thread.is_finished() {
            shared.abandon.store(true, Ordering::Release);
            warn!("records: the writer did not finish within {close_timeout:?}; the records not yet written are dropped");
        } else if thread.join().is_err() {
            warn!("records: the writer thread panicked; the records not yet written are dropped");
        }
        shared.final_counts()
    }
}

/// Puts the calling thread (the writer) under SCHED_IDLE: it runs on CPU time nothing else on
/// the box wants. When the traffic keeps every core busy, the records wait, not the packets,
/// and once the queue is full they are dropped, counted. Without it, on this two-core machine,
/// writing 6,000 transactions a second took the bridge 11-13% of its connection rate (the
/// throughput experiment's full run, rlm against rlm without records). A failure is logged and
/// the writer runs as it is.
fn give_way() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; a valid policy and parameter.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } != 0 {
        warn!("records: the writer could not go to SCHED_IDLE: {}", std::io::Error::last_os_error());
    }
}

/// Empties the calling thread's (the writer's) capability sets. Capabilities are a thread's
/// own, and the writer starts before `rlm run` drops what it does not keep (its outputs are
/// opened while rlm may still write anywhere), so without this it kept every capability rlm
/// was started with. It needs none: it writes to files already open and reopens them as the
/// user rlm runs as. A failure is logged.
fn shed_capabilities() {
    if let Err(e) = super::keep_capabilities(&[]) {
        warn!("records: the writer could not drop its capabilities: {e:#}");
    }
}

/// One output of the writer thread.
struct Sink {
    out: RecordOut,
    /// Rotate once the file is past this many bytes (`u64::MAX`: never).
    rotate_at: u64,
    /// The last write or flush failed: warned about once, until a write succeeds.
    failing: bool,
}

impl Sink {
    fn new(out: RecordOut, max_bytes: Option<u64>) -> Sink {
        let rotate_at = match (out.path(), max_bytes) {
            (Some(_), Some(max)) => max,
            _ => u64::MAX,
        };
        Sink { out, rotate_at, failing: false }
    }
}

/// The writer thread's state.
struct Worker {
    /// One per kind, in the order of [`KINDS`].
    sinks: [Option<Sink>; 3],
    rx: Receiver<Vec<Event>>,
    /// Where written batches go back to be freed ([`RecordWriter::written`]); when it is full
    /// they are freed here.
    back: SyncSender<Vec<Event>>,
    shared: Arc<Shared>,
    max_bytes: Option<u64>,
    keep: usize,
    /// When the oldest record not yet flushed was written.
    dirty_since: Option<Instant>,
}

impl Worker {
    /// Writes records until the event loop's end is dropped, then flushes.
    fn run(mut self) {
        give_way();
        shed_capabilities();
        loop {
            if self.shared.abandon.load(Ordering::Acquire) {
                return;
            }
            let wait = self.dirty_since.map_or(FLUSH_EVERY, |t| FLUSH_EVERY.saturating_sub(t.elapsed()));
            match self.rx.recv_timeout(wait) {
                Ok(batch) => {
                    let n = batch.len();
                    let bytes: usize = batch.iter().map(record_bytes).sum();
                    for ev in &batch {
                        if self.shared.abandon.load(Ordering::Acquire) {
                            return;
                        }
                        self.reopen_if_asked();
                        self.write(ev);
                    }
                    self.shared.queued.fetch_sub(n, Ordering::AcqRel);
                    self.shared.queued_bytes.fetch_sub(bytes, Ordering::AcqRel);
                    let _ = self.back.try_send(batch);
                    if self.dirty_since.is_some_and(|t| t.elapsed() >= FLUSH_EVERY) {
                        self.flush_all();
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    self.reopen_if_asked();
                    if self.dirty_since.is_some() {
                        self.flush_all();
                    }
                }
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        self.flush_all();
    }

    fn reopen_if_asked(&mut self) {
        if self.shared.reopen.load(Ordering::Relaxed) && self.shared.reopen.swap(false, Ordering::AcqRel) {
            for k in 0..KINDS.len() {
                self.reopen(k);
            }
        }
    }

    /// Writes one record to its kind's output, counts it, and rotates the file when it is full.
    fn write(&mut self, ev: &Event) {
        let Some(k) = kind_of(ev) else { return };
        let Some(sink) = self.sinks[k].as_mut() else {
            return;
        };
        let res = match ev {
            Event::Transaction(t) => sink.out.write(t),
            Event::Pageview(p) => sink.out.write(p),
            Event::Decision(d) => sink.out.write(d),
            Event::Tls(t) => sink.out.write(t),
        };
        if self.dirty_since.is_none() {
            self.dirty_since = Some(Instant::now());
        }
        match res {
            Ok(()) => {
                sink.failing = false;
                self.shared.written[k].fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                if !sink.failing {
                    warn!("records: {e:#}; {} are dropped until a write succeeds", KINDS[k]);
                }
                sink.failing = true;
                self.shared.dropped[k].fetch_add(1, Ordering::Relaxed);
            }
        }
        if sink.out.size() > sink.rotate_at {
            self.rotate(k);
        }
    }

    fn flush_all(&mut self) {
        for (k, slot) in self.sinks.iter_mut().enumerate() {
            if let Some(sink) = slot {
                if let Err(e) = sink.out.flush() {
                    if !sink.failing {
                        warn!("records: {e:#}; buffered {} are lost", KINDS[k]);
                    }
                    sink.failing = true;
                }
            }
        }
        self.dirty_since = None;
    }

    /// Reopens kind `k`'s file. On failure the old handle is kept, the error counted, and a
    /// rotation postponed by `max_bytes`.
    fn reopen(&mut self, k: usize) {
        let max = self.max_bytes.unwrap_or(u64::MAX);
        let Some(sink) = self.sinks[k].as_mut() else {
            return;
        };
        match sink.out.reopen() {
            Ok(()) if sink.out.path().is_some() => sink.rotate_at = max,
            Ok(()) => {}
            Err(e) => {
                warn!("records: {e:#}; {} go on to the file already open", KINDS[k]);
                self.shared.reopen_errors.fetch_add(1, Ordering::Relaxed);
                sink.rotate_at = sink.out.size().saturating_add(max);
            }
        }
    }

    /// Moves kind `k`'s full file aside (`F` to `F.1`, older ones one further) and reopens `F`.
    /// When the renaming fails the file goes on growing and the rotation is tried again after
    /// another `max_bytes`.
    fn rotate(&mut self, k: usize) {
        let max = self.max_bytes.unwrap_or(u64::MAX);
        let Some(sink) = self.sinks[k].as_mut() else {
            return;
        };
        let Some(path) = sink.out.path().map(Path::to_path_buf) else {
            return;
        };
        if let Err(e) = shift(&path, self.keep) {
            warn!("records: cannot rotate {}: {e}", path.display());
            self.shared.reopen_errors.fetch_add(1, Ordering::Relaxed);
            sink.rotate_at = sink.out.size().saturating_add(max);
            return;
        }
        self.reopen(k);
    }
}

/// Renames `F.(keep-1)` to `F.keep` (replacing it), ..., `F.1` to `F.2`, then `F` to `F.1`;
/// with `keep` 0, deletes `F`. Files that are not there are skipped.
fn shift(path: &Path, keep: usize) -> std::io::Result<()> {
    if keep == 0 {
        return ignore_missing(std::fs::remove_file(path));
    }
    for i in (1..keep).rev() {
        ignore_missing(std::fs::rename(numbered(path, i), numbered(path, i + 1)))?;
    }
    ignore_missing(std::fs::rename(path, numbered(path, 1)))
}

fn ignore_missing(r: std::io::Result<()>) -> std::io::Result<()> {
    match r {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}

/// `F.i`.
fn numbered(path: &Path, i: usize) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(format!(".{i}"));
    PathBuf::from(s)
}

#[cfg(test)]
mod tests;
