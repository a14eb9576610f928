"""A TrainingRun's checkpoint claim, and who owns it (``spec.checkpoint.whenDeleted``).

The claim ``<name>-checkpoints`` is the one child that may outlive its parent on purpose, as a
StatefulSet's claims do under ``persistentVolumeClaimRetentionPolicy``:

- ``Delete`` (when unset): the claim is owned by the TrainingRun (a controller ownerReference), and
  Kubernetes' garbage collector deletes it with the TrainingRun;
- ``Retain``: the claim has no ownerReference at all; nothing deletes it but the user. The
  TrainingRun applied again from the same YAML (an Argo CD prune and sync) finds it and resumes
  from its checkpoints, in the MLflow run its predecessor left cut short (``trainingadopt``).

Every other child is refused when it is not this object's (``children.decide``, ``OwnedByOther``).
The checkpoint claim is adopted when all of this holds (:func:`verdict`):

- it is a PersistentVolumeClaim in the TrainingRun's namespace, named for it (``children.check_child``);
- it carries Slipway's labels for this TrainingRun's name (``app.kubernetes.io/managed-by: slipway``
  and ``slipway.dev/trainingrun``), as every claim Slipway made does, and a restore keeps;
- every ownerReference it has, if any, names a slipway.dev TrainingRun of this name with another
  uid: an earlier TrainingRun of the same name, which no longer exists (names are unique in a
  namespace, so the one that has the name now is this one). No ownerReference at all is a retained
  claim, or one a Velero restore made (Velero restores no ownerReferences);
- it was made for the same work: a claim carries the TrainingRun's work key (the annotation
  ``slipway.dev/work``, as its MLflow run carries it as a tag: namespace, name and the spec fields
  that define the work); a TrainingRun applied again with a spec that differs would resume from
  checkpoints of something else, and is refused. Claims made before the annotation have none and
  are adopted;
- it is not being deleted. A claim restored with a stale ownerReference is: Kubernetes' garbage
  collector marks it deleted within a fraction of a second (0.03 to 0.16 s on the local cluster), before any
  controller can adopt it; the pass waits (Reconciling, ``CheckpointClaimDeleting``) until it is
  gone and makes a new one. The stale-uid rule holds for a claim the garbage collector has not yet
  reached; to keep checkpoints, restore claims without ownerReferences, as Velero does.

Anything else (owned by any other object, labelled for another TrainingRun or not at all) stays
refused, ``OwnedByOther``: the pass stops before the Job, so such a claim is never mounted.
Adopting rewrites the ownerReferences to what ``whenDeleted`` says (ours, or none), conditional on
the claim's resourceVersion; nothing else of the claim changes (the claim is create-only)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from slipway import children, kube, metrics, reasons
from slipway.reconcile import Context
from slipway.status.conditions import reconciling
from slipway.training import build
from slipway.training.adopt import work_of
from slipway.training.model import TrainingRunSpec

Verdict = Literal["Ours", "Adopt", "Deleting", "Refuse"]
DELETING_RECHECK_SECONDS = 2.0
GROUP = "slipway.dev"
WORK_ANNOTATION = "slipway.dev/work"  # the work key the claim was made for, as its run's MLflow tag


def verdict(claim: Mapping[str, Any], owner: Mapping[str, Any], work: str) -> tuple[Verdict, str]:
    """Whether the existing checkpoint claim ``claim`` is the TrainingRun ``owner``'s (Ours), one
    it adopts (Adopt: why), or one it refuses (Refuse: why); ``work`` is the TrainingRun's work key
    (trainingadopt.work_of), which a claim made for other work does not match. Pure."""
    meta, owner_meta = claim.get("metadata") or {}, owner.get("metadata") or {}
    name, uid = str(owner_meta.get("name")), owner_meta.get("uid")
    refs = list(meta.get("ownerReferences") or [])
    if claim.get("kind") != "PersistentVolumeClaim" or meta.get("namespace") != owner_meta.get("namespace"):
        return "Refuse", "not a PersistentVolumeClaim in the TrainingRun's namespace"
    if kube.controller_uid(dict(claim)) == uid:
        return "Ours", "owned by this TrainingRun"
    labels = meta.get("labels") or {}
    wanted = build.labels(name)
    if any(labels.get(key) != value for key, value in wanted.items()):
        found = labels.get(build.RUN_LABEL)
        mine = found is not None and found != wanted[build.RUN_LABEL]
        return "Refuse", f"labelled for the TrainingRun {found!r}" if mine else "not labelled by Slipway for it"
    foreign = [r for r in refs if not _stale_predecessor(r, name, uid)]
    if foreign:
        ref = foreign[0]
        return "Refuse", f"owned by {ref.get('kind')} {ref.get('name')} (uid {ref.get('uid')})"
    made_for = (meta.get("annotations") or {}).get(WORK_ANNOTATION)
    if made_for is not None and made_for != work:
        return "Refuse", (
            "it holds the checkpoints of other work (made for a spec that differs in the fields "
            "that define the work: resuming from them would train something else)"
        )
    if meta.get("deletionTimestamp"):
        return "Deleting", "being deleted (its owner is gone): a new claim is made once it is gone"
    if refs:
        return "Adopt", f"its owner, an earlier TrainingRun {name} (uid {refs[0].get('uid')}), no longer exists"
    return "Adopt", "it has no owner (kept by whenDeleted: Retain, or restored)"


def _stale_predecessor(ref: Mapping[str, Any], name: str, uid: Any) -> bool:
    """An ownerReference to a slipway.dev TrainingRun of this name with another uid: one that is
    gone, since the TrainingRun of this name in this namespace is the one with ``uid``."""
    group = str(ref.get("apiVersion") or "").split("/")[0]
    return group == GROUP and ref.get("kind") == "TrainingRun" and ref.get("name") == name and ref.get("uid") != uid


def owner_references(owner: Mapping[str, Any], retained: bool) -> list[dict[str, Any]]:
    """The ownerReferences the claim should have: none when retained, else this TrainingRun as controller."""
    return [] if retained else [kube.owner_reference(dict(owner))]


def ensure(ctx: Context, spec: TrainingRunSpec) -> float | None:
    """The checkpoint claim created, kept, adopted, or (whenDeleted changed) handed over or released.
    Returns None, or the seconds after which to look again while a claim of that name is being
    deleted (the pass stops there: no Job before its claim). Raises ``children.OwnedByOther`` for a
    claim this TrainingRun may not use, before any Job mounts it."""
    desired = build.checkpoint_pvc(ctx.name, ctx.namespace, spec)
    if desired is None or spec.checkpoint is None:
        return None
    name = desired["metadata"]["name"]
    children.check_child(ctx.body, desired, build.pvc_name(ctx.name))
    refs, work = owner_references(ctx.body, spec.checkpoint.retained), work_of(ctx.namespace, ctx.name, spec)
    observed = ctx.child("pvcs", name) or _create(ctx, desired, refs, work)
    if observed is None:
        return None  # made now
    found, why = verdict(observed, ctx.body, work)
    if found == "Deleting":
        ctx.write(reconciling("CheckpointClaimDeleting", f"PersistentVolumeClaim {ctx.namespace}/{name} is {why}"))
        return DELETING_RECHECK_SECONDS
    if found == "Refuse":
        message = (
            f"PersistentVolumeClaim {ctx.namespace}/{name} already exists and is not this TrainingRun's "
            f"checkpoint claim: {why}; Slipway never adopts it: delete or rename it"
        )
        raise children.OwnedByOther(children.Decision("Refuse", "PersistentVolumeClaim", name, message))
    if (observed["metadata"].get("ownerReferences") or []) != refs:
        patch = {"metadata": {"ownerReferences": refs, "resourceVersion": observed["metadata"]["resourceVersion"]}}
        kube.patch(ctx.kube, "PersistentVolumeClaim", ctx.namespace, name, patch)
        metrics.CHILD_ACTIONS.labels("PersistentVolumeClaim", "Update").inc()
    elif found == "Adopt" and ctx.status.get("phase"):
        return None  # a retained claim, seen by every pass: the Event went with the first
    if found == "Adopt":
        policy = "Retain: it has no owner" if spec.checkpoint.retained else "Delete: now owned by this TrainingRun"
        ctx.event(
            "Normal",
            reasons.ADOPTED_CHECKPOINT,
            f"adopted the checkpoint claim {name}: {why}; whenDeleted "
            f"{policy}; training resumes from the newest checkpoint it holds",
        )
    return None


def _create(ctx: Context, desired: dict[str, Any], refs: list[dict[str, Any]], work: str) -> dict[str, Any] | None:
    """Create the claim with ``refs`` as its ownerReferences and the work key it holds checkpoints
    of: None once made, or the claim of that name found instead (made since the cache was read, by
    an earlier pass or by someone else)."""
    body = {**desired, "metadata": {**desired["metadata"], "ownerReferences": refs}}
    body["metadata"]["annotations"] = {children.APPLIED_HASH: children.desired_hash(desired), WORK_ANNOTATION: work}
    try:
        kube.create(ctx.kube, body)
    except kube.AlreadyExists:
        found = kube.get(ctx.kube, "PersistentVolumeClaim", ctx.namespace, desired["metadata"]["name"])
        if found is None:
            raise
        return found
    metrics.CHILD_ACTIONS.labels("PersistentVolumeClaim", "Create").inc()
    return None
