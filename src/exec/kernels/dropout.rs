//! dropout and dropout_backward: a mask drawn from a counter-based hash of (seed, stream,
//! element index), computed again wherever it is needed instead of being stored.
//!
//! Element `i` (row-major over the output) is kept iff `u(seed, stream, i) >= p`, where
//! [`dropout_uniform`] is three steps of SplitMix64 (Steele, Lea and Flood; the generator of
//! `crate::rng`): with `sm(s, n) = mix(s + (n + 1)·γ)`, SplitMix64's output `n` from state
//! `s` (γ = 0x9E3779B97F4A7C15, `mix` its finalizer, all arithmetic mod 2^64),
//!
//! ```text
//! key = sm(sm(seed, 0), stream)      seed and stream as u64 (two's complement)
//! u   = (sm(key, i) >> 11) / 2^53    the top 53 bits: a multiple of 2^-53 in [0, 1)
//! ```
//!
//! Integer arithmetic only, and `u` converts to an f64 exactly, so every executor computes
//! the same mask bit for bit: kernels/elementwise.cu has the same three functions, and
//! tests/cuda_emulated.rs holds the CUDA program to this file's masks. Kept elements are
//! `x_i / (1 − p)` in f64. With `p = 0` every `u` passes and `x_i / 1` is `x_i`: the identity.
//!
//! `random` draws from the same hash: uniform, element i is `(sm(key, i) >> (64 − b)) / 2^b`
//! with b the dtype's significand bits (24 for f32, 11 for f16, 8 for bf16), so every value
//! is exact in the dtype and below 1 (PyTorch's `rand` is so too); normal, Box-Muller of the
//! 53-bit uniforms `u(2i)` and `u(2i + 1)`: `√(−2 ln(1 − u(2i))) · cos(2π · u(2i + 1))` in f64,
//! rounded to the dtype where it is stored.
//!
//! Nothing is saved between the forward and the backward: `dropout_backward` draws the same
//! mask from the same seed value and attributes, and so does a recomputed `dropout`. The
//! seed arrives as an `f64` like every number here, exact for |seed| <= 2^53.

use crate::exec::Dense;
use crate::ir::types::DType;

/// SplitMix64's increment, the golden ratio as a 64-bit fraction.
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's output `n` (from 0) of the generator started at `state`.
fn splitmix64(state: u64, n: u64) -> u64 {
    let mut z = state.wrapping_add(n.wrapping_add(1).wrapping_mul(GAMMA));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The uniform number in [0, 1) that decides element `i` of a dropout drawing from
/// `stream` with `seed` (see the module docs): kept iff it is `>= p`.
pub fn dropout_uniform(seed: i64, stream: i64, i: u64) -> f64 {
    let key = splitmix64(splitmix64(seed as u64, 0), stream as u64);
    (splitmix64(key, i) >> 11) as f64 / (1u64 << 53) as f64
}

/// `random`: a new `dtype[shape]` tensor of draws from (seed, stream), uniform in [0, 1) or
/// standard normal (see the module docs).
pub(super) fn random(shape: &[usize], dtype: DType, seed: &Dense, stream: i64, normal: bool) -> Dense {
    let key = splitmix64(splitmix64(seed.data[0] as i64 as u64, 0), stream as u64);
    let u53 = |n: u64| (splitmix64(key, n) >> 11) as f64 / (1u64 << 53) as f64;
    let bits = dtype.significand_bits().expect("random's type rule takes float dtypes");
    let numel: usize = shape.iter().product();
    let data = (0..numel as u64).map(|i| {
        if normal {
            (-2.0 * (1.0 - u53(2 * i)).ln()).sqrt() * (std::f64::consts::TAU * u53(2 * i + 1)).cos()
        } else {
            (splitmix64(key, i) >> (64 - bits)) as f64 / (1u64 << bits) as f64
        }
    });
    Dense::new(shape.to_vec(), data.collect())
}

/// `x_i / (1 − p)` where element `i` is kept, else 0: dropout of `x`, and dropout_backward of
/// `dy` (the same mask). `seed` is the `i64[]` seed tensor.
pub(super) fn dropout(x: &Dense, seed: &Dense, p: f64, stream: i64) -> Dense {
    let seed = seed.data[0] as i64;
    let keep = 1.0 - p;
    let data = x.data.iter().enumerate().map(|(i, &v)| if dropout_uniform(seed, stream, i as u64) >= p { v / keep } else { 0.0 });
    Dense::new(x.shape.clone(), data.collect())
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use super::*;
    use crate::exec::kernels::OpKind;
    use crate::ir::ops::Attr;
    use crate::ir::types::DType;
    use crate::rng::Rng;

    fn attrs(p: f64, stream: i64) -> [(&'static str, Attr); 2] {
        [("p", Attr::Float(p)), ("stream", Attr::Int(stream))]
    }

    fn seed(value: i64) -> Dense {
        t(&[], &[value as f64])
    }

    #[test]
    fn the_hash_is_splitmix64() {
        // SplitMix64's published first outputs for seed 0, as `rng` gives them.
        assert_eq!(splitmix64(0, 0), 0xE220_A839_7B1D_CDAF);
        assert_eq!(splitmix64(0, 1), 0x6E78_9E6A_A1B9_65F4);
        let mut rng = Rng::new(0x1234_5678_9ABC_DEF0);
        for n in 0..5 {
            assert_eq!(splitmix64(0x1234_5678_9ABC_DEF0, n), rng.next_u64(), "output {n}");
        }
    }

    /// Pinned values, computed by an independent implementation (Python integers): the
    /// CUDA program's copy of the hash must give exactly these (its masks are compared with
    /// this file's in tests/cuda_emulated.rs), and they must never change (a seed means the
    /// same masks in every version).
    #[test]
    fn pinned_uniform_numbers() {
        let cases: [(i64, i64, u64, f64); 6] = [
            (0, 0, 0, 0.13870941014555427),
            (0, 0, 1, 0.9711020828012883),
            (0, 1, 0, 0.18383979100743952),
            (1, 0, 0, 0.6935121390102292),
            (-1, 7, 123_456_789, 0.1660157633686311),
            (1 << 53, 1 << 40, u64::MAX, 0.10422217690778679),
        ];
        for (seed, stream, i, u) in cases {
            assert_eq!(dropout_uniform(seed, stream, i), u, "u({seed}, {stream}, {i})");
        }
    }

    #[test]
    fn kept_fraction_is_one_minus_p() {
        let n = 100_000;
        for p in [0.1, 0.5] {
            for (seed, stream) in [(0, 0), (42, 3), (-7, 1 << 20)] {
                let kept = (0..n).filter(|&i| dropout_uniform(seed, stream, i) >= p).count();
                let fraction = kept as f64 / n as f64;
                assert!((fraction - (1.0 - p)).abs() < 0.01, "p {p}, seed {seed}, stream {stream}: kept {fraction}");
            }
        }
    }

    #[test]
    fn streams_and_seeds_draw_different_masks() {
        let mask = |seed: i64, stream: i64| -> Vec<bool> { (0..10_000).map(|i| dropout_uniform(seed, stream, i) >= 0.5).collect() };
        let agree = |a: &[bool], b: &[bool]| a.iter().zip(b).filter(|(x, y)| x == y).count() as f64 / a.len() as f64;
        let base = mask(5, 0);
        assert_eq!(base, mask(5, 0), "the same (seed, stream) draws the same mask");
        // Independent masks of p = 0.5 agree on about half the elements.
        for (seed, stream) in [(5, 1), (6, 0), (4, 0), (5, 2), (-5, 0)] {
            let a = agree(&base, &mask(seed, stream));
            assert!((a - 0.5).abs() < 0.03, "seed {seed}, stream {stream} agrees with (5, 0) on {a}");
        }
        // Neighbouring elements are not correlated either.
        let shifted = agree(&base[1..], &base[..base.len() - 1]);
        assert!((shifted - 0.5).abs() < 0.03, "{shifted}");
    }

    fn random_of(dtype: DType, stream: i64, normal: bool, n: usize) -> Dense {
        let given = [
            ("shape", Attr::Ints(vec![n as i64])),
            ("dtype", Attr::DType(dtype)),
            ("stream", Attr::Int(stream)),
            ("normal", Attr::Bool(normal)),
        ];
        run(OpKind::Random, &given, &[seed(11)]).remove(0)
    }

    #[test]
    fn random_uniform_draws_are_exact_in_their_dtype_and_below_one() {
        let key = splitmix64(splitmix64(11, 0), 4);
        for (dtype, bits) in [(DType::F32, 24), (DType::F16, 11), (DType::Bf16, 8)] {
            let u = random_of(dtype, 4, false, 20_000);
            let scale = (1u64 << bits) as f64;
            for (i, &x) in u.data.iter().enumerate() {
                // The top `bits` bits of the element's hash, a multiple of 2^-bits in [0, 1).
                assert_eq!(x, (splitmix64(key, i as u64) >> (64 - bits)) as f64 / scale, "{dtype} element {i}");
                assert!((0.0..1.0).contains(&x) && (x * scale).fract() == 0.0, "{dtype}: {x}");
            }
            let mean = u.data.iter().sum::<f64>() / u.data.len() as f64;
            assert!((mean - 0.5).abs() < 0.01, "{dtype}: mean {mean}");
        }
        // Another stream, other numbers; the same stream, the same ones.
        assert_ne!(random_of(DType::F32, 5, false, 100), random_of(DType::F32, 4, false, 100));
        assert_eq!(random_of(DType::F32, 4, false, 100), random_of(DType::F32, 4, false, 100));
    }

    #[test]
    fn random_normal_draws_are_box_muller_of_two_uniforms() {
        let z = random_of(DType::F32, 2, true, 40_000);
        let n = z.data.len() as f64;
        let mean = z.data.iter().sum::<f64>() / n;
        let variance = z.data.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
        assert!(mean.abs() < 0.02 && (variance - 1.0).abs() < 0.03, "mean {mean}, variance {variance}");
        let beyond = |t: f64| z.data.iter().filter(|x| x.abs() > t).count() as f64 / n;
        // P(|Z| > 1) = 0.3173, P(|Z| > 2) = 0.0455 for a standard normal.
        assert!((beyond(1.0) - 0.3173).abs() < 0.01 && (beyond(2.0) - 0.0455).abs() < 0.005);
        let (u1, u2) = (dropout_uniform(11, 2, 14), dropout_uniform(11, 2, 15));
        let seventh = (-2.0 * (1.0 - u1).ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        assert_eq!(z.data[7], seventh);
    }

    #[test]
    fn dropout_keeps_scales_and_zeroes() {
        let x = rand(&[40, 25], 3);
        let y = run(OpKind::Dropout, &attrs(0.3, 2), &[x.clone(), seed(99)]).remove(0);
        assert_eq!(y.shape, x.shape);
        for (i, (&yi, &xi)) in y.data.iter().zip(&x.data).enumerate() {
            let kept = dropout_uniform(99, 2, i as u64) >= 0.3;
            assert_eq!(yi, if kept { xi / 0.7 } else { 0.0 }, "element {i}");
        }
        let zeros = y.data.iter().filter(|&&v| v == 0.0).count();
        assert!((200..400).contains(&zeros), "{zeros} of 1000 dropped at p = 0.3");
        // The backward draws the same mask and scales the same way.
        let dx = run(OpKind::DropoutBackward, &attrs(0.3, 2), &[x.clone(), seed(99)]).remove(0);
        assert_eq!(dx, y);
        // Another stream, another mask.
        let other = run(OpKind::Dropout, &attrs(0.3, 3), &[x.clone(), seed(99)]).remove(0);
        assert_ne!(other, y);
    }

    #[test]
    fn p_zero_is_the_identity() {
        let mut x = rand(&[7, 9], 4);
        x.data[0] = -0.0;
        x.data[1] = f64::INFINITY;
        x.data[2] = 1e-300;
        let y = run(OpKind::Dropout, &attrs(0.0, 0), &[x.clone(), seed(-3)]).remove(0);
        assert!(y.data.iter().zip(&x.data).all(|(a, b)| a.to_bits() == b.to_bits()), "{:?}", y.data);
        let scalar = run(OpKind::DropoutBackward, &attrs(0.0, 5), &[t(&[], &[2.5]), seed(1)]).remove(0);
        assert_eq!(scalar.data, [2.5]);
    }
}
