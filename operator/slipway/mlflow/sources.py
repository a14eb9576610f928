"""Where a model to register lives, found as MLflow's own client finds it, and its files' digest.

A run's model is the run's artifacts at the artifact path (how MLflow 2 and Slipway's trainer
log it), else the LoggedModel of that name whose source run is that run (how MLflow 3's
``log_model(name=...)`` logs it): ``mlflow.register_model("runs:/<run>/<path>")`` looks in the
same two places. A LoggedModel is registered as MLflow 3 registers it: source
``models:/<model_id>`` with the ``model_id`` field.

The digest over a model's files is :func:`slipway.mlflow.digests.tree_digest`. A pass of the
operator digests a source within a time budget (:meth:`ModelSources.digest_within`): what it has
listed and read is kept in a :class:`Digesting` the next pass carries on from.
"""

from __future__ import annotations

import hashlib
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from slipway.mlflow.artifacts import ARTIFACT_PROXY, Artifacts, _join
from slipway.mlflow.digests import tree_digest
from slipway.mlflow.errors import MlflowError
from slipway.mlflow.logged_models import LoggedModel, LoggedModels, newest
from slipway.mlflow.tracking import Run
from slipway.mlflow.uris import run_artifact_uri

MAX_DIGEST_FILES = 10_000
HAS_FILES_LISTINGS = 20  # directories listed to find a model's first file
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


class TooManyFiles(Exception):
    """A source holds more files, or directories, than the operator digests."""

    def __init__(self, what: str, limit: int) -> None:
        super().__init__(f"more than {limit} {what}")
        self.what, self.limit = what, limit


class SourceChanged(Exception):
    """A file's bytes are not the size MLflow listed for it: the files changed while they were read."""


@dataclass
class Digesting:
    """A digest over the files of ``uri`` in progress, carried from one pass to the next: the
    directories still to list, the files listed (path, listed bytes) and the sha256 of those read."""

    uri: str
    owner: str = ""  # the uid of the object it is for
    root: str | None = None  # the proxy path, once resolved
    dirs: list[str] = field(default_factory=lambda: [""])  # still to list, relative to root
    listed: int = 0  # directories listed
    files: list[tuple[str, int | None]] = field(default_factory=list)
    hashes: dict[str, str] = field(default_factory=dict)
    bytes_read: int = 0

    def progress(self) -> str:
        """Where it is, in words: ``digesting 3,200/10,000 files (1,234,567 bytes read)``."""
        if self.dirs:
            return f"listing the files: {self.listed:,} directories listed, {len(self.files):,} files found"
        return f"digesting {len(self.hashes):,}/{len(self.files):,} files ({self.bytes_read:,} bytes read)"

    @property
    def size(self) -> int:
        return sum(s or 0 for _, s in self.files)


def looked_for(run_id: str, path: str) -> str:
    """What a run's model was looked for as, in words for a condition."""
    return (
        f"run {run_id}'s artifacts at {path!r} (MLflow 2, Slipway's trainer) and a LoggedModel named "
        f"{path!r} whose source run is {run_id} (MLflow 3's log_model(name={path!r}))"
    )


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
            return self._holds_a_file(self.resolve_artifact_path(uri))
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

    def digest_within(
        self, work: Digesting, seconds: float, max_files: int, clock: Callable[[], float] = time.monotonic
    ) -> FileTree | None:
        """Carry ``work`` on for about ``seconds`` (at least one request): the tree once every file
        is read (its digest None past MAX_DIGEST_BYTES), else None and ``work`` holds the progress.
        TooManyFiles past ``max_files`` files or directories; SourceChanged when a file is not the
        size listed (no file is read past its listed size)."""
        deadline = clock() + seconds
        if work.root is None:
            work.root = self.resolve_artifact_path(work.uri)
        while work.dirs:
            self._list_next(work, max_files)
            if clock() >= deadline:
                return None
        if not work.files and work.listed == 1:  # nothing under it: the URI may name one file
            single = self._single_file(work.root)
            if single:
                work.root, name = work.root.rsplit("/", 1) if "/" in work.root else ("", work.root)
                work.files = [(name, single[0][1])]
        if work.size > MAX_DIGEST_BYTES:
            return FileTree(len(work.files), work.size, None)
        for path, size in work.files:
            if path in work.hashes:
                continue
            if clock() >= deadline:
                return None
            limit = size if size is not None else MAX_DIGEST_BYTES - work.bytes_read
            work.hashes[path], read = self._bounded_sha256(_join(work.root, path), limit, size is not None)
            work.bytes_read += read
        return FileTree(len(work.files), work.size, tree_digest(work.hashes.items()))

    def _list_next(self, work: Digesting, max_files: int) -> None:
        """List one directory of ``work`` (one request)."""
        assert work.root is not None
        prefix = work.dirs[-1]
        if work.listed + 1 > max_files:
            raise TooManyFiles("directories", max_files)
        entries = self._list_proxy(_join(work.root, prefix))  # MLflow unavailable: listed again next pass
        work.dirs.pop()
        work.listed += 1
        for entry in entries:
            path = _join(prefix, entry.path.rsplit("/", 1)[-1])
            if entry.is_dir:
                work.dirs.append(path)
            else:
                work.files.append((path, entry.size))
        if len(work.files) > max_files:
            raise TooManyFiles("files", max_files)

    def _holds_a_file(self, proxy_path: str) -> bool:
        """Whether a file is at or under ``proxy_path``: directories listed until the first file is
        found, at most HAS_FILES_LISTINGS of them (past that it counts as holding one: the digest,
        a budget of each pass at a time, counts them all), so that every pass reads a few listings."""
        pending, listed = [""], 0
        while pending and listed < HAS_FILES_LISTINGS:
            prefix = pending.pop()
            listed += 1
            entries = self._list_proxy(_join(proxy_path, prefix))
            if any(not e.is_dir for e in entries):
                return True
            pending += [_join(prefix, e.path.rsplit("/", 1)[-1]) for e in entries if e.is_dir]
        return bool(pending) or (listed == 1 and bool(self._single_file(proxy_path)))

    def _files_at(self, proxy_path: str) -> list[tuple[str, int]]:
        """(path under ``proxy_path``, bytes) of every file there; ``[("", bytes)]`` when it is a file."""
        files: list[tuple[str, int]] = []
        self._walk(proxy_path, "", files)
        return files or self._single_file(proxy_path)

    def _single_file(self, proxy_path: str) -> list[tuple[str, int]]:
        """``[("", bytes)]`` when ``proxy_path`` names a file (listed in its parent), else []."""
        if "/" not in proxy_path.strip("/"):
            return []
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
        return self._bounded_sha256(proxy_path, MAX_DIGEST_BYTES, exact=False)[0]

    def _bounded_sha256(self, proxy_path: str, limit: int, exact: bool) -> tuple[str, int]:
        """(sha256 hex, bytes) of a file, reading at most ``limit`` bytes and one more: SourceChanged
        past it, or short of it when ``exact`` (the size MLflow listed)."""
        url = f"{ARTIFACT_PROXY}/{urllib.parse.quote(proxy_path)}"
        sha, read = [hashlib.sha256()], [0]

        def fetch(_: float | None) -> httpx.Response:
            sha[0], read[0] = hashlib.sha256(), 0  # a retry starts the digest again
            with self._http.stream("GET", url) as response:
                if response.is_success:
                    for chunk in response.iter_bytes(_CHUNK_BYTES):
                        read[0] += len(chunk)
                        if read[0] > limit:
                            raise SourceChanged(f"{proxy_path}: more bytes than the {limit} MLflow listed")
                        sha[0].update(chunk)
                else:
                    response.read()
                return response

        self._send(fetch, f"read {proxy_path} to digest it", idempotent=True)
        if exact and read[0] != limit:
            raise SourceChanged(f"{proxy_path}: {read[0]} bytes, not the {limit} MLflow listed")
        return sha[0].hexdigest(), read[0]
