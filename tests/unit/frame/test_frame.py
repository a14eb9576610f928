"""The frame every pass runs in: typed status written only on change (with removals), Events on
transitions, API errors in kopf's vocabulary, failures as conditions, and the scheduler (pure)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import kopf
import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from localkube.wait import until
from slipway import children, kube
from slipway.controller import CRITICAL, NEW, TIMED, URGENT, PassFn, Scheduler, Slots
from slipway.inference.model import InferenceDeploymentSpec, InferenceDeploymentStatus
from slipway.kube import objects as kube_objects
from slipway.mlflow import MlflowUnavailable
from slipway.reconcile import REREAD, RETRIES, Context, attempt, backoff
from slipway.status.conditions import ready, reconciling, stalled


def context(status: dict[str, Any] | None = None, generation: int = 2, spec: dict[str, Any] | None = None) -> Context:
    body = {
        "apiVersion": "slipway.dev/v1alpha1",
        "kind": "InferenceDeployment",
        "metadata": {
            "name": "digits",
            "namespace": "team-a",
            "uid": "u1",
            "generation": generation,
            "resourceVersion": "10",
        },  # fmt: skip
        "spec": spec or {"model": {"name": "digits", "alias": "candidate"}, "image": "srv:1"},
        "status": status or {},
    }
    return Context(("inferencedeployments", "team-a", "digits"), body, InferenceDeploymentStatus, None, None, None)  # type: ignore[arg-type]


def test_first_write_sets_fields_conditions_generation_and_one_event() -> None:
    ctx = context()
    assert ctx.write(ready("Promoted", "serving 3"), phase="Promoted", current_step=1)
    assert ctx.patch["phase"] == "Promoted"
    assert ctx.patch["currentStep"] == 1  # written under the CRD's camelCase name
    assert ctx.patch["observedGeneration"] == 2
    assert {c["type"] for c in ctx.patch["conditions"]} == {"Ready", "Reconciling", "Stalled"}
    assert ctx.events == [("Normal", "Promoted", "serving 3")]


def test_nothing_is_written_at_rest() -> None:
    ctx = context()
    ctx.write(ready("Promoted", "serving 3"), phase="Promoted", current_step=1)
    settled = context(status=ctx.body["status"])
    assert not settled.write(ready("Promoted", "serving 3"), phase="Promoted", current_step=1)
    assert settled.patch == {} and settled.events == []


def test_removed_fields_are_sent_as_null_also_nested() -> None:
    stored = {"phase": "Analyzing", "currentStep": 1, "canary": {"modelVersion": "4", "replicas": 1, "weight": 20}}
    ctx = context(status=stored)
    ctx.write(ready("Promoted", "ok"), phase="Promoted", current_step=None,
                 canary={"replicas": 0, "weight": 0})  # fmt: skip
    assert ctx.patch["currentStep"] is None
    assert ctx.patch["canary"] == {"modelVersion": None, "replicas": 0, "weight": 0}


def test_status_fields_are_validated_against_the_model() -> None:
    with pytest.raises(ValueError, match="no fields"):
        context().write(ready("Promoted"), phaze="Promoted")
    with pytest.raises(ValueError):
        context().write(ready("Promoted"), phase="NotAPhase")


def test_a_new_stalled_reason_in_the_same_phase_posts_a_warning() -> None:
    ctx = context()
    ctx.write(reconciling("Analyzing", "step 1"), phase="Analyzing")
    later = context(status=ctx.body["status"])
    later.write(stalled("MlflowError", "bad answer"))
    assert later.events == [("Warning", "MlflowError", "bad answer")]


def api_error(status: int, body: str = "") -> ApiException:
    exc = ApiException(status=status, reason="Reason")
    exc.body = body
    return exc


@pytest.mark.parametrize(
    ("error", "expected", "delay"),
    [
        (api_error(409), kube.Conflict, 0),
        (api_error(429), kube.Unavailable, 1),
        (api_error(500), kube.Unavailable, 1),
        (api_error(503), kube.Unavailable, 1),
        (api_error(403, '{"message": "jobs is forbidden"}'), kube.Forbidden, 60),
        (api_error(422, '{"message": "spec.ports: Invalid"}'), kopf.PermanentError, None),
        (urllib3.exceptions.ReadTimeoutError(None, "/api", "read timed out"), kube.Unavailable, 1),
        (ConnectionRefusedError("refused"), kube.Unavailable, 1),
    ],
    ids=["409", "429", "500", "503", "403", "422", "read-timeout", "refused"],
)
def test_api_errors_map_to_kopf_errors(error: BaseException, expected: type[Exception], delay: int | None) -> None:
    def failing(**kwargs: Any) -> None:
        assert kwargs["_request_timeout"] == kube.REQUEST_TIMEOUT  # every call has a timeout
        raise error

    with pytest.raises(expected) as caught:
        kube.call("create Job team-a/x", failing)
    assert type(caught.value) is expected
    assert "create Job team-a/x" in str(caught.value)
    if delay is not None:
        assert caught.value.delay == delay  # type: ignore[attr-defined]


def test_forbidden_and_invalid_answers_carry_the_api_servers_words() -> None:
    with pytest.raises(kopf.TemporaryError, match="jobs is forbidden.*ClusterRole"):
        kube.call("x", lambda **_: (_ for _ in ()).throw(api_error(403, '{"message": "jobs is forbidden"}')))
    with pytest.raises(kopf.PermanentError, match="spec.ports: Invalid"):
        kube.call("x", lambda **_: (_ for _ in ()).throw(api_error(422, '{"message": "spec.ports: Invalid"}')))


def test_not_found_is_left_to_the_caller() -> None:
    with pytest.raises(ApiException):
        kube.call("read", lambda **_: (_ for _ in ()).throw(api_error(404)))


def failing_step(error: Exception) -> Any:
    def step(ctx: Context, spec: Any) -> float | None:
        raise error

    return step


@pytest.mark.parametrize(
    ("error", "condition", "reason", "requeue"),
    [
        (MlflowUnavailable("MLflow at http://m: connection refused"), "Reconciling", "MlflowUnavailable", 10),
        (kopf.TemporaryError("watch event pending", delay=5), "Reconciling", "KubernetesUnavailable", 5),
        (kube.Forbidden('admission webhook "vjobset.kb.io" denied the request', delay=60), "Stalled", "Forbidden", 60),
        (kopf.PermanentError("API 422"), "Stalled", "KubernetesError", 60),
        (
            children.OwnedByOther(children.Decision("Refuse", "Service", "digits", "owned by x")),
            "Stalled",
            "OwnedByOther",
            60,
        ),  # fmt: skip
    ],
)
def test_failures_become_conditions_and_a_retry(error: Exception, condition: str, reason: str, requeue: int) -> None:
    ctx = context(status={"observedGeneration": 2})
    ctx.mlflow = object()  # type: ignore[assignment]
    assert attempt(ctx, InferenceDeploymentSpec, failing_step(error)) == requeue
    cond = next(c for c in ctx.patch["conditions"] if c["type"] == condition)
    assert (cond["status"], cond["reason"]) == ("True", reason)


def test_retry_after_is_read_from_the_answer() -> None:
    exc = api_error(429)
    exc.headers = {"Retry-After": "7"}
    with pytest.raises(kube.Unavailable) as caught:
        kube.call("x", lambda **_: (_ for _ in ()).throw(exc))
    assert caught.value.retry_after == 7.0
    exc.headers = {"Retry-After": "Wed, 21 Oct 2026 07:28:00 GMT"}  # a date: not one the API server sends
    with pytest.raises(kube.Unavailable) as caught:
        kube.call("x", lambda **_: (_ for _ in ()).throw(exc))
    assert caught.value.retry_after is None


def test_backoff_doubles_from_1s_to_5min_with_jitter_and_honours_retry_after() -> None:
    low, high = (lambda: 0.0), (lambda: 1.0)
    assert [backoff(n, rng=high) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 8.0]
    assert [backoff(n, rng=low) for n in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 4.0]
    assert backoff(20, rng=high) == 300.0 and backoff(20, rng=low) == 150.0
    assert backoff(1, retry_after=30, rng=high) == 30.0  # never sooner than the server asked
    delays = {round(backoff(5), 3) for _ in range(50)}
    assert len(delays) > 10 and all(8 <= d <= 16 for d in delays)  # spread: objects failing together part


def test_unavailable_api_backs_off_per_object_shows_a_condition_after_three_and_resets_on_success() -> None:
    memory: dict[str, Any] = {}
    delays, conditions = [], []
    for _ in range(4):
        ctx = context(status={"observedGeneration": 2})
        ctx.mlflow, ctx.memory = object(), memory  # type: ignore[assignment]
        delays.append(attempt(ctx, InferenceDeploymentSpec, failing_step(kube.Unavailable("API 503"))))
        conditions.append(next((c["reason"] for c in ctx.patch.get("conditions", []) if c["type"] == "Reconciling"),
                               None))  # fmt: skip
    assert conditions == [None, None, "KubernetesUnavailable", "KubernetesUnavailable"]
    assert 0.5 <= delays[0] <= 1 and 4 <= delays[3] <= 8
    assert memory[RETRIES] == 4
    ctx = context(status={"observedGeneration": 2})
    ctx.mlflow, ctx.memory = object(), memory  # type: ignore[assignment]
    assert attempt(ctx, InferenceDeploymentSpec, lambda ctx, spec: None) is None
    assert RETRIES not in memory


def test_a_conflict_reruns_at_once_reading_the_api_server_quietly() -> None:
    ctx = context(status={"observedGeneration": 2})
    ctx.mlflow = object()  # type: ignore[assignment]

    def step(ctx: Context, spec: Any) -> float | None:
        ctx.write(ready("Promoted"), phase="Promoted")
        raise kube.Conflict("replace Deployment team-a/digits-stable: API server answered 409 Conflict", delay=0)

    assert attempt(ctx, InferenceDeploymentSpec, step) == 0.0
    assert (ctx.patch, ctx.events) == ({}, [])  # no condition, no Event: the next pass redoes it all
    assert ctx.memory[REREAD] is True
    # In a row (a child's watch event still on its way): a short, growing wait, never a spin.
    delays = [attempt(ctx, InferenceDeploymentSpec, step) for _ in range(7)]
    assert delays == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]


def test_an_invalid_spec_is_stalled_naming_the_field_and_waits_for_a_change() -> None:
    ctx = context(spec={"model": {"name": "digits"}, "image": "srv:1", "rollout": {"steps": [{"weight": 150}]}})
    assert attempt(ctx, InferenceDeploymentSpec, failing_step(AssertionError("not reached"))) is None
    stalled_cond = next(c for c in ctx.patch["conditions"] if c["type"] == "Stalled")
    assert stalled_cond["reason"] == "InvalidSpec" and "spec.rollout.steps" in stalled_cond["message"]


def held_passes(blocks: Callable[[str, list[str]], bool]) -> tuple[list[str], asyncio.Event, PassFn]:
    """(names of the keys passed, in order; a gate; a pass function that records its key and, when
    ``blocks(name, runs so far)``, waits for the gate). Inside a running event loop."""
    runs: list[str] = []
    gate = asyncio.Event()
    loop = asyncio.get_running_loop()

    def run(key: tuple[str, str, str]) -> float | None:
        runs.append(key[2])
        if blocks(key[2], runs):
            asyncio.run_coroutine_threadsafe(gate.wait(), loop).result(5)
        return None

    return runs, gate, run


def test_scheduler_runs_one_pass_per_key_dedups_and_reruns_after_a_wake_during_a_pass() -> None:
    async def scenario() -> list[str]:
        runs, gate, run = held_passes(lambda _name, runs: len(runs) == 1)

        scheduler = Scheduler(run, workers=2)
        key = ("inferencedeployments", "n", "a")
        for _ in range(3):
            scheduler.wake(key)  # three wake-ups before the pass: one pass
        while not scheduler.running:
            await asyncio.sleep(0.01)
        scheduler.wake(key)  # during the pass: exactly one more pass after it
        scheduler.wake(key)
        gate.set()
        assert await scheduler.idle(5)
        return runs

    assert asyncio.run(scenario()) == ["a", "a"]


def test_a_pass_that_ends_after_its_loop_closed_asks_for_no_timer() -> None:
    async def make() -> Scheduler:
        return Scheduler(lambda key: None)

    loop = asyncio.new_event_loop()
    scheduler = loop.run_until_complete(make())
    loop.close()
    scheduler.wake(("x", "n", "late"), 1.0, requeue=True)  # raised "Event loop is closed" before
    assert not scheduler.timers


def test_scheduler_requeues_when_a_pass_asks_and_backs_off_on_errors() -> None:
    async def scenario() -> tuple[int, int]:
        calls = {"time": 0, "error": 0}

        def run(key: tuple[str, str, str]) -> float | None:
            calls[key[2]] += 1
            if key[2] == "error":
                raise RuntimeError("boom")
            return 0.05 if calls["time"] < 3 else None

        scheduler = Scheduler(run)
        scheduler.wake(("x", "n", "time"))
        scheduler.wake(("x", "n", "error"))
        await asyncio.sleep(0.5)
        scheduler.forget(("x", "n", "error"))
        return calls["time"], calls["error"]

    timed, errors = asyncio.run(scenario())
    assert timed == 3  # ran until the pass stopped asking for time
    assert errors == 1  # the first retry after an error waits a second (backoff), not a busy loop


def test_a_pass_at_the_generation_already_observed_announces_nothing_and_writes_nothing_at_rest() -> None:
    # (A new generation's announcement, written before the step's I/O, is checked against the real
    # API server by tests/integration/test_health.py, from every status version a watch saw.)
    states = (("Ready", "True"), ("Reconciling", "False"), ("Stalled", "False"))
    settled = {"observedGeneration": 2, "conditions": [
        {"type": t, "status": v, "reason": "Promoted", "message": "", "lastTransitionTime": "t",
         "observedGeneration": 2} for t, v in states]}  # fmt: skip
    ctx = context(status=settled, generation=2)
    ctx.mlflow = object()  # type: ignore[assignment]
    attempt(ctx, InferenceDeploymentSpec, lambda c, s: c.write(ready("Promoted")) and None)
    assert ctx.patch == {} and ctx.events == []  # ctx.kube is None: any write would have failed


def test_during_a_sweep_a_new_object_s_first_pass_writes_no_announcement_but_a_changed_one_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A sweep of a thousand new objects: a first pass that makes only the Job must not cost a
    # status write and an Event more each (an object without status has no Ready to mistake).
    flushed: list[dict[str, Any]] = []
    monkeypatch.setattr("slipway.reconcile.flush", lambda ctx: flushed.append(dict(ctx.patch)))
    for status, generation, backlog, announced in (
        ({}, 1, 5, False),
        ({}, 1, 0, True),
        ({"observedGeneration": 1, "phase": "Pending"}, 2, 5, True),
    ):
        flushed.clear()
        ctx = context(status=status, generation=generation)
        ctx.mlflow = object()  # type: ignore[assignment]
        ctx.backlog = lambda n=backlog: n  # type: ignore[misc]
        attempt(ctx, InferenceDeploymentSpec, lambda c, s: None)
        assert bool(flushed) is announced, (status, backlog)
        if announced:
            assert flushed[0]["observedGeneration"] == generation
            assert {c["type"]: c["reason"] for c in flushed[0]["conditions"]}["Reconciling"] == "NewGeneration"
    # Once per object: its next pass (the sweep still arriving, no status written yet) announces
    # before its I/O (a TrainingRun's MLflow run).
    flushed.clear()
    first = context(status={}, generation=1)
    first.mlflow = object()  # type: ignore[assignment]
    first.backlog = lambda: 5  # type: ignore[method-assign]
    attempt(first, InferenceDeploymentSpec, lambda c, s: None)
    again = context(status={}, generation=1)
    again.mlflow, again.memory, again.backlog = first.mlflow, first.memory, first.backlog  # type: ignore[method-assign]
    attempt(again, InferenceDeploymentSpec, lambda c, s: None)
    assert len(flushed) == 1 and flushed[0]["observedGeneration"] == 1


def test_scheduler_runs_passes_woken_by_a_change_before_passes_only_a_requeue_asked_for() -> None:
    # At scale, hundreds of training runs ask for a progress pass every 15 s: those passes must
    # never hold back a new object's first pass, nor a change (a pod or Job event) of another.
    async def scenario() -> list[str]:
        runs, gate, run = held_passes(lambda name, _runs: name == "busy")

        scheduler = Scheduler(run, workers=1)
        slots = scheduler.slots
        scheduler.wake(("trainingruns", "n", "busy"))
        await until(lambda: bool(scheduler.started))  # the busy pass holds the only slot
        for name in ("poll-1", "poll-2", "poll-3"):
            scheduler.wake(("trainingruns", "n", name), requeue=True)  # due now, queued first
        await until(lambda: len(slots.timed) == 3)
        scheduler.wake(("trainingruns", "n", "new"))  # a new object, queued after them
        await until(lambda: len(slots.lanes["new"]) == 1)
        scheduler.wake(("trainingruns", "n", "poll-3"))  # a change of one that waits as a poll: once
        await until(lambda: len(slots.urgent) == 1 and len(slots.timed) == 2)
        gate.set()
        assert await scheduler.idle(5)
        return runs

    assert asyncio.run(scenario()) == ["busy", "new", "poll-3", "poll-1", "poll-2"]


def test_a_new_objects_first_pass_goes_before_the_changes_of_objects_already_reconciled() -> None:
    # A sweep: a thousand TrainingRuns applied while the pods of the first ones start and change.
    # Each new run's first pass (the one that creates its Job) goes before those pod-woken passes.
    async def scenario() -> list[str]:
        runs, gate, run = held_passes(lambda name, runs: name == "busy" and runs.count("busy") == 2)

        scheduler = Scheduler(run, workers=1)
        for name in ("running-1", "running-2", "busy"):
            scheduler.wake(("trainingruns", "n", name))
        assert await scheduler.idle(5)
        scheduler.wake(("trainingruns", "n", "busy"))  # its second pass holds the only slot
        await until(lambda: bool(scheduler.started))
        for name in ("running-1", "running-2"):
            scheduler.wake(("trainingruns", "n", name))  # their pods changed
        scheduler.wake(("trainingruns", "n", "fresh"))  # applied after those changes
        await until(lambda: len(scheduler.slots.urgent) == 2 and len(scheduler.slots.lanes["new"]) == 1)
        gate.set()
        assert await scheduler.idle(5)
        return runs[4:]

    assert asyncio.run(scenario()) == ["fresh", "running-1", "running-2"]


def test_a_new_objects_first_pass_has_slots_that_slow_passes_of_others_never_take() -> None:
    # MLflow slow: every pass of a running TrainingRun waits on it. 4 slots, one for canaries, one
    # for first passes: two slow passes hold the rest, a third waits, and a new object runs at once.
    async def scenario() -> tuple[list[str], int]:
        runs, gate, run = held_passes(lambda name, _runs: name.startswith("slow"))
        scheduler = Scheduler(run, workers=4, for_new=1)
        for name in ("slow-1", "slow-2", "slow-3"):
            scheduler.passed.add(("trainingruns", "n", name))  # reconciled before: not new
            scheduler.wake(("trainingruns", "n", name))
        await until(lambda: len(scheduler.started) == 2 and len(scheduler.slots.urgent) == 1)
        scheduler.wake(("trainingruns", "n", "fresh"))
        await until(lambda: "fresh" in runs)
        waiting = len(scheduler.slots.urgent)
        gate.set()
        assert await scheduler.idle(5)
        return runs, waiting

    runs, waiting = asyncio.run(scenario())
    assert runs[:3] == ["slow-1", "slow-2", "fresh"] and waiting == 1  # slow-3 still waited
    assert sorted(runs) == ["fresh", "slow-1", "slow-2", "slow-3"]


def test_an_active_rollouts_pass_gets_the_reserved_slot_however_many_slow_passes_wait() -> None:
    # A blackholed MLflow: every other pass blocks until its call times out. 4 slots, 8 such passes:
    # the canary's analysis still runs at once, in the slot kept for the critical lane.
    async def scenario() -> tuple[float, int]:
        loop = asyncio.get_running_loop()
        gate = asyncio.Event()
        started: dict[str, float] = {}

        def run(key: tuple[str, str, str]) -> float | None:
            started[key[2]] = loop.time()
            if key[2].startswith("slow"):
                asyncio.run_coroutine_threadsafe(gate.wait(), loop).result(5)
            return None

        scheduler = Scheduler(run, workers=4)
        for i in range(8):
            scheduler.wake(("modelartifacts", "n", f"slow-{i}"))
        await until(lambda: len(scheduler.started) == 3)  # 3 of 4 slots: one is kept
        canary = ("inferencedeployments", "n", "canary")
        scheduler.mark_critical(canary, True)
        woken = loop.time()
        scheduler.wake(canary, requeue=True)  # its analysis tick
        await until(lambda: "canary" in started)
        waited = loop.time() - woken
        slow_running = sum(1 for k in scheduler.started if k[2].startswith("slow"))
        gate.set()
        assert await scheduler.idle(5)
        return waited, slow_running

    waited, slow_running = asyncio.run(scenario())
    assert waited < 0.5 and slow_running == 3


def test_a_timed_pass_that_waited_long_enough_goes_before_new_changes() -> None:
    async def scenario() -> list[str]:
        loop = asyncio.get_running_loop()
        order: list[str] = []
        slots = Slots(1, reserved=0, ageing=0.2)
        await slots.acquire(("x", "n", "busy"), URGENT)

        async def wait_for_slot(name: str, lane: str) -> None:
            await slots.acquire(("x", "n", name), lane)
            order.append(name)
            slots.release(lane, ("x", "n", name))

        tasks = [loop.create_task(wait_for_slot("poll", TIMED))]
        await asyncio.sleep(0.01)
        tasks.append(loop.create_task(wait_for_slot("change-1", URGENT)))
        await asyncio.sleep(0.01)
        slots.release(URGENT, ("x", "n", "busy"))  # change-1 goes first: the poll has not waited 0.2 s yet
        await asyncio.sleep(0.01)
        await slots.acquire(("x", "n", "busy-2"), URGENT)  # a stream of changes keeps the slot busy
        tasks.append(loop.create_task(wait_for_slot("change-2", URGENT)))
        await asyncio.sleep(0.3)
        slots.release(URGENT, ("x", "n", "busy-2"))  # now the poll has aged: it goes before change-2
        await asyncio.gather(*tasks)
        return order

    assert asyncio.run(scenario()) == ["change-1", "poll", "change-2"]


def test_while_a_sweep_waits_the_kind_with_the_quickest_first_passes_goes_first() -> None:
    # InferenceDeployments' first passes wait on MLflow (1.2 s); a sweep's TrainingRuns only make
    # their Job (0.12 s). With every slot for first passes busy, the sweep goes first, older or not.
    async def scenario() -> list[str]:
        loop = asyncio.get_running_loop()
        order: list[str] = []
        slots = Slots(4, reserved=1)  # 3 slots for first passes
        slots.first_pass_seconds.update({"inferencedeployments": 1.2, "trainingruns": 0.12})
        held = [("inferencedeployments", "n", f"id-{i}") for i in range(3)]
        for key in held:  # arrived first, nobody else waiting: they took every slot
            await slots.acquire(key, NEW)

        async def first_pass(key: tuple[str, str, str]) -> None:
            await slots.acquire(key, NEW)
            order.append(key[2])
            slots.release(NEW, key, 0.1)

        tasks = [loop.create_task(first_pass(("inferencedeployments", "n", "id-3")))]
        tasks += [loop.create_task(first_pass(("trainingruns", "n", f"tr-{i}"))) for i in range(4)]
        await until(lambda: len(slots.lanes[NEW]) == 5)
        slots.release(NEW, held[0], 1.2)  # one slot: the four runs, one after the other, then id-3
        await asyncio.wait_for(asyncio.gather(*tasks), 5)
        return order

    assert asyncio.run(scenario()) == ["tr-0", "tr-1", "tr-2", "tr-3", "id-3"]


def test_kinds_not_measured_yet_take_their_first_passes_oldest_first() -> None:
    async def scenario() -> list[str]:
        loop = asyncio.get_running_loop()
        order: list[str] = []
        slots = Slots(2, reserved=1)  # one slot for first passes
        slots.first_pass_seconds["modelartifacts"] = 0.5
        await slots.acquire(("modelartifacts", "n", "busy"), NEW)

        async def first_pass(key: tuple[str, str, str]) -> None:
            await slots.acquire(key, NEW)
            order.append(key[2])
            slots.release(NEW, key, 1.0)

        tasks = []
        for key in (("modelartifacts", "n", "ma"), ("inferencedeployments", "n", "id"), ("trainingruns", "n", "tr")):
            tasks.append(loop.create_task(first_pass(key)))
            await until(lambda: len(slots.lanes[NEW]) == len(tasks))
        slots.release(NEW, ("modelartifacts", "n", "busy"), 0.5)
        await asyncio.wait_for(asyncio.gather(*tasks), 5)
        return order

    # The unmeasured kinds, oldest first (the first of them measured 1 s, slower than the others
    # then), and the measured one last.
    assert asyncio.run(scenario()) == ["id", "tr", "ma"]


def test_a_kind_not_measured_yet_takes_one_slot_until_its_first_pass_is_measured() -> None:
    # The first deployments arrive in the middle of a sweep: one of them goes (it may be quick),
    # the next waits behind the sweep until that one's duration is known.
    async def scenario() -> tuple[list[str], dict[str, float]]:
        loop = asyncio.get_running_loop()
        order: list[str] = []
        slots = Slots(3, reserved=1)  # two slots for first passes
        slots.first_pass_seconds["trainingruns"] = 0.12
        busy = [("trainingruns", "n", f"busy-{i}") for i in range(2)]
        for key in busy:
            await slots.acquire(key, NEW)

        async def first_pass(kind: str, name: str) -> None:
            await slots.acquire((kind, "n", name), NEW)
            order.append(name)

        tasks = []
        for kind, name in (
            ("inferencedeployments", "id-1"),
            ("inferencedeployments", "id-2"),
            ("trainingruns", "tr-1"),
        ):
            tasks.append(loop.create_task(first_pass(kind, name)))
            await until(lambda: len(slots.lanes[NEW]) == len(tasks))
        slots.release(NEW, busy[0], 0.12)  # id-1: its kind is not measured, and none of it runs
        await until(lambda: order == ["id-1"])
        slots.release(NEW, busy[1], 0.12)  # tr-1: id-1 runs unmeasured, so id-2 waits
        await until(lambda: order == ["id-1", "tr-1"])
        slots.release(NEW, ("inferencedeployments", "n", "id-1"), 1.2)  # measured (others waited)
        await until(lambda: len(order) == 3)
        for name in ("tr-1", "id-2"):
            slots.release(NEW, ("trainingruns" if name.startswith("tr") else "inferencedeployments", "n", name), None)
        await asyncio.wait_for(asyncio.gather(*tasks), 5)
        return order, dict(slots.first_pass_seconds)

    order, seconds = asyncio.run(scenario())
    assert order == ["id-1", "tr-1", "id-2"]
    assert seconds == {"trainingruns": pytest.approx(0.12), "inferencedeployments": pytest.approx(1.2)}


def test_a_slower_kind_none_of_whose_first_passes_runs_goes_first_once_it_waited_long_enough() -> None:
    async def scenario() -> list[str]:
        loop = asyncio.get_running_loop()
        order: list[str] = []
        slots = Slots(3, reserved=1, new_ageing=5.0)  # two slots for first passes
        slots.first_pass_seconds.update({"inferencedeployments": 1.2, "trainingruns": 0.12})
        busy = [("trainingruns", "n", f"busy-{i}") for i in range(2)]
        for key in busy:
            await slots.acquire(key, NEW)

        async def first_pass(kind: str, name: str) -> None:
            await slots.acquire((kind, "n", name), NEW)
            order.append(name)

        def age_deployments() -> None:  # as if they had waited 5 s
            for waiter in slots.lanes[NEW]:
                if waiter.key[0] == "inferencedeployments":
                    waiter.since -= 5.0

        tasks = []
        for kind, name in (
            ("inferencedeployments", "id-1"),
            ("inferencedeployments", "id-2"),
            ("trainingruns", "tr-1"),
        ):
            tasks.append(loop.create_task(first_pass(kind, name)))
            await until(lambda: len(slots.lanes[NEW]) == len(tasks))
        slots.release(NEW, busy[0], 0.12)  # tr-1 first: id-1 has not waited 5 s
        await until(lambda: order == ["tr-1"])
        for name in ("tr-2", "tr-3"):  # the sweep goes on
            tasks.append(loop.create_task(first_pass("trainingruns", name)))
        await until(lambda: len(slots.lanes[NEW]) == 4)
        age_deployments()
        slots.release(NEW, busy[1], 0.12)  # id-1 has aged, and no deployment's first pass runs
        await until(lambda: len(order) == 2)
        slots.release(NEW, ("trainingruns", "n", "tr-1"), 0.12)  # id-2 has aged too, but id-1 runs
        await until(lambda: len(order) == 3)
        slots.release(NEW, ("trainingruns", "n", order[2]), 0.12)
        await until(lambda: len(order) == 4)
        slots.release(NEW, ("inferencedeployments", "n", "id-1"), 1.2)
        await asyncio.wait_for(asyncio.gather(*tasks), 5)
        return order

    assert asyncio.run(scenario()) == ["tr-1", "id-1", "tr-2", "tr-3", "id-2"]


def test_only_first_passes_that_ran_while_others_waited_and_ended_well_are_averaged() -> None:
    # A first pass alone does more than one in a sweep (a TrainingRun's makes its MLflow run too):
    # the order matters only while several wait, so only such passes are measured.
    async def scenario() -> dict[str, float]:
        loop = asyncio.get_running_loop()
        slots = Slots(2, reserved=1)  # one slot for first passes
        alone = ("trainingruns", "n", "alone")
        await slots.acquire(alone, NEW)  # nobody waited
        waiting = [loop.create_task(slots.acquire(("trainingruns", "n", f"tr-{i}"), NEW)) for i in range(3)]
        await until(lambda: len(slots.lanes[NEW]) == 3)
        slots.release(NEW, alone, 5.0)  # not measured: tr-0 gets the slot, tr-1 and tr-2 wait
        await waiting[0]
        slots.release(NEW, ("trainingruns", "n", "tr-0"), 0.1)  # measured
        await waiting[1]
        slots.release(NEW, ("trainingruns", "n", "tr-1"), None)  # it failed: not measured
        await waiting[2]
        slots.release(NEW, ("trainingruns", "n", "tr-2"), 7.0)  # nobody waited when it began
        return dict(slots.first_pass_seconds)

    assert asyncio.run(scenario()) == {"trainingruns": pytest.approx(0.1)}


def test_a_scheduler_hands_each_pass_s_duration_to_its_slot_and_none_for_a_failed_one() -> None:
    async def scenario() -> dict[str, float | None]:
        def run(key: tuple[str, str, str]) -> float | None:
            if key[2] == "bad":
                raise RuntimeError("a bug")
            time.sleep(0.2 if key[2] == "slow" else 0.0)
            return None

        scheduler = Scheduler(run, workers=4, for_new=1)
        released: dict[str, float | None] = {}
        release = scheduler.slots.release

        def spy(lane: str, key: tuple[str, str, str] | None = None, seconds: float | None = None) -> None:
            assert key is not None
            released[key[2]] = seconds
            release(lane, key, seconds)

        scheduler.slots.release = spy  # type: ignore[method-assign]
        for name in ("slow", "bad"):
            scheduler.wake(("inferencedeployments", "n", name))
        await until(lambda: len(released) == 2)
        scheduler.forget(("inferencedeployments", "n", "bad"))  # no retry
        return released

    released = asyncio.run(scenario())
    assert released["bad"] is None
    assert released["slow"] is not None and released["slow"] >= 0.2


def test_a_waiter_cancelled_in_any_lane_hands_nothing_over_and_loses_no_slot() -> None:
    async def scenario() -> dict[str, int]:
        loop = asyncio.get_running_loop()
        slots = Slots(2, reserved=1)
        await slots.acquire(("x", "n", "a"), URGENT)  # the one non-reserved slot
        waiting = [loop.create_task(slots.acquire(("x", "n", f"w{i}"), lane)) for i, lane in enumerate((URGENT, TIMED))]
        await asyncio.sleep(0.01)
        for task in waiting:
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
        slots.release(URGENT, ("x", "n", "a"))
        await slots.acquire(("x", "n", "c"), CRITICAL)
        await slots.acquire(("x", "n", "d"), URGENT)
        return dict(slots.busy)

    assert asyncio.run(scenario()) == {"critical": 1, "new": 0, "urgent": 1, "timed": 0}


def test_a_first_pass_cancelled_waiting_or_as_its_slot_is_handed_over_leaves_no_count_behind() -> None:
    # A kind's count of running first passes decides whether it may age ahead: one left behind
    # would keep that kind behind every sweep.
    async def scenario() -> tuple[bool, dict[str, int], dict[str, int], set[Any]]:
        loop = asyncio.get_running_loop()
        slots = Slots(2, reserved=1)  # one slot for first passes
        held, handed, behind = (("trainingruns", "n", name) for name in ("held", "handed", "behind"))
        await slots.acquire(held, NEW)
        handing = loop.create_task(slots.acquire(handed, NEW))
        dropped = loop.create_task(slots.acquire(("inferencedeployments", "n", "dropped"), NEW))
        last = loop.create_task(slots.acquire(behind, NEW))
        await until(lambda: len(slots.lanes[NEW]) == 3)
        dropped.cancel()  # while it waits
        await asyncio.gather(dropped, return_exceptions=True)
        slots.release(NEW, held, None)  # the slot goes to "handed", granted while "behind" waits...
        was_contended = handed in slots.contended
        handing.cancel()  # ...which is cancelled before it runs: the slot passes on to "behind"
        await asyncio.gather(handing, return_exceptions=True)
        await last
        slots.release(NEW, behind, None)
        return was_contended, dict(slots.busy), dict(slots.new_by_kind), slots.contended

    was_contended, busy, counted, contended = asyncio.run(scenario())
    assert was_contended  # so that its cancellation had a mark to clear
    assert busy == {"critical": 0, "new": 0, "urgent": 0, "timed": 0}
    assert counted == {"trainingruns": 0} and contended == set()


def test_a_first_pass_released_without_its_key_is_an_error_that_changes_no_count() -> None:
    async def scenario() -> tuple[dict[str, int], dict[str, int]]:
        slots = Slots(2, reserved=1)
        await slots.acquire(("trainingruns", "n", "a"), NEW)
        with pytest.raises(ValueError, match="its key"):
            slots.release(NEW)
        return dict(slots.busy), dict(slots.new_by_kind)

    busy, counted = asyncio.run(scenario())
    assert busy["new"] == 1 and counted == {"trainingruns": 1}  # the slot is still held, and counted once


def test_a_timed_waiter_a_change_promotes_releases_the_lane_it_was_granted() -> None:
    async def scenario() -> dict[str, int]:
        loop = asyncio.get_running_loop()
        slots = Slots(1, reserved=0)
        await slots.acquire(("x", "n", "busy"), URGENT)
        waiting = loop.create_task(slots.acquire(("x", "n", "poll"), TIMED))
        await asyncio.sleep(0.01)
        slots.promote(("x", "n", "poll"))  # a change woke it while it waited
        slots.release(URGENT, ("x", "n", "busy"))
        granted = await waiting
        slots.release(granted, ("x", "n", "poll"))
        return dict(slots.busy)

    assert asyncio.run(scenario()) == {"critical": 0, "new": 0, "urgent": 0, "timed": 0}  # none lost or doubled


def test_a_typed_answer_cut_while_its_body_is_read_is_an_outage_not_a_crash() -> None:
    class Cut:
        @property
        def data(self) -> bytes:
            raise urllib3.exceptions.ReadTimeoutError(None, "/apis/batch/v1", "read timed out")

    class Garbled:
        data = b"<html>proxy error</html>"

    for answer in (Cut(), Garbled()):
        with pytest.raises(kube.Unavailable, match="create Job team-a/x"):
            kube_objects._typed("create Job team-a/x", lambda *a, answer=answer, **kw: answer)

    class Whole:
        data = b'{"kind": "Job"}'

    assert kube_objects._typed("read Job team-a/x", lambda *a, **kw: Whole()) == {"kind": "Job"}


# -- Namespaces take turns (Slots: the namespace with the fewest passes running first, a cap) ------


def test_a_namespace_s_burst_of_first_passes_does_not_hold_back_another_namespace_s_first_pass() -> None:
    # Namespace "burst" applied 50 TrainingRuns (the quickest kind) and holds every slot for first
    # passes; "other" applies one InferenceDeployment (a slower kind) after them: it takes the
    # next slot freed, not the 51st.
    async def scenario() -> list[str]:
        loop = asyncio.get_running_loop()
        order: list[str] = []
        slots = Slots(4, reserved=1)  # 3 slots for first passes
        slots.first_pass_seconds.update({"inferencedeployments": 1.2, "trainingruns": 0.12})
        held = [("trainingruns", "burst", f"held-{i}") for i in range(3)]
        for key in held:
            await slots.acquire(key, NEW)

        async def first_pass(key: tuple[str, str, str]) -> None:
            await slots.acquire(key, NEW)
            order.append(f"{key[1]}/{key[2]}")

        tasks = [loop.create_task(first_pass(("trainingruns", "burst", f"tr-{i}"))) for i in range(50)]
        await until(lambda: len(slots.lanes[NEW]) == 50)
        tasks.append(loop.create_task(first_pass(("inferencedeployments", "other", "id"))))
        await until(lambda: len(slots.lanes[NEW]) == 51)
        slots.release(NEW, held[0], 0.12)
        await until(lambda: len(order) == 1)
        slots.release(NEW, held[1], 0.12)
        await until(lambda: len(order) == 2)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return order

    assert asyncio.run(scenario()) == ["other/id", "burst/tr-0"]


def test_namespaces_waiting_take_turns_the_one_with_fewest_passes_running_first() -> None:
    async def scenario() -> list[str]:
        loop = asyncio.get_running_loop()
        order: list[str] = []
        slots = Slots(3, reserved=0)
        running = [("x", "a", f"held-{i}") for i in range(3)]
        for key in running:
            await slots.acquire(key, URGENT)

        async def change(key: tuple[str, str, str]) -> None:
            await slots.acquire(key, URGENT)
            order.append(f"{key[1]}/{key[2]}")
            running.append(key)

        tasks = []
        for namespace, count in (("a", 5), ("b", 3), ("c", 3)):  # a's waiters oldest, then b's, then c's
            tasks += [loop.create_task(change(("x", namespace, f"{namespace}{i}"))) for i in range(count)]
        await until(lambda: len(slots.urgent) == 11)
        for done in range(1, 7):  # the oldest running pass ends, six times
            slots.release(URGENT, running.pop(0))
            await until(lambda done=done: len(order) == done)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return order

    # b and c (none running) before a's older waiters; then a (none running once its three ended), and
    # so on by the count of passes running, the older namespace first on a tie.
    assert asyncio.run(scenario()) == ["b/b0", "c/c0", "a/a0", "b/b1", "c/c1", "a/a1"]


def test_a_namespace_at_its_share_of_the_slots_gets_none_while_another_namespace_waits() -> None:
    # 4 slots, a namespace may hold 2 while others wait. "a" holds 2 and its next pass is a first
    # pass (the lane before changes); "b" waits with a change: b goes first, then a (nobody else waits).
    async def scenario() -> tuple[list[str], dict[str, int]]:
        loop = asyncio.get_running_loop()
        order: list[str] = []
        slots = Slots(4, reserved=0, namespace_share=0.5)
        for key in (("x", "a", "1"), ("x", "a", "2"), ("x", "c", "1"), ("x", "c", "2")):
            await slots.acquire(key, URGENT)

        async def wait(key: tuple[str, str, str], lane: str) -> None:
            await slots.acquire(key, lane)
            order.append(f"{key[1]}/{key[2]}")

        tasks = [loop.create_task(wait(("trainingruns", "a", "new"), NEW))]
        await until(lambda: len(slots.lanes[NEW]) == 1)
        tasks.append(loop.create_task(wait(("x", "b", "change"), URGENT)))
        await until(lambda: len(slots.urgent) == 1)
        slots.release(URGENT, ("x", "c", "1"))
        await until(lambda: len(order) == 1)
        slots.release(URGENT, ("x", "c", "2"))
        await asyncio.wait_for(asyncio.gather(*tasks), 5)
        return order, dict(slots.by_namespace)

    order, running = asyncio.run(scenario())
    assert order == ["b/change", "a/new"]
    assert running == {"a": 3, "b": 1}  # over its share only once nobody else waited


def test_a_pass_released_without_its_key_is_an_error_and_counts_stay() -> None:
    async def scenario() -> dict[str, int]:
        slots = Slots(2, reserved=0)
        await slots.acquire(("x", "n", "a"), URGENT)
        with pytest.raises(ValueError, match="its key"):
            slots.release(URGENT)
        slots.release(URGENT, ("x", "n", "a"))
        return dict(slots.by_namespace)

    assert asyncio.run(scenario()) == {}
