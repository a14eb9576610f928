"""Checkpoint files: atomic writes, newest-first resume, pruning, torn files."""

from __future__ import annotations

from pathlib import Path

import pytest

from slipway.workloads import checkpoints


def test_save_then_load_newest(tmp_path: Path) -> None:
    for step in (5, 10, 15):
        checkpoints.save_checkpoint(tmp_path, step, {"weights": step})
    loaded = checkpoints.load_newest(tmp_path)
    assert loaded is not None
    checkpoint, state = loaded
    assert checkpoint.step == 15 and checkpoint.path.name == "ckpt-00000015.pkl"
    assert state == {"weights": 15}


def test_no_directory_or_no_checkpoint_means_a_fresh_start(tmp_path: Path) -> None:
    assert checkpoints.load_newest(tmp_path / "missing") is None
    (tmp_path / ".slipway-failed-at-step-3").write_text("")
    (tmp_path / "notes.txt").write_text("")
    assert checkpoints.load_newest(tmp_path) is None


def test_steps_order_numerically_not_by_mtime(tmp_path: Path) -> None:
    checkpoints.save_checkpoint(tmp_path, 100, "late")
    checkpoints.save_checkpoint(tmp_path, 20, "early")  # written last, still older
    assert [c.step for c in checkpoints.list_checkpoints(tmp_path)] == [20, 100]
    assert checkpoints.load_newest(tmp_path)[1] == "late"  # type: ignore[index]


def test_a_torn_newest_checkpoint_falls_back_to_the_previous(tmp_path: Path) -> None:
    checkpoints.save_checkpoint(tmp_path, 5, "good")
    (tmp_path / checkpoints.checkpoint_name(10)).write_bytes(b"\x80\x04 torn")
    loaded = checkpoints.load_newest(tmp_path)
    assert loaded is not None and loaded[0].step == 5 and loaded[1] == "good"


def test_a_checkpoint_whose_name_and_content_disagree_is_skipped(tmp_path: Path) -> None:
    saved = checkpoints.save_checkpoint(tmp_path, 5, "five")
    saved.path.rename(tmp_path / checkpoints.checkpoint_name(50))
    assert checkpoints.load_newest(tmp_path) is None


def test_prune_keeps_the_newest_and_removes_stale_temporaries(tmp_path: Path) -> None:
    for step in range(1, 6):
        checkpoints.save_checkpoint(tmp_path, step, step)
    stale = tmp_path / ".ckpt-00000006.pkl.abc.tmp"
    stale.write_bytes(b"half")
    removed = checkpoints.prune_checkpoints(tmp_path, keep=2)
    assert sorted(p.name for p in removed) == sorted([checkpoints.checkpoint_name(s) for s in (1, 2, 3)] + [stale.name])
    assert [c.step for c in checkpoints.list_checkpoints(tmp_path)] == [4, 5]
    with pytest.raises(ValueError):
        checkpoints.prune_checkpoints(tmp_path, keep=0)


def test_save_leaves_no_temporary_behind(tmp_path: Path) -> None:
    checkpoints.save_checkpoint(tmp_path, 1, "x")
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt-00000001.pkl"]
