//! Applying a rematerialisation sequence to a step: the rewritten graph and its schedule.
//!
//! Input: a verified graph, the [`StepProblem`] made from it and its schedule, and a valid
//! sequence of that problem (node `i` = the op at schedule position `i`; a repeat is a
//! recompute). Output: a new graph whose program order *is* the sequence (so its schedule
//! is `0..n`), every op once:
//! - an op's first run in the sequence is the op itself (same names, spans, `loc`);
//! - each later run is a **clone**: a new op of the same kind and attributes, writing fresh
//!   values named `%<name>.remat<k>` (the first free `k` from 1; printable and parsable IR);
//! - every input is bound as the problem's evaluation rule binds it: to the values of the
//!   **latest earlier run** of its writer (arguments are their own values). A view's
//!   readers read its root in the problem; here a reader reads the view, so a view whose
//!   base was recomputed since the view last ran is cloned onto the new base right before
//!   the reader (views cost nothing and own no bytes: the live bytes are the problem's);
//! - returns and updates name the latest values (their writers are never recomputed: see
//!   `problem.rs`), so the step's interface is unchanged.
//!
//! Each clone is listed as a [`Recompute`] with its original. The problem's tokens keep a
//! read of an updated param or state (through its first run) before the op writing its new
//! value, but a *clone* of such a reader can land after it, where it would read the new
//! value instead of the old: [`apply`] refuses such a sequence and names the nodes whose
//! clones did it, so the caller can forbid recomputing them and solve again.


use thiserror::Error;

use crate::hashing::FastSet;
use crate::index::{Idx, IndexVec, OpId, ValueId};
use crate::ir::graph::{Graph, Return, Update, ValueDef};
use crate::plan::Recompute;
use crate::solve::Node;
use crate::solve::remat::{SequenceError, evaluate};

use super::problem::StepProblem;

/// A step rewritten to run a sequence.
#[derive(Clone, Debug)]
pub struct Rewritten {
    /// Ops in the sequence's order (clones included).
    pub graph: Graph,
    /// `0..n`: program order.
    pub schedule: Vec<OpId>,
    /// Every clone and its original, in schedule order.
    pub recomputes: Vec<Recompute>,
}

/// Why a sequence cannot be applied.
#[derive(Clone, PartialEq, Eq, Debug, Error)]
pub enum ApplyError {
    /// The sequence is not valid for the problem (the core's rule).
    #[error("the sequence is invalid: {0}")]
    Invalid(#[from] SequenceError),
    /// Clones of these nodes read an updated param or state after its new value is written;
    /// recomputing them is not possible in this order.
    #[error("recomputes of nodes {0:?} read a param or state after its update")]
    ReadsUpdated(Vec<Node>),
    /// An op reads an updated param or state after its new value is written, and it is not
    /// a clone: the problem's tokens should have prevented it (a memplan bug).
    #[error("`{0}` reads a param or state after its update")]
    FirstRunAfterUpdate(String),
}

/// Rewrites `graph` to run `sequence` (see the module docs).
pub fn apply(graph: &Graph, step: &StepProblem, sequence: &[Node]) -> Result<Rewritten, ApplyError> {
    evaluate(&step.problem, sequence)?;
    let mut a = Applier::new(graph);
    for &node in sequence {
        a.run(step.ops[node as usize]);
    }
    let returns = graph.returns.iter().map(|r| Return { value: a.resolve(r.value), span: r.span }).collect();
    let updates = graph
        .updates
        .iter()
        .map(|u| Update { target: a.resolve(u.target), value: a.resolve(u.value), span: u.span })
        .collect();
    a.new.returns = returns;
    a.new.updates = updates;
    a.check_updates(step)?;
    let schedule = a.new.ops.indices().collect();
    Ok(Rewritten { graph: a.new, schedule, recomputes: a.recomputes })
}

struct Applier<'a> {
    old: &'a Graph,
    new: Graph,
    /// The new value standing for each old value now (its latest run).
    current: IndexVec<ValueId, Option<ValueId>>,
    /// The first run of each old op.
    first: IndexVec<OpId, Option<OpId>>,
    /// The old op each new op runs.
    origin: Vec<OpId>,
    /// Names taken (old and new), and the next clone number to try per old value.
    names: FastSet<String>,
    next: IndexVec<ValueId, usize>,
    recomputes: Vec<Recompute>,
}

impl<'a> Applier<'a> {
    fn new(old: &'a Graph) -> Applier<'a> {
        let mut new = Graph::new(old.name.clone());
        let mut current = IndexVec::from_elem(None, old.values.len());
        for &arg in &old.args {
            let value = &old.values[arg];
            let ValueDef::Arg(role) = value.def else { unreachable!("args are arguments") };
            let id = new.add_arg(value.name.clone(), value.ty.clone(), role);
            new.values[id].span = value.span;
            current[arg] = Some(id);
        }
        Applier {
            old,
            new,
            current,
            first: IndexVec::from_elem(None, old.ops.len()),
            origin: Vec::new(),
            names: old.values.iter().map(|v| v.name.clone()).collect(),
            next: IndexVec::from_elem(1, old.values.len()),
            recomputes: Vec::new(),
        }
    }

    /// Runs old op `op_id` (again, if it ran before) with its inputs bound to their latest runs.
    fn run(&mut self, op_id: OpId) -> OpId {
        let op = &self.old.ops[op_id];
        let inputs: Vec<ValueId> = op.inputs.iter().map(|&v| self.resolve(v)).collect();
        let original = self.first[op_id];
        let outputs = op
            .outputs
            .iter()
            .map(|&v| {
                let name = if original.is_some() { self.fresh_name(v) } else { self.old.values[v].name.clone() };
                (name, self.old.values[v].ty.clone())
            })
            .collect();
        let id = self.new.add_op(op.kind, inputs, op.attrs.clone(), outputs);
        self.new.ops[id].loc = op.loc.clone();
        self.origin.push(op_id);
        match original {
            Some(of) => self.recomputes.push(Recompute { clone: id, of }),
            None => {
                self.first[op_id] = Some(id);
                self.new.ops[id].span = op.span;
                // The user's checkpoint marks stay on the op itself (not on its clones).
                self.new.ops[id].region = op.region;
                for (&old_v, &new_v) in op.outputs.iter().zip(&self.new.ops[id].outputs) {
                    self.new.values[new_v].span = self.old.values[old_v].span;
                }
            }
        }
        for (k, &old_v) in op.outputs.iter().enumerate() {
            self.current[old_v] = Some(self.new.ops[id].outputs[k]);
        }
        id
    }

    /// The new value an op reading old value `v` now reads: its latest run; for a view, a
    /// view of its base's latest run (cloning the view if its base ran again since).
    fn resolve(&mut self, v: ValueId) -> ValueId {
        let ValueDef::Op { op, .. } = self.old.values[v].def else {
            return self.current[v].expect("arguments are mapped first");
        };
        if let Some(k) = self.old.ops[op].kind.def().view_of() {
            let base = self.resolve(self.old.ops[op].inputs[k]);
            let fresh = self.current[v].is_some_and(|now| {
                let view_op = self.new.def_op(now).expect("a view is an op output");
                self.new.ops[view_op].inputs[k] == base
            });
            if !fresh {
                self.run(op);
            }
        }
        self.current[v].expect("evaluate() checked every read follows a run of its writer")
    }

    /// `name.remat1`, or the first `name.rematK` not taken.
    fn fresh_name(&mut self, v: ValueId) -> String {
        let base = &self.old.values[v].name;
        loop {
            let k = self.next[v];
            self.next[v] += 1;
            let name = format!("{base}.remat{k}");
            if self.names.insert(name.clone()) {
                return name;
            }
        }
    }

    /// No op reads an updated target after the op writing its new value.
    fn check_updates(&self, step: &StepProblem) -> Result<(), ApplyError> {
        let g = &self.new;
        let mut root: IndexVec<ValueId, ValueId> = g.values.indices().collect();
        for op in &g.ops {
            if let Some(k) = op.kind.def().view_of() {
                root[op.outputs[0]] = root[op.inputs[k]];
            }
        }
        let mut node_of: IndexVec<OpId, Node> = IndexVec::from_elem(0, self.old.ops.len());
        for (node, &op) in step.ops.iter().enumerate() {
            node_of[op] = node as Node;
        }
        let mut offenders: Vec<Node> = Vec::new();
        for update in &g.updates {
            let writer = g.def_op(update.value).expect("update values are op outputs");
            for later in (writer.index() + 1..g.ops.len()).map(OpId::new) {
                if g.ops[later].inputs.iter().any(|&i| root[i] == update.target) {
                    let origin = self.origin[later.index()];
                    if self.first[origin] == Some(later) {
                        return Err(ApplyError::FirstRunAfterUpdate(g.describe_op(later)));
                    }
                    offenders.push(node_of[origin]);
                }
            }
        }
        offenders.sort_unstable();
        offenders.dedup();
        if offenders.is_empty() { Ok(()) } else { Err(ApplyError::ReadsUpdated(offenders)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::remat::step_problem;

    #[test]
    fn clone_names_skip_names_taken() {
        let graph = crate::parse(
            "step @s(%x: f32[8] input) {
  %a = relu(%x)
  %a.remat1 = relu(%x)
  %b = add(%a, %a.remat1)
  %c = mul(%b, %a)
  return %c
}",
        )
        .unwrap();
        crate::verify(&graph).unwrap();
        let schedule: Vec<OpId> = graph.ops.indices().collect();
        let step = step_problem(&graph, &schedule, 256, true).unwrap();
        // a, a.remat1, b, a again (twice), c.
        let rewritten = apply(&graph, &step, &[0, 1, 2, 0, 0, 3]).unwrap();
        let names: Vec<&str> = rewritten.graph.values.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["x", "a", "a.remat1", "b", "a.remat2", "a.remat3", "c"]);
        // %c reads the latest run of %a; the recomputes name the first run.
        assert_eq!(rewritten.graph.describe_op(OpId(5)), "%c = mul(%b, %a.remat3)");
        assert_eq!(rewritten.recomputes, vec![Recompute { clone: OpId(3), of: OpId(0) }, Recompute { clone: OpId(4), of: OpId(0) }]);
        assert_eq!(rewritten.schedule, (0..6).map(OpId).collect::<Vec<_>>());
        // An invalid sequence is named.
        assert!(matches!(apply(&graph, &step, &[0, 2, 1, 3]), Err(ApplyError::Invalid(_))));
    }
}
