//! Property tests over generated and mutated configuration documents
//! (spec 3.2, DX-5): decoding and selection never panic, and the same input
//! always gets the same verdict. The normal run uses a modest case count;
//! `LAZARET_SOAK_CASES=100000` runs the soak recorded in docs/config-soak.md.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // tests fail by panicking
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use lazaret_runtime::config::{decode_document, ConfigurationFingerprintRecordV1, SandboxLayoutV1};
use quickcheck::{Arbitrary, Gen, QuickCheck, TestResult};

const NORMAL_CASES: u64 = 400;

const SCHEMAS: &[&str] = &[
    "schema = \"lazaret-trusted-host-config-v1\"",
    "schema = \"lazaret-trusted-host-config-v1\"",
    "schema = \"lazaret-trusted-host-config-v1\"",
    "schema = \"lazaret-trusted-host-config-v0\"",
    "schema = 1",
    "",
];

const HEADERS: &[&str] = &[
    "[storage]",
    "[network]",
    "[runtime]",
    "[profiles.dev]",
    "[profiles.dev]",
    "[profiles.dev]",
    "[profiles.other]",
    "[profiles.\"bad name\"]",
    "[profiles.dev.escalation]",
    "[profiles.dev.readiness]",
    "[[profiles.dev.volumes]]",
    "[[profiles.dev.volumes]]",
    "[profiles.dev.env]",
    "[[profiles.dev.escalation.auto_approve]]",
];

const KEYS: &[&str] = &[
    "image",
    "image",
    "image",
    "data_root",
    "default_allow",
    "default_deny",
    "runsc_dcache",
    "isolate_gitignored",
    "persistent_dirs",
    "allow_egress",
    "deny_egress",
    "host",
    "container",
    "kind",
    "access",
    "create",
    "enabled",
    "executable",
    "args",
    "allow_extra_args",
    "denied",
    "permitted",
    "dns",
    "TOKEN",
    "unknown_key",
    "isolate-gitignored",
];

const VALUES: &[&str] = &[
    "\"registry.example/img:1\"",
    "\"\"",
    "\"/srv/data\"",
    "\"~/x\"",
    "\"{profile_dir}/cache\"",
    "\"rel/path\"",
    "\"/root/data\"",
    "\"/workspace\"",
    "\"/\"",
    "\"directory\"",
    "\"file\"",
    "\"dir\"",
    "\"read-only\"",
    "\"env:HOST_TOKEN\"",
    "\"literal\"",
    "true",
    "false",
    "0",
    "50000",
    "262145",
    "-1",
    "[]",
    "[\"1.1.1.0/24\"]",
    "[\"10.137.54.0/24\"]",
    "[\"172.16.0.0/12\"]",
    "[\"1.2.3.4/33\"]",
    "[\"/root\", \"/root/x\"]",
    "[\"/data\"]",
    "[\"fetch\"]",
    "[{ address = \"10.1.2.3\", port = 80 }]",
    "[{ address = \"1.1.1.1\", port = 0 }]",
    "[{ resolver = \"10.137.54.3\", query = \"example.com\" }]",
    "{ TOKEN = \"env:X\" }",
    "\"\\u0000\"",
    "1979-05-27T07:32:00Z",
    "{ a = 1 }",
];

/// Lines that are valid inside `[profiles.dev]` on their own.
const GOOD_PROFILE_LINES: &[&str] = &[
    "isolate_gitignored = false",
    "persistent_dirs = [\"/data\", \"/root\"]",
    "allow_egress = [\"1.1.1.0/24\", \"172.16.9.0/24\"]",
    "deny_egress = [\"9.9.9.0/24\", \"10.137.0.0/16\"]",
    "env = { TOKEN = \"env:HOST_TOKEN\" }",
    "volumes = [{ host = \"/srv/a\", container = \"/root/a\", kind = \"directory\" }]",
    "escalation = { enabled = true, auto_approve = [{ executable = \"/usr/bin/git\", args = [\"fetch\"] }] }",
];

/// A generated document.
#[derive(Debug, Clone)]
struct Doc(Vec<u8>);

fn pick<'a>(g: &mut Gen, items: &'a [&'a str]) -> &'a str {
    g.choose(items).copied().unwrap_or_default()
}

impl Arbitrary for Doc {
    fn arbitrary(g: &mut Gen) -> Self {
        let mut text = String::new();
        if bool::arbitrary(g) {
            text.push_str(SCHEMAS[0]);
            text.push_str("\n[profiles.dev]\nimage = \"registry.example/img:1\"\n");
            let mut used: Vec<&str> = Vec::new();
            for _ in 0..usize::arbitrary(g) % 5 {
                let line = pick(g, GOOD_PROFILE_LINES);
                if !used.contains(&line) {
                    used.push(line);
                    text.push_str(line);
                    text.push('\n');
                }
            }
        } else {
            text.push_str(pick(g, SCHEMAS));
            text.push('\n');
        }
        let sections = usize::arbitrary(g) % 6;
        for _ in 0..sections {
            text.push_str(pick(g, HEADERS));
            text.push('\n');
            let lines = usize::arbitrary(g) % 5;
            for _ in 0..lines {
                text.push_str(&format!("{} = {}\n", pick(g, KEYS), pick(g, VALUES)));
            }
        }
        // Mutate some documents byte-wise.
        let mutations = if bool::arbitrary(g) {
            0
        } else {
            usize::arbitrary(g) % 4
        };
        let mut bytes = text.into_bytes();
        for _ in 0..mutations {
            if bytes.is_empty() {
                break;
            }
            let at = usize::arbitrary(g) % bytes.len();
            let noise = *g.choose(b"[]{}\"'=.,\n #\\/0aZ\xff").unwrap_or(&b' ');
            match u8::arbitrary(g) % 3 {
                0 => bytes.insert(at, noise),
                1 => {
                    bytes.remove(at);
                }
                _ => bytes[at] = noise,
            }
        }
        Doc(bytes)
    }

    fn shrink(&self) -> Box<dyn Iterator<Item = Self>> {
        let lines: Vec<Vec<u8>> = self.0.split(|b| *b == b'\n').map(<[u8]>::to_vec).collect();
        Box::new((0..lines.len()).map(move |skip| {
            Doc(lines
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != skip)
                .flat_map(|(_, l)| l.iter().copied().chain([b'\n']))
                .collect())
        }))
    }
}

/// The verdict for `text`, as a comparable string; fingerprints successful
/// selections too.
fn verdict(text: &[u8]) -> String {
    let Ok(layout) = SandboxLayoutV1::production() else {
        return "layout".to_owned();
    };
    match decode_document(text).and_then(|d| d.select("dev", &layout)) {
        Ok(selected) => {
            let record = ConfigurationFingerprintRecordV1::new(
                &selected,
                b"/s".to_vec(),
                b"/r".to_vec(),
                vec![],
                vec![],
            );
            format!(
                "ok {:?} {:?} {}",
                record.fingerprint().map(|f| f.to_string()),
                selected,
                selected.derived_policy().digest()
            )
        }
        Err(e) => format!("err {e}"),
    }
}

static ACCEPTED: AtomicU64 = AtomicU64::new(0);

fn no_panic_and_deterministic(doc: Doc) -> TestResult {
    let first = catch_unwind(AssertUnwindSafe(|| verdict(&doc.0)));
    let second = catch_unwind(AssertUnwindSafe(|| verdict(&doc.0)));
    match (first, second) {
        (Ok(a), Ok(b)) => {
            if a.starts_with("ok") {
                ACCEPTED.fetch_add(1, Ordering::Relaxed);
            }
            TestResult::from_bool(a == b)
        }
        _ => TestResult::error(format!("panicked on {:?}", String::from_utf8_lossy(&doc.0))),
    }
}

fn cases() -> u64 {
    std::env::var("LAZARET_SOAK_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(NORMAL_CASES)
}

#[test]
fn generated_and_mutated_documents_never_panic_and_are_deterministic() {
    let n = cases();
    let started = Instant::now();
    QuickCheck::new()
        .tests(n)
        .max_tests(n * 2)
        .quickcheck(no_panic_and_deterministic as fn(Doc) -> TestResult);
    let accepted = ACCEPTED.load(Ordering::Relaxed);
    eprintln!(
        "config properties: {n} cases, {accepted} accepted, {:.1} s",
        started.elapsed().as_secs_f64()
    );
    // The generator must reach both verdicts, or the property says little.
    assert!(accepted > 0, "no generated document was accepted");
    assert!(accepted < n, "every generated document was accepted");
}

/// Accepted host and sandbox paths satisfy the grammar's invariants, and
/// parsing never panics on any string.
fn path_grammar_invariants(s: String) -> bool {
    use lazaret_runtime::config::{HostPathDecl, KeyPath, SandboxPath};
    let key = KeyPath::root();
    let clean = |p: &str| {
        !p.is_empty()
            && p.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
            && !p.contains(['$', '*', '?', '[', ']', '{', '}', '\0'])
    };
    let host_ok = match HostPathDecl::parse_volume(&key, &s) {
        Ok(HostPathDecl::Absolute(p)) => p == s && clean(&p[1..]),
        Ok(HostPathDecl::Home(rest)) => s == format!("~/{rest}") && clean(&rest),
        Ok(HostPathDecl::ProfileDir(rest)) => {
            s == format!("{{profile_dir}}/{rest}") && clean(&rest)
        }
        Err(_) => true,
    };
    let sandbox_ok = match SandboxPath::parse(&key, &s) {
        Ok(p) => p.as_str() == s && clean(&s[1..]) && p.overlaps(&p) && !p.strictly_contains(&p),
        Err(_) => true,
    };
    host_ok && sandbox_ok
}

#[test]
fn accepted_paths_satisfy_the_grammar() {
    QuickCheck::new()
        .tests(2000)
        .quickcheck(path_grammar_invariants as fn(String) -> bool);
    // Generated strings are mostly rejected; check the accepting side too.
    for s in ["/a/b", "~/x y", "{profile_dir}/c/d"] {
        assert!(path_grammar_invariants(s.to_owned()));
    }
}

/// Every prefix displays in a form that parses back to itself, with host
/// bits cleared.
fn prefix_round_trip(address: u32, len: u8) -> bool {
    use lazaret_runtime::config::{Ipv4Prefix, KeyPath};
    let len = len % 33;
    let p = Ipv4Prefix::new(address.to_be_bytes(), len);
    let host_bits_clear = len == 32 || u32::from_be_bytes(p.network()) & (u32::MAX >> len) == 0;
    Ipv4Prefix::parse(&KeyPath::root(), &p.to_string()) == Ok(p)
        && host_bits_clear
        && p.contains(&p)
}

#[test]
fn prefixes_round_trip() {
    QuickCheck::new()
        .tests(2000)
        .quickcheck(prefix_round_trip as fn(u32, u8) -> bool);
}
