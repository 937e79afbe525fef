//! The typed syntax tree of a rule file, as read, with the span of every part. `Display` writes
//! each node back in canonical form (upper-case keywords, `==`, durations as `3s` / `500ms`),
//! which parses to the same tree.

use std::fmt;
use std::time::Duration;

use crate::addr::AddrPattern;
use crate::diag::Span;
use crate::glob::Glob;
use crate::num::{fmt_duration, Rate};

/// A rule file: class and group declarations, rules, targets, in file order.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct File {
    pub items: Vec<Item>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    Class(ClassDecl),
    Rule(Rule),
    Group(GroupDecl),
    Sla(SlaDecl),
    Shed(ShedDecl),
}

/// `GROUP db IF URL == "/search*" OR URL == "/best-sellers*"`: a URL group (003 Paper D): a
/// request's group is the first declaration, in file order, whose condition holds at its head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupDecl {
    pub name: Ident,
    pub cond: Cond,
    /// From `GROUP` to the end of the condition.
    pub span: Span,
}

/// `SLA HIGH RT.P95 < 2s`: a target on a class's pageview response times; `SLA GROUP db RT.P95
/// < 500ms`: on a group's requests' server times (request to first response byte).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlaDecl {
    pub target: SlaTarget,
    pub stat: Stat,
    pub limit: Duration,
    /// From `SLA` to the end of the limit.
    pub span: Span,
}

/// What an `SLA` is on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlaTarget {
    Class(Ident),
    Group(Ident),
}

/// `SHED LOW, MEDIUM`: the classes the SLA controller may shed, least important first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShedDecl {
    pub classes: Vec<Ident>,
    pub span: Span,
}

/// `CLASS HIGH IF IP.SRC == 10.4.*.*`
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassDecl {
    pub name: Ident,
    pub cond: Cond,
    /// From `CLASS` to the end of the condition.
    pub span: Span,
}

/// `IF condition THEN action...`
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub cond: Cond,
    pub actions: Vec<Action>,
    /// From `IF` to the end of the last action.
    pub span: Span,
}

/// A name as written (class names compare ASCII-case-insensitively).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ident {
    pub name: String,
    pub span: Span,
}

/// A condition. `NOT` binds tighter than `AND`, which binds tighter than `OR`; parentheses group.
/// Chains are n-ary (`a AND b AND c` is one `And` of three), so depth is only what parentheses
/// and `NOT` nest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cond {
    And(Vec<Cond>),
    Or(Vec<Cond>),
    Not(Box<Cond>),
    /// A parenthesized condition (kept so it prints back as written).
    Group(Box<Cond>),
    Atom(Atom),
}

/// One test, with its span from the field to the end of the value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Atom {
    pub test: Test,
    pub span: Span,
}

/// Comparison operators. `=` and `==` are the same test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Cmp {
    pub fn holds<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            Cmp::Eq => a == b,
            Cmp::Ne => a != b,
            Cmp::Lt => a < b,
            Cmp::Le => a <= b,
            Cmp::Gt => a > b,
            Cmp::Ge => a >= b,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Cmp::Eq => "==",
            Cmp::Ne => "!=",
            Cmp::Lt => "<",
            Cmp::Le => "<=",
            Cmp::Gt => ">",
            Cmp::Ge => ">=",
        }
    }
}

/// The two ends of a connection: the client (who sent the SYN) and the server. `IP.SRC` is the
/// client whichever way the packet at hand goes (a SYN/ACK's source is the server, but its
/// `IP.SRC` is the client), as in 004's rules, which name clients by `IP.SRC`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum End {
    /// `IP.SRC`, `PORT.SRC`: the client.
    Src,
    /// `IP.DST`, `PORT.DST`: the server.
    Dst,
}

/// `RT.HIGH`: one class, or `RT.ALL`: every pageview.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClassRef {
    All(Span),
    Named(Ident),
}

/// Which statistic of a class's recent pageview response times.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stat {
    /// `RT.HIGH`, `RT.HIGH.MEAN`: the mean over the engine's sliding window.
    Mean,
    /// `RT.HIGH.P95`: a percentile (1 to 99) over the same window.
    Percentile(u8),
}

impl fmt::Display for Stat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stat::Mean => f.write_str("MEAN"),
            Stat::Percentile(p) => write!(f, "P{p}"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Test {
    /// `IP.SRC == 10.4.*.*`, `IP.DST != 2001:db8::/32` (`==`/`=` or `!=` only).
    Addr { end: End, negated: bool, pattern: AddrPattern },
    /// `PORT.DST == 80`, `PORT.SRC >= 1024`.
    Port { end: End, cmp: Cmp, port: u16 },
    /// `RT > 2s`: the elapsed time of the current pageview.
    Rt { cmp: Cmp, limit: Duration },
    /// `RT.HIGH > 3.0s`, `RT.HIGH.P95 > 5s FOR 10s`: a class's recent pageviews.
    ClassRt { class: ClassRef, stat: Stat, cmp: Cmp, limit: Duration, hold: Option<Duration> },
    /// `URL == "/images/*"`: the request target (path and query).
    Url { negated: bool, pattern: Glob },
    /// `HOST == "shop.example.com"`: the Host header without its port, any case.
    Host { negated: bool, pattern: Glob },
    /// `SITE == shop.example.com`, `SITE == "*.example.com"`: the site a pageview is for, the
    /// Host header on HTTP and the ClientHello's SNI on TLS, without its port, any case.
    Site { negated: bool, pattern: Glob },
    /// `CONTENT-TYPE == "text/html"`: the response's media type without parameters, any case.
    ContentType { negated: bool, pattern: Glob },
    /// `CLASS == LOW`: the client's class.
    Class { negated: bool, class: Ident },
    /// `METHOD == GET`, `METHOD != "P*"`: the request's method, as sent (case-sensitive).
    Method { negated: bool, pattern: Glob },
    /// `COOKIE.cart EXISTS`, `COOKIE.tier == "gold"`: a cookie of the request, by its name
    /// (case-sensitive), from its `Cookie` header.
    Cookie { name: String, cond: FieldCond },
    /// `HEADER.X-Tier EXISTS`, `HEADER.User-Agent == "*bot*"`: a header of the request, by its
    /// name (any case); its value as sent.
    Header { name: String, cond: FieldCond },
    /// `GROUP == db`: the request's URL group (none when no `GROUP` declaration matches it).
    Group { negated: bool, group: Ident },
}

/// What a `COOKIE.<name>` or `HEADER.<name>` test asks of the field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FieldCond {
    /// `EXISTS`: the request has it.
    Exists,
    /// `== "pattern"`: it is there and its value matches; `!=`: it is not there, or its value
    /// does not match.
    Matches { negated: bool, pattern: Glob },
}

/// What a rule does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Action {
    pub kind: ActionKind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ActionKind {
    /// `DROP SYN`
    DropSyn,
    /// `LIMIT SYN 200/s BURST 20`: a token bucket per class.
    LimitSyn { rate: Rate, burst: u32 },
    /// `LIMIT REQUESTS 50/s BURST 10`: a token bucket per class and URL group; a request that
    /// finds it empty is answered as `REJECT 503` would.
    LimitRequests { rate: Rate, burst: u32 },
    /// `FAST SYN`, `FAST SYN/ACK`, `FAST SYN + SYN/ACK`, each with an optional `GAP d`.
    Fast { syn: bool, synack: bool, gap: Duration, gap_written: bool },
    /// `DELAY FIRST SYN 3s`
    DelayFirstSyn { delay: Duration },
    /// `HALT FAST SYN`
    HaltFastSyn,
    /// `REMOVE EMBEDS [selector]`
    RemoveEmbeds { select: EmbedSelect },
    /// `REWRITE EMBEDS [selector] [USING "file"]`
    /// `mapping`: the file name and where it is written.
    RewriteEmbeds { select: EmbedSelect, mapping: Option<(String, Span)> },
    /// `REJECT [status] [RETRY-AFTER d]`: the request is answered by the appliance with `status`
    /// (503 unless written) and never reaches the server.
    Reject { status: u16, retry_after: Option<Duration> },
    /// `ABORT IDLE [AFTER d]`: the connection is closed, cleanly for both ends, once it has been
    /// idle for `d` (1 s unless written) after the response to this request (003 Paper C).
    AbortIdle { after: Duration },
}

/// How long `ABORT IDLE` waits after a response when no `AFTER` is written.
pub const DEFAULT_ABORT_AFTER: Duration = Duration::from_secs(1);

/// The status `REJECT` answers with when none is written.
pub const DEFAULT_REJECT_STATUS: u16 = 503;

/// The default retransmission gap of `FAST ...` without `GAP` (004's Figure 16 rule).
pub const DEFAULT_GAP: Duration = Duration::from_millis(500);

/// Which embedded objects `REMOVE EMBEDS` / `REWRITE EMBEDS` touch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EmbedSelect {
    /// No selector: every embedded object.
    All,
    /// `AFTER 2`: all but the first two (in the order of the container page).
    After(u32),
    /// `AT 2` / `AT 2, 5`: only these (1-based, in the order of the container page).
    At(Vec<u32>),
    /// `MATCHING "*.gif"`: those whose URL matches.
    Matching(Glob),
    /// `IF PREDICTED RT > 3s`: those whose predicted transfer time would take the pageview's
    /// elapsed time past the goal.
    Predicted { cmp: Cmp, goal: Duration },
}

impl ActionKind {
    /// The action's words as in the reference (`DROP SYN`), for messages.
    pub fn name(&self) -> &'static str {
        match self {
            ActionKind::DropSyn => "DROP SYN",
            ActionKind::LimitSyn { .. } => "LIMIT SYN",
            ActionKind::LimitRequests { .. } => "LIMIT REQUESTS",
            ActionKind::Fast { syn: true, synack: true, .. } => "FAST SYN + SYN/ACK",
            ActionKind::Fast { synack: true, .. } => "FAST SYN/ACK",
            ActionKind::Fast { .. } => "FAST SYN",
            ActionKind::DelayFirstSyn { .. } => "DELAY FIRST SYN",
            ActionKind::HaltFastSyn => "HALT FAST SYN",
            ActionKind::RemoveEmbeds { .. } => "REMOVE EMBEDS",
            ActionKind::RewriteEmbeds { .. } => "REWRITE EMBEDS",
            ActionKind::Reject { .. } => "REJECT",
            ActionKind::AbortIdle { .. } => "ABORT IDLE",
        }
    }
}

impl fmt::Display for File {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for item in &self.items {
            match item {
                Item::Class(c) => writeln!(f, "{c}")?,
                Item::Rule(r) => writeln!(f, "{r}")?,
                Item::Group(g) => writeln!(f, "GROUP {} IF {}", g.name.name, g.cond)?,
                Item::Sla(s) => writeln!(f, "{s}")?,
                Item::Shed(s) => writeln!(f, "{s}")?,
            }
        }
        Ok(())
    }
}

impl fmt::Display for SlaDecl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.target {
            SlaTarget::Class(c) => write!(f, "SLA {} RT", c.name)?,
            SlaTarget::Group(g) => write!(f, "SLA GROUP {} RT", g.name)?,
        }
        if self.stat != Stat::Mean {
            write!(f, ".{}", self.stat)?;
        }
        write!(f, " < {}", fmt_duration(self.limit))
    }
}

impl fmt::Display for ShedDecl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SHED {}", self.classes.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", "))
    }
}

impl fmt::Display for ClassDecl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CLASS {} IF {}", self.name.name, self.cond)
    }
}

impl fmt::Display for Rule {
    /// `IF cond THEN` and one action per line, indented, as in 004.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IF {} THEN", self.cond)?;
        for a in &self.actions {
            write!(f, "\n  {a}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Cond {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let join = |f: &mut fmt::Formatter<'_>, xs: &[Cond], op: &str| {
            for (i, x) in xs.iter().enumerate() {
                if i > 0 {
                    write!(f, " {op} ")?;
                }
                write!(f, "{x}")?;
            }
            Ok(())
        };
        match self {
            Cond::And(xs) => join(f, xs, "AND"),
            Cond::Or(xs) => join(f, xs, "OR"),
            Cond::Not(x) => write!(f, "NOT {x}"),
            Cond::Group(x) => write!(f, "({x})"),
            Cond::Atom(a) => write!(f, "{}", a.test),
        }
    }
}

fn eq_op(negated: bool) -> &'static str {
    if negated {
        "!="
    } else {
        "=="
    }
}

impl fmt::Display for Test {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let end = |e: &End| if *e == End::Src { "SRC" } else { "DST" };
        match self {
            Test::Addr { end: e, negated, pattern } => write!(f, "IP.{} {} {pattern}", end(e), eq_op(*negated)),
            Test::Port { end: e, cmp, port } => write!(f, "PORT.{} {} {port}", end(e), cmp.as_str()),
            Test::Rt { cmp, limit } => write!(f, "RT {} {}", cmp.as_str(), fmt_duration(*limit)),
            Test::ClassRt { class, stat, cmp, limit, hold } => {
                let name = match class {
                    ClassRef::All(_) => "ALL",
                    ClassRef::Named(i) => &i.name,
                };
                write!(f, "RT.{name}")?;
                if *stat != Stat::Mean {
                    write!(f, ".{stat}")?;
                }
                write!(f, " {} {}", cmp.as_str(), fmt_duration(*limit))?;
                if let Some(h) = hold {
                    write!(f, " FOR {}", fmt_duration(*h))?;
                }
                Ok(())
            }
            Test::Url { negated, pattern } => write!(f, "URL {} {pattern}", eq_op(*negated)),
            Test::Host { negated, pattern } => write!(f, "HOST {} {pattern}", eq_op(*negated)),
            Test::Site { negated, pattern } => write!(f, "SITE {} {pattern}", eq_op(*negated)),
            Test::ContentType { negated, pattern } => write!(f, "CONTENT-TYPE {} {pattern}", eq_op(*negated)),
            Test::Class { negated, class } => write!(f, "CLASS {} {}", eq_op(*negated), class.name),
            Test::Method { negated, pattern } => write!(f, "METHOD {} {pattern}", eq_op(*negated)),
            Test::Cookie { name, cond } => write!(f, "COOKIE.{name}{cond}"),
            Test::Header { name, cond } => write!(f, "HEADER.{name}{cond}"),
            Test::Group { negated, group } => write!(f, "GROUP {} {}", eq_op(*negated), group.name),
        }
    }
}

impl fmt::Display for FieldCond {
    /// With a leading space.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FieldCond::Exists => f.write_str(" EXISTS"),
            FieldCond::Matches { negated, pattern } => write!(f, " {} {pattern}", eq_op(*negated)),
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.kind)
    }
}

impl fmt::Display for ActionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ActionKind::LimitSyn { rate, burst } => write!(f, "LIMIT SYN {rate} BURST {burst}"),
            ActionKind::LimitRequests { rate, burst } => write!(f, "LIMIT REQUESTS {rate} BURST {burst}"),
            ActionKind::Fast { gap, gap_written, .. } => {
                write!(f, "{}", self.name())?;
                if *gap_written {
                    write!(f, " GAP {}", fmt_duration(*gap))?;
                }
                Ok(())
            }
            ActionKind::DelayFirstSyn { delay } => write!(f, "DELAY FIRST SYN {}", fmt_duration(*delay)),
            ActionKind::RemoveEmbeds { select } => write!(f, "REMOVE EMBEDS{select}"),
            ActionKind::Reject { status, retry_after } => {
                f.write_str("REJECT")?;
                if *status != DEFAULT_REJECT_STATUS {
                    write!(f, " {status}")?;
                }
                if let Some(d) = retry_after {
                    write!(f, " RETRY-AFTER {}", fmt_duration(*d))?;
                }
                Ok(())
            }
            ActionKind::AbortIdle { after } => {
                f.write_str("ABORT IDLE")?;
                if *after != DEFAULT_ABORT_AFTER {
                    write!(f, " AFTER {}", fmt_duration(*after))?;
                }
                Ok(())
            }
            ActionKind::RewriteEmbeds { select, mapping } => {
                write!(f, "REWRITE EMBEDS{select}")?;
                if let Some((m, _)) = mapping {
                    write!(f, " USING {}", crate::glob::quote(m))?;
                }
                Ok(())
            }
            _ => f.write_str(self.name()),
        }
    }
}

impl fmt::Display for EmbedSelect {
    /// With a leading space when there is a selector.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EmbedSelect::All => Ok(()),
            EmbedSelect::After(n) => write!(f, " AFTER {n}"),
            EmbedSelect::At(ns) => {
                f.write_str(" AT ")?;
                for (i, n) in ns.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{n}")?;
                }
                Ok(())
            }
            EmbedSelect::Matching(g) => write!(f, " MATCHING {g}"),
            EmbedSelect::Predicted { cmp, goal } => write!(f, " IF PREDICTED RT {} {}", cmp.as_str(), fmt_duration(*goal)),
        }
    }
}
