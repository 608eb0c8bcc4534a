//! File formats other than the IR: what memplan reads and writes besides `.step` files.
//!
//! - `plan_json.rs`: a plan with its report figures and the step itself (`plan --format
//!   json`, `plan --emit json`), read back by `report` and `diff` and checked again;
//! - `emit.rs`: the files of `plan --emit` and their fixed names;
//! - `buffer_list.rs`: minimalloc's CSV buffer lists (`alloc`, `plan --emit csv`);
//! - `checkmate.rs`: Checkmate's and Moccasin's graphs (`schedule`, `remat`);
//! - `safetensors.rs`: weights in and out of `run` (`--weights`, `--save`);
//! - `pickle.rs`: Python pickles of plain data (never code), for `torch_snapshot`;
//! - `torch_snapshot/`: PyTorch's CUDA memory snapshots, replayed (`snapshot`);
//! - `alloc_trace.rs`: PyTorch's tensor allocations and frees in order (`replay`, written
//!   by `memplan_torch predict`).
//!
//! Formats turn text or bytes into memplan's types and back; they open no files (the CLI
//! reads and writes them, `src/cli/files.rs`). Reading trusts nothing: errors are located
//! where the format allows, and a plan read back passes the checker before anyone uses it.

pub mod alloc_trace;
pub mod buffer_list;
pub mod checkmate;
pub mod emit;
pub mod pickle;
pub mod plan_json;
pub mod safetensors;
pub mod torch_snapshot;
