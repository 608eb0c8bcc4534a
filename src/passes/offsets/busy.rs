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
//! - A half block keeps the other buffers meeting it as rectangles (byte range, leaves
//!   clipped to it) sorted by start offset: a query scans them, which is cheaper than the
//!   dozen small unions a deeper tree would make it read.
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
//! union plus the rectangles of its half blocks that meet Q (first fit merges them into a
//! union; best fit reads them only where a candidate survives the unions).
//!
//! The gaps of the union are found around a *pivot*: the `upper` of the widest covered
//! node (everything live in a long range: nearly gapless) or else the biggest union (for a
//! short range, the buffers covering its block). Every gap of the union lies in a gap of
//! the pivot, so pivot gaps shorter than the buffer being placed are skipped.
//!
//! - First fit ([`walk`]) looks into the pivot gaps lowest first and stops at the first
//!   that holds the buffer; inside each, the other unions' segments (found by galloping
//!   cursors) cut out the true gaps, and after a few gaps the small unions are merged.
//! - Best fit ([`BusyIndex::best`]) needs only the smallest gap that holds the buffer, so
//!   it refines candidates: each pivot gap long enough goes through the other unions depth
//!   first ([`refine`]: each cuts it, galloping, so a big union costs the pieces reaching
//!   it times a logarithm; pieces too short are dropped; the rectangles of the end half
//!   blocks come last, searched by the highest end so far, [`Rects::cut`]), and the first
//!   exact fit ends the query. A range within one half block (a short-lived buffer: most
//!   queries) reads no
//!   union but its block's: every rectangle meeting it lies inside one gap of that union
//!   (its buffer is live whenever those covering the block are), so one pass over the
//!   meeting rectangles in start order cuts the gaps they touch, and the untouched gaps
//!   between, passed on the way, are compared without a branch per gap
//!   ([`BusyIndex::best_in_half_block`]).
//!
//! Bytes are counted in units of the sizes' greatest common divisor, in `u32` where every
//! end fits ([`Unit`]): half the memory a query reads, for the same placements.
//!
//! Buffers only meet buffers of their own part of the schedule, so [`place`] first splits
//! the schedule where no buffer spans a boundary and gives each part an index of its own
//! (smaller, so faster; the placements are the same). A query costs O(log n) plus the
//! segments of the unions it reads and the rectangles of at most two half blocks, which
//! grows with how fragmented memory is around that time, not with how many buffers live
//! then (benches/BENCHMARKS.md has the timings).

use crate::analysis::liveness::Live;

/// The integer type an index counts bytes in: [`place`] divides every size and offset by
/// their greatest common divisor and uses `u32` when the result cannot exceed it (then
/// the unions and rectangles take half the memory, and a query, which mostly waits on
/// memory, runs a fifth faster on `synthetic::training_like(200000)`), `u64` otherwise.
pub(super) trait Unit: Copy + Ord + Default + std::fmt::Debug + std::ops::Sub<Output = Self> {
    const ZERO: Self;
    const MAX: Self;
    fn saturating_add(self, other: Self) -> Self;
    fn checked_add(self, other: Self) -> Option<Self>;
    fn from_u64(x: u64) -> Option<Self>;
    fn to_u64(self) -> u64;
}

macro_rules! unit {
    ($t:ty) => {
        impl Unit for $t {
            const ZERO: $t = 0;
            const MAX: $t = <$t>::MAX;
            fn saturating_add(self, other: $t) -> $t {
                <$t>::saturating_add(self, other)
            }
            fn checked_add(self, other: $t) -> Option<$t> {
                <$t>::checked_add(self, other)
            }
            fn from_u64(x: u64) -> Option<$t> {
                <$t>::try_from(x).ok()
            }
            fn to_u64(self) -> u64 {
                u64::from(self)
            }
        }
    };
}
unit!(u32);
unit!(u64);

/// An insert-only union of half-open byte ranges: sorted, disjoint, never touching.
#[derive(Clone, Debug, Default)]
pub(super) struct Segments<U>(Vec<(U, U)>);

impl<U: Unit> Segments<U> {
    /// Adds `[start, end)` (`start < end`), merging with every segment it meets or touches.
    fn insert(&mut self, start: U, end: U) {
        let v = &mut self.0;
        let i = v.partition_point(|s| s.1 < start);
        // Segments from i on end at or after `start`; those starting by `end` merge (few).
        let j = i + v[i..].iter().take_while(|s| s.0 <= end).count();
        if i == j {
            v.insert(i, (start, end));
        } else {
            let merged = (v[i].0.min(start), v[j - 1].1.max(end));
            v[i] = merged;
            v.drain(i + 1..j);
        }
    }

    /// Adds every range of `batch` (each `start < end`; reordered), through `spare` (left
    /// with the old segments): a few one by one, more by one merge of sorted lists.
    fn insert_all(&mut self, batch: &mut [(U, U)], spare: &mut Vec<(U, U)>) {
        if batch.len() <= INSERT_ONE_BY_ONE {
            for &(start, end) in batch.iter() {
                self.insert(start, end);
            }
            return;
        }
        batch.sort_unstable();
        spare.clear();
        let (old, mut i) = (&self.0, 0usize);
        for &(start, end) in batch.iter() {
            // The old segments ending before `start` go as they are (none of them touches
            // the top of `spare`: see below).
            let j = gallop(old, i, |s| s.1 < start);
            spare.extend_from_slice(&old[i..j]);
            i = j;
            match spare.last_mut() {
                Some(top) if start <= top.1 => top.1 = top.1.max(end),
                _ => spare.push((start, end)),
            }
            // Then the old segments it meets or touches merge into it.
            let top = spare.last_mut().expect("just pushed");
            while let Some(&(s, e)) = old.get(i).filter(|s| s.0 <= top.1) {
                (top.0, top.1) = (top.0.min(s), top.1.max(e));
                i += 1;
            }
        }
        spare.extend_from_slice(&old[i..]);
        std::mem::swap(&mut self.0, spare);
    }
}

/// A batch of at most this many ranges is inserted one by one (a binary search each),
/// a bigger one merged in one pass over the union. Inserting in place touches only the
/// union above the lowest range, where a merge copied all of it into a cold buffer
/// (cachegrind, spatial order on `synthetic::training_like(200000)`: 8 -> 32 took L2
/// misses 60.6 -> 57.4 M and D1 misses 88.5 -> 81.4 M, for 0.4% fewer instructions).
/// A large batch (a union no query read for long) still costs one pass.
const INSERT_ONE_BY_ONE: usize = 32;

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

/// A leaf counted from the first of its half block: half blocks have at most
/// 2^[`HALF_BLOCK_LEVELS`] leaves. Rectangles keep their leaves so, and a query scans
/// them: half the bytes of a `u32`.
type Leaf = u16;
const HALF_BLOCK_LEVELS: u32 = Leaf::BITS;

/// One union a query reads.
#[derive(Clone, Copy, Debug)]
enum Set {
    Block(usize),
    All(usize),
    /// `scratch[from..to]`: the rectangles of a half block that meet the range, merged.
    Scratch(usize, usize),
    /// The rectangles of half block `.0` that meet its leaves `[.1, .2]`, not merged
    /// (best fit reads them only where a candidate gap survives the unions).
    Rects(usize, Leaf, Leaf),
}

/// The rectangles of one half block, sorted by start offset, in parallel lists (a query
/// scans the leaves and reads the bytes of those that meet it): rectangle `i` is a
/// buffer's bytes `bytes[i]` (half-open) during leaves `spans[i]` (inclusive, counted from
/// the half block's first, as a [`Leaf`]).
#[derive(Clone, Debug, Default)]
struct Rects<U> {
    spans: Vec<(Leaf, Leaf)>,
    bytes: Vec<(U, U)>,
    /// `reach[i]`: the highest end among `bytes[..=i]` (so the rectangles that may reach
    /// past an offset are found by a search).
    reach: Vec<U>,
}

impl<U: Unit> Rects<U> {
    /// Adds bytes `[start, end)` during leaves `[first, last]`.
    fn insert(&mut self, first: Leaf, last: Leaf, start: U, end: U) {
        let at = self.bytes.partition_point(|b| b.0 <= start);
        self.bytes.insert(at, (start, end));
        self.spans.insert(at, (first, last));
        let below = if at == 0 { U::ZERO } else { self.reach[at - 1] };
        self.reach.insert(at, below.max(end));
        for reach in &mut self.reach[at + 1..] {
            if *reach >= end {
                break; // and so are all after it
            }
            *reach = end;
        }
    }

    /// [`cut`] for the union of the rectangles meeting leaves `[qfirst, qlast]`, without
    /// making it: the parts of `[a, b)` none of them covers and that hold `min_len`, lowest
    /// first, starting from rectangle `from` (the first whose `reach` passes `a`).
    #[allow(clippy::too_many_arguments)]
    fn cut(&self, mut a: U, b: U, qfirst: Leaf, qlast: Leaf, from: usize, min_len: U, mut part: impl FnMut(U, U) -> bool) -> bool {
        for (&(start, end), &(first, last)) in self.bytes[from..].iter().zip(&self.spans[from..]) {
            if start >= b {
                break;
            }
            if end > a && first <= qlast && qfirst <= last {
                if start >= a.saturating_add(min_len) && part(a, start) {
                    return true;
                }
                a = end;
                if a >= b {
                    return false;
                }
            }
        }
        b >= a.saturating_add(min_len) && part(a, b)
    }

    /// Calls `each(start, end)` with the bytes of every rectangle meeting leaves
    /// `[qfirst, qlast]`, in start order, until it returns true (then returns true).
    /// About half the rectangles meet a range (289 of 597 on average on
    /// `synthetic::training_like(200000)`), in no pattern a predictor could learn: a mask
    /// of which ones meet is made without a branch per rectangle, 64 at a time.
    fn meeting(&self, qfirst: Leaf, qlast: Leaf, mut each: impl FnMut(U, U) -> bool) -> bool {
        for (chunk, spans) in self.spans.chunks(64).enumerate() {
            let mut mask = 0u64;
            for (k, &(first, last)) in spans.iter().enumerate() {
                mask |= u64::from((first <= qlast) & (qfirst <= last)) << k;
            }
            while mask != 0 {
                let (start, end) = self.bytes[chunk * 64 + mask.trailing_zeros() as usize];
                if each(start, end) {
                    return true;
                }
                mask &= mask - 1;
            }
        }
        false
    }
}

/// Which placed bytes are busy during a time range (see the module docs).
pub(super) struct BusyIndex<U> {
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
    /// Scratch for queries.
    sets: Vec<Set>,
    scratch: Vec<(U, U)>,
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
pub(super) enum Walk {
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
    pub(super) fn new(leaves: usize) -> BusyIndex<U> {
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
            sets: Vec::new(),
            scratch: Vec::new(),
            merged: Vec::new(),
            pieces: Vec::new(),
            cursors: Vec::new(),
            order: Vec::new(),
        }
    }

    /// Marks `[start, end)` busy during leaves `lo..hi` (an empty byte range is ignored).
    /// The bytes must be free then, as placements are: best fit relies on no two buffers
    /// live at once sharing a byte.
    pub(super) fn insert(&mut self, (lo, hi): Leaves, start: U, end: U) {
        if lo < hi && start < end {
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
            self.rects[node - (2usize << bl)].insert((lo.max(l) - l) as Leaf, (hi.min(h) - l - 1) as Leaf, start, end);
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
    fn collect(&mut self, node: usize, l: usize, h: usize, lo: usize, hi: usize, merge: bool) {
        if hi <= l || h <= lo {
            return;
        }
        let lv = level(node);
        let bl = self.block_level;
        if lv > bl {
            // The half block's rectangles meeting the range, as a union.
            let (qfirst, qlast) = ((lo.max(l) - l) as Leaf, (hi.min(h) - l - 1) as Leaf);
            if !merge {
                self.sets.push(Set::Rects(node - (2usize << bl), qfirst, qlast));
                return;
            }
            let from = self.scratch.len();
            let scratch = &mut self.scratch;
            self.rects[node - (2usize << bl)].meeting(qfirst, qlast, |start, end| {
                match scratch[from..].last_mut() {
                    Some(top) if start <= top.1 => top.1 = top.1.max(end),
                    _ => scratch.push((start, end)),
                }
                false
            });
            self.sets.push(Set::Scratch(from, self.scratch.len()));
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
        self.collect(2 * node, l, mid, lo, hi, merge);
        self.collect(2 * node + 1, mid, h, lo, hi, merge);
    }

    /// Collects the unions holding exactly the buffers live during leaves `lo..hi` into
    /// `sets` and returns the pivot's position among them: the union of everything meeting
    /// the widest node wholly inside the range (nearly gapless), else the biggest union.
    fn gather(&mut self, (lo, hi): Leaves, merge: bool) -> Option<usize> {
        self.sets.clear();
        self.scratch.clear();
        if lo < hi {
            self.collect(1, 0, self.width, lo, hi, merge);
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
        slice_of(&self.blocks, &self.upper, &self.scratch, set)
    }

    /// Calls `visit(start, end)` for every maximal gap of bytes that no buffer live during
    /// `[first, last]` occupies, lowest first; the last gap is unbounded (`end == None`)
    /// and starts at the top of those buffers. Bounded gaps shorter than `min_len` may be
    /// skipped. Stops early when `visit` says so.
    pub(super) fn gaps(&mut self, leaves: Leaves, min_len: U, mut visit: impl FnMut(U, Option<U>) -> Walk) {
        let pivot_at = self.gather(leaves, true);
        let slice = |set| slice_of(&self.blocks, &self.upper, &self.scratch, set);
        let pivot: &[(U, U)] = pivot_at.map_or(&[], |i| slice(self.sets[i]));
        // The others are searched inside each pivot gap. Many small ones cost a search
        // each per gap: once a walk has looked into a few gaps, they are merged into one.
        let mut others: Vec<&[(U, U)]> = Vec::with_capacity(self.sets.len());
        for (i, &set) in self.sets.iter().enumerate() {
            let segments = slice(set);
            if Some(i) != pivot_at && !segments.is_empty() {
                others.push(segments);
            }
        }
        let (cursors, pieces) = (&mut self.cursors, &mut self.pieces);
        cursors.clear();
        cursors.resize(others.len(), 0);
        let small = others.iter().filter(|s| s.len() <= SMALL).count();
        let limit = if small > 1 { MERGE_AFTER } else { usize::MAX };
        let Some(resume) = walk(pivot, 0, &others, cursors, pieces, min_len, limit, &mut visit) else { return };
        let merged = &mut self.merged;
        merged.clear();
        for set in others.iter().filter(|s| s.len() <= SMALL) {
            merged.extend_from_slice(set);
        }
        coalesce(merged);
        others.retain(|s| s.len() > SMALL);
        others.push(merged);
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
    pub(super) fn best(&mut self, leaves: Leaves, size: U) -> U {
        let (lo, hi) = leaves;
        if lo < hi
            && let Some(shift) = level(self.width).checked_sub(self.block_level + 1)
            && lo >> shift == (hi - 1) >> shift
        {
            let half = lo >> shift;
            let base = half << shift;
            return self.best_in_half_block(half, (lo - base) as Leaf, (hi - 1 - base) as Leaf, size);
        }
        let Some(pivot_at) = self.gather(leaves, false) else { return U::ZERO };
        let slice = |set| slice_of(&self.blocks, &self.upper, &self.scratch, set);
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
        let exact = self.rects[half].meeting(qfirst, qlast, |start, end| cut.add(start, end));
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
        self.len == self.size
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
    others: &[&[(U, U)]],
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
        for (set, c) in others.iter().zip(cursors.iter_mut()) {
            *c = gallop(set, *c, |s| s.1 <= g0);
            for &(s, e) in &set[*c..] {
                if g1.is_some_and(|g1| s >= g1) {
                    break;
                }
                pieces.push((s.max(g0), g1.map_or(e, |g1| e.min(g1))));
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
fn slice_of<'a, U>(blocks: &'a [Lazy<U>], upper: &'a [Lazy<U>], scratch: &'a [(U, U)], set: Set) -> &'a [(U, U)] {
    match set {
        Set::Block(b) => &blocks[b].segments.0,
        Set::All(v) => &upper[v].segments.0,
        Set::Scratch(from, to) => &scratch[from..to],
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

/// Where a buffer goes among the gaps of the buffers it meets.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Fit {
    /// The lowest gap that holds it.
    First,
    /// The smallest gap that holds it (the lowest among equals).
    Best,
}

/// Places the buffers of `intervals` one by one in `order` (every index once), each in a gap
/// among the already placed buffers it meets in time chosen by `fit`, or on top of them if
/// no gap holds it. Zero-size buffers take no bytes and get offset 0. `None` if an offset
/// would overflow `u64`.
pub(super) fn place(intervals: &[Live], order: &[usize], fit: Fit) -> Option<Vec<u64>> {
    place_pinned(intervals, order, fit, &[])
}

/// [`place`], except that the buffers of `pinned` (buffer, offset) are not searched for:
/// each goes where `pinned` says when its turn in `order` comes (they must not overlap
/// one another; put them first in `order` so that the others go around them).
pub(super) fn place_pinned(intervals: &[Live], order: &[usize], fit: Fit, pinned: &[(usize, u64)]) -> Option<Vec<u64>> {
    let mut pin = vec![None; intervals.len()];
    for &(i, offset) in pinned {
        *pin.get_mut(i)? = Some(offset);
    }
    let mut offsets = vec![0u64; intervals.len()];
    for part in parts(intervals, order)? {
        place_part(intervals, &part, fit, &pin, &mut offsets)?;
    }
    Some(offsets)
}

/// Parts of fewer buffers are joined with the next (an index per tiny part costs more
/// than it saves).
const PART_MIN: usize = 1024;

/// `order` split by parts of the schedule that no buffer spans: a buffer only ever meets
/// buffers of its own part, so each part can be placed with an index of its own (smaller,
/// so faster) in the same order, with the same result. `None` if `order` names a buffer
/// that does not exist.
fn parts(intervals: &[Live], order: &[usize]) -> Option<Vec<Vec<usize>>> {
    // Ranges beside their indices, not looked up at every comparison (cache misses).
    let mut by_first: Vec<(usize, usize, usize)> = intervals.iter().enumerate().map(|(i, l)| (l.first, l.last, i)).collect();
    by_first.sort_unstable();
    let mut part_of = vec![0usize; intervals.len()];
    let (mut part, mut count, mut reach) = (0usize, 0usize, None::<usize>);
    for (first, last, i) in by_first {
        if reach.is_some_and(|r| first > r) && count >= PART_MIN {
            part += 1;
            count = 0;
        }
        reach = Some(reach.map_or(last, |r| r.max(last)));
        part_of[i] = part;
        count += 1;
    }
    let mut parts = vec![Vec::new(); part + 1];
    for &i in order {
        parts[*part_of.get(i)?].push(i);
    }
    Some(parts)
}

/// One buffer of a part, as [`place_part`] needs it (read once, in placement order: looking
/// each one up in the input at its turn missed the cache every time).
struct Buffer {
    index: usize,
    first: usize,
    last: usize,
    size: u64,
    pin: Option<u64>,
}

/// [`place`] for the buffers of one part, in `order`, writing their offsets.
///
/// The index counts in units of the greatest common divisor of the sizes and pinned
/// offsets (every offset a placement makes is a sum of those, so nothing is lost), in
/// `u32` when no offset can pass `u32::MAX` units: no buffer ends above the pinned ends
/// plus the sizes of the others (each goes in a gap below the top of those placed, or on
/// that top).
fn place_part(intervals: &[Live], order: &[usize], fit: Fit, pin: &[Option<u64>], offsets: &mut [u64]) -> Option<()> {
    let mut buffers = Vec::with_capacity(order.len());
    let (mut unit, mut pinned_top, mut sizes) = (0u64, 0u64, Some(0u64));
    for &index in order {
        let live = intervals.get(index)?;
        let pin = if live.size == 0 { None } else { pin[index] };
        unit = gcd(unit, live.size);
        match pin {
            Some(offset) => {
                unit = gcd(unit, offset);
                pinned_top = pinned_top.max(offset.checked_add(live.size)?);
            }
            None => sizes = sizes.and_then(|total| total.checked_add(live.size)),
        }
        buffers.push(Buffer { index, first: live.first, last: live.last, size: live.size, pin });
    }
    if unit == 0 {
        return Some(()); // only zero-size buffers: offset 0
    }
    let top = sizes.and_then(|total| total.checked_add(pinned_top));
    if top.is_some_and(|top| top / unit <= u64::from(u32::MAX)) {
        place_in::<u32>(&buffers, fit, unit, offsets)
    } else {
        place_in::<u64>(&buffers, fit, unit, offsets)
    }
}

/// Places `buffers` in their order with an index counting `U`s of `unit` bytes (`unit`
/// divides every size and pinned offset), writing their offsets in bytes; `None` if an
/// end would overflow `u64` bytes (or `U` units, which [`place_part`] rules out for `u32`).
fn place_in<U: Unit>(buffers: &[Buffer], fit: Fit, unit: u64, offsets: &mut [u64]) -> Option<()> {
    let (count, leaves) = leaves_of(buffers.iter().map(|b| (b.first, b.last)));
    let mut index = BusyIndex::<U>::new(count);
    for (buffer, &leaves) in buffers.iter().zip(&leaves) {
        if buffer.size == 0 {
            continue;
        }
        let size = U::from_u64(buffer.size / unit)?;
        let offset = match (buffer.pin, fit) {
            (Some(offset), _) => U::from_u64(offset / unit)?,
            (None, Fit::Best) => index.best(leaves, size),
            (None, Fit::First) => {
                let mut offset = None;
                index.gaps(leaves, size, |start, end| match end {
                    Some(end) if end - start < size => Walk::Continue,
                    _ => {
                        offset = Some(start);
                        Walk::Stop
                    }
                });
                offset?
            }
        };
        let end = offset.checked_add(size)?;
        end.to_u64().checked_mul(unit)?;
        index.insert(leaves, offset, end);
        offsets[buffer.index] = offset.to_u64() * unit;
    }
    Some(())
}

/// The greatest common divisor (`gcd(0, x) == x`).
fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests;
