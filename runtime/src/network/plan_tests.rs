use std::net::Ipv4Addr;

use quickcheck::{Arbitrary, Gen, QuickCheck, TestResult};
use serde_json::{json, Value};

use super::*;
use crate::config::{EffectivePolicy, KeyPath};

fn prefix(s: &str) -> Ipv4Prefix {
    Ipv4Prefix::parse(&KeyPath::root(), s).expect("test prefix")
}

fn keyed(list: &str, prefixes: &[Ipv4Prefix]) -> Vec<(KeyPath, Ipv4Prefix)> {
    prefixes
        .iter()
        .enumerate()
        .map(|(i, p)| (KeyPath::root().key("network").key(list).index(i), *p))
        .collect()
}

fn effective(allow: &[Ipv4Prefix], deny: &[Ipv4Prefix]) -> Result<EffectivePolicy, String> {
    EffectivePolicy::derive(&keyed("allow", allow), &keyed("deny", deny), &[], &[])
        .map_err(|e| e.to_string())
}

fn derived(allow: &[&str], deny: &[&str]) -> DerivedNetworkPolicy {
    let allow: Vec<Ipv4Prefix> = allow.iter().map(|s| prefix(s)).collect();
    let deny: Vec<Ipv4Prefix> = deny.iter().map(|s| prefix(s)).collect();
    effective(&allow, &deny)
        .expect("test policy derives")
        .derived_policy()
}

fn on_link_route(p: &str) -> ProjectedRoute {
    ProjectedRoute {
        destination: prefix(p),
        table: 254,
        route_type: 1,
        priority: 0,
        next_hop: RouteNextHop::OnLink {
            device: "tap0".to_owned(),
        },
    }
}

/// The allowed canary's route, on the canary link.
fn canary_route() -> ProjectedRoute {
    ProjectedRoute {
        next_hop: RouteNextHop::OnLink {
            device: "cnr0".to_owned(),
        },
        ..on_link_route("10.137.55.2/32")
    }
}

fn gateway_route(p: &str) -> ProjectedRoute {
    ProjectedRoute {
        destination: prefix(p),
        table: 254,
        route_type: 1,
        priority: 0,
        next_hop: RouteNextHop::Gateway {
            gateway: Ipv4Addr::new(10, 137, 54, 2),
            device: "tap0".to_owned(),
        },
    }
}

/// The small policy the pinned tests use.
fn small() -> DerivedNetworkPolicy {
    derived(&["10.99.0.5/32"], &["8.8.0.0/16"])
}

#[test]
fn install_routes_of_a_small_policy() {
    let routes = install_routes(&small()).expect("plan");
    // The canonical rule order (address, then length); the canary allow
    // 10.137.55.2/32 is on the canary link.
    let expected = vec![
        on_link_route("8.8.0.0/16"),
        on_link_route("10.0.0.0/8"),
        gateway_route("10.99.0.5/32"),
        on_link_route("10.137.54.2/32"),
        on_link_route("10.137.54.3/32"),
        on_link_route("10.137.55.0/29"),
        canary_route(),
        on_link_route("172.16.0.0/12"),
        on_link_route("192.168.0.0/16"),
    ];
    assert_eq!(routes, expected);
}

#[test]
fn expected_projection_of_a_small_policy() {
    let projection = expected_projection(&small()).expect("projection");
    // Sorted by destination: the slirp4netns default and connected routes
    // join the install routes.
    let expected = vec![
        gateway_route("0.0.0.0/0"),
        on_link_route("8.8.0.0/16"),
        on_link_route("10.0.0.0/8"),
        gateway_route("10.99.0.5/32"),
        on_link_route("10.137.54.0/24"),
        on_link_route("10.137.54.2/32"),
        on_link_route("10.137.54.3/32"),
        on_link_route("10.137.55.0/29"),
        canary_route(),
        on_link_route("172.16.0.0/12"),
        on_link_route("192.168.0.0/16"),
    ];
    assert_eq!(projection.version, 1);
    assert_eq!(projection.ipv4_routes, expected);
    assert!(projection.ipv6_addresses.is_empty());
    assert!(projection.ipv6_routes.is_empty());
}

#[test]
fn egress_ruleset_of_a_small_policy() {
    let text = egress_ruleset(&small()).expect("ruleset");
    let expected = "table netdev lazaret {\n\
        \tchain egress_tap0 {\n\
        \t\ttype filter hook egress device \"tap0\" priority 0; policy accept;\n\
        \t\tmeta protocol ip6 drop\n\
        \t\tip daddr 10.99.0.5/32 accept\n\
        \t\tip daddr 10.137.54.2/32 accept\n\
        \t\tip daddr 10.137.54.3/32 accept\n\
        \t\tip daddr 10.137.55.0/29 drop\n\
        \t\tip daddr 8.8.0.0/16 drop\n\
        \t\tip daddr 192.168.0.0/16 drop\n\
        \t\tip daddr 172.16.0.0/12 drop\n\
        \t\tip daddr 10.0.0.0/8 drop\n\
        \t}\n\
        }\n";
    assert_eq!(text, expected);
}

#[test]
fn network_summary_of_a_small_policy() {
    let text = network_summary(&small());
    let (header, body) = text.split_at(SUMMARY_HEADER.len());
    assert_eq!(header, SUMMARY_HEADER);
    assert!(header.contains("read-only"));
    assert!(header.contains("host"));
    assert!(header.contains("\"No route to host\""));
    assert!(header.contains("3 seconds"));
    assert!(header.contains("UDP"));
    assert!(header.contains("longest prefix"));
    assert!(header.lines().all(|l| l.starts_with('#')));
    let expected = "default allow\n\
        deny 8.8.0.0/16\n\
        deny 10.0.0.0/8\n\
        allow 10.99.0.5/32\n\
        allow 10.137.54.2/32\n\
        allow 10.137.54.3/32\n\
        deny 10.137.55.0/29\n\
        allow 10.137.55.2/32\n\
        deny 172.16.0.0/12\n\
        deny 192.168.0.0/16\n\
        nameserver 10.137.54.3\n";
    assert_eq!(body, expected);
    assert!(text.is_ascii());
    assert_eq!(network_summary(&small()), text);
}

#[test]
fn resolv_conf_names_only_the_synthetic_dns() {
    assert_eq!(resolv_conf(), "nameserver 10.137.54.3\n");
}

#[test]
fn a_default_deny_is_installed_as_two_halves() {
    let routes = install_routes(&derived(&["1.1.1.1/32"], &["0.0.0.0/0"])).expect("plan");
    assert!(routes.contains(&on_link_route("0.0.0.0/1")));
    assert!(routes.contains(&on_link_route("128.0.0.0/1")));
    assert!(routes.iter().all(|r| r.destination.prefix_len() > 0));
    // A half that is itself a rule is left to that rule.
    let routes = install_routes(&derived(&["128.0.0.0/1"], &["0.0.0.0/0"])).expect("plan");
    assert!(routes.contains(&on_link_route("0.0.0.0/1")));
    assert!(routes.contains(&gateway_route("128.0.0.0/1")));
    assert_eq!(
        routes
            .iter()
            .filter(|r| r.destination == prefix("128.0.0.0/1"))
            .count(),
        1
    );
    let text = egress_ruleset(&derived(&["1.1.1.1/32"], &["0.0.0.0/0"])).expect("ruleset");
    assert!(text.ends_with("\t\tip daddr 0.0.0.0/0 drop\n\t}\n}\n"));
}

/// `small()` as JSON, changed by `edit`, decoded without the canonical
/// checks (the plan must refuse on its own).
fn edited(edit: impl FnOnce(&mut Value)) -> DerivedNetworkPolicy {
    let mut value = serde_json::to_value(small()).expect("to json");
    edit(&mut value);
    serde_json::from_value(value).expect("from json")
}

fn rules(value: &mut Value) -> &mut Vec<Value> {
    value["prefix_rules"].as_array_mut().expect("rules")
}

#[test]
fn plans_refuse_what_is_not_a_v1_ipv4_rule() {
    let cases: Vec<(DerivedNetworkPolicy, PlanError)> = vec![
        (
            edited(|v| {
                rules(v).push(json!({"family": "IPv6", "address": [0x20, 1, 0xd, 0xb8, 0,0,0,0, 0,0,0,0, 0,0,0,0], "prefix_len": 32, "action": "Deny"}));
            }),
            PlanError::NotIpv4 {
                prefix: "2001:db8::/32".to_owned(),
                family: AddressFamily::IPv6,
            },
        ),
        (
            edited(|v| {
                rules(v).push(json!({"family": "IPv4", "address": [1, 2, 3], "prefix_len": 24, "action": "Deny"}));
            }),
            PlanError::AddressLength {
                prefix: "010203/24".to_owned(),
                len: 3,
            },
        ),
        (
            edited(|v| {
                rules(v).push(json!({"family": "IPv4", "address": [1, 2, 3, 4], "prefix_len": 33, "action": "Deny"}));
            }),
            PlanError::PrefixLength {
                prefix: "1.2.3.4/33".to_owned(),
            },
        ),
        (
            edited(|v| {
                rules(v).push(json!({"family": "IPv4", "address": [1, 2, 3, 4], "prefix_len": 24, "action": "Deny"}));
            }),
            PlanError::HostBits {
                prefix: "1.2.3.4/24".to_owned(),
                canonical: prefix("1.2.3.0/24"),
            },
        ),
        (
            edited(|v| {
                rules(v).push(json!({"family": "IPv4", "address": [8, 8, 0, 0], "prefix_len": 16, "action": "Allow"}));
            }),
            PlanError::Duplicate {
                prefix: prefix("8.8.0.0/16"),
            },
        ),
        (
            edited(|v| {
                rules(v).push(json!({"family": "IPv4", "address": [10, 137, 54, 128], "prefix_len": 25, "action": "Deny"}));
            }),
            PlanError::ReservedTopology {
                prefix: prefix("10.137.54.128/25"),
                action: PolicyAction::Deny,
            },
        ),
        (
            edited(|v| {
                rules(v).push(json!({"family": "IPv4", "address": [10, 137, 0, 0], "prefix_len": 16, "action": "Allow"}));
            }),
            PlanError::ReservedTopology {
                prefix: prefix("10.137.0.0/16"),
                action: PolicyAction::Allow,
            },
        ),
        (
            edited(|v| {
                rules(v).retain(|r| r["address"] != json!([10, 137, 54, 3]));
            }),
            PlanError::FixedRule {
                prefix: prefix("10.137.54.3/32"),
                expected: PolicyAction::Allow,
            },
        ),
        (
            edited(|v| {
                for r in rules(v) {
                    if r["address"] == json!([10, 137, 55, 0]) {
                        r["action"] = json!("Allow");
                    }
                }
            }),
            PlanError::FixedRule {
                prefix: prefix("10.137.55.0/29"),
                expected: PolicyAction::Deny,
            },
        ),
        (
            edited(|v| {
                v["default_actions"] = json!([{"family": "IPv4", "action": "Deny"}]);
            }),
            PlanError::DefaultAction {
                found: vec![PolicyAction::Deny],
            },
        ),
    ];
    for (policy, error) in cases {
        assert_eq!(install_routes(&policy), Err(error.clone()));
        assert_eq!(expected_projection(&policy), Err(error.clone()));
        assert_eq!(egress_ruleset(&policy), Err(error));
    }
}

/// A random effective policy and the addresses to probe it with.
#[derive(Clone, Debug)]
/// Prefixes are `(address, length)` so that quickcheck can shrink them.
struct Scenario {
    allow: Vec<(u32, u8)>,
    deny: Vec<(u32, u8)>,
    random: Vec<u32>,
}

/// Prefixes near the interesting places (the RFC 1918 ranges, the
/// reserved topology, the halves of the address space) or anywhere.
fn arbitrary_prefix(g: &mut Gen) -> (u32, u8) {
    let bases: [u32; 10] = [
        0x0a00_0000, // 10.0.0.0
        0x0a63_0005, // 10.99.0.5
        0x0a89_0000, // 10.137.0.0
        0x0a89_3800, // 10.137.56.0
        0xac10_0000, // 172.16.0.0
        0xc0a8_0100, // 192.168.1.0
        0x0808_0808, // 8.8.8.8
        0x0000_0000,
        0x8000_0000,
        0xffff_ffff,
    ];
    let len = u8::arbitrary(g) % 33;
    let address = if bool::arbitrary(g) {
        let base = *g.choose(&bases).unwrap_or(&0);
        let noise_bits = u32::arbitrary(g) % 33;
        let noise = if noise_bits == 0 {
            0
        } else {
            u32::arbitrary(g) >> (32 - noise_bits)
        };
        base ^ noise
    } else {
        u32::arbitrary(g)
    };
    (address, len)
}

fn to_prefix((address, len): (u32, u8)) -> Ipv4Prefix {
    Ipv4Prefix::new(address.to_be_bytes(), len)
}

impl Arbitrary for Scenario {
    fn arbitrary(g: &mut Gen) -> Self {
        let allows = usize::arbitrary(g) % 8;
        let denies = usize::arbitrary(g) % 8;
        let randoms = usize::arbitrary(g) % 16;
        Self {
            allow: (0..allows).map(|_| arbitrary_prefix(g)).collect(),
            deny: (0..denies).map(|_| arbitrary_prefix(g)).collect(),
            random: (0..randoms).map(|_| u32::arbitrary(g)).collect(),
        }
    }

    fn shrink(&self) -> Box<dyn Iterator<Item = Self>> {
        Box::new(
            (self.allow.clone(), self.deny.clone(), self.random.clone())
                .shrink()
                .map(move |(allow, deny, random)| Self {
                    allow,
                    deny,
                    random,
                }),
        )
    }
}

impl Scenario {
    /// The effective policy, after dropping what the configuration grammar
    /// refuses; `None` if it still does not derive.
    fn policy(&self) -> Option<EffectivePolicy> {
        let rfc1918 = [
            prefix("10.0.0.0/8"),
            prefix("172.16.0.0/12"),
            prefix("192.168.0.0/16"),
        ];
        let deny: Vec<Ipv4Prefix> = self
            .deny
            .iter()
            .copied()
            .map(to_prefix)
            .filter(|p| !RESERVED_TOPOLOGY.contains(p))
            .collect();
        let allow: Vec<Ipv4Prefix> = self
            .allow
            .iter()
            .copied()
            .map(to_prefix)
            .filter(|p| {
                !p.intersects(&RESERVED_TOPOLOGY) && !rfc1918.contains(p) && !deny.contains(p)
            })
            .collect();
        effective(&allow, &deny).ok()
    }

    /// Every rule's edges and an inside address, the topology addresses,
    /// and the random addresses.
    fn probes(&self, policy: &DerivedNetworkPolicy) -> Vec<Ipv4Addr> {
        let mut out: Vec<u32> = self.random.clone();
        out.extend([
            0,
            u32::MAX,
            u32::from(GATEWAY),
            u32::from(SYNTHETIC_DNS),
            u32::from(super::super::topology::SANDBOX_ADDRESS),
            0x0a89_3601, // 10.137.54.1
            0x0a89_36ff, // 10.137.54.255
            0x0a89_3701, // 10.137.55.1
            0x0a89_3702, // 10.137.55.2
            0x0a89_3703, // 10.137.55.3
        ]);
        for (i, rule) in policy.prefix_rules().iter().enumerate() {
            let Ok(p) = ipv4_prefix(rule) else { continue };
            let first = u32::from_be_bytes(p.network());
            let size_minus_one = if p.prefix_len() == 0 {
                u32::MAX
            } else {
                (1u32 << (32 - p.prefix_len())) - 1
            };
            let last = first | size_minus_one;
            let inside =
                first | (self.random.get(i).copied().unwrap_or(0x5a5a_5a5a) & size_minus_one);
            out.extend([
                first,
                last,
                inside,
                first.wrapping_sub(1),
                last.wrapping_add(1),
            ]);
        }
        out.into_iter().map(Ipv4Addr::from).collect()
    }
}

/// What the sandbox reaches under `routes` by longest prefix: a route
/// through the gateway reaches anything (slirp4netns forwards it); an
/// on-link route reaches only the addresses slirp4netns answers ARP for,
/// its gateway and synthetic DNS (docs/network-research.md section 3).
/// `None` when no route matches.
fn route_reaches(routes: &[ProjectedRoute], addr: Ipv4Addr) -> Option<bool> {
    let best = routes
        .iter()
        .filter(|r| r.destination.contains_addr(addr))
        .max_by_key(|r| r.destination.prefix_len())?;
    assert_eq!((best.table, best.route_type, best.priority), (254, 1, 0));
    Some(match &best.next_hop {
        RouteNextHop::Gateway { gateway, device } => *gateway == GATEWAY && device == "tap0",
        RouteNextHop::OnLink { device } => {
            device == "tap0" && (addr == GATEWAY || addr == SYNTHETIC_DNS)
        }
    })
}

/// The egress chain's IPv4 rules parsed back from the text, in order.
fn parse_egress(text: &str) -> Vec<(Ipv4Prefix, bool)> {
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let first_rule = lines
        .iter()
        .position(|l| l.starts_with("type filter hook egress"))
        .expect("chain header")
        + 1;
    assert_eq!(lines.get(first_rule), Some(&"meta protocol ip6 drop"));
    lines[first_rule + 1..]
        .iter()
        .filter_map(|l| l.strip_prefix("ip daddr "))
        .map(|rest| {
            let (p, verdict) = rest.split_once(' ').expect("ip daddr P verdict");
            let accept = match verdict {
                "accept" => true,
                "drop" => false,
                other => panic!("unexpected verdict {other}"),
            };
            (prefix(p), accept)
        })
        .collect()
}

/// First match wins; no match passes (`policy accept`).
fn egress_accepts(rules: &[(Ipv4Prefix, bool)], addr: Ipv4Addr) -> bool {
    rules
        .iter()
        .find(|(p, _)| p.contains_addr(addr))
        .is_none_or(|(_, accept)| *accept)
}

const PROPERTY_TESTS: u64 = 400;

#[test]
fn routes_reach_what_the_policy_allows() {
    fn prop(s: Scenario) -> TestResult {
        let Some(effective) = s.policy() else {
            return TestResult::discard();
        };
        let policy = effective.derived_policy();
        let Ok(projection) = expected_projection(&policy) else {
            return TestResult::failed();
        };
        let routes = &projection.ipv4_routes;
        // One route per destination: the kernel refuses a second one.
        let mut destinations: Vec<Ipv4Prefix> = routes.iter().map(|r| r.destination).collect();
        destinations.dedup();
        if destinations.len() != routes.len() {
            return TestResult::failed();
        }
        // The canary allow is on the canary link, checked below. Every
        // other address, neighbours in 10.137.54.0/24 included, agrees.
        let ok = s
            .probes(&policy)
            .into_iter()
            .filter(|a| !CANARY_ALLOWED.contains_addr(*a))
            .all(|a| route_reaches(routes, a) == Some(effective.allows(a)));
        let canary = routes.contains(&canary_route());
        TestResult::from_bool(ok && canary)
    }
    QuickCheck::new()
        .tests(PROPERTY_TESTS)
        .quickcheck(prop as fn(Scenario) -> TestResult);
}

#[test]
fn egress_filter_passes_what_the_policy_allows() {
    fn prop(s: Scenario) -> TestResult {
        let Some(effective) = s.policy() else {
            return TestResult::discard();
        };
        let policy = effective.derived_policy();
        let Ok(text) = egress_ruleset(&policy) else {
            return TestResult::failed();
        };
        let rules = parse_egress(&text);
        // Every rule but the canary allow, which the filter leaves to the
        // aggregate canary deny.
        if rules.len() + 1 != policy.prefix_rules().len() {
            return TestResult::failed();
        }
        // The filter the supervisor must observe lists exactly the loaded
        // rules, in the same order, after the IPv6 drop.
        let Ok(filter) = expected_filter(&policy) else {
            return TestResult::failed();
        };
        let mut expected = vec![FilterRule::DropIpv6];
        expected.extend(
            rules
                .iter()
                .map(|&(prefix, accept)| FilterRule::Destination { prefix, accept }),
        );
        if filter.rules != expected || filter.device.as_deref() != Some("tap0") {
            return TestResult::failed();
        }
        let ok = s.probes(&policy).into_iter().all(|a| {
            egress_accepts(&rules, a) == (effective.allows(a) && !CANARY_ALLOWED.contains_addr(a))
        });
        TestResult::from_bool(ok && !egress_accepts(&rules, CANARY_ALLOWED.network().into()))
    }
    QuickCheck::new()
        .tests(PROPERTY_TESTS)
        .quickcheck(prop as fn(Scenario) -> TestResult);
}
