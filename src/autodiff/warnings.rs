//! Steps that verify, expand, plan and run, but most likely not as their author meant: a
//! float param the loss does not depend on (autodiff gives it no gradient and no update,
//! silently, since a frozen param is legal), and a step that neither returns nor updates
//! anything (every op computes values nothing reads). [`warnings`] finds them on the step
//! as written (before expansion); the CLI prints them on stderr and carries on (exit 0).

use miette::{Diagnostic, SourceSpan};
use thiserror::Error;

use crate::ir::graph::{Graph, Role, ValueDef};

/// Something a step does that is legal but most likely a mistake.
#[derive(Debug, Error, Diagnostic, PartialEq)]
pub enum StepWarning {
    /// A float param that the loss does not depend on through float values.
    #[error("param %{param} does not reach the loss %{loss}: it gets no gradient and no optimizer update")]
    #[diagnostic(
        severity(Warning),
        help("it keeps its value every step: to train it, make the loss depend on it; if it is frozen on purpose, ignore this")
    )]
    Untrained {
        param: String,
        loss: String,
        #[label("never reaches the loss")]
        span: Option<SourceSpan>,
    },

    /// A step without `backward`, `return` or `update`: nothing it computes is used.
    #[error("step @{step} returns nothing, updates nothing and has no `backward`: its {ops} op(s) compute values nothing reads")]
    #[diagnostic(
        severity(Warning),
        help("add `return %v` for the values the step is for, or `backward %loss with sgd(lr=0.01)` to train it")
    )]
    NothingUsed { step: String, ops: usize },
}

/// The warnings of a verified step as written (see the module docs), params in argument
/// order.
pub fn warnings(graph: &Graph) -> Vec<StepWarning> {
    let Some(backward) = &graph.backward else {
        if graph.returns.is_empty() && graph.updates.is_empty() && !graph.ops.is_empty() {
            return vec![StepWarning::NothingUsed { step: graph.name.clone(), ops: graph.ops.len() }];
        }
        return Vec::new();
    };
    let to_loss = super::reaches_loss(graph, backward.loss, false);
    graph
        .args
        .iter()
        .filter(|&&a| graph.values[a].def == ValueDef::Arg(Role::Param) && graph.values[a].ty.dtype.is_float() && !to_loss[a])
        .map(|&a| StepWarning::Untrained {
            param: graph.values[a].name.clone(),
            loss: graph.values[backward.loss].name.clone(),
            span: graph.values[a].span.into(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn warnings_of(text: &str) -> Vec<StepWarning> {
        let graph = crate::parse(text).unwrap();
        crate::verify(&graph).unwrap();
        warnings(&graph)
    }

    #[test]
    fn a_param_the_loss_does_not_read_is_named() {
        let found = warnings_of(
            "step @s(%w: f32[4,4] param, %unused: f32[4] param, %ids: i32[4] param, %x: f32[2,4] input) {
               %h = matmul(%x, %w)
               %loss = sum(%h, axes=[0, 1])
               backward %loss with sgd(lr=0.1)
             }",
        );
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            matches!(&found[0], StepWarning::Untrained { param, loss, span: Some(_) } if param == "unused" && loss == "loss"),
            "{found:?}"
        );
        assert_eq!(found[0].severity(), Some(miette::Severity::Warning));
    }

    #[test]
    fn a_step_that_uses_nothing_it_computes_is_named() {
        let dead = "step @dead(%x: f32[2] input) {\n  %y = relu(%x)\n}";
        assert_eq!(warnings_of(dead), [StepWarning::NothingUsed { step: "dead".into(), ops: 1 }]);
        assert!(warnings_of("step @ok(%x: f32[2] input) {\n  %y = relu(%x)\n  return %y\n}").is_empty());
        assert!(warnings_of("step @empty(%x: f32[2] input) {\n}").is_empty(), "no ops, nothing computed in vain");
    }
}
