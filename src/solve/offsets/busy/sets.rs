//! The sets the busy index (`busy.rs`) is made of: insert-only unions of byte ranges
//! ([`Segments`]), the rectangles of a half block ([`Rects`]), and the integer type they
//! count bytes in ([`Unit`]).
//!
//! A union's segments are sorted, disjoint and never touch (touching ranges merge), which
//! every query relies on to find gaps by position. A half block's rectangles are sorted by
//! start offset and may overlap (they live at different times); `reach` keeps the highest
//! end so far, so the ones that may reach past an offset are found by a search.

use super::gallop;

/// The integer type an index counts bytes in: [`place`](fn@super::place) divides every
/// size and offset by their greatest common divisor and uses `u32` when the result cannot
/// exceed it (then the unions and rectangles take half the memory, and a query, which
/// mostly waits on memory, runs about 15% faster on `synthetic::training_like(200000)`),
/// `u64` otherwise.
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
pub(super) struct Segments<U>(pub(super) Vec<(U, U)>);

impl<U: Unit> Segments<U> {
    /// Adds `[start, end)` (`start < end`), merging with every segment it meets or touches.
    pub(super) fn insert(&mut self, start: U, end: U) {
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
    pub(super) fn insert_all(&mut self, batch: &mut [(U, U)], spare: &mut Vec<(U, U)>) {
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
pub(super) const INSERT_ONE_BY_ONE: usize = 32;

/// A leaf counted from the first of its half block: half blocks have at most
/// 2^[`HALF_BLOCK_LEVELS`] leaves. Rectangles keep their leaves so, and a query scans
/// them: half the bytes of a `u32`.
pub(super) type Leaf = u16;
pub(super) const HALF_BLOCK_LEVELS: u32 = Leaf::BITS;

/// The rectangles of one half block, sorted by start offset, in parallel lists (a query
/// scans the leaves and reads the bytes of those that meet it): rectangle `i` is a
/// buffer's bytes `bytes[i]` (half-open) during leaves `spans[i]` (inclusive, counted from
/// the half block's first, as a [`Leaf`]).
#[derive(Clone, Debug, Default)]
pub(super) struct Rects<U> {
    pub(super) spans: Vec<(Leaf, Leaf)>,
    pub(super) bytes: Vec<(U, U)>,
    /// `reach[i]`: the highest end among `bytes[..=i]` (so the rectangles that may reach
    /// past an offset are found by a search).
    pub(super) reach: Vec<U>,
}

impl<U: Unit> Rects<U> {
    /// Adds bytes `[start, end)` during leaves `[first, last]`.
    pub(super) fn insert(&mut self, first: Leaf, last: Leaf, start: U, end: U) {
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

    /// [`cut`](super::cut) for the union of the rectangles meeting leaves `[qfirst,
    /// qlast]`, without making it: the parts of `[a, b)` none of them covers and that hold
    /// `min_len`, lowest first, starting from rectangle `from` (the first whose `reach`
    /// passes `a`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn cut(&self, mut a: U, b: U, qfirst: Leaf, qlast: Leaf, from: usize, min_len: U, mut part: impl FnMut(U, U) -> bool) -> bool {
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
                    break; // as in `cut`: the check below still reports a top at U::MAX
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
    pub(super) fn meeting(&self, qfirst: Leaf, qlast: Leaf, mut each: impl FnMut(U, U) -> bool) -> bool {
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
