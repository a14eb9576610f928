"""A model of many files behind a slow artifact store: MLflow (through a proxy) answers every
artifact listing and file read 0.15 s late, so reading the 80 files of a ModelArtifact's source
takes longer than the operator's liveness limit (set to 10 s here; 300 s by default, which
10,000 files at 30 ms a request pass just the same). The operator digests a budget of each pass at
a time (a tenth of the limit): its liveness endpoint answers OK throughout, another artifact is
registered and Validated meanwhile, every file is read once, and the digest is sha256sum's.
(The bulk, 10,000 files on a store costing 500 s, is tests/unit/mlflow/test_digest_budget.py.)"""

from __future__ import annotations

import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from localkube.faultproxy import HttpFaultProxy
from localkube.wait import wait_for
from slipway.mlflow import MlflowClient
from slipway_testing import apply_object, condition, get_object, model_artifact, phase_in, wait_status

pytestmark = pytest.mark.cluster

FILES = 80
DELAY_SECONDS = 0.15  # every artifact request: reading the files alone takes longer than the liveness limit
LIVENESS_SECONDS = 10.0  # SLIPWAY_STUCK_PASS_SECONDS: /healthz fails while a pass runs longer
ARTIFACTS = "/api/2.0/mlflow-artifacts/artifacts"


class CountingProxy(HttpFaultProxy):
    """The fault proxy, counting the artifact requests it forwards, by path."""

    def __init__(self, target: str) -> None:
        super().__init__(target)
        self.reads: dict[str, int] = {}

    def _handle(self, request: Any) -> None:
        path = request.path.split("?", 1)[0]
        if request.command == "GET" and path.startswith(ARTIFACTS + "/"):
            self.reads[path] = self.reads.get(path, 0) + 1
        super()._handle(request)


class Prober(threading.Thread):
    """GETs the operator's /healthz every half second, as the kubelet's liveness probe would: (HTTP
    status or the error, seconds) of each."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.stopping = url, threading.Event()
        self.answers: list[tuple[int | str, float]] = []

    def run(self) -> None:
        while not self.stopping.wait(0.5):
            started = time.monotonic()
            try:
                with urllib.request.urlopen(self.url, timeout=LIVENESS_SECONDS) as answer:
                    status: int | str = answer.status
            except urllib.error.HTTPError as exc:
                status = exc.code
            except OSError as exc:
                status = type(exc).__name__
            self.answers.append((status, time.monotonic() - started))


def sha256sum(directory: Path) -> str:
    shell = "find . -type f | cut -c3- | LC_ALL=C sort | xargs sha256sum | sha256sum"
    return "sha256:" + subprocess.run(["sh", "-c", shell], cwd=directory, capture_output=True, text=True,
                                      check=True).stdout.split()[0]  # fmt: skip


def test_a_slow_store_of_many_files_keeps_liveness_and_other_artifacts_reconciling(
    cluster, kube_api, namespace, operators, figures, mlflow: MlflowClient, trained, tmp_path
):
    files = tmp_path / "model"
    for i in range(FILES):
        part = files / f"shard-{i // 40}" / f"part-{i:04d}.bin"
        part.parent.mkdir(parents=True, exist_ok=True)
        part.write_bytes(f"weights {i}\n".encode() * 20)
    run = mlflow.create_run(mlflow.get_or_create_experiment(f"slow-digest-{namespace}"), "many-files")
    mlflow.upload_dir(run.run_id, files, "model")
    proxy = CountingProxy(cluster.mlflow_url)
    proxy.start()
    prober = None
    try:
        proxy.delay("GET", ARTIFACTS, DELAY_SECONDS)  # listings and file reads alike
        replica = operators(standalone=True, env={"SLIPWAY_MLFLOW_URL": proxy.url,
                                                  "SLIPWAY_STUCK_PASS_SECONDS": str(LIVENESS_SECONDS)})  # fmt: skip
        prober = Prober(replica.liveness)
        prober.start()
        wait_for(lambda: any(status == 200 for status, _ in prober.answers), 60, "the operator's /healthz up")
        model = f"many-{namespace}"
        started = time.monotonic()
        source = {"mlflowRun": {"runId": run.run_id, "artifactPath": "model"}}
        apply_object(kube_api, namespace, model_artifact("many", model, source, quantization={"method": "none"}))
        progress: list[str] = []

        def digesting(obj: dict[str, Any]) -> bool:
            cond = condition(obj, "Reconciling")
            if cond.get("reason") == "Digesting" and cond.get("message") not in progress:
                progress.append(cond["message"])
            return len(progress) >= 2

        wait_status(kube_api, namespace, "ModelArtifact", "many", digesting, 60, "digesting, a budget at a time")
        # Meanwhile another artifact goes from nothing to Validated.
        trained_source = {"mlflowRun": {"runId": trained, "artifactPath": "model"}}
        apply_object(kube_api, namespace, model_artifact("small", f"small-{namespace}", trained_source,
                                                         quantization={"method": "none"}))  # fmt: skip
        wait_status(kube_api, namespace, "ModelArtifact", "small", phase_in("Validated"), 60, "small validated")
        small_took = time.monotonic() - started
        many_then = get_object(kube_api, namespace, "ModelArtifact", "many")["status"]
        assert many_then.get("phase") == "Registering", many_then  # still digesting while small was validated
        decided = phase_in("Validated", "Failed")
        many = wait_status(kube_api, namespace, "ModelArtifact", "many", lambda o: digesting(o) and decided(o), 120,
                           "many validated")  # fmt: skip
        many_took = time.monotonic() - started
    finally:
        if prober is not None:
            prober.stopping.set()
            prober.join()
        proxy.close()
    assert many["status"]["phase"] == "Validated", many["status"]
    assert many["status"]["filesDigest"] == sha256sum(files)
    run_reads = {path: n for path, n in proxy.reads.items() if run.run_id in path}
    assert len(run_reads) == FILES and set(run_reads.values()) == {1}  # every file read once: carried on, not again
    up = next(i for i, (status, _) in enumerate(prober.answers) if status == 200)
    answers = prober.answers[up:]  # from the operator's first answer on
    failed = [(status, seconds) for status, seconds in answers if status != 200]
    longest = max(seconds for _, seconds in answers)
    figures.inject(f"MLflow's artifact listings and reads {DELAY_SECONDS} s late, a model of {FILES} files, "
                   f"liveness limit {LIVENESS_SECONDS:g} s")  # fmt: skip
    figures.took("the many-file artifact to Validated", many_took)
    figures.took("the other artifact to Validated, meanwhile", small_took)
    figures.count(liveness_probes=len(answers), liveness_failures=len(failed),
                  longest_probe_seconds=round(longest, 2), file_reads=sum(run_reads.values()),
                  progress_messages=len(progress), last_progress=progress[-1][:140])  # fmt: skip
    assert FILES * DELAY_SECONDS > LIVENESS_SECONDS < many_took  # in one pass, the digest would have failed liveness
    assert failed == [] and longest < LIVENESS_SECONDS, failed
