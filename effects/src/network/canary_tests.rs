//! The canary's sequence against recording fakes. The responders are the
//! real ones, listening on loopback: the fake canary namespace hands out
//! loopback listeners, and the fake sandbox init challenges them over
//! loopback as the real init does over the canary veth.
use std::cell::{Cell, RefCell};
use std::net::{Ipv4Addr, SocketAddr};

use super::*;
use crate::coordinator::nsys::RecordingNs;
use crate::network::authority::RecordingAuthority;
use crate::network::rtnl::RecordingRoutes;

const GENERATION: u64 = 41;

/// Loopback stand-ins for the canary namespace; `dead` has no responder.
#[derive(Default)]
struct LoopbackCanary {
    dead: Option<CanaryRole>,
    /// Where the allowed and the denied endpoint really listen.
    endpoints: RefCell<Vec<SocketAddr>>,
    draws: Cell<u8>,
}

impl LoopbackCanary {
    fn dead(role: CanaryRole) -> Self {
        Self {
            dead: Some(role),
            ..Self::default()
        }
    }

    fn endpoint(&self, role: CanaryRole) -> io::Result<SocketAddr> {
        let index = usize::from(role == CanaryRole::Denied);
        self.endpoints
            .borrow()
            .get(index)
            .copied()
            .ok_or_else(|| io::Error::other("the peer was not configured"))
    }
}

impl CanarySys for LoopbackCanary {
    fn configure_peer(&self, _peer: BorrowedFd<'_>) -> io::Result<[TcpListener; 2]> {
        let bind = || TcpListener::bind((Ipv4Addr::LOCALHOST, 0));
        let listeners = [bind()?, bind()?];
        for (listener, role) in listeners
            .iter()
            .zip([CanaryRole::Allowed, CanaryRole::Denied])
        {
            let endpoint = if self.dead == Some(role) {
                // A port nothing listens on any more.
                bind()?.local_addr()?
            } else {
                listener.local_addr()?
            };
            self.endpoints.borrow_mut().push(endpoint);
        }
        Ok(listeners)
    }

    fn challenge(&self, endpoint: SocketAddrV4, challenge: &Challenge) -> io::Result<[u8; 32]> {
        let role = if *endpoint.ip() == ALLOWED_CANARY {
            CanaryRole::Allowed
        } else {
            CanaryRole::Denied
        };
        exchange(self.endpoint(role)?, challenge)
    }

    fn random(&self) -> io::Result<[u8; 32]> {
        self.draws.set(self.draws.get().wrapping_add(1));
        Ok([self.draws.get(); 32])
    }
}

/// The sandbox's init as the fakes see it: the local checks as scripted,
/// the allowed canary challenged for real (over loopback).
struct FakeInit<'a> {
    canary: &'a LoopbackCanary,
    /// Report lines replacing the computed ones, by check name.
    overrides: Vec<(&'static str, String)>,
    requests: Vec<String>,
    answered: usize,
}

impl<'a> FakeInit<'a> {
    fn new(canary: &'a LoopbackCanary) -> Self {
        Self {
            canary,
            overrides: Vec::new(),
            requests: Vec::new(),
            answered: 0,
        }
    }

    fn with(mut self, check: &'static str, line: &str) -> Self {
        self.overrides.push((check, line.to_owned()));
        self
    }
}

impl InitLink for FakeInit<'_> {
    fn send(&mut self, request: &str) -> io::Result<()> {
        self.requests.push(request.to_owned());
        Ok(())
    }

    fn receive(&mut self) -> io::Result<Vec<String>> {
        let request = self
            .requests
            .get(self.answered)
            .cloned()
            .ok_or_else(|| io::Error::other("no request to answer"))?;
        self.answered += 1;
        let words: Vec<&str> = request.split_whitespace().collect();
        let mut lines: Vec<(&str, String)> = match words.first() {
            Some(&"attest") => {
                let mut nonce = [0u8; 32];
                hex::decode_to_slice(words.get(1).copied().unwrap_or(""), &mut nonce)
                    .map_err(io::Error::other)?;
                let answer = self
                    .canary
                    .challenge(SocketAddrV4::new(ALLOWED_CANARY, CANARY_PORT), &nonce)
                    .map(hex::encode)
                    .map_err(|e| e.to_string());
                vec![
                    ("tap0", "check=tap0 result=ok".to_owned()),
                    ("canary-link", "check=canary-link result=ok".to_owned()),
                    ("ipv6", "check=ipv6 result=ok".to_owned()),
                    ("capabilities", "check=capabilities result=ok".to_owned()),
                    (
                        "route-mutation",
                        "check=route-mutation result=ok errno=1".to_owned(),
                    ),
                    (
                        "allowed-canary",
                        match answer {
                            Ok(hex) => format!(
                                "check=allowed-canary result=answered response={hex} rtt_us=900"
                            ),
                            Err(e) => format!(
                                "check=allowed-canary result=failed error={}",
                                e.replace(' ', "_")
                            ),
                        },
                    ),
                    (
                        "denied-canary",
                        "check=denied-canary result=unreachable error=timed_out".to_owned(),
                    ),
                ]
            }
            Some(&"cleanup") => vec![
                (
                    "formerly-allowed",
                    "check=formerly-allowed result=unreachable error=timed_out".to_owned(),
                ),
                ("tap0", "check=tap0 result=ok".to_owned()),
            ],
            _ => return Err(io::Error::other("unexpected request")),
        };
        for (check, line) in &mut lines {
            if let Some((_, replacement)) = self.overrides.iter().find(|(c, _)| c == check) {
                line.clone_from(replacement);
            }
        }
        Ok(lines.into_iter().map(|(_, line)| line).collect())
    }
}

fn fake_routes() -> RecordingRoutes {
    RecordingRoutes::new()
        .with_link("lo", 1)
        .with_link("tap0", 2)
}

fn calls_starting(routes: &RecordingRoutes, prefix: &str) -> Vec<String> {
    routes
        .calls()
        .into_iter()
        .filter(|c| c.starts_with(prefix))
        .collect()
}

/// The canary is built in the spec's order, proven live from the
/// enforcement namespace over a temporary route, and the route is gone
/// again before the policy.
#[test]
fn the_canary_is_set_up_and_proven_live_before_the_policy() -> Result<(), CanaryError> {
    let routes = fake_routes();
    let ns = RecordingNs::default();
    let canary = LoopbackCanary::default();
    let network = set_up(&routes, &ns, &canary, GENERATION)?;
    assert_eq!(
        ns.calls(),
        vec!["create_network_namespace /proc/sys/net/ipv6/conf/all/disable_ipv6=1 /proc/sys/net/ipv6/conf/default/disable_ipv6=1".to_owned()]
    );
    let calls = routes.calls();
    let position = |call: &str| calls.iter().position(|c| c == call);
    let order = [
        "link_index tap0",
        "create_veth cnr0 cnr1",
        "add_address cnr0 10.137.55.1/32",
        "set_link_up cnr0",
        "add_route 10.137.55.0/29 dev cnr0 table 254 type 1 priority 0",
        "delete_route 10.137.55.0/29 dev cnr0 table 254 type 1 priority 0",
    ];
    let positions: Vec<Option<usize>> = order.iter().map(|c| position(c)).collect();
    assert!(positions.iter().all(Option::is_some), "{calls:#?}");
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{calls:#?}");
    // The temporary route is not left for the projection.
    let observed = routes.observe().map_err(|e| CanaryError::Link {
        step: "test observe",
        source: e,
    })?;
    assert!(observed.ipv4_routes.is_empty(), "{observed:?}");
    drop(network);
    Ok(())
}

/// A canary endpoint that does not answer refuses readiness, naming which
/// one, and the temporary route is removed all the same.
#[test]
fn a_dead_canary_refuses_and_names_the_endpoint() {
    for role in [CanaryRole::Allowed, CanaryRole::Denied] {
        let routes = fake_routes();
        let canary = LoopbackCanary::dead(role);
        match set_up(&routes, &RecordingNs::default(), &canary, GENERATION) {
            Err(CanaryError::Evidence(AttestationError::CanaryNotLive { role: named, .. })) => {
                assert_eq!(named, role);
            }
            other => panic!("{role:?}: expected CanaryNotLive, got {other:?}"),
        }
        assert_eq!(
            calls_starting(&routes, "delete_route"),
            vec!["delete_route 10.137.55.0/29 dev cnr0 table 254 type 1 priority 0".to_owned()]
        );
    }
}

/// The whole attestation: init authenticates the allowed canary through
/// the real responder, the veth goes by its record, init confirms the
/// canary gone, and network administration is dropped and confirmed.
#[test]
fn an_attested_canary_is_removed_exactly_and_authority_dropped() -> Result<(), CanaryError> {
    let routes = fake_routes();
    let canary = LoopbackCanary::default();
    let network = set_up(&routes, &RecordingNs::default(), &canary, GENERATION)?;
    let mut init = FakeInit::new(&canary);
    let authority = RecordingAuthority::default();
    network
        .request(&mut init, &canary)?
        .attest(&routes, &mut init, &canary, &authority)?;
    assert_eq!(init.requests.len(), 2);
    assert!(init.requests[0].starts_with("attest "));
    assert!(init.requests[1].starts_with("cleanup "));
    let calls = routes.calls();
    let deleted = calls
        .iter()
        .position(|c| c.starts_with("delete_link cnr0"))
        .expect("the veth is deleted");
    let listed = calls
        .iter()
        .position(|c| c == "link_names")
        .expect("links are listed after the cleanup");
    let down = calls
        .iter()
        .position(|c| c == "set_link_down cnr0")
        .expect("the veth is set down before its deletion");
    assert!(down < deleted && deleted < listed, "{calls:#?}");
    assert_eq!(
        *authority.calls.lock().expect("calls"),
        vec![
            "drop_network_administration",
            "network_administration_holders"
        ]
    );
    Ok(())
}

/// Whether an error is the one a case expects.
type Expected = fn(&CanaryError) -> bool;

/// Each failed predicate refuses before anything irreversible: a reached
/// denied canary or a forged allowed answer leaves the veth and the
/// authority as they were.
#[test]
fn a_failed_sandbox_view_refuses_before_the_cleanup() -> Result<(), CanaryError> {
    let cases: [(&str, &str, Expected); 3] = [
        (
            "denied-canary",
            "check=denied-canary result=reached response=",
            |e| {
                matches!(
                    e,
                    CanaryError::Evidence(AttestationError::DeniedCanaryReached)
                )
            },
        ),
        (
            "allowed-canary",
            "check=allowed-canary result=answered response=00 rtt_us=900",
            |e| {
                matches!(
                    e,
                    CanaryError::Evidence(AttestationError::AllowedCanary { .. })
                )
            },
        ),
        (
            "route-mutation",
            "check=route-mutation result=failed detail=accepted",
            |e| {
                matches!(
                    e,
                    CanaryError::Evidence(AttestationError::Failed {
                        check: "route-mutation",
                        ..
                    })
                )
            },
        ),
    ];
    for (check, line, expected) in cases {
        let routes = fake_routes();
        let canary = LoopbackCanary::default();
        let network = set_up(&routes, &RecordingNs::default(), &canary, GENERATION)?;
        let mut init = FakeInit::new(&canary).with(check, line);
        let authority = RecordingAuthority::default();
        let e = network
            .request(&mut init, &canary)?
            .attest(&routes, &mut init, &canary, &authority)
            .expect_err(check);
        assert!(expected(&e), "{check}: {e}");
        assert!(calls_starting(&routes, "delete_link").is_empty());
        assert!(authority.calls.lock().expect("calls").is_empty());
    }
    Ok(())
}

/// A veth whose shape changed since its creation is not deleted; the
/// formerly allowed canary still answering, and a task still holding
/// CAP_NET_ADMIN, each refuse.
#[test]
fn cleanup_and_drop_refuse_what_they_cannot_prove() -> Result<(), CanaryError> {
    // The shape changed: another MAC.
    let canary = LoopbackCanary::default();
    let created = fake_routes();
    let network = set_up(&created, &RecordingNs::default(), &canary, GENERATION)?;
    let mut record = created
        .link_record("cnr0")
        .map_err(|e| CanaryError::Link {
            step: "test record",
            source: e,
        })?
        .expect("the veth exists");
    record.mac[5] ^= 1;
    let changed = created.with_record(record);
    let mut init = FakeInit::new(&canary);
    let e = network
        .request(&mut init, &canary)?
        .attest(&changed, &mut init, &canary, &RecordingAuthority::default())
        .expect_err("changed shape");
    // Nothing was set down or deleted, and init was not asked again.
    assert!(changed
        .calls()
        .iter()
        .all(|c| !c.starts_with("set_link_down") && !c.starts_with("delete_link")));
    assert_eq!(init.requests.len(), 1);
    assert!(
        matches!(
            e,
            CanaryError::Link {
                source: RtnlError::LinkShapeChanged { .. },
                ..
            }
        ),
        "{e}"
    );

    let canary = LoopbackCanary::default();
    let routes = fake_routes();
    let network = set_up(&routes, &RecordingNs::default(), &canary, GENERATION)?;
    let mut init = FakeInit::new(&canary).with(
        "formerly-allowed",
        "check=formerly-allowed result=reached response=",
    );
    let e = network
        .request(&mut init, &canary)?
        .attest(&routes, &mut init, &canary, &RecordingAuthority::default())
        .expect_err("still reached");
    assert!(matches!(
        e,
        CanaryError::Evidence(AttestationError::FormerlyAllowedReached)
    ));

    let canary = LoopbackCanary::default();
    let routes = fake_routes();
    let network = set_up(&routes, &RecordingNs::default(), &canary, GENERATION)?;
    let authority = RecordingAuthority {
        holders: vec!["4242:CapEff".to_owned()],
        ..RecordingAuthority::default()
    };
    let mut init = FakeInit::new(&canary);
    let e = network
        .request(&mut init, &canary)?
        .attest(&routes, &mut init, &canary, &authority)
        .expect_err("still held");
    assert!(matches!(e, CanaryError::StillHeld(ref h) if h == &["4242:CapEff".to_owned()]));

    // A holder that is gone at the next listing was a thread finishing
    // its exit (the veth's deleting thread): the drop is confirmed.
    let canary = LoopbackCanary::default();
    let routes = fake_routes();
    let network = set_up(&routes, &RecordingNs::default(), &canary, GENERATION)?;
    let authority = RecordingAuthority {
        holders: vec!["4243:CapEff".to_owned()],
        exiting_after: Some(1),
        ..RecordingAuthority::default()
    };
    let mut init = FakeInit::new(&canary);
    network
        .request(&mut init, &canary)?
        .attest(&routes, &mut init, &canary, &authority)?;
    let listings = authority
        .calls
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .filter(|c| **c == "network_administration_holders")
        .count();
    assert_eq!(listings, 2);
    Ok(())
}

#[test]
fn reports_are_read_to_their_end_line_within_bounds() -> io::Result<()> {
    assert_eq!(complete_report(b"check=a result=ok\nche")?, None);
    assert_eq!(
        complete_report(b"check=a result=ok\nend\n")?,
        Some(vec!["check=a result=ok".to_owned()])
    );
    let long = "check=x result=ok\n".repeat(REPORT_LINES_MAX + 1);
    assert!(complete_report(long.as_bytes()).is_err());
    assert!(complete_report(b"\xff\n").is_err());

    // Over a real pipe, in two writes; then EOF is an error.
    let (read, write) = rustix::pipe::pipe()?;
    rustix::io::write(&write, b"check=tap0 result=ok\n")?;
    rustix::io::write(&write, b"end\n")?;
    assert_eq!(
        read_report(read.as_fd(), Duration::from_secs(1))?,
        vec!["check=tap0 result=ok".to_owned()]
    );
    drop(write);
    let eof = read_report(read.as_fd(), Duration::from_secs(1)).expect_err("EOF");
    assert_eq!(eof.kind(), io::ErrorKind::UnexpectedEof);
    // Nothing within the deadline.
    let (read, _write) = rustix::pipe::pipe()?;
    let silent = read_report(read.as_fd(), Duration::from_millis(20)).expect_err("timeout");
    assert_eq!(silent.kind(), io::ErrorKind::TimedOut);
    Ok(())
}
