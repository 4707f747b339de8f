//! lazaret-probe: network probes from the sandbox's own view (spec 3.7,
//! `lazaret doctor --network`). A static binary like `lazaret-init` (built
//! by cli/build.rs, std only), bound read-only at `/.lazaret/sbin`, so it
//! works in any image.
//!
//! Arguments are probes, each `tcp ADDRESS:PORT` or `dns RESOLVER NAME`.
//! For each it prints one line of `key=value` fields:
//! `probe=tcp target=A:P result=connected|failed ms=N [error=...]` or
//! `probe=dns target=R/NAME result=answered|failed ms=N [rcode=N answers=N]
//! [error=...]`. Exit status 0 when every probe ran (whatever its result),
//! 2 on bad arguments.
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

/// A TCP connect gets this long (a denied destination fails after ~3 s).
const TCP_TIMEOUT: Duration = Duration::from_secs(6);
/// A DNS query waits this long for its answer.
const DNS_TIMEOUT: Duration = Duration::from_secs(5);
/// At most this many probes per run (the readiness table allows 3 x 32).
const PROBES_MAX: usize = 96;

fn ms(since: Instant) -> u128 {
    since.elapsed().as_millis()
}

/// One printable field value: no spaces, no control characters.
fn field(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_whitespace() || c.is_control() { '_' } else { c })
        .collect()
}

fn tcp(target: SocketAddrV4) {
    let start = Instant::now();
    match TcpStream::connect_timeout(&SocketAddr::V4(target), TCP_TIMEOUT) {
        Ok(_) => println!("probe=tcp target={target} result=connected ms={}", ms(start)),
        Err(e) => println!(
            "probe=tcp target={target} result=failed ms={} error={}",
            ms(start),
            field(&e.to_string())
        ),
    }
}

/// A standard recursive query for `name`'s A records, with `id`.
fn dns_query(id: u16, name: &str) -> Option<Vec<u8>> {
    let mut q = Vec::with_capacity(18 + name.len());
    q.extend_from_slice(&id.to_be_bytes());
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split('.') {
        let len = u8::try_from(label.len()).ok().filter(|l| (1..=63).contains(l))?;
        q.push(len);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    Some(q)
}

fn dns(resolver: Ipv4Addr, name: &str) {
    let target = format!("{resolver}/{name}");
    let start = Instant::now();
    let failed = |error: String| {
        println!(
            "probe=dns target={target} result=failed ms={} error={}",
            ms(start),
            field(&error)
        )
    };
    // The query ID need not be secret here: only the answer's arrival and
    // header are reported.
    let id = u16::try_from(std::process::id() & 0xffff).unwrap_or(0x4c5a);
    let Some(query) = dns_query(id, name) else {
        return failed("not a DNS name".into());
    };
    let socket = match UdpSocket::bind("0.0.0.0:0") {
        Ok(s) => s,
        Err(e) => return failed(e.to_string()),
    };
    let sent = socket
        .connect(SocketAddrV4::new(resolver, 53))
        .and_then(|()| socket.set_read_timeout(Some(DNS_TIMEOUT)))
        .and_then(|()| socket.send(&query));
    if let Err(e) = sent {
        return failed(e.to_string());
    }
    let mut answer = [0u8; 1500];
    // Bounded: datagrams with another ID are skipped, at most 8 of them.
    for _ in 0..8 {
        match socket.recv(&mut answer) {
            Ok(n) if n >= 12 && answer[..2] == id.to_be_bytes() && answer[2] & 0x80 != 0 => {
                let rcode = answer[3] & 0x0f;
                let answers = u16::from_be_bytes([answer[6], answer[7]]);
                println!(
                    "probe=dns target={target} result=answered ms={} rcode={rcode} answers={answers}",
                    ms(start)
                );
                return;
            }
            Ok(_) => {}
            Err(e) => return failed(e.to_string()),
        }
    }
    failed("no answer with the query's ID".into())
}

fn usage() -> ! {
    eprintln!("usage: lazaret-probe (tcp ADDRESS:PORT | dns RESOLVER NAME)...");
    std::process::exit(2)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    let mut probes = 0;
    while i < args.len() {
        probes += 1;
        if probes > PROBES_MAX {
            usage();
        }
        match args[i].as_str() {
            "tcp" => {
                let Some(target) = args.get(i + 1).and_then(|a| a.parse::<SocketAddrV4>().ok())
                else {
                    usage()
                };
                tcp(target);
                i += 2;
            }
            "dns" => {
                let (Some(resolver), Some(name)) = (
                    args.get(i + 1).and_then(|a| a.parse::<Ipv4Addr>().ok()),
                    args.get(i + 2),
                ) else {
                    usage()
                };
                dns(resolver, name);
                i += 3;
            }
            _ => usage(),
        }
    }
}
