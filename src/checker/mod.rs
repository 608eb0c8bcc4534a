//! The independent plan checker: re-derives every fact a plan relies on from the graph and
//! the plan alone, and reports every way the plan is wrong. The report's types
//! ([`Violation`], [`Need`], [`Violations`]) are in `violation`.
//!
//! # Why it is independent
//!
//! The checker is the referee of every planner pass and every offset solver, so it must not
//! share their mistakes. It uses nothing from `analysis` or `passes`: it reads only the IR
//! (values, ops with their kinds and attributes, updates, returns), the op table's memory
//! facts (`view_of`, `inplace`) and FLOPs (`flops`), and the [`Plan`] types, and recomputes
//! roots of views, lifetimes, the lower bound and the origin of recomputed values with its
//! own code, following the memory/time model of docs/PLANNING.md. The planner's claims
//! (`first`, `last`, `values`, `lower_bound`, recomputes and their FLOPs) are compared
//! against the re-derived facts, never trusted.
//!
//! # What is checked
//!
//! - Header: schema version, step name, alignment a power of two.
//! - Schedule: op ids in range, every op exactly once, every input defined at an earlier
//!   position (topological).
//! - Mapping: `value_buffer` has one entry per value, buffer ids in range; a view maps to
//!   its root's buffer; a root value fits its buffer; an update's new value is in its
//!   target's buffer (it lands in place); each buffer's `values` lists exactly the root
//!   values mapped to it.
//! - Buffers: offsets aligned; `offset + size <= arena_bytes` (overflow counts); claimed
//!   ranges not inverted; no two buffers whose claimed `[first, last]` and
//!   `[offset, offset + size)` both overlap (so an in-place reuse must stay in one buffer).
//! - Lifetimes (the model of docs/PLANNING.md): def(v) is 0 for arguments, else its op's position;
//!   last(v) of a root is its last read, directly or through a view, or the last position
//!   if it must survive the step (a param/state that is not updated, a returned value, an
//!   update's new value). Two root values whose bytes intersect while both are live are a
//!   read of a clobbered value, except the in-place case (b written at last(a) by the op
//!   reading a (or a chain of `reshape` views of a) as input k and writing b as output j, (j, k) in the op's `inplace`, equal
//!   byte sizes, same offset) — which never applies to a value that must survive the step
//!   (an op may not write over a returned value even when it reads it last). Each buffer's claimed range covers its root values'
//!   `[def, last]`; `lower_bound` equals the max over positions of the sum of
//!   `align_up(size, alignment)` over buffers live there (live = hull of their root values'
//!   `[def, last]`).
//!
//! - Recomputes (`recompute.rs`), for a plan made under a budget: each clone is the same op
//!   as its original (kind, attributes) and reads values holding the same bits (the same
//!   value or a recompute of it); the FLOPs claimed are the graph's; the arena meets the
//!   budget. With the lifetime checks, that proves every recompute rewrites the original's
//!   bits from intact inputs.
//!
//! Bare buffer lists (no graph) are checked by [`check_offsets`] (`offsets.rs`): overlaps,
//! capacity and overflow, with the same sweep.
//!
//! Every violation is collected; nothing stops at the first. A structural problem that makes
//! later checks meaningless is reported and those checks are skipped: a `value_buffer` of the
//! wrong length skips every per-value check; a broken schedule (an id out of range, an op
//! missing or twice, an op before its input) skips the lifetime checks and the lower bound;
//! a bad alignment skips the alignment check and the lower bound. A plan deserialised from
//! a hostile file cannot make it panic: every plan id is bounds-checked and every byte sum
//! is done in `u128` or with checked arithmetic. The graph is trusted: it must be verified.
//!
//! # Time model
//!
//! With V values, O ops, B buffers, S schedule entries, R reads and K reported pairs:
//! O((V + B) log(V + B) + S + R + K). Overlaps (of values, and of buffers) are found by one
//! sweep over time with an active set kept both as a segment tree over byte coordinates
//! (stabbing queries) and as an ordered set of start offsets (range queries), so no pass
//! looks at all pairs. A hostile plan can have quadratically many overlapping pairs; each
//! sweep lists at most [`MAX_PAIRS`] of them and then says that it stopped. The sweeps and
//! their rectangles are in `sweep.rs`.

mod offsets;
mod recompute;
mod sweep;
mod violation;

pub use offsets::check_offsets;
pub use violation::{Need, Violation, Violations};

use sweep::{Rect, any_overlap, by_start, overlapping_pairs, sorted_by};

use crate::index::{BufferId, Idx, OpId, ValueId};
use crate::ir::graph::{Graph, Role, ValueDef};
use crate::plan::{Plan, SCHEMA_VERSION};

/// The most overlapping pairs one sweep reports before it stops listing them.
pub const MAX_PAIRS: usize = 1000;

/// Checks `plan` against `graph` (which must be verified; for a plan that recomputes ops,
/// the rewritten graph the planner returned); `Err` lists every violation.
pub fn check(graph: &Graph, plan: &Plan) -> Result<(), Violations> {
    let mut c = Checker::new(graph, plan);
    c.header();
    let positions = c.schedule();
    c.mapping();
    c.buffers();
    c.lists();
    c.recomputes();
    if let Some(positions) = positions
        && c.mapped.is_some()
    {
        c.lifetimes(&positions);
    }
    if c.out.is_empty() { Ok(()) } else { Err(Violations(c.out)) }
}

struct Checker<'a> {
    graph: &'a Graph,
    plan: &'a Plan,
    /// The root of each value (itself unless it is a view).
    root: Vec<ValueId>,
    /// Bytes of each value (`u64::MAX` if its type overflows, which a verified graph rules out).
    bytes: Vec<u64>,
    /// The buffer of each value, `None` where the id is out of range; `None` altogether if
    /// `value_buffer` has the wrong length.
    mapped: Option<Vec<Option<BufferId>>>,
    /// The root values mapped to each buffer, in id order (empty if `mapped` is `None`).
    held: Vec<Vec<ValueId>>,
    align_ok: bool,
    out: Vec<Violation>,
}

impl<'a> Checker<'a> {
    fn new(graph: &'a Graph, plan: &'a Plan) -> Checker<'a> {
        let mut root: Vec<ValueId> = graph.values.indices().collect();
        // Program order is topological in a verified graph, so an input's root is final
        // before any view of it is reached.
        for op in &graph.ops {
            if let Some(k) = op.kind.def().view_of()
                && let (Some(&out), Some(&input)) = (op.outputs.first(), op.inputs.get(k))
            {
                root[out.index()] = root[input.index()];
            }
        }
        let bytes = graph.values.iter().map(|v| v.ty.bytes().unwrap_or(u64::MAX)).collect();
        Checker {
            graph,
            plan,
            root,
            bytes,
            mapped: None,
            held: Vec::new(),
            align_ok: plan.alignment.is_power_of_two(),
            out: Vec::new(),
        }
    }

    fn name(&self, v: ValueId) -> String {
        self.graph.value_name(v)
    }

    fn is_root(&self, v: ValueId) -> bool {
        self.root[v.index()] == v
    }

    /// `%h = matmul(%x, %w1)`.
    fn describe(&self, op: OpId) -> String {
        self.graph.describe_op(op)
    }

    /// The values a buffer holds, for messages: `%a, %b and 3 more`, or `no values`.
    fn holds(&self, b: BufferId) -> String {
        let nv = self.graph.values.len();
        let list: Vec<ValueId> = match (&self.mapped, self.plan.buffers.get(b)) {
            (Some(_), _) => self.held.get(b.index()).cloned().unwrap_or_default(),
            (None, Some(buf)) => buf.values.iter().copied().filter(|v| v.index() < nv).collect(),
            (None, None) => Vec::new(),
        };
        if list.is_empty() {
            return "no values".to_string();
        }
        let shown: Vec<String> = list.iter().take(3).map(|&v| self.name(v)).collect();
        match list.len() {
            n if n > 3 => format!("{} and {} more", shown.join(", "), n - 3),
            _ => shown.join(", "),
        }
    }

    fn header(&mut self) {
        let plan = self.plan;
        if plan.schema_version != SCHEMA_VERSION {
            self.out.push(Violation::SchemaVersion { found: plan.schema_version, expected: SCHEMA_VERSION });
        }
        if plan.step != self.graph.name {
            self.out
                .push(Violation::StepMismatch { plan_step: plan.step.clone(), graph_step: self.graph.name.clone() });
        }
        if !self.align_ok {
            self.out.push(Violation::AlignmentNotPowerOfTwo { alignment: plan.alignment });
        }
    }

    /// The position of each op, or `None` if the schedule is not a topological permutation.
    fn schedule(&mut self) -> Option<Vec<usize>> {
        let ops = self.graph.ops.len();
        let mut pos: Vec<Option<usize>> = vec![None; ops];
        let mut ok = true;
        for (position, &op) in self.plan.schedule.iter().enumerate() {
            match pos.get(op.index()) {
                None => {
                    self.out.push(Violation::OpIdOutOfRange { position, op, ops });
                    ok = false;
                }
                Some(&Some(first)) => {
                    let op_desc = self.describe(op);
                    self.out.push(Violation::OpScheduledTwice { op, op_desc, first, second: position });
                    ok = false;
                }
                Some(None) => pos[op.index()] = Some(position),
            }
        }
        for op in self.graph.ops.indices() {
            if pos[op.index()].is_none() {
                let op_desc = self.describe(op);
                self.out.push(Violation::OpNotScheduled { op, op_desc });
                ok = false;
            }
        }
        for (position, &op) in self.plan.schedule.iter().enumerate() {
            if pos.get(op.index()).copied().flatten() != Some(position) {
                continue; // out of range or a repeat: already reported
            }
            let inputs = &self.graph.ops[op].inputs;
            for (i, &input) in inputs.iter().enumerate() {
                if !inputs[..i].contains(&input)
                    && let ValueDef::Op { op: def_op, .. } = self.graph.values[input].def
                    && let Some(def_position) = pos[def_op.index()]
                    && def_position >= position
                {
                    self.out.push(Violation::NotTopological {
                        op,
                        op_desc: self.describe(op),
                        position,
                        input,
                        input_name: self.name(input),
                        def_op,
                        def_desc: self.describe(def_op),
                        def_position,
                    });
                    ok = false;
                }
            }
        }
        ok.then(|| pos.into_iter().map(|p| p.unwrap_or(0)).collect())
    }

    /// `value_buffer`: length, ids, views, sizes, updates.
    fn mapping(&mut self) {
        let (graph, plan) = (self.graph, self.plan);
        let nv = graph.values.len();
        if plan.value_buffer.len() != nv {
            self.out.push(Violation::ValueBufferLength { found: plan.value_buffer.len(), expected: nv });
            return;
        }
        let buffers = plan.buffers.len();
        let mut mapped = Vec::with_capacity(nv);
        for (value, &buffer) in plan.value_buffer.iter_enumerated() {
            if buffer.index() < buffers {
                mapped.push(Some(buffer));
            } else {
                mapped.push(None);
                self.out.push(Violation::BufferIdOutOfRange { value, value_name: self.name(value), buffer, buffers });
            }
        }
        let mut held = vec![Vec::new(); buffers];
        for value in graph.values.indices() {
            let Some(buffer) = mapped[value.index()] else { continue };
            let root = self.root[value.index()];
            if root == value {
                held[buffer.index()].push(value);
                let size = plan.buffers[buffer].size;
                let bytes = self.bytes[value.index()];
                if bytes > size {
                    self.out.push(Violation::ValueLargerThanBuffer {
                        value,
                        value_name: self.name(value),
                        bytes,
                        buffer,
                        size,
                    });
                }
            } else if let Some(root_buffer) = mapped[root.index()]
                && root_buffer != buffer
            {
                self.out.push(Violation::ViewNotInRootBuffer {
                    view: value,
                    view_name: self.name(value),
                    view_buffer: buffer,
                    root,
                    root_name: self.name(root),
                    root_buffer,
                });
            }
        }
        for update in &graph.updates {
            if let (Some(target_buffer), Some(value_buffer)) =
                (mapped[update.target.index()], mapped[update.value.index()])
                && target_buffer != value_buffer
            {
                self.out.push(Violation::UpdateNotInPlace {
                    target: update.target,
                    target_name: self.name(update.target),
                    target_buffer,
                    value: update.value,
                    value_name: self.name(update.value),
                    value_buffer,
                });
            }
        }
        self.mapped = Some(mapped);
        self.held = held;
    }

    /// Per-buffer checks and the sweep for overlapping live buffers.
    fn buffers(&mut self) {
        let plan = self.plan;
        let mut rects = Vec::new();
        let mut ids = Vec::new();
        for (b, buf) in plan.buffers.iter_enumerated() {
            if self.align_ok && buf.offset % plan.alignment != 0 {
                self.out.push(Violation::Misaligned {
                    buffer: b,
                    holds: self.holds(b),
                    offset: buf.offset,
                    alignment: plan.alignment,
                });
            }
            let end = u128::from(buf.offset) + u128::from(buf.size);
            if end > u128::from(plan.arena_bytes) {
                self.out.push(Violation::PastArenaEnd {
                    buffer: b,
                    holds: self.holds(b),
                    offset: buf.offset,
                    end,
                    arena_bytes: plan.arena_bytes,
                });
            }
            if buf.first > buf.last {
                self.out.push(Violation::BufferRangeInverted {
                    buffer: b,
                    holds: self.holds(b),
                    first: buf.first,
                    last: buf.last,
                });
            } else if buf.size > 0 {
                rects.push(Rect { t0: buf.first, t1: buf.last, lo: u128::from(buf.offset), hi: end });
                ids.push(b);
            }
        }
        let order = by_start(&rects);
        let mut found = Vec::new();
        let truncated = any_overlap(&rects, &order)
            && overlapping_pairs(&rects, &order, |i, j| {
                found.push((i, j));
                true
            });
        for (i, j) in found {
            let (a, b) = (ids[i], ids[j]);
            let (ba, bb) = (&plan.buffers[a], &plan.buffers[b]);
            self.out.push(Violation::OverlappingBuffers {
                a,
                a_holds: self.holds(a),
                a_first: ba.first,
                a_last: ba.last,
                b,
                b_holds: self.holds(b),
                b_first: bb.first,
                b_last: bb.last,
                start: rects[i].lo.max(rects[j].lo),
                end: rects[i].hi.min(rects[j].hi),
            });
        }
        if truncated {
            self.out.push(Violation::TooManyPairs { what: "pairs of overlapping live buffers", shown: MAX_PAIRS });
        }
    }

    /// Each buffer's `values` against `value_buffer` (roots only).
    fn lists(&mut self) {
        let nv = self.graph.values.len();
        let mapped = self.mapped.take();
        let mut last_listed_in: Vec<Option<BufferId>> = vec![None; nv];
        let mut listed_ok = vec![false; nv];
        for (buffer, buf) in self.plan.buffers.iter_enumerated() {
            for &value in &buf.values {
                if value.index() >= nv {
                    self.out.push(Violation::ListedValueOutOfRange { buffer, value, values: nv });
                    continue;
                }
                let Some(mapped) = &mapped else { continue };
                let value_name = self.name(value);
                if last_listed_in[value.index()] == Some(buffer) {
                    self.out.push(Violation::BufferListsValueTwice { buffer, value, value_name });
                    continue;
                }
                last_listed_in[value.index()] = Some(buffer);
                if !self.is_root(value) {
                    let root_name = self.name(self.root[value.index()]);
                    self.out.push(Violation::BufferListsView { buffer, value, value_name, root_name });
                    continue;
                }
                match mapped[value.index()] {
                    Some(m) if m == buffer => listed_ok[value.index()] = true,
                    Some(mapped_to) => {
                        self.out.push(Violation::BufferListsUnmapped { buffer, value, value_name, mapped_to })
                    }
                    None => {} // its buffer id is out of range: already reported
                }
            }
        }
        if let Some(mapped) = &mapped {
            for value in self.graph.values.indices() {
                if let Some(buffer) = mapped[value.index()]
                    && self.is_root(value)
                    && !listed_ok[value.index()]
                {
                    self.out.push(Violation::BufferOmitsValue { buffer, value, value_name: self.name(value) });
                }
            }
        }
        self.mapped = mapped;
    }

    /// Derived lifetimes: clobbered reads, claimed ranges, the lower bound.
    fn lifetimes(&mut self, pos: &[usize]) {
        let (graph, plan) = (self.graph, self.plan);
        let Some(mapped) = self.mapped.take() else { return };
        let nv = graph.values.len();
        let end = plan.schedule.len().saturating_sub(1);

        let mut def = vec![0usize; nv];
        for (op, p) in graph.ops.iter().zip(pos) {
            for &out in &op.outputs {
                def[out.index()] = *p;
            }
        }
        let mut last = def.clone();
        let mut readers: Vec<Vec<(usize, OpId)>> = vec![Vec::new(); nv];
        for (t, &op) in plan.schedule.iter().enumerate() {
            for &input in &graph.ops[op].inputs {
                let r = self.root[input.index()].index();
                last[r] = last[r].max(t);
                if readers[r].last() != Some(&(t, op)) {
                    readers[r].push((t, op));
                }
            }
        }
        let mut survives: Vec<Option<&'static str>> = vec![None; nv];
        let mut updated = vec![false; nv];
        for update in &graph.updates {
            updated[update.target.index()] = true;
        }
        for &arg in &graph.args {
            if !updated[arg.index()] {
                match graph.values[arg].def {
                    ValueDef::Arg(Role::Param) => survives[arg.index()] = Some("a param that is not updated"),
                    ValueDef::Arg(Role::State) => survives[arg.index()] = Some("state that is not updated"),
                    _ => {}
                }
            }
        }
        for ret in &graph.returns {
            survives[self.root[ret.value.index()].index()].get_or_insert("it is returned");
        }
        for update in &graph.updates {
            survives[self.root[update.value.index()].index()].get_or_insert("it is an update's new value");
        }
        for (l, s) in last.iter_mut().zip(&survives) {
            if s.is_some() {
                *l = end;
            }
        }

        // Claimed buffer ranges cover their values; derived hulls for the lower bound.
        let mut hull: Vec<Option<(usize, usize)>> = vec![None; plan.buffers.len()];
        for value in graph.values.indices() {
            let Some(b) = mapped[value.index()] else { continue };
            if !self.is_root(value) {
                continue;
            }
            let (d, l) = (def[value.index()], last[value.index()]);
            let h = &mut hull[b.index()];
            *h = Some(h.map_or((d, l), |(f, e)| (f.min(d), e.max(l))));
            let buf = &plan.buffers[b];
            if buf.first > d || buf.last < l {
                self.out.push(Violation::BufferRangeMissesValue {
                    buffer: b,
                    first: buf.first,
                    last: buf.last,
                    value,
                    value_name: self.name(value),
                    def: d,
                    value_last: l,
                });
            }
        }

        // Clobbered reads: one sweep over root values.
        let mut rects = Vec::new();
        let mut vals = Vec::new();
        for value in graph.values.indices() {
            let Some(b) = mapped[value.index()] else { continue };
            let bytes = self.bytes[value.index()];
            if !self.is_root(value) || bytes == 0 {
                continue;
            }
            let lo = u128::from(plan.buffers[b].offset);
            rects.push(Rect { t0: def[value.index()], t1: last[value.index()], lo, hi: lo + u128::from(bytes) });
            vals.push(value);
        }
        // Arguments before op outputs at the same position: they are written before it.
        let order = sorted_by(rects.len(), |i| (rects[i].t0, graph.def_op(vals[i]).is_some()));
        let inplace_ok = |a: usize, b: usize| -> bool {
            let (va, vb) = (vals[a], vals[b]);
            let ValueDef::Op { op, output } = graph.values[vb].def else { return false };
            if survives[va.index()].is_some()
                || def[vb.index()] != last[va.index()]
                || self.bytes[va.index()] != self.bytes[vb.index()]
                || rects[a].lo != rects[b].lo
            {
                return false;
            }
            // The op reads `va` as input k, or reads a reshape (of a reshape, ...) of it: a
            // view that keeps the order (its row says so) of a dense value holds its bytes
            // in the same order.
            let reads_va = |input: ValueId| {
                let mut v = input;
                loop {
                    if v == va {
                        return true;
                    }
                    let ValueDef::Op { op, .. } = graph.values[v].def else { return false };
                    match graph.ops[op].kind.def().view {
                        Some(view) if view.keeps_order => v = graph.ops[op].inputs[view.input],
                        _ => return false,
                    }
                }
            };
            let inputs = &graph.ops[op].inputs;
            graph.ops[op].kind.def().inplace_pairs(inputs.len(), &graph.ops[op].attrs).iter().any(|&(j, k)| j == output && inputs.get(k).is_some_and(|&i| reads_va(i)))
        };
        let mut found = Vec::new();
        let truncated = overlapping_pairs(&rects, &order, |i, j| {
            if inplace_ok(i, j) || inplace_ok(j, i) {
                return false;
            }
            found.push((i, j));
            true
        });
        for (i, j) in found {
            let (a, b) = (vals[i], vals[j]);
            let t = def[b.index()];
            let reads = &readers[a.index()];
            let after = reads.partition_point(|&(p, _)| p <= t);
            let at = reads.partition_point(|&(p, _)| p < t);
            let read = |k: usize| {
                let (position, op) = reads[k];
                Need::Read { op, op_desc: self.describe(op), position }
            };
            let need = if after < reads.len() {
                read(after)
            } else if let Some(why) = survives[a.index()] {
                Need::Survives(why)
            } else if at < reads.len() {
                read(at)
            } else {
                Need::SameWrite
            };
            let writer = graph.def_op(b);
            let writer_desc = match writer {
                Some(op) => format!("{op} `{}`", self.describe(op)),
                None => "the caller (it is an argument)".to_string(),
            };
            self.out.push(Violation::ClobberedRead {
                writer,
                writer_desc,
                position: t,
                written: b,
                written_name: self.name(b),
                overwritten: a,
                overwritten_name: self.name(a),
                start: rects[i].lo.max(rects[j].lo),
                end: rects[i].hi.min(rects[j].hi),
                need,
            });
        }
        if truncated {
            self.out.push(Violation::TooManyPairs { what: "clobbered reads", shown: MAX_PAIRS });
        }

        // The lower bound over derived buffer lifetimes.
        if self.align_ok {
            let align = u128::from(plan.alignment);
            let mut starts = vec![0u128; end + 2];
            let mut stops = vec![0u128; end + 2];
            for (buf, h) in plan.buffers.iter().zip(&hull) {
                if let Some((f, l)) = *h {
                    let w = u128::from(buf.size).div_ceil(align) * align;
                    starts[f] += w;
                    stops[l + 1] += w;
                }
            }
            let (mut live, mut peak) = (0u128, 0u128);
            for (s, e) in starts.iter().zip(&stops) {
                live = live + s - e;
                peak = peak.max(live);
            }
            if peak != u128::from(plan.lower_bound) {
                self.out.push(Violation::LowerBound { claimed: plan.lower_bound, recomputed: peak });
            }
        }
        self.mapped = Some(mapped);
    }
}
