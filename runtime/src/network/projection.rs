//! The versioned policy-semantic rtnetlink projection (spec 3.7 evidence
//! table, "Linux policy state"): destination, table, next hop and
//! precedence of every IPv4 route outside the local table, and every IPv6
//! address and route. Counters, caches and presentation are not part of
//! it. The Runtime Supervisor compares the projection it observes with the
//! one derived from the policy, exactly.
use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

use crate::config::Ipv4Prefix;

/// The projection format version; a change of meaning bumps it.
pub const PROJECTION_VERSION: u32 = 1;

/// Where a route sends matching packets.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum RouteNextHop {
    /// Destinations are neighbours on `device` (no gateway).
    OnLink { device: String },
    /// Destinations are reached through `gateway` on `device`.
    Gateway { gateway: Ipv4Addr, device: String },
}

/// One IPv4 route of the projection.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ProjectedRoute {
    pub destination: Ipv4Prefix,
    /// The routing table ID (254 is main).
    pub table: u32,
    /// The route type (`RTN_UNICAST` is 1; every policy route is unicast).
    pub route_type: u8,
    /// The route priority (metric); equal destinations never differ only
    /// by it in a policy.
    pub priority: u32,
    pub next_hop: RouteNextHop,
}

/// The projection: sorted, duplicate-free lists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyProjection {
    pub version: u32,
    pub ipv4_routes: Vec<ProjectedRoute>,
    /// Every IPv6 address, as text (`addr/len dev`); empty when IPv6 is off.
    pub ipv6_addresses: Vec<String>,
    /// Every IPv6 route, as text (`dst/len dev`); empty when IPv6 is off.
    pub ipv6_routes: Vec<String>,
}

impl PolicyProjection {
    /// A projection with its lists sorted and deduplicated.
    pub fn new(
        mut ipv4_routes: Vec<ProjectedRoute>,
        mut ipv6_addresses: Vec<String>,
        mut ipv6_routes: Vec<String>,
    ) -> Self {
        ipv4_routes.sort();
        ipv4_routes.dedup();
        ipv6_addresses.sort();
        ipv6_addresses.dedup();
        ipv6_routes.sort();
        ipv6_routes.dedup();
        Self {
            version: PROJECTION_VERSION,
            ipv4_routes,
            ipv6_addresses,
            ipv6_routes,
        }
    }
}

/// The filter projection's format version.
pub const FILTER_PROJECTION_VERSION: u32 = 1;

/// One rule of the egress chain, as the policy expresses it; anything else
/// the chain holds is [`FilterRule::Other`] and never matches a policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FilterRule {
    /// `meta protocol ip6 drop`.
    DropIpv6,
    /// `ip daddr PREFIX accept|drop`.
    Destination { prefix: Ipv4Prefix, accept: bool },
    /// A rule of another shape (its listing, for the mismatch message).
    Other(String),
}

/// The enforcing egress filter as nftables lists it (spec 3.7 "Linux
/// policy state", the nftables half): the chain's table, hook, device,
/// priority and policy, and its rules in evaluation order. Handles,
/// counters and presentation are not part of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilterProjection {
    pub version: u32,
    pub family: String,
    pub table: String,
    pub chain: String,
    pub chain_type: String,
    pub hook: String,
    /// The device the hook is bound to; `None` when the listing names none.
    pub device: Option<String>,
    pub priority: i64,
    pub policy: String,
    pub rules: Vec<FilterRule>,
}
