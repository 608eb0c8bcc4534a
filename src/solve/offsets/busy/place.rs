//! Placing buffers one by one with the busy index (`busy.rs`): greedy and best-fit place
//! in their own orders through [`place`], auto's peak window around pinned buffers through
//! [`place_pinned`].
//!
//! The schedule is first split where no buffer spans a boundary (a buffer only meets the
//! buffers of its own part, so each part gets an index of its own and the placements are
//! the same); each part's index counts bytes in units of its sizes' greatest common
//! divisor, in `u32` where no end can pass 2^32 units. Placements never overlap live
//! buffers, which the index's best fit relies on.

use super::{BusyIndex, Unit, Walk, leaves_of};
use crate::solve::offsets::{Halt, Live};

/// Where a buffer goes among the gaps of the buffers it meets.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(in crate::solve::offsets) enum Fit {
    /// The lowest gap that holds it.
    First,
    /// The smallest gap that holds it (the lowest among equals).
    Best,
}

/// Places the buffers of `intervals` one by one in `order` (every index once), each in a gap
/// among the already placed buffers it meets in time chosen by `fit`, or on top of them if
/// no gap holds it. Zero-size buffers take no bytes and get offset 0. `None` if an offset
/// would overflow `u64`.
pub(in crate::solve::offsets) fn place(intervals: &[Live], order: &[usize], fit: Fit) -> Option<Vec<u64>> {
    place_pinned(intervals, order, fit, &[])
}

/// [`place`], giving up (`None`) once `halt` says so (checked every [`HALT_EVERY`] buffers,
/// and between the steps of setting up).
pub(in crate::solve::offsets) fn place_until(intervals: &[Live], order: &[usize], fit: Fit, halt: &Halt<'_>) -> Option<Vec<u64>> {
    place_pinned_reusing(intervals, order, fit, &[], None, halt)
}

/// How many buffers are placed between two looks at the [`Halt`] (a few milliseconds).
const HALT_EVERY: usize = 4096;

/// [`place`], except that the buffers of `pinned` (buffer, offset) are not searched for:
/// each goes where `pinned` says when its turn in `order` comes (they must not overlap
/// one another; put them first in `order` so that the others go around them).
pub(in crate::solve::offsets) fn place_pinned(intervals: &[Live], order: &[usize], fit: Fit, pinned: &[(usize, u64)]) -> Option<Vec<u64>> {
    place_pinned_reusing(intervals, order, fit, pinned, None, &Halt::NEVER)
}

/// [`place_pinned`], taking the offsets of the parts of the schedule without a pinned
/// buffer from `known`, which must be what [`place`] with `fit` gives the buffers in
/// `order` (the same relative order): a part's placement depends on its own buffers only,
/// so those are the offsets this would compute (the peak window re-places only the part
/// holding it: two million buffers took seconds per window).
pub(in crate::solve::offsets) fn place_pinned_reusing(
    intervals: &[Live],
    order: &[usize],
    fit: Fit,
    pinned: &[(usize, u64)],
    known: Option<&[u64]>,
    halt: &Halt<'_>,
) -> Option<Vec<u64>> {
    let mut pin = vec![None; intervals.len()];
    for &(i, offset) in pinned {
        *pin.get_mut(i)? = Some(offset);
    }
    let mut offsets = vec![0u64; intervals.len()];
    // Each step of the setup (the caller's sort of `order` too) takes a while on millions
    // of buffers: look before each.
    if halt.now() {
        return None;
    }
    for part in parts(intervals, order)? {
        if halt.now() {
            return None;
        }
        match known.filter(|known| known.len() == intervals.len()) {
            Some(known) if part.iter().all(|&i| pin[i].is_none()) => part.iter().for_each(|&i| offsets[i] = known[i]),
            _ => place_part(intervals, &part, fit, &pin, &mut offsets, halt)?,
        }
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
fn place_part(intervals: &[Live], order: &[usize], fit: Fit, pin: &[Option<u64>], offsets: &mut [u64], halt: &Halt<'_>) -> Option<()> {
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
        place_in::<u32>(&buffers, fit, unit, offsets, halt)
    } else {
        place_in::<u64>(&buffers, fit, unit, offsets, halt)
    }
}

/// Places `buffers` in their order with an index counting `U`s of `unit` bytes (`unit`
/// divides every size and pinned offset), writing their offsets in bytes; `None` if an
/// end would overflow `u64` bytes (or `U` units, which [`place_part`] rules out for `u32`).
fn place_in<U: Unit>(buffers: &[Buffer], fit: Fit, unit: u64, offsets: &mut [u64], halt: &Halt<'_>) -> Option<()> {
    let (count, leaves) = leaves_of(buffers.iter().map(|b| (b.first, b.last)));
    let mut index = BusyIndex::<U>::new(count);
    if halt.now() {
        return None;
    }
    for (k, (buffer, &leaves)) in buffers.iter().zip(&leaves).enumerate() {
        if k % HALT_EVERY == HALT_EVERY - 1 && halt.now() {
            return None;
        }
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
        end.to_u64().checked_mul(unit)?; // its end in bytes must fit a u64 too
        index.insert(leaves, offset, end);
        offsets[buffer.index] = offset.to_u64() * unit;
    }
    Some(())
}

/// The greatest common divisor (`gcd(0, x) == x`).
pub(super) fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}
