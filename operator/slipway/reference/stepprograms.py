"""The pages of the ModelArtifact's step programs, the quantizer and the evaluator: a Job each, from
slipway.artifact.build and what slipway.artifact.decide gives it (see slipway.reference.programs)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from slipway.artifact import build as artifactbuild
from slipway.artifact import gates
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
from slipway.workloads import common as workloads
from slipway.workloads.validate import Evaluation


def _step_page(step: str, title: str, summary: str, body: Callable[[], list[str]]) -> str:
    job = artifactbuild.step_job("a", "ns", step, image="i", command=None, args=None, env={})
    requests = " and ".join(f"{value} {key}" for key, value in artifactbuild.STEP_REQUESTS.items())
    lines = head(title, summary)
    lines += section(
        "What Slipway runs",
        f"A Job per ModelArtifact, its pod's container `{step}`: `spec.{_spec_of(step)}.image` (default: the "
        "operator's workloads image, `SLIPWAY_WORKLOAD_IMAGE`), `command` (default: `"
        f"{' '.join(artifactbuild.DEFAULT_COMMANDS[step])}`) and `args`; `restartPolicy: Never`, requests "
        f"{requests}, at most {job['spec']['activeDeadlineSeconds']} seconds. Slipway makes "
        "the step's MLflow run first, in the experiment named after the registered model.",
    )
    env = artifactbuild.STEP_ENV | (artifactbuild.QUANTIZE_ENV if step == "quantize" else {})
    lines += ["## Environment", "", *env_table(env), ""]
    if step == "validate":
        lines += ["A variable of the same name in `spec.validation.env` wins.", ""]
    lines += mlflow_access("the step's container")
    lines += body()
    counted = f"the Job's backoffLimit ({job['spec']['backoffLimit']})"
    lines += [
        "## Exit codes",
        "",
        *policy_words(job["spec"]["podFailurePolicy"]["rules"], counted),
        f"- Any other failure is retried, counting against {counted}.",
        "",
        *exit_table(_step_treatment(job)),
        "",
    ]
    return "\n".join(lines)


def _spec_of(step: str) -> str:
    return "quantization" if step == "quantize" else "validation"


def _step_treatment(job: dict[str, Any]) -> dict[int, str]:
    """What the step's Job does on each code, from its podFailurePolicy."""
    said = {workloads.EXIT_OK: "The step is done: Slipway reads its run."}
    for rule in job["spec"]["podFailurePolicy"]["rules"]:
        for code in (rule.get("onExitCodes") or {}).get("values", []):
            said[code] = {"Ignore": "Retried, not counted.", "FailJob": "The Job fails at once."}[rule["action"]]
    counted = f"Retried, counting against the backoffLimit ({job['spec']['backoffLimit']})."
    return {code: said.get(code, counted) for code, _, _ in exit_codes()}


def quantizer() -> str:
    return _step_page(
        "quantize",
        "Quantizer",
        "A ModelArtifact with `spec.quantization` (a method other than `none`, or an image or command of its own) "
        "quantizes its source version into a version of its own before validation.",
        _quantizer_mlflow,
    )


def _quantizer_mlflow() -> list[str]:
    return [
        "## MLflow",
        "",
        "Read the model at `SLIPWAY_MODEL_URI`; log the quantized model as artifacts of the run in "
        f"`MLFLOW_RUN_ID`, then set the run's tag `{programtags.QUANTIZE_URI.name}` to its URI. Without it the "
        "ModelArtifact fails. Slipway reads every file at that URI, digests them, and registers them as the "
        f"quantized version (tags `{tags.PARENT_VERSION.name}` and `{tags.QUANTIZATION_METHOD.name}`), which the "
        "gates then judge.",
        "",
        *tags_table([programtags.QUANTIZE_URI, programtags.QUANTIZE_DIGEST, programtags.QUANTIZE_SIZE]),
        "",
        f"Slipway's quantizer also sets `{programtags.QUANTIZE_METHOD.name}` and "
        f"`{programtags.QUANTIZE_SOURCE_URI.name}`, and logs the metrics `sizeBytes`, `sourceSizeBytes` and "
        "`sizeRatio`; Slipway reads none of them.",
        "",
    ]


def evaluator() -> str:
    return _step_page(
        "validate",
        "Evaluator",
        "A ModelArtifact with `spec.validation` evaluates its candidate version (the quantized one, if any) and "
        "judges the metrics against its gates.",
        _evaluator_mlflow,
    )


def _evaluator_mlflow() -> list[str]:
    reference = ", ".join(f"`{k}`" for k in Evaluation(0.0, 0.0, 0.0, 0, 0.0).metrics())
    throughput = " or ".join(f"`{k}`" for k in gates.THROUGHPUT_METRICS)
    return [
        "## MLflow",
        "",
        "Read the model at `SLIPWAY_MODEL_URI`; log each metric the gates name to the run in `MLFLOW_RUN_ID` (any "
        "name works); exit 0. Slipway reads the run's metrics (the latest value of each) and evaluates the gates "
        "itself: a metric that is not a finite number fails its gate, a missing one too.",
        "",
        f"- Slipway's evaluator logs {reference}.",
        f"- Log {throughput} for a cost gate: Slipway derives `{gates.COST_PER_MILLION}` from it and the price table.",
        "- `sizeBytes`, when no producer recorded the size, is `status.sizeBytes`.",
        "",
        f"Slipway records the decision on the version: each metric as `{tags.METRIC.name}<name>` (the gated ones "
        f"first, at most 32), then `{tags.GATES.name}` and `{tags.VALIDATION.name}`; a relative gate reads its "
        "baseline's metric tags ([MLflow tags](../mlflow-tags.md)).",
        "",
    ]
