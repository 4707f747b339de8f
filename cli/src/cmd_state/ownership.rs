//! A participant snapshot's non-process evidence as named values (IDs and
//! digests in hex, paths as text, identities as numbers), for both the
//! human and the `--json` form. Process slots are shown separately, with
//! their live check (see `evidence`).
use lazaret_runtime::records::participant::{
    AnchorMounts, MountIdentity, NamespaceIdentity, NetworkReadinessEvidence, ParticipantOwnership,
    StateAnchorReleaseEvidence,
};
use lazaret_runtime::records::process::PersistedHostProcessOwnership;
use serde_json::{json, Value};
use std::fmt::Display;

/// The recorded phase and identity of a process slot.
pub fn slot_json(slot: &PersistedHostProcessOwnership) -> Value {
    match slot.identity() {
        None => json!({ "phase": slot.phase_name() }),
        Some(id) => json!({
            "phase": slot.phase_name(),
            "host_pid": id.host_pid.0,
            "start_time_ticks": id.start_time_ticks,
            "boot_id": id.authority.boot_id.to_string(),
            "pidfs_st_dev": id.authority.pidfs_st_dev.0,
            "pidfs_st_ino": id.authority.pidfs_st_ino.0,
        }),
    }
}

/// The recorded phase and identity of a process slot, in words.
pub fn slot_text(slot: &PersistedHostProcessOwnership) -> String {
    match slot.identity() {
        None => slot.phase_name().to_owned(),
        Some(id) => format!(
            "{} pid {} start {} (boot {}, pidfs {}:{})",
            slot.phase_name(),
            id.host_pid.0,
            id.start_time_ticks,
            id.authority.boot_id,
            id.authority.pidfs_st_dev.0,
            id.authority.pidfs_st_ino.0
        ),
    }
}

fn namespace(n: &NamespaceIdentity) -> Value {
    json!({ "device": n.device, "inode": n.inode })
}

fn mount(m: &MountIdentity) -> Value {
    json!({ "mount_id": m.mount_id, "device": m.device, "inode": m.inode })
}

fn anchor_mounts(m: &AnchorMounts) -> Value {
    let ns = &m.namespace;
    json!({
        "mount_namespace": { "id": ns.id, "device": ns.device, "inode": ns.inode },
        "anchors": m.anchors.iter().map(|a| json!({
            "mountpoint": a.mountpoint.to_string(),
            "mount": mount(&a.mount),
        })).collect::<Vec<_>>(),
    })
}

fn released(r: &StateAnchorReleaseEvidence) -> Value {
    json!({
        "runtime_supervisor": slot_json(&r.runtime_supervisor),
        "mounts": r.mounts.as_ref().map(anchor_mounts),
    })
}

fn readiness(r: &NetworkReadinessEvidence) -> Value {
    json!({
        "domain_id": r.domain_id.to_string(),
        "generation_id": r.generation_id.0,
        "network_sidecar_id": r.network_sidecar_id.to_string(),
        "readiness_fingerprint": r.readiness_fingerprint.to_string(),
    })
}

/// Collects the recorded (present) fields in declaration order.
#[derive(Default)]
struct Fields(Vec<(&'static str, Value)>);

impl Fields {
    fn text<T: Display>(&mut self, name: &'static str, value: Option<&T>) {
        if let Some(v) = value {
            self.0.push((name, Value::String(v.to_string())));
        }
    }
    fn value<T>(&mut self, name: &'static str, value: Option<&T>, f: impl Fn(&T) -> Value) {
        if let Some(v) = value {
            self.0.push((name, f(v)));
        }
    }
}

/// The snapshot's recorded non-process fields (absent ones omitted).
pub fn fields(o: &ParticipantOwnership) -> Vec<(&'static str, Value)> {
    let mut f = Fields::default();
    match o {
        ParticipantOwnership::PreparedLower(p) => {
            f.text("prepared_artifact_id", p.prepared_artifact_id.as_ref());
            f.text("source_identity", p.source_identity.as_ref());
            f.value("lease_state", p.lease_state.as_ref(), |s| {
                Value::String(format!("{s:?}"))
            });
            f.text("path", p.path.as_ref());
            f.value("device", p.device.as_ref(), |d| json!(d));
            f.value("inode", p.inode.as_ref(), |i| json!(i));
            f.value(
                "released_state_anchor",
                p.released_state_anchor.as_ref(),
                released,
            );
        }
        ParticipantOwnership::StateAnchor(s) => {
            f.text("lower_artifact_id", s.lower_artifact_id.as_ref());
            f.text("upper_path", s.upper_path.as_ref());
            f.text("work_path", s.work_path.as_ref());
            f.text("merged_path", s.merged_path.as_ref());
            f.value("mounts", s.mounts.as_ref(), anchor_mounts);
        }
        ParticipantOwnership::GitRouting(g) => {
            f.text("mountpoint", g.mountpoint.as_ref());
            f.text("host_root", g.host_root.as_ref());
            f.text("isolated_root", g.isolated_root.as_ref());
            f.value("mount", g.mount.as_ref(), mount);
        }
        ParticipantOwnership::Network(n) => {
            f.text("derived_policy_digest", n.derived_policy_digest.as_ref());
            f.text("readiness_fingerprint", n.readiness_fingerprint.as_ref());
            f.value(
                "readiness_evidence",
                n.readiness_evidence.as_ref(),
                readiness,
            );
            f.value("namespace", n.namespace.as_ref(), namespace);
        }
        ParticipantOwnership::Helper(h) => {
            f.text("network_sidecar_id", h.network_sidecar_id.as_ref());
        }
        ParticipantOwnership::Sandbox(s) => {
            f.text("container_id", s.container_id.as_ref());
            f.text("runtime_root", s.runtime_root.as_ref());
            f.text("bundle_digest", s.bundle_digest.as_ref());
        }
        ParticipantOwnership::Publication(p) => {
            f.text("socket_path", p.socket_path.as_ref());
            f.text("identity_path", p.identity_path.as_ref());
        }
    }
    f.0
}

/// `name=value` pairs for the human form (strings unquoted).
pub fn fields_text(fields: &[(&'static str, Value)]) -> String {
    fields
        .iter()
        .map(|(name, value)| match value {
            Value::String(s) => format!("{name}={s}"),
            other => format!("{name}={other}"),
        })
        .collect::<Vec<_>>()
        .join("  ")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests fail by panicking
mod tests {
    use super::*;
    use lazaret_runtime::records::ids::{ContainerId, HostPath};
    use lazaret_runtime::records::participant::{
        AnchorMount, MountNamespaceIdentity, SandboxOwnership, StateAnchorOwnership,
    };

    #[test]
    fn recorded_fields_are_named_and_absent_ones_omitted() {
        let sandbox = ParticipantOwnership::Sandbox(SandboxOwnership {
            container_id: Some(ContainerId::new("lazaret-ab-3").unwrap()),
            runtime_root: Some(HostPath::new("/run/x").unwrap()),
            ..SandboxOwnership::default()
        });
        let f = fields(&sandbox);
        assert_eq!(
            fields_text(&f),
            "container_id=lazaret-ab-3  runtime_root=/run/x"
        );
        let anchor = ParticipantOwnership::StateAnchor(StateAnchorOwnership {
            mounts: Some(AnchorMounts {
                namespace: MountNamespaceIdentity {
                    id: 9,
                    device: 3,
                    inode: 4,
                },
                anchors: vec![AnchorMount {
                    mountpoint: HostPath::new("/run/x/anchors/usr").unwrap(),
                    mount: MountIdentity {
                        mount_id: 5,
                        device: 6,
                        inode: 7,
                    },
                }],
            }),
            ..StateAnchorOwnership::default()
        });
        let f = fields(&anchor);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].1["anchors"][0]["mount"]["mount_id"], 5);
        assert_eq!(f[0].1["mount_namespace"]["id"], 9);
        assert!(fields(&ParticipantOwnership::Sandbox(SandboxOwnership::default())).is_empty());
    }
}
