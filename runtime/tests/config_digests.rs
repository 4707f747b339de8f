//! Digest test vectors (schemas.md "Domain and configuration digests",
//! "Derived network policy"; spec README `runsc_dcache` decision). Each
//! expected value is computed here independently — the framed preimage or
//! Postcard bytes are written out by hand from the schema's rules and hashed
//! with sha2 — and must also equal the hex published in
//! docs/config-test-vectors.md.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // tests fail by panicking
use lazaret_runtime::config::KeyPath;
use lazaret_runtime::config::{
    decode_document, ConfigurationFingerprintRecordV1, DomainIdV1, ProfileName,
    ResolvedAutoApprovalRule, ResolvedVolume, SandboxLayoutV1, SelectedProfileV1, VolumeAccess,
    VolumeKind,
};
use sha2::{Digest, Sha256};

const PUBLISHED: &str = include_str!("../../docs/config-test-vectors.md");

/// The hex published for `name` in the docs (a line `name: HEX`).
fn published(name: &str) -> String {
    let prefix = format!("{name}: ");
    PUBLISHED
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|| panic!("{name} is not published in docs/config-test-vectors.md"))
}

fn sha_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// bytes(x) = u32be(len) || x
fn b(x: &[u8]) -> Vec<u8> {
    let mut v = u32::try_from(x.len())
        .expect("u32 length")
        .to_be_bytes()
        .to_vec();
    v.extend_from_slice(x);
    v
}

/// list of items: u32be(count) || bytes(item)..., items sorted bytewise.
fn sorted_list(mut items: Vec<Vec<u8>>) -> Vec<u8> {
    items.sort();
    ordered_list(items)
}

fn ordered_list(items: Vec<Vec<u8>>) -> Vec<u8> {
    let mut v = u32::try_from(items.len())
        .expect("u32 count")
        .to_be_bytes()
        .to_vec();
    for i in items {
        v.extend(b(&i));
    }
    v
}

fn select(text: &str, profile: &str) -> SelectedProfileV1 {
    let layout = SandboxLayoutV1::production().expect("layout");
    decode_document(text.as_bytes())
        .expect("decode")
        .select(profile, &layout)
        .expect("select")
}

const STORAGE: &[u8] = b"/home/user/.local/share/lazaret";
const RUNTIME: &[u8] = b"/run/user/1000/lazaret";

/// The TOML input published under the docs heading `heading`: the one
/// ```toml block between that heading and the next. The vectors are
/// computed from these blocks, so the published inputs and hex values
/// cannot diverge.
fn published_toml(heading: &str) -> &'static str {
    let at = PUBLISHED
        .find(heading)
        .unwrap_or_else(|| panic!("{heading:?} is not a heading of the vectors page"));
    let section = &PUBLISHED[at + heading.len()..];
    let section = section.find("\n#").map_or(section, |next| &section[..next]);
    let fence = "```toml\n";
    let open = section
        .find(fence)
        .unwrap_or_else(|| panic!("no ```toml block under {heading:?}"))
        + fence.len();
    let len = section[open..]
        .find("```")
        .unwrap_or_else(|| panic!("unterminated ```toml block under {heading:?}"));
    assert_eq!(
        section.matches(fence).count(),
        1,
        "exactly one ```toml block under {heading:?}"
    );
    &section[open..open + len]
}

/// The `minimal` vector's input (profile `dev`).
fn minimal() -> &'static str {
    published_toml("### minimal (profile `dev`)")
}

/// The `full` vector's input (profile `full`).
fn full() -> &'static str {
    published_toml("### full (profile `full`)")
}

/// The page publishes exactly the two inputs, each a complete v1 document
/// defining only its vector's profile, and the vectors below are computed
/// from them.
#[test]
fn the_published_inputs_are_the_vector_inputs() {
    assert_eq!(PUBLISHED.matches("```toml").count(), 2);
    for (text, profile) in [(minimal(), "dev"), (full(), "full")] {
        assert!(
            text.starts_with("schema = \"lazaret-trusted-host-config-v1\"\n")
                && text.ends_with('\n'),
            "{profile}: {text:?}"
        );
        let layout = SandboxLayoutV1::production().expect("layout");
        let doc = decode_document(text.as_bytes()).expect("decode");
        let e = doc
            .select("other", &layout)
            .expect_err("one profile")
            .to_string();
        assert!(
            e.contains(&format!("one of the tables under `profiles`: {profile}")),
            "{e}"
        );
        assert_eq!(select(text, profile).name().as_str(), profile);
    }
    // The full input exercises what its vector claims to cover.
    for fragment in [
        "runsc_dcache = 1234",
        "allow_extra_args = true",
        "create = true",
        "[profiles.full.readiness]",
    ] {
        assert!(full().contains(fragment), "{fragment}");
    }
}

fn full_volumes() -> Vec<ResolvedVolume> {
    vec![
        ResolvedVolume {
            canonical_host_source: b"/home/user/.local/share/lazaret/profiles/full/cache".to_vec(),
            container_path: "/root/.cache".to_owned(),
            kind: VolumeKind::Directory,
            access: VolumeAccess::ReadWrite,
            create: true,
        },
        ResolvedVolume {
            canonical_host_source: b"/home/user/.gitconfig".to_vec(),
            container_path: "/root/.gitconfig".to_owned(),
            kind: VolumeKind::File,
            access: VolumeAccess::ReadOnly,
            create: false,
        },
    ]
}

fn full_rules() -> Vec<ResolvedAutoApprovalRule> {
    vec![
        ResolvedAutoApprovalRule {
            canonical_executable: b"/usr/bin/git".to_vec(),
            args: vec!["fetch".to_owned(), "--all".to_owned()],
            allow_extra_args: true,
        },
        ResolvedAutoApprovalRule {
            canonical_executable: b"/usr/bin/make".to_vec(),
            args: vec![],
            allow_extra_args: false,
        },
    ]
}

#[test]
fn domain_id_vector() {
    let mut pre = b"lazaret-domain-id-v1\0".to_vec();
    assert_eq!(pre.len(), 21);
    pre.extend(b(b"dev"));
    pre.extend(b(b"/home/user/project"));
    let expected = sha_hex(&pre);
    let name = ProfileName::parse(&KeyPath::root(), "dev").expect("name");
    let got = DomainIdV1::compute(&name, b"/home/user/project")
        .expect("domain id")
        .to_string();
    assert_eq!(got, expected);
    assert_eq!(got, published("domain-id-v1/dev"));
    // Framing matters: moving a byte between the fields changes the ID.
    let shifted = ProfileName::parse(&KeyPath::root(), "de").expect("name");
    assert_ne!(
        DomainIdV1::compute(&shifted, b"v/home/user/project")
            .expect("id")
            .to_string(),
        got
    );
}

fn prefix(a: [u8; 4], len: u8) -> Vec<u8> {
    vec![a[0], a[1], a[2], a[3], len]
}

const RFC1918_DENY: [([u8; 4], u8); 3] = [
    ([10, 0, 0, 0], 8),
    ([172, 16, 0, 0], 12),
    ([192, 168, 0, 0], 16),
];

#[test]
fn minimal_fingerprint_vector() {
    let mut pre = b"lazaret-configuration-fingerprint-v1\0".to_vec();
    pre.extend(b(b"dev"));
    pre.extend(b(STORAGE));
    pre.extend(b(RUNTIME));
    pre.extend(b(b"registry.example/dev:1"));
    pre.push(1); // isolate_gitignored default true
                 // schemas.md: "A persistent-path item is bytes(path)", and a list frames
                 // each item encoding again: u32be(count) || bytes(bytes(path))...,
                 // sorted by the complete (length-prefixed) item encodings.
    pre.extend(sorted_list(
        ["/root", "/usr", "/var", "/etc", "/opt"]
            .iter()
            .map(|p| b(p.as_bytes()))
            .collect(),
    ));
    pre.extend(sorted_list(vec![])); // env
    pre.extend(sorted_list(vec![])); // volumes
    pre.extend(sorted_list(vec![])); // allow
    pre.extend(sorted_list(
        RFC1918_DENY.iter().map(|(a, l)| prefix(*a, *l)).collect(),
    ));
    pre.push(0); // escalation disabled
    pre.extend(sorted_list(vec![])); // rules
    pre.extend(50_000u32.to_be_bytes());
    let expected = sha_hex(&pre);

    let s = select(minimal(), "dev");
    let record = ConfigurationFingerprintRecordV1::new(
        &s,
        STORAGE.to_vec(),
        RUNTIME.to_vec(),
        vec![],
        vec![],
    );
    assert_eq!(record.preimage().expect("preimage"), pre);
    let got = record.fingerprint().expect("fingerprint").to_string();
    assert_eq!(got, expected);
    assert_eq!(got, published("configuration-fingerprint-v1/minimal"));
}

#[test]
fn full_fingerprint_vector() {
    let mut pre = b"lazaret-configuration-fingerprint-v1\0".to_vec();
    pre.extend(b(b"full"));
    pre.extend(b(STORAGE));
    pre.extend(b(RUNTIME));
    pre.extend(b(b"registry.example/full@sha256:00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff"));
    pre.push(0);
    pre.extend(sorted_list(vec![b(b"/usr"), b(b"/root")]));
    let env = |s: &[u8], h: &[u8]| [b(s), b(h)].concat();
    pre.extend(sorted_list(vec![
        env(b"TOKEN", b"HOST_TOKEN"),
        env(b"A_NAME", b"HOST_A"),
    ]));
    let vol = |host: &[u8], c: &[u8], kind: u8, access: u8, create: u8| {
        [b(host), b(c), vec![kind, access, create]].concat()
    };
    pre.extend(sorted_list(vec![
        vol(
            b"/home/user/.local/share/lazaret/profiles/full/cache",
            b"/root/.cache",
            1,
            1,
            1,
        ),
        vol(b"/home/user/.gitconfig", b"/root/.gitconfig", 0, 0, 0),
    ]));
    pre.extend(sorted_list(vec![
        prefix([1, 1, 1, 0], 24),
        prefix([172, 16, 5, 0], 24),
    ]));
    let mut deny: Vec<Vec<u8>> = RFC1918_DENY.iter().map(|(a, l)| prefix(*a, *l)).collect();
    deny.push(prefix([9, 9, 9, 9], 32));
    deny.push(prefix([8, 8, 4, 0], 24));
    pre.extend(sorted_list(deny));
    pre.push(1);
    let rule = |exe: &[u8], args: &[&str], extra: u8| {
        [
            b(exe),
            // "an argument item is bytes(arg)", framed again by the list.
            ordered_list(args.iter().map(|a| b(a.as_bytes())).collect()),
            vec![extra],
        ]
        .concat()
    };
    pre.extend(sorted_list(vec![
        rule(b"/usr/bin/git", &["fetch", "--all"], 1),
        rule(b"/usr/bin/make", &[], 0),
    ]));
    pre.extend(1234u32.to_be_bytes());
    let expected = sha_hex(&pre);

    let s = select(full(), "full");
    let record = ConfigurationFingerprintRecordV1::new(
        &s,
        STORAGE.to_vec(),
        RUNTIME.to_vec(),
        full_volumes(),
        full_rules(),
    );
    assert_eq!(record.preimage().expect("preimage"), pre);
    let got = record.fingerprint().expect("fingerprint").to_string();
    assert_eq!(got, expected);
    assert_eq!(got, published("configuration-fingerprint-v1/full"));

    // Argument order inside a rule is significant; list order is not.
    let mut swapped_args = full_rules();
    swapped_args[0].args.reverse();
    let r2 = ConfigurationFingerprintRecordV1::new(
        &s,
        STORAGE.to_vec(),
        RUNTIME.to_vec(),
        full_volumes(),
        swapped_args,
    );
    assert_ne!(r2.fingerprint().expect("fp").to_string(), got);
    let mut reordered = full_rules();
    reordered.reverse();
    let mut vols = full_volumes();
    vols.reverse();
    let r3 = ConfigurationFingerprintRecordV1::new(
        &s,
        STORAGE.to_vec(),
        RUNTIME.to_vec(),
        vols,
        reordered,
    );
    assert_eq!(r3.fingerprint().expect("fp").to_string(), got);
}

fn fingerprint_of(text: &str, profile: &str) -> String {
    let s = select(text, profile);
    ConfigurationFingerprintRecordV1::new(&s, STORAGE.to_vec(), RUNTIME.to_vec(), vec![], vec![])
        .fingerprint()
        .expect("fp")
        .to_string()
}

#[test]
fn defaults_and_explicit_equal_values_give_the_same_fingerprint() {
    let explicit = r#"schema = "lazaret-trusted-host-config-v1"
# a comment
[storage]
[network]
default_allow = []
default_deny = ["10.0.0.0/8"]
[runtime]
runsc_dcache = 50000
[profiles.other]
image = "x"
[profiles.dev]
image = "registry.example/dev:1"
isolate_gitignored = true
persistent_dirs = ["/opt", "/etc", "/var", "/usr", "/root"]
allow_egress = []
deny_egress = []
env = {}
volumes = []
[profiles.dev.escalation]
enabled = false
auto_approve = []
[profiles.dev.readiness]
denied = [{ address = "10.1.2.3", port = 80 }]
permitted = [{ address = "1.1.1.1", port = 443 }]
dns = [{ resolver = "10.137.54.3", query = "example.com" }]
"#;
    assert_eq!(
        fingerprint_of(explicit, "dev"),
        fingerprint_of(minimal(), "dev")
    );
    // Changing runsc_dcache changes it.
    let changed = minimal().replace(
        "[profiles.dev]",
        "[runtime]\nrunsc_dcache = 50001\n[profiles.dev]",
    );
    assert_ne!(
        fingerprint_of(&changed, "dev"),
        fingerprint_of(minimal(), "dev")
    );
}

/// Postcard varints below 128 are one byte; the hand encoding relies on it.
fn postcard_policy(rules: &[([u8; 4], u8, u8)]) -> Vec<u8> {
    let id = b"lazaret-derived-network-policy-v1";
    let mut v = vec![u8::try_from(id.len()).expect("one-byte varint")];
    v.extend_from_slice(id);
    v.extend([2, 0, 0, 1, 1]); // [IPv4 Enabled, IPv6 Disabled]
    v.extend([1, 0, 0]); // [IPv4 Allow]
    v.push(u8::try_from(rules.len()).expect("one-byte varint"));
    for (a, len, action) in rules {
        v.extend([0, 4, a[0], a[1], a[2], a[3], *len, *action]);
    }
    v.extend([1, 0, 4, 10, 137, 54, 3]); // resolver 10.137.54.3
    v
}

fn policy_digest(canonical: &[u8]) -> String {
    let mut pre = b"lazaret-derived-network-policy-v1\0".to_vec();
    pre.extend_from_slice(canonical);
    sha_hex(&pre)
}

const ALLOW: u8 = 0;
const DENY: u8 = 1;

#[test]
fn minimal_policy_vector() {
    let rules = [
        ([10, 0, 0, 0], 8, DENY),
        ([10, 137, 54, 2], 32, ALLOW),
        ([10, 137, 54, 3], 32, ALLOW),
        ([10, 137, 55, 0], 29, DENY),
        ([10, 137, 55, 2], 32, ALLOW),
        ([172, 16, 0, 0], 12, DENY),
        ([192, 168, 0, 0], 16, DENY),
    ];
    let bytes = postcard_policy(&rules);
    let s = select(minimal(), "dev");
    assert_eq!(s.derived_policy().canonical_bytes(), bytes);
    let got = s.derived_policy().digest().to_string();
    assert_eq!(got, policy_digest(&bytes));
    assert_eq!(got, published("derived-network-policy-v1/minimal"));
}

#[test]
fn full_policy_vector() {
    let rules = [
        ([1, 1, 1, 0], 24, ALLOW),
        ([8, 8, 4, 0], 24, DENY),
        ([9, 9, 9, 9], 32, DENY),
        ([10, 0, 0, 0], 8, DENY),
        ([10, 137, 54, 2], 32, ALLOW),
        ([10, 137, 54, 3], 32, ALLOW),
        ([10, 137, 55, 0], 29, DENY),
        ([10, 137, 55, 2], 32, ALLOW),
        ([172, 16, 0, 0], 12, DENY),
        ([172, 16, 5, 0], 24, ALLOW),
        ([192, 168, 0, 0], 16, DENY),
    ];
    let bytes = postcard_policy(&rules);
    let s = select(full(), "full");
    assert_eq!(s.derived_policy().canonical_bytes(), bytes);
    let got = s.derived_policy().digest().to_string();
    assert_eq!(got, policy_digest(&bytes));
    assert_eq!(got, published("derived-network-policy-v1/full"));
}

#[test]
fn canonical_policy_bytes_round_trip_and_non_canonical_bytes_are_refused() {
    use lazaret_runtime::config::DerivedNetworkPolicy;
    let s = select(full(), "full");
    let bytes = s.derived_policy().canonical_bytes();
    assert_eq!(
        &DerivedNetworkPolicy::from_canonical_bytes(&bytes).expect("round trip"),
        s.derived_policy()
    );
    let mut trailing = bytes.clone();
    trailing.push(0);
    assert!(DerivedNetworkPolicy::from_canonical_bytes(&trailing).is_err());
    // Swap the first two prefix rules: unsorted.
    let rules = [
        ([8, 8, 4, 0], 24, DENY),
        ([1, 1, 1, 0], 24, ALLOW),
        ([10, 0, 0, 0], 8, DENY),
    ];
    assert!(DerivedNetworkPolicy::from_canonical_bytes(&postcard_policy(&rules)).is_err());
    // Equal prefix with both actions: refused.
    let rules = [([1, 1, 1, 0], 24, ALLOW), ([1, 1, 1, 0], 24, DENY)];
    assert!(DerivedNetworkPolicy::from_canonical_bytes(&postcard_policy(&rules)).is_err());
    // Host bits set: refused.
    let rules = [([1, 1, 1, 1], 24, ALLOW)];
    assert!(DerivedNetworkPolicy::from_canonical_bytes(&postcard_policy(&rules)).is_err());
    let rules = [([1, 1, 1, 0], 24, ALLOW)];
    assert!(DerivedNetworkPolicy::from_canonical_bytes(&postcard_policy(&rules)).is_ok());
}

/// The dentry cache runsc gets is the configured one, at most a quarter of
/// the descriptor budget (each retained dentry holds host descriptors):
/// the default 50,000 under a hard limit of 20,000 becomes 5,000; an
/// unlimited or large budget keeps the configured value, 0 stays 0.
#[test]
fn the_dentry_cache_stays_within_the_descriptor_budget() {
    use lazaret_runtime::config::{effective_dcache, RUNSC_DCACHE_DEFAULT, RUNSC_DCACHE_MAX};
    assert_eq!(effective_dcache(RUNSC_DCACHE_DEFAULT, 20_000), 5_000);
    assert_eq!(effective_dcache(RUNSC_DCACHE_DEFAULT, 1_048_576), 50_000);
    assert_eq!(
        effective_dcache(RUNSC_DCACHE_MAX, u64::MAX),
        RUNSC_DCACHE_MAX
    );
    assert_eq!(effective_dcache(0, 20_000), 0);
    assert_eq!(effective_dcache(1_000, 1_024), 256);
}
