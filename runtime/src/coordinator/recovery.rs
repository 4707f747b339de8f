//! The recovery of a dead coordinator's generation, decided by the core
//! (spec 3.3 recovery; FR-7, FR-17): the next step, from the model state of
//! the trace being continued and what the recovering coordinator has
//! established. Sans-IO: the effects side proves processes absent and
//! performs each step's write; nothing here reads a process or the store.

use lazaret_generated::lazaret::{Action, Decision, Hc, RecordIdentity};

use super::host_model::HostModel;

/// What the recovering coordinator has established so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Recovering {
    /// The Domain Store disagrees with the trace beyond one untraced step
    /// of the dead coordinator: the record stopped matching.
    pub store_differs: bool,
    /// The dead runtime's recorded processes are proved absent by their
    /// exact identities: `Some(runsc_outlived)`, where `runsc_outlived`
    /// says runsc was still present when RS was already gone.
    pub runtime_absent: Option<bool>,
}

/// What the recovering coordinator does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecoveryNext {
    /// Take this step (with its effect).
    Step(Action),
    /// Prove the recorded runtime absent first (no step is taken before
    /// the lease-loss steps say what was proved).
    ProveRuntimeAbsent,
    /// Nothing is left: the generation is retired, the record was refused
    /// (`RefuseMismatchedRecord`), or the trace cannot say that the record
    /// mismatched (its generation never started).
    Done,
}

/// The next recovery step, in the model's order: `HostCoordinatorLost` for
/// every dead holder; the lease-loss steps once the runtime is proved
/// absent ([`HostModel::runtime_absent`]); then, while the store agrees,
/// `AcquireDomainLock`, `BootstrapRecover` and the release
/// ([`HostModel::next_release`]) up to `RetireGeneration`; when it does
/// not, `DurableIdentityDiverges` (once), `AcquireDomainLock` and
/// `RefuseMismatchedRecord`, and the record stays untouched.
pub fn next_recovery(model: &HostModel, seen: Recovering) -> RecoveryNext {
    let me = model.me();
    let st = model.state();
    if let Some(dead) = model.holders().into_iter().find(|c| *c != me) {
        return RecoveryNext::Step(Action::HostCoordinatorLost { c: dead });
    }
    if st.decision == Decision::Vacant {
        return RecoveryNext::Done;
    }
    let Some(runsc_outlived) = seen.runtime_absent else {
        return RecoveryNext::ProveRuntimeAbsent;
    };
    if let Some(lost) = model.runtime_absent(runsc_outlived).first() {
        return RecoveryNext::Step(*lost);
    }
    let step = |a: Action| RecoveryNext::Step(a);
    match (seen.store_differs, st.hc.get(me.index())) {
        (true, Some(Hc::Idle)) if st.record_identity == RecordIdentity::Matching => {
            if model.check(&Action::DurableIdentityDiverges).is_ok() {
                step(Action::DurableIdentityDiverges)
            } else {
                RecoveryNext::Done
            }
        }
        (true, Some(Hc::Idle)) | (false, Some(Hc::Idle)) => {
            step(Action::AcquireDomainLock { c: me })
        }
        (true, Some(Hc::Bootstrapping)) => step(Action::RefuseMismatchedRecord { c: me }),
        (false, Some(Hc::Bootstrapping)) => step(Action::BootstrapRecover { c: me }),
        (false, Some(Hc::Leading | Hc::Serving)) => {
            model.next_release().map_or(RecoveryNext::Done, step)
        }
        _ => RecoveryNext::Done,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordinator::host_model::tests::launch_steps;
    use crate::coordinator::host_model::Routing;
    use crate::replay::{replay_text, Outcome};

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    /// A dead coordinator's published generation, as its trace.
    fn dead_published() -> Result<String, Box<dyn std::error::Error>> {
        let mut m = HostModel::new("hc-dead".into(), 4, Routing::Unrouted)?;
        let mut text = m.header().to_json() + "\n";
        for a in launch_steps(m.me()) {
            text += &(m.take(a)?.to_json() + "\n");
        }
        Ok(text)
    }

    /// Runs the decisions on `text` as a successor; returns the steps.
    fn recover(text: &str, store_differs: bool) -> Result<Vec<Action>, Box<dyn std::error::Error>> {
        let (mut m, _) = HostModel::resume("gen-4.jsonl", text)?;
        let mut seen = Recovering {
            store_differs,
            runtime_absent: None,
        };
        let mut steps = Vec::new();
        for _ in 0..64 {
            match next_recovery(&m, seen) {
                RecoveryNext::Done => return Ok(steps),
                RecoveryNext::ProveRuntimeAbsent => seen.runtime_absent = Some(false),
                RecoveryNext::Step(a) => {
                    m.take(a)?;
                    steps.push(a);
                }
            }
        }
        Err("the recovery does not end".into())
    }

    /// An agreeing store: the dead holder is lost, the runtime's lease
    /// loss recorded once proved, then the lock, `BootstrapRecover` and
    /// the release to `RetireGeneration`; a disagreeing one: the model's
    /// refusal, once with the divergence, then without it.
    #[test]
    fn recovery_is_decided_in_the_models_order() -> TestResult {
        let text = dead_published()?;
        let (probe, _) = HostModel::resume("gen-4.jsonl", &text)?;
        let (dead, me) = (probe.holders()[0], probe.me());
        let recovered = recover(&text, false)?;
        assert_eq!(
            recovered[..4],
            [
                Action::HostCoordinatorLost { c: dead },
                Action::RuntimeSupervisorLeaseLossTeardown,
                Action::AcquireDomainLock { c: me },
                Action::BootstrapRecover { c: me },
            ]
        );
        assert_eq!(recovered.last(), Some(&Action::RetireGeneration { c: me }));
        let refused = recover(&text, true)?;
        assert_eq!(
            refused,
            [
                Action::HostCoordinatorLost { c: dead },
                Action::RuntimeSupervisorLeaseLossTeardown,
                Action::DurableIdentityDiverges,
                Action::AcquireDomainLock { c: me },
                Action::RefuseMismatchedRecord { c: me },
            ]
        );
        // The next coordinator refuses the same record without a second
        // divergence, and both traces replay.
        let (mut first, _) = HostModel::resume("gen-4.jsonl", &text)?;
        let mut after = text.clone();
        for a in &refused {
            after += &(first.take(*a)?.to_json() + "\n");
        }
        let (next, _) = HostModel::resume("gen-4.jsonl", &after)?;
        let again = recover(&after, true)?;
        assert_eq!(
            again,
            [
                Action::AcquireDomainLock { c: next.me() },
                Action::RefuseMismatchedRecord { c: next.me() },
            ]
        );
        let (mut second, _) = HostModel::resume("gen-4.jsonl", &after)?;
        for a in &again {
            after += &(second.take(*a)?.to_json() + "\n");
        }
        match replay_text("gen-4.jsonl", &after)? {
            Outcome::Conforms { .. } => Ok(()),
            Outcome::Diverged(d) => Err(format!("diverged: {d:?}").into()),
        }
    }

    /// Nothing is taken before the runtime is proved absent but the dead
    /// holder's loss.
    #[test]
    fn no_lease_loss_step_before_the_runtime_is_proved_absent() -> TestResult {
        let text = dead_published()?;
        let (mut m, _) = HostModel::resume("gen-4.jsonl", &text)?;
        let unproved = Recovering::default();
        let RecoveryNext::Step(lost) = next_recovery(&m, unproved) else {
            return Err("no HostCoordinatorLost first".into());
        };
        m.take(lost)?;
        assert_eq!(
            next_recovery(&m, unproved),
            RecoveryNext::ProveRuntimeAbsent
        );
        let outlived = Recovering {
            runtime_absent: Some(true),
            ..unproved
        };
        assert_eq!(
            next_recovery(&m, outlived),
            RecoveryNext::Step(Action::RuntimeSupervisorLost)
        );
        Ok(())
    }
}
