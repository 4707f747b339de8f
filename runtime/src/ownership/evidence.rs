//! Field-by-field comparison of two snapshots of the same shape.
use super::slot;
use super::OwnershipError;
use crate::records::participant::{
    GitRoutingOwnership, HelperOwnership, NetworkOwnership, PreparedLowerOwnership,
    PublicationOwnership, SandboxOwnership, StateAnchorOwnership,
};
use crate::records::process::{
    BootId, HostProcessOwnershipSlot as Slot, PersistedHostProcessOwnership,
};
use crate::records::terminal::TerminalSnapshot;

/// One field of a snapshot seen in two versions.
#[derive(Debug)]
pub enum Pair<'a> {
    Value {
        field: &'static str,
        prev_present: bool,
        next_present: bool,
        equal: bool,
    },
    Slot {
        field: &'static str,
        slot: Slot,
        prev: &'a PersistedHostProcessOwnership,
        next: &'a PersistedHostProcessOwnership,
    },
}

impl Pair<'_> {
    fn value<T: PartialEq>(field: &'static str, prev: &Option<T>, next: &Option<T>) -> Self {
        Pair::Value {
            field,
            prev_present: prev.is_some(),
            next_present: next.is_some(),
            equal: prev == next,
        }
    }
}

/// A snapshot shape: its fields as comparable pairs and its emptiness.
pub trait Evidence {
    fn pairs<'a>(prev: &'a Self, next: &'a Self) -> Vec<Pair<'a>>;
    /// All optional fields absent and all process slots Unassigned.
    fn is_empty(&self) -> bool;
}

macro_rules! evidence {
    ($ty:ty { values: [$($v:ident),*], slots: [$($s:ident => $slot:expr),*] }) => {
        impl Evidence for $ty {
            fn pairs<'a>(prev: &'a Self, next: &'a Self) -> Vec<Pair<'a>> {
                vec![
                    $(Pair::value(stringify!($v), &prev.$v, &next.$v),)*
                    $(Pair::Slot { field: stringify!($s), slot: $slot, prev: &prev.$s, next: &next.$s },)*
                ]
            }
            fn is_empty(&self) -> bool {
                true $(&& self.$v.is_none())* $(&& self.$s == PersistedHostProcessOwnership::Unassigned)*
            }
        }
    };
}

evidence!(PreparedLowerOwnership {
    values: [
        prepared_artifact_id,
        source_identity,
        lease_state,
        path,
        device,
        inode,
        released_state_anchor
    ],
    slots: []
});
evidence!(StateAnchorOwnership {
    values: [lower_artifact_id, upper_path, work_path, merged_path, mounts],
    slots: [runtime_supervisor => Slot::StateAnchorRuntimeSupervisor]
});
evidence!(GitRoutingOwnership {
    values: [mountpoint, host_root, isolated_root, mount],
    slots: [daemon => Slot::GitRoutingDaemon]
});
evidence!(NetworkOwnership {
    values: [derived_policy_digest, readiness_fingerprint, readiness_evidence, namespace],
    slots: [runtime_supervisor => Slot::NetworkRuntimeSupervisor]
});
evidence!(HelperOwnership {
    values: [network_sidecar_id],
    slots: [connectivity_helper => Slot::HelperConnectivityHelper,
            runtime_supervisor => Slot::HelperRuntimeSupervisor]
});
evidence!(SandboxOwnership {
    values: [container_id, runtime_root, bundle_digest],
    slots: [host_coordinator => Slot::SandboxHostCoordinator,
            runtime_supervisor => Slot::SandboxRuntimeSupervisor,
            attached_runsc => Slot::SandboxAttachedRunsc]
});
evidence!(PublicationOwnership {
    values: [socket_path, identity_path],
    slots: []
});
evidence!(TerminalSnapshot {
    values: [container_id, pty_master, guest_process],
    slots: [host_coordinator => Slot::SessionTerminalHostCoordinator,
            exec_client => Slot::SessionTerminalExecClient]
});

/// Monotonic acquisition: optional fields only absent -> present, slots only
/// along [`slot::check_advance`]. Fields named in `exempt` are checked by the
/// caller (the prepared-lower lease phase).
pub fn check_monotonic(
    pairs: &[Pair<'_>],
    exempt: &[&'static str],
    boot: BootId,
) -> Result<(), OwnershipError> {
    for pair in pairs {
        match *pair {
            Pair::Value { field, .. } if exempt.contains(&field) => {}
            Pair::Value {
                field,
                prev_present: true,
                next_present: false,
                ..
            } => return Err(OwnershipError::EvidenceCleared { field }),
            Pair::Value {
                field,
                prev_present: true,
                equal: false,
                ..
            } => return Err(OwnershipError::EvidenceReplaced { field }),
            Pair::Value { .. } => {}
            Pair::Slot {
                field,
                slot,
                prev,
                next,
            } => slot::check_advance(field, slot, prev, next, boot)?,
        }
    }
    Ok(())
}
