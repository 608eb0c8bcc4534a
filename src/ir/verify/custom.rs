//! The verifier's rules for the user's custom autograd Functions: `custom(N)` ops and
//! their `custom_backward(N)` blocks (docs/IR.md, docs/AUTODIFF.md).
//!
//! In a step with `backward` (autodiff's input), each custom region N has exactly one
//! block, and each block a region: the region's ops are contiguous in program order (one
//! Function call), the block's body is a valid graph of its own (`input` arguments, ops, a
//! `return`; no updates, `backward`, blocks or region marks), each argument has the type of
//! what it binds (`= grad %y`: `%y` a float output of a region-N op), and it returns one
//! value per listed gradient, of that value's type, for distinct float values defined
//! outside the region. A step without `backward` (an expanded one) has no blocks; its
//! `custom(N)` marks only record where the ops came from.

use miette::SourceSpan;

use super::{VerifyError, verify};
use crate::hashing::FastSet;
use crate::index::{Idx, ValueId};
use crate::ir::graph::{Bind, CustomBackward, Graph, Region, Role, ValueDef};

pub(super) fn check_custom_backwards(graph: &Graph, errors: &mut Vec<VerifyError>) {
    let problem = |errors: &mut Vec<VerifyError>, region: u32, message: String, span: Option<SourceSpan>| {
        errors.push(VerifyError::BadCustomBackward { region, message, span });
    };
    // Each region's ops, in program order.
    let mut regions: indexmap::IndexMap<u32, Vec<usize>> = indexmap::IndexMap::new();
    for (id, op) in graph.ops.iter_enumerated() {
        if let Some(Region::Custom(n)) = op.region {
            regions.entry(n).or_default().push(id.index());
        }
    }
    for (&n, ops) in &regions {
        if let Some(gap) = ops.windows(2).find(|w| w[1] != w[0] + 1) {
            let op = crate::index::OpId::new(gap[1]);
            let message = format!("its ops are not contiguous: `{}` follows an op outside it", graph.describe_op(op));
            problem(errors, n, message, graph.ops[op].span.into());
        }
        if graph.backward.is_some() && !graph.custom_backwards.iter().any(|c| c.region == n) {
            let op = crate::index::OpId::new(ops[0]);
            problem(errors, n, "it has no `custom_backward` block: nothing says its gradient".into(), graph.ops[op].span.into());
        }
    }
    let mut seen = FastSet::default();
    for custom in &graph.custom_backwards {
        let n = custom.region;
        let span: Option<SourceSpan> = custom.span.into();
        if graph.backward.is_none() {
            problem(errors, n, "a `custom_backward` block in a step without `backward`".into(), span);
            continue;
        }
        if !seen.insert(n) {
            problem(errors, n, "a second `custom_backward` block for the region".into(), span);
        }
        if !regions.contains_key(&n) {
            problem(errors, n, format!("no op is marked custom({n})"), span);
        }
        check_body(custom, errors);
        let mut problem = |message: String| errors.push(VerifyError::BadCustomBackward { region: n, message, span });
        let in_region = |v: ValueId| {
            graph.def_op(v).is_some_and(|op| graph.ops[op].region == Some(Region::Custom(n)))
        };
        let body = &custom.body;
        if custom.binds.len() != body.args.len() {
            problem(format!("{} bindings for {} arguments (a memplan bug)", custom.binds.len(), body.args.len()));
            continue;
        }
        for (&arg, bind) in body.args.iter().zip(&custom.binds) {
            let (Bind::Value(v) | Bind::GradOf(v)) = *bind;
            let Some(value) = graph.values.get(v) else { continue };
            let arg_ty = &body.values[arg].ty;
            if &value.ty != arg_ty {
                problem(format!("{} is {arg_ty} but binds {}, which is {}", body.value_name(arg), graph.value_name(v), value.ty));
            }
            if matches!(bind, Bind::GradOf(_)) && !(in_region(v) && value.ty.dtype.is_float()) {
                problem(format!("`grad {}`: a block reads the gradients of float outputs of its region's ops", graph.value_name(v)));
            }
        }
        if custom.grads.len() != body.returns.len() {
            problem(format!("it returns {} value(s) for {} gradient(s)", body.returns.len(), custom.grads.len()));
            continue;
        }
        let mut targets = FastSet::default();
        for (&x, ret) in custom.grads.iter().zip(&body.returns) {
            let Some(value) = graph.values.get(x) else { continue };
            let name = graph.value_name(x);
            if in_region(x) || !value.ty.dtype.is_float() {
                problem(format!("-> {name}: a block returns gradients of float values defined outside its region"));
            }
            if !targets.insert(x) {
                problem(format!("-> {name} twice"));
            }
            if body.values.get(ret.value).is_some_and(|r| r.ty != value.ty) {
                let ret_name = body.value_name(ret.value);
                problem(format!("the gradient of {name} ({}) is {ret_name}, which is {}", value.ty, body.values[ret.value].ty));
            }
        }
    }
}

/// The body as a graph of its own, and what a body may not have.
fn check_body(custom: &CustomBackward, errors: &mut Vec<VerifyError>) {
    let n = custom.region;
    let span: Option<SourceSpan> = custom.span.into();
    let body = &custom.body;
    if let Err(inner) = verify(body) {
        errors.push(VerifyError::CustomBackwardBody { region: n, errors: inner.errors });
    }
    let input_args = body.args.iter().all(|&a| body.values.get(a).is_some_and(|v| v.def == ValueDef::Arg(Role::Input)));
    let marked = body.ops.iter().any(|op| op.region.is_some());
    if !input_args
        || marked
        || body.backward.is_some()
        || !body.updates.is_empty()
        || !body.custom_backwards.is_empty()
    {
        errors.push(VerifyError::BadCustomBackward {
            region: n,
            message: "its body computes gradients only: no updates, `backward`, blocks or region marks".into(),
            span,
        });
    }
}
