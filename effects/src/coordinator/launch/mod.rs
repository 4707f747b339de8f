//! Launch and publication of a generation (spec 3.3, 3.6, 3.7; FR-12,
//! FR-18). The core decides every step
//! ([`lazaret_runtime::coordinator::launch::next_launch`]); this module
//! performs it. Before the generation exists the image is resolved and its
//! lower prepared ([`pre_generation`]). From `StartGeneration` ([`generation`])
//! on, each step is checked against the model before its durable write and
//! recorded after it:
//! - the Runtime Supervisor's causal acquisition ([`runtime_supervisor`]):
//!   `RecordIntent(Sandbox)` and `StageProcess`, then, once its user
//!   namespace is verified, `CommitProcess`;
//! - what RS reports as it launches the routing daemon (a routed Domain's
//!   router), the connectivity helper and attached runsc and installs the
//!   network ([`reports`]);
//! - the participants' own steps ([`participants`]):
//!   `CommitParticipant(GitRouting)` and `CommitParticipant(Helper)`, the
//!   network's snapshot and
//!   `MarkNetworkReady`, `CommitParticipant(Sandbox)`, and the
//!   publication's `RecordIntent`, `AcquireSnapshot` and `Publish`.
//!
//! A step that fails is named in the error (`CoordinatorError::LaunchStep`,
//! its source kept) and ends RS exactly before the launch returns.
mod generation;
mod participants;
mod pre_generation;
mod reports;
mod runtime_supervisor;
mod storage;

use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use lazaret_generated::lazaret::{Action, ProcSlots, Roles};
use lazaret_runtime::coordinator::launch::{next_launch, step_name, LaunchNext};
use lazaret_runtime::coordinator::messages::{CoordinatorCommand, SupervisorMessage};
use lazaret_runtime::protocol::TrustAnchor;
use lazaret_runtime::records::ids::{GenerationId, ModelValue};
use lazaret_runtime::records::participant::{NamespaceIdentity, ParticipantRole};

use super::channel;
use super::host::{micros, CoordinatorError, Hc, HcEvent, LaunchInputs};
use super::paths::remove_generation_dir;
use crate::broker::{CommittedChild, StagedChild};
use crate::process_identity::{ChildState, ProcessHandle, Signal};
pub(super) use generation::trust_anchor;
use generation::NetworkInputs;
use pre_generation::PreparedLaunch;
use reports::RunningSandbox;

/// Why this coordinator's runtime ended, once it has (RS reported a
/// failure or vanished): every session that ends afterwards reports it
/// to its terminal instead of a bare status (spec 3.7 helper loss).
static RUNTIME_LOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
/// A second descriptor of RS's channel, to see (without reading) whether
/// RS has said something the watcher has not read yet, or closed it.
static RUNTIME_CHANNEL: std::sync::OnceLock<UnixStream> = std::sync::OnceLock::new();
/// How long a session ending as the runtime reports its loss waits for
/// the watcher to read the report.
const RUNTIME_REPORT_WAIT: Duration = Duration::from_secs(2);

/// Why this coordinator's runtime ended, if it has. RS reports a loss
/// (spec 3.7 helper loss) before it stops the sandbox, so a session that
/// ends because the sandbox stopped finds the report sent — but the
/// watcher thread may not have read it yet: while RS's channel holds
/// unread bytes or is closed, this waits for the watcher (at most
/// [`RUNTIME_REPORT_WAIT`]). A healthy RS's channel is quiet: no wait.
pub(super) fn runtime_lost() -> Option<&'static str> {
    if let Some(why) = RUNTIME_LOST.get() {
        return Some(why);
    }
    let rs = RUNTIME_CHANNEL.get()?;
    let mut fds = [rustix::event::PollFd::new(rs, rustix::event::PollFlags::IN)];
    let now = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    match rustix::event::poll(&mut fds, Some(&now)) {
        Ok(n) if n > 0 => {}
        _ => return None,
    }
    let deadline = Instant::now() + RUNTIME_REPORT_WAIT;
    // Bounded by the deadline.
    while Instant::now() < deadline {
        if let Some(why) = RUNTIME_LOST.get() {
            return Some(why);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    RUNTIME_LOST.get().map(String::as_str)
}

/// How long RS may take for each launch step.
const SUPERVISOR_TIMEOUT: Duration = Duration::from_secs(30);
/// How long RS may take to stop the sandbox and exit.
pub(super) const SUPERVISOR_EXIT: Duration = Duration::from_secs(20);
/// Bound of the launch loop: the whole vocabulary of launch steps
/// (`next_launch` offers each at most once) is 31 steps for every role.
const LAUNCH_STEP_BOUND: usize = 32;

/// The running generation.
pub(super) struct LaunchedGeneration {
    pub id: GenerationId,
    pub dir: PathBuf,
    pub supervisor: CommittedChild,
    pub to_supervisor: UnixStream,
    pub container_id: String,
    pub runsc_root: PathBuf,
    /// The generation's Trust Anchor package (spec 3.3), held in this
    /// process's memory only and dropped with the generation.
    pub trust_anchor: TrustAnchor,
}

/// The durable decision value of the model's `decision`.
pub(super) fn decision_value(name: &str) -> Result<ModelValue, CoordinatorError> {
    ModelValue::new(name).map_err(|source| CoordinatorError::RecordValue {
        what: "durable decision",
        source,
    })
}

/// The store's participant role for a model role.
pub(super) fn participant_role(r: Roles) -> ParticipantRole {
    match r {
        Roles::PreparedLower => ParticipantRole::PreparedLower,
        Roles::StateAnchor => ParticipantRole::StateAnchor,
        Roles::GitRouting => ParticipantRole::GitRouting,
        Roles::Network => ParticipantRole::Network,
        Roles::Helper => ParticipantRole::Helper,
        Roles::Sandbox => ParticipantRole::Sandbox,
        Roles::Publication => ParticipantRole::Publication,
    }
}

/// The Runtime Supervisor as far as the launch has acquired it, with its
/// lifetime channel (a socketpair whose other end RS inherited).
enum Supervisor {
    /// Not spawned yet.
    Absent,
    /// Spawned, staged and held at its barrier-released start.
    Staged {
        child: StagedChild,
        channel: UnixStream,
    },
    /// Committed (spec 3.3 step 9).
    Committed {
        child: CommittedChild,
        channel: UnixStream,
    },
}

/// A launch under way: what each step leaves for the later ones.
struct Launching {
    prepared: PreparedLaunch,
    generation: GenerationId,
    /// The generation's directory (its `sbin` holds the static binaries).
    dir: PathBuf,
    /// The canonical workspace.
    workspace: PathBuf,
    network: NetworkInputs,
    container_id: String,
    supervisor: Supervisor,
    /// RS's report of the running sandbox.
    running: Option<RunningSandbox>,
    /// The enforcement namespace RS reported and this coordinator read
    /// itself (spec 3.7 "Independent identity").
    network_namespace: Option<NamespaceIdentity>,
    /// RS waits for the answer to its network report until
    /// `MarkNetworkReady` is taken.
    network_answer_due: bool,
    /// The State Anchors RS mounts, one per persistent path (spec 3.6).
    anchors: Vec<lazaret_runtime::coordinator::messages::AnchorPlan>,
    /// The generation's Trust Anchor package (spec 3.3), made before the
    /// sandbox starts.
    trust_anchor: TrustAnchor,
}

impl Launching {
    /// RS's lifetime channel, once RS is spawned.
    fn channel(&mut self) -> Result<&mut UnixStream, CoordinatorError> {
        match &mut self.supervisor {
            Supervisor::Staged { channel, .. } | Supervisor::Committed { channel, .. } => {
                Ok(channel)
            }
            Supervisor::Absent => Err(CoordinatorError::NoSupervisor),
        }
    }

    /// The committed RS, for a step that needs it.
    fn committed(&self) -> Result<&CommittedChild, CoordinatorError> {
        match &self.supervisor {
            Supervisor::Committed { child, .. } => Ok(child),
            _ => Err(CoordinatorError::NoSupervisor),
        }
    }

    /// Ends a failed launch exactly: RS is told why when it waits for an
    /// answer, stops on its closed lifetime channel and is reaped; the
    /// generation directory goes. The release of what was recorded is the
    /// caller's (`AbortGeneration`).
    fn abandon(self, hc: &Hc<'_, '_>, why: &CoordinatorError) {
        match self.supervisor {
            Supervisor::Absent => {}
            Supervisor::Staged { child, mut channel } => {
                refuse_if_due(&mut channel, self.network_answer_due, why);
                drop(channel);
                reap_supervisor(hc, child.handle());
            }
            Supervisor::Committed { child, mut channel } => {
                refuse_if_due(&mut channel, self.network_answer_due, why);
                drop(channel);
                reap_supervisor(hc, child.handle());
            }
        }
        if let Err(e) = remove_generation_dir(&self.dir) {
            tracing::warn!(dir = %self.dir.display(), error = %e, "the generation directory was not removed");
        }
    }

    /// The published generation: RS's channel loses its launch timeout
    /// and is watched for the runtime's loss.
    fn launched(
        self,
        hc: &Hc<'_, '_>,
        events_tx: &Sender<HcEvent>,
    ) -> Result<LaunchedGeneration, CoordinatorError> {
        let dir = self.dir.clone();
        let io_err = |source| CoordinatorError::Io {
            path: dir.clone(),
            source,
        };
        let (Supervisor::Committed { child, channel }, Some(running)) =
            (self.supervisor, self.running)
        else {
            return Err(CoordinatorError::NoLaunchedSandbox);
        };
        let watched = channel
            .set_read_timeout(None)
            .and_then(|()| channel.try_clone());
        let to_supervisor = match watched {
            Ok(t) => t,
            Err(source) => {
                drop(channel);
                reap_supervisor(hc, child.handle());
                if let Err(e) = remove_generation_dir(&self.dir) {
                    tracing::warn!(dir = %self.dir.display(), error = %e, "the generation directory was not removed");
                }
                return Err(io_err(source));
            }
        };
        watch_supervisor(channel, events_tx.clone());
        Ok(LaunchedGeneration {
            id: self.generation,
            dir: self.dir,
            supervisor: child,
            to_supervisor,
            container_id: self.container_id,
            runsc_root: running.runsc_root,
            trust_anchor: self.trust_anchor,
        })
    }
}

/// RS awaiting the answer to its network report hears the refusal.
fn refuse_if_due(channel: &mut UnixStream, due: bool, why: &CoordinatorError) {
    if due {
        let _ = channel::send(
            channel,
            "supervisor",
            &CoordinatorCommand::Refused(why.to_string()),
        );
    }
}

/// The runtime's loss: RS reports its failure or its channel closes.
fn watch_supervisor(mut rs: UnixStream, lost: Sender<HcEvent>) {
    if let Ok(peek) = rs.try_clone() {
        let _ = RUNTIME_CHANNEL.set(peek);
    }
    std::thread::spawn(move || {
        let why = match channel::receive::<SupervisorMessage>(&mut rs, "supervisor") {
            Ok(SupervisorMessage::Failed(why)) => why,
            Ok(other) => format!("unexpected {other:?}"),
            Err(e) => e.to_string(),
        };
        let _ = RUNTIME_LOST.set(why.clone());
        let _ = lost.send(HcEvent::SupervisorLost(why));
    });
}

/// The launch, from the image to the published generation, each step as
/// the core decides it. `timings` gains one entry per preparation phase
/// and per model step, named after it.
pub(super) fn launch_generation(
    hc: &mut Hc<'_, '_>,
    launch: &LaunchInputs<'_>,
    events_tx: &Sender<HcEvent>,
    timings: &mut Vec<(String, u64)>,
) -> Result<LaunchedGeneration, CoordinatorError> {
    let _span = tracing::info_span!("LaunchGeneration", generation = hc.id.0).entered();
    let prepared = pre_generation::prepare_launch(launch, timings)?;
    let mut l = generation::launching(hc, launch, prepared)?;
    for _ in 0..LAUNCH_STEP_BOUND {
        let next = next_launch(hc.model.model());
        let step = match next {
            LaunchNext::Take(a) | LaunchNext::OnReport(a) => a,
            LaunchNext::Published => return l.launched(hc, events_tx),
            LaunchNext::Stuck => {
                let e = CoordinatorError::LaunchStuck;
                l.abandon(hc, &e);
                return Err(e);
            }
        };
        let name = step_name(&step);
        let _step = tracing::info_span!("launch_step", step = %name).entered();
        let started = Instant::now();
        let done = match next {
            LaunchNext::OnReport(expected) => {
                reports::on_report(hc, launch.paths, &mut l, expected)
            }
            _ => take(hc, launch, &mut l, step),
        };
        if let Err(e) = done {
            l.abandon(hc, &e);
            return Err(CoordinatorError::LaunchStep {
                step,
                source: Box::new(e),
            });
        }
        timings.push((name, micros(started)));
    }
    let e = CoordinatorError::LaunchStuck;
    l.abandon(hc, &e);
    Err(e)
}

/// The effect of a step this coordinator takes on its own.
fn take(
    hc: &mut Hc<'_, '_>,
    launch: &LaunchInputs<'_>,
    l: &mut Launching,
    step: Action,
) -> Result<(), CoordinatorError> {
    match step {
        Action::StartGeneration { .. } => generation::start_generation(hc, launch, l),
        Action::RecordIntent {
            r: Roles::Sandbox, ..
        } => runtime_supervisor::acquire_supervisor(hc, launch, l),
        Action::CommitProcess {
            ps: ProcSlots::SandboxRuntimeSupervisor,
            ..
        } => runtime_supervisor::commit_supervisor(hc, l),
        Action::RecordIntent {
            r: Roles::PreparedLower,
            ..
        } => storage::record_prepared_lower_intent(hc),
        Action::AcquireSnapshot {
            r: Roles::PreparedLower,
            ..
        } => storage::acquire_prepared_lower_snapshot(hc, l),
        Action::CommitParticipant {
            r: Roles::PreparedLower,
            ..
        } => storage::commit_prepared_lower(hc, l),
        Action::RecordIntent {
            r: Roles::StateAnchor,
            ..
        } => storage::record_state_anchor_intent(hc, launch.paths, l),
        Action::CommitParticipant {
            r: Roles::StateAnchor,
            ..
        } => storage::commit_state_anchor(hc),
        Action::CommitParticipant {
            r: Roles::Helper, ..
        } => participants::commit_helper(hc, l),
        Action::AcquireSnapshot {
            r: Roles::Network, ..
        } => participants::acquire_network_snapshot(hc, l),
        Action::MarkNetworkReady { .. } => participants::mark_network_ready(hc, l),
        Action::RecordIntent {
            r: Roles::Publication,
            ..
        } => participants::record_publication_intent(hc),
        Action::AcquireSnapshot {
            r: Roles::Publication,
            ..
        } => participants::acquire_publication_snapshot(hc, launch),
        Action::Publish { .. } => participants::publish(hc, launch),
        other => Err(CoordinatorError::NoLaunchEffect { step: other }),
    }
}

/// Ends a Runtime Supervisor exactly: it stops on the closed lifetime
/// channel; after [`SUPERVISOR_EXIT`] it is killed through its pidfd; it is
/// reaped either way. Returns how it ended (`None` when that could not be
/// read).
pub(super) fn reap_supervisor(hc: &Hc<'_, '_>, handle: &ProcessHandle) -> Option<ChildState> {
    let deadline = Instant::now() + SUPERVISOR_EXIT;
    loop {
        match hc.broker.poll(handle) {
            Ok(ChildState::Running) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Ok(ChildState::Running) => {
                let _ = hc.broker.signal(handle, Signal::Kill);
                return hc.broker.wait(handle).ok();
            }
            Ok(exited) => return Some(exited),
            Err(_) => return None,
        }
    }
}
