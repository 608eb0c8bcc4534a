//! The op table: one row per op, the single place that says what an op is.
//!
//! A row ([`OpDef`]) gives an op's IR name, its inputs and outputs (names used in docs and
//! errors), its attributes with defaults, its class (forward, backward, optimizer), its
//! type rule (output types from input types and attributes), its FLOPs, and its memory
//! behaviour: whether its output is a *view* of an input (and how the view's layout
//! follows from the input's), over which inputs it *may* write its outputs in place, which
//! inputs it reads element by element (*pointwise*), which inputs hold indices and what
//! bounds them, how `memplan run` seeds the params it reads, and the random stream it
//! draws from. Code elsewhere reads these facts from the row; it names an `OpKind` only to
//! say what the op *does* (its gradient rule, its kernels), in exhaustive matches
//! (`tests/architecture.rs` holds that line).
//!
//! Rows live in family files beside their type rules, FLOPs functions and typed attribute
//! views (`elementwise`, `shape`, `linalg`, `attention`, `nn`, `conv`, `resample`,
//! `optim`, `dropout`, `extern`; shared helpers in `rules`), and are written with
//! `OpDef::new` and builder methods naming only what differs from the defaults.
//! `table.rs` lists them, one `Variant = family::ROW` line per op, which makes both
//! [`OpKind`] and [`OPS`] in one order. Adding an op: docs/ARCHITECTURE.md, "A new op".
//!
//! Gradient rules live with autodiff, not in this table, so that the IR depends on nothing
//! above it: the match there names every `OpKind`, so a new op does not compile until it
//! has been given a rule or declared not differentiable.
//!
//! Invariant: `OPS[k as usize].kind == k` for every `OpKind` (a test checks it), so
//! [`OpKind::def`] is an array index.

use std::fmt;

use crate::ir::types::{DType, TensorType};


impl OpKind {
    /// Whether this is an op memplan plans but cannot execute (`extern`, `extern_view`,
    /// `extern_backward`).
    pub fn is_extern(self) -> bool {
        matches!(self, OpKind::Extern | OpKind::ExternView | OpKind::ExternBackward)
    }
}

/// The row of the op spelled `name`, if any.
pub fn def_named(name: &str) -> Option<&'static OpDef> {
    OpKind::from_name(name).map(OpKind::def)
}

impl OpKind {
    /// This op's row.
    pub fn def(self) -> &'static OpDef {
        &OPS[self as usize]
    }

    /// The IR spelling.
    pub fn name(self) -> &'static str {
        self.def().name
    }

    /// The op spelled `name`, if any.
    pub fn from_name(name: &str) -> Option<OpKind> {
        // A map, not a scan of the table: once per op of the step (a million in the
        // largest steps memplan plans).
        static BY_NAME: std::sync::OnceLock<std::collections::HashMap<&'static str, OpKind>> = std::sync::OnceLock::new();
        BY_NAME.get_or_init(|| OPS.iter().map(|row| (row.name, row.kind)).collect()).get(name).copied()
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What part of a training step an op belongs to; reports class values by it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum OpClass {
    /// Forward computation, including the loss and constants.
    Forward,
    /// A gradient computation (`*_backward`).
    Backward,
    /// An optimizer update: its outputs are new params and new state.
    Optimizer,
}

/// An attribute value.
#[derive(Clone, PartialEq, Debug)]
pub enum Attr {
    Int(i64),
    Float(f64),
    Bool(bool),
    Ints(Vec<i64>),
    DType(DType),
    /// Text (`target="aten::cumsum"`): only `extern` ops have one.
    Str(String),
}

/// The kind of value an attribute takes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AttrKind {
    Int,
    Float,
    Bool,
    Ints,
    DType,
    Str,
}

impl AttrKind {
    /// How the IR writes a value of this kind, for error messages.
    pub fn describe(self) -> &'static str {
        match self {
            AttrKind::Int => "an integer",
            AttrKind::Float => "a number",
            AttrKind::Bool => "true or false",
            AttrKind::Ints => "a list of integers like [0, 1]",
            AttrKind::DType => "a dtype (f32, f16, bf16, i32, i64, bool)",
            AttrKind::Str => "a string in quotes",
        }
    }
}

impl Attr {
    pub fn kind(&self) -> AttrKind {
        match self {
            Attr::Int(_) => AttrKind::Int,
            Attr::Float(_) => AttrKind::Float,
            Attr::Bool(_) => AttrKind::Bool,
            Attr::Ints(_) => AttrKind::Ints,
            Attr::DType(_) => AttrKind::DType,
            Attr::Str(_) => AttrKind::Str,
        }
    }
}

impl fmt::Display for Attr {
    /// The canonical IR spelling (floats in Rust's shortest round-trip form).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Attr::Int(i) => write!(f, "{i}"),
            Attr::Float(x) => write!(f, "{x:?}"),
            Attr::Bool(b) => write!(f, "{b}"),
            Attr::Ints(v) => {
                f.write_str("[")?;
                for (i, x) in v.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{x}")?;
                }
                f.write_str("]")
            }
            Attr::DType(d) => write!(f, "{d}"),
            Attr::Str(text) => f.write_str(&quote(text)),
        }
    }
}

/// `text` in double quotes as the IR writes strings: `"`, `\`, newline and tab escaped,
/// other control characters as `\u{1b}`.
pub fn quote(text: &str) -> String {
    let mut q = String::with_capacity(text.len() + 2);
    q.push('"');
    for c in text.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            c => push_escaped(&mut q, c),
        }
    }
    q.push('"');
    q
}

/// `text` with its control characters escaped as in [`quote`] (and nothing else), so
/// text from a file never reaches a terminal raw.
pub fn escape_controls(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        push_escaped(&mut out, c);
    }
    std::borrow::Cow::Owned(out)
}

/// `c`, or its escape if it is a control character: `\n`, `\t`, `\u{1b}`.
fn push_escaped(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\t' => out.push_str("\\t"),
        c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
        c => out.push(c),
    }
}

/// A default for an attribute the IR may leave out.
#[derive(Clone, Copy, Debug)]
pub enum AttrDefault {
    Int(i64),
    Float(f64),
    Bool(bool),
    Ints(&'static [i64]),
    Str(&'static str),
}

impl AttrDefault {
    pub fn to_attr(self) -> Attr {
        match self {
            AttrDefault::Int(i) => Attr::Int(i),
            AttrDefault::Float(x) => Attr::Float(x),
            AttrDefault::Bool(b) => Attr::Bool(b),
            AttrDefault::Ints(v) => Attr::Ints(v.to_vec()),
            AttrDefault::Str(text) => Attr::Str(text.to_string()),
        }
    }
}

/// One attribute of a row.
#[derive(Debug)]
pub struct AttrSpec {
    pub name: &'static str,
    pub kind: AttrKind,
    /// `None`: the attribute must be written.
    pub default: Option<AttrDefault>,
}

pub(crate) const fn attr(name: &'static str, kind: AttrKind, default: Option<AttrDefault>) -> AttrSpec {
    AttrSpec { name, kind, default }
}

/// An op's attributes: every attribute of its row, in row order, defaults filled in.
#[derive(Clone, PartialEq, Debug, Default)]
pub struct Attrs(pub Vec<(&'static str, Attr)>);

impl Attrs {
    pub fn get(&self, name: &str) -> Option<&Attr> {
        self.0.iter().find(|(n, _)| *n == name).map(|(_, a)| a)
    }

    /// The defaults of `kind`'s row, `None` if some attribute has no default.
    pub fn defaults(kind: OpKind) -> Option<Attrs> {
        kind.def().attrs.iter().map(|spec| Some((spec.name, spec.default?.to_attr()))).collect::<Option<_>>().map(Attrs)
    }

    /// `kind`'s attributes in row order: the `given` ones, defaults for the rest; an error
    /// names an attribute the row lacks or a required one not given.
    pub fn for_op(kind: OpKind, given: &[(&str, Attr)]) -> Result<Attrs, String> {
        let row = kind.def();
        if let Some((name, _)) = given.iter().find(|(n, _)| !row.attrs.iter().any(|s| s.name == *n)) {
            return Err(format!("{kind} has no attribute {name}"));
        }
        row.attrs
            .iter()
            .map(|spec| {
                let value = given.iter().find(|(n, _)| *n == spec.name).map(|(_, a)| a.clone());
                match value.or(spec.default.map(AttrDefault::to_attr)) {
                    Some(value) => Ok((spec.name, value)),
                    None => Err(format!("{kind} needs attribute {}", spec.name)),
                }
            })
            .collect::<Result<_, _>>()
            .map(Attrs)
    }

    /// Sets `name` (which must be an attribute of the row these attrs were made for).
    pub fn with(mut self, name: &'static str, value: Attr) -> Attrs {
        match self.0.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = value,
            None => self.0.push((name, value)),
        }
        self
    }

    // Typed getters. Rows read only their own attributes, which the front end resolved
    // with the right kinds; a missing or mistyped one is a bug in memplan, hence the panics.

    pub fn int(&self, name: &str) -> i64 {
        match self.get(name) {
            Some(Attr::Int(i)) => *i,
            other => panic!("attribute {name}: expected an integer, found {other:?}"),
        }
    }

    pub fn float(&self, name: &str) -> f64 {
        match self.get(name) {
            Some(Attr::Float(x)) => *x,
            other => panic!("attribute {name}: expected a float, found {other:?}"),
        }
    }

    pub fn bool(&self, name: &str) -> bool {
        match self.get(name) {
            Some(Attr::Bool(b)) => *b,
            other => panic!("attribute {name}: expected a bool, found {other:?}"),
        }
    }

    pub fn ints(&self, name: &str) -> &[i64] {
        match self.get(name) {
            Some(Attr::Ints(v)) => v,
            other => panic!("attribute {name}: expected a list of integers, found {other:?}"),
        }
    }

    pub fn dtype(&self, name: &str) -> DType {
        match self.get(name) {
            Some(Attr::DType(d)) => *d,
            other => panic!("attribute {name}: expected a dtype, found {other:?}"),
        }
    }

    pub fn str(&self, name: &str) -> &str {
        match self.get(name) {
            Some(Attr::Str(text)) => text,
            other => panic!("attribute {name}: expected a string, found {other:?}"),
        }
    }
}

/// The type rule: output types from input types and attributes, or why the inputs do not fit.
/// Inputs arrive in row order and their count already matches the row.
pub type InferFn = fn(&[&TensorType], &Attrs) -> Result<Vec<TensorType>, String>;

/// Floating-point operations of one execution, from input and output types (saturating).
pub type FlopsFn = fn(&[&TensorType], &[&TensorType], &Attrs) -> u64;

/// One row of the op table: everything about what an op is. Rows are written with
/// `OpDef::new` and the builder methods below, naming only what differs from the
/// defaults (a forward op without attributes, 0 FLOPs, no view, no in-place pairs, not
/// pointwise, no index inputs).
#[derive(Clone, Copy)]
pub struct OpDef {
    pub kind: OpKind,
    /// The IR spelling.
    pub name: &'static str,
    /// Names of the inputs, in order; the arity is their number, except that a last name
    /// ending in `...` (`xs...`) stands for zero or more inputs (a *variadic* op; its type
    /// rule says how many it needs).
    pub inputs: &'static [&'static str],
    /// Names of the outputs, in order.
    pub outputs: &'static [&'static str],
    pub attrs: &'static [AttrSpec],
    pub class: OpClass,
    pub infer: InferFn,
    pub flops: FlopsFn,
    /// Output 0 is a view of an input (same bytes, no copy): which input, and how its
    /// layout follows from the input's.
    pub view: Option<View>,
    /// `(output, input)` pairs: the op may write that output over that input's bytes when
    /// the input dies at this op and both have the same dtype and size.
    pub inplace: &'static [(usize, usize)],
    /// A variadic op whose output 0 may be written over any input of its dtype and size
    /// (`fused`: it reads an input of the output's size element for element, unless its
    /// body ends with a reduction), beside the `inplace` pairs. [`OpDef::inplace_pairs`]
    /// gives both for an op.
    pub inplace_over_any_input: bool,
    /// A variadic op whose every input is read element by element (see [`OpDef::pointwise`])
    /// where all of them have the output's shape (`fused`). [`OpDef::pointwise_inputs`]
    /// gives them for an op's input count.
    pub pointwise_over_every_input: bool,
    /// Output element `i` is a function of the inputs' elements at `i` (the inputs
    /// broadcast numpy's way to the output's shape) and the attributes alone, computed the
    /// same way wherever it runs: no randomness, no position, no other element. Such an op
    /// may be an inner op of a `fused` op (`fused.rs`, the fusion pass).
    pub elementwise: bool,
    /// A plain sum over axes of its one input (`sum`, `mean`): it may end a `fused` op's
    /// body, whose elementwise inner ops then compute its input an element at a time,
    /// never stored.
    pub reduction: bool,
    /// The inputs read element by element: where each of them has the outputs' shape (no
    /// broadcasting; every output has one shape), output element `i` depends only on their
    /// elements `i` (and on the other inputs, whole, such as an optimizer's step count), so
    /// an executor may run the op on any run of elements at a time. Empty: it may not.
    pub pointwise: &'static [usize],
    /// The inputs holding integer indices into a dimension (embedding ids, labels): what
    /// bounds them, for executors' range checks and for seeding them.
    pub indices: &'static [Indices],
    /// How `memplan run` seeds a param this op reads first at an input (a norm's scale 1,
    /// its shift 0, an embedding table small normal numbers); params read elsewhere first
    /// get the default (uniform in ±1/sqrt(fan_in), vectors 0).
    pub init: &'static [(usize, Init)],
    /// The attribute naming the random stream this op draws from: two ops of a step may
    /// share a stream only if they are the same computation (a recompute).
    pub draws: Option<&'static str>,
    /// An optimizer's state per param: the suffixes naming it (`w.m`, `w.v`; its inputs
    /// after `p` and `g`, in order), and whether a step count, one scalar for the whole
    /// step, follows them (adam's `t`).
    pub state: &'static [&'static str],
    pub step_count: bool,
    /// The outputs no gradient flows into (attention's `lse`, saved for its backward op),
    /// and the float inputs that take none (bce_with_logits' `targets`: PyTorch
    /// differentiates them, memplan's rule does not). A loss depending on a param through
    /// one of them is an error of the expansion, never a silently incomplete gradient.
    /// Integer and bool inputs never need an entry.
    pub outputs_without_gradient: &'static [usize],
    pub inputs_without_gradient: &'static [usize],
    /// No gradient flows through it at all (`detach`): its outputs depend on no param, so
    /// a param reaching the loss only through it gets no gradient and no update (as a
    /// PyTorch param whose `.grad` stays `None`), and that is no error.
    pub stops_gradient: bool,
    /// One line for docs/IR.md and `--help`.
    pub doc: &'static str,
}

/// How a view op's output indexes its input's bytes.
#[derive(Clone, Copy)]
pub struct View {
    /// The input whose bytes the output reads.
    pub input: usize,
    /// The output's element offset and strides from the input's (offset, shape, strides)
    /// and the output's shape; `None` where no strides can express it (a `reshape` of a
    /// layout whose elements do not read in row-major order under the new shape).
    pub layout: ViewLayoutFn,
    /// Reading the output in row-major order reads the input in its own row-major order
    /// (a `reshape`): an op may then write over a dense input it reads through the view.
    pub keeps_order: bool,
}

/// See [`View::layout`]: `(attrs, offset, shape, strides, out_shape) -> (offset, strides)`.
pub type ViewLayoutFn = fn(&Attrs, u64, &[u64], &[u64], &[u64]) -> Option<(u64, Vec<u64>)>;

/// An input of integer indices into a dimension of size `below` (a row's `indices`).
#[derive(Clone, Copy, Debug)]
pub struct Indices {
    /// The input holding the indices.
    pub input: usize,
    /// Every index is in `0..below`.
    pub below: Below,
    /// The attribute naming an index that is skipped, whatever its range (cross_entropy's
    /// `ignore_index`).
    pub ignored: Option<&'static str>,
}

/// What bounds an input of indices.
#[derive(Clone, Copy, Debug)]
pub enum Below {
    /// The size of dimension `axis` of input `input`.
    Dim { input: usize, axis: usize },
    /// An integer attribute.
    Attr(&'static str),
    /// The size of the dimension that the integer attribute `axis` names (negative: from
    /// the end) of input `input`, or of the op's output 0 for `usize::MAX` (gather's).
    DimAt { input: usize, axis: &'static str },
    /// Offsets into input `input` (a vector): at most its length, starting at 0 and never
    /// decreasing (embedding_bag's bags), so below its length plus one.
    Offsets { input: usize },
}

/// How `memplan run` seeds a param (a row's `init`).
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Init {
    Zeros,
    Ones,
    /// Normal numbers of mean 0 and this standard deviation.
    Normal(f64),
}

impl OpDef {
    /// A row with the defaults (see [`OpDef`]). Its `kind` is set by the table, which binds
    /// each row to its `OpKind` variant (`table.rs`); a row outside the table has none.
    pub(crate) const fn new(
        name: &'static str,
        inputs: &'static [&'static str],
        outputs: &'static [&'static str],
        infer: InferFn,
        doc: &'static str,
    ) -> OpDef {
        OpDef {
            kind: OpKind::Add,
            name,
            inputs,
            outputs,
            attrs: &[],
            class: OpClass::Forward,
            infer,
            flops: no_flops,
            view: None,
            inplace: &[],
            inplace_over_any_input: false,
            pointwise_over_every_input: false,
            elementwise: false,
            reduction: false,
            pointwise: &[],
            indices: &[],
            init: &[],
            draws: None,
            state: &[],
            step_count: false,
            outputs_without_gradient: &[],
            inputs_without_gradient: &[],
            stops_gradient: false,
            doc,
        }
    }

    /// This row as `kind`'s (the table's binding).
    pub(crate) const fn of_kind(self, kind: OpKind) -> OpDef {
        OpDef { kind, ..self }
    }

    pub(crate) const fn attrs(self, attrs: &'static [AttrSpec]) -> OpDef {
        OpDef { attrs, ..self }
    }

    /// A gradient computation (`*_backward`).
    pub(crate) const fn backward(self) -> OpDef {
        OpDef { class: OpClass::Backward, ..self }
    }

    /// An optimizer update, with its state per param and whether a step count follows it
    /// (see [`OpDef::state`]).
    pub(crate) const fn optimizer(self, state: &'static [&'static str], step_count: bool) -> OpDef {
        OpDef { class: OpClass::Optimizer, state, step_count, ..self }
    }

    pub(crate) const fn flops(self, flops: FlopsFn) -> OpDef {
        OpDef { flops, ..self }
    }

    pub(crate) const fn view(self, view: View) -> OpDef {
        OpDef { view: Some(view), ..self }
    }

    pub(crate) const fn inplace(self, inplace: &'static [(usize, usize)]) -> OpDef {
        OpDef { inplace, ..self }
    }

    pub(crate) const fn inplace_over_any_input(self) -> OpDef {
        OpDef { inplace_over_any_input: true, ..self }
    }

    pub(crate) const fn pointwise_over_every_input(self) -> OpDef {
        OpDef { pointwise_over_every_input: true, ..self }
    }

    pub(crate) const fn elementwise(self) -> OpDef {
        OpDef { elementwise: true, ..self }
    }

    pub(crate) const fn reduction(self) -> OpDef {
        OpDef { reduction: true, ..self }
    }

    pub(crate) const fn pointwise(self, pointwise: &'static [usize]) -> OpDef {
        OpDef { pointwise, ..self }
    }

    pub(crate) const fn indices(self, indices: &'static [Indices]) -> OpDef {
        OpDef { indices, ..self }
    }

    pub(crate) const fn init(self, init: &'static [(usize, Init)]) -> OpDef {
        OpDef { init, ..self }
    }

    pub(crate) const fn draws(self, attr: &'static str) -> OpDef {
        OpDef { draws: Some(attr), ..self }
    }

    pub(crate) const fn outputs_without_gradient(self, outputs: &'static [usize]) -> OpDef {
        OpDef { outputs_without_gradient: outputs, ..self }
    }

    pub(crate) const fn inputs_without_gradient(self, inputs: &'static [usize]) -> OpDef {
        OpDef { inputs_without_gradient: inputs, ..self }
    }

    pub(crate) const fn stops_gradient(self) -> OpDef {
        OpDef { stops_gradient: true, ..self }
    }

    /// The `(output, input)` pairs an op of this row with `inputs` inputs may write in
    /// place (see [`OpDef::inplace`], [`OpDef::inplace_over_any_input`]), given its
    /// attributes `attrs` (a fused op that ends with a reduction reads each input at many
    /// outputs' places, so it writes over none; a `fused_norm` writes its body's value over
    /// its body's inputs only, never over the norm's parameters).
    pub fn inplace_pairs(&self, inputs: usize, attrs: &Attrs) -> std::borrow::Cow<'static, [(usize, usize)]> {
        if self.inplace_over_any_input && !fused::body_reduces(attrs) {
            let written_over = inputs.saturating_sub(fused::norm_params(attrs));
            std::borrow::Cow::Owned(self.inplace.iter().copied().chain((0..written_over).map(|k| (0, k))).collect())
        } else {
            std::borrow::Cow::Borrowed(self.inplace)
        }
    }

    /// How `memplan run` seeds a param read as input `k` of an op of this row with `inputs`
    /// inputs and attributes `attrs` (its row's `init`): a `fused_norm`'s gamma and beta,
    /// its last inputs, as the norm's own row seeds them.
    pub fn init_of(&self, k: usize, inputs: usize, attrs: &Attrs) -> Option<Init> {
        if let Some(init) = fused::norm_param_init(k, inputs, attrs) {
            return Some(init);
        }
        self.init.iter().find(|(input, _)| *input == k).map(|&(_, init)| init)
    }

    /// The inputs an op of this row with `inputs` inputs reads element by element (see
    /// [`OpDef::pointwise`], [`OpDef::pointwise_over_every_input`]).
    pub fn pointwise_inputs(&self, inputs: usize) -> std::borrow::Cow<'static, [usize]> {
        if self.pointwise_over_every_input {
            std::borrow::Cow::Owned((0..inputs).collect())
        } else {
            std::borrow::Cow::Borrowed(self.pointwise)
        }
    }

    /// The input output 0 is a view of, if it is a view.
    pub fn view_of(&self) -> Option<usize> {
        self.view.map(|view| view.input)
    }
}

/// No floating-point operations (copies, casts, gathers, views): the default of a row.
pub(crate) fn no_flops(_: &[&TensorType], _: &[&TensorType], _: &Attrs) -> u64 {
    0
}

impl fmt::Debug for OpDef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpDef").field("name", &self.name).finish_non_exhaustive()
    }
}

impl OpDef {
    /// Whether the last input may repeat (its name ends in `...`).
    pub fn is_variadic(&self) -> bool {
        self.inputs.last().is_some_and(|name| name.ends_with("..."))
    }

    /// Whether an op of this row may have `n` inputs (a variadic row's last input zero or
    /// more times).
    pub fn takes_inputs(&self, n: usize) -> bool {
        if self.is_variadic() { n + 1 >= self.inputs.len() } else { n == self.inputs.len() }
    }

    /// The name of input `k` (every input from the last name on takes the last name).
    pub fn input_name(&self, k: usize) -> &'static str {
        self.inputs[k.min(self.inputs.len() - 1)]
    }

    /// One-line usage, for help lines and docs: inputs, attributes with their defaults (or
    /// `<kind>` where the attribute must be written), outputs. For example
    /// `max_pool2d(x, kernel=<ints>, stride=<ints>, padding=[0, 0]) -> y`.
    pub fn signature(&self) -> String {
        let mut parts: Vec<String> = self.inputs.iter().map(|name| name.to_string()).collect();
        for spec in self.attrs {
            let value = match spec.default {
                Some(default) => default.to_attr().to_string(),
                None => format!("<{}>", kind_word(spec.kind)),
            };
            parts.push(format!("{}={}", spec.name, value));
        }
        let outputs = match self.outputs {
            [one] => one.to_string(),
            many => format!("({})", many.join(", ")),
        };
        format!("{}({}) -> {}", self.name, parts.join(", "), outputs)
    }
}

/// The short word for an attribute kind in signatures: `lr=<float>`.
fn kind_word(kind: AttrKind) -> &'static str {
    match kind {
        AttrKind::Int => "int",
        AttrKind::Float => "float",
        AttrKind::Bool => "bool",
        AttrKind::Ints => "ints",
        AttrKind::DType => "dtype",
        AttrKind::Str => "string",
    }
}

mod attention;
mod conv;
mod dropout;
mod elementwise;
mod r#extern;
mod fused;
mod linalg;
mod nn;
mod optim;
mod resample;
mod rules;
mod shape;
mod table;
#[cfg(test)]
mod tests;

pub use attention::AttentionAttrs;
pub use conv::{Conv3dAttrs, ConvAttrs};
pub use elementwise::Comparison;
pub use fused::{FUSED_MAX_INPUTS, FUSED_MAX_OPS, FusedBody, InnerOp, Norm, Operand, inner_flops, inner_shape, norm_params};
pub use resample::GridSampleAttrs;
pub use linalg::MatmulAttrs;
pub use nn::{CrossEntropyAttrs, LINEAR_CROSS_ENTROPY_CHUNK_BYTES, LinearCrossEntropyWorkspace, PoolAttrs, linear_cross_entropy_rows};
pub use optim::AdamAttrs;
pub use rules::broadcast;
pub use shape::reshape_strides;
pub use table::{OPS, OpKind};
