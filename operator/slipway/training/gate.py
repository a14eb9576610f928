"""The MLflow run gate of a TrainingRun's pods.

The Job exists before its MLflow run (a sweep's Jobs are created within seconds of apply, MLflow
follows): its pods carry the scheduling gate RUN_GATE, and read the run from the annotations
RUN_ID_ANNOTATION and EXPERIMENT_ID_ANNOTATION, until the operator, once the run exists, writes
them into the pod template (or, for pods already made, into the pods) and lifts the gate. No pod
runs without its MLflow run. These are the merge patches that do it (pure).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

RUN_GATE = "slipway.dev/mlflow-run"
RUN_ID_ANNOTATION = "slipway.dev/mlflow-run-id"
EXPERIMENT_ID_ANNOTATION = "slipway.dev/mlflow-experiment-id"


@dataclass(frozen=True)
class MlflowLink:
    """What the pod needs to log into the run the operator created."""

    tracking_uri: str
    run_id: str
    experiment_id: str

    def annotations(self) -> dict[str, str]:
        return {RUN_ID_ANNOTATION: self.run_id, EXPERIMENT_ID_ANNOTATION: self.experiment_id}


def pod_template_of(child: dict[str, Any]) -> dict[str, Any]:
    """The pod template of a training Job or JobSet (its one replicated Job)."""
    spec = child.get("spec") or {}
    if child.get("kind") == "JobSet":
        spec = spec["replicatedJobs"][0]["template"]["spec"]
    return dict(spec.get("template") or {})


def gated(template_or_pod: dict[str, Any]) -> bool:
    """Whether a pod (or pod template) still waits for its MLflow run (RUN_GATE)."""
    return any(g.get("name") == RUN_GATE for g in (template_or_pod.get("spec") or {}).get("schedulingGates") or [])


def release(template_or_pod: dict[str, Any], link: MlflowLink) -> dict[str, Any]:
    """The merge patch of a pod template (or a pod) that gives it its MLflow run and lifts RUN_GATE
    (other gates, Kueue's or the user's, stay)."""
    others = [g for g in (template_or_pod.get("spec") or {}).get("schedulingGates") or [] if g.get("name") != RUN_GATE]
    return {"metadata": {"annotations": link.annotations()}, "spec": {"schedulingGates": others or None}}


def pods_to_release(pods: list[dict[str, Any]], owners: set[str], gang: int) -> list[dict[str, Any]]:
    """The gated pods (RUN_GATE) of the Jobs ``owners`` to release now: a Job's pods whole once it
    has ``gang`` pods that are not going away, gated or not (a JobSet's gang starts together; one
    pod released before a failure does not hold back the rest), any at once for ``gang`` 1."""
    made: dict[str, list[dict[str, Any]]] = {}  # owning Job's uid -> its pods that are not going away
    for pod in pods:
        refs = pod["metadata"].get("ownerReferences") or []
        owner = next((r["uid"] for r in refs if r.get("uid") in owners), None)
        if owner and not pod["metadata"].get("deletionTimestamp"):
            made.setdefault(owner, []).append(pod)
    return [p for siblings in made.values() if len(siblings) >= gang for p in siblings if gated(p)]


def release_patch(child: dict[str, Any], link: MlflowLink, resume: bool) -> dict[str, Any]:
    """The merge patch of a suspended training Job or JobSet that has never run: its pods' MLflow
    run and RUN_GATE lifted (:func:`release`), and ``resume``: unsuspended."""
    template = release(pod_template_of(child), link)
    if child.get("kind") == "JobSet":
        replicated = child["spec"]["replicatedJobs"]
        job_template = replicated[0]["template"]
        job_spec = {**job_template["spec"], "template": _merged(job_template["spec"]["template"], template)}
        inner = {**replicated[0], "template": {**job_template, "spec": job_spec}}
        patch: dict[str, Any] = {"spec": {"replicatedJobs": [inner, *replicated[1:]]}}
    else:
        patch = {"spec": {"template": template}}
    if resume:
        patch["spec"]["suspend"] = False
    return patch


def _merged(template: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """A pod template with a :func:`release` patch applied (a JobSet's replicatedJobs list is
    replaced whole by a merge patch)."""
    meta = dict(template.get("metadata") or {})
    meta["annotations"] = {**(meta.get("annotations") or {}), **patch["metadata"]["annotations"]}
    spec = dict(template.get("spec") or {})
    gates = patch["spec"]["schedulingGates"]
    if gates:
        spec["schedulingGates"] = gates
    else:
        spec.pop("schedulingGates", None)
    return {**template, "metadata": meta, "spec": spec}
