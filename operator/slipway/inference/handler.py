"""InferenceDeployment passes: serve a validated model, canary new versions, promote or roll back.

A pass (woken by the object, its Deployments, Services, HPA and HTTPRoute, its ModelArtifact, and
timers while a rollout is in flight or an alias is followed) resolves the version the spec asks
for, lets the pure state machine (``slipway.inference.rollout``) plan from the cached track Deployments,
runs the analysis it asks for, then applies the plan through the child reconcilers.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any, get_args

from slipway import kinds, kube, metrics, mlflowcreds
from slipway.behaviour import ALIASES
from slipway.inference import analysisrun, build, providers, registry, registrywrites, routing, traffic
from slipway.inference.adopt import ALIAS_TAGS, ALIAS_UID, drop_moves_made, proven_model, registry_view
from slipway.inference.model import (
    DeploymentPhase,
    InferenceDeploymentSpec,
    InferenceDeploymentStatus,
    ServedModel,
    ServingCost,
)
from slipway.inference.operatorfields import files_digest, keeping_operator_fields, revision_for
from slipway.inference.rollout.base import Desired, Observed, Plan, Track
from slipway.inference.rollout.budget import total_replicas
from slipway.inference.rollout.planner import plan
from slipway.inference.rollout.records import new_rollback
from slipway.inference.rollout.rollbacktag import owner
from slipway.inference.rollout.tracks import desired_from_artifact, track_of, track_statuses, with_revision
from slipway.mlflow import MlflowClient, MlflowUnavailable
from slipway.models.base import parse_duration
from slipway.podspec import with_credentials, with_mlflow_tls
from slipway.reconcile import Context, InvalidSpec, flush, run_pass
from slipway.redact import without_credentials
from slipway.status.pods import pod_problem
from slipway.tenancy import Use

metrics.declare_phases("InferenceDeployment", get_args(DeploymentPhase))

ROLLOUT_TICK_SECONDS = 5.0  # while a rollout is in flight: steps, pauses and deadlines are time
ACTIVE = ("Progressing", "Analyzing", "Paused", "Promoting", "Baking")
REGISTRY_RETRY_SECONDS = 5.0  # pending MLflow updates (an outage): retried this often


def reconcile(ctx: Context, spec: InferenceDeploymentSpec) -> float | None:
    """Bring the tracks, traffic and MLflow aliases in line with the spec and the canary's health."""
    assert ctx.mlflow is not None
    settings = spec.rollout.analysis
    refused = providers.refusals(settings, ctx.config) if settings is not None else []
    if refused:
        raise InvalidSpec(ctx.kind, f"{ctx.namespace}/{ctx.name}", refused)
    return Reconciler(ctx, spec, ctx.mlflow).run()


def models(spec: InferenceDeploymentSpec) -> list[Use]:
    """The MLflow models this spec names (checked against the namespace's allow-list); the model
    behind an artifactRef is checked when the artifact is read."""
    return [Use("spec.model.name", "model", spec.model.name)] if spec.model.name else []


PASS = (InferenceDeploymentStatus, lambda ctx: run_pass(ctx, InferenceDeploymentSpec, reconcile, models))


def model_ref(model: ServedModel) -> str:
    """spec.model in one word (status.modelRef, kubectl get's MODEL column): ``<name>@<alias>``, as
    MLflow names an alias, or ``ma/<artifact>``, as kubectl names an object."""
    if model.artifact_ref is not None:
        return f"{kinds.MODEL_ARTIFACT.short}/{model.artifact_ref.name}"
    return f"{model.name}@{model.alias}"


class Reconciler:
    def __init__(self, ctx: Context, spec: InferenceDeploymentSpec, client: MlflowClient) -> None:
        self.ctx, self.spec, self.mlflow = ctx, spec, client
        self.name, self.namespace = ctx.name, ctx.namespace
        self.model_name: str = spec.model.name or ""  # for an artifactRef: read from the artifact
        self.costs: dict[str, Any] = {}  # track -> status.<track>.cost, measured by this pass's analysis
        self.digests: dict[str, str] = {}  # revision -> its version's files digest (the ModelArtifact's status)
        # What the namespace's admin allows (tenancy.Policy): the serving pods' PriorityClass, the Gateways.
        asked = spec.pod_template.priority_class_name if spec.pod_template else None
        self.priority_class = ctx.tenancy.priority_class(
            asked, "spec.podTemplate.priorityClassName", ctx.config.inference_priority_class
        )
        self.default_class = "" if asked else self.priority_class  # what a missing class's message blames
        ctx.tenancy.check_runtime_class(
            spec.pod_template.runtime_class_name if spec.pod_template else None, "spec.podTemplate.runtimeClassName"
        )
        self.router = traffic.router(spec.traffic.mode)
        self.router.check(spec, ctx.namespace, ctx.tenancy)

    def run(self) -> float | None:
        desired, problem = self.resolve()
        deployments = {t: self.ctx.child("deployments", build.deployment_name(self.name, t)) for t in build.TRACKS}
        tracks = {t: track_of(deployments[t], self.pod_problem(t), self.default_class) for t in build.TRACKS}
        annotations = dict(self.ctx.body["metadata"].get("annotations") or {})
        observed = Observed(
            spec=self.spec,
            desired=desired,
            desired_problem=problem,
            stable=tracks["stable"],
            canary=tracks["canary"],
            status=self.ctx.status,
            annotations=annotations,
            now=datetime.now(UTC),
            deployment=owner(self.namespace, self.name),
            router=self.router,
        )
        # No stable of its own (new, or re-created without status): what MLflow records decides the first one.
        observed.registry = registry_view(self.ctx, self.mlflow, self.spec, desired, list(deployments.values()))
        decision = plan(observed)
        if decision.analyze and decision.rollout is not None:
            if decision.analyze_track == "stable":  # a bake: the promoted version on the stable's pods
                promoted = {"stable": (decision.rollout.version, decision.rollout.revision)}
                observed.analysis = analysisrun.analyse(self.ctx, self.spec, observed.now, promoted, bake=True)
            else:
                tracks_ids = {"canary": (decision.rollout.version, decision.rollout.revision)}
                if observed.stable is not None and observed.stable.version:
                    tracks_ids["stable"] = (observed.stable.version, observed.stable.revision or "")
                observed.analysis = analysisrun.analyse(self.ctx, self.spec, observed.now, tracks_ids)
            self.costs = dict(observed.analysis.costs)
            decision = plan(observed)
        drop_moves_made(self.mlflow, self.ctx.status, decision)
        pending, parked = registrywrites.to_write(self.ctx, self.spec, observed, decision)
        rollback = new_rollback(self.ctx.status, decision)
        kept = decision.status.get("previousStable")
        if kept:  # a promotion decided: status keeps what its revert restores, from the stable as it is now
            decision.status["previousStable"] = {**kept, **build.kept_for_revert(deployments["stable"])}
        if decision.durable or rollback is not None:  # the decision is on record before anything acts on it
            self.put_on_record(decision, tracks, pending, parked, rollback)
        # The plan first (a rollback decided is carried out whatever MLflow answers), then the registry.
        routed = self.router.objects(self.name, self.namespace, self.spec, decision.route_weight, decision.held_out)
        routing.before_pods(self.ctx, routed)
        if self.spec.autoscaling.external:  # KEDA's ScaledObject (its own HPA) writes spec.replicas
            self.ctx.prune("hpas", ())
        else:
            self.ctx.ensure("hpas", build.hpa(self.name, self.namespace, self.spec))
        deployments = self.apply(decision, deployments, observed.status.get("previousStable"), routed)
        pending, parked = registrywrites.carry_out(self.ctx, self.mlflow, pending, parked)
        tracks = {t: track_of(deployments[t], self.pod_problem(t), self.default_class) for t in build.TRACKS}
        self.write(decision, tracks, pending, parked)
        return self.next_pass(decision, pending, parked)

    def put_on_record(
        self,
        decision: Plan,
        tracks: dict[str, Track | None],
        pending: list[dict[str, Any]],
        parked: list[dict[str, Any]],
        rollback: dict[str, Any] | None,
    ) -> None:
        """Write the decision to status now; a rollback it records is counted once that write landed
        (a conflict, 409, ends the pass here and the next one decides again: never counted twice)."""
        self.write(decision, tracks, pending, parked)
        flush(self.ctx)
        if rollback is not None:
            metrics.count(metrics.ROLLBACKS, self.namespace, self.name, rollback["reason"])

    def write(
        self,
        decision: Plan,
        tracks: dict[str, Track | None],
        pending: list[dict[str, Any]],
        parked: list[dict[str, Any]],
    ) -> None:
        ui = self.ctx.config.mlflow_public_url or without_credentials(self.mlflow.tracking_uri)  # status's links
        stable, canary = track_statuses(decision, tracks["stable"], tracks["canary"], ui)
        measured = self.costs
        for track, shown in (("stable", stable), ("canary", canary)):
            # The last analysis's figure for the revision the track serves (a promoted one: the canary's).
            kept = [self.ctx.status.get(t) or {} for t in (track, "canary")]
            before = next((k["cost"] for k in kept if k.get("cost") and k.get("revision") == shown.revision), None)
            if track in measured:
                shown.cost = ServingCost.model_validate(measured[track])
            elif before and shown.replicas:
                shown.cost = ServingCost.model_validate(before)
        # The scale subresource's status: serving pods up to spec.replicas (the HPA multiplies this
        # count by its metric's ratio, which it measures over the pods of the selector, surge pods
        # included), and the selector of both tracks' pods.
        counted = {
            t: track for t, track in tracks.items() if track is not None and not (decision.held_out and t == "canary")
        }
        pods = sum(track.pods for track in counted.values())
        replicas = min(pods, total_replicas(self.spec))
        # (The stable's alone while the canary's pods are held with no traffic: idle, they would dilute
        # the HPA's measure.)
        only = "stable" if decision.held_out else None
        selector = ",".join(f"{k}={v}" for k, v in build.selector(self.name, only).items())
        self.ctx.write(
            [*decision.conditions, registry.condition(pending, parked)],
            phase=decision.phase,
            model_ref=model_ref(self.spec.model),
            stable=stable,
            canary=canary,
            pending_registry_updates=pending or None,
            refused_registry_updates=parked or None,
            replicas=replicas,
            selector=selector,
            **decision.status,
        )

    def pod_problem(self, track: str) -> tuple[str, str] | None:
        return pod_problem(self.ctx.cache.select("servingpods", "track", self.namespace, self.name, track))

    def next_pass(self, decision: Plan, pending: list[dict[str, Any]], parked: list[dict[str, Any]]) -> float | None:
        """Time is the input only while a rollout is in flight (steps, analysis, deadlines) and for
        the alias poll; a settled deployment is woken by changes alone."""
        delays = []
        if decision.phase in ACTIVE:
            interval = self.spec.rollout.analysis.interval if self.spec.rollout.analysis else self.spec.rollout.interval
            delays.append(min(parse_duration(interval).total_seconds(), ROLLOUT_TICK_SECONDS))
            if decision.next_analysis is not None:  # on time, whatever woke this pass
                delays.append(decision.next_analysis)
        if decision.wake_in is not None:
            delays.append(decision.wake_in)
        if self.spec.model.alias is not None:
            delays.append(self.ctx.config.alias_poll_seconds)
        if pending:
            delays.append(REGISTRY_RETRY_SECONDS)
        if parked:
            delays.append(registry.next_retry(parked, datetime.now(UTC)))
        return max(1.0, min(delays)) if delays else None

    def resolve(self) -> tuple[Desired | None, str | None]:
        """The revision the spec asks for: a Validated ModelArtifact's version, or the one an MLflow alias
        points at, served with this spec (image, command, env, ...)."""
        ref = self.spec.model.artifact_ref
        if ref is not None:
            artifact = self.ctx.cache.get("modelartifacts", self.namespace, ref.name)
            found, problem = desired_from_artifact(artifact, self.namespace, ref.name)
        else:
            assert self.spec.model.name is not None and self.spec.model.alias is not None
            found, problem = self.alias_target(self.spec.model.name, self.spec.model.alias), ""
            if found is None:
                problem = f"MLflow model {self.spec.model.name} has no alias {self.spec.model.alias} (yet)"
        if found is None:
            return None, problem
        self.ctx.tenancy.check([Use("spec.model.artifactRef", "model", found.model)])
        self.model_name = found.model
        tracks = [self.ctx.child("deployments", build.deployment_name(self.name, t)) for t in build.TRACKS]
        served_as = revision_for(self.spec, found, self.ctx.config.pod_mlflow_url, tracks, self.ctx.status)
        if found.digest:
            self.digests[served_as] = found.digest
        return with_revision(found, served_as), None

    def alias_target(self, model: str, alias: str) -> Desired | None:
        """The version an alias points at, looked up at most every alias_poll_seconds (passes woken by
        the cluster in between reuse the last answer). MLflow down: the last answer, else what the
        status says is rolling out or served, so rollbacks, aborts and analysis go on."""
        memory, now = self.ctx.memory, time.monotonic()
        due = now - memory.get("alias_time", -1e9) >= self.ctx.config.alias_poll_seconds
        marked = self.ctx.cache.take_mark(self.ctx.key, ALIASES)  # an alias it follows may have moved
        if marked or memory.get(ALIAS_UID) != self.ctx.uid:  # (a re-created object reads it again)
            due = True
        if memory.get("alias") != (model, alias) or due:
            try:
                found = self.mlflow.get_version_by_alias(model, alias)
            except MlflowUnavailable as exc:
                if memory.get("alias") == (model, alias):
                    return memory["alias_version"]  # type: ignore[no-any-return]
                return self.last_known(model, exc)
            if found is not None:
                proven_model(self.ctx, self.mlflow, model, found.version)
            memory["alias_version"] = Desired(found.version, found.uri, model) if found else None
            memory[ALIAS_TAGS], memory[ALIAS_UID] = (dict(found.tags) if found else {}), self.ctx.uid
            memory["alias"], memory["alias_time"] = (model, alias), now
        return memory["alias_version"]  # type: ignore[no-any-return]

    def last_known(self, model: str, why: MlflowUnavailable) -> Desired | None:
        status = self.ctx.status
        track = (status.get("canary") if status.get("phase") in ACTIVE else None) or status.get("stable") or {}
        if not track.get("modelVersion") or not track.get("uri"):  # why (a certificate, say) names the fix
            raise MlflowUnavailable(f"{why.message}; {model}'s alias was never read")
        return Desired(str(track["modelVersion"]), str(track["uri"]), model)

    def apply(
        self,
        decision: Plan,
        deployments: dict[str, dict[str, Any] | None],
        served_before: dict[str, Any] | None,
        routed: traffic.Objects,
    ) -> dict[str, dict[str, Any] | None]:
        """Carry the plan out; returns the track Deployments as they now are. ``served_before`` is
        status.previousStable: what a reverted promotion restores. The router's routes follow the pods."""
        result = dict(deployments)
        previous = build.previous_of(self.name, self.namespace, served_before) if decision.revert_stable else None
        stable_replicas = decision.stable_replicas
        if previous is not None:
            if stable_replicas is not None:
                previous["spec"]["replicas"] = stable_replicas
            if decision.stable_budget is not None:
                previous["spec"]["strategy"] = build.strategy(self.spec, "stable", decision.stable_budget)
            result["stable"] = self.ctx.ensure("deployments", previous)
        elif decision.stable is not None:
            result["stable"] = self.ensure_track("stable", decision.stable, stable_replicas, decision.stable_budget)
        elif stable_replicas is not None:
            result["stable"] = self.scale("stable", deployments["stable"], stable_replicas)
        if decision.canary is not None:
            result["canary"] = self.ensure_track("canary", decision.canary, decision.canary_replicas)
        else:
            result["canary"] = self.scale("canary", deployments["canary"], 0)
        routing.after_pods(self.ctx, routed)
        if decision.consumed_annotation:
            consumed = decision.consumed_annotation

            def remove() -> None:  # after the status write: at the resourceVersion that write returned
                version = self.ctx.body["metadata"]["resourceVersion"]
                meta = {"annotations": {consumed: None}, "resourceVersion": version}
                written = kube.patch(self.ctx.kube, self.ctx.kind, self.namespace, self.name, {"metadata": meta})
                self.ctx.cache.remember(self.ctx.key, written)

            self.ctx.deferred.append(remove)
        return result

    def ensure_track(
        self, track: str, desired: Desired, replicas: int | None, budget: tuple[int, int] | None = None
    ) -> dict[str, Any]:
        """The track's Deployment serving ``desired`` with ``replicas`` pods (its share of spec.replicas);
        ``budget``: the stable's rolling-update budget while it rolls beside canary pods."""
        config = self.ctx.config
        tracks = [self.ctx.child("deployments", build.deployment_name(self.name, t)) for t in build.TRACKS]
        body = build.deployment(
            self.name,
            self.namespace,
            self.spec,
            track,
            desired.version,
            desired.uri,
            config.pod_mlflow_url,
            replicas,
            desired.model,
            config.workload_image,
            self.priority_class,
            budget,
            revision_id=desired.revision,
            fetch_image=config.fetch_image,
            files_digest=files_digest(desired, self.digests, tracks),
        )
        body = with_mlflow_tls(with_credentials(body, mlflowcreds.of_pods(self.ctx)), config.pod_mlflow_tls)
        existing = self.ctx.child("deployments", build.deployment_name(self.name, track))
        return self.ctx.ensure("deployments", keeping_operator_fields(body, existing))

    def scale(self, track: str, deployment: dict[str, Any] | None, replicas: int) -> dict[str, Any] | None:
        """Set a track's replica count alone (its template stays), at the resourceVersion read: a 409
        if it changed since, and the pass runs again."""
        if deployment is None or deployment["spec"].get("replicas") == replicas:
            return deployment
        seen = deployment["metadata"]["resourceVersion"]
        body = {"metadata": {"resourceVersion": seen}, "spec": {"replicas": replicas}}
        name = build.deployment_name(self.name, track)
        return kube.patch(self.ctx.kube, "Deployment", self.namespace, name, body)  # type: ignore[no-any-return]
