//! The network install plan (spec 3.7, SR-6, FR-19): from the canonical
//! derived policy, the routes the Runtime Supervisor installs in the
//! enforcement namespace, the projection it must then observe, the
//! nftables egress filter on `tap0`, and the two read-only files the
//! sandbox sees (`/etc/lazaret/network` and `/etc/resolv.conf`). Pure: no
//! syscalls; `lazaret_effects::network` installs and observes.
//!
//! # Deviation from SR-6 (spec 3.7 "Default policy and deny representation")
//!
//! SR-6 asks for loopback-unicast deny routes. runsc 0.0~20240729 does not
//! import them: it copies only main-table unicast routes whose output
//! device is an imported interface, a loopback next hop is accepted by
//! Linux only on `lo`, and routes on `lo` are not imported, so the sandbox
//! reached "denied" destinations through slirp4netns
//! (docs/network-research.md, section 3). Denial is therefore two measured
//! layers instead:
//!
//! 1. **On-link deny routes on `tap0`** ([`install_routes`]). gVisor
//!    imports them and ARPs for the destination; slirp4netns answers ARP
//!    only for its own virtual addresses, so `connect` fails with
//!    EHOSTUNREACH ("No route to host") after about 3 s and UDP is lost.
//!    Allows are more specific routes through the slirp4netns gateway, and
//!    gVisor honours the longest prefix. Still no `blackhole` route (SR-6).
//! 2. **An nftables netdev egress chain on `tap0`** ([`egress_ruleset`]),
//!    outside the sandbox's control, which drops frames to denied
//!    destinations before slirp4netns sees them. It holds even if a guest
//!    gained route authority. Egress cannot `reject`, so it only drops.
//!
//! A `/0` deny cannot be an on-link route: runsc refuses a default route
//! without a gateway (docs/network-research.md, section 3). It is installed
//! as its two `/1` halves, which decide exactly the addresses the `/0`
//! would (a half equal to another rule's prefix is left to that rule).
use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::config::{
    AddressFamily, DerivedNetworkPolicy, Ipv4Prefix, PolicyAction, PrefixRule, RESERVED_TOPOLOGY,
};

use super::projection::{
    FilterProjection, FilterRule, PolicyProjection, ProjectedRoute, RouteNextHop,
    FILTER_PROJECTION_VERSION,
};
use super::topology::{
    CANARY_DEVICE, CANARY_NETWORK, GATEWAY, SLIRP_NETWORK, SYNTHETIC_DNS, TAP_DEVICE,
};

/// The main routing table (`RT_TABLE_MAIN`).
pub const MAIN_TABLE: u32 = 254;
/// `RTN_UNICAST`.
pub const UNICAST: u8 = 1;
/// The priority (metric) of every planned and expected route.
pub const ROUTE_PRIORITY: u32 = 0;

/// The fixed allow of the slirp4netns gateway (spec 3.7 fixed topology).
const GATEWAY_ALLOWED: Ipv4Prefix = Ipv4Prefix::new(GATEWAY.octets(), 32);
/// The fixed allow of the synthetic DNS endpoint (spec 3.7).
const DNS_ALLOWED: Ipv4Prefix = Ipv4Prefix::new(SYNTHETIC_DNS.octets(), 32);
/// The aggregate canary deny, the whole canary network (spec 3.7
/// "Known-live control"); installed on-link on `tap0` like every deny.
const CANARY_DENY: Ipv4Prefix = CANARY_NETWORK;

/// The allowed canary endpoint `10.137.55.2/32` (spec 3.7 "Known-live
/// control": the more-specific allowed `/32` under the aggregate canary
/// deny).
///
/// Its route goes through the canary veth, on-link on
/// [`CANARY_DEVICE`]: the canary link exists before the policy is
/// installed, and its exact cleanup removes the route with the link once
/// the sandbox has authenticated the canary. The egress filter on `tap0`
/// leaves it out, so the aggregate canary deny drops it there: the canary
/// is never reached through slirp4netns, before or after the cleanup.
pub const CANARY_ALLOWED: Ipv4Prefix = Ipv4Prefix::new([10, 137, 55, 2], 32);

/// The fixed rules every v1 derived policy carries, with their actions
/// (spec 3.7 fixed topology; `config::network` adds them).
const FIXED_RULES: [(Ipv4Prefix, PolicyAction); 4] = [
    (GATEWAY_ALLOWED, PolicyAction::Allow),
    (DNS_ALLOWED, PolicyAction::Allow),
    (CANARY_DENY, PolicyAction::Deny),
    (CANARY_ALLOWED, PolicyAction::Allow),
];

/// The nftables table that holds the egress filter.
pub const NFT_TABLE: &str = "lazaret";
/// The egress chain on `tap0`.
pub const NFT_EGRESS_CHAIN: &str = "egress_tap0";

/// Why a derived policy cannot be planned. Each variant names the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("prefix rule {prefix} is {family:?}; expected only IPv4 rules in a v1 policy (IPv6 is disabled)")]
    NotIpv4 {
        prefix: String,
        family: AddressFamily,
    },
    #[error("IPv4 prefix rule {prefix} has {len} address bytes; expected 4")]
    AddressLength { prefix: String, len: usize },
    #[error("IPv4 prefix rule {prefix} has a prefix length above 32; expected 0..=32")]
    PrefixLength { prefix: String },
    #[error("IPv4 prefix rule {prefix} has host bits set; expected the network {canonical}")]
    HostBits {
        prefix: String,
        canonical: Ipv4Prefix,
    },
    #[error("IPv4 prefix {prefix} appears in more than one rule; expected each prefix once")]
    Duplicate { prefix: Ipv4Prefix },
    #[error("{action:?} {prefix} conflicts with the reserved topology {RESERVED_TOPOLOGY}; expected allows outside it and denies outside it or broader than /23")]
    ReservedTopology {
        prefix: Ipv4Prefix,
        action: PolicyAction,
    },
    #[error(
        "fixed rule {prefix} is missing or not {expected:?}; expected the v1 fixed topology rules"
    )]
    FixedRule {
        prefix: Ipv4Prefix,
        expected: PolicyAction,
    },
    #[error("the IPv4 default action is {found:?}; expected exactly one IPv4 default, allow")]
    DefaultAction { found: Vec<PolicyAction> },
}

/// The raw text of a rule's prefix, for errors and the summary.
fn raw_prefix(rule: &PrefixRule) -> String {
    let address = if let Ok(a) = <[u8; 4]>::try_from(rule.address.as_slice()) {
        Ipv4Addr::from(a).to_string()
    } else if let Ok(a) = <[u8; 16]>::try_from(rule.address.as_slice()) {
        Ipv6Addr::from(a).to_string()
    } else {
        hex::encode(&rule.address)
    };
    format!("{address}/{}", rule.prefix_len)
}

/// One rule as a canonical IPv4 prefix, or why it is not one.
fn ipv4_prefix(rule: &PrefixRule) -> Result<Ipv4Prefix, PlanError> {
    if rule.family != AddressFamily::IPv4 {
        return Err(PlanError::NotIpv4 {
            prefix: raw_prefix(rule),
            family: rule.family,
        });
    }
    let address =
        <[u8; 4]>::try_from(rule.address.as_slice()).map_err(|_| PlanError::AddressLength {
            prefix: raw_prefix(rule),
            len: rule.address.len(),
        })?;
    if rule.prefix_len > 32 {
        return Err(PlanError::PrefixLength {
            prefix: raw_prefix(rule),
        });
    }
    let canonical = Ipv4Prefix::new(address, rule.prefix_len);
    if canonical.network() != address {
        return Err(PlanError::HostBits {
            prefix: raw_prefix(rule),
            canonical,
        });
    }
    Ok(canonical)
}

/// The policy's rules as checked IPv4 prefixes, in the policy's
/// (canonical) order. Checks that every rule is a canonical IPv4 prefix,
/// that prefixes are unique (SR-6: no equal-specificity conflict), that
/// the fixed topology rules are present, that no other rule conflicts
/// with the reserved topology (spec 3.7), and that the IPv4 default is
/// allow (the slirp4netns default route is the only default there is).
fn checked_rules(
    policy: &DerivedNetworkPolicy,
) -> Result<Vec<(Ipv4Prefix, PolicyAction)>, PlanError> {
    let defaults: Vec<PolicyAction> = policy
        .default_actions()
        .iter()
        .filter(|d| d.family == AddressFamily::IPv4)
        .map(|d| d.action)
        .collect();
    if defaults != [PolicyAction::Allow] {
        return Err(PlanError::DefaultAction { found: defaults });
    }
    let mut by_prefix: BTreeMap<Ipv4Prefix, PolicyAction> = BTreeMap::new();
    let mut rules = Vec::with_capacity(policy.prefix_rules().len());
    for rule in policy.prefix_rules() {
        let prefix = ipv4_prefix(rule)?;
        if by_prefix.insert(prefix, rule.action).is_some() {
            return Err(PlanError::Duplicate { prefix });
        }
        rules.push((prefix, rule.action));
    }
    for (prefix, expected) in FIXED_RULES {
        if by_prefix.get(&prefix) != Some(&expected) {
            return Err(PlanError::FixedRule { prefix, expected });
        }
    }
    for &(prefix, action) in &rules {
        if FIXED_RULES.contains(&(prefix, action)) {
            continue;
        }
        // spec 3.7: a configured allow intersecting the reserved topology,
        // or a configured deny within it at /23 or greater specificity, is
        // invalid.
        let conflicts = match action {
            PolicyAction::Allow => prefix.intersects(&RESERVED_TOPOLOGY),
            PolicyAction::Deny => RESERVED_TOPOLOGY.contains(&prefix),
        };
        if conflicts {
            return Err(PlanError::ReservedTopology { prefix, action });
        }
    }
    Ok(rules)
}

fn route(destination: Ipv4Prefix, next_hop: RouteNextHop) -> ProjectedRoute {
    ProjectedRoute {
        destination,
        table: MAIN_TABLE,
        route_type: UNICAST,
        priority: ROUTE_PRIORITY,
        next_hop,
    }
}

fn on_link() -> RouteNextHop {
    RouteNextHop::OnLink {
        device: TAP_DEVICE.to_owned(),
    }
}

fn via_gateway() -> RouteNextHop {
    RouteNextHop::Gateway {
        gateway: GATEWAY,
        device: TAP_DEVICE.to_owned(),
    }
}

/// The routes the Runtime Supervisor adds to the main table of the
/// enforcement namespace after slirp4netns `--configure` (spec 3.7, SR-6,
/// FR-19; see the module doc for the deviation from loopback-unicast
/// routes). One unicast route of priority 0 per IPv4 rule, in the policy's
/// canonical order:
///
/// - a deny is on-link on `tap0` (a `/0` deny becomes its two `/1`
///   halves; see the module doc);
/// - the fixed allows of the gateway and the synthetic DNS endpoint are
///   on-link on `tap0`: they are slirp4netns neighbours, and a route to the
///   gateway through itself is meaningless;
/// - any other allow goes through the gateway on `tap0`;
/// - [`CANARY_ALLOWED`] is on-link on the canary link [`CANARY_DEVICE`].
pub fn install_routes(policy: &DerivedNetworkPolicy) -> Result<Vec<ProjectedRoute>, PlanError> {
    let rules = checked_rules(policy)?;
    let mut routes = Vec::with_capacity(rules.len() + 1);
    for &(prefix, action) in &rules {
        match action {
            PolicyAction::Deny if prefix.prefix_len() == 0 => {
                for half in [
                    Ipv4Prefix::new([0, 0, 0, 0], 1),
                    Ipv4Prefix::new([128, 0, 0, 0], 1),
                ] {
                    if !rules.iter().any(|(p, _)| *p == half) {
                        routes.push(route(half, on_link()));
                    }
                }
            }
            PolicyAction::Deny => routes.push(route(prefix, on_link())),
            PolicyAction::Allow if prefix == CANARY_ALLOWED => routes.push(canary_route()),
            PolicyAction::Allow if prefix == GATEWAY_ALLOWED || prefix == DNS_ALLOWED => {
                routes.push(route(prefix, on_link()));
            }
            PolicyAction::Allow => routes.push(route(prefix, via_gateway())),
        }
    }
    Ok(routes)
}

/// The allowed canary's route: on-link on the canary link.
pub fn canary_route() -> ProjectedRoute {
    route(
        CANARY_ALLOWED,
        RouteNextHop::OnLink {
            device: CANARY_DEVICE.to_owned(),
        },
    )
}

/// The temporary route of the known-live check (spec 3.7 "Known-live
/// control"): the whole canary network on-link on the canary link, so the
/// enforcement namespace's own stack reaches both endpoints before the
/// policy is installed. It is removed again before [`install_routes`], and
/// the projection would show it if it were not.
pub fn canary_probe_route() -> ProjectedRoute {
    route(
        CANARY_NETWORK,
        RouteNextHop::OnLink {
            device: CANARY_DEVICE.to_owned(),
        },
    )
}

/// The policy-semantic projection (spec 3.7 evidence table, "Linux policy
/// state") the enforcement namespace must show after slirp4netns
/// `--configure` and [`install_routes`], before runsc starts (runsc removes
/// `tap0`'s address, and the kernel then drops its routes): the install
/// routes, the kernel's connected route `10.137.54.0/24 dev tap0`, and
/// slirp4netns's `default via 10.137.54.2 dev tap0`, all main-table
/// unicast with priority 0. IPv6 is disabled, so both IPv6 lists are
/// empty. Only tables other than local (255) are projected: the kernel's
/// local and broadcast routes there are not policy.
pub fn expected_projection(policy: &DerivedNetworkPolicy) -> Result<PolicyProjection, PlanError> {
    let mut routes = install_routes(policy)?;
    routes.push(route(SLIRP_NETWORK, on_link()));
    routes.push(route(Ipv4Prefix::new([0, 0, 0, 0], 0), via_gateway()));
    Ok(PolicyProjection::new(routes, Vec::new(), Vec::new()))
}

/// The nftables ruleset for `nft -f -` in the fresh enforcement namespace
/// (spec 3.7, SR-6 second layer; docs/network-research.md section 4): a
/// netdev egress chain on `tap0` that drops every IPv6 frame and every
/// IPv4 frame to a denied destination before slirp4netns receives it.
///
/// nftables evaluates rules in order, so the IPv4 rules come longest
/// prefix first (then by address; equal prefixes cannot occur), and the
/// first match decides as longest-prefix routing would. Unmatched frames,
/// ARP among them, pass (`policy accept`, the IPv4 default allow). Egress
/// cannot `reject`; denied frames are dropped. [`CANARY_ALLOWED`] is left
/// out, so the aggregate canary deny drops it on `tap0`: the canary is
/// only ever reached over its own link.
/// The egress chain's prefix rules in evaluation order: longest prefix
/// first, so the first match is the longest-prefix decision.
fn egress_order(
    policy: &DerivedNetworkPolicy,
) -> Result<Vec<(Ipv4Prefix, PolicyAction)>, PlanError> {
    let mut rules = checked_rules(policy)?;
    rules.retain(|(prefix, _)| *prefix != CANARY_ALLOWED);
    rules.sort_by_key(|(p, _)| (Reverse(p.prefix_len()), p.network()));
    Ok(rules)
}

/// What nftables must list after [`egress_ruleset`] is loaded into a fresh
/// namespace (spec 3.7 "Linux policy state", the filter half).
pub fn expected_filter(policy: &DerivedNetworkPolicy) -> Result<FilterProjection, PlanError> {
    let mut rules = vec![FilterRule::DropIpv6];
    rules.extend(egress_order(policy)?.into_iter().map(|(prefix, action)| {
        FilterRule::Destination {
            prefix,
            accept: action == PolicyAction::Allow,
        }
    }));
    Ok(FilterProjection {
        version: FILTER_PROJECTION_VERSION,
        family: "netdev".to_owned(),
        table: NFT_TABLE.to_owned(),
        chain: NFT_EGRESS_CHAIN.to_owned(),
        chain_type: "filter".to_owned(),
        hook: "egress".to_owned(),
        device: Some(TAP_DEVICE.to_owned()),
        priority: 0,
        policy: "accept".to_owned(),
        rules,
    })
}

pub fn egress_ruleset(policy: &DerivedNetworkPolicy) -> Result<String, PlanError> {
    let rules = egress_order(policy)?;
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = writeln!(out, "table netdev {NFT_TABLE} {{");
    let _ = writeln!(out, "\tchain {NFT_EGRESS_CHAIN} {{");
    let _ = writeln!(
        out,
        "\t\ttype filter hook egress device \"{TAP_DEVICE}\" priority 0; policy accept;"
    );
    // spec 3.7: IPv6 is disabled; no IPv6 frame leaves the sandbox.
    let _ = writeln!(out, "\t\tmeta protocol ip6 drop");
    for (prefix, action) in rules {
        let verdict = match action {
            PolicyAction::Allow => "accept",
            PolicyAction::Deny => "drop",
        };
        let _ = writeln!(out, "\t\tip daddr {prefix} {verdict}");
    }
    let _ = writeln!(out, "\t}}");
    let _ = writeln!(out, "}}");
    Ok(out)
}

fn action_word(action: PolicyAction) -> &'static str {
    match action {
        PolicyAction::Allow => "allow",
        PolicyAction::Deny => "deny",
    }
}

/// The header of `/etc/lazaret/network`.
const SUMMARY_HEADER: &str = "\
# /etc/lazaret/network: the network policy of this Lazaret sandbox.
# This file is read-only. The policy is set by the developer's host
# configuration and cannot be changed from inside the sandbox; ask the
# developer to change the Lazaret configuration on the host.
# A TCP connection to a denied destination fails with \"No route to host\"
# after about 3 seconds. UDP datagrams to a denied destination are dropped
# without an error.
# The most specific rule that covers a destination decides (longest prefix
# wins); a destination that no rule covers follows the default.
# 10.137.54.2 is the gateway, 10.137.54.3 the DNS resolver, and
# 10.137.55.0/29 is reserved for Lazaret's own isolation check.
";

/// The text of the read-only `/etc/lazaret/network` inside the sandbox, so
/// an agent can explain a failed connection: a header, the IPv4 default
/// (`default allow`), one `allow P` / `deny P` line per rule in the
/// policy's canonical order, then one `nameserver A` line per resolver.
/// Plain ASCII and deterministic. It describes the policy; it is not
/// checked here (the install functions refuse what cannot be planned).
pub fn network_summary(policy: &DerivedNetworkPolicy) -> String {
    let mut out = String::from(SUMMARY_HEADER);
    for d in policy.default_actions() {
        if d.family == AddressFamily::IPv4 {
            let _ = writeln!(out, "default {}", action_word(d.action));
        }
    }
    for rule in policy.prefix_rules() {
        let _ = writeln!(out, "{} {}", action_word(rule.action), raw_prefix(rule));
    }
    for r in policy.resolvers() {
        if let Ok(a) = <[u8; 4]>::try_from(r.address.as_slice()) {
            let _ = writeln!(out, "nameserver {}", Ipv4Addr::from(a));
        }
    }
    out
}

/// The sandbox's read-only `/etc/resolv.conf` (spec 3.7: Lazaret supplies
/// the protected resolver configuration): only the slirp4netns synthetic
/// DNS endpoint.
pub fn resolv_conf() -> String {
    format!("nameserver {SYNTHETIC_DNS}\n")
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
