//! The kernel program is valid CUDA device code: clang (whose NVPTX backend needs no CUDA
//! installation) compiles it for sm_80 to PTX with every kernel as an entry point, keeping
//! per-thread arrays in registers (no local-memory stack frames, which would mean indexing
//! that the compiler could not resolve). NVRTC compiles the same text on a GPU machine.
//!
//! Without a clang that targets CUDA the test prints why it skips and passes; set CLANG to
//! choose one.

use std::path::PathBuf;
use std::process::Command;

use memplan::exec::cuda::source::{KERNELS, program};

/// A clang that can compile CUDA, if any.
fn clang() -> Option<String> {
    let candidates = std::env::var("CLANG")
        .into_iter()
        .chain(["clang", "clang-19", "clang-18", "clang-17", "clang-16", "clang-15", "clang-14"].map(String::from));
    candidates.into_iter().find(|c| {
        Command::new(c)
            .arg("--print-targets")
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("nvptx64"))
    })
}

#[test]
fn the_program_compiles_as_cuda_device_code() {
    let Some(clang) = clang() else {
        eprintln!("skipping: no clang with the NVPTX backend (set CLANG)");
        return;
    };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("cuda_source_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let source = dir.join("program.cu");
    std::fs::write(&source, program()).unwrap();
    let ptx = dir.join("program.ptx");
    let prelude = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/cuda_emu/clang_prelude.h");
    let out = Command::new(&clang)
        .args(["-x", "cuda", "--cuda-device-only", "--cuda-gpu-arch=sm_80", "-nocudainc", "-nocudalib"])
        .args(["-std=c++17", "-O2", "-S", "-Werror", "-Wno-unknown-cuda-version", "-include"])
        .arg(&prelude)
        .arg(&source)
        .arg("-o")
        .arg(&ptx)
        .output()
        .unwrap();
    assert!(out.status.success(), "{clang} rejects the program:\n{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&ptx).unwrap();
    for name in KERNELS {
        assert!(text.contains(&format!(".visible .entry {name}(")), "no entry point {name}");
    }
    assert_eq!(text.matches(".entry ").count(), KERNELS.len());
    assert!(!text.contains("__local_depot"), "a kernel keeps a per-thread array in local memory");
    std::fs::remove_dir_all(&dir).ok();
}
