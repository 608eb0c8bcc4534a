//! A snapshot's trace replayed: allocated and reserved bytes over time, their peaks, what is
//! live at the allocated peak, the fragmentation at the reserved peak, and the arena an
//! ideal placement of the same allocations needs (memplan's own offset solver).
//!
//! Time is the trace: position 0 is the trace's start, position `k` the moment after its
//! `k`-th event (events count from 1), so a device's `n` events give positions `0..=n`.
//!
//! - An **allocation** is live from its `alloc` event until the event that frees it:
//!   `free_completed` (the block can be reused; a trace without any, recorded with
//!   `skip_actions`, frees at `free_requested`). Its bytes are the requested bytes the trace
//!   records, so **allocated** is pytorch.org/memory_viz's "Active Memory Timeline";
//!   `torch.cuda.memory_allocated()` counts blocks (requests rounded up to 512 B) and stops
//!   at `free_requested`, so it can read a little higher.
//! - The trace is a ring buffer (`max_entries`): its oldest events are gone. A free whose
//!   `alloc` is not in the trace is an allocation live from position 0 (its frames are those
//!   of the free). A block live in the snapshot's `segments` (allocated or pending free)
//!   with no open `alloc` in the trace was allocated before the trace began and is live
//!   over the whole trace (its frames are the block's). Both are assumptions, as
//!   memory_viz makes them; [`Counts`] says how many allocations each concerns.
//! - **Reserved** is the bytes of the segments held: the snapshot's `segments` at the end,
//!   and before that what the trace's `segment_alloc`/`segment_map` (+) and
//!   `segment_free`/`segment_unmap` (-) say, undone backwards from the end. So segments
//!   made before the trace began count from position 0. Where the trace and the snapshot
//!   disagree (an event that undoes nothing), the trace wins and [`Counts`] counts it.
//! - **Fragmentation** is read at the reserved peak (the moment the most memory was held,
//!   where an out-of-memory error strikes): reserved − allocated, split into the rounding
//!   of requests up to blocks, free bytes in segments that also hold live blocks (split
//!   segments: usable only by requests that fit one of their gaps) and free bytes in
//!   segments holding none (`torch.cuda.empty_cache()` would release them).
//! - The **ideal placement** places every allocation (its interval over the positions, its
//!   size rounded up to an alignment) with `solve::offsets`, as `memplan alloc` places a
//!   buffer list; the CLI checks it independently (`checker::check_offsets`).
//!
//! Every sum is checked: bytes that add up past 2^64 - 1 are an error, never a wrap.

use std::collections::{BTreeMap, HashMap};

use crate::formats::torch_snapshot::{Action, BlockState, Pool, Snapshot, SnapshotError, StackId};
use crate::plan::align_up;
use crate::solve::offsets::{self, Live, SolveOptions};

/// The allocator's smallest block and its rounding: a request takes a block of its bytes
/// rounded up to this (CUDACachingAllocator's `kMinBlockSize`).
pub const BLOCK_ROUNDING: u64 = 512;

/// Where an allocation's interval comes from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Origin {
    /// Its `alloc` is in the trace.
    Traced,
    /// Freed in the trace, allocated before it began (its `alloc` fell off the ring buffer).
    BeforeTrace,
    /// Live in the snapshot's segments with no `alloc` in the trace: live throughout.
    Standing,
}

/// One allocation over the trace.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Allocation {
    pub address: u64,
    /// Requested bytes.
    pub size: u64,
    /// The allocator's block: the snapshot's, or the request rounded up to [`BLOCK_ROUNDING`].
    pub block: u64,
    /// First and last position it is live at.
    pub first: usize,
    pub last: usize,
    pub frames: StackId,
    pub origin: Origin,
}

/// The most bytes and the first position holding them.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Peak {
    pub bytes: u64,
    pub at: usize,
}

/// One segment at the reserved peak (adjacent mapped pieces of an expandable segment count
/// as one).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct SegmentUse {
    pub address: u64,
    pub size: u64,
    pub pool: Pool,
    pub expandable: bool,
    /// Live allocations in it, and their requested bytes.
    pub blocks: usize,
    pub allocated: u64,
    /// Bytes no live block covers, and the largest contiguous piece of them.
    pub free: u64,
    pub largest_free: u64,
}

impl SegmentUse {
    /// Whether blocks split it: live blocks and free bytes both.
    pub fn split(&self) -> bool {
        self.blocks > 0 && self.free > 0
    }
}

/// Reserved − allocated at the reserved peak, and where it is.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Fragmentation {
    pub at: usize,
    pub reserved: u64,
    pub allocated: u64,
    /// Blocks' bytes past their requests, of the live blocks inside segments.
    pub rounding: u64,
    /// Free bytes in split segments, and in segments holding no live block.
    pub free_split: u64,
    pub free_unused: u64,
    /// Live allocations inside no known segment (the snapshot and trace disagree), and
    /// their bytes.
    pub outside: usize,
    pub outside_bytes: u64,
    /// Every segment held there, most free bytes first.
    pub segments: Vec<SegmentUse>,
}

/// An out-of-memory event.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Oom {
    /// Its event number (the position after it).
    pub at: usize,
    /// The bytes asked for.
    pub size: u64,
    /// What CUDA reported free.
    pub device_free: Option<u64>,
    pub frames: StackId,
}

/// How many allocations and events each assumption concerns (the module docs).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Counts {
    pub traced: usize,
    pub before_trace: usize,
    pub standing: usize,
    /// Allocations open at the end of the trace that are not among the snapshot's live blocks.
    pub open_unmatched: usize,
    /// `alloc` events at an address already allocated (the earlier one counts as freed there).
    pub realloc: usize,
    /// Segment events the snapshot's segments disagree with.
    pub segment_mismatches: usize,
    /// Events of actions memplan does not use.
    pub other_actions: usize,
    /// Positions where allocated exceeds reserved (the trace and the segments disagree).
    pub over_reserved: usize,
    /// Whether frees are `free_requested` (no `free_completed` in the trace).
    pub frees_requested: bool,
}

/// The replayed trace of one device.
#[derive(Clone, Debug)]
pub struct Timeline {
    pub device: usize,
    /// Devices with events or segments.
    pub devices: Vec<usize>,
    /// Events in the device's trace.
    pub events: usize,
    pub allocations: Vec<Allocation>,
    /// Bytes at each position `0..=events`.
    pub allocated: Vec<u64>,
    pub reserved: Vec<u64>,
    pub max_allocated: Peak,
    pub max_reserved: Peak,
    pub fragmentation: Fragmentation,
    pub ooms: Vec<Oom>,
    /// Each event's `time_us`.
    pub times: Vec<Option<i64>>,
    pub counts: Counts,
}

impl Timeline {
    /// Microseconds from the first timed event to the event at `position` (`None` when
    /// either has no time, or at position 0).
    pub fn elapsed_us(&self, position: usize) -> Option<i64> {
        let start = self.times.iter().flatten().next()?;
        let at = (*self.times.get(position.checked_sub(1)?)?)?;
        Some(at.saturating_sub(*start))
    }

    /// The allocations live at `position`, largest first (then by address).
    pub fn live_at(&self, position: usize) -> Vec<usize> {
        let mut live: Vec<usize> = (0..self.allocations.len()).filter(|&i| self.allocations[i].first <= position && position <= self.allocations[i].last).collect();
        live.sort_by_key(|&i| (std::cmp::Reverse(self.allocations[i].size), self.allocations[i].address, i));
        live
    }
}

/// The devices with events or segments, ascending.
pub fn devices(snapshot: &Snapshot) -> Vec<usize> {
    let mut devices: Vec<usize> = (0..snapshot.traces.len()).filter(|&d| !snapshot.traces[d].is_empty()).collect();
    devices.extend(snapshot.segments.iter().filter_map(|s| usize::try_from(s.device).ok()));
    devices.sort_unstable();
    devices.dedup();
    devices
}

/// Replays device `device` (default: the first with data) of `snapshot`.
pub fn replay(snapshot: &Snapshot, device: Option<usize>) -> Result<Timeline, SnapshotError> {
    let devices = devices(snapshot);
    let device = match device {
        Some(d) if devices.contains(&d) => d,
        Some(asked) => return Err(SnapshotError::Device { asked, devices }),
        None => devices.first().copied().unwrap_or(0),
    };
    let events: &[crate::formats::torch_snapshot::Event] = snapshot.traces.get(device).map_or(&[], Vec::as_slice);
    let n = events.len();
    let segments: Vec<&crate::formats::torch_snapshot::Segment> =
        snapshot.segments.iter().filter(|s| usize::try_from(s.device).ok() == Some(device)).collect();
    let mut counts = Counts::default();

    // Allocations, from the trace's allocs and frees.
    let frees_requested = !events.iter().any(|e| e.action == Action::FreeCompleted) && events.iter().any(|e| e.action == Action::FreeRequested);
    counts.frees_requested = frees_requested;
    let free_action = if frees_requested { Action::FreeRequested } else { Action::FreeCompleted };
    let mut allocations: Vec<Allocation> = Vec::new();
    let mut open: HashMap<u64, usize> = HashMap::new();
    let mut ooms = Vec::new();
    for (k, e) in events.iter().enumerate() {
        match e.action {
            Action::Alloc => {
                let a = Allocation {
                    address: e.addr,
                    size: e.size,
                    block: rounded(e.size),
                    first: k + 1,
                    last: n,
                    frames: e.frames,
                    origin: Origin::Traced,
                };
                if let Some(earlier) = open.insert(e.addr, allocations.len()) {
                    allocations[earlier].last = k;
                    counts.realloc += 1;
                }
                allocations.push(a);
            }
            action if action == free_action => match open.remove(&e.addr) {
                Some(i) => allocations[i].last = k,
                None => allocations.push(Allocation {
                    address: e.addr,
                    size: e.size,
                    block: rounded(e.size),
                    first: 0,
                    last: k,
                    frames: e.frames,
                    origin: Origin::BeforeTrace,
                }),
            },
            Action::Oom => ooms.push(Oom { at: k + 1, size: e.size, device_free: e.device_free, frames: e.frames }),
            Action::Other => counts.other_actions += 1,
            _ => {}
        }
    }
    // The snapshot's live blocks: an open allocation's block, or one live throughout.
    for segment in &segments {
        for b in &segment.blocks {
            if b.state == BlockState::Inactive {
                continue;
            }
            match open.remove(&b.address) {
                Some(i) => {
                    let a = &mut allocations[i];
                    a.block = b.size.max(a.size);
                    if snapshot.stack(a.frames).is_empty() {
                        a.frames = b.frames;
                    }
                }
                None => allocations.push(Allocation {
                    address: b.address,
                    size: b.requested_size.unwrap_or(b.size),
                    block: b.size,
                    first: 0,
                    last: n,
                    frames: b.frames,
                    origin: Origin::Standing,
                }),
            }
        }
    }
    counts.open_unmatched = open.len();
    for a in &allocations {
        match a.origin {
            Origin::Traced => counts.traced += 1,
            Origin::BeforeTrace => counts.before_trace += 1,
            Origin::Standing => counts.standing += 1,
        }
    }

    // Allocated bytes at each position.
    let mut delta = vec![0i128; n + 2];
    for a in &allocations {
        delta[a.first] += i128::from(a.size);
        delta[a.last + 1] -= i128::from(a.size);
    }
    let allocated = prefix_sums(&delta[..=n]).ok_or_else(|| SnapshotError::TooLarge("the allocations live at one moment".into()))?;

    // Reserved: the segments at the end, undone backwards to the start, then replayed.
    let mut ranges = Ranges::default();
    for s in &segments {
        ranges.insert(s.address, s.address + s.total_size, s.expandable);
    }
    for e in events.iter().rev() {
        let (start, end) = (e.addr, e.addr + e.size);
        let changed = match e.action {
            Action::SegmentAlloc | Action::SegmentMap => ranges.remove(start, end),
            Action::SegmentFree => ranges.insert(start, end, false),
            Action::SegmentUnmap => ranges.insert(start, end, true),
            _ => continue,
        };
        if changed != u128::from(e.size) {
            counts.segment_mismatches += 1;
        }
    }
    let start_ranges = ranges.clone();
    let mut reserved = Vec::with_capacity(n + 1);
    let too_large = || SnapshotError::TooLarge("the segments held at one moment".into());
    reserved.push(u64::try_from(ranges.total).map_err(|_| too_large())?);
    for e in events {
        apply(&mut ranges, e);
        reserved.push(u64::try_from(ranges.total).map_err(|_| too_large())?);
    }
    counts.over_reserved = allocated.iter().zip(&reserved).filter(|(a, r)| a > r).count();

    let max_allocated = peak(&allocated);
    let max_reserved = peak(&reserved);
    // The segments at the reserved peak.
    let mut ranges = start_ranges;
    for e in &events[..max_reserved.at] {
        apply(&mut ranges, e);
    }
    let fragmentation = fragmentation(&ranges, &segments, &allocations, max_reserved, allocated[max_reserved.at]);
    Ok(Timeline {
        device,
        devices,
        events: n,
        allocations,
        allocated,
        reserved,
        max_allocated,
        max_reserved,
        fragmentation,
        ooms,
        times: events.iter().map(|e| e.time_us).collect(),
        counts,
    })
}

/// A request's block: rounded up to [`BLOCK_ROUNDING`], at least one.
fn rounded(size: u64) -> u64 {
    align_up(size.max(1), BLOCK_ROUNDING).unwrap_or(size)
}

fn prefix_sums(delta: &[i128]) -> Option<Vec<u64>> {
    let mut sum = 0i128;
    delta
        .iter()
        .map(|d| {
            sum += d;
            u64::try_from(sum).ok()
        })
        .collect()
}

/// The most bytes and the first position with them.
fn peak(bytes: &[u64]) -> Peak {
    let mut best = Peak::default();
    for (at, &b) in bytes.iter().enumerate() {
        if b > best.bytes {
            best = Peak { bytes: b, at };
        }
    }
    best
}

/// Applies one event to the segments held.
fn apply(ranges: &mut Ranges, e: &crate::formats::torch_snapshot::Event) {
    let (start, end) = (e.addr, e.addr + e.size);
    match e.action {
        Action::SegmentAlloc => {
            ranges.insert(start, end, false);
        }
        Action::SegmentMap => {
            ranges.insert(start, end, true);
        }
        Action::SegmentFree | Action::SegmentUnmap => {
            ranges.remove(start, end);
        }
        _ => {}
    }
}

/// Disjoint address ranges `[start, end)` (each with whether it is an expandable segment's
/// mapped pages) and their total bytes.
#[derive(Clone, Default, Debug)]
struct Ranges {
    map: BTreeMap<u64, (u64, bool)>,
    total: u128,
}

impl Ranges {
    /// Adds `[start, end)` (replacing what it overlaps); returns the bytes newly covered.
    fn insert(&mut self, start: u64, end: u64, expandable: bool) -> u128 {
        if start >= end {
            return 0;
        }
        let covered = self.remove(start, end);
        self.map.insert(start, (end, expandable));
        let added = u128::from(end - start);
        self.total += added;
        added - covered
    }

    /// Removes `[start, end)`; returns the bytes it covered.
    fn remove(&mut self, start: u64, end: u64) -> u128 {
        if start >= end {
            return 0;
        }
        let mut hit = Vec::new();
        for (&s, &(e, flag)) in self.map.range(..end).rev() {
            if e <= start {
                break;
            }
            hit.push((s, e, flag));
        }
        let mut removed = 0u128;
        for (s, e, flag) in hit {
            self.map.remove(&s);
            removed += u128::from(e.min(end) - s.max(start));
            if s < start {
                self.map.insert(s, (start, flag));
            }
            if e > end {
                self.map.insert(end, (e, flag));
            }
        }
        self.total -= removed;
        removed
    }
}

/// The segments at the reserved peak and how the live allocations use them.
fn fragmentation(
    ranges: &Ranges,
    end_segments: &[&crate::formats::torch_snapshot::Segment],
    allocations: &[Allocation],
    at: Peak,
    allocated: u64,
) -> Fragmentation {
    // Segments: each range, adjacent expandable pieces merged.
    let mut segments: Vec<SegmentUse> = Vec::new();
    for (&start, &(end, expandable)) in &ranges.map {
        if let Some(last) = segments.last_mut()
            && expandable
            && last.expandable
            && last.address + last.size == start
        {
            last.size += end - start;
            continue;
        }
        segments.push(SegmentUse { address: start, size: end - start, pool: Pool::Unknown, expandable, blocks: 0, allocated: 0, free: 0, largest_free: 0 });
    }
    // Each segment's pool, from the snapshot's segment holding its start (if any).
    let mut known: Vec<(u64, u64, Pool)> = end_segments.iter().map(|k| (k.address, k.address + k.total_size, k.pool)).collect();
    known.sort_unstable_by_key(|k| (k.0, k.1));
    for s in &mut segments {
        let i = known.partition_point(|k| k.0 <= s.address);
        if let Some(k) = i.checked_sub(1).map(|i| known[i]).filter(|k| s.address < k.1) {
            s.pool = k.2;
        }
    }
    // Live blocks by segment.
    let mut inside: Vec<Vec<(u64, u64)>> = vec![Vec::new(); segments.len()];
    let mut f = Fragmentation { at: at.at, reserved: at.bytes, allocated, ..Fragmentation::default() };
    for a in allocations.iter().filter(|a| a.first <= at.at && at.at <= a.last) {
        let i = segments.partition_point(|s| s.address <= a.address);
        match i.checked_sub(1).filter(|&i| a.address < segments[i].address + segments[i].size) {
            Some(i) => {
                let s = &mut segments[i];
                s.blocks += 1;
                s.allocated = s.allocated.saturating_add(a.size);
                f.rounding = f.rounding.saturating_add(a.block.saturating_sub(a.size));
                inside[i].push((a.address, a.address.saturating_add(a.block.max(a.size))));
            }
            None => {
                f.outside += 1;
                f.outside_bytes = f.outside_bytes.saturating_add(a.size);
            }
        }
    }
    // Free gaps between the blocks of each segment.
    for (s, blocks) in segments.iter_mut().zip(&mut inside) {
        blocks.sort_unstable();
        let end = s.address + s.size;
        let mut cursor = s.address;
        let gap = |from: u64, to: u64, s: &mut SegmentUse| {
            if to > from {
                s.free += to - from;
                s.largest_free = s.largest_free.max(to - from);
            }
        };
        for &(b0, b1) in blocks.iter() {
            gap(cursor, b0.min(end), s);
            cursor = cursor.max(b1.min(end));
        }
        gap(cursor, end, s);
        if s.blocks == 0 {
            f.free_unused = f.free_unused.saturating_add(s.free);
        } else {
            f.free_split = f.free_split.saturating_add(s.free);
        }
    }
    segments.sort_by_key(|s| (std::cmp::Reverse(s.free), s.address));
    f.segments = segments;
    f
}

/// The ideal placement of a timeline's allocations.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Ideal {
    pub alignment: u64,
    /// Each allocation's bytes rounded up to the alignment, in allocation order.
    pub sizes: Vec<u64>,
    pub offsets: Vec<u64>,
    pub arena: u64,
    /// The most aligned bytes live at once: no placement needs less.
    pub lower_bound: u64,
    pub proved_optimal: bool,
}

impl Ideal {
    /// `(first, last, size)` of each allocation as placed: what `checker::check_offsets` reads.
    pub fn intervals(&self, timeline: &Timeline) -> Vec<(usize, usize, u64)> {
        timeline.allocations.iter().zip(&self.sizes).map(|(a, &size)| (a.first, a.last, size)).collect()
    }
}

/// Places `timeline`'s allocations in one arena with `solve::offsets` (`alignment`: a power
/// of two).
pub fn ideal(timeline: &Timeline, alignment: u64, options: &SolveOptions) -> Result<Ideal, SnapshotError> {
    let too_large = || SnapshotError::TooLarge("the allocations rounded up to the alignment, live at one moment,".into());
    let sizes: Vec<u64> = timeline.allocations.iter().map(|a| align_up(a.size, alignment)).collect::<Option<_>>().ok_or_else(too_large)?;
    let intervals: Vec<Live> = timeline.allocations.iter().zip(&sizes).map(|(a, &size)| Live { first: a.first, last: a.last, size }).collect();
    let lower_bound = offsets::lower_bound(&intervals).ok_or_else(too_large)?;
    let solution = offsets::solve(&intervals, options).map_err(|_| too_large())?;
    Ok(Ideal { alignment, sizes, offsets: solution.offsets, arena: solution.arena, lower_bound, proved_optimal: solution.proved_optimal })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_add_and_remove_pieces() {
        let mut r = Ranges::default();
        assert_eq!(r.insert(100, 200, false), 100);
        assert_eq!(r.insert(300, 400, true), 100);
        // Over the first range and part of the gap: only the new bytes count.
        assert_eq!(r.insert(150, 250, false), 50);
        assert_eq!(r.total, 250);
        // A hole through the middle of two ranges.
        assert_eq!(r.remove(180, 320), 90);
        assert_eq!(r.total, 160);
        let pieces: Vec<(u64, u64)> = r.map.iter().map(|(&s, &(e, _))| (s, e)).collect();
        assert_eq!(pieces, [(100, 150), (150, 180), (320, 400)]);
        assert_eq!(r.remove(0, 10), 0);
        assert_eq!(r.insert(5, 5, false), 0);
    }

    #[test]
    fn peaks_are_the_first_position_with_the_most() {
        assert_eq!(peak(&[0, 5, 3, 5]), Peak { bytes: 5, at: 1 });
        assert_eq!(peak(&[]), Peak::default());
        assert_eq!(rounded(0), 512);
        assert_eq!(rounded(513), 1024);
    }
}
