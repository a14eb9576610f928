"""Fetch a model version's files from MLflow into a directory, digest checked, before a server starts.

    python -m slipway.workloads.fetch [--model-uri URI] [--dest DIR] [--cache DIR]

The init container of an InferenceDeployment with ``spec.modelLoad`` (as KServe's storage
initializer is): the server container then reads the files, read-only, at ``--dest``, whatever
its image. For a ``models:/name/version`` (or ``@alias``) URI the files are those of the
version's source.

Every file is checked against ``SLIPWAY_MODEL_FILES_DIGEST``, Slipway's digest over a version's
files (:mod:`slipway.mlflow.digests`), which the operator sets from the ModelArtifact's
``status.filesDigest``: held in Kubernetes, so that files re-uploaded to MLflow after validation
are refused. Without it, the version's ``slipway.dev/source-digest`` tag is that digest (MLflow's
word); without either, the model file is checked against ``SLIPWAY_MODEL_DIGEST``, else the
version's ``slipway.dev/digest`` tag (a quantized version's); each tag is also read under the name
earlier versions gave it (``slipway.source.digest``, ``slipway.digest``). A mismatch exits 2 and
leaves nothing at ``--dest``: a server never starts on files that are not the version's.

With ``--cache`` (a PersistentVolumeClaim shared by the pods), a version already in the cache
with the right digest is copied from there instead of downloaded; one that is not is
downloaded into the cache first.

Environment (each flag falls back to it):
  MLFLOW_TRACKING_URI     the tracking server (required)
  SLIPWAY_MODEL_URI       --model-uri
  SLIPWAY_MODEL_PATH      --dest (default /models/current)
  SLIPWAY_MODEL_CACHE     --cache
  SLIPWAY_MODEL_FILES_DIGEST  Slipway's digest every file must have (default: the version's
                          slipway.dev/source-digest tag)
  SLIPWAY_MODEL_DIGEST    the model file's digest, checked when there is no files digest
                          (default: the version's slipway.dev/digest tag)

Writes ``slipway-fetch.json`` beside the files: uri, version, digest, bytes, seconds, and
whether the cache answered. Exit codes: 0, 2 (bad configuration, digest mismatch), 75 (MLflow
unavailable: retried by the pod's restart policy).
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from slipway.mlflow import MlflowClient, ModelVersion, parse_model_uri
from slipway.mlflow.digests import FILES_DIGEST_ENV, directory_digest, is_digest
from slipway.mlflow.tags import DIGEST, SOURCE_DIGEST
from slipway.workloads.common import (
    MODEL_FILE,
    ConfigError,
    env_str,
    file_digest,
    mlflow_client,
    run_workload,
    setup_logging,
)

log = logging.getLogger("slipway.workloads.fetch")

RECEIPT = "slipway-fetch.json"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m slipway.workloads.fetch", description=__doc__.split("\n")[0])
    parser.add_argument("--model-uri", default=env_str("SLIPWAY_MODEL_URI"))
    parser.add_argument("--dest", default=env_str("SLIPWAY_MODEL_PATH", "/models/current"))
    parser.add_argument("--cache", default=env_str("SLIPWAY_MODEL_CACHE"))
    args = parser.parse_args(argv)
    if not args.model_uri:
        raise ConfigError("no model to fetch: pass --model-uri or set SLIPWAY_MODEL_URI")
    return args


def _cache_dir(cache: Path, name: str, version: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name)
    return cache / safe / version


def _empty(dest: Path) -> None:
    """Remove what ``dest`` holds (it may be a mount point: the directory itself stays)."""
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.iterdir():
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old)
        else:
            old.unlink()


def _copy_tree(source: Path, dest: Path) -> int:
    """Copy the files of ``source`` into ``dest`` (emptied first); returns the bytes copied."""
    _empty(dest)
    total = 0
    for path in sorted(source.rglob("*")):
        target = dest / path.relative_to(source)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        elif path.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
            total += path.stat().st_size
    return total


@dataclass(frozen=True)
class Expected:
    """What the fetched files must be: Slipway's digest over every file (and where it came from), else
    the model file's digest; neither: not checked."""

    files: str | None = None
    origin: str = ""  # from the pod spec, or from the MLflow tag
    model_file: str | None = None

    @staticmethod
    def of(version: ModelVersion | None) -> Expected:
        """From the pod spec (SLIPWAY_MODEL_FILES_DIGEST), else the version's tags."""
        files = env_str(FILES_DIGEST_ENV)
        if files is not None:
            if not is_digest(files):
                raise ConfigError(f"{FILES_DIGEST_ENV} is {files[:80]!r}, not sha256:<64 hex digits>")
            return Expected(files, "from the pod spec")
        tags = version.tags if version is not None else {}
        files_digest = SOURCE_DIGEST.read(tags)
        if is_digest(files_digest):
            return Expected(files_digest, f"from MLflow tag {SOURCE_DIGEST.where(tags)}")
        return Expected(model_file=env_str("SLIPWAY_MODEL_DIGEST") or DIGEST.read(tags) or None)


def verify_files(root: Path, expected: str, origin: str = "expected") -> str:
    """Slipway's digest over every file under ``root`` (the receipt left out); ConfigError, naming
    both digests, unless it is ``expected``."""
    digest, count = directory_digest(root, leave_out=[RECEIPT])
    if digest != expected:
        raise ConfigError(
            f"digest mismatch: the {count} files fetched are {digest}, not {expected}, the validated "
            f"version's ({origin}); the server is not started"
        )
    return digest


def _verified(model_dir: Path, want: Expected) -> str:
    """The digest of the files in ``model_dir``; ConfigError if they are not what ``want`` says."""
    if want.files:
        return verify_files(model_dir, want.files, want.origin)
    files = [model_dir / MODEL_FILE] if (model_dir / MODEL_FILE).is_file() else sorted(model_dir.rglob("*.onnx"))
    if len(files) != 1:
        raise ConfigError(f"the model holds {len(files)} .onnx files; expected one {MODEL_FILE}")
    digest = file_digest(files[0])
    if want.model_file and digest != want.model_file:
        raise ConfigError(f"digest mismatch: the files are {digest}, the version records {want.model_file}")
    return digest


def _download(client: MlflowClient, uri: str, into: Path) -> Path:
    """Download ``uri`` into ``into``; the directory holding what it names (a file: alone in it)."""
    local = client.download_artifacts(uri, into)
    return local.parent if local.is_file() else local


def _version(client: MlflowClient, uri: str) -> ModelVersion | None:
    """The registered version a ``models:/`` URI names (None for another URI)."""
    named = parse_model_uri(uri)
    if named is None:
        return None
    if named.alias is not None:
        version = client.get_version_by_alias(named.name, named.alias)
    else:
        version = client.get_model_version(named.name, named.registered_version or "")
    if version is None:
        raise ConfigError(f"{uri}: the alias points at no version")
    return version


def fetch(args: argparse.Namespace) -> dict[str, object]:
    """Fetch, or leave ``--dest`` empty: a server never starts on files that are not the version's."""
    try:
        return _fetch(args)
    except ConfigError:
        _empty(Path(args.dest))
        raise


def _fetch(args: argparse.Namespace) -> dict[str, object]:
    started = time.monotonic()
    dest = Path(args.dest)
    client = mlflow_client()
    named = parse_model_uri(args.model_uri)
    version = _version(client, args.model_uri)
    source = version.uri if version is not None else args.model_uri
    want = Expected.of(version)
    if want.files:
        log.info("every file of %s is checked against %s, from %s", args.model_uri, want.files, want.origin)
    elif not want.model_file:
        log.warning("%s records no digest (tag %s): the files are not checked", args.model_uri, DIGEST.name)
    cached = None
    if args.cache and named is not None and version is not None:
        cached = _cache_dir(Path(args.cache), named.name, version.version)
        cached.parent.mkdir(parents=True, exist_ok=True)
    from_cache = False
    if cached is not None and cached.is_dir():
        try:
            _verified(cached, want)
            from_cache = True
        except ConfigError as exc:
            log.warning("cache %s is not usable (%s): downloading again", cached, exc)
            shutil.rmtree(cached, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix=".slipway-fetch-", dir=cached.parent if cached else None) as tmp:
        origin = cached
        if not from_cache:
            origin = _download(client, source, Path(tmp) / "download")
            _verified(origin, want)
            if cached is not None:
                shutil.copytree(origin, Path(tmp) / "complete")
                shutil.rmtree(cached, ignore_errors=True)
                (Path(tmp) / "complete").rename(cached)  # a version appears in the cache whole or not at all
                origin = cached
        assert origin is not None
        size = _copy_tree(origin, dest)
        digest = _verified(dest, want)
    receipt = {
        "uri": args.model_uri,
        "version": version.version if version else None,
        "digest": digest,
        "bytes": size,
        "seconds": round(time.monotonic() - started, 3),
        "fromCache": from_cache,
    }
    (dest / RECEIPT).write_text(json.dumps(receipt) + "\n")
    log.info(
        "fetched %s (%s, %d bytes%s) into %s in %.2fs",
        args.model_uri,
        digest,
        size,
        ", from the cache" if from_cache else "",
        dest,
        receipt["seconds"],
    )
    return receipt


def main(argv: list[str] | None = None) -> int:
    setup_logging()
    return run_workload(lambda: fetch(parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
