//! QUIC seen, not managed (issue 25): UDP datagrams to and from the servers' ports are counted
//! as flows and bytes per class; other UDP is ignored; a flood of made-up flows stays bounded.

mod common;
use common::{at, Run};
use rlm_core::{Config, Port, Verdict};

fn udp(src: ([u8; 4], u16), dst: ([u8; 4], u16), payload: &[u8]) -> Vec<u8> {
    use std::net::SocketAddrV4;
    rlm_core::testkit::udp_frame(SocketAddrV4::new(src.0.into(), src.1), SocketAddrV4::new(dst.0.into(), dst.1), payload)
}

const SERVER: [u8; 4] = [10, 9, 0, 1];

/// A class's QUIC flows and bytes.
fn class_quic(r: &Run, name: &str) -> (u64, u64) {
    let p = r.engine.policy().unwrap();
    let i = (0..p.rules().class_count()).find(|&i| p.class_name(rules::ClassId(i as u16)) == name).unwrap();
    (p.class_counters[i].quic_flows, p.class_counters[i].quic_bytes)
}

fn initial() -> Vec<u8> {
    let mut d = vec![0u8; 1200];
    d[..5].copy_from_slice(&[0xc0, 0, 0, 0, 1]);
    d
}

/// Two HIGH flows and a LOW one to UDP 443, answered; each class counts its flows and its
/// bytes both ways; the verdict is always to pass. DNS on port 53 is not QUIC's.
#[test]
fn quic_flows_and_bytes_are_counted_by_class() {
    let mut r = Run::with(Config { server_ports: vec![80, 443], ..Config::default() });
    r.engine.set_rules(Some(rules::compile("t.rlm", "CLASS HIGH IF IP.SRC == 10.4.0.0/16\nCLASS LOW IF IP.SRC == 10.5.0.0/16\n").unwrap()));
    let flows = [([10, 4, 0, 1], 50_000), ([10, 4, 0, 2], 50_000), ([10, 5, 0, 1], 50_001)];
    for (i, client) in flows.into_iter().enumerate() {
        let t = 10 * i as u64;
        r.feed(t, udp(client, (SERVER, 443), &initial()));
        assert_eq!(r.verdict, Some(Verdict::Accept));
        r.feed(t + 1, udp((SERVER, 443), client, &[0xc0; 1000]));
        r.feed(t + 2, udp(client, (SERVER, 443), &[0x40; 40]));
    }
    r.feed(100, udp(([10, 4, 0, 1], 5353), (SERVER, 53), b"dns"));
    let st = r.engine.stats();
    assert_eq!((st.quic.flows, st.quic.handshakes, st.quic.datagrams, st.quic.bytes), (3, 3, 9, 3 * 2240));
    assert_eq!(st.ignored["not_tcp"], 1, "UDP on another port");
    assert_eq!(class_quic(&r, "HIGH"), (2, 2 * 2240));
    assert_eq!(class_quic(&r, "LOW"), (1, 2240));
}

/// With the servers' ports not configured, QUIC's is 443; a server's datagram seen first
/// (rlm started mid-flow) starts a flow too, without a handshake; the class counters carry
/// over a reload.
#[test]
fn the_default_port_midflow_flows_and_reloads() {
    let mut r = Run::new();
    let rules = "CLASS HIGH IF IP.SRC == 10.4.0.0/16\n";
    r.engine.set_rules(Some(rules::compile("t.rlm", rules).unwrap()));
    let client = ([10, 4, 0, 1], 40_000);
    r.feed(0, udp((SERVER, 443), client, &[0x40; 100]));
    r.feed(1, udp(client, (SERVER, 8443), &initial()));
    r.engine.set_rules(Some(rules::compile("t.rlm", &format!("{rules}# reloaded\n")).unwrap()));
    r.feed(2, udp(client, (SERVER, 443), &[0x40; 50]));
    let st = r.engine.stats();
    assert_eq!((st.quic.flows, st.quic.handshakes, st.quic.bytes), (1, 0, 150));
    assert_eq!(st.ignored["not_tcp"], 1, "8443 is not QUIC's without a configuration saying so");
    assert_eq!(class_quic(&r, "HIGH"), (1, 150));
}

/// A flood of datagrams from made-up clients: every one a new flow, the engine's memory bounded
/// by its table (the flows it remembers) whatever the count.
#[test]
fn a_flood_of_made_up_flows_is_counted_and_bounded() {
    let mut r = Run::new();
    let n = 200_000u32;
    for i in 0..n {
        let ip = (0x0a00_0000u32 + i).to_be_bytes();
        r.engine.handle(at(u64::from(i / 1000)), Port::Unknown, &udp((ip, 1234), (SERVER, 443), &initial()));
    }
    assert_eq!(r.engine.stats().quic.flows, u64::from(n));
    assert!(r.engine.table_sizes().quic_flows <= rlm_core::quic::MAX_QUIC_FLOWS, "{:?}", r.engine.table_sizes());
}
