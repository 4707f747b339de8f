//! Fixed codec tests for the v1 session terminal protocol (schemas.md
//! "Session terminal protocol"; spec 3.4). Expected bytes are written out by
//! hand from the postcard rules: enum variant = varint index, SessionId = 16
//! raw bytes, u16 = varint, u8 = one raw byte, bytes/strings/sequences =
//! varint length + elements, Option = 0 | 1 + value.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test

use lazaret_runtime::records::ids::SessionId;
use lazaret_runtime::terminal::protocol::*;
use quickcheck::quickcheck;
use std::num::NonZeroU16;

fn id(b: u8) -> SessionId {
    SessionId([b; 16])
}

fn bytes(prefix: &[u8], b: u8, suffix: &[u8]) -> Vec<u8> {
    let mut v = prefix.to_vec();
    v.extend([b; 16]);
    v.extend_from_slice(suffix);
    v
}

fn nz(v: u16) -> NonZeroU16 {
    NonZeroU16::new(v).unwrap()
}

#[test]
fn input_event_bytes() {
    let e = SessionTerminalEvent::Input(TerminalInput {
        session_id: id(0x11),
        bytes: Chunk::new(b"ls\r".to_vec()).unwrap(),
    });
    let expected = bytes(&[0x00], 0x11, &[0x03, b'l', b's', 0x0d]);
    assert_eq!(encode_event(&e).unwrap(), expected);
    assert_eq!(decode_event(&expected).unwrap(), e);
}

#[test]
fn resize_event_bytes_use_varints() {
    let e = SessionTerminalEvent::Resize(TerminalResize {
        session_id: id(0x22),
        rows: nz(24),
        columns: nz(300),
        pixel_width: 0,
        pixel_height: u16::MAX,
    });
    let expected = bytes(&[0x01], 0x22, &[0x18, 0xac, 0x02, 0x00, 0xff, 0xff, 0x03]);
    assert_eq!(encode_event(&e).unwrap(), expected);
    assert_eq!(decode_event(&expected).unwrap(), e);
}

#[test]
fn signal_and_close_event_bytes() {
    for (kind, index) in [
        (TerminalSignalKind::Interrupt, 0u8),
        (TerminalSignalKind::Quit, 1),
        (TerminalSignalKind::Suspend, 2),
    ] {
        let e = SessionTerminalEvent::Signal(TerminalSignal {
            session_id: id(0x33),
            signal: kind,
        });
        let expected = bytes(&[0x02], 0x33, &[index]);
        assert_eq!(encode_event(&e).unwrap(), expected, "{kind:?}");
        assert_eq!(decode_event(&expected).unwrap(), e);
    }
    let close = SessionTerminalEvent::Close(SessionClose {
        session_id: id(0x44),
    });
    let expected = bytes(&[0x03], 0x44, &[]);
    assert_eq!(encode_event(&close).unwrap(), expected);
    assert_eq!(decode_event(&expected).unwrap(), close);
}

#[test]
fn zero_rows_or_columns_are_refused_on_decode() {
    let zero_rows = bytes(&[0x01], 0x22, &[0x00, 0x50, 0x00, 0x00]);
    let zero_cols = bytes(&[0x01], 0x22, &[0x18, 0x00, 0x00, 0x00]);
    assert!(decode_event(&zero_rows).is_err());
    assert!(decode_event(&zero_cols).is_err());
}

#[test]
fn message_bytes() {
    let out = SessionTerminalMessage::Output(TerminalOutput {
        session_id: id(0x55),
        bytes: Chunk::new(vec![0x1b, b'[']).unwrap(),
    });
    let expected = bytes(&[0x00], 0x55, &[0x02, 0x1b, b'[']);
    assert_eq!(encode_message(&out).unwrap(), expected);
    assert_eq!(decode_message(&expected).unwrap(), out);

    let exited = SessionTerminalMessage::Exit(SessionExit::exited(id(0x66), 130));
    let expected = bytes(&[0x01], 0x66, &[0x00, 0x01, 0x82]);
    assert_eq!(encode_message(&exited).unwrap(), expected);
    assert_eq!(decode_message(&expected).unwrap(), exited);

    let terminated = SessionTerminalMessage::Exit(SessionExit::terminated(id(0x66)));
    let expected = bytes(&[0x01], 0x66, &[0x01, 0x00]);
    assert_eq!(encode_message(&terminated).unwrap(), expected);

    let lost = SessionTerminalMessage::Exit(SessionExit::runtime_lost(id(0x66)));
    let expected = bytes(&[0x01], 0x66, &[0x02, 0x00]);
    assert_eq!(encode_message(&lost).unwrap(), expected);
    assert_eq!(decode_message(&expected).unwrap(), lost);
}

#[test]
fn exit_code_present_exactly_for_exited() {
    let exited_without_code = bytes(&[0x01], 0x66, &[0x00, 0x00]);
    let terminated_with_code = bytes(&[0x01], 0x66, &[0x01, 0x01, 0x09]);
    let lost_with_code = bytes(&[0x01], 0x66, &[0x02, 0x01, 0x00]);
    for b in [exited_without_code, terminated_with_code, lost_with_code] {
        // postcard reports a serde refusal from SessionExit's TryFrom.
        assert!(matches!(decode_message(&b), Err(ProtocolError::Codec(_))));
    }
}

#[test]
fn non_interactive_request_bytes() {
    let r = NonInteractiveSessionRequest::new(id(0x77), vec!["git".into(), "--version".into()])
        .unwrap();
    let mut suffix = vec![0x02, 0x03];
    suffix.extend_from_slice(b"git");
    suffix.push(0x09);
    suffix.extend_from_slice(b"--version");
    let expected = bytes(&[0x00], 0x77, &suffix);
    assert_eq!(encode_request(&r).unwrap(), expected);
    assert_eq!(decode_request(&expected).unwrap(), r);
    // protocol_version 1 is not a known variant.
    let mut unknown = expected.clone();
    unknown[0] = 0x01;
    assert!(decode_request(&unknown).is_err());
}

#[test]
fn non_interactive_argv_rules() {
    assert!(matches!(
        NonInteractiveSessionRequest::new(id(1), vec![]),
        Err(ProtocolError::ArgvLength { len: 0 })
    ));
    assert!(matches!(
        NonInteractiveSessionRequest::new(id(1), vec!["a".into(), "b\0".into()]),
        Err(ProtocolError::ArgvNul { index: 1 })
    ));
    let empty_argv = bytes(&[0x00], 0x77, &[0x00]);
    assert!(decode_request(&empty_argv).is_err());
}

#[test]
fn non_interactive_messages_keep_streams_apart() {
    for (variant, tag) in [(0u8, "stdout"), (1u8, "stderr")] {
        let o = NonInteractiveOutput {
            session_id: id(0x88),
            bytes: Chunk::new(tag.as_bytes().to_vec()).unwrap(),
        };
        let m = if variant == 0 {
            NonInteractiveSessionMessage::Stdout(o)
        } else {
            NonInteractiveSessionMessage::Stderr(o)
        };
        let mut suffix = vec![0x06];
        suffix.extend_from_slice(tag.as_bytes());
        let expected = bytes(&[variant], 0x88, &suffix);
        assert_eq!(encode_non_interactive(&m).unwrap(), expected);
        assert_eq!(decode_non_interactive(&expected).unwrap(), m);
    }
    let exit = NonInteractiveSessionMessage::Exit(SessionExit::exited(id(0x88), 0));
    let expected = bytes(&[0x02], 0x88, &[0x00, 0x01, 0x00]);
    assert_eq!(encode_non_interactive(&exit).unwrap(), expected);
}

#[test]
fn bounds_trailing_bytes_and_unknown_variants_refuse() {
    assert!(matches!(
        Chunk::new(vec![0; MAX_CHUNK_BYTES + 1]),
        Err(ProtocolError::ChunkTooLarge { .. })
    ));
    assert!(Chunk::new(vec![0; MAX_CHUNK_BYTES]).is_ok());
    // A chunk of MAX_CHUNK_BYTES + 1 on the wire: varint 16385 = 0x81 0x80 0x01.
    let mut oversized = bytes(&[0x00], 0x11, &[0x81, 0x80, 0x01]);
    oversized.extend(vec![0u8; MAX_CHUNK_BYTES + 1]);
    assert!(decode_event(&oversized).is_err());
    let mut trailing = bytes(&[0x03], 0x44, &[]);
    trailing.push(0);
    let err = decode_event(&trailing).unwrap_err().to_string();
    assert!(err.contains("1 trailing bytes"), "{err}");
    assert!(decode_event(&bytes(&[0x04], 0x44, &[])).is_err());
    assert!(decode_event(&vec![0; MAX_RECORD_BYTES + 1]).is_err());
    assert!(decode_event(&[0x03, 0x44]).is_err());
}

quickcheck! {
    fn input_and_resize_round_trip(data: Vec<u8>, rows: u16, cols: u16, pw: u16, ph: u16, sid: u8) -> bool {
        let data: Vec<u8> = data.into_iter().take(MAX_CHUNK_BYTES).collect();
        let input = SessionTerminalEvent::Input(TerminalInput {
            session_id: id(sid),
            bytes: Chunk::new(data).unwrap(),
        });
        let ok_input = decode_event(&encode_event(&input).unwrap()).unwrap() == input;
        let resize = SessionTerminalEvent::Resize(TerminalResize {
            session_id: id(sid),
            rows: NonZeroU16::new(rows.max(1)).unwrap(),
            columns: NonZeroU16::new(cols.max(1)).unwrap(),
            pixel_width: pw,
            pixel_height: ph,
        });
        ok_input && decode_event(&encode_event(&resize).unwrap()).unwrap() == resize
    }
}
