//! Where a value's elements sit in its root's bytes: the layout of every view.
//!
//! A view op (a row with a `view` in the op table) makes no copy: its output is a new way
//! of indexing its input's bytes. Every value therefore has a [`Layout`]: its *root* (the
//! value owning the bytes: itself unless it is a view), and the element offset and element
//! strides of its shape inside the root. A root is dense: offset 0, row-major strides. Each
//! view op derives its output's layout from its input's by its row's rule ([`view_layout`];
//! the rules are in `ir/ops/shape.rs`): `transpose` permutes shape and strides, `expand`
//! gives broadcast dimensions stride 0, `slice` and `select` move the offset, and
//! `reshape` keeps the elements in row-major order under a new shape, which needs no copy
//! exactly when PyTorch's `view` needs none (ATen's `computeStride`); otherwise there is
//! no layout and the verifier refuses the reshape (write `contiguous` first, as in
//! PyTorch).
//!
//! The verifier, the CPU executor and the CUDA executor all read layouts from here, so a
//! view means the same bytes everywhere. Assumes the op's attributes and types passed the
//! type rules (axes in range, slices inside their dimension).

use crate::index::{IndexVec, ValueId};
use crate::ir::graph::{Graph, ValueDef};
use crate::ir::ops::{Attrs, OpKind, reshape_strides};
pub use crate::ir::types::dense_strides;

/// How a value's elements sit in its root's bytes.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Layout {
    /// The value owning the bytes.
    pub root: ValueId,
    /// Elements from the root's first element to this value's first.
    pub offset: u64,
    pub shape: Vec<u64>,
    /// Element strides into the root's bytes.
    pub strides: Vec<u64>,
}

impl Layout {
    /// A root value of `shape`: offset 0, row-major strides.
    pub fn dense(root: ValueId, shape: &[u64]) -> Layout {
        Layout { root, offset: 0, shape: shape.to_vec(), strides: dense_strides(shape) }
    }
}


/// The layout of the output of view op `kind` (with `attrs`) reading `input`, its output of
/// shape `out_shape` (the row's [`View`](crate::ir::ops::View) rule); `None` when a
/// `reshape` cannot be a view of `input`'s layout, or `kind` is no view.
pub fn view_layout(kind: OpKind, attrs: &Attrs, input: &Layout, out_shape: &[u64]) -> Option<Layout> {
    let view = kind.def().view?;
    let (offset, strides) = (view.layout)(attrs, input.offset, &input.shape, &input.strides, out_shape)?;
    Some(Layout { root: input.root, offset, shape: out_shape.to_vec(), strides })
}

/// The layout of `value` in `graph`, following its chain of views back to its root; `None`
/// if a `reshape` on the way is not a view of its input.
pub fn layout_of(graph: &Graph, value: ValueId) -> Option<Layout> {
    let v = &graph.values[value];
    match v.def {
        ValueDef::Op { op, .. } if graph.ops[op].kind.def().view_of().is_some() => {
            let op = &graph.ops[op];
            view_layout(op.kind, &op.attrs, &layout_of(graph, op.inputs[0])?, v.ty.dims())
        }
        _ => Some(Layout::dense(value, v.ty.dims())),
    }
}

/// Whether `reshape(value, shape=new_shape)` is a view (no copy needed first).
pub fn reshape_is_view(graph: &Graph, value: ValueId, new_shape: &[u64]) -> bool {
    layout_of(graph, value).is_some_and(|l| reshape_strides(&l.shape, &l.strides, new_shape).is_some())
}

/// The layout of every value of a verified graph (program order defines every view's input
/// before the view).
pub fn layouts(graph: &Graph) -> IndexVec<ValueId, Layout> {
    let mut layouts: IndexVec<ValueId, Layout> =
        graph.values.iter_enumerated().map(|(id, v)| Layout::dense(id, v.ty.dims())).collect();
    for op in graph.ops.iter().filter(|op| op.kind.def().view_of().is_some()) {
        let out = op.outputs[0];
        let layout = view_layout(op.kind, &op.attrs, &layouts[op.inputs[0]], graph.values[out].ty.dims())
            .expect("a verified reshape is a view of its input's layout");
        layouts[out] = layout;
    }
    layouts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reshape(shape: &[u64], strides: &[u64], new_shape: &[u64]) -> Option<Vec<u64>> {
        reshape_strides(shape, strides, new_shape)
    }

    #[test]
    fn reshape_is_a_view_exactly_where_pytorch_view_is() {
        // Dense data reshapes to anything of the same size.
        assert_eq!(reshape(&[2, 3, 4], &[12, 4, 1], &[6, 4]), Some(vec![4, 1]));
        assert_eq!(reshape(&[2, 3, 4], &[12, 4, 1], &[24]), Some(vec![1]));
        // A transposed matrix cannot be flattened, but its dimensions can be split.
        assert_eq!(reshape(&[3, 2], &[1, 3], &[6]), None);
        assert_eq!(reshape(&[4, 2], &[1, 4], &[2, 2, 2]), Some(vec![2, 1, 4]));
        // The last third of each row (a split along the last axis) splits into heads...
        assert_eq!(reshape(&[2, 8, 12], &[288, 36, 1], &[2, 8, 3, 4]), Some(vec![288, 36, 4, 1]));
        // ...but the rows cannot merge.
        assert_eq!(reshape(&[2, 8, 12], &[288, 36, 1], &[16, 12]), Some(vec![36, 1]));
        assert_eq!(reshape(&[2, 8, 12], &[288, 36, 1], &[192]), None);
        // Size-1 dimensions come and go with any stride; broadcasts stay broadcasts.
        assert_eq!(reshape(&[4, 1, 3], &[1, 99, 4], &[4, 3]), Some(vec![1, 4]));
        assert_eq!(reshape(&[3, 4], &[0, 1], &[3, 1, 4]), Some(vec![0, 4, 1]));
        assert_eq!(reshape(&[3, 4], &[0, 1], &[12]), None);
        assert_eq!(reshape(&[], &[], &[1, 1]), Some(vec![1, 1]));
        assert_eq!(reshape(&[0, 4], &[4, 1], &[2, 0]), Some(vec![0, 1]));
    }

    fn attrs(kind: OpKind, given: &[(&str, crate::ir::ops::Attr)]) -> Attrs {
        Attrs::for_op(kind, given).unwrap()
    }

    #[test]
    fn slices_and_selects_move_the_offset() {
        use crate::ir::ops::Attr::Int;
        let x = Layout::dense(ValueId(0), &[4, 6]);
        let every_other_column = [("axis", Int(1)), ("start", Int(1)), ("end", Int(6)), ("step", Int(2))];
        let y = view_layout(OpKind::Slice, &attrs(OpKind::Slice, &every_other_column), &x, &[4, 3]).unwrap();
        assert_eq!((y.offset, y.strides.clone()), (1, vec![6, 2]));
        let row = view_layout(OpKind::Select, &attrs(OpKind::Select, &[("axis", Int(0)), ("index", Int(2))]), &y, &[3]);
        assert_eq!(row, Some(Layout { root: ValueId(0), offset: 13, shape: vec![3], strides: vec![2] }));
    }
}
