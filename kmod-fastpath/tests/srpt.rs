//! The SRPT classifier's rules, run on crafted frames inside the kernel (`BPF_PROG_TEST_RUN`):
//! the band of each packet from its response's remaining bytes, retransmissions, the roll-over
//! to the next response on a connection, late publications, the sequence wrap, FAIR, and the
//! packets that are not a server's data. Needs root.

use std::net::SocketAddrV4;

use kmod_fastpath::{classid, FlowKey, SrptEgress, SrptMode, SrptParams};
use rlm_core::testkit::{tcp_frame, ACK, FIN, PSH, SYN};
use rlm_core::wire::LinkType;

use lab_netns::is_root;

const BASE: u32 = 0x07e1_0010;

struct Flow {
    fp: SrptEgress,
    server: SocketAddrV4,
    client: SocketAddrV4,
}

impl Flow {
    fn new(mode: SrptMode) -> Option<Flow> {
        if !is_root() {
            eprintln!("skipped: needs root (eBPF)");
            return None;
        }
        let mut fp = SrptEgress::load(&[80], &SrptParams::new(mode, BASE)).expect("load the classifier");
        fp.watch_heartbeat(None).unwrap();
        Some(Flow { fp, server: "10.1.0.1:80".parse().unwrap(), client: "10.4.0.2:40000".parse().unwrap() })
    }

    fn key(&self) -> FlowKey {
        FlowKey::new(self.server, self.client)
    }

    /// The band the program gives a server packet (its priority less the base).
    fn send(&self, flags: u8, seq: u32, len: usize) -> u32 {
        let f = tcp_frame(LinkType::Ethernet, self.server.into(), self.client.into(), seq, 1, flags, &vec![0u8; len]);
        let r = self.fp.test_run(&f, 1).expect("test run");
        assert_eq!(r.retval, 0, "the classifier never drops");
        r.skb.priority - BASE
    }

    fn data(&self, seq: u32, len: usize) -> u32 {
        self.send(PSH | ACK, seq, len)
    }

    /// The client acknowledges everything before `ack`.
    fn ack(&self, ack: u32) {
        let f = tcp_frame(LinkType::Ethernet, self.client.into(), self.server.into(), 1, ack, ACK, &[]);
        assert_eq!(self.fp.test_run_ack(&f).unwrap().retval, u32::MAX, "srpt_acks passes every packet on (TC_ACT_UNSPEC)");
    }
}

#[test]
fn bands_follow_the_remaining_bytes_of_a_published_response() {
    let Some(mut t) = Flow::new(SrptMode::Srpt) else { return };
    let isn = 1_000_000u32;
    assert_eq!(t.send(SYN | ACK, isn, 0), 0, "a SYN/ACK is control");
    let start = isn + 1;
    assert_eq!(t.fp.flow(t.key()).unwrap().unwrap().start, start);
    // A 60,000-byte response: remaining 60,000 (> 50K) is band 6; band 1 + cutoffs below it.
    t.fp.set_response(t.key(), start, Some(start + 60_000)).unwrap();
    assert_eq!(t.data(start, 1000), 6);
    // The client has not acknowledged the first segment: the flow stays in band 6 (the segment
    // may still be queued there).
    assert_eq!(t.data(start + 60_000 - 51_200, 1000), 6, "held");
    assert_eq!(t.fp.flow(t.key()).unwrap().unwrap().band, 6);
    t.ack(start + 60_000 - 51_200 + 1000);
    // Remaining at each packet's first byte: 51,200 exactly is not over the cutoff: band 5.
    assert_eq!(t.data(start + 60_000 - 51_200 + 1000, 1000), 5);
    t.ack(start + 60_000 - 51_200 + 2000);
    assert_eq!(t.data(start + 60_000 - 20_481, 1000), 5);
    assert_eq!(t.data(start + 60_000 - 20_480, 1000), 5, "held: the segment before is not acknowledged");
    t.ack(start + 60_000 - 20_480 + 1000);
    assert_eq!(t.data(start + 60_000 - 5_000, 1000), 3);
    t.ack(start + 60_000 - 5_000 + 1000);
    assert_eq!(t.data(start + 60_000 - 2_000, 976), 2);
    // A retransmission of the response's first bytes goes in the flow's current band (that of
    // its last new segment), and is counted.
    assert_eq!(t.data(start, 1000), 2);
    let f = t.fp.flow(t.key()).unwrap().unwrap();
    assert_eq!((f.hi, f.retx_bytes), (start + 60_000 - 1_024, 1000));
    t.ack(start + 60_000 - 1_024);
    assert_eq!(t.data(start + 60_000 - 1_024, 1_024), 1);
    assert_eq!(t.send(ACK | FIN, start + 60_000, 0), 0, "a FIN is control");
    let c = t.fp.counters().unwrap();
    assert_eq!((c.known, c.attained, c.retx, c.adopted, c.rolled, c.held), (9, 0, 1, 1, 0, 2));
    // An ACK beyond what was sent, or behind, moves nothing.
    t.ack(start + 70_000);
    t.ack(start);
    assert_eq!(t.fp.flow(t.key()).unwrap().unwrap().una, start + 60_000 - 1_024);
}

#[test]
fn resends_of_the_lowest_band_go_below_it() {
    let Some(mut t) = Flow::new(SrptMode::Srpt) else { return };
    let isn = 7_000u32;
    t.send(SYN | ACK, isn, 0);
    let start = isn + 1;
    t.fp.set_response(t.key(), start, Some(start + 500_000)).unwrap();
    assert_eq!(t.data(start, 1448), 6);
    assert_eq!(t.data(start + 1448, 1448), 6);
    // The server's RTO went off while they waited here: its copies go to band 7.
    assert_eq!(t.data(start, 1448), 7);
    assert_eq!(t.data(start + 1448, 1448), 7);
    // New data goes on in band 6.
    assert_eq!(t.data(start + 2896, 1448), 6);
    // Without the resend band they stay in the lowest.
    let mut p = SrptParams::new(SrptMode::Srpt, BASE);
    p.resend_band = false;
    t.fp.set_params(&p).unwrap();
    assert_eq!(t.data(start, 1448), 6);
    // A resend near the end (band 1) keeps its band either way.
    p.resend_band = true;
    t.fp.set_params(&p).unwrap();
    t.ack(start + 4344);
    assert_eq!(t.data(start + 500_000 - 800, 800), 1);
    assert_eq!(t.data(start + 500_000 - 800, 800), 1);
    assert_eq!(t.fp.counters().unwrap().retx, 4);
}

#[test]
fn a_connection_rolls_over_to_its_next_response() {
    let Some(mut t) = Flow::new(SrptMode::Srpt) else { return };
    // Near the wrap: the first response ends past 2^32.
    let isn = u32::MAX - 3_000;
    t.send(SYN | ACK, isn, 0);
    let start = isn.wrapping_add(1);
    let end = start.wrapping_add(6_000);
    t.fp.set_response(t.key(), start, Some(end)).unwrap();
    assert_eq!(t.data(start, 1448), 4, "6,000 left");
    t.ack(start.wrapping_add(1448));
    assert_eq!(t.data(start.wrapping_add(1448), 1448), 3, "4,552 left, across the wrap");
    assert_eq!(t.data(start.wrapping_add(2896), 3104), 3, "3,104 left");
    // The next response, before the engine has its head: ranked by bytes sent from the end,
    // once the first response's last segments are acknowledged.
    assert_eq!(t.data(end, 1448), 3, "held behind the first response's last segment");
    t.ack(end.wrapping_add(1448));
    assert_eq!(t.data(end.wrapping_add(1448), 1448), 2, "1,448 sent");
    assert_eq!(t.fp.counters().unwrap().rolled, 1);
    // Its head parsed: 3,500 bytes in all, 604 of them left at the next packet.
    t.fp.set_response(t.key(), end, Some(end.wrapping_add(3_500))).unwrap();
    t.ack(end.wrapping_add(2896));
    assert_eq!(t.data(end.wrapping_add(2896), 604), 1);
    // A late publication of the first response is ignored (the flow is past it).
    t.fp.set_response(t.key(), start, Some(end)).unwrap();
    assert_eq!(t.data(end.wrapping_add(3_500), 100), 1, "the third response, 0 sent");
    let c = t.fp.counters().unwrap();
    assert_eq!((c.adopted, c.rolled), (2, 2));
}

#[test]
fn open_ended_responses_and_other_packets() {
    let Some(mut t) = Flow::new(SrptMode::Srpt) else { return };
    // First seen mid-flow (no SYN/ACK): the response is taken to start at this packet.
    assert_eq!(t.data(5_000, 1448), 1);
    assert_eq!(t.data(5_000 + 60_000, 1448), 6, "60,000 sent: the lowest data band");
    assert_eq!(t.fp.counters().unwrap().midflow, 1);
    // TCP from a port that is not a server's, and IPv6: the other band (the lowest); ARP: 0.
    let other = tcp_frame(LinkType::Ethernet, t.client.into(), t.server.into(), 1, 1, PSH | ACK, &[0; 10]);
    assert_eq!(t.fp.test_run(&other, 1).unwrap().skb.priority, BASE + 6);
    let mut v6 = vec![0u8; 14 + 40 + 20];
    v6[12..14].copy_from_slice(&[0x86, 0xdd]);
    v6[14] = 0x60;
    v6[20] = 6;
    assert_eq!(t.fp.test_run(&v6, 1).unwrap().skb.priority, BASE + 6);
    let mut arp = vec![0u8; 42];
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    assert_eq!(t.fp.test_run(&arp, 1).unwrap().skb.priority, BASE);
    // UDP (QUIC's bulk, unranked): the other band too, not control; ICMP: control.
    let quic = rlm_core::testkit::udp_frame("10.1.0.1:443".parse().unwrap(), t.client, &[0x40; 1200]);
    assert_eq!(t.fp.test_run(&quic, 1).unwrap().skb.priority, BASE + 6, "UDP is not control");
    // Its later fragments (no UDP header) with it, not ahead of it in the control band.
    let mut later = quic.clone();
    later[14 + 6..14 + 8].copy_from_slice(&185u16.to_be_bytes());
    assert_eq!(t.fp.test_run(&later, 1).unwrap().skb.priority, BASE + 6, "a later UDP fragment ranks with its first");
    let icmp = udp_as_icmp(&quic);
    assert_eq!(t.fp.test_run(&icmp, 1).unwrap().skb.priority, BASE, "ICMP is control");
    // FAIR: the same accounting, one class for everything.
    let mut p = SrptParams::new(SrptMode::Fair, BASE);
    t.fp.set_params(&p).unwrap();
    assert_eq!(t.data(5_000 + 70_000, 1448), 0);
    assert_eq!(t.fp.class_stats().unwrap()[0].packets, 3, "FAIR counts in slot 0 (with the ARP and the ICMP)");
    // Off: the priority is left alone.
    p.mode = SrptMode::Off;
    t.fp.set_params(&p).unwrap();
    let f = tcp_frame(LinkType::Ethernet, t.server.into(), t.client.into(), 5_000 + 80_000, 1, PSH | ACK, &[0; 100]);
    assert_eq!(t.fp.test_run(&f, 1).unwrap().skb.priority, 0);
    // The connection closed: both maps forget it.
    t.fp.end_flow(t.key()).unwrap();
    assert!(t.fp.flow(t.key()).unwrap().is_none());
    assert_eq!(classid(0x7e1, 0x10), BASE);
}

#[test]
fn a_restarted_classifier_takes_over_the_pinned_flows() {
    let Some(mut a) = Flow::new(SrptMode::Srpt) else { return };
    let fs = kmod_fastpath::testrun::Bpffs::mount("keep");
    let dir = fs.0.join("app-c");
    // Not a BPF filesystem: a clear error, nothing pinned.
    let e = a.fp.keep_state(&std::env::temp_dir().join("rlm-not-bpffs")).unwrap_err().to_string();
    assert!(e.contains("not on a BPF filesystem"), "{e}");
    assert_eq!(a.fp.keep_state(&dir).unwrap(), kmod_fastpath::KeptState::default(), "nothing to take over yet");
    // A 30,000-byte response: its first segment is in band 5 (20K < remaining <= 50K).
    let isn = 42_000u32;
    a.send(SYN | ACK, isn, 0);
    let start = isn + 1;
    a.fp.set_response(a.key(), start, Some(start + 30_000)).unwrap();
    assert_eq!(a.data(start, 1448), 5);
    a.ack(start + 1448);
    let before = a.fp.flow(a.key()).unwrap().unwrap();
    // rlm stops without forgetting (a crash): the pins keep the maps.
    drop(a);
    assert!(dir.join("flow_state").exists() && dir.join("resp_size").exists());

    // A classifier without the state ranks the flow's next segment as a new one: by the bytes
    // it has seen (none), band 1.
    let fresh = Flow::new(SrptMode::Srpt).unwrap();
    assert_eq!(fresh.data(start + 1448, 1448), 1);

    // The restarted one takes the flow over and goes on counting down: band 5 still, band 4
    // once 20K or less remain.
    let mut b = Flow::new(SrptMode::Srpt).unwrap();
    assert_eq!(b.fp.keep_state(&dir).unwrap(), kmod_fastpath::KeptState { responses: 1, flows: 1 });
    let got = b.fp.flow(b.key()).unwrap().unwrap();
    assert_eq!((got.start, got.end, got.hi, got.una, got.band, got.bytes), (before.start, before.end, before.hi, before.una, 5, before.bytes));
    assert_eq!(b.data(start + 1448, 1448), 5);
    b.ack(start + 2896);
    assert_eq!(b.data(start + 30_000 - 20_480, 1448), 4);
    // Its own maps are pinned now: a second restart takes over the newer state.
    let mut c = Flow::new(SrptMode::Srpt).unwrap();
    assert_eq!(c.fp.keep_state(&dir).unwrap().flows, 1);
    assert_eq!(c.fp.flow(c.key()).unwrap().unwrap().band, 4);
    // A clean exit leaves nothing.
    SrptEgress::forget_state(&dir).unwrap();
    assert!(!dir.exists());
    drop((b, c));
}

/// Without the engine's heartbeat (never beaten, or beaten longer ago than the watch) every
/// packet goes to band 0, in arrival order; beaten, the same packet is ranked.
#[test]
fn a_stale_heartbeat_puts_every_packet_in_band_zero() {
    let Some(mut t) = Flow::new(SrptMode::Srpt) else { return };
    let isn = 5_000u32;
    t.fp.set_response(t.key(), isn + 1, Some(isn + 1 + 100_000)).unwrap();
    t.fp.watch_heartbeat(Some(std::time::Duration::from_millis(1))).unwrap();
    assert_eq!(t.data(isn + 1, 1000), 0, "never beaten: band 0");
    t.fp.watch_heartbeat(Some(std::time::Duration::from_secs(60))).unwrap();
    t.fp.beat().unwrap();
    let ranked = t.data(isn + 1001, 1000);
    assert!(ranked > 0, "beaten: a data band ({ranked})");
    t.fp.watch_heartbeat(Some(std::time::Duration::from_millis(1))).unwrap();
    t.fp.beat().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(t.data(isn + 2001, 1000), 0, "stale: band 0");
    assert_eq!(t.fp.counters().unwrap().stale, 2);
}

/// The same IPv4 frame with ICMP's protocol number (the header's checksum left: the classifier
/// does not check it).
fn udp_as_icmp(frame: &[u8]) -> Vec<u8> {
    let mut f = frame.to_vec();
    f[14 + 9] = 1;
    f
}
