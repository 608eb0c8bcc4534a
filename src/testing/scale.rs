//! Large inputs for the scale benchmarks (issue 21): step texts, a Checkmate graph and a
//! buffer list at sizes no file in the repository reaches, written on demand instead of
//! committed.
//!
//! - [`chain_step`]`(n, training)`: one long chain of `n` elementwise ops, forward only or
//!   a training step (`backward ... with sgd`: autodiff about doubles the ops);
//! - [`fan_in_step`]`(n)`: `n` relus of one input, then a chain of adds summing them: the
//!   program order keeps every relu live at once, a memory-aware order interleaves them;
//! - [`many_args_step`]`(n)`: `n` params summed by a chain of adds, trained by sgd (`n`
//!   arguments, `n` updates);
//! - [`unet_graph`]`(n)`: a Checkmate training graph (node-link JSON, the fields of
//!   `../shared/bench/checkmate`) shaped like a U-Net of about `n` nodes: an encoder chain,
//!   a decoder chain reading the encoder's output of the same level (skip links), a loss,
//!   and the backward pass in reverse;
//! - [`skip_chain_graph`]`(n)`: the same shape at its plainest, unit costs and sizes: a
//!   chain of `n` nodes where each node past the middle also reads its mirror (issue 27's
//!   graph: every budget below the plain peak has thousands of equally good recomputes);
//! - [`csv`]: a buffer list in minimalloc's CSV (`id,lower,upper,size`).
//!
//! Every generator is deterministic (sizes come from the node index, or from the seeded
//! lists of `synthetic`).

use std::fmt::Write as _;

use crate::solve::offsets::Live;

/// A chain of `n` ops on an `f32[64]` value: `mul` by a param, then `tanh`, `sigmoid`,
/// `relu`, `exp`-free ops in turn (nothing overflows), ending in a `sum` as the loss.
/// With `training` the step ends with `backward %loss with sgd(lr=0.01)`; without it, the
/// loss is returned.
pub fn chain_step(n: usize, training: bool) -> String {
    let mut s = String::with_capacity(n * 40 + 200);
    s.push_str("step @chain(%w: f32[64] param, %x: f32[64] input) {\n  %h0 = mul(%x, %w)\n");
    const KINDS: [&str; 3] = ["tanh", "sigmoid", "relu"];
    for i in 1..n.max(1) {
        let _ = writeln!(s, "  %h{i} = {}(%h{})", KINDS[i % KINDS.len()], i - 1);
    }
    let _ = writeln!(s, "  %loss = sum(%h{}, axes=[0])", n.max(1) - 1);
    if training {
        s.push_str("  backward %loss with sgd(lr=0.01)\n");
    } else {
        s.push_str("  return %loss\n");
    }
    s.push_str("}\n");
    s
}

/// `n` relus of one input written first, then a chain of adds summing them (the program
/// order has all of them live at once).
pub fn fan_in_step(n: usize) -> String {
    let n = n.max(2);
    let mut s = String::with_capacity(n * 60 + 200);
    s.push_str("step @fan_in(%x: f32[64] input) {\n");
    for i in 0..n {
        let _ = writeln!(s, "  %r{i} = relu(%x)");
    }
    s.push_str("  %s1 = add(%r0, %r1)\n");
    for i in 2..n {
        let _ = writeln!(s, "  %s{i} = add(%s{}, %r{i})", i - 1);
    }
    let _ = writeln!(s, "  %loss = sum(%s{}, axes=[0])\n  return %loss\n}}", n - 1);
    s
}

/// `n` params summed by a chain of adds; the loss trains them by sgd.
pub fn many_args_step(n: usize) -> String {
    let n = n.max(2);
    let mut s = String::with_capacity(n * 60 + 200);
    s.push_str("step @many_args(\n");
    for i in 0..n {
        let _ = writeln!(s, "  %p{i}: f32[16] param,");
    }
    s.push_str(") {\n  %s1 = add(%p0, %p1)\n");
    for i in 2..n {
        let _ = writeln!(s, "  %s{i} = add(%s{}, %p{i})", i - 1);
    }
    let _ = writeln!(s, "  %loss = sum(%s{}, axes=[0])\n  backward %loss with sgd(lr=0.01)\n}}", n - 1);
    s
}

/// A U-Net-shaped Checkmate training graph of about `n` nodes (see the module docs). Node
/// ids ascending are the plain order: forward, loss, backward in reverse.
pub fn unet_graph(n: usize) -> String {
    // Forward: `depth` encoder nodes, `depth` decoder nodes; the loss; 2 * depth backward.
    let depth = (n.saturating_sub(1) / 4).max(1);
    let forward = 2 * depth;
    let loss = forward;
    let total = 2 * forward + 1;
    // Sizes shrink down the encoder and grow back up the decoder, in 64 levels.
    let level = |k: usize| if k < depth { k * 64 / depth } else { (forward - 1 - k) * 64 / depth };
    let size = |k: usize| (((1u64 << 20) >> (level(k) / 8)) << 4) | ((k as u64 % 7) * 4096);
    let cost = |k: usize| 100 + (k as u64 * 37) % 300;
    let mut nodes = String::with_capacity(total * 100);
    let mut links = String::with_capacity(total * 150);
    let mut link = |a: usize, b: usize| {
        if !links.is_empty() {
            links.push_str(", ");
        }
        let _ = write!(links, "{{\"source\": {a}, \"target\": {b}}}");
    };
    // The backward node of forward node k.
    let back = |k: usize| total - 1 - k;
    for k in 0..total {
        if k > 0 {
            nodes.push_str(", ");
        }
        let (name, backward, bytes, c) = if k < forward {
            (format!("f{k}"), false, size(k), cost(k))
        } else if k == loss {
            ("Loss".to_string(), true, 4, 10)
        } else {
            let f = total - 1 - k;
            (format!("f{f}_backward"), true, size(f), cost(f) * 2)
        };
        let _ = write!(nodes, "{{\"id\": {k}, \"name\": \"{name}\", \"backward\": {backward}, \"cost_cpu\": {c}, \"cost_ram\": {bytes}}}");
    }
    for k in 0..forward {
        // The chain, and the skip from encoder node k to its mirror in the decoder.
        link(k, k + 1);
        if k < depth && k % 4 == 3 {
            link(k, forward - 1 - k);
        }
    }
    // Backward of k reads the gradient of its successor's backward (the loss for the last
    // forward node), its own forward value and its input's.
    for k in (0..forward).rev() {
        let upstream = if k + 1 == forward { loss } else { back(k + 1) };
        link(upstream, back(k));
        link(k, back(k));
        if k > 0 {
            link(k - 1, back(k));
        }
        if k < depth && k % 4 == 3 {
            link(back(forward - 1 - k), back(k));
        }
    }
    format!(
        "{{\"directed\": true, \"multigraph\": false, \"graph\": {{\"name\": \"unet_like_{total}\"}}, \"nodes\": [{nodes}], \"links\": [{links}]}}\n"
    )
}

/// A Checkmate training graph of `n` nodes, every cost and size 1: node `i` reads node
/// `i - 1`, and a node past the middle (a backward node) also reads its mirror `n - 1 - i`.
pub fn skip_chain_graph(n: usize) -> String {
    let half = n / 2;
    let mut nodes = String::with_capacity(n * 90);
    let mut links = String::with_capacity(n * 80);
    for i in 0..n {
        if i > 0 {
            nodes.push_str(", ");
        }
        let _ = write!(nodes, "{{\"id\": {i}, \"name\": \"n{i}\", \"backward\": {}, \"cost_cpu\": 1, \"cost_ram\": 1}}", i >= half);
    }
    let mut link = |a: usize, b: usize| {
        if !links.is_empty() {
            links.push_str(", ");
        }
        let _ = write!(links, "{{\"source\": {a}, \"target\": {b}}}");
    };
    for i in 1..n {
        link(i - 1, i);
        let mirror = n - 1 - i;
        if i >= half && mirror + 1 < i {
            link(mirror, i);
        }
    }
    format!("{{\"directed\": true, \"multigraph\": false, \"graph\": {{\"name\": \"skip_chain_{n}\"}}, \"nodes\": [{nodes}], \"links\": [{links}]}}\n")
}

/// `buffers` as minimalloc's CSV (`id,lower,upper,size`; `upper` is exclusive).
pub fn csv(buffers: &[Live]) -> String {
    let mut s = String::with_capacity(buffers.len() * 32 + 32);
    s.push_str("id,lower,upper,size\n");
    for (i, b) in buffers.iter().enumerate() {
        let _ = writeln!(s, "b{i},{},{},{}", b.first, b.last + 1, b.size);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_steps_parse_and_verify() {
        for text in [chain_step(50, true), chain_step(50, false), fan_in_step(20), many_args_step(20)] {
            let g = crate::ir::parse::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
            crate::ir::verify::verify(&g).unwrap();
        }
        assert_eq!(crate::ir::parse::parse(&chain_step(50, false)).unwrap().ops.len(), 51);
    }

    #[test]
    fn the_graph_and_the_list_are_well_formed() {
        let g: serde_json::Value = serde_json::from_str(&unet_graph(101)).unwrap();
        assert_eq!(g["nodes"].as_array().unwrap().len(), 101);
        // 10 nodes: the chain's 9 links, and nodes 5..=9 reading nodes 4..=0 (node 5's
        // mirror, 4, is its chain input already).
        let g = crate::formats::checkmate::parse_remat(&skip_chain_graph(10)).unwrap();
        assert_eq!((g.problem.nodes.len(), g.links), (10, 13));
        assert_eq!(g.problem.values[1].readers, vec![2, 8]);
        assert!(g.problem.nodes.iter().enumerate().all(|(i, n)| n.cost == 1 && n.forward == (i < 5)));
        let list = csv(&[Live { first: 0, last: 2, size: 256 }]);
        assert_eq!(list, "id,lower,upper,size\nb0,0,3,256\n");
    }
}
