//! Generators for tests and benchmarks (feature `testing`, which the crate's own tests,
//! benches and examples turn on through its dev-dependency on itself; unit tests see it
//! too). Not part of the library users build.
//!
//! Every generator is seeded (`crate::rng`): the same seed gives the same output on every
//! machine, so a failing case is reproduced by its seed.
//! - [`random_step`]: small valid training steps, for property tests of the whole pipeline;
//! - [`synthetic`]: buffer lists shaped like a training step, at sizes no real file reaches;
//! - [`scale`]: step texts, a Checkmate graph and buffer lists for the scale benchmarks;
//! - [`rand_dense`]: dense tensors of numbers in [-1, 1), for kernel and gradient checks;
//! - [`fuzz`]: a seeded mutation fuzzer over every input format, with the checker and the
//!   executors as oracles (tests/fuzz.rs runs a slice, examples/fuzz.rs runs for minutes).

pub mod fuzz;
pub mod random_step;
pub mod scale;
pub mod synthetic;

use crate::exec::Dense;
use crate::rng::Rng;

/// A tensor of `shape` filled with numbers uniform in [-1, 1), different per seed.
pub fn rand_dense(shape: &[usize], seed: u64) -> Dense {
    let mut rng = Rng::new(seed);
    let data = (0..shape.iter().product()).map(|_| 2.0 * rng.uniform() - 1.0).collect();
    Dense::new(shape.to_vec(), data)
}
