"""MLflow 3's logged models (``models:/m-<id>``): what ``mlflow.<flavor>.log_model(name=...)`` makes.

MLflow 3 logs a model inside a run as a LoggedModel of its own, with its own artifact location
(``mlflow-artifacts:/<experiment>/models/<id>/artifacts``): the run's artifacts stay empty. The
REST API (MLflow's ``service.proto``, as ``mlflow/store/tracking/rest_store.py`` calls it):
``GET /api/2.0/mlflow/logged-models/<id>`` and ``POST /api/2.0/mlflow/logged-models/search``
with ``experiment_ids`` and a ``filter`` over ``name``, ``source_run_id``, ``status``...
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from slipway.mlflow.filters import logged_model_filter
from slipway.mlflow.http import MlflowHttp

READY = "LOGGED_MODEL_READY"


@dataclass(frozen=True)
class LoggedModel:
    """A logged model: its id (``m-<hex>``), experiment, name, source run and artifact location."""

    model_id: str
    experiment_id: str
    name: str
    artifact_uri: str
    source_run_id: str = ""
    status: str = ""
    creation_timestamp_ms: int = 0
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def uri(self) -> str:
        """``models:/<model_id>``, as MLflow's own client names it."""
        return f"models:/{self.model_id}"

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LoggedModel:
        info = data.get("info", data)
        return cls(
            model_id=str(info["model_id"]),
            experiment_id=str(info.get("experiment_id", "")),
            name=str(info.get("name", "")),
            artifact_uri=str(info.get("artifact_uri", "")),
            source_run_id=str(info.get("source_run_id") or ""),
            status=str(info.get("status", "")),
            creation_timestamp_ms=int(info.get("creation_timestamp_ms") or 0),
            tags={t["key"]: t.get("value", "") for t in info.get("tags", [])},
        )


def newest(models: list[LoggedModel]) -> LoggedModel | None:
    """The one to register of several logged under the same name in one run: the last logged
    (MLflow's client takes the one of the largest step; Slipway reads no run outputs)."""
    return max(models, key=lambda m: (m.creation_timestamp_ms, m.model_id), default=None)


class LoggedModels(MlflowHttp):
    """Read MLflow 3's logged models."""

    def get_logged_model(self, model_id: str) -> LoggedModel:
        """The logged model ``model_id``; :class:`~slipway.mlflow.errors.MlflowNotFound` if MLflow has none."""
        answer = self._call("GET", f"/mlflow/logged-models/{urllib.parse.quote(model_id, safe='')}")
        return LoggedModel.from_json(answer["model"])

    def logged_models_of_run(self, experiment_id: str, run_id: str, name: str) -> list[LoggedModel]:
        """The logged models named ``name`` whose source run is ``run_id`` (in its experiment),
        as ``mlflow.register_model("runs:/<run>/<name>")`` looks them up."""
        request = {"experiment_ids": [experiment_id], "filter": logged_model_filter(name, run_id), "max_results": 100}
        found = self._pages("POST", "/mlflow/logged-models/search", request, "models", idempotent=True)
        models = [LoggedModel.from_json(m) for m in found]
        return [m for m in models if m.source_run_id == run_id and m.name == name]
