//! The inline fast path of `rlm run` (`bpf/inline.bpf.c`): SYN admission in the kernel and the
//! packets the engine measures, through a ring buffer.
//!
//! - `syn_admit` on the client port's ingress decides a client's SYN from the verdict the engine
//!   published for its (client, server, port) under the current generation; when there is none
//!   ([`Mode`]) it holds it for the engine ([`InlinePath::set_hold_syns`]) or marks it for
//!   NFQUEUE.
//! - `observe` on the server port's ingress and egress copies every packet of the servers' ports
//!   into the ring buffer but the clients' SYNs and the bare ACKs other than a handshake's; with
//!   [`InlinePath::set_queue_responses`] on, the servers' IPv4 segments with payload, FIN or RST
//!   are marked for NFQUEUE instead (content adaptation rewrites them there).
//!
//! Both are attached as [`AttachMode`] says: tcx links owned by this process go when it goes,
//! whatever way it ends; clsact filters stay in the kernel after it unless they are detached
//! (dropping the handle does; after a SIGKILL, [`crate::detach_leftovers`]).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::ops::Deref;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

use anyhow::{bail, Context, Result};
use aya::maps::ring_buf::RingBufItem;
use aya::maps::{Array, HashMap, MapData, PerCpuArray, RingBuf};
use aya::programs::{SchedClassifier, TcAttachType};
use aya::{include_bytes_aligned, Ebpf};

use crate::records::{
    inline_counter as c, BodyRange, Bucket, Config, ConnKey, ShardMode, SynKey, SynVerdict, ACTION_DROP, ACTION_LIMIT, ACTION_PASS, CFG_HOLD_SYNS,
    CFG_QUEUE_REQUESTS, CFG_QUEUE_RESPONSES, MODE_PASS_ALL, MODE_QUEUE_ALL, MODE_VERDICTS,
};
use crate::testrun::{self, TestRun};
use crate::{AttachMode, Heartbeat};

static INLINE: &[u8] = include_bytes_aligned!(concat!(env!("OUT_DIR"), "/inline.bpf.o"));

pub use crate::records::{HOLD_WAIT, MAX_BUCKETS, MAX_SHARDS};

/// The reader's slot of a shard's slots in the `held` map (`HELD_TAKEN` in `bpf/inline.bpf.c`),
/// and how many slots a shard has there (`HELD_SLOTS`).
const HELD_TAKEN: u32 = 2;
const HELD_SLOTS: u32 = 3;

/// How the rings of reports are made ([`InlinePath::load_sharded`]): one per engine, each of
/// `bytes` (a power of two, at least a page; `RING_BYTES` in `bpf/inline.bpf.c` by default).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rings {
    pub count: usize,
    pub bytes: u32,
}

impl Default for Rings {
    fn default() -> Self {
        Rings { count: 1, bytes: 16 << 20 }
    }
}

/// A shard's ring of reports (`events0` to `events7`).
fn ring_name(shard: usize) -> &'static str {
    ["events0", "events1", "events2", "events3", "events4", "events5", "events6", "events7"][shard]
}

/// What `syn_admit` does with a client's SYN to a server port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Mode {
    /// Every SYN gets the queue mark (the engine decides each one).
    QueueAll = MODE_QUEUE_ALL,
    /// SYNs with a verdict of the current generation are decided in the kernel, the others
    /// queued.
    Verdicts = MODE_VERDICTS,
    /// No rule acts at the SYN: every SYN passes and is reported.
    PassAll = MODE_PASS_ALL,
}

/// A verdict's action.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SynAction {
    Pass,
    Drop {
        rule: u32,
    },
    /// Pass while bucket `slot` has a token, else drop (reported as limited by `rule`).
    Limit {
        rule: u32,
        slot: u32,
    },
}

/// Counters of the programs, summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub syn_passed: u64,
    pub syn_dropped: u64,
    pub syn_queued: u64,
    pub observed: u64,
    /// Reports lost because the ring buffer was full (the packets went on).
    pub ring_full: u64,
    /// Bare ACKs not reported (all but the handshake's).
    pub ack_skipped: u64,
    /// Server segments marked for NFQUEUE (content adaptation) instead of reported.
    pub resp_queued: u64,
    /// Client segments marked for NFQUEUE (request rewrites) instead of reported.
    pub req_queued: u64,
    /// Packets passed untouched and unreported because the engine's heartbeat was stale.
    pub stale: u64,
    /// Client segments without payload of a rejected connection marked for NFQUEUE.
    pub rej_queued: u64,
    /// Server segments of a rejected connection dropped.
    pub rej_dropped: u64,
    /// SYNs without a verdict held for the engine ([`InlinePath::set_hold_syns`]).
    pub syn_held: u64,
    /// SYNs that could not be held (the ring full, or too long for a record): passed undecided.
    pub hold_failed: u64,
    /// SYNs passed undecided because a held SYN had waited for the reader longer than
    /// [`HOLD_WAIT`] (the reader behind, stopped or gone).
    pub hold_late: u64,
    /// Server segments of a body the engine does not read reported cut to their headers
    /// ([`InlinePath::set_body_unread`]).
    pub body_cut: u64,
    /// Response heads read by the kernel whose body it cut from their first segment on,
    /// without waiting for the engine's word.
    pub body_armed: u64,
    /// Of the segments cut, those not reported at all: all but one a MiB of a body's sequence
    /// space and the one that ends it.
    pub body_silent: u64,
    /// RFC 1858's tiny TCP fragments from the clients (a first fragment too short for the TCP
    /// header, a later one at offset 8 bytes), dropped: a SYN made of them at the server's
    /// reassembly would pass every decision.
    pub tiny_frag: u64,
}

pub use crate::ring::{Event, EventKind};

/// The ring buffer of reports ([`InlinePath::take_events`]), oldest first. Its descriptor
/// becomes readable when the kernel wakes the reader (poll or epoll it: `AsRawFd`, `AsFd`); the
/// programs wake it only when a quarter of the ring waits, so drain it on a timer too.
pub struct EventRing {
    ring: RingBuf<MapData>,
}

/// One record of the ring: its bytes (`Deref` to `[u8]`, for [`Event::parse`]), handed back to
/// the kernel when dropped.
pub struct Record<'a>(RingBufItem<'a>);

impl Record<'_> {
    /// The record read ([`Event::parse`]); `None` if it is not one.
    pub fn event(&self) -> Option<Event<'_>> {
        Event::parse(self)
    }
}

impl Deref for Record<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl EventRing {
    /// The oldest record waiting, if any.
    #[allow(clippy::should_implement_trait)] // a lending iterator: each record borrows the ring
    pub fn next(&mut self) -> Option<Record<'_>> {
        self.ring.next().map(Record)
    }

    /// Hand up to `max` waiting records to `f`, oldest first, each read ([`Event::parse`]:
    /// `None` for one that is not a record); returns how many were taken.
    pub fn drain(&mut self, max: usize, mut f: impl FnMut(Option<Event<'_>>)) -> usize {
        let mut n = 0;
        while n < max {
            let Some(rec) = self.next() else { break };
            n += 1;
            f(rec.event());
        }
        n
    }
}

impl AsRawFd for EventRing {
    fn as_raw_fd(&self) -> RawFd {
        self.ring.as_raw_fd()
    }
}

impl AsFd for EventRing {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the descriptor is the ring map's, open as long as `self.ring` lives, which the
        // borrow outlives not.
        unsafe { BorrowedFd::borrow_raw(self.ring.as_raw_fd()) }
    }
}

/// How long a rejected connection stays the engine's in the kernel ([`InlinePath::set_rejected`]):
/// its client, answered with `Connection: close` and a FIN, closes within a few round trips.
pub const REJECTED_HOLD: std::time::Duration = std::time::Duration::from_secs(10);

/// The inline fast path, loaded and attached; detached when dropped.
pub struct InlinePath {
    bpf: Ebpf,
    heartbeat: Heartbeat,
    queue_mark: u32,
    /// Engines the reports are dealt to by client.
    shards: usize,
    /// Shard 0's door: what one engine publishes ([`InlinePath::set_mode`] and the like).
    door: ShardDoor,
    queue_responses: bool,
    queue_requests: bool,
    hold_syns: bool,
    /// The positions of the rings taken, to tell how much each holds ([`InlinePath::rings_waiting`]).
    ring_positions: Vec<(crate::running::RingPositions, u32)>,
}

impl InlinePath {
    /// Load the programs and attach `syn_admit` to `client_port`'s ingress and `observe` to
    /// `server_port`'s ingress and egress, as `mode` says. SYNs start in [`Mode::QueueAll`],
    /// marked with `queue_mark`.
    pub fn attach(client_port: &str, server_port: &str, server_ports: &[u16], queue_mark: u32, mode: AttachMode) -> Result<InlinePath> {
        InlinePath::attach_sharded(client_port, server_port, server_ports, queue_mark, mode, Rings::default())
    }

    /// The same, the reports dealt to `shards` rings by client ([`InlinePath::load_sharded`]).
    pub fn attach_sharded(
        client_port: &str,
        server_port: &str,
        server_ports: &[u16],
        queue_mark: u32,
        mode: AttachMode,
        rings: Rings,
    ) -> Result<InlinePath> {
        let mut path = InlinePath::load_sharded(server_ports, queue_mark, rings)?;
        for (prog, iface, dirs) in
            [("syn_admit", client_port, &[TcAttachType::Ingress][..]), ("observe", server_port, &[TcAttachType::Ingress, TcAttachType::Egress][..])]
        {
            let p: &mut SchedClassifier = path.bpf.program_mut(prog).with_context(|| format!("program {prog} missing"))?.try_into()?;
            for &d in dirs {
                crate::attach_program(p, iface, d, mode, false).with_context(|| format!("attaching {prog} to {iface} {d:?}"))?;
            }
        }
        Ok(path)
    }

    /// Load the programs (through the verifier) without attaching them: [`InlinePath::test_run`]
    /// runs them on frames, and [`InlinePath::attach`] puts them on the ports. They pass every
    /// packet untouched and unreported until [`InlinePath::beat`] is called, and again when the
    /// beats stop for [`crate::HEARTBEAT_STALE`].
    pub fn load(server_ports: &[u16], queue_mark: u32) -> Result<InlinePath> {
        InlinePath::load_sharded(server_ports, queue_mark, Rings::default())
    }

    /// The same for `rings.count` engines (1 to [`MAX_SHARDS`]): every report of a client goes to
    /// the ring of its shard ([`InlinePath::take_rings`]), its client being its IPv4 address or
    /// IPv6 /64 dealt as rlm-core's `Sharding::shard_of_client` deals it; each shard has its
    /// SYN mode and generation and its held SYNs' wait, written through its door
    /// ([`InlinePath::shard_door`]). The rings of the shards beyond are one page each.
    pub fn load_sharded(server_ports: &[u16], queue_mark: u32, rings: Rings) -> Result<InlinePath> {
        let shards = rings.count;
        if queue_mark == 0 {
            bail!("the queue mark must have at least one bit set");
        }
        if !(1..=MAX_SHARDS).contains(&shards) {
            bail!("{shards} shards: the fast path deals reports to 1 to {MAX_SHARDS}");
        }
        if !rings.bytes.is_power_of_two() || rings.bytes < crate::page_size() {
            bail!("a ring of {} bytes: it must be a power of two, at least a page", rings.bytes);
        }
        let sizes: Vec<(&str, u32)> = (0..MAX_SHARDS).map(|i| (ring_name(i), if i < shards { rings.bytes } else { crate::page_size() })).collect();
        let mut bpf = crate::load_object(INLINE, "the inline fast path", server_ports, &crate::INLINE_PROGRAMS, &sizes)?;
        let heartbeat = Heartbeat::watch(&mut bpf, Some(crate::HEARTBEAT_STALE))?;
        let door = ShardDoor::open(&bpf, 0)?;
        let mut path = InlinePath {
            bpf,
            heartbeat,
            queue_mark,
            shards,
            door,
            queue_responses: false,
            queue_requests: false,
            hold_syns: false,
            ring_positions: Vec::new(),
        };
        path.write_config()?;
        Ok(path)
    }

    /// The engine is alive: the programs act for [`crate::HEARTBEAT_STALE`] from now.
    pub fn beat(&mut self) -> Result<()> {
        self.heartbeat.beat(&mut self.bpf)
    }

    /// How long after the last beat the programs stop acting (`None`: they act whatever the
    /// time; tests that drive them without a loop).
    pub fn watch_heartbeat(&mut self, stale: Option<std::time::Duration>) -> Result<()> {
        self.heartbeat = Heartbeat::watch(&mut self.bpf, stale)?;
        Ok(())
    }

    /// Run `syn_admit` (`client_side`) or `observe` on `frame` `repeat` times in the kernel, as
    /// if it had come in at the client port, or left the server port ([`crate::testrun`]).
    pub fn test_run(&self, client_side: bool, frame: &[u8], repeat: u32) -> Result<TestRun> {
        testrun::run_program(&self.bpf, if client_side { "syn_admit" } else { "observe" }, frame, repeat, testrun::Arrival::Leaving)
    }

    /// Run `observe` on `frame` once, as if it had come in at the server port (from a server).
    pub fn test_run_from_server(&self, frame: &[u8]) -> Result<TestRun> {
        self.test_run_from_server_n(frame, 1)
    }

    /// The same `repeat` times (the benchmark's).
    pub fn test_run_from_server_n(&self, frame: &[u8], repeat: u32) -> Result<TestRun> {
        testrun::run_program(&self.bpf, "observe", frame, repeat, testrun::Arrival::CameIn)
    }

    fn write_config(&mut self) -> Result<()> {
        let mut cfg: Array<&mut MapData, Config> = Array::try_from(self.bpf.map_mut("config").context("map config")?)?;
        let flags = if self.queue_responses { CFG_QUEUE_RESPONSES } else { 0 }
            | if self.queue_requests { CFG_QUEUE_REQUESTS } else { 0 }
            | if self.hold_syns { CFG_HOLD_SYNS } else { 0 };
        cfg.set(0, Config { queue_mark: self.queue_mark, flags, shards: self.shards as u32, pad: 0 }, 0)?;
        Ok(())
    }

    /// How many engines the reports are dealt to.
    pub fn shards(&self) -> usize {
        self.shards
    }

    /// A door to the maps for the engine of `shard` (each its own descriptors: one per engine
    /// thread): its SYN mode and generation, its held SYNs' progress, and the entries of its
    /// clients in the maps all engines share.
    pub fn shard_door(&self, shard: usize) -> Result<ShardDoor> {
        if shard >= self.shards {
            bail!("shard {shard} of {}", self.shards);
        }
        ShardDoor::open(&self.bpf, shard as u32)
    }

    /// Hold a SYN the kernel has no verdict for instead of marking it for NFQUEUE: report it
    /// whole ([`EventKind::SynHeld`], waking the reader at once) and drop it; the reader decides
    /// it and sends it on, and says when it has taken them ([`InlinePath::held_taken`]). If the
    /// ring has no room, or a held SYN has waited longer than [`HOLD_WAIT`], the SYN passes
    /// undecided.
    pub fn set_hold_syns(&mut self, on: bool) -> Result<()> {
        self.hold_syns = on;
        self.write_config()
    }

    /// The reader has taken the held SYNs up to the one stamped `ts_ns` (its record's
    /// [`Event::ts_ns`]): those held after it are waiting, and [`HOLD_WAIT`] bounds their wait.
    /// Call it after each held SYN taken (or the last of a batch).
    pub fn held_taken(&mut self, ts_ns: u64) -> Result<()> {
        self.door.held_taken(ts_ns)
    }

    /// Mark the servers' IPv4 segments with payload, FIN or RST for NFQUEUE instead of
    /// reporting them (content adaptation), or stop.
    pub fn set_queue_responses(&mut self, on: bool) -> Result<()> {
        self.queue_responses = on;
        self.write_config()
    }

    /// Mark the clients' IPv4 segments with payload (requests) for NFQUEUE at the client port
    /// instead of reporting them at the server port (request rewrites), or stop.
    pub fn set_queue_requests(&mut self, on: bool) -> Result<()> {
        self.queue_requests = on;
        self.write_config()
    }

    /// [`ShardDoor::set_rejected`], shard 0's.
    pub fn set_rejected(&mut self, client: SocketAddrV4, server: SocketAddrV4) -> Result<()> {
        self.door.set_rejected(client, server)
    }

    /// [`ShardDoor::set_body_unread`], shard 0's.
    pub fn set_body_unread(&mut self, client: SocketAddrV4, server: SocketAddrV4, until: u32) -> Result<()> {
        self.door.set_body_unread(client, server, until)
    }

    /// [`ShardDoor::end_body_unread`], shard 0's.
    pub fn end_body_unread(&mut self, client: SocketAddrV4, server: SocketAddrV4, until: u32) -> Result<()> {
        self.door.end_body_unread(client, server, until)
    }

    /// [`ShardDoor::set_mode`], shard 0's (one engine's).
    pub fn set_mode(&mut self, mode: Mode, generation: u64) -> Result<()> {
        self.door.set_mode(mode, generation)
    }

    /// [`ShardDoor::set_syn_verdict`], shard 0's.
    pub fn set_syn_verdict(&mut self, client: Ipv4Addr, server: SocketAddrV4, generation: u64, action: SynAction) -> Result<()> {
        self.door.set_syn_verdict(client, server, generation, action)
    }

    /// [`ShardDoor::set_bucket`].
    pub fn set_bucket(&mut self, slot: u32, rate_per_s: f64, burst: u32) -> Result<()> {
        self.door.set_bucket(slot, rate_per_s, burst)
    }

    /// The ring buffer of reports of one engine (shard 0's; taken once: the caller reads it, and
    /// waits on its fd).
    pub fn take_events(&mut self) -> Result<EventRing> {
        self.take_ring(0)
    }

    /// Every shard's ring, in shard order (taken once).
    pub fn take_rings(&mut self) -> Result<Vec<EventRing>> {
        (0..self.shards).map(|i| self.take_ring(i)).collect()
    }

    /// Shard `i`'s ring, its positions kept to tell its depth.
    fn take_ring(&mut self, i: usize) -> Result<EventRing> {
        let name = ring_name(i);
        let map = self.bpf.take_map(name).with_context(|| format!("map {name} (already taken?)"))?;
        if let aya::maps::Map::RingBuf(data) = &map {
            let fd = data.fd().as_fd().try_clone_to_owned().with_context(|| format!("map {name}: cannot duplicate its descriptor"))?;
            let bytes = data.info()?.max_entries();
            self.ring_positions.push((crate::running::RingPositions::map(MapData::from_fd(fd)?)?, bytes));
        }
        Ok(EventRing { ring: RingBuf::try_from(map)? })
    }

    /// Each taken ring's bytes written by the kernel and not yet read, and its size, in the order
    /// taken: how far the engines are behind.
    pub fn rings_waiting(&self) -> Vec<(u64, u32)> {
        self.ring_positions.iter().map(|(p, bytes)| (p.waiting(), *bytes)).collect()
    }

    pub fn counters(&self) -> Result<Counters> {
        let m: PerCpuArray<&MapData, u64> = PerCpuArray::try_from(self.bpf.map("counters").context("map counters")?)?;
        let sum = |i: u32| -> Result<u64> { Ok(m.get(&i, 0)?.iter().sum()) };
        Ok(Counters {
            syn_passed: sum(c::SYN_PASSED)?,
            syn_dropped: sum(c::SYN_DROPPED)?,
            syn_queued: sum(c::SYN_QUEUED)?,
            observed: sum(c::OBSERVED)?,
            ring_full: sum(c::RING_FULL)?,
            ack_skipped: sum(c::ACK_SKIPPED)?,
            resp_queued: sum(c::RESP_QUEUED)?,
            req_queued: sum(c::REQ_QUEUED)?,
            stale: sum(c::STALE)?,
            rej_queued: sum(c::REJ_QUEUED)?,
            rej_dropped: sum(c::REJ_DROPPED)?,
            syn_held: sum(c::SYN_HELD)?,
            hold_failed: sum(c::HOLD_FAILED)?,
            hold_late: sum(c::HOLD_LATE)?,
            body_cut: sum(c::BODY_CUT)?,
            body_armed: sum(c::BODY_ARMED)?,
            body_silent: sum(c::BODY_SILENT)?,
            tiny_frag: sum(c::TINY_FRAG)?,
        })
    }
}

/// One engine's door to the fast path's maps ([`InlinePath::shard_door`]): what its engine
/// publishes for the kernel, written through descriptors of its own, so that engines on threads
/// of their own write side by side (the kernel's maps take concurrent updates).
pub struct ShardDoor {
    shard: u32,
    modes: Array<MapData, ShardMode>,
    held: Array<MapData, u64>,
    verdicts: HashMap<MapData, SynKey, SynVerdict>,
    buckets: Array<MapData, Bucket>,
    unread: HashMap<MapData, ConnKey, BodyRange>,
    rejected: HashMap<MapData, ConnKey, u64>,
}

impl ShardDoor {
    fn open(bpf: &Ebpf, shard: u32) -> Result<ShardDoor> {
        Ok(ShardDoor {
            shard,
            modes: Array::try_from(crate::own_map(bpf, "modes")?)?,
            held: Array::try_from(crate::own_map(bpf, "held")?)?,
            verdicts: HashMap::try_from(crate::own_map(bpf, "syn_verdicts")?)?,
            buckets: Array::try_from(crate::own_map(bpf, "buckets")?)?,
            unread: HashMap::try_from(crate::own_map(bpf, "unread")?)?,
            rejected: HashMap::try_from(crate::own_map(bpf, "rejected")?)?,
        })
    }

    /// The shard this door is for.
    pub fn shard(&self) -> usize {
        self.shard as usize
    }

    /// Put this shard's SYN mode and generation of the class statistics in force: its
    /// clients' SYNs are treated as `mode` says, and verdicts of other generations no longer
    /// apply to them.
    pub fn set_mode(&mut self, mode: Mode, generation: u64) -> Result<()> {
        self.modes.set(self.shard, ShardMode { generation, mode: mode as u32, pad: 0 }, 0)?;
        Ok(())
    }

    /// The reader of this shard's ring has taken its held SYNs up to the one stamped `ts_ns`
    /// (its record's [`Event::ts_ns`]): those held after it are waiting, and [`HOLD_WAIT`]
    /// bounds their wait. Call it after each held SYN taken (or the last of a batch).
    pub fn held_taken(&mut self, ts_ns: u64) -> Result<()> {
        self.held.set(self.shard * HELD_SLOTS + HELD_TAKEN, ts_ns, 0)?;
        Ok(())
    }

    /// The verdict for SYNs from `client` to `server` while `generation` is in force (in the
    /// client's shard: this one's).
    pub fn set_syn_verdict(&mut self, client: Ipv4Addr, server: SocketAddrV4, generation: u64, action: SynAction) -> Result<()> {
        let key = SynKey {
            client: u32::from_ne_bytes(client.octets()),
            server: u32::from_ne_bytes(server.ip().octets()),
            port: server.port().to_be(),
            pad: 0,
        };
        let (action, rule, bucket) = match action {
            SynAction::Pass => (ACTION_PASS, 0, 0),
            SynAction::Drop { rule } => (ACTION_DROP, rule, 0),
            SynAction::Limit { rule, slot } => {
                if slot >= MAX_BUCKETS {
                    bail!("bucket slot {slot} out of range");
                }
                (ACTION_LIMIT, rule, slot)
            }
        };
        self.verdicts.insert(key, SynVerdict { generation, rule, action, pad: 0, bucket, pad2: 0 }, 0)?;
        Ok(())
    }

    /// Set a LIMIT SYN bucket's rate (tokens per second) and burst, full (the buckets are
    /// every shard's: a rule's bucket for a class polices all of the class's SYNs).
    pub fn set_bucket(&mut self, slot: u32, rate_per_s: f64, burst: u32) -> Result<()> {
        if slot >= MAX_BUCKETS {
            bail!("bucket slot {slot} out of range");
        }
        let rate_milli = (rate_per_s * 1000.0).clamp(0.0, 1.8e9) as u64;
        self.buckets.set(slot, Bucket { lock: 0, burst: burst.max(1), rate_milli, tokens_nano: 0, last_ns: 0 }, 0)?;
        Ok(())
    }

    /// The server of the IPv4 connection `client`-`server` is sending a body the engine does not
    /// read, which ends before sequence number `until`: its segments that end by then are
    /// reported cut to their headers (their length on the wire kept), until one reaches it.
    pub fn set_body_unread(&mut self, client: SocketAddrV4, server: SocketAddrV4, until: u32) -> Result<()> {
        self.unread.insert(ConnKey::new(client, server), BodyRange { until, pad: 0, beyond: 0 }, 0)?;
        Ok(())
    }

    /// The body of the IPv4 connection `client`-`server` that ends before `until` is over: its
    /// range goes if it is still there and ends there (one the kernel moved on to a later part,
    /// or a later response's, stays).
    pub fn end_body_unread(&mut self, client: SocketAddrV4, server: SocketAddrV4, until: u32) -> Result<()> {
        let key = ConnKey::new(client, server);
        match self.unread.get(&key, 0) {
            Ok(r) if r.until == until => match self.unread.remove(&key) {
                Ok(()) | Err(aya::maps::MapError::KeyNotFound) => Ok(()),
                Err(e) => Err(e.into()),
            },
            Ok(_) | Err(aya::maps::MapError::KeyNotFound) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// The engine answered a request of the IPv4 connection `client`-`server` itself (`REJECT`)
    /// and reset the server: while requests are queued ([`InlinePath::set_queue_requests`]),
    /// the client's segments of it go through the queue and the server's are dropped, for
    /// [`REJECTED_HOLD`] or until a new SYN on its ports.
    pub fn set_rejected(&mut self, client: SocketAddrV4, server: SocketAddrV4) -> Result<()> {
        let until = crate::monotonic_ns() + REJECTED_HOLD.as_nanos() as u64;
        self.rejected.insert(ConnKey::new(client, server), until, 0)?;
        Ok(())
    }
}
