//! The index behind the fast heuristics: which bytes are busy during a range of time.
//!
//! Greedy and best-fit place buffers one at a time in an order that is not time order, and
//! for each one must find the gaps in the offsets taken by already placed buffers whose
//! live ranges meet its own. Scanning every placed buffer is O(n²); even enumerating only
//! the buffers that meet it is quadratic on training steps, where thousands of activations
//! are live at once. [`BusyIndex`] answers with the *union* of their byte ranges instead,
//! which is what a gap search needs.
//!
//! # Design
//!
//! Time is compressed to the distinct `first` values (two inclusive ranges meet iff the
//! later of their two `first`s lies in both, so a range becomes the leaves from its `first`
//! to the last `first <= last`). A binary segment tree over those leaves keeps insert-only
//! unions of byte ranges ([`Segments`]: sorted, disjoint, merged on insert) down to the
//! *block level* (blocks of about 2√leaves leaves); a block's two children, the *half
//! blocks*, are the bottom of the tree.
//!
//! - At and above the block level, `upper[v]` holds every buffer that MEETS `v` (at every
//!   second level only, [`STRIDE`]; a query needing another level reads the children's).
//! - At the block level, `blocks[b]` holds every buffer that COVERS block `b`.
//! - A half block keeps the buffers covering it (not its block) as a union, and the other
//!   buffers meeting it as rectangles (byte range, leaves clipped to it) sorted by start
//!   offset: a query scans them, which is cheaper than the dozen small unions a deeper
//!   tree would make it read. A range reaching the last leaf is stored as reaching the
//!   padding of the tree after it (no query reads the padding), so that it covers the
//!   nodes at the end instead of being a rectangle in each: with few distinct `first`s
//!   (100,000 params live the whole step, a few short buffers) every param was a
//!   rectangle in the last half block, and every query read all of them.
//!
//! Placing a buffer logs its bytes in `covers` of each node at or above the block level
//! that its range covers (its parent not), adds them to the pending ranges of `upper` of
//! the kept nodes its range meets on its two root paths, and inserts one rectangle into
//! each half block it meets without covering its block. The unions are lazy ([`Lazy`]): a
//! query first brings each union it reads up to date, merging what the `covers` of its
//! node and of the node's ancestors and its own pending ranges gained since (a batch
//! costs one merge; inserting a buffer that lives the whole step into every union under
//! it at once cost O(√n) inserts into cold unions, a dozen cache misses each: a fifth of
//! a best-fit run).
//!
//! A query for a range Q reads exactly the buffers that meet Q: `upper` of each fully
//! covered node at or above the block level, and for a partly covered block its `blocks`
//! union plus the rectangles of its half blocks that meet Q (read only where a candidate
//! gap survives the unions, never merged into a union first: that read every rectangle of
//! the two end half blocks, O(√n), for every long-lived buffer).
//!
//! The gaps of the union are found around a *pivot*: the `upper` of the widest covered
//! node (everything live in a long range: nearly gapless) or else the biggest union (for a
//! short range, the buffers covering its block). Every gap of the union lies in a gap of
//! the pivot, so pivot gaps shorter than the buffer being placed are skipped.
//!
//! - First fit ([`walk`]) looks into the pivot gaps lowest first and stops at the first
//!   that holds the buffer; inside each, the other unions' segments and the rectangles
//!   (found by galloping cursors, on the rectangles' highest end so far) cut out the true
//!   gaps, and after a few gaps the small unions are merged.
//! - Best fit ([`BusyIndex::best`]) needs only the smallest gap that holds the buffer, so
//!   it refines candidates: each pivot gap long enough goes through the other unions depth
//!   first ([`refine`]: each cuts it, galloping, so a big union costs the pieces reaching
//!   it times a logarithm; pieces too short are dropped; the rectangles of the end half
//!   blocks come last, searched by the highest end so far, [`Rects::cut`]), and the first
//!   exact fit ends the query. A range within one half block (a short-lived buffer: most
//!   queries) reads no union but its block's: every rectangle meeting it lies inside one
//!   gap of that union (its buffer is live whenever those covering the block are), so one
//!   pass over the meeting rectangles in start order cuts the gaps they touch, and the
//!   untouched gaps between, passed on the way, are compared without a branch per gap
//!   ([`BusyIndex::best_in_half_block`]).
//!
//! Bytes are counted in units of the sizes' greatest common divisor, in `u32` where every
//! end fits ([`Unit`]): half the memory a query reads, for the same placements.
//!
//! Buffers only meet buffers of their own part of the schedule, so [`place()`] first splits
//! the schedule where no buffer spans a boundary and gives each part an index of its own
//! (smaller, so faster; the placements are the same). A query costs O(log n) plus the
//! segments of the unions it reads and the rectangles of at most two half blocks, which
//! grows with how fragmented memory is around that time, not with how many buffers live
//! then (benches/BENCHMARKS.md has the timings).
//!
//! The unions and rectangles are in `busy/sets.rs`, the loop that places buffers with an
//! index in `busy/place.rs`.

mod place;
mod sets;

pub(super) use place::{Fit, place, place_pinned_reusing, place_until};
use sets::{HALF_BLOCK_LEVELS, Leaf, Rects, Segments, Unit};

/// A union of the buffers meeting or covering one node, brought up to date only when a
/// query reads it ([`BusyIndex::refresh`]): a buffer covering a node is logged once, in
/// `covers` of that node, and reaches the unions under it in batches, not one insert per
/// union at once (thousands of unions for a buffer that lives the whole step).
#[derive(Clone, Debug, Default)]
struct Lazy<U> {
    segments: Segments<U>,
    /// Ranges inserted at this node itself, not yet in `segments`.
    pending: Vec<(U, U)>,
    /// Per level `k` up to the node's own: how many entries of `covers` of the node's
    /// ancestor at level `k` (the node itself at its own level) are in `segments`.
    seen: Vec<usize>,
}

/// A node's own pending ranges are merged once there are this many (so memory stays
/// bounded for nodes no query reads).
const PENDING_MAX: usize = 64;

/// One union a query reads.
#[derive(Clone, Copy, Debug)]
enum Set {
    Block(usize),
    All(usize),
    /// The buffers covering half block `.0` but not its block.
    Half(usize),
    /// The rectangles of half block `.0` that meet its leaves `[.1, .2]`, not merged into
    /// a union (queries read them only where a candidate gap survives the unions).
    Rects(usize, Leaf, Leaf),
}

/// Which placed bytes are busy during a time range (see the module docs).
struct BusyIndex<U> {
    /// Leaves rounded up to a power of two; node `v` has children `2v`, `2v+1`, the root
    /// is node 1 at level 0 and the leaves are at level `log2(width)`.
    width: usize,
    /// The level of the block nodes.
    block_level: u32,
    /// Per node at or above the block level: every buffer meeting it (kept levels only).
    upper: Vec<Lazy<U>>,
    /// Per block node `b` (index `b - 2^block_level`): buffers covering it.
    blocks: Vec<Lazy<U>>,
    /// Per node at or above the block level: the buffers whose range covers it and not its
    /// parent, in placement order (the unions under it take them from here).
    covers: Vec<Vec<(U, U)>>,
    /// Scratch for [`BusyIndex::refresh`].
    batch: Vec<(U, U)>,
    spare: Vec<(U, U)>,
    /// Per half block (a child of a block, index `v - 2^(block_level + 1)`): every buffer
    /// meeting it that does not cover its block, clipped to it, sorted by start offset.
    rects: Vec<Rects<U>>,
    /// Per half block: the buffers covering it but not its block (not rectangles: when
    /// there are few leaves, thousands of long-lived buffers cover a half block, and a
    /// query read every one of them as a rectangle).
    halves: Vec<Segments<U>>,
    /// How many leaves are in use: a range reaching the last one is stored as reaching
    /// the padding after it too (no query reads the padding), so that it covers the
    /// nodes at the end instead of being a rectangle in each.
    leaves: usize,
    /// Scratch for queries.
    sets: Vec<Set>,
    merged: Vec<(U, U)>,
    pieces: Vec<(U, U)>,
    cursors: Vec<usize>,
    order: Vec<usize>,
}

/// The leaves of a range, half-open: `lo..hi` (empty if `hi <= lo`).
type Leaves = (usize, usize);

/// The leaves of each of `ranges` (inclusive steps `first..=last`) when time is compressed
/// to their distinct `first`s (see the module docs), and how many leaves there are. Found
/// by two sorts, not a binary search per range: those missed the cache at every step
/// (the leaves of 200000 buffers were a sixteenth of a best-fit run).
fn leaves_of(ranges: impl Iterator<Item = (usize, usize)>) -> (usize, Vec<Leaves>) {
    let mut by_first: Vec<(usize, usize, usize)> = ranges.enumerate().map(|(k, (first, last))| (first, last, k)).collect();
    let mut leaves = vec![(0, 0); by_first.len()];
    by_first.sort_unstable();
    let mut firsts: Vec<usize> = Vec::with_capacity(by_first.len());
    for &(first, _, k) in &by_first {
        if firsts.last() != Some(&first) {
            firsts.push(first);
        }
        leaves[k].0 = firsts.len() - 1;
    }
    let mut by_last: Vec<(usize, usize)> = by_first.iter().map(|&(_, last, k)| (last, k)).collect();
    by_last.sort_unstable();
    let mut hi = 0usize;
    for (last, k) in by_last {
        hi += firsts[hi..].iter().take_while(|&&first| first <= last).count();
        leaves[k].1 = hi;
    }
    (firsts.len(), leaves)
}

/// What a gap visitor tells the walk.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Walk {
    Continue,
    Stop,
}

/// Unions with at most this many segments are merged into one once a walk has looked into
/// [`MERGE_AFTER`] pivot gaps; bigger ones keep their own cursor.
const SMALL: usize = 64;

/// Unions of the buffers meeting a node (`upper`) are kept at every `STRIDE`-th level up
/// from the block level; a query needing one at another level reads the children's.
const STRIDE: u32 = 2;

fn level(node: usize) -> u32 {
    usize::BITS - 1 - node.leading_zeros()
}

impl<U: Unit> BusyIndex<U> {
    /// An empty index over `leaves` leaves ([`leaves_of`]).
    fn new(leaves: usize) -> BusyIndex<U> {
        let width = leaves.max(1).next_power_of_two();
        let depth = level(width);
        // Blocks of about 2√width leaves, halves of blocks under them (measured best on the
        // synthetic lists of benches/offsets.rs among levels one and two either side).
        // A half block has at most 2^16 leaves, so that a leaf in it is a `Leaf` (only
        // trees of over 2^32 leaves need deeper blocks for that).
        let block_level = (depth.saturating_sub(2) / 2).max(depth.saturating_sub(HALF_BLOCK_LEVELS + 1));
        let base = 1usize << block_level;
        BusyIndex {
            width,
            block_level,
            upper: (0..2 * base).map(|v| Lazy { seen: vec![0; (level(v.max(1)) + 1) as usize], ..Lazy::default() }).collect(),
            blocks: (0..base).map(|_| Lazy { seen: vec![0; (block_level + 1) as usize], ..Lazy::default() }).collect(),
            covers: vec![Vec::new(); 2 * base],
            batch: Vec::new(),
            spare: Vec::new(),
            rects: vec![Rects::default(); 2 * base],
            halves: vec![Segments::default(); 2 * base],
            leaves,
            sets: Vec::new(),
            merged: Vec::new(),
            pieces: Vec::new(),
            cursors: Vec::new(),
            order: Vec::new(),
        }
    }

    /// Marks `[start, end)` busy during leaves `lo..hi` (an empty byte range is ignored).
    /// The bytes must be free then, as placements are: best fit relies on no two buffers
    /// live at once sharing a byte.
    fn insert(&mut self, (lo, hi): Leaves, start: U, end: U) {
        if lo < hi && start < end {
            let hi = if hi == self.leaves { self.width } else { hi };
            self.insert_at(1, 0, self.width, lo, hi, start, end);
        }
    }

    /// Whether `upper` is kept at nodes of level `lv`: every `STRIDE`-th level, counting up
    /// from the block level.
    fn kept(&self, lv: u32) -> bool {
        lv % STRIDE == self.block_level % STRIDE
    }

    #[allow(clippy::too_many_arguments)]
    fn insert_at(&mut self, node: usize, l: usize, h: usize, lo: usize, hi: usize, start: U, end: U) {
        if hi <= l || h <= lo {
            return;
        }
        let lv = level(node);
        let bl = self.block_level;
        if lv > bl {
            // A half block: its part of the range, kept in start order.
            let half = node - (2usize << bl);
            if lo <= l && h <= hi {
                self.halves[half].insert(start, end);
            } else {
                self.rects[half].insert((lo.max(l) - l) as Leaf, (hi.min(h) - l - 1) as Leaf, start, end);
            }
            return;
        }
        if lo <= l && h <= hi {
            // Every union under it takes it when next read.
            self.covers[node].push((start, end));
            return;
        }
        if self.kept(lv) {
            let union = &mut self.upper[node];
            union.pending.push((start, end));
            if union.pending.len() >= PENDING_MAX {
                self.refresh(node, false);
            }
        }
        let mid = l + (h - l) / 2;
        self.insert_at(2 * node, l, mid, lo, hi, start, end);
        self.insert_at(2 * node + 1, mid, h, lo, hi, start, end);
    }

    /// Brings the union of `node` up to date (`upper`, or `blocks` if `block`): merges the
    /// ranges logged in `covers` of the node and its ancestors since it was last brought up
    /// to date, and (for `upper`) its own pending ones.
    fn refresh(&mut self, node: usize, block: bool) {
        let lv = level(node);
        let union = if block { &mut self.blocks[node - (1usize << lv)] } else { &mut self.upper[node] };
        let batch = &mut self.batch;
        batch.clear();
        batch.append(&mut union.pending);
        for (k, seen) in union.seen.iter_mut().enumerate() {
            let log = &self.covers[node >> (lv - k as u32)];
            if *seen < log.len() {
                batch.extend_from_slice(&log[*seen..]);
                *seen = log.len();
            }
        }
        union.segments.insert_all(batch, &mut self.spare);
    }

    /// Pushes the unions that hold exactly the buffers meeting leaves `[lo, hi)` within
    /// node `node` (covering `[l, h)`), given that its ancestors' are pushed.
    fn collect(&mut self, node: usize, l: usize, h: usize, lo: usize, hi: usize) {
        if hi <= l || h <= lo {
            return;
        }
        let lv = level(node);
        let bl = self.block_level;
        if lv > bl {
            // The buffers covering the half block, and its rectangles meeting the range.
            let half = node - (2usize << bl);
            let (qfirst, qlast) = ((lo.max(l) - l) as Leaf, (hi.min(h) - l - 1) as Leaf);
            if !self.halves[half].0.is_empty() {
                self.sets.push(Set::Half(half));
            }
            self.sets.push(Set::Rects(half, qfirst, qlast));
            return;
        }
        let full = lo <= l && h <= hi;
        if full && self.kept(lv) {
            self.refresh(node, false);
            self.sets.push(Set::All(node));
            return;
        }
        if !full && lv == bl {
            self.refresh(node, true);
            self.sets.push(Set::Block(node - (1usize << bl)));
        }
        // A node whose union is not kept, or one partly in the range: its children say.
        let mid = l + (h - l) / 2;
        self.collect(2 * node, l, mid, lo, hi);
        self.collect(2 * node + 1, mid, h, lo, hi);
    }

    /// Collects the unions holding exactly the buffers live during leaves `lo..hi` into
    /// `sets` and returns the pivot's position among them: the union of everything meeting
    /// the widest node wholly inside the range (nearly gapless), else the biggest union.
    fn gather(&mut self, (lo, hi): Leaves) -> Option<usize> {
        self.sets.clear();
        if lo < hi {
            self.collect(1, 0, self.width, lo, hi);
        }
        self.sets
            .iter()
            .enumerate()
            .max_by_key(|&(_, &set)| match set {
                Set::All(v) => (2u8, std::cmp::Reverse(level(v)), usize::MAX - self.slice(set).len()),
                Set::Rects(..) => (0, std::cmp::Reverse(0), 0),
                _ => (1, std::cmp::Reverse(0), self.slice(set).len()),
            })
            .map(|(i, _)| i)
    }

    /// The segments of one union a query reads.
    fn slice(&self, set: Set) -> &[(U, U)] {
        slice_of(&self.blocks, &self.upper, &self.halves, set)
    }

    /// Calls `visit(start, end)` for every maximal gap of bytes that no buffer live during
    /// `[first, last]` occupies, lowest first; the last gap is unbounded (`end == None`)
    /// and starts at the top of those buffers. Bounded gaps shorter than `min_len` may be
    /// skipped. Stops early when `visit` says so.
    fn gaps(&mut self, leaves: Leaves, min_len: U, mut visit: impl FnMut(U, Option<U>) -> Walk) {
        let pivot_at = self.gather(leaves);
        let slice = |set| slice_of(&self.blocks, &self.upper, &self.halves, set);
        let rects = &self.rects;
        // A half block's rectangles are never the pivot (their slice is empty).
        let pivot: &[(U, U)] = pivot_at.map_or(&[], |i| slice(self.sets[i]));
        // The others are searched inside each pivot gap: the unions by a cursor each, the
        // rectangles of the half blocks at the ends by the highest end so far (not merged
        // into a union first: a long-lived buffer's range ends in two half blocks, whose
        // rectangles a merge read in full for every such buffer, O(√n) each; nested
        // activations of a 1,000,000-op training step made that most of a plan). Many small
        // unions cost a search each per gap: once a walk has looked into a few gaps, they
        // are merged into one.
        let mut others: Vec<Source<U>> = Vec::with_capacity(self.sets.len());
        for (i, &set) in self.sets.iter().enumerate() {
            match set {
                Set::Rects(half, qfirst, qlast) if !rects[half].bytes.is_empty() => others.push(Source::Rects(&rects[half], qfirst, qlast)),
                Set::Rects(..) => {}
                _ if Some(i) == pivot_at || slice(set).is_empty() => {}
                _ => others.push(Source::Union(slice(set))),
            }
        }
        let (cursors, pieces) = (&mut self.cursors, &mut self.pieces);
        cursors.clear();
        cursors.resize(others.len(), 0);
        let is_small = |source: &Source<U>| matches!(source, Source::Union(s) if s.len() <= SMALL);
        let small = others.iter().filter(|s| is_small(s)).count();
        let limit = if small > 1 { MERGE_AFTER } else { usize::MAX };
        let Some(resume) = walk(pivot, 0, &others, cursors, pieces, min_len, limit, &mut visit) else { return };
        let merged = &mut self.merged;
        merged.clear();
        for source in others.iter().filter(|s| is_small(s)) {
            if let Source::Union(set) = source {
                merged.extend_from_slice(set);
            }
        }
        coalesce(merged);
        others.retain(|s| !is_small(s));
        others.push(Source::Union(merged));
        cursors.clear();
        cursors.resize(others.len(), 0);
        walk(pivot, resume, &others, cursors, pieces, min_len, usize::MAX, &mut visit);
    }

    /// Best fit for `size` bytes during leaves `lo..hi`: the start of the smallest maximal
    /// gap of at least `size` bytes that no buffer live then occupies (the lowest among
    /// equals), or the top of those buffers if no gap holds it.
    ///
    /// A range within one half block (most of them) has a pass of its own
    /// ([`BusyIndex::best_in_half_block`]). For the others:
    ///
    /// Only gaps of at least `size` bytes matter: the pivot's gaps that are long enough
    /// (plus all above its top, whose last free part starts at the top of all: found so,
    /// not by reading the rectangles once more) are the candidates, and each
    /// goes through the other unions depth first ([`refine`]: each cuts it, pieces too
    /// short are dropped), so the first piece of exactly `size` bytes ends the query: none
    /// can be smaller, and it is the lowest of its length (a third of the queries on the
    /// synthetic lists end so). Each union is galloped through, so a big union costs the
    /// pieces that reach it times a logarithm, not its length (long ranges read many big
    /// unions, but their pivot, everything meeting a wide node, leaves few candidates).
    /// The rectangles of the half blocks at the ends come last and are not merged into
    /// unions first (merging them was a third of the time of these queries): only the
    /// pieces that every union leaves reach them ([`Rects::cut`]).
    fn best(&mut self, leaves: Leaves, size: U) -> U {
        let (lo, hi) = leaves;
        if lo < hi
            && let Some(shift) = level(self.width).checked_sub(self.block_level + 1)
            && lo >> shift == (hi - 1) >> shift
        {
            let half = lo >> shift;
            let base = half << shift;
            return self.best_in_half_block(half, (lo - base) as Leaf, (hi - 1 - base) as Leaf, size);
        }
        let Some(pivot_at) = self.gather(leaves) else { return U::ZERO };
        let slice = |set| slice_of(&self.blocks, &self.upper, &self.halves, set);
        let rects = &self.rects;
        let pivot = slice(self.sets[pivot_at]);
        // The other unions, smallest first (measured a little better than biggest first),
        // then the rectangles.
        let order = &mut self.order;
        order.clear();
        order.extend((0..self.sets.len()).filter(|&i| i != pivot_at && !matches!(self.sets[i], Set::Rects(..)) && !slice(self.sets[i]).is_empty()));
        order.sort_unstable_by_key(|&i| slice(self.sets[i]).len());
        let mut unions: Vec<Source<U>> = order.iter().map(|&i| Source::Union(slice(self.sets[i]))).collect();
        for &set in &self.sets {
            if let Set::Rects(half, qfirst, qlast) = set
                && !rects[half].bytes.is_empty()
            {
                unions.push(Source::Rects(&rects[half], qfirst, qlast));
            }
        }
        let cursors = &mut self.cursors;
        cursors.clear();
        cursors.resize(unions.len(), 0);
        let mut best = Smallest::new(size);
        for (a, b) in gaps_of(pivot, size) {
            if refine(a, b, &unions, cursors, &mut best) {
                break;
            }
        }
        best.found().unwrap_or(best.top)
    }

    /// [`BusyIndex::best`] for leaves `[qfirst, qlast]` of half block `half` (counted
    /// from its first leaf): most queries, those of short-lived buffers. The buffers live
    /// then are those covering its block and those of the half block's rectangles that
    /// meet the range. Each such rectangle lies inside one gap of the block's union (its
    /// buffer is live while every buffer covering the block is), so the free parts are the
    /// block union's gaps that no meeting rectangle touches, and the parts of the touched
    /// ones that the rectangles leave free. One pass finds the smallest: the meeting
    /// rectangles in start order, merged, each located in the block union by a scan that
    /// compares the untouched gaps it passes without a branch per gap (a thousand gaps per
    /// block on `synthetic::training_like(200000)`, a hundred touched; a binary search per
    /// rectangle missed the cache more than the scan costs).
    fn best_in_half_block(&mut self, half: usize, qfirst: Leaf, qlast: Leaf, size: U) -> U {
        let block = half >> 1;
        self.refresh(block + (1usize << self.block_level), true);
        let gaps = Gaps { union: &self.blocks[block].segments.0, next: 0, open: None };
        let mut cut = Cut { gaps, best: Smallest::new(size), run: None, top: U::ZERO };
        // The buffers covering the half block are live then too (each inside one gap of
        // the block union as well): merged into the rectangles' start order.
        let covering = &self.halves[half].0;
        let mut next = 0;
        let exact = self.rects[half].meeting(qfirst, qlast, |start, end| {
            while let Some(&(s, e)) = covering.get(next).filter(|c| c.0 <= start) {
                next += 1;
                if cut.add(s, e) {
                    return true;
                }
            }
            cut.add(start, end)
        }) || covering[next..].iter().any(|&(s, e)| cut.add(s, e));
        if exact || cut.finish() {
            return cut.best.at;
        }
        cut.best.found().unwrap_or_else(|| cut.gaps.union.last().map_or(U::ZERO, |s| s.1).max(cut.top))
    }
}

/// The smallest free part found so far for `size` bytes (`len == U::MAX`: none yet):
/// parts are offered lowest first and only a strictly smaller one replaces it, so it is
/// the lowest among equals.
struct Smallest<U> {
    size: U,
    len: U,
    at: U,
    /// The top of the buffers live then, once [`refine`] has found it.
    top: U,
}

impl<U: Unit> Smallest<U> {
    fn new(size: U) -> Smallest<U> {
        Smallest { size, len: U::MAX, at: U::ZERO, top: U::ZERO }
    }

    /// The start of the smallest part offered, if any held `size` bytes.
    fn found(&self) -> Option<U> {
        (self.len != U::MAX).then_some(self.at)
    }

    /// Offers `[a, b)`; true once the smallest is an exact fit (nothing can beat it).
    fn offer(&mut self, a: U, b: U) -> bool {
        let len = b - a;
        if len >= self.size && len < self.len {
            (self.len, self.at) = (len, a);
        }
        self.exact()
    }

    /// Offers the gaps of `union` from gap `from` on (gap `i` ends where `union[i]`
    /// starts) up to the one holding offset `below` (not offered), and returns that one's
    /// number; one branch per gap, to stop, the offers without one.
    fn offer_gaps_below(&mut self, union: &[(U, U)], from: usize, below: U) -> usize {
        if from > union.len() {
            return from; // past the unbounded gap
        }
        let mut a = if from == 0 { U::ZERO } else { union[from - 1].1 };
        let (mut len, mut at) = (self.len, self.at);
        let mut i = from;
        while let Some(&(s, e)) = union.get(i).filter(|s| s.1 <= below) {
            let key = if s - a >= self.size { s - a } else { U::MAX };
            let smaller = key < len;
            len = if smaller { key } else { len };
            at = if smaller { a } else { at };
            a = e;
            i += 1;
        }
        (self.len, self.at) = (len, at);
        i
    }

    /// Whether the smallest is an exact fit (nothing can beat it).
    fn exact(&self) -> bool {
        self.len == self.size
    }
}

/// The gaps of a union, visited lowest first: gap `i` lies between `union[i - 1]` (or 0)
/// and `union[i]` (the last, `i == union.len()`, is unbounded).
struct Gaps<'a, U> {
    union: &'a [(U, U)],
    /// The first gap not yet offered whole nor opened.
    next: usize,
    /// The gap being cut (its number) and where its free part goes on from.
    open: Option<(usize, U)>,
}

/// The free parts of the gaps of a union (`gaps`) that rectangles (`add`, lowest start
/// first, each inside one gap) leave, offered to `best` lowest first.
struct Cut<'a, U> {
    gaps: Gaps<'a, U>,
    best: Smallest<U>,
    /// The rectangles added since the last that did not meet or touch the one before,
    /// merged.
    run: Option<(U, U)>,
    /// The highest end added.
    top: U,
}

impl<U: Unit> Cut<'_, U> {
    /// Adds the bytes of a rectangle; true once the smallest is an exact fit.
    fn add(&mut self, start: U, end: U) -> bool {
        self.top = self.top.max(end);
        match &mut self.run {
            Some(run) if start <= run.1 => {
                run.1 = run.1.max(end);
                false
            }
            run => match run.replace((start, end)) {
                Some(done) => self.cut_out(done),
                None => false,
            },
        }
    }

    /// Cuts `[start, end)` out of the gap holding it: the gaps before it that nothing cut
    /// are offered whole, the part of its gap below it is offered.
    fn cut_out(&mut self, (start, end): (U, U)) -> bool {
        let gaps = &mut self.gaps;
        if let Some((open, from)) = gaps.open {
            if gaps.union.get(open).is_none_or(|s| s.1 > start) {
                // In the gap being cut.
                gaps.open = Some((open, end));
                return self.best.offer(from, start);
            }
            if self.best.offer(from, gaps.union[open].0) {
                return true;
            }
        }
        let gap = self.best.offer_gaps_below(gaps.union, gaps.next, start);
        if self.best.exact() {
            return true;
        }
        gaps.next = gap + 1;
        let from = if gap == 0 { U::ZERO } else { gaps.union[gap - 1].1 };
        gaps.open = Some((gap, end));
        self.best.offer(from, start)
    }

    /// Cuts the last run and offers what remains: the rest of the gap being cut and the
    /// bounded gaps above it; true once the smallest is an exact fit.
    fn finish(&mut self) -> bool {
        if let Some(run) = self.run.take()
            && self.cut_out(run)
        {
            return true;
        }
        let gaps = &mut self.gaps;
        if let Some((open, from)) = gaps.open.take()
            && open < gaps.union.len()
            && self.best.offer(from, gaps.union[open].0)
        {
            return true;
        }
        self.best.offer_gaps_below(gaps.union, gaps.next, U::MAX);
        self.best.exact()
    }
}

/// Offers the parts of `[a, b)` that none of `unions` covers to `best`, depth first: each
/// part the first union leaves goes through the others before the next; `cursors[i]` is
/// union `i`'s first segment that may meet what comes next (parts arrive lowest first).
/// True once `best` is an exact fit: nothing smaller can follow, and it is the lowest of
/// its length.
fn refine<U: Unit>(a: U, b: U, unions: &[Source<U>], cursors: &mut [usize], best: &mut Smallest<U>) -> bool {
    let (Some((source, unions)), Some((j, cursors))) = (unions.split_first(), cursors.split_first_mut()) else {
        if b == U::MAX {
            best.top = a; // the space above every union: not a gap
            return false;
        }
        return best.offer(a, b);
    };
    match *source {
        Source::Union(union) => {
            *j = gallop(union, *j, |s| s.1 <= a);
            cut(a, b, union, j, best.size, |a, b| refine(a, b, unions, cursors, best))
        }
        Source::Rects(rects, qfirst, qlast) => {
            *j = gallop(&rects.reach, *j, |&reach| reach <= a);
            rects.cut(a, b, qfirst, qlast, *j, best.size, |a, b| refine(a, b, unions, cursors, best))
        }
    }
}

/// What [`refine`] cuts a candidate gap with.
#[derive(Clone, Copy)]
enum Source<'a, U> {
    Union(&'a [(U, U)]),
    /// The rectangles of a half block meeting its leaves `[.1, .2]`.
    Rects(&'a Rects<U>, Leaf, Leaf),
}

/// How many pivot gaps a walk looks into before small unions are merged.
const MERGE_AFTER: usize = 4;

/// Walks the gaps of `pivot` from gap `from` (gap `i` ends where `pivot[i]` starts; the
/// last is unbounded); inside each, the segments of `others` cut it into the gaps of the
/// whole union, which go to `visit`. Gaps shorter than `min_len` are skipped. Returns the
/// gap to resume from after looking into `limit` gaps, `None` when done or stopped.
#[allow(clippy::too_many_arguments)]
fn walk<U: Unit>(
    pivot: &[(U, U)],
    from: usize,
    others: &[Source<U>],
    cursors: &mut [usize],
    pieces: &mut Vec<(U, U)>,
    min_len: U,
    limit: usize,
    visit: &mut impl FnMut(U, Option<U>) -> Walk,
) -> Option<usize> {
    let mut looked = 0usize;
    for i in from..=pivot.len() {
        let g0 = if i == 0 { U::ZERO } else { pivot[i - 1].1 };
        let g1 = pivot.get(i).map(|s| s.0);
        // Gaps inside a pivot gap are no longer than it.
        if g1.is_some_and(|g1| g1 <= g0 || g1 - g0 < min_len) {
            continue;
        }
        if looked == limit {
            return Some(i);
        }
        looked += 1;
        pieces.clear();
        let clip = |(s, e): (U, U)| (s.max(g0), g1.map_or(e, |g1| e.min(g1)));
        for (source, c) in others.iter().zip(cursors.iter_mut()) {
            match *source {
                Source::Union(set) => {
                    *c = gallop(set, *c, |s| s.1 <= g0);
                    for &(s, e) in &set[*c..] {
                        if g1.is_some_and(|g1| s >= g1) {
                            break;
                        }
                        pieces.push(clip((s, e)));
                    }
                }
                Source::Rects(rects, qfirst, qlast) => {
                    *c = gallop(&rects.reach, *c, |&reach| reach <= g0);
                    for (&(s, e), &(first, last)) in rects.bytes[*c..].iter().zip(&rects.spans[*c..]) {
                        if g1.is_some_and(|g1| s >= g1) {
                            break;
                        }
                        if e > g0 && first <= qlast && qfirst <= last {
                            pieces.push(clip((s, e)));
                        }
                    }
                }
            }
        }
        if !pieces.is_sorted() {
            pieces.sort_unstable();
        }
        let mut x = g0;
        for &(s, e) in pieces.iter() {
            if s > x && visit(x, Some(s)) == Walk::Stop {
                return None;
            }
            x = x.max(e);
        }
        match g1 {
            Some(g1) => {
                if x < g1 && visit(x, Some(g1)) == Walk::Stop {
                    return None;
                }
            }
            None => {
                visit(x, None);
                return None;
            }
        }
    }
    None
}

/// The gaps of `pivot` (the first from 0) of at least `min_len` bytes (`min_len > 0`),
/// lowest first, the last one above its top, up to `U::MAX`.
fn gaps_of<U: Unit>(pivot: &[(U, U)], min_len: U) -> impl Iterator<Item = (U, U)> + '_ {
    let ends = std::iter::once(U::ZERO).chain(pivot.iter().map(|s| s.1));
    let starts = pivot.iter().map(|s| s.0).chain(std::iter::once(U::MAX));
    ends.zip(starts).filter(move |&(a, b)| b >= a.saturating_add(min_len))
}

/// Calls `part` for each part of `[a, b)` that `union` leaves free and that holds
/// `min_len` bytes, lowest first, starting from segment `*j` (the first that ends after
/// `a`) and leaving `*j` at the first segment that may meet what comes after `b`. Stops,
/// returning true, as soon as `part` returns true.
fn cut<U: Unit>(mut a: U, b: U, union: &[(U, U)], j: &mut usize, min_len: U, mut part: impl FnMut(U, U) -> bool) -> bool {
    while let Some(&(s, e)) = union.get(*j) {
        if s >= b {
            break;
        }
        if s >= a.saturating_add(min_len) && part(a, s) {
            return true;
        }
        a = e;
        if e >= b {
            break; // it may reach into what comes next too
        }
        *j += 1;
    }
    b >= a.saturating_add(min_len) && part(a, b)
}

/// The segments of `set`.
fn slice_of<'a, U>(blocks: &'a [Lazy<U>], upper: &'a [Lazy<U>], halves: &'a [Segments<U>], set: Set) -> &'a [(U, U)] {
    match set {
        Set::Block(b) => &blocks[b].segments.0,
        Set::All(v) => &upper[v].segments.0,
        Set::Half(h) => &halves[h].0,
        Set::Rects(..) => &[],
    }
}

/// The first index at or after `from` whose item fails `before` (the items from `from` on
/// must be those that pass `before`, then those that fail it), galloping from `from`.
fn gallop<T>(items: &[T], from: usize, before: impl Fn(&T) -> bool) -> usize {
    if items.get(from).is_none_or(|item| !before(item)) {
        return from; // the usual case in a walk: no step at all
    }
    let (mut lo, mut step) = (from + 1, 1usize);
    // Invariant: every item before lo passes.
    while let Some(item) = items.get(lo + step - 1) {
        if !before(item) {
            break;
        }
        lo += step;
        step *= 2;
    }
    let hi = (lo + step).min(items.len()).max(lo);
    lo + items[lo..hi].partition_point(before)
}

/// Sorts `segments` and merges those that meet or touch, in place.
fn coalesce<U: Unit>(segments: &mut Vec<(U, U)>) {
    segments.sort_unstable();
    let mut kept = 0usize;
    for i in 0..segments.len() {
        let (s, e) = segments[i];
        if kept > 0 && s <= segments[kept - 1].1 {
            let last = &mut segments[kept - 1];
            last.1 = last.1.max(e);
        } else {
            segments[kept] = (s, e);
            kept += 1;
        }
    }
    segments.truncate(kept);
}

#[cfg(test)]
mod tests;
