//! The pure per-session terminal state machine (spec 3.4 "Session
//! Terminals", FR-15). Sans-IO in the quinn style: [`Input`]s (client events,
//! route changes from the model, PTY data, exec-client completion, guest
//! observations and timer expiries) go in; [`Command`]s come out as data, in
//! the order the effects layer must perform them. Time enters only as
//! [`Input::Timer`]; the machine asks for timers with [`Command::StartTimer`].
//!
//! Release order (spec 3.4 "Session close, Client connection loss, PTY loss,
//! or exec-client loss starts the same physical release"):
//! 1. record release intent (terminal events are refused from here on);
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
//! The session's *output* is the PTY master of an interactive session, or
//! the stdout and stderr pipes of a piped one. The piped form (spec 3.4
//! applies its release to every Client Session) feeds the machine only the
//! release inputs: client loss, output end, exec-client completion,
//! observations and timers; its bytes flow through pipes with the kernel's
//! backpressure, and its client is told only the one exit.
use super::protocol::{Chunk, SessionExit, SessionTerminalEvent, TerminalSignalKind};
use super::queue::ClientQueue;
use crate::records::ids::{GenerationId, SessionId};
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
    HangupGrace,
    TerminateGrace,
    DrainDeadline,
}

/// Bounded waits of the release order, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReleaseTimings {
    pub hangup_grace_ms: u64,
    pub terminate_grace_ms: u64,
    pub drain_deadline_ms: u64,
}

impl Default for ReleaseTimings {
    fn default() -> Self {
        Self {
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
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReleaseReason {
    ClientClose,
    ClientLost,
    OutputLost,
    ExecClientLost,
    GuestCompleted,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
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
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
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
    RecordReleaseIntent,
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
    #[error("{input} is not expected while the terminal is {phase}")]
    Unexpected {
        input: &'static str,
        phase: &'static str,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Hangup,
    Terminate,
    Kill,
}

impl Stage {
    fn signal(self) -> GuestSignal {
        match self {
            Self::Hangup => GuestSignal::Hangup,
            Self::Terminate => GuestSignal::Terminate,
            Self::Kill => GuestSignal::Kill,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Running,
    Observing(Stage),
    Grace(Stage),
    AwaitExec,
    Draining,
    FinalObserve,
    Clean,
    Retained(RetainReason),
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Self::Running => "Running",
            Self::Observing(_) => "Observing",
            Self::Grace(_) => "Grace",
            Self::AwaitExec => "AwaitExec",
            Self::Draining => "Draining",
            Self::FinalObserve => "FinalObserve",
            Self::Clean => "Clean",
            Self::Retained(_) => "Retained",
        }
    }
}

/// Where the exec client is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Exec {
    Running,
    Exited(ExecStatus),
    Lost,
}

/// One Session Terminal, admitted after spec 3.4 acquisition step 4
/// (Running in the Domain Store).
#[derive(Debug)]
pub struct Machine {
    session_id: SessionId,
    generation: GenerationId,
    timings: ReleaseTimings,
    phase: Phase,
    route: TerminalRoute,
    connected: bool,
    pty_open: bool,
    pty_eof: bool,
    exec: Exec,
    terminated_by_us: bool,
    reason: Option<ReleaseReason>,
    refused: Option<RetainReason>,
    queue: ClientQueue,
    /// Whether a guest that completed by itself is observed before Clean
    /// (Session Terminals, spec 3.4) or left to Domain teardown (the piped
    /// form, [`Machine::new_piped`]).
    observe_completed: bool,
}

fn event_name(event: &SessionTerminalEvent) -> &'static str {
    match event {
        SessionTerminalEvent::Input(_) => "Input",
        SessionTerminalEvent::Resize(_) => "Resize",
        SessionTerminalEvent::Signal(_) => "Signal",
        SessionTerminalEvent::Close(_) => "Close",
    }
}

fn input_name(input: &Input) -> &'static str {
    match input {
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
    }
}

impl Machine {
    /// A running terminal on the Sandbox route (the model's RegisterSession
    /// sets `route = "Sandbox"`), with a client queue of `queue_bytes`.
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
            phase: Phase::Running,
            route: TerminalRoute::Sandbox,
            connected: true,
            pty_open: true,
            pty_eof: false,
            exec: Exec::Running,
            terminated_by_us: false,
            reason: None,
            refused: None,
            queue: ClientQueue::new(session_id, queue_bytes),
            observe_completed: true,
        }
    }

    /// The release machine of a piped (non-interactive) session: the same
    /// release order on client, output or exec-client loss, but a command
    /// that completed by itself ends in `RetainReleaseIntent(NotObserved)`
    /// without an observation. Its client queue holds only the exit.
    pub fn new_piped(
        session_id: SessionId,
        generation: GenerationId,
        timings: ReleaseTimings,
    ) -> Self {
        Self {
            observe_completed: false,
            ..Self::new(session_id, generation, timings, 0)
        }
    }

    pub fn session_id(&self) -> SessionId {
        self.session_id
    }

    /// The phase name (for traces and state output).
    pub fn phase(&self) -> &'static str {
        self.phase.name()
    }

    pub fn route(&self) -> TerminalRoute {
        self.route
    }

    pub fn release_reason(&self) -> Option<ReleaseReason> {
        self.reason
    }

    pub fn is_clean(&self) -> bool {
        self.phase == Phase::Clean
    }

    pub fn retained(&self) -> Option<RetainReason> {
        match self.phase {
            Phase::Retained(r) => Some(r),
            _ => None,
        }
    }

    /// How many bytes the effects layer may read from the PTY master now.
    /// Zero means "do not read": off the Sandbox route, in release (except
    /// the close-handshake drain), after EOF, or when the client queue is
    /// full (backpressure onto the kernel PTY buffer).
    pub fn pty_read_budget(&self) -> usize {
        let forwarding = match self.phase {
            Phase::Running => self.route == TerminalRoute::Sandbox,
            Phase::Draining => true,
            _ => false,
        };
        if !forwarding || !self.connected || !self.pty_open || self.pty_eof {
            return 0;
        }
        self.queue.room()
    }

    /// The next message for the client connection.
    pub fn poll_message(&mut self) -> Option<super::protocol::SessionTerminalMessage> {
        if !self.connected {
            return None;
        }
        self.queue.pop()
    }

    pub fn queued_bytes(&self) -> usize {
        self.queue.queued_bytes()
    }

    pub fn handle(&mut self, input: Input) -> Result<Vec<Command>, Refusal> {
        let name = input_name(&input);
        match input {
            Input::Client { generation, event } => self.client_event(generation, event),
            Input::Route(route) => {
                if self.phase != Phase::Running {
                    return self.unexpected(name);
                }
                self.route = route;
                Ok(Vec::new())
            }
            Input::PtyData(chunk) => {
                if chunk.len() > self.pty_read_budget() {
                    return self.unexpected(name);
                }
                self.queue
                    .push_output(chunk)
                    .map_err(|_| self.refusal_unexpected(name))?;
                Ok(Vec::new())
            }
            Input::OutputEof => {
                if !self.pty_open || self.pty_eof {
                    return self.unexpected(name);
                }
                self.pty_eof = true;
                if self.phase == Phase::Draining {
                    let mut out = vec![Command::CancelTimer(TimerKind::DrainDeadline)];
                    out.extend(self.finish_drain());
                    return Ok(out);
                }
                Ok(Vec::new())
            }
            Input::OutputLost => {
                if !self.pty_open {
                    return self.unexpected(name);
                }
                self.pty_eof = true;
                match self.phase {
                    Phase::Running => Ok(self.begin_release(ReleaseReason::OutputLost)),
                    Phase::Draining => {
                        let mut out = vec![Command::CancelTimer(TimerKind::DrainDeadline)];
                        out.extend(self.finish_drain());
                        Ok(out)
                    }
                    _ => Ok(Vec::new()),
                }
            }
            Input::ClientLost => {
                if !self.connected {
                    return self.unexpected(name);
                }
                self.connected = false;
                self.queue.discard();
                match self.phase {
                    Phase::Running => Ok(self.begin_release(ReleaseReason::ClientLost)),
                    Phase::Draining => {
                        let mut out = vec![Command::CancelTimer(TimerKind::DrainDeadline)];
                        out.extend(self.finish_drain());
                        Ok(out)
                    }
                    _ => Ok(Vec::new()),
                }
            }
            Input::ExecClientExited(status) => self.exec_ended(Exec::Exited(status), name),
            Input::ExecClientLost => self.exec_ended(Exec::Lost, name),
            Input::Observed(observation) => self.observed(observation, name),
            Input::Timer(timer) => self.timer(timer, name),
        }
    }

    fn refusal_unexpected(&self, input: &'static str) -> Refusal {
        Refusal::Unexpected {
            input,
            phase: self.phase.name(),
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
        if self.phase != Phase::Running || !self.connected {
            return Err(Refusal::InRelease {
                session: self.session_id,
                event: name,
            });
        }
        // Close ends the session on any live route (the model's CloseSession
        // has no route guard); input, resize and signals need Sandbox.
        let route_ok = match event {
            SessionTerminalEvent::Close(_) => self.route != TerminalRoute::None,
            _ => self.route == TerminalRoute::Sandbox,
        };
        if !route_ok {
            return Err(Refusal::InactiveRoute {
                route: self.route,
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
            SessionTerminalEvent::Close(_) => self.begin_release(ReleaseReason::ClientClose),
        })
    }

    fn begin_release(&mut self, reason: ReleaseReason) -> Vec<Command> {
        self.reason = Some(reason);
        self.route = TerminalRoute::None;
        let mut out = vec![Command::RecordReleaseIntent];
        if self.exec == Exec::Running || reason == ReleaseReason::ExecClientLost {
            // The leader may still run: observe before any signal.
            self.phase = Phase::Observing(Stage::Hangup);
            out.push(Command::ObserveGroup);
        } else {
            // The exec client returned: its leader has exited.
            out.extend(self.collect());
        }
        out
    }

    fn observed(
        &mut self,
        observation: GroupObservation,
        name: &'static str,
    ) -> Result<Vec<Command>, Refusal> {
        match self.phase {
            Phase::Observing(stage) => {
                if observation == GroupObservation::LeaderMatches {
                    let mut out = vec![Command::SignalGroup(stage.signal())];
                    match stage {
                        Stage::Hangup => {
                            self.phase = Phase::Grace(stage);
                            out.push(self.timer_cmd(TimerKind::HangupGrace));
                        }
                        Stage::Terminate => {
                            self.phase = Phase::Grace(stage);
                            out.push(self.timer_cmd(TimerKind::TerminateGrace));
                        }
                        Stage::Kill => out.extend(self.collect()),
                    }
                    return Ok(out);
                }
                match observation {
                    GroupObservation::Mismatch => {
                        self.refused = Some(RetainReason::LeaderMismatch);
                    }
                    GroupObservation::LeaderAbsentGroupRemains => {
                        self.refused = Some(RetainReason::GroupRemains);
                    }
                    GroupObservation::Empty | GroupObservation::LeaderMatches => {}
                }
                Ok(self.collect())
            }
            Phase::FinalObserve => {
                let retain = match (self.refused, observation) {
                    (Some(reason), _) => Some(reason),
                    (None, GroupObservation::Empty) => None,
                    (None, GroupObservation::Mismatch) => Some(RetainReason::LeaderMismatch),
                    (None, _) => Some(RetainReason::GroupRemains),
                };
                Ok(match retain {
                    None => {
                        self.phase = Phase::Clean;
                        vec![Command::RecordClean]
                    }
                    Some(reason) => {
                        self.phase = Phase::Retained(reason);
                        vec![Command::RetainReleaseIntent(reason)]
                    }
                })
            }
            _ => self.unexpected(name),
        }
    }

    fn timer_cmd(&self, timer: TimerKind) -> Command {
        let after_ms = match timer {
            TimerKind::HangupGrace => self.timings.hangup_grace_ms,
            TimerKind::TerminateGrace => self.timings.terminate_grace_ms,
            TimerKind::DrainDeadline => self.timings.drain_deadline_ms,
        };
        Command::StartTimer { timer, after_ms }
    }

    fn timer(&mut self, timer: TimerKind, name: &'static str) -> Result<Vec<Command>, Refusal> {
        match (self.phase, timer) {
            (Phase::Grace(Stage::Hangup), TimerKind::HangupGrace) => {
                self.phase = Phase::Observing(Stage::Terminate);
                Ok(vec![Command::ObserveGroup])
            }
            (Phase::Grace(Stage::Terminate), TimerKind::TerminateGrace) => {
                self.phase = Phase::Observing(Stage::Kill);
                Ok(vec![Command::ObserveGroup])
            }
            (Phase::Draining, TimerKind::DrainDeadline) => Ok(self.finish_drain()),
            _ => self.unexpected(name),
        }
    }

    fn exec_ended(&mut self, how: Exec, name: &'static str) -> Result<Vec<Command>, Refusal> {
        if self.exec != Exec::Running {
            return self.unexpected(name);
        }
        self.exec = how;
        match self.phase {
            Phase::Running => Ok(self.begin_release(match how {
                Exec::Lost => ReleaseReason::ExecClientLost,
                _ => ReleaseReason::GuestCompleted,
            })),
            Phase::Grace(stage) => {
                let timer = match stage {
                    Stage::Hangup => TimerKind::HangupGrace,
                    _ => TimerKind::TerminateGrace,
                };
                let mut out = vec![Command::CancelTimer(timer)];
                out.extend(self.collect());
                Ok(out)
            }
            Phase::AwaitExec => Ok(self.collect()),
            // An observation is outstanding; its answer continues the release.
            Phase::Observing(_) => Ok(Vec::new()),
            _ => self.unexpected(name),
        }
    }

    /// Step 3: terminate (if needed) and reap the exec client, then drain.
    fn collect(&mut self) -> Vec<Command> {
        match self.exec {
            Exec::Running => {
                self.phase = Phase::AwaitExec;
                self.terminated_by_us = true;
                vec![Command::TerminateExecClient]
            }
            Exec::Exited(_) | Exec::Lost => {
                let mut out = vec![Command::ReapExecClient];
                let handshake = self.connected
                    && matches!(
                        self.reason,
                        Some(ReleaseReason::ClientClose | ReleaseReason::GuestCompleted)
                    );
                if handshake && self.pty_open && !self.pty_eof {
                    self.phase = Phase::Draining;
                    out.push(self.timer_cmd(TimerKind::DrainDeadline));
                } else {
                    out.extend(self.finish_drain());
                }
                out
            }
        }
    }

    fn exit_record(&self) -> SessionExit {
        match self.exec {
            Exec::Exited(ExecStatus::Exited(code)) if !self.terminated_by_us => {
                SessionExit::exited(self.session_id, code)
            }
            // `runsc exec` reports a guest killed by signal N as exit status
            // 128+N; the client itself dying by a signal that Lazaret did not
            // send (its wrapper killed before exec, an OOM kill) says nothing
            // about the command: the runtime lost it.
            Exec::Exited(ExecStatus::Signalled(_)) if !self.terminated_by_us => {
                SessionExit::runtime_lost(self.session_id)
            }
            Exec::Lost => SessionExit::runtime_lost(self.session_id),
            _ => SessionExit::terminated(self.session_id),
        }
    }

    fn finish_drain(&mut self) -> Vec<Command> {
        if self.connected && self.reason != Some(ReleaseReason::ClientLost) {
            // One SessionExit, after the last forwarded byte (queue order).
            let exit = self.exit_record();
            // finish_drain runs once per terminal (the phase leaves
            // Draining for good), so this is the only SessionExit.
            let _only_once = self.queue.push_exit(exit);
        }
        let mut out = Vec::new();
        if self.pty_open {
            self.pty_open = false;
            out.push(Command::CloseOutput);
        }
        if !self.observe_completed
            && self.reason == Some(ReleaseReason::GuestCompleted)
            && self.refused.is_none()
        {
            self.phase = Phase::Retained(RetainReason::NotObserved);
            out.push(Command::RetainReleaseIntent(RetainReason::NotObserved));
            return out;
        }
        self.phase = Phase::FinalObserve;
        out.push(Command::ObserveGroup);
        out
    }
}
