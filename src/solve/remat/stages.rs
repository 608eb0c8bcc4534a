//! Stage-form plans and a fast, exact simulator of the evaluation rule.
//!
//! With the order of first executions fixed to the problem's own (index) order — Checkmate's
//! setting — a strategy is a set of pairs *(stage t, node v < t)*: "recompute v just before
//! node t runs". Stage `t` is `R_t` (its recomputes, in ascending node order: index order is
//! topological, so a recompute's inputs are written before it within the stage) followed by
//! `t` itself. [`StagePlan`] holds the sets; [`StagePlan::sequence`] concatenates the
//! stages. Every such sequence is valid: a recompute of `v` reads values whose writers are
//! `< v`, and each already ran at its own stage. Conversely every Checkmate schedule for the fixed order is
//! a plan, and the rule frees each execution right after its last bound reader, which is the
//! least memory that schedule's recompute matrix allows.
//!
//! [`Sim`] applies the evaluation rule of the module above ([`super::evaluate`]) to a plan
//! with buffers reused between calls (no allocation in the hot loop): [`Sim::score`] gives
//! the peak, the extra cost and the *excess area* over a budget (the bytes over budget
//! summed over positions: a smooth measure of how far a plan is from fitting);
//! [`Sim::detail`] also keeps every execution's interval, its reads and the profile, for
//! the search to choose moves from. Tests check both against [`super::evaluate`].

use super::{Node, Problem, Share, shared_bytes};

/// Recomputes by stage: `stages[t]` runs, ascending, just before node `t`.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct StagePlan {
    pub stages: Vec<Vec<Node>>,
}

impl StagePlan {
    /// No recomputes: the problem's own order.
    pub fn empty(nodes: usize) -> StagePlan {
        StagePlan { stages: vec![Vec::new(); nodes] }
    }

    /// The execution sequence: each stage's recomputes, then its node.
    pub fn sequence(&self) -> Vec<Node> {
        let mut sequence = Vec::with_capacity(self.stages.len() + self.recomputes());
        for (t, stage) in self.stages.iter().enumerate() {
            sequence.extend_from_slice(stage);
            sequence.push(t as Node);
        }
        sequence
    }

    /// How many recomputes the plan has.
    pub fn recomputes(&self) -> usize {
        self.stages.iter().map(Vec::len).sum()
    }

    /// Whether `v` is recomputed in stage `t`.
    pub fn has(&self, t: Node, v: Node) -> bool {
        self.stages[t as usize].binary_search(&v).is_ok()
    }

    /// Adds "recompute `v` before `t`" (`v < t`); false if it was there.
    pub fn insert(&mut self, t: Node, v: Node) -> bool {
        debug_assert!(v < t, "a recompute runs before a later node");
        let stage = &mut self.stages[t as usize];
        match stage.binary_search(&v) {
            Ok(_) => false,
            Err(i) => {
                stage.insert(i, v);
                true
            }
        }
    }

    /// Removes "recompute `v` before `t`"; false if it was not there.
    pub fn remove(&mut self, t: Node, v: Node) -> bool {
        let stage = &mut self.stages[t as usize];
        match stage.binary_search(&v) {
            Ok(i) => {
                stage.remove(i);
                true
            }
            Err(_) => false,
        }
    }

    /// Every pair (stage, node), by stage then node.
    pub fn pairs(&self) -> Vec<(Node, Node)> {
        self.stages.iter().enumerate().flat_map(|(t, s)| s.iter().map(move |&v| (t as Node, v))).collect()
    }

    /// The summed cost of the recomputes.
    pub fn extra_cost(&self, problem: &Problem) -> u64 {
        self.stages.iter().flatten().fold(0u64, |acc, &v| acc.saturating_add(problem.nodes[v as usize].cost))
    }
}

/// One execution's value: live from `start` to `end` inclusive.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Interval {
    pub value: u32,
    pub start: u32,
    pub end: u32,
}

/// What [`Sim::score`] measures.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Score {
    pub peak: u64,
    /// The summed cost of the recomputes.
    pub extra: u64,
    /// Bytes over the budget summed over positions.
    pub excess: u128,
}

/// The evaluation rule on plans, with reusable buffers.
pub struct Sim<'p> {
    problem: &'p Problem,
    /// Values written by each node (CSR: `writes[write_at[k]..write_at[k + 1]]`).
    write_at: Vec<u32>,
    writes: Vec<u32>,
    /// Values read by each node, without repeats (CSR).
    node_read_at: Vec<u32>,
    reads: Vec<u32>,
    /// Values without a writer (live from position 0).
    inputs: Vec<u32>,
    /// Values that must survive to the end.
    survivors: Vec<u32>,
    sizes: Vec<u64>,
    /// The shares of each node (see [`super::Problem::shares`]).
    shares: Vec<Vec<Share>>,
    /// (position, value, interval) of every read of a share's input in the last run.
    share_reads: Vec<(u32, u32, u32)>,
    /// The sequence of the last run and the stage of each position.
    pub sequence: Vec<Node>,
    pub stage_of: Vec<u32>,
    /// The first position of each stage.
    pub stage_start: Vec<u32>,
    /// The interval of every execution of the last run (after [`Sim::detail`]: complete).
    pub intervals: Vec<Interval>,
    /// `intervals[first_interval[p]..first_interval[p + 1]]` were written at position `p`
    /// (after the values without a writer, which come first).
    pub first_interval: Vec<u32>,
    /// Each value's current interval while running (every value is written, or is an
    /// input, before it is read: plans are valid sequences).
    current: Vec<u32>,
    /// (interval, position) of every read of the last [`Sim::detail`], by position.
    read_log: Vec<(u32, u32)>,
    /// After [`Sim::detail`]: the positions reading interval `i` are
    /// `sorted_reads[read_at[i]..read_at[i + 1]]`, ascending.
    pub read_at: Vec<u32>,
    pub sorted_reads: Vec<u32>,
    /// Bytes live at each position (after [`Sim::detail`]).
    pub profile: Vec<u64>,
    delta: Vec<i128>,
    /// How many plans were run (scored or detailed) so far, and their summed lengths.
    pub runs: u64,
    pub work: u64,
}

impl<'p> Sim<'p> {
    /// The positions reading interval `i` in the last [`Sim::detail`], ascending.
    pub fn reads_of(&self, i: usize) -> &[u32] {
        &self.sorted_reads[self.read_at[i] as usize..self.read_at[i + 1] as usize]
    }

    pub fn new(problem: &'p Problem) -> Sim<'p> {
        let n = problem.nodes.len();
        let mut writes_by: Vec<Vec<u32>> = vec![Vec::new(); n];
        let mut reads_by: Vec<Vec<u32>> = vec![Vec::new(); n];
        let mut inputs = Vec::new();
        for (v, value) in problem.values.iter().enumerate() {
            match value.def {
                Some(d) => writes_by[d as usize].push(v as u32),
                None => inputs.push(v as u32),
            }
            for &r in &value.readers {
                if reads_by[r as usize].last() != Some(&(v as u32)) {
                    reads_by[r as usize].push(v as u32);
                }
            }
        }
        let csr = |lists: Vec<Vec<u32>>| {
            let mut at = vec![0u32];
            let mut flat = Vec::new();
            for mut list in lists {
                list.sort_unstable();
                list.dedup();
                flat.extend(list);
                at.push(flat.len() as u32);
            }
            (at, flat)
        };
        let (write_at, writes) = csr(writes_by);
        let (node_read_at, reads) = csr(reads_by);
        Sim {
            problem,
            write_at,
            writes,
            node_read_at,
            reads,
            inputs,
            survivors: (0..problem.values.len() as u32).filter(|&v| problem.values[v as usize].to_end).collect(),
            sizes: problem.values.iter().map(|v| v.size).collect(),
            shares: problem.shares_by_node(),
            share_reads: Vec::new(),
            sequence: Vec::new(),
            stage_of: Vec::new(),
            stage_start: Vec::new(),
            intervals: Vec::new(),
            first_interval: Vec::new(),
            current: vec![0; problem.values.len()],
            read_log: Vec::new(),
            read_at: Vec::new(),
            sorted_reads: Vec::new(),
            profile: Vec::new(),
            delta: Vec::new(),
            runs: 0,
            work: 0,
        }
    }

    pub fn problem(&self) -> &'p Problem {
        self.problem
    }

    /// The values node `k` writes.
    pub fn writes(&self, k: Node) -> &[u32] {
        &self.writes[self.write_at[k as usize] as usize..self.write_at[k as usize + 1] as usize]
    }

    /// The shares of node `k`.
    pub fn shares(&self, k: Node) -> &[Share] {
        &self.shares[k as usize]
    }

    /// The values node `k` reads (no repeats).
    pub fn reads(&self, k: Node) -> &[u32] {
        &self.reads[self.node_read_at[k as usize] as usize..self.node_read_at[k as usize + 1] as usize]
    }

    /// Runs `plan`: fills the sequence, the intervals and (with `log`) the read log.
    fn run(&mut self, plan: &StagePlan, log: bool) {
        self.runs += 1;
        self.sequence.clear();
        self.stage_of.clear();
        self.stage_start.clear();
        for (t, stage) in plan.stages.iter().enumerate() {
            self.stage_start.push(self.sequence.len() as u32);
            self.sequence.extend_from_slice(stage);
            self.sequence.push(t as Node);
            self.stage_of.resize(self.sequence.len(), t as u32);
        }
        self.intervals.clear();
        self.first_interval.clear();
        self.read_log.clear();
        self.share_reads.clear();
        for &v in &self.inputs {
            self.current[v as usize] = self.intervals.len() as u32;
            self.intervals.push(Interval { value: v, start: 0, end: 0 });
        }
        for position in 0..self.sequence.len() {
            let k = self.sequence[position] as usize;
            let p = position as u32;
            for &v in &self.reads[self.node_read_at[k] as usize..self.node_read_at[k + 1] as usize] {
                let i = self.current[v as usize];
                self.intervals[i as usize].end = p;
                if log {
                    self.read_log.push((i, p));
                }
                if self.shares[k].iter().any(|s| s.input == v) {
                    self.share_reads.push((p, v, i));
                }
            }
            self.first_interval.push(self.intervals.len() as u32);
            for &v in &self.writes[self.write_at[k] as usize..self.write_at[k + 1] as usize] {
                self.current[v as usize] = self.intervals.len() as u32;
                self.intervals.push(Interval { value: v, start: p, end: p });
            }
        }
        self.first_interval.push(self.intervals.len() as u32);
        self.work += self.sequence.len() as u64;
        let last = self.sequence.len().saturating_sub(1) as u32;
        for &v in &self.survivors {
            self.intervals[self.current[v as usize] as usize].end = last;
        }
    }

    /// Fills `delta` (bytes added at each position) from the intervals.
    fn deltas(&mut self) {
        self.delta.clear();
        self.delta.resize(self.sequence.len() + 1, 0);
        // With no positions nothing is live (as in the rule): an empty problem's values
        // without a writer have no position to be live at.
        if self.sequence.is_empty() {
            return;
        }
        for interval in &self.intervals {
            let size = self.sizes[interval.value as usize] as i128;
            self.delta[interval.start as usize] += size;
            self.delta[interval.end as usize + 1] -= size;
        }
        // Only the last position can hold a survivor's end.
        let last = self.sequence.len().saturating_sub(1) as u32;
        let survivor_at = |i: u32| self.survivors.iter().any(|&v| self.current[v as usize] == i);
        let mut at = 0;
        while at < self.share_reads.len() {
            let p = self.share_reads[at].0;
            let end = at + self.share_reads[at..].iter().take_while(|r| r.0 == p).count();
            let reads = &self.share_reads[at..end];
            let dies_here = |input: u32| {
                reads.iter().any(|&(_, v, i)| v == input && self.intervals[i as usize].end == p && (p != last || !survivor_at(i)))
            };
            let saved = shared_bytes(self.problem, &self.shares[self.sequence[p as usize] as usize], dies_here) as i128;
            self.delta[p as usize] -= saved;
            self.delta[p as usize + 1] += saved;
            at = end;
        }
    }

    /// The peak, extra cost and excess area over `budget` of `plan`.
    pub fn score(&mut self, plan: &StagePlan, budget: u64) -> Score {
        self.run(plan, false);
        self.deltas();
        let (mut live, mut peak, mut excess) = (0i128, 0i128, 0u128);
        for d in &self.delta[..self.sequence.len()] {
            live += d;
            peak = peak.max(live);
            if live > budget as i128 {
                excess += (live - budget as i128) as u128;
            }
        }
        Score { peak: saturate(peak), extra: plan.extra_cost(self.problem), excess }
    }

    /// Like [`Sim::score`], also keeping the profile, the intervals and each interval's
    /// reads.
    pub fn detail(&mut self, plan: &StagePlan, budget: u64) -> Score {
        self.run(plan, true);
        self.deltas();
        self.profile.clear();
        let (mut live, mut excess) = (0i128, 0u128);
        for d in &self.delta[..self.sequence.len()] {
            live += d;
            self.profile.push(saturate(live));
            if live > budget as i128 {
                excess += (live - budget as i128) as u128;
            }
        }
        // Counting sort by interval (stable: each interval's reads stay in position order).
        self.read_at.clear();
        self.read_at.resize(self.intervals.len() + 1, 0);
        for &(i, _) in &self.read_log {
            self.read_at[i as usize + 1] += 1;
        }
        for i in 0..self.intervals.len() {
            self.read_at[i + 1] += self.read_at[i];
        }
        self.sorted_reads.clear();
        self.sorted_reads.resize(self.read_log.len(), 0);
        let mut next = self.read_at.clone();
        for &(i, p) in &self.read_log {
            self.sorted_reads[next[i as usize] as usize] = p;
            next[i as usize] += 1;
        }
        let peak = self.profile.iter().copied().max().unwrap_or(0);
        Score { peak, extra: plan.extra_cost(self.problem), excess }
    }
}

fn saturate(bytes: i128) -> u64 {
    u64::try_from(bytes.max(0)).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::super::testing::random_problem;
    use super::super::{Node, evaluate};
    use super::*;
    use crate::rng::Rng;

    /// A random plan: each useful pair (v read by t, or by another recompute) with some odds.
    fn random_plan(problem: &Problem, rng: &mut Rng) -> StagePlan {
        let n = problem.nodes.len();
        let mut plan = StagePlan::empty(n);
        for t in 1..n {
            for v in 0..t {
                if problem.nodes[v].recomputable && rng.below(4) == 0 {
                    plan.insert(t as Node, v as Node);
                }
            }
        }
        plan
    }

    /// No nodes: no positions, so nothing is live, even a value without a writer (the
    /// rule's answer); the simulator indexed past its deltas here.
    #[test]
    fn a_problem_without_nodes() {
        let value = crate::solve::DagValue { size: 64, def: None, readers: Vec::new(), to_end: true };
        let problem = Problem { nodes: Vec::new(), values: vec![value], shares: Vec::new() };
        assert_eq!(evaluate(&problem, &[]).unwrap().peak, 0);
        let mut sim = Sim::new(&problem);
        let plan = StagePlan::empty(0);
        let score = Score { peak: 0, extra: 0, excess: 0 };
        assert_eq!(sim.score(&plan, 0), score);
        assert_eq!(sim.detail(&plan, 0), score);
    }

    #[test]
    fn the_simulator_agrees_with_the_rule() {
        for seed in 0..300 {
            let mut rng = Rng::new(seed);
            let n = 2 + rng.below(12) as usize;
            let problem = random_problem(&mut rng, n);
            let mut sim = Sim::new(&problem);
            for _ in 0..5 {
                let plan = random_plan(&problem, &mut rng);
                let sequence = plan.sequence();
                let eval = evaluate(&problem, &sequence).unwrap();
                let budget = rng.below(eval.peak + 1);
                let score = sim.score(&plan, budget);
                assert_eq!((score.peak, eval.base_cost + u128::from(score.extra)), (eval.peak, eval.cost), "seed {seed}");
                let detail = sim.detail(&plan, budget);
                assert_eq!(detail, score, "seed {seed}");
                assert_eq!(sim.sequence, sequence);
                let area: u128 = sim.profile.iter().map(|&m| m.saturating_sub(budget) as u128).sum();
                assert_eq!(area, score.excess, "seed {seed}");
            }
        }
    }
}
