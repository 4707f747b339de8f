//! Exclusive lifecycle ownership of an inactive Domain (spec 3.9, SR-14):
//! what destructive or judging maintenance (`state reset`, `state verify`)
//! holds while it works. The Domain's lock is taken (a Host Coordinator
//! that just lost its last terminal is waited for while it tears down);
//! then the Domain Store must show every generation released and the
//! Storage Catalog no lease of the Domain. Together these mean no session,
//! sandbox, helper or anchor mount uses the Domain's state: an anchor
//! mount lives only in its Runtime Supervisor's mount namespace, and a
//! generation is released only after the coordinator proved it empty.
use super::Target;
use lazaret_effects::config_resolve::DomainLocation;
use lazaret_effects::domain_lock::{DomainLock, DomainLockError};
use lazaret_effects::domain_store::{DomainStore, StoreError};
use lazaret_effects::process_identity::ProcessSys;
use lazaret_effects::storage_catalog::{CatalogError, StorageCatalog};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long maintenance waits for a Host Coordinator that holds the lock:
/// one whose last terminal just ended is still tearing the Domain down.
pub const LOCK_PATIENCE: Duration = Duration::from_secs(10);

/// Why the Domain is not held inactive; one variant per refusal.
#[derive(Debug, thiserror::Error)]
pub enum NotInactive {
    #[error("the Domain is running: its Host Coordinator has held {lock} for the last {:?}. End every terminal of the Domain, then try again", LOCK_PATIENCE)]
    Active { lock: PathBuf },
    #[error("the Domain's lock {0}")]
    Lock(#[source] DomainLockError),
    #[error("cannot read the current boot ID: {0}")]
    BootId(#[source] std::io::Error),
    #[error("the Domain Store: {0}")]
    Store(#[from] StoreError),
    #[error("generation {generation} of the Domain was not released (a crash): start the Domain once so it is recovered ({relaunch}), then try again")]
    Unrecovered { generation: u64, relaunch: String },
    #[error("the Domain Store {store} records Domain {recorded}, not the located Domain {expected}; nothing was changed: inspect it with `lazaret state --domain-root`")]
    OtherDomain {
        store: PathBuf,
        recorded: String,
        expected: String,
    },
    #[error("the Storage Catalog: {0}")]
    Catalog(#[source] CatalogError),
    #[error("the Storage Catalog still records a lease of generation {generation} of this Domain on a prepared lower: its release did not finish; start the Domain once so it is recovered, then try again")]
    LeaseHeld { generation: u64 },
}

impl NotInactive {
    /// 3 for a running Domain (as `lazaret state` reports it), else 1.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Active { .. } => 3,
            _ => 1,
        }
    }
}

/// The Domain's lock, waiting up to [`LOCK_PATIENCE`] for its holder.
fn acquire_patiently(path: &Path) -> Result<DomainLock, NotInactive> {
    let deadline = Instant::now() + LOCK_PATIENCE;
    loop {
        match DomainLock::try_acquire(path) {
            Ok(lock) => return Ok(lock),
            Err(DomainLockError::Held { .. }) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(DomainLockError::Held { .. }) => {
                return Err(NotInactive::Active {
                    lock: path.to_owned(),
                })
            }
            Err(e) => return Err(NotInactive::Lock(e)),
        }
    }
}

/// Takes the Domain's lock and establishes that nothing uses its state
/// (spec 3.9, SR-14); the lock is held until the returned value drops.
/// `relaunch` is the command that recovers the Domain, for the refusal.
pub fn hold_inactive<P: ProcessSys>(
    target: &Target,
    location: &DomainLocation,
    relaunch: &str,
    procs: &P,
) -> Result<DomainLock, NotInactive> {
    let lock = acquire_patiently(&target.lock)?;
    let boot = procs.boot_id().map_err(NotInactive::BootId)?;
    let document = DomainStore::open(&lock, &target.store, boot)?.document()?;
    // SR-11: the store at the located root must be this very Domain's.
    if let Some(domain) = &document.domain {
        if !super::records_location(domain, location) {
            return Err(NotInactive::OtherDomain {
                store: target.store.clone(),
                recorded: format!(
                    "{} (profile {:?}, workspace {})",
                    domain.domain_id,
                    domain.profile_name.as_str(),
                    domain.canonical_workspace
                ),
                expected: location.domain_id.to_string(),
            });
        }
    }
    if let Some(g) = document
        .generations
        .iter()
        .find(|g| g.generation.durable_decision.as_str() != "Vacant")
    {
        return Err(NotInactive::Unrecovered {
            generation: g.generation.generation_id.0,
            relaunch: relaunch.to_owned(),
        });
    }
    let leases = StorageCatalog::at(&location.storage_root)
        .leases()
        .map_err(NotInactive::Catalog)?;
    if let Some(lease) = leases.iter().find(|l| l.domain.0 == location.domain_id.0) {
        return Err(NotInactive::LeaseHeld {
            generation: lease.generation.0,
        });
    }
    Ok(lock)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking
    use super::*;
    use lazaret_effects::domain_root::DomainRootLayout;
    use lazaret_effects::domain_store::StoreOp;
    use lazaret_effects::process_identity::real::RealProcessSys;
    use lazaret_effects::storage_catalog::{ArtifactLease, Published};
    use lazaret_generated::prepared_lower::{
        HcStates, MountStates, PlStates, RsStates, SaStates, StageStates,
    };
    use lazaret_runtime::catalog_model::{DomainRecord, Step};
    use lazaret_runtime::config::KeyPath;
    use lazaret_runtime::config::{DomainIdV1, ProfileName as ConfigProfileName};
    use lazaret_runtime::records::catalog::{OperationId, PrepareOperation, PrepareStageState};
    use lazaret_runtime::records::domain::{Domain, Generation};
    use lazaret_runtime::records::ids::*;

    /// A Domain whose store holds generation 1 with `decision`, recorded
    /// for `workspace`; the located Domain is for `/home/dev/p`.
    fn domain(dir: &Path, decision: &str, workspace: &str) -> (Target, DomainLocation) {
        let profile = ConfigProfileName::parse(&KeyPath::root(), "dev").unwrap();
        let id = DomainIdV1::compute(&profile, b"/home/dev/p").unwrap();
        let root = dir.join("domains").join(id.to_string());
        std::fs::create_dir_all(&root).unwrap();
        let layout = DomainRootLayout::new(&root);
        let lock = DomainLock::try_acquire(&layout.lock_path()).unwrap();
        let boot = RealProcessSys.boot_id().unwrap();
        let store = DomainStore::create(&lock, &layout.store_path(), boot).unwrap();
        let domain_id = DomainId(id.0);
        store
            .apply(&[
                StoreOp::PutDomain(Domain {
                    domain_id,
                    profile_name: ProfileName::new("dev").unwrap(),
                    canonical_workspace: HostPath::new(workspace).unwrap(),
                }),
                StoreOp::InsertGeneration(Generation {
                    domain_id,
                    generation_id: GenerationId(1),
                    configuration_fingerprint: ConfigurationFingerprint([2; 32]),
                    coordinator_id: CoordinatorId([3; 16]),
                    network_sidecar_id: NetworkSidecarId([4; 16]),
                    sandbox_id: SandboxId([5; 16]),
                    durable_decision: ModelValue::new(decision).unwrap(),
                }),
            ])
            .unwrap();
        drop(store);
        drop(lock);
        let target = Target {
            located: None,
            domain_root: root.clone(),
            lock: layout.lock_path(),
            store: layout.store_path(),
            runtime: None,
        };
        let location = DomainLocation {
            profile: "dev".to_owned(),
            config_file: dir.join("config.toml"),
            workspace: PathBuf::from("/home/dev/p"),
            domain_id: id,
            storage_root: dir.to_owned(),
            storage_domain_root: root,
            runtime_domain_root: dir.join("run"),
            persistent_dirs: Vec::new(),
        };
        (target, location)
    }

    #[test]
    fn an_unreleased_generation_refuses() {
        let dir = tempfile::tempdir().unwrap();
        let (target, location) = domain(dir.path(), "Published", "/home/dev/p");
        let refused = hold_inactive(&target, &location, "`lazaret dev`", &RealProcessSys)
            .expect_err("a live generation was accepted");
        assert!(
            matches!(refused, NotInactive::Unrecovered { generation: 1, .. }),
            "{refused}"
        );
        assert_eq!(refused.exit_code(), 1);
    }

    #[test]
    fn a_store_of_another_domain_refuses() {
        let dir = tempfile::tempdir().unwrap();
        let (target, location) = domain(dir.path(), "Vacant", "/home/dev/other");
        let refused = hold_inactive(&target, &location, "`lazaret dev`", &RealProcessSys)
            .expect_err("another Domain's store was accepted");
        assert!(
            matches!(refused, NotInactive::OtherDomain { .. }),
            "{refused}"
        );
    }

    #[test]
    fn a_lease_left_in_the_catalog_refuses_and_a_clean_domain_is_held() {
        let dir = tempfile::tempdir().unwrap();
        let (target, location) = domain(dir.path(), "Vacant", "/home/dev/p");
        let held = hold_inactive(&target, &location, "`lazaret dev`", &RealProcessSys).unwrap();
        // Held: nobody else gets the lock meanwhile.
        assert!(matches!(
            DomainLock::try_acquire(&target.lock),
            Err(DomainLockError::Held { .. })
        ));
        drop(held);
        let catalog = StorageCatalog::at(&location.storage_root);
        // A lease names a published artifact.
        let operation = PrepareOperation {
            operation_id: OperationId([1; 16]),
            expected_artifact_id: PreparedArtifactId([9; 32]),
            source_identity: SourceIdentity::new("sha256:s").unwrap(),
            selected_manifest_digest: SourceIdentity::new("sha256:m").unwrap(),
            policy_id: Sha256Digest([0; 32]),
            id_map_digest: Sha256Digest([0; 32]),
            stage_path: HostPath::new(b"/s/prepared/.stage-01".to_vec()).unwrap(),
            stage_state: PrepareStageState::Intent,
            device: None,
            inode: None,
        };
        let mut run = catalog.run(operation.expected_artifact_id);
        catalog.record_prepare_intent(&operation, &mut run).unwrap();
        run.took(Step::CreateStage, Some(StageStates::Own)).unwrap();
        catalog
            .record_stage_owned(operation.operation_id, 1, 2, &mut run)
            .unwrap();
        catalog
            .publish_artifact(
                operation.operation_id,
                |_| {
                    Ok(Published {
                        path: HostPath::new(b"/s/prepared/09".to_vec()).unwrap(),
                        device: 1,
                        inode: 2,
                    })
                },
                &mut run,
            )
            .unwrap();
        // The Domain's generation 1 records its prepared-lower intent.
        let intent = DomainRecord {
            hc: HcStates::Running,
            rs: RsStates::Running,
            pl: PlStates::Intent,
            names_artifact: true,
            sa: SaStates::None,
            mount: MountStates::Absent,
        };
        catalog
            .insert_lease(
                &ArtifactLease {
                    artifact: PreparedArtifactId([9; 32]),
                    domain: DomainId(location.domain_id.0),
                    generation: GenerationId(1),
                },
                intent,
                (1, 2),
            )
            .unwrap();
        let refused = hold_inactive(&target, &location, "`lazaret dev`", &RealProcessSys)
            .expect_err("a held lease was accepted");
        assert!(
            matches!(refused, NotInactive::LeaseHeld { generation: 1 }),
            "{refused}"
        );
    }
}
