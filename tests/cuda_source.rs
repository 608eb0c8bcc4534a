//! The kernel program is valid CUDA device code: clang (whose NVPTX backend needs no CUDA
//! installation) compiles it for sm_80 to PTX with every kernel as an entry point, keeping
//! per-thread arrays in registers (no local-memory stack frames, which would mean indexing
//! that the compiler could not resolve). NVRTC compiles the same text on a GPU machine. So
//! do the kernels generated for a fused step (GPT-2's, every elementwise chain fused).
//!
//! Without a clang that targets CUDA the test prints why it skips and passes; set CLANG to
//! choose one.

use std::path::PathBuf;
use std::process::Command;

use memplan::exec::cuda::program::Program;
use memplan::exec::cuda::source::{KERNELS, program};
use memplan::passes::PlanOptions;

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
    let names: Vec<String> = KERNELS.iter().map(|k| k.to_string()).collect();
    compiles_as_cuda("program", &program(), &names);
}

#[test]
fn generated_kernels_compile_as_cuda_device_code() {
    let text = std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("ir/models/gpt2.step")).unwrap();
    let graph = memplan::passes::fuse::fuse(&memplan::expand(&memplan::parse(&text).unwrap()).unwrap()).unwrap();
    let plan = memplan::plan(&graph, &PlanOptions::default()).unwrap();
    memplan::check(&graph, &plan).unwrap();
    let program = Program::new(&graph, &plan).unwrap();
    let source = program.generated.source().expect("GPT-2 fused has generated kernels");
    compiles_as_cuda("generated", &source, &program.generated.names());
}

/// clang compiles `text` (kernels `names`, exactly) to PTX without local memory; skips
/// without a clang that targets CUDA.
fn compiles_as_cuda(what: &str, text: &str, names: &[String]) {
    let Some(clang) = clang() else {
        eprintln!("skipping: no clang with the NVPTX backend (set CLANG)");
        return;
    };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("cuda_source_{what}_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let source = dir.join("program.cu");
    std::fs::write(&source, text).unwrap();
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
    assert!(out.status.success(), "{clang} rejects the {what}:\n{}", String::from_utf8_lossy(&out.stderr));
    let ptx = std::fs::read_to_string(&ptx).unwrap();
    for name in names {
        assert!(ptx.contains(&format!(".visible .entry {name}(")), "no entry point {name}");
    }
    assert_eq!(ptx.matches(".entry ").count(), names.len());
    assert!(!ptx.contains("__local_depot"), "a kernel keeps a per-thread array in local memory");
    std::fs::remove_dir_all(&dir).ok();
}
