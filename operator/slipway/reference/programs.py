"""The contract of each program Slipway runs that a team may replace with its own: the trainer (here),
the quantizer and the evaluator (slipway.reference.stepprograms), the model server and the
fetch-model init container (slipway.reference.servingprograms). Each page says what Slipway runs,
the environment it sets, the files and paths, what the program must read and log in MLflow, and
what its exit codes do, from the builders that make the pods (training.build, artifact.build,
inference.build, inference.probes), the decisions that read the results (training.state,
artifact.state, artifact.gates) and the MLflow tags' table (mlflow.tags)."""

from __future__ import annotations

from collections.abc import Callable

from slipway.mlflow import programtags, tags
from slipway.reference.programparts import (
    env_table,
    exit_codes,
    exit_table,
    head,
    mlflow_access,
    policy_words,
    section,
    tags_table,
)
from slipway.reference.servingprograms import fetcher, server
from slipway.reference.stepprograms import evaluator, quantizer
from slipway.training import build as trainbuild
from slipway.training import state as trainstate
from slipway.training.cost import COST_METRICS
from slipway.training.model import FailurePolicy, TrainingRunSpec
from slipway.workloads import common as workloads


def trainer() -> str:
    lines = head(
        "Trainer",
        "A TrainingRun runs your training code (`spec.image`, `spec.command`, `spec.args`) in the container "
        f"`{trainbuild.CONTAINER}` of a Job's pods (a JobSet's with `spec.runtime: JobSet`), `restartPolicy: Never`. "
        "Slipway's own trainer is `python -m slipway.workloads.train` in its workloads image "
        "(`slipway.workloads.train_mlflow` is the same written with MLflow's own client).",
    )
    lines += section(
        "Before it starts",
        "The MLflow run exists before any pod: Slipway makes it, then lifts the pods' scheduling gate "
        f"`{trainbuild.RUN_GATE}` with the run's id in their annotations. Your code reports to that run; "
        "`mlflow.start_run()` attaches to it, since MLflow's client reads `MLFLOW_RUN_ID`.",
    )
    lines += ["## Environment", "", *env_table(trainbuild.TRAINER_ENV), ""]
    lines += mlflow_access("the trainer's containers")
    lines += section(
        "Files",
        f"With `spec.checkpoint`, a PersistentVolumeClaim is mounted at `{trainbuild.CHECKPOINT_MOUNT}` "
        "(`SLIPWAY_CHECKPOINT_DIR`), owned by group "
        f"{trainbuild.CHECKPOINT_FS_GROUP} (`fsGroup`, unless `spec.podTemplate.securityContext` sets one): it "
        "outlives the pods, so a restarted pod resumes from the newest checkpoint there. On SIGTERM a pod has "
        "`spec.checkpoint.graceSeconds` to write a last one.",
    )
    lines += _trainer_mlflow()
    lines += _trainer_exits()
    return "\n".join(lines)


def _trainer_mlflow() -> list[str]:
    progress = ", ".join(f"`{k}`" for k in sorted(trainstate.PROGRESS_KEYS))
    logged = ", ".join(f"`{k}`" for k in COST_METRICS)
    return [
        "## MLflow",
        "",
        "Metrics Slipway reads from the run (the latest value of each):",
        "",
        "- `step`, every step, and `totalSteps`, once: `status.progress`;",
        "- `checkpointStep` at each checkpoint: its time is `status.lastCheckpoint.time`;",
        f"- any other metric: `status.progress.metrics`, the first {trainstate.MAX_PROGRESS_METRICS} by name "
        f"({progress} aside). Log each metric under one key, with its step: a run with a key per step grows "
        "too large to read.",
        "",
        "Tags your trainer sets on the run:",
        "",
        *tags_table(
            [
                programtags.CHECKPOINT,
                programtags.CHECKPOINT_STEP,
                programtags.ATTEMPTS,
                programtags.MODEL_DIGEST,
                programtags.MODEL_SIZE,
            ]
        ),
        "",
        'The model: in the run\'s artifacts at `model` (`mlflow.<flavor>.log_model(..., artifact_path="model")`), '
        'or a LoggedModel of the run named `model` (MLflow 3\'s `log_model(..., name="model")`); a ModelArtifact '
        "made from the TrainingRun (`spec.artifact`) registers it.",
        "",
        "When the Job ends, Slipway ends a run still `RUNNING` as `FINISHED` or `FAILED`: a trainer that is "
        "stopped leaves it `RUNNING`, so that the next attempt goes on in it. Slipway logs the run's cost as the "
        f"metrics {logged} (tag `{tags.COST_CURRENCY.name}`) once it finished. The tags Slipway sets itself are in "
        "[MLflow tags](../mlflow-tags.md).",
        "",
    ]


def _trainer_exits() -> list[str]:
    default = FailurePolicy()
    codes = {
        "permanentExitCodes": [workloads.EXIT_CONFIG],
        "retryableExitCodes": [workloads.EXIT_ERROR, workloads.EXIT_MLFLOW_UNAVAILABLE],
    }
    plain = TrainingRunSpec.model_validate({"model": {"name": "m"}, "image": "i"})
    example = TrainingRunSpec.model_validate({"model": {"name": "m"}, "image": "i", "failurePolicy": codes})
    counted = f"`spec.failurePolicy.maxRestarts` (default {default.max_restarts})"
    lines = [
        "## Exit codes",
        "",
        "`spec.failurePolicy` decides, through the Job's podFailurePolicy. By default:",
        "",
        *policy_words(trainbuild.pod_failure_policy(plain)["rules"], counted),
        f"- Any other failure is retried, counting against {counted}.",
        "",
        f"With `failurePolicy: {{permanentExitCodes: {codes['permanentExitCodes']}, retryableExitCodes: "
        f"{codes['retryableExitCodes']}}}` (what suits the reference programs' codes):",
        "",
        *policy_words(trainbuild.pod_failure_policy(example)["rules"], counted),
        "",
        "The reference programs' codes:",
        "",
        *exit_table(
            {code: "As `spec.failurePolicy` says (above)." for code, _, _ in exit_codes()}
            | {workloads.EXIT_OK: "The pod is done; once every pod is, the TrainingRun succeeds."}
        ),
        "",
    ]
    return lines


PAGES: dict[str, Callable[[], str]] = {
    "trainer": trainer,
    "quantizer": quantizer,
    "evaluator": evaluator,
    "server": server,
    "fetcher": fetcher,
}
