"""Drain-safe transitions under load: 20 requests/s, a third of them streamed completions lasting
20–40 s (the reference server in its OpenAI-compatible mode at 2 tokens/s). A promotion, an HPA
scale-down, the rollback of a canary answering 30% errors and an abort each remove serving pods;
with spec.drain (the default) no answer from a healthy pod fails or is cut. Beside it, the same
promotion with drain off shows what it prevents."""

from __future__ import annotations

import pytest

from localkube.wait import wait_for
from slipway_e2e.loadgen import LoadDriver, LoadStats
from slipway_testing import ERRORS, Versions, apply_object, deployment, patch_spec, pods_of, report, serving, status_of

pytestmark = [pytest.mark.cluster]

TOKENS_PER_SECOND = 2


def body_for(model: str, drain: dict[str, int] | None) -> dict:
    body = deployment(model, metrics=(ERRORS,), steps=[{"weight": 50, "pause": "5s"}], progressDeadlineSeconds=120)
    spec = body["spec"]
    spec["env"] = [{"name": "SLIPWAY_SERVE_API", "value": "openai"},
                   {"name": "SLIPWAY_TOKENS_PER_SECOND", "value": str(TOKENS_PER_SECOND)}]  # fmt: skip
    spec["resources"] = {"cpu": "10m"}
    # Scaled on a metric this load keeps far below its target: the HPA goes to minReplicas.
    metric = {"type": "Pods", "name": "slipway_requests_in_flight", "targetAverageValue": "1000"}
    spec["autoscaling"] = {"minReplicas": 2, "maxReplicas": 2, "metrics": [metric]}
    if drain is not None:
        spec["drain"] = drain
    return body


def drivers(kube_api, namespace: str, model: str, seconds: tuple[int, int] = (20, 40)) -> tuple[LoadDriver, ...]:
    """13.3 predictions/s, and 6.7 streams/s: half lasting ``seconds[0]``, half ``seconds[1]``."""
    predict = LoadDriver.for_service(kube_api, namespace, "digits", rate=13.3, max_duration=900, concurrency=32)
    streams = [
        LoadDriver.for_service(kube_api, namespace, "digits", rate=3.35, max_duration=900, concurrency=200,
                               timeout=10, path="/v1/completions", stream=True,
                               body={"model": model, "prompt": f"p{tokens}", "max_tokens": tokens, "stream": True})
        for tokens in (seconds[0] * TOKENS_PER_SECOND, seconds[1] * TOKENS_PER_SECOND)
    ]  # fmt: skip
    return predict, streams[0], streams[1]


def broken(stats: LoadStats) -> dict[str, int]:
    """What failed or was cut, the faulty canary's own 500s apart."""
    failed = {f"HTTP {c}": n for c, n in stats.by_code.items() if c not in (200, 500)}
    return {**failed, **stats.transport_errors, **({"cut": stats.cut} if stats.cut else {})}


def total(stats: list[LoadStats]) -> LoadStats:
    def add(a: dict, b: dict) -> dict:
        return {k: a.get(k, 0) + b.get(k, 0) for k in {*a, *b}}

    out = stats[0]
    for s in stats[1:]:
        out = LoadStats(add(out.by_code, s.by_code), add(out.by_endpoint, s.by_endpoint),
                        add(out.by_version, s.by_version), add(out.transport_errors, s.transport_errors),
                        out.no_endpoint + s.no_endpoint, out.skipped + s.skipped,
                        out.refresh_errors + s.refresh_errors, out.cut + s.cut)  # fmt: skip
    return out


def pods_gone(kube_api, namespace: str, track: str) -> bool:

    return not pods_of(kube_api, namespace, track)


def test_promotion_scale_down_rollback_and_abort_cut_no_answer_from_a_healthy_pod(
    kube_api, namespace, operator, mlflow, trained
):
    operator()
    versions = Versions(mlflow, f"digits-{namespace}", trained)
    v1 = versions.publish()
    apply_object(kube_api, namespace, body_for(versions.model, None))  # spec.drain: the defaults
    serving(kube_api, namespace, v1, timeout=180)
    loads = drivers(kube_api, namespace, versions.model)
    seen: dict[str, dict[str, int]] = {}
    for load in loads:
        load.start()
    try:
        wait_for(lambda: loads[0].stats().responses >= 20, 30, "the load answered")

        def phase(name: str, act, done) -> None:
            before = total([d.stats() for d in loads])
            act()
            wait_for(done, 240, name, interval=1)
            after = total([d.stats() for d in loads])
            seen[name] = {k: after.by_code.get(k, 0) - before.by_code.get(k, 0) for k in after.by_code}
            seen[name] |= {k: n - before.transport_errors.get(k, 0) for k, n in after.transport_errors.items()
                           if n - before.transport_errors.get(k, 0)}  # fmt: skip
            if after.cut - before.cut:
                seen[name]["cut"] = after.cut - before.cut

        v2 = None

        def promote() -> None:
            nonlocal v2
            v2 = versions.publish()

        phase(
            "promotion",
            promote,
            lambda: (
                (s := status_of(kube_api, namespace)).get("phase") == "Promoted"
                and (s.get("stable") or {}).get("modelVersion") == v2
                and pods_gone(kube_api, namespace, "canary")
            ),
        )
        phase(
            "HPA scale-down 2 -> 1",
            lambda: patch_spec(kube_api, namespace, {"autoscaling": {"minReplicas": 1}}),
            lambda: (status_of(kube_api, namespace).get("stable") or {}).get("replicas") == 1,
        )
        patch_spec(kube_api, namespace, {"autoscaling": {"minReplicas": 2}})
        wait_for(
            lambda: (status_of(kube_api, namespace).get("stable") or {}).get("readyReplicas") == 2,
            120,
            "2 stable pods again",
        )
        bad = []
        phase(
            "rollback of a 30%-error canary",
            lambda: bad.append(versions.publish(errorRate="0.3")),
            lambda: (
                (status_of(kube_api, namespace).get("lastRollback") or {}).get("modelVersion") == bad[0]
                and pods_gone(kube_api, namespace, "canary")
            ),
        )
        v4 = []

        def abort_when_serving() -> None:
            patch_spec(kube_api, namespace, {"rollout": {"paused": True}})  # held at its step until aborted
            v4.append(versions.publish())
            wait_for(
                lambda: (
                    (s := status_of(kube_api, namespace).get("canary") or {}).get("modelVersion") == v4[0]
                    and s.get("readyReplicas")
                ),
                120,
                "the canary serving",
            )
            patch_spec(kube_api, namespace, {}, annotations={"slipway.dev/abort": "true"})

        phase(
            "abort",
            abort_when_serving,
            lambda: (
                (status_of(kube_api, namespace).get("lastRollback") or {}).get("modelVersion") == v4[0]
                and pods_gone(kube_api, namespace, "canary")
            ),
        )
    finally:
        # Streams begun before the last phase ended are waited for: every answer is counted.
        stats = [load.stop(timeout=60) for load in loads]
    everything = total(stats)
    problems = broken(everything)
    streams = total(stats[1:])
    report(f"\ndrain on (delay 5 s, maxRequestSeconds 60): {everything.responses} answers of which "
           f"{streams.responses} streams of 20-40 s; by phase {seen}; failed or cut: {problems or 'none'}; "
           f"500s (the 30%-error canary) {everything.by_code.get(500, 0)}")  # fmt: skip
    assert streams.by_code.get(200, 0) >= 100, streams
    assert not problems, problems


def test_without_drain_a_promotion_cuts_streams(kube_api, namespace, operator, mlflow, trained):
    operator()
    versions = Versions(mlflow, f"digits-{namespace}", trained)
    v1 = versions.publish()
    apply_object(kube_api, namespace, body_for(versions.model, {"delaySeconds": 0, "maxRequestSeconds": 0}))
    serving(kube_api, namespace, v1, timeout=180)
    loads = drivers(kube_api, namespace, versions.model, seconds=(10, 15))  # in flight whenever a pod goes
    for load in loads:
        load.start()
    try:
        wait_for(lambda: loads[0].stats().responses >= 100, 60, "100 answers before the promotion")
        v2 = versions.publish()
        wait_for(
            lambda: (
                (s := status_of(kube_api, namespace)).get("phase") == "Promoted"
                and (s.get("stable") or {}).get("modelVersion") == v2
            ),
            240,
            "v2 promoted",
            interval=1,
        )
    finally:
        stats = [load.stop(timeout=60) for load in loads]
    everything = total(stats)
    problems = broken(everything)
    report(f"\ndrain off (delay 0, maxRequestSeconds 0), one promotion: {everything.responses} answers; "
           f"failed or cut: {problems}")  # fmt: skip
    assert problems, "with drain off, pods removed mid-stream must cut streams (or the test shows nothing)"
