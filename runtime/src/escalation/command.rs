//! The structured v1 command language of a host escalation (schemas.md
//! `MailboxRequest.command_argv` and auto-approval rules; SR-8): an argument
//! vector whose element zero is an absolute executable path, matched byte
//! for byte against the rules' canonical executables. There is no command
//! string, no `PATH` lookup and no shell expansion: a vector whose element
//! zero is not an absolute path would need one and is
//! [`CommandError::RequiresShell`].
use lazaret_generated::lazaret::RuleMatches;
pub use lazaret_wire::command::{check_argv, CommandError};

use crate::config::ResolvedAutoApprovalRule;

/// How a request's vector relates to the profile's auto-approval rules
/// (the model's `RuleMatches`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleMatch {
    /// Rule `rule` (its index in the profile) matches exactly.
    Exact { rule: usize },
    /// No rule matches: only the developer can approve it.
    Inexact,
}

impl RuleMatch {
    /// The model value `SubmitEscalation(s, m)` takes.
    pub fn model(self) -> RuleMatches {
        match self {
            Self::Exact { .. } => RuleMatches::Exact,
            Self::Inexact => RuleMatches::Inexact,
        }
    }
}

/// Whether `rule` matches `argv` (schemas.md): element zero byte-for-byte
/// equal to the canonical executable; the arguments equal to the rule's,
/// or, when `allow_extra_args`, the rule's (non-empty) arguments as a
/// prefix followed by any others.
pub fn rule_matches(rule: &ResolvedAutoApprovalRule, argv: &[String]) -> bool {
    let Some((executable, args)) = argv.split_first() else {
        return false;
    };
    if executable.as_bytes() != rule.canonical_executable.as_slice() {
        return false;
    }
    if rule.allow_extra_args {
        !rule.args.is_empty() && args.starts_with(&rule.args)
    } else {
        args == rule.args.as_slice()
    }
}

/// The first of `rules` that matches `argv`, for a vector the command
/// language accepts; anything else is [`RuleMatch::Inexact`] and can never
/// auto-approve.
pub fn classify(rules: &[ResolvedAutoApprovalRule], argv: &[String]) -> RuleMatch {
    if check_argv(argv).is_err() {
        return RuleMatch::Inexact;
    }
    match rules.iter().position(|r| rule_matches(r, argv)) {
        Some(rule) => RuleMatch::Exact { rule },
        None => RuleMatch::Inexact,
    }
}
