"""Slipway's records in MLflow: runs and model versions tagged with the uid of the Slipway object
that made them (and their role), looked up before any create, so a pass that runs again after
a crash at any line finds what the earlier pass made instead of making it twice."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from typing import Any

from slipway.mlflow.filters import model_version_filter, tag_filter
from slipway.mlflow.http import MlflowError, MlflowUnavailable
from slipway.mlflow.registry import ModelVersion, Registry
from slipway.mlflow.tracking import Run, Tracking

log = logging.getLogger(__name__)

UID_TAG = "slipway.dev/uid"
ROLE_TAG = "slipway.dev/role"
WORK_TAG = "slipway.dev/work"  # what the version was made for: see work_key


def work_key(namespace: str, name: str, spec: Mapping[str, Any], source: str) -> str:
    """The work a record was made for, independent of the object's uid: a hash of its namespace,
    name, spec and the source it resolved. Deleted and applied again from the same YAML (Argo CD
    after a prune, a restore without status), an object has the same key and adopts what its
    predecessor made; a spec that differs is new work."""
    text = json.dumps([namespace, name, dict(spec), source], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


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
    exits 5 s before a standby may lead (``slipway.leader``), so its last create has long landed."""

    def run_of(self, experiment: str, uid: str, role: str | None, run_name: str, tags: Mapping[str, str]) -> Run:
        """The run tagged with ``uid`` (and ``role``) in ``experiment``, else a new one so tagged."""
        experiment_id = self.get_or_create_experiment(experiment)
        query = tag_filter(UID_TAG, uid) + (f" and {tag_filter(ROLE_TAG, role)}" if role else "")
        found = self.search_runs([experiment_id], filter=query)
        if found:
            return canonical_run(found)
        keys = {UID_TAG: uid, **({ROLE_TAG: role} if role else {}), **tags}
        mine = self.create_run(experiment_id, run_name=run_name, tags=keys)
        found = self.search_runs([experiment_id], filter=query)
        winner = canonical_run([mine, *(r for r in found if r.run_id != mine.run_id)])
        if winner.run_id != mine.run_id:
            log.warning("MLflow run %s duplicates run %s (same %s=%s): deleted, %s kept", mine.run_id,
                        winner.run_id, UID_TAG, uid, winner.run_id)  # fmt: skip
            self.delete_run(mine.run_id)
        return winner

    def version_of(self, model: str, uid: str, role: str, work: str | None = None) -> ModelVersion | None:
        """The model version registered for ``work`` (see :func:`work_key`), else for ``uid``, in
        ``role``, if any (the canonical one of several): an object applied again from the same YAML
        finds what its predecessor registered; one of before work keys, what it registered itself."""
        for tag, value in ((WORK_TAG, work), (UID_TAG, uid)):
            if value:
                found = self.search_model_versions(model_version_filter(model, {tag: value, ROLE_TAG: role}))
                if found:
                    return canonical_version(found)
        return None

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
    ) -> ModelVersion:
        """Register ``source`` as a new version tagged with ``uid``, ``role`` and ``work`` (the caller
        looked up first); if another writer registered one too, the lowest number is kept and ours deleted."""
        tags = {UID_TAG: uid, ROLE_TAG: role, **({WORK_TAG: work} if work else {}), **tags}
        mine = self.create_model_version(model, source, run_id=run_id, tags=tags, model_id=model_id)
        winner = self.version_of(model, uid, role, work) or mine
        if int(mine.version) > int(winner.version):
            log.warning("MLflow model %s version %s duplicates version %s (same %s=%s, %s): deleted", model,
                        mine.version, winner.version, UID_TAG, uid, role)  # fmt: skip
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
