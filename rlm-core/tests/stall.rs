//! One client cannot make a pageview's lists, and so the cost of each packet, grow without
//! bound (issue 24): after a page that lists an image never fetched, 100,000 SYN-only
//! connections from its client, or 100,000 keep-alive requests naming the page as their
//! Referer, each join that one open pageview. Its lists stop at the per-pageview caps (what
//! comes past them is counted in the record's `capped`), so every packet's lookups stay O(1)
//! and the heap stays small (and the SYNs, never resent, are not charged to it at all). Before the caps, the connections made every close search a list
//! of 100,000 (quadratic: 3.2 s for one call at 100 k) and the requests held 210 MB.

use rlm_core::testkit::{heap_bytes, heap_peak_since_last, CountingAlloc, TcpConv};
use rlm_core::{Engine, Event, PageviewConfig, PageviewRecord, Port, Timestamp};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// The tests run one at a time: the heap count is the process's.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

const N: usize = 100_000;
const CLIENT: &str = "10.4.0.9";
const SERVER: &str = "10.9.0.1:80";
const PAGE: &[u8] = b"<html><body><img src=\"/never.png\"><p>hello</p></body></html>";

fn ms(t: u64) -> Timestamp {
    Timestamp(t * 1_000_000)
}

/// Run timers due by `now`, then drop the events (records) except finished pageviews.
fn advance(e: &mut Engine, now: Timestamp, pvs: &mut Vec<PageviewRecord>) {
    while let Some(t) = e.poll_timeout() {
        if t > now {
            break;
        }
        e.handle_timeout(t);
    }
    drain(e, pvs);
}

fn drain(e: &mut Engine, pvs: &mut Vec<PageviewRecord>) {
    while let Some(ev) = e.poll_event() {
        if let Event::Pageview(p) = ev {
            pvs.push(p);
        }
    }
}

/// The page whose image is never fetched, on a keep-alive connection left open: its pageview
/// stays the client's active one.
fn page(e: &mut Engine, pvs: &mut Vec<PageviewRecord>) -> TcpConv {
    let mut c = TcpConv::new(&format!("{CLIENT}:40000"), SERVER);
    e.handle(ms(0), Port::Client, &c.syn());
    e.handle(ms(1), Port::Server, &c.synack());
    e.handle(ms(2), Port::Client, &c.ack());
    let req = b"GET / HTTP/1.1\r\nHost: shop\r\nAccept: text/html\r\n\r\n";
    e.handle(ms(3), Port::Client, &c.client_data(req));
    let resp = [format!("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\r\n", PAGE.len()).as_bytes(), PAGE].concat();
    for f in c.server_data(&resp) {
        e.handle(ms(4), Port::Server, &f);
    }
    e.handle(ms(5), Port::Client, &c.client_ack());
    drain(e, pvs);
    c
}

/// The one pageview whose container is `/`.
fn the_page(pvs: &[PageviewRecord]) -> &PageviewRecord {
    let pages: Vec<&PageviewRecord> = pvs.iter().filter(|p| p.container.as_deref() == Some("/")).collect();
    assert_eq!(pages.len(), 1, "one pageview of the page");
    pages[0]
}

#[test]
fn syn_only_connections_from_the_client_stop_at_the_pageview_cap() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut e = Engine::new(rlm_core::Config::default());
    let max = PageviewConfig::default().max_conns;
    let mut pvs = Vec::new();
    page(&mut e, &mut pvs);
    // 100,000 SYNs from the client's address, one a connection, 10 µs apart, never answered.
    for i in 0..N {
        let c = TcpConv::new(&format!("{CLIENT}:{}", 1024 + i % 60_000), &format!("10.9.0.{}:80", 1 + i / 60_000));
        let now = Timestamp(ms(10).0 + i as u64 * 10_000);
        advance(&mut e, now, &mut pvs);
        e.handle(now, Port::Client, &c.syn());
    }
    // They fail at the connect timeout (21 s); the pageview ends after them.
    advance(&mut e, ms(60_000), &mut pvs);
    e.shutdown(ms(60_000));
    drain(&mut e, &mut pvs);
    let p = the_page(&pvs);
    println!("connections {}, capped {}, failed {}, rt {:.1} s", p.connections, p.capped, p.failed_connections, p.rt_s);
    assert_eq!(p.capped as usize, N + 1 - max, "every connection past the cap counted, not kept");
    // The ones it kept failed with one SYN each (no evidence of a real client): they leave it.
    assert_eq!((p.connections, p.failed_connections), (1, 0));
    assert_eq!(e.stats().failures_unproven as usize, N);
}

#[test]
fn referred_keep_alive_requests_stop_at_the_pageview_cap_and_hold_little() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut e = Engine::new(rlm_core::Config::default());
    let max = PageviewConfig::default().max_txns;
    let mut pvs = Vec::new();
    let mut c = page(&mut e, &mut pvs);
    let base = heap_bytes();
    let mut peak = 0usize;
    // 100,000 requests on the page's connection, each naming the page as its Referer (so each
    // joins its pageview), each answered, 1 ms apart: the pageview never goes quiet.
    for i in 0..N {
        let now = ms(10 + i as u64);
        let req = format!("GET /object-{i}.png HTTP/1.1\r\nHost: shop\r\nAccept: image/png\r\nReferer: http://shop/\r\n\r\n");
        e.handle(now, Port::Client, &c.client_data(req.as_bytes()));
        for f in c.server_data(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx") {
            e.handle(now, Port::Server, &f);
        }
        e.handle(now, Port::Client, &c.client_ack());
        advance(&mut e, now, &mut pvs);
        if i % 1000 == 999 {
            peak = peak.max(heap_bytes().saturating_sub(base));
        }
    }
    assert!(pvs.iter().all(|p| p.container.as_deref() != Some("/")), "the page was still open after the requests");
    advance(&mut e, ms(10 + N as u64 + 60_000), &mut pvs);
    e.shutdown(ms(10 + N as u64 + 60_000));
    drain(&mut e, &mut pvs);
    let p = the_page(&pvs);
    println!("objects {}, capped {}, heap peak {:.2} MB", p.objects, p.capped, peak as f64 / 1e6);
    assert_eq!(p.objects as usize, max - 1, "the container and objects up to the cap");
    assert_eq!(p.capped as usize, N + 1 - max, "every request past the cap counted");
    assert!(peak < 4_000_000, "the open pageview and its tables held {peak} bytes (at most 4 MB)");
}

#[test]
fn seventy_thousand_syns_on_one_connection_count_up_to_the_limit_and_make_a_bounded_graph() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut e = Engine::new(rlm_core::Config::default());
    let max_events = PageviewConfig::default().max_events;
    let mut pvs = Vec::new();
    page(&mut e, &mut pvs);
    // A second connection of the page's client, whose SYN is sent again 69,999 times within its
    // connect timeout (250 µs apart). Its count was a u16 that overflowed (a panic where
    // overflow is checked), and the graph made a node for each before keeping `max_events`.
    let c = TcpConv::new(&format!("{CLIENT}:40001"), SERVER);
    let syn = c.syn();
    for i in 0..70_000u64 {
        let now = Timestamp(ms(10).0 + i * 250_000);
        advance(&mut e, now, &mut pvs);
        e.handle(now, Port::Client, &syn);
    }
    let before = heap_bytes();
    heap_peak_since_last();
    advance(&mut e, ms(60_000), &mut pvs);
    e.shutdown(ms(60_000));
    drain(&mut e, &mut pvs);
    let peak = heap_peak_since_last().saturating_sub(before);
    let p = the_page(&pvs);
    println!(
        "syn retransmissions {}, events {}, heap peak while the record was made {peak} bytes over before",
        p.syn_retransmissions,
        p.events.len()
    );
    assert_eq!(p.syn_retransmissions, u32::from(u16::MAX) - 1, "counted up to the limit");
    assert!(p.events.len() <= max_events, "{} nodes", p.events.len());
    // 512 nodes of one connection's SYNs and its pageview's others: tens of KB. One node a SYN
    // (before the cut) was about 3.7 MB.
    assert!(peak < 1_000_000, "making the record took {peak} bytes for a moment");
}
