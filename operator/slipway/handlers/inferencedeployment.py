"""InferenceDeployment passes: serve a validated model, canary new versions, promote or roll back.

One level-based pass (woken by the object, its Deployments, Services, HPA and HTTPRoute, its
ModelArtifact, and timers while a rollout is in flight or an alias is followed): resolve the version
the spec asks for, observe the track Deployments, let the pure state machine
(``status/rollout.py``) plan, run the analysis it asks for, then apply the plan.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from slipway import kube, metrics
from slipway.builders import inferencedeployment as build
from slipway.config import OperatorConfig
from slipway.handlers.common import Context, run_pass, write_status
from slipway.mlflow import MlflowClient
from slipway.models import InferenceDeploymentSpec
from slipway.models.base import parse_duration
from slipway.models.inferencedeployment import InferenceDeploymentStatus
from slipway.prometheus import PrometheusClient, run_analysis
from slipway.status.rollout import AnalysisVerdict, Desired, Observed, Plan, Track, plan

KIND = "InferenceDeployment"
ROLLOUT_TICK_SECONDS = 5.0  # while a rollout is in flight: steps, pauses and deadlines are time
PRODUCTION_ALIAS = "production"
ROLLBACK_TAG = "slipway.dev/rollback"


def reconcile(ctx: Context, spec: InferenceDeploymentSpec) -> float | None:
    """Bring the tracks, traffic and MLflow aliases in line with the spec and the canary's health."""
    assert ctx.mlflow is not None
    return Reconciler(ctx, spec, ctx.mlflow).run()


PASS = (InferenceDeploymentStatus, lambda ctx: run_pass(ctx, InferenceDeploymentSpec, reconcile))
ACTIVE = ("Progressing", "Analyzing", "Paused", "Promoting")


class Reconciler:
    def __init__(self, ctx: Context, spec: InferenceDeploymentSpec, client: MlflowClient) -> None:
        self.ctx, self.spec, self.mlflow = ctx, spec, client
        self.config: OperatorConfig = ctx.config
        self.default_prometheus: PrometheusClient | None = ctx.prometheus
        self.name, self.namespace = ctx.name, ctx.namespace
        self.model_name: str = spec.model.name or ""  # for an artifactRef: read from the artifact

    def run(self) -> float | None:
        desired, problem = self.resolve()
        deployments = {t: self.ctx.child("deployments", build.deployment_name(self.name, t)) for t in build.TRACKS}
        observed = Observed(
            spec=self.spec,
            desired=desired,
            desired_problem=problem,
            stable=_track(deployments["stable"]),
            canary=_track(deployments["canary"]),
            status=self.ctx.status,
            annotations=dict(self.ctx.body["metadata"].get("annotations") or {}),
            now=datetime.now(UTC),
        )
        decision = plan(observed)
        if decision.analyze:
            versions = {"canary": decision.rollout_version or ""}
            if observed.stable is not None and observed.stable.version:
                versions["stable"] = observed.stable.version
            observed.analysis = self.analyse(observed.now, versions)
            decision = plan(observed)
        self.ensure_services()
        deployments = self.apply(decision, deployments)
        self.write(decision, deployments)
        return self.next_pass(decision)

    def next_pass(self, decision: Plan) -> float | None:
        """Time is the input only while a rollout is in flight (steps, analysis, deadlines) and for
        the alias poll; a settled deployment is woken by changes alone."""
        delays = []
        if decision.phase in ACTIVE:
            interval = self.spec.rollout.analysis.interval if self.spec.rollout.analysis else self.spec.rollout.interval
            delays.append(min(parse_duration(interval).total_seconds(), ROLLOUT_TICK_SECONDS))
        if self.spec.model.alias is not None:
            delays.append(self.config.alias_poll_seconds)
        return max(1.0, min(delays)) if delays else None

    # -- what to serve ---------------------------------------------------------------------------

    def resolve(self) -> tuple[Desired | None, str | None]:
        """The version the spec asks for: a Validated ModelArtifact's, or the one an MLflow alias points at."""
        ref = self.spec.model.artifact_ref
        if ref is not None:
            artifact = self.ctx.cache.get("modelartifacts", self.namespace, ref.name)
            if artifact is None:
                return None, f"ModelArtifact {self.namespace}/{ref.name} does not exist"
            status = artifact.get("status") or {}
            self.model_name = artifact["spec"]["model"]["name"]
            if status.get("phase") != "Validated":
                return None, (
                    f"ModelArtifact {ref.name} is {status.get('phase') or 'not ready'}; "
                    "only Validated artifacts are served"
                )
            version = status.get("quantizedVersion") or status["modelVersion"]
            return Desired(str(version), f"models:/{self.model_name}/{version}"), None
        assert self.spec.model.name is not None and self.spec.model.alias is not None
        found = self.alias_target(self.spec.model.name, self.spec.model.alias)
        if found is None:
            return None, f"MLflow model {self.spec.model.name} has no alias {self.spec.model.alias} (yet)"
        return Desired(found.version, found.uri), None

    def alias_target(self, model: str, alias: str) -> Any:
        """The version an alias points at, looked up at most every alias_poll_seconds: passes
        woken by the cluster in between reuse the last answer."""
        memory = self.ctx.memory
        now = time.monotonic()
        if (
            memory.get("alias") != (model, alias)
            or now - memory.get("alias_time", -1e9) >= self.config.alias_poll_seconds
        ):
            memory["alias_version"] = self.mlflow.get_version_by_alias(model, alias)
            memory["alias"], memory["alias_time"] = (model, alias), now
        return memory["alias_version"]

    def analyse(self, now: datetime, versions: dict[str, str]) -> AnalysisVerdict:
        settings = self.spec.rollout.analysis
        assert settings is not None
        prometheus = self.default_prometheus
        if settings.prometheus is not None:
            prometheus = PrometheusClient(settings.prometheus.address, timeout=self.config.http_timeout_seconds)
        if prometheus is None:
            message = "no Prometheus: set spec.rollout.analysis.prometheus.address or the operator's --prometheus-url"
            return AnalysisVerdict("Inconclusive", [], reason=message)
        try:
            outcome = run_analysis(prometheus, settings, self.namespace, self.name, now, versions)
        finally:
            if prometheus is not self.default_prometheus:
                prometheus.close()
        for result in outcome.results:
            metrics.GATE_RESULTS.labels(KIND, result.result.lower()).inc()
        return AnalysisVerdict(
            verdict=outcome.verdict,
            results=[r.to_status() for r in outcome.results],
            reason=outcome.reason,
            metric=outcome.metric,
            value=outcome.value,
        )

    # -- children ----------------------------------------------------------------------------------

    def ensure_services(self) -> None:
        """The Service (and per-track Services and HTTPRoute in GatewayAPI mode) and the HPA;
        what the traffic mode no longer needs is deleted."""
        services = [build.service(self.name, self.namespace, self.spec)]
        if self.spec.traffic.mode == "GatewayAPI":
            services += [build.service(self.name, self.namespace, self.spec, t) for t in build.TRACKS]
        for svc in services:
            self.ctx.ensure("services", svc)
        self.ctx.prune("services", [svc["metadata"]["name"] for svc in services])
        self.ctx.ensure("hpas", build.hpa(self.name, self.namespace, self.spec))

    def apply(self, decision: Plan, deployments: dict[str, dict[str, Any] | None]) -> dict[str, dict[str, Any] | None]:
        """Carry the plan out; returns the track Deployments as they now are."""
        result = dict(deployments)
        if decision.stable is not None:
            result["stable"] = self.ensure_track("stable", decision.stable, None)
        if decision.canary is not None:
            result["canary"] = self.ensure_track("canary", decision.canary, decision.canary_replicas)
        elif deployments["canary"] is not None and deployments["canary"]["spec"].get("replicas"):
            name = build.deployment_name(self.name, "canary")
            result["canary"] = kube.patch(self.ctx.kube, "Deployment", self.namespace, name, {"spec": {"replicas": 0}})
        if self.spec.traffic.mode == "GatewayAPI":
            self.ctx.ensure("httproutes", build.http_route(self.name, self.namespace, self.spec, decision.weight))
        else:
            self.ctx.prune("httproutes", [])
        if decision.move_production_to is not None:
            self.mlflow.set_alias(self.model_name, PRODUCTION_ALIAS, decision.move_production_to)
            metrics.PROMOTIONS.labels(self.namespace).inc()
            message = (f"MLflow alias {PRODUCTION_ALIAS} of {self.model_name} now points at version "
                       f"{decision.move_production_to}")  # fmt: skip
            self.ctx.event("Normal", "AliasMoved", message)
        if decision.rollback is not None:
            record = decision.rollback
            detail = ", ".join(f"{k}={v}" for k, v in record.items())
            self.mlflow.set_model_version_tag(self.model_name, record["modelVersion"], ROLLBACK_TAG, detail)
            metrics.ROLLBACKS.labels(self.namespace, record["reason"]).inc()
        if decision.consumed_annotation:
            annotations = {"metadata": {"annotations": {decision.consumed_annotation: None}}}
            self.ctx.deferred.append(
                lambda: kube.patch(self.ctx.kube, "InferenceDeployment", self.namespace, self.name, annotations)
            )
        return result

    def ensure_track(self, track: str, desired: Desired, replicas: int | None) -> dict[str, Any]:
        """The track's Deployment serving ``desired``; the stable's replica count is the HPA's."""
        body = build.deployment(
            self.name, self.namespace, self.spec, track, desired.version, desired.uri, self.config.mlflow_url, replicas
        )
        first = {"replicas": self.spec.autoscaling.min_replicas} if replicas is None else None
        return self.ctx.ensure("deployments", body, create_extra=first)

    # -- status ------------------------------------------------------------------------------------

    def write(self, decision: Plan, deployments: dict[str, dict[str, Any] | None]) -> None:
        stable = _track(deployments["stable"])
        canary = _track(deployments["canary"])
        fields: dict[str, Any] = {"phase": decision.phase, **decision.status}
        fields["stable"] = _track_status(stable, 100 - decision.weight)
        canary_status = _track_status(canary, decision.weight)
        if decision.rollout_version is not None:
            canary_status["modelVersion"] = decision.rollout_version
        elif canary is not None and not canary.replicas:
            canary_status.pop("modelVersion", None)
        fields["canary"] = canary_status
        write_status(self.ctx, decision.conditions, **fields)


def _track(deployment: dict[str, Any] | None) -> Track | None:
    if deployment is None:
        return None
    status = deployment.get("status") or {}
    template = deployment["spec"]["template"]["metadata"]
    return Track(
        version=(template.get("labels") or {}).get(build.VERSION_LABEL),
        uri=(deployment["metadata"].get("annotations") or {}).get(build.URI_ANNOTATION),
        replicas=int(deployment["spec"].get("replicas") or 0),
        ready=int(status.get("readyReplicas") or 0),
        updated=int(status.get("updatedReplicas") or 0),
        generation_observed=int(status.get("observedGeneration") or 0) >= int(deployment["metadata"]["generation"]),
        pods=int(status.get("replicas") or 0),
    )


def _track_status(track: Track | None, weight: int) -> dict[str, Any]:
    if track is None:
        return {"replicas": 0, "readyReplicas": 0, "weight": 0}
    out: dict[str, Any] = {"replicas": track.replicas, "readyReplicas": track.ready, "weight": weight}
    if track.version:
        out["modelVersion"] = track.version
    if track.uri:
        out["uri"] = track.uri
    return out
