//! The real rtnetlink effects (`lazaret_effects::network::rtnl`, spec 3.7
//! "Linux policy state") in a network namespace each test creates.
//!
//! As root, the body runs in a fresh thread that unshares `CLONE_NEWNET`:
//! the NETLINK_ROUTE sockets that thread opens, the `/proc/sys/net` files it
//! writes and the processes it forks live in the new namespace, and the
//! test's own thread checks afterwards that none of it leaked into its
//! namespace. As an ordinary user that is impossible in-process: the kernel
//! refuses `unshare(CLONE_NEWUSER)` to a multi-threaded process such as the
//! test harness. The test then re-runs itself under util-linux
//! `unshare --user --map-root-user --net` and the inner half runs the body
//! in that process-wide fresh namespace.
//!
//! Setup the product never does (a veth pair, an address, routes the
//! projection must refuse) uses iproute2 `ip`, forked from the namespaced
//! thread so it inherits that thread's namespace. This is test scaffolding.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lazaret_effects::network::rtnl::{
    NetlinkRoutes, RouteSys, RtnlError, RTN_UNICAST, RT_TABLE_MAIN,
};
use lazaret_runtime::config::Ipv4Prefix;
use lazaret_runtime::network::{PolicyProjection, ProjectedRoute, RouteNextHop};

/// Set in the inner half of the re-run (ordinary user only).
const INNER: &str = "LAZARET_TEST_NETNS_INNER";
/// The veth pair the tests create.
const DEV: &str = "rtnl0";
const PEER: &str = "rtnl1";
/// How long the kernel may take to report carrier on the veth.
const SETTLE: Duration = Duration::from_secs(10);

/// Runs `body` in a fresh network namespace (see the module doc).
fn in_fresh_netns(name: &str, body: fn()) {
    if std::env::var_os(INNER).is_some() {
        return body();
    }
    if rustix::process::geteuid().is_root() {
        let outer_ns = namespace_identity();
        let inner_ns = std::thread::spawn(move || {
            // SAFETY: CLONE_NEWNET does not unshare the descriptor table
            // (CLONE_FILES), which is what makes unshare unsafe for Rust's
            // fd ownership; it affects this thread only.
            unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNET) }
                .expect("unshare(CLONE_NEWNET)");
            body();
            namespace_identity()
        })
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        assert_ne!(inner_ns, outer_ns, "the body ran in the test's namespace");
        // NetlinkRoutes follows the calling thread: the body's devices are
        // not in this thread's namespace.
        assert_eq!(NetlinkRoutes.link_index(DEV).unwrap(), None);
        return;
    }
    rerun_in_user_and_net_namespace(name);
}

fn namespace_identity() -> u64 {
    std::fs::metadata("/proc/thread-self/ns/net").unwrap().ino()
}

/// The ordinary-user half: this test again, as uid 0 of a new user
/// namespace with a new network namespace.
fn rerun_in_user_and_net_namespace(name: &str) {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(tool("unshare"))
        .args(["--user", "--map-root-user", "--net", "--"])
        .arg(exe)
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(INNER, "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn unshare");
    // Signals go through a pidfd, never a numeric PID (spec 3.3, FR-7);
    // opened while the child cannot have been reaped.
    let pidfd = rustix::process::pidfd_open(
        rustix::process::Pid::from_child(&child),
        rustix::process::PidfdFlags::empty(),
    )
    .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        stdout.read_to_string(&mut text).map(|_| text)
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = rustix::process::pidfd_send_signal(&pidfd, rustix::process::Signal::KILL);
            let _ = child.wait();
            panic!("inner test {name} did not finish in 120 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let output = reader.join().unwrap().unwrap();
    print!("{output}");
    assert!(status.success(), "inner test {name} failed: {status}");
    assert!(
        output.contains("test result: ok. 1 passed"),
        "inner test {name} did not run"
    );
}

/// An absolute path for `name` when it is in a system directory, so the
/// test also runs with an ordinary user's PATH.
fn tool(name: &str) -> String {
    ["/usr/sbin", "/sbin", "/usr/bin", "/bin"]
        .iter()
        .map(|dir| format!("{dir}/{name}"))
        .find(|path| std::path::Path::new(path).exists())
        .unwrap_or_else(|| name.to_owned())
}

/// Runs `ip ARGS` (forked from this thread, so in its namespace); its
/// stdout.
fn ip(args: &[&str]) -> String {
    let output = Command::new(tool("ip"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run ip");
    assert!(
        output.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn write_sysctl(path: &str, value: &str) {
    std::fs::write(path, value).unwrap_or_else(|e| panic!("write {path}: {e}"));
}

/// lo up through the effect, then the veth pair with 10.137.54.100/24 on
/// DEV, both ends up through the effect, waiting until the kernel reports
/// carrier (IPv6 configures link-local addresses on that event).
fn veth_with_address(routes: &NetlinkRoutes) {
    routes.set_link_up("lo").unwrap();
    ip(&["link", "add", DEV, "type", "veth", "peer", "name", PEER]);
    ip(&["address", "add", "10.137.54.100/24", "dev", DEV]);
    routes.set_link_up(DEV).unwrap();
    routes.set_link_up(PEER).unwrap();
    let deadline = Instant::now() + SETTLE;
    while !ip(&["-o", "link", "show", "dev", DEV]).contains("state UP") {
        assert!(Instant::now() < deadline, "{DEV} never reported carrier");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn prefix(address: [u8; 4], length: u8) -> Ipv4Prefix {
    Ipv4Prefix::new(address, length)
}

fn on_link(destination: Ipv4Prefix, table: u32, priority: u32) -> ProjectedRoute {
    ProjectedRoute {
        destination,
        table,
        route_type: RTN_UNICAST,
        priority,
        next_hop: RouteNextHop::OnLink {
            device: DEV.to_owned(),
        },
    }
}

fn via(destination: Ipv4Prefix, table: u32, gateway: [u8; 4]) -> ProjectedRoute {
    ProjectedRoute {
        next_hop: RouteNextHop::Gateway {
            gateway: gateway.into(),
            device: DEV.to_owned(),
        },
        ..on_link(destination, table, 0)
    }
}

fn errno_of(error: &RtnlError) -> Option<i32> {
    match error {
        RtnlError::Kernel { errno, .. } => Some(*errno),
        _ => None,
    }
}

/// The routes the tests install: on-link, via the gateway, a priority,
/// a table below 256 (rtm_table) and one above (RTA_TABLE).
fn policy_routes() -> Vec<ProjectedRoute> {
    vec![
        on_link(prefix([10, 0, 0, 0], 8), RT_TABLE_MAIN, 0),
        via(prefix([10, 99, 0, 5], 32), RT_TABLE_MAIN, [10, 137, 54, 2]),
        on_link(prefix([172, 16, 0, 0], 12), RT_TABLE_MAIN, 7),
        on_link(prefix([192, 168, 0, 0], 16), 100, 0),
        via(prefix([0, 0, 0, 0], 0), 1000, [10, 137, 54, 2]),
    ]
}

/// What observe must report for IPv4 after `policy_routes()`: those plus
/// the kernel's prefix route for DEV's address. The local table (the
/// address itself, broadcast, loopback) is not part of it.
fn expected_ipv4() -> Vec<ProjectedRoute> {
    let mut routes = policy_routes();
    routes.push(on_link(prefix([10, 137, 54, 0], 24), RT_TABLE_MAIN, 0));
    PolicyProjection::new(routes, Vec::new(), Vec::new()).ipv4_routes
}

fn install_and_check_ipv4(routes: &NetlinkRoutes) -> PolicyProjection {
    for route in policy_routes() {
        routes.add_route(&route).unwrap();
    }
    let duplicate = routes.add_route(&policy_routes()[0]).unwrap_err();
    assert_eq!(
        errno_of(&duplicate),
        Some(rustix::io::Errno::EXIST.raw_os_error()),
        "{duplicate}"
    );
    let observed = routes.observe().unwrap();
    assert_eq!(observed.ipv4_routes, expected_ipv4());
    observed
}

#[test]
fn real_routes_install_and_observe_with_ipv6_on() {
    in_fresh_netns("real_routes_install_and_observe_with_ipv6_on", ipv6_on_body);
}

fn ipv6_on_body() {
    let routes = NetlinkRoutes;
    assert_eq!(routes.link_index(DEV).unwrap(), None);
    veth_with_address(&routes);
    let index = routes.link_index(DEV).unwrap().unwrap();
    assert_eq!(
        ip(&["-o", "link", "show", "dev", DEV]).split(':').next(),
        Some(index.to_string().as_str())
    );
    let observed = install_and_check_ipv4(&routes);

    let addresses = &observed.ipv6_addresses;
    assert!(
        addresses.contains(&"::1/128 dev lo".to_owned()),
        "{addresses:?}"
    );
    for device in [DEV, PEER] {
        assert!(
            addresses
                .iter()
                .any(|a| a.starts_with("fe80::") && a.ends_with(&format!("/64 dev {device}"))),
            "{addresses:?}"
        );
    }
    // Kernel 6.18 has no main-table ::1 route, only the local-table one;
    // its local-table twins of the link-local addresses appear only once
    // duplicate address detection has finished, so they are not required.
    let ipv6_routes = &observed.ipv6_routes;
    for route in [
        "::1/128 dev lo table 255 type 2".to_owned(),
        format!("fe80::/64 dev {DEV}"),
        format!("ff00::/8 dev {DEV} table 255 type 5"),
    ] {
        assert!(ipv6_routes.contains(&route), "{ipv6_routes:?}");
    }
}

#[test]
fn real_routes_observe_no_ipv6_when_disabled_before_links() {
    in_fresh_netns(
        "real_routes_observe_no_ipv6_when_disabled_before_links",
        ipv6_off_body,
    );
}

fn ipv6_off_body() {
    write_sysctl("/proc/sys/net/ipv6/conf/all/disable_ipv6", "1");
    write_sysctl("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1");
    let routes = NetlinkRoutes;
    veth_with_address(&routes);
    let observed = install_and_check_ipv4(&routes);
    assert_eq!(
        observed,
        PolicyProjection::new(expected_ipv4(), Vec::new(), Vec::new())
    );
}

#[test]
fn real_routes_refuse_unknown_devices_and_unprojectable_routes() {
    in_fresh_netns(
        "real_routes_refuse_unknown_devices_and_unprojectable_routes",
        refusals_body,
    );
}

fn refusals_body() {
    let routes = NetlinkRoutes;
    veth_with_address(&routes);

    let missing = "nope0";
    let mut route = on_link(prefix([10, 0, 0, 0], 8), RT_TABLE_MAIN, 0);
    route.next_hop = RouteNextHop::OnLink {
        device: missing.to_owned(),
    };
    for error in [
        routes.add_route(&route).unwrap_err(),
        routes.set_link_up(missing).unwrap_err(),
    ] {
        assert!(
            matches!(&error, RtnlError::UnknownDevice { name } if name == missing),
            "{error:?}"
        );
    }
    assert_eq!(routes.link_index(missing).unwrap(), None);

    // A gateway the kernel cannot reach is the kernel's refusal, with its
    // extended ACK text.
    let unreachable = via(prefix([10, 98, 0, 0], 16), RT_TABLE_MAIN, [10, 1, 2, 3]);
    let error = routes.add_route(&unreachable).unwrap_err();
    assert!(
        matches!(
            &error,
            RtnlError::Kernel {
                request: "RTM_NEWROUTE",
                message: Some(_),
                ..
            }
        ),
        "{error:?}"
    );

    // What the projection cannot express is refused, never dropped.
    let cases: [(&[&str], Ipv4Prefix, &str); 4] = [
        (
            &["route", "add", "blackhole", "10.200.0.0/16"],
            prefix([10, 200, 0, 0], 16),
            "no output device",
        ),
        (
            &[
                "route",
                "add",
                "10.201.0.0/16",
                "nexthop",
                "via",
                "10.137.54.2",
                "dev",
                DEV,
                "nexthop",
                "via",
                "10.137.54.3",
                "dev",
                DEV,
            ],
            prefix([10, 201, 0, 0], 16),
            "multipath",
        ),
        (
            &["route", "add", "10.202.0.0/16", "tos", "0x10", "dev", DEV],
            prefix([10, 202, 0, 0], 16),
            "TOS selector",
        ),
        (
            &["route", "add", "unreachable", "10.203.0.0/16", "table", "7"],
            prefix([10, 203, 0, 0], 16),
            "no output device",
        ),
    ];
    for (add, destination, expected) in cases {
        ip(add);
        let error = routes.observe().unwrap_err();
        match &error {
            RtnlError::UnsupportedRoute {
                destination: refused,
                detail,
            } => {
                assert_eq!(*refused, destination);
                assert!(detail.contains(expected), "{error}");
            }
            other => panic!("expected UnsupportedRoute for {destination}, got {other:?}"),
        }
        let mut delete = add.to_vec();
        delete[1] = "del";
        ip(&delete);
    }
    // With the refused routes gone, the namespace projects again.
    let observed = routes.observe().unwrap();
    assert_eq!(
        observed.ipv4_routes,
        [on_link(prefix([10, 137, 54, 0], 24), RT_TABLE_MAIN, 0)]
    );
}
