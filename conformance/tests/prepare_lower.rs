//! The prepared lower on the real host (spec 3.6, SR-15, FR-22): umoci in a
//! verified user namespace applies a layered image correctly and the result
//! is reused.

use lazaret_conformance::fixtures::layered_layout;
use lazaret_conformance::test_user::{delegate, Delegation};
use lazaret_effects::image::reference::ImageRef;
use lazaret_effects::image::resolve;
use lazaret_effects::image::store::BlobStore;
use lazaret_effects::prepare::{prepare, RealPrepareHost};
use lazaret_effects::userns::{plan_maps, Identity, MapKind, RealHost};
use std::os::unix::fs::MetadataExt;
use std::time::Instant;

fn s(e: impl std::fmt::Display) -> String {
    e.to_string()
}

#[test]
fn layered_image_is_applied_with_whiteouts_opaque_dirs_links_and_owners() -> Result<(), String> {
    if delegate(
        "layered_image_is_applied_with_whiteouts_opaque_dirs_links_and_owners",
        &[],
    )
    .map_err(s)?
        == Delegation::PassedAsTestUser
    {
        return Ok(());
    }
    let dir = tempfile::tempdir().map_err(s)?;
    let oci = layered_layout(dir.path()).map_err(s)?;
    let storage = dir.path().join("storage");
    let store = BlobStore::open(&storage.join("blobs")).map_err(s)?;
    let image = resolve(&ImageRef::parse(&oci).map_err(s)?, &store, &mut |_| {}).map_err(s)?;
    let me = Identity::current(&mut RealHost).map_err(s)?;
    let maps = plan_maps(&mut RealHost, &me).map_err(s)?;
    // The preparation's workers (`__mount-points`, `__remove-tree`) are
    // the lazaret binary's, built beside this test binary
    // (target/<profile>/lazaret; `cargo nextest run --workspace` builds it).
    let lazaret = std::env::current_exe()
        .map_err(s)?
        .parent()
        .and_then(|deps| deps.parent())
        .map(|dir| dir.join("lazaret"))
        .filter(|p| p.is_file())
        .ok_or("the lazaret binary is not built beside the tests: cargo build -p lazaret-cli")?;
    let mut host = RealPrepareHost::new(maps.clone(), lazaret);

    let t = Instant::now();
    let lower = prepare(&mut host, &storage, &store, &image, &maps).map_err(s)?;
    let cold = t.elapsed();
    assert!(!lower.cache_hit);
    assert_eq!(
        lower.record.manifest_digest,
        image.manifest_digest.to_string()
    );
    let root = &lower.rootfs;
    let read = |p: &str| std::fs::read_to_string(root.join(p)).map_err(|e| format!("{p}: {e}"));
    // Layer order and whiteouts.
    assert_eq!(read("etc/base.txt")?, "base\n");
    assert!(!root.join("gone.txt").exists(), "whiteout applied");
    assert!(
        !root.join(".wh.gone.txt").exists(),
        "whiteout marker not materialised"
    );
    // Opaque directory: lower entries gone, upper entry present, marker absent.
    let mut olddir: Vec<String> = std::fs::read_dir(root.join("olddir"))
        .map_err(s)?
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    olddir.sort();
    assert_eq!(olddir, vec!["new".to_owned()]);
    assert_eq!(
        read("keepdir/x")?,
        "keep\n",
        "a directory that is not opaque keeps lower entries"
    );
    // Hard link.
    let one = std::fs::metadata(root.join("data/one")).map_err(s)?;
    let two = std::fs::metadata(root.join("data/two")).map_err(s)?;
    assert_eq!((one.ino(), one.nlink()), (two.ino(), 2));
    // Ownership: image uid/gid 1000 lands on the subordinate range, image
    // root on the invoking user; modes are preserved.
    let owned = std::fs::metadata(root.join("home/user/owned")).map_err(s)?;
    let sub_uid = maps.host_id(MapKind::Uid, 1000).unwrap_or_default();
    let sub_gid = maps.host_id(MapKind::Gid, 1000).unwrap_or_default();
    assert_eq!(
        (owned.uid(), owned.gid(), owned.mode() & 0o7777),
        (sub_uid, sub_gid, 0o640)
    );
    let base = std::fs::metadata(root.join("etc/base.txt")).map_err(s)?;
    assert_eq!((base.uid(), base.gid()), (me.uid, me.gid));

    // Reused on a later launch, quickly; no staging directory left.
    let t = Instant::now();
    let again = prepare(&mut host, &storage, &store, &image, &maps).map_err(s)?;
    let warm = t.elapsed();
    assert!(again.cache_hit);
    assert_eq!(again.record, lower.record);
    let entries: Vec<String> = std::fs::read_dir(storage.join("prepared"))
        .map_err(s)?
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    assert_eq!(entries, vec![lower.record.artifact_id.clone()]);
    println!("prepare: cold {cold:?}, cache hit {warm:?}");

    // The test's temporary directory holds subordinate-owned files: remove it
    // from inside a namespace like the preparer's own cleanup does.
    let mut rm = std::process::Command::new("rm");
    rm.args(["-rf", "--"]).arg(dir.path());
    let child =
        lazaret_effects::userns::spawn_in_user_namespace(rm, &mut RealHost, &maps).map_err(s)?;
    let out = child.wait_with_output().map_err(s)?;
    assert!(out.status.success());
    Ok(())
}
