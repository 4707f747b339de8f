//! End-to-end: the network attestation refuses publication when its
//! evidence fails (spec 3.7: "Any failed or mismatched predicate refuses
//! physical attestation"), with the real runsc and slirp4netns, as the
//! unprivileged test user. The faults are injected by the crash-point build
//! (`LAZARET_FAULT`, docs/crash-points.md "Faults"), so this suite needs
//! the `crash-points` feature:
//!
//! - `mute-allowed-canary`: the allowed canary's responder closes without
//!   answering. The known-live check before the policy refuses.
//! - `drop-canary-route`: the allowed canary's route is deleted after
//!   readiness was recorded, before runsc starts. Only the sandbox's own
//!   view can catch that; it refuses after the attached runsc committed.
//!
//! Each refused launch must name the failed predicate, leave nothing behind
//! (processes, mounts, runtime files; traces replay), leave the store with
//! only released generations, and let the next launch of the Domain work.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test

mod support;
use support::{default_image, text, Env, ONE_AT_A_TIME};

fn refused_then_recovered(fault: &str, predicate: &str) {
    let env = Env::new(&format!("network-fault-{fault}"), &default_image());
    let out = env
        .command_env(&["default", "--", "true"], &[("LAZARET_FAULT", fault)])
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{fault}: {stderr}");
    assert!(stderr.contains(predicate), "{fault}: {stderr}");
    assert!(stderr.contains("10.137.55.2"), "{fault}: {stderr}");
    env.assert_nothing_left();
    env.assert_store_clean();
    let again = env.run(&["default", "--", "true"]);
    assert_eq!(
        again.status.code(),
        Some(0),
        "after {fault}: {}",
        text(&again.stderr)
    );
    env.assert_nothing_left();
    env.assert_store_clean();
}

#[test]
fn a_dead_canary_refuses_publication() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    refused_then_recovered("mute-allowed-canary", "known-live control");
}

#[test]
fn a_route_tampered_after_readiness_refuses_publication() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    refused_then_recovered("drop-canary-route", "imported behavior");
}
