//! The printer: [`Graph`] → canonical text, the form snapshots show.
//!
//! The canonical form (docs/IR.md):
//! ```text
//! step @mlp(
//!   %w1: f32[784,256] param,
//!   %x: f32[64,784] input,
//! ) {
//!   %h: f32[64,256] = matmul(%x, %w1)
//!   %o: f32[64,10] = matmul(%a, %w2, transpose_b=true) loc("mlp.py":14)
//!   update %w1 <- %w1_new
//!   return %loss
//! }
//! ```
//! - two-space indent; every argument on its own line with a trailing comma (a step without
//!   arguments opens `step @s() {`);
//! - every output with its type, even where the parser could infer it;
//! - attributes only where they differ from the row's default (required ones always), in
//!   row order, `name=value`, values in [`Attr`](crate::ir::ops::Attr)'s `Display` (floats
//!   in Rust's shortest round-trip form: `0.001`, `1e-8`, `1.0`, `-inf`);
//! - `loc("file":line)` after the op when it has one (`"`, `\`, newline and tab escaped);
//! - ops in program order, then each `custom_backward(N)(...) -> (...) { ... }` block (its
//!   ops and `return` indented four spaces), then the `backward` statement (if any: `backward %loss with
//!   adam(lr=0.01)`, the optimizer's attributes as an op's), then updates in order, then
//!   one `return` (if any);
//! - the text ends with `}` and a newline.
//!
//! Invariant: for every graph the parser produces, `parse(print(g)) == g` (spans aside) and
//! `print(parse(print(g))) == print(g)`.
//!
//! [`print_annotated`] prints the ops in another topological order (a schedule) with notes
//! as trailing comments (`--print-ir-after`); its text parses too.

use std::fmt::Write;

use crate::index::{OpId, ValueId};
use crate::ir::graph::{Bind, CustomBackward, Graph, Role};
use crate::ir::ops::quote;

/// The canonical text of `graph`.
pub fn print(graph: &Graph) -> String {
    let order: Vec<OpId> = graph.ops.indices().collect();
    print_annotated(graph, &order, &|_| None)
}

/// A line of printed IR that can carry a note.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Line {
    Arg(ValueId),
    Op(OpId),
}

/// The canonical text of `graph` with its ops in `order` (a topological order of every
/// op, so the text still parses) and, after each argument or op line for which `note`
/// gives one, the note as a trailing `// comment` (a note must not contain a newline).
pub fn print_annotated(graph: &Graph, order: &[OpId], note: &dyn Fn(Line) -> Option<String>) -> String {
    let mut out = String::new();
    let comment = |out: &mut String, line: Line| {
        if let Some(text) = note(line) {
            debug_assert!(!text.contains('\n'), "a note is one line");
            let _ = write!(out, "  // {text}");
        }
        out.push('\n');
    };
    // Writing to a String cannot fail, so `write!`'s results are ignored.
    let _ = write!(out, "step @{}(", graph.name);
    if !graph.args.is_empty() {
        out.push('\n');
        for &arg in &graph.args {
            let role = graph.role(arg).map_or("?", Role::name);
            let _ = write!(out, "  {}: {} {role},", graph.value_name(arg), graph.values[arg].ty);
            comment(&mut out, Line::Arg(arg));
        }
    }
    out.push_str(") {\n");
    for &id in order {
        op_line(&mut out, graph, id, "  ");
        comment(&mut out, Line::Op(id));
    }
    for custom in &graph.custom_backwards {
        custom_backward(&mut out, graph, custom);
    }
    if let Some(text) = graph.backward_text() {
        let _ = writeln!(out, "  {text}");
    }
    for up in &graph.updates {
        let _ = writeln!(out, "  update {} <- {}", graph.value_name(up.target), graph.value_name(up.value));
    }
    if !graph.returns.is_empty() {
        let names: Vec<String> = graph.returns.iter().map(|r| graph.value_name(r.value)).collect();
        let _ = writeln!(out, "  return {}", names.join(", "));
    }
    out.push_str("}\n");
    out
}

/// `indent%out: type = op(...) region loc(...)`, without the newline.
fn op_line(out: &mut String, graph: &Graph, id: OpId, indent: &str) {
    let op = &graph.ops[id];
    let outs: Vec<String> =
        op.outputs.iter().map(|&v| format!("{}: {}", graph.value_name(v), graph.values[v].ty)).collect();
    let _ = write!(out, "{indent}{} = {}", outs.join(", "), graph.call_text(id));
    if let Some(region) = op.region {
        let _ = write!(out, " {region}");
    }
    if let Some(loc) = &op.loc {
        let _ = write!(out, " loc({}:{}", quote(&loc.file), loc.line);
        if let Some(module) = &loc.module {
            let _ = write!(out, ", {}", quote(module));
        }
        out.push(')');
    }
}

/// A `custom_backward` block: its header (each argument with what it binds, the values
/// whose gradients it returns), its ops and its `return`, indented one level more.
fn custom_backward(out: &mut String, graph: &Graph, custom: &CustomBackward) {
    let body = &custom.body;
    let args: Vec<String> = body
        .args
        .iter()
        .zip(&custom.binds)
        .map(|(&arg, bind)| {
            let bound = match *bind {
                Bind::Value(v) => graph.value_name(v),
                Bind::GradOf(v) => format!("grad {}", graph.value_name(v)),
            };
            format!("{}: {} = {bound}", body.value_name(arg), body.values[arg].ty)
        })
        .collect();
    let grads: Vec<String> = custom.grads.iter().map(|&v| graph.value_name(v)).collect();
    let _ = writeln!(out, "  custom_backward({})({}) -> ({}) {{", custom.region, args.join(", "), grads.join(", "));
    for id in body.ops.indices() {
        op_line(out, body, id, "    ");
        out.push('\n');
    }
    if !body.returns.is_empty() {
        let names: Vec<String> = body.returns.iter().map(|r| body.value_name(r.value)).collect();
        let _ = writeln!(out, "    return {}", names.join(", "));
    }
    out.push_str("  }\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::graph::Role;
    use crate::ir::ops::{Attr, Attrs, OpKind};
    use crate::ir::parse::parse;
    use crate::ir::types::{DType, TensorType};

    /// parse(print(g)) == g and print is idempotent.
    fn round_trip(src: &str) -> String {
        let g = parse(src).unwrap_or_else(|e| panic!("{e:?}\n{src}"));
        let printed = print(&g);
        let again = parse(&printed).unwrap_or_else(|e| panic!("{e:?}\n{printed}"));
        assert_eq!(again, g, "{printed}");
        assert_eq!(print(&again), printed);
        printed
    }

    #[test]
    fn canonical_form() {
        let src = "// messy but valid
step @mlp(%w1: f32[784,256] param, %x: f32[64,784] input, %w2: f32[256,10] param,
          %b: f32[256]   param) {
  return %o, %h        // return first
  update %w1 <- %w1_new
  %h = matmul(%x, %w1, transpose_a=false)
  %a: f32[64,256] = relu(%h)
  %h2 = add(%a, %b)
  %o = matmul(%h2, %w2, transpose_b=false, transpose_a=false) loc(\"mlp.py\":14)
  %g = matmul(%x, %h, transpose_a=true)
  %w1_new = add(%w1, %g)
}";
        let expected = "step @mlp(
  %w1: f32[784,256] param,
  %x: f32[64,784] input,
  %w2: f32[256,10] param,
  %b: f32[256] param,
) {
  %h: f32[64,256] = matmul(%x, %w1)
  %a: f32[64,256] = relu(%h)
  %h2: f32[64,256] = add(%a, %b)
  %o: f32[64,10] = matmul(%h2, %w2) loc(\"mlp.py\":14)
  %g: f32[784,256] = matmul(%x, %h, transpose_a=true)
  %w1_new: f32[784,256] = add(%w1, %g)
  update %w1 <- %w1_new
  return %o, %h
}
";
        assert_eq!(round_trip(src), expected);
    }

    /// Control characters in strings (`loc` files and modules, `extern` targets) print as
    /// `\u{1b}` escapes, never raw, and parse back to the same characters; `Loc` shows
    /// them escaped too. A raw one in the text reads as itself.
    #[test]
    fn control_characters_in_strings_are_escaped() {
        let src = "step @s(%x: f32[4] input) {\n  %y = relu(%x) loc(\"a\u{1b}[31m\\u{7}.py\":3, \"blocks\\u{85}.0\")\n  return %y\n}";
        let printed = round_trip(src);
        assert!(printed.contains(r#"loc("a\u{1b}[31m\u{7}.py":3, "blocks\u{85}.0")"#), "{printed}");
        assert!(!printed.contains(['\u{1b}', '\u{7}', '\u{85}']), "{printed:?}");
        let g = parse(src).unwrap();
        let loc = g.ops.iter().next().and_then(|op| op.loc.clone()).unwrap();
        assert_eq!((loc.file.as_str(), loc.module.as_deref()), ("a\u{1b}[31m\u{7}.py", Some("blocks\u{85}.0")));
        assert_eq!(loc.to_string(), r"a\u{1b}[31m\u{7}.py:3");
        assert_eq!(parse(&printed.replace(r"\u{7}", r"\u{0007}")).unwrap(), g, "leading zeros");
        for bad in [r"\u{}", r"\u{110000}", r"\u{d800}", r"\u{1234567}", r"\u{+1}", r"\u{1b", r"\u1b"] {
            let text = format!("step @s(%x: f32[4] input) {{\n  %y = relu(%x) loc(\"a{bad}\":3)\n}}");
            let errors = parse(&text).unwrap_err();
            assert!(format!("{errors:?}").contains("unknown escape in string"), "{bad}: {errors:?}");
        }
    }

    #[test]
    fn round_trips() {
        let steps = [
            "step @empty() {}",
            "step @s(%t: f32[] state) { return %t }",
            "step @s(%t: bf16[2,0,3] state,) { update %t <- %t }",
            "step @x.y_1(%a: i64[3] input, %b: i64[1] input) {\n  %c = add(%a, %b)\n  %d = add(%c, %c)\n  return %d, %c, %d\n}",
            "step @s(%a: f16[2,3,4] input, %b: f16[2,4,5] param) {\n  %c = matmul(%a, %b, transpose_a=false, transpose_b=false) loc(\"we \\\"ird\\\" \\\\ name\\t.py\":4294967295)\n  %d: f16[99] = relu(%c)\n}",
            "step @s(%a: f32[4,3] input, %b: f32[5,4] param) {\n  %c = matmul(%a, %b, transpose_a=true, transpose_b=true)\n  %e: bool[7] = add(%c, %c)\n}",
            "step @s(%a: f32[4] param) {\n  backward %l with sgd(lr=0.1, momentum=0.5)\n  %l = mean(%a, axes=[-1]) loc(\"m.py\":2)\n  return %l\n}",
            "step @s(%a: f32[4] param) {\n  %l: f32[7] = relu(%a)\n  backward %a with adam(eps=1)\n  update %a <- %l\n}",
        ];
        for src in steps {
            round_trip(src);
        }
        assert_eq!(round_trip("step @empty() {}"), "step @empty() {\n}\n");
        assert_eq!(
            round_trip("step @s(%t: f32[] state) { return %t }"),
            "step @s(\n  %t: f32[] state,\n) {\n  return %t\n}\n"
        );
    }

    #[test]
    fn backward_goes_after_the_ops_before_updates_and_return() {
        let src = "step @fwd(%w: f32[4,3] param, %x: f32[8,4] input, %y: i32[8] input, %t: f32[] state) {
  return %loss
  update %t <- %t2
  backward %loss with adam(lr=0.01, beta1=0.9, eps=1e-6)
  %o = matmul(%x, %w)
  %loss = cross_entropy(%o, %y)
  %t2 = add_scalar(%t, value=1)
}";
        let expected = "step @fwd(
  %w: f32[4,3] param,
  %x: f32[8,4] input,
  %y: i32[8] input,
  %t: f32[] state,
) {
  %o: f32[8,3] = matmul(%x, %w)
  %loss: f32[] = cross_entropy(%o, %y)
  %t2: f32[] = add_scalar(%t, value=1.0)
  backward %loss with adam(lr=0.01, eps=1e-6)
  update %t <- %t2
  return %loss
}
";
        assert_eq!(round_trip(src), expected);
        // All defaults: empty parentheses. The sgd momentum sugar prints as sgd_momentum.
        let body = |bw: &str| format!("step @s(%x: f32[2] param) {{\n  %l = sum(%x, axes=[0])\n  {bw}\n}}");
        let line = |printed: String| printed.lines().find(|l| l.contains("backward")).unwrap().trim().to_string();
        assert_eq!(line(round_trip(&body("backward %l with adamw()"))), "backward %l with adamw()");
        assert_eq!(
            line(round_trip(&body("backward %l with sgd(lr=0.5, momentum=0.9)"))),
            "backward %l with sgd_momentum(lr=0.5)"
        );
        assert_eq!(
            line(round_trip(&body("backward %l with sgd(momentum=0, lr=1)"))),
            "backward %l with sgd_momentum(lr=1.0, momentum=0.0)"
        );
        assert_eq!(line(round_trip(&body("backward %l with sgd(lr=1e-3)"))), "backward %l with sgd(lr=0.001)");
        assert_eq!(
            line(round_trip(&body("backward %l with adamw(weight_decay=0.1, beta2=0.99, lr=-inf)"))),
            "backward %l with adamw(lr=-inf, beta2=0.99, weight_decay=0.1)"
        );
    }

    #[test]
    fn graphs_built_by_code_print_and_parse_back() {
        let mut g = crate::ir::graph::Graph::new("built");
        let x = g.add_arg("x", TensorType::new(DType::F32, vec![8, 16]), Role::Input);
        let w = g.add_arg("w", TensorType::new(DType::F32, vec![4, 16]), Role::Param);
        let attrs = Attrs(vec![("transpose_a", Attr::Bool(false)), ("transpose_b", Attr::Bool(true))]);
        let op =
            g.add_op(OpKind::Matmul, vec![x, w], attrs, vec![("y".into(), TensorType::new(DType::F32, vec![8, 4]))]);
        let y = g.ops[op].outputs[0];
        g.returns.push(crate::ir::graph::Return { value: y, span: crate::ir::graph::Span::NONE });
        let text = print(&g);
        assert_eq!(
            text,
            "step @built(\n  %x: f32[8,16] input,\n  %w: f32[4,16] param,\n) {\n  %y: f32[8,4] = matmul(%x, %w, transpose_b=true)\n  return %y\n}\n"
        );
        assert_eq!(parse(&text).unwrap(), g);

        // With a backward statement.
        let loss = g.add_op(
            OpKind::Sum,
            vec![y],
            Attrs(vec![("axes", Attr::Ints(vec![0, 1])), ("keepdim", Attr::Bool(false))]),
            vec![("loss".into(), TensorType::new(DType::F32, vec![]))],
        );
        let loss = g.ops[loss].outputs[0];
        g.backward = Some(crate::ir::graph::Backward {
            loss,
            optimizer: OpKind::Sgd,
            attrs: Attrs(vec![("lr", Attr::Float(0.25))]),
            span: crate::ir::graph::Span::NONE,
        });
        let text = print(&g);
        assert!(
            text.ends_with("  %loss: f32[] = sum(%y, axes=[0, 1])\n  backward %loss with sgd(lr=0.25)\n  return %y\n}\n"),
            "{text}"
        );
        assert_eq!(parse(&text).unwrap(), g);
    }
}
