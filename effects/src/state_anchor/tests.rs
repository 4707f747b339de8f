#![allow(clippy::unwrap_used)] // tests fail by panicking

use super::*;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet, VecDeque};

const NS: MountNamespaceIdentity = MountNamespaceIdentity {
    id: 77,
    device: 4,
    inode: 4026531840,
};

/// A recording fake kernel: a map of directories, the mounts made, and
/// every call in order.
#[derive(Default)]
struct Fake {
    entries: RefCell<HashMap<PathBuf, Entry>>,
    mounts: RefCell<HashMap<PathBuf, MountIdentity>>,
    calls: RefCell<Vec<String>>,
    fail_mount: Option<PathBuf>,
    busy: HashSet<PathBuf>,
    namespace: Option<MountNamespaceIdentity>,
    /// What successive process scans find.
    scans: RefCell<VecDeque<Vec<u32>>>,
    /// What successive existence checks answer (then: gone).
    exists: RefCell<VecDeque<Option<bool>>>,
    next_id: RefCell<u64>,
}

impl Fake {
    fn with_dir(self, path: &str, mode: u32, uid: u32, gid: u32) -> Self {
        self.entries
            .borrow_mut()
            .insert(PathBuf::from(path), Entry::Directory { mode, uid, gid });
        self
    }
    fn with(self, path: &str, entry: Entry) -> Self {
        self.entries.borrow_mut().insert(PathBuf::from(path), entry);
        self
    }
    fn calls(&self) -> Vec<String> {
        self.calls.borrow().clone()
    }
}

impl AnchorSys for Fake {
    fn entry(&self, path: &Path) -> io::Result<Entry> {
        Ok(*self.entries.borrow().get(path).unwrap_or(&Entry::Absent))
    }
    fn create_directory(&self, path: &Path, mode: u32, uid: u32, gid: u32) -> io::Result<()> {
        self.calls
            .borrow_mut()
            .push(format!("mkdir {} {mode:o} {uid}:{gid}", path.display()));
        self.entries.borrow_mut().insert(
            path.to_owned(),
            Entry::Directory {
                mode: 0o040000 | mode,
                uid,
                gid,
            },
        );
        Ok(())
    }
    fn mount_overlay(
        &self,
        lower: &Path,
        upper: &Path,
        work: &Path,
        target: &Path,
    ) -> io::Result<MountIdentity> {
        self.calls.borrow_mut().push(format!(
            "mount {} {} {} {}",
            lower.display(),
            upper.display(),
            work.display(),
            target.display()
        ));
        if self.fail_mount.as_deref() == Some(target) {
            return Err(io::Error::from_raw_os_error(22));
        }
        let mut next = self.next_id.borrow_mut();
        *next += 1;
        let id = MountIdentity {
            mount_id: 1000 + *next,
            device: 50 + *next,
            inode: 1,
        };
        self.mounts.borrow_mut().insert(target.to_owned(), id);
        Ok(id)
    }
    fn mount_identity(&self, target: &Path) -> io::Result<MountIdentity> {
        Ok(*self.mounts.borrow().get(target).unwrap_or(&MountIdentity {
            mount_id: 1,
            device: 1,
            inode: 2,
        }))
    }
    fn unmount(&self, target: &Path, detach: bool) -> io::Result<()> {
        self.calls
            .borrow_mut()
            .push(format!("umount {} detach={detach}", target.display()));
        if !detach && self.busy.contains(target) {
            return Err(io::Error::from_raw_os_error(
                rustix::io::Errno::BUSY.raw_os_error(),
            ));
        }
        self.mounts.borrow_mut().remove(target);
        Ok(())
    }
    fn lower_in(&self, rootfs: &Path, path: &str) -> io::Result<PathBuf> {
        // A read: not a recorded call. The fake image has no symlinks.
        Ok(rootfs.join(path.trim_start_matches('/')))
    }
    fn mount_namespace(&self) -> io::Result<MountNamespaceIdentity> {
        Ok(self.namespace.unwrap_or(NS))
    }
    fn processes_in(&self, ns: &MountNamespaceIdentity, limit: usize) -> io::Result<Vec<u32>> {
        assert_eq!(*ns, NS);
        let mut found = self.scans.borrow_mut().pop_front().unwrap_or_default();
        found.truncate(limit);
        Ok(found)
    }
    fn namespace_exists(&self, ns: &MountNamespaceIdentity) -> io::Result<Option<bool>> {
        assert_eq!(*ns, NS);
        Ok(self.exists.borrow_mut().pop_front().unwrap_or(Some(false)))
    }
}

fn plan(path: &str) -> AnchorPlan {
    let name = anchor_name(path);
    AnchorPlan {
        path: path.to_owned(),
        rootfs: "/lower".to_owned(),
        upper: format!("/domain/anchors/upper/{name}"),
        work: format!("/domain/anchors/work/{name}"),
        mountpoint: format!("/gen/anchors/{name}"),
    }
}

#[test]
fn anchor_names_escape_slashes_so_distinct_paths_never_share_one() {
    assert_eq!(anchor_name("/usr"), "usr");
    assert_eq!(anchor_name("/usr/local"), "usr%2Flocal");
    assert_eq!(anchor_name("/a%2Fb"), "a%252Fb");
    assert_ne!(anchor_name("/a/b"), anchor_name("/a%2Fb"));
}

#[test]
fn a_new_upper_takes_the_lowers_mode_and_owner_and_each_anchor_is_mounted_in_order() {
    let sys = Fake::default()
        .with_dir("/lower/root", 0o040700, 0, 0)
        .with_dir("/lower/usr", 0o040755, 0, 0);
    let mounts = mount_anchors(&sys, &[plan("/root"), plan("/usr")]).unwrap();
    assert_eq!(
        sys.calls(),
        [
            "mkdir /domain/anchors/upper/root 700 0:0",
            "mkdir /domain/anchors/work/root 700 0:0",
            "mkdir /gen/anchors/root 700 0:0",
            "mount /lower/root /domain/anchors/upper/root /domain/anchors/work/root /gen/anchors/root",
            "mkdir /domain/anchors/upper/usr 755 0:0",
            "mkdir /domain/anchors/work/usr 700 0:0",
            "mkdir /gen/anchors/usr 700 0:0",
            "mount /lower/usr /domain/anchors/upper/usr /domain/anchors/work/usr /gen/anchors/usr",
        ]
    );
    assert_eq!(mounts.namespace, NS);
    let points: Vec<String> = mounts
        .anchors
        .iter()
        .map(|a| a.mountpoint.to_string())
        .collect();
    assert_eq!(points, ["/gen/anchors/root", "/gen/anchors/usr"]);
    assert_ne!(mounts.anchors[0].mount, mounts.anchors[1].mount);
}

#[test]
fn an_existing_upper_is_used_as_it_is() {
    let sys = Fake::default()
        .with_dir("/lower/root", 0o040700, 0, 0)
        .with_dir("/domain/anchors/upper/root", 0o040755, 0, 0)
        .with_dir("/domain/anchors/work/root", 0o040700, 0, 0)
        .with_dir("/gen/anchors/root", 0o040700, 0, 0);
    mount_anchors(&sys, &[plan("/root")]).unwrap();
    assert_eq!(
        sys.calls(),
        ["mount /lower/root /domain/anchors/upper/root /domain/anchors/work/root /gen/anchors/root"]
    );
}

#[test]
fn a_path_the_image_lacks_is_refused_naming_it() {
    let sys = Fake::default();
    let err = mount_anchors(&sys, &[plan("/opt")]).unwrap_err();
    assert!(
        matches!(
            err,
            AnchorError::LowerNotDirectory {
                found: "absent",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("persistent path /opt"), "{err}");
    assert!(sys.calls().is_empty(), "{:?}", sys.calls());
}

#[test]
fn a_lower_that_is_no_directory_is_refused_before_anything_is_made() {
    let sys = Fake::default().with("/lower/opt", Entry::Other);
    let err = mount_anchors(&sys, &[plan("/opt")]).unwrap_err();
    assert!(
        matches!(err, AnchorError::LowerNotDirectory { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("/opt"), "{err}");
    assert!(sys.calls().is_empty(), "{:?}", sys.calls());
}

#[test]
fn an_upper_replaced_by_a_symlink_is_refused_and_nothing_stays_mounted() {
    let sys = Fake::default()
        .with_dir("/lower/root", 0o040700, 0, 0)
        .with_dir("/lower/usr", 0o040755, 0, 0)
        .with("/domain/anchors/upper/usr", Entry::Other);
    let err = mount_anchors(&sys, &[plan("/root"), plan("/usr")]).unwrap_err();
    assert!(
        matches!(
            err,
            AnchorError::NotDirectory {
                what: "upper directory",
                ..
            }
        ),
        "{err}"
    );
    assert!(sys.mounts.borrow().is_empty());
    assert_eq!(
        sys.calls().last().unwrap(),
        "umount /gen/anchors/root detach=false"
    );
}

#[test]
fn a_failed_mount_unmounts_the_anchors_mounted_before_it() {
    let sys = Fake {
        fail_mount: Some(PathBuf::from("/gen/anchors/var")),
        ..Fake::default()
    }
    .with_dir("/lower/root", 0o040700, 0, 0)
    .with_dir("/lower/usr", 0o040755, 0, 0)
    .with_dir("/lower/var", 0o040755, 0, 0);
    let err = mount_anchors(&sys, &[plan("/root"), plan("/usr"), plan("/var")]).unwrap_err();
    assert!(matches!(err, AnchorError::Mount { .. }), "{err}");
    assert!(sys.mounts.borrow().is_empty());
    let unmounts: Vec<String> = sys
        .calls()
        .into_iter()
        .filter(|c| c.starts_with("umount"))
        .collect();
    assert_eq!(
        unmounts,
        [
            "umount /gen/anchors/usr detach=false",
            "umount /gen/anchors/root detach=false"
        ]
    );
}

#[test]
fn too_many_anchors_are_refused() {
    let plans: Vec<AnchorPlan> = (0..=MAX_ANCHORS).map(|i| plan(&format!("/p{i}"))).collect();
    let sys = Fake::default();
    let err = mount_anchors(&sys, &plans).unwrap_err();
    assert!(matches!(err, AnchorError::TooMany { count } if count == MAX_ANCHORS + 1));
    assert!(sys.calls().is_empty());
}

fn mounted(sys: &Fake, paths: &[&str]) -> AnchorMounts {
    for p in paths {
        sys.entries.borrow_mut().insert(
            PathBuf::from(format!("/lower{p}")),
            Entry::Directory {
                mode: 0o040755,
                uid: 0,
                gid: 0,
            },
        );
    }
    let plans: Vec<AnchorPlan> = paths.iter().map(|p| plan(p)).collect();
    let m = mount_anchors(sys, &plans).unwrap();
    sys.calls.borrow_mut().clear();
    m
}

#[test]
fn unmounting_checks_each_recorded_mount_and_goes_last_first() {
    let sys = Fake {
        busy: HashSet::from([PathBuf::from("/gen/anchors/root")]),
        ..Fake::default()
    };
    let m = mounted(&sys, &["/root", "/usr"]);
    unmount_anchors(&sys, &m).unwrap();
    assert_eq!(
        sys.calls(),
        [
            "umount /gen/anchors/usr detach=false",
            "umount /gen/anchors/root detach=false",
            "umount /gen/anchors/root detach=true",
        ]
    );
    assert!(sys.mounts.borrow().is_empty());
}

#[test]
fn a_mount_that_is_not_the_recorded_one_is_left_untouched() {
    let sys = Fake::default();
    let m = mounted(&sys, &["/root", "/usr"]);
    // Something else now sits on /usr's mount point.
    sys.mounts.borrow_mut().insert(
        PathBuf::from("/gen/anchors/usr"),
        MountIdentity {
            mount_id: 9,
            device: 9,
            inode: 9,
        },
    );
    let err = unmount_anchors(&sys, &m).unwrap_err();
    assert!(matches!(err, AnchorError::MountMismatch { .. }), "{err}");
    assert!(sys.calls().is_empty(), "{:?}", sys.calls());
    assert_eq!(sys.mounts.borrow().len(), 2);
}

#[test]
fn anchors_of_another_mount_namespace_are_not_unmounted() {
    let sys = Fake::default();
    let m = mounted(&sys, &["/root"]);
    let other = Fake {
        namespace: Some(MountNamespaceIdentity { id: 78, ..NS }),
        ..Fake::default()
    };
    let err = unmount_anchors(&other, &m).unwrap_err();
    assert!(
        matches!(
            err,
            AnchorError::OtherNamespace {
                recorded: 77,
                current: 78
            }
        ),
        "{err}"
    );
    assert!(other.calls().is_empty());
}

#[test]
fn the_namespace_is_left_once_no_process_is_in_it() {
    let sys = Fake::default();
    sys.scans
        .borrow_mut()
        .extend([vec![41, 42], vec![42], vec![]]);
    wait_namespace_left(&sys, &NS, Duration::from_secs(5), Duration::from_millis(1)).unwrap();
    assert!(sys.scans.borrow().is_empty());
}

/// No process the scan can see, but the namespace still exists (a
/// non-dumpable process, a descriptor): not yet left. Where the kernel
/// cannot answer, the scan decides.
#[test]
fn a_namespace_with_no_visible_process_is_left_only_once_it_is_gone() {
    let sys = Fake::default();
    sys.exists
        .borrow_mut()
        .extend([Some(true), Some(true), Some(false)]);
    wait_namespace_left(&sys, &NS, Duration::from_secs(5), Duration::from_millis(1)).unwrap();
    assert!(sys.exists.borrow().is_empty());
    let held = Fake::default();
    held.exists
        .borrow_mut()
        .extend(std::iter::repeat_n(Some(true), 1000));
    let err = wait_namespace_left(
        &held,
        &NS,
        Duration::from_millis(20),
        Duration::from_millis(5),
    )
    .unwrap_err();
    assert!(
        matches!(err, AnchorError::NamespaceInUse { ref pids, .. } if pids.is_empty()),
        "{err}"
    );
    let unanswerable = Fake::default();
    unanswerable.exists.borrow_mut().push_back(None);
    wait_namespace_left(
        &unanswerable,
        &NS,
        Duration::from_millis(20),
        Duration::from_millis(5),
    )
    .unwrap();
}

#[test]
fn a_namespace_still_in_use_fails_after_the_bound_naming_its_processes() {
    let sys = Fake::default();
    sys.scans
        .borrow_mut()
        .extend(std::iter::repeat_n(vec![41], 1000));
    let err = wait_namespace_left(
        &sys,
        &NS,
        Duration::from_millis(30),
        Duration::from_millis(5),
    )
    .unwrap_err();
    match err {
        AnchorError::NamespaceInUse {
            namespace, pids, ..
        } => {
            assert_eq!(namespace, 77);
            assert_eq!(pids, [41]);
        }
        other => panic!("{other}"),
    }
}
