//! Which typed bytes are terminal signal keys (spec 3.4 "Interrupt, Quit, and
//! Suspend"; FR-8, FR-15, DX-5).
//!
//! With runsc, a session's guest TTY is the host PTY slave itself: the guest's
//! `tcsetattr` (`stty raw`, an editor entering raw mode, `stty intr ^X`)
//! changes the host slave's termios, and the host line discipline processes
//! the typed bytes (measured with runsc 0.0~20240729: `stty raw -echo intr ^X`
//! inside showed `-isig`, `intr = ^X` on the host slave). That line discipline
//! would turn `VINTR`/`VQUIT`/`VSUSP` into signals, but the slave is no host
//! process's controlling terminal, so the signal reaches nobody. The Host
//! Coordinator therefore reads the slave's current settings ([`SignalKeys`])
//! and makes the `Interrupt`/`Quit`/`Suspend` events exactly when the line
//! discipline would have signalled: `ISIG` set and the byte equal to the
//! current special character; such a byte becomes its signal instead of
//! being written. Otherwise the byte reaches the program
//! unchanged (raw-mode editors, agent TUIs and `cat -v` get 0x03, 0x1c,
//! 0x1a).
use super::protocol::TerminalSignalKind;

/// The signal-generating part of a terminal's line discipline: `ISIG` and
/// the `VINTR`, `VQUIT` and `VSUSP` characters (`None` when disabled,
/// `_POSIX_VDISABLE`, which Linux encodes as 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SignalKeys {
    pub isig: bool,
    pub interrupt: Option<u8>,
    pub quit: Option<u8>,
    pub suspend: Option<u8>,
}

impl SignalKeys {
    /// From raw `c_cc` values: 0 disables a character (Linux
    /// `_POSIX_VDISABLE`).
    pub fn from_termios(isig: bool, vintr: u8, vquit: u8, vsusp: u8) -> Self {
        let enabled = |c: u8| (c != 0).then_some(c);
        Self {
            isig,
            interrupt: enabled(vintr),
            quit: enabled(vquit),
            suspend: enabled(vsusp),
        }
    }

    /// The signal `byte` generates under these settings, if any.
    pub fn signal_of(&self, byte: u8) -> Option<TerminalSignalKind> {
        if !self.isig {
            return None;
        }
        // Linux n_tty checks VINTR, then VQUIT, then VSUSP: with two equal
        // characters the first one wins.
        if self.interrupt == Some(byte) {
            Some(TerminalSignalKind::Interrupt)
        } else if self.quit == Some(byte) {
            Some(TerminalSignalKind::Quit)
        } else if self.suspend == Some(byte) {
            Some(TerminalSignalKind::Suspend)
        } else {
            None
        }
    }
}

/// One piece of typed input, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyedInput<'a> {
    /// Bytes for the PTY master.
    Bytes(&'a [u8]),
    /// The signal a key byte generates, in its place. The byte itself is
    /// not written: the host line discipline would only echo it and flush
    /// the terminal's queues, and that flush runs asynchronously, so it
    /// could discard what the program wrote in reply to the signal
    /// (measured: bash's "Stopped" line lost under load).
    Signal(TerminalSignalKind),
}

/// Splits `bytes` into PTY input and the signal events the line discipline
/// `keys` would generate, in typing order. Without signal keys the result is
/// the bytes unchanged (one piece, or none for empty input).
pub fn split_keys<'a>(bytes: &'a [u8], keys: &SignalKeys) -> Vec<KeyedInput<'a>> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if let Some(signal) = keys.signal_of(b) {
            if start < i {
                out.push(KeyedInput::Bytes(&bytes[start..i]));
            }
            out.push(KeyedInput::Signal(signal));
            start = i + 1;
        }
    }
    if start < bytes.len() {
        out.push(KeyedInput::Bytes(&bytes[start..]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use quickcheck::quickcheck;
    use TerminalSignalKind::{Interrupt, Quit, Suspend};

    const COOKED: SignalKeys = SignalKeys {
        isig: true,
        interrupt: Some(0x03),
        quit: Some(0x1c),
        suspend: Some(0x1a),
    };

    #[test]
    fn cooked_keys_are_signals_after_their_byte() {
        assert_eq!(
            split_keys(b"ab\x03cd\x1c\x1a", &COOKED),
            vec![
                KeyedInput::Bytes(b"ab"),
                KeyedInput::Signal(Interrupt),
                KeyedInput::Bytes(b"cd"),
                KeyedInput::Signal(Quit),
                KeyedInput::Signal(Suspend),
            ]
        );
    }

    #[test]
    fn raw_mode_passes_every_byte_unchanged() {
        let raw = SignalKeys {
            isig: false,
            ..COOKED
        };
        assert_eq!(
            split_keys(b"\x03\x1c\x1a", &raw),
            vec![KeyedInput::Bytes(b"\x03\x1c\x1a")]
        );
        assert!(split_keys(b"", &raw).is_empty());
    }

    #[test]
    fn a_changed_intr_moves_the_interrupt_and_frees_ctrl_c() {
        // `stty intr ^X`
        let keys = SignalKeys::from_termios(true, 0x18, 0x1c, 0x1a);
        assert_eq!(
            split_keys(b"\x03\x18", &keys),
            vec![KeyedInput::Bytes(b"\x03"), KeyedInput::Signal(Interrupt)]
        );
    }

    #[test]
    fn a_disabled_character_never_matches_nul() {
        // `stty intr undef` stores 0 (_POSIX_VDISABLE).
        let keys = SignalKeys::from_termios(true, 0, 0x1c, 0x1a);
        assert_eq!(keys.interrupt, None);
        assert_eq!(
            split_keys(b"\0\x03", &keys),
            vec![KeyedInput::Bytes(b"\0\x03")]
        );
    }

    #[test]
    fn equal_characters_take_the_line_disciplines_order() {
        let keys = SignalKeys::from_termios(true, 0x1a, 0x1a, 0x1a);
        assert_eq!(keys.signal_of(0x1a), Some(Interrupt));
        let keys = SignalKeys::from_termios(true, 0, 0x1a, 0x1a);
        assert_eq!(keys.signal_of(0x1a), Some(Quit));
    }

    quickcheck! {
        /// Each input byte appears once, in order: as itself, or as the
        /// signal the line discipline makes of it; no piece is empty.
        fn every_byte_is_itself_or_its_signal_in_order(
            bytes: Vec<u8>, isig: bool, vintr: u8, vquit: u8, vsusp: u8
        ) -> bool {
            let keys = SignalKeys::from_termios(isig, vintr, vquit, vsusp);
            let mut rebuilt: Vec<Result<u8, TerminalSignalKind>> = Vec::new();
            for piece in split_keys(&bytes, &keys) {
                match piece {
                    KeyedInput::Bytes([]) => return false,
                    KeyedInput::Bytes(b) => rebuilt.extend(b.iter().map(|&x| Ok(x))),
                    KeyedInput::Signal(s) => rebuilt.push(Err(s)),
                }
            }
            let expected: Vec<_> = bytes
                .iter()
                .map(|&b| keys.signal_of(b).map_or(Ok(b), Err))
                .collect();
            rebuilt == expected
        }
    }
}
