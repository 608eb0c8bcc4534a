//! The corpus's step files, for integration tests that run every one of them.

use std::path::Path;

/// Every `.step` file of `ir/models` and `ir/features` under `root`, as paths relative to
/// it (`ir/models/mlp.step`), sorted.
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
