"""Proof that Slipway made an MLflow object: an HMAC-SHA256 under a key only the operator holds,
written as the tag ``slipway.dev/proof`` on what it creates (pure, but for nothing).

In MLflow's basic-auth, creating an experiment or a registered model needs no permission and makes
its creator its manager: anyone may create a name inside another team's allow-list first and point
its aliases, or plant runs there. A name, a tag or a work key can be copied by whoever reads them; a
proof cannot be made without the key. What each proof covers:

- an experiment or a registered model: its kind, its name and the namespace it was made for (the
  tag ``slipway.dev/namespace``; made in one request with the object, so none exists without it);
- a run: the namespace/name of the object it was made for, its experiment id, its run id, its role
  and its work key (set right after the create, once MLflow has given the id);
- a model version: the namespace/name of its object, the model, the version number, its role and
  its work key (set right after the create, once MLflow has numbered it).

A proof bound to an id cannot be moved to another object: a run's copied tags prove nothing on a
run with another id.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from slipway.mlflow.errors import MlflowError
from slipway.mlflow.tags import NAMESPACE, PROOF

PROOF_TAG = PROOF.name
NAMESPACE_TAG = NAMESPACE.name  # the namespace an experiment or a model was made for
UNPROVEN = "MlflowObjectNotProven"  # the reason of the Stalled condition


class Unproven(MlflowError):
    """An MLflow object found where Slipway would have made it, without its proof: not used."""

    reason = UNPROVEN

    def __init__(self, message: str) -> None:
        super().__init__(message, error_code="NOT_PROVEN")

    def __str__(self) -> str:
        return self.message


class Proof:
    """HMAC-SHA256 under the operator's key; the key never leaves this object (nor its ``repr``)."""

    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise ValueError("the MLflow proof key must be at least 16 bytes")
        self._key = key

    def __repr__(self) -> str:
        return "Proof(<redacted>)"

    def of(self, kind: str, *parts: str) -> str:
        """The proof of ``kind`` over ``parts`` (each length-prefixed: no two lists sign alike)."""
        message = "\n".join(f"{len(p)}:{p}" for p in (kind, *parts)).encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def holds(self, value: str | None, kind: str, *parts: str) -> bool:
        return bool(value) and hmac.compare_digest(str(value), self.of(kind, *parts))


@dataclass(frozen=True)
class Guard:
    """What one pass trusts in MLflow: proofs under ``proof``, checked when ``enforce`` (multi-tenant
    mode); ``trusted`` names (``experiment:<name>``, ``model:<name>``) are used without one: the
    object's own status records them (made before proofs existed), or a cluster admin opted them in.
    A trusted experiment or model is stamped with a proof when found without one."""

    proof: Proof | None
    namespace: str
    owner: str  # namespace/name of the Slipway object
    enforce: bool = False
    trusted: frozenset[str] = field(default_factory=frozenset)
    opted_in: tuple[str, ...] = ()  # globs of experiment and model names a cluster admin opted in

    def trusts(self, kind: str, name: str) -> bool:
        return f"{kind}:{name}" in self.trusted or any(fnmatchcase(name, glob) for glob in self.opted_in)

    def named_tags(self, kind: str, name: str) -> dict[str, str]:
        """The tags an experiment or a registered model is created with."""
        if self.proof is None:
            return {}
        return {NAMESPACE_TAG: self.namespace, PROOF_TAG: self.proof.of(kind, self.namespace, name)}

    def named_holds(self, kind: str, name: str, tags: Mapping[str, str]) -> bool:
        namespace = tags.get(NAMESPACE_TAG, "")
        return self.proof is not None and self.proof.holds(tags.get(PROOF_TAG), kind, namespace, name)

    def needs_stamp(self, kind: str, name: str, tags: Mapping[str, str]) -> bool:
        """Whether an experiment or model found without a proof is trusted, so to be stamped;
        :class:`Unproven` when it is neither proven nor trusted and proofs are enforced."""
        if self.proof is None or self.named_holds(kind, name, tags):
            return False
        if self.trusts(kind, name):
            return True
        if self.enforce:
            raise Unproven(unproven_named(kind, name, self.owner))
        return False

    def run_proof(self, experiment_id: str, run_id: str, role: str, work: str) -> str:
        assert self.proof is not None
        return self.proof.of("run", self.owner, experiment_id, run_id, role, work)

    def run_holds(self, experiment_id: str, run_id: str, tags: Mapping[str, str], role: str, work: str) -> bool:
        """Whether a run found by its work key was made by Slipway for this object's namespace/name
        (always, when proofs are not enforced)."""
        if not self.enforce:
            return True
        return self.proof is not None and self.proof.holds(
            tags.get(PROOF_TAG), "run", self.owner, experiment_id, run_id, role, work
        )

    def version_proof(self, model: str, version: str, role: str, work: str) -> str:
        assert self.proof is not None
        return self.proof.of("version", self.owner, model, version, role, work)

    def version_holds(self, model: str, version: str, tags: Mapping[str, str], role: str, work: str) -> bool:
        """Whether a version found by its work key was registered by Slipway for this object's
        namespace/name (always, when proofs are not enforced)."""
        if not self.enforce:
            return True
        return self.proof is not None and self.proof.holds(
            tags.get(PROOF_TAG), "version", self.owner, model, version, role, work
        )


def unproven_named(kind: str, name: str, owner: str) -> str:
    """The message of an experiment or registered model Slipway did not make."""
    what = "experiment" if kind == "experiment" else "registered model"
    return (
        f"MLflow {what} {name!r} exists but was not created by Slipway (it carries no valid "
        f"{PROOF_TAG} tag), so {owner} does not use it: someone else may own it. Delete or rename it in "
        f"MLflow, choose another name, or, if it is yours, have a cluster admin opt it in with the Namespace "
        f"annotation slipway.dev/adopt-mlflow-names (or the operator's --adopt-mlflow-names)"
    )
