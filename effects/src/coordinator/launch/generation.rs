//! `StartGeneration` (spec 3.3; FR-12): the Domain and the generation's
//! record in one Domain Store transaction, decision `Starting`; then the
//! generation directory with the static in-sandbox binaries.
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use lazaret_generated::lazaret::Action;
use lazaret_runtime::protocol::records::GenerationIdentity;
use lazaret_runtime::protocol::tls::TlsAuthority;
use lazaret_runtime::protocol::{TrustAnchor, TrustAnchorSeeds};
use lazaret_runtime::records::domain::{Domain, Generation};
use lazaret_runtime::records::ids::{
    ConfigurationFingerprint, CoordinatorId, DomainId, GenerationId, HostPath, NetworkSidecarId,
    ProfileName, SandboxId,
};

use super::super::host::{CoordinatorError, Hc, LaunchInputs, Running};
use super::super::paths::SANDBOX_CREDENTIALS;
use super::super::session::random_bytes;
use super::super::supervisor::{ESCALATE_NAME, INIT_NAME, PROBE_NAME};
use super::pre_generation::PreparedLaunch;
use super::storage::anchor_plans;
use super::{decision_value, Launching, Supervisor};
use crate::domain_store::StoreOp;
use crate::runsc_exec::GUEST_TOOL_NAME;

/// What the Network and Helper participants are bound to (spec 3.7
/// "Durable encoding").
pub(super) struct NetworkInputs {
    pub domain_id: DomainId,
    pub configuration_fingerprint: ConfigurationFingerprint,
    pub network_sidecar_id: NetworkSidecarId,
    /// The derived policy's digest, which RS must report installed.
    pub policy_digest: [u8; 32],
    /// The sandbox ID the generation records.
    pub sandbox_id: SandboxId,
}

/// The launch about to start generation `hc.id`: its fresh sidecar ID, the
/// sandbox ID its Trust Anchor names, its directory and its container ID.
/// The generation's Trust Anchor moves from `hc` into the launch.
pub(super) fn launching(
    hc: &mut Hc<'_, '_>,
    launch: &LaunchInputs<'_>,
    prepared: PreparedLaunch,
) -> Result<Launching, CoordinatorError> {
    let running = launch.running;
    let dir = launch.paths.generation(hc.id.0);
    let trust_anchor = hc
        .trust_anchor
        .take()
        .ok_or(CoordinatorError::TrustAnchorTaken)?;
    let network = NetworkInputs {
        domain_id: DomainId(running.domain_id),
        configuration_fingerprint: ConfigurationFingerprint(running.fingerprint),
        network_sidecar_id: NetworkSidecarId(random_bytes().map_err(CoordinatorError::Random)?),
        policy_digest: launch.policy.digest().0,
        sandbox_id: trust_anchor.manifest().generation_identity.sandbox_id,
    };
    let anchors = anchor_plans(
        launch.paths,
        &launch.persistent_dirs,
        &prepared.lower.rootfs,
        &dir,
    );
    Ok(Launching {
        prepared,
        generation: hc.id,
        dir,
        workspace: std::path::PathBuf::from(&running.workspace),
        network,
        container_id: format!("lazaret-{}-{}", hex_prefix(&running.domain_id), hc.id.0),
        supervisor: Supervisor::Absent,
        running: None,
        network_namespace: None,
        network_answer_due: false,
        anchors,
        trust_anchor,
    })
}

/// Spec 3.3 "Protocol cryptography refinement": generation `generation`'s
/// ephemeral Trust Anchor package and its TLS authority, bound to its
/// generation identity (with a fresh sandbox ID), from fresh kernel
/// randomness, before anything is published or started.
pub(in super::super) fn trust_anchor(
    profile: &str,
    running: &Running,
    generation: GenerationId,
    coordinator_id: CoordinatorId,
) -> Result<(TrustAnchor, TlsAuthority), CoordinatorError> {
    fn seed<const N: usize>() -> Result<[u8; N], CoordinatorError> {
        random_bytes().map_err(CoordinatorError::Random)
    }
    let identity = GenerationIdentity {
        agent_profile: ProfileName::new(profile.to_owned()).map_err(|source| {
            CoordinatorError::RecordValue {
                what: "profile",
                source,
            }
        })?,
        domain_id: DomainId(running.domain_id),
        generation_id: generation,
        configuration_fingerprint: ConfigurationFingerprint(running.fingerprint),
        coordinator_id,
        sandbox_id: SandboxId(seed()?),
    };
    let seeds = TrustAnchorSeeds {
        tls_ca: seed()?,
        tls_ca_serial: seed()?,
        issuer: seed()?,
        coordinator: seed()?,
        coordinator_tls: seed()?,
        sandbox: seed()?,
    };
    crate::crash_point::disclose_secret!("tls-ca", &seeds.tls_ca);
    crate::crash_point::disclose_secret!("issuer", &seeds.issuer);
    crate::crash_point::disclose_secret!("coordinator", &seeds.coordinator);
    crate::crash_point::disclose_secret!("coordinator-tls", &seeds.coordinator_tls);
    crate::crash_point::disclose_secret!("sandbox", &seeds.sandbox);
    let now = super::super::control_tls::unix_now();
    TrustAnchor::new(
        identity,
        &seeds,
        now,
        super::super::control_tls::system_clock(),
    )
    .map_err(CoordinatorError::TrustAnchor)
}

fn hex_prefix(bytes: &[u8; 32]) -> String {
    bytes[..6].iter().map(|b| format!("{b:02x}")).collect()
}

/// StartGeneration: the Domain row and the generation's record, decision
/// `Starting`, in one transaction; then the generation directory's `sbin`
/// with `lazaret-init`, the guest tool and the network probe, read-only.
pub(super) fn start_generation(
    hc: &mut Hc<'_, '_>,
    launch: &LaunchInputs<'_>,
    l: &mut Launching,
) -> Result<(), CoordinatorError> {
    let invalid = |what: &'static str| move |source| CoordinatorError::RecordValue { what, source };
    let running = launch.running;
    let generation = Generation {
        domain_id: l.network.domain_id,
        generation_id: l.generation,
        configuration_fingerprint: l.network.configuration_fingerprint,
        coordinator_id: hc.coordinator_id,
        network_sidecar_id: l.network.network_sidecar_id,
        sandbox_id: l.network.sandbox_id,
        durable_decision: decision_value("Starting")?,
    };
    let domain = Domain {
        domain_id: l.network.domain_id,
        profile_name: ProfileName::new(launch.profile.clone()).map_err(invalid("profile"))?,
        canonical_workspace: HostPath::new(running.workspace.clone().into_bytes())
            .map_err(invalid("workspace"))?,
    };
    let mut ops = vec![
        StoreOp::PutDomain(domain),
        StoreOp::InsertGeneration(generation),
    ];
    if launch.escalation {
        ops.push(super::super::mailbox::mailbox_intent(l.generation, &l.dir)?);
    }
    let c = hc.model.me();
    hc.step(Action::StartGeneration { c }, |hc| hc.apply(&ops))?;
    let init_dir = l.dir.join("sbin");
    let io_err = |path: &Path| {
        let path = path.to_owned();
        move |source| CoordinatorError::Io { path, source }
    };
    std::fs::create_dir_all(&init_dir).map_err(io_err(&init_dir))?;
    for (name, bytes) in [
        (INIT_NAME, launch.binaries.init),
        (GUEST_TOOL_NAME, launch.binaries.guest),
        (PROBE_NAME, launch.binaries.probe),
        (ESCALATE_NAME, launch.binaries.escalate),
    ] {
        let path = init_dir.join(name);
        std::fs::write(&path, bytes)
            .and_then(|()| std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o555)))
            .map_err(io_err(&path))?;
    }
    if launch.escalation {
        super::super::mailbox::make_mailbox(hc, &l.dir)?;
    }
    write_sandbox_credentials(&mut l.trust_anchor, &l.dir)
}

/// Spec 3.3: the Agent Sandbox's credential bundle, the source of its
/// read-only mount at the fixed credential path, written once (a new file,
/// world-readable for every sandbox user, writable by nobody) into the
/// generation directory; the sandbox key leaves the Trust Anchor with it.
/// The source is unlinked once the sandbox runs
/// ([`unlink_sandbox_credentials`]).
fn write_sandbox_credentials(
    trust_anchor: &mut TrustAnchor,
    dir: &Path,
) -> Result<(), CoordinatorError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let bundle = trust_anchor
        .take_sandbox_bundle()
        .ok_or(CoordinatorError::SandboxCredentialsTaken)?;
    let bytes = bundle
        .encode_secret()
        .map_err(CoordinatorError::SandboxCredentials)?;
    let path = dir.join(SANDBOX_CREDENTIALS);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o444)
        .open(&path)
        .and_then(|mut file| file.write_all(&bytes))
        .map_err(|source| CoordinatorError::Io { path, source })
}

/// Spec 3.3: "HC unlinks the sandbox-key source after the running sandbox
/// holds the mount and retains only its public key" (the Trust Anchor gave
/// the key away with the bundle).
pub(super) fn unlink_sandbox_credentials(dir: &Path) -> Result<(), CoordinatorError> {
    let path = dir.join(SANDBOX_CREDENTIALS);
    std::fs::remove_file(&path).map_err(|source| CoordinatorError::Io { path, source })
}
