//! A capture replayed through several engines at once, each on a thread of its own and each
//! seeing every frame of its clients ([`Sharding`]).
//!
//! This thread reads the capture and deals its frames out in epochs of [`EPOCH`] frames: each
//! shard gets its frames of the epoch copied back to back into one batch, and the time of the
//! last frame read, up to which it fires its timers after the batch's frames (timers it would
//! have fired before a later frame of another shard, as one engine does). The shards' events
//! come back per epoch and are handed on shard by shard, epoch by epoch: the same order for the
//! same capture and number of shards, whatever the threads' timing; the order of one engine's
//! records only within a shard. [`DEPTH`] epochs may be in flight, so the reading, the
//! shards and the records' writing overlap.

use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;

use anyhow::Result;

use rlm_core::engine::{Engine, Event, Sharding};
use rlm_core::time::Timestamp;
use rlm_core::wire::LinkType;

use crate::{feed_frame, fire_until, CaptureReader, Deadlines, Progress, Replayed};

/// Frames read between two deals to the shards, at most.
const EPOCH: usize = 2048;
/// The bytes of a shard's batch: an epoch ends early when a frame would not fit in its shard's
/// batch, so that batches, allocated once and reused, never grow (a larger frame grows its batch).
const BATCH_BYTES: usize = 1 << 20;
/// Epochs dealt and not yet collected.
const DEPTH: usize = 4;

/// One shard's frames of one epoch.
#[derive(Default)]
struct Batch {
    bytes: Vec<u8>,
    /// Each frame's time, link type and the end of its bytes in `bytes`.
    frames: Vec<(Timestamp, LinkType, usize)>,
    /// The last frame read in all (this shard's or another's): timers due by then fire after
    /// the batch's frames.
    upto: Timestamp,
}

impl Batch {
    fn new() -> Batch {
        Batch { bytes: Vec::with_capacity(BATCH_BYTES), frames: Vec::with_capacity(EPOCH), upto: Timestamp::ZERO }
    }
}

enum ToShard {
    Frames(Batch),
    /// The capture ended at this time: shut down.
    End(Timestamp),
}

/// What a shard made of a batch, with the batch emptied for reuse.
struct Done {
    batch: Batch,
    events: Vec<Event>,
}

struct Shard {
    tx: SyncSender<ToShard>,
    rx: Receiver<Done>,
    thread: JoinHandle<Engine>,
    /// Emptied batches to fill again.
    spare: Vec<Batch>,
}

fn run_shard(mut engine: Engine, rx: Receiver<ToShard>, tx: SyncSender<Done>) -> Engine {
    let mut deadlines = Deadlines::of(&engine);
    for msg in rx {
        let mut events = Vec::new();
        let batch = match msg {
            ToShard::Frames(mut batch) => {
                let mut start = 0;
                for &(ts, link, end) in &batch.frames {
                    feed_frame(&mut engine, &mut deadlines, ts, link, &batch.bytes[start..end]);
                    start = end;
                    while let Some(ev) = engine.poll_event() {
                        events.push(ev);
                    }
                }
                fire_until(&mut engine, &mut deadlines, batch.upto);
                batch.bytes.clear();
                batch.frames.clear();
                batch
            }
            ToShard::End(last) => {
                engine.shutdown(last);
                Batch::default()
            }
        };
        while let Some(ev) = engine.poll_event() {
            events.push(ev);
        }
        // The replay gone (its consumer failed) ends the shard too.
        if tx.send(Done { batch, events }).is_err() {
            break;
        }
    }
    engine
}

/// Replay `reader` through `engines` (made with [`rlm_core::engine::Config::for_shard`]), split by
/// `sharding` (of as many shards; engine `i` made with `for_shard(i, n)`), handing every event to `on_event` in the order the module
/// describes. Returns how the capture ended and the engines, shut down, for their counters
/// ([`rlm_core::engine::Stats::add`]). `Err` when `on_event` fails.
pub fn replay_sharded(
    reader: &mut CaptureReader,
    engines: Vec<Engine>,
    sharding: &Sharding,
    on_event: &mut dyn FnMut(Event) -> Result<()>,
    mut progress: Option<Progress<'_>>,
) -> Result<(Replayed, Vec<Engine>)> {
    assert_eq!(engines.len(), sharding.shards(), "one engine per shard");
    // The dealer learns connections' clients as it goes.
    let mut sharding = sharding.clone();
    let mut shards: Vec<Shard> = engines
        .into_iter()
        .enumerate()
        .map(|(i, engine)| {
            let (tx, shard_rx) = sync_channel(DEPTH + 1);
            let (shard_tx, rx) = sync_channel(DEPTH + 1);
            let thread = std::thread::Builder::new()
                .name(format!("engine-{i}"))
                .spawn(move || run_shard(engine, shard_rx, shard_tx))
                .expect("cannot start an engine thread");
            Shard { tx, rx, thread, spare: Vec::new() }
        })
        .collect();
    let mut filling: Vec<Batch> = shards.iter().map(|_| Batch::new()).collect();
    let mut in_flight = 0usize;
    let size = reader.size().unwrap_or(0);
    let (mut frames, mut in_epoch) = (0u64, 0usize);
    let mut last = Timestamp::ZERO;

    // Hands on one epoch's events, shard by shard. A shard that stopped answering panicked:
    // its panic is the replay's.
    fn collect(shards: &mut Vec<Shard>, on_event: &mut dyn FnMut(Event) -> Result<()>) -> Result<()> {
        for i in 0..shards.len() {
            let Ok(done) = shards[i].rx.recv() else {
                let shard = shards.swap_remove(i);
                match shard.thread.join() {
                    Err(panic) => std::panic::resume_unwind(panic),
                    Ok(_) => unreachable!("an engine thread ended before its input"),
                }
            };
            shards[i].spare.push(done.batch);
            for ev in done.events {
                on_event(ev)?;
            }
        }
        Ok(())
    }

    // Sends each shard its batch of the epoch; collects the oldest epoch past DEPTH.
    fn deal(
        shards: &mut Vec<Shard>,
        filling: &mut [Batch],
        last: Timestamp,
        in_flight: &mut usize,
        on_event: &mut dyn FnMut(Event) -> Result<()>,
    ) -> Result<()> {
        for (shard, slot) in shards.iter_mut().zip(filling.iter_mut()) {
            let mut batch = std::mem::replace(slot, shard.spare.pop().unwrap_or_else(Batch::new));
            batch.upto = last;
            // A shard gone is found by `collect`.
            let _ = shard.tx.send(ToShard::Frames(batch));
        }
        *in_flight += 1;
        if *in_flight > DEPTH {
            *in_flight -= 1;
            collect(shards, on_event)?;
        }
        Ok(())
    }

    let cut = loop {
        let (ts, link, data) = match reader.next_frame() {
            Ok(Some(f)) => (f.ts, f.link, f.data),
            Ok(None) => break None,
            Err(c) => break Some(c),
        };
        let shard = sharding.shard_of(link, data);
        let batch = &filling[shard];
        if batch.bytes.len() + data.len() > batch.bytes.capacity() && !batch.frames.is_empty() {
            in_epoch = 0;
            deal(&mut shards, &mut filling, last, &mut in_flight, on_event)?;
        }
        let batch = &mut filling[shard];
        batch.bytes.extend_from_slice(data);
        batch.frames.push((ts, link, batch.bytes.len()));
        last = last.max(ts);
        frames += 1;
        in_epoch += 1;
        if in_epoch == EPOCH {
            in_epoch = 0;
            deal(&mut shards, &mut filling, last, &mut in_flight, on_event)?;
        }
        if frames % 4096 == 0 {
            if let Some(cb) = progress.as_mut() {
                cb(reader.bytes_read().min(size), size);
            }
        }
    };
    // Whatever was read is reported even when the file ends badly.
    if in_epoch > 0 {
        deal(&mut shards, &mut filling, last, &mut in_flight, on_event)?;
    }
    for _ in 0..in_flight {
        collect(&mut shards, on_event)?;
    }
    for shard in &shards {
        let _ = shard.tx.send(ToShard::End(last));
    }
    collect(&mut shards, on_event)?;
    let engines = shards
        .into_iter()
        .map(|s| {
            drop(s.tx);
            s.thread.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
        .collect();
    if let Some(cb) = progress.as_mut() {
        cb(size, size);
    }
    Ok((Replayed { frames, cut }, engines))
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use rlm_core::engine::{Config, Stats};
    use rlm_core::testkit::TcpConv;

    use super::*;
    use crate::{from_read, replay_reader};

    /// A pcap (microseconds, Ethernet) of `frames` at their times in nanoseconds.
    fn pcap(frames: &[(u64, Vec<u8>)]) -> Vec<u8> {
        let mut v = Vec::new();
        for x in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 65535, 1] {
            v.extend(x.to_le_bytes());
        }
        for (t, f) in frames {
            for x in [(t / 1_000_000_000) as u32, (t % 1_000_000_000 / 1000) as u32, f.len() as u32, f.len() as u32] {
                v.extend(x.to_le_bytes());
            }
            v.extend_from_slice(f);
        }
        v
    }

    /// A client's page from two servers over two connections, and 4 s later a second page over
    /// a third connection that opens within the first's linger: 300 clients, 150 ms apart, some
    /// 9,000 frames in time order (several epochs, timers firing between them).
    fn farm() -> Vec<u8> {
        let mut frames: Vec<(u64, Vec<u8>)> = Vec::new();
        let ms = 1_000_000u64;
        for c in 0..300u64 {
            let client = format!("10.1.{}.{}", c / 200, c % 200 + 1);
            let mut t = c * 150 * ms;
            let mut push = |t: &mut u64, f: Vec<u8>| {
                *t += 3 * ms;
                frames.push((*t, f));
            };
            let html = format!("<html><img src=\"/a{c}.png\"><img src=\"/b{c}.png\"></html>");
            let mut one = TcpConv::new(&format!("{client}:40001"), "10.9.0.1:80");
            let mut two = TcpConv::new(&format!("{client}:40002"), "10.9.0.2:80");
            let mut three = TcpConv::new(&format!("{client}:40003"), "10.9.0.2:80");
            for f in [one.syn(), one.synack(), one.ack(), one.client_data(format!("GET /p{c}.html HTTP/1.1\r\nHost: www\r\n\r\n").as_bytes())] {
                push(&mut t, f);
            }
            for f in one.server_data(format!("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\r\n{html}", html.len()).as_bytes())
            {
                push(&mut t, f);
            }
            for f in [
                two.syn(),
                two.synack(),
                two.ack(),
                two.client_data(format!("GET /a{c}.png HTTP/1.1\r\nHost: www\r\nReferer: http://www/p{c}.html\r\n\r\n").as_bytes()),
            ] {
                push(&mut t, f);
            }
            push(&mut t, one.client_data(format!("GET /b{c}.png HTTP/1.1\r\nHost: www\r\nReferer: http://www/p{c}.html\r\n\r\n").as_bytes()));
            for (conn, n) in [(&mut two, 1500), (&mut one, 300)] {
                for f in
                    conn.server_data(format!("HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: {n}\r\n\r\n{}", "x".repeat(n)).as_bytes())
                {
                    push(&mut t, f);
                }
            }
            push(&mut t, two.client_ack());
            push(&mut t, one.client_ack());
            t += 1000 * ms;
            for f in [three.syn(), three.synack(), three.ack(), three.client_data(format!("GET /q{c}.html HTTP/1.1\r\nHost: www\r\n\r\n").as_bytes())]
            {
                push(&mut t, f);
            }
            for f in three.server_data(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 5\r\n\r\nhello") {
                push(&mut t, f);
            }
            for f in [three.client_ack(), one.client_fin(), one.server_fin(), one.client_ack(), two.client_fin(), two.server_fin(), two.client_ack()]
            {
                push(&mut t, f);
            }
        }
        frames.sort_by_key(|(t, _)| *t);
        pcap(&frames)
    }

    fn config() -> Config {
        Config { server_ports: vec![80], ..Config::default() }
    }

    /// The records as sorted JSON, pageview ids replaced by the pageview's client and start.
    fn records(events: Vec<Event>) -> (Vec<String>, usize) {
        let mut ids = std::collections::HashMap::new();
        let mut pvs = 0;
        for ev in &events {
            if let Event::Pageview(p) = ev {
                let v = serde_json::to_value(p).unwrap();
                assert!(
                    ids.insert(v["id"].as_u64().unwrap(), format!("{} {}", v["client"], v["start_ts"])).is_none(),
                    "two pageviews numbered {}",
                    v["id"]
                );
                pvs += 1;
            }
        }
        let mut out: Vec<String> = events
            .iter()
            .map(|ev| {
                let mut v = match ev {
                    Event::Transaction(t) => serde_json::to_value(t).unwrap(),
                    Event::Pageview(p) => serde_json::to_value(p).unwrap(),
                    Event::Tls(t) => serde_json::to_value(t).unwrap(),
                    Event::Decision(d) => serde_json::to_value(d).unwrap(),
                };
                for key in ["id", "pageview"] {
                    if let Some(id) = v.get(key).and_then(|i| i.as_u64()) {
                        v[key] = ids[&id].clone().into();
                    }
                }
                v.to_string()
            })
            .collect();
        out.sort();
        (out, pvs)
    }

    fn counters(s: &Stats) -> String {
        serde_json::to_string(s).unwrap()
    }

    #[test]
    fn shards_report_what_one_engine_does() {
        let capture = farm();
        let mut one = Engine::new(config());
        let mut events = Vec::new();
        let r = replay_reader(&mut from_read("one", Box::new(Cursor::new(capture.clone()))).unwrap(), &mut one, &mut |e| Ok(events.push(e)), None)
            .unwrap();
        assert!(r.frames > 3 * EPOCH as u64 && r.cut.is_none(), "{r:?}");
        let (want, pageviews) = records(events);
        assert_eq!(pageviews, 600, "the farm's pages are not what this test is about");
        for n in [2, 3] {
            let engines = (0..n).map(|i| Engine::new(config().for_shard(i, n))).collect();
            let mut events = Vec::new();
            let mut reader = from_read("sharded", Box::new(Cursor::new(capture.clone()))).unwrap();
            let (rs, engines) = replay_sharded(&mut reader, engines, &Sharding::new(&config(), n), &mut |e| Ok(events.push(e)), None).unwrap();
            assert_eq!(rs, r);
            // Every shard had clients.
            assert!(
                engines.iter().all(|e| e.stats().pageviews > 100),
                "{n} shards: {:?}",
                engines.iter().map(|e| e.stats().pageviews).collect::<Vec<_>>()
            );
            let mut stats = Stats::default();
            engines.iter().for_each(|e| stats.add(e.stats()));
            assert_eq!(counters(&stats), counters(one.stats()), "{n} shards");
            assert_eq!(records(events).0, want, "{n} shards");
        }
    }

    #[test]
    fn the_order_of_the_records_depends_only_on_the_capture_and_the_shards() {
        let capture = farm();
        let run = || {
            let engines = (0..3).map(|i| Engine::new(config().for_shard(i, 3))).collect();
            let mut order = Vec::new();
            let mut reader = from_read("sharded", Box::new(Cursor::new(capture.clone()))).unwrap();
            replay_sharded(&mut reader, engines, &Sharding::new(&config(), 3), &mut |e| Ok(order.push(format!("{e:?}"))), None).unwrap();
            order
        };
        let first = run();
        for _ in 0..3 {
            assert!(run() == first);
        }
    }

    #[test]
    fn a_failing_consumer_stops_the_replay_with_its_error() {
        let engines = (0..2).map(|i| Engine::new(config().for_shard(i, 2))).collect();
        let mut reader = from_read("sharded", Box::new(Cursor::new(farm()))).unwrap();
        let mut seen = 0;
        let err = replay_sharded(
            &mut reader,
            engines,
            &Sharding::new(&config(), 2),
            &mut |_| {
                seen += 1;
                if seen == 10 {
                    anyhow::bail!("disk full")
                }
                Ok(())
            },
            None,
        )
        .map(|_| ())
        .unwrap_err();
        assert_eq!(err.to_string(), "disk full");
    }
}
