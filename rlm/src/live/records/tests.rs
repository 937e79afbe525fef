//! Tests of the live record writer: every record written once and byte for byte as
//! `rlm analyze` writes it, a blocked output costing records but never a wait, reopen after a
//! rename, rotation by size, a bounded close.

use std::io::Write;
use std::sync::{Condvar, Mutex};

use rlm_core::engine::{Config, DecisionRecord, Engine, Port};
use rlm_core::testkit::TcpConv;
use rlm_core::time::UnixMicros;
use rlm_core::Timestamp;

use super::*;

use crate::records::tests::temp_dir;

/// A writer of decisions only, to `dec.jsonl` in a fresh directory for test `name`: (the
/// directory, the file, the writer).
fn decisions_writer(name: &str, opts: WriterOptions) -> (PathBuf, PathBuf, RecordWriter) {
    let d = temp_dir(&format!("live-{name}"));
    let f = d.join("dec.jsonl");
    let outputs = RecordOutputs { decisions: Some(Dest::File(f.clone())), ..RecordOutputs::default() };
    (d, f, RecordWriter::spawn(outputs, opts).unwrap())
}

/// Decision `i`: its rule is `rules.rlm:{i}:1`.
fn decision(i: usize) -> Event {
    Event::Decision(DecisionRecord {
        ts: UnixMicros(1_700_000_000.0 + i as f64),
        rule: format!("rules.rlm:{i}:1"),
        action: "DROP SYN",
        class: "BULK".to_string(),
        client: format!("10.4.0.1:{}", 40_000 + i % 20_000),
        server: "10.9.0.1:80".to_string(),
        retransmission: i.is_multiple_of(3),
        target: None,
        aggregates: Vec::new(),
        unwritten: false,
    })
}

/// The rules of decisions `range`, as [`rules_of`] reads them back.
fn expected_rules(range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("rules.rlm:{i}:1")).collect()
}

/// The `rule` of each line of `text`, in order.
fn rules_of(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["rule"].as_str().unwrap().to_string()
        })
        .collect()
}

/// What the engine reports for one page fetched over one connection: its transaction and its
/// pageview.
fn engine_records() -> Vec<Event> {
    let mut engine = Engine::new(Config::default());
    let at = |ms: u64| Timestamp::from_millis(1_700_000_000_000 + ms);
    let mut c = TcpConv::new("10.4.0.1:40001", "10.9.0.1:80");
    let body = "<html><body><p>hello</p></body></html>";
    let response = format!("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\r\n{body}", body.len());
    let mut frames: Vec<(u64, Vec<u8>)> = vec![(0, c.syn()), (0, c.synack())];
    frames.push((80, c.ack()));
    frames.push((80, c.client_data(b"GET /index.html HTTP/1.1\r\nHost: shop\r\nAccept: text/html\r\n\r\n")));
    frames.extend(c.server_data(response.as_bytes()).into_iter().map(|f| (100, f)));
    frames.push((180, c.client_ack()));
    for (ms, f) in frames {
        let _ = engine.handle(at(ms), Port::Unknown, &f);
    }
    engine.shutdown(at(10_000));
    let events: Vec<Event> = std::iter::from_fn(|| engine.poll_event()).collect();
    assert!(events.iter().any(|e| matches!(e, Event::Transaction(_))), "the engine reported the transaction");
    assert!(events.iter().any(|e| matches!(e, Event::Pageview(_))), "the engine reported the pageview");
    events
}

/// A sink that blocks every write until its gate opens, and keeps what was written.
#[derive(Clone, Default)]
struct GatedSink {
    gate: Arc<(Mutex<bool>, Condvar)>,
    bytes: Arc<Mutex<Vec<u8>>>,
}

impl GatedSink {
    fn open_gate(&self) {
        *self.gate.0.lock().unwrap() = true;
        self.gate.1.notify_all();
    }

    fn lines(&self) -> u64 {
        self.bytes.lock().unwrap().iter().filter(|&&b| b == b'\n').count() as u64
    }
}

impl Write for GatedSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let (lock, cv) = &*self.gate;
        let mut open = lock.lock().unwrap();
        while !*open {
            open = cv.wait(open).unwrap();
        }
        drop(open);
        self.bytes.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A writer whose decisions go to `sink`.
fn gated_writer(sink: &GatedSink, opts: WriterOptions) -> RecordWriter {
    RecordWriter::start([None, None, Some(RecordOut::from_writer("gated", Box::new(sink.clone())))], opts).unwrap()
}

fn all_to(d: &Path) -> RecordOutputs {
    RecordOutputs {
        transactions: Some(Dest::File(d.join("tx.jsonl"))),
        pageviews: Some(Dest::File(d.join("pv.jsonl"))),
        decisions: Some(Dest::File(d.join("dec.jsonl"))),
    }
}

#[test]
fn every_record_is_one_line_byte_equal_to_record_outs() {
    let d = temp_dir("live-equal");
    let base = engine_records();
    let events: Vec<Event> = (0..300).map(|i| if i % 3 == 2 { decision(i) } else { base[i % base.len()].clone() }).collect();
    let mut w = RecordWriter::spawn(all_to(&d), WriterOptions::default()).unwrap();
    for ev in &events {
        w.send(ev.clone());
    }
    let counts = w.close();
    // The same records through RecordOut, as rlm analyze writes them.
    let names = ["tx", "pv", "dec"];
    let mut outs: Vec<RecordOut> = names.iter().map(|n| RecordOut::create(&Dest::File(d.join(format!("{n}.expected")))).unwrap()).collect();
    let mut per_kind = [0u64; 3];
    for ev in &events {
        per_kind[kind_of(ev).expect("the engine here reports no TLS record")] += 1;
        let r = match ev {
            Event::Transaction(t) => outs[0].write(t),
            Event::Pageview(p) => outs[1].write(p),
            Event::Decision(x) => outs[2].write(x),
            Event::Tls(t) => outs[0].write(t),
        };
        r.unwrap();
    }
    outs.iter_mut().for_each(|o| o.flush().unwrap());
    for (k, n) in names.iter().enumerate() {
        let got = std::fs::read(d.join(format!("{n}.jsonl"))).unwrap();
        let want = std::fs::read(d.join(format!("{n}.expected"))).unwrap();
        assert_eq!(got.iter().filter(|&&b| b == b'\n').count() as u64, per_kind[k], "{n}: one line per record");
        assert!(got == want, "{n}: the writer's bytes differ from RecordOut's");
    }
    assert_eq!(counts.by_kind().map(|(_, written, _)| written), per_kind);
    assert_eq!(counts.by_kind().map(|(_, _, dropped)| dropped), [0; 3]);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_blocked_output_costs_records_never_a_wait() {
    let sink = GatedSink::default();
    let mut w = gated_writer(&sink, WriterOptions { capacity: 4, ..WriterOptions::default() });
    let sent = 200;
    for i in 0..sent {
        let t = Instant::now();
        w.send(decision(i));
        assert!(t.elapsed() < Duration::from_millis(100), "send {i} waited {:?}", t.elapsed());
    }
    // Kinds without an output are neither queued nor counted.
    for ev in engine_records() {
        w.send(ev);
    }
    assert!(w.counts().decisions_dropped > 0, "a full queue drops");
    sink.open_gate();
    let c = w.close();
    assert_eq!(c.decisions_written + c.decisions_dropped, sent as u64);
    assert!(c.decisions_dropped > 0);
    assert_eq!(sink.lines(), c.decisions_written);
    assert_eq!((c.transactions_written, c.transactions_dropped, c.pageviews_written, c.pageviews_dropped), (0, 0, 0, 0));
}

#[test]
fn a_decision_the_engine_marked_unwritten_is_not_written_nor_counted() {
    let (d, f, mut w) = decisions_writer("unwritten", WriterOptions::default());
    for i in 0..10 {
        let Event::Decision(mut r) = decision(i) else { unreachable!() };
        r.unwritten = i % 2 == 1;
        w.send(Event::Decision(r));
    }
    let c = w.close();
    assert_eq!((c.decisions_written, c.decisions_dropped), (5, 0));
    assert_eq!(
        rules_of(&std::fs::read_to_string(&f).unwrap()),
        ["rules.rlm:0:1", "rules.rlm:2:1", "rules.rlm:4:1", "rules.rlm:6:1", "rules.rlm:8:1"]
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_reopen_after_a_rename_puts_each_record_in_exactly_one_file() {
    let (d, f, mut w) = decisions_writer("reopen", WriterOptions::default());
    (0..500).for_each(|i| w.send(decision(i)));
    std::fs::rename(&f, d.join("dec.jsonl.1")).unwrap();
    w.request_reopen();
    (500..1000).for_each(|i| w.send(decision(i)));
    let c = w.close();
    assert_eq!((c.decisions_written, c.decisions_dropped, c.reopen_errors), (1000, 0, 0));
    let old = rules_of(&std::fs::read_to_string(d.join("dec.jsonl.1")).unwrap());
    let new = rules_of(&std::fs::read_to_string(&f).unwrap());
    assert!(new.len() >= 500, "the records sent after the request are in the new file ({} are)", new.len());
    assert_eq!([old, new].concat(), expected_rules(0..1000), "old then new file: every record once, in order");
    std::fs::remove_dir_all(&d).unwrap();
}

/// A restart (systemd's `Restart=on-failure` after a crash, `systemctl restart`) keeps what the
/// run before wrote: `rlm run` appends, and the file it creates is its owner's and group's
/// alone, as is the one a reopen creates after logrotate moved the old one away.
#[test]
fn a_restart_appends_to_the_records_and_new_files_are_not_world_readable() {
    use std::os::unix::fs::PermissionsExt;
    let (d, f, mut w) = decisions_writer("append", WriterOptions::default());
    (0..3).for_each(|i| w.send(decision(i)));
    assert_eq!(w.close().decisions_written, 3);
    assert_eq!(std::fs::metadata(&f).unwrap().permissions().mode() & 0o777, 0o640 & !umask(), "a new record file");
    let outputs = RecordOutputs { decisions: Some(Dest::File(f.clone())), ..RecordOutputs::default() };
    let mut w = RecordWriter::spawn(outputs, WriterOptions::default()).unwrap();
    (3..5).for_each(|i| w.send(decision(i)));
    std::fs::rename(&f, d.join("dec.jsonl.1")).unwrap();
    w.request_reopen();
    (5..7).for_each(|i| w.send(decision(i)));
    assert_eq!(w.close().decisions_written, 4);
    let old = rules_of(&std::fs::read_to_string(d.join("dec.jsonl.1")).unwrap());
    let new = rules_of(&std::fs::read_to_string(&f).unwrap());
    assert_eq!([old, new].concat(), expected_rules(0..7), "the first run's records, then the second's");
    assert_eq!(std::fs::metadata(&f).unwrap().permissions().mode() & 0o777, 0o640 & !umask(), "a file a reopen creates");
    std::fs::remove_dir_all(&d).unwrap();
}

/// This process's umask (read from /proc, which leaves it as it is).
fn umask() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    u32::from_str_radix(status.lines().find_map(|l| l.strip_prefix("Umask:\t")).unwrap(), 8).unwrap()
}

#[test]
fn rotation_at_max_bytes_keeps_at_most_keep_files() {
    let (max, keep) = (2_000u64, 3);
    let (d, f, mut w) = decisions_writer("rotate", WriterOptions { max_bytes: Some(max), keep, ..WriterOptions::default() });
    (0..200).for_each(|i| w.send(decision(i)));
    let c = w.close();
    assert_eq!((c.decisions_written, c.decisions_dropped, c.reopen_errors), (200, 0, 0));
    let longest = (0..200).map(|i| serde_json::to_vec(&decision_record(i)).unwrap().len() as u64 + 1).max().unwrap();
    let mut all = Vec::new();
    for i in (1..=keep).rev() {
        let rotated = numbered(&f, i);
        let len = std::fs::metadata(&rotated).unwrap().len();
        assert!(len > max && len <= max + longest, "{} holds {len} bytes", rotated.display());
        all.extend(rules_of(&std::fs::read_to_string(&rotated).unwrap()));
    }
    assert!(!numbered(&f, keep + 1).exists(), "at most {keep} rotated files");
    assert!(std::fs::metadata(&f).unwrap().len() <= max);
    all.extend(rules_of(&std::fs::read_to_string(&f).unwrap()));
    assert_eq!(all, expected_rules(200 - all.len()..200), "the newest records, in order");
    std::fs::remove_dir_all(&d).unwrap();
}

/// The record inside [`decision`].
fn decision_record(i: usize) -> DecisionRecord {
    match decision(i) {
        Event::Decision(d) => d,
        _ => unreachable!(),
    }
}

#[test]
fn close_with_a_stuck_output_returns_in_time_and_counts_the_rest_as_dropped() {
    let sink = GatedSink::default();
    let bound = Duration::from_millis(300);
    let mut w = gated_writer(&sink, WriterOptions { capacity: 8, close_timeout: bound, ..WriterOptions::default() });
    (0..6).for_each(|i| w.send(decision(i)));
    let t = Instant::now();
    let c = w.close();
    let took = t.elapsed();
    assert!(took >= bound && took < bound + Duration::from_secs(2), "close took {took:?}");
    assert_eq!((c.decisions_written, c.decisions_dropped), (0, 6));
    // Let the abandoned thread finish.
    sink.open_gate();
}

#[test]
fn records_reach_the_file_within_a_second_without_a_close() {
    let (d, f, mut w) = decisions_writer("idle", WriterOptions::default());
    w.send(decision(7));
    let t = Instant::now();
    // The event loop ticks the writer every turn.
    while std::fs::metadata(&f).unwrap().len() == 0 && t.elapsed() < Duration::from_secs(3) {
        w.tick();
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(rules_of(&std::fs::read_to_string(&f).unwrap()), expected_rules(7..8), "flushed after {:?}", t.elapsed());
    assert_eq!(w.close().decisions_written, 1);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn records_go_to_the_writer_in_batches_one_wakeup_each() {
    let (d, f, mut w) = decisions_writer("batch", WriterOptions::default());
    (0..BATCH - 1).for_each(|i| w.send(decision(i)));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(w.counts().decisions_written, 0, "a batch not full, not ticked past its wait, stays with the event loop");
    w.send(decision(BATCH - 1));
    let t = Instant::now();
    while w.counts().decisions_written < BATCH as u64 && t.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(w.counts().decisions_written, BATCH as u64, "a full batch goes at once");
    assert_eq!(w.close().decisions_written, BATCH as u64);
    assert_eq!(rules_of(&std::fs::read_to_string(&f).unwrap()), expected_rules(0..BATCH));
    std::fs::remove_dir_all(&d).unwrap();
}

/// The writer thread's scheduling policy, from /proc (field 41 of its stat: 5 is SCHED_IDLE).
fn writer_policy() -> Option<u32> {
    std::fs::read_dir("/proc/self/task").ok()?.flatten().find_map(|t| {
        let comm = std::fs::read_to_string(t.path().join("comm")).ok()?;
        if comm.trim() != "rlm-records" {
            return None;
        }
        let stat = std::fs::read_to_string(t.path().join("stat")).ok()?;
        // Fields after the command name (which may hold spaces) start after the last ')'.
        stat.rsplit_once(')')?.1.split_whitespace().nth(38)?.parse().ok()
    })
}

#[test]
fn the_writer_runs_on_idle_time_only() {
    let (d, _, mut w) = decisions_writer("idle-policy", WriterOptions::default());
    w.send(decision(1));
    w.tick();
    let t = Instant::now();
    while writer_policy() != Some(libc::SCHED_IDLE as u32) && t.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(writer_policy(), Some(libc::SCHED_IDLE as u32));
    w.close();
    std::fs::remove_dir_all(&d).unwrap();
}

/// The queue is bounded in bytes too: 1,000 records of 1 MB each (a decision whose target is
/// 1 MB) with an 8 MB queue behind a blocked output are dropped and counted, never held: at
/// most 8 MB of them wait (plus the batch being gathered, an eighth of it).
#[test]
fn the_queue_holds_at_most_its_bytes() {
    let sink = GatedSink::default();
    let mb = 1 << 20;
    let mut w = gated_writer(&sink, WriterOptions { capacity: 16_384, capacity_bytes: 8 * mb, ..WriterOptions::default() });
    let big = |i: usize| match decision(i) {
        Event::Decision(d) => Event::Decision(DecisionRecord { target: Some("x".repeat(mb)), ..d }),
        _ => unreachable!(),
    };
    assert!(record_bytes(&big(0)) > mb && record_bytes(&big(0)) < mb + 1024);
    let sent = 1000;
    for i in 0..sent {
        w.send(big(i));
    }
    w.tick();
    let c = w.counts();
    assert!(c.decisions_dropped >= 990, "{c:?}");
    sink.open_gate();
    let c = w.close();
    assert_eq!(c.decisions_written + c.decisions_dropped, sent as u64);
    assert!((1..=9).contains(&c.decisions_written), "{c:?}");
}

/// The writer's own thread keeps no capability, whatever the process has (as root in `make
/// test`: every one). /proc/thread-self shows the calling thread's sets, not the process's.
#[test]
fn the_writer_thread_sheds_every_capability() {
    let sets = std::thread::spawn(|| {
        shed_capabilities();
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"]
            .map(|name| u64::from_str_radix(status.lines().find_map(|l| l.strip_prefix(&format!("{name}:\t"))).unwrap(), 16).unwrap())
    })
    .join()
    .unwrap();
    assert_eq!(sets, [0; 5], "CapInh, CapPrm, CapEff, CapBnd, CapAmb of the writer's thread");
}
