"""MLflow tracking: experiments, runs, their metrics, params and tags."""

from __future__ import annotations

import contextlib
import itertools
import math
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from slipway.mlflow.errors import MlflowError, MlflowNotFound
from slipway.mlflow.http import MlflowHttp
from slipway.mlflow.uris import ui_run_url
from slipway.redact import without_credentials

TERMINAL_RUN_STATUSES = frozenset({"FINISHED", "FAILED", "KILLED"})
RUN_STATUSES = TERMINAL_RUN_STATUSES | {"RUNNING", "SCHEDULED"}

# MLflow's limits for one log-batch request.
_MAX_METRICS_PER_BATCH = 1000
_MAX_PARAMS_TAGS_PER_BATCH = 100


@dataclass(frozen=True)
class Metric:
    """One metric sample: ``timestamp`` in milliseconds since the epoch."""

    key: str
    value: float
    step: int = 0
    timestamp: int = 0

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Metric:
        return cls(
            key=data["key"],
            value=float(data.get("value", math.nan)),
            step=int(data.get("step", 0)),
            timestamp=int(data.get("timestamp", 0)),
        )


@dataclass(frozen=True)
class Run:
    """An MLflow run: its info plus the latest value of each metric, its params and tags."""

    run_id: str
    experiment_id: str
    run_name: str
    status: str
    artifact_uri: str
    start_time: int | None = None
    end_time: int | None = None
    metrics: dict[str, Metric] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Run:
        info = data.get("info", {})
        body = data.get("data", {})
        return cls(
            run_id=info.get("run_id") or info["run_uuid"],
            experiment_id=str(info.get("experiment_id", "")),
            run_name=info.get("run_name", ""),
            status=info.get("status", ""),
            artifact_uri=info.get("artifact_uri", ""),
            start_time=_optional_int(info.get("start_time")),
            end_time=_optional_int(info.get("end_time")),
            metrics={m["key"]: Metric.from_json(m) for m in body.get("metrics", [])},
            params={p["key"]: p.get("value", "") for p in body.get("params", [])},
            tags={t["key"]: t.get("value", "") for t in body.get("tags", [])},
        )


def now_millis() -> int:
    """The current time in milliseconds since the epoch, MLflow's timestamp unit."""
    return int(time.time() * 1000)


def _optional_int(value: Any) -> int | None:
    return None if value in (None, "", 0, "0") else int(value)


def _json_number(value: float) -> float | str:
    # JSON has no NaN/Infinity; MLflow's protobuf parser accepts these spellings.
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return float(value)


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class Tracking(MlflowHttp):
    """Experiments and runs."""

    def get_or_create_experiment(self, name: str) -> str:
        """The id of the experiment ``name``, created if missing (safe against races)."""
        for _ in range(2):
            try:
                experiment = self._call("GET", "/mlflow/experiments/get-by-name", params={"experiment_name": name})[
                    "experiment"
                ]
            except MlflowNotFound:
                try:
                    return str(self._call("POST", "/mlflow/experiments/create", json={"name": name})["experiment_id"])
                except MlflowError as exc:
                    if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                        raise
                    continue  # created concurrently, or deleted: look again
            if experiment.get("lifecycle_stage") == "deleted":
                raise MlflowError(
                    f"MLflow experiment {name!r} (id {experiment['experiment_id']}) is deleted; "
                    "restore it (`mlflow experiments restore`) or choose another experiment name",
                    error_code="EXPERIMENT_DELETED",
                )
            return str(experiment["experiment_id"])
        raise MlflowError(f"MLflow experiment {name!r} could neither be found nor created")

    def experiment_name(self, experiment_id: str) -> str | None:
        """The name of an experiment, None when MLflow has no such experiment."""
        try:
            experiment = self._call("GET", "/mlflow/experiments/get", params={"experiment_id": experiment_id})
        except MlflowNotFound:
            return None
        return str(experiment["experiment"]["name"])

    def create_run(
        self,
        experiment_id: str,
        run_name: str | None = None,
        tags: Mapping[str, str] | None = None,
        start_time: int | None = None,
    ) -> Run:
        """Create a RUNNING run. Not idempotent: tag it and :meth:`search_runs` first."""
        body: dict[str, Any] = {
            "experiment_id": experiment_id,
            "start_time": start_time if start_time is not None else now_millis(),
            "tags": [{"key": k, "value": v} for k, v in (tags or {}).items()],
        }
        if run_name:
            body["run_name"] = run_name
        return Run.from_json(self._call("POST", "/mlflow/runs/create", json=body)["run"])

    def delete_run(self, run_id: str) -> None:
        """Mark a run deleted (MLflow keeps it restorable); an absent run is not an error."""
        with contextlib.suppress(MlflowNotFound):
            self._call("POST", "/mlflow/runs/delete", json={"run_id": run_id}, idempotent=True)

    def get_run(self, run_id: str) -> Run:
        return Run.from_json(self._call("GET", "/mlflow/runs/get", params={"run_id": run_id})["run"])

    def search_runs(
        self,
        experiment_ids: Sequence[str],
        filter: str = "",
        order_by: Sequence[str] = (),
        max_results: int | None = None,
    ) -> list[Run]:
        """Active runs matching ``filter`` (e.g. :func:`~slipway.mlflow.filters.tag_filter`), following pagination."""
        request = {
            "experiment_ids": list(experiment_ids),
            "filter": filter,
            "run_view_type": "ACTIVE_ONLY",
            "max_results": min(max_results or 1000, 1000),
            "order_by": list(order_by),
        }
        found = self._pages("POST", "/mlflow/runs/search", request, "runs", idempotent=True)
        return [Run.from_json(r) for r in itertools.islice(found, max_results or None)]

    def update_run(
        self, run_id: str, status: str | None = None, end_time: int | None = None, run_name: str | None = None
    ) -> None:
        """Set a run's status (``end_time`` defaults to now for terminal statuses) or name."""
        body: dict[str, Any] = {"run_id": run_id}
        if status is not None:
            if status not in RUN_STATUSES:
                raise ValueError(f"run status {status!r} is not one of {sorted(RUN_STATUSES)}")
            body["status"] = status
            if end_time is None and status in TERMINAL_RUN_STATUSES:
                end_time = now_millis()
        if end_time is not None:
            body["end_time"] = end_time
        if run_name is not None:
            body["run_name"] = run_name
        self._call("POST", "/mlflow/runs/update", json=body, idempotent=True)

    def log_batch(
        self,
        run_id: str,
        metrics: Iterable[Metric | tuple[str, float, int, int]] = (),
        params: Mapping[str, Any] | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> None:
        """Log metrics ``(key, value, step, timestamp_ms)``, params and tags in as few requests
        as MLflow's batch limits allow. Params are write-once in MLflow: logging the same key
        with a different value fails with INVALID_PARAMETER_VALUE."""
        metric_rows = [
            {
                "key": m.key,
                "value": _json_number(m.value),
                "step": m.step,
                "timestamp": m.timestamp or now_millis(),
            }
            for m in (x if isinstance(x, Metric) else Metric(*x) for x in metrics)
        ]
        param_rows = [{"key": k, "value": str(v)} for k, v in (params or {}).items()]
        tag_rows = [{"key": k, "value": v} for k, v in (tags or {}).items()]
        if (
            len(metric_rows) <= _MAX_METRICS_PER_BATCH
            and len(param_rows) <= _MAX_PARAMS_TAGS_PER_BATCH
            and len(tag_rows) <= _MAX_PARAMS_TAGS_PER_BATCH
            and len(metric_rows) + len(param_rows) + len(tag_rows) <= _MAX_METRICS_PER_BATCH
        ):
            if metric_rows or param_rows or tag_rows:
                self._log_batch_request(run_id, metrics=metric_rows, params=param_rows, tags=tag_rows)
            return
        for chunk in _chunks(metric_rows, _MAX_METRICS_PER_BATCH):
            self._log_batch_request(run_id, metrics=chunk)
        for chunk in _chunks(param_rows, _MAX_PARAMS_TAGS_PER_BATCH):
            self._log_batch_request(run_id, params=chunk)
        for chunk in _chunks(tag_rows, _MAX_PARAMS_TAGS_PER_BATCH):
            self._log_batch_request(run_id, tags=chunk)

    def _log_batch_request(self, run_id: str, **rows: Sequence[dict[str, Any]]) -> None:
        body = {"run_id": run_id, **{k: list(v) for k, v in rows.items()}}
        # MLflow stores a metric sample keyed by (key, step, timestamp, value): a retried batch
        # does not duplicate samples, and params/tags are upserts of the same value.
        self._call("POST", "/mlflow/runs/log-batch", json=body, idempotent=True)

    def set_tags(self, run_id: str, tags: Mapping[str, str]) -> None:
        """Set run tags (overwrites)."""
        self.log_batch(run_id, tags=tags)

    def get_metric_history(self, run_id: str, key: str) -> list[Metric]:
        """Every logged sample of metric ``key``, in the order MLflow returns them."""
        request = {"run_id": run_id, "metric_key": key, "max_results": 25000}
        return [Metric.from_json(m) for m in self._pages("GET", "/mlflow/metrics/get-history", request, "metrics")]

    def run_url(self, experiment_id: str, run_id: str, ui_base: str | None = None) -> str:
        """The MLflow UI link of a run (``ui_base`` defaults to the tracking URI), without the
        credentials the address may carry: people open it in a browser that has its own."""
        return ui_run_url(without_credentials(ui_base or self.tracking_uri), run_id, experiment_id)
