//! The text corpus: every `ir/**/*.step` file is parsed, verified, expanded (forward-only
//! steps get their backward pass and optimizer), verified again, round-tripped through the
//! printer (as written and as expanded), planned, checked by the independent checker, and
//! its report snapshotted.
//! Every file under `ir/invalid/` must fail with a located error, whose text is snapshotted.

use std::path::Path;

use memplan::passes::PlanOptions;
use memplan::report::{Report, text};
use memplan::ir::graph::Graph;
use memplan::{check, diagnostics, expand, parse, plan, print, verify};

/// The path as the snapshots show it: relative to the crate, `/`-separated.
fn display_path(path: &Path) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    path.strip_prefix(root).unwrap_or(path).to_string_lossy().replace('\\', "/")
}

fn is_invalid(path: &Path) -> bool {
    path.components().any(|c| c.as_os_str() == "invalid")
}

#[test]
fn valid_steps_plan_check_and_round_trip() {
    insta::glob!("../ir", "**/*.step", |path| {
        if is_invalid(path) {
            return;
        }
        let file = display_path(path);
        let src = std::fs::read_to_string(path).unwrap();
        let graph = parse(&src).unwrap_or_else(|e| panic!("{}", diagnostics::render(&e, &file, &src, false)));
        if let Err(e) = verify(&graph) {
            panic!("{}", diagnostics::render(&e, &file, &src, false));
        }

        round_trip(&file, &graph);
        let graph = expand(&graph).unwrap_or_else(|e| panic!("{}", diagnostics::render(&e, &file, &src, false)));
        if let Err(e) = verify(&graph) {
            panic!("{file}: the expanded step does not verify:\n{}", diagnostics::render(&e, &file, &src, false));
        }
        round_trip(&file, &graph);

        let plan = plan(&graph, &PlanOptions::default()).unwrap_or_else(|e| panic!("{}", diagnostics::render(&e, &file, &src, false)));
        if let Err(violations) = check(&graph, &plan) {
            panic!("{file}: the checker rejects the plan:\n{violations}");
        }
        assert!(plan.arena_bytes >= plan.lower_bound, "{file}: arena below the lower bound");

        let report = Report::new(&graph, &plan);
        let at_peak: u64 = report.classes.iter().map(|c| c.at_peak).sum();
        assert!(at_peak <= plan.lower_bound, "{file}: bytes live at the peak ({at_peak}) exceed the lower bound");
        insta::assert_snapshot!(text::render(&report, 20, text::BufferRows::All));
    });
}

/// parse(print(g)) == g, and printing is idempotent.
fn round_trip(file: &str, graph: &Graph) {
    let printed = print(graph);
    let reparsed = parse(&printed).unwrap_or_else(|e| {
        panic!("{file}: printed form does not parse:\n{}", diagnostics::render(&e, file, &printed, false))
    });
    assert_eq!(print(&reparsed), printed, "{file}: printing is not idempotent");
    if &reparsed != graph {
        // Name the first difference rather than dumping two graphs.
        let value = graph.values.indices().find(|&v| reparsed.values.get(v) != graph.values.get(v));
        let op = graph.ops.indices().find(|&o| reparsed.ops.get(o) != graph.ops.get(o));
        panic!("{file}: parse(print(g)) != g; first differing value {value:?}, op {op:?}");
    }
}

/// The error text of an invalid step, from whichever layer rejects it.
fn error_text(file: &str, src: &str) -> Option<String> {
    let render = |d: &dyn miette::Diagnostic| Some(diagnostics::render(d, file, src, false));
    let graph = match parse(src) {
        Ok(graph) => graph,
        Err(e) => return render(&e),
    };
    if let Err(e) = verify(&graph) {
        return render(&e);
    }
    let graph = match expand(&graph) {
        Ok(graph) => graph,
        Err(e) => return render(&e),
    };
    match plan(&graph, &PlanOptions::default()) {
        Err(e) => render(&e),
        Ok(_) => None,
    }
}

#[test]
fn invalid_steps_give_located_errors() {
    insta::glob!("../ir/invalid", "*.step", |path| {
        let file = display_path(path);
        let src = std::fs::read_to_string(path).unwrap();
        let text = error_text(&file, &src).unwrap_or_else(|| panic!("{file} is accepted but should be invalid"));
        assert!(text.contains(&format!("[{file}:")), "{file}: the error does not say file:line:col:\n{text}");
        insta::assert_snapshot!(text);
    });
}
