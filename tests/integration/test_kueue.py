"""TrainingRuns on real Kueue (v0.17.0, built from the Go module proxy, its webhooks served to the
local API server): a GPU quota is never exceeded, every run is admitted in turn and says so in
Kueue's words, and a higher-priority run preempts a lower one, which resumes from its checkpoint
without the eviction counting against maxRestarts."""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import pytest
from kubernetes import client, watch

from localkube.faultproxy import FaultProxy
from localkube.wait import wait_for
from slipway import GROUP, VERSION
from slipway_testing import apply_object, report, training_run, wait_status

pytestmark = pytest.mark.cluster


class Recorder:
    """Every status a watch shows of the namespace's TrainingRuns: (phase, Ready's reason) and Ready's
    message, each in order."""

    def __init__(self, kube_api: client.ApiClient, namespace: str) -> None:
        self.seen: dict[str, list[tuple[str, str]]] = defaultdict(list)
        self.messages: dict[str, list[str]] = defaultdict(list)
        self.positions: dict[str, list[int | None]] = defaultdict(list)  # status.queue.position, as it changed
        self.stop = threading.Event()
        self.api, self.namespace = client.CustomObjectsApi(kube_api), namespace
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            stream = watch.Watch().stream(self.api.list_namespaced_custom_object, GROUP, VERSION, self.namespace,
                                          "trainingruns", timeout_seconds=5)  # fmt: skip
            for event in stream:
                obj = event["object"]
                status = obj.get("status") or {}
                ready = next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), {})
                entry = (status.get("phase") or "", ready.get("reason") or "")
                name = obj["metadata"]["name"]
                if not self.seen[name] or self.seen[name][-1] != entry:
                    self.seen[name].append(entry)
                message = ready.get("message") or ""
                if not self.messages[name] or self.messages[name][-1] != message:
                    self.messages[name].append(message)
                position = (status.get("queue") or {}).get("position")
                if not self.positions[name] or self.positions[name][-1] != position:
                    self.positions[name].append(position)
                if self.stop.is_set():
                    break

    def saw(self, names: list[str], reason: str, timeout: float = 30) -> None:
        """Until the watch has shown ``reason`` for each of ``names``: a status a GET already returns
        reaches a watch a moment later (seconds, on a loaded machine)."""
        wait_for(lambda: all(any(r == reason for _, r in self.seen[n]) for n in names), timeout,
                 f"the watch showing {reason}")  # fmt: skip


class GpuSampler:
    """GPUs held by the namespace's pods (bound, not finished), sampled every second."""

    def __init__(self, kube_api: client.ApiClient, namespace: str) -> None:
        self.core, self.namespace = client.CoreV1Api(kube_api), namespace
        self.samples: list[int] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(1.0):
            pods = self.core.list_namespaced_pod(self.namespace).items
            held = 0
            for pod in pods:
                if pod.spec.node_name and pod.status.phase not in ("Succeeded", "Failed"):
                    for c in pod.spec.containers:
                        held += int(((c.resources and c.resources.limits) or {}).get("nvidia.com/gpu", 0))
            self.samples.append(held)


def subsequence(wanted: list[str], seen: list[str]) -> bool:
    it = iter(seen)
    return all(any(w == s for s in it) for w in wanted)


def test_ten_runs_share_a_four_gpu_quota_one_admission_at_a_time(kube_api, namespace, operator, kueue_quota, node_gpus):
    operator()
    kueue_quota(gpus=4)
    recorder, sampler = Recorder(kube_api, namespace), GpuSampler(kube_api, namespace)
    started = time.monotonic()
    names = [f"sweep-{i}" for i in range(10)]
    try:
        for name in names:
            body = training_run(name, steps=4, env={"SLIPWAY_STEP_SECONDS": "0.5"}, model=f"sweep-{namespace}",
                                queueName="gpus", resources={"gpus": 2})  # fmt: skip
            apply_object(kube_api, namespace, body)

        def all_done() -> bool:
            custom = client.CustomObjectsApi(kube_api)
            items = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "trainingruns")["items"]
            phases = [(i.get("status") or {}).get("phase") for i in items]
            assert "Failed" not in phases, [i.get("status") for i in items if i["status"].get("phase") == "Failed"]
            return len(items) == 10 and all(p == "Succeeded" for p in phases)

        wait_for(all_done, 420, "all 10 runs Succeeded", interval=1)
        took = time.monotonic() - started
        recorder.saw(names, "Succeeded")
    finally:
        sampler.stop.set()
        recorder.stop.set()
    sampler.thread.join(5)
    assert sampler.samples and max(sampler.samples) <= 4, f"more than 4 GPUs in use: {sampler.samples}"
    assert max(sampler.samples) == 4, f"the quota was never used in full: {sampler.samples}"
    custom = client.CustomObjectsApi(kube_api)
    waited = shown_admitted = 0
    for name in names:
        reasons = [reason for _, reason in recorder.seen[name]]
        assert subsequence(["Queued", "Training", "Succeeded"], reasons), (name, recorder.seen[name])
        assert reasons.index("Queued") < reasons.index("Training"), (name, recorder.seen[name])
        shown_admitted += "Admitted" in reasons  # the pods may run before a pass shows the admission alone
        status = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "trainingruns", name)["status"]
        # Kueue's admission, whether or not a pass caught it before the pods ran: its time is kept.
        assert status["queue"]["admitted"] is True
        assert status["queue"]["admittedAt"] <= status["startTime"], status
        assert status["queue"]["localQueue"] == "gpus"
        assert status["queue"]["clusterQueue"] == f"cq-{namespace}"
        assert status["queue"]["workload"].startswith(f"job-{name}-train-")
        if any("insufficient unused quota for nvidia.com/gpu" in m for m in recorder.messages[name]):
            waited += 1
    # 10 runs of 2 GPUs into 4: at most 2 start at once, so at least 8 waited and said why in Kueue's words.
    assert waited >= 8, dict(recorder.messages)
    report(f"kueue: 10 runs x 2 GPUs through a 4-GPU quota in {took:.0f}s; GPUs in use max {max(sampler.samples)} "
           f"over {len(sampler.samples)} samples; {waited} runs showed Kueue's quota message while queued, "
           f"{shown_admitted} showed Admitted before their pods ran")  # fmt: skip


def test_queued_runs_show_their_place_in_the_local_queue_as_it_moves(
    kube_api, namespace, operator, kueue_quota, node_gpus, monkeypatch
):
    """Kueue's visibility API (an aggregated API of the local API server) gives each pending
    Workload's position; a queued run shows it in status.queue and in its message, and it moves
    up as the runs ahead are admitted."""
    monkeypatch.setenv("SLIPWAY_QUEUE_POSITION_SECONDS", "2")
    operator()
    kueue_quota(gpus=2)
    recorder = Recorder(kube_api, namespace)
    custom = client.CustomObjectsApi(kube_api)

    def run(name: str, steps: int) -> dict:
        return training_run(name, steps=steps, env={"SLIPWAY_STEP_SECONDS": "0.5"}, model=f"place-{namespace}",
                            queueName="gpus", resources={"gpus": 2})  # fmt: skip

    try:
        # It holds the quota for about 35 s: a place shown is up to 12 s old (the LocalQueue read every 10 s,
        # each run looking every 2 s), and the queued runs must show 1, 2 and 3 before it ends.
        apply_object(kube_api, namespace, run("ahead", 70))
        wait_status(kube_api, namespace, "TrainingRun", "ahead", lambda o: (o.get("status") or {}).get("phase")
                    == "Running", 120, "the first run admitted and training")  # fmt: skip
        names = [f"behind-{i}" for i in range(3)]
        for name in names:
            apply_object(kube_api, namespace, run(name, 8))

        last: dict[str, dict] = {}

        def placed() -> dict[str, dict] | None:
            items = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "trainingruns")["items"]
            queues = {i["metadata"]["name"]: (i.get("status") or {}).get("queue") or {} for i in items}
            shown = {n: queues.get(n, {}) for n in names}
            last.update(shown)
            # Each run's place is read on its own pass, so while the queue fills one may still show the place
            # it had before the run behind it came: wait for a set that agrees, places 1, 2 and 3.
            return shown if sorted(q.get("position") or 0 for q in shown.values()) == [1, 2, 3] else None

        try:
            queued = wait_for(placed, 90, "places 1, 2 and 3 in status.queue of the queued runs", interval=0.5)
        except TimeoutError as e:
            raise AssertionError(f"{e}; status.queue last shown: {last}") from e
        for queue in queued.values():  # one LocalQueue: the same place in the ClusterQueue
            assert queue["positionInClusterQueue"] == queue["position"], queued
            assert queue["admitted"] is False

        def all_done() -> bool:
            items = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "trainingruns")["items"]
            return len(items) == 4 and all((i.get("status") or {}).get("phase") == "Succeeded" for i in items)

        wait_for(all_done, 300, "all 4 runs Succeeded", interval=1)
    finally:
        recorder.stop.set()
    last = next(n for n, q in queued.items() if q["position"] == 3)
    moved = [p for p in recorder.positions[last] if p is not None]
    assert 3 in moved and min(moved[moved.index(3) :]) < 3, (last, recorder.positions[last])  # it moved up
    for name in names:
        status = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "trainingruns", name)["status"]
        assert "position" not in status["queue"], status["queue"]  # admitted: no place in a queue any more
        shown = [m for m in recorder.messages[name] if "position" in m]
        assert shown and all("LocalQueue gpus, position " in m for m in shown), recorder.messages[name]
    report(f"kueue positions: {', '.join(f'{n}: {recorder.positions[n]}' for n in names)}")


def test_a_higher_priority_run_preempts_a_lower_one_which_resumes_from_its_checkpoint(
    kube_api, namespace, operator, kueue_quota, node_gpus, mlflow
):
    operator()
    kueue_quota(gpus=4)
    scheduling = client.SchedulingV1Api(kube_api)
    for name, value in ((f"low-{namespace}", 100), (f"high-{namespace}", 1000)):
        scheduling.create_priority_class(client.V1PriorityClass(metadata=client.V1ObjectMeta(name=name), value=value))
    recorder = Recorder(kube_api, namespace)
    try:
        # maxRestarts 0: were Kueue's eviction counted as a failure, the low run would fail.
        low = training_run("low", steps=24, env={"SLIPWAY_STEP_SECONDS": "0.5"}, queueName="gpus",
                           resources={"gpus": 4}, checkpoint={"size": "1Gi"}, priorityClassName=f"low-{namespace}",
                           failurePolicy={"maxRestarts": 0})  # fmt: skip
        apply_object(kube_api, namespace, low)
        wait_status(kube_api, namespace, "TrainingRun", "low",
                    lambda o: ((o.get("status") or {}).get("lastCheckpoint") or {}).get("step", 0) >= 4, 180,
                    "low past its checkpoint at step 4")  # fmt: skip
        high = training_run("high", steps=4, env={"SLIPWAY_STEP_SECONDS": "0.5"}, queueName="gpus",
                            resources={"gpus": 4}, priorityClassName=f"high-{namespace}")  # fmt: skip
        apply_object(kube_api, namespace, high)
        preempted = wait_status(kube_api, namespace, "TrainingRun", "low",
                                lambda o: any(c.get("reason") == "PreemptedByKueue"
                                              for c in (o.get("status") or {}).get("conditions") or []),
                                60, "low preempted by Kueue")  # fmt: skip
        at_preemption = preempted["status"].get("lastCheckpoint", {}).get("step", 0)
        for name in ("high", "low"):
            done = wait_status(kube_api, namespace, "TrainingRun", name,
                               lambda o: (o.get("status") or {}).get("phase") in ("Succeeded", "Failed"), 240,
                               f"{name} finished")  # fmt: skip
            assert done["status"]["phase"] == "Succeeded", done["status"]
    finally:
        recorder.stop.set()
        for name in (f"low-{namespace}", f"high-{namespace}"):
            scheduling.delete_priority_class(name)
    low_status = client.CustomObjectsApi(kube_api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, "trainingruns", "low")["status"]  # fmt: skip
    assert low_status["queue"]["evictions"] >= 1, low_status["queue"]
    reasons = [reason for _, reason in recorder.seen["low"]]
    assert subsequence(["Training", "PreemptedByKueue", "Training"], reasons), recorder.seen["low"]
    high_seen = [reason for _, reason in recorder.seen["high"]]
    assert subsequence(["Queued", "Training"], high_seen), recorder.seen["high"]
    run = mlflow.get_run(low_status["mlflow"]["runId"])
    resumed = int(run.tags["slipway.dev/resumed-from-step"])
    assert resumed >= 4, f"low started over after the preemption (resumed from {resumed})"
    steps = [int(m.value) for m in mlflow.get_metric_history(run.run_id, "step")]
    assert steps.count(1) == 1, f"the second attempt started over: {steps}"
    report(f"kueue preemption: low checkpointed at step {at_preemption} when preempted, resumed from step "
           f"{resumed}, {low_status['queue']['evictions']} eviction(s), restarts {low_status.get('restarts')}, "
           f"maxRestarts 0 and Succeeded")  # fmt: skip


def test_no_pod_runs_before_its_mlflow_run_even_when_kueue_admits_the_job_first(
    kube_api, namespace, operator, kueue_quota, node_gpus, mlflow, cluster
):
    """The Job is created before its MLflow run (a sweep's Jobs exist within seconds of apply). Its
    enemy: Kueue admitting and resuming the Job while MLflow cannot be reached, so the run cannot be
    made. The pods Kueue lets the Job make stay gated (slipway.dev/mlflow-run), none bound, until
    MLflow answers; then they get the run and log into it."""
    host, port = cluster.mlflow_url.removeprefix("http://").rsplit(":", 1)
    proxy = FaultProxy(host, int(port)).start()
    try:
        proxy.blackhole()
        operator(mlflow_url=f"http://127.0.0.1:{proxy.port}")
        kueue_quota(gpus=4)
        batch, core = client.BatchV1Api(kube_api), client.CoreV1Api(kube_api)
        applied = time.monotonic()
        body = training_run("gated", steps=4, env={"SLIPWAY_STEP_SECONDS": "0.2"}, model=f"gated-{namespace}",
                            queueName="gpus", resources={"gpus": 2})  # fmt: skip
        apply_object(kube_api, namespace, body)
        wait_for(lambda: batch.list_namespaced_job(namespace).items, 30, "the training Job", interval=0.2)
        job_after = time.monotonic() - applied

        def run_pods() -> list[client.V1Pod]:
            return core.list_namespaced_pod(namespace, label_selector="slipway.dev/trainingrun=gated").items

        wait_for(lambda: run_pods(), 60, "Kueue admitting the Job and the Job making its pod", interval=0.5)
        admitted_after = time.monotonic() - applied
        bound = []
        held_until = time.monotonic() + 15
        while time.monotonic() < held_until:  # MLflow still away: the pod waits, gated, on no node
            for pod in run_pods():
                gates = [g.name for g in pod.spec.scheduling_gates or []]
                assert "slipway.dev/mlflow-run" in gates, f"{pod.metadata.name} lost its gate with MLflow away"
                bound += [pod.metadata.name] if pod.spec.node_name else []
            time.sleep(1)
        assert not bound, f"pods bound before their MLflow run existed: {bound}"
        tr = client.CustomObjectsApi(kube_api).get_namespaced_custom_object(GROUP, VERSION, namespace,
                                                                             "trainingruns", "gated")  # fmt: skip
        assert not (tr.get("status") or {}).get("mlflow"), tr["status"]
        proxy.pass_through()
        healed = time.monotonic()
        done = wait_status(kube_api, namespace, "TrainingRun", "gated",
                           lambda o: (o.get("status") or {}).get("phase") in ("Succeeded", "Failed"), 180,
                           "the run finished once MLflow answered")  # fmt: skip
        assert done["status"]["phase"] == "Succeeded", done["status"]
    finally:
        proxy.close()
    run_id = done["status"]["mlflow"]["runId"]
    pods = run_pods()
    assert pods and all(p.metadata.annotations["slipway.dev/mlflow-run-id"] == run_id for p in pods)
    steps = [int(m.value) for m in mlflow.get_metric_history(run_id, "step")]
    assert sorted(steps) == [1, 2, 3, 4], f"the pod did not log into the run in status: {steps}"
    experiment = mlflow.get_or_create_experiment(f"gated-{namespace}")
    assert len(mlflow.search_runs([experiment])) == 1
    report(f"job before MLflow run: Job {job_after:.1f}s after apply with MLflow away, admitted by Kueue and its "
           f"pod made after {admitted_after:.1f}s, held gated on no node for 15s; Succeeded "
           f"{time.monotonic() - healed:.1f}s after MLflow answered, logging into the run in status")  # fmt: skip


def test_a_run_its_cluster_queue_can_never_admit_is_stalled_with_the_numbers_until_the_quota_grows(
    kube_api, namespace, operator, kueue_quota, node_gpus
):
    """4 GPUs asked of a ClusterQueue of 3, no cohort: kstatus, Argo CD and Flux read Stalled (not
    in progress for ever), with the quota's numbers; the admin raises the quota to 4 and the run is
    Queued again, admitted, and trains."""
    operator()
    cluster_queue = kueue_quota(gpus=3)
    recorder = Recorder(kube_api, namespace)
    body = training_run("greedy", steps=2, env={"SLIPWAY_STEP_SECONDS": "0.5"}, model=f"greedy-{namespace}",
                        queueName="gpus", resources={"gpus": 4})  # fmt: skip
    try:
        apply_object(kube_api, namespace, body)

        def conditions(obj) -> dict[str, dict]:
            return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}

        def stalled(obj) -> bool:
            found = conditions(obj)
            flags = ((found.get("Stalled") or {}).get("status"), (found.get("Reconciling") or {}).get("status"))
            return flags == ("True", "False")

        run = wait_status(kube_api, namespace, "TrainingRun", "greedy", stalled, 90, "Stalled: over the quota")
        said = conditions(run)["Stalled"]
        assert said["reason"] == "ExceedsQueueQuota", said
        wanted = f"asks for 4 nvidia.com/gpu in all, more than Kueue can ever admit (ClusterQueue {cluster_queue}, "
        assert wanted in said["message"], said
        assert "nominal quota 3, 3 at most" in said["message"], said
        raised = time.monotonic()
        custom = client.CustomObjectsApi(kube_api)
        queue = custom.get_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", cluster_queue)
        for entry in queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"]:
            if entry["name"] == "nvidia.com/gpu":
                entry["nominalQuota"] = 4
        # A merge patch of the groups alone: Kueue writes the queue's status meanwhile (a replace of what was
        # read answered 409 on a loaded machine).
        groups = {"spec": {"resourceGroups": queue["spec"]["resourceGroups"]}}
        custom.patch_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", cluster_queue, groups)

        def done(obj) -> bool:
            return (obj.get("status") or {}).get("phase") == "Succeeded"

        wait_status(kube_api, namespace, "TrainingRun", "greedy", done, 180, "the run trained once the quota grew")
        took = time.monotonic() - raised
        recorder.saw(["greedy"], "Succeeded")
    finally:
        recorder.stop.set()
    reasons = [reason for _, reason in recorder.seen["greedy"]]
    assert subsequence(["ExceedsQueueQuota", "Training", "Succeeded"], reasons), recorder.seen["greedy"]
    report(f"kueue: 4 GPUs asked of a 3-GPU ClusterQueue: Stalled ({said['message']}); quota raised to 4: "
           f"Succeeded {took:.0f}s later; reasons seen {reasons}")  # fmt: skip
