//! Benchmarks the exact offset solver on the buffer lists under `benches/data/`.
//!
//! `cargo run --release --example alloc_bench -- [SECONDS] [FILTER]`
//!
//! - minimalloc's challenging instances: `exact` at capacity 1048576 (no time limit but
//!   SECONDS × 10), then `minimize` for C, D and J from that placement, SECONDS each;
//! - idealloc's real lists: `minimize` from best-fit, SECONDS each.
//!
//! Prints buffers, lower bound, arena, ratio, time and whether the arena is proved
//! optimal. Every placement is checked for overlaps independently of the solver.

use std::time::{Duration, Instant};

use memplan::analysis::liveness::Live;
use memplan::buffer_list::parse_buffer_list;
use memplan::passes::offsets::exact::{ExactResult, exact, minimize};
use memplan::passes::offsets::{Solution, arena_of, bestfit, lower_bound};

fn load(path: &str) -> Result<Vec<Live>, Box<dyn std::error::Error>> {
    let text = std::fs::read_to_string(path)?;
    let buffers = parse_buffer_list(&text)?;
    buffers
        .iter()
        .map(|b| Ok(Live { first: usize::try_from(b.lower)?, last: usize::try_from(b.upper - 1)?, size: b.size }))
        .collect()
}

/// Buffers live at the same time must not share bytes.
fn check(intervals: &[Live], offsets: &[u64]) -> bool {
    let mut order: Vec<usize> = (0..intervals.len()).collect();
    order.sort_by_key(|&i| intervals[i].first);
    for (k, &i) in order.iter().enumerate() {
        let a = intervals[i];
        for &j in &order[k + 1..] {
            let b = intervals[j];
            if b.first > a.last {
                break;
            }
            let overlap = offsets[i] < offsets[j] + b.size && offsets[j] < offsets[i] + a.size;
            if a.size > 0 && b.size > 0 && overlap {
                return false;
            }
        }
    }
    true
}

fn row(name: &str, intervals: &[Live], lower: u64, what: &str, arena: Option<u64>, ms: f64, proved: &str) {
    let (arena, ratio) = match arena {
        Some(a) => (a.to_string(), format!("{:.4}", a as f64 / lower as f64)),
        None => ("-".into(), "-".into()),
    };
    println!("| {name} | {} | {lower} | {what} | {arena} | {ratio} | {ms:.1} | {proved} |", intervals.len());
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let seconds: f64 = args.get(1).map(|s| s.parse()).transpose()?.unwrap_or(10.0);
    let filter = args.get(2).cloned().unwrap_or_default();
    let limit = Duration::from_secs_f64(seconds);
    println!("| file | buffers | lower bound | run | arena | ratio | ms | proved |");
    println!("|---|---|---|---|---|---|---|---|");
    for name in ["A", "B", "C", "D", "E", "F", "G", "H", "I", "J", "K"] {
        let file = format!("{name}.1048576.csv");
        if !file.contains(&filter) {
            continue;
        }
        let intervals = load(&format!("benches/data/minimalloc/challenging/{file}"))?;
        let lower = lower_bound(&intervals).ok_or("overflow")?;
        let start = Instant::now();
        let result = exact(&intervals, 1048576, start + limit * 10);
        let ms = start.elapsed().as_secs_f64() * 1e3;
        let found = match result {
            ExactResult::Found(offsets) => {
                let arena = arena_of(&intervals, &offsets).ok_or("overflow")?;
                assert!(check(&intervals, &offsets) && arena <= 1048576, "invalid placement for {file}");
                row(&file, &intervals, lower, "exact 1048576", Some(arena), ms, if arena == lower { "yes" } else { "-" });
                Some(Solution { offsets, arena, proved_optimal: arena == lower })
            }
            ExactResult::Infeasible => {
                row(&file, &intervals, lower, "exact 1048576", None, ms, "infeasible");
                None
            }
            ExactResult::TimedOut => {
                row(&file, &intervals, lower, "exact 1048576", None, ms, "timed out");
                None
            }
        };
        if let Some(solution) = found.filter(|_| ["C", "D", "J"].contains(&name)) {
            let start = Instant::now();
            let best = minimize(&intervals, lower, solution, start + limit);
            let ms = start.elapsed().as_secs_f64() * 1e3;
            assert!(check(&intervals, &best.offsets), "invalid placement for {file}");
            let proved = if best.proved_optimal { "yes" } else { "no" };
            row(&file, &intervals, lower, "minimize", Some(best.arena), ms, proved);
        }
    }
    for name in ["bert_base", "pangu_2.6B", "resnet50", "tiny_bert", "iree_mobilebert", "iree_mobilenet"] {
        if !name.contains(&filter) {
            continue;
        }
        let intervals = load(&format!("benches/data/idealloc/{name}.csv"))?;
        let lower = lower_bound(&intervals).ok_or("overflow")?;
        let start = Instant::now();
        let offsets = bestfit::best_fit(&intervals).ok_or("overflow")?;
        let arena = arena_of(&intervals, &offsets).ok_or("overflow")?;
        let ms = start.elapsed().as_secs_f64() * 1e3;
        row(name, &intervals, lower, "best-fit", Some(arena), ms, if arena == lower { "yes" } else { "-" });
        let start = Instant::now();
        let best = minimize(&intervals, lower, Solution { offsets, arena, proved_optimal: false }, start + limit);
        let ms = start.elapsed().as_secs_f64() * 1e3;
        assert!(check(&intervals, &best.offsets), "invalid placement for {name}");
        row(name, &intervals, lower, "minimize", Some(best.arena), ms, if best.proved_optimal { "yes" } else { "no" });
    }
    Ok(())
}
