//! The CSS scanner: `url(...)` and `@import` in stylesheets, `<style>` contents and `style`
//! attributes.

use memchr::{memchr2, memchr3};

use super::urls::clean_url;
use super::{EmbedKind, EmbedRef, MAX_VALUE};

/// Finds `url(...)` and `@import "..."` in CSS, streaming.
#[derive(Clone, Debug, Default)]
pub(super) struct CssScanner {
    state: Css,
    value: Vec<u8>,
    start: u64,
    overflow: bool,
}

/// Where the CSS scanner is: outside a reference, or how far into one.
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
    pub(super) fn feed(&mut self, data: &[u8], base: u64, out: &mut Vec<EmbedRef>, required: bool) {
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

    /// Forget any reference under way: the CSS it was in ended.
    pub(super) fn reset(&mut self) {
        self.state = Css::Normal;
        self.value.clear();
        self.overflow = false;
        self.start = 0;
    }
}
