//! The CPU reference executor: runs a step with real numbers, either inside ONE byte arena
//! at a plan's offsets, or unplanned with every value in bytes of its own.
//!
//! Memory: one `Vec<u8>`. Planned, it has `arena_bytes` bytes and each root value (a value
//! that owns its bytes; views do not) sits at its buffer's offset, so values the planner
//! let share bytes really overwrite each other. Unplanned, each root value gets its own
//! region and nothing is ever shared: the reference meaning of the step. Before a run the
//! memory is filled with a poison pattern (f32 signalling NaNs: `0x7FA00001`, which is also
//! a bf16 signalling NaN in its upper half), so reading bytes nothing wrote shows up as NaNs
//! in the results, and the planned run then differs from the unplanned one.
//!
//! Views are layouts, not copies: each value has a root, an element offset, a shape and
//! element strides into the root's bytes (`ir::layout`: `reshape`, `transpose`, `expand`,
//! `slice`, `select`), so a view is read through its root's bytes at its planned offset.
//!
//! Each op gathers its inputs through their layouts into dense `f64` tensors, calls the
//! kernel, and then stores its outputs (dense, in their dtypes) at their offsets. Because
//! every input is fully read before any output is written, an op may write an output over
//! an input's bytes (in-place) safely; whether OTHER values survive is exactly what the
//! plan must guarantee and what the comparison with the unplanned run tests.
//!
//! A *pointwise* op (its row's `pointwise` inputs all of the outputs' shape) over more than
//! [`CHUNK`] elements runs on runs of [`CHUNK`] elements at a time, each gathered, computed
//! and stored before the next: the same arithmetic on every element, so the same bits, but
//! its `f64` copies take a chunk, not the whole tensors (a relu of 600,000,000 elements held
//! 9.6 GB of them). An output written over an input's bytes (in-place) stays safe: the
//! in-place rule (`passes::inplace`, and the checker's) lets an op write over only an
//! input it reads densely, in the output's own element order, and through no other view,
//! so a chunk reads every element it overwrites before writing it, and no later chunk
//! reads an element an earlier one wrote.
//!
//! What a run holds at once ([`Footprint`]): the memory (the arena, or unplanned every root
//! value's own bytes), the arguments, one op's inputs and outputs as `f64` numbers (8 bytes
//! an element, twice an f32's: kernels compute in f64; a chunk of them for a pointwise op),
//! and the results copied out. The memory and the inputs are allocated fallibly
//! ([`ExecError::OutOfMemory`], never an abort); `memplan run` checks the whole footprint
//! against the memory available first.

use crate::exec::data::{HostTensor, Tensors, decode, encode};
use crate::exec::{Dense, ExecError, kernels};
use crate::index::{IndexVec, OpId, ValueId};
use crate::ir::graph::Graph;
use crate::ir::layout::{Layout, dense_strides, layouts};
use crate::ir::types::TensorType;
use crate::plan::Plan;

/// The poison word written over all memory before a run (little-endian f32 sNaN).
pub(crate) const POISON: [u8; 4] = 0x7FA0_0001u32.to_le_bytes();

/// Elements a pointwise op computes at a time (8 MiB of `f64` per tensor).
pub const CHUNK: usize = 1 << 20;

/// Where values live during a run.
#[derive(Clone, Copy, Debug)]
pub enum Placement<'a> {
    /// At the plan's offsets inside one arena of `arena_bytes`.
    Planned(&'a Plan),
    /// Every root value in bytes of its own, ops in program order.
    Unplanned,
}

/// What one step produced.
#[derive(Clone, PartialEq, Debug)]
pub struct StepResult {
    /// Returned values, by name, in `return` order.
    pub returns: Tensors,
    /// New values of updated params and state, by the TARGET's name, in update order.
    pub updated: Tensors,
}

impl StepResult {
    /// The loss: the first returned float scalar, if any.
    pub fn loss(&self) -> Option<f64> {
        self.returns.values().find(|t| t.ty.rank() == 0 && t.ty.dtype.is_float()).map(|t| t.to_f64()[0])
    }

    /// Where `self` and `other` differ bit for bit: one line per differing tensor.
    pub fn differences(&self, other: &StepResult) -> Vec<String> {
        let mut out = Vec::new();
        for (what, a, b) in [("return", &self.returns, &other.returns), ("update", &self.updated, &other.updated)] {
            for (name, ta) in a {
                match b.get(name) {
                    None => out.push(format!("{what} %{name}: missing")),
                    Some(tb) if ta != tb => {
                        let first = ta.bytes.iter().zip(&tb.bytes).position(|(x, y)| x != y).unwrap_or(0);
                        out.push(format!("{what} %{name} ({}): first differing byte {first}", ta.ty));
                    }
                    Some(_) => {}
                }
            }
        }
        out
    }
}

/// The arena offset of every root value in `plan` (0 for views: they use their root's),
/// after checking that the plan maps every value and each root fits in the arena.
pub(crate) fn planned_offsets(graph: &Graph, layouts: &IndexVec<ValueId, Layout>, plan: &Plan) -> Result<IndexVec<ValueId, u64>, ExecError> {
    if plan.value_buffer.len() != graph.values.len() {
        return Err(ExecError::BadPlan("the plan maps another number of values".into()));
    }
    let mut base = IndexVec::from_elem(0u64, graph.values.len());
    for v in graph.values.indices().filter(|&v| layouts[v].root == v) {
        let buffer = plan
            .buffers
            .get(plan.value_buffer[v])
            .ok_or_else(|| ExecError::BadPlan(format!("{} has no buffer", graph.value_name(v))))?;
        let end = buffer.offset.checked_add(graph.values[v].ty.bytes().unwrap_or(u64::MAX));
        if end.is_none_or(|e| e > plan.arena_bytes) {
            return Err(ExecError::BadPlan(format!("{} ends past the arena", graph.value_name(v))));
        }
        base[v] = buffer.offset;
    }
    Ok(base)
}

/// Every root value in bytes of its own, one after another: each one's offset, and where
/// the last ends (`None` past 2^64 - 1).
fn unplanned_offsets(graph: &Graph, layouts: &IndexVec<ValueId, Layout>) -> (IndexVec<ValueId, u64>, Option<u64>) {
    let mut offsets = IndexVec::from_elem(0u64, graph.values.len());
    let mut end = Some(0u64);
    for v in graph.values.indices().filter(|&v| layouts[v].root == v) {
        offsets[v] = end.unwrap_or(0);
        end = end.and_then(|e| e.checked_add(graph.values[v].ty.bytes()?));
    }
    (offsets, end)
}

/// The elements per output of a pointwise op that runs in chunks (see the module doc):
/// `Some(n)` if its row's pointwise inputs and its outputs all have one shape of `n >
/// chunk` elements.
fn chunked(graph: &Graph, op: OpId, chunk: usize) -> Option<usize> {
    let op = &graph.ops[op];
    let pointwise = op.kind.def().pointwise_inputs(op.inputs.len());
    let shape = &graph.values[*op.outputs.first()?].ty.shape;
    let same_shape = |v: ValueId| graph.values[v].ty.shape == *shape;
    if pointwise.is_empty() || !op.outputs.iter().all(|&v| same_shape(v)) || !pointwise.iter().all(|&k| op.inputs.get(k).is_some_and(|&v| same_shape(v))) {
        return None;
    }
    usize::try_from(shape.numel()?).ok().filter(|&n| n > chunk)
}

/// The elements of a fused op's inner values (the op's `body`, a fused_norm's too; 0 for other ops), each at
/// most `chunk` elements when it runs in chunks: its kernel holds them all while it runs,
/// and a copy of each inner op's operands.
fn fused_inner_elements(graph: &Graph, op: &crate::ir::graph::Op, chunk: Option<u64>) -> Option<u64> {
    let Some(crate::ir::ops::Attr::Str(text)) = op.attrs.get("body") else { return Some(0) };
    let Ok(body) = crate::ir::ops::FusedBody::parse(text) else { return Some(0) };
    // A fused_norm's body reads the inputs before the norm's parameters.
    let body_inputs = op.inputs.len().saturating_sub(crate::ir::ops::norm_params(&op.attrs));
    let inputs: Vec<&TensorType> = op.inputs[..body_inputs].iter().map(|&v| &graph.values[v].ty).collect();
    let types = body.types(&inputs).ok()?;
    types.iter().try_fold(0u64, |acc, t| {
        let n = t.shape.numel()?;
        acc.checked_add(chunk.map_or(n, |c| c.min(n)).checked_mul(2)?)
    })
}

/// What the CPU executor holds at most while it runs one step, in bytes (see the module
/// doc).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Footprint {
    /// The arena (planned), or every root value's own bytes (unplanned).
    pub memory: u64,
    /// The step's arguments as host tensors.
    pub args: u64,
    /// The largest op's inputs and outputs as `f64` numbers.
    pub op: u64,
    /// The returned and updated values, copied out of the memory.
    pub results: u64,
}

impl Footprint {
    /// The footprint of running `graph` placed so; `None` if a size overflows 2^64 - 1.
    pub fn of(graph: &Graph, placement: Placement<'_>) -> Option<Footprint> {
        let sum = |mut values: Box<dyn Iterator<Item = ValueId> + '_>| {
            values.try_fold(0u64, |acc, v| acc.checked_add(graph.values[v].ty.bytes()?))
        };
        let memory = match placement {
            Placement::Planned(plan) => plan.arena_bytes,
            Placement::Unplanned => unplanned_offsets(graph, &layouts(graph)).1?,
        };
        let args = sum(Box::new(graph.args.iter().copied()))?;
        let results = sum(Box::new(graph.returns.iter().map(|r| r.value).chain(graph.updates.iter().map(|u| u.value))))?;
        let mut op = 0u64;
        for (id, o) in graph.ops.iter_enumerated().filter(|(_, o)| o.kind.def().view_of().is_none()) {
            let numel = |v: ValueId| graph.values[v].ty.shape.numel();
            let elements = match chunked(graph, id, CHUNK) {
                // A chunk of each pointwise input and output, the other inputs whole.
                Some(_) => o.inputs.iter().enumerate().try_fold(0u64, |acc, (k, &v)| {
                    let n = if o.kind.def().pointwise_inputs(o.inputs.len()).contains(&k) { CHUNK as u64 } else { numel(v)? };
                    acc.checked_add(n)
                })? + o.outputs.len() as u64 * CHUNK as u64,
                None => o.inputs.iter().chain(&o.outputs).try_fold(0u64, |acc, &v| acc.checked_add(numel(v)?))?,
            };
            let elements = elements.checked_add(fused_inner_elements(graph, o, chunked(graph, id, CHUNK).map(|_| CHUNK as u64))?)?;
            op = op.max(elements.checked_mul(8)?);
        }
        Some(Footprint { memory, args, op, results })
    }

    /// Every part added up; `None` past 2^64 - 1.
    pub fn total(&self) -> Option<u64> {
        self.memory.checked_add(self.args)?.checked_add(self.op)?.checked_add(self.results)
    }
}

/// The memory of one run.
struct Memory {
    bytes: Vec<u8>,
    /// Byte offset of each root value.
    base: IndexVec<ValueId, usize>,
}

impl Memory {
    fn new(graph: &Graph, layouts: &IndexVec<ValueId, Layout>, placement: Placement<'_>) -> Result<Memory, ExecError> {
        let (what, size, offsets) = match placement {
            Placement::Planned(plan) => ("the arena", Some(plan.arena_bytes), planned_offsets(graph, layouts, plan)?),
            Placement::Unplanned => {
                let (offsets, end) = unplanned_offsets(graph, layouts);
                ("the unplanned run (every value in its own bytes)", end, offsets)
            }
        };
        let out_of_memory = || ExecError::OutOfMemory { what: what.to_string(), bytes: size };
        let size = size.and_then(|s| usize::try_from(s).ok()).ok_or_else(out_of_memory)?;
        // Every offset is below the size, which fits a usize.
        let base = offsets.iter().map(|&o| o as usize).collect();
        let mut bytes = Vec::new();
        bytes.try_reserve_exact(size).map_err(|_| out_of_memory())?;
        bytes.extend(POISON.iter().copied().cycle().take(size));
        Ok(Memory { bytes, base })
    }

    /// Byte position of elements `first..first + count` of `layout` (row-major order of its
    /// shape).
    fn element_offsets(&self, layout: &Layout, elem: usize, first: usize, count: usize) -> ElementOffsets {
        // A layout stays inside its root, whose bytes are allocated: the casts cannot lose.
        let base = self.base[layout.root] + elem * layout.offset as usize;
        let shape: Vec<usize> = layout.shape.iter().map(|&d| d as usize).collect();
        let strides: Vec<usize> = layout.strides.iter().map(|&s| s as usize * elem).collect();
        let dense = layout.strides == dense_strides(&layout.shape);
        // The index of element `first`, last dimension fastest.
        let mut index = vec![0usize; shape.len()];
        let mut rest = first;
        for d in (0..shape.len()).rev() {
            if shape[d] > 0 {
                index[d] = rest % shape[d];
                rest /= shape[d];
            }
        }
        let at = if dense { base + first * elem } else { base + index.iter().zip(&strides).map(|(i, s)| i * s).sum::<usize>() };
        ElementOffsets { shape, strides, index, at, step: if dense { Some(elem) } else { None }, left: count }
    }

    /// Elements `first..first + count` of the value as `f64` numbers, shaped `shape`
    /// (allocated fallibly: `name` names the value).
    fn read_dense(&self, layout: &Layout, ty: &TensorType, name: &str, first: usize, count: usize, shape: Vec<usize>) -> Result<Dense, ExecError> {
        let size = ty.dtype.size() as usize;
        let mut data = Vec::new();
        data.try_reserve_exact(count)
            .map_err(|_| ExecError::OutOfMemory { what: format!("{name} as f64 numbers"), bytes: (count as u64).checked_mul(8) })?;
        data.extend(self.element_offsets(layout, size, first, count).map(|at| decode(ty.dtype, &self.bytes[at..at + size])));
        Ok(Dense::new(shape, data))
    }

    /// The value's elements as dense bytes, copied exactly (allocated fallibly: `name`
    /// names the value).
    fn read_host(&self, layout: &Layout, ty: &TensorType, name: &str) -> Result<HostTensor, ExecError> {
        let size = ty.dtype.size() as usize;
        // The value lies in the arena, which is allocated: its byte count fits a usize.
        let n = layout.shape.iter().product::<u64>() as usize * size;
        let mut bytes = Vec::new();
        bytes.try_reserve_exact(n).map_err(|_| ExecError::OutOfMemory { what: format!("the result %{name}"), bytes: Some(n as u64) })?;
        for at in self.element_offsets(layout, size, 0, n / size) {
            bytes.extend_from_slice(&self.bytes[at..at + size]);
        }
        Ok(HostTensor { ty: ty.clone(), bytes })
    }

    /// Stores elements `first..first + data.len()` of a root value densely at its base.
    fn write_root(&mut self, value: ValueId, ty: &TensorType, first: usize, data: &[f64]) {
        let size = ty.dtype.size() as usize;
        let base = self.base[value] + first * size;
        for (i, &x) in data.iter().enumerate() {
            encode(ty.dtype, x, &mut self.bytes[base + i * size..base + (i + 1) * size]);
        }
    }
}

/// Byte positions of a run of a layout's elements (see [`Memory::element_offsets`]): a
/// step apart where the layout is dense, else by the index, last dimension fastest.
struct ElementOffsets {
    shape: Vec<usize>,
    /// In bytes.
    strides: Vec<usize>,
    index: Vec<usize>,
    /// The next element's byte position.
    at: usize,
    /// The bytes between elements, for a dense layout.
    step: Option<usize>,
    left: usize,
}

impl Iterator for ElementOffsets {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let at = self.at;
        if let Some(step) = self.step {
            self.at += step;
            return Some(at);
        }
        for d in (0..self.shape.len()).rev() {
            self.index[d] += 1;
            if self.index[d] < self.shape[d] {
                self.at += self.strides[d];
                break;
            }
            self.at -= (self.shape[d] - 1) * self.strides[d];
            self.index[d] = 0;
        }
        Some(at)
    }
}

/// Whether `outputs` as f64 numbers (or `chunk` elements of each) can be allocated: the kernels allocate their results
/// infallibly, so the bytes are asked for fallibly first, one output at a time, and given
/// back for the kernel to take (an out-of-memory error naming the output instead of an
/// abort).
fn outputs_fit(graph: &Graph, outputs: &[ValueId], chunk: Option<usize>) -> Result<(), ExecError> {
    for &v in outputs {
        let n = graph.values[v].ty.shape.0.iter().try_fold(1usize, |n, &d| n.checked_mul(usize::try_from(d).ok()?));
        let n = n.map(|n| chunk.map_or(n, |chunk| n.min(chunk)));
        let mut probe: Vec<f64> = Vec::new();
        if n.is_none_or(|n| probe.try_reserve_exact(n).is_err()) {
            let bytes = n.and_then(|n| (n as u64).checked_mul(8));
            return Err(ExecError::OutOfMemory { what: format!("{} as f64 numbers", graph.value_name(v)), bytes });
        }
    }
    Ok(())
}

/// Runs one step of `graph` on `args` (every argument by name).
pub fn run_step(graph: &Graph, placement: Placement<'_>, args: &Tensors) -> Result<StepResult, ExecError> {
    run_step_in_chunks(graph, placement, args, CHUNK)
}

/// [`run_step`] with pointwise ops over more than `chunk` elements run `chunk` elements at
/// a time (`run_step` takes [`CHUNK`]; tests take a few, to show that chunks change
/// nothing, in-place ops included).
pub fn run_step_in_chunks(graph: &Graph, placement: Placement<'_>, args: &Tensors, chunk: usize) -> Result<StepResult, ExecError> {
    let chunk = chunk.max(1);
    crate::exec::refuse_extern(graph)?;
    let layouts = layouts(graph);
    let mut memory = Memory::new(graph, &layouts, placement)?;
    for &arg in &graph.args {
        let value = &graph.values[arg];
        let given = args.get(&value.name).ok_or_else(|| ExecError::MissingArgument {
            name: value.name.clone(),
            ty: value.ty.to_string(),
        })?;
        if given.ty != value.ty {
            return Err(ExecError::ArgumentType {
                name: value.name.clone(),
                expected: value.ty.to_string(),
                found: given.ty.to_string(),
            });
        }
        let base = memory.base[arg];
        memory.bytes[base..base + given.bytes.len()].copy_from_slice(&given.bytes);
    }
    let schedule: Vec<OpId> = match placement {
        Placement::Planned(plan) => plan.schedule.clone(),
        Placement::Unplanned => graph.ops.indices().collect(),
    };
    for op_id in schedule {
        let op = graph.ops.get(op_id).ok_or_else(|| ExecError::BadPlan(format!("the schedule names {op_id}")))?;
        if op.kind.def().view_of().is_some() {
            continue;
        }
        let at_op = |e| ExecError::at_op(graph, op_id, e);
        let read_whole = |memory: &Memory, v: ValueId| {
            let shape: Vec<usize> = layouts[v].shape.iter().map(|&d| d as usize).collect();
            let n = shape.iter().product();
            memory.read_dense(&layouts[v], &graph.values[v].ty, &graph.value_name(v), 0, n, shape)
        };
        let Some(n) = chunked(graph, op_id, chunk) else {
            let inputs = op.inputs.iter().map(|&v| read_whole(&memory, v)).collect::<Result<Vec<Dense>, ExecError>>().map_err(at_op)?;
            let output_types: Vec<TensorType> = op.outputs.iter().map(|&v| graph.values[v].ty.clone()).collect();
            outputs_fit(graph, &op.outputs, None).map_err(at_op)?;
            let results = kernels::eval(op.kind, &op.attrs, &inputs, &output_types).map_err(at_op)?;
            for ((&out, ty), result) in op.outputs.iter().zip(&output_types).zip(results) {
                memory.write_root(out, ty, 0, &result.data);
            }
            continue;
        };
        // Pointwise, in chunks: the other inputs whole, once; the pointwise ones, and the
        // outputs, a run of elements at a time, seen by the kernel as flat tensors.
        let pointwise = op.kind.def().pointwise_inputs(op.inputs.len());
        let mut inputs: Vec<Dense> = Vec::with_capacity(op.inputs.len());
        for (k, &v) in op.inputs.iter().enumerate() {
            inputs.push(if pointwise.contains(&k) { Dense::zeros(vec![0]) } else { read_whole(&memory, v).map_err(at_op)? });
        }
        outputs_fit(graph, &op.outputs, Some(chunk)).map_err(at_op)?;
        for first in (0..n).step_by(chunk) {
            let count = chunk.min(n - first);
            for &k in pointwise.iter() {
                let v = op.inputs[k];
                inputs[k] = memory.read_dense(&layouts[v], &graph.values[v].ty, &graph.value_name(v), first, count, vec![count]).map_err(at_op)?;
            }
            let output_types: Vec<TensorType> =
                op.outputs.iter().map(|&v| TensorType::new(graph.values[v].ty.dtype, vec![count as u64])).collect();
            let results = kernels::eval(op.kind, &op.attrs, &inputs, &output_types).map_err(at_op)?;
            for ((&out, ty), result) in op.outputs.iter().zip(&output_types).zip(results) {
                memory.write_root(out, ty, first, &result.data);
            }
        }
    }
    let read = |name: &str, v: ValueId| Ok((name.to_string(), memory.read_host(&layouts[v], &graph.values[v].ty, name)?));
    Ok(StepResult {
        returns: graph.returns.iter().map(|r| read(&graph.values[r.value].name, r.value)).collect::<Result<_, ExecError>>()?,
        updated: graph.updates.iter().map(|u| read(&graph.values[u.target].name, u.value)).collect::<Result<_, ExecError>>()?,
    })
}

/// `args` for the next step: the updated params and state replace the old ones.
pub fn advance(args: &Tensors, result: &StepResult) -> Tensors {
    let mut next = args.clone();
    for (name, tensor) in &result.updated {
        next.insert(name.clone(), tensor.clone());
    }
    next
}
