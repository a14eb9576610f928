"""The pod pieces every child's builder shares: environment, resources, MLflow credentials by
reference, the restricted Pod Security Standard and a spec's podTemplate merged over them."""

from __future__ import annotations

from typing import Any

from slipway.models.base import EnvVar, PodTemplate, Resources


def env_list(base: dict[str, str], extra: list[EnvVar] | None) -> list[dict[str, Any]]:
    """Slipway's variables first, then the user's (a user's variable of the same name wins)."""
    user = [e.to_dict() for e in extra or []]
    names = {e["name"] for e in user}
    return [{"name": k, "value": v} for k, v in base.items() if k not in names] + user


def resource_requirements(resources: Resources) -> dict[str, Any]:
    """GPUs as a limit on the extended resource; CPU and memory as request = limit."""
    limits: dict[str, Any] = {}
    requests: dict[str, Any] = {}
    if resources.gpus:
        limits[resources.gpu_resource_name] = str(resources.gpus)
    for key in ("cpu", "memory"):
        value = getattr(resources, key)
        if value is not None:
            limits[key] = requests[key] = value
    out: dict[str, Any] = {}
    if limits:
        out["limits"] = limits
    if requests:
        out["requests"] = requests
    return out


def with_credentials(manifest: dict[str, Any], secret: str | None) -> dict[str, Any]:
    """``manifest`` (a Job, JobSet or Deployment) whose containers that talk to MLflow read its credentials
    from the Secret ``secret`` in their namespace, if it exists (MLFLOW_TRACKING_USERNAME/PASSWORD or
    MLFLOW_TRACKING_TOKEN): credentials reach pods only by reference, never as values. Where init
    containers fetch the model (a serving pod with spec.modelLoad), only they talk to MLflow: the
    model server then reads files and gets no credentials."""
    if not secret:
        return manifest
    if manifest.get("kind") == "JobSet":
        pods = [r["template"]["spec"]["template"]["spec"] for r in manifest["spec"]["replicatedJobs"]]
    else:
        pods = [manifest["spec"]["template"]["spec"]]
    for pod in pods:
        for container in pod.get("initContainers") or pod["containers"]:
            container.setdefault("envFrom", []).append({"secretRef": {"name": secret, "optional": True}})
    return manifest


# What the restricted Pod Security Standard asks of a pod and of each of its containers: every pod
# Slipway builds has them, so it runs in a namespace that enforces `restricted`.
RESTRICTED_POD = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def apply_pod_template(template: dict[str, Any], container: dict[str, Any], pod_template: PodTemplate | None) -> None:
    """Merge a spec's podTemplate into the pod ``template`` Slipway built and its main ``container``:
    Slipway's labels and annotations win, nodeSelector keys set by the spec itself win, tolerations,
    volumes, volume mounts and envFrom are added, env of the template replaces same-named variables,
    security contexts are merged over the restricted defaults (which every pod gets, template or not).
    priorityClassName is the caller's to decide (spec fields and defaults rank differently)."""
    pod = template["spec"]
    given_pod = (pod_template.security_context if pod_template else None) or {}
    given_container = (pod_template.container_security_context if pod_template else None) or {}
    pod["securityContext"] = {**RESTRICTED_POD, **given_pod}
    for each in [*pod.get("initContainers", []), *pod["containers"]]:
        each["securityContext"] = {**RESTRICTED_CONTAINER, **given_container}
    if pod_template is None:
        return
    given = pod_template.model_dump(mode="json", by_alias=True, exclude_none=True)
    meta = template.setdefault("metadata", {})
    for key in ("labels", "annotations"):
        if key in given:
            meta[key] = {**given[key], **meta.get(key, {})}
    if "nodeSelector" in given:
        pod["nodeSelector"] = {**given["nodeSelector"], **pod.get("nodeSelector", {})}
    for key in ("tolerations", "volumes"):
        if key in given:
            pod[key] = [*pod.get(key, []), *given[key]]
    for key in ("affinity", "serviceAccountName", "imagePullSecrets"):
        if key in given:
            pod[key] = given[key]
    if "volumeMounts" in given:
        container["volumeMounts"] = [*container.get("volumeMounts", []), *given["volumeMounts"]]
    if "env" in given:
        names = {e["name"] for e in given["env"]}
        container["env"] = [e for e in container.get("env", []) if e["name"] not in names] + given["env"]
    if "envFrom" in given:
        container["envFrom"] = [*container.get("envFrom", []), *given["envFrom"]]
