"""The lifecycle tree ``kubectl slipway get`` shows (pure: no I/O): the TrainingRun, the
ModelArtifact it made (``status.artifactRef``) and the InferenceDeployments that serve its
versions; :func:`slipway.cli.render.render` draws it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from slipway.cli.refs import INFERENCE_DEPLOYMENT, KINDS, MODEL_ARTIFACT, TRAINING_RUN, Kind, Obj, lookup, name_of


@dataclass
class Node:
    kind: Kind
    name: str
    obj: Obj | None  # None: referenced, but not found
    children: list[Node] = field(default_factory=list)


def _artifact_versions(artifact: Obj) -> set[tuple[str, str]]:
    """(model, version) pairs an artifact registered: its version and its quantized version."""
    model = str(lookup(artifact, "spec", "model", "name") or "")
    return {(model, str(v)) for v in (lookup(artifact, "status", k) for k in ("modelVersion", "quantizedVersion")) if v}


def _served_versions(deployment: Obj) -> set[tuple[str, str]]:
    """(model, version) pairs a deployment serves, canaries or rolled back."""
    status = lookup(deployment, "status") or {}
    tracks = [status.get("stable"), status.get("canary"), status.get("lastRollback")]
    return {(str(t.get("modelName")), str(t.get("modelVersion"))) for t in tracks if t and t.get("modelVersion")}


def serves(deployment: Obj, artifact: Obj) -> bool:
    """By ``spec.model.artifactRef``, or following an alias of the artifact's model and serving
    (or canarying, or having rolled back) one of its versions: name and version together."""
    model = lookup(deployment, "spec", "model") or {}
    ref = lookup(model, "artifactRef", "name")
    if ref is not None:
        return bool(ref == name_of(artifact))
    if model.get("name") != lookup(artifact, "spec", "model", "name"):
        return False
    return bool(_served_versions(deployment) & _artifact_versions(artifact))


def lifecycle(
    kind: Kind, name: str, runs: Iterable[Obj], artifacts: Iterable[Obj], deployments: Iterable[Obj]
) -> list[Node]:
    """The trees the object ``kind/name`` belongs to (usually one), roots first.

    Raises KeyError when that object is not among the ones given."""
    objects = _Objects(runs, artifacts, deployments)
    if name not in objects.by_kind[kind.kind]:
        raise KeyError(name)
    if kind is TRAINING_RUN:
        return [objects.run_node(name)]
    if kind is MODEL_ARTIFACT:
        return [objects.tree_of_artifact(name)]
    return objects.deployment_roots(name)


class _Objects:
    """The objects of the three kinds by name, and the tree nodes made from them."""

    def __init__(self, runs: Iterable[Obj], artifacts: Iterable[Obj], deployments: Iterable[Obj]) -> None:
        self.by_kind: dict[str, dict[str, Obj]] = {
            TRAINING_RUN.kind: {name_of(o): o for o in runs},
            MODEL_ARTIFACT.kind: {name_of(o): o for o in artifacts},
            INFERENCE_DEPLOYMENT.kind: {name_of(o): o for o in deployments},
        }
        self.runs, self.artifacts, self.deployments = (self.by_kind[k.kind] for k in KINDS)

    def artifact_names_of(self, run: Obj) -> list[str]:
        names = [lookup(run, "status", "artifactRef", "name")]
        names += [
            n
            for n, a in self.artifacts.items()
            if lookup(a, "spec", "source", "trainingRunRef", "name") == name_of(run)
        ]
        return list(dict.fromkeys(n for n in names if n))

    def run_name_of(self, artifact: Obj) -> str | None:
        ref = lookup(artifact, "spec", "source", "trainingRunRef", "name")
        if ref:
            return str(ref)
        return next(
            (n for n, r in self.runs.items() if lookup(r, "status", "artifactRef", "name") == name_of(artifact)), None
        )

    def artifact_node(self, artifact_name: str) -> Node:
        artifact = self.artifacts.get(artifact_name)
        node = Node(MODEL_ARTIFACT, artifact_name, artifact)
        if artifact is not None:
            node.children = [
                Node(INFERENCE_DEPLOYMENT, n, d) for n, d in sorted(self.deployments.items()) if serves(d, artifact)
            ]
        return node

    def run_node(self, run_name: str) -> Node:
        run = self.runs.get(run_name)
        children = [self.artifact_node(n) for n in self.artifact_names_of(run)] if run is not None else []
        return Node(TRAINING_RUN, run_name, run, children)

    def tree_of_artifact(self, artifact_name: str) -> Node:
        artifact = self.artifacts.get(artifact_name)
        run_name = self.run_name_of(artifact) if artifact is not None else None
        if run_name and run_name not in self.runs:  # the run is gone (or not made yet): shown as not found
            return Node(TRAINING_RUN, run_name, None, [self.artifact_node(artifact_name)])
        return self.run_node(run_name) if run_name else self.artifact_node(artifact_name)

    def deployment_roots(self, name: str) -> list[Node]:
        deployment = self.deployments[name]
        ref = lookup(deployment, "spec", "model", "artifactRef", "name")
        served = [ref] if ref else [n for n, a in sorted(self.artifacts.items()) if serves(deployment, a)]
        roots: list[Node] = []
        for artifact_name in served:
            root = self.tree_of_artifact(artifact_name)
            if not any(r.kind is root.kind and r.name == root.name for r in roots):
                roots.append(root)
        if ref and self.artifacts.get(ref) is None:
            roots[0].children = [Node(INFERENCE_DEPLOYMENT, name, deployment)]  # the artifact it names is missing
        return roots or [Node(INFERENCE_DEPLOYMENT, name, deployment)]
