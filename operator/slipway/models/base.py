"""Shared building blocks of the three Slipway kinds: the camelCase base model,
Kubernetes-style conditions, quantities, durations and container settings."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema, model_validator
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonDict


class SlipwayModel(BaseModel):
    """camelCase on the wire (the Kubernetes convention), snake_case in Python.

    Unknown fields are refused, as the API server's structural schema would
    prune them: a typo must not pass silently.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_attribute_docstrings=False,
    )

    def to_dict(self) -> dict[str, Any]:
        """The object as it is written to the API server (aliases, no unset Nones)."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class StatusModel(SlipwayModel):
    """Status objects ignore fields they do not know (written by newer operators)."""

    model_config = ConfigDict(extra="ignore")


def _quantity_str(value: Any) -> Any:
    return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?(m|k|Ki|Mi|Gi|Ti|Pi|Ei|M|G|T|P|E)?$"

# A Kubernetes resource quantity: written as a string ("500m", "16Gi") or a number.
Quantity = Annotated[
    str,
    BeforeValidator(_quantity_str),
    Field(pattern=QUANTITY_PATTERN),
    WithJsonSchema({"x-kubernetes-int-or-string": True, "pattern": QUANTITY_PATTERN}),
]

DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}

# A duration such as "30s", "5m" or "1h30m".
Duration = Annotated[str, Field(pattern=DURATION_PATTERN, max_length=32)]


def parse_duration(text: str) -> timedelta:
    """Parse "1h30m", "45s", "250ms" into a timedelta."""
    if not re.fullmatch(DURATION_PATTERN, text):
        raise ValueError(f"invalid duration {text!r}: use a number with ms, s, m or h, e.g. 30s or 5m")
    return timedelta(seconds=sum(float(n) * _UNIT_SECONDS[u] for n, u in _DURATION_PART.findall(text)))


_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}


def parse_quantity(text: str) -> float:
    """Parse a Kubernetes quantity ("500m", "16Gi", "2") into a number."""
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)([a-zA-Z]*)", str(text))
    if not m:
        raise ValueError(f"invalid quantity {text!r}")
    number, suffix = float(m.group(1)), m.group(2)
    if not suffix:
        return number
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix in _DECIMAL:
        return number * _DECIMAL[suffix]
    raise ValueError(f"invalid quantity suffix {suffix!r} in {text!r}")


ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(StatusModel):
    """A Kubernetes condition (metav1.Condition), read by kubectl wait, Argo CD and Flux."""

    type: str = Field(description="Type of the condition: Ready, Reconciling, Stalled, or a kind-specific one.")
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(description="One CamelCase word for the cause, stable for automation.")
    message: str = Field(default="", description="What happened and, when something is wrong, how to fix it.")
    last_transition_time: str = Field(description="When the status last changed (RFC 3339).")
    observed_generation: int | None = Field(
        default=None, description="The metadata.generation this condition was computed from."
    )


def conditions_field(kinds: str) -> Any:
    """status.conditions: a list keyed by type (server-side apply and strategic merges treat each
    type as its own entry), listing the types a kind writes."""
    return Field(
        default=None,
        description=f"{kinds}.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )


class EnvVar(SlipwayModel):
    """An environment variable for the container, as in a Pod spec."""

    name: str = Field(description="Name of the variable.", min_length=1)
    value: str | None = Field(default=None, description="Literal value.")
    value_from: dict[str, Any] | None = Field(
        default=None,
        description="Source of the value (secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef), "
        "as in a Pod spec.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )


class Toleration(SlipwayModel):
    """A toleration, as in a Pod spec, e.g. for tainted GPU nodes."""

    key: str | None = Field(default=None, description="Taint key to tolerate; empty with Exists matches all.")
    operator: Literal["Exists", "Equal"] | None = Field(default=None, description="Exists or Equal.")
    value: str | None = Field(default=None, description="Taint value to match with Equal.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="Taint effect to match; empty matches all."
    )
    toleration_seconds: int | None = Field(
        default=None, description="How long a NoExecute taint is tolerated before eviction."
    )


DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"
# A Prometheus address as spec.rollout.analysis.prometheusAddress and the operator's flag accept it.
PROMETHEUS_ADDRESS_PATTERN = r"(?i)^https?://([a-z0-9.-]+|\[[0-9a-f:.]+\])(:[0-9]{1,5})?(/[a-z0-9._~%/-]*)?$"


def cel(*rules: tuple[str, str]) -> ConfigDict:
    """Model config carrying CEL rules (rule, message) into the generated CRD.

    Each rule mirrors a pydantic validator with the same message, so a user sees
    the same words from the API server and from the operator.
    """
    return ConfigDict(json_schema_extra={"x-kubernetes-validations": [{"rule": r, "message": m} for r, m in rules]})


# An extended resource beside GPUs (RDMA or EFA devices, ...): a name with a domain, outside the
# kubernetes.io domains (cpu, memory, hugepages-* and ephemeral-storage are not extended resources).
EXTENDED_RESOURCE_PATTERN = (
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
KUBERNETES_DOMAIN_PATTERN = r"^([^/]*[.])?kubernetes[.]io/"
EXTENDED_NAME_MESSAGE = (
    "extendedResources: each name is an extended resource with a domain, e.g. rdma/hca_shared_devices_a "
    "(at most 253 characters, not in the kubernetes.io domains); cpu and memory have fields of their own"
)
EXTENDED_GPU_MESSAGE = "extendedResources: the GPU resource (gpuResourceName) is counted by gpus, not here"


class Resources(SlipwayModel):
    """Compute resources of each pod."""

    model_config = cel(
        (
            "!has(self.extendedResources) || self.extendedResources.all(k, size(k) <= 253 && "
            f"k.matches('{EXTENDED_RESOURCE_PATTERN}') && !k.matches('{KUBERNETES_DOMAIN_PATTERN}'))",
            EXTENDED_NAME_MESSAGE,
        ),
        ("!has(self.extendedResources) || !(self.gpuResourceName in self.extendedResources)", EXTENDED_GPU_MESSAGE),
    )

    gpus: int = Field(default=0, ge=0, le=64, description="GPUs per pod (a limit on gpuResourceName).")
    gpu_resource_name: str = Field(
        default=DEFAULT_GPU_RESOURCE,
        description="Extended resource that counts GPUs on your nodes, e.g. nvidia.com/gpu or amd.com/gpu.",
        min_length=1,
        max_length=253,
    )
    cpu: Quantity | None = Field(default=None, description='CPU per pod (request and limit), e.g. "4" or "500m".')
    memory: Quantity | None = Field(default=None, description='Memory per pod (request and limit), e.g. "32Gi".')
    extended_resources: dict[str, Annotated[int, Field(ge=1, le=1024)]] | None = Field(
        default=None,
        description="Extended resources beside GPUs, by name, each a whole number (request and limit), e.g. "
        "rdma/hca_shared_devices_a: 1 or vpc.amazonaws.com/efa: 4.",
        max_length=8,
    )

    @model_validator(mode="after")
    def _extended(self) -> Resources:
        for name in self.extended_resources or {}:
            if (
                len(name) > 253
                or not re.fullmatch(EXTENDED_RESOURCE_PATTERN, name)
                or re.match(KUBERNETES_DOMAIN_PATTERN, name)
            ):
                raise ValueError(f"{EXTENDED_NAME_MESSAGE}; {name!r} is not")
            if name == self.gpu_resource_name:
                raise ValueError(EXTENDED_GPU_MESSAGE)
        return self


class LocalObjectReference(SlipwayModel):
    """A reference to another object in the same namespace."""

    name: str = Field(description="Name of the object.", min_length=1, max_length=253)


class ModelRef(SlipwayModel):
    """The MLflow registered model."""

    name: str = Field(
        description="Name of the MLflow registered model.",
        min_length=1,
        max_length=256,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]*$",
    )


def field_path(loc: tuple[int | str, ...], root: str = "spec") -> str:
    """('validation', 'gates', 0, 'min') -> 'spec.validation.gates[0].min'."""
    path = root
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def describe_errors(errors: list[Any], root: str = "spec") -> list[str]:
    """pydantic's errors() as lines a user can act on, each naming the field."""
    lines = []
    for err in errors:
        msg = str(err["msg"]).removeprefix("Value error, ")
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        lines.append(msg if msg.startswith(f"{root}.") else f"{field_path(loc, root)}: {msg}")
    return lines


PRESERVE: JsonDict = {"x-kubernetes-preserve-unknown-fields": True}
Volume = Annotated[dict[str, Any], Field(description="A volume, as in a Pod spec.", json_schema_extra=PRESERVE)]
VolumeMount = Annotated[
    dict[str, Any],
    Field(description="name, mountPath, readOnly, subPath, as in a container.", json_schema_extra=PRESERVE),
]
EnvFrom = Annotated[
    dict[str, Any], Field(description="secretRef or configMapRef, with an optional prefix.", json_schema_extra=PRESERVE)
]


# Kubernetes' own limits on a label value; an annotation value is kept well under the 256 KiB an
# object's annotations may take in all (32 of them at most).
LabelValue = Annotated[str, Field(max_length=63, pattern=r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")]
AnnotationValue = Annotated[str, Field(max_length=4096)]
