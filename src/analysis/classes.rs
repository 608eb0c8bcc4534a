//! Value classes: what each value is to a training step, for reports.
//!
//! - `param`, `input`, `state`: arguments, by role;
//! - `grad`: an output of a backward-class op, or of any op that reads a grad (so sums,
//!   matmuls and views of gradients are grads too);
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
    // Program order is topological, so one forward sweep sees every input's class first.
    let mut reads_for_grad: IndexVec<ValueId, bool> = IndexVec::from_elem(false, graph.values.len());
    for op in &graph.ops {
        let row = op.kind.def();
        let makes_grads = match row.class {
            OpClass::Backward => true,
            OpClass::Forward => op.inputs.iter().any(|&v| class[v] == Class::Grad),
            OpClass::Optimizer => false,
        };
        if makes_grads {
            for &output in &op.outputs {
                class[output] = Class::Grad;
            }
            for &input in &op.inputs {
                reads_for_grad[input] = true;
            }
        }
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
    for (value, &read) in reads_for_grad.iter_enumerated() {
        if read && class[value] == Class::Temp {
            class[value] = Class::Activation;
        }
    }
    class
}
