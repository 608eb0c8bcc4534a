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
//! in O(nodes + values + reads); then the covers, the positions needing the most bytes
//! first, each O(values) plus its knapsack, within a fixed amount of work ([`WORK`]; the
//! result stays the same on every machine): past it the other positions are skipped, which
//! keeps a valid, weaker bound (each position per value was O(nodes × values) for the
//! peak alone: 20,000 nodes took a second).

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
}

/// Branch-and-bound nodes per position before falling back to the relaxation.
const NODE_LIMIT: usize = 20_000;

/// The most work (values scanned, items and branch-and-bound nodes) the covers of
/// [`lower_bound`] may take: the positions needing the most bytes come first, the rest are
/// skipped past it (every position's cover is a lower bound, so the most over fewer of
/// them still is, only weaker). The 18 benchmark rows take at most a few million; a
/// 20,000-node graph over budget at 10,000 positions, each with thousands of droppable
/// values, took seconds per budget without it.
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
    let Some(mut best) = extra else { return Bound { peak, extra: None } };
    // The covers, the positions needing the most first, within the work limit.
    over.sort_unstable_by_key(|&(need, t)| (std::cmp::Reverse(need), t));
    let mut work = 0u64;
    let mut by_writer = vec![0u64; n];
    let mut writers: Vec<usize> = Vec::new();
    let mut items: Vec<(u64, u64)> = Vec::new();
    for (need, t) in over {
        if work > WORK || deadline.is_some_and(|d| Instant::now() >= d) {
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
    Bound { peak, extra: Some(best) }
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
    let items = &mut items.iter().copied().filter(|&(c, _)| c > 0).collect::<Vec<_>>()[..];
    // Cheapest per byte first.
    items.sort_by(|a, b| (a.0 as u128 * b.1 as u128).cmp(&(b.0 as u128 * a.1 as u128)));
    let best = branch(items, need, 0, u64::MAX, nodes);
    Some(if *nodes > NODE_LIMIT { relaxation(items, need) } else { best })
}

/// The linear relaxation: take items in order, the last one fractionally (rounded up: costs
/// are integers).
fn relaxation(items: &[(u64, u64)], need: u64) -> u64 {
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

/// The least cost to cover `need` with `items[i..]` if it is below `limit`, else `limit`
/// (depth first, pruned by the relaxation; gives up past [`NODE_LIMIT`] nodes).
fn branch(items: &[(u64, u64)], need: u64, i: usize, limit: u64, nodes: &mut usize) -> u64 {
    if need == 0 {
        return 0;
    }
    *nodes += 1;
    if *nodes > NODE_LIMIT || i == items.len() || relaxation(&items[i..], need) >= limit {
        return limit;
    }
    let (c, b) = items[i];
    let mut best = limit;
    if c < best {
        let take = branch(items, need.saturating_sub(b), i + 1, best - c, nodes);
        if take < best - c {
            best = take + c;
        }
    }
    branch(items, need, i + 1, best, nodes)
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
        assert_eq!(lower_bound(&p, plain), Bound { peak: 202, extra: Some(0) });
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


    /// The bounds as they were computed before the sweep: every value at every position.
    fn scanned(problem: &Problem, budget: u64) -> Bound {
        let n = problem.nodes.len();
        let (last_use, read_by) = uses(problem);
        let shares = problem.shares_by_node();
        let mut peak = 0u64;
        let mut extra = Some(0u64);
        let mut reads_t = vec![false; problem.values.len()];
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
            peak = peak.max(forced);
            let droppable: u64 = by_writer.iter().fold(0u64, |a, &b| a.saturating_add(b));
            let need = forced.saturating_add(droppable).saturating_sub(budget);
            if need == 0 {
                continue;
            }
            for (d, &bytes) in by_writer.iter().enumerate() {
                if bytes > 0 {
                    items.push((problem.nodes[d].cost, bytes));
                }
            }
            extra = match (extra, cover(&mut items, need, &mut 0)) {
                (Some(e), Some(c)) => Some(e.max(c)),
                _ => None,
            };
        }
        Bound { peak, extra }
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

    #[test]
    fn the_knapsack_cover_is_exact() {
        // Need 10: {6, 5} costs 4 + 4 = 8; {10} costs 9; the relaxation would say 6.67.
        let mut items = vec![(4, 6), (4, 5), (9, 10), (0, 0)];
        assert_eq!(cover(&mut items, 10, &mut 0), Some(8));
        assert_eq!(relaxation(&[(4, 6), (4, 5)], 10), 8);
        assert_eq!(cover(&mut [(1, 3)], 4, &mut 0), None);
        // Free items are always taken.
        assert_eq!(cover(&mut [(0, 7), (5, 3), (2, 1)], 8, &mut 0), Some(2));
    }
}
