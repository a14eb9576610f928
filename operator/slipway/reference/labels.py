"""The labels, annotations, scheduling gates and MLflow tags named ``slipway.dev/...``: what each is
on and what it means. The names are found in the code (every module-level string constant of the
package whose value starts with ``slipway.dev/``), so a name added without a line here fails the
generator, and a line here whose name the code no longer has fails it too."""

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
    "slipway.dev/proof": (
        "MLflow tag",
        "experiments, registered models, runs and model versions Slipway creates",
        "operator",
        "An HMAC-SHA256, under a key only the operator holds, of what the object is (kind, namespace "
        "and name; for a run or version also its object, id, role and work key). Where the allow-list applies, "
        "an experiment, model, run or version found without a valid one is not used.",
    ),
    "slipway.dev/namespace": (
        "MLflow tag",
        "experiments and registered models Slipway creates",
        "operator",
        "The namespace the experiment or model was created for (covered by its `slipway.dev/proof`).",
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
        "The run's name (hashed past 63 characters): selects the run's children.",
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
        "label; MLflow tag",
        "a ModelArtifact's Jobs and pods; the MLflow runs it makes",
        "operator",
        "The ModelArtifact's name (as a label, hashed past 63 characters).",
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
    "slipway.dev/uid": (
        "MLflow tag",
        "runs and model versions",
        "operator",
        "The uid of the object that made it: looked up before any create, so nothing is made twice.",
    ),
    "slipway.dev/work": (
        "MLflow tag",
        "training runs and model versions",
        "operator",
        "A hash of the ModelArtifact's namespace, name, spec and resolved source: the same object applied again "
        "from Git (a new uid, no status) finds the versions its predecessor registered and registers none. On a "
        "TrainingRun's run, of its namespace, name and the spec fields that define the work (not scheduling): "
        "the same TrainingRun applied again shows the run its predecessor finished, or goes on in one cut short. "
        "Also an annotation on the checkpoint claim: a claim adopted by a TrainingRun applied again must carry its "
        "key, so that no other work resumes from its checkpoints.",
    ),
    "slipway.dev/role": (
        "MLflow tag",
        "runs and model versions",
        "operator",
        "What the run or version is for in its object's lifecycle (training, quantization, validation, the versions).",
    ),
    "slipway.dev/validation": (
        "MLflow tag",
        "model versions",
        "operator",
        "The gates' decision, `passed` or `rejected`, recorded before any alias moves.",
    ),
    "slipway.dev/gates": (
        "MLflow tag",
        "model versions",
        "operator",
        "Each gate's value, threshold and result (JSON).",
    ),
    "slipway.dev/aliases-set": (
        "MLflow tag",
        "model versions",
        "operator",
        "The aliases moved to the version once validated (`-` for none).",
    ),
    "slipway.dev/rollback": (
        "MLflow tag",
        "model versions",
        "operator",
        "Set on a version a canary or a bake rolled back: the rollback's record (the InferenceDeployment's "
        "`namespace/name`, its reason, metric and value). Only that InferenceDeployment, re-created without "
        "its status, refuses the version for it.",
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
        "# Labels, annotations and tags",
        "",
        GENERATED.format(source="the slipway.dev/ constants of operator/slipway"),
        "",
        "Every name under `slipway.dev/` that Slipway reads or writes. Every child also carries "
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
