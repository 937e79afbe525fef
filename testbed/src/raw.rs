//! Whole Ethernet frames sent as they are out of an interface of a lab namespace (an AF_PACKET
//! socket), as a spoofer sends them: the attacks of the `attacks` experiment and the inline
//! tests' floods. Frames are built with etherparse ([`tcp_frame`]).

use std::net::SocketAddrV4;

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

/// The TCP flags of a frame [`tcp_frame`] builds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flags {
    pub syn: bool,
    pub ack: bool,
    pub rst: bool,
    pub fin: bool,
    pub psh: bool,
}

impl Flags {
    pub const SYN: Flags = Flags { syn: true, ack: false, rst: false, fin: false, psh: false };
    pub const ACK: Flags = Flags { syn: false, ack: true, rst: false, fin: false, psh: false };
    pub const RST: Flags = Flags { syn: false, ack: false, rst: true, fin: false, psh: false };
    pub const RST_ACK: Flags = Flags { syn: false, ack: true, rst: true, fin: false, psh: false };
    pub const FIN_ACK: Flags = Flags { syn: false, ack: true, rst: false, fin: true, psh: false };
    pub const PSH_ACK: Flags = Flags { syn: false, ack: true, rst: false, fin: false, psh: true };
}

/// An Ethernet II / IPv4 / TCP frame with good checksums: `src` to `dst` at these link
/// addresses, sequence number `seq`, acknowledgement `ack` (sent only with the ACK flag), a
/// 64 KiB window, `payload`.
pub fn tcp_frame(macs: ([u8; 6], [u8; 6]), src: SocketAddrV4, dst: SocketAddrV4, seq: u32, ack: u32, flags: Flags, payload: &[u8]) -> Vec<u8> {
    let mut b =
        etherparse::PacketBuilder::ethernet2(macs.0, macs.1).ipv4(src.ip().octets(), dst.ip().octets(), 64).tcp(src.port(), dst.port(), seq, 65_535);
    if flags.syn {
        b = b.syn();
    }
    if flags.ack {
        b = b.ack(ack);
    }
    if flags.rst {
        b = b.rst();
    }
    if flags.fin {
        b = b.fin();
    }
    if flags.psh {
        b = b.psh();
    }
    let mut out = Vec::with_capacity(b.size(payload.len()));
    b.write(&mut out, payload).expect("a Vec takes any frame");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_parse_back_with_their_fields_and_checksums() {
        let (a, b) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
        let (src, dst) = ("10.4.0.7:40000".parse().unwrap(), "10.9.0.1:80".parse().unwrap());
        let f = tcp_frame((a, b), src, dst, 7, 99, Flags::RST_ACK, b"");
        let p = etherparse::SlicedPacket::from_ethernet(&f).unwrap();
        let Some(etherparse::LinkSlice::Ethernet2(eth)) = &p.link else { panic!("not Ethernet II") };
        assert_eq!((eth.source(), eth.destination()), (a, b));
        let Some(etherparse::NetSlice::Ipv4(ip)) = &p.net else { panic!("not IPv4") };
        assert_eq!((ip.header().source(), ip.header().destination()), ([10, 4, 0, 7], [10, 9, 0, 1]));
        let Some(etherparse::TransportSlice::Tcp(tcp)) = &p.transport else { panic!("not TCP") };
        assert_eq!((tcp.source_port(), tcp.destination_port(), tcp.sequence_number(), tcp.acknowledgment_number()), (40000, 80, 7, 99));
        assert!(tcp.rst() && tcp.ack() && !tcp.syn() && !tcp.fin());
        let sum = tcp.to_header().calc_checksum_ipv4(&ip.header().to_header(), tcp.payload()).unwrap();
        assert_eq!(sum, tcp.checksum());
        // Without ACK the acknowledgement is not sent.
        let f = tcp_frame((a, b), src, dst, 7, 99, Flags::SYN, b"");
        let Some(etherparse::TransportSlice::Tcp(tcp)) = etherparse::SlicedPacket::from_ethernet(&f).unwrap().transport else { panic!() };
        assert!(tcp.syn() && !tcp.ack());
        assert_eq!(tcp.acknowledgment_number(), 0);
    }
}
