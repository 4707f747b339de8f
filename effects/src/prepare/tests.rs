use super::*;
use crate::image::reference::ImageRef;
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
    fn run_in_userns(
        &mut self,
        program: &str,
        args: &[OsString],
        cwd: &Path,
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
            "mkdir" => {
                for a in &argv[2..] {
                    fs::create_dir_all(cwd.join(a)).map_err(io_err("create", cwd))?;
                }
                Ok(ok)
            }
            // The file mount points: `rm -f -- FILE`, then `touch -- FILE`.
            "rm" if argv[0] == "-f" => {
                let target = cwd.join(&argv[2]);
                match fs::remove_file(&target) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        Err(io_err("remove", &target)(e))
                    }
                    _ => Ok(ok),
                }
            }
            "touch" => {
                let target = cwd.join(&argv[1]);
                fs::write(&target, "").map_err(io_err("touch", &target))?;
                Ok(ok)
            }
            "rm" => {
                let target = PathBuf::from(&argv[3]);
                fs::remove_dir_all(&target).map_err(io_err("remove", &target))?;
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
            "mkdir -p -- rootfs/workspace rootfs/.lazaret/git-common rootfs/.lazaret/sbin rootfs/tmp rootfs/etc/lazaret rootfs/root rootfs/usr rootfs/var rootfs/etc rootfs/opt"
                .to_owned(),
            "rm -f -- rootfs/etc/resolv.conf".to_owned(),
            "touch -- rootfs/etc/resolv.conf".to_owned(),
        ]
    );
    // The protected resolv.conf's mount point is a regular file.
    assert!(first.rootfs.join("etc/resolv.conf").is_file());

    let second =
        prepare(&mut host, dir.path(), &store, &img, &maps(100000)).map_err(|e| e.to_string())?;
    assert!(second.cache_hit);
    assert_eq!(second.record, first.record);
    assert_eq!(
        host.calls.len(),
        6,
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
        !host.calls.iter().any(|c| c.starts_with("mkdir")),
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
    assert!(host
        .calls
        .iter()
        .any(|c| c.starts_with("mkdir") && !c.contains("rootfs/opt")));
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
    let left: Vec<_> = fs::read_dir(dir.path().join("prepared"))
        .map_err(|e| e.to_string())?
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert!(
        host.calls
            .last()
            .is_some_and(|c| c.starts_with("rm -rf --one-file-system -- ")),
        "{:?}",
        host.calls
    );
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
        msg.contains("remove") && msg.contains("to prepare it again"),
        "{msg}"
    );
    Ok(())
}
