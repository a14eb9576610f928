"""The labels, annotations, scheduling gates and finalizers named ``slipway.dev/...``: what each is
on and what it means. The names are found in the code (every module-level string constant of the
package whose value starts with ``slipway.dev/``), so a name added without a line here fails the
generator, and a line here whose name the code no longer has fails it too. The MLflow tags have
their own table and page (slipway.mlflow.tags, slipway.reference.mlflowtags)."""

from __future__ import annotations

import ast
from pathlib import Path

from slipway.reference.common import GENERATED, escape

PACKAGE = Path(__file__).resolve().parents[1]
PREFIX = "slipway.dev/"

# name -> (what it is, on what, who sets it, what it means)
NAMES: dict[str, tuple[str, str, str, str]] = {
    "slipway.dev/allowed-models": (
        "annotation",
        "Namespace",
        "cluster admin",
        "Comma-separated globs of the MLflow models and experiments the namespace's objects may use "
        "(and, through them, the runs and sources); with --require-model-allowlist a namespace without it "
        "may use none.",
    ),
    "slipway.dev/allowed-priority-classes": (
        "annotation",
        "Namespace",
        "cluster admin",
        "Globs of the PriorityClasses the namespace's pods may use; without it, any in single-team mode, only the "
        "operator's default class of the kind in multi-tenant mode.",
    ),
    "slipway.dev/allowed-runtime-classes": (
        "annotation",
        "Namespace",
        "cluster admin",
        "Globs of the RuntimeClasses the namespace's pods may use (spec.podTemplate.runtimeClassName); without it, "
        "any in single-team mode, none in multi-tenant mode.",
    ),
    "slipway.dev/allowed-gateways": (
        "annotation",
        "Namespace",
        "cluster admin",
        "`namespace/name` globs of Gateways of other namespaces the namespace's HTTPRoutes may attach to, beside "
        "--allowed-gateways; a Gateway of the namespace itself is always allowed.",
    ),
    "slipway.dev/allowed-hostnames": (
        "annotation",
        "Namespace",
        "cluster admin",
        "Globs of the hostnames the namespace's HTTPRoutes may claim (e.g. `*.team-a.example.com`); without it, "
        "any in single-team mode, none in multi-tenant mode.",
    ),
    "slipway.dev/mlflow-credentials": (
        "annotation",
        "Namespace",
        "cluster admin",
        "A Secret of the namespace (MLFLOW_TRACKING_USERNAME/PASSWORD or MLFLOW_TRACKING_TOKEN) whose MLflow "
        "identity the namespace's pods use, by reference; never the operator's. Without it: the "
        "SLIPWAY_MLFLOW_CREDENTIALS_SECRET Secret of the namespace in single-team mode, none in multi-tenant mode.",
    ),
    "slipway.dev/adopt-mlflow-names": (
        "annotation",
        "Namespace",
        "cluster admin",
        "Globs of MLflow experiments and registered models the namespace's objects use although Slipway did not "
        "create them (no `slipway.dev/proof`), stamping them as Slipway's; beside --adopt-mlflow-names.",
    ),
    "slipway.dev/promote": (
        "annotation",
        "InferenceDeployment",
        "user (`kubectl slipway promote`)",
        "`true`: skip the remaining canary steps and promote now. The operator removes it once it has acted.",
    ),
    "slipway.dev/abort": (
        "annotation",
        "InferenceDeployment",
        "user (`kubectl slipway abort`)",
        "`true`: roll the canary back now (also during a promotion or a bake). Removed once acted on.",
    ),
    "slipway.dev/retry": (
        "annotation",
        "InferenceDeployment",
        "user (`kubectl slipway retry`)",
        "`true`: try a rolled-back revision again. Removed once acted on.",
    ),
    "slipway.dev/trainingrun": (
        "label",
        "a TrainingRun's Job or JobSet, PVC and pods",
        "operator",
        "The run's name (hashed past 63 characters): selects the run's children. Its MLflow run's tag of the "
        "same name holds namespace/name ([MLflow tags](mlflow-tags.md)).",
    ),
    "slipway.dev/trainingrun-name": ("annotation", "training pods", "operator", "The run's full name."),
    "slipway.dev/mlflow-run": (
        "scheduling gate",
        "training pods",
        "operator",
        "Holds the pods until their MLflow run exists and is written into them; lifted by the operator.",
    ),
    "slipway.dev/mlflow-run-id": (
        "annotation",
        "training pod template",
        "operator",
        "The MLflow run's id, read by the pods as `$MLFLOW_RUN_ID`.",
    ),
    "slipway.dev/mlflow-experiment-id": (
        "annotation",
        "training pod template",
        "operator",
        "The MLflow experiment's id, read by the pods as `$MLFLOW_EXPERIMENT_ID`.",
    ),
    "slipway.dev/suspended-by-spec": (
        "annotation",
        "training Job",
        "operator",
        "`true` while the Job is suspended for the run's `spec.suspend` (not by Kueue).",
    ),
    "slipway.dev/modelartifact": (
        "label",
        "a ModelArtifact's Jobs and pods",
        "operator",
        "The ModelArtifact's name (hashed past 63 characters). Its MLflow runs' and versions' tag of the same "
        "name holds namespace/name ([MLflow tags](mlflow-tags.md)).",
    ),
    "slipway.dev/step": (
        "label",
        "a ModelArtifact's Jobs and pods",
        "operator",
        "Which step the Job runs: quantize or validate.",
    ),
    "slipway.dev/deployment": (
        "label",
        "an InferenceDeployment's Deployments, Services, HPA and pods",
        "operator",
        "The InferenceDeployment's name (hashed past 63 characters); Prometheus keeps it as `slipway_dev_deployment`.",
    ),
    "slipway.dev/deployment-name": ("annotation", "serving pods", "operator", "The InferenceDeployment's full name."),
    "slipway.dev/endpoint-picker": (
        "label",
        "endpoint picker Deployments' pods (InferencePool mode)",
        "operator",
        "The InferencePool the picker serves; its Service selects it.",
    ),
    "slipway.dev/routed": (
        "label",
        "the objects a traffic router names (Services, HTTPRoutes, InferencePools, endpoint pickers)",
        "operator",
        "`true`: the object carries the split; of the kinds Slipway also makes for itself (Deployments), only "
        "those carrying it are deleted when the traffic mode no longer names them.",
    ),
    "slipway.dev/track": (
        "label",
        "serving Deployments and pods",
        "operator",
        "`stable` or `canary`; the analysis selects `slipway_dev_track`.",
    ),
    "slipway.dev/revision": (
        "label",
        "serving Deployments and pods",
        "operator",
        "The hash of the served pod template (the revision); `slipway_dev_revision` in Prometheus.",
    ),
    "slipway.dev/model-version": (
        "label",
        "serving Deployments and pods",
        "operator",
        "The MLflow model version served; `slipway_dev_model_version` in Prometheus.",
    ),
    "slipway.dev/model-name": ("annotation", "serving pods", "operator", "The MLflow registered model served."),
    "slipway.dev/model-uri": ("annotation", "serving pods", "operator", "The URI of the model version served."),
    "slipway.dev/applied-hash": (
        "annotation",
        "every child",
        "operator",
        "The hash of what Slipway last applied: a child whose hash differs from the desired one is updated.",
    ),
    "slipway.dev/mlflow-webhook-deliveries": (
        "annotation",
        "the Lease slipway-mlflow-webhook in the operator's namespace",
        "operator",
        "The MLflow webhook delivery ids believed in the last 10 minutes, with their "
        "timestamps (JSON): every replica refuses a delivery whose id is there, so none is believed twice, "
        "across failovers and restarts too.",
    ),
    "slipway.dev/finalizer": (
        "finalizer",
        "the three kinds (earlier Slipway versions)",
        "operator",
        "Added by earlier versions' timers; the operator removes it on the object's first pass.",
    ),
    "slipway.dev/work": (
        "annotation",
        "a TrainingRun's checkpoint claim",
        "operator",
        "The work key the claim was made for (the same as its MLflow run's tag): a claim adopted by a TrainingRun "
        "applied again must carry its key, so that no other work resumes from its checkpoints.",
    ),
}


def names_in_code() -> set[str]:
    """Every module-level string constant of the package whose value starts with ``slipway.dev/``."""
    found = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
            if (
                isinstance(value, ast.Constant)
                and isinstance(value.value, str)
                and value.value.startswith(PREFIX)
                and value.value != PREFIX
            ):
                found.add(value.value)
    return found


def markdown() -> str:
    code = names_in_code()
    if code != set(NAMES):
        raise SystemExit(
            f"slipway.reference.labels: undocumented {sorted(code - set(NAMES))}, "
            f"gone from the code {sorted(set(NAMES) - code)}"
        )
    lines = [
        "# Labels and annotations",
        "",
        GENERATED.format(source="the slipway.dev/ constants of operator/slipway"),
        "",
        "Every name under `slipway.dev/` that Slipway reads or writes on Kubernetes objects; its MLflow tags "
        "are on [their own page](mlflow-tags.md). Every child also carries "
        "`app.kubernetes.io/managed-by: slipway`, the selector of the operator's watches. Annotations a user "
        "sets are removed by the operator once it has acted; it never writes to a spec.",
        "",
        "| name | what | on | set by | meaning |",
        "|---|---|---|---|---|",
    ]
    for name in sorted(NAMES):
        what, on, who, meaning = NAMES[name]
        lines.append(f"| `{name}` | {what} | {escape(on)} | {escape(who)} | {escape(meaning)} |")
    return "\n".join(lines) + "\n"
