//! Process-wide spawn exclusion (spec 3.3 step 2): the broker holds it from
//! the launch barrier until its wrapper is spawned and the barrier's read
//! end is closed here, and every other spawn of this process (the
//! transient children of [`super::transient`]: map helpers, preparation
//! workers, `nft`, `git`, guest tool runs) holds it while it forks, so no
//! spawn interleaves with an acquisition. Reaping needs no exclusion: every
//! child is reaped only through its own pidfd.
//!
//! Re-entrant on one thread (a spawn inside a section that already holds
//! it does not deadlock); exclusive across threads.
use std::cell::Cell;
use std::sync::{Mutex, MutexGuard};

static SPAWN: Mutex<()> = Mutex::new(());

thread_local! {
    static HELD: Cell<bool> = const { Cell::new(false) };
}

/// Held while this thread may spawn.
#[derive(Debug)]
pub struct SpawnExclusion {
    guard: Option<MutexGuard<'static, ()>>,
}

impl Drop for SpawnExclusion {
    fn drop(&mut self) {
        if self.guard.take().is_some() {
            HELD.with(|h| h.set(false));
        }
    }
}

/// Takes the exclusion (or joins this thread's section that holds it).
pub fn spawn_exclusion() -> SpawnExclusion {
    if HELD.with(Cell::get) {
        return SpawnExclusion { guard: None };
    }
    // A panic while holding it leaves no broken invariant behind: the
    // section only orders forks.
    let guard = SPAWN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    HELD.with(|h| h.set(true));
    SpawnExclusion { guard: Some(guard) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn reentrant_on_one_thread_exclusive_across_threads() {
        let outer = spawn_exclusion();
        let inner = spawn_exclusion();
        let entered = Arc::new(AtomicBool::new(false));
        let other = {
            let entered = Arc::clone(&entered);
            std::thread::spawn(move || {
                let _g = spawn_exclusion();
                entered.store(true, Ordering::SeqCst);
            })
        };
        std::thread::sleep(Duration::from_millis(100));
        assert!(!entered.load(Ordering::SeqCst), "another thread entered");
        drop(inner);
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !entered.load(Ordering::SeqCst),
            "the inner section released the outer one"
        );
        drop(outer);
        other.join().expect("the other thread");
        assert!(entered.load(Ordering::SeqCst));
    }
}
