"""Every condition reason Slipway sets, in one table: the conditions it appears under, the kinds,
what it means and what a user does about it.

The operator's status code writes these names (a unit test reads the source and fails on a reason
literal missing here, or set under a condition its row does not name); the metrics pre-create each
InferenceDeployment's rollback counters from the rows marked ``rollback``; the troubleshooting page
``docs/reference/reasons.md`` is generated from the table (``python -m slipway.reference``).

Conditions, as the rows name them: ``Ready`` (Ready=True), ``Reconciling`` and ``Stalled`` (True:
work in flight, or stuck until a person acts), ``Held`` (Ready, Reconciling and Stalled all False:
suspended or paused on purpose), ``Degraded`` (True), and the step conditions (``Registered``,
``Quantized``, ``Validated``, ``RegistrySynced``, ``MlflowRunRead``). A TrainingRun's ``Trained``,
a ModelArtifact's unfinished steps and an InferenceDeployment's ``Progressing`` carry the summary's
reason as well. Kept free of imports from the rest of Slipway, so that any layer may read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

ANY = ("TrainingRun", "ModelArtifact", "InferenceDeployment")
TR, MA, ID = ("TrainingRun",), ("ModelArtifact",), ("InferenceDeployment",)


@dataclass(frozen=True)
class Reason:
    name: str
    conditions: tuple[str, ...]
    kinds: tuple[str, ...]
    meaning: str
    fix: str
    rollback: bool = False  # also a status.lastRollback.reason (a counter of slipway_rollbacks_total)
    copied: bool = False  # Kubernetes' (or Kueue's, JobSet's) own word, passed on as it is


def _r(name: str, conditions: str, kinds: tuple[str, ...], meaning: str, fix: str, **kw: bool) -> Reason:
    return Reason(name, tuple(conditions.split()), kinds, meaning, fix, **kw)


_WAITING = "a pod cannot start: its image, a referenced Secret or ConfigMap, or its command is wrong, or it crash-loops"
_WAITING_FIX = (
    "`kubectl describe pod`; Reconciling at first, Stalled once stuck for "
    "`SLIPWAY_STUCK_POD_GRACE_SECONDS` (300); fixing it lets the pod go on"
)
_ROLLED = (
    "`status.lastRollback` and `status.analysis[]` show the metric and value; publish a new version, change the "
    "spec, or annotate `slipway.dev/retry=true`"
)

# fmt: off
REASONS: tuple[Reason, ...] = (
    # -- every kind ---------------------------------------------------------------------------------
    _r("NewGeneration", "Reconciling", ANY, "the spec changed and Slipway is at work on it",
       "nothing: the next pass reports on the new generation"),
    _r("InvalidSpec", "Stalled", ANY, "the spec cannot be used; the message names the field (most mistakes are "
       "refused at `kubectl apply` by the CRD's schema and CEL rules)", "fix the field the message names"),
    _r("ModelNotAllowed", "Stalled", ANY, "the namespace's `slipway.dev/allowed-models` does not list the model "
       "the message names (or `--require-model-allowlist` and no annotation)",
       "a cluster admin adds it to the namespace's annotation"),
    _r("ExperimentNotAllowed", "Stalled", ANY, "the same, for the MLflow experiment a TrainingRun logs to",
       "a cluster admin adds it to `slipway.dev/allowed-models`"),
    _r("MlflowObjectNotProven", "Stalled", ANY, "an MLflow experiment or registered model of that name exists but "
       "Slipway did not create it (no valid `slipway.dev/proof` tag): someone else may own it, so it is not used "
       "(where the allow-list applies)", "delete or rename it in MLflow, or choose another name; if it is the "
       "team's own, a cluster admin lists it in the Namespace's `slipway.dev/adopt-mlflow-names`"),
    _r("SourceNotAllowed", "Stalled", ANY, "a source's run, experiment or URI is not the namespace's to use "
       "(another team's run, a scheme MLflow does not own, `..`, percent-encoding), or a quantizer's output lies "
       "outside its own run", "name a source of the namespace's own; the message names the field"),
    _r("PriorityClassNotAllowed", "Stalled", ANY, "the spec names a PriorityClass the namespace may not use",
       "use an allowed one, or a cluster admin sets `slipway.dev/allowed-priority-classes`"),
    _r("RuntimeClassNotAllowed", "Stalled", ANY, "the pod template names a RuntimeClass the namespace may not use",
       "use an allowed one or none, or a cluster admin sets `slipway.dev/allowed-runtime-classes`"),
    _r("GatewayNotAllowed", "Stalled", ID, "the route attaches to another namespace's Gateway the admin has not "
       "allowed", "a cluster admin allows it (`slipway.dev/allowed-gateways`, `--allowed-gateways`)"),
    _r("HostnameNotAllowed", "Stalled", ID, "a route hostname is not in the namespace's "
       "`slipway.dev/allowed-hostnames` (multi-tenant mode)", "use an allowed hostname, or a cluster admin adds it"),
    _r("MlflowNotConfigured", "Stalled", ANY, "the operator has no MLflow address",
       "set `SLIPWAY_MLFLOW_URL` (or `--mlflow-url`) on the operator"),
    _r("MlflowUnavailable", "Reconciling", ANY, "MLflow did not answer",
       "nothing: the operator retries every 10 s and creates nothing twice; check MLflow if it lasts"),
    _r("MlflowError", "Stalled", ANY, "MLflow refused a request; the message quotes its answer",
       "fix what the answer names (the operator's MLflow permissions, a deleted model); tried again every 60 s"),
    _r("KubernetesUnavailable", "Reconciling", ANY, "the API server failed three calls in a row (5xx, 429, a "
       "timeout)", "nothing: the operator backs off up to 5 minutes; check the API server if it lasts"),
    _r("KubernetesError", "Stalled", ANY, "the API server refused a call for good; the message quotes it",
       "fix what it names; tried again every 60 s"),
    _r("Forbidden", "Stalled", ANY, "the API server refused a call with 403; the message names the call and quotes "
       "the refusal", "fix the operator's RBAC (`manifests/`, the chart), a ResourceQuota or the admission policy "
       "(JobSet's, Kueue's, Pod Security, Gatekeeper); the next try, within 60 s, goes on"),
    _r("OwnedByOther", "Stalled", ANY, "an object with a child's name exists and is not this object's: Slipway "
       "never adopts it", "delete or rename that object"),
    _r("ForeignWriteRefused", "Stalled", ANY, "a write the operator was about to make is not one of the object's "
       "own children (a forged annotation); nothing was written", "remove the forged annotation"),
    _r("FailedCreate", "Stalled", (*TR, *MA), "the API server refuses a Job's pods (Pod Security, a quota); its "
       "words are in the message", "fix `spec.podTemplate` or the namespace's policy and the Job creates them; a "
       "missing PriorityClass the spec never named is the operator's default: create it or change "
       "`SLIPWAY_TRAINING_PRIORITY_CLASS`"),
    # -- TrainingRun --------------------------------------------------------------------------------
    _r("InsufficientGPUMemory", "Stalled", TR, "the estimate (weights, gradients, optimizer state, activations) "
       "does not fit the GPUs asked for", "the message says how many GPUs would fit; or lower `batchSize`, turn "
       "on `activationCheckpointing`, use LoRA"),
    _r("JobSetNotServed", "Stalled", TR, "`spec.runtime: JobSet` on a cluster without JobSet",
       "install JobSet, or set `runtime: Job`"),
    _r("Creating", "Reconciling", TR, "the training Job is being created", "nothing"),
    _r("CheckpointClaimDeleting", "Reconciling", TR, "the checkpoint claim is being deleted (a claim restored with "
       "the ownerReference of a TrainingRun that is gone, which Kubernetes' garbage collector deletes at once); "
       "the Job waits for a new claim", "nothing; restore claims without ownerReferences (as Velero does) to keep "
       "their checkpoints"),
    _r("CreatingMlflowRun", "Reconciling", TR, "the Job exists, suspended, until its MLflow run is created",
       "nothing; if it lasts, see MLflow"),
    _r("Queued", "Reconciling", TR, "waiting for Kueue to admit the Job; the message quotes Kueue's reason and "
       "names the Workload", "nothing, or give the queue more quota"),
    _r("ExceedsQueueQuota", "Stalled", TR, "the run asks for more than its ClusterQueue can ever hold (nominal "
       "quota plus what its cohort lends); the message gives the numbers", "ask for less, or a cluster admin "
       "raises the quota (read again every 30 s)"),
    _r("Admitted", "Reconciling", TR, "Kueue admitted the Job; its pods are starting", "nothing"),
    _r("PreemptedByKueue", "Reconciling", TR, "Kueue preempted the run for a higher-priority workload",
       "nothing: it resumes from its checkpoint when admitted again, not counted against `maxRestarts`"),
    _r("EvictedByKueue", "Reconciling", TR, "Kueue evicted the run (a stopped queue, a pods-ready timeout ...)",
       "nothing: it resumes from its checkpoint when admitted again, not counted against `maxRestarts`"),
    _r("Suspended", "Held", TR, "`spec.suspend: true`: pods stopped, checkpoint kept", "set it to false to resume"),
    _r("Starting", "Reconciling", TR, "waiting for the training pods to start", "nothing"),
    _r("Training", "Reconciling", TR, "the training pods run", "nothing"),
    _r("Unschedulable", "Reconciling", TR, "the scheduler's own words: not enough GPUs, no node matching "
       "`nodeSelector`, untolerated taints", "free or add capacity, or change the pod template", copied=True),
    _r("SchedulingGated", "Reconciling", TR, "a scheduling gate holds the pods", "whoever set the gate removes it",
       copied=True),
    *(_r(name, "Reconciling Stalled", TR, _WAITING, _WAITING_FIX, copied=True) for name in (
        "ImagePullBackOff", "ErrImagePull", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError",
        "CrashLoopBackOff", "NoCommand")),
    _r("PermanentExitCode", "Stalled", TR, "the trainer exited with a code listed in "
       "`spec.failurePolicy.permanentExitCodes`", "fix the cause and create a new run"),
    _r("NonRetryableExitCode", "Stalled", TR, "the trainer exited with a code not in "
       "`spec.failurePolicy.retryableExitCodes`", "fix the cause and create a new run"),
    _r("BackoffLimitExceeded", "Stalled", TR, "pods failed more than `spec.failurePolicy.maxRestarts` times",
       "read the pods' logs; fix and create a new run", copied=True),
    _r("DeadlineExceeded", "Stalled", TR, "the run took longer than `spec.failurePolicy.activeDeadlineSeconds`",
       "raise it, or make the run shorter; create a new run", copied=True),
    _r("Failed", "Stalled", TR, "the training Job failed for another reason; any reason of its Failed condition is "
       "passed on as it is", "the message quotes the Job; read its pods' logs", copied=True),
    _r("CreatingArtifact", "Reconciling", TR, "training finished; its ModelArtifact is being created", "nothing"),
    _r("ArtifactInProgress", "Reconciling", TR, "training finished; its ModelArtifact is not decided yet", "nothing"),
    _r("ArtifactRejected", "Stalled", TR, "training finished but its ModelArtifact failed its gates (the message "
       "quotes it)", "Ready needs a Validated artifact: improve the model and train again"),
    _r("ArtifactFailed", "Stalled", TR, "training finished but its ModelArtifact's Jobs failed (quoted)",
       "see the ModelArtifact's reason"),
    _r("Succeeded", "Ready", TR, "training finished (and its ModelArtifact, if any, is Validated)", "nothing"),
    _r("MlflowRunTooLarge", "MlflowRunRead", TR, "the run's MLflow record is too large to read; training goes on, "
       "`status.progress` is not updated", "log each metric under one key with its step, not a new key per step"),
    _r("Read", "MlflowRunRead", TR, "the run is readable again", "nothing"),
    # -- ModelArtifact ------------------------------------------------------------------------------
    _r("WaitingForSource", "Reconciling", MA, "its TrainingRun has not succeeded yet", "nothing"),
    _r("TrainingRunFailed", "Stalled", MA, "its TrainingRun failed: nothing to register",
       "fix the TrainingRun; a new run needs a new artifact"),
    _r("EmptySource", "Stalled", MA, "the source holds no file: neither the run's artifacts at the artifact path nor "
       "a LoggedModel of that name logged in that run (nothing is registered; looked for again every minute)",
       "log the model there (`mlflow.<flavor>.log_model(model, name=...)` in that run), or name where it is"),
    _r("ModelNotFound", "Stalled", MA, "the source names an MLflow 3 LoggedModel (`models:/m-<id>`) MLflow does not "
       "have", "name a LoggedModel that exists (`mlflow.search_logged_models`), or its run"),
    _r("Registering", "Reconciling", MA, "registering the model version in MLflow", "nothing"),
    _r("Digesting", "Reconciling", MA, "Slipway reads every file of the model to digest it before registering it, a "
       "few seconds of each pass at a time; the message counts the files read (a restarted operator starts again)",
       "nothing"),
    _r("TooManyFiles", "Stalled", MA, "the model holds more files or directories than the operator digests "
       "(`--max-digest-files`, `SLIPWAY_MAX_DIGEST_FILES`, default 10000); nothing is registered",
       "log the model as fewer files (an archive), or a cluster admin raises the setting"),
    _r("Quantizing", "Reconciling", MA, "the quantize Job runs", "nothing"),
    _r("Validating", "Reconciling", MA, "the validate Job runs", "nothing"),
    _r("QuantizationFailed", "Stalled", MA, "the quantize Job failed (or set no output tag)", "its pods' logs say "
       "why. Not a failure: a pod that cannot reach MLflow for `SLIPWAY_MLFLOW_RETRY_SECONDS` exits 75 and is "
       "replaced without counting; exit 2 (bad configuration) fails at once"),
    _r("ValidationFailed", "Stalled", MA, "the validate Job failed", "its pods' logs say why (see QuantizationFailed)"),
    _r("GateFailed", "Stalled", MA, "the message names each failing gate, value and threshold; no alias moved",
       "improve the model, or change the gates"),
    _r("Validated", "Ready", MA, "every gate passed; the aliases point at the version", "nothing"),
    _r("Done", "Registered Quantized Validated", MA, "the step is done", "nothing"),
    # -- InferenceDeployment ------------------------------------------------------------------------
    _r("WaitingForModel", "Reconciling", ID, "the alias points nowhere yet (nothing served yet)", "nothing, or check "
       "the model reference"),
    _r("ModelUnavailable", "Stalled Degraded", ID, "the model to serve cannot be resolved, or its artifact is not "
       "Validated; the stable keeps serving", "fix the reference, or validate the artifact"),
    _r("RestoringStable", "Reconciling", ID, "the stable Deployment was gone: what it served comes back first (with "
       "no status, as after a re-apply from Git: what the promote alias names)", "nothing"),
    _r("RollingOut", "Reconciling", ID, "the stable track rolls to the revision", "nothing"),
    _r("Promoted", "Ready", ID, "the stable serves the revision, every replica available", "nothing"),
    _r("StableUnavailable", "Reconciling Stalled Degraded", ID, "not every stable replica is available (a crash "
       "loop, a pod that cannot start); Stalled after `progressDeadlineSeconds`",
       "the message names the pods' problem; fix it"),
    _r("Paused", "Held", ID, "`spec.rollout.paused`", "set it to false to go on"),
    _r("NoRoomForCanary", "Stalled", ID, "the canary step gets no pod within the replica budget",
       "raise `spec.replicas` or `maxSurgeReplicas`, or a larger step weight"),
    _r("CanaryStarting", "Reconciling", ID, "canary pods not ready yet (rolled back after `progressDeadlineSeconds` "
       "without progress)", "nothing"),
    _r("CanaryUnschedulable", "Stalled", ID, "the scheduler's words: no GPU free, no matching node; the rollout holds",
       "free or add capacity"),
    _r("Analyzing", "Reconciling", ID, "the canary is analysed at its step", "nothing"),
    _r("AnalysisInconclusive", "Reconciling", ID, "no data for a metric, or Prometheus unreachable; never promoted "
       "blind", "is traffic reaching the canary, is it scraped?"),
    _r("AnalysisFailed", "Stalled Degraded", ID, "more failed analyses than `failureLimit`: rolled back, or held with "
       "`onFailure: Pause`", _ROLLED + "; held: `kubectl slipway promote` or `abort`", rollback=True),
    _r("ProgressDeadlineExceeded", "Stalled Degraded", ID, "the canary made no progress for "
       "`progressDeadlineSeconds`: rolled back", _ROLLED, rollback=True),
    _r("Aborted", "Stalled Degraded", ID, "`slipway.dev/abort` rolled the canary back, or reverted a bake",
       _ROLLED, rollback=True),
    _r("Promoting", "Reconciling", ID, "every step passed: the stable rolls, then the canary's pods move to it",
       "nothing"),
    _r("PromotionFailed", "Stalled Degraded", ID, "the stable track made no progress while promoting: reverted",
       _ROLLED, rollback=True),
    _r("PromotionAborted", "Stalled Degraded", ID, "`slipway.dev/abort` during a promotion: reverted", _ROLLED,
       rollback=True),
    _r("Baking", "Reconciling", ID, "the promoted stable is watched for `spec.rollout.bake.duration`; a newer "
       "revision waits", "nothing; `slipway.dev/abort` reverts now"),
    _r("BakeFailed", "Stalled Degraded", ID, "the bake's analysis failed: reverted to `status.previousStable`, the "
       "promote alias moved back", _ROLLED, rollback=True),
    _r("RolledBack", "Stalled Degraded", ID, "the revision the spec asks for was rolled back earlier", _ROLLED),
    _r("Synced", "RegistrySynced", ID, "MLflow has every alias move and tag Slipway decided", "nothing"),
    _r("Pending", "RegistrySynced", ID, "alias moves and tags wait for MLflow to answer "
       "(`status.pendingRegistryUpdates`)", "nothing; check MLflow if it lasts"),
    _r("RegistryUpdateRefused", "RegistrySynced", ID, "MLflow refused an alias move or tag "
       "(`status.refusedRegistryUpdates` has its answer)", "e.g. 403: grant the operator's MLflow user `MANAGE` on "
       "the model; change the spec to retry at once, else every 10 minutes"),
)
# fmt: on

BY_NAME = {r.name: r for r in REASONS}

# Reasons of Events (not of conditions).
# Normal: a TrainingRun applied again from the same YAML (a new uid, no run in status) shows the MLflow
# run its predecessor of the same namespace, name and spec finished, or goes on in the one it left cut short.
ADOPTED_RUN = "AdoptedRun"
# Normal: a TrainingRun uses a checkpoint claim it did not make: one kept by spec.checkpoint.whenDeleted:
# Retain, or restored, labelled for its name, with no owner or an earlier TrainingRun of that name as owner.
ADOPTED_CHECKPOINT = "AdoptedCheckpoint"

# A rollback's reasons as a type, so that mypy checks every rollback the rollout records; the rows
# marked ``rollback`` above must be these (a unit test holds them equal).
RollbackReason = Literal[
    "AnalysisFailed", "ProgressDeadlineExceeded", "Aborted", "PromotionFailed", "PromotionAborted", "BakeFailed"
]
ROLLBACK_REASONS: tuple[RollbackReason, ...] = get_args(RollbackReason)


def markdown() -> str:
    """The troubleshooting table, one row per reason, by kind."""
    lines = [
        "# Condition reasons",
        "",
        "<!-- Generated from operator/slipway/reasons.py by `make reference`: do not edit by hand. -->",
        "",
        "Every reason Slipway writes in a condition, with what to do. `kubectl get -o wide` shows the `Ready`",
        "condition's reason in its `REASON` column; `kubectl describe` shows every condition. `Stalled` means a",
        "person must act; `Reconciling` means work in flight; `Held` means Ready, Reconciling and Stalled are all",
        "False (suspended or paused on purpose). A TrainingRun's `Trained`, a ModelArtifact's unfinished steps and an",
        "InferenceDeployment's `Progressing` carry the same reason. Reasons marked *copied* are Kubernetes' own",
        "words, passed on; reasons marked *rollback* are also `status.lastRollback.reason` and a `reason` of",
        "`slipway_rollbacks_total`.",
        "",
        "| reason | conditions | kinds | what it means | what to do |",
        "|---|---|---|---|---|",
    ]
    for r in REASONS:
        kinds = "any" if r.kinds == ANY else ", ".join(r.kinds)
        marks = "".join(f" *{m}*" for m, on in (("copied", r.copied), ("rollback", r.rollback)) if on)
        lines.append(f"| `{r.name}`{marks} | {', '.join(r.conditions)} | {kinds} | {r.meaning} | {r.fix} |")
    return "\n".join(lines) + "\n"
