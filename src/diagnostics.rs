//! Rendering diagnostics for people: file:line:col, labels, help lines.
//!
//! Errors of every layer carry spans but not the source text; the text is attached here,
//! when an error is shown, so errors stay cheap to build and move.
//!
//! Snippets are clipped: a line longer than [`LONG_LINE`] bytes is shown as windows of
//! [`WINDOW`] bytes around the start and end of each label on it (its first [`WINDOW`]
//! bytes if it has none), the rest replaced by `…`. So a 200 MB one-line file prints a
//! few lines, not 200 MB, and no column reaches the formatter's limit (miette panics on
//! a padding past 65,535). Every line is kept (clipped), so line numbers are the file's;
//! the `file:line:col` header gives the column in the file, not in the clipped line.
//! Messages, labels and help texts quote names and fields from the file: a word of theirs
//! longer than [`LONG_LINE`] bytes is clipped the same way, and their control characters
//! escaped ([`for_terminal`]). In snippets, control characters of the file (but tab and
//! line breaks) are shown as `?`, one per byte.

use std::borrow::Cow;
use std::fmt;

use miette::{Diagnostic, GraphicalReportHandler, GraphicalTheme, LabeledSpan, MietteError, MietteSpanContents, SourceCode, SourceSpan, SpanContents};

/// Lines longer than this many bytes are clipped.
pub const LONG_LINE: usize = 240;
/// Bytes kept on each side of a label's start and end on a clipped line.
pub const WINDOW: usize = 60;
/// What stands for the bytes left out of a clipped line.
const ELLIPSIS: &str = "…";

/// Renders `diagnostic` against the text of `file`. `color` picks ANSI colours (for a
/// terminal); without, the text is stable (for snapshots, pipes and files).
pub fn render(diagnostic: &dyn Diagnostic, file: &str, src: &str, color: bool) -> String {
    // A list holding one error says no more than the error: show the error alone.
    let diagnostic = match diagnostic.related().map(|r| r.collect::<Vec<_>>()) {
        Some(related) if related.len() == 1 && diagnostic.labels().is_none() => related[0],
        _ => diagnostic,
    };
    let mut points = Vec::new();
    label_points(diagnostic, &mut points);
    let excerpt = Excerpt::new(file, src, points);
    let clipped = Clipped::new(diagnostic, &excerpt);
    let theme = if color { GraphicalTheme::unicode() } else { GraphicalTheme::unicode_nocolor() };
    let mut out = String::new();
    GraphicalReportHandler::new_themed(theme)
        .with_width(100)
        .render_report(&mut out, &clipped)
        .expect("rendering to a String cannot fail");
    out
}

/// `text` with every word (a run without whitespace) longer than [`LONG_LINE`] bytes cut
/// to its first and last [`WINDOW`] bytes around a `…`, and control characters but tab and
/// line breaks escaped (`\u{1b}`): for messages quoting the input.
pub fn for_terminal(text: &str) -> Cow<'_, str> {
    let long = |word: &&str| word.len() > LONG_LINE;
    let control = |c: char| c.is_control() && !matches!(c, '\t' | '\n' | '\r');
    if text.contains(control) {
        let escaped: String = text.chars().map(|c| if control(c) { format!("\\u{{{:x}}}", c as u32) } else { c.to_string() }).collect();
        return Cow::Owned(for_terminal(&escaped).into_owned());
    }
    if !text.split(char::is_whitespace).any(|w| long(&w)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::new();
    let mut rest = text;
    while !rest.is_empty() {
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let (word, tail) = rest.split_at(end);
        if long(&word) {
            out.push_str(&word[..ceil_char(word, WINDOW)]);
            out.push_str(ELLIPSIS);
            out.push_str(&word[floor_char(word, word.len() - WINDOW)..]);
        } else {
            out.push_str(word);
        }
        let space = tail.find(|c: char| !c.is_whitespace()).unwrap_or(tail.len());
        out.push_str(&tail[..space]);
        rest = &tail[space..];
    }
    Cow::Owned(out)
}

/// The start and end of every label of `diagnostic` and of the diagnostics related to it.
fn label_points(diagnostic: &dyn Diagnostic, points: &mut Vec<usize>) {
    for label in diagnostic.labels().into_iter().flatten() {
        points.extend([label.offset(), label.offset().saturating_add(label.len())]);
    }
    for related in diagnostic.related().into_iter().flatten() {
        label_points(related, points);
    }
}

/// Bytes of the file copied into the excerpt: `len` bytes at `from` in the file, at `to`
/// in the excerpt.
#[derive(Clone, Copy, Debug)]
struct Piece {
    from: usize,
    to: usize,
    len: usize,
}

/// The file's text with its long lines clipped (see the module doc), and where each kept
/// byte came from.
#[derive(Debug)]
struct Excerpt<'s> {
    name: String,
    src: &'s str,
    text: String,
    /// Ascending in both `from` and `to`.
    pieces: Vec<Piece>,
}

impl<'s> Excerpt<'s> {
    /// Clips the long lines of `src`, keeping windows around `points` (byte offsets).
    fn new(name: &str, src: &'s str, mut points: Vec<usize>) -> Excerpt<'s> {
        points.sort_unstable();
        points.dedup();
        let mut excerpt = Excerpt { name: for_terminal(name).into_owned(), src, text: String::new(), pieces: Vec::new() };
        let mut start = 0;
        // Lines end at `\n` or `\r` (as miette counts them); the breaks are always kept.
        for (at, _) in src.match_indices(['\n', '\r']).chain([(src.len(), "")]) {
            excerpt.line(start, at, &points);
            excerpt.copy(at, (at + 1).min(src.len()));
            start = at + 1;
        }
        excerpt
    }

    /// Adds the line `src[start..end]`, clipped if long.
    fn line(&mut self, start: usize, end: usize, points: &[usize]) {
        if end - start <= LONG_LINE {
            return self.copy(start, end);
        }
        let first = points.partition_point(|&p| p < start);
        let last = points.partition_point(|&p| p <= end);
        let mut windows: Vec<(usize, usize)> =
            points[first..last].iter().map(|&p| (p.saturating_sub(WINDOW).max(start), (p + WINDOW).min(end))).collect();
        if windows.is_empty() {
            windows.push((start, start + WINDOW));
        }
        let mut at = start;
        for (mut from, mut to) in windows {
            from = floor_char(self.src, from.max(at));
            to = ceil_char(self.src, to);
            if from >= to {
                continue;
            }
            if from > at {
                self.text.push_str(ELLIPSIS);
            }
            self.copy(from, to);
            at = to;
        }
        if at < end {
            self.text.push_str(ELLIPSIS);
        }
    }

    /// Copies `src[from..to]` to the end of the excerpt.
    fn copy(&mut self, from: usize, to: usize) {
        if from >= to {
            return;
        }
        let here = self.text.len();
        let text = &self.src[from..to];
        if text.chars().any(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r')) {
            // A control character from the file never reaches a terminal raw: `?` for each
            // of its bytes, so offsets stay the file's.
            for c in text.chars() {
                match c {
                    '\t' | '\n' | '\r' => self.text.push(c),
                    c if c.is_control() => self.text.extend(std::iter::repeat_n('?', c.len_utf8())),
                    c => self.text.push(c),
                }
            }
        } else {
            self.text.push_str(text);
        }
        match self.pieces.last_mut() {
            Some(p) if p.from + p.len == from && p.to + p.len == here => p.len += to - from,
            _ => self.pieces.push(Piece { from, to: here, len: to - from }),
        }
    }

    /// The excerpt's offset of the file's offset `offset` (the nearest kept byte's, for a
    /// byte left out: labels' ends are never left out).
    fn to_excerpt(&self, offset: usize) -> usize {
        let i = self.pieces.partition_point(|p| p.from <= offset).saturating_sub(1);
        self.pieces.get(i).map_or(0, |p| p.to + offset.saturating_sub(p.from).min(p.len))
    }

    /// The file's offset of the excerpt's offset `offset` (a piece's end for a `…`).
    fn to_file(&self, offset: usize) -> usize {
        let i = self.pieces.partition_point(|p| p.to <= offset).saturating_sub(1);
        self.pieces.get(i).map_or(0, |p| p.from + offset.saturating_sub(p.to).min(p.len))
    }

    /// A span of the file as a span of the excerpt.
    fn span(&self, span: &SourceSpan) -> SourceSpan {
        let start = self.to_excerpt(span.offset());
        let end = self.to_excerpt(span.offset().saturating_add(span.len()));
        (start, end.saturating_sub(start)).into()
    }
}

impl SourceCode for Excerpt<'_> {
    fn read_span<'a>(&'a self, span: &SourceSpan, before: usize, after: usize) -> Result<Box<dyn SpanContents<'a> + 'a>, MietteError> {
        let contents = self.text.as_bytes().read_span(span, before, after)?;
        // Lines are the file's; a column is counted in the file's line, not the clipped one.
        let column = if contents.column() == 0 {
            0
        } else {
            let offset = self.to_file(contents.span().offset());
            offset - self.src[..offset].rfind(['\n', '\r']).map_or(0, |i| i + 1)
        };
        let (data, span, line, count) = (contents.data(), *contents.span(), contents.line(), contents.line_count());
        Ok(Box::new(MietteSpanContents::new_named(self.name.clone(), data, span, line, column, count)))
    }
}

/// A borrowed diagnostic shown against an excerpt: its labels (and its related
/// diagnostics') moved to the excerpt's offsets.
struct Clipped<'a> {
    inner: &'a dyn Diagnostic,
    excerpt: &'a Excerpt<'a>,
    related: Vec<Clipped<'a>>,
}

impl<'a> Clipped<'a> {
    fn new(inner: &'a dyn Diagnostic, excerpt: &'a Excerpt<'a>) -> Clipped<'a> {
        let related = inner.related().into_iter().flatten().map(|r| Clipped::new(r, excerpt)).collect();
        Clipped { inner, excerpt, related }
    }
}

impl fmt::Debug for Clipped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.inner, f)
    }
}

impl fmt::Display for Clipped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&for_terminal(&self.inner.to_string()))
    }
}

impl std::error::Error for Clipped<'_> {}

impl Diagnostic for Clipped<'_> {
    fn code<'b>(&'b self) -> Option<Box<dyn fmt::Display + 'b>> {
        self.inner.code()
    }
    fn help<'b>(&'b self) -> Option<Box<dyn fmt::Display + 'b>> {
        let help = self.inner.help()?.to_string();
        Some(Box::new(for_terminal(&help).into_owned()))
    }
    fn severity(&self) -> Option<miette::Severity> {
        self.inner.severity()
    }
    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        let labels = self.inner.labels()?;
        Some(Box::new(labels.map(|l| {
            let (label, span) = (l.label().map(|t| for_terminal(t).into_owned()), self.excerpt.span(l.inner()));
            if l.primary() { LabeledSpan::new_primary_with_span(label, span) } else { LabeledSpan::new_with_span(label, span) }
        })))
    }
    fn related<'b>(&'b self) -> Option<Box<dyn Iterator<Item = &'b dyn Diagnostic> + 'b>> {
        let clipped: Box<dyn Iterator<Item = &'b dyn Diagnostic> + 'b> = Box::new(self.related.iter().map(|r| r as &dyn Diagnostic));
        self.inner.related().map(|_| clipped)
    }
    fn source_code(&self) -> Option<&dyn SourceCode> {
        Some(self.excerpt)
    }
}

/// `at`, or the start of the character holding it.
fn floor_char(text: &str, mut at: usize) -> usize {
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// `at`, or the end of the character holding it.
fn ceil_char(text: &str, mut at: usize) -> usize {
    while !text.is_char_boundary(at) {
        at += 1;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error, Diagnostic)]
    #[error("bad thing")]
    #[diagnostic(help("do better"))]
    struct Bad {
        #[label("here")]
        span: SourceSpan,
    }

    fn bad(offset: usize, len: usize) -> Bad {
        Bad { span: (offset, len).into() }
    }

    #[test]
    fn long_words_are_clipped() {
        assert!(matches!(for_terminal("a short  message\n"), Cow::Borrowed("a short  message\n")));
        let word = format!("é{}é", "x".repeat(1000));
        let message = format!("`{word}` is  not\ta number");
        let xs = "x".repeat(WINDOW - 3);
        assert_eq!(for_terminal(&message), format!("`é{xs}{ELLIPSIS}{xs}é` is  not\ta number"));
        assert_eq!(for_terminal("loc `a\u{1b}[2J`\n"), "loc `a\\u{1b}[2J`\n");
    }

    /// A control character of the file (an escape sequence for the terminal) is shown as
    /// `?` per byte, never raw; the column is still the file's.
    #[test]
    fn control_characters_are_not_shown_raw() {
        let src = "ab\u{1b}[2J\u{85}cd BAD\n";
        let shown = render(&bad(src.find("BAD").unwrap(), 3), "f.step", src, false);
        assert!(shown.contains("ab?[2J??cd BAD") && !shown.contains('\u{1b}') && !shown.contains('\u{85}'), "{shown:?}");
        assert!(shown.contains("[f.step:1:12]"), "{shown}");
    }

    #[test]
    fn short_lines_are_shown_whole() {
        let src = "one\ntwo three\nfour\n";
        let shown = render(&bad(8, 5), "f.step", src, false);
        assert!(shown.contains("[f.step:2:5]") && shown.contains("two three") && shown.contains("here"), "{shown}");
        assert!(shown.contains("one") && shown.contains("four") && !shown.contains(ELLIPSIS), "{shown}");
    }

    /// A label past column 65,535 on a long line (miette panicked on the padding): a
    /// window around it, the file's line and column, the label and the help.
    #[test]
    fn a_label_far_along_a_long_line() {
        let src = format!("first\n{}BAD{}\nlast\n", "a".repeat(100_000), "b".repeat(100_000));
        let shown = render(&bad(6, 100_000 + 3), "f.step", &src, false);
        assert!(shown.contains("[f.step:2:1]") && shown.len() < 2000, "{shown}");
        let shown = render(&bad(6 + 100_000, 3), "f.step", &src, false);
        assert!(shown.contains("[f.step:2:100001]"), "{shown}");
        assert!(shown.contains(&format!("{ELLIPSIS}{}BAD{}{ELLIPSIS}", "a".repeat(WINDOW), "b".repeat(WINDOW))), "{shown}");
        assert!(shown.contains("here") && shown.contains("do better") && shown.contains("first") && shown.contains("last"), "{shown}");
        assert!(shown.len() < 2000, "{} bytes", shown.len());
    }

    /// A label over a whole long line keeps its two ends; a label at the end of the text
    /// (an unexpected end of file) is shown.
    #[test]
    fn long_labels_and_the_end_of_the_text() {
        let src = format!("{}é{}", "x".repeat(300_000), "y".repeat(300_000));
        let shown = render(&bad(0, src.len()), "f.csv", &src, false);
        assert!(shown.contains("[f.csv:1:1]") && shown.contains(ELLIPSIS) && shown.contains("here"), "{shown}");
        assert!(shown.len() < 2000, "{} bytes", shown.len());
        let shown = render(&bad(src.len(), 0), "f.csv", &src, false);
        assert!(shown.contains(&format!("[f.csv:1:{}]", src.len() + 1)) && shown.contains(&format!("{ELLIPSIS}{}\n", "y".repeat(WINDOW))), "{shown}");
        assert!(shown.len() < 2000, "{} bytes", shown.len());
        // A window edge inside a multi-byte character moves to its boundary.
        let shown = render(&bad(300_001 + WINDOW, 1), "f.csv", &src, false);
        assert!(shown.contains(&format!("{ELLIPSIS}é{}{ELLIPSIS}", "y".repeat(2 * WINDOW))), "{shown}");
    }
}
