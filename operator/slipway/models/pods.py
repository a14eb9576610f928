"""The pod template every kind's pods take from a spec (spec.podTemplate): placement, identity,
security, and what GPU clusters need of a pod (a runtime class, topology spread, a larger /dev/shm,
native sidecars)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Field, WithJsonSchema, model_validator

from slipway.models.base import (
    PRESERVE,
    AnnotationValue,
    EnvFrom,
    EnvVar,
    LabelValue,
    LocalObjectReference,
    Quantity,
    SlipwayModel,
    Toleration,
    Volume,
    VolumeMount,
    cel,
    parse_quantity,
)

DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# The containers Slipway names itself, in the pods of every kind: a sidecar takes another name.
RESERVED_CONTAINERS = ("server", "fetch-model", "trainer", "quantize", "validate")
SIDECAR_MESSAGE = (
    "sidecars: each is a container with a name (a DNS label other than "
    + ", ".join(RESERVED_CONTAINERS)
    + ") and an image; names are unique"
)
# /dev/shm of a pod with GPUs when spec.podTemplate.shmSize is unset: torch's DataLoader workers and
# vLLM's tensor-parallel workers share tensors through it, and a container's own is 64 MiB.
GPU_SHM_DEFAULT = "1Gi"
SHM_VOLUME = "slipway-shm"


class TopologySpreadConstraint(SlipwayModel):
    """How the pods spread over zones or nodes, as in a Pod spec. Without labelSelector, the pods
    counted are those of the same object (and, for an InferenceDeployment, the same track)."""

    max_skew: int = Field(ge=1, le=1000, description="Most the pod counts of two domains may differ by.")
    topology_key: str = Field(
        min_length=1,
        max_length=316,
        description="The node label whose values are the domains, e.g. "
        "topology.kubernetes.io/zone or kubernetes.io/hostname.",
    )
    when_unsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"] = Field(
        description="DoNotSchedule (a hard rule) or ScheduleAnyway (a preference)."
    )
    label_selector: dict[str, Any] | None = Field(
        default=None, description="The pods counted (default: this object's own).", json_schema_extra=PRESERVE
    )
    min_domains: int | None = Field(default=None, ge=1, le=1000, description="Fewest eligible domains.")
    match_label_keys: list[Annotated[str, Field(max_length=316)]] | None = Field(
        default=None, description="Pod label keys whose values narrow the pods counted.", max_length=16
    )
    node_affinity_policy: Literal["Honor", "Ignore"] | None = Field(
        default=None, description="Whether nodeSelector and affinity limit the domains."
    )
    node_taints_policy: Literal["Honor", "Ignore"] | None = Field(
        default=None, description="Whether untolerated taints limit the domains."
    )


SIDECAR_DESCRIPTION = (
    "A container, as in a Pod spec, run beside the main one for the pod's whole life (a native sidecar: an "
    "init container with restartPolicy Always, which Slipway sets)."
)
Sidecar = Annotated[
    dict[str, Any],
    WithJsonSchema(
        {
            "type": "object",
            "description": SIDECAR_DESCRIPTION,
            "x-kubernetes-preserve-unknown-fields": True,
            "required": ["name", "image"],
            "properties": {
                "name": {"type": "string", "maxLength": 63, "pattern": DNS_LABEL, "description": "Its name."},
                "image": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "Its image."},
            },
        }
    ),
]


class PodTemplate(SlipwayModel):
    """Pod settings Slipway merges into the pods it builds (both tracks of an InferenceDeployment,
    a TrainingRun's pods), as in a Pod spec."""

    model_config = cel(
        (
            "!has(self.sidecars) || self.sidecars.all(c, !(c.name in " + str(list(RESERVED_CONTAINERS)) + "))",
            SIDECAR_MESSAGE,
        ),
    )

    labels: dict[str, LabelValue] | None = Field(
        default=None, description="Extra pod labels (Slipway's own win).", max_length=32
    )
    annotations: dict[str, AnnotationValue] | None = Field(
        default=None, description="Extra pod annotations.", max_length=32
    )
    node_selector: dict[str, LabelValue] | None = Field(
        default=None, description="Node labels the pods must match.", max_length=32
    )
    tolerations: list[Toleration] | None = Field(default=None, description="Taints the pods tolerate.")
    affinity: dict[str, Any] | None = Field(
        default=None, description="Node and pod affinity, as in a Pod spec.", json_schema_extra=PRESERVE
    )
    volumes: list[Volume] | None = Field(default=None, description="Extra volumes, as in a Pod spec.", max_length=32)
    volume_mounts: list[VolumeMount] | None = Field(
        default=None,
        description="Mounts of those volumes in the server container (name, mountPath, readOnly, subPath).",
        max_length=32,
    )
    env: list[EnvVar] | None = Field(
        default=None, description="More environment variables (after spec.env).", max_length=128
    )
    env_from: list[EnvFrom] | None = Field(
        default=None,
        description="Whole Secrets or ConfigMaps as environment (secretRef, configMapRef, prefix).",
        max_length=16,
    )
    service_account_name: str | None = Field(
        default=None, min_length=1, max_length=253, description="ServiceAccount of the pods."
    )
    image_pull_secrets: list[LocalObjectReference] | None = Field(
        default=None, description="Secrets to pull the image.", max_length=16
    )
    priority_class_name: str | None = Field(
        default=None, min_length=1, max_length=253, description="PriorityClass of the pods."
    )
    security_context: dict[str, Any] | None = Field(
        default=None,
        description="Pod securityContext (runAsUser, fsGroup, ...), merged over Slipway's defaults, which "
        "pass the restricted Pod Security Standard (runAsNonRoot, RuntimeDefault seccomp).",
        json_schema_extra=PRESERVE,
    )
    container_security_context: dict[str, Any] | None = Field(
        default=None,
        description="securityContext of every container, merged over Slipway's defaults, which pass the "
        "restricted Pod Security Standard (no privilege escalation, every capability dropped).",
        json_schema_extra=PRESERVE,
    )
    runtime_class_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        pattern=DNS_SUBDOMAIN,
        description="RuntimeClass of the pods, e.g. nvidia where GPU nodes need NVIDIA's container runtime.",
    )
    topology_spread_constraints: list[TopologySpreadConstraint] | None = Field(
        default=None, description="How the pods spread over zones or nodes.", max_length=8
    )
    shm_size: Quantity | None = Field(
        default=None,
        description=f"Size of /dev/shm (a memory-backed emptyDir, counted in the pod's memory). Default: "
        f'{GPU_SHM_DEFAULT} for pods with GPUs, else the container runtime\'s 64 MiB; "0" for none.',
    )
    sidecars: list[Sidecar] | None = Field(
        default=None,
        description="Containers run beside the main one for the pod's whole life (native sidecars), e.g. a "
        "log shipper or a proxy; they start first, and stop after it.",
        max_length=8,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )

    @model_validator(mode="after")
    def _sidecars(self) -> PodTemplate:
        names = [c.get("name") for c in self.sidecars or []]
        if len(set(names)) != len(names) or any(
            not isinstance(c.get("name"), str)
            or not re.fullmatch(DNS_LABEL, c["name"])
            or c["name"] in RESERVED_CONTAINERS
            or not c.get("image")
            for c in self.sidecars or []
        ):
            raise ValueError(SIDECAR_MESSAGE)
        return self


def shm_size(pod_template: PodTemplate | None, gpus: int) -> str | None:
    """The size of the pod's /dev/shm volume, or None for none (spec.podTemplate.shmSize)."""
    size = pod_template.shm_size if pod_template else None
    if size is None:
        return GPU_SHM_DEFAULT if gpus else None
    return size if parse_quantity(size) > 0 else None
