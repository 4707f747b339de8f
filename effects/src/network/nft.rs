//! The enforcing deny layer (spec 3.7, SR-6 as realised on runsc 20240729,
//! docs/network.md "Deny mechanism"): an nftables netdev egress chain on
//! `tap0` in the enforcement namespace, loaded with `nft -f -` while the
//! Runtime Supervisor holds network administration there. The sandbox's
//! frames meet it before slirp4netns sees them; no route the guest could
//! add inside gVisor gets past it.
use std::io::{self, Write};
use std::process::{Command, Stdio};

/// Loads and lists nftables rulesets in the caller's network namespace.
pub trait NftSys {
    /// `nft -f -` with `ruleset` on its standard input.
    fn load(&self, ruleset: &str) -> Result<(), NftError>;
}

/// Why a ruleset was not loaded.
#[derive(Debug, thiserror::Error)]
pub enum NftError {
    #[error("starting nft (nftables; scripts/setup installs it): {0}")]
    Spawn(#[source] io::Error),
    #[error("writing the ruleset to nft: {0}")]
    Feed(#[source] io::Error),
    #[error("waiting for nft: {0}")]
    Wait(#[source] io::Error),
    #[error("nft refused the egress ruleset ({status}): {stderr}")]
    Refused { status: String, stderr: String },
}

/// The real `nft`: found on `PATH`, else in the system directories a
/// user's `PATH` often lacks (Debian installs it in `/usr/sbin`).
#[derive(Debug, Clone, Copy, Default)]
pub struct RealNft;

/// Where `nft` is looked for after `PATH`.
const SYSTEM_DIRS: [&str; 3] = ["/usr/sbin", "/sbin", "/usr/local/sbin"];

/// The first executable `nft` in `path` (a `PATH` value), then in
/// [`SYSTEM_DIRS`]; `nft` itself (a spawn error names it) when none is.
fn nft_program(path: Option<&std::ffi::OsStr>) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dirs = path
        .map(|p| std::env::split_paths(p).collect::<Vec<_>>())
        .unwrap_or_default();
    dirs.into_iter()
        .chain(SYSTEM_DIRS.iter().map(std::path::PathBuf::from))
        .map(|d| d.join("nft"))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .unwrap_or_else(|| std::path::PathBuf::from("nft"))
}

impl NftSys for RealNft {
    fn load(&self, ruleset: &str) -> Result<(), NftError> {
        let spawned = {
            let _spawning = crate::broker::exclusion::spawn_exclusion();
            Command::new(nft_program(std::env::var_os("PATH").as_deref()))
                .args(["-f", "-"])
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
        };
        let mut child = spawned.map_err(NftError::Spawn)?;
        let fed = match child.stdin.take() {
            Some(mut stdin) => stdin.write_all(ruleset.as_bytes()),
            None => Err(io::Error::other("nft has no standard input")),
        };
        // Waited for in every case: no nft is left behind.
        let out = child.wait_with_output().map_err(NftError::Wait)?;
        fed.map_err(NftError::Feed)?;
        if !out.status.success() {
            return Err(NftError::Refused {
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            });
        }
        Ok(())
    }
}

/// Records every ruleset; fails when primed to.
#[derive(Debug, Default)]
pub struct RecordingNft {
    pub loaded: std::cell::RefCell<Vec<String>>,
    pub refuse: bool,
}

impl NftSys for RecordingNft {
    fn load(&self, ruleset: &str) -> Result<(), NftError> {
        self.loaded.borrow_mut().push(ruleset.to_owned());
        if self.refuse {
            return Err(NftError::Refused {
                status: "exit status: 1".into(),
                stderr: "primed refusal".into(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A `PATH` without the system directories still finds a system `nft`;
    /// an executable on `PATH` comes first; a non-executable file is skipped.
    #[test]
    fn nft_is_found_on_path_first_then_in_system_dirs() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let on_path = dir.path().join("nft");
        std::fs::write(&on_path, "#!/bin/sh\n")?;
        std::fs::set_permissions(&on_path, std::fs::Permissions::from_mode(0o644))?;
        let path = std::env::join_paths([dir.path()]).map_err(io::Error::other)?;
        let without_exec = nft_program(Some(&path));
        assert_ne!(without_exec, on_path);
        std::fs::set_permissions(&on_path, std::fs::Permissions::from_mode(0o755))?;
        assert_eq!(nft_program(Some(&path)), on_path);
        let system = SYSTEM_DIRS
            .iter()
            .map(|d| std::path::Path::new(d).join("nft"))
            .find(|p| p.exists());
        let empty = std::ffi::OsString::from("/nonexistent");
        match system {
            Some(p) => assert_eq!(nft_program(Some(&empty)), p),
            None => assert_eq!(nft_program(Some(&empty)), std::path::PathBuf::from("nft")),
        }
        Ok(())
    }
}
