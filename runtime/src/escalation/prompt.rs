//! The developer prompt of a host escalation (spec 3.8, DX-4, FR-5; the
//! model's `RouteToPrompt`, `ApproveEscalation`, `DenyEscalation`): what
//! the prompt shows, how the developer's keys become an answer, and which
//! signed `DeveloperDecision` the Host Coordinator takes as that answer.
//!
//! Both sides are here so they cannot drift: the Client CLI renders the
//! [`EscalationPrompt`] with [`prompt_text`], takes the answer with
//! [`super::answer::AnswerLine`] and signs the decision with its Session
//! Anchor; the Host
//! Coordinator accepts it only through [`check_decision`]: signed by the
//! requesting session's own Session Anchor, naming the open request by ID
//! and payload digest, and, for an approval, a vector the command language
//! accepts.
//!
//! Everything a prompt shows of the request is the sandbox's: every
//! character outside printable ASCII is shown escaped ([`shown`]), and a
//! request too large to show whole is never prompted ([`showable`]). The
//! terminal state the sandbox's earlier output set (scroll region, colours,
//! character set, modes) is reset and the screen cleared before the prompt
//! ([`PROMPT_START`]). Approval needs a code the Client CLI draws for each
//! prompt and shows only in it, so keys typed for the sandbox, typed ahead,
//! or meant for an earlier prompt never approve.
//!
//! The developer may edit the vector before approving it: the edit line
//! ([`super::edit_line`]) starts as the shown vector; the vector it reads
//! as is shown back whole, one argument per line as in the prompt, and
//! only a code drawn for that showing approves it. Every argument is shown
//! in the edit line's form ([`edit_arg`]): printable ASCII, spaces and
//! quotes escaped, so what is shown is unambiguous and reads back as
//! itself.
use lazaret_wire::command::{check_argv, CommandError};
use lazaret_wire::mailbox::{
    DeveloperDecision, DeveloperDecisionKind, MailboxError, SignedProtocolRecord,
};
use lazaret_wire::records::PublicKey;

use super::edit_line::edit_arg;
use super::request::OpenRequest;
use crate::protocol::PROTOCOL_VERSION;
use crate::terminal::protocol::{EscalationPrompt, PromptClosing};

/// The most characters of one text a prompt shows (an argument, the
/// justification); a request with a longer one is denied unprompted.
pub const SHOWN_MAX: usize = 512;
/// The most arguments a prompt shows; a longer vector is denied unprompted.
pub const SHOWN_ARGS_MAX: usize = 32;
/// The most bytes the arguments of an approved edit hold together, so its
/// signed decision fits one record of the session's stream (64 KiB).
pub const EDITED_ARGV_MAX_BYTES: usize = 49_152;

/// What the Host Coordinator expects of the decision on one open prompt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PromptExpectation {
    pub open: OpenRequest,
    /// The requesting session's Session Anchor (its registration's).
    pub session_anchor: PublicKey,
    /// The vector the prompt shows. An approval of another vector is the
    /// developer's edit of it, which the Client CLI showed back whole and
    /// had approved with its own code; it must be one a prompt can show.
    pub command_argv: Vec<String>,
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
    #[error("the developer decision approves an edited vector too large to have been shown whole or sent in one record")]
    EditTooLarge,
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
        DeveloperDecisionKind::Approve => {
            check_argv(&decision.approved_command_argv)?;
            if decision.approved_command_argv != expect.command_argv
                && !edit_fits(&decision.approved_command_argv)
            {
                return Err(DecisionRefusal::EditTooLarge);
            }
        }
        DeveloperDecisionKind::Deny if !decision.approved_command_argv.is_empty() => {
            return Err(DecisionRefusal::DenialWithCommand {
                len: decision.approved_command_argv.len(),
            })
        }
        DeveloperDecisionKind::Deny => {}
    }
    Ok(decision)
}

/// `text` as it may reach a terminal: printable ASCII as it is, `\`
/// doubled, every other character (controls, escapes, line breaks, and all
/// of non-ASCII, whose look-alikes, invisible and direction-changing
/// characters could disguise an argument) as `\u{..}`.
pub fn shown(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            ' '..='~' => out.push(c),
            c => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
        }
    }
    out
}

/// Whether a prompt can show `argv` and `justification` whole: at most
/// [`SHOWN_ARGS_MAX`] arguments, none and no justification over
/// [`SHOWN_MAX`] characters. A request that cannot be shown whole is never
/// approved on a prompt: the developer would approve what they did not see.
pub fn showable(argv: &[String], justification: &str) -> bool {
    argv.len() <= SHOWN_ARGS_MAX
        && argv
            .iter()
            .map(String::as_str)
            .chain([justification])
            .all(|t| t.chars().count() <= SHOWN_MAX)
}

/// Whether an edited vector can be approved: a prompt could show it whole
/// ([`showable`]) and its decision fits one record
/// ([`EDITED_ARGV_MAX_BYTES`]).
pub fn edit_fits(argv: &[String]) -> bool {
    showable(argv, "") && argv.iter().map(String::len).sum::<usize>() <= EDITED_ARGV_MAX_BYTES
}

/// What every prompt starts with. CAN ends any control sequence the
/// sandbox's output left open (an unterminated title string would swallow
/// the prompt); then everything the sandbox's output may have set is put
/// back: a soft reset (scroll region, origin, insert and keypad modes,
/// character sets, attributes), the scroll region and modes once more for
/// terminals without one (origin off, autowrap on, insert off, cursor
/// shown), the G0 character set and shift-in, the palette and the default
/// colours; the keyboard is put back to plain keys (line-feed/new-line mode
/// off, so Return sends CR; the kitty keyboard protocol's flags and xterm's
/// modifyOtherKeys reset, so Ctrl-C and Escape arrive as themselves); and
/// the screen is cleared, so nothing the sandbox drew stands beside the
/// prompt.
pub const PROMPT_START: &str = concat!(
    "\x18",
    "\x1b[!p",
    "\x1b[r\x1b[?6l\x1b[?7h\x1b[4l\x1b[?25h",
    "\x1b(B\x0f",
    "\x1b[20l\x1b[=0;1u\x1b[>4m",
    "\x1b]104\x1b\\\x1b]110\x1b\\\x1b]111\x1b\\",
    "\x1b[0m\x1b[H\x1b[2J",
);

/// The prompt as the Client CLI writes it on its terminal (raw mode: lines
/// end in CR LF): the requesting profile and session, the exact vector one
/// argument per line, the justification, and the question naming `code`,
/// the answer that approves.
pub fn prompt_text(prompt: &EscalationPrompt, code: &str) -> String {
    let mut text = String::from(PROMPT_START);
    text.push_str("lazaret: the sandbox asks to run a command on the host\r\n");
    text.push_str(&format!(
        "  profile  {}\r\n  session  {}\r\n",
        shown(&prompt.profile),
        prompt.session_id
    ));
    text.push_str(&vector_lines(&prompt.command_argv));
    text.push_str(&format!(
        "  reason   {}\r\n",
        if prompt.justification.is_empty() {
            "(none given)".to_owned()
        } else {
            shown(&prompt.justification)
        }
    ));
    text.push_str(&format!(
        "Run it on the host as you? Type {code} and Enter to approve, e and Enter to edit it \
         first; anything else denies (no answer in {} s denies): ",
        prompt.deadline_seconds
    ));
    text
}

/// `argv` one argument per line, each numbered and in the edit line's
/// form.
fn vector_lines(argv: &[String]) -> String {
    let mut text = String::new();
    for (i, arg) in argv.iter().enumerate() {
        let label = if i == 0 { "command" } else { "" };
        text.push_str(&format!("  {label:<7}  [{i}] {}\r\n", edit_arg(arg)));
    }
    text
}

/// How to edit, written when the edit starts (the edit line follows,
/// holding the vector being edited).
pub const EDIT_START: &str =
    "\r\nEdit the command: arguments are separated by spaces; '...' quotes, \
     \\ escapes a space, a quote or a backslash, \\u{HEX} a character. Ctrl-U starts \
     over, Enter ends the edit, Ctrl-C denies.\r\n";
/// The edit line's marker.
pub const EDIT_MARK: &str = "> ";

/// The edited vector shown back, and the question naming `code`, the
/// answer that approves it.
pub fn confirm_text(argv: &[String], code: &str) -> String {
    format!(
        "\r\nlazaret: the edited command\r\n{}Run this on the host as you? Type {code} and \
         Enter to approve, e and Enter to edit it again; anything else denies: ",
        vector_lines(argv)
    )
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
