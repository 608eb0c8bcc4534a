//! The checker's view of rematerialisation: every recompute computes the same bits as its
//! original, the FLOPs claimed are the graph's, and the arena meets the budget.
//!
//! A plan made under a budget (`plan.remat`) lists each clone with its original. For each:
//! both ids exist; the original is not itself listed as a clone (nor the clone itself);
//! no clone is listed twice; the clone has the original's kind, attributes and numbers of
//! inputs and outputs; and each input of the clone has the same *origin* as the original's
//! input at that position, where the origin of output `j` of a listed clone is output `j` of
//! its original, and any other value is its own origin.
//!
//! Why that proves the clone writes the original's bits: by induction over the schedule
//! (which the parent checks is topological, so a clone runs after its inputs are written).
//! A value and its origin hold the same bits when both are intact: true for values that
//! are their own origin; for a clone's output it follows from the clone's kernel being the
//! original's (same kind, same attributes, no effects besides its outputs) applied to inputs
//! whose origins, hence bits, equal the original's inputs'. "Intact when read" is the
//! parent's generic check (no value's bytes are overwritten before its last read), which
//! covers clones' reads like any other op's. The op table's `flops` column gives the costs.
//! Nothing here trusts the planner: ids are bounds-checked, sums are done in `u128`.
//!
//! That covers `dropout`, the one op that draws random numbers, because its kernels are a
//! pure function of their inputs and attributes too: the mask is a counter-based hash of
//! the seed's *value* (an input), the `stream` attribute and the element index
//! (src/exec/kernels/dropout.rs), with no generator state carried from op to op or step
//! to step. A clone with the original's attributes (`p`, `stream`) whose seed input has the
//! original's origin reads the same seed bits, so it draws the original's mask and writes
//! the original's bits. A clone with another stream fails the attribute comparison; one
//! reading another seed value fails the origin comparison (tests/remat.rs plants both).

use crate::index::{Idx, OpId, ValueId};
use crate::ir::graph::ValueDef;
use crate::ir::types::TensorType;

use super::{Checker, Violation};

impl Checker<'_> {
    /// Checks `plan.remat` (nothing without one).
    pub(super) fn recomputes(&mut self) {
        let (graph, plan) = (self.graph, self.plan);
        let Some(remat) = &plan.remat else { return };
        let ops = graph.ops.len();
        // The original of each listed clone; `None` for ops that are not clones.
        let mut original: Vec<Option<OpId>> = vec![None; ops];
        let mut pairs = Vec::new();
        for (index, r) in remat.recomputes.iter().enumerate() {
            let mut in_range = true;
            for op in [r.clone, r.of] {
                if op.index() >= ops {
                    self.out.push(Violation::RecomputeIdOutOfRange { index, op, ops });
                    in_range = false;
                }
            }
            if !in_range {
                continue;
            }
            if original[r.clone.index()].is_some() {
                self.out.push(Violation::RecomputeListedTwice { clone: r.clone, clone_desc: self.describe(r.clone) });
                continue;
            }
            original[r.clone.index()] = Some(r.of);
            pairs.push((r.clone, r.of));
        }
        let mut valid = Vec::new();
        for &(clone, of) in &pairs {
            if clone == of || original[of.index()].is_some() {
                let (clone_desc, of_desc) = (self.describe(clone), self.describe(of));
                self.out.push(Violation::RecomputeOfClone { clone, clone_desc, of, of_desc });
                continue;
            }
            let (c, o) = (&graph.ops[clone], &graph.ops[of]);
            let what = if c.kind != o.kind {
                Some(format!("it is {}, the original {}", c.kind, o.kind))
            } else if c.attrs != o.attrs {
                Some(format!("attributes {} against {}", graph.call_text(clone), graph.call_text(of)))
            } else if c.inputs.len() != o.inputs.len() || c.outputs.len() != o.outputs.len() {
                Some("another number of inputs or outputs".to_string())
            } else {
                None
            };
            match what {
                Some(what) => {
                    let (clone_desc, of_desc) = (self.describe(clone), self.describe(of));
                    self.out.push(Violation::RecomputeDiffers { clone, clone_desc, of, of_desc, what });
                }
                None => valid.push((clone, of)),
            }
        }
        let origin = |v: ValueId| -> ValueId {
            match graph.values[v].def {
                ValueDef::Op { op, output } => original[op.index()]
                    .filter(|of| of.index() != op.index() && original[of.index()].is_none())
                    .and_then(|of| graph.ops[of].outputs.get(output).copied())
                    .unwrap_or(v),
                ValueDef::Arg(_) => v,
            }
        };
        for (clone, of) in valid {
            let (c, o) = (&graph.ops[clone], &graph.ops[of]);
            for (input, (&ci, &oi)) in c.inputs.iter().zip(&o.inputs).enumerate() {
                if origin(ci) != origin(oi) {
                    self.out.push(Violation::RecomputeInputDiffers {
                        clone,
                        clone_desc: self.describe(clone),
                        of,
                        of_desc: self.describe(of),
                        input,
                        clone_input_name: self.name(ci),
                        original_input_name: self.name(oi),
                    });
                }
            }
        }
        let flops = |op: OpId| -> u128 {
            let o = &graph.ops[op];
            let types = |vs: &[ValueId]| -> Vec<&TensorType> { vs.iter().map(|&v| &graph.values[v].ty).collect() };
            u128::from((o.kind.def().flops)(&types(&o.inputs), &types(&o.outputs), &o.attrs))
        };
        let total: u128 = graph.ops.indices().map(flops).sum();
        let base: u128 = graph.ops.indices().filter(|op| original[op.index()].is_none()).map(flops).sum();
        if u128::from(remat.base_flops) != base.min(u128::from(u64::MAX)) || u128::from(remat.flops) != total.min(u128::from(u64::MAX)) {
            self.out.push(Violation::RematFlops { claimed_base: remat.base_flops, claimed: remat.flops, base, total });
        }
        if let Some(budget) = remat.budget
            && plan.arena_bytes > budget
        {
            self.out.push(Violation::OverBudget { arena_bytes: plan.arena_bytes, budget });
        }
    }
}
