"""TrainingRun (short name ``tr``): training as Kubernetes Jobs on GPU nodes."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from slipway.artifact.model import ArtifactTemplate
from slipway.models.base import (
    Condition,
    EnvVar,
    LocalObjectReference,
    ModelRef,
    Quantity,
    Resources,
    SlipwayModel,
    StatusModel,
    Toleration,
    cel,
    conditions_field,
)
from slipway.models.pods import PodTemplate

TrainingPhase = Literal["Pending", "Running", "Succeeded", "Failed", "Suspended"]
Precision = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4"]
Optimizer = Literal["adamw", "adam", "sgd", "sgd-momentum", "adafactor", "adamw-8bit"]
ExitCode = Annotated[int, Field(ge=1, le=255)]

EXIT_CODE_OVERLAP_MESSAGE = "spec.failurePolicy: an exit code cannot be both retryable and permanent"
SIZING_GPUS_MESSAGE = "spec.sizing estimates GPU memory: set spec.resources.gpus to 1 or more"


# A pod told to stop writes its checkpoint within this (Kubernetes' own default is 30 s); at most
# an hour, which is as long as a preempting pod or a drained node waits for it.
CHECKPOINT_GRACE_SECONDS = 120
MAX_CHECKPOINT_GRACE_SECONDS = 3600


class Checkpoint(SlipwayModel):
    """A PersistentVolumeClaim that outlives pods, mounted at /checkpoints."""

    size: Quantity = Field(description='Size of the claim, e.g. "50Gi".')
    storage_class_name: str | None = Field(
        default=None,
        description="StorageClass of the claim (default: the cluster's default).",
        max_length=253,
    )
    grace_seconds: int = Field(
        default=CHECKPOINT_GRACE_SECONDS,
        ge=1,
        le=MAX_CHECKPOINT_GRACE_SECONDS,
        description="Seconds a training pod has after SIGTERM (preemption, eviction, suspend) to write its "
        "checkpoint and exit, before it is killed: the pods' terminationGracePeriodSeconds.",
    )
    when_deleted: Literal["Retain", "Delete"] | None = Field(
        default=None,
        description="What happens to the claim when the TrainingRun is deleted, as a StatefulSet's "
        "persistentVolumeClaimRetentionPolicy.whenDeleted: Delete (when unset) deletes it with the TrainingRun "
        "(it is owned by it); Retain keeps it, with no owner, so that the TrainingRun applied again (an Argo CD "
        "prune and sync) resumes from its checkpoints; nothing deletes a retained claim but you (kubectl delete "
        "pvc <name>-checkpoints). A claim labelled for this TrainingRun with no owner, or owned by an earlier "
        "TrainingRun of the same name (a restore), and made for the same work (its slipway.dev/work annotation) "
        "is adopted; any other claim of that name is refused.",
    )

    @property
    def retained(self) -> bool:
        """Whether the claim outlives the TrainingRun (whenDeleted: Retain; Delete when unset)."""
        return self.when_deleted == "Retain"


class FailurePolicy(SlipwayModel):
    """How failed pods are retried."""

    model_config = cel(
        (
            "!has(self.retryableExitCodes) || !has(self.permanentExitCodes) || "
            "!self.retryableExitCodes.exists(c, c in self.permanentExitCodes)",
            EXIT_CODE_OVERLAP_MESSAGE,
        ),
    )

    max_restarts: int = Field(default=3, ge=0, le=1000, description="Pod failures tolerated before the run fails.")
    retryable_exit_codes: list[ExitCode] = Field(
        default_factory=list,
        description="Exit codes that are retried (each counts against maxRestarts); when set, any other "
        "non-zero exit code fails the run at once. Preempted or evicted pods never count.",
        max_length=32,
    )
    permanent_exit_codes: list[ExitCode] = Field(
        default_factory=list,
        description="Exit codes that fail the run at once, without retries (e.g. a bad config).",
        max_length=32,
    )
    active_deadline_seconds: int | None = Field(
        default=None, ge=1, description="Wall-clock limit of the whole run; it fails with DeadlineExceeded."
    )

    @model_validator(mode="after")
    def _codes(self) -> FailurePolicy:
        if set(self.retryable_exit_codes) & set(self.permanent_exit_codes):
            raise ValueError(EXIT_CODE_OVERLAP_MESSAGE)
        return self


class MlflowRun(SlipwayModel):
    """The MLflow run of this training."""

    experiment: str | None = Field(
        default=None,
        description="MLflow experiment of the run (default: the model name). Created if missing.",
        min_length=1,
        max_length=500,
    )


class Sizing(SlipwayModel):
    """What Slipway needs to estimate GPU memory before it starts any pod."""

    parameters: int = Field(ge=1, description="Number of model parameters, e.g. 7000000000.")
    precision: Precision = Field(default="bf16", description="Precision of weights and activations.")
    optimizer: Optimizer = Field(default="adamw", description="Optimizer; it decides the optimizer state size.")
    batch_size: int = Field(default=1, ge=1, description="Micro-batch size per GPU.")
    sequence_length: int = Field(default=2048, ge=1, description="Tokens per sample.")
    hidden_size: int | None = Field(
        default=None,
        ge=1,
        description="Hidden size; improves the activation estimate (default: from parameters).",
    )
    num_layers: int | None = Field(
        default=None, ge=1, description="Transformer layers; improves the activation estimate."
    )
    method: Literal["full", "lora"] = Field(
        default="full",
        description="full fine-tuning, or LoRA (gradients and optimizer state for adapters only).",
    )
    lora_trainable_fraction: float = Field(
        default=0.01, gt=0, le=1, description="With LoRA, the fraction of parameters that are trainable."
    )
    activation_checkpointing: bool = Field(
        default=False, description="Recompute activations in the backward pass (much less activation memory)."
    )
    gpu_memory_gib: float | None = Field(
        default=None,
        gt=0,
        description="Memory of one GPU; default: the node label nvidia.com/gpu.memory, or the operator's table.",
    )


CHECKPOINT_MOUNT_MESSAGE = "spec.podTemplate.volumeMounts: a mount at /checkpoints would hide spec.checkpoint's volume"


class TrainingRunSpec(SlipwayModel):
    """Desired state of a TrainingRun."""

    model_config = cel(("!has(self.sizing) || self.resources.gpus >= 1", SIZING_GPUS_MESSAGE))

    model: ModelRef = Field(description="The MLflow registered model this run trains.")
    image: str = Field(description="Container image of the training code.", min_length=1, max_length=1024)
    command: list[str] | None = Field(default=None, description="Entrypoint of the training container.")
    args: list[str] | None = Field(default=None, description="Arguments of the training container.")
    env: list[EnvVar] | None = Field(default=None, description="Extra environment variables.", max_length=128)
    resources: Resources = Field(default_factory=Resources, description="GPUs, CPU and memory per pod.")
    node_selector: dict[str, str] | None = Field(default=None, description="Node labels the pods must match.")
    tolerations: list[Toleration] | None = Field(default=None, description="Taints the pods tolerate.")
    priority_class_name: str | None = Field(
        default=None,
        description="PriorityClass of the pods (training is usually below inference).",
        max_length=253,
    )
    nodes: int = Field(
        default=1,
        ge=1,
        le=1024,
        description="Number of pods; more than 1 runs an Indexed Job with a headless Service and torchrun env.",
    )
    runtime: Literal["Job", "JobSet"] | None = Field(
        default=None,
        description="How the pods run: Job (an Indexed Job for several nodes) or JobSet (one gang: a failed "
        "worker restarts the whole group, Kueue admits all nodes at once). Default: JobSet for nodes > 1 where "
        "the cluster serves JobSet, else Job. Fixed once the run's Job or JobSet exists.",
    )
    queue_name: str | None = Field(
        default=None,
        description="Kueue LocalQueue; the Job gets kueue.x-k8s.io/queue-name and starts suspended.",
        max_length=63,  # a label value: the LocalQueue's name as is, never shortened
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
    )
    checkpoint: Checkpoint | None = Field(
        default=None,
        description="Checkpoint volume at /checkpoints (SLIPWAY_CHECKPOINT_DIR): a restarted run resumes from it.",
    )
    failure_policy: FailurePolicy = Field(default_factory=FailurePolicy, description="Retries and deadlines.")
    suspend: bool = Field(default=False, description="Stop the pods and keep the checkpoint; false resumes.")
    pod_template: PodTemplate | None = Field(
        default=None,
        description="More pod settings (volumes, env from Secrets, service account, affinity...); "
        "spec.nodeSelector and spec.priorityClassName win over the template's.",
    )
    mlflow: MlflowRun = Field(default_factory=MlflowRun, description="The MLflow run created before the pods start.")
    sizing: Sizing | None = Field(default=None, description="Estimate GPU memory and refuse a run that cannot fit.")
    artifact: ArtifactTemplate | None = Field(
        default=None,
        description="The ModelArtifact created when the run succeeds; omit to stop after training.",
    )

    @model_validator(mode="after")
    def _checkpoint_mount_free(self) -> TrainingRunSpec:
        mounts = {m.get("mountPath") for m in (self.pod_template and self.pod_template.volume_mounts) or []}
        if self.checkpoint is not None and "/checkpoints" in mounts:
            raise ValueError(CHECKPOINT_MOUNT_MESSAGE)
        return self

    @model_validator(mode="after")
    def _sizing_needs_gpus(self) -> TrainingRunSpec:
        if self.sizing is not None and self.resources.gpus < 1:
            raise ValueError(SIZING_GPUS_MESSAGE)
        return self


class CheckpointStatus(StatusModel):
    """The newest checkpoint the workload reported."""

    step: int | None = Field(default=None, description="Training step of the checkpoint.")
    path: str | None = Field(default=None, description="Path of the checkpoint inside /checkpoints.")
    time: str | None = Field(default=None, description="When it was written.")


class Progress(StatusModel):
    """Training progress, read from the MLflow run."""

    step: int | None = Field(default=None, description="Latest step.")
    total_steps: int | None = Field(default=None, description="Steps planned.")
    metrics: dict[str, float] | None = Field(
        default=None, description="Latest value of each metric (at most 32, by name; the rest are in MLflow)."
    )
    metrics_omitted: int | None = Field(
        default=None, description="How many more metrics the run logged than status shows (see them in MLflow)."
    )


class MlflowRunStatus(StatusModel):
    """The MLflow run of this training."""

    run_id: str | None = Field(default=None, description="MLflow run id.")
    run_url: str | None = Field(default=None, description="Link to the run in the MLflow UI.")
    experiment_id: str | None = Field(default=None, description="MLflow experiment id.")


class SizingStatus(StatusModel):
    """The GPU memory estimate, per GPU, in GiB."""

    weights_gib: float = Field(description="Model weights.")
    gradients_gib: float = Field(description="Gradients.")
    optimizer_gib: float = Field(description="Optimizer state.")
    activations_gib: float = Field(description="Activations.")
    total_gib: float = Field(description="Sum of the above, per GPU.")
    available_gib: float | None = Field(default=None, description="Memory of the GPUs asked for, per GPU.")
    fits: bool | None = Field(default=None, description="Whether the estimate fits.")


class CostAttempt(StatusModel):
    """One pod of the run, as it was seen: what it reserved, from when to when, how it ended."""

    pod: str = Field(description="The pod's name.")
    node: str | None = Field(default=None, description="The node it ran on.")
    gpu_product: str | None = Field(default=None, description="The node's nvidia.com/gpu.product label.")
    gpus: int | None = Field(default=None, description="GPUs reserved.")
    cpu: float | None = Field(default=None, description="CPUs requested.")
    memory_gib: float | None = Field(default=None, alias="memoryGiB", description="Memory requested, GiB.")
    start_time: str | None = Field(default=None, description="The pod's start.")
    end_time: str | None = Field(default=None, description="The end of its last container (or when it was found gone).")
    outcome: str | None = Field(default=None, description="Running, Succeeded, Failed, Preempted or Deleted.")
    per_hour: float | None = Field(
        default=None,
        description="Its price per hour, kept once it ended when OpenCost priced its node: a node OpenCost no "
        "longer lists, or an outage, does not reprice it.",
    )
    cost: float | None = Field(default=None, description="What it cost, in status.cost.currency.")


class FoldedCost(StatusModel):
    """The totals of older finished attempts no longer listed one by one."""

    count: int | None = Field(default=None, description="Attempts folded.")
    total: float | None = Field(default=None, description="Their cost.")
    gpu_hours: float | None = Field(default=None, description="Their GPU-hours.")
    wasted: float | None = Field(default=None, description="The cost of those that did not succeed.")


class TrainingCost(StatusModel):
    """What the run cost so far: every attempt, failed and preempted ones included (reservation-based)."""

    currency: str | None = Field(default=None, description="The price table's currency.")
    total: float | None = Field(default=None, description="Total cost (absent when no price is configured).")
    summary: str | None = Field(default=None, description="The total and currency, for kubectl get.")
    gpu_hours: float | None = Field(default=None, description="GPU-hours reserved, every attempt.")
    wasted_share: float | None = Field(
        default=None, description="The share of the cost spent on attempts that did not succeed (0 to 1)."
    )
    message: str | None = Field(default=None, description="Which price is missing, if any.")
    attempts: list[CostAttempt] | None = Field(
        default=None,
        description="The run's pods, the newest 64 (and those gone whose cost is not folded).",
        max_length=64,
    )
    folded: FoldedCost | None = Field(default=None, description="Older attempts whose pods are gone, as totals.")
    unlisted: int | None = Field(
        default=None, description="Pods that exist but are not listed (over 64): counted from the pods each pass."
    )


class QueueStatus(StatusModel):
    """Where Kueue has the run's Job: its LocalQueue and Workload, and Kueue's verdicts."""

    local_queue: str | None = Field(default=None, description="The Kueue LocalQueue of the Job.")
    workload: str | None = Field(default=None, description="Kueue's Workload for the Job.")
    cluster_queue: str | None = Field(default=None, description="The ClusterQueue that admitted it.")
    admitted: bool | None = Field(default=None, description="Whether Kueue admits the Job now.")
    admitted_at: str | None = Field(default=None, description="When Kueue admitted it (last time).")
    evictions: int | None = Field(
        default=None, description="Times Kueue evicted it (preemption and others); never counted against maxRestarts."
    )
    position: int | None = Field(
        default=None,
        description="While queued: its place in the LocalQueue (1 is admitted next), from Kueue's "
        "visibility API; absent where Kueue does not serve it.",
    )
    position_in_cluster_queue: int | None = Field(
        default=None, description="While queued: its place in the ClusterQueue, among all its LocalQueues' runs."
    )


class TrainingRunStatus(StatusModel):
    """Observed state of a TrainingRun."""

    phase: TrainingPhase | None = Field(default=None, description="Pending, Running, Succeeded, Failed, Suspended.")
    restarts: int | None = Field(default=None, description="Pod restarts so far.")
    last_checkpoint: CheckpointStatus | None = Field(default=None, description="Newest checkpoint.")
    progress: Progress | None = Field(default=None, description="Step and latest metrics.")
    mlflow: MlflowRunStatus | None = Field(default=None, description="The MLflow run.")
    sizing: SizingStatus | None = Field(default=None, description="GPU memory estimate.")
    artifact_ref: LocalObjectReference | None = Field(default=None, description="The ModelArtifact created.")
    start_time: str | None = Field(default=None, description="When the first pod started.")
    completion_time: str | None = Field(default=None, description="When the run finished.")
    cost: TrainingCost | None = Field(default=None, description="What the run cost (docs/concepts/cost.md).")
    runtime: Literal["Job", "JobSet"] | None = Field(default=None, description="What runs the pods: Job or JobSet.")
    queue: QueueStatus | None = Field(default=None, description="Kueue: the LocalQueue, Workload and admission.")
    observed_generation: int | None = Field(default=None, description="The generation last reconciled.")
    conditions: list[Condition] | None = conditions_field("Ready, Reconciling, Stalled, Trained")


class TrainingRun(SlipwayModel):
    """A training run: Jobs on GPU nodes, an MLflow run, and the ModelArtifact it produces."""

    model_config = {"extra": "ignore"}

    spec: TrainingRunSpec
    status: TrainingRunStatus | None = None
