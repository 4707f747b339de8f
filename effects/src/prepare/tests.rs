use super::*;
use crate::image::reference::ImageRef;
use crate::image::store::Sha256;
use crate::userns::{Identity, SubordinateRange};
use oci_spec::image::{ImageConfiguration, ImageManifest};

/// A recording fake: "unpacks" by creating `rootfs/unpacked`, or fails.
#[derive(Debug, Default)]
struct FakeHost {
    calls: Vec<String>,
    fail_unpack: bool,
    /// A symlink the "image" holds: `rootfs/<name>` -> target.
    link: Option<(String, PathBuf)>,
}

impl PrepareHost for FakeHost {
    fn preparer_version(&mut self) -> Result<String, PrepareError> {
        self.calls.push("version".into());
        Ok("umoci version fake".into())
    }
    fn remove_tree(
        &mut self,
        dir: &Path,
        device: u64,
        inode: u64,
        _hold: Option<BorrowedFd<'_>>,
    ) -> Result<(), PrepareError> {
        self.calls.push(format!("remove-tree {}", dir.display()));
        // The real walker, as the worker runs it (the test owns the tree).
        tree_removal::remove_contents(dir, device, inode)
            .map(drop)
            .map_err(|source| PrepareError::Removal {
                path: dir.to_owned(),
                source,
            })
    }
    fn make_mount_points(
        &mut self,
        stage: &Path,
        stage_identity: (u64, u64),
        _hold: BorrowedFd<'_>,
    ) -> Result<WorkerRun, PrepareError> {
        self.calls.push("mount-points".into());
        // The real worker's work, in this process (the test owns the tree).
        let skipped = mount_points::make_mount_points(stage, stage_identity);
        Ok(WorkerRun {
            success: skipped.is_ok(),
            status: "exit status".into(),
            stderr: skipped.err().map(|e| e.to_string()).unwrap_or_default(),
        })
    }
    fn run_in_userns(
        &mut self,
        program: &str,
        args: &[OsString],
        cwd: &Path,
        _hold: BorrowedFd<'_>,
    ) -> Result<WorkerRun, PrepareError> {
        let argv: Vec<String> = args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        self.calls.push(format!("{program} {}", argv.join(" ")));
        let ok = WorkerRun {
            success: true,
            status: "exit status: 0".into(),
            stderr: String::new(),
        };
        match program {
            "umoci" if self.fail_unpack => Ok(WorkerRun {
                success: false,
                status: "exit status: 1".into(),
                stderr: "boom".into(),
            }),
            "umoci" => {
                assert!(cwd.join("image/blobs").is_symlink());
                let index = fs::read_to_string(cwd.join("image/index.json")).unwrap_or_default();
                assert!(
                    index.contains("\"ref.name\"")
                        || index.contains("org.opencontainers.image.ref.name")
                );
                fs::create_dir_all(cwd.join("rootfs")).map_err(io_err("create", cwd))?;
                fs::write(cwd.join("rootfs/unpacked"), "x").map_err(io_err("write", cwd))?;
                if let Some((name, target)) = &self.link {
                    std::os::unix::fs::symlink(target, cwd.join("rootfs").join(name))
                        .map_err(io_err("link", cwd))?;
                }
                Ok(ok)
            }
            _ => Ok(WorkerRun {
                success: false,
                status: "unknown".into(),
                stderr: program.into(),
            }),
        }
    }
}

fn image() -> Result<ResolvedImage, String> {
    let manifest_json = r#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",
      "config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:0000000000000000000000000000000000000000000000000000000000000000","size":2},
      "layers":[]}"#;
    let manifest =
        ImageManifest::from_reader(manifest_json.as_bytes()).map_err(|e| e.to_string())?;
    let config = ImageConfiguration::from_reader(
        r#"{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}"#
            .as_bytes(),
    )
    .map_err(|e| e.to_string())?;
    Ok(ResolvedImage {
        reference: ImageRef::parse("oci:/l:t").map_err(|e| e.to_string())?,
        manifest_digest: Sha256::of(manifest_json.as_bytes()),
        manifest_size: manifest_json.len() as u64,
        manifest_media_type: "application/vnd.oci.image.manifest.v1+json".into(),
        manifest,
        config,
    })
}

fn maps(start: u32) -> NamespaceMaps {
    let r = SubordinateRange {
        start,
        count: 65536,
    };
    NamespaceMaps::new(
        &Identity {
            user: "u".into(),
            uid: 1000,
            gid: 1000,
        },
        r,
        r,
    )
}

#[test]
fn prepares_once_then_hits_the_cache() -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let store = BlobStore::open(&dir.path().join("store")).map_err(|e| e.to_string())?;
    let img = image()?;
    let mut host = FakeHost::default();
    let first =
        prepare(&mut host, dir.path(), &store, &img, &maps(100000)).map_err(|e| e.to_string())?;
    assert!(!first.cache_hit);
    assert!(first.rootfs.join("unpacked").exists());
    assert!(
        first.rootfs.join("workspace").is_dir()
            && first.rootfs.join(".lazaret/git-common").is_dir()
            && first.rootfs.join(".lazaret/sbin").is_dir()
    );
    assert_eq!(
        first.record.manifest_digest,
        img.manifest_digest.to_string()
    );
    assert_eq!(
        first
            .dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned()),
        Some(first.record.artifact_id.clone())
    );
    assert!(
        !first.dir.join("image").exists(),
        "the private layout is removed"
    );
    assert_eq!(
        host.calls,
        vec![
            "version".to_owned(),
            "umoci raw unpack --image image:lazaret rootfs".to_owned(),
            "mount-points".to_owned(),
        ]
    );
    // The protected resolv.conf's mount point is a regular file.
    assert!(first.rootfs.join("etc/resolv.conf").is_file());
    // Published through the catalog: one Available row naming the exact
    // directory, no operation left, no stage or lock beside it.
    let catalog = StorageCatalog::at(dir.path());
    let rows = catalog.artifacts().map_err(|e| e.to_string())?;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].state, ArtifactState::Available);
    assert_eq!(PathBuf::from(rows[0].path.to_string()), first.dir);
    assert_eq!(
        hex::encode(rows[0].prepared_artifact_id.0),
        first.record.artifact_id
    );
    assert_eq!(
        catalog.prepare_operations().map_err(|e| e.to_string())?,
        vec![]
    );
    assert_eq!(
        entries(&dir.path().join("prepared"))?,
        vec![first.record.artifact_id.clone()]
    );

    let second =
        prepare(&mut host, dir.path(), &store, &img, &maps(100000)).map_err(|e| e.to_string())?;
    assert!(second.cache_hit);
    assert_eq!(second.record, first.record);
    assert_eq!(
        host.calls.len(),
        4,
        "a cache hit runs no worker: {:?}",
        host.calls
    );

    // Other maps give another artifact (ownership differs on disk).
    let other =
        prepare(&mut host, dir.path(), &store, &img, &maps(200000)).map_err(|e| e.to_string())?;
    assert_ne!(other.record.artifact_id, first.record.artifact_id);
    Ok(())
}

/// An image symlink on the way to a product mount point refuses the image
/// before anything follows it; one at a default persistent path is left as
/// it is (not made): nothing is ever created outside the tree.
#[test]
fn an_image_symlink_is_never_followed_out_of_the_tree() -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let store = BlobStore::open(&dir.path().join("store")).map_err(|e| e.to_string())?;
    let outside = dir.path().join("outside");
    fs::create_dir_all(&outside).map_err(|e| e.to_string())?;
    let mut host = FakeHost {
        link: Some(("etc".to_owned(), outside.clone())),
        ..Default::default()
    };
    let msg = prepare(&mut host, dir.path(), &store, &image()?, &maps(100000))
        .map(|_| ())
        .err()
        .map(|e| e.to_string())
        .ok_or("an image with /etc -> outside was prepared")?;
    assert!(msg.contains("/etc is a symbolic link"), "{msg}");
    assert!(
        !host.calls.iter().any(|c| c == "mount-points"),
        "{:?}",
        host.calls
    );
    let mut host = FakeHost {
        link: Some(("opt".to_owned(), outside.join("opt"))),
        ..Default::default()
    };
    let lower = prepare(&mut host, dir.path(), &store, &image()?, &maps(100000))
        .map_err(|e| e.to_string())?;
    assert!(lower.rootfs.join("opt").is_symlink());
    assert!(lower.rootfs.join("usr").is_dir());
    assert!(host.calls.iter().any(|c| c == "mount-points"));
    assert_eq!(
        fs::read_dir(&outside).map_err(|e| e.to_string())?.count(),
        0
    );
    Ok(())
}

#[test]
fn a_failed_unpack_leaves_nothing_behind() -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let store = BlobStore::open(&dir.path().join("store")).map_err(|e| e.to_string())?;
    let mut host = FakeHost {
        fail_unpack: true,
        ..Default::default()
    };
    let err = prepare(&mut host, dir.path(), &store, &image()?, &maps(100000))
        .map(|_| ())
        .map_err(|e| e.to_string());
    let msg = err.err().unwrap_or_default();
    assert!(
        msg.starts_with("umoci raw unpack failed (exit status: 1)"),
        "{msg}"
    );
    assert!(msg.ends_with(": boom"), "{msg}");
    // The exact stage went through the removal worker, the operation was
    // forgotten and its lock removed.
    assert_eq!(entries(&dir.path().join("prepared"))?, Vec::<String>::new());
    assert!(
        host.calls.last().is_some_and(|c| c.starts_with(&format!(
            "remove-tree {}/prepared/.stage-",
            dir.path().display()
        ))),
        "{:?}",
        host.calls
    );
    let catalog = StorageCatalog::at(dir.path());
    assert_eq!(
        catalog.prepare_operations().map_err(|e| e.to_string())?,
        vec![]
    );
    assert_eq!(catalog.artifacts().map_err(|e| e.to_string())?, vec![]);
    Ok(())
}

#[test]
fn a_foreign_record_is_refused_with_the_fix() -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let store = BlobStore::open(&dir.path().join("store")).map_err(|e| e.to_string())?;
    let mut host = FakeHost::default();
    let first = prepare(&mut host, dir.path(), &store, &image()?, &maps(100000))
        .map_err(|e| e.to_string())?;
    fs::write(first.dir.join("artifact.json"), "{}").map_err(|e| e.to_string())?;
    let msg = prepare(&mut host, dir.path(), &store, &image()?, &maps(100000))
        .map(|_| ())
        .map_err(|e| e.to_string())
        .err()
        .unwrap_or_default();
    assert!(
        msg.contains("`lazaret state gc` reclaims the artifact"),
        "{msg}"
    );
    Ok(())
}

/// The names in `dir`, sorted.
fn entries(dir: &Path) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| e.to_string())? {
        names.push(
            entry
                .map_err(|e| e.to_string())?
                .file_name()
                .to_string_lossy()
                .into_owned(),
        );
    }
    names.sort();
    Ok(names)
}

/// An operation of `img` as its preparer has it: intent recorded, the
/// stage created (and recorded Owned when `owned`), a file in it, the lock
/// file held by the returned lock.
fn begun(
    root: &Path,
    img: &ResolvedImage,
    owned: bool,
) -> Result<(OperationLock, PathBuf, OperationId), String> {
    let e = |e: PrepareError| e.to_string();
    let identity = ArtifactIdentity::of("umoci version fake".into(), img, &maps(100000));
    let dir = PreparedDir::open(root).map_err(e)?;
    let op = identity.operation(&dir).map_err(e)?;
    let lock = OperationLock::create(&dir, op.operation_id).map_err(e)?;
    let catalog = StorageCatalog::at(root);
    let mut run = catalog.run(identity.id);
    assert_eq!(
        catalog
            .record_prepare_intent(&op, &mut run)
            .map_err(|e| e.to_string())?,
        PrepareIntent::Recorded
    );
    let (device, inode) = dir.create_stage(op.operation_id).map_err(e)?;
    run.took(Step::CreateStage, Some(StageStates::Own))
        .map_err(|e| e.to_string())?;
    if owned {
        catalog
            .record_stage_owned(op.operation_id, device, inode, &mut run)
            .map_err(|e| e.to_string())?;
    }
    let stage = dir.stage_path(op.operation_id);
    fs::create_dir(stage.join("rootfs")).map_err(|e| e.to_string())?;
    fs::write(stage.join("rootfs/half"), "x").map_err(|e| e.to_string())?;
    Ok((lock, stage, op.operation_id))
}

/// An operation of `img` left as a preparer that died would leave it: as
/// [`begun`], the lock file present but held by no process.
fn abandoned(root: &Path, img: &ResolvedImage, owned: bool) -> Result<PathBuf, String> {
    let (lock, stage, _) = begun(root, img, owned)?;
    // The preparer dies: its lock is released, its file stays.
    drop(lock);
    Ok(stage)
}

/// OR-7: an Owned operation whose process is gone is recovered by the next
/// preparation of the same artifact (its exact stage removed through the
/// worker), which then prepares it.
#[test]
fn an_abandoned_owned_stage_is_removed_by_the_next_preparation() -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let store = BlobStore::open(&dir.path().join("store")).map_err(|e| e.to_string())?;
    let img = image()?;
    let stage = abandoned(dir.path(), &img, true)?;
    let mut host = FakeHost::default();
    let lower =
        prepare(&mut host, dir.path(), &store, &img, &maps(100000)).map_err(|e| e.to_string())?;
    assert!(!lower.cache_hit);
    assert!(
        host.calls
            .contains(&format!("remove-tree {}", stage.display())),
        "{:?}",
        host.calls
    );
    assert!(!stage.exists());
    assert_eq!(
        entries(&dir.path().join("prepared"))?,
        vec![lower.record.artifact_id]
    );
    Ok(())
}

/// An Intent operation whose stage holds something was interrupted before
/// it recorded the stage as its own: it is retained, nothing is deleted,
/// and the error says what to do. An empty one is removed and forgotten.
#[test]
fn an_unrecorded_stage_is_retained_unless_empty() -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let store = BlobStore::open(&dir.path().join("store")).map_err(|e| e.to_string())?;
    let img = image()?;
    let stage = abandoned(dir.path(), &img, false)?;
    let mut host = FakeHost::default();
    let msg = prepare(&mut host, dir.path(), &store, &img, &maps(100000))
        .map(|_| ())
        .map_err(|e| e.to_string())
        .err()
        .unwrap_or_default();
    assert!(
        msg.contains(&stage.display().to_string()) && msg.contains("lazaret state gc"),
        "{msg}"
    );
    assert!(stage.join("rootfs/half").is_file());
    assert!(!host.calls.iter().any(|c| c.starts_with("remove-tree")));
    // Emptied by hand: the next preparation forgets it and prepares.
    fs::remove_dir_all(stage.join("rootfs")).map_err(|e| e.to_string())?;
    let lower =
        prepare(&mut host, dir.path(), &store, &img, &maps(100000)).map_err(|e| e.to_string())?;
    assert!(!lower.cache_hit && !stage.exists());
    Ok(())
}

/// While a process of the operation holds its lock, recovery leaves it.
#[test]
fn a_live_operation_is_never_recovered() -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let img = image()?;
    let e = |e: PrepareError| e.to_string();
    let (lock, _, operation) = begun(dir.path(), &img, true)?;
    let prepared = PreparedDir::open(dir.path()).map_err(e)?;
    let catalog = StorageCatalog::at(dir.path());
    let mut host = FakeHost::default();
    assert_eq!(
        recover(&mut host, &catalog, &prepared, operation).map_err(e)?,
        Recovery::Live
    );
    assert!(prepared.stage_path(operation).is_dir());
    drop(lock);
    assert_eq!(
        recover(&mut host, &catalog, &prepared, operation).map_err(e)?,
        Recovery::Recovered
    );
    assert!(!prepared.stage_path(operation).exists());
    assert_eq!(
        catalog.prepare_operations().map_err(|e| e.to_string())?,
        vec![]
    );
    Ok(())
}

/// A worker inherits its operation's lock: while it runs the operation is
/// live, even after the preparer let go of its own descriptor (a preparer
/// killed while umoci still writes the stage); once the worker is gone,
/// recovery may act. Lock files no operation names are removed by
/// `remove_orphan_locks`, unless held.
#[test]
fn a_worker_keeps_its_operation_live() -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let img = image()?;
    let e = |e: PrepareError| e.to_string();
    let identity = ArtifactIdentity::of("umoci version fake".into(), &img, &maps(100000));
    let prepared = PreparedDir::open(dir.path()).map_err(e)?;
    let op = identity.operation(&prepared).map_err(e)?;
    let lock = OperationLock::create(&prepared, op.operation_id).map_err(e)?;
    let catalog = StorageCatalog::at(dir.path());
    catalog
        .record_prepare_intent(&op, &mut catalog.run(identity.id))
        .map_err(|e| e.to_string())?;
    // Spawned as RealPrepareHost spawns its workers: with an inheritable
    // copy of the lock open during the spawn only.
    let inherited = tree_removal::inheritable(lock.hold()).map_err(|e| e.to_string())?;
    // `cat` runs until its standard input closes.
    let mut worker = Command::new("cat")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    drop(inherited);
    drop(lock);
    let mut host = FakeHost::default();
    let live = recover(&mut host, &catalog, &prepared, op.operation_id).map_err(e);
    let orphans = prepared.remove_orphan_locks(&[]).map_err(e);
    drop(worker.stdin.take());
    worker.wait().map_err(|e| e.to_string())?;
    assert_eq!(live?, Recovery::Live);
    assert_eq!(orphans?, 0, "a held lock is never removed");
    assert_eq!(
        recover(&mut host, &catalog, &prepared, op.operation_id).map_err(e)?,
        Recovery::Recovered
    );
    assert_eq!(
        catalog.prepare_operations().map_err(|e| e.to_string())?,
        vec![]
    );
    // A lock file left without a row goes with the next search.
    let other = identity.operation(&prepared).map_err(e)?;
    drop(OperationLock::create(&prepared, other.operation_id).map_err(e)?);
    assert_eq!(prepared.remove_orphan_locks(&[]).map_err(e)?, 1);
    assert_eq!(entries(prepared.path())?, Vec::<String>::new());
    Ok(())
}
