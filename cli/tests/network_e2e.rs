//! End-to-end: network isolation (spec 3.7; SR-5, SR-6, FR-16, FR-19) with
//! the real runsc and slirp4netns, as the unprivileged test user. The CLI
//! runs inside a network namespace the test creates, which stands in for
//! the host: the peers the sandbox may or may not reach listen on its
//! loopback, so no packet leaves it. Every scenario ends with the shared
//! leak check (no slirp4netns left) and trace replay.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test

mod support;
use support::{default_image, guest_results, text, Env, PeerNamespace, ONE_AT_A_TIME};

use std::process::Stdio;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The guest script: one `key=value` line per probe. `tcp` prints the
/// banner or the error, and `KEY_ms` the time it took in milliseconds.
const PROBES: &str = r#"
tcp() { s=$(date +%s%N); r=$(timeout 10 bash -c "exec 3<>/dev/tcp/$1/$2 && timeout 3 head -c 64 <&3" 2>&1 | tr '\n' ' '); echo "$3=${r:-EMPTY}"; echo "$3_ms=$(( ($(date +%s%N) - s) / 1000000 ))"; }
udp() { r=$(timeout 5 bash -c "exec 3<>/dev/udp/$1/$2; echo ping >&3; timeout 3 dd bs=512 count=1 status=none <&3" 2>&1 | tr '\n' ' '); echo "$3=${r:-EMPTY}"; }
tcp 10.99.0.5 8080 allowed_tcp
udp 10.99.0.5 8081 allowed_udp
tcp 10.99.0.6 8080 denied_tcp
udp 10.99.0.6 8081 denied_udp
tcp 10.137.54.2 47001 host_loopback
echo "ipv6_addresses=$(ip -6 addr | wc -l)"
echo "ipv6_routes=$(ip -6 route | wc -l)"
echo "resolver=$(grep -v '^#' /etc/resolv.conf | tr '\n' ' ')"
echo "policy_allow=$(grep -c '^allow 10.99.0.5/32$' /etc/lazaret/network)"
ip route add 1.2.3.4/32 dev tap0 2>/dev/null; echo "route_add=$?"
ip link set tap0 mtu 1500 2>/dev/null; echo "link_set=$?"
echo x > /etc/lazaret/network 2>/dev/null; echo "policy_write=$?"
echo x > /etc/resolv.conf 2>/dev/null; echo "resolv_write=$?"
echo "cap_eff=$(grep CapEff /proc/self/status | cut -f2)"
"#;

fn peer(name: &str) -> PeerNamespace {
    let ns = PeerNamespace::new(name, &["10.99.0.5", "10.99.0.6"]);
    ns.serve_tcp("10.99.0.5:8080", "PEER-ALLOWED");
    ns.serve_tcp("10.99.0.6:8080", "LEAKED-DENIED");
    ns.serve_tcp("127.0.0.1:47001", "LEAKED-HOST-LOOPBACK");
    ns
}

/// The default RFC 1918 deny blocks a peer at a 10.x address, TCP (fast,
/// "No route to host") and UDP (nothing arrives); a profile allowing that
/// /32 reaches it over both; the host's 127.0.0.1 is not reachable through
/// the gateway; there is no IPv6; DNS names only the synthetic endpoint
/// (and launch needs no upstream DNS: the namespace has none); the guest
/// cannot change routes or links and holds no network-administration
/// capability; the policy files are read-only.
#[test]
fn the_policy_decides_what_the_sandbox_reaches() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let ns = peer("policy");
    let allowed_udp = ns.serve_udp("10.99.0.5:8081", "PONG-ALLOWED");
    let denied_udp = ns.serve_udp("10.99.0.6:8081", "LEAKED-UDP");
    let env = Env::new("network-policy", &default_image());
    env.write_config(
        "config.toml",
        &default_image(),
        "allow_egress = [\"10.99.0.5/32\"]",
    );
    let started = Instant::now();
    let out = ns
        .wrap(env.command(&["default", "--", "bash", "-c", PROBES]))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout {stdout}\nstderr {}",
        text(&out.stderr)
    );
    let r = guest_results(&stdout);
    let get = |k: &str| {
        r.get(k)
            .cloned()
            .unwrap_or_else(|| panic!("{k} missing: {stdout}"))
    };
    assert!(get("allowed_tcp").starts_with("PEER-ALLOWED"), "{stdout}");
    assert!(get("allowed_udp").starts_with("PONG-ALLOWED"), "{stdout}");
    let denied = get("denied_tcp");
    assert!(denied.contains("No route to host"), "{stdout}");
    assert!(!denied.contains("LEAKED"), "{stdout}");
    // The on-link deny answers within gVisor's neighbour timeout (~3 s).
    let ms: u64 = get("denied_tcp_ms").parse().unwrap();
    assert!(ms < 6000, "denied connect took {ms} ms: {stdout}");
    assert!(!get("denied_udp").contains("LEAKED"), "{stdout}");
    assert_eq!(
        denied_udp.load(Ordering::SeqCst),
        0,
        "a denied datagram arrived"
    );
    assert!(allowed_udp.load(Ordering::SeqCst) >= 1);
    let host = get("host_loopback");
    assert!(!host.contains("LEAKED"), "{stdout}");
    assert!(host.contains("unreachable"), "{stdout}");
    assert_eq!(get("ipv6_addresses"), "0", "{stdout}");
    assert_eq!(get("ipv6_routes"), "0", "{stdout}");
    assert_eq!(get("resolver").trim(), "nameserver 10.137.54.3", "{stdout}");
    assert_eq!(get("policy_allow"), "1", "{stdout}");
    for k in ["route_add", "link_set", "policy_write", "resolv_write"] {
        assert_ne!(get(k), "0", "{k} succeeded inside the sandbox: {stdout}");
    }
    // CAP_NET_ADMIN is bit 12, CAP_NET_RAW bit 13 (SR-5).
    let caps = u64::from_str_radix(&get("cap_eff"), 16).unwrap();
    assert_eq!(caps & (1 << 12 | 1 << 13), 0, "{stdout}");
    eprintln!("network policy scenario: {:?}", started.elapsed());
    env.assert_nothing_left();
}

/// An allow and a deny of the same prefix are refused when the
/// configuration loads, naming both keys; nothing starts.
#[test]
fn an_equal_prefix_conflict_is_refused_at_load() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let env = Env::new("network-conflict", &default_image());
    env.write_config(
        "config.toml",
        &default_image(),
        "allow_egress = [\"10.99.0.5/32\"]\ndeny_egress = [\"10.99.0.5/32\"]",
    );
    let out = env.run(&["default", "--", "true"]);
    let stderr = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0));
    assert!(stderr.contains("allow_egress"), "{stderr}");
    assert!(stderr.contains("deny_egress"), "{stderr}");
    assert!(stderr.contains("10.99.0.5/32"), "{stderr}");
    assert!(env.processes().is_empty(), "{:?}", env.processes());
}

/// No task of process `pid` holds CAP_NET_ADMIN in any set (SR-5);
/// returns how many tasks were checked.
fn assert_no_network_administration(pid: &str) -> usize {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    let mut checked = 0;
    for task in tasks.flatten() {
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
            let mask = status
                .lines()
                .find_map(|l| l.strip_prefix(set)?.strip_prefix(':'))
                .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
                .unwrap_or_else(|| panic!("{set} missing: {status}"));
            assert_eq!(
                mask & (1 << 12),
                0,
                "task {:?} holds CAP_NET_ADMIN in {set}",
                task.path()
            );
        }
        checked += 1;
    }
    checked
}

/// The network links process `pid` sees, sorted.
fn links_of(pid: &str) -> Vec<String> {
    let dev = std::fs::read_to_string(format!("/proc/{pid}/net/dev")).unwrap();
    let mut links: Vec<String> = dev
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next())
        .map(|l| l.trim().to_owned())
        .collect();
    links.sort_unstable();
    links
}

/// The one process of this Domain whose command line names `role` (and
/// not `but`).
fn role_pid(env: &Env, role: &str, but: &str) -> String {
    let found: Vec<String> = env
        .processes()
        .into_iter()
        .filter(|p| p.contains(role) && !p.contains(but))
        .collect();
    assert_eq!(found.len(), 1, "{role}: {:?}", env.processes());
    found[0].split(':').next().unwrap().to_owned()
}

/// Spec 3.7 "Authority drop", seen from outside while a session runs: no
/// thread of the Runtime Supervisor holds CAP_NET_ADMIN in any set (SR-5),
/// and its enforcement namespace has no canary link left, only `lo` and
/// `tap0`. The routing daemon (spec 3.5), which serves the router and the
/// Git Sentry filter, holds no CAP_NET_ADMIN either and has no network
/// but its own down loopback.
fn assert_supervisor_attested(env: &Env) {
    let supervisor = role_pid(env, "__supervisor", "__wrapper");
    // The main thread and runsc's stderr reader.
    let checked = assert_no_network_administration(&supervisor);
    assert!(checked >= 2, "{checked} tasks");
    assert_eq!(links_of(&supervisor), ["lo", "tap0"]);
    // Run in place by its launch wrapper: the wrapper's command line.
    let daemon = role_pid(env, " __git-routing ", "__supervisor");
    // The main thread and the router's and filter's threads.
    let checked = assert_no_network_administration(&daemon);
    assert!(checked >= 3, "{checked} tasks");
    assert_eq!(links_of(&daemon), ["lo"]);
}

/// Spec 3.7 helper loss: slirp4netns killed with SIGKILL mid-session fails
/// the Domain closed: the session ends with a message naming the helper,
/// and the whole Domain is torn down and cleaned (store, traces). Before
/// the kill, the attested supervisor is checked from outside.
#[test]
fn a_killed_connectivity_helper_tears_the_domain_down() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let ns = peer("helper-loss");
    let env = Env::new("network-helper-loss", &default_image());
    // A repository, so the supervisor also runs the Git Sentry filter's
    // threads: the outside check below covers them.
    let init = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(&env.workspace)
        .status()
        .unwrap();
    assert!(init.success());
    support::chown_tree(&env.workspace);
    let child = ns
        .wrap(env.command(&[
            "default",
            "--",
            "sh",
            "-c",
            "touch /workspace/up; sleep 120",
        ]))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !env.workspace.join("up").exists() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the session did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_supervisor_attested(&env);
    let helper: Vec<String> = env
        .processes()
        .into_iter()
        .filter(|p| p.contains("slirp4netns") && !p.contains("__wrapper"))
        .collect();
    assert_eq!(helper.len(), 1, "{:?}", env.processes());
    let pid = helper[0].split(':').next().unwrap().to_owned();
    support::signal_through_pidfd(&pid, rustix::process::Signal::KILL);
    let killed = Instant::now();
    let out = child.wait_with_output().unwrap();
    let ended = killed.elapsed();
    let stderr = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("slirp4netns"), "{stderr}");
    assert!(
        ended < Duration::from_secs(30),
        "the session ended {ended:?} after the kill"
    );
    eprintln!("helper loss: session ended {ended:?} after SIGKILL");
    env.assert_nothing_left();
    env.assert_store_clean();
    // The supervisor stopped the sandbox and exited by itself: the trace
    // records runsc's end first, then the supervisor's (or, had the
    // session's end reached the coordinator before the supervisor's report,
    // the teardown's stop of a supervisor still exiting).
    let ends: Vec<String> = env
        .trace_actions()
        .into_iter()
        .filter(|a| a.ends_with("Ends") || a.contains("ParentDeath") || a == "ShutdownRuntime")
        .collect();
    assert!(
        ends == ["AttachedRunscEnds", "RuntimeSupervisorEnds"]
            || ends == ["AttachedRunscEnds", "ShutdownRuntime"],
        "{ends:?}"
    );
}

/// A DNS responder at `addr` in `ns`: it answers every query with its own
/// ID, QR set, NOERROR and one answer counted (the probe reads the header).
fn serve_dns(ns: &PeerNamespace, addr: &'static str) {
    let (ready_tx, ready) = std::sync::mpsc::channel();
    ns.spawn(move || {
        let socket = std::net::UdpSocket::bind(addr).unwrap();
        ready_tx.send(()).unwrap();
        let mut buf = [0u8; 512];
        while let Ok((n, from)) = socket.recv_from(&mut buf) {
            if n < 12 {
                continue;
            }
            let mut answer = buf[..n].to_vec();
            answer[2] |= 0x80; // QR
            answer[3] &= 0xf0; // RCODE 0
            answer[6..8].copy_from_slice(&1u16.to_be_bytes()); // ANCOUNT
            let _ = socket.send_to(&answer, from);
        }
    });
    ready.recv().unwrap();
}

/// `lazaret doctor --network PROFILE` probes the readiness targets from the
/// sandbox's view with the static probe and reports each against the
/// policy: all as expected exits 0; a permitted target that does not answer
/// is a problem (exit 1). Readiness never gates the launch itself.
#[test]
fn doctor_network_probes_the_readiness_targets_from_the_sandbox() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let ns = peer("doctor");
    serve_dns(&ns, "10.99.0.5:53");
    let env = Env::new("network-doctor", &default_image());
    let readiness = |permitted_port: u16| {
        format!(
            "allow_egress = [\"10.99.0.5/32\"]\n[profiles.default.readiness]\n\
             denied = [{{ address = \"10.99.0.6\", port = 8080 }}]\n\
             permitted = [{{ address = \"10.99.0.5\", port = {permitted_port} }}]\n\
             dns = [{{ resolver = \"10.99.0.5\", query = \"example.com\" }}]\n"
        )
    };
    env.write_config("config.toml", &default_image(), &readiness(8080));
    let out = ns
        .wrap(env.command(&["doctor", "--network", "default"]))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    assert!(
        stdout.contains("ok       permitted 10.99.0.5:8080"),
        "{stdout}"
    );
    assert!(
        stdout.contains("ok       denied 10.99.0.6:8080"),
        "{stdout}"
    );
    assert!(stdout.contains("No_route_to_host"), "{stdout}");
    assert!(
        stdout.contains("ok       dns 10.99.0.5 example.com"),
        "{stdout}"
    );
    assert!(stdout.contains("3 of 3 targets as expected"), "{stdout}");
    env.assert_nothing_left();

    // Nothing listens on port 9: the permitted target is refused.
    env.write_config("config.toml", &default_image(), &readiness(9));
    let out = ns
        .wrap(env.command(&["doctor", "--network", "default"]))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    assert!(
        stdout.contains("PROBLEM  permitted 10.99.0.5:9"),
        "{stdout}"
    );
    assert!(stdout.contains("2 of 3 targets as expected"), "{stdout}");
    env.assert_nothing_left();
}
