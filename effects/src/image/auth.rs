//! Registry credentials and challenges: the user's container auth files
//! (the containers-auth.json(5) and docker `config.json` `auths` formats),
//! HTTP basic auth, and the anonymous-or-credentialed bearer-token flow of
//! the distribution API (`WWW-Authenticate: Bearer realm=…,service=…`).
//!
//! Credentials are held only in [`Credentials`], whose `Debug` redacts them;
//! no message, trace or store record ever carries them.

use std::path::{Path, PathBuf};

use base64::Engine as _;

/// An auth file larger than this is refused.
const MAX_AUTH_FILE: u64 = 1 << 20;

/// Errors of finding credentials; one variant per failing step.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// An auth file exists but cannot be read.
    #[error("cannot read registry auth file {path}: {source}")]
    Unreadable {
        path: PathBuf,
        source: std::io::Error,
    },
    /// An auth file is not the JSON it should be.
    #[error("registry auth file {path} is not valid: {detail}; expected JSON with an `auths` object of `{{\"auth\": base64(user:password)}}` entries")]
    Malformed { path: PathBuf, detail: String },
}

/// A user name and password (or access token).
#[derive(Clone, PartialEq, Eq)]
pub(super) struct Credentials {
    pub(super) username: String,
    pub(super) password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credentials(<redacted>)")
    }
}

impl Credentials {
    /// The `Authorization` header value for basic auth.
    pub(super) fn basic_header(&self) -> String {
        let raw = format!("{}:{}", self.username, self.password);
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(raw)
        )
    }
}

/// What the auth files say about one registry.
#[derive(Debug)]
pub(super) struct Lookup {
    /// The credentials and the file they came from.
    pub(super) found: Option<(Credentials, PathBuf)>,
    /// Every file consulted, in order (for messages).
    pub(super) consulted: Vec<PathBuf>,
    /// Entries for the registry that exist but that Lazaret cannot use (a
    /// credential helper, an identity token), each as a sentence naming
    /// its file: the pull goes on anonymously, and a refusal says why.
    pub(super) unusable: Vec<String>,
}

/// What one auth file says about the registry.
enum Entry {
    Found(Credentials),
    Unusable(String),
    Absent,
}

/// The auth files consulted, in order: `$REGISTRY_AUTH_FILE` alone when it
/// is set; otherwise `$XDG_RUNTIME_DIR/containers/auth.json`,
/// `$XDG_CONFIG_HOME/containers/auth.json` (default `~/.config`) and
/// `~/.docker/config.json` (or `$DOCKER_CONFIG/config.json`).
pub(super) fn auth_files(env: &dyn Fn(&str) -> Option<String>) -> Vec<PathBuf> {
    let abs = |k: &str| env(k).filter(|v| v.starts_with('/')).map(PathBuf::from);
    if let Some(f) = abs("REGISTRY_AUTH_FILE") {
        return vec![f];
    }
    let home = abs("HOME");
    let mut files = Vec::new();
    if let Some(d) = abs("XDG_RUNTIME_DIR") {
        files.push(d.join("containers/auth.json"));
    }
    if let Some(d) = abs("XDG_CONFIG_HOME").or_else(|| home.as_ref().map(|h| h.join(".config"))) {
        files.push(d.join("containers/auth.json"));
    }
    if let Some(d) = abs("DOCKER_CONFIG").or_else(|| home.as_ref().map(|h| h.join(".docker"))) {
        files.push(d.join("config.json"));
    }
    files
}

/// The registry an `auths` key names: scheme and `/v1/`-style paths
/// dropped, Docker Hub's aliases folded into `docker.io`.
fn normalise_key(key: &str) -> String {
    let key = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let key = key.trim_end_matches('/');
    let key = key
        .strip_suffix("/v1")
        .or_else(|| key.strip_suffix("/v2"))
        .unwrap_or(key);
    let (host, rest) = key.split_once('/').map_or((key, ""), |(h, r)| (h, r));
    // Host names compare without case.
    let host = host.to_ascii_lowercase();
    let host = match host.as_str() {
        "index.docker.io" | "registry-1.docker.io" => "docker.io".to_owned(),
        _ => host,
    };
    if rest.is_empty() {
        host.to_owned()
    } else {
        format!("{host}/{rest}")
    }
}

/// Looks `registry`/`repository` up in the auth files: the most specific
/// `auths` key (`registry/namespace/...` before `registry`) of the first
/// file that has one wins, as podman does.
pub(super) fn lookup(
    registry: &str,
    repository: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Lookup, AuthError> {
    let consulted = auth_files(env);
    let mut unusable = Vec::new();
    for path in &consulted {
        let Some(doc) = read_auth_file(path)? else {
            continue;
        };
        match entry_for(&doc, path, registry, repository)? {
            Entry::Found(found) => {
                return Ok(Lookup {
                    found: Some((found, path.clone())),
                    consulted,
                    unusable,
                })
            }
            Entry::Unusable(note) => unusable.push(note),
            Entry::Absent => {}
        }
    }
    Ok(Lookup {
        found: None,
        consulted,
        unusable,
    })
}

fn read_auth_file(path: &Path) -> Result<Option<serde_json::Value>, AuthError> {
    let unreadable = |source| AuthError::Unreadable {
        path: path.to_owned(),
        source,
    };
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(unreadable(e)),
    };
    if meta.len() > MAX_AUTH_FILE {
        return Err(AuthError::Malformed {
            path: path.to_owned(),
            detail: format!("{} bytes, more than {MAX_AUTH_FILE}", meta.len()),
        });
    }
    let bytes = std::fs::read(path).map_err(unreadable)?;
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| AuthError::Malformed {
            path: path.to_owned(),
            detail: e.to_string(),
        })
}

fn entry_for(
    doc: &serde_json::Value,
    path: &Path,
    registry: &str,
    repository: &str,
) -> Result<Entry, AuthError> {
    let malformed = |detail: String| AuthError::Malformed {
        path: path.to_owned(),
        detail,
    };
    let registry = registry.to_ascii_lowercase();
    let registry = registry.as_str();
    // Most specific first: registry/a/b/c, registry/a/b, registry/a, registry.
    let mut wanted = vec![registry.to_owned()];
    let mut prefix = registry.to_owned();
    for part in repository.split('/') {
        prefix = format!("{prefix}/{part}");
        wanted.push(prefix.clone());
    }
    wanted.reverse();
    let auths = doc.get("auths").and_then(|a| a.as_object());
    for want in &wanted {
        let entry = auths.and_then(|a| {
            a.iter()
                .find(|(k, _)| &normalise_key(k) == want)
                .map(|(_, v)| v)
        });
        let Some(entry) = entry else { continue };
        if let Some(auth) = entry.get("auth").and_then(|v| v.as_str()) {
            if !auth.is_empty() {
                let raw = base64::engine::general_purpose::STANDARD
                    .decode(auth)
                    .map_err(|_| malformed(format!("the `auth` of {want} is not base64")))?;
                let raw = String::from_utf8(raw)
                    .map_err(|_| malformed(format!("the `auth` of {want} is not UTF-8")))?;
                let (username, password) = raw.split_once(':').ok_or_else(|| {
                    malformed(format!("the `auth` of {want} is not base64(user:password)"))
                })?;
                return Ok(Entry::Found(Credentials {
                    username: username.to_owned(),
                    password: password.to_owned(),
                }));
            }
        }
        let field = |k: &str| entry.get(k).and_then(|v| v.as_str()).unwrap_or_default();
        if !field("username").is_empty() && !field("password").is_empty() {
            return Ok(Entry::Found(Credentials {
                username: field("username").to_owned(),
                password: field("password").to_owned(),
            }));
        }
        if !field("identitytoken").is_empty() {
            return Ok(Entry::Unusable(format!(
                "{} holds an identity token for {want}, which Lazaret does not exchange yet (log in with a user name and password or access token)",
                path.display()
            )));
        }
    }
    // No inline entry: a helper configured for it is named, not run.
    let helper = doc
        .get("credHelpers")
        .and_then(|h| h.as_object())
        .and_then(|h| {
            h.iter()
                .find(|(k, _)| normalise_key(k) == registry)
                .and_then(|(_, v)| v.as_str())
        })
        .or_else(|| doc.get("credsStore").and_then(|v| v.as_str()))
        .filter(|h| !h.is_empty());
    if let Some(helper) = helper {
        return Ok(Entry::Unusable(format!(
            "{} hands {registry}'s credentials to the credential helper `docker-credential-{helper}`, which Lazaret does not run yet (add an `auths` entry, for example with `podman login --authfile {} {registry}`)",
            path.display(),
            path.display()
        )));
    }
    Ok(Entry::Absent)
}

/// A `WWW-Authenticate` challenge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Challenge {
    Basic,
    Bearer {
        realm: String,
        service: Option<String>,
        scope: Option<String>,
    },
}

/// Parses a `WWW-Authenticate` header value (one challenge; the parameters
/// are `key="value"` or `key=token`, comma separated).
pub(super) fn parse_challenge(header: &str) -> Option<Challenge> {
    let header = header.trim();
    let (scheme, rest) = header.split_once(' ').unwrap_or((header, ""));
    if scheme.eq_ignore_ascii_case("basic") {
        return Some(Challenge::Basic);
    }
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let mut params: Vec<(String, String)> = Vec::new();
    let mut rest = rest.trim_start();
    while !rest.is_empty() {
        let (key, after) = rest.split_once('=')?;
        let key = key.trim().to_ascii_lowercase();
        let after = after.trim_start();
        let (value, remaining) = if let Some(quoted) = after.strip_prefix('"') {
            let end = quoted.find('"')?;
            (&quoted[..end], &quoted[end + 1..])
        } else {
            let end = after.find(',').unwrap_or(after.len());
            (after[..end].trim(), &after[end..])
        };
        params.push((key, value.to_owned()));
        rest = remaining.trim_start().trim_start_matches(',').trim_start();
    }
    let get = |k: &str| {
        params
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
    };
    Some(Challenge::Bearer {
        realm: get("realm")?,
        service: get("service"),
        scope: get("scope"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn auth_files_in_podman_then_docker_order() {
        let env = env_of(&[("HOME", "/home/a"), ("XDG_RUNTIME_DIR", "/run/user/7")]);
        assert_eq!(
            auth_files(&env),
            vec![
                PathBuf::from("/run/user/7/containers/auth.json"),
                PathBuf::from("/home/a/.config/containers/auth.json"),
                PathBuf::from("/home/a/.docker/config.json"),
            ]
        );
        let only = env_of(&[("HOME", "/home/a"), ("REGISTRY_AUTH_FILE", "/x/auth.json")]);
        assert_eq!(auth_files(&only), vec![PathBuf::from("/x/auth.json")]);
    }

    #[test]
    fn keys_normalise_like_docker_and_podman() {
        assert_eq!(normalise_key("https://index.docker.io/v1/"), "docker.io");
        assert_eq!(normalise_key("registry-1.docker.io"), "docker.io");
        assert_eq!(normalise_key("http://127.0.0.1:5000"), "127.0.0.1:5000");
        assert_eq!(normalise_key("quay.io/org"), "quay.io/org");
        assert_eq!(normalise_key("Quay.IO/org"), "quay.io/org");
    }

    #[test]
    fn the_most_specific_entry_wins_and_helpers_are_named() -> Result<(), String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let file = dir.path().join("auth.json");
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let doc = serde_json::json!({
            "auths": {
                "quay.io": { "auth": b64("all:one") },
                "quay.io/team": { "auth": b64("team:two") },
                "https://index.docker.io/v1/": { "auth": b64("hub:three") },
                "r.example": { "username": "u", "password": "p" },
                "tok.example": { "identitytoken": "x" },
                "bad.example": { "auth": "@@@" },
            },
            "credHelpers": { "ecr.example": "ecr-login" },
        });
        std::fs::write(&file, doc.to_string()).map_err(|e| e.to_string())?;
        let path = file.display().to_string();
        let env = move |k: &str| (k == "REGISTRY_AUTH_FILE").then(|| path.clone());
        let user = |reg: &str, repo: &str| {
            lookup(reg, repo, &env).map(|l| l.found.map(|(c, _)| c.username))
        };
        assert_eq!(user("quay.io", "team/app").ok(), Some(Some("team".into())));
        assert_eq!(user("quay.io", "other/app").ok(), Some(Some("all".into())));
        assert_eq!(
            user("docker.io", "library/debian").ok(),
            Some(Some("hub".into()))
        );
        assert_eq!(user("r.example", "x").ok(), Some(Some("u".into())));
        assert_eq!(user("none.example", "x").ok(), Some(None));
        // A helper or an identity token is no credential: the pull goes on
        // anonymously, and the note names the file and the helper.
        let notes = |reg: &str| {
            lookup(reg, "x", &env)
                .map(|l| (l.found.is_none(), l.unusable.join(" | ")))
                .map_err(|e| e.to_string())
        };
        let (none, note) = notes("ecr.example")?;
        assert!(
            none && note.contains("docker-credential-ecr-login"),
            "{note}"
        );
        let (none, note) = notes("tok.example")?;
        assert!(none && note.contains("identity token"), "{note}");
        let msg = lookup("bad.example", "x", &env)
            .map(|_| ())
            .map_err(|e| e.to_string())
            .err()
            .unwrap_or_default();
        assert!(msg.contains("not base64"), "{msg}");
        // The secret never shows in Debug.
        let found = lookup("quay.io", "x", &env).map_err(|e| e.to_string())?;
        let shown = format!("{found:?}");
        assert!(
            !shown.contains("one") && shown.contains("redacted"),
            "{shown}"
        );
        Ok(())
    }

    #[test]
    fn challenges_parse() {
        assert_eq!(
            parse_challenge(
                r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/debian:pull""#
            ),
            Some(Challenge::Bearer {
                realm: "https://auth.docker.io/token".into(),
                service: Some("registry.docker.io".into()),
                scope: Some("repository:library/debian:pull".into()),
            })
        );
        assert_eq!(
            parse_challenge(r#"Basic realm="Registry Realm""#),
            Some(Challenge::Basic)
        );
        assert_eq!(
            parse_challenge("Bearer realm=http://127.0.0.1:1/t"),
            Some(Challenge::Bearer {
                realm: "http://127.0.0.1:1/t".into(),
                service: None,
                scope: None,
            })
        );
        assert_eq!(parse_challenge(r#"Bearer service="x""#), None);
        assert_eq!(parse_challenge("Negotiate abc"), None);
    }
}
