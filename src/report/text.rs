//! The text report: what a person reads first.
//!
//! Sections: the headline figures (arena, lower bound, their ratio; when the optimizer's
//! updates run: inside backward, or after it as `loss.backward(); opt.step()` runs them,
//! and which flag plans the latter), what each pass saved,
//! recomputation under a budget (when there is one: the budget met, the cost, the ops
//! recomputed), the peak (where, which op, which values are live there, largest first),
//! bytes by class (live at the peak, and every buffer of the step, which is not bytes live
//! at once: the text says so), and the buffer table: every buffer in buffer order
//! ([`BufferRows::All`], as `report.txt` and `plan --buffers all` have it), or the largest
//! few, largest first ([`BufferRows::Largest`], what `plan` prints by default: a step of
//! GPT-2's size has a thousand buffers, which would bury the summary), with how many more
//! there are and the flag that lists them.

use std::fmt::Write;
use std::str::FromStr;

use crate::bytes::format_bytes;
use crate::plan::Savings;
use crate::report::{BufferRow, RematReport, Report, UpdateTiming, UserCheckpoints};

/// Which buffers the buffer table lists.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum BufferRows {
    /// Every buffer, in buffer order.
    All,
    /// The `n` largest, largest first (ties in buffer order).
    Largest(usize),
}

impl FromStr for BufferRows {
    type Err = String;

    /// `all`, or a number of buffers.
    fn from_str(s: &str) -> Result<BufferRows, String> {
        match s {
            "all" => Ok(BufferRows::All),
            _ => s
                .parse()
                .map(BufferRows::Largest)
                .map_err(|_| format!("`{s}` is neither `all` nor a number of buffers")),
        }
    }
}

/// Renders `report` as text; `top` limits the live values listed at the peak, `rows` the
/// buffer table.
pub fn render(report: &Report, top: usize, rows: BufferRows) -> String {
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(
        w,
        "step @{}: {} ops, {} values, {} buffers, alignment {} B",
        report.step,
        report.ops,
        report.values,
        report.buffers.len(),
        report.alignment
    );
    let _ = writeln!(w);
    let _ = writeln!(w, "arena        {}", format_bytes(report.arena_bytes));
    let _ = writeln!(w, "lower bound  {}", format_bytes(report.lower_bound));
    let _ = writeln!(w, "ratio        {:.4} (arena / lower bound; 1 is the best any offsets can do)", report.ratio);
    if let Some(updates) = &report.updates {
        update_timing(w, updates);
    }
    if let Some(user) = &report.user_checkpoints {
        user_checkpoints(w, user);
    }
    if let Some(fusion) = &report.fusion {
        let recomputed = match fusion.recomputed_ops {
            0 => String::new(),
            n => {
                let share = fusion.recomputed_flops as f64 * 100.0 / fusion.step_flops.max(1) as f64;
                format!("; {n} of them recompute a value the step also stores, so that it dies sooner (+{} FLOPs, {share:.3}% of the step)", fusion.recomputed_flops)
            }
        };
        let _ = writeln!(
            w,
            "fusion       {} fused op(s) run {} inner ops, their inner values never stored{recomputed} (`--print-ir-after fuse` shows them, `--no-fuse` keeps each op)",
            fusion.fused_ops, fusion.inner_ops
        );
    }
    for (i, bounded) in report.bounded_sizes.iter().enumerate() {
        let label = if i == 0 { "bounded" } else { "" };
        let at = bounded.loc.as_ref().map(|l| format!(" at {l}")).unwrap_or_default();
        let _ = writeln!(w, "{label:13}{}{at}: a data-dependent size planned at its upper bound", bounded.bound);
        let _ = writeln!(w, "{:13}`{}`", "", bounded.op);
    }
    let _ = writeln!(w);
    savings(w, &report.savings, report.remat.as_ref().map(|_| report.lower_bound));
    let _ = writeln!(w);
    if let Some(remat) = &report.remat {
        recomputation(w, remat, top);
        let _ = writeln!(w);
    }
    let peak = &report.peak;
    match (&peak.position, &peak.op) {
        (Some(t), Some(op)) => {
            let loc = peak.loc.as_ref().map(|l| format!(" at {l}")).unwrap_or_default();
            let _ = writeln!(w, "peak: {} live at step {t} (of 0..={}): `{op}`{loc}", format_bytes(peak.bytes), report.ops - 1);
        }
        _ => {
            let _ = writeln!(w, "peak: {} (the step has no ops)", format_bytes(peak.bytes));
        }
    }
    let name_width = peak.live.iter().map(|v| v.value.len()).max().unwrap_or(0);
    let type_width = peak.live.iter().map(|v| v.ty.len()).max().unwrap_or(0);
    for v in peak.live.iter().take(top) {
        let _ = writeln!(
            w,
            "  {:name_width$}  {:type_width$}  {:10}  {}",
            v.value,
            v.ty,
            v.class.name(),
            format_bytes(v.bytes)
        );
    }
    if peak.live.len() > top {
        let rest: u64 = peak.live[top..].iter().map(|v| v.bytes).sum();
        let _ = writeln!(w, "  ... and {} more values, {}", peak.live.len() - top, format_bytes(rest));
    }
    let _ = writeln!(w);
    let _ = writeln!(w, "bytes by class  {:>32}  {:>32}", "live at peak", "all buffers of the step, aligned");
    for c in &report.classes {
        let _ = writeln!(w, "  {:12}  {:>32}  {:>32}", c.class.name(), format_bytes(c.at_peak), total_bytes(c.buffers));
    }
    let _ = writeln!(w, "  (the last column adds up every buffer of a class over the whole step, not bytes live at");
    let _ = writeln!(w, "  once: buffers live at different steps share offsets, so its sum can exceed the arena)");
    let _ = writeln!(w);
    buffer_table(w, &report.buffers, rows);
    out
}

/// The buffer table: every buffer in buffer order, or the largest `n`, largest first.
fn buffer_table(w: &mut String, buffers: &[BufferRow], rows: BufferRows) {
    let shown: Vec<&BufferRow> = match rows {
        BufferRows::All => {
            let _ = writeln!(w, "buffers:");
            buffers.iter().collect()
        }
        BufferRows::Largest(n) => {
            let mut largest: Vec<&BufferRow> = buffers.iter().collect();
            // A stable sort: ties stay in buffer order.
            largest.sort_by_key(|b| std::cmp::Reverse(b.bytes));
            largest.truncate(n);
            let total = buffers.len();
            if total == 0 {
                let _ = writeln!(w, "buffers: none");
            } else if largest.len() < total {
                let _ = writeln!(
                    w,
                    "buffers: the {} largest of {total}, largest first (`--buffers all` lists every buffer, in buffer order)",
                    largest.len()
                );
            } else {
                let _ = writeln!(w, "buffers: all {total}, largest first (`--buffers all` lists them in buffer order)");
            }
            largest
        }
    };
    if !shown.is_empty() {
        let _ = writeln!(w, "  {:8} {:>12} {:>12}  {:>11}  {:10}  values", "buffer", "offset", "bytes", "live", "class");
    }
    for b in &shown {
        let _ = writeln!(
            w,
            "  {:8} {:>12} {:>12}  {:>11}  {:10}  {}",
            b.buffer,
            b.offset,
            b.bytes,
            format!("{}..={}", b.first, b.last),
            b.class.name(),
            b.values.join(", ")
        );
    }
    if shown.len() < buffers.len() {
        let _ = writeln!(w, "  ... and {} more buffers", buffers.len() - shown.len());
    }
}

/// The "what each pass saved" section: each figure and its change from the line above;
/// `after_remat` is the lower bound after recomputation, when the plan has a budget.
fn savings(w: &mut String, s: &Savings, after_remat: Option<u64>) {
    let _ = writeln!(w, "what each pass saved (lower bound = most bytes live at once)");
    let mut rows = vec![
        ("program order (lower bound)", s.program_order, None),
        ("after schedule", s.after_schedule, Some(s.program_order)),
        ("after in-place", s.after_inplace, Some(s.after_schedule)),
    ];
    let mut last = s.after_inplace;
    if let Some(bytes) = after_remat {
        rows.push(("after recomputation", bytes, Some(last)));
        last = bytes;
    }
    rows.push(("arena after offsets", s.arena, Some(last)));
    for (label, bytes, before) in rows {
        let change = match before {
            Some(before) => format!("  {}", change(before, bytes)),
            None => String::new(),
        };
        let _ = writeln!(w, "  {label:28}  {:>32}{change}", format_bytes(bytes));
    }
}

/// The "optimizer" line: whether updates run inside backward, and how to plan them after
/// it, as `loss.backward(); opt.step()` runs them.
fn update_timing(w: &mut String, u: &UpdateTiming) {
    let n = u.optimizer_ops;
    let lines = if u.inside_backward == 0 {
        let all = match n {
            1 => "the update runs".to_string(),
            2 => "both updates run".to_string(),
            _ => format!("all {n} updates run"),
        };
        vec![format!("{all} after backward, as `loss.backward(); opt.step()` runs them")]
    } else if u.inside_backward_as_written > 0 {
        vec![format!("{} of {n} updates run inside backward, as the step is written", u.inside_backward)]
    } else {
        vec![
            format!("{} of {n} updates run inside backward, each once its gradient is ready (so not every", u.inside_backward),
            "gradient is live at once); `--schedule program` gives the arena of".to_string(),
            "`loss.backward(); opt.step()`, every update after backward".to_string(),
        ]
    };
    for (i, line) in lines.iter().enumerate() {
        let _ = writeln!(w, "{:13}{line}", if i == 0 { "optimizer" } else { "" });
    }
}

/// The "checkpoint" line: the user's checkpointed regions, kept as written.
fn user_checkpoints(w: &mut String, u: &UserCheckpoints) {
    let regions = if u.regions == 1 { "1 region".to_string() } else { format!("{} regions", u.regions) };
    let ops = if u.recomputed_ops == 1 { "1 op".to_string() } else { format!("{} ops", u.recomputed_ops) };
    let cost = match u.extra_flops.checked_mul(100).map(|x| x.checked_div(u.base_flops)) {
        Some(Some(percent)) if u.base_flops < u64::MAX && u.extra_flops < u64::MAX => format!(" (+{percent}% FLOPs)"),
        _ => String::new(),
    };
    let _ = writeln!(w, "checkpoint   the user's, kept: {regions}, {ops} recomputed in backward{cost}");
}

/// The "recomputation" section: the budget and whether it is met, the cost, the ops
/// recomputed (at most `top`).
fn recomputation(w: &mut String, r: &RematReport, top: usize) {
    let _ = writeln!(w, "recomputation (strategy {})", r.strategy);
    match r.budget {
        Some(budget) => {
            let met = if r.arena <= budget { "met" } else { "NOT met" };
            let _ = writeln!(w, "  budget          {}: {met}, arena {}", format_bytes(budget), format_bytes(r.arena));
        }
        None => {
            let _ = writeln!(w, "  budget          none (the recomputation sequence was given); arena {}", format_bytes(r.arena));
        }
    }
    let _ = writeln!(w, "  without it      arena {}", format_bytes(r.arena_without));
    let flops = match (r.base_flops, r.extra_flops, r.overhead_percent) {
        (Some(base), Some(extra), Some(percent)) => format!("+{extra} FLOPs: {percent:+.2}% of one step ({base} FLOPs)"),
        (Some(base), ..) => format!("FLOPs too large to count (2^64 - 1 or more in one step as planned, {base} without recomputation)"),
        (None, ..) => "FLOPs too large to count (2^64 - 1 or more in one step)".to_string(),
    };
    let _ = writeln!(w, "  recomputed      {} op(s), {flops}", r.count);
    let traffic = match (r.base_bytes_moved, r.extra_bytes_moved) {
        (Some(base), Some(extra)) if base > 0 => format!("+{} moved: {:+.2}% of the step's {}", format_bytes(extra), extra as f64 / base as f64 * 100.0, format_bytes(base)),
        _ => "bytes moved too large to count".to_string(),
    };
    let _ = writeln!(w, "  memory traffic  {traffic} (the clones' inputs and outputs)");
    let width = r.recomputed.iter().take(top).map(|x| x.op.len()).max().unwrap_or(0);
    for x in r.recomputed.iter().take(top) {
        let _ = writeln!(w, "    {:width$}  repeats `{}`", x.op, x.of);
    }
    if r.recomputed.len() > top {
        let _ = writeln!(w, "    ... and {} more", r.recomputed.len() - top);
    }
}

/// `-1234 B (-5.67%)`, `+0 B` or `+12 B (+0.10%)`: the change from `before` to `after`.
/// Bytes added up, or that they are too large to count.
pub(crate) fn total_bytes(bytes: Option<u64>) -> String {
    bytes.map_or_else(|| "too large (2^64 B or more)".to_string(), format_bytes)
}

pub(crate) fn change(before: u64, after: u64) -> String {
    let delta = i128::from(after) - i128::from(before);
    if delta == 0 || before == 0 {
        return format!("{delta:+} B");
    }
    format!("{delta:+} B ({:+.2}%)", delta as f64 * 100.0 / before as f64)
}

#[cfg(test)]
mod tests {
    use super::{BufferRows, change};

    #[test]
    fn buffer_rows_are_all_or_a_number() {
        assert_eq!("all".parse(), Ok(BufferRows::All));
        assert_eq!("0".parse(), Ok(BufferRows::Largest(0)));
        assert_eq!("25".parse(), Ok(BufferRows::Largest(25)));
        assert_eq!("-1".parse::<BufferRows>(), Err("`-1` is neither `all` nor a number of buffers".to_string()));
        assert!("All".parse::<BufferRows>().is_err());
    }

    #[test]
    fn changes_are_signed_with_a_percentage() {
        assert_eq!(change(1000, 900), "-100 B (-10.00%)");
        assert_eq!(change(1000, 1000), "+0 B");
        assert_eq!(change(1000, 1001), "+1 B (+0.10%)");
        assert_eq!(change(0, 256), "+256 B");
    }
}
