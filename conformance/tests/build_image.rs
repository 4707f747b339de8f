//! scripts/build-image: the default image is cached by the hash of its
//! inputs, a second run is a cache hit, and a layout built as root is
//! readable by the unprivileged user.

use lazaret_conformance::fixtures::sh;
use lazaret_conformance::test_user::test_user;
use std::path::Path;
use std::time::{Duration, Instant};

fn s(e: impl std::fmt::Display) -> String {
    e.to_string()
}

#[test]
fn second_run_is_a_cache_hit_and_readable_by_the_user() -> Result<(), String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let first = sh(&root, "scripts/build-image").map_err(s)?;
    let t = Instant::now();
    let second = sh(&root, "scripts/build-image").map_err(s)?;
    let hit = t.elapsed();
    assert_eq!(first, second);
    assert!(hit < Duration::from_secs(1), "cache hit took {hit:?}");
    let reference = second.trim();
    let hash = sh(&root, "scripts/build-image --print-hash").map_err(s)?;
    assert!(
        reference.contains(hash.trim()),
        "{reference} is not keyed by {hash}"
    );
    // Another suite is another cache key.
    let other = sh(&root, "scripts/build-image --suite trixie --print-hash").map_err(s)?;
    assert_ne!(other, hash);
    let bad = sh(&root, "scripts/build-image --suite 'x y'")
        .map(|_| ())
        .map_err(s);
    assert!(bad
        .err()
        .unwrap_or_default()
        .contains("is not a Debian suite name"));
    let inspect = if rustix::process::geteuid().is_root() {
        format!("runuser -u {} -- skopeo inspect {reference}", test_user())
    } else {
        format!("skopeo inspect {reference}")
    };
    let out = sh(Path::new("/"), &inspect).map_err(s)?;
    assert!(out.contains("\"Architecture\": \"amd64\""), "{out}");
    Ok(())
}
