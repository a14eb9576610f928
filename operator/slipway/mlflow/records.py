"""Slipway's records in MLflow: runs and model versions tagged with the uid of the Slipway object
that made them (and their role), looked up before any create, so a pass that runs again after
a crash at any line finds what the earlier pass made instead of making it twice."""

from __future__ import annotations

from collections.abc import Mapping

from slipway.mlflow.filters import model_version_filter, tag_filter
from slipway.mlflow.http import MlflowError, MlflowUnavailable
from slipway.mlflow.registry import ModelVersion, Registry
from slipway.mlflow.tracking import Run, Tracking

UID_TAG = "slipway.dev/uid"
ROLE_TAG = "slipway.dev/role"


class Records(Tracking, Registry):
    """Idempotent creates of runs and model versions, keyed by (object uid, role)."""

    def run_of(self, experiment: str, uid: str, role: str | None, run_name: str, tags: Mapping[str, str]) -> Run:
        """The run tagged with ``uid`` (and ``role``) in ``experiment``, else a new one so tagged."""
        experiment_id = self.get_or_create_experiment(experiment)
        query = tag_filter(UID_TAG, uid) + (f" and {tag_filter(ROLE_TAG, role)}" if role else "")
        found = self.search_runs([experiment_id], filter=query, max_results=1)
        if found:
            return found[0]
        keys = {UID_TAG: uid, **({ROLE_TAG: role} if role else {}), **tags}
        return self.create_run(experiment_id, run_name=run_name, tags=keys)

    def version_of(self, model: str, uid: str, role: str) -> ModelVersion | None:
        """The model version registered for ``uid`` in ``role``, if any."""
        found = self.search_model_versions(model_version_filter(model, {UID_TAG: uid, ROLE_TAG: role}))
        return found[0] if found else None

    def register_version(
        self, model: str, source: str, run_id: str | None, uid: str, role: str, tags: Mapping[str, str]
    ) -> ModelVersion:
        """Register ``source`` as a new version tagged with ``uid`` and ``role`` (look up first)."""
        return self.create_model_version(model, source, run_id=run_id, tags={UID_TAG: uid, ROLE_TAG: role, **tags})

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
