//! Type checking: class names resolve, class conditions depend on the client only, every test of
//! a rule can be decided at every node where one of its actions acts, no action is given twice.
//! Then the tree is compiled into a [`RuleSet`].

use crate::ast::{self, ActionKind, ClassRef, Cond, Item, Test};
use crate::diag::{Error, SourceMap, Span};
use crate::eval::{
    self, Bucket, BucketId, ClassId, CompiledRule, Effect, Embeds, EmbedsId, Expr, GroupId, HeldTest, Node, RuleId, RuleSet, Scope, Sla, SlaScope,
};

/// At most this many classes (`DEFAULT` comes on top).
pub const MAX_CLASSES: usize = 1000;
/// At most this many URL groups.
pub const MAX_GROUPS: usize = 256;

/// Words a class cannot be called.
const RESERVED: &[&str] = &[
    "ALL",
    "DEFAULT",
    "IF",
    "THEN",
    "AND",
    "OR",
    "NOT",
    "CLASS",
    "FOR",
    "DROP",
    "LIMIT",
    "FAST",
    "DELAY",
    "HALT",
    "REMOVE",
    "REWRITE",
    "SYN",
    "GAP",
    "BURST",
    "EMBEDS",
    "AFTER",
    "AT",
    "MATCHING",
    "USING",
    "PREDICTED",
    "FIRST",
    "RT",
    "URL",
    "HOST",
    "SITE",
    "METHOD",
    "EXISTS",
    "REJECT",
    "GROUP",
    "SLA",
    "SHED",
    "REQUESTS",
    "ABORT",
    "IDLE",
    "MEAN",
];

/// The nodes at which a test can be decided.
fn decidable(t: &Test) -> u8 {
    let all = Node::ALL.iter().fold(0, |m, n| m | n.bit());
    match t {
        Test::Url { .. }
        | Test::Host { .. }
        | Test::Site { .. }
        | Test::Method { .. }
        | Test::Cookie { .. }
        | Test::Header { .. }
        | Test::Group { .. } => Node::Request.bit() | Node::Response.bit(),
        Test::ContentType { .. } => Node::Response.bit(),
        _ => all,
    }
}

fn test_name(t: &Test) -> &'static str {
    match t {
        Test::Addr { end: ast::End::Src, .. } => "IP.SRC",
        Test::Addr { .. } => "IP.DST",
        Test::Port { end: ast::End::Src, .. } => "PORT.SRC",
        Test::Port { .. } => "PORT.DST",
        Test::Rt { .. } => "RT",
        Test::ClassRt { .. } => "RT.<class>",
        Test::Url { .. } => "URL",
        Test::Host { .. } => "HOST",
        Test::Site { .. } => "SITE",
        Test::ContentType { .. } => "CONTENT-TYPE",
        Test::Class { .. } => "CLASS",
        Test::Method { .. } => "METHOD",
        Test::Cookie { .. } => "COOKIE.<name>",
        Test::Header { .. } => "HEADER.<name>",
        Test::Group { .. } => "GROUP",
    }
}

/// The nodes an action acts at.
pub(crate) fn action_nodes(a: &ActionKind) -> u8 {
    match a {
        ActionKind::DropSyn | ActionKind::LimitSyn { .. } | ActionKind::DelayFirstSyn { .. } | ActionKind::HaltFastSyn => Node::Syn.bit(),
        ActionKind::Fast { syn, synack, .. } => (if *syn { Node::Syn.bit() } else { 0 }) | (if *synack { Node::SynAck.bit() } else { 0 }),
        ActionKind::RemoveEmbeds { .. } => Node::Response.bit(),
        ActionKind::RewriteEmbeds { .. } | ActionKind::Reject { .. } | ActionKind::LimitRequests { .. } | ActionKind::AbortIdle { .. } => {
            Node::Request.bit()
        }
    }
}

fn why_unknown(t: &Test, node: Node) -> &'static str {
    match (t, node) {
        (Test::ContentType { .. }, Node::Request) => "a request comes before its response",
        (_, Node::Syn) => "a SYN comes before any request",
        (_, Node::SynAck) => "a SYN/ACK comes before any request",
        _ => "it is not known there",
    }
}

fn tests_at(node: Node) -> &'static str {
    match node {
        Node::Syn | Node::SynAck => "IP.SRC, IP.DST, PORT.SRC, PORT.DST, CLASS, RT or RT.<class>",
        Node::Request => "IP.SRC, IP.DST, PORT.SRC, PORT.DST, CLASS, RT, RT.<class>, URL, HOST, SITE, METHOD, COOKIE.<name>, HEADER.<name> or GROUP",
        Node::Response => "any test",
    }
}

fn atoms<'a>(c: &'a Cond, out: &mut Vec<&'a ast::Atom>) {
    match c {
        Cond::And(xs) | Cond::Or(xs) => xs.iter().for_each(|x| atoms(x, out)),
        Cond::Not(x) | Cond::Group(x) => atoms(x, out),
        Cond::Atom(a) => out.push(a),
    }
}

/// Levenshtein distance, for "did you mean".
fn distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.to_ascii_uppercase().chars().collect(), b.to_ascii_uppercase().chars().collect());
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != cb)).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The index of `name` among `declared` (in any case), or the error that names none: what is
/// declared (`more` after the list: `, DEFAULT`), the nearest name within two edits, or, with
/// nothing declared, how to declare one (`none`: what was expected and the help).
fn unknown_name(what: &str, name: &ast::Ident, declared: &[(String, Span)], none: (&str, String), more: String) -> Result<usize, Error> {
    if let Some(i) = declared.iter().position(|(n, _)| n.eq_ignore_ascii_case(&name.name)) {
        return Ok(i);
    }
    let e = Error::new(name.span, format!("no {what} is named {}", name.name));
    if declared.is_empty() {
        return Err(e.expected(none.0).help(none.1));
    }
    let names: Vec<&str> = declared.iter().map(|(n, _)| n.as_str()).collect();
    let mut e = e.expected(format!("a declared {what}: {}{more}", names.join(", ")));
    if let Some((best, _)) = declared.iter().map(|(n, _)| (n, distance(n, &name.name))).filter(|(_, d)| *d <= 2).min_by_key(|(_, d)| *d) {
        e = e.help(format!("did you mean {best}?"));
    }
    Err(e)
}

struct Checker<'a> {
    map: SourceMap<'a>,
    errors: Vec<Error>,
    classes: Vec<(String, Span)>,
    groups: Vec<(String, Span)>,
}

impl Checker<'_> {
    fn pos(&self, span: Span) -> String {
        let (l, c) = self.map.line_col(span.start);
        format!("{l}:{c}")
    }

    /// Resolve a class name (`all_too`: `ALL` is also allowed there, as in `RT.ALL`).
    fn class(&mut self, name: &ast::Ident, all_too: bool) -> Option<ClassId> {
        if name.name.eq_ignore_ascii_case(eval::DEFAULT_CLASS) {
            return Some(ClassId(self.classes.len() as u16));
        }
        let all = if all_too { " or ALL" } else { "" };
        let e = unknown_name(
            "class",
            name,
            &self.classes,
            ("a class declared with CLASS NAME IF condition", format!("declare it before using it, e.g. CLASS {} IF IP.SRC == 10.4.*.*", name.name)),
            format!(", DEFAULT{all}"),
        );
        self.resolved(e).map(|i| ClassId(i as u16))
    }

    /// Resolve a group name.
    fn group(&mut self, name: &ast::Ident) -> Option<GroupId> {
        let e = unknown_name(
            "group",
            name,
            &self.groups,
            ("a group declared with GROUP NAME IF condition", format!("declare it, e.g. GROUP {} IF URL == \"/search*\"", name.name)),
            String::new(),
        );
        self.resolved(e).map(|i| GroupId(i as u16))
    }

    /// The index a name resolved to, or its error kept.
    fn resolved(&mut self, r: Result<usize, Error>) -> Option<usize> {
        r.map_err(|e| self.errors.push(e)).ok()
    }

    /// Whether `name` may be declared as a new class or group (`what`, and its plural) beside
    /// those `declared`: not a reserved word, not taken, and not past `max` of them.
    fn new_name(&self, (what, plural): (&str, &str), name: &ast::Ident, declared: &[(String, Span)], max: usize) -> Result<(), Error> {
        if RESERVED.iter().any(|r| r.eq_ignore_ascii_case(&name.name)) {
            let why = match name.name.to_ascii_uppercase().as_str() {
                "ALL" => "RT.ALL is every pageview",
                "DEFAULT" => "DEFAULT is the class of clients no CLASS matches",
                _ => "it is a keyword",
            };
            return Err(Error::new(name.span, format!("a {what} cannot be called {}: {why}", name.name)).expected(format!("another {what} name")));
        }
        if let Some((_, at)) = declared.iter().find(|(n, _)| n.eq_ignore_ascii_case(&name.name)) {
            let at = self.pos(*at);
            return Err(Error::new(name.span, format!("{what} {} is already declared at {at}", name.name)).expected(format!("a new {what} name")));
        }
        if declared.len() == max {
            return Err(Error::new(name.span, format!("more than {max} {plural}")));
        }
        Ok(())
    }

    fn compile_cond(&mut self, c: &Cond, held: &mut Vec<HeldTest>) -> Expr {
        match c {
            Cond::And(xs) => Expr::And(xs.iter().map(|x| self.compile_cond(x, held)).collect()),
            Cond::Or(xs) => Expr::Or(xs.iter().map(|x| self.compile_cond(x, held)).collect()),
            Cond::Not(x) => Expr::Not(Box::new(self.compile_cond(x, held))),
            Cond::Group(x) => self.compile_cond(x, held),
            Cond::Atom(a) => Expr::Test(match &a.test {
                Test::Addr { end, negated, pattern } => eval::Test::Addr { end: *end, negated: *negated, pattern: *pattern },
                Test::Port { end, cmp, port } => eval::Test::Port { end: *end, cmp: *cmp, port: *port },
                Test::Rt { cmp, limit } => eval::Test::Rt { cmp: *cmp, limit: *limit },
                Test::ClassRt { class, stat, cmp, limit, hold } => {
                    let scope = match class {
                        ClassRef::All(_) => Scope::All,
                        ClassRef::Named(n) => Scope::Class(self.class(n, true).unwrap_or(ClassId(0))),
                    };
                    match hold {
                        Some(h) if !h.is_zero() => {
                            held.push(HeldTest { scope, stat: *stat, cmp: *cmp, limit: *limit, hold: *h });
                            eval::Test::Held(held.len() as u32 - 1)
                        }
                        _ => eval::Test::Agg { scope, stat: *stat, cmp: *cmp, limit: *limit },
                    }
                }
                Test::Url { negated, pattern } => eval::Test::Url { negated: *negated, pattern: pattern.clone() },
                Test::Host { negated, pattern } => eval::Test::Host { negated: *negated, pattern: pattern.clone() },
                Test::Site { negated, pattern } => eval::Test::Site { negated: *negated, pattern: pattern.clone() },
                Test::ContentType { negated, pattern } => eval::Test::ContentType { negated: *negated, pattern: pattern.clone() },
                Test::Class { negated, class } => eval::Test::Class { negated: *negated, class: self.class(class, false).unwrap_or(ClassId(0)) },
                Test::Method { negated, pattern } => eval::Test::Method { negated: *negated, pattern: pattern.clone() },
                Test::Cookie { name, cond } => eval::Test::Cookie { name: name.clone().into(), cond: cond.clone() },
                Test::Header { name, cond } => eval::Test::Header { name: name.to_ascii_lowercase().into(), cond: cond.clone() },
                Test::Group { negated, group } => eval::Test::Group { negated: *negated, group: self.group(group).unwrap_or(GroupId(0)) },
            }),
        }
    }
}

/// Check a parsed file and build its rule set.
pub(crate) fn check(file_name: &str, src: &str, file: ast::File) -> Result<RuleSet, Vec<Error>> {
    let mut ck = Checker { map: SourceMap::new(src), errors: Vec::new(), classes: Vec::new(), groups: Vec::new() };

    // Groups, then classes, so rules may name them declared after them.
    for item in &file.items {
        let Item::Group(g) = item else { continue };
        let name = &g.name;
        match ck.new_name(("group", "groups"), name, &ck.groups, MAX_GROUPS) {
            Ok(()) => ck.groups.push((name.name.clone(), name.span)),
            Err(e) => ck.errors.push(e),
        }
        let mut xs = Vec::new();
        atoms(&g.cond, &mut xs);
        for a in xs {
            let ok = matches!(
                a.test,
                Test::Url { .. } | Test::Host { .. } | Test::Site { .. } | Test::Method { .. } | Test::Cookie { .. } | Test::Header { .. }
            );
            if !ok {
                ck.errors.push(
                    Error::new(
                        a.span,
                        format!("a group cannot test {}: a request's group is decided at its head, from the request alone", test_name(&a.test)),
                    )
                    .expected("URL, HOST, SITE, METHOD, COOKIE.<name> or HEADER.<name>")
                    .help("test clients, classes and response times in IF ... THEN rules, with GROUP == name"),
                );
            }
        }
    }
    for item in &file.items {
        let Item::Class(c) = item else { continue };
        let name = &c.name;
        match ck.new_name(("class", "classes"), name, &ck.classes, MAX_CLASSES) {
            Ok(()) => ck.classes.push((name.name.clone(), name.span)),
            Err(e) => ck.errors.push(e),
        }
        let mut xs = Vec::new();
        atoms(&c.cond, &mut xs);
        for a in xs {
            let ok = matches!(a.test, Test::Addr { .. } | Test::Port { end: ast::End::Dst, .. } | Test::Site { .. });
            if !ok {
                ck.errors.push(
                    Error::new(
                        a.span,
                        format!(
                            "a class cannot test {}: a client's class is decided at its pageview's first SYN, from its addresses and the site it last asked for",
                            test_name(&a.test)
                        ),
                    )
                    .expected("IP.SRC, IP.DST, PORT.DST or SITE")
                    .help("put tests of response times, URLs and classes in IF ... THEN rules"),
                );
            }
        }
    }

    // Rules: decidability and duplicate actions.
    for item in &file.items {
        let Item::Rule(r) = item else { continue };
        let mut xs = Vec::new();
        atoms(&r.cond, &mut xs);
        for a in xs {
            let known = decidable(&a.test);
            if let Some((act, node)) = r
                .actions
                .iter()
                .find_map(|act| Node::ALL.into_iter().find(|n| action_nodes(&act.kind) & n.bit() != 0 && known & n.bit() == 0).map(|n| (act, n)))
            {
                let at = ck.pos(act.span);
                ck.errors.push(
                    Error::new(
                        a.span,
                        format!(
                            "{} cannot be decided at the {} node, where {} ({at}) acts: {}",
                            test_name(&a.test),
                            node.name(),
                            act.kind.name(),
                            why_unknown(&a.test, node)
                        ),
                    )
                    .expected(format!("a test the {} node can decide: {}", node.name(), tests_at(node)))
                    .help(match a.test {
                        Test::ContentType { .. } => "CONTENT-TYPE is known at the response node only (REMOVE EMBEDS)",
                        Test::Site { .. } => "SITE is known at the request and response nodes; at the SYN a site with an address of its own is IP.DST (and PORT.DST), or a class declared by SITE (its clients' latest site)",
                        Test::Group { .. } => "a request's GROUP is known at the request and response nodes (LIMIT REQUESTS, REJECT, REWRITE EMBEDS, REMOVE EMBEDS)",
                        Test::Method { .. } | Test::Cookie { .. } | Test::Header { .. } => {
                            "METHOD, COOKIE and HEADER are the request's: known at the request and response nodes (REJECT, REWRITE EMBEDS, REMOVE EMBEDS)"
                        }
                        _ => "URL and HOST are known at the request and response nodes (REWRITE EMBEDS, REMOVE EMBEDS)",
                    }),
                );
            }
        }
        let mut slots: Vec<(&str, Span)> = Vec::new();
        for act in &r.actions {
            let names: &[&str] = match &act.kind {
                ActionKind::Fast { syn, synack, .. } => match (syn, synack) {
                    (true, true) => &["FAST SYN", "FAST SYN/ACK"],
                    (true, false) => &["FAST SYN"],
                    _ => &["FAST SYN/ACK"],
                },
                k => &[k.name()][..],
            };
            for n in names {
                if let Some((_, at)) = slots.iter().find(|(s, _)| s == n) {
                    let at = ck.pos(*at);
                    ck.errors
                        .push(Error::new(act.span, format!("{n} is already an action of this rule, at {at}")).expected("each action once per rule"));
                } else {
                    slots.push((n, act.span));
                }
            }
        }
    }

    // Targets and what the controller may shed.
    let mut shed: Vec<(ClassId, Span)> = Vec::new();
    let mut shed_at: Option<Span> = None;
    for item in &file.items {
        let Item::Shed(d) = item else { continue };
        if let Some(at) = shed_at {
            let at = ck.pos(at);
            ck.errors.push(
                Error::new(d.span, format!("SHED is already given at {at}")).expected("one SHED, naming every class to shed, least important first"),
            );
            continue;
        }
        shed_at = Some(d.span);
        for c in &d.classes {
            let Some(id) = ck.class(c, false) else { continue };
            if let Some((_, at)) = shed.iter().find(|(i, _)| *i == id) {
                let at = ck.pos(*at);
                ck.errors.push(Error::new(c.span, format!("{} is already in SHED, at {at}", c.name)).expected("each class once"));
            } else {
                shed.push((id, c.span));
            }
        }
    }
    let mut slas: Vec<(Sla, Span)> = Vec::new();
    for item in &file.items {
        let Item::Sla(d) = item else { continue };
        let scope = match &d.target {
            ast::SlaTarget::Class(c) => {
                let Some(id) = ck.class(c, false) else { continue };
                if let Some((_, at)) = shed.iter().find(|(i, _)| *i == id) {
                    let at = ck.pos(*at);
                    ck.errors.push(
                        Error::new(
                            c.span,
                            format!("{} is shed (SHED, {at}): the controller sheds it to hold the other classes' targets, never its own", c.name),
                        )
                        .expected("a class SHED does not name"),
                    );
                    continue;
                }
                if shed_at.is_none() {
                    ck.errors.push(
                        Error::new(d.span, format!("SLA {} needs classes the controller may shed to hold it", c.name))
                            .expected("a SHED statement")
                            .help("add SHED and the less important classes, least important first, e.g. SHED LOW"),
                    );
                }
                SlaScope::Class(id)
            }
            ast::SlaTarget::Group(g) => match ck.group(g) {
                Some(id) => SlaScope::Group(id),
                None => continue,
            },
        };
        if let Some((_, at)) = slas.iter().find(|(s, _)| s.scope == scope) {
            let at = ck.pos(*at);
            ck.errors
                .push(Error::new(d.span, format!("this target's class or group already has one, at {at}")).expected("one SLA per class or group"));
            continue;
        }
        let (line, _) = ck.map.line_col(d.span.start);
        slas.push((Sla { scope, stat: d.stat, limit: d.limit, line }, d.span));
    }

    // Compile (class references that failed above compile to class 0; the errors stop us anyway).
    let mut held = Vec::new();
    let mut class_conds = Vec::new();
    let mut rules = Vec::new();
    let mut rule_items = Vec::new();
    let mut embeds = Vec::new();
    let mut buckets = Vec::new();
    let mut request_buckets = Vec::new();
    let mut group_conds = Vec::new();
    let mut by_node: [Vec<u32>; 4] = Default::default();
    for (idx, item) in file.items.iter().enumerate() {
        match item {
            Item::Class(c) => class_conds.push(ck.compile_cond(&c.cond, &mut held)),
            Item::Group(g) => group_conds.push(ck.compile_cond(&g.cond, &mut held)),
            Item::Sla(_) | Item::Shed(_) => {}
            Item::Rule(r) => {
                let id = RuleId(rules.len() as u32);
                let cond = ck.compile_cond(&r.cond, &mut held);
                let mut effects: [Vec<Effect>; 4] = Default::default();
                for act in &r.actions {
                    let mut push = |n: Node, e: Effect| effects[n.index()].push(e);
                    match &act.kind {
                        ActionKind::DropSyn => push(Node::Syn, Effect::DropSyn),
                        ActionKind::LimitSyn { rate, burst } => {
                            push(Node::Syn, Effect::LimitSyn { bucket: BucketId(buckets.len() as u32), rate: *rate, burst: *burst });
                            buckets.push(Bucket { rule: id, rate: *rate, burst: *burst });
                        }
                        ActionKind::Fast { syn, synack, gap, .. } => {
                            if *syn {
                                push(Node::Syn, Effect::FastSyn { gap: *gap });
                            }
                            if *synack {
                                push(Node::SynAck, Effect::FastSynAck { gap: *gap });
                            }
                        }
                        ActionKind::DelayFirstSyn { delay } => push(Node::Syn, Effect::DelayFirstSyn { delay: *delay }),
                        ActionKind::HaltFastSyn => push(Node::Syn, Effect::HaltFastSyn),
                        ActionKind::RemoveEmbeds { select } => {
                            push(Node::Response, Effect::RemoveEmbeds(EmbedsId(embeds.len() as u32)));
                            embeds.push(Embeds { select: select.clone(), mapping: None, mapping_span: None, map: None });
                        }
                        ActionKind::Reject { status, retry_after } => {
                            push(Node::Request, Effect::Reject { status: *status, retry_after: *retry_after })
                        }
                        ActionKind::AbortIdle { after } => push(Node::Request, Effect::AbortIdle { after: *after }),
                        ActionKind::LimitRequests { rate, burst } => {
                            push(Node::Request, Effect::LimitRequests { bucket: BucketId(request_buckets.len() as u32), rate: *rate, burst: *burst });
                            request_buckets.push(Bucket { rule: id, rate: *rate, burst: *burst });
                        }
                        ActionKind::RewriteEmbeds { select, mapping } => {
                            push(Node::Request, Effect::RewriteEmbeds(EmbedsId(embeds.len() as u32)));
                            embeds.push(Embeds {
                                select: select.clone(),
                                mapping: mapping.as_ref().map(|m| m.0.clone()),
                                mapping_span: mapping.as_ref().map(|m| m.1),
                                map: None,
                            });
                        }
                    }
                }
                for n in Node::ALL {
                    if !effects[n.index()].is_empty() {
                        by_node[n.index()].push(id.0);
                    }
                }
                let (line, col) = ck.map.line_col(r.span.start);
                rules.push(CompiledRule { cond, effects, line, col });
                rule_items.push(idx);
            }
        }
    }
    if !ck.errors.is_empty() {
        return Err(ck.errors);
    }
    let class_names = ck.classes.into_iter().map(|(n, _)| n).collect();
    let group_names = ck.groups.into_iter().map(|(n, _)| n).collect();
    let classes_by_site = file.items.iter().any(|i| {
        let Item::Class(c) = i else { return false };
        let mut xs = Vec::new();
        atoms(&c.cond, &mut xs);
        xs.iter().any(|a| matches!(a.test, Test::Site { .. }))
    });
    let mut set = RuleSet {
        classes_by_site,
        file_name: file_name.to_string(),
        ast: file,
        rule_items,
        class_names,
        class_conds,
        rules,
        by_node,
        embeds,
        buckets,
        request_buckets,
        group_names,
        group_conds,
        slas: slas.into_iter().map(|(s, _)| s).collect(),
        shed: shed.into_iter().map(|(c, _)| c).collect(),
        held,
        aggregates: Vec::new(),
    };
    let mut aggregates: Vec<(Scope, ast::Stat)> =
        (0..set.rule_count()).flat_map(|i| set.aggregate_tests(RuleId(i as u32))).map(|t| (t.scope, t.stat)).collect();
    aggregates.sort();
    aggregates.dedup();
    set.aggregates = aggregates;
    Ok(set)
}
