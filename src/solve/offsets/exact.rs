//! Exact offset assignment (dynamic storage allocation) by branch and bound.
//!
//! [`exact`] decides whether the buffers fit in a given capacity and returns a placement if
//! they do; `minimize.rs` tightens an arena towards the lower bound with repeated searches.
//! Both stop at [`Limits`]: a deadline and a budget of search nodes. The search itself
//! never looks at the clock to decide what to try (probe shares and restarts count nodes),
//! so a run that ends by its node budget gives the same answer on every machine; only the
//! deadline, a safety net, depends on the machine's speed. Placements are valid by
//! construction; a verdict of "infeasible" is a proof.
//!
//! # The search
//! - **Sections.** Time is compressed to *sections*: one per distinct end time, holding the
//!   buffers live at that time. Every set of buffers live at one moment is contained in a
//!   section, so buffers overlap in time iff their (contiguous) section ranges intersect,
//!   and the largest section total is the max-live lower bound.
//! - **Canonical solutions.** Every packing can be pushed down until each buffer sits at 0
//!   or on a buffer it overlaps in time; one that cannot be pushed further (no buffer can
//!   move down on its own) is *tight*. The search builds tight packings only, in order of
//!   (offset, rank): each step chooses the next buffer, which goes at its *floor* (the
//!   highest end of the placed buffers it overlaps). A buffer whose floor is below the last
//!   offset waits until something is placed under it; ties of equal offset go by rank.
//!   A candidate whose floor reaches floor + size of another unplaced buffer is skipped:
//!   that buffer would fit below it, so the packing would not be tight. Buffers identical
//!   in interval and size go in rank order.
//! - **Pruning.** After each placement: a buffer whose floor + size passes the capacity
//!   fails; for every section, the unplaced buffers in it all overlap each other and lie
//!   at or above max(last offset, lowest floor among them), so that plus their total size
//!   must fit.
//! - **Decomposition.** When no unplaced buffer crosses the boundary between two sections,
//!   the two sides are independent: they are solved one after the other, and when one side
//!   has no solution the search jumps back to the placement that split them instead of
//!   retrying the other side's choices.
//! - **Order and restarts.** Candidates are tried lowest floor first, then by a static rank;
//!   three ranks (by lifetime, area and section total, in different priority orders) are
//!   tried in turn with a node limit that doubles each round. A run that ends without
//!   reaching its limit is complete, so its "infeasible" is a proof.
//!
//! Every size and offset stays at most the capacity, so sums never overflow.

use std::time::Instant;

use super::Live;

/// The verdict of [`exact`] at one capacity.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum ExactResult {
    /// Offsets, in input order, whose arena fits the capacity.
    Found(Vec<u64>),
    /// No placement fits the capacity (a proof).
    Infeasible,
    /// The deadline passed or the node budget ran out before either was shown.
    TimedOut,
}

/// When a search must stop: at the deadline or after `nodes` search nodes, whichever
/// comes first.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub deadline: Instant,
    pub nodes: u64,
}

impl Limits {
    /// Only a deadline (no node budget).
    pub fn until(deadline: Instant) -> Limits {
        Limits { deadline, nodes: u64::MAX }
    }
}

/// "None" for u32 indices.
const NONE: u32 = u32::MAX;

/// Static orders tried in turn: the keys, most significant first, all descending.
const PREORDERS: [[Key; 3]; 3] =
    [[Key::Width, Key::Area, Key::Total], [Key::Total, Key::Area, Key::Width], [Key::Total, Key::Width, Key::Area]];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Key {
    /// Lifetime in time steps.
    Width,
    /// Size times lifetime.
    Area,
    /// The largest section total over the buffer's lifetime.
    Total,
}

/// Finds offsets for `intervals` within `capacity`, or proves there are none, by the
/// deadline. Zero-size buffers go at offset 0.
pub fn exact(intervals: &[Live], capacity: u64, limits: Limits) -> ExactResult {
    Prepared::new(intervals).solve(capacity, limits).0
}

/// Whether the search is tried on `intervals` at all: its tables (section memberships and
/// overlapping pairs) must fit 40 million entries; [`exact`] answers `TimedOut` and
/// `minimize` returns its start at once otherwise.
pub fn searchable(intervals: &[Live]) -> bool {
    Base::new(intervals).is_some_and(|b| b.searchable())
}

/// An instance prepared once for searches at any capacity.
pub(super) struct Prepared {
    len: usize,
    /// `None` when a section total overflows u64 (no capacity fits).
    base: Option<Base>,
    /// Whether the base is [`Base::searchable`] (counted once).
    searchable: bool,
    /// The gcd of the sizes (at least 1).
    granularity: u64,
    instances: Vec<Option<Instance>>,
}

impl Prepared {
    pub(super) fn new(intervals: &[Live]) -> Prepared {
        let base = Base::new(intervals);
        let searchable = base.as_ref().is_some_and(Base::searchable);
        let granularity = base.as_ref().map_or(1, |b| b.size.iter().fold(0u64, |g, &s| gcd(g, s))).max(1);
        Prepared { len: intervals.len(), base, searchable, granularity, instances: PREORDERS.iter().map(|_| None).collect() }
    }

    /// Whether searches are tried at all (see [`searchable`]).
    pub(super) fn searchable(&self) -> bool {
        self.searchable
    }

    /// The gcd of the sizes (at least 1): every tight offset is a multiple of it.
    pub(super) fn granularity(&self) -> u64 {
        self.granularity
    }

    /// The verdict at `capacity` and the search nodes it took.
    fn solve(&mut self, capacity: u64, limits: Limits) -> (ExactResult, u64) {
        self.solve_from(capacity, limits, &mut Restart::default())
    }

    /// [`Prepared::solve`] that resumes the restarts where `from` says a search at this
    /// capacity stopped (a run that ended by its own node limit is never repeated: it
    /// would end the same way), and records where this one stops.
    pub(super) fn solve_from(&mut self, capacity: u64, limits: Limits, from: &mut Restart) -> (ExactResult, u64) {
        let g = self.granularity();
        let Some(base) = &self.base else {
            return (ExactResult::Infeasible, 0); // some section's total overflows u64
        };
        if base.max_total > capacity {
            return (ExactResult::Infeasible, 0);
        }
        if base.size.is_empty() {
            return (ExactResult::Found(vec![0; self.len]), 0);
        }
        if !self.searchable {
            return (ExactResult::TimedOut, 0);
        }
        let capacity = capacity - capacity % g;
        if from.limit == 0 {
            *from = Restart { limit: (base.size.len() as u64).saturating_mul(2).max(1000), order: 0 };
        }
        let mut spent: u64 = 0;
        loop {
            while let Some(keys) = PREORDERS.get(from.order) {
                let left = limits.nodes.saturating_sub(spent);
                if Instant::now() >= limits.deadline || left == 0 {
                    return (ExactResult::TimedOut, spent);
                }
                let instance = self.instances[from.order].get_or_insert_with(|| Instance::new(base, keys));
                let mut search = Search::new(instance, capacity, limits.deadline, from.limit.min(left));
                let outcome = search.run();
                spent = spent.saturating_add(search.nodes);
                match outcome {
                    Outcome::Found => {
                        let mut offsets = vec![0u64; self.len];
                        for (i, &o) in search.off.iter().enumerate() {
                            offsets[instance.orig[i]] = o;
                        }
                        return (ExactResult::Found(offsets), spent);
                    }
                    Outcome::Infeasible => return (ExactResult::Infeasible, spent),
                    Outcome::TimedOut => return (ExactResult::TimedOut, spent),
                    // Cut short by the node budget: this run is redone next time.
                    Outcome::NodeLimit if left < from.limit => return (ExactResult::TimedOut, spent),
                    Outcome::NodeLimit => from.order += 1,
                }
            }
            *from = Restart { limit: from.limit.saturating_mul(2), order: 0 };
        }
    }
}

/// Where a search at one capacity goes on: its restarts try each static order with a node
/// limit that doubles after the last order (`limit == 0`: not started).
#[derive(Clone, Copy, Default)]
pub(super) struct Restart {
    limit: u64,
    order: usize,
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// The most entries (section memberships plus overlapping pairs) an instance may need for
/// the search to be tried: past it, building the tables alone takes seconds and gigabytes
/// (pangu_2.6B, the largest real list, needs 22 million).
const MAX_ENTRIES: u64 = 40_000_000;

/// The nonzero buffers in section terms, before any ordering.
struct Base {
    /// Input index of each nonzero buffer.
    orig: Vec<usize>,
    size: Vec<u64>,
    /// Section range `lo..hi`.
    lo: Vec<u32>,
    hi: Vec<u32>,
    /// Lifetime in time steps.
    width: Vec<u64>,
    /// The largest section total over the buffer's range.
    total: Vec<u64>,
    sections: usize,
    max_total: u64,
}

impl Base {
    /// Whether the search's tables fit [`MAX_ENTRIES`] and u32 indices. Counted in
    /// O(n log n) without building them: buffer k meets every other buffer except those
    /// ending at or before its start and those starting at or after its end.
    fn searchable(&self) -> bool {
        let n = self.size.len();
        if n >= NONE as usize - 1 {
            return false;
        }
        let members: u64 = self.lo.iter().zip(&self.hi).map(|(&lo, &hi)| u64::from(hi - lo)).sum();
        let (mut los, mut his) = (self.lo.clone(), self.hi.clone());
        los.sort_unstable();
        his.sort_unstable();
        let mut pairs = 0u64;
        for (&lo, &hi) in self.lo.iter().zip(&self.hi) {
            let apart = his.partition_point(|&h| h <= lo) + (n - los.partition_point(|&l| l < hi));
            pairs += (n - 1).saturating_sub(apart) as u64;
        }
        members.saturating_add(pairs / 2) <= MAX_ENTRIES
    }

    /// `None` if a section total overflows u64.
    fn new(intervals: &[Live]) -> Option<Base> {
        let live: Vec<(usize, usize, usize, u64)> = intervals
            .iter()
            .enumerate()
            .filter(|(_, l)| l.size > 0)
            .map(|(i, l)| (i, l.first.min(l.last), l.first.max(l.last), l.size))
            .collect();
        let mut ends: Vec<usize> = live.iter().map(|&(_, _, last, _)| last).collect();
        ends.sort_unstable();
        ends.dedup();
        let sections = ends.len();
        let mut base = Base {
            orig: Vec::with_capacity(live.len()),
            size: Vec::with_capacity(live.len()),
            lo: Vec::with_capacity(live.len()),
            hi: Vec::with_capacity(live.len()),
            width: Vec::with_capacity(live.len()),
            total: Vec::with_capacity(live.len()),
            sections,
            max_total: 0,
        };
        let mut delta_add = vec![0u64; sections + 1];
        let mut delta_sub = vec![0u64; sections + 1];
        for &(i, first, last, size) in &live {
            let lo = ends.partition_point(|&e| e < first);
            let hi = ends.partition_point(|&e| e <= last);
            base.orig.push(i);
            base.size.push(size);
            base.lo.push(lo as u32);
            base.hi.push(hi as u32);
            base.width.push(((last - first) as u64).saturating_add(1));
            delta_add[lo] = delta_add[lo].checked_add(size)?;
            delta_sub[hi] = delta_sub[hi].checked_add(size)?;
        }
        let mut totals = Vec::with_capacity(sections);
        let mut current = 0u64;
        for s in 0..sections {
            current = (current - delta_sub[s]).checked_add(delta_add[s])?;
            totals.push(current);
        }
        base.max_total = totals.iter().copied().max().unwrap_or(0);
        // Range maxima from a sparse table (a scan per buffer is quadratic on long lists):
        // levels[j][s] = max of totals[s..s + 2^j].
        let mut levels = vec![totals];
        loop {
            let half = 1usize << (levels.len() - 1);
            let prev = &levels[levels.len() - 1];
            if prev.len() <= half {
                break;
            }
            let next: Vec<u64> = (0..prev.len() - half).map(|s| prev[s].max(prev[s + half])).collect();
            levels.push(next);
        }
        for k in 0..base.size.len() {
            let (lo, hi) = (base.lo[k] as usize, base.hi[k] as usize);
            let t = match hi - lo {
                0 => 0,
                len => {
                    let j = (usize::BITS - 1 - len.leading_zeros()) as usize;
                    levels[j][lo].max(levels[j][hi - (1usize << j)])
                }
            };
            base.total.push(t);
        }
        Some(base)
    }
}

/// The buffers renumbered by a static order (index = rank), with the lookup tables the
/// search needs.
struct Instance {
    orig: Vec<usize>,
    size: Vec<u64>,
    lo: Vec<u32>,
    hi: Vec<u32>,
    sections: usize,
    /// The previous buffer (by rank) with the same interval and size, or NONE.
    twin_prev: Vec<u32>,
    /// Buffers overlapping in time, CSR.
    nbr_start: Vec<usize>,
    nbrs: Vec<u32>,
    /// Buffers of each section, CSR.
    mem_start: Vec<usize>,
    members: Vec<u32>,
    /// Buffers sorted by `lo`; `lo_start[s]` is the first position with `lo >= s`.
    by_lo: Vec<u32>,
    lo_start: Vec<usize>,
    /// The order's keys, and each buffer's lifetime, for re-ranking parts.
    keys: [Key; 3],
    width: Vec<u64>,
}

impl Instance {
    fn new(base: &Base, keys: &[Key; 3]) -> Instance {
        let n = base.size.len();
        let key = |k: usize, key: Key| -> u128 {
            match key {
                Key::Width => base.width[k] as u128,
                Key::Area => base.width[k] as u128 * base.size[k] as u128,
                Key::Total => base.total[k] as u128,
            }
        };
        let mut perm: Vec<usize> = (0..n).collect();
        perm.sort_by(|&x, &y| {
            keys.iter().map(|&k| key(y, k).cmp(&key(x, k))).find(|c| c.is_ne()).unwrap_or(x.cmp(&y))
        });
        let orig: Vec<usize> = perm.iter().map(|&k| base.orig[k]).collect();
        let size: Vec<u64> = perm.iter().map(|&k| base.size[k]).collect();
        let lo: Vec<u32> = perm.iter().map(|&k| base.lo[k]).collect();
        let hi: Vec<u32> = perm.iter().map(|&k| base.hi[k]).collect();
        let sections = base.sections;

        let mut twin_prev = vec![NONE; n];
        let mut by_shape: Vec<u32> = (0..n as u32).collect();
        by_shape.sort_by_key(|&i| (lo[i as usize], hi[i as usize], size[i as usize], i));
        for w in by_shape.windows(2) {
            let (a, b) = (w[0] as usize, w[1] as usize);
            if (lo[a], hi[a], size[a]) == (lo[b], hi[b], size[b]) {
                twin_prev[b] = a as u32;
            }
        }

        let mut by_lo: Vec<u32> = (0..n as u32).collect();
        by_lo.sort_by_key(|&i| (lo[i as usize], i));
        let lo_start: Vec<usize> =
            (0..=sections).map(|s| by_lo.partition_point(|&i| (lo[i as usize] as usize) < s)).collect();

        // Overlapping pairs: j after i in `by_lo` overlaps i iff lo[j] < hi[i].
        let mut degree = vec![0usize; n];
        for (p, &i) in by_lo.iter().enumerate() {
            for &j in by_lo[p + 1..].iter().take_while(|&&j| lo[j as usize] < hi[i as usize]) {
                degree[i as usize] += 1;
                degree[j as usize] += 1;
            }
        }
        let nbr_start = prefix_sums(&degree);
        let mut fill = nbr_start.clone();
        let mut nbrs = vec![0u32; nbr_start[n]];
        for (p, &i) in by_lo.iter().enumerate() {
            for &j in by_lo[p + 1..].iter().take_while(|&&j| lo[j as usize] < hi[i as usize]) {
                nbrs[fill[i as usize]] = j;
                fill[i as usize] += 1;
                nbrs[fill[j as usize]] = i;
                fill[j as usize] += 1;
            }
        }
        // Each list in order of `lo` (`place` relies on it).
        for i in 0..n {
            nbrs[nbr_start[i]..nbr_start[i + 1]].sort_unstable_by_key(|&j| (lo[j as usize], j));
        }

        let mut count = vec![0usize; sections];
        for i in 0..n {
            for c in &mut count[lo[i] as usize..hi[i] as usize] {
                *c += 1;
            }
        }
        let mem_start = prefix_sums(&count);
        let mut fill = mem_start.clone();
        let mut members = vec![0u32; mem_start[sections]];
        for i in 0..n {
            for s in lo[i] as usize..hi[i] as usize {
                members[fill[s]] = i as u32;
                fill[s] += 1;
            }
        }
        let width = perm.iter().map(|&k| base.width[k]).collect();
        Instance {
            orig,
            size,
            lo,
            hi,
            sections,
            twin_prev,
            nbr_start,
            nbrs,
            mem_start,
            members,
            by_lo,
            lo_start,
            keys: *keys,
            width,
        }
    }

    fn nbrs(&self, i: usize) -> &[u32] {
        &self.nbrs[self.nbr_start[i]..self.nbr_start[i + 1]]
    }

    fn members(&self, s: usize) -> &[u32] {
        &self.members[self.mem_start[s]..self.mem_start[s + 1]]
    }
}

fn prefix_sums(counts: &[usize]) -> Vec<usize> {
    let mut out = Vec::with_capacity(counts.len() + 1);
    let mut acc = 0usize;
    out.push(0);
    for &c in counts {
        acc += c;
        out.push(acc);
    }
    out
}

enum Outcome {
    Found,
    Infeasible,
    TimedOut,
    NodeLimit,
}

/// An independent part of the problem: the unplaced buffers whose sections lie in `a..b`.
#[derive(Clone, Copy)]
struct Comp {
    a: u32,
    b: u32,
    /// The canonical order so far: the next buffer needs (floor, rank) >= (min_off, first_rank).
    min_off: u64,
    first_rank: u32,
    /// The frame whose placement split this part off (NONE: the input was already split).
    split_depth: u32,
}

/// A search node and the child being explored.
struct Frame {
    cand_start: usize,
    cand_next: usize,
    cand_end: usize,
    /// The first node of its part: when it fails, the whole part fails.
    root_of_comp: bool,
    child: Option<Undo>,
}

/// What a placement changed.
struct Undo {
    p: u32,
    trail_mark: usize,
    witness_mark: usize,
    rank_mark: usize,
    agenda_len: usize,
    agenda_trail_mark: usize,
    agenda_changed: bool,
    /// `p` had no unplaced neighbour: when its branch fails, the node fails.
    hatless: bool,
}

struct Search<'a> {
    inst: &'a Instance,
    cap: u64,
    deadline: Instant,
    node_limit: u64,
    nodes: u64,
    placed: Vec<bool>,
    off: Vec<u64>,
    floor: Vec<u64>,
    /// Per section: total size of its unplaced buffers.
    sum: Vec<u64>,
    /// Per section: an unplaced member whose floor + the section's unplaced total fits.
    witness: Vec<u32>,
    /// Per buffer: how many sections it witnesses.
    watch: Vec<u32>,
    /// Per boundary `b` (between sections b-1 and b): unplaced buffers crossing it.
    cuts: Vec<u32>,
    /// Old floors and witnesses, to undo.
    trail: Vec<(u32, u64)>,
    witness_trail: Vec<(u32, u32)>,
    /// Rank of each buffer within its part (ties of equal offset go by rank), and old
    /// ranks to undo.
    rank: Vec<u32>,
    rank_trail: Vec<(u32, u32)>,
    /// Scratch for re-ranking.
    scratch: Vec<(u128, u128, u128, u32)>,
    /// Parts still to solve; the last is the current one.
    agenda: Vec<Comp>,
    agenda_trail: Vec<Comp>,
    frames: Vec<Frame>,
    cands: Vec<u32>,
    /// Scratch: prefix and suffix minima of the room over the current part's sections.
    pre: Vec<u64>,
    suf: Vec<u64>,
    /// Scratch: how many candidates at the current offset cover each section (differences).
    cover: Vec<i64>,
}

impl<'a> Search<'a> {
    fn new(inst: &'a Instance, cap: u64, deadline: Instant, node_limit: u64) -> Search<'a> {
        let n = inst.size.len();
        let mut sum = vec![0u64; inst.sections];
        let mut cuts = vec![0u32; inst.sections + 1];
        for i in 0..n {
            let (lo, hi) = (inst.lo[i] as usize, inst.hi[i] as usize);
            for s in &mut sum[lo..hi] {
                *s += inst.size[i]; // at most the max total, checked by the caller
            }
            for c in &mut cuts[lo + 1..hi] {
                *c += 1;
            }
        }
        // Every section has a member (its own end); all floors are 0 <= room.
        let witness: Vec<u32> = (0..inst.sections).map(|s| inst.members(s).first().copied().unwrap_or(0)).collect();
        let mut watch = vec![0u32; n.max(1)];
        for &w in &witness {
            watch[w as usize] += 1;
        }
        Search {
            inst,
            cap,
            deadline,
            node_limit,
            nodes: 0,
            placed: vec![false; n],
            off: vec![0; n],
            floor: vec![0; n],
            sum,
            witness,
            watch,
            cuts,
            trail: Vec::new(),
            witness_trail: Vec::new(),
            rank: (0..n as u32).collect(),
            rank_trail: Vec::new(),
            scratch: Vec::new(),
            agenda: Vec::new(),
            agenda_trail: Vec::new(),
            frames: Vec::new(),
            cands: Vec::new(),
            pre: Vec::new(),
            suf: Vec::new(),
            cover: Vec::new(),
        }
    }

    fn run(&mut self) -> Outcome {
        let s = self.inst.sections as u32;
        let mut starts: Vec<u32> = (1..s).filter(|&b| self.cuts[b as usize] == 0).collect();
        starts.insert(0, 0);
        let mut end = s;
        for &a in starts.iter().rev() {
            self.agenda.push(Comp { a, b: end, min_off: 0, first_rank: 0, split_depth: NONE });
            end = a;
        }
        self.open_frame(true);
        loop {
            let depth = self.frames.len() - 1;
            if let Some(undo) = self.frames[depth].child.take() {
                if undo.hatless {
                    let frame = &mut self.frames[depth];
                    frame.cand_next = frame.cand_end;
                }
                self.undo(undo);
            }
            let frame = &mut self.frames[depth];
            if frame.cand_next < frame.cand_end {
                let p = self.cands[frame.cand_next];
                frame.cand_next += 1;
                let (undo, ok, root) = self.place(p as usize, depth);
                self.frames[depth].child = Some(undo);
                if ok {
                    if self.agenda.is_empty() {
                        return Outcome::Found;
                    }
                    self.nodes += 1;
                    if self.nodes > self.node_limit {
                        return Outcome::NodeLimit;
                    }
                    if self.nodes.is_multiple_of(64) && Instant::now() >= self.deadline {
                        return Outcome::TimedOut;
                    }
                    self.open_frame(root);
                }
            } else {
                let Some(failed) = self.frames.pop() else { return Outcome::Infeasible };
                self.cands.truncate(failed.cand_start);
                if failed.root_of_comp {
                    let target = match self.agenda.last() {
                        Some(c) if c.split_depth != NONE => c.split_depth as usize,
                        _ => return Outcome::Infeasible,
                    };
                    while self.frames.len() > target + 1 {
                        let Some(frame) = self.frames.pop() else { return Outcome::Infeasible };
                        if let Some(undo) = frame.child {
                            self.undo(undo);
                        }
                        self.cands.truncate(frame.cand_start);
                    }
                }
                if self.frames.is_empty() {
                    return Outcome::Infeasible;
                }
            }
        }
    }

    /// Pushes a node for the current part with its candidates: the unplaced buffers that
    /// can come next in canonical order and pass the section bound once placed.
    fn open_frame(&mut self, root_of_comp: bool) {
        let start = self.cands.len();
        if let Some(&comp) = self.agenda.last() {
            let inst = self.inst;
            let (a, b) = (comp.a as usize, comp.b as usize);
            let range = &inst.by_lo[inst.lo_start[a]..inst.lo_start[b]];
            let mut h = u64::MAX;
            for &i in range {
                let i = i as usize;
                if !self.placed[i] {
                    h = h.min(self.floor[i] + inst.size[i]);
                }
            }
            // Room of each section (capacity - unplaced total), prefix and suffix minima.
            self.pre.clear();
            self.suf.clear();
            let mut m = u64::MAX;
            self.pre.push(m);
            for s in a..b {
                m = m.min(self.cap - self.sum[s]);
                self.pre.push(m);
            }
            m = u64::MAX;
            self.suf.push(m);
            for s in (a..b).rev() {
                m = m.min(self.cap - self.sum[s]);
                self.suf.push(m);
            }
            self.suf.reverse();
            for &i in range {
                let iu = i as usize;
                if self.placed[iu] {
                    continue;
                }
                let f = self.floor[iu];
                if f >= h || f < comp.min_off || (f == comp.min_off && self.rank[iu] < comp.first_rank) {
                    continue;
                }
                let twin = inst.twin_prev[iu];
                if twin != NONE && !self.placed[twin as usize] {
                    continue;
                }
                self.cands.push(i);
            }
            // A section whose unplaced buffers must exactly fill [min_off, capacity) is
            // *full*: one of them goes at min_off, so it needs a candidate there (any other
            // lands higher, leaving a gap).
            let o = comp.min_off;
            self.cover.clear();
            self.cover.resize(b - a + 1, 0);
            for &i in &self.cands[start..] {
                if self.floor[i as usize] == o {
                    self.cover[inst.lo[i as usize] as usize - a] += 1;
                    self.cover[inst.hi[i as usize] as usize - a] -= 1;
                }
            }
            let mut covered = 0i64;
            for s in a..b {
                covered += self.cover[s - a];
                if covered == 0 && self.cap - self.sum[s] == o {
                    self.cands.truncate(start);
                    break;
                }
            }
            let (floor, rank) = (&self.floor, &self.rank);
            self.cands[start..].sort_unstable_by_key(|&i| (floor[i as usize], rank[i as usize]));
            // Drop the candidates that fail the section bound once placed: f becomes the
            // lowest offset left for every unplaced buffer of the part, so each section
            // needs room above it. A failing candidate with no unplaced neighbour ends the
            // list (see `hatless`).
            let mut kept = start;
            for k in start..self.cands.len() {
                let i = self.cands[k] as usize;
                let f = self.floor[i];
                let (lo, hi) = (inst.lo[i] as usize, inst.hi[i] as usize);
                let need = f.saturating_sub(inst.size[i]);
                let fits = f <= self.pre[lo - a]
                    && f <= self.suf[hi - a]
                    && (need <= self.pre[b - a] || self.sum[lo..hi].iter().all(|&sum| self.cap - sum >= need));
                if fits {
                    self.cands[kept] = i as u32;
                    kept += 1;
                } else if self.hatless(i) {
                    break;
                }
            }
            self.cands.truncate(kept);
        }
        let end = self.cands.len();
        self.frames.push(Frame { cand_start: start, cand_next: start, cand_end: end, root_of_comp, child: None });
    }

    /// Places `p` at its floor; returns the undo record, whether the node passes the
    /// checks, and whether the next node starts a new part.
    fn place(&mut self, p: usize, depth: usize) -> (Undo, bool, bool) {
        let inst = self.inst;
        let mut undo = Undo {
            p: p as u32,
            trail_mark: self.trail.len(),
            witness_mark: self.witness_trail.len(),
            rank_mark: self.rank_trail.len(),
            agenda_len: self.agenda.len(),
            agenda_trail_mark: self.agenda_trail.len(),
            agenda_changed: false,
            hatless: true,
        };
        let Some(&comp) = self.agenda.last() else { return (undo, false, false) };
        let o = self.floor[p];
        let size = inst.size[p];
        let e = o + size;
        self.placed[p] = true;
        self.off[p] = o;
        let (lo, hi) = (inst.lo[p] as usize, inst.hi[p] as usize);
        for s in &mut self.sum[lo..hi] {
            *s -= size;
        }
        for c in &mut self.cuts[lo + 1..hi] {
            *c -= 1;
        }
        for &u in inst.nbrs(p) {
            let u = u as usize;
            undo.hatless &= self.placed[u];
            if !self.placed[u] && self.floor[u] < e {
                self.trail.push((u as u32, self.floor[u]));
                self.floor[u] = e;
                if e > self.cap - inst.size[u] {
                    return (undo, false, false);
                }
            }
        }
        // Witnesses. In p's sections every unplaced buffer now lies at e or higher, so e
        // must leave room for them; the raised buffers (floor e) can witness there.
        let p32 = p as u32;
        for s in lo..hi {
            if self.sum[s] > 0 && e > self.cap - self.sum[s] {
                return (undo, false, false);
            }
        }
        // The raised buffers come in order of `lo` (neighbour lists are sorted): sweep p's
        // sections keeping the one reaching furthest.
        let (mut k, mut reach, mut latest) = (undo.trail_mark, (0usize, NONE), (0usize, NONE));
        for s in lo..hi {
            while k < self.trail.len() && inst.lo[self.trail[k].0 as usize] as usize <= s {
                let u = self.trail[k].0;
                let uhi = inst.hi[u as usize] as usize;
                if uhi > reach.0 {
                    reach = (uhi, u);
                }
                if uhi > s {
                    latest = (uhi, u);
                }
                k += 1;
            }
            if self.witness[s] == p32 && reach.0 > s {
                let w = if latest.0 > s { latest.1 } else { reach.1 };
                self.set_witness(s, w);
            }
        }
        for s in lo..hi {
            if self.witness[s] == p32 && self.sum[s] > 0 && !self.rewitness(s) {
                return (undo, false, false);
            }
        }
        // Outside p's sections, a raised witness may no longer fit.
        for k in undo.trail_mark..self.trail.len() {
            let u = self.trail[k].0;
            if self.watch[u as usize] == 0 {
                continue;
            }
            let (ulo, uhi) = (inst.lo[u as usize] as usize, inst.hi[u as usize] as usize);
            for s in (ulo..lo.min(uhi)).chain(hi.max(ulo)..uhi) {
                if self.witness[s] == u && e > self.cap - self.sum[s] && !self.rewitness(s) {
                    return (undo, false, false);
                }
            }
        }
        // Update the agenda: the current part continues, splits or is done.
        self.agenda.pop();
        self.agenda_trail.push(comp);
        undo.agenda_changed = true;
        let next = Comp { min_off: o, first_rank: self.rank[p] + 1, ..comp };
        let cut_points: Vec<u32> = (lo + 1..hi).filter(|&b| self.cuts[b] == 0).map(|b| b as u32).collect();
        if cut_points.is_empty() {
            if self.sum[comp.a as usize] > 0 {
                self.agenda.push(next);
                return (undo, true, false);
            }
            return (undo, true, true);
        }
        // New parts start a new canonical order (ties by a new ranking) above `o`.
        let mut end = comp.b;
        for &a in cut_points.iter().rev().chain(std::iter::once(&comp.a)) {
            if self.sum[a as usize] > 0 {
                self.agenda.push(Comp { a, b: end, split_depth: depth as u32, min_off: o, first_rank: 0 });
                self.rerank(a as usize, end as usize);
            }
            end = a;
        }
        (undo, true, true)
    }

    /// Ranks the unplaced buffers of sections `a..b` by the order's keys, with each
    /// buffer's section total taken over the unplaced buffers only.
    fn rerank(&mut self, a: usize, b: usize) {
        let inst = self.inst;
        self.scratch.clear();
        for &i in &inst.by_lo[inst.lo_start[a]..inst.lo_start[b]] {
            let iu = i as usize;
            if self.placed[iu] {
                continue;
            }
            let total = self.sum[inst.lo[iu] as usize..inst.hi[iu] as usize].iter().copied().max().unwrap_or(0);
            let width = inst.width[iu] as u128;
            let key = |k: Key| match k {
                Key::Width => width,
                Key::Area => width * inst.size[iu] as u128,
                Key::Total => total as u128,
            };
            let [k0, k1, k2] = inst.keys;
            self.scratch.push((key(k0), key(k1), key(k2), i));
        }
        let orig = &inst.orig;
        self.scratch.sort_unstable_by(|x, y| {
            (y.0, y.1, y.2).cmp(&(x.0, x.1, x.2)).then(orig[x.3 as usize].cmp(&orig[y.3 as usize]))
        });
        for (r, &(_, _, _, i)) in self.scratch.iter().enumerate() {
            self.rank_trail.push((i, self.rank[i as usize]));
            self.rank[i as usize] = r as u32;
        }
    }

    /// No unplaced buffer overlaps `i`: in every tight completion it sits at its floor, so
    /// it comes before every later candidate of the node (they sort after it). If placing
    /// it first fails, so do they.
    fn hatless(&self, i: usize) -> bool {
        self.inst.nbrs(i).iter().all(|&u| self.placed[u as usize])
    }

    /// Finds the unplaced member of section `s` with the lowest floor; false if even that
    /// one cannot hold the section's unplaced total below the capacity.
    fn rewitness(&mut self, s: usize) -> bool {
        let inst = self.inst;
        let mut best = (u64::MAX, 0u32, NONE);
        for &u in inst.members(s) {
            let key = (self.floor[u as usize], inst.nbrs(u as usize).len() as u32);
            if !self.placed[u as usize] && key < (best.0, best.1) {
                best = (key.0, key.1, u);
            }
        }
        if best.2 == NONE || best.0 > self.cap - self.sum[s] {
            return false;
        }
        self.set_witness(s, best.2);
        true
    }

    fn set_witness(&mut self, s: usize, u: u32) {
        let old = self.witness[s];
        self.witness_trail.push((s as u32, old));
        self.watch[old as usize] -= 1;
        self.watch[u as usize] += 1;
        self.witness[s] = u;
    }

    fn undo(&mut self, undo: Undo) {
        let inst = self.inst;
        let p = undo.p as usize;
        if undo.agenda_changed {
            self.agenda.truncate(undo.agenda_len - 1);
            self.agenda.extend(self.agenda_trail.drain(undo.agenda_trail_mark..).rev());
        }
        while self.trail.len() > undo.trail_mark {
            if let Some((u, f)) = self.trail.pop() {
                self.floor[u as usize] = f;
            }
        }
        while self.rank_trail.len() > undo.rank_mark {
            if let Some((i, r)) = self.rank_trail.pop() {
                self.rank[i as usize] = r;
            }
        }
        while self.witness_trail.len() > undo.witness_mark {
            if let Some((s, w)) = self.witness_trail.pop() {
                self.watch[self.witness[s as usize] as usize] -= 1;
                self.watch[w as usize] += 1;
                self.witness[s as usize] = w;
            }
        }
        let (lo, hi) = (inst.lo[p] as usize, inst.hi[p] as usize);
        for s in &mut self.sum[lo..hi] {
            *s += inst.size[p];
        }
        for c in &mut self.cuts[lo + 1..hi] {
            *c += 1;
        }
        self.placed[p] = false;
    }
}
