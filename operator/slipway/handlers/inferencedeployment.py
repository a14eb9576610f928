"""InferenceDeployment passes: serve a validated model, canary new versions, promote or roll back.

A pass (woken by the object, its Deployments, Services, HPA and HTTPRoute, its ModelArtifact, and
timers while a rollout is in flight or an alias is followed) resolves the version the spec asks
for, lets the pure state machine (``status/rollout.py``) plan from the cached track Deployments,
runs the analysis it asks for, then applies the plan through the child reconcilers.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from slipway import analysis, kube, metrics
from slipway.builders import inferencedeployment as build
from slipway.mlflow import MlflowClient
from slipway.models import InferenceDeploymentSpec
from slipway.models.base import parse_duration
from slipway.models.inferencedeployment import InferenceDeploymentStatus
from slipway.prometheus import analyse_canary
from slipway.reconcile import Context, run_pass
from slipway.status.rollout import Desired, Observed, Plan, desired_from_artifact, plan, track_of, track_statuses

ROLLOUT_TICK_SECONDS = 5.0  # while a rollout is in flight: steps, pauses and deadlines are time
ACTIVE = ("Progressing", "Analyzing", "Paused", "Promoting")
PRODUCTION_ALIAS = "production"
ROLLBACK_TAG = "slipway.dev/rollback"


def reconcile(ctx: Context, spec: InferenceDeploymentSpec) -> float | None:
    """Bring the tracks, traffic and MLflow aliases in line with the spec and the canary's health."""
    assert ctx.mlflow is not None
    return Reconciler(ctx, spec, ctx.mlflow).run()


PASS = (InferenceDeploymentStatus, lambda ctx: run_pass(ctx, InferenceDeploymentSpec, reconcile))


class Reconciler:
    def __init__(self, ctx: Context, spec: InferenceDeploymentSpec, client: MlflowClient) -> None:
        self.ctx, self.spec, self.mlflow = ctx, spec, client
        self.name, self.namespace = ctx.name, ctx.namespace
        self.model_name: str = spec.model.name or ""  # for an artifactRef: read from the artifact

    def run(self) -> float | None:
        desired, problem = self.resolve()
        deployments = {t: self.ctx.child("deployments", build.deployment_name(self.name, t)) for t in build.TRACKS}
        annotations = dict(self.ctx.body["metadata"].get("annotations") or {})
        observed = Observed(spec=self.spec, desired=desired, desired_problem=problem,
                            stable=track_of(deployments["stable"]), canary=track_of(deployments["canary"]),
                            status=self.ctx.status, annotations=annotations, now=datetime.now(UTC))  # fmt: skip
        decision = plan(observed)
        if decision.analyze:
            versions = {"canary": decision.rollout_version or ""}
            if observed.stable is not None and observed.stable.version:
                versions["stable"] = observed.stable.version
            observed.analysis = self.analyse(observed.now, versions)
            decision = plan(observed)
        self.ensure_services()
        deployments = self.apply(decision, deployments)
        stable, canary = track_statuses(decision, track_of(deployments["stable"]), track_of(deployments["canary"]))
        self.ctx.write(decision.conditions, phase=decision.phase, stable=stable, canary=canary, **decision.status)
        return self.next_pass(decision)

    def next_pass(self, decision: Plan) -> float | None:
        """Time is the input only while a rollout is in flight (steps, analysis, deadlines) and for
        the alias poll; a settled deployment is woken by changes alone."""
        delays = []
        if decision.phase in ACTIVE:
            interval = self.spec.rollout.analysis.interval if self.spec.rollout.analysis else self.spec.rollout.interval
            delays.append(min(parse_duration(interval).total_seconds(), ROLLOUT_TICK_SECONDS))
        if self.spec.model.alias is not None:
            delays.append(self.ctx.config.alias_poll_seconds)
        return max(1.0, min(delays)) if delays else None

    def resolve(self) -> tuple[Desired | None, str | None]:
        """The version the spec asks for: a Validated ModelArtifact's, or the one an MLflow alias points at."""
        ref = self.spec.model.artifact_ref
        if ref is not None:
            artifact = self.ctx.cache.get("modelartifacts", self.namespace, ref.name)
            if artifact is not None:
                self.model_name = artifact["spec"]["model"]["name"]
            return desired_from_artifact(artifact, self.namespace, ref.name)
        assert self.spec.model.name is not None and self.spec.model.alias is not None
        found = self.alias_target(self.spec.model.name, self.spec.model.alias)
        if found is None:
            return None, f"MLflow model {self.spec.model.name} has no alias {self.spec.model.alias} (yet)"
        return Desired(found.version, found.uri), None

    def alias_target(self, model: str, alias: str) -> Any:
        """The version an alias points at, looked up at most every alias_poll_seconds: passes
        woken by the cluster in between reuse the last answer."""
        memory, now = self.ctx.memory, time.monotonic()
        due = now - memory.get("alias_time", -1e9) >= self.ctx.config.alias_poll_seconds
        if memory.get("alias") != (model, alias) or due:
            memory["alias_version"] = self.mlflow.get_version_by_alias(model, alias)
            memory["alias"], memory["alias_time"] = (model, alias), now
        return memory["alias_version"]

    def analyse(self, now: datetime, versions: dict[str, str]) -> analysis.AnalysisOutcome:
        settings = self.spec.rollout.analysis
        assert settings is not None
        timeout = self.ctx.config.http_timeout_seconds
        outcome = analyse_canary(self.ctx.prometheus, settings, self.namespace, self.name, now, versions, timeout)
        for result in outcome.results:
            metrics.GATE_RESULTS.labels("InferenceDeployment", result.result.lower()).inc()
        return outcome

    def ensure_services(self) -> None:
        """The Service (and per-track Services in GatewayAPI mode) and the HPA; what the traffic mode
        no longer needs is deleted."""
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
        self.record(decision)
        return result

    def record(self, decision: Plan) -> None:
        """MLflow aliases and tags, and the consumed manual annotation, for what the plan decided."""
        if decision.move_production_to is not None:
            self.mlflow.set_alias(self.model_name, PRODUCTION_ALIAS, decision.move_production_to)
            metrics.PROMOTIONS.labels(self.namespace).inc()
            self.ctx.event("Normal", "AliasMoved", f"MLflow alias {PRODUCTION_ALIAS} of {self.model_name} now points "
                           f"at version {decision.move_production_to}")  # fmt: skip
        if decision.rollback is not None:
            record = decision.rollback
            detail = ", ".join(f"{k}={v}" for k, v in record.items())
            self.mlflow.set_model_version_tag(self.model_name, record["modelVersion"], ROLLBACK_TAG, detail)
            metrics.ROLLBACKS.labels(self.namespace, record["reason"]).inc()
        if decision.consumed_annotation:
            body = {"metadata": {"annotations": {decision.consumed_annotation: None}}}
            self.ctx.deferred.append(lambda: kube.patch(self.ctx.kube, self.ctx.kind, self.namespace, self.name, body))

    def ensure_track(self, track: str, desired: Desired, replicas: int | None) -> dict[str, Any]:
        """The track's Deployment serving ``desired``; the stable's replica count is the HPA's."""
        body = build.deployment(self.name, self.namespace, self.spec, track, desired.version, desired.uri,
                                self.ctx.config.mlflow_url, replicas, self.model_name)  # fmt: skip
        first = {"replicas": self.spec.autoscaling.min_replicas} if replicas is None else None
        return self.ctx.ensure("deployments", body, create_extra=first)
