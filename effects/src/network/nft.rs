//! The enforcing deny layer (spec 3.7, SR-6 as realised on runsc 20240729,
//! docs/network.md "Deny mechanism"): an nftables netdev egress chain on
//! `tap0` in the enforcement namespace, loaded with `nft -f -` while the
//! Runtime Supervisor holds network administration there. The sandbox's
//! frames meet it before slirp4netns sees them; no route the guest could
//! add inside gVisor gets past it.
use std::process::Command;
use std::time::Duration;

use crate::broker::transient::{self, Limits, TransientError};

use lazaret_runtime::config::Ipv4Prefix;
use lazaret_runtime::network::plan::{NFT_EGRESS_CHAIN, NFT_TABLE};
use lazaret_runtime::network::{FilterProjection, FilterRule, FILTER_PROJECTION_VERSION};
use serde_json::Value;

/// How long one `nft` run may take (a load or a listing takes about 6 ms).
const NFT_LIMIT: Duration = Duration::from_secs(30);

/// Loads and lists nftables rulesets in the caller's network namespace.
pub trait NftSys {
    /// `nft -f -` with `ruleset` on its standard input.
    fn load(&self, ruleset: &str) -> Result<(), NftError>;
    /// The egress chain as nftables lists it (`nft -j list table netdev
    /// lazaret`, and the text listing for the hook's device).
    fn observe(&self) -> Result<FilterProjection, NftError>;
}

/// Why a ruleset was not loaded.
#[derive(Debug, thiserror::Error)]
pub enum NftError {
    #[error("running nft (nftables; scripts/setup installs it): {0}")]
    Run(#[source] TransientError),
    #[error("the nft listing thread panicked")]
    ListingThread,
    #[error("nft {args} failed ({status}): {stderr}")]
    Refused {
        args: String,
        status: String,
        stderr: String,
    },
    #[error("the nft JSON listing does not parse: {0}")]
    Json(#[from] serde_json::Error),
    #[error(
        "the nft listing has no {what}; expected the egress chain of table netdev {NFT_TABLE}"
    )]
    Missing { what: &'static str },
}

/// The real `nft`: found on `PATH`, else in the system directories a
/// user's `PATH` often lacks (Debian installs it in `/usr/sbin`).
#[derive(Debug, Clone, Copy, Default)]
pub struct RealNft;

/// Where `nft` is looked for after `PATH` (also by `lazaret doctor`).
pub const SYSTEM_DIRS: [&str; 3] = ["/usr/sbin", "/sbin", "/usr/local/sbin"];

/// The first executable `nft` in `path` (a `PATH` value), then in
/// [`SYSTEM_DIRS`]; `nft` itself (a spawn error names it) when none is.
fn nft_program(path: Option<&std::ffi::OsStr>) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dirs = path
        .map(|p| std::env::split_paths(p).collect::<Vec<_>>())
        .unwrap_or_default();
    dirs.into_iter()
        .chain(SYSTEM_DIRS.iter().map(std::path::PathBuf::from))
        .map(|d| d.join("nft"))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .unwrap_or_else(|| std::path::PathBuf::from("nft"))
}

impl RealNft {
    /// Runs `nft ARGS`, `stdin` on its standard input, and returns its
    /// standard output; a transient child of the broker (reaped in every
    /// case, killed past [`NFT_LIMIT`]).
    fn run(&self, args: &[&str], stdin: &str) -> Result<String, NftError> {
        let mut command = Command::new(nft_program(std::env::var_os("PATH").as_deref()));
        command.args(args);
        let out = transient::output(&mut command, stdin.as_bytes(), Limits::of(NFT_LIMIT))
            .map_err(NftError::Run)?;
        if !out.status.success() {
            return Err(NftError::Refused {
                args: args.join(" "),
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

impl NftSys for RealNft {
    fn load(&self, ruleset: &str) -> Result<(), NftError> {
        self.run(&["-f", "-"], ruleset).map(drop)
    }

    fn observe(&self) -> Result<FilterProjection, NftError> {
        // The two listings side by side: each is a process start (about
        // 6 ms), on the launch's critical path.
        let json_args = ["-j", "list", "table", "netdev", NFT_TABLE];
        let (json, text) = std::thread::scope(|scope| {
            let json = std::thread::Builder::new().spawn_scoped(scope, || self.run(&json_args, ""));
            let text = self.run(&["list", "table", "netdev", NFT_TABLE], "");
            let json = match json {
                Ok(thread) => thread.join().unwrap_or(Err(NftError::ListingThread)),
                // No thread: list here, one after the other.
                Err(_) => self.run(&json_args, ""),
            };
            (json, text)
        });
        parse_listing(&json?, &text?)
    }
}

/// The egress chain of `nft -j list table netdev lazaret` (`json`), with
/// the hook's device from the text listing (`text`): nftables 1.0.6 leaves
/// a netdev chain's device out of its JSON.
pub fn parse_listing(json: &str, text: &str) -> Result<FilterProjection, NftError> {
    let doc: Value = serde_json::from_str(json)?;
    let items = doc
        .get("nftables")
        .and_then(Value::as_array)
        .ok_or(NftError::Missing {
            what: "nftables array",
        })?;
    let ours = |o: &Value| {
        o.get("table").and_then(Value::as_str) == Some(NFT_TABLE)
            && o.get("family").and_then(Value::as_str) == Some("netdev")
    };
    let chain = items
        .iter()
        .filter_map(|i| i.get("chain"))
        .find(|c| ours(c) && c.get("name").and_then(Value::as_str) == Some(NFT_EGRESS_CHAIN))
        .ok_or(NftError::Missing {
            what: "egress chain",
        })?;
    let field = |name: &'static str| {
        chain
            .get(name)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or(NftError::Missing { what: name })
    };
    // Rules of every chain of the table: a rule outside the egress chain
    // is listed as `Other` and so never matches a policy.
    let rules = items
        .iter()
        .filter_map(|i| i.get("rule"))
        .filter(|r| ours(r))
        .map(|r| {
            if r.get("chain").and_then(Value::as_str) == Some(NFT_EGRESS_CHAIN) {
                rule(r.get("expr").unwrap_or(&Value::Null))
            } else {
                FilterRule::Other(r.to_string())
            }
        })
        .collect();
    Ok(FilterProjection {
        version: FILTER_PROJECTION_VERSION,
        family: "netdev".to_owned(),
        table: NFT_TABLE.to_owned(),
        chain: NFT_EGRESS_CHAIN.to_owned(),
        chain_type: field("type")?,
        hook: field("hook")?,
        device: hook_device(text),
        priority: chain
            .get("prio")
            .and_then(Value::as_i64)
            .ok_or(NftError::Missing { what: "prio" })?,
        policy: field("policy")?,
        rules,
    })
}

/// One rule's expressions as a policy rule, or `Other`.
fn rule(expr: &Value) -> FilterRule {
    let other = || FilterRule::Other(expr.to_string());
    let Some([matched, verdict]) = expr.as_array().map(Vec::as_slice) else {
        return other();
    };
    let Some(m) = matched
        .get("match")
        .filter(|m| m.get("op").and_then(Value::as_str) == Some("=="))
    else {
        return other();
    };
    let (left, right) = (&m["left"], &m["right"]);
    let accept = match (verdict.get("accept"), verdict.get("drop")) {
        (Some(Value::Null), None) => true,
        (None, Some(Value::Null)) => false,
        _ => return other(),
    };
    if left
        .get("meta")
        .and_then(|x| x.get("key"))
        .and_then(Value::as_str)
        == Some("protocol")
        && right.as_str() == Some("ip6")
        && !accept
    {
        return FilterRule::DropIpv6;
    }
    let daddr = left.get("payload").is_some_and(|p| {
        p.get("protocol").and_then(Value::as_str) == Some("ip")
            && p.get("field").and_then(Value::as_str) == Some("daddr")
    });
    if !daddr {
        return other();
    }
    let prefix = match right {
        Value::String(a) => a
            .parse::<std::net::Ipv4Addr>()
            .ok()
            .map(|a| Ipv4Prefix::new(a.octets(), 32)),
        Value::Object(_) => {
            let p = &right["prefix"];
            let addr = p["addr"]
                .as_str()
                .and_then(|a| a.parse::<std::net::Ipv4Addr>().ok());
            let len = p["len"]
                .as_u64()
                .and_then(|l| u8::try_from(l).ok())
                .filter(|l| *l <= 32);
            addr.zip(len).map(|(a, l)| Ipv4Prefix::new(a.octets(), l))
        }
        _ => None,
    };
    match prefix {
        Some(prefix) => FilterRule::Destination { prefix, accept },
        None => other(),
    }
}

/// The device of `hook egress device "NAME"` in the text listing.
fn hook_device(text: &str) -> Option<String> {
    let rest = text.split("hook egress device ").nth(1)?;
    let name = rest.strip_prefix('"')?.split('"').next()?;
    Some(name.to_owned())
}

/// Records every ruleset; fails when primed to; observes what it was
/// primed with (nothing: a listing error).
#[derive(Debug, Default)]
pub struct RecordingNft {
    pub loaded: std::cell::RefCell<Vec<String>>,
    pub refuse: bool,
    pub observed: Option<FilterProjection>,
}

impl NftSys for RecordingNft {
    fn load(&self, ruleset: &str) -> Result<(), NftError> {
        self.loaded.borrow_mut().push(ruleset.to_owned());
        if self.refuse {
            return Err(NftError::Refused {
                args: "-f -".into(),
                status: "exit status: 1".into(),
                stderr: "primed refusal".into(),
            });
        }
        Ok(())
    }

    fn observe(&self) -> Result<FilterProjection, NftError> {
        self.observed.clone().ok_or(NftError::Missing {
            what: "primed listing",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// The shape nftables 1.0.6 lists (from a real `nft -j list table
    /// netdev lazaret` of a smaller chain), device only in the text.
    const JSON: &str = r#"{"nftables": [{"metainfo": {"version": "1.0.6", "release_name": "Lester Gooch #5", "json_schema_version": 1}},
 {"table": {"family": "netdev", "name": "lazaret", "handle": 1}},
 {"chain": {"family": "netdev", "table": "lazaret", "name": "egress_tap0", "handle": 1, "type": "filter", "hook": "egress", "prio": 0, "policy": "accept"}},
 {"rule": {"family": "netdev", "table": "lazaret", "chain": "egress_tap0", "handle": 2, "expr": [{"match": {"op": "==", "left": {"meta": {"key": "protocol"}}, "right": "ip6"}}, {"drop": null}]}},
 {"rule": {"family": "netdev", "table": "lazaret", "chain": "egress_tap0", "handle": 3, "expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "daddr"}}, "right": "10.137.54.2"}}, {"accept": null}]}},
 {"rule": {"family": "netdev", "table": "lazaret", "chain": "egress_tap0", "handle": 4, "expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "daddr"}}, "right": {"prefix": {"addr": "10.0.0.0", "len": 8}}}}, {"drop": null}]}},
 {"rule": {"family": "netdev", "table": "lazaret", "chain": "egress_tap0", "handle": 5, "expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "daddr"}}, "right": {"prefix": {"addr": "0.0.0.0", "len": 0}}}}, {"drop": null}]}}]}"#;
    const TEXT: &str = "table netdev lazaret {\n\tchain egress_tap0 {\n\t\ttype filter hook egress device \"tap0\" priority filter; policy accept;\n\t}\n}\n";

    #[test]
    fn a_listing_becomes_the_chain_and_its_rules_in_order() -> Result<(), NftError> {
        let f = parse_listing(JSON, TEXT)?;
        assert_eq!(
            (
                f.chain_type.as_str(),
                f.hook.as_str(),
                f.device.as_deref(),
                f.priority,
                f.policy.as_str()
            ),
            ("filter", "egress", Some("tap0"), 0, "accept")
        );
        assert_eq!(
            f.rules,
            vec![
                FilterRule::DropIpv6,
                FilterRule::Destination {
                    prefix: Ipv4Prefix::new([10, 137, 54, 2], 32),
                    accept: true
                },
                FilterRule::Destination {
                    prefix: Ipv4Prefix::new([10, 0, 0, 0], 8),
                    accept: false
                },
                FilterRule::Destination {
                    prefix: Ipv4Prefix::new([0, 0, 0, 0], 0),
                    accept: false
                },
            ]
        );
        Ok(())
    }

    /// A rule of another shape (here a counter before the verdict), and a
    /// listing without the device, are kept visible so they never match.
    #[test]
    fn unknown_rules_and_a_missing_device_stay_visible() -> Result<(), NftError> {
        let json = JSON.replace(
            r#"{"drop": null}]}}]}"#,
            r#"{"counter": {"packets": 0, "bytes": 0}}, {"drop": null}]}}]}"#,
        );
        let f = parse_listing(&json, "table netdev lazaret { }")?;
        assert!(
            matches!(f.rules.last(), Some(FilterRule::Other(_))),
            "{:?}",
            f.rules
        );
        assert_eq!(f.device, None);
        assert!(matches!(
            parse_listing(r#"{"nftables": []}"#, ""),
            Err(NftError::Missing {
                what: "egress chain"
            })
        ));
        Ok(())
    }

    /// A `PATH` without the system directories still finds a system `nft`;
    /// an executable on `PATH` comes first; a non-executable file is skipped.
    #[test]
    fn nft_is_found_on_path_first_then_in_system_dirs() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let on_path = dir.path().join("nft");
        std::fs::write(&on_path, "#!/bin/sh\n")?;
        std::fs::set_permissions(&on_path, std::fs::Permissions::from_mode(0o644))?;
        let path = std::env::join_paths([dir.path()]).map_err(std::io::Error::other)?;
        let without_exec = nft_program(Some(&path));
        assert_ne!(without_exec, on_path);
        std::fs::set_permissions(&on_path, std::fs::Permissions::from_mode(0o755))?;
        assert_eq!(nft_program(Some(&path)), on_path);
        let system = SYSTEM_DIRS
            .iter()
            .map(|d| std::path::Path::new(d).join("nft"))
            .find(|p| p.exists());
        let empty = std::ffi::OsString::from("/nonexistent");
        match system {
            Some(p) => assert_eq!(nft_program(Some(&empty)), p),
            None => assert_eq!(nft_program(Some(&empty)), std::path::PathBuf::from("nft")),
        }
        Ok(())
    }
}
