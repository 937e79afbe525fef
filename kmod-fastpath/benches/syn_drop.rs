//! The kernel's SYN paths, timed inside the kernel (`BPF_PROG_TEST_RUN` with `repeat`): how many
//! SYNs a second one core decides in `syn_admit` when the engine has published a DROP SYN verdict
//! for the client (the target: at least 1 million), next to the same SYN passed, queued
//! for the engine (no verdict) and held for it (no verdict: copied whole into the ring, its
//! reader woken); `observe` on a server's segments (a body segment reported whole, cut to its
//! headers, a response head read by the kernel); and the SRPT egress classifier on a data segment.
//!
//! Run as root: `make bench-fastpath` (or `cargo bench -p kmod-fastpath --bench syn_drop`).
//! It pins itself to one CPU, runs each path 40 times 50,000 SYNs, drains the ring buffer between
//! calls (every decided SYN is reported to the engine, and a full ring would time a cheaper path),
//! prints the median ns per SYN and SYNs per second, writes `target/bench-fastpath.json`, and
//! exits non-zero if the drop path is under 1 million SYNs a second.
//!
//! This is the program alone, from the frame in an `skb` to its verdict; on the wire the veth,
//! the bridge and br_netfilter add their own cost.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use anyhow::{ensure, Result};
use kmod_fastpath::inline::{InlinePath, Mode, SynAction};
use kmod_fastpath::{classid, FlowKey, SrptEgress, SrptMode, SrptParams};
use rlm_core::testkit::{tcp_frame, ACK, PSH, SYN};
use rlm_core::wire::LinkType;

const REPEAT: u32 = 50_000;
/// Segments a call of `observe`: each whole one takes 2 KiB of the 16 MiB ring.
const OBSERVE_REPEAT: u32 = 5_000;
const CALLS: usize = 40;
const TARGET_PER_S: f64 = 1e6;
const QUEUE_MARK: u32 = 0x80_0000;

fn pin_to_cpu(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes within it; sched_setaffinity reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

struct Row {
    path: &'static str,
    retval: u32,
    median_ns: f64,
    min_ns: f64,
}

fn main() -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("syn_drop: needs root (loading eBPF programs); skipped");
        return Ok(());
    }
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    pin_to_cpu(cpus - 1);
    let mut path = InlinePath::load(&[80], QUEUE_MARK)?;
    // Watched and beaten, as `rlm run` has it (the check costs a lookup and a clock read), with
    // a watch long enough for the whole run.
    path.watch_heartbeat(Some(Duration::from_secs(3600)))?;
    path.beat()?;
    let mut ring = path.take_events()?;
    path.set_mode(Mode::Verdicts, 1)?;
    let server = SocketAddrV4::new(Ipv4Addr::new(10, 1, 0, 1), 80);
    // (path, client, its verdict, SYNs without a verdict held rather than queued, SYNs a call).
    // Held SYNs are taken by the reader between calls, as rlm takes them: a flood it keeps up
    // with (2,000 a call, the first waking it, well within the kernel's 1 ms before it wakes it
    // again), and one SYN at a time (each waking it: the reader idle between SYNs).
    let clients = [
        ("drop (DROP SYN verdict)", Ipv4Addr::new(10, 5, 0, 2), Some(SynAction::Drop { rule: 3 }), false, REPEAT),
        ("pass (verdict)", Ipv4Addr::new(10, 4, 0, 2), Some(SynAction::Pass), false, REPEAT),
        ("queue (no verdict)", Ipv4Addr::new(10, 6, 0, 2), None, false, REPEAT),
        ("hold, a flood (no verdict)", Ipv4Addr::new(10, 7, 0, 2), None, true, 2_000),
        ("hold, one SYN (no verdict)", Ipv4Addr::new(10, 7, 0, 3), None, true, 1),
    ];
    let mut rows = Vec::new();
    for (name, client, action, hold, repeat) in clients {
        if let Some(a) = action {
            path.set_syn_verdict(client, server, 1, a)?;
        }
        path.set_hold_syns(hold)?;
        let syn = tcp_frame(LinkType::Ethernet, SocketAddr::V4(SocketAddrV4::new(client, 40000)), server.into(), 1000, 1, SYN, &[]);
        let before = path.counters()?;
        let mut ns = Vec::with_capacity(CALLS);
        let (mut retval, mut reports) = (0, 0u64);
        for _ in 0..CALLS {
            let r = path.test_run(true, &syn, repeat)?;
            retval = r.retval;
            ns.push(f64::from(r.ns_per_run));
            let mut last = None;
            while let Some(rec) = ring.next() {
                reports += 1;
                last = rec.event().map(|e| e.ts_ns);
            }
            // Taken, as rlm tells the kernel: the next call's SYNs are not late.
            if let (true, Some(ts)) = (hold, last) {
                path.held_taken(ts)?;
            }
        }
        let after = path.counters()?;
        ensure!(
            after.ring_full == before.ring_full,
            "{name}: the ring buffer filled ({} reports lost): the figure would be too good",
            after.ring_full - before.ring_full
        );
        let runs = (CALLS as u64) * u64::from(repeat);
        let decided = (after.syn_dropped - before.syn_dropped)
            + (after.syn_passed - before.syn_passed)
            + (after.syn_queued - before.syn_queued)
            + (after.syn_held - before.syn_held);
        ensure!(decided == runs, "{name}: {decided} SYNs counted for {runs} runs (late {})", after.hold_late - before.hold_late);
        // A decided SYN is reported to the engine, and a held one handed to it whole; a queued
        // one goes to it through NFQUEUE.
        let expected = if action.is_some() || hold { runs } else { 0 };
        ensure!(reports == expected, "{name}: {reports} reports in the ring for {expected} expected");
        ns.sort_by(f64::total_cmp);
        rows.push(Row { path: name, retval, median_ns: ns[CALLS / 2], min_ns: ns[0] });
    }
    // `observe` on a server's segments (body cuts): a 1,448-byte body segment reported whole
    // (no range), the same inside a body's range (cut, and not reported at all: it crosses no
    // MiB of the body), and a 3,000-byte segment that starts with an image's head, read by the
    // kernel, its body armed and the head alone reported. The ring drained between calls.
    path.set_mode(Mode::PassAll, 1)?;
    let client = SocketAddrV4::new(Ipv4Addr::new(10, 4, 0, 9), 40000);
    let body = tcp_frame(LinkType::Ethernet, server.into(), client.into(), 1_000, 1, PSH | ACK, &[b'x'; 1448]);
    let head = b"HTTP/1.1 200 OK\r\nDate: Fri, 27 Nov 2026 15:00:00 GMT\r\nServer: nginx\r\nContent-Type: image/jpeg\r\nContent-Length: 90000\r\nConnection: keep-alive\r\n\r\n";
    let head_segment =
        tcp_frame(LinkType::Ethernet, server.into(), client.into(), 1_000, 1, PSH | ACK, &[&head[..], &[b'x'; 3000 - 160][..]].concat());
    for (name, frame, range) in [
        ("observe: body segment whole", &body, None),
        ("observe: body segment cut, silent", &body, Some(1_000_000)),
        ("observe: head read, body armed", &head_segment, None),
    ] {
        if let Some(until) = range {
            path.set_body_unread(client, server, until)?;
        }
        let before = path.counters()?;
        let mut ns = Vec::with_capacity(CALLS);
        let mut retval = 0;
        for _ in 0..CALLS {
            let r = path.test_run_from_server_n(frame, OBSERVE_REPEAT)?;
            retval = r.retval;
            ns.push(f64::from(r.ns_per_run));
            while ring.next().is_some() {}
        }
        let after = path.counters()?;
        let runs = (CALLS as u64) * u64::from(OBSERVE_REPEAT);
        ensure!(after.ring_full == before.ring_full, "{name}: the ring buffer filled");
        // A segment cut inside a body's range that crosses no MiB of its sequence space is not
        // reported at all (silent); the others are.
        let (observed, cut, armed, silent) = (
            after.observed - before.observed,
            after.body_cut - before.body_cut,
            after.body_armed - before.body_armed,
            after.body_silent - before.body_silent,
        );
        let want = match (range, name.contains("head")) {
            (Some(_), _) => (0, runs, 0, runs),
            (None, true) => (runs, 0, runs, 0),
            (None, false) => (runs, 0, 0, 0),
        };
        ensure!((observed, cut, armed, silent) == want, "{name}: {observed} reported, {cut} cut, {armed} armed, {silent} silent; {want:?} expected");
        ns.sort_by(f64::total_cmp);
        rows.push(Row { path: name, retval, median_ns: ns[CALLS / 2], min_ns: ns[0] });
    }
    // The SRPT egress classifier on a server's data segment whose response size is published
    // (the per-packet cost on the client port's egress; the same segment again and again is a
    // retransmission after the first run, which takes the same lookups and band).
    let server = SocketAddrV4::new(Ipv4Addr::new(10, 1, 0, 1), 80);
    let client = SocketAddrV4::new(Ipv4Addr::new(10, 4, 0, 2), 40000);
    let mut egress = SrptEgress::load(&[80], &SrptParams::new(SrptMode::Srpt, classid(0x7e1, 0x10)))?;
    egress.watch_heartbeat(Some(Duration::from_secs(3600)))?;
    egress.beat()?;
    egress.set_response(FlowKey::new(server, client), 1, Some(1 + 100_000))?;
    let seg = tcp_frame(LinkType::Ethernet, server.into(), client.into(), 1, 1, PSH | ACK, &[0u8; 1448]);
    let mut ns = Vec::with_capacity(CALLS);
    let mut retval = 0;
    for _ in 0..CALLS {
        let r = egress.test_run(&seg, REPEAT)?;
        retval = r.retval;
        ns.push(f64::from(r.ns_per_run));
    }
    ns.sort_by(f64::total_cmp);
    rows.push(Row { path: "srpt egress (data segment)", retval, median_ns: ns[CALLS / 2], min_ns: ns[0] });

    println!("{:<32} {:>7} {:>10} {:>8} {:>14}", "path", "retval", "median ns", "min ns", "per s (1 CPU)");
    for r in &rows {
        println!("{:<32} {:>7} {:>10.0} {:>8.0} {:>14.0}", r.path, r.retval, r.median_ns, r.min_ns, 1e9 / r.median_ns);
    }
    let drop = &rows[0];
    let per_s = 1e9 / drop.median_ns;
    let json = format!(
        "{{\"repeat\": {REPEAT}, \"calls\": {CALLS}, \"paths\": [{}], \"drop_per_s\": {per_s:.0}, \"target_per_s\": {TARGET_PER_S:.0}}}\n",
        rows.iter()
            .map(|r| format!(
                "{{\"path\": \"{}\", \"retval\": {}, \"median_ns\": {:.1}, \"min_ns\": {:.1}}}",
                r.path, r.retval, r.median_ns, r.min_ns
            ))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench-fastpath.json");
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&out, json)?;
    println!("wrote {}", out.display());
    ensure!(drop.retval == 2, "the drop path returned {} (TC_ACT_SHOT is 2)", drop.retval);
    ensure!(per_s >= TARGET_PER_S, "FAIL: the kernel drop path decides {per_s:.0} SYNs/s on one CPU, under {TARGET_PER_S:.0}");
    println!("PASS: the kernel drop path decides {per_s:.0} SYNs/s on one CPU (at least {TARGET_PER_S:.0})");
    Ok(())
}
