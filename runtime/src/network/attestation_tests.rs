use super::*;

fn key() -> CanaryKey {
    let mut bytes = [0u8; 32];
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = u8::try_from(i).unwrap_or(0);
    }
    CanaryKey::new(bytes)
}

const GENERATION: u64 = 7;
const ALLOWED: Challenge = [0xaa; 32];

/// The answer is RFC 2104 HMAC-SHA256; the expected value was computed
/// independently with Python's `hmac` module over the same message.
#[test]
fn the_canary_answer_is_hmac_sha256_over_role_generation_and_challenge() {
    let answer = canary_answer(&key(), GENERATION, CanaryRole::Allowed, &ALLOWED);
    assert_eq!(
        hex::encode(answer),
        "f9651c4b4a36d527fc88f45972cdd1bd4c724c594e84dc41f9d67024e649fbef"
    );
    // Role, generation and challenge each change it.
    for other in [
        canary_answer(&key(), GENERATION, CanaryRole::Denied, &ALLOWED),
        canary_answer(&key(), GENERATION + 1, CanaryRole::Allowed, &ALLOWED),
        canary_answer(&key(), GENERATION, CanaryRole::Allowed, &[0xab; 32]),
        canary_answer(
            &CanaryKey::new([9; 32]),
            GENERATION,
            CanaryRole::Allowed,
            &ALLOWED,
        ),
    ] {
        assert_ne!(other, answer);
    }
}

fn good_imported() -> Vec<String> {
    let answer = hex::encode(canary_answer(
        &key(),
        GENERATION,
        CanaryRole::Allowed,
        &ALLOWED,
    ));
    vec![
        "check=tap0 result=ok".to_owned(),
        "check=canary-link result=ok".to_owned(),
        "check=ipv6 result=ok".to_owned(),
        "check=capabilities result=ok".to_owned(),
        "check=route-mutation result=ok errno=1".to_owned(),
        format!("check=allowed-canary result=answered response={answer} rtt_us=1800"),
        "check=denied-canary result=unreachable error=timed_out".to_owned(),
    ]
}

fn replaced(lines: &[String], check: &str, with: &str) -> Vec<String> {
    let prefix = format!("check={check} ");
    lines
        .iter()
        .map(|l| {
            if l.starts_with(&prefix) {
                with.to_owned()
            } else {
                l.clone()
            }
        })
        .collect()
}

#[test]
fn a_complete_report_with_this_generations_answer_passes() {
    assert_eq!(
        judge_imported(&good_imported(), &key(), GENERATION, &ALLOWED),
        Ok(ImportedEvidence {
            allowed_round_trip_us: 1800
        })
    );
}

/// A dead allowed canary, a forged or replayed answer (another
/// generation's), and a reached denied canary each refuse, naming the
/// predicate.
#[test]
fn each_canary_predicate_refuses_on_its_own() {
    let good = good_imported();
    let dead = replaced(
        &good,
        "allowed-canary",
        "check=allowed-canary result=failed error=Connection_timed_out",
    );
    let e = judge_imported(&dead, &key(), GENERATION, &ALLOWED).unwrap_err();
    assert!(matches!(e, AttestationError::AllowedCanary { .. }), "{e}");
    assert!(e.to_string().contains("10.137.55.2"), "{e}");

    let stale = hex::encode(canary_answer(
        &key(),
        GENERATION - 1,
        CanaryRole::Allowed,
        &ALLOWED,
    ));
    let replayed = replaced(
        &good,
        "allowed-canary",
        &format!("check=allowed-canary result=answered response={stale}"),
    );
    let e = judge_imported(&replayed, &key(), GENERATION, &ALLOWED).unwrap_err();
    assert!(e.to_string().contains("not this generation's"), "{e}");

    let reached = replaced(
        &good,
        "denied-canary",
        "check=denied-canary result=reached response=",
    );
    assert_eq!(
        judge_imported(&reached, &key(), GENERATION, &ALLOWED),
        Err(AttestationError::DeniedCanaryReached)
    );
}

#[test]
fn each_local_check_refuses_on_its_own_and_a_missing_one_is_named() {
    let good = good_imported();
    for check in [
        "tap0",
        "canary-link",
        "ipv6",
        "capabilities",
        "route-mutation",
    ] {
        let failed = replaced(
            &good,
            check,
            &format!("check={check} result=failed detail=accepted"),
        );
        match judge_imported(&failed, &key(), GENERATION, &ALLOWED) {
            Err(AttestationError::Failed {
                check: named,
                detail,
            }) => {
                assert_eq!(named, check);
                assert!(detail.contains("accepted"), "{detail}");
            }
            other => panic!("{check}: {other:?}"),
        }
        let prefix = format!("check={check} ");
        let without: Vec<String> = good
            .iter()
            .filter(|l| !l.starts_with(&prefix))
            .cloned()
            .collect();
        assert_eq!(
            judge_imported(&without, &key(), GENERATION, &ALLOWED),
            Err(AttestationError::Missing { check })
        );
    }
}

/// A route change refused for another reason than authority (EEXIST)
/// proves nothing.
#[test]
fn a_route_refusal_counts_only_for_want_of_permission() {
    for (errno, passes) in [("1", true), ("13", true), ("17", false), ("", false)] {
        let lines = replaced(
            &good_imported(),
            "route-mutation",
            &format!("check=route-mutation result=ok errno={errno}"),
        );
        assert_eq!(
            judge_imported(&lines, &key(), GENERATION, &ALLOWED).is_ok(),
            passes,
            "errno {errno}"
        );
    }
}

#[test]
fn malformed_and_refused_reports_are_errors() {
    let untimed: Vec<String> = good_imported()
        .into_iter()
        .map(|l| l.replace(" rtt_us=1800", ""))
        .collect();
    assert!(matches!(
        judge_imported(&untimed, &key(), GENERATION, &ALLOWED),
        Err(AttestationError::Malformed { .. })
    ));
    let mut twice = good_imported();
    twice.push("check=tap0 result=ok".to_owned());
    assert!(matches!(
        judge_imported(&twice, &key(), GENERATION, &ALLOWED),
        Err(AttestationError::Malformed { .. })
    ));
    let bare = vec!["tap0 ok".to_owned()];
    assert!(matches!(
        judge_imported(&bare, &key(), GENERATION, &ALLOWED),
        Err(AttestationError::Malformed { .. })
    ));
    let refused = vec!["error=unknown_command".to_owned()];
    assert_eq!(
        judge_imported(&refused, &key(), GENERATION, &ALLOWED),
        Err(AttestationError::Refused("unknown_command".to_owned()))
    );
}

#[test]
fn the_cleanup_round_needs_the_old_canary_gone_and_tap0_present() {
    let good = vec![
        "check=formerly-allowed result=unreachable error=timed_out".to_owned(),
        "check=tap0 result=ok".to_owned(),
    ];
    assert_eq!(judge_cleanup(&good), Ok(()));
    let reached = replaced(
        &good,
        "formerly-allowed",
        "check=formerly-allowed result=reached response=00",
    );
    assert_eq!(
        judge_cleanup(&reached),
        Err(AttestationError::FormerlyAllowedReached)
    );
    let no_tap = replaced(&good, "tap0", "check=tap0 result=failed detail=absent");
    assert!(matches!(
        judge_cleanup(&no_tap),
        Err(AttestationError::Failed { check: "tap0", .. })
    ));
}

#[test]
fn requests_carry_the_challenges_and_the_bounded_wait() {
    assert_eq!(
        attest_request(&[0x01; 32], &[0x02; 32]),
        format!("attest {} {} 10\n", "01".repeat(32), "02".repeat(32))
    );
    // Two round trips of the live canary, within the floor and the cap.
    for (rtt_us, wait_ms) in [(1_800, 10), (8_000, 16), (5_000_000, 10_000)] {
        let evidence = ImportedEvidence {
            allowed_round_trip_us: rtt_us,
        };
        assert_eq!(
            cleanup_request(&[0xff; 32], &evidence),
            format!("cleanup {} {wait_ms}\n", "ff".repeat(32))
        );
    }
}

#[test]
fn after_the_cleanup_only_lo_and_the_same_tap0_remain_without_ipv6() {
    let links = |entries: &[(u32, &str)]| -> BTreeMap<u32, String> {
        entries.iter().map(|(i, n)| (*i, (*n).to_owned())).collect()
    };
    assert_eq!(
        judge_remaining_links(&links(&[(1, "lo"), (2, "tap0")]), 2),
        Ok(())
    );
    for left in [
        links(&[(1, "lo"), (2, "tap0"), (3, "cnr0")]),
        links(&[(1, "lo"), (4, "tap0")]),
        links(&[(1, "lo")]),
    ] {
        assert!(matches!(
            judge_remaining_links(&left, 2),
            Err(AttestationError::LinksRemain { .. })
        ));
    }
    let none = PolicyProjection::new(Vec::new(), Vec::new(), Vec::new());
    assert_eq!(judge_ipv6_unchanged(&none), Ok(()));
    let some = PolicyProjection::new(
        Vec::new(),
        vec!["fe80::1/64 dev tap0".to_owned()],
        Vec::new(),
    );
    assert!(matches!(
        judge_ipv6_unchanged(&some),
        Err(AttestationError::Ipv6Changed { .. })
    ));
}

/// The denied responder's own count: exactly the known-live connection.
#[test]
fn the_denied_canary_may_have_accepted_only_the_known_live_connection() {
    assert_eq!(judge_denied_untouched(1), Ok(()));
    for accepted in [0, 2, 5] {
        assert_eq!(
            judge_denied_untouched(accepted),
            Err(AttestationError::DeniedCanaryAccepted { accepted })
        );
    }
}

/// An endpoint that must stay unreachable refused at once: something on
/// the path answered, which fails like a connection.
#[test]
fn a_refused_probe_fails_both_unreachability_checks() {
    let refused = replaced(
        &good_imported(),
        "denied-canary",
        "check=denied-canary result=refused wait_ms=10 error=Connection_refused",
    );
    match judge_imported(&refused, &key(), GENERATION, &ALLOWED) {
        Err(AttestationError::Failed { check, detail }) => {
            assert_eq!(check, "denied-canary");
            assert!(detail.contains("Connection_refused"), "{detail}");
        }
        other => panic!("{other:?}"),
    }
    let cleanup = vec![
        "check=formerly-allowed result=refused wait_ms=10 error=Connection_refused".to_owned(),
        "check=tap0 result=ok".to_owned(),
    ];
    assert!(matches!(
        judge_cleanup(&cleanup),
        Err(AttestationError::Failed {
            check: "formerly-allowed",
            ..
        })
    ));
}
