"""What the operator made, counted the way a user would after a fault: children it created (from
the API server's audit log), MLflow runs and model versions per Slipway object, by role. After any
fault every (object, role) has exactly one of each: nothing made twice, nothing lost."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx
from kubernetes import client

from localkube.audit import requests_by
from slipway.mlflow import ROLE_TAG, UID_TAG, MlflowClient, model_version_filter, tag_filter
from slipway_e2e.lifecycle import list_all

CHILD_RESOURCES = ("jobs", "persistentvolumeclaims", "services", "deployments", "horizontalpodautoscalers",
                   "modelartifacts")  # fmt: skip


@dataclass
class Ledger:
    created: Counter[str]
    """``"jobs/v1-train"`` -> how many times the operator created it (201 answers in the audit log)"""
    deleted: Counter[str]
    """the same for deletes"""
    runs: Counter[str]
    """``"TrainingRun/v1"`` or ``"ModelArtifact/v1 quantize"`` -> MLflow runs tagged with its uid"""
    versions: Counter[str]
    """``"ModelArtifact/v1 raw"`` -> model versions tagged with its uid and role"""

    def made_twice(self) -> dict[str, int]:
        """Every child, run or version that exists (or was created) more than once."""
        counts = self.created + self.runs + self.versions
        return {key: n for key, n in counts.items() if n > 1}

    def created_of(self, resource: str) -> list[str]:
        return sorted(key.split("/", 1)[1] for key in self.created if key.startswith(f"{resource}/"))

    def summary(self) -> str:
        kinds = Counter(key.split("/", 1)[0] for key in self.created)
        return (
            f"created {dict(sorted(kinds.items()))}, deleted {sum(self.deleted.values())}, "
            f"MLflow runs {sum(self.runs.values())} for {len(self.runs)} (object, role), "
            f"versions {sum(self.versions.values())} for {len(self.versions)} (object, role)"
        )


def _experiments(mlflow_url: str) -> list[str]:
    answer = httpx.post(f"{mlflow_url}/api/2.0/mlflow/experiments/search", json={"max_results": 1000}, timeout=30)
    answer.raise_for_status()
    return [e["experiment_id"] for e in answer.json().get("experiments", [])]


def take(cluster: Any, kube_api: client.ApiClient, namespace: str, user: str | None, since: datetime) -> Ledger:
    """The ledger of ``namespace``: creates and deletes by the audited ``user`` (None: not audited)
    since ``since``; MLflow runs and versions of the namespace's Slipway objects."""
    created: Counter[str] = Counter()
    deleted: Counter[str] = Counter()
    if user is not None:
        for record in requests_by(cluster, user, since):
            if record.namespace != namespace or record.resource not in CHILD_RESOURCES or record.subresource:
                continue
            if record.verb == "create" and record.code == 201:
                created[f"{record.resource}/{record.name or '?'}"] += 1
            elif record.verb == "delete" and record.code in (200, 202):
                deleted[f"{record.resource}/{record.name}"] += 1
    objects = list_all(kube_api, namespace)
    by_uid = {o["metadata"]["uid"]: f"{o['kind']}/{o['metadata']['name']}" for o in objects}
    models = sorted({o["spec"]["model"]["name"] for o in objects})
    runs: Counter[str] = Counter()
    versions: Counter[str] = Counter()
    with MlflowClient(cluster.mlflow_url) as mlflow:
        experiments = _experiments(cluster.mlflow_url)
        for uid, owner in by_uid.items():
            for run in mlflow.search_runs(experiments, filter=tag_filter(UID_TAG, uid)):
                role = run.tags.get(ROLE_TAG)
                runs[f"{owner} {role}" if role else owner] += 1
        for model in models:
            for version in mlflow.search_model_versions(model_version_filter(model)):
                owner = by_uid.get(version.tags.get(UID_TAG, ""))
                if owner is not None:
                    versions[f"{owner} {version.tags.get(ROLE_TAG)}"] += 1
    return Ledger(created, deleted, runs, versions)
