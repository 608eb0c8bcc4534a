//! Comparing two runs of a step within a tolerance per dtype: what `memplan run --device cuda
//! --check` uses to hold the CUDA executor to the CPU reference.
//!
//! The CPU reference computes every op in `f64` and rounds once when it stores a result; the
//! CUDA executor adds in other orders, partly in `f32` (cuBLAS, softmax, reductions), so
//! floats agree only up to a tolerance: 1e-4 for f32, 2e-2 for f16 and bf16. Integers and
//! bools must agree exactly.
//!
//! A tolerance belongs to the coarsest float a result is computed from, not only to its own
//! dtype: an f32 result that depends on an f16 or bf16 value of the step (autocast's
//! gradients cast back to f32, Adam's moments of them, an f32 loss of half logits) is held
//! to the half tolerance. Two correct executors may round a half value to neighbours one
//! unit in the last place apart (a relative 2^-8 for bf16) wherever its exact value lies
//! near the midpoint between them: cuBLAS sums a product in another order than the
//! reference, so it lands on the other side of the midpoint now and then. Everything
//! computed from that value inherits the relative difference, whatever its own dtype, so
//! demanding 1e-4 of it would fail correct runs (measured on an H100: Adam's first moment
//! of GPT-2's bf16 position-embedding gradient, 6e-3 apart). The half tolerance still
//! catches a wrong kernel, whose errors are of the size of the values.
//!
//! The error of one element is `|got − want| / max(|want|, rms(want))`: relative to the
//! element where it is large, relative to the tensor's root-mean-square where it is small
//! (an element near zero that is the difference of large terms carries the absolute error
//! of those terms; a purely elementwise relative test would fail on it for no reason). A
//! NaN must meet a NaN and an infinity the same infinity; an all-zero reference demands
//! exact zeros.
//!
//! Some results no f32 executor can reproduce: ill-conditioned arithmetic, such as the mean
//! of a normalised tensor or the gradient of a bias softmax cancels (0 in theory, rounding
//! noise in practice), a gradient that is a sum of terms cancelling to a tiny value, or
//! Adam's step on such gradients (whose size depends on the gradient's relative error near
//! `eps`). [`check_step`] tells those apart from errors with a probe: the step computed in
//! f64 with every argument and every op's output nudged by a random [`nudge`] of its dtype
//! (about one rounding of an f32 accumulation, or one ulp of f16/bf16) relative to the
//! larger of the element and its tensor's rms (an element near zero that is a sum carries
//! the rounding of terms of the tensor's size), [`PROBES`] times with different seeds. Where
//! any of them moves the reference beyond an element's tolerance, the element is *rounding
//! noise*: any correct executor may land anywhere in it. Noise is not compared (and is
//! reported); everything else must pass.

use indexmap::IndexMap;

use crate::exec::cpu::{Placement, StepResult, run_step};
use crate::exec::data::{HostTensor, Tensors};
use crate::rng::Rng;
use crate::exec::{Dense, ExecError, kernels};
use crate::index::{IndexVec, ValueId};
use crate::ir::graph::Graph;
use crate::ir::types::DType;
use crate::plan::Plan;

/// The largest error (see the module docs) a tensor of `dtype` may show.
pub fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 1e-4,
        DType::F16 | DType::Bf16 => 2e-2,
        DType::I32 | DType::I64 | DType::Bool => 0.0,
    }
}

/// How one tensor compared.
#[derive(Clone, PartialEq, Debug)]
pub struct TensorCheck {
    /// `return` or `update`.
    pub what: &'static str,
    /// The value's name (for updates, the target's).
    pub name: String,
    pub dtype: DType,
    /// The largest element error (infinite for a type mismatch, a missing tensor or a
    /// NaN/infinity where the reference has none).
    pub error: f64,
    /// The element with that error (row-major index), if any.
    pub worst: Option<usize>,
    /// That element in both runs.
    pub got: f64,
    pub want: f64,
    /// Elements left out as rounding noise of the reference (see the module docs).
    pub noise: usize,
    /// The largest error allowed: its dtype's, or the half dtype's it is computed from.
    pub tolerance: f64,
}

impl TensorCheck {
    pub fn passed(&self) -> bool {
        self.error <= self.tolerance
    }
}

/// The tolerance of a result of `dtype` computed from values as coarse as `from` (module
/// docs): the looser of the two dtypes' tolerances.
pub fn tolerance_from(dtype: DType, from: DType) -> f64 {
    if dtype.is_float() && from.is_float() { tolerance(dtype).max(tolerance(from)) } else { tolerance(dtype) }
}

/// For each returned and updated tensor of `graph` (by `(what, name)` as in
/// [`TensorCheck`]), the coarsest float dtype among the values it is computed from, itself
/// included (f32 when it depends on no f16 or bf16 value).
pub fn coarsest_sources(graph: &Graph) -> IndexMap<(&'static str, String), DType> {
    let coarser = |a: DType, b: DType| if tolerance(b) > tolerance(a) && b.is_float() { b } else { a };
    let mut coarsest: IndexVec<ValueId, DType> =
        graph.values.iter().map(|v| if v.ty.dtype.is_float() { v.ty.dtype } else { DType::F32 }).collect();
    for op in &graph.ops {
        let from = op.inputs.iter().fold(DType::F32, |acc, &v| coarser(acc, coarsest[v]));
        for &out in &op.outputs {
            coarsest[out] = coarser(coarsest[out], from);
        }
    }
    let mut out = IndexMap::new();
    for r in &graph.returns {
        out.insert(("return", graph.values[r.value].name.clone()), coarsest[r.value]);
    }
    for u in &graph.updates {
        out.insert(("update", graph.values[u.target].name.clone()), coarsest[u.value]);
    }
    out
}

/// Every returned and updated tensor of `got` compared with `want` (the reference), each
/// held to its own dtype's tolerance.
pub fn compare_results(got: &StepResult, want: &StepResult) -> Vec<TensorCheck> {
    compare_results_from(got, want, &IndexMap::new())
}

/// [`compare_results`] with each tensor held to the tolerance of the coarsest dtype it is
/// computed from (`sources`, from [`coarsest_sources`]; its own dtype where absent).
pub fn compare_results_from(
    got: &StepResult,
    want: &StepResult,
    sources: &IndexMap<(&'static str, String), DType>,
) -> Vec<TensorCheck> {
    let mut out = Vec::new();
    for (what, got, want) in [("return", &got.returns, &want.returns), ("update", &got.updated, &want.updated)] {
        for (name, w) in want {
            let from = sources.get(&(what, name.clone())).copied().unwrap_or(w.ty.dtype);
            let tolerance = tolerance_from(w.ty.dtype, from);
            let check = match got.get(name) {
                Some(g) => compare_masked(what, name, g, w, None, tolerance),
                None => TensorCheck {
                    what,
                    name: name.clone(),
                    dtype: w.ty.dtype,
                    tolerance,
                    error: f64::INFINITY,
                    worst: None,
                    got: f64::NAN,
                    want: f64::NAN,
                    noise: 0,
                },
            };
            out.push(check);
        }
    }
    out
}

/// One tensor against its reference.
pub fn compare_tensors(what: &'static str, name: &str, got: &HostTensor, want: &HostTensor) -> TensorCheck {
    compare_masked(what, name, got, want, None, tolerance(want.ty.dtype))
}

/// Root-mean-square of the finite values.
fn rms(values: impl Iterator<Item = f64>) -> f64 {
    let (mut sum, mut n) = (0.0, 0usize);
    for x in values.filter(|x| x.is_finite()) {
        sum += x * x;
        n += 1;
    }
    if n == 0 { 0.0 } else { (sum / n as f64).sqrt() }
}

/// One tensor against its reference, leaving out the elements any of `probes` (when
/// given) moves beyond their tolerance: rounding noise.
fn compare_masked(
    what: &'static str,
    name: &str,
    got: &HostTensor,
    want: &HostTensor,
    probes: Option<&[&[f64]]>,
    tolerance: f64,
) -> TensorCheck {
    let mut check = TensorCheck {
        what,
        name: name.to_string(),
        dtype: want.ty.dtype,
        tolerance,
        error: 0.0,
        worst: None,
        got: f64::NAN,
        want: f64::NAN,
        noise: 0,
    };
    if got.ty != want.ty || got.bytes.len() != want.bytes.len() {
        check.error = f64::INFINITY;
        return check;
    }
    let (g, w) = (got.to_f64(), want.to_f64());
    let rms = rms(w.iter().copied());
    for (i, (&a, &b)) in g.iter().zip(&w).enumerate() {
        let moved = |p: &&[f64]| p.get(i).is_some_and(|&x| element_error(x, b, rms) > tolerance);
        if probes.is_some_and(|probes| probes.iter().any(moved)) {
            check.noise += 1;
            continue;
        }
        let error = element_error(a, b, rms);
        if error > check.error || check.worst.is_none() {
            check.error = error.max(check.error);
            check.worst = Some(i);
            check.got = a;
            check.want = b;
        }
    }
    check
}

/// The error of `got` against `want` in a tensor whose reference has root-mean-square `rms`.
fn element_error(got: f64, want: f64, rms: f64) -> f64 {
    if want.is_nan() || got.is_nan() {
        return if want.is_nan() && got.is_nan() { 0.0 } else { f64::INFINITY };
    }
    if want.is_infinite() || got.is_infinite() {
        return if want == got { 0.0 } else { f64::INFINITY };
    }
    let diff = (got - want).abs();
    if diff == 0.0 {
        return 0.0;
    }
    let scale = want.abs().max(rms);
    if scale == 0.0 { f64::INFINITY } else { diff / scale }
}

/// One line per tensor outside its tolerance (empty when all passed).
pub fn failures(checks: &[TensorCheck]) -> Vec<String> {
    checks
        .iter()
        .filter(|c| !c.passed())
        .map(|c| match c.worst {
            Some(i) => format!(
                "{} %{} ({}): error {:.3e} > {:.0e} at element {i}: got {}, want {}",
                c.what,
                c.name,
                c.dtype,
                c.error,
                c.tolerance,
                c.got,
                c.want
            ),
            None => format!("{} %{} ({}): missing or of another type", c.what, c.name, c.dtype),
        })
        .collect()
}

/// One step of another executor (`got`, from `args`) held to the CPU reference.
#[derive(Clone, PartialEq, Debug)]
pub struct StepCheck {
    /// Every returned and updated tensor against the reference (rounding noise left out
    /// where something was outside its tolerance).
    pub checks: Vec<TensorCheck>,
    /// The tensors with elements left out as rounding noise, one line each.
    pub noise: Vec<String>,
    /// The tensors outside their tolerance, one line each: the check fails.
    pub failures: Vec<String>,
}

/// Runs the CPU reference on `args` (planned, as the other executor ran) and compares `got`
/// with it; where a tensor is outside its tolerance, the probe tells rounding noise from
/// errors (module docs).
pub fn check_step(graph: &Graph, plan: &Plan, args: &Tensors, got: &StepResult) -> Result<StepCheck, ExecError> {
    let want = run_step(graph, Placement::Planned(plan), args)?;
    let mut checks = compare_results_from(got, &want, &coarsest_sources(graph));
    if checks.iter().any(|c| !c.passed()) {
        let probes = (0..PROBES).map(|i| nudged_results(graph, args, 0x5EED + i)).collect::<Result<Vec<_>, _>>()?;
        for check in checks.iter_mut().filter(|c| !c.passed()) {
            let (g, w) =
                if check.what == "return" { (&got.returns, &want.returns) } else { (&got.updated, &want.updated) };
            let key = (check.what, check.name.clone());
            let p: Option<Vec<&[f64]>> = probes.iter().map(|probe| probe.get(&key).map(Vec::as_slice)).collect();
            if let (Some(g), Some(w), Some(p)) = (g.get(&check.name), w.get(&check.name), p) {
                *check = compare_masked(check.what, &check.name, g, w, Some(&p), check.tolerance);
            }
        }
    }
    let noise = checks
        .iter()
        .filter(|c| c.noise > 0)
        .map(|c| format!("{} %{}: {} element(s) are rounding noise (not compared)", c.what, c.name, c.noise))
        .collect();
    Ok(StepCheck { failures: failures(&checks), noise, checks })
}

/// How many nudged runs [`check_step`]'s probe makes (each with its own seed): an element
/// is rounding noise when any of them moves it beyond its tolerance. One is a single random
/// sample: an element whose sign hangs on the rounding (Adam's first step moves every
/// element by ±lr, the sign of its gradient, so a gradient element near zero decides a
/// whole 2·lr) may stay put in it by chance; measured on an H100, one such element of
/// GPT-2's bf16 position embedding (its gradient 0.5% of the tensor's rms) failed a correct
/// run. Each probe moves a near-zero element's sign with a fair chance, so several rarely
/// all miss.
pub const PROBES: u64 = 4;

/// The relative nudge of [`check_step`]'s probe for values of `dtype`: about one rounding
/// error of an f32 sum of a few thousand terms, or one unit in the last place of f16/bf16.
pub fn nudge(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 1e-6,
        DType::F16 => 1e-3,
        DType::Bf16 => 8e-3,
        DType::I32 | DType::I64 | DType::Bool => 0.0,
    }
}

/// The step computed in f64 in program order with every float argument and op output
/// scaled by 1 + r·nudge (r uniform in [-1, 1), seeded, per element); the returned and
/// updated values by `(what, name)` as in [`TensorCheck`].
fn nudged_results(
    graph: &Graph,
    args: &Tensors,
    seed: u64,
) -> Result<IndexMap<(&'static str, String), Vec<f64>>, ExecError> {
    let mut rng = Rng::new(seed);
    let mut shake = |t: &mut Dense, dtype: DType| {
        // An element is moved by a fraction of the larger of itself and the tensor's
        // root-mean-square: a computed element near zero carries the rounding of terms of
        // the tensor's size, not of its own (the error measure of `element_error` alike).
        // An exact zero stays: it is structural (a ReLU's cut, a masked or padded entry),
        // and every executor computes it exactly.
        let scale = rms(t.data.iter().copied());
        for x in &mut t.data {
            let r = 2.0 * rng.uniform() - 1.0;
            if *x != 0.0 {
                *x += nudge(dtype) * r * x.abs().max(scale);
            }
        }
    };
    let mut values: IndexVec<ValueId, Option<Dense>> = IndexVec::from_elem(None, graph.values.len());
    for &arg in &graph.args {
        let value = &graph.values[arg];
        let given = args
            .get(&value.name)
            .ok_or_else(|| ExecError::MissingArgument { name: value.name.clone(), ty: value.ty.to_string() })?;
        let mut dense = Dense::new(value.ty.dims().iter().map(|&d| d as usize).collect(), given.to_f64());
        shake(&mut dense, value.ty.dtype);
        values[arg] = Some(dense);
    }
    for op in &graph.ops {
        let inputs: Vec<Dense> =
            op.inputs.iter().map(|&v| values[v].clone().expect("a verified graph defines before use")).collect();
        let types: Vec<_> = op.outputs.iter().map(|&v| graph.values[v].ty.clone()).collect();
        let results = kernels::eval(op.kind, &op.attrs, &inputs, &types)?;
        for ((&out, mut result), ty) in op.outputs.iter().zip(results).zip(&types) {
            if op.kind.def().view_of().is_none() {
                shake(&mut result, ty.dtype);
            }
            values[out] = Some(result);
        }
    }
    let data = |v: ValueId| values[v].as_ref().map(|d| d.data.clone()).unwrap_or_default();
    let mut out = IndexMap::new();
    for r in &graph.returns {
        out.insert(("return", graph.values[r.value].name.clone()), data(r.value));
    }
    for u in &graph.updates {
        out.insert(("update", graph.values[u.target].name.clone()), data(u.value));
    }
    Ok(out)
}

/// The largest error over the tensors of each float dtype, for a one-line summary:
/// `(dtype, largest error)` in f32, f16, bf16 order, for the dtypes present.
pub fn worst_by_dtype(checks: &[TensorCheck]) -> Vec<(DType, f64)> {
    [DType::F32, DType::F16, DType::Bf16]
        .into_iter()
        .filter_map(|d| {
            let errors = checks.iter().filter(|c| c.dtype == d).map(|c| c.error);
            errors.fold(None, |acc: Option<f64>, e| Some(acc.map_or(e, |a| a.max(e)))).map(|e| (d, e))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::data::Tensors;
    use crate::ir::types::TensorType;

    fn tensor(dtype: DType, values: &[f64]) -> HostTensor {
        HostTensor::from_f64(TensorType::new(dtype, vec![values.len() as u64]), values)
    }

    impl HostTensor {
        /// A one-element tensor as a scalar.
        fn reshaped_scalar(self) -> HostTensor {
            HostTensor { ty: TensorType::new(self.ty.dtype, vec![]), bytes: self.bytes }
        }
    }

    fn check(dtype: DType, got: &[f64], want: &[f64]) -> TensorCheck {
        compare_tensors("return", "x", &tensor(dtype, got), &tensor(dtype, want))
    }

    #[test]
    fn tolerances_by_dtype() {
        assert_eq!(tolerance(DType::F32), 1e-4);
        assert_eq!(tolerance(DType::Bf16), 2e-2);
        assert_eq!(tolerance(DType::F16), 2e-2);
        assert_eq!(tolerance(DType::I64), 0.0);
    }

    #[test]
    fn f32_within_and_beyond_1e4() {
        // 1.00005 vs 1: error 5e-5 passes; 1.0002 fails.
        assert!(check(DType::F32, &[1.00005, 2.0], &[1.0, 2.0]).passed());
        let bad = check(DType::F32, &[1.0, 2.0004], &[1.0, 2.0]);
        assert!(!bad.passed());
        assert_eq!(bad.worst, Some(1));
        assert!((bad.error - 2e-4).abs() < 1e-6, "{}", bad.error);
        assert_eq!(failures(std::slice::from_ref(&bad)).len(), 1);
        assert!(failures(&[bad])[0].contains("element 1"));
    }

    #[test]
    fn small_elements_are_judged_against_the_tensors_scale() {
        // want = [1000, 1e-3]: rms ≈ 707; an absolute error of 0.01 on the tiny element is
        // 1.4e-5 of the scale: passes, although it is 10x the element itself.
        assert!(check(DType::F32, &[1000.0, 0.011], &[1000.0, 0.001]).passed());
        // Relative to the scale it still has to be small: 1.0 off is 1.4e-3.
        assert!(!check(DType::F32, &[1000.0, 1.001], &[1000.0, 0.001]).passed());
    }

    #[test]
    fn half_precision_allows_2e2() {
        assert!(check(DType::Bf16, &[1.0, 1.0078125], &[1.0, 1.0]).passed());
        assert!(!check(DType::Bf16, &[1.0, 1.0625], &[1.0, 1.0]).passed());
        assert!(check(DType::F16, &[0.5, 0.50390625], &[0.5, 0.5]).passed());
    }

    #[test]
    fn special_values_must_match() {
        let nan = f64::NAN;
        let inf = f64::INFINITY;
        assert!(check(DType::F32, &[nan, 1.0], &[nan, 1.0]).passed());
        assert!(!check(DType::F32, &[nan, 1.0], &[0.0, 1.0]).passed());
        assert!(!check(DType::F32, &[0.0, 1.0], &[nan, 1.0]).passed());
        assert!(check(DType::F32, &[-inf], &[-inf]).passed());
        assert!(!check(DType::F32, &[inf], &[-inf]).passed());
        assert!(!check(DType::F32, &[1e30], &[inf]).passed());
        // An all-zero reference demands zeros.
        assert!(check(DType::F32, &[0.0, 0.0], &[0.0, 0.0]).passed());
        assert!(!check(DType::F32, &[1e-30, 0.0], &[0.0, 0.0]).passed());
    }

    #[test]
    fn integers_must_be_exact() {
        assert!(check(DType::I32, &[3.0, -4.0], &[3.0, -4.0]).passed());
        assert!(!check(DType::I32, &[3.0, -5.0], &[3.0, -4.0]).passed());
        assert!(!check(DType::Bool, &[1.0], &[0.0]).passed());
    }

    #[test]
    fn results_compare_by_name_and_report_missing_tensors() {
        let mut want = StepResult { returns: Tensors::new(), updated: Tensors::new() };
        want.returns.insert("loss".into(), tensor(DType::F32, &[2.5]));
        want.updated.insert("w".into(), tensor(DType::F32, &[1.0, 2.0]));
        let mut got = want.clone();
        got.returns.insert("loss".into(), tensor(DType::F32, &[2.50001]));
        let checks = compare_results(&got, &want);
        assert_eq!(checks.len(), 2);
        assert!(checks.iter().all(TensorCheck::passed), "{checks:?}");
        assert_eq!(worst_by_dtype(&checks).len(), 1);
        got.updated.shift_remove("w");
        let checks = compare_results(&got, &want);
        assert_eq!(failures(&checks), ["update %w (f32): missing or of another type"]);
        // Another type is a failure too.
        got.updated.insert("w".into(), tensor(DType::F16, &[1.0, 2.0]));
        assert!(!compare_results(&got, &want)[1].passed());
    }

    #[test]
    fn f32_results_of_half_values_get_the_half_tolerance() {
        // %l is f32 but computed from bf16 logits; %w_new's update reads a gradient that
        // comes back through the bf16 cast; %c is computed from f32 values only.
        let text = "step @s(%x: f32[4,8] input, %w: f32[8,3] param, %y: i64[4] input, %c0: f32[3] param) {\n\
                    %wb: bf16[8,3] = cast(%w, to=bf16)\n  %xb: bf16[4,8] = cast(%x, to=bf16)\n\
                    %z: bf16[4,3] = matmul(%xb, %wb)\n  %l: f32[] = cross_entropy(%z, %y, f32_loss=true)\n\
                    %c = mul(%c0, %c0)\n  backward %l with sgd(lr=0.1)\n  return %l, %c\n}\n";
        let graph = crate::parse(text).unwrap();
        let graph = crate::autodiff::expand(&graph).unwrap();
        let sources = coarsest_sources(&graph);
        assert_eq!(sources[&("return", "l".to_string())], DType::Bf16);
        assert_eq!(sources[&("return", "c".to_string())], DType::F32);
        assert_eq!(sources[&("update", "w".to_string())], DType::Bf16);
        assert_eq!(tolerance_from(DType::F32, DType::Bf16), 2e-2);
        assert_eq!(tolerance_from(DType::F32, DType::F32), 1e-4);
        assert_eq!(tolerance_from(DType::I64, DType::Bf16), 0.0);
        // A 5e-3 difference passes for %l (from bf16) and fails for %c (f32 only).
        let mut want = StepResult { returns: Tensors::new(), updated: Tensors::new() };
        want.returns.insert("l".into(), tensor(DType::F32, &[2.0]));
        want.returns.insert("c".into(), tensor(DType::F32, &[2.0]));
        let mut got = want.clone();
        got.returns.insert("l".into(), tensor(DType::F32, &[2.01]));
        got.returns.insert("c".into(), tensor(DType::F32, &[2.01]));
        let checks = compare_results_from(&got, &want, &sources);
        assert!(checks[0].passed(), "{checks:?}");
        assert!(!checks[1].passed(), "{checks:?}");
        assert_eq!(failures(&checks), ["return %c (f32): error 5.000e-3 > 1e-4 at element 0: got 2.009999990463257, want 2"]);
    }

    #[test]
    fn an_adam_sign_decided_by_rounding_is_noise_and_a_wrong_sign_elsewhere_fails() {
        // Measured on an H100: the GPU's first AdamW step of this bf16 export moved
        // wpe[42] by +lr where the reference moves it by -lr (every element moves by ±lr
        // in a first step, the sign of its gradient; this one's gradient is 0.5% of the
        // tensor's rms, so its sign hangs on bf16 roundings). That is rounding noise; the
        // same flip on the element with the largest gradient is an error.
        let graph = crate::parse(include_str!("../../ir/torch/gpt2_small_bf16.step")).unwrap();
        let graph = crate::autodiff::expand(&graph).unwrap();
        let plan = crate::plan(&graph, &crate::PlanOptions::default()).unwrap();
        let args = crate::exec::data::init_args(&graph, 0).unwrap();
        let want = run_step(&graph, Placement::Planned(&plan), &args).unwrap();
        let flipped = |i: usize| {
            let mut got = want.clone();
            let w = &got.updated["transformer.wpe.weight"];
            let mut x = w.to_f64();
            let m = got.updated["transformer.wpe.weight.m"].to_f64();
            x[i] += 2e-3 * m[i].signum();
            let ty = w.ty.clone();
            got.updated.insert("transformer.wpe.weight".into(), HostTensor::from_f64(ty, &x));
            check_step(&graph, &plan, &args, &got).unwrap()
        };
        let near_zero = flipped(42);
        assert!(near_zero.failures.is_empty(), "{near_zero:?}");
        assert_eq!(near_zero.noise.len(), 1, "{:?}", near_zero.noise);
        let m = want.updated["transformer.wpe.weight.m"].to_f64();
        let largest = (0..m.len()).max_by(|&a, &b| m[a].abs().total_cmp(&m[b].abs())).unwrap();
        let wrong = flipped(largest);
        assert_eq!(wrong.failures.len(), 1, "{wrong:?}");
        assert!(wrong.failures[0].starts_with("update %transformer.wpe.weight (f32)"), "{wrong:?}");
    }

    #[test]
    fn check_step_tells_rounding_noise_from_errors() {
        // mean(layer_norm(x)) is 0 in theory and rounding noise in practice: not compared.
        // The layer_norm output itself is well conditioned: an error there fails.
        let text = "step @s(%x: f32[4,8] input, %g: f32[8] param, %b: f32[8] param) {\n\
                    %y = layer_norm(%x, %g, %b)\n  %m: f32[] = mean(%y, axes=[0, 1])\n  return %m, %y\n}\n";
        let graph = crate::parse(text).unwrap();
        let plan = crate::plan(&graph, &crate::PlanOptions::default()).unwrap();
        let args = crate::exec::data::init_args(&graph, 1).unwrap();
        let reference = run_step(&graph, Placement::Planned(&plan), &args).unwrap();
        let mut got = reference.clone();
        let close = check_step(&graph, &plan, &args, &got).unwrap();
        assert!(close.failures.is_empty() && close.noise.is_empty(), "{close:?}");
        got.returns.insert("m".into(), tensor(DType::F32, &[3e-8]).reshaped_scalar());
        let noisy = check_step(&graph, &plan, &args, &got).unwrap();
        assert!(noisy.failures.is_empty(), "{noisy:?}");
        assert_eq!(noisy.noise.len(), 1, "{noisy:?}");
        assert_eq!(noisy.noise[0], "return %m: 1 element(s) are rounding noise (not compared)");
        let mut y = got.returns["y"].to_f64();
        y[5] += 0.01;
        got.returns.insert("y".into(), HostTensor::from_f64(got.returns["y"].ty.clone(), &y));
        let wrong = check_step(&graph, &plan, &args, &got).unwrap();
        assert_eq!(wrong.failures.len(), 1, "{wrong:?}");
        assert!(wrong.failures[0].starts_with("return %y (f32)"), "{wrong:?}");
    }
}
