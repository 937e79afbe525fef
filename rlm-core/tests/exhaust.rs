//! Memory an attacker can make rlm hold (issue 24, "Exhaustion"): connections rlm never saw
//! open (joined mid-stream), each pipelining 64 requests whose 30 KiB targets are not UTF-8
//! and are never answered. Before the targets' budget, 200 such connections (394 MB sent) grew
//! rlm's RSS by 3.5 GB: each target was kept as sent and escaped at up to 4 times its length.
//! Now each kept field stops at 8 KiB (`field_truncated`) and all connections together hold
//! at most `max_held_bytes` (16 MiB here): the connections that began holding first are
//! evicted; the open pageviews' lists (which keep each request's target) at most
//! `max_list_bytes` (8 MiB here): the oldest open pageviews are cut short. Heap bytes are measured by a counting allocator.

use rlm_core::testkit::{heap_bytes, CountingAlloc, TcpConv};
use rlm_core::{Config, Engine, Port, Timestamp};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// Connections of the attack: 24 in `make test` (a debug build takes 8 s a connection), the
/// issue's 200 with `RLM_EXHAUST_CONNECTIONS=200` (in release: 4.6 s).
fn connections() -> u32 {
    std::env::var("RLM_EXHAUST_CONNECTIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(24)
}
const REQUESTS: usize = 64;
const TARGET: usize = 30 * 1024;

/// A request whose target is 30 KiB of bytes that are not UTF-8.
fn request(i: usize) -> Vec<u8> {
    let mut v = b"GET /".to_vec();
    v.extend((0..TARGET).map(|k| 0x80 + ((i + k) % 0x7f) as u8));
    v.extend_from_slice(b" HTTP/1.1\r\nHost: shop\r\n\r\n");
    v
}

#[test]
fn midstream_pipelines_of_huge_targets_stay_within_the_budget() {
    let connections = connections();
    // Budgets small enough for 24 connections to overrun them many times over: without them
    // the 24 would hold about 50 MB (each request's target kept by its connection and by its
    // pageview, 8 KiB each at most), and before the field cap 700 MB.
    let (budget, lists) = (4 << 20, 2 << 20);
    let mut cfg = Config { max_held_bytes: budget, ..Config::default() };
    cfg.pageview.max_list_bytes = lists;
    let mut e = Engine::new(cfg);
    let base = heap_bytes();
    let mut peak = 0;
    let mut sent = 0usize;
    for c in 0..connections {
        let mut conv = TcpConv::new(&format!("10.5.{}.{}:{}", c / 250, c % 250 + 1, 40_000 + c), "10.9.0.1:80");
        for r in 0..REQUESTS {
            let req = request(r);
            sent += req.len();
            let now = Timestamp::from_millis(u64::from(c) * 100 + r as u64);
            e.handle(now, Port::Client, &conv.client_data(&req));
            while e.poll_event().is_some() {}
        }
        peak = peak.max(heap_bytes().saturating_sub(base));
    }
    let s = e.stats();
    println!(
        "{connections} connections, {:.0} MB sent: heap peak {:.1} MB, held {:.1} MB, evicted {}, pageviews cut {}",
        sent as f64 / 1e6,
        peak as f64 / 1e6,
        e.held_bytes() as f64 / 1e6,
        s.evicted_held,
        s.pageviews_evicted
    );
    assert!(s.connections_midstream >= u64::from(connections), "every connection joined mid-stream");
    assert!(e.held_bytes() <= budget);
    assert!(s.evicted_held > 0, "the budget evicted the connections that held longest");
    // The budgets (what connections hold, and the open pageviews' lists, which keep each
    // request's target too), and what is not counted in them: the connections' own state, a few
    // hundred bytes each, and the tables.
    assert!(s.pageviews_evicted > 0, "the lists' budget cut the oldest pageviews short");
    assert!(peak < budget + lists + (4 << 20), "heap {:.1} MB against budgets of {} and {} MB", peak as f64 / 1e6, budget >> 20, lists >> 20);
}
