---- MODULE PreparedLower ----
\* Prepared-lower protocol model (spec 3.6 "Prepared lower" and "Durable
\* generation document refinement"; schemas.md "Participant ownership" and
\* "Storage Catalog"). Written in the state-table dialect of protocol/README.md:
\* Rust transition code is generated from this file, so every action is named
\* after the physical step it refines and every guard is a separate conjunct.
\*
\* Three authorities, kept apart as in the spec:
\*   Storage Catalog (host-wide, redb, one catalog-lock section per action):
\*     prep, artifact, lease.
\*   Domain Store (per Domain, written only by the lock-holding Host
\*     Coordinator): gen, pl, plArt, sa, refused.
\*   Physical world and processes: worker, stage, hc, rs, anchorReq, mount,
\*     and the environment-fault budgets/markers hcLosses, workerCrashes,
\*     leaseLost.
\* Every action that touches the catalog is one catalog transaction; every
\* action that touches the Domain Store is one store transaction; no action
\* writes both stores (the two stores are not one transactional database).
EXTENDS Naturals

CONSTANTS
    Artifacts,    \* prepared-artifact IDs (one prepare operation slot each)
    Domains,      \* Domain IDs; >= 2 so that an artifact can be shared
    MaxGen,       \* generations of a Domain in FaultDomains (others: 1)
    MaxHcLoss,    \* Host Coordinator hard losses per Domain (fault budget)
    MaxWorkerCrash, \* preparation-worker crashes in the whole run (fault budget)
    FaultDomains, \* Domains subject to HC loss and external catalog faults
    PublishedAtStart \* artifacts already published in the Storage Root at start

VARIABLES
    \* ---- Storage Catalog ----
    prep,       \* PrepareOperation record for the artifact's operation
    artifact,   \* PreparedArtifact record state
    lease,      \* ArtifactLease rows: lease[a][d][g] = exact (a, d, g) row present
    \* ---- physical preparation ----
    worker,     \* the short-lived preparation worker of the operation
    stage,      \* the tree at the operation's stage path
    \* ---- Domain Store (one per Domain) ----
    gen,        \* current generation number (0 = none started yet)
    pl,         \* PreparedLower participant state of the current generation
    plArt,      \* prepared_artifact_id recorded by PreparedLower
    sa,         \* StateAnchor participant state of the current generation
    refused,    \* the Domain record was found inconsistent and fails closed
    \* ---- processes and mounts ----
    hc,         \* Host Coordinator holding the Domain flock, and its mode
    rs,         \* Runtime Supervisor of the current generation
    anchorReq,  \* RS holds an in-flight "create the exact mount" request
    mount,      \* the exact State Anchor mount of the current generation
    \* ---- environment faults ----
    hcLosses,   \* Host Coordinator hard losses so far (bounded)
    workerCrashes, \* preparation-worker crashes so far (bounded)
    leaseLost   \* the catalog lease was removed outside the protocol

vars == <<prep, artifact, lease, worker, stage, gen, pl, plArt, sa, refused,
          hc, rs, anchorReq, mount, hcLosses, workerCrashes, leaseLost>>

Gens == 1..MaxGen

\* Generation bound of one Domain: a fault Domain lives MaxGen generations so
\* that a generation started after recovery is checked against the leftovers
\* of the recovered one; the fault-free Domain lives one generation.
GenBound(d) == IF d \in FaultDomains THEN MaxGen ELSE 1

PrepStates     == {"None", "Intent", "Owned"}
ArtifactStates == {"None", "Available", "Reclaiming", "Removed"}
WorkerStates   == {"Idle", "Running", "Dead"}
\* "Own": the tree this operation created (after Owned its device/inode are
\* the recorded evidence); "Foreign": any other tree at that path;
\* "Removed"/"ForeignRemoved": the path was emptied by recovery, and what was
\* deleted. "ForeignRemoved" is the physical outcome OR-7 forbids.
StageStates    == {"Absent", "Own", "Foreign", "Removed", "ForeignRemoved"}
PlStates       == {"None", "Intent", "LeaseHeld", "ReleaseIntent", "Clean"}
SaStates       == {"None", "Intent", "Prepared", "ReleaseIntent", "Clean"}
HcStates       == {"Absent", "Running", "Recovering"}
RsStates       == {"Absent", "Running", "Orphaned"}
MountStates    == {"Absent", "Mounted"}

\* ---- helper predicates (inlined by the generator) ----
\* The exact (plArt[d], d, gen[d]) catalog row is present.
LeasePresent(d) == \E a \in Artifacts : plArt[d] = a /\ lease[a][d][gen[d]]
NoLease(a) == \A d \in Domains : \A g \in Gens : ~lease[a][d][g]
NoDomainLease(d) == \A a \in Artifacts : \A g \in Gens : ~lease[a][d][g]
\* The Domain Store record of the current generation is clean (or empty).
RecordClean(d) == pl[d] \in {"None", "Clean"} /\ sa[d] \in {"None", "Clean"}
\* A Domain-Store writer exists: the owning Host Coordinator, or a bootstrap
\* Host Coordinator after the Runtime Supervisor is absent (spec 3.6:
\* "Bootstrap recovery begins only after the Runtime Supervisor and attached
\* runsc are absent").
MayAct(d) == hc[d] = "Running" \/ (hc[d] = "Recovering" /\ rs[d] = "Absent")
\* A prepare operation retained fail-closed: never deleted, never published.
PrepRetained(a) ==
    /\ worker[a] = "Dead"
    /\ (prep[a] = "Intent" \/ (prep[a] = "Owned" /\ stage[a] = "Foreign"))

TypeOK ==
    /\ prep \in [Artifacts -> PrepStates]
    /\ artifact \in [Artifacts -> ArtifactStates]
    /\ lease \in [Artifacts -> [Domains -> [Gens -> BOOLEAN]]]
    /\ worker \in [Artifacts -> WorkerStates]
    /\ stage \in [Artifacts -> StageStates]
    /\ gen \in [Domains -> 0..MaxGen]
    /\ pl \in [Domains -> PlStates]
    /\ plArt \in [Domains -> Artifacts \cup {"None"}]
    /\ sa \in [Domains -> SaStates]
    /\ refused \in [Domains -> BOOLEAN]
    /\ hc \in [Domains -> HcStates]
    /\ rs \in [Domains -> RsStates]
    /\ anchorReq \in [Domains -> BOOLEAN]
    /\ mount \in [Domains -> MountStates]
    /\ hcLosses \in [Domains -> 0..MaxHcLoss]
    /\ workerCrashes \in 0..MaxWorkerCrash
    /\ leaseLost \in [Domains -> BOOLEAN]

Init ==
    /\ prep = [a \in Artifacts |-> "None"]
    /\ artifact = [a \in Artifacts |-> IF a \in PublishedAtStart THEN "Available" ELSE "None"]
    /\ lease = [a \in Artifacts |-> [d \in Domains |-> [g \in Gens |-> FALSE]]]
    /\ worker = [a \in Artifacts |-> "Idle"]
    /\ stage = [a \in Artifacts |-> "Absent"]
    /\ gen = [d \in Domains |-> 0]
    /\ pl = [d \in Domains |-> "None"]
    /\ plArt = [d \in Domains |-> "None"]
    /\ sa = [d \in Domains |-> "None"]
    /\ refused = [d \in Domains |-> FALSE]
    /\ hc = [d \in Domains |-> "Absent"]
    /\ rs = [d \in Domains |-> "Absent"]
    /\ anchorReq = [d \in Domains |-> FALSE]
    /\ mount = [d \in Domains |-> "Absent"]
    /\ hcLosses = [d \in Domains |-> 0]
    /\ workerCrashes = 0
    /\ leaseLost = [d \in Domains |-> FALSE]

\* =====================================================================
\* Preparation (Storage Catalog PrepareOperation; OR-7, FR-22)
\* =====================================================================

\* Catalog txn: record PrepareOperation stage_state=Intent (no device/inode)
\* before any stage exists, and start the preparation worker.
RecordPrepareIntent(a) ==
    /\ prep[a] = "None"
    /\ artifact[a] = "None"
    /\ prep' = [prep EXCEPT ![a] = "Intent"]
    /\ worker' = [worker EXCEPT ![a] = "Running"]
    /\ UNCHANGED <<artifact, lease, stage, gen, pl, plArt, sa, refused, hc, rs,
                   anchorReq, mount, hcLosses, workerCrashes, leaseLost>>

\* Worker: exclusive descriptor-relative creation of the stage directory
\* (fails with EEXIST when any tree occupies the path).
CreateStage(a) ==
    /\ worker[a] = "Running"
    /\ stage[a] = "Absent"
    /\ stage' = [stage EXCEPT ![a] = "Own"]
    /\ UNCHANGED <<prep, artifact, lease, worker, gen, pl, plArt, sa, refused,
                   hc, rs, anchorReq, mount, hcLosses, workerCrashes, leaseLost>>

\* Catalog txn: the same operation moves Intent -> Owned with the stage's
\* device and inode recorded.
RecordStageOwned(a) ==
    /\ worker[a] = "Running"
    /\ prep[a] = "Intent"
    /\ stage[a] = "Own"
    /\ prep' = [prep EXCEPT ![a] = "Owned"]
    /\ UNCHANGED <<artifact, lease, worker, stage, gen, pl, plArt, sa, refused,
                   hc, rs, anchorReq, mount, hcLosses, workerCrashes, leaseLost>>

\* Under the catalog lock: rename the owned stage into the artifact path and,
\* in one catalog transaction, insert the Available artifact and retire the
\* operation. Only an owned operation can publish.
PublishArtifact(a) ==
    /\ worker[a] = "Running"
    /\ prep[a] = "Owned"
    /\ stage[a] = "Own"
    /\ artifact' = [artifact EXCEPT ![a] = "Available"]
    /\ prep' = [prep EXCEPT ![a] = "None"]
    /\ worker' = [worker EXCEPT ![a] = "Idle"]
    /\ stage' = [stage EXCEPT ![a] = "Absent"]
    /\ UNCHANGED <<lease, gen, pl, plArt, sa, refused, hc, rs, anchorReq, mount,
                   hcLosses, workerCrashes, leaseLost>>

\* Fault: the preparation worker dies; its stage (if any) is abandoned.
PrepareWorkerCrash(a) ==
    /\ worker[a] = "Running"
    /\ workerCrashes < MaxWorkerCrash
    /\ worker' = [worker EXCEPT ![a] = "Dead"]
    /\ workerCrashes' = workerCrashes + 1
    /\ UNCHANGED <<prep, artifact, lease, stage, gen, pl, plArt, sa, refused,
                   hc, rs, anchorReq, mount, hcLosses, leaseLost>>

\* Environment: a tree Lazaret did not create occupies an abandoned stage path
\* (put there by another tool, or the owned stage was replaced).
ForeignTreeAppears(a) ==
    /\ prep[a] # "None"
    /\ worker[a] = "Dead"
    /\ stage[a] \in {"Absent", "Own"}
    /\ stage' = [stage EXCEPT ![a] = "Foreign"]
    /\ UNCHANGED <<prep, artifact, lease, worker, gen, pl, plArt, sa, refused,
                   hc, rs, anchorReq, mount, hcLosses, workerCrashes, leaseLost>>

\* Fail-closed abandoned-stage recovery (OR-7): only from an Owned operation
\* whose worker is gone, and only when the tree at the stage path matches the
\* recorded device/inode. The update records what the deletion physically
\* removed.
RecoverAbandonedStage(a) ==
    /\ prep[a] = "Owned"
    /\ worker[a] = "Dead"
    /\ stage[a] = "Own"
    /\ stage' = [stage EXCEPT ![a] = IF stage[a] = "Foreign"
                                      THEN "ForeignRemoved" ELSE "Removed"]
    /\ UNCHANGED <<prep, artifact, lease, worker, gen, pl, plArt, sa, refused,
                   hc, rs, anchorReq, mount, hcLosses, workerCrashes, leaseLost>>

\* Catalog txn: after the exact stage is proved absent, drop the operation so
\* the artifact may be prepared again by a new operation.
ForgetPrepareOperation(a) ==
    /\ prep[a] = "Owned"
    /\ stage[a] = "Removed"
    /\ prep' = [prep EXCEPT ![a] = "None"]
    /\ worker' = [worker EXCEPT ![a] = IF worker[a] = "Dead" THEN "Idle" ELSE worker[a]]
    /\ stage' = [stage EXCEPT ![a] = IF stage[a] = "Removed" THEN "Absent" ELSE stage[a]]
    /\ UNCHANGED <<artifact, lease, gen, pl, plArt, sa, refused, hc, rs,
                   anchorReq, mount, hcLosses, workerCrashes, leaseLost>>

\* Catalog txn: an Intent operation whose worker is gone is forgotten when
\* nothing is at its stage path, or only the stage it created before it
\* could record it Owned: the worker writes into its stage only after
\* RecordStageOwned, so that stage is empty, and the recovery removes it with
\* rmdir, which removes nothing else. A foreign tree is retained. The update
\* records what the removal physically took, as RecoverAbandonedStage does.
ForgetAbandonedIntent(a) ==
    /\ prep[a] = "Intent"
    /\ worker[a] = "Dead"
    /\ stage[a] \in {"Absent", "Own"}
    /\ prep' = [prep EXCEPT ![a] = "None"]
    /\ worker' = [worker EXCEPT ![a] = "Idle"]
    /\ stage' = [stage EXCEPT ![a] = IF stage[a] = "Foreign"
                                      THEN "ForeignRemoved" ELSE "Absent"]
    /\ UNCHANGED <<artifact, lease, gen, pl, plArt, sa, refused, hc, rs,
                   anchorReq, mount, hcLosses, workerCrashes, leaseLost>>

\* =====================================================================
\* Reclamation (OR-7)
\* =====================================================================

\* Catalog txn (policy-controlled GC): Available -> Reclaiming only when no
\* lease row for the artifact remains, from any Domain or generation.
BeginReclaim(a) ==
    /\ artifact[a] = "Available"
    /\ NoLease(a)
    /\ artifact' = [artifact EXCEPT ![a] = "Reclaiming"]
    /\ UNCHANGED <<prep, lease, worker, stage, gen, pl, plArt, sa, refused, hc,
                   rs, anchorReq, mount, hcLosses, workerCrashes, leaseLost>>

\* Delete the exact artifact tree, then remove the catalog record. Reclaiming
\* is durable, so an interrupted deletion resumes here.
RemoveArtifact(a) ==
    /\ artifact[a] = "Reclaiming"
    /\ artifact' = [artifact EXCEPT ![a] = "Removed"]
    /\ UNCHANGED <<prep, lease, worker, stage, gen, pl, plArt, sa, refused, hc,
                   rs, anchorReq, mount, hcLosses, workerCrashes, leaseLost>>

\* =====================================================================
\* Domain lock and Host Coordinator
\* =====================================================================

\* Non-blocking Domain flock, taken by a launch only while the Domain has work
\* (generations left, or a non-clean record). The new Host Coordinator reads
\* the Domain Store: a non-clean record makes it a bootstrap (recovering)
\* coordinator. A failed-closed Domain is re-checked, and refused, each time.
AcquireDomainLock(d) ==
    /\ hc[d] = "Absent"
    /\ (gen[d] < GenBound(d) \/ ~RecordClean(d))
    /\ hc' = [hc EXCEPT ![d] = IF RecordClean(d) THEN "Running" ELSE "Recovering"]
    /\ UNCHANGED <<prep, artifact, lease, worker, stage, gen, pl, plArt, sa,
                   refused, rs, anchorReq, mount, hcLosses, workerCrashes, leaseLost>>

\* The Host Coordinator exits after its generation is clean (or after
\* bootstrap recovery completed).
ReleaseDomainLock(d) ==
    /\ hc[d] \in {"Running", "Recovering"}
    /\ RecordClean(d)
    /\ hc' = [hc EXCEPT ![d] = "Absent"]
    /\ UNCHANGED <<prep, artifact, lease, worker, stage, gen, pl, plArt, sa,
                   refused, rs, anchorReq, mount, hcLosses, workerCrashes, leaseLost>>

\* Fault: Host Coordinator hard loss. The kernel drops the flock; a live
\* Runtime Supervisor observes its lifetime lease end and becomes orphaned.
HostCoordinatorLost(d) ==
    /\ d \in FaultDomains
    /\ hc[d] \in {"Running", "Recovering"}
    /\ hcLosses[d] < MaxHcLoss
    /\ hc' = [hc EXCEPT ![d] = "Absent"]
    /\ rs' = [rs EXCEPT ![d] = IF rs[d] = "Running" THEN "Orphaned" ELSE rs[d]]
    /\ hcLosses' = [hcLosses EXCEPT ![d] = hcLosses[d] + 1]
    /\ UNCHANGED <<prep, artifact, lease, worker, stage, gen, pl, plArt, sa,
                   refused, anchorReq, mount, workerCrashes, leaseLost>>

\* =====================================================================
\* Lease acquisition (spec 3.6, physical lease-acquisition steps 1-4)
\* =====================================================================

\* Step 1 (Domain Store txn): start the next generation and commit
\* prepared-lower intent with the intended prepared-artifact ID.
RecordLeaseIntent(d, a) ==
    /\ hc[d] = "Running"
    /\ RecordClean(d)
    /\ gen[d] < GenBound(d)
    /\ gen' = [gen EXCEPT ![d] = gen[d] + 1]
    /\ pl' = [pl EXCEPT ![d] = "Intent"]
    /\ plArt' = [plArt EXCEPT ![d] = a]
    /\ sa' = [sa EXCEPT ![d] = "None"]
    /\ UNCHANGED <<prep, artifact, lease, worker, stage, refused, hc, rs,
                   anchorReq, mount, hcLosses, workerCrashes, leaseLost>>

\* Step 2 (catalog txn under the Storage Catalog lock): insert the exact
\* (artifact, Domain, generation) lease; refused unless the artifact is
\* Available (a Reclaiming or Removed artifact cannot be leased again). A
\* lease already present is no step (the product reports it held).
InsertCatalogLease(d) ==
    /\ hc[d] = "Running"
    /\ pl[d] = "Intent"
    /\ ~LeasePresent(d)
    /\ \E a \in Artifacts : plArt[d] = a /\ artifact[a] = "Available"
    /\ lease' = [lease EXCEPT ![plArt[d]][d][gen[d]] = TRUE]
    /\ UNCHANGED <<prep, artifact, worker, stage, gen, pl, plArt, sa, refused,
                   hc, rs, anchorReq, mount, hcLosses, workerCrashes, leaseLost>>

\* Step 3 (Domain Store txn): the prepared-lower lease is held. Only after
\* the exact catalog row exists.
CommitLeaseHeld(d) ==
    /\ hc[d] = "Running"
    /\ pl[d] = "Intent"
    /\ LeasePresent(d)
    /\ pl' = [pl EXCEPT ![d] = "LeaseHeld"]
    /\ UNCHANGED <<prep, artifact, lease, worker, stage, gen, plArt, sa, refused,
                   hc, rs, anchorReq, mount, hcLosses, workerCrashes, leaseLost>>

\* Step 4a (Domain Store txn): commit State Anchor intent, then launch the
\* generation's Runtime Supervisor with the request to create the exact mount
\* in its namespaces.
RecordAnchorIntent(d) ==
    /\ hc[d] = "Running"
    /\ pl[d] = "LeaseHeld"
    /\ sa[d] = "None"
    /\ sa' = [sa EXCEPT ![d] = "Intent"]
    /\ rs' = [rs EXCEPT ![d] = "Running"]
    /\ anchorReq' = [anchorReq EXCEPT ![d] = TRUE]
    /\ UNCHANGED <<prep, artifact, lease, worker, stage, gen, pl, plArt, refused,
                   hc, mount, hcLosses, workerCrashes, leaseLost>>

\* Step 4b (Runtime Supervisor): create the exact State Anchor mount over the
\* leased prepared lower. The request lives in the supervisor (anchorReq is
\* never true without a live supervisor), so an in-flight request may complete
\* after the Host Coordinator was lost, before the supervisor notices.
MountStateAnchor(d) ==
    /\ anchorReq[d]
    /\ mount' = [mount EXCEPT ![d] = "Mounted"]
    /\ anchorReq' = [anchorReq EXCEPT ![d] = FALSE]
    /\ UNCHANGED <<prep, artifact, lease, worker, stage, gen, pl, plArt, sa,
                   refused, hc, rs, hcLosses, workerCrashes, leaseLost>>

\* Step 4c (Domain Store txn): commit Prepared State Anchor ownership with its
\* mount identity.
CommitAnchorPrepared(d) ==
    /\ hc[d] = "Running"
    /\ sa[d] = "Intent"
    /\ mount[d] = "Mounted"
    /\ sa' = [sa EXCEPT ![d] = "Prepared"]
    /\ UNCHANGED <<prep, artifact, lease, worker, stage, gen, pl, plArt, refused,
                   hc, rs, anchorReq, mount, hcLosses, workerCrashes, leaseLost>>

\* =====================================================================
\* Unmount and lease release (spec 3.6, steps 1-5; FR-17)
\* =====================================================================

\* Step 1 (Domain Store txn): State Anchor release intent, retaining the
\* exact mount and prepared-artifact identity. Taken by the owning Host
\* Coordinator at teardown, or by bootstrap recovery.
RecordAnchorReleaseIntent(d) ==
    /\ MayAct(d)
    /\ sa[d] \in {"Intent", "Prepared"}
    /\ sa' = [sa EXCEPT ![d] = "ReleaseIntent"]
    /\ UNCHANGED <<prep, artifact, lease, worker, stage, gen, pl, plArt, refused,
                   hc, rs, anchorReq, mount, hcLosses, workerCrashes, leaseLost>>

\* Step 2: verify the recorded mount identity and unmount it.
UnmountStateAnchor(d) ==
    /\ MayAct(d)
    /\ sa[d] = "ReleaseIntent"
    /\ mount[d] = "Mounted"
    /\ mount' = [mount EXCEPT ![d] = "Absent"]
    /\ UNCHANGED <<prep, artifact, lease, worker, stage, gen, pl, plArt, sa,
                   refused, hc, rs, anchorReq, hcLosses, workerCrashes, leaseLost>>

\* Step 3 (Domain Store txn): after independently observing the exact mount
\* absent (and no mount request in flight), atomically commit clean State
\* Anchor and prepared-lower release intent. A LeaseHeld record whose exact
\* catalog lease is absent is inconsistent and never advances.
CommitAnchorCleanLeaseReleaseIntent(d) ==
    /\ MayAct(d)
    /\ sa[d] = "ReleaseIntent"
    /\ mount[d] = "Absent"
    /\ ~anchorReq[d]
    /\ LeasePresent(d)
    /\ sa' = [sa EXCEPT ![d] = "Clean"]
    /\ pl' = [pl EXCEPT ![d] = "ReleaseIntent"]
    /\ UNCHANGED <<prep, artifact, lease, worker, stage, gen, plArt, refused, hc,
                   rs, anchorReq, mount, hcLosses, workerCrashes, leaseLost>>

\* Prepared-lower release intent when no State Anchor ownership exists
\* (acquisition failed or was interrupted before anchor intent). From Intent
\* the catalog row may or may not exist; from LeaseHeld it must.
RecordLeaseReleaseIntent(d) ==
    /\ MayAct(d)
    /\ sa[d] \in {"None", "Clean"}
    /\ pl[d] \in {"Intent", "LeaseHeld"}
    /\ pl[d] = "Intent" \/ LeasePresent(d)
    /\ pl' = [pl EXCEPT ![d] = "ReleaseIntent"]
    /\ UNCHANGED <<prep, artifact, lease, worker, stage, gen, plArt, sa, refused,
                   hc, rs, anchorReq, mount, hcLosses, workerCrashes, leaseLost>>

\* Step 4 (catalog txn under the Storage Catalog lock): recheck the matching
\* Domain release intent and exact mount absence, remove only the exact
\* generation lease.
RemoveCatalogLease(d) ==
    /\ MayAct(d)
    /\ pl[d] = "ReleaseIntent"
    /\ mount[d] = "Absent"
    /\ LeasePresent(d)
    /\ lease' = [lease EXCEPT ![plArt[d]][d][gen[d]] = FALSE]
    /\ UNCHANGED <<prep, artifact, worker, stage, gen, pl, plArt, sa, refused,
                   hc, rs, anchorReq, mount, hcLosses, workerCrashes, leaseLost>>

\* Normal teardown: after the exact mount is gone, the owning Host Coordinator
\* stops its Runtime Supervisor (which drops any unserved mount request).
StopRuntimeSupervisor(d) ==
    /\ hc[d] = "Running"
    /\ rs[d] = "Running"
    /\ mount[d] = "Absent"
    /\ rs' = [rs EXCEPT ![d] = "Absent"]
    /\ anchorReq' = [anchorReq EXCEPT ![d] = FALSE]
    /\ UNCHANGED <<prep, artifact, lease, worker, stage, gen, pl, plArt, sa,
                   refused, hc, mount, hcLosses, workerCrashes, leaseLost>>

\* Step 5 (Domain Store txn): clean prepared-lower state after the exact
\* catalog lease is absent (removed in step 4, or already absent) and the
\* runtime is absent; all physical fields are cleared.
CommitLeaseClean(d) ==
    /\ MayAct(d)
    /\ pl[d] = "ReleaseIntent"
    /\ ~LeasePresent(d)
    /\ rs[d] = "Absent"
    /\ pl' = [pl EXCEPT ![d] = "Clean"]
    /\ plArt' = [plArt EXCEPT ![d] = "None"]
    /\ UNCHANGED <<prep, artifact, lease, worker, stage, gen, sa, refused, hc,
                   rs, anchorReq, mount, hcLosses, workerCrashes, leaseLost>>

\* =====================================================================
\* Split lease-loss path and bootstrap recovery (spec 3.6)
\* =====================================================================

\* The surviving exact Runtime Supervisor stops the sandbox, verifies and
\* unmounts its exact State Anchor and exits, without opening the Domain Store
\* or the Storage Catalog: the catalog lease stays held.
RuntimeSupervisorLeaseLossUnmount(d) ==
    /\ rs[d] = "Orphaned"
    /\ mount' = [mount EXCEPT ![d] = "Absent"]
    /\ rs' = [rs EXCEPT ![d] = "Absent"]
    /\ anchorReq' = [anchorReq EXCEPT ![d] = FALSE]
    /\ UNCHANGED <<prep, artifact, lease, worker, stage, gen, pl, plArt, sa,
                   refused, hc, hcLosses, workerCrashes, leaseLost>>

\* Fault: the orphaned Runtime Supervisor dies before unmounting; the exact
\* mount remains for bootstrap recovery.
RuntimeSupervisorCrash(d) ==
    /\ rs[d] = "Orphaned"
    /\ rs' = [rs EXCEPT ![d] = "Absent"]
    /\ anchorReq' = [anchorReq EXCEPT ![d] = FALSE]
    /\ UNCHANGED <<prep, artifact, lease, worker, stage, gen, pl, plArt, sa,
                   refused, hc, mount, hcLosses, workerCrashes, leaseLost>>

\* Bootstrap recovery, the supervisor already unmounted: independently verify
\* exact mount absence, then atomically commit clean State Anchor and
\* prepared-lower release intent. Only bootstrap recovery may advance the
\* conservative HC-loss state (Prepared anchor, absent mount, present lease).
BootstrapCommitAnchorCleanLeaseReleaseIntent(d) ==
    /\ hc[d] = "Recovering"
    /\ rs[d] = "Absent"
    /\ sa[d] \in {"Intent", "Prepared"}
    /\ mount[d] = "Absent"
    /\ LeasePresent(d)
    /\ sa' = [sa EXCEPT ![d] = "Clean"]
    /\ pl' = [pl EXCEPT ![d] = "ReleaseIntent"]
    /\ UNCHANGED <<prep, artifact, lease, worker, stage, gen, plArt, refused, hc,
                   rs, anchorReq, mount, hcLosses, workerCrashes, leaseLost>>

\* Bootstrap recovery finds a Domain record claiming a held lease whose exact
\* catalog lease is absent: inconsistent, fails closed and is reported. The
\* record is retained; recovery neither recreates the lease nor mounts.
BootstrapRefuseMissingLease(d) ==
    /\ hc[d] = "Recovering"
    /\ rs[d] = "Absent"
    /\ pl[d] = "LeaseHeld"
    /\ ~LeasePresent(d)
    /\ refused' = [refused EXCEPT ![d] = TRUE]
    /\ hc' = [hc EXCEPT ![d] = "Absent"]
    /\ UNCHANGED <<prep, artifact, lease, worker, stage, gen, pl, plArt, sa, rs,
                   anchorReq, mount, hcLosses, workerCrashes, leaseLost>>

\* Fault: the exact catalog lease of a LeaseHeld record disappears outside the
\* protocol (catalog restored from an older copy, operator deletion) while the
\* Domain has no running process and no mount.  It strikes FaultDomains only
\* and once per Domain without saying so: a LeaseHeld record without a Host
\* Coordinator follows HC loss, which only FaultDomains suffer, and a lost
\* lease never comes back (the Domain fails closed).
ExternalCatalogLeaseLoss(d) ==
    /\ hc[d] = "Absent"
    /\ rs[d] = "Absent"
    /\ mount[d] = "Absent"
    /\ pl[d] = "LeaseHeld"
    /\ LeasePresent(d)
    /\ lease' = [lease EXCEPT ![plArt[d]][d][gen[d]] = FALSE]
    /\ leaseLost' = [leaseLost EXCEPT ![d] = TRUE]
    /\ UNCHANGED <<prep, artifact, worker, stage, gen, pl, plArt, sa, refused,
                   hc, rs, anchorReq, mount, hcLosses, workerCrashes>>

\* =====================================================================
\* Terminal states
\* =====================================================================

\* Every Domain has used all its generations and is clean with no process,
\* or is held failed-closed; every artifact is reclaimed or its operation is
\* retained fail-closed with a foreign tree at its stage path.
Terminated ==
    /\ \A d \in Domains : hc[d] = "Absent"
    /\ \A d \in Domains : rs[d] = "Absent"
    /\ \A d \in Domains : refused[d] \/ (RecordClean(d) /\ gen[d] = GenBound(d))
    /\ \A a \in Artifacts :
           \/ artifact[a] = "Removed"
           \/ artifact[a] = "None" /\ PrepRetained(a) /\ stage[a] = "Foreign"
    /\ UNCHANGED vars

Next ==
    \/ \E a \in Artifacts : RecordPrepareIntent(a)
    \/ \E a \in Artifacts : CreateStage(a)
    \/ \E a \in Artifacts : RecordStageOwned(a)
    \/ \E a \in Artifacts : PublishArtifact(a)
    \/ \E a \in Artifacts : PrepareWorkerCrash(a)
    \/ \E a \in Artifacts : ForeignTreeAppears(a)
    \/ \E a \in Artifacts : RecoverAbandonedStage(a)
    \/ \E a \in Artifacts : ForgetPrepareOperation(a)
    \/ \E a \in Artifacts : ForgetAbandonedIntent(a)
    \/ \E a \in Artifacts : BeginReclaim(a)
    \/ \E a \in Artifacts : RemoveArtifact(a)
    \/ \E d \in Domains : AcquireDomainLock(d)
    \/ \E d \in Domains : ReleaseDomainLock(d)
    \/ \E d \in Domains : HostCoordinatorLost(d)
    \/ \E d \in Domains, a \in Artifacts : RecordLeaseIntent(d, a)
    \/ \E d \in Domains : InsertCatalogLease(d)
    \/ \E d \in Domains : CommitLeaseHeld(d)
    \/ \E d \in Domains : RecordAnchorIntent(d)
    \/ \E d \in Domains : MountStateAnchor(d)
    \/ \E d \in Domains : CommitAnchorPrepared(d)
    \/ \E d \in Domains : RecordAnchorReleaseIntent(d)
    \/ \E d \in Domains : UnmountStateAnchor(d)
    \/ \E d \in Domains : CommitAnchorCleanLeaseReleaseIntent(d)
    \/ \E d \in Domains : RecordLeaseReleaseIntent(d)
    \/ \E d \in Domains : RemoveCatalogLease(d)
    \/ \E d \in Domains : StopRuntimeSupervisor(d)
    \/ \E d \in Domains : CommitLeaseClean(d)
    \/ \E d \in Domains : RuntimeSupervisorLeaseLossUnmount(d)
    \/ \E d \in Domains : RuntimeSupervisorCrash(d)
    \/ \E d \in Domains : BootstrapCommitAnchorCleanLeaseReleaseIntent(d)
    \/ \E d \in Domains : BootstrapRefuseMissingLease(d)
    \/ \E d \in Domains : ExternalCatalogLeaseLoss(d)
    \/ Terminated

\* =====================================================================
\* Fairness (TLC only; the generated Rust has none). See the notes file for
\* the justification of each assumption.
\* =====================================================================

\* F1 Host Coordinator progress: a coordinator that holds the lock keeps taking
\* its enabled teardown and recovery steps, and a Domain with unfinished work
\* is eventually locked again by some coordinator (the next launch, or the
\* bootstrap that a crashed launch triggers). Generations end (sessions leave,
\* FR-6): release steps are fair, acquisition steps are not.
DomainFairness(d) ==
    /\ WF_vars(AcquireDomainLock(d))
    /\ WF_vars(ReleaseDomainLock(d))
    /\ WF_vars(RecordAnchorReleaseIntent(d))
    /\ WF_vars(UnmountStateAnchor(d))
    /\ WF_vars(CommitAnchorCleanLeaseReleaseIntent(d))
    /\ WF_vars(RecordLeaseReleaseIntent(d))
    /\ WF_vars(RemoveCatalogLease(d))
    /\ WF_vars(StopRuntimeSupervisor(d))
    /\ WF_vars(CommitLeaseClean(d))
    /\ WF_vars(BootstrapCommitAnchorCleanLeaseReleaseIntent(d))
    /\ WF_vars(BootstrapRefuseMissingLease(d))

\* F2 Runtime Supervisor progress: an orphaned supervisor runs its lease-loss
\* teardown (or crashes, which is the other exit).
SupervisorFairness(d) ==
    /\ WF_vars(RuntimeSupervisorLeaseLossUnmount(d))

\* F3 Storage GC progress: a started reclamation and a started owned-stage
\* recovery finish. Starting reclamation is policy (not fair).
StorageFairness(a) ==
    /\ WF_vars(RemoveArtifact(a))
    /\ WF_vars(RecoverAbandonedStage(a))
    /\ WF_vars(ForgetPrepareOperation(a))

Spec ==
    /\ Init
    /\ [][Next]_vars
    /\ \A d \in Domains : DomainFairness(d)
    /\ \A d \in Domains : SupervisorFairness(d)
    /\ \A a \in Artifacts : StorageFairness(a)

\* =====================================================================
\* Invariants
\* =====================================================================

\* spec 3.6: "prevent a mounted State Anchor from becoming unleased": the
\* exact catalog lease row of the mounted generation is present.
Inv_Spec_MountedAnchorIsLeased ==
    \A d \in Domains : mount[d] = "Mounted" => LeasePresent(d)

\* FR-22 (earlier revision): a durable generation-bound prepared-lower lease
\* exists before State Anchor mount: State Anchor intent, an in-flight mount
\* request, a mount, Prepared or release-intent anchor ownership all require
\* the Domain record to hold the lease (spec 3.6 step 3 before step 4).
Inv_FR22_LeaseBeforeMount ==
    \A d \in Domains :
        (sa[d] \in {"Intent", "Prepared", "ReleaseIntent"}
            \/ anchorReq[d] \/ mount[d] = "Mounted") => pl[d] = "LeaseHeld"

\* SR-15: the State Anchor lower is a Lazaret-owned prepared artifact that is
\* published and not being reclaimed.
Inv_SR15_AnchorLowerIsPreparedArtifact ==
    \A d \in Domains : mount[d] = "Mounted" =>
        \E a \in Artifacts : plArt[d] = a /\ artifact[a] = "Available"

\* OR-7: no artifact is reclaimed (Reclaiming or Removed) while any lease row
\* names it; equivalently every lease names an Available artifact.
Inv_OR7_NoReclaimWhileLeased ==
    \A a \in Artifacts : \A d \in Domains : \A g \in Gens :
        lease[a][d][g] => artifact[a] = "Available"

\* OR-7: in-progress prepare trees and foreign trees are never deleted. A
\* foreign tree is never removed; a stage is removed only after its worker is
\* gone; a running worker past Owned still has its exact stage.
Inv_OR7_NeverDeleteInProgressOrForeign ==
    \A a \in Artifacts :
        /\ stage[a] # "ForeignRemoved"
        /\ stage[a] = "Removed" => worker[a] = "Dead"
        /\ (worker[a] = "Running" /\ prep[a] = "Owned") => stage[a] = "Own"

\* OR-7: exact-owned abandoned prepare trees are reclaimed only through
\* recovery backed by durable prepare intent in the Owned state (an
\* Intent-only stage has no recorded identity and is never deleted).
Inv_OR7_StageRecoveryOnlyFromOwnedIntent ==
    \A a \in Artifacts : stage[a] = "Removed" => prep[a] = "Owned"

\* schemas.md Storage Catalog: a prepare operation is durably recorded before
\* its stage is created, and the record outlives the tree it owns.
Inv_OR7_StageHasDurableIntent ==
    \A a \in Artifacts : stage[a] = "Own" => prep[a] \in {"Intent", "Owned"}

\* spec 3.6: only a lock-holding Host Coordinator releases the catalog lease;
\* the Runtime Supervisor's lease-loss unmount leaves it held. Observable
\* consequence: a Domain record that still claims the lease (LeaseHeld, which
\* includes the conservative HC-loss state) always has its exact catalog row,
\* unless the row was removed outside the protocol (leaseLost).
Inv_Spec_OnlyLockHolderReleasesLease ==
    \A d \in Domains : (pl[d] = "LeaseHeld" /\ ~leaseLost[d]) => LeasePresent(d)

\* FR-21: every catalog lease has matching Domain evidence: the Domain's
\* current generation records that artifact in a leasing or releasing state.
Inv_FR21_LeaseHasDomainEvidence ==
    \A a \in Artifacts : \A d \in Domains : \A g \in Gens :
        lease[a][d][g] =>
            /\ gen[d] = g
            /\ plArt[d] = a
            /\ pl[d] \in {"Intent", "LeaseHeld", "ReleaseIntent"}

\* FR-21: a clean (or empty) Domain record leaves nothing behind: no runtime,
\* no mount, no pending mount request, no catalog lease for the Domain.
Inv_FR21_CleanRecordHasNoResidue ==
    \A d \in Domains : RecordClean(d) =>
        /\ rs[d] = "Absent"
        /\ mount[d] = "Absent"
        /\ ~anchorReq[d]
        /\ NoDomainLease(d)

\* FR-17: cross-store release ordering: release intent, exact unmount,
\* catalog delete, Domain clean. Prepared-lower release intent exists only
\* after the anchor is clean and unmounted, with no mount in flight.
Inv_FR17_ReleaseOrdering ==
    \A d \in Domains : pl[d] = "ReleaseIntent" =>
        /\ sa[d] \in {"None", "Clean"}
        /\ mount[d] = "Absent"
        /\ ~anchorReq[d]

\* spec 3.6 step 3: State Anchor ownership becomes clean only after the exact
\* mount is observed absent.
Inv_Spec_AnchorCleanOnlyAfterUnmount ==
    \A d \in Domains : sa[d] \in {"None", "Clean"} => mount[d] = "Absent"

\* schemas.md "Participant ownership": an active (Prepared) State Anchor of a
\* serving generation has its mount; only HC loss produces the conservative
\* Prepared-without-mount state.
Inv_Spec_ActiveAnchorIsMounted ==
    \A d \in Domains : (hc[d] = "Running" /\ sa[d] = "Prepared") => mount[d] = "Mounted"

\* spec 3.6: a Domain record claiming a held lease whose exact catalog lease is
\* absent fails closed: the record keeps LeaseHeld, recovery neither recreates
\* the lease nor mounts the State Anchor.
Inv_Spec_MissingLeaseFailsClosed ==
    \A d \in Domains : leaseLost[d] =>
        /\ pl[d] = "LeaseHeld"
        /\ mount[d] = "Absent"
        /\ ~anchorReq[d]
        /\ NoDomainLease(d)

\* schemas.md "Participant ownership": a non-bare PreparedLower snapshot
\* (Intent with its artifact, LeaseHeld, ReleaseIntent) retains the exact
\* prepared-artifact identity and generation it was acquired for.
Inv_FR21_ReleaseIntentRetainsIdentity ==
    \A d \in Domains : pl[d] \in {"Intent", "LeaseHeld", "ReleaseIntent"} =>
        /\ plArt[d] # "None"
        /\ gen[d] > 0

\* spec 3.6 / 3.4: the State Anchor mount lives in the Runtime Supervisor's
\* namespaces; while the owning Host Coordinator serves, a mount implies a
\* live supervisor (normal teardown unmounts before stopping it; only the
\* lease-loss path can leave a mount behind a dead supervisor).
Inv_Spec_MountHeldBySupervisor ==
    \A d \in Domains : (hc[d] = "Running" /\ mount[d] = "Mounted") => rs[d] = "Running"

\* spec 3.6: fail-closed refusal is reserved for the inconsistent record (a
\* held-lease claim whose catalog lease is absent); a consistent Domain is
\* always recovered.
Inv_Spec_RefusalOnlyOnInconsistency ==
    \A d \in Domains : refused[d] => leaseLost[d]

\* =====================================================================
\* Temporal properties
\* =====================================================================

\* Every fault has a budget and every Domain a generation bound, so each
\* fair behaviour quiesces. The "something pending is eventually finished"
\* requirements are therefore stated as <>[](nothing pending), which implies
\* "pending ~> finished" here (a pending state can only recur finitely often)
\* and which TLC checks without a tableau.

\* spec 3.6 bootstrap recovery: every Domain record, in particular one left
\* behind by Host Coordinator hard loss, eventually stays clean, or is held
\* failed-closed.
Live_Spec_RecoveryCompletes ==
    <>[](\A d \in Domains : RecordClean(d) \/ refused[d])

\* spec 3.6 split lease loss: a State Anchor left mounted when its owning Host
\* Coordinator is gone is eventually unmounted (by the surviving supervisor or
\* by bootstrap recovery); no mount outlives the run.
Live_Spec_LostAnchorUnmounted ==
    <>[](\A d \in Domains : mount[d] = "Absent")

\* FR-17: every started cross-store release completes: eventually no Domain
\* is left in prepared-lower release intent.
Live_FR17_LeaseReleaseCompletes ==
    <>[](\A d \in Domains : pl[d] # "ReleaseIntent")

\* OR-7: every lease is eventually released and every artifact stays
\* lease-free from then on, so reclamation (whose only protocol condition is
\* NoLease) becomes and stays possible, including for shared artifacts.
Live_OR7_ReleasedArtifactsReclaimable ==
    <>[](\A a \in Artifacts : NoLease(a))

\* OR-7: a started reclamation completes.
Live_OR7_ReclaimCompletes ==
    <>[](\A a \in Artifacts : artifact[a] # "Reclaiming")

\* OR-7: an exact-owned abandoned stage is eventually recovered (or, if a
\* foreign tree took its place, retained and reported).
Live_OR7_AbandonedStageRecovered ==
    <>[](\A a \in Artifacts :
            ~(prep[a] = "Owned" /\ worker[a] = "Dead" /\ stage[a] = "Own"))

\* OR-7 / schemas.md Storage Catalog: an artifact record only moves forward,
\* Available -> Reclaiming -> Removed; a Reclaiming (being deleted) or
\* Removed artifact is never made Available again, and publication only
\* creates a new record. (An action property, checked on every step.)
ArtifactSuccessor(a) ==
    \/ artifact'[a] = artifact[a]
    \/ artifact[a] = "None" /\ artifact'[a] = "Available"
    \/ artifact[a] = "Available" /\ artifact'[a] = "Reclaiming"
    \/ artifact[a] = "Reclaiming" /\ artifact'[a] = "Removed"
Live_OR7_ArtifactLifecycleForward ==
    [][\A a \in Artifacts : ArtifactSuccessor(a)]_vars

\* spec 3.6: a record whose catalog lease vanished is eventually reported
\* (fails closed) rather than silently repaired. Both flags are monotone.
Live_Spec_MissingLeaseReported ==
    <>[](\A d \in Domains : leaseLost[d] => refused[d])

\* =====================================================================
\* Action properties added for guard mutation (docs/mutation-report.md):
\* each states a rule of the specification as a step predicate, checked by
\* TLC and by stateright over the generated Rust on every step.
\* =====================================================================

\* The Domain Store record of one Domain, unchanged by a step.
DomainRecordUnchanged(d) ==
    /\ gen'[d] = gen[d]
    /\ pl'[d] = pl[d]
    /\ plArt'[d] = plArt[d]
    /\ sa'[d] = sa[d]
    /\ refused'[d] = refused[d]

\* FR-17; spec 3.6 "Durable Domain state is ... opened exclusively by the Host
\* Coordinator ... that holds the Domain's exclusive lifecycle lock" and
\* "Bootstrap recovery begins only after the Runtime Supervisor and attached
\* runsc are absent": only MayAct(d) writes the Domain's record.
Live_FR17_DomainStoreWrittenOnlyByOwner ==
    [][\A d \in Domains : ~MayAct(d) => DomainRecordUnchanged(d)]_vars

\* OR-1; spec 3.3 non-blocking Domain flock: the lock is taken only while
\* free, so a holder's mode (serving or bootstrap) never changes under it.
Live_OR1_DomainLockTakenOnlyWhenFree ==
    [][\A d \in Domains : (hc[d] # "Absent" /\ hc'[d] # "Absent") => hc'[d] = hc[d]]_vars

\* Spec 3.1 daemonless, 3.6: a Host Coordinator leaves its Domain only with a
\* clean record, by failing closed on an inconsistent one, or by hard loss.
Live_Spec_CoordinatorLeavesOnlyClean ==
    [][\A d \in Domains :
          (hc[d] # "Absent" /\ hc'[d] = "Absent") =>
              (RecordClean(d) \/ refused'[d] \/ hcLosses'[d] # hcLosses[d])]_vars

\* Schemas.md Storage Catalog: the operation is recorded (Intent) as its
\* worker starts, moves to Owned only by its running worker once its stage
\* exists, and is retired by the worker's publication ("Only an owned
\* operation can publish"), by GC once the exact stage is removed, or, an
\* Intent whose worker is gone, with no stage left (ForgetAbandonedIntent).
PrepStep(a) ==
    \/ prep'[a] = prep[a]
    \/ prep[a] = "None" /\ prep'[a] = "Intent" /\ worker'[a] = "Running"
    \/ prep[a] = "Intent" /\ prep'[a] = "Owned" /\ worker[a] = "Running" /\ stage[a] = "Own"
    \/ prep[a] = "Owned" /\ prep'[a] = "None" /\ worker[a] = "Running" /\ artifact'[a] = "Available"
    \/ prep[a] = "Owned" /\ prep'[a] = "None" /\ stage[a] = "Removed"
    \/ prep[a] = "Intent" /\ prep'[a] = "None" /\ worker[a] = "Dead" /\ stage'[a] # "Own"

Live_OR7_PrepareOperationLifecycle ==
    [][\A a \in Artifacts : PrepStep(a)]_vars

\* OR-7: the preparation worker is started with its operation's intent and
\* ends once, by publishing (Running -> Idle) or by dying (Running -> Dead);
\* a dead worker is forgotten with its operation (Dead -> Idle).  Only a
\* running worker dies.
WorkerStep(a) ==
    \/ worker'[a] = worker[a]
    \/ worker[a] = "Idle" /\ worker'[a] = "Running" /\ prep[a] = "None" /\ prep'[a] = "Intent"
    \/ worker[a] = "Running" /\ worker'[a] \in {"Idle", "Dead"}
    \/ worker[a] = "Dead" /\ worker'[a] = "Idle" /\ prep'[a] = "None"

Live_OR7_WorkerLifecycleOrder ==
    [][\A a \in Artifacts : WorkerStep(a)]_vars

\* Spec 3.6 (acquisition steps 1-4 are the serving Host Coordinator's; "only
\* bootstrap recovery may advance" the HC-loss state, and recovery "neither
\* recreates the lease nor mounts the State Anchor"): a generation is
\* started, a lease inserted, ownership acquired and a supervisor launched
\* only by a Running (not bootstrap) Host Coordinator.
Live_Spec_AcquisitionOnlyByRunningCoordinator ==
    [][\A d \in Domains :
          (\/ gen'[d] # gen[d]
           \/ pl'[d] # pl[d] /\ pl'[d] \in {"Intent", "LeaseHeld"}
           \/ sa'[d] # sa[d] /\ sa'[d] \in {"Intent", "Prepared"}
           \/ rs[d] # "Running" /\ rs'[d] = "Running"
           \/ \E a \in Artifacts : \E g \in Gens : ~lease[a][d][g] /\ lease'[a][d][g])
          => hc[d] = "Running"]_vars

\* Spec 3.6 acquisition step 2: the exact (artifact, Domain, generation) row
\* is inserted only for the Domain's recorded prepared-lower intent.
Live_Spec_LeaseRowInsertedOnlyForIntent ==
    [][\A a \in Artifacts : \A d \in Domains : \A g \in Gens :
          (~lease[a][d][g] /\ lease'[a][d][g]) =>
              (pl[d] = "Intent" /\ plArt[d] = a /\ gen[d] = g)]_vars

\* Schemas.md "Participant ownership": the PreparedLower and StateAnchor
\* participants of a generation move only forward; a State Anchor skips its
\* release intent only in bootstrap recovery (spec 3.6, the surviving RS
\* already unmounted); a new generation starts from a clean record.
PlStep(d) ==
    \/ pl'[d] = pl[d]
    \/ gen'[d] = gen[d] + 1 /\ pl'[d] = "Intent"
    \/ pl[d] = "Intent" /\ pl'[d] = "LeaseHeld"
    \/ pl[d] \in {"Intent", "LeaseHeld"} /\ pl'[d] = "ReleaseIntent"
    \/ pl[d] = "ReleaseIntent" /\ pl'[d] = "Clean"

SaStep(d) ==
    \/ sa'[d] = sa[d]
    \/ gen'[d] = gen[d] + 1 /\ sa'[d] = "None"
    \/ sa[d] = "None" /\ sa'[d] = "Intent"
    \/ sa[d] = "Intent" /\ sa'[d] = "Prepared"
    \/ sa[d] \in {"Intent", "Prepared"} /\ sa'[d] = "ReleaseIntent"
    \/ sa[d] = "ReleaseIntent" /\ sa'[d] = "Clean"
    \/ sa[d] \in {"Intent", "Prepared"} /\ sa'[d] = "Clean" /\ hc[d] = "Recovering"

Live_Spec_ParticipantLifecycleOrder ==
    [][\A d \in Domains : PlStep(d) /\ SaStep(d)]_vars

\* Spec 3.6 release step 2 and the split lease-loss path: the exact mount is
\* removed only by the Domain's writer (owner, or bootstrap after the RS is
\* gone) or by its own orphaned Runtime Supervisor.
Live_Spec_UnmountOnlyByOwner ==
    [][\A d \in Domains :
          (mount[d] = "Mounted" /\ mount'[d] = "Absent") =>
              (MayAct(d) \/ rs[d] = "Orphaned")]_vars

\* Spec 3.6 release step 4 ("recheck the matching Domain release intent ...
\* then remove only the exact generation lease"; only a lock-holding Host
\* Coordinator releases the catalog lease): a lease row disappears only by
\* that step, or outside the protocol (leaseLost).
Live_Spec_OnlyLockHolderRemovesLease ==
    [][\A a \in Artifacts : \A d \in Domains : \A g \in Gens :
          (lease[a][d][g] /\ ~lease'[a][d][g]) =>
              ((MayAct(d) /\ pl[d] = "ReleaseIntent") \/ leaseLost'[d])]_vars

====
