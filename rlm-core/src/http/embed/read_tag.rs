//! Reading one tag, from its name to its `>`: the names are matched, the values of the
//! attributes the tag can use are buffered, an `<img>`'s fetching attributes are placed, and at
//! the `>` the tag's references are reported.

use super::css::CssScanner;
use super::tag::{
    attr_of, attr_of_any_case, find_byte, find_class, skip_class, Attr, Html, Tag, ATTR_END, BEFORE_ATTR, NAME_END, SPACE, UNQUOTED_END,
};
use super::urls::{clean_url, srcset_urls};
use super::{EmbedKind, EmbedRef, EmbedScanner, MAX_NAME, MAX_VALUE};

/// Where `in_tag` is in the piece of the body it reads.
struct TagCursor<'d> {
    /// The piece of the body.
    data: &'d [u8],
    /// Body offset of `data[0]`.
    base: u64,
    /// Index in `data` of the next byte to read.
    i: usize,
    /// The state at `data[i]`; written back to the scanner only where `data` ends (`pause`).
    st: Html,
    /// Where in `data` the current attribute name began, if it did in this piece.
    attr_from: Option<usize>,
}

/// What `in_tag` does after one of its steps.
enum Flow {
    /// Go on to the branch of the state the step left in `TagCursor::st`.
    Next,
    /// Go back to the top of the loop (the step went back to an earlier state).
    Again,
    /// Return this index: the tag or `data` ended.
    Return(usize),
}

impl EmbedScanner {
    /// Inside a tag, from `self.state` (one of `TagName` to `Unquoted`) at `data[i]`, up to its
    /// `>` or the end of `data`. One pass through the loop reads one attribute; its states
    /// follow each other as plain branches, and `self.state` is written only where the tag or
    /// `data` ends. `name_from`: where in `data` the tag name began, when it began in this
    /// piece (`data[i - 1]`); then names are compared where they lie, not copied. Returns the
    /// index after the bytes consumed.
    #[inline(always)]
    pub(super) fn in_tag(&mut self, data: &[u8], i: usize, base: u64, out: &mut Vec<EmbedRef>, name_from: Option<usize>) -> usize {
        let mut at = TagCursor { data, base, i, st: self.state, attr_from: None };
        if at.st == Html::TagName {
            if let Flow::Return(end) = self.read_tag_name(&mut at, out, name_from) {
                return end;
            }
        }
        macro_rules! step {
            ($flow:expr) => {
                match $flow {
                    Flow::Next => {}
                    Flow::Again => continue,
                    Flow::Return(end) => return end,
                }
            };
        }
        loop {
            if at.st == Html::BeforeAttrName {
                step!(self.skip_to_attr_name(&mut at, out));
            }
            if at.st == Html::AttrName {
                step!(self.read_attr_name(&mut at, out));
            }
            if at.st == Html::AfterAttrName {
                step!(self.after_attr_name(&mut at, out));
            }
            if at.st == Html::BeforeAttrValue {
                step!(self.before_attr_value(&mut at, out));
            }
            if let Html::Quoted(q) = at.st {
                step!(self.read_quoted_value(&mut at, q));
            } else {
                step!(self.read_unquoted_value(&mut at, out));
            }
        }
    }

    /// `data` ended inside the tag: keep the state for the next piece.
    #[inline(always)]
    fn pause(&mut self, at: &TagCursor<'_>) -> Flow {
        self.state = at.st;
        Flow::Return(at.data.len())
    }

    /// The tag ends at `data[j]`, its `>`: report its references; `in_tag` returns the index
    /// after it.
    #[inline(always)]
    fn close_tag(&mut self, at: &TagCursor<'_>, j: usize, out: &mut Vec<EmbedRef>) -> Flow {
        self.end_tag(at.base + j as u64 + 1, out);
        Flow::Return(j + 1)
    }

    /// `TagName`: read the tag name up to its end, and what the tag is.
    #[inline(always)]
    fn read_tag_name(&mut self, at: &mut TagCursor<'_>, out: &mut Vec<EmbedRef>, name_from: Option<usize>) -> Flow {
        let data = at.data;
        let rest = &data[at.i..];
        let Some(k) = find_class(rest, NAME_END) else {
            self.push_name(rest, true);
            return self.pause(at);
        };
        let j = at.i + k;
        self.kind = match name_from {
            Some(from) => Tag::of_any_case(&data[from..j]),
            None => {
                self.push_name(&rest[..k], true);
                Tag::of(&self.tag[..self.tag_len as usize])
            }
        };
        self.wants = self.kind.wants();
        if data[j] == b'>' {
            return self.close_tag(at, j, out);
        }
        at.i = j + 1;
        at.st = Html::BeforeAttrName;
        Flow::Next
    }

    /// `BeforeAttrName`: skip to the next attribute name and start it (or end the tag).
    #[inline(always)]
    fn skip_to_attr_name(&mut self, at: &mut TagCursor<'_>, out: &mut Vec<EmbedRef>) -> Flow {
        let data = at.data;
        let Some(k) = skip_class(&data[at.i..], BEFORE_ATTR) else { return self.pause(at) };
        let j = at.i + k;
        if data[j] == b'>' {
            return self.close_tag(at, j, out);
        }
        self.start_attr(data[j], at.base + j as u64);
        at.attr_from = Some(j);
        at.i = j + 1;
        at.st = Html::AttrName;
        Flow::Next
    }

    /// `AttrName`: read the attribute name up to its end, and whether its value is kept.
    #[inline(always)]
    fn read_attr_name(&mut self, at: &mut TagCursor<'_>, out: &mut Vec<EmbedRef>) -> Flow {
        let data = at.data;
        let rest = &data[at.i..];
        let Some(k) = find_class(rest, ATTR_END) else {
            self.push_name(rest, false);
            return self.pause(at);
        };
        let j = at.i + k;
        self.attr_end = at.base + j as u64;
        // The name is complete: no later state adds to it.
        self.attr = match at.attr_from {
            Some(from) => attr_of_any_case(&data[from..j]),
            None => {
                self.push_name(&rest[..k], false);
                attr_of(&self.attr_name[..self.attr_len as usize])
            }
        };
        at.attr_from = None;
        let bit = self.attr.bit();
        self.keep = self.wants & bit != 0 && self.have & bit == 0;
        at.i = j + 1;
        match data[j] {
            b'>' => {
                self.store_attr();
                self.close_tag(at, j, out)
            }
            b'=' => {
                self.start_value(at.base + j as u64 + 1);
                at.st = Html::BeforeAttrValue;
                Flow::Next
            }
            b'/' => {
                self.store_attr();
                at.st = Html::BeforeAttrName;
                Flow::Again
            }
            _ => {
                at.st = Html::AfterAttrName;
                Flow::Next
            }
        }
    }

    /// `AfterAttrName`: after a name and blanks, a `=` (a value follows), the `>`, or the next
    /// attribute's name.
    #[inline(always)]
    fn after_attr_name(&mut self, at: &mut TagCursor<'_>, out: &mut Vec<EmbedRef>) -> Flow {
        let data = at.data;
        let Some(k) = skip_class(&data[at.i..], SPACE) else { return self.pause(at) };
        let j = at.i + k;
        at.i = j + 1;
        match data[j] {
            b'>' => {
                self.store_attr();
                self.close_tag(at, j, out)
            }
            b'=' => {
                self.start_value(at.base + j as u64 + 1);
                at.st = Html::BeforeAttrValue;
                Flow::Next
            }
            b => {
                self.store_attr();
                self.start_attr(b, at.base + j as u64);
                at.attr_from = Some(j);
                at.st = Html::AttrName;
                Flow::Again
            }
        }
    }

    /// `BeforeAttrValue`: after the `=` and blanks, a quote, the `>`, or an unquoted value's
    /// first byte.
    #[inline(always)]
    fn before_attr_value(&mut self, at: &mut TagCursor<'_>, out: &mut Vec<EmbedRef>) -> Flow {
        let data = at.data;
        let Some(k) = skip_class(&data[at.i..], SPACE) else { return self.pause(at) };
        let j = at.i + k;
        at.i = j + 1;
        match data[j] {
            q @ (b'"' | b'\'') => at.st = Html::Quoted(q),
            b'>' => {
                self.store_attr();
                return self.close_tag(at, j, out);
            }
            b => {
                self.push_value(&[b]);
                at.st = Html::Unquoted;
            }
        }
        Flow::Next
    }

    /// `Quoted(q)`: read the value up to its closing quote `q`; the attribute is complete.
    #[inline(always)]
    fn read_quoted_value(&mut self, at: &mut TagCursor<'_>, q: u8) -> Flow {
        let data = at.data;
        let rest = &data[at.i..];
        let Some(k) = find_byte(q, rest) else {
            self.push_value(rest);
            return self.pause(at);
        };
        self.push_value(&rest[..k]);
        self.attr_end = at.base + (at.i + k + 1) as u64;
        self.store_attr();
        at.i += k + 1;
        at.st = Html::BeforeAttrName;
        Flow::Next
    }

    /// `Unquoted`: read the value up to a blank or the `>`; the attribute is complete.
    #[inline(always)]
    fn read_unquoted_value(&mut self, at: &mut TagCursor<'_>, out: &mut Vec<EmbedRef>) -> Flow {
        debug_assert_eq!(at.st, Html::Unquoted);
        let data = at.data;
        let rest = &data[at.i..];
        let end = find_class(rest, UNQUOTED_END);
        self.push_value(&rest[..end.unwrap_or(rest.len())]);
        let Some(k) = end else { return self.pause(at) };
        let j = at.i + k;
        self.attr_end = at.base + j as u64;
        self.store_attr();
        if data[j] == b'>' {
            return self.close_tag(at, j, out);
        }
        at.i = j + 1;
        at.st = Html::BeforeAttrName;
        Flow::Next
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
