"""An analysis provider added from the test tree alone, asking an HTTP endpoint of its own (a real
server on this machine, not Prometheus): what docs/extending.md lists for a provider is all it
takes. Its module is the two classes here, its row of providers.PROVIDERS is added for each test;
its metric's name, which the API would take once listed in BUILTIN_METRICS, is built past the
validation here.

The analysis runs as the handler runs it (slipway.inference.analysisrun), with no Prometheus at all:
the endpoint's values are judged, the planner rolls the canary back on them, and an endpoint found
down holds the step as monitoring down does."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from slipway.config import OperatorConfig
from slipway.inference import analysisrun, providers, traffic
from slipway.inference.analysis import Measurement
from slipway.inference.model import Analysis, AnalysisMetric, InferenceDeploymentSpec
from slipway.inference.providers import Services, Target
from slipway.inference.providers.base import Opened
from slipway.inference.rollout.base import Desired, Observed, Track
from slipway.inference.rollout.planner import plan

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
V1 = Desired("1", "models:/m/1", "m", "rev1")
V2 = Desired("2", "models:/m/2", "m", "rev2")
METRIC = "checkLatencySeconds"


class Endpoint(ThreadingHTTPServer):
    """The endpoint the provider asks: ``GET /measure?metric=&track=&revision=`` answers
    ``{"value": ...}`` from :attr:`values` (by track), and records what it was asked."""

    def __init__(self) -> None:
        self.values: dict[str, float] = {}
        self.asked: list[dict[str, str]] = []
        super().__init__(("127.0.0.1", 0), Answer)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Answer(BaseHTTPRequestHandler):
    server: Endpoint

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        asked = {k: v[0] for k, v in parse_qs(urlsplit(self.path).query).items()}
        self.server.asked.append(asked)
        body = json.dumps({"value": self.server.values.get(asked["track"])}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    server = Endpoint()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


class CheckProvider:
    """The analysis provider (slipway.inference.analysis.Provider) of one endpoint: one GET per
    metric and track, narrowed to the track's revision; once unreachable, it asks no more."""

    def __init__(self, client: httpx.Client, target: Target) -> None:
        self.client, self.target = client, target
        self.unavailable: str | None = None

    def measure(self, metric: AnalysisMetric, track: str) -> Measurement:
        params = {"metric": metric.name, "track": track, "revision": self.target.revisions.get(track, "")}
        asked = f"{self.client.base_url}/measure?metric={metric.name}&track={track}"
        if self.unavailable is not None:
            return Measurement(asked, error=self.unavailable)
        try:
            answer = self.client.get("/measure", params=params)
            answer.raise_for_status()
        except httpx.HTTPError as exc:
            self.unavailable = f"the check endpoint is unreachable ({type(exc).__name__}): the step waits"
            return Measurement(asked, error=self.unavailable)
        return Measurement(asked, value=answer.json()["value"])


class CheckSource:
    """The row ``check`` of providers.PROVIDERS: the metric :data:`METRIC`, from its own endpoint."""

    name = "check"
    metrics = frozenset({METRIC})
    presets: frozenset[str] = frozenset()

    def __init__(self, url: str) -> None:
        self.url = url  # a setting of the operator's, in a real source (read from services.config)

    def refusal(self, settings: Analysis, config: OperatorConfig) -> str | None:
        return None

    @contextmanager
    def open(self, target: Target, services: Services) -> Iterator[Opened]:
        with httpx.Client(base_url=self.url, timeout=services.timeout) as client:
            yield lambda: CheckProvider(client, target)


def check_spec() -> InferenceDeploymentSpec:
    spec = InferenceDeploymentSpec.model_validate(
        {
            "model": {"name": "m", "alias": "candidate"},
            "image": "i",
            "autoscaling": {"minReplicas": 2, "maxReplicas": 2},
            "rollout": {
                "steps": [{"weight": 50}],
                "interval": "30s",
                "analysis": {"interval": "30s", "failureLimit": 0},
            },
        }
    )
    # The metric, as the API would take it once its name is in BUILTIN_METRICS.
    gate = AnalysisMetric.model_construct(name=METRIC, query=None, max=0.5, max_relative_to_stable=1.5)
    assert spec.rollout.analysis is not None
    analysis = spec.rollout.analysis.model_copy(update={"metrics": [gate]})
    return spec.model_copy(update={"rollout": spec.rollout.model_copy(update={"analysis": analysis})})


def pass_context() -> Any:
    """What analysisrun reads of a pass's context: no Prometheus, no prices, no namespaces."""
    cache = SimpleNamespace(names=lambda index: [], select=lambda *args: [])
    return SimpleNamespace(
        namespace="team-a", name="digits", config=OperatorConfig(), prometheus=None, cache=cache, kube=None
    )


TRACKS = {"canary": ("2", "rev2"), "stable": ("1", "rev1")}


def test_the_endpoints_values_are_judged_as_the_handler_runs_the_analysis(endpoint, monkeypatch):
    monkeypatch.setitem(providers.PROVIDERS, "check", CheckSource(endpoint.url))  # its row
    endpoint.values = {"canary": 0.3, "stable": 0.25}
    outcome = analysisrun.analyse(pass_context(), check_spec(), NOW, TRACKS)
    [result] = outcome.results
    assert (result.metric, result.result, result.value, result.stable_value) == (METRIC, "Passed", 0.3, 0.25)
    assert result.query.startswith(endpoint.url) and not outcome.source_unavailable
    assert [(a["track"], a["revision"]) for a in endpoint.asked] == [("canary", "rev2"), ("stable", "rev1")]


def canary_step(spec: InferenceDeploymentSpec, outcome: Any) -> Observed:
    stable = Track("1", V1.uri, 1, 1, 1, True, 1, revision="rev1", model="m", available=1)
    canary = Track("2", V2.uri, 1, 1, 1, True, 1, revision="rev2", model="m", available=1)
    status = {
        "phase": "Analyzing",
        "canary": {"revision": "rev2", "readyReplicas": 1},
        "currentStep": 0,
        "stepStartTime": NOW.isoformat(),
        "canaryStartTime": NOW.isoformat(),
    }
    now = NOW + timedelta(seconds=10)
    return Observed(spec, V2, None, stable, canary, status, {}, now, outcome, router=traffic.router("Replicas"))


def test_the_planner_rolls_back_on_the_endpoints_values(endpoint, monkeypatch):
    monkeypatch.setitem(providers.PROVIDERS, "check", CheckSource(endpoint.url))
    endpoint.values = {"canary": 0.45, "stable": 0.2}  # within max 0.5, but over 1.5 × the stable's
    spec = check_spec()
    outcome = analysisrun.analyse(pass_context(), spec, NOW, TRACKS)
    decided = plan(canary_step(spec, outcome))
    assert decided.phase == "RolledBack" and decided.status["lastRollback"]["metric"] == METRIC


def test_an_endpoint_found_down_holds_the_step(endpoint, monkeypatch):
    monkeypatch.setitem(providers.PROVIDERS, "check", CheckSource(endpoint.url))
    endpoint.shutdown()
    endpoint.server_close()  # nothing listens at its address any more
    spec = check_spec()
    outcome = analysisrun.analyse(pass_context(), spec, NOW, TRACKS)
    assert outcome.verdict == "Inconclusive" and outcome.source_unavailable
    assert "unreachable" in outcome.reason
    held = plan(canary_step(spec, outcome))
    assert held.phase == "Paused" and held.canary == V2 and "lastRollback" not in held.status
