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

/// The bounds for `budget` (see the module doc).
pub fn lower_bound(problem: &Problem, budget: u64) -> Bound {
    let n = problem.nodes.len();
    // For each value: the last reader (or n for survivors), and whether node t reads it.
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
        extra = match (extra, cover(&mut items, need)) {
            (Some(e), Some(c)) => Some(e.max(c)),
            _ => None,
        };
    }
    Bound { peak, extra }
}

/// The least cost of items (cost, bytes) whose bytes sum to at least `need`, or a lower
/// bound on it; `None` if all of them together fall short.
fn cover(items: &mut [(u64, u64)], need: u64) -> Option<u64> {
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
    let mut nodes = 0usize;
    let best = branch(items, need, 0, u64::MAX, &mut nodes);
    Some(if nodes > NODE_LIMIT { relaxation(items, need) } else { best })
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

    #[test]
    fn the_knapsack_cover_is_exact() {
        // Need 10: {6, 5} costs 4 + 4 = 8; {10} costs 9; the relaxation would say 6.67.
        let mut items = vec![(4, 6), (4, 5), (9, 10), (0, 0)];
        assert_eq!(cover(&mut items, 10), Some(8));
        assert_eq!(relaxation(&[(4, 6), (4, 5)], 10), 8);
        assert_eq!(cover(&mut [(1, 3)], 4), None);
        // Free items are always taken.
        assert_eq!(cover(&mut [(0, 7), (5, 3), (2, 1)], 8), Some(2));
    }
}
