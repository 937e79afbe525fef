//! Bounded state under a spoofed SYN flood: every SYN comes from a new source and is never
//! answered. The engine's tables and its heap stay within the configured limits, and a flood
//! twice as long leaves memory where it was. Heap bytes are measured by a counting allocator.

use std::time::Duration;

use rlm_core::testkit::{heap_bytes, CountingAlloc, TcpConv};
use rlm_core::{Config, Engine, Port, Timestamp};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const MAX_CONNECTIONS: usize = 5_000;
/// SYNs per second of the flood.
const RATE: u64 = 20_000;

/// Flood `secs` seconds from `start`; returns where it stopped.
fn flood(engine: &mut Engine, start: u64, secs: u64) -> u64 {
    let n = RATE * secs;
    for i in start..start + n {
        let src = format!("10.{}.{}.{}:{}", 100 + (i >> 24) % 100, (i >> 16) & 255, (i >> 8) & 255, 1024 + (i & 255) * 7);
        let syn = TcpConv::new(&src, "10.9.0.1:80").syn();
        let now = Timestamp(i * 1_000_000_000 / RATE);
        while let Some(t) = engine.poll_timeout() {
            if t > now {
                break;
            }
            engine.handle_timeout(t);
        }
        engine.handle(now, Port::Client, &syn);
        while engine.poll_event().is_some() {}
    }
    start + n
}

/// The heap is counted for the whole process: the tests of this file run one at a time, so
/// that one's engine (which reserves its tables at the start) does not move the other's count.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn spoofed_syn_flood_leaves_state_bounded() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cfg = Config { max_connections: MAX_CONNECTIONS, idle_timeout: Duration::from_secs(300), ..Config::default() };
    // The engine's whole heap: the table's storage is reserved at the start.
    let base = heap_bytes();
    let mut engine = Engine::new(cfg);
    // 10 s of flood fill the table many times over (each half-open connection is evicted
    // within a quarter of a second by newer ones).
    let at = flood(&mut engine, 0, 10);
    let after_20 = heap_bytes() - base;
    let sizes_20 = engine.table_sizes();
    // 20 s more.
    flood(&mut engine, at, 20);
    let after_60 = heap_bytes() - base;
    let sizes = engine.table_sizes();
    println!("after {} SYNs: {sizes_20:?}, heap {:.1} MB", RATE * 10, after_20 as f64 / 1e6);
    println!("after {} SYNs: {sizes:?}, heap {:.1} MB", RATE * 30, after_60 as f64 / 1e6);
    println!("stats: evicted {}, failed {}", engine.stats().connections_evicted, engine.stats().connections_failed);
    assert!(sizes.connections <= MAX_CONNECTIONS, "{sizes:?}");
    assert!(sizes.timers <= 2 * MAX_CONNECTIONS + 4096 + 1, "{sizes:?}");
    assert!(sizes.open_pageviews <= 16 && sizes.client_rtts == 0, "{sizes:?}");
    assert!(sizes.pageview_deadlines <= 4 * sizes.open_pageviews + 1024 + 1, "{sizes:?}");
    // Memory: a few hundred bytes per tracked connection, and not growing with the flood's length.
    assert!(after_60 < MAX_CONNECTIONS * 2048, "heap {after_60} bytes for {MAX_CONNECTIONS} connections");
    assert!((after_60 as f64) < after_20 as f64 * 1.5 + 1e6, "heap grew from {after_20} to {after_60} bytes");
    assert!(engine.stats().connections_evicted >= RATE * 30 - MAX_CONNECTIONS as u64);
}

#[test]
fn remembered_client_rtts_are_bounded() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut cfg = Config::default();
    cfg.pageview.max_client_rtts = 1_000;
    let mut engine = Engine::new(cfg);
    for i in 0..5_000u64 {
        let mut c = TcpConv::new(&format!("10.{}.{}.{}:40000", 1 + i / 65536, (i / 256) % 256, i % 256), "10.9.0.1:80");
        let t = i * 1_000_000;
        engine.handle(Timestamp(t), Port::Client, &c.syn());
        engine.handle(Timestamp(t + 10), Port::Server, &c.synack());
        engine.handle(Timestamp(t + 20_000_000), Port::Client, &c.ack());
        while engine.poll_event().is_some() {}
    }
    let sizes = engine.table_sizes();
    assert!(sizes.client_rtts > 0 && sizes.client_rtts <= 1_000, "{sizes:?}");
}
