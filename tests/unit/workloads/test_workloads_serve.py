"""The serving workload's pure parts: request parsing, fault switches, metric names."""

from __future__ import annotations

import json

import pytest

from slipway.mlflow import ModelVersion
from slipway.workloads import servehttp
from slipway.workloads.common import ConfigError
from slipway.workloads.faults import Faults, resolve_faults
from slipway.workloads.modelload import model_version_label, registry_version
from slipway.workloads.servemetrics import ServingMetrics


def _body(payload: object) -> bytes:
    return json.dumps(payload).encode()


def test_parse_instances_accepts_rows_of_64_pixels() -> None:
    array = servehttp.parse_instances(_body({"instances": [[0] * 64, [16.0] * 64]}))
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
        (_body({"instances": [[0] * 64] * (servehttp.MAX_INSTANCES + 1)}), "at most"),
        (b'{"instances": [[NaN' + b", 0" * 63 + b"]]}", "finite"),
    ],
)
def test_parse_instances_explains_bad_requests(body: bytes, message: str) -> None:
    with pytest.raises(servehttp.BadRequest, match=message):
        servehttp.parse_instances(body)


def test_faults_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLIPWAY_FAULT_ERROR_RATE", "0.3")
    monkeypatch.setenv("SLIPWAY_FAULT_LATENCY_SECONDS", "0.25")
    monkeypatch.setenv("SLIPWAY_FAULT_CRASH_ON_START", "1")
    assert Faults.from_env() == Faults(0.3, 0.25, True)


def test_no_faults_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SLIPWAY_FAULT_ERROR_RATE", "SLIPWAY_FAULT_LATENCY_SECONDS", "SLIPWAY_FAULT_CRASH_ON_START"):
        monkeypatch.delenv(name, raising=False)
    faults = Faults.from_env()
    assert not faults.active() and not faults.fails(0.0)


def test_error_rate_out_of_range_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLIPWAY_FAULT_ERROR_RATE", "30")
    with pytest.raises(ConfigError, match="SLIPWAY_FAULT_ERROR_RATE"):
        Faults.from_env()


@pytest.mark.parametrize(
    ("rate", "draws", "failures"), [(0.0, [0.0, 0.5], 0), (0.3, [0.1, 0.29, 0.3, 0.9], 2), (1.0, [0.0, 0.999], 2)]
)
def test_error_rate_decides_by_draw(rate: float, draws: list[float], failures: int) -> None:
    assert sum(Faults(error_rate=rate).fails(d) for d in draws) == failures


# --------------------------------------------------------------------------- faults carried by the model

ENV = {"SLIPWAY_FAULT_ERROR_RATE": "0.5", "SLIPWAY_FAULT_LATENCY_SECONDS": "0.1", "SLIPWAY_FAULT_CRASH_ON_START": "0"}
TAGS = {
    "slipway.dev/fault-errorRate": "0.25",
    "slipway.dev/fault-latencySeconds": "0.2",
    "slipway.dev/fault-crashOnStart": "1",
}
METADATA = {"errorRate": 0.75, "latencySeconds": 0.3, "crashOnStart": True}


@pytest.mark.parametrize(
    ("env", "tags", "metadata", "expected"),
    [
        ({}, {}, {}, Faults()),
        (ENV, TAGS, METADATA, Faults(0.5, 0.1, False)),  # env wins, even to switch a fault off
        ({}, TAGS, METADATA, Faults(0.25, 0.2, True)),  # then the version's tags
        ({}, {}, METADATA, Faults(0.75, 0.3, True)),  # then the model's metadata
        # Each switch on its own: one from each place.
        (
            {"SLIPWAY_FAULT_LATENCY_SECONDS": "0.1"},
            {"slipway.dev/fault-errorRate": "1.0"},
            METADATA,
            Faults(1.0, 0.1, True),
        ),
        # Empty values set nothing.
        (
            {"SLIPWAY_FAULT_ERROR_RATE": " "},
            {"slipway.dev/fault-errorRate": ""},
            {"errorRate": 0.75},
            Faults(error_rate=0.75),
        ),
    ],
)
def test_resolve_faults_precedence(
    env: dict[str, str], tags: dict[str, str], metadata: dict[str, object], expected: Faults
) -> None:
    assert resolve_faults(env, tags, metadata) == expected


def test_resolve_faults_says_where_each_switch_came_from() -> None:
    faults = resolve_faults(
        {"SLIPWAY_FAULT_LATENCY_SECONDS": "0"}, {"slipway.dev/fault-errorRate": "1"}, {"crashOnStart": False}
    )
    assert faults.sources == {
        "errorRate": "model version tag slipway.dev/fault-errorRate",
        "latencySeconds": "env SLIPWAY_FAULT_LATENCY_SECONDS",
        "crashOnStart": "slipway-model.json faults.crashOnStart",
    }
    assert faults.describe() == (
        "errorRate=1.0 (model version tag slipway.dev/fault-errorRate), "
        "latencySeconds=0.0 (env SLIPWAY_FAULT_LATENCY_SECONDS), "
        "crashOnStart=False (slipway-model.json faults.crashOnStart)"
    )
    assert resolve_faults({}).describe() == "none set"


@pytest.mark.parametrize(
    ("tags", "metadata", "message"),
    [
        ({"slipway.dev/fault-errorRate": "often"}, {}, "model version tag slipway.dev/fault-errorRate='often'"),
        ({"slipway.dev/fault-errorRate": "1.5"}, {}, r"slipway.dev/fault-errorRate='1.5' must be a number in \[0, 1\]"),
        ({"slipway.dev/fault-latencySeconds": "-1"}, {}, "slipway.dev/fault-latencySeconds='-1' must be a number"),
        ({"slipway.dev/fault-crashOnStart": "maybe"}, {}, "slipway.dev/fault-crashOnStart='maybe' is not a boolean"),
        ({}, {"errorRate": True}, "slipway-model.json faults.errorRate=True must be a number"),
        ({}, {"latencySeconds": "inf"}, "slipway-model.json faults.latencySeconds='inf'"),
        ({}, {"crashOnStart": 2}, "slipway-model.json faults.crashOnStart=2 is not a boolean"),
    ],
)
def test_bad_fault_values_say_where_they_are(tags: dict[str, str], metadata: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve_faults({}, tags, metadata)


def test_fault_tags_as_earlier_versions_named_them_are_still_read() -> None:
    """A version tagged for an earlier Slipway (``slipway.fault.<switch>``) still carries its faults;
    the new name wins where a version has both."""
    old = resolve_faults({}, {"slipway.fault.errorRate": "0.5", "slipway.fault.crashOnStart": "1"})
    assert old == Faults(error_rate=0.5, crash_on_start=True)
    assert old.sources["errorRate"] == "model version tag slipway.fault.errorRate"
    both = resolve_faults({}, {"slipway.fault.errorRate": "0.5", "slipway.dev/fault-errorRate": "0.1"})
    assert both.error_rate == 0.1 and both.sources["errorRate"] == "model version tag slipway.dev/fault-errorRate"


def test_a_bad_env_value_wins_over_a_good_tag() -> None:
    with pytest.raises(ConfigError, match="env SLIPWAY_FAULT_ERROR_RATE='x'"):
        resolve_faults({"SLIPWAY_FAULT_ERROR_RATE": "x"}, {"slipway.dev/fault-errorRate": "1"})


def test_metadata_faults_must_be_an_object() -> None:
    with pytest.raises(ConfigError, match="faults must be an object"):
        resolve_faults({}, {}, [1])


def test_unknown_fault_switches_are_ignored_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    faults = resolve_faults({}, {"slipway.dev/fault-errorrate": "1", "other": "x"}, {"latency": 1})
    assert faults == Faults()
    assert "slipway.dev/fault-errorrate" in caplog.text and "faults.latency" in caplog.text
    assert "other" not in caplog.text


def test_json_metadata_values() -> None:
    assert resolve_faults({}, {}, {"errorRate": 1, "latencySeconds": "0.5", "crashOnStart": 1}) == Faults(
        1.0, 0.5, True
    )


class _Registry:
    """The two registry calls of :func:`slipway.workloads.modelload.registry_version`, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def get_model_version(self, name: str, version: str) -> ModelVersion:
        self.calls.append(("version", name, version))
        return ModelVersion(name, version, "src", tags={"slipway.dev/fault-errorRate": "1"})

    def get_version_by_alias(self, name: str, alias: str) -> ModelVersion | None:
        self.calls.append(("alias", name, alias))
        return ModelVersion(name, "4", "src") if alias == "canary" else None


@pytest.mark.parametrize(
    ("uri", "version", "call"),
    [
        ("models:/digits/3", "3", ("version", "digits", "3")),
        ("models:/digits/3/sub/dir", "3", ("version", "digits", "3")),
        ("models:/digits@canary", "4", ("alias", "digits", "canary")),
        ("models:/digits@gone", None, ("alias", "digits", "gone")),
        ("models:/m-abc", None, None),
        ("runs:/abc/model", None, None),
        ("mlflow-artifacts:/1/abc/artifacts/model", None, None),
    ],
)
def test_registry_version(uri: str, version: str | None, call: tuple[str, ...] | None) -> None:
    registry = _Registry()
    found = registry_version(registry, uri)  # type: ignore[arg-type]
    assert (found.version if found else None) == version
    assert registry.calls == ([call] if call else [])


def test_model_version_label_of_a_resolved_alias(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLIPWAY_MODEL_VERSION", raising=False)
    assert model_version_label("models:/digits@canary", ModelVersion("digits", "4", "src")) == "4"
    assert model_version_label("models:/digits@canary") == "unknown"


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
    assert model_version_label(uri) == version


def test_model_version_label_from_env_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLIPWAY_MODEL_VERSION", "7")
    assert model_version_label("models:/digits/3") == "7"


def test_metrics_carry_the_names_the_slipway_preset_queries() -> None:
    metrics = ServingMetrics()
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


def test_errors_after_seconds_holds_the_error_rate_back_until_the_model_has_served_that_long() -> None:
    faults = resolve_faults({}, {"slipway.dev/fault-errorRate": "1", "slipway.dev/fault-errorsAfterSeconds": "60"})
    assert not faults.fails(0.5, serving_for=59.9)
    assert faults.fails(0.5, serving_for=60.0)
    assert "errorsAfterSeconds=60.0 (model version tag slipway.dev/fault-errorsAfterSeconds)" in faults.describe()


def test_load_seconds_delays_readiness_and_says_where_it_came_from() -> None:
    faults = resolve_faults({"SLIPWAY_FAULT_LOAD_SECONDS": "12"}, {"slipway.dev/fault-loadSeconds": "3"})
    assert faults.load_seconds == 12 and faults.active()
    assert faults.describe() == "loadSeconds=12.0 (env SLIPWAY_FAULT_LOAD_SECONDS)"
    with pytest.raises(ConfigError, match="slipway.dev/fault-loadSeconds"):
        resolve_faults({}, {"slipway.dev/fault-loadSeconds": "-1"})
