//! Allocation traces: the tensor storages one run of a PyTorch program allocates and frees,
//! in order, as text. `memplan_torch predict` writes them (from PyTorch running the step on
//! fake tensors); `memplan replay` reads them and replays them through the model of
//! PyTorch's caching allocator (`caching`).
//!
//! One event per line; `#` starts a comment; blank lines are skipped:
//!
//! ```text
//! alloc 17 1048576 aten.mm h.3.mlp.c_fc   # storage 17: 1 MiB, then a free-form label
//! free 17
//! reset                                    # torch.cuda.reset_peak_memory_stats()
//! ```
//!
//! Ids are decimal u32s, sizes decimal u64s. Reading is strict and located: a malformed
//! line gives its `line:column`, what was expected and a hint, never a panic. Whether the
//! frees match the allocations is the replay's business (`caching::ReplayError`).

use miette::{Diagnostic, SourceSpan};
use thiserror::Error;

use crate::caching::Event;

/// A trace: its events, and beside each allocation its label and line.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct AllocTrace {
    pub events: Vec<Event>,
    /// For each event, its line in the file (from 1).
    pub lines: Vec<usize>,
    /// For each event, the label written after an allocation (empty otherwise).
    pub labels: Vec<String>,
}

/// What is wrong with an allocation trace.
#[derive(Debug, Error, Diagnostic)]
pub enum AllocTraceError {
    /// A line does not start with `alloc`, `free` or `reset`.
    #[error("line {line}: expected `alloc ID BYTES [LABEL]`, `free ID` or `reset`, found `{found}`")]
    #[diagnostic(help("an allocation trace has one event per line; `#` starts a comment"))]
    Event {
        line: usize,
        found: String,
        #[label("here")]
        span: SourceSpan,
    },
    /// A number is missing or is not a non-negative integer of the right width.
    #[error("line {line}: expected {field} (a non-negative integer below 2^{bits}), found `{found}`")]
    Number {
        line: usize,
        field: &'static str,
        bits: u32,
        found: String,
        #[label("here")]
        span: SourceSpan,
    },
    /// Something follows a `free ID` or `reset`.
    #[error("line {line}: unexpected `{found}` after the event")]
    #[diagnostic(help("only `alloc` takes a label"))]
    Trailing {
        line: usize,
        found: String,
        #[label("here")]
        span: SourceSpan,
    },
}

/// Parses an allocation trace (see the module docs).
pub fn parse_alloc_trace(text: &str) -> Result<AllocTrace, AllocTraceError> {
    let mut trace = AllocTrace::default();
    let mut line_start = 0;
    for (index, raw) in text.split_inclusive('\n').enumerate() {
        let line = index + 1;
        let content = raw.split('#').next().unwrap_or("").trim_end();
        let mut words = Words { text: content, at: 0, base: line_start };
        line_start += raw.len();
        let Some((keyword, span)) = words.next() else { continue };
        let event = match keyword {
            "alloc" => {
                let id = words.number(line, "a storage id", 32, span)?;
                let size = words.number(line, "a size in bytes", 64, span)?;
                let id = u32::try_from(id).expect("checked to fit 32 bits");
                trace.labels.push(words.rest().to_string());
                Event::Alloc { id, size }
            }
            "free" => {
                let id = words.number(line, "a storage id", 32, span)?;
                words.end(line)?;
                trace.labels.push(String::new());
                Event::Free { id: u32::try_from(id).expect("checked to fit 32 bits") }
            }
            "reset" => {
                words.end(line)?;
                trace.labels.push(String::new());
                Event::ResetPeaks
            }
            other => return Err(AllocTraceError::Event { line, found: other.to_string(), span }),
        };
        trace.events.push(event);
        trace.lines.push(line);
    }
    Ok(trace)
}

/// Writes a trace in the format [`parse_alloc_trace`] reads.
pub fn write_alloc_trace(trace: &AllocTrace) -> String {
    let mut out = String::from("# memplan allocation trace: alloc ID BYTES [LABEL] | free ID | reset\n");
    for (event, label) in trace.events.iter().zip(&trace.labels) {
        match event {
            Event::Alloc { id, size } if label.is_empty() => out.push_str(&format!("alloc {id} {size}\n")),
            Event::Alloc { id, size } => out.push_str(&format!("alloc {id} {size} {label}\n")),
            Event::Free { id } => out.push_str(&format!("free {id}\n")),
            Event::ResetPeaks => out.push_str("reset\n"),
        }
    }
    out
}

/// The whitespace-separated words of one line, with their spans in the file.
struct Words<'a> {
    text: &'a str,
    at: usize,
    base: usize,
}

impl<'a> Words<'a> {
    fn next(&mut self) -> Option<(&'a str, SourceSpan)> {
        let rest = &self.text[self.at..];
        let skipped = rest.len() - rest.trim_start().len();
        let start = self.at + skipped;
        let word_len = self.text[start..].find(char::is_whitespace).unwrap_or(self.text.len() - start);
        if word_len == 0 {
            return None;
        }
        self.at = start + word_len;
        Some((&self.text[start..self.at], (self.base + start, word_len).into()))
    }

    fn number(&mut self, line: usize, field: &'static str, bits: u32, after: SourceSpan) -> Result<u64, AllocTraceError> {
        let Some((word, span)) = self.next() else {
            let end = after.offset() + after.len();
            return Err(AllocTraceError::Number { line, field, bits, found: "the end of the line".into(), span: (end, 0).into() });
        };
        match word.parse::<u64>() {
            Ok(n) if bits == 64 || n >> bits == 0 => Ok(n),
            _ => Err(AllocTraceError::Number { line, field, bits, found: word.to_string(), span }),
        }
    }

    fn rest(&self) -> &'a str {
        self.text[self.at..].trim()
    }

    fn end(&mut self, line: usize) -> Result<(), AllocTraceError> {
        match self.next() {
            None => Ok(()),
            Some((word, span)) => Err(AllocTraceError::Trailing { line, found: word.to_string(), span }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{AllocTrace, AllocTraceError, parse_alloc_trace, write_alloc_trace};
    use crate::caching::Event;

    #[test]
    fn a_trace_reads_back_what_was_written() {
        let text = "# a comment\n\nalloc 1 4096 aten.mm h.0.attn\nalloc 2 12\nfree 1   # gone\nreset\n";
        let trace = parse_alloc_trace(text).unwrap();
        assert_eq!(trace.events, vec![Event::Alloc { id: 1, size: 4096 }, Event::Alloc { id: 2, size: 12 }, Event::Free { id: 1 }, Event::ResetPeaks]);
        assert_eq!(trace.lines, vec![3, 4, 5, 6]);
        assert_eq!(trace.labels[0], "aten.mm h.0.attn");
        assert_eq!(parse_alloc_trace(&write_alloc_trace(&trace)).unwrap(), AllocTrace { lines: vec![2, 3, 4, 5], ..trace });
    }


    #[test]
    fn bad_lines_say_where_and_what() {
        let e = parse_alloc_trace("alloc 1 10\nmalloc 2 3\n").unwrap_err();
        assert!(matches!(&e, AllocTraceError::Event { line: 2, found, span } if found == "malloc" && span.offset() == 11));
        let e = parse_alloc_trace("alloc 4294967296 10\n").unwrap_err();
        assert!(matches!(e, AllocTraceError::Number { line: 1, field: "a storage id", .. }));
        let e = parse_alloc_trace("alloc 3\n").unwrap_err();
        assert!(matches!(&e, AllocTraceError::Number { field: "a size in bytes", found, .. } if found == "the end of the line"));
        let e = parse_alloc_trace("alloc 3 -5\n").unwrap_err();
        assert!(matches!(e, AllocTraceError::Number { .. }));
        let e = parse_alloc_trace("free 3 now\n").unwrap_err();
        assert!(matches!(&e, AllocTraceError::Trailing { found, .. } if found == "now"));
    }
}
