//! `REWRITE EMBEDS` (004 section 5; the request nodes of Figure 3): the request of an embedded
//! image is rewritten in place to the smaller variant the operator's mapping names, as the
//! request passes, so the server answers with the variant. The target is overwritten with one
//! of the same length (`/img/large/3.gif` → `/ims/large/3.gif`): the request stays valid HTTP
//! and the connection's sequence space is unchanged. What was written is kept in the
//! connection's client-to-server [`super::record::Record`], so a resent request is rewritten
//! alike.

/// Why a request chosen for a rewrite went on as it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Missed {
    /// The target is not wholly in the segment that completed the request head (the head came
    /// in several segments and the target in one that went on already).
    NotInSegment,
    /// The bytes there are not `METHOD SP target` as parsed (odd spacing in the request line).
    Unplaced,
}

/// Where a request's target lies on the wire and what it becomes: `(seq, bytes)`. `payload` is
/// the segment that completed the request head, starting at `payload_seq`; the request line
/// starts at `request_seq`; `method` and `target` are as parsed, `new` is the variant (as long
/// as `target`).
pub fn target_edit(payload: &[u8], payload_seq: u32, request_seq: u32, method: &str, target: &str, new: &str) -> Result<(u32, Box<[u8]>), Missed> {
    if new.len() != target.len() {
        return Err(Missed::Unplaced);
    }
    let seq = request_seq.wrapping_add(method.len() as u32 + 1);
    // Offset in the segment; before its start (negative) means an earlier segment.
    let at = seq.wrapping_sub(payload_seq) as i32 as i64;
    if at < 0 || at as usize + target.len() > payload.len() {
        return Err(Missed::NotInSegment);
    }
    let at = at as usize;
    // The space before it, when it is in this segment too, and the target as parsed.
    if (at > 0 && payload[at - 1] != b' ') || &payload[at..at + target.len()] != target.as_bytes() {
        return Err(Missed::Unplaced);
    }
    Ok((seq, new.as_bytes().into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_is_found_after_the_method_and_checked() {
        let req = b"GET /img/large/3.gif HTTP/1.1\r\nHost: shop\r\n\r\n";
        let (seq, bytes) = target_edit(req, 5000, 5000, "GET", "/img/large/3.gif", "/ims/large/3.gif").unwrap();
        assert_eq!((seq, &*bytes), (5004, b"/ims/large/3.gif".as_slice()));
        // The second of two pipelined requests in one segment.
        let two = [b"GET /a HTTP/1.1\r\n\r\n".as_slice(), req].concat();
        assert_eq!(target_edit(&two, 5000, 5019, "GET", "/img/large/3.gif", "/ims/large/3.gif").unwrap().0, 5023);
        // Across the 2^32 wrap.
        assert_eq!(target_edit(req, u32::MAX - 1, u32::MAX - 1, "GET", "/img/large/3.gif", "/ims/large/3.gif").unwrap().0, 2);
    }

    #[test]
    fn a_target_out_of_the_segment_or_not_as_parsed_is_missed() {
        let req = b"GET /img/large/3.gif HTTP/1.1\r\nHost: shop\r\n\r\n";
        // The request line came in an earlier segment: this one starts after it.
        assert_eq!(target_edit(&req[22..], 5022, 5000, "GET", "/img/large/3.gif", "/ims/large/3.gif"), Err(Missed::NotInSegment));
        // Cut inside the target.
        assert_eq!(target_edit(&req[..10], 5000, 5000, "GET", "/img/large/3.gif", "/ims/large/3.gif"), Err(Missed::NotInSegment));
        // Cut just before it: the segment starts with the target.
        assert_eq!(target_edit(&req[4..], 5004, 5000, "GET", "/img/large/3.gif", "/ims/large/3.gif").unwrap().0, 5004);
        let spaced = b"GET  /img/large/3.gif HTTP/1.1\r\n\r\n";
        assert_eq!(target_edit(spaced, 0, 0, "GET", "/img/large/3.gif", "/ims/large/3.gif"), Err(Missed::Unplaced));
        assert_eq!(target_edit(req, 5000, 5000, "GET", "/img/large/3.gif", "/ims/3.gif"), Err(Missed::Unplaced));
    }
}
