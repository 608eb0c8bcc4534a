//! A `.step` file as every command that plans one uses it: read, parsed, verified, expanded
//! (autodiff; a step without `backward` stays as it is), verified again, planned, and its
//! plan run through the independent checker. Errors are rendered against the file's text
//! (file:line:col, a label and a hint).

use std::io::IsTerminal;
use std::path::Path;

use memplan::diagnostics;
use memplan::formats::plan_json::{self, LoadError};
use memplan::ir::graph::Graph;
use memplan::passes::{Observer, PlanError, PlanOptions};
use memplan::plan::Plan;
use memplan::report::Subject;
use memplan::report::locs::Locs;
use memplan::ExpandOptions;
use miette::Diagnostic;

use super::files::read_text;
use super::{Exit, Failure};

/// The text of a step and the path it came from, and how to expand it.
pub struct Source {
    pub file: String,
    pub text: String,
    /// How [`graph`](Self::graph) expands a step with `backward` (the pass flags' choice).
    pub expand: ExpandOptions,
}

impl Source {
    pub fn read(path: &Path) -> Result<Source, Failure> {
        Ok(Source { file: path.display().to_string(), text: read_text(path)?, expand: ExpandOptions::default() })
    }

    /// A failure showing `diagnostic` against this source.
    pub fn failure(&self, diagnostic: &dyn Diagnostic, exit: Exit) -> Failure {
        let color = std::io::stderr().is_terminal();
        Failure { message: diagnostics::render(diagnostic, &self.file, &self.text, color), exit }
    }

    /// Parses, verifies and expands the step, printing the step's warnings
    /// (`autodiff::warnings`) on stderr. The expanded step is verified where it is used
    /// (the pipeline verifies the step it plans; [`verified`](Self::verified) for the
    /// rest): verifying a 1,000,000-op step takes most of a second. A plan JSON is refused
    /// with a pointer to the commands that read one.
    pub fn graph(&self) -> Result<Graph, Failure> {
        if is_plan_json(Path::new(&self.file), &self.text) {
            return Err(Failure::bad_input(format_args!(
                "{} is a plan JSON (what `memplan plan --emit json` writes), not a .step file\n  hint: `memplan report {0}` shows \
                 what is live at its peak, `memplan diff {0} OTHER` compares it with another plan; plan the .step file it \
                 came from to plan again",
                self.file
            )));
        }
        let graph = memplan::parse(&self.text).map_err(|e| self.failure(&e, Exit::BadInput))?;
        let warn = || {
            let color = std::io::stderr().is_terminal();
            for warning in memplan::autodiff::warnings(&graph) {
                eprint!("{}", diagnostics::render(&warning, &self.file, &self.text, color));
            }
        };
        if graph.backward.is_none() {
            memplan::verify(&graph).map_err(|e| self.failure(&e, Exit::BadInput))?;
            warn();
            return Ok(graph);
        }
        // `expand` verifies the step first (its errors are the verifier's, shown the same
        // way): verified once, not twice (a second of a 1,000,000-op step).
        let expanded = memplan::expand_with(&graph, self.expand).map_err(|e| {
            if !matches!(e, memplan::AutodiffError::Invalid(_)) {
                warn();
            }
            self.failure(&e, Exit::BadInput)
        })?;
        warn();
        Ok(expanded)
    }

    /// The expanded step of [`graph`](Self::graph), verified: one that does not verify is a
    /// memplan bug (the step itself was verified before it was expanded).
    pub fn verified(&self, expanded: Graph) -> Result<Graph, Failure> {
        memplan::verify(&expanded).map_err(|e| self.expansion_bug(&e))?;
        Ok(expanded)
    }

    fn expansion_bug(&self, errors: &memplan::VerifyErrors) -> Failure {
        Failure::bug("the expanded step does not verify", self.failure(errors, Exit::Bug).message)
    }

    /// Plans `graph` and checks the plan independently; returns the graph the plan refers
    /// to (`graph` itself, or the step rewritten when ops are recomputed under a budget).
    pub fn plan(&self, graph: Graph, options: &PlanOptions) -> Result<(Graph, Plan), Failure> {
        self.checked(memplan::passes::plan_step_owned(graph, options))
    }

    /// [`Source::plan`], showing the pipeline's context to `observe` after each pass.
    pub fn plan_observed(&self, graph: Graph, options: &PlanOptions, observe: &mut Observer<'_>) -> Result<(Graph, Plan), Failure> {
        self.checked(memplan::passes::plan_step_observed(graph, options, observe))
    }

    /// A plan from the pipeline, checked independently, or the failure to report.
    fn checked(&self, planned: Result<(Graph, Plan), PlanError>) -> Result<(Graph, Plan), Failure> {
        // The graph comes from `graph()`: the pipeline finding it invalid means expanding
        // it made an invalid step.
        let (graph, plan) = planned.map_err(|e| match &e {
            PlanError::Invalid(errors) => self.expansion_bug(errors),
            _ => self.failure(&e, plan_exit(&e)),
        })?;
        memplan::check(&graph, &plan)
            .map_err(|violations| Failure::bug(format_args!("the checker rejected the plan of {}", self.file), format_args!("{violations}\n")))?;
        Ok((graph, plan))
    }

    /// `graph` (parsed from this source) and its plan, with source locations.
    pub fn subject(self, graph: Graph, plan: Plan) -> Subject {
        let locs = Locs::from_source(&graph, &self.file, &self.text);
        Subject { source: self.file, graph, plan, locs }
    }
}

/// How planning failed, as an exit status: a budget no recomputation meets is
/// [`Exit::Unmet`]; every other [`PlanError`] is the step's or the flags' (a planner bug
/// inside the pipeline is reported as such in the message).
fn plan_exit(error: &PlanError) -> Exit {
    if matches!(error, PlanError::BudgetUnmet { .. }) { Exit::Unmet } else { Exit::BadInput }
}

/// How reading a plan JSON failed, as an exit status: a plan the checker rejects is
/// [`Exit::Bug`] (memplan wrote it, or someone edited it); the rest is bad input.
fn load_exit(error: &LoadError) -> Exit {
    if matches!(error, LoadError::Check { .. }) { Exit::Bug } else { Exit::BadInput }
}

/// Whether the file at `path` with `text` is a plan JSON rather than a .step file: a
/// `.json` name, or text that opens a JSON object (a step starts with `step`).
pub fn is_plan_json(path: &Path, text: &str) -> bool {
    path.extension().is_some_and(|e| e == "json") || text.trim_start().starts_with('{')
}

/// A plan to report on, from a .step file (planned with `options`) or a plan JSON (read
/// back and checked), and the name it goes by in reports.
pub fn load_subject(path: &Path, options: &PlanOptions, expand: ExpandOptions) -> Result<(String, Subject), Failure> {
    let source = Source { expand, ..Source::read(path)? };
    if is_plan_json(path, &source.text) {
        let subject = plan_json::load(&source.text).map_err(|e| Failure::error(load_exit(&e), format_args!("{}: {e}", source.file)))?;
        let name = format!("{} (@{}, planned from {})", source.file, subject.graph.name, subject.source);
        return Ok((name, subject));
    }
    let graph = source.graph()?;
    let (graph, plan) = source.plan(graph, options)?;
    let name = format!("{} (@{})", source.file, graph.name);
    Ok((name, source.subject(graph, plan)))
}
