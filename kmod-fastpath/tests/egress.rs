//! The SRPT classifier in a real kernel: two network namespaces joined by a veth pair, the
//! program on the server end's egress under an HTB tree of strict-priority leaves (one per
//! band), TCP responses sent across. Needs root.

use std::io::{Read, Write};
use std::net::{SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::process::Command;
use std::time::Duration;

use kmod_fastpath::{classid, ClassCount, FlowKey, SrptEgress, SrptMode, SrptParams, MAX_CLASSES};
use rlm_core::testkit::{tcp_frame, ACK, PSH};
use rlm_core::wire::LinkType;

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("iproute2 installed");
    assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
}

fn tc(ns: &str, args: &str) -> String {
    let mut full = vec!["netns", "exec", ns, "tc"];
    full.extend(args.split_whitespace());
    let out = Command::new("ip").args(&full).output().expect("tc installed");
    assert!(out.status.success(), "tc {args}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Two namespaces, removed on drop.
struct Namespaces(String, String);

impl Drop for Namespaces {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
        let _ = Command::new("ip").args(["netns", "del", &self.1]).status();
    }
}

fn enter(ns: &str) {
    lab_netns::enter(ns).unwrap_or_else(|e| panic!("{e}"));
}

/// "Sent N bytes M pkt" of an HTB class.
fn class_packets(stats: &str, class: &str) -> u64 {
    let mut lines = stats.lines();
    while let Some(l) = lines.next() {
        if l.contains(&format!("class htb {class} ")) {
            let sent = lines.next().unwrap_or("");
            let w: Vec<&str> = sent.split_whitespace().collect();
            return w.iter().position(|x| *x == "pkt").map(|i| w[i - 1].parse().unwrap_or(0)).unwrap_or(0);
        }
    }
    0
}

use lab_netns::is_root;

fn diff(after: &[ClassCount; MAX_CLASSES], before: &[ClassCount; MAX_CLASSES]) -> Vec<u64> {
    after.iter().zip(before).map(|(a, b)| a.packets - b.packets).collect()
}

#[test]
fn ranks_responses_by_remaining_bytes_into_htb_leaves() {
    if !is_root() {
        eprintln!("skipped: needs root (network namespaces, eBPF)");
        return;
    }
    let id = std::process::id();
    let ns = Namespaces(format!("rlmfp-a-{id}"), format!("rlmfp-b-{id}"));
    ip(&["netns", "add", &ns.0]);
    ip(&["netns", "add", &ns.1]);
    // No IPv6 neighbour discovery: other traffic goes to the lowest band, and would blur it.
    for n in [&ns.0, &ns.1] {
        let out = Command::new("ip")
            .args(["netns", "exec", n, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"])
            .output()
            .unwrap();
        assert!(out.status.success(), "sysctl: {}", String::from_utf8_lossy(&out.stderr));
    }
    ip(&["-n", &ns.0, "link", "add", "fpa", "type", "veth", "peer", "name", "fpb", "netns", &ns.1]);
    ip(&["-n", &ns.0, "addr", "add", "10.250.7.1/30", "dev", "fpa"]);
    ip(&["-n", &ns.1, "addr", "add", "10.250.7.2/30", "dev", "fpb"]);
    ip(&["-n", &ns.0, "link", "set", "fpa", "up"]);
    ip(&["-n", &ns.1, "link", "set", "fpb", "up"]);
    // One packet per skb, so that every packet gets its own band (TCP hands the egress hook
    // GSO skbs of many segments otherwise, one band each).
    ip(&["-n", &ns.0, "link", "set", "fpa", "gso_max_segs", "1"]);
    // Strict priority: 8 leaves 1:10 .. 1:17 (control, 6 data bands, resends of the lowest) that
    // all borrow the whole rate, lower prio first.
    tc(&ns.0, "qdisc add dev fpa root handle 1: htb default 17");
    tc(&ns.0, "class add dev fpa parent 1: classid 1:1 htb rate 1gbit ceil 1gbit");
    for b in 0..8 {
        tc(&ns.0, &format!("class add dev fpa parent 1:1 classid 1:{:x} htb rate 8kbit ceil 1gbit prio {b} quantum 1514", 0x10 + b));
    }
    let params = SrptParams::new(SrptMode::Srpt, classid(1, 0x10));

    let (a, b) = (ns.0.clone(), ns.1.clone());
    let server: SocketAddrV4 = "10.250.7.1:8080".parse().unwrap();
    let (sized, open_ended) = (200_000usize, 30_000usize);
    enter(&a);
    let mut fp = SrptEgress::attach("fpa", &[8080], &params).expect("attach");
    fp.watch_heartbeat(None).unwrap();
    let l = TcpListener::bind(server).unwrap();
    let client = std::thread::spawn(move || {
        enter(&b);
        let mut got = Vec::new();
        for _ in 0..2 {
            let mut c = TcpStream::connect(server).expect("connect");
            let mut buf = Vec::new();
            c.read_to_end(&mut buf).expect("read");
            got.push(buf.len());
        }
        got
    });
    let respond = |fp: &mut SrptEgress, size: usize, publish: bool| {
        let before = fp.class_stats().unwrap();
        let (mut c, peer) = l.accept().unwrap();
        let SocketAddr::V4(peer) = peer else { panic!("IPv4") };
        let key = FlowKey::new(server, peer);
        let f = fp.flow(key).unwrap().expect("the SYN/ACK opened the flow");
        assert_eq!(f.start, f.hi, "nothing sent after the SYN/ACK yet");
        if publish {
            fp.set_response(key, f.start, Some(f.start.wrapping_add(size as u32))).unwrap();
        }
        c.write_all(&vec![7u8; size]).unwrap();
        drop(c);
        std::thread::sleep(Duration::from_millis(300));
        let f2 = fp.flow(key).unwrap().unwrap();
        assert_eq!(f2.hi, f.start.wrapping_add(size as u32), "hi: the byte after the last sent");
        assert!(f2.bytes > size as u64 && f2.packets > (size / 1500) as u64, "{f2:?}");
        diff(&fp.class_stats().unwrap(), &before)
    };
    let c0 = fp.counters().unwrap();
    let known = respond(&mut fp, sized, true);
    let c1 = fp.counters().unwrap();
    let attained = respond(&mut fp, open_ended, false);
    let c2 = fp.counters().unwrap();
    eprintln!("packets per band: sized {known:?}, open-ended {attained:?}; {c2:?}");
    assert_eq!(client.join().unwrap(), vec![sized, open_ended]);

    // 200,000 bytes with their end known: every segment with over 50K left in band 6; the last
    // ones rise towards band 1 only as far as the client's ACKs let them, which depends on the
    // timing here (a run was seen to stay in bands 5 and 6 throughout; tests/srpt.rs has the
    // exact rules); control (the SYN/ACK, ACKs, FIN) in band 0.
    assert!(known[0] >= 2, "band 0: {known:?}");
    assert!(known[6] > known[5] && known[6] >= (sized as u64 - 51_200) / 1460, "{known:?}");
    assert!(known[1..=6].iter().sum::<u64>() >= (sized / 1460) as u64, "{known:?}");
    // (a resend of the last segment after the end is ranked as the next response's first bytes)
    assert!(c1.known - c0.known >= (sized / 1460) as u64 && c1.attained - c0.attained <= c1.retx - c0.retx, "{c0:?} {c1:?}");
    assert_eq!(c1.adopted - c0.adopted, 1);
    // 30,000 bytes of unknown length: ranked by bytes sent, they sink from band 1 to band 5
    // (sinking is never held).
    assert!(attained[1..=5].iter().all(|&n| n >= 1) && attained[6] == 0, "{attained:?}");
    assert!(c2.attained - c1.attained >= (open_ended / 1460) as u64 && c2.known == c1.known, "{c1:?} {c2:?}");

    // HTB put every packet where skb->priority said.
    let stats = fp.class_stats().unwrap();
    let htb = tc(&ns.0, "-s class show dev fpa");
    for (b, s) in stats.iter().enumerate().take(8) {
        assert_eq!(class_packets(&htb, &format!("1:{:x}", 0x10 + b)), s.packets, "band {b}:\n{htb}");
    }
    // FAIR: everything in the one class.
    let mut fair = params.clone();
    fair.mode = SrptMode::Fair;
    fp.set_params(&fair).unwrap();
    let frame = tcp_frame(LinkType::Ethernet, server.into(), "10.250.7.2:40000".parse().unwrap(), 1, 1, PSH | ACK, &[0; 100]);
    assert_eq!(fp.test_run(&frame, 1).unwrap().skb.priority, classid(1, 0x10));
}
