//! The control socket's TLS connections on real unix sockets (spec 3.3
//! "Protocol cryptography refinement"): enrollment is refused above its
//! size limit and from any UID but the developer's, a client enrolls and
//! then authenticates on a new connection, and the relay carries the
//! plaintext of an established connection both ways, in order, under
//! back-pressure, and ends with its peer.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

#[path = "support/trust_anchor.rs"]
mod trust_anchor;

use lazaret_effects::coordinator::channel::{self, ChannelError};
use lazaret_effects::coordinator::control_tls::{self, Accepted, ControlTlsError};
use lazaret_runtime::protocol::records::{ClientEnrollmentRequest, ProtocolPublicationIdentity};
use lazaret_runtime::protocol::tls::{server_name, ClientTlsKey, TlsAuthority, ENROLLMENT_LIMIT};
use lazaret_runtime::records::ids::CliId;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;

fn authority() -> TlsAuthority {
    trust_anchor::trust_anchor().1
}

fn uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// The coordinator's accept of one connection on its own thread.
fn serve(
    socket: UnixStream,
    mut tls: TlsAuthority,
    developer_uid: u32,
) -> std::thread::JoinHandle<(TlsAuthority, Result<Accepted, ControlTlsError>)> {
    std::thread::spawn(move || {
        let accepted = control_tls::accept(socket, &mut tls, developer_uid);
        (tls, accepted)
    })
}

/// A client connection without a certificate, its handshake done.
fn unauthenticated(
    publication: &ProtocolPublicationIdentity,
    socket: &mut UnixStream,
) -> rustls::ClientConnection {
    let config = ClientTlsKey::enrollment_config(publication, control_tls::system_clock()).unwrap();
    let mut conn = rustls::ClientConnection::new(config, server_name().unwrap()).unwrap();
    while conn.is_handshaking() {
        conn.complete_io(socket).unwrap();
    }
    conn
}

#[test]
fn an_enrollment_over_the_limit_is_refused_before_its_body_is_read() {
    let tls = authority();
    let publication = tls.publication().clone();
    let (mut client, server) = UnixStream::pair().unwrap();
    let coordinator = serve(server, tls, uid());
    let mut client_tls = unauthenticated(&publication, &mut client);
    let key = ClientTlsKey::from_seed(&[7; 32]);
    let request = ClientEnrollmentRequest {
        // A CSR padded past the limit (the coordinator never parses it).
        certificate_signing_request_der: vec![0x30; ENROLLMENT_LIMIT],
        ..key
            .enrollment_request(&publication, CliId([7; 16]))
            .unwrap()
    };
    let mut stream = rustls::Stream::new(&mut client_tls, &mut client);
    // The coordinator may close before the whole frame is written.
    let _ = channel::send(&mut stream, "test", &request);
    let (_, accepted) = coordinator.join().unwrap();
    match accepted {
        Err(ControlTlsError::Exchange(ChannelError::Oversized { len, limit, .. })) => {
            assert!(len > ENROLLMENT_LIMIT);
            assert_eq!(limit, ENROLLMENT_LIMIT);
        }
        other => panic!("an oversized enrollment was not refused by its size: {other:?}"),
    }
}

#[test]
fn an_enrollment_from_another_uid_is_refused() {
    let tls = authority();
    let publication = tls.publication().clone();
    let (client, server) = UnixStream::pair().unwrap();
    // The developer is someone else: this process's UID may not enroll.
    let developer = uid().wrapping_add(1);
    let coordinator = serve(server, tls, developer);
    let key = ClientTlsKey::from_seed(&[7; 32]);
    let enrolled = control_tls::enroll(client, &publication, &key, CliId([7; 16]));
    assert!(enrolled.is_err(), "{enrolled:?}");
    let (_, accepted) = coordinator.join().unwrap();
    match accepted {
        Err(ControlTlsError::EnrollmentUid {
            found,
            developer: d,
        }) => {
            assert_eq!((found, d), (uid(), developer));
        }
        other => panic!("an enrollment from another UID was not refused: {other:?}"),
    }
}

/// Enrolls `cli_id` and opens its authenticated connection; the
/// coordinator's and the client's plaintext streams.
fn connected(cli_id: CliId) -> (UnixStream, UnixStream) {
    let tls = authority();
    let publication = tls.publication().clone();
    let key = ClientTlsKey::from_seed(&[7; 32]);
    let (client, server) = UnixStream::pair().unwrap();
    let coordinator = serve(server, tls, uid());
    let credential = control_tls::enroll(client, &publication, &key, cli_id).unwrap();
    let (tls, accepted) = coordinator.join().unwrap();
    assert!(
        matches!(accepted, Ok(Accepted::Enrolled(id)) if id == cli_id),
        "{accepted:?}"
    );
    let (client, server) = UnixStream::pair().unwrap();
    let coordinator = serve(server, tls, uid());
    let client = control_tls::open(client, &publication, &key, &credential).unwrap();
    let (_, accepted) = coordinator.join().unwrap();
    let Ok(Accepted::Client { cli_id: id, stream }) = accepted else {
        panic!("the authenticated connection was not accepted: {accepted:?}");
    };
    assert_eq!(id, cli_id);
    (stream, client)
}

#[test]
fn the_relay_carries_both_directions_in_order_and_ends_with_its_peer() {
    let (mut coordinator, mut client) = connected(CliId([9; 16]));
    // 4 MiB each way at once: neither side reads until it has written
    // everything, so the relay's buffers fill and must apply back-pressure
    // without losing or reordering a byte.
    let pattern = |seed: u32| -> Vec<u8> {
        (0..4u32 << 20)
            .map(|i| {
                i.wrapping_mul(2_654_435_761)
                    .wrapping_add(seed)
                    .to_be_bytes()[1]
            })
            .collect()
    };
    let (down, up) = (pattern(1), pattern(2));
    let mut coordinator_reader = coordinator.try_clone().unwrap();
    let mut client_reader = client.try_clone().unwrap();
    let expected_up = up.clone();
    let reading_up = std::thread::spawn(move || {
        let mut got = vec![0u8; expected_up.len()];
        coordinator_reader.read_exact(&mut got).unwrap();
        got == expected_up
    });
    let expected_down = down.clone();
    let reading_down = std::thread::spawn(move || {
        let mut got = vec![0u8; expected_down.len()];
        client_reader.read_exact(&mut got).unwrap();
        got == expected_down
    });
    let writing_down = std::thread::spawn(move || {
        coordinator.write_all(&down).unwrap();
        coordinator
    });
    client.write_all(&up).unwrap();
    let coordinator = writing_down.join().unwrap();
    assert!(
        reading_up.join().unwrap(),
        "the client's bytes arrived changed"
    );
    assert!(
        reading_down.join().unwrap(),
        "the coordinator's bytes arrived changed"
    );
    // The coordinator ends the connection: the client reads its end.
    coordinator.shutdown(std::net::Shutdown::Both).unwrap();
    drop(coordinator);
    client
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut rest = Vec::new();
    assert_eq!(client.read_to_end(&mut rest).unwrap(), 0);
}

/// Application data that arrives in the same read as the client's last
/// handshake flight is relayed at once, not left in rustls's buffer until
/// more bytes come (a client sends its Hello right after its Finished).
#[test]
fn plaintext_that_arrives_with_the_handshake_is_relayed() {
    let tls = authority();
    let publication = tls.publication().clone();
    let key = ClientTlsKey::from_seed(&[7; 32]);
    let cli_id = CliId([9; 16]);
    let (client, server) = UnixStream::pair().unwrap();
    let coordinator = serve(server, tls, uid());
    let credential = control_tls::enroll(client, &publication, &key, cli_id).unwrap();
    let (tls, _) = coordinator.join().unwrap();
    let (mut client, server) = UnixStream::pair().unwrap();
    let coordinator = serve(server, tls, uid());
    let config = key
        .session_config(&publication, &credential, control_tls::system_clock())
        .unwrap();
    let mut conn = rustls::ClientConnection::new(config, server_name().unwrap()).unwrap();
    // Drive the handshake by hand, holding back the client's last flight.
    let mut held = Vec::new();
    loop {
        while conn.wants_write() {
            conn.write_tls(&mut held).unwrap();
        }
        if !conn.is_handshaking() {
            break;
        }
        client.write_all(&held).unwrap();
        held.clear();
        conn.read_tls(&mut client).unwrap();
        conn.process_new_packets().unwrap();
    }
    conn.writer().write_all(b"hello at once").unwrap();
    while conn.wants_write() {
        conn.write_tls(&mut held).unwrap();
    }
    // Finished and the first record in one write.
    client.write_all(&held).unwrap();
    let (_, accepted) = coordinator.join().unwrap();
    let Ok(Accepted::Client { mut stream, .. }) = accepted else {
        panic!("the connection was not accepted: {accepted:?}");
    };
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let mut got = [0u8; 13];
    stream.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"hello at once");
}

/// The coordinator writes a session's last output and ends its stream at
/// once (as a session does after its exit status): a client that is slow
/// to read (a pager on the first page) still gets every byte, then EOF.
#[test]
fn a_slow_reader_gets_everything_the_peer_wrote_before_it_ended() {
    let (mut coordinator, mut client) = connected(CliId([9; 16]));
    // More than the path past the coordinator's relay holds (the client's
    // relay queue and both sockets), less than the whole path: the
    // coordinator's writes and its end finish while its relay still holds
    // output it cannot send.
    let output: Vec<u8> = (0..768u32 << 10).map(|i| i.to_le_bytes()[1]).collect();
    let expected = output.clone();
    let writer = std::thread::spawn(move || {
        coordinator.write_all(&output).unwrap();
        coordinator.shutdown(std::net::Shutdown::Both).unwrap();
    });
    std::thread::sleep(std::time::Duration::from_secs(2));
    client
        .set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let mut got = Vec::new();
    client.read_to_end(&mut got).unwrap();
    writer.join().unwrap();
    assert_eq!(got.len(), expected.len());
    assert!(got == expected, "the output arrived changed");
}

/// A coordinator session that ends without reading what its client still
/// sends (stdin after the command exited) still gets its last frames to
/// the client.
#[test]
fn the_last_bytes_arrive_although_the_peer_never_read_its_input() {
    let (mut coordinator, mut client) = connected(CliId([9; 16]));
    let mut sender = client.try_clone().unwrap();
    let flood = std::thread::spawn(move || {
        let chunk = vec![b'y'; 64 * 1024];
        // Until the connection ends (the coordinator never reads).
        for _ in 0..64 {
            if sender.write_all(&chunk).is_err() {
                return;
            }
        }
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    coordinator.write_all(b"exit 0").unwrap();
    coordinator.shutdown(std::net::Shutdown::Both).unwrap();
    drop(coordinator);
    client
        .set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let mut got = Vec::new();
    client.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"exit 0");
    drop(client);
    flood.join().unwrap();
}

/// This process's CPU time (user + system), from `/proc/self/stat`.
fn cpu_time() -> std::time::Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split(' ').collect();
    // utime and stime are fields 14 and 15 of the whole line.
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // In USER_HZ, which Linux fixes at 100 for /proc.
    std::time::Duration::from_millis(ticks * 10)
}

/// Once the peer has ended and hung up, a relay whose local end has not
/// read yet waits without spinning (a hung-up socket is no longer polled).
#[test]
fn a_relay_waiting_for_a_slow_reader_after_its_peer_left_does_not_spin() {
    let (mut coordinator, mut client) = connected(CliId([9; 16]));
    // More than the client's relay queues and its local socket hold, and
    // about what the whole path holds: the client's relay keeps a queue it
    // cannot deliver. The writer runs apart; where the path holds less than
    // this (socket buffers differ between machines and under load), the
    // test reads a chunk at a time until the writer finished, so the path
    // stays full without the writes ever blocking the test for good.
    let writer = std::thread::spawn(move || {
        coordinator.write_all(&[7u8; 640 * 1024]).unwrap();
        coordinator.shutdown(std::net::Shutdown::Both).unwrap();
    });
    client
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut got = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    // Bounded: each turn reads at least a byte of the 640 KiB or fails.
    for _ in 0..640 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        if writer.is_finished() {
            break;
        }
        let n = client.read(&mut chunk).unwrap();
        assert!(n > 0, "the stream ended before the writer finished");
        got.extend_from_slice(&chunk[..n]);
    }
    writer.join().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let before = cpu_time();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let spent = cpu_time().saturating_sub(before);
    assert!(
        spent < std::time::Duration::from_millis(300),
        "the relays used {spent:?} of CPU in 1.5 s of waiting"
    );
    client.read_to_end(&mut got).unwrap();
    assert_eq!(got.len(), 640 * 1024);
    assert!(got.iter().all(|b| *b == 7));
}
