"""InferenceDeployment -> stable and canary Deployments, Service(s), HPA and (GatewayAPI) HTTPRoute.
The revision their pods serve is computed in slipway.inference.revision, the server's probes in
slipway.inference.probes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from slipway import API_VERSION
from slipway.inference.model import InferenceDeploymentSpec
from slipway.inference.probes import probe
from slipway.inference.revision import revision
from slipway.mlflow.digests import FILES_DIGEST_ENV
from slipway.names import MANAGED_BY, dns1035_name, dns1123_name, label_value, parent_name
from slipway.podspec import apply_pod_template, env_list, resource_requirements

DEPLOYMENT_LABEL = "slipway.dev/deployment"  # the name as a label value (hashed past 63 characters)
DEPLOYMENT_NAME_ANNOTATION = "slipway.dev/deployment-name"  # on pods: the full name
TRACK_LABEL = "slipway.dev/track"
VERSION_LABEL = "slipway.dev/model-version"
URI_ANNOTATION = "slipway.dev/model-uri"
MODEL_ANNOTATION = "slipway.dev/model-name"
REVISION_LABEL = "slipway.dev/revision"
TRACKS = ("stable", "canary")
MODEL_VOLUME = "slipway-model"
CACHE_VOLUME = "slipway-model-cache"
CACHE_PATH = "/var/cache/slipway-models"
FETCH_COMMAND = ["python", "-m", "slipway.workloads.fetch"]


# Every variable Slipway sets in the model server's container and in the fetch-model init container,
# and when: their contract (docs/reference/programs/ is generated from it; a test holds it to the
# Deployments built). A variable of the same name in spec.env or spec.podTemplate.env wins.
SERVER_ENV: dict[str, str] = {
    "SLIPWAY_MODEL_URI": "The version to serve, `models:/<name>/<version>`.",
    "SLIPWAY_MODEL_VERSION": "Its version number (as the pods' label slipway.dev/model-version).",
    "SLIPWAY_MODEL_NAME": "Its registered model.",
    "SLIPWAY_TRACK": "`stable` or `canary`: the track the pod serves on.",
    "PORT": "spec.port: listen on it (the Service, the probes and the metrics scrape use it).",
    "POD_IP": "The pod's IP address.",
    "MLFLOW_TRACKING_URI": "The MLflow address the pods use (the operator's, without credentials).",
    "SLIPWAY_MODEL_PATH": "With spec.modelLoad: the directory where the fetch-model init container put the "
    "version's files, mounted read-only; serve from it.",
}
FETCH_ENV: dict[str, str] = {
    "SLIPWAY_MODEL_URI": "The version to fetch, `models:/<name>/<version>`.",
    "SLIPWAY_MODEL_VERSION": "Its version number.",
    "SLIPWAY_MODEL_NAME": "Its registered model.",
    "SLIPWAY_MODEL_PATH": "spec.modelLoad.path: where to put the files (an emptyDir the server mounts read-only).",
    "MLFLOW_TRACKING_URI": "The MLflow address the pods use (the operator's, without credentials).",
    FILES_DIGEST_ENV: "The validated version's files digest (its ModelArtifact's status.filesDigest, when the "
    "version is one): refuse files that do not have it.",
    "SLIPWAY_MODEL_CACHE": f"With spec.modelLoad.cacheClaimName: `{CACHE_PATH}`, a claim the pods share; a version "
    "already there with the right digest is copied, not downloaded.",
}


def deployment_name(name: str, track: str) -> str:
    return dns1123_name(name, track)


def service_name(name: str) -> str:
    """The Service over both tracks: the name itself when it is a DNS-1035 label."""
    return dns1035_name(name)


def track_service_name(name: str, track: str) -> str:
    """GatewayAPI mode: one Service per track, the HTTPRoute's backends."""
    return dns1035_name(name, track)


def deployment_of_pod(meta: dict[str, Any]) -> str:
    """The InferenceDeployment a serving pod belongs to (see :func:`parent_name`)."""
    return parent_name(meta, DEPLOYMENT_NAME_ANNOTATION, DEPLOYMENT_LABEL)


def selector(name: str, track: str | None = None) -> dict[str, str]:
    labels = {DEPLOYMENT_LABEL: label_value(name)}
    if track:
        labels[TRACK_LABEL] = track
    return labels


def fetch_container(
    spec: InferenceDeploymentSpec, env: list[dict[str, Any]], image: str, digest: str = ""
) -> dict[str, Any]:
    """The init container putting the version's files at spec.modelLoad.path, checked against ``digest``."""
    assert spec.model_load is not None
    mounts = [{"name": MODEL_VOLUME, "mountPath": spec.model_load.path}]
    own = ("SLIPWAY_MODEL_", "MLFLOW_")
    fetch_env = [e for e in env if e["name"].startswith(own) and e["name"] != FILES_DIGEST_ENV]
    fetch_env += [{"name": FILES_DIGEST_ENV, "value": digest}] if digest else []
    if spec.model_load.cache_claim_name:
        mounts.append({"name": CACHE_VOLUME, "mountPath": CACHE_PATH})
        fetch_env.append({"name": "SLIPWAY_MODEL_CACHE", "value": CACHE_PATH})
    return {
        "name": "fetch-model",
        "image": image,
        "command": list(FETCH_COMMAND),
        "env": fetch_env,
        "volumeMounts": mounts,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def deployment(
    name: str,
    namespace: str,
    spec: InferenceDeploymentSpec,
    track: str,
    version: str,
    uri: str,
    mlflow_url: str | None,
    replicas: int | None,
    model_name: str | None = None,
    workload_image: str = "",
    priority_class: str = "",
    budget: tuple[int, int] | None = None,
    *,
    revision_id: str = "",
    fetch_image: str = "",
    files_digest: str = "",
) -> dict[str, Any]:
    """One track's Deployment, serving ``version`` of ``model_name`` (default: spec.model.name).
    ``replicas`` None leaves the count as it is. With spec.modelLoad, an init container of ``fetch_image``
    (default ``workload_image``, Slipway's) fetches the model first and checks it against ``files_digest``
    (the version's: no part of the revision). The pods get ``priority_class`` (the operator's default,
    above training's) unless spec.podTemplate names one. ``revision_id``: the revision's label when the
    caller resolved it (see :func:`slipway.inference.revision.legacy_revisions`)."""
    labels = {**MANAGED_BY, **selector(name, track), VERSION_LABEL: label_value(version)}
    labels[REVISION_LABEL] = revision_id or revision(spec, version, uri, model_name)
    env = _server_env(spec, track, version, uri, mlflow_url, model_name)
    container = _server_container(spec, env)
    pod_spec = _pod_spec(spec, container, priority_class, fetch_image or workload_image or spec.image, files_digest)
    body: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": deployment_name(name, track),
            "namespace": namespace,
            "labels": labels,
            "annotations": {URI_ANNOTATION: uri, MODEL_ANNOTATION: model_name or spec.model.name or ""},
        },
        "spec": {
            "selector": {"matchLabels": selector(name, track)},
            "strategy": strategy(spec, track, budget),
            "template": {
                "metadata": {
                    "labels": labels,
                    "annotations": {
                        "prometheus.io/scrape": "true",
                        "prometheus.io/port": str(spec.port),
                        "prometheus.io/path": "/metrics",
                        DEPLOYMENT_NAME_ANNOTATION: name,
                    },
                },
                "spec": pod_spec,
            },
        },
    }
    apply_pod_template(body["spec"]["template"], container, spec.pod_template, spec.resources.gpus)
    if replicas is not None:
        body["spec"]["replicas"] = replicas
    return body


def _server_env(
    spec: InferenceDeploymentSpec, track: str, version: str, uri: str, mlflow_url: str | None, model_name: str | None
) -> list[dict[str, Any]]:
    """The server's environment: the model to serve, its track and port, MLflow, then spec.env."""
    base_env = {
        "SLIPWAY_MODEL_URI": uri,
        "SLIPWAY_MODEL_VERSION": version,
        "SLIPWAY_MODEL_NAME": model_name or spec.model.name or "",
        "SLIPWAY_TRACK": track,
        "PORT": str(spec.port),
    }
    if mlflow_url:
        base_env["MLFLOW_TRACKING_URI"] = mlflow_url
    if spec.model_load is not None:
        base_env["SLIPWAY_MODEL_PATH"] = spec.model_load.path
    env = [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        *env_list(base_env, spec.env),
    ]
    return env


def _server_container(spec: InferenceDeploymentSpec, env: list[dict[str, Any]]) -> dict[str, Any]:
    """The server's container, with its probes and its drain."""
    container: dict[str, Any] = {
        "name": "server",
        "image": spec.image,
        "ports": [{"name": "http", "containerPort": spec.port}],
        "env": env,
        "resources": resource_requirements(spec.resources),
        "startupProbe": probe(spec, "startup"),
        "readinessProbe": probe(spec, "readiness"),
        "livenessProbe": probe(spec, "liveness"),
    }
    if spec.command:
        container["command"] = list(spec.command)
    if spec.args:
        container["args"] = list(spec.args)
    # Drain: the pod leaves the endpoints, keeps serving for delaySeconds (preStop), then its server
    # finishes what is in flight within maxRequestSeconds before it is killed.
    drain = spec.drain
    if drain.delay_seconds:
        container["lifecycle"] = {"preStop": {"sleep": {"seconds": drain.delay_seconds}}}
    return container


def _pod_spec(
    spec: InferenceDeploymentSpec, container: dict[str, Any], priority_class: str, image: str, files_digest: str = ""
) -> dict[str, Any]:
    """The server pods' spec: the drain's grace period; with spec.modelLoad, an init container of
    ``image`` that fetches the model into a volume the server reads; the priority class."""
    drain = spec.drain
    grace = max(1, drain.delay_seconds + drain.max_request_seconds)
    pod_spec: dict[str, Any] = {"containers": [container], "terminationGracePeriodSeconds": grace}
    if spec.model_load is not None:
        container["volumeMounts"] = [{"name": MODEL_VOLUME, "mountPath": spec.model_load.path, "readOnly": True}]
        pod_spec["volumes"] = [{"name": MODEL_VOLUME, "emptyDir": {}}]
        if spec.model_load.cache_claim_name:
            claim = {"claimName": spec.model_load.cache_claim_name}
            pod_spec["volumes"].append({"name": CACHE_VOLUME, "persistentVolumeClaim": claim})
        pod_spec["initContainers"] = [fetch_container(spec, container["env"], image, files_digest)]
    chosen_priority = (spec.pod_template and spec.pod_template.priority_class_name) or priority_class
    if chosen_priority:
        pod_spec["priorityClassName"] = chosen_priority
    return pod_spec


def strategy(spec: InferenceDeploymentSpec, track: str, budget: tuple[int, int] | None = None) -> dict[str, Any]:
    """GPU budget: the stable track's rolling update (a promotion) adds at most maxSurgeReplicas pods
    and takes at most maxUnavailableReplicas out of service; the canary replaces its pods rather
    than surging (its count is set by the split, within the same budget). ``budget`` (maxSurge,
    maxUnavailable) replaces the spec's while the stable rolls beside canary pods."""
    if track == "canary":
        return {"type": "Recreate"}
    surge, unavailable = budget or (spec.rollout.max_surge_replicas, spec.rollout.max_unavailable_replicas)
    return {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}}


def service(
    name: str, namespace: str, spec: InferenceDeploymentSpec, track: str | None = None, selects: str | None = None
) -> dict[str, Any]:
    """The Service over both tracks (track None), or one track's Service for an HTTPRoute backend;
    ``selects``: the Service over both tracks selecting only that track's pods."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": track_service_name(name, track) if track else service_name(name),
            "namespace": namespace,
            "labels": {**MANAGED_BY, **selector(name)},
        },
        "spec": {
            "selector": selector(name, track or selects),
            "ports": [{"name": "http", "port": spec.port, "targetPort": "http"}],
        },
    }


def hpa(name: str, namespace: str, spec: InferenceDeploymentSpec) -> dict[str, Any]:
    """autoscaling/v2 HPA of the whole InferenceDeployment through its scale subresource (default:
    CPU at 80%): it writes spec.replicas, which Slipway splits between the tracks, and reads the
    pods of both (status.selector)."""
    metrics: list[dict[str, Any]] = []
    for metric in spec.autoscaling.metrics:
        if metric.type == "Cpu":
            target = {"type": "Utilization", "averageUtilization": metric.target_average_utilization}
            metrics.append({"type": "Resource", "resource": {"name": "cpu", "target": target}})
        else:
            target = {"type": "AverageValue", "averageValue": metric.target_average_value}
            metrics.append({"type": "Pods", "pods": {"metric": {"name": metric.name}, "target": target}})
    if not metrics:
        target = {"type": "Utilization", "averageUtilization": 80}
        metrics.append({"type": "Resource", "resource": {"name": "cpu", "target": target}})
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "namespace": namespace, "labels": {**MANAGED_BY, **selector(name)}},
        "spec": {
            "scaleTargetRef": {"apiVersion": API_VERSION, "kind": "InferenceDeployment", "name": name},
            "minReplicas": spec.autoscaling.min_replicas,
            "maxReplicas": spec.autoscaling.max_replicas,
            "metrics": metrics,
        },
    }


def http_route(name: str, namespace: str, spec: InferenceDeploymentSpec, canary_weight: int) -> dict[str, Any]:
    """GatewayAPI mode: exact percentages between the track Services."""
    parent_refs = []
    for ref in spec.traffic.parent_refs or []:
        parent: dict[str, Any] = {"name": ref.name}
        if ref.namespace:
            parent["namespace"] = ref.namespace
        if ref.section_name:
            parent["sectionName"] = ref.section_name
        parent_refs.append(parent)
    backends = [
        {"name": track_service_name(name, "stable"), "port": spec.port, "weight": 100 - canary_weight},
        {"name": track_service_name(name, "canary"), "port": spec.port, "weight": canary_weight},
    ]
    route: dict[str, Any] = {"parentRefs": parent_refs, "rules": [{"backendRefs": backends}]}
    if spec.traffic.hostnames:
        route["hostnames"] = list(spec.traffic.hostnames)
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": namespace, "labels": {**MANAGED_BY, **selector(name)}},
        "spec": route,
    }


def kept_for_revert(current: Mapping[str, Any] | None) -> dict[str, Any]:
    """What status.previousStable keeps of the stable Deployment when a promotion is decided, so that
    a failed roll can be reverted to exactly that (see :func:`previous_of`)."""
    spec = (current or {}).get("spec") or {}
    return {k: v for k, v in (("podTemplate", spec.get("template")), ("strategy", spec.get("strategy"))) if v}


def previous_of(name: str, namespace: str, served: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The stable Deployment as it served before its last promotion, or None when nothing usable was
    kept. ``served`` is ``status.previousStable`` (revision, model name, version, URI, and the pod
    template and strategy the stable had when the promotion was decided; see :func:`kept_for_revert`),
    which only the operator writes: nothing of a child's annotations or labels, which a namespace
    editor may write, goes into a revert. The kind, name, namespace, selector, labels and model
    annotations come from here and ``served``'s identity fields."""
    if not served or not served.get("revision"):
        return None
    template, strategy = served.get("podTemplate"), served.get("strategy")
    if not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
        return None
    template = dict(template)
    meta = dict(template.get("metadata") or {})
    kept_labels = dict(meta.get("labels") or {})
    version = label_value(str(served.get("modelVersion") or ""))
    labels = {**MANAGED_BY, **selector(name, "stable"), VERSION_LABEL: version, REVISION_LABEL: str(served["revision"])}
    template["metadata"] = {**meta, "labels": {**kept_labels, **labels}}
    annotations = {URI_ANNOTATION: str(served.get("uri") or ""), MODEL_ANNOTATION: str(served.get("modelName") or "")}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": deployment_name(name, "stable"),
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {"selector": {"matchLabels": selector(name, "stable")}, "template": template}
        | ({"strategy": strategy} if isinstance(strategy, dict) else {}),
    }
