//! Record outputs shared by `rlm analyze` and `rlm run`: where JSON-lines records go
//! ([`Dest`]), the refusal of outputs that would overwrite an input or each other
//! ([`check_outputs`]) and the writer of the lines themselves ([`RecordOut`]), so that both
//! commands write the same bytes for the same record.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;

/// A command line that cannot be run as given (exit status 2): an output that would overwrite
/// an input or another output.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// The identity of a file, for telling whether two paths are the same file.
#[derive(Clone, Debug, PartialEq, Eq)]
enum FileId {
    /// An existing file: (device, inode); hard links and symlinks to it compare equal.
    Inode(u64, u64),
    /// A file still to be created: its canonical directory and name.
    ToBe(PathBuf),
}

fn id_of_meta(m: &std::fs::Metadata) -> FileId {
    FileId::Inode(m.dev(), m.ino())
}

/// The identity of `path` without opening or creating anything.
fn file_id(path: &Path) -> FileId {
    if let Ok(m) = std::fs::metadata(path) {
        return id_of_meta(&m);
    }
    // Not there yet: a dangling symlink creates its target, so follow it.
    let mut p = path.to_path_buf();
    for _ in 0..40 {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => match std::fs::read_link(&p) {
                Ok(t) => p = p.parent().map(|d| d.join(&t)).unwrap_or(t),
                Err(_) => break,
            },
            _ => break,
        }
    }
    let dir = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    match (std::fs::canonicalize(dir), p.file_name()) {
        (Ok(d), Some(name)) => FileId::ToBe(d.join(name)),
        _ => FileId::ToBe(std::path::absolute(&p).unwrap_or(p)),
    }
}

/// The identity of an open standard stream, when it is a file.
fn fd_id(fd: std::os::fd::BorrowedFd<'_>) -> Option<FileId> {
    let owned = fd.try_clone_to_owned().ok()?;
    File::from(owned).metadata().ok().map(|m| id_of_meta(&m))
}

/// An input that no output may overwrite (a capture, a rule file, a configuration file).
#[derive(Clone, Debug)]
pub struct Protected {
    /// What it is, as the refusal says it: `--pageviews F is {what}; refusing to overwrite it`.
    what: String,
    /// How it is named in the refusal when the output names it otherwise.
    shown: String,
    /// Its identity; None when it does not exist (nothing to overwrite).
    id: Option<FileId>,
}

impl Protected {
    /// The file at `path`, described as `what` (e.g. "the input capture").
    pub fn file(what: &str, path: &Path) -> Protected {
        Protected { what: what.to_string(), shown: path.display().to_string(), id: std::fs::metadata(path).ok().map(|m| id_of_meta(&m)) }
    }

    /// Standard input (when it is a file), described as `what`.
    pub fn stdin(what: &str) -> Protected {
        Protected { what: what.to_string(), shown: "(standard input)".to_string(), id: fd_id(std::io::stdin().as_fd()) }
    }
}

/// Where one output goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dest {
    /// Standard output (`-`, or a path naming standard output's own file).
    Stdout,
    /// A file, created (or truncated) when the output is opened.
    File(PathBuf),
}

/// What one output was checked against the ones before it.
struct Seen {
    flag: &'static str,
    shown: String,
    id: Option<FileId>,
    on_stdout: bool,
}

/// The refusal when the output `flag shown` (identity `id`) is one of `inputs`.
fn overwrites_input(flag: &str, shown: &str, id: &Option<FileId>, inputs: &[Protected]) -> Option<UsageError> {
    let id = id.as_ref()?;
    let input = inputs.iter().find(|i| i.id.as_ref() == Some(id))?;
    let same = if shown == input.shown { String::new() } else { format!(" ({}, the same file)", input.shown) };
    Some(UsageError(format!("{flag} {shown} is {}{same}; refusing to overwrite it", input.what)))
}

/// The refusal when the output `new` collides with an earlier one.
fn collides(new: &Seen, seen: &[Seen]) -> Option<UsageError> {
    for other in seen {
        if new.on_stdout && other.on_stdout {
            return Some(UsageError(format!(
                "{} {} and {} {} both go to standard output; only one output may be `-`",
                other.flag, other.shown, new.flag, new.shown
            )));
        }
        if new.id.is_some() && new.id == other.id {
            return Some(UsageError(format!(
                "{} {} and {} {} are the same file; give each output its own",
                other.flag, other.shown, new.flag, new.shown
            )));
        }
    }
    None
}

/// Refuse outputs that would overwrite one of `inputs` or each other, before anything is
/// opened: an output naming an input, two outputs naming one file, `-` twice. `outputs` are
/// (flag, path) pairs, a path of `-` meaning standard output. Returns each output's destination
/// (an output naming standard output's own file is stdout); writing twice to /dev/null is allowed.
pub fn check_outputs(inputs: &[Protected], outputs: &[(&'static str, &Option<PathBuf>)]) -> Result<Vec<Option<Dest>>, UsageError> {
    let null = std::fs::metadata("/dev/null").ok().map(|m| id_of_meta(&m));
    let stdout = fd_id(std::io::stdout().as_fd());
    let mut seen: Vec<Seen> = Vec::new();
    let mut dests = Vec::new();
    for &(flag, path) in outputs {
        let Some(path) = path else {
            dests.push(None);
            continue;
        };
        let shown = path.display().to_string();
        let (id, on_stdout) = if path.as_os_str() == "-" {
            (stdout.clone(), true)
        } else {
            let id = file_id(path);
            let on_stdout = stdout.as_ref() == Some(&id) && Some(&id) != null.as_ref();
            (Some(id), on_stdout)
        };
        // Writing twice to /dev/null harms nobody.
        let id = id.filter(|id| Some(id) != null.as_ref());
        if let Some(e) = overwrites_input(flag, &shown, &id, inputs) {
            return Err(e);
        }
        let new = Seen { flag, shown, id, on_stdout };
        if let Some(e) = collides(&new, &seen) {
            return Err(e);
        }
        seen.push(new);
        dests.push(Some(if on_stdout { Dest::Stdout } else { Dest::File(path.to_path_buf()) }));
    }
    Ok(dests)
}

/// The write buffer of an output.
const BUF: usize = 256 << 10;

/// The mode of a record file `rlm run` creates (before the umask): its owner writes, its group
/// (e.g. a log shipper's) reads, nobody else.
pub const LOG_MODE: u32 = 0o640;

/// How `rlm run` opens a record file, at its start and again after a rename: appending,
/// created with [`LOG_MODE`] when it is not there.
fn log_options() -> OpenOptions {
    use std::os::unix::fs::OpenOptionsExt;
    let mut o = OpenOptions::new();
    o.append(true).create(true).mode(LOG_MODE);
    o
}

/// A JSON-lines output: each record is serialised into one reused buffer, then written in one
/// call into a 256 KiB buffer in front of the file or standard output.
pub struct RecordOut {
    /// How errors name it: the path, or "standard output".
    name: String,
    /// The file [`RecordOut::reopen`] opens again; None for standard output.
    path: Option<PathBuf>,
    w: Box<dyn Write + Send>,
    line: Vec<u8>,
    /// Bytes in the file: its length when opened plus what was written since.
    size: u64,
}

impl RecordOut {
    /// Opens `dest` for `rlm analyze`: a file is created, or truncated when it exists (a
    /// second analysis of a capture replaces the first).
    pub fn create(dest: &Dest) -> Result<RecordOut> {
        RecordOut::open(dest, OpenOptions::new().write(true).create(true).truncate(true))
    }

    /// Opens `dest` for `rlm run`, as a daemon's log: appending to a file that exists (what an
    /// earlier run wrote, a crashed one's included, is kept), else creating it readable by its
    /// owner and group only ([`LOG_MODE`]: records hold clients' addresses and URIs).
    pub fn append(dest: &Dest) -> Result<RecordOut> {
        RecordOut::open(dest, &log_options())
    }

    fn open(dest: &Dest, options: &OpenOptions) -> Result<RecordOut> {
        Ok(match dest {
            Dest::Stdout => RecordOut {
                name: "standard output".into(),
                path: None,
                w: Box::new(BufWriter::with_capacity(BUF, std::io::stdout())),
                line: Vec::with_capacity(4096),
                size: 0,
            },
            Dest::File(p) => {
                let f = options.open(p).with_context(|| format!("cannot write {}", p.display()))?;
                RecordOut {
                    name: p.display().to_string(),
                    path: Some(p.clone()),
                    size: f.metadata().map(|m| m.len()).unwrap_or(0),
                    w: Box::new(BufWriter::with_capacity(BUF, f)),
                    line: Vec::with_capacity(4096),
                }
            }
        })
    }

    /// An output writing straight into `w`, unbuffered and never reopened (tests' sinks).
    #[cfg(test)]
    pub(crate) fn from_writer(name: &str, w: Box<dyn Write + Send>) -> RecordOut {
        RecordOut { name: name.to_string(), path: None, w, line: Vec::with_capacity(4096), size: 0 }
    }

    /// How errors name it: the path, or "standard output".
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The file it writes, None for standard output.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Bytes in its file: the file's length when it was opened plus what was written since
    /// (whether flushed yet or not).
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Writes `v` as one line of JSON.
    pub fn write<T: Serialize>(&mut self, v: &T) -> Result<()> {
        self.line.clear();
        serde_json::to_writer(&mut self.line, v)?;
        self.line.push(b'\n');
        self.put_line()
    }

    /// Writes `v` as indented JSON and a newline: one document, not a record line.
    pub fn write_pretty<T: Serialize>(&mut self, v: &T) -> Result<()> {
        self.line.clear();
        serde_json::to_writer_pretty(&mut self.line, v)?;
        self.line.push(b'\n');
        self.put_line()
    }

    fn put_line(&mut self) -> Result<()> {
        self.w.write_all(&self.line).with_context(|| format!("cannot write {}", self.name))?;
        self.size += self.line.len() as u64;
        Ok(())
    }

    /// Writes out what is buffered.
    pub fn flush(&mut self) -> Result<()> {
        self.w.flush().with_context(|| format!("cannot write {}", self.name))
    }

    /// Flushes, then opens its path again, appending (and creating the file when it is gone):
    /// after a rename (logrotate), what was written before stays in the renamed file and later
    /// lines go to a new file at the path. Standard output is only flushed. On failure the old
    /// handle is kept and stays usable.
    pub fn reopen(&mut self) -> Result<()> {
        self.flush()?;
        let Some(path) = &self.path else {
            return Ok(());
        };
        let f = log_options().open(path).with_context(|| format!("cannot reopen {}", path.display()))?;
        self.size = f.metadata().map(|m| m.len()).unwrap_or(0);
        self.w = Box::new(BufWriter::with_capacity(BUF, f));
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A fresh, empty directory for test `name` of this process (the record writers' tests too).
    pub(crate) fn temp_dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rlm-records-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn same_file_is_recognised_through_links_and_path_variants() {
        let d = temp_dir("ids");
        let f = d.join("a.jsonl");
        std::fs::write(&f, b"x").unwrap();
        std::os::unix::fs::symlink(&f, d.join("link")).unwrap();
        std::fs::hard_link(&f, d.join("hard")).unwrap();
        let id = file_id(&f);
        assert_eq!(file_id(&d.join("link")), id);
        assert_eq!(file_id(&d.join("hard")), id);
        assert_eq!(file_id(&d.join(".").join("a.jsonl")), id);
        // Files still to be created compare by canonical directory and name; a dangling link by its target.
        std::os::unix::fs::symlink(d.join("later"), d.join("dangling")).unwrap();
        assert_eq!(file_id(&d.join("dangling")), file_id(&d.join("later")));
        assert_ne!(file_id(&d.join("later")), file_id(&d.join("other")));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn outputs_may_not_be_an_input_or_each_other() {
        let d = temp_dir("check");
        let rules = d.join("rules.rlm");
        std::fs::write(&rules, b"x").unwrap();
        let inputs = [Protected::file("the rule file", &rules)];
        let same = Some(d.join(".").join("rules.rlm"));
        let e = check_outputs(&inputs, &[("--pageviews", &same)]).unwrap_err();
        let shown = same.as_ref().unwrap().display();
        assert_eq!(e.0, format!("--pageviews {shown} is the rule file ({}, the same file); refusing to overwrite it", rules.display()));
        let (a, b) = (Some(d.join("pv.jsonl")), Some(d.join("pv.jsonl")));
        let e = check_outputs(&inputs, &[("--transactions", &None), ("--pageviews", &a), ("--decisions", &b)]).unwrap_err();
        assert!(e.0.ends_with("are the same file; give each output its own"), "{}", e.0);
        let dests = check_outputs(&inputs, &[("--transactions", &None), ("--pageviews", &a)]).unwrap();
        assert_eq!(dests, vec![None, Some(Dest::File(d.join("pv.jsonl")))]);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn reopen_after_a_rename_writes_later_lines_to_a_new_file() {
        let d = temp_dir("reopen");
        let f = d.join("pv.jsonl");
        let mut out = RecordOut::create(&Dest::File(f.clone())).unwrap();
        out.write(&1u32).unwrap();
        out.write(&2u32).unwrap();
        std::fs::rename(&f, d.join("pv.jsonl.1")).unwrap();
        // Written after the rename but before the reopen: still the old file's.
        out.write(&3u32).unwrap();
        out.reopen().unwrap();
        assert_eq!(out.size(), 0);
        out.write(&4u32).unwrap();
        out.write(&5u32).unwrap();
        out.flush().unwrap();
        assert_eq!(out.size(), 4);
        assert_eq!(std::fs::read_to_string(d.join("pv.jsonl.1")).unwrap(), "1\n2\n3\n");
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "4\n5\n");
        // Reopening a file still in place appends to it.
        out.reopen().unwrap();
        assert_eq!(out.size(), 4);
        out.write(&6u32).unwrap();
        out.flush().unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "4\n5\n6\n");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
