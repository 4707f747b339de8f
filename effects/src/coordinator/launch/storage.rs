//! The prepared-lower lease and the State Anchors of a generation (spec 3.6
//! "physical lease-acquisition refinement", FR-4, FR-17), each step one
//! model action:
//! 1. `RecordIntent(PreparedLower)`, then `AcquireSnapshot(PreparedLower)`:
//!    the intended prepared-artifact identity, lease phase `Intent`;
//! 2. `CommitParticipant(PreparedLower)`: the exact `(artifact, Domain,
//!    generation)` lease inserted in the Storage Catalog, then `LeaseHeld`
//!    committed in the Domain Store;
//! 3. `RecordIntent(StateAnchor)`, after which RS mounts the anchors in its
//!    mount namespace; `AcquireSnapshot(StateAnchor)` on RS's report records
//!    their identities; `CommitParticipant(StateAnchor)` makes it Prepared.
use std::path::{Path, PathBuf};

use lazaret_generated::lazaret::{Action, Roles};
use lazaret_runtime::coordinator::messages::{AnchorPlan, CoordinatorCommand};
use lazaret_runtime::ownership::participant::ParticipantOp;
use lazaret_runtime::records::ids::{HostPath, PreparedArtifactId, SourceIdentity};
use lazaret_runtime::records::participant::{
    AnchorMounts, LeaseState, ParticipantOwnership, ParticipantRole, PreparedLowerOwnership,
    StateAnchorOwnership,
};

use super::super::catalog_record::domain_record;
use super::super::channel;
use super::super::host::{CoordinatorError, Hc};
use super::super::paths::DomainPaths;
use super::participants::{participant_step, record_intent, snapshot, supervisor_edge};
use super::Launching;
use crate::crash_point::crash_point;
use crate::domain_store::StoreOp;
use crate::state_anchor::{anchor_name, MOUNT_POINTS_DIR};
use crate::storage_catalog::ArtifactLease;

/// The anchors of persistent paths `paths`: lowers in the prepared lower
/// `rootfs`, uppers and work directories in the Domain's anchors
/// directory, mount points in the generation directory `generation_dir`.
pub(super) fn anchor_plans(
    paths: &DomainPaths,
    persistent: &[String],
    rootfs: &Path,
    generation_dir: &Path,
) -> Vec<AnchorPlan> {
    let text = |p: PathBuf| p.display().to_string();
    persistent
        .iter()
        .map(|path| {
            let name = anchor_name(path);
            AnchorPlan {
                path: path.clone(),
                rootfs: text(rootfs.to_owned()),
                upper: text(paths.anchor_uppers().join(&name)),
                work: text(paths.anchor_work().join(&name)),
                mountpoint: text(generation_dir.join(MOUNT_POINTS_DIR).join(&name)),
            }
        })
        .collect()
}

/// A path as a record holds it.
fn recorded(what: &'static str, p: &Path) -> Result<HostPath, CoordinatorError> {
    HostPath::new(p.display().to_string().into_bytes())
        .map_err(|source| CoordinatorError::RecordValue { what, source })
}

/// The prepared artifact's ID from its record's hex text.
fn artifact_id(hex: &str) -> Result<PreparedArtifactId, CoordinatorError> {
    let bad = || CoordinatorError::ArtifactId {
        found: hex.to_owned(),
    };
    if hex.len() != 64 {
        return Err(bad());
    }
    let mut id = [0u8; 32];
    for (i, byte) in id.iter_mut().enumerate() {
        *byte = hex
            .get(2 * i..2 * i + 2)
            .and_then(|h| u8::from_str_radix(h, 16).ok())
            .ok_or_else(bad)?;
    }
    Ok(PreparedArtifactId(id))
}

/// The prepared lower's snapshot in lease phase `lease`.
fn prepared_lower_snapshot(
    l: &Launching,
    lease: LeaseState,
) -> Result<PreparedLowerOwnership, CoordinatorError> {
    let lower = &l.prepared.lower;
    let st = std::fs::metadata(&lower.rootfs).map_err(|source| CoordinatorError::Io {
        path: lower.rootfs.clone(),
        source,
    })?;
    use std::os::unix::fs::MetadataExt;
    Ok(PreparedLowerOwnership {
        prepared_artifact_id: Some(artifact_id(&lower.record.artifact_id)?),
        source_identity: Some(
            SourceIdentity::new(lower.record.manifest_digest.clone()).map_err(|source| {
                CoordinatorError::RecordValue {
                    what: "source identity",
                    source,
                }
            })?,
        ),
        lease_state: Some(lease),
        path: Some(recorded("prepared lower", &lower.rootfs)?),
        device: Some(st.dev()),
        inode: Some(st.ino()),
        released_state_anchor: None,
    })
}

/// RecordIntent(PreparedLower).
pub(super) fn record_prepared_lower_intent(hc: &mut Hc<'_, '_>) -> Result<(), CoordinatorError> {
    let generation = hc.id;
    record_intent(hc, generation, Roles::PreparedLower)
}

/// AcquireSnapshot(PreparedLower): spec 3.6 step 1, the intended
/// prepared-artifact identity with lease phase `Intent`.
pub(super) fn acquire_prepared_lower_snapshot(
    hc: &mut Hc<'_, '_>,
    l: &Launching,
) -> Result<(), CoordinatorError> {
    let snapshot = prepared_lower_snapshot(l, LeaseState::Intent)?;
    let c = hc.model.me();
    participant_step(
        hc,
        Action::AcquireSnapshot {
            c,
            r: Roles::PreparedLower,
        },
        ParticipantRole::PreparedLower,
        ParticipantOp::Acquire(ParticipantOwnership::PreparedLower(snapshot)),
    )
}

/// CommitParticipant(PreparedLower): spec 3.6 steps 2 and 3, the exact
/// lease inserted in the Storage Catalog (one locked transaction), then
/// `LeaseHeld` committed. A crash between the two leaves the lease with a
/// Domain record in lease phase `Intent`: the release removes it.
pub(super) fn commit_prepared_lower(
    hc: &mut Hc<'_, '_>,
    l: &Launching,
) -> Result<(), CoordinatorError> {
    let snapshot = prepared_lower_snapshot(l, LeaseState::LeaseHeld)?;
    let lease = ArtifactLease {
        artifact: snapshot
            .prepared_artifact_id
            .ok_or(CoordinatorError::NoSnapshot {
                role: "PreparedLower",
            })?,
        domain: l.network.domain_id,
        generation: l.generation,
    };
    let generation = hc.id;
    let c = hc.model.me();
    hc.step(
        Action::CommitParticipant {
            c,
            r: Roles::PreparedLower,
        },
        |hc| {
            let record = domain_record(
                hc.store,
                generation,
                lease.artifact,
                hc.model.state(),
                hc.model.me(),
            )
            .map_err(|e| hc.store_err(e))?;
            let inserted = hc
                .catalog
                .insert_lease(&lease, record, l.prepared.lower.tree)
                .map_err(CoordinatorError::Catalog)?;
            tracing::debug!(?inserted, "prepared-lower lease");
            crash_point!(Hc, "catalog-lease", "after-insert", "CommitParticipant");
            hc.apply(&[StoreOp::Participant {
                generation,
                role: ParticipantRole::PreparedLower,
                op: ParticipantOp::Activate(ParticipantOwnership::PreparedLower(snapshot)),
            }])
        },
    )
}

/// The Domain's persistent state directories: the anchors directories and
/// the Ignored Workspace State (0700, created when absent; a symlink or file
/// in their place is refused).
fn state_directories(paths: &DomainPaths) -> Result<(), CoordinatorError> {
    use std::os::unix::fs::DirBuilderExt;
    for dir in [
        paths.anchors(),
        paths.anchor_uppers(),
        paths.anchor_work(),
        paths.ignored_state(),
    ] {
        let made = std::fs::DirBuilder::new().mode(0o700).create(&dir);
        match made {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let kind = std::fs::symlink_metadata(&dir)
                    .map_err(|source| CoordinatorError::Io {
                        path: dir.clone(),
                        source,
                    })?
                    .file_type();
                if !kind.is_dir() {
                    return Err(CoordinatorError::StateDirectory { path: dir });
                }
            }
            Err(source) => return Err(CoordinatorError::Io { path: dir, source }),
        }
    }
    Ok(())
}

/// RecordIntent(StateAnchor): the bare intent is durable before anything
/// is mounted; then RS is told to mount.
pub(super) fn record_state_anchor_intent(
    hc: &mut Hc<'_, '_>,
    paths: &DomainPaths,
    l: &mut Launching,
) -> Result<(), CoordinatorError> {
    state_directories(paths)?;
    // For `lazaret state inspect` only: the lower these anchors go over.
    let artifact = &l.prepared.lower.record.artifact_id;
    crate::state_anchor::record_lower(&paths.storage, artifact).map_err(|source| {
        CoordinatorError::Io {
            path: paths.anchors().join(crate::state_anchor::LOWER_RECORD),
            source,
        }
    })?;
    let generation = hc.id;
    record_intent(hc, generation, Roles::StateAnchor)?;
    channel::send(
        l.channel()?,
        "supervisor",
        &CoordinatorCommand::MountStateAnchors,
    )?;
    Ok(())
}

/// The State Anchor snapshot of `mounts`, as RS reported them for the
/// plan: one mount per planned anchor, at the planned mount point.
fn state_anchor_snapshot(
    l: &Launching,
    paths: &DomainPaths,
    mounts: AnchorMounts,
) -> Result<StateAnchorOwnership, CoordinatorError> {
    let planned: Vec<&str> = l.anchors.iter().map(|a| a.mountpoint.as_str()).collect();
    let reported: Vec<String> = mounts
        .anchors
        .iter()
        .map(|a| a.mountpoint.to_string())
        .collect();
    if planned != reported {
        return Err(CoordinatorError::AnchorsReported {
            planned: planned.iter().map(|s| (*s).to_owned()).collect(),
            reported,
        });
    }
    Ok(StateAnchorOwnership {
        lower_artifact_id: Some(artifact_id(&l.prepared.lower.record.artifact_id)?),
        upper_path: Some(recorded("State Anchor uppers", &paths.anchor_uppers())?),
        work_path: Some(recorded("State Anchor work", &paths.anchor_work())?),
        merged_path: Some(recorded(
            "State Anchor mounts",
            &l.dir.join(MOUNT_POINTS_DIR),
        )?),
        runtime_supervisor: supervisor_edge(l.committed()?),
        mounts: Some(mounts),
    })
}

/// AcquireSnapshot(StateAnchor), on RS's report of the mounted anchors.
pub(super) fn acquire_state_anchor_snapshot(
    hc: &mut Hc<'_, '_>,
    l: &Launching,
    paths: &DomainPaths,
    mounts: AnchorMounts,
) -> Result<(), CoordinatorError> {
    let snapshot = state_anchor_snapshot(l, paths, mounts)?;
    let c = hc.model.me();
    participant_step(
        hc,
        Action::AcquireSnapshot {
            c,
            r: Roles::StateAnchor,
        },
        ParticipantRole::StateAnchor,
        ParticipantOp::Acquire(ParticipantOwnership::StateAnchor(snapshot)),
    )
}

/// CommitParticipant(StateAnchor): the recorded anchors are Prepared.
pub(super) fn commit_state_anchor(hc: &mut Hc<'_, '_>) -> Result<(), CoordinatorError> {
    let generation = hc.id;
    let Some(current @ ParticipantOwnership::StateAnchor(_)) =
        snapshot(hc, generation, ParticipantRole::StateAnchor)?
    else {
        return Err(CoordinatorError::NoSnapshot {
            role: "StateAnchor",
        });
    };
    let c = hc.model.me();
    participant_step(
        hc,
        Action::CommitParticipant {
            c,
            r: Roles::StateAnchor,
        },
        ParticipantRole::StateAnchor,
        ParticipantOp::Activate(current),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests fail by panicking
    use super::*;

    #[test]
    fn each_persistent_path_gets_its_own_upper_work_and_mount_point() {
        let paths = DomainPaths::new(Path::new("/run/d"), Path::new("/data/d"));
        let plans = anchor_plans(
            &paths,
            &["/root".to_owned(), "/usr/local".to_owned()],
            Path::new("/data/prepared/ab/rootfs"),
            Path::new("/run/d/gen-3"),
        );
        assert_eq!(
            plans[1],
            AnchorPlan {
                path: "/usr/local".to_owned(),
                rootfs: "/data/prepared/ab/rootfs".to_owned(),
                upper: "/data/d/anchors/upper/usr%2Flocal".to_owned(),
                work: "/data/d/anchors/work/usr%2Flocal".to_owned(),
                mountpoint: "/run/d/gen-3/anchors/usr%2Flocal".to_owned(),
            }
        );
        assert_eq!(plans[0].upper, "/data/d/anchors/upper/root");
    }

    #[test]
    fn an_artifact_id_is_64_hex_digits() {
        let id = artifact_id(&"0f".repeat(32)).unwrap();
        assert_eq!(id.0, [0x0f; 32]);
        for bad in ["", "0f", &"zz".repeat(32), &"0f".repeat(33)] {
            assert!(matches!(
                artifact_id(bad),
                Err(CoordinatorError::ArtifactId { .. })
            ));
        }
    }
}
