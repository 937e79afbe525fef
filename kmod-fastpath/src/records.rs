//! The Rust side of the records the programs share with user space (`bpf/common.h`): map keys
//! and values, the counters' slots and the constants user space writes (the ring buffer's record
//! header is `crate::ring`'s, checked here too).
//!
//! Each record is a `#[repr(C)]` struct, and the test below checks it against the C definition:
//! it writes a `_Static_assert` for each struct's size, each field's offset and size, and each
//! constant's value, and has clang compile them with `common.h`, with the target and flags
//! `build.rs` builds the programs with. Why this and not bindgen: bindgen would need libclang at
//! every build of every crate that depends on this one, and its generated structs carry no
//! documentation; here the structs are written once, readable, and only the test (which runs
//! where the programs are built, so clang is there) needs clang. A field added, moved or resized
//! on one side alone fails that test, naming it.

use std::net::SocketAddrV4;

use aya::Pod;

// ---- inline.bpf.c ----

/// `MODE_*`: `ShardMode::mode` (see [`crate::inline::Mode`]).
pub(crate) const MODE_QUEUE_ALL: u32 = 0;
pub(crate) const MODE_VERDICTS: u32 = 1;
pub(crate) const MODE_PASS_ALL: u32 = 2;

/// `ACTION_*`: `SynVerdict::action`.
pub(crate) const ACTION_PASS: u16 = 0;
pub(crate) const ACTION_DROP: u16 = 1;
pub(crate) const ACTION_LIMIT: u16 = 2;

/// `CFG_QUEUE_RESPONSES`: `Config::flags`: mark the servers' segments for NFQUEUE.
pub(crate) const CFG_QUEUE_RESPONSES: u32 = 1;
/// `CFG_QUEUE_REQUESTS`: `Config::flags`: mark the clients' segments with payload for NFQUEUE.
pub(crate) const CFG_QUEUE_REQUESTS: u32 = 2;
/// `CFG_HOLD_SYNS`: `Config::flags`: hold a SYN without a verdict (report it whole, drop it).
pub(crate) const CFG_HOLD_SYNS: u32 = 4;

/// `HOLD_WAIT_NS`: how long a held SYN may wait for the reader before the next SYNs pass
/// undecided.
pub const HOLD_WAIT: std::time::Duration = std::time::Duration::from_millis(200);

/// `MAX_BUCKETS`: `LIMIT SYN` buckets the kernel keeps (slots `0..MAX_BUCKETS`).
pub const MAX_BUCKETS: u32 = 1024;

/// `MAX_SHARDS`: the most engines the programs deal reports to (rings `events0` on, slots of
/// `generations` and `held`).
pub const MAX_SHARDS: usize = 8;

/// `enum inline_counter`: the slots of the `counters` per-CPU array.
pub(crate) mod inline_counter {
    pub const SYN_PASSED: u32 = 0;
    pub const SYN_DROPPED: u32 = 1;
    pub const SYN_QUEUED: u32 = 2;
    pub const OBSERVED: u32 = 3;
    pub const RING_FULL: u32 = 4;
    pub const ACK_SKIPPED: u32 = 5;
    pub const RESP_QUEUED: u32 = 6;
    pub const REQ_QUEUED: u32 = 7;
    pub const STALE: u32 = 8;
    pub const REJ_QUEUED: u32 = 9;
    pub const REJ_DROPPED: u32 = 10;
    pub const SYN_HELD: u32 = 11;
    pub const HOLD_FAILED: u32 = 12;
    pub const HOLD_LATE: u32 = 13;
    pub const BODY_CUT: u32 = 14;
    pub const BODY_ARMED: u32 = 15;
    pub const BODY_SILENT: u32 = 16;
    pub const TINY_FRAG: u32 = 17;
    /// The slots in all (the array's size; only the layout test reads it).
    #[allow(dead_code)]
    pub const COUNT: u32 = 18;
}

/// `struct config`: `config`'s one value.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Config {
    pub queue_mark: u32,
    pub flags: u32,
    pub shards: u32,
    pub pad: u32,
}
// SAFETY: integers only, no padding (the layout test checks size and offsets against C).
unsafe impl Pod for Config {}

/// `struct shard_mode`: `modes`' value, one a shard.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ShardMode {
    pub generation: u64,
    pub mode: u32,
    pub pad: u32,
}
// SAFETY: as Config.
unsafe impl Pod for ShardMode {}

/// `struct syn_key`: `syn_verdicts`' key (addresses and port in network byte order).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SynKey {
    pub client: u32,
    pub server: u32,
    pub port: u16,
    pub pad: u16,
}
// SAFETY: as Config.
unsafe impl Pod for SynKey {}

/// `struct conn_key`: an IPv4 connection, `handshakes`' and `rejected`'s key (addresses and
/// ports in network byte order).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ConnKey {
    pub client: u32,
    pub server: u32,
    pub client_port: u16,
    pub server_port: u16,
}
// SAFETY: as Config.
unsafe impl Pod for ConnKey {}

impl ConnKey {
    pub fn new(client: SocketAddrV4, server: SocketAddrV4) -> ConnKey {
        ConnKey {
            client: u32::from_ne_bytes(client.ip().octets()),
            server: u32::from_ne_bytes(server.ip().octets()),
            client_port: client.port().to_be(),
            server_port: server.port().to_be(),
        }
    }
}

/// `struct body_range`: `unread`'s value (the sequence number after the part of a body cut now,
/// and the body's bytes beyond it).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct BodyRange {
    pub until: u32,
    pub pad: u32,
    pub beyond: u64,
}
// SAFETY: as Config.
unsafe impl Pod for BodyRange {}

/// `struct syn_verdict`: `syn_verdicts`' value.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SynVerdict {
    pub generation: u64,
    pub rule: u32,
    pub action: u16,
    pub pad: u16,
    pub bucket: u32,
    pub pad2: u32,
}
// SAFETY: as Config.
unsafe impl Pod for SynVerdict {}

/// `struct bucket`: a LIMIT SYN token bucket (`bpf_spin_lock` is a u32).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Bucket {
    pub lock: u32,
    pub burst: u32,
    pub rate_milli: u64,
    pub tokens_nano: u64,
    pub last_ns: u64,
}
// SAFETY: as Config.
unsafe impl Pod for Bucket {}

// ---- the heartbeat (every object) ----

/// `struct heartbeat`: `heartbeat`'s one value (see [`crate::Heartbeat`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct HeartbeatValue {
    pub last_ns: u64,
    pub stale_ns: u64,
}
// SAFETY: as Config.
unsafe impl Pod for HeartbeatValue {}

// ---- classify.bpf.c ----

/// `MAX_CUTOFFS`: most cutoffs (HTB has 8 priorities: band 0, and n + 1 data bands).
pub const MAX_CUTOFFS: usize = 6;
/// `MAX_CLASSES`: class slots counted by the program (one per band).
pub const MAX_CLASSES: usize = 16;

/// `MODE_OFF`, `MODE_FAIR`, `MODE_SRPT`: `SrptCfg::mode` (see [`crate::SrptMode`]).
pub(crate) const SRPT_MODE_OFF: u32 = 0;
pub(crate) const SRPT_MODE_FAIR: u32 = 1;
pub(crate) const SRPT_MODE_SRPT: u32 = 2;

/// `enum srpt_counter`: the slots of the `srpt_counters` per-CPU array.
pub(crate) mod srpt_counter {
    pub const KNOWN: u32 = 0;
    pub const ATTAINED: u32 = 1;
    pub const RETX: u32 = 2;
    pub const ADOPTED: u32 = 3;
    pub const ROLLED: u32 = 4;
    pub const MIDFLOW: u32 = 5;
    pub const HELD: u32 = 6;
    pub const STALE: u32 = 7;
    /// The slots in all (the array's size; only the layout test reads it).
    #[allow(dead_code)]
    pub const COUNT: u32 = 8;
}

/// `struct srpt_cfg`: `srpt_config`'s one value.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SrptCfg {
    pub mode: u32,
    pub base: u32,
    pub cutoffs: u32,
    pub other_band: u32,
    pub cut: [u32; MAX_CUTOFFS],
    pub resend_band: u32,
    pub pad: u32,
}
// SAFETY: as Config.
unsafe impl Pod for SrptCfg {}

/// `struct flow_key`: a flow as it leaves toward the client: the server's address and port
/// first, then the client's, in network byte order (the key of `resp_size` and `flow_state`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowKey {
    saddr: u32,
    daddr: u32,
    sport: u16,
    dport: u16,
}
// SAFETY: as Config.
unsafe impl Pod for FlowKey {}

impl FlowKey {
    /// The flow of packets from `src` (the server) to `dst` (the client).
    pub fn new(src: SocketAddrV4, dst: SocketAddrV4) -> FlowKey {
        FlowKey {
            saddr: u32::from_ne_bytes(src.ip().octets()),
            daddr: u32::from_ne_bytes(dst.ip().octets()),
            sport: src.port().to_be(),
            dport: dst.port().to_be(),
        }
    }
}

/// `struct resp`: `resp_size`'s value.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RespValue {
    pub start: u32,
    pub end: u32,
    pub has_end: u32,
    pub pad: u32,
}
// SAFETY: as Config.
unsafe impl Pod for RespValue {}

/// `struct flow`: a flow as the kernel keeps it (`flow_state`'s value).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowState {
    /// The current response's first byte (sequence number).
    pub start: u32,
    /// The byte after its end, if `has_end != 0`.
    pub end: u32,
    pub has_end: u32,
    /// The byte after the highest sent.
    pub hi: u32,
    /// The client's highest cumulative ACK.
    pub una: u32,
    /// The data band of the last new segment (0: none yet).
    pub band: u32,
    pub bytes: u64,
    pub packets: u64,
    pub retx_bytes: u64,
    /// CLOCK_MONOTONIC ns of the last packet.
    pub last_ns: u64,
}
// SAFETY: as Config.
unsafe impl Pod for FlowState {}

/// `struct class_count`: packets and bytes sent in one band (`class_stats`' value).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassCount {
    pub packets: u64,
    pub bytes: u64,
}
// SAFETY: as Config.
unsafe impl Pod for ClassCount {}

#[cfg(test)]
mod tests {
    use super::*;
    // The ring buffer's record is in `ring` (it needs no aya).
    use crate::ring::{EventHeader, FLAG_FROM_SERVER, FLAG_LIMITED, FLAG_VLAN, KIND_OBSERVED, KIND_SYN_DROPPED, KIND_SYN_HELD, KIND_SYN_PASSED};
    use std::mem::{offset_of, size_of};
    use std::process::{Command, Stdio};

    /// The size of a field, through a projection (`|s: &S| &s.field`).
    fn field_size<S, T>(_: impl Fn(&S) -> &T) -> usize {
        size_of::<T>()
    }

    /// `_Static_assert`s that `struct $c` has `$rust`'s size, and each field its offset and size
    /// (the Rust and C fields have the same names).
    macro_rules! record {
        ($asserts:ident, $rust:ty, $c:literal, [$($field:ident),* $(,)?]) => {
            $asserts.push((format!("sizeof(struct {})", $c), size_of::<$rust>()));
            $(
                $asserts.push((format!("offsetof(struct {}, {})", $c, stringify!($field)), offset_of!($rust, $field)));
                $asserts.push((format!("sizeof(((struct {} *)0)->{})", $c, stringify!($field)), field_size(|s: &$rust| &s.$field)));
            )*
        };
    }

    /// Every check: (a C expression, the value Rust has for it).
    fn checks() -> Vec<(String, usize)> {
        let mut a: Vec<(String, usize)> = Vec::new();
        record!(a, Config, "config", [queue_mark, flags, shards, pad]);
        record!(a, ShardMode, "shard_mode", [generation, mode, pad]);
        record!(a, SynKey, "syn_key", [client, server, port, pad]);
        record!(a, ConnKey, "conn_key", [client, server, client_port, server_port]);
        record!(a, BodyRange, "body_range", [until, pad, beyond]);
        record!(a, SynVerdict, "syn_verdict", [generation, rule, action, pad, bucket, pad2]);
        record!(a, Bucket, "bucket", [lock, burst, rate_milli, tokens_nano, last_ns]);
        record!(a, EventHeader, "event", [ts_ns, len, wire_len, kind, flags, rule]);
        // The frame follows the header at once.
        a.push(("offsetof(struct event, data)".into(), size_of::<EventHeader>()));
        record!(a, SrptCfg, "srpt_cfg", [mode, base, cutoffs, other_band, cut, resend_band, pad]);
        record!(a, FlowKey, "flow_key", [saddr, daddr, sport, dport]);
        record!(a, RespValue, "resp", [start, end, has_end, pad]);
        record!(a, FlowState, "flow", [start, end, has_end, hi, una, band, bytes, packets, retx_bytes, last_ns]);
        record!(a, ClassCount, "class_count", [packets, bytes]);
        record!(a, HeartbeatValue, "heartbeat", [last_ns, stale_ns]);
        let consts: &[(&str, usize)] = &[
            ("MODE_QUEUE_ALL", MODE_QUEUE_ALL as usize),
            ("MODE_VERDICTS", MODE_VERDICTS as usize),
            ("MODE_PASS_ALL", MODE_PASS_ALL as usize),
            ("ACTION_PASS", ACTION_PASS as usize),
            ("ACTION_DROP", ACTION_DROP as usize),
            ("ACTION_LIMIT", ACTION_LIMIT as usize),
            ("KIND_OBSERVED", KIND_OBSERVED as usize),
            ("KIND_SYN_PASSED", KIND_SYN_PASSED as usize),
            ("KIND_SYN_DROPPED", KIND_SYN_DROPPED as usize),
            ("KIND_SYN_HELD", KIND_SYN_HELD as usize),
            ("FLAG_LIMITED", FLAG_LIMITED as usize),
            ("FLAG_FROM_SERVER", FLAG_FROM_SERVER as usize),
            ("FLAG_VLAN", FLAG_VLAN as usize),
            ("CFG_QUEUE_RESPONSES", CFG_QUEUE_RESPONSES as usize),
            ("CFG_QUEUE_REQUESTS", CFG_QUEUE_REQUESTS as usize),
            ("CFG_HOLD_SYNS", CFG_HOLD_SYNS as usize),
            ("MAX_BUCKETS", MAX_BUCKETS as usize),
            ("MAX_SHARDS", MAX_SHARDS),
            ("C_SYN_PASSED", inline_counter::SYN_PASSED as usize),
            ("C_SYN_DROPPED", inline_counter::SYN_DROPPED as usize),
            ("C_SYN_QUEUED", inline_counter::SYN_QUEUED as usize),
            ("C_OBSERVED", inline_counter::OBSERVED as usize),
            ("C_RING_FULL", inline_counter::RING_FULL as usize),
            ("C_ACK_SKIPPED", inline_counter::ACK_SKIPPED as usize),
            ("C_RESP_QUEUED", inline_counter::RESP_QUEUED as usize),
            ("C_REQ_QUEUED", inline_counter::REQ_QUEUED as usize),
            ("C_STALE", inline_counter::STALE as usize),
            ("C_REJ_QUEUED", inline_counter::REJ_QUEUED as usize),
            ("C_REJ_DROPPED", inline_counter::REJ_DROPPED as usize),
            ("C_SYN_HELD", inline_counter::SYN_HELD as usize),
            ("C_HOLD_FAILED", inline_counter::HOLD_FAILED as usize),
            ("C_HOLD_LATE", inline_counter::HOLD_LATE as usize),
            ("C_BODY_CUT", inline_counter::BODY_CUT as usize),
            ("C_BODY_ARMED", inline_counter::BODY_ARMED as usize),
            ("C_BODY_SILENT", inline_counter::BODY_SILENT as usize),
            ("C_TINY_FRAG", inline_counter::TINY_FRAG as usize),
            ("HOLD_WAIT_NS", HOLD_WAIT.as_nanos() as usize),
            ("C_INLINE_COUNTERS", inline_counter::COUNT as usize),
            ("MAX_CUTOFFS", MAX_CUTOFFS),
            ("MAX_CLASSES", MAX_CLASSES),
            ("MODE_OFF", SRPT_MODE_OFF as usize),
            ("MODE_FAIR", SRPT_MODE_FAIR as usize),
            ("MODE_SRPT", SRPT_MODE_SRPT as usize),
            ("C_KNOWN", srpt_counter::KNOWN as usize),
            ("C_ATTAINED", srpt_counter::ATTAINED as usize),
            ("C_RETX", srpt_counter::RETX as usize),
            ("C_ADOPTED", srpt_counter::ADOPTED as usize),
            ("C_ROLLED", srpt_counter::ROLLED as usize),
            ("C_MIDFLOW", srpt_counter::MIDFLOW as usize),
            ("C_HELD", srpt_counter::HELD as usize),
            ("C_SRPT_STALE", srpt_counter::STALE as usize),
            ("C_SRPT_COUNTERS", srpt_counter::COUNT as usize),
        ];
        a.extend(consts.iter().map(|(c, v)| (c.to_string(), *v)));
        a
    }

    #[test]
    fn records_match_common_h() {
        let mut src = String::from("#include <stddef.h>\n#include \"common.h\"\n");
        for (expr, v) in checks() {
            src += &format!("_Static_assert({expr} == {v}, \"{expr} is not {v} as in kmod-fastpath/src/records.rs\");\n");
        }
        let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
        let bpf = concat!(env!("CARGO_MANIFEST_DIR"), "/bpf");
        // The flags of build.rs, without code generation.
        let mut child = Command::new(&clang)
            .args(["-target", "bpf", "-Wall", "-Werror", "-I/usr/include/x86_64-linux-gnu", "-I", bpf, "-fsyntax-only", "-x", "c", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {clang}: {e} (make deps)"));
        std::io::Write::write_all(child.stdin.as_mut().unwrap(), src.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "records.rs and bpf/common.h disagree:\n{}", String::from_utf8_lossy(&out.stderr));
    }

    #[test]
    fn flow_key_bytes_are_in_network_order() {
        let k = FlowKey::new("10.0.0.1:80".parse().unwrap(), "10.4.0.2:40000".parse().unwrap());
        // SAFETY: FlowKey is 12 bytes of plain data.
        let bytes: [u8; 12] = unsafe { std::mem::transmute(k) };
        assert_eq!(bytes, [10, 0, 0, 1, 10, 4, 0, 2, 0, 80, 0x9c, 0x40]);
    }
}
