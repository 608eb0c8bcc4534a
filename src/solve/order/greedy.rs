//! Greedy list scheduling (the beam of width 1) in O((nodes + reads) log nodes).
//!
//! It places the same nodes in the same order as the beam search of `order.rs` with width
//! 1 (a test compares the two on random DAGs), without its two quadratic costs: each step
//! of the beam evaluates every ready node (thousands in a wide step) and copies its state
//! (a counter per value). Here the state is updated in place, and what ranks a ready node
//! is kept per node and changes only when it must:
//! - forward, `a` (bytes the node writes) never changes; what it frees grows by a value's
//!   size when the node becomes that value's last unplaced reader (once per value);
//! - backward, `a` (bytes live at the node's position above those live after it: the
//!   outputs nobody reads, and the inputs no placed node reads yet) shrinks by a value's
//!   size when its first reader is placed (once per value, for each other reader).
//!
//! So the whole search makes O(nodes + reads) updates of the ready set (`ready.rs`), each
//! O(log nodes), and one query per step.
//!
//! **The beam's last step.** A child state that completes the order does not count toward
//! the beam's width: the beam records it and also extends the next candidate, keeping the
//! completed order with the lowest peak (the first on ties). A candidate completes the
//! order when every node left after it is free (it adds no bytes at its position), and
//! then its peak is the peak so far with its own position's bytes, since free nodes never
//! raise it. Forward, free means writing nothing, which placing a node does not change, so
//! a candidate can complete the order only when it is the one ready node: nothing to
//! record. Backward with the peak priority, every later candidate puts at least as many
//! bytes at its position, so no later completion beats the first. Backward with the net
//! priority a later candidate can end lower, so there the greedy does what the beam does:
//! it records each candidate that completes the order, tries the next, and goes on with the
//! first that does not. Whether a candidate completes the order is known without placing
//! it: backward, placing a free node makes no value live, so it does exactly when every
//! other node left has no bytes to add once the values the candidate reads are live.

use super::ready::Ready;
use super::{Dag, Direction, Node, Priority};

/// The search's state (see the module docs).
struct Greedy<'d> {
    dag: &'d Dag,
    backward: bool,
    /// Predecessors (forward) or successors (backward) not placed yet.
    waiting: Vec<u32>,
    /// Readers of each value not placed yet.
    left: Vec<u32>,
    done: Vec<bool>,
    /// Per node: `a`, and what it frees (forward) or writes (backward): `d = a - other`.
    a: Vec<u128>,
    other: Vec<u128>,
    ready: Ready,
    live: u128,
    peak: u128,
    placed: Vec<Node>,
    /// Backward: the nodes not placed whose `a` is 0.
    zeros: usize,
    /// Scratch for [`Greedy::completes`]: bytes each node's `a` would lose.
    loss: Vec<u128>,
}

impl Dag {
    /// [`Dag::list_schedule`] with width 1 (see the module docs).
    pub(super) fn greedy(&self, priority: Priority, direction: Direction) -> Vec<Node> {
        let n = self.nodes();
        let mut g = Greedy::new(self, direction == Direction::Backward);
        // The best completed order recorded (backward net): its peak, how many nodes were
        // placed before its last candidate, and the candidate.
        let mut completed: Option<(u128, usize, Node)> = None;
        let mut chose = false;
        while g.placed.len() < n {
            // Nodes that add no live bytes run at once, smallest first (`run_free_nodes`).
            if let Some(x) = g.free() {
                g.place(x);
                continue;
            }
            chose = true;
            let t = g.peak as i128 - g.live as i128;
            let best = |ready: &Ready| match priority {
                Priority::Peak => ready.best_by_peak(t),
                Priority::Net => ready.best_by_net(t),
            };
            let Some(mut x) = best(&g.ready) else {
                // Unreachable for an acyclic graph.
                return self.smallest_first();
            };
            if g.backward && priority == Priority::Net {
                let mut tried = Vec::new();
                let next = loop {
                    if !g.completes(x) {
                        break Some(x);
                    }
                    let peak = g.peak.max(g.step(x));
                    if completed.is_none_or(|(best, _, _)| peak < best) {
                        completed = Some((peak, g.placed.len(), x));
                    }
                    g.ready.remove(x);
                    tried.push(x);
                    match best(&g.ready) {
                        Some(y) => x = y,
                        None => break None,
                    }
                };
                for y in tried {
                    g.ready.set(y, g.a[y as usize], g.d(y));
                }
                match next {
                    Some(y) => x = y,
                    None => break,
                }
            }
            g.place(x);
        }
        if !chose {
            // Every node was free from the start: the beam then has no candidate to extend
            // and falls back on the smallest-first order.
            return self.smallest_first();
        }
        let mut placed = match completed {
            Some((peak, before, x)) if g.placed.len() < n || peak <= g.peak => g.complete(before, x),
            _ => g.placed,
        };
        if direction == Direction::Backward {
            placed.reverse();
        }
        debug_assert!(self.positions(&placed).is_ok(), "the greedy's order is topological");
        placed
    }
}

impl<'d> Greedy<'d> {
    fn new(dag: &'d Dag, backward: bool) -> Greedy<'d> {
        let n = dag.nodes();
        let waits_for = if backward { &dag.succs } else { &dag.preds };
        let mut a = Vec::with_capacity(n);
        let mut other = Vec::with_capacity(n);
        for x in 0..n {
            let counted = |v: &u32| {
                let value = &dag.values[*v as usize];
                let counts = !value.to_end && (backward || value.readers.len() == 1);
                if counts { u128::from(value.size) } else { 0 }
            };
            let reads: u128 = dag.reads[x].iter().map(counted).sum();
            if backward {
                a.push(dag.dies_at_def[x] + reads);
                other.push(dag.alloc[x]);
            } else {
                a.push(dag.alloc[x]);
                other.push(dag.dies_at_def[x] + reads);
            }
        }
        let live = if backward { dag.values.iter().filter(|v| v.to_end).map(|v| u128::from(v.size)).sum() } else { dag.start_live };
        let mut g = Greedy {
            dag,
            backward,
            waiting: waits_for.iter().map(|w| w.len() as u32).collect(),
            left: dag.values.iter().map(|v| v.readers.len() as u32).collect(),
            done: vec![false; n],
            zeros: a.iter().filter(|&&a| a == 0).count(),
            a,
            other,
            ready: Ready::new(n),
            live,
            peak: 0,
            placed: Vec::with_capacity(n),
            loss: if backward { vec![0; n] } else { Vec::new() },
        };
        for x in 0..n as Node {
            if g.waiting[x as usize] == 0 {
                g.ready.set(x, g.a[x as usize], g.d(x));
            }
        }
        g
    }

    fn d(&self, x: Node) -> i128 {
        self.a[x as usize] as i128 - self.other[x as usize] as i128
    }

    fn is_last(&self) -> bool {
        self.placed.len() + 1 == self.dag.nodes()
    }

    /// The smallest ready node that adds no bytes at its position, if any.
    fn free(&self) -> Option<Node> {
        let (a, x) = self.ready.first()?;
        let blocked = self.backward && self.is_last() && self.dag.start_dead > 0;
        (a == 0 && !blocked).then_some(x)
    }

    /// Bytes live at `x`'s position if it is placed next (the beam's `effect`).
    fn step(&self, x: Node) -> u128 {
        let k = x as usize;
        if self.backward {
            self.live + self.a[k] + if self.is_last() { self.dag.start_dead } else { 0 }
        } else {
            self.live + self.dag.alloc[k]
        }
    }

    /// Places `x` next (the beam's `run`).
    fn place(&mut self, x: Node) {
        let dag = self.dag;
        let k = x as usize;
        let step = self.step(x);
        let after = if self.backward {
            step - dag.alloc[k]
        } else {
            step - self.other[k] - if self.placed.is_empty() { dag.start_dead } else { 0 }
        };
        self.peak = self.peak.max(step);
        self.live = after;
        self.ready.remove(x);
        self.done[k] = true;
        self.placed.push(x);
        if self.a[k] == 0 {
            self.zeros -= 1;
        }
        for &v in &dag.reads[k] {
            let value = &dag.values[v as usize];
            self.left[v as usize] -= 1;
            if value.to_end {
                continue;
            }
            let size = u128::from(value.size);
            if self.backward && self.left[v as usize] as usize + 1 == value.readers.len() {
                // v is live from now on (going backward): no other reader brings it.
                for &r in value.readers.iter().filter(|&&r| r != x) {
                    let was = self.a[r as usize];
                    self.a[r as usize] -= size;
                    self.zeros += usize::from(was > 0 && self.a[r as usize] == 0);
                    self.update(r);
                }
            } else if !self.backward && self.left[v as usize] == 1 {
                // Its last reader frees it.
                if let Some(&r) = value.readers.iter().find(|&&r| !self.done[r as usize]) {
                    self.other[r as usize] += size;
                    self.update(r);
                }
            }
        }
        let unblocks = if self.backward { &dag.preds[k] } else { &dag.succs[k] };
        for &s in unblocks {
            self.waiting[s as usize] -= 1;
            if self.waiting[s as usize] == 0 {
                self.ready.set(s, self.a[s as usize], self.d(s));
            }
        }
    }

    /// Moves `r` in the ready set after its `a` or `other` changed.
    fn update(&mut self, r: Node) {
        if self.ready.contains(r) {
            self.ready.set(r, self.a[r as usize], self.d(r));
        }
    }

    /// Backward: whether placing `x` next completes the order, every node left after it
    /// being free (see the module docs).
    fn completes(&mut self, x: Node) -> bool {
        let dag = self.dag;
        let rest = dag.nodes() - self.placed.len() - 1;
        if rest == 0 {
            return true;
        }
        if dag.start_dead > 0 {
            // The last node is never free then.
            return false;
        }
        let newly_live = |v: &&u32| {
            let value = &dag.values[**v as usize];
            !value.to_end && value.size > 0 && self.left[**v as usize] as usize == value.readers.len()
        };
        let zeros = self.zeros - usize::from(self.a[x as usize] == 0);
        let touched: usize = dag.reads[x as usize].iter().filter(newly_live).map(|&v| dag.values[v as usize].readers.len() - 1).sum();
        if zeros + touched < rest {
            return false;
        }
        let mut cleared = 0;
        let mut seen = Vec::new();
        for &v in dag.reads[x as usize].iter().filter(newly_live) {
            for &r in dag.values[v as usize].readers.iter().filter(|&&r| r != x) {
                if self.loss[r as usize] == 0 {
                    seen.push(r);
                }
                self.loss[r as usize] += u128::from(dag.values[v as usize].size);
            }
        }
        for r in seen {
            cleared += usize::from(self.a[r as usize] > 0 && self.a[r as usize] == self.loss[r as usize]);
            self.loss[r as usize] = 0;
        }
        zeros + cleared == rest
    }

    /// The order that places `placed[..before]`, then `x`, then every node left, each
    /// free: smallest ready first (what the beam's free-node runs do).
    fn complete(&self, before: usize, x: Node) -> Vec<Node> {
        let dag = self.dag;
        let n = dag.nodes();
        let mut order: Vec<Node> = self.placed[..before].to_vec();
        order.push(x);
        let mut placed = vec![false; n];
        for &y in &order {
            placed[y as usize] = true;
        }
        let (waits_for, unblocks) = if self.backward { (&dag.succs, &dag.preds) } else { (&dag.preds, &dag.succs) };
        let mut waiting: Vec<u32> =
            (0..n).map(|y| waits_for[y].iter().filter(|&&w| !placed[w as usize]).count() as u32).collect();
        let mut heap: std::collections::BinaryHeap<std::cmp::Reverse<Node>> =
            (0..n as Node).filter(|&y| !placed[y as usize] && waiting[y as usize] == 0).map(std::cmp::Reverse).collect();
        while let Some(std::cmp::Reverse(y)) = heap.pop() {
            order.push(y);
            for &s in unblocks[y as usize].iter().filter(|&&s| !placed[s as usize]) {
                waiting[s as usize] -= 1;
                if waiting[s as usize] == 0 {
                    heap.push(std::cmp::Reverse(s));
                }
            }
        }
        order
    }
}
