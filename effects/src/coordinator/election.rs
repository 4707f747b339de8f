//! The Domain lock election (spec 3.3, OR-1): a candidate coordinator takes
//! the Domain flock without blocking. The winner goes on to
//! `AcquireDomainLock` in its generation's trace; a loser records
//! `LoseDomainLockRace` as the core decides it and exits without opening
//! the Domain Store.
use super::hc_model::HcModel;
use super::host::CoordinatorError;
use super::paths::DomainPaths;
use crate::domain_lock::{DomainLock, DomainLockError};

/// Takes the Domain flock for the coordinator `name`; `None` when another
/// process holds it (a coordinator, or `lazaret state` reading the Domain),
/// after the loss is recorded (see [`lose_lock_race`]).
pub(super) fn elect(
    name: &str,
    paths: &DomainPaths,
) -> Result<Option<DomainLock>, CoordinatorError> {
    match DomainLock::try_acquire(&paths.lock()) {
        Ok(lock) => Ok(Some(lock)),
        Err(DomainLockError::Held { .. }) => {
            // The trace is a record, not a condition of losing: a loser whose
            // steps cannot be traced still exits as one, and its CLI joins.
            if let Err(e) = lose_lock_race(name, paths) {
                tracing::warn!(error = %e, "the lost lock race is not traced");
            }
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// LoseDomainLockRace: the core decides the steps that record a lost flock
/// (the holder's lock, as the failed flock observed, then this
/// coordinator's loss), which go to a trace of their own under the
/// Domain's kept traces; the CLI then joins the holder.
fn lose_lock_race(name: &str, paths: &DomainPaths) -> Result<(), CoordinatorError> {
    let _span = tracing::info_span!("LoseDomainLockRace").entered();
    let mut model = HcModel::lock_race_loser(name.to_owned(), &paths.traces())
        .map_err(CoordinatorError::Trace)?;
    for action in model.model().lock_race_lost() {
        model.take(action, None)?;
    }
    model.keep_loser();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With the real flock held elsewhere the candidate loses and leaves
    /// exactly the loser's trace; once the lock is free it wins and leaves
    /// none (its steps go to its generation's trace).
    #[test]
    fn a_held_lock_is_lost_and_traced_and_a_free_one_is_won(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let paths = DomainPaths::new(&dir.path().join("run"), dir.path());
        let held = DomainLock::try_acquire(&paths.lock())?;
        assert!(elect("hc-0000aaaa", &paths)?.is_none());
        let kept: Vec<_> = std::fs::read_dir(paths.traces())?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .collect();
        assert_eq!(kept.len(), 1, "{kept:?}");
        let text = std::fs::read_to_string(&kept[0])?;
        let actions: Vec<String> = text
            .lines()
            .skip(1)
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l)
                    .map(|v| v["action"].as_str().unwrap_or_default().to_owned())
            })
            .collect::<Result<_, _>>()?;
        assert_eq!(actions, ["AcquireDomainLock", "LoseDomainLockRace"]);
        assert!(
            !paths.store().exists(),
            "a loser never opens the Domain Store"
        );
        drop(held);
        let won = elect("hc-0000bbbb", &paths)?;
        assert!(won.is_some());
        assert_eq!(std::fs::read_dir(paths.traces())?.count(), 1);
        Ok(())
    }
}
