//! Runs a [`Program`] on a [`Backend`]: the device (`device.rs`) or, in the tests, the host
//! emulation of the kernels (`tests/cuda_emu`).
//!
//! A backend owns two allocations: the arena (exactly the plan's `arena_bytes`) and the
//! workspace (cuBLAS's workspace, also the ops' scratch). The executor uploads arguments
//! into the arena at their planned offsets, runs every op's commands in schedule order, and
//! reads returned and updated values back through their views.
//!
//! Across training steps the arena keeps its contents: params and state persist and each
//! update lands in its target's bytes (the plan guarantees both), so the next step needs
//! only its inputs uploaded again (`Upload::Inputs`).

use crate::exec::ExecError;
use crate::exec::cpu::{POISON, StepResult};
use crate::exec::cuda::CudaError;
use crate::exec::cuda::program::Program;
use crate::exec::cuda::view::{Bases, Command, GemmCall, Launch, ResolvedArg, Space, View};
use crate::exec::data::{HostTensor, Tensors};
use crate::ir::graph::Role;

/// Device memory and the operations a program needs from it. Addresses are device
/// addresses; offsets are bytes into the arena.
pub trait Backend {
    /// Where the arena and the workspace start.
    fn bases(&self) -> Bases;
    /// Copies `bytes` to the arena at `offset`.
    fn upload(&mut self, offset: u64, bytes: &[u8]) -> Result<(), CudaError>;
    /// Copies `out.len()` bytes from the arena at `offset`.
    fn download(&mut self, offset: u64, out: &mut [u8]) -> Result<(), CudaError>;
    /// Fills the whole arena with a 32-bit word.
    fn fill_arena(&mut self, word: u32) -> Result<(), CudaError>;
    /// Launches `launch.kernel` with `args` (resolved from `launch.args`).
    fn launch(&mut self, launch: &Launch, args: &[ResolvedArg]) -> Result<(), CudaError>;
    /// Runs one cuBLAS call.
    fn gemm(&mut self, call: &GemmCall) -> Result<(), CudaError>;
    /// Waits for all work queued so far.
    fn synchronize(&mut self) -> Result<(), CudaError>;
}

/// Which arguments [`Executor::upload`] copies.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Upload {
    /// Every argument (the first step, or to reset params and state).
    All,
    /// Only `input` arguments: params and state are already in the arena.
    Inputs,
}

/// A program and the backend it runs on.
pub struct Executor<B: Backend> {
    pub backend: B,
    pub program: Program,
}

impl<B: Backend> Executor<B> {
    pub fn new(backend: B, program: Program) -> Executor<B> {
        Executor { backend, program }
    }

    /// Fills the arena with the CPU executor's poison (f32 signalling NaNs), so a read of
    /// bytes nothing wrote shows up as NaN.
    pub fn poison(&mut self) -> Result<(), CudaError> {
        self.backend.fill_arena(u32::from_le_bytes(POISON))
    }

    /// Checks `args` against the step (every argument given, with its declared type; index
    /// arguments within their ops' bounds) and copies the chosen ones into the arena.
    pub fn upload(&mut self, args: &Tensors, which: Upload) -> Result<(), CudaError> {
        for slot in &self.program.args {
            let given = args
                .get(&slot.name)
                .ok_or_else(|| ExecError::MissingArgument { name: slot.name.clone(), ty: slot.ty.to_string() })?;
            if given.ty != slot.ty {
                return Err(ExecError::ArgumentType {
                    name: slot.name.clone(),
                    expected: slot.ty.to_string(),
                    found: given.ty.to_string(),
                }
                .into());
            }
        }
        for check in &self.program.index_checks {
            let values = args[&check.arg].to_f64();
            if let Some(&bad) = values.iter().find(|&&x| !check.accepts(x)) {
                return Err(check.error(bad).into());
            }
        }
        for slot in &self.program.args {
            if which == Upload::All || slot.role == Role::Input {
                self.backend.upload(slot.offset, &args[&slot.name].bytes)?;
            }
        }
        Ok(())
    }

    /// Queues every op's commands, in schedule order (call `backend.synchronize()` to wait).
    pub fn run(&mut self) -> Result<(), CudaError> {
        for index in 0..self.program.ops.len() {
            self.run_op(index)?;
        }
        Ok(())
    }

    /// Queues the commands of the `index`-th op of the schedule (`run --profile` times each
    /// op by recording an event between two calls).
    pub fn run_op(&mut self, index: usize) -> Result<(), CudaError> {
        let bases = self.backend.bases();
        let op = &self.program.ops[index];
        for command in &op.commands {
            let done = match command {
                Command::Launch(launch) => {
                    // Program::new checked that every view fits a descriptor.
                    let args = launch.resolve(bases).ok_or_else(|| {
                        CudaError::Unsupported(format!(
                            "{} ({}): a tensor does not fit the kernels' descriptor",
                            op.kind, op.op
                        ))
                    })?;
                    self.backend.launch(launch, &args)
                }
                Command::Gemm(call) => self.backend.gemm(call),
            };
            done.map_err(|e| e.in_op(&format!("{} ({})", op.kind, op.op)))?;
        }
        Ok(())
    }

    /// The returned values and the new values of updated params and state (by target
    /// name), read back from the arena.
    pub fn result(&mut self) -> Result<StepResult, CudaError> {
        let returns = self.returns()?;
        let updated = self.read(&self.program.updates.clone())?;
        Ok(StepResult { returns, updated })
    }

    /// Only the returned values (a loss, say), without the updated params and state.
    pub fn returns(&mut self) -> Result<Tensors, CudaError> {
        self.read(&self.program.returns.clone())
    }

    fn read(&mut self, list: &[(String, View)]) -> Result<Tensors, CudaError> {
        self.backend.synchronize()?;
        let mut out = Tensors::new();
        for (name, view) in list {
            out.insert(name.clone(), read_view(&mut self.backend, view)?);
        }
        Ok(out)
    }

    /// The current params and state (what the arena holds after the last step).
    pub fn persistent_args(&mut self) -> Result<Tensors, CudaError> {
        self.backend.synchronize()?;
        let mut out = Tensors::new();
        for slot in self.program.args.clone().iter().filter(|s| s.role.persists()) {
            let mut bytes = vec![0u8; slot.ty.bytes().unwrap_or(0) as usize];
            self.backend.download(slot.offset, &mut bytes)?;
            out.insert(slot.name.clone(), HostTensor { ty: slot.ty.clone(), bytes });
        }
        Ok(out)
    }
}

/// A view's elements as a dense host tensor: its span downloaded, then gathered through
/// its strides.
fn read_view<B: Backend>(backend: &mut B, view: &View) -> Result<HostTensor, CudaError> {
    debug_assert_eq!(view.addr.space, Space::Arena);
    let mut span = vec![0u8; view.span_bytes() as usize];
    backend.download(view.addr.offset, &mut span)?;
    Ok(HostTensor { ty: crate::ir::types::TensorType::new(view.dtype, view.shape.clone()), bytes: gather(view, &span) })
}

/// The elements of `view` (row-major) from `span`, the bytes starting at its address.
pub fn gather(view: &View, span: &[u8]) -> Vec<u8> {
    let size = view.dtype.size() as usize;
    let n = view.numel() as usize;
    let mut out = Vec::with_capacity(n * size);
    let mut index = vec![0u64; view.rank()];
    for i in 0..n {
        if i > 0 {
            for d in (0..view.rank()).rev() {
                index[d] += 1;
                if index[d] < view.shape[d] {
                    break;
                }
                index[d] = 0;
            }
        }
        let at = index.iter().zip(&view.strides).map(|(i, s)| i * s).sum::<u64>() as usize * size;
        out.extend_from_slice(&span[at..at + size]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::cuda::view::Addr;
    use crate::ir::types::DType;

    #[test]
    fn gather_reads_through_strides() {
        // A [2, 3] i32 root viewed transposed as [3, 2].
        let span: Vec<u8> = (0..6i32).flat_map(|x| x.to_le_bytes()).collect();
        let view = View { addr: Addr::arena(0), dtype: DType::I32, shape: vec![3, 2], strides: vec![1, 3] };
        let got: Vec<i32> = gather(&view, &span).chunks(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect();
        assert_eq!(got, [0, 3, 1, 4, 2, 5]);
        // An expanded scalar.
        let view = View { addr: Addr::arena(0), dtype: DType::I32, shape: vec![3], strides: vec![0] };
        assert_eq!(gather(&view, &span[..4]), [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    }
}
