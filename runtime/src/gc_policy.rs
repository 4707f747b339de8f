//! `lazaret state gc`'s keep policy (spec 3.9; OR-7 "policy-controlled
//! reclamation"): which prepared artifacts no lease names are kept
//! anyway. Only unleased artifacts are candidates: the policy can keep an
//! artifact, never reclaim a leased one. Pure: last uses and the present
//! come in as seconds since the Unix epoch.

/// The policy: keep the `keep_newest` most recently used candidates, and
/// every candidate used less than `older_than` seconds ago.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    pub keep_newest: usize,
    pub older_than: Option<u64>,
}

/// The policy's verdict on one candidate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Reclaim,
    /// Among the `keep_newest` most recently used.
    KeptNewest,
    /// Used less than `older_than` ago.
    KeptRecent,
}

/// The verdicts on candidates last used at `last_uses` (in that order).
/// Ties in last use keep the earlier candidate.
pub fn decide(policy: &Policy, now: u64, last_uses: &[u64]) -> Vec<Verdict> {
    let mut order: Vec<usize> = (0..last_uses.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(last_uses[i]));
    let mut verdicts = vec![Verdict::Reclaim; last_uses.len()];
    for (rank, &i) in order.iter().enumerate() {
        let recent = policy
            .older_than
            .is_some_and(|age| now.saturating_sub(last_uses[i]) < age);
        verdicts[i] = if rank < policy.keep_newest {
            Verdict::KeptNewest
        } else if recent {
            Verdict::KeptRecent
        } else {
            Verdict::Reclaim
        };
    }
    verdicts
}

/// Why an age is not one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not an age: expected a whole number followed by s, m, h, d or w (for example 30m or 14d)")]
pub struct AgeError {
    pub text: String,
}

/// Seconds in an age written as a whole number and a unit: `s`, `m`,
/// `h`, `d` or `w` (`90m`, `14d`).
pub fn parse_age(text: &str) -> Result<u64, AgeError> {
    let bad = || AgeError {
        text: text.to_owned(),
    };
    let unit = text.chars().last().ok_or_else(bad)?;
    let seconds: u64 = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3_600,
        'd' => 86_400,
        'w' => 604_800,
        _ => return Err(bad()),
    };
    let digits = &text[..text.len() - unit.len_utf8()];
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(seconds))
        .ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;
    use quickcheck::quickcheck;

    #[test]
    fn without_a_policy_every_candidate_is_reclaimed() {
        assert_eq!(
            decide(&Policy::default(), 100, &[5, 50, 99]),
            vec![Verdict::Reclaim; 3]
        );
    }

    #[test]
    fn the_newest_are_kept_then_the_recent() {
        let policy = Policy {
            keep_newest: 1,
            older_than: Some(60),
        };
        // Ages 1000, 10, 30, 500 seconds.
        assert_eq!(
            decide(&policy, 1_000, &[0, 990, 970, 500]),
            vec![
                Verdict::Reclaim,
                Verdict::KeptNewest,
                Verdict::KeptRecent,
                Verdict::Reclaim
            ]
        );
        // A tie keeps the earlier candidate.
        let policy = Policy {
            keep_newest: 1,
            older_than: None,
        };
        assert_eq!(
            decide(&policy, 10, &[7, 7]),
            vec![Verdict::KeptNewest, Verdict::Reclaim]
        );
    }

    #[test]
    fn ages_are_a_number_and_a_unit() {
        assert_eq!(parse_age("45s"), Ok(45));
        assert_eq!(parse_age("90m"), Ok(5_400));
        assert_eq!(parse_age("12h"), Ok(43_200));
        assert_eq!(parse_age("14d"), Ok(1_209_600));
        assert_eq!(parse_age("2w"), Ok(1_209_600));
        for bad in [
            "",
            "7",
            "d",
            "-1d",
            "1.5d",
            "1y",
            " 1d",
            "99999999999999999999w",
            "1dd",
        ] {
            assert!(parse_age(bad).is_err(), "{bad}");
        }
        assert!(parse_age("1y").unwrap_err().to_string().contains("`1y`"));
    }

    quickcheck! {
        /// The kept newest are min(N, candidates) and none is older than a
        /// reclaimed one; nothing used within the age is reclaimed.
        fn the_policy_keeps_what_it_says(uses: Vec<u32>, keep: u8, age: Option<u16>, now: u32) -> bool {
            let uses: Vec<u64> = uses.into_iter().map(u64::from).collect();
            let policy = Policy {
                keep_newest: usize::from(keep % 8),
                older_than: age.map(u64::from),
            };
            let now = u64::from(now);
            let v = decide(&policy, now, &uses);
            let newest: Vec<u64> = uses.iter().zip(&v).filter(|(_, v)| **v == Verdict::KeptNewest).map(|(u, _)| *u).collect();
            let reclaimed: Vec<u64> = uses.iter().zip(&v).filter(|(_, v)| **v == Verdict::Reclaim).map(|(u, _)| *u).collect();
            newest.len() == policy.keep_newest.min(uses.len())
                && newest.iter().all(|n| reclaimed.iter().all(|r| n >= r))
                && reclaimed.iter().all(|r| policy.older_than.is_none_or(|a| now.saturating_sub(*r) >= a))
        }
    }
}
