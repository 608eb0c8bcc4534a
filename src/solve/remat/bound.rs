//! Lower bounds: the least extra compute and the least peak any stage-form plan can have.
//!
//! Take the position of node `t`'s own execution in any plan (the order of first executions
//! fixed, recomputes by stage). A value is *forced* there if `t` reads or writes it, if it
//! has no writer and is read at or after `t` (or must survive), or if its writer cannot be
//! recomputed and it is live there in the plain order. Any other value `v` live there in
//! the plain order (written before `t`, read after it or surviving) is live in the plan too
//! unless its writer runs again after `t`'s position: every later read must bind to a later
//! execution. Dropping it therefore costs at least one more run of its writer.
//!
//! With in-place reuse ([`super::Share`]) a value `t` reads and one it writes may count
//! once at `t`: the forced bytes are lowered by what `t`'s shares would save if every input
//! they read died at `t` (the most they can save).
//!
//! So at each `t`: the forced bytes bound the peak from below ([`Bound::peak`] is the most
//! over all `t`), and the cheapest set of writers whose droppable values cover the bytes
//! over budget bounds the extra cost (a min-cost knapsack cover, solved exactly by branch
//! and bound on small instances, by its linear relaxation otherwise — both are lower
//! bounds). [`Bound::extra`] is the most over all `t`: one recompute may serve several
//! positions, so the positions' bounds cannot be added.
//!
//! Cost: one sweep over the plain order finds every position's forced and droppable bytes
//! in O(nodes + values + reads); a second sweep every position's linear relaxation (a lower
//! bound on its cover) and greedy cover (an upper bound) in O((values + reads) log)
//! (`fractional_covers`). The best of the relaxations is a bound already; the exact
//! covers then run only at positions whose greedy cover could raise it, the highest first,
//! each O(values) plus its knapsack, stopping when no greedy cover left is above the best
//! (so the result is the most over every position's cover), within a fixed amount of work
//! ([`WORK`]; the result stays the same on every machine): past it the other positions are
//! skipped, which keeps a valid, weaker bound. (Each position per value was O(nodes ×
//! values) for the peak alone: 20,000 nodes took a second; a cover at every position, the
//! most needing first, took seconds on 10,000 nodes of equal costs and sizes.)

use std::time::Instant;

use super::{Problem, shared_bytes};

/// What no stage-form plan can beat.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Bound {
    /// The peak of any plan is at least this.
    pub peak: u64,
    /// For the budget given: the extra cost of any plan that fits is at least this; `None`
    /// if no plan fits (the budget is below `peak`).
    pub extra: Option<u64>,
    /// The deadline of [`bound_until`] passed before every cover was tried: `extra` is
    /// still a lower bound, but may be weaker than [`lower_bound`]'s.
    pub cut: bool,
}

/// Branch-and-bound nodes per position before falling back to the relaxation.
const NODE_LIMIT: usize = 20_000;

/// The most work (values scanned, items and branch-and-bound nodes) the exact covers of
/// [`lower_bound`] may take: the positions whose greedy cover is highest come first, the
/// rest are skipped past it (every position's cover is a lower bound, so the most over
/// fewer of them still is, only weaker). The 18 benchmark rows take at most a few million;
/// most graphs need a handful of covers, since the greedy covers prune the rest.
pub const WORK: u64 = 100_000_000;

/// The bounds for `budget` (see the module doc).
pub fn lower_bound(problem: &Problem, budget: u64) -> Bound {
    bound_until(problem, budget, None)
}

/// For each value its last use (its last reader, or `nodes.len()` for a survivor); for each
/// node the values it reads.
fn uses(problem: &Problem) -> (Vec<usize>, Vec<Vec<usize>>) {
    let n = problem.nodes.len();
    let mut last_use = vec![0usize; problem.values.len()];
    let mut read_by: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (v, value) in problem.values.iter().enumerate() {
        let mut last = value.def.map_or(0, |d| d as usize);
        for &r in &value.readers {
            last = last.max(r as usize);
            read_by[r as usize].push(v);
        }
        last_use[v] = if value.to_end { n } else { last };
    }
    (last_use, read_by)
}

/// [`lower_bound`], also skipping the covers left when `deadline` passes (the search's
/// own use: it only stops the search early).
pub fn bound_until(problem: &Problem, budget: u64, deadline: Option<Instant>) -> Bound {
    let n = problem.nodes.len();
    let (last_use, read_by) = uses(problem);
    let droppable_writer = |v: usize| problem.values[v].def.filter(|&d| problem.nodes[d as usize].recomputable);
    // One sweep: the bytes live at each position in the plain order, and of those the
    // droppable ones (a recomputable writer before the position, not read there).
    let mut live = vec![0i128; n + 1];
    let mut droppable = vec![0i128; n + 1];
    for (v, value) in problem.values.iter().enumerate() {
        let start = value.def.map_or(0, |d| d as usize);
        let (size, end) = (i128::from(value.size), last_use[v].min(n.saturating_sub(1)));
        if n == 0 || start > end {
            continue;
        }
        live[start] += size;
        live[end + 1] -= size;
        if droppable_writer(v).is_some() && start < end {
            droppable[start + 1] += size;
            droppable[end + 1] -= size;
        }
    }
    let saturate = |x: i128| u64::try_from(x).unwrap_or(u64::MAX);
    let shares = problem.shares_by_node();
    let mut reads_t = vec![false; problem.values.len()];
    let (mut live_now, mut droppable_now) = (0i128, 0i128);
    let mut peak = 0u64;
    let mut extra = Some(0u64);
    // Positions over budget: (bytes over budget, position).
    let mut over: Vec<(u64, usize)> = Vec::new();
    for (t, reads) in read_by.iter().enumerate() {
        live_now += live[t];
        droppable_now += droppable[t];
        // The droppable values `t` reads are forced there (each counted once).
        let mut read_here = 0i128;
        for &v in reads {
            if !std::mem::replace(&mut reads_t[v], true) && droppable_writer(v).is_some_and(|d| (d as usize) < t) {
                read_here += i128::from(problem.values[v].size);
            }
        }
        let dropped = saturate(droppable_now - read_here);
        let mut forced = saturate(live_now - (droppable_now - read_here));
        // In-place reuse at `t` saves at most what its shares would if every input died here.
        // (Even a value that must survive may die here: an earlier execution of it, if its
        // writer runs again later.)
        forced = forced.saturating_sub(shared_bytes(problem, &shares[t], |input| reads_t[input as usize]));
        for &v in reads {
            reads_t[v] = false;
        }
        peak = peak.max(forced);
        let need = forced.saturating_add(dropped).saturating_sub(budget);
        if need > dropped {
            extra = None; // not even dropping every droppable value is enough
        } else if need > 0 {
            over.push((need, t));
        }
    }
    if extra.is_none() {
        return Bound { peak, extra: None, cut: false };
    }
    // Every position's relaxation (a lower bound on its cover) and greedy cover (an upper
    // bound), in one sweep; the covers themselves only where the greedy one could raise
    // the best so far, the highest first.
    let mut needs = vec![0u64; n];
    for &(need, t) in &over {
        needs[t] = need;
    }
    let estimates = fractional_covers(problem, &last_use, &read_by, &needs);
    let mut best = over.iter().map(|&(_, t)| estimates[t].0).max().unwrap_or(0);
    over.sort_unstable_by_key(|&(_, t)| (std::cmp::Reverse(estimates[t].1), t));
    let mut work = 0u64;
    let mut by_writer = vec![0u64; n];
    let mut writers: Vec<usize> = Vec::new();
    let mut items: Vec<(u64, u64)> = Vec::new();
    let mut cut = false;
    for (need, t) in over {
        if estimates[t].1 <= best || work > WORK {
            break;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            cut = true;
            break;
        }
        for &v in &read_by[t] {
            reads_t[v] = true;
        }
        for (v, value) in problem.values.iter().enumerate() {
            let start = value.def.map_or(0, |d| d as usize);
            if start <= t && last_use[v] >= t && !reads_t[v] && start < t && let Some(d) = droppable_writer(v) {
                if by_writer[d as usize] == 0 {
                    writers.push(d as usize);
                }
                by_writer[d as usize] = by_writer[d as usize].saturating_add(value.size);
            }
        }
        for &v in &read_by[t] {
            reads_t[v] = false;
        }
        writers.sort_unstable();
        items.clear();
        for &d in &writers {
            if by_writer[d] > 0 {
                items.push((problem.nodes[d].cost, by_writer[d]));
            }
            by_writer[d] = 0;
        }
        writers.clear();
        let mut nodes = 0usize;
        let cover = cover(&mut items, need, &mut nodes).expect("the droppable bytes cover the need");
        best = best.max(cover);
        work += (problem.values.len() + items.len() + nodes) as u64;
    }
    Bound { peak, extra: Some(best), cut }
}

/// For each position `t` with `needs[t] > 0`, the linear relaxation of its cover (a lower
/// bound on it) and the cost of its greedy cover (items cheapest per byte first, until the
/// need is met: an upper bound); `(0, 0)` elsewhere. One sweep over the positions, in
/// O((values + reads) log): a scan of every value at each position made the bound
/// quadratic (seconds on 10,000-node graphs).
///
/// An *item* here is one writer's droppable bytes over a stretch of positions where they do
/// not change: its values die one by one, so its bytes step down at each value's end; and
/// a position that reads some of them forces those there, so it sees the writer with fewer
/// bytes (a version of its own). Every version is made first and sorted once by cost per
/// byte; a Fenwick tree over that order holds the versions of the current position, so
/// each relaxation is one descent of the tree.
fn fractional_covers(problem: &Problem, last_use: &[usize], read_by: &[Vec<usize>], needs: &[u64]) -> Vec<(u64, u64)> {
    let n = problem.nodes.len();
    let mut estimates = vec![(0u64, 0u64); n];
    if n == 0 {
        return estimates;
    }
    // The positions where value `v` is droppable: `(def, end]`.
    let end = |v: usize| last_use[v].min(n - 1);
    let droppable = |v: usize| {
        let value = &problem.values[v];
        value.def.filter(|&d| problem.nodes[d as usize].recomputable && (d as usize) < end(v)).map(|d| d as usize)
    };
    // Versions: (cost, bytes); the base ones of each writer consecutive, with their first
    // position, and the activations and deactivations by position.
    let mut versions: Vec<(u64, u64)> = Vec::new();
    let mut base_from: Vec<usize> = Vec::new();
    let mut writer_versions: Vec<std::ops::Range<usize>> = vec![0..0; n];
    let mut starts_at: Vec<Vec<u32>> = vec![Vec::new(); n + 1];
    let mut ends_at: Vec<Vec<u32>> = vec![Vec::new(); n + 1];
    let mut dying: Vec<Vec<(usize, u64)>> = vec![Vec::new(); n];
    for v in 0..problem.values.len() {
        if let Some(d) = droppable(v) {
            dying[d].push((end(v), problem.values[v].size));
        }
    }
    for (d, values) in dying.iter_mut().enumerate() {
        values.sort_unstable();
        let mut bytes = values.iter().fold(0u64, |a, &(_, size)| a.saturating_add(size));
        let first = versions.len();
        let mut from = d + 1;
        let mut i = 0;
        while i < values.len() {
            let e = values[i].0;
            let k = versions.len() as u32;
            versions.push((problem.nodes[d].cost, bytes));
            base_from.push(from);
            starts_at[from].push(k);
            ends_at[e + 1].push(k);
            while i < values.len() && values[i].0 == e {
                bytes = bytes.saturating_sub(values[i].1);
                i += 1;
            }
            from = e + 1;
        }
        writer_versions[d] = first..versions.len();
    }
    drop(dying);
    let bases = versions.len();
    // At each position over budget: each writer it reads from, its base version there and
    // the version with the values read there taken out.
    let mut read_versions: Vec<Vec<(u32, u32)>> = vec![Vec::new(); n];
    let mut seen = vec![false; problem.values.len()];
    let mut read_bytes: Vec<(usize, u64)> = Vec::new();
    for t in 0..n {
        if needs[t] == 0 {
            continue;
        }
        read_bytes.clear();
        for &v in &read_by[t] {
            if std::mem::replace(&mut seen[v], true) {
                continue;
            }
            if let Some(d) = droppable(v).filter(|&d| d < t) {
                read_bytes.push((d, problem.values[v].size));
            }
        }
        for &v in &read_by[t] {
            seen[v] = false;
        }
        read_bytes.sort_unstable();
        let mut i = 0;
        while i < read_bytes.len() {
            let d = read_bytes[i].0;
            let mut bytes = 0u64;
            while i < read_bytes.len() && read_bytes[i].0 == d {
                bytes = bytes.saturating_add(read_bytes[i].1);
                i += 1;
            }
            // The base version of `d` at `t`: the last one starting at or before it.
            let range = writer_versions[d].clone();
            let base = range.start + base_from[range.clone()].partition_point(|&from| from <= t) - 1;
            let k = versions.len() as u32;
            versions.push((versions[base].0, versions[base].1.saturating_sub(bytes)));
            read_versions[t].push((base as u32, k));
        }
    }
    debug_assert!(versions.len() >= bases);
    // Cheapest per byte first (versions without bytes last, so that the order is total).
    let mut order: Vec<u32> = (0..versions.len() as u32).collect();
    order.sort_by(|&a, &b| {
        let ((ca, ba), (cb, bb)) = (versions[a as usize], versions[b as usize]);
        let per_byte = (u128::from(ca) * u128::from(bb)).cmp(&(u128::from(cb) * u128::from(ba)));
        (ba == 0).cmp(&(bb == 0)).then(per_byte).then(a.cmp(&b))
    });
    let mut rank = vec![0u32; versions.len()];
    for (r, &k) in order.iter().enumerate() {
        rank[k as usize] = r as u32;
    }
    let mut tree = Fenwick::new(versions.len());
    // (A version without bytes never counts: it is never added, so its cost cannot either.)
    let set = |tree: &mut Fenwick, k: u32, on: bool| {
        let (c, b) = versions[k as usize];
        if b > 0 {
            tree.add(rank[k as usize] as usize, u128::from(c), u128::from(b), on);
        }
    };
    for t in 0..n {
        for &k in &ends_at[t] {
            set(&mut tree, k, false);
        }
        for &k in &starts_at[t] {
            set(&mut tree, k, true);
        }
        if needs[t] == 0 {
            continue;
        }
        for &(base, read) in &read_versions[t] {
            set(&mut tree, base, false);
            set(&mut tree, read, true);
        }
        let need = u128::from(needs[t]);
        let (r, cost, bytes) = tree.below(need);
        if let Some(&k) = order.get(r) {
            let (c, b) = versions[k as usize];
            let (c, b) = (u128::from(c), u128::from(b));
            let saturate = |x: u128| u64::try_from(x).unwrap_or(u64::MAX);
            estimates[t] = (saturate(cost + (c * (need - bytes)).div_ceil(b.max(1))), saturate(cost + c));
        }
        for &(base, read) in &read_versions[t] {
            set(&mut tree, read, false);
            set(&mut tree, base, true);
        }
    }
    estimates
}

/// Sums of costs and bytes over ranks (1-based inside), with a descent that finds the
/// longest prefix whose bytes fall short of a need.
struct Fenwick {
    costs: Vec<u128>,
    bytes: Vec<u128>,
}

impl Fenwick {
    fn new(len: usize) -> Fenwick {
        Fenwick { costs: vec![0; len + 1], bytes: vec![0; len + 1] }
    }

    /// Adds (`on`) or removes an item at rank `r` (0-based).
    fn add(&mut self, r: usize, cost: u128, bytes: u128, on: bool) {
        let mut i = r + 1;
        while i < self.costs.len() {
            if on {
                self.costs[i] += cost;
                self.bytes[i] += bytes;
            } else {
                self.costs[i] -= cost;
                self.bytes[i] -= bytes;
            }
            i += i & i.wrapping_neg();
        }
    }

    /// The longest prefix of ranks whose bytes are below `need`: its length (the rank of
    /// the first item that reaches the need, the item taken fractionally), cost and bytes.
    fn below(&self, need: u128) -> (usize, u128, u128) {
        let (mut at, mut cost, mut bytes) = (0usize, 0u128, 0u128);
        let mut step = (self.costs.len() - 1).checked_ilog2().map_or(0, |k| 1usize << k);
        while step > 0 {
            let next = at + step;
            if next < self.costs.len() && bytes + self.bytes[next] < need {
                at = next;
                cost += self.costs[next];
                bytes += self.bytes[next];
            }
            step >>= 1;
        }
        (at, cost, bytes)
    }
}

/// The least cost of items (cost, bytes) whose bytes sum to at least `need`, or a lower
/// bound on it; `None` if all of them together fall short.
fn cover(items: &mut [(u64, u64)], need: u64, nodes: &mut usize) -> Option<u64> {
    let total: u64 = items.iter().fold(0u64, |a, &(_, b)| a.saturating_add(b));
    if total < need {
        return None;
    }
    // Free items are always taken.
    let free: u64 = items.iter().filter(|&&(c, _)| c == 0).fold(0u64, |a, &(_, b)| a.saturating_add(b));
    let need = need.saturating_sub(free);
    let mut items: Vec<(u64, u64)> = items.iter().copied().filter(|&(c, _)| c > 0).collect();
    // Cheapest per byte first.
    items.sort_by(|a, b| (a.0 as u128 * b.1 as u128).cmp(&(b.0 as u128 * a.1 as u128)));
    let knapsack = Knapsack::new(&items);
    let best = knapsack.branch(need, 0, u64::MAX, nodes);
    Some(if *nodes > NODE_LIMIT { knapsack.relaxation(0, need) } else { best })
}

/// Items sorted cheapest per byte first, with prefix sums of their costs and bytes, so that
/// the linear relaxation of any suffix is a binary search (O(log items), where a scan of
/// the suffix made the branch and bound quadratic in the items: seconds a position on
/// graphs whose thousands of droppable values cost the same per byte).
struct Knapsack<'a> {
    items: &'a [(u64, u64)],
    /// `costs[i]`, `bytes[i]`: the sums over `items[..i]`.
    costs: Vec<u128>,
    bytes: Vec<u128>,
}

impl<'a> Knapsack<'a> {
    fn new(items: &'a [(u64, u64)]) -> Knapsack<'a> {
        let mut costs = Vec::with_capacity(items.len() + 1);
        let mut bytes = Vec::with_capacity(items.len() + 1);
        let (mut c, mut b) = (0u128, 0u128);
        costs.push(0);
        bytes.push(0);
        for &(cost, size) in items {
            c += u128::from(cost);
            b += u128::from(size);
            costs.push(c);
            bytes.push(b);
        }
        Knapsack { items, costs, bytes }
    }

    /// The linear relaxation over `items[i..]`: take items in order, the last one
    /// fractionally (rounded up: costs are integers); `u64::MAX` if they fall short.
    fn relaxation(&self, i: usize, need: u64) -> u64 {
        if need == 0 {
            return 0;
        }
        let goal = self.bytes[i] + u128::from(need);
        // The first prefix end `j + 1 > i` whose bytes reach the goal: item `j` is the last taken.
        let ends = &self.bytes[i + 1..];
        let k = ends.partition_point(|&b| b < goal);
        if k == ends.len() {
            return u64::MAX;
        }
        let j = i + k;
        let (c, b) = self.items[j];
        let left = goal - self.bytes[j];
        let cost = self.costs[j] - self.costs[i] + (u128::from(c) * left).div_ceil(u128::from(b));
        u64::try_from(cost).unwrap_or(u64::MAX)
    }

    /// The least cost to cover `need` with `items[i..]` if it is below `limit`, else `limit`
    /// (depth first, pruned by the relaxation; gives up past [`NODE_LIMIT`] nodes).
    fn branch(&self, need: u64, i: usize, limit: u64, nodes: &mut usize) -> u64 {
        if need == 0 {
            return 0;
        }
        *nodes += 1;
        if *nodes > NODE_LIMIT || i == self.items.len() || self.relaxation(i, need) >= limit {
            return limit;
        }
        let (c, b) = self.items[i];
        let mut best = limit;
        if c < best {
            let take = self.branch(need.saturating_sub(b), i + 1, best - c, nodes);
            if take < best - c {
                best = take + c;
            }
        }
        self.branch(need, i + 1, best, nodes)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::training_chain;
    use super::*;

    #[test]
    fn the_bounds_on_a_training_chain() {
        // 4 forward nodes (100 bytes each; node 0 costs 5, the others 1) and 4 backward
        // nodes (1 byte each): backward node 4 reads forward 3 and 2, node 5 reads 2 and 1,
        // node 6 reads 1 and 0, node 7 reads 0. The plain peak is at node 4: 401 bytes.
        let mut p = training_chain(4, 100, 1);
        p.nodes[0].cost = 5;
        let plain = super::super::evaluate(&p, &[0, 1, 2, 3, 4, 5, 6, 7]).unwrap().peak;
        assert_eq!(plain, 401);
        // Node 6 needs forward 1 and 0, its gradient input and output: 202 bytes forced.
        assert_eq!(lower_bound(&p, plain), Bound { peak: 202, extra: Some(0), cut: false });
        // At node 4 (201 bytes forced) forward 0 and 1 may go: 51 bytes over budget need
        // one of them, the cheaper is node 1.
        assert_eq!(lower_bound(&p, 350).extra, Some(1));
        // 101 bytes over need both (5 + 1).
        assert_eq!(lower_bound(&p, 300).extra, Some(6));
        // Below the forced bytes at node 6: no plan fits.
        assert_eq!(lower_bound(&p, 201).extra, None);
        // The search meets the first bound (recompute node 1 before node 5, from node 0,
        // which is live anyway); not the second, which no plan meets: recomputing 0 and 1
        // before node 5 puts 302 bytes live there.
        let extra = |budget| {
            let solution = super::super::solve(&p, budget, super::super::Strategy::NearOptimal).unwrap();
            solution.eval.cost - solution.eval.base_cost
        };
        assert_eq!(extra(350), 1);
        assert!(extra(300) > 6);
    }


    /// A position's forced bytes, and if it is over budget its need and items (cost, bytes).
    type Position = (u64, Option<(u64, Vec<(u64, u64)>)>);

    /// At each position, as computed before the sweep (every value at every position): the
    /// forced bytes, and where the position is over budget its need and droppable items.
    fn scanned_positions(problem: &Problem, budget: u64) -> Vec<Position> {
        let n = problem.nodes.len();
        let (last_use, read_by) = uses(problem);
        let shares = problem.shares_by_node();
        let mut reads_t = vec![false; problem.values.len()];
        let mut positions = Vec::new();
        for (t, reads) in read_by.iter().enumerate() {
            for &v in reads {
                reads_t[v] = true;
            }
            let mut forced: u64 = 0;
            // Droppable bytes by writer.
            let mut items: Vec<(u64, u64)> = Vec::new();
            let mut by_writer = vec![0u64; n];
            for (v, value) in problem.values.iter().enumerate() {
                let start = value.def.map_or(0, |d| d as usize);
                let live = start <= t && last_use[v] >= t;
                if !live {
                    continue;
                }
                match value.def {
                    Some(d) if (d as usize) < t && !reads_t[v] && problem.nodes[d as usize].recomputable => {
                        by_writer[d as usize] = by_writer[d as usize].saturating_add(value.size);
                    }
                    _ => forced = forced.saturating_add(value.size),
                }
            }
            // In-place reuse at `t` saves at most what its shares would if every input died here.
            // (Even a value that must survive may die here: an earlier execution of it, if its
            // writer runs again later.)
            let saved = shared_bytes(problem, &shares[t], |input| reads_t[input as usize]);
            forced = forced.saturating_sub(saved);
            for &v in reads {
                reads_t[v] = false;
            }
            let droppable: u64 = by_writer.iter().fold(0u64, |a, &b| a.saturating_add(b));
            let need = forced.saturating_add(droppable).saturating_sub(budget);
            for (d, &bytes) in by_writer.iter().enumerate() {
                if bytes > 0 {
                    items.push((problem.nodes[d].cost, bytes));
                }
            }
            positions.push((forced, (need > 0).then_some((need, items))));
        }
        positions
    }

    /// The bounds as they were computed before the sweep: every position's cover.
    fn scanned(problem: &Problem, budget: u64) -> Bound {
        let mut peak = 0u64;
        let mut extra = Some(0u64);
        for (forced, over) in scanned_positions(problem, budget) {
            peak = peak.max(forced);
            if let Some((need, mut items)) = over {
                extra = match (extra, cover(&mut items, need, &mut 0)) {
                    (Some(e), Some(c)) => Some(e.max(c)),
                    _ => None,
                };
            }
        }
        Bound { peak, extra, cut: false }
    }

    #[test]
    fn each_positions_cover_lies_between_the_sweeps_relaxation_and_greedy_cover() {
        for seed in 0..500 {
            let mut rng = crate::rng::Rng::new(seed);
            let n = 2 + rng.below(40) as usize;
            let p = super::super::testing::random_problem(&mut rng, n);
            let plain: Vec<u32> = (0..n as u32).collect();
            let peak = super::super::evaluate(&p, &plain).unwrap().peak;
            for budget in [0, peak / 2, peak - peak / 4, rng.below(peak + 1)] {
                let positions = scanned_positions(&p, budget);
                let needs: Vec<u64> = positions.iter().map(|(_, over)| over.as_ref().map_or(0, |(need, _)| *need)).collect();
                let (last_use, read_by) = uses(&p);
                let estimates = fractional_covers(&p, &last_use, &read_by, &needs);
                for (t, (_, over)) in positions.into_iter().enumerate() {
                    let Some((need, mut items)) = over else { continue };
                    let Some(exact) = cover(&mut items.clone(), need, &mut 0) else { continue };
                    // The relaxation, from the items at hand (free ones first, as any ratio-0 item).
                    items.sort_by(|a, b| (a.0 as u128 * b.1 as u128).cmp(&(b.0 as u128 * a.1 as u128)));
                    let relaxation = Knapsack::new(&items).relaxation(0, need);
                    let (low, high) = estimates[t];
                    assert_eq!(low, relaxation, "seed {seed}, budget {budget}, position {t}");
                    assert!(low <= exact && exact <= high, "seed {seed}, budget {budget}, position {t}: {low} ≤ {exact} ≤ {high}");
                }
            }
        }
    }

    #[test]
    fn the_sweep_finds_what_a_scan_of_every_position_finds() {
        for seed in 0..500 {
            let mut rng = crate::rng::Rng::new(seed);
            let n = 2 + rng.below(40) as usize;
            let p = super::super::testing::random_problem(&mut rng, n);
            let plain: Vec<u32> = (0..n as u32).collect();
            let peak = super::super::evaluate(&p, &plain).unwrap().peak;
            for budget in [0, peak / 2, peak - peak / 4, peak, rng.below(peak + 1)] {
                assert_eq!(lower_bound(&p, budget), scanned(&p, budget), "seed {seed}, budget {budget}");
            }
        }
    }

    /// The relaxation as a scan of the suffix, item by item.
    fn relaxation_by_scan(items: &[(u64, u64)], need: u64) -> u64 {
        let mut left = need;
        let mut cost: u128 = 0;
        for &(c, b) in items {
            if left == 0 {
                break;
            }
            if b >= left {
                cost += (c as u128 * left as u128).div_ceil(b as u128);
                left = 0;
            } else {
                cost += c as u128;
                left -= b;
            }
        }
        if left > 0 { u64::MAX } else { u64::try_from(cost).unwrap_or(u64::MAX) }
    }

    /// The least cost of a cover, by trying every subset.
    fn cover_by_subsets(items: &[(u64, u64)], need: u64) -> Option<u64> {
        (0u32..1 << items.len())
            .filter(|set| items.iter().enumerate().filter(|(i, _)| set >> i & 1 == 1).map(|(_, &(_, b))| b).sum::<u64>() >= need)
            .map(|set| items.iter().enumerate().filter(|(i, _)| set >> i & 1 == 1).map(|(_, &(c, _))| c).sum::<u64>())
            .min()
    }

    #[test]
    fn the_relaxation_by_prefix_sums_is_the_scan_of_every_suffix() {
        let mut rng = crate::rng::Rng::new(7);
        for _ in 0..300 {
            let len = rng.below(12) as usize;
            let huge = rng.below(4) == 0;
            let mut items: Vec<(u64, u64)> = (0..len)
                .map(|_| if huge { (u64::MAX - rng.below(9), u64::MAX - rng.below(9)) } else { (1 + rng.below(20), 1 + rng.below(30)) })
                .collect();
            items.sort_by(|a, b| (a.0 as u128 * b.1 as u128).cmp(&(b.0 as u128 * a.1 as u128)));
            let knapsack = Knapsack::new(&items);
            for i in 0..=len {
                for need in [0, 1, rng.below(100), rng.below(400), u64::MAX / 2, u64::MAX] {
                    assert_eq!(knapsack.relaxation(i, need), relaxation_by_scan(&items[i..], need), "{items:?} from {i}, need {need}");
                }
            }
            if !huge {
                let need = rng.below(200);
                assert_eq!(cover(&mut items.clone(), need, &mut 0), cover_by_subsets(&items, need), "{items:?}, need {need}");
            }
        }
    }

    #[test]
    fn the_knapsack_cover_is_exact() {
        // Need 10: {6, 5} costs 4 + 4 = 8; {10} costs 9; the relaxation would say 6.67.
        let mut items = vec![(4, 6), (4, 5), (9, 10), (0, 0)];
        assert_eq!(cover(&mut items, 10, &mut 0), Some(8));
        assert_eq!(Knapsack::new(&[(4, 6), (4, 5)]).relaxation(0, 10), 8);
        assert_eq!(cover(&mut [(1, 3)], 4, &mut 0), None);
        // Free items are always taken.
        assert_eq!(cover(&mut [(0, 7), (5, 3), (2, 1)], 8, &mut 0), Some(2));
    }
}
