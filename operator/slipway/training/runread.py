"""A TrainingRun's MLflow run as a pass reads it: found or made once, then read at most once per
progress poll, and a run too large to read read again only every UNREADABLE_POLLS polls."""

from __future__ import annotations

import time

from slipway.mlflow import MlflowAnswerTooLarge, MlflowClient, MlflowUnavailable, http
from slipway.mlflow.tags import MODEL, TRAININGRUN
from slipway.reconcile import Context
from slipway.training import adopt as trainingadopt
from slipway.training import mlflowrun
from slipway.training.cost import COST_METRICS
from slipway.training.mlflowrun import RunSeen
from slipway.training.model import TrainingRunSpec

RUN_READ = "mlflow_run"  # ctx.memory: (mlflowrun.RunSeen as last read, time.monotonic() then)
UNREADABLE_POLLS = 10


def mlflow_run(ctx: Context, spec: TrainingRunSpec, client: MlflowClient) -> tuple[RunSeen, bool]:
    """The run of this TrainingRun: the one in status, else the one tagged with its uid, else the one
    a predecessor of the same name and spec left cut short (trainingadopt), else a new one; and
    whether it is the copy read less than a progress poll ago. A running TrainingRun is
    woken by its pods and Job far more often than its progress needs reading: MLflow is read at
    most once per progress poll (SLIPWAY_PROGRESS_POLL_SECONDS), whatever woke the pass. What is
    kept between passes is what a pass needs (mlflowrun.RunSeen), never the parsed run; a run too
    large to read is read again only every UNREADABLE_POLLS progress polls (MLflow builds its whole
    answer each time)."""
    known = (ctx.status.get("mlflow") or {}).get("runId")
    memory, now = ctx.memory, time.monotonic()
    if known:
        copy = memory.get(RUN_READ)
        before, read_at = copy if copy is not None and copy[0].run_id == known else (None, 0.0)
        poll = ctx.config.progress_poll_seconds * (UNREADABLE_POLLS if before and before.unreadable else 1)
        if before is not None and now - read_at < poll:
            return before, True
        run = read_run(ctx, client, known, before)
    else:  # its own run, else one a predecessor of the same name and spec made (trainingadopt), else a new one
        tags = {TRAININGRUN.name: f"{ctx.namespace}/{ctx.name}", MODEL.name: spec.model.name}
        run = mlflowrun.seen(trainingadopt.run_for(ctx, spec, client, tags), COST_METRICS)
    memory[RUN_READ] = (run, now)
    return run, False


def read_run(ctx: Context, client: MlflowClient, run_id: str, before: RunSeen | None = None) -> RunSeen:
    """What a pass needs of the run ``run_id`` (recorded in status), read now; an unreadable one (its
    answer over the HTTP layer's limit) with the ids status recorded and the words for the condition.
    A run already found unreadable (``before``) stays so when MLflow does not answer in time: it
    takes longest to build the answers of the largest runs."""
    try:
        return mlflowrun.seen(client.get_run(run_id), COST_METRICS)
    except MlflowUnavailable:
        if before is not None and before.unreadable is not None:
            return before
        raise
    except MlflowAnswerTooLarge:
        experiment = str((ctx.status.get("mlflow") or {}).get("experimentId", ""))
        why = f"MLflow answers over {http.MAX_ANSWER_BYTES // 2**20} MiB for it"
        return mlflowrun.unreadable(run_id, experiment, why, f"{ctx.namespace}/{ctx.name}")
