//! [`minimize`]: the smallest arena the exact search (`exact.rs`) finds within the limits.
//!
//! Searches at one capacity take very different times (a slightly smaller capacity can be
//! much easier, and the lower bound, where the search ends, is reachable on most real
//! lists), so no single capacity gets all the effort. Rounds of probes go between the
//! proved bound and the best arena; every decision counts search nodes, never time, so
//! the same node budget gives the same answer on every machine.

use std::collections::HashMap;
use std::time::Instant;

use super::exact::{ExactResult, Limits, Prepared, Restart};
use super::{Live, Solution, arena_of};
use crate::progress::{Progress, Silent};

/// Search nodes each probe may take in the first round (doubled each round without a
/// jump).
const PROBE_NODES: u64 = 1_000;

/// Probes per round between the bound and the best: 1/2, 1/4, ... of the gap below the
/// best.
const PROBE_STEPS: u32 = 5;

/// Tightens `start` (a valid placement of `intervals`) towards `lower_bound` until the
/// limits, and sets `proved_optimal` when the best arena is shown minimal.
///
/// Each round probes [`super::exact::exact`]'s search at the proved bound `lo` first, then
/// 1/2, 1/4, ..., 1/32 of the gap down from the best arena (lowest first: a placement
/// there is the biggest jump), then just below the best.
/// A placement lowers the best, a proof raises `lo`; either ends the round. Searches resume
/// where the last probe at the same capacity stopped, so no run is repeated. The probe at
/// `lo` keeps pace with all others together (the bound is reachable on most real lists and
/// ends the search); every other probe gets a share of nodes that doubles after a round
/// without a jump (nothing found, or only just below the best).
pub fn minimize(intervals: &[Live], lower_bound: u64, start: Solution, limits: Limits) -> Solution {
    minimize_reporting(intervals, lower_bound, start, limits, &Silent)
}

/// [`minimize`], reporting to `progress` before each round of probes: the milliseconds
/// spent of those until the deadline, the best arena and the bound proved so far.
pub fn minimize_reporting(intervals: &[Live], lower_bound: u64, start: Solution, limits: Limits, progress: &dyn Progress) -> Solution {
    let began = Instant::now();
    let millis = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    progress.start("exact offsets", millis(limits.deadline.saturating_duration_since(began)));
    let best = minimize_rounds(intervals, lower_bound, start, limits, &|best: &Solution, proved: u64| {
        progress.update(millis(began.elapsed()), &format!("best arena {} B, none below {proved} B", best.arena));
    });
    progress.finish();
    best
}

/// The search of [`minimize`]; `round` hears the best solution and the proved bound before
/// each round.
fn minimize_rounds(intervals: &[Live], lower_bound: u64, start: Solution, limits: Limits, round: &dyn Fn(&Solution, u64)) -> Solution {
    let mut best = start;
    let mut prepared = Prepared::new(intervals);
    if !prepared.searchable() {
        return best;
    }
    // Tight placements only have arenas that are multiples of the sizes' gcd.
    let g = prepared.granularity();
    let mut lo = lower_bound.div_ceil(g).checked_mul(g).unwrap_or(lower_bound);
    let mut share = PROBE_NODES;
    // Nodes in all, and in probes at the bound.
    let (mut spent, mut at_bound) = (0u64, 0u64);
    // Where the search at each probed capacity goes on.
    let mut restarts: HashMap<u64, Restart> = HashMap::new();
    loop {
        round(&best, lo);
        if best.arena <= lo {
            best.proved_optimal = true;
            return best;
        }
        let top = (best.arena - 1) / g * g;
        let span = top - lo;
        let down = |d: u64| (top - d) / g * g;
        let mut caps = vec![lo];
        caps.extend((1..=PROBE_STEPS).map(|k| down(span >> k)));
        caps.push(top);
        caps.dedup();
        let mut jumped = false;
        for capacity in caps {
            // The bound keeps pace with all other probes together (at least a share a
            // round): on most lists it is reachable, and reaching it ends the search.
            let nodes = if capacity == lo { (spent - at_bound).saturating_sub(at_bound).max(share) } else { share };
            let left = limits.nodes.saturating_sub(spent);
            if Instant::now() >= limits.deadline || left == 0 {
                return best;
            }
            let restart = restarts.entry(capacity).or_default();
            let (result, used) = prepared.solve_from(capacity, Limits { deadline: limits.deadline, nodes: nodes.min(left) }, restart);
            spent = spent.saturating_add(used);
            if capacity == lo {
                at_bound = at_bound.saturating_add(used);
            }
            match result {
                ExactResult::Found(offsets) => {
                    if let Some(arena) = arena_of(intervals, &offsets).filter(|&a| a < best.arena) {
                        best = Solution { offsets, arena, proved_optimal: false };
                        jumped = capacity < top;
                        break;
                    }
                }
                ExactResult::Infeasible => {
                    lo = lo.max(capacity.saturating_add(g));
                    jumped = true;
                    break;
                }
                ExactResult::TimedOut => {}
            }
        }
        if !jumped {
            share = share.saturating_mul(2);
        }
    }
}


#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::time::Duration;

    use super::*;
    use crate::rng::Rng;
    use crate::solve::offsets::{bestfit, lower_bound};

    /// Splits the rectangle `times` x `bytes` at random into `out` (a perfect packing of
    /// height `bytes.1 - bytes.0`, so the lower bound is reachable).
    fn tile(rng: &mut Rng, times: (usize, usize), bytes: (u64, u64), depth: u32, out: &mut Vec<Live>) {
        let mut below = |n: u64| rng.below(n.max(1));
        let units = (bytes.1 - bytes.0) / 64;
        if depth == 0 || (times.1 - times.0 < 2 && units < 2) {
            out.push(Live { first: times.0, last: times.1 - 1, size: bytes.1 - bytes.0 });
        } else if (below(2) == 0 && times.1 - times.0 >= 2) || units < 2 {
            let t = times.0 + 1 + below((times.1 - times.0 - 1) as u64) as usize;
            tile(rng, (times.0, t), bytes, depth - 1, out);
            tile(rng, (t, times.1), bytes, depth - 1, out);
        } else {
            let m = bytes.0 + 64 * (1 + below(units - 1));
            tile(rng, times, (bytes.0, m), depth - 1, out);
            tile(rng, times, (m, bytes.1), depth - 1, out);
        }
    }

    #[test]
    fn a_search_resumed_in_pieces_ends_as_one_run_does() {
        let mut searched = 0;
        for k in 0..30u64 {
            let (mut rng, mut intervals) = (Rng::new(k), Vec::new());
            tile(&mut rng, (0, 40), (0, 64 * 60), 9, &mut intervals);
            let lower = crate::solve::offsets::max_live(&intervals).unwrap().0;
            let far = Instant::now() + std::time::Duration::from_secs(600);
            let mut prepared = Prepared::new(&intervals);
            let (whole, used) = prepared.solve_from(lower, Limits { deadline: far, nodes: 200_000 }, &mut Restart::default());
            if whole == ExactResult::TimedOut {
                continue;
            }
            // Pieces of growing size, each going on where the last stopped.
            let (mut restart, mut piece, mut pieces) = (Restart::default(), 50u64, 0);
            let resumed = loop {
                match prepared.solve_from(lower, Limits { deadline: far, nodes: piece }, &mut restart) {
                    (ExactResult::TimedOut, _) => {
                        piece *= 2;
                        pieces += 1;
                    }
                    (verdict, _) => break verdict,
                }
            };
            assert_eq!(resumed, whole, "tiling {k}");
            searched += usize::from(used > 50 && pieces > 1);
        }
        assert!(searched >= 3, "too few tilings needed a search in pieces ({searched})");
    }

    /// Remembers every report.
    #[derive(Default)]
    struct Record(RefCell<Vec<String>>);

    impl Progress for Record {
        fn start(&self, what: &str, total: u64) {
            self.0.borrow_mut().push(format!("start {what} {}", total > 0));
        }
        fn update(&self, _: u64, note: &str) {
            self.0.borrow_mut().push(format!("update {note}"));
        }
        fn finish(&self) {
            self.0.borrow_mut().push("finish".into());
        }
    }

    #[test]
    fn the_exact_search_reports_each_probe() {
        // Best-fit places these in 5 bytes; 4 is optimal (a placement exists at the bound).
        let live = |first, last, size| Live { first, last, size };
        let intervals = [live(0, 1, 2), live(0, 0, 1), live(1, 2, 1), live(2, 3, 2), live(3, 3, 2), live(1, 1, 1)];
        let offsets = bestfit::best_fit(&intervals).unwrap();
        let arena = arena_of(&intervals, &offsets).unwrap();
        let lower = lower_bound(&intervals).unwrap();
        let start = Solution { offsets, arena, proved_optimal: arena == lower };
        let record = Record::default();
        let limits = Limits::until(Instant::now() + Duration::from_secs(5));
        let found = minimize_reporting(&intervals, lower, start, limits, &record);
        assert!(found.proved_optimal && found.arena == lower, "{found:?}");
        let log = record.0.into_inner();
        assert_eq!(log.first().map(String::as_str), Some("start exact offsets true"));
        assert_eq!(log.last().map(String::as_str), Some("finish"));
        let last_update = log.iter().rev().find(|l| l.starts_with("update")).unwrap();
        assert_eq!(last_update, &format!("update best arena {lower} B, none below {lower} B"));
    }
}
