"""Slipway's records in MLflow: runs and model versions tagged with the uid of the Slipway object
that made them (and their role), looked up before any create, so a pass that runs again after
a crash at any line finds what the earlier pass made instead of making it twice."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from slipway.mlflow.errors import MlflowError, MlflowNotFound, MlflowUnavailable
from slipway.mlflow.filters import model_version_filter, tag_filter
from slipway.mlflow.proof import PROOF_TAG, Guard, Proof, Unproven, unproven_named
from slipway.mlflow.registry import ModelVersion, RegisteredModel, Registry
from slipway.mlflow.tags import ROLE, UID, WORK
from slipway.mlflow.tracking import Run, Tracking

log = logging.getLogger(__name__)

UID_TAG = UID.name
ROLE_TAG = ROLE.name
WORK_TAG = WORK.name  # what the version was made for: see work_key


def work_key(namespace: str, name: str, spec: Mapping[str, Any], source: str) -> str:
    """The work a record was made for, independent of the object's uid: a hash of its namespace,
    name, spec and the source it resolved. Deleted and applied again from the same YAML (Argo CD
    after a prune, a restore without status), an object has the same key and adopts what its
    predecessor made; a spec that differs is new work."""
    text = json.dumps([namespace, name, dict(spec), source], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _rows(tags: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"key": k, "value": v} for k, v in tags.items()]


def _trusting(guard: Guard, name: str) -> Guard:
    return dataclasses.replace(guard, trusted=guard.trusted | {name})


def canonical_run(runs: list[Run]) -> Run:
    """Of several runs made for the same key (two writers raced), the one every writer keeps: the
    earliest started, then the smallest id."""
    return min(runs, key=lambda r: (r.start_time or 0, r.run_id))


def canonical_version(versions: list[ModelVersion]) -> ModelVersion:
    """Of several versions registered for the same key, the one every writer keeps: the lowest number,
    which MLflow assigns in order, so any writer that made another one sees it."""
    return min(versions, key=lambda v: int(v.version))


class Records(Tracking, Registry):
    """Idempotent creates of runs and model versions, keyed by (object uid, role): looked up before a
    create, and checked after it, so that two writers racing converge on one record and the loser
    deletes its own duplicate. Versions converge always (MLflow numbers them in order, so a writer
    sees every lower one). Runs converge when each writer's check sees the other's run; a check made
    before the other's create landed keeps its own. Between replicas that cannot happen: a leader
    exits 5 s before a standby may lead (``slipway.leader``), so its last create has long landed.

    What Slipway creates carries its proof (:mod:`slipway.mlflow.proof`) when ``proof`` is set (the
    operator sets it at start, from a key only it holds)."""

    proof: Proof | None = None

    def experiment_for(self, name: str, guard: Guard | None) -> str:
        """The id of the experiment ``name``, created with its proof if missing; one found without a
        proof is used only as ``guard`` allows (:meth:`Guard.needs_stamp`), and stamped if trusted."""
        if guard is None or guard.proof is None:
            return self.get_or_create_experiment(name)
        for _ in range(2):
            try:
                found = self._call("GET", "/mlflow/experiments/get-by-name", params={"experiment_name": name})
            except MlflowNotFound:
                body = {"name": name, "tags": _rows(guard.named_tags("experiment", name))}
                try:
                    return str(self._call("POST", "/mlflow/experiments/create", json=body)["experiment_id"])
                except MlflowError as exc:
                    if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                        raise
                    continue  # created concurrently: look again
            experiment = found["experiment"]
            experiment_id = str(experiment["experiment_id"])
            tags = {t["key"]: t.get("value", "") for t in experiment.get("tags") or []}
            if f"experiment-id:{experiment_id}" in guard.trusted:
                guard = _trusting(guard, f"experiment:{name}")
            if guard.needs_stamp("experiment", name, tags):
                self._stamp_experiment(experiment_id, name, guard)
            return (
                self.get_or_create_experiment(name) if experiment.get("lifecycle_stage") == "deleted" else experiment_id
            )
        raise MlflowError(f"MLflow experiment {name!r} could neither be found nor created")

    def _stamp_experiment(self, experiment_id: str, name: str, guard: Guard) -> None:
        for key, value in guard.named_tags("experiment", name).items():
            body = {"experiment_id": experiment_id, "key": key, "value": value}
            self._call("POST", "/mlflow/experiments/set-experiment-tag", json=body, idempotent=True)
        log.info("MLflow experiment %s (id %s) adopted by %s: stamped with its proof", name, experiment_id, guard.owner)

    def model_for(self, name: str, guard: Guard | None) -> RegisteredModel:
        """The registered model ``name``, created with its proof if missing; one found without a proof
        is used only as ``guard`` allows, and stamped if trusted."""
        if guard is None or guard.proof is None:
            return self.get_or_create_registered_model(name)
        for _ in range(2):
            try:
                model = self.get_registered_model(name)
            except MlflowNotFound:
                body = {"name": name, "tags": _rows(guard.named_tags("model", name))}
                try:
                    answer = self._call("POST", "/mlflow/registered-models/create", json=body)
                    return RegisteredModel.from_json(answer["registered_model"])
                except MlflowError as exc:
                    if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                        raise
                    continue
            if guard.needs_stamp("model", name, model.tags):
                for key, value in guard.named_tags("model", name).items():
                    body = {"name": name, "key": key, "value": value}
                    self._call("POST", "/mlflow/registered-models/set-tag", json=body, idempotent=True)
                log.info("MLflow registered model %s adopted by %s: stamped with its proof", name, guard.owner)
            return model
        raise MlflowError(f"MLflow registered model {name!r} could neither be found nor created")

    def proven_model(self, name: str, guard: Guard) -> None:
        """:class:`Unproven` unless the registered model ``name`` carries its proof or ``guard`` trusts
        it (nothing is written: a model followed, not made)."""
        if not guard.enforce or guard.proof is None or guard.trusts("model", name):
            return
        try:
            model = self.get_registered_model(name)
        except MlflowNotFound:
            return  # no model, no version to serve
        if not guard.named_holds("model", name, model.tags):
            raise Unproven(unproven_named("model", name, guard.owner))

    def run_of(
        self,
        experiment: str,
        uid: str,
        role: str | None,
        run_name: str,
        tags: Mapping[str, str],
        guard: Guard | None = None,
    ) -> Run:
        """The run tagged with ``uid`` (and ``role``) in ``experiment``, else a new one so tagged (and,
        with a ``guard``, with its proof)."""
        experiment_id = self.experiment_for(experiment, guard)
        query = tag_filter(UID_TAG, uid) + (f" and {tag_filter(ROLE_TAG, role)}" if role else "")
        found = self.search_runs([experiment_id], filter=query)
        if found:
            return self._proven_run(canonical_run(found), role, guard)
        keys = {UID_TAG: uid, **({ROLE_TAG: role} if role else {}), **tags}
        mine = self._proven_run(self.create_run(experiment_id, run_name=run_name, tags=keys), role, guard)
        found = self.search_runs([experiment_id], filter=query)
        winner = canonical_run([mine, *(r for r in found if r.run_id != mine.run_id)])
        if winner.run_id != mine.run_id:
            log.warning(
                "MLflow run %s duplicates run %s (same %s=%s): deleted, %s kept",
                mine.run_id,
                winner.run_id,
                UID_TAG,
                uid,
                winner.run_id,
            )
            self.delete_run(mine.run_id)
        return winner

    def _proven_run(self, run: Run, role: str | None, guard: Guard | None) -> Run:
        """``run`` (made for this object: tagged with its uid) with its proof, set if it has none."""
        if guard is None or guard.proof is None:
            return run
        value = guard.run_proof(run.experiment_id, run.run_id, role or "", run.tags.get(WORK_TAG, ""))
        if run.tags.get(PROOF_TAG) != value:
            self.set_tags(run.run_id, {PROOF_TAG: value})
            run = dataclasses.replace(run, tags={**run.tags, PROOF_TAG: value})
        return run

    def version_of(
        self, model: str, uid: str, role: str, work: str | Sequence[str] | None = None, guard: Guard | None = None
    ) -> ModelVersion | None:
        """The model version registered for ``work`` (see :func:`work_key`; several keys: each in
        turn, the current one first, then those of earlier rules), else for ``uid``, in ``role``, if any
        (the canonical one of several): an object applied again from the same YAML finds what its
        predecessor registered; one of before work keys, what it registered itself."""
        keys = [work] if isinstance(work, str) else list(work or ())
        for tag, value in [*((WORK_TAG, key) for key in keys), (UID_TAG, uid)]:
            if value:
                found = self.search_model_versions(model_version_filter(model, {tag: value, ROLE_TAG: role}))
                if found and tag == WORK_TAG and guard is not None:  # a predecessor's: only with its proof
                    found = [v for v in found if guard.version_holds(model, v.version, v.tags, role, value)]
                if found:
                    return self._proven_version(canonical_version(found), role, guard)
        return None

    def _proven_version(self, version: ModelVersion, role: str, guard: Guard | None) -> ModelVersion:
        """``version`` (made for this object, or proven) with its proof, set if it has none."""
        if guard is None or guard.proof is None:
            return version
        value = guard.version_proof(version.name, version.version, role, version.tags.get(WORK_TAG, ""))
        if version.tags.get(PROOF_TAG) != value:
            self.set_model_version_tag(version.name, version.version, PROOF_TAG, value)
            version = dataclasses.replace(version, tags={**version.tags, PROOF_TAG: value})
        return version

    def register_version(
        self,
        model: str,
        source: str,
        run_id: str | None,
        uid: str,
        role: str,
        tags: Mapping[str, str],
        model_id: str | None = None,
        work: str | None = None,
        guard: Guard | None = None,
    ) -> ModelVersion:
        """Register ``source`` as a new version tagged with ``uid``, ``role`` and ``work`` (the caller
        looked up first); if another writer registered one too, the lowest number is kept and ours deleted."""
        tags = {UID_TAG: uid, ROLE_TAG: role, **({WORK_TAG: work} if work else {}), **tags}
        mine = self.create_model_version(model, source, run_id=run_id, tags=tags, model_id=model_id)
        mine = self._proven_version(mine, role, guard)
        winner = self.version_of(model, uid, role, work, guard) or mine
        if int(mine.version) > int(winner.version):
            log.warning(
                "MLflow model %s version %s duplicates version %s (same %s=%s, %s): deleted",
                model,
                mine.version,
                winner.version,
                UID_TAG,
                uid,
                role,
            )
            self.delete_model_version(model, mine.version)
        return winner if int(winner.version) < int(mine.version) else mine

    def apply_updates(
        self, updates: list[dict[str, str]]
    ) -> tuple[list[dict[str, str]], list[dict[str, str]], list[tuple[dict[str, str], str]]]:
        """Carry out alias moves and version tags decided earlier: (done, still pending, refused).
        MLflow being unreachable leaves the rest pending, to be retried; nothing is lost. An update
        MLflow refuses (4xx: a reserved alias, a deleted version, no permission) is returned with
        MLflow's answer and does not hold back the ones after it."""
        done: list[dict[str, str]] = []
        refused: list[tuple[dict[str, str], str]] = []
        for i, update in enumerate(updates):
            try:
                if update["action"] == "SetAlias":
                    self.set_alias(update["model"], update["alias"], update["version"])
                else:
                    self.set_model_version_tag(update["model"], update["version"], update["key"], update["value"])
            except MlflowUnavailable:
                return done, updates[i:], refused
            except MlflowError as exc:
                refused.append((update, str(exc)))
                continue
            done.append(update)
        return done, [], refused
