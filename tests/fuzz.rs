//! A bounded slice of the fuzzer (`memplan::testing::fuzz`) in every `cargo test`: a few
//! thousand mutated inputs per format, fixed seeds, each pushed through the library as the
//! command pushes it, with the checker, the placement check, round trips and the executors
//! as oracles. A finding fails the test with its message and a file holding its input.
//! `cargo run --release --example fuzz -- --minutes N` runs the long hunt.

use std::path::Path;

use memplan::testing::fuzz::{self, Format, Limits};

/// Cases per format: a few seconds each in the test profile.
fn cases(format: Format) -> u64 {
    match format {
        Format::Step => 600,
        Format::Csv => 4000,
        Format::Checkmate => 3000,
        Format::PlanJson => 200,
        Format::Safetensors => 3000,
        Format::TorchSnapshot => 3000,
        Format::AllocTrace => 3000,
    }
}

#[test]
fn mutated_inputs_of_every_format_find_nothing() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-findings");
    let mut report = Vec::new();
    for format in Format::ALL {
        let seeds = fuzz::seeds(format, root);
        assert!(!seeds.is_empty(), "{}: no seed inputs", format.name());
        let outcome = fuzz::run(format, &seeds, 7, cases(format), None, &Limits::default(), &mut |finding| {
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join(format!("{}-{}.bin", finding.format.name(), finding.case));
            std::fs::write(&path, &finding.input).unwrap();
            report.push(format!("{} case {}: {} (input saved to {})", finding.format.name(), finding.case, finding.what, path.display()));
        });
        assert_eq!(outcome.cases, cases(format));
        // The mutations must reach past the parsers now and then, or the oracles test nothing.
        assert!(outcome.accepted > 0, "{}: no mutated input was accepted", format.name());
    }
    assert!(report.is_empty(), "{} finding(s):\n{}", report.len(), report.join("\n"));
}
