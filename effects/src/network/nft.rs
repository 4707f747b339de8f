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

/// The real `nft` from `PATH`.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealNft;

impl NftSys for RealNft {
    fn load(&self, ruleset: &str) -> Result<(), NftError> {
        let spawned = {
            let _spawning = crate::broker::exclusion::spawn_exclusion();
            Command::new("nft")
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
