//! The Runtime Supervisor's network authority (spec 3.7 "Network
//! authority", SR-5): it holds CAP_NET_ADMIN only while it prepares,
//! imports and attests the enforcement namespace, then drops it
//! irreversibly. Capabilities are per thread, so every thread of the
//! supervisor drops its own, and the drop is confirmed over every task of
//! the process.
use std::io;

use rustix::thread::{CapabilitySet, CapabilitySets};

/// `CAP_NET_ADMIN`'s bit in the `/proc/*/status` capability masks.
const NET_ADMIN_BIT: u64 = 1 << 12;

/// The kernel calls of the drop and of its confirmation.
pub trait AuthoritySys {
    /// Removes CAP_NET_ADMIN from the calling thread's bounding, ambient,
    /// inheritable, permitted and effective sets. Without it in the
    /// bounding set no later `execve` can bring it back.
    fn drop_network_administration(&self) -> io::Result<()>;
    /// The tasks of this process that still hold CAP_NET_ADMIN in any set,
    /// as `TID:SET` entries; empty once the drop is complete.
    fn network_administration_holders(&self) -> io::Result<Vec<String>>;
}

/// The real kernel.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealAuthority;

impl AuthoritySys for RealAuthority {
    fn drop_network_administration(&self) -> io::Result<()> {
        // spec 3.7, SR-5: the bounding set first, so the drop stays.
        rustix::thread::remove_capability_from_bounding_set(CapabilitySet::NET_ADMIN)?;
        rustix::thread::configure_capability_in_ambient_set(CapabilitySet::NET_ADMIN, false)?;
        let sets = rustix::thread::capabilities(None)?;
        rustix::thread::set_capabilities(
            None,
            CapabilitySets {
                effective: sets.effective - CapabilitySet::NET_ADMIN,
                permitted: sets.permitted - CapabilitySet::NET_ADMIN,
                inheritable: sets.inheritable - CapabilitySet::NET_ADMIN,
            },
        )?;
        Ok(())
    }

    fn network_administration_holders(&self) -> io::Result<Vec<String>> {
        let mut holders = Vec::new();
        for task in std::fs::read_dir("/proc/self/task")? {
            let task = task?;
            let status = match std::fs::read_to_string(task.path().join("status")) {
                Ok(text) => text,
                // The task ended while it was listed.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            let tid = task.file_name().to_string_lossy().into_owned();
            holders.extend(
                holding_sets(&status)?
                    .into_iter()
                    .map(|set| format!("{tid}:{set}")),
            );
        }
        Ok(holders)
    }
}

/// The capability sets of one `/proc/*/status` text that hold
/// CAP_NET_ADMIN. A status without one of the five masks is an error.
fn holding_sets(status: &str) -> io::Result<Vec<&'static str>> {
    let mut holding = Vec::new();
    for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        let mask = status
            .lines()
            .find_map(|line| line.strip_prefix(set)?.strip_prefix(':'))
            .and_then(|value| u64::from_str_radix(value.trim(), 16).ok())
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("the task status has no readable {set} line"),
                )
            })?;
        if mask & NET_ADMIN_BIT != 0 {
            holding.push(set);
        }
    }
    Ok(holding)
}

/// Records calls; holders are what the test primes.
#[derive(Debug, Default)]
pub struct RecordingAuthority {
    pub calls: std::sync::Mutex<Vec<&'static str>>,
    /// What `network_administration_holders` answers.
    pub holders: Vec<String>,
    /// When set, only the first this many listings name `holders` (a
    /// thread that was exiting); later ones are empty.
    pub exiting_after: Option<usize>,
}

impl AuthoritySys for RecordingAuthority {
    fn drop_network_administration(&self) -> io::Result<()> {
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push("drop_network_administration");
        Ok(())
    }

    fn network_administration_holders(&self) -> io::Result<Vec<String>> {
        let mut calls = self
            .calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        calls.push("network_administration_holders");
        let listings = calls
            .iter()
            .filter(|c| **c == "network_administration_holders")
            .count();
        Ok(match self.exiting_after {
            Some(n) if listings > n => Vec::new(),
            _ => self.holders.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_masks_name_the_sets_that_hold_net_admin() -> io::Result<()> {
        let status = "Name:\tlazaret\nCapInh:\t0000000000000000\nCapPrm:\t000001ffffffffff\n\
                      CapEff:\t000001ffffffffff\nCapBnd:\t000001ffffffefff\nCapAmb:\t0000000000000000\n";
        assert_eq!(holding_sets(status)?, vec!["CapPrm", "CapEff"]);
        let dropped = status.replace("000001ffffffffff", "000001ffffffefff");
        assert!(holding_sets(&dropped)?.is_empty());
        assert!(holding_sets("CapInh:\t0\n").is_err());
        Ok(())
    }

    /// The real drop, in a thread of its own: afterwards that thread holds
    /// CAP_NET_ADMIN in no set, and cannot take it back.
    #[test]
    fn a_thread_that_dropped_network_administration_cannot_regain_it() -> io::Result<()> {
        std::thread::spawn(|| -> io::Result<()> {
            RealAuthority.drop_network_administration()?;
            let status = std::fs::read_to_string("/proc/thread-self/status")?;
            assert!(holding_sets(&status)?.is_empty(), "{status}");
            let sets = rustix::thread::capabilities(None)?;
            let regained = rustix::thread::set_capabilities(
                None,
                CapabilitySets {
                    effective: sets.effective | CapabilitySet::NET_ADMIN,
                    permitted: sets.permitted | CapabilitySet::NET_ADMIN,
                    inheritable: sets.inheritable,
                },
            );
            assert!(regained.is_err(), "CAP_NET_ADMIN came back");
            Ok(())
        })
        .join()
        .map_err(|_| io::Error::other("the dropping thread panicked"))?
    }
}
