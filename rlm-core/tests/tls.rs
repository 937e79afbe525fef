//! Pageviews from encrypted traffic (issue 25): TLS connections' exchanges (a client burst of
//! application records and the server's records after it) made into transactions and pageviews,
//! by time alone, with the SNI as the host and the objects estimated.

use rlm_core::testkit::tls::{app, client_finished_13, client_hello_record, client_hello_record_offering, server_flight_13, session_ticket_13};
use rlm_core::testkit::TcpConv;

mod common;
use common::*;

const SERVER: &str = "10.9.0.1:443";

/// A TLS 1.3 connection's handshakes at `t`: TCP's (the ACK one RTT later), then the ClientHello
/// with it, the server's flight 20 ms later; the client's Finished comes with its first request.
fn tls_open(r: &mut Run, c: &mut TcpConv, t: u64, hello: &[u8]) {
    handshake(r, c, t);
    r.feed(t + RTT_MS, c.client_data(hello));
    r.feed_all(t + RTT_MS + 20, c.server_data(&server_flight_13()));
}

/// The client's Finished and first request (`len` bytes of record body) in one segment.
fn finished_and_request(c: &mut TcpConv, len: usize) -> Vec<u8> {
    c.client_data(&[client_finished_13(), app(len)].concat())
}

#[test]
fn an_http1_page_over_tls_is_a_pageview_from_the_syn_to_the_last_record() {
    let mut r = Run::new();
    let http1: &[&[u8]] = &[b"http/1.1"];
    // The container on the first connection.
    let mut c1 = TcpConv::new("10.4.0.1:40001", SERVER);
    tls_open(&mut r, &mut c1, 0, &client_hello_record_offering(http1));
    r.feed(180, finished_and_request(&mut c1, 400));
    r.feed_all(210, c1.server_data(&app(5_000)));
    r.feed_all(215, c1.server_data(&app(3_000)));
    // The browser opens a second connection for the objects, and asks for one more on the first.
    let mut c2 = TcpConv::new("10.4.0.1:40002", SERVER);
    tls_open(&mut r, &mut c2, 300, &client_hello_record_offering(http1));
    r.feed(480, finished_and_request(&mut c2, 350));
    r.feed_all(500, c2.server_data(&app(2_000)));
    r.feed(500, c1.client_data(&app(300)));
    r.feed_all(505, c2.server_data(&app(800)));
    r.feed_all(560, c1.server_data(&app(1_200)));
    r.feed(640, c1.client_ack());
    // The server's close_notify later (TLS 1.3: 19 bytes) is no response.
    r.feed_all(900, c2.server_data(&app(19)));
    assert!(r.pv.is_empty(), "not over before its quiet");
    r.advance(3_000);
    assert_eq!(r.pv.len(), 1, "ended by its quiet: {:?}", r.pv);
    let p = r.pv[0].clone();
    assert!(p.tls);
    assert_eq!(p.host.as_deref(), Some("shop.example"));
    assert_eq!((p.container.as_deref(), p.objects, p.connections), (None, 2, 2));
    assert!(p.object_uris.is_empty());
    // From the first SYN (half an RTT earlier at the client) to the last record of the last
    // response (half an RTT later).
    assert!(approx(secs(p.start_ts), -0.040, 1e-6), "start {}", p.start_ts);
    assert!(approx(p.rt_s, 0.560 + 0.040 + 0.040, 1e-6), "rt {}", p.rt_s);
    assert_eq!(p.evidence, rlm_core::pageview::Evidence::Handshake);
    let requests: Vec<_> = p.events.iter().filter(|e| e.kind == "request").collect();
    assert_eq!(requests.len(), 3);
    assert!(requests.iter().all(|e| e.uri.is_none()));
    // The exchanges' records come as their connections end, each naming the pageview.
    r.finish(4_000);
    assert_eq!(r.tx.len(), 3, "{:?}", r.tx);
    for t in &r.tx {
        let facts = t.tls.as_ref().expect("an exchange");
        assert_eq!((t.pageview, t.host.as_deref(), facts.requests_estimated, facts.h2), (Some(p.id), Some("shop.example"), 1, false));
        assert_eq!((t.method.as_ref(), t.uri.as_ref()), (None, None));
    }
    let container = r.tx.iter().find(|t| t.orig_p == 40001 && t.trans_depth == 1).expect("the container's");
    assert_eq!((container.request_body_wire_len, container.response_body_wire_len), (400, 8_000));
    assert_eq!(r.engine.stats().tls_exchanges, 3);
}

#[test]
fn an_h2_connection_counts_the_requests_of_its_bursts_and_not_its_control_records() {
    let mut r = Run::new();
    let mut c = TcpConv::new("10.4.0.2:40001", SERVER);
    // h2 offered; TLS 1.3 hides the server's choice, so the records are read as h2's may be.
    tls_open(&mut r, &mut c, 0, &client_hello_record());
    // The Finished, the preface alone (24 + SETTINGS + WINDOW_UPDATE: 64 bytes + 17), then the
    // container's HEADERS.
    r.feed(180, c.client_data(&[client_finished_13(), app(64 + 17), app(180 + 17)].concat()));
    r.feed_all(230, c.server_data(&app(6_000)));
    // The objects' HEADERS, three records at once (one of 18 bytes: a repeated request HPACK
    // indexed whole), and both WINDOW_UPDATEs (26 + 17) during the responses.
    r.feed(260, c.client_data(&[app(40 + 17), app(18 + 17), app(38 + 17)].concat()));
    r.feed_all(300, c.server_data(&app(4_000)));
    r.feed(310, c.client_data(&app(26 + 17)));
    r.feed_all(330, c.server_data(&app(9_000)));
    // The server's SETTINGS acknowledgement (9 + 17) then, and its GOAWAY (17 + 17) when the
    // client closes at once: no response data, so no later end.
    r.feed_all(335, c.server_data(&app(9 + 17)));
    r.feed(420, c.client_data(&app(17 + 17)));
    r.feed_all(421, c.server_data(&app(17 + 17)));
    r.advance(3_000);
    r.finish(3_500);
    assert_eq!(r.pv.len(), 1, "{:?}", r.pv);
    let p = &r.pv[0];
    assert_eq!((p.tls, p.objects, p.connections), (true, 3, 1));
    assert!(approx(p.rt_s, 0.330 + 0.080, 1e-6), "rt {}", p.rt_s);
    let estimated: Vec<(u32, u32, u32)> =
        r.tx.iter().map(|t| t.tls.as_ref().map(|f| (f.requests_estimated, f.records_client, f.records_server)).unwrap()).collect();
    assert_eq!(
        estimated,
        vec![(1, 1, 1), (3, 3, 2)],
        "the preface, the WINDOW_UPDATEs, the acknowledgement and the GOAWAYs are no requests nor responses"
    );
    assert!(r.tx.iter().all(|t| t.tls.as_ref().unwrap().h2));
}

#[test]
fn a_request_after_the_clients_quiet_is_the_next_page_from_itself() {
    let mut r = Run::new();
    let mut c = TcpConv::new("10.4.0.3:40001", SERVER);
    tls_open(&mut r, &mut c, 0, &client_hello_record_offering(&[b"http/1.1"]));
    r.feed(180, finished_and_request(&mut c, 400));
    r.feed_all(220, c.server_data(&app(3_000)));
    // Half a second later on the same connection: still the same page.
    r.feed(720, c.client_data(&app(300)));
    r.feed_all(750, c.server_data(&app(1_000)));
    // Three seconds of quiet, then a request on the kept-alive connection: the next page, from
    // its request (half an RTT earlier at the client), not from the connection's SYN. It comes
    // before the driver fired the first page's deadline (a late timer): the quiet alone decides.
    let request = c.client_data(&app(420));
    r.engine.handle(at(3_750), rlm_core::Port::Unknown, &request);
    r.drain();
    r.feed_all(3_800, c.server_data(&app(2_500)));
    r.finish(6_000);
    assert_eq!(r.pv.len(), 2, "{:?}", r.pv);
    let (a, b) = (&r.pv[0], &r.pv[1]);
    assert_eq!((a.objects, b.objects), (1, 0));
    assert!(approx(a.rt_s, 0.750 + 0.080, 1e-6), "first rt {}", a.rt_s);
    assert!(approx(secs(b.start_ts), 3.750 - 0.040, 1e-6), "second start {}", b.start_ts);
    assert!(approx(b.rt_s, 0.050 + 0.080, 1e-6), "second rt {}", b.rt_s);
    assert!(!b.incomplete);
}

#[test]
fn a_connection_whose_tls_handshake_is_slow_holds_its_pageview_open() {
    let mut r = Run::new();
    let http1: &[&[u8]] = &[b"http/1.1"];
    let mut c1 = TcpConv::new("10.4.0.4:40001", SERVER);
    tls_open(&mut r, &mut c1, 0, &client_hello_record_offering(http1));
    r.feed(180, finished_and_request(&mut c1, 400));
    r.feed_all(215, c1.server_data(&app(5_000)));
    // The second connection: its TCP handshake at once, but the overloaded server answers its
    // ClientHello 1.5 s later, longer than the client's quiet that ends a pageview.
    let mut c2 = TcpConv::new("10.4.0.4:40002", SERVER);
    handshake(&mut r, &mut c2, 300);
    r.feed(380, c2.client_data(&client_hello_record_offering(http1)));
    r.feed_all(1_900, c2.server_data(&server_flight_13()));
    r.feed(1_980, finished_and_request(&mut c2, 350));
    r.feed_all(2_000, c2.server_data(&app(2_000)));
    r.finish(5_000);
    assert_eq!(r.pv.len(), 1, "{:?}", r.pv);
    let p = &r.pv[0];
    assert_eq!((p.objects, p.connections), (1, 2));
    assert!(approx(p.rt_s, 2.000 + 0.080, 1e-6), "rt {}", p.rt_s);
}

/// TLS 1.3's session tickets come when the server reads the client's Finished, which went with
/// the first request: they follow the request at once. An overloaded server's response to it
/// comes 3.6 s later: the tickets are not its response, and the pageview is not over while the
/// client waits for it (it was, split in two, before tickets were held).
#[test]
fn tls13_tickets_after_the_first_request_are_not_its_response() {
    let mut r = Run::new();
    let http1: &[&[u8]] = &[b"http/1.1"];
    let mut c = TcpConv::new("10.4.0.5:40001", SERVER);
    tls_open(&mut r, &mut c, 0, &client_hello_record_offering(http1));
    r.feed(180, finished_and_request(&mut c, 80));
    r.feed_all(200, c.server_data(&[session_ticket_13(), session_ticket_13()].concat()));
    r.feed_all(3_800, c.server_data(&app(1_600)));
    // The page's images on the same connection, and on a second one opened after the container.
    r.feed(3_900, c.client_data(&app(70)));
    r.feed_all(3_950, c.server_data(&app(4_000)));
    let mut c2 = TcpConv::new("10.4.0.5:40002", SERVER);
    tls_open(&mut r, &mut c2, 3_960, &client_hello_record_offering(http1));
    r.feed(4_140, finished_and_request(&mut c2, 70));
    r.feed_all(4_160, c2.server_data(&session_ticket_13()));
    r.feed_all(4_300, c2.server_data(&app(2_000)));
    r.finish(9_000);
    assert_eq!(r.pv.len(), 1, "{:?}", r.pv);
    let p = &r.pv[0];
    assert_eq!((p.objects, p.connections), (2, 2));
    assert!(approx(p.rt_s, 4.300 + 0.080, 1e-6), "rt {}", p.rt_s);
    let first = r.tx.iter().find(|t| t.orig_p == 40001 && t.trans_depth == 1).expect("the container's");
    let facts = first.tls.as_ref().unwrap();
    assert_eq!((facts.records_server, facts.tickets, first.response_body_wire_len), (1, 2, 1_600), "the tickets are not the response");
    assert!(approx(secs(first.response_first_ts.unwrap().0), 3.800, 1e-6), "its first byte is the response's, not a ticket's");
    assert_eq!(r.tx.iter().map(|t| t.tls.as_ref().unwrap().tickets).sum::<u32>(), 3);
}

/// What is held may be the whole response: a short one (a 304) on a new TLS 1.3 connection is
/// the response once the client's next request on it shows it was, and a next page on another
/// connection after the client's quiet is a pageview of its own, not joined to the one that
/// waits on it.
#[test]
fn a_short_first_response_held_is_the_response_and_does_not_keep_its_page_active() {
    let mut r = Run::new();
    let http1: &[&[u8]] = &[b"http/1.1"];
    let mut c = TcpConv::new("10.4.0.6:40001", SERVER);
    tls_open(&mut r, &mut c, 0, &client_hello_record_offering(http1));
    r.feed(180, finished_and_request(&mut c, 80));
    r.feed_all(200, c.server_data(&session_ticket_13()));
    r.feed_all(230, c.server_data(&app(250)));
    // The next page 4 s later, on a new connection.
    let mut c2 = TcpConv::new("10.4.0.6:40002", SERVER);
    tls_open(&mut r, &mut c2, 4_000, &client_hello_record_offering(http1));
    r.feed(4_180, finished_and_request(&mut c2, 80));
    r.feed_all(4_200, c2.server_data(&[session_ticket_13(), app(3_000)].concat()));
    // The first connection's next request, at last: its exchange had been answered by then.
    r.feed(6_000, c.client_data(&app(70)));
    r.feed_all(6_050, c.server_data(&app(3_000)));
    r.finish(12_000);
    let by_start: Vec<(f64, u32)> = r.pv.iter().map(|p| ((secs(p.start_ts) * 1e3).round(), p.objects)).collect();
    assert_eq!(r.pv.len(), 3, "{by_start:?} {:?}", r.pv);
    let first = r.pv.iter().find(|p| approx(secs(p.start_ts), -0.040, 1e-6)).expect("the first page");
    assert!(approx(first.rt_s, 0.230 + 0.080, 1e-6), "the first page ends at its short response: {}", first.rt_s);
    assert!(r.pv.iter().any(|p| approx(secs(p.start_ts), 4.000 - 0.040, 1e-6) && p.connections == 1), "the next page alone: {by_start:?}");
}

/// Sites as classes (issue 25): two sites behind one address, told apart by the SNI. A
/// client's pageview is of its site's class; its first SYN, before rlm knows its site, is of
/// no site class and passes a rule on NEWS's clients; its next SYN, once its last site was
/// news.example, is NEWS's and is dropped. A SHOP client's SYN still passes.
#[test]
fn sites_behind_one_address_are_classes_by_their_sni() {
    use rlm_core::testkit::tls::client_hello_record_for;
    let mut r = Run::new();
    r.engine.set_rules(Some(
        rules::compile("t.rlm", "CLASS SHOP IF SITE == shop.example\nCLASS NEWS IF SITE == news.example\nIF CLASS == NEWS THEN DROP SYN\n").unwrap(),
    ));
    let http1: &[&[u8]] = &[b"http/1.1"];
    let page = |r: &mut Run, client: &str, t: u64, site: &[u8]| {
        let mut c = TcpConv::new(client, SERVER);
        r.feed(t, c.syn());
        let verdict = r.verdict.clone();
        if verdict == Some(rlm_core::Verdict::Accept) {
            r.feed(t, c.synack());
            r.feed(t + RTT_MS, c.ack());
            r.feed(t + RTT_MS, c.client_data(&client_hello_record_for(site, http1)));
            r.feed_all(t + RTT_MS + 20, c.server_data(&server_flight_13()));
            r.feed(t + 180, finished_and_request(&mut c, 400));
            r.feed_all(t + 220, c.server_data(&app(3_000)));
        }
        verdict
    };
    assert_eq!(page(&mut r, "10.4.0.5:40001", 0, b"news.example"), Some(rlm_core::Verdict::Accept), "its site not known yet");
    assert_eq!(page(&mut r, "10.4.0.6:40001", 0, b"shop.example"), Some(rlm_core::Verdict::Accept));
    r.advance(3_000);
    let class_of = |r: &Run, client: &str| r.pv.iter().find(|p| p.client == client).and_then(|p| p.class.clone());
    assert_eq!(class_of(&r, "10.4.0.5").as_deref(), Some("NEWS"));
    assert_eq!(class_of(&r, "10.4.0.6").as_deref(), Some("SHOP"));
    assert_eq!(page(&mut r, "10.4.0.5:40002", 5_000, b"news.example"), Some(rlm_core::Verdict::Drop), "a NEWS client's SYN");
    assert_eq!(page(&mut r, "10.4.0.6:40002", 5_000, b"shop.example"), Some(rlm_core::Verdict::Accept));
    assert_eq!(r.decisions.iter().map(|d| d.class.as_str()).collect::<Vec<_>>(), ["NEWS"]);
    // A pageview is of its own site's class, even when its client has asked for another site
    // since (here before the driver fired the first page's deadline).
    assert_eq!(page(&mut r, "10.4.0.8:40001", 10_000, b"shop.example"), Some(rlm_core::Verdict::Accept));
    let mut c = TcpConv::new("10.4.0.8:40002", SERVER);
    let later = [c.syn(), c.synack(), c.ack(), c.client_data(&client_hello_record_for(b"news.example", http1))];
    for f in later {
        r.engine.handle(at(12_000), rlm_core::Port::Unknown, &f);
    }
    for f in c.server_data(&server_flight_13()) {
        r.engine.handle(at(12_020), rlm_core::Port::Unknown, &f);
    }
    r.engine.handle(at(12_100), rlm_core::Port::Unknown, &finished_and_request(&mut c, 400));
    for f in c.server_data(&app(2_000)) {
        r.engine.handle(at(12_150), rlm_core::Port::Unknown, &f);
    }
    r.drain();
    r.advance(20_000);
    let classes: Vec<_> = r.pv.iter().filter(|p| p.client == "10.4.0.8").map(|p| p.class.clone().unwrap_or_default()).collect();
    assert_eq!(classes, ["SHOP", "NEWS"]);
}

/// REMOVE and REWRITE EMBEDS need the plaintext: over TLS each exchange is counted as not
/// applicable, and nothing is blanked.
#[test]
fn embeds_actions_are_counted_not_applicable_on_tls() {
    let mut r = Run::new();
    r.engine.set_rules(Some(rules::compile("t.rlm", "IF RT > 0s THEN REMOVE EMBEDS AFTER 1\n").unwrap()));
    let mut c = TcpConv::new("10.4.0.9:40001", SERVER);
    tls_open(&mut r, &mut c, 0, &client_hello_record_offering(&[b"http/1.1"]));
    r.feed(180, finished_and_request(&mut c, 400));
    r.feed_all(220, c.server_data(&app(3_000)));
    r.feed(300, c.client_data(&app(300)));
    r.feed_all(340, c.server_data(&app(1_000)));
    r.finish(3_000);
    assert_eq!(r.engine.stats().adapt_not_applicable_tls, 2);
    assert_eq!(r.pv.len(), 1);
    assert_eq!(r.pv[0].actions.embeds_blanked, 0);
}
