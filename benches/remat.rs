//! Rematerialisation on Checkmate's training graphs: every row of the README's table of
//! optima, MobileNet and ResNet-50 at 0.9/0.8/0.6 of the topological peak, and a Pareto
//! sweep per graph. Prints markdown tables (benches/BENCHMARKS.md).
//!
//! `cargo bench --bench remat -- ../shared/bench/checkmate` (the directory of the graphs;
//! they are not part of the repository).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use memplan::formats::checkmate::parse_remat;
use memplan::solve::remat::bound::lower_bound;
use memplan::solve::Node;
use memplan::solve::remat::{Problem, RematError, Strategy, evaluate, solve_with};

/// The README's rows: file, label, budget fraction, optimal overhead (%) as printed there.
const ROWS: &[(&str, &str, f64, &str)] = &[
    ("VGG16_256_train.json", "VGG16", 0.9, "1.968"),
    ("VGG19_256_train.json", "VGG19", 0.9, "0.106"),
    ("VGG19_256_train.json", "VGG19", 0.8, "≤ 2.770"),
    ("fcn_8_vgg_32_train.json", "FCN8", 0.9, "0.029"),
    ("fcn_8_vgg_32_train.json", "FCN8", 0.8, "0.136"),
    ("fcn_8_vgg_32_train.json", "FCN8", 0.7, "bound 0.198"),
    ("segnet_32_train.json", "SegNet", 0.9, "0.111"),
    ("segnet_32_train.json", "SegNet", 0.8, "0.207"),
    ("segnet_32_train.json", "SegNet", 0.6, "0.460"),
    ("vgg_unet_32_train.json", "U-Net", 0.9, "1.129"),
    ("vgg_unet_32_train.json", "U-Net", 0.8, "1.984"),
    ("vgg_unet_32_train.json", "U-Net", 0.6, "≤ 5.435"),
    ("MobileNet_512_train.json", "MobileNet", 0.9, "-"),
    ("MobileNet_512_train.json", "MobileNet", 0.8, "-"),
    ("MobileNet_512_train.json", "MobileNet", 0.6, "-"),
    ("ResNet50_256_train.json", "ResNet-50", 0.9, "-"),
    ("ResNet50_256_train.json", "ResNet-50", 0.8, "-"),
    ("ResNet50_256_train.json", "ResNet-50", 0.6, "-"),
];

const LIMIT: Duration = Duration::from_secs(1);

fn load(dir: &Path, file: &str) -> Problem {
    let path = dir.join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    parse_remat(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display())).problem
}

fn topological_peak(problem: &Problem) -> u64 {
    let order: Vec<Node> = (0..problem.nodes.len() as Node).collect();
    evaluate(problem, &order).unwrap().peak
}

/// The model graphs of the Pareto sweep.
const GRAPHS: &[(&str, &str)] = &[
    ("VGG16_256_train.json", "VGG16"),
    ("VGG19_256_train.json", "VGG19"),
    ("fcn_8_vgg_32_train.json", "FCN8"),
    ("segnet_32_train.json", "SegNet"),
    ("vgg_unet_32_train.json", "U-Net"),
    ("MobileNet_512_train.json", "MobileNet"),
    ("ResNet50_256_train.json", "ResNet-50"),
];

const SWEEP: &[f64] = &[0.9, 0.8, 0.7, 0.6, 0.5, 0.4];

/// Overhead in % (None if it does not fit), and the seconds taken.
fn run(problem: &Problem, budget: u64, strategy: Strategy) -> (Option<f64>, f64) {
    let (found, seconds) = solve(problem, budget, strategy);
    (found.map(|(overhead, _)| overhead), seconds)
}

/// Overhead in % and extra cost (None if it does not fit), and the seconds taken.
fn solve(problem: &Problem, budget: u64, strategy: Strategy) -> (Option<(f64, u128)>, f64) {
    let started = Instant::now();
    let result = solve_with(problem, budget, strategy, LIMIT);
    let seconds = started.elapsed().as_secs_f64();
    match result {
        Ok(solution) => {
            let eval = evaluate(problem, &solution.sequence).expect("a valid sequence");
            assert!(eval.peak <= budget, "over budget");
            (Some((eval.overhead() * 100.0, eval.cost - eval.base_cost)), seconds)
        }
        Err(RematError::Infeasible { .. } | RematError::StrategyCannot { .. }) => (None, seconds),
        Err(e) => panic!("{e}"),
    }
}

fn percent(x: Option<f64>) -> String {
    x.map_or("does not fit".to_string(), |x| format!("{x:.3}%"))
}

fn main() {
    let dir: PathBuf = std::env::args().skip(1).find(|a| !a.starts_with('-')).map(PathBuf::from).unwrap_or_else(|| {
        eprintln!("usage: cargo bench --bench remat -- CHECKMATE_DIR");
        std::process::exit(1)
    });
    println!("| graph | nodes | budget | optimum | ours (near-optimal) | Δ pp | lower bound | chen-greedy | chen-sqrt | time |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for &(file, label, fraction, optimum) in ROWS {
        let problem = load(&dir, file);
        let budget = (topological_peak(&problem) as f64 * fraction) as u64;
        let (found, seconds) = solve(&problem, budget, Strategy::NearOptimal);
        let ours = found.map(|(overhead, _)| overhead);
        let (greedy, _) = run(&problem, budget, Strategy::ChenGreedy);
        let (sqrt, _) = run(&problem, budget, Strategy::ChenSqrt);
        let reference: Option<f64> = optimum.trim_start_matches("≤ ").trim_start_matches("bound ").parse().ok();
        let delta = match (ours, reference) {
            (Some(o), Some(r)) => format!("{:+.3}", o - r),
            _ => "-".into(),
        };
        let bound = lower_bound(&problem, budget).extra;
        let base: u64 = problem.nodes.iter().map(|n| n.cost).sum();
        let gap = match (found, bound) {
            (Some((_, extra)), Some(b)) if extra == u128::from(b) => " (= ours: optimal)".to_string(),
            (Some((_, extra)), Some(b)) => format!(" (gap {:.4} pp)", (extra - u128::from(b)) as f64 / base as f64 * 100.0),
            _ => String::new(),
        };
        let bound = format!("{}{gap}", percent(bound.map(|e| e as f64 / base as f64 * 100.0)));
        println!(
            "| {label} | {} | {fraction} | {optimum} | {} | {delta} | {} | {} | {} | {seconds:.3} s |",
            problem.nodes.len(),
            percent(ours),
            bound,
            percent(greedy),
            percent(sqrt)
        );
    }
    println!();
    println!("Pareto sweep: overhead of near-optimal · chen-greedy at each budget (fraction of the topological peak).");
    println!();
    print!("| graph |");
    for f in SWEEP {
        print!(" {f} |");
    }
    println!(" smallest budget found: fraction → overhead | bound on the smallest | slowest |");
    println!("|---|{}---|---|---|", "---|".repeat(SWEEP.len()));
    for &(file, label) in GRAPHS {
        let problem = load(&dir, file);
        let peak = topological_peak(&problem);
        let mut slowest: f64 = 0.0;
        print!("| {label} |");
        for &fraction in SWEEP {
            let budget = (peak as f64 * fraction) as u64;
            let (ours, seconds) = run(&problem, budget, Strategy::NearOptimal);
            let (greedy, _) = run(&problem, budget, Strategy::ChenGreedy);
            slowest = slowest.max(seconds);
            let short = |x: Option<f64>| x.map_or("-".to_string(), |x| format!("{x:.3}"));
            print!(" {} · {} |", short(ours), short(greedy));
        }
        let started = Instant::now();
        let smallest = match solve_with(&problem, 0, Strategy::NearOptimal, LIMIT) {
            Err(RematError::Infeasible { smallest, .. }) => smallest,
            other => panic!("a budget of 0 fits: {other:?}"),
        };
        slowest = slowest.max(started.elapsed().as_secs_f64());
        let (at_smallest, seconds) = run(&problem, smallest, Strategy::NearOptimal);
        slowest = slowest.max(seconds);
        let bound = lower_bound(&problem, smallest).peak as f64 / peak as f64;
        println!(" {:.4} → {} | {bound:.4} | {slowest:.3} s |", smallest as f64 / peak as f64, percent(at_smallest));
    }
    println!();
    println!("Random layered graphs (forward only; plain order = graph.order):");
    println!();
    println!("| graph | nodes | budget | ours (near-optimal) | lower bound | time |");
    println!("|---|---|---|---|---|---|");
    for n in [100, 250, 500, 1000] {
        let problem = load(&dir, &format!("random_layered_n{n}.json"));
        let peak = topological_peak(&problem);
        let base: u64 = problem.nodes.iter().map(|n| n.cost).sum();
        for fraction in [0.9, 0.8] {
            let budget = (peak as f64 * fraction) as u64;
            let (ours, seconds) = run(&problem, budget, Strategy::NearOptimal);
            let bound = lower_bound(&problem, budget).extra.map(|e| e as f64 / base as f64 * 100.0);
            println!("| n{n} | {n} | {fraction} | {} | {} | {seconds:.3} s |", percent(ours), percent(bound));
        }
    }
}
