"""Canary analysis against a real Prometheus (Debian's) scraping the reference server's metrics.

Each track of two InferenceDeployments is a ``/metrics`` endpoint exporting the reference
server's own ``ServingMetrics``. Prometheus scrapes them every second from a static config whose
target labels stand in for what pod discovery and ``labelmap`` give in a cluster (``namespace``,
``slipway_dev_deployment``, ``slipway_dev_track``). A traffic thread counts requests on them:

- ``good``: both tracks answer 200 in 20 ms; the canary has never failed, so it has no 5xx series;
- ``bad``: the canary fails 30% of its requests and takes 200 ms; its stable is healthy.
"""

from __future__ import annotations

import random
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from wsgiref.simple_server import WSGIServer

import httpx
import pytest
import yaml
from prometheus_client import start_http_server

from localkube.mlflow_server import free_port
from localkube.prometheus import binary as prometheus_binary
from localkube.wait import wait_for
from slipway.inference.analysis import AnalysisOutcome
from slipway.inference.model import Analysis, AnalysisMetric
from slipway.inference.providers import Services, Target, analyse
from slipway.prometheus import PrometheusClient
from slipway.workloads.servemetrics import ServingMetrics
from slipway_testing import report

# The same Prometheus as the local cluster's (`make prometheus`), here with static targets.
PROMETHEUS_BIN = str(prometheus_binary())
NAMESPACE = "team-a"
NOW = "2025-01-01T00:00:00Z"
TICK_SECONDS = 0.05  # the traffic thread's pace: 200 requests per second per track
DATA_TIMEOUT = 30.0  # Prometheus scrapes every second; rate() needs two scrapes


@dataclass
class Track:
    """One track's pods, as the model server's metrics see them."""

    deployment: str
    track: str
    latency_seconds: float
    failures_per_tick: int = 0
    successes_per_tick: int = 10
    error_share: float = 0.0  # random failures
    # The reference server exports its request counters at 0 before any request; most servers (vLLM's
    # HTTP metrics) do not: a 5xx series then appears only at the first failure.
    initialised: bool = True

    def __post_init__(self) -> None:
        self.metrics = ServingMetrics()
        if not self.initialised:
            self.metrics.requests.clear()
        self.server: WSGIServer | None = None

    def serve(self) -> str:
        self.server, _ = start_http_server(0, addr="127.0.0.1", registry=self.metrics.registry)
        return f"127.0.0.1:{self.server.server_port}"

    def handle_requests(self) -> None:
        """Count one tick of requests the way the reference server does."""
        m = self.metrics
        for _ in range(self.successes_per_tick):
            m.requests.labels(code="200").inc()
            m.duration.observe(self.latency_seconds)
            m.time_to_first_token.observe(self.latency_seconds / 2)
            m.time_per_output_token.observe(self.latency_seconds / 4)
        for _ in range(self.failures_per_tick):
            m.requests.labels(code="500").inc()
            m.duration.observe(self.latency_seconds)
        if self.error_share:  # 2 requests a tick (40/s), each failing with that probability
            for _ in range(2):
                m.requests.labels(code="500" if random.random() < self.error_share else "200").inc()

    def scrape_target(self, address: str) -> dict[str, object]:
        labels = {"namespace": NAMESPACE, "slipway_dev_deployment": self.deployment, "slipway_dev_track": self.track}
        return {"targets": [address], "labels": labels}


TRIALS = 20
# Canaries that serve nothing until a test starts them: their counters appear while Prometheus watches.
FRESH = [Track(f"fresh-{i}", "canary", latency_seconds=0.02, successes_per_tick=0, initialised=i % 2 == 0)
         for i in range(TRIALS)]  # fmt: skip
TRACKS = [
    Track("good", "stable", latency_seconds=0.02),
    Track("good", "canary", latency_seconds=0.02),
    Track("bad", "stable", latency_seconds=0.02),
    Track("bad", "canary", latency_seconds=0.2, failures_per_tick=3, successes_per_tick=7),
    *FRESH,
]


@dataclass
class RunningPrometheus:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_prometheus(workdir: Path, static_configs: list[dict[str, object]]) -> RunningPrometheus:
    """Debian's Prometheus on a free loopback port, scraping ``static_configs`` every second."""
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": "model-servers", "static_configs": static_configs}],
    }
    config_file = workdir / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config, sort_keys=False))
    port = free_port()
    log = workdir / "prometheus.log"
    cmd = [
        PROMETHEUS_BIN,
        f"--config.file={config_file}",
        f"--storage.tsdb.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    prometheus = RunningPrometheus(f"http://127.0.0.1:{port}", process, log)

    def ready() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"prometheus exited with {process.returncode}: {log.read_text()[-2000:]}")
        return httpx.get(f"{prometheus.url}/-/ready", timeout=2).status_code == 200

    try:
        wait_for(ready, 30, "Prometheus to be ready")
    except BaseException:
        prometheus.stop()
        raise
    return prometheus


@pytest.fixture(scope="module")
def traffic() -> Iterator[list[dict[str, object]]]:
    """The four tracks serving /metrics, with requests counted on them until the module ends."""
    static_configs = [t.scrape_target(t.serve()) for t in TRACKS]
    stop = threading.Event()

    def drive() -> None:
        while not stop.is_set():
            for t in TRACKS:
                t.handle_requests()
            stop.wait(TICK_SECONDS)  # the pace of the simulated traffic

    driver = threading.Thread(target=drive, name="traffic", daemon=True)
    driver.start()
    try:
        yield static_configs
    finally:
        stop.set()
        driver.join(5)
        for t in TRACKS:
            if t.server is not None:
                t.server.shutdown()
                t.server.server_close()


@pytest.fixture(scope="module")
def prometheus(traffic: list[dict[str, object]], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    running = start_prometheus(tmp_path_factory.mktemp("prometheus"), traffic)
    try:
        yield running.url
    finally:
        running.stop()


def analysed(client: PrometheusClient, analysis: Analysis, deployment: str) -> AnalysisOutcome:
    """The analysis the operator runs (providers.analyse), ``client`` lent as its own Prometheus."""
    return analyse(Target(analysis, NAMESPACE, deployment), Services(None, client, client.timeout), NOW)


def analyse_when_measured(client: PrometheusClient, analysis: Analysis, deployment: str) -> AnalysisOutcome:
    """Analyse until every metric has data for every track it needs, then return that analysis."""

    def measured() -> AnalysisOutcome | None:
        outcome = analysed(client, analysis, deployment)
        complete = all(
            r.value is not None and (m.max_relative_to_stable is None or r.stable_value is not None)
            for r, m in zip(outcome.results, analysis.metrics or [], strict=False)
        )
        return outcome if complete and outcome.results else None

    return wait_for(measured, DATA_TIMEOUT, f"Prometheus to measure every metric of {deployment}", interval=0.5)


def metric(**kw: object) -> AnalysisMetric:
    return AnalysisMetric.model_validate(kw)


DEFAULTS = [metric(name="errorRate", max=0.05), metric(name="latencyP95Seconds", maxRelativeToStable=1.5)]


def test_a_failing_canary_fails_on_its_error_rate_and_latency(prometheus: str) -> None:
    with httpx.Client(timeout=5) as http:
        client = PrometheusClient(prometheus, http=http)
        outcome = analyse_when_measured(client, Analysis(interval="5s", metrics=DEFAULTS), "bad")

    assert outcome.verdict == "Failed", outcome.reason
    assert outcome.metric == "errorRate" and outcome.reason.startswith("errorRate of the canary is 0.")
    assert outcome.value is not None and 0.2 <= outcome.value <= 0.4
    error_rate, latency = outcome.results
    assert error_rate.threshold == "<= 0.05" and "[20s]" in error_rate.query
    assert latency.result == "Failed" and latency.value is not None and latency.stable_value is not None
    assert latency.value > 5 * latency.stable_value, latency.message
    assert latency.threshold.startswith("<= 1.5 × stable (")


def test_a_healthy_canary_passes_every_builtin_and_a_custom_query(prometheus: str) -> None:
    custom = (
        'sum(rate(slipway_requests_total{namespace="{{ namespace }}", slipway_dev_deployment="{{deployment}}",'
        ' slipway_dev_track="{{ track }}"}[20s]))'
    )
    analysis = Analysis(
        interval="5s",
        metrics=[
            *DEFAULTS,
            metric(name="latencyP99Seconds", max=0.1),
            metric(name="ttftP95Seconds", max=0.1, maxRelativeToStable=1.5),
            metric(name="tpotP95Seconds", max=0.1),
            metric(name="requestsPerSecond", min=10, query=custom),
        ],
    )
    with httpx.Client(timeout=5) as http:
        client = PrometheusClient(prometheus, http=http)
        outcome = analyse_when_measured(client, analysis, "good")

    assert outcome.verdict == "Passed", [r.message for r in outcome.results]
    by_name = {r.metric: r for r in outcome.results}
    assert by_name["errorRate"].value == 0.0  # no 5xx series at all is a rate of 0, not "no data"
    # rate() divides by the whole window, so a series younger than the window shows less than 200/s
    assert by_name["requestsPerSecond"].value is not None and by_name["requestsPerSecond"].value >= 10
    assert all(r.to_status()["result"] == "Passed" for r in outcome.results)


def test_a_deployment_without_series_follows_the_no_data_policy(prometheus: str) -> None:
    with httpx.Client(timeout=5) as http:
        client = PrometheusClient(prometheus, http=http)
        analyse_when_measured(client, Analysis(interval="5s", metrics=DEFAULTS), "good")  # Prometheus has data
        inconclusive = analysed(client, Analysis(metrics=DEFAULTS), "absent")
        failed = analysed(client, Analysis(metrics=DEFAULTS, noData="fail"), "absent")

    assert inconclusive.verdict == "Inconclusive" and "no data for the canary" in inconclusive.reason
    assert not inconclusive.source_unavailable
    assert failed.verdict == "Failed" and failed.metric == "errorRate" and failed.value is None


def test_a_stopped_prometheus_makes_the_analysis_inconclusive(traffic: list[dict[str, object]], tmp_path: Path) -> None:
    running = start_prometheus(tmp_path, traffic)
    try:
        with httpx.Client(timeout=5) as http:
            client = PrometheusClient(running.url, http=http)
            assert client.query_value("vector(1)") == 1.0
            running.stop()
            outcome = analysed(client, Analysis(metrics=DEFAULTS, noData="fail"), "bad")
    finally:
        running.stop()

    assert outcome.verdict == "Inconclusive" and outcome.source_unavailable
    assert outcome.metric is None
    assert "unreachable" in outcome.reason
    assert all(r.result == "Inconclusive" for r in outcome.results)


def test_a_fresh_failing_canary_never_passes_before_its_first_failure_is_seen(prometheus: str) -> None:
    """20 canaries, each starting to serve 30% errors (40 requests/s) while Prometheus scrapes it every
    second, analysed every 0.1 s; half export their counters at 0 beforehand, half only from their first
    request of each code. A first scrape may come before a canary's first failure, and an uninitialised
    5xx series appears only at it: read with rate() and ``or vector(0)``, such a canary could pass. Every
    analysis before its first Fail must be Inconclusive."""
    analysis = Analysis(interval="5s", metrics=[metric(name="errorRate", max=0.05)])
    verdicts: dict[str, list[str]] = {t.deployment: [] for t in FRESH}
    started: dict[str, float] = {}
    failed_after: dict[str, float] = {}
    with httpx.Client(timeout=5) as http:
        client = PrometheusClient(prometheus, http=http)
        # Every target scraped on its 1 s rhythm first (a Prometheus just started scrapes late): the
        # bound below is on the scrape interval, not on Prometheus' start.
        targets = len(TRACKS)
        wait_for(lambda: client.query_value("count(up)") == targets
                 and (client.query_value("min(count_over_time(up[5s]))") or 0) >= 4,
                 DATA_TIMEOUT, f"Prometheus to scrape all {targets} targets every second", interval=0.5)  # fmt: skip
        deadline = time.monotonic() + 90
        pending = list(FRESH)
        while (pending or len(failed_after) < len(started)) and time.monotonic() < deadline:
            if pending and (not started or time.monotonic() - max(started.values()) >= 0.4):
                track = pending.pop(0)
                track.error_share = 0.3
                started[track.deployment] = time.monotonic()
            for name in started:
                if name in failed_after:
                    continue
                result = analysed(client, analysis, name).results[0]
                verdicts[name].append(result.result)
                if result.result == "Failed":
                    failed_after[name] = time.monotonic() - started[name]
            time.sleep(0.1)
    passes_before_fail = {n: v.count("Passed") for n, v in verdicts.items() if "Passed" in v}
    times = sorted(failed_after.values())
    report(f"\n{TRIALS} fresh canaries at 30% errors: each failed {times[0]:.1f}-{times[-1]:.1f} s after it started "
           f"(p50 {times[len(times) // 2]:.1f} s, scrape 1 s); Pass verdicts before the first Fail: "
           f"{sum(passes_before_fail.values())}")  # fmt: skip
    assert len(failed_after) == TRIALS, verdicts
    assert passes_before_fail == {}, verdicts
    # Its first scrape holding 3 failures (else its second), then the next analysis: about 1 s here (1 s
    # scrapes), with room for a busy machine.
    assert times[int(0.9 * (len(times) - 1))] <= 3.0, times


def test_the_error_ratio_judges_one_scrape_only_once_it_holds_failures(tmp_path: Path) -> None:
    """The built-in errorRate on exact series, evaluated by promtool (Prometheus' own engine), 10 s after
    the canary's pod started, scraped every 5 s. Its first scrape that saw it serve is judged when it
    already counts ``MIN_FAILURES`` failures, all of them (a 5xx series first seen at 3 is 3 failures);
    with fewer, it waits for a second scrape, since that first scrape may have come before the failures.
    A second scrape judges it whatever it saw."""
    from slipway.inference.providers.prometheus_queries import MIN_FAILURES, resolve_query
    from slipway_e2e.monitoring import PROMTOOL

    def series(deployment: str, code: str, values: str) -> dict[str, str]:
        labels = f'namespace="{NAMESPACE}", slipway_dev_deployment="{deployment}", slipway_dev_track="canary"'
        return {"series": f'slipway_requests_total{{{labels}, code="{code}"}}', "values": values}

    def query(deployment: str) -> str:
        return resolve_query(metric(name="errorRate", max=0.05), "slipway", "canary", NAMESPACE, deployment, "20s")

    assert MIN_FAILURES == 3
    cases = {
        # deployment: its series (one value per 5 s scrape, "_" not exported), the ratio at 10 s (None: no data)
        "failed-3": ([("200", "_ _ 7"), ("500", "_ _ 3")], 0.3),
        "failed-2": ([("200", "_ _ 8"), ("500", "_ _ 2")], None),
        "failed-0": ([("200", "_ _ 10")], None),
        "zeroed-3": ([("200", "0 0 7"), ("500", "0 0 3")], 0.3),  # counters exported at 0 before the 1st request
        "zeroed-2": ([("200", "0 0 8"), ("500", "0 0 2")], None),
        "two-scrapes": ([("200", "_ 4 10")], 0.0),
    }
    tests = [{"expr": query(name), "eval_time": "10s",
              "exp_samples": [] if ratio is None else [{"labels": "{}", "value": ratio}]}
             for name, (_, ratio) in cases.items()]  # fmt: skip
    inputs = [series(name, code, values) for name, (codes, _) in cases.items() for code, values in codes]
    spec = {"rule_files": [], "evaluation_interval": "5s",
            "tests": [{"interval": "5s", "input_series": inputs, "promql_expr_test": tests}]}  # fmt: skip
    (tmp_path / "tests.yml").write_text(yaml.safe_dump(spec, sort_keys=False))
    done = subprocess.run([str(PROMTOOL), "test", "rules", "tests.yml"], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
