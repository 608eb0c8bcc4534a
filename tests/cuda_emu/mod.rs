//! The CUDA executor's kernels on the CPU, for tests without a GPU: builds the kernel program
//! (the exact text NVRTC compiles) with the host C++ compiler against `shim.h` and `emu.cpp`
//! into a shared library, loads it, and offers it as an executor [`Backend`]: the arena and
//! the workspace are host memory, launches run in the emulator, cuBLAS calls run
//! [`GemmCall::run_on_host`].
//!
//! A step's generated kernels (its fused ops', `Program::generated`) are built into a small
//! library of their own (`kernels.cpp`: the kernels and their entries, no scheduler), once
//! per distinct text, when its backend is made; their launches run in the emulator's
//! scheduler, whose library is loaded globally so theirs finds its GPU state.
//!
//! [`emulator()`] is `None` (and says why on stderr) when no C++ compiler is found; a program
//! that does not compile is a test failure.

use std::collections::HashMap;
use std::ffi::{CString, c_char, c_int, c_void};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use memplan::exec::cuda::CudaError;
use memplan::exec::cuda::executor::Backend;
use memplan::exec::cuda::generate::Generated;
use memplan::exec::cuda::source::{KERNELS, program};
use memplan::exec::cuda::view::{Addr, Bases, GemmCall, Kernel, Launch, ResolvedArg, Space};
use memplan::exec::data::{decode, encode};

type LaunchFn =
    unsafe extern "C" fn(*const c_char, *const u32, *const u32, *mut *mut c_void, *mut c_char, c_int) -> c_int;
type EntryCall = unsafe extern "C" fn(*mut *mut c_void);
type LaunchEntryFn = unsafe extern "C" fn(
    *const c_char,
    EntryCall,
    *const u32,
    *const u32,
    *mut *mut c_void,
    *mut c_char,
    c_int,
) -> c_int;
type EntryFn = unsafe extern "C" fn(*const c_char) -> Option<EntryCall>;

/// The loaded emulator: `emu.cpp` built around the program, loaded globally (a step's
/// generated kernels resolve its GPU state). It keeps that state in globals, so launches
/// take turns.
pub struct Emulator {
    _lib: libloading::os::unix::Library,
    launch: LaunchFn,
    launch_entry: LaunchEntryFn,
    turn: Mutex<()>,
}

/// A step's generated kernels: `kernels.cpp` built around its generated program.
struct Kernels {
    _lib: libloading::Library,
    entry: EntryFn,
}

/// The emulator, built on first use; `None` without a C++ compiler.
pub fn emulator() -> Option<&'static Emulator> {
    static EMU: OnceLock<Option<Emulator>> = OnceLock::new();
    EMU.get_or_init(|| {
        let compiler = std::env::var("CXX").unwrap_or_else(|_| "c++".to_string());
        if let Err(e) = Command::new(&compiler).arg("--version").output() {
            eprintln!("skipping the CUDA kernel emulation: no C++ compiler ({compiler}: {e}); set CXX to one");
            return None;
        }
        let names: Vec<String> = KERNELS.iter().map(|k| k.to_string()).collect();
        let (dir, lib) = build("program", "emu.cpp", &program(), &names, "-O2");
        use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
        // SAFETY: the library was just built from emu.cpp, whose exports we look up below;
        // loading runs no initialisers beyond its own globals. It is loaded globally, so
        // the libraries of generated kernels find its GPU state.
        let handle = unsafe { Library::open(Some(&lib), RTLD_NOW | RTLD_GLOBAL) }.expect("the emulator loads");
        std::fs::remove_dir_all(&dir).ok();
        // SAFETY: both have exactly these signatures (emu.cpp).
        let (launch, launch_entry) = unsafe {
            (
                *handle.get::<LaunchFn>(b"memplan_emu_launch\0").expect("the emulator exports its launch"),
                *handle.get::<LaunchEntryFn>(b"memplan_emu_launch_entry\0").expect("the emulator exports its launch"),
            )
        };
        Some(Emulator { _lib: handle, launch, launch_entry, turn: Mutex::new(()) })
    })
    .as_ref()
}

impl Emulator {
    /// The library of a step's generated kernels, built once per distinct text, unoptimized
    /// (every step with an elementwise op builds one, and they run on small tensors: the
    /// emulated suite took 62 s at -O1, 44 s at -O0). Built outside the lock, so the tests'
    /// threads build their steps' libraries side by side.
    fn generated(&self, generated: &Generated) -> Option<Arc<Kernels>> {
        static BUILT: Mutex<Option<HashMap<String, Arc<Kernels>>>> = Mutex::new(None);
        static BUILDS: AtomicUsize = AtomicUsize::new(0);
        let source = generated.source()?;
        let lock = || BUILT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(kernels) = lock().get_or_insert_with(HashMap::new).get(&source) {
            return Some(kernels.clone());
        }
        let count = BUILDS.fetch_add(1, Ordering::Relaxed);
        let (dir, lib) = build(&format!("generated_{count}"), "kernels.cpp", &source, &generated.names(), "-O0");
        // SAFETY: the library was just built from kernels.cpp around the step's kernels;
        // its undefined symbols (the GPU state) are the emulator's, loaded globally
        // before (`emulator()` made `self`).
        let handle = unsafe { libloading::Library::new(&lib) }.expect("the generated kernels load");
        std::fs::remove_dir_all(&dir).ok();
        // SAFETY: `memplan_emu_entry` has exactly the signature `EntryFn` (entries.h).
        let entry = unsafe { *handle.get::<EntryFn>(b"memplan_emu_entry\0").expect("the kernels export their entries") };
        let kernels = Arc::new(Kernels { _lib: handle, entry });
        // Another thread may have built the same text meanwhile: the first one stays.
        Some(lock().get_or_insert_with(HashMap::new).entry(source).or_insert(kernels).clone())
    }
}

/// Builds `main` (emu.cpp or kernels.cpp) around `source` (kernels `names`) at optimization
/// level `optimize` in a directory of its own named `name`: the directory and the shared
/// library. A program that does not compile fails the test.
fn build(name: &str, main: &str, source: &str, names: &[String], optimize: &str) -> (PathBuf, PathBuf) {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cuda_emu").join(format!("{name}_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("program.cu"), source).unwrap();
    let registry: String = names.iter().map(|k| format!("ENTRY({k})\n")).collect();
    std::fs::write(dir.join("registry.inc"), registry).unwrap();
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/cuda_emu");
    let lib = dir.join("libmemplan_emu.so");
    let compiler = std::env::var("CXX").unwrap_or_else(|_| "c++".to_string());
    let output = Command::new(&compiler)
        .args(["-std=c++17", optimize, "-fPIC", "-shared", "-Wall", "-Wno-unknown-pragmas", "-Wno-unused-function"])
        .arg(format!("-I{}", here.display()))
        .arg(format!("-I{}", dir.display()))
        .arg("-o")
        .arg(&lib)
        .arg(here.join(main))
        .output()
        .unwrap_or_else(|e| panic!("{compiler}: {e}"));
    assert!(
        output.status.success(),
        "the kernel program {name} does not compile as host C++ ({compiler}):\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    (dir, lib)
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
    /// The step's generated kernels, if it has any.
    generated: Option<Arc<Kernels>>,
    arena: Memory,
    workspace: Memory,
    /// Launches run, by kernel name.
    pub launches: Vec<&'static str>,
}

impl EmuBackend {
    pub fn new(emu: &'static Emulator, arena_bytes: u64, workspace_bytes: u64, generated: &Generated) -> EmuBackend {
        EmuBackend {
            emu,
            generated: emu.generated(generated),
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
        let name = CString::new(launch.kernel.to_string()).unwrap();
        let mut err = vec![0 as c_char; 512];
        let _turn = self.emu.turn.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // SAFETY: `params` points at `args`, alive for the call, one per kernel parameter in
        // order (the program tests check arguments against the kernels' signatures); every
        // tensor lies in `arena` or `workspace` (Program::new validated the spans); a
        // generated kernel's entry comes from its library, alive in `self.generated`.
        let status = unsafe {
            match launch.kernel {
                Kernel::Program(_) => {
                    (self.emu.launch)(name.as_ptr(), launch.grid.as_ptr(), launch.block.as_ptr(), params.as_mut_ptr(), err.as_mut_ptr(), 512)
                }
                Kernel::Generated(_) => {
                    let entry = self.generated.as_ref().and_then(|kernels| (kernels.entry)(name.as_ptr()));
                    let Some(entry) = entry else {
                        return Err(CudaError::Driver {
                            what: launch.kernel.to_string(),
                            message: "no such kernel among the step's generated kernels".into(),
                        });
                    };
                    (self.emu.launch_entry)(
                        name.as_ptr(),
                        entry,
                        launch.grid.as_ptr(),
                        launch.block.as_ptr(),
                        params.as_mut_ptr(),
                        err.as_mut_ptr(),
                        512,
                    )
                }
            }
        };
        self.launches.push(launch.kernel.family());
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
