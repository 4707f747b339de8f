//! lazaret-init: the sandbox's PID 1 (spec 3.1). A static binary with no
//! ELF interpreter (built by cli/build.rs with `+crt-static` and a static
//! relocation model); it uses only std and a few glibc calls.
//!
//! - It reaps every child (HOST-NOTES: a non-reaping PID 1 piles up zombies
//!   and `runsc delete -force` times out).
//! - Its stdin is the Runtime Supervisor's lifetime pipe: EOF means RS wants
//!   the sandbox stopped (or RS is gone), so init exits and `runsc run`
//!   deletes the container.
//! - SIGTERM ends it too (`runsc kill`).
//! - Lines on that pipe are RS requests for the in-sandbox network evidence
//!   of spec 3.7 (evidence rows "Imported behavior" and "Cleanup
//!   observation"); init is the static, closed-environment, non-user root
//!   the rows ask for (uid 0, no capabilities, `noNewPrivileges`). Its
//!   reports go to stdout, a pipe RS reads.
//!
//! Requests are ASCII words separated by single spaces, one per line of at
//! most `LINE_MAX` bytes; init answers at most `COMMANDS_MAX` in its life
//! and reads later lines without answering. NONCE is 64 lowercase hex
//! digits (32 bytes), WAIT_MS a decimal 1..=10000: the least time an
//! endpoint that must stay unreachable is given.
//!
//! - `attest NONCE_A NONCE_D WAIT_MS` ("Imported behavior") reports, in
//!   this order:
//!   `check=tap0 result=ok|failed [detail=...]`,
//!   `check=canary-link result=ok|failed [detail=...]`,
//!   `check=ipv6 result=ok|failed [detail=...]`,
//!   `check=capabilities result=ok|failed [detail=...]`,
//!   `check=route-mutation result=ok errno=N` or `result=failed detail=...`,
//!   `check=allowed-canary result=answered response=HEX rtt_us=N` or
//!   `result=failed error=...`,
//!   `check=denied-canary result=unreachable wait_ms=N error=...`,
//!   `result=refused wait_ms=N error=...` or `result=reached wait_ms=N
//!   response=HEX`; the denied endpoint is given `RTT_FACTOR` times the
//!   allowed one's round trip, at least WAIT_MS, from its own connect.
//! - `cleanup NONCE WAIT_MS` ("Cleanup observation") reports
//!   `check=formerly-allowed result=unreachable|refused|reached wait_ms=N
//!   ...`, then the `check=tap0` line. Only `unreachable` (the connect still
//!   pending at the deadline) passes.
//!
//! Every reply ends with the line `end`; a request init cannot parse gets
//! `error=TEXT` and `end`. Field values never hold spaces or control
//! characters.
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::raw::{c_long, c_void};
use std::thread::ScopedJoinHandle;
use std::time::{Duration, Instant};

const SIGTERM: i32 = 15;
const ECHILD: i32 = 10;
const EAFNOSUPPORT: i32 = 97;

/// A request line longer than this is refused (a request is < 200 bytes).
const LINE_MAX: usize = 512;
/// Init answers at most this many request lines in its life.
const COMMANDS_MAX: u32 = 16;
/// A failure detail lists at most this many items.
const LISTING_MAX: usize = 8;

// The fixed v1 topology (spec 3.7).
const SANDBOX_LINK: &str = "tap0";
const SANDBOX_ADDRESS: Ipv4Addr = Ipv4Addr::new(10, 137, 54, 100);
const CANARY_LINK: &str = "cnr0";
const CANARY_ADDRESS: Ipv4Addr = Ipv4Addr::new(10, 137, 55, 1);
const ALLOWED_CANARY: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 137, 55, 2), 7);
const DENIED_CANARY: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 137, 55, 3), 7);

/// A canary's answer (and the allowed canary's connect and write) gets
/// this long.
const CANARY_TIMEOUT: Duration = Duration::from_secs(2);
/// The denied endpoint gets this many times the allowed one's round trip
/// (RS gives the formerly allowed one the same; spec 3.7 readiness cost is
/// docs/network.md "Cost").
const RTT_FACTOR: u32 = 2;
/// No unreachability wait is longer than this.
const WAIT_MAX: Duration = Duration::from_secs(10);
/// A netlink receive gives up after this many seconds, an exchange after
/// `NETLINK_RECEIVES_MAX` receives.
const NETLINK_TIMEOUT_SECS: c_long = 2;
const NETLINK_RECEIVES_MAX: usize = 64;
const NETLINK_BUFFER: usize = 64 * 1024;

// Linux ABI: include/uapi/linux/{netlink,rtnetlink,if_addr,if_link}.h.
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
const AF_NETLINK: i32 = 16;
const SOCK_RAW: i32 = 3;
const SOCK_CLOEXEC: i32 = 0o2_000_000;
const NETLINK_ROUTE: i32 = 0;
const SOL_SOCKET: i32 = 1;
const SO_RCVTIMEO: i32 = 20;
const NLMSG_HDRLEN: usize = 16;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const NLM_F_DUMP: u16 = 0x300;
const NLA_TYPE_MASK: u16 = 0x3fff;
const RTM_NEWLINK: u16 = 16;
const RTM_GETLINK: u16 = 18;
const RTM_NEWADDR: u16 = 20;
const RTM_GETADDR: u16 = 22;
const RTM_NEWROUTE: u16 = 24;
const RTM_GETROUTE: u16 = 26;
const IFLA_IFNAME: u16 = 3;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const IFF_LOOPBACK: u32 = 0x8;
const RT_TABLE_MAIN: u8 = 254;
const RTPROT_BOOT: u8 = 3;
const RT_SCOPE_LINK: u8 = 253;
const RTN_UNICAST: u8 = 1;
const CAP_NET_ADMIN: u32 = 12;

extern "C" {
    fn waitpid(pid: i32, status: *mut i32, options: i32) -> i32;
    fn signal(signum: i32, handler: extern "C" fn(i32)) -> usize;
    fn _exit(code: i32) -> !;
    fn socket(domain: i32, kind: i32, protocol: i32) -> i32;
    fn setsockopt(fd: i32, level: i32, name: i32, value: *const c_void, len: u32) -> i32;
    fn send(fd: i32, buf: *const c_void, len: usize, flags: i32) -> isize;
    fn recv(fd: i32, buf: *mut c_void, len: usize, flags: i32) -> isize;
}

/// glibc's `struct timeval` (time_t and suseconds_t are C longs on Linux).
#[repr(C)]
struct Timeval {
    tv_sec: c_long,
    tv_usec: c_long,
}

extern "C" fn on_term(_signal: i32) {
    // SAFETY: _exit is async-signal-safe and takes no pointers.
    unsafe { _exit(128 + SIGTERM) }
}

fn main() {
    // SAFETY: installs a handler that only calls the async-signal-safe
    // _exit; the function pointer stays valid for the process's life.
    unsafe {
        signal(SIGTERM, on_term);
    }
    std::thread::spawn(|| {
        serve_requests();
        std::process::exit(0);
    });
    loop {
        let mut status = 0;
        // SAFETY: `status` is a valid, writable i32 for the whole call.
        let reaped = unsafe { waitpid(-1, &mut status, 0) };
        if reaped < 0 && io::Error::last_os_error().raw_os_error() == Some(ECHILD) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Reads the lifetime pipe until EOF (or an error), answering each line.
fn serve_requests() {
    let mut stdin = io::stdin().lock();
    let mut buf = [0u8; 256];
    let mut line = Vec::with_capacity(LINE_MAX);
    let mut overlong = false;
    let mut answered = 0;
    loop {
        let read = match stdin.read(&mut buf) {
            Ok(0) => return,
            Ok(read) => read,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        for &byte in buf.get(..read).unwrap_or_default() {
            if byte != b'\n' {
                if line.len() < LINE_MAX {
                    line.push(byte);
                } else {
                    overlong = true;
                }
                continue;
            }
            if answered < COMMANDS_MAX {
                answered += 1;
                let report = if overlong {
                    vec![error("line-too-long")]
                } else {
                    answer(&line)
                };
                let reply = reply(&report);
                let mut stdout = io::stdout().lock();
                // A failed write means RS is gone; EOF on stdin follows.
                let _ = stdout
                    .write_all(reply.as_bytes())
                    .and_then(|()| stdout.flush());
            }
            line.clear();
            overlong = false;
        }
    }
}

/// The report lines for one request line.
fn answer(line: &[u8]) -> Vec<String> {
    let Ok(text) = std::str::from_utf8(line) else {
        return vec![error("not-utf-8")];
    };
    let words: Vec<&str> = text.split(' ').collect();
    match words.as_slice() {
        ["attest", a, d, wait] => match (nonce(a), nonce(d), wait_ms(wait)) {
            (Some(a), Some(d), Some(wait)) => attest(a, d, wait),
            _ => vec![error("bad-arguments")],
        },
        ["cleanup", n, wait] => match (nonce(n), wait_ms(wait)) {
            (Some(n), Some(wait)) => cleanup(n, wait),
            _ => vec![error("bad-arguments")],
        },
        ["attest" | "cleanup", ..] => vec![error("bad-arguments")],
        _ => vec![error("unknown-request")],
    }
}

/// Report lines, then `end`.
fn reply(lines: &[String]) -> String {
    let mut text = String::new();
    for line in lines {
        text.push_str(line);
        text.push('\n');
    }
    text.push_str("end\n");
    text
}

fn error(text: &str) -> String {
    format!("error={}", field(text))
}

/// A 32-byte nonce from 64 lowercase hex digits.
fn nonce(text: &str) -> Option<[u8; 32]> {
    let digits = text.as_bytes();
    if digits.len() != 64 {
        return None;
    }
    let mut nonce = [0u8; 32];
    for (byte, pair) in nonce.iter_mut().zip(digits.chunks_exact(2)) {
        let [high, low] = pair else { return None };
        *byte = (hex_digit(*high)? << 4) | hex_digit(*low)?;
    }
    Some(nonce)
}

fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

/// WAIT_MS: decimal digits only, 1..=10000.
fn wait_ms(text: &str) -> Option<Duration> {
    if text.is_empty() || text.len() > 5 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let ms: u64 = text.parse().ok()?;
    (1..=10_000)
        .contains(&ms)
        .then(|| Duration::from_millis(ms))
}

/// spec 3.7 "Imported behavior". The canary probes run beside the other
/// checks. Both endpoints are tried at once; the allowed one is timed, and
/// the denied one must not have connected `RTT_FACTOR` times that round
/// trip (at least WAIT_MS) after both started. Both endpoints answer alike
/// when reached, so a denied endpoint routed like the allowed one would
/// connect within one such round trip.
fn attest(nonce_a: [u8; 32], nonce_d: [u8; 32], floor: Duration) -> Vec<String> {
    std::thread::scope(|scope| {
        let canaries = std::thread::Builder::new().spawn_scoped(scope, || {
            let start = Instant::now();
            let denied = DeniedProbe::start(nonce_d);
            let (allowed, round_trip) = allowed_canary(&nonce_a);
            let window = round_trip
                .map_or(floor, |rtt| floor.max(rtt.saturating_mul(RTT_FACTOR)))
                .min(WAIT_MAX);
            std::thread::sleep(window.saturating_sub(start.elapsed()));
            [allowed, denied.verdict(window)]
        });
        let mut lines = vec![
            address_check("tap0", SANDBOX_LINK, SANDBOX_ADDRESS, 24),
            address_check("canary-link", CANARY_LINK, CANARY_ADDRESS, 32),
            ipv6_check(),
            capabilities_check(),
            route_mutation_check(),
        ];
        lines.extend(joined(canaries));
        lines
    })
}

/// spec 3.7 "Cleanup observation": after RS deleted the canary veth, the
/// formerly allowed endpoint is unreachable and `tap0` remains.
fn cleanup(nonce: [u8; 32], wait: Duration) -> Vec<String> {
    vec![
        unreachable_check("formerly-allowed", ALLOWED_CANARY, &nonce, wait),
        address_check("tap0", SANDBOX_LINK, SANDBOX_ADDRESS, 24),
    ]
}

/// The canary thread's lines, or a failed allowed-canary line if the
/// thread did not run (RS then also misses the denied-canary line).
fn joined(probes: io::Result<ScopedJoinHandle<'_, [String; 2]>>) -> Vec<String> {
    match probes {
        Ok(handle) => handle.join().map(Vec::from).unwrap_or_else(|_| {
            vec![failed("allowed-canary", "error", "probe-thread-panicked")]
        }),
        Err(e) => vec![failed("allowed-canary", "error", &e.to_string())],
    }
}

/// One printable field value: no spaces, no control characters.
fn field(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_whitespace() || c.is_control() {
                '_'
            } else {
                c
            }
        })
        .collect()
}

fn failed(check: &str, key: &str, text: &str) -> String {
    format!("check={check} result=failed {key}={}", field(text))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Up to `LISTING_MAX` items joined by commas, `none` if there are none.
fn listing(items: &[String]) -> String {
    if items.is_empty() {
        return "none".into();
    }
    let mut text = items
        .iter()
        .take(LISTING_MAX)
        .cloned()
        .collect::<Vec<_>>()
        .join(",");
    let more = items.len().saturating_sub(LISTING_MAX);
    if more > 0 {
        text.push_str(&format!(",+{more}-more"));
    }
    text
}

/// spec 3.7 "Imported behavior": the allowed canary answers the challenge
/// (RS checks the response against the nonce). The line carries the time
/// from the connect to the answer, `rtt_us`, which is also returned.
fn allowed_canary(nonce: &[u8; 32]) -> (String, Option<Duration>) {
    let mut response = [0u8; 32];
    let start = Instant::now();
    let exchanged = TcpStream::connect_timeout(&SocketAddr::V4(ALLOWED_CANARY), CANARY_TIMEOUT)
        .and_then(|mut stream| {
            stream.set_read_timeout(Some(CANARY_TIMEOUT))?;
            stream.set_write_timeout(Some(CANARY_TIMEOUT))?;
            stream.write_all(nonce)?;
            stream.read_exact(&mut response)
        });
    let round_trip = start.elapsed();
    match exchanged {
        Ok(()) => (
            format!(
                "check=allowed-canary result=answered response={} rtt_us={}",
                hex(&response),
                round_trip.as_micros()
            ),
            Some(round_trip),
        ),
        Err(e) => (failed("allowed-canary", "error", &e.to_string()), None),
    }
}

/// The denied canary's connect, on a thread of its own so that it starts
/// with the allowed one and its window can be decided afterwards. The
/// thread is not waited for: against a denied endpoint it blocks until
/// gVisor gives up on the address (about 3 s), at most `WAIT_MAX`.
struct DeniedProbe {
    state: std::sync::Arc<std::sync::Mutex<DeniedState>>,
    /// The thread could not be started.
    failed: Option<String>,
}

/// What the denied probe's thread has seen so far.
#[derive(Default)]
struct DeniedState {
    /// When its connect began: the window counts from here, so a thread
    /// scheduled late cannot pass for an unreachable endpoint.
    started: Option<Instant>,
    /// `Ok(answer)` once connected, `Err` once the connect failed for any
    /// reason other than its own timeout.
    outcome: Option<Result<Vec<u8>, String>>,
}

impl DeniedProbe {
    fn start(nonce: [u8; 32]) -> Self {
        let state = std::sync::Arc::new(std::sync::Mutex::new(DeniedState::default()));
        let shared = std::sync::Arc::clone(&state);
        let spawned = std::thread::Builder::new().spawn(move || {
            let record = |update: &dyn Fn(&mut DeniedState)| {
                if let Ok(mut state) = shared.lock() {
                    update(&mut state);
                }
            };
            record(&|s| s.started = Some(Instant::now()));
            let mut stream =
                match TcpStream::connect_timeout(&SocketAddr::V4(DENIED_CANARY), WAIT_MAX) {
                    Ok(stream) => stream,
                    Err(e) if e.kind() == io::ErrorKind::TimedOut => return,
                    Err(e) => return record(&|s| s.outcome = Some(Err(e.to_string()))),
                };
            record(&|s| s.outcome = Some(Ok(Vec::new())));
            let mut response = Vec::new();
            let _ = stream
                .set_read_timeout(Some(CANARY_TIMEOUT))
                .and_then(|()| stream.set_write_timeout(Some(CANARY_TIMEOUT)))
                .and_then(|()| stream.write_all(&nonce))
                .and_then(|()| (&mut stream).take(32).read_to_end(&mut response));
            record(&|s| s.outcome = Some(Ok(response.clone())));
        });
        Self {
            state,
            failed: spawned.err().map(|e| e.to_string()),
        }
    }

    /// The report line once `window` has passed since the probe's connect
    /// began (waiting at most `WAIT_MAX` for it to begin). Unreachable only
    /// while the connect is still pending: a connection is `reached`, and
    /// any early failure (a reset or an ICMP error answered from
    /// somewhere) is `refused`, which fails the check too.
    fn verdict(&self, window: Duration) -> String {
        let wait_ms = window.as_millis();
        if let Some(error) = &self.failed {
            return failed("denied-canary", "error", error);
        }
        let begun = Instant::now();
        // Bounded: one look per millisecond, at most WAIT_MAX.
        let started = loop {
            match self.state.lock().map(|s| s.started) {
                Ok(Some(started)) => break started,
                Ok(None) if begun.elapsed() < WAIT_MAX => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                Ok(None) => return failed("denied-canary", "error", "the probe never started"),
                Err(_) => return failed("denied-canary", "error", "probe-state-poisoned"),
            }
        };
        std::thread::sleep((started + window).saturating_duration_since(Instant::now()));
        match self.state.lock().map(|s| s.outcome.clone()) {
            Ok(None) => format!(
                "check=denied-canary result=unreachable wait_ms={wait_ms} error=no_connection"
            ),
            Ok(Some(Ok(response))) => format!(
                "check=denied-canary result=reached wait_ms={wait_ms} response={}",
                hex(&response)
            ),
            Ok(Some(Err(error))) => format!(
                "check=denied-canary result=refused wait_ms={wait_ms} error={}",
                field(&error)
            ),
            Err(_) => failed("denied-canary", "error", "probe-state-poisoned"),
        }
    }
}

/// `check=CHECK`: no connection to `target` within `wait` (spec 3.7: after
/// cleanup, the formerly allowed canary): `unreachable` only while the
/// connect is still pending at the deadline. An immediate refusal means
/// something on the path answered (`refused`); a connection is `reached`,
/// with whatever the endpoint answers the nonce with.
fn unreachable_check(
    check: &str,
    target: SocketAddrV4,
    nonce: &[u8; 32],
    wait: Duration,
) -> String {
    let wait_ms = wait.as_millis();
    let mut stream = match TcpStream::connect_timeout(&SocketAddr::V4(target), wait) {
        Ok(stream) => stream,
        // Still pending at the deadline: nothing answered.
        Err(e) if e.kind() == io::ErrorKind::TimedOut => {
            return format!(
                "check={check} result=unreachable wait_ms={wait_ms} error={}",
                field(&e.to_string())
            )
        }
        // Refused or unreachable at once: something on the path answered.
        Err(e) => {
            return format!(
                "check={check} result=refused wait_ms={wait_ms} error={}",
                field(&e.to_string())
            )
        }
    };
    let mut response = Vec::new();
    let _ = stream
        .set_read_timeout(Some(CANARY_TIMEOUT))
        .and_then(|()| stream.set_write_timeout(Some(CANARY_TIMEOUT)))
        .and_then(|()| stream.write_all(nonce))
        .and_then(|()| (&mut stream).take(32).read_to_end(&mut response));
    format!(
        "check={check} result=reached wait_ms={wait_ms} response={}",
        hex(&response)
    )
}

/// `check=CHECK`: link `name` carries the IPv4 address `address/prefix`
/// (spec 3.7 "Imported behavior": `tap0` and canary identity; "Cleanup
/// observation": `tap0` remains).
fn address_check(check: &str, name: &str, address: Ipv4Addr, prefix: u8) -> String {
    let (links, addresses) = match links().and_then(|links| Ok((links, addresses(AF_INET)?))) {
        Ok(found) => found,
        Err(e) => return failed(check, "detail", &e.to_string()),
    };
    let Some(index) = index_of(&links, name) else {
        return failed(check, "detail", &format!("no-link-{name}"));
    };
    let on_link: Vec<&Address> = addresses.iter().filter(|a| a.index == index).collect();
    if on_link
        .iter()
        .any(|a| a.prefix == prefix && a.bytes == address.octets())
    {
        return format!("check={check} result=ok");
    }
    let found: Vec<String> = on_link
        .iter()
        .map(|a| format!("{}/{}", ip_text(&a.bytes), a.prefix))
        .collect();
    failed(check, "detail", &format!("{name}:{}", listing(&found)))
}

/// spec 3.7 "Imported behavior": no IPv6 address or route beyond loopback
/// (a sandbox without IPv6 at all refuses the dumps with EAFNOSUPPORT).
fn ipv6_check() -> String {
    let found = links().and_then(|links| {
        let loopback = |index: u32| links.iter().any(|l| l.index == index && l.loopback);
        let mut found = Vec::new();
        for a in none_without_ipv6(addresses(AF_INET6))? {
            if !loopback(a.index) {
                found.push(format!(
                    "address:{}/{}@{}",
                    ip_text(&a.bytes),
                    a.prefix,
                    link_name(&links, a.index)
                ));
            }
        }
        for r in none_without_ipv6(routes(AF_INET6))? {
            if !r.oif.is_some_and(loopback) {
                let destination = r
                    .destination
                    .as_deref()
                    .map_or_else(|| "::".into(), ip_text);
                let device = r
                    .oif
                    .map_or_else(|| "?".into(), |oif| link_name(&links, oif));
                found.push(format!("route:{destination}/{}@{device}", r.prefix));
            }
        }
        Ok(found)
    });
    match found {
        Ok(found) if found.is_empty() => "check=ipv6 result=ok".into(),
        Ok(found) => failed("ipv6", "detail", &listing(&found)),
        Err(e) => failed("ipv6", "detail", &e.to_string()),
    }
}

/// An IPv6 dump refused with EAFNOSUPPORT found nothing; other errors stay.
fn none_without_ipv6<T>(dump: io::Result<Vec<T>>) -> io::Result<Vec<T>> {
    match dump {
        Err(e) if e.raw_os_error() == Some(EAFNOSUPPORT) => Ok(Vec::new()),
        other => other,
    }
}

/// spec 3.7 "Imported behavior", SR-5: CAP_NET_ADMIN is in none of init's
/// capability sets. A missing CapInh or CapAmb line is only noted.
fn capabilities_check() -> String {
    let status = match std::fs::read_to_string("/proc/self/status") {
        Ok(status) => status,
        Err(e) => return failed("capabilities", "detail", &format!("/proc/self/status:{e}")),
    };
    let mut failing = Vec::new();
    let mut notes = Vec::new();
    for (set, required) in [
        ("CapInh", false),
        ("CapPrm", true),
        ("CapEff", true),
        ("CapBnd", true),
        ("CapAmb", false),
    ] {
        let value = status
            .lines()
            .find_map(|l| l.strip_prefix(set)?.strip_prefix(':'))
            .map(str::trim);
        match value.map(|v| (v, u64::from_str_radix(v, 16))) {
            Some((_, Ok(bits))) if bits & (1 << CAP_NET_ADMIN) == 0 => {}
            Some((v, _)) => failing.push(format!("{set}:{v}")),
            None if required => failing.push(format!("{set}:missing")),
            None => notes.push(format!("{set}:missing")),
        }
    }
    match (failing.is_empty(), notes.is_empty()) {
        (true, true) => "check=capabilities result=ok".into(),
        (true, false) => format!(
            "check=capabilities result=ok detail={}",
            field(&notes.join(","))
        ),
        (false, _) => failed(
            "capabilities",
            "detail",
            &[failing, notes].concat().join(","),
        ),
    }
}

/// spec 3.7 "Imported behavior", SR-5: the kernel refuses to add a route
/// that would put the denied canary on-link. Only an acknowledgement with
/// an errno counts as a refusal.
fn route_mutation_check() -> String {
    const CHECK: &str = "route-mutation";
    let links = match links() {
        Ok(links) => links,
        Err(e) => return failed(CHECK, "detail", &e.to_string()),
    };
    let Some(oif) = index_of(&links, CANARY_LINK).or_else(|| index_of(&links, SANDBOX_LINK)) else {
        return failed(CHECK, "detail", "no-link-cnr0-or-tap0");
    };
    // rtmsg: family, dst_len, src_len, tos; table, protocol, scope, type;
    // flags u32.
    let mut body = vec![AF_INET, 32, 0, 0];
    body.extend([RT_TABLE_MAIN, RTPROT_BOOT, RT_SCOPE_LINK, RTN_UNICAST]);
    body.extend(0u32.to_ne_bytes());
    push_attribute(&mut body, RTA_DST, &DENIED_CANARY.ip().octets());
    push_attribute(&mut body, RTA_OIF, &oif.to_ne_bytes());
    let flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
    let acknowledged = exchange(RTM_NEWROUTE, flags, &body, |kind, payload| {
        (kind == NLMSG_ERROR).then(|| errno_of(payload).ok_or_else(malformed))
    });
    match acknowledged {
        Ok(0) => failed(CHECK, "detail", "accepted"),
        Ok(errno) => format!("check={CHECK} result=ok errno={errno}"),
        Err(e) => failed(CHECK, "detail", &e.to_string()),
    }
}

fn ip_text(bytes: &[u8]) -> String {
    if let Ok(v4) = <[u8; 4]>::try_from(bytes) {
        Ipv4Addr::from(v4).to_string()
    } else if let Ok(v6) = <[u8; 16]>::try_from(bytes) {
        Ipv6Addr::from(v6).to_string()
    } else {
        hex(bytes)
    }
}

struct Link {
    index: u32,
    name: String,
    loopback: bool,
}

struct Address {
    family: u8,
    index: u32,
    prefix: u8,
    bytes: Vec<u8>,
}

struct Route {
    family: u8,
    prefix: u8,
    destination: Option<Vec<u8>>,
    oif: Option<u32>,
}

fn index_of(links: &[Link], name: &str) -> Option<u32> {
    links.iter().find(|l| l.name == name).map(|l| l.index)
}

fn link_name(links: &[Link], index: u32) -> String {
    links
        .iter()
        .find(|l| l.index == index)
        .map_or_else(|| format!("#{index}"), |l| l.name.clone())
}

/// Every link (ifinfomsg: family, pad, type u16, index i32, flags u32,
/// change u32; then attributes).
fn links() -> io::Result<Vec<Link>> {
    dump(RTM_GETLINK, &[0; 16], RTM_NEWLINK, |m| {
        let name = attribute(m.get(16..)?, IFLA_IFNAME)?;
        Some(Link {
            index: u32_at(m, 4)?,
            name: String::from_utf8_lossy(name.strip_suffix(&[0]).unwrap_or(name)).into_owned(),
            loopback: u32_at(m, 8)? & IFF_LOOPBACK != 0,
        })
    })
}

/// The addresses of `family` (ifaddrmsg: family, prefixlen, flags, scope,
/// index u32; then attributes). gVisor's dump ignores the family asked
/// for, so other families are dropped here.
fn addresses(family: u8) -> io::Result<Vec<Address>> {
    let body = [family, 0, 0, 0, 0, 0, 0, 0];
    let all = dump(RTM_GETADDR, &body, RTM_NEWADDR, |m| {
        let attributes = m.get(8..)?;
        let bytes =
            attribute(attributes, IFA_LOCAL).or_else(|| attribute(attributes, IFA_ADDRESS))?;
        Some(Address {
            family: *m.first()?,
            index: u32_at(m, 4)?,
            prefix: *m.get(1)?,
            bytes: bytes.to_vec(),
        })
    })?;
    Ok(all.into_iter().filter(|a| a.family == family).collect())
}

/// The routes of `family` in every table (rtmsg, then attributes; a route
/// without RTA_DST is a default route). gVisor's dump ignores the family
/// asked for, so other families are dropped here.
fn routes(family: u8) -> io::Result<Vec<Route>> {
    let body = [family, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    let all = dump(RTM_GETROUTE, &body, RTM_NEWROUTE, |m| {
        let attributes = m.get(12..)?;
        Some(Route {
            family: *m.first()?,
            prefix: *m.get(1)?,
            destination: attribute(attributes, RTA_DST).map(<[u8]>::to_vec),
            oif: attribute(attributes, RTA_OIF).and_then(|oif| u32_at(oif, 0)),
        })
    })?;
    Ok(all.into_iter().filter(|r| r.family == family).collect())
}

fn malformed() -> io::Error {
    io::Error::other("malformed-netlink-message")
}

/// Dumps `kind` and parses each `reply` message with `parse`, up to
/// NLMSG_DONE. An error message, an errno in NLMSG_DONE or a message that
/// does not parse is the dump's error, so nothing reported is overlooked.
fn dump<T>(
    kind: u16,
    body: &[u8],
    reply: u16,
    parse: impl Fn(&[u8]) -> Option<T>,
) -> io::Result<Vec<T>> {
    let mut found = Vec::new();
    exchange(
        kind,
        NLM_F_REQUEST | NLM_F_DUMP,
        body,
        |message, payload| {
            if message == reply {
                return match parse(payload) {
                    Some(item) => {
                        found.push(item);
                        None
                    }
                    None => Some(Err(malformed())),
                };
            }
            match (message, errno_of(payload)) {
                (NLMSG_ERROR, None) => Some(Err(malformed())),
                (NLMSG_DONE | NLMSG_ERROR, None | Some(0)) => Some(Ok(())),
                (NLMSG_DONE | NLMSG_ERROR, Some(errno)) => {
                    Some(Err(io::Error::from_raw_os_error(errno)))
                }
                _ => None,
            }
        },
    )?;
    Ok(found)
}

/// Sends one NETLINK_ROUTE request on a fresh socket and hands each reply
/// message (type, payload) to `handle` until it returns a result. Bounded:
/// every receive times out, and there are at most NETLINK_RECEIVES_MAX.
fn exchange<T>(
    kind: u16,
    flags: u16,
    body: &[u8],
    mut handle: impl FnMut(u16, &[u8]) -> Option<io::Result<T>>,
) -> io::Result<T> {
    let socket = route_socket()?;
    send_request(&socket, kind, flags, body)?;
    let mut buffer = vec![0u8; NETLINK_BUFFER];
    for _ in 0..NETLINK_RECEIVES_MAX {
        // SAFETY: the pointer and length describe `buffer`, which is
        // writable and alive for the whole call.
        let received = unsafe {
            recv(
                socket.as_raw_fd(),
                buffer.as_mut_ptr().cast(),
                buffer.len(),
                0,
            )
        };
        let received = usize::try_from(received).map_err(|_| io::Error::last_os_error())?;
        let datagram = buffer.get(..received).unwrap_or_default();
        let mut at = 0;
        while at < datagram.len() {
            let (found, payload, next) = message_at(datagram, at).ok_or_else(malformed)?;
            if let Some(result) = handle(found, payload) {
                return result;
            }
            at = next;
        }
    }
    Err(io::Error::other("netlink-reply-did-not-end"))
}

/// A NETLINK_ROUTE socket whose receives give up after NETLINK_TIMEOUT_SECS.
fn route_socket() -> io::Result<OwnedFd> {
    // SAFETY: integer arguments only; the result is checked before use.
    let fd = unsafe { socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new, open descriptor that nothing else owns.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    let timeout = Timeval {
        tv_sec: NETLINK_TIMEOUT_SECS,
        tv_usec: 0,
    };
    let size = u32::try_from(std::mem::size_of::<Timeval>())
        .map_err(|_| io::Error::other("timeval-size"))?;
    // SAFETY: the pointer and size describe `timeout`, a live
    // `struct timeval` the call only reads.
    let set = unsafe {
        setsockopt(
            socket.as_raw_fd(),
            SOL_SOCKET,
            SO_RCVTIMEO,
            std::ptr::from_ref(&timeout).cast(),
            size,
        )
    };
    if set != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(socket)
}

/// Sends one netlink message: nlmsghdr (length, type, flags, sequence 1,
/// port 0 = the kernel) and `body`.
fn send_request(socket: &OwnedFd, kind: u16, flags: u16, body: &[u8]) -> io::Result<()> {
    let length = NLMSG_HDRLEN.checked_add(body.len()).ok_or_else(malformed)?;
    let mut message = Vec::with_capacity(length);
    message.extend_from_slice(
        &u32::try_from(length)
            .map_err(|_| malformed())?
            .to_ne_bytes(),
    );
    message.extend_from_slice(&kind.to_ne_bytes());
    message.extend_from_slice(&flags.to_ne_bytes());
    message.extend_from_slice(&1u32.to_ne_bytes());
    message.extend_from_slice(&0u32.to_ne_bytes());
    message.extend_from_slice(body);
    // SAFETY: the pointer and length describe `message`, alive for the
    // whole call, which only reads it.
    let sent = unsafe {
        send(
            socket.as_raw_fd(),
            message.as_ptr().cast(),
            message.len(),
            0,
        )
    };
    match usize::try_from(sent) {
        Ok(sent) if sent == length => Ok(()),
        Ok(_) => Err(io::Error::other("short-netlink-send")),
        Err(_) => Err(io::Error::last_os_error()),
    }
}

/// Appends a route attribute (rtattr: length u16, type u16, data, padding
/// to 4 bytes).
fn push_attribute(message: &mut Vec<u8>, kind: u16, data: &[u8]) {
    let length = u16::try_from(data.len().saturating_add(4)).unwrap_or(u16::MAX);
    message.extend_from_slice(&length.to_ne_bytes());
    message.extend_from_slice(&kind.to_ne_bytes());
    message.extend_from_slice(data);
    message.resize(message.len().next_multiple_of(4), 0);
}

/// The netlink message at `at`: its type, its payload and where the next
/// one starts; None if it is cut short.
fn message_at(datagram: &[u8], at: usize) -> Option<(u16, &[u8], usize)> {
    let length = usize::try_from(u32_at(datagram, at)?).ok()?;
    let kind = u16_at(datagram, at.checked_add(4)?)?;
    let payload = datagram.get(at.checked_add(NLMSG_HDRLEN)?..at.checked_add(length)?)?;
    Some((
        kind,
        payload,
        at.checked_add(length.checked_next_multiple_of(4)?)?,
    ))
}

/// The data of the first attribute of type `kind` in `attributes`.
fn attribute(attributes: &[u8], kind: u16) -> Option<&[u8]> {
    let mut at = 0;
    loop {
        let length = usize::from(u16_at(attributes, at)?);
        let found = u16_at(attributes, at.checked_add(2)?)? & NLA_TYPE_MASK;
        let data = attributes.get(at.checked_add(4)?..at.checked_add(length)?)?;
        if found == kind {
            return Some(data);
        }
        at = at.checked_add(length.checked_next_multiple_of(4)?)?;
    }
}

/// The errno an NLMSG_ERROR or NLMSG_DONE payload carries (0: success).
fn errno_of(payload: &[u8]) -> Option<i32> {
    Some(i32::from_ne_bytes(bytes_at(payload, 0)?).saturating_neg())
}

fn bytes_at<const N: usize>(buf: &[u8], at: usize) -> Option<[u8; N]> {
    buf.get(at..at.checked_add(N)?)?.try_into().ok()
}

fn u16_at(buf: &[u8], at: usize) -> Option<u16> {
    bytes_at(buf, at).map(u16::from_ne_bytes)
}

fn u32_at(buf: &[u8], at: usize) -> Option<u32> {
    bytes_at(buf, at).map(u32::from_ne_bytes)
}
