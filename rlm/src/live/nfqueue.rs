//! The NFQUEUE side of `rlm run`: queues bound with a large backlog, fail-open when full, and
//! the netlink socket's descriptor so that the event loop can wait on it.
//!
//! The nfq crate (pure Rust) does the netlink work but does not expose its socket; the
//! descriptor is found the way `ss` would find it: the netlink socket of protocol
//! NETLINK_NETFILTER (12) that this process holds, by inode, from /proc/net/netlink and
//! /proc/self/fd.

use std::collections::HashSet;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use anyhow::{bail, Context, Result};

const NETLINK_NETFILTER: u32 = 12;

/// Inodes of this process's netfilter netlink sockets.
fn netfilter_socket_inodes() -> Result<HashSet<u64>> {
    let text = std::fs::read_to_string("/proc/net/netlink").context("reading /proc/net/netlink")?;
    let mut out = HashSet::new();
    // sk Eth Pid Groups Rmem Wmem Dump Locks Drops Inode
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 10 {
            continue;
        }
        let (Ok(eth), Ok(inode)) = (f[1].parse::<u32>(), f[9].parse::<u64>()) else { continue };
        if eth == NETLINK_NETFILTER {
            out.insert(inode);
        }
    }
    Ok(out)
}

/// This process's descriptors whose socket has one of these inodes.
fn fds_of_inodes(inodes: &HashSet<u64>) -> Result<Vec<RawFd>> {
    let mut fds = Vec::new();
    for e in std::fs::read_dir("/proc/self/fd")? {
        let e = e?;
        let Ok(target) = std::fs::read_link(e.path()) else { continue };
        let t = target.to_string_lossy();
        let Some(inode) = t.strip_prefix("socket:[").and_then(|s| s.strip_suffix(']')).and_then(|s| s.parse::<u64>().ok()) else {
            continue;
        };
        if inodes.contains(&inode) {
            if let Ok(fd) = e.file_name().to_string_lossy().parse::<RawFd>() {
                fds.push(fd);
            }
        }
    }
    Ok(fds)
}

/// An NFQUEUE handle bound to its queues, nonblocking, with the descriptor to wait on.
pub struct Nfq {
    pub queue: nfq::Queue,
    pub fd: RawFd,
    pub queues: Vec<u16>,
    /// Held open only so that the kernel stamps received packets (see [`receive_timestamps`]).
    _stamps: Option<OwnedFd>,
}

/// A socket that asks for receive timestamps: while one exists, the kernel stamps every packet
/// it receives with the wall clock (`net_enable_timestamp`), and NFQUEUE hands that stamp over
/// with the packet, so a queued SYN's time is when it arrived, not when rlm read it. Without
/// one, packets crossing the bridge carry no stamp. `None` (and the read time is used) if the
/// socket cannot be made.
fn receive_timestamps() -> Option<OwnedFd> {
    // SAFETY: socket(2) with constant arguments; the descriptor is owned at once.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` was just returned by socket(2) and nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let on: libc::c_int = 1;
    // SAFETY: a valid descriptor, and a c_int option of its size.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            &on as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    (r == 0).then_some(fd)
}

/// The queues from `base`, `count` of them (at least one), up to the kernel's last, 65535;
/// counted in u32 so that base 65535 and one queue does not wrap the end to 0 (no queue).
fn queue_numbers(base: u16, count: u16) -> Vec<u16> {
    (u32::from(base)..u32::from(base) + u32::from(count.max(1))).filter_map(|q| u16::try_from(q).ok()).collect()
}

/// Open the queues `base..base+count`: copy whole packets (SYNs are small), backlog `max_len`
/// packets, and accept rather than drop when the backlog is full (fail-open).
pub fn open(base: u16, count: u16, max_len: u32) -> Result<Nfq> {
    let before: HashSet<RawFd> = fds_of_inodes(&netfilter_socket_inodes()?)?.into_iter().collect();
    let mut queue = nfq::Queue::open().context("opening an NFQUEUE socket (needs CAP_NET_ADMIN)")?;
    let after = fds_of_inodes(&netfilter_socket_inodes()?)?;
    let new: Vec<RawFd> = after.into_iter().filter(|fd| !before.contains(fd)).collect();
    let [fd] = new[..] else { bail!("cannot find the NFQUEUE socket's descriptor ({} candidates)", new.len()) };
    let queues = queue_numbers(base, count);
    for &q in &queues {
        queue.bind(q).with_context(|| format!("binding NFQUEUE {q} (is another program bound to it?)"))?;
        queue.set_queue_max_len(q, max_len).with_context(|| format!("setting NFQUEUE {q}'s length"))?;
        queue.set_fail_open(q, true).with_context(|| format!("setting NFQUEUE {q} fail-open"))?;
        queue.set_copy_range(q, 0xffff)?;
    }
    queue.set_nonblocking(true);
    Ok(Nfq { queue, fd, queues, _stamps: receive_timestamps() })
}

impl Drop for Nfq {
    fn drop(&mut self) {
        for &q in &self.queues {
            let _ = self.queue.unbind(q);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn queue_numbers_reach_the_last_queue() {
        assert_eq!(super::queue_numbers(0, 0), [0]);
        assert_eq!(super::queue_numbers(10, 3), [10, 11, 12]);
        assert_eq!(super::queue_numbers(65_535, 1), [65_535]);
        assert_eq!(super::queue_numbers(65_534, 2), [65_534, 65_535]);
    }
}
