//! The browser TCP profiles in this kernel (needs root): with every SYN to a port dropped at
//! the farm, an `xp` socket sends SYNs at 0, 3 and 9 s and fails at 21 s; a `linux` socket sends
//! them at 0, 1, 3, 7 ... s. SYN times are captured on the farm's interface.

use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use sim_clients::tcp_profile::{leave, ProfileCgroup, TcpProfile};
use testbed::netns;
use testbed::topology::{in_ns, Plan, FARM_ADDR};

struct Guard(Plan);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = leave(std::process::id());
        let _ = self.0.down();
    }
}

/// Capture the times (seconds since the first) of SYNs to `port` on the farm's interface,
/// for `secs` seconds, from a thread inside the farm's namespace.
fn capture_syns(ns: String, port: u16, secs: f64) -> std::thread::JoinHandle<Vec<f64>> {
    std::thread::spawn(move || {
        netns::enter(&ns).unwrap();
        let mut cap = pcap::Capture::from_device("srv0").unwrap().immediate_mode(true).open().unwrap().setnonblock().unwrap();
        cap.filter(&format!("tcp dst port {port} and tcp[tcpflags] & tcp-syn != 0"), true).unwrap();
        let start = Instant::now();
        let mut times = Vec::new();
        while start.elapsed().as_secs_f64() < secs {
            match cap.next_packet() {
                Ok(p) => times.push(p.header.ts.tv_sec as f64 + p.header.ts.tv_usec as f64 / 1e6),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        let t0 = times.first().copied().unwrap_or(0.0);
        times.iter().map(|t| t - t0).collect()
    })
}

/// Connect from the client namespace with the profile's SYN count; returns how long until it
/// failed (or the limit passed) and the error.
fn connect(ns: String, src: String, port: u16, profile: TcpProfile, limit: Duration) -> std::thread::JoinHandle<(Duration, std::io::ErrorKind)> {
    std::thread::spawn(move || {
        netns::enter(&ns).unwrap();
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        profile.apply(&s).unwrap();
        s.bind(&format!("{src}:0").parse::<SocketAddr>().unwrap().into()).unwrap();
        let dst: SocketAddr = format!("{FARM_ADDR}:{port}").parse().unwrap();
        let start = Instant::now();
        let err = s.connect_timeout(&dst.into(), limit).expect_err("nothing answers");
        let _ = s.as_raw_fd();
        drop(TcpStream::from(s));
        (start.elapsed(), err.kind())
    })
}

/// How late the kernel may fire a timer of `delay` seconds. Timers sit in the hierarchical timer
/// wheel (kernel/time/timer.c): a timer lands in the level whose granularity is at most an
/// eighth of its delay and is rounded up to that granularity ("the timer wheel has a worst case
/// slack of 12.5%"), plus a jiffy (4 ms at this kernel's HZ=250, 10 ms at HZ=100) and the
/// softirq's and the capture's scheduling, held to 50 ms.
fn timer_slack(delay: f64) -> f64 {
    delay / 8.0 + 0.05
}

/// SYNs at `got` (seconds since the first) against a backoff of `gaps`: each retransmission
/// comes no earlier than its timer (less the capture's 20 ms of timestamp jitter) and no later
/// than the kernel's slack for that timer. The gaps are judged, not the times since the first
/// SYN: each timer is armed when the last one fired, so lateness would add up.
fn assert_backoff(got: &[f64], gaps: &[f64]) {
    assert!(got.len() > gaps.len(), "SYNs at {got:?}, want gaps of {gaps:?}");
    for (i, w) in gaps.iter().enumerate() {
        let g = got[i + 1] - got[i];
        assert!(
            g >= w - 0.02 && g <= w + timer_slack(*w),
            "SYN {} came {g:.3} s after the one before, want {w} s (+{:.3} s at most): SYNs at {got:?}",
            i + 1,
            timer_slack(*w)
        );
    }
}

#[test]
fn xp_and_linux_syn_timeouts() {
    let plan = Plan { prefix: format!("rlms{}", std::process::id()), high_clients: 2, low_clients: 0, ..Plan::default() };
    let _guard = Guard(plan.clone());
    let info = plan.up().expect("up");
    // Every SYN to ports 81 and 82 is dropped at the farm, as a full server would.
    for port in ["81", "82"] {
        in_ns(&info.namespaces.servers, "iptables", &["-w", "-A", "INPUT", "-p", "tcp", "--dport", port, "-j", "DROP"]).unwrap();
    }
    let cli = info.namespaces.clients.clone();

    // linux: Linux's own 1 s, retried with exponential backoff.
    // Given up at 9.5 s: the fourth SYN (7 s, each timer up to its slack late) has gone by then.
    let syns = capture_syns(info.namespaces.servers.clone(), 82, 10.0);
    std::thread::sleep(Duration::from_millis(300));
    let c = connect(cli.clone(), info.clients.high[1].clone(), 82, TcpProfile::Linux, Duration::from_millis(9500));
    let (_, kind) = c.join().unwrap();
    assert_eq!(kind, std::io::ErrorKind::TimedOut, "still trying when we gave up");
    assert_backoff(&syns.join().unwrap(), &[1.0, 2.0, 4.0]);

    // xp: the process joins the profile's cgroup first; its new sockets get 3 s.
    let cg = ProfileCgroup::create(&format!("rlmt-xp-{}", std::process::id()), TcpProfile::Xp).expect("cgroup and sock_ops");
    cg.join(std::process::id()).unwrap();
    let syns = capture_syns(info.namespaces.servers.clone(), 81, 23.0);
    std::thread::sleep(Duration::from_millis(300));
    let c = connect(cli, info.clients.high[0].clone(), 81, TcpProfile::Xp, Duration::from_secs(30));
    let (elapsed, kind) = c.join().unwrap();
    let syns = syns.join().unwrap();
    println!("xp: SYNs at {syns:?}, failed after {elapsed:?} ({kind:?})");
    assert_backoff(&syns, &[3.0, 6.0]);
    assert_eq!(syns.len(), 3, "two retries only: {syns:?}");
    // The last SYN's 12 s timer ends it: ETIMEDOUT 12 s after that SYN, within its slack.
    let last = elapsed.as_secs_f64() - syns[2];
    assert!(last >= 11.7 && last <= 12.0 + timer_slack(12.0) + 0.3, "ETIMEDOUT after {elapsed:?}, {last:.3} s after the last SYN");
    assert_eq!(kind, std::io::ErrorKind::TimedOut);
    assert!(cg.answered() >= 1);
    leave(std::process::id()).unwrap();
}
