//! Comparing two runs of a step within a tolerance per dtype: what `memplan run --device cuda
//! --check` uses to hold the CUDA executor to the CPU reference.
//!
//! The CPU reference computes every op in `f64` and rounds once when it stores a result; the
//! CUDA kernels accumulate in `f32` (cuBLAS and reductions add in other orders), so floats
//! agree only up to a tolerance: 1e-4 for f32, 2e-2 for f16 and bf16. Integers and bools
//! must agree exactly.
//!
//! The error of one element is `|got − want| / max(|want|, rms(want))`: relative to the
//! element where it is large, relative to the tensor's root-mean-square where it is small
//! (an element near zero that is the difference of large terms carries the absolute error
//! of those terms; a purely elementwise relative test would fail on it for no reason). A
//! NaN must meet a NaN and an infinity the same infinity; an all-zero reference demands
//! exact zeros.

use crate::exec::cpu::StepResult;
use crate::exec::data::HostTensor;
use crate::ir::types::DType;

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
}

impl TensorCheck {
    pub fn passed(&self) -> bool {
        self.error <= tolerance(self.dtype)
    }
}

/// Every returned and updated tensor of `got` compared with `want` (the reference).
pub fn compare_results(got: &StepResult, want: &StepResult) -> Vec<TensorCheck> {
    let mut out = Vec::new();
    for (what, got, want) in [("return", &got.returns, &want.returns), ("update", &got.updated, &want.updated)] {
        for (name, w) in want {
            let check = match got.get(name) {
                Some(g) => compare_tensors(what, name, g, w),
                None => TensorCheck {
                    what,
                    name: name.clone(),
                    dtype: w.ty.dtype,
                    error: f64::INFINITY,
                    worst: None,
                    got: f64::NAN,
                    want: f64::NAN,
                },
            };
            out.push(check);
        }
    }
    out
}

/// One tensor against its reference.
pub fn compare_tensors(what: &'static str, name: &str, got: &HostTensor, want: &HostTensor) -> TensorCheck {
    let mut check = TensorCheck {
        what,
        name: name.to_string(),
        dtype: want.ty.dtype,
        error: 0.0,
        worst: None,
        got: f64::NAN,
        want: f64::NAN,
    };
    if got.ty != want.ty || got.bytes.len() != want.bytes.len() {
        check.error = f64::INFINITY;
        return check;
    }
    let (g, w) = (got.to_f64(), want.to_f64());
    let finite: Vec<f64> = w.iter().copied().filter(|x| x.is_finite()).collect();
    let rms = if finite.is_empty() {
        0.0
    } else {
        (finite.iter().map(|x| x * x).sum::<f64>() / finite.len() as f64).sqrt()
    };
    for (i, (&a, &b)) in g.iter().zip(&w).enumerate() {
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
                tolerance(c.dtype),
                c.got,
                c.want
            ),
            None => format!("{} %{} ({}): missing or of another type", c.what, c.name, c.dtype),
        })
        .collect()
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
        assert_eq!(failures(&[bad.clone()]).len(), 1);
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
}
