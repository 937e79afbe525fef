//! Hand-written recursive descent over the tokens of [`crate::lex`]. Each statement (`CLASS` or
//! `IF`) that fails is reported and skipped up to the next line that starts one, so a file gets
//! all its syntax errors at once (up to [`MAX_ERRORS`]).

use crate::addr;
use crate::ast::*;
use crate::diag::{Error, Span};
use crate::glob::Glob;
use crate::lex::{Kind, Tok};
use crate::num::{self, DurRange};

/// How deep parentheses and `NOT` may nest (the parser and evaluator recurse that deep).
pub const MAX_DEPTH: u32 = 64;
/// A file stops being read after this many errors.
pub const MAX_ERRORS: usize = 50;
/// The largest position in `AFTER n` / `AT n`.
pub const MAX_EMBED_POS: u64 = 10_000;

const ACTION_WORDS: &[&str] = &["DROP", "LIMIT", "FAST", "DELAY", "HALT", "REMOVE", "REWRITE", "REJECT", "ABORT"];
const EXPECT_ACTION: &str =
    "an action: DROP SYN, LIMIT SYN, LIMIT REQUESTS, FAST SYN, FAST SYN/ACK, DELAY FIRST SYN, HALT FAST SYN, REMOVE EMBEDS, REWRITE EMBEDS, REJECT or ABORT IDLE";
const EXPECT_TEST: &str =
    "a test: IP.SRC, IP.DST, PORT.SRC, PORT.DST, RT, RT.<class>, URL, HOST, SITE, METHOD, COOKIE.<name>, HEADER.<name>, CONTENT-TYPE, CLASS or GROUP, or NOT or '('";
const EXPECT_STATEMENT: &str =
    "a rule (IF condition THEN action), a class (CLASS name IF condition), a group (GROUP name IF condition), a target (SLA class RT.P95 < 2s) or SHED class, ...";
const EXPECT_DURATION: &str = "a duration such as 500ms or 3.0s";

pub(crate) struct Parser<'s> {
    src: &'s str,
    toks: Vec<Tok>,
    i: usize,
    depth: u32,
    pub errors: Vec<Error>,
}

type R<T> = Result<T, Error>;

fn is_ident(s: &str) -> bool {
    let mut b = s.bytes();
    b.next().is_some_and(|c| c.is_ascii_alphabetic() || c == b'_') && b.all(|c| c.is_ascii_alphanumeric() || c == b'_') && s.len() <= 64
}

impl<'s> Parser<'s> {
    pub fn new(src: &'s str, toks: Vec<Tok>, errors: Vec<Error>) -> Self {
        Parser { src, toks, i: 0, depth: 0, errors }
    }

    fn text(&self, t: &Tok) -> &'s str {
        self.src.get(t.span.start as usize..t.span.end as usize).unwrap_or("")
    }
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.i)
    }
    fn peek_at(&self, k: usize) -> Option<&Tok> {
        self.toks.get(self.i + k)
    }
    fn is_kw(&self, t: Option<&Tok>, kw: &str) -> bool {
        t.is_some_and(|t| t.kind == Kind::Word && self.text(t).eq_ignore_ascii_case(kw))
    }
    fn peek_kw(&self, kw: &str) -> bool {
        self.is_kw(self.peek(), kw)
    }
    fn bump(&mut self) -> Option<Tok> {
        let t = self.toks.get(self.i).cloned();
        if t.is_some() {
            self.i += 1;
        }
        t
    }
    fn prev_span(&self) -> Span {
        self.i.checked_sub(1).and_then(|j| self.toks.get(j)).map_or(Span::default(), |t| t.span)
    }
    /// Whether the token at `j` begins a statement: `IF` but not `IF PREDICTED` (a selector),
    /// `CLASS` and `GROUP` but not `CLASS ==`, `GROUP ==` (tests), `SLA`, `SHED`.
    fn starts_statement_at(&self, j: usize) -> bool {
        let (t, next) = (self.toks.get(j), self.toks.get(j + 1));
        let test_follows = next.is_some_and(|n| matches!(n.kind, Kind::Eq | Kind::EqEq | Kind::Ne));
        (self.is_kw(t, "IF") && !self.is_kw(next, "PREDICTED"))
            || ((self.is_kw(t, "CLASS") || self.is_kw(t, "GROUP")) && !test_follows)
            || self.is_kw(t, "SLA")
            || self.is_kw(t, "SHED")
    }
    fn starts_statement(&self) -> bool {
        self.starts_statement_at(self.i)
    }
    /// The next token starts a line with a statement or an action keyword: whatever was
    /// expected before it is missing at the end of the line before.
    fn at_line_keyword(&self) -> bool {
        self.i > 0 && self.peek().is_some_and(|t| t.line_start && (self.starts_statement() || self.is_action_word(t)))
    }
    fn is_action_word(&self, t: &Tok) -> bool {
        ACTION_WORDS.iter().any(|w| self.is_kw(Some(t), w))
    }

    /// Where the next token is and what to call it in "found ...": a keyword that starts a new
    /// line (a rule, a class, an action) means what was expected is missing at the end of the
    /// line before.
    fn found(&self) -> (Span, String) {
        match self.peek() {
            None => (self.prev_span().after(), "the end of the file".into()),
            Some(_) if self.at_line_keyword() => (self.prev_span().after(), "the end of the line".into()),
            Some(t) => (t.span, describe(self.text(t), &t.kind)),
        }
    }

    fn expected<T>(&self, what: &str) -> R<T> {
        self.expected_as(what, what)
    }

    /// "expected `short`, found ...", with the `long` list under the caret.
    fn expected_as<T>(&self, short: &str, long: &str) -> R<T> {
        let (span, found) = self.found();
        Err(Error::new(span, format!("expected {short}, found {found}")).expected(long))
    }

    fn expect_kw(&mut self, kw: &str, what: &str) -> R<Span> {
        if self.peek_kw(kw) {
            Ok(self.bump().map(|t| t.span).unwrap_or_default())
        } else {
            self.expected(what)
        }
    }

    /// The next token, which must be a word (a value, a name).
    fn word(&mut self, what: &str) -> R<(&'s str, Span)> {
        match self.peek() {
            Some(t) if t.kind == Kind::Word && !self.at_line_keyword() => {
                let t = self.bump().expect("peeked");
                Ok((self.text(&t), t.span))
            }
            Some(Tok { kind: Kind::Str(s), span, .. }) if !what.contains("string") => {
                let (s, span) = (s.clone(), *span);
                Err(Error::new(span, format!("\"{s}\" is quoted; write it without quotes")).expected(what.to_string()))
            }
            _ => self.expected(what),
        }
    }

    fn string(&mut self, what: &str) -> R<(String, Span)> {
        match self.peek() {
            Some(Tok { kind: Kind::Str(s), span, .. }) => {
                let r = (s.clone(), *span);
                self.i += 1;
                Ok(r)
            }
            Some(t) if t.kind == Kind::Word && !self.at_line_keyword() => {
                let text = self.text(t);
                Err(Error::new(t.span, format!("'{text}' needs quotes")).expected(what.to_string()).help(format!("write \"{text}\"")))
            }
            _ => self.expected(what),
        }
    }

    fn duration(&mut self, range: DurRange) -> R<Duration> {
        let (w, span) = self.word(EXPECT_DURATION)?;
        num::duration(w, span, range)
    }

    /// The whole file. Errors are in `self.errors`.
    pub fn file(&mut self) -> File {
        let mut items = Vec::new();
        while self.peek().is_some() && self.errors.len() < MAX_ERRORS {
            let start = self.i;
            self.depth = 0;
            let r = if self.peek_kw("CLASS") {
                self.class_decl().map(Item::Class)
            } else if self.peek_kw("IF") {
                self.rule().map(Item::Rule)
            } else if self.peek_kw("GROUP") {
                self.group_decl().map(Item::Group)
            } else if self.peek_kw("SLA") {
                self.sla().map(Item::Sla)
            } else if self.peek_kw("SHED") {
                self.shed().map(Item::Shed)
            } else {
                self.expected_as("a statement", EXPECT_STATEMENT)
            };
            match r {
                Ok(item) => items.push(item),
                Err(mut e) => {
                    // An error at input the lexer already reported is not reported again.
                    e.silent = self.peek().is_some_and(|t| t.kind == Kind::Bad && t.span == e.span);
                    self.errors.push(e);
                    self.recover(start);
                }
            }
        }
        File { items }
    }

    /// Skip to the next token that starts a line with `IF` or `CLASS`, past the statement that
    /// began at token `start`.
    fn recover(&mut self, start: usize) {
        if self.i <= start {
            self.i = start + 1;
        }
        while let Some(t) = self.peek() {
            if t.line_start && self.starts_statement() {
                break;
            }
            self.i += 1;
        }
    }

    fn class_decl(&mut self) -> R<ClassDecl> {
        let kw = self.bump().expect("peeked CLASS").span;
        let name = self.name("class", "HIGH")?;
        self.expect_kw("IF", "IF after the class name")?;
        let cond = self.cond()?;
        if self.peek_kw("THEN") {
            let span = self.peek().map(|t| t.span).unwrap_or_default();
            return Err(Error::new(span, "a class declaration has no THEN: it only names the clients its condition matches")
                .expected("AND, OR, or the next rule or class")
                .help(format!("act on the class in a rule: IF CLASS == {} THEN ...", name.name)));
        }
        Ok(ClassDecl { name, cond, span: kw.to(self.prev_span()) })
    }

    /// A class or group name (`what`: "class", "group").
    fn name(&mut self, what: &str, example: &str) -> R<Ident> {
        let (name, span) = self.word(&format!("a {what} name such as {example}"))?;
        if !is_ident(name) {
            return Err(Error::new(span, format!("'{name}' is not a {what} name"))
                .expected("a name of letters, digits and _, starting with a letter (at most 64)"));
        }
        Ok(Ident { name: name.to_string(), span })
    }

    fn group_decl(&mut self) -> R<GroupDecl> {
        let kw = self.bump().expect("peeked GROUP").span;
        let name = self.name("group", "db")?;
        self.expect_kw("IF", "IF after the group name")?;
        let cond = self.cond()?;
        if self.peek_kw("THEN") {
            let span = self.peek().map(|t| t.span).unwrap_or_default();
            return Err(Error::new(span, "a group declaration has no THEN: it only names the requests its condition matches")
                .expected("AND, OR, or the next statement")
                .help(format!("act on the group in a rule: IF GROUP == {} THEN ...", name.name)));
        }
        Ok(GroupDecl { name, cond, span: kw.to(self.prev_span()) })
    }

    /// `SLA class RT[.stat] < d` or `SLA GROUP name RT[.stat] < d`.
    fn sla(&mut self) -> R<SlaDecl> {
        let kw = self.bump().expect("peeked SLA").span;
        let target = if self.peek_kw("GROUP") {
            self.bump();
            SlaTarget::Group(self.name("group", "db")?)
        } else {
            SlaTarget::Class(self.name("class", "HIGH")?)
        };
        let (w, span) = self.word("RT, RT.MEAN or RT.P<n> (such as RT.P95)")?;
        let upper = w.to_ascii_uppercase();
        let stat = match upper.as_str() {
            "RT" | "RT.MEAN" => Stat::Mean,
            _ => match upper.strip_prefix("RT.P").and_then(|p| p.parse::<u8>().ok()).filter(|p| (1..=99).contains(p)) {
                Some(p) => Stat::Percentile(p),
                None => {
                    return Err(Error::new(span, format!("'{w}' is not a statistic of response times"))
                        .expected("RT, RT.MEAN or RT.P<n> with n from 1 to 99 (such as RT.P95)"))
                }
            },
        };
        match self.peek() {
            Some(t) if t.kind == Kind::Lt => {
                self.bump();
            }
            _ => {
                let (span, found) = self.found();
                return Err(Error::new(span, format!("expected < after {upper}, found {found}"))
                    .expected("<: a target is an upper bound (SLA HIGH RT.P95 < 2s)"));
            }
        }
        let limit = self.duration(num::THRESHOLD)?;
        Ok(SlaDecl { target, stat, limit, span: kw.to(self.prev_span()) })
    }

    /// `SHED class { , class }`.
    fn shed(&mut self) -> R<ShedDecl> {
        let kw = self.bump().expect("peeked SHED").span;
        let mut classes = vec![self.name("class", "LOW")?];
        while self.peek().is_some_and(|t| t.kind == Kind::Comma) {
            self.bump();
            classes.push(self.name("class", "LOW")?);
        }
        Ok(ShedDecl { classes, span: kw.to(self.prev_span()) })
    }

    fn rule(&mut self) -> R<Rule> {
        let kw = self.bump().expect("peeked IF").span;
        let cond = self.cond()?;
        if !self.peek_kw("THEN") {
            let (span, found) = self.found();
            return Err(Error::new(span, format!("expected AND, OR or THEN after the condition, found {found}")).expected("AND, OR or THEN"));
        }
        self.bump();
        let mut actions = vec![self.action()?];
        while let Some(t) = self.peek() {
            if self.is_action_word(t) {
                actions.push(self.action()?);
            } else if self.starts_statement() {
                break;
            } else {
                let (span, found) = (t.span, describe(self.text(t), &t.kind));
                return Err(Error::new(span, format!("expected another action or the next rule, found {found}")).expected("an action, IF or CLASS"));
            }
        }
        Ok(Rule { cond, actions, span: kw.to(self.prev_span()) })
    }

    fn cond(&mut self) -> R<Cond> {
        let mut xs = vec![self.and()?];
        while self.peek_kw("OR") {
            self.bump();
            xs.push(self.and()?);
        }
        Ok(if xs.len() == 1 { xs.pop().expect("one") } else { Cond::Or(xs) })
    }

    fn and(&mut self) -> R<Cond> {
        let mut xs = vec![self.unary()?];
        while self.peek_kw("AND") {
            self.bump();
            xs.push(self.unary()?);
        }
        Ok(if xs.len() == 1 { xs.pop().expect("one") } else { Cond::And(xs) })
    }

    fn deeper(&mut self, span: Span) -> R<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(Error::new(span, format!("conditions nest deeper than {MAX_DEPTH} levels of NOT and parentheses")));
        }
        Ok(())
    }

    fn unary(&mut self) -> R<Cond> {
        if self.peek_kw("NOT") {
            let span = self.bump().expect("peeked").span;
            self.deeper(span)?;
            let c = self.unary()?;
            self.depth -= 1;
            return Ok(Cond::Not(Box::new(c)));
        }
        if self.peek().is_some_and(|t| t.kind == Kind::LParen) {
            let open = self.bump().expect("peeked").span;
            self.deeper(open)?;
            let c = self.cond()?;
            if self.peek().is_some_and(|t| t.kind == Kind::RParen) {
                self.bump();
            } else {
                let (line, col) = crate::diag::SourceMap::new(self.src).line_col(open.start);
                let (span, found) = self.found();
                return Err(Error::new(span, format!("expected ')' to close the '(' at {line}:{col}, found {found}")).expected("AND, OR or ')'"));
            }
            self.depth -= 1;
            return Ok(Cond::Group(Box::new(c)));
        }
        self.atom()
    }

    fn eq_op(&mut self, field: &str) -> R<bool> {
        match self.peek().map(|t| (&t.kind, t.span)) {
            Some((Kind::Eq | Kind::EqEq, _)) => {
                self.bump();
                Ok(false)
            }
            Some((Kind::Ne, _)) => {
                self.bump();
                Ok(true)
            }
            Some((Kind::Lt | Kind::Le | Kind::Gt | Kind::Ge, span)) => {
                Err(Error::new(span, format!("{field} compares only for equality")).expected("==, = or !="))
            }
            _ => self.expected(&format!("==, = or != after {field}")),
        }
    }

    /// A plain name (no quotes needed) or a quoted glob: SITE's and METHOD's value.
    fn name_or_glob(&mut self, name: &str, either: &str) -> R<Glob> {
        Ok(match self.peek() {
            Some(t) if t.kind == Kind::Word && !self.at_line_keyword() => Glob::new(self.word(name)?.0.to_string()),
            _ => Glob::new(self.string(either)?.0),
        })
    }

    /// `==`, `=` or `!=` after a COOKIE or HEADER field, whose other form is `EXISTS`.
    fn eq_op_or_exists(&mut self, field: &str) -> R<bool> {
        match self.peek().map(|t| &t.kind) {
            Some(Kind::Eq | Kind::EqEq | Kind::Ne | Kind::Lt | Kind::Le | Kind::Gt | Kind::Ge) => self.eq_op(field),
            _ => self.expected(&format!("EXISTS, or ==, = or != and a \"string\", after {field}.<name>")),
        }
    }

    fn cmp(&mut self, field: &str) -> R<Cmp> {
        let c = match self.peek().map(|t| &t.kind) {
            Some(Kind::Eq | Kind::EqEq) => Cmp::Eq,
            Some(Kind::Ne) => Cmp::Ne,
            Some(Kind::Lt) => Cmp::Lt,
            Some(Kind::Le) => Cmp::Le,
            Some(Kind::Gt) => Cmp::Gt,
            Some(Kind::Ge) => Cmp::Ge,
            _ => return self.expected(&format!("a comparison (==, =, !=, <, <=, >, >=) after {field}")),
        };
        self.bump();
        Ok(c)
    }

    fn atom(&mut self) -> R<Cond> {
        let Some(t) = self.peek().cloned() else { return self.expected_as("a test", EXPECT_TEST) };
        let field = self.text(&t);
        let upper = field.to_ascii_uppercase();
        if t.kind != Kind::Word || self.at_line_keyword() || matches!(upper.as_str(), "THEN" | "AND" | "OR" | "IF") {
            return self.expected_as("a test", EXPECT_TEST);
        }
        self.bump();
        let test = match upper.as_str() {
            "IP.SRC" | "IP.DST" => {
                let end = if upper == "IP.SRC" { End::Src } else { End::Dst };
                let negated = self.eq_op(&upper)?;
                let (w, span) = self.word("an address pattern such as 10.4.*.*, 10.4.0.0/16 or 2001:db8::/32")?;
                Test::Addr { end, negated, pattern: addr::parse(w, span)? }
            }
            "PORT.SRC" | "PORT.DST" => {
                let end = if upper == "PORT.SRC" { End::Src } else { End::Dst };
                let cmp = self.cmp(&upper)?;
                let (w, span) = self.word("a port number")?;
                Test::Port { end, cmp, port: num::integer(w, span, "a port", 0, 65535)? as u16 }
            }
            "RT" => {
                let cmp = self.cmp("RT")?;
                let limit = self.duration(num::THRESHOLD)?;
                if self.peek_kw("FOR") {
                    let span = self.bump().expect("peeked").span;
                    return Err(Error::new(span, "FOR holds a class's RT.<class> test; RT is the current pageview's elapsed time")
                        .expected("AND, OR or THEN")
                        .help("hysteresis applies to class aggregates such as RT.HIGH > 3s FOR 5s"));
                }
                Test::Rt { cmp, limit }
            }
            _ if upper.starts_with("RT.") => {
                let (class, stat) = class_field(field, t.span)?;
                let cmp = self.cmp(field)?;
                let limit = self.duration(num::THRESHOLD)?;
                let hold = if self.peek_kw("FOR") {
                    self.bump();
                    Some(self.duration(num::HOLD)?)
                } else {
                    None
                };
                Test::ClassRt { class, stat, cmp, limit, hold }
            }
            "URL" | "HOST" | "CONTENT-TYPE" => {
                let negated = self.eq_op(&upper)?;
                let (s, _) = self.string("a \"string\" (* matches any run of characters, ? one)")?;
                let pattern = Glob::new(s);
                match upper.as_str() {
                    "URL" => Test::Url { negated, pattern },
                    "HOST" => Test::Host { negated, pattern },
                    _ => Test::ContentType { negated, pattern },
                }
            }
            "SITE" => {
                let negated = self.eq_op("SITE")?;
                let pattern = self.name_or_glob("a site name", "a site name, such as shop.example.com, or a \"glob\" such as \"*.example.com\"")?;
                Test::Site { negated, pattern }
            }
            "METHOD" => {
                let negated = self.eq_op("METHOD")?;
                let pattern = self.name_or_glob("a method", "a method, such as GET, or a \"glob\" such as \"P*\"")?;
                Test::Method { negated, pattern }
            }
            _ if upper.starts_with("COOKIE.") || upper.starts_with("HEADER.") => {
                let cookie = upper.starts_with("COOKIE.");
                let name = &field[7..];
                let bad = name.char_indices().find(|(_, c)| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')));
                if name.is_empty() || bad.is_some() {
                    let what = if cookie { "a cookie name, such as COOKIE.cart" } else { "a header name, such as HEADER.X-Tier" };
                    let start = t.span.start as usize + 7;
                    let (at, msg) = match bad {
                        Some((i, c)) => (
                            Span::new(start + i, start + i + c.len_utf8()),
                            format!("'{c}' cannot be in {}", if cookie { "a cookie's name" } else { "a header's name" }),
                        ),
                        None => (Span::new(start, t.span.end as usize), format!("{} needs a name after the dot", &upper[..6])),
                    };
                    return Err(Error::new(at, msg).expected(what));
                }
                let cond = if self.peek_kw("EXISTS") {
                    self.bump();
                    FieldCond::Exists
                } else {
                    let negated = self.eq_op_or_exists(&upper[..6])?;
                    let (s, _) = self.string("a \"string\" (* matches any run of characters, ? one)")?;
                    FieldCond::Matches { negated, pattern: Glob::new(s) }
                };
                if cookie {
                    Test::Cookie { name: name.to_string(), cond }
                } else {
                    Test::Header { name: name.to_string(), cond }
                }
            }
            "GROUP" | "CLASS" => {
                let negated = self.eq_op(&upper)?;
                let what = if upper == "GROUP" { "group" } else { "class" };
                let (name, span) = self.word(&format!("a {what} name"))?;
                if !is_ident(name) {
                    return Err(Error::new(span, format!("'{name}' is not a {what} name")).expected(format!("a {what} name")));
                }
                let id = Ident { name: name.to_string(), span };
                if upper == "GROUP" {
                    Test::Group { negated, group: id }
                } else {
                    Test::Class { negated, class: id }
                }
            }
            _ => {
                let mut e = Error::new(t.span, format!("unknown test '{field}'")).expected(EXPECT_TEST);
                if let Some(h) = field_hint(&upper) {
                    e = e.help(format!("did you mean {h}?"));
                }
                return Err(e);
            }
        };
        Ok(Cond::Atom(Atom { test, span: t.span.to(self.prev_span()) }))
    }

    fn action(&mut self) -> R<Action> {
        let Some(t) = self.bump() else { return self.expected_as("an action", EXPECT_ACTION) };
        let word = self.text(&t).to_ascii_uppercase();
        let kind = match word.as_str() {
            "DROP" => {
                self.expect_kw("SYN", "SYN after DROP")?;
                ActionKind::DropSyn
            }
            "LIMIT" => {
                let requests = self.peek_kw("REQUESTS");
                if requests {
                    self.bump();
                } else {
                    self.expect_kw("SYN", "SYN or REQUESTS after LIMIT")?;
                }
                let what = if requests { "REQUESTS" } else { "SYN" };
                let (w, span) = self.word("a rate such as 200/s")?;
                let rate = num::rate(w, span)?;
                self.expect_kw("BURST", &format!("BURST and a bucket size after the rate (LIMIT {what} 200/s BURST 20)"))?;
                let (w, span) = self.word("a bucket size")?;
                let burst = num::integer(w, span, "a BURST", 1, 1_000_000)? as u32;
                if requests {
                    ActionKind::LimitRequests { rate, burst }
                } else {
                    ActionKind::LimitSyn { rate, burst }
                }
            }
            "FAST" => {
                let (mut syn, mut synack) = (false, false);
                loop {
                    let (w, span) = self.word("SYN or SYN/ACK")?;
                    let slot = match w.to_ascii_uppercase().as_str() {
                        "SYN" => &mut syn,
                        "SYN/ACK" => &mut synack,
                        other => {
                            let mut e = Error::new(span, format!("expected SYN or SYN/ACK after FAST, found '{w}'")).expected("SYN or SYN/ACK");
                            if matches!(other, "SYNACK" | "SYN-ACK" | "SYN_ACK") {
                                e = e.help("write SYN/ACK");
                            }
                            return Err(e);
                        }
                    };
                    if *slot {
                        return Err(
                            Error::new(span, format!("{} is already in this FAST", w.to_ascii_uppercase())).expected("GAP or the next action")
                        );
                    }
                    *slot = true;
                    if self.peek().is_some_and(|t| t.kind == Kind::Plus) {
                        self.bump();
                    } else {
                        break;
                    }
                }
                let (gap, gap_written) = if self.peek_kw("GAP") {
                    self.bump();
                    (self.duration(num::GAP)?, true)
                } else {
                    (DEFAULT_GAP, false)
                };
                ActionKind::Fast { syn, synack, gap, gap_written }
            }
            "DELAY" => {
                self.expect_kw("FIRST", "FIRST SYN after DELAY (DELAY FIRST SYN 3s)")?;
                self.expect_kw("SYN", "SYN after DELAY FIRST")?;
                ActionKind::DelayFirstSyn { delay: self.duration(num::DELAY)? }
            }
            "HALT" => {
                self.expect_kw("FAST", "FAST SYN after HALT")?;
                self.expect_kw("SYN", "SYN after HALT FAST")?;
                ActionKind::HaltFastSyn
            }
            "REMOVE" => {
                self.expect_kw("EMBEDS", "EMBEDS after REMOVE")?;
                let (select, _) = self.embed_clauses(false)?;
                ActionKind::RemoveEmbeds { select }
            }
            "REWRITE" => {
                self.expect_kw("EMBEDS", "EMBEDS after REWRITE")?;
                let (select, mapping) = self.embed_clauses(true)?;
                ActionKind::RewriteEmbeds { select, mapping }
            }
            "REJECT" => {
                let status = match self.peek() {
                    Some(t) if t.kind == Kind::Word && !self.at_line_keyword() && self.text(t).bytes().all(|b| b.is_ascii_digit()) => {
                        let (w, span) = self.word("a status")?;
                        num::integer(w, span, "a REJECT status", 400, 599)? as u16
                    }
                    _ => DEFAULT_REJECT_STATUS,
                };
                let retry_after = if self.peek_kw("RETRY-AFTER") {
                    self.bump();
                    Some(self.duration(num::RETRY_AFTER)?)
                } else {
                    None
                };
                ActionKind::Reject { status, retry_after }
            }
            "ABORT" => {
                self.expect_kw("IDLE", "IDLE after ABORT (ABORT IDLE [AFTER 1s])")?;
                let after = if self.peek_kw("AFTER") {
                    self.bump();
                    self.duration(num::IDLE_AFTER)?
                } else {
                    DEFAULT_ABORT_AFTER
                };
                ActionKind::AbortIdle { after }
            }
            _ => {
                self.i -= 1;
                let (span, found) = self.found();
                let mut e = Error::new(span, format!("expected an action, found {found}")).expected(EXPECT_ACTION);
                if matches!(word.as_str(), "AND" | "OR" | "NOT") {
                    e = e.help("the condition ends at THEN; put every test before it");
                }
                return Err(e);
            }
        };
        Ok(Action { kind, span: t.span.to(self.prev_span()) })
    }

    /// After `REMOVE EMBEDS` / `REWRITE EMBEDS`: one selector and (for rewrites) `USING "file"`,
    /// in either order.
    fn embed_clauses(&mut self, rewrite: bool) -> R<(EmbedSelect, Option<(String, Span)>)> {
        let mut select: Option<(EmbedSelect, Span)> = None;
        let mut mapping: Option<(String, Span)> = None;
        loop {
            let start = self.peek().map(|t| t.span).unwrap_or_default();
            let sel = if self.peek_kw("AFTER") {
                self.bump();
                let (w, span) = self.word("how many embedded objects to keep")?;
                EmbedSelect::After(num::integer(w, span, "a count", 0, MAX_EMBED_POS)? as u32)
            } else if self.peek_kw("AT") {
                self.bump();
                let mut at = Vec::new();
                loop {
                    let (w, span) = self.word("the position of an embedded object (1 is the first)")?;
                    let n = num::integer(w, span, "a position", 1, MAX_EMBED_POS)? as u32;
                    if at.contains(&n) {
                        return Err(Error::new(span, format!("position {n} is already listed")).expected("another position"));
                    }
                    at.push(n);
                    if at.len() > 1000 {
                        return Err(Error::new(span, "more than 1000 positions"));
                    }
                    if self.peek().is_some_and(|t| t.kind == Kind::Comma) {
                        self.bump();
                    } else {
                        break;
                    }
                }
                EmbedSelect::At(at)
            } else if self.peek_kw("MATCHING") {
                self.bump();
                EmbedSelect::Matching(Glob::new(self.string("a URL pattern in quotes such as \"*.gif\"")?.0))
            } else if self.peek_kw("IF") && self.is_kw(self.peek_at(1), "PREDICTED") {
                self.bump();
                self.bump();
                self.expect_kw("RT", "RT after PREDICTED (IF PREDICTED RT > 3s)")?;
                let cmp = match self.peek().map(|t| (&t.kind, t.span)) {
                    Some((Kind::Gt, _)) => Cmp::Gt,
                    Some((Kind::Ge, _)) => Cmp::Ge,
                    Some((_, span)) if self.peek().is_some_and(|t| t.kind != Kind::Word) => {
                        return Err(Error::new(span, "PREDICTED RT compares only with > or >= (the goal it must not pass)").expected("> or >="))
                    }
                    _ => return self.expected("> or >= after PREDICTED RT"),
                };
                self.bump();
                EmbedSelect::Predicted { cmp, goal: self.duration(num::THRESHOLD)? }
            } else if rewrite && self.peek_kw("USING") {
                let span = self.bump().expect("peeked").span;
                let (file, fspan) = self.string("a mapping file name in quotes")?;
                if mapping.is_some() {
                    return Err(Error::new(span, "this REWRITE EMBEDS already has USING").expected("one USING"));
                }
                if file.is_empty() {
                    return Err(Error::new(fspan, "the mapping file name is empty").expected("a mapping file name in quotes"));
                }
                mapping = Some((file, fspan));
                continue;
            } else {
                break;
            };
            if select.is_some() {
                return Err(Error::new(start.to(self.prev_span()), "an action takes one selector: AFTER, AT, MATCHING or IF PREDICTED")
                    .expected("one selector"));
            }
            select = Some((sel, start));
        }
        Ok((select.map_or(EmbedSelect::All, |s| s.0), mapping))
    }
}

use std::time::Duration;

/// `RT.HIGH`, `RT.HIGH.P95`, `RT.ALL.MEAN`.
fn class_field(field: &str, span: Span) -> R<(ClassRef, Stat)> {
    let parts: Vec<&str> = field.split('.').collect();
    let name = parts[1];
    let name_at = 3;
    let name_span = span.sub(name_at, name_at + name.len());
    if parts.len() > 3 || !is_ident(name) {
        return Err(Error::new(span, format!("'{field}' is not a class response time"))
            .expected("RT.<class>, RT.<class>.MEAN or RT.<class>.P<1-99> (RT.ALL for every class)"));
    }
    let class =
        if name.eq_ignore_ascii_case("ALL") { ClassRef::All(name_span) } else { ClassRef::Named(Ident { name: name.to_string(), span: name_span }) };
    let stat = match parts.get(2) {
        None => Stat::Mean,
        Some(s) => {
            let sspan = span.sub(name_at + name.len() + 1, field.len());
            let u = s.to_ascii_uppercase();
            if u == "MEAN" {
                Stat::Mean
            } else if let Some(p) = u.strip_prefix('P').filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())) {
                match p.parse::<u8>() {
                    Ok(v @ 1..=99) if p.len() <= 2 => Stat::Percentile(v),
                    _ => return Err(Error::new(sspan, format!("'{s}' is not a percentile")).expected("P1 to P99")),
                }
            } else {
                return Err(Error::new(sspan, format!("unknown statistic '{s}'")).expected("MEAN or a percentile P1 to P99 (P95)"));
            }
        }
    };
    Ok((class, stat))
}

/// Spellings seen elsewhere (the paper's prose writes `RT_HIGH`) and what they are here.
fn field_hint(upper: &str) -> Option<String> {
    let h = match upper {
        "SRC" | "IP.SOURCE" | "SRC.IP" | "IP_SRC" | "IPSRC" => "IP.SRC",
        "DST" | "IP.DEST" | "DST.IP" | "IP_DST" | "IPDST" => "IP.DST",
        "TCP.DPORT" | "DPORT" | "IP.DST.PORT" | "PORT" | "TCP.DST" => "PORT.DST",
        "TCP.SPORT" | "SPORT" | "IP.SRC.PORT" | "TCP.SRC" => "PORT.SRC",
        "CONTENT_TYPE" | "CONTENTTYPE" | "TYPE" | "CONTENT.TYPE" | "MIME" => "CONTENT-TYPE",
        "URI" | "PATH" => "URL",
        _ => {
            if let Some(c) = upper.strip_prefix("RT_") {
                return Some(format!("RT.{c}"));
            }
            return None;
        }
    };
    Some(h.to_string())
}

fn describe(text: &str, kind: &Kind) -> String {
    match kind {
        Kind::Str(s) => format!("the string \"{}\"", truncate(s)),
        _ => format!("'{}'", truncate(text)),
    }
}

fn truncate(s: &str) -> String {
    if s.chars().count() > 40 {
        format!("{}...", s.chars().take(40).collect::<String>())
    } else {
        s.to_string()
    }
}
