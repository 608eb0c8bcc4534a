//! The JSON form of a report: the same figures as the text, plus the full plan.
//! `schema_version` says which shape a file has; docs/CLI.md describes the fields.

use crate::report::Report;

/// Pretty-printed JSON, ending in a newline.
pub fn render(report: &Report) -> String {
    let mut out = serde_json::to_string_pretty(report).expect("a report always serialises");
    out.push('\n');
    out
}
