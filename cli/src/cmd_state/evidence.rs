//! Recovery evidence for `lazaret state`: every recorded process slot of a
//! generation that still owns something, checked against the live system
//! with the exact pidfs recovery match (spec 3.3 recovery steps, FR-7), and
//! one line of what the user can do.
//!
//! Read-only: `match_recorded` opens a pidfd and compares; the handle of a
//! match is dropped at once. Nothing is ever signalled, waited on or
//! reaped here.
use lazaret_effects::domain_store::{GenerationDocument, RecordedSlot};
pub use lazaret_effects::process_identity::Liveness;
use lazaret_effects::process_identity::{liveness, ProcessSys};
use lazaret_runtime::records::ids::GenerationId;

/// One slot as recorded, with its live check when it records an identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotEvidence {
    pub recorded: RecordedSlot,
    pub liveness: Option<Liveness>,
}

/// A generation's recovery evidence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GenerationEvidence {
    pub generation: GenerationId,
    pub clean: bool,
    pub slots: Vec<SlotEvidence>,
    /// What the user can do; `None` for a clean generation.
    pub advice: Option<String>,
}

/// Gathers the evidence of one generation. `relaunch` is the command that
/// starts the Domain again (its Host Coordinator recovers first).
pub fn gather<S: ProcessSys>(
    sys: &S,
    generation: &GenerationDocument,
    relaunch: &str,
) -> GenerationEvidence {
    let id = generation.generation.generation_id;
    let clean = generation.is_clean();
    let slots: Vec<SlotEvidence> = generation
        .process_slots()
        .into_iter()
        .map(|recorded| SlotEvidence {
            liveness: recorded
                .ownership
                .identity()
                .map(|identity| liveness(sys, identity)),
            recorded,
        })
        .collect();
    let advice = (!clean).then(|| advice(id, &slots, relaunch));
    GenerationEvidence {
        generation: id,
        clean,
        slots,
        advice,
    }
}

fn inspect_hint(pid: u32) -> String {
    format!("`ps -o pid,lstart,args -p {pid}`")
}

/// One line: a running recorded process first (recovery waits for it),
/// then an undecidable one (recovery keeps it), else relaunch to recover.
fn advice(generation: GenerationId, slots: &[SlotEvidence], relaunch: &str) -> String {
    let with = |wanted: fn(&Liveness) -> bool| {
        slots
            .iter()
            .find_map(|s| match (&s.liveness, s.recorded.ownership.identity()) {
                (Some(l), Some(identity)) if wanted(l) => Some((s, l, identity.host_pid.0)),
                _ => None,
            })
    };
    if let Some((s, _, pid)) = with(|l| matches!(l, Liveness::Running)) {
        return format!(
            "PID {pid} ({:?}) of generation {generation} is still running and exactly matches its record; \
             recovery leaves it alone until it exits: inspect it with {}, then run {relaunch}",
            s.recorded.slot,
            inspect_hint(pid)
        );
    }
    if let Some((s, l, pid)) = with(|l| matches!(l, Liveness::Unknown { .. })) {
        return format!(
            "whether PID {pid} ({:?}) of generation {generation} is the recorded process cannot be decided here ({}); \
             Lazaret will not touch it: inspect it with {}",
            s.recorded.slot,
            l.why().unwrap_or_default(),
            inspect_hint(pid)
        );
    }
    format!(
        "no recorded process of generation {generation} is running: run {relaunch} to recover it \
         (its Host Coordinator recovers the Domain before starting anything)"
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking
mod tests {
    use super::*;
    use lazaret_effects::process_identity::fake::{Call, FakeProcess, FakeProcessSys};
    use lazaret_effects::process_identity::{ChildState, PID_FS_MAGIC};
    use lazaret_runtime::records::process::{
        BootId, HostPid, PidfsDev, PidfsIno, PidfsProcessAuthorityV1, PidfsProcessIdentityV1,
    };

    const BOOT: BootId = BootId([7; 16]);

    fn recorded(pid: u32, ino: u64, boot: BootId) -> PidfsProcessIdentityV1 {
        PidfsProcessIdentityV1 {
            authority: PidfsProcessAuthorityV1 {
                boot_id: boot,
                pidfs_st_dev: PidfsDev(9),
                pidfs_st_ino: PidfsIno(ino),
            },
            host_pid: HostPid(pid),
            start_time_ticks: 500,
        }
    }

    fn process(ino: u64, start_time: u64) -> FakeProcess {
        FakeProcess {
            dev: 9,
            ino,
            start_time,
            fs_type: PID_FS_MAGIC,
            state: ChildState::Running,
        }
    }

    /// Every refusal of the exact match maps to gone or unknown, a match to
    /// running, and no check ever signals, waits on or reaps anything.
    #[test]
    fn exact_matching_decides_running_gone_and_unknown_without_acting() {
        let sys = FakeProcessSys::new(BOOT);
        sys.insert(10, process(100, 500));
        sys.insert(11, process(999, 500));
        sys.insert(12, process(120, 777));
        let cases = [
            (recorded(10, 100, BOOT), "running"),
            (recorded(10, 100, BootId([8; 16])), "gone"),
            (recorded(404, 1, BOOT), "gone"),
            (recorded(11, 110, BOOT), "gone"),
            (recorded(12, 120, BOOT), "unknown"),
        ];
        for (identity, expected) in cases {
            let got = liveness(&sys, &identity);
            assert_eq!(got.name(), expected, "{identity:?}: {got:?}");
        }
        let mut nested = FakeProcessSys::new(BOOT);
        nested.host_pid_namespace = false;
        nested.insert(10, process(100, 500));
        let got = liveness(&nested, &recorded(10, 100, BOOT));
        assert!(
            matches!(&got, Liveness::Unknown { why } if why.contains("PID namespace")),
            "{got:?}"
        );
        for call in sys.calls().into_iter().chain(nested.calls()) {
            assert!(
                !matches!(call, Call::Signal(..) | Call::Waitid(..)),
                "a read-only check acted on a process: {call:?}"
            );
        }
        // Another boot's record is never looked up by PID.
        let foreign = FakeProcessSys::new(BOOT);
        liveness(&foreign, &recorded(10, 100, BootId([8; 16])));
        assert_eq!(foreign.calls(), vec![Call::BootId]);
    }

    fn slot(liveness: Option<Liveness>, pid: u32) -> SlotEvidence {
        use lazaret_effects::domain_store::SlotHolder;
        use lazaret_runtime::records::participant::ParticipantRole;
        use lazaret_runtime::records::process::{
            HostProcessOwnershipSlot, PersistedHostProcessOwnership,
        };
        SlotEvidence {
            recorded: RecordedSlot {
                holder: SlotHolder::Participant(ParticipantRole::Sandbox),
                slot: HostProcessOwnershipSlot::SandboxRuntimeSupervisor,
                ownership: PersistedHostProcessOwnership::Staged(recorded(pid, 1, BOOT)),
            },
            liveness,
        }
    }

    #[test]
    fn advice_names_the_running_process_first_then_the_undecided_one_else_relaunch() {
        let g = GenerationId(3);
        let gone = Liveness::Gone { why: "x".into() };
        let unknown = Liveness::Unknown {
            why: "nested".into(),
        };
        let relaunch = "`lazaret dev`";
        let a = advice(
            g,
            &[
                slot(Some(gone.clone()), 5),
                slot(Some(unknown.clone()), 6),
                slot(Some(Liveness::Running), 7),
            ],
            relaunch,
        );
        assert!(
            a.contains("PID 7 (SandboxRuntimeSupervisor) of generation 3 is still running")
                && a.contains("`ps -o pid,lstart,args -p 7`")
                && a.ends_with(relaunch),
            "{a}"
        );
        let a = advice(
            g,
            &[slot(Some(gone.clone()), 5), slot(Some(unknown), 6)],
            relaunch,
        );
        assert!(
            a.contains("PID 6") && a.contains("(nested)") && a.contains("will not touch it"),
            "{a}"
        );
        let a = advice(g, &[slot(Some(gone), 5), slot(None, 0)], relaunch);
        assert!(a.contains("run `lazaret dev` to recover it"), "{a}");
    }
}
