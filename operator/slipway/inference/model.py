"""InferenceDeployment (short name ``idep``): serve a validated model, move traffic safely."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from slipway.artifact.model import ALIAS_CEL, ALIAS_MESSAGE, Alias, check_alias
from slipway.inference.rollbacks import ROLLBACK_REASONS
from slipway.models.base import (
    PRESERVE,
    PROMETHEUS_ADDRESS_PATTERN,
    Condition,
    Duration,
    EnvVar,
    LocalObjectReference,
    Resources,
    SlipwayModel,
    StatusModel,
    cel,
    conditions_field,
    parse_duration,
)
from slipway.models.pods import PodTemplate

DeploymentPhase = Literal[
    "Progressing", "Analyzing", "Promoting", "Baking", "Promoted", "RolledBack", "Paused", "Failed"
]
MODEL_RULE_MESSAGE = "spec.model: set either artifactRef, or name and alias"
MODEL_ALIAS_MESSAGE = "spec.model: name and alias go together (follow an MLflow alias of a registered model)"
CPU_METRIC_MESSAGE = "a Cpu metric needs targetAverageUtilization"
PODS_METRIC_MESSAGE = "a Pods metric needs name and targetAverageValue"
REPLICAS_MESSAGE = "spec.autoscaling: minReplicas must not exceed maxReplicas"
ZERO_REPLICAS_MESSAGE = (
    "spec.autoscaling.minReplicas: 0 needs mode External (an autoscaler that scales to zero, such as a KEDA "
    "ScaledObject); the HPA Slipway makes keeps at least 1"
)
EXTERNAL_METRICS_MESSAGE = (
    "spec.autoscaling.metrics: with mode External the autoscaler (a KEDA ScaledObject) holds the metrics and "
    "Slipway makes no HPA; remove them"
)
CUSTOM_METRIC_MESSAGE = "a metric that is not built in needs a query"
METRIC_THRESHOLD_MESSAGE = "a metric needs max, min or maxRelativeToStable"
STEPS_EXCLUSIVE_MESSAGE = "spec.rollout: use either steps, or stepWeight and maxWeight"
STEPS_ASCENDING_MESSAGE = "spec.rollout.steps: weights must ascend strictly"
STEP_WEIGHT_MESSAGE = "spec.rollout: stepWeight must not exceed maxWeight"
BUDGET_MESSAGE = (
    "spec.rollout: maxSurgeReplicas and maxUnavailableReplicas cannot both be 0 (no pod could move between the "
    "tracks): allow one extra pod, or one pod not ready"
)
GATEWAY_MESSAGE = "spec.traffic: modes GatewayAPI and InferencePool need parentRefs"
PICKER_MESSAGE = "spec.traffic.endpointPicker: only for mode InferencePool"
# GIE's endpoint picker: run per InferencePool when spec.traffic.endpointPicker.image is unset.
ENDPOINT_PICKER_IMAGE = "registry.k8s.io/gateway-api-inference-extension/epp:v1.5.0"
BUILTIN_METRICS = (
    "errorRate",
    "latencyP95Seconds",
    "latencyP99Seconds",
    "ttftP95Seconds",
    "tpotP95Seconds",
    "costPer1kRequests",
    "costPerMillionTokens",
    "queueDepth",
    "kvCacheUsage",
)
# A Prometheus address: scheme, host (DNS name or IP), optional port and path; nothing that could
# carry a credential or make the client's URL differ from what an allow-list compares. One
# expression for Python (the operator) and RE2 (the API server's CEL).
PROMETHEUS_ADDRESS_MESSAGE = (
    "a plain http(s) URL such as http://prometheus.monitoring:9090: scheme, host, optional port and path, "
    "without credentials, query or fragment"
)


# The canary's steps when the spec writes none: these weights, each held for spec.rollout.interval;
# with stepWeight and no maxWeight, steps of stepWeight up to DEFAULT_MAX_WEIGHT.
DEFAULT_STEP_WEIGHTS = (20, 50)
DEFAULT_MAX_WEIGHT = 50
MIN_ANALYSIS_INTERVAL = "5s"
ANALYSIS_INTERVAL_MESSAGE = (
    f"at least {MIN_ANALYSIS_INTERVAL}: every analysis queries the shared Prometheus once per metric and track"
)


class ServedModel(SlipwayModel):
    """Which model to serve: a ModelArtifact, or an MLflow alias to follow."""

    model_config = cel(
        ("has(self.artifactRef) != has(self.name)", MODEL_RULE_MESSAGE),
        ("has(self.name) == has(self.alias)", MODEL_ALIAS_MESSAGE),
    )

    artifact_ref: LocalObjectReference | None = Field(
        default=None, description="A Validated ModelArtifact in this namespace; changing it starts a rollout."
    )
    name: str | None = Field(
        default=None,
        description="MLflow registered model whose alias is followed.",
        min_length=1,
        max_length=256,
    )
    alias: Alias | None = Field(
        default=None, description="MLflow alias to follow, e.g. candidate: when it moves, a rollout starts."
    )

    @model_validator(mode="after")
    def _one_way(self) -> ServedModel:
        if (self.artifact_ref is None) == (self.name is None):
            raise ValueError(MODEL_RULE_MESSAGE)
        if (self.name is None) != (self.alias is None):
            raise ValueError(MODEL_ALIAS_MESSAGE)
        return self


class ScalingMetric(SlipwayModel):
    """One HPA metric: CPU utilization, or a per-pod metric such as in-flight requests."""

    model_config = cel(
        ("self.type != 'Cpu' || has(self.targetAverageUtilization)", CPU_METRIC_MESSAGE),
        ("self.type != 'Pods' || (has(self.name) && has(self.targetAverageValue))", PODS_METRIC_MESSAGE),
    )

    type: Literal["Cpu", "Pods"] = Field(description="Cpu (resource utilization) or Pods (a custom pod metric).")
    target_average_utilization: int | None = Field(
        default=None, ge=1, le=100, description="For Cpu: target average utilization in percent."
    )
    name: str | None = Field(default=None, description="For Pods: the metric name.", max_length=253)
    target_average_value: str | None = Field(
        default=None, description='For Pods: target average value per pod, e.g. "8".', max_length=64
    )

    @model_validator(mode="after")
    def _shape(self) -> ScalingMetric:
        if self.type == "Cpu" and self.target_average_utilization is None:
            raise ValueError(CPU_METRIC_MESSAGE)
        if self.type == "Pods" and (self.name is None or self.target_average_value is None):
            raise ValueError(PODS_METRIC_MESSAGE)
        return self


class Autoscaling(SlipwayModel):
    """What scales spec.replicas (both tracks together, through the scale subresource): an
    autoscaling/v2 HorizontalPodAutoscaler Slipway makes, or an autoscaler of your own (KEDA)."""

    model_config = cel(
        (
            "!has(self.minReplicas) || !has(self.maxReplicas) || self.minReplicas <= self.maxReplicas",
            REPLICAS_MESSAGE,
        ),
        (
            "!has(self.minReplicas) || self.minReplicas >= 1 || (has(self.mode) && self.mode == 'External')",
            ZERO_REPLICAS_MESSAGE,
        ),
        (
            "!has(self.mode) || self.mode != 'External' || !has(self.metrics) || size(self.metrics) == 0",
            EXTERNAL_METRICS_MESSAGE,
        ),
    )

    mode: Literal["HPA", "External"] | None = Field(
        default=None,
        description="HPA (unset): Slipway makes an HPA on these metrics. External: another autoscaler, such as a "
        "KEDA ScaledObject whose scaleTargetRef is this InferenceDeployment, writes spec.replicas through the "
        "scale subresource; Slipway makes no HPA and splits what it writes between the tracks.",
    )
    min_replicas: int = Field(
        default=1, ge=0, le=1000, description="Fewest replicas; 0 (mode External only): idle, no pod."
    )
    max_replicas: int = Field(default=1, ge=1, le=1000, description="Most replicas.")
    metrics: list[ScalingMetric] = Field(
        default_factory=list, description="Scaling metrics of the HPA (default: CPU at 80%).", max_length=8
    )

    @model_validator(mode="after")
    def _bounds(self) -> Autoscaling:
        if self.min_replicas > self.max_replicas:
            raise ValueError(REPLICAS_MESSAGE)
        if self.min_replicas < 1 and self.mode != "External":
            raise ValueError(ZERO_REPLICAS_MESSAGE)
        if self.mode == "External" and self.metrics:
            raise ValueError(EXTERNAL_METRICS_MESSAGE)
        return self

    @property
    def external(self) -> bool:
        return self.mode == "External"


class RolloutStep(SlipwayModel):
    """One canary step: a traffic weight, held for a pause while analysis runs."""

    weight: int = Field(ge=1, le=100, description="Percent of traffic on the canary.")
    pause: Duration | None = Field(default=None, description='How long to hold this step, e.g. "60s".')


class AnalysisMetric(SlipwayModel):
    """A metric the canary must meet at every analysis."""

    model_config = cel(
        ("has(self.query) || self.name in " + str(list(BUILTIN_METRICS)), CUSTOM_METRIC_MESSAGE),
        ("has(self.max) || has(self.min) || has(self.maxRelativeToStable)", METRIC_THRESHOLD_MESSAGE),
    )

    name: str = Field(
        description="A built-in (errorRate, latencyP95Seconds, latencyP99Seconds, ttftP95Seconds, "
        "tpotP95Seconds, costPer1kRequests, costPerMillionTokens: the track's pods' price per hour over its "
        "answered requests or generated tokens; queueDepth, kvCacheUsage: the requests waiting per pod and the "
        "share of KV cache in use (0 to 1), averaged over the track's pods and the window) or, with query, any name.",
        min_length=1,
        max_length=63,
    )
    max: float | None = Field(default=None, description="The canary's value must be at most this.")
    min: float | None = Field(default=None, description="The canary's value must be at least this.")
    max_relative_to_stable: float | None = Field(
        default=None,
        gt=0,
        description="The canary's value must be at most this multiple of the stable's, e.g. 1.5.",
    )
    dry_run: bool = Field(
        default=False,
        description="Evaluate and show this metric in status.analysis, but never let it hold, fail or roll "
        "back a canary: a new gate tried out on live traffic first.",
    )
    query: str | None = Field(
        default=None,
        description="PromQL; may use {{ track }}, {{ namespace }}, {{ deployment }}, {{ version }} (the "
        "track's model version) and {{ revision }} (the hash of its pod template).",
        min_length=1,
        max_length=4096,
    )

    @model_validator(mode="after")
    def _shape(self) -> AnalysisMetric:
        if self.query is None and self.name not in BUILTIN_METRICS:
            raise ValueError(f"metric {self.name!r}: {CUSTOM_METRIC_MESSAGE}")
        if self.max is None and self.min is None and self.max_relative_to_stable is None:
            raise ValueError(f"metric {self.name!r}: {METRIC_THRESHOLD_MESSAGE}")
        return self


class PrometheusSource(SlipwayModel):
    """Where the analysis queries metrics."""

    address: str = Field(
        description="Prometheus base URL, e.g. http://prometheus.monitoring:9090 (scheme, host, port, path; "
        "no credentials, query or fragment). The operator queries only the addresses of its "
        "--allowed-prometheus-urls.",
        max_length=2048,
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.matches('" + PROMETHEUS_ADDRESS_PATTERN.replace("\\", "\\\\") + "')",
                    "message": PROMETHEUS_ADDRESS_MESSAGE,
                }
            ]
        },
    )

    @field_validator("address")
    @classmethod
    def _plain_url(cls, address: str) -> str:
        if not re.fullmatch(PROMETHEUS_ADDRESS_PATTERN, address):
            raise ValueError(PROMETHEUS_ADDRESS_MESSAGE)
        return address


class Analysis(SlipwayModel):
    """Prometheus analysis that gates each step."""

    prometheus: PrometheusSource | None = Field(
        default=None, description="Prometheus to query (default: the operator's --prometheus-url)."
    )
    interval: Duration = Field(
        default="30s",
        description="How often the metrics are evaluated; at least 5s (each analysis queries the shared "
        "Prometheus once per metric and track).",
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": f"duration(self) >= duration('{MIN_ANALYSIS_INTERVAL}')", "message": ANALYSIS_INTERVAL_MESSAGE}
            ]
        },
    )
    failure_limit: int = Field(default=2, ge=0, le=100, description="Failed analyses tolerated; one more rolls back.")
    warmup: Duration | None = Field(
        default=None,
        description="A canary step's first analysis comes this long after its pods are ready (its pause counts "
        "on from then): a canary that starts cold (an LLM server's empty prefix cache, a JIT) is judged once "
        "warm, not against a warm stable. Make it the cold spell plus the analysis window (the interval, at "
        "least 20s). Unset: none.",
    )
    no_data: Literal["inconclusive", "fail", "pass"] = Field(
        default="inconclusive",
        description="When a query returns no data: inconclusive pauses (never promotes), fail, or pass.",
    )
    preset: Literal["slipway", "vllm", "gateway"] = Field(
        default="slipway",
        description="Where the built-in metrics come from: the server's own (slipway, the reference server; "
        "vllm), or gateway: each track's requests, errors and latency as the gateway of spec.traffic "
        "(GatewayAPI mode) counts them, for servers with no metrics of their own.",
    )
    # No schema default (unset means traefik): an API server would write a default into every stored
    # analysis, and an older operator, which refuses spec fields it does not know, would stall them all
    # after a downgrade.
    gateway: Literal["traefik", "istio"] | None = Field(
        default=None,
        description="preset gateway: whose metric and label names are read, traefik when unset "
        "(docs/concepts/traffic.md).",
    )
    metrics: list[AnalysisMetric] = Field(default_factory=list, description="Metrics to check.", max_length=16)

    @field_validator("interval")
    @classmethod
    def _not_too_often(cls, interval: str) -> str:
        if parse_duration(interval) < parse_duration(MIN_ANALYSIS_INTERVAL):
            raise ValueError(ANALYSIS_INTERVAL_MESSAGE)
        return interval


class Bake(SlipwayModel):
    """After a promotion, the new stable keeps being analysed for a while: a breach reverts it."""

    duration: Duration = Field(
        default="10m", description="How long the promoted version is watched; Ready once it is over."
    )
    analysis: Analysis | None = Field(
        default=None,
        description="What is judged, on the stable's pods alone (default: spec.rollout.analysis). Only "
        "absolute thresholds (max, min) apply: there is no other track to compare with.",
    )


class Rollout(SlipwayModel):
    """How a new model version is canaried."""

    model_config = cel(
        ("!has(self.steps) || (!has(self.stepWeight) && !has(self.maxWeight))", STEPS_EXCLUSIVE_MESSAGE),
        (
            "!has(self.steps) || (self.steps.map(s, s.weight).isSorted() && "
            "self.steps.all(a, self.steps.exists_one(b, b.weight == a.weight)))",
            STEPS_ASCENDING_MESSAGE,
        ),
        ("!has(self.stepWeight) || !has(self.maxWeight) || self.stepWeight <= self.maxWeight", STEP_WEIGHT_MESSAGE),
        (
            "(has(self.maxSurgeReplicas) ? self.maxSurgeReplicas : 1) + "
            "(has(self.maxUnavailableReplicas) ? self.maxUnavailableReplicas : 0) >= 1",
            BUDGET_MESSAGE,
        ),
    )

    steps: list[RolloutStep] | None = Field(
        default=None,
        description="Canary steps with ascending weights, e.g. [{weight: 10, pause: 60s}, …]. With neither "
        f"steps nor stepWeight: weights {' and '.join(map(str, DEFAULT_STEP_WEIGHTS))}, each held for interval.",
        max_length=20,
    )
    step_weight: int | None = Field(
        default=None, ge=1, le=100, description="Weight added at each step, up to maxWeight."
    )
    max_weight: int | None = Field(
        default=None,
        ge=1,
        le=100,
        description=f"With stepWeight: the last weight before promotion (default {DEFAULT_MAX_WEIGHT}).",
    )
    interval: Duration = Field(default="30s", description="Time between steps (when a step has no pause).")
    progress_deadline_seconds: int = Field(
        default=600,
        ge=10,
        description="Seconds without progress (pods becoming ready, steps advancing) after which a canary is "
        "rolled back, or a promotion reverted; a paused rollout never times out.",
    )
    paused: bool = Field(default=False, description="Hold the current step until set back to false.")
    on_failure: Literal["Rollback", "Pause"] = Field(
        default="Rollback",
        description="What analysis failures past failureLimit do: Rollback (default), or Pause: the canary "
        "holds its step, analysed no more, until `kubectl slipway promote` or `kubectl slipway abort`.",
    )
    max_surge_replicas: int = Field(
        default=1,
        ge=0,
        le=100,
        description="GPU budget: never run more than this many pods above spec.replicas (stable and canary "
        "together), during a canary, a promotion or a rollback.",
    )
    max_unavailable_replicas: int = Field(
        default=0,
        ge=0,
        le=100,
        description="Pods below spec.replicas that may be not ready while traffic moves between the tracks. "
        "With maxSurgeReplicas 0 and this 1, a rollout needs no spare GPU.",
    )
    scale_down_delay_seconds: int = Field(
        default=30,
        ge=0,
        le=3600,
        description="GatewayAPI mode: after a rollback or abort the canary's pods stay this long, out of "
        "traffic (route weight 0, and out of the Service over both tracks) within maxSurgeReplicas, before "
        "they are scaled to zero: a gateway still routing by the previous weights finds them, and a "
        "retry right after an abort starts from ready pods. Replicas mode has no traffic split apart "
        "from the pods, so its canary leaves at once.",
    )
    analysis: Analysis | None = Field(default=None, description="Prometheus analysis gating each step.")
    bake: Bake | None = Field(
        default=None,
        description="Keep analysing the new stable after promotion (e.g. {duration: 10m}); a breach past "
        "failureLimit reverts to the previous version and moves the promote alias back.",
    )
    promote_alias: str = Field(
        default="production",
        description="MLflow alias moved to the promoted version (empty: move none, e.g. for staging); "
        "not one MLflow reserves (latest, v<digits>).",
        max_length=255,
        pattern=r"^([A-Za-z_][A-Za-z0-9_-]*)?$",
        json_schema_extra={
            "x-kubernetes-validations": [{"rule": f"self == '' || ({ALIAS_CEL})", "message": ALIAS_MESSAGE}]
        },
    )

    @field_validator("promote_alias")
    @classmethod
    def _not_reserved(cls, alias: str) -> str:
        return alias and check_alias(alias)

    @model_validator(mode="after")
    def _steps(self) -> Rollout:
        if self.steps is not None and (self.step_weight is not None or self.max_weight is not None):
            raise ValueError(STEPS_EXCLUSIVE_MESSAGE)
        if self.steps:
            weights = [s.weight for s in self.steps]
            if any(b <= a for a, b in zip(weights, weights[1:], strict=False)):
                raise ValueError(STEPS_ASCENDING_MESSAGE)
        if self.step_weight is not None and self.max_weight is not None and self.step_weight > self.max_weight:
            raise ValueError(STEP_WEIGHT_MESSAGE)
        if self.max_surge_replicas + self.max_unavailable_replicas < 1:
            raise ValueError(BUDGET_MESSAGE)
        return self


class ParentRef(SlipwayModel):
    """A Gateway the HTTPRoute attaches to."""

    name: str = Field(description="Gateway name.", min_length=1, max_length=253)
    namespace: str | None = Field(default=None, description="Gateway namespace (default: this one).")
    section_name: str | None = Field(default=None, description="Listener name.")


# An RFC 1123 DNS name in lower case (labels of 63 at most), or one with a leading "*." (a wildcard),
# as Gateway API's Hostname.
HOSTNAME_PATTERN = r"^(\*\.)?[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$"
Hostname = Annotated[str, Field(min_length=1, max_length=253, pattern=HOSTNAME_PATTERN)]


class EndpointPicker(SlipwayModel):
    """InferencePool mode: the endpoint picker Slipway runs for each pool (GIE's EPP)."""

    image: str | None = Field(
        default=None,
        description=f"The picker's image (default {ENDPOINT_PICKER_IMAGE}); it is run with the flags of GIE "
        "v1.5's EPP (--pool-name, --pool-namespace, --grpc-port 9002).",
        min_length=1,
        max_length=1024,
    )
    failure_mode: Literal["FailClose", "FailOpen"] | None = Field(
        default=None,
        description="What the gateway does while a pool's picker does not answer (the pool's "
        "endpointPickerRef.failureMode; default FailClose: the request fails).",
    )


class Traffic(SlipwayModel):
    """How traffic is split between stable and canary."""

    model_config = cel(
        ("self.mode == 'Replicas' || (has(self.parentRefs) && size(self.parentRefs) > 0)", GATEWAY_MESSAGE),
        ("!has(self.endpointPicker) || self.mode == 'InferencePool'", PICKER_MESSAGE),
    )

    mode: Literal["Replicas", "GatewayAPI", "InferencePool"] = Field(
        default="Replicas",
        description="Replicas: one Service over both tracks, weight = canary share of ready replicas. "
        "GatewayAPI: an HTTPRoute with exact backend weights. InferencePool: an HTTPRoute with exact weights "
        "between one InferencePool per track (the Gateway API Inference Extension), each with its endpoint picker.",
    )
    parent_refs: list[ParentRef] | None = Field(
        default=None,
        description="GatewayAPI and InferencePool: the Gateways the HTTPRoute attaches to.",
        max_length=8,
    )
    hostnames: list[Hostname] | None = Field(
        default=None,
        description="GatewayAPI and InferencePool: hostnames of the route (DNS names; a *. prefix: a wildcard).",
        max_length=16,
    )
    endpoint_picker: EndpointPicker | None = Field(
        default=None, description="InferencePool: the endpoint picker Slipway runs for each pool."
    )

    @model_validator(mode="after")
    def _gateway(self) -> Traffic:
        if self.mode != "Replicas" and not self.parent_refs:
            raise ValueError(GATEWAY_MESSAGE)
        if self.endpoint_picker is not None and self.mode != "InferencePool":
            raise ValueError(PICKER_MESSAGE)
        return self


PATH_PATTERN = r"^/[A-Za-z0-9._~/-]*$"
MOUNT_CONFLICT_MESSAGE = "spec.podTemplate.volumeMounts: a mount at spec.modelLoad.path would hide the model"
GATEWAY_PRESET_MESSAGE = (
    "spec.rollout.analysis.preset: gateway reads the gateway's metrics of the HTTPRoute: set spec.traffic.mode "
    "GatewayAPI, or the preset of the server's own metrics"
)
# Every analysis whose preset is gateway (the canary's, the bake's) needs the HTTPRoute of GatewayAPI mode.
_GATEWAY_PRESET_RULE = (
    "(has(self.traffic) && has(self.traffic.mode) && self.traffic.mode == 'GatewayAPI') || !has(self.rollout) || "
    "((!has(self.rollout.analysis) || !has(self.rollout.analysis.preset) || "
    "self.rollout.analysis.preset != 'gateway') && (!has(self.rollout.bake) || !has(self.rollout.bake.analysis) || "
    "!has(self.rollout.bake.analysis.preset) || self.rollout.bake.analysis.preset != 'gateway'))"
)


class Drain(SlipwayModel):
    """How a serving pod leaves: a promotion, a rollback, an abort or a scale-down never cuts a
    request in flight (a streamed LLM answer included)."""

    delay_seconds: int = Field(
        default=5,
        ge=0,
        le=300,
        description="A stopping pod keeps serving new requests this long (a preStop sleep) while Services and "
        "gateways drop its endpoint; then the server is told to stop (SIGTERM).",
    )
    max_request_seconds: int = Field(
        default=60,
        ge=0,
        le=3600,
        description="The longest request a stopping server still finishes after SIGTERM: the pods' "
        "terminationGracePeriodSeconds is delaySeconds + this. 0 with delaySeconds 0: no drain.",
    )


class ModelLoad(SlipwayModel):
    """Fetch the served version's files from MLflow before the server starts (an init container,
    as KServe's storage initializer does): any server image then finds the model on disk."""

    path: str = Field(
        default="/models/current",
        pattern=PATH_PATTERN,
        max_length=256,
        description="Where the model's files are, read-only, in the server container; SLIPWAY_MODEL_PATH says so.",
    )
    cache_claim_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        description="A PersistentVolumeClaim that keeps fetched versions (digest checked): a version found there "
        "is copied, not downloaded again. ReadWriteMany to share it across nodes.",
    )


class Probe(SlipwayModel):
    """An HTTP GET probe of the server; unset fields keep Slipway's defaults."""

    path: str | None = Field(default=None, pattern=PATH_PATTERN, max_length=256, description="HTTP path.")
    port: int | None = Field(default=None, ge=1, le=65535, description="Port (default: spec.port).")
    initial_delay_seconds: int | None = Field(default=None, ge=0, le=3600, description="Wait before the first probe.")
    period_seconds: int | None = Field(default=None, ge=1, le=3600, description="Seconds between probes.")
    timeout_seconds: int | None = Field(default=None, ge=1, le=600, description="Seconds a probe may take.")
    failure_threshold: int | None = Field(
        default=None, ge=1, le=10000, description="Consecutive failures that count as failed."
    )


class Probes(SlipwayModel):
    """Probes of the server container. By default a startup probe lets the model load for up to
    30 minutes (every 10 s, 180 failures) before liveness may restart the server."""

    startup: Probe | None = Field(default=None, description="Until it passes, readiness and liveness wait.")
    readiness: Probe | None = Field(default=None, description="When the pod takes traffic.")
    liveness: Probe | None = Field(default=None, description="When the server is restarted.")


class InferenceDeploymentSpec(SlipwayModel):
    """Desired state of an InferenceDeployment."""

    model_config = cel((_GATEWAY_PRESET_RULE, GATEWAY_PRESET_MESSAGE))

    model: ServedModel = Field(description="The model to serve.")
    image: str = Field(description="Container image of the model server.", min_length=1, max_length=1024)
    command: list[str] | None = Field(default=None, description="Entrypoint of the server.")
    args: list[str] | None = Field(default=None, description="Arguments of the server.")
    port: int = Field(default=8080, ge=1, le=65535, description="Port the server listens on.")
    resources: Resources = Field(default_factory=Resources, description="GPUs, CPU and memory per replica.")
    env: list[EnvVar] | None = Field(default=None, description="Extra environment variables.", max_length=128)
    replicas: int = Field(
        default=1,
        ge=0,
        le=1000,
        description="Serving pods, stable and canary together; kept within autoscaling's minReplicas and "
        "maxReplicas. The autoscaler (Slipway's HPA, or KEDA's with mode External) writes it through the scale "
        "subresource: leave it out of Git when minReplicas < maxReplicas.",
    )
    autoscaling: Autoscaling = Field(
        default_factory=Autoscaling,
        description="What scales spec.replicas (both tracks together): Slipway's HPA or your own autoscaler, "
        "and its bounds.",
    )
    rollout: Rollout = Field(default_factory=Rollout, description="Canary steps and analysis.")
    traffic: Traffic = Field(default_factory=Traffic, description="How traffic is split.")
    drain: Drain = Field(default_factory=Drain, description="How serving pods leave without cutting requests.")
    model_load: ModelLoad | None = Field(
        default=None, description="Fetch the model's files into a volume before the server starts."
    )
    probes: Probes | None = Field(default=None, description="Startup, readiness and liveness probes.")
    pod_template: PodTemplate | None = Field(default=None, description="Pod settings applied to both tracks.")

    @model_validator(mode="after")
    def _model_mount_free(self) -> InferenceDeploymentSpec:
        if self.model_load is not None and self.pod_template is not None:
            paths = {m.get("mountPath") for m in self.pod_template.volume_mounts or []}
            if self.model_load.path in paths:
                raise ValueError(MOUNT_CONFLICT_MESSAGE)
        return self

    @model_validator(mode="after")
    def _gateway_preset_has_a_gateway(self) -> InferenceDeploymentSpec:
        bake = self.rollout.bake
        analyses = [self.rollout.analysis, bake.analysis if bake is not None else None]
        if self.traffic.mode != "GatewayAPI" and any(a is not None and a.preset == "gateway" for a in analyses):
            raise ValueError(GATEWAY_PRESET_MESSAGE)
        return self


class ServingCost(StatusModel):
    """A track's serving cost over the last analysis window (docs/concepts/cost.md)."""

    currency: str | None = Field(default=None, description="The price table's currency.")
    per_hour: float | None = Field(default=None, description="The track's pods' price per hour (its pods now).")
    requests_per_pod_second: float | None = Field(
        default=None, description="Answered (2xx) requests per second of the track's busiest pod, over the window."
    )
    tokens_per_pod_second: float | None = Field(
        default=None, description="Generated tokens per second of the track's busiest pod, over the window."
    )
    per1k_requests: float | None = Field(
        default=None, alias="per1kRequests", description="Cost per 1K answered requests."
    )
    per_million_tokens: float | None = Field(default=None, description="Cost per million generated tokens.")
    time: str | None = Field(default=None, description="When it was measured.")
    message: str | None = Field(default=None, description="What is missing, if a figure is absent.")


class TrackStatus(StatusModel):
    """One track (stable or canary)."""

    revision: str | None = Field(default=None, description="Hash of the served pod template.")
    model_name: str | None = Field(default=None, description="MLflow registered model served.")
    model_version: str | None = Field(default=None, description="MLflow model version served.")
    version_url: str | None = Field(default=None, description="Link to the version served in the MLflow UI.")
    uri: str | None = Field(default=None, description="URI of the served artifact.")
    replicas: int | None = Field(default=None, description="Pods of this track.")
    ready_replicas: int | None = Field(default=None, description="Ready pods of this track.")
    weight: int | None = Field(default=None, description="Percent of traffic on this track (the real share).")
    requested_weight: int | None = Field(default=None, description="Canary: the weight the current step asks for.")
    traffic_left_time: str | None = Field(
        default=None,
        description="Canary, where traffic follows the router's weights: when the route stopped sending it traffic "
        "while its pods stayed. They leave once the gateway has had spec.drain.delaySeconds (at least 2s) to apply "
        "the route: an endpoint picker stops choosing a pod the moment it starts terminating.",
    )
    cost: ServingCost | None = Field(default=None, description="What serving costs on this track (last analysis).")


class PreviousStable(TrackStatus):
    """The stable track before the promotion in flight, with what its revert restores. Kept in status,
    which only the operator writes: a revert is never rebuilt from anything a namespace editor may
    write (a child's annotations or labels)."""

    pod_template: dict[str, Any] | None = Field(
        default=None,
        description="The stable Deployment's pod template before the promotion.",
        json_schema_extra=PRESERVE,
    )
    strategy: dict[str, Any] | None = Field(
        default=None,
        description="The stable Deployment's update strategy before the promotion.",
        json_schema_extra=PRESERVE,
    )


class AnalysisResult(StatusModel):
    """One evaluation of one analysis metric."""

    metric: str = Field(description="The metric.")
    query: str | None = Field(default=None, description="The resolved PromQL.")
    value: float | None = Field(default=None, description="The canary's value (none: no data).")
    threshold: str | None = Field(default=None, description='The rule, e.g. "<= 0.05".')
    result: Literal["Passed", "Failed", "Inconclusive"] = Field(description="Passed, Failed or Inconclusive.")
    message: str | None = Field(default=None, description="Why, in words (e.g. no data, Prometheus unreachable).")
    dry_run: bool | None = Field(default=None, description="True: the metric's dryRun; shown, never decided.")
    time: str = Field(description="When it was evaluated.")


class Rollback(StatusModel):
    """The most recent rollback."""

    reason: str = Field(description=f"Why: {', '.join(ROLLBACK_REASONS)}.")
    metric: str | None = Field(default=None, description="The failed metric, if any.")
    value: float | None = Field(default=None, description="Its value.")
    model_name: str | None = Field(default=None, description="The model of the revision rolled back.")
    model_version: str | None = Field(default=None, description="The version rolled back.")
    revision: str | None = Field(default=None, description="The revision rolled back: it is not retried.")
    retried: bool | None = Field(default=None, description="True once slipway.dev/retry released it.")
    time: str = Field(description="When it happened.")
    tag: str | None = Field(
        default=None,
        description="The version's slipway.dev/rollback tag this record was read back from (its known fields, "
        "each bounded, as the operator writes them): the object was re-created without its status (applied "
        "again from Git, restored without status) and refuses what an earlier one of the same namespace and "
        "name rolled back.",
    )


class RegistryUpdate(StatusModel):
    """An MLflow alias move or version tag decided and written here first, retried until MLflow has it."""

    action: Literal["SetAlias", "SetTag"] = Field(description="SetAlias or SetTag.")
    model: str = Field(description="Registered model.")
    version: str = Field(description="Model version.")
    alias: str | None = Field(default=None, description="SetAlias: the alias.")
    key: str | None = Field(default=None, description="SetTag: the tag key.")
    value: str | None = Field(default=None, description="SetTag: the tag value.")
    error: str | None = Field(default=None, description="Refused: what MLflow answered.")
    refused_time: str | None = Field(default=None, description="Refused: when MLflow refused it.")
    refused_generation: int | None = Field(
        default=None, description="Refused: the generation then (a new generation retries it)."
    )


class InferenceDeploymentStatus(StatusModel):
    """Observed state of an InferenceDeployment."""

    phase: DeploymentPhase | None = Field(default=None, description="Where the rollout is.")
    model_ref: str | None = Field(
        default=None,
        description="What spec.model names, for kubectl get: `<name>@<alias>`, or `ma/<artifact>`.",
    )
    replicas: int | None = Field(
        default=None,
        description="Serving pods of both tracks, surge pods not counted (the scale subresource's status, which "
        "the HPA reads).",
    )
    selector: str | None = Field(
        default=None, description="Label selector of the serving pods of both tracks (for the HPA's metrics)."
    )
    stable: TrackStatus | None = Field(default=None, description="The stable track.")
    canary: TrackStatus | None = Field(default=None, description="The canary track, with its weight.")
    current_step: int | None = Field(default=None, description="Index of the current rollout step.")
    step_start_time: str | None = Field(
        default=None,
        description="When the current step's canary pods were all ready; its pause counts from then.",
    )
    canary_start_time: str | None = Field(default=None, description="When the current canary was started.")
    bake_start_time: str | None = Field(
        default=None, description="When the promoted version's bake began (spec.rollout.bake)."
    )
    failed_analyses: int | None = Field(default=None, description="Failed analyses of the current canary.")
    analysis: list[AnalysisResult] | None = Field(default=None, description="The latest analysis results.")
    last_rollback: Rollback | None = Field(default=None, description="The most recent rollback.")
    previous_stable: PreviousStable | None = Field(
        default=None, description="What the stable served before the promotion in flight (restored if it fails)."
    )
    last_progress_time: str | None = Field(
        default=None, description="When the rollout last made progress (progressDeadlineSeconds counts from it)."
    )
    pending_registry_updates: list[RegistryUpdate] | None = Field(
        default=None, description="MLflow alias moves and tags decided but not yet confirmed by MLflow."
    )
    refused_registry_updates: list[RegistryUpdate] | None = Field(
        default=None,
        description="MLflow alias moves and tags MLflow refused (4xx), with its answer: retried when the spec "
        "changes and every 10 minutes; they never hold back the rollout.",
    )
    observed_generation: int | None = Field(default=None, description="The generation last reconciled.")
    conditions: list[Condition] | None = conditions_field(
        "Ready, Reconciling, Stalled, Progressing, Degraded, RegistrySynced"
    )


class InferenceDeployment(SlipwayModel):
    """Serves a validated model and moves traffic to new versions behind canary gates."""

    model_config = {"extra": "ignore"}

    spec: InferenceDeploymentSpec
    status: InferenceDeploymentStatus | None = None
