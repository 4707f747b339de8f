//! The Host Coordinator's Escalation Mailbox (spec 3.8): the generation's
//! `mailbox/requests` and `mailbox/results` directories, made with the
//! generation when the profile enables escalation, and the threads that
//! serve them ([`crate::escalation::service`]) while the generation runs.
//!
//! A request no auto-approval rule matches exactly is prompted on its
//! session's own terminal through the generation's [`PromptDesk`], where
//! every interactive session's terminal loop registers.
//!
//! One watcher thread takes requests; each admitted request is served on a
//! thread of its own, at most one at a time per session (a session's next
//! request waits for its open one). A request counts only while its
//! session is one this coordinator serves: the coordinator publishes its
//! live Session IDs after every event, and a session that ends stops its
//! host process. When the coordinator stops serving, every host process is
//! stopped and reaped before the threads end (OR-3); a coordinator that
//! dies takes them with it (the host process's parent-death signal).
use std::collections::{HashSet, VecDeque};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lazaret_runtime::escalation::steps::EscalationStep;
use lazaret_runtime::escalation::{MailboxAuthority, RequestLedger};
use lazaret_runtime::ownership::mailbox::MailboxOp;
use lazaret_runtime::ownership::AbsenceProof;
use lazaret_runtime::protocol::records::SessionBinding;
use lazaret_runtime::protocol::ResultSigner;
use lazaret_runtime::records::domain::Mailbox;
use lazaret_runtime::records::ids::{EscalationRequestId, GenerationId, HostPath, SessionId};
use lazaret_runtime::records::participant::ParticipantState;

use super::host::{CoordinatorError, Hc, HcEvent};
use super::paths::MAILBOX;
use crate::config_resolve::ResolvedExecutableRule;
use crate::confined::{ConfinedSys, RealSys, UserIds};
use crate::domain_store::StoreOp;
use crate::escalation::launcher::HostProcessSetting;
use crate::escalation::model_steps::{EscalationSteps, StepRefused, TOGETHER_MAX};
use crate::escalation::prompt_desk::PromptDesk;
use crate::escalation::running::RunningHostProcesses;
use crate::escalation::service::{Admitted, ApprovalRule, Limits, Service};
use crate::escalation::MailboxDir;

/// How often the watcher looks for requests.
const WATCH: Duration = Duration::from_millis(2);
/// Admitted requests waiting for their session's open one, in all.
const WAITING_MAX: usize = 64;
/// ... and of one session.
const WAITING_PER_SESSION: usize = 4;
/// How often delivered results past their retention are removed.
const SWEEP: Duration = Duration::from_secs(10);
/// Refused entries logged one by one before only every power of two is.
const LOGGED_REFUSALS: u64 = 32;

/// Spec 3.6 ("Sessions and the generation mailbox are separate generation
/// records"): the generation's Mailbox row in `Intent`, written with
/// `StartGeneration` before the directories exist. Its paths are lookup
/// hints (`<generation>/mailbox`, its `requests` and `results`).
pub(super) fn mailbox_intent(
    generation: GenerationId,
    generation_dir: &Path,
) -> Result<StoreOp, CoordinatorError> {
    let mailbox = generation_dir.join(MAILBOX);
    let path = |what: &'static str, p: PathBuf| {
        HostPath::new(p.into_os_string().into_vec())
            .map_err(|source| CoordinatorError::RecordValue { what, source })
    };
    Ok(StoreOp::InsertMailbox {
        generation,
        identity_path: path("mailbox path", mailbox.clone())?,
        inbox_path: path("mailbox inbox path", mailbox.join("requests"))?,
        outbox_path: path("mailbox outbox path", mailbox.join("results"))?,
    })
}

/// Makes `<generation>/mailbox/{requests,results}`: the mailbox 0755,
/// `results` 0755 (every sandbox user reads results), `requests` 01733
/// (every sandbox user may write a request, none may list or remove
/// another's); then the Mailbox row is `Committed`.
pub(super) fn make_mailbox(hc: &Hc<'_, '_>, generation_dir: &Path) -> Result<(), CoordinatorError> {
    let mailbox = generation_dir.join(MAILBOX);
    for (dir, mode) in [
        (mailbox.clone(), 0o755),
        (mailbox.join("results"), 0o755),
        (mailbox.join("requests"), 0o1733),
    ] {
        std::fs::create_dir(&dir)
            .and_then(|()| std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)))
            .map_err(|source| CoordinatorError::Io { path: dir, source })?;
    }
    crate::crash_point::crash_point!(Hc, "mailbox", "before-commit", "MailboxCommit");
    hc.apply(&[StoreOp::Mailbox {
        generation: hc.id,
        op: MailboxOp::Commit,
    }])
}

/// The Mailbox row's release, before the generation directory (and the
/// mailbox in it) is removed while the runtime stops (`ShutdownRuntime`):
/// `ReleaseIntent`. Nothing when the generation has no row or it is
/// already released.
pub(super) fn mailbox_release_intent(hc: &Hc<'_, '_>) -> Result<(), CoordinatorError> {
    match recorded_mailbox(hc)? {
        Some(m)
            if matches!(
                m.state,
                ParticipantState::Intent | ParticipantState::Committed
            ) =>
        {
            hc.apply(&[StoreOp::Mailbox {
                generation: hc.id,
                op: MailboxOp::BeginRelease,
            }])
        }
        _ => Ok(()),
    }
}

/// What `RetireGeneration` writes for the Mailbox row with its `Vacant`
/// decision, once the runtime is proved absent: a bare `Intent` (the
/// directories were never recorded made) is `Clean` by that sealed
/// absence; a committed mailbox goes `ReleaseIntent` unless written
/// already, then `Clean` on the observation that its path is gone (it went
/// with the generation directory). The recorded path is a lookup hint: it
/// is only looked at, never removed. Nothing when the generation has no row
/// or it is clean.
pub(super) fn mailbox_clean(hc: &Hc<'_, '_>) -> Result<Vec<StoreOp>, CoordinatorError> {
    let Some(m) = recorded_mailbox(hc)? else {
        return Ok(Vec::new());
    };
    let op = |op| StoreOp::Mailbox {
        generation: hc.id,
        op,
    };
    let mut ops = Vec::new();
    let proof = match m.state {
        ParticipantState::Clean => return Ok(ops),
        ParticipantState::Intent => AbsenceProof::SealedRuntimeAbsence,
        ParticipantState::ReleaseIntent => AbsenceProof::IndependentAbsence,
        // A mailbox is never LeaseHeld or Prepared: the store refuses
        // their release by name.
        ParticipantState::Committed | ParticipantState::LeaseHeld | ParticipantState::Prepared => {
            ops.push(op(MailboxOp::BeginRelease));
            AbsenceProof::IndependentAbsence
        }
    };
    let path = PathBuf::from(std::ffi::OsString::from_vec(
        m.identity_path.as_bytes().to_vec(),
    ));
    match std::fs::symlink_metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Ok(_) => {
            return Err(CoordinatorError::MailboxLeft {
                generation: hc.id.0,
                path,
            })
        }
        Err(source) => return Err(CoordinatorError::Io { path, source }),
    }
    ops.push(op(MailboxOp::Clean(proof)));
    Ok(ops)
}

fn recorded_mailbox(hc: &Hc<'_, '_>) -> Result<Option<Mailbox>, CoordinatorError> {
    Ok(hc
        .store
        .generation_document(hc.id)
        .map_err(|e| hc.store_err(e))?
        .and_then(|d| d.mailbox))
}

/// What the coordinator shares with its mailbox threads.
#[derive(Debug, Clone, Default)]
pub(super) struct MailboxControl {
    /// The Session IDs this coordinator serves now.
    sessions: Arc<Mutex<HashSet<SessionId>>>,
    /// The host processes running for them.
    running: RunningHostProcesses,
    stop: Arc<AtomicBool>,
}

impl MailboxControl {
    /// Publishes the sessions the coordinator serves now.
    pub fn publish(&self, live: impl Iterator<Item = SessionId>) {
        if let Ok(mut sessions) = self.sessions.lock() {
            sessions.clear();
            sessions.extend(live);
        }
    }

    /// `CloseSession`'s effect on `session`'s requests (spec 3.8;
    /// Lazaret.tla: the close "terminates and reaps the session's host
    /// process before anything else"): the session is no longer served,
    /// so no host process is spawned for it, and the one running is
    /// stopped and reaped before this returns. An error: it may still run.
    pub fn close_session(&self, session: SessionId) -> std::io::Result<()> {
        self.running.close(session, || {
            if let Ok(mut sessions) = self.sessions.lock() {
                sessions.remove(&session);
            }
        })
    }

    /// Every thread ends; running host processes are stopped and reaped.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Whether `binding`'s session is live (and serving has not stopped).
    fn registered(&self, binding: &SessionBinding) -> bool {
        !self.stopped()
            && self
                .sessions
                .lock()
                .map(|s| s.contains(&binding.session_id))
                .unwrap_or(false)
    }
}

/// What the mailbox threads of one generation hold.
pub(super) struct MailboxInputs {
    pub generation_dir: PathBuf,
    pub authority: MailboxAuthority,
    pub signer: ResultSigner,
    pub setting: HostProcessSetting,
    pub prompts: Arc<PromptDesk>,
    pub steps: LoopSteps,
}

/// The coordinator's event loop, where the mailbox threads take their
/// model steps ([`EscalationSteps`]): each step is an event the loop
/// answers once it checked and took it, or refused it.
#[derive(Debug, Clone)]
pub(super) struct LoopSteps {
    events: Sender<HcEvent>,
}

impl LoopSteps {
    pub fn new(events: Sender<HcEvent>) -> Self {
        Self { events }
    }
}

impl EscalationSteps for LoopSteps {
    fn take(&self, session: SessionId, steps: &[EscalationStep]) -> Result<(), StepRefused> {
        // The service's own bound: the event's steps are never more.
        assert!(
            (1..=TOGETHER_MAX).contains(&steps.len()),
            "one to {TOGETHER_MAX} steps are taken together, not {}",
            steps.len()
        );
        let first = steps[0];
        let (reply, answer) = mpsc::sync_channel(1);
        self.events
            .send(HcEvent::Escalation {
                session,
                steps: steps.to_vec(),
                reply,
            })
            .map_err(|_| StepRefused::Unanswered { step: first })?;
        // Not bounded by a timer: a step the loop took late would be a
        // step the request never knew of. The loop answers every event it
        // takes, and drops the ones queued when it stops (an error here);
        // it never waits for a mailbox thread's step. A session's close
        // waits for the host-process registry's lock and a process's
        // stop lock, which no thread holds while it waits for an answer
        // here (the locks are taken in that order, then the sessions').
        answer
            .recv()
            .map_err(|_| StepRefused::Unanswered { step: first })?
    }
}

fn handle(path: &Path) -> Result<MailboxDir, CoordinatorError> {
    let fd: OwnedFd = rustix::fs::open(
        path,
        rustix::fs::OFlags::PATH
            | rustix::fs::OFlags::DIRECTORY
            | rustix::fs::OFlags::NOFOLLOW
            | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| CoordinatorError::Io {
        path: path.to_owned(),
        source: e.into(),
    })?;
    Ok(MailboxDir::new(fd, path.to_owned()))
}

/// Serves the generation's mailbox until `control` stops: the watcher
/// loop, on the calling thread, with one scoped thread per running
/// request.
pub(super) fn serve_mailbox(
    inputs: &MailboxInputs,
    rules: &[ResolvedExecutableRule],
    control: &MailboxControl,
) -> Result<(), CoordinatorError> {
    let mailbox = inputs.generation_dir.join(MAILBOX);
    let requests = handle(&mailbox.join("requests"))?;
    let results = handle(&mailbox.join("results"))?;
    let user: UserIds = RealSys.user_ids().map_err(|source| CoordinatorError::Io {
        path: PathBuf::from("/proc/self/status"),
        source,
    })?;
    let approvals: Vec<ApprovalRule<'_>> = rules
        .iter()
        .map(|r| ApprovalRule {
            rule: r.rule(),
            executable: r.executable(),
        })
        .collect();
    let service = || Service {
        sys: &RealSys,
        requests: &requests,
        results: &results,
        authority: &inputs.authority,
        signer: &inputs.signer,
        rules: &approvals,
        prompts: Some(&inputs.prompts),
        user: &user,
        setting: &inputs.setting,
        limits: Limits::default(),
        steps: &inputs.steps,
        running: &control.running,
    };
    let registered = |b: &SessionBinding| control.registered(b);
    let busy: Mutex<HashSet<SessionId>> = Mutex::new(HashSet::new());
    // Requests taken and not yet answered: their acknowledgements and
    // cancellations stay for their serving threads.
    let open: Mutex<HashSet<EscalationRequestId>> = Mutex::new(HashSet::new());
    let is_open = |id: EscalationRequestId| open.lock().map(|o| o.contains(&id)).unwrap_or(true);
    let mut waiting: VecDeque<Admitted> = VecDeque::new();
    let mut ledger = RequestLedger::default();
    let mut refusals: u64 = 0;
    let mut sweep = std::time::Instant::now();
    std::thread::scope(|scope| {
        // Bounded by the stop flag: every turn sleeps WATCH.
        while !control.stopped() {
            match service().take_requests(&mut ledger, &registered, &is_open) {
                Ok(pass) => {
                    for (entry, why) in pass.refused {
                        refusals += 1;
                        // Rate-limited: the sandbox decides how many.
                        if refusals <= LOGGED_REFUSALS || refusals.is_power_of_two() {
                            tracing::warn!(%entry, %why, refusals, "escalation mailbox entry refused");
                        }
                    }
                    for a in pass.admitted {
                        let session = a.open.session_binding.session_id;
                        let of_session = waiting
                            .iter()
                            .filter(|w| w.open.session_binding.session_id == session)
                            .count();
                        if waiting.len() >= WAITING_MAX || of_session >= WAITING_PER_SESSION {
                            // Answered, so its client ends.
                            if let Err(e) = service().refuse(&a) {
                                tracing::warn!(error = %e, "refusing an escalation request");
                            }
                            continue;
                        }
                        if let Ok(mut o) = open.lock() {
                            o.insert(a.open.request_id);
                        }
                        waiting.push_back(a);
                    }
                }
                Err(e) => tracing::warn!(error = %e, "reading the escalation mailbox"),
            }
            // Start every waiting request whose session has none open.
            let mut still = VecDeque::with_capacity(waiting.len());
            while let Some(a) = waiting.pop_front() {
                let session = a.open.session_binding.session_id;
                let free = busy.lock().map(|mut b| b.insert(session)).unwrap_or(false);
                if !free {
                    still.push_back(a);
                    continue;
                }
                let (service, registered, busy, open) = (&service, &registered, &busy, &open);
                scope.spawn(move || {
                    if let Err(e) = service().serve(&a, registered) {
                        tracing::error!(request = %a.open.request_id, error = %e, "serving an escalation request");
                    }
                    if let Ok(mut o) = open.lock() {
                        o.remove(&a.open.request_id);
                    }
                    if let Ok(mut b) = busy.lock() {
                        b.remove(&session);
                    }
                });
            }
            waiting = still;
            if sweep.elapsed() > SWEEP {
                sweep = std::time::Instant::now();
                if let Err(e) = service().sweep_results(&is_open) {
                    tracing::warn!(error = %e, "sweeping the escalation results");
                }
            }
            std::thread::sleep(WATCH);
        }
    });
    Ok(())
}

/// Starts the mailbox threads once the generation runs, in the
/// coordinator's thread scope, and tells them the live sessions.
pub(super) struct MailboxHost<'scope, 'env> {
    scope: &'scope std::thread::Scope<'scope, 'env>,
    rules: &'env [ResolvedExecutableRule],
    setting: HostProcessSetting,
    control: MailboxControl,
    prompts: Arc<PromptDesk>,
    steps: LoopSteps,
    started: bool,
}

impl<'scope, 'env> MailboxHost<'scope, 'env> {
    pub fn new(
        scope: &'scope std::thread::Scope<'scope, 'env>,
        rules: &'env [ResolvedExecutableRule],
        setting: HostProcessSetting,
        profile: String,
        steps: LoopSteps,
        control: MailboxControl,
    ) -> Self {
        Self {
            scope,
            rules,
            setting,
            control,
            prompts: Arc::new(PromptDesk::new(profile)),
            steps,
            started: false,
        }
    }

    /// Where interactive sessions' terminals register for prompts.
    pub fn prompts(&self) -> &Arc<PromptDesk> {
        &self.prompts
    }

    /// Serves the mailbox of the generation in `generation_dir`, whose
    /// Trust Anchor is `anchor` (once).
    pub fn start(
        &mut self,
        generation_dir: &Path,
        anchor: &lazaret_runtime::protocol::TrustAnchor,
    ) {
        if self.started {
            return;
        }
        self.started = true;
        let inputs = MailboxInputs {
            generation_dir: generation_dir.to_owned(),
            authority: MailboxAuthority::of(anchor),
            signer: anchor.result_signer(),
            setting: self.setting.clone(),
            prompts: Arc::clone(&self.prompts),
            steps: self.steps.clone(),
        };
        let control = self.control.clone();
        let rules = self.rules;
        self.scope.spawn(move || {
            if let Err(e) = serve_mailbox(&inputs, rules, &control) {
                tracing::error!(error = %e, "the escalation mailbox is not served");
            }
        });
    }
}

/// Dropped when the coordinator's serving ends, by return or by panic: the
/// threads stop, so the scope that joins them does not wait forever.
impl Drop for MailboxHost<'_, '_> {
    fn drop(&mut self) {
        self.control.stop();
    }
}

/// The host process's environment and working directory (spec 3.8 is
/// silent; a host command should see the developer's usual basics and
/// nothing else of the coordinator's): `PATH` (or a default), `HOME`,
/// `USER`, `LOGNAME`, `LANG`, `LC_ALL` and `TZ` when set, in the canonical
/// workspace; run under this `lazaret` binary's `__host-command`.
pub(super) fn host_setting(
    env: &dyn lazaret_runtime::config::HostEnvironment,
    workspace: &Path,
    lazaret: &Path,
) -> HostProcessSetting {
    let mut vars: Vec<(std::ffi::OsString, std::ffi::OsString)> = Vec::new();
    vars.push((
        "PATH".into(),
        env.var_os("PATH")
            .unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into()),
    ));
    for name in ["HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ"] {
        if let Some(value) = env.var_os(name) {
            vars.push((name.into(), value));
        }
    }
    HostProcessSetting {
        env: vars,
        cwd: workspace.to_owned(),
        supervisor: lazaret.to_owned(),
    }
}
