//! Value classes: what each value is to a training step, for reports.
//!
//! - `param`, `input`, `state`: arguments, by role;
//! - `grad`: an output of a backward-class op; the incoming gradient a backward op reads
//!   (its first input, `dy` or `dloss`); the gradient an optimizer reads (its input `g`);
//!   a float constant (output of an op without inputs, like `fill`) that an op computing a
//!   grad reads, directly or through views (a gradient seed such as d loss / d loss = 1,
//!   which autodiff reshapes and expands for a `sum` loss; integer constants, like the
//!   positions `arange` writes for an embedding, carry no gradient);
//!   and the output of any op that reads a grad (so sums, matmuls and views of gradients are
//!   grads too). Optimizer outputs are not grads;
//! - new params and new state take the class of what they replace (`param` or `state`):
//!   the outputs of optimizer ops written over a param or state argument, and every value
//!   an `update %arg <- %v` writes back (Adam's step counter `%step.new = add_scalar(%step,
//!   ...)` is state, as its buffer is);
//! - `activation`: any other op output that a grad-computing op reads (directly or through
//!   a view): a forward value kept alive into backward; and, in a step rewritten to
//!   recompute under a budget ([`classify_recomputing`]), every value a recomputation
//!   (a clone of a forward op) writes or reads: what it writes exists only to be read by
//!   backward, directly or through the next recomputed value, and what it reads (a
//!   checkpoint, or the base of a view it reads) is kept alive into backward for it;
//! - `temp`: everything else computed (forward values dead before backward, the loss,
//!   constants).
//!
//! Classes come from the op table's `class` column and the graph's structure only (and,
//! for recomputations, the plan's list of them), so a step written by hand and one
//! produced by autodiff are classed alike. A buffer's class, which reports colour and sum
//! buffers by, is derived from these (`report::Report::new`).

use std::fmt;

use serde::Serialize;

use crate::index::{IndexVec, OpId, ValueId};
use crate::ir::graph::{Graph, Role, ValueDef};
use crate::ir::ops::OpClass;

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    Param,
    Input,
    State,
    Grad,
    Activation,
    Temp,
}

impl Class {
    pub const ALL: [Class; 6] = [Class::Param, Class::Input, Class::State, Class::Grad, Class::Activation, Class::Temp];

    pub fn name(self) -> &'static str {
        match self {
            Class::Param => "param",
            Class::Input => "input",
            Class::State => "state",
            Class::Grad => "grad",
            Class::Activation => "activation",
            Class::Temp => "temp",
        }
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl From<Role> for Class {
    fn from(role: Role) -> Class {
        match role {
            Role::Param => Class::Param,
            Role::Input => Class::Input,
            Role::State => Class::State,
        }
    }
}

/// The class of every value of a verified graph.
pub fn classify(graph: &Graph) -> IndexVec<ValueId, Class> {
    classify_recomputing(graph, &[])
}

/// The class of every value of a verified graph in which the ops `clones` recompute
/// forward values (a plan's `remat.recomputes`): the temps they write or read are
/// activations.
pub fn classify_recomputing(graph: &Graph, clones: &[OpId]) -> IndexVec<ValueId, Class> {
    let Flow { grad, reads_for_grad } = flow(graph);
    let mut class: IndexVec<ValueId, Class> = graph
        .values
        .iter()
        .map(|v| match v.def {
            ValueDef::Arg(role) => role.into(),
            ValueDef::Op { .. } => Class::Temp,
        })
        .collect();
    for op in &graph.ops {
        let row = op.kind.def();
        if row.class == OpClass::Optimizer {
            for &(output, input) in row.inplace {
                if let ValueDef::Arg(role) = graph.values[op.inputs[input]].def {
                    class[op.outputs[output]] = role.into();
                }
            }
        }
    }
    for update in &graph.updates {
        class[update.value] = class[update.target];
    }
    // What recomputations write, and what they read (checkpoints kept for them, and the
    // bases of views they read), is kept for backward.
    let mut kept: Vec<ValueId> = clones.iter().flat_map(|&op| graph.ops[op].outputs.iter().chain(&graph.ops[op].inputs)).copied().collect();
    while let Some(value) = kept.pop() {
        if class[value] == Class::Temp && !grad[value] {
            class[value] = Class::Activation;
        }
        if let Some(op) = graph.def_op(value)
            && let Some(k) = graph.ops[op].kind.def().view_of()
        {
            kept.push(graph.ops[op].inputs[k]);
        }
    }
    for value in graph.values.indices() {
        if class[value] != Class::Temp {
            continue;
        }
        if grad[value] {
            class[value] = Class::Grad;
        } else if reads_for_grad[value] {
            class[value] = Class::Activation;
        }
    }
    class
}

/// Which values are gradients (the `grad` rule of the module docs, before the rules that
/// class new params and state): the remat pass recomputes only forward ops whose outputs
/// are not.
pub fn gradients(graph: &Graph) -> IndexVec<ValueId, bool> {
    flow(graph).grad
}

/// The gradient flow of a step: which values are gradients, and which are read by an op
/// computing one (directly or through a view).
struct Flow {
    grad: IndexVec<ValueId, bool>,
    reads_for_grad: IndexVec<ValueId, bool>,
}

fn flow(graph: &Graph) -> Flow {
    let mut grad: IndexVec<ValueId, bool> = IndexVec::from_elem(false, graph.values.len());
    for op in &graph.ops {
        let row = op.kind.def();
        let slot = match row.class {
            OpClass::Backward => Some(0),
            OpClass::Optimizer => row.inputs.iter().position(|&name| name == "g"),
            OpClass::Forward => None,
        };
        if let Some(&incoming) = slot.and_then(|k| op.inputs.get(k))
            && graph.def_op(incoming).is_some()
        {
            grad[incoming] = true;
        }
    }
    // Propagate forward; a newly found seed constant needs another sweep. Program order is
    // topological, so each sweep sees every input before its readers.
    let mut reads_for_grad: IndexVec<ValueId, bool>;
    loop {
        reads_for_grad = IndexVec::from_elem(false, graph.values.len());
        for op in &graph.ops {
            let makes_grads = match op.kind.def().class {
                OpClass::Backward => true,
                OpClass::Forward => op.inputs.iter().chain(&op.outputs).any(|&v| grad[v]),
                OpClass::Optimizer => false,
            };
            if makes_grads {
                for &output in &op.outputs {
                    grad[output] = true;
                }
                for &input in &op.inputs {
                    reads_for_grad[input] = true;
                }
            }
        }
        // A view read for a gradient keeps its base alive too: walk views back to their base
        // (so a seed read through a reshape is found).
        for op in graph.ops.iter().rev() {
            if let Some(k) = op.kind.def().view_of()
                && reads_for_grad[op.outputs[0]]
            {
                reads_for_grad[op.inputs[k]] = true;
            }
        }
        // A seed is a float constant: the positions `arange` writes for an embedding, which
        // its backward op reads too, are integers (no gradient), and what the forward pass
        // computes from them is not a gradient either.
        let mut new_seed = false;
        for op in graph.ops.iter().filter(|op| op.inputs.is_empty()) {
            for &output in op.outputs.iter().filter(|&&v| graph.values[v].ty.dtype.is_float()) {
                if reads_for_grad[output] && !grad[output] {
                    grad[output] = true;
                    new_seed = true;
                }
            }
        }
        if !new_seed {
            break;
        }
    }
    Flow { grad, reads_for_grad }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(text: &str) -> Graph {
        let graph = crate::parse(text).unwrap();
        crate::verify(&graph).unwrap();
        crate::expand(&graph).unwrap()
    }

    fn class_of(graph: &Graph, classes: &IndexVec<ValueId, Class>, name: &str) -> Class {
        let v = graph.values.indices().find(|&v| graph.values[v].name == name).unwrap_or_else(|| panic!("no %{name}"));
        classes[v]
    }

    /// Integer positions that both an embedding and its backward read are no gradient seed,
    /// so the forward pass computed from them stays forward; Adam's step counter is state.
    #[test]
    fn positions_are_not_gradients_and_the_step_counter_is_state() {
        let g = step(
            "step @emb(%table: f32[8,4] param, %x: f32[3,4] input) {
               %pos = fill(shape=[3], dtype=i64, step=1.0)
               %e = embedding(%table, %pos)
               %h = mul(%e, %x)
               %loss = sum(%h, axes=[0, 1])
               backward %loss with adam(lr=0.001)
             }",
        );
        let classes = classify(&g);
        for (name, class) in [
            ("pos", Class::Activation),
            ("e", Class::Temp),
            ("h", Class::Temp),
            ("loss", Class::Temp),
            ("loss.grad", Class::Grad),
            ("e.grad", Class::Grad),
            ("table.grad", Class::Grad),
            ("step.new", Class::State),
            ("table.new", Class::Param),
            ("table.m.new", Class::State),
        ] {
            assert_eq!(class_of(&g, &classes, name), class, "%{name}");
        }
        assert!(!gradients(&g)[g.values.indices().find(|&v| g.values[v].name == "step.new").unwrap()]);
    }

    /// A float constant read as a gradient is a seed, even through forward ops (a backward
    /// written by hand); what recomputations write is an activation.
    #[test]
    fn seeds_and_recomputations() {
        let g = step(
            "step @s(%x: f32[2,4] input, %w: f32[4,4] param) {
               %h = matmul(%x, %w)
               %a = relu(%h)
               %dout = fill(shape=[2, 4], dtype=f32, value=1.0)
               %ds = mul_scalar(%dout, value=0.5)
               %dh = relu_backward(%ds, %a)
               %dw = matmul(%x, %dh, transpose_a=true)
               %r = relu(%h)
               return %a, %dw, %r
             }",
        );
        let classes = classify(&g);
        assert_eq!(class_of(&g, &classes, "dout"), Class::Grad);
        assert_eq!(class_of(&g, &classes, "dw"), Class::Grad);
        assert_eq!(class_of(&g, &classes, "a"), Class::Activation);
        assert_eq!(class_of(&g, &classes, "r"), Class::Temp);
        // Say %r recomputes %a: it is an activation, and so is %h, which it reads.
        let r_op = g.def_op(g.values.indices().find(|&v| g.values[v].name == "r").unwrap()).unwrap();
        assert_eq!(class_of(&g, &classes, "h"), Class::Temp);
        let recomputing = classify_recomputing(&g, &[r_op]);
        assert_eq!(class_of(&g, &recomputing, "r"), Class::Activation);
        assert_eq!(class_of(&g, &recomputing, "h"), Class::Activation);
        assert_eq!(class_of(&g, &recomputing, "dw"), Class::Grad, "only the clones' classes change");
    }
}
