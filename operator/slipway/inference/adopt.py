"""What MLflow records about an InferenceDeployment's first stable, read only while it has no stable
of its own and none on record (a new object, or one re-created from Git or restored without its
status): the desired version's ``slipway.dev/rollback`` tag and the version the promote alias names
(slipway.inference.rollout.restore decides from them). A deployment with a stable never reads them: at rest
nothing here asks MLflow anything.

The tag comes with the alias read the deployment makes anyway (MLflow returns a version's tags with
it); a deployment of a ModelArtifact reads its version once. The promote alias is read at most every
alias poll. And an alias move MLflow already has is not made again (no AliasMoved, no promotion
counted): a re-created deployment serving what production serves moves nothing.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from slipway.inference.model import InferenceDeploymentSpec
from slipway.inference.operatorfields import revision_for
from slipway.inference.rollout.base import Desired, Plan, RegistryView
from slipway.inference.rollout.records import ROLLBACK_TAG
from slipway.inference.rollout.tracks import with_revision
from slipway.mlflow import MlflowClient, MlflowError
from slipway.reconcile import Context

ALIAS_TAGS = "alias_tags"  # ctx.memory: the tags of the version the followed alias named at its last read
ALIAS_UID = "alias_uid"  # ctx.memory: the uid of the object that read it (a re-created object reads again)
PROVEN = "model_proven"  # ctx.memory: (uid, model, version) whose registered model was found Slipway's


def registry_view(
    ctx: Context,
    client: MlflowClient,
    spec: InferenceDeploymentSpec,
    desired: Desired | None,
    deployments: list[Mapping[str, Any] | None],
) -> RegistryView | None:
    """The rollback tag and the promote alias's version, or None when the object has a stable of its
    own (its status records one): then nothing is read. (A stable Deployment status does not record
    is one a deleted object left behind, or this object's first pass: the tag is read as well.)"""
    if desired is None or (ctx.status.get("stable") or {}).get("revision"):
        return None
    if spec.model.alias is not None:
        tags: Mapping[str, str] = ctx.memory.get(ALIAS_TAGS) or {}
    else:
        tags = version_tags(ctx, client, desired)
    promoted = promoted_version(ctx, client, spec, desired)
    if promoted is not None:
        promoted = with_revision(
            promoted, revision_for(spec, promoted, ctx.config.pod_mlflow_url, deployments, ctx.status)
        )
    return RegistryView(rollback_tag=tags.get(ROLLBACK_TAG) or None, promoted=promoted)


def version_tags(ctx: Context, client: MlflowClient, desired: Desired) -> Mapping[str, str]:
    """The tags of a ModelArtifact's version (it names the version without reading MLflow): read once
    per object and version."""
    key = (ctx.uid, desired.model, desired.version)
    known = ctx.memory.get("version_tags")
    if known is None or known[0] != key:
        known = (key, dict(client.get_model_version(desired.model, desired.version).tags))
        ctx.memory["version_tags"] = known
    return known[1]  # type: ignore[no-any-return]


def promoted_version(
    ctx: Context, client: MlflowClient, spec: InferenceDeploymentSpec, desired: Desired
) -> Desired | None:
    """The version spec.rollout.promoteAlias names now (None: no such alias, or it is the alias the
    spec follows), read at most every alias poll."""
    alias = spec.rollout.promote_alias
    if not alias or alias == spec.model.alias:
        return None
    key, now = (ctx.uid, desired.model, alias), time.monotonic()
    known = ctx.memory.get("promoted")
    if known is None or known[0] != key or now - known[1] >= ctx.config.alias_poll_seconds:
        found = client.get_version_by_alias(desired.model, alias)
        known = (key, now, Desired(found.version, found.uri, desired.model) if found else None)
        ctx.memory["promoted"] = known
    return known[2]  # type: ignore[no-any-return]


def drop_moves_made(client: MlflowClient, status: Mapping[str, Any], decision: Plan) -> None:
    """Alias moves of a stable not promoted through a canary (a first revision, a re-created object)
    that MLflow already has are dropped from the plan: one read of the alias, before the move. Moves
    after a promotion or a bake are made as decided; MLflow unreachable: the move is kept (pending)."""
    if status.get("phase") in ("Promoting", "Baking"):
        return
    for update in [u for u in decision.registry if u["action"] == "SetAlias"]:
        try:
            found = client.get_version_by_alias(update["model"], update["alias"])
        except MlflowError:
            continue
        if found is not None and str(found.version) == str(update["version"]):
            decision.registry.remove(update)


def proven_model(ctx: Context, client: MlflowClient, model: str, version: str) -> None:
    """Unproven (Stalled, naming the model) where the allow-list applies and the registered model an
    alias is followed in was not made by Slipway (slipway.mlflow.proof): someone else may have created
    the name and point its aliases. A model the status already serves (made before proofs) is trusted.
    Read once per object and version the alias names."""
    key = (ctx.uid, model, version)
    if ctx.memory.get(PROVEN) == key:
        return
    served = {(ctx.status.get(track) or {}).get("modelName") for track in ("stable", "canary")}
    trusted = [f"model:{model}"] if model in served else []
    client.proven_model(model, ctx.tenancy.guard(client.proof, f"{ctx.namespace}/{ctx.name}", trusted))
    ctx.memory[PROVEN] = key
