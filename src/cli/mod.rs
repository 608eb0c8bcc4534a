//! The `memplan` command line, apart from the library: one module per command.

pub mod remat;
