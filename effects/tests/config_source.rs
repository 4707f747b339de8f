//! Configuration source safety (spec 3.2): symlink, hard-link, wrong-owner,
//! group/other-writable, FIFO, directory, oversized, missing and changing
//! sources are refused with messages naming the file and the expectation.
//! These run in-process as the harness user; the wrong-owner rule is also
//! exercised through the recording fake and, in the cli tests, for real as
//! the unprivileged user lazaret-test.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // tests fail by panicking
use std::cell::Cell;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use lazaret_effects::config_source::read_config_source;
use lazaret_effects::confined::{ConfinedSys, RealSys, RecordedCall, RecordingSys};
use rustix::fs::{OFlags, ResolveFlags};

fn uid() -> u32 {
    RealSys.user_ids().expect("ids").uid
}

fn write(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).expect("write");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).expect("chmod");
    p
}

fn refusal(sys: &dyn ConfinedSys, path: &Path, user: u32) -> String {
    match read_config_source(sys, path, user) {
        Ok(_) => panic!("{} was accepted", path.display()),
        Err(e) => e.to_string(),
    }
}

fn ino(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path).expect("meta").ino()
}

#[test]
fn a_safe_source_is_read_through_a_confined_plan() {
    let dir = tempfile::tempdir().expect("tmp");
    let p = write(dir.path(), "config.toml", b"schema = 1\n", 0o600);
    let sys = RecordingSys::new(RealSys);
    let source = read_config_source(&sys, &p, uid()).expect("read");
    assert_eq!(source.bytes(), b"schema = 1\n");
    assert_eq!(source.label(), p);
    let calls = sys.calls();
    let all = ResolveFlags::BENEATH
        | ResolveFlags::NO_MAGICLINKS
        | ResolveFlags::NO_SYMLINKS
        | ResolveFlags::NO_XDEV;
    assert!(calls.iter().any(|c| matches!(c, RecordedCall::Openat2 { path, resolve, .. } if path == Path::new("config.toml") && *resolve == all)), "{calls:?}");
    assert!(calls.iter().any(|c| matches!(c, RecordedCall::Reopen { flags } if *flags == OFlags::RDONLY | OFlags::NONBLOCK)));
    // Two full reads of the recorded size, each followed by a growth probe.
    let reads: Vec<&RecordedCall> = calls
        .iter()
        .filter(|c| matches!(c, RecordedCall::ReadAt { .. }))
        .collect();
    assert_eq!(reads.len(), 4, "{reads:?}");
}

#[test]
fn symlink_source_is_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let target = write(dir.path(), "real.toml", b"x", 0o600);
    let link = dir.path().join("config.toml");
    symlink(&target, &link).expect("symlink");
    let m = refusal(&RealSys, &link, uid());
    assert!(
        m.contains("config.toml") && m.contains("symbolic link"),
        "{m}"
    );
}

#[test]
fn symlinked_ancestor_is_resolved_once_to_its_canonical_target() {
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::create_dir(dir.path().join("real")).expect("mkdir");
    let p = write(&dir.path().join("real"), "config.toml", b"ok", 0o600);
    symlink(dir.path().join("real"), dir.path().join("alias")).expect("symlink");
    let source =
        read_config_source(&RealSys, &dir.path().join("alias/config.toml"), uid()).expect("read");
    assert_eq!(source.label(), p);
}

#[test]
fn hard_linked_source_is_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let p = write(dir.path(), "config.toml", b"x", 0o600);
    std::fs::hard_link(&p, dir.path().join("other")).expect("link");
    let m = refusal(&RealSys, &p, uid());
    assert!(
        m.contains("config.toml") && m.contains("2 hard links; expected exactly one"),
        "{m}"
    );
}

#[test]
fn group_or_other_writable_source_is_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    for mode in [0o620, 0o602, 0o666] {
        let p = write(dir.path(), &format!("c{mode:o}.toml"), b"x", mode);
        let m = refusal(&RealSys, &p, uid());
        assert!(
            m.contains("group or other write") && m.contains(&format!("{mode:04o}")),
            "{m}"
        );
    }
    // Group/other read is fine.
    let p = write(dir.path(), "readable.toml", b"x", 0o644);
    assert!(read_config_source(&RealSys, &p, uid()).is_ok());
}

#[test]
fn fifo_source_is_refused_without_opening_it_for_reading() {
    let dir = tempfile::tempdir().expect("tmp");
    let p = dir.path().join("config.toml");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &p,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .expect("mkfifo");
    let sys = RecordingSys::new(RealSys);
    let m = refusal(&sys, &p, uid());
    assert!(
        m.contains("config.toml") && m.contains("is a FIFO; expected a regular file"),
        "{m}"
    );
    assert!(!sys
        .calls()
        .iter()
        .any(|c| matches!(c, RecordedCall::Reopen { .. })));
}

#[test]
fn directory_and_missing_sources_are_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::create_dir(dir.path().join("config.toml")).expect("mkdir");
    let m = refusal(&RealSys, &dir.path().join("config.toml"), uid());
    assert!(m.contains("is a directory; expected a regular file"), "{m}");
    let m = refusal(&RealSys, &dir.path().join("absent.toml"), uid());
    assert!(
        m.contains("absent.toml") && m.contains("does not exist"),
        "{m}"
    );
}

#[test]
fn oversized_source_is_refused_and_the_limit_itself_is_accepted() {
    let dir = tempfile::tempdir().expect("tmp");
    let big = write(dir.path(), "big.toml", &vec![b'#'; 1_048_577], 0o600);
    let sys = RecordingSys::new(RealSys);
    let m = refusal(&sys, &big, uid());
    assert!(
        m.contains("big.toml") && m.contains("1048577 bytes; expected at most 1048576"),
        "{m}"
    );
    assert!(!sys
        .calls()
        .iter()
        .any(|c| matches!(c, RecordedCall::ReadAt { .. })));
    let exact = write(dir.path(), "exact.toml", &vec![b'#'; 1_048_576], 0o600);
    assert_eq!(
        read_config_source(&RealSys, &exact, uid())
            .expect("exact")
            .bytes()
            .len(),
        1_048_576
    );
}

#[test]
fn wrong_owner_is_refused_for_real_and_through_the_fake() {
    let dir = tempfile::tempdir().expect("tmp");
    let p = write(dir.path(), "config.toml", b"x", 0o600);
    let me = uid();
    // Through the fake: the kernel reports another owner.
    let sys = RecordingSys::new(RealSys);
    sys.patch_stat(ino(&p), |st| st.uid = 4242);
    let m = refusal(&sys, &p, me);
    assert!(
        m.contains("owned by uid 4242; expected root or the invoking user"),
        "{m}"
    );
    // Root-owned and self-owned sources are accepted for any invoking user.
    let sys = RecordingSys::new(RealSys);
    sys.patch_stat(ino(&p), |st| st.uid = 0);
    assert!(read_config_source(&sys, &p, 1001).is_ok());
    let sys = RecordingSys::new(RealSys);
    sys.patch_stat(ino(&p), |st| st.uid = 1001);
    assert!(read_config_source(&sys, &p, 1001).is_ok());
    assert!(refusal(&sys, &p, 1002).contains("owned by uid 1001"));
    // For real, when this process may change ownership.
    if me == 0 {
        rustix::fs::chown(&p, Some(rustix::fs::Uid::from_raw(4242)), None).expect("chown");
        let m = refusal(&RealSys, &p, me);
        assert!(m.contains("owned by uid 4242"), "{m}");
    }
}

#[test]
fn a_source_changing_between_reads_is_refused_without_retry() {
    let dir = tempfile::tempdir().expect("tmp");
    let p = write(dir.path(), "config.toml", b"x = 1\n", 0o600);
    let sys = RecordingSys::new(RealSys);
    let stats = Rc::new(Cell::new(0u32));
    let counter = Rc::clone(&stats);
    // Stats of the file: plan open, reopened descriptor, final check after
    // both reads. Only the last one sees a new change time.
    sys.patch_stat(ino(&p), move |st| {
        counter.set(counter.get() + 1);
        if counter.get() >= 3 {
            st.ctime_nsec = st.ctime_nsec.wrapping_add(1);
        }
    });
    let m = refusal(&sys, &p, uid());
    assert!(
        m.contains("change time changed between the two reads"),
        "{m}"
    );
    let opens = sys
        .calls()
        .iter()
        .filter(|c| matches!(c, RecordedCall::Reopen { .. }))
        .count();
    assert_eq!(opens, 1, "the loader must not retry");
    // A failing read is refused with the file named.
    let sys = RecordingSys::new(RealSys);
    sys.fail_next("read_at", rustix::io::Errno::IO);
    let m = refusal(&sys, &p, uid());
    assert!(m.contains("config.toml: reading failed"), "{m}");
}
