//! Offset assignment: place buffers with known sizes and live ranges in one arena.
//!
//! Solvers see only intervals (`first..=last`, `size`), never the graph, so the same code
//! serves plans (`memplan plan`) and bare buffer lists (`memplan alloc`). In plans, sizes
//! arrive already rounded up to the alignment; every solver places buffers at 0 or at the
//! end of another buffer, so offsets stay aligned. The quality figure is arena /
//! [`lower_bound`] (the most bytes live at once): no solver can beat it.
//!
//! Every solver returns a [`Solution`]; `proved_optimal` is set when the arena equals the
//! lower bound or an exact search finished without finding a smaller arena.
//!
//! Heuristics (`greedy.rs`, `bestfit.rs`) share an index of busy bytes over time
//! (`busy.rs`), so they never scan all pairs of buffers (benches/BENCHMARKS.md times them
//! on 200000 buffers). The exact solver (`exact.rs`: branch and bound over tight
//! placements, see docs/PLANNING.md; `minimize.rs` drives it towards the smallest arena)
//! starts from the best heuristic solution. Lists of [`ONLINE_FROM`] buffers or more are
//! first placed online (`online.rs`: best fit in time order, O(n log n)): with a time
//! limit that may stop heuristics (`memplan alloc`) a placement exists when the limit
//! passes even where no heuristic finishes in it, and a placement at the lower bound
//! (nothing can beat it) runs no heuristic at all. [`Solver::Auto`] (the default) runs every
//! heuristic and keeps the smallest arena; while that is above the lower bound (or above
//! the capacity), on lists of `window::WINDOW_FROM` buffers or more it runs the exact
//! solver on windows of steps around the peak (`window.rs`: the rest placed around them),
//! then hands the rest of its time limit to the exact solver on the whole list (`exact_step`);
//! [`Solver::Exact`] does the same after best-fit alone. Lists too large for the search's
//! tables ([`exact::searchable`]) keep the heuristics' answer.

pub mod bestfit;
mod busy;
pub mod exact;
pub mod greedy;
pub mod minimize;
pub mod online;
pub mod window;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// An interval `[first, last]` of schedule positions during which `size` bytes are held.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Live {
    pub first: usize,
    pub last: usize,
    pub size: u64,
}

/// The most bytes live at once, and the first position where that happens.
/// `None` if the sum overflows `u64`.
pub fn max_live(intervals: &[Live]) -> Option<(u64, usize)> {
    // +size at `first`, -size after `last`; at equal times frees come after allocations of
    // the same position only when they belong to a later one, which `last + 1` ensures.
    let mut events: Vec<(usize, bool, u64)> = Vec::with_capacity(intervals.len() * 2);
    for live in intervals {
        events.push((live.first, true, live.size));
        events.push((live.last + 1, false, live.size));
    }
    // Frees (false) sort before allocations (true) at the same position.
    events.sort_unstable();
    let (mut current, mut best, mut at) = (0u64, 0u64, 0usize);
    for (t, alloc, size) in events {
        if alloc {
            current = current.checked_add(size)?;
            if current > best {
                best = current;
                at = t;
            }
        } else {
            current -= size;
        }
    }
    Some((best, at))
}

/// The offset solvers.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum Solver {
    /// Greedy by size with first fit (TVM/TFLite's family): `greedy.rs`.
    Greedy,
    /// Best-fit in XLA's two orders, keeping the better: `bestfit.rs`.
    BestFit,
    /// Branch and bound (`exact.rs`) from best-fit's solution: within the capacity if one
    /// is given, else the smallest arena it can find, both within the time limit.
    Exact,
    /// Every heuristic, keeping the best; then, while the arena is above the lower bound
    /// (or the capacity), the peak windows (`window.rs`, on large lists) and the exact
    /// solver for the rest of the time limit.
    #[default]
    Auto,
}

/// What a solver is asked.
#[derive(Clone, Copy, Debug)]
pub struct SolveOptions {
    pub solver: Solver,
    /// The arena must not exceed this many bytes (`None`: minimise the arena).
    pub capacity: Option<u64>,
    /// How long a search may run (heuristics ignore it).
    pub time_limit: Duration,
    /// How many nodes the exact search may visit (`u64::MAX`: no limit but the time).
    /// Within this budget the search's answer does not depend on the machine's speed.
    pub search_nodes: u64,
    /// Whether the time limit also stops heuristics of auto and exact still running once
    /// one has placed every buffer (`memplan alloc`: the limit is then kept whenever one
    /// heuristic fits in it). Off, every heuristic always finishes, so the answer depends
    /// on the clock only through the exact search (`memplan plan`).
    pub halt_heuristics: bool,
}

impl Default for SolveOptions {
    fn default() -> Self {
        SolveOptions {
            solver: Solver::default(),
            capacity: None,
            time_limit: Duration::from_millis(200),
            search_nodes: u64::MAX,
            halt_heuristics: false,
        }
    }
}

/// Offsets for every interval, in input order.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Solution {
    pub offsets: Vec<u64>,
    /// max(offset + size): the arena these offsets need.
    pub arena: u64,
    /// Whether no smaller arena exists for these intervals.
    pub proved_optimal: bool,
}

/// Why no solution was returned.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum SolveError {
    /// A sum of sizes or offsets overflows `u64`.
    Overflow,
    /// No placement within the capacity was found in the time limit. `best` is the smallest
    /// arena found (over capacity); `proved_infeasible` says that none within it exists.
    OverCapacity { capacity: u64, best: Option<Solution>, proved_infeasible: bool },
}

/// One heuristic.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Heuristic {
    Greedy,
    BestFitSpatial,
    BestFitTemporal,
}

/// One algorithm run inside [`solve_logged`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Method {
    Heuristic(Heuristic),
    /// The exact solver on windows around the peak, the rest placed around them
    /// (`window.rs`).
    PeakWindow,
    /// The exact solver, started from the best solution so far.
    Exact,
    /// Best fit in time order, as an allocator would place them (`online.rs`): the
    /// placement a time limit falls back on.
    Online,
}

impl Method {
    pub fn name(self) -> &'static str {
        match self {
            Method::Heuristic(Heuristic::Greedy) => "greedy (first fit by size)",
            Method::Heuristic(Heuristic::BestFitSpatial) => "best-fit (spatial order)",
            Method::Heuristic(Heuristic::BestFitTemporal) => "best-fit (temporal order)",
            Method::PeakWindow => "peak window (exact)",
            Method::Exact => "exact (branch and bound)",
            Method::Online => "online best-fit (time order)",
        }
    }
}

/// What one algorithm produced, and whether its offsets are the ones returned.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Attempt {
    pub method: Method,
    pub arena: u64,
    pub elapsed: Duration,
    pub chosen: bool,
}

/// Places `intervals` with the chosen solver.
pub fn solve(intervals: &[Live], options: &SolveOptions) -> Result<Solution, SolveError> {
    solve_logged(intervals, options, &mut Vec::new())
}

/// [`solve`], recording every algorithm it ran (in run order) in `log`.
pub fn solve_logged(intervals: &[Live], options: &SolveOptions, log: &mut Vec<Attempt>) -> Result<Solution, SolveError> {
    let lower = lower_bound(intervals).ok_or(SolveError::Overflow)?;
    solve_reporting(intervals, lower, options, log, &crate::progress::Silent)
}

/// [`solve_logged`] for a caller that has the list's [`lower_bound`] already (`lower`: it
/// must be that bound), reporting the exact search's progress to `progress`.
pub fn solve_reporting(
    intervals: &[Live],
    lower: u64,
    options: &SolveOptions,
    log: &mut Vec<Attempt>,
    progress: &dyn crate::progress::Progress,
) -> Result<Solution, SolveError> {
    let started = Instant::now();
    let deadline = started.checked_add(options.time_limit).unwrap_or_else(|| started + Duration::from_secs(365 * 24 * 3600));
    use Heuristic::*;
    let methods: &[Heuristic] = match options.solver {
        Solver::Greedy => &[Greedy],
        Solver::BestFit | Solver::Exact => &[BestFitSpatial, BestFitTemporal],
        // Spatial first: on ties the earlier method wins, and spatial best-fit is what
        // memplan used alone before, so plans only change where they get smaller.
        Solver::Auto => &[BestFitSpatial, BestFitTemporal, Greedy],
    };
    // The time limit may stop heuristics that have not finished once one has.
    let halting = (options.halt_heuristics && matches!(options.solver, Solver::Auto | Solver::Exact)).then_some(deadline);
    // On long lists: a placement at once (O(n log n)), so that one is there when a
    // halting limit passes, and no heuristic runs when it is at the lower bound (a
    // 1,000,000-op training step's activations nest, and it stacks them); kept only if no
    // heuristic does better.
    let mut online: Option<(usize, Vec<u64>, u64)> = None;
    if intervals.len() >= ONLINE_FROM {
        let t = Instant::now();
        let offsets = online::online_best_fit(intervals).ok_or(SolveError::Overflow)?;
        let arena = arena_of(intervals, &offsets).ok_or(SolveError::Overflow)?;
        log.push(Attempt { method: Method::Online, arena, elapsed: t.elapsed(), chosen: false });
        online = Some((log.len() - 1, offsets, arena));
    }
    // At the lower bound nothing can beat it; past a halting limit no heuristic may run
    // (each takes a while to notice it should stop). Without halting, heuristics run
    // whatever the clock says, so the plan does not depend on it.
    let skip_heuristics = online.as_ref().is_some_and(|o| o.2 == lower || (halting.is_some() && Instant::now() >= deadline));
    let mut best: Option<(usize, Vec<u64>, u64)> = None; // (log index, offsets, arena)
    // Greedy's own placement, for the peak window (which places the rest as greedy does).
    let mut greedy: Option<Vec<u64>> = None;
    let mut keep = |method: Heuristic, offsets: Vec<u64>, elapsed: Duration| -> Result<bool, SolveError> {
        let arena = arena_of(intervals, &offsets).ok_or(SolveError::Overflow)?;
        log.push(Attempt { method: Method::Heuristic(method), arena, elapsed, chosen: false });
        if method == Heuristic::Greedy {
            greedy = Some(offsets.clone());
        }
        if best.as_ref().is_none_or(|b| arena < b.2) {
            best = Some((log.len() - 1, offsets, arena));
        }
        Ok(arena == lower)
    };
    if skip_heuristics {
        // The online placement stands (or is bettered by the exact steps below).
    } else if methods.len() > 1 && intervals.len() >= PARALLEL_FROM && spare_cores() {
        // Independent runs: one thread each (results are kept in method order, so the
        // choice is the same as run one after the other).
        for (method, (ran, elapsed)) in methods.iter().zip(run_parallel(intervals, methods, halting, lower, online.is_some())) {
            match ran {
                Ran::Placed(offsets) => {
                    keep(*method, offsets, elapsed)?;
                }
                Ran::Overflow => return Err(SolveError::Overflow),
                Ran::Halted => {}
            }
        }
    } else {
        let mut placed = online.is_some();
        for &method in methods {
            let halt = match halting {
                Some(deadline) if placed => Halt { flag: None, deadline: Some(deadline) },
                _ => Halt::NEVER,
            };
            if halt.now() {
                break;
            }
            let (ran, elapsed) = run_method(intervals, method, &halt);
            let at_bound = match ran {
                Ran::Placed(offsets) => keep(method, offsets, elapsed)?,
                Ran::Overflow => return Err(SolveError::Overflow),
                Ran::Halted => break,
            };
            placed = true;
            if at_bound {
                break; // at the lower bound: nothing can beat it
            }
        }
    }
    if let Some(online) = online
        && best.as_ref().is_none_or(|b| online.2 < b.2)
    {
        best = Some(online);
    }
    let Some((chosen, offsets, arena)) = best else { return Err(SolveError::Overflow) };
    if let Some(a) = log.get_mut(chosen) {
        a.chosen = true;
    }
    let mut solution = Solution { offsets, arena, proved_optimal: arena == lower };
    let wanted = options.capacity.map_or(lower, |c| c.max(lower));
    // Search nodes left for the exact step, and the bound it starts from.
    let (mut nodes, mut proved_lower) = (options.search_nodes, lower);
    if options.solver == Solver::Auto && solution.arena > wanted && intervals.len() >= window::WINDOW_FROM && Instant::now() < deadline {
        let t = Instant::now();
        let windowed =
            window::peak_window(intervals, wanted, exact::Limits { deadline, nodes }, greedy.as_deref()).ok_or(SolveError::Overflow)?;
        nodes = nodes.saturating_sub(windowed.nodes);
        if let Some(offsets) = windowed.offsets {
            let arena = arena_of(intervals, &offsets).ok_or(SolveError::Overflow)?;
            let improved = arena < solution.arena;
            log.push(Attempt { method: Method::PeakWindow, arena, elapsed: t.elapsed(), chosen: improved });
            if improved {
                for a in log.iter_mut().filter(|a| a.method != Method::PeakWindow) {
                    a.chosen = false;
                }
                solution = Solution { offsets, arena, proved_optimal: arena == lower };
            }
        }
        if windowed.proved_infeasible {
            // No placement of the whole list fits `wanted` either (window.rs).
            if let Some(capacity) = options.capacity {
                return Err(SolveError::OverCapacity { capacity, best: Some(solution), proved_infeasible: true });
            }
            proved_lower = lower.saturating_add(1);
        }
    }
    if matches!(options.solver, Solver::Auto | Solver::Exact) {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if solution.arena > wanted && !remaining.is_zero() && nodes > 0 {
            let t = Instant::now();
            let limits = exact::Limits { deadline, nodes };
            let (found, proved_infeasible) = exact_step(intervals, proved_lower, solution.clone(), options.capacity, limits, progress)?;
            let improved = found.arena < solution.arena;
            log.push(Attempt { method: Method::Exact, arena: found.arena, elapsed: t.elapsed(), chosen: improved });
            if improved {
                for a in log.iter_mut().filter(|a| a.method != Method::Exact) {
                    a.chosen = false;
                }
            }
            if improved || found.proved_optimal {
                solution = found;
            }
            if proved_infeasible && let Some(capacity) = options.capacity {
                return Err(SolveError::OverCapacity { capacity, best: Some(solution), proved_infeasible: true });
            }
        }
    }
    match options.capacity {
        Some(capacity) if solution.arena > capacity => Err(SolveError::OverCapacity {
            capacity,
            proved_infeasible: lower > capacity,
            best: Some(solution),
        }),
        _ => Ok(solution),
    }
}

/// From this many buffers on, `solve` places the list online first (`online.rs`), so that
/// a halting time limit holds even where no heuristic finishes in it, and a placement at
/// the lower bound skips the heuristics. Smaller lists (every step of the corpus) never
/// see it: their plans are the heuristics'.
pub const ONLINE_FROM: usize = 100_000;

/// From this many buffers on, `solve` runs several heuristics on threads of their own
/// (where [`spare_cores`] says the machine has room for them).
const PARALLEL_FROM: usize = 20_000;

/// Whether the machine has a second hardware thread. On 2 cores the two best-fit orders on
/// `testing::synthetic::training_like(200000)` take 3.2 to 3.7 s side by side against 5.0 to 5.8 s
/// one after the other (benches/BENCHMARKS.md), so two is enough.
fn spare_cores() -> bool {
    std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2)
}

/// When a heuristic still running gives up: once `flag` is set or `deadline` has passed.
struct Halt<'a> {
    flag: Option<&'a AtomicBool>,
    deadline: Option<Instant>,
}

impl Halt<'_> {
    /// Never: the heuristic places every buffer.
    const NEVER: Halt<'static> = Halt { flag: None, deadline: None };

    fn now(&self) -> bool {
        self.flag.is_some_and(|f| f.load(Ordering::Relaxed)) || self.deadline.is_some_and(|d| Instant::now() >= d)
    }
}

/// What one heuristic run gave.
enum Ran {
    Placed(Vec<u64>),
    /// An offset would overflow `u64`.
    Overflow,
    /// It gave up (its [`Halt`]).
    Halted,
}

/// Runs one heuristic until `halt` says to give up: what it gave and how long it took.
fn run_method(intervals: &[Live], method: Heuristic, halt: &Halt<'_>) -> (Ran, Duration) {
    let t = Instant::now();
    let offsets = match method {
        Heuristic::Greedy => greedy::greedy_until(intervals, halt),
        Heuristic::BestFitSpatial => bestfit::best_fit_until(intervals, bestfit::Order::Spatial, halt),
        Heuristic::BestFitTemporal => bestfit::best_fit_until(intervals, bestfit::Order::Temporal, halt),
    };
    let ran = match offsets {
        Some(offsets) => Ran::Placed(offsets),
        None if halt.now() => Ran::Halted,
        None => Ran::Overflow,
    };
    (ran, t.elapsed())
}

/// [`run_method`] for each of `methods` on its own scoped thread (in this thread when one
/// cannot be started), results in method order. With a `deadline`, the runs still going
/// when it passes give up, once one has placed every buffer (if none has by then, as soon
/// as the first does; `placed_before`: a placement is already there, so all give up at
/// it). Once a run places every buffer at `lower` (the lower bound: no
/// placement is smaller), the runs after it in method order stop, and their results count
/// as halted even when they finished: an earlier method wins ties, so the choice and the
/// log are those of running the methods one after the other, whatever the clock.
fn run_parallel(intervals: &[Live], methods: &[Heuristic], deadline: Option<Instant>, lower: u64, placed_before: bool) -> Vec<(Ran, Duration)> {
    let flags: Vec<AtomicBool> = methods.iter().map(|_| AtomicBool::new(false)).collect();
    let mut results: Vec<Option<(Ran, Duration)>> = methods.iter().map(|_| None).collect();
    // The first method (so far) whose placement is at the lower bound.
    let mut at_bound = methods.len();
    std::thread::scope(|scope| {
        let (sender, receiver) = std::sync::mpsc::channel();
        let mut here = Vec::new();
        for (k, &method) in methods.iter().enumerate() {
            let (sender, flag) = (sender.clone(), &flags[k]);
            let run = move || {
                let _ = sender.send((k, run_method(intervals, method, &Halt { flag: Some(flag), deadline: None })));
            };
            if std::thread::Builder::new().spawn_scoped(scope, run).is_err() {
                here.push(k);
            }
        }
        drop(sender);
        let mut record = |k: usize, ran: (Ran, Duration), results: &mut Vec<Option<(Ran, Duration)>>| {
            if let (Ran::Placed(offsets), _) = &ran
                && k < at_bound
                && arena_of(intervals, offsets) == Some(lower)
            {
                at_bound = k;
                for flag in &flags[k + 1..] {
                    flag.store(true, Ordering::Relaxed);
                }
            }
            results[k] = Some(ran);
        };
        for k in here {
            let ran = run_method(intervals, methods[k], &Halt::NEVER);
            record(k, ran, &mut results);
        }
        let placed = |results: &[Option<(Ran, Duration)>]| placed_before || results.iter().any(|r| matches!(r, Some((Ran::Placed(_), _))));
        let mut timed_out = false;
        loop {
            let next = match deadline {
                Some(deadline) if placed(&results) && !timed_out => {
                    match receiver.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                            timed_out = true;
                            for flag in &flags {
                                flag.store(true, Ordering::Relaxed);
                            }
                            continue;
                        }
                        other => other.ok(),
                    }
                }
                _ => receiver.recv().ok(),
            };
            let Some((k, ran)) = next else { break };
            record(k, ran, &mut results);
        }
    });
    results
        .into_iter()
        .enumerate()
        .map(|(k, r)| match r {
            Some(ran) if k <= at_bound => ran,
            _ => (Ran::Halted, Duration::ZERO),
        })
        .collect()
}

/// Hands the rest of the time to the exact solver, starting from the best heuristic
/// solution `best` (above the lower bound, or above `capacity`). With a capacity it looks
/// for a placement within it; without one it minimises the arena. Returns the solution
/// (`best` itself when nothing better was found in time) and whether the search proved that
/// nothing fits the capacity.
fn exact_step(
    intervals: &[Live],
    lower: u64,
    best: Solution,
    capacity: Option<u64>,
    limits: exact::Limits,
    progress: &dyn crate::progress::Progress,
) -> Result<(Solution, bool), SolveError> {
    match capacity {
        None => Ok((minimize::minimize_reporting(intervals, lower, best, limits, progress), false)),
        Some(capacity) => match exact::exact(intervals, capacity, limits) {
            exact::ExactResult::Found(offsets) => {
                let arena = arena_of(intervals, &offsets).ok_or(SolveError::Overflow)?;
                Ok((Solution { offsets, arena, proved_optimal: arena == lower }, false))
            }
            exact::ExactResult::Infeasible => Ok((best, true)),
            exact::ExactResult::TimedOut => Ok((best, false)),
        },
    }
}

/// max(offset + size) over the intervals, `None` on overflow.
pub fn arena_of(intervals: &[Live], offsets: &[u64]) -> Option<u64> {
    intervals.iter().zip(offsets).map(|(l, &o)| o.checked_add(l.size)).try_fold(0u64, |a, e| Some(a.max(e?)))
}

/// The most bytes live at once: no assignment's arena is smaller.
pub fn lower_bound(intervals: &[Live]) -> Option<u64> {
    max_live(intervals).map(|(bytes, _)| bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With no time left, auto keeps what the heuristics that finished placed: the first
    /// alone when they run one after the other, at least one when they run side by side;
    /// always a valid placement.
    #[test]
    fn the_time_limit_stops_heuristics_once_one_has_finished() {
        for (n, alone) in [(3000, true), (PARALLEL_FROM, false)] {
            let list = crate::testing::synthetic::training_like(n, 5);
            let options = SolveOptions { time_limit: Duration::ZERO, halt_heuristics: true, ..SolveOptions::default() };
            let mut log = Vec::new();
            let solution = solve_logged(&list, &options, &mut log).unwrap();
            let triples: Vec<(usize, usize, u64)> = list.iter().map(|l| (l.first, l.last, l.size)).collect();
            crate::checker::check_offsets(&triples, &solution.offsets, None).unwrap();
            assert_eq!(arena_of(&list, &solution.offsets), Some(solution.arena));
            let heuristics = log.iter().filter(|a| matches!(a.method, Method::Heuristic(_))).count();
            if alone {
                assert_eq!((heuristics, log[0].method), (1, Method::Heuristic(Heuristic::BestFitSpatial)), "{log:?}");
            } else {
                assert!((1..=3).contains(&heuristics), "{log:?}");
            }
            // Without halting every heuristic finishes.
            let mut all = Vec::new();
            solve_logged(&list, &SolveOptions { halt_heuristics: false, ..options }, &mut all).unwrap();
            assert_eq!(all.iter().filter(|a| matches!(a.method, Method::Heuristic(_))).count(), 3);
        }
    }

    /// On long lists the online placement comes first: with halting heuristics (`alloc`) a
    /// limit already passed returns it without starting a heuristic; without (a plan) every
    /// heuristic runs after it, whatever the clock says.
    #[test]
    fn a_passed_limit_returns_the_online_placement() {
        let list = crate::testing::synthetic::training_like(ONLINE_FROM, 3);
        let triples: Vec<(usize, usize, u64)> = list.iter().map(|l| (l.first, l.last, l.size)).collect();
        let halting = SolveOptions { time_limit: Duration::ZERO, halt_heuristics: true, ..SolveOptions::default() };
        let mut log = Vec::new();
        let solution = solve_logged(&list, &halting, &mut log).unwrap();
        assert_eq!(log.iter().map(|a| (a.method, a.chosen)).collect::<Vec<_>>(), [(Method::Online, true)]);
        crate::checker::check_offsets(&triples, &solution.offsets, None).unwrap();
        assert_eq!(arena_of(&list, &solution.offsets), Some(solution.arena));
        let mut log = Vec::new();
        let solution = solve_logged(&list, &SolveOptions { halt_heuristics: false, ..halting }, &mut log).unwrap();
        let methods: Vec<Method> = log.iter().map(|a| a.method).collect();
        assert!(log[0].arena > lower_bound(&list).unwrap(), "{log:?}");
        assert_eq!(methods[..4], [Method::Online, Method::Heuristic(Heuristic::BestFitSpatial), Method::Heuristic(Heuristic::BestFitTemporal), Method::Heuristic(Heuristic::Greedy)]);
        crate::checker::check_offsets(&triples, &solution.offsets, None).unwrap();
    }

    /// An online placement at the lower bound is kept without running any heuristic (the
    /// nested activations of a long training step).
    #[test]
    fn an_online_placement_at_the_lower_bound_runs_no_heuristic() {
        let n = ONLINE_FROM;
        let nested: Vec<Live> = (0..n).map(|i| Live { first: i, last: 2 * n - i, size: 256 }).collect();
        let mut log = Vec::new();
        let solution = solve_logged(&nested, &SolveOptions::default(), &mut log).unwrap();
        assert_eq!((solution.arena, solution.proved_optimal), (256 * n as u64, true));
        assert_eq!(log.iter().map(|a| (a.method, a.chosen)).collect::<Vec<_>>(), [(Method::Online, true)]);
        let triples: Vec<(usize, usize, u64)> = nested.iter().map(|l| (l.first, l.last, l.size)).collect();
        crate::checker::check_offsets(&triples, &solution.offsets, None).unwrap();
    }

    /// Once a heuristic places every buffer at the lower bound, the later ones stop, on
    /// threads as one after the other: the log holds the same attempts either way (the
    /// first method alone here: nested buffers of one size, which best-fit stacks).
    #[test]
    fn heuristics_after_one_at_the_lower_bound_stop() {
        for n in [1000, PARALLEL_FROM] {
            let nested: Vec<Live> = (0..n).map(|i| Live { first: i, last: 2 * n - i, size: 256 }).collect();
            let mut log = Vec::new();
            let solution = solve_logged(&nested, &SolveOptions::default(), &mut log).unwrap();
            assert_eq!(solution.arena, 256 * n as u64, "{n}");
            assert!(solution.proved_optimal);
            let methods: Vec<Method> = log.iter().map(|a| a.method).collect();
            assert_eq!(methods, [Method::Heuristic(Heuristic::BestFitSpatial)], "{n}");
            let triples: Vec<(usize, usize, u64)> = nested.iter().map(|l| (l.first, l.last, l.size)).collect();
            crate::checker::check_offsets(&triples, &solution.offsets, None).unwrap();
        }
    }

    #[test]
    fn max_live_counts_touching_intervals_apart() {
        let l = |first, last, size| Live { first, last, size };
        // [0,1] and [2,3] never overlap; [1,2] overlaps both.
        assert_eq!(max_live(&[l(0, 1, 10), l(2, 3, 10)]), Some((10, 0)));
        assert_eq!(max_live(&[l(0, 1, 10), l(2, 3, 10), l(1, 2, 5)]), Some((15, 1)));
        assert_eq!(max_live(&[]), Some((0, 0)));
        assert_eq!(max_live(&[l(0, 0, u64::MAX), l(0, 0, 1)]), None);
    }
}
