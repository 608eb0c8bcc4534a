//! The fuzzer for as long as asked: `cargo run --release --example fuzz -- --minutes 10
//! [--format step|csv|checkmate|plan-json|safetensors|torch-snapshot|alloc-trace] [--seed S]
//! [--out DIR]`. Runs the formats one after another, splitting the time evenly (or one
//! format for all of it), prints cases run, accepted and findings per format, and saves
//! each finding's input to DIR (default `target/fuzz-findings`) under a new name, never
//! overwriting a file.
//! Exit status 1 when anything was found. See `memplan::testing::fuzz`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use memplan::testing::fuzz::{self, Format, Limits};

fn main() {
    let mut minutes = 1.0f64;
    let mut formats: Vec<Format> = Format::ALL.to_vec();
    let mut seed = 1u64;
    let mut out = PathBuf::from("target/fuzz-findings");
    let mut cases = u64::MAX;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| usage(&format!("{arg} needs a value")));
        match arg.as_str() {
            "--minutes" => minutes = value().parse().unwrap_or_else(|_| usage("--minutes: a number")),
            "--cases" => cases = value().parse().unwrap_or_else(|_| usage("--cases: a whole number")),
            "--seed" => seed = value().parse().unwrap_or_else(|_| usage("--seed: a whole number")),
            "--out" => out = PathBuf::from(value()),
            "--format" => {
                let name = value();
                formats = vec![Format::from_name(&name).unwrap_or_else(|| usage(&format!("no format {name}")))];
            }
            other => usage(&format!("unknown argument {other}")),
        }
    }
    // A panic inside a case is a finding, caught and reported below; its default message
    // on stderr would only repeat it.
    std::panic::set_hook(Box::new(|_| {}));
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let share = Duration::from_secs_f64(minutes * 60.0 / formats.len() as f64);
    let limits = Limits::default();
    let mut found = 0;
    for format in formats {
        let seeds = fuzz::seeds(format, root);
        let started = Instant::now();
        let outcome = fuzz::run(format, &seeds, seed, cases, Some(started + share), &limits, &mut |finding| {
            let path = save(&out, finding.format.name(), finding.case, &finding.input);
            eprintln!("{} case {}: {} (input: {})", finding.format.name(), finding.case, first_line(&finding.what), path);
        });
        found += outcome.findings.len();
        println!(
            "{:<12} {:>10} cases in {:>6.1} s, {:>9} accepted, {} finding(s) (seed {seed}, {} seed inputs)",
            format.name(),
            outcome.cases,
            started.elapsed().as_secs_f64(),
            outcome.accepted,
            outcome.findings.len(),
            seeds.len()
        );
    }
    std::process::exit(if found > 0 { 1 } else { 0 });
}

fn first_line(text: &str) -> &str {
    let line = text.lines().next().unwrap_or("");
    &line[..line.floor_char_boundary(300)]
}

/// Writes `input` to a new file in `dir`; returns its path (or why it could not).
fn save(dir: &Path, format: &str, case: u64, input: &[u8]) -> String {
    if let Err(e) = std::fs::create_dir_all(dir) {
        return format!("not saved: {e}");
    }
    for n in 0.. {
        let path = dir.join(format!("{format}-{case}-{n}.bin"));
        match std::fs::OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(mut file) => {
                use std::io::Write;
                return match file.write_all(input) {
                    Ok(()) => path.display().to_string(),
                    Err(e) => format!("not saved: {e}"),
                };
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return format!("not saved: {e}"),
        }
    }
    unreachable!()
}

fn usage(problem: &str) -> ! {
    eprintln!("{problem}\nusage: fuzz [--minutes M] [--cases N] [--format step|csv|checkmate|plan-json|safetensors|torch-snapshot|alloc-trace] [--seed S] [--out DIR]");
    std::process::exit(2)
}
