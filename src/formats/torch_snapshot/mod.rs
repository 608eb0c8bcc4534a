//! PyTorch's CUDA memory snapshots (`torch.cuda.memory._dump_snapshot("x.pickle")` after
//! `_record_memory_history()`, the file https://pytorch.org/memory_viz reads), read with
//! memplan's own pickle reader (`formats::pickle`: plain data only, never code).
//!
//! The file is a pickled dict (torch/cuda/memory.py `_snapshot`, written by
//! torch/csrc/cuda/memory_snapshot.cpp and torch/csrc/cuda/Module.cpp):
//! - `segments`: what the caching allocator holds at the moment of the snapshot, one dict
//!   per segment (`device`, `address`, `total_size`, `segment_type` 'small'/'large',
//!   `is_expandable`, ...) with its `blocks` (`address`, `size`, `requested_size`, `state`
//!   'active_allocated'/'active_pending_free'/'inactive', `frames`);
//! - `device_traces`: per device, the allocator's recent actions, oldest first (`action`
//!   'alloc'/'free_requested'/'free_completed'/'segment_alloc'/'segment_free'/
//!   'segment_map'/'segment_unmap'/'snapshot'/'oom', `addr`, `size`, `time_us`, `frames`);
//! - `allocator_settings`, `external_annotations`, `host_segments`, ...: not read.
//!
//! A frame is `{filename, line, name}`, innermost first. Decoding is tolerant of what is
//! optional or newer (missing `time_us`, `requested_size`, block addresses (then each block
//! starts where the previous one ends, as the C++ writes them), frames; unknown actions and
//! keys are skipped; torch 1.13's bare list of segments is read as `segments`) and strict
//! about what the analysis needs: a memory action without a non-negative `addr` and `size`,
//! a block state it does not know, a field of the wrong type, or a range past 2^64 is an
//! error naming the field's path (`device_traces[0][17].size`).
//!
//! Work is bounded by the input, whatever its sharing: a pickle may reference one node from
//! many places (torch's own snapshots share frames), so stack frames are decoded once per
//! node ([`Snapshot::stacks`]), and every dict entry and list item visited is charged to a
//! budget proportional to the file's size; a file whose shared references would multiply
//! the work past it ([`SnapshotError::Sharing`]) is refused rather than walked.
//!
//! `timeline.rs` turns a snapshot into allocated and reserved bytes over time, the peaks,
//! what is live there, the fragmentation and the ideal placement; `render.rs` writes the
//! report (text, JSON); `picture.rs` the files of `memplan snapshot --emit`.

pub mod picture;
pub mod render;
pub mod timeline;

use std::collections::HashMap;
use std::rc::Rc;

use thiserror::Error;

use crate::formats::pickle::{self, NodeId, Pickle, PickleError, Value};

/// A stack's index in [`Snapshot::stacks`]; stack 0 is the empty one.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct StackId(pub u32);

/// One frame of a stack trace.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Frame {
    pub filename: Rc<str>,
    pub line: i64,
    pub name: Rc<str>,
}

impl Frame {
    /// Whether the frame is the user's own Python code: a `.py` file outside the `torch`
    /// package (torch's internals, C++ frames and generated code are not).
    pub fn is_user(&self) -> bool {
        self.filename.ends_with(".py") && !self.filename.split(['/', '\\']).any(|part| part == "torch")
    }
}

/// The pool a segment serves (PyTorch's `segment_type`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Pool {
    /// Requests of at most 1 MiB, in 2 MiB segments.
    Small,
    /// Larger requests.
    Large,
    /// Not said (a segment the trace shows but the snapshot no longer holds, or an old file).
    Unknown,
}

impl Pool {
    pub fn name(self) -> &'static str {
        match self {
            Pool::Small => "small",
            Pool::Large => "large",
            Pool::Unknown => "?",
        }
    }
}

/// A block's state at the snapshot.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum BlockState {
    /// `active_allocated`: a tensor holds it.
    Allocated,
    /// `active_pending_free` (`active_awaiting_free` in torch's docs): freed, but still in
    /// use on another stream.
    PendingFree,
    /// `inactive`: free, cached for reuse.
    Inactive,
}

/// One block of a segment.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Block {
    pub address: u64,
    /// The allocator's block bytes (requests rounded up).
    pub size: u64,
    /// The bytes asked for (absent in old files).
    pub requested_size: Option<u64>,
    pub state: BlockState,
    pub frames: StackId,
}

/// One segment (a `cudaMalloc`, or an expandable segment's mapped pages) at the snapshot.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Segment {
    pub device: i64,
    pub address: u64,
    pub total_size: u64,
    pub pool: Pool,
    pub expandable: bool,
    pub blocks: Vec<Block>,
}

/// What a trace event did.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Action {
    /// A block handed to a tensor.
    Alloc,
    /// The tensor freed it (it may still be in use on another stream).
    FreeRequested,
    /// The block is free for reuse (`free` in old files).
    FreeCompleted,
    /// `cudaMalloc` of a new segment.
    SegmentAlloc,
    /// `cudaFree` of a segment.
    SegmentFree,
    /// Pages mapped into an expandable segment.
    SegmentMap,
    /// Pages unmapped from an expandable segment.
    SegmentUnmap,
    /// A snapshot was taken.
    Snapshot,
    /// The allocator ran out of memory (`size`: the request; `device_free`: what CUDA said
    /// was free).
    Oom,
    /// An action memplan does not use (`annotate`, newer ones).
    Other,
}

impl Action {
    /// Whether the action needs `addr` and `size`.
    fn is_memory(self) -> bool {
        !matches!(self, Action::Snapshot | Action::Oom | Action::Other)
    }
}

/// One event of a device's trace.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Event {
    pub action: Action,
    /// 0 where the action has none.
    pub addr: u64,
    pub size: u64,
    pub time_us: Option<i64>,
    /// What CUDA reported free (`oom` only).
    pub device_free: Option<u64>,
    pub frames: StackId,
}

/// A decoded snapshot.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub segments: Vec<Segment>,
    /// Whether the file has a `segments` list at all.
    pub has_segments: bool,
    /// `device_traces[d]`: device d's events, oldest first.
    pub traces: Vec<Vec<Event>>,
    /// Every distinct stack; [`StackId`] indexes it (0: no frames).
    pub stacks: Vec<Vec<Frame>>,
    /// The pickle protocol the file declares.
    pub protocol: Option<u8>,
}

impl Snapshot {
    pub fn stack(&self, id: StackId) -> &[Frame] {
        &self.stacks[id.0 as usize]
    }
}

/// What is wrong with a snapshot file.
#[derive(Debug, Error)]
pub enum SnapshotError {
    /// The file is not a pickle this reader accepts.
    #[error(transparent)]
    Pickle(#[from] PickleError),
    /// The pickle holds something other than a memory snapshot.
    #[error("not a PyTorch memory snapshot: {0}")]
    NotASnapshot(String),
    /// A field is missing or of the wrong kind (`path`: where, `device_traces[0][3].size`).
    #[error("`{path}`: {what}")]
    Field { path: String, what: String },
    /// Shared references would multiply the work of reading past what the file's size
    /// allows (a hostile file: torch's snapshots share only frames).
    #[error("the pickle's shared references repeat its records more than a file of {bytes} bytes holds: not a memory snapshot")]
    Sharing { bytes: usize },
    /// `--device N` names a device the snapshot has no data for.
    #[error("the snapshot has no events or segments for device {asked}{}", devices_with_data(.devices))]
    Device { asked: usize, devices: Vec<usize> },
    /// Bytes that add up past 2^64 - 1 (a hostile or damaged file).
    #[error("{0} add up to more than 2^64 - 1 bytes")]
    TooLarge(String),
}

fn devices_with_data(devices: &[usize]) -> String {
    match devices {
        [] => " (it has none for any device)".to_string(),
        _ => format!(" (devices with data: {})", devices.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")),
    }
}

/// Reads a snapshot file's bytes.
pub fn parse(bytes: &[u8]) -> Result<Snapshot, SnapshotError> {
    let pickle = pickle::parse(bytes)?;
    let budget = (bytes.len() as u64).saturating_mul(WORK_PER_BYTE).saturating_add(BASE_WORK);
    let mut d = Decoder { pickle: &pickle, budget, bytes: bytes.len(), stacks: vec![Vec::new()], stack_ids: HashMap::new() };
    let root = pickle.root.clone();
    let (segments_value, traces_value, has_segments) = match &root {
        Value::Dict(_) => {
            let pairs = pickle.pairs(&root).unwrap_or(&[]);
            d.charge(pairs.len())?;
            let find = |key: &str| pairs.iter().rev().find(|(k, _)| matches!(k, Value::Str(s) if &**s == key)).map(|(_, v)| v.clone());
            let (segments, traces) = (find("segments"), find("device_traces"));
            if segments.is_none() && traces.is_none() {
                let keys: Vec<String> =
                    pairs.iter().take(8).map(|(k, _)| if let Value::Str(s) = k { format!("`{s}`") } else { k.kind().to_string() }).collect();
                return Err(SnapshotError::NotASnapshot(format!(
                    "a dict with neither `segments` nor `device_traces` (its keys: {}{})",
                    if keys.is_empty() { "none".to_string() } else { keys.join(", ") },
                    if pairs.len() > 8 { ", ..." } else { "" }
                )));
            }
            let has = segments.is_some();
            (segments, traces, has)
        }
        // torch 1.13's `memory_snapshot()`: the segments alone.
        Value::List(_) => (Some(root.clone()), None, true),
        other => return Err(SnapshotError::NotASnapshot(format!("the pickle holds {}, not a dict", other.kind()))),
    };
    let mut segments = Vec::new();
    if let Some(value) = &segments_value {
        for (i, segment) in d.list(value, "segments")?.iter().enumerate() {
            segments.push(d.segment(segment, i)?);
        }
    }
    let mut traces = Vec::new();
    if let Some(value) = &traces_value {
        for (device, trace) in d.list(value, "device_traces")?.iter().enumerate() {
            let path = || format!("device_traces[{device}]");
            let events = d.list(trace, &path())?;
            let mut decoded = Vec::with_capacity(events.len());
            for (i, event) in events.iter().enumerate() {
                decoded.push(d.event(event, device, i)?);
            }
            traces.push(decoded);
        }
    }
    Ok(Snapshot { segments, has_segments, traces, stacks: d.stacks, protocol: pickle.protocol })
}

/// Work allowed per byte of input (dict entries and list items visited), and besides.
const WORK_PER_BYTE: u64 = 32;
const BASE_WORK: u64 = 1 << 20;

struct Decoder<'p> {
    pickle: &'p Pickle,
    /// Work left (see the module docs).
    budget: u64,
    bytes: usize,
    stacks: Vec<Vec<Frame>>,
    /// The stack each frames list node was decoded to.
    stack_ids: HashMap<NodeId, StackId>,
}

/// The fields of one dict record, looked up by name (the last entry of a key wins).
struct Record<'p> {
    pairs: &'p [(Value, Value)],
    path: String,
}

impl<'p> Record<'p> {
    fn get(&self, key: &str) -> Option<&'p Value> {
        self.pairs.iter().rev().find(|(k, _)| matches!(k, Value::Str(s) if &**s == key)).map(|(_, v)| v).filter(|v| **v != Value::None)
    }

    fn error(&self, key: &str, what: impl Into<String>) -> SnapshotError {
        SnapshotError::Field { path: format!("{}.{key}", self.path), what: what.into() }
    }

    /// A non-negative integer field that must be there.
    fn bytes(&self, key: &str) -> Result<u64, SnapshotError> {
        self.optional_bytes(key)?.ok_or_else(|| self.error(key, "missing (a non-negative integer is needed here)"))
    }

    /// A non-negative integer field that may be absent.
    fn optional_bytes(&self, key: &str) -> Result<Option<u64>, SnapshotError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Int(n)) if *n >= 0 => Ok(Some(*n as u64)),
            Some(Value::Int(n)) => Err(self.error(key, format!("{n} is negative; a non-negative integer is needed here"))),
            Some(Value::BigInt) => Err(self.error(key, "an integer past 2^63 - 1")),
            Some(other) => Err(self.error(key, format!("expected a non-negative integer, found {}", other.kind()))),
        }
    }

    /// An integer field that may be absent (any sign).
    fn optional_int(&self, key: &str) -> Result<Option<i64>, SnapshotError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Int(n)) => Ok(Some(*n)),
            Some(other) => Err(self.error(key, format!("expected an integer, found {}", other.kind()))),
        }
    }

    fn optional_str(&self, key: &str) -> Result<Option<&'p Rc<str>>, SnapshotError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Str(s)) => Ok(Some(s)),
            Some(other) => Err(self.error(key, format!("expected a string, found {}", other.kind()))),
        }
    }

    fn optional_bool(&self, key: &str) -> Result<Option<bool>, SnapshotError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(Value::Int(n)) => Ok(Some(*n != 0)),
            Some(other) => Err(self.error(key, format!("expected a bool, found {}", other.kind()))),
        }
    }
}

impl<'p> Decoder<'p> {
    fn charge(&mut self, work: usize) -> Result<(), SnapshotError> {
        self.budget = self.budget.checked_sub(work as u64).ok_or(SnapshotError::Sharing { bytes: self.bytes })?;
        Ok(())
    }

    fn list(&mut self, value: &Value, path: &str) -> Result<&'p [Value], SnapshotError> {
        let pickle = self.pickle;
        match value {
            Value::List(_) | Value::Tuple(_) => {
                let items = pickle.items(value).unwrap_or(&[]);
                self.charge(items.len())?;
                Ok(items)
            }
            other => Err(SnapshotError::Field { path: path.to_string(), what: format!("expected a list, found {}", other.kind()) }),
        }
    }

    /// A dict's fields; each lookup in it is charged its size, once per field read
    /// ([`FIELD_READS`]), up front.
    fn record(&mut self, value: &Value, path: String) -> Result<Record<'p>, SnapshotError> {
        let pickle = self.pickle;
        match pickle.pairs(value) {
            Some(pairs) => {
                self.charge(pairs.len().saturating_mul(FIELD_READS))?;
                Ok(Record { pairs, path })
            }
            None => Err(SnapshotError::Field { path, what: format!("expected a dict, found {}", value.kind()) }),
        }
    }

    fn segment(&mut self, value: &Value, i: usize) -> Result<Segment, SnapshotError> {
        let r = self.record(value, format!("segments[{i}]"))?;
        let address = r.bytes("address")?;
        let total_size = r.bytes("total_size")?;
        if address.checked_add(total_size).is_none() {
            return Err(r.error("total_size", format!("address {address:#x} + {total_size} bytes ends past 2^64")));
        }
        let pool = match r.optional_str("segment_type")?.map(|s| &**s) {
            Some("small") => Pool::Small,
            Some("large") => Pool::Large,
            _ => Pool::Unknown,
        };
        let device = r.optional_int("device")?.unwrap_or(0);
        let expandable = r.optional_bool("is_expandable")?.unwrap_or(false);
        let mut blocks = Vec::new();
        if let Some(list) = r.get("blocks") {
            let path = format!("{}.blocks", r.path);
            let items = self.list(list, &path)?;
            let mut next = address;
            for (j, block) in items.iter().enumerate() {
                let b = self.record(block, format!("{path}[{j}]"))?;
                let size = b.bytes("size")?;
                let at = b.optional_bytes("address")?.unwrap_or(next);
                next = at.checked_add(size).ok_or_else(|| b.error("size", format!("address {at:#x} + {size} bytes ends past 2^64")))?;
                let state = match b.optional_str("state")?.map(|s| &**s) {
                    Some("active_allocated") => BlockState::Allocated,
                    Some("active_pending_free" | "active_awaiting_free") => BlockState::PendingFree,
                    Some("inactive") => BlockState::Inactive,
                    Some(other) => {
                        return Err(b.error(
                            "state",
                            format!("`{other}` is not a block state (active_allocated, active_pending_free, inactive)"),
                        ));
                    }
                    None => return Err(b.error("state", "missing (active_allocated, active_pending_free or inactive)")),
                };
                let requested_size = b.optional_bytes("requested_size")?;
                let frames = self.frames(&b)?;
                blocks.push(Block { address: at, size, requested_size, state, frames });
            }
        }
        Ok(Segment { device, address, total_size, pool, expandable, blocks })
    }

    fn event(&mut self, value: &Value, device: usize, i: usize) -> Result<Event, SnapshotError> {
        let r = self.record(value, format!("device_traces[{device}][{i}]"))?;
        let action = match r.optional_str("action")?.map(|s| &**s) {
            Some("alloc") => Action::Alloc,
            Some("free_requested") => Action::FreeRequested,
            Some("free_completed" | "free") => Action::FreeCompleted,
            Some("segment_alloc") => Action::SegmentAlloc,
            Some("segment_free") => Action::SegmentFree,
            Some("segment_map") => Action::SegmentMap,
            Some("segment_unmap") => Action::SegmentUnmap,
            Some("snapshot") => Action::Snapshot,
            Some("oom") => Action::Oom,
            Some(_) => Action::Other,
            None => return Err(r.error("action", "missing")),
        };
        let (addr, size) = if action.is_memory() {
            let (addr, size) = (r.bytes("addr")?, r.bytes("size")?);
            if addr.checked_add(size).is_none() {
                return Err(r.error("size", format!("addr {addr:#x} + {size} bytes ends past 2^64")));
            }
            (addr, size)
        } else {
            (r.optional_bytes("addr")?.unwrap_or(0), r.optional_bytes("size")?.unwrap_or(0))
        };
        let device_free = if action == Action::Oom { r.optional_bytes("device_free")? } else { None };
        let time_us = r.optional_int("time_us")?;
        let frames = self.frames(&r)?;
        Ok(Event { action, addr, size, time_us, device_free, frames })
    }

    /// The `frames` of a record, decoded once per list node.
    fn frames(&mut self, r: &Record<'p>) -> Result<StackId, SnapshotError> {
        let Some(value) = r.get("frames") else { return Ok(StackId(0)) };
        let node = match value {
            Value::List(id) | Value::Tuple(id) => *id,
            other => return Err(r.error("frames", format!("expected a list, found {}", other.kind()))),
        };
        if let Some(&id) = self.stack_ids.get(&node) {
            return Ok(id);
        }
        let path = format!("{}.frames", r.path);
        let items = self.list(value, &path)?;
        let mut stack = Vec::with_capacity(items.len());
        for (k, frame) in items.iter().enumerate() {
            let f = self.record(frame, format!("{path}[{k}]"))?;
            let unknown = || Rc::from("??");
            let filename = f.optional_str("filename")?.cloned().unwrap_or_else(unknown);
            let name = f.optional_str("name")?.cloned().unwrap_or_else(unknown);
            let line = f.optional_int("line")?.unwrap_or(0);
            stack.push(Frame { filename, line, name });
        }
        let id = if stack.is_empty() {
            StackId(0)
        } else {
            let id = StackId(u32::try_from(self.stacks.len()).map_err(|_| SnapshotError::Sharing { bytes: self.bytes })?);
            self.stacks.push(stack);
            id
        };
        self.stack_ids.insert(node, id);
        Ok(id)
    }
}

/// The most fields read from one record (each read scans it once).
const FIELD_READS: usize = 12;
