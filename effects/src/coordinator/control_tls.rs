//! The control socket's TLS connections (spec 3.3 "Protocol cryptography
//! refinement"; SR-9): the coordinator's accept (enrollment on a
//! connection without a client certificate, from the developer's UID only
//! and at most [`ENROLLMENT_LIMIT`] bytes; everything else on an mTLS
//! connection whose leaf it issued), the client's enrollment and
//! connection, and the relay that carries an established connection's
//! plaintext to a local socket, so the session code reads and writes
//! frames on an ordinary stream while only TLS records cross the control
//! socket.
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use lazaret_runtime::protocol::records::{
    ClientEnrollmentRequest, ClientEnrollmentResponse, ProtocolPublicationIdentity, TlsCredential,
};
use lazaret_runtime::protocol::tls::{
    server_name, ClientTlsError, ClientTlsKey, Clock, EnrollError, PeerError, TlsAuthority,
    TlsError, ENROLLMENT_LIMIT,
};
use lazaret_runtime::records::ids::CliId;
use rustix::event::{PollFd, PollFlags};

use super::channel::{self, ChannelError};

/// How long a peer may take to finish its handshake or its enrollment.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Plaintext the relay holds for its local end at most; past it, it stops
/// reading TLS records until the local end has read.
const RELAY_BUFFER: usize = 256 * 1024;
/// One read.
const CHUNK: usize = 16 * 1024;
/// How long a relay that is ending flushes its last records.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum ControlTlsError {
    #[error("cannot start a TLS connection: {0}")]
    Connection(#[source] rustls::Error),
    #[error("the TLS handshake: {0}")]
    Handshake(#[source] io::Error),
    #[error("the control socket: {0}")]
    Socket(#[source] io::Error),
    #[error("the connection's peer is refused: {0}")]
    Peer(#[from] PeerError),
    #[error("cannot read the enrolling peer's credentials: {0}")]
    PeerCredentials(#[source] io::Error),
    #[error("an enrollment from UID {found}; only the developer's UID {developer} may enroll")]
    EnrollmentUid { found: u32, developer: u32 },
    #[error("the enrollment exchange: {0}")]
    Exchange(#[source] ChannelError),
    #[error("the enrollment is refused: {0}")]
    Enroll(#[from] EnrollError),
    #[error("the coordinator's answer is refused: {0}")]
    Client(#[from] ClientTlsError),
    #[error("{0}")]
    Tls(#[from] TlsError),
}

/// What one accepted connection was.
#[derive(Debug)]
pub enum Accepted {
    /// A Client CLI enrolled and was answered; the connection is closed.
    Enrolled(CliId),
    /// An authenticated Client CLI; `stream` carries the connection's
    /// plaintext.
    Client { cli_id: CliId, stream: UnixStream },
}

/// The system clock, which every control connection's certificate dates
/// are judged by.
pub fn system_clock() -> Clock {
    std::sync::Arc::new(rustls::time_provider::DefaultTimeProvider)
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

fn timeouts(socket: &UnixStream, timeout: Option<Duration>) -> Result<(), ControlTlsError> {
    socket
        .set_read_timeout(timeout)
        .and_then(|()| socket.set_write_timeout(timeout))
        .map_err(ControlTlsError::Socket)
}

fn handshake<D: rustls::SideData>(
    conn: &mut rustls::ConnectionCommon<D>,
    socket: &mut UnixStream,
) -> Result<(), ControlTlsError> {
    // Bounded: each round trip moves at least one record or fails, and the
    // socket's timeouts bound each.
    for _ in 0..16 {
        if !conn.is_handshaking() {
            return Ok(());
        }
        conn.complete_io(socket)
            .map_err(ControlTlsError::Handshake)?;
    }
    Err(ControlTlsError::Handshake(io::Error::new(
        io::ErrorKind::TimedOut,
        "the handshake did not finish in 16 flights",
    )))
}

/// The coordinator's side of one connection on the control socket.
/// `developer_uid` is the only UID that may enroll.
pub fn accept(
    mut socket: UnixStream,
    tls: &mut TlsAuthority,
    developer_uid: u32,
) -> Result<Accepted, ControlTlsError> {
    timeouts(&socket, Some(HANDSHAKE_TIMEOUT))?;
    let mut conn =
        rustls::ServerConnection::new(tls.server_config()).map_err(ControlTlsError::Connection)?;
    handshake(&mut conn, &mut socket)?;
    if let Some(cli_id) = tls.authenticate(&conn, now())? {
        timeouts(&socket, None)?;
        let stream = relay(conn.into(), socket).map_err(ControlTlsError::Socket)?;
        return Ok(Accepted::Client { cli_id, stream });
    }
    // Spec 3.3: without a client certificate, only an enrollment from the
    // trusted developer UID. The kernel's peer credentials are its UID;
    // a peer PID is never identity.
    let found = rustix::net::sockopt::socket_peercred(&socket)
        .map_err(|e| ControlTlsError::PeerCredentials(e.into()))?
        .uid
        .as_raw();
    if found != developer_uid {
        return Err(ControlTlsError::EnrollmentUid {
            found,
            developer: developer_uid,
        });
    }
    let mut stream = rustls::Stream::new(&mut conn, &mut socket);
    let request: ClientEnrollmentRequest =
        channel::receive_within(&mut stream, "enrollment", ENROLLMENT_LIMIT)
            .map_err(ControlTlsError::Exchange)?;
    let response = tls.enroll(&request, now())?;
    channel::send(&mut stream, "enrollment", &response).map_err(ControlTlsError::Exchange)?;
    // The answer is written; the client may close as soon as it has read
    // it, so the close_notify is best effort.
    conn.send_close_notify();
    let _ = conn.write_tls(&mut socket);
    Ok(Accepted::Enrolled(request.cli_id))
}

fn client_connection(
    config: std::sync::Arc<rustls::ClientConfig>,
    socket: &mut UnixStream,
) -> Result<rustls::ClientConnection, ControlTlsError> {
    timeouts(socket, Some(HANDSHAKE_TIMEOUT))?;
    let mut conn = rustls::ClientConnection::new(config, server_name()?)
        .map_err(ControlTlsError::Connection)?;
    handshake(&mut conn, socket)?;
    Ok(conn)
}

/// The Client CLI's enrollment as `cli_id` with the coordinator
/// `publication` pins; the issued leaf, checked.
pub fn enroll(
    mut socket: UnixStream,
    publication: &ProtocolPublicationIdentity,
    key: &ClientTlsKey,
    cli_id: CliId,
) -> Result<TlsCredential, ControlTlsError> {
    let mut conn = client_connection(
        ClientTlsKey::enrollment_config(publication, system_clock())?,
        &mut socket,
    )?;
    let request = key.enrollment_request(publication, cli_id)?;
    let mut stream = rustls::Stream::new(&mut conn, &mut socket);
    channel::send(&mut stream, "enrollment", &request).map_err(ControlTlsError::Exchange)?;
    let response: ClientEnrollmentResponse =
        channel::receive(&mut stream, "enrollment").map_err(ControlTlsError::Exchange)?;
    Ok(ClientTlsKey::accept_enrollment(
        publication,
        cli_id,
        response,
    )?)
}

/// The Client CLI's mTLS connection with its enrolled leaf; the returned
/// stream carries its plaintext.
pub fn open(
    mut socket: UnixStream,
    publication: &ProtocolPublicationIdentity,
    key: &ClientTlsKey,
    credential: &TlsCredential,
) -> Result<UnixStream, ControlTlsError> {
    let conn = client_connection(
        key.session_config(publication, credential, system_clock())?,
        &mut socket,
    )?;
    timeouts(&socket, None)?;
    relay(conn.into(), socket).map_err(ControlTlsError::Socket)
}

/// Starts the relay of an established connection: a thread that moves
/// plaintext between the TLS connection on `socket` and the returned local
/// stream, until either side ends (the other is then closed). Bounded: at
/// most [`RELAY_BUFFER`] bytes wait for the local end, and rustls's own
/// buffer limit bounds what waits for the socket.
fn relay(conn: rustls::Connection, socket: UnixStream) -> io::Result<UnixStream> {
    let (local, remote) = UnixStream::pair()?;
    socket.set_nonblocking(true)?;
    remote.set_nonblocking(true)?;
    std::thread::Builder::new()
        .name("control-tls".into())
        .spawn(move || {
            let mut relay = Relay {
                conn,
                socket,
                local: remote,
                to_local: Vec::new(),
            };
            if let Err(e) = relay.run() {
                tracing::debug!(error = %e, "a control connection's relay ended");
            }
            relay.flush();
        })?;
    Ok(local)
}

struct Relay {
    conn: rustls::Connection,
    socket: UnixStream,
    local: UnixStream,
    to_local: Vec<u8>,
}

fn would_block(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

impl Relay {
    fn run(&mut self) -> io::Result<()> {
        let mut buf = vec![0u8; CHUNK];
        let mut peer_done = false;
        loop {
            // Plaintext rustls already holds, also what arrived with the
            // handshake's last flight, before waiting for more.
            peer_done |= self.take_plaintext(&mut buf)?;
            while self.conn.wants_write() {
                match self.conn.write_tls(&mut self.socket) {
                    Ok(_) => {}
                    Err(e) if would_block(&e) => break,
                    Err(e) => return Err(e),
                }
            }
            while !self.to_local.is_empty() {
                match self.local.write(&self.to_local) {
                    Ok(n) => {
                        self.to_local.drain(..n);
                    }
                    Err(e) if would_block(&e) => break,
                    Err(e) => return Err(e),
                }
            }
            if peer_done && self.to_local.is_empty() {
                // The peer ended: the local end reads EOF once this
                // relay drops it.
                return Ok(());
            }
            let mut socket_flags = PollFlags::empty();
            if !peer_done && self.to_local.len() < RELAY_BUFFER {
                socket_flags |= PollFlags::IN;
            }
            if self.conn.wants_write() {
                socket_flags |= PollFlags::OUT;
            }
            let mut local_flags = PollFlags::empty();
            if !self.conn.wants_write() {
                local_flags |= PollFlags::IN;
            }
            if !self.to_local.is_empty() {
                local_flags |= PollFlags::OUT;
            }
            let (socket_ready, local_ready) = {
                let mut fds = [
                    PollFd::new(&self.socket, socket_flags),
                    PollFd::new(&self.local, local_flags),
                ];
                match rustix::event::poll(&mut fds, None) {
                    Ok(_) | Err(rustix::io::Errno::INTR) => {}
                    Err(e) => return Err(e.into()),
                }
                (fds[0].revents(), fds[1].revents())
            };
            if socket_ready.intersects(PollFlags::IN | PollFlags::HUP | PollFlags::ERR) {
                match self.conn.read_tls(&mut self.socket) {
                    Ok(0) => peer_done = true,
                    Ok(_) => {
                        self.conn
                            .process_new_packets()
                            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                    }
                    Err(e) if would_block(&e) => {}
                    Err(e) => return Err(e),
                }
            }
            if local_ready.intersects(PollFlags::IN | PollFlags::HUP | PollFlags::ERR) {
                match self.local.read(&mut buf) {
                    // The local end closed: the connection ends with a
                    // close_notify.
                    Ok(0) => {
                        self.conn.send_close_notify();
                        return Ok(());
                    }
                    Ok(n) => self.conn.writer().write_all(&buf[..n])?,
                    Err(e) if would_block(&e) => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }

    /// Moves the plaintext rustls holds to the local end's queue; whether
    /// the peer ended cleanly (a close_notify).
    fn take_plaintext(&mut self, buf: &mut [u8]) -> io::Result<bool> {
        loop {
            match self.conn.reader().read(buf) {
                Ok(0) => return Ok(true),
                Ok(n) => self.to_local.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        }
    }

    /// Writes the records still pending (a close_notify among them),
    /// bounded by [`FLUSH_TIMEOUT`].
    fn flush(&mut self) {
        let deadline = std::time::Instant::now() + FLUSH_TIMEOUT;
        while self.conn.wants_write() {
            let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) else {
                return;
            };
            let mut fds = [PollFd::new(&self.socket, PollFlags::OUT)];
            let ms = i64::try_from(left.as_millis().min(100)).unwrap_or(100);
            let timeout = rustix::event::Timespec {
                tv_sec: 0,
                tv_nsec: ms * 1_000_000,
            };
            match rustix::event::poll(&mut fds, Some(&timeout)) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(_) => return,
            }
            match self.conn.write_tls(&mut self.socket) {
                Ok(_) => {}
                Err(e) if would_block(&e) => {}
                Err(_) => return,
            }
        }
    }
}
