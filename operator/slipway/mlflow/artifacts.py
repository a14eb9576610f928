"""Run artifacts: upload, list and download through the tracking server's artifact proxy.

Artifacts go through the proxy (``mlflow server --serve-artifacts``), so a run's
``artifact_uri`` is an ``mlflow-artifacts:/…`` URI and clients never need object-store
credentials. ``runs:/`` and ``models:/`` URIs are resolved to proxy paths, which needs the
run (tracking) and the registered version (registry): hence this part builds on both.
"""

from __future__ import annotations

import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import httpx

from slipway.mlflow import bounds
from slipway.mlflow.errors import MlflowError, MlflowNotFound
from slipway.mlflow.registry import Registry
from slipway.mlflow.tracking import Tracking
from slipway.mlflow.uris import ModelUri, parse_model_uri, parse_run_uri

ARTIFACT_PROXY = "/api/2.0/mlflow-artifacts/artifacts"
_CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class ArtifactFile:
    """An artifact file or directory; ``path`` is relative to the listed root."""

    path: str
    is_dir: bool
    size: int | None = None


class Artifacts(Tracking, Registry):
    """Artifact transfer, and the resolution of artifact URIs to proxy paths."""

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
        run = parse_run_uri(uri)
        if run is not None:
            return _join(self.resolve_artifact_path(self.get_run(run.run_id).artifact_uri), run.path)
        model = parse_model_uri(uri)
        if model is not None:
            return self.resolve_artifact_path(self._model_source(uri, model))
        parsed = urllib.parse.urlparse(uri)
        if parsed.scheme == "mlflow-artifacts":
            return parsed.path.strip("/")
        if parsed.scheme in ("http", "https") and ARTIFACT_PROXY + "/" in parsed.path:
            return parsed.path.split(ARTIFACT_PROXY + "/", 1)[1].strip("/")
        raise MlflowError(
            f"artifact URI {uri!r} is not served through the tracking server's artifact proxy; "
            "use runs:/, models:/ or mlflow-artifacts:/ URIs and start MLflow with --serve-artifacts",
            error_code="UNSUPPORTED_ARTIFACT_URI",
        )

    def _model_source(self, uri: str, model: ModelUri) -> str:
        if model.alias is not None:
            version = self.get_version_by_alias(model.name, model.alias)
            if version is None:
                raise MlflowNotFound(f"{uri}: registered model {model.name!r} has no alias {model.alias!r}")
            return version.source
        if model.version is not None:
            return _join_uri(self.get_model_version(model.name, model.version).source, model.path)
        # models:/<model_id>: an MLflow 3 logged model.
        answer = self._call("GET", f"/mlflow/logged-models/{urllib.parse.quote(model.name)}")
        return str(answer["model"]["info"]["artifact_uri"])

    def _put_file(self, root_uri: str, artifact_path: str, local_path: Path) -> str:
        proxy_path = _join(self.resolve_artifact_path(root_uri), artifact_path)
        url = f"{ARTIFACT_PROXY}/{urllib.parse.quote(proxy_path)}"

        def send(until: float | None) -> httpx.Response:
            timeout = self.timeout if until is None else bounds.write_timeout(until - time.monotonic(), self.timeout)
            with local_path.open("rb") as body:
                return self._http.put(url, content=body, timeout=timeout)

        self._send(send, f"upload {local_path} to {root_uri}/{artifact_path}", idempotent=True, writes=True)
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

        def fetch(_: float | None) -> httpx.Response:
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


def _join(*parts: str) -> str:
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))


def _join_uri(uri: str, path: str) -> str:
    path = path.strip("/")
    return f"{uri.rstrip('/')}/{path}" if path else uri
