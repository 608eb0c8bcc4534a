//! Rendering diagnostics for people: file:line:col, labels, help lines.
//!
//! Errors of every layer carry spans but not the source text; the text is attached here,
//! when an error is shown, so errors stay cheap to build and move.

use std::fmt;

use miette::{Diagnostic, GraphicalReportHandler, GraphicalTheme, NamedSource, SourceCode};

/// Renders `diagnostic` against the text of `file`. `color` picks ANSI colours (for a
/// terminal); without, the text is stable (for snapshots, pipes and files).
pub fn render(diagnostic: &dyn Diagnostic, file: &str, src: &str, color: bool) -> String {
    // A list holding one error says no more than the error: show the error alone.
    let diagnostic = match diagnostic.related().map(|r| r.collect::<Vec<_>>()) {
        Some(related) if related.len() == 1 && diagnostic.labels().is_none() => related[0],
        _ => diagnostic,
    };
    let with_source = WithSource { inner: diagnostic, src: NamedSource::new(file, src.to_string()) };
    let theme = if color { GraphicalTheme::unicode() } else { GraphicalTheme::unicode_nocolor() };
    let mut out = String::new();
    GraphicalReportHandler::new_themed(theme)
        .with_width(100)
        .render_report(&mut out, &with_source)
        .expect("rendering to a String cannot fail");
    out
}

/// A borrowed diagnostic with its source text attached.
struct WithSource<'a> {
    inner: &'a dyn Diagnostic,
    src: NamedSource<String>,
}

impl fmt::Debug for WithSource<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.inner, f)
    }
}

impl fmt::Display for WithSource<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.inner, f)
    }
}

impl std::error::Error for WithSource<'_> {}

impl Diagnostic for WithSource<'_> {
    fn code<'b>(&'b self) -> Option<Box<dyn fmt::Display + 'b>> {
        self.inner.code()
    }
    fn help<'b>(&'b self) -> Option<Box<dyn fmt::Display + 'b>> {
        self.inner.help()
    }
    fn severity(&self) -> Option<miette::Severity> {
        self.inner.severity()
    }
    fn labels(&self) -> Option<Box<dyn Iterator<Item = miette::LabeledSpan> + '_>> {
        self.inner.labels()
    }
    fn related<'b>(&'b self) -> Option<Box<dyn Iterator<Item = &'b dyn Diagnostic> + 'b>> {
        self.inner.related()
    }
    fn source_code(&self) -> Option<&dyn SourceCode> {
        Some(&self.src)
    }
}
