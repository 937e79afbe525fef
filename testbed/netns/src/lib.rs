//! Network namespaces for the lab (`testbed`) and, as a dev-dependency, the tests of the other
//! crates that need a real kernel path (`rlm`, `kmod-fastpath`): whether we may make them
//! ([`is_root`]), moving a thread into one ([`enter`]), a shell command ([`sh`]), and the
//! smallest topology with a bridge in the middle ([`Bridge`]).

use std::io;
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};

/// Whether this process runs as root (namespaces, bridges and eBPF need it).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Move the calling thread into the named network namespace (for good: call it in a thread of
/// its own). Sockets it opens and processes it spawns live there.
pub fn enter(ns: &str) -> io::Result<()> {
    let f = std::fs::File::open(format!("/var/run/netns/{ns}")).map_err(|e| io::Error::new(e.kind(), format!("namespace {ns}: {e}")))?;
    // SAFETY: setns with a valid namespace descriptor changes only this thread's namespace.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("setns {ns}: {e}")));
    }
    Ok(())
}

/// Run `cmd` with `sh -c`: its standard output, or an error naming the command and what it
/// wrote to standard error.
pub fn sh(cmd: &str) -> io::Result<String> {
    let out = Command::new("sh").args(["-c", cmd]).output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!("failed: {cmd}: {}", String::from_utf8_lossy(&out.stderr).trim())));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Client, bridge and server namespaces `{prefix}-c`, `-b`, `-s`: the client's `c0` and the
/// server's `s0` joined by veths to `bc` and `bs`, ports of `br0` in the bridge namespace; the
/// client is `{net}.2/24`, the server `{net}.1/24`. Removed on drop (and before it is made, if an
/// earlier run left it).
pub struct Bridge {
    /// The client's namespace.
    pub client: String,
    /// The bridge's namespace (`br0`, with ports `bc` and `bs`).
    pub bridge: String,
    /// The server's namespace.
    pub server: String,
}

impl Bridge {
    /// Make it.
    pub fn up(prefix: &str, net: &str) -> io::Result<Bridge> {
        let t = Bridge { client: format!("{prefix}-c"), bridge: format!("{prefix}-b"), server: format!("{prefix}-s") };
        t.down_quiet();
        let (c, b, s) = (&t.client, &t.bridge, &t.server);
        for ns in [c, b, s] {
            sh(&format!("ip netns add {ns} && ip -n {ns} link set lo up"))?;
        }
        sh(&format!("ip link add c0 netns {c} type veth peer name bc netns {b}"))?;
        sh(&format!("ip link add s0 netns {s} type veth peer name bs netns {b}"))?;
        sh(&format!("ip -n {b} link add br0 type bridge && ip -n {b} link set bc master br0 && ip -n {b} link set bs master br0"))?;
        for (ns, dev) in [(b, "br0"), (b, "bc"), (b, "bs"), (c, "c0"), (s, "s0")] {
            sh(&format!("ip -n {ns} link set {dev} up"))?;
        }
        sh(&format!("ip -n {c} addr add {net}.2/24 dev c0 && ip -n {s} addr add {net}.1/24 dev s0"))?;
        Ok(t)
    }

    /// GRO, GSO and TSO off on every port, as docs/deployment.md asks of the bridge's ports.
    pub fn offloads_off(&self) -> io::Result<()> {
        for (ns, dev) in [(&self.bridge, "bc"), (&self.bridge, "bs"), (&self.client, "c0"), (&self.server, "s0")] {
            sh(&format!("ip netns exec {ns} ethtool -K {dev} tso off gso off gro off"))?;
        }
        Ok(())
    }

    fn down_quiet(&self) {
        for ns in [&self.client, &self.bridge, &self.server] {
            let _ = Command::new("ip").args(["netns", "del", ns]).stderr(Stdio::null()).status();
        }
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        self.down_quiet();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sh_gives_the_output_or_names_the_failure() {
        assert_eq!(sh("echo hello").unwrap(), "hello\n");
        let e = sh("echo oops >&2; exit 3").unwrap_err().to_string();
        assert!(e.contains("echo oops >&2; exit 3") && e.contains("oops"), "{e}");
    }

    #[test]
    fn a_bridge_carries_the_clients_packets_to_the_server_and_goes_when_dropped() {
        if !is_root() {
            eprintln!("skipped: needs root");
            return;
        }
        let prefix = format!("rlmnn{}", std::process::id());
        {
            let b = Bridge::up(&prefix, "10.79.0").unwrap();
            let ping = sh(&format!("ip netns exec {} ping -c 1 -W 2 10.79.0.1", b.client)).unwrap();
            assert!(ping.contains("1 received"), "{ping}");
            let b2 = b.bridge.clone();
            let inside = std::thread::spawn(move || {
                enter(&b2).unwrap();
                std::fs::read_to_string("/proc/thread-self/net/dev").unwrap()
            })
            .join()
            .unwrap();
            assert!(inside.contains("br0"), "{inside}");
            assert!(enter("rlm-no-such-namespace").unwrap_err().to_string().contains("rlm-no-such-namespace"));
        }
        let left = sh("ip netns list").unwrap();
        assert!(!left.contains(&prefix), "{left}");
    }
}
