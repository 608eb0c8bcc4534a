//! Seeded synthetic buffer lists shaped like one training step, for benchmarks and tests
//! of the offset solvers at sizes no real file reaches.
//!
//! [`training_like`]`(n, seed)` returns `n` buffers over a schedule of `n` positions:
//!
//! - 2% persistent (params, optimizer state): live the whole step, 4 KiB to 16 MiB;
//! - 8% activations: written at a forward position `f` in the first half, read last at the
//!   mirrored backward position (`n - 1 - f`, a little earlier at random), so they nest
//!   and all are live at the turn, as in backpropagation;
//! - 5% gradients: written in the second half, live until the optimizer at the end;
//! - 85% temporaries: live 1 to 32 positions (log-uniform) from a uniform start.
//!
//! Sizes are log-uniform (256 B to 4 MiB except the persistent ones) and multiples of 256,
//! as planned sizes are. Thousands of buffers are live at once, so any solver that looks at
//! every pair of overlapping buffers is quadratic here. The same `(n, seed)` always gives
//! the same list (`crate::rng`).

use crate::rng::Rng;
use crate::solve::offsets::Live;

/// Uniform in `0..n` (`n > 0`; the modulo bias is irrelevant here).
fn below(rng: &mut Rng, n: u64) -> u64 {
    rng.next_u64() % n.max(1)
}

/// Log-uniform in `[2^lo, 2^hi)`.
fn log_uniform(rng: &mut Rng, lo: u32, hi: u32) -> u64 {
    let bits = lo + below(rng, u64::from(hi - lo)) as u32;
    (1u64 << bits) + below(rng, 1u64 << bits)
}

/// `n` buffers shaped like a training step (see the module docs).
pub fn training_like(n: usize, seed: u64) -> Vec<Live> {
    let mut rng = Rng::new(seed ^ 0x5EED_0FF5_E75E_ED00);
    let end = n.max(1) - 1;
    let half = n / 2;
    let size = |rng: &mut Rng, lo: u32, hi: u32| log_uniform(rng, lo, hi).div_ceil(256) * 256;
    (0..n)
        .map(|_| {
            let kind = below(&mut rng, 1000);
            if kind < 5 {
                Live { first: 0, last: end, size: size(&mut rng, 12, 24) }
            } else if kind < 55 {
                let f = below(&mut rng, half.max(1) as u64) as usize;
                let mirror = end - f;
                let last = mirror - (below(&mut rng, 64) as usize).min(mirror - f);
                Live { first: f, last, size: size(&mut rng, 8, 22) }
            } else if kind < 85 {
                let f = half + below(&mut rng, (n - half).max(1) as u64) as usize;
                Live { first: f.min(end), last: end, size: size(&mut rng, 8, 22) }
            } else if kind < 165 {
                let f = below(&mut rng, n.max(1) as u64) as usize;
                let len = log_uniform(&mut rng, 6, (usize::BITS - (n / 10).max(128).leading_zeros()).max(7)) as usize;
                Live { first: f, last: (f + len - 1).min(end), size: size(&mut rng, 8, 22) }
            } else {
                let f = below(&mut rng, n.max(1) as u64) as usize;
                let len = log_uniform(&mut rng, 0, 6) as usize;
                Live { first: f, last: (f + len - 1).min(end), size: size(&mut rng, 8, 22) }
            }
        })
        .collect()
}

/// `n` buffers as consecutive rounds of [`training_like`]`(round, ..)` (the last round
/// takes the rest), each shifted in time after the previous one: a long schedule whose
/// concurrency stays that of one `round`-buffer step.
pub fn rounds(n: usize, round: usize, seed: u64) -> Vec<Live> {
    let round = round.max(1);
    let mut out = Vec::with_capacity(n);
    let (mut shift, mut k) = (0usize, 0u64);
    while out.len() < n {
        let m = round.min(n - out.len());
        out.extend(training_like(m, seed.wrapping_add(k)).into_iter().map(|l| Live { first: l.first + shift, last: l.last + shift, size: l.size }));
        shift += m;
        k += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_deterministic_and_well_formed() {
        let a = training_like(1000, 3);
        assert_eq!(a, training_like(1000, 3));
        assert_ne!(a, training_like(1000, 4));
        assert!(a.iter().all(|l| l.first <= l.last && l.last < 1000 && l.size % 256 == 0 && l.size > 0));
        assert!(training_like(0, 1).is_empty());
        assert_eq!(training_like(1, 1).len(), 1);
    }
}
