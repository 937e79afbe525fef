//! Placing references on the wire: the pieces of the body the scanner was fed with their
//! sequence numbers, and where an `<img>`'s fetching attributes lie in them
//! ([`EmbedRef::wire`], [`EmbedScanner::pending`]).

use super::tag::{Attr, Html, Tag};
use super::{EmbedRef, EmbedScanner, MAX_PIECES};

/// Whether an attribute name read so far (`name`, lowercased) may still become `src` or `srcset`.
fn may_be_fetch_attr(name: &[u8]) -> bool {
    !name.is_empty() && (b"srcset".starts_with(name))
}

impl EmbedScanner {
    /// Scan the next piece of the body, whose first byte has sequence number `seq`: the same as
    /// [`EmbedScanner::feed`], and `<img>` references also say where their fetching attributes
    /// lie on the wire ([`EmbedRef::wire`]). Pieces need not be contiguous in sequence space
    /// (chunk framing lies between them).
    pub fn feed_at(&mut self, data: &[u8], seq: u32, out: &mut Vec<EmbedRef>) {
        self.track = true;
        if data.is_empty() {
            return;
        }
        if self.state == Html::Text {
            self.pieces_n = 0;
        } else {
            // Keep the pieces from the one holding the current tag's `<`.
            let n = self.pieces_n as usize;
            let keep_from = (1..n).take_while(|&k| self.pieces[k].0 <= self.tag_start).last().unwrap_or(0);
            self.pieces.copy_within(keep_from..n, 0);
            self.pieces_n -= keep_from as u8;
        }
        if self.pieces_n as usize == MAX_PIECES {
            // The oldest piece goes: a tag that began in it can no longer be mapped.
            self.pieces.copy_within(1.., 0);
            self.pieces_n -= 1;
        }
        self.pieces[self.pieces_n as usize] = (self.offset, seq);
        self.pieces_n += 1;
        self.feed(data, out);
    }

    /// Where bytes already scanned may still have to be blanked: the sequence number of the
    /// first byte of the current `<img>` tag's fetching attributes (or of an attribute whose
    /// name may still become one), when the scan stopped inside such a tag. A segment that
    /// ends there cannot be sent until the tag's end decides. `None` when nothing scanned so
    /// far can change (or the scanner was not fed with sequence numbers).
    pub fn pending(&self) -> Option<u32> {
        if !self.track || self.kind != Tag::Img || self.fetch_overflow {
            return None;
        }
        let in_fetch_attr = match self.state {
            Html::AttrName => may_be_fetch_attr(&self.attr_name[..self.attr_len as usize]),
            Html::AfterAttrName | Html::BeforeAttrValue | Html::Quoted(_) | Html::Unquoted => matches!(self.attr, Attr::Src | Attr::Srcset),
            Html::BeforeAttrName => false,
            _ => return None,
        };
        let first = if self.fetch_n > 0 { Some(self.fetch[0].0) } else { in_fetch_attr.then_some(self.attr_start) };
        first.and_then(|off| self.seq_of(off))
    }

    /// Bytes of the body were lost (a capture gap): the tag under way cannot be placed on the
    /// wire any more (its bytes before and after the hole do not meet), so none of its
    /// attributes is blanked; later tags are placed from the next piece on.
    pub fn gap(&mut self) {
        self.pieces_n = 0;
        self.fetch_overflow = true;
    }

    /// The sequence number of the byte at body offset `off`, if a kept piece holds it.
    fn seq_of(&self, off: u64) -> Option<u32> {
        let pieces = &self.pieces[..self.pieces_n as usize];
        let k = pieces.iter().rposition(|p| p.0 <= off)?;
        Some(pieces[k].1.wrapping_add((off - pieces[k].0) as u32))
    }

    /// The wire ranges of body offsets `[from, to)`, split where the pieces are, merged where
    /// they are contiguous; appended to `out`. False if a piece no longer kept holds some.
    fn wire_ranges(&self, from: u64, to: u64, out: &mut Vec<(u32, u32)>) -> bool {
        let pieces = &self.pieces[..self.pieces_n as usize];
        let Some(mut k) = pieces.iter().rposition(|p| p.0 <= from) else { return false };
        let mut at = from;
        while at < to {
            let piece_end = pieces.get(k + 1).map_or(u64::MAX, |p| p.0);
            let end = to.min(piece_end);
            let seq = pieces[k].1.wrapping_add((at - pieces[k].0) as u32);
            let len = (end - at) as u32;
            match out.last_mut() {
                Some(last) if last.0.wrapping_add(last.1) == seq => last.1 += len,
                _ => out.push((seq, len)),
            }
            at = end;
            k += 1;
        }
        true
    }

    /// The wire ranges of the current `<img>`'s fetching attributes (empty if not all known).
    pub(super) fn fetch_wire(&self) -> Vec<(u32, u32)> {
        let mut out = Vec::new();
        if !self.track || self.fetch_overflow {
            return out;
        }
        for &(from, to) in &self.fetch[..self.fetch_n as usize] {
            if !self.wire_ranges(from, to, &mut out) {
                return Vec::new();
            }
        }
        out
    }
}
