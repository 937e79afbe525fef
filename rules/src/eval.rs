//! The checked rule set and its evaluation at the nodes of a pageview's event graph.
//!
//! Evaluation reads a [`Facts`] and appends [`Firing`]s to a vector the engine keeps and clears,
//! so after the first few calls it allocates nothing. Conditions use three-valued logic: a fact
//! the engine could not supply (no samples yet for `RT.HIGH`) makes its test unknown, and a rule
//! fires only when its condition is known to hold.

use std::net::SocketAddr;
use std::time::Duration;

use crate::addr::AddrPattern;
use crate::ast::{self, Cmp, EmbedSelect, End, Stat};
use crate::diag::Span;
use crate::glob::Glob;
use crate::num::Rate;

/// A node kind of the event graph where rules act (004 Figure 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Node {
    /// A client's SYN (and each fast retransmission the appliance would send of it).
    Syn,
    /// The server's SYN/ACK.
    SynAck,
    /// An HTTP request (an embedded object's request, for `REWRITE EMBEDS`).
    Request,
    /// The head and body of an HTTP response (a container page's, for `REMOVE EMBEDS`).
    Response,
}

impl Node {
    pub const ALL: [Node; 4] = [Node::Syn, Node::SynAck, Node::Request, Node::Response];

    pub fn index(self) -> usize {
        self as usize
    }
    pub(crate) fn bit(self) -> u8 {
        1 << self as u8
    }
    pub fn name(self) -> &'static str {
        match self {
            Node::Syn => "SYN",
            Node::SynAck => "SYN/ACK",
            Node::Request => "request",
            Node::Response => "response",
        }
    }
}

/// A service class: an index into the file's classes in declaration order; the last id,
/// [`RuleSet::default_class`], is `DEFAULT`, the class of clients no declaration matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClassId(pub u16);

impl ClassId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A URL group: an index into the file's `GROUP` declarations in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupId(pub u16);

impl GroupId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// What an `SLA` target is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SlaScope {
    /// A class's pageview response times.
    Class(ClassId),
    /// A group's requests' server times (request to first response byte).
    Group(GroupId),
}

/// An `SLA` target: the statistic of `scope`'s times must stay below `limit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sla {
    pub scope: SlaScope,
    pub stat: Stat,
    pub limit: Duration,
    /// Where it is written.
    pub line: u32,
}

/// A rule: its index among the file's rules (`IF` statements), in file order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleId(pub u32);

/// A `LIMIT SYN` action: the engine keeps one token bucket per (bucket, class).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BucketId(pub u32);

/// A `REMOVE EMBEDS` / `REWRITE EMBEDS` action's parameters, in [`RuleSet::embeds`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EmbedsId(pub u32);

/// Whose response times an aggregate is over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// `RT.ALL`: every pageview.
    All,
    /// `RT.<class>`: the pageviews of one class.
    Class(ClassId),
}

/// The engine's sliding-window statistics of pageview response times.
pub trait Aggregates {
    /// The statistic over the window, or `None` when there is no sample yet.
    fn rt(&self, scope: Scope, stat: Stat) -> Option<Duration>;
}

impl<F: Fn(Scope, Stat) -> Option<Duration>> Aggregates for F {
    fn rt(&self, scope: Scope, stat: Stat) -> Option<Duration> {
        self(scope, stat)
    }
}

/// No statistics at all (every `RT.<class>` test is unknown).
pub struct NoAggregates;

impl Aggregates for NoAggregates {
    fn rt(&self, _: Scope, _: Stat) -> Option<Duration> {
        None
    }
}

/// What the engine knows at a node.
#[derive(Clone, Copy)]
pub struct Facts<'a> {
    /// The client's address and port (the SYN's source), whichever way the packet goes.
    pub client: SocketAddr,
    /// The server's address and port.
    pub server: SocketAddr,
    /// The client's class ([`RuleSet::classify`]).
    pub class: ClassId,
    /// The elapsed time of the current pageview (zero at the first SYN of a new one), `None`
    /// when the packet belongs to no pageview.
    pub rt: Option<Duration>,
    /// The request target (path and query) at request and response nodes.
    pub url: Option<&'a str>,
    /// The Host header at request and response nodes.
    pub host: Option<&'a str>,
    /// The site: the Host header on HTTP, the SNI on TLS; at a SYN, the client's latest one
    /// when the engine knows it (for classes declared by SITE).
    pub site: Option<&'a str>,
    /// The Content-Type header at the response node.
    pub content_type: Option<&'a str>,
    pub aggregates: &'a dyn Aggregates,
    /// The debounced values of the `FOR` tests ([`RuleSet::update_holds`]); without them those
    /// tests are unknown.
    pub holds: Option<&'a Holds>,
    /// The request's method, headers and cookies at request and response nodes (`METHOD`,
    /// `HEADER.<name>`, `COOKIE.<name>`); without it those tests are unknown.
    pub request: Option<&'a dyn RequestFields>,
    /// The request's URL group ([`RuleSet::group_of`]; `None`: no group matches it). `GROUP`
    /// tests are unknown where `url` is.
    pub group: Option<GroupId>,
}

/// A request's fields the rules may test: what the engine kept of its head
/// ([`RuleSet::headers_used`] says which headers).
pub trait RequestFields {
    /// The method, as sent.
    fn method(&self) -> &str;
    /// The value of its first header named `name` (lower case; names compare in any case).
    fn header(&self, name: &str) -> Option<&str>;
}

/// The value of cookie `name` in a `Cookie` header's value (`a=1; tier=gold`), compared by its
/// name as sent (RFC 6265: `name=value` pairs separated by `;`, spaces around them ignored).
pub fn cookie_value<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header.split(';').find_map(|pair| {
        let (n, v) = pair.split_once('=')?;
        (n.trim() == name).then(|| v.trim().trim_matches('"'))
    })
}

impl<'a> Facts<'a> {
    /// Facts with only the connection and class known.
    pub fn new(client: SocketAddr, server: SocketAddr, class: ClassId, aggregates: &'a dyn Aggregates) -> Facts<'a> {
        Facts {
            client,
            server,
            class,
            rt: None,
            url: None,
            host: None,
            site: None,
            content_type: None,
            aggregates,
            holds: None,
            request: None,
            group: None,
        }
    }
}

/// One action to carry out at a node, with everything it needs (`Copy`, no borrow of the set).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    DropSyn,
    /// Pass the SYN if the (bucket, client's class) token bucket has a token, else drop it.
    LimitSyn {
        bucket: BucketId,
        rate: Rate,
        burst: u32,
    },
    /// Retransmit the SYN to the server every `gap` until it is answered.
    FastSyn {
        gap: Duration,
    },
    /// Retransmit the SYN/ACK to the client every `gap` until the ACK comes.
    FastSynAck {
        gap: Duration,
    },
    /// Drop the initial SYN of the pageview's first connection and send it on after `delay`.
    DelayFirstSyn {
        delay: Duration,
    },
    /// Stop fast SYN retransmissions for this client while the rule holds.
    HaltFastSyn,
    RemoveEmbeds(EmbedsId),
    RewriteEmbeds(EmbedsId),
    /// Answer the request with `status` (and `Retry-After` when given) in the server's stead.
    Reject {
        status: u16,
        retry_after: Option<Duration>,
    },
    /// Pass the request if the (bucket, client's class, request's group) token bucket has a
    /// token, else answer it as `REJECT 503` would. `bucket` indexes
    /// [`RuleSet::request_buckets`].
    LimitRequests {
        bucket: BucketId,
        rate: Rate,
        burst: u32,
    },
    /// Close the request's connection, for both ends, once it has been idle `after` its response.
    AbortIdle {
        after: Duration,
    },
}

impl Effect {
    /// Whether it acts at the request head alone (counted there, not by the embedded objects'
    /// adaptation evaluated at the same node).
    pub fn at_request_head(&self) -> bool {
        matches!(self, Effect::Reject { .. } | Effect::LimitRequests { .. } | Effect::AbortIdle { .. })
    }
}

/// A rule whose condition held, and one of its actions at the node evaluated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Firing {
    pub rule: RuleId,
    pub effect: Effect,
}

/// The parameters of a `REMOVE EMBEDS` / `REWRITE EMBEDS`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Embeds {
    pub select: EmbedSelect,
    /// `USING "file"` (rewrites only).
    pub mapping: Option<String>,
    /// Where that file name is written in the rule file.
    pub mapping_span: Option<Span>,
    /// The mapping file, read by [`crate::check_file`] (relative to the rule file's directory).
    pub map: Option<std::sync::Arc<crate::Mapping>>,
}

/// A `LIMIT SYN` bucket's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bucket {
    pub rule: RuleId,
    pub rate: Rate,
    pub burst: u32,
}

/// A class aggregate test with `FOR`, which the engine debounces with [`RuleSet::update_holds`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeldTest {
    pub scope: Scope,
    pub stat: Stat,
    pub cmp: Cmp,
    pub limit: Duration,
    pub hold: Duration,
}

/// A class-aggregate test of a rule's condition (`RT.HIGH > 1.5s`, `RT.ALL.P95 >= 3s FOR 10s`),
/// as [`RuleSet::aggregate_tests`] gives it: what a decision names as having made its rule fire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AggregateTest {
    /// `RT.` and the class as declared (`RT.HIGH`, the name pageview records give the class), or
    /// `RT.ALL`; the statistic is `stat`.
    pub name: String,
    pub scope: Scope,
    pub stat: Stat,
    pub cmp: Cmp,
    pub limit: Duration,
    /// A `FOR` test's index in [`RuleSet::held_tests`] and [`Holds`]; `None` without `FOR` (or
    /// with `FOR 0s`, which holds nothing back).
    pub held: Option<usize>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct HoldState {
    /// The value rules see.
    value: bool,
    /// The last raw comparison and since when it has had that value.
    raw: bool,
    since: Duration,
    seen: bool,
}

/// The debounced values of a rule set's `FOR` tests; the engine owns it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Holds {
    states: Vec<HoldState>,
}

impl Holds {
    /// The value rules see for held test `i` (in [`RuleSet::held_tests`] order).
    pub fn value(&self, i: usize) -> bool {
        self.states.get(i).is_some_and(|s| s.value)
    }

    /// How long held test `i`'s comparison has held, at every update, by `now` (the clock of
    /// [`RuleSet::update_holds`]); `None` while it does not hold.
    pub fn held_for(&self, i: usize, now: Duration) -> Option<Duration> {
        self.states.get(i).filter(|s| s.seen && s.raw).map(|s| now.saturating_sub(s.since))
    }
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Expr {
    And(Box<[Expr]>),
    Or(Box<[Expr]>),
    Not(Box<Expr>),
    Test(Test),
}

impl Expr {
    /// Visit the condition's class-aggregate tests (`Agg`, `Held`) in file order: the one walk
    /// behind [`RuleSet::aggregate_tests`] (and so [`RuleSet::aggregates_used`]) and
    /// [`RuleSet::syn_aggregate_signature`].
    pub(crate) fn for_each_aggregate(&self, f: &mut impl FnMut(&Test)) {
        self.for_each_test(&mut |t| {
            if matches!(t, Test::Agg { .. } | Test::Held(_)) {
                f(t)
            }
        })
    }

    /// Visit the condition's tests in file order.
    pub(crate) fn for_each_test(&self, f: &mut impl FnMut(&Test)) {
        match self {
            Expr::And(xs) | Expr::Or(xs) => {
                for x in xs.iter() {
                    x.for_each_test(f);
                }
            }
            Expr::Not(x) => x.for_each_test(f),
            Expr::Test(t) => f(t),
        }
    }

    /// What the condition requires whenever it holds, of what `leaf` reads from a test (a set
    /// of values, one of which must be so): a conjunction requires what any of its terms
    /// requires (all of them: the values they share), a disjunction what every branch does
    /// (any of their values). `None`: nothing is required.
    pub(crate) fn required<T: Copy + PartialEq>(&self, leaf: &impl Fn(&Test) -> Option<T>) -> Option<Vec<T>> {
        match self {
            Expr::Test(t) => leaf(t).map(|v| vec![v]),
            Expr::Not(_) => None,
            Expr::And(xs) => xs.iter().filter_map(|x| x.required(leaf)).reduce(|a, b| a.into_iter().filter(|v| b.contains(v)).collect()),
            Expr::Or(xs) => xs.iter().map(|x| x.required(leaf)).collect::<Option<Vec<_>>>().map(|sets| {
                let mut all = Vec::new();
                for v in sets.into_iter().flatten() {
                    if !all.contains(&v) {
                        all.push(v);
                    }
                }
                all
            }),
        }
    }

    /// Whether the condition holds only on connections to TLS's ports ([`TLS_PORTS`]), by a
    /// `PORT.DST ==` test it requires.
    pub(crate) fn tls_only(&self) -> bool {
        let port = |t: &Test| match t {
            Test::Port { end: End::Dst, cmp: Cmp::Eq, port } => Some(*port),
            _ => None,
        };
        self.required(&port).is_some_and(|ports| ports.iter().all(|p| TLS_PORTS.contains(p)))
    }
}

/// The servers' ports taken as HTTPS's when a rule names them (`PORT.DST == 443`): a class or a
/// rule that holds only there sees encrypted responses only.
pub const TLS_PORTS: [u16; 2] = [443, 8443];

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Test {
    Addr {
        end: End,
        negated: bool,
        pattern: AddrPattern,
    },
    Port {
        end: End,
        cmp: Cmp,
        port: u16,
    },
    Rt {
        cmp: Cmp,
        limit: Duration,
    },
    Agg {
        scope: Scope,
        stat: Stat,
        cmp: Cmp,
        limit: Duration,
    },
    Held(u32),
    Url {
        negated: bool,
        pattern: Glob,
    },
    Host {
        negated: bool,
        pattern: Glob,
    },
    Site {
        negated: bool,
        pattern: Glob,
    },
    ContentType {
        negated: bool,
        pattern: Glob,
    },
    Class {
        negated: bool,
        class: ClassId,
    },
    Method {
        negated: bool,
        pattern: Glob,
    },
    Cookie {
        name: Box<str>,
        cond: ast::FieldCond,
    },
    /// `name` lower case.
    Header {
        name: Box<str>,
        cond: ast::FieldCond,
    },
    Group {
        negated: bool,
        group: GroupId,
    },
}

#[derive(Clone, Debug)]
pub(crate) struct CompiledRule {
    pub cond: Expr,
    /// Effects at each node, in action order.
    pub effects: [Vec<Effect>; 4],
    pub line: u32,
    pub col: u32,
}

/// A checked rule file, ready to evaluate. Cheap to share (`&RuleSet`) across the engine.
#[derive(Clone, Debug)]
pub struct RuleSet {
    pub(crate) file_name: String,
    pub(crate) ast: ast::File,
    /// Index in `ast.items` of each rule.
    pub(crate) rule_items: Vec<usize>,
    pub(crate) class_names: Vec<String>,
    pub(crate) class_conds: Vec<Expr>,
    pub(crate) rules: Vec<CompiledRule>,
    pub(crate) by_node: [Vec<u32>; 4],
    pub(crate) embeds: Vec<Embeds>,
    pub(crate) buckets: Vec<Bucket>,
    pub(crate) request_buckets: Vec<Bucket>,
    pub(crate) group_names: Vec<String>,
    pub(crate) group_conds: Vec<Expr>,
    pub(crate) slas: Vec<Sla>,
    pub(crate) shed: Vec<ClassId>,
    pub(crate) held: Vec<HeldTest>,
    pub(crate) aggregates: Vec<(Scope, Stat)>,
    /// A class is declared by SITE.
    pub(crate) classes_by_site: bool,
}

/// The name of the class of clients no `CLASS` declaration matches.
pub const DEFAULT_CLASS: &str = "DEFAULT";

impl RuleSet {
    /// The file name given to [`crate::compile`].
    pub fn file_name(&self) -> &str {
        &self.file_name
    }

    /// The syntax tree as read.
    pub fn ast(&self) -> &ast::File {
        &self.ast
    }

    /// Declared classes plus `DEFAULT`.
    pub fn class_count(&self) -> usize {
        self.class_names.len() + 1
    }

    /// The class of clients no declaration matches (also the only class when none is declared).
    pub fn default_class(&self) -> ClassId {
        ClassId(self.class_names.len() as u16)
    }

    /// A class's name as declared (`DEFAULT` for [`RuleSet::default_class`]).
    pub fn class_name(&self, id: ClassId) -> &str {
        self.class_names.get(id.index()).map_or(DEFAULT_CLASS, String::as_str)
    }

    /// Look a class up by name (any case).
    pub fn class_id(&self, name: &str) -> Option<ClassId> {
        if name.eq_ignore_ascii_case(DEFAULT_CLASS) {
            return Some(self.default_class());
        }
        self.class_names.iter().position(|n| n.eq_ignore_ascii_case(name)).map(|i| ClassId(i as u16))
    }

    /// The class of a pageview's client: the first declaration whose condition holds for the
    /// pageview's first connection, else `DEFAULT`.
    pub fn classify(&self, client: SocketAddr, server: SocketAddr) -> ClassId {
        self.classify_site(client, server, None)
    }

    /// [`RuleSet::classify`] with the site known (`SITE` tests of the declarations read it;
    /// without one they are unknown, and their declaration does not match).
    pub fn classify_site(&self, client: SocketAddr, server: SocketAddr, site: Option<&str>) -> ClassId {
        let facts = Facts { site, ..Facts::new(client, server, self.default_class(), &NoAggregates) };
        self.class_conds.iter().position(|c| eval(c, &facts) == Some(true)).map_or(self.default_class(), |i| ClassId(i as u16))
    }

    /// Whether a class is declared by SITE: the engine then keeps each client's latest site.
    pub fn classes_by_site(&self) -> bool {
        self.classes_by_site
    }

    /// Whether class `id` is TLS-only by its declaration: it requires a `PORT.DST` of
    /// [`TLS_PORTS`].
    pub fn class_tls_only(&self, id: ClassId) -> bool {
        self.class_conds.get(id.index()).is_some_and(Expr::tls_only)
    }

    /// The rules that edit content (`REMOVE EMBEDS`, `REWRITE EMBEDS`) and hold only on TLS
    /// connections: by a `PORT.DST` test of their own, or by a `CLASS ==` test that admits only
    /// TLS-only classes. rlm cannot carry them out there (it counts each exchange as not
    /// applicable); `rlm check` says so.
    pub fn content_rules_on_tls_only(&self) -> Vec<RuleId> {
        let class = |t: &Test| match t {
            Test::Class { negated: false, class } => Some(*class),
            _ => None,
        };
        (0..self.rules.len())
            .filter(|&i| {
                let r = &self.rules[i];
                let edits = r.effects.iter().flatten().any(|e| matches!(e, Effect::RemoveEmbeds(_) | Effect::RewriteEmbeds(_)));
                let tls = r.cond.tls_only() || r.cond.required(&class).is_some_and(|cs| !cs.is_empty() && cs.iter().all(|c| self.class_tls_only(*c)));
                edits && tls
            })
            .map(|i| RuleId(i as u32))
            .collect()
    }

    /// How many rules (`IF` statements) there are; [`RuleId`]s run from 0 to this.
    pub fn rule_count(&self) -> usize {
        self.rules.len()
    }

    /// A rule as read.
    pub fn rule(&self, id: RuleId) -> Option<&ast::Rule> {
        match self.ast.items.get(*self.rule_items.get(id.0 as usize)?)? {
            ast::Item::Rule(r) => Some(r),
            _ => None,
        }
    }

    /// Line and column of a rule's `IF`, for logs (`rules.rlm:4:1`).
    pub fn rule_position(&self, id: RuleId) -> Option<(u32, u32)> {
        self.rules.get(id.0 as usize).map(|r| (r.line, r.col))
    }

    /// The rules with an action at a node.
    pub fn rules_at(&self, node: Node) -> impl Iterator<Item = RuleId> + '_ {
        self.by_node[node.index()].iter().map(|&i| RuleId(i))
    }

    /// The `REMOVE EMBEDS` / `REWRITE EMBEDS` parameters an [`Effect`] names.
    pub fn embeds(&self, id: EmbedsId) -> &Embeds {
        &self.embeds[id.0 as usize]
    }

    /// How many `REMOVE EMBEDS` / `REWRITE EMBEDS` actions there are ([`EmbedsId`] 0 to this).
    pub fn embeds_count(&self) -> usize {
        self.embeds.len()
    }

    /// The mapping files the rules name (`REWRITE EMBEDS ... USING "file"`), as written: a
    /// relative name is taken from the rule file's directory ([`crate::load_mappings`]).
    pub fn mapping_files(&self) -> impl Iterator<Item = &str> + '_ {
        self.embeds.iter().filter_map(|e| e.mapping.as_deref())
    }

    /// Every `LIMIT SYN` bucket, indexed by [`BucketId`].
    pub fn buckets(&self) -> &[Bucket] {
        &self.buckets
    }

    /// Every `FOR` test, in the order [`Holds`] keeps them.
    pub fn held_tests(&self) -> &[HeldTest] {
        &self.held
    }

    /// The class statistics the rules read (so the engine keeps only those percentiles).
    pub fn aggregates_used(&self) -> &[(Scope, Stat)] {
        &self.aggregates
    }

    /// The class-aggregate tests of a rule's condition, in file order (through `AND`, `OR` and
    /// `NOT`), `FOR` tests among them: what a decision record reads (empty for a rule that names
    /// none, or an unknown rule).
    pub fn aggregate_tests(&self, rule: RuleId) -> Vec<AggregateTest> {
        let mut out = Vec::new();
        if let Some(r) = self.rules.get(rule.0 as usize) {
            r.cond.for_each_aggregate(&mut |t: &Test| out.extend(self.aggregate_test(t)));
        }
        out
    }

    /// A class-aggregate test of a compiled condition, its `FOR` resolved; `None` for any other test.
    fn aggregate_test(&self, t: &Test) -> Option<AggregateTest> {
        let (scope, stat, cmp, limit, held) = match t {
            Test::Agg { scope, stat, cmp, limit } => (*scope, *stat, *cmp, *limit, None),
            Test::Held(i) => {
                let h = self.held.get(*i as usize)?;
                (h.scope, h.stat, h.cmp, h.limit, Some(*i as usize))
            }
            _ => return None,
        };
        let name = match scope {
            Scope::All => "RT.ALL".to_string(),
            Scope::Class(c) => format!("RT.{}", self.class_name(c)),
        };
        Some(AggregateTest { name, scope, stat, cmp, limit, held })
    }

    /// Fresh debounce state: every `FOR` test false.
    pub fn new_holds(&self) -> Holds {
        Holds { states: vec![HoldState::default(); self.held.len()] }
    }

    /// Advance the `FOR` tests to `now` (any monotonic clock, the same on every call). A held
    /// test changes value once its comparison has had the new value at every update for at
    /// least its hold time. Call it whenever the aggregates change, or on a timer.
    pub fn update_holds(&self, holds: &mut Holds, now: Duration, aggregates: &dyn Aggregates) {
        if holds.states.len() != self.held.len() {
            *holds = self.new_holds();
        }
        for (t, s) in self.held.iter().zip(holds.states.iter_mut()) {
            let raw = aggregates.rt(t.scope, t.stat).is_some_and(|v| t.cmp.holds(v, t.limit));
            if !s.seen || raw != s.raw {
                s.seen = true;
                s.raw = raw;
                s.since = now;
            }
            if s.value != s.raw && now.saturating_sub(s.since) >= t.hold {
                s.value = s.raw;
            }
        }
    }

    /// Whether some rule has an action at `node` for which `pred` holds.
    pub fn any_effect_at(&self, node: Node, pred: impl Fn(&Effect) -> bool) -> bool {
        self.by_node[node.index()].iter().any(|&i| self.rules[i as usize].effects[node.index()].iter().any(&pred))
    }

    /// Whether the SYN node's decision depends only on the client's address, the server's
    /// address and port, and the class aggregates: no class declaration and no rule acting at
    /// the SYN reads the client's port (`PORT.SRC`) or the pageview's own elapsed time (`RT`).
    /// Then a kernel fast path may apply one decision to every SYN of that key until the
    /// aggregates change ([`RuleSet::syn_aggregate_signature`]).
    pub fn syn_decided_by_addresses(&self) -> bool {
        fn reads_more(e: &Expr) -> bool {
            match e {
                Expr::And(xs) | Expr::Or(xs) => xs.iter().any(reads_more),
                Expr::Not(x) => reads_more(x),
                Expr::Test(Test::Port { end: End::Src, .. } | Test::Rt { .. }) => true,
                Expr::Test(_) => false,
            }
        }
        !self.class_conds.iter().any(reads_more) && !self.by_node[Node::Syn.index()].iter().any(|&i| reads_more(&self.rules[i as usize].cond))
    }

    /// A fingerprint of every class-aggregate test the SYN node's rules read (each one true,
    /// false or unknown, `FOR` tests as debounced): while it stays the same, so does the SYN
    /// decision for a given client and server when [`RuleSet::syn_decided_by_addresses`].
    pub fn syn_aggregate_signature(&self, aggregates: &dyn Aggregates, holds: Option<&Holds>) -> u64 {
        let any: SocketAddr = SocketAddr::from(([0, 0, 0, 0], 0));
        let mut facts = Facts::new(any, any, self.default_class(), aggregates);
        facts.holds = holds;
        let mut sig: u64 = 0xcbf2_9ce4_8422_2325;
        for &i in &self.by_node[Node::Syn.index()] {
            self.rules[i as usize].cond.for_each_aggregate(&mut |t: &Test| {
                let v: u64 = match test(t, &facts) {
                    None => 1,
                    Some(false) => 2,
                    Some(true) => 3,
                };
                // FNV-1a over the tests' values, in rule order.
                sig = (sig ^ v).wrapping_mul(0x0100_0000_01b3);
            });
        }
        sig
    }

    /// Append to `out` the actions at `node` of every rule whose condition holds, in file order.
    /// `out` is not cleared.
    pub fn eval(&self, node: Node, facts: &Facts<'_>, out: &mut Vec<Firing>) {
        for &i in &self.by_node[node.index()] {
            let rule = &self.rules[i as usize];
            if eval(&rule.cond, facts) == Some(true) {
                out.extend(rule.effects[node.index()].iter().map(|&effect| Firing { rule: RuleId(i), effect }));
            }
        }
    }

    /// The `GROUP` declarations.
    pub fn group_count(&self) -> usize {
        self.group_names.len()
    }

    /// A group's name as declared.
    pub fn group_name(&self, id: GroupId) -> &str {
        self.group_names.get(id.index()).map_or("?", String::as_str)
    }

    /// A group's id by its name (any case).
    pub fn group_id(&self, name: &str) -> Option<GroupId> {
        self.group_names.iter().position(|n| n.eq_ignore_ascii_case(name)).map(|i| GroupId(i as u16))
    }

    /// A request's URL group: the first `GROUP` declaration whose condition holds on `facts`
    /// (its URL, host, method, headers and cookies), or none.
    pub fn group_of(&self, facts: &Facts<'_>) -> Option<GroupId> {
        self.group_conds.iter().position(|c| eval(c, facts) == Some(true)).map(|i| GroupId(i as u16))
    }

    /// The `SLA` targets, in file order.
    pub fn slas(&self) -> &[Sla] {
        &self.slas
    }

    /// The classes `SHED` names, least important first (empty without `SHED`).
    pub fn shed_order(&self) -> &[ClassId] {
        &self.shed
    }

    /// The `LIMIT REQUESTS` buckets' parameters, by the `bucket` of their effects.
    pub fn request_buckets(&self) -> &[Bucket] {
        &self.request_buckets
    }

    /// The request headers the rules and groups test (lower case, each once): each
    /// `HEADER.<name>`'s, and `cookie` for `COOKIE.<name>`. The engine keeps these of a
    /// request's head for [`Facts::request`].
    pub fn headers_used(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for cond in self.rules.iter().map(|r| &r.cond).chain(&self.group_conds) {
            cond.for_each_test(&mut |t| {
                let name = match t {
                    Test::Header { name, .. } => &**name,
                    Test::Cookie { .. } => "cookie",
                    _ => return,
                };
                if !names.iter().any(|n| n == name) {
                    names.push(name.to_string());
                }
            });
        }
        names
    }

    /// [`RuleSet::eval`] at a client's SYN.
    pub fn eval_syn(&self, facts: &Facts<'_>, out: &mut Vec<Firing>) {
        self.eval(Node::Syn, facts, out)
    }
    /// [`RuleSet::eval`] at a server's SYN/ACK.
    pub fn eval_synack(&self, facts: &Facts<'_>, out: &mut Vec<Firing>) {
        self.eval(Node::SynAck, facts, out)
    }
    /// [`RuleSet::eval`] at an HTTP request.
    pub fn eval_request(&self, facts: &Facts<'_>, out: &mut Vec<Firing>) {
        self.eval(Node::Request, facts, out)
    }
    /// [`RuleSet::eval`] at an HTTP response.
    pub fn eval_response(&self, facts: &Facts<'_>, out: &mut Vec<Firing>) {
        self.eval(Node::Response, facts, out)
    }
}

/// Kleene's three-valued logic: `None` is unknown.
fn eval(e: &Expr, f: &Facts<'_>) -> Option<bool> {
    match e {
        Expr::And(xs) => {
            let mut unknown = false;
            for x in xs.iter() {
                match eval(x, f) {
                    Some(false) => return Some(false),
                    None => unknown = true,
                    Some(true) => {}
                }
            }
            if unknown {
                None
            } else {
                Some(true)
            }
        }
        Expr::Or(xs) => {
            let mut unknown = false;
            for x in xs.iter() {
                match eval(x, f) {
                    Some(true) => return Some(true),
                    None => unknown = true,
                    Some(false) => {}
                }
            }
            if unknown {
                None
            } else {
                Some(false)
            }
        }
        Expr::Not(x) => eval(x, f).map(|v| !v),
        Expr::Test(t) => test(t, f),
    }
}

fn test(t: &Test, f: &Facts<'_>) -> Option<bool> {
    let end = |e: End| if e == End::Src { f.client } else { f.server };
    Some(match t {
        Test::Addr { end: e, negated, pattern } => pattern.matches(end(*e).ip()) != *negated,
        Test::Port { end: e, cmp, port } => cmp.holds(end(*e).port(), *port),
        Test::Rt { cmp, limit } => cmp.holds(f.rt?, *limit),
        Test::Agg { scope, stat, cmp, limit } => cmp.holds(f.aggregates.rt(*scope, *stat)?, *limit),
        Test::Held(i) => f.holds?.value(*i as usize),
        Test::Url { negated, pattern } => pattern.matches(f.url?, false) != *negated,
        Test::Host { negated, pattern } => pattern.matches(host_name(f.host?), true) != *negated,
        Test::Site { negated, pattern } => pattern.matches(host_name(f.site?), true) != *negated,
        Test::ContentType { negated, pattern } => pattern.matches(media_type(f.content_type?), true) != *negated,
        Test::Class { negated, class } => (f.class == *class) != *negated,
        Test::Method { negated, pattern } => pattern.matches(f.request?.method(), false) != *negated,
        Test::Cookie { name, cond } => field(cond, f.request?.header("cookie").and_then(|h| cookie_value(h, name))),
        Test::Header { name, cond } => field(cond, f.request?.header(name)),
        Test::Group { negated, group } => {
            f.url?;
            (f.group == Some(*group)) != *negated
        }
    })
}

/// A `COOKIE` or `HEADER` test on the field's value (`None`: the request has no such field).
fn field(cond: &ast::FieldCond, value: Option<&str>) -> bool {
    match (cond, value) {
        (ast::FieldCond::Exists, v) => v.is_some(),
        (ast::FieldCond::Matches { negated, pattern }, Some(v)) => pattern.matches(v, false) != *negated,
        (ast::FieldCond::Matches { negated, .. }, None) => *negated,
    }
}

/// `shop.example.com:8080` → `shop.example.com`; `[2001:db8::1]:80` → `[2001:db8::1]`.
pub fn host_name(host: &str) -> &str {
    let host = host.trim();
    if host.starts_with('[') {
        return host.find(']').map_or(host, |i| &host[..=i]);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

/// `text/html; charset=utf-8` → `text/html`.
pub(crate) fn media_type(ct: &str) -> &str {
    ct.split(';').next().unwrap_or("").trim()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_forms() {
        assert_eq!(host_name("Shop.example.com:8080"), "Shop.example.com");
        assert_eq!(host_name("[2001:db8::1]:80"), "[2001:db8::1]");
        assert_eq!(host_name(" a "), "a");
        assert_eq!(media_type("text/html; charset=utf-8"), "text/html");
        assert_eq!(media_type(" image/gif "), "image/gif");
    }
}
