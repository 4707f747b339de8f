//! The serviceable role/state table of schemas.md "Participant ownership":
//! an active snapshot holds every role-required physical evidence and current
//! committed ownership in every required process slot.
use super::slot::is_current_committed;
use super::{OwnershipError, RuleContext};
use crate::records::participant::{LeaseState, NetworkOwnership, ParticipantOwnership};
use crate::records::process::PersistedHostProcessOwnership;
use crate::records::readiness::{NetworkReadinessIdentity, NETWORK_READINESS_IDENTITY_SCHEMA_ID};

struct Check<'c> {
    role: &'static str,
    ctx: &'c RuleContext<'c>,
}

impl Check<'_> {
    fn present(&self, field: &'static str, present: bool) -> Result<(), OwnershipError> {
        if present {
            Ok(())
        } else {
            Err(OwnershipError::MissingEvidence {
                role: self.role.to_owned(),
                field,
            })
        }
    }

    fn committed(
        &self,
        field: &'static str,
        phase: &PersistedHostProcessOwnership,
    ) -> Result<(), OwnershipError> {
        if is_current_committed(phase, self.ctx.current_boot) {
            Ok(())
        } else {
            Err(OwnershipError::NotCommitted {
                role: self.role.to_owned(),
                field,
                phase: phase.phase_name(),
            })
        }
    }
}

/// Checks that `snapshot` may hold its role's active state.
pub fn check_active(
    snapshot: &ParticipantOwnership,
    ctx: &RuleContext<'_>,
) -> Result<(), OwnershipError> {
    match snapshot {
        ParticipantOwnership::PreparedLower(s) => {
            let c = Check {
                role: "PreparedLower",
                ctx,
            };
            c.present("prepared_artifact_id", s.prepared_artifact_id.is_some())?;
            c.present("source_identity", s.source_identity.is_some())?;
            c.present("lease_state", s.lease_state == Some(LeaseState::LeaseHeld))?;
            c.present("path", s.path.is_some())?;
            c.present("device", s.device.is_some())?;
            c.present("inode", s.inode.is_some())
        }
        ParticipantOwnership::StateAnchor(s) => {
            let c = Check {
                role: "StateAnchor",
                ctx,
            };
            c.present("lower_artifact_id", s.lower_artifact_id.is_some())?;
            c.present("upper_path", s.upper_path.is_some())?;
            c.present("work_path", s.work_path.is_some())?;
            c.present("merged_path", s.merged_path.is_some())?;
            // A profile with no persistent path has none to mount.
            c.present("mounts", s.mounts.is_some())?;
            c.committed("runtime_supervisor", &s.runtime_supervisor)
        }
        ParticipantOwnership::GitRouting(s) => {
            let c = Check {
                role: "GitRouting",
                ctx,
            };
            c.present("mountpoint", s.mountpoint.is_some())?;
            c.present("host_root", s.host_root.is_some())?;
            c.present("isolated_root", s.isolated_root.is_some())?;
            c.present("mount", s.mount.is_some())?;
            c.committed("daemon", &s.daemon)
        }
        ParticipantOwnership::Network(s) => {
            let c = Check {
                role: "Network",
                ctx,
            };
            c.present("derived_policy_digest", s.derived_policy_digest.is_some())?;
            c.present("readiness_fingerprint", s.readiness_fingerprint.is_some())?;
            c.present("readiness_evidence", s.readiness_evidence.is_some())?;
            c.present("namespace", s.namespace.is_some())?;
            c.committed("runtime_supervisor", &s.runtime_supervisor)?;
            check_readiness(s, ctx)
        }
        ParticipantOwnership::Helper(s) => {
            let c = Check {
                role: "Helper",
                ctx,
            };
            c.present("network_sidecar_id", s.network_sidecar_id.is_some())?;
            if s.network_sidecar_id != Some(ctx.generation.network_sidecar_id) {
                return Err(OwnershipError::ReadinessMismatch {
                    what: "helper network_sidecar_id differs from the generation's",
                });
            }
            c.committed("connectivity_helper", &s.connectivity_helper)?;
            c.committed("runtime_supervisor", &s.runtime_supervisor)
        }
        ParticipantOwnership::Sandbox(s) => {
            let c = Check {
                role: "Sandbox",
                ctx,
            };
            c.present("container_id", s.container_id.is_some())?;
            c.present("runtime_root", s.runtime_root.is_some())?;
            c.present("bundle_digest", s.bundle_digest.is_some())?;
            c.committed("host_coordinator", &s.host_coordinator)?;
            c.committed("runtime_supervisor", &s.runtime_supervisor)?;
            c.committed("attached_runsc", &s.attached_runsc)
        }
        ParticipantOwnership::Publication(s) => {
            let c = Check {
                role: "Publication",
                ctx,
            };
            c.present("socket_path", s.socket_path.is_some())?;
            c.present("identity_path", s.identity_path.is_some())
        }
    }
}

/// Network readiness evidence names the enclosing generation and matches its
/// policy digest, fingerprint and namespace (spec 3.3).
fn check_readiness(s: &NetworkOwnership, ctx: &RuleContext<'_>) -> Result<(), OwnershipError> {
    let (Some(evidence), Some(fingerprint), Some(policy), Some(namespace)) = (
        s.readiness_evidence,
        s.readiness_fingerprint,
        s.derived_policy_digest,
        s.namespace,
    ) else {
        return Err(OwnershipError::ReadinessMismatch {
            what: "readiness fields are incomplete",
        });
    };
    let generation = ctx.generation;
    let mismatch = |what| Err(OwnershipError::ReadinessMismatch { what });
    if evidence.generation_id != generation.generation_id {
        return mismatch("evidence names another generation");
    }
    if evidence.domain_id != generation.domain_id {
        return mismatch("evidence names another Domain");
    }
    if evidence.network_sidecar_id != generation.network_sidecar_id {
        return mismatch("evidence names another Network Sidecar ID");
    }
    if evidence.readiness_fingerprint != fingerprint {
        return mismatch("evidence fingerprint differs from the recorded readiness_fingerprint");
    }
    let identity = NetworkReadinessIdentity {
        schema_id: NETWORK_READINESS_IDENTITY_SCHEMA_ID.to_owned(),
        domain_id: generation.domain_id,
        generation_id: generation.generation_id,
        configuration_fingerprint: generation.configuration_fingerprint,
        network_sidecar_id: generation.network_sidecar_id,
        derived_policy_digest: policy,
        enforcement_namespace: namespace,
    };
    if identity.fingerprint()? != fingerprint {
        return mismatch(
            "readiness_fingerprint is not the digest of this generation's policy and namespace",
        );
    }
    Ok(())
}
