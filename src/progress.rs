//! Progress of long work (an exact offset search, a long `run --steps`), reported to
//! whoever wants to show it.
//!
//! The library does no terminal IO: work that can take more than a second takes a
//! `&dyn Progress` and reports to it; the CLI passes one that draws a progress bar on
//! stderr (only when stderr is a terminal), everyone else [`Silent`]. Reports are cheap and
//! may be frequent; an implementation throttles drawing itself.

/// Receives progress reports.
pub trait Progress {
    /// Work of `total` units starts; `what` names it.
    fn start(&self, what: &str, total: u64);
    /// `done` of the `total` units are done; `note` says how it is going (may be empty).
    fn update(&self, done: u64, note: &str);
    /// The work ended, finished or stopped early.
    fn finish(&self);
}

/// Ignores every report.
pub struct Silent;

impl Progress for Silent {
    fn start(&self, _: &str, _: u64) {}
    fn update(&self, _: u64, _: &str) {}
    fn finish(&self) {}
}
