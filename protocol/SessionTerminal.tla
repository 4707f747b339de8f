---- MODULE SessionTerminal ----
\* One Session Terminal as both of its sides run it (spec 3.4 "Session
\* Terminals"): the session's own order, SessionRelease.tla instanced whole,
\* and the Host Coordinator's durable record of that terminal, Lazaret.tla's
\* sess[s] for one session s with the guards of RegisterSession,
\* CloseSession, AbortSessionStart, FinishSessionRelease and
\* RetainSessionRelease that concern one session. The two are joined where
\* the product joins them: the session's one report queue
\* (effects/src/coordinator/session_report.rs: Running, Releasing, Ended,
\* handled in the order sent) and the answers of the coordinator's loop
\* (runtime/src/coordinator/serve.rs: on_session_running,
\* on_session_releasing, on_session_ended, on_runtime_lost).
\*
\* This module is a check, not a machine the product runs: TLC only, and
\* outside the state-table dialect (INSTANCE, a sequence for the queue).
\* SessionTerminal-notes.md says what is abstracted and why.
EXTENDS Naturals, Sequences

VARIABLES phase, stage, form, route, connected, closeRequested, output,
          exec, reaped, terminatedByUs, reason, refused, seen, signalled,
          timer, expired, exits, intent, retained, admission, confirmation,
          kind,        \* the session's form as its client asked for it
          rec,         \* Lazaret.tla sess[s]: the coordinator's record of the terminal
          registered,  \* history: the record was Running (RegisterSession taken)
          runtime,     \* the Runtime Supervisor and runsc, as the coordinator knows them
          reports,     \* the session's report queue, oldest first
          reportedRunning, \* the identity thread sent its Running report
          answer,      \* the coordinator's answer to that report
          gate,        \* the release gate (effects/src/coordinator/release_gate.rs)
          reportedEnd  \* the session sent its Ended report

SR == INSTANCE SessionRelease

srVars == <<phase, stage, form, route, connected, closeRequested, output,
            exec, reaped, terminatedByUs, reason, refused, seen, signalled,
            timer, expired, exits, intent, retained, admission, confirmation>>
hcVars == <<kind, rec, registered, runtime, reports, reportedRunning, answer,
            gate, reportedEnd>>
vars == <<srVars, hcVars>>

\* The record's phases: Lazaret.tla's Starting, Registered and Closing, and
\* its Absent split by how the release was finished.
Records == {"Starting", "Registered", "Closing", "Clean", "Retained"}
Reports == {"Running", "Releasing", "Ended"}
Finished == {"Clean", "Retained"}

TypeOK ==
    /\ SR!TypeOK
    /\ kind \in {"Interactive", "Piped"}
    /\ rec \in Records
    /\ registered \in BOOLEAN
    /\ runtime \in {"Running", "Ended", "Heard"}
    /\ reports \in Seq(Reports)
    /\ Len(reports) <= 3
    /\ reportedRunning \in BOOLEAN
    /\ answer \in {"None", "Registered", "Refused"}
    /\ gate \in {"None", "Awaited", "Background", "Acknowledged", "Confirmed",
                 "GaveUp"}
    /\ reportedEnd \in BOOLEAN

\* RecordTerminalIntent was taken: the session's threads start with the
\* terminal's Intent record in the store.
Init ==
    /\ SR!Init
    /\ kind \in {"Interactive", "Piped"}
    /\ rec = "Starting"
    /\ registered = FALSE
    /\ runtime = "Running"
    /\ reports = <<>>
    /\ reportedRunning = FALSE
    /\ answer = "None"
    /\ gate = "None"
    /\ reportedEnd = FALSE

\* ---- The session's side -----------------------------------------------

\* The session's loop is one thread: while it waits for its release intent
\* to be durable (ReleaseGate::record), it takes no step at all. A piped
\* session's machine starts admitted (Machine::new_piped): it takes no
\* step before AdmitPiped.
Unblocked ==
    /\ gate # "Awaited"
    /\ kind = "Interactive" \/ admission # "Pending"

\* The identity thread read the guest leader (spec 3.4 acquisition steps
\* 3-4) and asks for the Running record.
ReportRunning ==
    /\ kind = "Interactive"
    /\ ~reportedRunning
    /\ reportedRunning' = TRUE
    /\ reports' = Append(reports, "Running")
    /\ UNCHANGED <<srVars, kind, rec, registered, runtime, answer, gate,
                   reportedEnd>>

\* Admitted only on the coordinator's yes (spec 3.4 acquisition step 5).
AdmitInteractive ==
    /\ Unblocked
    /\ kind = "Interactive"
    /\ answer = "Registered"
    /\ SR!AdmitInteractive
    /\ UNCHANGED hcVars

\* No yes (a refusal, no answer within the bounded wait, or no identity):
\* the guest leader is told not to run the command.
AdmissionRefused ==
    /\ Unblocked
    /\ kind = "Interactive"
    /\ answer # "Registered"
    /\ SR!AdmissionRefused
    /\ UNCHANGED hcVars

\* A piped session has no Running record (schemas.md: Running records a
\* PTY), so spec 3.4 acquisition steps 4-5 do not hold it: its command
\* runs once its exec client is committed, its machine starts admitted,
\* and the coordinator takes RegisterSession (which writes nothing) in the
\* loop turn that started it, before it hears anything else.
AdmitPiped ==
    /\ gate # "Awaited"
    /\ kind = "Piped"
    /\ rec = "Starting"
    /\ runtime = "Running"
    /\ SR!AdmitPiped
    /\ rec' = "Registered"
    /\ registered' = TRUE
    /\ UNCHANGED <<kind, runtime, reports, reportedRunning, answer, gate,
                   reportedEnd>>

\* Release step 1: the machine records release intent and says whether a
\* signal may follow (Command::RecordReleaseIntent { awaited }, its
\* confirmation Awaited): the gate then waits for the durable record, or
\* only asks for it. (A guest leader
\* still waiting for its admission is told first, a CAN byte on the
\* terminal: that is the refused admission, spec 3.4 "Failure before the
\* running state never admits the terminal", not a release signal.)
BeginRelease ==
    /\ Unblocked
    /\ gate = "None"
    /\ SR!BeginRelease
    /\ reports' = Append(reports, "Releasing")
    /\ gate' = IF confirmation' = "Awaited" THEN "Awaited" ELSE "Background"
    /\ UNCHANGED <<kind, rec, registered, runtime, reportedRunning, answer,
                   reportedEnd>>

\* The gate's answer is the machine's confirmation input (SessionRelease's
\* names): the coordinator acknowledged the durable intent ...
ReleaseIntentConfirmed ==
    /\ gate = "Acknowledged"
    /\ SR!ReleaseIntentConfirmed
    /\ gate' = "Confirmed"
    /\ UNCHANGED <<kind, rec, registered, runtime, reports, reportedRunning,
                   answer, reportedEnd>>

\* ... or it did not: the loop dropped the answer (a step that failed; the
\* loop then returns, and its queue with every answer in it goes), or none
\* came within the gate's backstop (RECORD_BACKSTOP, for a coordinator that
\* is stuck). The
\* Releasing report may still be queued; the loop records the intent when
\* it takes it. Time is not modeled, so the model lets the gate give up
\* whenever it waits.
ReleaseIntentUnconfirmed ==
    /\ gate = "Awaited"
    /\ SR!ReleaseIntentUnconfirmed
    /\ gate' = "GaveUp"
    /\ UNCHANGED <<kind, rec, registered, runtime, reports, reportedRunning,
                   answer, reportedEnd>>

\* Every other step of the session's order, as SessionRelease.tla has it.
SessionStep ==
    /\ Unblocked
    /\ \/ SR!RouteToSandbox
       \/ SR!RouteToPrompt
       \/ SR!RouteToHostProcess
       \/ SR!ClientCloses
       \/ SR!ClientConnectionLost
       \/ SR!OutputEnds
       \/ SR!OutputLost
       \/ SR!ExecClientExits
       \/ SR!ExecClientSignalled
       \/ SR!ExecClientLost
       \/ SR!ObservedLeaderMatches
       \/ SR!ObservedEmpty
       \/ SR!ObservedGroupRemains
       \/ SR!ObservedMismatch
       \/ SR!TimerExpires
       \/ SR!SignalGroup
       \/ SR!WithholdUnconfirmed
       \/ SR!WithholdSignal
       \/ SR!EndGrace
       \/ SR!CutGraceShort
       \/ SR!TerminateExecClient
       \/ SR!ReapExecClient
       \/ SR!FinishDrain
       \/ SR!RecordClean
       \/ SR!RetainReleaseIntent
    /\ UNCHANGED hcVars

\* The session's loop ended (exec client reaped, output closed) and says
\* how its release ended.
ReportEnded ==
    /\ phase \in Finished
    /\ ~reportedEnd
    /\ reportedEnd' = TRUE
    /\ reports' = Append(reports, "Ended")
    /\ UNCHANGED <<srVars, kind, rec, registered, runtime, reportedRunning,
                   answer, gate>>

\* ---- The coordinator's side: its loop takes the oldest report ----------

\* on_session_running: RegisterSession's guards for this session.
RegisterSession ==
    /\ reports # <<>>
    /\ Head(reports) = "Running"
    /\ rec = "Starting"
    /\ runtime = "Running"
    /\ rec' = "Registered"
    /\ registered' = TRUE
    /\ answer' = "Registered"
    /\ reports' = Tail(reports)
    /\ UNCHANGED <<srVars, kind, runtime, reportedRunning, gate, reportedEnd>>

\* The record is not made running: the session is no longer starting (its
\* release or the runtime's end came first), the runtime is gone, there
\* is no Intent row to promote, or the crash-point build's fault
\* `running-record-refused` says so.
RefuseRegistration ==
    /\ reports # <<>>
    /\ Head(reports) = "Running"
    /\ answer' = "Refused"
    /\ reports' = Tail(reports)
    /\ UNCHANGED <<srVars, kind, rec, registered, runtime, reportedRunning,
                   gate, reportedEnd>>

\* The record's release intent (Lazaret.tla CloseSession from Registered,
\* AbortSessionStart from Starting; nothing when it is recorded already).
Closed(r) == IF r \in {"Starting", "Registered"} THEN "Closing" ELSE r

\* on_session_releasing: the intent is durable, then the gate is answered.
RecordSessionReleaseIntent ==
    /\ reports # <<>>
    /\ Head(reports) = "Releasing"
    /\ rec' = Closed(rec)
    /\ gate' = IF gate = "Awaited" THEN "Acknowledged" ELSE gate
    /\ reports' = Tail(reports)
    /\ UNCHANGED <<srVars, kind, registered, runtime, reportedRunning, answer,
                   reportedEnd>>

\* on_session_ended: FinishSessionRelease for a clean release, otherwise
\* RetainSessionRelease. Its Releasing report came first, so the record
\* is Closing (the product's on_session_ended also closes a record that is
\* not, for a session whose start failed: no session order runs then).
FinishSessionRelease ==
    /\ reports # <<>>
    /\ Head(reports) = "Ended"
    /\ phase = "Clean"
    /\ rec = "Closing"
    /\ rec' = "Clean"
    /\ reports' = Tail(reports)
    /\ UNCHANGED <<srVars, kind, registered, runtime, reportedRunning, answer,
                   gate, reportedEnd>>

RetainSessionRelease ==
    /\ reports # <<>>
    /\ Head(reports) = "Ended"
    /\ phase = "Retained"
    /\ rec = "Closing"
    /\ rec' = "Retained"
    /\ reports' = Tail(reports)
    /\ UNCHANGED <<srVars, kind, registered, runtime, reportedRunning, answer,
                   gate, reportedEnd>>

\* The Runtime Supervisor or runsc ended (Lazaret.tla's runtime loss
\* actions); the session sees it later, as its exec client's end. The
\* coordinator hears it between two loop turns, so never between a piped
\* session's start and its registration.
RuntimeEnds ==
    /\ runtime = "Running"
    /\ kind = "Interactive" \/ admission # "Pending"
    /\ runtime' = "Ended"
    /\ UNCHANGED <<srVars, kind, rec, registered, reports, reportedRunning,
                   answer, gate, reportedEnd>>

\* on_runtime_lost: every starting or registered session's release intent.
CloseOnRuntimeLoss ==
    /\ runtime = "Ended"
    /\ runtime' = "Heard"
    /\ rec' = Closed(rec)
    /\ UNCHANGED <<srVars, kind, registered, reports, reportedRunning, answer,
                   gate, reportedEnd>>

\* Both sides are done.
Done ==
    /\ rec \in Finished
    /\ reports = <<>>
    /\ UNCHANGED vars

Next ==
    \/ ReportRunning
    \/ AdmitInteractive
    \/ AdmissionRefused
    \/ AdmitPiped
    \/ BeginRelease
    \/ ReleaseIntentConfirmed
    \/ ReleaseIntentUnconfirmed
    \/ SessionStep
    \/ ReportEnded
    \/ RegisterSession
    \/ RefuseRegistration
    \/ RecordSessionReleaseIntent
    \/ FinishSessionRelease
    \/ RetainSessionRelease
    \/ RuntimeEnds
    \/ CloseOnRuntimeLoss
    \/ Done

\* Fairness: SessionRelease.tla's (its reactions, observations, timers and
\* our kill), plus a coordinator loop that takes every report and a session
\* that reports its end; and an admission that is answered one way or the
\* other (the identity thread's wait is bounded, RECORD_WAIT).
Reaction ==
    \/ BeginRelease
    \/ /\ Unblocked
       /\ \/ SR!SignalGroup
          \/ SR!WithholdUnconfirmed
          \/ SR!WithholdSignal
          \/ SR!EndGrace
          \/ SR!CutGraceShort
          \/ SR!TerminateExecClient
          \/ SR!ReapExecClient
          \/ SR!FinishDrain
          \/ SR!RecordClean
          \/ SR!RetainReleaseIntent
       /\ UNCHANGED hcVars
Coordinator ==
    \/ RegisterSession
    \/ RefuseRegistration
    \/ RecordSessionReleaseIntent
    \/ FinishSessionRelease
    \/ RetainSessionRelease
    \/ CloseOnRuntimeLoss

Spec ==
    /\ Init
    /\ [][Next]_vars
    /\ WF_vars(Reaction)
    /\ WF_vars(Unblocked /\ SR!Observe /\ UNCHANGED hcVars)
    /\ WF_vars(Unblocked /\ SR!TimerExpires /\ UNCHANGED hcVars)
    /\ WF_vars(Unblocked /\ SR!KilledExecClientEnds /\ UNCHANGED hcVars)
    /\ WF_vars(Coordinator)
    /\ WF_vars(ReportEnded)
    /\ WF_vars(ReleaseIntentConfirmed)
    /\ WF_vars(AdmitInteractive)
    /\ WF_vars(AdmissionRefused)
    /\ WF_vars(AdmitPiped)

\* ---- Properties: the ties between the two sides -------------------------

\* Spec 3.4 acquisition steps 4-5: the command runs, and terminal events
\* are taken, only once the Domain Store recorded the terminal running (an
\* interactive one: a piped session has no Running record, AdmitPiped).
Inv_Spec_AdmittedOnlyWhenRecordedRunning ==
    (kind = "Interactive" /\ admission = "Admitted") => registered

\* Spec 3.4 release step 1 before step 2: no release signal reaches the
\* guest group, and our kill does not reach the exec client, before the
\* terminal's release intent is durable in the coordinator's record. The
\* one exception is a release whose intent the coordinator did not
\* confirm: it sends the guest group nothing, and step 3 collects the
\* exec client, a host process the record names, before the intent may be
\* durable (it is retained for Domain teardown).
Inv_Spec_SignalsFollowDurableIntent ==
    (signalled # "None" \/ (terminatedByUs /\ confirmation # "Unconfirmed"))
        => rec \in {"Closing"} \cup Finished

\* Spec 3.4 release step 3: the record is clean only when the session's
\* release found everything absent; a retained release stays retained.
Inv_Spec_RecordedOutcomeIsTheRelease ==
    /\ rec = "Clean" => phase = "Clean"
    /\ rec = "Retained" => phase = "Retained"

\* The record moves as Lazaret.tla moves sess[s]: RegisterSession from
\* Starting, CloseSession from Registered, AbortSessionStart from
\* Starting, FinishSessionRelease and RetainSessionRelease from Closing;
\* never back.
Live_Spec_RecordMovesAsLazaret ==
    [][rec' # rec =>
        \/ rec = "Starting" /\ rec' \in {"Registered", "Closing"}
        \/ rec = "Registered" /\ rec' = "Closing"
        \/ rec = "Closing" /\ rec' \in Finished]_vars

\* Every release the session starts is finished in the record (FR-15: the
\* slot is freed, clean or retained for Domain teardown).
Live_Spec_ReleaseIsRecorded ==
    intent ~> rec \in Finished

\* A terminal does not stay starting: it is admitted and recorded running,
\* or released (spec 3.4 "Failure before the running state never admits
\* the terminal").
Live_Spec_StartEnds ==
    rec = "Starting" ~> rec # "Starting"
====
