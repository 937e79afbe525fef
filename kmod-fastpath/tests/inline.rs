//! The inline fast path in a real kernel: client and server namespaces joined by a bridge in a
//! third, `syn_admit` on the bridge's client port and `observe` on its server port. SYNs are
//! passed, dropped and policed by the kernel from the verdicts set here, and every decision and
//! packet comes back through the ring buffer. Needs root.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::time::Duration;

use kmod_fastpath::inline::{EventKind, EventRing, InlinePath, Mode, SynAction};
use rlm_core::testkit::{tcp_frame, tcp_sack, ACK, FIN, PSH, RST, SYN};
use rlm_core::wire::LinkType;

const CLIENT: &str = "10.78.0.2";
const SERVER: &str = "10.78.0.1";

use lab_netns::is_root;

fn enter(ns: &str) {
    lab_netns::enter(ns).unwrap_or_else(|e| panic!("{e}"));
}

/// Client, bridge and server namespaces (client {CLIENT}, server {SERVER}); removed on drop.
fn lab() -> lab_netns::Bridge {
    lab_netns::Bridge::up(&format!("rlmfi{}", std::process::id()), "10.78.0").unwrap_or_else(|e| panic!("{e}"))
}

/// Connect from the client namespace; whether the handshake completed within `wait`.
fn connect(ns: &str, wait: Duration) -> bool {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        enter(&ns);
        let server: SocketAddr = format!("{SERVER}:80").parse().unwrap();
        TcpStream::connect_timeout(&server, wait).is_ok()
    })
    .join()
    .unwrap()
}

/// Everything waiting in the ring: (kind, frame's TCP flags byte).
fn drain(ring: &mut EventRing) -> Vec<(EventKind, u8)> {
    let mut out = Vec::new();
    ring.drain(usize::MAX, |e| {
        let e = e.expect("a well-formed record");
        // Ethernet (14) + IPv4 without options (20) + 13 bytes into TCP.
        out.push((e.kind, e.frame.get(14 + 20 + 13).copied().unwrap_or(0)));
    });
    out
}

#[test]
fn syns_are_admitted_dropped_and_policed_in_the_kernel_and_reported() {
    if !is_root() {
        eprintln!("skipped: needs root (network namespaces, eBPF)");
        return;
    }
    let lab = lab();
    // The server: accepts whatever completes a handshake.
    let s = lab.server.clone();
    std::thread::spawn(move || {
        enter(&s);
        let l = TcpListener::bind(format!("{SERVER}:80")).unwrap();
        for c in l.incoming().flatten() {
            drop(c);
        }
    });
    std::thread::sleep(Duration::from_millis(200));

    enter(&lab.bridge);
    let mut path = InlinePath::attach("bc", "bs", &[80], 0x80_0000, kmod_fastpath::AttachMode::Auto).expect("attach the fast path");
    let mut ring = path.take_events().unwrap();
    let client: Ipv4Addr = CLIENT.parse().unwrap();
    let server: SocketAddrV4 = format!("{SERVER}:80").parse().unwrap();
    let quick = Duration::from_millis(400);

    // Before the engine's first heartbeat the programs act on nothing: a SYN passes unreported.
    path.set_mode(Mode::PassAll, 1).unwrap();
    assert!(connect(&lab.client, Duration::from_secs(2)));
    std::thread::sleep(Duration::from_millis(100));
    assert!(drain(&mut ring).is_empty(), "nothing reported before the first beat");
    let stale = path.counters().unwrap().stale;
    assert!(stale >= 3, "the SYN, the SYN/ACK and the ACK passed as stale: {stale}");

    // No rule acts at the SYN: passed and reported, with the SYN/ACK (come in from the server)
    // and the handshake's ACK (leaving toward it).
    path.beat().unwrap();
    assert!(connect(&lab.client, Duration::from_secs(2)));
    std::thread::sleep(Duration::from_millis(100));
    let ev = drain(&mut ring);
    assert!(ev.iter().any(|(k, f)| *k == EventKind::SynPassed && *f & (SYN | ACK) == SYN), "{ev:?}");
    assert!(ev.iter().any(|(k, f)| *k == EventKind::Observed { from_server: true } && *f & (SYN | ACK) == SYN | ACK), "{ev:?}");
    assert!(ev.iter().any(|(k, f)| *k == EventKind::Observed { from_server: false } && *f == ACK), "the handshake's ACK: {ev:?}");
    assert!(!ev.iter().any(|(k, f)| *k == EventKind::Observed { from_server: false } && *f & SYN != 0), "{ev:?}");

    // A drop verdict of the current generation: the kernel drops the SYN and says which rule.
    path.set_mode(Mode::Verdicts, 7).unwrap();
    path.set_syn_verdict(client, server, 7, SynAction::Drop { rule: 3 }).unwrap();
    path.beat().unwrap();
    assert!(!connect(&lab.client, quick), "the SYN was dropped");
    let ev = drain(&mut ring);
    assert!(ev.iter().any(|(k, _)| *k == EventKind::SynDropped { rule: 3, limited: false }), "{ev:?}");
    assert!(!ev.iter().any(|(k, _)| matches!(k, EventKind::Observed { .. })), "nothing reached the server: {ev:?}");
    let dropped = path.counters().unwrap().syn_dropped;
    assert!(dropped >= 1);

    // The engine stops beating (hung, stopped, far behind): past HEARTBEAT_STALE the same
    // verdict no longer applies; the SYN passes, unmarked and unreported.
    std::thread::sleep(kmod_fastpath::HEARTBEAT_STALE + Duration::from_millis(100));
    let stale = path.counters().unwrap().stale;
    assert!(connect(&lab.client, Duration::from_secs(2)), "a stale engine's DROP no longer applies");
    assert!(drain(&mut ring).is_empty());
    assert!(path.counters().unwrap().stale >= stale + 3);
    assert_eq!(path.counters().unwrap().syn_dropped, dropped);
    // It beats again: the verdict applies again.
    path.beat().unwrap();
    assert!(!connect(&lab.client, quick), "dropped again");
    assert_eq!(path.counters().unwrap().syn_dropped, dropped + 1);
    drain(&mut ring);

    // A verdict of another generation does not apply: the SYN is marked for the queue (no queue
    // rule here, so it passes) and not reported (the engine will see it from the queue).
    path.set_mode(Mode::Verdicts, 8).unwrap();
    path.beat().unwrap();
    let queued = path.counters().unwrap().syn_queued;
    assert!(connect(&lab.client, Duration::from_secs(2)));
    assert!(path.counters().unwrap().syn_queued > queued);
    let ev = drain(&mut ring);
    assert!(!ev.iter().any(|(k, _)| matches!(k, EventKind::SynPassed | EventKind::SynDropped { .. })), "{ev:?}");

    // LIMIT SYN: a bucket of 2 that refills at one token in 100 s. Two connections pass, the
    // third SYN is dropped as limited.
    path.set_bucket(5, 0.01, 2).unwrap();
    path.set_syn_verdict(client, server, 8, SynAction::Limit { rule: 4, slot: 5 }).unwrap();
    path.beat().unwrap();
    assert!(connect(&lab.client, Duration::from_secs(2)));
    assert!(connect(&lab.client, Duration::from_secs(2)));
    assert!(!connect(&lab.client, quick), "the bucket is empty");
    let ev = drain(&mut ring);
    assert_eq!(ev.iter().filter(|(k, _)| *k == EventKind::SynPassed).count(), 2, "{ev:?}");
    assert!(ev.iter().any(|(k, _)| *k == EventKind::SynDropped { rule: 4, limited: true }), "{ev:?}");
    assert_eq!(path.counters().unwrap().ring_full, 0);

    // Detached with the handle: SYNs pass untouched again.
    drop(ring);
    drop(path);
    assert!(connect(&lab.client, Duration::from_secs(2)));
}

/// (length of the report's frame, length on the wire) of each report waiting in the ring.
fn lengths(ring: &mut EventRing) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    ring.drain(usize::MAX, |e| {
        let e = e.expect("a well-formed record");
        out.push((e.frame.len(), e.wire_len as usize));
    });
    out
}

/// The queue mark the test-run tests load the fast path with.
const MARK: u32 = 0x80_0000;

/// The fast path loaded for test runs, acting whatever its heartbeat, and its ring; None (the
/// test skipped) without root.
fn loaded() -> Option<(InlinePath, EventRing)> {
    if !is_root() {
        eprintln!("skipped: needs root (eBPF)");
        return None;
    }
    let mut path = InlinePath::load(&[80], MARK).expect("load the fast path");
    path.watch_heartbeat(None).unwrap();
    let ring = path.take_events().unwrap();
    Some((path, ring))
}

/// The same decisions without a wire: `syn_admit` run on crafted frames in the kernel
/// (`BPF_PROG_TEST_RUN`), as the SYN-drop benchmark times it. The verdict, the queue mark in
/// the `skb` and the report are each checked.
#[test]
fn syn_admit_decides_crafted_frames_in_a_test_run() {
    let Some((mut path, mut ring)) = loaded() else { return };
    let server: SocketAddrV4 = "10.1.0.1:80".parse().unwrap();
    let (low, high, new) = (Ipv4Addr::new(10, 5, 0, 2), Ipv4Addr::new(10, 4, 0, 2), Ipv4Addr::new(10, 6, 0, 2));
    let syn = |c: Ipv4Addr, port: u16| {
        tcp_frame(
            LinkType::Ethernet,
            SocketAddr::V4(SocketAddrV4::new(c, 40000)),
            SocketAddr::V4(SocketAddrV4::new(*server.ip(), port)),
            1,
            1,
            SYN,
            &[],
        )
    };
    path.set_mode(Mode::Verdicts, 5).unwrap();
    path.set_syn_verdict(low, server, 5, SynAction::Drop { rule: 3 }).unwrap();
    path.set_syn_verdict(high, server, 5, SynAction::Pass).unwrap();
    path.set_syn_verdict(new, server, 4, SynAction::Drop { rule: 9 }).unwrap();

    let r = path.test_run(true, &syn(low, 80), 1).unwrap();
    assert_eq!((r.retval, r.skb.mark & MARK), (2, 0), "dropped (TC_ACT_SHOT), not queued");
    assert_eq!(drain(&mut ring), vec![(EventKind::SynDropped { rule: 3, limited: false }, SYN)]);

    let r = path.test_run(true, &syn(high, 80), 1).unwrap();
    assert_eq!((r.retval, r.skb.mark & MARK), (0, 0), "passed, not queued");
    assert_eq!(drain(&mut ring), vec![(EventKind::SynPassed, SYN)]);

    // A verdict of an older generation: queued for the engine, not reported.
    let r = path.test_run(true, &syn(new, 80), 1).unwrap();
    assert_eq!((r.retval, r.skb.mark & MARK), (0, MARK));
    assert!(drain(&mut ring).is_empty());

    // Not a server port, or not a SYN: untouched and unreported.
    let r = path.test_run(true, &syn(low, 8080), 1).unwrap();
    assert_eq!((r.retval, r.skb.mark & MARK), (0, 0));
    let ack = tcp_frame(LinkType::Ethernet, SocketAddr::V4(SocketAddrV4::new(low, 40000)), server.into(), 2, 1, ACK, &[]);
    assert_eq!(path.test_run(true, &ack, 1).unwrap().retval, 0);
    assert!(drain(&mut ring).is_empty());
    let c = path.counters().unwrap();
    assert_eq!((c.syn_dropped, c.syn_passed, c.syn_queued, c.ring_full), (1, 1, 1, 0));
}

/// RFC 1858's tiny fragments: a SYN a client cuts into IPv4 fragments whose first cannot hold
/// the TCP header (or whose second starts 8 bytes in, over the first's flags) would be made only
/// at the server's reassembly, past every decision (tc runs before it). Both are dropped and
/// counted; a fragmented SYN whose first fragment holds its header is decided as a SYN, and a
/// later fragment past the header passes.
#[test]
fn tiny_fragments_cannot_carry_a_syn_past_its_verdict() {
    let Some((mut path, mut ring)) = loaded() else { return };
    let server: SocketAddrV4 = "10.1.0.1:80".parse().unwrap();
    let low = Ipv4Addr::new(10, 5, 0, 2);
    path.set_mode(Mode::Verdicts, 5).unwrap();
    path.set_syn_verdict(low, server, 5, SynAction::Drop { rule: 3 }).unwrap();
    // A SYN with 16 bytes of data (TCP Fast Open's kind), so that it can be cut past its header.
    let syn = tcp_frame(LinkType::Ethernet, SocketAddr::V4(SocketAddrV4::new(low, 40000)), server.into(), 1, 1, SYN, &[7; 16]);
    let (eth_ip, tcp) = syn.split_at(14 + 20);
    assert_eq!(tcp.len(), 20 + 16, "a TCP header without options");
    // One fragment of `syn`'s TCP bytes: those from `from`, fragment offset `from / 8`, with
    // more fragments to come when `more`.
    let fragment = |from: usize, to: usize, more: bool| {
        let mut f = eth_ip.to_vec();
        f.extend_from_slice(&tcp[from..to]);
        let tot_len = (20 + to - from) as u16;
        f[14 + 2..14 + 4].copy_from_slice(&tot_len.to_be_bytes());
        let frag = (from / 8) as u16 | if more { 0x2000 } else { 0 };
        f[14 + 6..14 + 8].copy_from_slice(&frag.to_be_bytes());
        f
    };
    let tiny_first = fragment(0, 8, true);
    let over_flags = fragment(8, tcp.len(), false);
    assert_eq!(path.test_run(true, &tiny_first, 1).unwrap().retval, 2, "a first fragment too short for the TCP header: dropped");
    assert_eq!(path.test_run(true, &over_flags, 1).unwrap().retval, 2, "a fragment at offset 8 bytes: dropped");
    // The same SYN cut past its header: its first fragment is a SYN like any, dropped by the
    // verdict and reported; the rest passes.
    let (whole_first, rest) = (fragment(0, 24, true), fragment(24, 36, false));
    assert_eq!(path.test_run(true, &whole_first, 1).unwrap().retval, 2, "the verdict's drop");
    assert_eq!(drain(&mut ring), vec![(EventKind::SynDropped { rule: 3, limited: false }, SYN)]);
    assert_eq!(path.test_run(true, &rest, 1).unwrap().retval, 0, "a later fragment past the header passes");
    let c = path.counters().unwrap();
    assert_eq!((c.tiny_frag, c.syn_dropped), (2, 1), "{c:?}");
}

/// A client's data frame longer than 2 KiB (a request head in a GRO super-frame) is copied
/// whole, up to 16 KiB, over IPv6 as over IPv4 (IPv6's payload was not computed, so its frames
/// were cut at 2 KiB).
#[test]
fn a_long_request_frame_is_copied_whole_over_ipv4_and_ipv6() {
    let Some((path, mut ring)) = loaded() else { return };
    for (client, server) in [("10.4.0.2:40000", "10.1.0.1:80"), ("[2001:db8::2]:40000", "[2001:db8::1]:80")] {
        let head = format!("GET / HTTP/1.1\r\nHost: shop\r\nX-Pad: {}\r\n\r\n", "p".repeat(2950));
        let frame = tcp_frame(LinkType::Ethernet, client.parse().unwrap(), server.parse().unwrap(), 1, 1, PSH | ACK, head.as_bytes());
        assert!(frame.len() > 3000);
        path.test_run(false, &frame, 1).unwrap();
        assert_eq!(lengths(&mut ring), vec![(frame.len(), frame.len())], "{client}: copied whole");
    }
}

/// A server's data super-frame of BIG TCP (IPv4 GRO past 64 KiB) carries a total length of 0:
/// its payload is the skb's, so it is reported as data, not skipped as a bare ACK.
#[test]
fn a_big_tcp_frame_with_a_total_length_of_zero_is_data() {
    let Some((path, mut ring)) = loaded() else { return };
    let mut frame = tcp_frame(LinkType::Ethernet, "10.1.0.1:80".parse().unwrap(), "10.4.0.2:40000".parse().unwrap(), 1, 1, ACK, &[b'x'; 1000]);
    frame[14 + 2..14 + 4].copy_from_slice(&0u16.to_be_bytes());
    path.test_run_from_server(&frame).unwrap();
    assert_eq!(lengths(&mut ring), vec![(frame.len(), frame.len())], "reported as data");
    assert_eq!(path.counters().unwrap().ack_skipped, 0);
}

/// A client's bare ACK goes on to the engine when it carries a D-SACK (server bytes it received
/// twice: a retransmission of them was spurious, and the engine takes back the end it gave the
/// response), not when it carries a plain SACK or nothing.
#[test]
fn a_clients_d_sack_is_reported_and_its_other_bare_acks_are_not() {
    let Some((path, mut ring)) = loaded() else { return };
    let (c, s): (SocketAddr, SocketAddr) = ("10.4.0.2:40000".parse().unwrap(), "10.1.0.1:80".parse().unwrap());
    let sack = tcp_sack(LinkType::Ethernet, c, s, 1, 5_000, &[(6_000, 6_500)]);
    let sacks = tcp_sack(LinkType::Ethernet, c, s, 1, 5_000, &[(6_000, 6_500), (7_000, 7_500), (8_000, 8_500)]);
    let bare = tcp_frame(LinkType::Ethernet, c, s, 1, 5_000, ACK, &[]);
    for f in [&sack, &sacks, &bare] {
        path.test_run(false, f, 1).unwrap();
    }
    assert_eq!(lengths(&mut ring), vec![], "plain SACKs and bare ACKs are skipped");
    assert_eq!(path.counters().unwrap().ack_skipped, 3);
    let below = tcp_sack(LinkType::Ethernet, c, s, 1, 5_000, &[(4_000, 4_500)]);
    let within = tcp_sack(LinkType::Ethernet, c, s, 1, 5_000, &[(6_000, 6_500), (5_500, 7_000)]);
    let wrapped = tcp_sack(LinkType::Ethernet, c, s, 1, 100, &[(u32::MAX - 99, 50)]);
    for f in [&below, &within, &wrapped] {
        path.test_run(false, f, 1).unwrap();
    }
    assert_eq!(lengths(&mut ring), vec![(below.len(), below.len()), (within.len(), within.len()), (wrapped.len(), wrapped.len())]);
    assert_eq!(path.counters().unwrap().ack_skipped, 3);
}

/// A reader asleep on a ring is woken once a quarter of that ring waits, whatever the ring's
/// size: with 1 MiB rings (`[ebpf] ring_mb = 1`) the quarter is 256 KiB (the thresholds were the
/// compiled-in 16 MiB ring's, so a small ring was never woken by what waited in it, only
/// drained by the reader's timer).
#[test]
fn a_small_ring_wakes_its_reader_at_a_quarter_of_its_own_size() {
    if !is_root() {
        eprintln!("skipped: needs root (eBPF)");
        return;
    }
    let mut path = InlinePath::load_sharded(&[80], MARK, kmod_fastpath::inline::Rings { count: 1, bytes: 1 << 20 }).expect("load with a 1 MiB ring");
    path.watch_heartbeat(None).unwrap();
    let mut ring = path.take_events().unwrap();
    let server: SocketAddrV4 = "10.1.0.1:80".parse().unwrap();
    let client = Ipv4Addr::new(10, 4, 0, 2);
    path.set_mode(Mode::Verdicts, 5).unwrap();
    path.set_syn_verdict(client, server, 5, SynAction::Pass).unwrap();
    let syn = tcp_frame(LinkType::Ethernet, SocketAddr::V4(SocketAddrV4::new(client, 40000)), server.into(), 1, 1, SYN, &[]);
    // What one report takes in the ring.
    path.test_run(true, &syn, 1).unwrap();
    let one = path.rings_waiting()[0].0;
    assert!(one > 0, "a passed SYN is reported");
    assert_eq!(drain(&mut ring).len(), 1);
    let fd = std::os::fd::AsRawFd::as_raw_fd(&ring);
    let asleep = std::thread::spawn(move || {
        let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        let t = std::time::Instant::now();
        // SAFETY: one pollfd, the ring's descriptor, open while the test holds the ring.
        let n = unsafe { libc::poll(&mut p, 1, 5_000) };
        (n, t.elapsed())
    });
    std::thread::sleep(Duration::from_millis(300));
    // A third of the ring: past its quarter, short of full.
    let reports = ((1u64 << 20) / 3 / one) as u32;
    path.test_run(true, &syn, reports).unwrap();
    let (waiting, bytes) = path.rings_waiting()[0];
    assert!(waiting >= u64::from(bytes) / 4 && path.counters().unwrap().ring_full == 0, "the regime: {waiting} of {bytes} bytes waiting, none lost");
    let (n, slept) = asleep.join().unwrap();
    assert!(n == 1 && slept < Duration::from_secs(3), "the reader woken ({n}) after {slept:?}");
    drop(ring);
}

/// Held SYNs (`set_hold_syns`): a SYN without a verdict is reported whole, as a held SYN, and
/// dropped (the engine sends it on), not marked; one with a verdict is still decided in the
/// kernel; one too long for a record passes undecided and is counted; once a held SYN has
/// waited longer than `HOLD_WAIT`, the next pass undecided until the reader has taken it.
#[test]
fn a_syn_without_a_verdict_is_held_whole_for_the_engine() {
    let Some((mut path, mut ring)) = loaded() else { return };
    let server: SocketAddrV4 = "10.1.0.1:80".parse().unwrap();
    let (known, new) = (Ipv4Addr::new(10, 4, 0, 2), Ipv4Addr::new(10, 6, 0, 2));
    let syn = |c: Ipv4Addr, payload: &[u8]| {
        tcp_frame(LinkType::Ethernet, SocketAddr::V4(SocketAddrV4::new(c, 40000)), SocketAddr::V4(server), 1, 1, SYN, payload)
    };
    path.set_mode(Mode::Verdicts, 5).unwrap();
    path.set_syn_verdict(known, server, 5, SynAction::Pass).unwrap();
    path.set_hold_syns(true).unwrap();

    let frame = syn(new, &[]);
    let r = path.test_run(true, &frame, 1).unwrap();
    assert_eq!((r.retval, r.skb.mark & MARK), (2, 0), "held: dropped here (TC_ACT_SHOT), not marked");
    let mut held = Vec::new();
    ring.drain(usize::MAX, |e| {
        let e = e.expect("a well-formed record");
        held.push((e.kind, e.whole_frame().into_owned(), e.ts_ns));
    });
    let first_ts = held[0].2;
    assert_eq!(held.into_iter().map(|(k, f, _)| (k, f)).collect::<Vec<_>>(), vec![(EventKind::SynHeld { vlan: None }, frame)], "reported whole");

    let r = path.test_run(true, &syn(known, &[]), 1).unwrap();
    assert_eq!((r.retval, r.skb.mark & MARK), (0, 0), "a verdict still decides in the kernel");
    assert_eq!(drain(&mut ring), vec![(EventKind::SynPassed, SYN)]);

    // A SYN longer than a record (data on the SYN): passed undecided, unreported, counted.
    let r = path.test_run(true, &syn(new, &[0u8; 2100]), 1).unwrap();
    assert_eq!((r.retval, r.skb.mark & MARK), (0, 0));
    assert!(drain(&mut ring).is_empty());

    // The first held SYN has not been taken for longer than HOLD_WAIT (the reader behind or
    // gone): the next pass undecided, until the reader says it took it.
    std::thread::sleep(kmod_fastpath::inline::HOLD_WAIT + Duration::from_millis(10));
    let r = path.test_run(true, &syn(new, &[]), 1).unwrap();
    assert_eq!((r.retval, r.skb.mark & MARK), (0, 0), "passed undecided: the reader is late");
    assert!(drain(&mut ring).is_empty());
    path.held_taken(first_ts).unwrap();
    let r = path.test_run(true, &syn(new, &[]), 1).unwrap();
    assert_eq!(r.retval, 2, "held again once the reader took the held one");
    let mut second_ts = 0;
    ring.drain(usize::MAX, |e| second_ts = e.expect("a record").ts_ns);
    // The reader keeps taking them (behind, but going): none is late, however long ago the
    // first was.
    path.held_taken(second_ts).unwrap();
    std::thread::sleep(kmod_fastpath::inline::HOLD_WAIT + Duration::from_millis(10));
    let r = path.test_run(true, &syn(new, &[]), 1).unwrap();
    assert_eq!(r.retval, 2, "held: nothing was waiting");
    assert_eq!(drain(&mut ring), vec![(EventKind::SynHeld { vlan: None }, SYN)]);

    // Holding off: marked for the queue as before.
    path.set_hold_syns(false).unwrap();
    let r = path.test_run(true, &syn(new, &[]), 1).unwrap();
    assert_eq!((r.retval, r.skb.mark & MARK), (0, MARK));
    assert!(drain(&mut ring).is_empty());
    let c = path.counters().unwrap();
    assert_eq!((c.syn_held, c.hold_failed, c.hold_late, c.syn_queued, c.syn_passed), (3, 1, 1, 1, 1));
}

/// The heartbeat and the side, in test runs: a freshly loaded fast path acts on nothing until
/// the engine beats, and again once its beat is older than the watch; `observe` says whether a
/// frame came in at the server port or left it.
#[test]
fn programs_fail_open_on_a_stale_heartbeat_and_report_the_side() {
    if !is_root() {
        eprintln!("skipped: needs root (eBPF)");
        return;
    }
    const MARK: u32 = 0x80_0000;
    let mut path = InlinePath::load(&[80], MARK).expect("load the fast path");
    let mut ring = path.take_events().unwrap();
    let server: SocketAddrV4 = "10.1.0.1:80".parse().unwrap();
    let client = SocketAddrV4::new(Ipv4Addr::new(10, 5, 0, 2), 40000);
    let syn = tcp_frame(LinkType::Ethernet, client.into(), server.into(), 1, 1, SYN, &[]);
    path.set_mode(Mode::Verdicts, 5).unwrap();
    path.set_syn_verdict(*client.ip(), server, 5, SynAction::Drop { rule: 3 }).unwrap();

    // Never beaten: passed, unmarked, unreported, counted.
    let r = path.test_run(true, &syn, 1).unwrap();
    assert_eq!((r.retval, r.skb.mark & MARK), (0, 0));
    assert!(drain(&mut ring).is_empty());
    assert_eq!((path.counters().unwrap().stale, path.counters().unwrap().syn_dropped), (1, 0));
    // A server's data: not reported either, nor marked when responses are queued.
    path.set_queue_responses(true).unwrap();
    let data = tcp_frame(LinkType::Ethernet, server.into(), client.into(), 1, 1, PSH | ACK, b"HTTP/1.1 200 OK\r\n\r\n");
    let r = path.test_run_from_server(&data).unwrap();
    assert_eq!((r.retval, r.skb.mark & MARK), (0, 0));
    path.set_queue_responses(false).unwrap();
    assert!(drain(&mut ring).is_empty());
    assert_eq!(path.counters().unwrap().stale, 2);

    // Beaten: the verdict applies.
    path.beat().unwrap();
    assert_eq!(path.test_run(true, &syn, 1).unwrap().retval, 2, "TC_ACT_SHOT");
    assert_eq!(drain(&mut ring), vec![(EventKind::SynDropped { rule: 3, limited: false }, SYN)]);

    // The side of what observe reports.
    path.test_run_from_server(&data).unwrap();
    let request = tcp_frame(LinkType::Ethernet, client.into(), server.into(), 1, 1, PSH | ACK, b"GET / HTTP/1.1\r\n\r\n");
    path.test_run(false, &request, 1).unwrap();
    assert_eq!(
        drain(&mut ring),
        vec![(EventKind::Observed { from_server: true }, PSH | ACK), (EventKind::Observed { from_server: false }, PSH | ACK)]
    );

    // A handshake whose ACK was lost: the client's first data carries it, and its entry goes,
    // so that a later bare ACK with that number is a duplicate, not reported.
    let synack = tcp_frame(LinkType::Ethernet, server.into(), client.into(), 7_000, 2, SYN | ACK, &[]);
    path.test_run_from_server(&synack).unwrap();
    let first_data = tcp_frame(LinkType::Ethernet, client.into(), server.into(), 2, 7_001, PSH | ACK, b"GET / HTTP/1.1\r\n\r\n");
    path.test_run(false, &first_data, 1).unwrap();
    let skipped = path.counters().unwrap().ack_skipped;
    let late_ack = tcp_frame(LinkType::Ethernet, client.into(), server.into(), 20, 7_001, ACK, &[]);
    path.test_run(false, &late_ack, 1).unwrap();
    assert_eq!(path.counters().unwrap().ack_skipped, skipped + 1, "the handshake's entry went with the data");
    assert_eq!(
        drain(&mut ring),
        vec![(EventKind::Observed { from_server: true }, SYN | ACK), (EventKind::Observed { from_server: false }, PSH | ACK)]
    );

    // A 1 ms watch, beaten, then 20 ms of silence: stale again.
    path.watch_heartbeat(Some(Duration::from_millis(1))).unwrap();
    path.beat().unwrap();
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(path.test_run(true, &syn, 1).unwrap().retval, 0, "a stale engine's DROP does not apply");
    path.test_run_from_server(&data).unwrap();
    assert!(drain(&mut ring).is_empty());
    let c = path.counters().unwrap();
    assert_eq!((c.stale, c.syn_dropped), (4, 1));
}

/// A rejected connection (REJECT: the engine answered the request and reset the server): while
/// requests are queued, each of the client's segments of it goes through the queue, not only
/// those with payload, and the server's are dropped; a new SYN on its ports ends it. Another
/// connection of the same client is untouched.
#[test]
fn a_rejected_connection_is_the_engines_until_a_new_syn() {
    if !is_root() {
        eprintln!("skipped: needs root (eBPF)");
        return;
    }
    const MARK: u32 = 0x80_0000;
    let mut path = InlinePath::load(&[80], MARK).expect("load the fast path");
    let _ring = path.take_events().unwrap();
    path.beat().unwrap();
    path.set_mode(Mode::PassAll, 1).unwrap();
    let server: SocketAddrV4 = "10.1.0.1:80".parse().unwrap();
    let client = SocketAddrV4::new(Ipv4Addr::new(10, 5, 0, 2), 40000);
    let other = SocketAddrV4::new(Ipv4Addr::new(10, 5, 0, 2), 40001);
    let fin = tcp_frame(LinkType::Ethernet, client.into(), server.into(), 100, 900, FIN | ACK, &[]);
    let other_fin = tcp_frame(LinkType::Ethernet, other.into(), server.into(), 100, 900, FIN | ACK, &[]);
    let from_server = tcp_frame(LinkType::Ethernet, server.into(), client.into(), 900, 100, RST, &[]);
    let marked = |path: &InlinePath, client_side: bool, frame: &[u8]| {
        let r = if client_side { path.test_run(true, frame, 1) } else { path.test_run_from_server(frame) }.unwrap();
        (r.retval, r.skb.mark & MARK != 0)
    };

    // Not rejected: a bare FIN passes unmarked, the server's RST passes.
    path.set_queue_requests(true).unwrap();
    assert_eq!(marked(&path, true, &fin), (0, false));
    assert_eq!(marked(&path, false, &from_server), (0, false));

    path.set_rejected(client, server).unwrap();
    assert_eq!(marked(&path, true, &fin), (0, true), "the client's FIN goes to the engine");
    assert_eq!(marked(&path, false, &from_server), (2, false), "TC_ACT_SHOT: the server's segment is dropped");
    assert_eq!(marked(&path, true, &other_fin), (0, false), "another connection is not touched");
    let c = path.counters().unwrap();
    assert_eq!((c.rej_queued, c.rej_dropped), (1, 1));

    // Without queued requests (no REJECT in force) the entry does nothing.
    path.set_queue_requests(false).unwrap();
    assert_eq!(marked(&path, true, &fin), (0, false));
    assert_eq!(marked(&path, false, &from_server), (0, false));
    path.set_queue_requests(true).unwrap();

    // A new SYN on its ports: a new connection, passed on as before.
    let syn = tcp_frame(LinkType::Ethernet, client.into(), server.into(), 5_000, 0, SYN, &[]);
    assert_eq!(path.test_run(true, &syn, 1).unwrap().retval, 0);
    assert_eq!(marked(&path, true, &fin), (0, false));
    assert_eq!(marked(&path, false, &from_server), (0, false));
}

/// Body cuts (`set_body_unread`): the server's segments of a connection that end by the
/// published end of a body are reported cut to their headers with their whole length on the
/// wire, and counted; the one that reaches the end goes last, the entry with it, and the next
/// are whole again; a segment running past the end is whole and ends the entry; the client's
/// segments and other connections are untouched.
#[test]
fn a_body_the_engine_does_not_read_crosses_as_its_headers() {
    let Some((mut path, mut ring)) = loaded() else { return };
    path.beat().unwrap();
    let (client, other, server): (SocketAddrV4, SocketAddrV4, SocketAddrV4) =
        ("10.4.0.2:40000".parse().unwrap(), "10.4.0.2:40001".parse().unwrap(), "10.1.0.1:80".parse().unwrap());
    let from_server =
        |to: SocketAddrV4, seq: u32, len: usize| tcp_frame(LinkType::Ethernet, server.into(), to.into(), seq, 1, PSH | ACK, &vec![b'x'; len]);
    let headers = 14 + 20 + 20;
    path.set_body_unread(client, server, 13_000).unwrap();
    for (seq, len) in [(10_000, 1448), (11_448, 1448), (12_896, 104), (13_000, 100)] {
        path.test_run_from_server(&from_server(client, seq, len)).unwrap();
    }
    // Another connection and the client's own data: whole.
    path.test_run_from_server(&from_server(other, 10_000, 1448)).unwrap();
    let request = tcp_frame(LinkType::Ethernet, client.into(), server.into(), 1, 10_000, PSH | ACK, b"GET / HTTP/1.1\r\n\r\n");
    path.test_run(false, &request, 1).unwrap();
    let w = |len: usize| headers + len;
    // The first two cut and not reported at all; the one that ends the range cut and reported.
    assert_eq!(lengths(&mut ring), vec![(headers, w(104)), (w(100), w(100)), (w(1448), w(1448)), (request.len(), request.len())]);
    let c = path.counters().unwrap();
    assert_eq!((c.body_cut, c.body_silent), (3, 2));
    // Within a range, the segment that crosses a MiB of the sequence space is reported (cut).
    path.set_body_unread(client, server, 3 << 20).unwrap();
    for seq in [(1 << 20) - 3000, (1 << 20) - 1552, (1 << 20) - 104, (1 << 20) + 1344] {
        path.test_run_from_server(&from_server(client, seq, 1448)).unwrap();
    }
    assert_eq!(lengths(&mut ring), vec![(headers, w(1448))]);
    let c = path.counters().unwrap();
    assert_eq!((c.body_cut, c.body_silent), (7, 5));
    path.set_body_unread(client, server, 0).unwrap();
    path.test_run_from_server(&from_server(client, 0, 10)).unwrap();
    lengths(&mut ring);

    // A segment running past the end (the next response's head in it): whole, and the entry
    // goes; a retransmission before the end after that is whole too.
    path.set_body_unread(client, server, 20_000).unwrap();
    path.test_run_from_server(&from_server(client, 19_900, 200)).unwrap();
    path.test_run_from_server(&from_server(client, 18_000, 1000)).unwrap();
    assert_eq!(lengths(&mut ring), vec![(w(200), w(200)), (w(1000), w(1000))]);
    assert_eq!(path.counters().unwrap().body_cut, 7);
}

/// `end_body_unread`: a range written after its body's segments passed goes when the engine
/// says the body is over, and only if it still ends where that body ended (a later response's
/// stays); a retransmission of the body's bytes then crosses whole.
#[test]
fn a_body_over_ends_its_range_and_no_other() {
    let Some((mut path, mut ring)) = loaded() else { return };
    path.beat().unwrap();
    let (client, server): (SocketAddrV4, SocketAddrV4) = ("10.4.0.3:40000".parse().unwrap(), "10.1.0.1:80".parse().unwrap());
    let from_server = |seq: u32, len: usize| tcp_frame(LinkType::Ethernet, server.into(), client.into(), seq, 1, PSH | ACK, &vec![b'x'; len]);
    let whole = 14 + 20 + 20 + 1000;
    // The segment that reaches the range's end is reported cut (and ends the range).
    path.set_body_unread(client, server, 13_000).unwrap();
    path.end_body_unread(client, server, 14_000).unwrap();
    path.test_run_from_server(&from_server(12_000, 1000)).unwrap();
    assert_eq!(lengths(&mut ring), vec![(14 + 20 + 20, whole)], "another end: the range stays");
    path.set_body_unread(client, server, 13_000).unwrap();
    path.end_body_unread(client, server, 13_000).unwrap();
    path.test_run_from_server(&from_server(12_000, 1000)).unwrap();
    assert_eq!(lengths(&mut ring), vec![(whole, whole)], "the range went");
    // Nothing there: nothing to do, no error.
    path.end_body_unread(client, server, 13_000).unwrap();
}

/// The kernel reads a response head itself when its segment is longer than a plain report: a
/// 200 or 206 with a Content-Length and nothing that makes the engine read the body (an image
/// here) is reported cut at the head's end, and its body's later segments cut to their headers
/// at once, without the engine's word; HTML, CSS, a chunked body, a 304, a head longer than the
/// kernel reads or one not whole in its segment are reported as before (the first 16 KiB) and
/// leave the cut to the engine. A head is never cut, even inside a body's range. A head alone
/// in a short pushed segment is read too.
#[test]
fn the_kernel_reads_a_response_head_and_cuts_its_body_at_once() {
    let Some((mut path, mut ring)) = loaded() else { return };
    path.beat().unwrap();
    let server: SocketAddrV4 = "10.1.0.1:80".parse().unwrap();
    let headers = 14 + 20 + 20;
    let segment =
        |client: SocketAddrV4, seq: u32, payload: &[u8]| tcp_frame(LinkType::Ethernet, server.into(), client.into(), seq, 1, PSH | ACK, payload);
    // A 21,000-byte image whose head and first 3,000 bytes come in one segment (longer than a
    // plain report: a test run takes frames of less than a page).
    let head = b"HTTP/1.1 200 OK\r\nServer: t\r\ncontent-type: image/png\r\nContent-Length:   21000\r\n\r\n";
    let first = [&head[..], &[b'x'; 3000][..]].concat();
    let client: SocketAddrV4 = "10.4.0.3:40000".parse().unwrap();
    path.test_run_from_server(&segment(client, 1_000, &first)).unwrap();
    let mut seq = 1_000 + first.len() as u32;
    for _ in 0..6 {
        path.test_run_from_server(&segment(client, seq, &[b'x'; 3_000])).unwrap();
        seq += 3_000;
    }
    // The next response's head: whole (a plain report), and nothing left armed.
    let not_modified = b"HTTP/1.1 304 Not Modified\r\n\r\n";
    path.test_run_from_server(&segment(client, seq, not_modified)).unwrap();
    // The body's segments all cut, the last reported (the others are not: body_silent).
    let want =
        vec![(headers + head.len(), headers + first.len()), (headers, headers + 3_000), (headers + not_modified.len(), headers + not_modified.len())];
    assert_eq!(lengths(&mut ring), want);
    let c = path.counters().unwrap();
    assert_eq!((c.body_armed, c.body_cut, c.body_silent), (1, 6, 5));

    // What the engine reads, or what the kernel does not judge: reported as before, not armed.
    let html = b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: 9000\r\n\r\n".to_vec();
    let css = b"HTTP/1.1 200 OK\r\nContent-Type: Text/CSS\r\nContent-Length: 9000\r\n\r\n".to_vec();
    let chunked = b"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    let redirect = b"HTTP/1.1 302 Found\r\nLocation: /x\r\nContent-Length: 9000\r\n\r\n".to_vec();
    let long = [&b"HTTP/1.1 200 OK\r\nX-Pad: "[..], &[b'p'; 1100][..], &b"\r\nContent-Type: image/png\r\nContent-Length: 9000\r\n\r\n"[..]].concat();
    let unended = b"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: 9000\r\n".to_vec();
    for (i, h) in [html, css, chunked, redirect, long, unended].into_iter().enumerate() {
        let client = SocketAddrV4::new(Ipv4Addr::new(10, 4, 1, i as u8 + 1), 40000);
        let seg = segment(client, 1_000, &[&h[..], &[b'y'; 2200][..]].concat());
        path.test_run_from_server(&seg).unwrap();
        path.test_run_from_server(&segment(client, 1_000 + (seg.len() - headers) as u32, &[b'y'; 1900])).unwrap();
        assert_eq!(lengths(&mut ring), vec![(seg.len(), seg.len()), (headers + 1900, headers + 1900)], "head {i}");
    }
    let c = path.counters().unwrap();
    assert_eq!((c.body_armed, c.body_cut), (1, 6));

    // A range over a head (a length misread, an answer to HEAD, which has none): a segment
    // that starts with a head is reported whole all the same, and ends the range.
    let client: SocketAddrV4 = "10.4.0.4:40000".parse().unwrap();
    path.set_body_unread(client, server, 90_000).unwrap();
    let small_head = segment(client, 1_000, b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello");
    path.test_run_from_server(&small_head).unwrap();
    path.test_run_from_server(&segment(client, 1_044, &[b'z'; 100])).unwrap();
    assert_eq!(lengths(&mut ring), vec![(small_head.len(), small_head.len()), (headers + 100, headers + 100)]);
    assert_eq!(path.counters().unwrap().body_cut, 6);

    // A head alone in its pushed segment (a server that writes its head apart from its body,
    // nginx with sendfile): read too, and the body's segments that follow cut; an HTML head
    // alone is not armed, nor a segment not pushed.
    let client: SocketAddrV4 = "10.4.0.5:40000".parse().unwrap();
    let alone = b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: 3000\r\n\r\n";
    let body_at = 1_000 + alone.len() as u32;
    path.test_run_from_server(&segment(client, 1_000, alone)).unwrap();
    path.test_run_from_server(&segment(client, body_at, &[b'b'; 1500])).unwrap();
    path.test_run_from_server(&segment(client, body_at + 1500, &[b'b'; 1500])).unwrap();
    let html = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 3000\r\n\r\n";
    let client: SocketAddrV4 = "10.4.0.6:40000".parse().unwrap();
    path.test_run_from_server(&segment(client, 1_000, html)).unwrap();
    path.test_run_from_server(&segment(client, 1_000 + html.len() as u32, &[b'b'; 1500])).unwrap();
    let unpushed = tcp_frame(LinkType::Ethernet, server.into(), "10.4.0.7:40000".parse::<SocketAddrV4>().unwrap().into(), 1_000, 1, ACK, alone);
    path.test_run_from_server(&unpushed).unwrap();
    path.test_run_from_server(&tcp_frame(
        LinkType::Ethernet,
        server.into(),
        "10.4.0.7:40000".parse::<SocketAddrV4>().unwrap().into(),
        body_at,
        1,
        ACK,
        &[b'b'; 1500],
    ))
    .unwrap();
    let w = |len: usize| (headers + len, headers + len);
    assert_eq!(lengths(&mut ring), vec![w(alone.len()), (headers, headers + 1500), w(html.len()), w(1500), w(alone.len()), w(1500)]);
    let c = path.counters().unwrap();
    assert_eq!((c.body_armed, c.body_cut), (2, 8));

    // A body of 2 GiB and more (sequence numbers wrap at 4 GiB): cut a GiB at a time, each part
    // armed when the last is reached or passed, to the body's end.
    let client: SocketAddrV4 = "10.4.0.8:40000".parse().unwrap();
    let huge = b"HTTP/1.1 200 OK\r\nContent-Type: video/mp4\r\nContent-Length: 2147488648\r\n\r\n";
    let base = 4_000_000_000u32; // the body's first byte wraps past 2^32 on the way
    path.test_run_from_server(&segment(client, base - huge.len() as u32, huge)).unwrap();
    let step = 1u32 << 30;
    let (part1, part2) = (base.wrapping_add(step), base.wrapping_add(2 * step));
    let part3 = part2.wrapping_add(5000);
    for (seq, len) in
        [(part1.wrapping_sub(1000), 1000), (part1, 1000), (part2.wrapping_sub(500), 1000), (part3.wrapping_sub(3000), 3000), (part3, 100)]
    {
        path.test_run_from_server(&segment(client, seq, &[b'v'; 3000][..len])).unwrap();
    }
    assert_eq!(lengths(&mut ring), vec![w(huge.len()), (headers, headers + 1000), w(1000), (headers, headers + 3000), w(100)]);
    let c = path.counters().unwrap();
    assert_eq!((c.body_armed, c.body_cut), (3, 11));

    // What ends a range besides its end: a head not armed (an HTML page after an answer to
    // HEAD whose length armed a range), the server's FIN (reported, never silent), and a new
    // connection's SYN/ACK on the same ports.
    let client: SocketAddrV4 = "10.4.0.9:40000".parse().unwrap();
    path.set_body_unread(client, server, 1_000_000).unwrap();
    let html = [&b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 9000\r\n\r\n"[..], &[b'h'; 2200][..]].concat();
    path.test_run_from_server(&segment(client, 1_000, &html)).unwrap();
    path.test_run_from_server(&segment(client, 1_000 + html.len() as u32, &[b'h'; 1000])).unwrap();
    assert_eq!(lengths(&mut ring), vec![w(html.len()), w(1000)], "the HTML page's segments whole");
    path.set_body_unread(client, server, 1_000_000).unwrap();
    let fin = tcp_frame(LinkType::Ethernet, server.into(), client.into(), 5_000, 1, PSH | ACK | FIN, &[b'f'; 500]);
    path.test_run_from_server(&fin).unwrap();
    path.test_run_from_server(&segment(client, 5_501, &[b'f'; 500])).unwrap();
    assert_eq!(lengths(&mut ring), vec![(headers, fin.len()), w(500)], "the FIN reported (cut), the range gone after it");
    path.set_body_unread(client, server, 1_000_000).unwrap();
    let synack = tcp_frame(LinkType::Ethernet, server.into(), client.into(), 7_000, 2, SYN | ACK, &[]);
    path.test_run_from_server(&synack).unwrap();
    path.test_run_from_server(&segment(client, 7_001, &[b's'; 500])).unwrap();
    assert_eq!(lengths(&mut ring), vec![(synack.len(), synack.len()), w(500)], "a new connection's data whole");

    // A body that ends in its head's segment, the next response's head after it (pipelined, or
    // merged by GRO): nothing armed, the segment reported as before.
    let client: SocketAddrV4 = "10.4.0.10:40000".parse().unwrap();
    let two = [
        &b"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: 2000\r\n\r\n"[..],
        &[b'p'; 2000][..],
        &b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc"[..],
    ]
    .concat();
    let armed = path.counters().unwrap().body_armed;
    path.test_run_from_server(&segment(client, 1_000, &two)).unwrap();
    assert_eq!(lengths(&mut ring), vec![w(two.len())]);
    assert_eq!(path.counters().unwrap().body_armed, armed);
}

/// Reports dealt to engines side by side (`load_sharded`): every report of a client (its SYN at
/// the client port, its segments and its server's at the server port, its QUIC datagrams; IPv4,
/// or IPv6 by /64) goes to the ring of the shard rlm-core's `Sharding::shard_of_client` names
/// for it, and each ring gets some. Each shard has its own SYN mode and generation, written
/// through its own door: a verdict applies while it carries its client's shard's.
#[test]
fn reports_go_to_the_ring_of_their_clients_shard() {
    use rlm_core::engine::Sharding;
    use rlm_core::testkit::udp_frame;
    use rlm_core::wire::{decode, Decoded};
    use std::net::{IpAddr, Ipv6Addr};
    if !is_root() {
        eprintln!("skipped: needs root (eBPF)");
        return;
    }
    const SHARDS: usize = 3;
    let rings = kmod_fastpath::inline::Rings { count: SHARDS, bytes: 1 << 20 };
    let mut path = InlinePath::load_sharded(&[80, 443], MARK, rings).expect("load the fast path with three rings");
    path.watch_heartbeat(None).unwrap();
    let mut rings = path.take_rings().unwrap();
    assert_eq!(rings.len(), SHARDS);
    let mut doors: Vec<_> = (0..SHARDS).map(|i| path.shard_door(i).unwrap()).collect();
    for d in &mut doors {
        d.set_mode(Mode::PassAll, 1).unwrap();
    }
    let sharding = Sharding::new(&rlm_core::Config { server_ports: vec![80, 443], ..Default::default() }, SHARDS);
    let server4: SocketAddr = "10.1.0.1:80".parse().unwrap();
    let server6: SocketAddr = "[fd00:9::1]:80".parse().unwrap();
    let mut clients: Vec<IpAddr> = (0..120u32).map(|i| IpAddr::V4(Ipv4Addr::from(0x0a05_0000 + i * 13))).collect();
    // IPv6 clients: one a /64, and two hosts of one /64, which go together.
    clients.extend((0..60u16).map(|i| IpAddr::V6(Ipv6Addr::new(0xfd00, 1, 2, i, 0, 0, 0, 1))));
    clients.push(IpAddr::V6(Ipv6Addr::new(0xfd00, 1, 2, 7, 0xabcd, 0, 0, 9)));
    let mut sent = 0;
    for &c in &clients {
        let (client, server) = match c {
            IpAddr::V4(_) => (SocketAddr::new(c, 40000), server4),
            IpAddr::V6(_) => (SocketAddr::new(c, 40000), server6),
        };
        path.test_run(true, &tcp_frame(LinkType::Ethernet, client, server, 1, 0, SYN, &[]), 1).unwrap();
        path.test_run_from_server(&tcp_frame(LinkType::Ethernet, server, client, 7, 2, SYN | ACK, &[])).unwrap();
        path.test_run(false, &tcp_frame(LinkType::Ethernet, client, server, 2, 8, ACK | PSH, b"GET / HTTP/1.1\r\n\r\n"), 1).unwrap();
        sent += 3;
        if let (IpAddr::V4(c4), SocketAddr::V4(s4)) = (c, server4) {
            let quic = SocketAddrV4::new(*s4.ip(), 443);
            path.test_run(false, &udp_frame(SocketAddrV4::new(c4, 50000), quic, &[0xc0; 40]), 1).unwrap();
            path.test_run_from_server(&udp_frame(quic, SocketAddrV4::new(c4, 50000), &[0x40; 40])).unwrap();
            sent += 2;
        }
    }
    // Every ring holds what it was dealt until its reader takes it.
    let waiting = path.rings_waiting();
    assert_eq!(waiting.len(), SHARDS);
    assert!(waiting.iter().all(|&(w, size)| w > 0 && w < u64::from(size)), "each ring's backlog, of its size: {waiting:?}");
    let mut got = 0;
    for (shard, ring) in rings.iter_mut().enumerate() {
        let mut n = 0;
        ring.drain(usize::MAX, |e| {
            let e = e.expect("a well-formed record");
            let (src, dst) = match decode(LinkType::Ethernet, e.frame) {
                Decoded::Tcp(s) => (s.src, s.dst),
                Decoded::Udp(d) => (d.src, d.dst),
                other => panic!("not TCP or UDP: {other:?}"),
            };
            let client = if [80, 443].contains(&src.port) { dst.ip } else { src.ip };
            assert_eq!(sharding.shard_of_client(client), shard, "{client}'s report ({:?}) in ring {shard}", e.kind);
            n += 1;
        });
        assert!(n > sent / SHARDS / 2, "ring {shard} got {n} of {sent} reports: clients are not spread");
        got += n;
    }
    assert_eq!(got, sent, "every report in some ring");
    assert!(path.rings_waiting().iter().all(|&(w, _)| w == 0), "drained: {:?}", path.rings_waiting());

    // Generations per shard: a client's verdict applies under its own shard's generation only.
    let shard_of = |c: Ipv4Addr| sharding.shard_of_client(IpAddr::V4(c));
    let a = (0..).map(|i| Ipv4Addr::new(10, 7, 0, i)).find(|&c| shard_of(c) == 0).unwrap();
    let b = (0..).map(|i| Ipv4Addr::new(10, 7, 1, i)).find(|&c| shard_of(c) == 1).unwrap();
    let SocketAddr::V4(s4) = server4 else { unreachable!() };
    for (i, d) in doors.iter_mut().enumerate() {
        assert_eq!(d.shard(), i);
        d.set_mode(Mode::Verdicts, 10 + i as u64).unwrap();
    }
    // Both verdicts carry shard 1's generation: b's applies, a's (shard 0 is at 10) does not.
    doors[0].set_syn_verdict(a, s4, 11, SynAction::Drop { rule: 1 }).unwrap();
    doors[1].set_syn_verdict(b, s4, 11, SynAction::Drop { rule: 1 }).unwrap();
    let syn = |c: Ipv4Addr| tcp_frame(LinkType::Ethernet, SocketAddr::V4(SocketAddrV4::new(c, 40001)), server4, 1, 0, SYN, &[]);
    let r = path.test_run(true, &syn(b), 1).unwrap();
    assert_eq!((r.retval, r.skb.mark & MARK), (2, 0), "b's verdict of its shard's generation: dropped");
    let r = path.test_run(true, &syn(a), 1).unwrap();
    assert_eq!((r.retval, r.skb.mark & MARK), (0, MARK), "a's verdict of another shard's generation: queued");
    // Shard 2 passes every SYN while the others hold to their verdicts.
    let c = (0..).map(|i| Ipv4Addr::new(10, 7, 2, i)).find(|&c| shard_of(c) == 2).unwrap();
    doors[2].set_syn_verdict(c, s4, 12, SynAction::Drop { rule: 1 }).unwrap();
    doors[2].set_mode(Mode::PassAll, 12).unwrap();
    let r = path.test_run(true, &syn(c), 1).unwrap();
    assert_eq!((r.retval, r.skb.mark & MARK), (0, 0), "shard 2's mode: passed, though a verdict of its generation drops");
    assert_eq!(path.test_run(true, &syn(b), 1).unwrap().retval, 2, "shard 1's mode still: dropped");
    assert!(path.shard_door(SHARDS).is_err(), "no such shard");
}
