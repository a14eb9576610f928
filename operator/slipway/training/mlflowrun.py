"""What a TrainingRun keeps of its MLflow run between passes: not the run, which a trainer logging a
metric key per step makes megabytes (and every running TrainingRun keeps its copy), but the few
things a pass uses: ids, MLflow's status, the progress and checkpoint as status shows them, the
attempts tag and the cost metrics. A run whose answer is over the HTTP layer's limit
(:class:`~slipway.mlflow.MlflowAnswerTooLarge`) is kept as unreadable, shown in condition
``MlflowRunRead``, and training goes on without progress."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from slipway.mlflow import Metric, Run
from slipway.mlflow.programtags import ATTEMPTS
from slipway.status.conditions import Cond
from slipway.training.state import progress_from_run

RUN_READ = "MlflowRunRead"  # the condition, present once a run was unreadable
KEPT_TAGS = frozenset({ATTEMPTS.name, ATTEMPTS.formerly})


@dataclass(frozen=True)
class RunSeen:
    """A run as a pass last read it. ``tags`` and ``metrics`` hold only what ``with_attempts`` and
    the cost log read; ``unreadable`` says why MLflow's answer was not read (then the rest is empty)."""

    run_id: str
    experiment_id: str
    status: str
    progress: dict[str, Any] | None = None
    checkpoint: dict[str, Any] | None = None
    tags: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, Metric] = field(default_factory=dict)
    unreadable: str | None = None


def seen(run: Run, metrics: Iterable[str] = ()) -> RunSeen:
    """What is kept of ``run``: its progress computed now, and of its metrics only ``metrics``."""
    progress, checkpoint = progress_from_run(run)
    wanted = set(metrics)
    return RunSeen(
        run.run_id,
        run.experiment_id,
        run.status,
        progress,
        checkpoint,
        tags={k: v for k, v in run.tags.items() if k in KEPT_TAGS},
        metrics={k: m for k, m in run.metrics.items() if k in wanted},
    )


def unreadable(run_id: str, experiment_id: str, why: str, owner: str) -> RunSeen:
    """A run MLflow answered too much of: the ids status recorded, no progress, and the words."""
    message = (
        f"MLflow run {run_id} of TrainingRun {owner} is too large to read ({why}); training goes on, "
        "status.progress is not updated and the operator does not close the run. Log each metric under "
        "one key with its step (mlflow.log_metric('loss', value, step=step)), not a new key per step"
    )
    return RunSeen(run_id, experiment_id, "", unreadable=message)


def read_condition(run: RunSeen, current: Iterable[Mapping[str, Any]] | None) -> list[Cond]:
    """``MlflowRunRead``: False while the run is unreadable; True again once read, if it ever was
    False (a run that was always readable carries no such condition)."""
    if run.unreadable is not None:
        return [Cond(RUN_READ, "False", "MlflowRunTooLarge", run.unreadable)]
    if any(c.get("type") == RUN_READ for c in current or ()):
        return [Cond(RUN_READ, "True", "Read", f"MLflow run {run.run_id} read")]
    return []
