//! `*` and `?` patterns for URL, HOST and CONTENT-TYPE tests and for `REMOVE EMBEDS MATCHING`.

use std::fmt;

/// A pattern in which `*` stands for any run of characters (also none) and `?` for one.
/// There is no escape: `*` and `?` never occur in what is matched (URLs escape them as `%2A`/`%3F`
/// or use `?` for the query, which `?` then matches).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Glob(String);

impl Glob {
    pub fn new(pattern: impl Into<String>) -> Glob {
        Glob(pattern.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `text` matches, byte by byte (`fold`: ASCII letters compare case-insensitively).
    /// Linear backtracking to the last `*`: O(len(pattern) * len(text)) at worst, no allocation,
    /// no recursion.
    pub fn matches(&self, text: &str, fold: bool) -> bool {
        let (p, t) = (self.0.as_bytes(), text.as_bytes());
        let eq = |a: u8, b: u8| if fold { a.eq_ignore_ascii_case(&b) } else { a == b };
        let (mut pi, mut ti) = (0, 0);
        let mut star: Option<(usize, usize)> = None;
        while ti < t.len() {
            if pi < p.len() && p[pi] == b'*' {
                star = Some((pi, ti));
                pi += 1;
            } else if pi < p.len() && (p[pi] == b'?' || eq(p[pi], t[ti])) {
                // `?` takes one whole character, not one byte.
                if p[pi] == b'?' {
                    ti += utf8_len(t[ti]) - 1;
                }
                pi += 1;
                ti += 1;
            } else if let Some((sp, st)) = star {
                pi = sp + 1;
                ti = st + 1;
                star = Some((sp, st + 1));
            } else {
                return false;
            }
        }
        p[pi..].iter().all(|&c| c == b'*')
    }
}

fn utf8_len(first: u8) -> usize {
    match first {
        0xF0..=0xFF => 4,
        0xE0..=0xEF => 3,
        0xC0..=0xDF => 2,
        _ => 1,
    }
}

/// A string literal of the rule language for `s` (`"a\"b"`).
pub(crate) fn quote(s: &str) -> String {
    let mut q = String::with_capacity(s.len() + 2);
    q.push('"');
    for c in s.chars() {
        if c == '"' || c == '\\' {
            q.push('\\');
        }
        q.push(c);
    }
    q.push('"');
    q
}

impl fmt::Display for Glob {
    /// As a string literal.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&quote(&self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        let g = |p: &str, t: &str| Glob::new(p).matches(t, false);
        assert!(g("*.gif", "/img/a.gif") && !g("*.gif", "/img/a.gifx"));
        assert!(g("/images/*", "/images/") && g("/images/*/big_*.jpg", "/images/x/big_1.jpg"));
        assert!(g("", "") && !g("", "a") && g("*", "") && g("**", "abc"));
        assert!(g("a?c", "abc") && g("a?c", "aéc") && !g("a?c", "ac"));
        assert!(g("*a*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaab") && !g("*a*a*a*a*b", &"a".repeat(5000)));
        assert!(Glob::new("TEXT/*").matches("text/html", true) && !Glob::new("TEXT/*").matches("text/html", false));
        assert_eq!(Glob::new("a\"b\\").to_string(), r#""a\"b\\""#);
    }
}
