//! The original byte-at-a-time embed scanner, kept verbatim as the reference that the fast
//! scanner is checked against (differential tests in `super::tests`). Test-only.

use super::{EmbedKind, EmbedRef};

const MAX_NAME: usize = 16;
const MAX_VALUE: usize = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Html {
    Text,
    TagOpen,
    MarkupDecl {
        dashes: u8,
    },
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
                    self.push(b);
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
                    self.push(b);
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

    fn push(&mut self, b: u8) {
        if self.value.len() < MAX_VALUE {
            self.value.push(b);
        } else {
            self.overflow = true;
        }
    }
}

/// Decode the few HTML character references that occur in URLs, trim, and drop non-fetches.
fn clean_url(raw: &[u8]) -> Option<String> {
    let s = String::from_utf8_lossy(raw.trim_ascii());
    let s = if s.contains('&') {
        s.replace("&amp;", "&").replace("&#38;", "&").replace("&quot;", "\"").replace("&#39;", "'").replace("&lt;", "<").replace("&gt;", ">")
    } else {
        s.into_owned()
    };
    let lower = s.to_ascii_lowercase();
    if s.is_empty() || s.starts_with('#') || ["data:", "javascript:", "about:", "mailto:", "blob:"].iter().any(|p| lower.starts_with(p)) {
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
pub struct Reference {
    css_only: bool,
    state: Html,
    offset: u64,
    tag_start: u64,
    tag: Vec<u8>,
    attr: Vec<u8>,
    value: Vec<u8>,
    value_overflow: bool,
    attrs: Vec<(Attr, Vec<u8>)>,
    css: CssScanner,
}

impl Reference {
    /// A scanner for an HTML document.
    pub fn html() -> Self {
        Reference {
            css_only: false,
            state: Html::Text,
            offset: 0,
            tag_start: 0,
            tag: Vec::with_capacity(MAX_NAME),
            attr: Vec::with_capacity(MAX_NAME),
            value: Vec::new(),
            value_overflow: false,
            attrs: Vec::new(),
            css: CssScanner::default(),
        }
    }

    /// A scanner for a CSS stylesheet.
    pub fn css() -> Self {
        Reference { css_only: true, ..Self::html() }
    }

    /// Scan the next piece of the body.
    pub fn feed(&mut self, data: &[u8], out: &mut Vec<EmbedRef>) {
        if self.css_only {
            for &b in data {
                self.css.feed_byte(b, self.offset, out, false);
                self.offset += 1;
            }
            return;
        }
        let mut i = 0;
        while i < data.len() {
            // Fast path: text between tags.
            if self.state == Html::Text {
                match memchr::memchr(b'<', &data[i..]) {
                    Some(p) => {
                        i += p;
                        self.offset += p as u64;
                    }
                    None => {
                        self.offset += (data.len() - i) as u64;
                        return;
                    }
                }
            }
            self.step(data[i], out);
            self.offset += 1;
            i += 1;
        }
    }

    fn step(&mut self, b: u8, out: &mut Vec<EmbedRef>) {
        match self.state {
            Html::Text => {
                if b == b'<' {
                    self.tag_start = self.offset;
                    self.state = Html::TagOpen;
                }
            }
            Html::TagOpen => {
                if b.is_ascii_alphabetic() {
                    self.tag.clear();
                    self.attrs.clear();
                    self.tag.push(b.to_ascii_lowercase());
                    self.state = Html::TagName;
                } else if b == b'!' {
                    self.state = Html::MarkupDecl { dashes: 0 };
                } else if b == b'/' || b == b'?' {
                    self.state = Html::Bogus;
                } else if b == b'<' {
                    self.tag_start = self.offset;
                } else {
                    self.state = Html::Text;
                }
            }
            Html::MarkupDecl { dashes } => {
                self.state = match (b, dashes) {
                    (b'-', 0) => Html::MarkupDecl { dashes: 1 },
                    (b'-', 1) => Html::Comment { dashes: 0 },
                    (b'>', _) => Html::Text,
                    _ => Html::Bogus,
                }
            }
            Html::Comment { dashes } => {
                self.state = match b {
                    b'-' => Html::Comment { dashes: dashes.saturating_add(1) },
                    b'>' if dashes >= 2 => Html::Text,
                    _ => Html::Comment { dashes: 0 },
                }
            }
            Html::Bogus => {
                if b == b'>' {
                    self.state = Html::Text;
                }
            }
            Html::TagName => match b {
                b'>' => self.end_tag(out),
                b'/' | b' ' | b'\t' | b'\r' | b'\n' | b'\x0c' => self.state = Html::BeforeAttrName,
                _ => {
                    if self.tag.len() < MAX_NAME {
                        self.tag.push(b.to_ascii_lowercase());
                    }
                }
            },
            Html::BeforeAttrName => match b {
                b'>' => self.end_tag(out),
                b'/' | b' ' | b'\t' | b'\r' | b'\n' | b'\x0c' => {}
                _ => self.start_attr(b),
            },
            Html::AttrName => match b {
                b'>' => {
                    self.store_attr();
                    self.end_tag(out);
                }
                b'=' => self.start_value(),
                b'/' => {
                    self.store_attr();
                    self.state = Html::BeforeAttrName;
                }
                b' ' | b'\t' | b'\r' | b'\n' | b'\x0c' => self.state = Html::AfterAttrName,
                _ => {
                    if self.attr.len() < MAX_NAME {
                        self.attr.push(b.to_ascii_lowercase());
                    }
                }
            },
            Html::AfterAttrName => match b {
                b'>' => {
                    self.store_attr();
                    self.end_tag(out);
                }
                b'=' => self.start_value(),
                b' ' | b'\t' | b'\r' | b'\n' | b'\x0c' => {}
                _ => {
                    self.store_attr();
                    self.start_attr(b);
                }
            },
            Html::BeforeAttrValue => match b {
                b' ' | b'\t' | b'\r' | b'\n' | b'\x0c' => {}
                b'"' | b'\'' => self.state = Html::Quoted(b),
                b'>' => {
                    self.store_attr();
                    self.end_tag(out);
                }
                _ => {
                    self.push_value(b);
                    self.state = Html::Unquoted;
                }
            },
            Html::Quoted(q) => {
                if b == q {
                    self.store_attr();
                    self.state = Html::BeforeAttrName;
                } else {
                    self.push_value(b);
                }
            }
            Html::Unquoted => match b {
                b'>' => {
                    self.store_attr();
                    self.end_tag(out);
                }
                b' ' | b'\t' | b'\r' | b'\n' | b'\x0c' => {
                    self.store_attr();
                    self.state = Html::BeforeAttrName;
                }
                _ => self.push_value(b),
            },
            Html::RawText { style, matched } => {
                let close: &[u8] = if style { b"</style" } else { b"</script" };
                if style {
                    self.css.feed_byte(b, self.offset, out, false);
                }
                let lb = b.to_ascii_lowercase();
                self.state = if (matched as usize) < close.len() && lb == close[matched as usize] {
                    if matched as usize + 1 == close.len() {
                        self.css = CssScanner::default();
                        Html::Bogus // skip to the '>' of the end tag
                    } else {
                        Html::RawText { style, matched: matched + 1 }
                    }
                } else if lb == b'<' {
                    Html::RawText { style, matched: 1 }
                } else {
                    Html::RawText { style, matched: 0 }
                };
            }
        }
    }

    fn start_attr(&mut self, b: u8) {
        self.attr.clear();
        self.value.clear();
        self.value_overflow = false;
        self.attr.push(b.to_ascii_lowercase());
        self.state = Html::AttrName;
    }

    fn start_value(&mut self) {
        self.value.clear();
        self.value_overflow = false;
        self.state = Html::BeforeAttrValue;
    }

    fn push_value(&mut self, b: u8) {
        if self.value.len() < MAX_VALUE {
            self.value.push(b);
        } else {
            self.value_overflow = true;
        }
    }

    fn store_attr(&mut self) {
        let a = attr_of(&self.attr);
        if a != Attr::Other && !self.value_overflow && !self.attrs.iter().any(|(x, _)| *x == a) {
            self.attrs.push((a, std::mem::take(&mut self.value)));
        }
        self.attr.clear();
        self.value.clear();
    }

    fn get(&self, a: Attr) -> Option<&[u8]> {
        self.attrs.iter().find(|(x, _)| *x == a).map(|(_, v)| v.as_slice())
    }

    fn end_tag(&mut self, out: &mut Vec<EmbedRef>) {
        let (start, end) = (self.tag_start, self.offset + 1);
        let mut emit = |urls: Vec<String>, kind: EmbedKind, required: bool| {
            if !urls.is_empty() {
                out.push(EmbedRef { urls, kind, required, start, end, wire: Vec::new() });
            }
        };
        let one = |v: Option<&[u8]>| v.and_then(clean_url).into_iter().collect::<Vec<_>>();
        match self.tag.as_slice() {
            b"img" => {
                let mut urls = one(self.get(Attr::Src));
                for u in self.get(Attr::Srcset).map(srcset_urls).unwrap_or_default() {
                    if !urls.contains(&u) {
                        urls.push(u);
                    }
                }
                emit(urls, EmbedKind::Image, true);
            }
            b"script" => emit(one(self.get(Attr::Src)), EmbedKind::Script, true),
            b"link" => {
                let rel = String::from_utf8_lossy(self.get(Attr::Rel).unwrap_or_default()).to_ascii_lowercase();
                let rels: Vec<&str> = rel.split_ascii_whitespace().collect();
                let href = one(self.get(Attr::Href));
                if rels.contains(&"stylesheet") && !rels.contains(&"alternate") {
                    emit(href, EmbedKind::Stylesheet, true);
                } else if rels.iter().any(|r| *r == "icon" || *r == "apple-touch-icon") {
                    emit(href, EmbedKind::Icon, false);
                } else if rels.iter().any(|r| *r == "preload" || *r == "modulepreload") {
                    emit(href, EmbedKind::Object, false);
                }
            }
            b"iframe" | b"frame" => emit(one(self.get(Attr::Src)), EmbedKind::Frame, true),
            b"object" => emit(one(self.get(Attr::Data)), EmbedKind::Object, true),
            b"embed" => emit(one(self.get(Attr::Src)), EmbedKind::Object, true),
            b"source" => {
                let mut urls = one(self.get(Attr::Src));
                urls.extend(self.get(Attr::Srcset).map(srcset_urls).unwrap_or_default());
                emit(urls, EmbedKind::Media, false);
            }
            b"video" | b"audio" => {
                emit(one(self.get(Attr::Src)), EmbedKind::Media, false);
                emit(one(self.get(Attr::Poster)), EmbedKind::Image, false);
            }
            b"input" => {
                if self.get(Attr::Type).is_some_and(|t| t.eq_ignore_ascii_case(b"image")) {
                    emit(one(self.get(Attr::Src)), EmbedKind::Image, true);
                }
            }
            _ => {}
        }
        if let Some(bg) = self.get(Attr::Background) {
            if let Some(u) = clean_url(bg) {
                out.push(EmbedRef { urls: vec![u], kind: EmbedKind::Image, required: true, start, end, wire: Vec::new() });
            }
        }
        if let Some(style) = self.get(Attr::Style).map(|s| s.to_vec()) {
            let mut css = CssScanner::default();
            let mut found = Vec::new();
            for (k, &b) in style.iter().enumerate() {
                css.feed_byte(b, k as u64, &mut found, true);
            }
            for mut r in found {
                r.start = start;
                r.end = end;
                out.push(r);
            }
        }
        let self_closing = false;
        self.state = match self.tag.as_slice() {
            b"script" if !self_closing => Html::RawText { style: false, matched: 0 },
            b"style" => {
                self.css = CssScanner::default();
                Html::RawText { style: true, matched: 0 }
            }
            _ => Html::Text,
        };
        self.attrs.clear();
    }
}
