//! One piped (non-interactive) session: stdin, stdout and stderr are pipes,
//! and its release follows the same pure terminal machine as an interactive
//! one (spec 3.4 "Session close, Client connection loss, PTY loss, or
//! exec-client loss starts the same physical release"): record release
//! intent, then SIGHUP, grace, SIGTERM, grace, SIGKILL to the recorded guest
//! process group, each only while the leader still matches. A signal to the
//! exec client alone is not enough: runsc does not forward it to a process
//! without a terminal (measured: a `trap ... TERM` in `sh -c` never ran).
//!
//! Threads of one session:
//! - two forwarders read the stdout and stderr pipes and send each chunk to
//!   the client as it arrives (a blocked client blocks them, and the kernel
//!   pipe then holds the guest back); they stop at EOF or when the machine
//!   closes the output;
//! - the reader writes the client's stdin into the guest's stdin pipe;
//! - the identity thread reads the guest leader's PID from
//!   `--internal-pid-file`; the rest of its identity (start time, group)
//!   comes with the first observation, so a piped session runs no guest
//!   tool unless its release needs one;
//! - the driver owns the machine and the exec client's pidfd. It feeds the
//!   machine only release inputs (client loss, output end, exec-client
//!   completion, observations, timers) and sends the one exit last.
use super::channel;
use super::guest_runner::EnteredRunner;
use super::release_gate::ReleaseGate;
use super::session_release::{self, ReleaseEffects, ReleaseOutcome};
use super::session_report::SessionReport;
use super::terminal_session::{read_leader_pid, session_end, GuestTarget};
use crate::broker::CommittedChild;
use crate::runsc_exec::GuestControl;
use lazaret_runtime::coordinator::frame::PREFIX;
use lazaret_runtime::records::ids::{GenerationId, SessionId};
use lazaret_runtime::records::terminal::GuestProcessIdentity;
use lazaret_runtime::terminal::machine::{
    Command, GroupObservation, Input, Machine, ReleaseTimings,
};
use lazaret_runtime::terminal::protocol::{
    Chunk, NonInteractiveOutput, NonInteractiveSessionEvent, NonInteractiveSessionMessage,
    SessionTerminalMessage, MAX_CHUNK_BYTES, MAX_RECORD_BYTES,
};
use rustix::event::{PollFd, PollFlags};
use std::collections::VecDeque;
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long the loop waits for the guest leader identity when a release
/// needs it.
const IDENTITY_WAIT: Duration = Duration::from_secs(10);
/// How long the forwarders may take to finish their last send before the
/// exit is sent.
const FORWARDERS_FINISH: Duration = Duration::from_secs(5);
/// The piped form's drain: output that is still arriving when the command
/// ended gets this long to reach its pipes' EOF (a background process that
/// keeps them open does not hold the session).
const PIPED_DRAIN_MS: u64 = 1000;

/// Everything one piped session owns once its exec client runs.
#[derive(Debug)]
pub struct PipedParts {
    pub session: SessionId,
    pub generation: GenerationId,
    pub committed: CommittedChild,
    pub client: UnixStream,
    /// HC's ends of the guest's stdio pipes.
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
    /// Read end of the pipe named by `--internal-pid-file`.
    pub pid_pipe: OwnedFd,
    pub guest: GuestTarget,
    /// The session's report queue: told once the release finished, with
    /// its outcome.
    pub reports: Sender<SessionReport>,
    /// Commits the durable ReleaseIntent before the release signals.
    pub release: ReleaseGate,
}

/// What the session's threads report to its driver.
enum Event {
    ClientLost,
    OutputEnded,
}

/// Starts the session's threads.
pub fn spawn(parts: PipedParts) -> io::Result<()> {
    let (wake_r, wake_w) = rustix::pipe::pipe_with(
        rustix::pipe::PipeFlags::CLOEXEC | rustix::pipe::PipeFlags::NONBLOCK,
    )?;
    let wake_w = Arc::new(wake_w);
    // Closing the write end tells the forwarders to stop (CloseOutput).
    let (stop_r, stop_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    let stop_r = Arc::new(stop_r);
    let (events_tx, events_rx) = mpsc::channel::<Event>();
    let (forwarded_tx, forwarded_rx) = mpsc::channel::<()>();
    let writer = Arc::new(Mutex::new(parts.client.try_clone()?));
    for (fd, is_stdout) in [(parts.stdout, true), (parts.stderr, false)] {
        let writer = Arc::clone(&writer);
        let stop = Arc::clone(&stop_r);
        let events = events_tx.clone();
        let forwarded = forwarded_tx.clone();
        let wake = Arc::clone(&wake_w);
        let session = parts.session;
        std::thread::spawn(move || {
            let output = Output { session, is_stdout };
            forward_output(&fd, output, &writer, &stop, &events, &wake);
            let _ = forwarded.send(());
        });
    }
    drop(forwarded_tx);
    {
        let events = events_tx.clone();
        let wake = Arc::clone(&wake_w);
        let client = parts.client;
        let stdin = parts.stdin;
        let session = parts.session;
        std::thread::spawn(move || forward_input(client, session, stdin, &events, &wake));
    }
    drop(events_tx);
    let (leader_tx, leader_rx) = mpsc::channel();
    {
        let pipe = parts.pid_pipe;
        std::thread::spawn(move || {
            let _ = leader_tx.send(read_leader_pid(&pipe));
        });
    }
    let timings = ReleaseTimings {
        drain_deadline_ms: PIPED_DRAIN_MS,
        ..ReleaseTimings::default()
    };
    let driver = Driver {
        // Output bypasses the machine's client queue; it holds only the exit.
        machine: Machine::new_piped(parts.session, parts.generation, timings),
        effects: ReleaseEffects::new(parts.committed, parts.release),
        outputs_open: 2,
        events: events_rx,
        leader: Leader::Waiting(leader_rx),
        control: parts.guest.control(),
        wake: wake_r,
        stop: Some(stop_w),
        exit: Some(ExitPath {
            writer,
            forwarded: forwarded_rx,
        }),
        observe_due: false,
    };
    let reports = parts.reports;
    std::thread::spawn(move || {
        let _span = tracing::info_span!("PipedSession").entered();
        let outcome = driver.run();
        let _ = reports.send(SessionReport::Ended(outcome));
    });
    Ok(())
}

/// How the one exit reaches the client: after the forwarders' last chunk.
struct ExitPath {
    writer: Arc<Mutex<UnixStream>>,
    forwarded: Receiver<()>,
}

impl ExitPath {
    /// Sends `message` once both forwarders finished their current chunk
    /// (bounded), then closes the connection: the CLI exits while the
    /// release's final observation goes on.
    fn send(self, message: &NonInteractiveSessionMessage) {
        for _ in 0..2 {
            if self.forwarded.recv_timeout(FORWARDERS_FINISH).is_err() {
                break;
            }
        }
        if let Ok(mut w) = self.writer.lock() {
            let _ = channel::send(&mut *w, "session", message);
            let _ = w.shutdown(std::net::Shutdown::Both);
        }
    }
}

fn poke(wake: &OwnedFd) {
    // A full wake pipe already wakes the driver.
    let _ = rustix::io::write(wake, &[1]);
}

/// Which of the session's output pipes a forwarder copies.
#[derive(Clone, Copy)]
struct Output {
    session: SessionId,
    is_stdout: bool,
}

/// Copies one output pipe to the client, in `Stdout` or `Stderr` records
/// of at most [`MAX_CHUNK_BYTES`], until EOF or until told to stop. After
/// the client is gone the pipe is still read (and discarded), so a guest
/// writing from its SIGHUP or SIGTERM handler is not blocked.
fn forward_output(
    fd: &OwnedFd,
    output: Output,
    writer: &Mutex<UnixStream>,
    stop: &OwnedFd,
    events: &Sender<Event>,
    wake: &OwnedFd,
) {
    let mut buf = vec![0u8; MAX_CHUNK_BYTES];
    let mut client_ok = true;
    loop {
        let mut fds = [
            PollFd::new(fd, PollFlags::IN),
            PollFd::new(stop, PollFlags::IN),
        ];
        match rustix::event::poll(&mut fds, None) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(_) => break,
        }
        if !fds[1].revents().is_empty() {
            return;
        }
        match rustix::io::read(fd, &mut buf) {
            Ok(0) => break,
            Ok(n) if client_ok => {
                let Ok(bytes) = Chunk::new(buf[..n].to_vec()) else {
                    break;
                };
                let out = NonInteractiveOutput {
                    session_id: output.session,
                    bytes,
                };
                let message = if output.is_stdout {
                    NonInteractiveSessionMessage::Stdout(out)
                } else {
                    NonInteractiveSessionMessage::Stderr(out)
                };
                let sent = writer
                    .lock()
                    .map_err(|_| ())
                    .and_then(|mut w| channel::send(&mut *w, "session", &message).map_err(|_| ()));
                if sent.is_err() {
                    client_ok = false;
                    let _ = events.send(Event::ClientLost);
                    poke(wake);
                }
            }
            Ok(_) | Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => {}
            Err(_) => break,
        }
    }
    let _ = events.send(Event::OutputEnded);
    poke(wake);
}

/// Copies the client's stdin into the guest's stdin pipe; a client that
/// goes away, or sends a frame that is not a bounded v1 record, is
/// reported as lost. A record of another Session ID is refused (spec 3.4)
/// and dropped. A guest that stops reading its stdin blocks only this
/// thread (the socket then holds the client back).
fn forward_input(
    mut client: UnixStream,
    session: SessionId,
    stdin: OwnedFd,
    events: &Sender<Event>,
    wake: &OwnedFd,
) {
    let mut pipe = Some(std::fs::File::from(stdin));
    loop {
        let event = channel::receive_within::<NonInteractiveSessionEvent>(
            &mut client,
            "session",
            PREFIX + MAX_RECORD_BYTES,
        );
        match event {
            Ok(event) if event.session_id() != session => {
                tracing::warn!(other = %event.session_id(), "an event of another session is refused");
            }
            Ok(NonInteractiveSessionEvent::Input(input)) => {
                if let Some(p) = pipe.as_mut() {
                    if p.write_all(input.bytes.as_bytes()).is_err() {
                        pipe = None;
                    }
                }
            }
            Ok(NonInteractiveSessionEvent::InputClosed(_)) => pipe = None,
            Err(_) => {
                let _ = events.send(Event::ClientLost);
                poke(wake);
                return;
            }
        }
    }
}

enum Leader {
    /// The PID has not been read yet.
    Waiting(Receiver<Option<u32>>),
    /// The PID, before the first observation.
    Pid(u32),
    Known(GuestProcessIdentity),
    /// No PID, or an observation that could not identify the leader.
    Unknown,
}

struct Driver {
    machine: Machine,
    effects: ReleaseEffects,
    /// Output pipes not yet at EOF.
    outputs_open: u8,
    events: Receiver<Event>,
    leader: Leader,
    control: GuestControl<'static, EnteredRunner>,
    wake: OwnedFd,
    stop: Option<OwnedFd>,
    /// Taken when the machine queues the exit.
    exit: Option<ExitPath>,
    /// The machine asked for an observation (`ObserveGroup`).
    observe_due: bool,
}

impl Driver {
    /// Runs the release to its end. The client's exit goes out as soon as
    /// the machine queues it (after the drain), before the final
    /// observation.
    fn run(mut self) -> ReleaseOutcome {
        let mut work = VecDeque::new();
        let mut client_lost_fed = false;
        loop {
            while let Ok(event) = self.events.try_recv() {
                match event {
                    Event::ClientLost if !client_lost_fed => {
                        client_lost_fed = true;
                        work.push_back(Input::ClientLost);
                    }
                    Event::ClientLost => {}
                    Event::OutputEnded => {
                        tracing::info!(open = self.outputs_open, "output pipe ended");
                        self.outputs_open = self.outputs_open.saturating_sub(1);
                        if self.outputs_open == 0 {
                            work.push_back(Input::OutputEof);
                        }
                    }
                }
            }
            while let Some(input) = work.pop_front() {
                self.feed(input);
            }
            // The queue has no room for output: only the exit is ever in it.
            if let Some(SessionTerminalMessage::Exit(exit)) = self.machine.poll_message() {
                if let Some(path) = self.exit.take() {
                    path.send(&match session_end(exit) {
                        Ok(exit) => NonInteractiveSessionMessage::Exit(exit),
                        Err(abort) => NonInteractiveSessionMessage::Abort(abort),
                    });
                    tracing::info!("session exit sent");
                }
            }
            // An observation is a guest tool run: the exit went out first.
            if self.observe_due {
                self.observe_due = false;
                let observation = self.observe();
                tracing::info!(?observation, "guest group observed");
                work.push_back(Input::Observed(observation));
                continue;
            }
            if self.machine.is_finished() {
                return ReleaseOutcome::of(&self.machine);
            }
            self.wait(&mut work);
        }
    }

    fn feed(&mut self, input: Input) {
        let Some(commands) = session_release::handle(&mut self.machine, input) else {
            return;
        };
        for command in commands {
            self.execute(command);
        }
        // At most once per release: the confirmation's own steps await
        // nothing.
        if let Some(answer) = self.effects.take_confirmation() {
            self.feed(answer);
        }
    }

    fn leader(&mut self) -> &Leader {
        if let Leader::Waiting(rx) = &self.leader {
            self.leader = match rx.recv_timeout(IDENTITY_WAIT).ok().flatten() {
                Some(pid) => Leader::Pid(pid),
                None => Leader::Unknown,
            };
        }
        &self.leader
    }

    /// `ObserveGroup`: the first observation also takes the leader's
    /// identity (`runsc_exec::identify_and_classify`).
    fn observe(&mut self) -> GroupObservation {
        match *self.leader() {
            Leader::Known(identity) => self.control.observe(&identity),
            Leader::Pid(pid) => {
                let (identity, observation) = self.control.observe_by_pid(pid);
                self.leader = identity.map_or(Leader::Unknown, Leader::Known);
                observation
            }
            Leader::Waiting(_) | Leader::Unknown => GroupObservation::Mismatch,
        }
    }

    fn execute(&mut self, command: Command) {
        let Some(command) = self.effects.execute(command, self.machine.release_reason()) else {
            return;
        };
        match command {
            Command::SignalGroup(signal) => {
                let _span =
                    tracing::info_span!("SignalGuestGroup", signal = signal.name()).entered();
                // Signals follow an observation that found the leader, so
                // its identity is known by now.
                match *self.leader() {
                    Leader::Known(identity) => {
                        if let Err(e) = self.control.signal(&identity, signal) {
                            tracing::warn!(error = %e, "guest group signal failed");
                        }
                    }
                    _ => tracing::warn!("no identified guest group; signal not sent"),
                }
            }
            // Made by the loop once this input's commands are done.
            Command::ObserveGroup => self.observe_due = true,
            Command::CloseOutput => {
                // The forwarders stop after their current chunk.
                self.stop = None;
            }
            // A piped session takes no terminal events: the machine never
            // writes input, resizes or signals a foreground group for it.
            other => tracing::warn!(?other, "command not carried out in a piped session"),
        }
    }

    /// Sleeps until an event, the exec client's exit or the nearest timer.
    fn wait(&mut self, work: &mut VecDeque<Input>) {
        self.effects.wait(&self.wake, None, None, work);
    }
}
