//! A `stateright::Model` over a generated [`Protocol`], and a breadth-first
//! check of it with the `.cfg` constants.
//!
//! A stateright state is exactly the generated `State` (every TLA+ variable,
//! no symmetry reduction, no view), so its unique-state count is TLC's
//! distinct-state count. An update that leaves its variable's `TypeOK`
//! range becomes an `OutOfDomain` node, reported as a `TypeOK` violation.
//! Every step is also checked against the box-action `Live_*` properties
//! (`[][A]_v`, as TLC checks them on every transition); a step that
//! falsifies one leads to a `BadStep` node instead of its successor. So does
//! an enabled step that changes nothing ([`NO_STUTTER`]): TLA+ cannot state
//! it (every `[][A]_v` admits stuttering), but the product takes every
//! enabled step it decides on as a durable step, and one that changes
//! nothing would be a trace line without an effect, or a release loop that
//! never ends. Neither kind of node exists when every property holds, so the
//! unique-state count stays TLC's. Liveness properties (`<>`, `~>`,
//! fairness) are TLC's only.

use std::time::{Duration, Instant};

use lazaret_generated::support::{Cfg, CfgError, GuardId, Protocol, StepError};
use lazaret_generated::ModelEntry;
use stateright::{Checker, Model, Property};

/// The step check no TLA+ property can express: no enabled action but
/// `Terminated` (the terminal stuttering step of every model, README
/// "Terminal states") leaves the state unchanged. Checked for the
/// product's models (under [`PRODUCT_MODELS`]), whose steps the product
/// takes; a textbook fixture may stutter (two-phase commit's resource
/// manager receives an abort it already took).
pub const NO_STUTTER: &str = "Step_NoStutter";

/// Where the product's models live (the fixtures are the codegen's).
pub const PRODUCT_MODELS: &str = "protocol/";

/// The action that is a stuttering step by definition.
const TERMINATED: &str = "Terminated";

/// A node of the explored graph.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Node<S> {
    State(S),
    /// A step failed outside the guards (a `TypeOK` range violation).
    OutOfDomain(StepError),
    /// A step to `next` that falsifies the action property `property`.
    BadStep {
        property: &'static str,
        next: S,
    },
}

/// A generated model as a stateright model, optionally with one guard masked.
#[derive(Debug)]
pub struct Checked<P: Protocol> {
    pub cx: P::Constants,
    pub mask: Option<GuardId>,
    /// Whether a stuttering step is a violation ([`NO_STUTTER`]).
    pub no_stutter: bool,
}

/// Why a check could not start.
#[derive(Debug, thiserror::Error)]
pub enum ExploreError {
    #[error("{file}: {source}")]
    Cfg {
        file: &'static str,
        #[source]
        source: CfgError,
    },
    #[error("Init of {model} fails: {source}")]
    Init {
        model: &'static str,
        #[source]
        source: StepError,
    },
}

impl<P: Protocol> Checked<P> {
    /// The model with the constants of its `.cfg`.
    pub fn from_entry(entry: &ModelEntry, mask: Option<GuardId>) -> Result<Self, ExploreError> {
        let cfg =
            Cfg::parse(entry.cfg_file, entry.cfg_text).map_err(|source| ExploreError::Cfg {
                file: entry.cfg_file,
                source,
            })?;
        let cx = P::constants(&cfg).map_err(|source| ExploreError::Cfg {
            file: entry.cfg_file,
            source,
        })?;
        P::init(&cx).map_err(|source| ExploreError::Init {
            model: P::NAME,
            source,
        })?;
        let no_stutter = entry.tla.starts_with(PRODUCT_MODELS);
        Ok(Self {
            cx,
            mask,
            no_stutter,
        })
    }

    /// The name of the first invariant `node` violates (`TypeOK` for a
    /// domain violation).
    pub fn violated(&self, node: &Node<P::State>) -> Option<&'static str> {
        match node {
            Node::OutOfDomain(_) => Some("TypeOK"),
            Node::BadStep { property, .. } => Some(property),
            Node::State(s) => P::invariants()
                .iter()
                .find(|inv| !(inv.holds)(&self.cx, s))
                .map(|inv| inv.name),
        }
    }

    /// The same model checked against its TLA+ properties only, without
    /// the no-stutter step check (the mutation report credits a kill to a
    /// TLA+ property first).
    pub fn tla_properties_only(self) -> Self {
        Self {
            no_stutter: false,
            ..self
        }
    }

    fn all_hold(model: &Self, node: &Node<P::State>) -> bool {
        model.violated(node).is_none()
    }
}

impl<P: Protocol> Model for Checked<P> {
    type State = Node<P::State>;
    type Action = P::Action;

    fn init_states(&self) -> Vec<Self::State> {
        match P::init(&self.cx) {
            Ok(s) => vec![Node::State(s)],
            Err(e) => vec![Node::OutOfDomain(e)],
        }
    }

    fn actions(&self, state: &Self::State, actions: &mut Vec<Self::Action>) {
        if let Node::State(s) = state {
            P::enabled_actions(&self.cx, s, self.mask, actions);
        }
    }

    fn next_state(&self, last: &Self::State, action: Self::Action) -> Option<Self::State> {
        let Node::State(s) = last else { return None };
        match P::step(&self.cx, s, &action, self.mask) {
            Ok(n) if self.no_stutter && n == *s && P::action_name(&action) != TERMINATED => {
                Some(Node::BadStep {
                    property: NO_STUTTER,
                    next: n,
                })
            }
            Ok(n) => Some(
                match P::action_properties()
                    .iter()
                    .find(|p| !(p.holds)(&self.cx, s, &n))
                {
                    Some(p) => Node::BadStep {
                        property: p.name,
                        next: n,
                    },
                    None => Node::State(n),
                },
            ),
            Err(e @ StepError::Domain { .. }) => Some(Node::OutOfDomain(e)),
            // Not reachable: `actions` only lists enabled actions.
            Err(StepError::GuardFailed { .. }) => None,
        }
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![Property::always("invariants", Self::all_hold)]
    }
}

/// The outcome of a breadth-first check.
#[derive(Clone, Debug)]
pub struct Outcome<P: Protocol> {
    pub unique_states: usize,
    pub states: usize,
    pub max_depth: usize,
    pub wall: Duration,
    /// The violated invariant and the path to it (actions from `Init`).
    pub violation: Option<(&'static str, Vec<P::Action>)>,
    /// Whether exploration stopped at the `limit` before finishing.
    pub truncated: bool,
}

/// Explores every reachable state breadth-first (one thread), stopping at
/// the first invariant violation or after about `limit` generated states
/// (stateright's target counts every generated successor, repeats included).
pub fn check<P: Protocol>(model: Checked<P>, limit: Option<usize>) -> Outcome<P> {
    let start = Instant::now();
    let mut builder = model.checker();
    if let Some(l) = limit {
        builder = builder.target_state_count(l);
    }
    let checker = builder.spawn_bfs().join();
    let wall = start.elapsed();
    let violation = checker.discovery("invariants").map(|path| {
        let last = path.last_state().clone();
        let name = checker.model().violated(&last).unwrap_or("invariants");
        (name, path.into_actions())
    });
    let generated = checker.state_count();
    Outcome {
        unique_states: checker.unique_state_count(),
        states: generated,
        max_depth: checker.max_depth(),
        wall,
        truncated: violation.is_none() && limit.is_some_and(|l| generated >= l),
        violation,
    }
}

/// The outcome of a random simulation.
#[derive(Clone, Debug)]
pub struct Simulated<P: Protocol> {
    /// States visited along the behaviors (repeats included).
    pub states: usize,
    pub max_depth: usize,
    pub wall: Duration,
    /// The violated invariant or action property and the path to it.
    pub violation: Option<(&'static str, Vec<P::Action>)>,
}

/// Random behaviors of at most `max_depth` steps from `seed` (each step
/// chosen uniformly among the enabled actions), until about `states`
/// states were visited; every invariant and action property is checked on
/// every state and step, as in [`check`]. For constants too large to
/// explore exhaustively.
pub fn simulate<P: Protocol>(
    model: Checked<P>,
    seed: u64,
    max_depth: usize,
    states: usize,
) -> Simulated<P> {
    let start = Instant::now();
    let checker = model
        .checker()
        .target_max_depth(max_depth)
        .target_state_count(states)
        .spawn_simulation(seed, stateright::UniformChooser)
        .join();
    let violation = checker.discovery("invariants").map(|path| {
        let last = path.last_state().clone();
        let name = checker.model().violated(&last).unwrap_or("invariants");
        (name, path.into_actions())
    });
    Simulated {
        states: checker.state_count(),
        max_depth: checker.max_depth(),
        wall: start.elapsed(),
        violation,
    }
}
