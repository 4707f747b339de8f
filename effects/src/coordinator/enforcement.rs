//! The Runtime Supervisor's network steps (spec 3.7): the enforcement
//! namespace, the supervised connectivity helper, the derived policy's
//! install and its exact observation, and the sandbox's network files.
//!
//! Order, as measured in docs/network.md: the namespace is created with
//! IPv6 off and loopback up before anything else exists in it; slirp4netns
//! is forked from the host network namespace (where it must run) and joins
//! the enforcement namespace by an inherited descriptor; the supervisor
//! then enters that namespace itself, installs the deny routes and the
//! egress filter, and compares the rtnetlink projection with the one
//! derived from the policy before runsc imports anything.
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use lazaret_runtime::config::DerivedNetworkPolicy;
use lazaret_runtime::network::topology::{MTU, SLIRP_NETWORK, TAP_DEVICE};
use lazaret_runtime::network::{
    egress_ruleset, expected_filter, expected_projection, install_routes, network_summary,
    resolv_conf, PlanError, PolicyProjection,
};

use super::nsys::NamespaceSys;
use crate::broker::sys::TargetCommand;
use crate::broker::ChildPipes;
use crate::network::canary::ipv6_off;
use crate::network::nft::{NftError, NftSys};
use crate::network::rtnl::{RouteSys, RtnlError};

/// How long slirp4netns may take to configure `tap0` (measured: median
/// 9 ms, at most 21 ms over ten runs).
pub const HELPER_READY_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the enforcement namespace could not be made ready.
#[derive(Debug, thiserror::Error)]
pub enum EnforcementError {
    #[error("creating the enforcement network namespace (IPv6 off): {0}")]
    Namespace(#[source] io::Error),
    #[error("entering the enforcement network namespace: {0}")]
    Enter(#[source] io::Error),
    #[error("the connectivity helper slirp4netns did not configure {TAP_DEVICE}: {0}")]
    HelperNotReady(String),
    #[error("deriving the route plan: {0}")]
    Plan(#[from] PlanError),
    #[error("installing route {route}: {source}")]
    Route {
        route: String,
        #[source]
        source: RtnlError,
    },
    #[error("loading the egress filter: {0}")]
    Filter(#[from] NftError),
    #[error("observing the enforcement namespace's routes: {0}")]
    Observe(#[source] RtnlError),
    #[error("the enforcement namespace does not show the derived policy: missing {missing:?}, unexpected {unexpected:?}")]
    ProjectionMismatch {
        missing: Vec<String>,
        unexpected: Vec<String>,
    },
    #[error("observing the egress filter: {0}")]
    ObserveFilter(#[source] NftError),
    #[error("the egress filter is not the derived one: expected {expected}, found {found}")]
    FilterMismatch { expected: String, found: String },
    #[error("writing {path}: {source}")]
    Files {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// The enforcement namespace, created with IPv6 disabled (spec 3.7:
/// "Lazaret v1 disables IPv6 in the Linux enforcement namespace before
/// helper and canary setup"). The caller stays where it was.
pub fn create_enforcement_namespace<N: NamespaceSys>(ns: &N) -> Result<OwnedFd, EnforcementError> {
    ns.create_network_namespace(&ipv6_off())
        .map_err(EnforcementError::Namespace)
}

/// FR-16: slirp4netns with the product CIDR and flags, attached to the
/// enforcement namespace by the inherited descriptor `netns` (the path
/// mode; docs/network.md: it then joins the namespace with the
/// supervisor's authority in the Domain user namespace, sandboxed and
/// under seccomp). `--disable-host-loopback`: the gateway is not the
/// host's 127.0.0.1.
pub fn helper_command(netns: &OwnedFd, pipes: &ChildPipes) -> TargetCommand {
    let ns = netns.as_raw_fd();
    let ready = pipes.ready_write.as_raw_fd();
    let exit = pipes.exit_read.as_raw_fd();
    TargetCommand {
        argv: vec![
            "slirp4netns".into(),
            "--configure".into(),
            format!("--mtu={MTU}").into(),
            format!("--cidr={SLIRP_NETWORK}").into(),
            "--disable-host-loopback".into(),
            "--enable-sandbox".into(),
            "--enable-seccomp".into(),
            format!("--ready-fd={ready}").into(),
            format!("--exit-fd={exit}").into(),
            "--netns-type=path".into(),
            format!("/proc/self/fd/{ns}").into(),
            TAP_DEVICE.into(),
        ],
        inherit: vec![ns, ready, exit],
    }
}

/// The connectivity helper, as readiness errors name it.
pub const HELPER: &str = "slirp4netns";

/// Moves the calling thread into the enforcement namespace.
pub fn enter<N: NamespaceSys>(ns: &N, netns: &OwnedFd) -> Result<(), EnforcementError> {
    ns.enter_network_namespace(netns.as_fd())
        .map_err(EnforcementError::Enter)
}

/// FR-19, SR-6 (as realised, docs/network.md): installs the derived
/// policy in the caller's (enforcement) namespace — loopback up, the
/// on-link deny and gateway allow routes, then the egress filter — and
/// returns the observed route projection. Both the route projection and
/// the filter nftables lists must equal the ones derived from the policy
/// exactly.
pub fn install_policy<R: RouteSys, F: NftSys>(
    routes: &R,
    nft: &F,
    policy: &DerivedNetworkPolicy,
) -> Result<PolicyProjection, EnforcementError> {
    routes
        .set_link_up("lo")
        .map_err(|source| EnforcementError::Route {
            route: "lo up".to_owned(),
            source,
        })?;
    for route in install_routes(policy)? {
        routes
            .add_route(&route)
            .map_err(|source| EnforcementError::Route {
                route: format!("{route:?}"),
                source,
            })?;
    }
    nft.load(&egress_ruleset(policy)?)?;
    let observed = routes.observe().map_err(EnforcementError::Observe)?;
    let expected = expected_projection(policy)?;
    if observed != expected {
        return Err(mismatch(&expected, &observed));
    }
    // The enforcing layer too: the chain, its device and its rules in
    // evaluation order, exactly.
    let filter = nft.observe().map_err(EnforcementError::ObserveFilter)?;
    let wanted = expected_filter(policy)?;
    if filter != wanted {
        return Err(EnforcementError::FilterMismatch {
            expected: format!("{wanted:?}"),
            found: format!("{filter:?}"),
        });
    }
    Ok(observed)
}

fn mismatch(expected: &PolicyProjection, observed: &PolicyProjection) -> EnforcementError {
    let lines = |p: &PolicyProjection| -> Vec<String> {
        let mut out: Vec<String> = vec![format!("version {}", p.version)];
        out.extend(p.ipv4_routes.iter().map(|r| format!("{r:?}")));
        out.extend(p.ipv6_addresses.iter().map(|a| format!("IPv6 address {a}")));
        out.extend(p.ipv6_routes.iter().map(|r| format!("IPv6 route {r}")));
        out
    };
    let (want, got) = (lines(expected), lines(observed));
    EnforcementError::ProjectionMismatch {
        missing: want.iter().filter(|l| !got.contains(l)).cloned().collect(),
        unexpected: got.iter().filter(|l| !want.contains(l)).cloned().collect(),
    }
}

/// The sandbox's network files under `dir` (bound read-only by the
/// bundle): `resolv.conf` naming only the synthetic DNS endpoint, and
/// `lazaret/network` listing the effective policy for an agent to read.
pub fn write_network_files(
    dir: &Path,
    policy: &DerivedNetworkPolicy,
) -> Result<(), EnforcementError> {
    let write = |path: PathBuf, text: String| {
        std::fs::write(&path, text).map_err(|source| EnforcementError::Files { path, source })
    };
    let info = dir.join("lazaret");
    std::fs::create_dir_all(&info).map_err(|source| EnforcementError::Files {
        path: info.clone(),
        source,
    })?;
    write(dir.join("resolv.conf"), resolv_conf())?;
    write(info.join("network"), network_summary(policy))
}

/// runsc 20240729 refuses `--network=sandbox` when it believes it runs in
/// the root network namespace, which it decides by the presence of
/// `/proc/sys/net/core/rmem_default` (docs/network.md §1): an empty
/// read-only tmpfs there, mounted from inside the enforcement namespace in
/// the mount namespace runsc runs in, answers it.
pub fn hide_root_namespace_probe<N: NamespaceSys>(ns: &N) -> io::Result<()> {
    ns.mount_empty_readonly(Path::new("/proc/sys/net/core"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordinator::nsys::RecordingNs;
    use crate::network::nft::RecordingNft;
    use crate::network::rtnl::RecordingRoutes;
    use lazaret_runtime::config::{EffectivePolicy, Ipv4Prefix};

    fn policy() -> DerivedNetworkPolicy {
        let allow = [Ipv4Prefix::new([10, 99, 0, 5], 32)];
        match EffectivePolicy::from_lists(&allow, &[]) {
            Ok(p) => p.derived_policy(),
            Err(e) => panic!("{e}"),
        }
    }

    /// IPv6 goes off inside the new namespace as it is created, before the
    /// helper exists (spec 3.7).
    #[test]
    fn the_namespace_is_created_with_ipv6_off() -> Result<(), EnforcementError> {
        let ns = RecordingNs::default();
        create_enforcement_namespace(&ns)?;
        assert_eq!(
            ns.calls(),
            vec![
                "create_network_namespace /proc/sys/net/ipv6/conf/all/disable_ipv6=1 /proc/sys/net/ipv6/conf/default/disable_ipv6=1".to_owned(),
            ]
        );
        Ok(())
    }

    /// The helper's argv carries exactly the spec's flags and the inherited
    /// descriptors it names.
    #[test]
    fn the_helper_runs_with_the_product_cidr_and_sandboxing() -> io::Result<()> {
        let netns: OwnedFd = std::fs::File::open("/dev/null")?.into();
        let pipes = ChildPipes::new()?;
        let cmd = helper_command(&netns, &pipes);
        let argv: Vec<String> = cmd
            .argv
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        for flag in [
            "--configure",
            "--mtu=65520",
            "--cidr=10.137.54.0/24",
            "--disable-host-loopback",
            "--enable-sandbox",
            "--enable-seccomp",
            "--netns-type=path",
        ] {
            assert!(
                argv.iter().any(|a| a == flag),
                "{flag} missing from {argv:?}"
            );
        }
        assert_eq!(argv.last().map(String::as_str), Some("tap0"));
        assert_eq!(
            argv[argv.len() - 2],
            format!("/proc/self/fd/{}", netns.as_raw_fd())
        );
        assert_eq!(cmd.inherit.len(), 3);
        assert!(cmd.inherit.contains(&pipes.ready_write.as_raw_fd()));
        assert!(cmd.inherit.contains(&pipes.exit_read.as_raw_fd()));
        assert!(!cmd.inherit.contains(&pipes.exit_write.as_raw_fd()));
        Ok(())
    }

    /// The routes slirp4netns configures (the kernel's connected route and
    /// its default route) are part of the expected projection: a namespace
    /// showing only what the supervisor installed is refused, naming
    /// exactly those two as missing.
    #[test]
    fn a_namespace_without_the_helpers_routes_refuses_the_install() {
        let p = policy();
        // The fake observes exactly the routes added through it.
        let routes = RecordingRoutes::default();
        match install_policy(&routes, &RecordingNft::default(), &p) {
            Err(EnforcementError::ProjectionMismatch {
                missing,
                unexpected,
            }) => {
                assert_eq!(missing.len(), 2, "{missing:?}");
                assert!(missing
                    .iter()
                    .any(|m| m.contains("len: 0") && m.contains("Gateway")));
                assert!(missing
                    .iter()
                    .any(|m| m.contains("[10, 137, 54, 0], len: 24")));
                assert!(unexpected.is_empty(), "{unexpected:?}");
            }
            other => panic!("expected a mismatch, got {other:?}"),
        }
    }

    /// A route changed after the install (here the allow's next hop made
    /// on-link) refuses readiness, naming the expected and the found route.
    #[test]
    fn a_tampered_route_refuses_the_install() -> Result<(), PlanError> {
        let p = policy();
        let mut observed = expected_projection(&p)?;
        let allow = observed
            .ipv4_routes
            .iter_mut()
            .find(|r| r.destination == Ipv4Prefix::new([10, 99, 0, 5], 32))
            .expect("the allow is in the expected projection");
        allow.next_hop = lazaret_runtime::network::RouteNextHop::OnLink {
            device: "tap0".to_owned(),
        };
        let routes = RecordingRoutes::new().observing(observed);
        match install_policy(&routes, &RecordingNft::default(), &p) {
            Err(EnforcementError::ProjectionMismatch {
                missing,
                unexpected,
            }) => {
                assert_eq!(missing.len(), 1, "{missing:?}");
                assert_eq!(unexpected.len(), 1, "{unexpected:?}");
                assert!(missing[0].contains("[10, 99, 0, 5]") && missing[0].contains("Gateway"));
                assert!(
                    unexpected[0].contains("[10, 99, 0, 5]") && unexpected[0].contains("OnLink")
                );
            }
            other => panic!("expected a mismatch, got {other:?}"),
        }
        // The untampered projection is accepted.
        let routes = RecordingRoutes::new().observing(expected_projection(&p)?);
        assert!(install_policy(&routes, &listing(&p)?, &p).is_ok());
        Ok(())
    }

    /// nftables listing exactly the derived filter.
    fn listing(p: &DerivedNetworkPolicy) -> Result<RecordingNft, PlanError> {
        Ok(RecordingNft {
            observed: Some(expected_filter(p)?),
            ..RecordingNft::default()
        })
    }

    /// A filter whose rules differ from the derived ones (here the RFC 1918
    /// deny of 10.0.0.0/8 gone), or that is bound to no device, refuses
    /// readiness even when every route is right.
    #[test]
    fn a_tampered_filter_refuses_the_install() -> Result<(), PlanError> {
        let p = policy();
        let mut missing_deny = listing(&p)?;
        if let Some(f) = missing_deny.observed.as_mut() {
            let before = f.rules.len();
            f.rules.retain(|r| {
                !matches!(r, lazaret_runtime::network::FilterRule::Destination { prefix, .. }
                    if *prefix == Ipv4Prefix::new([10, 0, 0, 0], 8))
            });
            assert_eq!(f.rules.len(), before - 1);
        }
        let mut unbound = listing(&p)?;
        if let Some(f) = unbound.observed.as_mut() {
            f.device = None;
        }
        for nft in [missing_deny, unbound] {
            let routes = RecordingRoutes::new().observing(expected_projection(&p)?);
            assert!(
                matches!(
                    install_policy(&routes, &nft, &p),
                    Err(EnforcementError::FilterMismatch { .. })
                ),
                "{:?}",
                nft.observed
            );
        }
        Ok(())
    }

    #[test]
    fn a_refused_filter_stops_before_the_observation() {
        let routes = RecordingRoutes::default();
        let nft = RecordingNft {
            refuse: true,
            ..RecordingNft::default()
        };
        assert!(matches!(
            install_policy(&routes, &nft, &policy()),
            Err(EnforcementError::Filter(_))
        ));
        assert!(!routes.calls().iter().any(|c| c.starts_with("observe")));
        assert_eq!(nft.loaded.borrow().len(), 1);
    }
}
