"""Slipway's digest over a model's files, one function for the operator and for the pods.

The digest is ``sha256:<hex>`` of the lines ``<sha256 hex of a file>  <path>`` of every file,
sorted by path (bytes), each line ending in a newline: what
``find . -type f | cut -c3- | LC_ALL=C sort | xargs sha256sum | sha256sum`` prints in the model's
directory. The operator computes it over the files MLflow lists for a version's source when it
registers the version (:mod:`slipway.mlflow.sources`); the fetch-model init container of a
serving pod computes it over the files it downloaded (:func:`directory_digest`) and refuses them
when the two differ.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from pathlib import Path

DIGEST_PATTERN = re.compile(r"sha256:[0-9a-f]{64}")
# The digest a serving pod's fetch-model container checks every file against, set by the operator
# from the ModelArtifact's status.filesDigest (held in Kubernetes, not read from MLflow).
FILES_DIGEST_ENV = "SLIPWAY_MODEL_FILES_DIGEST"
_BLOCK = 1 << 20


def tree_digest(files: Iterable[tuple[str, str]]) -> str:
    """``sha256:<hex>`` over ``(path, sha256 hex of its bytes)`` pairs, as the module says."""
    sha = hashlib.sha256()
    for path, hexdigest in sorted(files, key=lambda f: f[0].encode()):
        sha.update(f"{hexdigest}  {path}\n".encode())
    return f"sha256:{sha.hexdigest()}"


def is_digest(text: str | None) -> bool:
    """Whether ``text`` is a digest as Slipway writes it (``sha256:`` and 64 lowercase hex digits)."""
    return bool(text) and DIGEST_PATTERN.fullmatch(str(text)) is not None


def file_sha256(path: Path) -> str:
    """The sha256 hex of a local file's bytes."""
    sha = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(_BLOCK), b""):
            sha.update(block)
    return sha.hexdigest()


def local_files(root: Path, leave_out: Iterable[str] = ()) -> list[Path]:
    """Every file under ``root`` (a directory), or ``[root]`` when it is a file."""
    if root.is_file():
        return [root]
    skipped = set(leave_out)
    return sorted(p for p in root.rglob("*") if p.is_file() and p.relative_to(root).as_posix() not in skipped)


def directory_digest(root: Path, leave_out: Iterable[str] = ()) -> tuple[str, int]:
    """(the digest of the files under ``root``, how many): paths relative to ``root``; a ``root``
    that is a file is digested under its own name, as the operator digests a URI naming one file.
    ``leave_out``: relative paths not counted (a receipt written beside the files)."""
    files = local_files(root, leave_out)
    if root.is_file():
        return tree_digest([(root.name, file_sha256(root))]), 1
    return tree_digest((p.relative_to(root).as_posix(), file_sha256(p)) for p in files), len(files)
