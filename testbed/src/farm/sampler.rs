//! The server's view of an overload (000 section 4, Figure 6): each second, the connections open
//! on the server's port and the connection attempts its listen queues dropped, read from the
//! kernel in the farm's namespace (`/proc/PID/net/tcp`, `snmp` and `netstat` of a process in it).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

/// The counters at one instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpCounters {
    /// Connections on the server's port, established or closing (not yet closed by both
    /// sides), those waiting in the accept queue included; not the farm's own connections
    /// behind it (the front's to nginx).
    pub connections: u64,
    /// Every connection of the namespace established or closing (`Tcp: CurrEstab`).
    pub established: u64,
    /// Handshakes the full accept queue refused (`TcpExt: ListenOverflows`): SYNs dropped, and
    /// the clients' handshake ACKs.
    pub listen_overflows: u64,
    /// Every connection attempt a listener dropped (`TcpExt: ListenDrops`), overflows included.
    pub listen_drops: u64,
    /// SYNs dropped with the SYN queue full (`TcpExt: TCPReqQFullDrop`).
    pub syn_queue_drops: u64,
}

/// A value of a `/proc/net/snmp`-style file: a header line and a value line per group.
fn field(text: &str, group: &str, name: &str) -> Option<u64> {
    let mut lines = text.lines().filter(|l| l.starts_with(group) && l[group.len()..].starts_with(": "));
    let (head, values) = (lines.next()?, lines.next()?);
    let i = head.split_whitespace().position(|h| h == name)?;
    values.split_whitespace().nth(i)?.parse().ok()
}

/// The sockets of `/proc/net/tcp` on local port `port` in a state of an open connection: not
/// listening, half-open (SYN_RECV), in TIME_WAIT or closed.
fn connections_on(tcp: &str, port: u16) -> u64 {
    let local = format!(":{port:04X}");
    tcp.lines()
        .skip(1)
        .filter(|l| {
            let mut w = l.split_whitespace().skip(1);
            let (addr, state) = (w.next().unwrap_or(""), w.nth(1).unwrap_or(""));
            addr.ends_with(&local) && !matches!(state, "03" | "06" | "07" | "0A")
        })
        .count() as u64
}

impl TcpCounters {
    /// Parse `tcp` (connections on `port`), `snmp` and `netstat` (missing fields read 0: older
    /// kernels lack some).
    pub fn parse(tcp: &str, port: u16, snmp: &str, netstat: &str) -> TcpCounters {
        TcpCounters {
            connections: connections_on(tcp, port),
            established: field(snmp, "Tcp", "CurrEstab").unwrap_or(0),
            listen_overflows: field(netstat, "TcpExt", "ListenOverflows").unwrap_or(0),
            listen_drops: field(netstat, "TcpExt", "ListenDrops").unwrap_or(0),
            syn_queue_drops: field(netstat, "TcpExt", "TCPReqQFullDrop").unwrap_or(0),
        }
    }

    fn read(pid: u32, port: u16) -> Option<TcpCounters> {
        let dir = PathBuf::from(format!("/proc/{pid}/net"));
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
        Some(TcpCounters::parse(&read("tcp")?, port, &read("snmp")?, &read("netstat")?))
    }
}

/// One second of the server's view.
#[derive(Clone, Debug, Serialize)]
pub struct ServerSample {
    /// Seconds since sampling began (the load's start).
    pub t_s: f64,
    pub connections: u64,
    pub established: u64,
    /// Drops during the second before this sample.
    pub listen_drops: u64,
    pub listen_overflows: u64,
    pub syn_queue_drops: u64,
}

/// The run's totals and its timeline.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ServerView {
    pub max_connections: u64,
    pub max_established: u64,
    pub listen_drops: u64,
    pub listen_overflows: u64,
    pub syn_queue_drops: u64,
    pub timeline: Vec<ServerSample>,
}

impl ServerView {
    /// Turn cumulative readings into per-second samples and totals.
    pub fn of(readings: &[(f64, TcpCounters)]) -> ServerView {
        let mut v = ServerView::default();
        let Some(first) = readings.first() else { return v };
        let mut prev = first.1;
        for &(t_s, c) in &readings[1..] {
            let s = ServerSample {
                t_s,
                connections: c.connections,
                established: c.established,
                listen_drops: c.listen_drops.saturating_sub(prev.listen_drops),
                listen_overflows: c.listen_overflows.saturating_sub(prev.listen_overflows),
                syn_queue_drops: c.syn_queue_drops.saturating_sub(prev.syn_queue_drops),
            };
            v.max_connections = v.max_connections.max(s.connections);
            v.max_established = v.max_established.max(s.established);
            v.listen_drops += s.listen_drops;
            v.listen_overflows += s.listen_overflows;
            v.syn_queue_drops += s.syn_queue_drops;
            v.timeline.push(s);
            prev = c;
        }
        v
    }
}

/// Samples the counters every `every` on a thread until [`Sampler::finish`] (or until it is
/// dropped, on an arm's error path: the thread then stops by itself).
pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Vec<(f64, TcpCounters)>>>,
}

impl Sampler {
    /// Start sampling the namespace of process `pid`, the server on `port` (the first reading
    /// is the baseline).
    pub fn start(pid: u32, port: u16, every: Duration) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let start = Instant::now();
            let mut readings = Vec::new();
            let mut next = start;
            while !flag.load(Ordering::Relaxed) {
                if let Some(c) = TcpCounters::read(pid, port) {
                    readings.push((start.elapsed().as_secs_f64(), c));
                }
                next += every;
                while Instant::now() < next && !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(20).min(every));
                }
            }
            if let Some(c) = TcpCounters::read(pid, port) {
                readings.push((start.elapsed().as_secs_f64(), c));
            }
            readings
        });
        Sampler { stop, thread: Some(thread) }
    }

    /// Stop sampling; `None` if no reading succeeded (the farm's process was gone), so that a
    /// report never shows zeros that were not read.
    pub fn finish(mut self) -> Option<ServerView> {
        self.stop.store(true, Ordering::Relaxed);
        let readings = self.thread.take()?.join().unwrap_or_default();
        (readings.len() >= 2).then(|| ServerView::of(&readings))
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SNMP: &str = "Ip: Forwarding DefaultTTL\nIp: 1 64\nTcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab InSegs\nTcp: 1 200 120000 -1 5 7 0 0 42 1000\nUdp: InDatagrams\nUdp: 3\n";
    const NETSTAT: &str = "TcpExt: SyncookiesSent ListenOverflows ListenDrops TCPReqQFullDrop\nTcpExt: 0 17 19 2\nIpExt: InNoRoutes\nIpExt: 0\n";

    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100010A:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n\
   1: 0100010A:0050 0200040A:9C40 01 00000000:00000000 00:00000000 00000000     0        0 2 1\n\
   2: 0100010A:0050 0300040A:9C41 08 00000000:00000000 00:00000000 00000000     0        0 3 1\n\
   3: 0100010A:0050 0400040A:9C42 03 00000000:00000000 00:00000000 00000000     0        0 4 1\n\
   4: 0100010A:0050 0500040A:9C43 06 00000000:00000000 00:00000000 00000000     0        0 5 1\n\
   5: 0100007F:9C44 0100007F:1F91 01 00000000:00000000 00:00000000 00000000     0        0 6 1\n\
   6: 0100010A:0050 0600040A:9C45 04 00000000:00000000 00:00000000 00000000     0        0 7 1\n";

    #[test]
    fn counters_are_read_by_name() {
        let c = TcpCounters::parse(TCP, 80, SNMP, NETSTAT);
        // Port 80's: established, CLOSE_WAIT and FIN_WAIT1; not the listener, SYN_RECV,
        // TIME_WAIT, nor the connection to nginx on 8081 (0x1F91).
        assert_eq!(c, TcpCounters { connections: 3, established: 42, listen_overflows: 17, listen_drops: 19, syn_queue_drops: 2 });
        assert_eq!(connections_on(TCP, 8081), 0);
        // A group whose name another begins with is not confused with it, a missing one reads 0.
        assert_eq!(field("TcpExt: CurrEstab\nTcpExt: 9\nTcp: CurrEstab\nTcp: 4\n", "Tcp", "CurrEstab"), Some(4));
        assert_eq!(TcpCounters::parse("", 80, "", ""), TcpCounters::default());
    }

    #[test]
    fn readings_become_per_second_drops_and_totals() {
        let r = |t, e, d| (t, TcpCounters { connections: e / 2, established: e, listen_overflows: d, listen_drops: d + 1, syn_queue_drops: 0 });
        let v = ServerView::of(&[r(0.0, 3, 100), r(1.0, 250, 100), r(2.0, 280, 130), r(3.0, 10, 131)]);
        assert_eq!(v.timeline.len(), 3);
        assert_eq!((v.max_connections, v.max_established, v.listen_overflows, v.listen_drops), (140, 280, 31, 31));
        assert_eq!(v.timeline[1].listen_overflows, 30);
        assert_eq!(v.timeline[2].established, 10);
        assert_eq!(ServerView::of(&[]).timeline.len(), 0);
    }

    #[test]
    fn a_live_namespace_is_sampled() {
        // This process's own namespace: the counters exist wherever /proc does.
        let s = Sampler::start(std::process::id(), 80, Duration::from_millis(10));
        std::thread::sleep(Duration::from_millis(60));
        let v = s.finish().expect("readings");
        assert!(v.timeline.len() >= 3, "{v:?}");
        // A process that does not exist: nothing read, no view (not a view of zeros).
        let gone = Sampler::start(u32::MAX, 80, Duration::from_millis(10));
        std::thread::sleep(Duration::from_millis(30));
        assert!(gone.finish().is_none());
        // Dropped without finish (an arm's error path): its thread stops.
        let dropped = Sampler::start(std::process::id(), 80, Duration::from_millis(10));
        let stop = dropped.stop.clone();
        drop(dropped);
        assert!(stop.load(Ordering::Relaxed));
    }
}
