//! Writes the scale benchmark's inputs (issue 21) into a directory, for timing the command
//! line on them (benches/BENCHMARKS.md, "Scale (issue 21)"); the files are too big to commit.
//!
//! ```text
//! cargo run --release --example scale_inputs -- DIR
//! ```
//!
//! Writes `chain_1000000.step` (a forward chain of 1,000,000 ops), `chain_train_500000.step`
//! (a training chain: 500,000 forward ops, about 1,000,000 once expanded),
//! `chain_200000.step`, `fan_in_20000.step`, `args_100000.step`, `unet_10000.json`,
//! `unet_20000.json`, `skip_chain_10000.json`, `skip_chain_20000.json` and
//! `training_like_2000000.csv` (`memplan::testing::scale`).

use std::path::PathBuf;

use memplan::testing::scale::{chain_step, csv, fan_in_step, many_args_step, skip_chain_graph, unet_graph};
use memplan::testing::synthetic::training_like;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = PathBuf::from(std::env::args().nth(1).ok_or("usage: scale_inputs DIR")?);
    std::fs::create_dir_all(&dir)?;
    type Make = Box<dyn Fn() -> String>;
    let files: Vec<(&str, Make)> = vec![
        ("chain_200000.step", Box::new(|| chain_step(200_000, false))),
        ("chain_1000000.step", Box::new(|| chain_step(1_000_000, false))),
        ("chain_train_500000.step", Box::new(|| chain_step(500_000, true))),
        ("fan_in_20000.step", Box::new(|| fan_in_step(20_000))),
        ("args_100000.step", Box::new(|| many_args_step(100_000))),
        ("unet_10000.json", Box::new(|| unet_graph(10_000))),
        ("unet_20000.json", Box::new(|| unet_graph(20_000))),
        ("skip_chain_10000.json", Box::new(|| skip_chain_graph(10_000))),
        ("skip_chain_20000.json", Box::new(|| skip_chain_graph(20_000))),
        ("training_like_2000000.csv", Box::new(|| csv(&training_like(2_000_000, 1)))),
    ];
    for (name, make) in files {
        let path = dir.join(name);
        std::fs::write(&path, make())?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
