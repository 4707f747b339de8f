#![allow(clippy::unwrap_used)] // tests fail by panicking
use super::super::tests::{available, insert, operation, owned, released};
use super::*;
use crate::storage_catalog::{ArtifactLease, LeaseInsert, TRACES_DIR};
use lazaret_generated::prepared_lower::{StageStates, WorkerStates};
use lazaret_runtime::records::ids::{DomainId, GenerationId};

fn lease(artifact: u8, domain: u8, generation: u64) -> ArtifactLease {
    ArtifactLease {
        artifact: PreparedArtifactId([artifact; 32]),
        domain: DomainId([domain; 32]),
        generation: GenerationId(generation),
    }
}

fn placed(inode: u64) -> Published {
    Published {
        path: HostPath::new(b"/s/prepared/a".to_vec()).unwrap(),
        device: 1,
        inode,
    }
}

/// RecordPrepareIntent -> CreateStage -> RecordStageOwned ->
/// PublishArtifact as one run of the model, and what each step refuses on
/// the way (schemas.md "Storage Catalog" paragraph).
#[test]
fn an_operation_publishes_only_from_owned_and_holds_the_artifacts_one_slot() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = StorageCatalog::at(dir.path());
    let first = operation(1, 9);
    let art = first.expected_artifact_id;
    let mut run = catalog.run(art);
    assert_eq!(
        catalog.record_prepare_intent(&first, &mut run).unwrap(),
        PrepareIntent::Recorded
    );
    // A second operation for the same artifact finds the first.
    assert_eq!(
        catalog
            .record_prepare_intent(&operation(2, 9), &mut catalog.run(art))
            .unwrap(),
        PrepareIntent::Occupied(first.clone())
    );
    // Only an Owned operation publishes; the publication step never runs.
    let mut ran = false;
    let err = catalog
        .publish_artifact(
            first.operation_id,
            |_| {
                ran = true;
                Ok(placed(10))
            },
            &mut run,
        )
        .unwrap_err();
    assert!(
        matches!(err, CatalogError::OperationNotOwned { .. }),
        "{err}"
    );
    assert!(!ran);
    // The stage before its record: the model refuses the record first.
    assert!(matches!(
        catalog.record_stage_owned(first.operation_id, 1, 10, &mut run),
        Err(CatalogError::OperationChanged { .. })
    ));
    run.took(Step::CreateStage, Some(StageStates::Own)).unwrap();
    let owned = catalog
        .record_stage_owned(first.operation_id, 1, 10, &mut run)
        .unwrap();
    assert_eq!(owned.evidence(), Ok(Some((1, 10))));
    // Repeating it with the same evidence is a resumed step; other
    // evidence is refused.
    assert_eq!(
        catalog
            .record_stage_owned(first.operation_id, 1, 10, &mut run)
            .unwrap(),
        owned
    );
    assert!(matches!(
        catalog.record_stage_owned(first.operation_id, 1, 11, &mut run),
        Err(CatalogError::OperationChanged { .. })
    ));
    // A failed publication step leaves the Owned operation and no row.
    let err = catalog
        .publish_artifact(
            first.operation_id,
            |op| {
                Err(CatalogError::Publish {
                    path: op.stage_path.to_string().into(),
                    source: std::io::ErrorKind::AlreadyExists.into(),
                })
            },
            &mut run,
        )
        .unwrap_err();
    assert!(matches!(err, CatalogError::Publish { .. }), "{err}");
    assert_eq!(catalog.prepare_operations().unwrap(), vec![owned.clone()]);
    assert_eq!(catalog.artifact(&art).unwrap(), None);
    let row = catalog
        .publish_artifact(
            first.operation_id,
            |op| {
                assert_eq!(op, &owned);
                Ok(placed(10))
            },
            &mut run,
        )
        .unwrap();
    assert_eq!(row.state, ArtifactState::Available);
    assert_eq!((row.device, row.inode), (1, 10));
    assert_eq!(row.policy_id, first.policy_id);
    assert_eq!(catalog.prepare_operations().unwrap(), vec![]);
    assert_eq!(catalog.artifacts().unwrap(), vec![row.clone()]);
    // The artifact is published: a new operation is not recorded.
    assert_eq!(
        catalog
            .record_prepare_intent(&operation(3, 9), &mut catalog.run(art))
            .unwrap(),
        PrepareIntent::Published(row)
    );
    assert_eq!(catalog.prepare_operations().unwrap(), vec![]);
    // A new operation must be an Intent without evidence.
    let mut shaped = operation(4, 8);
    shaped.device = Some(1);
    assert!(matches!(
        catalog.record_prepare_intent(&shaped, &mut catalog.run(shaped.expected_artifact_id)),
        Err(CatalogError::OperationNotIntent { .. })
    ));
}

/// Every step the run took is one line of its trace, which replays
/// against the PreparedLower model.
#[test]
fn a_runs_trace_replays() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = StorageCatalog::at(dir.path());
    available(&catalog, 3);
    let traces: Vec<_> = std::fs::read_dir(dir.path().join("catalog").join(TRACES_DIR))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(traces.len(), 1, "{traces:?}");
    let text = std::fs::read_to_string(&traces[0]).unwrap();
    let actions: Vec<String> = text
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["action"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(
        actions,
        [
            "Init",
            "RecordPrepareIntent",
            "CreateStage",
            "RecordStageOwned",
            "PublishArtifact"
        ]
    );
    match lazaret_runtime::replay::replay_text("t", &text).unwrap() {
        lazaret_runtime::replay::Outcome::Conforms { steps, .. } => assert_eq!(steps, 4),
        other => panic!("{other:?}"),
    }
}

/// OR-7: a shared artifact is reclaimed only after the last lease of any
/// Domain is gone; once Reclaiming, it is never leased or prepared over.
#[test]
fn a_shared_artifact_is_reclaimed_only_after_its_last_lease() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = StorageCatalog::at(dir.path());
    let row = available(&catalog, 3);
    let id = row.prepared_artifact_id;
    let (first, second) = (lease(3, 1, 1), lease(3, 2, 5));
    assert_eq!(insert(&catalog, &first).unwrap(), LeaseInsert::Inserted);
    assert_eq!(insert(&catalog, &second).unwrap(), LeaseInsert::Inserted);
    // Another artifact's lease does not count.
    available(&catalog, 4);
    insert(&catalog, &lease(4, 1, 1)).unwrap();
    assert_eq!(
        catalog.begin_reclaim(&mut catalog.run(id)).unwrap(),
        Reclaim::Leased { leases: 2 }
    );
    catalog.remove_lease(&first, released).unwrap();
    assert_eq!(
        catalog.begin_reclaim(&mut catalog.run(id)).unwrap(),
        Reclaim::Leased { leases: 1 }
    );
    assert_eq!(catalog.artifact(&id).unwrap(), Some(row.clone()));
    catalog.remove_lease(&second, released).unwrap();
    let reclaiming = PreparedArtifact {
        state: ArtifactState::Reclaiming,
        ..row
    };
    assert_eq!(
        catalog.begin_reclaim(&mut catalog.run(id)).unwrap(),
        Reclaim::Started(reclaiming.clone())
    );
    let mut run = catalog.run(id);
    assert_eq!(
        catalog.begin_reclaim(&mut run).unwrap(),
        Reclaim::Resumed(reclaiming.clone())
    );
    let err = insert(&catalog, &first).unwrap_err();
    assert!(
        matches!(
            err,
            CatalogError::ArtifactNotAvailable {
                state: Some(ArtifactState::Reclaiming),
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("being reclaimed"), "{err}");
    assert_eq!(
        catalog
            .record_prepare_intent(&operation(9, 3), &mut catalog.run(id))
            .unwrap(),
        PrepareIntent::Reclaiming(reclaiming)
    );
    run.check(Step::RemoveArtifact).unwrap();
    catalog.remove_artifact(&mut run).unwrap();
    // Removed: the model has no second removal.
    assert!(matches!(
        catalog.remove_artifact(&mut run),
        Err(CatalogError::NotReclaiming { .. })
    ));
    assert_eq!(catalog.artifact(&id).unwrap(), None);
    assert_eq!(
        catalog.begin_reclaim(&mut catalog.run(id)).unwrap(),
        Reclaim::Absent
    );
    // Gone: it may be prepared again.
    assert_eq!(
        catalog
            .record_prepare_intent(&operation(9, 3), &mut catalog.run(id))
            .unwrap(),
        PrepareIntent::Recorded
    );
}

#[test]
fn an_available_artifacts_row_is_never_removed() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = StorageCatalog::at(dir.path());
    let row = available(&catalog, 3);
    assert!(matches!(
        catalog.remove_artifact(&mut catalog.run(row.prepared_artifact_id)),
        Err(CatalogError::NotReclaiming { .. })
    ));
    assert_eq!(catalog.artifacts().unwrap(), vec![row]);
}

/// ForgetPrepareOperation removes only the exact row it was given, and
/// only once the model has the operation's worker gone and its exact stage
/// removed.
#[test]
fn forgetting_an_operation_needs_its_exact_row_and_its_stage_gone() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = StorageCatalog::at(dir.path());
    let intent_row = operation(1, 1);
    let art = intent_row.expected_artifact_id;
    let mut run = owned(&catalog, &intent_row, 7);
    let owned_row = catalog.prepare_operations().unwrap().remove(0);
    // The Intent row it saw is no longer there.
    assert!(matches!(
        catalog.forget_prepare_operation(&intent_row, &mut run),
        Err(CatalogError::OperationChanged { .. })
    ));
    // Its worker runs and its stage is there: not forgotten.
    let err = catalog
        .forget_prepare_operation(&owned_row, &mut run)
        .unwrap_err();
    assert!(matches!(err, CatalogError::Model { .. }), "{err}");
    let mut recovery = catalog
        .run(art)
        .knowing(WorkerStates::Dead, StageStates::Removed);
    catalog
        .forget_prepare_operation(&owned_row, &mut recovery)
        .unwrap();
    assert_eq!(catalog.prepare_operations().unwrap(), vec![]);
    assert!(matches!(
        catalog.forget_prepare_operation(&owned_row, &mut recovery),
        Err(CatalogError::OperationMissing { .. })
    ));
}

/// A row whose evidence contradicts its stage state (written by something
/// else) refuses to be read.
#[test]
fn an_operation_row_with_half_its_evidence_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = StorageCatalog::at(dir.path());
    catalog
        .record_prepare_intent(
            &operation(1, 1),
            &mut catalog.run(PreparedArtifactId([1; 32])),
        )
        .unwrap();
    {
        let mut forged = operation(1, 1);
        forged.device = Some(3);
        let db = redb::Database::open(catalog.path()).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(tables::OPERATIONS)
            .unwrap()
            .insert(
                &forged.operation_id.0,
                codec::encode("op", &forged).unwrap().as_slice(),
            )
            .unwrap();
        txn.commit().unwrap();
    }
    let err = catalog.prepare_operations().unwrap_err();
    assert!(matches!(err, CatalogError::OperationShape { .. }), "{err}");
}

/// A launch leases only the tree it checked: an artifact reclaimed and
/// prepared again since (another device or inode) is refused.
#[test]
fn a_lease_names_the_tree_the_launch_checked() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = StorageCatalog::at(dir.path());
    available(&catalog, 3);
    let err = catalog
        .insert_lease(&lease(3, 1, 1), super::super::tests::intent(), (1, 999))
        .unwrap_err();
    assert!(
        matches!(err, CatalogError::ArtifactReplaced { .. }),
        "{err}"
    );
    assert_eq!(catalog.leases().unwrap(), vec![]);
    assert_eq!(
        insert(&catalog, &lease(3, 1, 1)).unwrap(),
        LeaseInsert::Inserted
    );
}
