//! What the scanner knows of HTML: its states, the byte classes inside a tag, and the tag and
//! attribute names that matter.

/// Where the scanner is in the HTML, between pieces of the body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Html {
    Text,
    TagOpen,
    MarkupDecl {
        dashes: u8,
    },
    /// `dashes`: how many `-` (at most 2) directly precede the next byte inside the comment.
    Comment {
        dashes: u8,
    },
    Bogus,
    TagName,
    BeforeAttrName,
    AttrName,
    AfterAttrName,
    BeforeAttrValue,
    Quoted(u8),
    Unquoted,
    /// Inside `<script>` or `<style>`; `matched` bytes of the closing tag seen so far.
    RawText {
        style: bool,
        matched: u8,
    },
}

/// Byte classes inside a tag (HTML whitespace is space, tab, CR, LF, FF).
pub(super) const SPACE: u8 = 1;
/// Ends a tag name: `>`, `/`, whitespace.
pub(super) const NAME_END: u8 = 2;
/// Ends an attribute name: `>`, `=`, `/`, whitespace.
pub(super) const ATTR_END: u8 = 4;
/// Ends an unquoted value: `>`, whitespace.
pub(super) const UNQUOTED_END: u8 = 8;
/// Skipped before an attribute name: `/`, whitespace.
pub(super) const BEFORE_ATTR: u8 = 16;

static CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let spaces = [b' ', b'\t', b'\r', b'\n', b'\x0c'];
    let mut k = 0;
    while k < spaces.len() {
        t[spaces[k] as usize] = SPACE | NAME_END | ATTR_END | UNQUOTED_END | BEFORE_ATTR;
        k += 1;
    }
    t[b'>' as usize] = NAME_END | ATTR_END | UNQUOTED_END;
    t[b'/' as usize] = NAME_END | ATTR_END | BEFORE_ATTR;
    t[b'=' as usize] = ATTR_END;
    t
};

/// Index of the first `b` in `s`: its first [`NEAR`] bytes one by one (in tag-dense HTML the
/// next `<`, `>` or quote is usually a few bytes away, closer than a vector search's setup
/// pays for), then `memchr` over the rest.
#[inline(always)]
pub(super) fn find_byte(b: u8, s: &[u8]) -> Option<usize> {
    let near = s.len().min(NEAR);
    if let Some(k) = s[..near].iter().position(|&x| x == b) {
        return Some(k);
    }
    memchr::memchr(b, &s[near..]).map(|k| k + near)
}

/// How many bytes [`find_byte`] compares one by one before it searches.
pub(super) const NEAR: usize = 16;

/// Index of the first byte of `s` in class `c`.
#[inline(always)]
pub(super) fn find_class(s: &[u8], c: u8) -> Option<usize> {
    s.iter().position(|&b| CLASS[b as usize] & c != 0)
}

/// Index of the first byte of `s` not in class `c`.
#[inline(always)]
pub(super) fn skip_class(s: &[u8], c: u8) -> Option<usize> {
    s.iter().position(|&b| CLASS[b as usize] & c == 0)
}

/// The attributes that mean something to the scanner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Attr {
    Src,
    Href,
    Rel,
    Srcset,
    Data,
    Style,
    Background,
    Type,
    Poster,
    Other,
}

/// Slots in `EmbedScanner`'s `spans`: one for each attribute but `Other` (never stored).
pub(super) const ATTRS: usize = Attr::Other as usize;

impl Attr {
    /// The attribute's bit in a set of attributes (`EmbedScanner`'s `have` and `wants`).
    pub(super) fn bit(self) -> u16 {
        1 << self as u16
    }
}

/// The attribute named `name` (lowercased).
pub(super) fn attr_of(name: &[u8]) -> Attr {
    match name {
        b"src" => Attr::Src,
        b"href" => Attr::Href,
        b"rel" => Attr::Rel,
        b"srcset" => Attr::Srcset,
        b"data" => Attr::Data,
        b"style" => Attr::Style,
        b"background" => Attr::Background,
        b"type" => Attr::Type,
        b"poster" => Attr::Poster,
        _ => Attr::Other,
    }
}

/// `attr_of` of the name lowercased and cut to `MAX_NAME` bytes (no name that long is known).
pub(super) fn attr_of_any_case(name: &[u8]) -> Attr {
    let is = |known: &[u8]| name.eq_ignore_ascii_case(known);
    match name.len() {
        3 if is(b"src") => Attr::Src,
        3 if is(b"rel") => Attr::Rel,
        4 if is(b"href") => Attr::Href,
        4 if is(b"data") => Attr::Data,
        4 if is(b"type") => Attr::Type,
        5 if is(b"style") => Attr::Style,
        6 if is(b"srcset") => Attr::Srcset,
        6 if is(b"poster") => Attr::Poster,
        10 if is(b"background") => Attr::Background,
        _ => Attr::Other,
    }
}

/// The tags that mean something to the scanner; every other tag can only carry `style` and
/// `background`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Tag {
    Img,
    Script,
    Link,
    Frame,
    Object,
    Embed,
    Source,
    Media,
    Input,
    Style,
    Other,
}

impl Tag {
    /// The tag named `name` (lowercased).
    pub(super) fn of(name: &[u8]) -> Tag {
        match name {
            b"img" => Tag::Img,
            b"script" => Tag::Script,
            b"link" => Tag::Link,
            b"iframe" | b"frame" => Tag::Frame,
            b"object" => Tag::Object,
            b"embed" => Tag::Embed,
            b"source" => Tag::Source,
            b"video" | b"audio" => Tag::Media,
            b"input" => Tag::Input,
            b"style" => Tag::Style,
            _ => Tag::Other,
        }
    }

    /// `Tag::of` the name lowercased and cut to `MAX_NAME` bytes (no name that long is known).
    pub(super) fn of_any_case(name: &[u8]) -> Tag {
        let is = |known: &[u8]| name.eq_ignore_ascii_case(known);
        match name.len() {
            3 if is(b"img") => Tag::Img,
            4 if is(b"link") => Tag::Link,
            5 if is(b"frame") => Tag::Frame,
            5 if is(b"embed") => Tag::Embed,
            5 if is(b"video") || is(b"audio") => Tag::Media,
            5 if is(b"input") => Tag::Input,
            5 if is(b"style") => Tag::Style,
            6 if is(b"script") => Tag::Script,
            6 if is(b"iframe") => Tag::Frame,
            6 if is(b"object") => Tag::Object,
            6 if is(b"source") => Tag::Source,
            _ => Tag::Other,
        }
    }

    /// The attributes whose values `end_tag` reads for this tag.
    pub(super) fn wants(self) -> u16 {
        use Attr::*;
        let own = match self {
            Tag::Img | Tag::Source => Src.bit() | Srcset.bit(),
            Tag::Script | Tag::Frame | Tag::Embed => Src.bit(),
            Tag::Link => Rel.bit() | Href.bit(),
            Tag::Object => Data.bit(),
            Tag::Media => Src.bit() | Poster.bit(),
            Tag::Input => Type.bit() | Src.bit(),
            Tag::Style | Tag::Other => 0,
        };
        own | Style.bit() | Background.bit()
    }
}
