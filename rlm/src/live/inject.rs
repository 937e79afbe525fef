//! Sending the engine's frames ([`rlm_core::engine::Transmit`]) out of a bridge port.
//!
//! An AF_PACKET socket bound to each port sends a whole Ethernet frame straight out of that
//! port's device: it does not cross the bridge, br_netfilter, NFQUEUE or conntrack on this box,
//! and the bridge does not learn its source address (so a SYN sent toward the servers in a
//! client's name cannot teach the bridge that the client sits on the servers' side). The
//! sockets are opened before rlm drops its capabilities (CAP_NET_RAW); sending needs none.
//! They are opened with protocol 0, so they receive nothing.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use anyhow::{bail, Result};

use rlm_core::engine::{Port, Transmit};

/// One port's socket.
struct PortSocket {
    fd: OwnedFd,
    ifindex: i32,
}

impl PortSocket {
    fn open(ifindex: u32) -> Result<PortSocket> {
        // SAFETY: plain socket(2); the descriptor is owned at once.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK, 0) };
        if fd < 0 {
            bail!("AF_PACKET socket: {}", std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let ifindex = i32::try_from(ifindex)?;
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_ifindex = ifindex;
        // Protocol 0: bound to the device for sending, receiving nothing.
        // SAFETY: `sll` is a valid sockaddr_ll of the size given.
        let r = unsafe { libc::bind(fd.as_raw_fd(), &sll as *const _ as *const libc::sockaddr, std::mem::size_of::<libc::sockaddr_ll>() as u32) };
        if r < 0 {
            bail!("binding an AF_PACKET socket to ifindex {ifindex}: {}", std::io::Error::last_os_error());
        }
        Ok(PortSocket { fd, ifindex })
    }

    fn send(&self, frame: &[u8]) -> std::io::Result<()> {
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_ifindex = self.ifindex;
        sll.sll_halen = 6;
        sll.sll_addr[..6].copy_from_slice(&frame[..6]);
        // The frame's EtherType, in network order as the kernel wants it.
        sll.sll_protocol = u16::from_ne_bytes([frame[12], frame[13]]);
        // SAFETY: `frame` and `sll` are valid for the lengths given.
        let n = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                frame.as_ptr() as *const libc::c_void,
                frame.len(),
                0,
                &sll as *const _ as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Counters of the injector.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct InjectorCounters {
    /// Frames rlm made and sent (FAST SYN, FAST SYN/ACK, DELAY FIRST SYN, REJECT's answers).
    pub sent: u64,
    /// Frames the kernel refused (a full device queue, a port gone); each is lost, not retried.
    pub failed: u64,
    /// SYNs the kernel held for rlm and rlm sent on ([`Injector::forward`]).
    pub forwarded: u64,
    /// Held SYNs the kernel refused to send on: lost (the client sends them again).
    pub forward_failed: u64,
}

/// The sockets on the client and server ports.
pub struct Injector {
    client: PortSocket,
    server: PortSocket,
    pub counters: InjectorCounters,
    last_error: Option<String>,
}

impl Injector {
    pub fn open(client_ifindex: u32, server_ifindex: u32) -> Result<Injector> {
        Ok(Injector {
            client: PortSocket::open(client_ifindex)?,
            server: PortSocket::open(server_ifindex)?,
            counters: Default::default(),
            last_error: None,
        })
    }

    /// Send one frame the engine made out of its port; a failure is counted (and logged once
    /// per kind).
    pub fn send(&mut self, t: &Transmit) {
        match self.send_out(t) {
            true => self.counters.sent += 1,
            false => self.counters.failed += 1,
        }
    }

    /// Send on a frame the kernel held for rlm (a SYN), counted apart from the frames rlm makes.
    pub fn forward(&mut self, t: &Transmit) {
        match self.send_out(t) {
            true => self.counters.forwarded += 1,
            false => self.counters.forward_failed += 1,
        }
    }

    /// Whether the frame went out of its port.
    fn send_out(&mut self, t: &Transmit) -> bool {
        let sock = match t.port {
            Port::Client => &self.client,
            Port::Server => &self.server,
            Port::Unknown => return false,
        };
        if t.frame.len() < 14 {
            return false;
        }
        match sock.send(&t.frame) {
            Ok(()) => true,
            Err(e) => {
                let msg = e.to_string();
                if self.last_error.as_deref() != Some(msg.as_str()) {
                    tracing::warn!("sending a frame out of the {:?} port failed: {msg}", t.port);
                    self.last_error = Some(msg);
                }
                false
            }
        }
    }
}
