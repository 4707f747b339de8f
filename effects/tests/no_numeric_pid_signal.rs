//! Host process control has no numeric-PID signal path (spec 3.3: "Host
//! process control has no numeric-PID signal or reopen-and-signal fallback";
//! FR-7). Signals go only through `pidfd_send_signal` on a retained pidfd
//! (`ProcessHandle::signal`). This test scans every Rust source file of the
//! workspace for numeric-PID signalling APIs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test

use std::path::{Path, PathBuf};

/// Built with concat! so this file does not match its own patterns.
const FORBIDDEN: &[&str] = &[
    // libc::kill, nix kill, std Child::kill, and friends.
    concat!("ki", "ll("),
    // rustix kill_process / kill_process_group.
    concat!("ki", "ll_process"),
    concat!("ki", "llpg"),
    concat!("tgki", "ll"),
    concat!("tki", "ll("),
    // sigqueue and rt_sigqueueinfo.
    concat!("sigque", "ue"),
    // Spawning kill(1), pkill(1) or killall(1).
    concat!("\"ki", "ll\""),
    concat!("\"pki", "ll\""),
    concat!("\"killa", "ll\""),
];

/// Files that signal by number inside the sandbox, never on the host.
const GUEST_SIDE: &[(&str, &str)] = &[(
    "cli/init/lazaret_guest.rs",
    "the static guest tool signals a guest process group in the sandbox's own PID namespace",
)];

fn offending(line: &str) -> Option<&'static str> {
    let code = line.trim_start();
    if code.starts_with("//") {
        return None;
    }
    FORBIDDEN.iter().copied().find(|p| code.contains(p))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                rust_files(&path, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

#[test]
fn the_detector_flags_numeric_pid_signalling() {
    for sample in [
        concat!("unsafe { libc::ki", "ll(pid, libc::SIGKILL) };"),
        concat!("child.ki", "ll()?;"),
        concat!("rustix::process::ki", "ll_process(pid, Signal::TERM)"),
        concat!("Command::new(\"ki", "ll\").arg(\"-9\")"),
    ] {
        assert!(offending(sample).is_some(), "{sample}");
    }
    assert!(offending("rustix::process::pidfd_send_signal(pidfd, sig)").is_none());
}

#[test]
fn no_source_file_signals_a_numeric_pid() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = Vec::new();
    rust_files(root, &mut files);
    assert!(
        files.len() > 10,
        "scanned only {} files under {}",
        files.len(),
        root.display()
    );
    let mut hits = Vec::new();
    for file in &files {
        if GUEST_SIDE.iter().any(|(path, _why)| {
            file.strip_prefix(root)
                .is_ok_and(|rel| rel == Path::new(path))
        }) {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            if let Some(pattern) = offending(line) {
                hits.push(format!(
                    "{}:{}: {pattern:?}: {}",
                    file.display(),
                    n + 1,
                    line.trim()
                ));
            }
        }
    }
    assert!(
        hits.is_empty(),
        "numeric-PID signalling found; use ProcessHandle::signal:\n{}",
        hits.join("\n")
    );
}
