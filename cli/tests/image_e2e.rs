//! Images as users name them, pulled from a real `docker-registry` on
//! loopback (spec 3.6 "Prepared lower": preparation resolves the selected
//! base image): TLS from a CA the test makes, trusted through the
//! containers `certs.d` convention; htpasswd basic auth with credentials
//! from the user's auth file, never echoed; digests verified while
//! streaming; a multi-platform index resolved to this host's platform; a
//! pull killed mid-layer that a later pull completes; and a launch from the
//! pulled image. `lazaret` runs as the unprivileged test user.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

mod support;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use base64::Engine as _;
use lazaret_conformance::fixtures::{
    layered_layout, multi_platform_layout, sh, Registry, RegistryOptions, TestCa, TokenServer,
};
use support::{chown_tree, default_image, text, Env, ONE_AT_A_TIME};

const USER: &str = "agent";
const PASSWORD: &str = "s3cret-Pa55";

/// A directory for the registry and image fixtures (root's, outside HOME).
fn fixture_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(format!("/tmp/lazaret-image-e2e-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Trusts `ca` for `addr` the way podman users do:
/// `~/.config/containers/certs.d/ADDR/ca.crt`.
fn trust(env: &Env, addr: &str, ca: &TestCa) {
    let dir = env.home.join(".config/containers/certs.d").join(addr);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("ca.crt"), &ca.cert_pem).unwrap();
    chown_tree(&env.home.join(".config/containers"));
}

/// Writes the user's persistent containers auth file
/// (`~/.config/containers/auth.json`, as `podman login --authfile` does)
/// with `user:password` for `addr`.
fn login(env: &Env, addr: &str, user: &str, password: &str) -> PathBuf {
    let dir = env.home.join(".config/containers");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("auth.json");
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    std::fs::write(
        &file,
        serde_json::json!({ "auths": { addr: { "auth": auth } } }).to_string(),
    )
    .unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    chown_tree(&dir);
    file
}

/// A registry under `dir` serving HTTPS with a certificate from a new CA,
/// requiring [`USER`] and [`PASSWORD`].
fn tls_registry(dir: &std::path::Path) -> (TestCa, Registry) {
    let ca = TestCa::new().unwrap();
    let registry = Registry::start_with(
        &dir.join("registry"),
        &RegistryOptions {
            tls: Some(&ca),
            basic_auth: Some((USER, PASSWORD)),
            token: None,
        },
    )
    .unwrap();
    (ca, registry)
}

/// The blob store of the scenario's Storage Root.
fn store(env: &Env) -> PathBuf {
    env.home.join(".local/share/lazaret/blobs")
}

fn stored(env: &Env, digest: &str) -> bool {
    store(env)
        .join("blobs/sha256")
        .join(digest.trim_start_matches("sha256:"))
        .is_file()
}

/// `lazaret image pull REF`: (success, stdout, stderr).
fn pull(env: &Env, reference: &str) -> (bool, String, String) {
    let out = env.run(&["image", "pull", "--quiet", reference]);
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

/// The manifest digest `lazaret image pull` printed after the reference.
fn printed_digest(stdout: &str, reference: &str) -> String {
    let line = stdout.lines().next().unwrap_or_default();
    let (shown, digest) = line.split_once(' ').unwrap_or_default();
    assert_eq!(shown, reference, "{stdout}");
    assert!(
        digest.starts_with("sha256:") && digest.len() == 71,
        "{stdout}"
    );
    digest.to_owned()
}

/// The layer digests of a stored manifest.
fn layers(env: &Env, manifest: &str) -> Vec<String> {
    let path = store(env)
        .join("blobs/sha256")
        .join(manifest.trim_start_matches("sha256:"));
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    doc["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["digest"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn tls_and_basic_auth_pull_by_tag_and_digest_and_refuse_what_they_must() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let env = Env::new("image-tls", "oci:/nonexistent:x");
    let dir = fixture_dir("tls");
    let image = layered_layout(&dir).unwrap();
    let (ca, registry) = tls_registry(&dir);
    registry.push(&image, "team/tool:v1").unwrap();
    let by_tag = format!("{}/team/tool:v1", registry.addr);

    // The CA is not trusted yet: the certificate is refused, and the
    // message says where a private registry's CA goes.
    let (ok, _, err) = pull(&env, &by_tag);
    assert!(!ok);
    assert!(
        err.contains(&registry.addr)
            && err.contains("containers/certs.d")
            && err.contains("ca.crt"),
        "{err}"
    );

    // Another CA in the registry's certs.d: HTTPS is used, the server's
    // certificate is refused, and the CA file that was used is named.
    trust(&env, &registry.addr, &TestCa::new().unwrap());
    let (ok, _, err) = pull(&env, &by_tag);
    assert!(!ok);
    let ca_file = env
        .home
        .join(".config/containers/certs.d")
        .join(&registry.addr)
        .join("ca.crt");
    assert!(
        err.contains("certificate")
            && err.contains(&format!("CA files used: {}", ca_file.display())),
        "{err}"
    );

    // Trusted, but no credentials: the registry and every auth file
    // consulted are named.
    trust(&env, &registry.addr, &ca);
    let (ok, _, err) = pull(&env, &by_tag);
    assert!(!ok);
    let auth_file = env.home.join(".config/containers/auth.json");
    assert!(
        err.contains("requires authentication")
            && err.contains(&registry.addr)
            && err.contains(
                &env.home
                    .join("run/containers/auth.json")
                    .display()
                    .to_string()
            )
            && err.contains(&auth_file.display().to_string())
            && err.contains(".docker/config.json"),
        "{err}"
    );

    // A wrong password: refused, naming the file the credentials came
    // from, and neither password appears anywhere.
    login(&env, &registry.addr, USER, "wrong-Pa55");
    let (ok, out, err) = pull(&env, &by_tag);
    assert!(!ok);
    assert!(
        err.contains("refused the credentials from")
            && err.contains(&auth_file.display().to_string())
            && err.contains(&registry.addr),
        "{err}"
    );
    for secret in ["wrong-Pa55", PASSWORD] {
        assert!(!err.contains(secret) && !out.contains(secret), "{err}");
    }

    // The right password: by tag, then by the digest it resolved to.
    login(&env, &registry.addr, USER, PASSWORD);
    let (ok, out, err) = pull(&env, &by_tag);
    assert!(ok, "{err}");
    assert!(!err.contains(PASSWORD) && !out.contains(PASSWORD));
    let digest = printed_digest(&out, &by_tag);
    assert!(stored(&env, &digest));
    let pulled_layers = layers(&env, &digest);
    assert_eq!(pulled_layers.len(), 2);
    assert!(pulled_layers.iter().all(|l| stored(&env, l)));
    let by_digest = format!("{}/team/tool@{digest}", registry.addr);
    let (ok, out, err) = pull(&env, &by_digest);
    assert!(ok, "{err}");
    assert_eq!(printed_digest(&out, &by_digest), digest);

    // Progress: nothing on a non-terminal even without --quiet; on a
    // terminal the manifest, each layer, then the unpack.
    let out = env.run(&["image", "pull", &by_tag]);
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{}",
        text(&out.stderr)
    );
    let out = env.run_on_terminal(&["image", "pull", &by_tag]);
    let shown = text(&out.stdout);
    assert!(out.status.success(), "{shown}");
    assert!(
        shown.contains(&format!("manifest {}", &digest[7..19]))
            && shown.contains("layer 1/2")
            && shown.contains("layer 2/2")
            && shown.contains("already present")
            && shown.contains("root file system"),
        "{shown}"
    );
    let out = env.run_on_terminal(&["image", "pull", "--quiet", &by_tag]);
    let shown = text(&out.stdout);
    assert!(
        out.status.success() && !shown.contains("layer 1/2"),
        "{shown}"
    );

    // A tag and digest together: the digest decides (docker's rule).
    let both = format!("{}/team/tool:other@{digest}", registry.addr);
    let (ok, out, err) = pull(&env, &both);
    assert!(ok, "{err}");
    assert_eq!(printed_digest(&out, &by_digest), digest);

    // A digest the registry's manifest does not have is refused.
    let wrong = format!("{}/team/tool@sha256:{}", registry.addr, "0".repeat(64));
    let (ok, _, err) = pull(&env, &wrong);
    assert!(!ok && err.contains("answered 404"), "{err}");

    // A tampered blob: the registry serves other bytes of the same size
    // for a layer; the pull refuses it and stores nothing under its name.
    let layer = &pulled_layers[1];
    let blob = registry.blob_path(layer);
    let mut bytes = std::fs::read(&blob).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&blob, &bytes).unwrap();
    let local = store(&env)
        .join("blobs/sha256")
        .join(layer.trim_start_matches("sha256:"));
    std::fs::remove_file(&local).unwrap();
    let (ok, _, err) = pull(&env, &by_tag);
    assert!(!ok);
    assert!(
        err.contains("does not match its descriptor") && err.contains(layer),
        "{err}"
    );
    assert!(!stored(&env, layer));
    let incoming = std::fs::read_dir(store(&env).join("incoming"))
        .unwrap()
        .count();
    assert_eq!(incoming, 0, "a refused blob leaves nothing staged");

    // `image ls` names both references of the one manifest; removing the
    // tag keeps every blob the digest reference still needs, removing that
    // frees them.
    let listed = image_list(&env);
    let references: Vec<&str> = listed
        .iter()
        .map(|i| i["reference"].as_str().unwrap())
        .collect();
    assert_eq!(references, vec![by_tag.as_str(), by_digest.as_str()]);
    assert!(listed
        .iter()
        .all(|i| i["manifest_digest"] == digest.as_str()));
    let out = env.run(&["image", "rm", &by_tag]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("0 blobs"),
        "{}",
        text(&out.stdout)
    );
    assert!(stored(&env, &digest) && stored(&env, &pulled_layers[0]));
    let out = env.run(&["image", "rm", &by_digest]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!stored(&env, &digest) && !stored(&env, &pulled_layers[0]));
    assert!(image_list(&env).is_empty());
    let left = std::fs::read_dir(store(&env).join("blobs/sha256"))
        .unwrap()
        .count();
    assert_eq!(left, 0, "no named image is left, so no blob is");
    let out = env.run(&["image", "rm", &by_digest]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains(&format!("no image {by_digest} in the Storage Root")),
        "{}",
        text(&out.stderr)
    );
    env.assert_nothing_running();
}

/// `lazaret image ls --json`'s rows.
fn image_list(env: &Env) -> Vec<serde_json::Value> {
    let out = env.run(&["image", "ls", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    doc["images"].as_array().unwrap().clone()
}

#[test]
fn bearer_tokens_anonymous_for_public_repositories_and_with_credentials_for_private_ones() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let env = Env::new("image-token", "oci:/nonexistent:x");
    let dir = fixture_dir("token");
    let image = layered_layout(&dir).unwrap();
    let token = TokenServer::start(&dir.join("token"), USER, PASSWORD).unwrap();
    let registry = Registry::start_with(
        &dir.join("registry"),
        &RegistryOptions {
            token: Some(&token),
            ..RegistryOptions::default()
        },
    )
    .unwrap();
    registry.push(&image, "public/tool:1").unwrap();
    registry.push(&image, "private/tool:1").unwrap();
    let pushed = token.issued();

    // Docker Desktop's default `credsStore` is no credential Lazaret can
    // use: pulls go on anonymously, and a refusal names the helper.
    let docker = env.home.join(".docker");
    std::fs::create_dir_all(&docker).unwrap();
    std::fs::write(docker.join("config.json"), r#"{"credsStore":"desktop"}"#).unwrap();
    chown_tree(&docker);

    // Docker Hub's flow: an anonymous token pulls a public repository.
    let public = format!("{}/public/tool:1", registry.addr);
    let (ok, out, err) = pull(&env, &public);
    assert!(ok, "{err}");
    printed_digest(&out, &public);
    assert!(token.issued().0 > pushed.0, "an anonymous token was issued");

    // A private repository: the anonymous token does not cover it, so
    // credentials are missing, and every auth file consulted is named.
    let private = format!("{}/private/tool:1", registry.addr);
    let (ok, _, err) = pull(&env, &private);
    assert!(!ok);
    assert!(
        err.contains("requires authentication")
            && err.contains(".docker/config.json")
            && err.contains("`docker-credential-desktop`"),
        "{err}"
    );

    // A wrong password is refused by the token server.
    let file = login(&env, &registry.addr, USER, "wrong-Pa55");
    let (ok, out, err) = pull(&env, &private);
    assert!(!ok);
    assert!(
        err.contains(&format!("refused the credentials from {}", file.display())),
        "{err}"
    );
    assert!(!err.contains("wrong-Pa55") && !out.contains("wrong-Pa55"));

    // The right one gets a token that pulls it.
    login(&env, &registry.addr, USER, PASSWORD);
    let before = token.issued().1;
    let (ok, out, err) = pull(&env, &private);
    assert!(ok, "{err}");
    printed_digest(&out, &private);
    assert!(
        token.issued().1 > before,
        "an authenticated token was issued"
    );
    env.assert_nothing_running();
}

/// `HTTPS_PROXY` is honoured for a registry that is not on loopback: the
/// pull asks the proxy (a loopback listener standing in for one, which
/// refuses) to CONNECT to the registry, and nothing else leaves the host.
#[test]
fn a_non_loopback_registry_is_reached_through_the_https_proxy() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let env = Env::new("image-proxy", "oci:/nonexistent:x");
    let proxy = TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy_url = format!("http://{}", proxy.local_addr().unwrap());
    let asked = std::thread::spawn(move || {
        let (mut conn, _) = proxy.accept().unwrap();
        let mut request = Vec::new();
        let mut buf = [0u8; 1024];
        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = conn.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            request.extend_from_slice(&buf[..n]);
        }
        conn.write_all(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
            .unwrap();
        String::from_utf8_lossy(&request).into_owned()
    });
    let out = env
        .command_env(
            &["image", "pull", "--quiet", "registry.example/team/tool:1"],
            &[("HTTPS_PROXY", &proxy_url)],
        )
        .output()
        .unwrap();
    assert!(!out.status.success());
    let request = asked.join().unwrap();
    assert!(
        request.starts_with("CONNECT registry.example:443 "),
        "{request}"
    );
    let err = text(&out.stderr);
    assert!(err.contains("registry.example"), "{err}");
    env.assert_nothing_running();
}

#[test]
fn a_multi_platform_index_resolves_to_this_hosts_platform() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let env = Env::new("image-platform", "oci:/nonexistent:x");
    let dir = fixture_dir("platform");
    layered_layout(&dir).unwrap();
    let host = lazaret_effects::image::platform::Platform::host();
    let registry = Registry::start(&dir.join("registry")).unwrap();

    // This host's entry is neither the first nor the only one.
    let (multi, digests) = multi_platform_layout(
        &dir,
        &dir.join("multi"),
        &[
            ("arm64", Some("v8")),
            (host.architecture.as_str(), None),
            ("s390x", None),
        ],
    )
    .unwrap();
    registry.push_all(&multi, "multi/img:1").unwrap();
    let reference = format!("{}/multi/img:1", registry.addr);
    let (ok, out, err) = pull(&env, &reference);
    assert!(ok, "{err}");
    assert_eq!(printed_digest(&out, &reference), digests[1]);

    // An index without this host's platform: the error lists what it has.
    let (other, _) = multi_platform_layout(
        &dir,
        &dir.join("other"),
        &[("riscv64", None), ("ppc64le", None)],
    )
    .unwrap();
    registry.push_all(&other, "multi/other:1").unwrap();
    let (ok, _, err) = pull(&env, &format!("{}/multi/other:1", registry.addr));
    assert!(!ok);
    assert!(
        err.contains(&format!("this host's platform {host}"))
            && err.contains("linux/riscv64, linux/ppc64le"),
        "{err}"
    );
    env.assert_nothing_running();
}

/// A loopback TCP relay to a plain-HTTP registry. It passes the server's
/// bytes on at about `bytes_per_second`; with `cut_first_after`, the first
/// connection that carries that many bytes from the server is closed
/// there. It notes whether any request asked for a byte range.
struct Relay {
    addr: String,
    saw_range: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Relay {
    fn start(upstream: String, bytes_per_second: usize, cut_first_after: Option<usize>) -> Relay {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let saw_range = Arc::new(AtomicBool::new(false));
        let cut_done = Arc::new(AtomicBool::new(cut_first_after.is_none()));
        let seen = saw_range.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let (mut c_in, mut s_out) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                let seen = seen.clone();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 8192];
                    while let Ok(n) = c_in.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        let request = String::from_utf8_lossy(&buf[..n]).to_ascii_lowercase();
                        if request.contains("\r\nrange: bytes=") {
                            seen.store(true, Ordering::SeqCst);
                        }
                        if s_out.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
                let (mut s_in, mut c_out) = (server, client);
                let cut_done = cut_done.clone();
                std::thread::spawn(move || {
                    let chunk = (bytes_per_second / 20).max(1);
                    let mut buf = vec![0u8; chunk];
                    let mut passed = 0usize;
                    loop {
                        match s_in.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                if c_out.write_all(&buf[..n]).is_err() {
                                    break;
                                }
                                passed += n;
                            }
                        }
                        if let Some(cut) = cut_first_after {
                            if passed >= cut && !cut_done.swap(true, Ordering::SeqCst) {
                                let _ = c_out.shutdown(std::net::Shutdown::Both);
                                let _ = s_in.shutdown(std::net::Shutdown::Both);
                                break;
                            }
                        }
                        std::thread::sleep(Duration::from_millis(50));
                    }
                });
            }
        });
        Relay { addr, saw_range }
    }
}

/// One layer of 8 MiB of random bytes (incompressible), pushed to a new
/// plain-HTTP registry under `dir` as `big/img:1`.
fn big_image_registry(dir: &std::path::Path) -> Registry {
    sh(
        dir,
        r#"
        mkdir -p big
        head -c 8388608 /dev/urandom > big/blob
        tar --owner=0 --group=0 --numeric-owner -C big -cf big.tar .
        umoci init --layout layout
        umoci new --image layout:big
        umoci raw add-layer --image layout:big big.tar
        umoci gc --layout layout
        rm -rf big big.tar
        "#,
    )
    .unwrap();
    let registry = Registry::start(&dir.join("registry")).unwrap();
    registry
        .push(&format!("oci:{}/layout:big", dir.display()), "big/img:1")
        .unwrap();
    registry
}

#[test]
fn a_dropped_connection_resumes_the_layer_with_a_range_request() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let env = Env::new("image-resume", "oci:/nonexistent:x");
    let dir = fixture_dir("resume");
    let registry = big_image_registry(&dir);
    // Fast, but the connection carrying the layer breaks after 3 MiB.
    let relay = Relay::start(registry.addr.clone(), 64 << 20, Some(3 << 20));
    let reference = format!("{}/big/img:1", relay.addr);
    let (ok, out, err) = pull(&env, &reference);
    assert!(ok, "{err}");
    let digest = printed_digest(&out, &reference);
    assert!(
        relay.saw_range.load(std::sync::atomic::Ordering::SeqCst),
        "the rest of the layer was asked for by range"
    );
    let pulled = layers(&env, &digest);
    assert_eq!(pulled.len(), 1);
    assert!(stored(&env, &pulled[0]), "the resumed layer verified whole");
    env.assert_nothing_running();
}

#[test]
fn a_pull_killed_mid_layer_leaves_nothing_mistaken_for_complete() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let env = Env::new("image-kill", "oci:/nonexistent:x");
    let dir = fixture_dir("interrupted");
    let registry = big_image_registry(&dir);
    // 1 MiB/s through the relay: the layer takes about 8 s.
    let relay = Relay::start(registry.addr.clone(), 1 << 20, None);
    let slow_ref = format!("{}/big/img:1", relay.addr);
    let mut child = env.spawn(&["image", "pull", "--quiet", &slow_ref]);

    // Wait until the 8 MiB layer is being written (past its first MiB:
    // only it is that large), then kill -9 the puller.
    let incoming = store(&env).join("incoming");
    let deadline = Instant::now() + Duration::from_secs(30);
    let staged = loop {
        let partial: Vec<PathBuf> = std::fs::read_dir(&incoming)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
            .filter(|p| p.metadata().is_ok_and(|m| m.len() > 1 << 20))
            .collect();
        if let Some(p) = partial.into_iter().next() {
            break p;
        }
        assert!(Instant::now() < deadline, "the pull never started a layer");
        std::thread::sleep(Duration::from_millis(20));
    };
    let puller = env
        .processes()
        .into_iter()
        .find(|p| p.contains("image pull") && !p.contains("runuser"))
        .expect("the lazaret image pull process");
    let pid = puller.split(':').next().unwrap();
    support::signal_through_pidfd(pid, rustix::process::Signal::KILL);
    let status = child.wait().unwrap();
    assert!(!status.success());

    // The partial layer is only in the staging area, under a name no
    // reader takes for a blob.
    let hex = staged
        .file_name()
        .unwrap()
        .to_string_lossy()
        .split('.')
        .next()
        .unwrap()
        .to_owned();
    assert!(
        staged.metadata().unwrap().len() < 8 << 20,
        "killed before the layer was complete"
    );
    assert!(!stored(&env, &hex), "a partial layer was published");

    // A later pull (directly this time) removes the partial file, whose
    // writer is gone, and completes and verifies the layer.
    let direct = format!("{}/big/img:1", registry.addr);
    let (ok, out, err) = pull(&env, &direct);
    assert!(ok, "{err}");
    assert!(
        !staged.exists(),
        "the killed pull's partial file was reclaimed"
    );
    assert_eq!(std::fs::read_dir(&incoming).unwrap().count(), 0);
    let digest = printed_digest(&out, &direct);
    let pulled = layers(&env, &digest);
    assert_eq!(pulled, vec![format!("sha256:{hex}")]);
    assert!(stored(&env, &hex));
    env.assert_nothing_running();
}

#[test]
fn a_launch_runs_the_image_pulled_from_a_tls_registry_with_auth() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = fixture_dir("launch");
    let (ca, registry) = tls_registry(&dir);
    registry
        .push(&default_image(), "lazaret/default:1")
        .unwrap();
    let reference = format!("{}/lazaret/default:1", registry.addr);
    let env = Env::new("image-launch", &reference);
    trust(&env, &registry.addr, &ca);
    login(&env, &registry.addr, USER, PASSWORD);

    // `config check --json` shows the normalised reference.
    let out = env.run(&["config", "check", "default", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let checked: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(checked["image"], reference);

    // The first launch on a terminal starts the Domain: it shows the pull
    // (every layer fetched) and the unpack before the session runs.
    let out = env.run_on_terminal(&["default", "--", "cat", "/etc/debian_version"]);
    let shown = text(&out.stdout);
    assert!(out.status.success(), "{shown}");
    assert!(
        shown.contains("layer 1/")
            && shown.contains("unpacking")
            && shown.contains("root file system ready in"),
        "{shown}"
    );
    env.assert_nothing_running();

    let (ok, out, err) = pull(&env, &reference);
    assert!(ok, "{err}");
    let digest = printed_digest(&out, &reference);
    let out = env.run(&["default", "--", "cat", "/etc/debian_version"]);
    assert!(
        out.status.success() && !text(&out.stdout).trim().is_empty(),
        "stdout {} stderr {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    // While a session runs, its Domain uses the image: `image ls` names
    // the Domain and `image rm` is refused. (The previous launch's
    // generation is released first: its lease is not this session's.)
    env.assert_nothing_running();
    let mut session = env.spawn(&[
        "default",
        "--",
        "sh",
        "-c",
        "while [ ! -e /workspace/stop ]; do sleep 0.1; done",
    ]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while env.catalog_leases().is_empty() {
        assert!(
            Instant::now() < deadline,
            "the session never leased its lower"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let domain = env.catalog_leases()[0].domain.to_string();
    let listed = image_list(&env);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["reference"], reference);
    assert_eq!(listed[0]["manifest_digest"], digest);
    assert!(listed[0]["bytes"].as_u64().unwrap() > 1 << 20);
    assert_eq!(listed[0]["domains"], serde_json::json!([domain]));
    let out = env.run(&["image", "rm", &reference]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("is in use by 1 Domain") && err.contains(&domain[..12]),
        "{err}"
    );
    std::fs::write(env.workspace.join("stop"), "").unwrap();
    assert!(session.wait().unwrap().success());
    env.assert_nothing_running();

    // Spec 3.6: the prepared lower records the manifest the tag resolved to.
    let artifacts = lazaret_effects::storage_catalog::StorageCatalog::at(
        &env.home.join(".local/share/lazaret"),
    )
    .artifacts()
    .unwrap();
    assert_eq!(artifacts.len(), 1, "{artifacts:?}");
    assert_eq!(artifacts[0].source_identity.as_str(), digest);

    // No Domain uses it now: removed, with its blobs.
    let out = env.run(&["image", "rm", &reference]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!stored(&env, &digest));
    assert!(image_list(&env).is_empty());
    env.assert_nothing_left();
}
