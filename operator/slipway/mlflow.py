"""A small, typed, synchronous client for MLflow's REST API (tracking, registry, artifacts).

This is the only module in Slipway that talks to MLflow. It speaks plain REST over
``httpx`` because the ``mlflow`` package pins dependencies that conflict with the
Kubernetes client. Every call maps MLflow's answers onto three exceptions:

- :class:`MlflowNotFound` — the object does not exist (``RESOURCE_DOES_NOT_EXIST``, and the
  ``INVALID_PARAMETER_VALUE`` that MLflow answers for a missing alias);
- :class:`MlflowUnavailable` — the server cannot be reached, timed out, answered 5xx or 429;
  a retry may succeed (the operator turns it into ``kopf.TemporaryError``);
- :class:`MlflowError` — anything else (bad request, permission denied, ...).

Artifacts go through the tracking server's artifact proxy (``mlflow server
--serve-artifacts``), so a run's ``artifact_uri`` is an ``mlflow-artifacts:/…`` URI and
clients never need object-store credentials.

Model version search filters (``search_model_versions``) accept MLflow's SQL-like syntax:
attributes ``name``, ``run_id``, ``source_path``, ``version_number`` and tags as
``tags.<key>`` (or ``tag.<key>``), with backticks around keys that contain dots or
slashes, values in single quotes, joined with ``and`` only, e.g.
``name='digits' and tags.`slipway.dev/uid`='1234'``. Tags support ``=``, ``!=``, ``LIKE``
and ``ILIKE``. :func:`model_version_filter` builds such a filter safely.

Authentication comes from the environment, as in MLflow's own client:
``MLFLOW_TRACKING_TOKEN`` (bearer) or ``MLFLOW_TRACKING_USERNAME`` and
``MLFLOW_TRACKING_PASSWORD`` (basic). Secret values are never logged or shown in ``repr``.
"""

from __future__ import annotations

import logging
import math
import os
import time
import urllib.parse
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import httpx

log = logging.getLogger(__name__)

API = "/api/2.0"
ARTIFACT_PROXY = "/api/2.0/mlflow-artifacts/artifacts"
TERMINAL_RUN_STATUSES = frozenset({"FINISHED", "FAILED", "KILLED"})
RUN_STATUSES = TERMINAL_RUN_STATUSES | {"RUNNING", "SCHEDULED"}

# MLflow's limits for one log-batch request.
_MAX_METRICS_PER_BATCH = 1000
_MAX_PARAMS_TAGS_PER_BATCH = 100
_RETRY_BACKOFF_SECONDS = (0.5, 1.0, 2.0, 4.0, 8.0)
_CHUNK_BYTES = 1 << 20


# --------------------------------------------------------------------------- errors


class MlflowError(Exception):
    """An MLflow request failed; ``status`` is the HTTP status (None if no answer arrived)."""

    def __init__(self, message: str, *, status: int | None = None, error_code: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.error_code = error_code

    def __str__(self) -> str:
        code = f" [{self.error_code}]" if self.error_code else ""
        status = f" (HTTP {self.status})" if self.status is not None else ""
        return f"{self.message}{code}{status}"


class MlflowNotFound(MlflowError):
    """The experiment, run, model, version, alias or artifact does not exist."""


class MlflowUnavailable(MlflowError):
    """MLflow could not answer now (connection error, timeout, 5xx, 429); retrying may help."""


# --------------------------------------------------------------------------- entities


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


@dataclass(frozen=True)
class RegisteredModel:
    """A registered model and its aliases (alias → version)."""

    name: str
    aliases: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RegisteredModel:
        return cls(
            name=data["name"],
            aliases={a["alias"]: str(a["version"]) for a in data.get("aliases", [])},
            tags={t["key"]: t.get("value", "") for t in data.get("tags", [])},
        )


@dataclass(frozen=True)
class ModelVersion:
    """One version of a registered model. ``version`` is a string, as MLflow returns it."""

    name: str
    version: str
    source: str
    run_id: str = ""
    status: str = ""
    creation_timestamp: int = 0
    tags: dict[str, str] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()

    @property
    def uri(self) -> str:
        """The registry URI of this version, ``models:/<name>/<version>``."""
        return f"models:/{self.name}/{self.version}"

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ModelVersion:
        return cls(
            name=data["name"],
            version=str(data["version"]),
            source=data.get("source", ""),
            run_id=data.get("run_id", ""),
            status=data.get("status", ""),
            creation_timestamp=int(data.get("creation_timestamp", 0)),
            tags={t["key"]: t.get("value", "") for t in data.get("tags", [])},
            aliases=tuple(data.get("aliases", [])),
        )


@dataclass(frozen=True)
class ArtifactFile:
    """An artifact file or directory; ``path`` is relative to the listed root."""

    path: str
    is_dir: bool
    size: int | None = None


# --------------------------------------------------------------------------- helpers


def now_millis() -> int:
    """The current time in milliseconds since the epoch, MLflow's timestamp unit."""
    return int(time.time() * 1000)


def run_artifact_uri(run_id: str, artifact_path: str = "") -> str:
    """The ``runs:/<run_id>/<path>`` URI of a run's artifact."""
    return f"runs:/{run_id}/{artifact_path.strip('/')}".rstrip("/")


def model_version_filter(name: str, tags: Mapping[str, str] | None = None) -> str:
    """A ``search_model_versions`` filter: versions of ``name`` carrying all ``tags``.

    Raises ValueError for quotes or backticks, which MLflow's filter grammar cannot escape.
    """
    clauses = [f"name={_quote(name)}"]
    for key, value in (tags or {}).items():
        if "`" in key:
            raise ValueError(f"tag key {key!r} contains a backtick; MLflow filters cannot express it")
        clauses.append(f"tags.`{key}`={_quote(value)}")
    return " and ".join(clauses)


def tag_filter(key: str, value: str) -> str:
    """A ``search_runs`` filter clause matching runs whose tag ``key`` equals ``value``."""
    if "`" in key:
        raise ValueError(f"tag key {key!r} contains a backtick; MLflow filters cannot express it")
    return f"tags.`{key}` = {_quote(value)}"


def _quote(value: str) -> str:
    if "'" in value:
        raise ValueError(f"value {value!r} contains a single quote; MLflow filters cannot express it")
    return f"'{value}'"


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


def _auth_from_env() -> httpx.Auth | None:
    token = os.environ.get("MLFLOW_TRACKING_TOKEN")
    if token:
        return _BearerAuth(token)
    username = os.environ.get("MLFLOW_TRACKING_USERNAME")
    password = os.environ.get("MLFLOW_TRACKING_PASSWORD")
    if username and password:
        return httpx.BasicAuth(username, password)
    return None


class _BearerAuth(httpx.Auth):
    def __init__(self, token: str) -> None:
        self._token = token

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = f"Bearer {self._token}"
        yield request

    def __repr__(self) -> str:
        return "_BearerAuth(<redacted>)"


# --------------------------------------------------------------------------- client


class MlflowClient:
    """A synchronous client for one MLflow tracking server.

    ``retries`` applies only to idempotent requests answered with :class:`MlflowUnavailable`;
    keep it 0 inside operator handlers (kopf retries with backoff) and raise it in workloads.
    """

    def __init__(
        self,
        tracking_uri: str,
        *,
        timeout: float = 10.0,
        retries: int = 0,
        auth: httpx.Auth | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        parsed = urllib.parse.urlparse(tracking_uri)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(
                f"MLflow tracking URI {tracking_uri!r} is not an http(s) URL; "
                "set MLFLOW_TRACKING_URI to the tracking server, e.g. http://mlflow.mlflow:5000"
            )
        self.tracking_uri = tracking_uri.rstrip("/")
        self.retries = retries
        self._http = httpx.Client(
            base_url=self.tracking_uri,
            timeout=timeout,
            auth=auth if auth is not None else _auth_from_env(),
            transport=transport,
            headers={"User-Agent": "slipway"},
        )

    @classmethod
    def from_env(cls, tracking_uri: str | None = None, **kwargs: Any) -> MlflowClient:
        """A client for ``tracking_uri`` or ``$MLFLOW_TRACKING_URI``, with auth from the env."""
        uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI", "")
        if not uri:
            raise ValueError("MLFLOW_TRACKING_URI is not set: point it at the MLflow tracking server")
        return cls(uri, **kwargs)

    def __repr__(self) -> str:
        return f"MlflowClient({self.tracking_uri!r})"

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> MlflowClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------- experiments

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

    # ----------------------------------------------------------------- runs

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

    def get_run(self, run_id: str) -> Run:
        return Run.from_json(self._call("GET", "/mlflow/runs/get", params={"run_id": run_id})["run"])

    def search_runs(
        self,
        experiment_ids: Sequence[str],
        filter: str = "",
        order_by: Sequence[str] = (),
        max_results: int | None = None,
    ) -> list[Run]:
        """Active runs matching ``filter`` (e.g. :func:`tag_filter`), following pagination."""
        runs: list[Run] = []
        page_token = ""
        while True:
            body: dict[str, Any] = {
                "experiment_ids": list(experiment_ids),
                "filter": filter,
                "run_view_type": "ACTIVE_ONLY",
                "max_results": min(max_results or 1000, 1000),
                "order_by": list(order_by),
            }
            if page_token:
                body["page_token"] = page_token
            answer = self._call("POST", "/mlflow/runs/search", json=body, idempotent=True)
            runs.extend(Run.from_json(r) for r in answer.get("runs", []))
            page_token = answer.get("next_page_token", "")
            if not page_token or (max_results and len(runs) >= max_results):
                return runs[:max_results] if max_results else runs

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
        samples: list[Metric] = []
        page_token = ""
        while True:
            params: dict[str, Any] = {"run_id": run_id, "metric_key": key, "max_results": 25000}
            if page_token:
                params["page_token"] = page_token
            answer = self._call("GET", "/mlflow/metrics/get-history", params=params)
            samples.extend(Metric.from_json(m) for m in answer.get("metrics", []))
            page_token = answer.get("next_page_token", "")
            if not page_token:
                return samples

    def run_url(self, experiment_id: str, run_id: str, ui_base: str | None = None) -> str:
        """The MLflow UI link of a run (``ui_base`` defaults to the tracking URI)."""
        return f"{(ui_base or self.tracking_uri).rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"

    # ----------------------------------------------------------------- artifacts

    def upload_artifact(self, run_id: str, local_path: Path | str, artifact_path: str = "") -> str:
        """Upload one file into the run's artifacts under ``artifact_path`` (a directory).

        Returns the artifact URI of the uploaded file. Re-uploading overwrites it.
        """
        local_path = Path(local_path)
        if not local_path.is_file():
            raise FileNotFoundError(f"cannot upload {local_path} to MLflow run {run_id}: not a file")
        root = self.get_run(run_id).artifact_uri
        return self._put_file(root, _join(artifact_path, local_path.name), local_path)

    def upload_dir(self, run_id: str, local_dir: Path | str, artifact_path: str = "") -> str:
        """Upload a directory tree into the run's artifacts at ``artifact_path``.

        Returns the artifact URI of that directory.
        """
        local_dir = Path(local_dir)
        if not local_dir.is_dir():
            raise FileNotFoundError(f"cannot upload {local_dir} to MLflow run {run_id}: not a directory")
        root = self.get_run(run_id).artifact_uri
        for file in sorted(p for p in local_dir.rglob("*") if p.is_file()):
            self._put_file(root, _join(artifact_path, file.relative_to(local_dir).as_posix()), file)
        return _join_uri(root, artifact_path)

    def list_artifacts(self, uri: str) -> list[ArtifactFile]:
        """The files and directories directly under an artifact URI (``runs:/``, ``models:/``,
        ``mlflow-artifacts:/``). An empty list when nothing is there."""
        return self._list_proxy(self.resolve_artifact_path(uri))

    def download_artifacts(self, uri: str, dest: Path | str) -> Path:
        """Download the file or directory at ``uri`` into ``dest``; returns its local path
        (``dest/<last path segment>``), as MLflow's own client does.

        ``uri`` is ``runs:/<run_id>/<path>``, ``models:/<name>/<version>``,
        ``models:/<name>@<alias>``, ``models:/<logged-model-id>``, or ``mlflow-artifacts:/…``.
        """
        proxy_path = self.resolve_artifact_path(uri)
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        target = dest / (PurePosixPath(proxy_path).name or "artifacts")
        entries = self._list_proxy(proxy_path)
        if entries:
            self._download_tree(proxy_path, entries, target)
        else:
            self._download_file(proxy_path, target, what=uri)
        return target

    def resolve_artifact_path(self, uri: str) -> str:
        """The artifact proxy path (relative to ``/api/2.0/mlflow-artifacts/artifacts``) of a URI."""
        parsed = urllib.parse.urlparse(uri)
        if parsed.scheme == "runs":
            run_id, _, path = (parsed.netloc + parsed.path).lstrip("/").partition("/")
            return _join(self.resolve_artifact_path(self.get_run(run_id).artifact_uri), path)
        if parsed.scheme == "models":
            return self.resolve_artifact_path(self._model_source(uri))
        if parsed.scheme == "mlflow-artifacts":
            return parsed.path.strip("/")
        if parsed.scheme in ("http", "https") and ARTIFACT_PROXY + "/" in parsed.path:
            return parsed.path.split(ARTIFACT_PROXY + "/", 1)[1].strip("/")
        raise MlflowError(
            f"artifact URI {uri!r} is not served through the tracking server's artifact proxy; "
            "use runs:/, models:/ or mlflow-artifacts:/ URIs and start MLflow with --serve-artifacts",
            error_code="UNSUPPORTED_ARTIFACT_URI",
        )

    def _model_source(self, uri: str) -> str:
        ref = uri[len("models:/") :].strip("/")
        if "@" in ref:
            name, alias = ref.split("@", 1)
            version = self.get_version_by_alias(name, alias)
            if version is None:
                raise MlflowNotFound(f"{uri}: registered model {name!r} has no alias {alias!r}")
            return version.source
        name, _, rest = ref.partition("/")
        if rest:
            version_number, _, sub_path = rest.partition("/")
            return _join_uri(self.get_model_version(name, version_number).source, sub_path)
        # models:/<model_id>: an MLflow 3 logged model.
        answer = self._call("GET", f"/mlflow/logged-models/{urllib.parse.quote(name)}")
        return str(answer["model"]["info"]["artifact_uri"])

    def _put_file(self, root_uri: str, artifact_path: str, local_path: Path) -> str:
        proxy_path = _join(self.resolve_artifact_path(root_uri), artifact_path)
        url = f"{ARTIFACT_PROXY}/{urllib.parse.quote(proxy_path)}"

        def send() -> httpx.Response:
            with local_path.open("rb") as body:
                return self._http.put(url, content=body)

        self._send(send, f"upload {local_path} to {root_uri}/{artifact_path}", idempotent=True)
        return _join_uri(root_uri, artifact_path)

    def _list_proxy(self, proxy_path: str) -> list[ArtifactFile]:
        answer = self._call_raw("GET", ARTIFACT_PROXY, params={"path": proxy_path})
        return [
            ArtifactFile(
                path=f["path"],
                is_dir=bool(f.get("is_dir")),
                size=int(f["file_size"]) if "file_size" in f else None,
            )
            for f in answer.get("files", [])
        ]

    def _download_tree(self, proxy_path: str, entries: list[ArtifactFile], target: Path) -> None:
        target.mkdir(parents=True, exist_ok=True)
        for entry in entries:
            child = _join(proxy_path, entry.path)
            if entry.is_dir:
                self._download_tree(child, self._list_proxy(child), target / entry.path)
            else:
                self._download_file(child, target / entry.path, what=child)

    def _download_file(self, proxy_path: str, target: Path, what: str) -> None:
        url = f"{ARTIFACT_PROXY}/{urllib.parse.quote(proxy_path)}"
        partial = target.with_name(target.name + ".partial")
        target.parent.mkdir(parents=True, exist_ok=True)

        def fetch() -> httpx.Response:
            with self._http.stream("GET", url) as response:
                if response.is_success:
                    with partial.open("wb") as out:
                        for chunk in response.iter_bytes(_CHUNK_BYTES):
                            out.write(chunk)
                else:
                    response.read()
                return response

        try:
            self._send(fetch, f"download {what}", idempotent=True)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        partial.replace(target)

    # ----------------------------------------------------------------- registry

    def get_or_create_registered_model(self, name: str) -> RegisteredModel:
        """The registered model ``name``, created if missing (safe against races)."""
        try:
            return self.get_registered_model(name)
        except MlflowNotFound:
            pass
        try:
            answer = self._call("POST", "/mlflow/registered-models/create", json={"name": name})
            return RegisteredModel.from_json(answer["registered_model"])
        except MlflowError as exc:
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
            return self.get_registered_model(name)

    def get_registered_model(self, name: str) -> RegisteredModel:
        answer = self._call("GET", "/mlflow/registered-models/get", params={"name": name})
        return RegisteredModel.from_json(answer["registered_model"])

    def create_model_version(
        self,
        name: str,
        source: str,
        run_id: str | None = None,
        tags: Mapping[str, str] | None = None,
        description: str | None = None,
    ) -> ModelVersion:
        """Register ``source`` as a new version of ``name``. Not idempotent: tag the version
        (e.g. with the owner's uid) and look it up with :meth:`search_model_versions` first.

        MLflow requires ``run_id`` when ``source`` is a ``runs:/`` or ``mlflow-artifacts:/``
        URI, and the source must lie inside that run's artifacts.
        """
        body: dict[str, Any] = {
            "name": name,
            "source": source,
            "tags": [{"key": k, "value": v} for k, v in (tags or {}).items()],
        }
        if run_id:
            body["run_id"] = run_id
        if description:
            body["description"] = description
        answer = self._call("POST", "/mlflow/model-versions/create", json=body)
        return ModelVersion.from_json(answer["model_version"])

    def search_model_versions(
        self, filter: str, order_by: Sequence[str] = ("version_number DESC",)
    ) -> list[ModelVersion]:
        """Model versions matching ``filter`` (see :func:`model_version_filter`), newest first."""
        versions: list[ModelVersion] = []
        page_token = ""
        while True:
            params: dict[str, Any] = {"filter": filter, "max_results": 1000, "order_by": list(order_by)}
            if page_token:
                params["page_token"] = page_token
            answer = self._call("GET", "/mlflow/model-versions/search", params=params)
            versions.extend(ModelVersion.from_json(v) for v in answer.get("model_versions", []))
            page_token = answer.get("next_page_token", "")
            if not page_token:
                return versions

    def get_model_version(self, name: str, version: str | int) -> ModelVersion:
        answer = self._call("GET", "/mlflow/model-versions/get", params={"name": name, "version": str(version)})
        return ModelVersion.from_json(answer["model_version"])

    def set_model_version_tag(self, name: str, version: str | int, key: str, value: str) -> None:
        body = {"name": name, "version": str(version), "key": key, "value": value}
        self._call("POST", "/mlflow/model-versions/set-tag", json=body, idempotent=True)

    def set_alias(self, name: str, alias: str, version: str | int) -> None:
        """Point ``alias`` of model ``name`` at ``version`` (moves it if it exists)."""
        body = {"name": name, "alias": alias, "version": str(version)}
        self._call("POST", "/mlflow/registered-models/alias", json=body, idempotent=True)

    def delete_alias(self, name: str, alias: str) -> None:
        """Remove ``alias`` from model ``name``; a missing alias is not an error."""
        try:
            body = {"name": name, "alias": alias}
            self._call("DELETE", "/mlflow/registered-models/alias", json=body, idempotent=True)
        except MlflowNotFound:
            pass

    def get_version_by_alias(self, name: str, alias: str) -> ModelVersion | None:
        """The version ``alias`` points at; None when the alias (or the model) does not exist."""
        try:
            answer = self._call("GET", "/mlflow/registered-models/alias", params={"name": name, "alias": alias})
        except MlflowNotFound:
            return None
        return ModelVersion.from_json(answer["model_version"])

    # ----------------------------------------------------------------- transport

    def _call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Mapping[str, Any] | None = None,
        idempotent: bool | None = None,
    ) -> dict[str, Any]:
        """One request to ``/api/2.0<path>``; returns the decoded JSON answer."""
        return self._call_raw(method, API + path, params=params, json=json, idempotent=idempotent)

    def _call_raw(
        self,
        method: str,
        url: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Mapping[str, Any] | None = None,
        idempotent: bool | None = None,
    ) -> dict[str, Any]:
        if idempotent is None:
            idempotent = method in ("GET", "PUT", "DELETE")
        response = self._send(
            lambda: self._http.request(method, url, params=params, json=json),
            f"{method} {url}",
            idempotent=idempotent,
        )
        if not response.content:
            return {}
        try:
            answer = response.json()
        except ValueError as exc:
            raise MlflowError(
                f"MLflow {method} {url} answered non-JSON ({response.headers.get('content-type')}); "
                "is MLFLOW_TRACKING_URI pointing at an MLflow server?",
                status=response.status_code,
            ) from exc
        return answer if isinstance(answer, dict) else {}

    def _send(self, request: Any, what: str, *, idempotent: bool) -> httpx.Response:
        """Run ``request`` (a callable returning a response), map failures, retry if allowed."""
        attempts = 1 + (self.retries if idempotent else 0)
        for attempt in range(attempts):
            try:
                response: httpx.Response = request()
                _raise_for_answer(response, what, self.tracking_uri)
                return response
            except httpx.TimeoutException as exc:
                error: MlflowUnavailable = MlflowUnavailable(
                    f"MLflow at {self.tracking_uri} did not answer {what} in time: {exc}"
                )
            except httpx.TransportError as exc:
                error = MlflowUnavailable(f"MLflow at {self.tracking_uri} is unreachable ({what}): {exc}")
            except MlflowUnavailable as exc:
                error = exc
            if attempt + 1 < attempts:
                delay = _RETRY_BACKOFF_SECONDS[min(attempt, len(_RETRY_BACKOFF_SECONDS) - 1)]
                log.warning("%s; retrying in %.1fs (%d/%d)", error, delay, attempt + 1, attempts - 1)
                time.sleep(delay)
        raise error


def _raise_for_answer(response: httpx.Response, what: str, server: str) -> None:
    if response.is_success:
        return
    status = response.status_code
    error_code, message = "", response.text[:500]
    try:
        body = response.json()
        if isinstance(body, dict):
            error_code = str(body.get("error_code", ""))
            message = str(body.get("message", message))
    except ValueError:
        pass
    text = f"MLflow {what}: {message}"
    if status in (401, 403):
        text += " (check MLFLOW_TRACKING_TOKEN or MLFLOW_TRACKING_USERNAME/MLFLOW_TRACKING_PASSWORD)"
    if status >= 500 or status == 429:
        raise MlflowUnavailable(f"MLflow at {server} failed {what}: {message}", status=status, error_code=error_code)
    if status == 404 or error_code == "RESOURCE_DOES_NOT_EXIST":
        raise MlflowNotFound(text, status=status, error_code=error_code)
    if error_code == "INVALID_PARAMETER_VALUE" and "/registered-models/alias" in what and "not found" in message:
        # MLflow answers a missing alias with 400 INVALID_PARAMETER_VALUE, not 404.
        raise MlflowNotFound(text, status=status, error_code=error_code)
    raise MlflowError(text, status=status, error_code=error_code)


def _join(*parts: str) -> str:
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))


def _join_uri(uri: str, path: str) -> str:
    path = path.strip("/")
    return f"{uri.rstrip('/')}/{path}" if path else uri
