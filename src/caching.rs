//! A model of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp), to say
//! what `torch.cuda.max_memory_allocated()` and `max_memory_reserved()` will be for a
//! sequence of tensor allocations and frees, without a GPU.
//!
//! What it models, as PyTorch does it on one device and one stream:
//! - **Rounding**: a request is rounded up to a multiple of 512 bytes (at least 512); the
//!   rounded block is what `allocated` counts.
//! - **Two pools**: blocks of at most 1 MiB come from the small pool, whose segments are
//!   2 MiB; larger ones from the large pool, whose segments are 20 MiB for requests under
//!   10 MiB and the request rounded up to 2 MiB otherwise. A segment (one `cudaMalloc`) is
//!   `reserved` until `empty_cache()`, which a training step never calls.
//! - **Best fit**: a request takes the smallest cached free block of its pool that is large
//!   enough (lowest address among equals); only when none is large enough is a new segment
//!   made.
//! - **Splitting and its limits**: the block is split when what remains is at least 512
//!   bytes (small pool) or more than 1 MiB (large pool); otherwise the whole block is handed
//!   out and counted as allocated. With `max_split_size`, blocks of at least that size are
//!   never split, a smaller request never takes one, and a larger request takes one only
//!   if it wastes under 20 MiB.
//! - **Merging**: a freed block merges with free neighbours of its own segment.
//! - **Expandable segments** (`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`): each
//!   pool is one address range that grows at its end by pages (2 MiB small, 20 MiB large)
//!   when no free block fits, the free block at the end growing with it.
//!
//! Not modelled: several streams (`record_stream`, cross-stream frees), CUDA graphs'
//! private pools, `roundup_power2_divisions`, garbage collection thresholds, and what
//! happens when `cudaMalloc` fails (the device is taken to have room): the answers are
//! for a device large enough to run the step. Every size is checked arithmetic: a trace
//! whose totals overflow 64 bits is an error, never a wrong figure.

use std::collections::{BTreeMap, BTreeSet};

use thiserror::Error;

/// c10's `kMinBlockSize`: every block is a multiple of it.
pub const MIN_BLOCK: u64 = 512;
/// `kSmallSize`: the largest block of the small pool.
pub const SMALL_SIZE: u64 = 1 << 20;
/// `kSmallBuffer`: the size of a small-pool segment.
pub const SMALL_BUFFER: u64 = 2 << 20;
/// `kLargeBuffer`: the segment made for a large request under [`MIN_LARGE_ALLOC`].
pub const LARGE_BUFFER: u64 = 20 << 20;
/// `kMinLargeAlloc`: from this size a segment is the request rounded to [`ROUND_LARGE`].
pub const MIN_LARGE_ALLOC: u64 = 10 << 20;
/// `kRoundLarge`: the rounding of large segments.
pub const ROUND_LARGE: u64 = 2 << 20;

/// One event of an allocation trace.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Event {
    /// A tensor storage of `size` bytes is allocated; `id` names it until it is freed.
    Alloc { id: u32, size: u64 },
    /// The storage `id` is freed.
    Free { id: u32 },
    /// `torch.cuda.reset_peak_memory_stats()`: the peaks start again from the current figures.
    ResetPeaks,
}

/// The allocator's settings (`PYTORCH_CUDA_ALLOC_CONF`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Config {
    /// `expandable_segments:True`.
    pub expandable_segments: bool,
    /// `max_split_size_mb` in bytes; `None` is PyTorch's default (unlimited).
    pub max_split_size: Option<u64>,
}

/// What is wrong with a trace.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ReplayError {
    /// An allocation reuses an id that is still live.
    #[error("event {event}: storage {id} is allocated again while still live")]
    LiveTwice { event: usize, id: u32 },
    /// A free names an id that is not live.
    #[error("event {event}: storage {id} is freed but is not live")]
    NotLive { event: usize, id: u32 },
    /// A size or a total does not fit in 64 bits.
    #[error("event {event}: the sizes overflow 64 bits")]
    Overflow { event: usize },
}

/// One segment (one `cudaMalloc`, or one expandable range) as it stands at some moment.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Segment {
    pub small_pool: bool,
    /// Bytes reserved for it.
    pub size: u64,
    /// Bytes of its blocks handed out.
    pub allocated: u64,
    /// How many blocks it is cut into (allocated and free).
    pub blocks: usize,
    /// Its largest free block.
    pub largest_free: u64,
}

/// What a replay found. Peaks are over the events after the last [`Event::ResetPeaks`]
/// (the whole trace if none), as `torch.cuda.max_memory_*` after a reset.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Replay {
    /// `max_memory_allocated()`: the most bytes of blocks handed out at once.
    pub max_allocated: u64,
    /// `max_memory_reserved()`: the most bytes of segments at once.
    pub max_reserved: u64,
    /// The most bytes the live storages asked for at once (before rounding).
    pub max_requested: u64,
    /// The index of the event after which the allocated peak was first reached (`None`
    /// when the peak is the figure at the reset, or the trace is empty).
    pub peak_event: Option<usize>,
    /// The storages live at the allocated peak, as (id, requested bytes, block bytes),
    /// largest block first, then by id.
    pub live_at_peak: Vec<(u32, u64, u64)>,
    /// The segments when the allocated peak was first reached, in the order they were
    /// made: what was reserved then, and how it was cut.
    pub segments_at_peak: Vec<Segment>,
    /// `cudaMalloc` calls (segments made, or expandable pages mapped) over the whole trace.
    pub segment_allocs: u64,
    /// Allocated and reserved bytes after each event.
    pub timeline: Vec<(u64, u64)>,
}

#[derive(Clone, Copy, Debug)]
struct Block {
    size: u64,
    segment: usize,
    /// The storage it holds and that storage's request, when handed out.
    holder: Option<(u32, u64)>,
}

struct SegmentState {
    small_pool: bool,
    start: u64,
    size: u64,
}

/// The allocator's state: blocks by address, free blocks by (pool, size, address).
struct Allocator {
    config: Config,
    blocks: BTreeMap<u64, Block>,
    free: BTreeSet<(bool, u64, u64)>,
    segments: Vec<SegmentState>,
    /// The expandable range of each pool (small, large), once made.
    expandable: [Option<usize>; 2],
    next_address: u64,
    allocated: u64,
    reserved: u64,
    requested: u64,
    segment_allocs: u64,
}

/// `round_size`: the block a request of `size` bytes gets.
pub fn round_size(size: u64) -> Option<u64> {
    if size < MIN_BLOCK { Some(MIN_BLOCK) } else { size.div_ceil(MIN_BLOCK).checked_mul(MIN_BLOCK) }
}

/// `get_allocation_size`: the segment made for a block of `size` bytes when nothing cached fits.
pub fn segment_size(size: u64) -> Option<u64> {
    if size <= SMALL_SIZE {
        Some(SMALL_BUFFER)
    } else if size < MIN_LARGE_ALLOC {
        Some(LARGE_BUFFER)
    } else {
        size.div_ceil(ROUND_LARGE).checked_mul(ROUND_LARGE)
    }
}

impl Allocator {
    fn new(config: Config) -> Allocator {
        Allocator { config, blocks: BTreeMap::new(), free: BTreeSet::new(), segments: Vec::new(), expandable: [None, None], next_address: 0, allocated: 0, reserved: 0, requested: 0, segment_allocs: 0 }
    }

    /// `get_free_block`: the best-fitting cached block, with `max_split_size`'s rules.
    fn cached(&self, small: bool, size: u64) -> Option<(u64, u64)> {
        let &(_, found, address) = self.free.range((small, size, 0)..).next().filter(|(pool, ..)| *pool == small)?;
        if let Some(max_split) = self.config.max_split_size {
            if size < max_split && found >= max_split {
                return None;
            }
            if size >= max_split && found >= size.checked_add(LARGE_BUFFER)? {
                return None;
            }
        }
        Some((address, found))
    }

    /// `should_split`.
    fn should_split(&self, small: bool, block: u64, size: u64) -> bool {
        let remaining = block - size;
        if small {
            remaining >= MIN_BLOCK
        } else {
            self.config.max_split_size.is_none_or(|max| size < max) && remaining > SMALL_SIZE
        }
    }

    fn insert_free(&mut self, address: u64, size: u64, segment: usize) {
        self.blocks.insert(address, Block { size, segment, holder: None });
        self.free.insert((self.segments[segment].small_pool, size, address));
    }

    fn remove_free(&mut self, address: u64) -> Block {
        let block = self.blocks.remove(&address).expect("a free block is in the address map");
        self.free.remove(&(self.segments[block.segment].small_pool, block.size, address));
        block
    }

    /// A new segment of `size` bytes, its whole range one free block; returns its address.
    fn new_segment(&mut self, small: bool, size: u64) -> Option<u64> {
        let start = self.next_address;
        self.next_address = start.checked_add(size)?.checked_next_multiple_of(ROUND_LARGE)?;
        self.segments.push(SegmentState { small_pool: small, start, size });
        self.reserved = self.reserved.checked_add(size)?;
        self.segment_allocs += 1;
        self.insert_free(start, size, self.segments.len() - 1);
        Some(start)
    }

    /// Expandable segments: grows the pool's range at its end until its last free block
    /// holds `size` bytes; returns that block's address.
    fn expand(&mut self, small: bool, size: u64) -> Option<u64> {
        let page = if small { SMALL_BUFFER } else { LARGE_BUFFER };
        let pool = usize::from(!small);
        let Some(segment) = self.expandable[pool] else {
            let pages = size.div_ceil(page).checked_mul(page)?;
            // The range is reserved virtually; later growth keeps it contiguous, so
            // nothing else may be placed after it: give it the rest of the address space.
            let start = self.new_segment(small, pages)?;
            self.expandable[pool] = Some(self.segments.len() - 1);
            self.next_address = self.next_address.checked_add(1 << 52)?;
            return Some(start);
        };
        let state = &self.segments[segment];
        let end = state.start.checked_add(state.size)?;
        let tail = self.blocks.range(..end).next_back().filter(|(_, b)| b.holder.is_none()).map(|(&a, b)| (a, b.size));
        let have = tail.map_or(0, |(_, s)| s);
        let grow = (size - have).div_ceil(page).checked_mul(page)?;
        self.segments[segment].size = self.segments[segment].size.checked_add(grow)?;
        self.reserved = self.reserved.checked_add(grow)?;
        self.segment_allocs += 1;
        let address = match tail {
            Some((address, tail_size)) => {
                self.remove_free(address);
                self.insert_free(address, tail_size + grow, segment);
                address
            }
            None => {
                self.insert_free(end, grow, segment);
                end
            }
        };
        Some(address)
    }

    /// `malloc`: hands out a block for a request of `request` bytes; returns its address.
    fn malloc(&mut self, id: u32, request: u64) -> Option<u64> {
        let size = round_size(request)?;
        let small = size <= SMALL_SIZE;
        let address = match self.cached(small, size) {
            Some((address, _)) => address,
            None if self.config.expandable_segments => self.expand(small, size)?,
            None => self.new_segment(small, segment_size(size)?)?,
        };
        let block = self.remove_free(address);
        let taken = if self.should_split(small, block.size, size) {
            self.insert_free(address + size, block.size - size, block.segment);
            size
        } else {
            block.size
        };
        self.blocks.insert(address, Block { size: taken, segment: block.segment, holder: Some((id, request)) });
        self.allocated = self.allocated.checked_add(taken)?;
        self.requested = self.requested.checked_add(request)?;
        Some(address)
    }

    /// `free`: the block goes back to its pool, merged with free neighbours in its segment.
    fn free(&mut self, address: u64) {
        let block = self.blocks.remove(&address).expect("a live storage has a block");
        let (_, request) = block.holder.expect("a live storage's block is handed out");
        self.allocated -= block.size;
        self.requested -= request;
        let (mut start, mut size) = (address, block.size);
        let segment = block.segment;
        if let Some((&before, b)) = self.blocks.range(..address).next_back()
            && b.segment == segment
            && b.holder.is_none()
            && before + b.size == address
        {
            size += self.remove_free(before).size;
            start = before;
        }
        let after = address + block.size;
        if let Some(b) = self.blocks.get(&after)
            && b.segment == segment
            && b.holder.is_none()
        {
            size += self.remove_free(after).size;
        }
        self.insert_free(start, size, segment);
    }

    fn segments(&self) -> Vec<Segment> {
        let mut out: Vec<Segment> = self.segments.iter().map(|s| Segment { small_pool: s.small_pool, size: s.size, allocated: 0, blocks: 0, largest_free: 0 }).collect();
        for block in self.blocks.values() {
            let segment = &mut out[block.segment];
            segment.blocks += 1;
            match block.holder {
                Some(_) => segment.allocated += block.size,
                None => segment.largest_free = segment.largest_free.max(block.size),
            }
        }
        out
    }

    fn live(&self) -> Vec<(u32, u64, u64)> {
        let mut live: Vec<(u32, u64, u64)> = self.blocks.values().filter_map(|b| b.holder.map(|(id, request)| (id, request, b.size))).collect();
        live.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
        live
    }
}

/// Replays `events` through the allocator model with `config`.
pub fn replay(events: &[Event], config: Config) -> Result<Replay, ReplayError> {
    let mut allocator = Allocator::new(config);
    let mut address_of: BTreeMap<u32, u64> = BTreeMap::new();
    let mut peaks = (0u64, 0u64, 0u64);
    let mut peak_event = None;
    let mut live_at_peak = Vec::new();
    let mut segments_at_peak = Vec::new();
    let mut timeline = Vec::with_capacity(events.len());
    for (event, &e) in events.iter().enumerate() {
        match e {
            Event::Alloc { id, size } => {
                if address_of.contains_key(&id) {
                    return Err(ReplayError::LiveTwice { event, id });
                }
                let address = allocator.malloc(id, size).ok_or(ReplayError::Overflow { event })?;
                address_of.insert(id, address);
            }
            Event::Free { id } => {
                let address = address_of.remove(&id).ok_or(ReplayError::NotLive { event, id })?;
                allocator.free(address);
            }
            Event::ResetPeaks => {
                peaks = (allocator.allocated, allocator.reserved, allocator.requested);
                peak_event = None;
                live_at_peak = allocator.live();
                segments_at_peak = allocator.segments();
            }
        }
        if allocator.allocated > peaks.0 {
            peaks.0 = allocator.allocated;
            peak_event = Some(event);
            live_at_peak = allocator.live();
            segments_at_peak = allocator.segments();
        }
        peaks.1 = peaks.1.max(allocator.reserved);
        peaks.2 = peaks.2.max(allocator.requested);
        timeline.push((allocator.allocated, allocator.reserved));
    }
    Ok(Replay { max_allocated: peaks.0, max_reserved: peaks.1, max_requested: peaks.2, peak_event, live_at_peak, segments_at_peak, segment_allocs: allocator.segment_allocs, timeline })
}

#[cfg(test)]
mod tests {
    use super::{Config, Event, LARGE_BUFFER, ReplayError, SMALL_BUFFER, replay, round_size, segment_size};

    const MIB: u64 = 1 << 20;

    fn alloc(id: u32, size: u64) -> Event {
        Event::Alloc { id, size }
    }

    fn free(id: u32) -> Event {
        Event::Free { id }
    }

    #[test]
    fn requests_round_to_512_bytes_and_segments_follow_the_pools() {
        assert_eq!(round_size(1), Some(512));
        assert_eq!(round_size(512), Some(512));
        assert_eq!(round_size(513), Some(1024));
        assert_eq!(segment_size(MIB), Some(SMALL_BUFFER));
        assert_eq!(segment_size(MIB + 512), Some(LARGE_BUFFER));
        assert_eq!(segment_size(10 * MIB), Some(10 * MIB));
        assert_eq!(segment_size(11 * MIB + 1), Some(12 * MIB));
        let r = replay(&[alloc(0, 4), alloc(1, 600)], Config::default()).unwrap();
        assert_eq!((r.max_allocated, r.max_reserved, r.max_requested), (1536, SMALL_BUFFER, 604));
        assert_eq!(r.live_at_peak, vec![(1, 600, 1024), (0, 4, 512)]);
    }

    #[test]
    fn a_freed_block_is_reused_best_fit_and_split() {
        // Two 4 MiB blocks from one 20 MiB segment; free the first; a 3 MiB request takes
        // it (best fit: 4 MiB beats the 12 MiB tail), and the 1 MiB left is not split off
        // (a large-pool remainder must exceed 1 MiB), so 4 MiB count as allocated.
        let r = replay(&[alloc(0, 4 * MIB), alloc(1, 4 * MIB), free(0), alloc(2, 3 * MIB)], Config::default()).unwrap();
        assert_eq!(r.max_reserved, LARGE_BUFFER);
        assert_eq!(r.timeline.last(), Some(&(8 * MIB, LARGE_BUFFER)));
        assert_eq!(r.segments_at_peak.len(), 1);
        assert_eq!(r.segment_allocs, 1);
        // Freed neighbours merge: after all frees one block spans the segment.
        let r = replay(&[alloc(0, 4 * MIB), alloc(1, 4 * MIB), free(0), free(1), alloc(2, 19 * MIB)], Config::default()).unwrap();
        assert_eq!((r.max_reserved, r.segment_allocs), (LARGE_BUFFER, 1));
    }

    #[test]
    fn fragmentation_makes_new_segments_that_expandable_segments_avoid() {
        // 30 MiB twice, free the second, then 40 MiB: the cached 30 MiB segment is too
        // small, so a third segment is made: 100 MiB reserved for at most 70 MiB live.
        let events = [alloc(0, 30 * MIB), alloc(1, 30 * MIB), free(1), alloc(2, 40 * MIB)];
        let r = replay(&events, Config::default()).unwrap();
        assert_eq!((r.max_allocated, r.max_reserved, r.segment_allocs), (70 * MIB, 100 * MIB, 3));
        // One range growing by 20 MiB pages: 40 MiB mapped for the first, 20 more for the
        // second; the freed second block is at the end, so the 40 MiB request grows it by
        // one page in place: 80 MiB.
        let r = replay(&events, Config { expandable_segments: true, max_split_size: None }).unwrap();
        assert_eq!((r.max_allocated, r.max_reserved), (70 * MIB, 80 * MIB));
        assert_eq!(r.segments_at_peak.len(), 1);
        assert_eq!(r.segments_at_peak[0].allocated, 70 * MIB);
    }

    #[test]
    fn max_split_size_keeps_big_blocks_whole() {
        // With max_split_size 8 MiB a 2 MiB request may not take the cached 12 MiB block.
        let events = [alloc(0, 12 * MIB), free(0), alloc(1, 2 * MIB)];
        let r = replay(&events, Config { expandable_segments: false, max_split_size: Some(8 * MIB) }).unwrap();
        assert_eq!(r.max_reserved, 12 * MIB + LARGE_BUFFER);
        let r = replay(&events, Config::default()).unwrap();
        assert_eq!(r.max_reserved, 12 * MIB);
    }

    #[test]
    fn peaks_restart_at_a_reset_and_bad_traces_are_errors() {
        let r = replay(&[alloc(0, 30 * MIB), free(0), Event::ResetPeaks, alloc(1, MIB)], Config::default()).unwrap();
        assert_eq!(r.max_allocated, MIB);
        assert_eq!(r.max_reserved, 30 * MIB + SMALL_BUFFER);
        assert_eq!(replay(&[free(3)], Config::default()), Err(ReplayError::NotLive { event: 0, id: 3 }));
        assert_eq!(replay(&[alloc(1, 8), alloc(1, 8)], Config::default()), Err(ReplayError::LiveTwice { event: 1, id: 1 }));
        assert_eq!(replay(&[alloc(1, u64::MAX)], Config::default()), Err(ReplayError::Overflow { event: 0 }));
    }
}
