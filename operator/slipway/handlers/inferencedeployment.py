"""kopf handlers of InferenceDeployment: serve a validated model, canary new versions, promote or roll back.

One level-based reconcile (create, update, resume, timer): resolve the version
the spec asks for, observe the track Deployments, let the pure state machine
(``status/rollout.py``) plan, run the analysis it asks for, then apply the plan.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any

import kopf

from slipway import analysis, kube, metrics
from slipway.builders import inferencedeployment as build
from slipway.config import OperatorConfig
from slipway.handlers.common import level_based, reconcile_with, write_status
from slipway.mlflow import MlflowClient
from slipway.models import InferenceDeploymentSpec
from slipway.prometheus import PrometheusClient
from slipway.status.rollout import AnalysisVerdict, Desired, Observed, Plan, Track, plan

KIND = "InferenceDeployment"
PLURAL = "inferencedeployments"
TEMPLATE_HASH = "slipway.dev/template-hash"
PRODUCTION_ALIAS = "production"
ROLLBACK_TAG = "slipway.dev/rollback"


@level_based(PLURAL)
def reconcile(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **_: Any) -> None:
    """Bring the tracks, traffic and MLflow aliases in line with the spec and the canary's health."""

    def step(spec: InferenceDeploymentSpec, client: MlflowClient | None) -> None:
        assert client is not None
        Reconciler(body, spec, patch, memo, client).run()

    reconcile_with(KIND, InferenceDeploymentSpec, body, patch, memo, step)


class Reconciler:
    def __init__(
        self, body: kopf.Body, spec: InferenceDeploymentSpec, patch: kopf.Patch, memo: kopf.Memo, client: MlflowClient
    ) -> None:
        self.body, self.spec, self.patch, self.mlflow = body, spec, patch, client
        self.k: kube.Kube = memo.kube
        self.config: OperatorConfig = memo.config
        self.default_prometheus: PrometheusClient | None = memo.get("prometheus")
        meta = body["metadata"]
        self.name, self.namespace = meta["name"], meta["namespace"]
        self.model_name: str = spec.model.name or ""  # for an artifactRef: read from the artifact

    def run(self) -> None:
        desired, problem = self.resolve()
        deployments = {
            t: kube.get(self.k, "Deployment", self.namespace, build.deployment_name(self.name, t)) for t in build.TRACKS
        }
        observed = Observed(
            spec=self.spec,
            desired=desired,
            desired_problem=problem,
            stable=_track(deployments["stable"]),
            canary=_track(deployments["canary"]),
            status=dict(self.body.get("status") or {}),
            annotations=dict(self.body["metadata"].get("annotations") or {}),
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
        self.apply(decision, deployments)
        self.write(decision, deployments)

    # -- what to serve ---------------------------------------------------------------------------

    def resolve(self) -> tuple[Desired | None, str | None]:
        """The version the spec asks for: a Validated ModelArtifact's, or the one an MLflow alias points at."""
        ref = self.spec.model.artifact_ref
        if ref is not None:
            artifact = kube.get_custom(self.k, "modelartifacts", self.namespace, ref.name)
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
        found = self.mlflow.get_version_by_alias(self.spec.model.name, self.spec.model.alias)
        if found is None:
            return None, f"MLflow model {self.spec.model.name} has no alias {self.spec.model.alias} (yet)"
        return Desired(found.version, found.uri), None

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
            outcome = analysis.run_analysis(prometheus, settings, self.namespace, self.name, now, versions)
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
        services = [build.service(self.name, self.namespace, self.spec)]
        if self.spec.traffic.mode == "GatewayAPI":
            services += [build.service(self.name, self.namespace, self.spec, t) for t in build.TRACKS]
        for svc in services:
            if kube.get(self.k, "Service", self.namespace, svc["metadata"]["name"]) is None:
                kopf.adopt(svc, owner=self.body)
                kube.create(self.k, "Service", svc)
        desired = build.hpa(self.name, self.namespace, self.spec)
        current = kube.get(self.k, "HorizontalPodAutoscaler", self.namespace, self.name)
        kopf.adopt(desired, owner=self.body)
        if current is None:
            kube.create(self.k, "HorizontalPodAutoscaler", desired)
        elif _hpa_spec(current) != _hpa_spec(desired):
            current["spec"] = desired["spec"]
            kube.replace(self.k, "HorizontalPodAutoscaler", current)

    def apply(self, decision: Plan, deployments: dict[str, dict[str, Any] | None]) -> None:
        if decision.stable is not None:
            self.ensure_track("stable", decision.stable, deployments["stable"], None)
        if decision.canary is not None:
            self.ensure_track("canary", decision.canary, deployments["canary"], decision.canary_replicas)
        elif deployments["canary"] is not None and deployments["canary"]["spec"].get("replicas"):
            kube.patch(
                self.k,
                "Deployment",
                self.namespace,
                build.deployment_name(self.name, "canary"),
                {"spec": {"replicas": 0}},
            )
        if self.spec.traffic.mode == "GatewayAPI":
            route = build.http_route(self.name, self.namespace, self.spec, decision.weight)
            kopf.adopt(route, owner=self.body)
            kube.apply_route(self.k, route)
        if decision.move_production_to is not None:
            self.mlflow.set_alias(self.model_name, PRODUCTION_ALIAS, decision.move_production_to)
            metrics.PROMOTIONS.labels(self.namespace).inc()
            kopf.event(
                self.body,
                type="Normal",
                reason="AliasMoved",
                message=f"MLflow alias {PRODUCTION_ALIAS} of {self.model_name} now points at version "
                f"{decision.move_production_to}",
            )
        if decision.rollback is not None:
            record = decision.rollback
            detail = ", ".join(f"{k}={v}" for k, v in record.items())
            self.mlflow.set_model_version_tag(self.model_name, record["modelVersion"], ROLLBACK_TAG, detail)
            metrics.ROLLBACKS.labels(self.namespace, record["reason"]).inc()
        if decision.consumed_annotation:
            self.patch.metadata.setdefault("annotations", {})[decision.consumed_annotation] = None

    def ensure_track(self, track: str, desired: Desired, current: dict[str, Any] | None, replicas: int | None) -> None:
        """Create the track's Deployment, or replace its template when the version or spec changed."""
        body = build.deployment(
            self.name, self.namespace, self.spec, track, desired.version, desired.uri, self.config.mlflow_url, replicas
        )
        template_hash = hashlib.sha256(json.dumps(body["spec"]["template"], sort_keys=True).encode()).hexdigest()[:16]
        body["metadata"]["annotations"][TEMPLATE_HASH] = template_hash
        if current is None:
            if replicas is None:
                body["spec"]["replicas"] = self.spec.autoscaling.min_replicas
            kopf.adopt(body, owner=self.body)
            kube.create(self.k, "Deployment", body)
            return
        unchanged = (current["metadata"].get("annotations") or {}).get(TEMPLATE_HASH) == template_hash
        if unchanged and (replicas is None or current["spec"].get("replicas") == replicas):
            return
        current["metadata"]["labels"] = body["metadata"]["labels"]
        current["metadata"].setdefault("annotations", {}).update(body["metadata"]["annotations"])
        current["spec"]["template"] = body["spec"]["template"]
        current["spec"]["strategy"] = body["spec"]["strategy"]
        if replicas is not None:
            current["spec"]["replicas"] = replicas
        current.pop("status", None)
        kube.replace(self.k, "Deployment", current)

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
        write_status(KIND, self.body, self.patch, decision.conditions, **fields)


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


def _hpa_spec(hpa: dict[str, Any]) -> tuple[Any, ...]:
    spec = hpa["spec"]
    return spec.get("minReplicas"), spec.get("maxReplicas"), json.dumps(spec.get("metrics"), sort_keys=True)
