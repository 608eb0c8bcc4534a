//! The CUDA executor's kernels on the CPU, for tests without a GPU: builds the kernel program
//! (the exact text NVRTC compiles) with the host C++ compiler against `shim.h` and `emu.cpp`
//! into a shared library, loads it, and offers it as an executor [`Backend`]: the arena and
//! the workspace are host memory, launches run in the emulator, cuBLAS calls run
//! [`GemmCall::run_on_host`].
//!
//! [`emulator()`] is `None` (and says why on stderr) when no C++ compiler is found; a program
//! that does not compile is a test failure.

use std::ffi::{CString, c_char, c_int, c_void};
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use memplan::exec::cuda::CudaError;
use memplan::exec::cuda::executor::Backend;
use memplan::exec::cuda::source::{KERNELS, program};
use memplan::exec::cuda::view::{Addr, Bases, GemmCall, Launch, ResolvedArg, Space};
use memplan::exec::data::{decode, encode};

type LaunchFn =
    unsafe extern "C" fn(*const c_char, *const u32, *const u32, *mut *mut c_void, *mut c_char, c_int) -> c_int;

/// The loaded emulator. It keeps its GPU state in globals, so launches take turns.
pub struct Emulator {
    _lib: libloading::Library,
    launch: LaunchFn,
    turn: Mutex<()>,
}

/// The emulator, built on first use; `None` without a C++ compiler.
pub fn emulator() -> Option<&'static Emulator> {
    static EMU: OnceLock<Option<Emulator>> = OnceLock::new();
    EMU.get_or_init(build).as_ref()
}

fn build() -> Option<Emulator> {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cuda_emu");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("program.cu"), program()).unwrap();
    let registry: String = KERNELS.iter().map(|k| format!("ENTRY({k})\n")).collect();
    std::fs::write(dir.join("registry.inc"), registry).unwrap();
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/cuda_emu");
    let lib = dir.join(format!("libmemplan_emu_{}.so", std::process::id()));
    let compiler = std::env::var("CXX").unwrap_or_else(|_| "c++".to_string());
    let output = Command::new(&compiler)
        .args(["-std=c++17", "-O2", "-fPIC", "-shared", "-Wall", "-Wno-unknown-pragmas", "-Wno-unused-function"])
        .arg(format!("-I{}", here.display()))
        .arg(format!("-I{}", dir.display()))
        .arg("-o")
        .arg(&lib)
        .arg(here.join("emu.cpp"))
        .output();
    let output = match output {
        Ok(output) => output,
        Err(e) => {
            eprintln!("skipping the CUDA kernel emulation: no C++ compiler ({compiler}: {e}); set CXX to one");
            return None;
        }
    };
    assert!(
        output.status.success(),
        "the kernel program does not compile as host C++ ({compiler}):\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // SAFETY: the library was just built from emu.cpp, whose only export we look up below;
    // loading runs no initialisers beyond its own globals.
    let lib_handle = unsafe { libloading::Library::new(&lib) }.expect("the emulator loads");
    // SAFETY: `memplan_emu_launch` has exactly the signature `LaunchFn` (emu.cpp).
    let launch =
        unsafe { *lib_handle.get::<LaunchFn>(b"memplan_emu_launch\0").expect("the emulator exports its launch") };
    std::fs::remove_file(&lib).ok();
    Some(Emulator { _lib: lib_handle, launch, turn: Mutex::new(()) })
}

/// 256-byte aligned host memory.
struct Memory {
    words: Vec<u64>,
    start: usize,
    len: usize,
}

impl Memory {
    fn new(len: u64) -> Memory {
        let len = len as usize;
        let words = vec![0u64; len.div_ceil(8) + 64];
        let start = (256 - words.as_ptr() as usize % 256) % 256;
        Memory { words, start, len }
    }

    fn bytes(&mut self) -> &mut [u8] {
        let (start, len) = (self.start, self.len);
        // SAFETY: `words` holds len.div_ceil(8) + 64 words: `start` < 256 plus `len` bytes fit.
        unsafe { std::slice::from_raw_parts_mut((self.words.as_mut_ptr() as *mut u8).add(start), len) }
    }

    fn address(&self) -> u64 {
        self.words.as_ptr() as u64 + self.start as u64
    }
}

/// Host memory as a device.
pub struct EmuBackend {
    emu: &'static Emulator,
    arena: Memory,
    workspace: Memory,
    /// Launches run, by kernel name.
    pub launches: Vec<&'static str>,
}

impl EmuBackend {
    pub fn new(emu: &'static Emulator, arena_bytes: u64, workspace_bytes: u64) -> EmuBackend {
        EmuBackend {
            emu,
            arena: Memory::new(arena_bytes),
            workspace: Memory::new(workspace_bytes),
            launches: Vec::new(),
        }
    }

    fn space(&mut self, space: Space) -> &mut [u8] {
        match space {
            Space::Arena => self.arena.bytes(),
            Space::Workspace => self.workspace.bytes(),
        }
    }
}

impl Backend for EmuBackend {
    fn bases(&self) -> Bases {
        Bases { arena: self.arena.address(), workspace: self.workspace.address() }
    }

    fn upload(&mut self, offset: u64, bytes: &[u8]) -> Result<(), CudaError> {
        self.arena.bytes()[offset as usize..offset as usize + bytes.len()].copy_from_slice(bytes);
        Ok(())
    }

    fn download(&mut self, offset: u64, out: &mut [u8]) -> Result<(), CudaError> {
        out.copy_from_slice(&self.arena.bytes()[offset as usize..offset as usize + out.len()]);
        Ok(())
    }

    fn fill_arena(&mut self, word: u32) -> Result<(), CudaError> {
        for (i, b) in self.arena.bytes().iter_mut().enumerate() {
            *b = word.to_le_bytes()[i % 4];
        }
        Ok(())
    }

    fn launch(&mut self, launch: &Launch, args: &[ResolvedArg]) -> Result<(), CudaError> {
        let mut params: Vec<*mut c_void> = args.iter().map(ResolvedArg::as_param).collect();
        let name = CString::new(launch.kernel).unwrap();
        let mut err = vec![0 as c_char; 512];
        let _turn = self.emu.turn.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // SAFETY: `params` points at `args`, alive for the call, one per kernel parameter in
        // order (the program tests check arguments against the kernels' signatures); every
        // tensor lies in `arena` or `workspace` (Program::new validated the spans).
        let status = unsafe {
            (self.emu.launch)(
                name.as_ptr(),
                launch.grid.as_ptr(),
                launch.block.as_ptr(),
                params.as_mut_ptr(),
                err.as_mut_ptr(),
                512,
            )
        };
        self.launches.push(launch.kernel);
        if status == 0 {
            Ok(())
        } else {
            // SAFETY: the emulator wrote a NUL-terminated message into `err`.
            let message = unsafe { std::ffi::CStr::from_ptr(err.as_ptr()) }.to_string_lossy().into_owned();
            Err(CudaError::Driver { what: launch.kernel.to_string(), message })
        }
    }

    fn gemm(&mut self, call: &GemmCall) -> Result<(), CudaError> {
        let size = call.dtype.size() as usize;
        let snapshot = (self.arena.bytes().to_vec(), self.workspace.bytes().to_vec());
        let read = |addr: Addr| {
            let memory = match addr.space {
                Space::Arena => &snapshot.0,
                Space::Workspace => &snapshot.1,
            };
            decode(call.dtype, &memory[addr.offset as usize..addr.offset as usize + size])
        };
        let mut writes = Vec::new();
        call.run_on_host(&read, &mut |addr, x| writes.push((addr, x)));
        for (addr, x) in writes {
            let at = addr.offset as usize;
            encode(call.dtype, x, &mut self.space(addr.space)[at..at + size]);
        }
        self.launches.push("cublas");
        Ok(())
    }

    fn synchronize(&mut self) -> Result<(), CudaError> {
        Ok(())
    }
}
