//! The mapping file of `REWRITE EMBEDS ... USING "file"`: which request target an embedded
//! object's request is rewritten to.
//!
//! One pair per line, `FROM TO`, separated by spaces or tabs; `#` starts a comment; blank lines
//! are skipped. A pair whose two sides both end in `*` maps a prefix (`/img/* /ims/*`: every
//! target that starts with `/img/` has that start replaced by `/ims/`); a plain pair maps one
//! target exactly. An exact pair wins over a prefix, and a longer prefix over a shorter one.
//!
//! rlm rewrites the request in place, without moving a byte of the connection's sequence
//! space, so `TO` must be exactly as long as `FROM` (a prefix as long as the prefix it
//! replaces). Targets are request targets as sent (`/path?query`): printable ASCII, no spaces.

use std::collections::HashMap;

use crate::diag::{Diagnostics, Error, SourceMap, Span};

/// The largest mapping file read, in bytes.
pub const MAX_MAPPING_SIZE: usize = 4 << 20;
/// The most pairs a mapping file may have.
pub const MAX_PAIRS: usize = 100_000;

/// A parsed mapping file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Mapping {
    exact: HashMap<String, String>,
    /// (from, to), longest `from` first.
    prefixes: Vec<(String, String)>,
}

impl Mapping {
    /// Read a mapping file's text; `file` names it in diagnostics.
    pub fn parse(file: &str, text: &str) -> Result<Mapping, Diagnostics> {
        let mut errors = Vec::new();
        let mut m = Mapping::default();
        if text.len() > MAX_MAPPING_SIZE {
            errors.push(Error::new(Span::default(), format!("the mapping file is {} bytes; at most {MAX_MAPPING_SIZE}", text.len())));
        } else {
            let mut pairs = 0usize;
            let mut offset = 0usize;
            for line in text.split_inclusive('\n') {
                let start = offset;
                offset += line.len();
                let body = line.split('#').next().unwrap_or("");
                let words: Vec<(usize, &str)> = words(body).map(|(at, w)| (start + at, w)).collect();
                match words.as_slice() {
                    [] => continue,
                    [(at, w)] => errors.push(
                        Error::new(Span::new(*at, *at + w.len()), format!("'{w}' has nothing to map to")).expected("FROM TO, e.g. /img/* /ims/*"),
                    ),
                    [from, to] => {
                        if let Err(e) = m.add(*from, *to) {
                            errors.push(e);
                        }
                        pairs += 1;
                    }
                    [_, _, (at, w), ..] => errors.push(
                        Error::new(Span::new(*at, *at + w.len()), format!("'{w}' is one word too many")).expected("two targets, FROM TO, per line"),
                    ),
                }
                if pairs > MAX_PAIRS {
                    errors.push(Error::new(Span::new(start, offset), format!("more than {MAX_PAIRS} pairs")));
                    break;
                }
                if errors.len() >= crate::MAX_ERRORS {
                    break;
                }
            }
        }
        if errors.is_empty() {
            m.prefixes.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
            Ok(m)
        } else {
            let map = SourceMap::new(text);
            Err(Diagnostics(errors.into_iter().map(|e| map.diagnostic(file, e)).collect()))
        }
    }

    fn add(&mut self, (fat, from): (usize, &str), (tat, to): (usize, &str)) -> Result<(), Error> {
        for (at, w) in [(fat, from), (tat, to)] {
            if let Some((i, c)) = w.char_indices().find(|&(_, c)| !c.is_ascii_graphic()) {
                return Err(
                    Error::new(Span::new(at + i, at + i + c.len_utf8()), format!("'{c}' cannot be in a request target")).expected("printable ASCII")
                );
            }
        }
        let span = Span::new(tat, tat + to.len());
        match (from.strip_suffix('*'), to.strip_suffix('*')) {
            (Some(f), Some(t)) => {
                if f.len() != t.len() {
                    return Err(same_length(span, f, t));
                }
                if f.is_empty() {
                    return Err(
                        Error::new(Span::new(fat, fat + from.len()), "an empty prefix would map every request").expected("a prefix such as /img/*")
                    );
                }
                if self.prefixes.iter().any(|(p, _)| p == f) {
                    return Err(Error::new(Span::new(fat, fat + from.len()), format!("'{from}' is mapped already")));
                }
                self.prefixes.push((f.to_string(), t.to_string()));
            }
            (None, None) => {
                if from.len() != to.len() {
                    return Err(same_length(span, from, to));
                }
                if self.exact.insert(from.to_string(), to.to_string()).is_some() {
                    return Err(Error::new(Span::new(fat, fat + from.len()), format!("'{from}' is mapped already")));
                }
            }
            _ => {
                return Err(Error::new(span, "a prefix maps to a prefix: end both sides with * or neither").expected(format!(
                    "{}* {}*",
                    from.trim_end_matches('*'),
                    to.trim_end_matches('*')
                )))
            }
        }
        Ok(())
    }

    /// The target `target` is rewritten to, if the mapping has it (and it differs).
    pub fn map(&self, target: &str) -> Option<String> {
        let to = match self.exact.get(target) {
            Some(t) => t.clone(),
            None => {
                let (f, t) = self.prefixes.iter().find(|(f, _)| target.starts_with(f.as_str()))?;
                format!("{t}{}", &target[f.len()..])
            }
        };
        (to != target).then_some(to)
    }

    /// How many pairs it has.
    pub fn len(&self) -> usize {
        self.exact.len() + self.prefixes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn same_length(span: Span, from: &str, to: &str) -> Error {
    Error::new(span, format!("'{to}' has {} bytes where '{from}' has {}: rlm rewrites in place, so both sides must be as long", to.len(), from.len()))
        .expected(format!("a target of {} bytes", from.len()))
}

/// The words of a line (split on spaces and tabs) with their byte offsets.
fn words(line: &str) -> impl Iterator<Item = (usize, &str)> {
    let line = line.trim_end_matches(['\r', '\n']);
    let mut at = 0;
    std::iter::from_fn(move || {
        let rest = &line[at..];
        let skip = rest.len() - rest.trim_start_matches([' ', '\t']).len();
        let rest = &rest[skip..];
        if rest.is_empty() {
            return None;
        }
        let len = rest.find([' ', '\t']).unwrap_or(rest.len());
        let w = (at + skip, &rest[..len]);
        at += skip + len;
        Some(w)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Mapping, Vec<(u32, u32, String)>> {
        Mapping::parse("ims.map", text).map_err(|d| d.0.into_iter().map(|d| (d.line, d.col, d.message)).collect())
    }

    #[test]
    fn exact_pairs_win_over_prefixes_and_longer_prefixes_over_shorter() {
        let m = parse("# the lab's small images\n/img/* /ims/*\n\t/img/large/* /img/thumb/*   # covers\n/img/logo.gif /img/logo.png\n\n").unwrap();
        assert_eq!(m.len(), 3);
        assert_eq!(m.map("/img/nav/home.gif").as_deref(), Some("/ims/nav/home.gif"));
        assert_eq!(m.map("/img/large/3.gif").as_deref(), Some("/img/thumb/3.gif"));
        assert_eq!(m.map("/img/logo.gif").as_deref(), Some("/img/logo.png"));
        assert_eq!(m.map("/css/site.css"), None);
        assert_eq!(m.map("/img"), None);
        // Every rewrite keeps the length.
        for t in ["/img/nav/home.gif", "/img/large/3.gif?x=1", "/img/logo.gif"] {
            assert_eq!(m.map(t).unwrap().len(), t.len());
        }
    }

    #[test]
    fn a_mapping_to_itself_rewrites_nothing() {
        assert_eq!(parse("/a /a\n").unwrap().map("/a"), None);
    }

    #[test]
    fn errors_name_the_line_and_column_of_the_word_at_fault() {
        let e = parse("/img/* /ims/*\n/img/a.gif /img/small/a.gif\n").unwrap_err();
        assert_eq!((e[0].0, e[0].1), (2, 12));
        assert!(e[0].2.contains("both sides must be as long"), "{}", e[0].2);
        let e = parse("/img/*  /ims/\n").unwrap_err();
        assert_eq!((e[0].0, e[0].1), (1, 9));
        assert!(e[0].2.contains("prefix maps to a prefix"));
        let e = parse("/a\n/b /c /d\n* *\n/é /e\n/x /y\n/x /z\n").unwrap_err();
        let at: Vec<(u32, u32)> = e.iter().map(|d| (d.0, d.1)).collect();
        assert_eq!(at, [(1, 1), (2, 7), (3, 1), (4, 2), (6, 1)], "{e:?}");
    }
}
