//! The plan: what the passes decide and what executors, reports and the checker read.
//!
//! A plan refers to its graph by ids: `schedule` lists op ids in execution order,
//! `value_buffer` maps every value to the buffer that holds it (a view maps to its base's
//! buffer). A buffer's live range is inclusive schedule positions: position `t` is the
//! `t`-th op of the schedule; arguments count as written at position 0, and values that
//! must survive the step (params, state, returns, updated values) live to the last
//! position. The planner's claims (`first`, `last`, `lower_bound`) are re-derived and
//! compared by the checker, never trusted.

use serde::{Deserialize, Serialize};

use crate::index::{BufferId, IndexVec, OpId, ValueId};

/// Bumped whenever the JSON form of a plan changes incompatibly.
pub const SCHEMA_VERSION: u32 = 3;

/// The default offset alignment: CUDA's `cudaMalloc` alignment.
pub const DEFAULT_ALIGNMENT: u64 = 256;

#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
pub struct Plan {
    pub schema_version: u32,
    /// The step's name (without `@`).
    pub step: String,
    /// Every offset is a multiple of this (a power of two).
    pub alignment: u64,
    /// Ops in execution order.
    pub schedule: Vec<OpId>,
    pub buffers: IndexVec<BufferId, Buffer>,
    /// The buffer of each value.
    pub value_buffer: IndexVec<ValueId, BufferId>,
    /// Bytes of the one arena: at least `offset + size` (rounded up to `alignment`) of
    /// every buffer.
    pub arena_bytes: u64,
    /// The max over schedule positions of the live buffers' sizes rounded up to
    /// `alignment`: no offset assignment for this schedule and these buffers is smaller.
    pub lower_bound: u64,
    /// What each pass saved (added in schema 2).
    pub savings: Savings,
    /// What rematerialisation did, when the plan was made under a budget (added in schema
    /// 3; `None` without one).
    pub remat: Option<RematRecord>,
}

/// Rematerialisation under a budget: what was recomputed and what it costs.
///
/// The plan's graph is then the rewritten step: every recomputation is an op of its own
/// (a *clone*), listed in `recomputes` with the op it repeats; the checker verifies each
/// one computes the same bits as its original. Costs are the op table's FLOPs.
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
pub struct RematRecord {
    /// The budget in bytes (a fraction already resolved against `arena_without`); `None`
    /// when the caller gave the recomputation sequence itself.
    pub budget: Option<u64>,
    /// The strategy that chose what to recompute (`none`, `chen-sqrt`, ...; `given` for a
    /// caller's sequence).
    pub strategy: String,
    /// The arena of the same step planned without recomputation.
    pub arena_without: u64,
    /// FLOPs of one step without recomputation: every op that is not a clone, once.
    /// `u64::MAX` stands for 2^64 - 1 or more: too large to count (the op table's counts
    /// and their sums stop there).
    pub base_flops: u64,
    /// FLOPs of one step as planned: every op, clones included (`u64::MAX` as above).
    pub flops: u64,
    /// Every clone and the op it recomputes, in schedule order.
    pub recomputes: Vec<Recompute>,
}

impl RematRecord {
    /// The FLOPs recomputation adds to one step; `None` when a count is too large to count.
    pub fn extra_flops(&self) -> Option<u64> {
        (self.base_flops < u64::MAX && self.flops < u64::MAX).then(|| self.flops.saturating_sub(self.base_flops))
    }

    /// The extra compute as a percentage of one plain step (`0.0` when nothing was
    /// recomputed); `None` when a count is too large to count.
    pub fn overhead_percent(&self) -> Option<f64> {
        self.extra_flops()?;
        Some(if self.base_flops == 0 { 0.0 } else { (self.flops as f64 / self.base_flops as f64 - 1.0) * 100.0 })
    }
}

/// One recomputation: op `clone` runs `of` again (same op, same attributes, inputs holding
/// the same bits), writing fresh values that later readers read instead of `of`'s.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct Recompute {
    pub clone: OpId,
    /// The original: an op of the step that is not itself a clone.
    pub of: OpId,
}

/// What each pass saved: the lower bound (the most aligned bytes live at once) before and
/// after each pass that changes it, and the arena offsets assignment needs.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
pub struct Savings {
    /// The lower bound with the ops in program order, before any pass.
    pub program_order: u64,
    /// After the schedule pass (equal to `program_order` with `--schedule program`).
    pub after_schedule: u64,
    /// After in-place reuse (equal to `after_schedule` with `--no-inplace`, or while the
    /// pipeline has no in-place pass).
    pub after_inplace: u64,
    /// The arena after offsets (at least the final lower bound).
    pub arena: u64,
}

/// A region of the arena holding one or more values over time.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct Buffer {
    /// Byte offset in the arena.
    pub offset: u64,
    /// Bytes: the largest value it holds.
    pub size: u64,
    /// First schedule position at which the buffer holds a value.
    pub first: usize,
    /// Last schedule position at which the buffer holds a value (inclusive).
    pub last: usize,
    /// The values it holds, in the order they are written (views are not listed: they
    /// share their base's entry).
    pub values: Vec<ValueId>,
}

impl Buffer {
    /// Whether both buffers hold values at some common schedule position.
    pub fn overlaps_in_time(&self, other: &Buffer) -> bool {
        self.first <= other.last && other.first <= self.last
    }
}

/// `value` rounded up to a multiple of `alignment` (a power of two), `None` on overflow.
pub fn align_up(value: u64, alignment: u64) -> Option<u64> {
    debug_assert!(alignment.is_power_of_two());
    Some(value.checked_add(alignment - 1)? & !(alignment - 1))
}

impl Plan {
    /// Arena / lower bound: the quality figure of offset assignment (1.0 is perfect).
    pub fn ratio(&self) -> f64 {
        if self.lower_bound == 0 { 1.0 } else { self.arena_bytes as f64 / self.lower_bound as f64 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn align_up_rounds_and_checks() {
        assert_eq!(align_up(0, 256), Some(0));
        assert_eq!(align_up(1, 256), Some(256));
        assert_eq!(align_up(256, 256), Some(256));
        assert_eq!(align_up(u64::MAX - 3, 256), None);
    }
}
