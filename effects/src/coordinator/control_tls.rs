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
use std::time::{Duration, Instant};

use lazaret_runtime::coordinator::control::{ControlRequest, ControlResponse, Refusal};
use lazaret_runtime::protocol::records::{ProtocolPublicationIdentity, TlsCredential};
use lazaret_runtime::protocol::tls::{
    server_name, ClientTlsError, ClientTlsKey, Clock, EnrollError, PeerError, TlsAuthority,
    TlsError, ENROLLMENT_LIMIT,
};
use lazaret_runtime::records::ids::CliId;

use super::channel::{self, ChannelError};
use super::tls_relay::relay;

/// How long a peer may take, in all, to finish its handshake and, on an
/// enrollment connection, its enrollment.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

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
    /// An enrollment connection carried another record than `Enroll`.
    #[error("an enrollment connection opened with {found}, not Enroll")]
    NotEnrollment { found: &'static str },
    /// The coordinator refused this CLI's enrollment.
    #[error("the coordinator refused the enrollment: {0}")]
    Refused(Refusal),
    /// The coordinator answered the enrollment with another record.
    #[error("the coordinator answered the enrollment with {found}, not Enrolled")]
    NotEnrolled { found: &'static str },
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

/// Seconds since the Unix epoch by the system clock (0 before it).
pub(crate) fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// A blocking socket whose every read and write must finish before one
/// deadline for the whole exchange (a peer that trickles bytes cannot
/// stretch it).
struct Bounded<'a> {
    socket: &'a mut UnixStream,
    deadline: Instant,
}

impl Bounded<'_> {
    fn arm(&self) -> io::Result<()> {
        let left = self
            .deadline
            .checked_duration_since(Instant::now())
            .filter(|left| !left.is_zero())
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the peer did not finish within the handshake limit",
                )
            })?;
        self.socket.set_read_timeout(Some(left))?;
        self.socket.set_write_timeout(Some(left))
    }
}

impl Read for Bounded<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.arm()?;
        self.socket.read(buf)
    }
}

impl Write for Bounded<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.arm()?;
        self.socket.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.socket.flush()
    }
}

fn handshake<D: rustls::SideData>(
    conn: &mut rustls::ConnectionCommon<D>,
    socket: &mut Bounded<'_>,
) -> Result<(), ControlTlsError> {
    // Bounded: each round trip moves at least one record or fails, and the
    // deadline bounds them all.
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
    let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
    let mut conn =
        rustls::ServerConnection::new(tls.server_config()).map_err(ControlTlsError::Connection)?;
    handshake(
        &mut conn,
        &mut Bounded {
            socket: &mut socket,
            deadline,
        },
    )?;
    if let Some(cli_id) = tls.authenticate(&conn, unix_now())? {
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
    let mut bounded = Bounded {
        socket: &mut socket,
        deadline,
    };
    let mut stream = rustls::Stream::new(&mut conn, &mut bounded);
    let request = match channel::receive_within(&mut stream, "enrollment", ENROLLMENT_LIMIT)
        .map_err(ControlTlsError::Exchange)?
    {
        ControlRequest::Enroll(request) => request,
        other => {
            return Err(ControlTlsError::NotEnrollment {
                found: other.name(),
            })
        }
    };
    let response = match tls.enroll(&request, unix_now()) {
        Ok(response) => ControlResponse::Enrolled(response),
        Err(e) => {
            // The refusal is named to the CLI, then the connection ends.
            let refused = ControlResponse::Refused(Refusal::Enrollment(e.to_string()));
            let _ = channel::send(&mut stream, "enrollment", &refused);
            return Err(e.into());
        }
    };
    channel::send(&mut stream, "enrollment", &response).map_err(ControlTlsError::Exchange)?;
    // The answer is written; the client may close as soon as it has read
    // it, so the close_notify is best effort.
    conn.send_close_notify();
    let _ = conn.write_tls(&mut bounded);
    Ok(Accepted::Enrolled(request.cli_id))
}

fn client_connection(
    config: std::sync::Arc<rustls::ClientConfig>,
    socket: &mut Bounded<'_>,
) -> Result<rustls::ClientConnection, ControlTlsError> {
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
    let mut bounded = Bounded {
        socket: &mut socket,
        deadline: Instant::now() + HANDSHAKE_TIMEOUT,
    };
    let mut conn = client_connection(
        ClientTlsKey::enrollment_config(publication, system_clock())?,
        &mut bounded,
    )?;
    let request = ControlRequest::Enroll(key.enrollment_request(publication, cli_id)?);
    let mut stream = rustls::Stream::new(&mut conn, &mut bounded);
    channel::send(&mut stream, "enrollment", &request).map_err(ControlTlsError::Exchange)?;
    let response =
        match channel::receive(&mut stream, "enrollment").map_err(ControlTlsError::Exchange)? {
            ControlResponse::Enrolled(response) => response,
            ControlResponse::Refused(refusal) => return Err(ControlTlsError::Refused(refusal)),
            ControlResponse::Registered(_) => {
                return Err(ControlTlsError::NotEnrolled {
                    found: "Registered",
                })
            }
            ControlResponse::Started(_) => {
                return Err(ControlTlsError::NotEnrolled { found: "Started" })
            }
        };
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
        &mut Bounded {
            socket: &mut socket,
            deadline: Instant::now() + HANDSHAKE_TIMEOUT,
        },
    )?;
    relay(conn.into(), socket).map_err(ControlTlsError::Socket)
}
