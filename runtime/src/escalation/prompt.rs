//! The developer prompt of a host escalation (spec 3.8, DX-4, FR-5; the
//! model's `RouteToPrompt`, `ApproveEscalation`, `DenyEscalation`): what
//! the prompt shows, how the developer's keys become an answer, and which
//! signed `DeveloperDecision` the Host Coordinator takes as that answer.
//!
//! Both sides are here so they cannot drift: the Client CLI renders the
//! [`EscalationPrompt`] with [`prompt_text`], edits the answer with
//! [`AnswerLine`] and signs the decision with its Session Anchor; the Host
//! Coordinator accepts it only through [`check_decision`]: signed by the
//! requesting session's own Session Anchor, naming the open request by ID
//! and payload digest, and, for an approval, a vector the command language
//! accepts.
//!
//! Everything a prompt shows of the request is the sandbox's: every
//! character that is not printable is shown escaped ([`shown`]), so a
//! request cannot move the cursor, clear the screen or fake the prompt's
//! own lines.
use lazaret_wire::command::{check_argv, CommandError};
use lazaret_wire::mailbox::{
    DeveloperDecision, DeveloperDecisionKind, MailboxError, SignedProtocolRecord,
};
use lazaret_wire::records::PublicKey;

use super::request::OpenRequest;
use crate::protocol::PROTOCOL_VERSION;
use crate::terminal::protocol::{EscalationPrompt, PromptClosing};

/// The most characters of one shown text (an argument, the justification)
/// before it is cut with a note of how much was left out.
pub const SHOWN_MAX: usize = 512;
/// The most bytes of a typed answer.
pub const ANSWER_MAX: usize = 16;

/// What the Host Coordinator expects of the decision on one open prompt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PromptExpectation {
    pub open: OpenRequest,
    /// The requesting session's Session Anchor (its registration's).
    pub session_anchor: PublicKey,
}

/// Why a decision is not the answer to the open prompt; the prompt is
/// answered `Denied` (fail closed).
#[derive(Debug, thiserror::Error)]
pub enum DecisionRefusal {
    #[error("the developer decision: {0}")]
    Record(#[from] MailboxError),
    #[error("the developer decision speaks protocol version {found}, not {PROTOCOL_VERSION}")]
    Version { found: u16 },
    #[error("the developer decision is bound to another session")]
    OtherSession,
    #[error("the developer decision answers another request")]
    OtherRequest,
    #[error("the developer approved a vector the command language refuses: {0}")]
    Argv(#[from] CommandError),
    #[error("a denial names no command, but this one names {len} arguments")]
    DenialWithCommand { len: usize },
}

/// The developer's decision on the open prompt `expect`, once it verifies
/// against the session's Session Anchor (before its payload is decoded)
/// and names exactly the open request.
pub fn check_decision(
    record: &SignedProtocolRecord,
    expect: &PromptExpectation,
) -> Result<DeveloperDecision, DecisionRefusal> {
    let (decision, _) = record.open::<DeveloperDecision>(&expect.session_anchor)?;
    if decision.protocol_version != PROTOCOL_VERSION {
        return Err(DecisionRefusal::Version {
            found: decision.protocol_version,
        });
    }
    if decision.session_binding != expect.open.session_binding {
        return Err(DecisionRefusal::OtherSession);
    }
    if decision.request_id != expect.open.request_id
        || decision.request_sha256 != expect.open.request_sha256
    {
        return Err(DecisionRefusal::OtherRequest);
    }
    match decision.decision {
        DeveloperDecisionKind::Approve => check_argv(&decision.approved_command_argv)?,
        DeveloperDecisionKind::Deny if !decision.approved_command_argv.is_empty() => {
            return Err(DecisionRefusal::DenialWithCommand {
                len: decision.approved_command_argv.len(),
            })
        }
        DeveloperDecisionKind::Deny => {}
    }
    Ok(decision)
}

/// `text` as it may reach a terminal: printable characters as they are,
/// `\` doubled, every other character (controls, escapes, line breaks,
/// bidirectional overrides) as `\u{..}`; cut after [`SHOWN_MAX`]
/// characters with a note of what was left out.
pub fn shown(text: &str) -> String {
    let mut out = String::new();
    for (count, c) in text.chars().enumerate() {
        if count == SHOWN_MAX {
            let rest = text.chars().count() - SHOWN_MAX;
            out.push_str(&format!("... ({rest} more characters)"));
            break;
        }
        match c {
            '\\' => out.push_str("\\\\"),
            c if printable(c) => out.push(c),
            c => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
        }
    }
    out
}

/// Printable and without effect on the terminal's state: no C0 or C1
/// control, no DEL, no bidirectional or zero-width format character.
fn printable(c: char) -> bool {
    !c.is_control()
        && !matches!(c,
            '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
}

/// What every prompt starts with: CAN ends any control sequence the
/// sandbox's output left open (an unterminated title or clipboard string
/// would otherwise swallow the prompt), then a new line with default
/// attributes.
pub const PROMPT_START: &str = "\x18\r\n\x1b[0m";

/// The prompt as the Client CLI writes it on its terminal (raw mode: lines
/// end in CR LF): the requesting profile and session, the exact vector one
/// argument per line, the justification, and the question.
pub fn prompt_text(prompt: &EscalationPrompt) -> String {
    let mut text = String::from(PROMPT_START);
    text.push_str("lazaret: the sandbox asks to run a command on the host\r\n");
    text.push_str(&format!(
        "  profile  {}\r\n  session  {}\r\n",
        shown(&prompt.profile),
        prompt.session_id
    ));
    for (i, arg) in prompt.command_argv.iter().enumerate() {
        let label = if i == 0 { "command" } else { "" };
        text.push_str(&format!("  {label:<7}  [{i}] {}\r\n", shown(arg)));
    }
    text.push_str(&format!(
        "  reason   {}\r\n",
        if prompt.justification.is_empty() {
            "(none given)".to_owned()
        } else {
            shown(&prompt.justification)
        }
    ));
    text.push_str(&format!(
        "Run it on the host as you? Type yes to approve (no answer in {} s denies): ",
        prompt.deadline_seconds
    ));
    text
}

/// The line the Client CLI writes when the prompt closed.
pub fn closing_text(closing: PromptClosing) -> &'static str {
    match closing {
        PromptClosing::Approved => "\r\nlazaret: approved; the command runs on the host\r\n",
        PromptClosing::Denied => "\r\nlazaret: denied\r\n",
        PromptClosing::TimedOut => "\r\nlazaret: no answer in time; denied\r\n",
        PromptClosing::Withdrawn => "\r\nlazaret: the request was withdrawn\r\n",
    }
}

/// The developer's answer as typed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    Approve,
    Deny,
}

/// The answer being typed on the prompt (the terminal is in raw mode, so
/// the Client CLI edits it): printable ASCII up to [`ANSWER_MAX`] bytes,
/// Backspace, Enter to answer; Ctrl-C, Ctrl-D and Escape deny at once.
/// Only `yes` or `y` (any case) approves; anything else denies, so keys
/// typed for the shell before the prompt appeared can never approve.
#[derive(Debug, Default)]
pub struct AnswerLine {
    typed: String,
}

impl AnswerLine {
    /// Takes typed `bytes`; returns what to echo and the answer once there
    /// is one (the bytes after it are not the prompt's).
    pub fn feed(&mut self, bytes: &[u8]) -> (Vec<u8>, Option<Answer>) {
        let mut echo = Vec::new();
        for &b in bytes {
            match b {
                b'\r' | b'\n' => {
                    let yes = matches!(self.typed.to_ascii_lowercase().as_str(), "y" | "yes");
                    return (echo, Some(if yes { Answer::Approve } else { Answer::Deny }));
                }
                0x03 | 0x04 | 0x1b => return (echo, Some(Answer::Deny)),
                0x7f | 0x08 if self.typed.pop().is_some() => {
                    echo.extend_from_slice(b"\x08 \x08");
                }
                0x20..=0x7e if self.typed.len() < ANSWER_MAX => {
                    self.typed.push(char::from(b));
                    echo.push(b);
                }
                _ => {}
            }
        }
        (echo, None)
    }
}
