"""What a ModelArtifact pass has read (pure data): the TrainingRun its source names, the source it
resolved, the versions registered for it, the files of a version to register, its steps' Jobs and
MLflow runs, the baselines and prices its gates need, where its aliases point and what its lineage
cost is made of. The pass (slipway.artifact.handler) fills it in as the decision
(slipway.artifact.decide) asks, and records there what its own writes made."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from slipway.artifact.gates import Baseline
from slipway.artifact.state import Source
from slipway.mlflow import FileTree, ModelVersion, RegisteredModel, Run
from slipway.prices import Prices

SOURCE, QUANTIZED = "source", "quantized"  # the roles of an artifact's versions in MLflow
QUANTIZE, VALIDATE = "quantize", "validate"  # its steps, each a Job and an MLflow run


@dataclass(frozen=True)
class NoFiles:
    """The source holds no model file (nothing registered; a run may still be logging its model)."""

    field: str  # the spec's field that names it
    looked_for: str  # where, in words
    reason: str = "EmptySource"


@dataclass(frozen=True)
class FilesRead:
    """What this pass's share of reading the files of a version to register gave (one of these)."""

    tree: FileTree | None = None  # every file read: their count, bytes and digest
    progress: str = ""  # not done yet: where the reading is, in words
    too_many: tuple[str, int] | None = None  # more files or directories than the operator reads: (which, limit)
    changed: str = ""  # a file was not the size listed: the files changed while they were read
    unsupported: bool = False  # a URI MLflow does not serve: not read


@dataclass(frozen=True)
class StepSeen:
    """A quantize or validate step: the MLflow run made for it, its Job (None: not created), why the
    API server refuses the Job's pods (looked up only for a Job that has had none for a while), why
    a pod of it cannot start (reason, message: looked up only for one that has not started a while),
    and the run as the step left it (read once the Job completed)."""

    run: Run
    job: Mapping[str, Any] | None
    refused: str | None = None
    stuck: tuple[str, str] | None = None
    finished: Run | None = None


@dataclass(frozen=True)
class CostSeen:
    """What the lineage cost is made of: the prices (OpenCost's per node included), and when some are
    configured, the TrainingRun (its own cost) and the step Jobs as the cache has them."""

    prices: Prices
    now: datetime
    training_run: Mapping[str, Any] | None = None
    jobs: Mapping[str, Mapping[str, Any] | None] = field(default_factory=dict)


@dataclass
class Observed:
    """One pass's reads so far. A field left at None (a role or step missing from its mapping) was
    not read yet; the decision asks for it when it needs it."""

    namespace: str
    name: str
    tracking_uri: str  # the MLflow address the step pods get
    workload_image: str  # the steps' image unless the spec names its own
    tenancy_active: bool  # the namespace's allow-list applies (multi-tenant mode)
    ui: str = ""  # the MLflow UI's address, for the links in status (none: no links)
    training_run: Mapping[str, Any] | None = None  # the TrainingRun spec.source names, from the cache
    source: Source | NoFiles | None = None  # spec.source resolved in MLflow
    model: RegisteredModel | None = None  # the registered model, found or made with its proof
    versions: dict[str, ModelVersion | None] = field(default_factory=dict)  # role -> the version registered for it
    files: dict[str, FilesRead] = field(default_factory=dict)  # role -> the files of the version to register
    steps: dict[str, StepSeen] = field(default_factory=dict)
    prices: Prices | None = None  # the price table the gates' derived metrics use
    baselines: dict[str, Baseline] | None = None  # the versions relative gates compare with, by reference
    recorded: bool = False  # this pass recorded the gate outcomes on the candidate version
    held: dict[str, str | None] | None = None  # alias -> the version it points at, read before moving it
    moved: list[str] | None = None  # the aliases this pass moved
    cost: CostSeen | None = None

    @property
    def owner(self) -> str:
        """namespace/name: what the artifact's MLflow versions and runs are tagged with."""
        return f"{self.namespace}/{self.name}"
