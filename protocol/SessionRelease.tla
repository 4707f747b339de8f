---- MODULE SessionRelease ----
\* One Session Terminal from its admission (spec 3.4 "Session Terminals",
\* acquisition step 5, FR-15): the guest leader waits until the Domain
\* Store records the terminal running; then what the Host Coordinator does
\* with a running terminal, and the physical release that session close,
\* client connection loss, PTY loss, exec-client loss or a refused
\* admission starts. Lazaret.tla holds the terminal's durable
\* lifecycle across coordinators (RecordTerminalIntent, RegisterSession,
\* CloseSession, FinishSessionRelease, RetainSessionRelease); this model is
\* the per-session order below CloseSession: release intent, the observed
\* SIGHUP / SIGTERM / SIGKILL ladder with bounded graces, collecting the
\* exec client, the close-handshake drain, the one SessionExit, and the
\* final observation that decides Clean or retained release intent.
\*
\* Actions are of two kinds (SessionRelease-notes.md "Inputs and
\* reactions"): inputs, which the world performs (client events, PTY end,
\* exec-client completion, observations of the guest group, timer expiry,
\* route changes of the Lazaret model), and reactions, which the Host
\* Coordinator performs when they are enabled. The product
\* (runtime/src/terminal/machine.rs) takes one input step per event and
\* then every enabled reaction, first in Next order, until none is enabled.
EXTENDS Naturals

VARIABLES phase, stage, form, route, connected, closeRequested, output,
          exec, reaped, terminatedByUs, reason, refused, seen, signalled,
          timer, expired, exits, intent, retained, admission, confirmation
vars == <<phase, stage, form, route, connected, closeRequested, output,
          exec, reaped, terminatedByUs, reason, refused, seen, signalled,
          timer, expired, exits, intent, retained, admission, confirmation>>

Phases == {"Admitting", "Running", "Observing", "Grace", "Collecting",
           "AwaitExec", "Draining", "Closing", "FinalObserve", "Clean",
           "Retained"}
Stages == {"Hangup", "Terminate", "Kill"}
Routes == {"None", "Sandbox", "Prompt", "HostProcess"}
Observations == {"LeaderMatches", "Empty", "GroupRemains", "Mismatch"}

\* PTY bytes are read and forwarded to the client in this state only (spec
\* 3.4: only on the sandbox route, and during the close-handshake drain).
Forwarding ==
    /\ (phase = "Running" /\ route = "Sandbox") \/ phase = "Draining"
    /\ connected
    /\ output = "Open"

\* The exec client returned the guest's own status: runsc exec reports the
\* leader's exit (a guest killed by signal N as 128+N), so the leader has
\* exited.
LeaderExited == exec = "Exited"

\* The exec client ended without saying how the leader fared: it vanished,
\* or a signal Lazaret did not send killed it. The leader may still run.
ExecClientGone == exec \in {"Lost", "Signalled"}

\* The close handshake (spec 3.4 "Normal guest completion"): a connection
\* that closed, whose guest completed, or whose session was not admitted
\* (the guest leader says why before it exits) waits for the PTY's last
\* bytes.
DrainHandshake ==
    /\ connected
    /\ reason \in {"ClientClose", "GuestCompleted", "NotAdmitted"}
    /\ output = "Open"

\* A piped session whose command completed by itself is not observed: its
\* group is Domain teardown's (docs/terminals.md).
LeftUnobserved ==
    /\ form = "Piped"
    /\ reason = "GuestCompleted"
    /\ refused = "None"

TypeOK ==
    /\ phase \in Phases
    /\ stage \in Stages
    /\ form \in {"Interactive", "Piped"}
    /\ route \in Routes
    /\ connected \in BOOLEAN
    /\ closeRequested \in BOOLEAN
    /\ output \in {"Open", "Eof", "Lost", "Closed"}
    /\ exec \in {"Running", "Exited", "Signalled", "Lost"}
    /\ reaped \in BOOLEAN
    /\ terminatedByUs \in BOOLEAN
    /\ reason \in {"None", "ClientClose", "ClientLost", "OutputLost",
                   "ExecClientLost", "GuestCompleted", "NotAdmitted"}
    /\ refused \in {"None", "LeaderMismatch", "GroupRemains", "Unconfirmed"}
    /\ seen \in {"None", "Pending", "LeaderMatches", "Empty", "GroupRemains",
                 "Mismatch"}
    /\ signalled \in {"None", "Hangup", "Terminate", "Kill"}
    /\ timer \in {"None", "Refusal", "Hangup", "Terminate", "Drain"}
    /\ expired \in BOOLEAN
    /\ exits \in 0..2
    /\ intent \in BOOLEAN
    /\ retained \in {"None", "LeaderMismatch", "GroupRemains", "NotObserved",
                     "ExecClientLost", "Unconfirmed"}
    /\ admission \in {"Pending", "Admitted", "Refused"}
    /\ confirmation \in {"None", "Awaited", "Confirmed", "Unconfirmed"}

Init ==
    /\ phase = "Admitting"
    /\ stage = "Hangup"
    /\ form = "Interactive"
    /\ route = "None"
    /\ connected = TRUE
    /\ closeRequested = FALSE
    /\ output = "Open"
    /\ exec = "Running"
    /\ reaped = FALSE
    /\ terminatedByUs = FALSE
    /\ reason = "None"
    /\ refused = "None"
    /\ seen = "None"
    /\ signalled = "None"
    /\ timer = "None"
    /\ expired = FALSE
    /\ exits = 0
    /\ intent = FALSE
    /\ retained = "None"
    /\ admission = "Pending"
    /\ confirmation = "None"

\* ---- Admission (spec 3.4 acquisition steps 3-5) -------------------------

\* The terminal starts with its client connected and its guest leader
\* (Lazaret's `lazaret-guest lead`) holding the command, the terminal
\* silenced, until it is told. Admission is an input: the Domain Store
\* recorded the terminal running (Lazaret.tla RegisterSession), or could
\* not. A client that left first is never admitted: its command never runs.

\* Recorded running: the guest leader is told to run the command, and
\* terminal events are accepted from here on, on the sandbox route.
AdmitInteractive ==
    /\ phase = "Admitting"
    /\ admission = "Pending"
    /\ connected
    /\ phase' = "Running"
    /\ route' = "Sandbox"
    /\ admission' = "Admitted"
    /\ UNCHANGED <<stage, form, connected, closeRequested, output, exec,
                   reaped, terminatedByUs, reason, refused, seen, signalled,
                   timer, expired, exits, intent, retained, confirmation>>

\* A piped (non-interactive) session, admitted when its exec client runs:
\* the same release, output through pipes, and a completed command left to
\* Domain teardown.
AdmitPiped ==
    /\ phase = "Admitting"
    /\ admission = "Pending"
    /\ connected
    /\ phase' = "Running"
    /\ form' = "Piped"
    /\ route' = "Sandbox"
    /\ admission' = "Admitted"
    /\ UNCHANGED <<stage, connected, closeRequested, output, exec, reaped,
                   terminatedByUs, reason, refused, seen, signalled, timer,
                   expired, exits, intent, retained, confirmation>>

\* The Running record could not be made (no Intent row to promote, the
\* session no longer starting, the coordinator gone or silent): the guest
\* leader is told not to run the command, says why and exits; its exit
\* (or the bounded wait for it) starts the release.
AdmissionRefused ==
    /\ phase = "Admitting"
    /\ admission = "Pending"
    /\ admission' = "Refused"
    /\ timer' = "Refusal"
    /\ UNCHANGED <<phase, stage, form, route, connected, closeRequested,
                   output, exec, reaped, terminatedByUs, reason, refused,
                   seen, signalled, expired, exits, intent, retained, confirmation>>

\* ---- Inputs -----------------------------------------------------------

\* The Lazaret model routes the terminal (RouteToPrompt, StartHostProcess,
\* DeliverResult and their kin); only a running terminal is routed.
RouteToSandbox ==
    /\ phase = "Running"
    /\ route # "Sandbox"
    /\ route' = "Sandbox"
    /\ UNCHANGED <<phase, stage, form, connected, closeRequested, output,
                   exec, reaped, terminatedByUs, reason, refused, seen,
                   signalled, timer, expired, exits, intent, retained, admission, confirmation>>

RouteToPrompt ==
    /\ phase = "Running"
    /\ route # "Prompt"
    /\ route' = "Prompt"
    /\ UNCHANGED <<phase, stage, form, connected, closeRequested, output,
                   exec, reaped, terminatedByUs, reason, refused, seen,
                   signalled, timer, expired, exits, intent, retained, admission, confirmation>>

RouteToHostProcess ==
    /\ phase = "Running"
    /\ route # "HostProcess"
    /\ route' = "HostProcess"
    /\ UNCHANGED <<phase, stage, form, connected, closeRequested, output,
                   exec, reaped, terminatedByUs, reason, refused, seen,
                   signalled, timer, expired, exits, intent, retained, admission, confirmation>>

\* The client's Close event: accepted on any route of a running terminal
\* (Lazaret.tla CloseSession has no route guard; a running terminal's
\* route is never None, Inv_Spec_ReleaseRemovesRouting's converse).
ClientCloses ==
    /\ phase = "Running"
    /\ connected
    /\ ~closeRequested
    /\ closeRequested' = TRUE
    /\ UNCHANGED <<phase, stage, form, route, connected, output, exec,
                   reaped, terminatedByUs, reason, refused, seen, signalled,
                   timer, expired, exits, intent, retained, admission, confirmation>>

ClientConnectionLost ==
    /\ connected
    /\ connected' = FALSE
    /\ UNCHANGED <<phase, stage, form, route, closeRequested, output, exec,
                   reaped, terminatedByUs, reason, refused, seen, signalled,
                   timer, expired, exits, intent, retained, admission, confirmation>>

\* The PTY master reported EOF (or both pipes of a piped session did).
OutputEnds ==
    /\ output = "Open"
    /\ output' = "Eof"
    /\ UNCHANGED <<phase, stage, form, route, connected, closeRequested, exec,
                   reaped, terminatedByUs, reason, refused, seen, signalled,
                   timer, expired, exits, intent, retained, admission, confirmation>>

OutputLost ==
    /\ output \in {"Open", "Eof"}
    /\ output' = "Lost"
    /\ UNCHANGED <<phase, stage, form, route, connected, closeRequested, exec,
                   reaped, terminatedByUs, reason, refused, seen, signalled,
                   timer, expired, exits, intent, retained, admission, confirmation>>

\* The exec client returned with an exit status ...
ExecClientExits ==
    /\ exec = "Running"
    /\ exec' = "Exited"
    /\ UNCHANGED <<phase, stage, form, route, connected, closeRequested,
                   output, reaped, terminatedByUs, reason, refused, seen,
                   signalled, timer, expired, exits, intent, retained, admission, confirmation>>

\* ... or ended by a signal (ours, after TerminateExecClient, or another's).
ExecClientSignalled ==
    /\ exec = "Running"
    /\ exec' = "Signalled"
    /\ UNCHANGED <<phase, stage, form, route, connected, closeRequested,
                   output, reaped, terminatedByUs, reason, refused, seen,
                   signalled, timer, expired, exits, intent, retained, admission, confirmation>>

\* The exec client vanished without a usable status.
ExecClientLost ==
    /\ exec = "Running"
    /\ exec' = "Lost"
    /\ UNCHANGED <<phase, stage, form, route, connected, closeRequested,
                   output, reaped, terminatedByUs, reason, refused, seen,
                   signalled, timer, expired, exits, intent, retained, admission, confirmation>>

\* What an observation of the recorded guest leader and group found.
ObservedLeaderMatches ==
    /\ seen = "Pending"
    /\ seen' = "LeaderMatches"
    /\ UNCHANGED <<phase, stage, form, route, connected, closeRequested,
                   output, exec, reaped, terminatedByUs, reason, refused,
                   signalled, timer, expired, exits, intent, retained, admission, confirmation>>

ObservedEmpty ==
    /\ seen = "Pending"
    /\ seen' = "Empty"
    /\ UNCHANGED <<phase, stage, form, route, connected, closeRequested,
                   output, exec, reaped, terminatedByUs, reason, refused,
                   signalled, timer, expired, exits, intent, retained, admission, confirmation>>

ObservedGroupRemains ==
    /\ seen = "Pending"
    /\ seen' = "GroupRemains"
    /\ UNCHANGED <<phase, stage, form, route, connected, closeRequested,
                   output, exec, reaped, terminatedByUs, reason, refused,
                   signalled, timer, expired, exits, intent, retained, admission, confirmation>>

ObservedMismatch ==
    /\ seen = "Pending"
    /\ seen' = "Mismatch"
    /\ UNCHANGED <<phase, stage, form, route, connected, closeRequested,
                   output, exec, reaped, terminatedByUs, reason, refused,
                   signalled, timer, expired, exits, intent, retained, admission, confirmation>>

TimerExpires ==
    /\ timer # "None"
    /\ ~expired
    /\ expired' = TRUE
    /\ UNCHANGED <<phase, stage, form, route, connected, closeRequested,
                   output, exec, reaped, terminatedByUs, reason, refused,
                   seen, signalled, timer, exits, intent, retained, admission, confirmation>>

\* The answer to a release intent the session waits for (the release will
\* observe the leader, so a signal may follow): the Domain Store recorded
\* it (Lazaret.tla CloseSession or AbortSessionStart), or the coordinator
\* did not confirm it (its loop dropped the answer, or none came within the
\* gate's backstop).
ReleaseIntentConfirmed ==
    /\ confirmation = "Awaited"
    /\ confirmation' = "Confirmed"
    /\ UNCHANGED <<phase, stage, form, route, connected, closeRequested,
                   output, exec, reaped, terminatedByUs, reason, refused,
                   seen, signalled, timer, expired, exits, intent, retained,
                   admission>>

ReleaseIntentUnconfirmed ==
    /\ confirmation = "Awaited"
    /\ confirmation' = "Unconfirmed"
    /\ UNCHANGED <<phase, stage, form, route, connected, closeRequested,
                   output, exec, reaped, terminatedByUs, reason, refused,
                   seen, signalled, timer, expired, exits, intent, retained,
                   admission>>

\* ---- Reactions: the release order (spec 3.4, steps 1-3) ----------------

\* Step 1: the modeled session close removes routing and records release
\* intent, keeping every identity; terminal events are refused from here.
\* A leader that may still run is observed before any signal; an exec
\* client that returned the guest's status says its leader has exited. A
\* terminal still admitting is released the same way when its admission
\* is refused (once its guest leader exited, or the wait for that ran
\* out) or its client, output or exec client goes first; a guest leader
\* still waiting is told not to run the command.
BeginRelease ==
    /\ phase \in {"Admitting", "Running"}
    /\ \/ closeRequested
       \/ admission = "Refused" /\ expired
       \/ ~connected
       \/ output = "Lost"
       \/ exec # "Running"
    /\ phase' = IF LeaderExited THEN "Collecting" ELSE "Observing"
    /\ seen' = IF LeaderExited THEN "None" ELSE "Pending"
    /\ reason' = IF closeRequested THEN "ClientClose"
                 ELSE IF ~connected THEN "ClientLost"
                 ELSE IF output = "Lost" THEN "OutputLost"
                 ELSE IF ExecClientGone THEN "ExecClientLost"
                 ELSE IF admission = "Refused" THEN "NotAdmitted"
                 ELSE "GuestCompleted"
    /\ route' = "None"
    /\ intent' = TRUE
    /\ confirmation' = IF LeaderExited THEN "None" ELSE "Awaited"
    /\ timer' = "None"
    /\ expired' = FALSE
    /\ UNCHANGED <<stage, form, connected, closeRequested, output, exec,
                   reaped, terminatedByUs, refused, signalled, exits,
                   retained, admission>>

\* Step 2: the leader still matches; send this stage's signal, then wait
\* the stage's grace (SIGKILL has none).
SignalGroup ==
    /\ phase = "Observing"
    /\ seen = "LeaderMatches"
    /\ confirmation = "Confirmed"
    /\ signalled' = IF stage = "Hangup" THEN "Hangup"
                    ELSE IF stage = "Terminate" THEN "Terminate"
                    ELSE "Kill"
    /\ phase' = IF stage = "Kill" THEN "Collecting" ELSE "Grace"
    /\ timer' = IF stage = "Hangup" THEN "Hangup"
                ELSE IF stage = "Terminate" THEN "Terminate"
                ELSE "None"
    /\ seen' = "None"
    /\ UNCHANGED <<stage, form, route, connected, closeRequested, output,
                   exec, reaped, terminatedByUs, reason, refused, expired,
                   exits, intent, retained, admission, confirmation>>

\* Step 1 is not durable: a signal is due (the leader matches) but the
\* coordinator did not confirm the release intent, so none is sent; the
\* exec client is collected and the release intent is retained for Domain
\* teardown, which contains the group with the runtime.
WithholdUnconfirmed ==
    /\ phase = "Observing"
    /\ seen = "LeaderMatches"
    /\ confirmation = "Unconfirmed"
    /\ refused' = "Unconfirmed"
    /\ phase' = "Collecting"
    /\ seen' = "None"
    /\ UNCHANGED <<stage, form, route, connected, closeRequested, output,
                   exec, reaped, terminatedByUs, reason, signalled, timer,
                   expired, exits, intent, retained, admission, confirmation>>

\* Step 2 without a signal: a mismatched leader refuses the numeric group
\* signal; an absent leader with an empty group needs none; a group that
\* outlived its leader is left in release intent for Domain teardown.
WithholdSignal ==
    /\ phase = "Observing"
    /\ seen \in {"Empty", "GroupRemains", "Mismatch"}
    /\ refused' = IF seen = "Mismatch" THEN "LeaderMismatch"
                  ELSE IF seen = "GroupRemains" THEN "GroupRemains"
                  ELSE refused
    /\ phase' = "Collecting"
    /\ seen' = "None"
    /\ UNCHANGED <<stage, form, route, connected, closeRequested, output,
                   exec, reaped, terminatedByUs, reason, signalled, timer,
                   expired, exits, intent, retained, admission, confirmation>>

\* The grace ran out: observe again before the next, stronger signal.
EndGrace ==
    /\ phase = "Grace"
    /\ expired
    /\ phase' = "Observing"
    /\ stage' = IF stage = "Hangup" THEN "Terminate" ELSE "Kill"
    /\ seen' = "Pending"
    /\ timer' = "None"
    /\ expired' = FALSE
    /\ UNCHANGED <<form, route, connected, closeRequested, output, exec,
                   reaped, terminatedByUs, reason, refused, signalled, exits,
                   intent, retained, admission, confirmation>>

\* The exec client returned the guest's status during a grace: the leader
\* has exited, so the ladder stops and the grace timer is cancelled.
CutGraceShort ==
    /\ phase = "Grace"
    /\ LeaderExited
    /\ phase' = "Collecting"
    /\ timer' = "None"
    /\ expired' = FALSE
    /\ UNCHANGED <<stage, form, route, connected, closeRequested, output,
                   exec, reaped, terminatedByUs, reason, refused, seen,
                   signalled, exits, intent, retained, admission, confirmation>>

\* Step 3: terminate the exact exec client if it still runs ...
TerminateExecClient ==
    /\ phase = "Collecting"
    /\ exec = "Running"
    /\ phase' = "AwaitExec"
    /\ terminatedByUs' = TRUE
    /\ UNCHANGED <<stage, form, route, connected, closeRequested, output,
                   exec, reaped, reason, refused, seen, signalled, timer,
                   expired, exits, intent, retained, admission, confirmation>>

\* ... and reap it; a closing connection then waits for the PTY's last
\* bytes until EOF or the drain deadline.
ReapExecClient ==
    /\ phase \in {"Collecting", "AwaitExec"}
    /\ exec # "Running"
    /\ reaped' = TRUE
    /\ phase' = IF DrainHandshake THEN "Draining" ELSE "Closing"
    /\ timer' = IF DrainHandshake THEN "Drain" ELSE "None"
    /\ UNCHANGED <<stage, form, route, connected, closeRequested, output,
                   exec, terminatedByUs, reason, refused, seen, signalled,
                   expired, exits, intent, retained, admission, confirmation>>

\* The drain is over (or there was none): at most one SessionExit after the
\* last forwarded byte on a connection that is still there, close the exact
\* PTY master (or the pipes), then observe once more -- unless a completed
\* piped command is left to Domain teardown.
FinishDrain ==
    /\ phase = "Closing" \/ (phase = "Draining" /\ (output # "Open" \/ ~connected \/ expired))
    /\ exits' = IF connected /\ reason # "ClientLost" THEN exits + 1 ELSE exits
    /\ output' = "Closed"
    /\ timer' = "None"
    /\ expired' = FALSE
    /\ phase' = IF LeftUnobserved THEN "Retained" ELSE "FinalObserve"
    /\ seen' = IF LeftUnobserved THEN "None" ELSE "Pending"
    /\ retained' = IF LeftUnobserved THEN "NotObserved" ELSE retained
    /\ UNCHANGED <<stage, form, route, connected, closeRequested, exec,
                   reaped, terminatedByUs, reason, refused, signalled, intent,
                   admission, confirmation>>

\* The terminal is clean only when the guest group, the exec client and the
\* PTY are all absent and no earlier observation refused a signal. An exec
\* client that vanished without a status is not proved absent (FR-7).
RecordClean ==
    /\ phase = "FinalObserve"
    /\ seen = "Empty"
    /\ refused = "None"
    /\ exec # "Lost"
    /\ phase' = "Clean"
    /\ UNCHANGED <<stage, form, route, connected, closeRequested, output,
                   exec, reaped, terminatedByUs, reason, refused, seen,
                   signalled, timer, expired, exits, intent, retained, admission, confirmation>>

\* Otherwise the release intent is retained for Domain teardown and
\* bootstrap recovery (Lazaret.tla RetainSessionRelease).
RetainReleaseIntent ==
    /\ phase = "FinalObserve"
    /\ seen \in Observations
    /\ seen # "Empty" \/ refused # "None" \/ exec = "Lost"
    /\ phase' = "Retained"
    /\ retained' = IF refused = "LeaderMismatch" THEN "LeaderMismatch"
                   ELSE IF refused = "GroupRemains" THEN "GroupRemains"
                   ELSE IF refused = "Unconfirmed" THEN "Unconfirmed"
                   ELSE IF seen = "Mismatch" THEN "LeaderMismatch"
                   ELSE IF seen = "Empty" THEN "ExecClientLost"
                   ELSE "GroupRemains"
    /\ UNCHANGED <<stage, form, route, connected, closeRequested, output,
                   exec, reaped, terminatedByUs, reason, refused, seen,
                   signalled, timer, expired, exits, intent, admission, confirmation>>

\* The release is decided and nothing more can happen to this terminal.
Terminated ==
    /\ phase \in {"Clean", "Retained"}
    /\ ~connected
    /\ UNCHANGED vars

Next ==
    \/ AdmitInteractive
    \/ AdmitPiped
    \/ AdmissionRefused
    \/ RouteToSandbox
    \/ RouteToPrompt
    \/ RouteToHostProcess
    \/ ClientCloses
    \/ ClientConnectionLost
    \/ OutputEnds
    \/ OutputLost
    \/ ExecClientExits
    \/ ExecClientSignalled
    \/ ExecClientLost
    \/ ObservedLeaderMatches
    \/ ObservedEmpty
    \/ ObservedGroupRemains
    \/ ObservedMismatch
    \/ TimerExpires
    \/ ReleaseIntentConfirmed
    \/ ReleaseIntentUnconfirmed
    \/ BeginRelease
    \/ SignalGroup
    \/ WithholdUnconfirmed
    \/ WithholdSignal
    \/ EndGrace
    \/ CutGraceShort
    \/ TerminateExecClient
    \/ ReapExecClient
    \/ FinishDrain
    \/ RecordClean
    \/ RetainReleaseIntent
    \/ Terminated

\* Fairness (TLC only): every reaction is weakly fair; an outstanding
\* observation is answered, an awaited release intent is answered (the
\* gate's wait is bounded), an armed timer expires, and an exec client we
\* killed ends.
Observe ==
    \/ ObservedLeaderMatches
    \/ ObservedEmpty
    \/ ObservedGroupRemains
    \/ ObservedMismatch
KilledExecClientEnds ==
    /\ terminatedByUs
    /\ ExecClientSignalled
Confirm ==
    \/ ReleaseIntentConfirmed
    \/ ReleaseIntentUnconfirmed
Reaction ==
    \/ BeginRelease
    \/ SignalGroup
    \/ WithholdUnconfirmed
    \/ WithholdSignal
    \/ EndGrace
    \/ CutGraceShort
    \/ TerminateExecClient
    \/ ReapExecClient
    \/ FinishDrain
    \/ RecordClean
    \/ RetainReleaseIntent

Spec ==
    /\ Init
    /\ [][Next]_vars
    /\ WF_vars(Reaction)
    /\ WF_vars(Observe)
    /\ WF_vars(Confirm)
    /\ WF_vars(TimerExpires)
    /\ WF_vars(KilledExecClientEnds)

\* ---- Properties ----------------------------------------------------------

\* Step 1 before step 2: no signal before durable release intent, and a
\* terminal in release has no route (spec 3.4 release step 1).
Inv_Spec_SignalsFollowReleaseIntent ==
    signalled # "None" => intent

\* ... and the coordinator confirmed that intent durable: a release signal
\* is never sent on an intent the store may not hold.
Inv_Spec_SignalsFollowConfirmedIntent ==
    signalled # "None" => confirmation = "Confirmed"

\* A release withholds its signals for want of a confirmation only when the
\* coordinator did not confirm.
Inv_Spec_UnconfirmedOnlyWhenNotConfirmed ==
    refused = "Unconfirmed" => confirmation = "Unconfirmed"

Inv_Spec_ReleaseRemovesRouting ==
    phase \notin {"Admitting", "Running"} => (intent /\ route = "None")

\* Terminal events are accepted, and the command runs, only after the
\* Domain Store recorded the terminal running (spec 3.4 acquisition steps
\* 4-5): a routed or running terminal was admitted.
Inv_Spec_OnlyAnAdmittedTerminalRuns ==
    (phase = "Running" \/ route # "None") => admission = "Admitted"

\* Record Clean only after the guest group, exec client and PTY are absent
\* (spec 3.4 release step 3).
Inv_Spec_CleanOnlyWhenAbsent ==
    phase = "Clean" =>
        /\ seen = "Empty"
        /\ refused = "None"
        /\ reaped
        /\ exec \in {"Exited", "Signalled"}
        /\ output = "Closed"

\* A refused signal or a remaining group is never recorded clean.
Inv_Spec_RefusalRetainsIntent ==
    phase \in {"Clean", "Retained"} =>
        /\ (refused = "LeaderMismatch" => retained = "LeaderMismatch")
        /\ (refused = "GroupRemains" => retained = "GroupRemains")
        /\ (refused = "Unconfirmed" => retained = "Unconfirmed")

\* At most one SessionExit, after the last forwarded byte, never to a lost
\* connection (spec 3.4 "Normal guest completion").
Inv_Spec_AtMostOneSessionExit ==
    exits <= 1

Inv_Spec_ExitAfterLastByte ==
    exits > 0 => ~Forwarding

Inv_Spec_NoExitToLostConnection ==
    exits > 0 => reason # "ClientLost"

\* Expiry belongs to an armed timer: a grace or drain is never cut short
\* by an expiry left over from an earlier one.
Inv_Spec_OnlyAnArmedTimerExpires ==
    /\ expired => timer # "None"
    /\ timer = "Refusal" => (phase = "Admitting" /\ admission = "Refused")

\* The recorded release reason is what happened (spec 3.4: close, client
\* connection loss, PTY loss, exec-client loss or guest completion starts
\* the release; nothing else does).
Inv_Spec_ReleaseReasonHolds ==
    /\ reason = "ClientClose" => closeRequested
    /\ reason = "ClientLost" => ~connected
    /\ reason = "OutputLost" => output \in {"Lost", "Closed"}
    /\ reason = "ExecClientLost" => ExecClientGone
    /\ reason = "GuestCompleted" => LeaderExited
    /\ reason = "NotAdmitted" => admission = "Refused"

\* Release intent is retained for a reason the coordinator saw: a refused
\* signal, an observation that found the leader or group still there, or a
\* completed piped command left unobserved (never "just in case", which
\* would leave a clean terminal to bootstrap recovery).
Inv_Spec_RetainedForAReason ==
    phase = "Retained" =>
        \/ retained = "NotObserved"
        \/ refused # "None"
        \/ seen \in {"LeaderMatches", "GroupRemains", "Mismatch"}
        \/ (retained = "ExecClientLost" /\ exec = "Lost")

\* A terminal in release refuses terminal events (spec 3.4); Close is the
\* one this model sees.
Live_FR15_ReleaseRefusesClose ==
    [][(closeRequested' /\ ~closeRequested) => phase = "Running"]_vars

\* Each rung of the ladder is decided on an observation (spec 3.4 step 2:
\* signal only while the leader and group still match).
Live_Spec_LadderMovesOnAnObservation ==
    [][(phase = "Observing" /\ phase' # "Observing") => seen \in Observations]_vars

\* A grace is waited out, unless the exec client returned the guest's
\* status (its leader has exited, so there is nothing left to wait for).
Live_Spec_GraceIsWaited ==
    [][(phase = "Grace" /\ phase' # "Grace") => (expired \/ LeaderExited)]_vars

\* Step 3 terminates the exact exec client only while it still runs.
Live_Spec_TerminateOnlyALiveExecClient ==
    [][(terminatedByUs' /\ ~terminatedByUs) => exec = "Running"]_vars

\* A numeric group signal only right after an observation found the leader
\* matching (spec 3.4 step 2: "a leader mismatch refuses the numeric
\* process-group signal").
Live_Spec_SignalOnlyToMatchingLeader ==
    [][signalled' # signalled => (phase = "Observing" /\ seen = "LeaderMatches")]_vars

\* SIGHUP, then SIGTERM, then SIGKILL; never back, never skipping one.
Live_Spec_SignalLadder ==
    [][signalled' # signalled =>
        \/ (signalled = "None" /\ signalled' = "Hangup")
        \/ (signalled = "Hangup" /\ signalled' = "Terminate")
        \/ (signalled = "Terminate" /\ signalled' = "Kill")]_vars

\* A client that left is never admitted: its command never starts (spec
\* 3.4 acquisition step 5), and an admission, once answered, stands.
Live_Spec_AdmitOnlyAConnectedClient ==
    [][(admission' = "Admitted" /\ admission # "Admitted") => connected]_vars

Live_Spec_AdmissionIsFinal ==
    [][admission # "Pending" => admission' = admission]_vars

\* The release decision is final, and the release never returns to running.
Live_Spec_ReleaseIsFinal ==
    [][/\ (phase \in {"Clean", "Retained"} => phase' = phase)
       /\ (intent => intent')]_vars

\* The exec client is reaped before the PTY is closed (step 3's order).
Live_Spec_ReapBeforeClose ==
    [][(output' = "Closed" /\ output # "Closed") => reaped]_vars

\* Every release ends, clean or retained; a close request starts one.
Live_Spec_ReleaseEnds ==
    intent ~> (phase \in {"Clean", "Retained"})

Live_Spec_CloseStartsRelease ==
    closeRequested ~> intent
====
