//! The inline fast path of a running `rlm run`, found in the kernel from outside its process:
//! the engines benchmark (`testbed/benches/engines.rs`) runs its programs on frames
//! (`BPF_PROG_TEST_RUN`) to fill its rings while rlm is stopped, beats its heartbeat meanwhile
//! (so that the programs go on acting), and watches how much each ring still holds while rlm
//! drains it.

use std::os::fd::{AsFd, AsRawFd};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use aya::maps::{Array, MapData};
use aya::programs::{loaded_programs, ProgramFd};

use crate::records::HeartbeatValue;
use crate::testrun::{self, Arrival, TestRun};

/// A ring's positions, mapped read-only: the consumer's (the reader's) and the producer's.
pub(crate) struct RingPositions {
    consumer: *const u64,
    producer: *const u64,
    page: usize,
    /// Keeps the map open while its pages are mapped.
    _map: MapData,
}

impl RingPositions {
    pub(crate) fn map(map: MapData) -> Result<RingPositions> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let fd = map.fd().as_fd().as_raw_fd();
        let at = |offset: usize| -> Result<*const u64> {
            // SAFETY: a shared read-only mapping of one page of a ring buffer map's descriptor
            // (page 0: the consumer position, page 1: the producer position), unmapped in Drop.
            let p = unsafe { libc::mmap(std::ptr::null_mut(), page, libc::PROT_READ, libc::MAP_SHARED, fd, offset as libc::off_t) };
            if p == libc::MAP_FAILED {
                bail!("mmap of a ring's positions: {}", std::io::Error::last_os_error());
            }
            Ok(p as *const u64)
        };
        let consumer = at(0)?;
        let producer = at(page)?;
        Ok(RingPositions { consumer, producer, page, _map: map })
    }

    /// Bytes written and not yet taken by the reader.
    pub(crate) fn waiting(&self) -> u64 {
        // SAFETY: both point to mapped pages holding the kernel's u64 positions (read volatile:
        // another process and the kernel move them).
        let (c, p) = unsafe { (std::ptr::read_volatile(self.consumer), std::ptr::read_volatile(self.producer)) };
        p.saturating_sub(c)
    }
}

// SAFETY: the two pointers are to read-only shared pages that live as long as the value (unmapped
// in Drop only), read with volatile loads; no thread writes through them.
unsafe impl Send for RingPositions {}
// SAFETY: as above: reads only.
unsafe impl Sync for RingPositions {}

impl Drop for RingPositions {
    fn drop(&mut self) {
        // SAFETY: the two pages mapped in `map`, of `page` bytes each.
        unsafe {
            libc::munmap(self.consumer as *mut libc::c_void, self.page);
            libc::munmap(self.producer as *mut libc::c_void, self.page);
        }
    }
}

/// The newest `rlm run`'s fast path in the kernel.
pub struct Running {
    syn_admit: ProgramFd,
    observe: ProgramFd,
    heartbeat: Array<MapData, HeartbeatValue>,
    rings: Vec<RingPositions>,
}

impl Running {
    /// The most recently loaded `syn_admit` and `observe` programs (the newest rlm's), the
    /// heartbeat they read and the rings in use (`events0` on, those larger than a page, in
    /// shard order).
    pub fn find() -> Result<Running> {
        let newest = |name: &str| -> Result<aya::programs::ProgramInfo> {
            loaded_programs()
                .filter_map(|p| p.ok())
                .filter(|p| p.name_as_str() == Some(name))
                .max_by_key(|p| p.id())
                .with_context(|| format!("no program {name} loaded: is rlm run up?"))
        };
        let (syn, obs) = (newest("syn_admit")?, newest("observe")?);
        let mut heartbeat = None;
        let mut rings: Vec<(usize, MapData)> = Vec::new();
        for id in obs.map_ids()?.unwrap_or_default() {
            let info = aya::maps::MapInfo::from_id(id)?;
            let name = info.name_as_str().unwrap_or("").to_string();
            if name == "heartbeat" {
                heartbeat = Some(Array::try_from(aya::maps::Map::Array(MapData::from_id(id)?))?);
            } else if let Some(i) = name.strip_prefix("events").and_then(|n| n.parse::<usize>().ok()) {
                if info.max_entries() > 4096 {
                    rings.push((i, MapData::from_id(id)?));
                }
            }
        }
        rings.sort_by_key(|(i, _)| *i);
        Ok(Running {
            syn_admit: syn.fd()?,
            observe: obs.fd()?,
            heartbeat: heartbeat.context("the observe program has no heartbeat map")?,
            rings: rings.into_iter().map(|(_, m)| RingPositions::map(m)).collect::<Result<_>>()?,
        })
    }

    /// Rings in use.
    pub fn rings(&self) -> usize {
        self.rings.len()
    }

    /// Bytes each ring holds that its reader has not taken.
    pub fn waiting(&self) -> Vec<u64> {
        self.rings.iter().map(RingPositions::waiting).collect()
    }

    /// Beat the programs' heartbeat as rlm would (they act for `stale` from now).
    pub fn beat(&mut self, stale: Duration) -> Result<()> {
        let v = HeartbeatValue { last_ns: crate::monotonic_ns(), stale_ns: stale.as_nanos() as u64 };
        self.heartbeat.set(0, v, 0)?;
        Ok(())
    }

    /// Run `syn_admit` (a client's frame at the client port) or `observe` (at the server port:
    /// `arrival` says whether it came in from a server) on `frame` once.
    pub fn run(&self, client_side: bool, frame: &[u8], arrival: Arrival) -> Result<TestRun> {
        testrun::run(if client_side { &self.syn_admit } else { &self.observe }, frame, 1, arrival)
    }
}
