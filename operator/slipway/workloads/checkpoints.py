"""Checkpoints in ``$SLIPWAY_CHECKPOINT_DIR``: atomic writes, newest-first resume, pruning.

This is the training side of Slipway's checkpoint contract (DESIGN.md §1, TrainingRun):
write checkpoints into the directory the operator mounts from a PersistentVolumeClaim, and on
start resume from the newest one, so a restarted or preempted pod continues instead of
starting over.

Files are ``ckpt-<step, 8 digits>.pkl``. Each is written to a temporary file in the same
directory, flushed to disk and renamed into place, so a pod killed mid-write leaves either
the previous checkpoint or the new one, never a torn file. A checkpoint that cannot be read
anyway (disk trouble, a format from another version) is skipped for the next older one.

Checkpoints are pickles: load only directories that your own jobs write.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
_NAME = re.compile(r"^ckpt-(\d{8})\.pkl$")


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint on disk: the last completed step and its file."""

    step: int
    path: Path


def checkpoint_name(step: int) -> str:
    return f"ckpt-{step:08d}.pkl"


def list_checkpoints(directory: Path) -> list[Checkpoint]:
    """The checkpoints in ``directory``, oldest first; other files (temporaries, markers) are ignored."""
    if not directory.is_dir():
        return []
    found = []
    for entry in directory.iterdir():
        match = _NAME.match(entry.name)
        if match and entry.is_file():
            found.append(Checkpoint(step=int(match.group(1)), path=entry))
    return sorted(found, key=lambda c: c.step)


def save_checkpoint(directory: Path, step: int, state: Any) -> Checkpoint:
    """Atomically write ``state`` as the checkpoint of ``step``."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / checkpoint_name(step)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            pickle.dump({"format": FORMAT_VERSION, "step": step, "state": state}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_directory(directory)
    return Checkpoint(step=step, path=target)


def load_newest(directory: Path) -> tuple[Checkpoint, Any] | None:
    """The newest readable checkpoint and its state, or None when there is none."""
    for checkpoint in reversed(list_checkpoints(directory)):
        try:
            with checkpoint.path.open("rb") as f:
                payload = pickle.load(f)
            if payload.get("format") != FORMAT_VERSION or payload.get("step") != checkpoint.step:
                raise ValueError(f"format {payload.get('format')}, step {payload.get('step')}")
        except Exception as exc:
            log.warning("skipping unreadable checkpoint %s: %s", checkpoint.path, exc)
            continue
        return checkpoint, payload["state"]
    return None


def prune_checkpoints(directory: Path, keep: int) -> list[Path]:
    """Delete all but the newest ``keep`` checkpoints (and stale temporaries); returns what went."""
    if keep < 1:
        raise ValueError(f"keep={keep}: at least one checkpoint must stay")
    removed = [c.path for c in list_checkpoints(directory)[:-keep]]
    if directory.is_dir():
        removed += [p for p in directory.glob(".ckpt-*.tmp") if p.is_file()]
    for path in removed:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    return removed


def _fsync_directory(directory: Path) -> None:
    # Make the rename itself durable; not every filesystem allows opening a directory.
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
