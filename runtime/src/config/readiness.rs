//! The optional `readiness` table (schemas.md; spec README conflict decision:
//! optional, strictly validated when present, never fingerprinted, never a
//! publication gate).
use std::net::Ipv4Addr;

use super::document::{RawDnsTarget, RawReadiness, RawSocketTarget, Table};
use super::error::{ConfigError, KeyPath};
use super::grammar::nul_free;
use super::ipv4::parse_address;
use super::network::EffectivePolicy;

const TARGETS_MAX: usize = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct SocketTarget {
    pub address: Ipv4Addr,
    pub port: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct DnsTarget {
    pub resolver: Ipv4Addr,
    pub query: String,
}

/// Diagnostic probe targets for the selected profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadinessV1 {
    pub denied: Vec<SocketTarget>,
    pub permitted: Vec<SocketTarget>,
    pub dns: Vec<DnsTarget>,
}

fn count_ok<T>(key: &KeyPath, items: &[T]) -> Result<(), ConfigError> {
    if (1..=TARGETS_MAX).contains(&items.len()) {
        Ok(())
    } else {
        Err(ConfigError::Invalid {
            key: key.clone(),
            found: format!("{} targets", items.len()),
            expected: "one to 32 unique targets",
        })
    }
}

fn unique<T: PartialEq>(key: &KeyPath, items: &[T]) -> Result<(), ConfigError> {
    for (i, item) in items.iter().enumerate() {
        if let Some(j) = items[..i].iter().position(|o| o == item) {
            return Err(ConfigError::Conflict {
                key: key.index(i),
                other: key.index(j),
                problem: "duplicate target; expected unique targets".to_owned(),
            });
        }
    }
    Ok(())
}

fn socket_targets(
    key: &KeyPath,
    raw: &[Table<RawSocketTarget>],
) -> Result<Vec<SocketTarget>, ConfigError> {
    count_ok(key, raw)?;
    let mut out = Vec::with_capacity(raw.len());
    for (i, t) in raw.iter().enumerate() {
        let item = key.index(i);
        let address = parse_address(&item.key("address"), &t.address)?;
        if t.port == 0 {
            return Err(ConfigError::Invalid {
                key: item.key("port"),
                found: "0".to_owned(),
                expected: "a port in 1..=65535",
            });
        }
        out.push(SocketTarget {
            address,
            port: t.port,
        });
    }
    unique(key, &out)?;
    Ok(out)
}

/// A strict DNS name: dot-separated LDH labels of 1..=63 bytes, not starting
/// or ending with `-`, at most 253 bytes, no trailing dot.
fn dns_name_ok(name: &str) -> bool {
    const NAME_MAX: usize = 253;
    const LABEL_MAX: usize = 63;
    !name.is_empty()
        && name.len() <= NAME_MAX
        && name.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= LABEL_MAX
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

fn dns_targets(key: &KeyPath, raw: &[Table<RawDnsTarget>]) -> Result<Vec<DnsTarget>, ConfigError> {
    count_ok(key, raw)?;
    let mut out = Vec::with_capacity(raw.len());
    for (i, t) in raw.iter().enumerate() {
        let item = key.index(i);
        let resolver = parse_address(&item.key("resolver"), &t.resolver)?;
        nul_free(&item.key("query"), &t.query)?;
        if !dns_name_ok(&t.query) {
            return Err(ConfigError::invalid(
                &item.key("query"),
                &t.query,
                "a DNS name of LDH labels (1-63 bytes each, at most 253 bytes, no trailing dot)",
            ));
        }
        out.push(DnsTarget {
            resolver,
            query: t.query.clone(),
        });
    }
    unique(key, &out)?;
    Ok(out)
}

impl ReadinessV1 {
    pub(crate) fn from_raw(key: &KeyPath, raw: &RawReadiness) -> Result<Self, ConfigError> {
        Ok(Self {
            denied: socket_targets(&key.key("denied"), &raw.denied)?,
            permitted: socket_targets(&key.key("permitted"), &raw.permitted)?,
            dns: dns_targets(&key.key("dns"), &raw.dns)?,
        })
    }

    /// Denied targets must be denied and permitted targets allowed by the
    /// effective policy.
    pub(crate) fn check_against(
        &self,
        key: &KeyPath,
        policy: &EffectivePolicy,
    ) -> Result<(), ConfigError> {
        for (i, t) in self.denied.iter().enumerate() {
            if policy.allows(t.address) {
                return Err(ConfigError::Invalid {
                    key: key.key("denied").index(i).key("address"),
                    found: format!("{} (allowed by the effective policy)", t.address),
                    expected: "an address the effective policy denies",
                });
            }
        }
        for (i, t) in self.permitted.iter().enumerate() {
            if !policy.allows(t.address) {
                return Err(ConfigError::Invalid {
                    key: key.key("permitted").index(i).key("address"),
                    found: format!("{} (denied by the effective policy)", t.address),
                    expected: "an address the effective policy allows",
                });
            }
        }
        Ok(())
    }
}
