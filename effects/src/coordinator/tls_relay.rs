//! The relay of an established control connection (spec 3.3): one thread
//! per connection moves plaintext between the TLS connection on the
//! control socket and a local stream the session code reads and writes as
//! before, so only TLS records cross the socket.
//!
//! Each direction ends on its own, as a half-close: the peer's close_notify
//! (or its socket's end) is delivered to the local end as EOF after every
//! byte received before it; the local end's EOF becomes a close_notify
//! after every byte it wrote. The relay ends when both have, or when the
//! peer's socket fails (then what was received is still delivered). It
//! never waits on a deadline for a slow reader: a local end that has not
//! read holds the peer back exactly as a blocking write would.
//!
//! Bounded: at most [`RELAY_BUFFER`] bytes (plus one read) wait for the
//! local end, the socket is read only below that, and the local end is read
//! only when rustls has nothing left to send, so what waits for the socket
//! is at most one read's records.
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;

use rustix::event::{PollFd, PollFlags};

/// Plaintext the relay holds for its local end at most before it stops
/// reading TLS records.
const RELAY_BUFFER: usize = 256 * 1024;
/// One read.
const CHUNK: usize = 16 * 1024;

/// Starts the relay of `conn` on `socket`; returns the local stream that
/// carries its plaintext.
pub(super) fn relay(conn: rustls::Connection, socket: UnixStream) -> io::Result<UnixStream> {
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
                inbound_open: true,
                local_writable: true,
                local_write_shut: false,
                outbound_open: true,
                socket_writable: true,
            };
            if let Err(e) = relay.run() {
                tracing::debug!(error = %e, "a control connection's relay ended");
            }
        })?;
    Ok(local)
}

struct Relay {
    conn: rustls::Connection,
    socket: UnixStream,
    local: UnixStream,
    /// Plaintext received, not yet written to the local end.
    to_local: Vec<u8>,
    /// The peer may still send plaintext.
    inbound_open: bool,
    /// The local end still reads (false once a write to it failed).
    local_writable: bool,
    /// The local end was told EOF (its write half shut).
    local_write_shut: bool,
    /// The local end may still write (false at its EOF: close_notify sent).
    outbound_open: bool,
    /// The socket still takes records (false once a write failed).
    socket_writable: bool,
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
        loop {
            // Plaintext rustls already holds (also what came with the
            // handshake's last flight) before waiting for more.
            self.take_plaintext(&mut buf);
            self.write_socket();
            self.write_local();
            if !self.inbound_open && self.to_local.is_empty() && !self.local_write_shut {
                // Every byte the peer sent is delivered: EOF for the local end.
                let _ = self.local.shutdown(std::net::Shutdown::Write);
                self.local_write_shut = true;
            }
            let outbound_done =
                !self.outbound_open && (!self.conn.wants_write() || !self.socket_writable);
            if self.local_write_shut && outbound_done {
                return Ok(());
            }
            if !self.socket_writable && (self.to_local.is_empty() || !self.local_writable) {
                // The peer is gone and everything it sent is delivered.
                return Ok(());
            }
            let mut socket_flags = PollFlags::empty();
            if self.inbound_open && self.to_local.len() < RELAY_BUFFER {
                socket_flags |= PollFlags::IN;
            }
            if self.socket_writable && self.conn.wants_write() {
                socket_flags |= PollFlags::OUT;
            }
            let mut local_flags = PollFlags::empty();
            if self.outbound_open && !self.conn.wants_write() {
                local_flags |= PollFlags::IN;
            }
            if self.local_writable && !self.to_local.is_empty() {
                local_flags |= PollFlags::OUT;
            }
            // An end is polled only for what is wanted of it: an end that
            // hung up would otherwise wake every poll (POLLHUP is always
            // reported).
            let (socket_ready, local_ready) = {
                let mut fds = Vec::with_capacity(2);
                if !socket_flags.is_empty() {
                    fds.push(PollFd::new(&self.socket, socket_flags));
                }
                if !local_flags.is_empty() {
                    fds.push(PollFd::new(&self.local, local_flags));
                }
                if fds.is_empty() {
                    return Ok(());
                }
                match rustix::event::poll(&mut fds, None) {
                    Ok(_) | Err(rustix::io::Errno::INTR) => {}
                    Err(e) => return Err(e.into()),
                }
                let mut ready = fds.iter().map(PollFd::revents);
                let socket_ready = if socket_flags.is_empty() {
                    PollFlags::empty()
                } else {
                    ready.next().unwrap_or(PollFlags::empty())
                };
                let local_ready = if local_flags.is_empty() {
                    PollFlags::empty()
                } else {
                    ready.next().unwrap_or(PollFlags::empty())
                };
                (socket_ready, local_ready)
            };
            let woke = PollFlags::IN | PollFlags::HUP | PollFlags::ERR;
            if socket_flags.contains(PollFlags::IN) && socket_ready.intersects(woke) {
                self.read_socket();
            }
            if local_flags.contains(PollFlags::IN) && local_ready.intersects(woke) {
                self.read_local(&mut buf)?;
            }
        }
    }

    /// Reads TLS records; the socket's end or a record rustls refuses ends
    /// the inbound direction (what was received before stays queued).
    fn read_socket(&mut self) {
        match self.conn.read_tls(&mut self.socket) {
            Ok(0) => self.inbound_open = false,
            Ok(_) => {
                if let Err(e) = self.conn.process_new_packets() {
                    tracing::debug!(error = %e, "a control connection's peer sent a bad record");
                    self.inbound_open = false;
                }
            }
            Err(e) if would_block(&e) => {}
            Err(_) => self.inbound_open = false,
        }
    }

    /// Reads what the local end wrote into the connection; its EOF sends
    /// the close_notify.
    fn read_local(&mut self, buf: &mut [u8]) -> io::Result<()> {
        match self.local.read(buf) {
            Ok(0) => {
                self.outbound_open = false;
                self.conn.send_close_notify();
            }
            // The local end is read only when rustls has nothing to send,
            // so one read's records always fit its buffer.
            Ok(n) => self.conn.writer().write_all(&buf[..n])?,
            Err(e) if would_block(&e) => {}
            Err(_) => {
                self.outbound_open = false;
                self.conn.send_close_notify();
            }
        }
        Ok(())
    }

    /// Moves the plaintext rustls holds to the local end's queue; a
    /// close_notify, or the socket's end, closes the inbound direction.
    fn take_plaintext(&mut self, buf: &mut [u8]) {
        loop {
            match self.conn.reader().read(buf) {
                Ok(0) => {
                    self.inbound_open = false;
                    return;
                }
                Ok(n) => {
                    if self.local_writable {
                        self.to_local.extend_from_slice(&buf[..n]);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                // The peer's socket ended without a close_notify.
                Err(_) => {
                    self.inbound_open = false;
                    return;
                }
            }
        }
    }

    /// Writes pending TLS records; a failed write means the peer is gone.
    fn write_socket(&mut self) {
        while self.socket_writable && self.conn.wants_write() {
            match self.conn.write_tls(&mut self.socket) {
                Ok(_) => {}
                Err(e) if would_block(&e) => return,
                Err(_) => self.socket_writable = false,
            }
        }
    }

    /// Writes queued plaintext to the local end; a local end that no
    /// longer reads gets nothing more (what it would have read is dropped).
    fn write_local(&mut self) {
        while self.local_writable && !self.to_local.is_empty() {
            match self.local.write(&self.to_local) {
                Ok(n) => {
                    self.to_local.drain(..n);
                }
                Err(e) if would_block(&e) => return,
                Err(_) => {
                    self.local_writable = false;
                    self.to_local.clear();
                }
            }
        }
    }
}
