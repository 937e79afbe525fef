//! Bytes as Zeek's logs write them: a request target percent-decoded as Zeek decodes its `uri`
//! field, and bytes that are not UTF-8 as `\xNN`.

/// Percent-decode a request target the way Zeek does for its `uri` field: `%XX` and `%uXXXX`
/// are decoded, a doubled `%` loses one, and malformed escapes are kept as written. Bytes that
/// do not form UTF-8 are written as `\xNN`, as Zeek's logs write them.
pub fn unescape_uri(uri: &str) -> String {
    let b = uri.as_bytes();
    if !b.contains(&b'%') {
        return uri.to_string();
    }
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out: Vec<u8> = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'%' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        let rest = &b[i + 1..];
        match rest {
            [] => {
                out.push(b'%');
                i += 1;
            }
            [c] => {
                out.extend_from_slice(&[b'%', *c]);
                i += 2;
            }
            [b'%', ..] => i += 1,
            [h, l, ..] if hex(*h).is_some() && hex(*l).is_some() => {
                out.push(hex(*h).unwrap_or(0) << 4 | hex(*l).unwrap_or(0));
                i += 3;
            }
            [b'u', a, b2, c, d, ..] if [a, b2, c, d].iter().all(|x| hex(**x).is_some()) => {
                let (a, b2, c, d) = (hex(*a).unwrap_or(0), hex(*b2).unwrap_or(0), hex(*c).unwrap_or(0), hex(*d).unwrap_or(0));
                if !(a == 0 && b2 == 0) {
                    out.push(a << 4 | b2);
                }
                out.push(c << 4 | d);
                i += 6;
            }
            [c, ..] => {
                out.extend_from_slice(&[b'%', *c]);
                i += 2;
            }
        }
    }
    escape_bytes(&out)
}

/// Bytes as text: valid UTF-8 as it is, anything else as `\xNN`.
pub fn escape_bytes(b: &[u8]) -> String {
    escape_bytes_past(b, usize::MAX)
}

/// [`escape_bytes`], stopping once the text is longer than `limit` bytes (it is then at most a
/// character or an escape, 4 bytes, longer): a field rlm keeps only `limit` bytes of costs no
/// more than that to escape, whatever its length on the wire (a 30 KiB target that is not UTF-8
/// took a millisecond, escaped whole into 120 KiB, twice).
pub fn escape_bytes_past(b: &[u8], limit: usize) -> String {
    let mut s = String::with_capacity(b.len().min(limit.saturating_add(4)));
    for chunk in b.utf8_chunks() {
        let valid = chunk.valid();
        if s.len() + valid.len() > limit {
            // Up to the first character boundary past the limit.
            let mut end = limit.saturating_sub(s.len()).saturating_add(1).min(valid.len());
            while !valid.is_char_boundary(end) {
                end += 1;
            }
            s.push_str(&valid[..end]);
            return s;
        }
        s.push_str(valid);
        for &x in chunk.invalid() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            s.push_str("\\x");
            s.push(char::from(HEX[usize::from(x >> 4)]));
            s.push(char::from(HEX[usize::from(x & 15)]));
            if s.len() > limit {
                return s;
            }
        }
    }
    s
}
