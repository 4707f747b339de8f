//! IPv4 prefixes (schemas.md: "Each prefix is parsed, has host bits cleared,
//! and is deduplicated").
use std::fmt;
use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

use super::error::{ConfigError, KeyPath};

/// A normalized IPv4 prefix: host bits are always clear.
/// Serialized as `(network, len)`; decoding normalizes like [`Ipv4Prefix::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(into = "([u8; 4], u8)", from = "([u8; 4], u8)")]
pub struct Ipv4Prefix {
    network: [u8; 4],
    len: u8,
}

impl Ipv4Prefix {
    pub const EXPECTED: &'static str =
        "an IPv4 prefix a.b.c.d/len with decimal octets and len 0..=32";

    /// A prefix from its parts, clearing host bits; a length above 32 is
    /// clamped to 32.
    pub const fn new(address: [u8; 4], len: u8) -> Self {
        let len = if len > 32 { 32 } else { len };
        let bits = u32::from_be_bytes(address) & mask(len);
        Self {
            network: bits.to_be_bytes(),
            len,
        }
    }

    /// Parses `a.b.c.d/len`, clearing host bits.
    pub fn parse(key: &KeyPath, s: &str) -> Result<Self, ConfigError> {
        let bad = || ConfigError::invalid(key, s, Self::EXPECTED);
        let (addr, len) = s.split_once('/').ok_or_else(bad)?;
        let address: Ipv4Addr = addr.parse().map_err(|_| bad())?;
        let canonical_len = !len.is_empty()
            && len.len() <= 2
            && len.bytes().all(|b| b.is_ascii_digit())
            && (len == "0" || !len.starts_with('0'));
        if !canonical_len {
            return Err(bad());
        }
        let len: u8 = len.parse().map_err(|_| bad())?;
        if len > 32 {
            return Err(bad());
        }
        Ok(Self::new(address.octets(), len))
    }

    pub fn network(&self) -> [u8; 4] {
        self.network
    }

    pub fn prefix_len(&self) -> u8 {
        self.len
    }

    /// Whether this prefix contains `addr`.
    pub fn contains_addr(&self, addr: Ipv4Addr) -> bool {
        u32::from_be_bytes(addr.octets()) & mask(self.len) == u32::from_be_bytes(self.network)
    }

    /// Whether this prefix contains all of `other` (or equals it).
    pub fn contains(&self, other: &Self) -> bool {
        self.len <= other.len && self.contains_addr(Ipv4Addr::from(other.network))
    }

    /// Whether the two prefixes share at least one address.
    pub fn intersects(&self, other: &Self) -> bool {
        self.contains(other) || other.contains(self)
    }

    /// The fingerprint item: four network-order bytes then the length.
    pub fn encoding(&self) -> [u8; 5] {
        let [a, b, c, d] = self.network;
        [a, b, c, d, self.len]
    }
}

impl From<([u8; 4], u8)> for Ipv4Prefix {
    fn from((address, len): ([u8; 4], u8)) -> Self {
        Self::new(address, len)
    }
}

impl From<Ipv4Prefix> for ([u8; 4], u8) {
    fn from(p: Ipv4Prefix) -> Self {
        (p.network, p.len)
    }
}

const fn mask(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - len as u32)
    }
}

impl fmt::Display for Ipv4Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", Ipv4Addr::from(self.network), self.len)
    }
}

/// Parses an IPv4 address written as `a.b.c.d`.
pub(crate) fn parse_address(key: &KeyPath, s: &str) -> Result<Ipv4Addr, ConfigError> {
    s.parse()
        .map_err(|_| ConfigError::invalid(key, s, "an IPv4 address a.b.c.d with decimal octets"))
}
