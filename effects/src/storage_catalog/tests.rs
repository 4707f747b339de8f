use super::*;
use lazaret_generated::prepared_lower::{
    HcStates, MountStates, PlStates, RsStates, SaStates, StageStates,
};
use lazaret_runtime::records::catalog::{
    OperationId, PrepareOperation, PrepareStageState, PreparedArtifact,
};
use lazaret_runtime::records::domain::DOMAIN_STORE_SCHEMA_ID;
use lazaret_runtime::records::ids::{HostPath, Sha256Digest, SourceIdentity};
use redb::TableDefinition;
use std::os::unix::fs::PermissionsExt;
use std::sync::{Arc, Barrier};
use std::time::Instant;

fn lease(artifact: u8, domain: u8, generation: u64) -> ArtifactLease {
    ArtifactLease {
        artifact: PreparedArtifactId([artifact; 32]),
        domain: DomainId([domain; 32]),
        generation: GenerationId(generation),
    }
}

/// A prepare operation for artifact `[artifact; 32]`.
pub(super) fn operation(id: u8, artifact: u8) -> PrepareOperation {
    PrepareOperation {
        operation_id: OperationId([id; 16]),
        expected_artifact_id: PreparedArtifactId([artifact; 32]),
        source_identity: SourceIdentity::new("sha256:source").unwrap(),
        selected_manifest_digest: SourceIdentity::new("sha256:manifest").unwrap(),
        policy_id: Sha256Digest([5; 32]),
        id_map_digest: Sha256Digest([6; 32]),
        stage_path: HostPath::new(format!("/s/prepared/.stage-{id}").into_bytes()).unwrap(),
        stage_state: PrepareStageState::Intent,
        device: None,
        inode: None,
    }
}

/// A Domain whose Host Coordinator runs, with its supervisor, and
/// records prepared-lower intent for the artifact (acquisition step 2).
pub(super) fn intent() -> DomainRecord {
    DomainRecord {
        hc: HcStates::Running,
        rs: RsStates::Running,
        pl: PlStates::Intent,
        names_artifact: true,
        sa: SaStates::None,
        mount: MountStates::Absent,
    }
}

/// Inserts `lease` for a Domain recording its intent, for the tree
/// [`available`] published for the artifact.
pub(super) fn insert(
    catalog: &StorageCatalog,
    lease: &ArtifactLease,
) -> Result<LeaseInsert, CatalogError> {
    let inode = 100 + u64::from(lease.artifact.0[0]);
    catalog.insert_lease(lease, intent(), (1, inode))
}

/// The Domain records the prepared-lower release intent for the
/// artifact, its anchors clean and its runtime gone (release step 4).
pub(super) fn released() -> Option<DomainRecord> {
    Some(DomainRecord {
        rs: RsStates::Absent,
        pl: PlStates::ReleaseIntent,
        sa: SaStates::Clean,
        ..intent()
    })
}

/// The Domain still records the lease as held.
fn still_held() -> Option<DomainRecord> {
    Some(DomainRecord {
        pl: PlStates::LeaseHeld,
        ..intent()
    })
}

/// The steps of a preparation up to its stage, recorded Owned with
/// `(1, inode)`: the operation's run.
pub(super) fn owned(catalog: &StorageCatalog, op: &PrepareOperation, inode: u64) -> CatalogRun {
    let mut run = catalog.run(op.expected_artifact_id);
    assert_eq!(
        catalog.record_prepare_intent(op, &mut run).unwrap(),
        PrepareIntent::Recorded
    );
    run.check(Step::CreateStage).unwrap();
    run.took(Step::CreateStage, Some(StageStates::Own)).unwrap();
    catalog
        .record_stage_owned(op.operation_id, 1, inode, &mut run)
        .unwrap();
    run
}

/// Publishes artifact `[artifact; 32]` through the prepare-operation steps.
pub(super) fn available(catalog: &StorageCatalog, artifact: u8) -> PreparedArtifact {
    let op = operation(artifact, artifact);
    let inode = 100 + u64::from(artifact);
    let mut run = owned(catalog, &op, inode);
    catalog
        .publish_artifact(
            op.operation_id,
            |_| {
                Ok(Published {
                    path: HostPath::new(format!("/s/prepared/{artifact}").into_bytes()).unwrap(),
                    device: 1,
                    inode,
                })
            },
            &mut run,
        )
        .unwrap()
}

/// The metadata row as stored, read with redb directly.
fn raw_metadata_bytes(path: &Path) -> Option<Vec<u8>> {
    let db = Database::open(path).unwrap();
    let txn = db.begin_read().unwrap();
    let table = match txn.open_table(tables::METADATA) {
        Ok(table) => table,
        Err(TableError::TableDoesNotExist(_)) => return None,
        Err(e) => panic!("{e}"),
    };
    let bytes = table.get(tables::METADATA_KEY).unwrap()?;
    Some(bytes.value().to_vec())
}

fn raw_metadata(path: &Path) -> Option<StoreMetadata> {
    raw_metadata_bytes(path).map(|bytes| codec::decode("m", &bytes).unwrap())
}

#[test]
fn at_does_no_io_and_names_the_layout() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("absent-root");
    let catalog = StorageCatalog::at(&root);
    assert_eq!(catalog.path(), root.join("catalog/catalog.redb"));
    assert_eq!(catalog.lock_path(), root.join("catalog/catalog.lock"));
    assert!(!root.exists());
}

#[test]
fn an_inserted_lease_is_held_and_only_that_one() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = StorageCatalog::at(dir.path());
    available(&catalog, 1);
    let held = lease(1, 2, 3);
    assert!(!catalog.lease_held(&held).unwrap());
    assert_eq!(insert(&catalog, &held).unwrap(), LeaseInsert::Inserted);
    assert!(catalog.lease_held(&held).unwrap());
    assert!(!catalog.lease_held(&lease(1, 2, 4)).unwrap());
}

#[test]
fn inserting_the_same_lease_again_is_already_held() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = StorageCatalog::at(dir.path());
    available(&catalog, 1);
    let held = lease(1, 2, 3);
    assert_eq!(insert(&catalog, &held).unwrap(), LeaseInsert::Inserted);
    assert_eq!(insert(&catalog, &held).unwrap(), LeaseInsert::AlreadyHeld);
    assert_eq!(catalog.leases().unwrap(), vec![held]);
}

#[test]
fn removing_the_exact_lease_then_again_is_already_absent() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = StorageCatalog::at(dir.path());
    available(&catalog, 1);
    let held = lease(1, 2, 3);
    insert(&catalog, &held).unwrap();
    assert_eq!(
        catalog.remove_lease(&held, released).unwrap(),
        LeaseRemoval::Removed
    );
    assert!(!catalog.lease_held(&held).unwrap());
    assert_eq!(
        catalog.remove_lease(&held, released).unwrap(),
        LeaseRemoval::AlreadyAbsent
    );
    assert_eq!(catalog.leases().unwrap(), vec![]);
}

/// Spec 3.6 release step 4: the Domain's release intent is rechecked under
/// the catalog lock; without it the lease stays.
#[test]
fn a_lease_is_removed_only_with_the_domains_release_intent() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = StorageCatalog::at(dir.path());
    available(&catalog, 1);
    let held = lease(1, 2, 3);
    insert(&catalog, &held).unwrap();
    let err = catalog.remove_lease(&held, still_held).unwrap_err();
    assert!(
        matches!(err, CatalogError::ReleaseNotIntended { generation: 3, .. }),
        "{err}"
    );
    assert!(catalog.lease_held(&held).unwrap());
    // The recheck runs under the catalog lock: another section would wait.
    let mut locked_meanwhile = None;
    catalog
        .remove_lease(&held, || {
            let other = StorageCatalog::at(dir.path()).with_lock_wait(Duration::from_millis(50));
            locked_meanwhile = Some(matches!(
                other.leases(),
                Err(CatalogError::LockTimeout { .. })
            ));
            released()
        })
        .unwrap();
    assert_eq!(locked_meanwhile, Some(true));
    assert!(!catalog.lease_held(&held).unwrap());
}

#[test]
fn removing_a_lease_that_differs_in_one_field_leaves_the_row() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = StorageCatalog::at(dir.path());
    available(&catalog, 1);
    let held = lease(1, 2, 3);
    insert(&catalog, &held).unwrap();
    for other in [lease(9, 2, 3), lease(1, 9, 3), lease(1, 2, 9)] {
        assert_eq!(
            catalog.remove_lease(&other, released).unwrap(),
            LeaseRemoval::AlreadyAbsent,
            "{other:?}"
        );
        assert!(catalog.lease_held(&held).unwrap(), "{other:?}");
    }
    assert_eq!(catalog.leases().unwrap(), vec![held]);
}

#[test]
fn leases_are_listed_sorted_field_by_field() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = StorageCatalog::at(dir.path());
    for artifact in 0..=2 {
        available(&catalog, artifact);
    }
    // Generation 256 after 2 (a little-endian key would put it first),
    // the artifact before the Domain, the Domain before the generation.
    let inserted = [
        lease(2, 1, 1),
        lease(1, 2, 1),
        lease(1, 1, 256),
        lease(1, 1, 2),
        lease(0, 9, 9),
    ];
    for l in &inserted {
        insert(&catalog, l).unwrap();
    }
    assert_eq!(
        catalog.leases().unwrap(),
        vec![
            lease(0, 9, 9),
            lease(1, 1, 2),
            lease(1, 1, 256),
            lease(1, 2, 1),
            lease(2, 1, 1),
        ]
    );
}

#[test]
fn lease_keys_round_trip_and_sort_like_leases() {
    fn prop(a: (u8, u8, u64, u8), b: (u8, u8, u64, u8)) -> bool {
        // The last byte varies one position in the middle of each ID.
        let make = |(artifact, domain, generation, tail): (u8, u8, u64, u8)| {
            let mut l = lease(artifact, domain, generation);
            l.artifact.0[31] = tail;
            l.domain.0[17] = tail.rotate_left(3);
            l
        };
        let (a, b) = (make(a), make(b));
        let (ka, kb) = (tables::lease_key(&a), tables::lease_key(&b));
        tables::lease_from_key(&ka) == a && ka.cmp(&kb) == a.cmp(&b)
    }
    quickcheck::quickcheck(prop as fn((u8, u8, u64, u8), (u8, u8, u64, u8)) -> bool);
}

#[test]
fn reads_on_a_missing_catalog_create_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = StorageCatalog::at(dir.path());
    let l = lease(1, 2, 3);
    // No catalog directory: nothing at all is created.
    assert!(!catalog.lease_held(&l).unwrap());
    assert_eq!(catalog.leases().unwrap(), vec![]);
    assert_eq!(
        catalog.remove_lease(&l, released).unwrap(),
        LeaseRemoval::AlreadyAbsent
    );
    assert!(!dir.path().join(CATALOG_DIR).exists());
    // A catalog directory without the file: the file is not created.
    std::fs::create_dir(dir.path().join(CATALOG_DIR)).unwrap();
    assert!(!catalog.lease_held(&l).unwrap());
    assert_eq!(catalog.leases().unwrap(), vec![]);
    assert_eq!(
        catalog.remove_lease(&l, released).unwrap(),
        LeaseRemoval::AlreadyAbsent
    );
    assert!(!catalog.path().exists());
    // An empty file (a creator that died before redb wrote anything) is
    // left empty by reads and initialised by the first insert.
    std::fs::write(catalog.path(), b"").unwrap();
    assert!(!catalog.lease_held(&l).unwrap());
    assert_eq!(catalog.leases().unwrap(), vec![]);
    assert_eq!(
        catalog.remove_lease(&l, released).unwrap(),
        LeaseRemoval::AlreadyAbsent
    );
    assert_eq!(std::fs::metadata(catalog.path()).unwrap().len(), 0);
    // A lease of an artifact never published refuses and writes no row.
    assert!(matches!(
        insert(&catalog, &l),
        Err(CatalogError::ArtifactNotAvailable { state: None, .. })
    ));
    assert_eq!(raw_metadata(catalog.path()), None);
    available(&catalog, 1);
    assert_eq!(insert(&catalog, &l).unwrap(), LeaseInsert::Inserted);
    assert_eq!(
        raw_metadata(catalog.path()).unwrap().schema_id,
        STORAGE_CATALOG_SCHEMA_ID
    );
}

#[test]
fn a_new_database_without_tables_is_initialised_by_the_first_write() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = StorageCatalog::at(dir.path());
    std::fs::create_dir(dir.path().join(CATALOG_DIR)).unwrap();
    drop(Database::create(catalog.path()).unwrap());
    let l = lease(1, 2, 3);
    // Reads and a removal see an empty catalog and write nothing.
    assert!(!catalog.lease_held(&l).unwrap());
    assert_eq!(catalog.leases().unwrap(), vec![]);
    assert_eq!(
        catalog.remove_lease(&l, released).unwrap(),
        LeaseRemoval::AlreadyAbsent
    );
    assert_eq!(raw_metadata(catalog.path()), None);
    available(&catalog, 1);
    assert!(raw_metadata(catalog.path()).is_some());
    assert_eq!(insert(&catalog, &l).unwrap(), LeaseInsert::Inserted);
    assert_eq!(catalog.leases().unwrap(), vec![l]);
}

#[test]
fn the_first_write_creates_a_private_directory_and_v1_metadata_and_closes() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = StorageCatalog::at(dir.path());
    available(&catalog, 1);
    insert(&catalog, &lease(1, 2, 3)).unwrap();
    let mode = std::fs::metadata(dir.path().join(CATALOG_DIR))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700);
    assert!(catalog.lock_path().is_file());
    // redb flocks its file while open: opening it here proves the section
    // closed it (OR-6).
    assert_eq!(
        raw_metadata(catalog.path()),
        Some(StoreMetadata {
            schema_id: STORAGE_CATALOG_SCHEMA_ID.to_owned(),
            schema_version: STORAGE_CATALOG_SCHEMA_VERSION,
        })
    );
}

#[test]
fn a_missing_storage_root_is_an_error_naming_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = StorageCatalog::at(&dir.path().join("absent"));
    let err = insert(&catalog, &lease(1, 2, 3)).unwrap_err();
    assert!(matches!(err, CatalogError::CreateDir { .. }), "{err}");
    assert!(err.to_string().contains("absent/catalog"), "{err}");
}

#[test]
fn a_catalog_directory_that_is_a_symlink_or_a_file_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let linked = dir.path().join("linked");
    std::fs::create_dir(&linked).unwrap();
    std::os::unix::fs::symlink(&real, linked.join(CATALOG_DIR)).unwrap();
    let catalog = StorageCatalog::at(&linked);
    let l = lease(1, 2, 3);
    for err in [
        insert(&catalog, &l).unwrap_err(),
        catalog.lease_held(&l).unwrap_err(),
        catalog.leases().unwrap_err(),
    ] {
        assert!(matches!(err, CatalogError::DirSymlink { .. }), "{err}");
        assert!(err.to_string().contains("linked/catalog"), "{err}");
    }
    assert_eq!(std::fs::read_dir(&real).unwrap().count(), 0);

    let filed = dir.path().join("filed");
    std::fs::create_dir(&filed).unwrap();
    std::fs::write(filed.join(CATALOG_DIR), b"").unwrap();
    let catalog = StorageCatalog::at(&filed);
    for err in [
        insert(&catalog, &l).unwrap_err(),
        catalog.remove_lease(&l, released).unwrap_err(),
    ] {
        assert!(matches!(err, CatalogError::DirNotDirectory { .. }), "{err}");
        assert!(err.to_string().contains("filed/catalog"), "{err}");
    }
}

/// A leases table of the wrong type: opening it as the lease table fails,
/// so an operation that reached the leases table reports that instead.
const POISON: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("artifact_leases");

/// The metadata table of a forged catalog.
#[derive(Clone)]
enum Forged {
    NoTable,
    NoRow,
    Row(Vec<u8>),
}

/// Writes a catalog with the given metadata and a poisoned leases table.
fn forge(path: &Path, metadata: &Forged) {
    let db = Database::create(path).unwrap();
    let txn = db.begin_write().unwrap();
    if !matches!(metadata, Forged::NoTable) {
        let mut table = txn.open_table(tables::METADATA).unwrap();
        if let Forged::Row(bytes) = metadata {
            table
                .insert(tables::METADATA_KEY, bytes.as_slice())
                .unwrap();
        }
    }
    txn.open_table(POISON)
        .unwrap()
        .insert("row", [0xffu8; 3].as_slice())
        .unwrap();
    txn.commit().unwrap();
}

fn metadata(id: &str, version: u32) -> Forged {
    Forged::Row(
        codec::encode(
            "m",
            &StoreMetadata {
                schema_id: id.to_owned(),
                schema_version: version,
            },
        )
        .unwrap(),
    )
}

/// Every operation's error on one catalog.
fn every_error(catalog: &StorageCatalog) -> Vec<(&'static str, CatalogError)> {
    let l = lease(1, 2, 3);
    vec![
        ("insert", insert(catalog, &l).unwrap_err()),
        ("remove", catalog.remove_lease(&l, released).unwrap_err()),
        ("held", catalog.lease_held(&l).unwrap_err()),
        ("leases", catalog.leases().unwrap_err()),
    ]
}

/// Which refusal a forged catalog must produce.
type Expect = fn(&CatalogError) -> bool;

#[test]
fn unversioned_unknown_older_and_newer_catalogs_refuse_before_rows() {
    let cases: Vec<(&str, Forged, Expect)> = vec![
        ("no metadata table", Forged::NoTable, |e| {
            matches!(e, CatalogError::Unversioned { .. })
        }),
        ("no metadata row", Forged::NoRow, |e| {
            matches!(e, CatalogError::Unversioned { .. })
        }),
        ("malformed", Forged::Row(vec![0x80]), |e| {
            matches!(e, CatalogError::MetadataMalformed { .. })
        }),
        (
            "domain store",
            metadata(DOMAIN_STORE_SCHEMA_ID, 1),
            |e| matches!(e, CatalogError::UnknownIdentity { found, .. } if found == DOMAIN_STORE_SCHEMA_ID),
        ),
        ("older", metadata(STORAGE_CATALOG_SCHEMA_ID, 0), |e| {
            matches!(e, CatalogError::OlderVersion { found: 0, .. })
        }),
        ("newer", metadata(STORAGE_CATALOG_SCHEMA_ID, 2), |e| {
            matches!(e, CatalogError::NewerVersion { found: 2, .. })
        }),
        ("max", metadata(STORAGE_CATALOG_SCHEMA_ID, u32::MAX), |e| {
            matches!(
                e,
                CatalogError::NewerVersion {
                    found: u32::MAX,
                    ..
                }
            )
        }),
    ];
    for (name, meta, expected) in cases {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(CATALOG_DIR)).unwrap();
        let catalog = StorageCatalog::at(dir.path());
        forge(catalog.path(), &meta);
        for (op, err) in every_error(&catalog) {
            assert!(expected(&err), "{name}, {op}: {err}");
            assert!(
                err.to_string()
                    .contains(&catalog.path().display().to_string()),
                "{name}, {op}: {err}"
            );
        }
        // The refused insert wrote nothing (no metadata was made up).
        let expected_metadata = match meta {
            Forged::Row(bytes) => Some(bytes),
            Forged::NoTable | Forged::NoRow => None,
        };
        assert_eq!(
            raw_metadata_bytes(catalog.path()),
            expected_metadata,
            "{name}"
        );
    }
    // Control: with v1 metadata every operation reaches the poisoned leases
    // table and reports it - so the refusals above came before any row.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join(CATALOG_DIR)).unwrap();
    let catalog = StorageCatalog::at(dir.path());
    forge(
        catalog.path(),
        &metadata(STORAGE_CATALOG_SCHEMA_ID, STORAGE_CATALOG_SCHEMA_VERSION),
    );
    for (op, err) in every_error(&catalog) {
        assert!(
            matches!(
                err,
                CatalogError::Redb {
                    step: "open leases table",
                    ..
                }
            ),
            "{op}: {err}"
        );
    }
    // A file that is not a redb database at all.
    std::fs::write(catalog.path(), b"not a database").unwrap();
    for (op, err) in every_error(&catalog) {
        assert!(matches!(err, CatalogError::Open { .. }), "{op}: {err}");
    }
}

#[test]
fn the_lock_wait_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let wait = Duration::from_millis(100);
    let catalog = StorageCatalog::at(dir.path()).with_lock_wait(wait);
    let l = lease(1, 2, 3);
    available(&catalog, 1);
    insert(&catalog, &l).unwrap();
    // Another open file description holds the lock, as another coordinator would.
    let holder = File::open(catalog.lock_path()).unwrap();
    rustix::fs::flock(&holder, rustix::fs::FlockOperation::LockExclusive).unwrap();
    let started = Instant::now();
    let err = catalog.remove_lease(&l, released).unwrap_err();
    let elapsed = started.elapsed();
    match &err {
        CatalogError::LockTimeout { path, waited } => {
            assert_eq!(path, catalog.lock_path());
            assert_eq!(*waited, wait);
        }
        other => panic!("expected LockTimeout, got {other}"),
    }
    assert!(err.to_string().contains("catalog.lock"), "{err}");
    assert!(elapsed >= wait, "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
    assert!(matches!(
        catalog.leases(),
        Err(CatalogError::LockTimeout { .. })
    ));
    drop(holder);
    // Released: the lease was never removed.
    assert!(catalog.lease_held(&l).unwrap());
}

#[test]
fn concurrent_inserts_from_two_threads_all_land() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_owned();
    let per_thread = 16u64;
    let barrier = Arc::new(Barrier::new(2));
    available(&StorageCatalog::at(&root), 7);
    let threads: Vec<_> = [1u8, 2u8]
        .into_iter()
        .map(|domain| {
            let root = root.clone();
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                let catalog = StorageCatalog::at(&root);
                barrier.wait();
                for generation in 0..per_thread {
                    assert_eq!(
                        insert(&catalog, &lease(7, domain, generation)).unwrap(),
                        LeaseInsert::Inserted
                    );
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let mut expected: Vec<_> = [1u8, 2u8]
        .into_iter()
        .flat_map(|d| (0..per_thread).map(move |g| lease(7, d, g)))
        .collect();
    expected.sort();
    assert_eq!(StorageCatalog::at(&root).leases().unwrap(), expected);
}

#[test]
fn the_lease_count_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = StorageCatalog::at(dir.path()).with_max_leases(3);
    available(&catalog, 1);
    for g in 0..3 {
        insert(&catalog, &lease(1, 2, g)).unwrap();
    }
    let err = insert(&catalog, &lease(1, 2, 3)).unwrap_err();
    assert!(matches!(err, CatalogError::Full { max: 3, .. }), "{err}");
    // Re-inserting a held lease at the bound is still AlreadyHeld.
    assert_eq!(
        insert(&catalog, &lease(1, 2, 0)).unwrap(),
        LeaseInsert::AlreadyHeld
    );
    assert_eq!(catalog.leases().unwrap().len(), 3);
    // A catalog holding more than the bound (written by another build)
    // refuses to be listed.
    {
        let db = Database::open(catalog.path()).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(tables::LEASES)
            .unwrap()
            .insert(tables::lease_key(&lease(1, 2, 3)), ())
            .unwrap();
        txn.commit().unwrap();
    }
    let err = catalog.leases().unwrap_err();
    assert!(
        matches!(err, CatalogError::TooManyLeases { max: 3, .. }),
        "{err}"
    );
    assert!(catalog.lease_held(&lease(1, 2, 3)).unwrap());
}

/// One `lazaret state gc` at a time; its lock does not block the catalog.
#[test]
fn one_gc_runs_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = StorageCatalog::at(dir.path()).with_lock_wait(Duration::from_millis(50));
    let held = catalog.gc_lock().unwrap();
    let err = catalog.gc_lock().unwrap_err();
    assert!(
        matches!(&err, CatalogError::LockTimeout { path, .. } if path.ends_with(GC_LOCK_FILE)),
        "{err}"
    );
    assert_eq!(catalog.leases().unwrap(), vec![]);
    drop(held);
    drop(catalog.gc_lock().unwrap());
}
