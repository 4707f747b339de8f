//! The human and `--json` forms of a `lazaret state` report. The JSON field
//! names are stable and documented in docs/durable-state.md.
use super::evidence::{GenerationEvidence, Liveness, SlotEvidence};
use super::live::LiveView;
use super::ownership::{fields, fields_text, slot_json, slot_text};
use super::{Outcome, Report, Target};
use lazaret_effects::domain_store::{DomainDocument, GenerationDocument, SlotHolder};
use lazaret_runtime::display::{escape_line, escape_path};
use lazaret_runtime::records::participant::ParticipantRole;
use lazaret_runtime::records::terminal::SessionTerminal;
use serde_json::{json, Value};

pub fn render(report: &Report, as_json: bool) -> String {
    if as_json {
        let mut text = serde_json::to_string_pretty(&to_json(report))
            .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
        text.push('\n');
        text
    } else {
        to_text(report)
    }
}

fn status(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::Absent => "absent",
        Outcome::Live(_) => "live",
        Outcome::Read { .. } => "inactive",
    }
}

/// The one line of what to do for a Domain that is absent or live.
fn outcome_advice(report: &Report) -> Option<String> {
    match &report.outcome {
        Outcome::Absent => Some(format!(
            "nothing was created; {} creates the Domain",
            report.relaunch
        )),
        Outcome::Live(view) => {
            let inspect = match view.lock_holders.as_deref() {
                Some([pid, ..]) => {
                    format!("; the coordinator is PID {pid} (`ps -o pid,lstart,args -p {pid}`)")
                }
                _ => String::new(),
            };
            Some(format!(
                "the Domain Store is opened only by that Host Coordinator (spec 3.6, FR-17) and \
                 `lazaret state` cannot ask it yet (its IPC does not serve state): end the \
                 Domain's sessions, after which the coordinator exits, then run {} again{inspect}",
                report.show_again
            ))
        }
        Outcome::Read { .. } => None,
    }
}

// ---- JSON ----

fn liveness_json(l: Option<&Liveness>) -> Value {
    l.map_or(
        Value::Null,
        |l| json!({ "status": l.name(), "reason": l.why() }),
    )
}

fn slot_evidence_json(s: &SlotEvidence) -> Value {
    let mut v = slot_json(&s.recorded.ownership);
    let (participant, session) = match s.recorded.holder {
        SlotHolder::Participant(role) => (json!(format!("{role:?}")), Value::Null),
        SlotHolder::Terminal(id) => (Value::Null, json!(id.to_string())),
    };
    if let Value::Object(map) = &mut v {
        map.insert("slot".into(), json!(format!("{:?}", s.recorded.slot)));
        map.insert("participant".into(), participant);
        map.insert("session_id".into(), session);
        map.insert("live".into(), liveness_json(s.liveness.as_ref()));
    }
    v
}

fn terminal_json(t: &SessionTerminal) -> Value {
    let s = &t.snapshot;
    json!({
        "session_id": t.session_id.to_string(),
        "state": format!("{:?}", t.state),
        "container_id": s.container_id.as_ref().map(|c| c.to_string()),
        "host_coordinator": slot_json(&s.host_coordinator),
        "exec_client": slot_json(&s.exec_client),
        "pty_master": s.pty_master.map(|p| json!({
            "master_fd": p.master_fd, "device": p.device, "inode": p.inode
        })),
        "guest_process": s.guest_process.map(|g| json!({
            "leader_pid": g.leader_pid,
            "leader_start_time": g.leader_start_time,
            "process_group_id": g.process_group_id
        })),
    })
}

fn generation_json(g: &GenerationDocument, e: &GenerationEvidence) -> Value {
    let gen = &g.generation;
    json!({
        "generation_id": gen.generation_id.0,
        "durable_decision": gen.durable_decision.as_str(),
        "configuration_fingerprint": gen.configuration_fingerprint.to_string(),
        "coordinator_id": gen.coordinator_id.to_string(),
        "network_sidecar_id": gen.network_sidecar_id.to_string(),
        "sandbox_id": gen.sandbox_id.to_string(),
        "clean": e.clean,
        "advice": e.advice,
        "participants": g.participants.iter().map(|p| json!({
            "role": format!("{:?}", p.role),
            "state": format!("{:?}", p.state),
            "ownership": p.ownership.as_ref().map(|o| {
                Value::Object(fields(o).into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
            }),
        })).collect::<Vec<_>>(),
        "process_slots": e.slots.iter().map(slot_evidence_json).collect::<Vec<_>>(),
        "sessions": g.sessions.iter().map(|s| json!({
            "session_id": s.session_id.to_string(),
            "cli_id": s.cli_id.to_string(),
            "session_anchor_id": s.session_anchor_id.to_string(),
            "session_phase": s.session_phase.as_str(),
        })).collect::<Vec<_>>(),
        "terminals": g.terminals.iter().map(terminal_json).collect::<Vec<_>>(),
        "mailbox": g.mailbox.as_ref().map(|m| json!({
            "state": format!("{:?}", m.state),
            "identity_path": m.identity_path.to_string(),
            "inbox_path": m.inbox_path.to_string(),
            "outbox_path": m.outbox_path.to_string(),
        })),
    })
}

fn live_json(view: &LiveView) -> Value {
    json!({
        "lock_holder_pids": view.lock_holders,
        "socket_present": view.socket_present,
        "log_present": view.log_present,
        "generation_dirs": view.generation_dirs,
    })
}

fn document_json(doc: &DomainDocument, evidence: &[GenerationEvidence]) -> (Value, Value) {
    let domain = doc.domain.as_ref().map_or(Value::Null, |d| {
        json!({
            "domain_id": d.domain_id.to_string(),
            "profile": d.profile_name.as_str(),
            "workspace": d.canonical_workspace.to_string(),
        })
    });
    let generations = doc
        .generations
        .iter()
        .zip(evidence)
        .map(|(g, e)| generation_json(g, e))
        .collect();
    (domain, Value::Array(generations))
}

fn to_json(report: &Report) -> Value {
    let t = &report.target;
    let (domain, generations) = match &report.outcome {
        Outcome::Read { document, evidence } => document_json(document, evidence),
        _ => (Value::Null, Value::Array(Vec::new())),
    };
    let advice: Vec<String> = match &report.outcome {
        Outcome::Read { evidence, .. } => {
            evidence.iter().filter_map(|e| e.advice.clone()).collect()
        }
        _ => outcome_advice(report).into_iter().collect(),
    };
    json!({
        "status": status(&report.outcome),
        "located": t.located.as_ref().map(|l| json!({
            "profile": l.profile,
            "workspace": l.workspace.display().to_string(),
            "config": l.config_file.display().to_string(),
            "domain_id": l.domain_id.to_string(),
        })),
        "domain_root": t.domain_root.display().to_string(),
        "lock": t.lock.display().to_string(),
        "store": t.store.display().to_string(),
        "runtime": t.runtime.as_ref().map(|r| json!({
            "dir": r.dir.display().to_string(),
            "socket": r.socket.display().to_string(),
            "log": r.log.display().to_string(),
        })),
        "live": match &report.outcome {
            Outcome::Live(view) => live_json(view),
            _ => Value::Null,
        },
        "domain": domain,
        "generations": generations,
        "state_anchors": anchors_json(report),
        "advice": advice,
    })
}

/// The State Anchors' figures, or the error that stopped counting them.
fn anchors_json(report: &Report) -> Value {
    match &report.anchors {
        Ok(anchors) => Value::Array(
            anchors
                .iter()
                .map(|a| {
                    json!({
                        "path": a.path,
                        "upper": a.upper.display().to_string(),
                        "files": a.files,
                        "directories": a.directories,
                        "symlinks": a.symlinks,
                        "deleted": a.deleted,
                        "bytes": a.bytes,
                        "unreadable_directories": a.unreadable,
                        "complete": a.complete,
                    })
                })
                .collect(),
        ),
        Err(e) => json!({ "error": e.to_string() }),
    }
}

/// One line per State Anchor.
fn anchors_text(out: &mut Lines, report: &Report) {
    match &report.anchors {
        Ok(anchors) if anchors.is_empty() => {}
        Ok(anchors) => {
            for a in anchors {
                let mut line = format!(
                    "anchor      {}: {} files, {} directories, {} symlinks, {} deleted image paths, {} bytes (upper {})",
                    a.path,
                    a.files,
                    a.directories,
                    a.symlinks,
                    a.deleted,
                    a.bytes,
                    escape_path(&a.upper)
                );
                if a.unreadable > 0 {
                    line.push_str(&format!(
                        "; {} directories not readable by you",
                        a.unreadable
                    ));
                }
                if !a.complete {
                    line.push_str("; counting stopped at its bound");
                }
                out.line(line);
            }
        }
        Err(e) => out.line(format!("anchors     not counted: {e}")),
    }
}

// ---- text ----

struct Lines(String);

impl Lines {
    /// One line of the report, escaped to one line: the paths and names in
    /// it were not chosen by Lazaret (spec README 'Terminal output hygiene').
    fn line(&mut self, text: impl AsRef<str>) {
        self.0.push_str(&escape_line(text.as_ref()));
        self.0.push('\n');
    }
}

fn liveness_text(l: Option<&Liveness>) -> String {
    match l {
        None => String::new(),
        Some(Liveness::Running) => "  -> running (exact pidfs match)".to_owned(),
        Some(l) => format!("  -> {}: {}", l.name(), l.why().unwrap_or_default()),
    }
}

fn slot_line(s: &SlotEvidence) -> String {
    format!(
        "{:?} {}{}",
        s.recorded.slot,
        slot_text(&s.recorded.ownership),
        liveness_text(s.liveness.as_ref())
    )
}

fn header(out: &mut Lines, t: &Target) {
    if let Some(l) = &t.located {
        out.line(format!("Domain      {}", l.domain_id));
        out.line(format!("profile     {}", l.profile));
        out.line(format!("workspace   {}", escape_path(&l.workspace)));
        out.line(format!("config      {}", escape_path(&l.config_file)));
    }
    out.line(format!("Domain Root {}", escape_path(&t.domain_root)));
    if let Some(r) = &t.runtime {
        out.line(format!("runtime     {}", escape_path(&r.dir)));
    }
}

fn live_text(out: &mut Lines, report: &Report, view: &LiveView) {
    let t = &report.target;
    let holders = match view.lock_holders.as_deref() {
        None => " (holder unknown: /proc/locks unreadable)".to_owned(),
        Some([]) => " (holder not listed in /proc/locks)".to_owned(),
        Some(pids) => format!(
            " (PID {})",
            pids.iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    out.line(format!(
        "status      live: a Host Coordinator holds the Domain lock {}{holders}",
        escape_path(&t.lock)
    ));
    match &t.runtime {
        Some(r) => {
            let present = |p: bool| if p { "present" } else { "absent" };
            out.line(format!(
                "socket      {} ({})",
                escape_path(&r.socket),
                present(view.socket_present)
            ));
            if view.log_present {
                out.line(format!("log         {}", escape_path(&r.log)));
            }
            out.line(format!(
                "generation directories  {}",
                if view.generation_dirs.is_empty() {
                    "none".to_owned()
                } else {
                    view.generation_dirs.join(" ")
                }
            ));
        }
        None => out
            .line("runtime     unknown with --domain-root (name the profile instead to locate it)"),
    }
}

fn terminal_text(out: &mut Lines, t: &SessionTerminal, slots: &[&SlotEvidence]) {
    let s = &t.snapshot;
    out.line(format!(
        "    session {}  {:?}  container {}",
        t.session_id,
        t.state,
        s.container_id
            .as_ref()
            .map_or("-".to_owned(), |c| c.to_string())
    ));
    let live = |slot| {
        slots
            .iter()
            .find(|e| e.recorded.slot == slot)
            .and_then(|e| e.liveness.as_ref())
    };
    use lazaret_runtime::records::process::HostProcessOwnershipSlot as S;
    out.line(format!(
        "      host coordinator {}{}",
        slot_text(&s.host_coordinator),
        liveness_text(live(S::SessionTerminalHostCoordinator))
    ));
    out.line(format!(
        "      exec client      {}{}",
        slot_text(&s.exec_client),
        liveness_text(live(S::SessionTerminalExecClient))
    ));
    if let Some(p) = s.pty_master {
        out.line(format!(
            "      pty              master fd {}, devpts {}:{}",
            p.master_fd, p.device, p.inode
        ));
    }
    if let Some(g) = s.guest_process {
        out.line(format!(
            "      guest            leader {} start {} group {}",
            g.leader_pid, g.leader_start_time, g.process_group_id
        ));
    }
}

fn generation_text(out: &mut Lines, g: &GenerationDocument, e: &GenerationEvidence) {
    let gen = &g.generation;
    out.line(format!(
        "generation {}  decision {}  fingerprint {}",
        gen.generation_id, gen.durable_decision, gen.configuration_fingerprint
    ));
    if e.clean {
        out.line("  clean: every participant, terminal and the mailbox is Clean");
        return;
    }
    out.line(format!(
        "  coordinator {}  network sidecar {}  sandbox {}",
        gen.coordinator_id, gen.network_sidecar_id, gen.sandbox_id
    ));
    out.line(format!("  participants ({})", g.participants.len()));
    let of_role = |role: ParticipantRole| {
        e.slots
            .iter()
            .filter(move |s| s.recorded.holder == SlotHolder::Participant(role))
    };
    for p in &g.participants {
        let role = format!("{:?}", p.role);
        match &p.ownership {
            None => out.line(format!("    {role:<14} {:?}  (bare intent)", p.state)),
            Some(o) => {
                let evidence = fields_text(&fields(o));
                out.line(format!("    {role:<14} {:?}  {evidence}", p.state).trim_end());
                for s in of_role(p.role) {
                    out.line(format!("      {}", slot_line(s)));
                }
            }
        }
    }
    out.line(format!("  sessions ({})", g.sessions.len()));
    for s in &g.sessions {
        out.line(format!(
            "    session {}  phase {}  cli {}",
            s.session_id, s.session_phase, s.cli_id
        ));
    }
    out.line(format!("  session terminals ({})", g.terminals.len()));
    for t in &g.terminals {
        let slots: Vec<&SlotEvidence> = e
            .slots
            .iter()
            .filter(|s| s.recorded.holder == SlotHolder::Terminal(t.session_id))
            .collect();
        terminal_text(out, t, &slots);
    }
    if let Some(m) = &g.mailbox {
        out.line(format!("  mailbox {:?}  inbox {}", m.state, m.inbox_path));
    }
    if let Some(advice) = &e.advice {
        out.line(format!("  what to do: {advice}"));
    }
}

fn to_text(report: &Report) -> String {
    let mut out = Lines(String::new());
    let t = &report.target;
    match &report.outcome {
        Outcome::Absent => {
            match &t.located {
                Some(l) => out.line(format!(
                    "no Domain for profile {} in workspace {}: there is no Domain Store at {}",
                    l.profile,
                    escape_path(&l.workspace),
                    escape_path(&t.store)
                )),
                None => out.line(format!(
                    "no Domain Store at {}: this Domain has never been started",
                    escape_path(&t.store)
                )),
            }
            header(&mut out, t);
        }
        Outcome::Live(view) => {
            header(&mut out, t);
            live_text(&mut out, report, view);
        }
        Outcome::Read { document, evidence } => {
            match (&document.domain, &t.located) {
                (Some(d), None) => {
                    out.line(format!("Domain      {}", d.domain_id));
                    out.line(format!("profile     {}", d.profile_name));
                    out.line(format!("workspace   {}", d.canonical_workspace));
                }
                (None, None) => out.line("Domain      (no Domain record)"),
                // Located: the record was checked to be this very Domain.
                (_, Some(_)) => {}
            }
            header(&mut out, t);
            if document.domain.is_none() && t.located.is_some() {
                out.line("record      (the store has no Domain record yet)");
            }
            out.line("status      inactive: no Host Coordinator holds the Domain lock");
            if document.generations.is_empty() {
                out.line("no generations");
            }
            for (g, e) in document.generations.iter().zip(evidence) {
                generation_text(&mut out, g, e);
            }
        }
    }
    anchors_text(&mut out, report);
    if let Some(advice) = outcome_advice(report) {
        out.line(format!("what to do: {advice}"));
    }
    out.0
}
