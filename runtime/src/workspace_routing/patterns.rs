//! One source of Git ignore patterns, parsed once (spec 3.5: "Git's effective
//! byte-path rules, including repository and nested `.gitignore` files,
//! negation and precedence, the applicable common-directory `info/exclude`,
//! the configured global excludes file").
//!
//! Parsing and glob matching are gitoxide's (`gix-ignore`, `gix-glob`): a
//! maintained implementation of Git's `wildmatch` and of the `.gitignore`
//! line grammar (comments, trailing spaces, `\` escapes, `!` negation, `/`
//! anchoring, `**`). The differential test in `conformance` checks it against
//! Git itself on generated trees. What this module adds is Git's *order*:
//! within one source the last matching line decides.

use bstr::BStr;
use gix_glob::pattern::Case;
use gix_glob::wildmatch;

/// Where a list of patterns came from, in Git's order of increasing
/// precedence: the global excludes file, the common directory's
/// `info/exclude`, then `.gitignore` files from the repository root down.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PatternSource {
    /// `core.excludesFile`, or Git's default `$XDG_CONFIG_HOME/git/ignore`.
    GlobalExcludes,
    /// `info/exclude` of the repository's common directory.
    InfoExclude,
    /// The `.gitignore` of this directory (repository-relative bytes, empty
    /// for the repository root).
    GitIgnore(Vec<u8>),
}

/// The line of a source that decided a path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MatchedRule {
    /// The source the line is in.
    pub source: PatternSource,
    /// Its line number, from 1.
    pub line: usize,
    /// The pattern as Git shows it (`!` for a negation, `/` suffix for a
    /// directory-only pattern).
    pub pattern: Vec<u8>,
    /// Whether the line is a negation (`!pattern`): the path is *not* ignored.
    pub negated: bool,
}

/// The parsed patterns of one source.
#[derive(Clone, Debug)]
pub struct PatternList {
    source: PatternSource,
    patterns: Vec<(gix_glob::Pattern, usize)>,
}

impl PatternList {
    /// Parse `bytes` (the file's whole content) as Git does.
    pub fn parse(source: PatternSource, bytes: &[u8]) -> Self {
        // `$` (precious) is not Git syntax yet: Git reads `$name` as a name.
        let patterns = gix_ignore::parse(bytes, false)
            .map(|(pattern, line, _kind)| (pattern, line))
            .collect();
        Self { source, patterns }
    }

    /// The source of these patterns.
    pub fn source(&self) -> &PatternSource {
        &self.source
    }

    /// How many patterns the source holds.
    pub fn len(&self) -> usize {
        self.patterns.len()
    }

    /// Whether the source holds no pattern.
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// The last line matching `relative` (relative to the directory the
    /// source applies to; bytes, `/`-separated), as Git decides within one
    /// source. `is_dir` tells directory-only patterns (`name/`) whether they
    /// may match.
    pub fn last_match(&self, relative: &[u8], is_dir: bool, case: Case) -> Option<MatchedRule> {
        let path = BStr::new(relative);
        let basename = relative.iter().rposition(|b| *b == b'/').map(|p| p + 1);
        self.patterns.iter().rev().find_map(|(pattern, line)| {
            pattern
                .matches_repo_relative_path(
                    path,
                    basename,
                    Some(is_dir),
                    case,
                    wildmatch::Mode::NO_MATCH_SLASH_LITERAL,
                )
                .then(|| MatchedRule {
                    source: self.source.clone(),
                    line: *line,
                    pattern: pattern.to_string().into_bytes(),
                    negated: pattern.is_negative(),
                })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(text: &str) -> PatternList {
        PatternList::parse(PatternSource::GitIgnore(Vec::new()), text.as_bytes())
    }

    #[test]
    fn the_last_matching_line_decides_within_a_source() {
        let l = list("*.log\n!keep.log\n");
        let keep = l.last_match(b"keep.log", false, Case::Sensitive);
        assert_eq!(keep.as_ref().map(|m| (m.line, m.negated)), Some((2, true)));
        let other = l.last_match(b"a/other.log", false, Case::Sensitive);
        assert_eq!(other.map(|m| (m.line, m.negated)), Some((1, false)));
        assert_eq!(l.last_match(b"a.txt", false, Case::Sensitive), None);
    }

    #[test]
    fn directory_only_patterns_need_a_directory() {
        let l = list("build/\n");
        assert!(l.last_match(b"build", false, Case::Sensitive).is_none());
        assert!(l.last_match(b"build", true, Case::Sensitive).is_some());
    }

    #[test]
    fn case_folding_is_asked_for_not_assumed() {
        let l = list("Target\n");
        assert!(l.last_match(b"target", true, Case::Sensitive).is_none());
        assert!(l.last_match(b"target", true, Case::Fold).is_some());
    }

    #[test]
    fn comments_blank_lines_and_escapes_follow_git() {
        let l = list("# comment\n\n\\#hash\ntrailing   \n");
        assert_eq!(l.len(), 2);
        assert!(l.last_match(b"#hash", false, Case::Sensitive).is_some());
        assert!(l.last_match(b"trailing", false, Case::Sensitive).is_some());
    }
}
