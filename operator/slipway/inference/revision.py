"""The revision of an InferenceDeployment: a hash of what its pods would serve. A new revision is
canaried; a change of a field outside it starts no canary.

Every field of the spec is sorted here, once: into the revision (the tuples below, which the hash
reads) or outside it. A path covers the fields under it; a field whose own fields differ
(``rollout``) is sorted field by field. A unit test walks InferenceDeploymentSpec and fails on a
field sorted nowhere. The operator's own settings (its image, the fetch image, the MLflow address)
are no part of a revision."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from slipway.inference.model import InferenceDeploymentSpec
from slipway.inference.probes import readiness_path
from slipway.models.pods import shm_size

# In the revision, as written: the server's container.
CONTAINER_FIELDS = ("image", "command", "args", "port", "resources", "env")
# In the revision once set: left out while unset, so that a revision served before these fields
# existed keeps its hash.
WHEN_SET_FIELDS = ("probes", "modelLoad", "podTemplate")
# In the revision through what they decide: the model's name, and the version and URI it resolves
# to; the readiness probe's path (the vllm preset's server answers /health).
DECIDING_FIELDS = ("model", "rollout.analysis.preset")
# Fields added inside those above after revisions were first served: left out while unset, so that
# a revision served before they existed keeps its hash.
POD_TEMPLATE_ADDED = ("runtimeClassName", "topologySpreadConstraints", "shmSize", "sidecars")
RESOURCES_ADDED = ("extendedResources",)
IN_REVISION = frozenset((*CONTAINER_FIELDS, *WHEN_SET_FIELDS, *DECIDING_FIELDS))

# Outside the revision: how many pods, how traffic moves, how a pod drains, how a canary is judged.
OUTSIDE_REVISION = frozenset(
    (
        "replicas",
        "autoscaling",
        "traffic",
        "drain",
        "rollout.steps",
        "rollout.stepWeight",
        "rollout.maxWeight",
        "rollout.interval",
        "rollout.progressDeadlineSeconds",
        "rollout.paused",
        "rollout.onFailure",
        "rollout.maxSurgeReplicas",
        "rollout.maxUnavailableReplicas",
        "rollout.scaleDownDelaySeconds",
        "rollout.bake",
        "rollout.promoteAlias",
        "rollout.analysis.prometheus",
        "rollout.analysis.interval",
        "rollout.analysis.failureLimit",
        "rollout.analysis.warmup",
        "rollout.analysis.noData",
        "rollout.analysis.gateway",
        "rollout.analysis.metrics",
    )
)


def _served(spec: InferenceDeploymentSpec, version: str, uri: str, model_name: str | None) -> dict[str, Any]:
    dumped = spec.model_dump(mode="json", by_alias=True)
    dumped["resources"] = _set_only(dumped["resources"], RESOURCES_ADDED)
    served: dict[str, Any] = {
        "model": [model_name or spec.model.name or "", version, uri],
        "container": {key: dumped[key] for key in CONTAINER_FIELDS},
        "probePath": readiness_path(spec),
    }
    served |= {key: dumped[key] for key in WHEN_SET_FIELDS if dumped.get(key) is not None}
    if "podTemplate" in served:
        served["podTemplate"] = _set_only(served["podTemplate"], POD_TEMPLATE_ADDED)
    shm = shm_size(spec.pod_template, spec.resources.gpus)
    if shm is not None:  # the pods' /dev/shm, spec.podTemplate.shmSize or the default of GPU pods
        served["shm"] = shm
    return served


def _set_only(fields: dict[str, Any], added: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if k not in added or v is not None}


def _digest(served: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(served, sort_keys=True).encode()).hexdigest()[:10]


def revision(spec: InferenceDeploymentSpec, version: str, uri: str, model_name: str | None) -> str:
    """The revision of what would be served: a hash of the fields of :data:`IN_REVISION` (model
    name, version and URI, image, command, args, env, resources, port, probes, modelLoad,
    podTemplate, the readiness path) as both tracks would run them."""
    return _digest(_served(spec, version, uri, model_name))


def legacy_revisions(
    spec: InferenceDeploymentSpec, version: str, uri: str, model_name: str | None, mlflow_urls: Iterable[str | None]
) -> set[str]:
    """The hashes the same revision had before the MLflow address left it, one per address an
    operator of then may have used: a Deployment or a status record carrying one of them serves (or
    refused) this very revision."""
    served = _served(spec, version, uri, model_name)
    return {_digest({**served, "mlflow": url or ""}) for url in mlflow_urls}
