"""What things cost (slipway.cost): the price table, what a pod reserves; a run's attempts and cost
(slipway.training.attempts)."""

from __future__ import annotations

import logging
import os
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from localkube.wait import wait_for
from slipway import cost, opencost
from slipway.cost import reserved_by
from slipway.inference.analysis import Measurement, Priced, Pricing, judge, serving_cost
from slipway.inference.model import AnalysisMetric
from slipway.inference.rollout.base import Desired
from slipway.inference.rollout.records import cost_tags
from slipway.prices import NodePrices, PriceError, Prices, Reserved
from slipway.prometheus import PrometheusUnavailable, Sample
from slipway.training.attempts import MAX_ATTEMPTS, record_attempts, training_cost
from slipway.training.model import TrainingRunStatus

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
PRICES = Prices.parse({"currency": "USD", "gpuHour": {"default": 2.0, "A100": 3.0}, "cpuHour": 0.04,
                       "memoryGiBHour": 0.01})  # fmt: skip


def iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def pod(name: str, start: datetime | None, end: datetime | None = None, phase: str = "Running", gpus: int = 1,
        node: str = "n1", **extra) -> dict:  # fmt: skip
    state = {"terminated": {"finishedAt": iso(end), "exitCode": 0}} if end else {"running": {}}
    status: dict = {"phase": phase, "containerStatuses": [{"name": "train", "state": state}], **extra}
    if start:
        status["startTime"] = iso(start)
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}, "requests": {"cpu": "500m", "memory": "2Gi"}}
    return {"metadata": {"name": name}, "spec": {"nodeName": node, "containers": [{"resources": resources}]},
            "status": status}  # fmt: skip


# -- prices --------------------------------------------------------------------------------------


def test_a_price_table_names_each_bad_field():
    assert Prices.parse({"gpuHour": 2.5}).gpu_price("anything") == 2.5  # one price for every GPU
    assert Prices.parse({"gpuHour": {"A100": "3.5"}, "cpuHour": "0.04"}).cpu_hour == 0.04  # helm --set: strings
    with pytest.raises(PriceError, match=r"prices: gpuHour.A100: 'three' is not a price"):
        Prices.parse({"gpuHour": {"A100": "three"}})
    with pytest.raises(PriceError, match="cpuHour: -1 is not a price"):
        Prices.parse({"cpuHour": -1})
    with pytest.raises(PriceError, match=r"unknown field\(s\) gpu_hour"):
        Prices.parse({"gpu_hour": 1})
    assert not Prices.parse(None).configured and PRICES.configured


def test_the_price_file_is_read_again_when_it_changes_and_a_bad_edit_keeps_the_last_good_one(tmp_path: Path):
    path = tmp_path / "prices.yaml"
    path.write_text("currency: EUR\ngpuHour: 1.5\n")
    assert cost.prices_of(str(path)).gpu_price(None) == 1.5
    path.write_text("currency: EUR\ngpuHour: 2.5\n")
    os.utime(path, (1, 1))  # a new mtime, whatever the clock's resolution
    assert cost.prices_of(str(path)).gpu_price(None) == 2.5
    path.write_text("gpuHour: [\n")
    os.utime(path, (2, 2))
    assert cost.prices_of(str(path)).gpu_price(None) == 2.5
    with pytest.raises(PriceError, match="missing.yaml"):
        cost.prices_of(str(tmp_path / "missing.yaml"))
    assert cost.prices_of(None) == Prices()


def test_what_a_pod_reserves_and_what_it_costs_an_hour():
    reserved = reserved_by(pod("p", T0, gpus=2), "A100")
    assert reserved == Reserved(2, 0.5, 2.0, "A100")
    assert PRICES.hourly(reserved) == pytest.approx(2 * 3.0 + 0.5 * 0.04 + 2 * 0.01)
    assert PRICES.hourly(Reserved(1, 0, 0, "H100")) == 2.0  # another product: the default
    assert Prices.parse({"cpuHour": 1}).missing(reserved) == ["gpuHour.default (or gpuHour.A100)", "memoryGiBHour"]


# -- a run's attempts --------------------------------------------------------------------------------


def test_attempts_are_recorded_as_pods_come_and_go_and_nothing_is_lost_when_they_are_deleted():
    failed = pod("run-a", T0, T0 + timedelta(minutes=30), phase="Failed")
    preempted = pod("run-b", T0 + timedelta(minutes=31), conditions=[{"type": "DisruptionTarget", "status": "True"}])
    now = T0 + timedelta(minutes=50)
    first = record_attempts([], [failed, preempted], now, {"n1": "A100"})
    assert [(a["pod"], a["outcome"], a.get("endTime")) for a in first] == [
        ("run-a", "Failed", iso(T0 + timedelta(minutes=30))), ("run-b", "Preempted", None)]  # fmt: skip
    # The preempted pod is deleted, and the Job's next pod runs to the end.
    done = pod("run-c", T0 + timedelta(hours=1), T0 + timedelta(hours=2), phase="Succeeded")
    later = T0 + timedelta(hours=2, minutes=5)
    second = record_attempts(first, [failed, done], later)
    by_pod = {a["pod"]: a for a in second}
    assert by_pod["run-b"]["outcome"] == "Preempted" and by_pod["run-b"]["endTime"] == iso(later)
    assert by_pod["run-c"]["outcome"] == "Succeeded" and by_pod["run-a"]["gpuProduct"] == "A100"
    # A pod never seen to end or be preempted, gone: Deleted, ended when found gone.
    third = record_attempts(record_attempts([], [pod("run-d", T0)], T0), [], later)
    assert third[0]["outcome"] == "Deleted" and third[0]["endTime"] == iso(later)
    assert record_attempts([], [pod("run-e", None, phase="Pending")], T0) == []  # never started: holds nothing


def test_a_runs_cost_counts_every_attempt_and_the_wasted_share_the_lost_ones():
    failed = pod("a", T0, T0 + timedelta(minutes=30), phase="Failed")  # 0.5 h
    preempted = pod("b", T0 + timedelta(minutes=30), T0 + timedelta(hours=1), phase="Failed",
                    conditions=[{"type": "DisruptionTarget", "status": "True"}])  # 0.5 h  # fmt: skip
    done = pod("c", T0 + timedelta(hours=1), T0 + timedelta(hours=3), phase="Succeeded")  # 2 h
    attempts = record_attempts([], [failed, preempted, done], T0 + timedelta(hours=3), {"n1": "A100"})
    spent = training_cost(attempts, PRICES, T0 + timedelta(hours=3))
    hourly = 3.0 + 0.5 * 0.04 + 2 * 0.01
    assert spent["total"] == pytest.approx(3 * hourly) and spent["gpuHours"] == pytest.approx(3.0)
    assert spent["wastedShare"] == pytest.approx(1 / 3, abs=1e-4)
    assert [a["outcome"] for a in spent["attempts"]] == ["Failed", "Preempted", "Succeeded"]
    assert spent["summary"] == f"{3 * hourly:.2f} USD" and "message" not in spent
    TrainingRunStatus.model_validate({"cost": spent})  # the status schema takes it


def test_without_prices_the_cost_says_so_and_a_missing_price_is_named():
    attempts = record_attempts([], [pod("a", T0, T0 + timedelta(hours=1), phase="Succeeded")], T0)
    none = training_cost(attempts, Prices(), T0)
    assert "total" not in none and none["gpuHours"] == 1.0 and "no price configured" in none["message"]
    gpu_only = training_cost(attempts, Prices.parse({"gpuHour": 2}, "price file p.yaml"), T0)
    assert gpu_only["total"] == 2.0 and gpu_only["message"] == (
        "missing from price file p.yaml: cpuHour, memoryGiBHour (counted as 0)")  # fmt: skip


def test_a_run_with_many_attempts_keeps_status_small_and_counts_each_pod_once():
    pods = [pod(f"p{i:03}", T0 + timedelta(hours=i), T0 + timedelta(hours=i + 1), phase="Failed") for i in range(70)]
    names = [p["metadata"]["name"] for p in pods]
    now = T0 + timedelta(hours=80)
    # The Job keeps its failed pods: they are counted from the pods, the newest 64 listed, none folded.
    spent = training_cost(record_attempts([], pods, now), PRICES, now, None, names)
    assert len(spent["attempts"]) == MAX_ATTEMPTS and spent["unlisted"] == 6 and spent["folded"] is None
    assert spent["gpuHours"] == pytest.approx(70.0) and spent["wastedShare"] == 1.0
    for _ in range(3):  # pass after pass, from status: the same totals
        again = training_cost(record_attempts(spent["attempts"], pods, now), PRICES, now, spent["folded"], names)
        assert again["total"] == pytest.approx(spent["total"]) and again["gpuHours"] == pytest.approx(70.0)
    # Once pods are gone, the oldest of those recorded are folded, never counted twice.
    listed = [a["pod"] for a in spent["attempts"]]
    newer = [pod(f"q{i:03}", T0 + timedelta(hours=71 + i), phase="Running") for i in range(3)]
    later = training_cost(record_attempts(spent["attempts"], newer, now), PRICES, now, None, ["q000", "q001", "q002"])
    assert later["folded"]["count"] == 3 and len(later["attempts"]) == MAX_ATTEMPTS and "unlisted" not in later
    assert [a["pod"] for a in later["attempts"]][:2] == listed[3:5]
    # The 64 listed before (the 6 never listed went uncounted: the limit README states), and 9 + 8 + 7 h.
    assert later["gpuHours"] == pytest.approx(64.0 + 24.0)
    following = training_cost(later["attempts"], PRICES, now, later["folded"], ["q000", "q001", "q002"])
    assert following["total"] == pytest.approx(later["total"])


def test_a_pod_on_a_node_without_a_gpu_product_is_looked_up_once_and_priced_at_the_default():
    [attempt] = record_attempts([], [pod("a", T0, T0 + timedelta(hours=1), phase="Succeeded")], T0, {"n1": ""})
    assert attempt["gpuProduct"] == ""
    assert training_cost([attempt], PRICES, T0)["total"] == pytest.approx(2.0 + 0.5 * 0.04 + 2 * 0.01)


# -- serving cost and cost gates -------------------------------------------------------------------


class Throughput:
    """A provider answering each track's throughput (what the built-in cost queries measure)."""

    def __init__(self, rates: dict[tuple[str, str], float | None]) -> None:
        self.rates, self.unavailable = rates, None

    def measure(self, metric, track):
        return Measurement(f"rate of {metric.name} on {track}", value=self.rates.get((metric.name, track)))


def test_a_cost_gate_prices_throughput_per_pod_second_with_a_pods_price_per_hour():
    rates = {("costPer1kRequests", "canary"): 10.0, ("costPer1kRequests", "stable"): 10.0,
             ("costPerMillionTokens", "canary"): 500.0, ("costPerMillionTokens", "stable"): 500.0}  # fmt: skip
    priced = Priced(Throughput(rates), {"canary": 7.2, "stable": 3.6}, {})
    per1k = priced.measure(AnalysisMetric(name="costPer1kRequests", max=1), "canary")
    assert per1k.value == pytest.approx(7.2 / (10 * 3600) * 1000)  # 0.2 per 1K requests
    metric = AnalysisMetric(name="costPerMillionTokens", max_relative_to_stable=1.3)
    outcome = judge([metric], priced, priced, "inconclusive", T0)
    [result] = outcome.results
    assert result.value == pytest.approx(4.0) and result.stable_value == pytest.approx(2.0)
    assert outcome.verdict == "Failed"  # twice the stable's cost per token: more than 1.3 times
    same = Priced(Throughput(rates), {"canary": 3.6, "stable": 3.6}, {})
    assert judge([metric], same, same, "inconclusive", T0).verdict == "Passed"


def test_without_a_price_a_cost_gate_is_inconclusive_and_says_which_price_is_missing():
    rates = {("costPer1kRequests", "canary"): 10.0}
    priced = Priced(Throughput(rates), {"canary": None}, {"canary": "missing from price file p.yaml: cpuHour"})
    outcome = judge([AnalysisMetric(name="costPer1kRequests", max=1)], priced, priced, "fail", T0)
    assert outcome.verdict == "Inconclusive"  # never promoted blind, whatever noData says
    assert "cost per hour is unknown: missing from price file p.yaml: cpuHour" in outcome.reason
    idle = Priced(Throughput({("costPer1kRequests", "canary"): 0.0}), {"canary": 1.0}, {})
    assert idle.measure(AnalysisMetric(name="costPer1kRequests", max=1), "canary").value is None  # nothing answered


def test_each_tracks_serving_cost_and_the_promoted_versions_tags():
    rates = {("costPer1kRequests", "canary"): 20.0, ("costPerMillionTokens", "canary"): 1000.0}
    pricing = Pricing({"canary": 3.6}, {}, "USD", {"canary": 2})
    spent = serving_cost(Throughput(rates), pricing, "canary", T0)
    assert spent == {"time": "2026-01-01T12:00:00Z", "currency": "USD", "perHour": 7.2, "requestsPerPodSecond": 20.0,
                     "per1kRequests": 0.05, "tokensPerPodSecond": 1000.0, "perMillionTokens": 1.0}  # fmt: skip
    unknown = serving_cost(Throughput(rates), Pricing({"canary": None}, {"canary": "no price"}), "canary", T0)
    assert unknown["message"] == "no price" and "per1kRequests" not in unknown
    assert unknown["requestsPerPodSecond"] == 20
    tags = {t["key"]: t["value"] for t in cost_tags(Desired("4", "models:/m/4", "m", "r"), spent)}
    assert tags == {
        "slipway.dev/cost-serving-per-hour": "7.2",
        "slipway.dev/cost-per-1k-requests": "0.05",
        "slipway.dev/cost-per-million-tokens": "1.0",
        "slipway.dev/cost-currency": "USD",
    }


def test_a_tracks_price_per_hour_is_that_of_its_running_pods():
    serving, other = pod("s", T0, gpus=2), pod("o", T0, gpus=2, node="n2")
    done = pod("d", T0, T0, phase="Succeeded")
    # One pod on an A100 node (6.04 an hour), one on a node without the label (the default: 4.04).
    assert cost.pod_per_hour(PRICES, [serving, other, done], {"n1": "A100"}) == (pytest.approx(5.04), 2, "")
    assert cost.pod_per_hour(Prices(), [serving])[0] is None
    assert cost.pod_per_hour(Prices.parse({"gpuHour": 1}, "p.yaml"), [serving]) == (
        None, 1, "missing from p.yaml: cpuHour, memoryGiBHour")  # fmt: skip
    assert cost.pod_per_hour(PRICES, [done]) == (None, 0, "no pod of the track to price")


def test_a_finished_jobs_cost_is_its_time_at_its_templates_requests():
    template = {"spec": {"containers": [{"resources": {"requests": {"cpu": "500m", "memory": "512Mi"}}}]}}
    job = {"spec": {"template": template},
           "status": {"startTime": iso(T0), "completionTime": iso(T0 + timedelta(minutes=30))}}  # fmt: skip
    assert cost.job_cost(job, PRICES, T0) == pytest.approx(0.5 * (0.5 * 0.04 + 0.5 * 0.01))
    failed = {"spec": {"template": template, "parallelism": 2}, "status": {"startTime": iso(T0), "conditions": [
        {"type": "Failed", "status": "True", "lastTransitionTime": iso(T0 + timedelta(hours=1))}]}}  # fmt: skip
    assert cost.job_cost(failed, PRICES, T0) == pytest.approx(2 * (0.5 * 0.04 + 0.5 * 0.01))
    running = {"spec": {"template": template}, "status": {"startTime": iso(T0)}}
    assert cost.job_cost(running, PRICES, T0) is None
    assert cost.job_cost(job, Prices.parse({"gpuHour": 1}), T0) is None  # no CPU price: not counted as 0


# -- OpenCost's per-node prices (price file openCost: true) ------------------------------------------


class FakePrometheus:
    """Answers OpenCost's query with ``samples`` (or raises ``error``; ``hold`` blocks the answer)."""

    def __init__(self, samples: list[Sample], base_url: str = "http://prometheus.test:9090") -> None:
        self.base_url, self.samples = base_url, samples
        self.error: Exception | None = None
        self.hold: threading.Event | None = None
        self.queries: list[str] = []

    def query(self, promql: str) -> list[Sample]:
        self.queries.append(promql)
        if self.hold is not None:
            self.hold.wait(10)
        if self.error is not None:
            raise self.error
        return list(self.samples)


def opencost_series(node: str, gpu: float, cpu: float, ram: float) -> list[Sample]:
    return [Sample({"__name__": name, "node": node}, value) for name, value in
            (("node_gpu_hourly_cost", gpu), ("node_cpu_hourly_cost", cpu), ("node_ram_hourly_cost", ram))]  # fmt: skip


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def _no_opencost_reads_kept():
    opencost.forget()
    yield
    opencost.forget()


def test_open_cost_is_true_or_false_and_a_bad_value_is_named():
    assert Prices.parse({"cpuHour": 1, "openCost": True}).open_cost
    assert not Prices.parse({"cpuHour": 1, "openCost": False}).open_cost and not Prices.parse({"cpuHour": 1}).open_cost
    assert Prices.parse({"openCost": "true"}).open_cost  # helm --set-string
    for bad in ("yes", 1, [True]):
        with pytest.raises(PriceError, match=r"^price file p.yaml: openCost must be true or false"):
            Prices.parse({"openCost": bad}, "price file p.yaml")
    # openCost alone prices nothing until OpenCost has series
    assert not Prices.parse({"openCost": True}).configured


def test_a_pod_on_a_node_opencost_prices_is_priced_by_it_and_one_on_another_node_by_the_table():
    client = FakePrometheus(opencost_series("n1", 5.0, 0.1, 0.02))
    table = Prices.parse({"currency": "EUR", "gpuHour": {"default": 2.0, "A100": 3.0}, "cpuHour": 0.04,
                          "memoryGiBHour": 0.01, "openCost": True}, "price file p.yaml")  # fmt: skip
    prices = opencost.with_node_prices(table, client, timeout=5)
    assert client.queries == [opencost.QUERY] and prices.nodes == {"n1": NodePrices(5.0, 0.1, 0.02)}
    on_opencost = pod("a", T0, T0 + timedelta(hours=1), phase="Failed", gpus=2)  # n1: 1 h
    on_table = pod("b", T0 + timedelta(hours=1), T0 + timedelta(hours=3), phase="Succeeded", gpus=2, node="n2")  # 2 h
    attempts = record_attempts([], [on_opencost, on_table], T0 + timedelta(hours=3), {"n1": "A100", "n2": "A100"})
    assert [a["node"] for a in attempts] == ["n1", "n2"]
    spent = training_cost(attempts, prices, T0 + timedelta(hours=3))
    opencost_hourly = 2 * 5.0 + 0.5 * 0.1 + 2 * 0.02  # not the table's 3.0 for an A100
    table_hourly = 2 * 3.0 + 0.5 * 0.04 + 2 * 0.01
    assert [a["cost"] for a in spent["attempts"]] == [pytest.approx(opencost_hourly), pytest.approx(2 * table_hourly)]
    assert spent["total"] == pytest.approx(opencost_hourly + 2 * table_hourly) and "message" not in spent
    assert spent["currency"] == "EUR"
    assert spent["wastedShare"] == pytest.approx(opencost_hourly / spent["total"], abs=1e-4)
    # Without openCost, the same table ignores OpenCost (and nothing is asked of Prometheus).
    plain = opencost.with_node_prices(Prices.parse({"gpuHour": 3.0, "cpuHour": 0.04, "memoryGiBHour": 0.01}),
                                      client, timeout=5)  # fmt: skip
    assert len(client.queries) == 1 and training_cost(attempts, plain, T0)["total"] == pytest.approx(3 * table_hourly)
    # A serving pod is priced by its spec.nodeName.
    serving = [pod("s1", T0, gpus=2), pod("s2", T0, gpus=2, node="n2")]
    assert cost.pod_per_hour(prices, serving, {"n2": "A100"}) == (pytest.approx((opencost_hourly + table_hourly) / 2),
                                                                   2, "")  # fmt: skip
    # OpenCost's series alone (no price in the table) are a configured price.
    only = opencost.with_node_prices(Prices.parse({"openCost": True, "currency": "USD"}), client, timeout=5)
    assert only.configured and cost.pod_per_hour(only, serving[:1]) == (pytest.approx(opencost_hourly), 1, "")


def test_a_missing_price_says_opencost_was_consulted_for_the_pods_node():
    client = FakePrometheus(opencost_series("n1", 5.0, 0.1, 0.02))
    table = Prices.parse({"gpuHour": 2.0, "memoryGiBHour": 0.01, "openCost": True}, "price file p.yaml")
    prices = opencost.with_node_prices(table, client, timeout=5)
    on_n1 = pod("a", T0, T0 + timedelta(hours=1), phase="Failed")
    on_n2 = pod("b", T0, T0 + timedelta(hours=1), phase="Succeeded", node="n2")
    attempts = record_attempts([], [on_n1, on_n2], T0)
    spent = training_cost(attempts, prices, T0)
    assert spent["message"] == (
        "missing from price file p.yaml (and OpenCost has no prices for node n2): cpuHour (counted as 0)")  # fmt: skip
    assert spent["total"] == pytest.approx((5.0 + 0.5 * 0.1 + 2 * 0.02) + (2.0 + 2 * 0.01))
    assert cost.pod_per_hour(prices, [pod("s", T0, node="n2")]) == (
        None, 1, "missing from price file p.yaml (and OpenCost has no prices for node n2): cpuHour")  # fmt: skip
    assert cost.pod_per_hour(prices, [pod("s", T0, node="n1")])[2] == ""  # OpenCost has n1's CPU price
    # Without openCost the message is as it always was.
    assert training_cost(attempts, Prices.parse({"gpuHour": 2.0, "memoryGiBHour": 0.01}, "price file p.yaml"),
                         T0)["message"] == "missing from price file p.yaml: cpuHour (counted as 0)"  # fmt: skip
    # openCost alone, and OpenCost has no series: nothing is priced, and the message says why.
    empty = opencost.with_node_prices(Prices.parse({"openCost": True}), FakePrometheus([], "http://other:9090"), 5)
    unpriced = training_cost(attempts, empty, T0)
    assert unpriced["message"].startswith("no price configured: set the operator's price file (--prices-file, Helm "
                                          "value prices) to see what runs cost; openCost is on, but OpenCost has no "
                                          "node prices in Prometheus")  # fmt: skip
    assert "total" not in unpriced


def test_a_prometheus_error_falls_back_to_the_table_and_is_logged_once(caplog):
    client = FakePrometheus(opencost_series("n1", 5.0, 0.1, 0.02))
    client.error = PrometheusUnavailable("Prometheus at http://prometheus.test:9090 unreachable: connection refused")
    clock = Clock()
    table = Prices.parse({"gpuHour": 2.0, "cpuHour": 0.04, "memoryGiBHour": 0.01, "openCost": True}, "p.yaml")
    attempts = record_attempts([], [pod("a", T0, T0 + timedelta(hours=1), phase="Succeeded")], T0)
    with caplog.at_level(logging.INFO, logger="slipway.opencost"):
        for _ in range(3):  # a minute apart: asked each time, warned once
            prices = opencost.with_node_prices(table, client, timeout=5, clock=clock)
            assert not prices.nodes and "unreachable" in prices.open_cost_note
            assert training_cost(attempts, prices, T0)["total"] == pytest.approx(2.0 + 0.5 * 0.04 + 2 * 0.01)
            clock.now += 60
        assert len(client.queries) == 3
        assert [r.levelname for r in caplog.records] == ["WARNING"] and "unreachable" in caplog.records[0].message
        client.error = None  # Prometheus is back: OpenCost's prices again, and it is said once
        assert opencost.with_node_prices(table, client, timeout=5, clock=clock).nodes.keys() == {"n1"}
        assert [r.levelname for r in caplog.records] == ["WARNING", "INFO"]
    # A price missing while OpenCost was not read says so.
    gpu_only = opencost.with_node_prices(Prices.parse({"gpuHour": 2.0, "openCost": True}, "price file p.yaml"),
                                         None, timeout=5)  # fmt: skip
    assert training_cost(attempts, gpu_only, T0)["message"] == (
        "missing from price file p.yaml (OpenCost not read: the operator has no --prometheus-url): "
        "cpuHour, memoryGiBHour (counted as 0)")  # fmt: skip


def test_a_prometheus_that_does_not_answer_holds_a_pass_no_longer_than_the_timeout():
    client = FakePrometheus(opencost_series("n1", 5.0, 0.1, 0.02))
    client.hold = threading.Event()
    table = Prices.parse({"cpuHour": 0.04, "openCost": True})
    try:
        started = time.monotonic()
        prices = opencost.with_node_prices(table, client, timeout=0.2)
        assert time.monotonic() - started < 1.0 and "did not answer within 0.2s" in prices.open_cost_note
        started = time.monotonic()  # the next pass does not wait for the same query again
        assert not opencost.with_node_prices(table, client, timeout=5).nodes
        assert time.monotonic() - started < 0.5 and len(client.queries) == 1
    finally:
        client.hold.set()
    wait_for(lambda: opencost.with_node_prices(table, client, timeout=5).nodes, 5, "the late answer used")
    assert len(client.queries) == 1


def test_opencost_is_asked_at_most_once_a_minute_per_prometheus():
    clock = Clock()
    client = FakePrometheus(opencost_series("n1", 5.0, 0.1, 0.02))
    table = Prices.parse({"cpuHour": 0.04, "openCost": True})
    for _ in range(5):
        assert opencost.with_node_prices(table, client, timeout=5, clock=clock).nodes["n1"].gpu_hour == 5.0
        clock.now += 11.9  # 5 passes within 59.5 s
    assert len(client.queries) == 1
    client.samples = opencost_series("n1", 6.0, 0.1, 0.02)  # OpenCost's price changed
    clock.now += 0.5  # 60 s after the first query
    assert opencost.with_node_prices(table, client, timeout=5, clock=clock).nodes["n1"].gpu_hour == 6.0
    assert len(client.queries) == 2
    other = FakePrometheus(opencost_series("n1", 9.0, 0.1, 0.02), "http://other-prometheus:9090")
    assert opencost.with_node_prices(table, other, timeout=5, clock=clock).nodes["n1"].gpu_hour == 9.0  # its own
    assert len(other.queries) == 1 and len(client.queries) == 2


def test_an_outage_after_a_good_read_keeps_the_node_prices_last_read(caplog):
    clock = Clock()
    client = FakePrometheus(opencost_series("n1", 5.0, 0.1, 0.02))
    table = Prices.parse({"gpuHour": 2.0, "cpuHour": 0.04, "memoryGiBHour": 0.01, "openCost": True}, "p.yaml")
    attempts = record_attempts([], [pod("a", T0, T0 + timedelta(hours=1), phase="Succeeded")], T0)
    read = training_cost(attempts, opencost.with_node_prices(table, client, timeout=5, clock=clock), T0)["total"]
    assert read == pytest.approx(5.0 + 0.5 * 0.1 + 2 * 0.02)
    client.error = PrometheusUnavailable("Prometheus at http://prometheus.test:9090 unreachable: connection refused")
    clock.now += 60
    with caplog.at_level(logging.WARNING, logger="slipway.opencost"):
        during = opencost.with_node_prices(table, client, timeout=5, clock=clock)
    assert len(client.queries) == 2 and during.nodes.keys() == {"n1"} and not during.open_cost_note
    assert training_cost(attempts, during, T0)["total"] == pytest.approx(read)  # not repriced at the table's
    assert "using the node prices last read from it" in caplog.records[0].message


def test_an_attempt_opencost_priced_keeps_its_price_once_it_ended():
    client = FakePrometheus(opencost_series("n1", 5.0, 0.1, 0.02))
    table = Prices.parse({"currency": "USD", "openCost": True}, "p.yaml")
    ended = pod("a", T0, T0 + timedelta(hours=1), phase="Failed")
    running = pod("b", T0 + timedelta(hours=1))
    attempts = record_attempts([], [ended, running], T0 + timedelta(hours=2))
    first = training_cost(attempts, opencost.with_node_prices(table, client, timeout=5), T0 + timedelta(hours=2))
    hourly = 5.0 + 0.5 * 0.1 + 2 * 0.02
    assert [a.get("perHour") for a in first["attempts"]] == [pytest.approx(hourly), None]  # the running one: not yet
    assert first["total"] == pytest.approx(2 * hourly)
    # Later, OpenCost no longer lists the node (it was removed) and the operator restarted during an
    # outage: the ended attempt keeps what it cost; the running one has no price now, and says so.
    opencost.forget()
    gone = opencost.with_node_prices(table, FakePrometheus([]), timeout=5)
    later = training_cost(first["attempts"], gone, T0 + timedelta(hours=2))
    assert later["total"] == pytest.approx(hourly) and later["attempts"][0]["cost"] == pytest.approx(hourly)
    assert "missing from p.yaml" in later["message"]


def test_an_opencost_price_of_zero_does_not_beat_the_tables():
    client = FakePrometheus(opencost_series("n1", 0.0, 0.1, 0.02))  # OpenCost could not price the GPU
    table = Prices.parse({"gpuHour": 2.0, "openCost": True})
    prices = opencost.with_node_prices(table, client, timeout=5)
    assert prices.rates(Reserved(gpus=1, cpus=1, memory_gib=1, node="n1")) == (2.0, 0.1, 0.02)
    assert (
        opencost.with_node_prices(Prices.parse({"openCost": True}), client, timeout=5).rates(
            Reserved(gpus=1, node="n1")
        )[0]
        == 0.0
    )  # no table price: OpenCost's 0 stands


def test_opencosts_query_selects_only_its_scrape_target_and_the_price_file_may_name_it():
    # By default: OpenCost's job, and no series that pod discovery labels with a namespace or a pod
    # (a serving pod exporting node_gpu_hourly_cost itself).
    default = Prices.parse({"openCost": True})
    assert default.open_cost_selector == 'job="opencost",namespace="",pod=""'
    client = FakePrometheus(opencost_series("n1", 5.0, 0.1, 0.02))
    opencost.with_node_prices(default, client, timeout=5)
    assert client.queries == [
        'max by (__name__, node) ({__name__=~"node_gpu_hourly_cost|node_cpu_hourly_cost|node_ram_hourly_cost",'
        'job="opencost",namespace="",pod=""})'
    ]
    # OpenCost scraped by a ServiceMonitor: its series carry its own namespace, which the admin names.
    named = Prices.parse({"openCost": True, "openCostSelector": ' job = "opencost" , namespace="opencost"'})
    other = FakePrometheus(opencost_series("n1", 5.0, 0.1, 0.02), "http://other:9090")
    opencost.with_node_prices(named, other, timeout=5)
    assert other.queries[0].endswith(',job="opencost",namespace="opencost"})')


@pytest.mark.parametrize(
    ("selector", "said"),
    [
        ("", "empty; name the scrape target"),
        ("opencost", "is not a list of label matchers"),
        ('job="opencost"} or vector(1e6', "separated by commas"),
        ('job="a" pod=""', "separated by commas"),
        ('__name__="node_gpu_hourly_cost"', "names __name__"),
        ('job="a\nb"', "is not a list of label matchers"),
        (5, "must be a string of label matchers"),
    ],
)
def test_a_price_file_whose_opencost_selector_is_not_label_matchers_is_refused_naming_the_field(selector, said):
    with pytest.raises(PriceError, match=r"^price file p.yaml: openCostSelector") as refused:
        Prices.parse({"openCost": True, "openCostSelector": selector}, "price file p.yaml")
    assert said in str(refused.value)
