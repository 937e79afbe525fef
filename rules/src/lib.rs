//! The rule language of the rlm appliance.
//!
//! A rule file is a list of rules in the notation of RLM (004, section 6):
//!
//! ```text
//! IF IP.SRC == *.*.*.* THEN
//!   FAST SYN + SYN/ACK GAP 500ms
//! IF IP.SRC != 10.4.*.* AND RT.HIGH > 3.0s THEN
//!   DROP SYN
//!   HALT FAST SYN
//! ```
//!
//! [`parse`] turns the text into a typed AST or a [`Diagnostic`] naming line and column;
//! [`Rule::matches`] evaluates a rule's condition against what the engine knows at a node of a
//! pageview's event graph ([`Facts`]). `#` starts a comment.

use std::collections::BTreeMap;
use std::fmt;
use std::net::Ipv4Addr;
use std::time::Duration;

/// A position in the rule file, 1-based.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pos {
    pub line: u32,
    pub col: u32,
}

/// A parse error with where it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    pub pos: Pos,
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}: {}", self.pos.line, self.pos.col, self.message)
    }
}

impl std::error::Error for Diagnostic {}

/// An IPv4 pattern such as `10.4.*.*`; a trailing `*` also matches any octets left out (`*.*.*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpPattern {
    /// Each octet, or None for `*`.
    octets: [Option<u8>; 4],
}

impl IpPattern {
    pub fn matches(&self, ip: Ipv4Addr) -> bool {
        self.octets.iter().zip(ip.octets()).all(|(p, o)| p.is_none_or(|p| p == o))
    }
}

impl fmt::Display for IpPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.octets.iter().map(|o| o.map_or("*".to_string(), |v| v.to_string())).collect();
        f.write_str(&parts.join("."))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Cmp {
    fn holds<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            Cmp::Eq => a == b,
            Cmp::Ne => a != b,
            Cmp::Lt => a < b,
            Cmp::Le => a <= b,
            Cmp::Gt => a > b,
            Cmp::Ge => a >= b,
        }
    }
}

/// One comparison of a condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Test {
    /// `IP.SRC == pattern` / `IP.DST != pattern` (only `==`/`=` and `!=`).
    IpSrc { negate: bool, pattern: IpPattern },
    IpDst { negate: bool, pattern: IpPattern },
    /// `PORT.DST == 80`.
    PortDst { cmp: Cmp, port: u16 },
    /// `RT > 2s`: elapsed response time of the packet's own pageview.
    Rt { cmp: Cmp, limit: Duration },
    /// `RT.HIGH > 3.0s`: mean response time of a service class.
    ClassRt { class: String, cmp: Cmp, limit: Duration },
}

/// What a rule does when its condition holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    DropSyn,
    /// Retransmit SYNs to the server (and/or SYN/ACKs to the client) every `gap`.
    Fast { syn: bool, synack: bool, gap: Duration },
    HaltFastSyn,
    RemoveEmbeds,
    RewriteEmbeds,
}

/// `IF tests... THEN actions...`; the tests are joined by AND.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub pos: Pos,
    pub tests: Vec<Test>,
    pub actions: Vec<Action>,
}

/// What the engine knows when it evaluates a rule.
#[derive(Clone, Debug, Default)]
pub struct Facts {
    pub src: Option<Ipv4Addr>,
    pub dst: Option<Ipv4Addr>,
    pub dst_port: Option<u16>,
    /// Elapsed RT of this packet's pageview, if it belongs to one.
    pub rt: Option<Duration>,
    /// Mean RT per service class.
    pub class_rt: BTreeMap<String, Duration>,
}

impl Test {
    /// Whether the comparison holds; a fact that is unknown makes it false.
    pub fn holds(&self, f: &Facts) -> bool {
        match self {
            Test::IpSrc { negate, pattern } => f.src.is_some_and(|ip| pattern.matches(ip) != *negate),
            Test::IpDst { negate, pattern } => f.dst.is_some_and(|ip| pattern.matches(ip) != *negate),
            Test::PortDst { cmp, port } => f.dst_port.is_some_and(|p| cmp.holds(p, *port)),
            Test::Rt { cmp, limit } => f.rt.is_some_and(|rt| cmp.holds(rt, *limit)),
            Test::ClassRt { class, cmp, limit } => f.class_rt.get(class).is_some_and(|rt| cmp.holds(*rt, *limit)),
        }
    }
}

impl Rule {
    pub fn matches(&self, f: &Facts) -> bool {
        self.tests.iter().all(|t| t.holds(f))
    }
}

#[derive(Clone, Debug, PartialEq)]
struct Tok {
    text: String,
    pos: Pos,
}

/// Split into tokens: words, and the operators `== = != <= >= < > +`.
fn lex(src: &str) -> Result<Vec<Tok>, Diagnostic> {
    let mut toks = Vec::new();
    for (ln, line) in src.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("");
        let chars: Vec<(usize, char)> = line.char_indices().collect();
        let mut i = 0;
        while i < chars.len() {
            let (_, c) = chars[i];
            let pos = Pos { line: ln as u32 + 1, col: i as u32 + 1 };
            if c.is_whitespace() {
                i += 1;
                continue;
            }
            let two: String = chars[i..chars.len().min(i + 2)].iter().map(|(_, c)| *c).collect();
            if ["==", "!=", "<=", ">="].contains(&two.as_str()) {
                toks.push(Tok { text: two, pos });
                i += 2;
            } else if "=<>+".contains(c) {
                toks.push(Tok { text: c.to_string(), pos });
                i += 1;
            } else if c.is_ascii_alphanumeric() || "*./_".contains(c) {
                let start = i;
                while i < chars.len() && (chars[i].1.is_ascii_alphanumeric() || "*./_".contains(chars[i].1)) {
                    i += 1;
                }
                toks.push(Tok { text: chars[start..i].iter().map(|(_, c)| *c).collect(), pos });
            } else {
                return Err(Diagnostic { pos, message: format!("unexpected character '{c}'") });
            }
        }
    }
    Ok(toks)
}

struct Parser {
    toks: Vec<Tok>,
    i: usize,
    end: Pos,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.i)
    }
    fn peek_is(&self, word: &str) -> bool {
        self.peek().is_some_and(|t| t.text.eq_ignore_ascii_case(word))
    }
    fn pos(&self) -> Pos {
        self.peek().map(|t| t.pos).unwrap_or(self.end)
    }
    fn err<T>(&self, message: impl Into<String>) -> Result<T, Diagnostic> {
        Err(Diagnostic { pos: self.pos(), message: message.into() })
    }
    fn next(&mut self, what: &str) -> Result<Tok, Diagnostic> {
        match self.toks.get(self.i) {
            Some(t) => {
                self.i += 1;
                Ok(t.clone())
            }
            None => self.err(format!("expected {what}, found the end of the file")),
        }
    }
    fn expect(&mut self, word: &str) -> Result<(), Diagnostic> {
        if self.peek_is(word) {
            self.i += 1;
            Ok(())
        } else {
            let found = self.peek().map(|t| format!("'{}'", t.text)).unwrap_or_else(|| "the end of the file".into());
            self.err(format!("expected {word}, found {found}"))
        }
    }

    fn rule(&mut self) -> Result<Rule, Diagnostic> {
        let pos = self.pos();
        self.expect("IF")?;
        let mut tests = vec![self.test()?];
        while self.peek_is("AND") {
            self.i += 1;
            tests.push(self.test()?);
        }
        self.expect("THEN")?;
        let mut actions = vec![self.action()?];
        while self.peek().is_some() && !self.peek_is("IF") {
            actions.push(self.action()?);
        }
        Ok(Rule { pos, tests, actions })
    }

    fn cmp(&mut self) -> Result<Cmp, Diagnostic> {
        let t = self.next("a comparison")?;
        Ok(match t.text.as_str() {
            "=" | "==" => Cmp::Eq,
            "!=" => Cmp::Ne,
            "<" => Cmp::Lt,
            "<=" => Cmp::Le,
            ">" => Cmp::Gt,
            ">=" => Cmp::Ge,
            other => return Err(Diagnostic { pos: t.pos, message: format!("expected a comparison (==, !=, <, <=, >, >=), found '{other}'") }),
        })
    }

    fn test(&mut self) -> Result<Test, Diagnostic> {
        let field = self.next("a field (IP.SRC, IP.DST, PORT.DST, RT, RT.<class>)")?;
        let upper = field.text.to_ascii_uppercase();
        match upper.as_str() {
            "IP.SRC" | "IP.DST" => {
                let cmp_pos = self.pos();
                let negate = match self.cmp()? {
                    Cmp::Eq => false,
                    Cmp::Ne => true,
                    _ => return Err(Diagnostic { pos: cmp_pos, message: "addresses compare only with == or !=".into() }),
                };
                let pattern = self.ip_pattern()?;
                Ok(if upper == "IP.SRC" { Test::IpSrc { negate, pattern } } else { Test::IpDst { negate, pattern } })
            }
            "PORT.DST" => {
                let cmp = self.cmp()?;
                let t = self.next("a port number")?;
                let port = t.text.parse().map_err(|_| Diagnostic { pos: t.pos, message: format!("'{}' is not a port number", t.text) })?;
                Ok(Test::PortDst { cmp, port })
            }
            "RT" => {
                let cmp = self.cmp()?;
                Ok(Test::Rt { cmp, limit: self.duration()? })
            }
            _ if upper.starts_with("RT.") && upper.len() > 3 => {
                let class = upper[3..].to_string();
                let cmp = self.cmp()?;
                Ok(Test::ClassRt { class, cmp, limit: self.duration()? })
            }
            _ => Err(Diagnostic { pos: field.pos, message: format!("unknown field '{}' (expected IP.SRC, IP.DST, PORT.DST, RT or RT.<class>)", field.text) }),
        }
    }

    fn ip_pattern(&mut self) -> Result<IpPattern, Diagnostic> {
        let t = self.next("an address pattern such as 10.4.*.*")?;
        let bad = |why: &str| Diagnostic { pos: t.pos, message: format!("'{}' is not an address pattern: {why}", t.text) };
        let parts: Vec<&str> = t.text.split('.').collect();
        if parts.is_empty() || parts.len() > 4 {
            return Err(bad("it needs one to four octets"));
        }
        if parts.len() < 4 && parts.last() != Some(&"*") {
            return Err(bad("a short pattern must end in *"));
        }
        let mut octets = [None; 4];
        for (i, p) in parts.iter().enumerate() {
            octets[i] = match *p {
                "*" => None,
                n => Some(n.parse::<u8>().map_err(|_| bad(&format!("'{n}' is not an octet")))?),
            };
        }
        Ok(IpPattern { octets })
    }

    fn duration(&mut self) -> Result<Duration, Diagnostic> {
        let t = self.next("a duration such as 3.0s or 500ms")?;
        let (num, scale) = if let Some(n) = t.text.strip_suffix("ms") {
            (n, 1e-3)
        } else if let Some(n) = t.text.strip_suffix('s') {
            (n, 1.0)
        } else {
            return Err(Diagnostic { pos: t.pos, message: format!("'{}' needs a unit (s or ms)", t.text) });
        };
        match num.parse::<f64>() {
            Ok(v) if v.is_finite() && v >= 0.0 => Ok(Duration::from_secs_f64(v * scale)),
            _ => Err(Diagnostic { pos: t.pos, message: format!("'{}' is not a duration", t.text) }),
        }
    }

    fn action(&mut self) -> Result<Action, Diagnostic> {
        let t = self.next("an action")?;
        match t.text.to_ascii_uppercase().as_str() {
            "DROP" => {
                self.expect("SYN")?;
                Ok(Action::DropSyn)
            }
            "HALT" => {
                self.expect("FAST")?;
                self.expect("SYN")?;
                Ok(Action::HaltFastSyn)
            }
            "REMOVE" => {
                self.expect("EMBEDS")?;
                Ok(Action::RemoveEmbeds)
            }
            "REWRITE" => {
                self.expect("EMBEDS")?;
                Ok(Action::RewriteEmbeds)
            }
            "FAST" => {
                let (mut syn, mut synack) = (false, false);
                loop {
                    let k = self.next("SYN or SYN/ACK")?;
                    match k.text.to_ascii_uppercase().as_str() {
                        "SYN" => syn = true,
                        "SYN/ACK" => synack = true,
                        other => return Err(Diagnostic { pos: k.pos, message: format!("expected SYN or SYN/ACK after FAST, found '{other}'") }),
                    }
                    if self.peek_is("+") {
                        self.i += 1;
                    } else {
                        break;
                    }
                }
                self.expect("GAP")?;
                Ok(Action::Fast { syn, synack, gap: self.duration()? })
            }
            other => Err(Diagnostic {
                pos: t.pos,
                message: format!("unknown action '{other}' (expected DROP SYN, FAST ... GAP, HALT FAST SYN, REMOVE EMBEDS or REWRITE EMBEDS)"),
            }),
        }
    }
}

/// Parse a rule file.
pub fn parse(src: &str) -> Result<Vec<Rule>, Diagnostic> {
    let toks = lex(src)?;
    let lines = src.lines().count().max(1) as u32;
    let end = Pos { line: lines, col: src.lines().last().map_or(1, |l| l.chars().count() as u32 + 1) };
    let mut p = Parser { toks, i: 0, end };
    let mut rules = Vec::new();
    while p.peek().is_some() {
        rules.push(p.rule()?);
    }
    Ok(rules)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAPER: &str = "# 004, section 6.3\nIF IP.SRC == *.*.*.* THEN\n  FAST SYN + SYN/ACK GAP 500ms\nIF IP.SRC != 10.4.*.* AND RT.HIGH > 3.0s THEN\n  DROP SYN\n  HALT FAST SYN\nIF RT > 2s THEN REWRITE EMBEDS\nIF IP.SRC = *.*.* THEN REMOVE EMBEDS\n";

    #[test]
    fn parses_the_papers_rules() {
        let rules = parse(PAPER).unwrap();
        assert_eq!(rules.len(), 4);
        assert_eq!(rules[0].actions, vec![Action::Fast { syn: true, synack: true, gap: Duration::from_millis(500) }]);
        assert_eq!(rules[1].actions, vec![Action::DropSyn, Action::HaltFastSyn]);
        assert_eq!(rules[1].pos, Pos { line: 4, col: 1 });
        assert_eq!(rules[2].tests, vec![Test::Rt { cmp: Cmp::Gt, limit: Duration::from_secs(2) }]);
    }

    #[test]
    fn evaluates_the_class_rule() {
        let rules = parse(PAPER).unwrap();
        let mut f = Facts { src: Some(Ipv4Addr::new(10, 5, 0, 9)), ..Facts::default() };
        f.class_rt.insert("HIGH".into(), Duration::from_millis(3500));
        assert!(rules[1].matches(&f), "low-priority client while HIGH is slow");
        f.src = Some(Ipv4Addr::new(10, 4, 7, 1));
        assert!(!rules[1].matches(&f), "high-priority client");
        f.src = Some(Ipv4Addr::new(10, 5, 0, 9));
        f.class_rt.insert("HIGH".into(), Duration::from_millis(2900));
        assert!(!rules[1].matches(&f), "HIGH within its goal");
        assert!(rules[0].matches(&f) && rules[3].matches(&f));
        assert!(!rules[2].matches(&f), "no pageview: RT unknown");
    }

    #[test]
    fn errors_name_line_and_column() {
        let e = parse("IF IP.SRC == 10.4.*.* THEN\n  DROP SYN\nIF RT > 3 THEN DROP SYN\n").unwrap_err();
        assert_eq!(e.pos, Pos { line: 3, col: 9 });
        assert!(e.message.contains("needs a unit"), "{e}");
        let e = parse("IF IP.SRC > 10.4.*.* THEN DROP SYN").unwrap_err();
        assert_eq!((e.pos.line, e.pos.col), (1, 11));
        let e = parse("IF IP.SRC == 10.400.*.* THEN DROP SYN").unwrap_err();
        assert_eq!(e.pos.col, 14);
        let e = parse("IF IP.SRC == 10.4.*.* THEN EXPLODE").unwrap_err();
        assert!(e.to_string().starts_with("line 1, column 28: unknown action"), "{e}");
        let e = parse("IF IP.SRC == 10.4.*.*").unwrap_err();
        assert!(e.message.contains("expected THEN, found the end of the file"), "{e}");
        let e = parse("IF IP.SRC == 10.4.*.* THEN DROP SYN ;").unwrap_err();
        assert_eq!(e.pos.col, 37);
    }

    #[test]
    fn patterns() {
        let p = |s: &str| parse(&format!("IF IP.SRC == {s} THEN DROP SYN")).map(|r| r[0].tests[0].clone());
        let Ok(Test::IpSrc { pattern, .. }) = p("10.4.*.*") else { panic!() };
        assert!(pattern.matches(Ipv4Addr::new(10, 4, 200, 3)));
        assert!(!pattern.matches(Ipv4Addr::new(10, 5, 0, 3)));
        assert_eq!(pattern.to_string(), "10.4.*.*");
        assert!(p("10.4").is_err());
        assert!(p("1.2.3.4.5").is_err());
    }
}
