"""The reference workloads as programs, against a real MLflow server, end to end.

Each test runs ``python -m slipway.workloads.<name>`` as a subprocess, as a pod would, and
checks what it left in MLflow and in its result file.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from localkube.mlflow_server import free_port
from localkube.wait import wait_for
from slipway.mlflow import MlflowClient, run_artifact_uri
from slipway.workloads.common import EXIT_CONFIG, digits_split

WORKLOAD_TIMEOUT = 120


@dataclass
class Workloads:
    """Runs workloads against one MLflow server, each in its own working directory."""

    mlflow_url: str
    client: MlflowClient
    workdir: Path
    experiment_id: str

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "SLIPWAY_"))}
        env.update(MLFLOW_TRACKING_URI=self.mlflow_url, MLFLOW_EXPERIMENT_ID=self.experiment_id, **extra)
        return env

    def run(self, name: str, *args: str, expect: int = 0, **env: str) -> subprocess.CompletedProcess[str]:
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", f"slipway.workloads.{name}", *args],
            env=self.env(**env),
            cwd=self.workdir,
            capture_output=True,
            text=True,
            timeout=WORKLOAD_TIMEOUT,
        )
        print(f"{name} {' '.join(args)}: exit {done.returncode} in {time.monotonic() - started:.1f}s")
        output = done.stdout + done.stderr
        assert done.returncode == expect, f"{name} exited {done.returncode}, expected {expect}:\n{output}"
        return done

    def start(self, name: str, *args: str, **env: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", f"slipway.workloads.{name}", *args],
            env=self.env(**env),
            cwd=self.workdir,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def new_run(self, run_name: str) -> str:
        return self.client.create_run(self.experiment_id, run_name).run_id

    def result(self, path: Path) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(path.read_text())
        return loaded


@pytest.fixture(scope="module")
def workloads(cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workloads]:
    with MlflowClient(cluster.mlflow_url) as client:
        experiment_id = client.get_or_create_experiment(f"workloads-{uuid.uuid4().hex[:8]}")
        yield Workloads(cluster.mlflow_url, client, tmp_path_factory.mktemp("workloads"), experiment_id)


@pytest.fixture(scope="module")
def trained_run(workloads: Workloads, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A finished training run with its ONNX model, shared by the downstream tests."""
    run_id = workloads.new_run("train")
    checkpoint_dir = tmp_path_factory.mktemp("checkpoints")
    workloads.run("train", "--steps", "15", MLFLOW_RUN_ID=run_id, SLIPWAY_CHECKPOINT_DIR=str(checkpoint_dir))
    return run_id


def test_training_resumes_from_its_checkpoint_after_a_failure(workloads: Workloads, tmp_path: Path) -> None:
    client = workloads.client
    run_id = workloads.new_run("train-preempted")
    env = {
        "MLFLOW_RUN_ID": run_id,
        "SLIPWAY_CHECKPOINT_DIR": str(tmp_path / "checkpoints"),
        "SLIPWAY_FAIL_AT_STEP": "8",
        "SLIPWAY_FAIL_EXIT_CODE": "42",
    }
    args = ("--steps", "12", "--checkpoint-every", "5")
    workloads.run("train", *args, expect=42, **env)
    interrupted = client.get_run(run_id)
    assert interrupted.status == "RUNNING"  # a preempted attempt is not a failed run
    assert interrupted.tags["slipway.dev/checkpoint-step"] == "5"
    assert interrupted.tags["slipway.dev/checkpoint"].endswith("ckpt-00000005.pkl")

    workloads.run("train", *args, **env)  # the replacement pod: same env, same checkpoint volume
    steps = [int(m.value) for m in sorted(client.get_metric_history(run_id, "step"), key=lambda m: m.timestamp)]
    print(f"steps logged across both attempts: {steps}")
    assert steps == [1, 2, 3, 4, 5, 6, 7, 6, 7, 8, 9, 10, 11, 12]  # resumed after 5, not from 1
    finished = client.get_run(run_id)
    assert finished.status == "FINISHED"
    assert finished.tags["slipway.dev/resumed-from-step"] == "5"
    assert finished.tags["slipway.dev/checkpoint-step"] == "12"
    assert finished.metrics["checkpointStep"].value == 12 and finished.metrics["totalSteps"].value == 12
    assert finished.params["steps"] == "12"
    assert {f.path for f in client.list_artifacts(run_artifact_uri(run_id, "model"))} == {
        "model.onnx",
        "slipway-model.json",
    }
    checkpoints = sorted(p.name for p in (tmp_path / "checkpoints").glob("ckpt-*.pkl"))
    assert checkpoints == ["ckpt-00000005.pkl", "ckpt-00000010.pkl", "ckpt-00000012.pkl"]


def test_sigterm_checkpoints_the_last_step_and_exits_143(workloads: Workloads, tmp_path: Path) -> None:
    client = workloads.client
    run_id = workloads.new_run("train-suspended")
    checkpoint_dir = tmp_path / "checkpoints"
    process = workloads.start(
        "train",
        "--steps",
        "200",
        "--checkpoint-every",
        "100",
        MLFLOW_RUN_ID=run_id,
        SLIPWAY_CHECKPOINT_DIR=str(checkpoint_dir),
        SLIPWAY_STEP_SECONDS="0.2",
    )
    try:
        wait_for(lambda: client.get_run(run_id).metrics.get("step", None) is not None, timeout=60, what="a logged step")
        process.send_signal(signal.SIGTERM)  # what the kubelet sends on suspend, preemption or drain
        assert process.wait(timeout=30) == 143
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    run = client.get_run(run_id)
    last_step = int(run.metrics["step"].value)
    assert run.status == "RUNNING"
    assert run.tags["slipway.dev/checkpoint-step"] == str(last_step)
    assert [p.name for p in checkpoint_dir.glob("ckpt-*.pkl")] == [f"ckpt-{last_step:08d}.pkl"]


def test_quantize_int8_dynamic_makes_a_smaller_model(workloads: Workloads, trained_run: str, tmp_path: Path) -> None:
    client = workloads.client
    run_id = workloads.new_run("quantize")
    result_file = tmp_path / "quantize.json"
    workloads.run(
        "quantize",
        "--method",
        "int8-dynamic",
        MLFLOW_RUN_ID=run_id,
        SLIPWAY_MODEL_URI=run_artifact_uri(trained_run, "model"),
        SLIPWAY_RESULT_PATH=str(result_file),
    )
    result = workloads.result(result_file)
    print(f"int8-dynamic / fp32 size: {result['sizeBytes']} / {result['sourceSizeBytes']} = {result['sizeRatio']:.2f}")
    assert result["sizeBytes"] < 0.5 * result["sourceSizeBytes"]
    assert result["runId"] == run_id and result["artifactPath"] == "model-int8-dynamic"
    assert result["digest"].startswith("sha256:") and len(result["digest"]) == 71

    run = client.get_run(run_id)
    assert run.status == "FINISHED"
    assert run.tags["slipway.dev/quantize-digest"] == result["digest"]
    assert run.metrics["sizeBytes"].value == result["sizeBytes"]
    # The operator registers the output as its own version, tagged with its lineage.
    name = f"digits-{uuid.uuid4().hex[:8]}"
    client.get_or_create_registered_model(name)
    version = client.create_model_version(
        name, result["uri"], run_id=result["runId"], tags={"slipway.dev/quantization": "int8-dynamic"}
    )
    local = client.download_artifacts(version.uri, tmp_path / "registered")
    metadata = json.loads((local / "slipway-model.json").read_text())
    assert metadata["quantization"] == "int8-dynamic" and metadata["parentUri"].startswith("runs:/")
    assert (local / "model.onnx").stat().st_size == result["sizeBytes"]


def test_validate_logs_the_gate_metrics(workloads: Workloads, trained_run: str, tmp_path: Path) -> None:
    client = workloads.client
    name = f"digits-{uuid.uuid4().hex[:8]}"
    client.get_or_create_registered_model(name)
    source = client.get_run(trained_run).artifact_uri + "/model"
    version = client.create_model_version(name, source, run_id=trained_run)
    client.set_alias(name, "candidate", version.version)

    run_id = workloads.new_run("validate")
    result_file = tmp_path / "validate.json"
    workloads.run(
        "validate",
        "--latency-runs",
        "100",
        "--output-json",
        str(result_file),
        MLFLOW_RUN_ID=run_id,
        SLIPWAY_MODEL_URI=f"models:/{name}@candidate",
    )
    metrics = client.get_run(run_id).metrics
    keys = ("accuracy", "latencyP50Seconds", "latencyP95Seconds", "sizeBytes", "predictionsPerCpuSecond")
    logged = {key: metrics[key].value for key in keys}
    print(f"validation of the fp32 model: {logged}")
    assert logged["accuracy"] > 0.9 and logged["predictionsPerCpuSecond"] > 1000
    assert 0 < logged["latencyP50Seconds"] <= logged["latencyP95Seconds"] < 0.5
    assert logged["sizeBytes"] > 10_000
    assert workloads.result(result_file)["metrics"] == pytest.approx(logged)
    assert client.get_run(run_id).status == "FINISHED"


@pytest.mark.parametrize("method", ["fp16", "int8-dynamic", "int8-static"])
def test_each_method_keeps_the_accuracy(workloads: Workloads, trained_run: str, method: str, tmp_path: Path) -> None:
    quantize_run = workloads.new_run(f"quantize-{method}")
    workloads.run(
        "quantize",
        "--method",
        method,
        "--output-json",
        str(tmp_path / "quantize.json"),
        MLFLOW_RUN_ID=quantize_run,
        SLIPWAY_MODEL_URI=run_artifact_uri(trained_run, "model"),
    )
    quantized = workloads.result(tmp_path / "quantize.json")
    validate_run = workloads.new_run(f"validate-{method}")
    workloads.run(
        "validate",
        "--latency-runs",
        "50",
        MLFLOW_RUN_ID=validate_run,
        SLIPWAY_MODEL_URI=quantized["uri"],
    )
    accuracy = workloads.client.get_run(validate_run).metrics["accuracy"].value
    print(f"{method}: size ratio {quantized['sizeRatio']:.2f}, accuracy {accuracy:.4f}")
    assert quantized["sizeRatio"] < 0.6
    assert accuracy > 0.9


def test_a_bad_model_validates_as_bad(workloads: Workloads, tmp_path: Path) -> None:
    train_run = workloads.new_run("train-bad")
    workloads.run("train", "--steps", "3", "--checkpoint-every", "3", MLFLOW_RUN_ID=train_run, SLIPWAY_BAD_MODEL="1")
    validate_run = workloads.new_run("validate-bad")
    workloads.run(
        "validate",
        "--latency-runs",
        "10",
        MLFLOW_RUN_ID=validate_run,
        SLIPWAY_MODEL_URI=run_artifact_uri(train_run, "model"),
    )
    accuracy = workloads.client.get_run(validate_run).metrics["accuracy"].value
    print(f"accuracy of the shuffled-label model: {accuracy:.3f}")
    assert accuracy < 0.3


def test_missing_configuration_exits_2_and_says_what_to_set(workloads: Workloads) -> None:
    done = workloads.run("validate", expect=EXIT_CONFIG)
    assert "SLIPWAY_MODEL_URI" in done.stdout


class Server:
    """A running ``slipway.workloads.serve`` process."""

    def __init__(self, workloads: Workloads, model_uri: str, **env: str) -> None:
        self.model_uri = model_uri
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "slipway.workloads.serve"],
            env=workloads.env(SLIPWAY_MODEL_URI=model_uri, POD_IP="127.0.0.1", PORT=str(self.port), **env),
            cwd=workloads.workdir,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def get(self, path: str) -> httpx.Response:
        return httpx.get(self.url + path, timeout=5)

    def wait_ready(self) -> None:
        def ready() -> bool:
            if self.process.poll() is not None:
                raise AssertionError(f"serve exited {self.process.returncode}:\n{self.output()}")
            return self.get("/readyz").status_code == 200

        wait_for(ready, timeout=60, what=f"serve at {self.url} to become ready")

    def predict(self, instances: list[list[float]]) -> httpx.Response:
        return httpx.post(self.url + "/v1/predict", json={"instances": instances}, timeout=5)

    def metric(self, sample: str) -> float:
        for line in self.get("/metrics").text.splitlines():
            if line.startswith(sample + " "):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=30)

    def output(self) -> str:
        return self.process.stdout.read() if self.process.stdout else ""


@pytest.fixture
def serving(workloads: Workloads, trained_run: str) -> Iterator[Any]:
    servers: list[Server] = []

    def start(model_uri: str | None = None, **env: str) -> Server:
        server = Server(workloads, model_uri or run_artifact_uri(trained_run, "model"), **env)
        servers.append(server)
        return server

    yield start
    for server in servers:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait()


def test_serve_predicts_and_exposes_metrics(serving: Any) -> None:
    data = digits_split()
    server: Server = serving(SLIPWAY_MODEL_VERSION="7")
    assert wait_for(lambda: server.get("/healthz").status_code == 200, timeout=30, what="serve /healthz")
    server.wait_ready()

    answer = server.predict(data.test_x[:20].tolist())
    assert answer.status_code == 200
    body = answer.json()
    assert body["modelVersion"] == "7" and len(body["probabilities"]) == 20
    correct = sum(int(p == y) for p, y in zip(body["predictions"], data.test_y[:20].tolist(), strict=True))
    assert correct >= 17
    assert server.predict([[1.0, 2.0]]).status_code == 400

    assert server.metric('slipway_requests_total{code="200"}') == 1
    assert server.metric('slipway_requests_total{code="400"}') == 1
    assert server.metric("slipway_request_duration_seconds_count") == 2
    assert server.metric("slipway_time_to_first_token_seconds_count") == 1
    assert server.metric("slipway_time_per_output_token_seconds_count") == 1
    assert server.metric(f'slipway_model_info{{uri="{server.model_uri}",version="7"}}') == 1

    assert server.stop() == 0  # SIGTERM: a clean shutdown
    assert "SIGTERM: shutting down" in server.output()


def test_serve_on_sigterm_finishes_a_stream_in_flight_and_refuses_new_connections(serving: Any) -> None:
    """What the pod's drain relies on: SIGTERM mid-stream, and the stream still gets every token and
    its end; readiness fails at once; a new connection is refused; the server exits 0 once done."""
    server: Server = serving(SLIPWAY_SERVE_API="openai", SLIPWAY_TOKENS_PER_SECOND="10",
                             SLIPWAY_SHUTDOWN_DELAY_SECONDS="1")  # fmt: skip
    server.wait_ready()
    tokens: list[str] = []
    body = {"model": "digits", "prompt": "count", "max_tokens": 30, "stream": True}  # 3 s of tokens
    with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=30) as answer:
        assert answer.status_code == 200
        lines = answer.iter_lines()
        for line in lines:
            if line.startswith("data: {"):
                tokens.append(line)
                break
        server.process.send_signal(signal.SIGTERM)
        wait_for(lambda: server.get("/readyz").status_code == 503, 5, "readiness to fail on SIGTERM")
        tokens += [line for line in lines if line.startswith("data: ")]
    assert tokens[-1] == "data: [DONE]" and len(tokens) == 30 + 2, tokens[-3:]  # tokens, the finish, the end

    def refused() -> bool:
        try:
            server.get("/healthz")
        except httpx.ConnectError:
            return True
        return False

    wait_for(refused, 10, "new connections to be refused")
    assert server.process.wait(timeout=10) == 0
    assert "draining: 1 requests in flight" in server.output()


def test_serve_error_rate_fault_shows_as_500s(serving: Any) -> None:
    server: Server = serving(SLIPWAY_FAULT_ERROR_RATE="1")
    server.wait_ready()
    sample = digits_split().test_x[:1].tolist()
    codes = [server.predict(sample).status_code for _ in range(10)]
    assert codes == [500] * 10
    assert server.metric('slipway_requests_total{code="500"}') == 10
    assert server.metric('slipway_requests_total{code="200"}') == 0
    assert server.stop() == 0


def test_serve_latency_fault_slows_every_timing(serving: Any) -> None:
    server: Server = serving(SLIPWAY_FAULT_LATENCY_SECONDS="0.03")
    server.wait_ready()
    sample = digits_split().test_x[:1].tolist()
    assert [server.predict(sample).status_code for _ in range(5)] == [200] * 5
    for histogram in ("request_duration", "time_to_first_token", "time_per_output_token"):
        assert server.metric(f'slipway_{histogram}_seconds_bucket{{le="0.025"}}') == 0
        assert server.metric(f'slipway_{histogram}_seconds_bucket{{le="+Inf"}}') == 5
    assert server.stop() == 0


def test_serve_crash_on_start_exits_1(serving: Any) -> None:
    server: Server = serving(SLIPWAY_FAULT_CRASH_ON_START="1")
    assert server.process.wait(timeout=30) == 1
    assert "SLIPWAY_FAULT_CRASH_ON_START" in server.output()


def test_serve_takes_faults_from_the_model_version_tags(workloads: Workloads, trained_run: str, serving: Any) -> None:
    """A canary and a stable pod get the same environment: the bad version carries its fault in a tag."""
    client = workloads.client
    name = f"digits-{uuid.uuid4().hex[:8]}"
    client.get_or_create_registered_model(name)
    source = client.get_run(trained_run).artifact_uri + "/model"
    bad = client.create_model_version(name, source, run_id=trained_run)
    client.set_model_version_tag(name, bad.version, "slipway.dev/fault-errorRate", "1.0")
    good = client.create_model_version(name, source, run_id=trained_run)
    client.set_alias(name, "stable", good.version)

    # No SLIPWAY_FAULT_* variables: Workloads.env drops the test process's SLIPWAY_* environment.
    canary: Server = serving(model_uri=f"models:/{name}/{bad.version}")
    stable: Server = serving(model_uri=f"models:/{name}@stable")
    canary.wait_ready()
    stable.wait_ready()
    sample = digits_split().test_x[:1].tolist()

    answers = [canary.predict(sample) for _ in range(5)]
    assert [a.status_code for a in answers] == [500] * 5
    assert "slipway.dev/fault-errorRate" in answers[0].json()["error"]
    assert canary.metric('slipway_requests_total{code="500"}') == 5
    assert canary.metric('slipway_requests_total{code="200"}') == 0

    answer = stable.predict(sample)
    assert answer.status_code == 200 and answer.json()["modelVersion"] == good.version
    assert stable.metric('slipway_requests_total{code="200"}') == 1
    assert stable.metric('slipway_requests_total{code="500"}') == 0

    assert canary.stop() == 0 and stable.stop() == 0
    assert "fault switches: errorRate=1.0 (model version tag slipway.dev/fault-errorRate)" in canary.output()
    assert "fault switches: none set" in stable.output()


def _registered(workloads: Workloads, trained_run: str, digest: str | None) -> tuple[str, str]:
    """A registered version of the trained model, tagged with ``digest`` as ModelArtifact registration does."""
    client = workloads.client
    name = f"fetch-{uuid.uuid4().hex[:8]}"
    client.get_or_create_registered_model(name)
    version = client.create_model_version(name, client.get_run(trained_run).artifact_uri + "/model", run_id=trained_run)
    if digest:
        client.set_model_version_tag(name, version.version, "slipway.dev/digest", digest)
    return name, version.version


def test_fetch_puts_the_version_where_the_server_reads_it(
    workloads: Workloads, trained_run: str, serving: Any, tmp_path: Path
) -> None:
    from slipway.workloads.common import file_digest

    digest = workloads.client.get_run(trained_run).tags["slipway.dev/model-digest"]
    name, version = _registered(workloads, trained_run, digest)
    dest, cache = tmp_path / "models" / "current", tmp_path / "cache"
    uri = f"models:/{name}/{version}"
    workloads.run("fetch", SLIPWAY_MODEL_URI=uri, SLIPWAY_MODEL_PATH=str(dest), SLIPWAY_MODEL_CACHE=str(cache))
    assert file_digest(dest / "model.onnx") == digest
    receipt = json.loads((dest / "slipway-fetch.json").read_text())
    assert receipt["digest"] == digest and receipt["version"] == version and receipt["fromCache"] is False
    print(f"fetch: {receipt['bytes']} bytes in {receipt['seconds']}s")
    # A second pod on the node: the cache answers, and the files are the same.
    again = tmp_path / "again"
    workloads.run("fetch", SLIPWAY_MODEL_URI=uri, SLIPWAY_MODEL_PATH=str(again), SLIPWAY_MODEL_CACHE=str(cache))
    assert json.loads((again / "slipway-fetch.json").read_text())["fromCache"] is True
    assert file_digest(again / "model.onnx") == digest
    # The server serves the fetched files (it would fail to start without them).
    server: Server = serving(model_uri=uri, SLIPWAY_MODEL_PATH=str(dest))
    server.wait_ready()
    assert server.predict(digits_split().test_x[:1].tolist()).json()["modelVersion"] == version
    assert server.stop() == 0
    assert f"serving the files fetched into {dest}" in server.output()


def test_fetch_refuses_files_whose_digest_is_not_the_versions(
    workloads: Workloads, trained_run: str, tmp_path: Path
) -> None:
    name, version = _registered(workloads, trained_run, "sha256:" + "0" * 64)
    dest, cache = tmp_path / "current", tmp_path / "cache"
    dest.mkdir()
    (dest / "stale.txt").write_text("from an earlier pod")
    done = workloads.run(
        "fetch", expect=EXIT_CONFIG, SLIPWAY_MODEL_URI=f"models:/{name}/{version}", SLIPWAY_MODEL_PATH=str(dest),
        SLIPWAY_MODEL_CACHE=str(cache),
    )  # fmt: skip
    assert "digest mismatch" in done.stdout and "sha256:" + "0" * 64 in done.stdout
    assert list(dest.iterdir()) == [], "the destination is left empty"
    assert not any(cache.rglob("model.onnx")), "a file with the wrong digest was kept in the cache"


def _quantile_sum(server: Server, histogram: str) -> tuple[float, float]:
    """(sum, count) of a histogram's series on the server's /metrics."""
    total = count = 0.0
    for line in server.get("/metrics").text.splitlines():
        if line.startswith(histogram + "_sum{"):
            total += float(line.rsplit(" ", 1)[1])
        elif line.startswith(histogram + "_count{"):
            count += float(line.rsplit(" ", 1)[1])
    return total, count


def test_openai_mode_streams_tokens_and_exports_vllms_metrics(serving: Any) -> None:
    """serve --api openai answers completions and chat completions (streamed as server-sent
    events), and exports the series the vllm analysis preset reads, under vLLM's names."""
    fast: Server = serving(SLIPWAY_SERVE_API="openai", SLIPWAY_TOKENS_PER_SECOND="200", SLIPWAY_MODEL_NAME="digits-llm")
    slow: Server = serving(
        SLIPWAY_SERVE_API="openai", SLIPWAY_TOKENS_PER_SECOND="200", SLIPWAY_FAULT_FIRST_TOKEN_DELAY_SECONDS="0.05"
    )
    for server in (fast, slow):
        server.wait_ready()
        assert server.get("/health").status_code == 200
    answer = httpx.post(fast.url + "/v1/completions", json={"prompt": "count", "max_tokens": 5}, timeout=10).json()
    assert answer["object"] == "text_completion" and answer["model"] == "digits-llm"
    tokens = answer["choices"][0]["text"].split()
    assert len(tokens) == 5 and all(t.isdigit() for t in tokens)
    assert answer["usage"]["completion_tokens"] == 5
    assert httpx.get(fast.url + "/v1/models", timeout=5).json()["data"][0]["id"] == "digits-llm"

    chunks, arrivals = [], []
    started = time.monotonic()
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "stream": True}
    with httpx.stream("POST", fast.url + "/v1/chat/completions", json=body, timeout=10) as response:
        assert response.headers["content-type"] == "text/event-stream"
        for line in response.iter_lines():
            if line.startswith("data: "):
                chunks.append(line[6:])
                arrivals.append(time.monotonic() - started)
    assert chunks[-1] == "[DONE]"
    events = [json.loads(c) for c in chunks[:-1]]
    assert [e["object"] for e in events] == ["chat.completion.chunk"] * 9
    assert sum(1 for e in events if e["choices"][0]["delta"].get("content")) == 8
    assert events[-1]["choices"][0]["finish_reason"] == "length"
    assert arrivals[7] - arrivals[0] >= 7 * 0.005 * 0.8, "tokens arrive as they are produced (200 per second)"

    bad = httpx.post(fast.url + "/v1/completions", json={"prompt": "x", "max_tokens": 0}, timeout=5)
    assert bad.status_code == 400 and "max_tokens" in bad.json()["error"]["message"]
    for _ in range(5):
        httpx.post(slow.url + "/v1/completions", json={"prompt": "x", "max_tokens": 4}, timeout=10)
        httpx.post(fast.url + "/v1/completions", json={"prompt": "x", "max_tokens": 4}, timeout=10)
    fast_ttft, fast_n = _quantile_sum(fast, "vllm:time_to_first_token_seconds")
    slow_ttft, slow_n = _quantile_sum(slow, "vllm:time_to_first_token_seconds")
    assert fast_n == 7 and slow_n == 5
    assert slow_ttft / slow_n >= 3 * fast_ttft / fast_n, "the first-token fault makes TTFT 3x slower"
    metrics = fast.get("/metrics").text
    for name in ("vllm:inter_token_latency_seconds_bucket", "vllm:e2e_request_latency_seconds_bucket",
                 "vllm:request_success_total", "vllm:num_requests_running"):  # fmt: skip
        assert name in metrics, name
    assert 'http_requests_total{handler="/v1/completions",method="POST",status="2xx"} 6.0' in metrics
    assert 'http_requests_total{handler="/v1/completions",method="POST",status="4xx"} 1.0' in metrics
    assert fast.stop() == 0 and slow.stop() == 0


def test_openai_mode_queues_requests_past_its_sequence_slots_as_vllm_does(serving: Any) -> None:
    """With SLIPWAY_MAX_NUM_SEQS=2, six requests of 2 s each: two generate at a time, the others
    wait in vllm:num_requests_waiting (what KEDA scales on), and every one is answered."""
    server: Server = serving(SLIPWAY_SERVE_API="openai", SLIPWAY_TOKENS_PER_SECOND="10", SLIPWAY_MAX_NUM_SEQS="2",
                             SLIPWAY_MODEL_NAME="digits-queue")  # fmt: skip
    server.wait_ready()
    body = {"prompt": "queue", "max_tokens": 20}  # 2 s of tokens each
    with ThreadPoolExecutor(6) as pool:
        answers = [pool.submit(httpx.post, server.url + "/v1/completions", json=body, timeout=30) for _ in range(6)]
        seen = wait_for(
            lambda: (
                (
                    server.metric('vllm:num_requests_waiting{model_name="digits-queue"}'),
                    server.metric('vllm:num_requests_running{model_name="digits-queue"}'),
                    server.metric('vllm:kv_cache_usage_perc{model_name="digits-queue"}'),
                )
                if server.metric('vllm:num_requests_waiting{model_name="digits-queue"}') >= 3
                else None
            ),
            10,
            "four requests queued behind the two generating",
        )
        codes = [a.result().status_code for a in answers]
    assert seen[1] == 2, seen  # never more than the slots generate at once
    assert seen[2] == 1.0, seen  # both slots taken: the KV cache (the slots, here) is full
    assert codes == [200] * 6
    assert server.metric('vllm:num_requests_waiting{model_name="digits-queue"}') == 0
    assert server.metric('vllm:kv_cache_usage_perc{model_name="digits-queue"}') == 0
    # A body sent in chunks (as Envoy's ext_proc streams it on to the server) is read whole.
    chunked = httpx.post(server.url + "/v1/completions", timeout=10,
                         content=iter([b'{"prompt": "chun', b'ked", "max_tokens": 2}']))  # fmt: skip
    assert chunked.request.headers.get("transfer-encoding") == "chunked"
    assert chunked.status_code == 200 and chunked.json()["usage"]["completion_tokens"] == 2, chunked.text
    assert server.stop() == 0
