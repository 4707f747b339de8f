//! Scaffolding shared by the end-to-end suites that run Lazaret as the
//! unprivileged test user: who that user is, the default image, ownership
//! of a scenario's tree. Each suite uses part of it.
#![allow(dead_code)] // each test binary compiles this module and uses part of it

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn test_user() -> String {
    std::env::var("LAZARET_TEST_USER").unwrap_or_else(|_| "lazaret-test".to_owned())
}

fn id_of(flag: &str) -> u32 {
    let out = Command::new("id")
        .args([flag, &test_user()])
        .output()
        .expect("id");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("a numeric id")
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The default image (scripts/build-image caches it by content hash).
pub fn default_image() -> String {
    if let Ok(image) = std::env::var("LAZARET_TEST_IMAGE") {
        return image;
    }
    let out = Command::new(repo_root().join("scripts/build-image"))
        .output()
        .expect("scripts/build-image");
    assert!(
        out.status.success(),
        "scripts/build-image failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("the image reference is UTF-8")
        .trim()
        .to_owned()
}

/// Gives `path` and everything under it to the test user (when running as
/// root).
pub fn chown_tree(path: &Path) {
    if rustix::process::geteuid().is_root() {
        let status = Command::new("chown")
            .args(["-R", &format!("{}:{}", id_of("-u"), id_of("-g"))])
            .arg(path)
            .status()
            .expect("chown");
        assert!(status.success());
    }
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// What a Domain may leave under `root` (a runtime or storage root): every
/// file — sockets, logs, bundles, runsc state — and every `gen-*`
/// directory, even empty. The leak checks of every suite use it.
pub fn runtime_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            match e.file_type() {
                Ok(t) if t.is_dir() => {
                    if path
                        .file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("gen-"))
                    {
                        out.push(path.clone());
                    }
                    stack.push(path);
                }
                _ => out.push(path),
            }
        }
    }
    out
}
