//! The measurement tap: libpcap on the bridge's server port, so that the engine sees every
//! packet of the farm's connections (both directions cross that port) without holding any of
//! them. The clients' SYNs (and SYN/ACKs, when those are queued too) are left out here: they
//! reach the engine through NFQUEUE, before they are forwarded, and must not be counted twice.

use std::os::fd::{AsRawFd, RawFd};

use anyhow::{Context, Result};

pub struct Tap {
    pub cap: pcap::Capture<pcap::Active>,
}

/// The tap's kernel filter: TCP to or from the servers' ports only (other traffic crossing the
/// bridge is never copied), without the SYNs NFQUEUE delivers: IPv4 ones are filtered here; IPv6
/// has no flag offsets in BPF, so the driver skips IPv6 SYNs itself ([`is_queued_syn`]). UDP
/// on the same ports (QUIC's; with none configured, [`rlm_core::quic::QUIC_PORT`]) is taken too,
/// for the engine to count.
pub fn filter(server_ports: &[u16], synacks_queued: bool) -> String {
    let list = |ports: &[u16]| ports.iter().map(|p| format!("port {p}")).collect::<Vec<_>>().join(" or ");
    let (ports, udp) = if server_ports.is_empty() {
        (String::new(), list(&[rlm_core::quic::QUIC_PORT]))
    } else {
        (format!(" and ({})", list(server_ports)), list(server_ports))
    };
    let syn = if synacks_queued { "tcp[tcpflags] & tcp-syn == 0" } else { "tcp[tcpflags] & (tcp-syn|tcp-ack) != tcp-syn" };
    format!("(ip and tcp{ports} and {syn}) or (ip6 and tcp{ports}) or (udp and ({udp}))")
}

/// Open the tap. It is read in batches: the kernel hands over a block of packets when it fills
/// or after 5 ms, so that a busy link costs one wakeup per block, not one per packet (the SYNs
/// that need a verdict come through NFQUEUE and do not wait on this).
pub fn open(port: &str, snaplen: u32, server_ports: &[u16], synacks_queued: bool) -> Result<Tap> {
    let cap = pcap::Capture::from_device(port)
        .with_context(|| format!("no such interface {port}"))?
        .snaplen(snaplen as i32)
        .timeout(5)
        .buffer_size(32 << 20)
        .promisc(false)
        .open()
        .with_context(|| format!("cannot capture on {port} (needs CAP_NET_RAW)"))?;
    let mut cap = cap.setnonblock().context("nonblocking capture")?;
    cap.filter(&filter(server_ports, synacks_queued), true).context("installing the tap's BPF filter")?;
    Ok(Tap { cap })
}

impl Tap {
    pub fn fd(&self) -> RawFd {
        self.cap.as_raw_fd()
    }

    /// Packets the kernel dropped before the tap read them.
    pub fn kernel_drops(&mut self) -> u64 {
        self.cap.stats().map(|s| u64::from(s.dropped) + u64::from(s.if_dropped)).unwrap_or(0)
    }
}

/// Whether an Ethernet frame carries a SYN that NFQUEUE delivers too (IPv6 ones get past the
/// kernel filter): a client's SYN, or any SYN/ACK when those are queued as well.
pub fn is_queued_syn(frame: &[u8], synacks_queued: bool) -> bool {
    match rlm_core::wire::decode(rlm_core::wire::LinkType::Ethernet, frame) {
        rlm_core::wire::Decoded::Tcp(s) => s.flags.syn && (!s.flags.ack || synacks_queued),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_filter_names_the_server_ports_and_leaves_out_queued_syns() {
        assert_eq!(
            super::filter(&[80, 8080], false),
            "(ip and tcp and (port 80 or port 8080) and tcp[tcpflags] & (tcp-syn|tcp-ack) != tcp-syn) or (ip6 and tcp and (port 80 or port 8080)) \
             or (udp and (port 80 or port 8080))"
        );
        assert_eq!(super::filter(&[], true), "(ip and tcp and tcp[tcpflags] & tcp-syn == 0) or (ip6 and tcp) or (udp and (port 443))");
    }
}
