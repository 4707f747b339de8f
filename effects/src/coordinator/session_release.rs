//! The effects both session drivers (`terminal_session`, `piped_session`)
//! carry out for the terminal machine's release order (spec 3.4): its
//! timers, the durable ReleaseIntent, the exact exec client (watch,
//! terminate, reap). Each driver adds what its output is (a PTY master, or
//! two pipes) and its client connection.
use super::release_gate::ReleaseGate;
use super::terminal_session::exec_status;
use crate::broker::CommittedChild;
use crate::process_identity::real::RealProcessSys;
use crate::process_identity::{ChildState, Signal};
use lazaret_runtime::terminal::machine::{
    Command, Input, Machine, Refusal, ReleaseReason, RetainReason, TimerKind,
};
use rustix::event::{PollFd, PollFlags, Timespec};
use std::collections::VecDeque;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

/// How a session's release ended (spec 3.4 release step 3): the terminal
/// may be recorded clean only when the guest group, exec client and PTY
/// were all found absent; otherwise its ReleaseIntent is retained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReleaseOutcome {
    /// The machine's `RecordClean`: the final observation found the group
    /// empty.
    Clean,
    /// The machine's `RetainReleaseIntent`: the record stays ReleaseIntent
    /// until the runtime is gone (Domain teardown or bootstrap recovery).
    Retained(RetainReason),
}

impl ReleaseOutcome {
    /// The outcome of a release machine that finished.
    pub fn of(machine: &Machine) -> Self {
        match machine.retained() {
            Some(reason) => Self::Retained(reason),
            None => Self::Clean,
        }
    }
}

/// One input to a session's machine, for either driver: its commands, or
/// `None` when the machine refused it. Most refusals are expected and
/// logged quietly (a key after the release began, a timer that lost its
/// race); the answer to a release intent the machine itself awaited, and a
/// step that broke the model, are defects and logged as warnings.
pub(super) fn handle(machine: &mut Machine, input: Input) -> Option<Vec<Command>> {
    let asked_for = matches!(
        input,
        Input::ReleaseIntentConfirmed | Input::ReleaseIntentUnconfirmed
    );
    let refusal = match machine.handle(input) {
        Ok(commands) => return Some(commands),
        Err(refusal) => refusal,
    };
    if matches!(refusal, Refusal::Model { .. }) {
        tracing::warn!(%refusal, "terminal machine refused a step that breaks its model");
    } else if asked_for {
        tracing::warn!(%refusal, "terminal machine refused the answer it awaited");
    } else {
        tracing::debug!(%refusal, "terminal machine refused an input");
    }
    None
}

/// Longest poll sleep without a timer.
const IDLE_POLL: Duration = Duration::from_secs(1);

/// One session's exec client and release timers.
#[derive(Debug)]
pub(super) struct ReleaseEffects {
    committed: CommittedChild,
    exec_running: bool,
    timers: Vec<(TimerKind, Instant)>,
    release: ReleaseGate,
    /// The answer to an awaited release intent, the machine's next input
    /// ([`ReleaseEffects::take_confirmation`]).
    confirmation: Option<Input>,
    started: Option<Instant>,
}

impl ReleaseEffects {
    pub(super) fn new(committed: CommittedChild, release: ReleaseGate) -> Self {
        Self {
            committed,
            exec_running: true,
            timers: Vec::new(),
            release,
            confirmation: None,
            started: None,
        }
    }

    /// The coordinator's answer to the release intent the machine awaited
    /// (`RecordReleaseIntent { awaited: true }`), once, for the driver to
    /// feed before anything else.
    pub(super) fn take_confirmation(&mut self) -> Option<Input> {
        self.confirmation.take()
    }

    /// The exec client's pidfd while it runs (to poll for its exit).
    fn exec_pidfd(&self) -> Option<BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        self.exec_running
            .then(|| self.committed.handle().pidfd().as_fd())
    }

    /// How long a driver may sleep: until the nearest timer, at most a
    /// second.
    fn sleep(&self) -> Duration {
        let now = Instant::now();
        self.timers
            .iter()
            .map(|(_, at)| at.saturating_duration_since(now))
            .min()
            .unwrap_or(IDLE_POLL)
            .min(IDLE_POLL)
    }

    /// A driver's sleep: until its `wake` descriptor (client input, output
    /// forwarders), the exec client's exit, `extra` (the terminal driver's
    /// PTY master with the events it waits for), the nearest timer or
    /// `at_most`; then the wake descriptor is drained and what ended or
    /// fell due is collected into `work`.
    pub(super) fn wait(
        &mut self,
        wake: &OwnedFd,
        extra: Option<(BorrowedFd<'_>, PollFlags)>,
        at_most: Option<Duration>,
        work: &mut VecDeque<Input>,
    ) {
        let sleep = at_most.map_or(self.sleep(), |cap| self.sleep().min(cap));
        let timeout = Timespec::try_from(sleep).unwrap_or(Timespec {
            tv_sec: 1,
            tv_nsec: 0,
        });
        {
            let exec = self.exec_pidfd();
            let mut fds = Vec::with_capacity(3);
            fds.push(PollFd::new(wake, PollFlags::IN));
            if let Some(exec) = exec.as_ref() {
                fds.push(PollFd::new(exec, PollFlags::IN));
            }
            if let Some((fd, events)) = extra.as_ref() {
                fds.push(PollFd::new(fd, *events));
            }
            if let Err(e) = rustix::event::poll(&mut fds, Some(&timeout)) {
                if e != rustix::io::Errno::INTR {
                    tracing::warn!(error = %e, "session poll failed");
                }
            }
        }
        let mut sink = [0u8; 64];
        while matches!(rustix::io::read(wake, &mut sink), Ok(n) if n > 0) {}
        self.collect(work);
    }

    /// After a wake-up: the exec client's end and the timers that are due,
    /// as machine inputs.
    fn collect(&mut self, work: &mut VecDeque<Input>) {
        if self.exec_running {
            match self.committed.handle().peek(&RealProcessSys) {
                Ok(ChildState::Running) => {}
                Ok(ChildState::Exited { code, signal }) => {
                    tracing::info!(?code, ?signal, "exec client exited");
                    self.exec_running = false;
                    work.push_back(Input::ExecClientExited(exec_status(code, signal)));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the exec client is lost");
                    self.exec_running = false;
                    work.push_back(Input::ExecClientLost);
                }
            }
        }
        let now = Instant::now();
        let (due, later): (Vec<_>, Vec<_>) = self.timers.iter().partition(|(_, at)| *at <= now);
        self.timers = later;
        work.extend(due.into_iter().map(|(t, _)| Input::Timer(t)));
    }

    /// Carries out a release command; returns the command when it is not
    /// one of these (the driver's own: output, observation, terminal).
    pub(super) fn execute(
        &mut self,
        command: Command,
        reason: Option<ReleaseReason>,
    ) -> Option<Command> {
        match command {
            Command::StartTimer { timer, after_ms } => {
                self.timers.retain(|(t, _)| *t != timer);
                self.timers
                    .push((timer, Instant::now() + Duration::from_millis(after_ms)));
            }
            Command::CancelTimer(timer) => self.timers.retain(|(t, _)| *t != timer),
            Command::RecordReleaseIntent { awaited } => {
                self.started = Some(Instant::now());
                tracing::info!(?reason, awaited, "RecordReleaseIntent");
                // Spec 3.4 step 1: durable before any release signal. The
                // machine says whether one may follow (the release observes
                // the leader next) and waits for the answer, without which
                // it sends none; one that collects at once sends none, and
                // its record is made before the session's end, which comes
                // later on the same report queue.
                self.confirmation = self.release.record_release_intent(awaited);
            }
            Command::TerminateExecClient => {
                if let Err(e) = self
                    .committed
                    .handle()
                    .signal(&RealProcessSys, Signal::Kill)
                {
                    tracing::warn!(error = %e, "cannot kill the exec client");
                }
            }
            Command::ReapExecClient => match self.committed.handle().poll(&RealProcessSys) {
                Ok(state) => tracing::info!(?state, "exec client reaped"),
                Err(e) => tracing::warn!(error = %e, "cannot reap the exec client"),
            },
            Command::RecordClean => {
                let took = self.started.map(|t| t.elapsed());
                tracing::info!(?took, "RecordClean: session released");
            }
            Command::RetainReleaseIntent(RetainReason::NotObserved) => {
                // Every piped command that completed by itself ends here:
                // the ordinary path, not a warning (the coordinator's log
                // lives in the RAM-backed runtime directory).
                tracing::debug!("RetainReleaseIntent: not observed, left for Domain teardown");
            }
            Command::RetainReleaseIntent(reason) => {
                let took = self.started.map(|t| t.elapsed());
                tracing::warn!(
                    ?reason,
                    ?took,
                    "RetainReleaseIntent: left for Domain teardown"
                );
            }
            other => return Some(other),
        }
        None
    }

    /// Signals the exec client (terminal keys and resizes: runsc forwards
    /// them to the guest terminal's foreground group).
    pub(super) fn signal_exec_client(&self, signal: Signal) -> Result<(), std::io::Error> {
        self.committed.handle().signal(&RealProcessSys, signal)
    }
}
