---- MODULE Lazaret ----
\* The Lazaret application protocol (spec "Document authority"; issue 2 item 5).
\* State-table dialect: protocol/README.md.  Design notes, the action -> spec
\* table, requirement -> property table, fairness and TLC results:
\* protocol/Lazaret-notes.md.
\*
\* One Domain.  Coordinators are Host Coordinator process instances (one
\* coordinator ID per process lifetime; an instance never comes back after it
\* exits, fails closed or is lost).  Sessions are Client Session slots; a slot
\* is reused after its session is released.  Each session has at most one
\* escalation request in flight (see the notes for why that is sound).
EXTENDS Naturals

CONSTANTS
    Coordinators,       \* Host Coordinator instances (model values)
    Sessions,           \* Client Session slots (model values)
    MaxGen,             \* bound on Domain generations
    MaxUnackedChunks,   \* escalation result chunks HC retains unacknowledged (spec 3.8: 8)
    RequiredRoles       \* the roles a generation of this Domain acquires: all of Roles
                        \* in Lazaret.cfg (the spec, a routed Domain); all but GitRouting
                        \* in LazaretUnrouted.cfg (Lazaret-notes.md "Required roles")

VARIABLES
    hc,             \* per coordinator instance: its lifecycle
    lockHolder,     \* holder of the Domain flock
    recordIdentity, \* does the durable generation record match what bootstrap observes
    decision,       \* durable_decision of the current generation record
    gen,            \* current generation number in the Domain Store
    part,           \* durable participant state per role (schemas.md "Participant ownership")
    slot,           \* durable acquired-child process slot phase (schemas.md "Host process identity")
    rs,             \* physical Runtime Supervisor process
    runsc,          \* physical attached runsc client (and with it the Agent Sandbox)
    sess,           \* per session: protocol session phase
    sessGen,        \* per session: generation its client credential is bound to
    sessFp,         \* per session: configuration-fingerprint comparison at enrollment
    route,          \* per session: terminal route
    ptyFwd,         \* per session: HC reads the PTY master and admits terminal events
    esc,            \* per session: escalation request phase
    escMatch,       \* per session: auto-approval rule classification of the request
    escApproval,    \* per session: who approved the request
    escUnacked,     \* per session: result chunks sent and not yet acknowledged
    escCancel,      \* per session: a signed cancellation has arrived and is not yet applied
    runtimeEnded,   \* the generation's RS or attached runsc ended on its own while the HC
                    \* held the lease (observed through the lifetime channel and pidfds)
    termsLeft,      \* the generation records session terminals that are not clean although
                    \* their sessions are over (spec 3.4: a retained release, the sessions of
                    \* a lost HC); cleaned only after runtime absence
    actor           \* the lock holder acting for the Domain: set by each step it takes for
                    \* the Domain, "None" once the lock is released or lost; elections,
                    \* clients, the sandbox and process ends leave it (OR-1 actor identity)

vars == <<hc, lockHolder, recordIdentity, decision, gen, part, slot, rs, runsc,
          sess, sessGen, sessFp, route, ptyFwd,
          esc, escMatch, escApproval, escUnacked, escCancel, runtimeEnded, termsLeft, actor>>

\* The durable generation document (Domain Store, spec 3.6): only these are
\* written by store transactions.
durableVars == <<decision, gen, part, slot, termsLeft>>

-----------------------------------------------------------------------------
\* Definitions

Roles == {"PreparedLower", "StateAnchor", "GitRouting", "Network", "Helper",
          "Sandbox", "Publication"}

\* Acquired child edges that require staging (spec 3.3; schemas.md
\* HostProcessOwnershipSlot).  The direct existing-process edges (Network RS,
\* Helper RS, Sandbox HC) enter a snapshot already committed and need no slot.
\* The State Anchor has no daemon: its medium is kernel overlayfs, mounted by
\* the committed RS in its own mount namespace, so RS enters the anchor's
\* snapshot as a direct edge, as it does the network's (Lazaret-notes.md
\* "State Anchor medium").
ProcSlots == {"SandboxRuntimeSupervisor", "SandboxAttachedRunsc",
              "GitRoutingDaemon", "HelperConnectivityHelper"}

\* Roles whose snapshot is created without a child process (the first
\* non-empty snapshot is physical evidence: lease intent, the anchors'
\* mounts, namespace, socket).
SnapshotRoles == {"PreparedLower", "StateAnchor", "Network", "Publication"}

HoldingPhases == {"Bootstrapping", "Leading", "Serving"}
\* Leading: lock held and durable identity verified; Serving: it has started
\* its (one) generation.  An HC instance runs at most one generation and exits
\* after retiring it (the next CLI starts a new instance).
LeaderPhases == {"Leading", "Serving"}
LiveGeneration == {"Starting", "Published", "TearingDown", "Recovering"}
ReleasePhases == {"TearingDown", "Recovering"}
ActivePhases == {"LeaseHeld", "Prepared", "Committed"}
LiveSnapshot == {"Acquiring", "LeaseHeld", "Prepared", "Committed"}
RequestOpen == {"Accepted", "Prompting", "Approved", "Running"}
RuleMatches == {"Exact", "Inexact"}
FingerprintResults == {"Match", "Mismatch"}

\* The single serviceable state of each role (schemas.md "Participant ownership").
ActiveState(r) ==
    IF r = "PreparedLower" THEN "LeaseHeld"
    ELSE IF r = "StateAnchor" THEN "Prepared"
    ELSE IF r = "GitRouting" THEN "Prepared"
    ELSE "Committed"

IsActive(r) == part[r] = ActiveState(r)

\* A role satisfies every "active before" rule when it is active or when this
\* Domain's generations do not acquire it at all.  With RequiredRoles = Roles
\* (the specification) Ready is IsActive.
Ready(r) == r \notin RequiredRoles \/ IsActive(r)

\* The participant whose snapshot owns a process slot.
SlotRole(ps) ==
    IF ps = "SandboxRuntimeSupervisor" THEN "Sandbox"
    ELSE IF ps = "SandboxAttachedRunsc" THEN "Sandbox"
    ELSE IF ps = "GitRoutingDaemon" THEN "GitRouting"
    ELSE "Helper"

\* Acquisition order.  The Sandbox participant records its intent first and
\* holds the RS slot from the start; every other role is acquired under the
\* committed RS, one after the other in this order; attached runsc is staged
\* only when all of them are active; publication comes last.  The prepared
\* lower precedes the State Anchor (lease before mount, spec 3.6) and the
\* helper precedes the network (committed helper before readiness, spec 3.6).
AcquireRank(r) ==
    IF r = "PreparedLower" THEN 1
    ELSE IF r = "StateAnchor" THEN 2
    ELSE IF r = "GitRouting" THEN 3
    ELSE IF r = "Helper" THEN 4
    ELSE IF r = "Network" THEN 5
    ELSE IF r = "Sandbox" THEN 6
    ELSE 7

\* Release order: publication is withdrawn first, the prepared-lower lease is
\* released last (after the State Anchor mount is gone).
ReleaseRank(r) ==
    IF r = "Publication" THEN 1
    ELSE IF r = "Sandbox" THEN 2
    ELSE IF r = "Network" THEN 3
    ELSE IF r = "Helper" THEN 4
    ELSE IF r = "GitRouting" THEN 5
    ELSE IF r = "StateAnchor" THEN 6
    ELSE 7

\* Session phases whose Session Terminal is recorded in the Domain Store and
\* not yet clean (spec 3.4, schemas.md "Session terminal ownership"):
\* Starting is the terminal's Intent (acquisition steps 1-3), Registered its
\* Running record, Closing its ReleaseIntent.
TerminalRecorded == {"Starting", "Registered", "Closing"}

NoSessionsLeft == \A s \in Sessions : sess[s] \notin TerminalRecorded

\* What the Domain Store's terminal rows of the generation say, as one bit:
\* some terminal is not clean (a live session's, or one left over).  The
\* product reads it back after every step and replay compares it
\* (docs/durable-state.md "The model's durable variables").
TerminalsUnclean == termsLeft \/ \E s \in Sessions : sess[s] \in TerminalRecorded

-----------------------------------------------------------------------------
TypeOK ==
    /\ hc \in [Coordinators -> {"Idle", "Bootstrapping", "Leading", "Serving", "Exited", "FailedClosed"}]
    /\ lockHolder \in Coordinators \cup {"None"}
    /\ recordIdentity \in {"Matching", "Mismatched"}
    /\ decision \in {"Vacant", "Starting", "Published", "TearingDown", "Recovering"}
    /\ gen \in 0..MaxGen
    /\ part \in [Roles -> {"None", "Intent", "Acquiring", "LeaseHeld", "Prepared", "Committed", "ReleaseIntent", "Clean"}]
    /\ slot \in [ProcSlots -> {"Unassigned", "Staged", "Committed"}]
    /\ rs \in {"Absent", "Running", "LeaseLost"}
    /\ runsc \in {"Absent", "Running"}
    /\ sess \in [Sessions -> {"Absent", "Connecting", "Enrolled", "Starting", "Registered", "Closing"}]
    /\ sessGen \in [Sessions -> 0..MaxGen]
    /\ sessFp \in [Sessions -> {"None", "Match", "Mismatch"}]
    /\ route \in [Sessions -> {"None", "Sandbox", "Prompt", "HostProcess"}]
    /\ ptyFwd \in [Sessions -> BOOLEAN]
    /\ esc \in [Sessions -> {"None", "Submitted", "Accepted", "Prompting", "Approved", "Running", "Resolved", "Delivered"}]
    /\ escMatch \in [Sessions -> {"None", "Exact", "Inexact"}]
    /\ escApproval \in [Sessions -> {"None", "Developer", "Auto"}]
    /\ escUnacked \in [Sessions -> 0..MaxUnackedChunks]
    /\ escCancel \in [Sessions -> BOOLEAN]
    /\ runtimeEnded \in BOOLEAN
    /\ termsLeft \in BOOLEAN
    /\ actor \in Coordinators \cup {"None"}

Init ==
    /\ hc = [c \in Coordinators |-> "Idle"]
    /\ lockHolder = "None"
    /\ recordIdentity = "Matching"
    /\ decision = "Vacant"
    /\ gen = 0
    /\ part = [r \in Roles |-> "None"]
    /\ slot = [ps \in ProcSlots |-> "Unassigned"]
    /\ rs = "Absent"
    /\ runsc = "Absent"
    /\ sess = [s \in Sessions |-> "Absent"]
    /\ sessGen = [s \in Sessions |-> 0]
    /\ sessFp = [s \in Sessions |-> "None"]
    /\ route = [s \in Sessions |-> "None"]
    /\ ptyFwd = [s \in Sessions |-> FALSE]
    /\ esc = [s \in Sessions |-> "None"]
    /\ escMatch = [s \in Sessions |-> "None"]
    /\ escApproval = [s \in Sessions |-> "None"]
    /\ escUnacked = [s \in Sessions |-> 0]
    /\ escCancel = [s \in Sessions |-> FALSE]
    /\ runtimeEnded = FALSE
    /\ termsLeft = FALSE
    /\ actor = "None"

-----------------------------------------------------------------------------
\* Domain lock and Host Coordinator election (spec 3.3, OR-1)

AcquireDomainLock(c) ==
    /\ hc[c] = "Idle"
    /\ lockHolder = "None"
    /\ hc' = [hc EXCEPT ![c] = "Bootstrapping"]
    /\ lockHolder' = c
    /\ UNCHANGED <<actor, termsLeft, runtimeEnded, recordIdentity, decision, gen, part, slot, rs, runsc,
                   sess, sessGen, sessFp, route, ptyFwd,
                   esc, escMatch, escApproval, escUnacked, escCancel>>

\* A concurrent candidate whose non-blocking flock fails exits without opening
\* the Domain Store.
LoseDomainLockRace(c) ==
    /\ hc[c] = "Idle"
    /\ lockHolder # "None"
    /\ hc' = [hc EXCEPT ![c] = "FailedClosed"]
    /\ UNCHANGED <<actor, termsLeft, runtimeEnded, lockHolder, recordIdentity, decision, gen, part, slot, rs, runsc,
                   sess, sessGen, sessFp, route, ptyFwd,
                   esc, escMatch, escApproval, escUnacked, escCancel>>

\* Bootstrap of a Domain whose durable record holds no live generation.
BootstrapVacantDomain(c) ==
    /\ hc[c] = "Bootstrapping"
    /\ decision = "Vacant"
    /\ hc' = [hc EXCEPT ![c] = "Leading"]
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, lockHolder, recordIdentity, decision, gen, part, slot, rs, runsc,
                   sess, sessGen, sessFp, route, ptyFwd,
                   esc, escMatch, escApproval, escUnacked, escCancel>>

\* Bootstrap recovery resumes only from matching durable identity.
BootstrapRecover(c) ==
    /\ hc[c] = "Bootstrapping"
    /\ decision \in LiveGeneration
    /\ recordIdentity = "Matching"
    /\ hc' = [hc EXCEPT ![c] = "Leading"]
    /\ decision' = "Recovering"
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, lockHolder, recordIdentity, gen, part, slot, rs, runsc,
                   sess, sessGen, sessFp, route, ptyFwd,
                   esc, escMatch, escApproval, escUnacked, escCancel>>

\* A mismatch fails closed: the record is retained untouched, the lock released.
RefuseMismatchedRecord(c) ==
    /\ hc[c] = "Bootstrapping"
    /\ recordIdentity = "Mismatched"
    /\ hc' = [hc EXCEPT ![c] = "FailedClosed"]
    /\ lockHolder' = "None"
    /\ actor' = "None"
    /\ UNCHANGED <<termsLeft, runtimeEnded, recordIdentity, decision, gen, part, slot, rs, runsc,
                   sess, sessGen, sessFp, route, ptyFwd,
                   esc, escMatch, escApproval, escUnacked, escCancel>>

\* A coordinator's own generation record is Vacant while it bootstraps; each
\* generation a dead coordinator left is recovered in that generation's own
\* trace. When one cannot be recovered (its runtime not proved absent, its
\* trace unreadable, its record refused), this bootstrap fails closed: it
\* writes nothing and releases the lock, and the generation stays as recorded
\* for the next coordinator (spec 3.4: "A process, container, PTY, or
\* generation mismatch fails closed and retains the record").
AbandonBootstrap(c) ==
    /\ hc[c] = "Bootstrapping"
    /\ decision = "Vacant"
    /\ hc' = [hc EXCEPT ![c] = "FailedClosed"]
    /\ lockHolder' = "None"
    /\ actor' = "None"
    /\ UNCHANGED <<termsLeft, runtimeEnded, recordIdentity, decision, gen, part, slot, rs, runsc,
                   sess, sessGen, sessFp, route, ptyFwd,
                   esc, escMatch, escApproval, escUnacked, escCancel>>

\* Environment: while nobody holds the lock, the retained record stops matching
\* what a bootstrap would observe (foreign or replaced resource, other store).
DurableIdentityDiverges ==
    /\ lockHolder = "None"
    /\ decision \in LiveGeneration
    /\ rs = "Absent"
    /\ runsc = "Absent"
    /\ recordIdentity = "Matching"
    /\ recordIdentity' = "Mismatched"
    /\ UNCHANGED <<actor, termsLeft, runtimeEnded, hc, lockHolder, decision, gen, part, slot, rs, runsc,
                   sess, sessGen, sessFp, route, ptyFwd,
                   esc, escMatch, escApproval, escUnacked, escCancel>>

StartGeneration(c) ==
    /\ hc[c] = "Leading"
    /\ decision = "Vacant"
    /\ gen < MaxGen
    /\ hc' = [hc EXCEPT ![c] = "Serving"]
    /\ decision' = "Starting"
    /\ gen' = gen + 1
    /\ part' = [r \in Roles |-> "None"]
    /\ slot' = [ps \in ProcSlots |-> "Unassigned"]
    /\ runtimeEnded' = FALSE
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, lockHolder, recordIdentity, rs, runsc,
                   sess, sessGen, sessFp, route, ptyFwd,
                   esc, escMatch, escApproval, escUnacked, escCancel>>

ExitCoordinator(c) ==
    /\ hc[c] \in LeaderPhases
    /\ decision = "Vacant"
    /\ hc' = [hc EXCEPT ![c] = "Exited"]
    /\ lockHolder' = "None"
    /\ actor' = "None"
    /\ UNCHANGED <<termsLeft, runtimeEnded, recordIdentity, decision, gen, part, slot, rs, runsc,
                   sess, sessGen, sessFp, route, ptyFwd,
                   esc, escMatch, escApproval, escUnacked, escCancel>>

-----------------------------------------------------------------------------
\* Generation acquisition (spec 3.3 causal acquisition; schemas.md
\* "Participant ownership").  Every role first records bare intent.

RecordIntent(c, r) ==
    /\ hc[c] \in LeaderPhases
    /\ decision = "Starting"
    /\ part[r] = "None"
    /\ r \in RequiredRoles
    /\ r = "Sandbox" \/ slot["SandboxRuntimeSupervisor"] = "Committed"
    /\ r = "Sandbox" \/ \A d \in Roles : d = "Sandbox" \/ AcquireRank(d) >= AcquireRank(r) \/ Ready(d)
    /\ r # "Publication" \/ part["Sandbox"] = "Committed"
    /\ part' = [part EXCEPT ![r] = "Intent"]
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, slot, rs, runsc,
                   sess, sessGen, sessFp, route, ptyFwd,
                   esc, escMatch, escApproval, escUnacked, escCancel>>

\* First non-empty snapshot of a role without a child process: prepared-lower
\* lease intent with the intended artifact, the State Anchors' mounts and
\* the network namespace with the derived policy digest (RS entering both as
\* committed direct edge), publication paths.
AcquireSnapshot(c, r) ==
    /\ hc[c] \in LeaderPhases
    /\ decision = "Starting"
    /\ part[r] = "Intent"
    /\ r \in SnapshotRoles
    /\ part' = [part EXCEPT ![r] = "Acquiring"]
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, slot, rs, runsc,
                   sess, sessGen, sessFp, route, ptyFwd,
                   esc, escMatch, escApproval, escUnacked, escCancel>>

\* Causal child acquisition steps 2-6: the wrapper exists, blocked on its
\* barrier, and its exact pidfs identity is durably staged.
StageProcess(c, ps) ==
    /\ hc[c] \in LeaderPhases
    /\ decision = "Starting"
    /\ slot[ps] = "Unassigned"
    /\ part[SlotRole(ps)] \in {"Intent", "Acquiring"}
    /\ ps = "SandboxRuntimeSupervisor" \/ slot["SandboxRuntimeSupervisor"] = "Committed"
    /\ ps # "SandboxAttachedRunsc" \/ \A d \in Roles : AcquireRank(d) >= AcquireRank("Sandbox") \/ Ready(d)
    /\ slot' = [slot EXCEPT ![ps] = "Staged"]
    /\ part' = [part EXCEPT ![SlotRole(ps)] = "Acquiring"]
    /\ rs' = IF ps = "SandboxRuntimeSupervisor" THEN "Running" ELSE rs
    /\ runsc' = IF ps = "SandboxAttachedRunsc" THEN "Running" ELSE runsc
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen,
                   sess, sessGen, sessFp, route, ptyFwd,
                   esc, escMatch, escApproval, escUnacked, escCancel>>

\* Step 9: promote to committed after target-specific readiness.
CommitProcess(c, ps) ==
    /\ hc[c] \in LeaderPhases
    /\ decision = "Starting"
    /\ slot[ps] = "Staged"
    /\ slot' = [slot EXCEPT ![ps] = "Committed"]
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, part, rs, runsc,
                   sess, sessGen, sessFp, route, ptyFwd,
                   esc, escMatch, escApproval, escUnacked, escCancel>>

\* Acquiring -> LeaseHeld (prepared lower: catalog lease inserted),
\* Prepared (State Anchor, Git routing), Committed (Helper, Sandbox).
CommitParticipant(c, r) ==
    /\ hc[c] \in LeaderPhases
    /\ decision = "Starting"
    /\ part[r] = "Acquiring"
    /\ r \notin {"Network", "Publication"}
    /\ \A ps \in ProcSlots : SlotRole(ps) # r \/ slot[ps] = "Committed"
    /\ part' = [part EXCEPT ![r] = ActiveState(r)]
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, slot, rs, runsc,
                   sess, sessGen, sessFp, route, ptyFwd,
                   esc, escMatch, escApproval, escUnacked, escCancel>>

\* The atomic network readiness attestation (spec 3.7).
MarkNetworkReady(c) ==
    /\ hc[c] \in LeaderPhases
    /\ decision = "Starting"
    /\ part["Network"] = "Acquiring"
    /\ part' = [part EXCEPT !["Network"] = "Committed"]
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, slot, rs, runsc,
                   sess, sessGen, sessFp, route, ptyFwd,
                   esc, escMatch, escApproval, escUnacked, escCancel>>

\* The sandbox the generation publishes is running: RS and attached runsc
\* have not ended since they were committed (FR-12).
Publish(c) ==
    /\ hc[c] \in LeaderPhases
    /\ decision = "Starting"
    /\ part["Publication"] = "Acquiring"
    /\ rs = "Running"
    /\ runsc = "Running"
    /\ part' = [part EXCEPT !["Publication"] = "Committed"]
    /\ decision' = "Published"
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, gen, slot, rs, runsc,
                   sess, sessGen, sessFp, route, ptyFwd,
                   esc, escMatch, escApproval, escUnacked, escCancel>>

\* Any acquisition step may fail; the generation is then torn down.
AbortGeneration(c) ==
    /\ hc[c] \in LeaderPhases
    /\ decision = "Starting"
    /\ decision' = "TearingDown"
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, gen, part, slot, rs, runsc,
                   sess, sessGen, sessFp, route, ptyFwd,
                   esc, escMatch, escApproval, escUnacked, escCancel>>

-----------------------------------------------------------------------------
\* Client enrollment and session registration (spec 3.3 cryptography, FR-2,
\* SR-9, SR-16)

\* Client side: a CLI connects to the Host Coordinator face and asks for
\* credential enrollment.  f is the comparison of its configuration
\* fingerprint with the Domain's.  A CLI reaches the face of a published
\* generation, or of a Vacant Domain's coordinator, whose first matching
\* client starts the generation (it stays Connecting through the launch) and
\* whose mismatching client is refused like any other (FR-2, SR-9).
ConnectClient(s, f) ==
    /\ sess[s] = "Absent"
    /\ decision \in {"Vacant", "Published"}
    /\ lockHolder # "None"
    /\ sess' = [sess EXCEPT ![s] = "Connecting"]
    /\ sessFp' = [sessFp EXCEPT ![s] = f]
    /\ UNCHANGED <<actor, termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, part, slot, rs, runsc,
                   sessGen, route, ptyFwd, esc, escMatch, escApproval, escUnacked, escCancel>>

\* HC issues a credential bound to the current generation.
EnrollClient(c, s) ==
    /\ hc[c] \in LeaderPhases
    /\ decision = "Published"
    /\ sess[s] = "Connecting"
    /\ sessFp[s] = "Match"
    /\ sess' = [sess EXCEPT ![s] = "Enrolled"]
    /\ sessGen' = [sessGen EXCEPT ![s] = gen]
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, part, slot, rs, runsc,
                   sessFp, route, ptyFwd, esc, escMatch, escApproval, escUnacked, escCancel>>

RefuseConfigurationMismatch(c, s) ==
    /\ hc[c] \in LeaderPhases
    /\ sess[s] = "Connecting"
    /\ sessFp[s] = "Mismatch"
    /\ sess' = [sess EXCEPT ![s] = "Absent"]
    /\ sessFp' = [sessFp EXCEPT ![s] = "None"]
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, part, slot, rs, runsc,
                   sessGen, route, ptyFwd, esc, escMatch, escApproval, escUnacked, escCancel>>

\* A credential bound to another generation is refused.
RefuseStaleCredential(c, s) ==
    /\ hc[c] \in LeaderPhases
    /\ decision = "Published"
    /\ sess[s] = "Enrolled"
    /\ sessGen[s] # gen
    /\ sess' = [sess EXCEPT ![s] = "Absent"]
    /\ sessGen' = [sessGen EXCEPT ![s] = 0]
    /\ sessFp' = [sessFp EXCEPT ![s] = "None"]
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, part, slot, rs, runsc,
                   route, ptyFwd,
                   esc, escMatch, escApproval, escUnacked, escCancel>>

\* Spec 3.4 acquisition step 1: the Host Coordinator records the enrolled
\* session's terminal intent in the Domain Store before it allocates the PTY
\* or starts the exec wrapper (steps 2-3).  No terminal event is admitted
\* yet.  A runtime the HC has seen end starts no terminal (FR-2).
RecordTerminalIntent(c, s) ==
    /\ hc[c] \in LeaderPhases
    /\ decision = "Published"
    /\ sess[s] = "Enrolled"
    /\ sessGen[s] = gen
    /\ runtimeEnded = FALSE
    /\ sess' = [sess EXCEPT ![s] = "Starting"]
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, part, slot, rs, runsc,
                   sessGen, sessFp, route, ptyFwd, esc, escMatch, escApproval, escUnacked, escCancel>>

\* Registration; the Session Terminal reaches Running (spec 3.4 steps 4-5) and
\* terminal events are admitted on the sandbox route.  The session's exec
\* client runs in the one running sandbox (FR-2): a runtime the HC has seen
\* end admits no new session.
RegisterSession(c, s) ==
    /\ hc[c] \in LeaderPhases
    /\ decision = "Published"
    /\ sess[s] = "Starting"
    /\ rs = "Running"
    /\ runsc = "Running"
    /\ sess' = [sess EXCEPT ![s] = "Registered"]
    /\ route' = [route EXCEPT ![s] = "Sandbox"]
    /\ ptyFwd' = [ptyFwd EXCEPT ![s] = TRUE]
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, part, slot, rs, runsc,
                   sessGen, sessFp, esc, escMatch, escApproval, escUnacked, escCancel>>

\* Session close, client connection loss, PTY or exec-client loss, or guest
\* completion: the modeled close removes terminal and escalation routing and
\* terminates and reaps the session's host process before anything else.
CloseSession(c, s) ==
    /\ hc[c] \in LeaderPhases
    /\ sess[s] = "Registered"
    /\ sess' = [sess EXCEPT ![s] = "Closing"]
    /\ route' = [route EXCEPT ![s] = "None"]
    /\ ptyFwd' = [ptyFwd EXCEPT ![s] = FALSE]
    /\ esc' = [esc EXCEPT ![s] = "None"]
    /\ escMatch' = [escMatch EXCEPT ![s] = "None"]
    /\ escApproval' = [escApproval EXCEPT ![s] = "None"]
    /\ escUnacked' = [escUnacked EXCEPT ![s] = 0]
    /\ escCancel' = [escCancel EXCEPT ![s] = FALSE]
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, part, slot, rs, runsc,
                   sessGen, sessFp>>

\* Spec 3.4 "Failure before the running state never admits the terminal": a
\* live HC ends whatever of the exec client and guest group it started and
\* records the terminal's release intent; the release then finishes or is
\* retained like a closed session's.  No route was ever admitted.
AbortSessionStart(c, s) ==
    /\ hc[c] \in LeaderPhases
    /\ sess[s] = "Starting"
    /\ sess' = [sess EXCEPT ![s] = "Closing"]
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, part, slot, rs, runsc,
                   sessGen, sessFp, route, ptyFwd, esc, escMatch, escApproval, escUnacked, escCancel>>

\* Physical terminal release done (exec client reaped, PTY closed, terminal
\* record clean); the session slot is free.
FinishSessionRelease(c, s) ==
    /\ hc[c] \in LeaderPhases
    /\ sess[s] = "Closing"
    /\ sess' = [sess EXCEPT ![s] = "Absent"]
    /\ sessGen' = [sessGen EXCEPT ![s] = 0]
    /\ sessFp' = [sessFp EXCEPT ![s] = "None"]
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, part, slot, rs, runsc,
                   route, ptyFwd, esc, escMatch, escApproval, escUnacked, escCancel>>

\* Spec 3.4 release step 3: the guest group, exec client or PTY could not be
\* proved absent, so the terminal keeps its release intent (with every exact
\* identity) for Domain teardown; the session slot is free.
RetainSessionRelease(c, s) ==
    /\ hc[c] \in LeaderPhases
    /\ sess[s] = "Closing"
    /\ sess' = [sess EXCEPT ![s] = "Absent"]
    /\ sessGen' = [sessGen EXCEPT ![s] = 0]
    /\ sessFp' = [sessFp EXCEPT ![s] = "None"]
    /\ termsLeft' = TRUE
    /\ actor' = c
    /\ UNCHANGED <<runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, part, slot, rs, runsc,
                   route, ptyFwd, esc, escMatch, escApproval, escUnacked, escCancel>>

\* Client side: a client whose terminal is not recorded gives up (one that
\* was refused, or whose session the HC never started).  It leaves no
\* terminal: a session whose terminal intent is recorded ends through the
\* HC's release (AbortSessionStart, CloseSession).
ClientExits(s) ==
    /\ sess[s] \in {"Connecting", "Enrolled"}
    /\ sess' = [sess EXCEPT ![s] = "Absent"]
    /\ sessGen' = [sessGen EXCEPT ![s] = 0]
    /\ sessFp' = [sessFp EXCEPT ![s] = "None"]
    /\ UNCHANGED <<actor, termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, part, slot, rs, runsc,
                   route, ptyFwd, esc, escMatch, escApproval, escUnacked, escCancel>>

-----------------------------------------------------------------------------
\* Terminal routing (spec 3.4): the HC stops reading a session's PTY master
\* before the session's terminal carries a prompt or host process, and resumes
\* only on the sandbox route.

PauseTerminalForwarding(c, s) ==
    /\ hc[c] \in LeaderPhases
    /\ ptyFwd[s] = TRUE
    /\ esc[s] \in {"Accepted", "Approved"}
    /\ ptyFwd' = [ptyFwd EXCEPT ![s] = FALSE]
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, part, slot, rs, runsc,
                   sess, sessGen, sessFp, route,
                   esc, escMatch, escApproval, escUnacked, escCancel>>

ResumeTerminalForwarding(c, s) ==
    /\ hc[c] \in LeaderPhases
    /\ ptyFwd[s] = FALSE
    /\ route[s] = "Sandbox"
    /\ esc[s] \notin {"Accepted", "Approved"}
    /\ ptyFwd' = [ptyFwd EXCEPT ![s] = TRUE]
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, part, slot, rs, runsc,
                   sess, sessGen, sessFp, route,
                   esc, escMatch, escApproval, escUnacked, escCancel>>

-----------------------------------------------------------------------------
\* Host escalation (spec 3.8)

\* Sandbox side: a signed request bound to the session's Session Request
\* Capability lands in the generation mailbox, written from inside the
\* running sandbox.  m is the rule matcher's
\* classification of its argv (Exact: a rule matches exactly, no shell form,
\* trailing arguments only where the rule grants them).
SubmitEscalation(s, m) ==
    /\ sess[s] = "Registered"
    /\ esc[s] = "None"
    /\ runsc = "Running"
    /\ esc' = [esc EXCEPT ![s] = "Submitted"]
    /\ escMatch' = [escMatch EXCEPT ![s] = m]
    /\ UNCHANGED <<actor, termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, part, slot, rs, runsc,
                   sess, sessGen, sessFp, route, ptyFwd,
                   escApproval, escUnacked, escCancel>>

AcceptEscalation(c, s) ==
    /\ hc[c] \in LeaderPhases
    /\ esc[s] = "Submitted"
    /\ esc' = [esc EXCEPT ![s] = "Accepted"]
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, part, slot, rs, runsc,
                   sess, sessGen, sessFp, route, ptyFwd,
                   escMatch, escApproval, escUnacked, escCancel>>

RouteToPrompt(c, s) ==
    /\ hc[c] \in LeaderPhases
    /\ esc[s] = "Accepted"
    /\ route[s] = "Sandbox"
    /\ ptyFwd[s] = FALSE
    /\ esc' = [esc EXCEPT ![s] = "Prompting"]
    /\ route' = [route EXCEPT ![s] = "Prompt"]
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, part, slot, rs, runsc,
                   sess, sessGen, sessFp, ptyFwd,
                   escMatch, escApproval, escUnacked, escCancel>>

\* Developer decision on the session's own prompt (signed by its Session Anchor).
ApproveEscalation(c, s) ==
    /\ hc[c] \in LeaderPhases
    /\ esc[s] = "Prompting"
    /\ esc' = [esc EXCEPT ![s] = "Approved"]
    /\ escApproval' = [escApproval EXCEPT ![s] = "Developer"]
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, part, slot, rs, runsc,
                   sess, sessGen, sessFp, route, ptyFwd,
                   escMatch, escUnacked, escCancel>>

AutoApproveEscalation(c, s) ==
    /\ hc[c] \in LeaderPhases
    /\ esc[s] = "Accepted"
    /\ escMatch[s] = "Exact"
    /\ esc' = [esc EXCEPT ![s] = "Approved"]
    /\ escApproval' = [escApproval EXCEPT ![s] = "Auto"]
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, part, slot, rs, runsc,
                   sess, sessGen, sessFp, route, ptyFwd,
                   escMatch, escUnacked, escCancel>>

DenyEscalation(c, s) ==
    /\ hc[c] \in LeaderPhases
    /\ esc[s] = "Prompting"
    /\ esc' = [esc EXCEPT ![s] = "Resolved"]
    /\ route' = [route EXCEPT ![s] = "Sandbox"]
    /\ escMatch' = [escMatch EXCEPT ![s] = "None"]
    /\ escCancel' = [escCancel EXCEPT ![s] = FALSE]
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, part, slot, rs, runsc,
                   sess, sessGen, sessFp, ptyFwd, escApproval, escUnacked>>

\* The developer did not answer within the prompt deadline.
PromptTimeout(c, s) ==
    /\ hc[c] \in LeaderPhases
    /\ esc[s] = "Prompting"
    /\ esc' = [esc EXCEPT ![s] = "Resolved"]
    /\ route' = [route EXCEPT ![s] = "Sandbox"]
    /\ escMatch' = [escMatch EXCEPT ![s] = "None"]
    /\ escCancel' = [escCancel EXCEPT ![s] = FALSE]
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, part, slot, rs, runsc,
                   sess, sessGen, sessFp, ptyFwd, escApproval, escUnacked>>

\* The HC denies an accepted request without a prompt: nothing can put it to
\* the developer (the session has no terminal, prompts are off, the request is
\* too large to show whole), or serving it failed before it was shown.  The
\* terminal's route never left the sandbox.
RefuseEscalation(c, s) ==
    /\ hc[c] \in LeaderPhases
    /\ esc[s] = "Accepted"
    /\ esc' = [esc EXCEPT ![s] = "Resolved"]
    /\ escMatch' = [escMatch EXCEPT ![s] = "None"]
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, part, slot, rs, runsc,
                   sess, sessGen, sessFp, route, ptyFwd, escApproval, escUnacked, escCancel>>

\* The approved command cannot start (its executable cannot be opened or
\* checked, the launcher cannot be prepared): nothing runs and the terminal's
\* route returns to the sandbox.
HostProcessStartFails(c, s) ==
    /\ hc[c] \in LeaderPhases
    /\ esc[s] = "Approved"
    /\ esc' = [esc EXCEPT ![s] = "Resolved"]
    /\ route' = [route EXCEPT ![s] = "Sandbox"]
    /\ escMatch' = [escMatch EXCEPT ![s] = "None"]
    /\ escApproval' = [escApproval EXCEPT ![s] = "None"]
    /\ escCancel' = [escCancel EXCEPT ![s] = FALSE]
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, part, slot, rs, runsc,
                   sess, sessGen, sessFp, ptyFwd, escUnacked>>

\* The approved host process starts (argv launcher, no shell) and takes the
\* session's terminal.
StartHostProcess(c, s) ==
    /\ hc[c] \in LeaderPhases
    /\ esc[s] = "Approved"
    /\ ptyFwd[s] = FALSE
    /\ esc' = [esc EXCEPT ![s] = "Running"]
    /\ route' = [route EXCEPT ![s] = "HostProcess"]
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, part, slot, rs, runsc,
                   sess, sessGen, sessFp, ptyFwd,
                   escMatch, escApproval, escUnacked, escCancel>>

\* HC writes one result chunk; at the window bound it pauses the process's
\* output pipes.
EmitResultChunk(c, s) ==
    /\ hc[c] \in LeaderPhases
    /\ esc[s] = "Running"
    /\ escUnacked[s] < MaxUnackedChunks
    /\ escUnacked' = [escUnacked EXCEPT ![s] = escUnacked[s] + 1]
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, part, slot, rs, runsc,
                   sess, sessGen, sessFp, route, ptyFwd,
                   esc, escMatch, escApproval, escCancel>>

\* Sandbox side: the Escalation Client acknowledges the next chunk.
AckResultChunk(s) ==
    /\ escUnacked[s] > 0
    /\ escUnacked' = [escUnacked EXCEPT ![s] = escUnacked[s] - 1]
    /\ UNCHANGED <<actor, termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, part, slot, rs, runsc,
                   sess, sessGen, sessFp, route, ptyFwd,
                   esc, escMatch, escApproval, escCancel>>

\* The host process exited; HC reaped it through its retained pidfd.
HostProcessExits(c, s) ==
    /\ hc[c] \in LeaderPhases
    /\ esc[s] = "Running"
    /\ esc' = [esc EXCEPT ![s] = "Resolved"]
    /\ route' = [route EXCEPT ![s] = "Sandbox"]
    /\ escMatch' = [escMatch EXCEPT ![s] = "None"]
    /\ escApproval' = [escApproval EXCEPT ![s] = "None"]
    /\ escCancel' = [escCancel EXCEPT ![s] = FALSE]
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, part, slot, rs, runsc,
                   sess, sessGen, sessFp, ptyFwd, escUnacked>>

\* Execution or acknowledgement deadline: HC terminates and reaps the process.
HostProcessTimeout(c, s) ==
    /\ hc[c] \in LeaderPhases
    /\ esc[s] = "Running"
    /\ esc' = [esc EXCEPT ![s] = "Resolved"]
    /\ route' = [route EXCEPT ![s] = "Sandbox"]
    /\ escMatch' = [escMatch EXCEPT ![s] = "None"]
    /\ escApproval' = [escApproval EXCEPT ![s] = "None"]
    /\ escCancel' = [escCancel EXCEPT ![s] = FALSE]
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, part, slot, rs, runsc,
                   sess, sessGen, sessFp, ptyFwd, escUnacked>>

\* Acknowledgement deadline after the process ended: HC removes the
\* unacknowledged chunk files; the terminal result still follows.
AckTimeout(c, s) ==
    /\ hc[c] \in LeaderPhases
    /\ esc[s] = "Resolved"
    /\ escUnacked[s] > 0
    /\ escUnacked' = [escUnacked EXCEPT ![s] = 0]
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, part, slot, rs, runsc,
                   sess, sessGen, sessFp, route, ptyFwd,
                   esc, escMatch, escApproval, escCancel>>

\* The terminal Escalation Result (outcome, exit status) is written.
DeliverResult(c, s) ==
    /\ hc[c] \in LeaderPhases
    /\ esc[s] = "Resolved"
    /\ escUnacked[s] = 0
    /\ esc' = [esc EXCEPT ![s] = "Delivered"]
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, part, slot, rs, runsc,
                   sess, sessGen, sessFp, route, ptyFwd,
                   escMatch, escApproval, escUnacked, escCancel>>

\* Sandbox side: the Escalation Client consumed the result; the session may
\* submit its next request.
CollectResult(s) ==
    /\ esc[s] = "Delivered"
    /\ esc' = [esc EXCEPT ![s] = "None"]
    /\ UNCHANGED <<actor, termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, part, slot, rs, runsc,
                   sess, sessGen, sessFp, route, ptyFwd,
                   escMatch, escApproval, escUnacked, escCancel>>

\* Sandbox side: a signed cancellation for the open request arrives.  The HC
\* handles mailbox records at its routing points, so a cancellation is modeled
\* as arriving while the request holds the terminal (prompt or host process);
\* Accepted and Approved are HC-internal and left by the HC's next step.
RequestCancellation(s) ==
    /\ esc[s] \in {"Prompting", "Running"}
    /\ escCancel[s] = FALSE
    /\ escCancel' = [escCancel EXCEPT ![s] = TRUE]
    /\ UNCHANGED <<actor, termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, part, slot, rs, runsc,
                   sess, sessGen, sessFp, route, ptyFwd,
                   esc, escMatch, escApproval, escUnacked>>

\* HC applies it: withdraws the prompt or terminates and reaps the host process,
\* removes unacknowledged chunks, restores the sandbox route; a Cancelled
\* result follows.
ApplyCancellation(c, s) ==
    /\ hc[c] \in LeaderPhases
    /\ escCancel[s] = TRUE
    /\ esc' = [esc EXCEPT ![s] = "Resolved"]
    /\ route' = [route EXCEPT ![s] = "Sandbox"]
    /\ escMatch' = [escMatch EXCEPT ![s] = "None"]
    /\ escApproval' = [escApproval EXCEPT ![s] = "None"]
    /\ escUnacked' = [escUnacked EXCEPT ![s] = 0]
    /\ escCancel' = [escCancel EXCEPT ![s] = FALSE]
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, part, slot, rs, runsc,
                   sess, sessGen, sessFp, ptyFwd>>

-----------------------------------------------------------------------------
\* Teardown (FR-6) and release (spec 3.3 release, 3.6 unmount/lease release)

\* The last session has left: publication is withdrawn and the HC closes the
\* connections of clients that have not registered (they are refused).
BeginTeardown(c) ==
    /\ hc[c] \in LeaderPhases
    /\ decision = "Published"
    /\ \A s \in Sessions : sess[s] # "Registered"
    /\ \A s \in Sessions : sess[s] # "Closing"
    /\ \A s \in Sessions : sess[s] # "Starting"
    /\ decision' = "TearingDown"
    /\ sess' = [s \in Sessions |-> IF sess[s] \in {"Connecting", "Enrolled"} THEN "Absent" ELSE sess[s]]
    /\ sessGen' = [s \in Sessions |-> IF sess[s] \in {"Connecting", "Enrolled"} THEN 0 ELSE sessGen[s]]
    /\ sessFp' = [s \in Sessions |-> IF sess[s] \in {"Connecting", "Enrolled"} THEN "None" ELSE sessFp[s]]
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, gen, part, slot, rs, runsc,
                   route, ptyFwd,
                   esc, escMatch, escApproval, escUnacked, escCancel>>

\* Any partial or active snapshot moves to release intent, preserving every
\* recorded identity (slots keep their phase), in release order.  The
\* prepared-lower lease is released only once the runtime is absent and no
\* State Anchor can be mounted on it (spec 3.6 unmount and lease-release
\* step 3); with anchors, CommitAnchorCleanLeaseReleaseIntent records its
\* intent.
RecordReleaseIntent(c, r) ==
    /\ hc[c] \in LeaderPhases
    /\ decision \in ReleasePhases
    /\ part[r] \in LiveSnapshot
    /\ \A d \in Roles : ReleaseRank(d) >= ReleaseRank(r) \/ part[d] \notin LiveSnapshot
    /\ r # "PreparedLower" \/ (part["StateAnchor"] \in {"None", "Clean"} /\ rs = "Absent" /\ runsc = "Absent")
    /\ part' = [part EXCEPT ![r] = "ReleaseIntent"]
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, slot, rs, runsc,
                   sess, sessGen, sessFp, route, ptyFwd,
                   esc, escMatch, escApproval, escUnacked, escCancel>>

\* Normal teardown: the live HC closes the RS lifetime lease; the RS stops the
\* sandbox, unmounts, stops the helper and exits (a staged RS wrapper is ended
\* through its exact retained handle).
ShutdownRuntime(c) ==
    /\ hc[c] \in LeaderPhases
    /\ decision = "TearingDown"
    /\ rs = "Running"
    /\ \A d \in Roles : d = "PreparedLower" \/ part[d] \notin LiveSnapshot
    /\ rs' = "Absent"
    /\ runsc' = "Absent"
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, part, slot,
                   sess, sessGen, sessFp, route, ptyFwd,
                   esc, escMatch, escApproval, escUnacked, escCancel>>

\* ReleaseIntent -> Clean after absence proof; clears every process slot.
CleanParticipant(c, r) ==
    /\ hc[c] \in LeaderPhases
    /\ decision \in ReleasePhases
    /\ part[r] = "ReleaseIntent"
    /\ r # "StateAnchor"
    /\ \A d \in Roles : ReleaseRank(d) >= ReleaseRank(r) \/ part[d] \in {"None", "Clean"}
    /\ r = "Publication" \/ rs = "Absent"
    /\ r = "Publication" \/ runsc = "Absent"
    /\ part' = [part EXCEPT ![r] = "Clean"]
    /\ slot' = [ps \in ProcSlots |-> IF SlotRole(ps) = r THEN "Unassigned" ELSE slot[ps]]
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, rs, runsc,
                   sess, sessGen, sessFp, route, ptyFwd,
                   esc, escMatch, escApproval, escUnacked, escCancel>>

\* Spec 3.6 unmount and lease-release step 3: once the exact anchor mounts
\* are independently observed absent, clean State Anchor state and
\* prepared-lower release intent are committed atomically, so a mounted
\* anchor is never unleased and a lease is never left without a release
\* path.  The anchors have no process slot of their own.  The generation is
\* being released (release intent exists only then) and the runtime is
\* absent: the release order cleans the Sandbox first, and that needs RS
\* and attached runsc absent (CleanParticipant).
CommitAnchorCleanLeaseReleaseIntent(c) ==
    /\ hc[c] \in LeaderPhases
    /\ part["StateAnchor"] = "ReleaseIntent"
    /\ \A d \in Roles : ReleaseRank(d) >= ReleaseRank("StateAnchor") \/ part[d] \in {"None", "Clean"}
    /\ part' = [part EXCEPT !["StateAnchor"] = "Clean", !["PreparedLower"] = "ReleaseIntent"]
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, slot, rs, runsc,
                   sess, sessGen, sessFp, route, ptyFwd,
                   esc, escMatch, escApproval, escUnacked, escCancel>>

\* A bare intent becomes the explicit clean snapshot only after the sealed
\* runtime-absence check.
CleanBareIntent(c, r) ==
    /\ hc[c] \in LeaderPhases
    /\ decision \in ReleasePhases
    /\ part[r] = "Intent"
    /\ \A d \in Roles : ReleaseRank(d) >= ReleaseRank(r) \/ part[d] \in {"None", "Clean"}
    /\ rs = "Absent"
    /\ runsc = "Absent"
    /\ part' = [part EXCEPT ![r] = "Clean"]
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, slot, rs, runsc,
                   sess, sessGen, sessFp, route, ptyFwd,
                   esc, escMatch, escApproval, escUnacked, escCancel>>

\* Every participant clean: the generation is retired; a new one may start.
\* The session terminals left over are cleaned once the whole runtime is
\* absent (spec 3.4: "bootstrap recovery cleans the retained Intent only
\* after runtime absence"; a retained release is "left in release intent for
\* Domain teardown").
CleanSessionTerminals(c) ==
    /\ hc[c] \in LeaderPhases
    /\ decision \in ReleasePhases
    /\ termsLeft = TRUE
    /\ rs = "Absent"
    /\ runsc = "Absent"
    /\ termsLeft' = FALSE
    /\ actor' = c
    /\ UNCHANGED <<runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, part, slot, rs, runsc,
                   sess, sessGen, sessFp, route, ptyFwd,
                   esc, escMatch, escApproval, escUnacked, escCancel>>

RetireGeneration(c) ==
    /\ hc[c] \in LeaderPhases
    /\ decision \in ReleasePhases
    /\ \A r \in Roles : part[r] \in {"None", "Clean"}
    /\ termsLeft = FALSE
    /\ decision' = "Vacant"
    /\ actor' = c
    /\ UNCHANGED <<termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, gen, part, slot, rs, runsc,
                   sess, sessGen, sessFp, route, ptyFwd,
                   esc, escMatch, escApproval, escUnacked, escCancel>>

-----------------------------------------------------------------------------
\* Hard loss (spec 3.4, 3.6)

\* The HC process dies: the kernel drops the flock, PTY descriptors close and
\* open sessions fail, escalation host processes die on their parent-death
\* edge, and the RS observes the end of its lifetime lease.  Enrolled clients
\* keep their (now stale) credentials.  What the HC knew (runtimeEnded) is
\* gone with it.
HostCoordinatorLost(c) ==
    /\ hc[c] \in HoldingPhases
    /\ hc' = [hc EXCEPT ![c] = "Exited"]
    /\ lockHolder' = "None"
    /\ rs' = IF rs = "Running" THEN "LeaseLost" ELSE rs
    /\ sess' = [s \in Sessions |-> IF sess[s] = "Enrolled" THEN "Enrolled" ELSE "Absent"]
    /\ sessGen' = [s \in Sessions |-> IF sess[s] = "Enrolled" THEN sessGen[s] ELSE 0]
    /\ sessFp' = [s \in Sessions |-> IF sess[s] = "Enrolled" THEN sessFp[s] ELSE "None"]
    /\ route' = [s \in Sessions |-> "None"]
    /\ ptyFwd' = [s \in Sessions |-> FALSE]
    /\ esc' = [s \in Sessions |-> "None"]
    /\ escMatch' = [s \in Sessions |-> "None"]
    /\ escApproval' = [s \in Sessions |-> "None"]
    /\ escUnacked' = [s \in Sessions |-> 0]
    /\ escCancel' = [s \in Sessions |-> FALSE]
    /\ runtimeEnded' = FALSE
    \* Spec 3.4: the lost HC's session terminals stay as recorded until
    \* recovery cleans them after runtime absence.
    /\ termsLeft' = TerminalsUnclean
    /\ actor' = "None"
    /\ UNCHANGED <<recordIdentity, decision, gen, part, slot, runsc>>

\* The surviving RS stops the complete sandbox, unmounts its exact State
\* Anchor (the catalog lease stays held) and exits without opening any store.
RuntimeSupervisorLeaseLossTeardown ==
    /\ rs = "LeaseLost"
    /\ rs' = "Absent"
    /\ runsc' = "Absent"
    /\ UNCHANGED <<actor, termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, part, slot,
                   sess, sessGen, sessFp, route, ptyFwd,
                   esc, escMatch, escApproval, escUnacked, escCancel>>

\* The RS itself dies before finishing its lease-loss teardown.
RuntimeSupervisorLost ==
    /\ rs = "LeaseLost"
    /\ rs' = "Absent"
    /\ UNCHANGED <<actor, termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, part, slot, runsc,
                   sess, sessGen, sessFp, route, ptyFwd,
                   esc, escMatch, escApproval, escUnacked, escCancel>>

\* The parent-death edge armed by the RS stops attached runsc (and the sandbox).
AttachedRunscParentDeath ==
    /\ rs = "Absent"
    /\ runsc = "Running"
    /\ runsc' = "Absent"
    /\ UNCHANGED <<actor, termsLeft, runtimeEnded, hc, lockHolder, recordIdentity, decision, gen, part, slot, rs,
                   sess, sessGen, sessFp, route, ptyFwd,
                   esc, escMatch, escApproval, escUnacked, escCancel>>

\* The RS ends while its lifetime lease is live: it crashed or was killed,
\* or it ended on its own after reporting a failure (the connectivity
\* helper's loss, spec 3.7) and stopping the sandbox.  An attached runsc
\* still running follows on its parent-death edge.  The HC sees the end on
\* its lifetime channel and the RS's pidfd.  Environment restriction (to
\* bound the state space; Lazaret-notes.md "Runtime loss"): no escalation is
\* in flight when the runtime ends.
RuntimeSupervisorEnds ==
    /\ rs = "Running"
    /\ \A s \in Sessions : esc[s] = "None"
    /\ rs' = "Absent"
    /\ runtimeEnded' = TRUE
    /\ UNCHANGED <<actor, termsLeft, hc, lockHolder, recordIdentity, decision, gen, part, slot, runsc,
                   sess, sessGen, sessFp, route, ptyFwd,
                   esc, escMatch, escApproval, escUnacked, escCancel>>

\* Attached runsc, and with it the Agent Sandbox, ends while its RS runs: the
\* sandbox crashed or was killed, or the RS stopped it after a failure.
AttachedRunscEnds ==
    /\ rs = "Running"
    /\ runsc = "Running"
    /\ \A s \in Sessions : esc[s] = "None"
    /\ runsc' = "Absent"
    /\ runtimeEnded' = TRUE
    /\ UNCHANGED <<actor, termsLeft, hc, lockHolder, recordIdentity, decision, gen, part, slot, rs,
                   sess, sessGen, sessFp, route, ptyFwd,
                   esc, escMatch, escApproval, escUnacked, escCancel>>

\* Legitimate terminal state: every coordinator instance is spent and no
\* Domain process or client remains.
Terminated ==
    /\ \A c \in Coordinators : hc[c] \in {"Exited", "FailedClosed"}
    /\ rs = "Absent"
    /\ runsc = "Absent"
    /\ \A s \in Sessions : sess[s] = "Absent"
    /\ UNCHANGED vars

-----------------------------------------------------------------------------
Next ==
    \/ \E c \in Coordinators : AcquireDomainLock(c)
    \/ \E c \in Coordinators : LoseDomainLockRace(c)
    \/ \E c \in Coordinators : BootstrapVacantDomain(c)
    \/ \E c \in Coordinators : BootstrapRecover(c)
    \/ \E c \in Coordinators : RefuseMismatchedRecord(c)
    \/ \E c \in Coordinators : AbandonBootstrap(c)
    \/ DurableIdentityDiverges
    \/ \E c \in Coordinators : StartGeneration(c)
    \/ \E c \in Coordinators : ExitCoordinator(c)
    \/ \E c \in Coordinators, r \in Roles : RecordIntent(c, r)
    \/ \E c \in Coordinators, r \in Roles : AcquireSnapshot(c, r)
    \/ \E c \in Coordinators, ps \in ProcSlots : StageProcess(c, ps)
    \/ \E c \in Coordinators, ps \in ProcSlots : CommitProcess(c, ps)
    \/ \E c \in Coordinators, r \in Roles : CommitParticipant(c, r)
    \/ \E c \in Coordinators : MarkNetworkReady(c)
    \/ \E c \in Coordinators : Publish(c)
    \/ \E c \in Coordinators : AbortGeneration(c)
    \/ \E s \in Sessions, f \in FingerprintResults : ConnectClient(s, f)
    \/ \E c \in Coordinators, s \in Sessions : EnrollClient(c, s)
    \/ \E c \in Coordinators, s \in Sessions : RefuseConfigurationMismatch(c, s)
    \/ \E c \in Coordinators, s \in Sessions : RefuseStaleCredential(c, s)
    \/ \E c \in Coordinators, s \in Sessions : RecordTerminalIntent(c, s)
    \/ \E c \in Coordinators, s \in Sessions : RegisterSession(c, s)
    \/ \E c \in Coordinators, s \in Sessions : AbortSessionStart(c, s)
    \/ \E c \in Coordinators, s \in Sessions : CloseSession(c, s)
    \/ \E c \in Coordinators, s \in Sessions : FinishSessionRelease(c, s)
    \/ \E c \in Coordinators, s \in Sessions : RetainSessionRelease(c, s)
    \/ \E s \in Sessions : ClientExits(s)
    \/ \E c \in Coordinators, s \in Sessions : PauseTerminalForwarding(c, s)
    \/ \E c \in Coordinators, s \in Sessions : ResumeTerminalForwarding(c, s)
    \/ \E s \in Sessions, m \in RuleMatches : SubmitEscalation(s, m)
    \/ \E c \in Coordinators, s \in Sessions : AcceptEscalation(c, s)
    \/ \E c \in Coordinators, s \in Sessions : RouteToPrompt(c, s)
    \/ \E c \in Coordinators, s \in Sessions : ApproveEscalation(c, s)
    \/ \E c \in Coordinators, s \in Sessions : AutoApproveEscalation(c, s)
    \/ \E c \in Coordinators, s \in Sessions : DenyEscalation(c, s)
    \/ \E c \in Coordinators, s \in Sessions : PromptTimeout(c, s)
    \/ \E c \in Coordinators, s \in Sessions : RefuseEscalation(c, s)
    \/ \E c \in Coordinators, s \in Sessions : HostProcessStartFails(c, s)
    \/ \E c \in Coordinators, s \in Sessions : StartHostProcess(c, s)
    \/ \E c \in Coordinators, s \in Sessions : EmitResultChunk(c, s)
    \/ \E s \in Sessions : AckResultChunk(s)
    \/ \E c \in Coordinators, s \in Sessions : HostProcessExits(c, s)
    \/ \E c \in Coordinators, s \in Sessions : HostProcessTimeout(c, s)
    \/ \E c \in Coordinators, s \in Sessions : AckTimeout(c, s)
    \/ \E c \in Coordinators, s \in Sessions : DeliverResult(c, s)
    \/ \E s \in Sessions : CollectResult(s)
    \/ \E s \in Sessions : RequestCancellation(s)
    \/ \E c \in Coordinators, s \in Sessions : ApplyCancellation(c, s)
    \/ \E c \in Coordinators : BeginTeardown(c)
    \/ \E c \in Coordinators, r \in Roles : RecordReleaseIntent(c, r)
    \/ \E c \in Coordinators : ShutdownRuntime(c)
    \/ \E c \in Coordinators, r \in Roles : CleanParticipant(c, r)
    \/ \E c \in Coordinators : CommitAnchorCleanLeaseReleaseIntent(c)
    \/ \E c \in Coordinators, r \in Roles : CleanBareIntent(c, r)
    \/ \E c \in Coordinators : CleanSessionTerminals(c)
    \/ \E c \in Coordinators : RetireGeneration(c)
    \/ \E c \in Coordinators : HostCoordinatorLost(c)
    \/ RuntimeSupervisorLeaseLossTeardown
    \/ RuntimeSupervisorLost
    \/ AttachedRunscParentDeath
    \/ RuntimeSupervisorEnds
    \/ AttachedRunscEnds
    \/ Terminated

-----------------------------------------------------------------------------
\* Fairness (TLC only; justified in Lazaret-notes.md).  Only steps a live,
\* lock-holding HC takes on its own (its event loop and deadlines) and the
\* kernel-backed lease-loss edges are fair.  Clients, the sandbox, the
\* developer, host processes, crashes and new HC instances are not.
\* All HC steps that serve one session's terminal and escalation (its event
\* loop turn for that session and that session's deadlines).
SessionServiceStep(s) ==
    \E c \in Coordinators :
        \/ AcceptEscalation(c, s)
        \/ RouteToPrompt(c, s)
        \/ AutoApproveEscalation(c, s)
        \/ PauseTerminalForwarding(c, s)
        \/ ResumeTerminalForwarding(c, s)
        \/ StartHostProcess(c, s)
        \/ PromptTimeout(c, s)
        \/ HostProcessTimeout(c, s)
        \/ AckTimeout(c, s)
        \/ DeliverResult(c, s)
        \/ ApplyCancellation(c, s)
        \/ FinishSessionRelease(c, s)
        \/ RetainSessionRelease(c, s)
        \/ RegisterSession(c, s)
        \/ AbortSessionStart(c, s)

\* Once the HC has seen the runtime end it closes every session, and ends
\* every start (its event loop's reaction to the lifetime channel).
RuntimeLossClose(s) ==
    runtimeEnded /\ \E c \in Coordinators : CloseSession(c, s) \/ AbortSessionStart(c, s)

\* All HC steps that bootstrap, tear down or recover the generation.
GenerationReleaseStep ==
    \E c \in Coordinators :
        \/ BootstrapVacantDomain(c)
        \/ BootstrapRecover(c)
        \/ RefuseMismatchedRecord(c)
        \/ BeginTeardown(c)
        \/ ShutdownRuntime(c)
        \/ CleanSessionTerminals(c)
        \/ RetireGeneration(c)
        \/ \E r \in Roles : RecordReleaseIntent(c, r)
        \/ \E r \in Roles : CleanParticipant(c, r)
        \/ CommitAnchorCleanLeaseReleaseIntent(c)
        \/ \E r \in Roles : CleanBareIntent(c, r)

Fairness ==
    /\ \A s \in Sessions : WF_vars(SessionServiceStep(s))
    /\ \A s \in Sessions : WF_vars(RuntimeLossClose(s))
    /\ WF_vars(GenerationReleaseStep)
    /\ WF_vars(RuntimeSupervisorLeaseLossTeardown)
    /\ WF_vars(AttachedRunscParentDeath)

Spec == Init /\ [][Next]_vars /\ Fairness

-----------------------------------------------------------------------------
\* Invariants

\* OR-1: the Domain flock elects at most one leader; losers fail closed.
Inv_OR1_SingleLeader ==
    \A c1, c2 \in Coordinators :
        (hc[c1] \in HoldingPhases /\ hc[c2] \in HoldingPhases) => c1 = c2

Inv_OR1_LeaderHoldsDomainLock ==
    \A c \in Coordinators : (hc[c] \in HoldingPhases) <=> (lockHolder = c)

\* OR-1: the coordinator acting for the Domain is exactly the elected leader
\* (so recording it adds no state: `actor` is a function of `hc`).
Inv_OR1_ActorIsTheLeader ==
    \A c \in Coordinators : (actor = c) <=> (hc[c] \in LeaderPhases)

\* OR-1: a Runtime Supervisor with a live lease belongs to the serving leader.
Inv_OR1_RuntimeLeaseHeldByLeader ==
    rs = "Running" => \E c \in Coordinators : hc[c] \in LeaderPhases

\* FR-2: every live session of the Domain is bound to the one published
\* generation and its one committed sandbox.
Inv_FR2_SessionsShareOneSandbox ==
    \A s \in Sessions :
        sess[s] \in TerminalRecorded =>
            /\ sessGen[s] = gen
            /\ decision = "Published"
            /\ part["Sandbox"] = "Committed"
            /\ (runsc = "Running" \/ runtimeEnded)

\* FR-5: a prompt is shown only on the terminal of the session that asked.
Inv_FR5_PromptOnlyOnRequestingSession ==
    \A s \in Sessions :
        /\ route[s] = "Prompt" => esc[s] \in {"Prompting", "Approved"}
        /\ esc[s] = "Prompting" => route[s] = "Prompt"

Inv_FR5_EscalationOnlyForRegisteredSessions ==
    \A s \in Sessions : esc[s] # "None" => sess[s] = "Registered"

\* FR-6: no session is served while the generation is released.
Inv_FR6_NoSessionsDuringRelease ==
    decision \in ReleasePhases => NoSessionsLeft

\* FR-12: a serving published generation is realised by exactly HC, RS and
\* attached runsc, all with committed ownership, until the HC sees RS or
\* runsc end (then it closes every session and tears the generation down).
Inv_FR12_PublishedGenerationHasConstitutiveProcesses ==
    (decision = "Published" /\ \E c \in Coordinators : hc[c] \in LeaderPhases) =>
        /\ runtimeEnded \/ rs = "Running"
        /\ runtimeEnded \/ runsc = "Running"
        /\ slot["SandboxRuntimeSupervisor"] = "Committed"
        /\ slot["SandboxAttachedRunsc"] = "Committed"

\* FR-13: attached runsc never outlives its RS while a leader serves, except
\* between the RS's own end and runsc's parent-death edge.
Inv_FR13_SandboxCoupledToSupervisor ==
    (runsc = "Running" /\ rs # "Running") =>
        (decision = "Recovering" \/ runtimeEnded \/ \A c \in Coordinators : hc[c] \notin LeaderPhases)

\* FR-18 (with SR-5 of the earlier revision): network readiness gates the
\* sandbox start and publication.
Inv_FR18_NetworkReadyBeforeSandbox ==
    (decision \in {"Starting", "Published"} /\ slot["SandboxAttachedRunsc"] # "Unassigned") =>
        Ready("Network")

Inv_FR18_NetworkReadyBeforePublication ==
    (decision \in {"Starting", "Published"} /\ part["Publication"] # "None") =>
        Ready("Network")

\* SR-7: a host process runs only after approval and only on its own
\* session's HostProcess route.
Inv_SR7_HostProcessOnlyAfterApproval ==
    \A s \in Sessions : esc[s] = "Running" => escApproval[s] \in {"Developer", "Auto"}

Inv_SR7_HostProcessOnlyOnHostProcessRoute ==
    \A s \in Sessions : (esc[s] = "Running") <=> (route[s] = "HostProcess")

\* SR-8: auto-approval only for an exact rule match.
Inv_SR8_AutoApprovalOnlyForExactRule ==
    \A s \in Sessions : escApproval[s] = "Auto" => escMatch[s] = "Exact"

\* SR-9: only a credential of the current generation registers.
Inv_SR9_StaleCredentialNeverRegisters ==
    \A s \in Sessions : sess[s] \in TerminalRecorded => sessGen[s] = gen

Inv_SR9_FingerprintMismatchNeverEnrolled ==
    \A s \in Sessions : sess[s] \in {"Enrolled"} \cup TerminalRecorded => sessFp[s] = "Match"

\* SR-16: session control and escalation exist only on the live Host
\* Coordinator face of the published generation.
Inv_SR16_SessionControlOnlyOnCoordinatorFace ==
    \A s \in Sessions :
        (sess[s] \in TerminalRecorded \/ esc[s] # "None") =>
            (decision = "Published" /\ \E c \in Coordinators : hc[c] \in LeaderPhases)

\* SR-17: the sandbox attachment is authorised by the generation's committed
\* Network role instance (which itself rests on committed helper ownership).
Inv_SR17_SandboxAttachedToCommittedNetworkRole ==
    (decision \in {"Starting", "Published"} /\ slot["SandboxAttachedRunsc"] # "Unassigned") =>
        (Ready("Network") /\ Ready("Helper"))

\* DX-4: a session's terminal carries only its own sandbox PTY, its own prompt
\* or its own host process.
Inv_DX4_OutputNeverCrossesSessions ==
    \A s \in Sessions :
        /\ route[s] # "None" => sess[s] = "Registered"
        /\ route[s] = "HostProcess" => esc[s] = "Running"
        /\ route[s] = "Prompt" => esc[s] \in {"Prompting", "Approved"}
        /\ ptyFwd[s] => route[s] = "Sandbox"

\* Spec 3.4: terminal events and PTY output only on the sandbox route.
Inv_Spec_TerminalEventsOnlyOnSandboxRoute ==
    \A s \in Sessions : ptyFwd[s] => (route[s] = "Sandbox" /\ sess[s] = "Registered")

\* OR-3: no host process outlives its request, session or coordinator.
Inv_OR3_NoStrandedHostProcess ==
    \A s \in Sessions :
        esc[s] = "Running" =>
            (sess[s] = "Registered" /\ lockHolder # "None" /\ route[s] = "HostProcess")

\* Spec 3.8: a cancellation waits to be applied only while its request has
\* the terminal or is approved to take it; every step that ends a request
\* clears it, so none is left to cancel the session's next request.
Inv_Spec_CancellationOnlyForAnOpenRequest ==
    \A s \in Sessions :
        escCancel[s] => esc[s] \in {"Prompting", "Approved", "Running"}

\* Spec 3.8: result chunks exist only for executed requests, within the window.
Inv_Spec_ResultChunksOnlyFromExecution ==
    \A s \in Sessions :
        escUnacked[s] > 0 => (esc[s] \in {"Running", "Resolved"} /\ escUnacked[s] <= MaxUnackedChunks)

\* Spec 3.3: staged ownership never satisfies an active role, readiness or
\* publication.
Inv_Spec_StagedNeverSatisfiesActive ==
    \A r \in Roles :
        IsActive(r) => \A ps \in ProcSlots : SlotRole(ps) # r \/ slot[ps] = "Committed"

Inv_Spec_StagedNeverSatisfiesReadiness ==
    (decision \in {"Starting", "Published"} /\ part["Network"] = "Committed") =>
        (slot["SandboxRuntimeSupervisor"] = "Committed" /\ Ready("Helper"))

Inv_Spec_StagedNeverPublishes ==
    decision = "Published" =>
        \A ps \in ProcSlots : SlotRole(ps) \notin RequiredRoles \/ slot[ps] = "Committed"

Inv_Spec_PublicationOnlyWhenAllActive ==
    (decision \in {"Starting", "Published"} /\ part["Publication"] # "None") =>
        \A r \in Roles : r = "Publication" \/ Ready(r)

\* Spec 3.3: dependent resources are created only under committed
\* prerequisites (never under staged ownership).
Inv_Spec_DependentResourcesNeedCommittedPrerequisites ==
    decision \in {"Starting", "Published"} =>
        /\ \A r \in Roles : (r # "Sandbox" /\ part[r] # "None") => slot["SandboxRuntimeSupervisor"] = "Committed"
        /\ \A ps \in ProcSlots : (ps # "SandboxRuntimeSupervisor" /\ slot[ps] # "Unassigned") => slot["SandboxRuntimeSupervisor"] = "Committed"
        /\ part["StateAnchor"] # "None" => part["PreparedLower"] = "LeaseHeld"
        /\ slot["SandboxAttachedRunsc"] # "Unassigned" => (Ready("StateAnchor") /\ Ready("GitRouting"))

\* Schemas "Participant ownership": bare intent and clean hold no process
\* ownership; process slots are filled only inside a snapshot.
Inv_Spec_EmptySnapshotHoldsNoProcess ==
    \A ps \in ProcSlots : part[SlotRole(ps)] \in {"None", "Intent", "Clean"} => slot[ps] = "Unassigned"

\* Spec 3.3: a live constitutive process always has durable (staged or
\* committed) ownership recorded.
Inv_Spec_LiveProcessesHaveDurableOwnership ==
    /\ rs # "Absent" => slot["SandboxRuntimeSupervisor"] # "Unassigned"
    /\ runsc # "Absent" => slot["SandboxAttachedRunsc"] # "Unassigned"

\* Spec 3.3/3.4: runtime participants become clean only after RS and attached
\* runsc absence is proved.
Inv_Spec_CleanOnlyAfterRuntimeAbsence ==
    \A r \in Roles : (r # "Publication" /\ part[r] = "Clean") => (rs = "Absent" /\ runsc = "Absent")

\* Spec 3.6: a mounted (or possibly mounted) State Anchor is never unleased.
Inv_Spec_MountedStateAnchorNeverUnleased ==
    part["StateAnchor"] \in {"Intent", "Acquiring", "Prepared", "ReleaseIntent"} =>
        part["PreparedLower"] = "LeaseHeld"

\* Spec 3.6 unmount and lease-release step 3: prepared-lower release intent
\* only after the anchors are clean (their mounts observed absent) and the
\* runtime that could hold them is absent.
Inv_Spec_LeaseReleaseAfterAnchorsAbsent ==
    part["PreparedLower"] \in {"ReleaseIntent", "Clean"} =>
        /\ part["StateAnchor"] \in {"None", "Clean"}
        /\ rs = "Absent"
        /\ runsc = "Absent"

\* The publication participant is committed exactly while the generation is
\* published.
Inv_Spec_PublicationMatchesDecision ==
    decision \in {"Starting", "Published"} =>
        ((part["Publication"] = "Committed") <=> (decision = "Published"))

\* Nothing is released while the generation is starting or served.
Inv_Spec_NoReleaseWhileServing ==
    decision \in {"Starting", "Published"} =>
        \A r \in Roles : part[r] \notin {"ReleaseIntent", "Clean"}

\* A live HC stops the runtime only after every runtime participant has durable
\* release intent (physical cleanup is always backed by recorded intent).
Inv_Spec_RuntimeStopsOnlyAfterReleaseIntent ==
    (decision \in {"Starting", "Published", "TearingDown"} /\ rs = "Absent" /\ ~runtimeEnded /\ \E c \in Coordinators : hc[c] \in LeaderPhases) =>
        \A r \in Roles : r \in {"PreparedLower", "Publication"} \/ part[r] \notin LiveSnapshot

\* Release intents follow the release order (publication withdrawn first).
Inv_Spec_ReleaseIntentOrder ==
    \A r, d \in Roles :
        (decision \in ReleasePhases /\ ReleaseRank(d) < ReleaseRank(r) /\ part[r] \in {"ReleaseIntent", "Clean"}) =>
            part[d] \notin LiveSnapshot

\* Release order: publication first, prepared-lower lease last.
Inv_Spec_ReleaseOrder ==
    \A r, d \in Roles :
        (decision \in ReleasePhases /\ ReleaseRank(d) < ReleaseRank(r) /\ part[r] = "Clean") =>
            part[d] \in {"None", "Clean"}

\* A generation acquires only the roles its configuration requires: a build
\* that does not implement a role never records it (Lazaret-notes.md
\* "Required roles").  With RequiredRoles = Roles it holds trivially.
Inv_Spec_OnlyRequiredRolesAcquired ==
    \A r \in Roles : r \notin RequiredRoles => part[r] = "None"

\* A vacant Domain has nothing running and nothing unreleased; an RS that lost
\* its lease always belongs to the retained generation record.
Inv_Spec_VacantMeansClean ==
    decision = "Vacant" =>
        (rs = "Absent" /\ runsc = "Absent" /\ \A r \in Roles : part[r] \in {"None", "Clean"})

Inv_Spec_LeaseLostRuntimeKeepsItsRecord ==
    rs = "LeaseLost" =>
        (decision \in LiveGeneration /\ part["Sandbox"] \notin {"None", "Intent", "Clean"})

\* Spec 3.4: no session terminal outlives its generation's retirement: a
\* retained release, a failed start and a lost HC's sessions are all cleaned
\* before the generation is Vacant.
Inv_Spec_RetiredGenerationLeavesNoTerminal ==
    decision = "Vacant" => ~TerminalsUnclean

-----------------------------------------------------------------------------
\* Temporal properties

ParticipantStep(r) ==
    \/ part'[r] = part[r]
    \/ gen' = gen + 1 /\ part'[r] = "None"
    \/ part[r] = "None" /\ part'[r] = "Intent"
    \/ part[r] = "Intent" /\ part'[r] = "Acquiring"
    \/ part[r] = "Acquiring" /\ part'[r] = ActiveState(r)
    \/ part[r] \in LiveSnapshot /\ part'[r] = "ReleaseIntent"
    \/ part[r] = "ReleaseIntent" /\ part'[r] = "Clean"
    \/ part[r] = "Intent" /\ part'[r] = "Clean" /\ rs = "Absent" /\ runsc = "Absent"

SlotStep(ps) ==
    \/ slot'[ps] = slot[ps]
    \/ gen' = gen + 1 /\ slot'[ps] = "Unassigned"
    \/ slot[ps] = "Unassigned" /\ slot'[ps] = "Staged"
    \/ slot[ps] = "Staged" /\ slot'[ps] = "Committed"
    \/ slot'[ps] = "Unassigned" /\ part[SlotRole(ps)] = "ReleaseIntent" /\ part'[SlotRole(ps)] = "Clean"

\* Schemas "Participant ownership": no bare intent moves directly to an active
\* state; only release intent (or a bare intent after runtime absence) becomes
\* clean; recorded evidence is never cleared by an ordinary transition.
Live_Spec_ParticipantLifecycleOrder ==
    [][\A r \in Roles : ParticipantStep(r)]_vars

\* Spec 3.6 unmount and lease-release step 3: released anchors become clean
\* only in the transaction that records the lease's release intent.
Live_Spec_AnchorCleanWithLeaseReleaseIntent ==
    [][(part["StateAnchor"] = "ReleaseIntent" /\ part'["StateAnchor"] = "Clean") =>
        (part["PreparedLower"] = "LeaseHeld" /\ part'["PreparedLower"] = "ReleaseIntent")]_vars

\* Spec 3.3: Unassigned -> Staged -> Committed, cleared only by the clean
\* transaction of its participant.
Live_Spec_ProcessSlotLifecycleOrder ==
    [][\A ps \in ProcSlots : SlotStep(ps)]_vars

AcquisitionStep ==
    \/ \E r \in Roles : part'[r] # part[r] /\ part'[r] \in {"Intent", "Acquiring", "LeaseHeld", "Prepared", "Committed"}
    \/ \E ps \in ProcSlots : slot'[ps] # slot[ps] /\ slot'[ps] # "Unassigned"
    \/ rs # "Running" /\ rs' = "Running"
    \/ runsc # "Running" /\ runsc' = "Running"

\* Spec 3.3/3.4: nothing is acquired, staged, committed or started except
\* while the generation is starting (teardown and recovery only release).
Live_Spec_AcquisitionOnlyWhileStarting ==
    [][AcquisitionStep => decision = "Starting"]_vars

\* FR-17/OR-1: the durable generation document changes only while a
\* coordinator holds the Domain lock (losers and lost HCs never write).
Live_FR17_StoreWrittenOnlyUnderLock ==
    [][(lockHolder = "None" /\ lockHolder' = "None") => UNCHANGED durableVars]_vars

\* OR-1, FR-17: only the coordinator holding the Domain lock acts for the
\* Domain. Every step a coordinator takes for the Domain (all but its own
\* election) is taken while it holds the lock.
Live_OR1_OnlyTheLockHolderActs ==
    [][actor' # "None" => lockHolder = actor']_vars

\* Spec 3.4/3.6: recovery resumes only from matching durable identity; a
\* mismatched record is retained untouched.
Live_Spec_MismatchedRecordRetained ==
    [][recordIdentity = "Mismatched" => UNCHANGED durableVars]_vars

\* Spec 3.4: left-over session terminals are recorded clean only while the
\* whole runtime (RS and attached runsc, and with them every guest group) is
\* absent.
Live_Spec_TerminalsCleanedAfterRuntimeAbsence ==
    [][(termsLeft = TRUE /\ termsLeft' = FALSE) => (rs = "Absent" /\ runsc = "Absent")]_vars

\* Spec 3.4 physical Session Terminal acquisition and release (schemas.md
\* "Session terminal ownership": Intent -> Running -> ReleaseIntent ->
\* Clean): a session's terminal intent is recorded only after its
\* enrollment, it runs only after its intent, its release intent follows its
\* intent or its running record, and a recorded terminal leaves its session
\* clean only through the live HC's release (from Closing); otherwise it is
\* left recorded for the generation's release (retained, or its HC lost).
TerminalStep(s) ==
    /\ (sess[s] # "Starting" /\ sess'[s] = "Starting") => sess[s] = "Enrolled"
    /\ (sess[s] # "Registered" /\ sess'[s] = "Registered") => sess[s] = "Starting"
    /\ (sess[s] # "Closing" /\ sess'[s] = "Closing") => sess[s] \in {"Starting", "Registered"}
    /\ (sess[s] \in TerminalRecorded /\ sess'[s] \notin TerminalRecorded) =>
           \/ sess[s] = "Closing" /\ lockHolder' # "None"
           \/ termsLeft' = TRUE

Live_Spec_TerminalLifecycleOrder ==
    [][\A s \in Sessions : TerminalStep(s)]_vars

\* Spec 3.4: a terminal's acquisition ends, in its running record or in its
\* release, unless its HC is lost.
Live_Spec_TerminalStartEnds ==
    \A s \in Sessions : (sess[s] = "Starting") ~> (sess[s] # "Starting")

\* OR-2: an accepted request resolves to a delivered result unless its
\* session disconnects (or its coordinator is lost) first.
Live_OR2_AcceptedRequestsResolve ==
    \A s \in Sessions : (esc[s] = "Accepted") ~> (esc[s] \in {"Delivered", "None"})

\* OR-3: a cancellation always takes effect: nothing stays open or running.
Live_OR3_CancelNeverStrands ==
    \A s \in Sessions : escCancel[s] ~> (esc[s] \notin RequestOpen)

\* OR-3: no session's terminal stays taken by a prompt or host process.
Live_OR3_TerminalRouteReturns ==
    \A s \in Sessions : (route[s] \in {"Prompt", "HostProcess"}) ~> (route[s] \in {"Sandbox", "None"})

\* FR-6: when no session remains, the generation is torn down (unless a new
\* session registers first or the coordinator is lost).
Live_FR6_LastSessionTearsDown ==
    (decision = "Published" /\ NoSessionsLeft /\ lockHolder # "None") ~>
        (decision = "Vacant" \/ lockHolder = "None" \/ ~NoSessionsLeft)

Live_FR6_TeardownCompletes ==
    (decision = "TearingDown" /\ lockHolder # "None") ~>
        (decision = "Vacant" \/ lockHolder = "None")

\* Spec 3.4/3.6: a started bootstrap recovery completes (unless its own
\* coordinator is lost).
Live_Spec_RecoveryCompletes ==
    (decision = "Recovering" /\ lockHolder # "None") ~>
        (decision = "Vacant" \/ lockHolder = "None")

\* FR-13: after HC loss the RS lease-loss path leaves no constitutive
\* process behind.
Live_FR13_LeaseLossStopsRuntime ==
    (rs = "LeaseLost") ~> (rs = "Absent" /\ runsc = "Absent")

\* FR-13: runsc whose RS ended follows it on the parent-death edge.
Live_FR13_SandboxEndsWithSupervisor ==
    (rs = "Absent" /\ runsc = "Running") ~> (runsc = "Absent")

\* FR-12/FR-6: once the HC has seen the runtime end, the published generation
\* is torn down (every session is closed first) unless the HC is lost.
Live_FR12_RuntimeLossEndsPublication ==
    (decision = "Published" /\ runtimeEnded /\ lockHolder # "None") ~>
        (decision # "Published" \/ lockHolder = "None")

-----------------------------------------------------------------------------
\* Action properties added for guard mutation (docs/mutation-report.md): each
\* states a rule of the specification as a step predicate, checked by TLC and
\* by stateright over the generated Rust on every step.

\* Spec 3.3 (non-blocking Domain flock; "concurrent losers shall fail closed",
\* OR-1), 3.4/3.6 (recovery resumes only from matching durable identity, a
\* mismatch fails closed): one Host Coordinator instance per process lifetime
\* moves only forward.  A candidate fails closed only when the flock is held,
\* a bootstrap leads only from a matching record and fails closed only on a
\* mismatched one or, writing nothing, over its own vacant record (another
\* generation could not be recovered), and a spent instance never takes the
\* lock again.
CoordinatorStep(c) ==
    \/ hc'[c] = hc[c]
    \/ hc[c] = "Idle" /\ hc'[c] = "Bootstrapping" /\ lockHolder = "None"
    \/ hc[c] = "Idle" /\ hc'[c] = "FailedClosed" /\ lockHolder # "None"
    \/ hc[c] = "Bootstrapping" /\ hc'[c] = "Leading" /\ recordIdentity = "Matching"
    \/ hc[c] = "Bootstrapping" /\ hc'[c] = "FailedClosed" /\ recordIdentity = "Mismatched"
    \/ hc[c] = "Bootstrapping" /\ hc'[c] = "FailedClosed" /\ decision = "Vacant" /\ UNCHANGED durableVars
    \/ hc[c] = "Leading" /\ hc'[c] = "Serving"
    \/ hc[c] \in HoldingPhases /\ hc'[c] = "Exited"

Live_OR1_CoordinatorLifecycleOrder ==
    [][\A c \in Coordinators : CoordinatorStep(c)]_vars

\* Schemas "durable_decision"; glossary Domain generation (a generation is
\* torn down or recovered, never dropped); spec 3.4 "Failure before the
\* running state never admits the terminal": Vacant -> Starting ->
\* (Published ->) TearingDown -> Vacant, and bootstrap recovery only of a
\* live generation.
DecisionStep ==
    \/ decision' = decision
    \/ decision = "Vacant" /\ decision' = "Starting"
    \/ decision = "Starting" /\ decision' \in {"Published", "TearingDown"}
    \/ decision = "Published" /\ decision' = "TearingDown"
    \/ decision \in LiveGeneration /\ decision' = "Recovering"
    \/ decision \in ReleasePhases /\ decision' = "Vacant"

Live_Spec_GenerationDecisionOrder ==
    [][DecisionStep]_vars

\* SR-16 (session control only on the live Host Coordinator face of the
\* published generation); spec 3.3 cryptography (the HC issues the client
\* leaf bound to the published generation): a credential is issued only by a
\* serving leader of a published generation.
Live_SR16_CredentialsIssuedOnlyByPublishedLeader ==
    [][\A s \in Sessions :
          (sess[s] # "Enrolled" /\ sess'[s] = "Enrolled") =>
              (decision = "Published" /\ \E c \in Coordinators : hc[c] \in LeaderPhases)]_vars

\* FR-12: a generation is published only while the sandbox it publishes
\* runs (RS and attached runsc have not ended).
Live_FR12_PublishedOnlyWhileRuntimeRuns ==
    [][(decision # "Published" /\ decision' = "Published") => (rs = "Running" /\ runsc = "Running")]_vars

\* FR-2: a session joins the one running sandbox; after the HC has seen the
\* runtime end, no session registers.
Live_FR2_SessionsJoinTheRunningSandbox ==
    [][\A s \in Sessions :
          (sess[s] # "Registered" /\ sess'[s] = "Registered") => (rs = "Running" /\ runsc = "Running")]_vars

\* Spec 3.3/3.4 (the HC holds the lifetime lease and watches its RS and
\* runsc): the HC learns that the runtime ended only from an end it saw while
\* the lease was live: RS or attached runsc going from Running to Absent
\* under a serving leader.
Live_Spec_RuntimeEndSeenUnderTheLease ==
    [][(~runtimeEnded /\ runtimeEnded') =>
          /\ \E c \in Coordinators : hc[c] \in LeaderPhases
          /\ rs = "Running"
          /\ (rs' = "Absent" \/ (runsc = "Running" /\ runsc' = "Absent"))]_vars

====
