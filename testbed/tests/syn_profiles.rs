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

fn assert_near(got: &[f64], want: &[f64], tol: f64) {
    assert!(got.len() >= want.len(), "SYNs at {got:?}, want {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= tol, "SYNs at {got:?}, want {want:?}");
    }
}

#[test]
fn xp_and_linux_syn_timeouts() {
    let plan = Plan { prefix: format!("rlms{}", std::process::id()), high_clients: 2, low_clients: 0, more_clients: Vec::new() };
    let _guard = Guard(plan.clone());
    let info = plan.up().expect("up");
    // Every SYN to ports 81 and 82 is dropped at the farm, as a full server would.
    for port in ["81", "82"] {
        in_ns(&info.namespaces.servers, "iptables", &["-w", "-A", "INPUT", "-p", "tcp", "--dport", port, "-j", "DROP"]).unwrap();
    }
    let cli = info.namespaces.clients.clone();

    // linux: Linux's own 1 s, retried with exponential backoff.
    let syns = capture_syns(info.namespaces.servers.clone(), 82, 8.5);
    std::thread::sleep(Duration::from_millis(300));
    let c = connect(cli.clone(), info.clients.high[1].clone(), 82, TcpProfile::Linux, Duration::from_secs(8));
    let (_, kind) = c.join().unwrap();
    assert_eq!(kind, std::io::ErrorKind::TimedOut, "still trying when we gave up");
    assert_near(&syns.join().unwrap(), &[0.0, 1.0, 3.0, 7.0], 0.3);

    // xp: the process joins the profile's cgroup first; its new sockets get 3 s.
    let cg = ProfileCgroup::create(&format!("rlmt-xp-{}", std::process::id()), TcpProfile::Xp).expect("cgroup and sock_ops");
    cg.join(std::process::id()).unwrap();
    let syns = capture_syns(info.namespaces.servers.clone(), 81, 23.0);
    std::thread::sleep(Duration::from_millis(300));
    let c = connect(cli, info.clients.high[0].clone(), 81, TcpProfile::Xp, Duration::from_secs(30));
    let (elapsed, kind) = c.join().unwrap();
    let syns = syns.join().unwrap();
    println!("xp: SYNs at {syns:?}, failed after {elapsed:?} ({kind:?})");
    // The kernel's timer wheel fires timers of seconds up to a few hundred ms late.
    assert_near(&syns, &[0.0, 3.0, 9.0], 0.5);
    assert_eq!(syns.len(), 3, "two retries only: {syns:?}");
    assert!((elapsed.as_secs_f64() - 21.0).abs() < 0.6, "ETIMEDOUT after {elapsed:?}");
    assert_eq!(kind, std::io::ErrorKind::TimedOut);
    assert!(cg.answered() >= 1);
    leave(std::process::id()).unwrap();
}
