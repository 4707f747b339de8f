//! Guard mutation: drop one guard conjunct at a time and re-check.
//!
//! A mutant is *killed* when some invariant, box-action property (checked on
//! every step), `TypeOK`, or the evaluation of the model itself (as TLC would
//! report) fails. A mutant that is not killed is compared with the original
//! model's reachable graph: *equivalent* when it has the same states and the
//! same steps (state, different next state), i.e. the TLA+ `Next` relation
//! over the reachable states is unchanged and no property of any kind can
//! tell; *new steps* when it has the same states but more steps between them;
//! *survived* when it reaches new states. A mutant no TLA+ property kills in
//! any configuration is then given to the no-stutter step check
//! ([`crate::explore::NO_STUTTER`]) in the model's own configuration: a
//! guard whose only work is to keep a step from being a no-op is killed
//! there. Every mutant that is not killed needs a one-line
//! reason in the model's notes file (see [`Justifications`]).

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashSet, VecDeque};
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::panic::{catch_unwind, AssertUnwindSafe};

use lazaret_generated::support::{GuardId, GuardInfo, Protocol};
use lazaret_generated::ModelEntry;

use crate::explore::{check, Checked, ExploreError, Outcome};

/// The verdict on one mutant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// An invariant or action property failed; its name, the length of
    /// the counterexample, and the further configuration it failed in
    /// (`None`: the model's own `.cfg`).
    Killed {
        by: String,
        depth: usize,
        config: Option<&'static str>,
    },
    /// Evaluating the mutant failed (e.g. a function applied outside its
    /// domain), which TLC reports as an error too.
    KilledByEvaluation,
    /// Same reachable states and the same steps between them as the
    /// original (stuttering steps aside): `Next` is unchanged.
    Equivalent,
    /// Same reachable states, `steps` steps between them the original does
    /// not take; every invariant and action property holds.
    NewSteps { steps: usize },
    /// More states, every invariant and action property holds.
    Survived { states: usize },
    /// The mutant's state space passed the exploration cap.
    Capped { states: usize },
}

impl Verdict {
    pub fn killed(&self) -> bool {
        matches!(self, Self::Killed { .. } | Self::KilledByEvaluation)
    }
}

/// One mutant's result.
#[derive(Clone, Debug)]
pub struct MutantResult {
    pub guard: GuardInfo,
    pub verdict: Verdict,
}

/// All mutants of one model.
#[derive(Clone, Debug)]
pub struct ModelMutations {
    pub model: &'static str,
    pub source: &'static str,
    pub original_states: usize,
    pub results: Vec<MutantResult>,
}

impl ModelMutations {
    pub fn killed(&self) -> usize {
        self.results.iter().filter(|r| r.verdict.killed()).count()
    }

    pub fn equivalent(&self) -> usize {
        self.results
            .iter()
            .filter(|r| r.verdict == Verdict::Equivalent)
            .count()
    }
}

fn fingerprint<T: Hash>(x: &T) -> u64 {
    let mut h = DefaultHasher::new();
    x.hash(&mut h);
    h.finish()
}

/// The reachable states and non-stuttering steps of a model (or mutant),
/// as 64-bit fingerprints (the same collision trade-off stateright makes).
struct Graph {
    states: HashSet<u64>,
    steps: HashSet<(u64, u64)>,
}

/// Explores every reachable state of `P` with `mask` dropped, breadth-first.
/// `None` when a step fails to evaluate (such mutants are killed earlier).
fn graph<P: Protocol>(cx: &P::Constants, mask: Option<GuardId>) -> Option<Graph> {
    let init = P::init(cx).ok()?;
    let mut g = Graph {
        states: HashSet::from([fingerprint(&init)]),
        steps: HashSet::new(),
    };
    let mut queue = VecDeque::from([init]);
    let mut actions = Vec::new();
    while let Some(st) = queue.pop_front() {
        let from = fingerprint(&st);
        actions.clear();
        P::enabled_actions(cx, &st, mask, &mut actions);
        for a in &actions {
            let next = P::step(cx, &st, a, mask).ok()?;
            let to = fingerprint(&next);
            if to != from {
                g.steps.insert((from, to));
            }
            if g.states.insert(to) {
                queue.push_back(next);
            }
        }
    }
    Some(g)
}

/// Runs every guard mutant of model `P` (capped at `cap_factor` times the
/// original model's generated states) in its own configuration `entry`; a
/// mutant that is not killed there is checked again in each of `further`
/// (other configurations TLC and stateright check the same model in), and
/// is killed if one of them finds a violation.
pub fn mutate<P: Protocol>(
    entry: &ModelEntry,
    further: &[&ModelEntry],
    cap_factor: usize,
) -> Result<ModelMutations, ExploreError> {
    let base = Checked::<P>::from_entry(entry, None)?;
    let cx = base.cx.clone();
    let original = check::<P>(base, None);
    let original_graph = graph::<P>(&cx, None);
    let cap = original.states.saturating_mul(cap_factor).max(10_000);
    let mut results = Vec::new();
    for g in P::guards() {
        let own = own_verdict::<P>(entry, g, &cx, &original, &original_graph, cap)?;
        let further = further_verdict::<P>(own, further, g, cap)?;
        let verdict = stutter_verdict::<P>(further, entry, g, cap)?;
        results.push(MutantResult { guard: *g, verdict });
    }
    Ok(ModelMutations {
        model: P::NAME,
        source: P::SOURCE,
        original_states: original.unique_states,
        results,
    })
}

/// The verdict on guard `g`'s mutant once the further configurations have
/// checked it: `own` (the own configuration's verdict) unless one of them
/// kills it.
fn further_verdict<P: Protocol>(
    own: Verdict,
    further: &[&ModelEntry],
    g: &GuardInfo,
    cap: usize,
) -> Result<Verdict, ExploreError> {
    let mut verdict = own;
    for other in further {
        if verdict.killed() {
            break;
        }
        let model = Checked::<P>::from_entry(other, Some(g.id))?.tla_properties_only();
        if let Err(killed) = explore_mutant(model, cap, Some(other.cfg_file)) {
            verdict = killed;
        }
    }
    Ok(verdict)
}

/// The verdict on one guard's mutant (the guard of `action` whose TLA+
/// text is `conjunct`), as [`mutate`] gives it.
pub fn mutant_verdict<P: Protocol>(
    entry: &ModelEntry,
    further: &[&ModelEntry],
    action: &str,
    conjunct: &str,
    cap_factor: usize,
) -> Result<Option<Verdict>, ExploreError> {
    let Some(g) = P::guards()
        .iter()
        .find(|g| g.action == action && g.text == conjunct)
    else {
        return Ok(None);
    };
    let base = Checked::<P>::from_entry(entry, None)?;
    let cx = base.cx.clone();
    let original = check::<P>(base, None);
    let original_graph = graph::<P>(&cx, None);
    let cap = original.states.saturating_mul(cap_factor).max(10_000);
    let own = own_verdict::<P>(entry, g, &cx, &original, &original_graph, cap)?;
    let further = further_verdict::<P>(own, further, g, cap)?;
    stutter_verdict::<P>(further, entry, g, cap).map(Some)
}

/// The verdict once the no-stutter step check
/// ([`crate::explore::NO_STUTTER`]) has checked a mutant no TLA+ property
/// kills in any configuration (so a kill is credited to a TLA+ property
/// whenever one can make it): `verdict` unless the mutant takes an enabled
/// step that changes nothing. Only for the product's models; the check is
/// off for the fixtures.
fn stutter_verdict<P: Protocol>(
    verdict: Verdict,
    entry: &ModelEntry,
    g: &GuardInfo,
    cap: usize,
) -> Result<Verdict, ExploreError> {
    let model = Checked::<P>::from_entry(entry, Some(g.id))?;
    if verdict.killed() || !model.no_stutter {
        return Ok(verdict);
    }
    Ok(explore_mutant(model, cap, None).err().unwrap_or(verdict))
}

/// Explores mutant `model` up to `cap` generated states: its outcome, or
/// the verdict that kills it (a property fails, in further configuration
/// `config` or the model's own; or a step fails to evaluate, which TLC
/// reports as an error too).
fn explore_mutant<P: Protocol>(
    model: Checked<P>,
    cap: usize,
    config: Option<&'static str>,
) -> Result<Outcome<P>, Verdict> {
    match catch_unwind(AssertUnwindSafe(|| check::<P>(model, Some(cap)))) {
        Err(_) => Err(Verdict::KilledByEvaluation),
        Ok(o) => match &o.violation {
            Some((by, path)) => Err(Verdict::Killed {
                by: by.to_string(),
                depth: path.len(),
                config,
            }),
            None => Ok(o),
        },
    }
}

/// The verdict on guard `g`'s mutant in the model's own configuration.
fn own_verdict<P: Protocol>(
    entry: &ModelEntry,
    g: &GuardInfo,
    cx: &P::Constants,
    original: &Outcome<P>,
    original_graph: &Option<Graph>,
    cap: usize,
) -> Result<Verdict, ExploreError> {
    let model = Checked::<P>::from_entry(entry, Some(g.id))?.tla_properties_only();
    let o = match explore_mutant(model, cap, None) {
        Err(killed) => return Ok(killed),
        Ok(o) => o,
    };
    if o.truncated {
        return Ok(Verdict::Capped {
            states: o.unique_states,
        });
    }
    if o.unique_states != original.unique_states {
        return Ok(Verdict::Survived {
            states: o.unique_states,
        });
    }
    // Dropping a guard only adds steps, so equal counts mean equal state
    // sets.
    let mutant = catch_unwind(AssertUnwindSafe(|| graph::<P>(cx, Some(g.id))));
    Ok(match (&original_graph, mutant) {
        (Some(orig), Ok(Some(m))) => match m.steps.difference(&orig.steps).count() {
            0 => Verdict::Equivalent,
            steps => Verdict::NewSteps { steps },
        },
        _ => Verdict::KilledByEvaluation,
    })
}

/// The heading of the justification table in a model's notes file.
pub const JUSTIFICATION_HEADING: &str = "## Guard mutants that are not killed, and why";

/// One row of a justification table: a guard conjunct (by action and its
/// TLA+ text, so rows survive renumbering) and why its mutant is acceptable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Justification {
    pub action: String,
    pub conjunct: String,
    pub reason: String,
    /// Line in the notes file.
    pub line: usize,
}

/// Why a justification table could not be read.
#[derive(Debug, thiserror::Error)]
pub enum JustificationError {
    #[error("{file}: no `{JUSTIFICATION_HEADING}` section")]
    NoSection { file: String },
    #[error("{file}:{line}: expected `| action | `conjunct` | reason |`, found `{text}`")]
    BadRow {
        file: String,
        line: usize,
        text: String,
    },
    #[error("{file}:{line}: {action} has no guard `{conjunct}`")]
    UnknownGuard {
        file: String,
        line: usize,
        action: String,
        conjunct: String,
    },
    #[error("{file}:{line}: {action} `{conjunct}` is justified twice")]
    Duplicate {
        file: String,
        line: usize,
        action: String,
        conjunct: String,
    },
}

/// The justification table of one model.
#[derive(Clone, Debug, Default)]
pub struct Justifications {
    pub rows: Vec<Justification>,
}

/// Splits a Markdown table row on `|` not escaped as `\|`.
fn cells(row: &str) -> Vec<String> {
    let inner = row.trim().trim_start_matches('|');
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    let mut out = vec![String::new()];
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                chars.next();
                if let Some(last) = out.last_mut() {
                    last.push('|');
                }
            }
            '|' => out.push(String::new()),
            c => {
                if let Some(last) = out.last_mut() {
                    last.push(c);
                }
            }
        }
    }
    out.into_iter().map(|c| c.trim().to_string()).collect()
}

impl Justifications {
    /// Reads the table under [`JUSTIFICATION_HEADING`] in `text` (the notes
    /// file `file`) and checks every row names a guard of `guards`.
    pub fn parse(file: &str, text: &str, guards: &[GuardInfo]) -> Result<Self, JustificationError> {
        let mut lines = text.lines().enumerate();
        if !lines.any(|(_, l)| l.trim() == JUSTIFICATION_HEADING) {
            return Err(JustificationError::NoSection {
                file: file.to_string(),
            });
        }
        let mut rows: Vec<Justification> = Vec::new();
        for (n, l) in lines {
            let l = l.trim();
            if l.starts_with("## ") {
                break;
            }
            if !l.starts_with('|') {
                continue;
            }
            let c = cells(l);
            let bad = || JustificationError::BadRow {
                file: file.to_string(),
                line: n + 1,
                text: l.to_string(),
            };
            if c.len() != 3 {
                return Err(bad());
            }
            if c[0] == "action" || c[0].chars().all(|ch| ch == '-' || ch == ':') {
                continue;
            }
            let conjunct = c[1]
                .strip_prefix('`')
                .and_then(|x| x.strip_suffix('`'))
                .ok_or_else(bad)?
                .to_string();
            if c[2].is_empty() {
                return Err(bad());
            }
            let action = c[0].trim_matches('`').to_string();
            if !guards
                .iter()
                .any(|g| g.action == action && g.text == conjunct)
            {
                return Err(JustificationError::UnknownGuard {
                    file: file.to_string(),
                    line: n + 1,
                    action,
                    conjunct,
                });
            }
            if rows
                .iter()
                .any(|r| r.action == action && r.conjunct == conjunct)
            {
                return Err(JustificationError::Duplicate {
                    file: file.to_string(),
                    line: n + 1,
                    action,
                    conjunct,
                });
            }
            rows.push(Justification {
                action,
                conjunct,
                reason: c[2].clone(),
                line: n + 1,
            });
        }
        Ok(Self { rows })
    }

    /// The reason given for the mutant of `g`.
    pub fn reason(&self, g: &GuardInfo) -> Option<&str> {
        self.rows
            .iter()
            .find(|r| r.action == g.action && r.conjunct == g.text)
            .map(|r| r.reason.as_str())
    }
}

/// What the report found wrong with the justifications.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Audit {
    /// Mutants not killed and not justified: (model, action, conjunct).
    pub unjustified: Vec<(String, String, String)>,
    /// Justifications of mutants that are killed (stale rows).
    pub stale: Vec<(String, String, String)>,
}

/// Checks that exactly the mutants that are not killed are justified.
pub fn audit(all: &[(ModelMutations, Justifications)]) -> Audit {
    let mut a = Audit::default();
    for (m, j) in all {
        for r in &m.results {
            let key = || {
                (
                    m.model.to_string(),
                    r.guard.action.to_string(),
                    r.guard.text.to_string(),
                )
            };
            match (r.verdict.killed(), j.reason(&r.guard).is_some()) {
                (false, false) => a.unjustified.push(key()),
                (true, true) => a.stale.push(key()),
                _ => {}
            }
        }
    }
    a
}

/// Renders the report as Markdown.
pub fn render(all: &[(ModelMutations, Justifications)]) -> String {
    let mut s = String::from(
        "# Guard mutation report\n\n\
Generated by `cargo run --release -p lazaret-conformance --bin mutation-report`; do not edit.\n\n\
Each mutant drops one guard conjunct of one action (the generated `step` with\n\
that guard masked) and re-explores the model breadth-first with its `.cfg`\n\
constants, checking every `Inv_*` invariant on every state and every\n\
box-action property (`Live_* == [][A]_v`) on every step, as TLC does; a\n\
mutant that survives is explored again in each further configuration the\n\
model is checked in (`LazaretUnrouted.cfg` for `Lazaret`), named where it is\n\
killed there. **Killed**: an invariant, an action property, `TypeOK` or the\n\
evaluation of the model fails. **Equivalent**: the mutant reaches the same\n\
states with the same steps (state, different next state) in its own\n\
configuration: the model's `Next` relation is unchanged, so no property of\n\
any kind can tell (typically a guard restating another, or a dropped guard\n\
that only adds stuttering). **New steps**: the\n\
same states, more steps between them, and every action property holds.\n\
**Survived**: new states, every property holds. Liveness properties (`<>`,\n\
`~>`, fairness) are checked by TLC only and are not used here. Every mutant\n\
that is not killed has its reason in the model's notes file\n\
(`protocol/<Model>-notes.md`, section \"Guard mutants that are not killed,\n\
and why\").\n\n",
    );
    let total: usize = all.iter().map(|(m, _)| m.results.len()).sum();
    let killed: usize = all.iter().map(|(m, _)| m.killed()).sum();
    let equivalent: usize = all.iter().map(|(m, _)| m.equivalent()).sum();
    let _ = writeln!(
        s,
        "Overall: {killed} of {total} mutants killed ({}); {equivalent} are equivalent, so {killed} of {} non-equivalent mutants are killed ({}).\n",
        percent(killed, total),
        total - equivalent,
        percent(killed, total - equivalent)
    );
    let a = audit(all);
    for (model, action, text) in &a.unjustified {
        let _ = writeln!(
            s,
            "**Not justified:** {model} `{action}`: `{text}` is not killed and has no reason in the notes.\n"
        );
    }
    for (model, action, text) in &a.stale {
        let _ = writeln!(
            s,
            "**Stale justification:** {model} `{action}`: `{text}` is killed but the notes give a reason.\n"
        );
    }
    for (m, j) in all {
        let non_equivalent = m.results.len() - m.equivalent();
        let _ = writeln!(
            s,
            "## {} (`{}`)\n\n{} states; {} of {} mutants killed ({}); {} equivalent; {} of {} non-equivalent killed ({}).\n",
            m.model,
            m.source,
            m.original_states,
            m.killed(),
            m.results.len(),
            percent(m.killed(), m.results.len()),
            m.equivalent(),
            m.killed(),
            non_equivalent,
            percent(m.killed(), non_equivalent)
        );
        s.push_str("| guard | action | # | line | conjunct | verdict | reason |\n| --- | --- | --- | --- | --- | --- | --- |\n");
        for r in &m.results {
            let verdict = match &r.verdict {
                Verdict::Killed {
                    by,
                    depth,
                    config: None,
                } => format!("killed by `{by}` at depth {depth}"),
                Verdict::Killed {
                    by,
                    depth,
                    config: Some(cfg),
                } => format!("killed by `{by}` at depth {depth} in `{cfg}`"),
                Verdict::KilledByEvaluation => "killed: evaluation error".to_string(),
                Verdict::Equivalent => "**equivalent** (same states and steps)".to_string(),
                Verdict::NewSteps { steps } => format!("**new steps** only ({steps})"),
                Verdict::Survived { states } => format!("**survived** ({states} states)"),
                Verdict::Capped { states } => format!("**survived** (capped at {states} states)"),
            };
            let reason = if r.verdict.killed() {
                String::new()
            } else {
                j.reason(&r.guard).unwrap_or("**none**").replace('|', "\\|")
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | `{}` | {verdict} | {reason} |",
                r.guard.id.0,
                r.guard.action,
                r.guard.index,
                r.guard.line,
                r.guard.text.replace('|', "\\|")
            );
        }
        s.push('\n');
    }
    s
}

fn percent(a: usize, b: usize) -> String {
    if b == 0 {
        return "n/a".to_string();
    }
    let tenths = a * 1000 / b;
    format!("{}.{}%", tenths / 10, tenths % 10)
}

/// The id of the guard of `action` at 1-based `index` (for tests).
pub fn guard_id<P: Protocol>(action: &str, index: u16) -> Option<GuardId> {
    P::guards()
        .iter()
        .find(|g| g.action == action && g.index == index)
        .map(|g| g.id)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GUARDS: &[GuardInfo] = &[
        GuardInfo {
            id: GuardId(0),
            action: "A",
            index: 1,
            line: 3,
            text: "x = 1",
        },
        GuardInfo {
            id: GuardId(1),
            action: "B",
            index: 1,
            line: 7,
            text: "x = 1 \\/ y = 2",
        },
    ];

    #[test]
    fn justification_rows_are_keyed_by_action_and_text() {
        let text = format!(
            "# Notes\n\n{JUSTIFICATION_HEADING}\n\n| action | conjunct | reason |\n| --- | --- | --- |\n| `B` | `x = 1 \\/ y = 2` | restates guard 2 \\| as written |\n\n## Next\n| A | `x = 1` | ignored: another section |\n"
        );
        let parsed = Justifications::parse("n.md", &text, GUARDS);
        let j = parsed.as_ref().map_err(ToString::to_string);
        assert_eq!(
            j.clone().map(|j| j.rows.clone()),
            Ok(vec![Justification {
                action: "B".into(),
                conjunct: "x = 1 \\/ y = 2".into(),
                reason: "restates guard 2 | as written".into(),
                line: 7,
            }])
        );
        assert_eq!(j.ok().and_then(|j| j.reason(&GUARDS[0])), None);
    }

    #[test]
    fn a_row_naming_no_guard_is_refused_with_its_line() {
        let text = format!("{JUSTIFICATION_HEADING}\n| A | `x = 2` | why |\n");
        let err = Justifications::parse("n.md", &text, GUARDS).map_err(|e| e.to_string());
        assert_eq!(err.err().as_deref(), Some("n.md:2: A has no guard `x = 2`"));
        let text = format!("{JUSTIFICATION_HEADING}\n| A | `x = 1` |  |\n");
        assert!(matches!(
            Justifications::parse("n.md", &text, GUARDS),
            Err(JustificationError::BadRow { line: 2, .. })
        ));
        assert!(matches!(
            Justifications::parse("n.md", "# nothing\n", GUARDS),
            Err(JustificationError::NoSection { .. })
        ));
    }

    fn notes_of<P: Protocol>() -> Result<Justifications, String> {
        let notes = P::SOURCE.replace(".tla", "-notes.md");
        let text = std::fs::read_to_string(crate::workspace_root().join(&notes))
            .map_err(|e| format!("{notes}: {e}"))?;
        Justifications::parse(&notes, &text, P::guards()).map_err(|e| e.to_string())
    }

    #[test]
    fn the_models_notes_justify_existing_guards_only() {
        // Every row names a guard the generator emitted (the full audit
        // against the verdicts is the mutation-report binary's: minutes).
        use lazaret_generated::{lazaret, prepared_lower};
        let l = notes_of::<lazaret::Model>();
        assert!(l.as_ref().is_ok_and(|j| !j.rows.is_empty()), "{l:?}");
        let p = notes_of::<prepared_lower::Model>();
        assert!(p.as_ref().is_ok_and(|j| !j.rows.is_empty()), "{p:?}");
    }

    #[test]
    fn audit_finds_unjustified_and_stale_rows() {
        let m = ModelMutations {
            model: "M",
            source: "M.tla",
            original_states: 1,
            results: vec![
                MutantResult {
                    guard: GUARDS[0],
                    verdict: Verdict::Equivalent,
                },
                MutantResult {
                    guard: GUARDS[1],
                    verdict: Verdict::Killed {
                        by: "Inv".into(),
                        depth: 1,
                        config: None,
                    },
                },
            ],
        };
        let j = Justifications {
            rows: vec![Justification {
                action: "B".into(),
                conjunct: "x = 1 \\/ y = 2".into(),
                reason: "r".into(),
                line: 1,
            }],
        };
        let a = audit(&[(m, j)]);
        assert_eq!(
            a.unjustified,
            vec![("M".to_string(), "A".to_string(), "x = 1".to_string())]
        );
        assert_eq!(
            a.stale,
            vec![(
                "M".to_string(),
                "B".to_string(),
                "x = 1 \\/ y = 2".to_string()
            )]
        );
    }
}
