//! Unit cases of the classification walk. Git itself is the oracle in
//! `conformance/tests/ignored_workspace_contract.rs`, on generated trees.

use super::*;

fn tracked(paths: &[&str]) -> TrackedPaths {
    TrackedPaths::from_paths(paths.iter().map(|p| p.as_bytes().to_vec()), false)
}

fn backing(snapshot: &ClassificationSnapshot, path: &str, is_dir: bool) -> Backing {
    match snapshot.classify(path.as_bytes(), is_dir) {
        Ok(route) => route.backing,
        Err(e) => panic!("{path}: {e}"),
    }
}

#[test]
fn nothing_below_an_excluded_directory_is_reincluded() {
    let mut rules = RepositoryRules::new(tracked(&[]), false);
    rules.add_gitignore(b"", b"build/\n!build/keep\n");
    rules.add_gitignore(b"build", b"!*\n");
    let s = ClassificationSnapshot::of_repository(rules);
    assert_eq!(backing(&s, "build", true), Backing::Isolated);
    assert_eq!(backing(&s, "build/keep", false), Backing::Isolated);
    let route = s.classify(b"build/deep/x", false);
    assert!(
        matches!(
            &route,
            Ok(Route { decision: Decision::InExcludedDirectory { directory, .. }, .. })
                if directory == b"build"
        ),
        "{route:?}"
    );
    // A file named like the directory pattern is not a directory.
    assert_eq!(backing(&s, "src/build", false), Backing::Host);
}

#[test]
fn tracked_paths_are_host_backed_but_their_excluded_directory_still_excludes() {
    let mut rules = RepositoryRules::new(tracked(&["build/keep.txt"]), false);
    rules.add_gitignore(b"", b"build/\n*.txt\n");
    let s = ClassificationSnapshot::of_repository(rules);
    assert_eq!(backing(&s, "build", true), Backing::Host);
    assert_eq!(backing(&s, "build/keep.txt", false), Backing::Host);
    assert_eq!(backing(&s, "build/new.c", false), Backing::Isolated);
    assert_eq!(backing(&s, "notes.txt", false), Backing::Isolated);
}

#[test]
fn the_deepest_gitignore_decides_then_info_exclude_then_global() {
    let mut rules = RepositoryRules::new(tracked(&[]), false)
        .with_global_excludes(b"*.tmp\n*.bak\n*.swp\n")
        .with_info_exclude(b"!*.bak\n*.env\n");
    rules.add_gitignore(b"", b"*.log\n!*.swp\n");
    rules.add_gitignore(b"a", b"!*.log\n");
    let s = ClassificationSnapshot::of_repository(rules);
    assert_eq!(backing(&s, "x.log", false), Backing::Isolated);
    assert_eq!(backing(&s, "a/x.log", false), Backing::Host);
    assert_eq!(backing(&s, "a/b/x.log", false), Backing::Host);
    assert_eq!(backing(&s, "x.tmp", false), Backing::Isolated);
    assert_eq!(backing(&s, "x.bak", false), Backing::Host);
    assert_eq!(backing(&s, "x.swp", false), Backing::Host);
    assert_eq!(backing(&s, ".env", false), Backing::Isolated);
}

#[test]
fn a_nested_repository_is_classified_by_its_own_rules() {
    let mut inner = RepositoryRules::new(tracked(&["dist/keep"]), false);
    inner.add_gitignore(b"", b"dist/\n");
    let mut outer = RepositoryRules::new(tracked(&[]), false);
    outer.add_gitignore(b"", b"*.o\ndist/\n");
    outer.add_gitignore(b"vendor", b"lib/x\n");
    outer.add_nested(b"vendor/lib", inner);
    let s = ClassificationSnapshot::of_repository(outer);
    // The outer rules do not reach inside.
    assert_eq!(backing(&s, "vendor/lib/a.o", false), Backing::Host);
    assert_eq!(backing(&s, "vendor/lib/x", false), Backing::Host);
    assert_eq!(backing(&s, "vendor/lib/dist/keep", false), Backing::Host);
    let route = s.classify(b"vendor/lib/dist/new", false);
    assert!(
        matches!(&route, Ok(r) if r.backing == Backing::Isolated && r.repository == b"vendor/lib"),
        "{route:?}"
    );
    // Its root is the outer repository's to classify.
    assert_eq!(backing(&s, "vendor/lib", true), Backing::Host);
    assert_eq!(backing(&s, "a.o", false), Backing::Isolated);
}

#[test]
fn a_nested_repository_inside_an_excluded_directory_is_excluded_whole() {
    let mut outer = RepositoryRules::new(tracked(&[]), false);
    outer.add_gitignore(b"", b"vendor/\n");
    outer.add_nested(b"vendor/lib", RepositoryRules::new(tracked(&["a"]), false));
    let s = ClassificationSnapshot::of_repository(outer);
    assert_eq!(backing(&s, "vendor/lib/a", false), Backing::Isolated);
}

#[test]
fn ignore_case_folds_patterns_and_the_index() {
    let mut rules = RepositoryRules::new(
        TrackedPaths::from_paths([b"Build/Keep".to_vec()], true),
        true,
    );
    rules.add_gitignore(b"", b"build/\n*.LOG\n");
    let s = ClassificationSnapshot::of_repository(rules);
    assert_eq!(backing(&s, "x.log", false), Backing::Isolated);
    assert_eq!(backing(&s, "BUILD/keep", false), Backing::Host);
    assert_eq!(backing(&s, "BUILD/other", false), Backing::Isolated);
}

#[test]
fn non_utf8_names_are_opaque_bytes() {
    let mut rules = RepositoryRules::new(tracked(&[]), false);
    rules.add_gitignore(b"", b"caf\xe9*\n");
    let s = ClassificationSnapshot::of_repository(rules);
    assert_eq!(
        s.classify(b"dir/caf\xe9.txt", false).map(|r| r.backing),
        Ok(Backing::Isolated)
    );
    assert_eq!(
        s.classify(b"dir/caf\xc3\xa9.txt", false).map(|r| r.backing),
        Ok(Backing::Host)
    );
}

#[test]
fn without_a_repository_everything_is_host_backed() {
    let s = ClassificationSnapshot::without_repository();
    assert_eq!(backing(&s, "node_modules", true), Backing::Host);
}

/// A folder of projects: the workspace is no repository, but the
/// repositories the host had in it are classified by their own rules, and
/// the `.git` and `HEAD` rules hold everywhere else.
#[test]
fn a_tree_without_a_repository_keeps_the_repositories_the_host_had_in_it() {
    let mut project = RepositoryRules::new(tracked(&["src/main.rs"]), false);
    project.add_gitignore(b"", b"target/\n");
    let mut tree = RepositoryRules::new(tracked(&[]), false);
    tree.add_nested(b"projects/app", project);
    tree.add_host_head(b"fixtures/bare.git/HEAD");
    let s = ClassificationSnapshot::of_tree_without_repository(tree);
    assert!(!s.has_repository());
    // Host repository: its git directory and its rules.
    assert_eq!(
        s.classify(b"projects/app/.git/config", false).map(|r| (
            r.backing,
            r.decision,
            r.repository
        )),
        Ok((
            Backing::Host,
            Decision::GitDirectory,
            b"projects/app".to_vec()
        ))
    );
    assert_eq!(
        backing(&s, "projects/app/src/main.rs", false),
        Backing::Host
    );
    assert_eq!(backing(&s, "projects/app/target", true), Backing::Isolated);
    // Outside it nothing is ignored.
    assert_eq!(backing(&s, "node_modules", true), Backing::Host);
    assert_eq!(backing(&s, "projects/target", true), Backing::Host);
    // A `.git` the sandbox makes, at the root too, is its own.
    for path in [".git", "projects/new/.git", ".git/config"] {
        assert_eq!(backing(&s, path, true), Backing::Isolated, "{path}");
    }
    // A `HEAD` the host had is the host's; one it did not have is isolated.
    assert_eq!(backing(&s, "fixtures/bare.git/HEAD", false), Backing::Host);
    assert_eq!(backing(&s, "made/HEAD", false), Backing::Isolated);
    assert_eq!(backing(&s, "HEAD", false), Backing::Isolated);
}

/// On a file system that folds case another spelling of `.git` is the
/// host's git directory beside the Git Sentry's mount of it: every other
/// spelling is the sandbox's. Where the repository says the file system
/// folds case (`core.ignoreCase`), every spelling of `HEAD` and
/// `HEAD.lock` the host did not have is isolated too.
#[test]
fn other_spellings_of_git_and_head_are_the_sandboxs() {
    let mut folding = RepositoryRules::new(tracked(&[]), true);
    folding.add_host_head(b"fixtures/HEAD");
    let s = ClassificationSnapshot::of_repository(folding);
    for path in [
        ".GIT",
        ".Git/config",
        "src/.gIt",
        "head",
        "a/Head.LOCK",
        "a/HEAD.lock",
    ] {
        assert_eq!(backing(&s, path, false), Backing::Isolated, "{path}");
    }
    assert_eq!(backing(&s, ".git/config", false), Backing::Host);
    assert_eq!(backing(&s, "fixtures/HEAD", false), Backing::Host);
    assert_eq!(backing(&s, "heads", false), Backing::Host);
    // A file system that does not fold case: only `HEAD` is a `HEAD`.
    let sensitive =
        ClassificationSnapshot::of_repository(RepositoryRules::new(tracked(&[]), false));
    assert_eq!(backing(&sensitive, ".GIT", true), Backing::Isolated);
    for path in ["head", "a/Head.lock"] {
        assert_eq!(backing(&sensitive, path, false), Backing::Host, "{path}");
    }
    assert_eq!(backing(&sensitive, "a/HEAD.lock", false), Backing::Isolated);
}

#[test]
fn malformed_paths_are_refused() {
    let s = ClassificationSnapshot::without_repository();
    assert_eq!(s.classify(b"", false), Err(PathError::EmptyComponent));
    assert_eq!(s.classify(b"a//b", false), Err(PathError::EmptyComponent));
    assert_eq!(s.classify(b"/a", false), Err(PathError::EmptyComponent));
    assert_eq!(s.classify(b"a/../b", false), Err(PathError::DotComponent));
    assert_eq!(s.classify(b"a\0b", false), Err(PathError::Nul));
    let deep = vec![b"a".as_slice(); MAX_DEPTH + 1].join(&b'/');
    assert_eq!(s.classify(&deep, false), Err(PathError::TooDeep));
}

#[test]
fn excluded_directories_are_reported_for_the_walk() {
    let mut rules = RepositoryRules::new(tracked(&[]), false);
    rules.add_gitignore(b"", b"node_modules/\n!keep/\n");
    assert!(rules.directory_is_excluded(b"node_modules"));
    assert!(rules.directory_is_excluded(b"a/node_modules/b"));
    assert!(!rules.directory_is_excluded(b"keep"));
    assert!(!rules.directory_is_excluded(b"src"));
}

#[test]
fn a_submodule_inside_an_excluded_directory_keeps_its_own_rules() {
    let mut outer = RepositoryRules::new(tracked(&["vendor/lib"]), false);
    outer.add_gitignore(b"", b"vendor/\n");
    outer.add_nested(b"vendor/lib", RepositoryRules::new(tracked(&["a"]), false));
    let s = ClassificationSnapshot::of_repository(outer);
    assert_eq!(backing(&s, "vendor/lib", true), Backing::Host);
    assert_eq!(backing(&s, "vendor/lib/a", false), Backing::Host);
    assert_eq!(backing(&s, "vendor/lib/b", false), Backing::Host);
    assert_eq!(backing(&s, "vendor/other", false), Backing::Isolated);
}

#[test]
fn git_directories_are_the_hosts_only_where_the_host_had_a_repository() {
    let mut outer = RepositoryRules::new(tracked(&[]), false);
    outer.add_gitignore(b"", b".*\n*\n!*/\n");
    outer.add_nested(b"vendor/lib", RepositoryRules::new(tracked(&[]), false));
    let s = ClassificationSnapshot::of_repository(outer);
    // Never matched against the rules, whatever they say.
    for host_git in [
        ".git",
        ".git/config",
        ".git/objects/ab",
        "vendor/lib/.git",
        "vendor/lib/.git/HEAD",
    ] {
        let route = s.classify(host_git.as_bytes(), false);
        assert!(
            matches!(&route, Ok(r) if r.backing == Backing::Host && r.decision == Decision::GitDirectory),
            "{host_git}: {route:?}"
        );
    }
    // A repository the sandbox makes anywhere else is never the host's.
    for (path, entry) in [
        ("sub/.git", "sub/.git"),
        ("sub/.git/config", "sub/.git"),
        ("vendor/lib/x/.git/hooks/pre-commit", "vendor/lib/x/.git"),
        ("vendor/.git", "vendor/.git"),
    ] {
        let route = s.classify(path.as_bytes(), true);
        assert!(
            matches!(&route, Ok(Route { backing: Backing::Isolated, decision: Decision::SandboxGitDirectory { entry: e }, .. }) if e == entry.as_bytes()),
            "{path}: {route:?}"
        );
    }
    // Without a repository at all, a `.git` is the sandbox's too.
    let none = ClassificationSnapshot::without_repository();
    assert_eq!(backing(&none, ".git", true), Backing::Isolated);
    assert_eq!(backing(&none, "a/.git/config", false), Backing::Isolated);
    assert_eq!(backing(&none, "a/git", true), Backing::Host);
}

#[test]
fn a_head_is_the_hosts_only_where_the_host_had_one() {
    let mut nested = RepositoryRules::new(tracked(&[]), false);
    nested.add_host_head(b"fixtures/bare/HEAD");
    let mut outer = RepositoryRules::new(tracked(&["docs/HEAD", "gone/HEAD"]), false);
    outer.add_gitignore(b"", b"build/\n!HEAD\n");
    outer.add_host_head(b"HEAD");
    outer.add_host_head(b"docs/HEAD");
    outer.add_nested(b"vendor/lib", nested);
    let s = ClassificationSnapshot::of_repository(outer);
    // Had by the host: the usual rules.
    assert_eq!(backing(&s, "HEAD", false), Backing::Host);
    assert_eq!(backing(&s, "HEAD.lock", false), Backing::Host);
    assert_eq!(backing(&s, "docs/HEAD", false), Backing::Host);
    // Tracked but missing on the host: made there, it would complete a
    // repository host Git uses.
    assert_eq!(backing(&s, "gone/HEAD", false), Backing::Isolated);
    assert_eq!(
        backing(&s, "vendor/lib/fixtures/bare/HEAD", false),
        Backing::Host
    );
    // Inside a git directory, Git's own.
    assert_eq!(backing(&s, ".git/HEAD", false), Backing::Host);
    assert_eq!(backing(&s, "vendor/lib/.git/HEAD", false), Backing::Host);
    // Made by the sandbox anywhere else, a negation notwithstanding: never
    // the host's, nor anything below it.
    for (path, entry) in [
        ("sub/HEAD", "sub/HEAD"),
        ("sub/HEAD.lock", "sub/HEAD.lock"),
        ("sub/HEAD/x", "sub/HEAD"),
        ("vendor/lib/HEAD", "vendor/lib/HEAD"),
        ("vendor/lib/fixtures/HEAD", "vendor/lib/fixtures/HEAD"),
    ] {
        let route = s.classify(path.as_bytes(), false);
        assert!(
            matches!(&route, Ok(Route { backing: Backing::Isolated, decision: Decision::SandboxRepositoryHead { entry: e }, .. }) if e == entry.as_bytes()),
            "{path}: {route:?}"
        );
    }
    // Other names are not markers; in an excluded directory too a `HEAD`
    // the host did not have is the sandbox's (a tracked one there would
    // otherwise be the host's).
    assert_eq!(backing(&s, "sub/head", false), Backing::Host);
    assert_eq!(backing(&s, "sub/HEADS", false), Backing::Host);
    assert_eq!(backing(&s, "sub/ORIG_HEAD.lock", false), Backing::Host);
    assert_eq!(backing(&s, "sub/HEAD.lock.lock", false), Backing::Host);
    let route = s.classify(b"build/HEAD", false);
    assert!(
        matches!(
            &route,
            Ok(Route {
                backing: Backing::Isolated,
                decision: Decision::SandboxRepositoryHead { .. },
                ..
            })
        ),
        "{route:?}"
    );
}
