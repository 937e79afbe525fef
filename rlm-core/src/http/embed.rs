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
//! closing quote, CSS to the next `u` or `@`. Names and the few bytes between attributes go
//! through a byte-class table, and a tag is read from its name to its `>` in one loop whose
//! states follow each other as plain branches. Names are compared where they lie (copied only
//! when a packet boundary splits them), and only the values of attributes the tag can use are
//! buffered (`src` of an `<img>`, `style` and `background` of any tag): a `class` value is
//! skipped. The states and their transitions are those of the original byte-at-a-time
//! machine, which `reference` keeps for the differential tests.

use memchr::{memchr, memchr2, memchr3};

#[cfg(test)]
mod differential;
#[cfg(test)]
mod reference;

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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Html {
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
const SPACE: u8 = 1;
/// Ends a tag name: `>`, `/`, whitespace.
const NAME_END: u8 = 2;
/// Ends an attribute name: `>`, `=`, `/`, whitespace.
const ATTR_END: u8 = 4;
/// Ends an unquoted value: `>`, whitespace.
const UNQUOTED_END: u8 = 8;
/// Skipped before an attribute name: `/`, whitespace.
const BEFORE_ATTR: u8 = 16;

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

/// Index of the first byte of `s` in class `c`.
#[inline(always)]
fn find_class(s: &[u8], c: u8) -> Option<usize> {
    s.iter().position(|&b| CLASS[b as usize] & c != 0)
}

/// Index of the first byte of `s` not in class `c`.
#[inline(always)]
fn skip_class(s: &[u8], c: u8) -> Option<usize> {
    s.iter().position(|&b| CLASS[b as usize] & c == 0)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Attr {
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

const ATTRS: usize = Attr::Other as usize;

impl Attr {
    fn bit(self) -> u16 {
        1 << self as u16
    }
}

fn attr_of(name: &[u8]) -> Attr {
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
fn attr_of_any_case(name: &[u8]) -> Attr {
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
enum Tag {
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
    fn of(name: &[u8]) -> Tag {
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
    fn of_any_case(name: &[u8]) -> Tag {
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
    fn wants(self) -> u16 {
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

/// Finds `url(...)` and `@import "..."` in CSS, streaming.
#[derive(Clone, Debug, Default)]
struct CssScanner {
    state: Css,
    value: Vec<u8>,
    start: u64,
    overflow: bool,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Css {
    #[default]
    Normal,
    /// Matched this many bytes of `url(`.
    Url(u8),
    /// Matched this many bytes of `@import`.
    Import(u8),
    /// After `url(` or `@import`, skipping spaces before the value.
    BeforeValue { import: bool },
    /// Reading the value; the quote that ends it, or `)` / space when unquoted.
    Value { quote: Option<u8>, import: bool },
}

impl CssScanner {
    /// Scan `data`, whose first byte is at body offset `base`. Runs of bytes that cannot change
    /// the state (anything but `u`, `U`, `@` outside a reference; the inside of a value) are
    /// searched over; the bytes that can go through `feed_byte`.
    fn feed(&mut self, data: &[u8], base: u64, out: &mut Vec<EmbedRef>, required: bool) {
        let mut i = 0;
        while i < data.len() {
            let rest = &data[i..];
            let skip = match self.state {
                Css::Normal => memchr3(b'u', b'U', b'@', rest),
                Css::Value { quote: Some(q), .. } => memchr2(q, b'\n', rest),
                Css::Value { quote: None, .. } => rest.iter().position(|&b| b == b')' || b.is_ascii_whitespace()),
                _ => Some(0),
            };
            let Some(p) = skip else {
                if matches!(self.state, Css::Value { .. }) {
                    self.push(rest);
                }
                return;
            };
            if p > 0 && matches!(self.state, Css::Value { .. }) {
                self.push(&rest[..p]);
            }
            i += p;
            self.feed_byte(data[i], base + i as u64, out, required);
            i += 1;
        }
    }

    fn feed_byte(&mut self, b: u8, offset: u64, out: &mut Vec<EmbedRef>, required: bool) {
        const URL: &[u8] = b"url(";
        const IMPORT: &[u8] = b"@import";
        let lb = b.to_ascii_lowercase();
        match self.state {
            Css::Normal | Css::Url(_) | Css::Import(_) => {
                let (u, i) = match self.state {
                    Css::Url(n) => (n, 0),
                    Css::Import(n) => (0, n),
                    _ => (0, 0),
                };
                if u > 0 && lb == URL[u as usize] {
                    self.state = if u as usize + 1 == URL.len() { self.begin(offset + 1 - 4, false) } else { Css::Url(u + 1) };
                } else if i > 0 && lb == IMPORT[i as usize] {
                    self.state = if i as usize + 1 == IMPORT.len() { self.begin(offset + 1 - 7, true) } else { Css::Import(i + 1) };
                } else if lb == b'u' {
                    self.state = Css::Url(1);
                } else if lb == b'@' {
                    self.state = Css::Import(1);
                } else {
                    self.state = Css::Normal;
                }
            }
            Css::BeforeValue { import } => match b {
                b' ' | b'\t' | b'\r' | b'\n' => {}
                b'"' | b'\'' => self.state = Css::Value { quote: Some(b), import },
                b')' | b';' => self.state = Css::Normal,
                _ if import => {
                    // `@import url(...)`: hand the byte back to the `url(` matcher.
                    self.state = Css::Normal;
                    self.feed_byte(b, offset, out, required);
                }
                _ => {
                    self.push(&[b]);
                    self.state = Css::Value { quote: None, import };
                }
            },
            Css::Value { quote, import } => {
                let ends = match quote {
                    Some(q) => b == q,
                    None => b == b')' || b.is_ascii_whitespace(),
                };
                if ends {
                    if !self.overflow && !self.value.is_empty() {
                        let kind = if import { EmbedKind::Stylesheet } else { EmbedKind::CssUrl };
                        if let Some(url) = clean_url(&self.value) {
                            out.push(EmbedRef {
                                urls: vec![url],
                                kind,
                                required: required || import,
                                start: self.start,
                                end: offset + 1,
                                wire: Vec::new(),
                            });
                        }
                    }
                    self.state = Css::Normal;
                } else if b == b'\n' && quote.is_some() {
                    self.state = Css::Normal; // unterminated string
                } else {
                    self.push(&[b]);
                }
            }
        }
    }

    fn begin(&mut self, start: u64, import: bool) -> Css {
        self.value.clear();
        self.overflow = false;
        self.start = start;
        Css::BeforeValue { import }
    }

    /// Append to the value; past `MAX_VALUE` bytes it is only marked as overflowing.
    fn push(&mut self, s: &[u8]) {
        let room = MAX_VALUE - self.value.len();
        if s.len() > room {
            self.value.extend_from_slice(&s[..room]);
            self.overflow = true;
        } else {
            self.value.extend_from_slice(s);
        }
    }

    fn reset(&mut self) {
        self.state = Css::Normal;
        self.value.clear();
        self.overflow = false;
        self.start = 0;
    }
}

/// Decode the few HTML character references that occur in URLs, trim, and drop non-fetches.
fn clean_url(raw: &[u8]) -> Option<String> {
    let raw = raw.trim_ascii();
    let s = match std::str::from_utf8(raw) {
        Ok(s) => std::borrow::Cow::Borrowed(s),
        Err(_) => String::from_utf8_lossy(raw),
    };
    let s = if memchr(b'&', s.as_bytes()).is_some() {
        s.replace("&amp;", "&").replace("&#38;", "&").replace("&quot;", "\"").replace("&#39;", "'").replace("&lt;", "<").replace("&gt;", ">")
    } else {
        s.into_owned()
    };
    let b = s.as_bytes();
    let skipped = |p: &str| b.len() >= p.len() && b[..p.len()].eq_ignore_ascii_case(p.as_bytes());
    let scheme = b.first().is_some_and(u8::is_ascii_alphabetic);
    if s.is_empty() || s.starts_with('#') || scheme && ["data:", "javascript:", "about:", "mailto:", "blob:"].into_iter().any(skipped) {
        return None;
    }
    Some(s)
}

/// Candidates of a `srcset`: comma-separated "URL [descriptor]".
fn srcset_urls(v: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(v).split(',').filter_map(|c| c.split_ascii_whitespace().next()).filter_map(|u| clean_url(u.as_bytes())).collect()
}

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

/// Whether an attribute name read so far (`name`, lowercased) may still become `src` or `srcset`.
fn may_be_fetch_attr(name: &[u8]) -> bool {
    !name.is_empty() && (b"srcset".starts_with(name))
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
    fn fetch_wire(&self) -> Vec<(u32, u32)> {
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
            let Some(p) = memchr(b'<', &data[i..]) else { return data.len() };
            let j = i + p;
            self.tag_start = base + j as u64;
            i = match data.get(j + 1) {
                Some(&b) if b.is_ascii_alphabetic() => {
                    self.tag_open(b, base + j as u64 + 1);
                    self.in_tag(data, j + 2, base, out, Some(j + 1))
                }
                Some(b'/') => match memchr(b'>', &data[j + 2..]) {
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

    /// Inside a tag, from `self.state` (one of `TagName` to `Unquoted`) at `data[i]`, up to its
    /// `>` or the end of `data`. One pass through the loop reads one attribute; its states
    /// follow each other as plain branches, and `self.state` is written only where the tag or
    /// `data` ends. `name_from`: where in `data` the tag name began, when it began in this
    /// piece (`data[i - 1]`); then names are compared where they lie, not copied. Returns the
    /// index after the bytes consumed.
    #[inline(always)]
    fn in_tag(&mut self, data: &[u8], mut i: usize, base: u64, out: &mut Vec<EmbedRef>, name_from: Option<usize>) -> usize {
        let n = data.len();
        let mut st = self.state;
        macro_rules! end_tag {
            ($j:expr) => {{
                let j = $j;
                self.end_tag(base + j as u64 + 1, out);
                return j + 1;
            }};
        }
        macro_rules! pause {
            () => {{
                self.state = st;
                return n;
            }};
        }
        if st == Html::TagName {
            let rest = &data[i..];
            let Some(k) = find_class(rest, NAME_END) else {
                self.push_name(rest, true);
                pause!()
            };
            let j = i + k;
            self.kind = match name_from {
                Some(from) => Tag::of_any_case(&data[from..j]),
                None => {
                    self.push_name(&rest[..k], true);
                    Tag::of(&self.tag[..self.tag_len as usize])
                }
            };
            self.wants = self.kind.wants();
            if data[j] == b'>' {
                end_tag!(j)
            }
            i = j + 1;
            st = Html::BeforeAttrName;
        }
        // Where in `data` the current attribute name began, if it did in this piece.
        let mut attr_from = None;
        loop {
            if st == Html::BeforeAttrName {
                let Some(k) = skip_class(&data[i..], BEFORE_ATTR) else { pause!() };
                let j = i + k;
                if data[j] == b'>' {
                    end_tag!(j)
                }
                self.start_attr(data[j], base + j as u64);
                attr_from = Some(j);
                i = j + 1;
                st = Html::AttrName;
            }
            if st == Html::AttrName {
                let rest = &data[i..];
                let Some(k) = find_class(rest, ATTR_END) else {
                    self.push_name(rest, false);
                    pause!()
                };
                let j = i + k;
                self.attr_end = base + j as u64;
                // The name is complete: no later state adds to it.
                self.attr = match attr_from {
                    Some(from) => attr_of_any_case(&data[from..j]),
                    None => {
                        self.push_name(&rest[..k], false);
                        attr_of(&self.attr_name[..self.attr_len as usize])
                    }
                };
                attr_from = None;
                let bit = self.attr.bit();
                self.keep = self.wants & bit != 0 && self.have & bit == 0;
                i = j + 1;
                match data[j] {
                    b'>' => {
                        self.store_attr();
                        end_tag!(j)
                    }
                    b'=' => {
                        self.start_value(base + j as u64 + 1);
                        st = Html::BeforeAttrValue;
                    }
                    b'/' => {
                        self.store_attr();
                        st = Html::BeforeAttrName;
                        continue;
                    }
                    _ => st = Html::AfterAttrName,
                }
            }
            if st == Html::AfterAttrName {
                let Some(k) = skip_class(&data[i..], SPACE) else { pause!() };
                let j = i + k;
                i = j + 1;
                match data[j] {
                    b'>' => {
                        self.store_attr();
                        end_tag!(j)
                    }
                    b'=' => {
                        self.start_value(base + j as u64 + 1);
                        st = Html::BeforeAttrValue;
                    }
                    b => {
                        self.store_attr();
                        self.start_attr(b, base + j as u64);
                        attr_from = Some(j);
                        st = Html::AttrName;
                        continue;
                    }
                }
            }
            if st == Html::BeforeAttrValue {
                let Some(k) = skip_class(&data[i..], SPACE) else { pause!() };
                let j = i + k;
                i = j + 1;
                match data[j] {
                    q @ (b'"' | b'\'') => st = Html::Quoted(q),
                    b'>' => {
                        self.store_attr();
                        end_tag!(j)
                    }
                    b => {
                        self.push_value(&[b]);
                        st = Html::Unquoted;
                    }
                }
            }
            if let Html::Quoted(q) = st {
                let rest = &data[i..];
                let Some(k) = memchr(q, rest) else {
                    self.push_value(rest);
                    pause!()
                };
                self.push_value(&rest[..k]);
                self.attr_end = base + (i + k + 1) as u64;
                self.store_attr();
                i += k + 1;
                st = Html::BeforeAttrName;
            } else {
                debug_assert_eq!(st, Html::Unquoted);
                let rest = &data[i..];
                let end = find_class(rest, UNQUOTED_END);
                self.push_value(&rest[..end.unwrap_or(rest.len())]);
                let Some(k) = end else { pause!() };
                let j = i + k;
                self.attr_end = base + j as u64;
                self.store_attr();
                if data[j] == b'>' {
                    end_tag!(j)
                }
                i = j + 1;
                st = Html::BeforeAttrName;
            }
        }
    }

    /// Append to the tag name (`tag`) or attribute name, lowercased, up to `MAX_NAME` bytes.
    fn push_name(&mut self, s: &[u8], tag: bool) {
        let (buf, len) = if tag { (&mut self.tag, &mut self.tag_len) } else { (&mut self.attr_name, &mut self.attr_len) };
        let at = *len as usize;
        let take = s.len().min(MAX_NAME - at);
        for (d, c) in buf[at..at + take].iter_mut().zip(s) {
            *d = c.to_ascii_lowercase();
        }
        *len += take as u8;
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

    /// An attribute name begins with `b`, at body offset `offset`.
    fn start_attr(&mut self, b: u8, offset: u64) {
        self.attr_start = offset;
        self.attr_name[0] = b.to_ascii_lowercase();
        self.attr_len = 1;
        self.values.truncate(self.stored);
        self.value_overflow = false;
    }

    /// The current attribute has a value: its `=` ends just before body offset `after_eq`.
    fn start_value(&mut self, after_eq: u64) {
        self.attr_end = after_eq;
        self.values.truncate(self.stored);
        self.value_overflow = false;
    }

    /// Append to the current value if it is kept; past `MAX_VALUE` bytes it is only marked as
    /// overflowing.
    #[inline]
    fn push_value(&mut self, s: &[u8]) {
        if !self.keep {
            return;
        }
        let room = MAX_VALUE - (self.values.len() - self.stored);
        if s.len() > room {
            self.values.extend_from_slice(&s[..room]);
            self.value_overflow = true;
        } else {
            self.values.extend_from_slice(s);
        }
    }

    /// The current attribute is complete: keep its value if the tag wants it, this is its first
    /// occurrence, and it did not overflow.
    fn store_attr(&mut self) {
        if self.track && self.kind == Tag::Img && matches!(self.attr, Attr::Src | Attr::Srcset) {
            // Every occurrence: a browser takes the first, so blanking it alone would let a
            // second one fetch.
            match self.fetch.get_mut(self.fetch_n as usize) {
                Some(f) => {
                    *f = (self.attr_start, self.attr_end);
                    self.fetch_n += 1;
                }
                None => self.fetch_overflow = true,
            }
        }
        if self.keep && !self.value_overflow {
            self.spans[self.attr as usize] = (self.stored as u32, self.values.len() as u32);
            self.stored = self.values.len();
            self.have |= self.attr.bit();
        } else {
            self.values.truncate(self.stored);
        }
        self.attr = Attr::Other;
        self.keep = false;
    }

    fn get(&self, a: Attr) -> Option<&[u8]> {
        (self.have & a.bit() != 0).then(|| {
            let (s, e) = self.spans[a as usize];
            &self.values[s as usize..e as usize]
        })
    }

    fn end_tag(&mut self, end: u64, out: &mut Vec<EmbedRef>) {
        let start = self.tag_start;
        let wire = if self.kind == Tag::Img { self.fetch_wire() } else { Vec::new() };
        let mut emit = |urls: Vec<String>, kind: EmbedKind, required: bool, wire: Vec<(u32, u32)>| {
            if !urls.is_empty() {
                out.push(EmbedRef { urls, kind, required, start, end, wire });
            }
        };
        let one = |v: Option<&[u8]>| v.and_then(clean_url).into_iter().collect::<Vec<_>>();
        match self.kind {
            Tag::Img => {
                let mut urls = one(self.get(Attr::Src));
                for u in self.get(Attr::Srcset).map(srcset_urls).unwrap_or_default() {
                    if !urls.contains(&u) {
                        urls.push(u);
                    }
                }
                emit(urls, EmbedKind::Image, true, wire);
            }
            Tag::Script => emit(one(self.get(Attr::Src)), EmbedKind::Script, true, Vec::new()),
            Tag::Link => {
                let rel = String::from_utf8_lossy(self.get(Attr::Rel).unwrap_or_default()).to_ascii_lowercase();
                let rels: Vec<&str> = rel.split_ascii_whitespace().collect();
                let href = one(self.get(Attr::Href));
                if rels.contains(&"stylesheet") && !rels.contains(&"alternate") {
                    emit(href, EmbedKind::Stylesheet, true, Vec::new());
                } else if rels.iter().any(|r| *r == "icon" || *r == "apple-touch-icon") {
                    emit(href, EmbedKind::Icon, false, Vec::new());
                } else if rels.iter().any(|r| *r == "preload" || *r == "modulepreload") {
                    emit(href, EmbedKind::Object, false, Vec::new());
                }
            }
            Tag::Frame => emit(one(self.get(Attr::Src)), EmbedKind::Frame, true, Vec::new()),
            Tag::Object => emit(one(self.get(Attr::Data)), EmbedKind::Object, true, Vec::new()),
            Tag::Embed => emit(one(self.get(Attr::Src)), EmbedKind::Object, true, Vec::new()),
            Tag::Source => {
                let mut urls = one(self.get(Attr::Src));
                urls.extend(self.get(Attr::Srcset).map(srcset_urls).unwrap_or_default());
                emit(urls, EmbedKind::Media, false, Vec::new());
            }
            Tag::Media => {
                emit(one(self.get(Attr::Src)), EmbedKind::Media, false, Vec::new());
                emit(one(self.get(Attr::Poster)), EmbedKind::Image, false, Vec::new());
            }
            Tag::Input => {
                if self.get(Attr::Type).is_some_and(|t| t.eq_ignore_ascii_case(b"image")) {
                    emit(one(self.get(Attr::Src)), EmbedKind::Image, true, Vec::new());
                }
            }
            Tag::Style | Tag::Other => {}
        }
        if let Some(u) = self.get(Attr::Background).and_then(clean_url) {
            out.push(EmbedRef { urls: vec![u], kind: EmbedKind::Image, required: true, start, end, wire: Vec::new() });
        }
        if let Some(style) = self.get(Attr::Style) {
            let mut css = CssScanner::default();
            let first = out.len();
            css.feed(style, 0, out, true);
            for r in &mut out[first..] {
                r.start = start;
                r.end = end;
            }
        }
        self.state = match self.kind {
            Tag::Script => Html::RawText { style: false, matched: 0 },
            Tag::Style => {
                self.css.reset();
                Html::RawText { style: true, matched: 0 }
            }
            _ => Html::Text,
        };
        self.have = 0;
        self.values.clear();
        self.values.shrink_to(MAX_VALUE);
        self.stored = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn scan(body: &[u8], step: usize) -> Vec<EmbedRef> {
        let mut s = EmbedScanner::html();
        let mut out = Vec::new();
        for piece in body.chunks(step.max(1)) {
            s.feed(piece, &mut out);
        }
        out
    }

    fn urls(refs: &[EmbedRef]) -> Vec<String> {
        refs.iter().map(|r| r.urls.join("|")).collect()
    }

    const PAGE: &[u8] = br#"<!DOCTYPE html><html><head>
<link rel="stylesheet" href="/css/site.css"><link rel="shortcut icon" href=/favicon.ico>
<link rel=canonical href="/x"><style>body { background: url("/img/bg.png") } @import '/css/more.css';</style>
<script src="/js/app.js"></script><script>var s = "<img src='/not/this.gif'>";</script>
</head><body background="/img/tile.gif">
<!-- <img src="/commented.gif"> -->
<IMG SRC="/img/a.gif" alt="a > b"><img srcset="/img/b-1x.png 1x, /img/b-2x.png 2x" src='/img/b.png'>
<iframe src="/ad.html"></iframe><object data="/movie.swf"></object><embed src="/e.swf">
<picture><source srcset="/img/c.webp"><img src="/img/c.jpg"></picture>
<input type="image" src="/btn.gif"><div style="background-image:url(/img/div.png)">x</div>
<img src="data:image/gif;base64,AAAA"><img src="/a?x=1&amp;y=2"><a href="/next.html">next</a>
</body></html>"#;

    #[test]
    fn finds_every_kind_of_reference_and_nothing_else() {
        let got = urls(&scan(PAGE, PAGE.len()));
        assert_eq!(
            got,
            vec![
                "/css/site.css",
                "/favicon.ico",
                "/img/bg.png",
                "/css/more.css",
                "/js/app.js",
                "/img/tile.gif",
                "/img/a.gif",
                "/img/b.png|/img/b-1x.png|/img/b-2x.png",
                "/ad.html",
                "/movie.swf",
                "/e.swf",
                "/img/c.webp",
                "/img/c.jpg",
                "/btn.gif",
                "/img/div.png",
                "/a?x=1&y=2",
            ]
        );
    }

    #[test]
    fn same_result_whatever_the_packet_boundaries() {
        let whole = scan(PAGE, PAGE.len());
        for step in [1, 2, 3, 7, 13, 64, 100] {
            assert_eq!(scan(PAGE, step), whole, "step {step}");
        }
    }

    #[test]
    fn offsets_cover_the_tag() {
        let body = b"0123<img src=\"/a.gif\">tail";
        let r = &scan(body, 5)[0];
        assert_eq!(&body[r.start as usize..r.end as usize], b"<img src=\"/a.gif\">");
    }

    #[test]
    fn required_flags() {
        let refs = scan(PAGE, 9);
        let find = |u: &str| refs.iter().find(|r| r.urls[0] == u).unwrap().required;
        assert!(find("/img/a.gif"));
        assert!(find("/css/site.css"));
        assert!(!find("/favicon.ico"));
        assert!(!find("/img/bg.png"));
        assert!(find("/img/div.png"));
    }

    #[test]
    fn css_scanner() {
        let mut s = EmbedScanner::css();
        let mut out = Vec::new();
        for b in br#"a{background:URL( '/x.png' )} @import url(/y.css); b{src:url(/f.woff2)} c{background:url(data:x)}"#.chunks(4) {
            s.feed(b, &mut out);
        }
        assert_eq!(urls(&out), vec!["/x.png", "/y.css", "/f.woff2"]);
    }

    /// Feed `body` to a tracking scanner in pieces of `step` bytes laid on a wire where `junk`
    /// (chunk framing, say) lies between pieces; return the wire, and the references with the
    /// bytes their wire ranges cover there.
    fn scan_on_wire(body: &[u8], step: usize, junk: &[u8], seq0: u32) -> (Vec<u8>, Vec<(EmbedRef, Vec<u8>)>) {
        let mut s = EmbedScanner::html();
        let (mut out, mut wire) = (Vec::new(), Vec::new());
        for piece in body.chunks(step.max(1)) {
            wire.extend_from_slice(junk);
            s.feed_at(piece, seq0.wrapping_add(wire.len() as u32), &mut out);
            wire.extend_from_slice(piece);
        }
        let covered = out
            .into_iter()
            .map(|r| {
                let bytes = r.wire.iter().flat_map(|&(seq, len)| {
                    let at = seq.wrapping_sub(seq0) as usize;
                    wire[at..at + len as usize].to_vec()
                });
                let bytes = bytes.collect();
                (r, bytes)
            })
            .collect();
        (wire, covered)
    }

    const IMGS: &[u8] = br#"<p>x</p><IMG SRC="/img/a.gif" alt="a > b"><img alt=x srcset="/b-1x.png 1x, /b-2x.png 2x" src='/b.png'>
<img src=/c.gif><img
  src = "/d.gif"><img src="/e.gif" src="/e2.gif"><img alt="no src"><img sources=x src=/f.gif><script src="/s.js"></script>"#;

    #[test]
    fn wire_ranges_cover_exactly_each_imgs_fetching_attributes_whatever_the_pieces() {
        let expect: Vec<&[u8]> = vec![
            b"SRC=\"/img/a.gif\"",
            b"srcset=\"/b-1x.png 1x, /b-2x.png 2x\"src='/b.png'",
            b"src=/c.gif",
            b"src = \"/d.gif\"",
            b"src=\"/e.gif\"src=\"/e2.gif\"",
            b"src=/f.gif",
        ];
        for (junk, seq0) in [(&b""[..], 1000u32), (&b"\r\n1f40\r\n"[..], u32::MAX - 50)] {
            for step in 1..=IMGS.len() {
                let (_, refs) = scan_on_wire(IMGS, step, junk, seq0);
                let imgs: Vec<&Vec<u8>> = refs.iter().filter(|(r, _)| r.kind == EmbedKind::Image).map(|(_, b)| b).collect();
                assert_eq!(imgs.len(), expect.len());
                for (got, want) in imgs.iter().zip(&expect) {
                    // Small pieces may leave a tag unmappable (more than 8 of them), never wrong.
                    if step >= 12 || !got.is_empty() {
                        assert_eq!(String::from_utf8_lossy(got), String::from_utf8_lossy(want), "step {step}, junk {junk:?}");
                    }
                }
                assert!(refs.iter().filter(|(r, _)| r.kind != EmbedKind::Image).all(|(r, _)| r.wire.is_empty()), "step {step}");
            }
            // With nothing between the pieces, the ranges do not depend on the pieces at all.
            if junk.is_empty() {
                let whole: Vec<Vec<(u32, u32)>> = scan_on_wire(IMGS, IMGS.len(), junk, seq0).1.into_iter().map(|(r, _)| r.wire).collect();
                for step in [12, 17, 100] {
                    let cut: Vec<Vec<(u32, u32)>> = scan_on_wire(IMGS, step, junk, seq0).1.into_iter().map(|(r, _)| r.wire).collect();
                    assert_eq!(cut, whole, "step {step}");
                }
            }
        }
    }

    #[test]
    fn a_tag_across_a_gap_is_not_placed_and_the_next_one_is() {
        let mut s = EmbedScanner::html();
        let mut out = Vec::new();
        s.feed_at(b"<p><img src=\"/a", 1000, &mut out);
        s.gap();
        s.feed_at(b".gif\"><img src=/b.gif>", 1100, &mut out);
        assert_eq!(out.len(), 2);
        assert!(out[0].wire.is_empty(), "{:?}", out[0].wire);
        assert_eq!(out[1].wire, [(1100 + 6 + 5, 10)]);
    }

    #[test]
    fn a_tag_over_more_pieces_than_kept_cannot_be_mapped() {
        let body = b"<img alt=\"one two three four five six seven eight\" src=\"/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.gif\">";
        // The attribute spans 13 pieces of 4 bytes: its first ones are gone by its end.
        let (_, refs) = scan_on_wire(body, 4, b"", 0);
        assert_eq!(refs.len(), 1);
        assert!(refs[0].0.wire.is_empty(), "{:?}", refs[0].0.wire);
        // In 8 pieces of 7 bytes it is still mapped, though the tag's `<` lies in a piece let go.
        let (_, refs) = scan_on_wire(body, 7, b"", 0);
        assert!(refs[0].1.starts_with(b"src=\"/a") && refs[0].1.ends_with(b".gif\""), "{}", String::from_utf8_lossy(&refs[0].1));
        // Fed whole, or without sequence numbers, the reference is the same but for `wire`.
        let (_, whole) = scan_on_wire(body, body.len(), b"", 0);
        assert_eq!(whole[0].1, refs[0].1);
        assert_eq!(scan(body, 4)[0].urls, whole[0].0.urls);
    }

    #[test]
    fn pending_says_from_where_a_cut_tag_may_still_be_blanked() {
        let pending_after = |prefix: &[u8]| {
            let mut s = EmbedScanner::html();
            s.feed_at(prefix, 500, &mut Vec::new());
            s.pending()
        };
        let at = |prefix: &[u8], needle: &[u8]| Some(500 + prefix.windows(needle.len()).position(|w| w == needle).unwrap() as u32);
        for cut in [
            &b"x<img alt=\"a\" sr"[..],
            b"x<img alt=\"a\" src",
            b"x<img alt=\"a\" src=",
            b"x<img alt=\"a\" src=\"/a",
            b"x<img alt=\"a\" src=\"/a\" ",
            b"x<img alt=\"a\" src=\"/a\" width",
        ] {
            assert_eq!(pending_after(cut), at(cut, b"sr"), "{}", String::from_utf8_lossy(cut));
        }
        for cut in
            [&b"x<im"[..], b"x<img", b"x<img alt=\"a\" ", b"x<img alt=\"a", b"x<img style=", b"x<a href=\"/", b"x<img src=/a>", b"x<script src=\"/a"]
        {
            assert_eq!(pending_after(cut), None, "{}", String::from_utf8_lossy(cut));
        }
        // Without sequence numbers nothing is tracked.
        let mut s = EmbedScanner::html();
        s.feed(b"x<img src=\"/a", &mut Vec::new());
        assert_eq!(s.pending(), None);
    }

    #[test]
    fn huge_attribute_values_are_dropped_not_buffered() {
        let mut body = b"<img src=\"".to_vec();
        body.extend(std::iter::repeat_n(b'a', 100_000));
        body.extend_from_slice(b"\"><img src=/ok.gif>");
        let r = scan(&body, 1000);
        assert_eq!(urls(&r), vec!["/ok.gif"]);
    }
}
