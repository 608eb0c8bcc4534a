//! A reader for Python pickles that hold plain data only: dicts, lists, tuples, strings,
//! bytes, integers, floats, booleans and `None` (what `pickle.dump` writes for a PyTorch
//! memory snapshot, protocols 2 to 5, and what torch's own C++ pickler writes for it).
//!
//! Why a reader of our own: a pickle is a program for a stack machine, and Python's
//! unpickler runs whatever it says, imports and calls included (`GLOBAL` names a function,
//! `REDUCE` calls it): opening an untrusted pickle with Python runs its code. This reader
//! knows only the opcodes that build plain containers and scalars. Every opcode that would
//! import, call or construct a Python object (`GLOBAL`, `STACK_GLOBAL`, `REDUCE`, `BUILD`,
//! `INST`, `OBJ`, `NEWOBJ`, `PERSID`, the extension registry, out-of-band buffers) is an
//! error naming the opcode and its byte offset ([`PickleError::PythonObject`]): memplan
//! never runs code from a pickle. Other opcodes it does not know are errors too.
//!
//! Invariants, for any input (tests/hostile_input.rs and the fuzzer hold them):
//! - no panic: every read is bounds-checked, every length is checked against what is left
//!   (a truncated or malformed pickle is an error with its byte offset);
//! - no recursion over values: containers are nodes of one flat arena ([`Pickle::nodes`])
//!   and a value names its node by index, so a pickle nesting a million levels deep, or
//!   holding a container that contains itself, costs nothing more than its bytes. The mark
//!   stack (the `MARK`s open at once) is bounded by [`MAX_MARKS`];
//! - memory in proportion to the input: each opcode pushes at most one value, a memo `GET`
//!   shares the memoized node (as Python does) instead of copying it, strings are shared
//!   (`Rc`), and the memo holds at most [`MAX_MEMO`] entries.
//!
//! Sharing is Python's: a container memoized and then filled (`EMPTY_DICT`, `MEMOIZE`,
//! `MARK` ... `SETITEMS`) is the same node wherever a `GET` names it. Readers of the tree
//! (src/formats/torch_snapshot) must therefore bound the work a shared node can multiply.

use std::collections::HashMap;
use std::rc::Rc;

use thiserror::Error;

/// The most `MARK`s open at once (a memory snapshot nests six deep).
pub const MAX_MARKS: usize = 1000;

/// The most entries the memo may hold.
pub const MAX_MEMO: usize = 1 << 26;

/// The newest pickle protocol this reader knows (Python 3.8+ writes 5 at most).
pub const HIGHEST_PROTOCOL: u8 = 5;

/// A container's index in [`Pickle::nodes`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct NodeId(pub u32);

/// One value of a pickle. Containers are nodes in the arena ([`Pickle::node`]).
#[derive(Clone, PartialEq, Debug)]
pub enum Value {
    None,
    Bool(bool),
    Int(i64),
    /// An integer outside `i64` (a pickle's integers have any size; its digits are not kept).
    BigInt,
    Float(f64),
    /// Text (invalid UTF-8, which Python's `surrogatepass` can write, is replaced by U+FFFD).
    Str(Rc<str>),
    /// `bytes` or `bytearray`.
    Bytes(Rc<[u8]>),
    List(NodeId),
    Tuple(NodeId),
    Dict(NodeId),
}

impl Value {
    /// What kind of value this is, for error messages (`a list`, `a string`).
    pub fn kind(&self) -> &'static str {
        match self {
            Value::None => "None",
            Value::Bool(_) => "a bool",
            Value::Int(_) | Value::BigInt => "an integer",
            Value::Float(_) => "a float",
            Value::Str(_) => "a string",
            Value::Bytes(_) => "bytes",
            Value::List(_) => "a list",
            Value::Tuple(_) => "a tuple",
            Value::Dict(_) => "a dict",
        }
    }
}

/// A container: the items of a list or tuple, or the (key, value) pairs of a dict in the
/// order they were set (a key set twice appears twice; the last one wins, as in Python).
#[derive(Clone, PartialEq, Debug)]
pub enum Node {
    Items(Vec<Value>),
    Pairs(Vec<(Value, Value)>),
}

/// A read pickle: the value `STOP` returned and the containers it (and anything else the
/// pickle built) refers to.
#[derive(Clone, PartialEq, Debug)]
pub struct Pickle {
    pub root: Value,
    pub nodes: Vec<Node>,
    /// The protocol its `PROTO` opcode declared (`None`: no `PROTO`, protocol 0 or 1).
    pub protocol: Option<u8>,
}

impl Pickle {
    /// The node `id` names (every id in a [`Pickle`] is one of its nodes).
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.0 as usize]
    }

    /// The items of a list or tuple; `None` for any other value.
    pub fn items(&self, value: &Value) -> Option<&[Value]> {
        match value {
            Value::List(id) | Value::Tuple(id) => match self.node(*id) {
                Node::Items(items) => Some(items),
                Node::Pairs(_) => None,
            },
            _ => None,
        }
    }

    /// The pairs of a dict; `None` for any other value.
    pub fn pairs(&self, value: &Value) -> Option<&[(Value, Value)]> {
        match value {
            Value::Dict(id) => match self.node(*id) {
                Node::Pairs(pairs) => Some(pairs),
                Node::Items(_) => None,
            },
            _ => None,
        }
    }
}

/// What is wrong with a pickle. Every variant names the byte offset of the opcode (or of
/// the data) at fault.
#[derive(Clone, PartialEq, Eq, Debug, Error)]
pub enum PickleError {
    /// The input ends before the pickle does (inside an opcode's argument, or before `STOP`).
    #[error("the pickle is truncated: it ends at byte {len} inside {what} starting at byte offset {offset}")]
    Truncated { offset: usize, len: usize, what: &'static str },
    /// An opcode that imports, calls or builds a Python object: never run.
    #[error(
        "opcode {name} (0x{opcode:02x}) at byte offset {offset} builds a Python object: this pickle holds Python objects, not a memory snapshot; memplan never runs code from a pickle"
    )]
    PythonObject { offset: usize, opcode: u8, name: &'static str },
    /// A pickle opcode plain containers do not need (sets, protocol 0's text forms).
    #[error("opcode {name} (0x{opcode:02x}) at byte offset {offset} is not one this reader knows (it reads dicts, lists, tuples, strings, bytes, numbers, booleans and None)")]
    Unsupported { offset: usize, opcode: u8, name: &'static str },
    /// A byte that is no pickle opcode at all.
    #[error("byte 0x{byte:02x} at byte offset {offset} is not a pickle opcode: the file is not a pickle, or it is damaged")]
    UnknownOpcode { offset: usize, byte: u8 },
    /// A protocol newer than [`HIGHEST_PROTOCOL`].
    #[error("byte offset {offset}: pickle protocol {version} is newer than this reader knows ({HIGHEST_PROTOCOL})")]
    Protocol { offset: usize, version: u8 },
    /// An opcode found too few values on the stack (or no `MARK` where it needs one).
    #[error("malformed pickle: {name} at byte offset {offset} finds {missing} on the stack")]
    Stack { offset: usize, name: &'static str, missing: &'static str },
    /// An opcode that adds to a container found something else below its operands.
    #[error("malformed pickle: {name} at byte offset {offset} adds to {found}, not to a {expected}")]
    NotAContainer { offset: usize, name: &'static str, found: &'static str, expected: &'static str },
    /// `DICT` or `SETITEMS` with an odd number of items after its `MARK`.
    #[error("malformed pickle: {name} at byte offset {offset} has an odd number of items ({count}) for its keys and values")]
    OddItems { offset: usize, name: &'static str, count: usize },
    /// A memo `GET` of an index nothing was `PUT` at.
    #[error("malformed pickle: GET at byte offset {offset} reads memo entry {index}, which was never stored")]
    MemoMissing { offset: usize, index: u64 },
    /// More than [`MAX_MEMO`] memo entries.
    #[error("byte offset {offset}: the pickle's memo holds more than {MAX_MEMO} entries")]
    MemoFull { offset: usize },
    /// More than [`MAX_MARKS`] `MARK`s open at once.
    #[error("byte offset {offset}: the pickle nests more than {MAX_MARKS} MARKs deep")]
    TooDeep { offset: usize },
    /// A length or memo index that does not fit (a negative `LONG4` length, a text index
    /// that is no number).
    #[error("malformed pickle: {what} at byte offset {offset}")]
    BadArgument { offset: usize, what: String },
    /// More containers than a `u32` counts (the input is far larger than any snapshot).
    #[error("byte offset {offset}: the pickle builds more than 2^32 containers")]
    TooManyNodes { offset: usize },
    /// An empty input.
    #[error("the file is empty: a pickle holds at least one opcode and STOP")]
    Empty,
}

/// The opcodes this reader knows, by byte: the name Python's `pickletools` gives it, and
/// whether it builds Python objects (such opcodes are refused; see the module docs).
fn opcode_name(byte: u8) -> Option<(&'static str, bool)> {
    Some(match byte {
        b'(' => ("MARK", false),
        b'.' => ("STOP", false),
        b'0' => ("POP", false),
        b'1' => ("POP_MARK", false),
        b'2' => ("DUP", false),
        b'F' => ("FLOAT", false),
        b'I' => ("INT", false),
        b'J' => ("BININT", false),
        b'K' => ("BININT1", false),
        b'L' => ("LONG", false),
        b'M' => ("BININT2", false),
        b'N' => ("NONE", false),
        b'P' => ("PERSID", true),
        b'Q' => ("BINPERSID", true),
        b'R' => ("REDUCE", true),
        b'S' => ("STRING", false),
        b'T' => ("BINSTRING", false),
        b'U' => ("SHORT_BINSTRING", false),
        b'V' => ("UNICODE", false),
        b'X' => ("BINUNICODE", false),
        b'a' => ("APPEND", false),
        b'b' => ("BUILD", true),
        b'c' => ("GLOBAL", true),
        b'd' => ("DICT", false),
        b'}' => ("EMPTY_DICT", false),
        b'e' => ("APPENDS", false),
        b'g' => ("GET", false),
        b'h' => ("BINGET", false),
        b'i' => ("INST", true),
        b'j' => ("LONG_BINGET", false),
        b'l' => ("LIST", false),
        b']' => ("EMPTY_LIST", false),
        b'o' => ("OBJ", true),
        b'p' => ("PUT", false),
        b'q' => ("BINPUT", false),
        b'r' => ("LONG_BINPUT", false),
        b's' => ("SETITEM", false),
        b't' => ("TUPLE", false),
        b')' => ("EMPTY_TUPLE", false),
        b'u' => ("SETITEMS", false),
        b'G' => ("BINFLOAT", false),
        0x80 => ("PROTO", false),
        0x81 => ("NEWOBJ", true),
        0x82 => ("EXT1", true),
        0x83 => ("EXT2", true),
        0x84 => ("EXT4", true),
        0x85 => ("TUPLE1", false),
        0x86 => ("TUPLE2", false),
        0x87 => ("TUPLE3", false),
        0x88 => ("NEWTRUE", false),
        0x89 => ("NEWFALSE", false),
        0x8a => ("LONG1", false),
        0x8b => ("LONG4", false),
        b'B' => ("BINBYTES", false),
        b'C' => ("SHORT_BINBYTES", false),
        0x8c => ("SHORT_BINUNICODE", false),
        0x8d => ("BINUNICODE8", false),
        0x8e => ("BINBYTES8", false),
        0x8f => ("EMPTY_SET", false),
        0x90 => ("ADDITEMS", false),
        0x91 => ("FROZENSET", false),
        0x92 => ("NEWOBJ_EX", true),
        0x93 => ("STACK_GLOBAL", true),
        0x94 => ("MEMOIZE", false),
        0x95 => ("FRAME", false),
        0x96 => ("BYTEARRAY8", false),
        0x97 => ("NEXT_BUFFER", true),
        0x98 => ("READONLY_BUFFER", true),
        _ => return None,
    })
}

/// The state of the stack machine.
struct Machine<'a> {
    bytes: &'a [u8],
    /// The next byte to read.
    pos: usize,
    /// The offset of the opcode being run.
    at: usize,
    name: &'static str,
    stack: Vec<Value>,
    /// The stack's length at each open `MARK`.
    marks: Vec<usize>,
    memo: HashMap<u64, Value>,
    nodes: Vec<Node>,
}

/// Reads a pickle (see the module docs for what it accepts).
pub fn parse(bytes: &[u8]) -> Result<Pickle, PickleError> {
    if bytes.is_empty() {
        return Err(PickleError::Empty);
    }
    let mut m = Machine { bytes, pos: 0, at: 0, name: "", stack: Vec::new(), marks: Vec::new(), memo: HashMap::new(), nodes: Vec::new() };
    let mut protocol = None;
    loop {
        m.at = m.pos;
        let Some(&byte) = bytes.get(m.pos) else {
            return Err(PickleError::Truncated { offset: m.at, len: bytes.len(), what: "the pickle (no STOP opcode)" });
        };
        m.pos += 1;
        let Some((name, object)) = opcode_name(byte) else {
            return Err(PickleError::UnknownOpcode { offset: m.at, byte });
        };
        m.name = name;
        if object {
            return Err(PickleError::PythonObject { offset: m.at, opcode: byte, name });
        }
        match byte {
            0x80 => {
                let version = m.take(1)?[0];
                if version > HIGHEST_PROTOCOL {
                    return Err(PickleError::Protocol { offset: m.at, version });
                }
                protocol = Some(version);
            }
            // FRAME: a length that only helps a reader buffer its input; the opcodes follow.
            0x95 => {
                m.take(8)?;
            }
            b'.' => {
                let root = m.pop("no value")?;
                return Ok(Pickle { root, nodes: m.nodes, protocol });
            }
            b'(' => {
                if m.marks.len() >= MAX_MARKS {
                    return Err(PickleError::TooDeep { offset: m.at });
                }
                m.marks.push(m.stack.len());
            }
            b'0' => {
                if m.stack.len() > m.base() {
                    m.stack.pop();
                } else {
                    m.pop_mark()?;
                }
            }
            b'1' => {
                m.pop_mark()?;
            }
            b'2' => {
                let top = m.top()?.clone();
                m.push(top);
            }
            b'N' => m.push(Value::None),
            0x88 => m.push(Value::Bool(true)),
            0x89 => m.push(Value::Bool(false)),
            b'J' => {
                let b = m.take(4)?;
                m.push(Value::Int(i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))));
            }
            b'K' => {
                let b = m.take(1)?;
                m.push(Value::Int(i64::from(b[0])));
            }
            b'M' => {
                let b = m.take(2)?;
                m.push(Value::Int(i64::from(u16::from_le_bytes([b[0], b[1]]))));
            }
            0x8a => {
                let n = usize::from(m.take(1)?[0]);
                let digits = m.take(n)?;
                m.push(long(digits));
            }
            0x8b => {
                let b = m.take(4)?;
                let n = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                let n = usize::try_from(n).map_err(|_| PickleError::BadArgument { offset: m.at, what: format!("LONG4 with a negative length {n}") })?;
                let digits = m.take(n)?;
                m.push(long(digits));
            }
            b'G' => {
                let b = m.take(8)?;
                m.push(Value::Float(f64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])));
            }
            0x8c | b'X' | 0x8d => {
                let n = m.length(byte)?;
                let text = String::from_utf8_lossy(m.take(n)?);
                m.push(Value::Str(Rc::from(text.as_ref())));
            }
            b'C' | b'B' | 0x8e | 0x96 => {
                let n = m.length(byte)?;
                let data = m.take(n)?;
                m.push(Value::Bytes(Rc::from(data)));
            }
            b']' => {
                let id = m.node(Node::Items(Vec::new()))?;
                m.push(Value::List(id));
            }
            b')' => {
                let id = m.node(Node::Items(Vec::new()))?;
                m.push(Value::Tuple(id));
            }
            b'}' => {
                let id = m.node(Node::Pairs(Vec::new()))?;
                m.push(Value::Dict(id));
            }
            b'l' => {
                let items = m.pop_mark()?;
                let id = m.node(Node::Items(items))?;
                m.push(Value::List(id));
            }
            b't' => {
                let items = m.pop_mark()?;
                let id = m.node(Node::Items(items))?;
                m.push(Value::Tuple(id));
            }
            0x85..=0x87 => {
                let n = usize::from(byte - 0x84);
                if m.stack.len() < m.base() + n {
                    return Err(m.stack_error("too few values"));
                }
                let items = m.stack.split_off(m.stack.len() - n);
                let id = m.node(Node::Items(items))?;
                m.push(Value::Tuple(id));
            }
            b'd' => {
                let items = m.pop_mark()?;
                let pairs = m.pairs(items)?;
                let id = m.node(Node::Pairs(pairs))?;
                m.push(Value::Dict(id));
            }
            b'a' => {
                let value = m.pop("no value to append")?;
                m.items_of_top()?.push(value);
            }
            b'e' => {
                let items = m.pop_mark()?;
                m.items_of_top()?.extend(items);
            }
            b's' => {
                let value = m.pop("no value to set")?;
                let key = m.pop("no key to set")?;
                m.pairs_of_top()?.push((key, value));
            }
            b'u' => {
                let items = m.pop_mark()?;
                let pairs = m.pairs(items)?;
                m.pairs_of_top()?.extend(pairs);
            }
            b'q' => {
                let index = u64::from(m.take(1)?[0]);
                m.put(index)?;
            }
            b'r' => {
                let b = m.take(4)?;
                m.put(u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])))?;
            }
            b'p' => {
                let index = m.text_index()?;
                m.put(index)?;
            }
            0x94 => {
                let index = m.memo.len() as u64;
                m.put(index)?;
            }
            b'h' => {
                let index = u64::from(m.take(1)?[0]);
                m.get(index)?;
            }
            b'j' => {
                let b = m.take(4)?;
                m.get(u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])))?;
            }
            b'g' => {
                let index = m.text_index()?;
                m.get(index)?;
            }
            _ => return Err(PickleError::Unsupported { offset: m.at, opcode: byte, name }),
        }
    }
}

/// A `LONG1`/`LONG4` integer: little-endian two's complement digits.
fn long(digits: &[u8]) -> Value {
    let Some(&last) = digits.last() else { return Value::Int(0) };
    let negative = last & 0x80 != 0;
    let fill = if negative { 0xff } else { 0 };
    // Digits past the eighth must all be sign extension, else the value needs more than 64 bits.
    if digits.len() > 8 && digits[8..].iter().any(|&b| b != fill) {
        return Value::BigInt;
    }
    let mut bytes = [fill; 8];
    let n = digits.len().min(8);
    bytes[..n].copy_from_slice(&digits[..n]);
    let value = i64::from_le_bytes(bytes);
    // Eight or more digits whose eighth byte's sign differs from the value's: outside i64.
    if digits.len() > 8 && (value < 0) != negative {
        return Value::BigInt;
    }
    Value::Int(value)
}

impl<'a> Machine<'a> {
    /// The next `n` bytes.
    fn take(&mut self, n: usize) -> Result<&'a [u8], PickleError> {
        let end = self.pos.checked_add(n).filter(|&end| end <= self.bytes.len());
        let Some(end) = end else {
            return Err(PickleError::Truncated { offset: self.at, len: self.bytes.len(), what: self.name });
        };
        let bytes: &'a [u8] = self.bytes;
        let slice = &bytes[self.pos..end];
        self.pos = end;
        Ok(slice)
    }

    /// The length argument of a string or bytes opcode (1, 4 or 8 bytes, by opcode).
    fn length(&mut self, opcode: u8) -> Result<usize, PickleError> {
        let width = match opcode {
            0x8c | b'C' => 1,
            b'X' | b'B' => 4,
            _ => 8,
        };
        let b = self.take(width)?;
        let mut le = [0u8; 8];
        le[..width].copy_from_slice(b);
        let n = u64::from_le_bytes(le);
        // A length past the input is a truncation (usize::MAX makes `take` say so).
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }

    /// The decimal index of a text `PUT`/`GET`, up to its newline.
    fn text_index(&mut self) -> Result<u64, PickleError> {
        let rest = &self.bytes[self.pos..];
        let Some(newline) = rest.iter().take(24).position(|&b| b == b'\n') else {
            return Err(if rest.len() < 24 {
                PickleError::Truncated { offset: self.at, len: self.bytes.len(), what: self.name }
            } else {
                PickleError::BadArgument { offset: self.at, what: format!("{} without a short decimal index and a newline", self.name) }
            });
        };
        let text = &rest[..newline];
        let index = std::str::from_utf8(text).ok().and_then(|t| t.parse::<u64>().ok());
        let index = index.ok_or_else(|| PickleError::BadArgument {
            offset: self.at,
            what: format!("{} with the index `{}`, not a number", self.name, String::from_utf8_lossy(text)),
        })?;
        self.pos += newline + 1;
        Ok(index)
    }

    /// Where the values after the innermost open `MARK` start.
    fn base(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }

    fn push(&mut self, value: Value) {
        self.stack.push(value);
    }

    fn stack_error(&self, missing: &'static str) -> PickleError {
        PickleError::Stack { offset: self.at, name: self.name, missing }
    }

    /// The top value (after the innermost `MARK`).
    fn pop(&mut self, missing: &'static str) -> Result<Value, PickleError> {
        if self.stack.len() <= self.base() {
            return Err(self.stack_error(missing));
        }
        self.stack.pop().ok_or_else(|| self.stack_error(missing))
    }

    fn top(&self) -> Result<&Value, PickleError> {
        if self.stack.len() <= self.base() {
            return Err(self.stack_error("no value"));
        }
        self.stack.last().ok_or_else(|| self.stack_error("no value"))
    }

    /// The values after the innermost `MARK`, which is closed.
    fn pop_mark(&mut self) -> Result<Vec<Value>, PickleError> {
        let Some(mark) = self.marks.pop() else { return Err(self.stack_error("no MARK")) };
        Ok(self.stack.split_off(mark))
    }

    fn pairs(&self, items: Vec<Value>) -> Result<Vec<(Value, Value)>, PickleError> {
        if !items.len().is_multiple_of(2) {
            return Err(PickleError::OddItems { offset: self.at, name: self.name, count: items.len() });
        }
        let mut pairs = Vec::with_capacity(items.len() / 2);
        let mut items = items.into_iter();
        while let (Some(key), Some(value)) = (items.next(), items.next()) {
            pairs.push((key, value));
        }
        Ok(pairs)
    }

    /// A new node.
    fn node(&mut self, node: Node) -> Result<NodeId, PickleError> {
        let id = u32::try_from(self.nodes.len()).map_err(|_| PickleError::TooManyNodes { offset: self.at })?;
        self.nodes.push(node);
        Ok(NodeId(id))
    }

    /// The items of the list on top of the stack (`APPEND`, `APPENDS`).
    fn items_of_top(&mut self) -> Result<&mut Vec<Value>, PickleError> {
        let (at, name) = (self.at, self.name);
        match self.top()?.clone() {
            Value::List(id) => match &mut self.nodes[id.0 as usize] {
                Node::Items(items) => Ok(items),
                Node::Pairs(_) => Err(PickleError::NotAContainer { offset: at, name, found: "a dict", expected: "list" }),
            },
            other => Err(PickleError::NotAContainer { offset: at, name, found: other.kind(), expected: "list" }),
        }
    }

    /// The pairs of the dict on top of the stack (`SETITEM`, `SETITEMS`).
    fn pairs_of_top(&mut self) -> Result<&mut Vec<(Value, Value)>, PickleError> {
        let (at, name) = (self.at, self.name);
        match self.top()?.clone() {
            Value::Dict(id) => match &mut self.nodes[id.0 as usize] {
                Node::Pairs(pairs) => Ok(pairs),
                Node::Items(_) => Err(PickleError::NotAContainer { offset: at, name, found: "a list", expected: "dict" }),
            },
            other => Err(PickleError::NotAContainer { offset: at, name, found: other.kind(), expected: "dict" }),
        }
    }

    fn put(&mut self, index: u64) -> Result<(), PickleError> {
        let top = self.top()?.clone();
        if self.memo.len() >= MAX_MEMO && !self.memo.contains_key(&index) {
            return Err(PickleError::MemoFull { offset: self.at });
        }
        self.memo.insert(index, top);
        Ok(())
    }

    fn get(&mut self, index: u64) -> Result<(), PickleError> {
        let value = self.memo.get(&index).cloned().ok_or(PickleError::MemoMissing { offset: self.at, index })?;
        self.push(value);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_integers_read_as_python_does() {
        // pickle.dumps(n, 2)'s LONG1 digits for a few n.
        assert_eq!(long(&[]), Value::Int(0));
        assert_eq!(long(&[0xff, 0x00]), Value::Int(255));
        assert_eq!(long(&[0x00, 0x80]), Value::Int(-32768));
        assert_eq!(long(&[0xff; 8]), Value::Int(-1));
        assert_eq!(long(&[0, 0, 0, 0, 0, 0, 0, 0x80]), Value::Int(i64::MIN));
        // 2^63 needs a ninth byte: 00 .. 80 00.
        assert_eq!(long(&[0, 0, 0, 0, 0, 0, 0, 0x80, 0]), Value::BigInt);
        // -2^63 written with a redundant sign byte is still i64::MIN.
        assert_eq!(long(&[0, 0, 0, 0, 0, 0, 0, 0x80, 0xff]), Value::Int(i64::MIN));
        assert_eq!(long(&[1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]), Value::Int(1));
        assert_eq!(long(&[0, 0, 0, 0, 0, 0, 0, 0, 1]), Value::BigInt);
    }

    #[test]
    fn a_memoized_container_filled_later_is_shared() {
        // pickle.dumps({'a': [1]}, 4) without the frame: the list is memoized empty, then
        // filled; a second reference by GET sees it filled.
        let bytes = b"\x80\x04}\x94(\x8c\x01a\x94]\x94K\x01a\x8c\x01b\x94h\x02u.";
        let pickle = parse(bytes).unwrap();
        let pairs = pickle.pairs(&pickle.root).unwrap();
        assert_eq!(pairs.len(), 2);
        assert_eq!(pairs[0].1, pairs[1].1);
        assert_eq!(pickle.items(&pairs[1].1).unwrap(), &[Value::Int(1)]);
    }

    #[test]
    fn objects_are_refused_before_anything_runs() {
        // GLOBAL 'os system' then REDUCE: refused at the GLOBAL, offset 2.
        let error = parse(b"\x80\x02cos\nsystem\n(S'echo hi'\ntR.").unwrap_err();
        assert_eq!(error, PickleError::PythonObject { offset: 2, opcode: b'c', name: "GLOBAL" });
        assert!(error.to_string().contains("memplan never runs code from a pickle"), "{error}");
    }
}
