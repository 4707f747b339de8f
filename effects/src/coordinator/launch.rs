//! Launch and publication of a generation (spec 3.3, 3.6, 3.7; FR-12): the
//! model steps `StartGeneration`, `RecordIntent`/`StageProcess`/
//! `CommitProcess` of the Runtime Supervisor, of the connectivity helper
//! (then `CommitParticipant(Helper)`), the Network role's `RecordIntent`,
//! `AcquireSnapshot` and `MarkNetworkReady`, the attached runsc and
//! `CommitParticipant(Sandbox)`, then the publication's `RecordIntent`,
//! `AcquireSnapshot` and `Publish`.
//! Each is checked against the model before its durable write and recorded
//! after it.
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use lazaret_generated::lazaret::{Action, ProcSlots, Roles};
use lazaret_runtime::coordinator::messages::{
    CoordinatorCommand, ObjectId, SupervisorMessage, SupervisorPlan,
};
use lazaret_runtime::ownership::participant::ParticipantOp;
use lazaret_runtime::records::domain::{Domain, Generation};
use lazaret_runtime::records::ids::{
    ConfigurationFingerprint, ContainerId, DomainId, GenerationId, HostPath, ModelValue,
    NetworkSidecarId, ProfileName, SandboxId, Sha256Digest,
};
use lazaret_runtime::records::participant::{
    HelperOwnership, NamespaceIdentity, NetworkOwnership, NetworkReadinessEvidence,
    ParticipantOwnership, ParticipantRole, PublicationOwnership,
};
use lazaret_runtime::records::process::{
    HostProcessIdentity, HostProcessOwnershipSlot, PersistedHostProcessOwnership,
    StagedProcessOwnership,
};
use lazaret_runtime::records::readiness::{
    NetworkReadinessIdentity, NETWORK_READINESS_IDENTITY_SCHEMA_ID,
};

use super::absence::observe_slot;
use super::channel;
use super::host::{micros, CoordinatorError, Hc, HcEvent, LaunchInputs};
use super::model_ledger::ModelLedger;
use super::paths::remove_generation_dir;
use super::session::random_bytes;
use super::supervisor::{INIT_NAME, PROBE_NAME};
use super::SUPERVISOR_SUBCOMMAND;
use crate::broker::sys::TargetCommand;
use crate::broker::CommittedChild;
use crate::confined::RealSys;
use crate::domain_store::{accept_staged_ownership, SlotTarget, StoreLedger, StoreOp};
use crate::image::reference::ImageRef;
use crate::image::resolve;
use crate::image::store::BlobStore;
use crate::network::policy_fd::seal_policy;
use crate::prepare::{prepare, RealPrepareHost};
use crate::process_identity::real::RealProcessSys;
use crate::process_identity::{ChildState, ProcessHandle, Signal};
use crate::runsc_exec::GUEST_TOOL_NAME;
use crate::userns::{map_and_verify, plan_maps, Identity, RealHost};
use lazaret_runtime::coordinator::host_model::DurableView;

/// Why this coordinator's runtime ended, once it has (RS reported a
/// failure or vanished): every session that ends afterwards reports it
/// to its terminal instead of a bare status (spec 3.7 helper loss).
pub(super) static RUNTIME_LOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// How long RS may take for each launch step.
const SUPERVISOR_TIMEOUT: Duration = Duration::from_secs(30);
/// How long RS may take to stop the sandbox and exit.
pub(super) const SUPERVISOR_EXIT: Duration = Duration::from_secs(20);

/// The running generation.
pub(super) struct LaunchedGeneration {
    pub id: GenerationId,
    pub dir: PathBuf,
    pub supervisor: CommittedChild,
    pub to_supervisor: UnixStream,
    pub container_id: String,
    pub runsc_root: PathBuf,
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

/// StartGeneration, then the launch; on success the generation runs with
/// its Sandbox participant committed (not yet published).
pub(super) fn launch_generation(
    hc: &mut Hc<'_, '_>,
    launch: &LaunchInputs<'_>,
    events_tx: &Sender<HcEvent>,
    timings: &mut Vec<(String, u64)>,
) -> Result<LaunchedGeneration, CoordinatorError> {
    let _span = tracing::info_span!("LaunchGeneration").entered();
    let mut phase_timer = Instant::now();
    let mut mark = |name: &str, timings: &mut Vec<(String, u64)>| {
        timings.push((name.to_owned(), micros(phase_timer)));
        phase_timer = Instant::now();
    };
    let reference =
        ImageRef::parse(&launch.image).map_err(|source| CoordinatorError::ImageReference {
            reference: launch.image.clone(),
            source,
        })?;
    let blobs_dir = launch.storage_root.join("blobs");
    let blobs = BlobStore::open(&blobs_dir).map_err(|source| CoordinatorError::BlobStore {
        path: blobs_dir.clone(),
        source,
    })?;
    let image = resolve(&reference, &blobs, &mut |_| {}).map_err(|source| {
        CoordinatorError::ImageResolve {
            reference: launch.image.clone(),
            source,
        }
    })?;
    mark("resolve_image", timings);
    let me = Identity::current(&mut RealHost).map_err(CoordinatorError::Userns)?;
    let maps = plan_maps(&mut RealHost, &me).map_err(CoordinatorError::Userns)?;
    let lower = prepare(
        &mut RealPrepareHost::new(maps.clone()),
        &launch.storage_root,
        &blobs,
        &image,
        &maps,
    )
    .map_err(|source| CoordinatorError::Prepare {
        reference: launch.image.clone(),
        source: Box::new(source),
    })?;
    mark("prepare_lower", timings);
    // Spec 3.2: the workspace path goes to runsc (through RS) only after it
    // was reopened through its plan and still names the loaded object; RS
    // checks the identity again at the handoff itself.
    launch
        .workspace
        .revalidate(&RealSys)
        .map_err(CoordinatorError::Workspace)?;
    let workspace_object = {
        let id = launch.workspace.stat().identity;
        ObjectId {
            dev_major: id.dev_major,
            dev_minor: id.dev_minor,
            ino: id.ino,
        }
    };

    let id = hc.id;
    let running = launch.running;
    let invalid = |what: &'static str| move |source| CoordinatorError::RecordValue { what, source };
    let c = hc.model.me();
    let network_sidecar_id = NetworkSidecarId(random_bytes().map_err(CoordinatorError::Boot)?);
    let generation = Generation {
        domain_id: DomainId(running.domain_id),
        generation_id: id,
        configuration_fingerprint: ConfigurationFingerprint(running.fingerprint),
        coordinator_id: hc.coordinator_id,
        network_sidecar_id,
        sandbox_id: SandboxId(random_bytes().map_err(CoordinatorError::Boot)?),
        durable_decision: decision_value("Starting")?,
    };
    let domain = Domain {
        domain_id: DomainId(running.domain_id),
        profile_name: ProfileName::new(launch.profile.clone()).map_err(invalid("profile"))?,
        canonical_workspace: HostPath::new(running.workspace.clone().into_bytes())
            .map_err(invalid("workspace"))?,
    };
    hc.step(Action::StartGeneration { c }, |hc| {
        hc.apply(&[
            StoreOp::PutDomain(domain),
            StoreOp::InsertGeneration(generation),
        ])
    })?;
    mark("store_generation", timings);

    let dir = launch.paths.generation(id.0);
    let init_dir = dir.join("sbin");
    let io_err = |path: &Path| {
        let path = path.to_owned();
        move |source| CoordinatorError::Io { path, source }
    };
    std::fs::create_dir_all(&init_dir).map_err(io_err(&init_dir))?;
    for (name, bytes) in [
        (INIT_NAME, launch.binaries.init),
        (GUEST_TOOL_NAME, launch.binaries.guest),
        (PROBE_NAME, launch.binaries.probe),
    ] {
        let path = init_dir.join(name);
        std::fs::write(&path, bytes)
            .and_then(|()| std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o555)))
            .map_err(io_err(&path))?;
    }

    // The lifetime channel: a socketpair whose RS end RS inherits.
    let (hc_end, rs_end) = UnixStream::pair().map_err(io_err(&dir))?;
    let rs_fd: OwnedFd = rs_end.into();
    // Spec 3.7 "Policy transport": the derived policy's canonical bytes in
    // a write-sealed memfd RS inherits; its digest goes in the plan.
    let policy_fd = seal_policy(launch.policy).map_err(CoordinatorError::SealPolicy)?;
    let policy_digest = launch.policy.digest().0;
    let store_ledger = StoreLedger::new(
        hc.store,
        SlotTarget::Participant {
            generation: id,
            slot: HostProcessOwnershipSlot::SandboxRuntimeSupervisor,
        },
    )
    .map_err(|e| hc.store_err(e))?;
    let target = TargetCommand {
        argv: vec![
            launch.program.into(),
            SUPERVISOR_SUBCOMMAND.into(),
            "--channel-fd".into(),
            rs_fd.as_raw_fd().to_string().into(),
            "--policy-fd".into(),
            policy_fd.as_raw_fd().to_string().into(),
        ],
        inherit: vec![rs_fd.as_raw_fd(), policy_fd.as_raw_fd()],
    };
    let observer = hc.observer();
    let mut ledger = ModelLedger::new(
        store_ledger,
        RealProcessSys,
        &mut hc.model,
        observer,
        Some(Roles::Sandbox),
        ProcSlots::SandboxRuntimeSupervisor,
    );
    let acquired = hc.broker.acquire(&target, &mut ledger);
    drop((rs_fd, policy_fd));
    let child = acquired?;
    mark("spawn_supervisor", timings);
    let container_id = format!("lazaret-{}-{}", hex_prefix(&running.domain_id), id.0);
    let plan = SupervisorPlan {
        domain_id: running.domain_id,
        generation_id: id.0,
        coordinator_id: hc.coordinator_id.0,
        container_id: container_id.clone(),
        generation_dir: dir.display().to_string(),
        rootfs: lower.rootfs.display().to_string(),
        workspace: running.workspace.clone(),
        workspace_object,
        init: init_dir.display().to_string(),
        hostname: "lazaret".to_owned(),
        runsc_dcache: launch.runsc_dcache,
        owner_restore_marker: launch.paths.owner_restore_marker().display().to_string(),
        policy_digest,
        env: vec![
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_owned(),
            "HOME=/root".to_owned(),
            "TERM=xterm".to_owned(),
        ],
    };
    let mut rs = hc_end;
    // From here on a failure ends RS exactly: closing the lifetime channel
    // makes it stop, and its retained handle is reaped.
    let result = (|| {
        rs.set_read_timeout(Some(SUPERVISOR_TIMEOUT))
            .map_err(io_err(&dir))?;
        channel::send(
            &mut rs,
            "supervisor",
            &CoordinatorCommand::Plan(Box::new(plan)),
        )?;
        let verified = match channel::receive::<SupervisorMessage>(&mut rs, "supervisor")? {
            SupervisorMessage::UserNamespace { pid } => i32::try_from(pid)
                .map_err(|_| CoordinatorError::UsernsPid { pid })
                .and_then(|pid| {
                    map_and_verify(&mut RealHost, pid, &maps).map_err(CoordinatorError::Userns)
                }),
            other => Err(CoordinatorError::SupervisorProtocol {
                expected: "UserNamespace",
                got: format!("{other:?}"),
            }),
        };
        if let Err(e) = verified {
            let _ = channel::send(
                &mut rs,
                "supervisor",
                &CoordinatorCommand::Refused(e.to_string()),
            );
            return Err(e);
        }
        channel::send(&mut rs, "supervisor", &CoordinatorCommand::MapsVerified)?;
        Ok(())
    })();
    if let Err(e) = result {
        drop(rs);
        reap_supervisor(hc, child.handle());
        let _ = remove_generation_dir(&dir);
        return Err(e);
    }
    mark("verify_userns", timings);
    let store_ledger = StoreLedger::new(
        hc.store,
        SlotTarget::Participant {
            generation: id,
            slot: HostProcessOwnershipSlot::SandboxRuntimeSupervisor,
        },
    )
    .map_err(|e| hc.store_err(e))?;
    let observer = hc.observer();
    let mut ledger = ModelLedger::new(
        store_ledger,
        RealProcessSys,
        &mut hc.model,
        observer,
        None,
        ProcSlots::SandboxRuntimeSupervisor,
    );
    let committed = hc
        .broker
        .commit(child, &mut ledger, |sys, handle| match handle.peek(sys) {
            Ok(ChildState::Running) => Ok(()),
            other => Err(format!("{other:?}")),
        });
    let supervisor = match committed {
        Ok(s) => s,
        Err(f) => {
            drop(rs);
            reap_supervisor(hc, f.child.handle());
            let _ = remove_generation_dir(&dir);
            return Err(CoordinatorError::SupervisorReadiness(f.error));
        }
    };
    let network = NetworkInputs {
        domain_id: DomainId(running.domain_id),
        configuration_fingerprint: ConfigurationFingerprint(running.fingerprint),
        network_sidecar_id,
        policy_digest,
    };
    let running_sandbox = match serve_supervisor_launch(hc, id, &mut rs, &supervisor, &network) {
        Ok(r) => r,
        Err(e) => {
            drop(rs);
            reap_supervisor(hc, supervisor.handle());
            let _ = remove_generation_dir(&dir);
            return Err(e);
        }
    };
    mark("runsc_run_ready", timings);
    let commit = commit_sandbox(hc, id, &container_id, &running_sandbox)
        .and_then(|()| rs.set_read_timeout(None).map_err(io_err(&dir)))
        .and_then(|()| rs.try_clone().map_err(io_err(&dir)));
    let to_supervisor = match commit {
        Ok(t) => t,
        Err(e) => {
            drop(rs);
            reap_supervisor(hc, supervisor.handle());
            let _ = remove_generation_dir(&dir);
            return Err(e);
        }
    };
    mark("commit_sandbox", timings);
    let lost = events_tx.clone();
    std::thread::spawn(move || {
        let why = match channel::receive::<SupervisorMessage>(&mut rs, "supervisor") {
            Ok(SupervisorMessage::Failed(why)) => why,
            Ok(other) => format!("unexpected {other:?}"),
            Err(e) => e.to_string(),
        };
        let _ = RUNTIME_LOST.set(why.clone());
        let _ = lost.send(HcEvent::SupervisorLost(why));
    });
    Ok(LaunchedGeneration {
        id,
        dir,
        supervisor,
        to_supervisor,
        container_id,
        runsc_root: running_sandbox.runsc_root,
    })
}

fn hex_prefix(bytes: &[u8; 32]) -> String {
    bytes[..6].iter().map(|b| format!("{b:02x}")).collect()
}

/// What RS reports once the sandbox runs.
struct RunningSandbox {
    runsc_root: PathBuf,
    bundle_digest: [u8; 32],
}

/// What the Network and Helper participants are bound to (spec 3.7
/// "Durable encoding").
struct NetworkInputs {
    domain_id: DomainId,
    configuration_fingerprint: ConfigurationFingerprint,
    network_sidecar_id: NetworkSidecarId,
    policy_digest: [u8; 32],
}

/// The model's process slot of an RS-launched child's staged message.
fn rs_launched_slot(slot: HostProcessOwnershipSlot) -> Result<ProcSlots, String> {
    match slot {
        HostProcessOwnershipSlot::HelperConnectivityHelper => {
            Ok(ProcSlots::HelperConnectivityHelper)
        }
        HostProcessOwnershipSlot::SandboxAttachedRunsc => Ok(ProcSlots::SandboxAttachedRunsc),
        other => Err(format!(
            "slot {other:?} is not launched by the Runtime Supervisor"
        )),
    }
}

/// HC's half of RS's launch (spec 3.3 steps 1, 6, 9 for each RS-launched
/// child; spec 3.7 readiness), until the sandbox runs: the connectivity
/// helper's intent, staging and commit (then CommitParticipant(Helper)),
/// the network's readiness, then the attached runsc's staging and commit.
fn serve_supervisor_launch(
    hc: &mut Hc<'_, '_>,
    generation: GenerationId,
    rs: &mut UnixStream,
    supervisor: &CommittedChild,
    network: &NetworkInputs,
) -> Result<RunningSandbox, CoordinatorError> {
    let c = hc.model.me();
    // Bounded: a launch has two children of three messages each, the
    // network report and the running report.
    for _ in 0..16 {
        match channel::receive::<SupervisorMessage>(rs, "supervisor")? {
            SupervisorMessage::ConfirmIntent(slot) => {
                let reply = match rs_launched_slot(slot) {
                    // The helper's role records bare intent here; the
                    // attached runsc's Sandbox role recorded it with RS.
                    Ok(ProcSlots::HelperConnectivityHelper) => {
                        record_intent(hc, generation, Roles::Helper)?;
                        CoordinatorCommand::IntentConfirmed
                    }
                    Ok(_) => CoordinatorCommand::IntentConfirmed,
                    Err(e) => CoordinatorCommand::Refused(e),
                };
                channel::send(rs, "supervisor", &reply)?;
            }
            SupervisorMessage::Staged(bytes) => {
                let staged = StagedProcessOwnership::decode(&bytes).map_err(|e| e.to_string());
                let answer = staged.and_then(|staged| {
                    let ps = rs_launched_slot(staged.slot)?;
                    hc.model
                        .check(&Action::StageProcess { c, ps })
                        .map_err(|e| e.to_string())
                        .and_then(|()| {
                            accept_staged_ownership(hc.store, &bytes).map_err(|e| e.to_string())
                        })
                        .map(|ack| (ps, staged.identity, ack))
                });
                let reply = match answer {
                    Ok((ps, identity, ack)) => {
                        let observed = observe(hc)?;
                        let processes = observe_slot(&RealProcessSys, ps, &identity)?;
                        hc.model
                            .take_with_processes(
                                Action::StageProcess { c, ps },
                                observed.as_ref(),
                                processes,
                            )
                            .map_err(CoordinatorError::Model)?;
                        CoordinatorCommand::Ack(ack)
                    }
                    Err(e) => CoordinatorCommand::Refused(e),
                };
                channel::send(rs, "supervisor", &reply)?;
            }
            SupervisorMessage::Committed(bytes) => {
                let staged = StagedProcessOwnership::decode(&bytes).map_err(|e| e.to_string());
                let answer = staged.and_then(|staged| {
                    let ps = rs_launched_slot(staged.slot)?;
                    hc.model
                        .check(&Action::CommitProcess { c, ps })
                        .map_err(|e| e.to_string())?;
                    hc.store
                        .apply(&[StoreOp::CommitProcess {
                            target: SlotTarget::Participant {
                                generation,
                                slot: staged.slot,
                            },
                            identity: staged.identity,
                        }])
                        .map_err(|e| e.to_string())?;
                    Ok((ps, staged.identity))
                });
                let reply = match answer {
                    Ok((ps, identity)) => {
                        let observed = observe(hc)?;
                        let processes = observe_slot(&RealProcessSys, ps, &identity)?;
                        hc.model
                            .take_with_processes(
                                Action::CommitProcess { c, ps },
                                observed.as_ref(),
                                processes,
                            )
                            .map_err(CoordinatorError::Model)?;
                        if ps == ProcSlots::HelperConnectivityHelper {
                            commit_helper(hc, generation, supervisor, network)?;
                        }
                        CoordinatorCommand::IntentConfirmed
                    }
                    Err(e) => CoordinatorCommand::Refused(e),
                };
                channel::send(rs, "supervisor", &reply)?;
            }
            SupervisorMessage::NetworkInstalled {
                namespace,
                policy_digest,
            } => {
                let ready = mark_network_ready(
                    hc,
                    generation,
                    supervisor,
                    network,
                    namespace,
                    policy_digest,
                );
                let reply = match &ready {
                    Ok(()) => CoordinatorCommand::NetworkReady,
                    Err(e) => CoordinatorCommand::Refused(e.to_string()),
                };
                channel::send(rs, "supervisor", &reply)?;
                ready?;
            }
            SupervisorMessage::SandboxRunning {
                runsc_root,
                bundle_digest,
                ..
            } => {
                return Ok(RunningSandbox {
                    runsc_root: PathBuf::from(runsc_root),
                    bundle_digest,
                })
            }
            SupervisorMessage::Failed(why) => return Err(CoordinatorError::SupervisorFailed(why)),
            SupervisorMessage::UserNamespace { .. } => {
                return Err(CoordinatorError::SupervisorProtocol {
                    expected: "a launch message",
                    got: "a second user namespace request".to_owned(),
                })
            }
        }
    }
    Err(CoordinatorError::SupervisorProtocol {
        expected: "SandboxRunning",
        got: "more launch messages than a launch has".to_owned(),
    })
}

/// This generation's record read back after a step's effect.
fn observe(hc: &Hc<'_, '_>) -> Result<Option<DurableView>, CoordinatorError> {
    hc.observer()
        .read()
        .map_err(|source| CoordinatorError::Observe {
            generation: hc.id.0,
            source,
        })
}

/// RecordIntent(r): the role's bare intent row.
fn record_intent(
    hc: &mut Hc<'_, '_>,
    generation: GenerationId,
    r: Roles,
) -> Result<(), CoordinatorError> {
    let c = hc.model.me();
    let role = participant_role(r);
    hc.step(Action::RecordIntent { c, r }, |hc| {
        hc.apply(&[StoreOp::InsertParticipantIntent { generation, role }])
    })
}

/// The Runtime Supervisor's identity as a committed direct edge.
fn supervisor_edge(supervisor: &CommittedChild) -> PersistedHostProcessOwnership {
    PersistedHostProcessOwnership::Committed(HostProcessIdentity {
        identity: *supervisor.handle().identity(),
    })
}

/// CommitParticipant(Helper): the helper's snapshot gains the generation's
/// network sidecar ID and RS as its committed direct edge.
fn commit_helper(
    hc: &mut Hc<'_, '_>,
    generation: GenerationId,
    supervisor: &CommittedChild,
    network: &NetworkInputs,
) -> Result<(), CoordinatorError> {
    let c = hc.model.me();
    let current = hc
        .store
        .participant(generation, ParticipantRole::Helper)
        .map_err(|e| hc.store_err(e))?
        .and_then(|p| p.ownership);
    let Some(ParticipantOwnership::Helper(snapshot)) = current else {
        return Err(CoordinatorError::NoSnapshot { role: "Helper" });
    };
    let snapshot = HelperOwnership {
        network_sidecar_id: Some(network.network_sidecar_id),
        runtime_supervisor: supervisor_edge(supervisor),
        ..snapshot
    };
    hc.step(
        Action::CommitParticipant {
            c,
            r: Roles::Helper,
        },
        |hc| {
            hc.apply(&[StoreOp::Participant {
                generation,
                role: ParticipantRole::Helper,
                op: ParticipantOp::Activate(ParticipantOwnership::Helper(snapshot)),
            }])
        },
    )
}

/// Spec 3.7 "Independent identity": the enforcement namespace of the
/// Runtime Supervisor as HC reads it, through the PID of the child it
/// still holds unreaped (so the PID names RS).
fn supervisor_network_namespace(
    supervisor: &CommittedChild,
) -> Result<NamespaceIdentity, CoordinatorError> {
    let pid = supervisor.handle().identity().host_pid;
    let path = PathBuf::from(format!("/proc/{}/ns/net", pid.0));
    let st = rustix::fs::stat(&path).map_err(|e| CoordinatorError::Io {
        path: path.clone(),
        source: e.into(),
    })?;
    Ok(NamespaceIdentity {
        device: st.st_dev,
        inode: st.st_ino,
    })
}

/// The Network role: RecordIntent, AcquireSnapshot (derived policy digest,
/// enforcement namespace, RS as committed direct edge), and the atomic
/// MarkNetworkReady with the readiness fingerprint and evidence (spec 3.7
/// "Durable encoding"; FR-19). Refused unless RS installed exactly the
/// policy HC derived, in the namespace HC reads itself.
fn mark_network_ready(
    hc: &mut Hc<'_, '_>,
    generation: GenerationId,
    supervisor: &CommittedChild,
    network: &NetworkInputs,
    reported: NamespaceIdentity,
    policy_digest: [u8; 32],
) -> Result<(), CoordinatorError> {
    if policy_digest != network.policy_digest {
        return Err(CoordinatorError::PolicyDigestMismatch {
            installed: hex::encode(policy_digest),
            derived: hex::encode(network.policy_digest),
        });
    }
    let namespace = supervisor_network_namespace(supervisor)?;
    if namespace != reported {
        return Err(CoordinatorError::NamespaceMismatch {
            reported,
            actual: namespace,
        });
    }
    let c = hc.model.me();
    record_intent(hc, generation, Roles::Network)?;
    let mut snapshot = NetworkOwnership {
        derived_policy_digest: Some(Sha256Digest(policy_digest)),
        namespace: Some(namespace),
        runtime_supervisor: supervisor_edge(supervisor),
        ..NetworkOwnership::default()
    };
    hc.step(
        Action::AcquireSnapshot {
            c,
            r: Roles::Network,
        },
        |hc| {
            hc.apply(&[StoreOp::Participant {
                generation,
                role: ParticipantRole::Network,
                op: ParticipantOp::Acquire(ParticipantOwnership::Network(snapshot.clone())),
            }])
        },
    )?;
    let identity = NetworkReadinessIdentity {
        schema_id: NETWORK_READINESS_IDENTITY_SCHEMA_ID.to_owned(),
        domain_id: network.domain_id,
        generation_id: generation,
        configuration_fingerprint: network.configuration_fingerprint,
        network_sidecar_id: network.network_sidecar_id,
        derived_policy_digest: Sha256Digest(policy_digest),
        enforcement_namespace: namespace,
    };
    let fingerprint = identity
        .fingerprint()
        .map_err(CoordinatorError::ReadinessFingerprint)?;
    snapshot.readiness_fingerprint = Some(fingerprint);
    snapshot.readiness_evidence = Some(NetworkReadinessEvidence {
        domain_id: network.domain_id,
        generation_id: generation,
        network_sidecar_id: network.network_sidecar_id,
        readiness_fingerprint: fingerprint,
    });
    hc.step(Action::MarkNetworkReady { c }, |hc| {
        hc.apply(&[StoreOp::Participant {
            generation,
            role: ParticipantRole::Network,
            op: ParticipantOp::Activate(ParticipantOwnership::Network(snapshot)),
        }])
    })
}

/// CommitParticipant(Sandbox): the snapshot gains the container, runsc root
/// and bundle digest, and this coordinator enters it as the committed
/// direct edge (schemas.md "Participant ownership"), in one transaction
/// that also activates the participant.
fn commit_sandbox(
    hc: &mut Hc<'_, '_>,
    generation: GenerationId,
    container_id: &str,
    sandbox: &RunningSandbox,
) -> Result<(), CoordinatorError> {
    let c = hc.model.me();
    let invalid = |what: &'static str| move |source| CoordinatorError::RecordValue { what, source };
    let own = hc.own;
    let current = hc
        .store
        .participant(generation, ParticipantRole::Sandbox)
        .map_err(|e| hc.store_err(e))?
        .and_then(|p| p.ownership);
    let Some(ParticipantOwnership::Sandbox(mut snapshot)) = current else {
        return Err(CoordinatorError::NoSnapshot { role: "Sandbox" });
    };
    snapshot.container_id =
        Some(ContainerId::new(container_id.to_owned()).map_err(invalid("container id"))?);
    snapshot.runtime_root = Some(
        HostPath::new(sandbox.runsc_root.display().to_string().into_bytes())
            .map_err(invalid("runsc root"))?,
    );
    snapshot.bundle_digest = Some(Sha256Digest(sandbox.bundle_digest));
    // The direct existing-process edge enters Committed directly.
    snapshot.host_coordinator =
        PersistedHostProcessOwnership::Committed(HostProcessIdentity { identity: own });
    hc.step(
        Action::CommitParticipant {
            c,
            r: Roles::Sandbox,
        },
        |hc| {
            hc.apply(&[StoreOp::Participant {
                generation,
                role: ParticipantRole::Sandbox,
                op: ParticipantOp::Activate(ParticipantOwnership::Sandbox(snapshot)),
            }])
        },
    )
}

/// The publication's RecordIntent, AcquireSnapshot and Publish: the socket
/// clients join on is recorded, then the generation is published.
pub(super) fn publish(
    hc: &mut Hc<'_, '_>,
    socket: &Path,
    runtime_dir: &Path,
) -> Result<(), CoordinatorError> {
    let c = hc.model.me();
    let generation = hc.id;
    let role = ParticipantRole::Publication;
    let path = |p: &Path| {
        HostPath::new(p.display().to_string().into_bytes()).map_err(|source| {
            CoordinatorError::RecordValue {
                what: "publication path",
                source,
            }
        })
    };
    let socket_path = path(socket)?;
    // Until the TLS protocol exists, what clients rely on to reach this face
    // and nobody else's is the 0700 runtime directory holding the socket
    // (SR-10); it stands as the publication identity.
    let identity_path = path(runtime_dir)?;
    hc.step(
        Action::RecordIntent {
            c,
            r: Roles::Publication,
        },
        |hc| hc.apply(&[StoreOp::InsertParticipantIntent { generation, role }]),
    )?;
    hc.step(
        Action::AcquireSnapshot {
            c,
            r: Roles::Publication,
        },
        |hc| {
            hc.apply(&[StoreOp::Participant {
                generation,
                role,
                op: ParticipantOp::Acquire(ParticipantOwnership::Publication(
                    PublicationOwnership {
                        socket_path: Some(socket_path.clone()),
                        identity_path: None,
                    },
                )),
            }])
        },
    )?;
    hc.step(Action::Publish { c }, |hc| {
        hc.apply(&[
            StoreOp::Participant {
                generation,
                role,
                op: ParticipantOp::Activate(ParticipantOwnership::Publication(
                    PublicationOwnership {
                        socket_path: Some(socket_path),
                        identity_path: Some(identity_path),
                    },
                )),
            },
            StoreOp::SetDurableDecision {
                generation,
                decision: decision_value("Published")?,
            },
        ])
    })
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
