//! The egress classifier in a real kernel: two network namespaces joined by a veth pair, the
//! program on one end's egress under an HTB qdisc, UDP flows sent across. Needs root.

use std::net::{SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::Command;

use kmod_fastpath::{classid, EgressClassifier, FlowKey};

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
    let f = std::fs::File::open(format!("/var/run/netns/{ns}")).expect("netns file");
    // SAFETY: setns on a valid namespace fd affects only this thread.
    let r = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(r, 0, "setns {ns}: {}", std::io::Error::last_os_error());
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

#[test]
fn classifies_flows_into_htb_classes() {
    let id = std::process::id();
    let ns = Namespaces(format!("rlmfp-a-{id}"), format!("rlmfp-b-{id}"));
    ip(&["netns", "add", &ns.0]);
    ip(&["netns", "add", &ns.1]);
    ip(&["-n", &ns.0, "link", "add", "fpa", "type", "veth", "peer", "name", "fpb", "netns", &ns.1]);
    ip(&["-n", &ns.0, "addr", "add", "10.250.7.1/30", "dev", "fpa"]);
    ip(&["-n", &ns.1, "addr", "add", "10.250.7.2/30", "dev", "fpb"]);
    ip(&["-n", &ns.0, "link", "set", "fpa", "up"]);
    ip(&["-n", &ns.1, "link", "set", "fpb", "up"]);
    tc(&ns.0, "qdisc add dev fpa root handle 1: htb default 3");
    tc(&ns.0, "class add dev fpa parent 1: classid 1:3 htb rate 100mbit prio 1");
    tc(&ns.0, "class add dev fpa parent 1: classid 1:2 htb rate 100mbit prio 0");

    let a = ns.0.clone();
    let stats = std::thread::spawn(move || {
        enter(&a);
        let mut fp = EgressClassifier::attach("fpa").expect("attach");
        let src: SocketAddrV4 = "10.250.7.1:40000".parse().unwrap();
        let dst: SocketAddrV4 = "10.250.7.2:9".parse().unwrap();
        fp.set_flow_class(FlowKey::new(src, dst), classid(1, 2)).unwrap();
        fp.set_default_class(classid(1, 3)).unwrap();
        let short = UdpSocket::bind(src).unwrap();
        let other = UdpSocket::bind("10.250.7.1:40001").unwrap();
        for _ in 0..50 {
            short.send_to(&[7u8; 100], dst).unwrap();
        }
        for _ in 0..20 {
            other.send_to(&[7u8; 100], dst).unwrap();
        }
        // Taken out of the map: back to the default class.
        fp.clear_flow(FlowKey::new(src, dst)).unwrap();
        for _ in 0..5 {
            short.send_to(&[7u8; 100], dst).unwrap();
        }
        fp.class_stats().unwrap()
    })
    .join()
    .expect("classifier thread");

    assert_eq!(stats[2].packets, 50, "the classified flow");
    assert_eq!(stats[2].bytes, 50 * (14 + 20 + 8 + 100));
    assert!(stats[3].packets >= 25, "default class: {:?}", stats[3]);
    let htb = tc(&ns.0, "-s class show dev fpa");
    assert_eq!(class_packets(&htb, "1:2"), 50, "HTB put the packets where skb->priority said:\n{htb}");
    assert!(class_packets(&htb, "1:3") >= 25, "{htb}");
}
