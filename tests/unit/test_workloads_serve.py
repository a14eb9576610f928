"""The serving workload's pure parts: request parsing, fault switches, metric names."""

from __future__ import annotations

import json

import pytest

from slipway.workloads import serve
from slipway.workloads.common import ConfigError


def _body(payload: object) -> bytes:
    return json.dumps(payload).encode()


def test_parse_instances_accepts_rows_of_64_pixels() -> None:
    array = serve.parse_instances(_body({"instances": [[0] * 64, [16.0] * 64]}))
    assert array.shape == (2, 64) and str(array.dtype) == "float32"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"not json", "body is not JSON"),
        (_body([1, 2]), "expected"),
        (_body({"instances": []}), "at least one instance"),
        (_body({"instances": [[1, 2, 3]]}), "must hold 64 numbers"),
        (_body({"instances": [[0] * 64, [0] * 63]}), "lists of numbers"),
        (_body({"instances": [["a"] * 64]}), "lists of numbers"),
        (_body({"instances": [[0] * 64] * (serve.MAX_INSTANCES + 1)}), "at most"),
        (b'{"instances": [[NaN' + b", 0" * 63 + b"]]}", "finite"),
    ],
)
def test_parse_instances_explains_bad_requests(body: bytes, message: str) -> None:
    with pytest.raises(serve.BadRequest, match=message):
        serve.parse_instances(body)


def test_faults_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLIPWAY_FAULT_ERROR_RATE", "0.3")
    monkeypatch.setenv("SLIPWAY_FAULT_LATENCY_SECONDS", "0.25")
    monkeypatch.setenv("SLIPWAY_FAULT_CRASH_ON_START", "1")
    assert serve.Faults.from_env() == serve.Faults(0.3, 0.25, True)


def test_no_faults_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SLIPWAY_FAULT_ERROR_RATE", "SLIPWAY_FAULT_LATENCY_SECONDS", "SLIPWAY_FAULT_CRASH_ON_START"):
        monkeypatch.delenv(name, raising=False)
    faults = serve.Faults.from_env()
    assert not faults.active() and not faults.fails(0.0)


def test_error_rate_out_of_range_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLIPWAY_FAULT_ERROR_RATE", "30")
    with pytest.raises(ConfigError, match="SLIPWAY_FAULT_ERROR_RATE"):
        serve.Faults.from_env()


@pytest.mark.parametrize(
    ("rate", "draws", "failures"), [(0.0, [0.0, 0.5], 0), (0.3, [0.1, 0.29, 0.3, 0.9], 2), (1.0, [0.0, 0.999], 2)]
)
def test_error_rate_decides_by_draw(rate: float, draws: list[float], failures: int) -> None:
    assert sum(serve.Faults(error_rate=rate).fails(d) for d in draws) == failures


@pytest.mark.parametrize(
    ("uri", "version"),
    [
        ("models:/digits/3", "3"),
        ("models:/digits/3/", "3"),
        ("runs:/abc/model", "unknown"),
        ("models:/m-abc", "unknown"),
    ],
)
def test_model_version_label(monkeypatch: pytest.MonkeyPatch, uri: str, version: str) -> None:
    monkeypatch.delenv("SLIPWAY_MODEL_VERSION", raising=False)
    assert serve.model_version_label(uri) == version


def test_model_version_label_from_env_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLIPWAY_MODEL_VERSION", "7")
    assert serve.model_version_label("models:/digits/3") == "7"


def test_metrics_carry_the_names_the_slipway_preset_queries() -> None:
    metrics = serve.ServingMetrics()
    metrics.requests.labels(code="500").inc()
    metrics.duration.observe(0.01)
    metrics.time_to_first_token.observe(0.002)
    metrics.time_per_output_token.observe(0.0005)
    metrics.model_info.labels(version="3", uri="models:/digits/3").set(1)
    text = metrics.render().decode()
    for line in (
        'slipway_requests_total{code="500"} 1.0',
        "slipway_request_duration_seconds_bucket",
        "slipway_time_to_first_token_seconds_bucket",
        "slipway_time_per_output_token_seconds_bucket",
        "slipway_requests_in_flight 0.0",
        'slipway_model_info{uri="models:/digits/3",version="3"} 1.0',
    ):
        assert line in text
    assert "_created" not in text
