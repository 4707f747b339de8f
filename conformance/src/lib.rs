//! Model checking, TLC parity, trace replay and end-to-end suites.

pub mod explore;
pub mod fixtures;
pub mod mutation;
pub mod test_user;
pub mod tlc;

use std::path::{Path, PathBuf};

/// The workspace root (the parent of this crate).
pub fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}
