//! The `memplan` command line, apart from the library: `src/main.rs` parses the arguments
//! and dispatches; each command is a module here (`check`, `plan`, `report`, `diff`,
//! `alloc`, `run`, `schedule`, `remat`, `expand`, `print`, `replay`, `snapshot`), with its clap
//! arguments and its `run`.
//!
//! Shared by the commands: [`Failure`] and [`Exit`], the ONE convention for exit statuses;
//! `step.rs` (a .step file read, expanded, planned and checked), `flags.rs` (the flags
//! several commands take), `files.rs` (reading inputs, writing outputs without ever
//! overwriting a user's file), `bar.rs` (a progress bar on stderr) and [`out!`]/[`outln!`]
//! (stdout that tolerates a closed pipe).
//!
//! The library does no terminal or file IO of its own; everything a user sees or gets
//! written comes from here.

pub mod alloc;
pub mod bar;
pub mod check;
pub mod diff;
pub mod expand;
pub mod files;
pub mod flags;
pub mod plan;
pub mod print;
pub mod remat;
pub mod replay;
pub mod report;
pub mod run;
pub mod schedule;
pub mod snapshot;
pub mod step;

use std::fmt;

/// The exit statuses (docs/CLI.md). Every failure names one; 0 is success.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Exit {
    /// 1: bad input: an unreadable file, parse or verify errors, a step that cannot be
    /// differentiated or planned, a malformed buffer list or graph, bad flags, an output
    /// file that exists.
    BadInput = 1,
    /// 2: a capacity or budget that cannot be met (`alloc --capacity N` found no placement
    /// within N bytes in the time limit; a `--budget` or `remat` budget no recomputation
    /// meets: the message says the smallest that works).
    Unmet = 2,
    /// 3: always a memplan bug: the checker rejected a plan or placement memplan made, an
    /// expanded step does not verify, a planned run differs from the unplanned one.
    Bug = 3,
}

/// A message for stderr and the exit status it ends with.
#[derive(Debug)]
pub struct Failure {
    /// The text, with its line endings (a rendered diagnostic or `error: ...\n`).
    pub message: String,
    pub exit: Exit,
}

impl Failure {
    /// `error: {message}`, a line of its own; a word of it too long to read (a name quoted
    /// from a hostile file) is clipped and control characters escaped
    /// (`diagnostics::for_terminal`).
    pub fn error(exit: Exit, message: impl fmt::Display) -> Failure {
        Failure { message: format!("error: {}\n", memplan::diagnostics::for_terminal(&message.to_string())), exit }
    }

    /// `error: {message}` for bad input (exit 1).
    pub fn bad_input(message: impl fmt::Display) -> Failure {
        Failure::error(Exit::BadInput, message)
    }

    /// `internal error: {what} (a memplan bug; please report it):` and the details (exit 3).
    pub fn bug(what: impl fmt::Display, details: impl fmt::Display) -> Failure {
        Failure { message: format!("internal error: {what} (a memplan bug; please report it):\n{details}"), exit: Exit::Bug }
    }
}

/// Writes to stdout. A reader that went away (`memplan plan big.step | head`) is not an
/// error worth a panic: stop quietly, as other command-line tools do.
pub fn write_stdout(text: fmt::Arguments<'_>) {
    use std::io::Write;
    if let Err(e) = std::io::stdout().lock().write_fmt(text) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: cannot write to stdout: {e}");
        std::process::exit(Exit::BadInput as i32);
    }
}

/// `print!` through [`write_stdout`].
macro_rules! out {
    ($($arg:tt)*) => { $crate::cli::write_stdout(format_args!($($arg)*)) };
}

/// `println!` through [`write_stdout`].
macro_rules! outln {
    ($($arg:tt)*) => { $crate::cli::write_stdout(format_args!("{}\n", format_args!($($arg)*))) };
}

pub(crate) use {out, outln};
