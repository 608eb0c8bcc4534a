//! The in-place pass: an op writes an output over an input that dies at that op.
//!
//! Runs after the schedule and before buffer assignment. For each op, in schedule order,
//! each `(output j, input k)` pair its op-table row lists as in-place-safe is taken when:
//! 1. the input `x` owns its bytes, or is a `reshape` (of a `reshape`, ...) of the value `r`
//!    that does (`dense_root`: a reshape view of a dense value reads the same bytes in the
//!    same row-major order, so reading it element by element is reading `r`), and the op
//!    reads `r` only through `x`: no other input of the op is a view of `r` (an elementwise
//!    kernel reading a permuted view of the bytes it is overwriting would read
//!    already-written elements). Below, "x" means `r` where it is about bytes and lifetimes;
//! 2. `x` dies at this op: its last read (directly or through a view) is at this op's
//!    position, and it need not survive the step: it is not a `param` or `state`
//!    argument (those persist, or receive their update), not returned (nor viewed by a
//!    returned value), not the new value of an update;
//! 3. the output has the same dtype and byte size as `x`, and is not itself the new value
//!    of an update (that one must land in its target's bytes);
//! 4. neither `x` nor the output is already part of another in-place pair.
//!
//! Soundness: by (2) no op after this one reads `x`'s bytes as `x`, and nothing needs them
//! at the end, so handing them to the output can only disturb this op itself. The op
//! reads `x` directly (1), and an in-place-safe pair means its kernel reads what it needs of
//! `x` before overwriting it (elementwise ops and optimizer updates element by element;
//! softmax and the normalisation backward ops row by row or channel by channel): the
//! contract every executor honours (docs/PLANNING.md). Equal sizes (3) mean the output
//! fits exactly. The checker verifies every decision independently (its in-place rule is
//! exactly this one), and the CPU executor's planned run stays bit-identical to the
//! unplanned one.
//!
//! Output: for each value, the input whose bytes it takes. Chains are fine (`b` over `a`
//! over `x`): buffer assignment follows them.

use crate::analysis::liveness::lifetimes;
use crate::index::{IndexVec, OpId, ValueId};
use crate::ir::graph::{Graph, ValueDef};

/// `reuse[v] = Some(x)`: value `v` is written over the bytes of `x`, an input of its op (or
/// the value an input reshapes).
pub type Reuse = IndexVec<ValueId, Option<ValueId>>;

/// No value reuses another's bytes (the pass switched off).
pub fn no_reuse(graph: &Graph) -> Reuse {
    IndexVec::from_elem(None, graph.values.len())
}

/// The value whose bytes `x` reads in their row-major order: `x` itself if it owns its
/// bytes, the root under a chain of views that keep its order (`reshape`: a reshape view of a
/// dense value keeps its elements' order), `None` through any other view (a transpose, slice or expand reads
/// the bytes in another order, or only some of them).
pub(crate) fn dense_root(graph: &Graph, x: ValueId) -> Option<ValueId> {
    let mut v = x;
    while let ValueDef::Op { op, .. } = graph.values[v].def {
        let op = &graph.ops[op];
        let Some(view) = op.kind.def().view else { break };
        if !view.keeps_order {
            return None;
        }
        v = op.inputs[view.input];
    }
    Some(v)
}

/// Chooses in-place pairs for `graph` run in `schedule` order (see the module docs).
pub fn inplace(graph: &Graph, schedule: &[OpId]) -> Reuse {
    let life = lifetimes(graph, schedule);
    let mut must_survive: IndexVec<ValueId, bool> =
        graph.values.iter().map(|v| matches!(v.def, ValueDef::Arg(role) if role.persists())).collect();
    for v in graph.returns.iter().map(|r| r.value) {
        must_survive[life.root[v]] = true;
    }
    let mut is_update_value: IndexVec<ValueId, bool> = IndexVec::from_elem(false, graph.values.len());
    for update in &graph.updates {
        must_survive[update.value] = true;
        is_update_value[update.value] = true;
    }
    let mut reuse = no_reuse(graph);
    let mut donated: IndexVec<ValueId, bool> = IndexVec::from_elem(false, graph.values.len());
    for (position, &op_id) in schedule.iter().enumerate() {
        let op = &graph.ops[op_id];
        for &(j, k) in op.kind.def().inplace_pairs(op.inputs.len(), &op.attrs).iter() {
            let (Some(&out), Some(&x)) = (op.outputs.get(j), op.inputs.get(k)) else { continue };
            let Some(r) = dense_root(graph, x) else { continue };
            let (x_ty, out_ty) = (&graph.values[x].ty, &graph.values[out].ty);
            let takes = op.inputs.iter().all(|&i| life.root[i] != r || i == x)
                && life.last[r] == position
                && !must_survive[r]
                && x_ty.dtype == out_ty.dtype
                && x_ty.bytes() == out_ty.bytes()
                && !is_update_value[out]
                && !donated[r]
                && reuse[out].is_none();
            if takes {
                reuse[out] = Some(r);
                donated[r] = true;
            }
        }
    }
    reuse
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The in-place pairs of a step in program order, as `(output, input)` names.
    fn pairs(text: &str) -> Vec<(String, String)> {
        let graph = crate::parse(text).unwrap_or_else(|e| panic!("{e:?}"));
        crate::verify(&graph).unwrap();
        let schedule: Vec<OpId> = graph.ops.indices().collect();
        let reuse = inplace(&graph, &schedule);
        reuse
            .iter_enumerated()
            .filter_map(|(v, x)| x.map(|x| (graph.values[v].name.clone(), graph.values[x].name.clone())))
            .collect()
    }

    fn named(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    #[test]
    fn a_chain_of_elementwise_ops_reuses_one_buffer() {
        let got = pairs(
            "step @s(%x: f32[8] input) {
  %a = relu(%x)
  %b = mul_scalar(%a, value=2.0)
  %c = add_scalar(%b, value=1.0)
  return %c
}",
        );
        assert_eq!(got, named(&[("a", "x"), ("b", "a"), ("c", "b")]));
    }

    #[test]
    fn a_value_read_later_returned_or_persisting_is_not_overwritten() {
        // %a is read again by %c; %x is a param; %b is returned.
        let got = pairs(
            "step @s(%x: f32[8] param, %y: f32[8] input) {
  %a = relu(%y)
  %b = relu(%a)
  %c = add(%a, %x)
  %d = relu(%c)
  return %b, %d
}",
        );
        assert_eq!(got, named(&[("a", "y"), ("c", "a"), ("d", "c")]));
        let got = pairs(
            "step @s(%y: f32[8] input) {
  %a = relu(%y)
  %b = relu(%a)
  return %a, %b
}",
        );
        assert_eq!(got, named(&[("a", "y")]), "a returned value survives the step");
    }

    #[test]
    fn sizes_must_match_and_views_of_the_donor_block_it() {
        // Broadcasting: %s has fewer bytes than the output.
        let got = pairs(
            "step @s(%m: f32[4,8] input, %s: f32[8] input) {
  %o = add(%s, %m)
  return %o
}",
        );
        assert_eq!(got, named(&[("o", "m")]), "only the full-size input can be overwritten");
        // The op reads %x both directly and through a transposed view.
        let got = pairs(
            "step @s(%x: f32[4,4] input) {
  %t = transpose(%x, perm=[1, 0])
  %o = add(%x, %t)
  return %o
}",
        );
        assert!(got.is_empty(), "{got:?}");
    }

    /// A reshape view reads its root's bytes in order: an op may write over the root
    /// through it (GPT-2's loss gradient over its logits). A transposed or sliced view
    /// reads them in another order or only some of them: never.
    #[test]
    fn reshapes_of_a_dying_value_pass_it_on_and_other_views_do_not() {
        let got = pairs(
            "step @s(%x: f32[4,6] input) {
  %h = relu(%x)
  %r = reshape(%h, shape=[2, 12])
  %rr = reshape(%r, shape=[24])
  %o = mul_scalar(%rr, value=2.0)
  return %o
}",
        );
        assert_eq!(got, named(&[("h", "x"), ("o", "h")]));
        for view in ["transpose(%h, perm=[1, 0])", "slice(%h, axis=1, start=0, end=3)"] {
            let got = pairs(&format!(
                "step @s(%x: f32[4,6] input) {{
  %h = relu(%x)
  %v = {view}
  %o = relu(%v)
  return %o
}}"
            ));
            assert_eq!(got, named(&[("h", "x")]), "{view}");
        }
        // The root is still read later (through the other reshape): it does not die here.
        let got = pairs(
            "step @s(%x: f32[4,6] input) {
  %h = relu(%x)
  %r = reshape(%h, shape=[24])
  %o = relu(%r)
  %s = reshape(%h, shape=[6, 4])
  %t = relu(%s)
  return %o, %t
}",
        );
        assert_eq!(got, named(&[("h", "x"), ("t", "h")]));
        // Planned and checked end to end.
        let graph = crate::parse(
            "step @s(%x: f32[4,6] input) {
  %h = relu(%x)
  %r = reshape(%h, shape=[24])
  %o = relu(%r)
  return %o
}",
        )
        .unwrap();
        let plan = crate::plan(&graph, &crate::passes::PlanOptions::default()).unwrap();
        crate::check(&graph, &plan).unwrap();
        let id = |name: &str| graph.values.iter_enumerated().find(|(_, v)| v.name == name).unwrap().0;
        assert_eq!(plan.value_buffer[id("o")], plan.value_buffer[id("x")]);
    }

    #[test]
    fn update_values_keep_their_own_target() {
        // sgd's output must land in %w (the update), never in %g's bytes.
        let got = pairs(
            "step @s(%w: f32[8] param, %x: f32[8] input) {
  %g = relu(%x)
  %w_new = sgd(%w, %g, lr=0.1)
  update %w <- %w_new
}",
        );
        assert_eq!(got, named(&[("g", "x")]));
    }

    #[test]
    fn switching_the_pass_off_reuses_nothing() {
        let graph = crate::parse("step @s(%x: f32[8] input) {\n  %a = relu(%x)\n  return %a\n}").unwrap();
        let on = crate::plan(&graph, &crate::PlanOptions::default()).unwrap();
        let off = crate::plan(&graph, &crate::PlanOptions { inplace: false, ..Default::default() }).unwrap();
        assert_eq!(on.buffers.len(), 1);
        assert_eq!(off.buffers.len(), 2);
        crate::check(&graph, &on).unwrap();
        crate::check(&graph, &off).unwrap();
    }
}
