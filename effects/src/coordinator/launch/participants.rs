//! The participants' own launch steps (spec 3.3 "Participant ownership",
//! 3.7 "Durable encoding"; FR-12, FR-18, FR-19), each one Domain Store
//! transaction: bare intents, `CommitParticipant(Helper)`, the network's
//! snapshot and `MarkNetworkReady`, `CommitParticipant(Sandbox)`, and the
//! publication's intent, snapshot and `Publish`.
use lazaret_generated::lazaret::{Action, Roles};
use lazaret_runtime::coordinator::messages::CoordinatorCommand;
use lazaret_runtime::ownership::participant::ParticipantOp;
use lazaret_runtime::records::ids::{ContainerId, GenerationId, HostPath, Sha256Digest};
use lazaret_runtime::records::participant::{
    GitRoutingOwnership, HelperOwnership, MountIdentity, NetworkOwnership,
    NetworkReadinessEvidence, ParticipantOwnership, ParticipantRole, PublicationOwnership,
};
use lazaret_runtime::records::process::{HostProcessIdentity, PersistedHostProcessOwnership};
use lazaret_runtime::records::readiness::{
    NetworkReadinessIdentity, NETWORK_READINESS_IDENTITY_SCHEMA_ID,
};

use super::super::channel;
use super::super::host::{CoordinatorError, Hc, LaunchInputs};
use super::super::paths::DomainPaths;
use super::super::supervisor::ROUTER_DIR;
use super::reports::RunningSandbox;
use super::{decision_value, participant_role, Launching};
use crate::broker::CommittedChild;
use crate::domain_store::StoreOp;

/// RecordIntent(r): the role's bare intent row.
pub(super) fn record_intent(
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

/// A step whose effect is one operation on one of the generation's
/// participants, in one Domain Store transaction.
pub(super) fn participant_step(
    hc: &mut Hc<'_, '_>,
    action: Action,
    role: ParticipantRole,
    op: ParticipantOp,
) -> Result<(), CoordinatorError> {
    let generation = hc.id;
    hc.step(action, |hc| {
        hc.apply(&[StoreOp::Participant {
            generation,
            role,
            op,
        }])
    })
}

/// The Runtime Supervisor's identity as a committed direct edge.
pub(super) fn supervisor_edge(supervisor: &CommittedChild) -> PersistedHostProcessOwnership {
    PersistedHostProcessOwnership::Committed(HostProcessIdentity {
        identity: *supervisor.handle().identity(),
    })
}

/// The participant's current snapshot, which the step completes.
pub(super) fn snapshot(
    hc: &Hc<'_, '_>,
    generation: GenerationId,
    role: ParticipantRole,
) -> Result<Option<ParticipantOwnership>, CoordinatorError> {
    Ok(hc
        .store
        .participant(generation, role)
        .map_err(|e| hc.store_err(e))?
        .and_then(|p| p.ownership))
}

/// CommitParticipant(GitRouting), on RS's report of the router's `mount`
/// (spec 3.5; schemas `GitRoutingOwnership`): the snapshot, whose daemon
/// slot is committed, gains the router's mount point in the generation
/// directory, its host root (the workspace) and isolated root (the
/// Domain's Ignored Workspace State) and the mount, and becomes Prepared in
/// the same transaction.
pub(super) fn commit_git_routing(
    hc: &mut Hc<'_, '_>,
    l: &Launching,
    paths: &DomainPaths,
    mount: MountIdentity,
) -> Result<(), CoordinatorError> {
    let invalid = |what: &'static str| move |source| CoordinatorError::RecordValue { what, source };
    let path = |p: &std::path::Path, what: &'static str| {
        HostPath::new(p.display().to_string().into_bytes()).map_err(invalid(what))
    };
    let Some(ParticipantOwnership::GitRouting(current)) =
        snapshot(hc, l.generation, ParticipantRole::GitRouting)?
    else {
        return Err(CoordinatorError::NoSnapshot { role: "GitRouting" });
    };
    let routing = GitRoutingOwnership {
        mountpoint: Some(path(&l.dir.join(ROUTER_DIR), "router mount point")?),
        host_root: Some(path(&l.workspace, "router host root")?),
        isolated_root: Some(path(&paths.ignored_state(), "router isolated root")?),
        mount: Some(mount),
        ..current
    };
    let c = hc.model.me();
    participant_step(
        hc,
        Action::CommitParticipant {
            c,
            r: Roles::GitRouting,
        },
        ParticipantRole::GitRouting,
        ParticipantOp::Activate(ParticipantOwnership::GitRouting(routing)),
    )
}

/// CommitParticipant(Helper): the helper's snapshot gains the generation's
/// network sidecar ID and RS as its committed direct edge.
pub(super) fn commit_helper(
    hc: &mut Hc<'_, '_>,
    l: &mut Launching,
) -> Result<(), CoordinatorError> {
    let generation = l.generation;
    let sidecar = l.network.network_sidecar_id;
    let supervisor = l.committed()?;
    let Some(ParticipantOwnership::Helper(current)) =
        snapshot(hc, generation, ParticipantRole::Helper)?
    else {
        return Err(CoordinatorError::NoSnapshot { role: "Helper" });
    };
    let helper = HelperOwnership {
        network_sidecar_id: Some(sidecar),
        runtime_supervisor: supervisor_edge(supervisor),
        ..current
    };
    let c = hc.model.me();
    participant_step(
        hc,
        Action::CommitParticipant {
            c,
            r: Roles::Helper,
        },
        ParticipantRole::Helper,
        ParticipantOp::Activate(ParticipantOwnership::Helper(helper)),
    )
}

/// The Network role's snapshot: the derived policy digest, the enforcement
/// namespace RS reported and this coordinator verified, RS as committed
/// direct edge.
fn network_snapshot(l: &Launching) -> Result<NetworkOwnership, CoordinatorError> {
    let digest = Sha256Digest(l.network.policy_digest);
    let namespace = l
        .network_namespace
        .ok_or(CoordinatorError::NoSnapshot { role: "Network" })?;
    let supervisor = l.committed()?;
    Ok(NetworkOwnership {
        derived_policy_digest: Some(digest),
        namespace: Some(namespace),
        runtime_supervisor: supervisor_edge(supervisor),
        ..NetworkOwnership::default()
    })
}

/// AcquireSnapshot(Network): the network's first non-empty snapshot.
pub(super) fn acquire_network_snapshot(
    hc: &mut Hc<'_, '_>,
    l: &mut Launching,
) -> Result<(), CoordinatorError> {
    let network = network_snapshot(l)?;
    let c = hc.model.me();
    participant_step(
        hc,
        Action::AcquireSnapshot {
            c,
            r: Roles::Network,
        },
        ParticipantRole::Network,
        ParticipantOp::Acquire(ParticipantOwnership::Network(network)),
    )
}

/// MarkNetworkReady: the atomic readiness attestation, the snapshot with
/// the readiness fingerprint and evidence (spec 3.7 "Durable encoding";
/// FR-19); then RS hears that its network is ready.
pub(super) fn mark_network_ready(
    hc: &mut Hc<'_, '_>,
    l: &mut Launching,
) -> Result<(), CoordinatorError> {
    let generation = l.generation;
    let mut network = network_snapshot(l)?;
    let identity = NetworkReadinessIdentity {
        schema_id: NETWORK_READINESS_IDENTITY_SCHEMA_ID.to_owned(),
        domain_id: l.network.domain_id,
        generation_id: generation,
        configuration_fingerprint: l.network.configuration_fingerprint,
        network_sidecar_id: l.network.network_sidecar_id,
        derived_policy_digest: Sha256Digest(l.network.policy_digest),
        enforcement_namespace: network
            .namespace
            .ok_or(CoordinatorError::NoSnapshot { role: "Network" })?,
    };
    let fingerprint = identity
        .fingerprint()
        .map_err(CoordinatorError::ReadinessFingerprint)?;
    network.readiness_fingerprint = Some(fingerprint);
    network.readiness_evidence = Some(NetworkReadinessEvidence {
        domain_id: l.network.domain_id,
        generation_id: generation,
        network_sidecar_id: l.network.network_sidecar_id,
        readiness_fingerprint: fingerprint,
    });
    let c = hc.model.me();
    participant_step(
        hc,
        Action::MarkNetworkReady { c },
        ParticipantRole::Network,
        ParticipantOp::Activate(ParticipantOwnership::Network(network)),
    )?;
    l.network_answer_due = false;
    channel::send(
        l.channel()?,
        "supervisor",
        &CoordinatorCommand::NetworkReady,
    )?;
    Ok(())
}

/// CommitParticipant(Sandbox): the snapshot gains the container, runsc root
/// and bundle digest, and this coordinator enters it as the committed
/// direct edge (schemas.md "Participant ownership"), in one transaction
/// that also activates the participant.
pub(super) fn commit_sandbox(
    hc: &mut Hc<'_, '_>,
    generation: GenerationId,
    container_id: &str,
    sandbox: &RunningSandbox,
) -> Result<(), CoordinatorError> {
    let invalid = |what: &'static str| move |source| CoordinatorError::RecordValue { what, source };
    let Some(ParticipantOwnership::Sandbox(mut current)) =
        snapshot(hc, generation, ParticipantRole::Sandbox)?
    else {
        return Err(CoordinatorError::NoSnapshot { role: "Sandbox" });
    };
    current.container_id =
        Some(ContainerId::new(container_id.to_owned()).map_err(invalid("container id"))?);
    current.runtime_root = Some(
        HostPath::new(sandbox.runsc_root.display().to_string().into_bytes())
            .map_err(invalid("runsc root"))?,
    );
    current.bundle_digest = Some(Sha256Digest(sandbox.bundle_digest));
    // The direct existing-process edge enters Committed directly.
    current.host_coordinator =
        PersistedHostProcessOwnership::Committed(HostProcessIdentity { identity: hc.own });
    let c = hc.model.me();
    participant_step(
        hc,
        Action::CommitParticipant {
            c,
            r: Roles::Sandbox,
        },
        ParticipantRole::Sandbox,
        ParticipantOp::Activate(ParticipantOwnership::Sandbox(current)),
    )
}

/// A path as the publication records it.
fn publication_path(p: &std::path::Path) -> Result<HostPath, CoordinatorError> {
    HostPath::new(p.display().to_string().into_bytes()).map_err(|source| {
        CoordinatorError::RecordValue {
            what: "publication path",
            source,
        }
    })
}

/// RecordIntent(Publication).
pub(super) fn record_publication_intent(hc: &mut Hc<'_, '_>) -> Result<(), CoordinatorError> {
    let generation = hc.id;
    record_intent(hc, generation, Roles::Publication)
}

/// AcquireSnapshot(Publication): the socket clients join on is recorded.
pub(super) fn acquire_publication_snapshot(
    hc: &mut Hc<'_, '_>,
    launch: &LaunchInputs<'_>,
) -> Result<(), CoordinatorError> {
    let socket_path = publication_path(&launch.paths.socket())?;
    let c = hc.model.me();
    participant_step(
        hc,
        Action::AcquireSnapshot {
            c,
            r: Roles::Publication,
        },
        ParticipantRole::Publication,
        ParticipantOp::Acquire(ParticipantOwnership::Publication(PublicationOwnership {
            socket_path: Some(socket_path),
            identity_path: None,
        })),
    )
}

/// Publish: the publication is complete and the generation published, in
/// one transaction.
pub(super) fn publish(
    hc: &mut Hc<'_, '_>,
    launch: &LaunchInputs<'_>,
) -> Result<(), CoordinatorError> {
    let generation = hc.id;
    let socket_path = publication_path(&launch.paths.socket())?;
    // Until the TLS protocol exists, what clients rely on to reach this face
    // and nobody else's is the 0700 runtime directory holding the socket
    // (SR-10); it stands as the publication identity.
    let identity_path = publication_path(&launch.paths.runtime)?;
    let c = hc.model.me();
    hc.step(Action::Publish { c }, |hc| {
        hc.apply(&[
            StoreOp::Participant {
                generation,
                role: ParticipantRole::Publication,
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
