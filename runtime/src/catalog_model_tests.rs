use super::*;
use crate::replay::{replay_text, Outcome};

const ART: PreparedArtifactId = PreparedArtifactId([7; 32]);
const ME: DomainId = DomainId([1; 32]);
const OTHER: DomainId = DomainId([2; 32]);

fn rows(
    artifact: Option<ArtifactState>,
    operation: Option<PrepareStageState>,
    leases: &[(DomainId, u64)],
) -> ArtifactRows {
    ArtifactRows {
        artifact,
        operation,
        leases: leases.iter().map(|(d, g)| (*d, GenerationId(*g))).collect(),
    }
}

fn acting(pl: PlStates, sa: SaStates, rs: RsStates) -> ActingDomain {
    ActingDomain {
        domain: ME,
        generation: GenerationId(5),
        record: DomainRecord {
            hc: HcStates::Running,
            rs,
            pl,
            names_artifact: true,
            sa,
            mount: MountStates::Absent,
        },
    }
}

/// The instance of an operation that knows nothing of the artifact's
/// worker and acts for no Domain.
fn started(rows: &ArtifactRows) -> Result<CatalogModel, CatalogModelError> {
    CatalogModel::start(ART, rows, None, None)
}

/// Replays the header and lines as `lazaret trace replay` would.
fn replays(model: &CatalogModel, lines: &[TraceLine]) -> u64 {
    let mut text = format!("{}\n", model.header().to_json());
    for line in lines {
        text.push_str(&line.to_json());
        text.push('\n');
    }
    match replay_text("catalog.jsonl", &text) {
        Ok(Outcome::Conforms { steps, .. }) => steps,
        other => panic!("the trace does not replay: {other:?}\n{text}"),
    }
}

fn disabled(e: CatalogModelError) -> bool {
    matches!(e, CatalogModelError::Step(CoreError::Disabled { .. }))
}

#[test]
fn a_preparation_is_a_run_of_the_model_and_replays() -> Result<(), CatalogModelError> {
    let mut m = started(&rows(None, None, &[]))?;
    let mut lines = Vec::new();
    m.check(Step::RecordPrepareIntent)?;
    let intent = rows(None, Some(PrepareStageState::Intent), &[]);
    lines.push(m.take(Step::RecordPrepareIntent, Some(&intent), None)?);
    // Nothing is written into a stage before it is recorded Owned.
    assert!(disabled(m.check(Step::PublishArtifact).unwrap_err()));
    lines.push(m.take(Step::CreateStage, None, Some(StageStates::Own))?);
    m.agrees(&intent)?;
    let owned = rows(None, Some(PrepareStageState::Owned), &[]);
    lines.push(m.take(Step::RecordStageOwned, Some(&owned), None)?);
    let published = rows(Some(ArtifactState::Available), None, &[]);
    lines.push(m.take(Step::PublishArtifact, Some(&published), None)?);
    assert_eq!(replays(&m, &lines), 4);
    Ok(())
}

#[test]
fn a_published_or_occupied_artifact_is_not_prepared_again() -> Result<(), CatalogModelError> {
    let m = started(&rows(Some(ArtifactState::Available), None, &[]))?;
    assert!(disabled(m.check(Step::RecordPrepareIntent).unwrap_err()));
    let m = started(&rows(None, Some(PrepareStageState::Owned), &[]))?;
    assert!(disabled(m.check(Step::RecordPrepareIntent).unwrap_err()));
    // Another process's operation is not recovered while its worker runs.
    assert!(disabled(m.check(Step::RecoverAbandonedStage).unwrap_err()));
    Ok(())
}

#[test]
fn a_failed_preparation_recovers_its_own_stage() -> Result<(), CatalogModelError> {
    let owned = rows(None, Some(PrepareStageState::Owned), &[]);
    let mut m = CatalogModel::start(
        ART,
        &owned,
        Some((WorkerStates::Running, StageStates::Own)),
        None,
    )?;
    // The stage of a live worker is never removed.
    assert!(disabled(m.check(Step::RecoverAbandonedStage).unwrap_err()));
    let mut lines = vec![m.take(Step::PrepareWorkerCrash, None, None)?];
    lines.push(m.take(
        Step::RecoverAbandonedStage,
        None,
        Some(StageStates::Removed),
    )?);
    lines.push(m.take(
        Step::ForgetPrepareOperation,
        Some(&rows(None, None, &[])),
        None,
    )?);
    assert_eq!(replays(&m, &lines), 3);
    Ok(())
}

#[test]
fn an_abandoned_intent_is_forgotten_and_a_foreign_stage_retained() -> Result<(), CatalogModelError>
{
    let intent = rows(None, Some(PrepareStageState::Intent), &[]);
    let mut m = CatalogModel::start(
        ART,
        &intent,
        Some((WorkerStates::Dead, StageStates::Absent)),
        None,
    )?;
    // An Intent operation has no recorded stage to remove.
    assert!(disabled(m.check(Step::RecoverAbandonedStage).unwrap_err()));
    let line = m.take(
        Step::ForgetAbandonedIntent,
        Some(&rows(None, None, &[])),
        None,
    )?;
    assert_eq!(replays(&m, &[line]), 1);
    for (op, stage) in [
        (PrepareStageState::Intent, StageStates::Foreign),
        (PrepareStageState::Owned, StageStates::Foreign),
    ] {
        let m = CatalogModel::start(
            ART,
            &rows(None, Some(op), &[]),
            Some((WorkerStates::Dead, stage)),
            None,
        )?;
        assert!(disabled(m.check(Step::RecoverAbandonedStage).unwrap_err()));
        assert!(disabled(m.check(Step::ForgetAbandonedIntent).unwrap_err()));
    }
    Ok(())
}

#[test]
fn reclamation_waits_for_every_lease_and_replays() -> Result<(), CatalogModelError> {
    let leased = rows(Some(ArtifactState::Available), None, &[(OTHER, 3), (ME, 9)]);
    let m = started(&leased)?;
    assert!(disabled(m.check(Step::BeginReclaim).unwrap_err()));
    let mut m = started(&rows(Some(ArtifactState::Available), None, &[]))?;
    let reclaiming = rows(Some(ArtifactState::Reclaiming), None, &[]);
    let mut lines = vec![m.take(Step::BeginReclaim, Some(&reclaiming), None)?];
    // The absent row of an artifact seen Reclaiming is the model's Removed.
    lines.push(m.take(Step::RemoveArtifact, Some(&rows(None, None, &[])), None)?);
    assert_eq!(m.state().artifact[0], ArtifactStates::Removed);
    assert_eq!(replays(&m, &lines), 2);
    Ok(())
}

#[test]
fn a_lease_is_inserted_only_for_an_available_artifact_and_its_intent(
) -> Result<(), CatalogModelError> {
    let me = acting(PlStates::Intent, SaStates::None, RsStates::Running);
    let shared = rows(Some(ArtifactState::Available), None, &[(OTHER, 3)]);
    let mut m = CatalogModel::start(ART, &shared, None, Some(&me))?;
    let after = rows(Some(ArtifactState::Available), None, &[(OTHER, 3), (ME, 5)]);
    let line = m.take(Step::InsertCatalogLease, Some(&after), None)?;
    assert_eq!(replays(&m, &[line]), 1);

    let m = CatalogModel::start(
        ART,
        &rows(Some(ArtifactState::Reclaiming), None, &[]),
        None,
        Some(&me),
    )?;
    assert!(disabled(m.check(Step::InsertCatalogLease).unwrap_err()));
    let held = acting(PlStates::LeaseHeld, SaStates::None, RsStates::Running);
    let m = CatalogModel::start(
        ART,
        &rows(Some(ArtifactState::Available), None, &[(ME, 5)]),
        None,
        Some(&held),
    )?;
    assert!(disabled(m.check(Step::InsertCatalogLease).unwrap_err()));
    Ok(())
}

#[test]
fn a_lease_is_removed_only_after_its_release_intent() -> Result<(), CatalogModelError> {
    let leased = rows(Some(ArtifactState::Available), None, &[(ME, 5)]);
    let held = acting(PlStates::LeaseHeld, SaStates::Clean, RsStates::Absent);
    let m = CatalogModel::start(ART, &leased, None, Some(&held))?;
    assert!(disabled(m.check(Step::RemoveCatalogLease).unwrap_err()));
    let release = acting(PlStates::ReleaseIntent, SaStates::Clean, RsStates::Absent);
    let mut m = CatalogModel::start(ART, &leased, None, Some(&release))?;
    let line = m.take(
        Step::RemoveCatalogLease,
        Some(&rows(Some(ArtifactState::Available), None, &[])),
        None,
    )?;
    assert_eq!(replays(&m, &[line]), 1);
    Ok(())
}

#[test]
fn rows_the_model_forbids_are_refused_at_the_start() {
    // A lease naming an artifact under reclamation (OR-7).
    let e = started(&rows(Some(ArtifactState::Reclaiming), None, &[(OTHER, 1)])).unwrap_err();
    assert!(
        matches!(e, CatalogModelError::Projection { invariant, .. } if invariant == "Inv_OR7_NoReclaimWhileLeased"),
        "{e}"
    );
    // The acting Domain's lease while its record is clean (FR-21).
    let clean = acting(PlStates::Clean, SaStates::Clean, RsStates::Absent);
    let e = CatalogModel::start(
        ART,
        &rows(Some(ArtifactState::Available), None, &[(ME, 5)]),
        None,
        Some(&clean),
    )
    .unwrap_err();
    assert!(matches!(e, CatalogModelError::Projection { .. }), "{e}");
}

#[test]
fn a_change_under_the_operation_and_a_wrong_read_back_are_refused() -> Result<(), CatalogModelError>
{
    let mut m = started(&rows(None, None, &[]))?;
    let intent = rows(None, Some(PrepareStageState::Intent), &[]);
    m.take(Step::RecordPrepareIntent, Some(&intent), None)?;
    let e = m
        .agrees(&rows(
            Some(ArtifactState::Available),
            Some(PrepareStageState::Intent),
            &[],
        ))
        .unwrap_err();
    assert!(
        matches!(
            e,
            CatalogModelError::Changed {
                variable: "artifact",
                ..
            }
        ),
        "{e}"
    );
    let e = m
        .agrees(&rows(None, Some(PrepareStageState::Intent), &[(OTHER, 1)]))
        .unwrap_err();
    assert!(
        matches!(e, CatalogModelError::UnexpectedLease { .. }),
        "{e}"
    );
    // RecordStageOwned whose transaction still shows Intent.
    m.take(Step::CreateStage, None, Some(StageStates::Own))?;
    let e = m
        .take(Step::RecordStageOwned, Some(&intent), None)
        .unwrap_err();
    assert!(matches!(e, CatalogModelError::Observed { .. }), "{e}");
    Ok(())
}

#[test]
fn a_lease_step_needs_the_domain_it_acts_for() -> Result<(), CatalogModelError> {
    let m = started(&rows(Some(ArtifactState::Available), None, &[]))?;
    assert!(matches!(
        m.check(Step::InsertCatalogLease),
        Err(CatalogModelError::NoDomain { .. })
    ));
    Ok(())
}
