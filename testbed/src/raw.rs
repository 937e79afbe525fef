//! Whole Ethernet frames sent as they are out of an interface of a lab namespace (an AF_PACKET
//! socket), as a spoofer sends them: the attacks of the `attacks` experiment and the inline
//! tests' floods.

use anyhow::{bail, Context, Result};

/// An AF_PACKET socket bound to one interface of a namespace; closed on drop.
pub struct RawSender {
    fd: i32,
    sll: libc::sockaddr_ll,
}

impl RawSender {
    /// A sender out of `iface` of namespace `ns`. The calling thread enters the namespace for
    /// good: call it in a thread of its own.
    pub fn new(ns: &str, iface: &str) -> Result<RawSender> {
        crate::netns::enter(ns)?;
        // SAFETY: socket(2); the descriptor is closed on drop.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
        if fd < 0 {
            bail!("AF_PACKET socket in {ns}: {}", std::io::Error::last_os_error());
        }
        // SAFETY: sockaddr_ll is plain data; all zero is a valid value.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        let name = std::ffi::CString::new(iface)?;
        // SAFETY: a NUL-terminated name; this thread is in the namespace.
        sll.sll_ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) } as i32;
        sll.sll_halen = 6;
        let me = RawSender { fd, sll };
        if me.sll.sll_ifindex <= 0 {
            bail!("no interface {iface} in {ns}");
        }
        Ok(me)
    }

    /// Send one whole Ethernet frame; whether it went.
    pub fn send(&self, frame: &[u8]) -> bool {
        // SAFETY: valid buffers of the lengths given.
        let n = unsafe {
            libc::sendto(
                self.fd,
                frame.as_ptr() as *const _,
                frame.len(),
                0,
                &self.sll as *const _ as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        n == frame.len() as isize
    }
}

impl Drop for RawSender {
    fn drop(&mut self) {
        // SAFETY: our own descriptor, closed once.
        unsafe { libc::close(self.fd) };
    }
}

/// The link address of interface `dev` in namespace `ns`.
pub fn mac_of(ns: &str, dev: &str) -> Result<[u8; 6]> {
    let text = crate::topology::in_ns(ns, "cat", &[&format!("/sys/class/net/{dev}/address")])?;
    let v: Vec<u8> = text.trim().split(':').map(|h| u8::from_str_radix(h, 16)).collect::<Result<_, _>>().with_context(|| format!("{dev}: {text}"))?;
    v.try_into().map_err(|_| anyhow::anyhow!("{dev}: not a MAC address: {text}"))
}
