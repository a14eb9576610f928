"""Shared workload pieces: configuration parsing, the data split, results, percentiles."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from slipway.workloads import common
from slipway.workloads.common import ConfigError


@pytest.mark.parametrize("q", [0, 5, 50, 90, 95, 99, 100])
@pytest.mark.parametrize("samples", [[3.0], [1.0, 2.0], [0.5, 0.1, 0.9, 0.3, 0.7], list(np.linspace(0, 1, 101))])
def test_percentile_matches_numpy_linear(samples: list[float], q: float) -> None:
    assert common.percentile(samples, q) == pytest.approx(float(np.percentile(samples, q)))


def test_percentile_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        common.percentile([], 50)
    with pytest.raises(ValueError):
        common.percentile([1.0], 101)


@pytest.mark.parametrize(
    ("raw", "expected"), [(None, False), ("1", True), ("true", True), ("YES", True), ("0", False), ("off", False)]
)
def test_env_flag(monkeypatch: pytest.MonkeyPatch, raw: str | None, expected: bool) -> None:
    if raw is None:
        monkeypatch.delenv("SLIPWAY_X", raising=False)
    else:
        monkeypatch.setenv("SLIPWAY_X", raw)
    assert common.env_flag("SLIPWAY_X") is expected


@pytest.mark.parametrize(
    ("reader", "raw", "message"),
    [
        (lambda: common.env_int("SLIPWAY_X", 1), "ten", "SLIPWAY_X='ten' is not an integer"),
        (lambda: common.env_int("SLIPWAY_X", 1, minimum=1), "0", "SLIPWAY_X=0 must be at least 1"),
        (lambda: common.env_float("SLIPWAY_X", 0.0, 0.0, 1.0), "1.5", "SLIPWAY_X=1.5 must be a number in"),
        (lambda: common.env_float("SLIPWAY_X", 0.0), "nan", "SLIPWAY_X=nan"),
        (lambda: common.env_flag("SLIPWAY_X"), "maybe", "SLIPWAY_X='maybe' is not a boolean"),
    ],
)
def test_bad_environment_names_the_variable(monkeypatch: pytest.MonkeyPatch, reader, raw: str, message: str) -> None:
    monkeypatch.setenv("SLIPWAY_X", raw)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        reader()


def test_env_defaults_when_unset_or_blank(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLIPWAY_X", "  ")
    assert common.env_int("SLIPWAY_X", 7) == 7
    assert common.env_float("SLIPWAY_X", 0.5) == 0.5
    assert common.env_str("SLIPWAY_X", "d") == "d"


def test_result_path_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLIPWAY_RESULT_PATH", "/out/env.json")
    assert common.result_path("/out/flag.json") == Path("/out/flag.json")
    assert common.result_path(None) == Path("/out/env.json")
    monkeypatch.delenv("SLIPWAY_RESULT_PATH")
    assert common.result_path(None) == Path("slipway-result.json")


def test_write_json_atomic_replaces_and_leaves_no_temporaries(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "result.json"
    common.write_json_atomic(target, {"sizeBytes": 1})
    common.write_json_atomic(target, {"sizeBytes": 2, "digest": "sha256:ab"})
    assert json.loads(target.read_text()) == {"sizeBytes": 2, "digest": "sha256:ab"}
    assert [p.name for p in target.parent.iterdir()] == ["result.json"]


def test_file_digest_is_sha256_of_the_bytes(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    path.write_bytes(b"abc")
    assert common.file_digest(path) == "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_digits_split_is_fixed_stratified_and_disjoint() -> None:
    first, second = common.digits_split(), common.digits_split()
    assert np.array_equal(first.test_x, second.test_x) and np.array_equal(first.train_y, second.train_y)
    assert first.train_x.shape[1] == common.N_FEATURES and first.train_x.dtype == np.float32
    assert len(first.test_y) == pytest.approx(1797 * common.TEST_FRACTION, abs=1)
    assert set(first.test_y.tolist()) == set(common.CLASSES)
    train_rows = {row.tobytes() for row in first.train_x}
    overlap = sum(row.tobytes() in train_rows for row in first.test_x)
    assert overlap < 5  # digits has a few duplicate images; the split itself shares no index


def test_read_metadata_beside_the_model(tmp_path: Path) -> None:
    model = tmp_path / common.MODEL_FILE
    model.write_bytes(b"")
    assert common.read_metadata(model) == {}
    (tmp_path / common.METADATA_FILE).write_text('{"quantization": "fp16"}')
    assert common.read_metadata(model) == {"quantization": "fp16"}
