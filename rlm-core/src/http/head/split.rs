//! Splitting a head: where it ends in a byte stream, and its lines, read as Zeek's HTTP analyzer
//! and lenient servers read them, split into the start line and the header fields.

use super::Anomalies;

/// Index just past the end of a head (the empty line), searching from `from`.
/// Accepts CRLF and bare LF line endings.
pub fn find_head_end(buf: &[u8], from: usize) -> Option<usize> {
    let start = from.saturating_sub(3);
    let mut i = start;
    while let Some(p) = memchr::memchr(b'\n', &buf[i..]) {
        let nl = i + p;
        match buf.get(nl + 1) {
            Some(b'\n') => return Some(nl + 2),
            Some(b'\r') if buf.get(nl + 2) == Some(&b'\n') => return Some(nl + 3),
            _ => {}
        }
        i = nl + 1;
    }
    None
}

/// One header field of a head: its name and value with surrounding blanks trimmed (folded
/// continuation lines joined with a space).
#[derive(Clone, Debug)]
pub struct Field<'a> {
    /// The field's name as sent.
    pub name: &'a [u8],
    /// The field's value (a folded continuation joined to it with a space).
    pub value: std::borrow::Cow<'a, [u8]>,
}

/// A head split into its start line and fields, read the way Zeek's HTTP analyzer and lenient
/// servers read it: lines end with CRLF or a bare LF; a line that starts with a blank continues
/// the field before it (obsolete folding, flagged); a line without a colon is skipped (flagged).
pub(super) struct SplitHead<'a> {
    /// The start line (the first line that is not empty).
    pub(super) start: &'a [u8],
    /// The header fields, in order.
    pub(super) fields: Vec<Field<'a>>,
    /// Folded lines and lines without a colon.
    pub(super) anomalies: Anomalies,
}

/// A space or a tab.
pub(super) fn is_blank(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// `v` without the blanks at its start and end.
pub(super) fn trim_blanks(mut v: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = v {
        if !is_blank(*first) {
            break;
        }
        v = rest;
    }
    while let [rest @ .., last] = v {
        if !is_blank(*last) {
            break;
        }
        v = rest;
    }
    v
}

fn lines(head: &[u8]) -> impl Iterator<Item = &[u8]> {
    let body = head.strip_suffix(b"\n").unwrap_or(head);
    body.split(|b| *b == b'\n').map(|l| l.strip_suffix(b"\r").unwrap_or(l))
}

/// Split a head into its start line and fields (see [`SplitHead`]).
pub(super) fn split_head(head: &[u8]) -> SplitHead<'_> {
    let mut it = lines(head).skip_while(|l| l.is_empty());
    let start = it.next().unwrap_or(&[]);
    let mut fields: Vec<Field<'_>> = Vec::new();
    let mut anomalies = Anomalies::default();
    for line in it {
        if line.is_empty() {
            break;
        }
        if is_blank(line[0]) {
            if let Some(last) = fields.last_mut() {
                anomalies.insert(Anomalies::OBS_FOLD);
                let v = last.value.to_mut();
                v.push(b' ');
                v.extend_from_slice(trim_blanks(line));
                continue;
            }
        }
        match memchr::memchr(b':', line) {
            Some(c) if c > 0 => fields.push(Field { name: trim_blanks(&line[..c]), value: trim_blanks(&line[c + 1..]).into() }),
            _ => anomalies.insert(Anomalies::BAD_HEADER_LINE),
        }
    }
    SplitHead { start, fields, anomalies }
}
