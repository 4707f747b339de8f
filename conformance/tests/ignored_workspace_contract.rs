//! `lazaret-ignored-workspace-contract-v1`, classification (spec 3.5,
//! "Ignored Workspace State routing contract"): Git itself is the oracle.
//!
//! Each case generates a working tree — names with case variants, glob and
//! escape characters, a non-UTF-8 name; `.gitignore` files at several levels,
//! `info/exclude`, a global excludes file; a random tracked subset
//! (force-added, so tracked-but-ignored paths occur); sometimes
//! `core.ignoreCase`; sometimes a nested repository, sometimes registered as a
//! gitlink — then reads the workspace with the product's own reader
//! (`lazaret_effects::workspace_routing::read_snapshot`) and checks every
//! file's and directory's backing against Git's answer:
//! - a tracked file (`git ls-files --cached`), or a directory holding one, is
//!   host-backed;
//! - an untracked file is isolated exactly when `git ls-files --others
//!   --ignored --exclude-standard` lists it;
//! - an untracked directory is isolated exactly when `git check-ignore
//!   --no-index` names it;
//! - inside a nested repository the same questions go to that repository,
//!   unless the enclosing one ignores it (then Git never looks inside).
//!
//! `LAZARET_ROUTING_CASES` sets the number of cases (default 150); a failure
//! names its seed, and `LAZARET_ROUTING_SEED` replays one.

use lazaret_effects::workspace_routing::read_snapshot;
use lazaret_runtime::workspace_routing::{Backing, ClassificationSnapshot};
use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs;
use std::io::Write as _;
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;
use std::process::{Command, Stdio};

const NAMES: &[&[u8]] = &[
    b"a",
    b"b",
    b"A",
    b"build",
    b"node_modules",
    b"keep",
    b"x.log",
    b"Y.LOG",
    b".env",
    b"sp ace",
    b"#hash",
    b"!bang",
    b"caf\xe9",
    b"dist",
    b"deep",
    b"trailing",
    b"b*",
    // Host-made: routed by the rules like any name (a `HEAD` the sandbox
    // makes is isolated whatever they say).
    b"HEAD",
];

const PATTERNS: &[&[u8]] = &[
    b"*.log",
    b"build/",
    b"/build",
    b"!keep",
    b"node_modules",
    b"**/x.log",
    b"a/**",
    b"!*.LOG",
    b"*.LOG",
    b"dist/*",
    b"\\#hash",
    b"\\!bang",
    b"!*/",
    b"a/b",
    b"b/",
    b"[ab]",
    b"?",
    b"caf\xe9",
    b"sp ace",
    b"trailing   ",
    b"# comment",
    b"!build/keep",
    b"/*.log",
    b"**/b/**",
    b"A",
    b"deep/**/keep",
    b"!dist/keep",
    b"*",
    b"!a",
    b".env",
    b"a/",
    b"/a/b/",
    b"**/build",
    b"!/build/",
    b"x.lo[gG]",
    b"b\\*",
    b"!**/keep",
    b"*/keep",
    b"[!a]",
    b"deep/",
    b"!deep/",
    b"keep/",
    b"/*",
    b"!.gitignore",
    b"Y.log",
    b"build/**",
];

/// xorshift64*: reproducible from the seed alone.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % u64::try_from(n).unwrap_or(1)).unwrap_or(0)
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
    fn pick<'a>(&mut self, items: &[&'a [u8]]) -> &'a [u8] {
        items[self.below(items.len())]
    }
}

/// One generated path, relative to the workspace root.
#[derive(Debug, Clone)]
struct Entry {
    path: Vec<u8>,
    is_dir: bool,
}

fn join(parent: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = parent.to_vec();
    if !p.is_empty() {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

fn os(path: &[u8]) -> &Path {
    Path::new(OsStr::from_bytes(path))
}

fn git(dir: &Path, args: &[&str], stdin: &[u8]) -> Result<Vec<u8>, String> {
    let mut command = Command::new("git");
    // Names like `b*` are names, not globs (check-ignore refuses pathspec
    // magic; it is run with `--no-index`, below).
    if args.first() != Some(&"check-ignore") {
        command.arg("--literal-pathspecs");
    }
    let mut child = command
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("git {args:?}: {e}"))?;
    if let Some(mut input) = child.stdin.take() {
        input
            .write_all(stdin)
            .map_err(|e| format!("git {args:?} stdin: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("git {args:?}: {e}"))?;
    // check-ignore exits 1 when nothing is ignored.
    let ok = out.status.success()
        || (args.first() == Some(&"check-ignore") && out.status.code() == Some(1));
    if !ok {
        return Err(format!(
            "git {args:?} in {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(out.stdout)
}

fn nul_set(bytes: &[u8]) -> BTreeSet<Vec<u8>> {
    bytes
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}

fn ignore_lines(rng: &mut Rng) -> Vec<u8> {
    let mut text = Vec::new();
    for _ in 0..=rng.below(5) {
        text.extend_from_slice(rng.pick(PATTERNS));
        text.push(b'\n');
    }
    text
}

struct Generated {
    entries: Vec<Entry>,
    /// Nested repositories' roots, relative to the workspace.
    nested: Vec<Vec<u8>>,
    ignore_case: bool,
}

fn write(root: &Path, path: &[u8], bytes: &[u8]) -> Result<(), String> {
    fs::write(root.join(os(path)), bytes)
        .map_err(|e| format!("write {}: {e}", String::from_utf8_lossy(path)))
}

fn generate_dir(
    rng: &mut Rng,
    root: &Path,
    dir: &[u8],
    depth: usize,
    ignore_case: bool,
    entries: &mut Vec<Entry>,
) -> Result<(), String> {
    if rng.chance(if dir.is_empty() { 90 } else { 30 }) {
        let path = join(dir, b".gitignore");
        write(root, &path, &ignore_lines(rng))?;
        entries.push(Entry {
            path,
            is_dir: false,
        });
    }
    let mut taken: BTreeSet<Vec<u8>> = BTreeSet::new();
    for _ in 0..=rng.below(4) {
        let name = rng.pick(NAMES);
        let key = if ignore_case {
            name.to_ascii_lowercase()
        } else {
            name.to_vec()
        };
        if !taken.insert(key) {
            continue;
        }
        let path = join(dir, name);
        if depth < 3 && rng.chance(45) {
            fs::create_dir(root.join(os(&path))).map_err(|e| e.to_string())?;
            entries.push(Entry {
                path: path.clone(),
                is_dir: true,
            });
            generate_dir(rng, root, &path, depth + 1, ignore_case, entries)?;
        } else {
            write(root, &path, b"x\n")?;
            entries.push(Entry {
                path,
                is_dir: false,
            });
        }
    }
    Ok(())
}

fn generate(seed: u64, root: &Path) -> Result<Generated, String> {
    let mut rng = Rng::new(seed);
    let ignore_case = rng.chance(20);
    git(root, &["init", "-q"], b"")?;
    let excludes = root.join(".git").join("global-excludes");
    fs::write(&excludes, ignore_lines(&mut rng)).map_err(|e| e.to_string())?;
    let excludes_value = if rng.chance(50) {
        excludes.to_string_lossy().into_owned()
    } else {
        root.join(".git")
            .join("absent-excludes")
            .to_string_lossy()
            .into_owned()
    };
    git(root, &["config", "core.excludesFile", &excludes_value], b"")?;
    git(
        root,
        &[
            "config",
            "core.ignoreCase",
            if ignore_case { "true" } else { "false" },
        ],
        b"",
    )?;
    if rng.chance(50) {
        fs::create_dir_all(root.join(".git/info")).map_err(|e| e.to_string())?;
        fs::write(root.join(".git/info/exclude"), ignore_lines(&mut rng))
            .map_err(|e| e.to_string())?;
    }
    let mut entries = Vec::new();
    generate_dir(&mut rng, root, b"", 0, ignore_case, &mut entries)?;

    // Sometimes one directory becomes a nested repository.
    let mut nested = Vec::new();
    let dirs: Vec<Vec<u8>> = entries
        .iter()
        .filter(|e| e.is_dir)
        .map(|e| e.path.clone())
        .collect();
    if !dirs.is_empty() && rng.chance(30) {
        let n = dirs[rng.below(dirs.len())].clone();
        let n_root = root.join(os(&n));
        git(&n_root, &["init", "-q"], b"")?;
        git(
            &n_root,
            &["config", "core.excludesFile", &excludes_value],
            b"",
        )?;
        git(
            &n_root,
            &[
                "config",
                "core.ignoreCase",
                if ignore_case { "true" } else { "false" },
            ],
            b"",
        )?;
        let inner: Vec<Vec<u8>> = entries
            .iter()
            .filter(|e| !e.is_dir && e.path.starts_with(&join(&n, b"")))
            .map(|e| e.path[n.len() + 1..].to_vec())
            .collect();
        add_some(&mut rng, &n_root, &inner)?;
        if rng.chance(50) {
            git(&n_root, &["commit", "-q", "--allow-empty", "-m", "n"], b"")?;
            // Registered in the enclosing repository as a gitlink.
            let mut spec = n.clone();
            spec.push(0);
            git(
                root,
                &["add", "-f", "--pathspec-from-file=-", "--pathspec-file-nul"],
                &spec,
            )?;
        }
        nested.push(n);
    }
    let outer: Vec<Vec<u8>> = entries
        .iter()
        .filter(|e| !e.is_dir && !nested.iter().any(|n| e.path.starts_with(&join(n, b""))))
        .map(|e| e.path.clone())
        .collect();
    add_some(&mut rng, root, &outer)?;
    Ok(Generated {
        entries,
        nested,
        ignore_case,
    })
}

/// Force-adds a random third of `files` (so tracked files that the rules
/// ignore occur).
fn add_some(rng: &mut Rng, repo: &Path, files: &[Vec<u8>]) -> Result<(), String> {
    let mut spec = Vec::new();
    for f in files {
        if rng.chance(33) {
            spec.extend_from_slice(f);
            spec.push(0);
        }
    }
    if !spec.is_empty() {
        git(
            repo,
            &["add", "-f", "--pathspec-from-file=-", "--pathspec-file-nul"],
            &spec,
        )?;
    }
    Ok(())
}

/// Git's answer for every entry in the repository at `prefix` (empty: the
/// workspace's own), recursing into nested repositories it does not ignore.
fn oracle(
    root: &Path,
    prefix: &[u8],
    generated: &Generated,
    out: &mut Vec<(Entry, Backing)>,
) -> Result<(), String> {
    let repo = if prefix.is_empty() {
        root.to_owned()
    } else {
        root.join(os(prefix))
    };
    let under = |p: &[u8], dir: &[u8]| dir.is_empty() || p.starts_with(&join(dir, b""));
    let inner_nested: Vec<&Vec<u8>> = generated
        .nested
        .iter()
        .filter(|n| n.as_slice() != prefix && under(n, prefix))
        .collect();
    let mine: Vec<&Entry> = generated
        .entries
        .iter()
        .filter(|e| under(&e.path, prefix) && e.path != prefix)
        .filter(|e| {
            !inner_nested
                .iter()
                .any(|n| under(&e.path, n) && e.path != **n)
        })
        .collect();
    let rel = |e: &Entry| -> Vec<u8> {
        if prefix.is_empty() {
            e.path.clone()
        } else {
            e.path[prefix.len() + 1..].to_vec()
        }
    };
    let tracked = nul_set(&git(&repo, &["ls-files", "-z", "--cached"], b"")?);
    let ignored_files = nul_set(&git(
        &repo,
        &[
            "ls-files",
            "-z",
            "--others",
            "--ignored",
            "--exclude-standard",
        ],
        b"",
    )?);
    let mut ask = Vec::new();
    for e in mine.iter().filter(|e| e.is_dir) {
        ask.extend_from_slice(&rel(e));
        ask.push(0);
    }
    let ignored_dirs = if ask.is_empty() {
        BTreeSet::new()
    } else {
        // `--no-index`: only untracked directories are asked, and without it
        // check-ignore reads each path as a pathspec and skips one whose glob
        // (`b*`) matches a tracked file.
        nul_set(&git(
            &repo,
            &["check-ignore", "-z", "--no-index", "--stdin"],
            &ask,
        )?)
    };
    let holds = |p: &[u8]| {
        let fold = |s: &[u8]| {
            if generated.ignore_case {
                s.to_ascii_lowercase()
            } else {
                s.to_vec()
            }
        };
        let p = fold(p);
        let dir = join(&p, b"");
        tracked.iter().any(|t| {
            let t = fold(t);
            t == p || t.starts_with(&dir)
        })
    };
    for e in mine {
        let r = rel(e);
        let backing = if holds(&r) {
            Backing::Host
        } else if (e.is_dir && ignored_dirs.contains(&r))
            || (!e.is_dir && ignored_files.contains(&r))
        {
            Backing::Isolated
        } else {
            Backing::Host
        };
        out.push((e.clone(), backing));
    }
    for n in inner_nested {
        // Only the outermost nested repositories below `prefix`.
        if generated
            .nested
            .iter()
            .any(|m| m != n && under(n, m) && m.as_slice() != prefix && under(m, prefix))
        {
            continue;
        }
        let n_backing = out.iter().find(|(e, _)| &e.path == n).map(|(_, b)| *b);
        if n_backing == Some(Backing::Isolated) {
            for e in generated
                .entries
                .iter()
                .filter(|e| under(&e.path, n) && e.path != *n)
            {
                out.push((e.clone(), Backing::Isolated));
            }
        } else {
            oracle(root, n, generated, out)?;
        }
    }
    Ok(())
}

fn describe(root: &Path, snapshot: &ClassificationSnapshot, entry: &Entry) -> String {
    let route = snapshot.classify(&entry.path, entry.is_dir);
    let mut ignore_files = String::new();
    let mut dir = entry.path.clone();
    loop {
        let cut = dir.iter().rposition(|b| *b == b'/').unwrap_or(0);
        dir.truncate(cut);
        let gi = root.join(os(&join(&dir, b".gitignore")));
        if let Ok(text) = fs::read(&gi) {
            ignore_files.push_str(&format!(
                "  {}: {:?}\n",
                gi.display(),
                String::from_utf8_lossy(&text)
            ));
        }
        if dir.is_empty() {
            break;
        }
    }
    format!("{route:?}\n{ignore_files}")
}

/// What one case checked.
#[derive(Default)]
struct Tally {
    paths: usize,
    isolated: usize,
    tracked_but_matched: usize,
    nested: usize,
    ignore_case: usize,
}

fn run_case(seed: u64, tally: &mut Tally) -> Result<(), String> {
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let root = tmp.path().join("w");
    fs::create_dir(&root).map_err(|e| e.to_string())?;
    let generated = generate(seed, &root)?;
    let mut expected = Vec::new();
    oracle(&root, b"", &generated, &mut expected)?;
    let snapshot = read_snapshot(&root).map_err(|e| format!("read_snapshot: {e}"))?;
    let mut failures = Vec::new();
    for (entry, want) in &expected {
        let got = snapshot
            .classify(&entry.path, entry.is_dir)
            .map_err(|e| format!("{}: {e}", String::from_utf8_lossy(&entry.path)))?
            .backing;
        if got != *want {
            failures.push(format!(
                "{}{} — git: {want:?}, lazaret: {}",
                String::from_utf8_lossy(&entry.path),
                if entry.is_dir { "/" } else { "" },
                describe(&root, &snapshot, entry)
            ));
        }
    }
    if failures.is_empty() {
        tally.paths += expected.len();
        tally.isolated += expected
            .iter()
            .filter(|(_, b)| *b == Backing::Isolated)
            .count();
        tally.tracked_but_matched += expected
            .iter()
            .filter(|(e, _)| {
                matches!(
                    snapshot.classify(&e.path, e.is_dir).map(|r| r.decision),
                    Ok(lazaret_runtime::workspace_routing::Decision::Tracked)
                ) && ignored_by_rules(&root, &e.path)
            })
            .count();
        tally.nested += usize::from(!generated.nested.is_empty());
        tally.ignore_case += usize::from(generated.ignore_case);
        Ok(())
    } else {
        let info = fs::read(root.join(".git/info/exclude")).unwrap_or_default();
        let global = fs::read(root.join(".git/global-excludes")).unwrap_or_default();
        Err(format!(
            "seed {seed} (ignoreCase {}, nested {:?}, info/exclude {:?}, global {:?}):\n{}",
            generated.ignore_case,
            generated
                .nested
                .iter()
                .map(|n| String::from_utf8_lossy(n).into_owned())
                .collect::<Vec<_>>(),
            String::from_utf8_lossy(&info),
            String::from_utf8_lossy(&global),
            failures.join("\n")
        ))
    }
}

/// Whether `git check-ignore --no-index` (rules only, index disregarded)
/// matches `path`.
fn ignored_by_rules(root: &Path, path: &[u8]) -> bool {
    let mut ask = path.to_vec();
    ask.push(0);
    git(root, &["check-ignore", "-z", "--no-index", "--stdin"], &ask)
        .is_ok_and(|out| !out.is_empty())
}

#[test]
fn classification_agrees_with_git_on_generated_trees() -> Result<(), String> {
    let seeds: Vec<u64> = match std::env::var("LAZARET_ROUTING_SEED") {
        Ok(s) => vec![s
            .parse()
            .map_err(|e| format!("LAZARET_ROUTING_SEED: {e}"))?],
        Err(_) => {
            let cases: u64 = std::env::var("LAZARET_ROUTING_CASES")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(150);
            (0..cases).collect()
        }
    };
    let single = seeds.len() == 1;
    let mut tally = Tally::default();
    let mut failures = Vec::new();
    for seed in seeds {
        if let Err(e) = run_case(seed, &mut tally) {
            failures.push(e);
        }
    }
    assert!(
        failures.is_empty(),
        "{} case(s) disagree with git:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    eprintln!(
        "checked {} paths: {} isolated, {} tracked although a rule matches; {} cases with a nested repository, {} with core.ignoreCase",
        tally.paths, tally.isolated, tally.tracked_but_matched, tally.nested, tally.ignore_case
    );
    // The corpus must exercise both backings and every input kind.
    if !single {
        assert!(
            tally.isolated * 5 > tally.paths / 5,
            "too few isolated paths"
        );
        assert!(tally.isolated < tally.paths, "no host-backed path");
        assert!(tally.tracked_but_matched > 0 && tally.nested > 0 && tally.ignore_case > 0);
    }
    Ok(())
}
