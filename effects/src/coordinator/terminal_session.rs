//! One interactive session driven by the pure terminal machine
//! (`lazaret_runtime::terminal::machine`; spec 3.4 "Session Terminals",
//! FR-14, FR-15). The machine decides; this file only carries out its
//! commands and turns what happens (client messages, PTY reads, the exec
//! client's exit, guest observations, timer expiries) into its inputs.
//!
//! Threads of one session, nothing shared with other sessions:
//! - the reader decodes client messages into a bounded channel
//!   (`SessionLimits::inbound_events_max`); when it is full the reader stops
//!   reading the socket (before the admission it watches the socket for
//!   the client's hangup meanwhile);
//! - the writer sends frames from a bounded channel to the client;
//! - the identity thread reads the guest leader PID from the exec client's
//!   `--internal-pid-file` pipe and its group and start time from the guest;
//! - the loop owns the machine, the PTY master (non-blocking) and the exec
//!   client's pidfd. It reads the master only while the machine's
//!   `pty_read_budget()` is positive, so a session whose client is slow
//!   leaves its guest blocked in the kernel PTY buffer while every other
//!   session keeps its own capacity (spec 3.4: bounded queues and PTY
//!   backpressure).
//!
//! A developer prompt (spec 3.8, DX-4, FR-5) takes the session's terminal
//! from the sandbox: the loop routes it to the prompt (`RouteToPrompt`:
//! the PTY master is no longer read, so the guest's output waits in the
//! kernel's buffer), sends the [`EscalationPrompt`] after the output
//! already queued, takes the client's signed [`SessionDecision`] as the
//! answer (`check_decision`), and sends [`PromptClosed`] before the route
//! goes back to the sandbox and output flows again. Keys the client sent
//! for the sandbox meanwhile are refused, never written to the PTY.
//!
//! An escalation request also holds the terminal through its lease
//! (`prompt_desk::TerminalLease`; spec 3.4 "During `Prompt` or
//! `HostProcess` routing the Host Coordinator stops reading the PTY
//! master"): the loop stops reading the master when the request pauses
//! forwarding (`PauseTerminalForwarding`), routes the terminal to the host
//! process while it runs (`StartHostProcess`: the client's input, resizes
//! and signals are refused) and back to the sandbox when it ended, and
//! reads again when forwarding resumes (`ResumeTerminalForwarding`). An
//! approved prompt keeps its route until the host process takes it.
//!
//! Release (close, client loss, PTY loss, exec-client loss) follows the
//! machine's order: SIGHUP, grace, SIGTERM, grace, SIGKILL to the recorded
//! guest process group, each only after an observation found the leader
//! identity unchanged; then the exec client is killed if needed and reaped,
//! and the PTY closed. There is no reattachment.
use super::channel;
use super::guest_runner::EnteredRunner;
use super::release_gate::ReleaseGate;
use super::session_release::{self, ReleaseEffects, ReleaseOutcome};
use super::session_report::SessionReport;
use crate::broker::CommittedChild;
use crate::escalation::prompt_desk::{
    PromptAnswer, PromptAsk, PromptDesk, Registration, TerminalUse,
};
use crate::process_identity::Signal;
use crate::pty::{LineModes, Pumped, RealPty, SessionPty, WindowSize};
use crate::runsc_exec::{GuestControl, GuestTools, Runsc};
use lazaret_runtime::coordinator::frame::PREFIX;
use lazaret_runtime::escalation::prompt::{check_decision, DecisionRefusal};
use lazaret_runtime::protocol::mailbox::DeveloperDecisionKind;
use lazaret_runtime::records::ids::{EscalationRequestId, GenerationId, SessionId};
use lazaret_runtime::records::terminal::{GuestProcessIdentity, PtyIdentity};
use lazaret_runtime::terminal::keys::{split_keys, KeyedInput, SignalKeys};
use lazaret_runtime::terminal::machine::{
    Command, ExecStatus, GroupObservation, GuestSignal, Input, Machine, ReleaseTimings,
    TerminalRoute,
};
use lazaret_runtime::terminal::protocol::{
    Chunk, PromptClosed, PromptClosing, SessionAbort, SessionAbortKind, SessionDecision,
    SessionExit, SessionTerminalEvent, SessionTerminalMessage, TerminalInput, MAX_CHUNK_BYTES,
    MAX_RECORD_BYTES,
};
use lazaret_runtime::terminal::sessions::SessionLimits;
use rustix::event::{PollFd, PollFlags, Timespec};
use std::collections::VecDeque;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender, TryRecvError, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Frames waiting for the writer thread (each at most one 16 KiB chunk).
const WRITER_FRAMES_MAX: usize = 4;
/// Client events handled per loop turn before PTY output gets its turn.
const EVENTS_PER_TURN_MAX: usize = 64;
/// PTY reads per loop turn.
const READS_PER_TURN_MAX: usize = 16;
/// How long the loop waits for the guest leader identity when a release
/// needs it.
const IDENTITY_WAIT: Duration = Duration::from_secs(10);
/// How long the identity thread waits for the coordinator's Running
/// record before the session is refused: far above a busy loop's answer
/// (a dead coordinator disconnects at once).
const RECORD_WAIT: Duration = Duration::from_secs(30);
/// How long the exec client may take to write `--internal-pid-file`.
const PID_FILE_WAIT: Duration = Duration::from_secs(10);
/// How long the last frames (the exit) may take to reach the client.
const WRITER_FINISH: Duration = Duration::from_secs(5);

static RUNNER: EnteredRunner = EnteredRunner;

/// Where guest control runs: the runsc invocation (through `__enter`) and
/// the exact container.
#[derive(Clone, Debug)]
pub struct GuestTarget {
    pub runsc: Runsc,
    pub container: String,
}

impl GuestTarget {
    pub(super) fn control(&self) -> GuestControl<'static, EnteredRunner> {
        GuestControl::new(
            &RUNNER,
            self.runsc.clone(),
            GuestTools::default(),
            self.container.clone(),
        )
    }
}

/// Everything one interactive session owns once its exec client runs.
#[derive(Debug)]
pub struct TerminalParts {
    pub session: SessionId,
    pub generation: GenerationId,
    pub committed: CommittedChild,
    pub pty: SessionPty<'static, RealPty>,
    pub client: UnixStream,
    /// Read end of the pipe named by `--internal-pid-file`.
    pub pid_pipe: OwnedFd,
    pub guest: GuestTarget,
    /// The session's report queue: told the PTY and the guest leader
    /// identity once the leader is known (spec 3.4 step 3, for the
    /// terminal's durable Running record), then the release's outcome.
    pub reports: Sender<SessionReport>,
    /// Commits the durable ReleaseIntent before the release signals.
    pub release: ReleaseGate,
    /// Where the escalation service finds this terminal for developer
    /// prompts; `None` when the profile has no escalation.
    pub prompts: Option<Arc<PromptDesk>>,
}

/// What a session terminal's Running record holds beyond the process slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TerminalEvidence {
    pub pty: PtyIdentity,
    pub guest: GuestProcessIdentity,
}

enum Inbound {
    Message(SessionTerminalEvent),
    Lost,
}

enum Leader {
    Waiting(Receiver<Option<GuestProcessIdentity>>),
    Known(Option<GuestProcessIdentity>),
}

/// Whether the session's client events are taken (spec 3.4 acquisition
/// step 5), below the machine's admission: the guest leader (`lazaret-guest
/// lead`) holds the command until it is told, one newline to run it
/// ([`Command::AdmitGuestLeader`]), a CAN byte not to
/// ([`Command::RefuseGuestLeader`]).
#[derive(Debug)]
enum Gate {
    /// Waiting for the identity thread's answer: whether the coordinator
    /// recorded the terminal running, fed to the machine as its admission.
    /// Client events wait in the inbound queue, unread, except the
    /// client's loss.
    Answer(Receiver<bool>),
    /// The newline is written; the guest leader restores the terminal's
    /// settings before it executes the command. Client events wait until
    /// the terminal echoes again or its modes leave the leader's silenced
    /// ones (read just before the newline; bounded by `RESTORE_WAIT`), so
    /// keys typed meanwhile are echoed and edited as the command's
    /// terminal does, and a command that turns echo off at once is not
    /// waited out.
    Restoring {
        since: Instant,
        silenced: Option<LineModes>,
    },
    Open,
    /// The command does not run: the guest leader was refused, or the
    /// release began first; client events are never taken.
    Shut,
}

/// How long the loop waits for the guest leader to restore the terminal's
/// settings after the admission (it does so at once), and how often it
/// looks meanwhile.
const RESTORE_WAIT: Duration = Duration::from_secs(1);
const RESTORE_POLL: Duration = Duration::from_millis(2);

/// What the guest leader reads on the terminal (`cli/init/lazaret_guest.rs`).
const ADMIT: u8 = b'\n';
const REFUSE: u8 = 0x18;

/// Starts the session's threads.
pub fn spawn(parts: TerminalParts) -> io::Result<()> {
    let limits = SessionLimits::default();
    let (wake_r, wake_w) = rustix::pipe::pipe_with(
        rustix::pipe::PipeFlags::CLOEXEC | rustix::pipe::PipeFlags::NONBLOCK,
    )?;
    let wake_w = Arc::new(wake_w);
    let writer_stream = parts.client.try_clone()?;
    let (inbound_tx, inbound_rx) = mpsc::sync_channel::<Inbound>(limits.inbound_events_max);
    let (out_tx, out_rx) = mpsc::sync_channel::<SessionTerminalMessage>(WRITER_FRAMES_MAX);
    let (writer_done_tx, writer_done_rx) = mpsc::channel::<()>();
    let writer_failed = Arc::new(AtomicBool::new(false));
    let (leader_tx, leader_rx) = mpsc::channel();
    let (admission_tx, admission_rx) = mpsc::channel();
    let client = ClientState::default();
    let prompt_line = parts.prompts.map(|desk| {
        let wake = Arc::clone(&wake_w);
        desk.register(parts.session, Arc::new(move || poke(&wake)))
    });
    {
        let wake = Arc::clone(&wake_w);
        let stream = parts.client;
        let client = client.clone();
        std::thread::spawn(move || read_client(stream, &inbound_tx, &client, &wake));
    }
    {
        let wake = Arc::clone(&wake_w);
        let failed = Arc::clone(&writer_failed);
        std::thread::spawn(move || {
            write_client(writer_stream, &out_rx, &failed, &wake);
            let _ = writer_done_tx.send(());
        });
    }
    {
        let control = parts.guest.control();
        let pipe = parts.pid_pipe;
        let reports = parts.reports.clone();
        let pty = parts.pty.identity();
        let wake = Arc::clone(&wake_w);
        std::thread::spawn(move || {
            let leader = read_leader(&pipe, &control);
            // A release needs the identity, not the admission: it gets it
            // first.
            let _ = leader_tx.send(leader);
            poke(&wake);
            let admitted = leader.is_some_and(|guest| {
                let (registered, answer) = mpsc::sync_channel(1);
                let evidence = TerminalEvidence { pty, guest };
                reports
                    .send(SessionReport::Running {
                        evidence,
                        registered,
                    })
                    .is_ok()
                    && answer.recv_timeout(RECORD_WAIT).unwrap_or(false)
            });
            let _ = admission_tx.send(admitted);
            poke(&wake);
        });
    }
    let driver = Driver {
        machine: Machine::new(
            parts.session,
            parts.generation,
            ReleaseTimings::default(),
            limits.client_queue_bytes_max,
        ),
        generation: parts.generation,
        effects: ReleaseEffects::new(parts.committed, parts.release),
        pty: Some(parts.pty),
        pty_eof: false,
        inbound: inbound_rx,
        staged: VecDeque::new(),
        client_lost_fed: false,
        to_writer: Some(out_tx),
        writer_failed,
        pending_out: None,
        leader: Leader::Waiting(leader_rx),
        gate: Gate::Answer(admission_rx),
        client,
        control: parts.guest.control(),
        wake: wake_r,
        observe_due: false,
        prompt_line,
        prompt: PromptState::None,
        held: false,
        notices: VecDeque::new(),
    };
    let reports = parts.reports;
    std::thread::spawn(move || {
        let _span = tracing::info_span!("SessionTerminal").entered();
        let outcome = driver.run();
        // The exit frame gets a bounded time to reach the client.
        let _ = writer_done_rx.recv_timeout(WRITER_FINISH);
        let _ = reports.send(SessionReport::Ended(outcome));
    });
    Ok(())
}

fn poke(wake: &OwnedFd) {
    // A full wake pipe already wakes the loop.
    let _ = rustix::io::write(wake, &[1]);
}

/// Whether the admitted guest leader gave the terminal back: it echoes, or
/// its modes are no longer the leader's silenced ones (the command changed
/// them already). `now`: `None` without a PTY, `Some(None)` when its modes
/// cannot be read (a PTY being lost): both count as given back. Without a
/// silenced snapshot only echo counts.
fn restored(silenced: Option<LineModes>, now: Option<Option<LineModes>>) -> bool {
    match now {
        None | Some(None) => true,
        Some(Some(modes)) => modes.echo || silenced.is_some_and(|s| s != modes),
    }
}

/// What the reader thread shares with the session loop: whether the
/// client is gone (seen by the reader), and whether the loop takes client
/// events yet (the gate is open).
#[derive(Clone, Debug, Default)]
struct ClientState {
    gone: Arc<AtomicBool>,
    taken: Arc<AtomicBool>,
}

fn read_client(
    mut stream: UnixStream,
    tx: &SyncSender<Inbound>,
    client: &ClientState,
    wake: &OwnedFd,
) {
    loop {
        // A frame that is not a bounded v1 event ends the session like the
        // client's loss: the stream cannot be resynchronised.
        let received = channel::receive_within::<SessionTerminalEvent>(
            &mut stream,
            "session",
            PREFIX + MAX_RECORD_BYTES,
        );
        let inbound = match received {
            Ok(message) => Inbound::Message(message),
            Err(_) => Inbound::Lost,
        };
        let lost = matches!(inbound, Inbound::Lost);
        if lost {
            client.gone.store(true, Ordering::SeqCst);
            poke(wake);
        }
        if !deliver(&stream, tx, inbound, client, wake) {
            return;
        }
        poke(wake);
        if lost {
            return;
        }
    }
}

/// How often a reader whose queue is full looks for the client's hangup
/// before the admission.
const HANGUP_POLL: Duration = Duration::from_millis(10);

/// Hands one message to the session loop, waiting while its queue is full:
/// the socket then holds the client back. Until the loop takes client
/// events (its admission), a full queue does not hide the client's hangup:
/// the socket is watched for it meanwhile, so a client that left before
/// the admission never has its command started, however much it typed
/// ahead (spec 3.4 acquisition step 5). False when the loop is gone.
fn deliver(
    stream: &UnixStream,
    tx: &SyncSender<Inbound>,
    inbound: Inbound,
    client: &ClientState,
    wake: &OwnedFd,
) -> bool {
    let mut pending = inbound;
    loop {
        if client.taken.load(Ordering::SeqCst) || client.gone.load(Ordering::SeqCst) {
            return tx.send(pending).is_ok();
        }
        match tx.try_send(pending) {
            Ok(()) => return true,
            Err(TrySendError::Disconnected(_)) => return false,
            Err(TrySendError::Full(back)) => {
                pending = back;
                if hung_up(stream, HANGUP_POLL) {
                    client.gone.store(true, Ordering::SeqCst);
                    poke(wake);
                }
            }
        }
    }
}

/// Whether the client closed its end of the connection (or it failed),
/// waiting at most `wait`; data still unread does not count.
fn hung_up(stream: &UnixStream, wait: Duration) -> bool {
    let Ok(timeout) = Timespec::try_from(wait) else {
        return false;
    };
    let mut fds = [PollFd::new(stream, PollFlags::RDHUP)];
    match rustix::event::poll(&mut fds, Some(&timeout)) {
        Ok(n) if n > 0 => fds[0]
            .revents()
            .intersects(PollFlags::RDHUP | PollFlags::HUP | PollFlags::ERR),
        _ => false,
    }
}

fn write_client(
    mut stream: UnixStream,
    rx: &Receiver<SessionTerminalMessage>,
    failed: &AtomicBool,
    wake: &OwnedFd,
) {
    for message in rx {
        if channel::send(&mut stream, "session", &message).is_err() {
            failed.store(true, Ordering::SeqCst);
            poke(wake);
            return;
        }
        poke(wake);
    }
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

/// The guest leader's PID, which the exec client writes to
/// `--internal-pid-file` once the process has started.
pub(super) fn read_leader_pid(pipe: &OwnedFd) -> Option<u32> {
    let deadline = Instant::now() + PID_FILE_WAIT;
    let mut text = Vec::new();
    let mut buf = [0u8; 32];
    // runsc writes the PID with one write and keeps the descriptor until it
    // exits, so the first read that ends in a digit has all of it.
    while text.is_empty() {
        let left = deadline.checked_duration_since(Instant::now())?;
        let timeout = Timespec::try_from(left).ok()?;
        let mut fds = [PollFd::new(pipe, PollFlags::IN)];
        match rustix::event::poll(&mut fds, Some(&timeout)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(_) => return None,
        }
        match rustix::io::read(pipe, &mut buf) {
            Ok(0) => return None,
            Ok(n) => text.extend_from_slice(&buf[..n]),
            Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => {}
            Err(_) => return None,
        }
    }
    std::str::from_utf8(&text).ok()?.trim().parse().ok()
}

/// Spec 3.4 acquisition step 3: the leader PID from the exec client, then
/// its group and start time from the guest.
fn read_leader(
    pipe: &OwnedFd,
    control: &GuestControl<'static, EnteredRunner>,
) -> Option<GuestProcessIdentity> {
    let pid = read_leader_pid(pipe)?;
    match control.leader_identity(pid) {
        Ok(identity) => {
            tracing::info!(
                leader = identity.leader_pid,
                group = identity.process_group_id,
                start = identity.leader_start_time,
                "guest leader identity recorded"
            );
            Some(identity)
        }
        Err(e) => {
            tracing::warn!(error = %e, "guest leader identity unavailable; release will refuse group signals");
            None
        }
    }
}

struct Driver {
    machine: Machine,
    generation: GenerationId,
    effects: ReleaseEffects,
    pty: Option<SessionPty<'static, RealPty>>,
    pty_eof: bool,
    inbound: Receiver<Inbound>,
    /// Decoded events of the last client message, fed one at a time while
    /// no input waits for the PTY.
    staged: VecDeque<SessionTerminalEvent>,
    client_lost_fed: bool,
    to_writer: Option<SyncSender<SessionTerminalMessage>>,
    writer_failed: Arc<AtomicBool>,
    pending_out: Option<SessionTerminalMessage>,
    leader: Leader,
    gate: Gate,
    /// Set by the reader thread before it queues the client's loss: seen
    /// while the gate is closed and the queue is not read.
    client: ClientState,
    control: GuestControl<'static, EnteredRunner>,
    wake: OwnedFd,
    /// The machine asked for an observation (`ObserveGroup`).
    observe_due: bool,
    /// This terminal's line on the escalation prompt desk.
    prompt_line: Option<(Registration, Receiver<PromptAsk>)>,
    prompt: PromptState,
    /// An escalation request holds the terminal: the PTY master is not
    /// read while the session runs (the model's `ptyFwd` is FALSE).
    held: bool,
    /// The loop's own messages (prompt open and closed), sent after the
    /// machine's queued ones: at most two.
    notices: VecDeque<SessionTerminalMessage>,
}

/// The developer prompt on this terminal.
#[derive(Debug)]
enum PromptState {
    None,
    /// Routed to the prompt; the ask waits for the client's decision.
    Open(Box<PromptAsk>),
    /// Answered or withdrawn: once the `PromptClosed` notice went to the
    /// writer, the route goes back to the sandbox, or, when approved,
    /// stays the prompt's until the request's host process takes the
    /// terminal (the model's route goes Prompt, then HostProcess).
    Closing {
        approved: bool,
    },
}

fn process_signal(signal: GuestSignal) -> Signal {
    match signal {
        GuestSignal::Interrupt => Signal::Int,
        GuestSignal::Quit => Signal::Quit,
        GuestSignal::Suspend => Signal::Tstp,
        GuestSignal::WindowChange => Signal::Winch,
        GuestSignal::Hangup => Signal::Hup,
        GuestSignal::Terminate => Signal::Term,
        GuestSignal::Kill => Signal::Kill,
    }
}

/// The session's one ending on the wire: its `SessionExit` as the machine
/// queued it, or, when the Domain's runtime ended under the session, a
/// `SessionAbort` naming why (the CLI reports it as Lazaret's own error,
/// never as a made-up status).
pub(super) fn session_end(exit: SessionExit) -> Result<SessionExit, SessionAbort> {
    match super::launch::runtime_lost() {
        Some(why) => Err(SessionAbort::new(
            exit.session_id(),
            SessionAbortKind::RuntimeLost,
            &format!("the Domain's runtime stopped: {why}"),
        )),
        None => Ok(exit),
    }
}

pub(super) fn exec_status(code: Option<i32>, signal: Option<i32>) -> ExecStatus {
    match (code, signal) {
        (_, Some(s)) => ExecStatus::Signalled(u8::try_from(s).unwrap_or(u8::MAX)),
        (Some(c), None) => ExecStatus::Exited(u8::try_from(c & 0xff).unwrap_or(u8::MAX)),
        (None, None) => ExecStatus::Exited(u8::MAX),
    }
}

impl Driver {
    /// Runs the session and its release to the end.
    fn run(mut self) -> ReleaseOutcome {
        let mut work = VecDeque::new();
        loop {
            self.take_client_events(&mut work);
            self.serve_prompt(&mut work);
            self.forward_messages();
            // A closed prompt's notice is with the writer: the route goes
            // back to the sandbox now, not on the next wake.
            self.serve_prompt(&mut work);
            self.serve_hold(&mut work);
            // An observation is a guest tool run: queued messages (the
            // exit after the drain) go out before it.
            if self.observe_due {
                self.observe_due = false;
                let observation = match self.leader() {
                    Some(identity) => self.control.observe(&identity),
                    None => GroupObservation::Mismatch,
                };
                tracing::info!(?observation, "guest group observed");
                work.push_back(Input::Observed(observation));
                while let Some(input) = work.pop_front() {
                    self.feed(input, &mut work);
                }
                continue;
            }
            if self.finished() {
                return ReleaseOutcome::of(&self.machine);
            }
            self.wait(&mut work);
            while let Some(input) = work.pop_front() {
                self.feed(input, &mut work);
            }
        }
    }

    fn finished(&self) -> bool {
        self.machine.is_finished() && self.pending_out.is_none()
    }

    fn feed(&mut self, input: Input, work: &mut VecDeque<Input>) {
        let Some(commands) = session_release::handle(&mut self.machine, input) else {
            return;
        };
        for command in commands {
            self.execute(command, work);
        }
        if let Some(answer) = self.effects.take_confirmation() {
            work.push_front(answer);
        }
    }

    /// Client events, one at a time, while no input waits for the PTY.
    fn take_client_events(&mut self, work: &mut VecDeque<Input>) {
        if self.writer_failed.load(Ordering::SeqCst) {
            self.client_lost(work);
        }
        if !matches!(self.gate, Gate::Open) {
            // The client's loss is a release input whatever the gate, and
            // is taken before the admission is looked at: a client that
            // left before it never has its command started.
            self.take_client_loss(work);
            self.poll_admission(work);
            if !matches!(self.gate, Gate::Open) {
                return;
            }
        }
        for _ in 0..EVENTS_PER_TURN_MAX {
            // On the prompt route nothing is written to the PTY: the
            // developer's answer never waits behind the sandbox's input.
            let prompting = self.machine.route() == TerminalRoute::Prompt;
            if !prompting && self.pty.as_ref().is_some_and(|p| p.input_pending() > 0) {
                break;
            }
            if let Some(event) = self.staged.pop_front() {
                let input = Input::Client {
                    generation: self.generation,
                    event,
                };
                self.feed(input, work);
            } else {
                match self.inbound.try_recv() {
                    Ok(Inbound::Message(message)) => self.stage(message),
                    Ok(Inbound::Lost) => self.client_lost(work),
                    Err(_) => break,
                }
            }
            while let Some(input) = work.pop_front() {
                self.feed(input, work);
            }
        }
    }

    /// One client event as the machine's events: typed input split into
    /// chunks, with an `Interrupt`/`Quit`/`Suspend` event after each byte
    /// the session terminal's line discipline signals for right now
    /// (`lazaret_runtime::terminal::keys`; spec 3.4, FR-8); every other
    /// event as it came. Each keeps the Session ID it named, so the machine
    /// refuses one of another session (spec 3.4).
    fn stage(&mut self, event: SessionTerminalEvent) {
        if let SessionTerminalEvent::Decision(decision) = event {
            self.decide(&decision);
            return;
        }
        let SessionTerminalEvent::Input(input) = event else {
            self.staged.push_back(event);
            return;
        };
        let session_id = input.session_id;
        // Settings that cannot be read (a PTY being lost) generate no
        // signal: the bytes go through as typed.
        let keys = match self.pty.as_ref().map(|p| p.signal_keys()) {
            Some(Ok(keys)) => keys,
            Some(Err(e)) => {
                tracing::warn!(error = %e, "terminal settings unreadable; no signal keys");
                SignalKeys::from_termios(false, 0, 0, 0)
            }
            None => SignalKeys::from_termios(false, 0, 0, 0),
        };
        for piece in split_keys(input.bytes.as_bytes(), &keys) {
            match piece {
                KeyedInput::Bytes(typed) => {
                    for part in typed.chunks(MAX_CHUNK_BYTES) {
                        if let Ok(bytes) = Chunk::new(part.to_vec()) {
                            self.staged
                                .push_back(SessionTerminalEvent::Input(TerminalInput {
                                    session_id,
                                    bytes,
                                }));
                        }
                    }
                }
                KeyedInput::Signal(signal) => {
                    self.staged.push_back(SessionTerminalEvent::Signal(
                        lazaret_runtime::terminal::protocol::TerminalSignal { session_id, signal },
                    ));
                }
            }
        }
    }

    fn leader(&mut self) -> Option<GuestProcessIdentity> {
        if let Leader::Waiting(rx) = &self.leader {
            self.leader = Leader::Known(rx.recv_timeout(IDENTITY_WAIT).ok().flatten());
        }
        match self.leader {
            Leader::Known(identity) => identity,
            Leader::Waiting(_) => None,
        }
    }

    /// Moves the gate on without waiting (spec 3.4 acquisition step 5):
    /// the identity thread's answer is the machine's admission input, and
    /// once the admitted guest leader restored the terminal's settings
    /// client events are taken.
    fn poll_admission(&mut self, work: &mut VecDeque<Input>) {
        match &self.gate {
            Gate::Answer(answer) => {
                let recorded = match answer.try_recv() {
                    Ok(recorded) => recorded,
                    Err(TryRecvError::Disconnected) => false,
                    Err(TryRecvError::Empty) => return,
                };
                // The machine's commands open the gate (AdmitGuestLeader);
                // an answer after the release began is refused by it, and
                // a client that just left is that release's start.
                self.gate = Gate::Shut;
                self.take_client_loss(work);
                let input = if recorded {
                    Input::Admitted
                } else {
                    tracing::warn!(
                        "the session is not recorded running; its command is not started"
                    );
                    Input::AdmissionRefused
                };
                self.feed(input, work);
            }
            Gate::Restoring { since, silenced } => {
                let now = self.pty.as_ref().map(|p| p.line_modes().ok());
                if restored(*silenced, now) || since.elapsed() >= RESTORE_WAIT {
                    self.gate = Gate::Open;
                    self.client.taken.store(true, Ordering::SeqCst);
                }
            }
            Gate::Open | Gate::Shut => {}
        }
    }

    /// Feeds the client's loss once the reader thread saw it.
    fn take_client_loss(&mut self, work: &mut VecDeque<Input>) {
        if self.client.gone.load(Ordering::SeqCst) {
            self.client_lost(work);
        }
    }

    /// The machine's `ClientConnectionLost`, fed once however the loss was
    /// seen (the writer failed, the reader queued it, or the reader marked
    /// it while the queue was not read).
    fn client_lost(&mut self, work: &mut VecDeque<Input>) {
        if !self.client_lost_fed {
            self.client_lost_fed = true;
            self.feed(Input::ClientLost, work);
        }
    }

    /// Writes the guest leader's answer on the terminal.
    fn tell_guest_leader(&mut self, byte: u8) {
        let Some(pty) = self.pty.as_mut() else {
            return;
        };
        let written = Chunk::new(vec![byte]).map(|chunk| pty.write_input(&chunk));
        if let Ok(Err(e)) = written {
            tracing::warn!(error = %e, "the session's guest leader could not be told");
        }
    }

    fn execute(&mut self, command: Command, work: &mut VecDeque<Input>) {
        let Some(command) = self.effects.execute(command, self.machine.release_reason()) else {
            return;
        };
        match command {
            Command::AdmitGuestLeader => {
                let silenced = self.pty.as_ref().and_then(|p| p.line_modes().ok());
                self.gate = Gate::Restoring {
                    since: Instant::now(),
                    silenced,
                };
                self.tell_guest_leader(ADMIT);
            }
            Command::RefuseGuestLeader => {
                self.gate = Gate::Shut;
                self.tell_guest_leader(REFUSE);
            }
            Command::WritePty(chunk) => {
                if let Some(pty) = self.pty.as_mut() {
                    if let Err(e) = pty.write_input(&chunk) {
                        tracing::warn!(error = %e, "PTY lost");
                        work.push_back(Input::OutputLost);
                    }
                }
            }
            Command::SetWindowSize {
                rows,
                columns,
                pixel_width,
                pixel_height,
            } => {
                let size = WindowSize {
                    rows,
                    columns,
                    pixel_width,
                    pixel_height,
                };
                if let Some(Err(e)) = self.pty.as_ref().map(|p| p.resize(size)) {
                    tracing::warn!(error = %e, "resize refused");
                }
            }
            Command::SignalForeground(signal) => {
                if let Err(e) = self.effects.signal_exec_client(process_signal(signal)) {
                    tracing::warn!(error = %e, signal = signal.name(), "cannot signal the exec client");
                }
            }
            Command::SignalGroup(signal) => {
                let _span =
                    tracing::info_span!("SignalGuestGroup", signal = signal.name()).entered();
                match self.leader() {
                    Some(identity) => {
                        if let Err(e) = self.control.signal(&identity, signal) {
                            tracing::warn!(error = %e, "guest group signal failed");
                        }
                    }
                    None => tracing::warn!("no recorded guest group; signal not sent"),
                }
            }
            // Made by the loop once the commands of this input are done and
            // queued messages went out.
            Command::ObserveGroup => self.observe_due = true,
            Command::CloseOutput => {
                if let Some(pty) = self.pty.take() {
                    pty.close();
                }
            }
            // The release commands (timers, intent, exec client, outcome)
            // were `ReleaseEffects`' own.
            other => tracing::warn!(?other, "release command not carried out"),
        }
    }

    /// The developer prompt's turn: a withdrawn or orphaned prompt is
    /// closed, a new ask is routed to the prompt when the terminal is on
    /// the sandbox route, and a closed prompt gives the route back once
    /// its notice is with the writer.
    fn serve_prompt(&mut self, work: &mut VecDeque<Input>) {
        if let PromptState::Open(ask) = &self.prompt {
            if let Some(closing) = ask.withdrawn() {
                let request_id = ask.prompt.request_id;
                self.close_prompt(request_id, closing);
            } else if self.machine.route() != TerminalRoute::Prompt {
                // The release took the route: the prompt ends with it, and
                // the client hears so before the output drained after it.
                let closing = ask
                    .answer(PromptAnswer::Closed)
                    .err()
                    .unwrap_or(PromptClosing::Withdrawn);
                let request_id = ask.prompt.request_id;
                self.close_prompt(request_id, closing);
                self.prompt = PromptState::None;
            }
        }
        if let PromptState::Closing { approved } = self.prompt {
            if self.notices.is_empty() && self.pending_out.is_none() {
                self.prompt = PromptState::None;
                if self.machine.route() == TerminalRoute::Prompt && !approved {
                    self.feed(Input::Route(TerminalRoute::Sandbox), work);
                    tracing::info!("RouteToSandbox");
                }
            }
        }
        if !matches!(self.prompt, PromptState::None) {
            return;
        }
        let Some(ask) = self
            .prompt_line
            .as_ref()
            .and_then(|(_, asks)| asks.try_recv().ok())
        else {
            return;
        };
        let open = matches!(self.gate, Gate::Open)
            && self.machine.route() == TerminalRoute::Sandbox
            && ask.withdrawn().is_none();
        if open {
            self.feed(Input::Route(TerminalRoute::Prompt), work);
        }
        if !open || self.machine.route() != TerminalRoute::Prompt {
            // Not admitted yet, or closing: no prompt on this terminal
            // (and none was shown, so whichever ending won is the
            // service's alone).
            let _ = ask.answer(PromptAnswer::Closed);
            return;
        }
        tracing::info!(request = %ask.prompt.request_id, "RouteToPrompt");
        self.notices
            .push_back(SessionTerminalMessage::Prompt(ask.prompt.clone()));
        self.prompt = PromptState::Open(Box::new(ask));
    }

    /// The client's answer to the open prompt: the service gets the
    /// checked decision (or why it is not one: denied) and the prompt
    /// closes. A prompt the service withdrew first (timed out, cancelled)
    /// closes as the withdrawal says, not as the decision: a late answer
    /// is never shown as taken. (A decision that reached the service as
    /// the request ended otherwise, by the sandbox's cancellation, its
    /// session's end or the model no longer holding it open, is shown and
    /// not followed.)
    fn decide(&mut self, decision: &SessionDecision) {
        let PromptState::Open(ask) = &self.prompt else {
            tracing::warn!("a developer decision without an open prompt is ignored");
            return;
        };
        let answer = if decision.session_id == ask.prompt.session_id {
            match check_decision(&decision.record, &ask.expect) {
                Ok(d) => PromptAnswer::Decided(Box::new(d)),
                Err(e) => PromptAnswer::Refused(e),
            }
        } else {
            PromptAnswer::Refused(DecisionRefusal::OtherSession)
        };
        let closing = match &answer {
            PromptAnswer::Decided(d) if d.decision == DeveloperDecisionKind::Approve => {
                PromptClosing::Approved
            }
            _ => PromptClosing::Denied,
        };
        let request_id = ask.prompt.request_id;
        let closing = ask.answer(answer).err().unwrap_or(closing);
        self.close_prompt(request_id, closing);
    }

    /// The request holding this terminal: what it wants now is applied
    /// (see `prompt_desk::TerminalLease`), once no prompt is open or
    /// closing. An approved prompt's route waits for the host process, and
    /// goes back to the sandbox for any other want.
    fn serve_hold(&mut self, work: &mut VecDeque<Input>) {
        let Some((wanted, serial)) = self
            .prompt_line
            .as_ref()
            .and_then(|(line, _)| line.hold().pending())
        else {
            return;
        };
        let route = self.machine.route();
        if route != TerminalRoute::None {
            // Nothing is applied while a prompt is open or closes: the
            // request asks only after its prompt ended for it (answered or
            // withdrawn), which this loop sees at its next turn; the
            // prompt's route is settled first (an approved one keeps it
            // for the host process), then the request's want. Applied
            // while the prompt still looked open, forwarding would leave
            // the route on a prompt that a late approval then keeps.
            if !matches!(self.prompt, PromptState::None) {
                return;
            }
            let next = match wanted {
                TerminalUse::HostProcess => TerminalRoute::HostProcess,
                TerminalUse::Forwarding | TerminalUse::Held
                    if route == TerminalRoute::HostProcess || route == TerminalRoute::Prompt =>
                {
                    TerminalRoute::Sandbox
                }
                TerminalUse::Forwarding | TerminalUse::Held => route,
            };
            self.held = wanted != TerminalUse::Forwarding;
            if next != route {
                self.feed(Input::Route(next), work);
                tracing::info!(route = ?next, held = self.held, "terminal route");
            }
        }
        if let Some((line, _)) = self.prompt_line.as_ref() {
            line.hold().applied(serial);
        }
    }

    /// How much of the PTY master may be read now: the machine's budget,
    /// none while a request holds the running terminal.
    fn read_budget(&self) -> usize {
        if self.held && self.machine.route() != TerminalRoute::None {
            return 0;
        }
        self.machine.pty_read_budget()
    }

    fn close_prompt(&mut self, request_id: EscalationRequestId, closing: PromptClosing) {
        let session_id = self.machine.session_id();
        self.notices
            .push_back(SessionTerminalMessage::PromptClosed(PromptClosed {
                session_id,
                request_id,
                closing,
            }));
        self.prompt = PromptState::Closing {
            approved: closing == PromptClosing::Approved,
        };
    }

    /// Moves queued client messages to the writer, as far as it takes them.
    fn forward_messages(&mut self) {
        loop {
            if self.pending_out.is_none() {
                // A prompt's close goes before the machine's messages (the
                // output after it, or the release's drain); a prompt goes
                // after them (the output before it).
                let closing = matches!(
                    self.notices.front(),
                    Some(SessionTerminalMessage::PromptClosed(_))
                );
                let closed = if closing {
                    self.notices.pop_front()
                } else {
                    None
                };
                self.pending_out = closed
                    .or_else(|| {
                        self.machine.poll_message().map(|m| match m {
                            SessionTerminalMessage::Exit(exit) => match session_end(exit) {
                                Ok(exit) => SessionTerminalMessage::Exit(exit),
                                Err(abort) => SessionTerminalMessage::Abort(abort),
                            },
                            other => other,
                        })
                    })
                    .or_else(|| self.notices.pop_front());
            }
            let (Some(message), Some(writer)) = (self.pending_out.take(), self.to_writer.as_ref())
            else {
                return;
            };
            match writer.try_send(message) {
                Ok(()) => {}
                Err(TrySendError::Full(message)) => {
                    self.pending_out = Some(message);
                    return;
                }
                Err(TrySendError::Disconnected(_)) => {
                    self.to_writer = None;
                    return;
                }
            }
        }
    }

    /// Sleeps until something happens (bounded by the nearest timer), then
    /// turns it into machine inputs.
    fn wait(&mut self, work: &mut VecDeque<Input>) {
        let budget = self.read_budget();
        let mut master_events = PollFlags::empty();
        if let Some(pty) = self.pty.as_ref() {
            if budget > 0 && !self.pty_eof {
                master_events |= PollFlags::IN;
            }
            if pty.input_pending() > 0 {
                master_events |= PollFlags::OUT;
            }
        }
        let master = self
            .pty
            .as_ref()
            .filter(|_| !master_events.is_empty())
            .map(|p| (p.master(), master_events));
        let at_most = matches!(self.gate, Gate::Restoring { .. }).then_some(RESTORE_POLL);
        self.effects.wait(&self.wake, master, at_most, work);
        self.pump_pty(work);
    }

    fn pump_pty(&mut self, work: &mut VecDeque<Input>) {
        for _ in 0..READS_PER_TURN_MAX {
            let budget = self.read_budget();
            let Some(pty) = self.pty.as_ref() else { return };
            if self.pty_eof || budget == 0 {
                break;
            }
            match pty.pump(budget) {
                Ok(Pumped::Data(chunk)) => self.feed(Input::PtyData(chunk), work),
                Ok(Pumped::Eof) => {
                    self.pty_eof = true;
                    work.push_back(Input::OutputEof);
                }
                Ok(Pumped::WouldBlock | Pumped::Paused) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "PTY lost");
                    self.pty_eof = true;
                    work.push_back(Input::OutputLost);
                }
            }
        }
        if let Some(pty) = self.pty.as_mut() {
            if pty.input_pending() > 0 {
                if let Err(e) = pty.flush_input() {
                    tracing::warn!(error = %e, "PTY lost");
                    work.push_back(Input::OutputLost);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests fail by panicking
    use super::*;

    /// A reader over one end of a socket pair whose queue holds one
    /// message; the client end sends three and leaves.
    fn reader_after_a_departed_typist(
        state: &ClientState,
    ) -> (Receiver<Inbound>, std::thread::JoinHandle<()>) {
        let (mut client_end, hc_end) = UnixStream::pair().unwrap();
        let (_wake_r, wake_w) = rustix::pipe::pipe_with(
            rustix::pipe::PipeFlags::CLOEXEC | rustix::pipe::PipeFlags::NONBLOCK,
        )
        .unwrap();
        let (tx, rx) = mpsc::sync_channel(1);
        let shared = state.clone();
        let reader = std::thread::spawn(move || read_client(hc_end, &tx, &shared, &wake_w));
        for _ in 0..3 {
            channel::send(
                &mut client_end,
                "session",
                &SessionTerminalEvent::Input(TerminalInput {
                    session_id: SessionId([1; 16]),
                    bytes: Chunk::new(b"x".to_vec()).unwrap(),
                }),
            )
            .unwrap();
        }
        drop(client_end);
        (rx, reader)
    }

    fn seen_gone_within(state: &ClientState, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if state.gone.load(Ordering::SeqCst) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        false
    }

    #[test]
    fn the_terminal_is_given_back_when_it_echoes_or_its_modes_leave_the_silenced_ones() {
        let silenced = LineModes {
            echo: false,
            flags: [1, 2, 3, 4],
        };
        let echoing = LineModes {
            echo: true,
            ..silenced
        };
        // A command that turned echo off at once, in raw mode.
        let raw = LineModes {
            echo: false,
            flags: [0, 0, 3, 0],
        };
        assert!(!restored(Some(silenced), Some(Some(silenced))));
        assert!(restored(Some(silenced), Some(Some(echoing))));
        assert!(restored(Some(silenced), Some(Some(raw))));
        assert!(!restored(None, Some(Some(raw))));
        assert!(restored(None, Some(Some(echoing))));
        assert!(restored(Some(silenced), None));
        assert!(restored(Some(silenced), Some(None)));
    }

    /// Spec 3.4 acquisition step 5: keys typed ahead fill the session's
    /// queue before the admission; the client's departure behind them is
    /// still seen, so the loop releases the session instead of admitting it.
    #[test]
    fn a_client_that_leaves_behind_a_full_queue_is_seen_gone_before_the_admission() {
        let state = ClientState::default();
        let (rx, reader) = reader_after_a_departed_typist(&state);
        assert!(seen_gone_within(&state, Duration::from_secs(5)));
        assert!(matches!(rx.try_recv(), Ok(Inbound::Message(_))));
        drop(rx);
        reader.join().unwrap();
    }

    /// Once the loop takes client events, a full queue only holds the
    /// client back: what it sent is delivered, in order, then its loss.
    #[test]
    fn once_events_are_taken_a_full_queue_delivers_everything_then_the_loss() {
        let state = ClientState::default();
        state.taken.store(true, Ordering::SeqCst);
        let (rx, reader) = reader_after_a_departed_typist(&state);
        assert!(!seen_gone_within(&state, Duration::from_millis(200)));
        let got: Vec<bool> = rx
            .iter()
            .map(|inbound| matches!(inbound, Inbound::Message(SessionTerminalEvent::Input(_))))
            .collect();
        assert_eq!(got, [true, true, true, false]);
        assert!(state.gone.load(Ordering::SeqCst));
        reader.join().unwrap();
    }
}
