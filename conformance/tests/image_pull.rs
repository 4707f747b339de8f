//! Image resolution from a local OCI layout and from a real registry
//! (Debian's docker-registry on a loopback port), spec 3.6.

use lazaret_conformance::fixtures::{layered_layout, Registry};
use lazaret_conformance::test_user::{delegate, Delegation};
use lazaret_effects::image::reference::ImageRef;
use lazaret_effects::image::store::BlobStore;
use lazaret_effects::image::{resolve, ImageError, Progress, TransportError};

fn s(e: impl std::fmt::Display) -> String {
    e.to_string()
}

#[test]
fn layout_and_registry_resolve_to_the_same_verified_manifest() -> Result<(), String> {
    if delegate(
        "layout_and_registry_resolve_to_the_same_verified_manifest",
        &[],
    )
    .map_err(s)?
        == Delegation::PassedAsTestUser
    {
        return Ok(());
    }
    let dir = tempfile::tempdir().map_err(s)?;
    let oci = layered_layout(dir.path()).map_err(s)?;
    let store = BlobStore::open(&dir.path().join("store-a")).map_err(s)?;
    let mut events = Vec::new();
    let local = resolve(&ImageRef::parse(&oci).map_err(s)?, &store, &mut |p| {
        events.push(p)
    })
    .map_err(s)?;
    assert_eq!(local.manifest.layers().len(), 2);
    let layer_events: Vec<_> = events
        .iter()
        .filter(|e| matches!(e, Progress::Layer { .. }))
        .collect();
    assert_eq!(layer_events.len(), 2, "{events:?}");
    assert!(events
        .iter()
        .any(|e| matches!(e, Progress::Bytes { done, size, .. } if done == size)));

    let regdir = tempfile::tempdir().map_err(s)?;
    let mut registry = Registry::start(regdir.path()).map_err(s)?;
    registry.push(&oci, "lazaret/test:v1").map_err(s)?;
    let by_tag = ImageRef::parse(&format!("{}/lazaret/test:v1", registry.addr)).map_err(s)?;
    let store_b = BlobStore::open(&dir.path().join("store-b")).map_err(s)?;
    let mut pulled = Vec::new();
    let remote = resolve(&by_tag, &store_b, &mut |p| pulled.push(p)).map_err(s)?;
    assert_eq!(
        remote.manifest_digest, local.manifest_digest,
        "skopeo kept the manifest bytes"
    );
    for l in remote.manifest.layers() {
        let d = lazaret_effects::image::store::Sha256::parse(l.digest().as_ref()).map_err(s)?;
        assert!(
            store_b.contains(&d, l.size()),
            "layer {d} pulled into the store"
        );
    }
    assert!(
        pulled
            .iter()
            .any(|e| matches!(e, Progress::Layer { cached: false, .. })),
        "{pulled:?}"
    );

    // By digest, into the same store: every layer is a cache hit.
    let by_digest = ImageRef::parse(&format!(
        "{}/lazaret/test@{}",
        registry.addr, local.manifest_digest
    ))
    .map_err(s)?;
    let mut again = Vec::new();
    let second = resolve(&by_digest, &store_b, &mut |p| again.push(p)).map_err(s)?;
    assert_eq!(second.manifest_digest, local.manifest_digest);
    let cached: Vec<bool> = again
        .iter()
        .filter_map(|e| match e {
            Progress::Layer { cached, .. } => Some(*cached),
            _ => None,
        })
        .collect();
    assert_eq!(cached, vec![true, true]);

    // A tag the registry does not have, then a registry that is down.
    let missing = ImageRef::parse(&format!("{}/lazaret/test:nope", registry.addr)).map_err(s)?;
    let err = resolve(&missing, &store_b, &mut |_| {})
        .map(|_| ())
        .map_err(s)
        .err()
        .unwrap_or_default();
    assert!(
        err.contains("answered 404") && err.contains("no such repository, tag or blob"),
        "{err}"
    );
    registry.stop();
    let err = resolve(&by_tag, &store_b, &mut |_| {}).map(|_| ());
    assert!(
        matches!(
            err,
            Err(ImageError::Transport(TransportError::Unreachable { .. }))
        ),
        "{err:?}"
    );
    let msg = err.map_err(s).err().unwrap_or_default();
    assert!(
        msg.contains("is the registry running and reachable?"),
        "{msg}"
    );
    Ok(())
}

#[test]
fn bad_layouts_give_one_actionable_message() -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(s)?;
    let store = BlobStore::open(&dir.path().join("store")).map_err(s)?;
    let missing =
        ImageRef::parse(&format!("oci:{}/nothing:default", dir.path().display())).map_err(s)?;
    let err = resolve(&missing, &store, &mut |_| {})
        .map(|_| ())
        .map_err(s)
        .err()
        .unwrap_or_default();
    assert!(
        err.contains("is not a readable OCI image layout (oci-layout)"),
        "{err}"
    );

    let oci = layered_layout(dir.path()).map_err(s)?;
    let wrong_tag = oci.replace(":test", ":other");
    let err = resolve(
        &ImageRef::parse(&wrong_tag).map_err(s)?,
        &store,
        &mut |_| {},
    )
    .map(|_| ())
    .map_err(s)
    .err()
    .unwrap_or_default();
    assert!(
        err.contains("has no image tagged \"other\" (tags present: test)"),
        "{err}"
    );

    // A corrupted layer blob is detected by digest and not stored.
    let reference = ImageRef::parse(&oci).map_err(s)?;
    let ok = resolve(
        &reference,
        &BlobStore::open(&dir.path().join("probe")).map_err(s)?,
        &mut |_| {},
    )
    .map_err(s)?;
    let layer = ok.manifest.layers()[1].digest().to_string();
    let hex = layer.trim_start_matches("sha256:");
    let blob = dir.path().join("layout/blobs/sha256").join(hex);
    let mut bytes = std::fs::read(&blob).map_err(s)?;
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&blob, bytes).map_err(s)?;
    let err = resolve(&reference, &store, &mut |_| {})
        .map(|_| ())
        .map_err(s)
        .err()
        .unwrap_or_default();
    assert!(err.contains("does not match its descriptor"), "{err}");
    assert!(!store
        .path(&lazaret_effects::image::store::Sha256::parse(&layer).map_err(s)?)
        .exists());
    Ok(())
}
