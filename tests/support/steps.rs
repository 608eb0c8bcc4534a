//! The corpus's step files, for the tests that run every one of them (integration tests,
//! and the CUDA launch-plan unit tests in src/exec/cuda/program.rs).

use std::path::Path;

/// Every `.step` file of `ir/models` and `ir/features` under `root`, as paths relative to it
/// (`ir/models/mlp.step`), sorted. Not `ir/extern`, which no executor can run, nor
/// `ir/torch`, which the Python tests run against PyTorch itself.
pub fn step_files(root: &Path) -> Vec<String> {
    let mut files: Vec<String> = ["ir/models", "ir/features"]
        .iter()
        .flat_map(|dir| {
            std::fs::read_dir(root.join(dir))
                .unwrap()
                .map(move |e| format!("{dir}/{}", e.unwrap().file_name().to_string_lossy()))
        })
        .filter(|f| f.ends_with(".step"))
        .collect();
    files.sort();
    files
}
