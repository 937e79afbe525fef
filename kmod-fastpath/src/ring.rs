//! The ring buffer's records (`struct event` in `bpf/common.h`): a header, then the frame as the
//! `observe` and `syn_admit` programs saw it, cut at their copy limit. Reading one needs neither
//! aya nor the programs, so this module is built without the `bpf` feature too (the fuzz
//! targets read records without clang). `records.rs` checks the header against the C definition.

/// `KIND_*`: `EventHeader::kind`; `FLAG_LIMITED`: a bit of `EventHeader::flags`.
pub(crate) const KIND_OBSERVED: u16 = 0;
pub(crate) const KIND_SYN_PASSED: u16 = 1;
pub(crate) const KIND_SYN_DROPPED: u16 = 2;
pub(crate) const FLAG_LIMITED: u16 = 1;
pub(crate) const FLAG_FROM_SERVER: u16 = 2;

/// `struct event` without its `data[]`: the header of a ring buffer record, which `len` bytes
/// of the frame follow.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct EventHeader {
    pub ts_ns: u64,
    pub len: u32,
    pub wire_len: u32,
    pub kind: u16,
    pub flags: u16,
    pub rule: u32,
}

impl EventHeader {
    /// The header at the start of a record; `None` if the record is too short to hold one.
    pub fn read(rec: &[u8]) -> Option<EventHeader> {
        if rec.len() < std::mem::size_of::<EventHeader>() {
            return None;
        }
        // SAFETY: `rec` holds at least size_of::<EventHeader>() bytes, read unaligned, and every
        // bit pattern is a valid EventHeader (integers only).
        Some(unsafe { std::ptr::read_unaligned(rec.as_ptr().cast::<EventHeader>()) })
    }

    /// The header's bytes, as the program writes them (for tests).
    #[cfg(test)]
    pub fn to_bytes(self) -> Vec<u8> {
        // SAFETY: a repr(C) struct of integers without padding: all of its bytes are initialised.
        unsafe { std::slice::from_raw_parts((&self as *const EventHeader).cast::<u8>(), std::mem::size_of::<EventHeader>()) }.to_vec()
    }
}

/// What a ring-buffer record says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// A packet of a server port, seen on the server port: `from_server` if it came in there
    /// (from the servers' side), else it was leaving there (it came from the clients' side).
    Observed { from_server: bool },
    /// A client's SYN the kernel passed.
    SynPassed,
    /// A client's SYN the kernel dropped by `rule` (`limited`: its LIMIT SYN bucket was empty).
    SynDropped { rule: u32, limited: bool },
}

/// One ring-buffer record: a frame (Ethernet) as the program saw it.
#[derive(Clone, Copy, Debug)]
pub struct Event<'a> {
    /// CLOCK_MONOTONIC.
    pub ts_ns: u64,
    pub kind: EventKind,
    /// The frame's length on the wire (`frame` may be cut shorter).
    pub wire_len: u32,
    pub frame: &'a [u8],
}

impl<'a> Event<'a> {
    /// Read a record (an `EventHeader`, then the frame); `None` if it is not one.
    pub fn parse(rec: &'a [u8]) -> Option<Event<'a>> {
        let h = EventHeader::read(rec)?;
        let kind = match h.kind {
            KIND_OBSERVED => EventKind::Observed { from_server: h.flags & FLAG_FROM_SERVER != 0 },
            KIND_SYN_PASSED => EventKind::SynPassed,
            KIND_SYN_DROPPED => EventKind::SynDropped { rule: h.rule, limited: h.flags & FLAG_LIMITED != 0 },
            _ => return None,
        };
        let start = std::mem::size_of::<EventHeader>();
        let frame = rec.get(start..start + h.len as usize)?;
        Some(Event { ts_ns: h.ts_ns, kind, wire_len: h.wire_len, frame })
    }

    /// The record's bytes, as the programs write them: [`Event::parse`]'s inverse (for tests and
    /// fuzz seeds).
    pub fn to_bytes(&self) -> Vec<u8> {
        let (kind, flags, rule) = match self.kind {
            EventKind::Observed { from_server } => (KIND_OBSERVED, if from_server { FLAG_FROM_SERVER } else { 0 }, 0),
            EventKind::SynPassed => (KIND_SYN_PASSED, 0, 0),
            EventKind::SynDropped { rule, limited } => (KIND_SYN_DROPPED, if limited { FLAG_LIMITED } else { 0 }, rule),
        };
        let len = u32::try_from(self.frame.len()).expect("a frame under 4 GiB");
        let h = EventHeader { ts_ns: self.ts_ns, len, wire_len: self.wire_len, kind, flags, rule };
        // SAFETY: a repr(C) struct of integers without padding: all of its bytes are initialised.
        let head = unsafe { std::slice::from_raw_parts((&h as *const EventHeader).cast::<u8>(), std::mem::size_of::<EventHeader>()) };
        [head, self.frame].concat()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_records() {
        let h = EventHeader { ts_ns: 42, len: 3, wire_len: 60, kind: KIND_SYN_DROPPED, flags: FLAG_LIMITED, rule: 7 };
        let mut rec = h.to_bytes();
        rec.extend_from_slice(&[1, 2, 3]);
        let e = Event::parse(&rec).expect("a record");
        assert_eq!(e.ts_ns, 42);
        assert_eq!(e.kind, EventKind::SynDropped { rule: 7, limited: true });
        assert_eq!(e.wire_len, 60);
        assert_eq!(e.frame, &[1, 2, 3]);
        // A length past the record, an unknown kind, a short record: not records.
        let long = EventHeader { len: 4, ..h }.to_bytes().into_iter().chain([1, 2, 3]).collect::<Vec<u8>>();
        assert!(Event::parse(&long).is_none());
        let unknown = EventHeader { kind: 3, ..h }.to_bytes().into_iter().chain([1, 2, 3]).collect::<Vec<u8>>();
        assert!(Event::parse(&unknown).is_none());
        assert!(Event::parse(&rec[..10]).is_none());
        assert_eq!(e.to_bytes(), rec);
        // An observed frame's side.
        for (flags, from_server) in [(0, false), (FLAG_FROM_SERVER, true)] {
            let rec = EventHeader { kind: KIND_OBSERVED, flags, rule: 0, ..h }.to_bytes().into_iter().chain([1, 2, 3]).collect::<Vec<u8>>();
            let e = Event::parse(&rec).expect("a record");
            assert_eq!(e.kind, EventKind::Observed { from_server });
            assert_eq!(e.to_bytes(), rec);
        }
    }
}
