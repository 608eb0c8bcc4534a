//! Value classes: what each value is to a training step, for reports.
//!
//! - `param`, `input`, `state`: arguments, by role;
//! - `grad`: an output of a backward-class op; the incoming gradient a backward op reads
//!   (its first input, `dy` or `dloss`); the gradient an optimizer reads (its input `g`);
//!   a constant (output of an op without inputs, like
//!   `fill`) that an op computing a grad reads (a gradient seed such as d loss / d loss = 1);
//!   and the output of any op that reads a grad (so sums, matmuls and views of gradients are
//!   grads too). Optimizer outputs are not grads;
//! - new params and new state (outputs of optimizer ops) take the class of the input they
//!   replace (`param` or `state`);
//! - `activation`: any other op output that a grad-computing op reads (directly or through
//!   a view): a forward value kept alive into backward;
//! - `temp`: everything else computed (forward values dead before backward, the loss,
//!   constants).
//!
//! Classes come from the op table's `class` column and the graph's structure only, so a
//! step written by hand and one produced by autodiff are classed alike.

use std::fmt;

use serde::Serialize;

use crate::index::{IndexVec, ValueId};
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
    let mut class: IndexVec<ValueId, Class> = graph
        .values
        .iter()
        .map(|v| match v.def {
            ValueDef::Arg(role) => role.into(),
            ValueDef::Op { .. } => Class::Temp,
        })
        .collect();
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
        let mut new_seed = false;
        for op in graph.ops.iter().filter(|op| op.inputs.is_empty()) {
            for &output in &op.outputs {
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
    // A view read for a gradient keeps its base alive too: walk views back to their base.
    for op in graph.ops.iter().rev() {
        if let Some(k) = op.kind.def().view_of
            && reads_for_grad[op.outputs[0]]
        {
            reads_for_grad[op.inputs[k]] = true;
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
