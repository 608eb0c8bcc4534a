//! Seeded random problems for the tests of the remat core (test builds only).
//!
//! Shapes like a training step: a forward part (recomputable nodes, each writing one value
//! read by a few later nodes, some of them in the backward part) and a backward part that
//! reads forward values far away; plus, now and then, a node writing two values or none,
//! a value without a writer, a value that must survive, a node that cannot be recomputed,
//! a node that may write a value over one it reads (a share).

use super::{Node, NodeInfo, Problem, Share, DagValue};
use crate::rng::Rng;

/// A random problem of `n ≥ 2` nodes.
pub fn random_problem(rng: &mut Rng, n: usize) -> Problem {
    let forward = (n / 2).max(1);
    let nodes = (0..n).map(|k| NodeInfo { cost: rng.below(10), recomputable: rng.below(8) != 0, forward: k < forward }).collect();
    let mut values = Vec::new();
    for k in 0..n {
        let outputs = match rng.below(10) {
            0 => 0,
            1 => 2,
            _ => 1,
        };
        for _ in 0..outputs {
            let mut readers: Vec<Node> = Vec::new();
            if k + 1 < n {
                readers.push(k as Node + 1);
                for _ in 0..rng.below(3) {
                    readers.push((k + 1 + rng.below((n - k - 1) as u64) as usize) as Node);
                }
            }
            let to_end = rng.below(12) == 0;
            values.push(DagValue { size: 1 + rng.below(20), def: Some(k as Node), readers, to_end });
        }
    }
    if rng.below(3) == 0 {
        let readers = vec![rng.below(n as u64) as Node];
        values.push(DagValue { size: 1 + rng.below(20), def: None, readers, to_end: rng.below(2) == 0 });
    }
    // Now and then a node may write one of its values over one it reads.
    let mut shares = Vec::new();
    for k in 0..n as Node {
        let written: Vec<u32> = (0..values.len() as u32).filter(|&v| values[v as usize].def == Some(k)).collect();
        let read: Vec<u32> = (0..values.len() as u32).filter(|&v| values[v as usize].readers.contains(&k)).collect();
        if !written.is_empty() && !read.is_empty() && rng.below(3) == 0 {
            let output = written[rng.below(written.len() as u64) as usize];
            let input = read[rng.below(read.len() as u64) as usize];
            shares.push(Share { input, output });
        }
    }
    Problem { nodes, values, shares }
}

/// A chain `0 → 1 → … → f-1` (the forward part, each value of `size` also read by its
/// mirror in the backward part) followed by `f` backward nodes, each reading the previous
/// one: node `f + i` reads the output of node `f - 1 - i` and of node `f - 2 - i`.
pub fn training_chain(f: usize, size: u64, cost: u64) -> Problem {
    let n = 2 * f;
    let nodes = (0..n).map(|k| NodeInfo { cost, recomputable: k < f, forward: k < f }).collect();
    let mut values = Vec::new();
    for k in 0..n {
        let mut readers: Vec<Node> = Vec::new();
        if k + 1 < n {
            readers.push(k as Node + 1);
        }
        if k < f {
            // Read by the backward of itself (node 2f-1-k) and of its reader (2f-2-k).
            readers.push((2 * f - 1 - k) as Node);
            if k + 1 < f {
                readers.push((2 * f - 2 - k) as Node);
            }
        }
        let size = if k < f { size } else { 1 };
        values.push(DagValue { size, def: Some(k as Node), readers, to_end: false });
    }
    Problem { nodes, values, shares: Vec::new() }
}
