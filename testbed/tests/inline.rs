//! The appliance inline in the lab (needs root and the `rlm` binary: `cargo build --release -p
//! rlm-core`, or RLM_BIN): `rlm run` on the appliance's bridge starts, answers /status, sees the
//! handshakes it queues, stops cleanly on SIGTERM leaving no netfilter rule; when it is killed
//! with SIGKILL under load the farm stays reachable at once (--queue-bypass: fail-open); and
//! when it is killed or panics, with tcx links or clsact filters, its guard or its own `Drop`s
//! take its DROP SYN verdicts, its shaper and its rules away within a second.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use testbed::inline::{rlm_rules, Inline, RlmArm, RlmRecords};
use testbed::netns;
use testbed::raw::RawSender;
use testbed::topology::{Info, Plan, FARM_ADDR};

const CLASSES: &str = "CLASS HIGH IF IP.SRC == 10.4.*.*\nCLASS LOW IF IP.SRC != 10.4.*.*\n";
/// A rule on the client's port cannot be decided by address in the kernel: with it every SYN
/// goes through rlm's queue (it never holds: no client port is below 1).
const QUEUE_EVERY_SYN: &str = "CLASS HIGH IF IP.SRC == 10.4.*.*\nCLASS LOW IF IP.SRC != 10.4.*.*\nIF PORT.SRC < 1 THEN DROP SYN\n";

/// A tiny web server on the farm's address: one short page per connection, then close. Returns
/// the count of connections it accepted.
fn serve_pages(srv_ns: &str) -> Arc<std::sync::atomic::AtomicUsize> {
    serve(srv_ns, Arc::new(|_: &str| b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nhello\n".to_vec()))
}

/// What the farm answers to a request, by its target.
type Responder = Arc<dyn Fn(&str) -> Vec<u8> + Send + Sync>;

/// [`serve_pages`] answering with `respond`.
fn serve(srv_ns: &str, respond: Responder) -> Arc<std::sync::atomic::AtomicUsize> {
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    listen(srv_ns, 80, move |mut s| {
        count.fetch_add(1, Ordering::SeqCst);
        answer(&mut s, &respond);
    });
    accepted
}

/// Listen on the farm's address at `port` in namespace `srv_ns`, each connection handled by
/// `on_conn` on a thread of its own; returns once listening.
fn listen(srv_ns: &str, port: u16, on_conn: impl Fn(TcpStream) + Send + Sync + 'static) {
    let ns = srv_ns.to_string();
    let on_conn = Arc::new(on_conn);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        netns::enter(&ns).unwrap();
        let l = TcpListener::bind(format!("{FARM_ADDR}:{port}")).unwrap();
        tx.send(()).unwrap();
        for s in l.incoming() {
            let Ok(s) = s else { continue };
            let on_conn = on_conn.clone();
            std::thread::spawn(move || on_conn(s));
        }
    });
    rx.recv_timeout(Duration::from_secs(5)).expect("server listening");
}

/// Read a request's head from `s` and write `respond`'s answer to its target (nothing when the
/// client closes first).
fn answer(s: &mut (impl Read + Write), respond: &Responder) {
    let mut buf = [0u8; 4096];
    let mut got = Vec::new();
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    let head = String::from_utf8_lossy(&got);
    let target = head.split_whitespace().nth(1).unwrap_or("/");
    let _ = s.write_all(&respond(target));
}

/// One page on a new connection from `src` (so that its SYN and SYN/ACK cross rlm's queue).
fn fetch(src: &str, timeout: Duration) -> std::io::Result<()> {
    fetch_target(src, "/", timeout)
}

/// [`fetch`] of `target`; the answer must end with "hello\n".
fn fetch_target(src: &str, target: &str, timeout: Duration) -> std::io::Result<()> {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    s.bind(&format!("{src}:0").parse::<SocketAddr>().unwrap().into())?;
    s.connect_timeout(&format!("{FARM_ADDR}:80").parse::<SocketAddr>().unwrap().into(), timeout)?;
    let mut s: TcpStream = s.into();
    s.set_read_timeout(Some(timeout))?;
    s.write_all(format!("GET {target} HTTP/1.1\r\nHost: farm\r\nAccept: text/html\r\n\r\n").as_bytes())?;
    let mut body = Vec::new();
    s.read_to_end(&mut body)?;
    if !body.ends_with(b"hello\n") {
        return Err(std::io::Error::other(format!("short answer: {:?}", String::from_utf8_lossy(&body))));
    }
    Ok(())
}

fn lab(tag: &str, clients: u32) -> (Plan, testbed::topology::DownOnDrop, Info) {
    let (plan, guard, info, _) = lab_counting(tag, clients);
    (plan, guard, info)
}

fn lab_counting(tag: &str, clients: u32) -> (Plan, testbed::topology::DownOnDrop, Info, Arc<std::sync::atomic::AtomicUsize>) {
    lab_serving(tag, clients, None)
}

/// The lab, its farm answering with `respond` (else [`serve_pages`]' short page).
fn lab_serving(
    tag: &str,
    clients: u32,
    respond: Option<Responder>,
) -> (Plan, testbed::topology::DownOnDrop, Info, Arc<std::sync::atomic::AtomicUsize>) {
    let plan = Plan { prefix: format!("rlm{tag}{}", std::process::id()), high_clients: clients, low_clients: clients, ..Plan::default() };
    let guard = testbed::topology::DownOnDrop(plan.clone());
    let info = plan.up().expect("up");
    let accepted = match respond {
        Some(r) => serve(&info.namespaces.servers, r),
        None => serve_pages(&info.namespaces.servers),
    };
    (plan, guard, info, accepted)
}

/// Run a command in a namespace; panics with its output if it fails.
fn in_ns(ns: &str, args: &[&str]) {
    let out = std::process::Command::new("ip").args(["netns", "exec", ns]).args(args).output().expect("ip netns exec");
    assert!(out.status.success(), "{args:?} in {ns}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A packet capture running in a namespace (tcpdump), stopped with SIGINT.
struct Capture(std::process::Child, std::path::PathBuf);

impl Capture {
    fn start(ns: &str, iface: &str, file: std::path::PathBuf) -> Capture {
        let child = std::process::Command::new("ip")
            .args(["netns", "exec", ns, "tcpdump", "-i", iface, "--immediate-mode", "-U", "-n", "-w"])
            .arg(&file)
            .arg("tcp port 80")
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("tcpdump");
        std::thread::sleep(Duration::from_millis(700));
        Capture(child, file)
    }

    /// Stop it; the capture file.
    fn stop(mut self) -> std::path::PathBuf {
        std::thread::sleep(Duration::from_millis(300));
        // SAFETY: kill(2) on our child's pid.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGINT) };
        let _ = self.0.wait();
        self.1
    }

    /// Stop it and read it with tshark, checksums verified: one row per packet with
    /// (stream, syn, ack, raw sequence number, TCP checksum good, IP checksum good).
    fn finish(self) -> Vec<(u32, bool, bool, u64, bool, bool)> {
        let file = self.stop();
        let out = std::process::Command::new("tshark")
            .args(["-n", "-o", "tcp.check_checksum:TRUE", "-o", "ip.check_checksum:TRUE", "-r"])
            .arg(&file)
            .args(["-T", "fields", "-e", "tcp.stream", "-e", "tcp.flags.syn", "-e", "tcp.flags.ack", "-e", "tcp.seq_raw"])
            .args(["-e", "tcp.checksum.status", "-e", "ip.checksum.status"])
            .output()
            .expect("tshark (apt install tshark; make deps installs it)");
        assert!(out.status.success(), "tshark: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| {
                let f: Vec<&str> = l.split('\t').collect();
                let flag = |s: &str| s == "1" || s.eq_ignore_ascii_case("true");
                (f[0].parse().unwrap(), flag(f[1]), flag(f[2]), f[3].parse().unwrap(), f[4] == "1", f[5] == "1")
            })
            .collect()
    }
}

fn fetch_from_clients(info: &Info, srcs: Vec<String>) -> Vec<std::io::Result<()>> {
    fetch_from_clients_within(info, srcs, Duration::from_secs(3))
}

/// [`fetch_from_clients`], each fetch given `timeout` (to connect, and to read).
fn fetch_from_clients_within(info: &Info, srcs: Vec<String>, timeout: Duration) -> Vec<std::io::Result<()>> {
    let ns = info.namespaces.clients.clone();
    std::thread::spawn(move || {
        netns::enter(&ns).unwrap();
        srcs.iter().map(|s| fetch(s, timeout)).collect()
    })
    .join()
    .unwrap()
}

#[test]
fn rlm_starts_sees_the_handshakes_and_stops_cleanly() {
    starts_sees_the_handshakes_and_stops_cleanly("i", "auto");
}

/// The same with the programs as clsact filters (older kernels): the clsact qdiscs rlm made go
/// at its clean exit too (broken once: they stayed).
#[test]
fn rlm_starts_sees_the_handshakes_and_stops_cleanly_clsact() {
    starts_sees_the_handshakes_and_stops_cleanly("ic", "clsact");
}

/// rlm started with the programs attached as `attach` says, 20 pages through it, its status,
/// a clean stop that leaves the namespace as rlm found it, and the bridge plain afterwards.
fn starts_sees_the_handshakes_and_stops_cleanly(tag: &str, attach: &str) {
    let (_plan, _guard, info) = lab(tag, 2);
    let dir = std::env::temp_dir().join(format!("rlm-inline-{tag}-{}", std::process::id()));
    // SRPT on the client port too (its qdisc, its programs and its state pinned in a directory
    // of a BPF filesystem, which rlm makes: all gone at the clean exit). A BPF filesystem of the
    // test's own, outside /sys (which `ip netns exec` mounts anew, without /sys/fs/bpf).
    let bpffs = kmod_fastpath::testrun::Bpffs::mount(&format!("inline-{tag}"));
    let state = bpffs.0.join("rlm").display().to_string();
    // SYNs without a verdict held (no netfilter rule at all), or queued (clsact: the queue
    // rules and br_netfilter's sysctls installed, and removed at exit).
    let undecided = undecided_syns(attach);
    let extra_args =
        ["--srpt", "fair", "--srpt-link-bps", "1000000000", "--srpt-state-dir", &state, "--ebpf-attach", attach, "--undecided-syns", undecided]
            .into_iter()
            .map(String::from)
            .collect();
    let arm = RlmArm { rules: CLASSES.into(), extra_args, ..RlmArm::default() };
    let ports = [info.bridge.client_port.as_str(), info.bridge.server_port.as_str()];
    // An operator's box that does not pass bridged IPv6 to ip6tables: rlm turns it on while it
    // runs, and must turn it off again.
    in_ns(&info.namespaces.appliance, &["sysctl", "-q", "-w", "net.bridge.bridge-nf-call-ip6tables=0"]);
    let before = testbed::inline::host_state(&info.namespaces.appliance, &ports);
    // A start that fails once the programs are attached and the state pinned (a record output
    // it cannot write) leaves nothing either (broken once: the clsact qdiscs and the SRPT pins
    // stayed).
    let unwritable = RlmArm {
        extra_args: [arm.extra_args.clone(), vec!["--pageviews".into(), "/nonexistent/pv.jsonl".into()]].concat(),
        records: false,
        ..arm.clone()
    };
    let failed = Inline::start(&info.namespaces.appliance, &unwritable, &dir, Duration::from_secs(10)).err().expect("rlm run fails to start");
    assert!(format!("{failed:#}").contains("cannot write /nonexistent/pv.jsonl"), "{failed:#}");
    let after_failed = testbed::inline::host_state(&info.namespaces.appliance, &ports);
    for ((what, was), (_, is)) in before.iter().zip(&after_failed) {
        assert_eq!(was, is, "{what} after a start that failed");
    }
    assert!(!std::path::Path::new(&state).exists(), "{state} after a start that failed");
    let rlm = Inline::start(&info.namespaces.appliance, &arm, &dir, Duration::from_secs(10)).expect("rlm run starts and answers /status");
    assert_eq!(
        !rlm_rules(&info.namespaces.appliance).is_empty(),
        undecided == "queue",
        "rlm's queue rules are installed while it runs only when SYNs are queued"
    );
    assert_eq!(std::fs::read_to_string(dir.join("rules.rlm")).unwrap(), CLASSES);
    let pinned = std::path::Path::new(&state).join(&info.bridge.client_port);
    assert!(std::fs::read_dir(&pinned).is_ok_and(|d| d.count() > 0), "the SRPT state is pinned in {} while rlm runs", pinned.display());

    let srcs: Vec<String> = info.clients.high.iter().chain(info.clients.low.iter()).cycle().take(20).cloned().collect();
    for r in fetch_from_clients(&info, srcs) {
        r.expect("a page through rlm");
    }
    // The status is made once a second: the engine's calls of the 20 pages are timed there.
    std::thread::sleep(Duration::from_millis(1_100));
    let status = rlm.get("/status").expect("/status");
    let status = serde_json::from_str::<serde_json::Value>(&status).expect("/status is JSON");
    let calls = &status["engine_call_us"];
    println!("engine calls: {calls}");
    assert!(calls["timed"].as_u64().is_some_and(|n| n >= 10), "one call in 8 timed: {calls}");
    let (p50, p9999, max) = (calls["p50"].as_f64().unwrap(), calls["p9999"].as_f64().unwrap(), calls["max"].as_f64().unwrap());
    assert!(p50 > 0.0 && p50 <= p9999 && p9999 <= max, "{calls}");
    let out = rlm.stop().expect("stop");
    println!("{}", serde_json::to_string_pretty(&out).unwrap());
    assert_eq!(out.exit_code, Some(0), "rlm exits 0 on SIGTERM; log {}", out.log.display());
    assert!(out.rules_left.is_empty(), "no rule left behind: {:?}", out.rules_left);
    assert!(out.clean_exit && out.installed);
    // Nothing else left either: the tables, qdiscs, filters, sysctls and the BPF filesystem are
    // as rlm found them (broken once each: an empty mangle table, net.bridge.bridge-nf-call-ip6tables
    // = 1 and the empty state directory stayed).
    let after = testbed::inline::host_state(&info.namespaces.appliance, &ports);
    for ((what, was), (_, is)) in before.iter().zip(&after) {
        assert_eq!(was, is, "{what} after rlm stopped");
    }
    assert!(!std::path::Path::new(&state).exists(), "{state} after rlm stopped");
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

/// The records of a JSON-lines file, each parsed.
fn json_lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: not JSON ({e}): {l:?}", path.display()))).collect()
}

/// Each distinct set of top-level keys among `records`.
fn key_sets(records: &[serde_json::Value]) -> std::collections::BTreeSet<std::collections::BTreeSet<String>> {
    records.iter().map(|r| r.as_object().expect("a JSON object").keys().cloned().collect::<std::collections::BTreeSet<String>>()).collect()
}

/// `rlm run --transactions --pageviews --decisions` writes the records of `rlm analyze` (the
/// same keys as `rlm analyze` over a capture of the same traffic) and survives logrotate: the
/// files renamed halfway and SIGHUP, every pageview is in the renamed file or the new one
/// exactly once, as many as rlm says it wrote at exit, none lost; the rule file, unchanged, is
/// not put in force again.
#[test]
fn rlm_run_writes_records_in_analyzes_schema_and_survives_logrotate() {
    let (_plan, _guard, info) = lab("r", 2);
    let dir = std::env::temp_dir().join(format!("rlm-records-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // The lab's records: `Inline` passes the three flags with the files in the arm's directory.
    let files = RlmRecords::in_dir(&dir);
    let (tx, pv, dec) = (files.transactions, files.pageviews, files.decisions);
    let rotated = |p: &std::path::Path| std::path::PathBuf::from(format!("{}.1", p.display()));
    let capture = Capture::start(&info.namespaces.servers, "srv0", dir.join("server.pcap"));
    let arm = RlmArm { rules: CLASSES.into(), ..RlmArm::default() };
    let rlm = Inline::start(&info.namespaces.appliance, &arm, &dir, Duration::from_secs(10)).expect("rlm run starts");
    let srcs: Vec<String> = info.clients.high.iter().chain(info.clients.low.iter()).cycle().take(300).cloned().collect();
    for r in fetch_from_clients(&info, srcs[..150].to_vec()) {
        r.expect("a page through rlm");
    }
    // The first half's pageviews end (past their quiet period) and are written.
    std::thread::sleep(Duration::from_secs(6));
    // logrotate: rename, then SIGHUP.
    std::fs::rename(&pv, rotated(&pv)).unwrap();
    std::fs::rename(&tx, rotated(&tx)).unwrap();
    // SAFETY: kill(2) on rlm's pid (`ip netns exec` execs it), still our unreaped child.
    unsafe { libc::kill(rlm.pid as i32, libc::SIGHUP) };
    for r in fetch_from_clients(&info, srcs[150..].to_vec()) {
        r.expect("a page through rlm after the SIGHUP");
    }
    let out = rlm.stop().expect("stop");
    let server_pcap = capture.stop();
    assert_eq!(out.exit_code, Some(0), "rlm exits 0 on SIGTERM; log {}", out.log.display());
    let log = std::fs::read_to_string(&out.log).unwrap();
    assert!(log.contains("SIGHUP: reopening the record files"), "{log}");
    assert!(log.contains("SIGHUP: the rule file is unchanged"), "{log}");
    assert!(!log.contains("SIGHUP: new rules in force"), "{log}");

    // What rlm says it wrote at exit (its log's line, as the lab reads it) is what the files
    // hold, and nothing was lost.
    let counts = out.records.as_ref().and_then(|r| r.counts.clone()).unwrap_or_else(|| panic!("no records line at exit:\n{log}"));
    println!("records at exit: {counts:?}");
    assert_eq!(counts.keys().map(String::as_str).collect::<Vec<_>>(), ["decisions", "pageviews", "transactions"]);
    assert!(counts.values().all(|c| c.dropped == 0), "records dropped: {counts:?}");
    let at_exit = |kind: &str| counts[kind].written;
    let (live_tx_old, live_tx_new) = (json_lines(&rotated(&tx)), json_lines(&tx));
    let (live_pv_old, live_pv_new) = (json_lines(&rotated(&pv)), json_lines(&pv));
    assert!(!live_tx_old.is_empty() && !live_tx_new.is_empty(), "transactions on both sides of the rotation");
    assert!(!live_pv_old.is_empty() && !live_pv_new.is_empty(), "pageviews on both sides of the rotation");
    assert_eq!((live_tx_old.len() + live_tx_new.len()) as u64, at_exit("transactions"));
    assert_eq!(at_exit("transactions"), 300, "one transaction per page");
    assert_eq!((live_pv_old.len() + live_pv_new.len()) as u64, at_exit("pageviews"));
    assert!(json_lines(&dec).is_empty() && at_exit("decisions") == 0, "no rule acts, no decision");
    // Every pageview exactly once: pageview ids count from 1 in the order they began, and every
    // pageview opened is reported (at the latest by the shutdown at SIGTERM).
    let mut ids: Vec<u64> = live_pv_old.iter().chain(&live_pv_new).map(|p| p["id"].as_u64().expect("an id")).collect();
    ids.sort_unstable();
    assert_eq!(ids, (1..=at_exit("pageviews")).collect::<Vec<u64>>(), "pageview ids across the renamed and the new file");

    // /status and /metrics, saved just before SIGTERM, count them too.
    let status: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.status.as_ref().expect("status")).unwrap()).unwrap();
    println!("status records: {}", status["records"]);
    assert_eq!(status["records"]["transactions"]["written"], 300);
    assert_eq!(status["records"]["pageviews"]["dropped"], 0);
    assert_eq!(status["records"]["reopen_errors"], 0);
    let metrics = std::fs::read_to_string(out.metrics.as_ref().expect("metrics")).unwrap();
    let written = testbed::inline::prom::by_label(&testbed::inline::prom::parse(&metrics), "rlm_records_written", "kind");
    assert_eq!(written.get("transactions").copied(), Some(300.0), "{written:?}");

    // The schema: the keys of every live record are those of `rlm analyze` over a capture of the
    // same traffic.
    let (off_tx, off_pv) = (dir.join("offline-tx.jsonl"), dir.join("offline-pv.jsonl"));
    let analyzed = std::process::Command::new(testbed::inline::rlm_binary().unwrap())
        .args(["analyze", "--quiet", "--server-port", "80", "--transactions"])
        .arg(&off_tx)
        .arg("--pageviews")
        .arg(&off_pv)
        .arg(&server_pcap)
        .output()
        .expect("rlm analyze");
    assert!(analyzed.status.success(), "rlm analyze: {}", String::from_utf8_lossy(&analyzed.stderr));
    let (offline_tx, offline_pv) = (json_lines(&off_tx), json_lines(&off_pv));
    println!(
        "offline: {} transactions, {} pageviews; live: 300 transactions, {} pageviews",
        offline_tx.len(),
        offline_pv.len(),
        at_exit("pageviews")
    );
    assert_eq!(offline_tx.len(), 300, "the capture holds every page");
    // Every pageview the capture shows, rlm wrote live: those still open at SIGTERM too.
    assert_eq!(at_exit("pageviews"), offline_pv.len() as u64, "live pageviews against rlm analyze's over the capture");
    let live_tx: Vec<serde_json::Value> = live_tx_old.into_iter().chain(live_tx_new).collect();
    let live_pv: Vec<serde_json::Value> = live_pv_old.into_iter().chain(live_pv_new).collect();
    assert_eq!(key_sets(&offline_tx).len(), 1, "every offline transaction has the same keys");
    assert_eq!(key_sets(&live_tx), key_sets(&offline_tx), "live transactions have rlm analyze's keys");
    assert_eq!(key_sets(&offline_pv).len(), 1, "every offline pageview has the same keys");
    assert_eq!(key_sets(&live_pv), key_sets(&offline_pv), "live pageviews have rlm analyze's keys");
    // The times: live and capture agree. The capture is taken on the farm's port, a veth hop from
    // where the fast path stamps, and the kernel promises nothing about how long a busy machine
    // takes over that hop: CI's run of 2026-11-26, with the other inline tests beside it, had one
    // pageview 2.4 ms off (0.08 ms at worst with the machine quiet). So the median must agree
    // within 0.5 ms and nine in ten within 2 ms (measured: 0.006 and 0.012 ms).
    let key = |p: &serde_json::Value| (p["client"].as_str().unwrap_or("").to_string(), p["container"].as_str().unwrap_or("").to_string());
    let mut diffs: Vec<f64> = live_pv
        .iter()
        .map(|p| {
            let start = p["start_ts"].as_f64().expect("start_ts");
            let off = offline_pv
                .iter()
                .filter(|o| key(o) == key(p))
                .min_by(|a, b| (a["start_ts"].as_f64().unwrap() - start).abs().total_cmp(&(b["start_ts"].as_f64().unwrap() - start).abs()))
                .unwrap_or_else(|| panic!("no offline pageview for {p}"));
            (p["rt_s"].as_f64().unwrap() - off["rt_s"].as_f64().unwrap()).abs()
        })
        .collect();
    diffs.sort_by(f64::total_cmp);
    let (median, p90, worst) = (diffs[diffs.len() / 2], diffs[diffs.len() * 9 / 10], diffs[diffs.len() - 1]);
    println!("live against offline response times: median {:.3} ms, p90 {:.3} ms, worst {:.3} ms", median * 1e3, p90 * 1e3, worst * 1e3);
    assert!(median <= 0.0005 && p90 <= 0.002, "live pageviews off the capture's: median {:.3} ms, p90 {:.3} ms", median * 1e3, p90 * 1e3);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `rlm run --engines 2`: the kernel deals each client's packets to one of two engines (the lab's
/// clients span both), each on its thread. Every page is measured once (one transaction each,
/// pageview ids unique, none lost), the engines' counters add up in `/status`, and DROP SYN for
/// one LOW client is carried out by the kernel from the verdict its engine published; SRPT's
/// classifier learns the response sizes of both engines' flows. A rule file that needs the
/// queue is refused at start.
#[test]
fn two_engines_each_measure_their_clients_and_publish_their_verdicts() {
    use rlm_core::engine::Sharding;
    // The short page, and a 300 KB image (`/big`) that crosses the shaped link in 120 ms.
    let respond: Responder = Arc::new(|target: &str| {
        if target == "/big" {
            let mut r = b"HTTP/1.1 200 OK\r\nContent-Type: image/gif\r\nContent-Length: 300000\r\nConnection: close\r\n\r\n".to_vec();
            r.extend(std::iter::repeat_n(b'G', 300_000 - 6));
            r.extend_from_slice(b"hello\n");
            r
        } else {
            b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nhello\n".to_vec()
        }
    });
    let (_plan, _guard, info, _) = lab_serving("e", 4, Some(respond));
    let dir = std::env::temp_dir().join(format!("rlm-engines-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let dropped = info.clients.low[0].clone();
    let others: Vec<String> = info.clients.high.iter().chain(info.clients.low[1..].iter()).cloned().collect();
    let sharding = Sharding::new(&rlm_core::Config { server_ports: vec![80], ..Default::default() }, 2);
    let engine_of = |c: &String| sharding.shard_of_client(c.parse().unwrap());
    let spread: std::collections::BTreeSet<usize> = others.iter().map(engine_of).collect();
    assert_eq!(spread.len(), 2, "the lab's clients span both engines: {others:?}");
    let srpt = ["--srpt", "srpt", "--srpt-link-bps", "20000000", "--srpt-state-dir", ""].map(String::from);
    let arm = RlmArm {
        rules: format!("{CLASSES}IF IP.SRC == {dropped} THEN DROP SYN\n"),
        extra_args: [vec!["--engines".into(), "2".into()], srpt.to_vec()].concat(),
        ..RlmArm::default()
    };
    let rlm = Inline::start(&info.namespaces.appliance, &arm, &dir, Duration::from_secs(10)).expect("rlm run --engines 2 starts");
    let srcs: Vec<String> = others.iter().cycle().take(210).cloned().collect();
    for r in fetch_from_clients(&info, srcs.clone()) {
        r.expect("a page through two engines");
    }
    // An image for each client, ranked by the size its engine published after its head.
    let ns = info.namespaces.clients.clone();
    let big: Vec<std::io::Result<()>> = std::thread::spawn({
        let others = others.clone();
        move || {
            netns::enter(&ns).unwrap();
            others.iter().map(|s| fetch_target(s, "/big", Duration::from_secs(5))).collect()
        }
    })
    .join()
    .unwrap();
    for r in big {
        r.expect("an image through two engines");
    }
    // The LOW client's first SYN is held and dropped by its engine, the next by the kernel.
    let until = Instant::now() + Duration::from_secs(3);
    loop {
        let r = fetch_from_clients_within(&info, vec![dropped.clone()], Duration::from_millis(300));
        assert!(r[0].is_err(), "DROP SYN holds for {dropped}");
        let m = rlm.get("/metrics").expect("/metrics");
        let fp = testbed::inline::prom::by_label(&testbed::inline::prom::parse(&m), "rlm_fastpath_packets", "counter");
        if fp.get("syn_dropped").copied().unwrap_or(0.0) >= 1.0 {
            break;
        }
        assert!(Instant::now() < until, "the kernel never dropped {dropped}'s SYN from its engine's verdict: {fp:?}");
    }
    std::thread::sleep(Duration::from_secs(5));
    let out = rlm.stop().expect("stop");
    let log = std::fs::read_to_string(&out.log).unwrap();
    assert_eq!(out.exit_code, Some(0), "rlm exits 0 on SIGTERM; log:\n{log}");
    assert!(log.contains("dealt to one of 2 engines"), "{log}");
    let counts = out.records.as_ref().and_then(|r| r.counts.clone()).unwrap_or_else(|| panic!("no records line at exit:\n{log}"));
    assert!(counts.values().all(|c| c.dropped == 0), "records dropped: {counts:?}");
    let files = RlmRecords::in_dir(&dir);
    let tx = json_lines(&files.transactions);
    assert_eq!(tx.len(), 210 + others.len(), "one transaction per page and image, each measured by one engine");
    let pv = json_lines(&files.pageviews);
    assert_eq!(pv.len() as u64, counts["pageviews"].written);
    let ids: std::collections::BTreeSet<u64> = pv.iter().map(|p| p["id"].as_u64().expect("an id")).collect();
    assert_eq!(ids.len(), pv.len(), "pageview ids unique across the engines");
    let by_engine: std::collections::BTreeSet<usize> = pv.iter().map(|p| engine_of(&p["client"].as_str().unwrap().to_string())).collect();
    assert_eq!(by_engine.len(), 2, "both engines wrote pageviews");
    let decisions = json_lines(&files.decisions);
    assert!(!decisions.is_empty(), "DROP SYN decisions written");
    assert!(decisions.iter().all(|d| d["client"].as_str().is_some_and(|c| c.starts_with(&format!("{dropped}:")))), "only {dropped} decided against");
    let status: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.status.as_ref().expect("status")).unwrap()).unwrap();
    let engines = status["engines"].as_array().expect("each engine's status");
    assert_eq!(engines.len(), 2);
    let frames: Vec<u64> = engines.iter().map(|e| e["stats"]["frames"].as_u64().unwrap_or(0)).collect();
    assert!(frames.iter().all(|&f| f > 0), "each engine handled frames: {frames:?}");
    assert_eq!(status["stats"]["frames"].as_u64(), Some(frames.iter().sum()), "the status adds the engines' counters");
    assert_eq!(status["stats"]["transactions"].as_u64(), Some(210 + others.len() as u64));
    // SRPT's one classifier learns the responses' sizes from both engines' doors.
    let published: Vec<u64> = engines.iter().map(|e| e["stats"]["srpt_sizes_published"].as_u64().unwrap_or(0)).collect();
    assert!(published.iter().all(|&p| p > 0), "each engine published its responses' sizes: {published:?}");
    let errors: Vec<u64> = engines.iter().map(|e| e["map_update_errors"].as_u64().unwrap_or(u64::MAX)).collect();
    assert_eq!(errors, [0, 0], "every size written through the engines' doors");
    assert!(status["srpt"]["known"].as_u64().unwrap_or(0) > 0, "the classifier ranked the images by the sizes the engines wrote: {}", status["srpt"]);

    // Rules that need the netfilter queue are refused before anything is installed.
    let bad = RlmArm {
        rules: format!("{CLASSES}IF HEADER.User-Agent == \"*bot*\" THEN REJECT 429\n"),
        extra_args: vec!["--engines".into(), "2".into()],
        ..RlmArm::default()
    };
    let refused = Inline::start(&info.namespaces.appliance, &bad, &dir.join("bad"), Duration::from_secs(5));
    assert!(refused.is_err(), "rlm run --engines 2 with REJECT starts");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn farm_stays_reachable_when_rlm_is_killed_under_load() {
    let (_plan, _guard, info) = lab("k", 4);
    let dir = std::env::temp_dir().join(format!("rlm-kill-{}", std::process::id()));
    // SYNs through NFQUEUE: what carries them once rlm is killed is the queue's bypass (held
    // SYNs need nothing: their tcx links go with rlm's process).
    let arm = RlmArm { rules: QUEUE_EVERY_SYN.into(), extra_args: vec!["--undecided-syns".into(), "queue".into()], ..RlmArm::default() };
    // A box whose bridged traffic does not pass iptables: rlm turns it on while it runs.
    let ports = [info.bridge.client_port.as_str(), info.bridge.server_port.as_str()];
    for k in ["bridge-nf-call-iptables", "bridge-nf-call-ip6tables"] {
        in_ns(&info.namespaces.appliance, &["sysctl", "-q", "-w", &format!("net.bridge.{k}=0")]);
    }
    let found = testbed::inline::host_state(&info.namespaces.appliance, &ports);
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
    // rlm and its guard together (as a stop that kills the whole service): what carries the
    // traffic here is the kernel's bypass alone.
    rlm.kill_with_guard().expect("kill -9");
    let killed = Instant::now();
    assert!(!rlm.running());
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::SeqCst);
    let logs: Vec<_> = loops.into_iter().flat_map(|h| h.join().unwrap()).collect();

    // The queue rules are still there (SIGKILL of rlm and its guard leaves them): what carries
    // the traffic is the kernel's bypass, not their removal.
    let left = rlm_rules(&info.namespaces.appliance);
    assert!(!left.is_empty(), "SIGKILL cannot remove the rules");
    let after: Vec<_> = logs.iter().filter(|(t, _, _)| *t >= killed).collect();
    let slow: Vec<_> = after.iter().filter(|(_, d, r)| r.is_err() || *d >= Duration::from_secs(1)).collect();
    let before_n = logs.len() - after.len();
    println!("{before_n} fetches before the kill, {} after; failed or slower than 1 s after: {}", after.len(), slow.len());
    assert!(after.len() >= 100, "the loops kept fetching after the kill: {}", after.len());
    assert!(slow.is_empty(), "every fetch after the kill succeeded within a second: {:?}", &slow[..slow.len().min(5)]);

    // A fresh rlm removes what the killed one left, and leaves nothing when stopped: the
    // sysctls and mangle tables as the killed rlm found them, which it recorded with its rules
    // (broken once: kept in memory only, the fresh rlm took the sysctls at 1 and the tables
    // for what it found, and left them so).
    let rlm = Inline::start(&info.namespaces.appliance, &arm, &dir, Duration::from_secs(10)).expect("rlm run starts after a crash");
    let out = rlm.stop().expect("stop");
    assert_eq!(out.exit_code, Some(0));
    assert!(out.rules_left.is_empty(), "{:?}", out.rules_left);
    let after = testbed::inline::host_state(&info.namespaces.appliance, &ports);
    for ((what, was), (_, is)) in found.iter().zip(&after) {
        assert_eq!(was, is, "{what} after a crash, a fresh rlm and its clean exit");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// rlm's programs as `tc filter show` names them.
const RLM_PROGRAMS: [&str; 4] = ["syn_admit", "observe", "classify", "srpt_acks"];

/// What of rlm's is installed in the appliance namespace: its HTB root on the client port, its
/// tc filters on either port (clsact), its netfilter rules.
#[derive(Debug, Default, PartialEq)]
struct Installed {
    qdisc: bool,
    filters: Vec<String>,
    rules: Vec<String>,
}

fn installed(ns: &str) -> Installed {
    let show = |args: &[&str]| testbed::topology::in_ns(ns, "tc", args).unwrap_or_default();
    let qdisc = show(&["qdisc", "show", "dev", testbed::inline::CLIENT_PORT]).contains("qdisc htb 7e1: root");
    let mut filters = Vec::new();
    for dev in [testbed::inline::CLIENT_PORT, testbed::inline::SERVER_PORT] {
        for dir in ["ingress", "egress"] {
            for l in show(&["filter", "show", "dev", dev, dir]).lines() {
                if let Some(p) = RLM_PROGRAMS.iter().find(|p| l.contains(&format!(" name {p} "))) {
                    filters.push(format!("{p} on {dev} {dir}"));
                }
            }
        }
    }
    Installed { qdisc, filters, rules: rlm_rules(ns) }
}

/// rlm's arm for the fail-open tests: `DROP SYN` for the LOW client's address, `--srpt fair` on
/// the client port, the programs attached as `attach` says, and `extra` flags.
fn drop_low_arm(info: &Info, attach: &str, extra: &[&str]) -> RlmArm {
    let rules = format!("{CLASSES}IF IP.SRC == {} THEN DROP SYN\n", info.clients.low[0]);
    let mut extra_args: Vec<String> = [
        "--srpt",
        "fair",
        "--srpt-link-bps",
        "100000000",
        "--srpt-state-dir",
        "",
        "--ebpf-attach",
        attach,
        "--undecided-syns",
        undecided_syns(attach),
    ]
    .into_iter()
    .map(String::from)
    .collect();
    extra_args.extend(extra.iter().map(|a| a.to_string()));
    RlmArm { rules, extra_args, records: false, count_maps: false, cpus: None }
}

/// How the tests that run both attachments have rlm treat the SYNs the kernel has no verdict
/// for: held with tcx links (the default), queued with clsact filters (so that both paths, and
/// the queue rules' removal, are covered).
fn undecided_syns(attach: &str) -> &'static str {
    if attach == "clsact" {
        "queue"
    } else {
        "hold"
    }
}

/// While rlm runs: everything is installed, and the LOW client's SYNs are dropped by the
/// kernel from the verdict rlm published (the first decided by rlm, held or queued, the next by
/// `syn_admit`).
fn drops_low_in_the_kernel(rlm: &Inline, info: &Info, attach: &str) {
    let ns = &info.namespaces.appliance;
    let i = installed(ns);
    let queued = undecided_syns(attach) == "queue";
    assert!(i.qdisc && i.rules.is_empty() != queued, "rlm's qdisc, and its queue rules only when SYNs are queued, while it runs: {i:?}");
    if attach == "clsact" {
        for f in ["syn_admit on app-c ingress", "srpt_acks on app-c ingress", "classify on app-c egress", "observe on app-s ingress"] {
            assert!(i.filters.iter().any(|x| x == f), "{f} while rlm runs: {i:?}");
        }
    } else {
        assert!(i.filters.is_empty(), "tcx links are not clsact filters: {i:?}");
    }
    let until = Instant::now() + Duration::from_secs(3);
    loop {
        let r = fetch_from_clients_within(info, vec![info.clients.low[0].clone()], Duration::from_millis(300));
        assert!(r[0].is_err(), "DROP SYN holds for the LOW client while rlm runs");
        let m = rlm.get("/metrics").expect("/metrics");
        let fp = testbed::inline::prom::by_label(&testbed::inline::prom::parse(&m), "rlm_fastpath_packets", "counter");
        if fp.get("syn_dropped").copied().unwrap_or(0.0) >= 1.0 {
            return;
        }
        assert!(Instant::now() < until, "the kernel never dropped the LOW client's SYN: {fp:?}");
    }
}

/// From `died` on, within `limit`: the LOW client's SYN reaches the farm (a fetch succeeds),
/// nothing of rlm's is installed and no guard runs. Returns how long after `died` it all held.
fn fails_open_within(what: &str, info: &Info, died: Instant, limit: Duration) -> Duration {
    let ns = &info.namespaces.appliance;
    loop {
        let fetched = fetch_from_clients_within(info, vec![info.clients.low[0].clone()], Duration::from_millis(250)).remove(0);
        let i = installed(ns);
        let guards = testbed::inline::guards_in(ns);
        let t = died.elapsed();
        if fetched.is_ok() && i == Installed::default() && guards.is_empty() {
            return t;
        }
        assert!(t < limit, "{t:?} after {what}: fetch {fetched:?}, still installed {i:?}, guards running {guards:?}");
    }
}

/// Fail-open wherever rlm dies (issue 24): rlm inline with `DROP SYN` for the LOW client (its
/// verdict held by the kernel) and `--srpt fair` shaping the client port.
/// (i) `kill -9` of rlm: its guard removes what it installed; (ii) a panic (`--fault
/// panic-after=3`) with the guard killed first: rlm's own `Drop`s remove it. Within 1 s of the
/// death the LOW client's SYN reaches the farm, the client port has no rlm qdisc, neither port
/// an rlm tc filter, and no rlm rule is left. (iii) rlm and its guard killed together leave
/// everything; the next rlm, with `[srpt] mode = "off"` and no DROP rule, removes it at its
/// start, and (iv) `rlm cleanup --config` does the same. (v) rlm alive but stopped (SIGSTOP):
/// within 1 s its programs, their heartbeat stale, let the LOW client's SYN through, and after
/// SIGCONT they drop it again.
fn fail_open_when_rlm_dies(tag: &str, attach: &str) {
    let started = Instant::now();
    let (_plan, _guard, info) = lab(tag, 1);
    let ns = info.namespaces.appliance.clone();
    let dir = std::env::temp_dir().join(format!("rlm-failopen-{attach}-{}", std::process::id()));
    let arm = drop_low_arm(&info, attach, &[]);

    // (i) kill -9.
    let mut rlm = Inline::start(&ns, &arm, &dir, Duration::from_secs(10)).expect("rlm run starts");
    assert!(rlm.guard_pid().is_some(), "rlm runs with a guard");
    drops_low_in_the_kernel(&rlm, &info, attach);
    let died = Instant::now();
    rlm.kill().expect("kill -9");
    let t_kill = fails_open_within("kill -9", &info, died, Duration::from_secs(1));

    // (ii) a panic, the guard gone first.
    let arm_panic = drop_low_arm(&info, attach, &["--fault", "panic-after=3"]);
    let mut rlm = Inline::start(&ns, &arm_panic, &dir, Duration::from_secs(10)).expect("rlm run starts");
    drops_low_in_the_kernel(&rlm, &info, attach);
    rlm.kill_guard();
    assert!(rlm.running(), "rlm still runs once its guard is killed (raise panic-after if the lab is slow)");
    let status = rlm.wait_exit(Duration::from_secs(10)).expect("wait").expect("rlm panics within 10 s");
    let died = Instant::now();
    assert_eq!(status.code(), Some(101), "a panic's exit status");
    let t_panic = fails_open_within("the panic", &info, died, Duration::from_secs(1));

    // (v) rlm stopped, not dead: nothing cleans up, the programs' heartbeat goes stale.
    let mut rlm = Inline::start(&ns, &arm, &dir, Duration::from_secs(10)).expect("rlm run starts");
    drops_low_in_the_kernel(&rlm, &info, attach);
    rlm.signal(libc::SIGSTOP).expect("SIGSTOP");
    let stopped = Instant::now();
    let t_stop = loop {
        let r = fetch_from_clients_within(&info, vec![info.clients.low[0].clone()], Duration::from_millis(250)).remove(0);
        if r.is_ok() {
            break stopped.elapsed();
        }
        assert!(stopped.elapsed() < Duration::from_secs(1), "a stopped rlm's DROP SYN still holds after {:?}: {r:?}", stopped.elapsed());
    };
    rlm.signal(libc::SIGCONT).expect("SIGCONT");
    drops_low_in_the_kernel(&rlm, &info, attach);

    // (iii) rlm and its guard killed together: everything stays. A leftover syn_admit (clsact)
    // stops dropping with the heartbeat it no longer gets.
    rlm.kill_with_guard().expect("kill -9 of both");
    let died = Instant::now();
    let left = installed(&ns);
    assert!(left.qdisc && left.rules.is_empty() != (undecided_syns(attach) == "queue"), "{left:?}");
    assert_eq!(left.filters.is_empty(), attach != "clsact", "{left:?}");
    loop {
        let r = fetch_from_clients_within(&info, vec![info.clients.low[0].clone()], Duration::from_millis(250)).remove(0);
        if r.is_ok() {
            break;
        }
        assert!(died.elapsed() < Duration::from_secs(1), "rlm's leftovers still drop after {:?}: {r:?}", died.elapsed());
    }
    let plain =
        RlmArm { rules: CLASSES.into(), extra_args: vec!["--ebpf-attach".into(), attach.into()], records: false, count_maps: false, cpus: None };
    let rlm = Inline::start(&ns, &plain, &dir, Duration::from_secs(10)).expect("rlm run starts after a crash");
    let now = installed(&ns);
    assert!(!now.qdisc, "the leftover qdisc is gone though this run does not shape: {now:?}");
    let want: Vec<String> = if attach == "clsact" {
        vec!["syn_admit on app-c ingress".into(), "observe on app-s ingress".into(), "observe on app-s egress".into()]
    } else {
        vec![]
    };
    assert_eq!(now.filters, want, "only this run's filters");
    fetch_from_clients(&info, vec![info.clients.low[0].clone()]).remove(0).expect("the LOW client gets its page");
    let out = rlm.stop().expect("stop");
    assert!(out.clean_exit, "{out:?}");
    assert_eq!(installed(&ns), Installed::default());

    // (iv) `rlm cleanup`, after both were killed again.
    let mut rlm = Inline::start(&ns, &arm, &dir, Duration::from_secs(10)).expect("rlm run starts");
    rlm.kill_with_guard().expect("kill -9 of both");
    assert_ne!(installed(&ns), Installed::default());
    let config = dir.join("cleanup.toml");
    std::fs::write(
        &config,
        format!(
            "bridge = {:?}\nclient_port = {:?}\nserver_port = {:?}\n",
            testbed::inline::BRIDGE,
            testbed::inline::CLIENT_PORT,
            testbed::inline::SERVER_PORT
        ),
    )
    .unwrap();
    let rlm_bin = testbed::inline::rlm_binary().unwrap();
    let out =
        std::process::Command::new("ip").args(["netns", "exec", &ns]).arg(&rlm_bin).args(["cleanup", "--config"]).arg(&config).output().unwrap();
    assert!(out.status.success(), "rlm cleanup: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(installed(&ns), Installed::default(), "{}", String::from_utf8_lossy(&out.stderr));
    println!("{attach}: fail-open {t_kill:?} after kill -9, {t_panic:?} after the panic, {t_stop:?} after SIGSTOP; test {:?}", started.elapsed());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn fails_open_when_rlm_is_killed_or_panics_tcx() {
    fail_open_when_rlm_dies("gt", "auto");
}

#[test]
fn fails_open_when_rlm_is_killed_or_panics_clsact() {
    fail_open_when_rlm_dies("gc", "clsact");
}

/// FAST SYN and FAST SYN/ACK on the wire: the farm drops every other SYN (as a full listen
/// queue does) and the client's side loses every other SYN/ACK. rlm sends the SYN again toward
/// the farm and the SYN/ACK again toward the client, 300 ms after each, as whole frames that
/// tshark (not our parser) finds well-formed with good checksums; each page takes well under the
/// client's 1 s SYN timeout, and the farm sees exactly one connection per page.
#[test]
fn fast_syn_and_synack_frames_are_well_formed_and_make_one_connection_each() {
    let (_plan, _guard, info, accepted) = lab_counting("f", 1);
    let dir = std::env::temp_dir().join(format!("rlm-fast-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let rules = format!("{CLASSES}IF IP.SRC == *.*.*.* THEN\n  FAST SYN + SYN/ACK GAP 300ms\n");
    let arm = RlmArm { rules, ..RlmArm::default() };
    let rlm = Inline::start(&info.namespaces.appliance, &arm, &dir, Duration::from_secs(10)).expect("rlm run starts");
    let src = info.clients.high[0].clone();
    // The endpoints compute their checksums themselves, so that tshark can judge every packet.
    in_ns(&info.namespaces.servers, &["ethtool", "-K", "srv0", "tx", "off"]);
    in_ns(&info.namespaces.clients, &["ethtool", "-K", &info.clients.interface, "tx", "off"]);
    // One page first: its handshake teaches rlm the link addresses of both sides.
    fetch_from_clients(&info, vec![src.clone()]).pop().unwrap().expect("a first page");
    let (srv_cap, cli_cap) = (
        Capture::start(&info.namespaces.servers, "srv0", dir.join("server.pcap")),
        Capture::start(&info.namespaces.clients, &info.clients.interface, dir.join("client.pcap")),
    );
    let every_other = ["-m", "statistic", "--mode", "nth", "--every", "2", "--packet", "0", "-j", "DROP"];
    in_ns(&info.namespaces.servers, &[&["iptables", "-A", "INPUT", "-p", "tcp", "--dport", "80", "--syn"][..], &every_other].concat());
    in_ns(
        &info.namespaces.clients,
        &[&["iptables", "-A", "INPUT", "-p", "tcp", "--sport", "80", "--tcp-flags", "SYN,ACK", "SYN,ACK"][..], &every_other].concat(),
    );
    const PAGES: usize = 5;
    let ns = info.namespaces.clients.clone();
    let times: Vec<(Duration, std::io::Result<()>)> = std::thread::spawn(move || {
        netns::enter(&ns).unwrap();
        (0..PAGES)
            .map(|_| {
                let t = Instant::now();
                let r = fetch(&src, Duration::from_secs(5));
                (t.elapsed(), r)
            })
            .collect()
    })
    .join()
    .unwrap();
    let (srv, cli) = (srv_cap.finish(), cli_cap.finish());
    let out = rlm.stop().expect("stop");
    let status: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.status.as_ref().expect("status")).unwrap()).unwrap();
    println!("page times {:?}", times.iter().map(|(d, _)| d.as_millis()).collect::<Vec<_>>());
    println!("rlm stats {}", status["stats"]);
    println!("injector {}", status["injector"]);
    for (d, r) in &times {
        assert!(r.is_ok(), "{r:?}");
        // Without rlm: a 1 s SYN timeout, and then a SYN/ACK lost again half the time.
        assert!(*d < Duration::from_millis(900), "a page took {d:?}: the retransmissions came from rlm, every 300 ms");
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 1 + PAGES, "one connection at the farm per page");
    assert!(status["stats"]["fast_syns_sent"].as_u64().unwrap_or(0) >= PAGES as u64);
    assert!(status["stats"]["fast_synacks_sent"].as_u64().unwrap_or(0) >= PAGES as u64);
    assert_eq!(status["injector"]["failed"].as_u64(), Some(0));
    // The held SYNs rlm passed went on from its socket, counted apart from the frames it made.
    assert!(status["injector"]["forwarded"].as_u64().unwrap_or(0) > PAGES as u64, "{}", status["injector"]);
    assert_eq!(status["injector"]["forward_failed"].as_u64(), Some(0));
    // Every client SYN came to rlm (FAST SYN needs each): held by the kernel, none passed
    // undecided (rlm tells the kernel it took them: none is late), none through NFQUEUE.
    let metrics = testbed::inline::prom::parse(&std::fs::read_to_string(out.metrics.as_ref().expect("metrics")).unwrap());
    let fastpath = testbed::inline::prom::by_label(&metrics, "rlm_fastpath_packets", "counter");
    println!("fast path {fastpath:?}");
    let count = |c: &str| fastpath.get(c).copied().unwrap_or(0.0);
    assert!(count("syn_held") >= PAGES as f64 + 1.0, "every SYN held for rlm: {fastpath:?}");
    assert_eq!((count("hold_failed"), count("hold_late"), count("syn_queued")), (0.0, 0.0, 0.0), "{fastpath:?}");
    // Every packet on both wires, injected ones included, has good IP and TCP checksums by
    // tshark's reckoning.
    for (side, rows) in [("server", &srv), ("client", &cli)] {
        assert!(!rows.is_empty(), "{side} capture is empty");
        let bad: Vec<_> = rows.iter().filter(|r| !(r.4 && r.5)).collect();
        assert!(bad.is_empty(), "{side}: packets with bad checksums: {bad:?}");
    }
    // The farm saw each page's SYN twice (its own drop, then rlm's copy: the same sequence
    // number) and answered it with one SYN/ACK; the client saw each SYN/ACK twice, the same.
    let per_stream = |rows: &[(u32, bool, bool, u64, bool, bool)], synack: bool| {
        let mut m: std::collections::BTreeMap<u32, Vec<u64>> = Default::default();
        for r in rows.iter().filter(|r| r.1 && r.2 == synack) {
            m.entry(r.0).or_default().push(r.3);
        }
        m
    };
    let syns_at_server = per_stream(&srv, false);
    println!("SYNs at the farm by stream: {syns_at_server:?}; SYN/ACKs at the client: {:?}", per_stream(&cli, true));
    assert_eq!(syns_at_server.len(), PAGES, "{syns_at_server:?}");
    for seqs in syns_at_server.values() {
        assert!(seqs.len() >= 2 && seqs.iter().all(|s| *s == seqs[0]), "one SYN, sent again unchanged: {seqs:?}");
    }
    for seqs in per_stream(&srv, true).values() {
        assert!(seqs.iter().all(|s| *s == seqs[0]), "one connection per page at the farm: {seqs:?}");
    }
    let synacks_at_client = per_stream(&cli, true);
    assert_eq!(synacks_at_client.len(), PAGES, "{synacks_at_client:?}");
    for seqs in synacks_at_client.values() {
        assert!(seqs.len() >= 2 && seqs.iter().all(|s| *s == seqs[0]), "one SYN/ACK, sent again unchanged: {seqs:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The MAC address of a device in a namespace.
fn mac_of(ns: &str, dev: &str) -> [u8; 6] {
    testbed::raw::mac_of(ns, dev).unwrap()
}

fn rss_kib(pid: u32) -> u64 {
    testbed::inline::rss_kib(pid).expect("rlm runs")
}

/// With the offloads every real box keeps on (TSO/GSO at the farm, GRO/GSO on the appliance's
/// ports), rlm's fast path sees super-frames up to 64 KB and copies 2 KiB of each (16 KiB of
/// one that starts a response): rlm measures them by their length on the wire. 200 fetches of
/// a 200,000-byte object through `rlm run`: every one a transaction with its whole body
/// counted, no frame counted truncated, the bodies past their heads crossing as their segments'
/// headers (body cuts); and a 9 KB page's 40 image references all listed.
#[test]
fn with_offloads_on_rlm_measures_every_body_by_its_length_on_the_wire() {
    const BODY: usize = 200_000;
    let response = {
        let mut r =
            format!("HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {BODY}\r\nConnection: close\r\n\r\n").into_bytes();
        r.extend(std::iter::repeat_n(b'x', BODY - 6));
        r.extend_from_slice(b"hello\n");
        r
    };
    let imgs: String = (1..=40)
        .map(|i| {
            format!(
                "<p>item {i} of the catalogue, with a few words about it</p><img src=\"/img/item-{i:03}.gif\" alt=\"item {i}\">\n{}\n",
                " ".repeat(120)
            )
        })
        .collect();
    let page = format!("<html><body>\n{imgs}</body></html>\nhello\n");
    // Longer than four 2 KiB copies, and within the first flight's super-frame (about 10 KB here).
    assert!(page.len() > 8_200 && page.len() < 9_500, "{} bytes of HTML", page.len());
    let page =
        format!("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}", page.len()).into_bytes();
    let respond = move |target: &str| if target == "/page.html" { page.clone() } else { response.clone() };
    let (_plan, _guard, info, _) = lab_serving("g", 1, Some(Arc::new(respond)));
    for (ns, dev) in [(&info.namespaces.appliance, "app-c"), (&info.namespaces.appliance, "app-s"), (&info.namespaces.servers, "srv0")] {
        in_ns(ns, &["ethtool", "-K", dev, "tso", "on", "gso", "on", "gro", "on"]);
    }
    let dir = std::env::temp_dir().join(format!("rlm-offloads-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (tx, pv) = (dir.join("tx.jsonl"), dir.join("pv.jsonl"));
    let extra_args = vec!["--transactions".into(), tx.display().to_string(), "--pageviews".into(), pv.display().to_string()];
    let arm = RlmArm { rules: CLASSES.into(), extra_args, records: false, count_maps: false, cpus: None };
    let rlm = Inline::start(&info.namespaces.appliance, &arm, &dir, Duration::from_secs(10)).expect("rlm run starts");
    const FETCHES: usize = 200;
    const PAGES: usize = 5;
    let srcs: Vec<String> = info.clients.high.iter().cycle().take(FETCHES).cloned().collect();
    for r in fetch_from_clients(&info, srcs) {
        r.expect("the object through rlm");
    }
    let (ns, src) = (info.namespaces.clients.clone(), info.clients.low[0].clone());
    std::thread::spawn(move || {
        netns::enter(&ns).unwrap();
        for _ in 0..PAGES {
            fetch_target(&src, "/page.html", Duration::from_secs(3)).expect("the page through rlm");
        }
    })
    .join()
    .unwrap();
    let out = rlm.stop().expect("stop");
    assert_eq!(out.exit_code, Some(0), "log {}", out.log.display());
    let status: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.status.as_ref().expect("status")).unwrap()).unwrap();
    let st = &status["stats"];
    println!(
        "cut frames {}, absent bytes {}, truncated {}, transactions {}",
        st["cut_frames"], st["absent_bytes"], st["malformed"]["truncated"], st["transactions"]
    );
    // The regime: the offloads did make frames longer than the fast path copies.
    assert!(st["cut_frames"].as_u64().unwrap_or(0) > 0, "no super-frames: are the offloads on? {st}");
    assert_eq!(st["malformed"]["truncated"].as_u64(), Some(0), "{st}");
    assert_eq!(st["gap_bytes"].as_u64(), Some(0), "{st}");
    assert_eq!(st["transactions"].as_u64(), Some((FETCHES + PAGES) as u64), "{st}");
    // Bulk never crossed: the objects' bodies, which nothing reads, were cut by the kernel
    // from their heads' segments on (it read each head: an octet stream with a length), so
    // every byte of them reached the engine as a length, none as a copy; the pages, which the
    // engine scans, crossed whole. The engine told the kernel the same of each body, too late
    // to matter on a LAN (its next drain is a few ms away; a body passes in a fraction of one:
    // 49 of some 1,600 segments cut in a run with only its word).
    let fp = &status["fastpath"];
    println!("segments cut {}, heads read by the kernel {}", fp["body_cut"], fp["body_armed"]);
    assert_eq!(fp["body_armed"].as_u64(), Some(FETCHES as u64), "{fp}");
    assert!(fp["body_cut"].as_u64().unwrap_or(0) >= FETCHES as u64, "{fp}");
    // Most segments of a body are not reported at all (one a MiB and the last are, cut): their
    // bytes are taken as absent where the next reported one shows they were carried.
    let (absent, unreported) = (st["absent_bytes"].as_u64().unwrap_or(0), st["unreported_bytes"].as_u64().unwrap_or(0));
    println!("absent bytes {absent}, unreported {unreported}, segments not reported {}", fp["body_silent"]);
    assert_eq!(absent + unreported, (FETCHES * BODY) as u64, "every body byte a length, none a copy: {st}");
    assert!(unreported > 0 && fp["body_silent"].as_u64().unwrap_or(0) > 0, "{fp}");
    assert_eq!(st["bodies_cut"].as_u64(), Some(FETCHES as u64), "{st}");
    let records = json_lines(&tx);
    assert_eq!(records.len(), FETCHES + PAGES);
    for r in records.iter().filter(|r| r["uri"] == "/") {
        assert_eq!(r["response_body_len"].as_u64(), Some(BODY as u64), "{r}");
        assert_eq!(r["status_code"].as_u64(), Some(200), "{r}");
        assert!(r["anomalies"].as_array().is_some_and(|a| a.is_empty()), "{r}");
    }
    // The page came in one super-frame: its first 16 KiB, all of it, were read.
    let pages: Vec<u64> =
        json_lines(&pv).iter().filter(|p| p["container"] == "/page.html").map(|p| p["expected_objects"].as_u64().unwrap_or(0)).collect();
    assert_eq!(pages, vec![40; PAGES], "image references listed per page");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 24: under a ring that fills faster than the engine empties it (a flood of data
/// segments on made-up connections, sent as fast as one thread can, each reported by the fast
/// path), rlm's loop still gives every turn to verdicts, timers, the status and signals: a
/// client whose SYNs all wait for a verdict gets its pages, `/status` keeps being refreshed, and
/// SIGTERM ends rlm within 2 s with its rules removed. (Before the turns were bounded, the loop
/// drained the ring until it was empty, which under such a flood is never.)
#[test]
#[ignore = "floods the machine for 8 s: make test runs it alone, after the others (cargo test -- --ignored)"]
fn rlm_answers_signals_and_verdicts_under_a_full_ring() {
    let (_plan, _guard, info) = lab("q", 1);
    let dir = std::env::temp_dir().join(format!("rlm-ring-{}", std::process::id()));
    // Without records: at its exit rlm writes what it has, which under this flood is 60,000
    // connections' worth (its close is bounded at 5 s).
    let arm = RlmArm { rules: QUEUE_EVERY_SYN.into(), records: false, ..RlmArm::default() };
    let rlm = Inline::start(&info.namespaces.appliance, &arm, &dir, Duration::from_secs(10)).expect("rlm run starts");
    let src = info.clients.high[0].clone();
    fetch_from_clients(&info, vec![src.clone()]).pop().unwrap().expect("a first page");
    let (farm_mac, cli_mac) = (mac_of(&info.namespaces.servers, "srv0"), mac_of(&info.namespaces.clients, &info.clients.interface));
    // Frames made once: a request on each of 60,000 made-up connections (sent again and again,
    // each is a segment rlm reports and reads).
    let frames: Arc<Vec<Vec<u8>>> = Arc::new(
        (0..60_000u32)
            .map(|i| {
                let mut c = rlm_core::testkit::TcpConv::new(
                    &format!("10.5.{}.{}:{}", 100 + i / 250 % 100, 1 + i % 250, 1024 + i),
                    &format!("{FARM_ADDR}:80"),
                );
                let mut f = c.client_data(b"GET / HTTP/1.1\r\nHost: shop\r\n\r\n");
                f[0..6].copy_from_slice(&farm_mac);
                f[6..12].copy_from_slice(&cli_mac);
                f
            })
            .collect(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    // Two senders, as fast as they go.
    let flood: Vec<_> = (0..2)
        .map(|_| {
            let (ns, iface, frames, flooding) = (info.namespaces.clients.clone(), info.clients.interface.clone(), frames.clone(), stop.clone());
            std::thread::spawn(move || {
                let out = RawSender::new(&ns, &iface).unwrap();
                let mut sent = 0u64;
                let until = Instant::now() + Duration::from_secs(30);
                'out: loop {
                    for f in frames.iter() {
                        if sent.is_multiple_of(1024) && (flooding.load(Ordering::Relaxed) || Instant::now() > until) {
                            break 'out;
                        }
                        sent += u64::from(out.send(f));
                    }
                }
                sent
            })
        })
        .collect();
    let status =
        |what: &str| -> serde_json::Value { serde_json::from_str(&rlm.get("/status").unwrap_or_else(|e| panic!("/status {what}: {e}"))).unwrap() };
    let lost = |v: &serde_json::Value| v["fastpath"]["ring_full"].as_u64().unwrap_or(0);
    // The regime: the ring overflows (the engine is behind), within 10 s of the flood's start.
    let t = Instant::now();
    let before = loop {
        std::thread::sleep(Duration::from_millis(500));
        let v = status("under the flood");
        if lost(&v) > 0 || t.elapsed() > Duration::from_secs(10) {
            break v;
        }
    };
    assert!(lost(&before) > 0, "the flood filled the ring within 10 s: {}", before["fastpath"]);
    // A page whose SYNs each wait for rlm's verdict, under the flood.
    let t = Instant::now();
    fetch_from_clients(&info, vec![src]).pop().unwrap().expect("a page under the flood");
    let page_s = t.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_secs(2));
    let after = status("later under the flood");
    let timed = |v: &serde_json::Value| v["engine_call_us"]["timed"].as_u64().unwrap_or(0);
    println!(
        "page {page_s:.2} s; status uptime {} -> {} s, engine calls timed {} -> {}, ring full {} -> {}; calls {}",
        before["uptime_s"],
        after["uptime_s"],
        timed(&before),
        timed(&after),
        lost(&before),
        lost(&after),
        after["engine_call_us"]
    );
    assert!(page_s < 5.0, "the page took {page_s:.2} s");
    assert!(after["uptime_s"].as_u64() > before["uptime_s"].as_u64(), "the status was refreshed");
    assert!(timed(&after) > timed(&before), "the engine went on");
    // SIGTERM under the flood.
    let out = rlm.stop().expect("stop");
    stop.store(true, Ordering::Relaxed);
    let sent: u64 = flood.into_iter().map(|t| t.join().unwrap()).sum();
    // When rlm's loop took the signal: its log line's time of day against the kill's.
    let log = std::fs::read_to_string(&out.log).unwrap_or_default();
    let taken = log.lines().find(|l| l.contains("SIGTERM: stopping")).and_then(time_of_day);
    let sent_at = out.term_unix_s.map(|t| t % 86_400.0);
    let took = taken.zip(sent_at).map(|(a, b)| a - b);
    println!("flood: {sent} frames; SIGTERM taken after {took:?} s, exit {:?} after {:?} s", out.exit_code, out.exit_s);
    assert!(took.is_some_and(|s| s < 0.5), "the loop took SIGTERM after {took:?} s");
    assert_eq!(out.exit_code, Some(0), "rlm exits 0 on SIGTERM under the flood; log {}", out.log.display());
    // Then it closes every connection (60,000 made-up ones, in a debug build) and removes its
    // rules.
    assert!(out.exit_s.is_some_and(|s| s < 8.0), "SIGTERM to exit: {:?} s", out.exit_s);
    assert!(out.rules_left.is_empty(), "{:?}", out.rules_left);
}

/// The time of day (UTC seconds since midnight) of a log line that starts with an RFC 3339
/// time (`2026-11-26T08:20:20.472796Z`, after any colour codes).
fn time_of_day(line: &str) -> Option<f64> {
    let t = line.split('T').nth(1)?;
    let mut p = t.trim_end_matches(|c: char| !c.is_ascii_digit()).split(':');
    let (h, m) = (p.next()?.parse::<f64>().ok()?, p.next()?.parse::<f64>().ok()?);
    let s: f64 = p.next()?.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect::<String>().parse().ok()?;
    Some(h * 3600.0 + m * 60.0 + s)
}

/// A SYN flood from 20,000 spoofed sources (inside the lab) while `FAST SYN + SYN/ACK` holds for
/// every client: none of them completes a handshake, so none earns its class a budget, and rlm
/// sends at most the class's burst (here 200) in all: no amplification. Its memory stays
/// bounded, and a real client still gets its pages. It runs alone, after the others: a test
/// beside it lost its SYNs at the server (ABORT IDLE's, twice in three clean runs: they reached
/// the server's interface and got neither SYN/ACK nor RST; most likely the flood's 20,000 frames
/// overflowed the per-CPU backlog every namespace's packets share, not verified).
#[test]
#[ignore = "floods the machine with 20,000 SYNs: make test runs it alone, after the others (cargo test -- --ignored)"]
fn a_spoofed_syn_flood_gets_no_amplification_from_rlm() {
    let (_plan, _guard, info, _accepted) = lab_counting("s", 1);
    let dir = std::env::temp_dir().join(format!("rlm-flood-{}", std::process::id()));
    let rules = format!("{CLASSES}IF IP.SRC == *.*.*.* THEN\n  FAST SYN + SYN/ACK GAP 100ms\n");
    let arm = RlmArm { rules, extra_args: vec!["--inject-burst".into(), "200".into()], ..RlmArm::default() };
    let rlm = Inline::start(&info.namespaces.appliance, &arm, &dir, Duration::from_secs(10)).expect("rlm run starts");
    let src = info.clients.high[0].clone();
    fetch_from_clients(&info, vec![src.clone()]).pop().unwrap().expect("a first page");
    let rss_before = rss_kib(rlm.pid);
    let (farm_mac, cli_mac) = (mac_of(&info.namespaces.servers, "srv0"), mac_of(&info.namespaces.clients, &info.clients.interface));
    let (ns, iface) = (info.namespaces.clients.clone(), info.clients.interface.clone());
    const FLOOD: u32 = 20_000;
    let flood = std::thread::spawn(move || {
        let out = RawSender::new(&ns, &iface).unwrap();
        for i in 0..FLOOD {
            let c = rlm_core::testkit::TcpConv::new(
                &format!("10.5.{}.{}:{}", 100 + i / 250 % 100, 1 + i % 250, 1024 + i % 60_000),
                &format!("{FARM_ADDR}:80"),
            );
            let mut f = c.syn();
            f[0..6].copy_from_slice(&farm_mac);
            f[6..12].copy_from_slice(&cli_mac);
            assert!(out.send(&f), "a spoofed SYN sent");
            // At most 5,000 SYNs/s: rlm's queue takes about 6,000 new connections/s on this
            // machine, and what overflows it passes fail-open, unseen by rlm.
            if i % 10 == 0 {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    });
    flood.join().unwrap();
    // Meanwhile and after, a real client gets its page.
    fetch_from_clients(&info, vec![src]).pop().unwrap().expect("a page after the flood");
    std::thread::sleep(Duration::from_secs(3));
    let rss_after = rss_kib(rlm.pid);
    let out = rlm.stop().expect("stop");
    let status: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.status.as_ref().expect("status")).unwrap()).unwrap();
    let st = &status["stats"];
    let n = |k: &str| st[k].as_u64().unwrap_or(0);
    let injected = n("fast_syns_sent") + n("fast_synacks_sent");
    println!(
        "flood of {FLOOD}: rlm injected {injected}, denied {}, rss {rss_before} -> {rss_after} KiB; tables {}",
        n("inject_denied"),
        status["tables"]
    );
    // The regime: most of the flood reached rlm (on a busy machine some of it overflows the
    // queue and passes fail-open, which is not what this test judges).
    assert!(n("connections") >= u64::from(FLOOD) / 2, "rlm saw the flood: {st}");
    // The burst, plus what the two real handshakes earned (10 each).
    assert!(injected <= 200 + 2 * 10, "{injected} frames injected for {FLOOD} spoofed SYNs");
    assert!(injected >= 100, "the burst was spent on the flood ({injected}): the budget, not a lack of SYNs, stopped it");
    assert!(n("inject_denied") > 0);
    assert_eq!(status["injector"]["sent"].as_u64(), Some(injected));
    assert!(rss_after < rss_before + 64 * 1024, "rlm's memory grew from {rss_before} to {rss_after} KiB");
    let _ = std::fs::remove_dir_all(&dir);
}

/// REMOVE EMBEDS inline: a container of several segments comes to the client with the chosen
/// image references blanked (each whole, or kept whole where a segment boundary cut it after its
/// attribute began), nothing else changed, and every packet's checksum good by tshark's reckoning.
#[test]
fn remove_embeds_blanks_references_in_the_container_and_keeps_checksums_good() {
    let imgs: String = (1..=40).map(|i| format!("<p>item {i} of the catalogue</p><img src=\"/img/item-{i:03}.gif\" alt=\"item {i}\">\n")).collect();
    let page = format!("<html><body>\n{imgs}</body></html>\n");
    let response = format!("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}", page.len());
    let body = response.clone().into_bytes();
    let (_plan, _guard, info, _) = lab_serving("a", 1, Some(Arc::new(move |_: &str| body.clone())));
    let dir = std::env::temp_dir().join(format!("rlm-adapt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let arm = RlmArm { rules: format!("{CLASSES}IF IP.SRC == *.*.*.* THEN REMOVE EMBEDS AFTER 1\n"), ..RlmArm::default() };
    let rlm = Inline::start(&info.namespaces.appliance, &arm, &dir, Duration::from_secs(10)).expect("rlm run starts");
    // The endpoints compute their checksums themselves, so that tshark can judge every packet.
    in_ns(&info.namespaces.servers, &["ethtool", "-K", "srv0", "tx", "off"]);
    in_ns(&info.namespaces.clients, &["ethtool", "-K", &info.clients.interface, "tx", "off"]);
    let cli_cap = Capture::start(&info.namespaces.clients, &info.clients.interface, dir.join("client.pcap"));
    let (ns, src) = (info.namespaces.clients.clone(), info.clients.high[0].clone());
    let got: Vec<u8> = std::thread::spawn(move || {
        netns::enter(&ns).unwrap();
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        s.bind(&format!("{src}:0").parse::<SocketAddr>().unwrap().into()).unwrap();
        s.connect_timeout(&format!("{FARM_ADDR}:80").parse::<SocketAddr>().unwrap().into(), Duration::from_secs(3)).unwrap();
        let mut s: TcpStream = s.into();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: farm\r\n\r\n").unwrap();
        let mut body = Vec::new();
        s.read_to_end(&mut body).unwrap();
        body
    })
    .join()
    .unwrap();
    let rows = cli_cap.finish();
    let out = rlm.stop().expect("stop");
    let status: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.status.as_ref().expect("status")).unwrap()).unwrap();
    println!("rlm stats {}", status["stats"]);
    let got = String::from_utf8(got).expect("text");
    assert_eq!(got.len(), response.len(), "the same length");
    // Every tag is the original or the original with its src blanked; the first is kept.
    let (mut blanked, mut kept) = (0, 0);
    for (i, (a, b)) in response.split('<').zip(got.split('<')).enumerate() {
        if a == b {
            kept += a.starts_with("img ") as usize;
            continue;
        }
        let src = &a[a.find("src=").expect("only img tags change")..a.find(" alt").unwrap()];
        assert_eq!(b, a.replacen(src, &" ".repeat(src.len()), 1), "tag {i}");
        assert!(!a.contains("item-001"), "the first image is kept");
        blanked += 1;
    }
    println!("{blanked} references blanked, {kept} kept");
    let removed = status["stats"]["embeds_removed"].as_u64().unwrap();
    assert_eq!(blanked as u64, removed);
    assert!(removed >= 30, "most of the 39 go: {removed}");
    assert_eq!(removed + status["stats"]["embeds_kept_split"].as_u64().unwrap(), 39);
    assert!(!rows.is_empty());
    let bad: Vec<_> = rows.iter().filter(|r| !(r.4 && r.5)).collect();
    assert!(bad.is_empty(), "packets with bad checksums at the client: {bad:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A 1×1 GIF.
const GIF: &[u8] =
    b"GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\xff\xff\xff!\xf9\x04\x01\x00\x00\x00\x00,\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;";

/// Headless Chromium in namespace `ns`, a fresh profile at `profile`, loading the farm's page
/// and printing its DOM; `clock` says when it stops (a virtual time budget, or a real timeout).
fn chromium_dump_dom(ns: &str, profile: &std::path::Path, clock: &str) -> std::process::Output {
    chromium_dump(ns, profile, clock, &[], &format!("http://{FARM_ADDR}/"))
}

/// Headless Chromium in namespace `ns` loads `url` with `extra` flags and dumps its DOM.
fn chromium_dump(ns: &str, profile: &std::path::Path, clock: &str, extra: &[&str], url: &str) -> std::process::Output {
    std::process::Command::new("ip")
        .args(["netns", "exec", ns, "chromium", "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run"])
        .args(["--disable-background-networking", "--disable-component-update", clock, "--dump-dom"])
        .args(extra)
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(url)
        .output()
        .expect("chromium runs")
}

/// [`serve`] over TLS on port 443 (rustls, HTTP/1.1 by ALPN: the responder's answers are
/// HTTP/1.1's), with `config`: each answer followed by the server's close_notify.
fn serve_tls(srv_ns: &str, respond: Responder, config: Arc<rustls::ServerConfig>) {
    listen(srv_ns, 443, move |s| {
        let Ok(conn) = rustls::ServerConnection::new(config.clone()) else { return };
        let mut s = rustls::StreamOwned::new(conn, s);
        answer(&mut s, &respond);
        s.conn.send_close_notify();
        let _ = s.flush();
    });
}

/// [`serve_tls`] over HTTP/2 (hyper, ALPN h2): every request on the connection answered by
/// `respond`, whose HTTP/1.1 answer's status, Content-Type and body make the HTTP/2 response.
fn serve_h2(srv_ns: &str, respond: Responder, config: Arc<rustls::ServerConfig>) {
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    listen(srv_ns, 443, move |s| {
        let (acceptor, respond) = (acceptor.clone(), respond.clone());
        let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
        rt.block_on(async move {
            let Ok(s) = s.set_nonblocking(true).and_then(|()| tokio::net::TcpStream::from_std(s)) else { return };
            let Ok(tls) = acceptor.accept(s).await else { return };
            let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let raw = respond(req.uri().path());
                async move { Ok::<_, std::convert::Infallible>(h2_response(&raw)) }
            });
            let _ = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                .await;
        });
    });
}

/// A [`Responder`]'s HTTP/1.1 answer as an HTTP/2 response: its status, Content-Type and body.
fn h2_response(raw: &[u8]) -> hyper::Response<http_body_util::Full<bytes::Bytes>> {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").map_or(raw.len(), |i| i + 4);
    let head = String::from_utf8_lossy(&raw[..split]);
    let status: u16 = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(500);
    let mut r = hyper::Response::builder().status(status);
    if let Some(ctype) = head.lines().find_map(|l| l.strip_prefix("Content-Type: ")) {
        r = r.header("content-type", ctype.trim());
    }
    r.body(http_body_util::Full::new(bytes::Bytes::copy_from_slice(&raw[split..]))).expect("a response")
}

/// A real browser through the appliance: headless Chromium loads a page whose image references
/// rlm blanks (`REMOVE EMBEDS AT 2`, then `AFTER 3`), renders it whole (every `<img>` element
/// still there) and asks the farm for exactly the images left; then a page whose image requests
/// past the fifth rlm rewrites to their small variants (`REWRITE EMBEDS AFTER 5`), and the farm
/// is asked for those variants.
#[test]
fn chromium_loads_pages_with_references_removed_or_rewritten_and_fetches_exactly_what_is_left() {
    if std::process::Command::new("chromium").arg("--version").output().is_err() {
        panic!("chromium is missing (make deps installs it)");
    }
    let imgs: String = (1..=8).map(|i| format!("<p>row {i}</p><img src=\"/img/{i}.gif\" alt=\"image {i}\" width=\"10\" height=\"10\">\n")).collect();
    let page = format!("<!DOCTYPE html>\n<html><head><title>t</title></head><body>\n{imgs}</body></html>\n");
    let log: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let seen = log.clone();
    let respond: Responder = Arc::new(move |target: &str| {
        seen.lock().unwrap().push(target.to_string());
        let (ctype, body) = match target {
            "/" => ("text/html", page.clone().into_bytes()),
            t if t.starts_with("/img/") || t.starts_with("/ims/") => ("image/gif", GIF.to_vec()),
            _ => return b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec(),
        };
        let mut r = format!("HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len()).into_bytes();
        r.extend(body);
        r
    });
    let (_plan, _guard, info, _) = lab_serving("c", 1, Some(respond));
    let dir = std::env::temp_dir().join(format!("rlm-chromium-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let img = |dir: &str, i: &[u32]| -> Vec<String> { i.iter().map(|i| format!("/{dir}/{i}.gif")).collect() };
    let cases = [
        ("REMOVE EMBEDS AT 2", img("img", &[1, 3, 4, 5, 6, 7, 8]), "embeds_removed", 1),
        ("REMOVE EMBEDS AFTER 3", img("img", &[1, 2, 3]), "embeds_removed", 5),
        // The lab's mapping (written beside the rules): /img/* to /ims/*, in place.
        ("REWRITE EMBEDS AFTER 5 USING \"ims.map\"", [img("img", &[1, 2, 3, 4, 5]), img("ims", &[6, 7, 8])].concat(), "embeds_rewritten", 3),
    ];
    for (rule, want, stat, count) in cases {
        let arm = RlmArm { rules: format!("{CLASSES}IF IP.SRC == *.*.*.* THEN {rule}\n"), ..RlmArm::default() };
        let rlm = Inline::start(&info.namespaces.appliance, &arm, &dir, Duration::from_secs(10)).expect("rlm run starts");
        log.lock().unwrap().clear();
        let profile = dir.join("profile");
        let out = chromium_dump_dom(&info.namespaces.clients, &profile, "--virtual-time-budget=8000");
        let out_rlm = rlm.stop().expect("stop");
        let dom = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{rule}: chromium failed: {}", String::from_utf8_lossy(&out.stderr));
        assert!(dom.trim_end().ends_with("</html>"), "{rule}: {dom}");
        assert_eq!(dom.matches("<img").count(), 8, "{rule}: every element rendered: {dom}");
        let mut got: Vec<String> = log.lock().unwrap().iter().filter(|t| *t != "/" && *t != "/favicon.ico").cloned().collect();
        got.sort();
        let mut want = want;
        want.sort();
        assert_eq!(got, want, "{rule}: the farm served exactly the images left, or their variants");
        let status: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out_rlm.status.as_ref().expect("status")).unwrap()).unwrap();
        assert_eq!(status["stats"][stat].as_u64(), Some(count), "{rule}: {}", status["stats"]);
        // rlm's live pageview of the page says what it did to it.
        let records = out_rlm.records.as_ref().expect("rlm's records");
        let pages: Vec<serde_json::Value> = json_lines(&records.pageviews).into_iter().filter(|p| p["container"] == "/").collect();
        let acted = if stat == "embeds_removed" { "embeds_blanked" } else { "embeds_rewritten" };
        assert_eq!(pages.len(), 1, "{rule}: one live pageview of the page: {pages:?}");
        assert_eq!(pages[0]["actions"][acted].as_u64(), Some(count), "{rule}: {}", pages[0]);
        std::fs::remove_dir_all(&profile).ok();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Chromium, cold, over an 80 ms WAN and a 10 Mbit/s link toward it, loads a page of eight
/// 20-40 KB images through `rlm run`; the page writes its own Navigation and Resource Timing
/// into the DOM at `load`. Each load's time by the browser's clock (its first connect to the
/// last byte of the last object) is matched by one of rlm's live pageview records within
/// max(5%, 30 ms). Chromium sometimes opens the page's first connection before its navigation
/// begins (a preconnect) and reports `connectStart` when the navigation takes over the connect
/// under way, so that its connect lasts less than the handshake did on the wire. When rlm's
/// connect (its SYN to ACK on the connection) is longer than the browser's (connectStart to
/// connectEnd) by more than the tolerance, that much of the connect went by before the
/// navigation and is taken off rlm's time before the comparison (46 ms in the two loads of
/// five runs that failed without it; 2 to 20 ms otherwise, not taken off).
#[test]
fn chromium_load_times_match_rlms_live_pageviews() {
    chromium_load_times(Scheme::Http)
}

/// The same over HTTPS (issue 25): the page and its images over TLS 1.3 (rustls, HTTP/1.1, a
/// new connection for each, as the responder closes them), rlm inline without keys, its
/// pageviews made from the encrypted records by time alone, each load matched within
/// max(5%, 30 ms) of Chromium's own.
#[test]
fn chromium_https_load_times_match_rlms_live_pageviews() {
    chromium_load_times(Scheme::Https { h2: false })
}

/// The same over HTTP/2 (ALPN h2, hyper): the page and its images multiplexed on one
/// connection, which Chromium keeps open until it exits; rlm's pageview ends at the last
/// response record before the client's quiet, whatever control frames follow.
#[test]
fn chromium_https_h2_load_times_match_rlms_live_pageviews() {
    chromium_load_times(Scheme::Https { h2: true })
}

/// How [`chromium_load_times`]'s pages are served.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Scheme {
    Http,
    Https { h2: bool },
}

/// The load-time tests one at a time: two Chromiums loading at once on this two-core machine
/// put their own CPU wait into the times they compare (the HTTP one failed once beside the
/// HTTPS one).
static CHROMIUM_TIMING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Chromium's loads against rlm's live pageviews, over `scheme`.
fn chromium_load_times(scheme: Scheme) {
    let https = scheme != Scheme::Http;
    let _alone = CHROMIUM_TIMING.lock().unwrap_or_else(|e| e.into_inner());
    if std::process::Command::new("chromium").arg("--version").output().is_err() {
        panic!("chromium is missing (make deps installs it)");
    }
    const LOADS: usize = 6;
    // The page names no icon (`data:,`): Chromium asks for /favicon.ico after the load
    // otherwise, a request its Resource Timing leaves out and rlm, rightly, does not (over
    // HTTP/2 it came on the page's connection 40 ms after the last image and made rlm's page
    // 100 ms longer than Chromium's).
    let imgs: String = (1..=8).map(|i| format!("<img src=\"/img/{i}.gif\" width=\"10\" height=\"10\">\n")).collect();
    let page = format!(
        "<!DOCTYPE html>\n<html><head><title>t</title><link rel=\"icon\" href=\"data:,\"></head><body>\n{imgs}<pre id=\"timing\"></pre>\n<script>\n\
         addEventListener('load', () => {{\n\
           const n = performance.getEntriesByType('navigation')[0];\n\
           const ends = performance.getEntriesByType('resource').map(r => r.responseEnd);\n\
           document.getElementById('timing').textContent = JSON.stringify({{origin: performance.timeOrigin,\n\
             connect: n.connectStart, connect_end: n.connectEnd, nav_end: n.responseEnd, ends: ends}});\n\
         }});\n</script></body></html>\n"
    );
    let respond: Responder = Arc::new(move |target: &str| {
        let (ctype, body) = match target {
            "/" => ("text/html", page.clone().into_bytes()),
            t if t.starts_with("/img/") => {
                // A GIF with padding after its trailer, 20 to 40 KB by image.
                let n: usize = t[5..].trim_end_matches(".gif").parse().unwrap_or(1);
                let mut b = GIF.to_vec();
                b.resize(20_000 + n * 2_500, 0);
                ("image/gif", b)
            }
            _ => return b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec(),
        };
        let mut r = format!("HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len()).into_bytes();
        r.extend(body);
        r
    });
    let tag = match scheme {
        Scheme::Http => "t",
        Scheme::Https { h2: false } => "h",
        Scheme::Https { h2: true } => "j",
    };
    let (plan, _guard, info, _) = lab_serving(tag, 1, (!https).then(|| respond.clone()));
    let dir = std::env::temp_dir().join(format!("rlm-chromium-live-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let site = "shop.example";
    if https {
        let certs = sim_clients::tls::make_certs(&dir.join("tls"), &[site]).expect("the lab's certificates");
        let mut config = (*sim_clients::tls::server_config(&certs.cert, &certs.key).expect("a TLS configuration")).clone();
        if scheme == (Scheme::Https { h2: true }) {
            config.alpn_protocols = vec![b"h2".to_vec()];
            serve_h2(&info.namespaces.servers, respond, Arc::new(config));
        } else {
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            serve_tls(&info.namespaces.servers, respond, Arc::new(config));
        }
    }
    let _wan =
        testbed::wan::WanHop::start(&plan, vec!["10.4.0.0/16=80ms".parse().unwrap(), "10.5.0.0/16=80ms".parse().unwrap()], 7).expect("the WAN hop");
    plan.shape_link(10_000_000, 1000).expect("a 10 Mbit/s link toward the clients");
    let extra_args = if https { vec!["--server-ports".to_string(), "443".to_string()] } else { Vec::new() };
    let rlm =
        Inline::start(&info.namespaces.appliance, &RlmArm { rules: CLASSES.into(), extra_args, ..RlmArm::default() }, &dir, Duration::from_secs(10))
            .expect("rlm run starts");
    let resolve = format!("--host-resolver-rules=MAP {site} {FARM_ADDR}");
    let (flags, url): (Vec<&str>, String) = if https {
        (vec![resolve.as_str(), "--ignore-certificate-errors"], format!("https://{site}/"))
    } else {
        (Vec::new(), format!("http://{FARM_ADDR}/"))
    };
    // Each load: (start, load time) in Unix seconds by the browser's clock.
    let mut loads = Vec::new();
    for i in 0..LOADS {
        let profile = dir.join(format!("profile-{i}"));
        // Real time (no virtual time budget), so that the page's timing is the network's.
        let mut out = chromium_dump(&info.namespaces.clients, &profile, "--timeout=15000", &flags, &url);
        // Headless Chromium now and then exits at once, successfully, with nothing on its
        // standard output (about one run of six here, with the two HTTPS tests side by side):
        // no load happened, so it is tried again (twice at most), as a person would reload.
        for _ in 0..2 {
            if !(out.status.success() && out.stdout.is_empty()) {
                break;
            }
            eprintln!("chromium printed nothing (load {i}), again; its stderr: {}", String::from_utf8_lossy(&out.stderr));
            std::fs::remove_dir_all(&profile).ok();
            out = chromium_dump(&info.namespaces.clients, &profile, "--timeout=15000", &flags, &url);
        }
        let dom = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "chromium failed: {}", String::from_utf8_lossy(&out.stderr));
        let json = dom.split("<pre id=\"timing\">").nth(1).and_then(|r| r.split("</pre>").next()).unwrap_or("");
        let t: serde_json::Value =
            serde_json::from_str(&json.replace("&quot;", "\"")).unwrap_or_else(|e| panic!("no timing in the page ({e}): {dom}"));
        let ms = |v: &serde_json::Value| v.as_f64().expect("a time");
        let ends: Vec<f64> = t["ends"].as_array().expect("resource ends").iter().map(ms).collect();
        assert_eq!(ends.len(), 8, "every image loaded: {t}");
        let last = ends.iter().copied().fold(ms(&t["nav_end"]), f64::max);
        let start = (ms(&t["origin"]) + ms(&t["connect"])) / 1e3;
        loads.push((start, (last - ms(&t["connect"])) / 1e3, (ms(&t["connect_end"]) - ms(&t["connect"])) / 1e3));
        std::fs::remove_dir_all(&profile).ok();
        if https {
            // A person reads the page before the next: over HTTPS rlm tells pages apart by the
            // client's quiet (`encrypted_gap`, 1 s), and Chromium's next start comes 0.7 s after
            // the last load ended (one pageview of all six without this pause).
            std::thread::sleep(Duration::from_millis(2_000));
        }
    }
    // The last pageview ends past its quiet period (or at rlm's stop).
    std::thread::sleep(Duration::from_secs(5));
    let out = rlm.stop().expect("stop");
    let records = out.records.expect("rlm's records");
    // Over HTTPS rlm knows no container: its pageviews are all the pages.
    let live: Vec<serde_json::Value> =
        json_lines(&records.pageviews).into_iter().filter(|p| if https { p["tls"] == true } else { p["container"] == "/" }).collect();
    println!("browser loads (start, s): {loads:?}");
    println!("rlm's live pageviews (start, rt_s): {:?}", live.iter().map(|p| (p["start_ts"].clone(), p["rt_s"].clone())).collect::<Vec<_>>());
    assert!(loads.iter().all(|l| l.1 > 0.4), "the WAN and the link are in the path: {loads:?}");
    let mut used = vec![false; live.len()];
    for (start, rt, browser_connect) in &loads {
        let best =
            live.iter().enumerate().filter(|(i, p)| !used[*i] && (p["start_ts"].as_f64().unwrap_or(0.0) - start).abs() < 2.0).min_by(|a, b| {
                let d = |p: &serde_json::Value| (p["start_ts"].as_f64().unwrap_or(0.0) - start).abs();
                d(a.1).total_cmp(&d(b.1))
            });
        let Some((i, p)) = best else { panic!("no live pageview for the load at {start} ({rt} s)") };
        used[i] = true;
        // rlm's connect on the page's connection: its SYN to its ACK, on the client's clock.
        let event =
            |kind: &str| p["events"].as_array().into_iter().flatten().find(|e| e["kind"] == kind && e["conn"] == 0).and_then(|e| e["t_s"].as_f64());
        let rlm_connect = event("ack").zip(event("syn")).map_or(0.0, |(a, s)| a - s);
        let tolerance = (0.05 * rt).max(0.030);
        let raw_rt = p["rt_s"].as_f64().expect("rt_s");
        // Only when rlm's time is the longer by more than the tolerance: Chromium also reports a
        // connect of 0 on a page whose load time counts the connect (rlm +1.1% on one load,
        // -7.1% with its connect taken off, in a clean-clone run).
        let early = Some(rlm_connect - browser_connect).filter(|d| *d > tolerance && raw_rt - rt > tolerance).unwrap_or(0.0);
        let live_rt = raw_rt - early;
        println!(
            "load at {start:.3}: browser {rt:.3} s, rlm {live_rt:.3} s ({:+.1}%; connect: rlm {rlm_connect:.3} s, browser {browser_connect:.3} s)",
            (live_rt - rt) / rt * 100.0
        );
        assert!((live_rt - rt).abs() <= tolerance, "browser {rt:.3} s, rlm {live_rt:.3} s: more than {tolerance:.3} s apart");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// tshark's reading of a capture: the frames `filter` (a display filter) selects, one line each
/// (source address, flags, length).
fn tshark_select(file: &std::path::Path, filter: &str) -> Vec<String> {
    let out = std::process::Command::new("tshark")
        .args(["-n", "-r"])
        .arg(file)
        .args(["-Y", filter, "-T", "fields", "-e", "ip.src", "-e", "tcp.flags.str", "-e", "tcp.len"])
        .output()
        .expect("tshark (make deps installs it)");
    assert!(out.status.success(), "tshark: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect()
}

/// What tshark's analysis calls a TCP error at an end: a reset, a retransmission, a segment lost
/// or out of order.
const TCP_ERRORS: &str = "tcp.flags.reset == 1 || tcp.analysis.retransmission || tcp.analysis.fast_retransmission || \
                          tcp.analysis.lost_segment || tcp.analysis.ack_lost_segment || tcp.analysis.out_of_order";

/// REJECT inline (issue 26): requests to /busy get rlm's 503 (Retry-After, Connection: close)
/// and never reach the farm. curl reads it whole; headless Chromium shows the 503 page, and a
/// page whose script fetches a /busy resource and then another gets 503 then 200 in the same
/// browser. At the client no TCP error: no RST, no retransmission, no segment lost or out of
/// order (tshark's analysis); at the server the only RSTs are rlm's, one per rejected request,
/// and none from the server. The status shows the SLA controller of the rule file.
#[test]
fn reject_answers_curl_and_chromium_and_neither_side_sees_a_tcp_error() {
    if std::process::Command::new("chromium").arg("--version").output().is_err() {
        panic!("chromium is missing (make deps installs it)");
    }
    let page = "<!DOCTYPE html><html><body><p id=\"r\">pending</p><script>(async () => { \
        const a = await fetch('/busy/api', {cache: 'no-store'}); \
        const b = await fetch('/ok.txt', {cache: 'no-store'}); \
        document.getElementById('r').textContent = 'statuses ' + a.status + ' ' + b.status + ' ' + (await b.text()).trim(); \
        })();</script></body></html>\n";
    let log: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let seen = log.clone();
    let respond: Responder = Arc::new(move |target: &str| {
        seen.lock().unwrap().push(target.to_string());
        let (ctype, body) = match target {
            "/" => ("text/html", page.to_string()),
            "/ok.txt" => ("text/plain", "fine\n".to_string()),
            _ => ("text/html", "<html><body>served by the farm</body></html>\n".to_string()),
        };
        format!("HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).into_bytes()
    });
    let (_plan, _guard, info, _) = lab_serving("j", 1, Some(respond));
    let dir = std::env::temp_dir().join(format!("rlm-reject-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // With an SLA target too: its controller (which sheds nothing here) is in the status.
    let arm = RlmArm {
        rules: format!("{CLASSES}SLA HIGH RT.P95 < 5s\nSHED LOW\nIF URL == \"/busy*\" THEN REJECT 503 RETRY-AFTER 5s\n"),
        ..RlmArm::default()
    };
    let rlm = Inline::start(&info.namespaces.appliance, &arm, &dir, Duration::from_secs(10)).expect("rlm run starts");
    let cli_cap = Capture::start(&info.namespaces.clients, &info.clients.interface, dir.join("client.pcap"));
    let srv_cap = Capture::start(&info.namespaces.servers, "srv0", dir.join("server.pcap"));

    // curl: the whole answer, and curl content with it.
    let src = info.clients.high[0].clone();
    let curl = std::process::Command::new("ip")
        .args(["netns", "exec", &info.namespaces.clients, "curl", "-sS", "-i", "--max-time", "5", "--interface", &src])
        .arg(format!("http://{FARM_ADDR}/busy/cart?id=1"))
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&curl.stdout).to_string();
    assert!(curl.status.success(), "curl failed: {} {text}", String::from_utf8_lossy(&curl.stderr));
    assert!(text.starts_with("HTTP/1.1 503 Service Unavailable\r\n"), "{text}");
    assert!(text.contains("Retry-After: 5\r\n") && text.contains("Connection: close\r\n") && text.contains("please try again"), "{text}");

    // Chromium: the 503 page shown; then, in the page's script, a rejected fetch and one served.
    let profile = dir.join("profile");
    let out = chromium_dump(&info.namespaces.clients, &profile, "--virtual-time-budget=5000", &[], &format!("http://{FARM_ADDR}/busy/page"));
    let dom = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(dom.contains("<h1>503 Service Unavailable</h1>"), "Chromium shows the 503 page: {dom} {}", String::from_utf8_lossy(&out.stderr));
    let out = chromium_dump_dom(&info.namespaces.clients, &profile, "--virtual-time-budget=8000");
    let dom = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(dom.contains("statuses 503 200 fine"), "the rejected fetch, then the next served: {dom}");

    let client_pcap = cli_cap.stop();
    let server_pcap = srv_cap.stop();
    let out = rlm.stop().expect("stop");
    let status: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.status.as_ref().expect("status")).unwrap()).unwrap();
    println!("rlm stats {}", status["stats"]);
    let ctl = &status["controller"];
    assert_eq!(
        (&ctl["targets"][0]["class"], &ctl["targets"][0]["limit_s"], &ctl["shed"][0]["class"]),
        (&"HIGH".into(), &5.0.into(), &"LOW".into()),
        "{ctl}"
    );
    assert_eq!(ctl["shed"][0]["admitted_syn_per_s"], serde_json::Value::Null, "LOW is not limited: {ctl}");
    let rejected = status["stats"]["requests_rejected"].as_u64().unwrap();
    assert_eq!(rejected, 3, "curl's, Chromium's navigation and its fetch");
    let served = log.lock().unwrap().clone();
    assert!(served.iter().all(|t| !t.starts_with("/busy")), "no /busy request reached the farm: {served:?}");
    assert!(served.iter().any(|t| t == "/ok.txt"), "{served:?}");

    let at_client = tshark_select(&client_pcap, TCP_ERRORS);
    assert!(at_client.is_empty(), "TCP errors at the client: {at_client:?}");
    let answers = tshark_select(&client_pcap, "http.response.code == 503");
    assert_eq!(answers.len() as u64, rejected, "{answers:?}");
    let resets = tshark_select(&server_pcap, "tcp.flags.reset == 1");
    assert_eq!(resets.len() as u64, rejected, "one RST per rejected request: {resets:?}");
    assert!(resets.iter().all(|r| !r.starts_with(FARM_ADDR)), "none from the server: {resets:?}");
    // The requests came through NFQUEUE (REJECT needs it, held SYNs or not): each timed by the
    // kernel's receive stamp, not when rlm read it.
    let metrics = testbed::inline::prom::parse(&std::fs::read_to_string(out.metrics.as_ref().expect("metrics")).unwrap());
    let value = |name: &str| metrics.iter().filter(|m| m.name == name).map(|m| m.value).sum::<f64>();
    let (stamped, unstamped) = (value("rlm_queue_wait_seconds_count"), value("rlm_queue_unstamped_total"));
    assert!(stamped >= 3.0 && unstamped == 0.0, "queued packets: {stamped} with the kernel's stamp, {unstamped} without");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A keep-alive request on `s` (its `Cookie`, if any): the answer's status line and body, read
/// by its Content-Length.
fn keepalive_get(s: &mut TcpStream, target: &str, cookie: Option<&str>) -> std::io::Result<(String, String)> {
    let cookie = cookie.map(|c| format!("Cookie: {c}\r\n")).unwrap_or_default();
    s.write_all(format!("GET {target} HTTP/1.1\r\nHost: farm\r\n{cookie}\r\n").as_bytes())?;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..end]).to_string();
            let len: usize =
                head.lines().find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap_or(0))).unwrap_or(0);
            if got.len() >= end + 4 + len {
                let body = String::from_utf8_lossy(&got[end + 4..end + 4 + len]).to_string();
                return Ok((head.lines().next().unwrap_or("").to_string(), body));
            }
        }
        match s.read(&mut buf)? {
            0 => return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "closed before the answer")),
            n => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// ABORT IDLE inline (issue 26, 003 Paper C): a keep-alive server (a thread per connection
/// answering every request until the client closes) behind `rlm run` with `IF NOT
/// COOKIE.cart EXISTS THEN ABORT IDLE AFTER 1s`. A cartless client's idle connection is closed
/// by a FIN about a second after its answer (its next request goes on a new connection and is
/// served); a cart client's connection stays and serves its next request. Headless Chromium
/// loads a page with two images and one that takes 3 s (the connections that brought the
/// others idle meanwhile, and closed), then its script's fetch is served. At the client no TCP error (no RST, retransmission, lost or
/// out-of-order segment); at the server the only RSTs are rlm's, one per abort, and the server
/// saw its cartless connections reset, never a cart's.
#[test]
fn abort_idle_closes_idle_connections_cleanly_for_curl_chromium_and_the_server() {
    if std::process::Command::new("chromium").arg("--version").output().is_err() {
        panic!("chromium is missing (make deps installs it)");
    }
    let (plan, _guard, info) = {
        let plan = Plan { prefix: format!("rlmx{}", std::process::id()), high_clients: 1, low_clients: 1, ..Plan::default() };
        let guard = testbed::topology::DownOnDrop(plan.clone());
        let info = plan.up().expect("up");
        (plan, guard, info)
    };
    let _ = plan;
    let page = "<!DOCTYPE html><html><body><p id=\"r\">pending</p><img src=\"/a.gif\"><img src=\"/b.gif\"><img src=\"/slow.gif\">\
        <script>window.onload = async () => { const b = await fetch('/ok.txt', {cache: 'no-store'}); \
        document.getElementById('r').textContent = 'after ' + b.status + ' ' + (await b.text()).trim(); };</script></body></html>\n";
    // (client address and port, reset under the server) of each connection that ended.
    let ended: Arc<std::sync::Mutex<Vec<(String, bool)>>> = Arc::default();
    let log = ended.clone();
    listen(&info.namespaces.servers, 80, move |mut s| {
        let peer = s.peer_addr().map(|a| a.to_string()).unwrap_or_default();
        let mut buf = [0u8; 4096];
        let mut got = Vec::new();
        let reset = loop {
            if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&got[..end]).to_string();
                got.drain(..end + 4);
                let target = head.split_whitespace().nth(1).unwrap_or("/").to_string();
                let (ctype, body): (&str, Vec<u8>) = match target.as_str() {
                    "/page" => ("text/html", page.as_bytes().to_vec()),
                    "/slow.gif" => {
                        std::thread::sleep(Duration::from_secs(3));
                        ("image/gif", b"GIF89a\x01\x00\x01\x00\x00\x00\x00;".to_vec())
                    }
                    "/ok.txt" => ("text/plain", b"fine\n".to_vec()),
                    "/a.gif" | "/b.gif" => ("image/gif", b"GIF89a\x01\x00\x01\x00\x00\x00\x00;".to_vec()),
                    _ => ("text/plain", b"hello\n".to_vec()),
                };
                let head = format!("HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n\r\n", body.len());
                if s.write_all(head.as_bytes()).and_then(|_| s.write_all(&body)).is_err() {
                    break true;
                }
                continue;
            }
            match s.read(&mut buf) {
                Ok(0) => break false,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) => break e.kind() == std::io::ErrorKind::ConnectionReset,
            }
        };
        log.lock().unwrap().push((peer, reset));
    });
    let dir = std::env::temp_dir().join(format!("rlm-abort-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let arm = RlmArm { rules: format!("{CLASSES}IF NOT COOKIE.cart EXISTS THEN ABORT IDLE AFTER 1s\n"), ..RlmArm::default() };
    let rlm = Inline::start(&info.namespaces.appliance, &arm, &dir, Duration::from_secs(10)).expect("rlm run starts");
    let cli_cap = Capture::start(&info.namespaces.clients, &info.clients.interface, dir.join("client.pcap"));
    let srv_cap = Capture::start(&info.namespaces.servers, "srv0", dir.join("server.pcap"));

    // Two keep-alive clients, from the clients' namespace: the cartless (LOW) and the cart's (HIGH).
    let (low, high) = (info.clients.low[0].clone(), info.clients.high[0].clone());
    let ns = info.namespaces.clients.clone();
    let clients = std::thread::spawn(move || {
        netns::enter(&ns).unwrap();
        let open = |src: &str| {
            let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
            s.bind(&format!("{src}:0").parse::<SocketAddr>().unwrap().into()).unwrap();
            s.connect_timeout(&format!("{FARM_ADDR}:80").parse::<SocketAddr>().unwrap().into(), Duration::from_secs(3)).unwrap();
            let s: TcpStream = s.into();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            s
        };
        let (mut plain, mut cart) = (open(&low), open(&high));
        let cart_addr = cart.local_addr().unwrap().to_string();
        let first = (keepalive_get(&mut plain, "/a", None).unwrap(), keepalive_get(&mut cart, "/a", Some("cart=7")).unwrap());
        // Idle: the cartless connection is closed by a FIN (read returns 0), within about a second.
        let t = Instant::now();
        let mut buf = [0u8; 16];
        let closed = plain.read(&mut buf);
        let closed_after = t.elapsed();
        drop(plain);
        // The next request of the cartless client on a new connection; the cart's on its own.
        let mut again = open(&low);
        let next = (keepalive_get(&mut again, "/b", None).unwrap(), keepalive_get(&mut cart, "/b", Some("cart=7")).unwrap());
        drop(cart);
        (first, closed.map_err(|e| e.to_string()), closed_after, next, cart_addr)
    });
    let (first, closed, closed_after, next, cart_addr) = clients.join().unwrap();
    assert_eq!((first.0 .1.as_str(), first.1 .1.as_str()), ("hello\n", "hello\n"));
    assert_eq!(closed, Ok(0), "the idle connection closed by a FIN, not reset");
    assert!(closed_after >= Duration::from_millis(800) && closed_after <= Duration::from_millis(2_500), "closed after {closed_after:?}");
    assert_eq!((next.0 .1.as_str(), next.1 .1.as_str()), ("hello\n", "hello\n"), "both served again; the cart's on its kept connection");

    // Chromium: the page's first connection idles while the image takes 3 s; then the script's fetch.
    let profile = dir.join("profile");
    let out = chromium_dump(&info.namespaces.clients, &profile, "--virtual-time-budget=10000", &[], &format!("http://{FARM_ADDR}/page"));
    let dom = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(dom.contains("after 200 fine"), "Chromium's next fetch served: {dom} {}", String::from_utf8_lossy(&out.stderr));

    std::thread::sleep(Duration::from_secs(2));
    let client_pcap = cli_cap.stop();
    let server_pcap = srv_cap.stop();
    let out = rlm.stop().expect("stop");
    let status: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.status.as_ref().expect("status")).unwrap()).unwrap();
    println!("rlm stats {}", status["stats"]);
    let aborted = status["stats"]["idle_aborted"].as_u64().unwrap();
    assert!(aborted >= 2, "the cartless client's and Chromium's idle connections: {aborted}");

    let at_client = tshark_select(&client_pcap, TCP_ERRORS);
    assert!(at_client.is_empty(), "TCP errors at the client: {at_client:?}");
    let resets = tshark_select(&server_pcap, "tcp.flags.reset == 1");
    assert_eq!(resets.len() as u64, aborted, "one RST per abort: {resets:?}");
    assert!(resets.iter().all(|r| !r.starts_with(FARM_ADDR)), "none from the server: {resets:?}");
    let ended = ended.lock().unwrap().clone();
    let reset_at_server: Vec<_> = ended.iter().filter(|(_, r)| *r).collect();
    assert_eq!(reset_at_server.len() as u64, aborted, "{ended:?}");
    assert!(ended.iter().any(|(a, r)| *a == cart_addr && !r), "the cart's connection ended, closed by its client: {ended:?}");
    assert!(reset_at_server.iter().all(|(a, _)| *a != cart_addr), "the cart's connection was cut: {ended:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The status page (issue 28): headless Chromium in the appliance's namespace, where rlm serves
/// it on 127.0.0.1, loads it while pages go through rlm, twice, 3 s apart. Its DOM shows both
/// classes, a p95 line that moved between the two reads, the DROP SYN rule's firing count, and
/// the slowest open pageview (a container the farm holds back for 20 s) with its event graph;
/// the page comes from rlm alone (nothing else is reachable from the namespace's loopback).
/// It keeps pages going and starts Chromium three times; beside it, the test that holds
/// Chromium's load times to rlm's within 46 ms missed by 13 ms once (a clean clone at ab745c3),
/// so it runs alone, as the tests that load the machine do.
#[test]
#[ignore = "loads the machine (pages and three Chromiums): make test runs it alone, after the others (cargo test -- --ignored)"]
fn status_page_shows_classes_rules_and_the_slowest_pageview_live_in_chromium() {
    if std::process::Command::new("chromium").arg("--version").output().is_err() {
        panic!("chromium is missing (make deps installs it)");
    }
    // `/tN` answered after N ms, `/slow` after 20 s, anything else at once.
    let respond: Responder = Arc::new(|target: &str| {
        let wait = match target {
            "/slow" => 20_000,
            t => t.strip_prefix("/t").and_then(|n| n.parse().ok()).unwrap_or(0),
        };
        std::thread::sleep(Duration::from_millis(wait));
        b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nhello\n".to_vec()
    });
    let (_plan, _guard, info, _) = lab_serving("sp", 3, Some(respond));
    let dir = std::env::temp_dir().join(format!("rlm-status-page-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let dropped = info.clients.low[0].clone();
    let arm = RlmArm { rules: format!("{CLASSES}IF IP.SRC == {dropped} THEN DROP SYN\n"), ..RlmArm::default() };
    let rlm = Inline::start(&info.namespaces.appliance, &arm, &dir, Duration::from_secs(10)).expect("rlm run starts");

    // Pages from every other client until the end, each answered after 20 to 400 ms.
    let others: Vec<String> = info.clients.high.iter().chain(info.clients.low[1..].iter()).cloned().collect();
    let stop = Arc::new(AtomicBool::new(false));
    let load = std::thread::spawn({
        let (ns, stop, others, slow) = (info.namespaces.clients.clone(), stop.clone(), others.clone(), info.clients.high[0].clone());
        move || {
            netns::enter(&ns).unwrap();
            let slow = std::thread::spawn(move || fetch_target(&slow, "/slow", Duration::from_secs(30)));
            let mut served = 0;
            for i in 0u64.. {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let src = &others[i as usize % others.len()];
                served += u32::from(fetch_target(src, &format!("/t{}", 20 + (i * 97) % 380), Duration::from_secs(3)).is_ok());
            }
            (served, slow)
        }
    });
    assert!(fetch_from_clients_within(&info, vec![dropped.clone()], Duration::from_millis(500))[0].is_err(), "DROP SYN holds for {dropped}");
    std::thread::sleep(Duration::from_secs(4));

    let url = format!("http://127.0.0.1:{}/", testbed::inline::METRICS_PORT);
    let read = |n: u32| -> String {
        let out = chromium_dump(&info.namespaces.appliance, &dir.join(format!("profile{n}")), "--timeout=4000", &[], &url);
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let first = read(1);
    // The live updates: two server-sent events a second or so apart, each a newer view.
    let events = std::thread::spawn({
        let ns = info.namespaces.appliance.clone();
        move || -> std::io::Result<Vec<serde_json::Value>> {
            netns::enter(&ns).unwrap();
            let mut s = TcpStream::connect(("127.0.0.1", testbed::inline::METRICS_PORT))?;
            s.set_read_timeout(Some(Duration::from_secs(5)))?;
            s.write_all(b"GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")?;
            let (mut got, mut buf) = (String::new(), [0u8; 65536]);
            while got.matches("\n\n").count() < 3 {
                let n = s.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                got.push_str(&String::from_utf8_lossy(&buf[..n]));
            }
            // Chunked: each event is one chunk; the data lines are whole JSON views.
            Ok(got.lines().filter_map(|l| l.strip_prefix("data: ")).filter_map(|j| serde_json::from_str(j).ok()).collect())
        }
    })
    .join()
    .unwrap()
    .expect("/events streams");
    assert!(events.len() >= 2, "two views streamed: {events:?}");
    assert!(events[1]["t_ms"].as_u64() > events[0]["t_ms"].as_u64(), "each newer than the last");
    assert_eq!(events[1]["classes"][0]["class"], "HIGH");
    std::thread::sleep(Duration::from_secs(2));
    let second = read(2);
    let shot = dir.join("status-page.png");
    let _ = chromium_dump(
        &info.namespaces.appliance,
        &dir.join("profile3"),
        "--timeout=4000",
        &[&format!("--screenshot={}", shot.display()), "--window-size=1280,1400", "--hide-scrollbars"],
        &url,
    );
    stop.store(true, Ordering::Relaxed);
    let (served, slow) = load.join().unwrap();
    println!("pages served meanwhile: {served}; screenshot {}", shot.display());
    assert!(served >= 20, "the load ran: {served} pages");

    // An attribute of the first element that has `marker` in its opening tag, in a DOM dump.
    let attr = |dom: &str, marker: &str, name: &str| -> Option<String> {
        let at = dom.find(marker)?;
        let start = dom[..at].rfind('<')?;
        let tag = &dom[start..start + dom[start..].find('>')?];
        let v = &tag[tag.find(&format!(" {name}=\""))? + name.len() + 3..];
        Some(v[..v.find('"')?].to_string())
    };
    for dom in [&first, &second] {
        assert!(dom.contains("data-class=\"HIGH\"") && dom.contains("data-class=\"LOW\""), "both classes shown: {dom}");
    }
    let p95 = |dom: &str| attr(dom, "class=\"p95\"", "d").unwrap_or_default();
    let (line1, line2) = (p95(&first), p95(&second));
    assert!(line1.matches('L').count() >= 2, "HIGH's p95 is a line of several seconds: {line1:?}");
    assert_ne!(line1, line2, "the line moved between the two reads");
    // The text of the first table cell that has `marker` in its opening tag.
    let cell = |dom: &str, marker: &str| -> Option<String> {
        let rest = &dom[dom.find(marker)?..];
        Some(rest[rest.find('>')? + 1..rest.find("</td>")?].to_string())
    };
    let fired: u64 = cell(&second, "class=\"n fired\"").and_then(|t| t.replace(',', "").parse().ok()).unwrap_or(0);
    assert!(fired >= 1, "the DROP SYN rule's firing count: {second}");
    let did = &second[second.find("id=\"action-list\"").expect("what rlm did")..];
    assert!(did.contains("<dt>SYNs dropped</dt>"), "what rlm did, labelled as the view says: {did}");
    let slowest = &second[second.find("id=\"slowest-list\"").expect("the slowest pageviews' section")..];
    assert!(
        slowest.contains("class=\"pageview\"") && slowest.contains(&format!("data-client=\"{}\"", info.clients.high[0])),
        "the held-back page is the slowest: {slowest}"
    );
    for kind in ["syn", "synack", "ack", "request"] {
        assert!(slowest.contains(&format!("data-kind=\"{kind}\"")), "its graph has a {kind} node: {slowest}");
    }
    assert!(std::fs::metadata(&shot).is_ok_and(|m| m.len() > 10_000), "a screenshot of the page");
    // `rlm top` reads the same view: one screen of it as text.
    let top = std::process::Command::new("ip")
        .args(["netns", "exec", &info.namespaces.appliance])
        .arg(testbed::inline::rlm_binary().unwrap())
        .args(["top", "--once", "--metrics", &format!("127.0.0.1:{}", testbed::inline::METRICS_PORT)])
        .output()
        .expect("rlm top runs");
    let screen = String::from_utf8_lossy(&top.stdout);
    println!("{screen}");
    assert!(top.status.success(), "rlm top --once: {}", String::from_utf8_lossy(&top.stderr));
    for want in [
        "HIGH",
        "LOW",
        &format!("IF IP.SRC == {dropped} THEN DROP SYN"),
        "SYNs dropped",
        "slowest open pageviews",
        &info.clients.high[0],
        "waiting on the server",
    ] {
        assert!(screen.contains(want), "rlm top shows {want:?}");
    }
    let _ = rlm.stop().expect("stop");
    assert!(slow.join().unwrap().is_ok(), "the held-back page was served");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The systemd unit (deploy/rlm.service) as an operator's box runs it (issue 28): its
/// `ExecStartPre` and `ExecStart` command lines, with a config file of the lab's where the
/// unit names /etc/rlm/rlm.toml, under `setpriv` holding the unit's `CapabilityBoundingSet`
/// alone (all a root service gets under systemd). rlm goes inline and measures the pages that
/// cross it, keeps CAP_NET_ADMIN and CAP_NET_RAW alone once set up, and at SIGTERM exits 0
/// leaving the namespace as it found it; `systemd-analyze verify` accepts the unit.
#[test]
fn the_units_command_line_runs_inline_with_only_the_units_capabilities() {
    let unit = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/rlm.service")).unwrap();
    let value = |key: &str| -> String {
        unit.lines().find_map(|l| l.strip_prefix(&format!("{key}="))).unwrap_or_else(|| panic!("the unit has no {key}")).to_string()
    };
    let rlm = testbed::inline::rlm_binary().unwrap();
    let dir = std::env::temp_dir().join(format!("rlm-unit-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // systemd's own check of the unit, with this build's rlm where the package puts it (its
    // man pages are the package's: not looked for here).
    let local_unit = dir.join("rlm.service");
    std::fs::write(&local_unit, unit.replace("/usr/bin/rlm", &rlm.display().to_string())).unwrap();
    let verify = std::process::Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&local_unit)
        .output()
        .expect("systemd-analyze (make deps installs systemd)");
    assert!(verify.status.success() && verify.stderr.is_empty(), "systemd-analyze verify: {}", String::from_utf8_lossy(&verify.stderr));
    assert_eq!(value("Type"), "notify");

    let (_plan, _guard, info) = lab("u", 2);
    let ns = &info.namespaces.appliance;
    let rules = dir.join("rules.rlm");
    std::fs::write(&rules, CLASSES).unwrap();
    let config = dir.join("rlm.toml");
    std::fs::write(
        &config,
        format!(
            "bridge = \"{}\"\nclient_port = \"{}\"\nserver_port = \"{}\"\nrules = \"{}\"\nmetrics = \"127.0.0.1:{}\"\npageviews = \"{}\"\n",
            testbed::inline::BRIDGE,
            info.bridge.client_port,
            info.bridge.server_port,
            rules.display(),
            testbed::inline::METRICS_PORT,
            dir.join("pageviews.jsonl").display()
        ),
    )
    .unwrap();
    let caps: Vec<String> = value("CapabilityBoundingSet").split_whitespace().map(|c| c.trim_start_matches("CAP_").to_lowercase()).collect();
    let bounding = format!("-all,{}", caps.iter().map(|c| format!("+{c}")).collect::<Vec<_>>().join(","));
    // A unit's command line, as systemd would run it: this build's rlm, the lab's files.
    let command = |key: &str| -> Vec<String> {
        value(key)
            .split_whitespace()
            .map(|a| match a {
                "/usr/bin/rlm" => rlm.display().to_string(),
                "/etc/rlm/rlm.toml" => config.display().to_string(),
                "/etc/rlm/rules.rlm" => rules.display().to_string(),
                a => a.to_string(),
            })
            .collect()
    };
    let setpriv = |args: &[String]| {
        let mut c = std::process::Command::new("ip");
        c.args(["netns", "exec", ns, "setpriv", "--bounding-set", &bounding, "--inh-caps", "-all", "--"]).args(args);
        c
    };
    let pre = setpriv(&command("ExecStartPre")).output().unwrap();
    assert!(pre.status.success(), "ExecStartPre: {}", String::from_utf8_lossy(&pre.stderr));

    let ports = [info.bridge.client_port.as_str(), info.bridge.server_port.as_str()];
    let before = testbed::inline::host_state(ns, &ports);
    let log = dir.join("rlm.log");
    let mut child = setpriv(&command("ExecStart"))
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::options().append(true).open(&log).unwrap())
        .spawn()
        .unwrap();
    let addr: SocketAddr = ([127, 0, 0, 1], testbed::inline::METRICS_PORT).into();
    let status = |what: &str| -> serde_json::Value {
        let (code, body) = testbed::inline::http_get(ns, addr, "/status", Duration::from_secs(2)).unwrap_or_else(|e| panic!("/status {what}: {e:#}"));
        assert_eq!(code, 200);
        serde_json::from_str(&body).unwrap()
    };
    let until = Instant::now() + Duration::from_secs(15);
    while testbed::inline::http_get(ns, addr, "/status", Duration::from_secs(1)).map_or(true, |(_, b)| !b.contains("\"running\"")) {
        assert!(child.try_wait().unwrap().is_none(), "rlm exited at start: {}", std::fs::read_to_string(&log).unwrap());
        assert!(Instant::now() < until, "rlm never went inline: {}", std::fs::read_to_string(&log).unwrap());
        std::thread::sleep(Duration::from_millis(200));
    }
    // Once inline it holds CAP_NET_ADMIN and CAP_NET_RAW, and nothing more in any set, in
    // every thread: /proc/PID/status shows the main thread's sets only, and the record writer
    // (its pageviews go to a file) is a thread started before the main thread drops its own.
    let kept = (1u64 << 12) | (1 << 13); // CAP_NET_ADMIN, CAP_NET_RAW
    let mut threads = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{}/task", child.id())).unwrap() {
        let task = task.unwrap().path();
        let (Ok(status), Ok(comm)) = (std::fs::read_to_string(task.join("status")), std::fs::read_to_string(task.join("comm"))) else {
            continue; // a thread that ended meanwhile
        };
        let capset = |name: &str| u64::from_str_radix(status.lines().find_map(|l| l.strip_prefix(&format!("{name}:\t"))).unwrap(), 16).unwrap();
        for set in ["CapEff", "CapPrm", "CapBnd", "CapAmb", "CapInh"] {
            assert_eq!(capset(set) & !kept, 0, "{set} of thread {} once inline: {status}", comm.trim());
        }
        if task.file_name() == Some(std::ffi::OsStr::new(&child.id().to_string())) {
            for set in ["CapEff", "CapPrm", "CapBnd"] {
                assert_eq!(capset(set), kept, "{set} of the main thread once inline: {status}");
            }
        }
        threads.push(comm.trim().to_string());
    }
    assert!(threads.iter().any(|t| t == "rlm-records"), "the record writer is among rlm's threads: {threads:?}");
    let srcs: Vec<String> = info.clients.high.iter().chain(info.clients.low.iter()).cycle().take(20).cloned().collect();
    for r in fetch_from_clients(&info, srcs) {
        r.expect("a page through rlm under the unit's capabilities");
    }
    std::thread::sleep(Duration::from_millis(1_500));
    let st = status("after the pages");
    assert!(st["stats"]["transactions"].as_u64().unwrap_or(0) >= 20, "rlm measured the pages: {}", st["stats"]);
    assert_eq!(st["observer"], "ebpf");
    // SIGTERM (systemd's KillSignal): a clean exit, nothing left.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let until = Instant::now() + Duration::from_secs(10);
    let code = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s.code();
        }
        assert!(Instant::now() < until, "rlm did not stop within the unit's TimeoutStopSec");
        std::thread::sleep(Duration::from_millis(100));
    };
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(testbed::inline::host_state(ns, &ports), before, "rlm left something behind: {text}");
    let _ = std::fs::remove_dir_all(&dir);
}
