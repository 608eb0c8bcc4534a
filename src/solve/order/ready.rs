//! The ready nodes of the greedy list scheduler (`greedy.rs`), kept so that the node each
//! priority picks is found in O(log n) instead of by scanning every ready node (which made
//! a step with thousands of ready nodes quadratic: 20,000 relus summed by a chain took
//! 10 s).
//!
//! Each node has `a`, the bytes live at its position above those live before it, and `d`,
//! the change in live bytes after it (`a` minus what it frees; negative when it frees more
//! than it writes). With `live` and `peak` the search's bytes live now and its peak so far,
//! and `t = peak - live`, placing a node gives the peak `live + max(t, a)` and leaves
//! `live + d` live, so the priorities of `order.rs` rank nodes by
//! - peak: `(max(t, a), d, id)`;
//! - net: `(d, max(t, a), id)`.
//!
//! Both are answered from one treap keyed by `(a, id)`, each subtree keeping its best node
//! by `(d, id)` and by `(d, a, id)`. Every node with `a <= t` has `max(t, a) = t`, so:
//! - peak: the best by `(d, id)` among the nodes with `a <= max(t, smallest a)` (if some
//!   `a <= t` they all tie on `t`; if none, the smallest `a` decides and `(d, id)` breaks
//!   ties among the nodes that have it);
//! - net: the better of the best by `(d, id)` among `a <= t` (key `(d, t, id)`) and the best
//!   by `(d, a, id)` among `a > t`; on equal `d` the first wins, since `t < a`.
//!
//! Each query and update walks one root-to-leaf path: O(log n) expected (treap priorities
//! are a fixed hash of the node, so everything is deterministic; the answers do not
//! depend on the priorities at all).

use crate::solve::Node;

const NIL: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct Item {
    left: u32,
    right: u32,
    priority: u64,
    a: u128,
    d: i128,
    /// The subtree's best node by `(d, id)`, and by `(d, a, id)`.
    best_d_id: u32,
    best_d_a: u32,
    present: bool,
}

/// A set of nodes, each with its `a` and `d` (see the module docs).
pub(super) struct Ready {
    items: Vec<Item>,
    root: u32,
}

impl Ready {
    /// An empty set over nodes `0..nodes`.
    pub(super) fn new(nodes: usize) -> Ready {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let items = (0..nodes)
            .map(|_| {
                // SplitMix64: a fixed, well-spread priority per node.
                state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut z = state;
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                Item { left: NIL, right: NIL, priority: z ^ (z >> 31), a: 0, d: 0, best_d_id: NIL, best_d_a: NIL, present: false }
            })
            .collect();
        Ready { items, root: NIL }
    }

    pub(super) fn contains(&self, x: Node) -> bool {
        self.items[x as usize].present
    }

    /// Adds `x` with `a` and `d`, or moves it there if it is in the set.
    pub(super) fn set(&mut self, x: Node, a: u128, d: i128) {
        if self.contains(x) {
            self.remove(x);
        }
        let item = &mut self.items[x as usize];
        *item = Item { left: NIL, right: NIL, a, d, best_d_id: x, best_d_a: x, present: true, ..*item };
        let (left, right) = self.split(self.root, (a, x), false);
        let left = self.merge(left, x);
        self.root = self.merge(left, right);
    }

    pub(super) fn remove(&mut self, x: Node) {
        if !self.contains(x) {
            return;
        }
        let key = self.key(x);
        let (left, rest) = self.split(self.root, key, false);
        let (alone, right) = self.split(rest, key, true);
        debug_assert_eq!(alone, x);
        self.items[x as usize].present = false;
        self.root = self.merge(left, right);
    }

    /// The node with the smallest `(a, id)` and its `a`.
    pub(super) fn first(&self) -> Option<(u128, Node)> {
        let mut t = self.root;
        while t != NIL && self.items[t as usize].left != NIL {
            t = self.items[t as usize].left;
        }
        (t != NIL).then(|| (self.items[t as usize].a, t))
    }

    /// The node the peak priority picks, given `t = peak - live` (see the module docs).
    pub(super) fn best_by_peak(&self, t: i128) -> Option<Node> {
        let (smallest, _) = self.first()?;
        let limit = if t < 0 { smallest } else { smallest.max(t as u128) };
        self.best_d_id_up_to(limit)
    }

    /// The node the net priority picks, given `t = peak - live` (see the module docs).
    pub(super) fn best_by_net(&self, t: i128) -> Option<Node> {
        let low = if t < 0 { None } else { self.best_d_id_up_to(t as u128) };
        let high = self.best_d_a_above(t);
        match (low, high) {
            (Some(l), Some(h)) => Some(if self.items[l as usize].d <= self.items[h as usize].d { l } else { h }),
            (l, h) => l.or(h),
        }
    }

    fn key(&self, x: u32) -> (u128, u32) {
        (self.items[x as usize].a, x)
    }

    /// The better of two nodes (or `NIL`) by `(d, id)`.
    fn by_d_id(&self, x: u32, y: u32) -> u32 {
        if x == NIL || y == NIL {
            return x.min(y);
        }
        if (self.items[x as usize].d, x) <= (self.items[y as usize].d, y) { x } else { y }
    }

    /// The better of two nodes (or `NIL`) by `(d, a, id)`.
    fn by_d_a(&self, x: u32, y: u32) -> u32 {
        if x == NIL || y == NIL {
            return x.min(y);
        }
        let (p, q) = (&self.items[x as usize], &self.items[y as usize]);
        if (p.d, p.a, x) <= (q.d, q.a, y) { x } else { y }
    }

    fn best_d_id_of(&self, t: u32) -> u32 {
        if t == NIL { NIL } else { self.items[t as usize].best_d_id }
    }

    fn best_d_a_of(&self, t: u32) -> u32 {
        if t == NIL { NIL } else { self.items[t as usize].best_d_a }
    }

    /// The best by `(d, id)` among the nodes with `a <= limit`.
    fn best_d_id_up_to(&self, limit: u128) -> Option<Node> {
        let (mut best, mut t) = (NIL, self.root);
        while t != NIL {
            let item = &self.items[t as usize];
            if item.a <= limit {
                best = self.by_d_id(best, self.best_d_id_of(item.left));
                best = self.by_d_id(best, t);
                t = item.right;
            } else {
                t = item.left;
            }
        }
        (best != NIL).then_some(best)
    }

    /// The best by `(d, a, id)` among the nodes with `a > t`.
    fn best_d_a_above(&self, t: i128) -> Option<Node> {
        let above = |a: u128| t < 0 || a > t as u128;
        let (mut best, mut at) = (NIL, self.root);
        while at != NIL {
            let item = &self.items[at as usize];
            if above(item.a) {
                best = self.by_d_a(best, self.best_d_a_of(item.right));
                best = self.by_d_a(best, at);
                at = item.left;
            } else {
                at = item.right;
            }
        }
        (best != NIL).then_some(best)
    }

    /// Recomputes `x`'s subtree bests from its children.
    fn pull(&mut self, x: u32) {
        let Item { left, right, .. } = self.items[x as usize];
        let best_d_id = self.by_d_id(self.by_d_id(self.best_d_id_of(left), x), self.best_d_id_of(right));
        let best_d_a = self.by_d_a(self.by_d_a(self.best_d_a_of(left), x), self.best_d_a_of(right));
        let item = &mut self.items[x as usize];
        item.best_d_id = best_d_id;
        item.best_d_a = best_d_a;
    }

    /// Splits the treap at `t` into keys below `key` (or up to it, `inclusive`) and the rest.
    fn split(&mut self, t: u32, key: (u128, u32), inclusive: bool) -> (u32, u32) {
        if t == NIL {
            return (NIL, NIL);
        }
        let here = self.key(t);
        if here < key || (inclusive && here == key) {
            let (l, r) = self.split(self.items[t as usize].right, key, inclusive);
            self.items[t as usize].right = l;
            self.pull(t);
            (t, r)
        } else {
            let (l, r) = self.split(self.items[t as usize].left, key, inclusive);
            self.items[t as usize].left = r;
            self.pull(t);
            (l, t)
        }
    }

    /// Joins two treaps, every key of `a` below every key of `b`.
    fn merge(&mut self, a: u32, b: u32) -> u32 {
        if a == NIL {
            return b;
        }
        if b == NIL {
            return a;
        }
        if self.items[a as usize].priority > self.items[b as usize].priority {
            let right = self.merge(self.items[a as usize].right, b);
            self.items[a as usize].right = right;
            self.pull(a);
            a
        } else {
            let left = self.merge(a, self.items[b as usize].left);
            self.items[b as usize].left = left;
            self.pull(b);
            b
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// The node each priority picks, by scanning every node in the set.
    fn scan(nodes: &[(Node, u128, i128)], t: i128, peak: bool) -> Option<Node> {
        let m = |a: u128| if t < 0 { a } else { a.max(t as u128) };
        let best = if peak {
            nodes.iter().min_by_key(|&&(x, a, d)| (m(a), d, x))
        } else {
            nodes.iter().min_by_key(|&&(x, a, d)| (d, m(a), x))
        };
        best.map(|&(x, _, _)| x)
    }

    #[test]
    fn picks_what_a_scan_picks() {
        for seed in 0..200 {
            let mut rng = Rng::new(seed);
            let n = 1 + rng.below(40) as usize;
            let mut ready = Ready::new(n);
            let mut shadow: Vec<Option<(u128, i128)>> = vec![None; n];
            for _ in 0..300 {
                let x = rng.below(n as u64) as Node;
                match rng.below(3) {
                    0 => {
                        ready.remove(x);
                        shadow[x as usize] = None;
                    }
                    _ => {
                        let a = u128::from(rng.below(6)) * 10;
                        let d = rng.below(7) as i128 * 10 - 30;
                        ready.set(x, a, d);
                        shadow[x as usize] = Some((a, d));
                    }
                }
                let nodes: Vec<(Node, u128, i128)> =
                    shadow.iter().enumerate().filter_map(|(x, s)| s.map(|(a, d)| (x as Node, a, d))).collect();
                let t = rng.below(80) as i128 - 20;
                assert_eq!(ready.best_by_peak(t), scan(&nodes, t, true), "seed {seed}");
                assert_eq!(ready.best_by_net(t), scan(&nodes, t, false), "seed {seed}");
                assert_eq!(ready.first().map(|f| f.1), nodes.iter().min_by_key(|&&(x, a, _)| (a, x)).map(|&(x, _, _)| x));
                for x in 0..n as Node {
                    assert_eq!(ready.contains(x), shadow[x as usize].is_some());
                }
            }
        }
    }
}
