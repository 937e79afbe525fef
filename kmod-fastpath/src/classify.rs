//! The egress classifier.

use std::net::SocketAddrV4;

use anyhow::{Context, Result};
use aya::maps::{Array, HashMap, MapData, PerCpuArray};
use aya::programs::{tc, SchedClassifier, TcAttachType};
use aya::{include_bytes_aligned, Ebpf, Pod};

/// Class slots counted by the program (a classid's minor number modulo this).
pub const MAX_CLASSES: usize = 16;

static CLASSIFY: &[u8] = include_bytes_aligned!(concat!(env!("OUT_DIR"), "/classify.bpf.o"));

/// An HTB classid `major:minor`, as `skb->priority` carries it.
pub fn classid(major: u16, minor: u16) -> u32 {
    ((major as u32) << 16) | minor as u32
}

/// A flow as it leaves the interface: addresses and ports in network byte order.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowKey {
    saddr: u32,
    daddr: u32,
    sport: u16,
    dport: u16,
}

// SAFETY: plain old data with no padding (4 + 4 + 2 + 2 bytes), the C struct's layout.
unsafe impl Pod for FlowKey {}

impl FlowKey {
    pub fn new(src: SocketAddrV4, dst: SocketAddrV4) -> FlowKey {
        FlowKey {
            saddr: u32::from_ne_bytes(src.ip().octets()),
            daddr: u32::from_ne_bytes(dst.ip().octets()),
            sport: src.port().to_be(),
            dport: dst.port().to_be(),
        }
    }
}

/// Packets and bytes sent in one class slot.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassCount {
    pub packets: u64,
    pub bytes: u64,
}

// SAFETY: two u64s, no padding; the C struct's layout.
unsafe impl Pod for ClassCount {}

/// The egress classifier, loaded and attached to one interface. Detached when dropped.
pub struct EgressClassifier {
    bpf: Ebpf,
}

impl EgressClassifier {
    /// Load the program and attach it to `iface`'s egress (tcx, or clsact on older kernels).
    pub fn attach(iface: &str) -> Result<EgressClassifier> {
        let mut bpf = Ebpf::load(CLASSIFY).context("loading the egress classifier")?;
        // Needed only where tcx is not available; an existing clsact is fine.
        let _ = tc::qdisc_add_clsact(iface);
        let prog: &mut SchedClassifier = bpf.program_mut("classify").context("program 'classify' missing")?.try_into()?;
        prog.load().context("the verifier rejected 'classify'")?;
        prog.attach(iface, TcAttachType::Egress).with_context(|| format!("attaching to {iface} egress"))?;
        Ok(EgressClassifier { bpf })
    }

    fn flows(&mut self) -> Result<HashMap<&mut MapData, FlowKey, u32>> {
        Ok(HashMap::try_from(self.bpf.map_mut("flow_class").context("map flow_class")?)?)
    }

    /// Put a flow's packets into HTB class `classid`.
    pub fn set_flow_class(&mut self, flow: FlowKey, classid: u32) -> Result<()> {
        self.flows()?.insert(flow, classid, 0)?;
        Ok(())
    }

    /// Forget a flow (its packets get the default class again).
    pub fn clear_flow(&mut self, flow: FlowKey) -> Result<()> {
        let _ = self.flows()?.remove(&flow);
        Ok(())
    }

    /// The class of flows not set explicitly; 0 leaves their priority alone.
    pub fn set_default_class(&mut self, classid: u32) -> Result<()> {
        let mut cfg: Array<&mut MapData, u32> = Array::try_from(self.bpf.map_mut("config").context("map config")?)?;
        cfg.set(0, classid, 0)?;
        Ok(())
    }

    /// Packets and bytes per class slot, summed over CPUs.
    pub fn class_stats(&self) -> Result<[ClassCount; MAX_CLASSES]> {
        let stats: PerCpuArray<&MapData, ClassCount> = PerCpuArray::try_from(self.bpf.map("class_stats").context("map class_stats")?)?;
        let mut out = [ClassCount::default(); MAX_CLASSES];
        for (i, slot) in out.iter_mut().enumerate() {
            for c in stats.get(&(i as u32), 0)?.iter() {
                slot.packets += c.packets;
                slot.bytes += c.bytes;
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flow_key_is_laid_out_like_the_c_struct() {
        assert_eq!(std::mem::size_of::<FlowKey>(), 12);
        let k = FlowKey::new("10.0.0.1:80".parse().unwrap(), "10.4.0.2:40000".parse().unwrap());
        let bytes: [u8; 12] = unsafe { std::mem::transmute(k) };
        assert_eq!(bytes, [10, 0, 0, 1, 10, 4, 0, 2, 0, 80, 0x9c, 0x40]);
        assert_eq!(classid(1, 0x20), 0x0001_0020);
    }
}
