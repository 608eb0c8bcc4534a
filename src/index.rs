//! Typed `u32` indices and the vector they index.
//!
//! Every collection of graph or plan entities is an [`IndexVec`] indexed by one of
//! these newtypes, so a `ValueId` can never be used to index ops by mistake. Their
//! `Display` is the spelling users see in printed IR and reports: a value id prints as
//! `%3` (the printer and reports use the value's name; ids appear only for entities a graph
//! cannot name), an op as `op3`, a buffer as `buf3`.
//!
//! Invariant: an index is only meaningful for the collection that issued it.

use std::fmt;
use std::marker::PhantomData;
use std::ops::{Index, IndexMut};

use serde::{Deserialize, Serialize};

/// A typed index into an [`IndexVec`].
pub trait Idx: Copy + Eq + Ord + fmt::Debug {
    fn new(index: usize) -> Self;
    fn index(self) -> usize;
}

macro_rules! define_index {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub u32);

        impl Idx for $name {
            fn new(index: usize) -> Self {
                $name(u32::try_from(index).expect(concat!(stringify!($name), " overflows u32")))
            }
            fn index(self) -> usize {
                self.0 as usize
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(self, f)
            }
        }
    };
}

define_index!(
    /// A value: a step argument or one output of an op.
    ValueId,
    "%"
);
define_index!(
    /// An op in the graph, in program order.
    OpId,
    "op"
);
define_index!(
    /// A buffer of a plan: a region of the arena that holds one or more values over time.
    BufferId,
    "buf"
);

/// A vector indexed only by `I`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct IndexVec<I: Idx, T> {
    raw: Vec<T>,
    #[serde(skip)]
    _index: PhantomData<fn(&I)>,
}

impl<I: Idx, T> IndexVec<I, T> {
    pub fn new() -> Self {
        IndexVec { raw: Vec::new(), _index: PhantomData }
    }

    pub fn from_raw(raw: Vec<T>) -> Self {
        IndexVec { raw, _index: PhantomData }
    }

    /// Appends `value` and returns its index.
    pub fn push(&mut self, value: T) -> I {
        let id = I::new(self.raw.len());
        self.raw.push(value);
        id
    }

    /// The index the next `push` will return.
    pub fn next_id(&self) -> I {
        I::new(self.raw.len())
    }

    pub fn len(&self) -> usize {
        self.raw.len()
    }

    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    pub fn get(&self, id: I) -> Option<&T> {
        self.raw.get(id.index())
    }

    pub fn iter(&self) -> std::slice::Iter<'_, T> {
        self.raw.iter()
    }

    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, T> {
        self.raw.iter_mut()
    }

    /// `(index, element)` pairs in index order.
    pub fn iter_enumerated(&self) -> impl DoubleEndedIterator<Item = (I, &T)> + ExactSizeIterator {
        self.raw.iter().enumerate().map(|(i, t)| (I::new(i), t))
    }

    /// All indices in order.
    pub fn indices(&self) -> impl DoubleEndedIterator<Item = I> + ExactSizeIterator + use<I, T> {
        (0..self.raw.len()).map(I::new)
    }

    pub fn as_slice(&self) -> &[T] {
        &self.raw
    }

    pub fn into_raw(self) -> Vec<T> {
        self.raw
    }
}

impl<I: Idx, T: Clone> IndexVec<I, T> {
    /// `len` copies of `value`.
    pub fn from_elem(value: T, len: usize) -> Self {
        IndexVec::from_raw(vec![value; len])
    }
}

impl<I: Idx, T> Default for IndexVec<I, T> {
    fn default() -> Self {
        IndexVec::new()
    }
}

impl<I: Idx, T: fmt::Debug> fmt::Debug for IndexVec<I, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter_enumerated()).finish()
    }
}

impl<I: Idx, T> Index<I> for IndexVec<I, T> {
    type Output = T;
    fn index(&self, id: I) -> &T {
        &self.raw[id.index()]
    }
}

impl<I: Idx, T> IndexMut<I> for IndexVec<I, T> {
    fn index_mut(&mut self, id: I) -> &mut T {
        &mut self.raw[id.index()]
    }
}

impl<I: Idx, T> FromIterator<T> for IndexVec<I, T> {
    fn from_iter<It: IntoIterator<Item = T>>(iter: It) -> Self {
        IndexVec::from_raw(iter.into_iter().collect())
    }
}

impl<'a, I: Idx, T> IntoIterator for &'a IndexVec<I, T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.raw.iter()
    }
}
