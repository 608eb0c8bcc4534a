//! The near-optimal strategy: a greedy that attacks the bytes over budget, then a large
//! neighbourhood search (ruin and recreate) over stage-form plans, every step evaluated
//! exactly by the simulator.
//!
//! **Moves.** A value's execution is live from its write through its reads; between two
//! consecutive reads (or the write and the first read) it sits in memory doing nothing. If
//! such a *gap* covers positions over budget, recomputing the value's writer in the stage
//! of the read that ends the gap splits the lifetime: the old execution dies at the read
//! that starts the gap. The recompute reads the writer's inputs, which extends *their*
//! lifetimes to the new position unless they are recomputed too; a move therefore comes in
//! three closures: the writer alone; the writer and every input whose extension would
//! cross a position over budget (recursively); the writer and every input whose lifetime
//! it would extend at all.
//!
//! A split also ends the old execution at the read that starts the gap: if that reader may
//! write over the value (a share, in-place reuse), the split can free bytes at the read
//! itself, so such moves are listed when that position is over budget.
//!
//! **Greedy repair** ([`Search::repair`]): while the peak is over budget, list every move
//! whose gap covers a position over budget, estimate each one's effect on the *excess
//! area* (bytes over budget summed over positions) per unit of compute, evaluate the best
//! few exactly and apply the one that removes the most area per unit of cost (zero-cost
//! nodes first). The area, not the peak, is the objective so that progress shows before
//! the peak itself moves (several positions are usually at the peak at once).
//!
//! **Clean-up** ([`Search::cleanup`]): drop recomputes nothing reads, then try removing
//! each recompute, the most expensive first, keeping every removal that still fits the
//! budget: the plan becomes locally minimal.
//!
//! **Search** ([`Search::improve`]): starting from the best of the greedy and the seeds
//! (Chen's plans, cleaned up), repeat a fixed number of times: ruin a copy of the current
//! plan (remove a few random recomputes, every recompute of one node, of one stage, or of
//! a window of stages), repair it with noisy choices (each ratio scaled by a random factor),
//! clean it up, and accept it if it costs no more than the current plan. The random
//! generator is seeded and the iteration count fixed, so the result is deterministic unless
//! the time limit cuts the search short.
//!
//! **The smallest peak** ([`Search::lower_peak`]): the greedy repair aimed at one byte below
//! the current peak, again and again until it cannot get lower; used to tell the smallest
//! budget that can work when a budget cannot be met.

use std::time::Instant;

use super::stages::{Score, Sim, StagePlan};
use super::{Node, Problem};
use crate::rng::Rng;

/// How many candidate moves are evaluated exactly in each step of the repair.
const EXACT_PER_STEP: usize = 12;

/// The most recomputes one move may add (larger closures are not considered).
const CLOSURE_LIMIT: usize = 32;

/// How many first and second moves [`Search::two_moves`] combines.
const LOOKAHEAD: usize = 6;

/// How many possible finishers (see [`Search::repair`]) are evaluated exactly in each step.
const FINISHERS: usize = 4;

/// Scale of the random factor on each move's ratio during the search's repairs.
const NOISE: f64 = 0.3;

/// Which inputs of a recompute are recomputed with it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Closure {
    /// None: every input's lifetime is extended.
    Alone,
    /// Those whose extension would cross a position over budget.
    Harmful,
    /// Every input whose lifetime would be extended.
    Full,
}

/// A move's recomputes, their cost, and the estimated area its extensions add.
type Closed = (Vec<(Node, Node)>, u64, f64);

/// A move: recomputes to add.
struct Candidate {
    pairs: Vec<(Node, Node)>,
    cost: u64,
    estimate: f64,
    /// Its gap covers every position over budget and its value is at least the largest
    /// excess: it might fix the plan on its own.
    finisher: bool,
}

/// The search state over one problem and budget.
pub struct Search<'p> {
    sim: Sim<'p>,
    problem: &'p Problem,
    budget: u64,
    deadline: Instant,
    rng: Rng,
    noise: f64,
    /// A tiny cost added to each move's so that free moves rank by what they remove.
    epsilon: f64,
    /// Positions at which each node runs, in the last detailed run.
    runs: Vec<Vec<u32>>,
    /// Positions over budget strictly before each position, in the last detailed run.
    over_before: Vec<u32>,
    /// Bytes over budget summed over the positions strictly before each position.
    excess_before: Vec<f64>,
    /// The nodes in the closure being built.
    marks: Marks,
}

/// A set of nodes, emptied in O(1).
struct Marks {
    stamp: Vec<u32>,
    epoch: u32,
}

impl Marks {
    fn clear(&mut self) {
        self.epoch += 1;
        if self.epoch == u32::MAX {
            self.stamp.iter_mut().for_each(|s| *s = 0);
            self.epoch = 1;
        }
    }

    fn set(&mut self, k: Node) {
        self.stamp[k as usize] = self.epoch;
    }

    fn has(&self, k: Node) -> bool {
        self.stamp[k as usize] == self.epoch
    }
}

impl Default for Marks {
    fn default() -> Marks {
        Marks { stamp: Vec::new(), epoch: 1 }
    }
}

impl<'p> Search<'p> {
    pub fn new(problem: &'p Problem, budget: u64, deadline: Instant) -> Search<'p> {
        let smallest_cost = problem.nodes.iter().map(|n| n.cost).filter(|&c| c > 0).min().unwrap_or(1);
        Search {
            sim: Sim::new(problem),
            problem,
            budget,
            deadline,
            rng: Rng::new(0x5EED),
            noise: 0.0,
            epsilon: smallest_cost as f64 * 1e-6,
            runs: vec![Vec::new(); problem.nodes.len()],
            over_before: Vec::new(),
            excess_before: Vec::new(),
            marks: Marks { stamp: vec![0; problem.nodes.len()], epoch: 1 },
        }
    }

    /// How many plans were run so far, and their summed lengths.
    pub fn runs(&self) -> (u64, u64) {
        (self.sim.runs, self.sim.work)
    }

    pub fn score(&mut self, plan: &StagePlan) -> Score {
        self.sim.score(plan, self.budget)
    }

    pub fn out_of_time(&self) -> bool {
        Instant::now() >= self.deadline
    }

    /// Positions over budget strictly between `a` and `b`.
    fn over_between(&self, a: u32, b: u32) -> u32 {
        if b <= a + 1 { 0 } else { self.over_before[b as usize] - self.over_before[a as usize + 1] }
    }

    /// An estimate of the excess area removed by freeing `size` bytes strictly between
    /// positions `a` and `b`: the bytes over budget there, at most `size` per position.
    fn gain(&self, a: u32, b: u32, size: u64) -> f64 {
        let count = self.over_between(a, b) as f64;
        let excess = self.excess_before[b as usize] - self.excess_before[a as usize + 1];
        excess.min(count * size as f64)
    }

    /// Every move whose gap covers a position over budget, from the last detailed run.
    fn candidates(&mut self, plan: &StagePlan) -> Vec<Candidate> {
        let sim = &self.sim;
        let problem = self.problem;
        let budget = self.budget;
        self.over_before.clear();
        self.over_before.push(0);
        self.excess_before.clear();
        self.excess_before.push(0.0);
        for &m in &sim.profile {
            let last = *self.over_before.last().unwrap();
            self.over_before.push(last + (m > budget) as u32);
            let last = *self.excess_before.last().unwrap();
            self.excess_before.push(last + m.saturating_sub(budget) as f64);
        }
        for r in self.runs.iter_mut() {
            r.clear();
        }
        for (p, &k) in sim.sequence.iter().enumerate() {
            self.runs[k as usize].push(p as u32);
        }
        let mut found: Vec<Candidate> = Vec::new();
        let mut marks = std::mem::take(&mut self.marks);
        let all_over = *self.over_before.last().unwrap();
        let largest_excess = sim.profile.iter().max().map_or(0, |&m| m.saturating_sub(budget));
        for (i, interval) in sim.intervals.iter().enumerate() {
            let value = &problem.values[interval.value as usize];
            let Some(w) = value.def else { continue };
            if !problem.nodes[w as usize].recomputable {
                continue;
            }
            // Gaps end at each read, and for a value that must survive, at the last
            // position: recomputing it in the last stage makes it born late.
            let last = sim.sequence.len() as u32 - 1;
            let tail = (value.to_end && interval.end == last && sim.stage_of[last as usize] > w).then_some(last);
            let mut previous = interval.start;
            for q in sim.reads_of(i).iter().copied().chain(tail) {
                let stage = sim.stage_of[q as usize];
                if q == previous {
                    continue;
                }
                // Split here, the execution dies at the read `previous`: if that reader may
                // write over it (a share), the bytes over budget there may go too.
                let shared = if previous != interval.start && sim.profile[previous as usize] > budget {
                    let reader = sim.sequence[previous as usize];
                    let over = sim.profile[previous as usize] - budget;
                    sim.shares(reader)
                        .iter()
                        .filter(|s| s.input == interval.value)
                        .map(|s| over.min(value.size.min(problem.values[s.output as usize].size)))
                        .max()
                        .unwrap_or(0)
                } else {
                    0
                };
                if (self.over_between(previous, q) > 0 || shared > 0) && sim.stage_of[previous as usize] != stage && !plan.has(stage, w) {
                    let gain = self.gain(previous, q, value.size) + shared as f64;
                    let finisher = self.over_between(previous, q) == all_over && value.size >= largest_excess;
                    let mut seen: Vec<Vec<(Node, Node)>> = Vec::new();
                    for closure in [Closure::Alone, Closure::Harmful, Closure::Full] {
                        let Some((pairs, cost, harm)) = self.closure(plan, stage, w, q, closure, &mut marks) else { continue };
                        if !seen.contains(&pairs) {
                            seen.push(pairs.clone());
                            let estimate = (gain - harm) / (cost as f64 + self.epsilon);
                            found.push(Candidate { pairs, cost, estimate, finisher });
                        }
                    }
                }
                previous = q;
            }
        }
        self.marks = marks;
        found
    }

    /// The recomputes of `w` in `stage` (for the read at position `q`) with its closure,
    /// their cost, and an estimate of the area the inputs' extensions add.
    fn closure(
        &self,
        plan: &StagePlan,
        stage: Node,
        w: Node,
        q: u32,
        closure: Closure,
        mark: &mut Marks,
    ) -> Option<Closed> {
        let sim = &self.sim;
        let problem = self.problem;
        mark.clear();
        mark.set(w);
        let mut pairs = vec![(stage, w)];
        let mut cost = problem.nodes[w as usize].cost;
        let mut harm = 0.0;
        let mut stack = vec![w];
        while let Some(x) = stack.pop() {
            for &u in sim.reads(x) {
                let Some(d) = problem.values[u as usize].def else { continue };
                if mark.has(d) || plan.has(stage, d) {
                    continue;
                }
                // The execution the new read binds to: d's latest before q.
                let runs = &self.runs[d as usize];
                let at = runs.partition_point(|&p| p < q);
                if at == 0 {
                    continue;
                }
                let p = runs[at - 1] as usize;
                let range = sim.first_interval[p] as usize..sim.first_interval[p + 1] as usize;
                let Some(interval) = sim.intervals[range].iter().find(|iv| iv.value == u) else { continue };
                if interval.end >= q {
                    continue;
                }
                let crossed = self.over_between(interval.end, q);
                let recompute = problem.nodes[d as usize].recomputable
                    && match closure {
                        Closure::Alone => false,
                        Closure::Harmful => crossed > 0,
                        Closure::Full => true,
                    };
                if recompute {
                    if pairs.len() == CLOSURE_LIMIT {
                        return None;
                    }
                    mark.set(d);
                    pairs.push((stage, d));
                    cost = cost.saturating_add(problem.nodes[d as usize].cost);
                    stack.push(d);
                } else {
                    harm += crossed as f64 * problem.values[u as usize].size as f64;
                }
            }
        }
        pairs.sort_unstable();
        Some((pairs, cost, harm))
    }

    /// Adds moves until the plan fits the budget; false if no move lowers the excess area
    /// (or time runs out), leaving the plan as far as it got. Each step also evaluates the
    /// cheapest moves that might fix every position at once: if one of them, added at some
    /// step, would have made a cheaper plan than the greedy's end, that plan is returned
    /// (the knapsack greedy's classic guard against a run of cheap small items).
    pub fn repair(&mut self, plan: &mut StagePlan) -> bool {
        let mut added: Vec<(Node, Node)> = Vec::new();
        let mut finish: Option<(u64, Vec<(Node, Node)>)> = None;
        let fits = loop {
            let score = self.sim.detail(plan, self.budget);
            if score.peak <= self.budget {
                break true;
            }
            if self.out_of_time() {
                break false;
            }
            let mut candidates = self.candidates(plan);
            candidates.sort_by(|a, b| b.estimate.total_cmp(&a.estimate));
            // The best by estimate, then the cheapest possible finishers.
            let mut order: Vec<usize> = (0..candidates.len().min(EXACT_PER_STEP)).collect();
            let mut finishers: Vec<usize> = (EXACT_PER_STEP..candidates.len()).filter(|&i| candidates[i].finisher).collect();
            finishers.sort_by_key(|&i| candidates[i].cost);
            order.extend(finishers.into_iter().take(FINISHERS));
            let mut best: Option<(f64, usize)> = None;
            for i in order {
                let c = &candidates[i];
                for &(s, v) in &c.pairs {
                    plan.insert(s, v);
                }
                let after = self.sim.score(plan, self.budget);
                for &(s, v) in &c.pairs {
                    plan.remove(s, v);
                }
                if after.peak <= self.budget && finish.as_ref().is_none_or(|(cost, _)| after.extra < *cost) {
                    finish = Some((after.extra, added.iter().chain(&c.pairs).copied().collect()));
                }
                if after.excess >= score.excess {
                    continue;
                }
                let gain = (score.excess - after.excess) as f64;
                let mut ratio = gain / (c.cost as f64 + self.epsilon);
                if self.noise > 0.0 {
                    ratio *= 1.0 + self.noise * (2.0 * self.rng.uniform() - 1.0);
                }
                if best.is_none_or(|(r, _)| ratio > r) {
                    best = Some((ratio, i));
                }
            }
            let chosen = match best {
                Some((_, i)) => std::mem::take(&mut candidates[i].pairs),
                None => match self.two_moves(plan, &candidates, score.excess) {
                    Some(pairs) => pairs,
                    None => break false,
                },
            };
            for (s, v) in chosen {
                if plan.insert(s, v) {
                    added.push((s, v));
                }
            }
        };
        let Some((cost, pairs)) = finish else { return fits };
        if fits && cost >= plan.extra_cost(self.problem) {
            return true;
        }
        for &(s, v) in &added {
            plan.remove(s, v);
        }
        for &(s, v) in &pairs {
            plan.insert(s, v);
        }
        true
    }

    /// When no single move lowers the excess area (a plateau: fixing one position moves the
    /// peak to another), the pair of moves — one of the best few by estimate, then one of
    /// the best few after it — that lowers it the most per unit of cost, if any does.
    fn two_moves(&mut self, plan: &mut StagePlan, firsts: &[Candidate], excess: u128) -> Option<Vec<(Node, Node)>> {
        let mut best: Option<(f64, Vec<(Node, Node)>)> = None;
        for first in firsts.iter().take(LOOKAHEAD) {
            if self.out_of_time() {
                break;
            }
            let inserted: Vec<(Node, Node)> = first.pairs.iter().copied().filter(|&(s, v)| plan.insert(s, v)).collect();
            self.sim.detail(plan, self.budget);
            let mut seconds = self.candidates(plan);
            seconds.sort_by(|a, b| b.estimate.total_cmp(&a.estimate));
            for second in seconds.iter().take(LOOKAHEAD) {
                let more: Vec<(Node, Node)> = second.pairs.iter().copied().filter(|&(s, v)| plan.insert(s, v)).collect();
                let after = self.sim.score(plan, self.budget);
                if after.excess < excess {
                    let ratio = (excess - after.excess) as f64 / ((first.cost + second.cost) as f64 + self.epsilon);
                    if best.as_ref().is_none_or(|(r, _)| ratio > *r) {
                        best = Some((ratio, inserted.iter().chain(&more).copied().collect()));
                    }
                }
                for (s, v) in more {
                    plan.remove(s, v);
                }
            }
            for (s, v) in inserted {
                plan.remove(s, v);
            }
        }
        best.map(|(_, pairs)| pairs)
    }

    /// Removes recomputes whose values nothing reads (and so on, transitively).
    pub fn prune(&mut self, plan: &mut StagePlan) {
        // Each removal frees bytes and adds none, so stopping at the time limit keeps a
        // plan that fits.
        while !self.out_of_time() {
            self.sim.detail(plan, self.budget);
            let sim = &self.sim;
            let used: Vec<bool> = (0..sim.intervals.len()).map(|i| !sim.reads_of(i).is_empty()).collect();
            let mut useless = Vec::new();
            for (p, &k) in sim.sequence.iter().enumerate() {
                if k == sim.stage_of[p] {
                    continue;
                }
                let range = sim.first_interval[p] as usize..sim.first_interval[p + 1] as usize;
                let keep = range.into_iter().any(|i| used[i] || self.problem.values[sim.intervals[i].value as usize].to_end);
                if !keep {
                    useless.push((sim.stage_of[p], k));
                }
            }
            if useless.is_empty() {
                return;
            }
            for (s, v) in useless {
                plan.remove(s, v);
            }
        }
    }

    /// Prunes, then removes every recompute it can (most expensive first) while the plan
    /// still fits. A removal is tried only if no value of the recompute, extended back to
    /// its previous execution, would then cross a position over budget in the last
    /// detailed run (a removal that fails that test almost never fits).
    pub fn cleanup(&mut self, plan: &mut StagePlan) {
        self.prune(plan);
        let mut pairs = plan.pairs();
        pairs.sort_by_key(|&(s, v)| (std::cmp::Reverse(self.problem.nodes[v as usize].cost), s, v));
        for (s, v) in pairs {
            if self.out_of_time() {
                return; // every removal kept still fits
            }
            if !plan.has(s, v) || !self.may_remove(plan, s, v) {
                continue;
            }
            plan.remove(s, v);
            if self.sim.score(plan, self.budget).peak > self.budget {
                plan.insert(s, v);
            } else {
                self.sim.detail(plan, self.budget);
            }
        }
        self.prune(plan);
    }

    /// Whether removing the recompute of `v` in stage `s` might fit (see [`Search::cleanup`];
    /// the simulator holds the detailed run of `plan`).
    fn may_remove(&self, plan: &StagePlan, s: Node, v: Node) -> bool {
        let sim = &self.sim;
        let index = plan.stages[s as usize].binary_search(&v).expect("the pair is in the plan");
        let at = sim.stage_start[s as usize] as usize + index;
        // The previous execution of v.
        let Some(before) = (0..at).rev().find(|&p| sim.sequence[p] == v) else { return true };
        let range = sim.first_interval[before] as usize..sim.first_interval[before + 1] as usize;
        sim.intervals[range].iter().all(|interval| {
            let size = self.problem.values[interval.value as usize].size;
            let from = interval.end as usize + 1;
            from > at || sim.profile[from..=at].iter().all(|&m| m.saturating_add(size) <= self.budget)
        })
    }

    /// Removes some recomputes at random.
    fn ruin(&mut self, plan: &mut StagePlan) {
        let pairs = plan.pairs();
        if pairs.is_empty() {
            return;
        }
        let pick = pairs[self.rng.below(pairs.len() as u64) as usize];
        match self.rng.below(4) {
            0 => {
                plan.remove(pick.0, pick.1);
                for _ in 0..self.rng.below(3) {
                    let (s, v) = pairs[self.rng.below(pairs.len() as u64) as usize];
                    plan.remove(s, v);
                }
            }
            1 => {
                for &(s, v) in pairs.iter().filter(|&&(_, v)| v == pick.1) {
                    plan.remove(s, v);
                }
            }
            2 => plan.stages[pick.0 as usize].clear(),
            _ => {
                let width = 1 + self.rng.below(8) as usize;
                let from = (pick.0 as usize).saturating_sub(self.rng.below(width as u64) as usize);
                for stage in plan.stages.iter_mut().skip(from).take(width) {
                    stage.clear();
                }
            }
        }
    }

    /// Ruin-and-recreate from `start` (which fits) for `iterations` rounds, or until a plan
    /// costs no more than `floor` (a lower bound: it is optimal); the cheapest plan found
    /// (then the lowest peak).
    pub fn improve(&mut self, start: StagePlan, iterations: usize, floor: u64) -> StagePlan {
        let mut current = start;
        let mut current_cost = current.extra_cost(self.problem);
        let mut best = current.clone();
        let mut best_key = (current_cost, self.score(&best).peak);
        let work_limit = self.sim.work.saturating_add(WORK);
        for _ in 0..iterations {
            if best_key.0 <= floor || self.sim.work > work_limit || self.out_of_time() {
                break;
            }
            let mut candidate = current.clone();
            self.ruin(&mut candidate);
            self.prune(&mut candidate);
            self.noise = NOISE;
            let fits = self.repair(&mut candidate);
            self.noise = 0.0;
            if !fits {
                continue;
            }
            self.cleanup(&mut candidate);
            let cost = candidate.extra_cost(self.problem);
            if cost <= current_cost {
                let key = (cost, self.score(&candidate).peak);
                if key < best_key {
                    best_key = key;
                    best = candidate.clone();
                }
                current = candidate;
                current_cost = cost;
            }
        }
        best
    }

    /// Lowers the peak of `plan` as far as the greedy can, whatever it costs, stopping
    /// once it is at most `goal`; returns the peak reached. Each round aims one byte below
    /// the current peak, so the path taken does not depend on `goal` or the budget.
    pub fn lower_peak(&mut self, plan: &mut StagePlan, goal: u64) -> u64 {
        let budget = self.budget;
        let mut peak = self.sim.score(plan, budget).peak;
        while peak > goal && !self.out_of_time() {
            self.budget = peak - 1;
            let mut candidate = plan.clone();
            if !self.repair(&mut candidate) {
                break;
            }
            peak = self.sim.score(&candidate, self.budget).peak;
            *plan = candidate;
        }
        self.budget = budget;
        peak
    }
}

/// How many ruin-and-recreate rounds [`near_optimal`] runs at most.
pub const ITERATIONS: usize = 2000;

/// The most positions [`Search::improve`] simulates (summed over the plans it runs): what
/// usually ends the search, in proportion to the problem's size, without making the result
/// depend on the clock (on Checkmate's graphs the search finds nothing better past about
/// 2 million).
pub const WORK: u64 = 2_500_000;

/// How many of the cheapest seeds that fit are cleaned up as starting points.
pub const SEEDS: usize = 8;

/// The cheapest plan the search finds that fits `budget`, or the smallest peak it can reach
/// (never above a given seed's; the caller takes the seeds it left out into account).
/// Each seed comes with its score at `budget` (`Sim::score`).
/// `floor` is a lower bound on the extra cost of any plan that fits ([`super::bound`]): the
/// search stops at a plan that meets it.
pub fn near_optimal(problem: &Problem, budget: u64, seeds: &[(&StagePlan, Score)], floor: u64, deadline: Instant) -> Result<StagePlan, u64> {
    let n = problem.nodes.len();
    let mut search = Search::new(problem, budget, deadline);
    // Starting points that fit, with their (extra cost, peak). (Past the time limit, the
    // seeds alone: the greedy would stop at once anyway.)
    let mut starts: Vec<((u64, u64), StagePlan)> = Vec::new();
    let mut greedy = StagePlan::empty(n);
    if !search.out_of_time() && search.repair(&mut greedy) {
        let score = search.score(&greedy);
        starts.push(((score.extra, score.peak), greedy));
    }
    // The cheapest seeds that fit.
    let mut fitting: Vec<_> = seeds.iter().filter(|(_, score)| score.peak <= budget).collect();
    fitting.sort_by_key(|(_, score)| (score.extra, score.peak));
    starts.extend(fitting.into_iter().take(SEEDS).map(|(seed, score)| ((score.extra, score.peak), (*seed).clone())));
    if starts.is_empty() {
        let mut plan = StagePlan::empty(n);
        let reached = search.lower_peak(&mut plan, budget);
        if reached > budget {
            let lowest_seed = seeds.iter().map(|(_, score)| score.peak).min().unwrap_or(u64::MAX);
            return Err(reached.min(lowest_seed));
        }
        let score = search.score(&plan);
        starts.push(((score.extra, score.peak), plan));
    }
    // Each start cleaned up, while there is time (cleaning up only lowers the cost).
    let mut best: Option<((u64, u64), StagePlan)> = None;
    for (mut key, mut start) in starts {
        if !search.out_of_time() {
            search.cleanup(&mut start); // stops at the time limit (the plan still fits)
            let score = search.score(&start);
            key = (score.extra, score.peak);
        }
        if best.as_ref().is_none_or(|(k, _)| key < *k) {
            best = Some((key, start));
        }
    }
    let (_, start) = best.expect("at least one start fits");
    if search.out_of_time() {
        return Ok(start);
    }
    Ok(search.improve(start, ITERATIONS, floor))
}

/// The smallest peak the search can reach from no recomputes.
pub fn smallest_peak(problem: &Problem, deadline: Instant) -> u64 {
    let mut search = Search::new(problem, u64::MAX, deadline);
    let mut plan = StagePlan::empty(problem.nodes.len());
    search.lower_peak(&mut plan, 0)
}
