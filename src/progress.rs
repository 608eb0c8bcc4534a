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

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::time::{Duration, Instant};

    use super::Progress;
    use crate::analysis::liveness::Live;
    use crate::passes::offsets::{Solution, bestfit, exact};

    /// Remembers every report.
    #[derive(Default)]
    struct Record(RefCell<Vec<String>>);

    impl Progress for Record {
        fn start(&self, what: &str, total: u64) {
            self.0.borrow_mut().push(format!("start {what} {}", total > 0));
        }
        fn update(&self, _: u64, note: &str) {
            self.0.borrow_mut().push(format!("update {note}"));
        }
        fn finish(&self) {
            self.0.borrow_mut().push("finish".into());
        }
    }

    #[test]
    fn the_exact_search_reports_each_probe() {
        // Best-fit places these in 5 bytes; 4 is optimal (a placement exists at the bound).
        let live = |first, last, size| Live { first, last, size };
        let intervals = [live(0, 1, 2), live(0, 0, 1), live(1, 2, 1), live(2, 3, 2), live(3, 3, 2), live(1, 1, 1)];
        let offsets = bestfit::best_fit(&intervals).unwrap();
        let arena = crate::passes::offsets::arena_of(&intervals, &offsets).unwrap();
        let lower = crate::passes::offsets::lower_bound(&intervals).unwrap();
        let start = Solution { offsets, arena, proved_optimal: arena == lower };
        let record = Record::default();
        let limits = exact::Limits::until(Instant::now() + Duration::from_secs(5));
        let found = exact::minimize_reporting(&intervals, lower, start, limits, &record);
        assert!(found.proved_optimal && found.arena == lower, "{found:?}");
        let log = record.0.into_inner();
        assert_eq!(log.first().map(String::as_str), Some("start exact offsets true"));
        assert_eq!(log.last().map(String::as_str), Some("finish"));
        let last_update = log.iter().rev().find(|l| l.starts_with("update")).unwrap();
        assert_eq!(last_update, &format!("update best arena {lower} B, none below {lower} B"));
    }
}
