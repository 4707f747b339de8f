//! The output filter of spec README 'Terminal output hygiene': tables of
//! what is removed and what passes, properties over random streams (split
//! invariance, identity, exact removal, held-back bound), and two reference
//! terminals that must find no clipboard sequence in any output.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use super::*;
use quickcheck::{Arbitrary, Gen, QuickCheck};

fn f(input: &[u8]) -> Vec<u8> {
    filter_all(input)
}

/// `input` fed in chunks cut at `cuts` (positions, any order), then
/// finished; asserts the held-back bound after every feed.
fn chunked(input: &[u8], cuts: &[usize]) -> Vec<u8> {
    let mut cuts: Vec<usize> = cuts
        .iter()
        .map(|c| c % (input.len() + 1))
        .chain([0, input.len()])
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut terminal = TerminalState::default();
    let mut filter = EscapeFilter::new();
    let mut out = Vec::new();
    for pair in cuts.windows(2) {
        filter.feed(&mut terminal, &input[pair[0]..pair[1]], &mut out);
        assert!(filter.held_bytes() <= HELD_BYTES_MAX);
    }
    filter.finish(&mut terminal, &mut out);
    assert_eq!(filter.held_bytes(), 0);
    out
}

fn show(bytes: &[u8]) -> String {
    bytes.escape_ascii().to_string()
}

// ---- tables ----

/// (what, input, expected output)
const REMOVED: &[(&str, &[u8], &[u8])] = &[
    ("OSC 52 ended by BEL", b"a\x1b]52;c;aGVsbG8=\x07b", b"ab"),
    (
        "OSC 52 ended by ESC \\",
        b"a\x1b]52;c;aGVsbG8=\x1b\\b",
        b"ab",
    ),
    ("OSC 52 ended by C1 ST", b"a\x1b]52;c;aGk=\x9cb", b"ab"),
    (
        "OSC 52 ended by ST in UTF-8",
        b"a\x1b]52;c;aGk=\xc2\x9cb",
        b"ab",
    ),
    ("OSC 52 read request", b"a\x1b]52;c;?\x07b", b"ab"),
    ("C1 OSC 52", b"a\x9d52;c;aGk=\x07b", b"ab"),
    ("C1 OSC 52 in UTF-8", b"a\xc2\x9d52;c;aGk=\x07b", b"ab"),
    (
        "C1 OSC 52 in UTF-8 ended by C1 ST in UTF-8",
        b"a\xc2\x9d52;p;aGk=\xc2\x9cb",
        b"ab",
    ),
    ("leading zero", b"a\x1b]052;c;aGk=\x07b", b"ab"),
    ("leading zeros", b"a\x1b]000000052;c;aGk=\x07b", b"ab"),
    ("no semicolon", b"a\x1b]52\x07b", b"ab"),
    ("other byte after the Ps", b"a\x1b]52x;c;aGk=\x07b", b"ab"),
    ("kitty OSC 5522", b"a\x1b]5522;type=read\x1b\\b", b"ab"),
    (
        "a Ps of 10 digits (fail closed)",
        b"a\x1b]4294967348;c;aGk=\x07b",
        b"ab",
    ),
    (
        "a C0 control the terminal ignores inside the Ps",
        b"a\x1b]5\x002;c;aGk=\x07b",
        b"ab",
    ),
    (
        "C0 controls the terminal ignores after ESC",
        b"a\x1b\x00\x07]52;c;aGk=\x07b",
        b"ab",
    ),
    ("ended by CAN", b"a\x1b]52;c;aGk=\x18b", b"ab"),
    ("ended by SUB", b"a\x1b]52;c;aGk=\x1ab", b"ab"),
    (
        "ended by another ESC: the CSI it starts is kept",
        b"a\x1b]52;c;aGk=\x1b[31mred",
        b"a\x1b[31mred",
    ),
    (
        "ended by another ESC: an OSC 52 it starts is removed too",
        b"a\x1b]52;c;aGk=\x1b]52;c;aGk=\x07b",
        b"ab",
    ),
    (
        "UTF-8 in the payload: E2 80 9C is a quotation mark, not ST",
        b"a\x1b]52;c;\xe2\x80\x9c still payload\x07b",
        b"ab",
    ),
    (
        "tmux passthrough (inner ESCs doubled)",
        b"a\x1bPtmux;\x1b\x1b]52;c;aGk=\x07\x1b\\b",
        b"ab",
    ),
    (
        "tmux passthrough with the inner OSC ended by ST",
        b"a\x1bPtmux;\x1b\x1b]52;c;aGk=\x1b\x1b\\\x1b\\b",
        b"ab",
    ),
    (
        "tmux passthrough with parameters and intermediates",
        b"a\x1bP1;2$tmux;\x1b\x1b]52;c;aGk=\x07\x1b\\b",
        b"ab",
    ),
    (
        "tmux passthrough after bytes tmux skips",
        b"a\x1bP\x00\xc3tmux;\x1b\x1b]52;c;aGk=\x07\x1b\\b",
        b"ab",
    ),
    (
        "tmux passthrough in C1 form",
        b"a\x90tmux;\x1b\x1b]52;c;aGk=\x07\x1b\\b",
        b"ab",
    ),
    (
        "tmux passthrough in UTF-8 C1 form",
        b"a\xc2\x90tmux;\x1b\x1b]52;c;aGk=\x07\x1b\\b",
        b"ab",
    ),
    (
        "screen passthrough: the inner OSC 52 goes, the wrapper stays",
        b"a\x1bP\x1b]52;c;aGk=\x07\x1b\\b",
        b"a\x1bP\x1b\\b",
    ),
    (
        "OSC 52 inside a title's body",
        b"a\x1b]0;t\x1b]52;c;aGk=\x07b",
        b"a\x1b]0;tb",
    ),
    (
        "ESC ESC: the first ESC is kept, the OSC 52 after the second goes",
        b"a\x1b\x1b]52;c;aGk=\x07b",
        b"a\x1bb",
    ),
    (
        "ESC ESC: digits after the pending ESC cannot complete an OSC 52",
        b"\x1b\x1b]52;c;x\x07]52;c;y\x07t",
        b"\x1bt",
    ),
    (
        "a kept OSC prefix cut by a removed OSC cannot be completed to 52",
        b"\x1b]5\x1b]52;c;x\x072;c;aGk=\x07after",
        b"\x1b]5after",
    ),
    (
        "a kept DCS prefix cut by a removed OSC cannot be completed to tmux;",
        b"\x1bPt\x1b]52;c;x\x07mux;\x1b\x1b]52;c;y\x07\x1b\\after",
        b"\x1bPtafter",
    ),
];

const KEPT: &[(&str, &[u8])] = &[
    ("text", b"hello, world\r\n"),
    ("title", b"\x1b]0;build: ok\x07"),
    ("title ended by ST", b"\x1b]2;build\x1b\\"),
    (
        "hyperlink",
        b"\x1b]8;;https://example.com\x1b\\link\x1b]8;;\x1b\\",
    ),
    ("colour", b"\x1b]4;1;rgb:ff/00/00\x07"),
    ("OSC 5", b"\x1b]5;1;red\x07"),
    ("OSC 53", b"\x1b]53;x\x07"),
    ("OSC 520", b"\x1b]520;x\x07"),
    ("OSC 5521", b"\x1b]5521;x\x07"),
    ("OSC 55220", b"\x1b]55220;x\x07"),
    ("OSC 1337 (iTerm2)", b"\x1b]1337;SetMark\x07"),
    ("empty Ps", b"\x1b];52;c;aGk=\x07"),
    ("52 after the Ps", b"\x1b]0;52\x07"),
    ("a nine-digit Ps", b"\x1b]000000000;x\x07"),
    ("C1 OSC title", b"\x9d0;t\x07"),
    ("UTF-8 C1 OSC title", b"\xc2\x9d0;t\xc2\x9c"),
    ("CSI", b"\x1b[1;31mred\x1b[0m\x1b[2J\x1b[H"),
    ("C1 CSI", b"\x9b1m"),
    ("sixel", b"\x1bPq#0;2;0;0;0#0~~@@vv@@~~\x1b\\"),
    ("DECRQSS", b"\x1bP$qm\x1b\\"),
    ("XTGETTCAP", b"\x1bP+q544e\x1b\\"),
    ("a DCS that is not tmux", b"\x1bPtmx;x\x1b\\"),
    ("APC (kitty graphics)", b"\x1b_Ga=T,f=100;aGk=\x1b\\"),
    ("charset, keypad, save", b"\x1b(B\x1b)0\x1b=\x1b>\x1b7\x1b8"),
    ("ESC ESC before a CSI", b"\x1b\x1b[m"),
    ("ESC ( ] is a charset, not an OSC", b"\x1b(]52;c;aGk=\x07"),
    ("text that looks like a Ps", b"]52;c;aGk=\x07 52;"),
    ("UTF-8 text", "é ❤ ❝ 𝐀 “quoted” \u{a0} Ý".as_bytes()),
    (
        "invalid UTF-8 and binary",
        b"\xff\xfe\x00\x01\xc0\xc1\xf5\x80\x9b\x9c\x98\x9e\x9f",
    ),
    ("a lone C2 at the end", b"x\xc2"),
    ("a lone ESC at the end", b"x\x1b"),
    ("an unterminated title", b"x\x1b]0;t"),
    ("an unclassified Ps at the end", b"x\x1b]5"),
    ("an unclassified DCS prefix at the end", b"x\x1bPtmu"),
    (
        "ESC and more C0 controls than are held back",
        &[
            0x1b, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, b'[', b'm',
        ],
    ),
];

#[test]
fn clipboard_sequences_are_removed() {
    for (what, input, expected) in REMOVED {
        let out = f(input);
        assert_eq!(
            show(&out),
            show(expected),
            "{what}: {} filtered",
            show(input)
        );
        // Any split gives the same.
        for cut in 0..=input.len() {
            assert_eq!(chunked(input, &[cut]), out, "{what}: cut at {cut}");
        }
        for cut in 0..input.len() {
            let every: Vec<usize> = (cut..input.len()).collect();
            assert_eq!(chunked(input, &every), out, "{what}: bytewise from {cut}");
        }
        assert_eq!(
            references_find(&out),
            Vec::<String>::new(),
            "{what}: {}",
            show(&out)
        );
    }
}

#[test]
fn everything_else_passes_byte_for_byte() {
    for (what, input) in KEPT {
        assert_eq!(show(&f(input)), show(input), "{what}");
        let every: Vec<usize> = (0..input.len()).collect();
        assert_eq!(
            show(&chunked(input, &every)),
            show(input),
            "{what}: bytewise"
        );
    }
}

#[test]
fn an_unterminated_clipboard_sequence_is_dropped_at_the_end() {
    for input in [
        &b"x\x1b]52;c;aGVsbG8"[..],
        b"x\x1b]52",
        b"x\x1b]052",
        b"x\x1b]5522",
        b"x\x1bPtmux;\x1b\x1b]52;c;aGk=\x07",
        b"x\x1b]52;c;aGk=\x1b",
    ] {
        assert_eq!(show(&f(input)), "x", "{}", show(input));
    }
    // A Ps that is not (yet) 52 is passed on: the stream was cut short.
    assert_eq!(f(b"x\x1b]5"), b"x\x1b]5");
    assert_eq!(f(b"x\x1b]"), b"x\x1b]");
}

#[test]
fn held_back_bytes_are_bounded_and_released_once_classified() {
    let mut terminal = TerminalState::default();
    let mut filter = EscapeFilter::new();
    let mut out = Vec::new();
    filter.feed(&mut terminal, b"a\x1b]", &mut out);
    assert_eq!((out.as_slice(), filter.held_bytes()), (&b"a"[..], 2));
    filter.feed(&mut terminal, b"0", &mut out);
    assert_eq!(filter.held_bytes(), 3);
    filter.feed(&mut terminal, b";t", &mut out);
    assert_eq!(
        (out.as_slice(), filter.held_bytes()),
        (&b"a\x1b]0;t"[..], 0)
    );
    // A DCS prefix with more parameters than are held is kept.
    let long: Vec<u8> = [&b"\x1bP"[..], &[b'1'; 100], b"q#0\x1b\\"].concat();
    assert_eq!(chunked(&long, &(0..long.len()).collect::<Vec<_>>()), long);
}

/// 10 MB of OSC 52 payload streamed in 4 KiB chunks: nothing of it comes
/// out, nothing is held back, and the surrounding text is exact.
#[test]
fn a_ten_megabyte_clipboard_payload_is_dropped_as_it_streams() {
    const PAYLOAD_BYTES: usize = 10 * 1000 * 1000;
    const CHUNK_BYTES: usize = 4096;
    let line = b"aGVsbG8gd29ybGQgaGVsbG8gd29ybGQgaGVsbG8gd29ybGQK";
    let mut stream = b"before\x1b]52;c;".to_vec();
    while stream.len() < PAYLOAD_BYTES {
        stream.extend_from_slice(line);
    }
    stream.extend_from_slice(b"\x07after");
    let mut terminal = TerminalState::default();
    let mut filter = EscapeFilter::new();
    let mut out = Vec::new();
    let mut out_max = 0;
    for chunk in stream.chunks(CHUNK_BYTES) {
        out.clear();
        filter.feed(&mut terminal, chunk, &mut out);
        out_max = out_max.max(out.len());
        assert!(filter.held_bytes() <= HELD_BYTES_MAX);
        if out.is_empty() {
            assert!(filter.is_discarding());
        }
    }
    filter.finish(&mut terminal, &mut out);
    assert_eq!(out, b"after");
    assert!(out_max <= "before".len(), "{out_max} bytes came out");
    // The filter's whole state is a few words: the payload is never held.
    assert!(std::mem::size_of::<EscapeFilter>() <= HELD_BYTES_MAX + 32);
}

/// A session's stdout and stderr reach the same terminal: bytes one stream
/// passed cannot be completed into a clipboard sequence by the other.
#[test]
fn streams_sharing_a_terminal_cannot_complete_each_others_sequences() {
    use OutputStream::{Stderr, Stdout};
    let cases: &[&[(OutputStream, &[u8])]] = &[
        // stdout passes the first ESC of ESC ESC; stderr sends `]52;…`.
        &[
            (Stdout, b"\x1b\x1b]52;c;x\x07"),
            (Stderr, b"]52;c;aGk=\x07"),
        ],
        // stdout passes C2 (the ESC after it is held); stderr sends 9D 52;…
        &[(Stdout, b"\xc2\x1b"), (Stderr, b"\x9d52;c;aGk=\x07")],
        // stderr's own E2 lead would make 9D a continuation, but stdout's C2
        // came between them on the terminal.
        &[
            (Stderr, b"\xe2"),
            (Stdout, b"\xc2\x1b"),
            (Stderr, b"\x9d52;c;aGk=\x07"),
        ],
        // stdout passes `ESC ]5` (cut by an ESC it holds); stderr sends `2;`.
        &[(Stdout, b"\x1b]5\x1b"), (Stderr, b"2;c;aGk=\x07")],
        // stderr passes a C1 OSC inside a DCS prefix (tmux skips the C1, a
        // terminal reading C1 starts an OSC); stdout's digit would extend
        // that OSC's Ps.
        &[
            (Stderr, b"\x1bP"),
            (Stderr, b"\x9d000000000;0\x07"),
            (Stdout, b"\t5yz"),
        ],
        &[(Stdout, b"\x1bP\x9d5;"), (Stderr, b"2;c;aGk=\x07")],
        // stdout holds `52` as DCS parameters; meanwhile stderr passes a C1
        // OSC introducer, after which those digits are a Ps.
        &[
            (Stdout, b"\x90\x80"),
            (Stdout, b"52"),
            (Stderr, b"\x9d"),
            (Stderr, b"\x1b"),
        ],
        // stdout passes `ESC Pt`; stderr sends `mux;`.
        &[
            (Stdout, b"\x1bPt\x1b"),
            (Stderr, b"mux;\x1b\x1b]52;c;aGk=\x07\x1b\\"),
        ],
    ];
    for case in cases {
        let mut filter = SessionOutputFilter::new();
        let mut terminal = Vec::new();
        for (stream, bytes) in *case {
            filter.feed(*stream, bytes, &mut terminal);
        }
        filter.finish(Stdout, &mut terminal);
        filter.finish(Stderr, &mut terminal);
        assert_eq!(
            references_find(&terminal),
            Vec::<String>::new(),
            "{case:?}: the terminal got {}",
            show(&terminal)
        );
    }
}

// ---- reference terminals ----

/// What a reference terminal found that reads or writes a clipboard.
fn references_find(bytes: &[u8]) -> Vec<String> {
    let mut found = Xterm::find(bytes);
    found.extend(Tmux::find(bytes, 0));
    found
}

fn is_clipboard_ps(value: u64, digits: u32) -> bool {
    digits > 9 || (digits > 0 && (value == 52 || value == 5522))
}

/// A DEC-style parser (vt100.net's state diagram) that is stricter than any
/// one terminal: C1 controls count in 8-bit form (a byte of 0x80..=0x9F
/// that is not a UTF-8 continuation) and in UTF-8 (U+0080..=U+009F)
/// everywhere, its escape state survives bytes of 0x80 and more, and an OSC
/// whose Ps is 52 or 5522 counts whatever follows the Ps and however it
/// ends, even unterminated.
#[derive(Debug, Default)]
struct Xterm {
    state: Vt,
    utf8: Utf8,
    value: u64,
    digits: u32,
    ps_open: bool,
    found: Vec<String>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Vt {
    #[default]
    Ground,
    Escape,
    EscapeIntermediate,
    Csi,
    Osc,
    DcsEntry,
    DcsData,
    String,
}

impl Xterm {
    fn find(bytes: &[u8]) -> Vec<String> {
        let mut t = Xterm::default();
        for (at, &b) in bytes.iter().enumerate() {
            t.byte(b, at);
        }
        t.end_ps(bytes.len());
        t.found
    }

    fn end_ps(&mut self, at: usize) {
        if self.state == Vt::Osc && self.ps_open {
            self.ps_open = false;
            if is_clipboard_ps(self.value, self.digits) {
                self.found
                    .push(format!("xterm: OSC {} up to byte {at}", self.value));
            }
        }
    }

    fn enter(&mut self, state: Vt, at: usize) {
        self.end_ps(at);
        self.state = state;
        if state == Vt::Osc {
            (self.value, self.digits, self.ps_open) = (0, 0, true);
        }
    }

    fn byte(&mut self, b: u8, at: usize) {
        let c1 = (0x80..=0x9f).contains(&b) && self.utf8.is_c1();
        self.utf8.take(b);
        match b {
            CAN | SUB => return self.enter(Vt::Ground, at),
            ESC => return self.enter(Vt::Escape, at),
            _ if c1 => {
                let next = match b {
                    C1_OSC => Vt::Osc,
                    C1_DCS => Vt::DcsEntry,
                    0x9b => Vt::Csi,
                    0x98 | 0x9e | 0x9f => Vt::String,
                    _ => Vt::Ground,
                };
                return self.enter(next, at);
            }
            _ => {}
        }
        match self.state {
            Vt::Ground | Vt::DcsData | Vt::String => {}
            Vt::Escape => match b {
                0x20..=0x2f => self.state = Vt::EscapeIntermediate,
                b']' => self.enter(Vt::Osc, at),
                b'P' => self.state = Vt::DcsEntry,
                b'[' => self.state = Vt::Csi,
                b'X' | b'^' | b'_' => self.state = Vt::String,
                0x30..=0x7e => self.state = Vt::Ground,
                _ => {}
            },
            Vt::EscapeIntermediate => {
                if (0x30..=0x7e).contains(&b) {
                    self.state = Vt::Ground;
                }
            }
            Vt::Csi => {
                if (0x40..=0x7e).contains(&b) {
                    self.state = Vt::Ground;
                }
            }
            Vt::Osc => match b {
                BEL => self.enter(Vt::Ground, at),
                b'0'..=b'9' if self.ps_open => {
                    self.value = self.value.saturating_mul(10) + u64::from(b - b'0');
                    self.digits += 1;
                }
                b if ignored_in_osc(b) => {}
                _ => self.end_ps(at),
            },
            Vt::DcsEntry => {
                if (0x40..=0x7e).contains(&b) {
                    self.state = Vt::DcsData;
                }
            }
        }
    }
}

/// tmux's input parser (input.c), which sees only 7-bit controls: an OSC
/// is dispatched on any exit, its option read as digits up to `;` or the
/// end; a DCS ends only at `ESC \` (an ESC followed by any other byte is
/// that byte). Every passthrough DCS (`tmux;`) counts, and its payload is
/// checked by both references in turn.
#[derive(Debug, Default)]
struct Tmux {
    state: TmuxState,
    buffer: Vec<u8>,
    found: Vec<String>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum TmuxState {
    #[default]
    Ground,
    Escape,
    Osc,
    DcsEnter,
    DcsHandler,
    DcsEscape,
    String,
    Other,
}

impl Tmux {
    fn find(bytes: &[u8], depth: usize) -> Vec<String> {
        let mut t = Tmux::default();
        for &b in bytes {
            t.byte(b, depth);
        }
        t.exit(depth);
        t.found
    }

    /// Leaves the current state, dispatching what it collected.
    fn exit(&mut self, depth: usize) {
        match self.state {
            TmuxState::Osc => {
                let digits = self
                    .buffer
                    .iter()
                    .take_while(|b| b.is_ascii_digit())
                    .count();
                let rest = &self.buffer[digits..];
                let value = self.buffer[..digits]
                    .iter()
                    .fold(0u64, |v, b| v.saturating_mul(10) + u64::from(b - b'0'));
                let digits = u32::try_from(digits).unwrap_or(u32::MAX);
                if (rest.is_empty() || rest[0] == b';') && is_clipboard_ps(value, digits) {
                    self.found.push(format!("tmux: OSC {value}"));
                }
            }
            TmuxState::DcsHandler | TmuxState::DcsEscape if self.buffer.starts_with(TMUX) => {
                self.found
                    .push(format!("tmux: passthrough at depth {depth}"));
                if depth < 3 {
                    let payload = self.buffer[TMUX.len()..].to_vec();
                    self.found.extend(Xterm::find(&payload));
                    self.found.extend(Tmux::find(&payload, depth + 1));
                }
            }
            _ => {}
        }
        self.buffer.clear();
        self.state = TmuxState::Ground;
    }

    fn byte(&mut self, b: u8, depth: usize) {
        let in_dcs = matches!(self.state, TmuxState::DcsHandler | TmuxState::DcsEscape);
        if !in_dcs {
            match b {
                CAN | SUB => return self.exit(depth),
                ESC => {
                    self.exit(depth);
                    self.state = TmuxState::Escape;
                    return;
                }
                _ => {}
            }
        }
        match self.state {
            TmuxState::Ground | TmuxState::Other => {
                if self.state == TmuxState::Other && (0x40..=0x7e).contains(&b) {
                    self.state = TmuxState::Ground;
                }
            }
            TmuxState::Escape => match b {
                b']' => self.state = TmuxState::Osc,
                b'P' => self.state = TmuxState::DcsEnter,
                b'_' | b'k' | b'^' | b'X' => self.state = TmuxState::String,
                b'[' | 0x20..=0x2f => self.state = TmuxState::Other,
                0x30..=0x7e => self.state = TmuxState::Ground,
                _ => {}
            },
            TmuxState::Osc => match b {
                BEL => self.exit(depth),
                0x20..=0xff => self.buffer.push(b),
                _ => {}
            },
            TmuxState::DcsEnter => {
                if (0x40..=0x7e).contains(&b) {
                    self.buffer.push(b);
                    self.state = TmuxState::DcsHandler;
                }
            }
            TmuxState::DcsHandler => {
                if b == ESC {
                    self.state = TmuxState::DcsEscape;
                } else {
                    self.buffer.push(b);
                }
            }
            TmuxState::DcsEscape => {
                if b == b'\\' {
                    self.exit(depth);
                } else {
                    self.buffer.push(b);
                    self.state = TmuxState::DcsHandler;
                }
            }
            TmuxState::String => {}
        }
    }
}

#[test]
fn the_references_find_what_they_should() {
    for (what, input, _) in REMOVED {
        assert!(!references_find(input).is_empty(), "{what}");
    }
    for (what, input) in KEPT {
        assert_eq!(references_find(input), Vec::<String>::new(), "{what}");
    }
}

// ---- properties ----

/// A piece of a generated stream.
#[derive(Debug, Clone)]
enum Piece {
    /// Printable ASCII, including look-alikes of Ps and DCS bytes.
    Text(Vec<u8>),
    /// One UTF-8 character, some with 0x9D/0x90/0x9C continuation bytes.
    Char(&'static str),
    /// A complete sequence that is not a clipboard sequence.
    Kept(Vec<u8>),
    /// A complete clipboard sequence whose payload bytes are `MARK` and
    /// bytes no kept piece or text has.
    Clipboard(Vec<u8>),
    /// Anything: fragments of sequences and random bytes.
    Raw(Vec<u8>),
}

/// Payload bytes that no other piece but `Raw` contains.
const MARK: u8 = 0xfe;

const CHARS: &[&str] = &["é", "❤", "❝", "𝐀", "“", "”", "\u{a0}", "Ý", "ü", "€"];

const FRAGMENTS: &[&[u8]] = &[
    b"\x1b",
    b"\x1b]",
    b"\x1b]5",
    b"\x1b]52",
    b"2",
    b"5",
    b"52;",
    b";",
    b"\x07",
    b"\x1b\\",
    b"\\",
    b"\xc2",
    b"\x9d",
    b"\x90",
    b"\x9c",
    b"\x18",
    b"\x00",
    b"\x1bP",
    b"t",
    b"tmux;",
    b"mux;",
    b"\x1b\x1b",
    b"]",
    b"P",
    b"\xe2",
    b"\xf0",
    b"c;aGk=",
];

fn pick<T: Clone>(g: &mut Gen, items: &[T]) -> T {
    g.choose(items).cloned().expect("a non-empty list")
}

fn text(g: &mut Gen) -> Vec<u8> {
    let alphabet = b"abcxyz 0123456789;:]P\\[tmux\r\n\t";
    let len = usize::arbitrary(g) % 12 + 1;
    (0..len).map(|_| pick(g, alphabet)).collect()
}

fn terminator(g: &mut Gen) -> Vec<u8> {
    pick(g, &[&b"\x07"[..], b"\x1b\\", b"\x9c", b"\xc2\x9c"]).to_vec()
}

fn kept(g: &mut Gen) -> Vec<u8> {
    let body = text(g)
        .into_iter()
        .filter(|b| !b.is_ascii_control())
        .collect::<Vec<u8>>();
    let osc = |g: &mut Gen, ps: &[u8]| {
        let intro = pick(g, &[&b"\x1b]"[..], b"\x9d", b"\xc2\x9d"]);
        [intro, ps, b";", &body, &terminator(g)].concat()
    };
    match u8::arbitrary(g) % 8 {
        0 => {
            let ps = pick(
                g,
                &[
                    &b"0"[..],
                    b"2",
                    b"4;1",
                    b"8;",
                    b"5",
                    b"53",
                    b"520",
                    b"5521",
                    b"55220",
                    b"1337",
                    b"",
                    b"000000000",
                ],
            );
            osc(g, ps)
        }
        1 => pick(
            g,
            &[
                &b"\x1b[31m"[..],
                b"\x1b[0m",
                b"\x1b[2J",
                b"\x9b1m",
                b"\x1b[?25l",
            ],
        )
        .to_vec(),
        2 => [&b"\x1bPq#0;2;0;0;0#0"[..], &body, b"\x1b\\"].concat(),
        3 => pick(
            g,
            &[
                &b"\x1bP$qm\x1b\\"[..],
                b"\x1bP+q544e\x1b\\",
                b"\x1bPtmx;x\x1b\\",
            ],
        )
        .to_vec(),
        4 => [&b"\x1b_G"[..], &body, b"\x1b\\"].concat(),
        5 => pick(
            g,
            &[&b"\x1b(B"[..], b"\x1b7", b"\x1b8", b"\x1b=", b"\x1b\x1b[m"],
        )
        .to_vec(),
        6 => [&b"\x1b]8;;"[..], &body, b"\x1b\\"].concat(),
        _ => [&b"\x1b]0;"[..], CHARS.concat().as_bytes(), b"\x07"].concat(),
    }
}

fn clipboard(g: &mut Gen) -> Vec<u8> {
    let payload: Vec<u8> = (0..usize::arbitrary(g) % 40)
        .map(|_| pick(g, &[MARK, MARK, b'Q', b'=', b'+', b'/', 0xff]))
        .collect();
    let intro = pick(
        g,
        &[
            &b"\x1b]"[..],
            b"\x9d",
            b"\xc2\x9d",
            b"\x1b\x00]",
            b"\x1b\x07]",
        ],
    );
    let ps = pick(g, &[&b"52"[..], b"052", b"0052", b"5522", b"5\x002"]);
    let osc = [intro, ps, b";c;", &payload, &terminator(g)].concat();
    match u8::arbitrary(g) % 4 {
        0 => {
            // tmux doubles the inner sequence's ESCs.
            let inner: Vec<u8> = [&b"\x1b]52;c;"[..], &payload, b"\x07"]
                .concat()
                .iter()
                .flat_map(|&b| if b == ESC { vec![ESC, ESC] } else { vec![b] })
                .collect();
            let intro = pick(g, &[&b"\x1bP"[..], b"\x90", b"\xc2\x90", b"\x1bP1$"]);
            [intro, b"tmux;", &inner, b"\x1b\\"].concat()
        }
        1 => [
            &b"\x1b]52;c;"[..],
            &payload,
            pick(g, &[&b"\x18"[..], b"\x1a"]),
        ]
        .concat(),
        _ => osc,
    }
}

impl Arbitrary for Piece {
    fn arbitrary(g: &mut Gen) -> Self {
        match u8::arbitrary(g) % 10 {
            0 | 1 => Piece::Text(text(g)),
            2 => Piece::Char(pick(g, CHARS)),
            3..=5 => Piece::Kept(kept(g)),
            6 | 7 => Piece::Clipboard(clipboard(g)),
            8 => Piece::Raw(pick(g, FRAGMENTS).to_vec()),
            _ => Piece::Raw(Vec::<u8>::arbitrary(g)),
        }
    }

    /// Only raw bytes shrink: the other pieces are what their names say.
    fn shrink(&self) -> Box<dyn Iterator<Item = Self>> {
        match self {
            Piece::Raw(bytes) => {
                let piece = self.clone();
                Box::new(bytes.shrink().map(move |b| piece.with(b)))
            }
            _ => Box::new(std::iter::empty()),
        }
    }
}

impl Piece {
    fn with(&self, bytes: Vec<u8>) -> Piece {
        match self {
            Piece::Text(_) => Piece::Text(bytes),
            Piece::Kept(_) => Piece::Kept(bytes),
            Piece::Clipboard(_) => Piece::Clipboard(bytes),
            Piece::Raw(_) | Piece::Char(_) => Piece::Raw(bytes),
        }
    }

    fn bytes(&self) -> &[u8] {
        match self {
            Piece::Text(b) | Piece::Kept(b) | Piece::Clipboard(b) | Piece::Raw(b) => b,
            Piece::Char(c) => c.as_bytes(),
        }
    }
}

fn concat<'a>(pieces: impl IntoIterator<Item = &'a Piece>) -> Vec<u8> {
    pieces.into_iter().flat_map(Piece::bytes).copied().collect()
}

/// Pieces without `Raw`: complete sequences, text and characters only.
fn well_formed(pieces: &[Piece]) -> Vec<Piece> {
    pieces
        .iter()
        .filter(|p| !matches!(p, Piece::Raw(_)))
        .cloned()
        .collect()
}

/// Random streams per property (quickcheck also stops at its `max_tests`).
const TESTS: u64 = 2000;

fn check(prop: fn(Vec<Piece>, Vec<usize>) -> bool) {
    QuickCheck::new().tests(TESTS).quickcheck(prop);
}

/// (a) The output does not depend on how the stream was split into reads,
/// and the held-back bound holds after every read.
#[test]
fn the_output_does_not_depend_on_the_reads() {
    fn prop(pieces: Vec<Piece>, cuts: Vec<usize>) -> bool {
        let input = concat(&pieces);
        let whole = f(&input);
        chunked(&input, &cuts) == whole
            && chunked(&input, &(0..input.len()).collect::<Vec<_>>()) == whole
    }
    check(prop);
}

/// (b) A stream with no clipboard sequence passes unchanged.
#[test]
fn a_stream_without_clipboard_sequences_passes_unchanged() {
    fn prop(pieces: Vec<Piece>, cuts: Vec<usize>) -> bool {
        let safe: Vec<Piece> = well_formed(&pieces)
            .into_iter()
            .filter(|p| !matches!(p, Piece::Clipboard(_)))
            .collect();
        let input = concat(&safe);
        chunked(&input, &cuts) == input
    }
    check(prop);
}

/// (c) Clipboard sequences among well-formed pieces are removed exactly:
/// the output is the other pieces, so no byte of a payload comes out.
#[test]
fn clipboard_sequences_are_removed_exactly() {
    fn prop(pieces: Vec<Piece>, cuts: Vec<usize>) -> bool {
        let pieces = well_formed(&pieces);
        let out = chunked(&concat(&pieces), &cuts);
        let expected = concat(pieces.iter().filter(|p| !matches!(p, Piece::Clipboard(_))));
        out == expected && !out.contains(&MARK)
    }
    check(prop);
}

/// Whatever comes in, including fragments and random bytes, neither
/// reference terminal finds a clipboard sequence in what comes out, and
/// filtering the output again changes nothing.
#[test]
fn no_output_holds_a_clipboard_sequence() {
    fn prop(pieces: Vec<Piece>, cuts: Vec<usize>) -> bool {
        let out = chunked(&concat(&pieces), &cuts);
        let found = references_find(&out);
        if !found.is_empty() {
            eprintln!("{found:?} in {}", show(&out));
            return false;
        }
        f(&out) == out
    }
    check(prop);
}

/// Two streams interleaved onto one terminal (a session's stdout and
/// stderr): the terminal gets no clipboard sequence.
#[test]
fn interleaved_streams_give_the_terminal_no_clipboard_sequence() {
    fn prop(pieces: Vec<(Piece, bool)>) -> bool {
        let mut filter = SessionOutputFilter::new();
        let mut terminal = Vec::new();
        for (piece, stderr) in &pieces {
            let stream = if *stderr {
                OutputStream::Stderr
            } else {
                OutputStream::Stdout
            };
            filter.feed(stream, piece.bytes(), &mut terminal);
            assert!(filter.held_bytes() <= 2 * HELD_BYTES_MAX);
        }
        filter.finish(OutputStream::Stdout, &mut terminal);
        filter.finish(OutputStream::Stderr, &mut terminal);
        let found = references_find(&terminal);
        if !found.is_empty() {
            let pieces: Vec<String> = pieces
                .iter()
                .map(|(p, e)| format!("{}:{}", if *e { "E" } else { "O" }, show(p.bytes())))
                .collect();
            eprintln!("{found:?} in {} from {pieces:?}", show(&terminal));
        }
        found.is_empty()
    }
    QuickCheck::new()
        .tests(TESTS)
        .quickcheck(prop as fn(Vec<(Piece, bool)>) -> bool);
}

/// The bulk path at ground leaves the terminal state exactly as passing its
/// bytes one at a time would, and stops before any byte that could start a
/// sequence.
#[test]
fn the_bulk_path_agrees_with_byte_by_byte() {
    fn prop(before: Vec<u8>, bytes: Vec<u8>) -> bool {
        let mut bulk = TerminalState::default();
        for &b in &before {
            bulk.passed(b);
        }
        if !bulk.at_ground() {
            return true;
        }
        let mut single = bulk;
        let run = bulk.plain_run(&bytes);
        for &b in &bytes[..run] {
            single.passed(b);
        }
        let stops_right = bytes.get(run).is_none_or(|&b| {
            b == ESC || b == LEAD_C1 || ((b == C1_OSC || b == C1_DCS) && single.utf8.is_c1())
        });
        (bulk.passes, single.passes) = (0, 0);
        bulk == single && stops_right
    }
    QuickCheck::new()
        .tests(TESTS)
        .quickcheck(prop as fn(Vec<u8>, Vec<u8>) -> bool);
}
