//! What a Host Coordinator knows of its generation when it takes a
//! Storage Catalog lease step (spec 3.6 lease-acquisition step 2 and
//! release step 4): the PreparedLower model's view of its Domain, read
//! from its own Domain Store and from its Lazaret model's process state
//! (the refinement mapping between the two models).
use crate::domain_store::{DomainStore, StoreError};
use lazaret_generated::lazaret::{self, CoordinatorsId};
use lazaret_generated::prepared_lower::{HcStates, MountStates, PlStates, RsStates, SaStates};
use lazaret_runtime::catalog_model::DomainRecord;
use lazaret_runtime::records::ids::{GenerationId, PreparedArtifactId};
use lazaret_runtime::records::participant::{
    Participant, ParticipantOwnership, ParticipantRole, ParticipantState,
};

/// The Domain as coordinator `me` of Lazaret state `state` and the Domain
/// Store's records of `generation` show it, for a lease step on `artifact`.
pub(super) fn domain_record(
    store: &DomainStore<'_>,
    generation: GenerationId,
    artifact: PreparedArtifactId,
    state: &lazaret::State,
    me: CoordinatorsId,
) -> Result<DomainRecord, StoreError> {
    let lower = store.participant(generation, ParticipantRole::PreparedLower)?;
    let anchor = store.participant(generation, ParticipantRole::StateAnchor)?;
    let names_artifact = matches!(
        &lower,
        Some(Participant {
            ownership: Some(ParticipantOwnership::PreparedLower(p)),
            ..
        }) if p.prepared_artifact_id == Some(artifact)
    );
    let pl = match lower.map(|p| p.state) {
        None => PlStates::None,
        Some(ParticipantState::Intent) => PlStates::Intent,
        Some(
            ParticipantState::LeaseHeld | ParticipantState::Prepared | ParticipantState::Committed,
        ) => PlStates::LeaseHeld,
        Some(ParticipantState::ReleaseIntent) => PlStates::ReleaseIntent,
        Some(ParticipantState::Clean) => PlStates::Clean,
    };
    let sa = match anchor.map(|p| p.state) {
        None => SaStates::None,
        Some(ParticipantState::Intent) => SaStates::Intent,
        Some(
            ParticipantState::LeaseHeld | ParticipantState::Prepared | ParticipantState::Committed,
        ) => SaStates::Prepared,
        Some(ParticipantState::ReleaseIntent) => SaStates::ReleaseIntent,
        Some(ParticipantState::Clean) => SaStates::Clean,
    };
    // A clean (or never acquired) anchor was proved unmounted before it was
    // recorded so (spec 3.6 release step 3); any other is taken as mounted,
    // which no lease step's guard allows to release.
    let mount = match sa {
        SaStates::None | SaStates::Clean => MountStates::Absent,
        _ => MountStates::Mounted,
    };
    // A coordinator recovering a generation (bootstrapping, or leading
    // with the Recovering decision) is the model's bootstrap coordinator.
    let hc = match state.hc.get(me.index()) {
        Some(lazaret::Hc::Bootstrapping) => HcStates::Recovering,
        Some(lazaret::Hc::Leading | lazaret::Hc::Serving)
            if state.decision == lazaret::Decision::Recovering =>
        {
            HcStates::Recovering
        }
        Some(lazaret::Hc::Leading | lazaret::Hc::Serving) => HcStates::Running,
        _ => HcStates::Absent,
    };
    let rs = match state.rs {
        lazaret::Rs::Absent => RsStates::Absent,
        lazaret::Rs::Running => RsStates::Running,
        lazaret::Rs::LeaseLost => RsStates::Orphaned,
    };
    Ok(DomainRecord {
        hc,
        rs,
        pl,
        names_artifact,
        sa,
        mount,
    })
}
