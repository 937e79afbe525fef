//! The SRPT egress classifier (`bpf/classify.bpf.c`): on the client port's egress, every packet
//! a server sends gets a priority band by its response's remaining bytes, as an HTB classid in
//! `skb->priority` (band 0 for control, bands 1..=n+1 for data at n cutoffs); FAIR mode gives
//! every packet one class. The engine publishes each response's start and end in sequence space
//! ([`SrptEgress::set_response`]); the program counts down from there, or ranks by bytes sent
//! when no end is known. Per-flow bytes, packets, retransmitted bytes and last-packet time stay
//! in the kernel ([`SrptEgress::flow`]).

use std::path::Path;

use anyhow::{bail, Context, Result};
use aya::maps::{Array, HashMap, Map, MapData, PerCpuArray};
use aya::programs::{SchedClassifier, TcAttachType};
use aya::{include_bytes_aligned, Ebpf, Pod};

use crate::records::{srpt_counter as c, RespValue, SrptCfg, SRPT_MODE_FAIR, SRPT_MODE_OFF, SRPT_MODE_SRPT};
use crate::testrun::{self, TestRun};
use crate::{AttachMode, Heartbeat};

pub use crate::records::{ClassCount, FlowKey, FlowState, MAX_CLASSES, MAX_CUTOFFS};
/// 002's cutoffs, in response bytes (head included): 1K, 2K, 5K, 20K, 50K.
pub const DEFAULT_CUTOFFS: [u32; 5] = [1024, 2048, 5120, 20480, 51200];

static CLASSIFY: &[u8] = include_bytes_aligned!(concat!(env!("OUT_DIR"), "/classify.bpf.o"));

/// An HTB classid `major:minor`, as `skb->priority` carries it.
pub fn classid(major: u16, minor: u16) -> u32 {
    ((major as u32) << 16) | minor as u32
}

/// What the program does with the priority.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum SrptMode {
    /// Leave `skb->priority` alone (the accounting goes on).
    Off = SRPT_MODE_OFF,
    /// Every packet to `base` (one class: the baseline).
    Fair = SRPT_MODE_FAIR,
    /// `base + band`.
    Srpt = SRPT_MODE_SRPT,
}

/// The classifier's parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SrptParams {
    pub mode: SrptMode,
    /// Band 0's classid; band b is `base + b`.
    pub base: u32,
    /// Strictly increasing, at most [`MAX_CUTOFFS`].
    pub cutoffs: Vec<u32>,
    /// The band of TCP not from a server port, and of IPv6 (the lowest data band by default).
    pub other_band: u32,
    /// Put resends of the lowest data band's bytes in a band of their own below it (band
    /// `cutoffs + 2`); see `bpf/classify.bpf.c`.
    pub resend_band: bool,
}

impl SrptParams {
    /// `mode` with 002's cutoffs, other traffic in the lowest band.
    pub fn new(mode: SrptMode, base: u32) -> SrptParams {
        let cutoffs = DEFAULT_CUTOFFS.to_vec();
        let other_band = cutoffs.len() as u32 + 1;
        SrptParams { mode, base, cutoffs, other_band, resend_band: true }
    }

    /// Bands in all: control, one more than the cutoffs, and the resend band if on.
    pub fn bands(&self) -> u32 {
        self.cutoffs.len() as u32 + 2 + u32::from(self.resend_band)
    }

    pub fn validate(&self) -> Result<()> {
        if self.cutoffs.is_empty() || self.cutoffs.len() > MAX_CUTOFFS {
            bail!("SRPT takes 1 to {MAX_CUTOFFS} cutoffs, not {}", self.cutoffs.len());
        }
        if self.cutoffs.windows(2).any(|w| w[0] >= w[1]) || self.cutoffs[self.cutoffs.len() - 1] >= 1 << 31 {
            bail!("SRPT cutoffs must increase strictly and stay under 2^31 bytes: {:?}", self.cutoffs);
        }
        if self.other_band >= self.bands() {
            bail!("other_band {} is not one of the {} bands", self.other_band, self.bands());
        }
        if self.bands() > 8 {
            bail!("{} bands: HTB has 8 priorities (at most 5 cutoffs with the resend band, 6 without)", self.bands());
        }
        Ok(())
    }
}

/// The program's counters, summed over CPUs (packets unless said).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SrptCounters {
    /// Data packets ranked by their response's remaining bytes.
    pub known: u64,
    /// Data packets ranked by bytes sent (no end known).
    pub attained: u64,
    /// Data packets wholly sent before.
    pub retx: u64,
    /// Publications taken into a flow.
    pub adopted: u64,
    /// Flows rolled over to their next response at an end.
    pub rolled: u64,
    /// Flows first seen after their handshake.
    pub midflow: u64,
    /// Packets put in band 0 because the engine's heartbeat was stale.
    pub stale: u64,
    /// New segments kept in their flow's band rather than overtake its segments still queued.
    pub held: u64,
}

/// The classifier's per-flow maps, which [`SrptEgress::keep_state`] pins.
const KEPT_MAPS: [&str; 2] = ["resp_size", "flow_state"];

/// What [`SrptEgress::keep_state`] took over from pinned maps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeptState {
    pub responses: usize,
    pub flows: usize,
}

/// Whether `path` is on a BPF filesystem (where maps can be pinned).
pub fn is_bpffs(path: &Path) -> bool {
    const BPF_FS_MAGIC: i64 = 0xcafe_4a11;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else { return false };
    // SAFETY: statfs writes into the zeroed struct it is given; the path is NUL-terminated.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    unsafe { libc::statfs(c.as_ptr(), &mut st) == 0 && st.f_type as i64 == BPF_FS_MAGIC }
}

/// The SRPT classifier, loaded (and attached to one interface's egress, or not: tests run it
/// with [`SrptEgress::test_run`]). Detached when dropped.
pub struct SrptEgress {
    bpf: Ebpf,
    heartbeat: Heartbeat,
    /// The per-flow maps, as one engine writes them ([`SrptEgress::set_response`]).
    flows: SrptDoor,
}

impl SrptEgress {
    /// Load the program through the verifier, with `params` and the servers' ports. It ranks
    /// nothing (band 0 for every packet) until [`SrptEgress::beat`] is called, and again when
    /// the beats stop for [`crate::HEARTBEAT_STALE`].
    pub fn load(server_ports: &[u16], params: &SrptParams) -> Result<SrptEgress> {
        let mut bpf = crate::load_object(CLASSIFY, "the SRPT classifier", server_ports, &crate::CLASSIFY_PROGRAMS, &[])?;
        let heartbeat = Heartbeat::watch(&mut bpf, Some(crate::HEARTBEAT_STALE))?;
        let flows = SrptDoor::open(&bpf)?;
        let mut e = SrptEgress { bpf, heartbeat, flows };
        e.set_params(params)?;
        Ok(e)
    }

    /// The engine is alive: the classifier ranks for [`crate::HEARTBEAT_STALE`] from now.
    pub fn beat(&mut self) -> Result<()> {
        self.heartbeat.beat(&mut self.bpf)
    }

    /// How long after the last beat the classifier stops ranking (`None`: it ranks whatever
    /// the time; tests that drive it without a loop).
    pub fn watch_heartbeat(&mut self, stale: Option<std::time::Duration>) -> Result<()> {
        self.heartbeat = Heartbeat::watch(&mut self.bpf, stale)?;
        Ok(())
    }

    /// Load, and attach to `iface`'s egress (tcx, or clsact on older kernels).
    pub fn attach(iface: &str, server_ports: &[u16], params: &SrptParams) -> Result<SrptEgress> {
        let mut e = SrptEgress::load(server_ports, params)?;
        e.attach_to(iface, AttachMode::Auto)?;
        Ok(e)
    }

    /// Keep the per-flow state in `dir` (a BPF filesystem) across restarts: take over the flows
    /// an earlier classifier left pinned there (a crash, or an exit that kept them), then pin
    /// this one's maps in their place. Call before [`SrptEgress::attach_to`]. Pins of another
    /// layout (another version of rlm) are replaced, their flows not taken. Returns the flows
    /// taken over (responses and flow states).
    pub fn keep_state(&mut self, dir: &Path) -> Result<KeptState> {
        let mount = dir.ancestors().find(|p| p.exists()).unwrap_or(dir);
        if !is_bpffs(mount) {
            bail!("{} is not on a BPF filesystem (mount -t bpf bpf {})", dir.display(), mount.display());
        }
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(KeptState { responses: self.carry::<RespValue>("resp_size", dir)?, flows: self.carry::<FlowState>("flow_state", dir)? })
    }

    /// Remove the pins [`SrptEgress::keep_state`] made in `dir` (a clean exit leaves nothing).
    pub fn forget_state(dir: &Path) -> Result<()> {
        for name in KEPT_MAPS {
            match std::fs::remove_file(dir.join(name)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e).with_context(|| format!("unpinning {name}")),
                _ => {}
            }
        }
        let _ = std::fs::remove_dir(dir);
        Ok(())
    }

    fn carry<V: Pod>(&mut self, name: &str, dir: &Path) -> Result<usize> {
        let path = dir.join(name);
        let mut taken = 0;
        if path.exists() {
            if let Ok(old) = MapData::from_pin(&path) {
                let same = old
                    .info()
                    .is_ok_and(|i| i.key_size() as usize == std::mem::size_of::<FlowKey>() && i.value_size() as usize == std::mem::size_of::<V>());
                // Another layout, or not an LRU hash at all: dropped unread.
                let old: Option<HashMap<MapData, FlowKey, V>> = if same { HashMap::try_from(Map::LruHashMap(old)).ok() } else { None };
                if let Some(old) = old {
                    let mut new: HashMap<&mut MapData, FlowKey, V> =
                        HashMap::try_from(self.bpf.map_mut(name).with_context(|| format!("map {name}"))?)?;
                    for (k, v) in old.iter().flatten() {
                        if new.insert(k, v, 0).is_ok() {
                            taken += 1;
                        }
                    }
                }
            }
            std::fs::remove_file(&path).with_context(|| format!("replacing {}", path.display()))?;
        }
        self.bpf.map(name).with_context(|| format!("map {name}"))?.pin(&path).with_context(|| format!("pinning {}", path.display()))?;
        Ok(taken)
    }

    /// Attach the loaded classifier to `iface`, as `mode` says: egress, and the clients' ACKs on
    /// its ingress.
    pub fn attach_to(&mut self, iface: &str, mode: AttachMode) -> Result<()> {
        let prog: &mut SchedClassifier = self.bpf.program_mut("classify").context("program 'classify' missing")?.try_into()?;
        crate::attach_program(prog, iface, TcAttachType::Egress, mode, false)
            .with_context(|| format!("attaching the SRPT classifier to {iface} egress"))?;
        // The clients' ACKs, ahead of any other program on the ingress (it passes every packet
        // on to them).
        let acks: &mut SchedClassifier = self.bpf.program_mut("srpt_acks").context("program 'srpt_acks' missing")?.try_into()?;
        crate::attach_program(acks, iface, TcAttachType::Ingress, mode, true).with_context(|| format!("attaching srpt_acks to {iface} ingress"))?;
        Ok(())
    }

    pub fn set_params(&mut self, params: &SrptParams) -> Result<()> {
        params.validate()?;
        let mut cut = [0u32; MAX_CUTOFFS];
        cut[..params.cutoffs.len()].copy_from_slice(&params.cutoffs);
        let resend_band = if params.resend_band { params.cutoffs.len() as u32 + 2 } else { 0 };
        let cfg = SrptCfg {
            mode: params.mode as u32,
            base: params.base,
            cutoffs: params.cutoffs.len() as u32,
            other_band: params.other_band,
            cut,
            resend_band,
            pad: 0,
        };
        let mut m: Array<&mut MapData, SrptCfg> = Array::try_from(self.bpf.map_mut("srpt_config").context("map srpt_config")?)?;
        m.set(0, cfg, 0)?;
        Ok(())
    }

    /// The flow's current response starts at sequence number `start` and ends before `end`
    /// (`None`: its length is not known, and it is ranked by the bytes sent).
    pub fn set_response(&mut self, flow: FlowKey, start: u32, end: Option<u32>) -> Result<()> {
        self.flows.set_response(flow, start, end)
    }

    /// Forget a flow (its connection closed).
    pub fn end_flow(&mut self, flow: FlowKey) -> Result<()> {
        self.flows.end_flow(flow)
    }

    /// A door to the per-flow maps for an engine on a thread of its own (its own descriptors):
    /// what [`SrptEgress::set_response`] and [`SrptEgress::end_flow`] write, for its flows.
    pub fn door(&self) -> Result<SrptDoor> {
        SrptDoor::open(&self.bpf)
    }

    /// The kernel's state of a flow.
    pub fn flow(&self, flow: FlowKey) -> Result<Option<FlowState>> {
        let m: HashMap<&MapData, FlowKey, FlowState> = HashMap::try_from(self.bpf.map("flow_state").context("map flow_state")?)?;
        match m.get(&flow, 0) {
            Ok(v) => Ok(Some(v)),
            Err(aya::maps::MapError::KeyNotFound) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Packets and bytes per band, summed over CPUs.
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

    pub fn counters(&self) -> Result<SrptCounters> {
        let m: PerCpuArray<&MapData, u64> = PerCpuArray::try_from(self.bpf.map("srpt_counters").context("map srpt_counters")?)?;
        let sum = |i: u32| -> Result<u64> { Ok(m.get(&i, 0)?.iter().sum()) };
        Ok(SrptCounters {
            known: sum(c::KNOWN)?,
            attained: sum(c::ATTAINED)?,
            retx: sum(c::RETX)?,
            adopted: sum(c::ADOPTED)?,
            rolled: sum(c::ROLLED)?,
            midflow: sum(c::MIDFLOW)?,
            held: sum(c::HELD)?,
            stale: sum(c::STALE)?,
        })
    }

    /// Run the program on `frame` `repeat` times in the kernel, as if it left the port.
    pub fn test_run(&self, frame: &[u8], repeat: u32) -> Result<TestRun> {
        testrun::run_program(&self.bpf, "classify", frame, repeat, testrun::Arrival::Leaving)
    }

    /// Run `srpt_acks` on `frame` (a client's segment) in the kernel, as if it came in.
    pub fn test_run_ack(&self, frame: &[u8]) -> Result<TestRun> {
        testrun::run_program(&self.bpf, "srpt_acks", frame, 1, testrun::Arrival::CameIn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classids() {
        assert_eq!(classid(1, 0x20), 0x0001_0020);
    }

    #[test]
    fn params_are_validated() {
        let p = SrptParams::new(SrptMode::Srpt, classid(0x7e1, 0x10));
        assert_eq!((p.bands(), p.other_band), (8, 6));
        p.validate().unwrap();
        let bad = |f: &dyn Fn(&mut SrptParams)| {
            let mut q = p.clone();
            f(&mut q);
            q.validate().is_err()
        };
        assert!(bad(&|q| q.cutoffs.clear()));
        assert!(bad(&|q| q.cutoffs = vec![1, 2, 3, 4, 5, 6, 7]));
        assert!(bad(&|q| q.cutoffs = vec![2048, 1024]));
        assert!(bad(&|q| q.cutoffs = vec![1 << 31]));
        assert!(bad(&|q| q.other_band = 8));
        assert!(bad(&|q| q.cutoffs = vec![1, 2, 3, 4, 5, 6]), "6 cutoffs and the resend band: 9 bands");
        assert!(!bad(&|q| {
            q.cutoffs = vec![1, 2, 3, 4, 5, 6];
            q.resend_band = false;
        }));
    }
}

/// One engine's door to the classifier's per-flow maps ([`SrptEgress::door`]).
pub struct SrptDoor {
    resp_size: HashMap<MapData, FlowKey, RespValue>,
    flow_state: HashMap<MapData, FlowKey, FlowState>,
}

impl SrptDoor {
    fn open(bpf: &Ebpf) -> Result<SrptDoor> {
        Ok(SrptDoor {
            resp_size: HashMap::try_from(crate::own_map(bpf, "resp_size")?)?,
            flow_state: HashMap::try_from(crate::own_map(bpf, "flow_state")?)?,
        })
    }

    /// The response under way of `flow` starts at sequence number `start` and ends before
    /// `end` (None: not known; ranked by the bytes sent).
    pub fn set_response(&mut self, flow: FlowKey, start: u32, end: Option<u32>) -> Result<()> {
        let v = RespValue { start, end: end.unwrap_or(0), has_end: u32::from(end.is_some()), pad: 0 };
        self.resp_size.insert(flow, v, 0)?;
        Ok(())
    }

    /// Forget a flow (its connection closed).
    pub fn end_flow(&mut self, flow: FlowKey) -> Result<()> {
        let _ = self.resp_size.remove(&flow);
        let _ = self.flow_state.remove(&flow);
        Ok(())
    }
}
