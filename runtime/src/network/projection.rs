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

/// The [`LinkRecord`] format version; a change of meaning bumps it.
pub const LINK_RECORD_VERSION: u32 = 1;

/// The rtnetlink shape of a link as created (spec 3.7 "Exact cleanup").
///
/// The Runtime Supervisor keeps this versioned creation record and deletes
/// the link only while its current shape equals it in every field:
/// namespace and interface index alone are insufficient, because an index
/// can be reused by a link that is not the one created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkRecord {
    /// The record format ([`LINK_RECORD_VERSION`]).
    pub version: u32,
    /// The interface index (`ifi_index`) in the link's own namespace.
    pub index: u32,
    /// The interface name (`IFLA_IFNAME`).
    pub name: String,
    /// The link kind (`IFLA_INFO_KIND` inside `IFLA_LINKINFO`, e.g.
    /// `"veth"`); empty only when the link has no `IFLA_LINKINFO` at all.
    pub kind: String,
    /// The hardware address (`IFLA_ADDRESS`).
    pub mac: [u8; 6],
    /// The MTU (`IFLA_MTU`).
    pub mtu: u32,
    /// The peer's interface index (`IFLA_LINK`), in the peer's namespace;
    /// None when the kernel reports none.
    pub peer_index: Option<u32>,
    /// The peer namespace's ID as seen from the link's namespace
    /// (`IFLA_LINK_NETNSID`); None when the peer shares the namespace or
    /// the kernel reports none.
    pub peer_namespace_id: Option<i32>,
}

impl std::fmt::Display for LinkRecord {
    /// `NAME index I kind K mac M mtu U peer P netnsid N (record vV)`, with
    /// `-` for an absent peer index or namespace ID.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [a, b, c, d, e, g] = self.mac;
        let optional = |value: Option<String>| value.unwrap_or_else(|| "-".to_owned());
        write!(
            f,
            "{} index {} kind {:?} mac {a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x} mtu {} peer {} netnsid {} (record v{})",
            self.name,
            self.index,
            self.kind,
            self.mtu,
            optional(self.peer_index.map(|index| index.to_string())),
            optional(self.peer_namespace_id.map(|id| id.to_string())),
            self.version,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn veth() -> LinkRecord {
        LinkRecord {
            version: LINK_RECORD_VERSION,
            index: 5,
            name: "cnr0".to_owned(),
            kind: "veth".to_owned(),
            mac: [0x02, 0x42, 0xac, 0x11, 0x00, 0x0f],
            mtu: 1500,
            peer_index: Some(2),
            peer_namespace_id: Some(0),
        }
    }

    #[test]
    fn link_record_displays_every_field() {
        assert_eq!(
            veth().to_string(),
            "cnr0 index 5 kind \"veth\" mac 02:42:ac:11:00:0f mtu 1500 peer 2 netnsid 0 (record v1)"
        );
        let lo = LinkRecord {
            index: 1,
            name: "lo".to_owned(),
            kind: String::new(),
            mac: [0; 6],
            mtu: 65536,
            peer_index: None,
            peer_namespace_id: None,
            ..veth()
        };
        assert_eq!(
            lo.to_string(),
            "lo index 1 kind \"\" mac 00:00:00:00:00:00 mtu 65536 peer - netnsid - (record v1)"
        );
    }

    #[test]
    fn link_record_round_trips_through_json() {
        let text = serde_json::to_string(&veth()).unwrap();
        assert_eq!(serde_json::from_str::<LinkRecord>(&text).unwrap(), veth());
    }
}
