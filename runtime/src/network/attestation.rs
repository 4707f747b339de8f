//! The known-live canary and the sandbox's own view of the network as
//! evidence (spec 3.7 evidence table: "Known-live control", "Imported
//! behavior", "Cleanup observation"). Pure: the challenge answers, the
//! requests the Runtime Supervisor sends the sandbox's init, and the
//! judgment of init's reports. `lazaret_effects::network::canary` runs the
//! responders and carries the messages.
//!
//! A challenge is 32 random bytes; a canary endpoint answers it with
//! HMAC-SHA256 under a key that lives only in the Runtime Supervisor, over
//! the endpoint's role, the Domain generation and the challenge. An answer
//! therefore proves it came from this generation's responder for that
//! endpoint, and nothing on another network (a host address reached
//! through slirp4netns, say) can produce it.
use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use super::projection::PolicyProjection;
use super::topology::TAP_DEVICE;

/// The length of a challenge and of its answer.
pub const CHALLENGE_LEN: usize = 32;

/// What the MAC input starts with, so the key answers nothing else.
const ANSWER_CONTEXT: &[u8] = b"lazaret-canary-answer-v1";

/// The canary key: random per launch, never leaves the Runtime Supervisor.
#[derive(Clone)]
pub struct CanaryKey([u8; 32]);

impl CanaryKey {
    pub fn new(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }
}

impl std::fmt::Debug for CanaryKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CanaryKey(..)")
    }
}

/// Which canary endpoint answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CanaryRole {
    /// 10.137.55.2: the sandbox must reach it.
    Allowed,
    /// 10.137.55.3: the sandbox must not.
    Denied,
}

impl std::fmt::Display for CanaryRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Allowed => "allowed canary 10.137.55.2",
            Self::Denied => "denied canary 10.137.55.3",
        })
    }
}

impl CanaryRole {
    fn tag(self) -> u8 {
        match self {
            Self::Allowed => 1,
            Self::Denied => 2,
        }
    }
}

/// A challenge for one canary endpoint.
pub type Challenge = [u8; CHALLENGE_LEN];

/// The answer `role`'s responder gives to `challenge` in `generation`:
/// HMAC-SHA256(key, context ‖ role ‖ generation ‖ challenge) (RFC 2104).
pub fn canary_answer(
    key: &CanaryKey,
    generation: u64,
    role: CanaryRole,
    challenge: &Challenge,
) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut inner_pad = [0x36u8; BLOCK];
    let mut outer_pad = [0x5cu8; BLOCK];
    for (i, byte) in key.0.iter().enumerate() {
        inner_pad[i] ^= byte;
        outer_pad[i] ^= byte;
    }
    let inner = Sha256::new()
        .chain_update(inner_pad)
        .chain_update(ANSWER_CONTEXT)
        .chain_update([role.tag()])
        .chain_update(generation.to_be_bytes())
        .chain_update(challenge)
        .finalize();
    Sha256::new()
        .chain_update(outer_pad)
        .chain_update(inner)
        .finalize()
        .into()
}

/// Whether `answer` is `role`'s answer to `challenge` in `generation`,
/// compared in constant time.
pub fn is_canary_answer(
    key: &CanaryKey,
    generation: u64,
    role: CanaryRole,
    challenge: &Challenge,
    answer: &[u8],
) -> bool {
    let expected = canary_answer(key, generation, role, challenge);
    answer.len() == expected.len()
        && answer
            .iter()
            .zip(expected)
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// The least time the sandbox gives an endpoint that must stay
/// unreachable, in milliseconds.
///
/// The wait is relative to the live path: the allowed canary's measured
/// connect-to-answer time from inside gVisor (2 to 19 ms measured on these
/// machines at boot; it includes the neighbour resolution a first connect
/// needs)
/// times [`RTT_FACTOR`], and never less than this floor. Both endpoints
/// sit on the same link behind the same responders, so an endpoint the
/// sandbox could reach would connect within one such time (less: the time
/// includes the challenge's answer); two of them without a connection
/// show the route does not lead there. A fixed long wait would only slow
/// every cold launch.
pub const UNREACHABLE_WAIT_MS: u64 = 10;
/// The multiple of the allowed canary's round trip an unreachable
/// endpoint is given (init applies the same factor to the denied canary).
pub const RTT_FACTOR: u64 = 2;
/// The longest unreachability wait.
pub const UNREACHABLE_WAIT_MAX_MS: u64 = 10_000;

/// The request for init's imported-behavior round.
pub fn attest_request(allowed: &Challenge, denied: &Challenge) -> String {
    format!(
        "attest {} {} {UNREACHABLE_WAIT_MS}\n",
        hex::encode(allowed),
        hex::encode(denied)
    )
}

/// The request for init's cleanup-observation round: the formerly allowed
/// endpoint gets [`RTT_FACTOR`] times the round trip it had while live.
pub fn cleanup_request(challenge: &Challenge, evidence: &ImportedEvidence) -> String {
    let wait = (evidence.allowed_round_trip_us.saturating_mul(RTT_FACTOR) / 1000)
        .clamp(UNREACHABLE_WAIT_MS, UNREACHABLE_WAIT_MAX_MS);
    format!("cleanup {} {wait}\n", hex::encode(challenge))
}

/// What the imported-behavior round measured that later steps use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImportedEvidence {
    /// The allowed canary's connect-to-answer time inside the sandbox.
    pub allowed_round_trip_us: u64,
}

/// The line that ends each of init's reports.
pub const REPORT_END: &str = "end";
/// At most this many lines in one report (a round has at most seven).
pub const REPORT_LINES_MAX: usize = 16;

/// Why the evidence refuses readiness: one variant per predicate of the
/// spec 3.7 evidence table, each naming it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AttestationError {
    #[error("known-live control: the {role} did not authenticate its challenge from the enforcement namespace: {detail}")]
    CanaryNotLive { role: CanaryRole, detail: String },
    #[error("imported behavior: the sandbox's init report is malformed at {line:?}: {detail}")]
    Malformed { line: String, detail: &'static str },
    #[error("imported behavior: the sandbox's init did not report the check {check}")]
    Missing { check: &'static str },
    #[error("imported behavior: the sandbox's init refused the request: {0}")]
    Refused(String),
    #[error("imported behavior: the sandbox does not see {check} as expected: {detail}")]
    Failed { check: &'static str, detail: String },
    #[error("imported behavior: the sandbox cannot authenticate the allowed canary 10.137.55.2: {detail}")]
    AllowedCanary { detail: String },
    #[error("imported behavior: the sandbox reached the denied canary 10.137.55.3")]
    DeniedCanaryReached,
    #[error("imported behavior: the denied canary 10.137.55.3 accepted {accepted} connections; expected only the known-live check's")]
    DeniedCanaryAccepted { accepted: usize },
    #[error(
        "cleanup observation: the sandbox still reaches the formerly allowed canary 10.137.55.2"
    )]
    FormerlyAllowedReached,
    #[error("cleanup observation: the enforcement namespace shows {found:?} after the canary cleanup; expected only lo and tap0 (index {tap0_index})")]
    LinksRemain { found: Vec<String>, tap0_index: u32 },
    #[error("cleanup observation: the IPv6 disposition changed: {detail}")]
    Ipv6Changed { detail: String },
}

/// One report: each check's fields, by check name.
type Checks = BTreeMap<String, BTreeMap<String, String>>;

/// Parses init's report lines (`check=NAME key=value...`, or
/// `error=TEXT`), without the final [`REPORT_END`] line.
fn parse(lines: &[String]) -> Result<Checks, AttestationError> {
    let mut checks = Checks::new();
    for line in lines {
        let mut fields = BTreeMap::new();
        for field in line.split(' ') {
            let Some((key, value)) = field.split_once('=') else {
                return Err(AttestationError::Malformed {
                    line: line.clone(),
                    detail: "a field without '='",
                });
            };
            fields.insert(key.to_owned(), value.to_owned());
        }
        if let Some(error) = fields
            .get("error")
            .filter(|_| !fields.contains_key("check"))
        {
            return Err(AttestationError::Refused(error.clone()));
        }
        let Some(name) = fields.remove("check") else {
            return Err(AttestationError::Malformed {
                line: line.clone(),
                detail: "no check= field",
            });
        };
        if checks.insert(name, fields).is_some() {
            return Err(AttestationError::Malformed {
                line: line.clone(),
                detail: "the check is reported twice",
            });
        }
    }
    Ok(checks)
}

fn check<'a>(
    checks: &'a Checks,
    name: &'static str,
) -> Result<&'a BTreeMap<String, String>, AttestationError> {
    checks
        .get(name)
        .ok_or(AttestationError::Missing { check: name })
}

fn field<'a>(fields: &'a BTreeMap<String, String>, key: &str) -> &'a str {
    fields.get(key).map(String::as_str).unwrap_or("")
}

/// A check init decides itself (`result=ok`).
fn passed(checks: &Checks, name: &'static str) -> Result<(), AttestationError> {
    let fields = check(checks, name)?;
    if field(fields, "result") == "ok" {
        return Ok(());
    }
    Err(AttestationError::Failed {
        check: name,
        detail: format!(
            "result={} {}",
            field(fields, "result"),
            field(fields, "detail")
        ),
    })
}

/// An endpoint that must not answer: `result=unreachable`.
fn unreachable(checks: &Checks, name: &'static str) -> Result<bool, AttestationError> {
    let fields = check(checks, name)?;
    match field(fields, "result") {
        "unreachable" => Ok(true),
        "reached" => Ok(false),
        other => Err(AttestationError::Failed {
            check: name,
            detail: format!("result={other} error={}", field(fields, "error")),
        }),
    }
}

/// The errnos of a route change refused for want of authority: EPERM
/// (Linux) and EACCES (gVisor 20240729, measured).
const ROUTE_REFUSALS: [&str; 2] = ["1", "13"];

/// Judges the imported-behavior round (spec 3.7): `tap0` and canary link
/// identity, no IPv6, no network administration, no route change, the
/// allowed canary authenticated with this generation's answer, the denied
/// canary not reached.
pub fn judge_imported(
    lines: &[String],
    key: &CanaryKey,
    generation: u64,
    allowed: &Challenge,
) -> Result<ImportedEvidence, AttestationError> {
    let checks = parse(lines)?;
    for name in [
        "tap0",
        "canary-link",
        "ipv6",
        "capabilities",
        "route-mutation",
    ] {
        passed(&checks, name)?;
    }
    // Refused for want of authority, not for another reason (an existing
    // route, say): EPERM from Linux, EACCES from gVisor.
    let errno = field(check(&checks, "route-mutation")?, "errno");
    if !ROUTE_REFUSALS.contains(&errno) {
        return Err(AttestationError::Failed {
            check: "route-mutation",
            detail: format!("refused with errno {errno}, not for want of permission"),
        });
    }
    let answer = check(&checks, "allowed-canary")?;
    if field(answer, "result") != "answered" {
        return Err(AttestationError::AllowedCanary {
            detail: format!(
                "result={} error={}",
                field(answer, "result"),
                field(answer, "error")
            ),
        });
    }
    let got = hex::decode(field(answer, "response")).unwrap_or_default();
    if !is_canary_answer(key, generation, CanaryRole::Allowed, allowed, &got) {
        return Err(AttestationError::AllowedCanary {
            detail: "its answer is not this generation's canary answer".to_owned(),
        });
    }
    let Ok(allowed_round_trip_us) = field(answer, "rtt_us").parse::<u64>() else {
        return Err(AttestationError::Malformed {
            line: format!("{answer:?}"),
            detail: "the allowed canary's rtt_us is not a number",
        });
    };
    if !unreachable(&checks, "denied-canary")? {
        return Err(AttestationError::DeniedCanaryReached);
    }
    Ok(ImportedEvidence {
        allowed_round_trip_us,
    })
}

/// Judges the cleanup-observation round (spec 3.7): the formerly allowed
/// canary is not reached and `tap0` is still there.
pub fn judge_cleanup(lines: &[String]) -> Result<(), AttestationError> {
    let checks = parse(lines)?;
    if !unreachable(&checks, "formerly-allowed")? {
        return Err(AttestationError::FormerlyAllowedReached);
    }
    passed(&checks, "tap0")
}

/// The connections the denied canary's responder may have accepted: the
/// known-live check's own, from the enforcement namespace.
pub const DENIED_KNOWN_LIVE_CONNECTIONS: usize = 1;

/// Spec 3.7 "Imported behavior", seen from the responder's side: the
/// denied canary accepted no connection but the known-live check's, so
/// the sandbox never reached it at any time, however late.
pub fn judge_denied_untouched(accepted: usize) -> Result<(), AttestationError> {
    if accepted == DENIED_KNOWN_LIVE_CONNECTIONS {
        return Ok(());
    }
    Err(AttestationError::DeniedCanaryAccepted { accepted })
}

/// Spec 3.7 "Cleanup observation", in the enforcement namespace: after
/// the canary's deletion only `lo` and the same `tap0` (by index) remain.
pub fn judge_remaining_links(
    links: &BTreeMap<u32, String>,
    tap0_index: u32,
) -> Result<(), AttestationError> {
    let only_lo_and_tap0 = links.len() == 2
        && links.values().any(|name| name == "lo")
        && links.get(&tap0_index).map(String::as_str) == Some(TAP_DEVICE);
    if only_lo_and_tap0 {
        return Ok(());
    }
    Err(AttestationError::LinksRemain {
        found: links
            .iter()
            .map(|(index, name)| format!("{index}:{name}"))
            .collect(),
        tap0_index,
    })
}

/// Spec 3.7 "Cleanup observation": the IPv6 disposition is unchanged, no
/// IPv6 address or route at all.
pub fn judge_ipv6_unchanged(observed: &PolicyProjection) -> Result<(), AttestationError> {
    if observed.ipv6_addresses.is_empty() && observed.ipv6_routes.is_empty() {
        return Ok(());
    }
    Err(AttestationError::Ipv6Changed {
        detail: format!(
            "addresses {:?}, routes {:?}",
            observed.ipv6_addresses, observed.ipv6_routes
        ),
    })
}

#[cfg(test)]
#[path = "attestation_tests.rs"]
mod tests;
