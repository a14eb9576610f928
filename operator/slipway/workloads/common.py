"""What the reference workloads share: configuration from the environment, the MLflow run
they report to, the digits data split, the ONNX model layout, and the JSON result file.

Model layout in MLflow (written by ``train``, rewritten by ``quantize``)::

    <artifact path>/model.onnx           the model; input "input" float32 [N, 64] (raw pixels 0..16),
                                         outputs "label" int64 [N] and "probabilities" float32 [N, 10]
    <artifact path>/slipway-model.json   metadata: input/outputs, classes, quantization, lineage,
                                         and "faults", the switches serve honours (see serve.py)

The digest of a model is ``sha256:<hex>`` of ``model.onnx``, its size the bytes of that file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slipway.mlflow import MlflowClient, MlflowError, MlflowUnavailable, Run
from slipway.mlflow.http import retries_within

if TYPE_CHECKING:
    import numpy as np
    import onnxruntime

log = logging.getLogger("slipway.workloads")

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_CONFIG = 2
EXIT_MLFLOW_UNAVAILABLE = 75  # EX_TEMPFAIL: list it in spec.failurePolicy.retryableExitCodes
EXIT_TERMINATED = 143  # 128 + SIGTERM, as a shell reports it

MODEL_ARTIFACT_PATH = "model"
MODEL_FILE = "model.onnx"
METADATA_FILE = "slipway-model.json"
INPUT_NAME = "input"
N_FEATURES = 64
CLASSES = tuple(range(10))
# The held-out split is fixed for every workload: train never sees the test part.
SPLIT_SEED = 20240601
TEST_FRACTION = 0.25
DEFAULT_EXPERIMENT = "slipway"
DEFAULT_RESULT_FILE = "slipway-result.json"


class ConfigError(Exception):
    """The workload is misconfigured (flag or environment variable); exit code 2."""


class WorkloadExit(Exception):
    """A deliberate exit (simulated preemption, SIGTERM) that leaves the MLflow run RUNNING:
    the next attempt resumes it, or the operator decides its final status."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code


# --------------------------------------------------------------------------- configuration


def env_str(name: str, default: str | None = None) -> str | None:
    """The variable's value, or ``default`` when unset or empty."""
    value = os.environ.get(name, "").strip()
    return value or default


def env_int(name: str, default: int, minimum: int | None = None) -> int:
    raw = env_str(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name}={value} must be at least {minimum}")
    return value


def env_float(name: str, default: float, minimum: float | None = None, maximum: float | None = None) -> float:
    raw = env_str(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number") from None
    if (
        not math.isfinite(value)
        or (minimum is not None and value < minimum)
        or (maximum is not None and value > maximum)
    ):
        raise ConfigError(f"{name}={raw} must be a number in [{minimum}, {maximum}]")
    return value


def env_flag(name: str) -> bool:
    """True for ``1``, ``true``, ``yes``, ``on`` (any case); false when unset or ``0``/``false``/…"""
    raw = (env_str(name) or "0").lower()
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name}={raw!r} is not a boolean (use 1 or 0)")


def result_path(cli_value: str | None) -> Path:
    """Where the JSON result goes: ``--output-json``, else ``$SLIPWAY_RESULT_PATH``, else
    ``./slipway-result.json``."""
    return Path(cli_value or env_str("SLIPWAY_RESULT_PATH") or DEFAULT_RESULT_FILE)


# --------------------------------------------------------------------------- running


def setup_logging() -> None:
    logging.basicConfig(
        level=env_str("SLIPWAY_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stdout,
    )
    # One line per HTTP request drowns the workload's own story.
    logging.getLogger("httpx").setLevel(logging.WARNING)


def run_workload(body: Callable[[], object]) -> int:
    """Run a workload's body and turn its outcome into the documented exit code."""
    setup_logging()
    try:
        body()
    except WorkloadExit as exc:
        log.warning("exiting with code %d: %s", exc.code, exc)
        return exc.code
    except ConfigError as exc:
        log.error("configuration error: %s", exc)
        return EXIT_CONFIG
    except MlflowUnavailable as exc:
        log.error("%s", exc)
        return EXIT_MLFLOW_UNAVAILABLE
    except Exception:
        log.exception("failed")
        return EXIT_ERROR
    return EXIT_OK


def mlflow_client() -> MlflowClient:
    """A client for ``$MLFLOW_TRACKING_URI`` that retries idempotent calls for up to
    ``$SLIPWAY_MLFLOW_RETRY_SECONDS`` (default 120): a workload waits out an MLflow restart or
    a short outage instead of failing; past that it exits 75 (MLflow unavailable)."""
    budget = env_float("SLIPWAY_MLFLOW_RETRY_SECONDS", 120.0, minimum=0.0)
    try:
        return MlflowClient.from_env(timeout=30.0, retries=retries_within(budget))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def ensure_run(client: MlflowClient, run_name: str, tags: dict[str, str] | None = None) -> Run:
    """The run in ``$MLFLOW_RUN_ID`` (created by the operator), or for standalone use a new
    run in ``$MLFLOW_EXPERIMENT_ID`` or the experiment ``$MLFLOW_EXPERIMENT_NAME``
    (default ``slipway``)."""
    run_id = env_str("MLFLOW_RUN_ID")
    if run_id:
        return client.get_run(run_id)
    experiment_id = env_str("MLFLOW_EXPERIMENT_ID") or client.get_or_create_experiment(
        env_str("MLFLOW_EXPERIMENT_NAME", DEFAULT_EXPERIMENT) or DEFAULT_EXPERIMENT
    )
    run = client.create_run(experiment_id, run_name=run_name, tags=tags)
    log.info("created MLflow run %s: %s", run.run_id, client.run_url(experiment_id, run.run_id))
    return run


@contextlib.contextmanager
def tracked_run(client: MlflowClient, run: Run) -> Iterator[None]:
    """Mark the run RUNNING, then FINISHED when the block succeeds or FAILED when it raises.

    A :class:`WorkloadExit` leaves the run RUNNING (a preempted attempt is not a failure).
    """
    if run.status != "RUNNING":
        client.update_run(run.run_id, status="RUNNING")
    try:
        yield
    except WorkloadExit:
        raise
    except BaseException:
        with contextlib.suppress(MlflowError):
            client.update_run(run.run_id, status="FAILED")
        raise
    client.update_run(run.run_id, status="FINISHED")


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class DigitsSplit:
    """scikit-learn's 8x8 digits as float32 pixels (0..16), split once with a fixed seed."""

    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray


def digits_split() -> DigitsSplit:
    """The train/test split every workload agrees on (stratified, ``SPLIT_SEED``)."""
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    features, labels = load_digits(return_X_y=True)
    train_x, test_x, train_y, test_y = train_test_split(
        features.astype(np.float32),
        labels.astype(np.int64),
        test_size=TEST_FRACTION,
        random_state=SPLIT_SEED,
        stratify=labels,
    )
    return DigitsSplit(train_x, train_y, test_x, test_y)


# --------------------------------------------------------------------------- models


def download_model(client: MlflowClient, uri: str, dest: Path) -> Path:
    """Download the model at ``uri`` (a model directory or the .onnx file itself) into
    ``dest``; returns the path of its ``model.onnx``."""
    local = client.download_artifacts(uri, dest)
    if local.is_file():
        return local
    candidates = [local / MODEL_FILE] if (local / MODEL_FILE).is_file() else sorted(local.rglob("*.onnx"))
    if len(candidates) != 1:
        raise ConfigError(
            f"{uri} holds {len(candidates)} .onnx files; point the model URI at a directory "
            f"with one {MODEL_FILE}, or at the file itself"
        )
    return candidates[0]


def read_metadata(model_file: Path) -> dict[str, Any]:
    """The ``slipway-model.json`` beside a model file, or {} when there is none."""
    path = model_file.with_name(METADATA_FILE)
    if not path.is_file():
        return {}
    loaded = json.loads(path.read_text())
    return loaded if isinstance(loaded, dict) else {}


def file_digest(path: Path) -> str:
    """``sha256:<hex>`` of a file's bytes."""
    sha = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            sha.update(block)
    return f"sha256:{sha.hexdigest()}"


def onnx_session(model_file: Path, threads: int = 1) -> onnxruntime.InferenceSession:
    """An ONNX Runtime CPU session; one intra-op thread keeps small-model latency steady."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(str(model_file), options, providers=["CPUExecutionProvider"])


# --------------------------------------------------------------------------- results


def write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    """Write JSON so that a reader sees the old file or the new one, never half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(payload, f, indent=2, sort_keys=True)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def percentile(samples: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) with linear interpolation between order statistics
    (numpy's default method)."""
    if not samples:
        raise ValueError("percentile of no samples")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} is outside 0..100")
    ordered = sorted(samples)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)
