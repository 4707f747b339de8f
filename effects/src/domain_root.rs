//! Fixed file names inside a persistent Domain Root (spec 3.2, 3.6): the
//! Domain flock and the Domain Store sit side by side, because the store may
//! be opened only under that lock (FR-17; `DomainStore` refuses a store that
//! is not beside its lock).
use std::path::{Path, PathBuf};

/// The Domain lifecycle lock file.
pub const DOMAIN_LOCK_FILE: &str = "domain.lock";
/// The Domain Store (redb).
pub const DOMAIN_STORE_FILE: &str = "domain.redb";

/// Paths inside one Domain Root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DomainRootLayout {
    root: PathBuf,
}

impl DomainRootLayout {
    pub fn new(root: &Path) -> Self {
        Self {
            root: root.to_owned(),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn lock_path(&self) -> PathBuf {
        self.root.join(DOMAIN_LOCK_FILE)
    }

    pub fn store_path(&self) -> PathBuf {
        self.root.join(DOMAIN_STORE_FILE)
    }
}
