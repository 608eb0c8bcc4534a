//! Source locations of values, for reports that attribute bytes to source lines.
//!
//! A value's location is the one its defining op carries as `loc("model.py":14)` in the
//! IR (the model's own source line), or else where the op (for an argument: its
//! declaration) sits in the .step file, `FILE:line:col`, with FILE as the user named it
//! (never made absolute, so snapshots stay portable). Ops that autodiff writes carry the
//! location of the forward op they come from, so a gradient is attributed to the line
//! whose backward made it. Values built by code without a span (the optimizer state
//! autodiff adds) have none.
//!
//! Locations are computed once, from the source text, when a step is planned; a plan
//! JSON stores them (`value_locs`), so a report read back from it attributes bytes to the
//! same lines.

use serde::{Deserialize, Serialize};

use crate::index::{IndexVec, OpId, ValueId};
use crate::ir::graph::{Graph, Span, ValueDef};

/// The location of every value, by id (`None`: unknown).
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Locs(pub IndexVec<ValueId, Option<String>>);

impl Locs {
    /// The locations of `graph`'s values, whose spans point into `text`, the contents of
    /// `file`.
    pub fn from_source(graph: &Graph, file: &str, text: &str) -> Locs {
        let lines = LineIndex::new(text);
        let at = |span: Span| span.range().map(|(start, _)| lines.locate(file, start));
        Locs(
            graph
                .values
                .iter()
                .map(|value| match value.def {
                    ValueDef::Arg(_) => at(value.span),
                    ValueDef::Op { op, .. } => {
                        let op = &graph.ops[op];
                        op.loc.as_ref().map(ToString::to_string).or_else(|| at(op.span))
                    }
                })
                .collect(),
        )
    }

    /// The location of `value`.
    pub fn value(&self, value: ValueId) -> Option<&str> {
        self.0.get(value).and_then(|l| l.as_deref())
    }

    /// The location of `op` (that of its first output).
    pub fn op(&self, graph: &Graph, op: OpId) -> Option<&str> {
        graph.ops[op].outputs.first().and_then(|&v| self.value(v))
    }
}

/// Byte offsets of line starts, for `line:col` of a byte offset.
struct LineIndex {
    starts: Vec<usize>,
    text_len: usize,
}

impl LineIndex {
    fn new(text: &str) -> LineIndex {
        let starts = std::iter::once(0).chain(text.match_indices('\n').map(|(i, _)| i + 1)).collect();
        LineIndex { starts, text_len: text.len() }
    }

    /// `file:line:col`, both 1-based (col counts bytes).
    fn locate(&self, file: &str, offset: usize) -> String {
        let offset = offset.min(self.text_len);
        let line = self.starts.partition_point(|&s| s <= offset).max(1);
        let col = offset - self.starts[line - 1] + 1;
        format!("{file}:{line}:{col}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ir_locs_win_and_spans_give_line_and_column() {
        let text = "step @s(\n  %x: f32[4] input,\n) {\n  %a = relu(%x) loc(\"m.py\":7)\n  %b = relu(%a)\n  return %b\n}\n";
        let graph = crate::parse(text).unwrap();
        let locs = Locs::from_source(&graph, "dir/s.step", text);
        let names: Vec<(String, Option<&str>)> =
            graph.values.iter_enumerated().map(|(v, value)| (value.name.clone(), locs.value(v))).collect();
        assert_eq!(
            names,
            vec![
                ("x".to_string(), Some("dir/s.step:2:3")),
                ("a".to_string(), Some("m.py:7")),
                ("b".to_string(), Some("dir/s.step:5:8")),
            ]
        );
        assert_eq!(locs.op(&graph, OpId(1)), Some("dir/s.step:5:8"), "the op's call");
    }
}
