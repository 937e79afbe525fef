//! Positions and diagnostics: `FILE:LINE:COL: error: message`, the line, and a caret under it.

use std::fmt;

/// A byte range of the rule file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Span {
    pub start: u32,
    pub end: u32,
}

impl Span {
    pub fn new(start: usize, end: usize) -> Span {
        Span { start: start as u32, end: end as u32 }
    }
    /// A span covering both.
    pub fn to(self, other: Span) -> Span {
        Span { start: self.start.min(other.start), end: self.end.max(other.end) }
    }
    /// The empty span just past this one (where something missing was expected).
    pub fn after(self) -> Span {
        Span { start: self.end, end: self.end }
    }
    /// A part of a word, from byte offsets inside it.
    pub fn sub(self, from: usize, to: usize) -> Span {
        Span { start: self.start + from as u32, end: (self.start + to as u32).min(self.end) }
    }
}

/// An error found while reading a rule file, before it is placed on a line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Error {
    pub span: Span,
    pub message: String,
    pub expected: Option<String>,
    pub help: Option<String>,
    /// Follows from an error already reported (a character the lexer could not read); dropped.
    pub silent: bool,
}

impl Error {
    pub fn new(span: Span, message: impl Into<String>) -> Error {
        Error { span, message: message.into(), expected: None, help: None, silent: false }
    }
    pub fn expected(mut self, what: impl Into<String>) -> Error {
        self.expected = Some(what.into());
        self
    }
    pub fn help(mut self, what: impl Into<String>) -> Error {
        self.help = Some(what.into());
        self
    }
}

/// One error in a rule file, with where it is and the line it is on.
///
/// `Display` renders it the way compilers do:
///
/// ```text
/// rules.rlm:3:9: error: the duration '3' has no unit
///   3 | IF RT > 3 THEN DROP SYN
///     |         ^ expected a duration such as 500ms or 3.0s
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// The file's name as given to [`crate::compile`] (`<input>` when there is none).
    pub file: String,
    /// 1-based line.
    pub line: u32,
    /// 1-based column, in characters.
    pub col: u32,
    /// How many characters the caret line underlines (at least 1).
    pub len: u32,
    /// What is wrong.
    pub message: String,
    /// What the parser or checker expected there, if it can say.
    pub expected: Option<String>,
    /// A suggestion (`did you mean *.*.*.*?`).
    pub help: Option<String>,
    /// The text of the line, without its line end.
    pub source_line: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}:{}:{}: error: {}", self.file, self.line, self.col, self.message)?;
        let num = self.line.to_string();
        let gutter = " ".repeat(num.len());
        writeln!(f, " {num} | {}", self.source_line)?;
        // Keep tabs so the caret stands under the column on any tab width.
        let pad: String = self.source_line.chars().take(self.col.saturating_sub(1) as usize).map(|c| if c == '\t' { '\t' } else { ' ' }).collect();
        write!(f, " {gutter} | {pad}{}", "^".repeat(self.len.max(1) as usize))?;
        if let Some(e) = &self.expected {
            write!(f, " expected {e}")?;
        }
        if let Some(h) = &self.help {
            write!(f, "\n {gutter} = help: {h}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostic {}

/// All the errors of a file, in the order of their positions.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    pub fn iter(&self) -> std::slice::Iter<'_, Diagnostic> {
        self.0.iter()
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// The first error (there is always one in an `Err`).
    pub fn first(&self) -> Option<&Diagnostic> {
        self.0.first()
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n\n")?;
            }
            write!(f, "{d}")?;
        }
        if self.0.len() > 1 {
            write!(f, "\n\n{} errors", self.0.len())?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}

impl IntoIterator for Diagnostics {
    type Item = Diagnostic;
    type IntoIter = std::vec::IntoIter<Diagnostic>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

/// Line starts of a source, to turn byte offsets into lines and columns.
pub(crate) struct SourceMap<'s> {
    src: &'s str,
    line_starts: Vec<usize>,
}

impl<'s> SourceMap<'s> {
    pub fn new(src: &'s str) -> Self {
        let mut line_starts = vec![0];
        line_starts.extend(src.match_indices('\n').map(|(i, _)| i + 1));
        SourceMap { src, line_starts }
    }

    /// 1-based line and column (in characters) of a byte offset.
    pub fn line_col(&self, offset: u32) -> (u32, u32) {
        let offset = (offset as usize).min(self.src.len());
        let line = self.line_starts.partition_point(|&s| s <= offset) - 1;
        let start = self.line_starts[line];
        let col = self.src.get(start..offset).map_or(offset - start, |s| s.chars().count());
        (line as u32 + 1, col as u32 + 1)
    }

    /// The text of a 1-based line, without its line end.
    pub fn line_text(&self, line: u32) -> &'s str {
        let i = (line as usize).saturating_sub(1).min(self.line_starts.len() - 1);
        let start = self.line_starts[i];
        let end = self.line_starts.get(i + 1).map_or(self.src.len(), |e| e - 1);
        let text = self.src.get(start..end.max(start)).unwrap_or("");
        text.strip_suffix('\r').unwrap_or(text)
    }

    pub fn diagnostic(&self, file: &str, e: Error) -> Diagnostic {
        let (line, col) = self.line_col(e.span.start);
        let source_line = self.line_text(line).to_string();
        // Underline the span's characters on its first line (one caret for an empty span).
        let line_chars = source_line.chars().count() as u32;
        let span_text = self.src.get(e.span.start as usize..e.span.end as usize).unwrap_or("");
        let span_chars = span_text.split('\n').next().unwrap_or("").chars().count() as u32;
        let len = span_chars.min(line_chars.saturating_sub(col - 1)).max(1);
        Diagnostic { file: file.to_string(), line, col, len, message: e.message, expected: e.expected, help: e.help, source_line }
    }
}
