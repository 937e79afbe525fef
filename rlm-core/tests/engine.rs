//! Deterministic engine behaviour: synthetic frames with chosen timestamps in, events out.

use std::time::Duration;

use rlm_core::pageview::{Acts, Evidence};
use rlm_core::testkit::TcpConv;
use rlm_core::wire::LinkType;
use rlm_core::{Config, PageviewRecord, Port};

mod common;
use common::*;

fn get(uri: &str, extra: &str) -> Vec<u8> {
    format!("GET {uri} HTTP/1.1\r\nHost: shop\r\n{extra}\r\n").into_bytes()
}

fn html_response(body: &str) -> Vec<u8> {
    format!("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
}

fn gif_response(len: usize) -> Vec<u8> {
    let mut v = format!("HTTP/1.1 200 OK\r\nContent-Type: image/gif\r\nContent-Length: {len}\r\n\r\n").into_bytes();
    v.extend(std::iter::repeat_n(b'G', len));
    v
}

const PAGE: &str = r#"<html><body><img src="/img/a.gif"><p>text</p><img src='img/b.gif'><IMG SRC=/img/c.gif></body></html>"#;

/// One page: container on conn 1, images a and b on conn 2, c on conn 1. Returns (conn1, conn2).
fn standard_page(r: &mut Run, t0: u64, client: &str) -> (TcpConv, TcpConv) {
    let mut c1 = TcpConv::new(&format!("{client}:40001"), "10.9.0.1:80");
    handshake(r, &mut c1, t0);
    r.feed(t0 + 80, c1.client_data(&get("/index.html", "Accept: text/html\r\n")));
    r.feed_all(t0 + 100, c1.server_data(&html_response(PAGE)));
    // The browser parses the page one RTT/2 later, opens its second connection and asks for more.
    let mut c2 = TcpConv::new(&format!("{client}:40002"), "10.9.0.1:80");
    r.feed(t0 + 180, c1.client_data(&get("/img/b.gif", "Referer: http://shop/index.html\r\n")));
    r.feed(t0 + 180, c2.syn());
    r.feed(t0 + 180, c2.synack());
    r.feed_all(t0 + 185, c1.server_data(&gif_response(500)));
    r.feed(t0 + 260, c2.ack());
    r.feed(t0 + 260, c2.client_data(&get("/img/a.gif", "")));
    r.feed_all(t0 + 265, c2.server_data(&gif_response(700)));
    r.feed(t0 + 265, c1.client_data(&get("/img/c.gif", "")));
    r.feed_all(t0 + 345, c1.server_data(&gif_response(300)));
    r.feed(t0 + 385, c1.client_ack());
    (c1, c2)
}

#[test]
fn pageview_from_container_and_embeds_over_two_connections() {
    let mut r = Run::new();
    standard_page(&mut r, 0, "10.4.0.1");
    assert!(r.pv.is_empty(), "not over before its quiet period");
    r.advance(5_000);
    assert_eq!(r.pv.len(), 1, "ended by its linger without shutdown");
    let p = &r.pv[0];
    assert_eq!(p.container.as_deref(), Some("/index.html"));
    assert_eq!(p.objects, 3);
    assert_eq!(p.expected_objects, 3);
    assert_eq!(p.connections, 2);
    assert_eq!(p.failed_connections, 0);
    assert_eq!(p.syn_retransmissions, 0);
    // Client's view: first SYN sent RTT/2 before the appliance saw it, last byte arrives RTT/2 after.
    assert!(approx(secs(p.start_ts), -0.040, 1e-6), "start {}", p.start_ts);
    assert!(approx(p.rt_s, 0.345 + 0.080, 1e-6), "rt {}", p.rt_s);
    // Critical path: c.gif ← b.gif ← container on conn 1 ← its handshake.
    assert!(approx(p.t_conn_s, 0.080, 1e-6), "t_conn {}", p.t_conn_s);
    assert!(approx(p.t_server_s, 0.020 + 0.005 + 0.080, 1e-6), "t_server {}", p.t_server_s);
    let kinds: Vec<&str> = p.events.iter().map(|e| e.kind).collect();
    for k in ["syn", "synack", "ack", "request", "response_head", "last_byte"] {
        assert!(kinds.contains(&k), "event graph lacks {k}: {kinds:?}");
    }
    assert_eq!(p.events.iter().filter(|e| e.kind == "request").count(), 4);
    assert_eq!(r.tx.len(), 4);
    assert!(r.tx.iter().all(|t| t.pageview == Some(p.id)));
}

#[test]
fn syn_retransmission_is_counted_and_charged() {
    let mut r = Run::new();
    let mut c1 = TcpConv::new("10.4.0.2:40001", "10.9.0.1:80");
    r.feed(0, c1.syn());
    r.feed(3_000, c1.syn());
    r.feed(3_000, c1.synack());
    r.feed(3_080, c1.ack());
    r.feed(3_080, c1.client_data(&get("/page", "")));
    r.feed_all(3_100, c1.server_data(&html_response("<p>no embeds</p>")));
    r.finish(10_000);
    assert_eq!(r.pv.len(), 1);
    let p = &r.pv[0];
    assert_eq!(p.syn_retransmissions, 1);
    assert!(approx(p.rt_s, 3.1 + 0.08, 1e-6), "rt {}", p.rt_s);
    assert!(p.events.iter().any(|e| e.kind == "syn_retransmit"));
    assert_eq!(r.engine.stats().syn_retransmissions, 1);
}

#[test]
fn failed_second_connection_charges_the_connect_timeout() {
    // 004 Figure 5: the second connection's SYNs are all dropped; everything else comes over the
    // first; the browser reports the page done only when TCP gives up (21 s).
    let mut r = Run::new();
    let mut c1 = TcpConv::new("10.4.0.3:40001", "10.9.0.1:80");
    handshake(&mut r, &mut c1, 0);
    r.feed(80, c1.client_data(&get("/index.html", "")));
    r.feed_all(100, c1.server_data(&html_response(PAGE)));
    let c2 = TcpConv::new("10.4.0.3:40002", "10.9.0.1:80");
    r.feed(180, c2.syn());
    r.feed(180, c1.client_data(&get("/img/b.gif", "")));
    r.feed_all(185, c1.server_data(&gif_response(10)));
    r.feed(265, c1.client_data(&get("/img/c.gif", "")));
    r.feed_all(270, c1.server_data(&gif_response(10)));
    r.feed(3_180, c2.syn());
    r.feed(9_180, c2.syn());
    r.advance(21_000);
    assert!(r.pv.is_empty(), "the page is still loading while the second connection tries");
    r.advance(30_000);
    assert_eq!(r.pv.len(), 1);
    let p = &r.pv[0];
    assert_eq!(p.failed_connections, 1);
    assert_eq!(p.syn_retransmissions, 2);
    assert_eq!(p.objects, 2, "the object tied to the failed connection is never fetched");
    // Start: first SYN of conn 1 − 40 ms; end: conn 2's first SYN − 40 ms + 21 s.
    assert!(approx(p.rt_s, 0.180 + 21.0, 1e-6), "rt {}", p.rt_s);
    assert!(p.events.iter().any(|e| e.kind == "conn_failed"));
    assert_eq!(r.engine.stats().connections_failed, 1);
}

#[test]
fn failed_first_connection_is_a_failed_pageview() {
    let mut r = Run::new();
    let c = TcpConv::new("10.4.0.4:40001", "10.9.0.1:80");
    r.feed(0, c.syn());
    r.feed(3_000, c.syn());
    r.feed(9_000, c.syn());
    r.advance(25_000);
    assert_eq!(r.pv.len(), 1);
    let p = &r.pv[0];
    assert_eq!(p.container, None);
    assert_eq!(p.failed_connections, 1);
    assert!(approx(p.rt_s, 21.0, 1e-6));
}

#[test]
fn connect_timeout_is_configurable() {
    let mut cfg = Config::default();
    cfg.pageview.connect_timeout = Duration::from_secs(127);
    let mut r = Run::with(cfg);
    let c = TcpConv::new("10.4.0.5:40001", "10.9.0.1:80");
    // Linux's schedule: SYNs at 0, 1, 3, 7 s, ... until 127 s.
    for t in [0, 1_000, 3_000, 7_000, 15_000, 31_000, 63_000] {
        r.feed(t, c.syn());
    }
    r.advance(100_000);
    assert!(r.pv.is_empty());
    r.advance(130_000);
    assert!(approx(r.pv[0].rt_s, 127.0, 1e-6));
}

#[test]
fn refused_connection_fails_at_once() {
    let mut r = Run::new();
    // A client rlm has seen complete a handshake (its page), then refused on another port.
    page_taking(&mut r, "10.4.0.6", 0, 500);
    r.advance(5_000);
    assert_eq!(r.pv.len(), 1);
    let c = TcpConv::new("10.4.0.6:40002", "10.9.0.1:81");
    r.feed(6_000, c.syn());
    r.feed(6_001, c.refuse());
    r.advance(6_002);
    assert_eq!(r.pv.len(), 2);
    assert_eq!(r.pv[1].failed_connections, 1);
    assert_eq!(r.pv[1].evidence, Evidence::Retransmissions);
    assert!(r.pv[1].rt_s < 0.01);
}

#[test]
fn a_refusal_counts_only_when_it_acknowledges_the_syn_of_a_client_seen_before() {
    let mut r = Run::new();
    // A RST to a pending SYN that does not acknowledge it is not the server's: ignored.
    let c = TcpConv::new("10.4.0.16:40001", "10.9.0.1:80");
    r.feed(0, c.syn());
    r.feed(1, c.forged(true, 0, "R"));
    assert_eq!(r.engine.stats().out_of_window, 1);
    assert_eq!(r.engine.stats().connections_failed, 0, "the connection is still pending");
    // A refusal of a client never seen before, after one SYN: what a spoofer can make (it knows
    // its own SYN's number). No pageview is charged.
    r.feed(2, c.refuse());
    r.advance(30_000);
    assert_eq!(r.engine.stats().connections_failed, 1);
    assert_eq!(r.engine.stats().failures_unproven, 1);
    assert!(r.pv.is_empty(), "{:?}", r.pv);
}

#[test]
fn spoofed_syns_from_a_class_do_not_move_its_rt_nor_steer_the_rule() {
    // Issue 24: 20 SYNs from unused HIGH addresses, never answered nor resent, each became a
    // 21 s failed pageview, pushed RT.HIGH over 1.5 s and made the rule drop a real LOW SYN.
    let mut r = Run::with(Config { class_window: Duration::from_secs(60), ..Config::default() });
    r.engine.set_rules(Some(rules(
        "CLASS HIGH IF IP.SRC == 10.4.*.*\nCLASS LOW IF IP.SRC != 10.4.*.*\nIF IP.SRC != 10.4.*.* AND RT.HIGH > 1.5s THEN DROP SYN\n",
    )));
    page_taking(&mut r, "10.4.0.1", 0, 1_000);
    for i in 0..20u64 {
        let c = TcpConv::new(&format!("10.4.{}.{}:40001", 100 + i, 1 + i), "10.9.0.1:80");
        r.feed(1_000 + i, c.syn());
    }
    // A spoofed SYN from the real client's own address (joins its pageview while it is active,
    // then fails) is not charged to it either.
    let own = TcpConv::new("10.4.0.1:40099", "10.9.0.1:80");
    r.feed(1_100, own.syn());
    r.advance(30_000);
    assert_eq!(r.engine.stats().failures_unproven, 21);
    let counted: Vec<&PageviewRecord> = r.pv.iter().filter(|p| p.window_ts.is_some()).collect();
    assert_eq!(counted.len(), 1, "only the real page entered the window: {:?}", r.pv);
    assert!(approx(counted[0].rt_s, 1.0, 1e-6) && counted[0].failed_connections == 0, "{:?}", counted[0]);
    assert!(r.pv.iter().all(|p| p.failed_connections == 0));
    let low = TcpConv::new("10.5.0.7:40001", "10.9.0.1:80");
    r.feed(30_000, low.syn());
    assert_eq!(r.verdict, Some(rlm_core::Verdict::Accept), "the real LOW client's SYN passes");
    assert!(r.decisions.is_empty(), "{:?}", r.decisions);
}

#[test]
fn a_failed_second_connection_without_retransmissions_is_not_charged() {
    // 004 Figure 5 with one SYN on the second connection (a spoofed SYN from the client's
    // address, or one the client never resent): the page ends when its objects are in, not at
    // 21 s, and counts no failed connection.
    let mut r = Run::new();
    let mut c1 = TcpConv::new("10.4.0.13:40001", "10.9.0.1:80");
    handshake(&mut r, &mut c1, 0);
    r.feed(80, c1.client_data(&get("/index.html", "")));
    r.feed_all(100, c1.server_data(&html_response(PAGE)));
    let c2 = TcpConv::new("10.4.0.13:40002", "10.9.0.1:80");
    r.feed(180, c2.syn());
    for (t, img) in [(180, "/img/a.gif"), (265, "/img/b.gif"), (350, "/img/c.gif")] {
        r.feed(t, c1.client_data(&get(img, "")));
        r.feed_all(t + 5, c1.server_data(&gif_response(10)));
    }
    r.advance(30_000);
    assert_eq!(r.pv.len(), 1);
    let p = &r.pv[0];
    assert_eq!((p.failed_connections, p.connections, p.objects), (0, 1, 3), "{p:?}");
    assert!(p.rt_s < 0.5, "rt {}", p.rt_s);
    assert_eq!(r.engine.stats().failures_unproven, 1);
}

#[test]
fn navigation_favicon_and_download_start_their_own_pageviews() {
    let mut r = Run::new();
    let (mut c1, _c2) = standard_page(&mut r, 0, "10.4.0.7");
    // A link click on the kept-alive connection, with the page as Referer.
    r.feed(2_000, c1.client_data(&get("/next.html", "Referer: http://shop/index.html\r\nAccept: text/html,*/*\r\n")));
    r.feed_all(2_050, c1.server_data(&html_response("<p>next</p>")));
    // A favicon nobody listed.
    r.feed(2_100, c1.client_data(&get("/favicon.ico", "Referer: http://shop/next.html\r\n")));
    r.feed_all(2_110, c1.server_data(&gif_response(20)));
    // A download linked from the page: not in its (reliable) embed list.
    r.feed(6_000, c1.client_data(&get("/files/book.pdf", "Referer: http://shop/next.html\r\nAccept: */*\r\n")));
    r.feed_all(6_050, c1.server_data(&gif_response(5000)));
    r.finish(20_000);
    let containers: Vec<Option<&str>> = r.pv.iter().map(|p| p.container.as_deref()).collect();
    assert_eq!(containers, vec![Some("/index.html"), Some("/next.html"), Some("/favicon.ico"), Some("/files/book.pdf")]);
    assert_eq!(r.pv[0].objects, 3, "the click was not swallowed into the first page");
    // A navigation on a reused connection starts at its request, not at the old SYN.
    assert!(approx(secs(r.pv[1].start_ts), 2.0 - 0.04, 1e-6), "start {}", r.pv[1].start_ts);
}

#[test]
fn a_container_asked_again_after_its_kept_alive_connection_closed_is_one_pageview() {
    // The server closes the kept-alive connection as the browser sends its next page on it: the
    // request crosses the FIN and gets an RST, and the browser asks again on a new connection
    // (RFC 9112 9.3.1). Its visitor waits from the first ask.
    let mut r = Run::new();
    let (mut c1, _c2) = standard_page(&mut r, 0, "10.4.0.12");
    r.feed(4_000, c1.server_fin());
    r.feed(4_030, c1.client_data(&get("/next.html", "Accept: text/html\r\n")));
    r.feed(4_030, c1.server_rst());
    let mut c3 = TcpConv::new("10.4.0.12:40003", "10.9.0.1:80");
    handshake(&mut r, &mut c3, 4_031);
    r.feed(4_111, c3.client_data(&get("/next.html", "Accept: text/html\r\n")));
    r.feed_all(4_120, c3.server_data(&html_response("<p>next</p>")));
    r.finish(20_000);
    let containers: Vec<Option<&str>> = r.pv.iter().map(|p| p.container.as_deref()).collect();
    assert_eq!(containers, vec![Some("/index.html"), Some("/next.html")], "{:#?}", r.pv);
    let p = &r.pv[1];
    assert!(approx(secs(p.start_ts), 4.030 - 0.04, 1e-6), "starts at the first ask: {}", p.start_ts);
    assert!(approx(p.rt_s, 0.090 + 0.08, 1e-6), "rt {}", p.rt_s);
    assert_eq!((p.objects, p.connections), (0, 2), "{p:?}");
    // A different page asked after such an end is a pageview of its own.
    let mut c4 = TcpConv::new("10.4.0.12:40004", "10.9.0.1:80");
    handshake(&mut r, &mut c4, 30_000);
    r.feed(30_080, c4.client_data(&get("/a.html", "Accept: text/html\r\n")));
    r.feed(30_080, c4.server_rst());
    let mut c5 = TcpConv::new("10.4.0.12:40005", "10.9.0.1:80");
    handshake(&mut r, &mut c5, 30_081);
    r.feed(30_161, c5.client_data(&get("/b.html", "Accept: text/html\r\n")));
    r.feed_all(30_170, c5.server_data(&html_response("<p>b</p>")));
    r.finish(40_000);
    let containers: Vec<Option<&str>> = r.pv[2..].iter().map(|p| p.container.as_deref()).collect();
    assert_eq!(containers, vec![Some("/a.html"), Some("/b.html")], "{:#?}", r.pv);
    // The same page asked again after its first ask, the first request of a new connection, was
    // reset: no keep-alive close crossed it, and browsers do not retry that on their own (the
    // visitor saw an error and reloaded): two pageviews.
    let mut first = TcpConv::new("10.4.0.12:40006", "10.9.0.1:80");
    handshake(&mut r, &mut first, 50_000);
    r.feed(50_080, first.client_data(&get("/c.html", "Accept: text/html\r\n")));
    r.feed(50_080, first.server_rst());
    let mut again = TcpConv::new("10.4.0.12:40007", "10.9.0.1:80");
    handshake(&mut r, &mut again, 50_081);
    r.feed(50_161, again.client_data(&get("/c.html", "Accept: text/html\r\n")));
    r.feed_all(50_170, again.server_data(&html_response("<p>c</p>")));
    r.finish(60_000);
    let containers: Vec<Option<&str>> = r.pv[4..].iter().map(|p| p.container.as_deref()).collect();
    assert_eq!(containers, vec![Some("/c.html"); 2], "{:#?}", r.pv);

    // A preconnected connection left idle 5 s, its first request a POST crossing the server's
    // idle close: browsers resend it (any method, on a connection they had not used): one
    // pageview from the first ask. So too when the retry's first SYN was lost and resent 3 s
    // later: its connection began within `linger` of the reset.
    for (client, syn_lost) in [("10.4.0.26", false), ("10.4.0.27", true)] {
        let mut r = Run::new();
        let mut first = TcpConv::new(&format!("{client}:40001"), "10.9.0.1:80");
        handshake(&mut r, &mut first, 55_000);
        let post = |c: &mut TcpConv| c.client_data(b"POST /form HTTP/1.1\r\nHost: shop\r\nContent-Length: 0\r\n\r\n");
        r.feed(60_500, post(&mut first));
        r.feed(60_500, first.server_rst());
        let mut again = TcpConv::new(&format!("{client}:40002"), "10.9.0.1:80");
        let at = if syn_lost {
            r.feed(60_530, again.syn());
            63_530
        } else {
            60_530
        };
        handshake(&mut r, &mut again, at);
        r.feed(at + 80, post(&mut again));
        r.feed_all(at + 90, again.server_data(&html_response("<p>thanks</p>")));
        r.finish(at + 10_000);
        assert_eq!(r.pv.len(), 1, "{client}: {:#?}", r.pv);
        assert!(approx(secs(r.pv[0].start_ts), 60.5 - 0.04, 1e-6), "{client} starts at the first ask: {}", r.pv[0].start_ts);
    }
}

#[test]
fn a_handshake_completed_by_a_resent_request_is_not_timed() {
    // The client's ACK of the SYN/ACK and its request were lost past the appliance; its TCP
    // resent the request (with the ACK) one RTO later. That is no round trip: the connection
    // takes the client's own RTT, measured on its earlier connection (80 ms), not 380 ms.
    let mut r = Run::new();
    standard_page(&mut r, 0, "10.4.0.14");
    let mut c3 = TcpConv::new("10.4.0.14:40003", "10.9.0.1:80");
    r.feed(10_000, c3.syn());
    r.feed(10_000, c3.synack());
    let _lost_ack = c3.ack();
    r.feed(10_380, c3.client_data(&get("/next.html", "Accept: text/html\r\n")));
    r.feed_all(10_390, c3.server_data(&html_response("<p>next</p>")));
    r.finish(30_000);
    assert_eq!(r.pv.len(), 2, "{:#?}", r.pv);
    let p = &r.pv[1];
    assert!(approx(secs(p.start_ts), 10.0 - 0.04, 1e-6), "start {}", p.start_ts);
    assert!(approx(p.rt_s, 0.390 + 0.08, 1e-6), "rt {}", p.rt_s);
}

#[test]
fn a_handshake_completed_by_a_request_proves_its_client_untimed() {
    // A client seen for the first time: its ACK of the SYN/ACK was lost and its request, resent
    // an RTO later, carries that ACK. It acknowledged the server's SYN/ACK, which a spoofer cannot,
    // so it is a known client: its next connection, refused, is charged as its own failed
    // pageview (an unknown client's single refused SYN would be no pageview at all).
    // Its handshake's ACK lost, its request carrying it 380 ms later.
    let ack_lost = |r: &mut Run, client: &str, uri: &str| {
        let mut c = TcpConv::new(&format!("{client}:40001"), "10.9.0.1:80");
        r.feed(0, c.syn());
        r.feed(0, c.synack());
        let _lost_ack = c.ack();
        r.feed(380, c.client_data(&get(uri, "Accept: text/html\r\n")));
        c
    };
    let mut r = Run::new();
    let mut c1 = ack_lost(&mut r, "10.4.0.15", "/first.html");
    r.feed_all(390, c1.server_data(&html_response("<p>first</p>")));
    r.feed(400, c1.client_fin());
    r.feed(400, c1.server_fin());
    r.advance(5_000);
    assert_eq!(r.pv.len(), 1, "{:#?}", r.pv);
    let c2 = TcpConv::new("10.4.0.15:40002", "10.9.0.1:81");
    r.feed(6_000, c2.syn());
    r.feed(6_001, c2.refuse());
    r.advance(6_002);
    assert_eq!(r.pv.len(), 2, "{:#?}", r.pv);
    assert_eq!(r.pv[1].failed_connections, 1);
    // Its own pageview shows a handshake even with its request never answered, and is not timed
    // by the 380 ms (no RTT: its times are the appliance's).
    let mut r = Run::new();
    let c = ack_lost(&mut r, "10.4.0.16", "/never.html");
    r.feed(1_000, c.server_rst());
    r.finish(10_000);
    assert_eq!(r.pv.len(), 1, "{:#?}", r.pv);
    assert_eq!(r.pv[0].evidence, Evidence::Handshake);
    assert!(approx(secs(r.pv[0].start_ts), 0.0, 1e-6), "start {}", r.pv[0].start_ts);
}

#[test]
fn preconnected_idle_connection_starts_its_pageview_at_the_request() {
    let mut r = Run::new();
    let mut c1 = TcpConv::new("10.4.0.8:40001", "10.9.0.1:80");
    handshake(&mut r, &mut c1, 0);
    r.feed(80, c1.client_data(&get("/index.html", "")));
    r.feed_all(100, c1.server_data(&html_response(r#"<img src="/one.gif">"#)));
    // The browser opens a spare connection and leaves it idle.
    let mut spare = TcpConv::new("10.4.0.8:40002", "10.9.0.1:80");
    r.feed(180, spare.syn());
    r.feed(180, spare.synack());
    r.feed(180, c1.client_data(&get("/one.gif", "")));
    r.feed_all(190, c1.server_data(&gif_response(10)));
    r.feed(260, spare.ack());
    // Ten seconds later the next page goes out on the spare connection.
    r.feed(10_000, spare.client_data(&get("/page2.html", "")));
    r.feed_all(10_050, spare.server_data(&html_response("<p>2</p>")));
    r.finish(20_000);
    assert_eq!(r.pv.len(), 2);
    assert!(approx(r.pv[0].rt_s, 0.190 + 0.08, 1e-6), "first page not stretched by the spare connection: {}", r.pv[0].rt_s);
    assert!(approx(secs(r.pv[1].start_ts), 10.0 - 0.04, 1e-6), "start {}", r.pv[1].start_ts);
    assert!(approx(r.pv[1].rt_s, 0.05 + 0.08, 1e-6), "rt {}", r.pv[1].rt_s);
}

#[test]
fn loss_retransmission_and_reordering_in_a_container() {
    let mut r = Run::new();
    let mut c1 = TcpConv::new("10.4.0.9:40001", "10.9.0.1:80");
    handshake(&mut r, &mut c1, 0);
    r.feed(80, c1.client_data(&get("/index.html", "")));
    let segs = c1.server_data_in(&html_response(PAGE), 17);
    // Deliver out of order, with a duplicate and a late retransmission of a lost one.
    let mut order: Vec<usize> = (0..segs.len()).collect();
    order.swap(1, 2);
    order.swap(3, 5);
    let lost = order.remove(4);
    for (k, i) in order.iter().enumerate() {
        r.feed(100 + k as u64, segs[*i].clone());
        if k == 2 {
            r.feed(100 + k as u64, segs[*i].clone());
        }
    }
    r.feed(400, segs[lost].clone());
    r.finish(10_000);
    let t = &r.tx[0];
    assert_eq!(t.status_code, Some(200));
    assert_eq!(t.response_body_len, PAGE.len() as u64);
    assert!(t.anomalies.is_empty(), "{:?}", t.anomalies);
    assert_eq!(r.pv[0].expected_objects, 3, "every tag found despite the disorder");
    assert!(r.engine.stats().retransmitted_segments >= 1);
}

#[test]
fn pipelined_requests_pair_in_order() {
    let mut r = Run::new();
    let mut c = TcpConv::new("10.4.0.10:40001", "10.9.0.1:80");
    handshake(&mut r, &mut c, 0);
    let mut reqs = get("/a", "");
    reqs.extend(get("/b", ""));
    reqs.extend(b"HEAD /c HTTP/1.1\r\nHost: shop\r\n\r\n");
    r.feed(80, c.client_data(&reqs));
    let mut resp = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc".to_vec();
    resp.extend(b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nnope\r\n0\r\n\r\n");
    resp.extend(b"HTTP/1.1 200 OK\r\nContent-Length: 999\r\n\r\n");
    r.feed_all(90, c.server_data(&resp));
    r.finish(1_000);
    let got: Vec<(String, Option<u16>, u64)> = r.tx.iter().map(|t| (t.uri.clone().unwrap(), t.status_code, t.response_body_len)).collect();
    assert_eq!(got, vec![("/a".into(), Some(200), 3), ("/b".into(), Some(404), 4), ("/c".into(), Some(200), 0)]);
}

#[test]
fn chunked_container_with_tags_split_everywhere() {
    for seg_size in [1usize, 3, 7, 16] {
        let mut r = Run::new();
        let mut c = TcpConv::new("10.4.0.11:40001", "10.9.0.1:80");
        handshake(&mut r, &mut c, 0);
        r.feed(80, c.client_data(&get("/index.html", "")));
        let (a, b) = PAGE.split_at(37);
        let body = format!("{:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n", a.len(), b.len());
        let resp = format!("HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nTransfer-Encoding: chunked\r\n\r\n{body}");
        r.feed_all(100, c.server_data_in(resp.as_bytes(), seg_size));
        for (i, u) in ["/img/a.gif", "/img/b.gif", "/img/c.gif"].iter().enumerate() {
            r.feed(200 + i as u64 * 10, c.client_data(&get(u, "")));
            r.feed_all(205 + i as u64 * 10, c.server_data(&gif_response(5)));
        }
        r.finish(10_000);
        assert_eq!(r.tx[0].response_body_len, PAGE.len() as u64, "segments of {seg_size}");
        assert_eq!(r.pv.len(), 1, "segments of {seg_size}: embeds attached");
        assert_eq!((r.pv[0].objects, r.pv[0].expected_objects), (3, 3));
    }
}

#[test]
fn capture_gap_is_counted_not_fatal() {
    let mut r = Run::new();
    let mut c = TcpConv::new("10.4.0.12:40001", "10.9.0.1:80");
    handshake(&mut r, &mut c, 0);
    r.feed(80, c.client_data(&get("/big", "")));
    let segs = c.server_data(&gif_response(10_000));
    for (i, s) in segs.iter().enumerate() {
        if i != 2 {
            r.feed(100, s.clone());
        }
    }
    r.feed(200, c.client_ack());
    r.feed(210, c.client_data(&get("/next", "")));
    r.feed_all(220, c.server_data(&gif_response(10)));
    r.finish(5_000);
    assert_eq!(r.tx.len(), 2);
    assert_eq!(r.tx[0].response_body_len, 10_000);
    assert!(r.tx[0].anomalies.contains(&"capture_gap"));
    assert_eq!(r.tx[1].uri.as_deref(), Some("/next"));
    assert_eq!(r.tx[1].status_code, Some(200));
    assert!(r.engine.stats().gap_bytes >= 1000);
}

#[test]
fn joins_a_connection_midstream() {
    let mut r = Run::with(Config { server_ports: vec![80], ..Config::default() });
    let mut c = TcpConv::new("10.4.0.13:40001", "10.9.0.1:80");
    let _ = c.ack();
    let _ = c.client_data(&get("/missed", ""));
    let mut body = c.server_data(&gif_response(3000));
    // The capture starts inside the first response's body.
    for s in body.drain(1..) {
        r.feed(100, s);
    }
    r.feed(200, c.client_data(&get("/seen", "")));
    r.feed_all(210, c.server_data(&gif_response(10)));
    r.finish(5_000);
    assert_eq!(r.engine.stats().connections_midstream, 1);
    let uris: Vec<_> = r.tx.iter().filter_map(|t| t.uri.clone()).collect();
    assert_eq!(uris, vec!["/seen"]);
    assert_eq!(r.tx.iter().find(|t| t.uri.as_deref() == Some("/seen")).unwrap().response_body_len, 10);
}

#[test]
fn close_delimited_response_ends_at_fin() {
    let mut r = Run::new();
    let mut c = TcpConv::new("10.4.0.14:40001", "10.9.0.1:80");
    handshake(&mut r, &mut c, 0);
    r.feed(80, c.client_data(b"GET /old HTTP/1.0\r\n\r\n"));
    r.feed_all(90, c.server_data(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end"));
    r.feed(95, c.server_fin());
    r.feed(175, c.client_fin());
    r.advance(200);
    assert_eq!(r.tx.len(), 1);
    assert_eq!(r.tx[0].response_body_wire_len, 13);
    // Zeek reads a close-delimited body without `Connection: close` line by line and counts the
    // unterminated last line's end as 2 bytes: its response_body_len, and so ours, is 15.
    assert_eq!(r.tx[0].response_body_len, 15);
    assert_eq!(r.tx[0].request_version.as_deref(), Some("1.0"));
}

#[test]
fn malformed_frames_are_counted_by_reason() {
    let mut r = Run::new();
    let mut c = TcpConv::new("10.4.0.15:40001", "10.9.0.1:80");
    let good = c.syn();
    r.feed(0, good[..20].to_vec());
    let mut bad_ip = good.clone();
    bad_ip[14] = 0x41; // IPv4 with IHL 1
    r.feed(1, bad_ip);
    r.feed(2, vec![]);
    handshake(&mut r, &mut c, 3);
    let s = r.engine.stats();
    assert!(s.malformed["truncated"] >= 2);
    assert_eq!(s.malformed["bad_ipv4_header"], 1);
    assert_eq!(s.connections, 1);
}

#[test]
fn table_is_bounded_and_evicted_connections_report_their_transactions() {
    let mut r = Run::with(Config { max_connections: 2, ..Config::default() });
    for i in 0..3u64 {
        let mut c = TcpConv::new(&format!("10.4.1.{}:40001", i + 1), "10.9.0.1:80");
        handshake(&mut r, &mut c, i * 10);
        r.feed(i * 10 + 80, c.client_data(&get("/slow", "")));
    }
    assert_eq!(r.engine.connections(), 2);
    assert_eq!(r.engine.stats().connections_evicted, 1);
    assert_eq!(r.tx.len(), 1, "the evicted connection's request is reported");
    assert!(r.tx[0].anomalies.contains(&"no_response"));
}

#[test]
fn ipv6_pageview() {
    let mut r = Run::new();
    let mut c = TcpConv::new("[2001:db8::4]:40001", "[2001:db8::80]:80");
    handshake(&mut r, &mut c, 0);
    r.feed(80, c.client_data(&get("/v6", "")));
    r.feed_all(90, c.server_data(&html_response("<p>v6</p>")));
    r.finish(5_000);
    assert_eq!(r.pv.len(), 1);
    assert_eq!(r.pv[0].client, "2001:db8::4");
    assert_eq!((r.tx[0].resp_h.to_string(), r.tx[0].resp_p), ("2001:db8::80".to_string(), 80));
}

#[test]
fn idle_connections_are_forgotten() {
    let mut r = Run::with(Config { idle_timeout: Duration::from_secs(10), ..Config::default() });
    let mut c = TcpConv::new("10.4.0.16:40001", "10.9.0.1:80");
    handshake(&mut r, &mut c, 0);
    assert_eq!(r.engine.connections(), 1);
    r.advance(9_000);
    assert_eq!(r.engine.connections(), 1);
    r.advance(11_000);
    assert_eq!(r.engine.connections(), 0);
}

#[test]
fn synack_retransmissions_are_counted_and_timed() {
    // The client's ACK (or the first SYN/ACK) was lost: the server retransmits its SYN/ACK.
    let mut r = Run::new();
    let mut c = TcpConv::new("10.4.0.17:40001", "10.9.0.1:80");
    r.feed(0, c.syn());
    r.feed(0, c.synack());
    r.feed(1_000, c.synack());
    r.feed(1_080, c.ack());
    r.feed(1_080, c.client_data(&get("/p", "")));
    r.feed_all(1_090, c.server_data(&html_response("<p>p</p>")));
    r.finish(5_000);
    assert_eq!(r.engine.stats().synack_retransmissions, 1);
    let p = &r.pv[0];
    let synacks: Vec<f64> = p.events.iter().filter(|e| e.kind.starts_with("synack")).map(|e| e.t_s).collect();
    assert_eq!(synacks.len(), 2);
    // RTT from the last SYN/ACK to the ACK: 80 ms, so the client-side estimate holds.
    assert!(approx(p.rt_s, 1.090 + 0.080, 1e-6), "rt {}", p.rt_s);
    assert!(approx(p.t_conn_s, 1.080, 1e-6), "t_conn {}", p.t_conn_s);
}

#[test]
fn rst_mid_response_reports_a_truncated_transaction() {
    let mut r = Run::new();
    let mut c = TcpConv::new("10.4.0.18:40001", "10.9.0.1:80");
    handshake(&mut r, &mut c, 0);
    r.feed(80, c.client_data(&get("/big", "")));
    let segs = c.server_data(&gif_response(5_000));
    r.feed(90, segs[0].clone());
    // The server resets after its first segment: the RST is at the next byte the client expects
    // (one further on, a challenge ACK's business, does not count: see
    // rst_and_fin_outside_the_window_change_nothing).
    let unsent: usize = segs[1..].iter().map(|f| f.len() - 54).sum();
    r.feed(95, c.forged(true, -(unsent as i64), "R"));
    r.advance(100);
    assert_eq!(r.tx.len(), 1, "reported at the RST, not at shutdown");
    assert!(r.tx[0].anomalies.contains(&"truncated_body"));
    assert_eq!(r.tx[0].status_code, Some(200));
}

/// A page of one connection whose server segments all pass the appliance at 100 ms (the client
/// asked at 80), its last one resent at each of `resent` (ms): the run, the conversation, and
/// the length of that last segment.
fn page_with_its_last_segment_resent(client: &str, resent: &[u64]) -> (Run, TcpConv, u32) {
    let mut r = Run::new();
    let mut c = TcpConv::new(&format!("{client}:40001"), "10.9.0.1:80");
    handshake(&mut r, &mut c, 0);
    r.feed(80, c.client_data(&get("/p", "")));
    let segs = c.server_data(&html_response(&"x".repeat(3000)));
    for s in &segs {
        r.feed(100, s.clone());
    }
    let last = segs.last().unwrap();
    for &t in resent {
        r.feed(t, last.clone());
    }
    (r, c, (last.len() - 54) as u32)
}

#[test]
fn tail_loss_past_the_appliance_extends_the_pageview() {
    // The last segment of the page was lost between the appliance and the client: the server
    // resends it 300 ms later, and only then does the client have the page.
    let (mut r, _, _) = page_with_its_last_segment_resent("10.4.0.19", &[400]);
    r.finish(5_000);
    assert!(approx(r.pv[0].rt_s, 0.400 + 0.080, 1e-6), "rt {}", r.pv[0].rt_s);
}

#[test]
fn a_retransmission_the_client_reports_as_received_twice_does_not_extend_the_pageview() {
    // The page's last segment reached the client; its ACK was lost. The server resends the
    // segment 300 ms later, and the client's ACK then carries a D-SACK of it (RFC 2883): the
    // client had the page at first.
    let (mut r, c, last_len) = page_with_its_last_segment_resent("10.4.0.20", &[400]);
    r.feed(480, c.client_dsack(0, last_len));
    r.finish(5_000);
    assert!(approx(r.pv[0].rt_s, 0.100 + 0.080, 1e-6), "rt {}", r.pv[0].rt_s);

    // Resent twice, the D-SACK after the second: the client had the first resend (or the
    // original; which, it does not say): only the second is taken back.
    let (mut r, c, last_len) = page_with_its_last_segment_resent("10.4.0.22", &[400, 700]);
    r.feed(780, c.client_dsack(0, last_len));
    r.finish(5_000);
    assert!(approx(r.pv[0].rt_s, 0.400 + 0.080, 1e-6), "rt {}", r.pv[0].rt_s);

    // A D-SACK of bytes other than those resent leaves the end the retransmission gave.
    let (mut r, c, last_len) = page_with_its_last_segment_resent("10.4.0.21", &[400]);
    r.feed(480, c.client_dsack(last_len, 1_000));
    r.finish(5_000);
    assert!(approx(r.pv[0].rt_s, 0.400 + 0.080, 1e-6), "rt {}", r.pv[0].rt_s);

    // A block wider than what was resent is no D-SACK of it.
    let (mut r, c, last_len) = page_with_its_last_segment_resent("10.4.0.23", &[400]);
    r.feed(480, c.client_dsack(0, last_len + 1_000));
    r.finish(5_000);
    assert!(approx(r.pv[0].rt_s, 0.400 + 0.080, 1e-6), "rt {}", r.pv[0].rt_s);

    // The last two segments resent in one burst: the end goes back only once the client
    // reported both received twice (the other may have been resent because it was lost).
    for (client, both) in [("10.4.0.24", false), ("10.4.0.25", true)] {
        let mut r = Run::new();
        let mut c = TcpConv::new(&format!("{client}:40001"), "10.9.0.1:80");
        handshake(&mut r, &mut c, 0);
        r.feed(80, c.client_data(&get("/p", "")));
        let segs = c.server_data(&html_response(&"x".repeat(4000)));
        assert!(segs.len() >= 3);
        r.feed_all(100, segs.clone());
        let n = segs.len();
        r.feed(400, segs[n - 2].clone());
        r.feed(401, segs[n - 1].clone());
        let (len1, len2) = ((segs[n - 2].len() - 54) as u32, (segs[n - 1].len() - 54) as u32);
        if both {
            r.feed(480, c.client_dsack(len2, len1));
        }
        r.feed(481, c.client_dsack(0, len2));
        r.finish(5_000);
        let want = if both { 0.100 } else { 0.401 } + 0.080;
        assert!(approx(r.pv[0].rt_s, want, 1e-6), "{client}: rt {}", r.pv[0].rt_s);
    }
}

#[test]
fn a_burst_reported_received_twice_in_any_order_or_grown_backwards_does_not_extend_the_pageview() {
    // The last two segments resent in one burst (`later_first`: the last one resent first, so
    // the burst's start moves back), and the client's D-SACKs of them in either order
    // (`last_first`): once both are reported, the burst was spurious whatever the order.
    for (i, (later_first, last_first)) in [(false, true), (true, false), (true, true)].into_iter().enumerate() {
        let mut r = Run::new();
        let mut c = TcpConv::new(&format!("10.4.0.{}:40001", 30 + i), "10.9.0.1:80");
        handshake(&mut r, &mut c, 0);
        r.feed(80, c.client_data(&get("/p", "")));
        let segs = c.server_data(&html_response(&"x".repeat(4000)));
        r.feed_all(100, segs.clone());
        let n = segs.len();
        let (a, b) = if later_first { (n - 1, n - 2) } else { (n - 2, n - 1) };
        r.feed(400, segs[a].clone());
        r.feed(401, segs[b].clone());
        let (len1, len2) = ((segs[n - 2].len() - 54) as u32, (segs[n - 1].len() - 54) as u32);
        let (d1, d2) = (c.client_dsack(len2, len1), c.client_dsack(0, len2));
        let (x, y) = if last_first { (d2, d1) } else { (d1, d2) };
        r.feed(480, x);
        r.feed(481, y);
        r.finish(5_000);
        assert!(approx(r.pv[0].rt_s, 0.100 + 0.080, 1e-6), "later_first {later_first}, last_first {last_first}: rt {}", r.pv[0].rt_s);
    }
}

fn rules(text: &str) -> rules::RuleSet {
    rules::compile("test.rlm", text).unwrap_or_else(|d| panic!("{d}"))
}

#[test]
fn drop_syn_keeps_the_dropped_syn_in_the_pageview_and_a_reload_keeps_the_flow() {
    let mut r = Run::new();
    r.engine.set_rules(Some(rules("CLASS LOW IF IP.SRC == 10.5.*.*\nIF CLASS == LOW THEN DROP SYN\n")));
    let mut c = TcpConv::new("10.5.0.7:40001", "10.9.0.1:80");
    r.feed(0, c.syn());
    assert_eq!(r.verdict, Some(rlm_core::Verdict::Drop));
    assert_eq!(r.decisions.len(), 1);
    assert_eq!((r.decisions[0].action, r.decisions[0].class.as_str(), r.decisions[0].rule.as_str()), ("DROP SYN", "LOW", "test.rlm:2:1"));
    // A client of no class with a rule (10.4/16 is not LOW) passes.
    let other = TcpConv::new("10.4.0.7:40001", "10.9.0.1:80");
    r.feed(10, other.syn());
    assert_eq!(r.verdict, Some(rlm_core::Verdict::Accept));
    // The operator lifts the rule (SIGHUP with a new file); the client's retransmission at 3 s passes.
    r.engine.set_rules(Some(rules("CLASS LOW IF IP.SRC == 10.5.*.*\n")));
    r.feed(3_000, c.syn());
    assert_eq!(r.verdict, Some(rlm_core::Verdict::Accept));
    r.feed(3_000, c.synack());
    r.feed(3_000 + RTT_MS, c.ack());
    r.feed(3_100, c.client_data(&get("/page", "")));
    r.feed_all(3_200, c.server_data(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello"));
    r.finish(20_000);
    let pv = r.pv.iter().find(|p| p.client == "10.5.0.7").expect("the LOW client's pageview");
    // The page took the dropped SYN's 3 s: RT runs from the first SYN, which the client sent.
    assert!(pv.rt_s > 3.2 && pv.rt_s < 3.5, "{}", pv.rt_s);
    assert_eq!(pv.syn_retransmissions, 1);
    assert_eq!(pv.class.as_deref(), Some("LOW"));
    // And it says why: rlm dropped that SYN (counted when the connection's request joined it).
    assert_eq!(pv.actions, Acts { syns_dropped: 1, ..Acts::default() });
    assert_eq!(r.engine.stats().syns_dropped, 1);
    assert_eq!(r.engine.table_sizes().pending_acts, 0);
}

#[test]
fn acts_on_the_connections_of_a_spoofed_drop_syn_flood_stay_bounded_and_go_with_their_connections() {
    let mut r = Run::with(Config { max_connections: 1_000, ..Config::default() });
    r.engine.set_rules(Some(rules("IF IP.SRC == *.*.*.* THEN DROP SYN\n")));
    // 5,000 SYNs from spoofed sources in 5 s, each dropped: five times what the table holds.
    for i in 0..5_000u64 {
        let c = TcpConv::new(&format!("10.{}.{}.{}:{}", 100 + i / 65_536, (i >> 8) & 255, i & 255, 1024 + i), "10.9.0.1:80");
        r.feed(i, c.syn());
        if i % 100 == 0 {
            let s = r.engine.table_sizes();
            assert!(s.pending_acts <= s.connections, "{s:?}");
        }
    }
    assert!(r.engine.stats().connections_evicted >= 4_000);
    // The connections left fail at the connect timeout; one SYN each and never resent, none is
    // charged to a pageview (no evidence of a real client), and nothing stays behind.
    r.advance(30_000);
    assert_eq!(r.engine.table_sizes().pending_acts, 0);
    assert!(r.engine.stats().failures_unproven >= 900, "{}", r.engine.stats().failures_unproven);
    assert!(r.pv.is_empty(), "{:?}", r.pv.first());
}

#[test]
fn a_spoofed_drop_syn_flood_writes_at_most_the_unproven_rate_of_decision_records() {
    let mut r = Run::with(Config { unproven_records_per_s: Some(10.0), ..Config::default() });
    // A real client: its handshake seen before the rule.
    let mut real = TcpConv::new("10.5.0.7:40001", "10.9.0.1:80");
    handshake(&mut r, &mut real, 0);
    r.engine.set_rules(Some(rules("IF IP.SRC == *.*.*.* THEN DROP SYN\n")));
    // 5,000 first SYNs from spoofed sources in 5 s, each dropped.
    for i in 0..5_000u64 {
        let c = TcpConv::new(&format!("10.{}.{}.{}:{}", 100 + i / 65_536, (i >> 8) & 255, i & 255, 1024 + i), "10.9.0.1:80");
        r.feed(100 + i, c.syn());
    }
    assert_eq!(r.engine.stats().syns_dropped, 5_000);
    // Each is reported (a driver counts the drops), a second's worth at once and then ten a
    // second to be written.
    assert_eq!(r.decisions.len(), 5_000);
    let written = |r: &Run| r.decisions.iter().filter(|d| !d.unwritten).count();
    assert!(written(&r) <= 10 + 51, "{} decision records", written(&r));
    assert!(written(&r) >= 50, "{} decision records", written(&r));
    assert_eq!(r.engine.stats().records_unproven_skipped as usize, 5_000 - written(&r));
    // The real client's SYN, dropped while the bucket is empty (20 more spoofed SYNs in the same
    // millisecond took what was left), is recorded.
    for i in 0..20u64 {
        r.feed(5_100, TcpConv::new(&format!("10.99.0.{}:{}", i + 1, 1024 + i), "10.9.0.1:80").syn());
    }
    let skipped = r.engine.stats().records_unproven_skipped;
    let again = TcpConv::new("10.5.0.7:40002", "10.9.0.1:80");
    r.feed(5_100, again.syn());
    assert_eq!(r.engine.stats().records_unproven_skipped, skipped, "not skipped");
    assert_eq!(r.verdict, Some(rlm_core::Verdict::Drop));
    let last = r.decisions.last().unwrap();
    assert_eq!((last.client.as_str(), last.unwritten), ("10.5.0.7:40002", false), "a known client's drop is always written");
}

/// A page of one transaction from `client` that the client sees take `rt_ms`: its SYN at `t`,
/// the handshake's RTT, and its last response byte `rt_ms - RTT` after the SYN (half an RTT is
/// added at each end on the client's clock).
fn page_taking(r: &mut Run, client: &str, t: u64, rt_ms: u64) {
    let mut c = TcpConv::new(&format!("{client}:40001"), "10.9.0.1:80");
    handshake(r, &mut c, t);
    r.feed(t + RTT_MS, c.client_data(&get("/page", "")));
    r.feed_all(t + rt_ms - RTT_MS, c.server_data(&html_response("<p>no embeds</p>")));
}

#[test]
fn a_decision_names_the_class_aggregate_that_fired_its_rule_and_the_pageviews_behind_it_are_found_by_window_ts() {
    let mut r = Run::with(Config { class_window: Duration::from_secs(10), ..Config::default() });
    r.engine.set_rules(Some(rules(
        "CLASS HIGH IF IP.SRC == 10.4.*.*\nCLASS LOW IF IP.SRC != 10.4.*.*\nIF IP.SRC != 10.4.*.* AND RT.HIGH > 1.5s THEN DROP SYN\n",
    )));
    // A HIGH pageview that leaves the 10 s window before the decision, then two that are in it
    // (fed in time order: the engine's clock never goes back).
    page_taking(&mut r, "10.4.0.3", 0, 1_000);
    page_taking(&mut r, "10.4.0.1", 10_000, 5_000);
    page_taking(&mut r, "10.4.0.2", 16_000, 2_000);
    r.advance(22_000);
    assert_eq!(r.pv.len(), 3, "all three ended");
    assert!(r.pv.iter().all(|p| p.class.as_deref() == Some("HIGH") && p.window_ts.is_some()), "{:?}", r.pv);
    let low = TcpConv::new("10.5.0.7:40001", "10.9.0.1:80");
    r.feed(22_000, low.syn());
    assert_eq!(r.verdict, Some(rlm_core::Verdict::Drop));
    assert_eq!(r.decisions.len(), 1);
    let d = &r.decisions[0];
    assert_eq!(d.aggregates.len(), 1, "{:?}", d.aggregates);
    let a = &d.aggregates[0];
    assert_eq!((a.name.as_str(), a.stat.as_str(), a.cmp, a.limit_s, a.window_s, a.held_s), ("RT.HIGH", "MEAN", ">", 1.5, 10.0, None));
    assert!(a.value_s.is_some_and(|v| approx(v, 3.5, 1e-9)), "the window mean of 5 s and 2 s: {a:?}");
    assert_eq!(a.pageviews, 2);
    // The pageviews that made the rule fire: HIGH's, entered into the window within window_s
    // before the decision.
    let ts = d.ts.secs();
    let mut behind: Vec<(&str, f64)> =
        r.pv.iter()
            .filter(|p| p.class.as_deref() == Some("HIGH") && p.window_ts.is_some_and(|w| w.secs() >= ts - a.window_s && w.secs() <= ts))
            .map(|p| (p.client.as_str(), p.rt_s))
            .collect();
    behind.sort_by(|x, y| x.0.cmp(y.0));
    assert_eq!(behind.len(), 2, "{behind:?}");
    assert!(behind[0].0 == "10.4.0.1" && approx(behind[0].1, 5.0, 1e-9), "{behind:?}");
    assert!(behind[1].0 == "10.4.0.2" && approx(behind[1].1, 2.0, 1e-9), "{behind:?}");
    // A HIGH pageview cut off by the shutdown (the images its page lists not fetched yet) enters
    // no window.
    let mut c = TcpConv::new("10.4.0.4:40001", "10.9.0.1:80");
    handshake(&mut r, &mut c, 23_000);
    r.feed(23_000 + RTT_MS, c.client_data(&get("/index.html", "Accept: text/html\r\n")));
    r.feed_all(23_100, c.server_data(&html_response(PAGE)));
    r.finish(25_000);
    let cut = r.pv.iter().find(|p| p.client == "10.4.0.4").expect("the cut pageview");
    assert!(cut.incomplete && cut.class.as_deref() == Some("HIGH") && cut.window_ts.is_none(), "{cut:?}");
}

#[test]
fn limit_syn_admits_the_configured_rate() {
    let mut r = Run::new();
    r.engine.set_rules(Some(rules("CLASS LOW IF IP.SRC == 10.5.*.*\nIF CLASS == LOW THEN LIMIT SYN 20/s BURST 5\n")));
    let mut passed = 0;
    // 200 new connections a second for 5 s from LOW clients.
    for i in 0..1000u64 {
        let c = TcpConv::new(&format!("10.5.{}.{}:{}", i / 250, i % 250 + 1, 30000 + i), "10.9.0.1:80");
        r.feed(i * 5, c.syn());
        if r.verdict == Some(rlm_core::Verdict::Accept) {
            passed += 1;
        }
    }
    // 5 from the burst and 20 a second for 5 s.
    assert!((100..=106).contains(&passed), "{passed}");
    assert!(r.decisions.iter().all(|d| d.action == "LIMIT SYN"));
}

fn fastpath_updates(r: &mut Run) -> Vec<rlm_core::FastpathUpdate> {
    std::iter::from_fn(|| r.engine.poll_fastpath()).collect()
}

#[test]
fn fastpath_learns_the_syn_verdict_of_each_client_and_a_new_generation_when_the_class_rt_turns() {
    use rlm_core::policy::{Admission, SynDecision};
    use rlm_core::{FastpathUpdate, SynMode};
    let mut r = Run::new();
    r.engine.enable_fastpath();
    // No rules: every SYN may pass in the kernel.
    assert!(matches!(fastpath_updates(&mut r)[..], [FastpathUpdate::Mode { mode: SynMode::PassAll, .. }]));
    r.engine.set_rules(Some(rules(
        "CLASS HIGH IF IP.SRC == 10.4.*.*\nCLASS LOW IF IP.SRC != 10.4.*.*\nIF IP.SRC != 10.4.*.* AND RT.HIGH > 3.0s THEN DROP SYN\n",
    )));
    let g1 = match fastpath_updates(&mut r)[..] {
        [FastpathUpdate::Mode { mode: SynMode::Verdicts, generation }] => generation,
        ref u => panic!("{u:?}"),
    };
    // A LOW client's SYN comes for a verdict: passed (RT.HIGH unknown), and the kernel may pass
    // that client's next SYNs to this server itself under this generation.
    let low = TcpConv::new("10.5.0.7:40001", "10.9.0.1:80");
    r.feed(0, low.syn());
    assert_eq!(r.verdict, Some(rlm_core::Verdict::Accept));
    let u = fastpath_updates(&mut r);
    assert_eq!(
        u,
        vec![FastpathUpdate::SynVerdict {
            client: "10.5.0.7".parse().unwrap(),
            server: "10.9.0.1:80".parse().unwrap(),
            generation: g1,
            admission: Admission::Pass
        }]
    );
    // HIGH's pageviews turn slow: RT.HIGH > 3 s changes the generation.
    let mut hc = TcpConv::new("10.4.0.1:40002", "10.9.0.1:80");
    r.feed(100, hc.syn());
    r.feed(4_000, hc.synack());
    r.feed(4_000 + RTT_MS, hc.ack());
    r.feed(4_100, hc.client_data(&get("/page", "")));
    r.feed_all(4_200, hc.server_data(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello"));
    r.finish(12_000);
    assert!(r.pv.iter().any(|p| p.client == "10.4.0.1" && p.rt_s > 3.0));
    let g2 = fastpath_updates(&mut r)
        .iter()
        .filter_map(|u| match u {
            FastpathUpdate::Mode { mode: SynMode::Verdicts, generation } => Some(*generation),
            _ => None,
        })
        .last()
        .expect("a new generation");
    assert!(g2 > g1);
    // The next LOW SYN comes for a verdict again (the old one is stale) and is dropped: the kernel
    // learns to drop under the new generation.
    let low2 = TcpConv::new("10.5.0.7:40003", "10.9.0.1:80");
    r.feed(12_100, low2.syn());
    assert_eq!(r.verdict, Some(rlm_core::Verdict::Drop));
    assert!(fastpath_updates(&mut r)
        .iter()
        .any(|u| matches!(u, FastpathUpdate::SynVerdict { generation, admission: Admission::Drop { .. }, .. } if *generation == g2)));
    // A SYN the kernel dropped is accounted (a decision record, the pageview keeps it) without
    // being decided again, and teaches the kernel nothing new.
    let before = r.decisions.len();
    let low3 = TcpConv::new("10.5.0.7:40004", "10.9.0.1:80");
    let rule = rlm_core::policy::SynDecision::Drop { rule: rules::RuleId(0), limited: false };
    r.engine.handle_decided(at(12_200), Port::Client, rlm_core::wire::LinkType::Ethernet, &low3.syn(), rule);
    r.drain();
    assert_eq!(r.decisions.len(), before + 1);
    assert_eq!(r.engine.stats().syns_dropped, 2);
    assert!(fastpath_updates(&mut r).is_empty());
    // Passed by the kernel: counted as a SYN of the class, no decision.
    let high2 = TcpConv::new("10.4.0.9:40005", "10.9.0.1:80");
    r.engine.handle_decided(at(12_300), Port::Client, rlm_core::wire::LinkType::Ethernet, &high2.syn(), SynDecision::Pass);
    r.drain();
    assert_eq!(r.decisions.len(), before + 1);
    let p = r.engine.policy().expect("rules");
    let high = p.rules().class_id("HIGH").unwrap();
    assert_eq!(p.class_counters[high.index()].syns, 2);
}

#[test]
fn fastpath_learns_that_a_rule_let_go_from_the_engines_one_clock_without_a_packet() {
    use rlm_core::{FastpathUpdate, SynMode};
    let modes = |r: &mut Run| -> Vec<u64> {
        fastpath_updates(r)
            .iter()
            .filter_map(|u| match u {
                FastpathUpdate::Mode { mode: SynMode::Verdicts, generation } => Some(*generation),
                _ => None,
            })
            .collect()
    };
    let mut r = Run::with(Config { class_window: std::time::Duration::from_secs(10), ..Config::default() });
    r.engine.enable_fastpath();
    r.engine.set_rules(Some(rules(
        "CLASS HIGH IF IP.SRC == 10.4.*.*\nCLASS LOW IF IP.SRC != 10.4.*.*\nIF IP.SRC != 10.4.*.* AND RT.HIGH > 3.0s THEN DROP SYN\n",
    )));
    let g1 = *modes(&mut r).last().expect("a generation");
    // A slow HIGH pageview turns the rule on: a new generation.
    let mut hc = TcpConv::new("10.4.0.1:40002", "10.9.0.1:80");
    r.feed(100, hc.syn());
    r.feed(4_000, hc.synack());
    r.feed(4_000 + RTT_MS, hc.ack());
    r.feed(4_100, hc.client_data(&get("/page", "")));
    r.feed_all(4_200, hc.server_data(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello"));
    r.feed(4_300, hc.client_fin());
    r.feed(4_300, hc.server_fin());
    r.advance(9_000);
    assert!(r.pv.iter().any(|p| p.client == "10.4.0.1" && p.rt_s > 3.0), "{:?}", r.pv);
    let g2 = *modes(&mut r).last().expect("the rule turned on");
    assert!(g2 > g1);
    // No packet comes; the pageview leaves the 10 s window. The engine's deadlines alone (no
    // second clock) look at the class statistics again, within FASTPATH_REFRESH of each other,
    // and the kernel learns the rule let go: a new generation.
    let next = r.engine.poll_timeout().expect("a deadline with a fast path and rules");
    assert!(next <= at(9_000) + rlm_core::engine::FASTPATH_REFRESH, "{next:?}");
    r.advance(16_000);
    let g3 = *modes(&mut r).last().expect("the rule let go without a packet");
    assert!(g3 > g2);
    let low = TcpConv::new("10.5.0.7:40003", "10.9.0.1:80");
    r.feed(16_050, low.syn());
    assert_eq!(r.verdict, Some(rlm_core::Verdict::Accept));
}

#[test]
fn fastpath_limit_syn_publishes_its_bucket_once_and_port_rules_keep_every_syn_queued() {
    use rlm_core::policy::Admission;
    use rlm_core::{FastpathUpdate, SynMode};
    let mut r = Run::new();
    r.engine.enable_fastpath();
    r.engine.set_rules(Some(rules("CLASS LOW IF IP.SRC == 10.5.*.*\nIF CLASS == LOW THEN LIMIT SYN 20/s BURST 5\n")));
    for i in 0..3u64 {
        let c = TcpConv::new(&format!("10.5.0.{}:{}", i + 1, 30000 + i), "10.9.0.1:80");
        r.feed(i, c.syn());
    }
    let u = fastpath_updates(&mut r);
    let buckets: Vec<_> = u.iter().filter(|u| matches!(u, FastpathUpdate::Bucket { .. })).collect();
    assert_eq!(buckets.len(), 1, "{u:?}");
    assert!(matches!(buckets[0], FastpathUpdate::Bucket { rate_per_s, burst: 5, .. } if (*rate_per_s - 20.0).abs() < 1e-9));
    assert_eq!(u.iter().filter(|u| matches!(u, FastpathUpdate::SynVerdict { admission: Admission::Limit { .. }, .. })).count(), 3);
    // A rule on the client's port cannot be decided by address: every SYN comes for a verdict.
    r.engine.set_rules(Some(rules("IF PORT.SRC < 1024 THEN DROP SYN\n")));
    assert!(matches!(fastpath_updates(&mut r)[..], [FastpathUpdate::Mode { mode: SynMode::QueueAll, .. }]));
    let c = TcpConv::new("10.5.0.9:30009", "10.9.0.1:80");
    r.feed(10, c.syn());
    assert!(fastpath_updates(&mut r).is_empty());
}

fn fast_run(rules_text: &str) -> Run {
    let mut r = Run::with(Config { inject: true, ..Config::default() });
    r.engine.set_rules(Some(rules(rules_text)));
    r
}

fn transmits(r: &mut Run) -> Vec<rlm_core::engine::Transmit> {
    std::iter::from_fn(|| r.engine.poll_transmit()).collect()
}

#[test]
fn fast_syn_retransmits_every_gap_absorbs_the_clients_own_and_stops_at_the_synack() {
    let mut r = fast_run("IF IP.SRC == *.*.*.* THEN FAST SYN GAP 500ms\n");
    let mut c = TcpConv::new("10.5.0.7:40001", "10.9.0.1:80");
    let syn = c.syn();
    r.feed(0, syn.clone());
    assert_eq!(r.verdict, Some(rlm_core::Verdict::Accept));
    assert!(transmits(&mut r).is_empty());
    // The server does not answer (its listen queue is full): rlm sends the same SYN at 0.5 s and 1 s.
    r.advance(1_000);
    let t = transmits(&mut r);
    assert_eq!(t.len(), 2, "{t:?}");
    assert!(t.iter().all(|t| t.port == Port::Server && &t.frame[..] == &syn[..]));
    // The client's own retransmission (its 1 s RTO) is absorbed: the server sees one SYN stream.
    r.feed(1_000, c.syn());
    assert_eq!(r.verdict, Some(rlm_core::Verdict::Drop));
    // The server answers at 1.2 s: no more retransmissions.
    r.feed(1_200, c.synack());
    r.advance(5_000);
    assert!(transmits(&mut r).is_empty());
    r.feed(1_200 + RTT_MS, c.ack());
    assert_eq!((r.engine.stats().fast_syns_sent, r.engine.stats().fast_syns_absorbed), (2, 1));
    // Without inject in the config (a driver that sends nothing) the rule is only counted.
    let mut off = Run::new();
    off.engine.set_rules(Some(rules("IF IP.SRC == *.*.*.* THEN FAST SYN GAP 500ms\n")));
    let c2 = TcpConv::new("10.5.0.8:40001", "10.9.0.1:80");
    off.feed(0, c2.syn());
    off.advance(3_000);
    off.feed(3_000, c2.syn());
    assert_eq!(off.verdict, Some(rlm_core::Verdict::Accept));
    assert!(transmits(&mut off).is_empty());
    assert_eq!(off.engine.policy().unwrap().rule_counters[0].deferred, 2);
}

#[test]
fn a_fast_syn_pageview_counts_the_copies_sent_and_the_syns_absorbed_and_each_connection_is_one_decision() {
    let mut r = fast_run("IF IP.SRC == *.*.*.* THEN FAST SYN GAP 500ms\n");
    let mut c = TcpConv::new("10.5.0.7:40001", "10.9.0.1:80");
    r.feed(0, c.syn());
    // rlm's copies at 0.5 s and 1 s; the client's own at 1 s is absorbed; copies at 1.5 s and 2 s.
    r.advance(1_000);
    r.feed(1_000, c.syn());
    assert_eq!(r.verdict, Some(rlm_core::Verdict::Drop));
    r.advance(2_000);
    assert_eq!(transmits(&mut r).len(), 4);
    r.feed(2_100, c.synack());
    r.feed(2_100 + RTT_MS, c.ack());
    r.feed(2_200, c.client_data(&get("/page", "")));
    r.feed_all(2_300, c.server_data(&html_response("<p>no embeds</p>")));
    // Another client's SYN is kept too, but answered before a copy is due.
    page_taking(&mut r, "10.5.0.8", 3_000, 500);
    assert!(transmits(&mut r).is_empty());
    r.finish(10_000);
    assert_eq!(r.pv.len(), 2);
    let pv = r.pv.iter().find(|p| p.client == "10.5.0.7").expect("the first client's pageview");
    assert_eq!(pv.actions, Acts { syns_resent: 4, syns_absorbed: 1, ..Acts::default() });
    let quick = r.pv.iter().find(|p| p.client == "10.5.0.8").expect("the second client's pageview");
    assert_eq!(quick.actions, Acts::default());
    // One decision per connection whose SYN rlm kept, however many copies it sent.
    let acted: Vec<(&str, &str)> = r.decisions.iter().map(|d| (d.action, d.client.as_str())).collect();
    assert_eq!(acted, [("FAST SYN", "10.5.0.7:40001"), ("FAST SYN", "10.5.0.8:40001")]);
    let d = &r.decisions[0];
    assert_eq!((d.rule.as_str(), d.server.as_str(), d.retransmission, d.target.as_deref()), ("test.rlm:1:1", "10.9.0.1:80", false, None));
    assert!(d.aggregates.is_empty());
}

#[test]
fn halt_fast_syn_holds_a_throttled_class_back_and_resumes_when_the_rule_clears() {
    let throttle = "CLASS HIGH IF IP.SRC == 10.4.*.*\nCLASS LOW IF IP.SRC != 10.4.*.*\nIF IP.SRC == *.*.*.* THEN FAST SYN GAP 500ms\nIF CLASS == LOW THEN\n  DROP SYN\n  HALT FAST SYN\n";
    let mut r = fast_run(throttle);
    let low = TcpConv::new("10.5.0.7:40001", "10.9.0.1:80");
    let syn = low.syn();
    r.feed(0, syn.clone());
    assert_eq!(r.verdict, Some(rlm_core::Verdict::Drop));
    r.advance(2_000);
    assert!(transmits(&mut r).is_empty(), "halted while the throttle holds");
    // The throttle lifts (a new rule file): the held SYN goes to the server at the next gap.
    r.engine
        .set_rules(Some(rules("CLASS HIGH IF IP.SRC == 10.4.*.*\nCLASS LOW IF IP.SRC != 10.4.*.*\nIF IP.SRC == *.*.*.* THEN FAST SYN GAP 500ms\n")));
    r.advance(2_600);
    let t = transmits(&mut r);
    assert_eq!(t.len(), 1, "{t:?}");
    assert_eq!(&t[0].frame[..], &syn[..]);
    // Then every gap until the per-connection limit (20 in all) and nothing after it.
    r.advance(25_000);
    assert_eq!(transmits(&mut r).len(), 19);
    r.advance(40_000);
    assert!(transmits(&mut r).is_empty());
    assert_eq!(r.engine.stats().fast_syns_sent, 20);
}

#[test]
fn a_held_syn_at_the_end_of_time_does_not_loop_the_timers() {
    // A capture's timestamp past what nanoseconds since 1970 hold is read as the largest one;
    // the engine's time then stops there and `now + gap` is `now`: a held SYN's timer was due
    // again at once, and `handle_timeout` never returned (found by reading, session 32).
    rlm_core::testkit::ends_within(Duration::from_secs(10), || {
        let throttle =
            "CLASS LOW IF IP.SRC != 10.4.*.*\nIF IP.SRC == *.*.*.* THEN FAST SYN GAP 500ms\nIF CLASS == LOW THEN\n  DROP SYN\n  HALT FAST SYN\n";
        let mut e = rlm_core::Engine::new(Config { inject: true, ..Config::default() });
        e.set_rules(Some(rules(throttle)));
        let end = rlm_core::Timestamp(u64::MAX);
        e.handle(end, Port::Client, &TcpConv::new("10.5.0.7:40001", "10.9.0.1:80").syn());
        // A driver fires each deadline it is given until none is left by its time.
        let mut fired = 0;
        while let Some(t) = e.poll_timeout().filter(|t| *t <= end) {
            e.handle_timeout(t);
            fired += 1;
            if fired > 1_000 {
                break;
            }
        }
        assert!(fired <= 1_000, "a deadline at the end of time came back {fired} times");
        e.shutdown(end);
    });
}

#[test]
fn fast_synack_resends_the_synack_to_the_client_until_its_ack() {
    let mut r = fast_run("IF IP.SRC == *.*.*.* THEN FAST SYN/ACK GAP 500ms\n");
    let mut c = TcpConv::new("10.5.0.7:40001", "10.9.0.1:80");
    r.feed(0, c.syn());
    let synack = c.synack();
    r.feed(10, synack.clone());
    assert!(transmits(&mut r).is_empty());
    // The SYN/ACK was lost on the way to the client: rlm sends it again at 0.51 s and 1.01 s.
    r.advance(1_100);
    let t = transmits(&mut r);
    assert_eq!(t.len(), 2, "{t:?}");
    assert!(t.iter().all(|t| t.port == Port::Client && t.frame[..] == synack[..]));
    // The client's ACK ends it; its page follows.
    r.feed(1_100, c.ack());
    r.feed(1_150, c.client_data(&get("/page", "")));
    r.feed_all(1_200, c.server_data(&html_response("<p>no embeds</p>")));
    r.advance(5_000);
    assert!(transmits(&mut r).is_empty());
    assert_eq!(r.engine.stats().fast_synacks_sent, 2);
    assert_eq!(r.pv.len(), 1);
    assert_eq!(r.pv[0].actions, Acts { synacks_resent: 2, ..Acts::default() });
    // A handshake that completes within the gap sends nothing.
    let mut d = TcpConv::new("10.5.0.8:40002", "10.9.0.1:80");
    r.feed(6_000, d.syn());
    r.feed(6_001, d.synack());
    r.feed(6_100, d.ack());
    r.advance(9_000);
    assert!(transmits(&mut r).is_empty());
    // One decision per SYN/ACK kept, whether copies went or not.
    let acted: Vec<(&str, &str, &str)> = r.decisions.iter().map(|d| (d.action, d.rule.as_str(), d.client.as_str())).collect();
    assert_eq!(acted, [("FAST SYN/ACK", "test.rlm:1:1", "10.5.0.7:40001"), ("FAST SYN/ACK", "test.rlm:1:1", "10.5.0.8:40002")]);
}

#[test]
fn delay_first_syn_holds_the_pageviews_first_syn_then_fast_retransmits_it() {
    let rules_text = "CLASS HIGH IF IP.SRC == 10.4.*.*\nCLASS LOW IF IP.SRC != 10.4.*.*\nIF IP.SRC == *.*.*.* THEN FAST SYN GAP 500ms\nIF CLASS == LOW THEN DELAY FIRST SYN 3s\n";
    let mut r = fast_run(rules_text);
    let mut c = TcpConv::new("10.5.0.7:40001", "10.9.0.1:80");
    let syn = c.syn();
    r.feed(0, syn.clone());
    assert_eq!(r.verdict, Some(rlm_core::Verdict::Drop), "held back");
    r.advance(2_900);
    assert!(transmits(&mut r).is_empty());
    // The client's own retransmission at 3 s is absorbed; rlm's copy goes at 3 s.
    r.feed(3_000, c.syn());
    assert_eq!(r.verdict, Some(rlm_core::Verdict::Drop));
    let t = transmits(&mut r);
    assert_eq!(t.len(), 1, "{t:?}");
    assert_eq!((t[0].port, &t[0].frame[..]), (Port::Server, &syn[..]));
    // The server is slow: the next copy follows 500 ms later, then its SYN/ACK ends it.
    r.advance(3_600);
    assert_eq!(transmits(&mut r).len(), 1);
    r.feed(3_700, c.synack());
    r.feed(3_700 + RTT_MS, c.ack());
    r.feed(3_800, c.client_data(&get("/page", "")));
    r.feed_all(3_900, c.server_data(&html_response("<p>no embeds</p>")));
    r.advance(8_000);
    assert!(transmits(&mut r).is_empty());
    let s = r.engine.stats();
    assert_eq!((s.syns_delayed, s.fast_syns_sent, s.fast_syns_absorbed), (1, 2, 1));
    assert_eq!(r.pv.len(), 1);
    assert_eq!(r.pv[0].actions, Acts { syns_delayed: 1, syns_absorbed: 1, syns_resent: 2, ..Acts::default() });
    // HIGH is not delayed.
    let h = TcpConv::new("10.4.0.7:40001", "10.9.0.1:80");
    r.feed(9_000, h.syn());
    assert_eq!(r.verdict, Some(rlm_core::Verdict::Accept));
    // A decision for each rule that kept a SYN, once per connection.
    let acted: Vec<(&str, &str, &str)> = r.decisions.iter().map(|d| (d.action, d.rule.as_str(), d.client.as_str())).collect();
    assert_eq!(
        acted,
        [
            ("DELAY FIRST SYN", "test.rlm:4:1", "10.5.0.7:40001"),
            ("FAST SYN", "test.rlm:3:1", "10.5.0.7:40001"),
            ("FAST SYN", "test.rlm:3:1", "10.4.0.7:40001")
        ]
    );
    assert!(r.decisions.iter().all(|d| d.class == if d.client.starts_with("10.4.") { "HIGH" } else { "LOW" }), "{:?}", r.decisions);
}

#[test]
fn a_syn_from_the_queue_goes_out_with_the_link_addresses_learned_from_handshakes() {
    use rlm_core::wire::LinkType;
    let mut r = fast_run("IF IP.SRC == *.*.*.* THEN FAST SYN GAP 500ms\n");
    // An earlier handshake, seen with its Ethernet header, teaches the addresses.
    let a = TcpConv::new("10.5.0.1:40000", "10.9.0.1:80");
    let mut syn_a = a.syn();
    syn_a[0..6].copy_from_slice(&[0xaa; 6]); // to the server
    syn_a[6..12].copy_from_slice(&[0xcc; 6]); // from the clients' router
    r.feed(0, syn_a);
    let mut synack_a = a.synack();
    synack_a[0..6].copy_from_slice(&[0xcc; 6]);
    synack_a[6..12].copy_from_slice(&[0xaa; 6]);
    r.feed(1, synack_a);
    // A SYN without a link header (NFQUEUE), with its TCP checksum left partial (offload).
    let c = TcpConv::new("10.5.0.2:40001", "10.9.0.1:80");
    let syn = c.syn();
    let mut raw = syn[14..].to_vec();
    raw[20 + 16] ^= 0xff;
    r.engine.handle_link(at(100), Port::Client, LinkType::RawIp, &raw);
    r.advance(700);
    let t = transmits(&mut r);
    assert_eq!(t.len(), 1, "{t:?}");
    let f = &t[0].frame;
    assert_eq!((&f[0..6], &f[6..12], &f[12..14]), (&[0xaa; 6][..], &[0xcc; 6][..], &[0x08, 0x00][..]));
    assert_eq!(&f[14..], &syn[14..], "the same packet, its checksum whole again");
}

#[test]
fn a_spoofed_syn_flood_is_not_amplified_and_leaves_memory_bounded() {
    let budget = rlm_core::actions::InjectBudget { max_pending: 2_000, ..Default::default() };
    let mut r = Run::with(Config { inject: true, inject_budget: budget.clone(), ..Config::default() });
    r.engine.set_rules(Some(rules("IF IP.SRC == *.*.*.* THEN FAST SYN + SYN/ACK GAP 500ms\n")));
    // 20,000 SYNs from spoofed sources over 10 s: the server answers each (SYN cookies), no
    // client ever ACKs. Half of them the server leaves unanswered (its queue is full).
    let mut injected = 0usize;
    let mut peak = rlm_core::engine::TableSizes::default();
    for i in 0..20_000u64 {
        let ip = format!("10.{}.{}.{}:{}", 100 + (i >> 16) % 100, (i >> 8) & 255, i & 255, 1024 + i % 60_000);
        let c = TcpConv::new(&ip, "10.9.0.1:80");
        r.feed(i / 2, c.syn());
        if i % 2 == 0 {
            r.feed(i / 2, c.synack());
        }
        injected += transmits(&mut r).len();
        if i % 1000 == 0 {
            let s = r.engine.table_sizes();
            peak.connections = peak.connections.max(s.connections);
            peak.timers = peak.timers.max(s.timers);
            assert!(s.pending_acts <= s.connections, "{s:?}");
        }
    }
    r.advance(60_000);
    // What rlm sent for the flood's connections went with them (into the failed pageviews they make).
    assert_eq!(r.engine.table_sizes().pending_acts, 0);
    injected += transmits(&mut r).len();
    let s = r.engine.stats();
    // Nothing earned (no handshake completed): at most the class's initial burst, 5% of the flood.
    assert!(injected as f64 <= budget.burst, "{injected} frames injected for 20,000 spoofed SYNs");
    assert_eq!(injected as u64, s.fast_syns_sent + s.fast_synacks_sent);
    assert!(s.inject_denied > 0);
    // Kept frames and timers stay bounded by max_pending and the connection table.
    assert!(peak.timers <= 3 * peak.connections + 4096 + 2 * budget.max_pending, "{peak:?}");
    // Real clients earn their class a budget again.
    let mut real = TcpConv::new("10.4.0.1:50000", "10.9.0.1:80");
    r.feed(61_000, real.syn());
    r.feed(61_001, real.synack());
    r.feed(61_050, real.ack());
    let mut lossy = TcpConv::new("10.4.0.2:50001", "10.9.0.1:80");
    r.feed(62_000, lossy.syn());
    r.feed(62_001, lossy.synack());
    r.advance(62_600);
    assert_eq!(transmits(&mut r).len(), 1, "earned by the completed handshake");
    r.feed(62_700, lossy.ack());
}

#[test]
fn held_syns_are_released_at_a_paced_rate_and_counted_once() {
    let held = "CLASS HIGH IF IP.SRC == 10.4.*.*\nCLASS LOW IF IP.SRC != 10.4.*.*\nIF IP.SRC == *.*.*.* THEN FAST SYN GAP 500ms\nIF CLASS == LOW THEN\n  DROP SYN\n  HALT FAST SYN\n";
    let mut r = fast_run(held);
    // 60 LOW connections are held while the throttle holds.
    for i in 0..60u64 {
        let c = TcpConv::new(&format!("10.5.0.{}:{}", 1 + i, 41000 + i), "10.9.0.1:80");
        r.feed(i, c.syn());
        assert_eq!(r.verdict, Some(rlm_core::Verdict::Drop));
    }
    r.advance(2_000);
    assert!(transmits(&mut r).is_empty());
    let low = r.engine.policy().unwrap().rules().class_id("LOW").unwrap();
    // Each held SYN was looked at again every gap, but counted once.
    assert_eq!(r.engine.policy().unwrap().class_counters[low.index()].syns, 60);
    assert_eq!(r.engine.policy().unwrap().class_counters[low.index()].syns_dropped, 60);
    // The throttle lets go: the 60 go out at 20 a second (5 at once), not all within one gap.
    r.engine
        .set_rules(Some(rules("CLASS HIGH IF IP.SRC == 10.4.*.*\nCLASS LOW IF IP.SRC != 10.4.*.*\nIF IP.SRC == *.*.*.* THEN FAST SYN GAP 500ms\n")));
    let distinct = |t: &[rlm_core::engine::Transmit]| t.iter().map(|t| t.frame.clone()).collect::<std::collections::HashSet<_>>();
    r.advance(3_000);
    let first = distinct(&transmits(&mut r));
    assert!((20..=26).contains(&first.len()), "{} released in the first second", first.len());
    r.advance(6_000);
    let mut all = first.clone();
    all.extend(distinct(&transmits(&mut r)));
    assert_eq!(all.len(), 60, "every held SYN released within 3 s");
    // Oldest first: the first second's are the SYNs held longest (source ports 41000 on).
    let port = |f: &[u8]| u16::from_be_bytes([f[34], f[35]]);
    let mut ports: Vec<u16> = first.iter().map(|f| port(f)).collect();
    ports.sort();
    assert_eq!(ports, (41000..41000 + ports.len() as u16).collect::<Vec<_>>());
}

#[test]
fn a_clients_own_retransmission_passes_once_the_rule_lets_go_before_the_paced_release() {
    let held = "CLASS HIGH IF IP.SRC == 10.4.*.*\nCLASS LOW IF IP.SRC != 10.4.*.*\nIF IP.SRC == *.*.*.* THEN FAST SYN GAP 500ms\nIF CLASS == LOW THEN\n  DROP SYN\n  HALT FAST SYN\n";
    let mut r = fast_run(held);
    // 60 LOW SYNs held; the last one's client is ours.
    let convs: Vec<TcpConv> = (0..60u64).map(|i| TcpConv::new(&format!("10.5.0.{}:{}", 1 + i, 41000 + i), "10.9.0.1:80")).collect();
    for (i, c) in convs.iter().enumerate() {
        r.feed(i as u64, c.syn());
    }
    r.advance(2_000);
    assert!(transmits(&mut r).is_empty());
    // While the rule holds, the client's own retransmission is absorbed.
    let last = &convs[59];
    r.feed(2_100, last.syn());
    assert_eq!(r.verdict, Some(rlm_core::Verdict::Drop));
    r.engine
        .set_rules(Some(rules("CLASS HIGH IF IP.SRC == 10.4.*.*\nCLASS LOW IF IP.SRC != 10.4.*.*\nIF IP.SRC == *.*.*.* THEN FAST SYN GAP 500ms\n")));
    // The rule has let go; the paced release (20/s, oldest first) is far from the youngest SYN
    // when its client retransmits: that retransmission goes to the server.
    r.advance(2_300);
    r.feed(2_300, last.syn());
    assert_eq!(r.verdict, Some(rlm_core::Verdict::Accept));
    assert_eq!(r.engine.stats().fast_syns_client_passed, 1);
    // rlm does not send a copy of it within the gap, and sends one a gap after it.
    let port = |f: &[u8]| u16::from_be_bytes([f[34], f[35]]);
    let ours = |t: Vec<rlm_core::engine::Transmit>| t.iter().filter(|t| port(&t.frame) == 41059).count();
    r.advance(2_790);
    assert_eq!(ours(transmits(&mut r)), 0, "no copy within a gap of the client's");
    r.advance(2_810);
    assert_eq!(ours(transmits(&mut r)), 1, "the next copy a gap after the client's");
    // Another client's retransmission while the rule holds again is absorbed.
    r.engine.set_rules(Some(rules(held)));
    r.feed(2_900, convs[58].syn());
    assert_eq!(r.verdict, Some(rlm_core::Verdict::Drop));
    assert_eq!(r.engine.stats().fast_syns_client_passed, 1);
}

#[test]
fn held_and_resent_syns_take_no_limit_syn_token() {
    let mut r =
        fast_run("CLASS LOW IF IP.SRC == 10.5.*.*\nIF IP.SRC == *.*.*.* THEN FAST SYN GAP 500ms\nIF CLASS == LOW THEN LIMIT SYN 1/min BURST 2\n");
    let a = TcpConv::new("10.5.0.1:40001", "10.9.0.1:80");
    r.feed(0, a.syn());
    assert_eq!(r.verdict, Some(rlm_core::Verdict::Accept));
    // The server does not answer: rlm resends it four times, without touching the bucket.
    r.advance(2_100);
    assert_eq!(transmits(&mut r).len(), 4);
    // So the bucket's second token is still there for the next client.
    let b = TcpConv::new("10.5.0.2:40002", "10.9.0.1:80");
    r.feed(2_200, b.syn());
    assert_eq!(r.verdict, Some(rlm_core::Verdict::Accept));
    let c = TcpConv::new("10.5.0.3:40003", "10.9.0.1:80");
    r.feed(2_300, c.syn());
    assert_eq!(r.verdict, Some(rlm_core::Verdict::Drop), "the third is policed");
}

#[test]
fn a_blind_spoofer_earns_no_budget_and_a_delay_that_cannot_be_kept_lets_the_syn_go() {
    // Spend the burst on two handshakes whose client never answers the SYN/ACK; its "client"
    // then sends data without having seen it (a blind spoofer: an acknowledgment number it could
    // only guess): the connection counts as established, but it earns nothing. With `real`, the
    // second is a real client whose ACK was lost, its request carrying that ACK: not timed, but
    // proof of a real client all the same, which earns its class some injections again. Whether
    // a third, lossy, handshake then gets its SYN/ACK resent.
    let resent_after = |real: bool| {
        let budget = rlm_core::actions::InjectBudget { burst: 2.0, max_pending: 1, ..Default::default() };
        let mut r = Run::with(Config { inject: true, inject_budget: budget, ..Config::default() });
        r.engine.set_rules(Some(rules("IF IP.SRC == *.*.*.* THEN FAST SYN/ACK GAP 100ms\n")));
        for i in 0..2u64 {
            let mut c = TcpConv::new(&format!("10.6.0.{}:5000", i + 1), "10.9.0.1:80");
            r.feed(i * 1000, c.syn());
            r.feed(i * 1000 + 1, c.synack());
            r.advance(i * 1000 + 150);
            assert_eq!(transmits(&mut r).len(), 1);
            let _lost_ack = c.ack();
            let mut data = c.client_data(b"GET / HTTP/1.1\r\n\r\n");
            if !(real && i == 1) {
                data[14 + 20 + 8] ^= 0x5a;
            }
            r.feed(i * 1000 + 200, data);
        }
        let lossy = TcpConv::new("10.6.0.9:5009", "10.9.0.1:80");
        r.feed(5_000, lossy.syn());
        r.feed(5_001, lossy.synack());
        r.advance(5_300);
        let resent = !transmits(&mut r).is_empty();
        assert!(resent || r.engine.stats().inject_denied >= 1);
        resent
    };
    assert!(!resent_after(false), "the burst is spent and nothing was earned");
    assert!(resent_after(true), "the answered handshake earned some");

    // DELAY FIRST SYN with no room to keep the SYN: it goes on at once, not lost.
    let budget = rlm_core::actions::InjectBudget { max_pending: 1, ..Default::default() };
    let mut d = Run::with(Config { inject: true, inject_budget: budget, ..Config::default() });
    d.engine.set_rules(Some(rules("IF IP.SRC == *.*.*.* THEN DELAY FIRST SYN 3s\n")));
    d.feed(0, TcpConv::new("10.5.0.1:40001", "10.9.0.1:80").syn());
    assert_eq!(d.verdict, Some(rlm_core::Verdict::Drop), "held back");
    d.feed(10, TcpConv::new("10.5.0.2:40002", "10.9.0.1:80").syn());
    assert_eq!(d.verdict, Some(rlm_core::Verdict::Accept), "no room to keep it: passed");
    assert_eq!(d.engine.stats().syns_delayed, 1);
    // A delay at or past the client's connect timeout would only make it fail: not applied.
    let mut long = fast_run("IF IP.SRC == *.*.*.* THEN DELAY FIRST SYN 30s\n");
    long.feed(0, TcpConv::new("10.5.0.3:40003", "10.9.0.1:80").syn());
    assert_eq!(long.verdict, Some(rlm_core::Verdict::Accept));
}

// --- content adaptation: REMOVE EMBEDS ---

fn adapt_run(rules_text: &str) -> Run {
    let mut r = Run::with(Config { adapt: true, ..Config::default() });
    r.engine.set_rules(Some(rules(rules_text)));
    r
}

/// A client that has opened a connection and asked for `/index.html`: the server's answer
/// starts at the conversation's `sseq`.
fn asking_for_a_page(mut r: Run) -> (Run, TcpConv) {
    let mut c = TcpConv::new("10.5.0.7:40001", "10.9.0.1:80");
    handshake(&mut r, &mut c, 0);
    r.feed(80, c.client_data(&get("/index.html", "")));
    (r, c)
}

/// Feed a server frame; what goes on toward the client (`None`: dropped).
fn forward(r: &mut Run, ms: u64, frame: Vec<u8>) -> Option<Vec<u8>> {
    r.feed(ms, frame.clone());
    match r.verdict.take().expect("a verdict") {
        rlm_core::Verdict::Accept => Some(frame),
        rlm_core::Verdict::Drop => None,
        rlm_core::Verdict::Replace(f) => Some(f.into_vec()),
    }
}

/// The TCP sequence number and payload of a frame, after checking its TCP checksum.
fn seq_payload(frame: &[u8]) -> (u32, Vec<u8>) {
    let p = etherparse::SlicedPacket::from_ethernet(frame).expect("a frame");
    let Some(etherparse::TransportSlice::Tcp(t)) = &p.transport else { panic!("not TCP") };
    let Some(etherparse::NetSlice::Ipv4(v4)) = &p.net else { panic!("not IPv4") };
    let full = t.calc_checksum_ipv4(v4.header().source(), v4.header().destination()).unwrap();
    let carried = t.checksum();
    assert!(full == carried || (full | carried == 0xffff && full & carried == 0), "TCP checksum {carried:#06x}, should be {full:#06x}");
    (t.sequence_number(), t.payload().to_vec())
}

/// The client's stream as it receives it: every forwarded copy laid at its sequence number,
/// each byte checked equal across copies.
fn client_stream(frames: &[Vec<u8>], isn_next: u32) -> Vec<u8> {
    let mut out: Vec<Option<u8>> = Vec::new();
    for f in frames {
        let (seq, payload) = seq_payload(f);
        let at = seq.wrapping_sub(isn_next) as usize;
        if out.len() < at + payload.len() {
            out.resize(at + payload.len(), None);
        }
        for (i, b) in payload.iter().enumerate() {
            assert!(out[at + i].is_none_or(|x| x == *b), "copies differ at {}", at + i);
            out[at + i] = Some(*b);
        }
    }
    out.into_iter().map(|b| b.expect("no hole")).collect()
}

// --- content adaptation: REWRITE EMBEDS ---

/// A run whose rules were read from files, with `map` as the mapping `ims.map` beside them.
fn rewrite_run(rules_text: &str, map: &str, name: &str) -> Run {
    let dir = std::env::temp_dir().join(format!("rlm-engine-rewrite-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("rules.rlm"), rules_text).unwrap();
    std::fs::write(dir.join("ims.map"), map).unwrap();
    let rs = rules::check_file(&dir.join("rules.rlm")).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let mut r = Run::with(Config { adapt: true, ..Config::default() });
    r.engine.set_rules(Some(rs));
    r
}

const REWRITE_AFTER_1: &str = "IF IP.SRC == *.*.*.* THEN REWRITE EMBEDS AFTER 1 USING \"ims.map\"\n";

#[test]
fn rewrite_embeds_rewrites_the_chosen_image_requests_in_place_and_every_resend() {
    let (mut r, mut c) = asking_for_a_page(rewrite_run(REWRITE_AFTER_1, "/img/* /ims/*\n", "chosen"));
    r.feed_all(100, c.server_data(&html_response(PAGE)));
    // The first image is kept (AFTER 1): its request goes on as it was.
    let a = c.client_data(&get("/img/a.gif", "Referer: http://shop/index.html\r\n"));
    assert_eq!(forward(&mut r, 180, a.clone()).unwrap(), a);
    r.feed_all(190, c.server_data(&gif_response(300)));
    // The second is rewritten to its variant, in place: same length, valid checksum.
    let b = c.client_data(&get("/img/b.gif", "Referer: http://shop/index.html\r\n"));
    let sent = forward(&mut r, 200, b.clone()).unwrap();
    let (seq, payload) = seq_payload(&sent);
    assert_eq!((seq, payload.len()), (seq_payload(&b).0, seq_payload(&b).1.len()));
    assert_eq!(String::from_utf8(payload.clone()).unwrap(), String::from_utf8(get("/ims/b.gif", "Referer: http://shop/index.html\r\n")).unwrap());
    // The client resends it, cut in two inside the target: each piece gets its part.
    let (_, orig) = seq_payload(&b);
    let mut again = c.clone();
    again.cseq = seq;
    let p1 = forward(&mut r, 500, again.client_data(&orig[..8])).unwrap();
    let p2 = forward(&mut r, 500, again.client_data(&orig[8..])).unwrap();
    assert_eq!([seq_payload(&p1).1, seq_payload(&p2).1].concat(), payload);
    r.feed_all(520, c.server_data(&gif_response(40)));
    // The third too; the pageview still counts every object (rlm read the original requests).
    let cc = c.client_data(&get("/img/c.gif", "Referer: http://shop/index.html\r\n"));
    assert!(String::from_utf8(seq_payload(&forward(&mut r, 600, cc).unwrap()).1).unwrap().starts_with("GET /ims/c.gif "));
    r.feed_all(610, c.server_data(&gif_response(40)));
    r.feed(700, c.client_ack());
    r.finish(20_000);
    let s = r.engine.stats();
    assert_eq!((s.embeds_rewritten, s.rewrites_split, s.rewrites_unplaced, s.rewrites_unmapped), (2, 0, 0, 0));
    assert!(s.adapt_segments_edited >= 4, "{}", s.adapt_segments_edited);
    assert_eq!(r.pv.len(), 1);
    assert_eq!(r.pv[0].objects, 3, "{:?}", r.pv[0].object_uris);
    assert_eq!(r.engine.policy().unwrap().rule_counters[0].deferred, 0);
    // One decision per rewritten request (not per resend), naming what the client asked for.
    assert_eq!(r.pv[0].actions, Acts { embeds_rewritten: 2, ..Acts::default() });
    let acted: Vec<(&str, Option<&str>)> = r.decisions.iter().map(|d| (d.action, d.target.as_deref())).collect();
    assert_eq!(acted, [("REWRITE EMBEDS", Some("/img/b.gif")), ("REWRITE EMBEDS", Some("/img/c.gif"))]);
    assert!(r.decisions.iter().all(|d| d.rule.ends_with("rules.rlm:1:1") && d.client == "10.5.0.7:40001" && !d.retransmission), "{:?}", r.decisions);
}

#[test]
fn only_listed_images_are_rewritten_and_a_target_the_map_lacks_goes_as_it_was() {
    let rules_text = "IF IP.SRC == *.*.*.* THEN REWRITE EMBEDS USING \"ims.map\"\n";
    let map = "/img/a.gif /img/A.gif\n/img/a.gif?v=2 /img/A.gif?v=2\n";
    let (mut r, mut c) = asking_for_a_page(rewrite_run(rules_text, map, "listed"));
    r.feed_all(100, c.server_data(&html_response(PAGE)));
    // b is listed but the mapping has no variant for it.
    let b = c.client_data(&get("/img/b.gif", "Referer: http://shop/index.html\r\n"));
    assert_eq!(forward(&mut r, 200, b.clone()).unwrap(), b);
    r.feed_all(210, c.server_data(&gif_response(10)));
    let a = c.client_data(&get("/img/a.gif", "Referer: http://shop/index.html\r\n"));
    assert!(String::from_utf8(seq_payload(&forward(&mut r, 300, a).unwrap()).1).unwrap().starts_with("GET /img/A.gif HTTP/1.1\r\n"));
    r.feed_all(310, c.server_data(&gif_response(10)));
    // A request the page did not list goes as it was, though the mapping has it.
    let other = c.client_data(&get("/img/a.gif?v=2", ""));
    assert_eq!(forward(&mut r, 400, other.clone()).unwrap(), other);
    let s = r.engine.stats();
    assert_eq!((s.embeds_rewritten, s.rewrites_unmapped), (1, 1));
}

#[test]
fn a_rewrite_without_its_mapping_read_is_deferred_and_rewrites_nothing() {
    // Compiled without reading files: the rule fires, nothing is rewritten, it is counted.
    let (mut r, mut c) = asking_for_a_page(adapt_run(REWRITE_AFTER_1));
    r.feed_all(100, c.server_data(&html_response(PAGE)));
    for (t, u) in [(200, "/img/a.gif"), (300, "/img/b.gif")] {
        let f = c.client_data(&get(u, "Referer: http://shop/index.html\r\n"));
        assert_eq!(forward(&mut r, t, f.clone()).unwrap(), f);
        r.feed_all(t + 10, c.server_data(&gif_response(10)));
    }
    assert_eq!(r.engine.stats().embeds_rewritten, 0);
    assert_eq!(r.engine.policy().unwrap().rule_counters[0].deferred, 2);
}

#[test]
fn a_predicted_rewrite_takes_the_objects_whose_transfer_would_pass_the_goal_once_their_size_is_known() {
    // 004 Figure 20: rewrite an image if its predicted transfer takes the pageview past 300 ms.
    let rules_text = "IF IP.SRC == *.*.*.* THEN REWRITE EMBEDS IF PREDICTED RT > 300ms USING \"ims.map\"\n";
    let (mut r, mut c) = asking_for_a_page(rewrite_run(rules_text, "/img/* /ims/*\n", "predicted"));
    let referer = "Referer: http://shop/index.html\r\n";
    r.feed_all(100, c.server_data(&html_response(PAGE)));
    // The first pageview: no size known yet, nothing rewritten; the answers teach the sizes.
    for (t, u, n) in [(200, "/img/a.gif", 262_144), (1500, "/img/b.gif", 300), (1700, "/img/c.gif", 300)] {
        let f = c.client_data(&get(u, referer));
        assert_eq!(forward(&mut r, t, f.clone()).unwrap(), f, "{u}");
        r.feed_all(t + 10, c.server_data(&gif_response(n)));
        r.feed(t + 90, c.client_ack());
    }
    assert_eq!((r.engine.stats().predictions_no_size, r.engine.stats().embeds_rewritten), (3, 0));
    // The next pageview: the 256 KB image would take several round trips of 80 ms, past the
    // goal (the model: no cell has 8 samples); the small one would not.
    r.feed(10_000, c.client_data(&get("/index.html", "")));
    r.feed_all(10_020, c.server_data(&html_response(PAGE)));
    let a = c.client_data(&get("/img/a.gif", referer));
    assert!(String::from_utf8(seq_payload(&forward(&mut r, 10_050, a).unwrap()).1).unwrap().starts_with("GET /ims/a.gif "));
    r.feed_all(10_060, c.server_data(&gif_response(16_384)));
    // b's request comes about 160 ms into the pageview: 300 bytes do not take it past 300 ms.
    let b = c.client_data(&get("/img/b.gif", referer));
    assert_eq!(forward(&mut r, 10_120, b.clone()).unwrap(), b);
    r.feed_all(10_130, c.server_data(&gif_response(300)));
    // c's comes at 350 ms: the pageview is past the goal already, and c is rewritten.
    let cc = c.client_data(&get("/img/c.gif", referer));
    assert!(String::from_utf8(seq_payload(&forward(&mut r, 10_310, cc).unwrap()).1).unwrap().starts_with("GET /ims/c.gif "));
    r.feed_all(10_320, c.server_data(&gif_response(300)));
    // A third pageview: a's size is still 256 KB (the 16 KB answer was the variant's, learnt
    // under /ims/a.gif), so a is rewritten again.
    r.feed(20_000, c.client_data(&get("/index.html", "")));
    r.feed_all(20_020, c.server_data(&html_response(PAGE)));
    let a = c.client_data(&get("/img/a.gif", referer));
    assert!(String::from_utf8(seq_payload(&forward(&mut r, 20_050, a).unwrap()).1).unwrap().starts_with("GET /ims/a.gif "));
    let s = r.engine.stats();
    assert_eq!((s.embeds_rewritten, s.predictions_model, s.predictions_measured, s.predictions_no_size), (3, 4, 0, 3));
}

#[test]
fn a_predicted_removal_blanks_the_references_whose_transfer_would_pass_the_goal() {
    let (mut r, mut c) = asking_for_a_page(adapt_run("IF IP.SRC == *.*.*.* THEN REMOVE EMBEDS IF PREDICTED RT > 300ms\n"));
    let referer = "Referer: http://shop/index.html\r\n";
    // The first pageview: no size known, nothing blanked; the answers teach the sizes.
    let resp = html_response(PAGE);
    let first = c.sseq;
    let sent: Vec<Vec<u8>> = c.server_data(&resp).into_iter().map(|f| forward(&mut r, 100, f).unwrap()).collect();
    assert_eq!(client_stream(&sent, first), resp);
    for (t, u, n) in [(200, "/img/a.gif", 262_144), (1500, "/img/b.gif", 300), (1700, "/img/c.gif", 300)] {
        r.feed(t, c.client_data(&get(u, referer)));
        r.feed_all(t + 10, c.server_data(&gif_response(n)));
        r.feed(t + 90, c.client_ack());
    }
    assert_eq!((r.engine.stats().predictions_no_size, r.engine.stats().embeds_removed), (3, 0));
    // The next pageview: a (256 KB, several 80 ms rounds) would pass 300 ms; b and c would not.
    r.feed(10_000, c.client_data(&get("/index.html", "")));
    let second = c.sseq;
    let sent: Vec<Vec<u8>> = c.server_data(&resp).into_iter().map(|f| forward(&mut r, 10_020, f).unwrap()).collect();
    let want = String::from_utf8(resp.clone()).unwrap().replace("src=\"/img/a.gif\"", "                ");
    assert_eq!(String::from_utf8(client_stream(&sent, second)).unwrap(), want);
    let s = r.engine.stats();
    assert_eq!((s.embeds_removed, s.predictions_model, s.predictions_no_size), (1, 3, 3));
}

const REMOVE_AFTER_1: &str = "IF IP.SRC == *.*.*.* THEN REMOVE EMBEDS AFTER 1\n";

#[test]
fn remove_embeds_blanks_the_chosen_references_in_every_copy_and_the_pageview_does_not_wait_for_them() {
    let (mut r, mut c) = asking_for_a_page(adapt_run(REMOVE_AFTER_1));
    let body_start = c.sseq;
    let resp = html_response(PAGE);
    let mut sent: Vec<Vec<u8>> = c.server_data_in(&resp, 90).into_iter().map(|f| forward(&mut r, 100, f).expect("forwarded")).collect();
    // The server resends it all, cut otherwise: blanked the same.
    c.sseq = body_start;
    sent.extend(c.server_data_in(&resp, 37).into_iter().map(|f| forward(&mut r, 400, f).expect("forwarded")));
    let got = client_stream(&sent, body_start);
    let want = String::from_utf8(resp.clone()).unwrap().replace("src='img/b.gif'", "               ").replace("SRC=/img/c.gif", "              ");
    assert_eq!(String::from_utf8(got).unwrap(), want);
    let s = r.engine.stats();
    assert_eq!((s.embeds_removed, s.embeds_kept_split), (2, 0));
    assert!(s.adapt_segments_edited >= 2);
    // The browser fetches only the image left; the pageview ends with it, not after a wait.
    r.feed(180, c.client_data(&get("/img/a.gif", "Referer: http://shop/index.html\r\n")));
    r.feed_all(185, c.server_data(&gif_response(500)));
    r.feed(265, c.client_ack());
    r.finish(20_000);
    assert_eq!(r.pv.len(), 1);
    assert_eq!(r.pv[0].objects, 1, "{:?}", r.pv[0].object_uris);
    assert!(r.pv[0].rt_s < 1.0, "{}", r.pv[0].rt_s);
    assert_eq!(r.engine.policy().unwrap().rule_counters[0].deferred, 0);
}

#[test]
fn a_blanked_reference_is_one_decision_and_one_act_of_its_pageview_which_ends_a_linger_after_the_rest() {
    let (mut r, mut c) = asking_for_a_page(adapt_run("IF IP.SRC == *.*.*.* THEN REMOVE EMBEDS AT 2\n"));
    for f in c.server_data(&html_response(PAGE)) {
        assert!(forward(&mut r, 100, f).is_some());
    }
    assert_eq!(r.engine.stats().embeds_removed, 1);
    let acted: Vec<(&str, &str, &str, &str, Option<&str>)> =
        r.decisions.iter().map(|d| (d.action, d.rule.as_str(), d.client.as_str(), d.server.as_str(), d.target.as_deref())).collect();
    assert_eq!(acted, [("REMOVE EMBEDS", "test.rlm:1:1", "10.5.0.7:40001", "10.9.0.1:80", Some("img/b.gif"))]);
    // The browser fetches the two images left; the pageview waits for nothing more and ends a
    // linger (1.5 s) after the last, not a quiet period (5 s).
    r.feed(180, c.client_data(&get("/img/a.gif", "Referer: http://shop/index.html\r\n")));
    r.feed_all(185, c.server_data(&gif_response(500)));
    r.feed(190, c.client_data(&get("/img/c.gif", "Referer: http://shop/index.html\r\n")));
    r.feed_all(200, c.server_data(&gif_response(300)));
    r.feed(280, c.client_ack());
    r.advance(2_000);
    assert_eq!(r.pv.len(), 1, "ended by its linger");
    let p = &r.pv[0];
    assert_eq!((p.objects, p.expected_objects), (2, 2), "{:?}", p.object_uris);
    assert_eq!(p.actions, Acts { embeds_blanked: 1, ..Acts::default() });
    assert_eq!(r.decisions.len(), 1);
}

#[test]
fn a_reference_cut_by_a_segment_boundary_after_its_attribute_began_is_kept_whole() {
    let (mut r, mut c) = asking_for_a_page(adapt_run("IF IP.SRC == *.*.*.* THEN REMOVE EMBEDS\n"));
    let body_start = c.sseq;
    let resp = html_response(PAGE);
    // Cut inside b's URL: its attribute began in the first segment, which has gone on.
    let cut = resp.windows(5).position(|w| w == b"b.gif").unwrap();
    let mut sent = Vec::new();
    for part in [&resp[..cut], &resp[cut..]] {
        sent.extend(c.server_data(part).into_iter().map(|f| forward(&mut r, 100, f).unwrap()));
    }
    let got = String::from_utf8(client_stream(&sent, body_start)).unwrap();
    let want = String::from_utf8(resp.clone()).unwrap().replace("src=\"/img/a.gif\"", "                ").replace("SRC=/img/c.gif", "              ");
    assert_eq!(got, want, "a and c blanked, b whole");
    assert_eq!((r.engine.stats().embeds_removed, r.engine.stats().embeds_kept_split), (2, 1));
}

#[test]
fn a_segment_past_a_hole_is_dropped_while_a_removal_is_under_way_and_its_resend_is_blanked() {
    let (mut r, mut c) = asking_for_a_page(adapt_run("IF IP.SRC == *.*.*.* THEN REMOVE EMBEDS\n"));
    let body_start = c.sseq;
    let resp = html_response(PAGE);
    let segs = c.server_data_in(&resp, 80);
    assert!(segs.len() >= 3);
    // The head's segment, then the last one (ahead of a hole), then the rest.
    let mut sent = vec![forward(&mut r, 100, segs[0].clone()).unwrap()];
    let last = segs.len() - 1;
    assert_eq!(forward(&mut r, 101, segs[last].clone()), None, "dropped past the hole");
    for s in &segs[1..last] {
        sent.push(forward(&mut r, 102, s.clone()).unwrap());
    }
    sent.push(forward(&mut r, 300, segs[last].clone()).expect("the resend goes on"));
    let got = String::from_utf8(client_stream(&sent, body_start)).unwrap();
    assert!(!got.contains("gif"), "{got}");
    assert_eq!(r.engine.stats().adapt_ooo_dropped, 1);
}

#[test]
fn a_hole_that_does_not_fill_stops_being_waited_for_after_32_drops() {
    let (mut r, mut c) = asking_for_a_page(adapt_run("IF IP.SRC == *.*.*.* THEN REMOVE EMBEDS\n"));
    let page: String = (0..60).map(|i| format!("<p>{i}</p><img src=\"/img/{i}.gif\">")).collect();
    let segs = c.server_data_in(&html_response(&page), 40);
    assert!(segs.len() > 40);
    // The head's segments, then a hole (a segment that went around rlm), then the rest.
    for f in &segs[..3] {
        assert!(forward(&mut r, 100, f.clone()).is_some());
    }
    let fates: Vec<bool> = segs[4..38].iter().map(|f| forward(&mut r, 101, f.clone()).is_some()).collect();
    assert!(fates[..32].iter().all(|sent| !sent), "the first 32 past the hole are dropped");
    assert!(fates[32..].iter().all(|sent| *sent), "then they go on");
    assert_eq!(r.engine.stats().adapt_ooo_dropped, 32);
}

#[test]
fn an_encoded_container_is_left_alone_and_counted() {
    let (mut r, mut c) = asking_for_a_page(adapt_run("IF IP.SRC == *.*.*.* THEN REMOVE EMBEDS\n"));
    let resp = format!("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\n\r\n{PAGE}", PAGE.len());
    for f in c.server_data(resp.as_bytes()) {
        assert_eq!(forward(&mut r, 100, f.clone()), Some(f));
    }
    assert_eq!((r.engine.stats().adapt_skipped_encoded, r.engine.stats().embeds_removed), (1, 0), "{:?}", r.engine.stats());
}

#[test]
fn chunk_framing_inside_an_attribute_is_never_blanked() {
    let (mut r, mut c) = asking_for_a_page(adapt_run("IF IP.SRC == *.*.*.* THEN REMOVE EMBEDS AT 2\n"));
    let body_start = c.sseq;
    // Chunks cut inside b's attribute, both in one segment.
    let cut = PAGE.find("img/b").unwrap();
    let (a, b) = PAGE.split_at(cut);
    let resp = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
        a.len(),
        b.len()
    );
    let sent: Vec<Vec<u8>> = c.server_data(resp.as_bytes()).into_iter().map(|f| forward(&mut r, 100, f).unwrap()).collect();
    let got = String::from_utf8(client_stream(&sent, body_start)).unwrap();
    let want = resp.replace("src='", "     ").replace(&format!("\r\n{:x}\r\nimg/b.gif'", b.len()), &format!("\r\n{:x}\r\n          ", b.len()));
    assert_eq!(got, want, "{:?}", r.engine.stats());
    assert_eq!(r.engine.stats().embeds_removed, 1);
}

#[test]
fn without_a_driver_that_forwards_rewritten_frames_removal_is_only_counted() {
    let mut passive = Run::new();
    passive.engine.set_rules(Some(rules("IF IP.SRC == *.*.*.* THEN REMOVE EMBEDS\n")));
    let (mut r, mut c) = asking_for_a_page(passive);
    for f in c.server_data(&html_response(PAGE)) {
        assert_eq!(forward(&mut r, 100, f.clone()), Some(f));
    }
    assert_eq!(r.engine.stats().embeds_removed, 0);
    assert_eq!(r.engine.policy().unwrap().rule_counters[0].deferred, 1);
}

#[test]
fn the_fast_path_queues_the_servers_segments_while_a_removal_is_carried_out() {
    use rlm_core::FastpathUpdate;
    let queue =
        |u: &[FastpathUpdate]| u.iter().filter_map(|u| if let FastpathUpdate::QueueResponses(on) = u { Some(*on) } else { None }).collect::<Vec<_>>();
    let mut r = adapt_run(REMOVE_AFTER_1);
    r.engine.enable_fastpath();
    assert_eq!(queue(&fastpath_updates(&mut r)), [true]);
    r.engine.set_rules(Some(rules("IF IP.SRC == *.*.*.* THEN DROP SYN\n")));
    assert_eq!(queue(&fastpath_updates(&mut r)), [false]);
    r.engine.set_rules(Some(rules("IF IP.SRC == 10.*.*.* THEN DROP SYN\n")));
    assert_eq!(queue(&fastpath_updates(&mut r)), [] as [bool; 0], "no change, no update");
    // A driver that does not forward rewritten frames never asks for them.
    let mut passive = Run::new();
    passive.engine.set_rules(Some(rules(REMOVE_AFTER_1)));
    passive.engine.enable_fastpath();
    assert_eq!(queue(&fastpath_updates(&mut passive)), [] as [bool; 0]);
}

mod removal_properties {
    //! REMOVE EMBEDS whatever the server does: any segmentation, retransmissions cut otherwise,
    //! neighbours swapped, chunked or sized bodies, pipelined responses. Each image's fetching
    //! attributes reach the client either whole or all blanks, blanks only where the rule takes
    //! it, every other byte as the server sent it, every copy alike, every checksum good.
    use super::*;
    use proptest::prelude::*;

    /// One piece of a generated page.
    #[derive(Clone, Debug)]
    enum Frag {
        Text(String),
        /// An image: quote style (0 double, 1 single, 2 none), upper case, an attribute before
        /// `src`, a `srcset` after it.
        Img {
            quote: u8,
            upper: bool,
            before: bool,
            srcset: bool,
        },
        /// Markup that is no image reference: `<img alt>`, a comment or a script holding one.
        Decoy(u8),
    }

    fn frag() -> impl Strategy<Value = Frag> {
        prop_oneof![
            "[a-z <>/=\"']{0,30}".prop_map(|t| Frag::Text(t.replace('<', "&lt;"))),
            (0u8..3, any::<bool>(), any::<bool>(), any::<bool>()).prop_map(|(quote, upper, before, srcset)| Frag::Img {
                quote,
                upper,
                before,
                srcset
            }),
            (0u8..3).prop_map(Frag::Decoy),
        ]
    }

    /// A counted image of a page: its URL and its fetching attributes' spans (body offsets).
    type Image = (String, Vec<(usize, usize)>);

    /// A page, and its counted images.
    fn render(frags: &[Frag], page: usize) -> (String, Vec<Image>) {
        let mut html = String::from("<html><body>");
        let mut imgs = Vec::new();
        for f in frags {
            match f {
                Frag::Text(t) => html.push_str(t),
                Frag::Img { quote, upper, before, srcset } => {
                    let url = format!("/img/p{page}-{}.gif", imgs.len() + 1);
                    let q = ["\"", "'", ""][*quote as usize];
                    html.push_str(if *upper { "<IMG " } else { "<img " });
                    if *before {
                        html.push_str("alt=\"x\" ");
                    }
                    let mut spans = Vec::new();
                    let at = html.len();
                    html.push_str(&format!("{}={q}{url}{q}", if *upper { "SRC" } else { "src" }));
                    spans.push((at, html.len()));
                    if *srcset {
                        html.push(' ');
                        let at = html.len();
                        html.push_str(&format!("srcset=\"{url} 1x, {url}?2 2x\""));
                        spans.push((at, html.len()));
                    }
                    html.push_str(" width=1>");
                    imgs.push((url, spans));
                }
                Frag::Decoy(0) => html.push_str("<img alt=\"none\">"),
                Frag::Decoy(1) => html.push_str("<!-- <img src=\"/no.gif\"> -->"),
                Frag::Decoy(_) => html.push_str("<script>var s = \"<img src='/no.gif'>\";</script>"),
            }
        }
        html.push_str("</body></html>");
        (html, imgs)
    }

    pub(super) fn selector() -> impl Strategy<Value = (String, rules::EmbedSelect)> {
        use rules::EmbedSelect;
        prop_oneof![
            Just(("".to_string(), EmbedSelect::All)),
            (0u32..4).prop_map(|n| (format!(" AFTER {n}"), EmbedSelect::After(n))),
            (1u32..5).prop_map(|n| (format!(" AT {n}"), EmbedSelect::At(vec![n]))),
            Just((" MATCHING \"*-1.gif\"".to_string(), EmbedSelect::Matching(rules::Glob::new("*-1.gif")))),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

        #[test]
        fn every_copy_of_every_byte_reaches_the_client_as_the_rule_says(
            pages in prop::collection::vec((prop::collection::vec(frag(), 0..14), any::<bool>()), 1..4),
            (rule_sel, select) in selector(),
            cuts in prop::collection::vec(1usize..400, 1..40),
            resends in prop::collection::vec((any::<usize>(), 1usize..300), 0..6),
            swaps in prop::collection::vec(any::<usize>(), 0..3),
        ) {
            let mut r = adapt_run(&format!("IF IP.SRC == *.*.*.* THEN REMOVE EMBEDS{rule_sel}\n"));
            let mut c = TcpConv::new("10.5.0.7:40001", "10.9.0.1:80");
            handshake(&mut r, &mut c, 0);
            // The client pipelines every request; the server answers each page, with an image
            // between pages.
            let mut requests = Vec::new();
            let (mut stream, mut expect_imgs) = (Vec::new(), Vec::new());
            for (i, (frags, chunked)) in pages.iter().enumerate() {
                requests.extend(get(&format!("/p{i}.html"), ""));
                let (html, imgs) = render(frags, i);
                let head = if *chunked {
                    "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nTransfer-Encoding: chunked\r\n\r\n".to_string()
                } else {
                    format!("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\r\n", html.len())
                };
                stream.extend(head.as_bytes());
                let base = stream.len();
                if *chunked {
                    // Chunks cut where the segment cuts are, so that framing lands inside tags.
                    let (mut at, mut k) = (0, 0);
                    let mut wire_of = vec![0usize; html.len() + 1];
                    while at < html.len() {
                        let n = cuts[k % cuts.len()].min(html.len() - at);
                        k += 1;
                        let hdr = format!("{n:x}\r\n");
                        stream.extend(hdr.as_bytes());
                        for j in 0..n {
                            wire_of[at + j] = stream.len() + j;
                        }
                        stream.extend(&html.as_bytes()[at..at + n]);
                        stream.extend(b"\r\n");
                        at += n;
                    }
                    stream.extend(b"0\r\n\r\n");
                    let spans: Vec<(String, u32, Vec<Vec<usize>>)> = imgs
                        .into_iter()
                        .enumerate()
                        .map(|(k, (u, sp))| (u, k as u32 + 1, sp.iter().map(|&(a, b)| (a..b).map(|o| wire_of[o]).collect()).collect()))
                        .collect();
                    expect_imgs.extend(spans);
                } else {
                    stream.extend(html.as_bytes());
                    let spans: Vec<(String, u32, Vec<Vec<usize>>)> = imgs
                        .into_iter()
                        .enumerate()
                        .map(|(k, (u, sp))| (u, k as u32 + 1, sp.iter().map(|&(a, b)| (a..b).map(|o| base + o).collect()).collect()))
                        .collect();
                    expect_imgs.extend(spans);
                }
                requests.extend(get(&format!("/i{i}.gif"), ""));
                stream.extend(gif_response(300 + i * 7));
            }
            r.feed(80, c.client_data(&requests));
            let isn = c.sseq;
            // Segments: the stream cut at the given sizes, some neighbours swapped.
            let mut segs: Vec<(usize, usize)> = Vec::new();
            let (mut at, mut k) = (0, 0);
            while at < stream.len() {
                let n = cuts[(k * 7 + 3) % cuts.len()].min(stream.len() - at);
                segs.push((at, n));
                at += n;
                k += 1;
            }
            for s in &swaps {
                if segs.len() > 2 {
                    let i = 1 + s % (segs.len() - 2);
                    segs.swap(i, i + 1);
                }
            }
            for (off, n) in &resends {
                let a = off % stream.len();
                segs.push((a, (*n).min(stream.len() - a)));
            }
            let mut sent = Vec::new();
            let mut t = 100;
            let send = |r: &mut Run, c: &mut TcpConv, t: u64, (a, n): (usize, usize)| {
                c.sseq = isn.wrapping_add(a as u32);
                let f = c.server_data_in(&stream[a..a + n], n).pop().unwrap();
                forward(r, t, f)
            };
            let mut delivered = vec![false; stream.len()];
            // First copies that came in order: every byte before them sent already, none after.
            let (mut in_order, mut covered) = (Vec::new(), vec![false; stream.len()]);
            for &s in &segs {
                t += 1;
                if covered[..s.0].iter().all(|c| *c) && !covered[s.0..].iter().any(|c| *c) {
                    in_order.push(s);
                }
                covered[s.0..s.0 + s.1].iter_mut().for_each(|c| *c = true);
                if let Some(f) = send(&mut r, &mut c, t, s) {
                    delivered[s.0..s.0 + s.1].iter_mut().for_each(|d| *d = true);
                    sent.push(f);
                }
            }
            // What was dropped (past a hole) the server resends until it is all through.
            for _ in 0..3 {
                let mut i = 0;
                while i < stream.len() {
                    if delivered[i] {
                        i += 1;
                        continue;
                    }
                    let j = (i..stream.len()).find(|&j| delivered[j]).unwrap_or(stream.len());
                    t += 1;
                    if let Some(f) = send(&mut r, &mut c, t, (i, j - i)) {
                        delivered[i..j].iter_mut().for_each(|d| *d = true);
                        sent.push(f);
                    }
                    i = j;
                }
            }
            prop_assert!(delivered.iter().all(|d| *d), "everything reached the client");
            let got = client_stream(&sent, isn);
            prop_assert_eq!(got.len(), stream.len());
            // Each image: whole or all blanks; blanks only where the rule takes it.
            let mut may_differ = vec![false; stream.len()];
            let (mut blanked, mut taken) = (0u64, 0u64);
            // Positions count within each container.
            for (i, (url, position, spans)) in expect_imgs.iter().enumerate() {
                let takes = rlm_core::adapt::remove::selects(&select, *position, url);
                let all: Vec<usize> = spans.iter().flatten().copied().collect();
                let is_blank = all.iter().all(|&o| got[o] == b' ');
                let is_whole = all.iter().all(|&o| got[o] == stream[o]);
                prop_assert!(is_blank || is_whole, "image {} half blanked", i + 1);
                // A tag that came whole in one segment, in order, is blanked if the rule takes it.
                let (lo, hi) = (*all.iter().min().unwrap(), *all.iter().max().unwrap());
                let tag_from = stream[..lo].iter().rposition(|&b| b == b'<').unwrap();
                let tag_to = hi + stream[hi..].iter().position(|&b| b == b'>').unwrap();
                if takes && in_order.iter().any(|&(a, n)| a <= tag_from && tag_to < a + n) {
                    prop_assert!(is_blank, "image {} came whole in one segment in order and was not blanked: {:?}", i + 1, r.engine.stats());
                }
                if is_blank {
                    prop_assert!(takes, "image {} blanked, not taken by the rule", i + 1);
                    blanked += 1;
                }
                taken += takes as u64;
                all.iter().for_each(|&o| may_differ[o] = true);
            }
            for (o, (a, b)) in stream.iter().zip(&got).enumerate() {
                prop_assert!(a == b || may_differ[o], "byte {o} changed outside an image's attributes");
            }
            let s = r.engine.stats();
            prop_assert_eq!(s.embeds_removed, blanked);
            prop_assert_eq!(s.embeds_removed + s.embeds_kept_split + s.embeds_kept_unmapped + s.adapt_record_full, taken);
            prop_assert_eq!(s.adapt_patch_failed, 0);
        }
    }
}

/// REWRITE EMBEDS under any cutting of a client's pipelined requests, with resends: every copy of
/// every byte reaches the server alike, each request the rule takes has its target rewritten
/// when the whole target came in the segment that completed its head (else it goes as it was,
/// counted), and nothing else changes.
mod rewrite_properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

        #[test]
        fn every_copy_of_every_request_byte_reaches_the_server_as_the_rule_says(
            n in 1usize..9,
            (rule_sel, select) in super::removal_properties::selector(),
            cuts in prop::collection::vec(1usize..120, 1..30),
            resends in prop::collection::vec((any::<usize>(), 1usize..200), 0..6),
        ) {
            let rules_text = format!("IF IP.SRC == *.*.*.* THEN REWRITE EMBEDS{rule_sel} USING \"ims.map\"\n");
            let (mut r, mut c) = asking_for_a_page(rewrite_run(&rules_text, "/img/* /ims/*\n", "props"));
            let page: String = (1..=n).map(|k| format!("<p>{k}</p><img src=\"/img/k-{k}.gif\">")).collect();
            r.feed_all(100, c.server_data(&html_response(&format!("<html><body>{page}</body></html>"))));
            // The client asks for every image in one pipelined stream.
            let (mut stream, mut reqs) = (Vec::new(), Vec::new());
            for k in 1..=n {
                let start = stream.len();
                let req = get(&format!("/img/k-{k}.gif"), "Referer: http://shop/index.html\r\n");
                // Target [start + 4, start + 4 + len), head's last byte at start + req.len() - 1.
                reqs.push((k as u32, start + 4, format!("/img/k-{k}.gif").len(), start + req.len() - 1));
                stream.extend(req);
            }
            let isn = c.cseq;
            let mut segs: Vec<(usize, usize)> = Vec::new();
            let (mut at, mut i) = (0, 0);
            while at < stream.len() {
                let len = cuts[i % cuts.len()].min(stream.len() - at);
                segs.push((at, len));
                at += len;
                i += 1;
            }
            // What the engine should do: a request taken is rewritten iff its whole target is in
            // the segment that holds its head's last byte.
            let mut want = stream.clone();
            let (mut rewritten, mut split) = (0u64, 0u64);
            for &(k, t0, tlen, end) in &reqs {
                if !rlm_core::adapt::remove::selects(&select, k, &format!("/img/k-{k}.gif")) {
                    continue;
                }
                let &(s0, slen) = segs.iter().find(|(a, l)| *a <= end && end < a + l).unwrap();
                if t0 >= s0 && t0 + tlen <= s0 + slen {
                    want[t0..t0 + 4].copy_from_slice(b"/ims");
                    rewritten += 1;
                } else {
                    split += 1;
                }
            }
            for (off, len) in &resends {
                let a = off % stream.len();
                segs.push((a, (*len).min(stream.len() - a)));
            }
            let mut sent = Vec::new();
            for (j, &(a, len)) in segs.iter().enumerate() {
                let mut cc = c.clone();
                cc.cseq = isn.wrapping_add(a as u32);
                sent.push(forward(&mut r, 200 + j as u64, cc.client_data(&stream[a..a + len])).expect("forwarded"));
            }
            let got = client_stream(&sent, isn);
            prop_assert_eq!(String::from_utf8(got).unwrap(), String::from_utf8(want).unwrap());
            let s = r.engine.stats();
            prop_assert_eq!((s.embeds_rewritten, s.rewrites_split, s.rewrites_unplaced), (rewritten, split, 0));
        }
    }
}

/// The SRPT classifier's inputs: each response's start and end in the server's sequence space,
/// published when its head is parsed, and the flow's end at the close.
#[test]
fn srpt_publishes_each_response_size_in_sequence_space_and_the_flow_end() {
    use rlm_core::FastpathUpdate;
    let sizes = |r: &mut Run| -> Vec<FastpathUpdate> {
        fastpath_updates(r).into_iter().filter(|u| matches!(u, FastpathUpdate::ResponseSize { .. } | FastpathUpdate::FlowEnd { .. })).collect()
    };
    let mut r = Run::new();
    r.engine.enable_fastpath();
    r.engine.enable_srpt();
    let mut c = TcpConv::new("10.4.0.2:40000", "10.9.0.1:80");
    r.feed(0, c.syn());
    r.feed(1, c.synack());
    r.feed(2, c.ack());
    let (client, server) = ("10.4.0.2:40000".parse().unwrap(), "10.9.0.1:80".parse().unwrap());
    // Three pipelined requests; the responses: a 5,000-byte body, a chunked one, a 304.
    r.feed(3, c.client_data(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\nGET /c HTTP/1.1\r\nHost: x\r\n\r\n"));
    let head1 = b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n";
    let start1 = c.sseq;
    let mut body = head1.to_vec();
    body.extend_from_slice(&[b'x'; 5000]);
    r.feed_all(4, c.server_data(&body));
    let end1 = start1 + (head1.len() + 5000) as u32;
    assert_eq!(sizes(&mut r), vec![FastpathUpdate::ResponseSize { client, server, start: start1, end: Some(end1) }]);
    let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
    // The chunked response and the 304 in one segment: the 304 completes in the segment that
    // carries its head, and is published all the same.
    let not_modified = b"HTTP/1.1 304 Not Modified\r\n\r\n";
    let start3 = end1 + chunked.len() as u32;
    r.feed_all(5, c.server_data(&[&chunked[..], &not_modified[..]].concat()));
    assert_eq!(
        sizes(&mut r),
        vec![
            FastpathUpdate::ResponseSize { client, server, start: end1, end: None },
            FastpathUpdate::ResponseSize { client, server, start: start3, end: Some(start3 + not_modified.len() as u32) },
        ]
    );
    assert_eq!(r.engine.stats().srpt_sizes_published, 3);
    r.feed(6, c.client_fin());
    r.feed(7, c.server_fin());
    r.feed(8, c.client_ack());
    assert_eq!(sizes(&mut r), vec![FastpathUpdate::FlowEnd { client, server }]);

    // Without SRPT, nothing of the kind.
    let mut off = Run::new();
    off.engine.enable_fastpath();
    let mut c = TcpConv::new("10.4.0.2:40001", "10.9.0.1:80");
    off.feed(0, c.syn());
    off.feed(1, c.synack());
    off.feed(2, c.ack());
    off.feed(3, c.client_data(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n"));
    off.feed_all(4, c.server_data(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"));
    off.feed(5, c.server_fin());
    assert!(sizes(&mut off).is_empty());
}

/// The kernel's part of body cuts, as `observe` does it: a server segment (IPv4, no IP or TCP
/// options beyond what its header says) lying wholly before a published `until` is reported cut
/// to its headers; the entry goes once a segment reaches it.
struct BodyCutKernel {
    until: std::collections::HashMap<(std::net::SocketAddrV4, std::net::SocketAddrV4), u32>,
    cut: usize,
    /// As the kernel does: a cut segment is not reported at all unless it crosses a MiB of the
    /// sequence space or ends the range.
    silent: bool,
    unreported: usize,
}

impl BodyCutKernel {
    fn take(&mut self, r: &mut Run) {
        for u in fastpath_updates(r) {
            if let rlm_core::FastpathUpdate::BodyUnread { client, server, until } = u {
                self.until.insert((client, server), until);
            }
        }
    }

    /// Feed a server frame as the kernel would report it.
    fn feed(&mut self, r: &mut Run, ms: u64, frame: Vec<u8>, client: std::net::SocketAddrV4, server: std::net::SocketAddrV4) {
        let ihl = usize::from(frame[14] & 0x0f) * 4;
        let tcp = 14 + ihl;
        let seq = u32::from_be_bytes(frame[tcp + 4..tcp + 8].try_into().unwrap());
        let headers = tcp + usize::from(frame[tcp + 12] >> 4) * 4;
        let end = seq.wrapping_add((frame.len() - headers) as u32);
        match self.until.get(&(client, server)).copied() {
            Some(until) if frame.len() > headers && (end.wrapping_sub(until) as i32) <= 0 => {
                if end == until {
                    self.until.remove(&(client, server));
                }
                self.cut += 1;
                if self.silent && end != until && end >> 20 == seq >> 20 {
                    self.unreported += 1;
                    return;
                }
                feed_cut(r, ms, &frame, headers);
            }
            _ => r.feed(ms, frame),
        }
        self.take(r);
    }
}

/// A page whose container (HTML, read by the embed scanner) names an image of 200,000 bytes
/// and a chunked script, fetched over a second connection; `cuts`: with body cuts on, the
/// server's segments reported as `BodyCutKernel` does.
fn page_with_bodies(cuts: bool, silent: bool) -> (Run, BodyCutKernel) {
    let mut r = Run::new();
    r.engine.enable_fastpath();
    if cuts {
        r.engine.enable_body_cuts();
    }
    let mut k = BodyCutKernel { until: Default::default(), cut: 0, silent, unreported: 0 };
    let (client1, client2, server) = ("10.4.0.11:40001".parse().unwrap(), "10.4.0.11:40002".parse().unwrap(), "10.9.0.1:80".parse().unwrap());
    let mut c1 = TcpConv::new("10.4.0.11:40001", "10.9.0.1:80");
    handshake(&mut r, &mut c1, 0);
    r.feed(80, c1.client_data(&get("/index.html", "")));
    let body = format!("<html><body>{}<img src=\"/big.gif\"><script src=\"/app.js\"></script></body></html>", "<p>filler</p>".repeat(400));
    for f in c1.server_data(&html_response(&body)) {
        k.feed(&mut r, 100, f, client1, server);
    }
    let mut c2 = TcpConv::new("10.4.0.11:40002", "10.9.0.1:80");
    handshake(&mut r, &mut c2, 200);
    r.feed(300, c2.client_data(&get("/big.gif", "Referer: http://shop/index.html\r\n")));
    let mut t = 320;
    for f in c2.server_data(&gif_response(200_000)) {
        k.feed(&mut r, t, f, client2, server);
        t += 1;
    }
    r.feed(t + 40, c2.client_ack());
    r.feed(t + 50, c1.client_data(&get("/app.js", "Referer: http://shop/index.html\r\n")));
    let js = b"HTTP/1.1 200 OK\r\nContent-Type: application/javascript\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
    for f in c1.server_data(js) {
        k.feed(&mut r, t + 60, f, client1, server);
    }
    r.finish(10_000);
    (r, k)
}

/// Body cuts: the engine tells the kernel where an image's body ends (the rest of a body of a
/// known length that nothing reads), not a container's (scanned) nor a chunked one (its framing
/// is read), and the segments before that end, reported cut to their headers, give the same
/// transactions and pageview as whole ones.
#[test]
fn bodies_nothing_reads_are_cut_to_their_headers_and_measured_the_same() {
    let (whole, none) = page_with_bodies(false, false);
    let (cut, k) = page_with_bodies(true, false);
    assert_eq!(none.cut, 0);
    assert_eq!(cut.engine.stats().bodies_cut, 1, "the image only");
    // 200,000 bytes in 1,448-byte segments: all but the one with the head cut.
    assert!(k.cut >= 137, "{} segments cut", k.cut);
    assert!(k.until.is_empty(), "the entry stays after the body's end");
    assert!(cut.engine.stats().absent_bytes >= 198_000, "{}", cut.engine.stats().absent_bytes);
    assert_eq!(cut.tx.len(), 3);
    for (w, c) in whole.tx.iter().zip(&cut.tx) {
        assert_eq!(json(w), json(c), "a transaction differs");
    }
    assert_eq!((whole.pv.len(), cut.pv.len()), (1, 1));
    assert_eq!(json(&whole.pv[0]), json(&cut.pv[0]), "the pageview differs");
    assert_eq!(cut.pv[0].objects, 2);

    // The kernel leaving the body's segments unreported but one a MiB and the last: the server's
    // stream takes the holes as absent bytes, and the records are the same again.
    let (silent, k) = page_with_bodies(true, true);
    assert!(k.unreported >= 130, "{} segments unreported", k.unreported);
    assert_eq!(silent.engine.stats().gap_bytes, 0);
    let st = silent.engine.stats();
    assert_eq!(st.absent_bytes + st.unreported_bytes, cut.engine.stats().absent_bytes, "the body's bytes, absent or unreported");
    assert!(st.unreported_bytes > 180_000, "{}", st.unreported_bytes);
    assert_eq!(silent.tx.len(), 3);
    for (w, c) in whole.tx.iter().zip(&silent.tx) {
        assert_eq!(json(w), json(c), "a transaction differs");
    }
    assert_eq!(json(&whole.pv[0]), json(&silent.pv[0]), "the pageview differs");
}

/// The server's stream is taken as unread only inside an unread body: once the body is over, a
/// segment that comes past a hole (the next head lost or late upstream) waits for the hole as
/// before, and the next response is read whole when the head comes.
#[test]
fn after_an_unread_body_a_hole_waits_for_its_bytes() {
    let mut r = Run::new();
    r.engine.enable_fastpath();
    r.engine.enable_body_cuts();
    let mut c = TcpConv::new("10.4.0.12:40001", "10.9.0.1:80");
    handshake(&mut r, &mut c, 0);
    r.feed(80, c.client_data(&get("/a.gif", "")));
    r.feed_all(100, c.server_data(&gif_response(3000)));
    assert_eq!(r.engine.stats().bodies_cut, 1, "the first body was unread");
    r.feed(150, c.client_data(&get("/b.gif", "")));
    // The second response in three segments, its head's coming last.
    let second = c.server_data_in(&gif_response(3000), 1200);
    assert!(second.len() >= 3);
    for (t, f) in second.iter().enumerate().skip(1) {
        r.feed(200 + t as u64, f.clone());
    }
    r.feed(210, second[0].clone());
    r.finish(10_000);
    assert_eq!(r.engine.stats().unreported_bytes, 0, "a hole outside an unread body taken as unreported");
    assert_eq!(r.tx.len(), 2);
    let b = &r.tx[1];
    assert_eq!((b.uri.as_deref(), b.response_body_len), (Some("/b.gif"), 3000));
    assert!(b.anomalies.is_empty(), "{:?}", b.anomalies);
}

/// A body whose segments all came in before the engine's updates were taken has passed the
/// kernel whole: its range is withdrawn (written then, it would outlive the body and keep a
/// later retransmission of its bytes from the engine). One taken between its head and the
/// rest is published, for the kernel to cut the rest, and ended when the body is over (the
/// driver may have written it after the body's segments passed).
#[test]
fn a_body_over_before_its_range_was_taken_leaves_no_range_behind() {
    let unread = |u: &Vec<rlm_core::FastpathUpdate>| u.iter().filter(|u| matches!(u, rlm_core::FastpathUpdate::BodyUnread { .. })).count();
    let over = |u: &Vec<rlm_core::FastpathUpdate>| u.iter().filter(|u| matches!(u, rlm_core::FastpathUpdate::BodyOver { .. })).count();
    let mut r = Run::new();
    r.engine.enable_fastpath();
    r.engine.enable_body_cuts();
    let mut c = TcpConv::new("10.4.0.13:40001", "10.9.0.1:80");
    handshake(&mut r, &mut c, 0);
    r.feed(80, c.client_data(&get("/a.gif", "")));
    r.feed_all(100, c.server_data(&gif_response(3000)));
    let u = fastpath_updates(&mut r);
    assert_eq!((unread(&u), over(&u)), (0, 0), "withdrawn");
    r.feed(150, c.client_data(&get("/b.gif", "")));
    let segs = c.server_data(&gif_response(3000));
    r.feed(200, segs[0].clone());
    let u = fastpath_updates(&mut r);
    let Some(&rlm_core::FastpathUpdate::BodyUnread { until, .. }) = u.iter().find(|u| matches!(u, rlm_core::FastpathUpdate::BodyUnread { .. }))
    else {
        panic!("published: {u:?}")
    };
    r.feed_all(201, segs[1..].to_vec());
    let u = fastpath_updates(&mut r);
    assert_eq!(unread(&u), 0);
    assert!(
        u.iter().any(|x| *x
            == rlm_core::FastpathUpdate::BodyOver { client: "10.4.0.13:40001".parse().unwrap(), server: "10.9.0.1:80".parse().unwrap(), until }),
        "{u:?}"
    );
    assert_eq!(r.engine.stats().bodies_cut, 2);
    assert_eq!(r.engine.table_sizes().body_cuts, 0);
    // A body cut short by the client's RST (the kernel ends a range on the server's FIN or RST
    // only): a range taken is ended, one still queued withdrawn, and the cut forgotten.
    for (port, taken) in [(40002, true), (40003, false)] {
        let mut c = TcpConv::new(&format!("10.4.0.13:{port}"), "10.9.0.1:80");
        handshake(&mut r, &mut c, 1_000);
        r.feed(1_080, c.client_data(&get("/c.gif", "")));
        let segs = c.server_data(&gif_response(3000));
        r.feed(1_100, segs[0].clone());
        assert_eq!(r.engine.table_sizes().body_cuts, 1);
        if taken {
            assert_eq!(unread(&fastpath_updates(&mut r)), 1);
        }
        r.feed(1_101, c.forged(false, 0, "R"));
        r.advance(1_200);
        let u = fastpath_updates(&mut r);
        assert_eq!((unread(&u), over(&u)), (0, usize::from(taken)), "taken {taken}: {u:?}");
        assert_eq!(r.engine.table_sizes().body_cuts, 0);
    }
}

/// How the fast path reports a frame: its first `snap` bytes, and its length on the wire.
fn feed_cut(r: &mut Run, ms: u64, frame: &[u8], snap: usize) {
    r.advance(ms);
    r.verdict = Some(r.engine.handle_cut(at(ms), Port::Unknown, LinkType::Ethernet, &frame[..snap.min(frame.len())], frame.len()));
    r.drain();
}

/// A page (its container names two images) and a 200,000-byte object on a second connection,
/// the server's data in 64 KB super-frames (GSO/GRO); `snap`: what rlm gets of each (None: all).
fn super_frame_page(snap: Option<usize>) -> Run {
    let mut r = Run::new();
    let mut c1 = TcpConv::new("10.4.0.9:40001", "10.9.0.1:80");
    handshake(&mut r, &mut c1, 0);
    r.feed(80, c1.client_data(&get("/index.html", "")));
    let body = format!("<html><body>{}<img src=\"/img/a.gif\"><img src=\"/big.bin\"></body></html>", "<p>filler</p>".repeat(400));
    let mut t = 100;
    for f in c1.server_data_in(&html_response(&body), 65_000) {
        match snap {
            Some(s) => feed_cut(&mut r, t, &f, s),
            None => r.feed(t, f),
        }
        t += 5;
    }
    r.feed(200, c1.client_data(&get("/img/a.gif", "Referer: http://shop/index.html\r\n")));
    r.feed_all(220, c1.server_data(&gif_response(300)));
    let mut c2 = TcpConv::new("10.4.0.9:40002", "10.9.0.1:80");
    handshake(&mut r, &mut c2, 200);
    r.feed(300, c2.client_data(&get("/big.bin", "Referer: http://shop/index.html\r\n")));
    let mut t = 320;
    for f in c2.server_data_in(&gif_response(200_000), 65_000) {
        match snap {
            Some(s) => feed_cut(&mut r, t, &f, s),
            None => r.feed(t, f),
        }
        t += 30;
    }
    r.feed(t + 40, c2.client_ack());
    r.finish(10_000);
    r
}

/// Frames cut at 2 KiB (the fast path's copy of a GSO/GRO super-frame) are measured as the
/// whole frames are: each payload counted by its length on the wire, at its time; nothing is
/// counted truncated or lost, and the pageview is the same.
#[test]
fn super_frames_cut_at_2k_are_measured_as_whole_ones() {
    let whole = super_frame_page(None);
    let cut = super_frame_page(Some(2048));
    let st = cut.engine.stats();
    assert_eq!(st.malformed.get("truncated").copied().unwrap_or(0), 0);
    assert_eq!(st.gap_bytes, 0);
    assert!(st.cut_frames >= 5, "{} cut frames", st.cut_frames);
    assert!(st.absent_bytes > 190_000, "{} bytes absent", st.absent_bytes);
    assert_eq!(whole.engine.stats().cut_frames, 0);
    assert_eq!(cut.tx.len(), 3);
    for (w, c) in whole.tx.iter().zip(&cut.tx) {
        assert_eq!(json(w), json(c), "a transaction differs");
    }
    let big = cut.tx.iter().find(|t| t.uri.as_deref() == Some("/big.bin")).expect("the big object");
    assert_eq!(big.response_body_len, 200_000);
    assert!(big.anomalies.is_empty(), "{:?}", big.anomalies);
    assert_eq!((whole.pv.len(), cut.pv.len()), (1, 1));
    // The same pageview, but for the container's references: they lie past its first 2 KiB,
    // unseen, so none is expected (the list is not trusted, and the objects join by Referer).
    let mut seen = cut.pv[0].clone();
    assert_eq!((seen.expected_objects, whole.pv[0].expected_objects), (0, 2));
    seen.expected_objects = 2;
    assert_eq!(json(&whole.pv[0]), json(&seen), "the pageview differs");
    assert_eq!(cut.pv[0].objects, 2);
}

/// References in a container's unseen bytes are not listed: its list is no longer trusted, and
/// an object it does not name, asked for without a Referer, still joins the pageview.
#[test]
fn a_container_cut_short_is_no_longer_trusted_to_list_its_objects() {
    let mut r = Run::new();
    let mut c1 = TcpConv::new("10.4.0.10:40001", "10.9.0.1:80");
    handshake(&mut r, &mut c1, 0);
    r.feed(80, c1.client_data(&get("/index.html", "Accept: text/html\r\n")));
    // Two super-frames: the head is read before the body ends (the list is trusted then).
    let body = format!("<html><body><img src=\"/img/a.gif\">{}<img src=\"/img/late.gif\"></body></html>", "<p>filler</p>".repeat(6000));
    for f in c1.server_data_in(&html_response(&body), 65_000) {
        feed_cut(&mut r, 100, &f, 1024);
    }
    r.feed(180, c1.client_data(&get("/img/a.gif", "Referer: http://shop/index.html\r\n")));
    r.feed_all(190, c1.server_data(&gif_response(300)));
    // No Referer (a privacy setting): only a list not trusted lets it join.
    r.feed(200, c1.client_data(&get("/img/late.gif", "Sec-Fetch-Dest: image\r\n")));
    r.feed_all(210, c1.server_data(&gif_response(300)));
    r.feed(250, c1.client_ack());
    r.finish(10_000);
    assert_eq!(r.pv.len(), 1, "{:?}", r.pv.iter().map(|p| (&p.container, p.objects)).collect::<Vec<_>>());
    assert_eq!(r.pv[0].objects, 2, "late.gif, named in the unseen bytes, joined its page");
    assert_eq!(r.pv[0].expected_objects, 1, "only a.gif was seen in the container");
}

/// A record as JSON, to compare records whole.
fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap()
}

/// An RST or FIN its receiver would not take (a blind spoofer's guess, an RST near the next byte
/// but not at it, a FIN 2^31 behind or acknowledging bytes never sent) changes nothing rlm
/// measures: the response goes on to its end, the next request is read, and each is counted out
/// of window. The RST at the next byte still ends the connection.
#[test]
fn rst_and_fin_outside_the_window_change_nothing() {
    let mut r = Run::new();
    let mut c = TcpConv::new("10.4.0.19:40001", "10.9.0.1:80");
    handshake(&mut r, &mut c, 0);
    r.feed(80, c.client_data(&get("/big", "")));
    let segs = c.server_data(&gif_response(5_000));
    r.feed(90, segs[0].clone());
    r.feed(91, c.forged(true, 1 << 30, "R"));
    r.feed(92, c.forged(true, -(1 << 31) + 1, "RA"));
    r.feed(93, c.forged(false, -(1 << 31) + 10, "FA"));
    // Near the next byte but not at it (the receiver answers it with a challenge ACK, RFC 5961):
    // from the client while its stream is quiet, and from the server past what it sent.
    r.feed(94, c.forged(false, 1_000, "RA"));
    let unsent: usize = segs[1..].iter().map(|f| f.len() - 54).sum();
    r.feed(94, c.forged(true, 1_000 - unsent as i64, "R"));
    // A FIN at the client's next byte acknowledging bytes the server never sent.
    r.feed(94, c.forged_ack(false, 0, 1 << 24, "FA"));
    r.feed_all(95, segs[1..].to_vec());
    r.feed(100, c.client_data(&get("/next", "")));
    r.feed_all(110, c.server_data(&gif_response(300)));
    r.advance(200);
    assert_eq!(r.engine.stats().out_of_window, 6);
    assert_eq!(r.tx.len(), 2, "both transactions, whole: {:?}", r.tx.iter().map(|t| (&t.uri, &t.anomalies)).collect::<Vec<_>>());
    assert!(r.tx.iter().all(|t| t.anomalies.is_empty() && t.status_code == Some(200)), "{:?}", r.tx);
    assert_eq!(r.tx[0].response_body_len, 5_000);
    // At the stream's next byte, the RST is the server's: the connection ends.
    r.feed(120, c.forged(true, 0, "R"));
    r.finish(1_000);
    assert_eq!(r.engine.stats().out_of_window, 6);
    assert_eq!(r.engine.table_sizes().connections, 0);
}

/// The request node's REJECT (issue 26, first step): evaluated at each request head with the
/// request's method, headers and cookies (kept in the head because the rules test them), and
/// counted in its rule's `fired` and `deferred` and in `stats.rejects_deferred`: the engine does
/// not answer for the server yet, so every request still reaches it.
#[test]
fn reject_is_evaluated_at_each_request_and_counted_deferred() {
    let mut r = Run::new();
    r.engine.set_rules(Some(rules(
        "IF METHOD == POST AND NOT COOKIE.cart EXISTS THEN REJECT 503 RETRY-AFTER 5s\nIF HEADER.X-Tier == \"free\" THEN REJECT 429\n",
    )));
    let mut c = TcpConv::new("10.4.0.20:40001", "10.9.0.1:80");
    handshake(&mut r, &mut c, 0);
    let requests = [
        "POST /buy HTTP/1.1\r\nHost: shop\r\nContent-Length: 0\r\n\r\n",
        "POST /buy HTTP/1.1\r\nHost: shop\r\nCookie: sid=1; cart=3\r\nContent-Length: 0\r\n\r\n",
        "GET /a HTTP/1.1\r\nHost: shop\r\nx-tier: free\r\n\r\n",
        "GET /b HTTP/1.1\r\nHost: shop\r\nX-Tier: paid\r\n\r\n",
    ];
    for (i, req) in requests.iter().enumerate() {
        let t = 100 + 100 * i as u64;
        r.feed(t, c.client_data(req.as_bytes()));
        r.feed_all(t + 20, c.server_data(&gif_response(100)));
    }
    r.finish(2_000);
    let p = r.engine.policy().unwrap();
    let counts: Vec<(u64, u64)> = p.rule_counters.iter().map(|c| (c.fired, c.deferred)).collect();
    assert_eq!(counts, vec![(1, 1), (1, 1)], "the POST without a cart, the free tier");
    assert_eq!(r.engine.stats().rejects_deferred, 2);
    assert_eq!(r.tx.len(), 4, "not carried out: every request answered by the server");
}

/// REJECT carried out (issue 26, `Config::reject`): the request's segment is dropped; the
/// server gets an RST at the request's first byte; the client a 503 with Retry-After and
/// `Connection: close`, and a FIN, in the server's sequence space acknowledging the request;
/// then nothing more of the connection passes and the client's FIN is acknowledged. Another
/// request passes.
#[test]
fn reject_answers_the_client_and_resets_the_server() {
    use etherparse::{SlicedPacket, TransportSlice};
    use rlm_core::FastpathUpdate;
    let mut r = Run::with(Config { reject: true, ..Config::default() });
    r.engine.enable_fastpath();
    r.engine.set_rules(Some(rules("IF URL == \"/busy*\" THEN REJECT 503 RETRY-AFTER 5s\n")));
    let updates = |r: &mut Run| std::iter::from_fn(|| r.engine.poll_fastpath()).collect::<Vec<_>>();
    assert!(updates(&mut r).contains(&FastpathUpdate::QueueRequests(true)), "the kernel queues the requests");
    let tcp = |f: &[u8]| -> (u32, u32, bool, bool, bool, Vec<u8>) {
        let p = SlicedPacket::from_ethernet(f).unwrap();
        let Some(TransportSlice::Tcp(t)) = p.transport else { panic!("tcp") };
        (t.sequence_number(), t.acknowledgment_number(), t.rst(), t.fin(), t.ack(), t.payload().to_vec())
    };
    let mut c = TcpConv::new("10.4.0.21:40001", "10.9.0.1:80");
    handshake(&mut r, &mut c, 0);
    let req = c.client_data(&get("/busy/page", ""));
    let (req_seq, req_ack, ..) = tcp(&req);
    let req_len = tcp(&req).5.len() as u32;
    r.feed(100, req);
    assert_eq!(r.verdict, Some(rlm_core::Verdict::Drop), "the request never reaches the server");
    let to_server = r.engine.poll_transmit().expect("an RST to the server");
    let to_client = r.engine.poll_transmit().expect("the answer to the client");
    assert!(r.engine.poll_transmit().is_none());
    assert_eq!(to_server.port, Port::Server);
    let (seq, _, rst, ..) = tcp(&to_server.frame);
    assert_eq!((seq, rst), (req_seq, true), "the RST at the request's first byte");
    assert_eq!(to_client.port, Port::Client);
    let (seq, ack, rst, fin, has_ack, payload) = tcp(&to_client.frame);
    assert_eq!((seq, ack, rst, fin, has_ack), (req_ack, req_seq.wrapping_add(req_len), false, true, true));
    let text = String::from_utf8(payload.clone()).unwrap();
    assert!(
        text.starts_with("HTTP/1.1 503 Service Unavailable\r\n") && text.contains("\r\nRetry-After: 5\r\n") && text.contains("Connection: close"),
        "{text}"
    );
    assert_eq!(r.engine.stats().requests_rejected, 1);
    assert_eq!(r.engine.policy().unwrap().rule_counters[0].deferred, 0, "carried out, not deferred");
    assert!(
        updates(&mut r).contains(&FastpathUpdate::Rejected { client: "10.4.0.21:40001".parse().unwrap(), server: "10.9.0.1:80".parse().unwrap() }),
        "the kernel hands the connection's further segments to the engine"
    );
    // The client acknowledges and closes: dropped, its FIN acknowledged at the answer's end.
    let fin_frame = c.client_fin();
    let (fin_seq, ..) = tcp(&fin_frame);
    r.feed(200, fin_frame);
    assert_eq!(r.verdict, Some(rlm_core::Verdict::Drop));
    let ack = r.engine.poll_transmit().expect("the FIN acknowledged");
    let (seq, ack_no, _, fin, ..) = tcp(&ack.frame);
    assert_eq!((ack.port, seq, ack_no, fin), (Port::Client, req_ack.wrapping_add(payload.len() as u32 + 1), fin_seq.wrapping_add(1), false));
    // Another connection's request passes.
    let mut c2 = TcpConv::new("10.4.0.21:40002", "10.9.0.1:80");
    handshake(&mut r, &mut c2, 3_000);
    r.feed(3_100, c2.client_data(&get("/fine", "")));
    assert_eq!(r.verdict, Some(rlm_core::Verdict::Accept));
    assert!(r.engine.poll_transmit().is_none());
    // The rejected page ended with the appliance's answer (at 100 ms, 140 ms on the client's
    // clock), complete, with its rejection counted; the other page is its own.
    r.feed_all(3_120, c2.server_data(&gif_response(100)));
    r.finish(8_000);
    let busy = r.pv.iter().find(|p| p.container.as_deref() == Some("/busy/page")).expect("the rejected page");
    assert_eq!(busy.actions.requests_rejected, 1);
    assert!(!busy.incomplete);
    assert!((secs(busy.end_ts) - 0.14).abs() < 0.005, "ended at the answer: {}", secs(busy.end_ts));
    assert_eq!(busy.connections, 1);
    let fine = r.pv.iter().find(|p| p.container.as_deref() == Some("/fine")).expect("the other page");
    assert_eq!(fine.actions.requests_rejected, 0);
}

/// LIMIT REQUESTS (issue 26): a token bucket per rule, class and URL group; a request that finds
/// it empty is answered as REJECT 503 would (Retry-After 1). Requests of another group have a
/// bucket of their own; the bucket refills at its rate.
#[test]
fn limit_requests_rejects_the_excess_of_a_group() {
    let mut r = Run::with(Config { reject: true, ..Config::default() });
    r.engine.set_rules(Some(rules(concat!(
        "GROUP db IF URL == \"/search*\"\n",
        "IF GROUP == db THEN LIMIT REQUESTS 1/s BURST 2\n",
        "IF GROUP != db THEN LIMIT REQUESTS 100/s BURST 100\n",
    ))));
    let mut fate = Vec::new();
    let plan: [(u64, &str); 6] =
        [(0, "/search?q=1"), (100, "/search?q=2"), (200, "/search?q=3"), (300, "/item/1"), (400, "/search?q=4"), (2_500, "/search?q=5")];
    for (i, (t, url)) in plan.iter().enumerate() {
        let mut c = TcpConv::new(&format!("10.4.0.21:{}", 41_000 + i), "10.9.0.1:80");
        handshake(&mut r, &mut c, *t);
        r.feed(t + 10, c.client_data(&get(url, "")));
        let rejected = r.verdict == Some(rlm_core::Verdict::Drop);
        let answer = std::iter::from_fn(|| r.engine.poll_transmit()).filter(|t| t.port == Port::Client).count();
        assert_eq!(answer, rejected as usize, "{url}: an answer for each rejected request");
        fate.push((*url, rejected));
    }
    assert_eq!(
        fate,
        vec![
            ("/search?q=1", false),
            ("/search?q=2", false),
            ("/search?q=3", true),
            ("/item/1", false),
            ("/search?q=4", true),
            ("/search?q=5", false)
        ]
    );
    assert_eq!(r.engine.stats().requests_rejected, 2);
    assert_eq!(r.engine.policy().unwrap().rule_counters[0].fired, 2, "the limit fired at the two it turned away");
}

/// The SLA controller (issue 26) through the engine: HIGH's pages hang (their responses wait),
/// so its open pageviews pass the 2 s target; the controller limits LOW's SYNs (a share of them
/// dropped, as the drop of a LIMIT SYN, with the controller's rule id), never HIGH's. When
/// HIGH's pages are answered quickly again the limit is lifted and LOW's SYNs all pass.
#[test]
fn the_sla_controller_sheds_low_while_high_misses_its_target_and_lets_go() {
    let mut r = Run::new();
    r.engine.set_rules(Some(rules("CLASS HIGH IF IP.SRC == 10.4.*.*\nCLASS LOW IF IP.SRC == 10.5.*.*\nSLA HIGH RT.P95 < 2s\nSHED LOW\n")));
    let controller_rule = r.engine.policy().unwrap().controller_rule();
    let mut port = 20_000u16;
    let mut low_syn = |r: &mut Run, t: u64| -> bool {
        port += 1;
        let c = TcpConv::new(&format!("10.5.0.9:{port}"), "10.9.0.1:80");
        r.feed(t, c.syn());
        r.verdict == Some(rlm_core::Verdict::Accept)
    };
    let mut high = Vec::new();
    let (mut passed, mut dropped) = ([0u32; 3], [0u32; 3]);
    // 0-6 s: HIGH pages every 200 ms whose responses do not come; LOW's SYNs 40/s.
    // 6-17 s: HIGH's pages answered in 100 ms. 17-20 s: LOW's SYNs counted again.
    for step in 0..800u64 {
        let t = step * 25;
        if step % 8 == 0 {
            let mut c = TcpConv::new(&format!("10.4.0.{}:{}", 1 + (step / 8) % 200, 30_000 + step), "10.9.0.1:80");
            handshake(&mut r, &mut c, t);
            r.feed(t + 20, c.client_data(&get("/", "")));
            if t >= 6_000 {
                r.feed_all(t + 100, c.server_data(&gif_response(100)));
                r.feed(t + 110, c.server_fin());
                r.feed(t + 120, c.client_fin());
            } else {
                high.push(c);
            }
        }
        if t == 6_000 {
            // The hung pages are answered at last (they end 1.5 to 6 s long).
            for mut c in high.drain(..) {
                r.feed_all(t, c.server_data(&gif_response(100)));
                r.feed(t + 5, c.server_fin());
                r.feed(t + 10, c.client_fin());
            }
        }
        // The hung pages' times leave the 2 s window by 8 s; from its least (0.5/s) LOW's rate
        // grows past 1.5 times its arrivals in about 8 s (additively, then by a fifth a period).
        let phase = if t < 6_000 {
            0
        } else if t < 17_000 {
            1
        } else {
            2
        };
        if low_syn(&mut r, t) {
            passed[phase] += 1;
        } else {
            dropped[phase] += 1;
        }
    }
    let state = r.engine.policy().unwrap().controller().unwrap().state();
    println!("LOW passed {passed:?} dropped {dropped:?}; {state:?}");
    assert!(dropped[0] > 20, "LOW shed while HIGH missed its target: {dropped:?}");
    assert_eq!(dropped[2], 0, "the limit lifted once HIGH is fast again: {dropped:?} {state:?}");
    assert_eq!(state.stages[0].1, None);
    assert!(state.decreases > 0 && state.increases > 0);
    let label = r.engine.policy().unwrap().rule_label(controller_rule).to_string();
    assert_eq!(label, "test.rlm:SLA");
    let by_controller: Vec<_> = r.decisions.iter().filter(|d| d.rule == label).collect();
    assert_eq!(by_controller.len() as u32, dropped.iter().sum::<u32>(), "one decision per SYN the controller dropped");
    assert!(by_controller.iter().all(|d| d.class == "LOW" && d.action == "LIMIT SYN"), "HIGH is never shed");
}

/// While HIGH misses its target and LOW is being shed, the controller also turns away the
/// requests of LOW's pages admitted before the limit (503, where REJECT is carried out); HIGH's
/// requests pass.
#[test]
fn the_sla_controller_sheds_the_requests_of_pages_admitted_before_the_limit() {
    let mut r = Run::with(Config { reject: true, ..Config::default() });
    r.engine.set_rules(Some(rules("CLASS HIGH IF IP.SRC == 10.4.*.*\nCLASS LOW IF IP.SRC == 10.5.*.*\nSLA HIGH RT.P95 < 2s\nSHED LOW\n")));
    // A LOW page admitted at once, and HIGH pages that hang.
    let mut low = TcpConv::new("10.5.0.7:30001", "10.9.0.1:80");
    handshake(&mut r, &mut low, 0);
    r.feed(20, low.client_data(&get("/", "")));
    r.feed_all(60, low.server_data(&gif_response(100)));
    assert_eq!(r.verdict, Some(rlm_core::Verdict::Accept));
    let mut hung = Vec::new();
    for step in 0..200u64 {
        let t = 100 + step * 25;
        if step % 8 == 0 {
            let mut c = TcpConv::new(&format!("10.4.0.{}:{}", 1 + step / 8, 31_000 + step), "10.9.0.1:80");
            handshake(&mut r, &mut c, t);
            r.feed(t + 20, c.client_data(&get("/", "")));
            hung.push(c);
        }
        let c = TcpConv::new(&format!("10.5.0.9:{}", 20_000 + step), "10.9.0.1:80");
        r.feed(t, c.syn());
    }
    let state = r.engine.policy().unwrap().controller().unwrap().state();
    assert!(state.stages[0].1.is_some(), "LOW limited by now: {state:?}");
    // The admitted LOW page asks for its image: turned away, answered by rlm.
    r.feed(5_200, low.client_data(&get("/img/1.gif", "")));
    assert_eq!(r.verdict, Some(rlm_core::Verdict::Drop));
    let answer = std::iter::from_fn(|| r.engine.poll_transmit()).find(|t| t.port == Port::Client).expect("a 503 to the client");
    assert!(String::from_utf8_lossy(&answer.frame).contains("HTTP/1.1 503"));
    // A HIGH page's request passes.
    let mut high = TcpConv::new("10.4.1.1:32000", "10.9.0.1:80");
    handshake(&mut r, &mut high, 5_300);
    r.feed(5_320, high.client_data(&get("/", "")));
    assert_eq!(r.verdict, Some(rlm_core::Verdict::Accept));
    let state = r.engine.policy().unwrap().controller().unwrap().state();
    assert_eq!(state.requests_shed, 1);
    assert_eq!(r.engine.stats().requests_rejected, 1);
}

/// Resource-aware admission (003 Paper D): a URL group whose server time (request to first
/// response byte) misses its target has its requests held to a rate by the controller, the
/// excess answered by rlm; the other requests pass; the limit is lifted once the server is fast
/// again.
#[test]
fn a_group_whose_server_time_misses_its_target_is_held_to_a_rate_and_the_rest_passes() {
    let mut r = Run::with(Config { reject: true, ..Config::default() });
    r.engine.set_rules(Some(rules("GROUP db IF URL == \"/search*\"\nSLA GROUP db RT.P95 < 500ms\n")));
    assert!(!r.engine.policy().unwrap().acts_at_syn(), "a group target does not act at the SYN");
    // Every 100 ms a search on its own connection, answered 1.5 s later until 8 s, then at once;
    // and an image, answered at once.
    let mut pending: Vec<(u64, TcpConv)> = Vec::new();
    let (mut rejected, mut images_rejected) = ([0u32; 4], 0);
    let mut measured = None;
    for step in 0..300u64 {
        let t = step * 100;
        let phase = match t {
            ..4_000 => 0,
            4_000..8_000 => 1,
            8_000..22_000 => 2,
            _ => 3,
        };
        let mut c = TcpConv::new(&format!("10.5.{}.{}:40000", step / 200, 1 + step % 200), "10.9.0.1:80");
        handshake(&mut r, &mut c, t);
        r.feed(t + 10, c.client_data(&get("/search?q=x", "")));
        if r.verdict == Some(rlm_core::Verdict::Drop) {
            rejected[phase] += 1;
            let answer = std::iter::from_fn(|| r.engine.poll_transmit()).find(|t| t.port == Port::Client).expect("a 503 to the client");
            assert!(String::from_utf8_lossy(&answer.frame).contains("HTTP/1.1 503"));
        } else {
            pending.push((if t < 8_000 { t + 1_500 } else { t + 20 }, c));
        }
        let mut img = TcpConv::new(&format!("10.6.{}.{}:40000", step / 200, 1 + step % 200), "10.9.0.1:80");
        handshake(&mut r, &mut img, t + 30);
        r.feed(t + 40, img.client_data(&get("/img/1.gif", "")));
        images_rejected += u32::from(r.verdict == Some(rlm_core::Verdict::Drop));
        r.feed_all(t + 50, img.server_data(&gif_response(100)));
        pending.sort_by_key(|(due, _)| *due);
        while pending.first().is_some_and(|(due, _)| *due <= t + 99) {
            let (due, mut c) = pending.remove(0);
            r.feed_all(due, c.server_data(&gif_response(100)));
            r.feed(due + 1, c.server_fin());
            r.feed(due + 2, c.client_fin());
        }
        if t == 7_900 {
            measured = r.engine.policy().unwrap().controller().unwrap().state().groups[0].measured_s;
        }
    }
    let state = r.engine.policy().unwrap().controller().unwrap().state();
    println!("rejected {rejected:?}; {state:?}");
    assert_eq!(images_rejected, 0, "the images are not in the group");
    assert!(measured.is_some_and(|m| m > 1.0), "the server time measured from the wire: {measured:?}");
    assert!(rejected[1] >= 20, "the group held to a rate while its server time missed the target: {rejected:?}");
    assert!(rejected[1] < 40, "not all of it: {rejected:?}");
    // What was sent before 8 s is answered until 9.5 s and counts for a window after; from
    // there the rate grows back from its least (0.5/s) to past 1.5 times the arrivals in 10 s.
    assert_eq!(rejected[3], 0, "the limit lifted once the server is fast: {rejected:?} {state:?}");
    assert_eq!(state.groups[0].admitted_per_s, None, "lifted: {state:?}");
    assert_eq!(state.requests_limited, rejected.iter().sum::<u32>() as u64);
    assert!(state.stages.is_empty() && state.targets.is_empty());
}

/// ABORT IDLE (003 Paper C, issue 26): a keep-alive connection whose last request the rule fired
/// at is closed once idle for its time after the response: the server gets an RST at the
/// client's next byte, the client a FIN from the server's address at the server's next byte,
/// and the connection is then the appliance's to finish (the client's FIN acknowledged). A cart
/// session's connection (the rule does not fire) stays; a connection that asks again within the
/// time is not closed under its request.
#[test]
fn abort_idle_closes_an_idle_keep_alive_connection_cleanly_and_spares_the_cart() {
    use etherparse::{SlicedPacket, TransportSlice};
    use rlm_core::FastpathUpdate;
    let mut r = Run::with(Config { reject: true, ..Config::default() });
    r.engine.enable_fastpath();
    r.engine.set_rules(Some(rules("IF NOT COOKIE.cart EXISTS THEN ABORT IDLE AFTER 2s\n")));
    let first: Vec<_> = std::iter::from_fn(|| r.engine.poll_fastpath()).collect();
    assert!(first.contains(&FastpathUpdate::QueueRequests(true)), "the kernel hands over the requests and the aborted connections: {first:?}");
    let tcp = |f: &[u8]| -> (u32, u32, bool, bool, usize) {
        let p = SlicedPacket::from_ethernet(f).unwrap();
        let Some(TransportSlice::Tcp(t)) = p.transport else { panic!("tcp") };
        (t.sequence_number(), t.acknowledgment_number(), t.rst(), t.fin(), t.payload().len())
    };
    let (mut plain, mut cart, mut busy) =
        (TcpConv::new("10.5.0.1:40001", "10.9.0.1:80"), TcpConv::new("10.5.0.2:40001", "10.9.0.1:80"), TcpConv::new("10.5.0.3:40001", "10.9.0.1:80"));
    for (i, c) in [&mut plain, &mut cart, &mut busy].into_iter().enumerate() {
        let t = i as u64 * 10;
        handshake(&mut r, c, t);
        let cookie = if i == 1 { "Cookie: cart=3\r\n" } else { "" };
        r.feed(t + 100, c.client_data(&get("/", cookie)));
        r.feed_all(t + 150, c.server_data(&gif_response(100)));
        r.feed(t + 240, c.client_ack());
    }
    while r.engine.poll_fastpath().is_some() {}
    // The third asks again 1.5 s later (within the 2 s), answered at once.
    r.feed(1_700, busy.client_data(&get("/img/1.gif", "")));
    r.feed_all(1_750, busy.server_data(&gif_response(100)));
    r.feed(1_840, busy.client_ack());
    // 2 s after the plain connection's last segment: it alone is closed.
    r.advance(2_300);
    let frames: Vec<_> = std::iter::from_fn(|| r.engine.poll_transmit()).collect();
    assert_eq!(frames.len(), 2, "an RST and a FIN: {frames:?}");
    let (rst, fin) = (&frames[0], &frames[1]);
    assert_eq!(rst.port, Port::Server);
    assert_eq!(tcp(&rst.frame), (plain.cseq, plain.sseq, true, false, 0), "the RST at the client's next byte");
    assert_eq!(fin.port, Port::Client);
    assert_eq!(tcp(&fin.frame), (plain.sseq, plain.cseq, false, true, 0), "the FIN at the server's next byte, acknowledging the client's");
    assert_eq!(r.engine.stats().idle_aborted, 1);
    assert_eq!(r.engine.policy().unwrap().rule_counters[0].fired, 1);
    let updates: Vec<_> = std::iter::from_fn(|| r.engine.poll_fastpath()).collect();
    assert!(
        updates.contains(&FastpathUpdate::Rejected { client: "10.5.0.1:40001".parse().unwrap(), server: "10.9.0.1:80".parse().unwrap() }),
        "{updates:?}"
    );
    // The client acknowledges the FIN and closes: its segments are the appliance's.
    let fin_frame = plain.client_fin();
    r.feed(2_400, fin_frame);
    assert_eq!(r.verdict, Some(rlm_core::Verdict::Drop));
    let ack = r.engine.poll_transmit().expect("the client's FIN acknowledged");
    let (seq, ack_no, rst, fin_flag, _) = tcp(&ack.frame);
    assert_eq!((ack.port, seq, ack_no, rst, fin_flag), (Port::Client, plain.sseq.wrapping_add(1), plain.cseq, false, false));
    // The busy connection is closed 2 s after its last segment (the client's ACK at 1.84 s);
    // the cart's never.
    r.advance(3_830);
    assert!(r.engine.poll_transmit().is_none(), "not before");
    r.advance(3_900);
    let frames: Vec<_> = std::iter::from_fn(|| r.engine.poll_transmit()).collect();
    assert_eq!(frames.len(), 2, "{frames:?}");
    assert_eq!(tcp(&frames[0].frame).0, busy.cseq);
    r.advance(12_000);
    assert!(r.engine.poll_transmit().is_none(), "the cart session's connection stays");
    assert_eq!(r.engine.stats().idle_aborted, 2);
}

/// ABORT IDLE where it is not carried out (a capture): counted deferred when due, nothing sent.
#[test]
fn abort_idle_is_counted_deferred_where_not_carried_out() {
    let mut r = Run::new();
    r.engine.set_rules(Some(rules("IF NOT COOKIE.cart EXISTS THEN ABORT IDLE\n")));
    let mut c = TcpConv::new("10.5.0.1:40001", "10.9.0.1:80");
    handshake(&mut r, &mut c, 0);
    r.feed(100, c.client_data(&get("/", "")));
    r.feed_all(150, c.server_data(&gif_response(100)));
    r.feed(240, c.client_ack());
    r.advance(1_500);
    assert!(r.engine.poll_transmit().is_none());
    let rc = &r.engine.policy().unwrap().rule_counters[0];
    assert_eq!((rc.fired, rc.deferred), (1, 1));
    assert_eq!((r.engine.stats().aborts_deferred, r.engine.stats().idle_aborted), (1, 0));
}

/// Where REJECT is carried out the SLA controller admits a shed class's pageviews instead of
/// dropping SYNs: every SYN passes; a SYN that opens a pageview without a token has its
/// connection's first request answered 503 (no retransmission 3 s later); the second connection
/// of an admitted page passes whole. To HTTPS's port the SYNs are dropped as before.
#[test]
fn the_sla_controller_turns_pageviews_away_at_their_first_request_where_reject_is_carried_out() {
    let mut r = Run::with(Config { reject: true, ..Config::default() });
    r.engine.set_rules(Some(rules("CLASS HIGH IF IP.SRC == 10.4.*.*\nCLASS LOW IF IP.SRC == 10.5.*.*\nSLA HIGH RT.P95 < 2s\nSHED LOW\n")));
    let mut hung = Vec::new();
    let (mut syns_dropped, mut served, mut turned) = (0, 0, 0);
    let mut admitted: Option<(bool, bool)> = None;
    for step in 0..400u64 {
        let t = step * 25;
        // HIGH pages every 200 ms; hung until 5 s (the target missed), then answered at once.
        if step % 8 == 0 {
            let mut c = TcpConv::new(&format!("10.4.0.{}:{}", 1 + (step / 8) % 200, 30_000 + step), "10.9.0.1:80");
            handshake(&mut r, &mut c, t);
            r.feed(t + 20, c.client_data(&get("/", "")));
            if t < 5_000 {
                hung.push(c);
            } else {
                r.feed_all(t + 21, c.server_data(&gif_response(100)));
            }
        }
        if t == 5_000 {
            for mut c in hung.drain(..) {
                r.feed_all(t, c.server_data(&gif_response(100)));
            }
        }
        // A new LOW visitor every 25 ms (40 pageviews a second).
        let ip = format!("10.5.{}.{}", step / 200, 1 + step % 200);
        let mut c = TcpConv::new(&format!("{ip}:40000"), "10.9.0.1:80");
        r.feed(t, c.syn());
        syns_dropped += u32::from(r.verdict == Some(rlm_core::Verdict::Drop));
        r.feed(t, c.synack());
        r.feed(t + 1, c.ack());
        r.feed(t + 2, c.client_data(&get("/", "")));
        if r.verdict == Some(rlm_core::Verdict::Drop) {
            turned += 1;
        } else {
            served += 1;
            r.feed_all(t + 3, c.server_data(&gif_response(100)));
            if t >= 7_000 && admitted.is_none() {
                // The page's second connection, for an image: its SYN and its request pass.
                let mut second = TcpConv::new(&format!("{ip}:40001"), "10.9.0.1:80");
                r.feed(t + 4, second.syn());
                let syn_passed = r.verdict == Some(rlm_core::Verdict::Accept);
                r.feed(t + 4, second.synack());
                r.feed(t + 5, second.ack());
                r.feed(t + 6, second.client_data(&get("/img/1.gif", "")));
                admitted = Some((syn_passed, r.verdict == Some(rlm_core::Verdict::Accept)));
                r.feed_all(t + 7, second.server_data(&gif_response(100)));
            }
        }
        while r.engine.poll_transmit().is_some() {}
    }
    let state = r.engine.policy().unwrap().controller().unwrap().state();
    println!("served {served} turned away {turned}; {state:?}");
    assert_eq!(syns_dropped, 0, "no SYN dropped where the requests are answered");
    assert!(state.pageviews_turned_away > 0 && turned > 20, "pageviews turned away at their first request: {turned} {state:?}");
    assert!(served > 20, "and others admitted: {served}");
    assert_eq!(admitted, Some((true, true)), "an admitted page's second connection and its image pass");
    // To HTTPS's port, whose requests are encrypted, the SYNs over the limit are dropped.
    assert!(state.stages[0].1.is_some(), "LOW still limited: {state:?}");
    let dropped = (0..10u64)
        .filter(|i| {
            let c = TcpConv::new(&format!("10.5.9.{}:40000", 1 + i), "10.9.0.1:443");
            r.feed(10_000, c.syn());
            r.verdict == Some(rlm_core::Verdict::Drop)
        })
        .count();
    assert!(dropped >= 5, "HTTPS SYNs over the limit dropped: {dropped}");
}

#[test]
fn the_slowest_open_pageviews_are_shown_with_their_graph_and_class_not_a_spoofers() {
    // The inline driver keeps no graph in its records (max_events 0); the live view still has one.
    let mut cfg = Config::default();
    cfg.pageview.max_events = 0;
    let mut r = Run::with(cfg);
    r.engine.set_rules(Some(rules("CLASS HIGH IF IP.SRC == 10.4.*.*\nCLASS LOW IF IP.SRC != 10.4.*.*\n")));
    // Two pages waiting for their container (the older one LOW); older than both, a request
    // on a connection whose handshake was never seen nor answered (a spoofer's, or one joined
    // mid-stream): a pageview without evidence of a real client.
    let mut spoofed = TcpConv::new("10.4.9.9:40001", "10.9.0.1:80");
    r.feed(0, spoofed.client_data(&get("/", "")));
    let mut low = TcpConv::new("10.5.0.2:40001", "10.9.0.1:80");
    handshake(&mut r, &mut low, 100);
    r.feed(180, low.client_data(&get("/slow.html", "Accept: text/html\r\n")));
    let mut high = TcpConv::new("10.4.0.3:40001", "10.9.0.1:80");
    handshake(&mut r, &mut high, 300);
    r.feed(380, high.client_data(&get("/index.html", "Accept: text/html\r\n")));
    let now = at(1_000);
    let shown = r.engine.slowest_open_pageviews(now, 5);
    let clients: Vec<&str> = shown.iter().map(|p| p.client.as_str()).collect();
    assert_eq!(clients, ["10.5.0.2", "10.4.0.3"], "oldest first, the unproven pageview left out");
    let p = &shown[0];
    assert_eq!(p.class.as_deref(), Some("LOW"));
    assert_eq!(shown[1].class.as_deref(), Some("HIGH"));
    assert!(p.incomplete);
    assert!(approx(p.rt_s, 1.0 - (0.100 - 0.040), 1e-6), "its age at now: {}", p.rt_s);
    let kinds: Vec<&str> = p.events.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, ["syn", "synack", "ack", "request"], "{:?}", p.events);
    assert_eq!(p.events[3].uri.as_deref(), Some("/slow.html"));
    assert_eq!(r.engine.slowest_open_pageviews(now, 1).len(), 1);
    assert!(r.engine.slowest_open_pageviews(now, 0).is_empty());
}
