//! Streaming scanner for embedded object references in HTML and CSS bodies.
//!
//! Container bodies are never stored: the scanner is a state machine that keeps only the tag
//! and attribute it is inside of, so a tag split across any number of packets is found the
//! same. It reports each reference with its position in the body (the offset of the tag),
//! which the embed-removal action uses to blank it in place.
//!
//! Speed comes from never looking at bytes one at a time where a search will do: text jumps to
//! the next `<`, comments to the next `>` (then looks back for `--`), `<script>`/`<style>`
//! contents to the next `<` that may start the closing tag, quoted attribute values to their
//! closing quote, CSS to the next `u` or `@` (the searches for the next `<`, an end tag's `>` and
//! a closing quote compare the first 16 bytes one by one before they call `memchr`: in
//! tag-dense HTML the byte is usually that close). Names and the few bytes between attributes go
//! through a byte-class table, and a tag is read from its name to its `>` in one loop whose
//! states follow each other as plain branches. Names are compared where they lie (copied only
//! when a packet boundary splits them), and only the values of attributes the tag can use are
//! buffered (`src` of an `<img>`, `style` and `background` of any tag): a `class` value is
//! skipped. The states and their transitions are those of the original byte-at-a-time
//! machine, which `reference` keeps for the differential tests.
//!
//! The parts: `tag` (HTML states, byte classes, tag and attribute names), `read_tag` (a tag
//! from its name to its `>`, and the references it makes), `css` (the CSS scanner), `urls`
//! (values to URLs), `on_wire` (where an `<img>`'s fetching attributes lie on the wire).

use memchr::memchr;

mod css;
mod on_wire;
mod read_tag;
mod tag;
mod urls;

#[cfg(test)]
mod differential;
#[cfg(test)]
mod reference;
#[cfg(test)]
mod tests;

use css::CssScanner;
use tag::{find_byte, Attr, Html, Tag, ATTRS};

/// What kind of object a reference fetches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EmbedKind {
    /// An image: `<img src>`/`srcset`, `<input type=image>`, a `<video poster>`, a `background`
    /// attribute.
    Image,
    /// `<script src>`.
    Script,
    /// `<link rel=stylesheet>` (not `alternate`), or a CSS `@import`.
    Stylesheet,
    /// `<link rel=icon>` or `apple-touch-icon`.
    Icon,
    /// `<iframe src>` or `<frame src>`.
    Frame,
    /// `<object data>`, `<embed src>`, or a `<link rel=preload>`/`modulepreload`.
    Object,
    /// `<video src>`, `<audio src>`, `<source src>`/`srcset`.
    Media,
    /// `url(...)` in CSS (an `@import` is reported as a [`EmbedKind::Stylesheet`]).
    CssUrl,
}

impl EmbedKind {
    /// The kind's name in records (lower snake case).
    pub fn name(self) -> &'static str {
        match self {
            EmbedKind::Image => "image",
            EmbedKind::Script => "script",
            EmbedKind::Stylesheet => "stylesheet",
            EmbedKind::Icon => "icon",
            EmbedKind::Frame => "frame",
            EmbedKind::Object => "object",
            EmbedKind::Media => "media",
            EmbedKind::CssUrl => "css_url",
        }
    }
}

/// One embedded object reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmbedRef {
    /// The URLs as written (not resolved); more than one when the browser picks one of them (`srcset`).
    pub urls: Vec<String>,
    /// What kind of object it fetches.
    pub kind: EmbedKind,
    /// Whether a browser rendering the page always fetches it (an `<img src>`), or only may (`<link rel=icon>`, CSS `url()`, `<source>`).
    pub required: bool,
    /// Body offset of the tag's `<` (or of the `url(` in CSS).
    pub start: u64,
    /// Body offset just past the tag's `>` (or the `)` in CSS).
    pub end: u64,
    /// Where an `<img>`'s fetching attributes (every `src` and `srcset`, from the name's first
    /// byte through the value's end) lie on the wire, as `(seq, len)` ranges in order: what
    /// content adaptation blanks to remove the element's object. Filled only by
    /// [`EmbedScanner::feed_at`], and left empty when the tag spans more pieces than the scanner
    /// keeps or has more such attributes than it keeps.
    pub wire: Vec<(u32, u32)>,
}

const MAX_NAME: usize = 16;
const MAX_VALUE: usize = 4096;
/// Fetching attributes of one `<img>` tracked for removal (a tag with more keeps its object).
const MAX_FETCH_ATTRS: usize = 4;
/// Pieces (segments, or chunks of them) of one tag whose sequence numbers are kept.
const MAX_PIECES: usize = 8;

/// The streaming scanner: feed it body bytes in order, collect references.
#[derive(Clone, Debug)]
pub struct EmbedScanner {
    css_only: bool,
    state: Html,
    offset: u64,
    tag_start: u64,
    /// The tag name, lowercased, its first `MAX_NAME` bytes; past the first byte, only filled
    /// when the name is split across pieces (else it is compared where it lies).
    tag: [u8; MAX_NAME],
    tag_len: u8,
    /// What the finished tag name is, and the attributes worth buffering for it.
    kind: Tag,
    wants: u16,
    /// The attribute name being read, lowercased, its first `MAX_NAME` bytes; like `tag`.
    attr_name: [u8; MAX_NAME],
    attr_len: u8,
    /// The current attribute, once its name is finished, and whether its value is buffered.
    attr: Attr,
    keep: bool,
    /// The values of this tag's stored attributes (`spans`), then the value being read.
    values: Vec<u8>,
    stored: usize,
    value_overflow: bool,
    spans: [(u32, u32); ATTRS],
    /// Which attributes are stored: the first occurrence of each that did not overflow.
    have: u16,
    css: CssScanner,
    /// Positions for removal (fed by `feed_at`): the current attribute's extent in body offsets
    /// (its name's first byte; just past its last byte so far), the `<img>`'s fetching
    /// attributes so far, and the pieces of the current tag as (body offset, sequence number).
    track: bool,
    attr_start: u64,
    attr_end: u64,
    fetch: [(u64, u64); MAX_FETCH_ATTRS],
    fetch_n: u8,
    fetch_overflow: bool,
    pieces: [(u64, u32); MAX_PIECES],
    pieces_n: u8,
}

impl EmbedScanner {
    /// A scanner for an HTML document.
    pub fn html() -> Self {
        EmbedScanner {
            css_only: false,
            state: Html::Text,
            offset: 0,
            tag_start: 0,
            tag: [0; MAX_NAME],
            tag_len: 0,
            kind: Tag::Other,
            wants: 0,
            attr_name: [0; MAX_NAME],
            attr_len: 0,
            attr: Attr::Other,
            keep: false,
            values: Vec::new(),
            stored: 0,
            value_overflow: false,
            spans: [(0, 0); ATTRS],
            have: 0,
            css: CssScanner::default(),
            track: false,
            attr_start: 0,
            attr_end: 0,
            fetch: [(0, 0); MAX_FETCH_ATTRS],
            fetch_n: 0,
            fetch_overflow: false,
            pieces: [(0, 0); MAX_PIECES],
            pieces_n: 0,
        }
    }

    /// A scanner for a CSS stylesheet.
    pub fn css() -> Self {
        EmbedScanner { css_only: true, ..Self::html() }
    }

    /// Body bytes scanned so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Scan the next piece of the body.
    pub fn feed(&mut self, data: &[u8], out: &mut Vec<EmbedRef>) {
        let base = self.offset;
        self.offset += data.len() as u64;
        if self.css_only {
            self.css.feed(data, base, out, false);
            return;
        }
        let mut i = 0;
        while i < data.len() {
            // Each arm consumes at least one byte, or the rest of `data`.
            i = match self.state {
                Html::Text => self.text(data, i, base, out),
                Html::TagOpen => {
                    self.tag_open(data[i], base + i as u64);
                    if self.state == Html::TagName {
                        self.in_tag(data, i + 1, base, out, Some(i))
                    } else {
                        i + 1
                    }
                }
                Html::MarkupDecl { dashes } => {
                    self.state = match (data[i], dashes) {
                        (b'-', 0) => Html::MarkupDecl { dashes: 1 },
                        (b'-', 1) => Html::Comment { dashes: 0 },
                        (b'>', _) => Html::Text,
                        _ => Html::Bogus,
                    };
                    i + 1
                }
                Html::Comment { dashes } => self.comment(data, i, dashes),
                Html::Bogus => match memchr(b'>', &data[i..]) {
                    Some(p) => {
                        self.state = Html::Text;
                        i + p + 1
                    }
                    None => data.len(),
                },
                Html::TagName
                | Html::BeforeAttrName
                | Html::AttrName
                | Html::AfterAttrName
                | Html::BeforeAttrValue
                | Html::Quoted(_)
                | Html::Unquoted => self.in_tag(data, i, base, out, None),
                Html::RawText { style, matched } => self.raw_text(data, i, base, style, matched, out),
            };
        }
    }

    /// Text, and the tags in it, as long as the state comes back to text: jump to each `<`
    /// and take the common tags (`<name`, `</name>`) without going through `feed`'s dispatch.
    #[inline(always)]
    fn text(&mut self, data: &[u8], mut i: usize, base: u64, out: &mut Vec<EmbedRef>) -> usize {
        loop {
            let Some(p) = find_byte(b'<', &data[i..]) else { return data.len() };
            let j = i + p;
            self.tag_start = base + j as u64;
            i = match data.get(j + 1) {
                Some(&b) if b.is_ascii_alphabetic() => {
                    self.tag_open(b, base + j as u64 + 1);
                    self.in_tag(data, j + 2, base, out, Some(j + 1))
                }
                Some(b'/') => match find_byte(b'>', &data[j + 2..]) {
                    Some(q) => j + 2 + q + 1,
                    None => {
                        self.state = Html::Bogus;
                        return data.len();
                    }
                },
                _ => {
                    self.state = Html::TagOpen;
                    return j + 1;
                }
            };
            if self.state != Html::Text {
                return i;
            }
        }
    }

    fn tag_open(&mut self, b: u8, offset: u64) {
        if b.is_ascii_alphabetic() {
            self.tag[0] = b.to_ascii_lowercase();
            self.tag_len = 1;
            self.have = 0;
            self.values.clear();
            self.stored = 0;
            self.fetch_n = 0;
            self.fetch_overflow = false;
            self.state = Html::TagName;
        } else if b == b'!' {
            self.state = Html::MarkupDecl { dashes: 0 };
        } else if b == b'/' || b == b'?' {
            self.state = Html::Bogus;
        } else if b == b'<' {
            self.tag_start = offset;
        } else {
            self.state = Html::Text;
        }
    }

    /// In a comment: a `>` closes it when two `-` of the comment directly precede it.
    fn comment(&mut self, data: &[u8], i: usize, carried: u8) -> usize {
        let rest = &data[i..];
        // Dashes directly before `rest[k]`, at most 2, counting those carried from earlier pieces.
        let dashes_before = |k: usize| {
            let mut n = 0;
            while n < 2 && n < k && rest[k - 1 - n] == b'-' {
                n += 1;
            }
            if n < 2 && n == k {
                (n as u8 + carried).min(2)
            } else {
                n as u8
            }
        };
        let mut from = 0;
        while let Some(p) = memchr(b'>', &rest[from..]) {
            let k = from + p;
            if dashes_before(k) >= 2 {
                self.state = Html::Text;
                return i + k + 1;
            }
            from = k + 1;
        }
        self.state = Html::Comment { dashes: dashes_before(rest.len()) };
        data.len()
    }

    /// Inside `<script>` or `<style>`: find where `</script` (`</style`), in any case, ends.
    /// Only a `<` can start it, and no other byte of it is a `<`, so a failed match resumes at
    /// the next `<`. Style contents go to the CSS scanner up to there.
    fn raw_text(&mut self, data: &[u8], i: usize, base: u64, style: bool, matched: u8, out: &mut Vec<EmbedRef>) -> usize {
        let close: &[u8] = if style { b"</style" } else { b"</script" };
        let rest = &data[i..];
        let mut m = matched as usize;
        let mut j = 0;
        let closed = loop {
            if m > 0 {
                while j < rest.len() && m < close.len() && rest[j].to_ascii_lowercase() == close[m] {
                    m += 1;
                    j += 1;
                }
                if m == close.len() {
                    break true;
                }
                if j == rest.len() {
                    break false;
                }
                m = 0;
            }
            match memchr(b'<', &rest[j..]) {
                Some(p) => {
                    j += p + 1;
                    m = 1;
                }
                None => {
                    j = rest.len();
                    break false;
                }
            }
        };
        if style {
            self.css.feed(&rest[..j], base + i as u64, out, false);
        }
        if closed {
            self.css.reset();
            self.state = Html::Bogus; // skip to the '>' of the end tag
        } else {
            self.state = Html::RawText { style, matched: m as u8 };
        }
        i + j
    }
}
