//! The Host Coordinator's side of the Escalation Mailbox (spec 3.8): takes
//! the sandbox's requests from the inbound directory, authenticates and
//! admits them (`lazaret_runtime::escalation`), runs an auto-approved one
//! through the shell-free launcher, streams its output as signed chunks
//! within the window of eight, follows the client's acknowledgements and
//! cancellation, and writes the signed terminal result.
//!
//! A request no auto-approval rule matches exactly goes to the developer
//! prompt on its own session's terminal ([`PromptDesk`]; DX-4, FR-5): the
//! developer's signed approval runs the approved vector, whose executable
//! is opened and checked like a rule's; a denial, an invalid decision, no
//! answer within [`Limits::prompt`], or a session without a terminal
//! answers without running anything.
//!
//! Each request is served to its result by [`Service::serve`] on the
//! caller's thread; the host process is killed and reaped through its pidfd
//! before `serve` returns, whatever happens (OR-3).
use std::cell::Cell;
use std::ffi::OsStr;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use lazaret_runtime::config::ResolvedAutoApprovalRule;
use lazaret_runtime::escalation::command::{classify, RuleMatch};
use lazaret_runtime::escalation::edit_line::edit_line;
use lazaret_runtime::escalation::prompt::{showable, PromptExpectation};
use lazaret_runtime::escalation::steps::{EscalationStep, RequestPlace};
use lazaret_runtime::escalation::{
    authenticate, correlate_ack, correlate_cancellation, MailboxAuthority, MailboxRefusal,
    OpenRequest, RequestLedger, ResultError, ResultWindow, SandboxSigned,
};
use lazaret_runtime::protocol::mailbox::{
    DeveloperDecisionKind, EscalationOutcome, MailboxCancellation, MailboxEntry, MailboxError,
    MailboxRequest, MailboxResultAck, ResultStream, SignedProtocolRecord, MAX_RESULT_CHUNK,
};
use lazaret_runtime::protocol::records::SessionBinding;
use lazaret_runtime::protocol::ResultSigner;
use lazaret_runtime::records::ids::EscalationRequestId;

use lazaret_runtime::terminal::protocol::{EscalationPrompt, PromptClosing};

use super::host_process::HostProcess;
use super::launcher::{host_command, open_executable, HostProcessSetting, LaunchError};
use super::model_steps::{EscalationSteps, StepRefused};
use super::prompt_desk::{PromptAnswer, PromptDesk, TerminalLease, TerminalUse};
use super::running::RunningHostProcesses;
use super::{MailboxDir, MailboxReadError, MailboxWriteError};
use crate::confined::{ConfinedSys, OpenedObject, UserIds};
use crate::process_identity::ChildState;

/// An auto-approval rule and the executable object it approves.
#[derive(Clone, Copy, Debug)]
pub struct ApprovalRule<'a> {
    pub rule: &'a ResolvedAutoApprovalRule,
    pub executable: &'a OpenedObject,
}

/// The service's time bounds.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// How long a host process may run (the model's `HostProcessTimeout`).
    pub run: Duration,
    /// How long the client may leave chunks unacknowledged before the host
    /// process is stopped (while it runs) or the chunks are given up
    /// (after it ended; the model's `AckTimeout`).
    pub ack: Duration,
    /// How often the inbound directory is looked at while a request runs.
    pub poll: Duration,
    /// How old an unfinished write (a temporary) may get before it is
    /// removed.
    pub temporary: Duration,
    /// How long a delivered result (and a chunk of a request no longer
    /// open) stays in `results/` for its client.
    pub retention: Duration,
    /// How long a developer prompt waits for an answer (the model's
    /// `PromptTimeout`).
    pub prompt: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            run: Duration::from_secs(600),
            ack: Duration::from_secs(30),
            poll: Duration::from_millis(2),
            temporary: Duration::from_secs(30),
            retention: Duration::from_secs(300),
            prompt: Duration::from_secs(300),
        }
    }
}

/// A step of serving that failed; the host process was killed and reaped
/// before it was returned.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error(transparent)]
    Read(#[from] MailboxReadError),
    #[error(transparent)]
    Write(#[from] MailboxWriteError),
    #[error("cannot sign a result record: {0}")]
    Seal(#[from] MailboxError),
    #[error("the result window: {0}")]
    Window(#[from] ResultError),
    #[error("escalation host process: cannot {step}: {source}")]
    Process {
        step: &'static str,
        source: std::io::Error,
    },
    #[error("escalation host process: cannot stop and reap it: {source}")]
    ProcessNotStopped { source: std::io::Error },
}

/// An authenticated, admitted request waiting to be served.
#[derive(Debug)]
pub struct Admitted {
    pub request: MailboxRequest,
    pub open: OpenRequest,
    /// The model's `RuleMatches` value of its vector.
    pub matched: RuleMatch,
}

/// How a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Served {
    pub outcome: EscalationOutcome,
    pub exit_code: Option<i32>,
    /// Chunks written.
    pub chunks: u64,
    /// The most chunks unacknowledged at once.
    pub most_unacknowledged: u64,
}

/// The Escalation Mailbox of one generation, served.
pub struct Service<'a> {
    pub sys: &'a dyn ConfinedSys,
    /// Inbound: requests, cancellations, acknowledgements.
    pub requests: &'a MailboxDir,
    /// Outbound: chunks and results.
    pub results: &'a MailboxDir,
    pub authority: &'a MailboxAuthority,
    /// Signs chunks and results with the Session Coordinator's key.
    pub signer: &'a ResultSigner,
    pub rules: &'a [ApprovalRule<'a>],
    /// The sessions' terminals for developer prompts; `None`: no request
    /// is ever prompted (every inexact one is denied).
    pub prompts: Option<&'a PromptDesk>,
    pub user: &'a UserIds,
    pub setting: &'a HostProcessSetting,
    pub limits: Limits,
    /// Where each model step of serving is taken (the coordinator's
    /// event loop).
    pub steps: &'a dyn EscalationSteps,
    /// Where host processes are spawned and registered, so their
    /// session's close stops them.
    pub running: &'a RunningHostProcesses,
}

impl std::fmt::Debug for Service<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("requests", &self.requests.label())
            .field("results", &self.results.label())
            .field("rules", &self.rules.len())
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// How long output may stay open after the host process exited (held by a
/// process it started) before its result follows anyway.
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// How often an open prompt looks for the sandbox's cancellation, the
/// session's end and its deadline (an answer is taken at once).
const PROMPT_POLL: Duration = Duration::from_millis(20);

/// A decision that reached the prompt just before the request ended
/// otherwise (its session ended, the sandbox cancelled it, the model no
/// longer had it open): its terminal showed it, the request does not
/// follow it.
fn not_followed(answer: Option<PromptAnswer>) {
    let answer = match answer {
        Some(PromptAnswer::Decided(d)) if d.decision == DeveloperDecisionKind::Approve => {
            "approved"
        }
        Some(PromptAnswer::Decided(_) | PromptAnswer::Refused(_)) => "denied",
        // A terminal that closed decided nothing.
        Some(PromptAnswer::Closed) | None => return,
    };
    tracing::info!(answer, "a decision crossed its request's end: not followed");
}

/// What is left to do when the host process's output is all written.
enum Ending {
    Exited(Option<i32>),
    /// The sandbox's cancellation (`RequestCancellation` taken).
    Cancelled,
    TimedOut,
    /// The session ended, or the model refused a step: no more steps.
    SessionEnded,
}

/// A request's result as written.
#[derive(Clone, Copy, Debug)]
struct Ended {
    outcome: EscalationOutcome,
    exit_code: Option<i32>,
    /// The most chunks unacknowledged at once.
    most: u64,
}

impl Ended {
    fn with(outcome: EscalationOutcome) -> Self {
        Self {
            outcome,
            exit_code: None,
            most: 0,
        }
    }
}

/// How long the session's terminal loop may take to apply what a request
/// wants of it (it wakes at once, but may be running a guest observation
/// or a signal through runsc) before it counts as stuck.
const TERMINAL_WAIT: Duration = Duration::from_secs(30);

/// The most steps `finish` takes (see there).
const FINISH_STEPS_MAX: usize = 12;

/// One request's model steps, taken through the coordinator: where they
/// moved the session ([`RequestPlace`]), and whether the model still has
/// the request. After the first refusal no step is taken: the model moved
/// on without it (its session closed, the runtime ended).
struct RequestSteps<'s> {
    steps: &'s dyn EscalationSteps,
    binding: &'s SessionBinding,
    /// Whether a session is one the coordinator serves now.
    registered: &'s dyn Fn(&SessionBinding) -> bool,
    place: Cell<RequestPlace>,
    open: Cell<bool>,
}

impl<'s> RequestSteps<'s> {
    fn new(
        steps: &'s dyn EscalationSteps,
        binding: &'s SessionBinding,
        registered: &'s dyn Fn(&SessionBinding) -> bool,
    ) -> Self {
        Self {
            steps,
            binding,
            registered,
            place: Cell::new(RequestPlace::default()),
            open: Cell::new(true),
        }
    }

    /// Whether the request's session is still served.
    fn served(&self) -> bool {
        (self.registered)(self.binding)
    }

    fn place(&self) -> RequestPlace {
        self.place.get()
    }

    fn open(&self) -> bool {
        self.open.get()
    }

    /// The session is gone (or never was the model's): no step is taken
    /// from now on.
    fn outside_the_model(&self) {
        self.open.set(false);
    }

    /// Takes `step`; false when the model refused it or an earlier one.
    fn take(&self, step: EscalationStep) -> bool {
        self.take_together(&[step])
    }

    /// Takes `steps` together ([`EscalationSteps::take`]); false when the
    /// model refused one of them or an earlier step.
    fn take_together(&self, steps: &[EscalationStep]) -> bool {
        if !self.open() {
            return false;
        }
        let answer = self.steps.take(self.binding.session_id, steps);
        let refused = answer.as_ref().err().map(StepRefused::step);
        for &step in steps.iter().take_while(|&&s| Some(s) != refused) {
            self.place.set(self.place().after(step));
            match step {
                EscalationStep::EmitResultChunk | EscalationStep::AckResultChunk => {
                    tracing::debug!(%step, unacked = self.place().unacked, "escalation step");
                }
                _ => tracing::info!(%step, "escalation step"),
            }
        }
        match answer {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(error = %e, "the request goes no further in the model");
                self.open.set(false);
                false
            }
        }
    }
}

impl Service<'_> {
    /// One pass over the inbound directory. Every request file is read
    /// once and removed; those that authenticate (`registered` answers for
    /// the live sessions) and are admitted by `ledger` are returned, in
    /// name order, the others refused (returned with their refusals; no
    /// result is written: nothing authenticated asked). Acknowledgements
    /// and cancellations of requests not `open` now, names Lazaret never
    /// writes, and temporaries older than [`Limits::temporary`] are removed, so
    /// nothing the sandbox leaves accumulates. One entry's failure is that
    /// entry's refusal, never the pass's.
    pub fn take_requests(
        &self,
        ledger: &mut RequestLedger,
        registered: &dyn Fn(&SessionBinding) -> bool,
        open: &dyn Fn(EscalationRequestId) -> bool,
    ) -> Result<Pass, ServiceError> {
        let listing = self.requests.list(self.sys)?;
        let mut pass = Pass::default();
        for name in listing.foreign {
            self.discard(&name, &mut pass, "a name Lazaret never writes");
        }
        for (name, age) in listing.temporary {
            if age > self.limits.temporary {
                self.discard(&name, &mut pass, "an unfinished write");
            }
        }
        for entry in listing.entries {
            let name = entry.name();
            let id = match entry {
                MailboxEntry::Request(id) => id,
                MailboxEntry::Ack(id, _) | MailboxEntry::Cancellation(id) => {
                    if !open(id) {
                        self.discard(OsStr::new(&name), &mut pass, "no open request");
                    }
                    continue;
                }
                MailboxEntry::Chunk(..) | MailboxEntry::Result(_) => {
                    self.discard(OsStr::new(&name), &mut pass, "not a request");
                    continue;
                }
            };
            let read = self.requests.read(self.sys, OsStr::new(&name));
            if let Err(e) = self.remove_entry(self.requests, OsStr::new(&name)) {
                pass.refused.push((name.clone(), e.to_string()));
                continue;
            }
            let accepted = read.map_err(|e| e.to_string()).and_then(|bytes| {
                let file = SignedProtocolRecord::read(&bytes).map_err(|e| e.to_string())?;
                let (request, digest) =
                    authenticate::<MailboxRequest>(&file, self.authority, registered)
                        .map_err(|e| e.to_string())?;
                ledger.admit(&request).map_err(|e| e.to_string())?;
                Ok((request, digest))
            });
            match accepted {
                Ok((request, digest)) => {
                    debug_assert_eq!(request.request_id, id);
                    let rules: Vec<ResolvedAutoApprovalRule> =
                        self.rules.iter().map(|r| r.rule.clone()).collect();
                    let matched = classify(&rules, &request.command_argv);
                    tracing::info!(request = %request.request_id, session = %request.session_binding.session_id, m = matched.model().name(), "an escalation request is admitted");
                    pass.admitted.push(Admitted {
                        open: OpenRequest::of(&request, digest),
                        request,
                        matched,
                    });
                }
                Err(refusal) => pass.refused.push((name, refusal)),
            }
        }
        Ok(pass)
    }

    /// Removes from `results/` what no client can still want: results and
    /// chunks of requests not `open`, older than [`Limits::retention`].
    /// Returns how many went.
    pub fn sweep_results(
        &self,
        open: &dyn Fn(EscalationRequestId) -> bool,
    ) -> Result<usize, ServiceError> {
        let listing = self.results.list(self.sys)?;
        let mut removed = 0;
        for entry in listing.entries {
            let (MailboxEntry::Result(id) | MailboxEntry::Chunk(id, _)) = entry else {
                continue;
            };
            let name = entry.name();
            let old = self
                .results
                .age(self.sys, OsStr::new(&name))
                .is_some_and(|age| age > self.limits.retention);
            if old && !open(id) && self.remove_entry(self.results, OsStr::new(&name)).is_ok() {
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// Removes inbound entry `name`, noting it in `pass`.
    fn discard(&self, name: &OsStr, pass: &mut Pass, why: &str) {
        let outcome = match self.remove_entry(self.requests, name) {
            Ok(()) => why.to_owned(),
            Err(e) => format!("{why}; {e}"),
        };
        pass.refused
            .push((name.to_string_lossy().into_owned(), outcome));
    }

    /// Removes `name` from `dir`; one already gone is removed.
    fn remove_entry(&self, dir: &MailboxDir, name: &OsStr) -> Result<(), MailboxWriteError> {
        match dir.remove(self.sys, name) {
            Err(MailboxWriteError::Remove { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                Ok(())
            }
            other => other,
        }
    }

    /// Serves `admitted` to its terminal result. `registered` is asked
    /// again while it runs: a session that ends stops its host process.
    /// Every step is the model's, taken through [`Service::steps`]; a
    /// step the model refuses ends the request there (its session closed).
    /// Every admitted request gets a result: when a step fails, the host
    /// process is stopped and reaped and a `Failed` result is still
    /// written where the mailbox allows, after the model's own way to it.
    pub fn serve(
        &self,
        admitted: &Admitted,
        registered: &dyn Fn(&SessionBinding) -> bool,
    ) -> Result<Served, ServiceError> {
        let _span =
            tracing::info_span!("AcceptEscalation", request = %admitted.open.request_id).entered();
        let session = admitted.open.session_binding.session_id;
        let steps = RequestSteps::new(self.steps, &admitted.open.session_binding, registered);
        // Spec 3.4: while the request has its session's terminal, the PTY
        // master is not read (dropped: the terminal forwards again).
        let lease = self.prompts.and_then(|desk| desk.lease(session));
        let lease = lease.as_ref();
        let mut window = ResultWindow::new(admitted.open.clone(), self.signer.credential_id());
        match self.serve_in(admitted, &mut window, registered, &steps, lease) {
            Ok(served) => Ok(served),
            Err(ServiceError::ProcessNotStopped { source }) => {
                // The process may still run: no result or step may say it
                // ended.
                Err(ServiceError::ProcessNotStopped { source })
            }
            Err(e) => {
                tracing::warn!(error = %e, "serving an escalation request failed");
                self.finish(
                    &steps,
                    lease,
                    &mut window,
                    Ended::with(EscalationOutcome::Failed),
                )
                .map_err(|_| e)
            }
        }
    }

    /// The outcome a refusal of `admitted` without running it gets
    /// (too many requests waiting): `Denied`, so its client ends. It was
    /// never the model's request: no step is taken.
    pub fn refuse(&self, admitted: &Admitted) -> Result<Served, ServiceError> {
        let mut window = ResultWindow::new(admitted.open.clone(), self.signer.credential_id());
        self.write_result(&mut window, Ended::with(EscalationOutcome::Denied))
    }

    fn serve_in(
        &self,
        admitted: &Admitted,
        window: &mut ResultWindow,
        registered: &dyn Fn(&SessionBinding) -> bool,
        steps: &RequestSteps<'_>,
        lease: Option<&TerminalLease>,
    ) -> Result<Served, ServiceError> {
        let cancelled = Ended::with(EscalationOutcome::Cancelled);
        let failed = Ended::with(EscalationOutcome::Failed);
        // A request whose session ended while it waited is not run.
        if !registered(&admitted.open.session_binding) {
            steps.outside_the_model();
            return self.finish(steps, lease, window, cancelled);
        }
        let submitted = steps.take(EscalationStep::SubmitEscalation(admitted.matched.model()))
            && steps.take(EscalationStep::AcceptEscalation);
        if !submitted {
            return self.finish(steps, lease, window, cancelled);
        }
        let approved;
        let (executable, argv) = match admitted.matched {
            RuleMatch::Exact { rule } => {
                let Some(approval) = self.rules.get(rule) else {
                    return self.finish(steps, lease, window, failed);
                };
                tracing::info!(rule, "an auto-approval rule matches exactly");
                if !steps.take(EscalationStep::AutoApproveEscalation) {
                    return self.finish(steps, lease, window, cancelled);
                }
                (approval.executable, &admitted.request.command_argv)
            }
            RuleMatch::Inexact => match self.prompt(admitted, window, registered, steps, lease)? {
                Prompted::Ended(outcome) => {
                    return self.finish(steps, lease, window, Ended::with(outcome))
                }
                Prompted::Approved(argv) => {
                    // The developer's vector: its executable is opened and
                    // checked as a rule's is when the configuration loads.
                    let Some(path) = argv.first() else {
                        return self.finish(steps, lease, window, failed);
                    };
                    match open_executable(self.sys, self.user, std::path::Path::new(path)) {
                        Ok(object) => approved = (object, argv),
                        Err(e) => {
                            tracing::warn!(error = %e, "the approved executable cannot run");
                            return self.finish(steps, lease, window, failed);
                        }
                    }
                    (&approved.0, &approved.1)
                }
            },
        };
        // Spec 3.4: the terminal stops forwarding before the host process
        // takes it (a prompt's request stopped it before its prompt).
        let held = !steps.place().forwarding
            || self.terminal_step(
                steps,
                lease,
                TerminalUse::Held,
                EscalationStep::PauseTerminalForwarding,
            );
        if !held {
            return self.finish(steps, lease, window, cancelled);
        }
        let (report_read, report_write) =
            match rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC) {
                Ok(pipe) => pipe,
                Err(e) => {
                    let e = LaunchError::Spawn(e.into());
                    tracing::warn!(error = %e, "the approved executable cannot run");
                    return self.finish(steps, lease, window, failed);
                }
            };
        let command = host_command(
            self.sys,
            self.user,
            executable,
            argv,
            self.setting,
            report_write.as_fd(),
        );
        let mut command = match command {
            Ok(command) => command,
            Err(e) => {
                tracing::warn!(error = %e, "the approved executable cannot run");
                return self.finish(steps, lease, window, failed);
            }
        };
        if !self.terminal_step(
            steps,
            lease,
            TerminalUse::HostProcess,
            EscalationStep::StartHostProcess,
        ) {
            return self.finish(steps, lease, window, cancelled);
        }
        let session = admitted.open.session_binding.session_id;
        // Spawned only while the session is served, under the lock its
        // close takes: a close after this stops the process itself.
        let spawned = self.running.spawn(
            session,
            || steps.served(),
            || HostProcess::spawn(&mut command, report_read, report_write),
        );
        let Some(spawned) = spawned else {
            // Closed after the step: the process is never spawned.
            steps.outside_the_model();
            return self.finish(steps, lease, window, cancelled);
        };
        // Registered until the process is stopped and reaped below (or
        // this returns any other way).
        let (started, _registration) = match spawned {
            Ok((starting, registration)) => (starting.started(), Some(registration)),
            Err(e) => (Err(e), None),
        };
        let mut process = match started {
            Ok(process) => process,
            Err(e) => {
                // Started in the model: it ended at once.
                let e = LaunchError::Spawn(e);
                tracing::warn!(error = %e, "the approved executable cannot run");
                return self.finish(steps, lease, window, failed);
            }
        };
        let result = self.stream(admitted, window, &mut process, registered, steps);
        // Whatever happened, the process is gone before its results are
        // (OR-3); if it cannot be stopped, nothing says it ended.
        process
            .kill_and_reap()
            .map_err(|source| ServiceError::ProcessNotStopped { source })?;
        let (ending, most) = result?;
        let ended = |outcome, exit_code| Ended {
            outcome,
            exit_code,
            most,
        };
        match ending {
            Ending::Exited(code) => {
                tracing::info!(?code, "the host process exited");
                self.terminal_step(
                    steps,
                    lease,
                    TerminalUse::Held,
                    EscalationStep::HostProcessExits,
                );
                // The client prints what it was sent on its terminal, and
                // acknowledges the rest, only once output flows again.
                self.terminal_step(
                    steps,
                    lease,
                    TerminalUse::Forwarding,
                    EscalationStep::ResumeTerminalForwarding,
                );
                self.settle(admitted, window, registered, steps)?;
                self.finish(
                    steps,
                    lease,
                    window,
                    ended(EscalationOutcome::Completed, code),
                )
            }
            Ending::TimedOut => {
                self.terminal_step(
                    steps,
                    lease,
                    TerminalUse::Held,
                    EscalationStep::HostProcessTimeout,
                );
                self.finish(
                    steps,
                    lease,
                    window,
                    ended(EscalationOutcome::TimedOut, None),
                )
            }
            Ending::Cancelled => {
                self.give_up(window)?;
                self.terminal_step(
                    steps,
                    lease,
                    TerminalUse::Held,
                    EscalationStep::ApplyCancellation,
                );
                self.finish(
                    steps,
                    lease,
                    window,
                    ended(EscalationOutcome::Cancelled, None),
                )
            }
            Ending::SessionEnded => {
                steps.outside_the_model();
                self.finish(
                    steps,
                    lease,
                    window,
                    ended(EscalationOutcome::Cancelled, None),
                )
            }
        }
    }

    /// A step whose effect is on the session's terminal: the terminal is
    /// set to `terminal` first (a session without a terminal has nothing
    /// to set), then `step` is taken. A terminal that is gone ends the
    /// request's steps.
    fn terminal_step(
        &self,
        steps: &RequestSteps<'_>,
        lease: Option<&TerminalLease>,
        terminal: TerminalUse,
        step: EscalationStep,
    ) -> bool {
        if !steps.open() {
            return false;
        }
        if let Some(lease) = lease {
            if !lease.set(terminal, &|| steps.served(), TERMINAL_WAIT) {
                // The terminal ended, or its session is no longer served:
                // its close takes the request out of the model.
                tracing::warn!(%step, ?terminal, "the session's terminal did not take it");
                steps.outside_the_model();
                return false;
            }
        }
        steps.take(step)
    }

    /// The model's way from wherever the request is to its collected
    /// result (`RequestPlace::next_to_result`), each step with its effect:
    /// the terminal held or forwarding again, what is unacknowledged given
    /// up, the result `ended` written. A request the model no longer has
    /// still gets its result, without a step.
    fn finish(
        &self,
        steps: &RequestSteps<'_>,
        lease: Option<&TerminalLease>,
        window: &mut ResultWindow,
        ended: Ended,
    ) -> Result<Served, ServiceError> {
        use EscalationStep as S;
        let mut served = None;
        // Bounded: the way to a result from any place is at most five
        // steps (Running: exit, resume, give up, deliver, collect).
        for _ in 0..FINISH_STEPS_MAX {
            if !steps.open() {
                break;
            }
            let Some(step) = steps.place().next_to_result() else {
                break;
            };
            let taken = match step {
                // The prompt's or the process's route ends; a terminal
                // that stopped forwarding stays held until it forwards
                // again (an approval that never paused it leaves it be).
                S::HostProcessStartFails if steps.place().forwarding => steps.take(step),
                S::HostProcessStartFails | S::HostProcessExits => {
                    self.terminal_step(steps, lease, TerminalUse::Held, step)
                }
                S::ResumeTerminalForwarding => {
                    self.terminal_step(steps, lease, TerminalUse::Forwarding, step)
                }
                S::AckTimeout => {
                    self.give_up(window)?;
                    steps.take(step)
                }
                S::DeliverResult => {
                    served = Some(self.write_result(window, ended)?);
                    // The coordinator never sees the client read its
                    // result: a written result is collected, in the same
                    // turn of the model, so no close of the session
                    // comes between them.
                    steps.take_together(&[step, S::CollectResult])
                }
                other => steps.take(other),
            };
            if !taken {
                break;
            }
        }
        debug_assert!(!steps.open() || steps.place().next_to_result().is_none());
        match served {
            Some(served) => Ok(served),
            None => {
                self.give_up(window)?;
                self.write_result(window, ended)
            }
        }
    }

    /// The developer prompt for `admitted` on its session's terminal
    /// (`RouteToPrompt`), until the developer answers, the prompt times
    /// out, the sandbox cancels or the session ends.
    fn prompt(
        &self,
        admitted: &Admitted,
        window: &mut ResultWindow,
        registered: &dyn Fn(&SessionBinding) -> bool,
        steps: &RequestSteps<'_>,
        lease: Option<&TerminalLease>,
    ) -> Result<Prompted, ServiceError> {
        use EscalationStep as S;
        let binding = &admitted.open.session_binding;
        let request = &admitted.request;
        // A request nobody can be asked about is refused where it is: its
        // terminal never leaves the sandbox (`RefuseEscalation`). A
        // session without a terminal is never prompted elsewhere.
        let refused = |why: &str| {
            tracing::info!(
                why,
                args = request.command_argv.len(),
                "Denied without a prompt"
            );
            steps.take(S::RefuseEscalation);
            Ok(Prompted::Ended(EscalationOutcome::Denied))
        };
        let desk = match (self.prompts, lease) {
            (None, _) => {
                return refused("no auto-approval rule matches exactly and prompts are off")
            }
            _ if !showable(&request.command_argv, &request.justification) => {
                return refused("the request is too large to show whole on a prompt")
            }
            (Some(_), None) => return refused("the session has no terminal to prompt on"),
            (Some(desk), Some(_)) => desk,
        };
        // Spec 3.4: the terminal stops forwarding before the prompt takes
        // it.
        if !self.terminal_step(steps, lease, TerminalUse::Held, S::PauseTerminalForwarding) {
            return Ok(Prompted::Ended(EscalationOutcome::Cancelled));
        }
        let prompt = EscalationPrompt {
            session_id: binding.session_id,
            request_id: admitted.open.request_id,
            request_sha256: admitted.open.request_sha256,
            profile: desk.profile().to_owned(),
            command_argv: request.command_argv.clone(),
            justification: request.justification.clone(),
            deadline_seconds: u32::try_from(self.limits.prompt.as_secs()).unwrap_or(u32::MAX),
        };
        let expect = PromptExpectation {
            open: admitted.open.clone(),
            session_anchor: binding.session_anchor_public_key,
            command_argv: request.command_argv.clone(),
        };
        let Some(pending) = desk.ask(prompt, expect) else {
            return refused("the session's terminal cannot take a prompt");
        };
        if !steps.take(S::RouteToPrompt) {
            // The request ended under its prompt; an answer that came
            // first has nothing left to decide.
            not_followed(pending.withdraw(PromptClosing::Withdrawn));
            return Ok(Prompted::Ended(EscalationOutcome::Cancelled));
        }
        let started = Instant::now();
        // Bounded by the prompt limit: every turn waits at most `poll`.
        loop {
            let mut answered = pending.wait(self.limits.poll.max(PROMPT_POLL));
            if answered.is_none() && started.elapsed() > self.limits.prompt {
                // An answer that reached the terminal before the
                // withdrawal is the prompt's ending: the client was told
                // it (the model's PromptTimeout: the developer did not
                // answer within the deadline).
                answered = pending.withdraw(PromptClosing::TimedOut);
                if answered.is_none() {
                    steps.take(S::PromptTimeout);
                    return Ok(Prompted::Ended(EscalationOutcome::TimedOut));
                }
            }
            if let Some(answer) = answered {
                return Ok(match answer {
                    PromptAnswer::Decided(d) if d.decision == DeveloperDecisionKind::Approve => {
                        if d.approved_command_argv != request.command_argv {
                            // The developer's edit, logged unambiguously
                            // in the edit line's escaped form.
                            tracing::info!(
                                edited = %edit_line(&d.approved_command_argv),
                                "the developer edited the command"
                            );
                        }
                        if !steps.take(S::ApproveEscalation) {
                            tracing::info!(
                                answer = "approved",
                                "a decision crossed its request's end: not followed"
                            );
                            return Ok(Prompted::Ended(EscalationOutcome::Cancelled));
                        }
                        Prompted::Approved(d.approved_command_argv)
                    }
                    PromptAnswer::Decided(_) => {
                        steps.take(S::DenyEscalation);
                        Prompted::Ended(EscalationOutcome::Denied)
                    }
                    PromptAnswer::Refused(e) => {
                        tracing::warn!(error = %e, "not a valid decision: denied");
                        steps.take(S::DenyEscalation);
                        Prompted::Ended(EscalationOutcome::Denied)
                    }
                    PromptAnswer::Closed if registered(binding) => {
                        // A terminal that could not show it (its session
                        // not admitted yet): nobody can approve.
                        tracing::info!("the session's terminal could not take the prompt: denied");
                        steps.take(S::DenyEscalation);
                        Prompted::Ended(EscalationOutcome::Denied)
                    }
                    PromptAnswer::Closed => {
                        tracing::info!("the session's terminal closed under its prompt");
                        steps.outside_the_model();
                        Prompted::Ended(EscalationOutcome::Cancelled)
                    }
                });
            }
            if !registered(binding) {
                // Its session is gone: nobody is left to run for.
                not_followed(pending.withdraw(PromptClosing::Withdrawn));
                steps.outside_the_model();
                return Ok(Prompted::Ended(EscalationOutcome::Cancelled));
            }
            if let Inbound::Cancelled = self.inbound(admitted, window, steps)? {
                // The sandbox withdrew the request; a decision that met
                // the cancellation on the way is not followed (its
                // terminal heard it, the request is cancelled).
                not_followed(pending.withdraw(PromptClosing::Withdrawn));
                if steps.take(S::RequestCancellation) {
                    steps.take(S::ApplyCancellation);
                }
                return Ok(Prompted::Ended(EscalationOutcome::Cancelled));
            }
        }
    }

    /// Streams the running process's output until it ended and all of it
    /// is written, or it was cancelled, timed out or its session ended.
    fn stream(
        &self,
        admitted: &Admitted,
        window: &mut ResultWindow,
        process: &mut HostProcess,
        registered: &dyn Fn(&SessionBinding) -> bool,
        steps: &RequestSteps<'_>,
    ) -> Result<(Ending, u64), ServiceError> {
        let started = Instant::now();
        // Since when the window has been full without an acknowledgement
        // that moved it.
        let mut full_since: Option<Instant> = None;
        let mut most = 0;
        let mut exit: Option<(Option<i32>, Instant)> = None;
        // Bounded by the run limit: every turn waits at most `poll`.
        loop {
            // First: a session's close stops its process, which then
            // exits; that is the session's end, not the command's.
            if !registered(&admitted.open.session_binding) || !steps.open() {
                return Ok((Ending::SessionEnded, most));
            }
            if exit.is_none() {
                if let Some(state) = process.try_reap().map_err(|source| ServiceError::Process {
                    step: "wait for its exit",
                    source,
                })? {
                    let code = match state {
                        ChildState::Exited { code, .. } => code,
                        ChildState::Running => None,
                    };
                    exit = Some((code, Instant::now()));
                }
            }
            if let Some((code, at)) = exit {
                // Reaped by its session's close since the check above?
                if !registered(&admitted.open.session_binding) {
                    return Ok((Ending::SessionEnded, most));
                }
                let drained = !process.stdout.is_open() && !process.stderr.is_open();
                // Output still held open by something the process started
                // gets a grace period, not the run limit.
                if drained || at.elapsed() > EXIT_GRACE {
                    return Ok((Ending::Exited(code), most));
                }
            }
            if exit.is_none() && started.elapsed() > self.limits.run {
                return Ok((Ending::TimedOut, most));
            }
            match self.inbound(admitted, window, steps)? {
                Inbound::Cancelled => {
                    let ending = if steps.take(EscalationStep::RequestCancellation) {
                        Ending::Cancelled
                    } else {
                        Ending::SessionEnded
                    };
                    return Ok((ending, most));
                }
                Inbound::Acknowledged => full_since = None,
                Inbound::Nothing => {}
            }
            let reading = window.can_emit();
            if reading {
                full_since = None;
            } else {
                let since = *full_since.get_or_insert_with(Instant::now);
                if exit.is_none() && since.elapsed() > self.limits.ack {
                    return Ok((Ending::TimedOut, most));
                }
            }
            let mut wrote = false;
            if reading {
                for (stream, pipe) in [
                    (ResultStream::Stdout, &mut process.stdout),
                    (ResultStream::Stderr, &mut process.stderr),
                ] {
                    if !window.can_emit() {
                        break;
                    }
                    let bytes =
                        pipe.read(MAX_RESULT_CHUNK)
                            .map_err(|source| ServiceError::Process {
                                step: "read its output",
                                source,
                            })?;
                    if let Some(bytes) = bytes.filter(|b| !b.is_empty()) {
                        if !steps.take(EscalationStep::EmitResultChunk) {
                            return Ok((Ending::SessionEnded, most));
                        }
                        let chunk = window.emit(stream, bytes)?;
                        let (file, _) = self.signer.seal_chunk(&chunk)?;
                        self.results.write(
                            self.sys,
                            MailboxEntry::Chunk(chunk.request_id, chunk.sequence),
                            &file,
                        )?;
                        most = most.max(window.unacknowledged());
                        wrote = true;
                    }
                }
            }
            if !wrote {
                // Once reaped, the pidfd stays readable: wait on the pipes
                // only (or just sleep when the window is full).
                process
                    .wait_ready(reading, exit.is_none(), self.limits.poll)
                    .map_err(|source| ServiceError::Process {
                        step: "wait for its output",
                        source,
                    })?;
            }
        }
    }

    /// Reads the request's acknowledgements (`AckResultChunk`, once for
    /// every chunk one settles) and cancellation, if any.
    fn inbound(
        &self,
        admitted: &Admitted,
        window: &mut ResultWindow,
        steps: &RequestSteps<'_>,
    ) -> Result<Inbound, ServiceError> {
        let id = admitted.open.request_id;
        let listing = self.requests.list(self.sys)?;
        let mut seen = Inbound::Nothing;
        for entry in listing.entries {
            let name = entry.name();
            match entry {
                MailboxEntry::Ack(of, _) if of == id => {
                    let ack = self.read_signed::<MailboxResultAck>(&name).and_then(|a| {
                        correlate_ack(&admitted.open, &a)?;
                        Ok(a)
                    });
                    if let Err(e) = self.remove_entry(self.requests, OsStr::new(&name)) {
                        tracing::warn!(error = %e, "an acknowledgement stays");
                    }
                    match ack {
                        Ok(ack) => match window.acknowledge(ack.highest_contiguous_sequence) {
                            // Only an acknowledgement that moves the window
                            // is progress: a repeated one changes nothing.
                            Ok(settled) if !settled.is_empty() => {
                                for sequence in settled {
                                    self.remove_result(MailboxEntry::Chunk(id, sequence))?;
                                    steps.take(EscalationStep::AckResultChunk);
                                }
                                seen = Inbound::Acknowledged;
                            }
                            Ok(_) => {}
                            Err(e) => tracing::warn!(error = %e, "ignored an acknowledgement"),
                        },
                        Err(refusal) => tracing::warn!(%refusal, "refused an acknowledgement"),
                    }
                }
                MailboxEntry::Cancellation(of) if of == id => {
                    let cancel = self
                        .read_signed::<MailboxCancellation>(&name)
                        .and_then(|c| {
                            correlate_cancellation(&admitted.open, &c)?;
                            Ok(c)
                        });
                    if let Err(e) = self.remove_entry(self.requests, OsStr::new(&name)) {
                        tracing::warn!(error = %e, "a cancellation stays");
                    }
                    match cancel {
                        Ok(_) => return Ok(Inbound::Cancelled),
                        Err(refusal) => tracing::warn!(%refusal, "refused a cancellation"),
                    }
                }
                _ => {}
            }
        }
        Ok(seen)
    }

    /// The authenticated sandbox record in inbound entry `name`.
    fn read_signed<T: SandboxSigned>(&self, name: &str) -> Result<T, InboundRefusal> {
        let bytes = self.requests.read(self.sys, OsStr::new(name))?;
        let file = SignedProtocolRecord::read(&bytes).map_err(MailboxRefusal::Record)?;
        // The session was checked when the request was admitted; the
        // record must name the same one (correlation, next).
        Ok(authenticate::<T>(&file, self.authority, |_| true).map(|(r, _)| r)?)
    }

    /// After the process exited: waits for the remaining acknowledgements
    /// while they move the window, at most [`Limits::ack`] since the last
    /// one that did and never past the session's end; what is still
    /// unacknowledged then is given up on the way to the result
    /// (`AckTimeout`).
    fn settle(
        &self,
        admitted: &Admitted,
        window: &mut ResultWindow,
        registered: &dyn Fn(&SessionBinding) -> bool,
        steps: &RequestSteps<'_>,
    ) -> Result<(), ServiceError> {
        let mut progress = Instant::now();
        // Bounded: every acknowledgement that counts settles at least one
        // of the finitely many chunks, and each wait is at most `ack`.
        while window.unacknowledged() > 0 {
            if progress.elapsed() > self.limits.ack || !registered(&admitted.open.session_binding) {
                tracing::info!(
                    unacked = window.unacknowledged(),
                    "acknowledgements stopped"
                );
                return Ok(());
            }
            match self.inbound(admitted, window, steps)? {
                Inbound::Acknowledged => progress = Instant::now(),
                // The process already ended: its result follows as is.
                Inbound::Cancelled | Inbound::Nothing => std::thread::sleep(self.limits.poll),
            }
        }
        Ok(())
    }

    /// Removes every unacknowledged chunk file.
    fn give_up(&self, window: &mut ResultWindow) -> Result<(), ServiceError> {
        let id = window.request().request_id;
        for sequence in window.ack_timeout() {
            self.remove_result(MailboxEntry::Chunk(id, sequence))?;
        }
        Ok(())
    }

    fn remove_result(&self, entry: MailboxEntry) -> Result<(), ServiceError> {
        Ok(self.remove_entry(self.results, OsStr::new(&entry.name()))?)
    }

    /// `DeliverResult`'s effect: the signed terminal result.
    fn write_result(
        &self,
        window: &mut ResultWindow,
        ended: Ended,
    ) -> Result<Served, ServiceError> {
        let Ended {
            outcome,
            exit_code,
            most,
        } = ended;
        let result = window.finish(outcome, exit_code)?;
        let (file, _) = self.signer.seal_result(&result)?;
        self.results
            .write(self.sys, MailboxEntry::Result(result.request_id), &file)?;
        tracing::info!(
            ?outcome,
            ?exit_code,
            chunks = result.chunk_count,
            "the result is written"
        );
        Ok(Served {
            outcome,
            exit_code,
            chunks: result.chunk_count,
            most_unacknowledged: most,
        })
    }
}

/// What one pass over the inbound directory found.
#[derive(Debug, Default)]
pub struct Pass {
    /// Requests to serve, in name order.
    pub admitted: Vec<Admitted>,
    /// Entries refused or removed, and why.
    pub refused: Vec<(String, String)>,
}

/// Why an inbound acknowledgement or cancellation is not taken.
#[derive(Debug, thiserror::Error)]
enum InboundRefusal {
    #[error(transparent)]
    Read(#[from] MailboxReadError),
    #[error(transparent)]
    Refused(#[from] MailboxRefusal),
}

/// How a developer prompt ended.
enum Prompted {
    /// Approved: this vector runs.
    Approved(Vec<String>),
    /// Answered without running anything.
    Ended(EscalationOutcome),
}

/// What the inbound directory held for a running request.
enum Inbound {
    Nothing,
    Acknowledged,
    Cancelled,
}
