"""What a TrainingRun pass observes and what it decides, as plain records (pure).

A pass goes in three steps, each observed (``training.observe``), decided without I/O
(``training.decide``) and applied (``training.apply``): the opening (:class:`Start` ->
:class:`Opening`: refused, stalled, a predecessor's finished run shown, the Job made), the release
of the Job to its MLflow run (:class:`Children` -> :class:`Release` and the ``spec.suspend`` patch),
and the status (:class:`Seen` -> :class:`Outcome`). Each step decides on what the step before it
left: the status is of the Job as released and patched, not as it was read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from slipway.status.conditions import Cond
from slipway.status.jobs import jobset_as_job
from slipway.training import build, gate
from slipway.training.kueue import QueueView
from slipway.training.mlflowrun import RunSeen
from slipway.training.state import TrainingState

Obj = Mapping[str, Any]


def child_of(run: str, runtime: str) -> tuple[str, str]:
    """The cache index and name of the run's Job (or JobSet)."""
    return ("jobsets", build.jobset_name(run)) if runtime == "JobSet" else ("jobs", build.job_name(run))


@dataclass(frozen=True)
class Finished:
    """A predecessor's MLflow run in which this TrainingRun's training finished (``training.adopt``)."""

    run: RunSeen
    job: dict[str, Any]  # a completed Job's status with the run's start and end (adopt.completed_job)
    run_url: str


@dataclass(frozen=True)
class Start:
    """What a pass reads before it touches the run's children. MLflow (and the JobSet API) are
    asked only once the decision needs them (``looked_up``): never for a run refused or stalled."""

    runtime: str  # what runs the pods: Job or JobSet
    child: dict[str, Any] | None  # the Job (or JobSet) as cached; None: not made, or deleted
    sizing: dict[str, Any] | None = None  # status.sizing as the check says now
    refusal: str | None = None  # the sizing check's refusal
    mlflow: bool = True  # the operator has an MLflow address
    looked_up: bool = False  # MLflow asked for a predecessor's finished run, and the JobSet API if needed
    finished: Finished | None = None  # a predecessor's run that finished this training
    gated_own_child: bool = False  # the child is this run's and still gated: it never ran a pod
    jobset_served: bool | None = None  # whether the cluster serves JobSets (None: not asked)
    backlog: bool = False  # objects wait for their first pass (a sweep being applied)


Action = Literal["Refuse", "Stall", "LookUp", "ShowFinished", "Closed", "Create", "Continue"]


@dataclass(frozen=True)
class Opening:
    """What the pass does first. Refuse and Stall write and stop; LookUp asks MLflow, then decide
    again; ShowFinished shows a predecessor's run; Closed, Create and Continue first make the
    checkpoint claim and the headless Service, then stop (Closed), make the Job (Create) or go on."""

    action: Action
    conditions: list[Cond] = field(default_factory=list)  # Stall: the conditions written
    state: TrainingState | None = None  # Refuse: the status written
    delete_child: bool = False  # ShowFinished: the run's own Job, which never ran a pod, deleted
    requeue: float | None = None  # Create: stop once the Job is made, and look again then


@dataclass(frozen=True)
class Children:
    """The run's Job (or JobSet), a JobSet's Jobs, its training pods, and its MLflow run."""

    runtime: str
    child: dict[str, Any]
    members: list[dict[str, Any]] = field(default_factory=list)  # a JobSet's Jobs
    pods: list[dict[str, Any]] = field(default_factory=list)
    run: RunSeen | None = None  # None: not read (the Job made by this pass, no run recorded yet)
    cached: bool = False  # ``run`` is the copy read less than a progress poll ago
    link: gate.MlflowLink | None = None  # what the pods need to log into ``run``

    @property
    def job(self) -> dict[str, Any]:
        """The Job the run's status is read from (a JobSet seen as one Job)."""
        return jobset_as_job(self.child, self.members) if self.runtime == "JobSet" else self.child


@dataclass(frozen=True)
class Release:
    """The merge patches that give the pods their MLflow run and lift gate.RUN_GATE, applied in
    this order: a JobSet's suspended Jobs; the Job or JobSet while it is suspended (resumed unless
    Kueue or spec.suspend holds it); the pods made gated before that. Names with patches."""

    members: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    child: dict[str, Any] | None = None
    pods: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


@dataclass(frozen=True)
class Seen:
    """What the status is decided from: the Job as the pass left it and what was read of it."""

    job: Obj  # the Job (a JobSet seen as one; a predecessor's finished run: adopt.completed_job)
    pods: list[dict[str, Any]]
    artifact: dict[str, Any] | None  # the ModelArtifact as made or kept by this pass
    run: RunSeen | None  # the MLflow run (None: still to be made); a finished run's as read now
    run_url: str = ""
    now: datetime | None = None
    refused: str | None = None  # the API server's refusal of the pods (their FailedCreate Event)
    queue_name: str | None = None  # the Kueue LocalQueue of the Job, if any
    queue: QueueView | None = None
    placed: bool = False  # the queue position is known (Kueue's visibility API answers)
    sizing: dict[str, Any] | None = None  # status.sizing
    cost: dict[str, Any] | None = None  # status.cost (None: not written)
    runtime: str | None = None  # status.runtime (None: not written)


@dataclass(frozen=True)
class Outcome:
    """The status to write, what the MLflow run gets first, and when to look again."""

    state: TrainingState
    fields: dict[str, Any]  # status fields besides the state's (None: not written)
    close_run: str | None = None  # the MLflow run's end (FINISHED or FAILED), set by the operator
    log_cost: bool = False  # a finished run's cost logged on its MLflow run
    requeue: float | None = None
