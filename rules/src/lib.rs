//! The rule language of the rlm appliance (`docs/rules.md` is the reference).
//!
//! A rule file declares service classes and rules in the notation of RLM (004, section 6):
//!
//! ```text
//! CLASS HIGH IF IP.SRC == 10.4.*.*
//! CLASS LOW IF IP.SRC != 10.4.*.*
//! IF IP.SRC == *.*.*.* THEN
//!   FAST SYN + SYN/ACK GAP 500ms
//! IF IP.SRC != 10.4.*.* AND RT.HIGH > 3.0s THEN
//!   DROP SYN
//!   HALT FAST SYN
//! ```
//!
//! [`compile`] reads and checks a file into a [`RuleSet`], or returns [`Diagnostics`] that name
//! `FILE:LINE:COL`, show the line with a caret and say what was expected. The engine then calls
//! [`RuleSet::classify`] once per pageview and [`RuleSet::eval`] (or `eval_syn`, `eval_synack`,
//! `eval_request`, `eval_response`) at each node of the pageview's event graph, with the
//! [`Facts`] it knows there; it gets back the [`Effect`]s of the rules that fire.
//!
//! ```
//! use std::net::SocketAddr;
//! let rules = rules::compile("example.rlm", "
//!     CLASS HIGH IF IP.SRC == 10.4.*.*
//!     IF IP.SRC != 10.4.*.* AND RT.HIGH > 3.0s THEN DROP SYN
//! ").unwrap();
//! let client: SocketAddr = "10.5.0.9:40000".parse().unwrap();
//! let server: SocketAddr = "10.9.0.1:80".parse().unwrap();
//! let class = rules.classify(client, server);
//! assert_eq!(rules.class_name(class), "DEFAULT");
//! let high_is_slow = |_: rules::Scope, _: rules::Stat| Some(std::time::Duration::from_millis(3500));
//! let facts = rules::Facts::new(client, server, class, &high_is_slow);
//! let mut fired = Vec::new();
//! rules.eval_syn(&facts, &mut fired);
//! assert_eq!(fired[0].effect, rules::Effect::DropSyn);
//! ```
//!
//! No input makes this crate panic: sizes, nesting, numbers and counts are bounded and each
//! bound is a diagnostic (the parser is fuzzed, see `fuzz/fuzz_targets/rules_parse.rs`).

pub mod addr;
pub mod ast;
mod check;
mod diag;
mod eval;
mod glob;
mod lex;
pub mod mapping;
mod num;
mod parse;

use std::path::Path;

pub use addr::AddrPattern;
pub use ast::{Cmp, EmbedSelect, End, FieldCond, Stat, DEFAULT_GAP, DEFAULT_REJECT_STATUS};
pub use check::{MAX_CLASSES, MAX_GROUPS};
pub use diag::{Diagnostic, Diagnostics, Span};
pub use eval::{
    cookie_value, host_name, AggregateTest, Aggregates, Bucket, BucketId, ClassId, Effect, Embeds, EmbedsId, Facts, Firing, GroupId, HeldTest, Holds,
    NoAggregates, Node, RequestFields, RuleId, RuleSet, Scope, Sla, SlaScope, DEFAULT_CLASS, TLS_PORTS,
};
pub use glob::Glob;
pub use mapping::Mapping;
pub use num::{fmt_duration, Per, Rate};
pub use parse::{MAX_DEPTH, MAX_EMBED_POS, MAX_ERRORS};

/// The largest rule file read, in bytes.
pub const MAX_FILE_SIZE: usize = 1 << 20;

fn diagnostics(file: &str, src: &str, mut errors: Vec<diag::Error>) -> Diagnostics {
    errors.retain(|e| !e.silent);
    errors.sort_by_key(|e| (e.span.start, e.span.end));
    errors.dedup_by(|a, b| a.span == b.span && a.message == b.message);
    let map = diag::SourceMap::new(src);
    Diagnostics(errors.into_iter().take(MAX_ERRORS).map(|e| map.diagnostic(file, e)).collect())
}

fn too_big(file: &str, src: &str) -> Option<Diagnostics> {
    (src.len() > MAX_FILE_SIZE).then(|| {
        let e = diag::Error::new(Span::default(), format!("the file is {} bytes; a rule file may have at most {MAX_FILE_SIZE}", src.len()));
        diagnostics(file, src.get(..src.floor_char_boundary_compat(200)).unwrap_or(""), vec![e])
    })
}

trait FloorCharBoundary {
    fn floor_char_boundary_compat(&self, i: usize) -> usize;
}
impl FloorCharBoundary for str {
    fn floor_char_boundary_compat(&self, i: usize) -> usize {
        (0..=i.min(self.len())).rev().find(|&j| self.is_char_boundary(j)).unwrap_or(0)
    }
}

/// Read a rule file into its syntax tree, without checking names or nodes. `file` names it in
/// diagnostics.
pub fn parse(file: &str, src: &str) -> Result<ast::File, Diagnostics> {
    if let Some(d) = too_big(file, src) {
        return Err(d);
    }
    let mut errors = Vec::new();
    let toks = lex::lex(src, &mut errors);
    let mut p = parse::Parser::new(src, toks, errors);
    let tree = p.file();
    if p.errors.is_empty() {
        Ok(tree)
    } else {
        Err(diagnostics(file, src, p.errors))
    }
}

/// Read and check a rule file: syntax, then class names, class conditions, the nodes each test
/// can be decided at, and repeated actions. `file` names it in diagnostics.
pub fn compile(file: &str, src: &str) -> Result<RuleSet, Diagnostics> {
    let tree = parse(file, src)?;
    check::check(file, src, tree).map_err(|errors| diagnostics(file, src, errors))
}

/// What [`check_file`] found wrong.
#[derive(Debug)]
pub enum CheckError {
    /// The file could not be read (or is not UTF-8).
    Io(String),
    Invalid(Diagnostics),
}

impl std::fmt::Display for CheckError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CheckError::Io(e) => f.write_str(e),
            CheckError::Invalid(d) => write!(f, "{d}"),
        }
    }
}

impl std::error::Error for CheckError {}

/// The bytes of the regular file at `path`, if it has at most `max` of them; else why not. A
/// FIFO, a device or a directory is refused before it is opened (reading `/dev/zero` would not
/// end, opening a FIFO would wait for a writer), and a file that grows past `max` while it is
/// read is refused too: what rlm reads of its configuration is bounded.
pub fn read_bounded(path: &Path, max: usize, what: &str) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if meta.is_dir() {
        return Err("is a directory".to_string());
    }
    if !meta.is_file() {
        return Err("is not a regular file".to_string());
    }
    if meta.len() > max as u64 {
        return Err(format!("{} bytes; a {what} may have at most {max}", meta.len()));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    std::fs::File::open(path).and_then(|f| f.take(max as u64 + 1).read_to_end(&mut bytes)).map_err(|e| e.to_string())?;
    if bytes.len() > max {
        return Err(format!("more than {max} bytes; a {what} may have at most {max}"));
    }
    Ok(bytes)
}

/// Read a rule file from disk and [`compile`] it (what `rlm check FILE` does).
pub fn check_file(path: &Path) -> Result<RuleSet, CheckError> {
    let name = path.display().to_string();
    let bytes = read_bounded(path, MAX_FILE_SIZE, "rule file").map_err(|e| CheckError::Io(format!("{name}: {e}")))?;
    let src = String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let line = e.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count() + 1;
        CheckError::Io(format!("{name}:{line}: error: the file is not UTF-8 (byte {at})"))
    })?;
    let mut rules = compile(&name, &src).map_err(CheckError::Invalid)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    load_mappings(&mut rules, &name, &src, dir).map_err(CheckError::Invalid)?;
    Ok(rules)
}

/// Read the mapping file of every `REWRITE EMBEDS ... USING "file"` (a relative name is taken
/// from `dir`, the rule file's directory) into the rule set. A file that cannot be read is an
/// error at its name in the rule file (`file`, `src`); one that does not parse, at its own
/// line and column.
pub fn load_mappings(rules: &mut RuleSet, file: &str, src: &str, dir: &Path) -> Result<(), Diagnostics> {
    let map = diag::SourceMap::new(src);
    let mut out = Vec::new();
    for e in rules.embeds.iter_mut() {
        let (Some(name), Some(span)) = (e.mapping.as_deref(), e.mapping_span) else { continue };
        let path = dir.join(name);
        let text =
            read_bounded(&path, mapping::MAX_MAPPING_SIZE, "mapping file").and_then(|b| String::from_utf8(b).map_err(|_| "is not UTF-8".to_string()));
        match text {
            Ok(text) => match Mapping::parse(&path.display().to_string(), &text) {
                Ok(m) => e.map = Some(std::sync::Arc::new(m)),
                Err(d) => out.extend(d.0),
            },
            Err(why) => out.push(map.diagnostic(
                file,
                diag::Error::new(span, format!("cannot read the mapping file {}: {why}", path.display())).expected("a readable mapping file"),
            )),
        }
    }
    if out.is_empty() {
        Ok(())
    } else {
        Err(Diagnostics(out))
    }
}

/// One paragraph about a checked rule set, for `rlm check`: classes, rules, and what acts where.
pub fn summary(rules: &RuleSet) -> String {
    let classes: Vec<&str> = (0..rules.class_count()).map(|i| rules.class_name(ClassId(i as u16))).collect();
    let mut s = format!(
        "{}: ok: {} rule{}, classes {} (first match wins)",
        rules.file_name(),
        rules.rule_count(),
        if rules.rule_count() == 1 { "" } else { "s" },
        classes.join(", ")
    );
    if rules.group_count() > 0 {
        let groups: Vec<&str> = (0..rules.group_count()).map(|i| rules.group_name(GroupId(i as u16))).collect();
        s.push_str(&format!("\n  URL groups: {} (first match wins; a request no GROUP matches is in none)", groups.join(", ")));
    }
    for t in rules.slas() {
        let stat = match t.stat {
            ast::Stat::Mean => "RT".to_string(),
            p => format!("RT.{p}"),
        };
        let what = match t.scope {
            SlaScope::Class(c) => format!("{}'s pageviews", rules.class_name(c)),
            SlaScope::Group(g) => format!("group {}'s server time (request to first response byte)", rules.group_name(g)),
        };
        s.push_str(&format!("\n  target (line {}): {what}: {stat} < {}", t.line, fmt_duration(t.limit)));
    }
    if !rules.shed_order().is_empty() {
        let shed: Vec<&str> = rules.shed_order().iter().map(|&c| rules.class_name(c)).collect();
        s.push_str(&format!("\n  shed to hold the class targets: {} (first shed first)", shed.join(", then ")));
    }
    let line = |id: RuleId| rules.rule_position(id).map_or_else(|| "?".to_string(), |(l, _)| format!("line {l}"));
    // The lines of the rules with an action of these kinds.
    let lines_with = |kind: fn(&ast::ActionKind) -> bool| -> Vec<String> {
        (0..rules.rule_count() as u32)
            .map(RuleId)
            .filter(|&id| rules.rule(id).is_some_and(|r| r.actions.iter().any(|a| kind(&a.kind))))
            .map(line)
            .collect()
    };
    for node in Node::ALL {
        let ids: Vec<String> = rules.rules_at(node).map(line).collect();
        if !ids.is_empty() {
            s.push_str(&format!("\n  at the {} node: {}", node.name(), ids.join(", ")));
        }
    }
    for id in rules.content_rules_on_tls_only() {
        s.push_str(&format!(
            "\n  not applicable: tls: {} edits content on connections to HTTPS's ports only ({}): their responses are encrypted, \
             so rlm leaves them whole and counts them (stats.adapt_not_applicable_tls)",
            line(id),
            eval::TLS_PORTS.map(|p| p.to_string()).join(", ")
        ));
    }
    let rejects = lines_with(|k| matches!(k, ast::ActionKind::Reject { .. } | ast::ActionKind::LimitRequests { .. }));
    let aborts = lines_with(|k| matches!(k, ast::ActionKind::AbortIdle { .. }));
    if !aborts.is_empty() {
        s.push_str(&format!(
            "\n  ABORT IDLE ({}): rlm closes a plain HTTP keep-alive connection idle after the response to a request the rule fired at (a FIN to the client, \
             a RST to the server; rlm run with the ebpf observer and injection; otherwise, and in rlm analyze, each firing is counted deferred)",
            aborts.join(", ")
        ));
    }
    if !rejects.is_empty() {
        s.push_str(&format!(
            "\n  REJECT, LIMIT REQUESTS ({}): rlm answers plain HTTP requests in the server's stead (rlm run with the ebpf observer and injection; \
             otherwise, and in rlm analyze, each firing is counted deferred); HTTPS requests are encrypted: it never fires at one",
            rejects.join(", ")
        ));
    }
    s
}

/// `rlm check FILE...`: check each file, print its summary on stdout or its diagnostics on
/// stderr; the exit code is 0 when all are valid, 1 when one is not, 2 for a usage error.
pub fn check_command<I: IntoIterator<Item = std::ffi::OsString>>(files: I, out: &mut dyn std::io::Write, err: &mut dyn std::io::Write) -> u8 {
    let files: Vec<std::ffi::OsString> = files.into_iter().collect();
    if files.is_empty() {
        let _ = writeln!(err, "usage: rlm check FILE...");
        return 2;
    }
    let mut code = 0;
    for f in files {
        match check_file(Path::new(&f)) {
            Ok(rules) => {
                let _ = writeln!(out, "{}", summary(&rules));
            }
            Err(e) => {
                let _ = writeln!(err, "{e}");
                code = 1;
            }
        }
    }
    code
}
