//! The appliance inline in the lab (needs root and the `rlm` binary: `cargo build --release -p
//! rlm-core`, or RLM_BIN): `rlm run` on the appliance's bridge starts, answers /status, sees the
//! handshakes it queues, stops cleanly on SIGTERM leaving no netfilter rule; and when it is
//! killed with SIGKILL under load the farm stays reachable at once (--queue-bypass: fail-open).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use testbed::inline::{rlm_rules, Inline, RlmArm};
use testbed::netns;
use testbed::topology::{Info, Plan, FARM_ADDR};

const CLASSES: &str = "CLASS HIGH IF IP.SRC == 10.4.*.*\nCLASS LOW IF IP.SRC != 10.4.*.*\n";
/// A rule on the client's port cannot be decided by address in the kernel: with it every SYN
/// goes through rlm's queue (it never holds: no client port is below 1).
const QUEUE_EVERY_SYN: &str = "CLASS HIGH IF IP.SRC == 10.4.*.*\nCLASS LOW IF IP.SRC != 10.4.*.*\nIF PORT.SRC < 1 THEN DROP SYN\n";

/// A tiny web server on the farm's address: one short page per connection, then close.
fn serve_pages(srv_ns: &str) {
    let ns = srv_ns.to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        netns::enter(&ns).unwrap();
        let l = TcpListener::bind(format!("{FARM_ADDR}:80")).unwrap();
        tx.send(()).unwrap();
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nhello\n");
            });
        }
    });
    rx.recv_timeout(Duration::from_secs(5)).expect("server listening");
}

/// One page on a new connection from `src` (so that its SYN and SYN/ACK cross rlm's queue).
fn fetch(src: &str, timeout: Duration) -> std::io::Result<()> {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    s.bind(&format!("{src}:0").parse::<SocketAddr>().unwrap().into())?;
    s.connect_timeout(&format!("{FARM_ADDR}:80").parse::<SocketAddr>().unwrap().into(), timeout)?;
    let mut s: TcpStream = s.into();
    s.set_read_timeout(Some(timeout))?;
    s.write_all(b"GET / HTTP/1.1\r\nHost: farm\r\n\r\n")?;
    let mut body = Vec::new();
    s.read_to_end(&mut body)?;
    if !body.ends_with(b"hello\n") {
        return Err(std::io::Error::other(format!("short answer: {:?}", String::from_utf8_lossy(&body))));
    }
    Ok(())
}

fn lab(tag: &str, clients: u32) -> (Plan, testbed::topology::DownOnDrop, Info) {
    let plan = Plan { prefix: format!("rlm{tag}{}", std::process::id()), high_clients: clients, low_clients: clients };
    let guard = testbed::topology::DownOnDrop(plan.clone());
    let info = plan.up().expect("up");
    serve_pages(&info.namespaces.servers);
    (plan, guard, info)
}

fn fetch_from_clients(info: &Info, srcs: Vec<String>) -> Vec<std::io::Result<()>> {
    let ns = info.namespaces.clients.clone();
    std::thread::spawn(move || {
        netns::enter(&ns).unwrap();
        srcs.iter().map(|s| fetch(s, Duration::from_secs(3))).collect()
    })
    .join()
    .unwrap()
}

#[test]
fn rlm_starts_sees_the_handshakes_and_stops_cleanly() {
    let (_plan, _guard, info) = lab("i", 2);
    let dir = std::env::temp_dir().join(format!("rlm-inline-{}", std::process::id()));
    let arm = RlmArm { rules: CLASSES.into(), extra_args: vec![] };
    let rlm = Inline::start(&info.namespaces.appliance, &arm, &dir, Duration::from_secs(10)).expect("rlm run starts and answers /status");
    assert!(!rlm_rules(&info.namespaces.appliance).is_empty(), "rlm's queue rules are installed while it runs");
    assert_eq!(std::fs::read_to_string(dir.join("rules.rlm")).unwrap(), CLASSES);

    let srcs: Vec<String> = info.clients.high.iter().chain(info.clients.low.iter()).cycle().take(20).cloned().collect();
    for r in fetch_from_clients(&info, srcs) {
        r.expect("a page through rlm");
    }
    let status = rlm.get("/status").expect("/status");
    serde_json::from_str::<serde_json::Value>(&status).expect("/status is JSON");
    let out = rlm.stop().expect("stop");
    println!("{}", serde_json::to_string_pretty(&out).unwrap());
    assert_eq!(out.exit_code, Some(0), "rlm exits 0 on SIGTERM; log {}", out.log.display());
    assert!(out.rules_left.is_empty(), "no rule left behind: {:?}", out.rules_left);
    assert!(out.clean_exit && out.rules_installed);
    // No rule acts at the SYN: the kernel fast path passed each of the 20 SYNs and reported it,
    // and rlm measured the 20 pages.
    let passed = out.fastpath.get("syn_passed").copied().unwrap_or(0.0);
    assert!(passed >= 20.0, "the fast path passed {passed} SYNs for 20 handshakes: {:?}", out.fastpath);
    assert!(out.transactions.unwrap_or(0) >= 20, "rlm measured {:?} transactions for 20 pages", out.transactions);
    assert_eq!(out.reports_lost, 0.0);
    assert!(out.status.is_some_and(|p| p.exists()) && out.metrics.is_some_and(|p| p.exists()));
    // The bridge forwards plainly afterwards.
    for r in fetch_from_clients(&info, vec![info.clients.high[0].clone()]) {
        r.expect("a page after rlm stopped");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn farm_stays_reachable_when_rlm_is_killed_under_load() {
    let (_plan, _guard, info) = lab("k", 4);
    let dir = std::env::temp_dir().join(format!("rlm-kill-{}", std::process::id()));
    let arm = RlmArm { rules: QUEUE_EVERY_SYN.into(), extra_args: vec![] };
    let mut rlm = Inline::start(&info.namespaces.appliance, &arm, &dir, Duration::from_secs(10)).expect("rlm run starts");

    // Eight loops fetching a page on a new connection each, as fast as they can.
    let stop = Arc::new(AtomicBool::new(false));
    let srcs: Vec<String> = info.clients.high.iter().chain(info.clients.low.iter()).cloned().collect();
    let loops: Vec<_> = srcs
        .into_iter()
        .map(|src| {
            let (ns, stop) = (info.namespaces.clients.clone(), stop.clone());
            std::thread::spawn(move || {
                netns::enter(&ns).unwrap();
                let mut log = Vec::new();
                while !stop.load(Ordering::SeqCst) {
                    let t = Instant::now();
                    let r = fetch(&src, Duration::from_secs(5));
                    log.push((t, t.elapsed(), r.map_err(|e| e.to_string())));
                }
                log
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    let metrics = rlm.get("/metrics").expect("/metrics under load");
    let before = testbed::inline::prom::by_label(&testbed::inline::prom::parse(&metrics), "rlm_verdicts", "verdict");
    assert!(before.get("accept").copied().unwrap_or(0.0) > 20.0, "the load crosses rlm's queue: {before:?}");
    rlm.kill().expect("kill -9");
    let killed = Instant::now();
    assert!(!rlm.running());
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::SeqCst);
    let logs: Vec<_> = loops.into_iter().flat_map(|h| h.join().unwrap()).collect();

    // The queue rules are still there (SIGKILL leaves them): what carries the traffic is the
    // kernel's bypass, not their removal.
    let left = rlm_rules(&info.namespaces.appliance);
    assert!(!left.is_empty(), "SIGKILL cannot remove the rules");
    let after: Vec<_> = logs.iter().filter(|(t, _, _)| *t >= killed).collect();
    let slow: Vec<_> = after.iter().filter(|(_, d, r)| r.is_err() || *d >= Duration::from_secs(1)).collect();
    let before_n = logs.len() - after.len();
    println!("{before_n} fetches before the kill, {} after; failed or slower than 1 s after: {}", after.len(), slow.len());
    assert!(after.len() >= 100, "the loops kept fetching after the kill: {}", after.len());
    assert!(slow.is_empty(), "every fetch after the kill succeeded within a second: {:?}", &slow[..slow.len().min(5)]);

    // A fresh rlm removes what the killed one left, and leaves nothing when stopped.
    let rlm = Inline::start(&info.namespaces.appliance, &arm, &dir, Duration::from_secs(10)).expect("rlm run starts after a crash");
    let out = rlm.stop().expect("stop");
    assert_eq!(out.exit_code, Some(0));
    assert!(out.rules_left.is_empty(), "{:?}", out.rules_left);
    let _ = std::fs::remove_dir_all(&dir);
}
