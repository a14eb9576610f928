"""Where a model to register lives, found as MLflow's own client finds it, and its files' digest.

A run's model is the run's artifacts at the artifact path (how MLflow 2 and Slipway's trainer
log it), else the LoggedModel of that name whose source run is that run (how MLflow 3's
``log_model(name=...)`` logs it): ``mlflow.register_model("runs:/<run>/<path>")`` looks in the
same two places. A LoggedModel is registered as MLflow 3 registers it: source
``models:/<model_id>`` with the ``model_id`` field.

The digest over a model's files is ``sha256:<hex>`` of the lines ``<sha256 hex of a file>  <path>``
of every file, sorted by path (bytes), each line ending in a newline: what
``find . -type f | cut -c3- | LC_ALL=C sort | xargs sha256sum | sha256sum`` prints in the model's
directory.
"""

from __future__ import annotations

import hashlib
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass

import httpx

from slipway.mlflow.artifacts import ARTIFACT_PROXY, Artifacts, _join
from slipway.mlflow.http import MlflowError
from slipway.mlflow.logged_models import LoggedModel, LoggedModels, newest
from slipway.mlflow.tracking import Run
from slipway.mlflow.uris import run_artifact_uri

MAX_DIGEST_FILES = 10_000
MAX_DIGEST_BYTES = 2 * 2**30  # past either, the files are counted and sized but not digested (the operator reads them)
_CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class Found:
    """A model's files: the URI to register, the run and logged model it belongs to."""

    uri: str
    run_id: str | None
    model_id: str | None = None
    where: str = ""  # what was found, in words: "run abc's artifacts at model", "LoggedModel m-1 ..."


@dataclass(frozen=True)
class FileTree:
    """The files under a model's URI: how many, their bytes, and their digest (None past the bounds,
    where the count stops just past MAX_DIGEST_FILES)."""

    files: int
    size_bytes: int
    digest: str | None


def tree_digest(files: Iterable[tuple[str, str]]) -> str:
    """``sha256:<hex>`` over ``(path, sha256 hex of its bytes)`` pairs, as the module says."""
    sha = hashlib.sha256()
    for path, hexdigest in sorted(files, key=lambda f: f[0].encode()):
        sha.update(f"{hexdigest}  {path}\n".encode())
    return f"sha256:{sha.hexdigest()}"


def looked_for(run_id: str, path: str) -> str:
    """What a run's model was looked for as, in words for a condition."""
    return (f"run {run_id}'s artifacts at {path!r} (MLflow 2, Slipway's trainer) and a LoggedModel named "
            f"{path!r} whose source run is {run_id} (MLflow 3's log_model(name={path!r}))")  # fmt: skip


class ModelSources(Artifacts, LoggedModels):
    """Find a model's files in MLflow and digest them."""

    def run_model(self, run: Run, path: str) -> Found | None:
        """The model of ``run`` at ``path``: its run artifacts there, else its LoggedModel named
        ``path``; None when neither holds a file."""
        uri = run_artifact_uri(run.run_id, path)
        if self.has_files(uri):
            return Found(uri, run.run_id, where=f"run {run.run_id}'s artifacts at {path!r}")
        logged = newest(self.logged_models_of_run(run.experiment_id, run.run_id, path))
        if logged is None or not self.has_files(logged.uri):
            return None
        return self.logged(logged, run.run_id)

    def has_files(self, uri: str) -> bool | None:
        """Whether ``uri`` is a file or a directory holding one; None for a URI the tracking server's
        artifact proxy does not serve (``s3://``...), whose files Slipway cannot see."""
        try:
            return bool(self._files_at(self.resolve_artifact_path(uri)))
        except MlflowError as exc:
            if exc.error_code == "UNSUPPORTED_ARTIFACT_URI":
                return None
            raise

    def logged(self, model: LoggedModel, run_id: str | None = None) -> Found:
        """A LoggedModel as the source of a version (the source run given, if it is known)."""
        where = f"LoggedModel {model.model_id} named {model.name!r} of run {model.source_run_id or '(none)'}"
        return Found(model.uri, run_id or model.source_run_id or None, model.model_id, where)

    def file_tree(self, uri: str) -> FileTree:
        """Count, size and digest the files under ``uri`` (``runs:/``, ``models:/``, ``mlflow-artifacts:/``)."""
        root = self.resolve_artifact_path(uri)
        files = self._files_at(root)
        if len(files) == 1 and files[0][0] == "":  # the URI names one file: digested under its own name
            root, name = root.rsplit("/", 1) if "/" in root else ("", root)
            files = [(name, files[0][1])]
        size = sum(s for _, s in files)
        if len(files) > MAX_DIGEST_FILES or size > MAX_DIGEST_BYTES:
            return FileTree(len(files), size, None)
        return FileTree(len(files), size, tree_digest((p, self._file_sha256(_join(root, p))) for p, _ in files))

    def _files_at(self, proxy_path: str) -> list[tuple[str, int]]:
        """(path under ``proxy_path``, bytes) of every file there; ``[("", bytes)]`` when it is a file."""
        files: list[tuple[str, int]] = []
        self._walk(proxy_path, "", files)
        if files or "/" not in proxy_path.strip("/"):
            return files
        parent, name = proxy_path.strip("/").rsplit("/", 1)
        return [
            ("", e.size or 0) for e in self._list_proxy(parent) if not e.is_dir and e.path.rsplit("/", 1)[-1] == name
        ]

    def _walk(self, root: str, prefix: str, out: list[tuple[str, int]]) -> None:
        for entry in self._list_proxy(_join(root, prefix)):
            path = _join(prefix, entry.path.rsplit("/", 1)[-1])
            if entry.is_dir:
                self._walk(root, path, out)
            else:
                out.append((path, entry.size or 0))
            if len(out) > MAX_DIGEST_FILES:
                return

    def _file_sha256(self, proxy_path: str) -> str:
        url = f"{ARTIFACT_PROXY}/{urllib.parse.quote(proxy_path)}"
        sha = [hashlib.sha256()]

        def fetch(_: float | None) -> httpx.Response:
            sha[0] = hashlib.sha256()  # a retry starts the digest again
            with self._http.stream("GET", url) as response:
                if response.is_success:
                    for chunk in response.iter_bytes(_CHUNK_BYTES):
                        sha[0].update(chunk)
                else:
                    response.read()
                return response

        self._send(fetch, f"read {proxy_path} to digest it", idempotent=True)
        return sha[0].hexdigest()
