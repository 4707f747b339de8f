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
//! only a second code, shown with it, approves it.
use lazaret_wire::command::{check_argv, CommandError};
use lazaret_wire::mailbox::{
    DeveloperDecision, DeveloperDecisionKind, MailboxError, SignedProtocolRecord,
};
use lazaret_wire::records::PublicKey;

use super::edit_line::{edit_line, parse_edit_line, EDIT_LINE_MAX};
use super::request::OpenRequest;
use crate::protocol::PROTOCOL_VERSION;
use crate::terminal::protocol::{EscalationPrompt, PromptClosing};

/// The most characters of one text a prompt shows (an argument, the
/// justification); a request with a longer one is denied unprompted.
pub const SHOWN_MAX: usize = 512;
/// The most arguments a prompt shows; a longer vector is denied unprompted.
pub const SHOWN_ARGS_MAX: usize = 32;
/// The most bytes of a typed answer.
pub const ANSWER_MAX: usize = 16;

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
    #[error("the developer decision approves an edited vector too large to have been shown whole")]
    EditNotShowable,
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
                && !showable(&decision.approved_command_argv, "")
            {
                return Err(DecisionRefusal::EditNotShowable);
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

/// What every prompt starts with. CAN ends any control sequence the
/// sandbox's output left open (an unterminated title string would swallow
/// the prompt); then everything the sandbox's output may have set is put
/// back: a soft reset (scroll region, origin, insert and keypad modes,
/// character sets, attributes), the scroll region and modes once more for
/// terminals without one (origin off, autowrap on, insert off, cursor
/// shown), the G0 character set and shift-in, the palette and the default
/// colours; and the screen is cleared, so nothing the sandbox drew stands
/// beside the prompt.
pub const PROMPT_START: &str = concat!(
    "\x18",
    "\x1b[!p",
    "\x1b[r\x1b[?6l\x1b[?7h\x1b[4l\x1b[?25h",
    "\x1b(B\x0f",
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

/// `argv` one argument per line, each numbered and shown escaped.
fn vector_lines(argv: &[String]) -> String {
    let mut text = String::new();
    for (i, arg) in argv.iter().enumerate() {
        let label = if i == 0 { "command" } else { "" };
        text.push_str(&format!("  {label:<7}  [{i}] {}\r\n", shown(arg)));
    }
    text
}

/// How to edit, written when the edit starts (the edit line follows,
/// holding the vector being edited).
const EDIT_START: &str = "\r\nEdit the command: arguments are separated by spaces; '...' quotes, \
     \\ escapes a space, a quote or a backslash, \\u{HEX} a character. Ctrl-U starts \
     over, Enter ends the edit, Ctrl-C denies.\r\n";
/// The edit line's marker.
const EDIT_MARK: &str = "> ";

/// The edited vector shown back, and the question naming `code`, the
/// answer that approves it.
fn confirm_text(argv: &[String], code: &str) -> String {
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

/// The developer's answer as typed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Run this vector: the one the prompt showed, or the developer's
    /// edit of it, shown back whole before its own code approved it.
    Approve(Vec<String>),
    Deny,
}

/// The codes a prompt's answers need, drawn by the Client CLI for each
/// prompt: `approve` approves the shown vector, `approve_edit` an edited
/// one (shown only with it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PromptCodes {
    pub approve: String,
    pub approve_edit: String,
}

impl PromptCodes {
    /// Four decimal digits from `random` (the Client CLI's kernel random
    /// bytes), which nothing in the sandbox sees before the prompt shows
    /// it.
    pub fn code_of(random: [u8; 4]) -> String {
        format!("{:04}", u32::from_le_bytes(random) % 10_000)
    }
}

/// Where the developer is in answering one prompt.
#[derive(Debug)]
enum Stage {
    /// The prompt's question on the shown vector.
    Question { typed: String },
    /// Editing the vector on the edit line; `escape` swallows the control
    /// sequences cursor keys send.
    Editing { line: String, escape: Escape },
    /// The edited vector shown back, and its question.
    Confirm { argv: Vec<String>, typed: String },
}

/// A control sequence being swallowed on the edit line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Escape {
    None,
    /// ESC seen.
    Started,
    /// ESC [ or ESC O seen: parameters until a final byte.
    Sequence,
}

/// What a question's line came to.
enum Asked {
    Code,
    Edit,
    Other,
}

/// The answer being typed on the prompt (the terminal is in raw mode, so
/// the Client CLI edits it).
///
/// On a question, printable ASCII up to [`ANSWER_MAX`] bytes, Backspace,
/// Enter to answer; Ctrl-C, Ctrl-D and Escape deny at once. Only the
/// question's own code approves; `e` edits; anything else denies.
///
/// On the edit line (at most [`EDIT_LINE_MAX`] bytes): printable ASCII,
/// Backspace, Ctrl-U to start over; cursor and other control sequences
/// are ignored; Ctrl-C and Ctrl-D deny; Enter reads the line
/// ([`super::edit_line`]). A line that is no vector the command language
/// accepts, or too large to show whole, says why and stays open; an
/// empty line denies.
#[derive(Debug)]
pub struct AnswerLine {
    shown: Vec<String>,
    codes: PromptCodes,
    stage: Stage,
}

impl AnswerLine {
    /// The answer line of a prompt showing `shown`, approved by `codes`
    /// (an empty code approves nothing).
    pub fn new(shown: Vec<String>, codes: PromptCodes) -> Self {
        Self {
            shown,
            codes,
            stage: Stage::Question {
                typed: String::new(),
            },
        }
    }

    /// Takes typed `bytes`; returns what to write on the terminal (the
    /// echo, and the edit's and the confirmation's text) and the answer
    /// once there is one (the bytes after it are not the prompt's).
    pub fn feed(&mut self, bytes: &[u8]) -> (Vec<u8>, Option<Answer>) {
        let mut out = Vec::new();
        for &b in bytes {
            if let Some(answer) = self.key(b, &mut out) {
                return (out, Some(answer));
            }
        }
        (out, None)
    }

    fn key(&mut self, b: u8, out: &mut Vec<u8>) -> Option<Answer> {
        let (typed, code, header) = match &mut self.stage {
            Stage::Question { typed } => (typed, &self.codes.approve, EDIT_START),
            Stage::Confirm { typed, .. } => (typed, &self.codes.approve_edit, "\r\n"),
            Stage::Editing { line, escape } => {
                return match edit_key(line, escape, b, out) {
                    Edited::Editing => None,
                    Edited::Answered(answer) => Some(answer),
                    Edited::Vector(argv) => {
                        out.extend_from_slice(
                            confirm_text(&argv, &self.codes.approve_edit).as_bytes(),
                        );
                        self.stage = Stage::Confirm {
                            argv,
                            typed: String::new(),
                        };
                        None
                    }
                }
            }
        };
        let line = match question_key(typed, b, out)? {
            Ok(line) => line,
            Err(denied) => return Some(denied),
        };
        let asked = asked(&line, code);
        let argv = match &mut self.stage {
            Stage::Confirm { argv, .. } => std::mem::take(argv),
            _ => self.shown.clone(),
        };
        match asked {
            Asked::Code => Some(Answer::Approve(argv)),
            Asked::Edit => {
                let line = edit_line(&argv);
                out.extend_from_slice(header.as_bytes());
                out.extend_from_slice(EDIT_MARK.as_bytes());
                out.extend_from_slice(line.as_bytes());
                self.stage = Stage::Editing {
                    line,
                    escape: Escape::None,
                };
                None
            }
            Asked::Other => Some(Answer::Deny),
        }
    }
}

/// What a key on the edit line came to.
enum Edited {
    Editing,
    Answered(Answer),
    /// Enter read the line as this vector, one a prompt can show.
    Vector(Vec<String>),
}

/// One key on the edit line.
fn edit_key(line: &mut String, escape: &mut Escape, b: u8, out: &mut Vec<u8>) -> Edited {
    // A control sequence (a cursor key) is swallowed up to its
    // final byte; a control character ends it and counts.
    let swallowed = match (*escape, b) {
        (_, 0x1b) => {
            *escape = Escape::Started;
            true
        }
        (Escape::Started, b'[' | b'O') => {
            *escape = Escape::Sequence;
            true
        }
        (Escape::Sequence, 0x20..=0x3f) => true,
        (Escape::Started | Escape::Sequence, 0x20..=0x7e) => {
            *escape = Escape::None;
            true
        }
        _ => {
            *escape = Escape::None;
            false
        }
    };
    if swallowed {
        return Edited::Editing;
    }
    match b {
        b'\r' | b'\n' => {
            let edited = match parse_edit_line(line) {
                Ok(argv) if argv.is_empty() => return Edited::Answered(Answer::Deny),
                Ok(argv) => argv,
                Err(e) => {
                    edit_problem(out, &e.to_string(), line);
                    return Edited::Editing;
                }
            };
            if let Err(e) = check_argv(&edited) {
                edit_problem(out, &e.to_string(), line);
                return Edited::Editing;
            }
            if !showable(&edited, "") {
                let problem = format!(
                    "a prompt shows at most {SHOWN_ARGS_MAX} arguments of at most \
                                 {SHOWN_MAX} characters"
                );
                edit_problem(out, &problem, line);
                return Edited::Editing;
            }
            return Edited::Vector(edited);
        }
        0x03 | 0x04 => return Edited::Answered(Answer::Deny),
        0x15 => {
            line.clear();
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(EDIT_MARK.as_bytes());
        }
        0x7f | 0x08 if line.pop().is_some() => {
            out.extend_from_slice(b"\x08 \x08");
        }
        0x20..=0x7e if line.len() < EDIT_LINE_MAX => {
            line.push(char::from(b));
            out.push(b);
        }
        _ => {}
    }
    Edited::Editing
}

/// One key on a question's line: `Some(Ok(line))` once Enter ends it,
/// `Some(Err(Deny))` for Ctrl-C, Ctrl-D or Escape.
fn question_key(typed: &mut String, b: u8, out: &mut Vec<u8>) -> Option<Result<String, Answer>> {
    match b {
        b'\r' | b'\n' => return Some(Ok(std::mem::take(typed))),
        0x03 | 0x04 | 0x1b => return Some(Err(Answer::Deny)),
        0x7f | 0x08 if typed.pop().is_some() => out.extend_from_slice(b"\x08 \x08"),
        0x20..=0x7e if typed.len() < ANSWER_MAX => {
            typed.push(char::from(b));
            out.push(b);
        }
        _ => {}
    }
    None
}

fn asked(line: &str, code: &str) -> Asked {
    if !code.is_empty() && line == code {
        Asked::Code
    } else if line == "e" || line == "E" {
        Asked::Edit
    } else {
        Asked::Other
    }
}

/// Says why the edit line is no vector to show, and writes the line again
/// to go on editing.
fn edit_problem(out: &mut Vec<u8>, problem: &str, line: &str) {
    out.extend_from_slice(format!("\r\nlazaret: {problem}\r\n{EDIT_MARK}{line}").as_bytes());
}
