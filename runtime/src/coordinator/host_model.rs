//! The Host Coordinator's model core (spec "Document
//! authority"): every lifecycle decision of one Host Coordinator process is
//! a step of the generated Lazaret model, sized for this one process.
//!
//! The effects side asks `check` before it performs a step's effect and
//! `take`s the step once the effect is done (a durable write, a spawn, a
//! reply); a disabled step is an error, never applied. Each taken step is a
//! trace line; the header line carries the constants so `lazaret trace
//! replay` checks the run against the same model.
//!
//! Sizing: this coordinator and [`SUCCESSORS`] successors (an HC runs at
//! most one generation and exits; a coordinator that finds the generation
//! of one that died continues that generation's trace as the next free
//! successor, so the recovery replays from `Init` with the rest of the
//! generation's history), `SESSION_SLOTS` session slots, `MaxGen` 1 (the
//! model's generation counter counts this trace's generations; the real
//! generation ID is each line's `generation`), `MaxUnackedChunks` 8 (spec
//! 3.8), and `RequiredRoles` by how the Domain serves its workspace
//! ([`Routing`]): every role when the ignored-path router serves it (the
//! specification's own `protocol/Lazaret.cfg`), every role but GitRouting
//! when it does not (`protocol/LazaretUnrouted.cfg`); TLC checks both.

use lazaret_generated::lazaret::{
    Action, Constants, CoordinatorsId, Decision, Hc, LockHolder, Model, Part, ProcSlots, Roles, Rs,
    Runsc, Sess, SessionsId, Slot, State,
};
use lazaret_generated::support::{Cfg, CfgError, Protocol, StepError};
use lazaret_generated::{ModelEntry, LAZARET_UNROUTED, MODELS};
use serde_json::{json, Value};
use std::collections::BTreeMap;

use crate::core::{Core, CoreError};
use crate::replay::one_of;
use crate::trace::{header_cfg, parse_line, TraceError, TraceLine, HEADER_ACTION};

/// Release order (the model's `ReleaseRank`).
const RELEASE_ORDER: [Roles; 7] = [
    Roles::Publication,
    Roles::Sandbox,
    Roles::Network,
    Roles::Helper,
    Roles::GitRouting,
    Roles::StateAnchor,
    Roles::PreparedLower,
];

/// How the Domain serves its workspace, which decides the roles its
/// generations acquire (spec 3.5: `isolate_gitignored`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Routing {
    /// Through the ignored-path router: the GitRouting participant, its
    /// daemon and mount, are acquired with the rest.
    Routed,
    /// A plain bidirectional workspace: no GitRouting participant.
    Unrouted,
}

impl Routing {
    /// The configuration whose `RequiredRoles` this routing acquires.
    fn configuration(self) -> Result<&'static ModelEntry, HostModelError> {
        match self {
            Self::Unrouted => Ok(&LAZARET_UNROUTED),
            Self::Routed => MODELS
                .iter()
                .find(|m| m.cfg_file == "protocol/Lazaret.cfg")
                .ok_or(HostModelError::NoConfiguration("protocol/Lazaret.cfg")),
        }
    }
}

/// Concurrent sessions one Domain serves (each is a model session slot).
pub const SESSION_SLOTS: u16 = 16;

/// Coordinators after the first that may continue a generation's trace
/// (each one that dies mid-recovery uses one).
pub const SUCCESSORS: usize = 3;

/// How a lock-race loser's trace names the coordinator holding the lock
/// (see [`HostModel::lock_race_loser`]).
pub const LOCK_HOLDER: &str = "holder";

/// Result chunks HC retains unacknowledged (spec 3.8).
const MAX_UNACKED_CHUNKS: i64 = 8;

/// Why the model core could not be built.
#[derive(Debug, thiserror::Error)]
pub enum HostModelError {
    #[error("{file}: {source}")]
    Cfg {
        file: &'static str,
        #[source]
        source: CfgError,
    },
    #[error("the initial state: {0}")]
    Init(#[from] StepError),
    #[error("the trace to continue: {0}")]
    Trace(#[from] TraceError),
    #[error("the trace to continue, line {line}: {detail}")]
    Resume { line: usize, detail: String },
    #[error("the state rebuilt from the durable record violates {0}")]
    Rebuilt(&'static str),
    #[error("no model configuration {0} in this build")]
    NoConfiguration(&'static str),
}

/// The durable part of the model state: what the Domain Store records of a
/// generation (`decision`, and `part` and `slot` indexed like `Roles::ALL`
/// and `ProcSlots::ALL`), and what its Session Terminal rows say of
/// `termsLeft`, and of each session slot's terminal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DurableView {
    pub decision: Decision,
    pub part: Vec<Part>,
    pub slot: Vec<Slot>,
    /// `termsLeft` as the observing process reads it (spec 3.4): some
    /// terminal row of the generation is not clean although the observer
    /// serves no session of it. The serving coordinator's own live
    /// sessions do not count; for a process that serves none (a recovery),
    /// every unclean row does. `None`: not observed.
    pub terms_left: Option<bool>,
    /// Per session slot (by its model value's name), the Session Terminal
    /// row of the session the observer serves there (observed as
    /// [`TERMINAL_ROW`]; replay checks it is one the model's `sess[s]`
    /// allows, [`TerminalRow::allowed`]). A process that serves no session
    /// sees every slot [`TerminalRow::None`]. `None`: not observed.
    pub rows: Option<BTreeMap<String, TerminalRow>>,
}

/// A served session's Session Terminal row as a trace line observes it
/// (schemas.md "Session terminal ownership").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TerminalRow {
    /// No row, a clean one, or no session served in the slot.
    None,
    /// Intent with nothing of the terminal acquired yet.
    BareIntent,
    /// An interactive session's Intent with some evidence (a committed
    /// exec client).
    Intent,
    /// A piped session's Intent with some evidence: its row stays Intent
    /// while it runs (the running state records a PTY, which a piped
    /// session has not). The observer knows which sessions it serves are
    /// piped; the model does not.
    PipedIntent,
    Running,
    ReleaseIntent,
}

impl TerminalRow {
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "None",
            Self::BareIntent => "BareIntent",
            Self::Intent => "Intent",
            Self::PipedIntent => "PipedIntent",
            Self::Running => "Running",
            Self::ReleaseIntent => "ReleaseIntent",
        }
    }

    /// The rows the model's session phase allows, the model's own first.
    /// Here the refinement mapping is a relation, not a function: the
    /// model does not say whether a session is piped or whether anything
    /// of its terminal was acquired, and the schema gives those different
    /// rows for one phase (docs/durable-state.md "Trace validation"):
    /// - Starting: the terminal intent, bare or with an interactive
    ///   session's exec client (a piped session registers in the loop turn
    ///   that started its exec client, so no step sees it acquiring);
    /// - Registered: Running, or a piped session's Intent (Running records
    ///   a PTY, which a piped session has not), never an interactive
    ///   session's Intent;
    /// - Closing: ReleaseIntent, or a bare intent, which is its own
    ///   release intent (nothing to release; cleaned after runtime
    ///   absence).
    pub fn allowed(s: Sess) -> &'static [Self] {
        match s {
            Sess::Starting => &[Self::BareIntent, Self::Intent],
            Sess::Registered => &[Self::Running, Self::PipedIntent],
            Sess::Closing => &[Self::ReleaseIntent, Self::BareIntent],
            _ => &[Self::None],
        }
    }
}

/// The session phases whose terminal has a durable row that is not clean
/// (protocol/Lazaret.tla `TerminalRecorded`).
fn terminal_recorded(s: Sess) -> bool {
    matches!(s, Sess::Starting | Sess::Registered | Sess::Closing)
}

/// The observed key of [`DurableView::rows`]; replay derives the same key
/// from the model's `sess` ([`with_derived_variables`]).
pub const TERMINAL_ROW: &str = "terminalRow";

/// Adds to a Lazaret state view (`state_view`'s encoding) the variables a
/// trace line observes that are functions of the state rather than
/// variables: [`TERMINAL_ROW`], for each session slot the rows `sess[s]`
/// allows, as `{"oneOf": [...]}` (replay's alternatives). The one place
/// the refinement mapping derives a value (docs/durable-state.md "Trace
/// validation").
pub fn with_derived_variables(mut view: Value) -> Value {
    let rows: Option<serde_json::Map<String, Value>> =
        view.get("sess").and_then(Value::as_object).map(|sess| {
            sess.iter()
                .map(|(slot, phase)| {
                    let allowed = phase
                        .as_str()
                        .and_then(Sess::from_name)
                        .map_or(&[][..], TerminalRow::allowed);
                    let names = allowed.iter().map(|r| Value::from(r.name())).collect();
                    (slot.clone(), one_of(names))
                })
                .collect()
        });
    if let (Some(rows), Value::Object(vars)) = (rows, &mut view) {
        vars.insert(TERMINAL_ROW.to_owned(), Value::Object(rows));
    }
    view
}

impl DurableView {
    /// The view as a trace line's `observed`: the variables `decision`,
    /// `part` and `slot` in `state_view`'s encoding, so replay compares
    /// them with the model's successor variable by variable.
    pub fn observed(&self) -> Value {
        let mut view = self.durable_variables();
        if let Value::Object(vars) = &mut view {
            if let Some(left) = self.terms_left {
                vars.insert("termsLeft".to_owned(), Value::from(left));
            }
            if let Some(rows) = &self.rows {
                let slots = rows
                    .iter()
                    .map(|(slot, r)| (slot.clone(), Value::from(r.name())))
                    .collect();
                vars.insert(TERMINAL_ROW.to_owned(), Value::Object(slots));
            }
        }
        view
    }

    /// The same view with the terminal rows unobserved: a step the dead
    /// coordinator took and recovery records for it (`HostModel::catch_up`)
    /// was observed by a process that did not serve its sessions.
    pub fn without_terminals(&self) -> Self {
        Self {
            terms_left: None,
            rows: None,
            ..self.clone()
        }
    }

    fn durable_variables(&self) -> Value {
        let named = |names: Vec<&'static str>, values: Vec<&'static str>| {
            Value::Object(
                names
                    .into_iter()
                    .zip(values)
                    .map(|(k, v)| (k.to_owned(), Value::from(v)))
                    .collect(),
            )
        };
        json!({
            "decision": self.decision.name(),
            "part": named(
                Roles::ALL.iter().map(|r| r.name()).collect(),
                self.part.iter().map(|p| p.name()).collect(),
            ),
            "slot": named(
                ProcSlots::ALL.iter().map(|s| s.name()).collect(),
                self.slot.iter().map(|s| s.name()).collect(),
            ),
        })
    }
}

/// What the Host Coordinator established about the constitutive processes
/// at a step, by their exact pidfs identities: each `None` where the step
/// established nothing about that process. A trace line carries the
/// established ones in `observed` next to the durable view, so replay
/// compares them with the model's `rs` and `runsc`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcessView {
    pub rs: Option<Rs>,
    pub runsc: Option<Runsc>,
}

impl ProcessView {
    /// The Runtime Supervisor observed as `rs`.
    pub fn supervisor(rs: Rs) -> Self {
        Self {
            rs: Some(rs),
            runsc: None,
        }
    }

    /// Attached runsc observed as `runsc`.
    pub fn attached_runsc(runsc: Runsc) -> Self {
        Self {
            rs: None,
            runsc: Some(runsc),
        }
    }

    fn is_empty(&self) -> bool {
        self.rs.is_none() && self.runsc.is_none()
    }
}

/// What this coordinator saw of its runtime ending while it held the lease,
/// each process proved absent by its exact identity where it says so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuntimeSeen {
    /// The Runtime Supervisor still runs; attached runsc is proved absent.
    RunscGone,
    /// The Runtime Supervisor has exited and both are proved absent:
    /// whether it was killed by a signal (rather than exiting through its
    /// own stop, which ends the sandbox first), and whether attached runsc
    /// was still present once the supervisor was gone.
    Ended {
        supervisor_signalled: bool,
        runsc_outlived: bool,
    },
}

/// The model core of one Host Coordinator process.
#[derive(Debug)]
pub struct HostModel {
    core: Core<Model>,
    me: CoordinatorsId,
    /// The state the trace starts from: `Init`, or a state rebuilt from the
    /// durable record ([`HostModel::recovered`]).
    start: Option<State>,
}

impl HostModel {
    /// A core in the model's initial state. `coordinator` names this
    /// process in the trace; `generation` is the Domain generation its
    /// trace lines carry; `routing` decides the roles it acquires.
    pub fn new(
        coordinator: String,
        generation: u64,
        routing: Routing,
    ) -> Result<Self, HostModelError> {
        Ok(Self {
            core: Core::new(constants(coordinator, routing)?, generation)?,
            me: CoordinatorsId(0),
            start: None,
        })
    }

    /// A core for recovering generation `generation` whose trace is gone
    /// (for example after a reboot emptied the runtime directory): the
    /// state is rebuilt from what the Domain Store records (`durable`) —
    /// the dead coordinator `dead` holding the lock and serving, the
    /// runtime present exactly where its process slots are still recorded,
    /// no session — and must satisfy every invariant. The trace then
    /// records this start state in its header, and this process is the
    /// first successor. The generation was routed if its GitRouting
    /// participant was ever recorded; one that died before that step is
    /// equally the state of either routing, and only released.
    pub fn recovered(
        dead: String,
        generation: u64,
        durable: &DurableView,
    ) -> Result<Self, HostModelError> {
        let routing = match durable.part.get(Roles::GitRouting.index()) {
            Some(Part::None) | None => Routing::Unrouted,
            Some(_) => Routing::Routed,
        };
        let cx = constants(dead, routing)?;
        let mut st = Model::init(&cx)?;
        let c = CoordinatorsId(0);
        st.hc[c.index()] = Hc::Serving;
        st.lock_holder = LockHolder::Id(c);
        // The serving leader has acted for the Domain (OR-1 actor identity).
        st.actor = LockHolder::Id(c);
        st.decision = durable.decision;
        st.gen_ = 1;
        st.part.clone_from(&durable.part);
        st.slot.clone_from(&durable.slot);
        let held = |ps: ProcSlots| durable.slot.get(ps.index()) != Some(&Slot::Unassigned);
        st.rs = if held(ProcSlots::SandboxRuntimeSupervisor) {
            Rs::Running
        } else {
            Rs::Absent
        };
        st.runsc = if held(ProcSlots::SandboxAttachedRunsc) {
            Runsc::Running
        } else {
            Runsc::Absent
        };
        // The dead coordinator's session terminals, as its rows say: every
        // unclean one is left over (no session is served), and the
        // recovery cleans them after runtime absence
        // (`CleanSessionTerminals`). Unobserved, a live generation is taken
        // to have some.
        st.terms_left = durable
            .terms_left
            .unwrap_or(st.decision != Decision::Vacant);
        let core = Core::from_state(cx, generation, st.clone()).map_err(HostModelError::Rebuilt)?;
        Ok(Self {
            core,
            me: CoordinatorsId(1),
            start: Some(st),
        })
    }

    /// A core for a coordinator whose non-blocking flock found the Domain
    /// lock held (spec 3.3, OR-1). A loser never opens the Domain Store, so
    /// it cannot know who holds the lock or which generation runs: the
    /// trace's first coordinator is the holder, named [`LOCK_HOLDER`], this
    /// process (`coordinator`) is the second, and the lines carry
    /// generation 0.
    pub fn lock_race_loser(coordinator: String) -> Result<Self, HostModelError> {
        // A loser acquires nothing: the specification's roles.
        let mut cx = constants(LOCK_HOLDER.to_owned(), Routing::Routed)?;
        let me = CoordinatorsId(1);
        if let Some(name) = cx.coordinators.get_mut(me.index()) {
            *name = coordinator;
        }
        Ok(Self {
            core: Core::new(cx, 0)?,
            me,
            start: None,
        })
    }

    /// The steps that record a lost lock race, decided from the model
    /// state: the holder's `AcquireDomainLock` unless the model has a
    /// holder already (what the failed flock observed: another process
    /// holds the lock), then this coordinator's `LoseDomainLockRace`, after
    /// which it exits without opening the Domain Store. Empty when this
    /// coordinator is not a candidate (`Idle`).
    pub fn lock_race_lost(&self) -> Vec<Action> {
        let st = self.state();
        let me = self.me;
        if st.hc.get(me.index()) != Some(&Hc::Idle) {
            return Vec::new();
        }
        let mut steps = Vec::new();
        if st.lock_holder == LockHolder::None {
            let Some(holder) = CoordinatorsId::all(self.core.constants().coordinators.len())
                .find(|c| *c != me && st.hc.get(c.index()) == Some(&Hc::Idle))
            else {
                return Vec::new();
            };
            steps.push(Action::AcquireDomainLock { c: holder });
        }
        steps.push(Action::LoseDomainLockRace { c: me });
        steps
    }

    /// Continues the trace `text` of a generation whose coordinator died:
    /// every complete line is replayed (a last line cut off by the crash is
    /// dropped), and this process becomes the first successor that has not
    /// run yet. Returns the core and how many lines (header included) it
    /// kept.
    pub fn resume(file: &str, text: &str) -> Result<(Self, usize), HostModelError> {
        let lines: Vec<&str> = text.lines().collect();
        let header = lines.first().ok_or(TraceError::Empty {
            file: file.to_string(),
        })?;
        let header = parse_line(file, 1, header, false)?;
        let bad = |line: usize, detail: String| HostModelError::Resume { line, detail };
        if header.step != 0 || header.action != HEADER_ACTION {
            return Err(bad(1, "the first line is not the step-0 header".into()));
        }
        let constants = header
            .constants
            .as_ref()
            .ok_or_else(|| bad(1, "the header has no constants".into()))?;
        let cx = header_cfg(constants)
            .and_then(|c| Constants::from_cfg(&c).map_err(|e| e.to_string()))
            .map_err(|e| bad(1, e))?;
        let mut core: Core<Model> = Core::new(cx, header.generation)?;
        let mut kept = 1;
        for (i, text) in lines.iter().enumerate().skip(1) {
            let line = i + 1;
            let t = match parse_line(file, line, text, line == lines.len()) {
                Ok(t) => t,
                // The coordinator died while appending its last line.
                Err(TraceError::Truncated { .. }) => break,
                Err(e) => return Err(e.into()),
            };
            let params: Vec<(&str, &str)> = t
                .params
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let action = Model::parse_action(core.constants(), &t.action, &params)
                .map_err(|e| bad(line, e.to_string()))?;
            core.take("replay", &action)
                .map_err(|e| bad(line, e.to_string()))?;
            kept += 1;
        }
        let me = CoordinatorsId::all(core.constants().coordinators.len())
            .skip(1)
            .find(|c| core.state().hc.get(c.index()) == Some(&Hc::Idle))
            .ok_or_else(|| bad(kept, "every successor of this generation has run".into()))?;
        Ok((
            Self {
                core,
                me,
                start: None,
            },
            kept,
        ))
    }

    /// The durable part of the current state, as the serving coordinator
    /// observes it.
    pub fn durable(&self) -> DurableView {
        durable_of(self.core.constants(), self.state())
    }

    /// The durable part of the current state as a process that serves none
    /// of its sessions observes it (a recovery reading a dead
    /// coordinator's generation): the terminals of the sessions recorded
    /// in the state count as left (the model's `TerminalsUnclean`).
    pub fn durable_unserved(&self) -> DurableView {
        unserved_of(self.core.constants(), self.state())
    }

    /// A coordinator that died after the durable effect of a step and
    /// before its trace line leaves the Domain Store one step ahead of the
    /// trace. Returns the one step of `c` enabled now whose durable result
    /// is `store` (read by a process serving none of its sessions, so a
    /// terminal intent written or cleaned untraced shows); `None` when
    /// there is none or more than one (the trace and the store then
    /// disagree in a way recovery must not guess at).
    pub fn catch_up(&self, c: CoordinatorsId, store: &DurableView) -> Option<Action> {
        let cx = self.core.constants();
        let name = cx.coordinators.get(c.index())?;
        let mut enabled = Vec::new();
        Model::enabled_actions(cx, self.state(), None, &mut enabled);
        let mut found = enabled.into_iter().filter(|a| {
            Model::action_params(cx, a)
                .iter()
                .any(|(k, v)| *k == "c" && v == name)
                && self.core.check(a).is_ok()
                && Model::step(cx, self.state(), a, None)
                    .is_ok_and(|next| unserved_of(cx, &next) == *store)
        });
        let first = found.next()?;
        found.next().is_none().then_some(first)
    }

    /// The next step of a release (teardown, failed launch or recovery),
    /// decided from the model state alone: release intent for every live
    /// snapshot in release order (publication first) except the
    /// prepared-lower lease, `ShutdownRuntime` while RS runs, then in
    /// release order `CleanParticipant` / `CleanBareIntent`, with
    /// `CommitAnchorCleanLeaseReleaseIntent` recording the lease's release
    /// intent as the anchors become clean (spec 3.6 unmount and release step 3;
    /// without anchors the lease gets its own `RecordReleaseIntent`),
    /// `CleanSessionTerminals` when session terminals are left, then
    /// `RetireGeneration`. `None` once the generation is retired (or when
    /// no release is under way).
    pub fn next_release(&self) -> Option<Action> {
        let c = self.me;
        let st = self.state();
        if !matches!(st.decision, Decision::TearingDown | Decision::Recovering) {
            return None;
        }
        let part = |r: Roles| st.part[r.index()];
        let live = |r: Roles| {
            matches!(
                part(r),
                Part::Acquiring | Part::LeaseHeld | Part::Prepared | Part::Committed
            )
        };
        if let Some(r) = RELEASE_ORDER
            .into_iter()
            .find(|r| *r != Roles::PreparedLower && live(*r))
        {
            return Some(Action::RecordReleaseIntent { c, r });
        }
        if st.rs == Rs::Running && st.decision == Decision::TearingDown {
            return Some(Action::ShutdownRuntime { c });
        }
        for r in RELEASE_ORDER {
            match part(r) {
                Part::ReleaseIntent if r == Roles::StateAnchor => {
                    return Some(Action::CommitAnchorCleanLeaseReleaseIntent { c })
                }
                Part::ReleaseIntent => return Some(Action::CleanParticipant { c, r }),
                Part::Intent => return Some(Action::CleanBareIntent { c, r }),
                _ if live(r) => return Some(Action::RecordReleaseIntent { c, r }),
                _ => {}
            }
        }
        if st.terms_left {
            return Some(Action::CleanSessionTerminals { c });
        }
        Some(Action::RetireGeneration { c })
    }

    /// `ExitCoordinator` when this coordinator leads a Vacant Domain (it
    /// served and released, or never launched); `None` otherwise, for
    /// example once it abandoned its bootstrap (it has failed closed).
    pub fn exit_step(&self) -> Option<Action> {
        let st = self.state();
        let leads = matches!(st.hc.get(self.me.index()), Some(Hc::Leading | Hc::Serving));
        (leads && st.decision == Decision::Vacant).then_some(Action::ExitCoordinator { c: self.me })
    }

    /// The environment steps that record a lease loss once recovery has
    /// proved RS and attached runsc absent: RS finished its lease-loss
    /// teardown, or (`runsc_outlived`) RS died first and runsc followed on
    /// its parent-death edge.
    pub fn runtime_absent(&self, runsc_outlived: bool) -> Vec<Action> {
        let st = self.state();
        match (st.rs, st.runsc) {
            (Rs::LeaseLost, Runsc::Running) if runsc_outlived => vec![
                Action::RuntimeSupervisorLost,
                Action::AttachedRunscParentDeath,
            ],
            (Rs::LeaseLost, _) => vec![Action::RuntimeSupervisorLeaseLossTeardown],
            (Rs::Absent, Runsc::Running) => vec![Action::AttachedRunscParentDeath],
            _ => Vec::new(),
        }
    }

    /// The environment steps that record what `seen` shows of the
    /// runtime's end while this coordinator holds the lease
    /// (`RuntimeSupervisorEnds`, `AttachedRunscEnds`,
    /// `AttachedRunscParentDeath`), in the order it allows: runsc gone under
    /// a running supervisor ended first; a supervisor that exited by itself
    /// stopped the sandbox first; one killed by a signal, or one that runsc
    /// was seen to outlive, went first and runsc followed on its
    /// parent-death edge. Empty when the model already has what was seen.
    pub fn runtime_ended(&self, seen: RuntimeSeen) -> Vec<Action> {
        let st = self.state();
        match (seen, st.rs, st.runsc) {
            (RuntimeSeen::RunscGone, Rs::Running, Runsc::Running) => {
                vec![Action::AttachedRunscEnds]
            }
            (RuntimeSeen::RunscGone, _, _) => Vec::new(),
            (
                RuntimeSeen::Ended {
                    supervisor_signalled,
                    runsc_outlived,
                },
                Rs::Running,
                Runsc::Running,
            ) if supervisor_signalled || runsc_outlived => vec![
                Action::RuntimeSupervisorEnds,
                Action::AttachedRunscParentDeath,
            ],
            (RuntimeSeen::Ended { .. }, Rs::Running, Runsc::Running) => {
                vec![Action::AttachedRunscEnds, Action::RuntimeSupervisorEnds]
            }
            (RuntimeSeen::Ended { .. }, Rs::Running, Runsc::Absent) => {
                vec![Action::RuntimeSupervisorEnds]
            }
            (RuntimeSeen::Ended { .. }, Rs::Absent, Runsc::Running) => {
                vec![Action::AttachedRunscParentDeath]
            }
            (RuntimeSeen::Ended { .. }, _, _) => Vec::new(),
        }
    }

    /// The coordinator this process is in the model.
    pub fn me(&self) -> CoordinatorsId {
        self.me
    }

    /// The coordinators holding the Domain lock in the model (at most one):
    /// after a crash, the one that died.
    pub fn holders(&self) -> Vec<CoordinatorsId> {
        CoordinatorsId::all(self.core.constants().coordinators.len())
            .filter(|c| {
                matches!(
                    self.state().hc.get(c.index()),
                    Some(Hc::Bootstrapping | Hc::Leading | Hc::Serving)
                )
            })
            .collect()
    }

    /// Whether this build's generations acquire role `r`.
    pub fn requires(&self, r: Roles) -> bool {
        self.core.constants().required_roles.contains(&r)
    }

    /// The roles this build acquires, in acquisition order.
    pub fn required_roles(&self) -> Vec<Roles> {
        Roles::ALL
            .into_iter()
            .filter(|r| self.requires(*r))
            .collect()
    }

    /// The constants the model is sized with (the product's own sizes).
    pub fn constants(&self) -> &Constants {
        self.core.constants()
    }

    pub fn state(&self) -> &State {
        self.core.state()
    }

    /// A session slot no session holds, if any.
    pub fn free_session(&self) -> Option<SessionsId> {
        SessionsId::all(self.core.constants().sessions.len())
            .find(|s| self.state().sess.get(s.index()) == Some(&Sess::Absent))
    }

    /// The step-0 header: the constants and the initial state.
    pub fn header(&self) -> TraceLine {
        let cx = self.core.constants();
        TraceLine {
            model: Model::NAME.to_string(),
            step: 0,
            action: HEADER_ACTION.to_string(),
            params: Vec::new(),
            generation: self.core.generation(),
            state: match &self.start {
                Some(st) => Some(Model::state_view(cx, st)),
                None => Model::init(cx)
                    .ok()
                    .map(|init| Model::state_view(cx, &init)),
            },
            constants: Some(constants_view(cx)),
            observed: None,
        }
    }

    /// Whether `action` is enabled now; nothing changes.
    pub fn check(&self, action: &Action) -> Result<(), CoreError> {
        self.core.check(action)
    }

    /// Takes the step `action` (its effect is done) and returns its trace
    /// line; a disabled step or one that would break an invariant is refused
    /// and nothing changes.
    pub fn take(&mut self, action: Action) -> Result<TraceLine, CoreError> {
        self.core.take("effect completion", &action)
    }

    /// [`HostModel::take`], with what the product read back after the
    /// effect recorded on the line (`observed`: the durable view and the
    /// processes the step established), for replay to compare with the
    /// model's successor.
    pub fn take_observed(
        &mut self,
        action: Action,
        durable: Option<&DurableView>,
        processes: ProcessView,
    ) -> Result<TraceLine, CoreError> {
        let mut line = self.take(action)?;
        let mut observed = durable.map(DurableView::observed);
        if !processes.is_empty() {
            let view = observed.get_or_insert_with(|| Value::Object(serde_json::Map::new()));
            if let Value::Object(vars) = view {
                if let Some(rs) = processes.rs {
                    vars.insert("rs".to_owned(), Value::from(rs.name()));
                }
                if let Some(runsc) = processes.runsc {
                    vars.insert("runsc".to_owned(), Value::from(runsc.name()));
                }
            }
        }
        line.observed = observed;
        Ok(line)
    }
}

/// The constants of a trace whose first coordinator is `coordinator`, in a
/// Domain served with `routing`.
fn constants(coordinator: String, routing: Routing) -> Result<Constants, HostModelError> {
    let entry = routing.configuration()?;
    let build = Cfg::parse(entry.cfg_file, entry.cfg_text)
        .and_then(|c| Constants::from_cfg(&c))
        .map_err(|source| HostModelError::Cfg {
            file: entry.cfg_file,
            source,
        })?;
    let mut coordinators = vec![coordinator];
    coordinators.extend((1..=SUCCESSORS).map(|i| format!("successor-{i}")));
    Ok(Constants {
        coordinators,
        sessions: (1..=SESSION_SLOTS).map(|i| format!("s{i}")).collect(),
        max_gen: 1,
        max_unacked_chunks: MAX_UNACKED_CHUNKS,
        required_roles: build.required_roles,
    })
}

fn durable_of(cx: &Constants, st: &State) -> DurableView {
    DurableView {
        decision: st.decision,
        part: st.part.clone(),
        slot: st.slot.clone(),
        terms_left: Some(st.terms_left),
        rows: Some(
            cx.sessions
                .iter()
                .zip(&st.sess)
                .map(|(name, s)| (name.clone(), TerminalRow::allowed(*s)[0]))
                .collect(),
        ),
    }
}

/// The model's `TerminalsUnclean`: `termsLeft`, or a session whose terminal
/// is recorded (spec 3.4 Intent, Running or ReleaseIntent).
fn unserved_of(cx: &Constants, st: &State) -> DurableView {
    let recorded = st.sess.iter().any(|s| terminal_recorded(*s));
    DurableView {
        terms_left: Some(st.terms_left || recorded),
        rows: Some(
            cx.sessions
                .iter()
                .map(|n| (n.clone(), TerminalRow::None))
                .collect(),
        ),
        ..durable_of(cx, st)
    }
}

/// The header's `constants`: the same values `header_cfg` reads back.
fn constants_view(cx: &Constants) -> Value {
    json!({
        "Coordinators": cx.coordinators,
        "Sessions": cx.sessions,
        "MaxGen": cx.max_gen,
        "MaxUnackedChunks": cx.max_unacked_chunks,
        "RequiredRoles": {
            "strings": cx.required_roles.iter().map(|r| r.name()).collect::<Vec<_>>()
        },
    })
}

/// Models for tests of other crates (`test-support`): the product's
/// model after this build's unrouted launch.
#[cfg(any(test, feature = "test-support"))]
pub mod support {
    use super::{HostModel, Routing};
    use lazaret_generated::lazaret::{
        Action, CoordinatorsId, FingerprintResults, ProcSlots, Roles, SessionsId,
    };

    /// This build's launch path, bootstrap included.
    pub fn launch_steps(c: CoordinatorsId) -> Vec<Action> {
        vec![
            Action::AcquireDomainLock { c },
            Action::BootstrapVacantDomain { c },
            Action::StartGeneration { c },
            Action::RecordIntent {
                c,
                r: Roles::Sandbox,
            },
            Action::StageProcess {
                c,
                ps: ProcSlots::SandboxRuntimeSupervisor,
            },
            Action::CommitProcess {
                c,
                ps: ProcSlots::SandboxRuntimeSupervisor,
            },
            // Spec 3.6: the prepared-lower lease before the State
            // Anchors' mounts.
            Action::RecordIntent {
                c,
                r: Roles::PreparedLower,
            },
            Action::AcquireSnapshot {
                c,
                r: Roles::PreparedLower,
            },
            Action::CommitParticipant {
                c,
                r: Roles::PreparedLower,
            },
            Action::RecordIntent {
                c,
                r: Roles::StateAnchor,
            },
            Action::AcquireSnapshot {
                c,
                r: Roles::StateAnchor,
            },
            Action::CommitParticipant {
                c,
                r: Roles::StateAnchor,
            },
            // Spec 3.7: the connectivity helper, then network readiness,
            // before the attached runsc.
            Action::RecordIntent {
                c,
                r: Roles::Helper,
            },
            Action::StageProcess {
                c,
                ps: ProcSlots::HelperConnectivityHelper,
            },
            Action::CommitProcess {
                c,
                ps: ProcSlots::HelperConnectivityHelper,
            },
            Action::CommitParticipant {
                c,
                r: Roles::Helper,
            },
            Action::RecordIntent {
                c,
                r: Roles::Network,
            },
            Action::AcquireSnapshot {
                c,
                r: Roles::Network,
            },
            Action::MarkNetworkReady { c },
            Action::StageProcess {
                c,
                ps: ProcSlots::SandboxAttachedRunsc,
            },
            Action::CommitProcess {
                c,
                ps: ProcSlots::SandboxAttachedRunsc,
            },
            Action::CommitParticipant {
                c,
                r: Roles::Sandbox,
            },
            Action::RecordIntent {
                c,
                r: Roles::Publication,
            },
            Action::AcquireSnapshot {
                c,
                r: Roles::Publication,
            },
            Action::Publish { c },
        ]
    }

    /// A coordinator serving the published generation of an unrouted
    /// Domain it launched, with one session registered (running its
    /// terminal): the state in which that session's escalation requests
    /// are served.
    pub fn serving_one_session(
    ) -> Result<(HostModel, SessionsId), Box<dyn std::error::Error + Send + Sync>> {
        let mut m = HostModel::new("hc-serving".into(), 1, Routing::Unrouted)?;
        let c = m.me();
        let s = SessionsId(0);
        let joined = [
            Action::ConnectClient {
                s,
                f: FingerprintResults::Match,
            },
            Action::EnrollClient { c, s },
            Action::RecordTerminalIntent { c, s },
            Action::RegisterSession { c, s },
        ];
        // The launching client connects before the generation starts.
        let mut steps = launch_steps(c);
        steps.insert(2, joined[0]);
        for a in steps.into_iter().chain(joined.into_iter().skip(1)) {
            m.take(a)?;
        }
        Ok((m, s))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    pub(crate) use super::support::launch_steps;
    use super::*;
    use crate::replay::{replay_text, Outcome};
    use lazaret_generated::lazaret::ProcSlots;

    /// A matching client's session in the published generation, up to
    /// its running terminal.
    fn joined(c: CoordinatorsId, s: SessionsId) -> [Action; 4] {
        [
            Action::ConnectClient {
                s,
                f: lazaret_generated::lazaret::FingerprintResults::Match,
            },
            Action::EnrollClient { c, s },
            Action::RecordTerminalIntent { c, s },
            Action::RegisterSession { c, s },
        ]
    }

    /// A routed Domain's launch path: the unrouted one with the
    /// ignored-path router's participant after the State Anchors (the
    /// model's `AcquireRank`): its intent, its daemon staged and committed
    /// through RS, its mount committed.
    pub(crate) fn routed_launch_steps(c: CoordinatorsId) -> Vec<Action> {
        let mut steps = launch_steps(c);
        let after = Action::CommitParticipant {
            c,
            r: Roles::StateAnchor,
        };
        let at = steps.iter().position(|a| *a == after).map_or(0, |i| i + 1);
        let routing = [
            Action::RecordIntent {
                c,
                r: Roles::GitRouting,
            },
            Action::StageProcess {
                c,
                ps: ProcSlots::GitRoutingDaemon,
            },
            Action::CommitProcess {
                c,
                ps: ProcSlots::GitRoutingDaemon,
            },
            Action::CommitParticipant {
                c,
                r: Roles::GitRouting,
            },
        ];
        steps.splice(at..at, routing);
        steps
    }

    /// A routed Domain acquires every role, GitRouting after the State
    /// Anchors; its launch, teardown and release replay clean.
    #[test]
    fn the_routed_launch_path_replays() -> Result<(), Box<dyn std::error::Error>> {
        let mut m = HostModel::new("hc-routed".into(), 8, Routing::Routed)?;
        assert_eq!(m.required_roles(), Roles::ALL.to_vec());
        let c = m.me();
        let mut text = m.header().to_json() + "\n";
        let steps = routed_launch_steps(c);
        assert_eq!(steps.len(), launch_steps(c).len() + 4);
        for a in steps {
            text += &m.take(a)?.to_json();
            text.push('\n');
        }
        assert_eq!(m.state().decision, Decision::Published);
        text += &m.take(Action::BeginTeardown { c })?.to_json();
        text.push('\n');
        let released = release_all(&mut m)?;
        assert!(released.contains("\"GitRouting\""), "{released}");
        text += &released;
        match replay_text("routed.jsonl", &text)? {
            Outcome::Conforms { .. } => Ok(()),
            Outcome::Diverged(d) => Err(format!("diverged: {d:?}").into()),
        }
    }

    /// An unrouted Domain's core cannot take the router's steps.
    #[test]
    fn an_unrouted_domain_never_records_the_router() -> Result<(), Box<dyn std::error::Error>> {
        let mut m = HostModel::new("hc-unrouted".into(), 8, Routing::Unrouted)?;
        let c = m.me();
        let steps = routed_launch_steps(c);
        let routing = steps
            .iter()
            .position(|a| {
                *a == Action::RecordIntent {
                    c,
                    r: Roles::GitRouting,
                }
            })
            .ok_or("no router intent")?;
        for a in &steps[..routing] {
            m.take(*a)?;
        }
        assert!(m.check(&steps[routing]).is_err());
        Ok(())
    }

    /// The launch path of this build is enabled step by step, and its
    /// trace (header included) replays clean.
    #[test]
    fn the_build_launch_path_replays() -> Result<(), Box<dyn std::error::Error>> {
        let mut m = HostModel::new("hc-test".into(), 7, Routing::Unrouted)?;
        assert_eq!(
            m.required_roles(),
            vec![
                Roles::PreparedLower,
                Roles::StateAnchor,
                Roles::Network,
                Roles::Helper,
                Roles::Sandbox,
                Roles::Publication
            ]
        );
        let c = m.me();
        let mut text = m.header().to_json() + "\n";
        for a in launch_steps(c) {
            text += &m.take(a)?.to_json();
            text.push('\n');
        }
        let s = m.free_session().ok_or("no free session")?;
        for a in joined(c, s).into_iter().chain([
            Action::CloseSession { c, s },
            Action::FinishSessionRelease { c, s },
            Action::BeginTeardown { c },
        ]) {
            text += &m.take(a)?.to_json();
            text.push('\n');
        }
        // The release in the model's order (publication, sandbox, network,
        // helper, State Anchor, prepared lower), then the coordinator's exit.
        text += &release_all(&mut m)?;
        text += &m.take(Action::ExitCoordinator { c })?.to_json();
        text.push('\n');
        match replay_text("host.jsonl", &text)? {
            Outcome::Conforms { steps, .. } => assert_eq!(steps, 46),
            Outcome::Diverged(d) => panic!("diverged: {d:?}"),
        }
        Ok(())
    }

    /// Trace validation: a line whose `observed` equals the model's
    /// successor replays; one whose observation says something else than
    /// the step (the store kept what it held before `Publish`) diverges
    /// at that step with both values.
    #[test]
    fn an_observation_that_differs_from_the_step_fails_replay(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let mut m = HostModel::new("hc-test".into(), 7, Routing::Unrouted)?;
        let c = m.me();
        let mut agreeing = m.header().to_json() + "\n";
        let steps = launch_steps(c);
        let last = u64::try_from(steps.len())?;
        let (publish, before) = steps.split_last().ok_or("no steps")?;
        for a in before {
            // What the store holds after a faithful effect.
            let mut line = m.take_observed(*a, None, ProcessView::default())?;
            line.observed = Some(m.durable().observed());
            agreeing += &line.to_json();
            agreeing.push('\n');
        }
        let stale = m.durable();
        let mut diverging = agreeing.clone();
        let mut faithful = m.take_observed(*publish, None, ProcessView::default())?;
        faithful.observed = Some(m.durable().observed());
        agreeing += &faithful.to_json();
        let mut hidden = faithful;
        hidden.observed = Some(stale.observed());
        diverging += &hidden.to_json();
        match replay_text("agreeing.jsonl", &agreeing)? {
            Outcome::Conforms { steps, .. } => assert_eq!(steps, last),
            Outcome::Diverged(d) => panic!("diverged: {d:?}"),
        }
        match replay_text("diverging.jsonl", &diverging)? {
            Outcome::Diverged(d) => {
                assert_eq!(d.step, last);
                assert_eq!(d.action, "Publish");
                assert_eq!(d.reason, crate::replay::Reason::ObservationMismatch);
                // Publish commits the publication participant too.
                let vars: Vec<&str> = d.diff.iter().map(|v| v.var.as_str()).collect();
                assert_eq!(vars, ["decision", "part"], "{:?}", d.diff);
                assert_eq!(d.diff[0].model, "Published");
                assert_eq!(d.diff[0].trace, "Starting");
            }
            Outcome::Conforms { .. } => panic!("a hidden divergence replayed clean"),
        }
        Ok(())
    }

    /// Trace validation of each session's terminal row (spec 3.4
    /// acquisition step 1): a `RecordTerminalIntent` whose effect left the
    /// slot without a recorded terminal (the intent written for no session
    /// this coordinator serves there) diverges at that step on
    /// `terminalRow`, naming the slot; the faithful line replays.
    #[test]
    fn a_terminal_intent_missing_from_its_slot_fails_replay(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let mut m = HostModel::new("hc-test".into(), 9, Routing::Unrouted)?;
        let c = m.me();
        let s = m.free_session().ok_or("no free session")?;
        let slot = m.constants().sessions[s.index()].clone();
        let [connect, enroll, intent, _register] = joined(c, s);
        let text = faithful_lines(&mut m, launch_steps(c).into_iter().chain([connect, enroll]))?;
        let step = u64::try_from(text.lines().count())?;
        let mut line = m.take_observed(intent, None, ProcessView::default())?;
        let faithful = m.durable();
        assert_eq!(
            faithful.rows.as_ref().map(|r| r[&slot]),
            Some(TerminalRow::BareIntent)
        );
        line.observed = Some(faithful.observed());
        match replay_text("faithful.jsonl", &(text.clone() + &line.to_json() + "\n"))? {
            Outcome::Conforms { steps, .. } => assert_eq!(steps, step),
            Outcome::Diverged(d) => panic!("diverged: {d:?}"),
        }
        let mut missing = faithful.clone();
        if let Some(r) = missing.rows.as_mut() {
            r.insert(slot.clone(), TerminalRow::None);
        }
        line.observed = Some(missing.observed());
        match replay_text("missing.jsonl", &(text + &line.to_json() + "\n"))? {
            Outcome::Diverged(d) => {
                assert_eq!(d.step, step);
                assert_eq!(d.action, "RecordTerminalIntent");
                assert_eq!(d.reason, crate::replay::Reason::ObservationMismatch);
                let vars: Vec<&str> = d.diff.iter().map(|v| v.var.as_str()).collect();
                assert_eq!(vars, [TERMINAL_ROW], "{:?}", d.diff);
                assert_eq!(
                    d.diff[0].model[&slot],
                    json!({ "oneOf": ["BareIntent", "Intent"] })
                );
                assert_eq!(d.diff[0].trace[&slot], "None");
            }
            Outcome::Conforms { .. } => panic!("a missing terminal intent replayed clean"),
        }
        Ok(())
    }

    /// Spec 3.4 release step 1 in the trace: a `CloseSession` whose effect
    /// left the terminal Running (no durable release intent) diverges at
    /// that step on `terminalRow`; written as ReleaseIntent it replays. A
    /// piped session's Intent row is a registered session's too, and stays
    /// a divergence after its `CloseSession`.
    #[test]
    fn a_close_without_its_release_intent_fails_replay() -> Result<(), Box<dyn std::error::Error>> {
        for registered in [TerminalRow::Running, TerminalRow::PipedIntent] {
            let mut m = HostModel::new("hc-test".into(), 9, Routing::Unrouted)?;
            let c = m.me();
            let s = m.free_session().ok_or("no free session")?;
            let slot = m.constants().sessions[s.index()].clone();
            let [connect, enroll, intent, register] = joined(c, s);
            let mut text = faithful_lines(
                &mut m,
                launch_steps(c).into_iter().chain([connect, enroll, intent]),
            )?;
            let mut line = m.take_observed(register, None, ProcessView::default())?;
            let mut view = m.durable();
            if let Some(r) = view.rows.as_mut() {
                r.insert(slot.clone(), registered);
            }
            line.observed = Some(view.observed());
            text += &(line.to_json() + "\n");
            let step = u64::try_from(text.lines().count())?;
            let mut close =
                m.take_observed(Action::CloseSession { c, s }, None, ProcessView::default())?;
            let faithful = m.durable();
            assert_eq!(
                faithful.rows.as_ref().map(|r| r[&slot]),
                Some(TerminalRow::ReleaseIntent)
            );
            close.observed = Some(faithful.observed());
            match replay_text("faithful.jsonl", &(text.clone() + &close.to_json() + "\n"))? {
                Outcome::Conforms { steps, .. } => assert_eq!(steps, step),
                Outcome::Diverged(d) => panic!("{registered:?}: diverged: {d:?}"),
            }
            close.observed = Some(view.observed());
            match replay_text("hidden.jsonl", &(text + &close.to_json() + "\n"))? {
                Outcome::Diverged(d) => {
                    assert_eq!(d.step, step);
                    assert_eq!(d.action, "CloseSession");
                    assert_eq!(d.reason, crate::replay::Reason::ObservationMismatch);
                    let vars: Vec<&str> = d.diff.iter().map(|v| v.var.as_str()).collect();
                    assert_eq!(vars, [TERMINAL_ROW], "{:?}", d.diff);
                    assert_eq!(d.diff[0].trace[&slot], registered.name());
                }
                Outcome::Conforms { .. } => {
                    panic!("{registered:?}: a close without release intent replayed clean")
                }
            }
        }
        Ok(())
    }

    /// Spec 3.4 acquisition step 4 in the trace: an interactive session's
    /// `RegisterSession` whose effect left its terminal Intent (no Running
    /// record) diverges at that step on `terminalRow`; Running, or a piped
    /// session's Intent, replays.
    #[test]
    fn an_interactive_registration_left_intent_fails_replay(
    ) -> Result<(), Box<dyn std::error::Error>> {
        for (row, conforms) in [
            (TerminalRow::Running, true),
            (TerminalRow::PipedIntent, true),
            (TerminalRow::Intent, false),
        ] {
            let mut m = HostModel::new("hc-test".into(), 9, Routing::Unrouted)?;
            let c = m.me();
            let s = m.free_session().ok_or("no free session")?;
            let slot = m.constants().sessions[s.index()].clone();
            let [connect, enroll, intent, register] = joined(c, s);
            let text = faithful_lines(
                &mut m,
                launch_steps(c).into_iter().chain([connect, enroll, intent]),
            )?;
            let step = u64::try_from(text.lines().count())?;
            let mut line = m.take_observed(register, None, ProcessView::default())?;
            let mut view = m.durable();
            if let Some(r) = view.rows.as_mut() {
                r.insert(slot.clone(), row);
            }
            line.observed = Some(view.observed());
            match (
                replay_text("register.jsonl", &(text + &line.to_json() + "\n"))?,
                conforms,
            ) {
                (Outcome::Conforms { steps, .. }, true) => assert_eq!(steps, step),
                (Outcome::Diverged(d), false) => {
                    assert_eq!(d.step, step);
                    assert_eq!(d.action, "RegisterSession");
                    assert_eq!(d.reason, crate::replay::Reason::ObservationMismatch);
                    let vars: Vec<&str> = d.diff.iter().map(|v| v.var.as_str()).collect();
                    assert_eq!(vars, [TERMINAL_ROW], "{:?}", d.diff);
                    assert_eq!(
                        d.diff[0].model[&slot],
                        json!({ "oneOf": ["Running", "PipedIntent"] })
                    );
                    assert_eq!(d.diff[0].trace[&slot], "Intent");
                }
                (outcome, _) => panic!("{row:?}: {outcome:?}"),
            }
        }
        Ok(())
    }

    /// Each of `steps` taken with its faithful observation, as trace text
    /// after the header.
    fn faithful_lines(
        m: &mut HostModel,
        steps: impl IntoIterator<Item = Action>,
    ) -> Result<String, Box<dyn std::error::Error>> {
        let mut text = m.header().to_json() + "\n";
        for a in steps {
            let mut line = m.take_observed(a, None, ProcessView::default())?;
            line.observed = Some(m.durable().observed());
            text += &(line.to_json() + "\n");
        }
        Ok(text)
    }

    /// Trace validation of the terminal rows (spec 3.4 release step 3): a
    /// release whose terminal stayed in release intent but whose step said
    /// `FinishSessionRelease` (the store read back shows a terminal left)
    /// diverges at that step on `termsLeft`; said as `RetainSessionRelease`
    /// it replays, and the release then cleans it.
    #[test]
    fn a_retained_release_traced_as_finished_fails_replay() -> Result<(), Box<dyn std::error::Error>>
    {
        fn faithful(m: &mut HostModel, a: Action) -> Result<String, CoreError> {
            let mut line = m.take_observed(a, None, ProcessView::default())?;
            line.observed = Some(m.durable().observed());
            Ok(line.to_json() + "\n")
        }
        // A served generation whose one session is closing, each step
        // observed as a faithful effect leaves the store.
        let closing = || -> Result<(HostModel, String, SessionsId), Box<dyn std::error::Error>> {
            let mut m = HostModel::new("hc-test".into(), 8, Routing::Unrouted)?;
            let c = m.me();
            let s = m.free_session().ok_or("no free session")?;
            let mut text = m.header().to_json() + "\n";
            let session = joined(c, s)
                .into_iter()
                .chain([Action::CloseSession { c, s }]);
            for a in launch_steps(c).into_iter().chain(session) {
                text += &faithful(&mut m, a)?;
            }
            Ok((m, text, s))
        };
        // The store after a retained release: the terminal's row is still
        // ReleaseIntent, and this coordinator no longer serves the session.
        let (mut m, text, s) = closing()?;
        let c = m.me();
        let before = u64::try_from(text.lines().count() - 1)?;
        // Its slot no longer serves it: what a process serving none of the
        // sessions reads.
        let retained_rows = m.durable_unserved();
        assert_eq!(retained_rows.terms_left, Some(true));
        let hidden = m.take_observed(
            Action::FinishSessionRelease { c, s },
            Some(&retained_rows),
            ProcessView::default(),
        )?;
        match replay_text("hidden.jsonl", &(text + &hidden.to_json() + "\n"))? {
            Outcome::Diverged(d) => {
                assert_eq!(d.step, before + 1);
                assert_eq!(d.action, "FinishSessionRelease");
                assert_eq!(d.reason, crate::replay::Reason::ObservationMismatch);
                let vars: Vec<&str> = d.diff.iter().map(|v| v.var.as_str()).collect();
                assert_eq!(vars, ["termsLeft"], "{:?}", d.diff);
            }
            Outcome::Conforms { .. } => panic!("a hidden retained release replayed clean"),
        }
        let (mut m, mut text, s) = closing()?;
        let retained = m.take_observed(
            Action::RetainSessionRelease { c, s },
            Some(&retained_rows),
            ProcessView::default(),
        )?;
        text += &(retained.to_json() + "\n");
        text += &faithful(&mut m, Action::BeginTeardown { c })?;
        let release = release_all(&mut m)?;
        assert!(release.contains("CleanSessionTerminals"), "{release}");
        text += &release;
        match replay_text("retained.jsonl", &text)? {
            Outcome::Conforms { .. } => {}
            Outcome::Diverged(d) => panic!("diverged: {d:?}"),
        }
        Ok(())
    }

    /// A successor continues the trace of a coordinator that died while
    /// serving (its last line cut off), recovers the generation, and the
    /// whole file replays from Init.
    #[test]
    fn a_successor_continues_a_dead_coordinators_trace() -> Result<(), Box<dyn std::error::Error>> {
        let mut m = HostModel::new("hc-dead".into(), 4, Routing::Unrouted)?;
        let dead = m.me();
        let mut text = m.header().to_json() + "\n";
        for a in launch_steps(dead) {
            text += &m.take(a)?.to_json();
            text.push('\n');
        }
        text += "{\"schema\":\"lazaret-trace-v1\",\"model\":\"Laz";
        let (mut r, kept) = HostModel::resume("gen-4.jsonl", &text)?;
        assert_eq!(kept, 26);
        assert_eq!(r.holders(), vec![dead]);
        let me = r.me();
        assert_eq!(me, CoordinatorsId(1));
        let mut text: String = text.lines().take(kept).map(|l| format!("{l}\n")).collect();
        text += &r.take(Action::HostCoordinatorLost { c: dead })?.to_json();
        text.push('\n');
        assert_eq!(
            r.runtime_absent(true),
            vec![
                Action::RuntimeSupervisorLost,
                Action::AttachedRunscParentDeath
            ]
        );
        assert_eq!(
            r.runtime_absent(false),
            vec![Action::RuntimeSupervisorLeaseLossTeardown]
        );
        for a in [
            Action::RuntimeSupervisorLeaseLossTeardown,
            Action::AcquireDomainLock { c: me },
            Action::BootstrapRecover { c: me },
        ] {
            text += &r.take(a)?.to_json();
            text.push('\n');
        }
        text += &release_all(&mut r)?;
        match replay_text("gen-4.jsonl", &text)? {
            Outcome::Conforms { steps, .. } => assert_eq!(steps, 41),
            Outcome::Diverged(d) => panic!("diverged: {d:?}"),
        }
        // A coordinator that died after a durable write and before its
        // trace line: the store is one step ahead and the successor takes
        // exactly that step for it.
        let mut m = HostModel::new("hc-dead".into(), 5, Routing::Unrouted)?;
        let dead = m.me();
        for a in launch_steps(dead).into_iter().take(4) {
            m.take(a)?;
        }
        let mut ahead = m.durable();
        ahead.slot[ProcSlots::SandboxRuntimeSupervisor.index()] = Slot::Staged;
        ahead.part[Roles::Sandbox.index()] = Part::Acquiring;
        assert_eq!(
            m.catch_up(dead, &ahead),
            Some(Action::StageProcess {
                c: dead,
                ps: ProcSlots::SandboxRuntimeSupervisor
            })
        );
        // Two steps ahead is not guessed at.
        ahead.slot[ProcSlots::SandboxRuntimeSupervisor.index()] = Slot::Committed;
        assert_eq!(m.catch_up(dead, &ahead), None);
        // A second successor would be the next one.
        let (again, _) = HostModel::resume("gen-4.jsonl", &text)?;
        assert_eq!(again.me(), CoordinatorsId(2));
        Ok(())
    }

    /// Without the dead coordinator's trace the state is rebuilt from the
    /// durable record; the recovery replays from that recorded start.
    #[test]
    fn a_recovery_without_the_trace_starts_from_the_durable_record(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let mut served = HostModel::new("hc-dead".into(), 6, Routing::Unrouted)?;
        let dead = served.me();
        for a in launch_steps(dead) {
            served.take(a)?;
        }
        // The terminal rows as a recovery reads them: none unclean (the
        // dead coordinator served no session), or one left; unobserved, a
        // live generation is taken to have some.
        let exact = served.durable_unserved();
        assert_eq!(exact.terms_left, Some(false));
        for (terms_left, cleans) in [(Some(false), false), (Some(true), true), (None, true)] {
            let durable = DurableView {
                terms_left,
                ..exact.clone()
            };
            let mut r = HostModel::recovered("hc-dead".into(), 6, &durable)?;
            assert_eq!(r.holders(), vec![dead]);
            let me = r.me();
            let mut text = r.header().to_json() + "\n";
            for a in [
                Action::HostCoordinatorLost { c: dead },
                Action::RuntimeSupervisorLeaseLossTeardown,
                Action::AcquireDomainLock { c: me },
                Action::BootstrapRecover { c: me },
            ] {
                text += &r.take(a)?.to_json();
                text.push('\n');
            }
            let release = release_all(&mut r)?;
            assert_eq!(
                release.contains("CleanSessionTerminals"),
                cleans,
                "{release}"
            );
            text += &release;
            match replay_text("gen-6.jsonl", &text)? {
                Outcome::Conforms {
                    steps,
                    recorded_start,
                    ..
                } => assert_eq!((steps, recorded_start), (16 + u64::from(cleans), true)),
                Outcome::Diverged(d) => panic!("diverged: {d:?}"),
            }
        }
        // A durable record no state satisfies is refused: the publication
        // committed while the generation is only starting.
        let mut bad = served.durable();
        bad.decision = Decision::Starting;
        assert!(matches!(
            HostModel::recovered("hc-dead".into(), 6, &bad),
            Err(HostModelError::Rebuilt(_))
        ));
        Ok(())
    }

    /// The release decided by the core is enabled step by step, from a
    /// served generation, a launch that failed half way, and a recovery.
    #[test]
    fn next_release_walks_every_release_to_retirement() -> Result<(), Box<dyn std::error::Error>> {
        for cut in [4, 6, 7, 8, 9, 10, 12, 16, 19, 25] {
            let mut m = HostModel::new("hc".into(), 1, Routing::Unrouted)?;
            let c = m.me();
            assert_eq!(launch_steps(c).len(), 25);
            for a in launch_steps(c).into_iter().take(cut) {
                m.take(a)?;
            }
            let first = if cut == 25 {
                Action::BeginTeardown { c }
            } else {
                Action::AbortGeneration { c }
            };
            assert_eq!(m.next_release(), None);
            m.take(first)?;
            let mut steps = 0;
            let mut lease_release = None;
            while let Some(a) = m.next_release() {
                // Spec 3.6 release step 3: the lease's release intent only
                // once the runtime is gone, and with the anchors' clean
                // state when there are anchors.
                if matches!(
                    a,
                    Action::CommitAnchorCleanLeaseReleaseIntent { .. }
                        | Action::RecordReleaseIntent {
                            r: Roles::PreparedLower,
                            ..
                        }
                ) {
                    assert_eq!(m.state().rs, Rs::Absent, "cut {cut}: {a:?}");
                    lease_release = Some(a);
                }
                m.take(a)?;
                steps += 1;
                assert!(steps < 32, "release does not end");
            }
            // A snapshot of the lease from step 8 on; anchors with a
            // snapshot (possibly mounted) from step 11 on.
            let anchored =
                |a: Action| matches!(a, Action::CommitAnchorCleanLeaseReleaseIntent { .. });
            assert_eq!(
                lease_release.map(anchored),
                (cut >= 8).then_some(cut >= 11),
                "cut {cut}"
            );
            assert_eq!(m.state().decision, Decision::Vacant, "cut {cut}");
            assert_eq!(m.state().rs, Rs::Absent, "cut {cut}");
            assert!(m
                .state()
                .part
                .iter()
                .all(|p| matches!(p, Part::None | Part::Clean)));
        }
        Ok(())
    }

    /// The release the core decides, to retirement, as trace lines.
    fn release_all(m: &mut HostModel) -> Result<String, Box<dyn std::error::Error>> {
        let mut text = String::new();
        for _ in 0..32 {
            let Some(a) = m.next_release() else {
                assert_eq!(m.state().decision, Decision::Vacant);
                return Ok(text);
            };
            text += &m.take(a)?.to_json();
            text.push('\n');
        }
        Err("the release does not end".into())
    }

    /// A step out of order is refused with its guard and changes nothing.
    #[test]
    fn a_disabled_step_is_refused_and_not_applied() -> Result<(), Box<dyn std::error::Error>> {
        let mut m = HostModel::new("hc-test".into(), 1, Routing::Unrouted)?;
        let c = m.me();
        let before = m.state().clone();
        let err = m
            .take(Action::StartGeneration { c })
            .expect_err("StartGeneration before the lock");
        assert!(err.to_string().contains("hc[c] = \"Leading\""), "{err}");
        assert_eq!(m.state(), &before);
        // Publishing before the sandbox is committed is refused too.
        for a in launch_steps(c).into_iter().take(4) {
            m.take(a)?;
        }
        assert!(m.check(&Action::Publish { c }).is_err());
        assert!(m
            .check(&Action::RecordIntent {
                c,
                r: Roles::Network
            })
            .is_err());
        Ok(())
    }

    /// A loser of the lock race records the holder's lock step (what its
    /// failed flock observed) and its own loss, fails closed, and its trace
    /// replays; a loser that has lost takes nothing more.
    #[test]
    fn a_lock_race_loser_records_the_holder_and_its_loss() -> Result<(), Box<dyn std::error::Error>>
    {
        let mut m = HostModel::lock_race_loser("hc-loser".into())?;
        let me = m.me();
        let steps = m.lock_race_lost();
        assert_eq!(
            steps,
            vec![
                Action::AcquireDomainLock {
                    c: CoordinatorsId(0)
                },
                Action::LoseDomainLockRace { c: me },
            ]
        );
        let mut text = m.header().to_json() + "\n";
        for a in steps {
            text += &m.take(a)?.to_json();
            text.push('\n');
        }
        assert_eq!(m.state().hc[me.index()], Hc::FailedClosed);
        assert_eq!(m.state().lock_holder, LockHolder::Id(CoordinatorsId(0)));
        assert!(m.lock_race_lost().is_empty());
        assert!(text.contains("\"hc-loser\"") && text.contains(&format!("\"{LOCK_HOLDER}\"")));
        match replay_text("loser", &text)? {
            Outcome::Conforms { steps, .. } => assert_eq!(steps, 2),
            Outcome::Diverged(d) => return Err(format!("{d:?}").into()),
        }
        // A winner's core is no loser: the race is lost only from Idle.
        let mut winner = HostModel::new("hc-winner".into(), 1, Routing::Unrouted)?;
        winner.take(Action::AcquireDomainLock { c: winner.me() })?;
        assert!(winner.lock_race_lost().is_empty());
        Ok(())
    }

    /// A bootstrap that cannot recover another generation abandons from
    /// its own vacant record: it fails closed, holds no lock, and wrote
    /// nothing; once it leads, or before it holds the lock, it cannot.
    #[test]
    fn an_abandoned_bootstrap_fails_closed_and_writes_nothing(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let mut m = HostModel::new("hc-test".into(), 2, Routing::Unrouted)?;
        let c = m.me();
        assert!(m.check(&Action::AbandonBootstrap { c }).is_err());
        let mut text = m.header().to_json() + "\n";
        let durable = m.durable();
        for a in [
            Action::AcquireDomainLock { c },
            Action::AbandonBootstrap { c },
        ] {
            text += &m.take(a)?.to_json();
            text.push('\n');
        }
        assert_eq!(m.state().hc[c.index()], Hc::FailedClosed);
        assert_eq!(m.state().lock_holder, LockHolder::None);
        assert_eq!(m.durable(), durable);
        assert_eq!(m.exit_step(), None);
        assert!(matches!(
            replay_text("abandoned", &text)?,
            Outcome::Conforms { steps: 2, .. }
        ));
        let mut leader = HostModel::new("hc-leader".into(), 3, Routing::Unrouted)?;
        let c = leader.me();
        leader.take(Action::AcquireDomainLock { c })?;
        leader.take(Action::BootstrapVacantDomain { c })?;
        assert!(leader.check(&Action::AbandonBootstrap { c }).is_err());
        assert_eq!(leader.exit_step(), Some(Action::ExitCoordinator { c }));
        Ok(())
    }

    /// Launch, one registered session, and the trace so far.
    fn serving_one_session(m: &mut HostModel) -> Result<String, Box<dyn std::error::Error>> {
        let c = m.me();
        let s = m.free_session().ok_or("no free session")?;
        let mut text = m.header().to_json() + "\n";
        let steps = launch_steps(c).into_iter().chain([
            Action::ConnectClient {
                s,
                f: lazaret_generated::lazaret::FingerprintResults::Match,
            },
            Action::EnrollClient { c, s },
            Action::RecordTerminalIntent { c, s },
            Action::RegisterSession { c, s },
        ]);
        for a in steps {
            text += &m.take(a)?.to_json();
            text.push('\n');
        }
        Ok(text)
    }

    /// FR-12, FR-13: the runtime's end under a live coordinator is
    /// recorded in the order what the coordinator saw allows.
    #[test]
    fn the_runtimes_end_is_recorded_in_the_order_it_was_seen(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let cases = [
            // Exited by itself: it stopped the sandbox first.
            (
                false,
                false,
                vec![Action::AttachedRunscEnds, Action::RuntimeSupervisorEnds],
            ),
            // Killed, or runsc seen alive after it: the parent-death edge.
            (
                true,
                false,
                vec![
                    Action::RuntimeSupervisorEnds,
                    Action::AttachedRunscParentDeath,
                ],
            ),
            (
                false,
                true,
                vec![
                    Action::RuntimeSupervisorEnds,
                    Action::AttachedRunscParentDeath,
                ],
            ),
        ];
        for (supervisor_signalled, runsc_outlived, expected) in cases {
            let mut m = HostModel::new("hc".into(), 1, Routing::Unrouted)?;
            serving_one_session(&mut m)?;
            let end = RuntimeSeen::Ended {
                supervisor_signalled,
                runsc_outlived,
            };
            let steps = m.runtime_ended(end);
            assert_eq!(steps, expected);
            for a in steps {
                m.take(a)?;
            }
            assert_eq!((m.state().rs, m.state().runsc), (Rs::Absent, Runsc::Absent));
            assert!(m.state().runtime_ended);
            // Nothing is left to record.
            assert_eq!(m.runtime_ended(end), Vec::new());
        }
        // runsc gone under a running supervisor: its end alone, once; the
        // supervisor's exit after it is the one step left.
        let mut m = HostModel::new("hc".into(), 1, Routing::Unrouted)?;
        serving_one_session(&mut m)?;
        let steps = m.runtime_ended(RuntimeSeen::RunscGone);
        assert_eq!(steps, [Action::AttachedRunscEnds]);
        for a in steps {
            m.take(a)?;
        }
        assert_eq!(m.runtime_ended(RuntimeSeen::RunscGone), Vec::new());
        let exited = RuntimeSeen::Ended {
            supervisor_signalled: false,
            runsc_outlived: false,
        };
        assert_eq!(m.runtime_ended(exited), [Action::RuntimeSupervisorEnds]);
        Ok(())
    }

    /// After the runtime ended no session registers; the sessions close,
    /// the generation is torn down without ShutdownRuntime, and the whole
    /// trace (with the processes observed absent) replays.
    #[test]
    fn a_generation_whose_runtime_ended_is_torn_down_and_replays(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let mut m = HostModel::new("hc".into(), 3, Routing::Unrouted)?;
        let c = m.me();
        let mut text = serving_one_session(&mut m)?;
        let registered = SessionsId(0);
        let end = RuntimeSeen::Ended {
            supervisor_signalled: true,
            runsc_outlived: true,
        };
        for a in m.runtime_ended(end) {
            let seen = if a == Action::RuntimeSupervisorEnds {
                ProcessView::supervisor(Rs::Absent)
            } else {
                ProcessView::attached_runsc(Runsc::Absent)
            };
            text += &m.take_observed(a, None, seen)?.to_json();
            text.push('\n');
        }
        let late = m.free_session().ok_or("no free session")?;
        for a in [
            Action::ConnectClient {
                s: late,
                f: lazaret_generated::lazaret::FingerprintResults::Match,
            },
            Action::EnrollClient { c, s: late },
        ] {
            text += &m.take(a)?.to_json();
            text.push('\n');
        }
        // No terminal is started in a runtime seen to end (FR-2).
        let refused = m.check(&Action::RecordTerminalIntent { c, s: late });
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.to_string().contains("runtimeEnded = FALSE")),
            "{refused:?}"
        );
        for a in [
            Action::ClientExits { s: late },
            Action::CloseSession { c, s: registered },
            Action::FinishSessionRelease { c, s: registered },
            Action::BeginTeardown { c },
        ] {
            text += &m.take(a)?.to_json();
            text.push('\n');
        }
        let release = release_all(&mut m)?;
        assert!(!release.contains("ShutdownRuntime"), "{release}");
        text += &release;
        match replay_text("ended.jsonl", &text)? {
            Outcome::Conforms { .. } => {}
            Outcome::Diverged(d) => panic!("diverged: {d:?}"),
        }
        Ok(())
    }

    /// Trace validation of process observations: a ShutdownRuntime whose
    /// line says the Runtime Supervisor was still there diverges at that
    /// step, naming `rs`.
    #[test]
    fn a_process_observation_that_differs_from_the_step_fails_replay(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let mut m = HostModel::new("hc".into(), 5, Routing::Unrouted)?;
        let c = m.me();
        let mut text = m.header().to_json() + "\n";
        for a in launch_steps(c) {
            text += &m.take(a)?.to_json();
            text.push('\n');
        }
        text += &m.take(Action::BeginTeardown { c })?.to_json();
        text.push('\n');
        while let Some(a) = m.next_release() {
            let shutdown = matches!(a, Action::ShutdownRuntime { .. });
            let seen = if shutdown {
                ProcessView {
                    rs: Some(Rs::Running),
                    runsc: Some(Runsc::Absent),
                }
            } else {
                ProcessView::default()
            };
            text += &m.take_observed(a, None, seen)?.to_json();
            text.push('\n');
        }
        match replay_text("stale.jsonl", &text)? {
            Outcome::Diverged(d) => {
                assert_eq!(d.action, "ShutdownRuntime");
                assert_eq!(d.reason, crate::replay::Reason::ObservationMismatch);
                let vars: Vec<&str> = d.diff.iter().map(|v| v.var.as_str()).collect();
                assert_eq!(vars, ["rs"], "{:?}", d.diff);
            }
            Outcome::Conforms { .. } => panic!("a hidden process divergence replayed clean"),
        }
        Ok(())
    }
}
