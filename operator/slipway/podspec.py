"""The pod pieces every child's builder shares: environment, resources, MLflow credentials and TLS
files by reference, the restricted Pod Security Standard and a spec's podTemplate merged over them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from slipway.models.base import EnvVar, Resources
from slipway.models.pods import SHM_VOLUME, PodTemplate, shm_size


def env_list(base: dict[str, str], extra: list[EnvVar] | None) -> list[dict[str, Any]]:
    """Slipway's variables first, then the user's (a user's variable of the same name wins)."""
    user = [e.to_dict() for e in extra or []]
    names = {e["name"] for e in user}
    return [{"name": k, "value": v} for k, v in base.items() if k not in names] + user


def resource_requirements(resources: Resources) -> dict[str, Any]:
    """GPUs as a limit on the extended resource; CPU, memory and other extended resources (RDMA, EFA
    devices) as request = limit."""
    limits: dict[str, Any] = {}
    requests: dict[str, Any] = {}
    if resources.gpus:
        limits[resources.gpu_resource_name] = str(resources.gpus)
    for key in ("cpu", "memory"):
        value = getattr(resources, key)
        if value is not None:
            limits[key] = requests[key] = value
    for name, count in (resources.extended_resources or {}).items():
        limits[name] = requests[name] = str(count)
    out: dict[str, Any] = {}
    if limits:
        out["limits"] = limits
    if requests:
        out["requests"] = requests
    return out


def mlflow_containers(manifest: dict[str, Any]) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """(pod spec, its containers that talk to MLflow) of each pod template of ``manifest`` (a Job,
    JobSet or Deployment). Where init containers fetch the model (a serving pod with spec.modelLoad),
    only they talk to MLflow: the model server then reads files."""
    if manifest.get("kind") == "JobSet":
        pods = [r["template"]["spec"]["template"]["spec"] for r in manifest["spec"]["replicatedJobs"]]
    else:
        pods = [manifest["spec"]["template"]["spec"]]
    # Native sidecars (init containers that run for the pod's life) are the user's: never MLflow's.
    fetchers = [[c for c in pod.get("initContainers") or [] if c.get("restartPolicy") != "Always"] for pod in pods]
    return [(pod, init or pod["containers"]) for pod, init in zip(pods, fetchers, strict=True)]


def with_credentials(manifest: dict[str, Any], secret: str | None) -> dict[str, Any]:
    """``manifest`` (a Job, JobSet or Deployment) whose containers that talk to MLflow read its credentials
    from the Secret ``secret`` in their namespace, if it exists (MLFLOW_TRACKING_USERNAME/PASSWORD or
    MLFLOW_TRACKING_TOKEN): credentials reach pods only by reference, never as values; the model server
    of a pod whose init containers fetch the model gets none (:func:`mlflow_containers`)."""
    if not secret:
        return manifest
    for _, containers in mlflow_containers(manifest):
        for container in containers:
            container.setdefault("envFrom", []).append({"secretRef": {"name": secret, "optional": True}})
    return manifest


@dataclass(frozen=True)
class PodTls:
    """What the pods that talk to MLflow get of TLS: a ConfigMap of their namespace holding the CA bundle
    (key ``ca.crt``), a Secret of it holding their client certificate and key in one PEM file (key
    ``tls-combined.pem``), or no check of MLflow's certificate (the operator's --mlflow-insecure-tls)."""

    ca_configmap: str = ""
    client_cert_secret: str = ""
    insecure: bool = False


MLFLOW_TLS_DIR = "/etc/slipway-tls"
CA_KEY = "ca.crt"
CLIENT_CERT_KEY = "tls-combined.pem"
# The volumes (and mounts) the operator adds, and the variables of MLflow's client they feed.
MLFLOW_CA_VOLUME = "slipway-mlflow-ca"
MLFLOW_CLIENT_CERT_VOLUME = "slipway-mlflow-client-cert"
MLFLOW_TLS_VOLUMES = (MLFLOW_CA_VOLUME, MLFLOW_CLIENT_CERT_VOLUME)
SERVER_CERT_ENV = "MLFLOW_TRACKING_SERVER_CERT_PATH"
CLIENT_CERT_ENV = "MLFLOW_TRACKING_CLIENT_CERT_PATH"
INSECURE_ENV = "MLFLOW_TRACKING_INSECURE_TLS"
MLFLOW_TLS_ENV = (SERVER_CERT_ENV, CLIENT_CERT_ENV, INSECURE_ENV)


def tls_pieces(tls: PodTls) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, str]]:
    """(volumes, mounts, variables) of ``tls``: each file by reference, optional (a namespace without
    the ConfigMap or Secret runs its pods without it), never its content."""
    volumes, mounts, env = [], [], {}
    if tls.insecure:  # MLflow's client refuses a CA bundle beside it
        env[INSECURE_ENV] = "true"
    elif tls.ca_configmap:
        items = [{"key": CA_KEY, "path": CA_KEY}]
        volumes.append(
            {"name": MLFLOW_CA_VOLUME, "configMap": {"name": tls.ca_configmap, "items": items, "optional": True}}
        )
        mounts.append({"name": MLFLOW_CA_VOLUME, "mountPath": f"{MLFLOW_TLS_DIR}/mlflow-ca", "readOnly": True})
        env[SERVER_CERT_ENV] = f"{MLFLOW_TLS_DIR}/mlflow-ca/{CA_KEY}"
    if tls.client_cert_secret:
        items = [{"key": CLIENT_CERT_KEY, "path": CLIENT_CERT_KEY}]
        secret = {"secretName": tls.client_cert_secret, "items": items, "optional": True}
        volumes.append({"name": MLFLOW_CLIENT_CERT_VOLUME, "secret": secret})
        mounts.append(
            {"name": MLFLOW_CLIENT_CERT_VOLUME, "mountPath": f"{MLFLOW_TLS_DIR}/mlflow-client", "readOnly": True}
        )
        env[CLIENT_CERT_ENV] = f"{MLFLOW_TLS_DIR}/mlflow-client/{CLIENT_CERT_KEY}"
    return volumes, mounts, {name: env[name] for name in MLFLOW_TLS_ENV if name in env}


def pod_tls_of(pod: Mapping[str, Any]) -> PodTls:
    """The PodTls a pod spec was built with (:func:`with_mlflow_tls`), from its volumes and variables."""
    volumes = {v.get("name"): v for v in pod.get("volumes") or [] if isinstance(v, Mapping)}
    configmap = (volumes.get(MLFLOW_CA_VOLUME) or {}).get("configMap") or {}
    secret = (volumes.get(MLFLOW_CLIENT_CERT_VOLUME) or {}).get("secret") or {}
    containers = [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]
    insecure = any(
        e.get("name") == INSECURE_ENV and e.get("value") == "true" for c in containers for e in c.get("env") or []
    )
    return PodTls(str(configmap.get("name") or ""), str(secret.get("secretName") or ""), insecure)


def with_mlflow_tls(manifest: dict[str, Any], tls: PodTls) -> dict[str, Any]:
    """``manifest`` (a Job, JobSet or Deployment) whose containers that talk to MLflow get, in MLflow's own
    variables, the CA bundle and client certificate of ``tls`` (mounted from their namespace) or the
    insecure switch. A container whose spec sets one of those variables itself is left as the spec says."""
    volumes, mounts, env = tls_pieces(tls)
    if not env:
        return manifest
    for pod, containers in mlflow_containers(manifest):
        if volumes:
            pod["volumes"] = [*pod.get("volumes", []), *volumes]
        for container in containers:
            if any(e["name"] in MLFLOW_TLS_ENV for e in container.get("env", [])):
                continue
            container["env"] = [*container.get("env", []), *({"name": k, "value": v} for k, v in env.items())]
            if mounts:
                container["volumeMounts"] = [*container.get("volumeMounts", []), *mounts]
    return manifest


# What the restricted Pod Security Standard asks of a pod and of each of its containers: every pod
# Slipway builds has them, so it runs in a namespace that enforces `restricted`.
RESTRICTED_POD = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def apply_pod_template(
    template: dict[str, Any], container: dict[str, Any], pod_template: PodTemplate | None, gpus: int = 0
) -> None:
    """Merge a spec's podTemplate into the pod ``template`` Slipway built and its main ``container``:
    Slipway's labels and annotations win, nodeSelector keys set by the spec itself win, tolerations,
    volumes, volume mounts and envFrom are added, env of the template replaces same-named variables,
    sidecars run first as native sidecars, security contexts are merged over the restricted defaults
    (which every pod gets, template or not; a sidecar's own wins for it). A pod with ``gpus`` gets a
    memory-backed /dev/shm unless the template says otherwise. priorityClassName is the caller's to
    decide (spec fields and defaults rank differently)."""
    pod = template["spec"]
    given = pod_template.model_dump(mode="json", by_alias=True, exclude_none=True) if pod_template else {}
    own_labels = dict((template.get("metadata") or {}).get("labels") or {})
    if given.get("sidecars"):
        sidecars = [{**c, "restartPolicy": "Always"} for c in given["sidecars"]]
        pod["initContainers"] = [*sidecars, *pod.get("initContainers", [])]
    given_pod = given.get("securityContext") or {}
    given_container = given.get("containerSecurityContext") or {}
    pod["securityContext"] = {**RESTRICTED_POD, **given_pod}
    for each in [*pod.get("initContainers", []), *pod["containers"]]:
        each["securityContext"] = {**RESTRICTED_CONTAINER, **given_container, **(each.get("securityContext") or {})}
    if given:
        _merge(template, container, given, own_labels)
    _shared_memory(pod, container, shm_size(pod_template, gpus))


def _merge(template: dict[str, Any], container: dict[str, Any], given: dict[str, Any], own: dict[str, str]) -> None:
    pod = template["spec"]
    meta = template.setdefault("metadata", {})
    for key in ("labels", "annotations"):
        if key in given:
            meta[key] = {**given[key], **meta.get(key, {})}
    if "nodeSelector" in given:
        pod["nodeSelector"] = {**given["nodeSelector"], **pod.get("nodeSelector", {})}
    for key in ("tolerations", "volumes"):
        if key in given:
            pod[key] = [*pod.get(key, []), *given[key]]
    for key in ("affinity", "serviceAccountName", "imagePullSecrets", "runtimeClassName"):
        if key in given:
            pod[key] = given[key]
    if "topologySpreadConstraints" in given:
        pod["topologySpreadConstraints"] = [
            {"labelSelector": {"matchLabels": own}, **c} for c in given["topologySpreadConstraints"]
        ]
    if "volumeMounts" in given:
        container["volumeMounts"] = [*container.get("volumeMounts", []), *given["volumeMounts"]]
    if "env" in given:
        names = {e["name"] for e in given["env"]}
        container["env"] = [e for e in container.get("env", []) if e["name"] not in names] + given["env"]
    if "envFrom" in given:
        container["envFrom"] = [*container.get("envFrom", []), *given["envFrom"]]


def _shared_memory(pod: dict[str, Any], container: dict[str, Any], size: str | None) -> None:
    """/dev/shm of ``size`` for the main container: an emptyDir of medium Memory (unless the spec's
    own volumes mount something there)."""
    if size is None or any(m.get("mountPath") == "/dev/shm" for m in container.get("volumeMounts", [])):
        return
    pod["volumes"] = [
        *pod.get("volumes", []),
        {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": size}},
    ]
    container["volumeMounts"] = [*container.get("volumeMounts", []), {"name": SHM_VOLUME, "mountPath": "/dev/shm"}]
