//! The known-live canary of the enforcement namespace (spec 3.7 evidence
//! table: "Known-live control", "Imported behavior", "Exact cleanup",
//! "Cleanup observation", "Authority drop").
//!
//! The Runtime Supervisor, inside the enforcement namespace and before the
//! policy is installed:
//! 1. creates a short-lived canary namespace (IPv6 off) and the veth
//!    `cnr0` ↔ `cnr1` into it, keeping `cnr0`'s creation record;
//!    `cnr0` gets 10.137.55.1/32, `cnr1` the two canary endpoints
//!    10.137.55.2/29 and .3/29, each with a responder on TCP port 7;
//! 2. checks both endpoints live from its own stack: each answers an
//!    independent challenge with this generation's HMAC
//!    (`lazaret_runtime::network::attestation`), over a temporary route
//!    that is removed again before the policy goes in.
//!
//! The policy then routes 10.137.55.2/32 over `cnr0` under the aggregate
//! canary deny. Once runsc runs, [`CanaryNetwork::attest`] asks the
//! sandbox's static init for its view (it must authenticate the allowed
//! endpoint, not reach the denied one, see `tap0` and `cnr0`, no IPv6,
//! hold no network administration and fail to add a route), removes the
//! canary exactly, asks init again (the formerly allowed endpoint is gone,
//! `tap0` is not) and drops the supervisor's network administration.
use std::io::{self, Read, Write};
use std::net::{SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use lazaret_runtime::network::attestation::{
    attest_request, canary_answer, cleanup_request, is_canary_answer, judge_cleanup,
    judge_denied_untouched, judge_imported, judge_ipv6_unchanged, judge_remaining_links,
    AttestationError, CanaryKey, CanaryRole, Challenge, CHALLENGE_LEN, REPORT_END,
    REPORT_LINES_MAX,
};
use lazaret_runtime::network::topology::{
    ALLOWED_CANARY, CANARY_DEVICE, CANARY_PEER_DEVICE, CANARY_PORT, DENIED_CANARY,
    ENFORCEMENT_ENDPOINT, TAP_DEVICE,
};
use lazaret_runtime::network::{canary_probe_route, LinkRecord};

use super::authority::AuthoritySys;
use super::rtnl::{NetlinkRoutes, RouteSys, RtnlError};
use crate::coordinator::nsys::NamespaceSys;
use crate::crash_point::{crash_point, fault};

/// How often the authority drop's confirmation lists the tasks before a
/// holder counts (`HOLDERS_SETTLE_PAUSE` apart: at most 50 ms).
const HOLDERS_SETTLE_ATTEMPTS: u32 = 50;
/// See [`HOLDERS_SETTLE_ATTEMPTS`].
const HOLDERS_SETTLE_PAUSE: Duration = Duration::from_millis(1);

/// The sysctls that turn IPv6 off in a new network namespace, written
/// before anything exists in it (spec 3.7), as `(path, value)`.
pub fn ipv6_off() -> [(&'static Path, &'static str); 2] {
    [
        (Path::new("/proc/sys/net/ipv6/conf/all/disable_ipv6"), "1"),
        (
            Path::new("/proc/sys/net/ipv6/conf/default/disable_ipv6"),
            "1",
        ),
    ]
}

/// A challenge's connect, write and read each get this long (the canary
/// answers in milliseconds on an idle veth).
const CHALLENGE_TIMEOUT: Duration = Duration::from_secs(2);
/// One responder answers at most this many connections (a launch makes two
/// or three).
const RESPONDER_CONNECTIONS_MAX: usize = 64;
/// How long init gets for one report round: its longest wait (at most
/// `UNREACHABLE_WAIT_MAX_MS`, 10 s) and a challenge's 2 s, with margin.
const REPORT_TIMEOUT: Duration = Duration::from_secs(15);
/// At most this many bytes in one report.
const REPORT_BYTES_MAX: usize = 8 * 1024;

/// Why the canary could not attest the namespace: one variant per step.
#[derive(Debug, thiserror::Error)]
pub enum CanaryError {
    #[error("the canary needs {TAP_DEVICE} in the enforcement namespace, which has none")]
    NoTap0,
    #[error("creating the canary network namespace (IPv6 off): {0}")]
    Namespace(#[source] io::Error),
    #[error("{step}: {source}")]
    Link {
        step: &'static str,
        #[source]
        source: RtnlError,
    },
    #[error("configuring the canary namespace (addresses, links, responders): {0}")]
    Peer(#[source] io::Error),
    #[error("starting the canary responders: {0}")]
    Responders(#[source] io::Error),
    #[error("drawing a random canary key or challenge: {0}")]
    Random(#[source] io::Error),
    #[error("spec 3.7 {0}")]
    Evidence(#[from] AttestationError),
    #[error("imported behavior: the sandbox's init did not answer the {round} round: {source}")]
    Init {
        round: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("authority drop: dropping CAP_NET_ADMIN: {0}")]
    Drop(#[source] io::Error),
    #[error("authority drop: tasks of the supervisor still hold CAP_NET_ADMIN: {0:?}")]
    StillHeld(Vec<String>),
}

fn link(step: &'static str) -> impl FnOnce(RtnlError) -> CanaryError {
    move |source| CanaryError::Link { step, source }
}

/// The canary's kernel work outside rtnetlink.
pub trait CanarySys {
    /// In a short-lived thread inside `peer`: `lo` and the peer link up
    /// with both canary endpoints, and a listener on each (allowed, then
    /// denied). The caller stays where it was.
    fn configure_peer(&self, peer: BorrowedFd<'_>) -> io::Result<[TcpListener; 2]>;
    /// One challenge to `endpoint` from the caller's namespace; its answer.
    fn challenge(&self, endpoint: SocketAddrV4, challenge: &Challenge) -> io::Result<[u8; 32]>;
    /// 32 random bytes (a key or a challenge).
    fn random(&self) -> io::Result<[u8; 32]>;
}

/// The real kernel.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealCanary;

impl CanarySys for RealCanary {
    fn configure_peer(&self, peer: BorrowedFd<'_>) -> io::Result<[TcpListener; 2]> {
        std::thread::scope(|scope| {
            std::thread::Builder::new()
                .spawn_scoped(scope, || -> io::Result<[TcpListener; 2]> {
                    rustix::thread::move_into_link_name_space(
                        peer,
                        Some(rustix::thread::LinkNameSpaceType::Network),
                    )?;
                    let routes = NetlinkRoutes;
                    let configure = || -> Result<(), RtnlError> {
                        routes.set_link_up("lo")?;
                        for endpoint in [ALLOWED_CANARY, DENIED_CANARY] {
                            routes.add_address(CANARY_PEER_DEVICE, endpoint, 29)?;
                        }
                        routes.set_link_up(CANARY_PEER_DEVICE)
                    };
                    configure().map_err(io::Error::other)?;
                    // Sockets keep the namespace they were made in.
                    Ok([
                        TcpListener::bind(SocketAddrV4::new(ALLOWED_CANARY, CANARY_PORT))?,
                        TcpListener::bind(SocketAddrV4::new(DENIED_CANARY, CANARY_PORT))?,
                    ])
                })?
                .join()
                .map_err(|_| io::Error::other("the canary namespace thread panicked"))?
        })
    }

    fn challenge(&self, endpoint: SocketAddrV4, challenge: &Challenge) -> io::Result<[u8; 32]> {
        exchange(endpoint.into(), challenge)
    }

    fn random(&self) -> io::Result<[u8; 32]> {
        crate::coordinator::session::random_bytes::<32>()
    }
}

/// One challenge over TCP to `endpoint` and its 32-byte answer, each step
/// within [`CHALLENGE_TIMEOUT`].
fn exchange(endpoint: std::net::SocketAddr, challenge: &Challenge) -> io::Result<[u8; 32]> {
    let mut stream = TcpStream::connect_timeout(&endpoint, CHALLENGE_TIMEOUT)?;
    stream.set_read_timeout(Some(CHALLENGE_TIMEOUT))?;
    stream.set_write_timeout(Some(CHALLENGE_TIMEOUT))?;
    stream.write_all(challenge)?;
    let mut answer = [0u8; 32];
    stream.read_exact(&mut answer)?;
    Ok(answer)
}

/// The responder threads; dropping them closes their listeners.
struct Responders {
    stop: Option<OwnedFd>,
    threads: Vec<JoinHandle<()>>,
    /// Connections the denied endpoint accepted, ever.
    denied_accepted: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Responders {
    fn start(listeners: [TcpListener; 2], key: &CanaryKey, generation: u64) -> io::Result<Self> {
        let (stop_read, stop) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        let mut responders = Self {
            stop: Some(stop),
            threads: Vec::with_capacity(2),
            denied_accepted: std::sync::Arc::default(),
        };
        for (listener, role) in listeners
            .into_iter()
            .zip([CanaryRole::Allowed, CanaryRole::Denied])
        {
            listener.set_nonblocking(true)?;
            let stop = stop_read.try_clone()?;
            let key = key.clone();
            let accepted = match role {
                CanaryRole::Denied => Some(std::sync::Arc::clone(&responders.denied_accepted)),
                CanaryRole::Allowed => None,
            };
            responders.threads.push(
                std::thread::Builder::new()
                    .name(format!("canary-{role:?}"))
                    .spawn(move || {
                        respond(
                            &listener,
                            &stop,
                            &key,
                            generation,
                            role,
                            accepted.as_deref(),
                        )
                    })?,
            );
        }
        Ok(responders)
    }
}

impl Drop for Responders {
    /// Closing the stop pipe wakes every responder; each returns and its
    /// listener closes with it.
    fn drop(&mut self) {
        drop(self.stop.take());
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// Answers challenges on `listener` until `stop` is closed, counting the
/// connections in `accepted` when given.
fn respond(
    listener: &TcpListener,
    stop: &OwnedFd,
    key: &CanaryKey,
    generation: u64,
    role: CanaryRole,
    accepted: Option<&std::sync::atomic::AtomicUsize>,
) {
    use rustix::event::{poll, PollFd, PollFlags};
    for _ in 0..RESPONDER_CONNECTIONS_MAX {
        let mut fds = [
            PollFd::new(listener, PollFlags::IN),
            PollFd::new(stop, PollFlags::IN),
        ];
        match poll(&mut fds, None) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(_) => return,
        }
        if !fds[1].revents().is_empty() {
            return;
        }
        match listener.accept() {
            Ok((stream, _)) => {
                if let Some(count) = accepted {
                    count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
                let _ = answer(stream, key, generation, role);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => return,
        }
    }
}

fn answer(
    mut stream: TcpStream,
    key: &CanaryKey,
    generation: u64,
    role: CanaryRole,
) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(CHALLENGE_TIMEOUT))?;
    stream.set_write_timeout(Some(CHALLENGE_TIMEOUT))?;
    let mut challenge = [0u8; CHALLENGE_LEN];
    stream.read_exact(&mut challenge)?;
    // A dead canary, for the fault suite: the connection closes unanswered.
    if role == CanaryRole::Allowed && fault!("mute-allowed-canary") {
        return Ok(());
    }
    stream.write_all(&canary_answer(key, generation, role, &challenge))
}

/// Requests to, and reports from, the sandbox's init.
pub trait InitLink {
    /// Sends one request line.
    fn send(&mut self, request: &str) -> io::Result<()>;
    /// The next report's lines, without the final [`REPORT_END`].
    fn receive(&mut self) -> io::Result<Vec<String>>;
}

/// init's stdin (the lifetime pipe, which also carries requests) and its
/// stdout (reports).
#[derive(Debug)]
pub struct InitPipes<'a> {
    pub request: BorrowedFd<'a>,
    pub report: BorrowedFd<'a>,
}

impl InitLink for InitPipes<'_> {
    fn send(&mut self, request: &str) -> io::Result<()> {
        // A request is far below PIPE_BUF, so the write is whole or fails.
        let written = rustix::io::write(self.request, request.as_bytes())?;
        if written == request.len() {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("{written} of {} request bytes written", request.len()),
            ))
        }
    }

    fn receive(&mut self) -> io::Result<Vec<String>> {
        read_report(self.report, REPORT_TIMEOUT)
    }
}

/// Reads lines from `report` until [`REPORT_END`], within `timeout`,
/// [`REPORT_BYTES_MAX`] and [`REPORT_LINES_MAX`].
fn read_report(report: BorrowedFd<'_>, timeout: Duration) -> io::Result<Vec<String>> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let deadline = Instant::now() + timeout;
    let mut text = Vec::new();
    loop {
        if let Some(lines) = complete_report(&text)? {
            return Ok(lines);
        }
        if text.len() > REPORT_BYTES_MAX {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a report over {REPORT_BYTES_MAX} bytes"),
            ));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no complete report within {timeout:?}"),
            ));
        }
        let wait = Timespec {
            tv_sec: i64::try_from(left.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(left.subsec_nanos()),
        };
        let mut fds = [PollFd::new(&report, PollFlags::IN)];
        match poll(&mut fds, Some(&wait)) {
            Ok(0) | Err(rustix::io::Errno::INTR) => continue,
            Ok(_) => {}
            Err(e) => return Err(e.into()),
        }
        let mut buffer = [0u8; 1024];
        let n = rustix::io::read(report, &mut buffer)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "init closed its report pipe",
            ));
        }
        text.extend_from_slice(&buffer[..n]);
    }
}

/// The report's lines once `text` holds a line [`REPORT_END`].
fn complete_report(text: &[u8]) -> io::Result<Option<Vec<String>>> {
    let text = std::str::from_utf8(text)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "a report that is not UTF-8"))?;
    let mut lines = Vec::new();
    for line in text.split_inclusive('\n') {
        let Some(line) = line.strip_suffix('\n') else {
            return Ok(None);
        };
        if line == REPORT_END {
            return Ok(Some(lines));
        }
        if lines.len() == REPORT_LINES_MAX {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a report over {REPORT_LINES_MAX} lines"),
            ));
        }
        lines.push(line.to_owned());
    }
    Ok(None)
}

/// The canary while it lives: its key, its link's creation record, the
/// canary namespace and the responders.
pub struct CanaryNetwork {
    key: CanaryKey,
    generation: u64,
    record: LinkRecord,
    tap0_index: u32,
    peer: OwnedFd,
    responders: Responders,
}

/// The canary with its imported-behavior request on its way to init: the
/// request is written to init's stdin before runsc starts, so init takes
/// it up the moment it runs.
#[derive(Debug)]
pub struct RequestedCanary {
    canary: CanaryNetwork,
    allowed: Challenge,
}

impl std::fmt::Debug for CanaryNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CanaryNetwork")
            .field("generation", &self.generation)
            .field("record", &self.record)
            .field("tap0_index", &self.tap0_index)
            .finish_non_exhaustive()
    }
}

/// Spec 3.7 "Known-live control": sets the canary up in the caller's
/// (enforcement) namespace and proves both endpoints live before the
/// policy is installed.
pub fn set_up<R: RouteSys, N: NamespaceSys, C: CanarySys>(
    routes: &R,
    ns: &N,
    canary: &C,
    generation: u64,
) -> Result<CanaryNetwork, CanaryError> {
    let _span = tracing::info_span!("CanaryKnownLive").entered();
    let tap0_index = routes
        .link_index(TAP_DEVICE)
        .map_err(link("finding tap0"))?
        .ok_or(CanaryError::NoTap0)?;
    let peer = ns
        .create_network_namespace(&ipv6_off())
        .map_err(CanaryError::Namespace)?;
    let record = routes
        .create_veth(CANARY_DEVICE, CANARY_PEER_DEVICE, peer.as_fd())
        .map_err(link("creating the canary veth"))?;
    routes
        .add_address(CANARY_DEVICE, ENFORCEMENT_ENDPOINT, 32)
        .map_err(link("addressing the canary link"))?;
    routes
        .set_link_up(CANARY_DEVICE)
        .map_err(link("setting the canary link up"))?;
    let listeners = canary
        .configure_peer(peer.as_fd())
        .map_err(CanaryError::Peer)?;
    let key = CanaryKey::new(canary.random().map_err(CanaryError::Random)?);
    let responders =
        Responders::start(listeners, &key, generation).map_err(CanaryError::Responders)?;
    let network = CanaryNetwork {
        key,
        generation,
        record,
        tap0_index,
        peer,
        responders,
    };
    network.known_live(routes, canary)?;
    Ok(network)
}

impl CanaryNetwork {
    /// Both endpoints answer an independent challenge from this namespace,
    /// over a temporary route removed again afterwards.
    fn known_live<R: RouteSys, C: CanarySys>(
        &self,
        routes: &R,
        canary: &C,
    ) -> Result<(), CanaryError> {
        let probe = canary_probe_route();
        routes
            .add_route(&probe)
            .map_err(link("adding the known-live probe route"))?;
        let checked = [
            (CanaryRole::Allowed, ALLOWED_CANARY),
            (CanaryRole::Denied, DENIED_CANARY),
        ]
        .into_iter()
        .try_for_each(|(role, endpoint)| {
            let challenge = canary.random().map_err(CanaryError::Random)?;
            let answer = canary
                .challenge(SocketAddrV4::new(endpoint, CANARY_PORT), &challenge)
                .map_err(|e| AttestationError::CanaryNotLive {
                    role,
                    detail: if e.kind() == io::ErrorKind::UnexpectedEof {
                        "it closed the connection without an answer".to_owned()
                    } else {
                        e.to_string()
                    },
                })?;
            if !is_canary_answer(&self.key, self.generation, role, &challenge, &answer) {
                return Err(AttestationError::CanaryNotLive {
                    role,
                    detail: "its answer is not this generation's canary answer".to_owned(),
                }
                .into());
            }
            Ok(())
        });
        routes
            .delete_route(&probe)
            .map_err(link("removing the known-live probe route"))?;
        checked
    }

    /// Sends init the imported-behavior request (independent challenges
    /// for both endpoints).
    pub fn request<L: InitLink, C: CanarySys>(
        self,
        init: &mut L,
        canary: &C,
    ) -> Result<RequestedCanary, CanaryError> {
        let allowed = canary.random().map_err(CanaryError::Random)?;
        let denied = canary.random().map_err(CanaryError::Random)?;
        init.send(&attest_request(&allowed, &denied))
            .map_err(|source| CanaryError::Init {
                round: "imported behavior",
                source,
            })?;
        Ok(RequestedCanary {
            canary: self,
            allowed,
        })
    }
}

impl RequestedCanary {
    /// Spec 3.7 "Imported behavior" through "Authority drop", once runsc
    /// runs: init's view, the exact cleanup with init's view after it, and
    /// the irreversible drop of CAP_NET_ADMIN. Any failed predicate
    /// refuses.
    pub fn attest<R: RouteSys + Sync, L: InitLink, C: CanarySys, A: AuthoritySys>(
        self,
        routes: &R,
        init: &mut L,
        canary: &C,
        authority: &A,
    ) -> Result<(), CanaryError> {
        let _span = tracing::info_span!("CanaryAttest").entered();
        let Self {
            canary: network,
            allowed,
        } = self;
        let report = init.receive().map_err(|source| CanaryError::Init {
            round: "imported behavior",
            source,
        })?;
        let evidence = judge_imported(&report, &network.key, network.generation, &allowed)?;
        crash_point!(Rs, "attest", "after-imported", "CanaryAttest");
        let gone = canary.random().map_err(CanaryError::Random)?;
        network.clean_up(routes, || {
            init.send(&cleanup_request(&gone, &evidence))?;
            init.receive()
        })?;
        crash_point!(Rs, "attest", "after-cleanup", "CanaryAttest");
        authority
            .drop_network_administration()
            .map_err(CanaryError::Drop)?;
        // A thread just joined (the veth's deleting thread above) can still
        // be listed, with its sets, while the kernel finishes its exit: it
        // runs no more user code, and it is gone within microseconds. Only
        // a holder that stays through the settling time fails.
        let mut holders = Vec::new();
        for attempt in 0..HOLDERS_SETTLE_ATTEMPTS {
            if attempt > 0 {
                std::thread::sleep(HOLDERS_SETTLE_PAUSE);
            }
            holders = authority
                .network_administration_holders()
                .map_err(CanaryError::Drop)?;
            if holders.is_empty() {
                return Ok(());
            }
        }
        Err(CanaryError::StillHeld(holders))
    }
}

impl CanaryNetwork {
    /// Spec 3.7 "Exact cleanup" and "Cleanup observation": the responders
    /// and their listeners end; the veth, if its current shape is its
    /// creation record, is set down (it passes nothing from then on) and
    /// deleted by that record; meanwhile `observe_from_sandbox` runs init's
    /// cleanup round, whose report is judged. Then the canary namespace's
    /// last descriptor closes (closed before, the namespace would take the
    /// pair down on its own, racing the shape comparison) and the
    /// namespace is observed: only `lo` and the same `tap0`, still no IPv6.
    ///
    /// The deletion's cost is the kernel's RCU grace periods, idle time
    /// that the sandbox's bounded wait for the formerly allowed endpoint
    /// overlaps; the wait starts only once the link is down.
    fn clean_up<R: RouteSys + Sync>(
        self,
        routes: &R,
        observe_from_sandbox: impl FnOnce() -> io::Result<Vec<String>>,
    ) -> Result<(), CanaryError> {
        let Self {
            record,
            tap0_index,
            peer,
            responders,
            ..
        } = self;
        // Joined: the count is final. Spec 3.7 "Imported behavior" from the
        // responder's side: the sandbox never reached the denied endpoint,
        // not even after init's window closed.
        let denied_accepted = std::sync::Arc::clone(&responders.denied_accepted);
        drop(responders);
        judge_denied_untouched(denied_accepted.load(std::sync::atomic::Ordering::SeqCst))?;
        let current = routes
            .link_record(&record.name)
            .map_err(link("reading the canary veth's shape"))?;
        if current.as_ref() != Some(&record) {
            return Err(CanaryError::Link {
                step: "comparing the canary veth with its creation record",
                source: RtnlError::LinkShapeChanged {
                    expected: Box::new(record),
                    found: current.map(Box::new),
                },
            });
        }
        routes
            .set_link_down(&record.name)
            .map_err(link("setting the canary veth down"))?;
        let (deleted, observed) = std::thread::scope(|scope| {
            let deleting =
                std::thread::Builder::new().spawn_scoped(scope, || routes.delete_link(&record));
            let observed = observe_from_sandbox();
            let deleted = match deleting {
                Ok(thread) => thread.join().unwrap_or_else(|_| {
                    Err(RtnlError::Unexpected {
                        request: "RTM_DELLINK",
                        detail: "the deleting thread panicked".to_owned(),
                    })
                }),
                // No thread: delete here, after the observation.
                Err(_) => routes.delete_link(&record),
            };
            (deleted, observed)
        });
        deleted.map_err(link("deleting the canary veth by its creation record"))?;
        let report = observed.map_err(|source| CanaryError::Init {
            round: "cleanup observation",
            source,
        })?;
        judge_cleanup(&report)?;
        drop(peer);
        let links = routes
            .link_names()
            .map_err(link("listing links after the canary cleanup"))?;
        judge_remaining_links(&links, tap0_index)?;
        let observed = routes
            .observe()
            .map_err(link("observing IPv6 after the canary cleanup"))?;
        judge_ipv6_unchanged(&observed)?;
        Ok(())
    }
}

#[cfg(test)]
#[path = "canary_tests.rs"]
mod tests;
