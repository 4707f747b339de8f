//! A real Trust Anchor package for tests that play the Host Coordinator
//! (spec 3.3): Domain `[1; 32]`, configuration `[2; 32]`, generation 1,
//! issued now by the system clock.
use lazaret_effects::coordinator::control_tls;
use lazaret_runtime::protocol::records::GenerationIdentity;
use lazaret_runtime::protocol::tls::TlsAuthority;
use lazaret_runtime::protocol::{TrustAnchor, TrustAnchorSeeds};
use lazaret_runtime::records::ids::{
    ConfigurationFingerprint, CoordinatorId, DomainId, GenerationId, ProfileName, SandboxId,
};

pub fn trust_anchor() -> (TrustAnchor, TlsAuthority) {
    let identity = GenerationIdentity {
        agent_profile: ProfileName::new("agent").unwrap(),
        domain_id: DomainId([1; 32]),
        generation_id: GenerationId(1),
        configuration_fingerprint: ConfigurationFingerprint([2; 32]),
        coordinator_id: CoordinatorId([3; 16]),
        sandbox_id: SandboxId([4; 16]),
    };
    let seeds = TrustAnchorSeeds {
        tls_ca: [5; 32],
        tls_ca_serial: [6; 16],
        issuer: [7; 32],
        coordinator: [8; 32],
        coordinator_tls: [12; 32],
        sandbox: [9; 32],
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    TrustAnchor::new(
        identity,
        &seeds,
        i64::try_from(now).unwrap(),
        control_tls::system_clock(),
    )
    .unwrap()
}
