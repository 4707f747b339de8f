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
