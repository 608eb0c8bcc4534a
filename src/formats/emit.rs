//! `memplan plan FILE --emit FORMATS -o DIR`: the report files, their names and contents.
//!
//! Each format has ONE fixed file name (docs/REPORTS.md), so a directory holds at most one
//! plan's files and a script always knows where to look:
//!
//! | format | file        |
//! |--------|-------------|
//! | text   | report.txt  |
//! | json   | plan.json   |
//! | svg    | arena.svg   |
//! | trace  | trace.json  |
//! | csv    | buffers.csv |
//!
//! The CLI writes them (`src/cli/files.rs` says how it overwrites only these names).

use std::str::FromStr;

use crate::formats::{buffer_list, plan_json};
use crate::report::{Report, Subject, svg, text, trace};

/// An emitted format.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum Emit {
    Text,
    Json,
    Svg,
    Trace,
    Csv,
}

impl Emit {
    pub const ALL: [Emit; 5] = [Emit::Text, Emit::Json, Emit::Svg, Emit::Trace, Emit::Csv];

    /// The name `--emit` takes.
    pub fn name(self) -> &'static str {
        match self {
            Emit::Text => "text",
            Emit::Json => "json",
            Emit::Svg => "svg",
            Emit::Trace => "trace",
            Emit::Csv => "csv",
        }
    }

    /// The file it is written to, inside the output directory.
    pub fn file_name(self) -> &'static str {
        match self {
            Emit::Text => "report.txt",
            Emit::Json => "plan.json",
            Emit::Svg => "arena.svg",
            Emit::Trace => "trace.json",
            Emit::Csv => "buffers.csv",
        }
    }

    /// The file's contents for `subject` (`report` is `Report::new` of it; `top` is the
    /// text report's number of live values listed at the peak; its buffer table lists
    /// every buffer).
    pub fn render(self, subject: &Subject, report: &Report, top: usize) -> String {
        match self {
            Emit::Text => text::render(report, top, text::BufferRows::All),
            Emit::Json => plan_json::render(subject, report),
            Emit::Svg => svg::render(subject, report),
            Emit::Trace => trace::render(subject, report),
            Emit::Csv => buffer_list::from_plan(&subject.plan),
        }
    }
}

impl FromStr for Emit {
    type Err = String;

    fn from_str(s: &str) -> Result<Emit, String> {
        Emit::ALL.into_iter().find(|e| e.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Emit::ALL.iter().map(|e| e.name()).collect();
            format!("unknown format `{s}`; the formats are {}", names.join(", "))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_files_are_distinct() {
        for emit in Emit::ALL {
            assert_eq!(emit.name().parse::<Emit>(), Ok(emit));
        }
        let mut files: Vec<&str> = Emit::ALL.iter().map(|e| e.file_name()).collect();
        files.sort();
        files.dedup();
        assert_eq!(files.len(), Emit::ALL.len());
        assert!("png".parse::<Emit>().unwrap_err().contains("text, json, svg, trace, csv"));
    }
}
