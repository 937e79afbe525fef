//! The ring buffer's records (`struct event` in `bpf/common.h`): a header, then the frame as the
//! `observe` and `syn_admit` programs saw it, cut at their copy limit. Reading one needs neither
//! aya nor the programs, so this module is built without the `bpf` feature too (the fuzz
//! targets read records without clang). `records.rs` checks the header against the C definition.

/// `KIND_*`: `EventHeader::kind`; `FLAG_LIMITED`: a bit of `EventHeader::flags`.
pub(crate) const KIND_OBSERVED: u16 = 0;
pub(crate) const KIND_SYN_PASSED: u16 = 1;
pub(crate) const KIND_SYN_DROPPED: u16 = 2;
pub(crate) const KIND_SYN_HELD: u16 = 3;
pub(crate) const FLAG_LIMITED: u16 = 1;
pub(crate) const FLAG_FROM_SERVER: u16 = 2;
pub(crate) const FLAG_VLAN: u16 = 4;

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
    /// A client's SYN without a verdict, held: the kernel dropped it, and the reader decides it
    /// and sends it on. `vlan`: the tag (protocol, TCI) it carried outside the frame's bytes,
    /// which [`Event::whole_frame`] puts back.
    SynHeld { vlan: Option<(u16, u16)> },
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
            KIND_SYN_HELD => EventKind::SynHeld { vlan: (h.flags & FLAG_VLAN != 0).then_some(((h.rule >> 16) as u16, h.rule as u16)) },
            _ => return None,
        };
        let start = std::mem::size_of::<EventHeader>();
        let frame = rec.get(start..start + h.len as usize)?;
        Some(Event { ts_ns: h.ts_ns, kind, wire_len: h.wire_len, frame })
    }

    /// The frame as it was on the wire: with a held SYN's VLAN tag put back behind the MAC
    /// addresses (a tc program sees an accelerated tag outside the frame's bytes), else as
    /// reported.
    pub fn whole_frame(&self) -> std::borrow::Cow<'a, [u8]> {
        match self.kind {
            EventKind::SynHeld { vlan: Some((proto, tci)) } if self.frame.len() >= 12 => {
                let mut f = Vec::with_capacity(self.frame.len() + 4);
                f.extend_from_slice(&self.frame[..12]);
                f.extend_from_slice(&proto.to_be_bytes());
                f.extend_from_slice(&tci.to_be_bytes());
                f.extend_from_slice(&self.frame[12..]);
                std::borrow::Cow::Owned(f)
            }
            _ => std::borrow::Cow::Borrowed(self.frame),
        }
    }

    /// The record's bytes, as the programs write them: [`Event::parse`]'s inverse (for tests and
    /// fuzz seeds).
    pub fn to_bytes(&self) -> Vec<u8> {
        let (kind, flags, rule) = match self.kind {
            EventKind::Observed { from_server } => (KIND_OBSERVED, if from_server { FLAG_FROM_SERVER } else { 0 }, 0),
            EventKind::SynPassed => (KIND_SYN_PASSED, 0, 0),
            EventKind::SynDropped { rule, limited } => (KIND_SYN_DROPPED, if limited { FLAG_LIMITED } else { 0 }, rule),
            EventKind::SynHeld { vlan: None } => (KIND_SYN_HELD, 0, 0),
            EventKind::SynHeld { vlan: Some((proto, tci)) } => (KIND_SYN_HELD, FLAG_VLAN, u32::from(proto) << 16 | u32::from(tci)),
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
        let unknown = EventHeader { kind: 4, ..h }.to_bytes().into_iter().chain([1, 2, 3]).collect::<Vec<u8>>();
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

    #[test]
    fn a_held_syn_gets_its_vlan_tag_back_behind_the_addresses() {
        let frame: Vec<u8> = (0u8..20).collect();
        let plain = EventHeader { ts_ns: 1, len: 20, wire_len: 20, kind: KIND_SYN_HELD, flags: 0, rule: 0 };
        let rec = [plain.to_bytes(), frame.clone()].concat();
        let e = Event::parse(&rec).expect("a record");
        assert_eq!(e.kind, EventKind::SynHeld { vlan: None });
        assert_eq!(&*e.whole_frame(), &frame[..]);
        assert_eq!(e.to_bytes(), rec);
        let tagged = EventHeader { flags: FLAG_VLAN, rule: 0x8100_2064, ..plain };
        let rec = [tagged.to_bytes(), frame.clone()].concat();
        let e = Event::parse(&rec).expect("a record");
        assert_eq!(e.kind, EventKind::SynHeld { vlan: Some((0x8100, 0x2064)) });
        let whole = e.whole_frame();
        assert_eq!(&whole[..12], &frame[..12]);
        assert_eq!(&whole[12..16], &[0x81, 0x00, 0x20, 0x64]);
        assert_eq!(&whole[16..], &frame[12..]);
        assert_eq!(e.to_bytes(), rec);
    }
}
