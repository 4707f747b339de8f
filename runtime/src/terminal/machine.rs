//! The pure per-session terminal state machine (spec 3.4 "Session
//! Terminals", FR-15). Sans-IO in the quinn style: [`Input`]s (client events,
//! route changes from the model, PTY data, exec-client completion, guest
//! observations and timer expiries) go in; [`Command`]s come out as data, in
//! the order the effects layer must perform them. Time enters only as
//! [`Input::Timer`]; the machine asks for timers with [`Command::StartTimer`].
//!
//! The release order is the generated SessionRelease model
//! (`protocol/SessionRelease.tla`, whose notes map its actions to the spec
//! steps); in short (spec 3.4 "Session close, Client connection loss, PTY
//! loss, or exec-client loss starts the same physical release"):
//! 1. record release intent (terminal events are refused from here on);
//!    when a signal may follow, wait for the coordinator to confirm it
//!    durable ([`Input::ReleaseIntentConfirmed`]); without that, send none
//!    ([`Input::ReleaseIntentUnconfirmed`]: collect the exec client and retain);
//! 2. observe the guest leader; only while it matches: SIGHUP, grace,
//!    observe, SIGTERM, grace, observe, SIGKILL. A mismatch refuses the
//!    signal; an absent leader with members left is left for Domain teardown;
//! 3. terminate (if still running) and reap the exec client, drain the PTY
//!    to EOF or the drain deadline when a closing connection waits for it,
//!    queue at most one `SessionExit` after the last forwarded byte, close
//!    the PTY, observe once more and record Clean only when the group is
//!    empty; otherwise retain release intent.
//!
//! Normal guest completion (the exec client exits by itself) takes the same
//! path without signals: the leader has exited, so step 2 has nothing to
//! signal.
//!
//! An interactive terminal starts *admitting* (spec 3.4 acquisition steps
//! 3-5): its guest leader holds the command until the Domain Store records
//! the terminal running. [`Input::Admitted`] tells the leader to run it
//! ([`Command::AdmitGuestLeader`]); [`Input::AdmissionRefused`], or the
//! client, output or exec client going first, starts the release, whose
//! first command tells the leader not to run it
//! ([`Command::RefuseGuestLeader`]).
//!
//! The session's *output* is the PTY master of an interactive session, or
//! the stdout and stderr pipes of a piped one. The piped form (spec 3.4
//! applies its release to every Client Session) feeds the machine only the
//! release inputs: client loss, output end, exec-client completion,
//! observations and timers; its bytes flow through pipes with the kernel's
//! backpressure, and its client is told only the one exit.
use super::protocol::{Chunk, SessionExit, SessionTerminalEvent, TerminalSignalKind};
use super::queue::ClientQueue;
use crate::core::{Core, CoreError};
use crate::records::ids::{GenerationId, SessionId};
use lazaret_generated::session_release::{
    Action, Admission, Confirmation, Constants, Exec, Model, Output, Phases, Reason, Retained,
    Routes, Seen, Stages, State, Timer,
};
use std::num::NonZeroU16;

/// The modeled terminal route (protocol/Lazaret.tla `route`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TerminalRoute {
    None,
    Sandbox,
    Prompt,
    HostProcess,
}

/// A signal for the session's exact guest process group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GuestSignal {
    Interrupt,
    Quit,
    Suspend,
    WindowChange,
    Hangup,
    Terminate,
    Kill,
}

impl GuestSignal {
    /// The Linux signal number (the guest kernel uses Linux numbering).
    pub fn number(self) -> u8 {
        match self {
            Self::Hangup => 1,
            Self::Interrupt => 2,
            Self::Quit => 3,
            Self::Kill => 9,
            Self::Terminate => 15,
            Self::Suspend => 20,
            Self::WindowChange => 28,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Hangup => "SIGHUP",
            Self::Interrupt => "SIGINT",
            Self::Quit => "SIGQUIT",
            Self::Kill => "SIGKILL",
            Self::Terminate => "SIGTERM",
            Self::Suspend => "SIGTSTP",
            Self::WindowChange => "SIGWINCH",
        }
    }
}

impl From<TerminalSignalKind> for GuestSignal {
    fn from(kind: TerminalSignalKind) -> Self {
        match kind {
            TerminalSignalKind::Interrupt => Self::Interrupt,
            TerminalSignalKind::Quit => Self::Quit,
            TerminalSignalKind::Suspend => Self::Suspend,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TimerKind {
    /// How long a refused guest leader gets to say why and exit.
    RefusalWait,
    HangupGrace,
    TerminateGrace,
    DrainDeadline,
}

/// Bounded waits of the release order, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReleaseTimings {
    pub refusal_wait_ms: u64,
    pub hangup_grace_ms: u64,
    pub terminate_grace_ms: u64,
    pub drain_deadline_ms: u64,
}

impl Default for ReleaseTimings {
    fn default() -> Self {
        Self {
            // Generous: a refusal mostly follows a coordinator that was
            // slow for 30 s, and `runsc exec` returning late under that
            // load must not turn the leader's 125 into a kill.
            refusal_wait_ms: 5000,
            hangup_grace_ms: 1000,
            terminate_grace_ms: 1000,
            drain_deadline_ms: 500,
        }
    }
}

/// How the exec client ended, from `waitid` on its pidfd.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecStatus {
    Exited(u8),
    Signalled(u8),
}

/// What an observation of the recorded guest leader and group found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GroupObservation {
    /// The leader PID holds the recorded process with the recorded start time.
    LeaderMatches,
    /// The leader is absent and the recorded group has no members.
    Empty,
    /// The leader is absent but processes of the recorded group remain.
    LeaderAbsentGroupRemains,
    /// Another process holds the leader PID, or the observation failed.
    Mismatch,
}

/// Why the terminal stays in release intent instead of becoming Clean.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RetainReason {
    /// The leader mismatched: no numeric group signal was sent.
    LeaderMismatch,
    /// Group members outlived the leader; Domain teardown contains them.
    GroupRemains,
    /// A piped session whose command completed by itself: nothing is
    /// signalled, so its group is not observed (a guest tool run on every
    /// completed command); members it left are Domain teardown's.
    NotObserved,
    /// The exec client vanished without a usable status: its absence is
    /// not proved (FR-7), so teardown or bootstrap recovery proves it.
    ExecClientLost,
    /// The coordinator did not confirm the release intent durable (spec
    /// 3.4 release step 1), so no release signal was sent; Domain teardown
    /// contains the group with the runtime.
    Unconfirmed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReleaseReason {
    ClientClose,
    ClientLost,
    OutputLost,
    ExecClientLost,
    GuestCompleted,
    /// The terminal was never recorded running (spec 3.4 step 4); its
    /// command never ran.
    NotAdmitted,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// The Domain Store recorded the terminal running (Lazaret.tla
    /// RegisterSession): the command may run.
    Admitted,
    /// The Running record could not be made: the command must not run.
    AdmissionRefused,
    /// A decoded event from the session connection of `generation`.
    Client {
        generation: GenerationId,
        event: SessionTerminalEvent,
    },
    /// The model changed the session's terminal route.
    Route(TerminalRoute),
    /// Bytes read from the PTY master (only after [`Machine::pty_read_budget`]
    /// allowed a read).
    PtyData(Chunk),
    /// The output ended: the PTY master reported EOF, or both output pipes
    /// of a piped session did.
    OutputEof,
    /// The output cannot be read any more.
    OutputLost,
    ClientLost,
    ExecClientExited(ExecStatus),
    /// The exec client vanished without a usable status.
    ExecClientLost,
    Observed(GroupObservation),
    Timer(TimerKind),
    /// The coordinator answered an awaited release intent
    /// ([`Command::RecordReleaseIntent`] with `awaited`): it is durable.
    ReleaseIntentConfirmed,
    /// The coordinator's loop dropped the answer (its step failed, or the
    /// loop is gone), or none came within the gate's backstop: the intent
    /// may not be durable, so no release signal follows.
    ReleaseIntentUnconfirmed,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Tell the waiting guest leader to run the command (spec 3.4 step 5).
    AdmitGuestLeader,
    /// Tell the waiting guest leader to exit without running the command.
    RefuseGuestLeader,
    WritePty(Chunk),
    /// `TIOCSWINSZ` on the PTY master.
    SetWindowSize {
        rows: NonZeroU16,
        columns: NonZeroU16,
        pixel_width: u16,
        pixel_height: u16,
    },
    /// Release signals (SIGHUP, SIGTERM, SIGKILL) for the recorded guest
    /// process group, sent only after an observation found the leader
    /// matching.
    SignalGroup(GuestSignal),
    /// Terminal keys and resize (SIGINT, SIGQUIT, SIGTSTP, SIGWINCH) for the
    /// session terminal's foreground process group, as a real terminal's
    /// line discipline would send them. With runsc this is a signal to the
    /// PTY-attached exec client, which runsc forwards to that group
    /// (docs/terminals.md): under job control the foreground job has its own
    /// group, which the recorded leader group does not reach.
    SignalForeground(GuestSignal),
    /// Observe the recorded leader and group; answer with [`Input::Observed`].
    ObserveGroup,
    StartTimer {
        timer: TimerKind,
        after_ms: u64,
    },
    CancelTimer(TimerKind),
    /// Domain Store `TerminalOp::BeginRelease`, keeping every identity.
    /// `awaited`: the release goes on to observe the leader, so a release
    /// signal may follow and the intent must be durable first (spec 3.4
    /// release step 1 before step 2): answer with [`Input::ReleaseIntentConfirmed`]
    /// or [`Input::ReleaseIntentUnconfirmed`]; no signal is sent before the
    /// confirmation, none at all without it. A release that goes straight
    /// to collecting (the leader exited) sends none, so nothing waits.
    RecordReleaseIntent {
        awaited: bool,
    },
    /// Kill the exact exec client through its retained pidfd.
    TerminateExecClient,
    ReapExecClient,
    /// Close the session's output: the exact PTY master (spec 3.4 release
    /// step 3), or a piped session's output pipes.
    CloseOutput,
    /// Domain Store `TerminalOp::Clean` with the absence proof.
    RecordClean,
    RetainReleaseIntent(RetainReason),
}

/// Why an input was refused (spec 3.4: "An invalid Session ID, inactive
/// route, stale generation, or terminal in release refuses the event").
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("event for session {got} reached the terminal of session {expected}")]
    InvalidSession { expected: SessionId, got: SessionId },
    #[error("event from generation {got}, the terminal belongs to generation {expected}")]
    StaleGeneration {
        expected: GenerationId,
        got: GenerationId,
    },
    #[error("terminal route is {route:?}; {event} is accepted only on the Sandbox route")]
    InactiveRoute {
        route: TerminalRoute,
        event: &'static str,
    },
    #[error("terminal of session {session} is in release; {event} refused")]
    InRelease {
        session: SessionId,
        event: &'static str,
    },
    #[error("terminal of session {session} is not recorded running yet; {event} refused")]
    NotAdmitted {
        session: SessionId,
        event: &'static str,
    },
    /// A developer decision is the prompt's, never the terminal's: the
    /// effects layer takes it while its prompt is open.
    #[error("a {event} is not a terminal event")]
    NotATerminalEvent { event: &'static str },
    #[error("{input} is not expected while the terminal is {phase}")]
    Unexpected {
        input: &'static str,
        phase: &'static str,
    },
    /// A step the machine chose broke an invariant of SessionRelease: a
    /// defect, refused before any effect.
    #[error("terminal of session {session}: {source}")]
    Model {
        session: SessionId,
        #[source]
        source: CoreError,
    },
}

/// One Session Terminal from its admission (spec 3.4 acquisition step 5:
/// terminal events only once the Domain Store recorded it Running).
///
/// Its release order is the generated SessionRelease model
/// (`protocol/SessionRelease.tla`): every input is that model's input
/// step, and every decision is one of its reactions, taken first in `Next`
/// order while one is enabled ([`Machine::react`]); the commands a
/// reaction emits are its effects. What stays hand-written is below the
/// model: the client queue's bytes, the exit status carried in the one
/// `SessionExit`, and the mapping of inputs to steps.
#[derive(Debug)]
pub struct Machine {
    session_id: SessionId,
    generation: GenerationId,
    timings: ReleaseTimings,
    model: Core<Model>,
    /// The exit status `waitid` reported, for the `SessionExit`.
    exit_status: Option<ExecStatus>,
    queue: ClientQueue,
}

fn event_name(event: &SessionTerminalEvent) -> &'static str {
    match event {
        SessionTerminalEvent::Input(_) => "Input",
        SessionTerminalEvent::Resize(_) => "Resize",
        SessionTerminalEvent::Signal(_) => "Signal",
        SessionTerminalEvent::Close(_) => "Close",
        SessionTerminalEvent::Decision(_) => "Decision",
    }
}

fn input_name(input: &Input) -> &'static str {
    match input {
        Input::Admitted => "Admitted",
        Input::AdmissionRefused => "AdmissionRefused",
        Input::Client { .. } => "client event",
        Input::Route(_) => "Route",
        Input::PtyData(_) => "PtyData",
        Input::OutputEof => "OutputEof",
        Input::OutputLost => "OutputLost",
        Input::ClientLost => "ClientLost",
        Input::ExecClientExited(_) => "ExecClientExited",
        Input::ExecClientLost => "ExecClientLost",
        Input::Observed(_) => "Observed",
        Input::Timer(_) => "Timer",
        Input::ReleaseIntentConfirmed => "ReleaseIntentConfirmed",
        Input::ReleaseIntentUnconfirmed => "ReleaseIntentUnconfirmed",
    }
}

/// The reactions of SessionRelease (its "Reaction" disjunction), in `Next`
/// order: the steps the Host Coordinator takes by itself.
const REACTIONS: [Action; 11] = [
    Action::BeginRelease,
    Action::SignalGroup,
    Action::WithholdUnconfirmed,
    Action::WithholdSignal,
    Action::EndGrace,
    Action::CutGraceShort,
    Action::TerminateExecClient,
    Action::ReapExecClient,
    Action::FinishDrain,
    Action::RecordClean,
    Action::RetainReleaseIntent,
];

/// The most reactions one input can enable in a row: each leaves its
/// phase, and no chain is longer than the phases (the longest is an
/// observation that finds the leader after the exec client returned:
/// SignalGroup, CutGraceShort, ReapExecClient, FinishDrain).
const MAX_REACTIONS_PER_INPUT: usize = 11;

fn stage_signal(stage: Stages) -> GuestSignal {
    match stage {
        Stages::Hangup => GuestSignal::Hangup,
        Stages::Terminate => GuestSignal::Terminate,
        Stages::Kill => GuestSignal::Kill,
    }
}

fn timer_kind(timer: Timer) -> Option<TimerKind> {
    match timer {
        Timer::None => None,
        Timer::Refusal => Some(TimerKind::RefusalWait),
        Timer::Hangup => Some(TimerKind::HangupGrace),
        Timer::Terminate => Some(TimerKind::TerminateGrace),
        Timer::Drain => Some(TimerKind::DrainDeadline),
    }
}

fn model_route(route: TerminalRoute) -> Routes {
    match route {
        TerminalRoute::None => Routes::None,
        TerminalRoute::Sandbox => Routes::Sandbox,
        TerminalRoute::Prompt => Routes::Prompt,
        TerminalRoute::HostProcess => Routes::HostProcess,
    }
}

/// SessionRelease's Init: it is constant and breaks no invariant (TLC and
/// the stateright parity check start there).
fn initial(generation: GenerationId) -> Core<Model> {
    Core::<Model>::new(Constants {}, generation.0)
        .unwrap_or_else(|e| unreachable!("SessionRelease Init: {e}"))
}

fn retain_reason(retained: Retained) -> Option<RetainReason> {
    match retained {
        Retained::None => None,
        Retained::LeaderMismatch => Some(RetainReason::LeaderMismatch),
        Retained::GroupRemains => Some(RetainReason::GroupRemains),
        Retained::NotObserved => Some(RetainReason::NotObserved),
        Retained::ExecClientLost => Some(RetainReason::ExecClientLost),
        Retained::Unconfirmed => Some(RetainReason::Unconfirmed),
    }
}

impl Machine {
    /// An interactive terminal waiting for its admission (SessionRelease
    /// `Init`), with a client queue of `queue_bytes`. [`Input::Admitted`]
    /// puts it on the Sandbox route (`AdmitInteractive`; Lazaret.tla
    /// RegisterSession sets `route = "Sandbox"`).
    pub fn new(
        session_id: SessionId,
        generation: GenerationId,
        timings: ReleaseTimings,
        queue_bytes: usize,
    ) -> Self {
        Self {
            session_id,
            generation,
            timings,
            model: initial(generation),
            exit_status: None,
            queue: ClientQueue::new(session_id, queue_bytes),
        }
    }

    /// The release machine of a piped (non-interactive) session
    /// (`AdmitPiped`): the same release order on client, output or
    /// exec-client loss, but a command that completed by itself ends in
    /// `RetainReleaseIntent(NotObserved)` without an observation. Its client
    /// queue holds only the exit.
    pub fn new_piped(
        session_id: SessionId,
        generation: GenerationId,
        timings: ReleaseTimings,
    ) -> Self {
        let mut machine = Self::new(session_id, generation, timings, 0);
        // AdmitPiped is enabled in SessionRelease's constant Init and breaks
        // no invariant: TLC and the stateright parity check explore it
        // (conformance/tests/protocol.rs).
        if let Err(e) = machine.model.take("admit", &Action::AdmitPiped) {
            unreachable!("SessionRelease AdmitPiped refused from Init: {e}");
        }
        machine
    }

    fn st(&self) -> &State {
        self.model.state()
    }

    pub fn session_id(&self) -> SessionId {
        self.session_id
    }

    /// The SessionRelease phase (for traces and state output).
    pub fn phase(&self) -> &'static str {
        self.st().phase.name()
    }

    pub fn route(&self) -> TerminalRoute {
        match self.st().route {
            Routes::None => TerminalRoute::None,
            Routes::Sandbox => TerminalRoute::Sandbox,
            Routes::Prompt => TerminalRoute::Prompt,
            Routes::HostProcess => TerminalRoute::HostProcess,
        }
    }

    pub fn release_reason(&self) -> Option<ReleaseReason> {
        match self.st().reason {
            Reason::None => None,
            Reason::ClientClose => Some(ReleaseReason::ClientClose),
            Reason::ClientLost => Some(ReleaseReason::ClientLost),
            Reason::OutputLost => Some(ReleaseReason::OutputLost),
            Reason::ExecClientLost => Some(ReleaseReason::ExecClientLost),
            Reason::GuestCompleted => Some(ReleaseReason::GuestCompleted),
            Reason::NotAdmitted => Some(ReleaseReason::NotAdmitted),
        }
    }

    pub fn is_clean(&self) -> bool {
        self.st().phase == Phases::Clean
    }

    pub fn retained(&self) -> Option<RetainReason> {
        match self.st().phase {
            Phases::Retained => retain_reason(self.st().retained),
            _ => None,
        }
    }

    /// Whether the terminal has finished release (Clean or retained).
    pub fn is_finished(&self) -> bool {
        matches!(self.st().phase, Phases::Clean | Phases::Retained)
    }

    /// How many bytes the effects layer may read from the PTY master now:
    /// SessionRelease's `Forwarding` (the Sandbox route of a running
    /// terminal, or the close-handshake drain, to a connected client while
    /// the output is open), bounded by the client queue's room
    /// (backpressure onto the kernel PTY buffer). Zero means "do not read".
    pub fn pty_read_budget(&self) -> usize {
        let st = self.st();
        let forwarding = ((st.phase == Phases::Running && st.route == Routes::Sandbox)
            || st.phase == Phases::Draining)
            && st.connected
            && st.output == Output::Open;
        if !forwarding {
            return 0;
        }
        self.queue.room()
    }

    /// The next message for the client connection.
    pub fn poll_message(&mut self) -> Option<super::protocol::SessionTerminalMessage> {
        if !self.st().connected {
            return None;
        }
        self.queue.pop()
    }

    pub fn queued_bytes(&self) -> usize {
        self.queue.queued_bytes()
    }

    pub fn handle(&mut self, input: Input) -> Result<Vec<Command>, Refusal> {
        let name = input_name(&input);
        let step = match input {
            Input::Admitted => return self.admission(Action::AdmitInteractive, name),
            Input::AdmissionRefused => return self.admission(Action::AdmissionRefused, name),
            Input::Client { generation, event } => return self.client_event(generation, event),
            Input::Route(route) => {
                if self.st().phase == Phases::Running && self.st().route == model_route(route) {
                    return Ok(Vec::new());
                }
                match route {
                    TerminalRoute::Sandbox => Action::RouteToSandbox,
                    TerminalRoute::Prompt => Action::RouteToPrompt,
                    TerminalRoute::HostProcess => Action::RouteToHostProcess,
                    // Only release removes the route (BeginRelease).
                    TerminalRoute::None => return self.unexpected(name),
                }
            }
            Input::PtyData(chunk) => {
                if chunk.len() > self.pty_read_budget() {
                    return self.unexpected(name);
                }
                self.queue
                    .push_output(chunk)
                    .map_err(|_| self.refusal_unexpected(name))?;
                return Ok(Vec::new());
            }
            Input::OutputEof => Action::OutputEnds,
            Input::OutputLost => Action::OutputLost,
            Input::ClientLost => Action::ClientConnectionLost,
            Input::ExecClientExited(status @ ExecStatus::Exited(_)) => {
                self.input_step(Action::ExecClientExits, name)?;
                self.exit_status = Some(status);
                return self.react();
            }
            Input::ExecClientExited(status @ ExecStatus::Signalled(_)) => {
                self.input_step(Action::ExecClientSignalled, name)?;
                self.exit_status = Some(status);
                return self.react();
            }
            Input::ExecClientLost => Action::ExecClientLost,
            Input::Observed(observation) => match observation {
                GroupObservation::LeaderMatches => Action::ObservedLeaderMatches,
                GroupObservation::Empty => Action::ObservedEmpty,
                GroupObservation::LeaderAbsentGroupRemains => Action::ObservedGroupRemains,
                GroupObservation::Mismatch => Action::ObservedMismatch,
            },
            Input::Timer(timer) => {
                if timer_kind(self.st().timer) != Some(timer) {
                    return self.unexpected(name);
                }
                Action::TimerExpires
            }
            Input::ReleaseIntentConfirmed => Action::ReleaseIntentConfirmed,
            Input::ReleaseIntentUnconfirmed => Action::ReleaseIntentUnconfirmed,
        };
        self.input_step(step, name)?;
        if step == Action::ClientConnectionLost {
            self.queue.discard();
        }
        self.react()
    }

    /// The admission's answer (spec 3.4 step 5), whose effect tells the
    /// waiting guest leader (and, for a refusal, arms the wait for its
    /// exit).
    fn admission(&mut self, action: Action, name: &'static str) -> Result<Vec<Command>, Refusal> {
        let before = self.st().clone();
        self.input_step(action, name)?;
        let mut out = Vec::new();
        self.effects_of(action, &before, &mut out);
        out.extend(self.react()?);
        Ok(out)
    }

    /// Takes the input step `action`, or refuses the input that stands for
    /// it when the model does not enable it here.
    fn input_step(&mut self, action: Action, name: &'static str) -> Result<(), Refusal> {
        match self.model.take("terminal input", &action) {
            Ok(_line) => Ok(()),
            Err(CoreError::Disabled { .. }) => self.unexpected(name).map(|_| ()),
            Err(source) => Err(Refusal::Model {
                session: self.session_id,
                source,
            }),
        }
    }

    /// Takes every enabled reaction, first in `Next` order, until none is
    /// enabled, and returns their effects in order.
    fn react(&mut self) -> Result<Vec<Command>, Refusal> {
        let mut out = Vec::new();
        for _ in 0..MAX_REACTIONS_PER_INPUT {
            let Some(action) = self.enabled_reaction()? else {
                return Ok(out);
            };
            let before = self.st().clone();
            self.model
                .take("terminal reaction", &action)
                .map_err(|source| Refusal::Model {
                    session: self.session_id,
                    source,
                })?;
            self.effects_of(action, &before, &mut out);
        }
        // Every reaction leaves its phase and none returns to it, so the
        // chain is bounded by the phases (TLC: no cycle of reactions).
        unreachable!(
            "SessionRelease reactions did not settle within {MAX_REACTIONS_PER_INPUT} steps"
        )
    }

    /// The first reaction the model enables, in `Next` order. A reaction
    /// that is enabled but would break an invariant is a defect and is
    /// reported, never skipped (skipping it could leave the release
    /// waiting for nothing).
    fn enabled_reaction(&self) -> Result<Option<Action>, Refusal> {
        for action in REACTIONS {
            match self.model.check(&action) {
                Ok(()) => return Ok(Some(action)),
                Err(CoreError::Disabled { .. }) => {}
                Err(source) => {
                    return Err(Refusal::Model {
                        session: self.session_id,
                        source,
                    })
                }
            }
        }
        Ok(None)
    }

    /// The commands that perform reaction (or admission) `action` from
    /// `before`, in the
    /// order the effects layer must carry them out: a timer the step
    /// disarmed before it fired is cancelled first, then the step's own
    /// effect, then a timer it armed, an observation it asked for, and the
    /// retained release intent it decided.
    fn effects_of(&mut self, action: Action, before: &State, out: &mut Vec<Command>) {
        let after = self.st().clone();
        if before.timer != after.timer && !before.expired {
            if let Some(kind) = timer_kind(before.timer) {
                out.push(Command::CancelTimer(kind));
            }
        }
        match action {
            Action::BeginRelease => {
                // A leader that may still wait for its admission is told
                // first (its exec client may have gone without it): the
                // command never runs, whatever the release then does.
                if before.phase == Phases::Admitting
                    && before.admission == Admission::Pending
                    && before.exec != Exec::Exited
                {
                    out.push(Command::RefuseGuestLeader);
                }
                out.push(Command::RecordReleaseIntent {
                    awaited: after.confirmation == Confirmation::Awaited,
                });
            }
            Action::AdmitInteractive => out.push(Command::AdmitGuestLeader),
            Action::AdmissionRefused => out.push(Command::RefuseGuestLeader),
            Action::SignalGroup => out.push(Command::SignalGroup(stage_signal(before.stage))),
            Action::TerminateExecClient => out.push(Command::TerminateExecClient),
            Action::ReapExecClient => out.push(Command::ReapExecClient),
            Action::FinishDrain => {
                if after.exits > before.exits {
                    // The one SessionExit (Inv_Spec_AtMostOneSessionExit),
                    // after the last forwarded byte in queue order.
                    let exit = self.exit_record(&after);
                    let _only_once = self.queue.push_exit(exit);
                }
                out.push(Command::CloseOutput);
            }
            Action::RecordClean => out.push(Command::RecordClean),
            // Their effects are the timer, observation and retain commands
            // below; input steps are never reactions.
            Action::WithholdSignal
            | Action::WithholdUnconfirmed
            | Action::EndGrace
            | Action::CutGraceShort
            | Action::RetainReleaseIntent
            | Action::AdmitPiped
            | Action::RouteToSandbox
            | Action::RouteToPrompt
            | Action::RouteToHostProcess
            | Action::ClientCloses
            | Action::ClientConnectionLost
            | Action::OutputEnds
            | Action::OutputLost
            | Action::ExecClientExits
            | Action::ExecClientSignalled
            | Action::ExecClientLost
            | Action::ObservedLeaderMatches
            | Action::ObservedEmpty
            | Action::ObservedGroupRemains
            | Action::ObservedMismatch
            | Action::TimerExpires
            | Action::ReleaseIntentConfirmed
            | Action::ReleaseIntentUnconfirmed
            | Action::Terminated => {}
        }
        if before.timer != after.timer {
            if let Some(kind) = timer_kind(after.timer) {
                out.push(self.timer_cmd(kind));
            }
        }
        if after.seen == Seen::Pending && before.seen != Seen::Pending {
            out.push(Command::ObserveGroup);
        }
        if after.phase == Phases::Retained && before.phase != Phases::Retained {
            if let Some(reason) = retain_reason(after.retained) {
                out.push(Command::RetainReleaseIntent(reason));
            }
        }
        tracing::debug!(
            session = %self.session_id,
            action = ?action,
            phase = after.phase.name(),
            "SessionRelease step"
        );
    }

    fn refusal_unexpected(&self, input: &'static str) -> Refusal {
        Refusal::Unexpected {
            input,
            phase: self.phase(),
        }
    }

    fn unexpected(&self, input: &'static str) -> Result<Vec<Command>, Refusal> {
        Err(self.refusal_unexpected(input))
    }

    fn client_event(
        &mut self,
        generation: GenerationId,
        event: SessionTerminalEvent,
    ) -> Result<Vec<Command>, Refusal> {
        let name = event_name(&event);
        if matches!(event, SessionTerminalEvent::Decision(_)) {
            return Err(Refusal::NotATerminalEvent { event: name });
        }
        if event.session_id() != self.session_id {
            return Err(Refusal::InvalidSession {
                expected: self.session_id,
                got: event.session_id(),
            });
        }
        if generation != self.generation {
            return Err(Refusal::StaleGeneration {
                expected: self.generation,
                got: generation,
            });
        }
        let st = self.st();
        if st.phase == Phases::Admitting {
            return Err(Refusal::NotAdmitted {
                session: self.session_id,
                event: name,
            });
        }
        if st.phase != Phases::Running || !st.connected || st.close_requested {
            return Err(Refusal::InRelease {
                session: self.session_id,
                event: name,
            });
        }
        // Close ends the session on any live route (ClientCloses has no
        // route guard but a live one); input, resize and signals need
        // Sandbox (spec 3.4).
        let route_ok = match event {
            SessionTerminalEvent::Close(_) => st.route != Routes::None,
            _ => st.route == Routes::Sandbox,
        };
        if !route_ok {
            return Err(Refusal::InactiveRoute {
                route: self.route(),
                event: name,
            });
        }
        Ok(match event {
            SessionTerminalEvent::Input(input) => {
                if input.bytes.is_empty() {
                    Vec::new()
                } else {
                    vec![Command::WritePty(input.bytes)]
                }
            }
            SessionTerminalEvent::Resize(r) => vec![
                Command::SetWindowSize {
                    rows: r.rows,
                    columns: r.columns,
                    pixel_width: r.pixel_width,
                    pixel_height: r.pixel_height,
                },
                Command::SignalForeground(GuestSignal::WindowChange),
            ],
            SessionTerminalEvent::Signal(s) => vec![Command::SignalForeground(s.signal.into())],
            SessionTerminalEvent::Close(_) => {
                self.input_step(Action::ClientCloses, name)?;
                self.react()?
            }
            SessionTerminalEvent::Decision(_) => Vec::new(),
        })
    }

    fn timer_cmd(&self, timer: TimerKind) -> Command {
        let after_ms = match timer {
            TimerKind::RefusalWait => self.timings.refusal_wait_ms,
            TimerKind::HangupGrace => self.timings.hangup_grace_ms,
            TimerKind::TerminateGrace => self.timings.terminate_grace_ms,
            TimerKind::DrainDeadline => self.timings.drain_deadline_ms,
        };
        Command::StartTimer { timer, after_ms }
    }

    fn exit_record(&self, st: &State) -> SessionExit {
        match (st.exec, self.exit_status) {
            (Exec::Exited, Some(ExecStatus::Exited(code))) if !st.terminated_by_us => {
                SessionExit::exited(self.session_id, code)
            }
            // `runsc exec` reports a guest killed by signal N as exit status
            // 128+N; the client itself dying by a signal that Lazaret did not
            // send (its wrapper killed before exec, an OOM kill) says nothing
            // about the command: the runtime lost it.
            (Exec::Signalled, _) if !st.terminated_by_us => {
                SessionExit::runtime_lost(self.session_id)
            }
            (Exec::Lost, _) => SessionExit::runtime_lost(self.session_id),
            _ => SessionExit::terminated(self.session_id),
        }
    }
}
