//! Effective IPv4 policy and the DerivedNetworkPolicy document (spec 3.7
//! "Default policy and deny representation" and the fixed topology table;
//! schemas.md "Derived network policy").
use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::error::{ConfigError, KeyPath};
use super::ipv4::Ipv4Prefix;

/// `10.137.54.0/23`, the fixed v1 topology (spec 3.7).
pub const RESERVED_TOPOLOGY: Ipv4Prefix = Ipv4Prefix::new([10, 137, 54, 0], 23);

/// The RFC 1918 prefixes denied by default (spec 3.7).
const RFC1918: [Ipv4Prefix; 3] = [
    Ipv4Prefix::new([10, 0, 0, 0], 8),
    Ipv4Prefix::new([172, 16, 0, 0], 12),
    Ipv4Prefix::new([192, 168, 0, 0], 16),
];

/// The fixed connectivity-helper and canary routes of the v1 topology
/// (spec 3.7): the slirp4netns gateway and synthetic DNS endpoint take
/// precedence over the RFC 1918 deny, and the final policy carries the
/// aggregate canary deny with its more-specific allowed `/32`.
const FIXED_RULES: [(Ipv4Prefix, PolicyAction); 4] = [
    (Ipv4Prefix::new([10, 137, 54, 2], 32), PolicyAction::Allow),
    (Ipv4Prefix::new([10, 137, 54, 3], 32), PolicyAction::Allow),
    (Ipv4Prefix::new([10, 137, 55, 0], 29), PolicyAction::Deny),
    (Ipv4Prefix::new([10, 137, 55, 2], 32), PolicyAction::Allow),
];

/// The synthetic DNS endpoint (spec 3.7).
const SYNTHETIC_DNS: [u8; 4] = [10, 137, 54, 3];

/// The derived-policy schema identifier and digest domain separator stem.
pub const DERIVED_POLICY_SCHEMA_ID: &str = "lazaret-derived-network-policy-v1";

/// The selected profile's effective configured prefixes, sorted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectivePolicy {
    allow: Vec<Ipv4Prefix>,
    deny: Vec<Ipv4Prefix>,
}

fn union(lists: &[&[(KeyPath, Ipv4Prefix)]]) -> Vec<(KeyPath, Ipv4Prefix)> {
    let mut out: Vec<(KeyPath, Ipv4Prefix)> = Vec::new();
    for (key, prefix) in lists.iter().flat_map(|l| l.iter()) {
        if !out.iter().any(|(_, p)| p == prefix) {
            out.push((key.clone(), *prefix));
        }
    }
    out
}

impl EffectivePolicy {
    /// Effective allow = global ∪ profile allows; effective deny = global ∪
    /// profile denies ∪ RFC 1918. Exact allow/deny duplicates, allows that
    /// intersect the reserved topology and denies inside it at `/23` or
    /// longer are refused.
    pub(crate) fn derive(
        global_allow: &[(KeyPath, Ipv4Prefix)],
        global_deny: &[(KeyPath, Ipv4Prefix)],
        profile_allow: &[(KeyPath, Ipv4Prefix)],
        profile_deny: &[(KeyPath, Ipv4Prefix)],
    ) -> Result<Self, ConfigError> {
        let allow = union(&[global_allow, profile_allow]);
        let deny = union(&[global_deny, profile_deny]);
        for (key, prefix) in &allow {
            if prefix.intersects(&RESERVED_TOPOLOGY) {
                return Err(ConfigError::Conflict {
                    key: key.clone(),
                    other: KeyPath::label(format!("(reserved topology {RESERVED_TOPOLOGY})")),
                    problem: format!("allow {prefix} intersects the reserved topology; expected an allow prefix outside {RESERVED_TOPOLOGY}"),
                });
            }
            if let Some((deny_key, _)) = deny.iter().find(|(_, d)| d == prefix) {
                return Err(ConfigError::Conflict {
                    key: key.clone(),
                    other: deny_key.clone(),
                    problem: format!("{prefix} is both allowed and denied; expected each exact prefix in at most one of allow and deny"),
                });
            }
            if RFC1918.contains(prefix) {
                return Err(ConfigError::Conflict {
                    key: key.clone(),
                    other: KeyPath::label("(default RFC 1918 deny)".to_owned()),
                    problem: format!(
                        "{prefix} is denied by default; expected a more specific allow prefix"
                    ),
                });
            }
        }
        for (key, prefix) in &deny {
            if prefix.prefix_len() >= RESERVED_TOPOLOGY.prefix_len()
                && RESERVED_TOPOLOGY.contains(prefix)
            {
                return Err(ConfigError::Conflict {
                    key: key.clone(),
                    other: KeyPath::label(format!("(reserved topology {RESERVED_TOPOLOGY})")),
                    problem: format!("deny {prefix} lies inside the reserved topology; expected a deny outside {RESERVED_TOPOLOGY} or broader than /23"),
                });
            }
        }
        let mut allow: Vec<Ipv4Prefix> = allow.into_iter().map(|(_, p)| p).collect();
        let mut deny: Vec<Ipv4Prefix> = deny.into_iter().map(|(_, p)| p).collect();
        for p in RFC1918 {
            if !deny.contains(&p) {
                deny.push(p);
            }
        }
        allow.sort_unstable();
        deny.sort_unstable();
        Ok(Self { allow, deny })
    }

    /// The effective policy of one allow and one deny list given directly
    /// (diagnostics and tests name them `allow[i]` / `deny[i]`), with the
    /// same refusals as a loaded configuration.
    pub fn from_lists(allow: &[Ipv4Prefix], deny: &[Ipv4Prefix]) -> Result<Self, ConfigError> {
        let keyed = |name: &str, list: &[Ipv4Prefix]| -> Vec<(KeyPath, Ipv4Prefix)> {
            list.iter()
                .enumerate()
                .map(|(i, p)| (KeyPath::label(format!("{name}[{i}]")), *p))
                .collect()
        };
        Self::derive(&keyed("allow", allow), &keyed("deny", deny), &[], &[])
    }

    pub fn allow(&self) -> &[Ipv4Prefix] {
        &self.allow
    }

    pub fn deny(&self) -> &[Ipv4Prefix] {
        &self.deny
    }

    /// The longest-prefix decision for `addr` under the derived policy
    /// (configured and fixed rules; the IPv4 default action is allow).
    pub fn allows(&self, addr: Ipv4Addr) -> bool {
        let rules = self.rules();
        rules
            .iter()
            .filter(|(p, _)| p.contains_addr(addr))
            .max_by_key(|(p, _)| p.prefix_len())
            .is_none_or(|(_, action)| *action == PolicyAction::Allow)
    }

    fn rules(&self) -> Vec<(Ipv4Prefix, PolicyAction)> {
        let mut rules: Vec<(Ipv4Prefix, PolicyAction)> = self
            .allow
            .iter()
            .map(|p| (*p, PolicyAction::Allow))
            .chain(self.deny.iter().map(|p| (*p, PolicyAction::Deny)))
            .chain(FIXED_RULES)
            .collect();
        rules.sort_unstable();
        rules
    }

    /// The canonical derived policy for this effective policy.
    pub fn derived_policy(&self) -> DerivedNetworkPolicy {
        let prefix_rules = self
            .rules()
            .into_iter()
            .map(|(p, action)| PrefixRule {
                family: AddressFamily::IPv4,
                address: p.network().to_vec(),
                prefix_len: p.prefix_len(),
                action,
            })
            .collect();
        DerivedNetworkPolicy {
            schema_id: DERIVED_POLICY_SCHEMA_ID.to_owned(),
            address_families: vec![
                AddressFamilyDisposition {
                    family: AddressFamily::IPv4,
                    disposition: Disposition::Enabled,
                },
                AddressFamilyDisposition {
                    family: AddressFamily::IPv6,
                    disposition: Disposition::Disabled,
                },
            ],
            default_actions: vec![DefaultAction {
                family: AddressFamily::IPv4,
                action: PolicyAction::Allow,
            }],
            prefix_rules,
            resolvers: vec![Resolver {
                family: AddressFamily::IPv4,
                address: SYNTHETIC_DNS.to_vec(),
            }],
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum AddressFamily {
    IPv4,
    IPv6,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Disposition {
    Enabled,
    Disabled,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum PolicyAction {
    Allow,
    Deny,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddressFamilyDisposition {
    pub family: AddressFamily,
    pub disposition: Disposition,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DefaultAction {
    pub family: AddressFamily,
    pub action: PolicyAction,
}

/// One destination route: `address` holds the network-order network bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrefixRule {
    pub family: AddressFamily,
    pub address: Vec<u8>,
    pub prefix_len: u8,
    pub action: PolicyAction,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resolver {
    pub family: AddressFamily,
    pub address: Vec<u8>,
}

/// The derived network policy document. Built only by
/// [`EffectivePolicy::derived_policy`] or checked decoding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DerivedNetworkPolicy {
    schema_id: String,
    address_families: Vec<AddressFamilyDisposition>,
    default_actions: Vec<DefaultAction>,
    prefix_rules: Vec<PrefixRule>,
    resolvers: Vec<Resolver>,
}

/// SHA-256 identity of a derived policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyDigest(pub [u8; 32]);

impl std::fmt::Display for PolicyDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

/// Why policy bytes are not a canonical v1 derived policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyDecodeError {
    #[error("derived policy bytes do not decode: {0}; expected a Postcard DerivedNetworkPolicy")]
    Postcard(String),
    #[error("derived policy field {field}: {problem}; expected the canonical v1 form")]
    NotCanonical {
        field: &'static str,
        problem: &'static str,
    },
}

impl DerivedNetworkPolicy {
    pub fn address_families(&self) -> &[AddressFamilyDisposition] {
        &self.address_families
    }

    pub fn default_actions(&self) -> &[DefaultAction] {
        &self.default_actions
    }

    pub fn prefix_rules(&self) -> &[PrefixRule] {
        &self.prefix_rules
    }

    pub fn resolvers(&self) -> &[Resolver] {
        &self.resolvers
    }

    /// The canonical minimal Postcard encoding.
    pub fn canonical_bytes(&self) -> Vec<u8> {
        // Postcard serialization of these owned, finite types into a Vec
        // cannot fail; an empty vector would fail every digest comparison.
        postcard::to_allocvec(self).unwrap_or_default()
    }

    /// SHA-256 over the schema ID, one NUL, then the canonical bytes.
    pub fn digest(&self) -> PolicyDigest {
        let mut h = Sha256::new();
        h.update(DERIVED_POLICY_SCHEMA_ID.as_bytes());
        h.update([0u8]);
        h.update(self.canonical_bytes());
        PolicyDigest(h.finalize().into())
    }

    /// Decodes canonical bytes, refusing anything that is not the canonical
    /// v1 form (sorted, duplicate-free, one disposition per family, one
    /// default action per enabled family, canonical prefixes).
    pub fn from_canonical_bytes(bytes: &[u8]) -> Result<Self, PolicyDecodeError> {
        let policy: Self =
            postcard::from_bytes(bytes).map_err(|e| PolicyDecodeError::Postcard(e.to_string()))?;
        policy.check_canonical()?;
        if policy.canonical_bytes() != bytes {
            return Err(PolicyDecodeError::NotCanonical {
                field: "(document)",
                problem: "trailing or non-minimal bytes",
            });
        }
        Ok(policy)
    }

    fn check_canonical(&self) -> Result<(), PolicyDecodeError> {
        let bad = |field, problem| Err(PolicyDecodeError::NotCanonical { field, problem });
        if self.schema_id != DERIVED_POLICY_SCHEMA_ID {
            return bad("schema_id", "unknown schema");
        }
        let families: Vec<AddressFamily> = self.address_families.iter().map(|d| d.family).collect();
        if families != [AddressFamily::IPv4, AddressFamily::IPv6] {
            return bad(
                "address_families",
                "not exactly one disposition per family, sorted",
            );
        }
        let enabled: Vec<AddressFamily> = self
            .address_families
            .iter()
            .filter(|d| d.disposition == Disposition::Enabled)
            .map(|d| d.family)
            .collect();
        let defaults: Vec<AddressFamily> = self.default_actions.iter().map(|d| d.family).collect();
        if defaults != enabled {
            return bad(
                "default_actions",
                "not exactly one default per enabled family, sorted",
            );
        }
        let canonical_network = |family: AddressFamily, address: &[u8], len: u8| match family {
            AddressFamily::IPv4 => <[u8; 4]>::try_from(address)
                .is_ok_and(|a| len <= 32 && Ipv4Prefix::new(a, len).network() == a),
            AddressFamily::IPv6 => false,
        };
        for r in &self.prefix_rules {
            if !enabled.contains(&r.family)
                || !canonical_network(r.family, &r.address, r.prefix_len)
            {
                return bad(
                    "prefix_rules",
                    "a prefix that is not canonical for an enabled family",
                );
            }
        }
        let sorted_unique = self.prefix_rules.windows(2).all(|w| {
            (w[0].family, &w[0].address, w[0].prefix_len)
                < (w[1].family, &w[1].address, w[1].prefix_len)
        });
        if !sorted_unique {
            return bad(
                "prefix_rules",
                "unsorted, duplicate or conflicting prefixes",
            );
        }
        if self.resolvers.is_empty() {
            return bad("resolvers", "no resolver");
        }
        for r in &self.resolvers {
            if !enabled.contains(&r.family) || !canonical_network(r.family, &r.address, 32) {
                return bad(
                    "resolvers",
                    "an address that is not canonical for an enabled family",
                );
            }
        }
        if !self
            .resolvers
            .windows(2)
            .all(|w| (w[0].family, &w[0].address) < (w[1].family, &w[1].address))
        {
            return bad("resolvers", "unsorted or duplicate resolvers");
        }
        Ok(())
    }
}
