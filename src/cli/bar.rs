//! A progress bar on stderr for work that may take more than a second (an exact offset
//! search, a long `run --steps`): it appears at the first report after one second, and only
//! when stderr is a terminal (never in pipes, files or tests). Dropping it clears it.

use std::cell::Cell;
use std::io::IsTerminal;
use std::time::Instant;

use memplan::progress::Progress;

pub struct Bar {
    bar: indicatif::ProgressBar,
    started: Instant,
    shown: Cell<bool>,
}

impl Bar {
    pub fn new() -> Bar {
        Bar { bar: indicatif::ProgressBar::hidden(), started: Instant::now(), shown: false.into() }
    }

    /// Runs `f` with the bar hidden, so that what it prints is not drawn over.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        self.bar.suspend(f)
    }
}

impl Progress for Bar {
    fn start(&self, what: &str, total: u64) {
        self.bar.set_length(total);
        self.bar.set_position(0);
        self.bar.set_prefix(what.to_string());
        if let Ok(style) = indicatif::ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {wide_msg} {elapsed}") {
            self.bar.set_style(style.progress_chars("=> "));
        }
    }

    fn update(&self, done: u64, note: &str) {
        if !self.shown.get() && self.started.elapsed().as_secs() >= 1 && std::io::stderr().is_terminal() {
            self.bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
            self.shown.set(true);
        }
        self.bar.set_position(done);
        self.bar.set_message(note.to_string());
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}
