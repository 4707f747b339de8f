//! The developer's answer to a host escalation prompt as typed on the Client
//! CLI's terminal (spec 3.8, DX-4; the model's `ApproveEscalation`,
//! `DenyEscalation`): the terminal is in raw mode, so the CLI reads every
//! byte and this machine turns them into an answer.
//!
//! Three stages. The **question** on the shown vector: only its code and
//! Enter approve; `e` and Enter edit; anything else denies, and so does
//! any other control key, a byte outside printable ASCII, or Escape (a
//! terminal's reply to a query the sandbox sent included). The **edit
//! line** ([`super::edit_line`]) starts as the shown vector: printable
//! ASCII, Backspace, Ctrl-U (start over); cursor and editing keys (with or
//! without modifiers, and bracketed paste's markers) are ignored, terminal
//! strings (OSC, DCS, APC, PM, SOS: replies) are swallowed whole; Escape
//! on its own, Alt with a key, any key reported as an escape code (Ctrl-C
//! under the kitty keyboard protocol or modifyOtherKeys), Ctrl-C and
//! Ctrl-D deny; Enter reads the line, and a line that is no vector the
//! command language accepts, or too large, says why and stays open (an
//! empty line denies). The **confirmation** shows the edited vector whole
//! with a code drawn for that showing, different from the question's:
//! only it approves; `e` edits again (and the next showing draws again);
//! anything else denies.
//!
//! Enter is CR or LF; an LF right after a CR is the same Enter (a terminal
//! in line-feed/new-line mode sends both). Once answered, nothing more is
//! taken.
use super::edit_line::{edit_arg, edit_line, parse_edit_line};
use super::prompt::{
    confirm_text, edit_fits, EDITED_ARGV_MAX_BYTES, EDIT_MARK, EDIT_START, SHOWN_ARGS_MAX,
    SHOWN_MAX,
};
use lazaret_wire::command::{check_argv, CommandError};

/// The most bytes of a typed question answer.
pub const ANSWER_MAX: usize = 16;
/// The most bytes of an edit line: the longest a showable vector's edit
/// line can be (every character written as `\u{10ffff}`, ten bytes; `''`
/// or a space between arguments).
pub const EDIT_LINE_MAX: usize = SHOWN_ARGS_MAX * (SHOWN_MAX * 10 + 3);
/// The most bytes of a control sequence's parameters the edit line reads.
const SEQUENCE_MAX: usize = 16;
/// How many draws a confirmation's code gets to differ from the
/// question's.
const DRAWS_MAX: usize = 8;

/// The developer's answer as typed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Run this vector: the one the prompt showed, or the developer's
    /// edit of it, shown back whole before a code drawn for that showing
    /// approved it.
    Approve(Vec<String>),
    Deny,
}

/// Draws one four-digit code (the Client CLI's come from the kernel's
/// random source); an empty code approves nothing.
pub type CodeSource = Box<dyn FnMut() -> String + Send>;

/// Four decimal digits from `random`, which nothing in the sandbox sees
/// before the prompt shows them.
pub fn code_of(random: [u8; 4]) -> String {
    format!("{:04}", u32::from_le_bytes(random) % 10_000)
}

/// Where the developer is in answering one prompt.
#[derive(Debug)]
enum Stage {
    /// The prompt's question on the shown vector.
    Question {
        typed: String,
    },
    /// Editing the vector.
    Editing {
        line: String,
        keys: Sequence,
    },
    /// The edited vector shown back with `code`, and its question.
    Confirm {
        argv: Vec<String>,
        code: String,
        typed: String,
    },
    Answered,
}

/// A control sequence being read on the edit line.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Sequence {
    None,
    /// ESC seen.
    Escape,
    /// ESC [ and its parameter and intermediate bytes so far.
    Csi(Vec<u8>),
    /// ESC O: one more byte.
    Ss3,
    /// A terminal string (OSC, DCS, APC, PM, SOS), until BEL or ST.
    String,
    /// ESC inside a terminal string (ST is ESC \).
    StringEscape,
}

/// What one byte on the edit line is.
enum Key {
    /// Part of a sequence, or a key the edit line ignores.
    Swallowed,
    /// Denies (Escape alone, Alt with a key, a key reported as a code).
    Deny,
    /// A byte to edit with.
    Byte(u8),
}

impl Sequence {
    fn key(&mut self, b: u8) -> Key {
        let state = std::mem::replace(self, Self::None);
        match (state, b) {
            // A C0 control ends any sequence but a string and counts
            // (ECMA-48 executes it); Ctrl-C and Ctrl-D deny even in one.
            (Self::String | Self::StringEscape, 0x03 | 0x04) => Key::Deny,
            (Self::String | Self::StringEscape, 0x07 | 0x18 | 0x1a) => Key::Swallowed,
            (Self::String | Self::StringEscape, 0x1b) => {
                *self = Self::StringEscape;
                Key::Swallowed
            }
            (Self::StringEscape, b'\\') => Key::Swallowed,
            (Self::String | Self::StringEscape, _) => {
                *self = Self::String;
                Key::Swallowed
            }
            (_, 0x1b) => {
                *self = Self::Escape;
                Key::Swallowed
            }
            (Self::Escape, 0x00..=0x1f) => Key::Deny,
            (_, 0x00..=0x1f) => Key::Byte(b),
            (Self::Escape, b'[') => {
                *self = Self::Csi(Vec::new());
                Key::Swallowed
            }
            (Self::Escape, b'O') => {
                *self = Self::Ss3;
                Key::Swallowed
            }
            (Self::Escape, b']' | b'P' | b'_' | b'^' | b'X') => {
                *self = Self::String;
                Key::Swallowed
            }
            (Self::Escape, _) => Key::Deny,
            (Self::Csi(mut params), 0x20..=0x3f) if params.len() < SEQUENCE_MAX => {
                params.push(b);
                *self = Self::Csi(params);
                Key::Swallowed
            }
            // Cursor keys and Home/End/Insert/Delete/Page keys (modifiers
            // included) and bracketed paste's markers; any other final,
            // and modifyOtherKeys' `27;MOD;CODE~`, is a key reported as a
            // code.
            (Self::Csi(_), b'A'..=b'D' | b'H' | b'F') => Key::Swallowed,
            (Self::Csi(params), b'~')
                if params.iter().all(|p| p.is_ascii_digit() || *p == b';')
                    && !params.starts_with(b"27;") =>
            {
                Key::Swallowed
            }
            (Self::Csi(_), _) => Key::Deny,
            (Self::Ss3, 0x40..=0x7e) => Key::Swallowed,
            (Self::Ss3, _) => Key::Deny,
            (Self::None, _) => Key::Byte(b),
        }
    }
}

/// The answer being typed on the prompt.
pub struct AnswerLine {
    shown: Vec<String>,
    approve: String,
    draw: CodeSource,
    stage: Stage,
    /// The last byte was CR.
    after_cr: bool,
}

impl std::fmt::Debug for AnswerLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnswerLine")
            .field("stage", &self.stage)
            .finish_non_exhaustive()
    }
}

impl AnswerLine {
    /// The answer line of a prompt showing `shown`, approved by `approve`;
    /// each confirmation of an edit gets its code from `draw`.
    pub fn new(shown: Vec<String>, approve: String, draw: CodeSource) -> Self {
        Self {
            shown,
            approve,
            draw,
            stage: Stage::Question {
                typed: String::new(),
            },
            after_cr: false,
        }
    }

    /// Takes typed `bytes`; returns what to write on the terminal (the
    /// echo, and the edit's and the confirmation's text) and the answer
    /// once there is one (the bytes after it are not the prompt's).
    pub fn feed(&mut self, bytes: &[u8]) -> (Vec<u8>, Option<Answer>) {
        let mut out = Vec::new();
        for &b in bytes {
            let lf_of_cr = b == b'\n' && self.after_cr;
            self.after_cr = b == b'\r';
            if lf_of_cr {
                continue;
            }
            if let Some(answer) = self.key(b, &mut out) {
                self.stage = Stage::Answered;
                return (out, Some(answer));
            }
        }
        // Escape on its own: nothing followed it in this read.
        if matches!(&self.stage, Stage::Editing { keys, .. } if *keys == Sequence::Escape) {
            self.stage = Stage::Answered;
            return (out, Some(Answer::Deny));
        }
        (out, None)
    }

    fn key(&mut self, b: u8, out: &mut Vec<u8>) -> Option<Answer> {
        let (typed, code) = match &mut self.stage {
            Stage::Answered => return None,
            Stage::Question { typed } => (typed, self.approve.as_str()),
            Stage::Confirm { typed, code, .. } => (typed, code.as_str()),
            Stage::Editing { keys, .. } => {
                return match keys.key(b) {
                    Key::Swallowed => None,
                    Key::Deny => Some(Answer::Deny),
                    Key::Byte(b) => self.edit(b, out),
                };
            }
        };
        match b {
            b'\r' | b'\n' => {}
            0x7f | 0x08 => {
                if typed.pop().is_some() {
                    out.extend_from_slice(b"\x08 \x08");
                }
                return None;
            }
            0x20..=0x7e => {
                if typed.len() < ANSWER_MAX {
                    typed.push(char::from(b));
                    out.push(b);
                }
                return None;
            }
            _ => return Some(Answer::Deny),
        }
        if !code.is_empty() && *typed == code {
            return Some(Answer::Approve(
                match std::mem::replace(&mut self.stage, Stage::Answered) {
                    Stage::Confirm { argv, .. } => argv,
                    _ => std::mem::take(&mut self.shown),
                },
            ));
        }
        if typed != "e" && typed != "E" {
            return Some(Answer::Deny);
        }
        let (header, argv) = match &self.stage {
            Stage::Confirm { argv, .. } => ("\r\n", argv),
            _ => (EDIT_START, &self.shown),
        };
        let line = edit_line(argv);
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(EDIT_MARK.as_bytes());
        out.extend_from_slice(line.as_bytes());
        self.stage = Stage::Editing {
            line,
            keys: Sequence::None,
        };
        None
    }

    /// One byte on the edit line (not part of a sequence).
    fn edit(&mut self, b: u8, out: &mut Vec<u8>) -> Option<Answer> {
        let Stage::Editing { line, .. } = &mut self.stage else {
            return None;
        };
        match b {
            b'\r' | b'\n' => {}
            0x03 | 0x04 => return Some(Answer::Deny),
            0x15 => {
                line.clear();
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(EDIT_MARK.as_bytes());
                return None;
            }
            0x7f | 0x08 => {
                if line.pop().is_some() {
                    out.extend_from_slice(b"\x08 \x08");
                }
                return None;
            }
            0x20..=0x7e if line.len() < EDIT_LINE_MAX => {
                line.push(char::from(b));
                out.push(b);
                return None;
            }
            // Full, or a byte the line does not hold (another control
            // key; a character outside ASCII, written `\u{HEX}` here).
            _ => {
                out.push(0x07);
                return None;
            }
        }
        let argv = match read_edit(line) {
            Ok(argv) if argv.is_empty() => return Some(Answer::Deny),
            Ok(argv) => argv,
            Err(problem) => {
                out.extend_from_slice(
                    format!("\r\nlazaret: {problem}\r\n{EDIT_MARK}{line}").as_bytes(),
                );
                return None;
            }
        };
        let code = self.fresh_code();
        out.extend_from_slice(confirm_text(&argv, &code).as_bytes());
        self.stage = Stage::Confirm {
            argv,
            code,
            typed: String::new(),
        };
        None
    }

    /// A code for one confirmation, other than the question's (empty, so
    /// nothing approves, if the source keeps giving that one).
    fn fresh_code(&mut self) -> String {
        (0..DRAWS_MAX)
            .map(|_| (self.draw)())
            .find(|code| *code != self.approve)
            .unwrap_or_default()
    }
}

/// The vector an edit line names, or why it cannot be approved (text of
/// printable ASCII: the line is, and an argument is written in its edit
/// form).
fn read_edit(line: &str) -> Result<Vec<String>, String> {
    let argv = parse_edit_line(line).map_err(|e| e.to_string())?;
    if argv.is_empty() {
        return Ok(argv);
    }
    check_argv(&argv).map_err(|e| match e {
        CommandError::RequiresShell { executable } => format!(
            "{} is not an absolute path; give the executable's absolute path (no PATH lookup, \
             no shell)",
            edit_arg(&executable)
        ),
        CommandError::Empty | CommandError::Nul { .. } => e.to_string(),
    })?;
    if !edit_fits(&argv) {
        return Err(format!(
            "a prompt shows at most {SHOWN_ARGS_MAX} arguments of at most {SHOWN_MAX} characters, \
             {EDITED_ARGV_MAX_BYTES} bytes in all"
        ));
    }
    Ok(argv)
}
