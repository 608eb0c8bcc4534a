//! The JSON form of a report: the same figures as the text, the full plan, and (schema 3)
//! the step itself, so the file alone is enough to read the plan back.
//!
//! `schema_version` says which shape a file has; docs/REPORTS.md describes the fields.
//! [`load`] reads a file back into a [`Subject`] and trusts nothing in it: the step's IR
//! is parsed and verified, the plan deserialised and run through the independent checker.
//! The figures of the report part are not read at all: every report recomputes them from
//! the graph and the plan.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::ir::print::print;
use crate::plan::Plan;
use crate::report::locs::Locs;
use crate::report::{REPORT_SCHEMA_VERSION, Report, Subject};

/// What a report file holds besides the report's figures.
#[derive(Serialize)]
struct Document<'a> {
    #[serde(flatten)]
    report: &'a Report,
    /// The file the step was read from, as the user named it.
    source: &'a str,
    /// The source location of each value id (`null` where unknown).
    value_locs: &'a Locs,
    /// The expanded step in canonical IR text: `parse(ir)` numbers values and ops as the
    /// plan does.
    ir: String,
}

/// The part of a report file [`load`] reads.
#[derive(Deserialize)]
struct Stored {
    schema_version: u32,
    source: String,
    value_locs: Locs,
    ir: String,
    plan: Plan,
}

/// Pretty-printed JSON of `subject`'s report (`report` is `Report::new` of it), ending
/// in a newline.
pub fn render(subject: &Subject, report: &Report) -> String {
    let document =
        Document { report, source: &subject.source, value_locs: &subject.locs, ir: print(&subject.graph) };
    let mut out = serde_json::to_string_pretty(&document).expect("a report always serialises");
    out.push('\n');
    out
}

/// Why a report file cannot be read back.
#[derive(Debug, Error)]
pub enum LoadError {
    /// The file is not JSON, or lacks a field `load` needs, or a field has the wrong type.
    #[error("{message} (line {line}, column {column})")]
    Json { message: String, line: usize, column: usize },
    /// `schema_version` is not the one this memplan writes.
    #[error(
        "schema_version {found}: this memplan reads plan files of schema {REPORT_SCHEMA_VERSION}; plan the step again with `memplan plan FILE --emit json`"
    )]
    Version { found: u64 },
    /// The embedded step (`ir`) does not parse or verify; `message` is the rendered
    /// diagnostic, located in the `ir` text.
    #[error("its `ir` is not a valid step:\n{message}")]
    Ir { message: String },
    /// The embedded step still has its `backward` statement: plans are of expanded steps.
    #[error("its `ir` is a forward-only step (it has `backward`); a plan file holds the expanded step")]
    NotExpanded,
    /// `value_locs` does not have one entry per value of the step.
    #[error("`value_locs` has {found} entries but the step has {expected} values")]
    Locs { expected: usize, found: usize },
    /// The plan is not a valid plan of the embedded step (the file was edited, or a memplan
    /// bug wrote it).
    #[error("its plan does not pass the checker:\n{violations}")]
    Check { violations: crate::checker::Violations },
}

/// Reads a report file written by [`render`] (see the module docs for what is checked).
pub fn load(text: &str) -> Result<Subject, LoadError> {
    let json_error = |e: serde_json::Error| LoadError::Json { message: e.to_string(), line: e.line(), column: e.column() };
    let value: serde_json::Value = serde_json::from_str(text).map_err(json_error)?;
    let found = value.get("schema_version").and_then(serde_json::Value::as_u64);
    if found != Some(u64::from(REPORT_SCHEMA_VERSION)) {
        return Err(match found {
            Some(found) => LoadError::Version { found },
            None => LoadError::Json { message: "missing or invalid `schema_version`".into(), line: 1, column: 1 },
        });
    }
    // Parse again from the text (not the Value) so that errors keep their line and column.
    let stored: Stored = serde_json::from_str(text).map_err(json_error)?;
    debug_assert_eq!(stored.schema_version, REPORT_SCHEMA_VERSION);
    let ir_file = format!("{} (ir)", stored.source);
    let render = |d: &dyn miette::Diagnostic| LoadError::Ir { message: crate::diagnostics::render(d, &ir_file, &stored.ir, false) };
    let graph = crate::parse(&stored.ir).map_err(|e| render(&e))?;
    crate::verify(&graph).map_err(|e| render(&e))?;
    if graph.backward.is_some() {
        return Err(LoadError::NotExpanded);
    }
    if stored.value_locs.0.len() != graph.values.len() {
        return Err(LoadError::Locs { expected: graph.values.len(), found: stored.value_locs.0.len() });
    }
    crate::check(&graph, &stored.plan).map_err(|violations| LoadError::Check { violations })?;
    Ok(Subject { source: stored.source, graph, plan: stored.plan, locs: stored.value_locs })
}
