//! Terminal output hygiene (spec README 'Terminal output hygiene'): sandbox
//! output cannot read or write the developer's clipboard. A pure, streaming
//! filter for a session's output removes every sequence that can, and
//! passes everything else on byte for byte, in order.
//!
//! # What is removed
//!
//! - **OSC 52** (xterm's clipboard) and **OSC 5522** (kitty's clipboard
//!   protocol). An OSC starts with `ESC ]`, with the C1 byte 0x9D, or with
//!   U+009D in UTF-8 (`C2 9D`). Its Ps is read the way xterm reads it: the
//!   decimal digits before the first other byte, as a number. So `052` is 52,
//!   an empty Ps (`ESC ];…`) is 0 and passes, and `ESC ]52` is removed
//!   whether `;`, a terminator or anything else follows the digits. A Ps of
//!   more than [`PS_DIGITS_MAX`] digits is removed too (fail closed: a
//!   terminal that parses it into a machine integer can overflow to 52).
//!   The removal ends at BEL, `ESC \`, ST in C1 form (0x9C, or `C2 9C`), CAN
//!   or SUB. An ESC followed by anything else ends it too and starts the
//!   next sequence, which is judged on its own (xterm behaviour; that ESC is
//!   kept when its sequence is).
//! - **tmux's passthrough** `ESC P tmux; … ESC \` (also with 0x90 or `C2 90`
//!   as DCS, and with the parameters, intermediates and other bytes tmux
//!   skips before `t`): the whole DCS is removed. As in tmux only `ESC \`
//!   ends it: tmux doubles every ESC of the wrapped sequence, and an ESC
//!   followed by any other byte is payload.
//! - **An OSC 52 inside any other DCS** (screen's passthrough `ESC P ESC ]52;
//!   … BEL ESC \`): the OSC 52 is removed as it is anywhere else, and the
//!   rest of the DCS is kept. Removing the whole DCS once a clipboard
//!   sequence shows up inside it would mean holding back the entire DCS (a
//!   sixel image is megabytes), and the wrapper without its clipboard
//!   sequence carries nothing to the outer terminal. Every other DCS (sixel,
//!   DECRQSS, XTGETTCAP) passes byte-exact.
//!
//! Everything else passes byte for byte: every other OSC (titles `ESC ]0;`,
//! hyperlinks `ESC ]8;`, colours `ESC ]4;`), CSI, UTF-8 text, binary.
//!
//! # How it decides
//!
//! The filter parses the stream one byte at a time, so its output does not
//! depend on how the stream was split into reads. It holds back only the
//! bytes of a sequence it has not classified yet (an introducer, Ps digits,
//! DCS parameters), never more than [`HELD_BYTES_MAX`] bytes, in a fixed
//! array. At the bound an ESC and the controls after it are passed on, a
//! DCS prefix is kept, and an OSC whose Ps is still open is removed (fail
//! closed). A removed sequence is discarded as it arrives, so a payload of
//! any length costs O(1) memory.
//!
//! Bytes a terminal executes or ignores without leaving the state it is in
//! (C0 controls after an ESC or inside a Ps, DEL) do not hide an
//! introducer: `ESC NUL ]52;…` is OSC 52 to a DEC-style parser and is
//! removed here. What the filter keeps is parsed as if at ground, OSC, DCS
//! and APC bodies included, so an introducer anywhere is seen. Where a
//! removal ends only decides how much is removed: the receiving terminal
//! never saw the removed introducer.
//!
//! **The receiving terminal.** Bytes already passed on can leave the
//! terminal in the middle of something that bytes after a removal could
//! complete: `ESC ESC ]52;…` passes the first ESC (the second cancels it,
//! as in a terminal) before the second is judged, and once that OSC 52 is
//! removed the terminal still has the first ESC pending; `ESC ]5 ESC ]52;…
//! BEL 2;…` passes `ESC ]5` and would leave `2;…` to extend its Ps.
//! [`TerminalState`] tracks what the passed bytes left the terminal in (an
//! ESC pending, an OSC Ps or a DCS prefix being read, a UTF-8 character
//! incomplete), and later bytes are judged against it: `]52;…` after that
//! pending ESC and `2;…` after that `ESC ]5` are removed. Every filter that
//! writes to one terminal shares one `TerminalState` (a session's stdout and
//! stderr both reach the developer's terminal, see [`SessionOutputFilter`]),
//! so one stream cannot complete what the other began; bytes a filter held
//! back while the other stream's output reached the terminal are judged
//! again when they are let go.
//!
//! **UTF-8.** The C1 bytes 0x9D, 0x90 and 0x9C are introducers or ST only
//! where they are not a UTF-8 continuation byte in context (`E2 9D A4` is
//! ❤), and U+009D (`C2 9D`) is the C1 OSC. A terminal in an 8-bit,
//! non-UTF-8 mode that takes every 0x9D as OSC, even after a UTF-8 lead
//! byte, is not covered.
//!
//! **End of stream.** [`EscapeFilter::finish`] passes on the held bytes of a
//! sequence that was never classified (a trailing ESC, `C2`, `ESC ]5`), so
//! a stream cut short keeps its bytes; an OSC whose Ps so far is 52 or 5522
//! and an unterminated clipboard sequence are discarded.
//!
//! Not covered: other terminals' own clipboard extensions (iTerm2's
//! `OSC 1337 ; Copy=` and `CopyToClipboard=`) pass like every other OSC.

/// The most bytes a filter holds back of a sequence it has not classified.
pub const HELD_BYTES_MAX: usize = 64;

/// The most Ps digits an OSC may have and still be classified by its
/// number; a longer Ps is removed (fail closed).
pub const PS_DIGITS_MAX: u8 = 9;

const BEL: u8 = 0x07;
const CAN: u8 = 0x18;
const SUB: u8 = 0x1a;
const ESC: u8 = 0x1b;
const DEL: u8 = 0x7f;
const C1_DCS: u8 = 0x90;
const C1_ST: u8 = 0x9c;
const C1_OSC: u8 = 0x9d;
/// The UTF-8 lead byte of U+0080..=U+00BF, the C1 controls among them.
const LEAD_C1: u8 = 0xc2;
/// `tmux;`, the payload prefix of tmux's passthrough DCS.
const TMUX: &[u8; 5] = b"tmux;";

/// The Ps values whose OSC reads or writes a clipboard.
const CLIPBOARD_PS: [u32; 2] = [52, 5522];

/// Whether an OSC whose Ps ended with `digits` digits of `value` is a
/// clipboard sequence.
fn is_clipboard(value: u32, digits: u8) -> bool {
    digits > PS_DIGITS_MAX || (digits > 0 && CLIPBOARD_PS.contains(&value))
}

/// Bytes a DEC-style parser executes or ignores in its escape state
/// without leaving it.
fn ignored_in_escape(b: u8) -> bool {
    matches!(b, 0x00..=0x17 | 0x19 | 0x1c..=0x1f | DEL)
}

/// Bytes an OSC string ignores (BEL ends it).
fn ignored_in_osc(b: u8) -> bool {
    b != BEL && ignored_in_escape(b)
}

/// The next `tmux;` progress of a DCS prefix after `b`, if `b` can still be
/// part of tmux's passthrough introducer: before the final byte tmux skips
/// parameters, intermediates, C0 controls and every byte of 0x7F or more.
/// With `c1_ends` a byte of 0x80..=0x9F ends the prefix (the filter judges it
/// at ground first, where it may be a C1 control).
fn dcs_progress(matched: u8, b: u8, c1_ends: bool) -> Option<u8> {
    match (matched, b) {
        (0, 0x80..=0x9f) if c1_ends => None,
        (0, 0x20..=0x3f | 0x7f..=0xff) => Some(0),
        (0, b) if ignored_in_escape(b) => Some(0),
        (m, b) if TMUX.get(usize::from(m)) == Some(&b) => Some(m + 1),
        _ => None,
    }
}

/// Bytes that may start a sequence at ground: ESC, the lead `C2` and the
/// C1 OSC and DCS bytes.
const MAY_START: [bool; 256] = {
    let mut table = [false; 256];
    table[ESC as usize] = true;
    table[LEAD_C1 as usize] = true;
    table[C1_OSC as usize] = true;
    table[C1_DCS as usize] = true;
    table
};

/// The continuation bytes a UTF-8 lead byte announces (0 for any other byte).
const LEAD_NEEDS: [u8; 256] = {
    let mut table = [0; 256];
    let mut b = 0xc2;
    while b <= 0xf4 {
        table[b] = match b {
            0xc2..=0xdf => 1,
            0xe0..=0xef => 2,
            _ => 3,
        };
        b += 1;
    }
    table
};

/// UTF-8 decoding as a terminal does it, just enough to tell a
/// continuation byte from a C1 control.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Utf8 {
    /// Continuation bytes still expected.
    need: u8,
    /// The last byte was `C2`: a following 0x80..=0xBF is a C1 control.
    after_lead_c1: bool,
}

impl Utf8 {
    fn take(&mut self, b: u8) {
        let (need, after_lead_c1) = match b {
            0x80..=0xbf if self.need > 0 => (self.need - 1, false),
            LEAD_C1 => (1, true),
            0xc3..=0xdf => (1, false),
            0xe0..=0xef => (2, false),
            0xf0..=0xf4 => (3, false),
            _ => (0, false),
        };
        self.need = need;
        self.after_lead_c1 = after_lead_c1;
    }

    /// Whether `b` (0x80..=0x9F) would be a C1 control here rather than a
    /// continuation byte of a character.
    fn is_c1(&self) -> bool {
        self.need == 0 || self.after_lead_c1
    }
}

/// What the bytes passed on so far left the receiving terminal in. Every
/// filter writing to the same terminal shares one (see the module
/// documentation). Each field is a place where bytes passed earlier and
/// bytes still to come can make one sequence.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TerminalState {
    /// An ESC is pending: the terminal reads the next bytes as an escape
    /// sequence. Only printable ASCII, CAN and SUB end it here (conservative:
    /// a byte of 0x80 or more after an ESC is not taken to end it).
    escape: bool,
    /// The terminal is reading an OSC's Ps: its value and digit count so
    /// far. A passed OSC prefix whose terminating byte then started a
    /// removed sequence leaves it open, and digits that follow extend it.
    osc_ps: Option<(u32, u8)>,
    /// The terminal is in a DCS prefix, with this many bytes of `tmux;`.
    dcs_prefix: Option<u8>,
    utf8: Utf8,
    /// Counts the passes, so a filter can tell that another stream's output
    /// reached the terminal while it held bytes back.
    passes: u64,
}

impl TerminalState {
    fn passed(&mut self, b: u8) {
        let c1 = self.utf8.is_c1();
        self.osc_ps = match (self.osc_ps, b) {
            (Some((value, digits)), b'0'..=b'9') => Some((
                value.saturating_mul(10).saturating_add(u32::from(b - b'0')),
                digits.saturating_add(1),
            )),
            (Some(ps), b) if ignored_in_osc(b) => Some(ps),
            (_, b']') if self.escape => Some((0, 0)),
            (_, C1_OSC) if c1 => Some((0, 0)),
            _ => None,
        };
        self.dcs_prefix = match (self.dcs_prefix, b) {
            (Some(matched), b) => dcs_progress(matched, b, false),
            (None, b'P') if self.escape => Some(0),
            (None, C1_DCS) if c1 => Some(0),
            (None, _) => None,
        };
        self.escape = match b {
            ESC => true,
            0x20..=0x7e | CAN | SUB => false,
            _ => self.escape,
        };
        self.utf8.take(b);
        self.passes = self.passes.wrapping_add(1);
    }

    /// Whether a run of ASCII other than ESC passes at ground without
    /// per-byte attention.
    fn at_ground(&self) -> bool {
        !self.escape && self.osc_ps.is_none() && self.dcs_prefix.is_none()
    }

    /// The length of the prefix of `input` that passes at ground as it is,
    /// taken as passed: text up to the first byte that may start a sequence
    /// (ESC, `C2`, a C1 OSC or DCS byte that is not a continuation). Same
    /// result as passing byte by byte, in bulk.
    fn plain_run(&mut self, input: &[u8]) -> usize {
        debug_assert!(self.at_ground());
        let mut utf8 = self.utf8;
        let mut run = 0;
        while let Some(&b) = input.get(run) {
            if MAY_START[usize::from(b)] {
                match b {
                    // `C2` and a continuation that makes neither U+009D nor
                    // U+0090 is a character.
                    LEAD_C1 => match input.get(run + 1) {
                        Some(&next)
                            if (0x80..=0xbf).contains(&next)
                                && next != C1_OSC
                                && next != C1_DCS =>
                        {
                            utf8 = Utf8::default();
                            run += 2;
                            continue;
                        }
                        _ => break,
                    },
                    C1_OSC | C1_DCS if !utf8.is_c1() => {}
                    _ => break,
                }
            }
            // Utf8::take without branches on the byte's value: random bytes
            // would make them unpredictable.
            utf8.need = if b & 0xc0 == 0x80 {
                utf8.need.saturating_sub(1)
            } else {
                LEAD_NEEDS[usize::from(b)]
            };
            utf8.after_lead_c1 = false;
            run += 1;
        }
        if run > 0 {
            self.utf8 = utf8;
            self.passes = self.passes.wrapping_add(1);
        }
        run
    }
}

/// Bytes held back, at most [`HELD_BYTES_MAX`], without allocating.
#[derive(Debug, Clone)]
struct Held {
    bytes: [u8; HELD_BYTES_MAX],
    len: usize,
}

impl Held {
    const fn new() -> Self {
        Self {
            bytes: [0; HELD_BYTES_MAX],
            len: 0,
        }
    }

    /// Holds `b`; false (nothing held) when full.
    #[must_use]
    fn push(&mut self, b: u8) -> bool {
        match self.bytes.get_mut(self.len) {
            Some(slot) => {
                *slot = b;
                self.len += 1;
                true
            }
            None => false,
        }
    }

    fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn clear(&mut self) {
        self.len = 0;
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Between sequences: bytes pass unless they start one.
    Ground,
    /// Held: ESC and bytes the terminal passes over in its escape state.
    Escape,
    /// Held: ends with `C2`, perhaps the lead of U+009D or U+0090.
    LeadC1,
    /// Held: an OSC introducer and its Ps so far.
    OscNumber { value: u32, digits: u8 },
    /// Held: a DCS introducer, its parameters and `matched` bytes of `tmux;`.
    DcsPrefix { matched: u8 },
    /// Discarding a clipboard OSC; `esc` after an ESC, `utf8` of its payload.
    DropOsc { esc: bool, utf8: Utf8 },
    /// Discarding tmux's passthrough DCS; `esc` after an unpaired ESC.
    DropDcs { esc: bool },
}

/// One output stream's filter (see the module documentation).
#[derive(Debug, Clone)]
pub struct EscapeFilter {
    state: State,
    held: Held,
    /// `TerminalState::passes` when the first held byte was held.
    held_since: u64,
}

impl Default for EscapeFilter {
    fn default() -> Self {
        Self::new()
    }
}

impl EscapeFilter {
    pub const fn new() -> Self {
        Self {
            state: State::Ground,
            held: Held::new(),
            held_since: 0,
        }
    }

    /// Bytes held back now, of a sequence not classified yet; never more
    /// than [`HELD_BYTES_MAX`].
    pub fn held_bytes(&self) -> usize {
        self.held.len
    }

    /// Whether the filter is discarding a clipboard sequence now.
    pub fn is_discarding(&self) -> bool {
        matches!(self.state, State::DropOsc { .. } | State::DropDcs { .. })
    }

    /// Filters the next bytes of the stream into `out`. `terminal` is the
    /// state of the terminal the output goes to, shared by every stream
    /// written to it.
    pub fn feed(&mut self, terminal: &mut TerminalState, input: &[u8], out: &mut Vec<u8>) {
        let mut rest = input;
        while let Some((&first, tail)) = rest.split_first() {
            if self.state == State::Ground && terminal.at_ground() {
                let run = terminal.plain_run(rest);
                if run > 0 {
                    out.extend_from_slice(&rest[..run]);
                    rest = &rest[run..];
                    continue;
                }
            }
            let run = self.discardable_run(rest);
            if run > 0 {
                rest = &rest[run..];
                continue;
            }
            self.byte(terminal, first, out);
            rest = tail;
        }
        debug_assert!(self.held.len <= HELD_BYTES_MAX);
    }

    /// Ends the stream: passes on the held bytes of an unclassified
    /// sequence and discards an unterminated clipboard sequence.
    pub fn finish(&mut self, terminal: &mut TerminalState, out: &mut Vec<u8>) {
        // Released bytes that another stream's output overtook are judged
        // again and may be held again, once: the second release passes them.
        for _ in 0..3 {
            match self.state {
                // The Ps is complete at the end: judged as if a terminator
                // came.
                State::OscNumber { value, digits } if is_clipboard(value, digits) => {
                    self.held.clear();
                    self.state = State::Ground;
                }
                State::DropOsc { .. } | State::DropDcs { .. } => self.state = State::Ground,
                State::Ground => break,
                State::Escape
                | State::LeadC1
                | State::OscNumber { .. }
                | State::DcsPrefix { .. } => {
                    self.release(terminal, out);
                }
            }
        }
        debug_assert!(self.state == State::Ground && self.held.is_empty());
    }

    /// The length of the prefix of `input` that a discarded sequence takes
    /// without a per-byte decision: payload bytes that cannot end it.
    fn discardable_run(&mut self, input: &[u8]) -> usize {
        match &mut self.state {
            State::DropOsc { esc: false, utf8 } => {
                let run = input
                    .iter()
                    .position(|&b| matches!(b, BEL | CAN | SUB | ESC) || b >= 0x80)
                    .unwrap_or(input.len());
                if run > 0 {
                    *utf8 = Utf8::default();
                }
                run
            }
            State::DropDcs { esc: false } => {
                input.iter().position(|&b| b == ESC).unwrap_or(input.len())
            }
            _ => 0,
        }
    }

    fn pass(terminal: &mut TerminalState, b: u8, out: &mut Vec<u8>) {
        out.push(b);
        terminal.passed(b);
    }

    /// Lets the held bytes go, classified as no clipboard sequence, and
    /// returns to ground. They were judged against the terminal as it was
    /// when they were held; if another stream's output reached the terminal
    /// since, they are judged again from ground against the terminal as it
    /// is now (and may be held again).
    fn release(&mut self, terminal: &mut TerminalState, out: &mut Vec<u8>) {
        let held = self.held.clone();
        self.held.clear();
        self.state = State::Ground;
        if terminal.passes == self.held_since {
            for &b in held.as_slice() {
                Self::pass(terminal, b, out);
            }
        } else {
            for &b in held.as_slice() {
                self.byte(terminal, b, out);
            }
        }
    }

    /// Holds `b` as part of the sequence being classified; false when the
    /// bound is reached (nothing held).
    #[must_use]
    fn hold(&mut self, terminal: &TerminalState, b: u8) -> bool {
        if self.held.is_empty() {
            self.held_since = terminal.passes;
        }
        self.held.push(b)
    }

    /// Starts discarding a clipboard OSC: what was held goes.
    fn drop_osc(&mut self) {
        self.held.clear();
        self.state = State::DropOsc {
            esc: false,
            utf8: Utf8::default(),
        };
    }

    /// Holds the introducer `b` and moves to `next`; when the held bytes
    /// fill the bound they are released first and `b` is judged again.
    fn start(
        &mut self,
        terminal: &mut TerminalState,
        b: u8,
        next: State,
        out: &mut Vec<u8>,
    ) -> Step {
        if self.hold(terminal, b) {
            self.state = next;
            Step::Consumed
        } else {
            self.release(terminal, out);
            Step::Again
        }
    }

    fn byte(&mut self, terminal: &mut TerminalState, b: u8, out: &mut Vec<u8>) {
        // A step either consumes `b` or moves to a state that will: a
        // release, a classification, then at most one state after it.
        let mut consumed = false;
        for _ in 0..4 {
            consumed = self.step(terminal, b, out) == Step::Consumed;
            if consumed {
                break;
            }
        }
        debug_assert!(consumed, "byte {b:#04x} was not consumed");
        debug_assert!(self.state != State::Ground || self.held.is_empty());
    }

    fn step(&mut self, terminal: &mut TerminalState, b: u8, out: &mut Vec<u8>) -> Step {
        match self.state {
            State::Ground if terminal.escape => self.after_escape(terminal, b, out),
            // Digits extend the Ps of an OSC the terminal is still reading.
            State::Ground if b.is_ascii_digit() && terminal.osc_ps.is_some() => {
                let (value, digits) = terminal.osc_ps.unwrap_or_default();
                self.state = State::OscNumber { value, digits };
                Step::Again
            }
            // Bytes that continue a DCS prefix the terminal is still reading.
            State::Ground
                if terminal
                    .dcs_prefix
                    .is_some_and(|m| dcs_progress(m, b, true).is_some()) =>
            {
                let matched = terminal.dcs_prefix.unwrap_or_default();
                self.state = State::DcsPrefix { matched };
                Step::Again
            }
            State::Ground => match b {
                ESC => self.start(terminal, b, State::Escape, out),
                C1_OSC if terminal.utf8.is_c1() => self.start(terminal, b, OSC_START, out),
                C1_DCS if terminal.utf8.is_c1() => self.start(terminal, b, DCS_START, out),
                LEAD_C1 => self.start(terminal, b, State::LeadC1, out),
                _ => {
                    Self::pass(terminal, b, out);
                    Step::Consumed
                }
            },
            State::Escape => self.after_escape(terminal, b, out),
            State::LeadC1 => match b {
                C1_OSC | C1_DCS if self.hold(terminal, b) => {
                    self.state = if b == C1_OSC { OSC_START } else { DCS_START };
                    Step::Consumed
                }
                _ => {
                    self.release(terminal, out);
                    Step::Again
                }
            },
            State::OscNumber { value, digits } => match b {
                b'0'..=b'9' => {
                    if digits < PS_DIGITS_MAX && self.hold(terminal, b) {
                        self.state = State::OscNumber {
                            value: value * 10 + u32::from(b - b'0'),
                            digits: digits + 1,
                        };
                    } else {
                        self.drop_osc();
                    }
                    Step::Consumed
                }
                b if ignored_in_osc(b) => {
                    if !self.hold(terminal, b) {
                        self.drop_osc();
                    }
                    Step::Consumed
                }
                _ => {
                    if is_clipboard(value, digits) {
                        self.drop_osc();
                    } else {
                        self.release(terminal, out);
                    }
                    Step::Again
                }
            },
            State::DcsPrefix { matched } => {
                // A digit may also extend the Ps of an OSC the terminal is
                // reading (a C1 OSC passed inside the DCS prefix, which
                // tmux skips): that reading is judged first, at ground.
                let progress = if b.is_ascii_digit() && terminal.osc_ps.is_some() {
                    None
                } else {
                    dcs_progress(matched, b, true)
                };
                match progress {
                    Some(m) if usize::from(m) == TMUX.len() => {
                        self.held.clear();
                        self.state = State::DropDcs { esc: false };
                        Step::Consumed
                    }
                    Some(m) if self.hold(terminal, b) => {
                        self.state = State::DcsPrefix { matched: m };
                        Step::Consumed
                    }
                    // Not tmux's passthrough, or more parameters than held:
                    // the DCS is kept (anything inside it is still filtered).
                    _ => {
                        self.release(terminal, out);
                        Step::Again
                    }
                }
            }
            State::DropOsc { esc: true, .. } => {
                self.state = State::Ground;
                if b == b'\\' {
                    return Step::Consumed;
                }
                // The ESC ended the OSC and starts the next sequence.
                let held = self.hold(terminal, ESC);
                debug_assert!(held, "nothing is held while discarding");
                self.state = State::Escape;
                Step::Again
            }
            State::DropOsc {
                esc: false,
                mut utf8,
            } => {
                self.state = match b {
                    ESC => State::DropOsc { esc: true, utf8 },
                    BEL | CAN | SUB => State::Ground,
                    C1_ST if utf8.is_c1() => State::Ground,
                    _ => {
                        utf8.take(b);
                        State::DropOsc { esc: false, utf8 }
                    }
                };
                Step::Consumed
            }
            State::DropDcs { esc } => {
                self.state = match (esc, b) {
                    (true, b'\\') => State::Ground,
                    (false, ESC) => State::DropDcs { esc: true },
                    _ => State::DropDcs { esc: false },
                };
                Step::Consumed
            }
        }
    }

    /// `b` after an ESC: held (state Escape) or already passed on
    /// (`terminal.escape` at ground).
    fn after_escape(&mut self, terminal: &mut TerminalState, b: u8, out: &mut Vec<u8>) -> Step {
        let held = !self.held.is_empty();
        match b {
            // A new ESC cancels the pending one, which is released.
            ESC if held => {
                self.release(terminal, out);
                Step::Again
            }
            ESC => self.start(terminal, b, State::Escape, out),
            b if ignored_in_escape(b) => {
                if held && self.hold(terminal, b) {
                    return Step::Consumed;
                }
                if held {
                    self.release(terminal, out);
                    return Step::Again;
                }
                // The terminal executes it and stays in its escape state.
                Self::pass(terminal, b, out);
                Step::Consumed
            }
            b']' => self.start(terminal, b, OSC_START, out),
            b'P' => self.start(terminal, b, DCS_START, out),
            C1_OSC if terminal.utf8.is_c1() => self.start(terminal, b, OSC_START, out),
            C1_DCS if terminal.utf8.is_c1() => self.start(terminal, b, DCS_START, out),
            LEAD_C1 => self.start(terminal, b, State::LeadC1, out),
            _ if held => {
                self.release(terminal, out);
                Step::Again
            }
            _ => {
                Self::pass(terminal, b, out);
                Step::Consumed
            }
        }
    }
}

/// Whether a step consumed its byte or moved to a state that takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Consumed,
    Again,
}

const OSC_START: State = State::OscNumber {
    value: 0,
    digits: 0,
};
const DCS_START: State = State::DcsPrefix { matched: 0 };

/// Which output stream of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputStream {
    Stdout,
    Stderr,
}

/// A session's stdout and stderr filters, which share the terminal they
/// may both reach (see the module documentation).
#[derive(Debug, Clone, Default)]
pub struct SessionOutputFilter {
    terminal: TerminalState,
    stdout: EscapeFilter,
    stderr: EscapeFilter,
}

impl SessionOutputFilter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Filters the next bytes of `stream` into `out`.
    pub fn feed(&mut self, stream: OutputStream, input: &[u8], out: &mut Vec<u8>) {
        let filter = match stream {
            OutputStream::Stdout => &mut self.stdout,
            OutputStream::Stderr => &mut self.stderr,
        };
        filter.feed(&mut self.terminal, input, out);
    }

    /// Ends `stream` (see [`EscapeFilter::finish`]).
    pub fn finish(&mut self, stream: OutputStream, out: &mut Vec<u8>) {
        let filter = match stream {
            OutputStream::Stdout => &mut self.stdout,
            OutputStream::Stderr => &mut self.stderr,
        };
        filter.finish(&mut self.terminal, out);
    }

    /// Bytes held back by both streams; never more than twice
    /// [`HELD_BYTES_MAX`].
    pub fn held_bytes(&self) -> usize {
        self.stdout.held_bytes() + self.stderr.held_bytes()
    }
}

/// Filters a whole stream at once (one stream, its own terminal).
pub fn filter_all(input: &[u8]) -> Vec<u8> {
    let mut terminal = TerminalState::default();
    let mut filter = EscapeFilter::new();
    let mut out = Vec::with_capacity(input.len());
    filter.feed(&mut terminal, input, &mut out);
    filter.finish(&mut terminal, &mut out);
    out
}

#[cfg(test)]
mod tests;
