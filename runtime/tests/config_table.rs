//! Table-driven acceptance and refusal cases for every row of the schemas.md
//! "Trusted host configuration" table and every grammar, layout and network
//! rule (spec 3.2). Each row is decoded and the selected profile
//! `dev` is validated against the production SandboxLayoutV1.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // tests fail by panicking
use lazaret_runtime::config::{decode_document, ConfigError, SandboxLayoutV1, SelectedProfileV1};

const SCHEMA: &str = "schema = \"lazaret-trusted-host-config-v1\"\n";

/// A document with `root` lines before the `dev` profile and `body` inside it.
fn doc(root: &str, body: &str) -> String {
    format!("{SCHEMA}{root}\n[profiles.dev]\nimage = \"registry.example/dev:1\"\n{body}\n")
}

fn load(text: &str) -> Result<SelectedProfileV1, ConfigError> {
    let layout = SandboxLayoutV1::production()?;
    decode_document(text.as_bytes())?.select("dev", &layout)
}

enum Expect {
    Ok,
    /// Refused; the message contains every listed fragment.
    Err(&'static [&'static str]),
}

use Expect::{Err as Refused, Ok as Accepted};

struct Row {
    name: &'static str,
    root: &'static str,
    body: &'static str,
    expect: Expect,
}

const fn row(name: &'static str, root: &'static str, body: &'static str, expect: Expect) -> Row {
    Row {
        name,
        root,
        body,
        expect,
    }
}

const READY_OK: &str = r#"[profiles.dev.readiness]
denied = [{ address = "10.1.2.3", port = 80 }]
permitted = [{ address = "1.1.1.1", port = 443 }]
dns = [{ resolver = "10.137.54.3", query = "example.com" }]"#;

const ROWS: &[Row] = &[
    // root.schema
    row("schema exact", "", "", Accepted),
    // root.storage
    row("storage empty table", "[storage]", "", Accepted),
    row("storage data_root absolute", "[storage]\ndata_root = \"/srv/lazaret\"", "", Accepted),
    row("storage data_root home", "[storage]\ndata_root = \"~/lazaret-data\"", "", Accepted),
    row("storage not a table", "storage = 3", "", Refused(&["storage", "invalid type"])),
    row("storage unknown key", "[storage]\ndata = \"/x\"", "", Refused(&["storage", "unknown field `data`"])),
    row("data_root relative", "[storage]\ndata_root = \"rel/x\"", "", Refused(&["storage.data_root", "expected an absolute host path"])),
    row("data_root profile_dir", "[storage]\ndata_root = \"{profile_dir}/x\"", "", Refused(&["storage.data_root", "expected"])),
    row("data_root repeated separator", "[storage]\ndata_root = \"/a//b\"", "", Refused(&["storage.data_root", "expected"])),
    row("data_root trailing separator", "[storage]\ndata_root = \"/a/b/\"", "", Refused(&["storage.data_root"])),
    row("data_root dot", "[storage]\ndata_root = \"/a/./b\"", "", Refused(&["storage.data_root"])),
    row("data_root dotdot", "[storage]\ndata_root = \"/a/../b\"", "", Refused(&["storage.data_root"])),
    row("data_root glob", "[storage]\ndata_root = \"/a/*\"", "", Refused(&["storage.data_root"])),
    row("data_root variable", "[storage]\ndata_root = \"/$HOME/x\"", "", Refused(&["storage.data_root"])),
    row("data_root home double slash", "[storage]\ndata_root = \"~//etc\"", "", Refused(&["storage.data_root"])),
    row("data_root tilde user", "[storage]\ndata_root = \"~root/x\"", "", Refused(&["storage.data_root"])),
    row("data_root root only", "[storage]\ndata_root = \"/\"", "", Refused(&["storage.data_root"])),
    // root.network
    row("network prefixes", "[network]\ndefault_allow = [\"8.8.8.0/24\"]\ndefault_deny = [\"1.2.3.4/32\"]", "", Accepted),
    row("network empty lists", "[network]\ndefault_allow = []\ndefault_deny = []", "", Accepted),
    row("network unknown key", "[network]\nallow = []", "", Refused(&["network", "unknown field `allow`"])),
    row("prefix without length", "[network]\ndefault_allow = [\"8.8.8.0\"]", "", Refused(&["network.default_allow[0]", "expected an IPv4 prefix"])),
    row("prefix length 33", "[network]\ndefault_deny = [\"8.8.8.0/33\"]", "", Refused(&["network.default_deny[0]"])),
    row("prefix octet leading zero", "[network]\ndefault_deny = [\"08.8.8.0/24\"]", "", Refused(&["network.default_deny[0]"])),
    row("prefix length leading zero", "[network]\ndefault_deny = [\"8.8.8.0/024\"]", "", Refused(&["network.default_deny[0]"])),
    row("prefix ipv6", "[network]\ndefault_deny = [\"::1/128\"]", "", Refused(&["network.default_deny[0]"])),
    row("prefix not a string", "[network]\ndefault_deny = [3]", "", Refused(&["network.default_deny[0]", "invalid type"])),
    // [runtime]
    row("runsc_dcache zero", "[runtime]\nrunsc_dcache = 0", "", Accepted),
    row("runsc_dcache max", "[runtime]\nrunsc_dcache = 262144", "", Accepted),
    row("runsc_dcache over max", "[runtime]\nrunsc_dcache = 262145", "", Refused(&["runtime.runsc_dcache", "0..=262144"])),
    row("runsc_dcache negative", "[runtime]\nrunsc_dcache = -1", "", Refused(&["runtime.runsc_dcache"])),
    row("runsc_dcache string", "[runtime]\nrunsc_dcache = \"5\"", "", Refused(&["runtime.runsc_dcache", "invalid type"])),
    row("runtime unknown key", "[runtime]\nroot = \"/x\"", "", Refused(&["runtime", "unknown field `root`"])),
    // root unknown
    row("root unknown key", "version = 1", "", Refused(&["unknown field `version`"])),
    // profile.image
    row("image with digest", "", "", Accepted),
    row("image declared twice", "", "image = \"x\"", Refused(&["duplicate key"])),
    // profile.isolate_gitignored
    row("isolate false", "", "isolate_gitignored = false", Accepted),
    row("isolate string", "", "isolate_gitignored = \"yes\"", Refused(&["profiles.dev.isolate_gitignored", "invalid type"])),
    // profile.persistent_dirs
    row("persistent omitted", "", "", Accepted),
    row("persistent empty", "", "persistent_dirs = []", Accepted),
    row("persistent custom", "", "persistent_dirs = [\"/data\", \"/work\"]", Accepted),
    row("persistent nested", "", "persistent_dirs = [\"/data\", \"/data/x\"]", Refused(&["profiles.dev.persistent_dirs[1]", "profiles.dev.persistent_dirs[0]", "expected pairwise disjoint"])),
    row("persistent duplicate", "", "persistent_dirs = [\"/data\", \"/data\"]", Refused(&["profiles.dev.persistent_dirs[1]"])),
    row("persistent parent after child", "", "persistent_dirs = [\"/data/x\", \"/data\"]", Refused(&["profiles.dev.persistent_dirs[1]"])),
    row("persistent workspace", "", "persistent_dirs = [\"/workspace\"]", Refused(&["profiles.dev.persistent_dirs[0]", "/workspace", "protected"])),
    row("persistent inside workspace", "", "persistent_dirs = [\"/workspace/x\"]", Refused(&["profiles.dev.persistent_dirs[0]", "/workspace"])),
    row("persistent containing protected", "", "persistent_dirs = [\"/run\"]", Refused(&["profiles.dev.persistent_dirs[0]", "/run/lazaret"])),
    row("persistent product dir", "", "persistent_dirs = [\"/.lazaret\"]", Refused(&["profiles.dev.persistent_dirs[0]", "protected destination /.lazaret"])),
    row("persistent inside product dir", "", "persistent_dirs = [\"/.lazaret/sbin\"]", Refused(&["profiles.dev.persistent_dirs[0]", "/.lazaret"])),
    row("persistent beside product dir", "", "persistent_dirs = [\"/.lazarets\"]", Accepted),
    row("persistent tmp", "", "persistent_dirs = [\"/tmp\"]", Refused(&["profiles.dev.persistent_dirs[0]", "protected destination /tmp"])),
    row("persistent parent of transient child", "", "persistent_dirs = [\"/etc\"]", Accepted),
    row("persistent equal to transient child", "", "persistent_dirs = [\"/etc/resolv.conf\"]", Refused(&["profiles.dev.persistent_dirs[0]", "/etc/resolv.conf"])),
    row("persistent root", "", "persistent_dirs = [\"/\"]", Refused(&["profiles.dev.persistent_dirs[0]", "other than /"])),
    row("persistent relative", "", "persistent_dirs = [\"data\"]", Refused(&["profiles.dev.persistent_dirs[0]"])),
    row("persistent trailing slash", "", "persistent_dirs = [\"/data/\"]", Refused(&["profiles.dev.persistent_dirs[0]"])),
    row("persistent dotdot", "", "persistent_dirs = [\"/data/../etc\"]", Refused(&["profiles.dev.persistent_dirs[0]"])),
    row("persistent glob", "", "persistent_dirs = [\"/data/*\"]", Refused(&["profiles.dev.persistent_dirs[0]"])),
    row("persistent nul", "", "persistent_dirs = [\"/da\\u0000ta\"]", Refused(&["profiles.dev.persistent_dirs[0]", "NUL"])),
    // profile.allow_egress
    row("allow public", "", "allow_egress = [\"1.1.1.0/24\"]", Accepted),
    row("allow inside rfc1918", "", "allow_egress = [\"172.16.5.0/24\"]", Accepted),
    row("allow exact rfc1918", "", "allow_egress = [\"172.16.0.0/12\"]", Refused(&["profiles.dev.allow_egress[0]", "RFC 1918"])),
    row("allow reserved", "", "allow_egress = [\"10.137.54.0/24\"]", Refused(&["profiles.dev.allow_egress[0]", "reserved topology"])),
    row("allow containing reserved", "", "allow_egress = [\"10.128.0.0/9\"]", Refused(&["profiles.dev.allow_egress[0]", "reserved topology"])),
    row("allow equals profile deny", "", "allow_egress = [\"1.2.3.0/24\"]\ndeny_egress = [\"1.2.3.0/24\"]", Refused(&["profiles.dev.allow_egress[0]", "profiles.dev.deny_egress[0]", "both allowed and denied"])),
    row("allow equals global deny", "[network]\ndefault_deny = [\"1.2.3.0/24\"]", "allow_egress = [\"1.2.3.7/24\"]", Refused(&["profiles.dev.allow_egress[0]", "network.default_deny[0]"])),
    row("allow and deny different lengths", "", "allow_egress = [\"1.2.3.0/24\"]\ndeny_egress = [\"1.2.0.0/16\"]", Accepted),
    // profile.deny_egress
    row("deny public", "", "deny_egress = [\"9.9.9.9/32\"]", Accepted),
    row("deny broader than reserved", "", "deny_egress = [\"10.137.0.0/16\"]", Accepted),
    row("deny /22 containing reserved", "", "deny_egress = [\"10.137.52.0/22\"]", Accepted),
    row("deny reserved /23", "", "deny_egress = [\"10.137.54.0/23\"]", Refused(&["profiles.dev.deny_egress[0]", "inside the reserved topology"])),
    row("deny reserved /24", "", "deny_egress = [\"10.137.55.0/24\"]", Refused(&["profiles.dev.deny_egress[0]"])),
    row("deny reserved /32", "[network]\ndefault_deny = [\"10.137.54.100/32\"]", "", Refused(&["network.default_deny[0]"])),
    // profile.readiness
    row("readiness omitted", "", "", Accepted),
    row("readiness complete", "", READY_OK, Accepted),
    row("readiness permitted same address other port", "", "[profiles.dev.readiness]\ndenied = [{ address = \"10.1.2.3\", port = 80 }]\npermitted = [{ address = \"1.1.1.1\", port = 443 }, { address = \"1.1.1.1\", port = 80 }]\ndns = [{ resolver = \"10.137.54.3\", query = \"example.com\" }]", Accepted),
    row("readiness dns same resolver other query", "", "[profiles.dev.readiness]\ndenied = [{ address = \"10.1.2.3\", port = 80 }]\npermitted = [{ address = \"1.1.1.1\", port = 443 }]\ndns = [{ resolver = \"10.137.54.3\", query = \"example.com\" }, { resolver = \"10.137.54.3\", query = \"example.org\" }]", Accepted),
    row("readiness dns same query other resolver", "", "[profiles.dev.readiness]\ndenied = [{ address = \"10.1.2.3\", port = 80 }]\npermitted = [{ address = \"1.1.1.1\", port = 443 }]\ndns = [{ resolver = \"10.137.54.3\", query = \"example.com\" }, { resolver = \"1.1.1.1\", query = \"example.com\" }]", Accepted),
    row("readiness denied target allowed", "", "[profiles.dev.readiness]\ndenied = [{ address = \"1.1.1.1\", port = 80 }]\npermitted = [{ address = \"1.1.1.1\", port = 443 }]\ndns = [{ resolver = \"10.137.54.3\", query = \"example.com\" }]", Refused(&["profiles.dev.readiness.denied[0].address", "denies"])),
    row("readiness permitted target denied", "", "[profiles.dev.readiness]\ndenied = [{ address = \"10.1.2.3\", port = 80 }]\npermitted = [{ address = \"192.168.1.1\", port = 443 }]\ndns = [{ resolver = \"10.137.54.3\", query = \"example.com\" }]", Refused(&["profiles.dev.readiness.permitted[0].address", "allows"])),
    row("readiness port zero", "", "[profiles.dev.readiness]\ndenied = [{ address = \"10.1.2.3\", port = 0 }]\npermitted = [{ address = \"1.1.1.1\", port = 443 }]\ndns = [{ resolver = \"10.137.54.3\", query = \"example.com\" }]", Refused(&["profiles.dev.readiness.denied[0].port", "1..=65535"])),
    row("readiness port too large", "", "[profiles.dev.readiness]\ndenied = [{ address = \"10.1.2.3\", port = 70000 }]\npermitted = [{ address = \"1.1.1.1\", port = 443 }]\ndns = [{ resolver = \"10.137.54.3\", query = \"example.com\" }]", Refused(&["profiles.dev.readiness.denied[0].port"])),
    row("readiness empty list", "", "[profiles.dev.readiness]\ndenied = []\npermitted = [{ address = \"1.1.1.1\", port = 443 }]\ndns = [{ resolver = \"10.137.54.3\", query = \"example.com\" }]", Refused(&["profiles.dev.readiness.denied", "one to 32"])),
    row("readiness duplicate", "", "[profiles.dev.readiness]\ndenied = [{ address = \"10.1.2.3\", port = 80 }, { address = \"10.1.2.3\", port = 80 }]\npermitted = [{ address = \"1.1.1.1\", port = 443 }]\ndns = [{ resolver = \"10.137.54.3\", query = \"example.com\" }]", Refused(&["profiles.dev.readiness.denied[1]", "duplicate"])),
    row("readiness bad dns name", "", "[profiles.dev.readiness]\ndenied = [{ address = \"10.1.2.3\", port = 80 }]\npermitted = [{ address = \"1.1.1.1\", port = 443 }]\ndns = [{ resolver = \"10.137.54.3\", query = \"a..b\" }]", Refused(&["profiles.dev.readiness.dns[0].query", "DNS name"])),
    row("readiness missing dns", "", "[profiles.dev.readiness]\ndenied = [{ address = \"10.1.2.3\", port = 80 }]\npermitted = [{ address = \"1.1.1.1\", port = 443 }]", Refused(&["profiles.dev.readiness", "missing field `dns`"])),
    row("readiness unknown key", "", "[profiles.dev.readiness]\ndenied = [{ address = \"10.1.2.3\", port = 80, proto = \"tcp\" }]\npermitted = [{ address = \"1.1.1.1\", port = 443 }]\ndns = [{ resolver = \"10.137.54.3\", query = \"example.com\" }]", Refused(&["profiles.dev.readiness.denied[0]", "unknown field `proto`"])),
    row("readiness denied address three octets", "", "[profiles.dev.readiness]\ndenied = [{ address = \"10.1.2\", port = 80 }]\npermitted = [{ address = \"1.1.1.1\", port = 443 }]\ndns = [{ resolver = \"10.137.54.3\", query = \"example.com\" }]", Refused(&["profiles.dev.readiness.denied[0].address", "expected an IPv4 address"])),
    row("readiness permitted address with prefix", "", "[profiles.dev.readiness]\ndenied = [{ address = \"10.1.2.3\", port = 80 }]\npermitted = [{ address = \"1.1.1.1/32\", port = 443 }]\ndns = [{ resolver = \"10.137.54.3\", query = \"example.com\" }]", Refused(&["profiles.dev.readiness.permitted[0].address", "expected an IPv4 address"])),
    row("readiness permitted address octet over 255", "", "[profiles.dev.readiness]\ndenied = [{ address = \"10.1.2.3\", port = 80 }]\npermitted = [{ address = \"1.1.1.1\", port = 443 }, { address = \"1.1.1.256\", port = 443 }]\ndns = [{ resolver = \"10.137.54.3\", query = \"example.com\" }]", Refused(&["profiles.dev.readiness.permitted[1].address", "expected an IPv4 address"])),
    row("readiness denied address leading zero", "", "[profiles.dev.readiness]\ndenied = [{ address = \"010.1.2.3\", port = 80 }]\npermitted = [{ address = \"1.1.1.1\", port = 443 }]\ndns = [{ resolver = \"10.137.54.3\", query = \"example.com\" }]", Refused(&["profiles.dev.readiness.denied[0].address", "expected an IPv4 address"])),
    row("readiness denied address ipv6", "", "[profiles.dev.readiness]\ndenied = [{ address = \"::1\", port = 80 }]\npermitted = [{ address = \"1.1.1.1\", port = 443 }]\ndns = [{ resolver = \"10.137.54.3\", query = \"example.com\" }]", Refused(&["profiles.dev.readiness.denied[0].address", "expected an IPv4 address"])),
    row("readiness dns resolver three octets", "", "[profiles.dev.readiness]\ndenied = [{ address = \"10.1.2.3\", port = 80 }]\npermitted = [{ address = \"1.1.1.1\", port = 443 }]\ndns = [{ resolver = \"10.137.54\", query = \"example.com\" }]", Refused(&["profiles.dev.readiness.dns[0].resolver", "expected an IPv4 address"])),
    row("readiness dns resolver hostname", "", "[profiles.dev.readiness]\ndenied = [{ address = \"10.1.2.3\", port = 80 }]\npermitted = [{ address = \"1.1.1.1\", port = 443 }]\ndns = [{ resolver = \"10.137.54.3\", query = \"a.com\" }, { resolver = \"dns.example\", query = \"example.com\" }]", Refused(&["profiles.dev.readiness.dns[1].resolver", "expected an IPv4 address"])),
    row("readiness permitted duplicate", "", "[profiles.dev.readiness]\ndenied = [{ address = \"10.1.2.3\", port = 80 }]\npermitted = [{ address = \"1.1.1.1\", port = 443 }, { address = \"8.8.8.8\", port = 53 }, { address = \"1.1.1.1\", port = 443 }]\ndns = [{ resolver = \"10.137.54.3\", query = \"example.com\" }]", Refused(&["key `profiles.dev.readiness.permitted[2]` conflicts with `profiles.dev.readiness.permitted[0]`", "duplicate", "expected unique targets"])),
    row("readiness dns duplicate", "", "[profiles.dev.readiness]\ndenied = [{ address = \"10.1.2.3\", port = 80 }]\npermitted = [{ address = \"1.1.1.1\", port = 443 }]\ndns = [{ resolver = \"10.137.54.3\", query = \"example.com\" }, { resolver = \"10.137.54.3\", query = \"example.com\" }]", Refused(&["key `profiles.dev.readiness.dns[1]` conflicts with `profiles.dev.readiness.dns[0]`", "duplicate", "expected unique targets"])),
    // profile.env
    row("env reference", "", "env = { TOKEN = \"env:HOST_TOKEN\", _x1 = \"env:_Y\" }", Accepted),
    row("env literal", "", "env = { TOKEN = \"secret\" }", Refused(&["profiles.dev.env.TOKEN", "env:NAME"])),
    row("env other scheme", "", "env = { TOKEN = \"file:/x\" }", Refused(&["profiles.dev.env.TOKEN"])),
    row("env bad reference name", "", "env = { TOKEN = \"env:1X\" }", Refused(&["profiles.dev.env.TOKEN"])),
    row("env bad key", "", "env = { \"1X\" = \"env:A\" }", Refused(&["profiles.dev.env.1X", "environment name"])),
    row("env not a string", "", "env = { TOKEN = 1 }", Refused(&["profiles.dev.env.TOKEN", "invalid type"])),
    // profile.volumes and volume.*
    row("volume directory", "", "[[profiles.dev.volumes]]\nhost = \"/srv/data\"\ncontainer = \"/root/data\"\nkind = \"directory\"", Accepted),
    row("volume file read-only", "", "[[profiles.dev.volumes]]\nhost = \"~/.gitconfig\"\ncontainer = \"/root/.gitconfig\"\nkind = \"file\"\naccess = \"read-only\"", Accepted),
    row("volume create under profile_dir", "", "[[profiles.dev.volumes]]\nhost = \"{profile_dir}/cache\"\ncontainer = \"/root/.cache\"\nkind = \"directory\"\ncreate = true", Accepted),
    row("volume missing host", "", "[[profiles.dev.volumes]]\ncontainer = \"/root/data\"\nkind = \"directory\"", Refused(&["profiles.dev.volumes[0]", "missing field `host`"])),
    row("volume missing container", "", "[[profiles.dev.volumes]]\nhost = \"/srv\"\nkind = \"directory\"", Refused(&["profiles.dev.volumes[0]", "missing field `container`"])),
    row("volume missing kind", "", "[[profiles.dev.volumes]]\nhost = \"/srv\"\ncontainer = \"/root/data\"", Refused(&["profiles.dev.volumes[0]", "missing field `kind`"])),
    row("volume unknown kind", "", "[[profiles.dev.volumes]]\nhost = \"/srv\"\ncontainer = \"/root/data\"\nkind = \"dir\"", Refused(&["profiles.dev.volumes[0].kind", "unknown variant `dir`"])),
    row("volume unknown access", "", "[[profiles.dev.volumes]]\nhost = \"/srv\"\ncontainer = \"/root/data\"\nkind = \"directory\"\naccess = \"ro\"", Refused(&["profiles.dev.volumes[0].access", "unknown variant `ro`"])),
    row("volume create not bool", "", "[[profiles.dev.volumes]]\nhost = \"{profile_dir}/c\"\ncontainer = \"/root/c\"\nkind = \"directory\"\ncreate = 1", Refused(&["profiles.dev.volumes[0].create", "invalid type"])),
    row("volume unknown key", "", "[[profiles.dev.volumes]]\nhost = \"/srv\"\ncontainer = \"/root/data\"\nkind = \"directory\"\nmode = \"rw\"", Refused(&["profiles.dev.volumes[0]", "unknown field `mode`"])),
    row("volume second host relative", "", "[[profiles.dev.volumes]]\nhost = \"/srv/a\"\ncontainer = \"/root/a\"\nkind = \"directory\"\n[[profiles.dev.volumes]]\nhost = \"srv/b\"\ncontainer = \"/root/b\"\nkind = \"directory\"", Refused(&["profiles.dev.volumes[1].host", "expected an absolute host path or one starting with ~/ or {profile_dir}/"])),
    row("volume host profile_dir double slash", "", "[[profiles.dev.volumes]]\nhost = \"{profile_dir}//x\"\ncontainer = \"/root/x\"\nkind = \"directory\"", Refused(&["profiles.dev.volumes[0].host"])),
    row("volume host bare profile_dir", "", "[[profiles.dev.volumes]]\nhost = \"{profile_dir}\"\ncontainer = \"/root/x\"\nkind = \"directory\"", Refused(&["profiles.dev.volumes[0].host"])),
    row("volume container root", "", "[[profiles.dev.volumes]]\nhost = \"/srv\"\ncontainer = \"/\"\nkind = \"directory\"", Refused(&["profiles.dev.volumes[0].container"])),
    row("volume container equals persistent", "", "[[profiles.dev.volumes]]\nhost = \"/srv\"\ncontainer = \"/root\"\nkind = \"directory\"", Refused(&["profiles.dev.volumes[0].container", "equals a persistent path"])),
    row("volume container outside persistent", "", "[[profiles.dev.volumes]]\nhost = \"/srv\"\ncontainer = \"/data/x\"\nkind = \"directory\"", Refused(&["profiles.dev.volumes[0].container", "exactly one persistent_dirs entry"])),
    row("volume container with empty persistent", "", "persistent_dirs = []\n[[profiles.dev.volumes]]\nhost = \"/srv\"\ncontainer = \"/root/x\"\nkind = \"directory\"", Refused(&["profiles.dev.volumes[0].container"])),
    row("volumes nested", "", "[[profiles.dev.volumes]]\nhost = \"/srv/a\"\ncontainer = \"/root/a\"\nkind = \"directory\"\n[[profiles.dev.volumes]]\nhost = \"/srv/b\"\ncontainer = \"/root/a/b\"\nkind = \"directory\"", Refused(&["profiles.dev.volumes[1].container", "profiles.dev.volumes[0].container", "pairwise disjoint"])),
    row("volumes siblings", "", "[[profiles.dev.volumes]]\nhost = \"/srv/a\"\ncontainer = \"/root/a\"\nkind = \"directory\"\n[[profiles.dev.volumes]]\nhost = \"/srv/b\"\ncontainer = \"/root/ab\"\nkind = \"directory\"", Accepted),
    row("volume on transient child", "", "[[profiles.dev.volumes]]\nhost = \"/srv/r\"\ncontainer = \"/etc/resolv.conf\"\nkind = \"file\"", Refused(&["profiles.dev.volumes[0].container", "protected destination /etc/resolv.conf"])),
    row("volume create for file", "", "[[profiles.dev.volumes]]\nhost = \"{profile_dir}/f\"\ncontainer = \"/root/f\"\nkind = \"file\"\ncreate = true", Refused(&["profiles.dev.volumes[0].create", "kind = \"directory\""])),
    row("volume create outside profile_dir", "", "[[profiles.dev.volumes]]\nhost = \"/srv/new\"\ncontainer = \"/root/new\"\nkind = \"directory\"\ncreate = true", Refused(&["profiles.dev.volumes[0].create"])),
    // profile.escalation and auto-approval rules
    row("escalation enabled with rules", "", "[profiles.dev.escalation]\nenabled = true\nauto_approve = [{ executable = \"/usr/bin/git\", args = [\"fetch\"], allow_extra_args = true }, { executable = \"/usr/bin/git\", args = [\"status\"] }]", Accepted),
    row("escalation disabled", "", "[profiles.dev.escalation]\nenabled = false", Accepted),
    row("escalation enabled not bool", "", "[profiles.dev.escalation]\nenabled = \"yes\"", Refused(&["profiles.dev.escalation.enabled", "invalid type"])),
    row("escalation args not a list", "", "[profiles.dev.escalation]\nenabled = true\nauto_approve = [{ executable = \"/bin/x\", args = \"a b\" }]", Refused(&["profiles.dev.escalation.auto_approve[0].args", "invalid type"])),
    row("escalation allow_extra_args not bool", "", "[profiles.dev.escalation]\nenabled = true\nauto_approve = [{ executable = \"/bin/x\", args = [\"a\"], allow_extra_args = 1 }]", Refused(&["profiles.dev.escalation.auto_approve[0].allow_extra_args", "invalid type"])),
    row("escalation missing executable", "", "[profiles.dev.escalation]\nenabled = true\nauto_approve = [{ args = [\"a\"] }]", Refused(&["profiles.dev.escalation.auto_approve[0]", "missing field `executable`"])),
    row("escalation home executable", "", "[profiles.dev.escalation]\nenabled = true\nauto_approve = [{ executable = \"~/bin/tool\" }]", Accepted),
    row("escalation rules while disabled", "", "[profiles.dev.escalation]\nauto_approve = [{ executable = \"/usr/bin/git\" }]", Refused(&["profiles.dev.escalation.auto_approve", "escalation.enabled = true"])),
    row("escalation extra args without args", "", "[profiles.dev.escalation]\nenabled = true\nauto_approve = [{ executable = \"/usr/bin/git\", allow_extra_args = true }]", Refused(&["profiles.dev.escalation.auto_approve[0].allow_extra_args", "at least one"])),
    row("escalation duplicate rule", "", "[profiles.dev.escalation]\nenabled = true\nauto_approve = [{ executable = \"/usr/bin/git\", args = [\"a\"] }, { executable = \"/usr/bin/git\", args = [\"a\"], allow_extra_args = false }]", Refused(&["profiles.dev.escalation.auto_approve[1]", "profiles.dev.escalation.auto_approve[0]", "duplicate"])),
    row("escalation args order differs", "", "[profiles.dev.escalation]\nenabled = true\nauto_approve = [{ executable = \"/usr/bin/git\", args = [\"a\", \"b\"] }, { executable = \"/usr/bin/git\", args = [\"b\", \"a\"] }]", Accepted),
    row("escalation relative executable", "", "[profiles.dev.escalation]\nenabled = true\nauto_approve = [{ executable = \"git\" }]", Refused(&["profiles.dev.escalation.auto_approve[0].executable"])),
    row("escalation profile_dir executable", "", "[profiles.dev.escalation]\nenabled = true\nauto_approve = [{ executable = \"{profile_dir}/x\" }]", Refused(&["profiles.dev.escalation.auto_approve[0].executable"])),
    row("escalation nul arg", "", "[profiles.dev.escalation]\nenabled = true\nauto_approve = [{ executable = \"/bin/x\", args = [\"a\\u0000\"] }]", Refused(&["profiles.dev.escalation.auto_approve[0].args[0]", "NUL"])),
    row("escalation unknown key", "", "[profiles.dev.escalation]\nenabled = true\nshell = true", Refused(&["profiles.dev.escalation", "unknown field `shell`"])),
    row("escalation rule unknown key", "", "[profiles.dev.escalation]\nenabled = true\nauto_approve = [{ executable = \"/bin/x\", argv = [] }]", Refused(&["profiles.dev.escalation.auto_approve[0]", "unknown field `argv`"])),
    // profile unknown key
    row("profile unknown key", "", "shell = \"/bin/zsh\"", Refused(&["profiles.dev", "unknown field `shell`"])),
    // strict TOML: duplicates and redefinitions
    row("duplicate key", "", "isolate_gitignored = true\nisolate_gitignored = true", Refused(&["duplicate key"])),
    row("duplicate table", "", "[profiles.dev.escalation]\nenabled = true\n[profiles.dev.escalation]\nenabled = true", Refused(&["duplicate key"])),
    row("duplicate inline key", "", "env = { A = \"env:X\", A = \"env:Y\" }", Refused(&["duplicate key"])),
    row("array redefined as array of tables", "", "volumes = []\n[[profiles.dev.volumes]]\nhost = \"/srv\"\ncontainer = \"/root/x\"\nkind = \"directory\"", Refused(&["duplicate key"])),
    row("no alias for a field", "", "isolate-gitignored = false", Refused(&["profiles.dev", "unknown field `isolate-gitignored`"])),
    row("no alias for an enum value", "", "[[profiles.dev.volumes]]\nhost = \"/srv\"\ncontainer = \"/root/x\"\nkind = \"Directory\"", Refused(&["profiles.dev.volumes[0].kind", "unknown variant `Directory`"])),
    row("table redefines inline", "", "escalation = { enabled = true }\n[profiles.dev.escalation]\nenabled = true", Refused(&["duplicate key"])),
    // Only the string form names an enumeration value: serde's externally
    // tagged table form (`kind = { directory = {} }`) is a second spelling.
    row("enum value as a tagged table", "", "[[profiles.dev.volumes]]\nhost = \"/srv\"\ncontainer = \"/root/x\"\nkind = { directory = {} }", Refused(&["profiles.dev.volumes[0].kind", "invalid type", "expected one of"])),
    row("enum access as a tagged table", "", "[[profiles.dev.volumes]]\nhost = \"/srv\"\ncontainer = \"/root/x\"\nkind = \"directory\"\naccess = { read-only = [] }", Refused(&["profiles.dev.volumes[0].access", "invalid type"])),
    // Every table is a table: serde's positional (sequence) form of a struct
    // would make unnamed array elements meaningful fields.
    row("escalation as a positional array", "", "escalation = [true]", Refused(&["profiles.dev.escalation", "invalid type: sequence", "expected a TOML table"])),
    row("auto-approval rule as a positional array", "", "[profiles.dev.escalation]\nenabled = true\nauto_approve = [[\"/bin/x\", [\"a\"], true]]", Refused(&["profiles.dev.escalation.auto_approve[0]", "invalid type: sequence"])),
    row("volume as a positional array", "", "volumes = [[\"/srv\", \"/root/x\", \"directory\", \"read-only\", false]]", Refused(&["profiles.dev.volumes[0]", "invalid type: sequence"])),
    row("readiness target as a positional array", "", "[profiles.dev.readiness]\ndenied = [[\"10.1.2.3\", 80]]\npermitted = [{ address = \"1.1.1.1\", port = 443 }]\ndns = [{ resolver = \"10.137.54.3\", query = \"a.com\" }]", Refused(&["profiles.dev.readiness.denied[0]", "invalid type: sequence"])),
    row("readiness as a positional array", "", "readiness = [[{ address = \"10.1.2.3\", port = 80 }], [{ address = \"1.1.1.1\", port = 443 }], [{ resolver = \"10.137.54.3\", query = \"a.com\" }]]", Refused(&["profiles.dev.readiness", "invalid type: sequence"])),
    row("storage as a positional array", "storage = [\"/srv/lazaret\"]", "", Refused(&["storage", "invalid type: sequence"])),
    row("network as a positional array", "network = [[\"1.1.1.0/24\"], []]", "", Refused(&["network", "invalid type: sequence"])),
    row("runtime as a positional array", "runtime = [5]", "", Refused(&["runtime", "invalid type: sequence"])),
    row("inline tables are tables", "", "escalation = { enabled = true, auto_approve = [{ executable = \"/bin/x\" }] }\nvolumes = [{ host = \"/srv\", container = \"/root/x\", kind = \"directory\", access = \"read-only\" }]", Accepted),
];

#[test]
fn every_row_has_the_expected_verdict() {
    let mut failures = Vec::new();
    for r in ROWS {
        let text = doc(r.root, r.body);
        let result = load(&text);
        match (&r.expect, &result) {
            (Expect::Ok, Ok(_)) => {}
            (Expect::Err(fragments), Err(e)) => {
                let message = e.to_string();
                for f in *fragments {
                    if !message.contains(f) {
                        failures.push(format!("{}: message {message:?} lacks {f:?}", r.name));
                    }
                }
            }
            (Expect::Ok, Err(e)) => failures.push(format!("{}: refused: {e}", r.name)),
            (Expect::Err(_), Ok(_)) => failures.push(format!("{}: accepted", r.name)),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_refusal_names_what_was_expected() {
    for r in ROWS {
        if let Err(e) = load(&doc(r.root, r.body)) {
            let m = e.to_string();
            assert!(
                m.contains("expected")
                    || m.contains("duplicate key")
                    || m.contains("unknown field")
                    || m.contains("missing field")
                    || m.contains("unknown variant")
                    || m.contains("invalid type")
                    || m.contains("invalid value"),
                "{}: {m}",
                r.name
            );
        }
    }
}

fn refused(text: &str) -> String {
    match load(text) {
        Ok(_) => panic!("accepted: {text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn schema_dispatch() {
    let body = "[profiles.dev]\nimage = \"a/b\"\n";
    assert!(refused(body).contains("`schema` is missing"));
    assert!(refused(&format!(
        "schema = \"lazaret-trusted-host-config-v2\"\n{body}"
    ))
    .contains("expected \"lazaret-trusted-host-config-v1\""));
    assert!(refused(&format!("schema = 1\n{body}")).contains("integer"));
    assert!(load(&format!("{SCHEMA}{body}")).is_ok());
}

#[test]
fn profiles_table_required_and_nonempty() {
    assert!(refused(SCHEMA).contains("missing field `profiles`"));
    assert!(refused(&format!("{SCHEMA}profiles = {{}}\n")).contains("at least one"));
    // A profile is a table, never serde's positional form.
    let m = refused(&format!("{SCHEMA}profiles = {{ dev = [\"a\"] }}\n"));
    assert!(
        m.contains("profiles.dev") && m.contains("invalid type: sequence"),
        "{m}"
    );
}

#[test]
fn image_grammar() {
    let with_image = |img: &str| {
        let escaped = img.replace('\0', "\\u0000");
        format!("{SCHEMA}[profiles.dev]\nimage = \"{escaped}\"\n")
    };
    let digest = format!("sha256:{}", "0123abcd".repeat(8));
    for (ok, normalised) in [
        ("a", "docker.io/library/a:latest".to_owned()),
        (
            "registry.example:5000/ns/img:tag",
            "registry.example:5000/ns/img:tag".to_owned(),
        ),
        (
            &format!("img@{digest}"),
            format!("docker.io/library/img@{digest}"),
        ),
    ] {
        let selected = load(&with_image(ok)).expect(ok);
        assert_eq!(selected.image().as_str(), normalised, "{ok}");
    }
    for bad in [
        "",
        " x",
        "a b",
        "-x",
        "img;rm",
        "a\u{0}b",
        "img@sha256:0123abcd",
        "host/Upper",
    ] {
        let m = refused(&with_image(bad));
        assert!(m.contains("profiles.dev.image"), "{bad:?}: {m}");
    }
    assert!(refused(&format!("{SCHEMA}[profiles.dev]\n")).contains("missing field `image`"));
}

#[test]
fn profile_name_grammar() {
    let named = |name: &str| format!("{SCHEMA}[profiles.{name:?}]\nimage = \"a\"\n");
    let long_ok = "a".repeat(64);
    for ok in ["a", "A1._-", long_ok.as_str(), "0dev"] {
        let layout = SandboxLayoutV1::production().expect("layout");
        let doc = decode_document(named(ok).as_bytes()).expect(ok);
        assert!(doc.select(ok, &layout).is_ok(), "{ok}");
    }
    let long_bad = "a".repeat(65);
    for bad in [
        "-x",
        ".x",
        "..",
        ".",
        long_bad.as_str(),
        "a b",
        "é",
        "a/b",
        "",
    ] {
        let m = decode_document(named(bad).as_bytes())
            .expect_err(bad)
            .to_string();
        assert!(m.contains("expected a profile name"), "{bad:?}: {m}");
    }
}

#[test]
fn selection_is_exact_and_only_the_selected_profile_is_validated_semantically() {
    let text = format!(
        "{SCHEMA}[profiles.dev]\nimage = \"a\"\n[profiles.other]\nimage = \"b\"\npersistent_dirs = [\"/x\", \"/x/y\"]\n"
    );
    let layout = SandboxLayoutV1::production().expect("layout");
    // The other profile's layout is not checked when dev is selected...
    assert!(decode_document(text.as_bytes())
        .expect("decode")
        .select("dev", &layout)
        .is_ok());
    // ...but is when it is selected.
    let e = decode_document(text.as_bytes())
        .expect("decode")
        .select("other", &layout)
        .expect_err("other");
    assert!(e.to_string().contains("profiles.other.persistent_dirs[1]"));
    // Names are case-sensitive and never inferred.
    let e = decode_document(text.as_bytes())
        .expect("decode")
        .select("Dev", &layout)
        .expect_err("Dev");
    assert!(
        e.to_string().contains("\"Dev\" is not defined") && e.to_string().contains("dev, other"),
        "{e}"
    );
    // Grammar errors in any profile refuse the document (structural decoding).
    let broken = format!("{SCHEMA}[profiles.dev]\nimage = \"a\"\n[profiles.other]\nimage = \"b\"\nallow_egress = [\"x\"]\n");
    assert!(decode_document(broken.as_bytes())
        .expect_err("broken")
        .to_string()
        .contains("profiles.other.allow_egress[0]"));
}

#[test]
fn defaults_are_applied() {
    let s = load(&doc("", "")).expect("base");
    let dirs: Vec<&str> = s.persistent_dirs().map(|p| p.as_str()).collect();
    assert_eq!(dirs, ["/root", "/usr", "/var", "/etc", "/opt"]);
    assert!(s.isolate_gitignored());
    assert_eq!(s.runsc_dcache(), 50_000);
    assert!(!s.escalation().enabled);
    assert!(s.readiness().is_none());
    let deny: Vec<String> = s.policy().deny().iter().map(ToString::to_string).collect();
    assert_eq!(deny, ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"]);
    assert!(s.policy().allow().is_empty());
    let v = load(&doc(
        "",
        "[[profiles.dev.volumes]]\nhost = \"/srv\"\ncontainer = \"/root/x\"\nkind = \"directory\"",
    ))
    .expect("volume");
    assert_eq!(v.volumes()[0].access.as_str(), "read-write");
    assert!(!v.volumes()[0].create);
}

#[test]
fn prefixes_are_normalized_and_deduplicated() {
    let s = load(&doc(
        "[network]\ndefault_allow = [\"1.1.1.1/24\"]",
        "allow_egress = [\"1.1.1.0/24\", \"1.1.1.200/24\"]\ndeny_egress = [\"10.0.0.0/8\", \"9.9.9.9/8\"]",
    ))
    .expect("normalized");
    let allow: Vec<String> = s.policy().allow().iter().map(ToString::to_string).collect();
    assert_eq!(allow, ["1.1.1.0/24"]);
    let deny: Vec<String> = s.policy().deny().iter().map(ToString::to_string).collect();
    assert_eq!(
        deny,
        ["9.0.0.0/8", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"]
    );
}

#[test]
fn non_utf8_and_oversized_sources_are_refused() {
    let e = decode_document(b"schema = \"\xff\"").expect_err("utf8");
    assert!(e.to_string().contains("not valid UTF-8"));
    let big = vec![b'#'; 1_048_577];
    assert!(decode_document(&big)
        .expect_err("big")
        .to_string()
        .contains("at most 1048576 bytes"));
    let mut exact = doc("", "").into_bytes();
    exact.resize(1_048_576, b'\n');
    assert!(decode_document(&exact).is_ok());
}

#[test]
fn syntax_errors_carry_a_position() {
    let m = decode_document(b"schema = \"lazaret-trusted-host-config-v1\"\n[profiles.dev\n")
        .expect_err("syntax")
        .to_string();
    assert!(m.contains("line 2"), "{m}");
}

#[test]
fn the_user_guide_examples_are_valid() {
    // Every complete document (one that names the schema) in the user
    // guide's TOML blocks loads; the reference cannot drift from the code.
    let guide = include_str!("../../docs/user-guide.md");
    let mut complete = 0;
    for block in guide.split("```toml\n").skip(1) {
        let Some(end) = block.find("```") else {
            panic!("an unclosed TOML block in docs/user-guide.md");
        };
        let text = &block[..end];
        if !text.contains("schema = ") {
            continue;
        }
        complete += 1;
        let layout = SandboxLayoutV1::production().expect("layout");
        let document = decode_document(text.as_bytes());
        assert!(document.is_ok(), "{text}\n{:?}", document.err());
        let names: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("[profiles."))
            .map(|rest| rest.split(['.', ']']).next().unwrap_or_default())
            .collect();
        assert!(!names.is_empty(), "{text}");
        for name in names {
            let selected = decode_document(text.as_bytes()).and_then(|d| d.select(name, &layout));
            assert!(selected.is_ok(), "{name} in\n{text}\n{:?}", selected.err());
        }
    }
    assert!(complete >= 1, "no complete example in docs/user-guide.md");
}

#[test]
fn key_paths_quote_keys_that_are_not_bare() {
    let text = format!("{SCHEMA}[profiles.\"my.dev\"]\nimage = \"a\"\nshell = 1\n");
    let m = decode_document(text.as_bytes())
        .expect_err("unknown")
        .to_string();
    assert!(
        m.contains("key `profiles.\"my.dev\".shell`: unknown field `shell`") && !m.contains('\n'),
        "{m}"
    );
    let text = format!("{SCHEMA}[profiles.\"my.dev\"]\nimage = \"a\"\nallow_egress = [\"x\"]\n");
    let m = decode_document(text.as_bytes())
        .expect_err("prefix")
        .to_string();
    assert!(
        m.contains("key `profiles.\"my.dev\".allow_egress[0]`"),
        "{m}"
    );
}

fn list(n: usize, item: impl Fn(usize) -> String) -> String {
    (0..n).map(item).collect::<Vec<_>>().join(", ")
}

#[test]
fn lists_are_bounded_at_1024_entries() {
    let dirs = |n| format!("persistent_dirs = [{}]", list(n, |i| format!("\"/p{i}\"")));
    assert!(load(&doc("", &dirs(1024))).is_ok());
    let m = refused(&doc("", &dirs(1025)));
    assert!(
        m.contains("profiles.dev.persistent_dirs") && m.contains("expected at most 1024 entries"),
        "{m}"
    );
    let prefixes = |n| {
        format!(
            "deny_egress = [{}]",
            list(n, |i| format!("\"1.{}.{}.0/24\"", i / 256, i % 256))
        )
    };
    assert!(load(&doc("", &prefixes(1024))).is_ok());
    assert!(refused(&doc("", &prefixes(1025))).contains("profiles.dev.deny_egress"));
    let env = |n| {
        format!(
            "env = {{ {} }}",
            list(n, |i| format!("V{i} = \"env:H{i}\""))
        )
    };
    assert!(load(&doc("", &env(1024))).is_ok());
    assert!(refused(&doc("", &env(1025))).contains("profiles.dev.env"));
    let volumes = |n| {
        format!(
            "volumes = [{}]",
            list(n, |i| format!(
                "{{ host = \"/srv/{i}\", container = \"/root/{i}\", kind = \"directory\" }}"
            ))
        )
    };
    assert!(load(&doc("", &volumes(1024))).is_ok());
    assert!(refused(&doc("", &volumes(1025))).contains("profiles.dev.volumes"));
    let rules = |n| {
        format!(
            "escalation = {{ enabled = true, auto_approve = [{}] }}",
            list(n, |i| format!(
                "{{ executable = \"/bin/x\", args = [\"{i}\"] }}"
            ))
        )
    };
    assert!(load(&doc("", &rules(1024))).is_ok());
    assert!(refused(&doc("", &rules(1025))).contains("profiles.dev.escalation.auto_approve"));
    let args = |n| {
        format!("escalation = {{ enabled = true, auto_approve = [{{ executable = \"/bin/x\", args = [{}] }}] }}", list(n, |i| format!("\"{i}\"")))
    };
    assert!(load(&doc("", &args(1024))).is_ok());
    assert!(refused(&doc("", &args(1025))).contains("profiles.dev.escalation.auto_approve[0].args"));
    // A 1 MiB document of 90,000 short entries is refused, not ground through.
    let huge = dirs(90_000);
    assert!(huge.len() < 1_048_576);
    let started = std::time::Instant::now();
    assert!(refused(&doc("", &huge)).contains("expected at most 1024 entries"));
    eprintln!("90,000-entry refusal took {:?}", started.elapsed());
}

#[test]
fn readiness_bounds_have_accepted_and_refused_cases() {
    // schemas.md: one to 32 unique targets per list; a strict DNS name.
    let ready = |denied: usize, query: &str| {
        format!(
            "[profiles.dev.readiness]\ndenied = [{}]\npermitted = [{{ address = \"1.1.1.1\", port = 443 }}]\ndns = [{{ resolver = \"10.137.54.3\", query = \"{query}\" }}]",
            list(denied, |i| format!("{{ address = \"10.1.2.3\", port = {} }}", i + 1))
        )
    };
    assert!(load(&doc("", &ready(32, "example.com"))).is_ok());
    let m = refused(&doc("", &ready(33, "example.com")));
    assert!(
        m.contains("profiles.dev.readiness.denied") && m.contains("one to 32"),
        "{m}"
    );
    let label63 = format!("{}.com", "a".repeat(63));
    assert!(load(&doc("", &ready(1, &label63))).is_ok());
    let label64 = format!("{}.com", "a".repeat(64));
    let m = refused(&doc("", &ready(1, &label64)));
    assert!(m.contains("profiles.dev.readiness.dns[0].query"), "{m}");
    // 253 bytes in total is the longest accepted name.
    let name = |len: usize| {
        let mut labels = Vec::new();
        let mut left = len;
        while left > 0 {
            let take = left.min(63);
            labels.push("b".repeat(take));
            left = left.saturating_sub(take + 1);
        }
        labels.join(".")
    };
    assert_eq!(name(253).len(), 253);
    assert!(load(&doc("", &ready(1, &name(253)))).is_ok());
    assert_eq!(name(255).len(), 255);
    assert!(refused(&doc("", &ready(1, &name(255)))).contains("at most 253 bytes"));
    let m = refused(&doc("", &ready(1, "-a.com")));
    assert!(m.contains("profiles.dev.readiness.dns[0].query"), "{m}");
}

#[test]
fn refusals_never_echo_control_characters() {
    // serde's own messages quote the offending key raw; a refusal printed to
    // a terminal must not carry escape sequences or line breaks from the file.
    for body in [
        "\"\\u001b[2Jx\" = 1",
        "\"a\\nb\" = 1",
        "[[profiles.dev.volumes]]\nhost = \"/srv\"\ncontainer = \"/root/x\"\nkind = \"\\u001b[31mdir\"",
    ] {
        let m = refused(&doc("", body));
        assert!(
            !m.chars().any(char::is_control) && m.contains("expected"),
            "{body}: {m:?}"
        );
    }
}
