//! Tokens: words (keywords, fields, addresses, numbers with units, `SYN/ACK`), strings,
//! comparison operators, `+`, `,` and parentheses. `#` comments run to the end of the line.

use crate::diag::{Error, Span};

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A run of letters, digits and `_ . * / : -`; its text is the source under the span.
    Word,
    /// A double-quoted string, escapes (`\"`, `\\`) undone.
    Str(String),
    EqEq,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Plus,
    Comma,
    LParen,
    RParen,
    /// Input the lexer reported an error for (an odd character, an unterminated string): the
    /// parser stops the statement there without a second error.
    Bad,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Tok {
    pub kind: Kind,
    pub span: Span,
    /// The first token on its line (where a statement may start after an error).
    pub line_start: bool,
}

pub(crate) fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '*' | '/' | ':' | '-')
}

/// The longest string literal accepted, in bytes.
pub(crate) const MAX_STRING: usize = 4096;

/// Split a source into tokens; errors (odd characters, unterminated strings) are collected and
/// the lexer goes on after them.
pub(crate) fn lex(src: &str, errors: &mut Vec<Error>) -> Vec<Tok> {
    let mut toks = Vec::new();
    let mut it = src.char_indices().peekable();
    let mut line_start = true;
    while let Some((i, c)) = it.next() {
        let one = |kind: Kind, len: usize, line_start: bool| Tok { kind, span: Span::new(i, i + len), line_start };
        match c {
            '\n' => {
                line_start = true;
                continue;
            }
            c if c.is_whitespace() => continue,
            '#' => {
                while it.peek().is_some_and(|&(_, c)| c != '\n') {
                    it.next();
                }
                continue;
            }
            '=' | '!' | '<' | '>' => {
                let eq = it.peek().is_some_and(|&(_, c)| c == '=');
                if eq {
                    it.next();
                }
                let kind = match (c, eq) {
                    ('=', true) => Kind::EqEq,
                    ('=', false) => Kind::Eq,
                    ('!', true) => Kind::Ne,
                    ('<', false) => Kind::Lt,
                    ('<', true) => Kind::Le,
                    ('>', false) => Kind::Gt,
                    ('>', true) => Kind::Ge,
                    _ => {
                        errors.push(
                            Error::new(Span::new(i, i + 1), "'!' on its own is not an operator").expected("!= or NOT").help("write NOT for negation"),
                        );
                        toks.push(one(Kind::Bad, 1, line_start));
                        line_start = false;
                        continue;
                    }
                };
                toks.push(one(kind, if eq { 2 } else { 1 }, line_start));
            }
            '+' => toks.push(one(Kind::Plus, 1, line_start)),
            ',' => toks.push(one(Kind::Comma, 1, line_start)),
            '(' => toks.push(one(Kind::LParen, 1, line_start)),
            ')' => toks.push(one(Kind::RParen, 1, line_start)),
            '"' => {
                let mut value = String::new();
                let mut end = None;
                let mut bad_escape = None;
                while let Some(&(j, d)) = it.peek() {
                    if d == '\n' {
                        break;
                    }
                    it.next();
                    match d {
                        '"' => {
                            end = Some(j + 1);
                            break;
                        }
                        '\\' => match it.peek() {
                            Some(&(_, e @ ('"' | '\\'))) => {
                                it.next();
                                value.push(e);
                            }
                            Some(&(k, e)) if e != '\n' => {
                                it.next();
                                bad_escape.get_or_insert(Span::new(j, k + e.len_utf8()));
                            }
                            _ => {}
                        },
                        d => value.push(d),
                    }
                }
                match end {
                    None => {
                        let stop = it.peek().map_or(src.len(), |&(j, _)| j);
                        errors.push(Error::new(Span::new(i, stop), "this string has no closing quote").expected("'\"' before the end of the line"));
                        toks.push(Tok { kind: Kind::Bad, span: Span::new(i, stop), line_start });
                    }
                    Some(end) => {
                        if let Some(s) = bad_escape {
                            errors.push(Error::new(s, "unknown escape in a string").expected("\\\" or \\\\"));
                            toks.push(Tok { kind: Kind::Bad, span: Span::new(i, end), line_start });
                        } else if value.len() > MAX_STRING {
                            errors.push(
                                Error::new(Span::new(i, end), format!("this string is longer than {MAX_STRING} bytes")).expected("a shorter string"),
                            );
                            toks.push(Tok { kind: Kind::Bad, span: Span::new(i, end), line_start });
                        } else {
                            toks.push(Tok { kind: Kind::Str(value), span: Span::new(i, end), line_start });
                        }
                    }
                }
            }
            c if is_word_char(c) => {
                let mut end = i + c.len_utf8();
                while let Some(&(j, d)) = it.peek() {
                    if !is_word_char(d) {
                        break;
                    }
                    it.next();
                    end = j + d.len_utf8();
                }
                toks.push(Tok { kind: Kind::Word, span: Span::new(i, end), line_start });
            }
            c => {
                toks.push(Tok { kind: Kind::Bad, span: Span::new(i, i + c.len_utf8()), line_start });
                errors.push(
                    Error::new(Span::new(i, i + c.len_utf8()), format!("unexpected character {c:?}"))
                        .expected("a keyword, a field, a value, an operator (== = != < <= > >=), '+', ',', '(', ')', a \"string\" or a # comment"),
                );
            }
        }
        line_start = false;
    }
    toks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(src: &str) -> Vec<(Kind, &str)> {
        let mut errs = vec![];
        let toks = lex(src, &mut errs);
        assert!(errs.is_empty(), "{errs:?}");
        toks.into_iter().map(|t| (t.kind, &src[t.span.start as usize..t.span.end as usize])).collect()
    }

    #[test]
    fn words_and_operators() {
        let k = kinds("IF IP.SRC==10.4.*.* AND(RT.HIGH>=3.0s)# comment\nFAST SYN+SYN/ACK GAP 500ms, URL != \"/a#b\"");
        let texts: Vec<&str> = k.iter().map(|(_, t)| *t).collect();
        assert_eq!(
            texts,
            [
                "IF", "IP.SRC", "==", "10.4.*.*", "AND", "(", "RT.HIGH", ">=", "3.0s", ")", "FAST", "SYN", "+", "SYN/ACK", "GAP", "500ms", ",",
                "URL", "!=", "\"/a#b\""
            ]
        );
        assert_eq!(k.last().unwrap().0, Kind::Str("/a#b".into()));
    }

    #[test]
    fn errors_and_recovery() {
        let mut errs = vec![];
        let toks = lex("IF RT ; > 2s \"open\nTHEN ! DROP", &mut errs);
        assert_eq!(errs.len(), 3, "{errs:?}");
        assert_eq!(errs[0].span, Span::new(6, 7));
        assert!(toks.iter().any(|t| t.line_start && t.span.start == 19), "THEN starts line 2");
    }
}
