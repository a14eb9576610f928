"""Names, labels and container pieces shared by every builder.

Names and label values are derived so that any name the API server accepts for a custom
resource (a DNS-1123 subdomain: up to 253 characters, dots, a leading digit) gives valid
children. A derivation is deterministic (a restarted operator finds the same children) and
the identity whenever the plain value is already valid; otherwise the value is lowercased,
its dots and other invalid characters become ``-``, a DNS-1035 name gets a letter in front
of a leading digit, and it is cut to length with a hash of the whole plain value inserted,
so two different parents never share a child.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from slipway.models.base import EnvVar, PodTemplate, Resources

MANAGED_BY = {"app.kubernetes.io/managed-by": "slipway"}
MAX_LABEL = 63  # DNS labels (Service, Job and Deployment names) and label values
HASH_LENGTH = 8
LETTER = "s"  # in front of a DNS-1035 name whose parent starts with a digit

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:HASH_LENGTH]


def _derive(parent: str, suffix: str, pattern: re.Pattern[str], max_length: int, letter_first: bool) -> str:
    plain = f"{parent}-{suffix}" if suffix else parent
    if len(plain) <= max_length and pattern.fullmatch(plain):
        return plain
    base = re.sub(r"[^a-z0-9-]+", "-", parent.lower()).strip("-")
    head = [LETTER] if letter_first and not base[:1].isalpha() else []
    tail = [_digest(plain), suffix] if suffix else [_digest(plain)]
    keep = max_length - len("-".join([*head, *tail])) - 1
    if keep < 1:
        raise ValueError(f"no name of at most {max_length} characters ends with -{suffix}")
    return "-".join(p for p in (*head, base[:keep].rstrip("-"), *tail) if p)


def dns1123_name(parent: str, suffix: str = "", *, max_length: int = MAX_LABEL) -> str:
    """A DNS-1123 label (Job, Deployment, PVC names): ``<parent>-<suffix>`` when valid, else derived."""
    return _derive(parent, suffix, _DNS1123_LABEL, max_length, letter_first=False)


def dns1035_name(parent: str, suffix: str = "", *, max_length: int = MAX_LABEL) -> str:
    """A DNS-1035 label (Service names: a letter first, no dots): ``<parent>-<suffix>`` when valid,
    else derived (``7b-chat`` -> ``s-7b-chat-<hash>``, ``llama-3.1-8b`` -> ``llama-3-1-8b-<hash>``)."""
    return _derive(parent, suffix, _DNS1035_LABEL, max_length, letter_first=True)


def label_value(value: str) -> str:
    """A valid label value: ``value`` itself when valid, else cut to 63 characters with a hash."""
    if len(value) <= MAX_LABEL and _LABEL_VALUE.fullmatch(value):
        return value
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", value).lstrip("-_.")
    base = base[: MAX_LABEL - HASH_LENGTH - 1].rstrip("-_.")
    return f"{base}-{_digest(value)}" if base else _digest(value)


def parent_name(meta: dict[str, Any], annotation: str, label: str) -> str:
    """The parent a pod names: its annotation (the full name), else its label (the same value below
    64 characters; pods made before the annotation existed carry only the label)."""
    return (meta.get("annotations") or {}).get(annotation) or meta["labels"][label]


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
