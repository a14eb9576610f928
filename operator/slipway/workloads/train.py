"""Train a small digits classifier that checkpoints, resumes, and logs itself to MLflow.

    python -m slipway.workloads.train [--steps 30] [--checkpoint-every 5] [--keep-checkpoints 3]
                                      [--hidden-units 128] [--learning-rate 0.001]
                                      [--batch-size 64] [--seed 0] [--threads 1]

A step is one pass (epoch) of a scikit-learn ``MLPClassifier`` over the training part of the
digits split (:func:`slipway.workloads.common.digits_split`; the test part is left for
``validate``). At the end the scaler and classifier are exported as one ONNX model
(:mod:`slipway.workloads.classifier`, shared with ``train_mlflow``).

Environment:
  MLFLOW_TRACKING_URI       the tracking server (required)
  MLFLOW_RUN_ID             the run to report to, created by the operator; when unset a run is
                            created in MLFLOW_EXPERIMENT_ID or MLFLOW_EXPERIMENT_NAME (default slipway)
  SLIPWAY_CHECKPOINT_DIR    where checkpoints go (the operator mounts a PVC at /checkpoints);
                            when unset nothing is checkpointed and a restart starts over
  SLIPWAY_STEPS, SLIPWAY_CHECKPOINT_EVERY   defaults for --steps and --checkpoint-every
  NODE_RANK                 in a multi-node run only rank 0 trains and reports; other ranks exit 0
  Test switches:
  SLIPWAY_FAIL_AT_STEP=N    exit before step N, once (a marker file in the checkpoint directory
                            remembers it), to simulate a preempted or crashed pod ...
  SLIPWAY_FAIL_EXIT_CODE=C  ... with exit code C (default 1)
  SLIPWAY_STEP_SECONDS=S    wait S seconds per step, so tests can act mid-run
  SLIPWAY_BAD_MODEL=1       train on shuffled labels: a model that validation must reject
  Fault switches the model carries into serving (the "faults" object of slipway-model.json,
  which serve reads when its own environment does not set the switch; see serve.py):
  SLIPWAY_SERVE_FAULT_ERROR_RATE=R       serve answers predict with 500 with probability R (0..1)
  SLIPWAY_SERVE_FAULT_LATENCY_SECONDS=S  serve adds S seconds to every predict request
  SLIPWAY_SERVE_FAULT_CRASH_ON_START=1   serve exits with code 1 at start

Reported to the MLflow run:
  params    steps, hiddenUnits, learningRate, batchSize, checkpointEvery, seed, dataset, badModel
  metrics   per step: loss, accuracy (on the training split), step; once: totalSteps;
            at each checkpoint: checkpointStep
  tags      slipway.dev/checkpoint (file path) and slipway.dev/checkpoint-step, the newest
            checkpoint; slipway.dev/resumed-from-step when an attempt resumed; slipway.dev/attempts,
            the number of starts; slipway.dev/model-uri, -digest, -size-bytes
  artifacts model/model.onnx and model/slipway-model.json (see common.py for the layout;
            "faults" holds the SLIPWAY_SERVE_FAULT_* switches that were set, if any)
  status    FINISHED on success, FAILED on an error; a simulated failure or SIGTERM leaves it
            RUNNING (the next attempt resumes it; the operator owns the final word)

On SIGTERM (preemption, suspend, node drain) the current step finishes, a checkpoint is
written and the program exits with 143.
"""

from __future__ import annotations

import argparse
import logging
import signal
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from slipway.mlflow import Metric, MlflowClient, Run, now_millis
from slipway.mlflow.programtags import (
    ATTEMPTS,
    CHECKPOINT,
    CHECKPOINT_STEP,
    MODEL_DIGEST,
    MODEL_SIZE,
    MODEL_URI,
    RESUMED_FROM_STEP,
)
from slipway.workloads import checkpoints
from slipway.workloads.classifier import (
    TrainingState,
    export_model,
    model_metadata,
    new_state,
    serve_faults_from_env,
    train_step,
    training_labels,
)
from slipway.workloads.common import (
    EXIT_TERMINATED,
    MODEL_ARTIFACT_PATH,
    ConfigError,
    DigitsSplit,
    WorkloadExit,
    digits_split,
    ensure_run,
    env_flag,
    env_float,
    env_int,
    env_str,
    file_digest,
    mlflow_client,
    run_workload,
    tracked_run,
)

log = logging.getLogger("slipway.workloads.train")


@dataclass(frozen=True)
class FailureSwitch:
    """SLIPWAY_FAIL_AT_STEP / SLIPWAY_FAIL_EXIT_CODE: fail once when a step is reached."""

    at_step: int | None
    exit_code: int
    marker_dir: Path

    @classmethod
    def from_env(cls, marker_dir: Path) -> FailureSwitch:
        at_step = env_int("SLIPWAY_FAIL_AT_STEP", 0, minimum=0) or None
        return cls(at_step, env_int("SLIPWAY_FAIL_EXIT_CODE", 1, minimum=1), marker_dir)

    def trips(self, step: int) -> bool:
        """True the first time ``step`` reaches the failure step; remembered in a marker file."""
        if self.at_step is None or step != self.at_step:
            return False
        marker = self.marker_dir / f".slipway-failed-at-step-{step}"
        if marker.exists():
            return False
        self.marker_dir.mkdir(parents=True, exist_ok=True)
        marker.write_text(f"exit code {self.exit_code}\n")
        return True


class StopSignal:
    """Set by SIGTERM; the training loop checks it between steps."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        log.warning("SIGTERM: finishing the current step, then checkpointing and exiting")
        self.event.set()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m slipway.workloads.train", description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=env_int("SLIPWAY_STEPS", 30, minimum=1))
    parser.add_argument("--checkpoint-every", type=int, default=env_int("SLIPWAY_CHECKPOINT_EVERY", 5, minimum=1))
    parser.add_argument("--keep-checkpoints", type=int, default=3)
    parser.add_argument("--hidden-units", type=int, default=128)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="BLAS threads (the model is tiny: 1 is fastest)")
    args = parser.parse_args(argv)
    for name in ("steps", "checkpoint_every", "keep_checkpoints", "hidden_units", "batch_size", "threads"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1")
    return args


class Trainer:
    """The training loop, with its checkpointing and MLflow reporting."""

    def __init__(self, args: argparse.Namespace, client: MlflowClient, run: Run) -> None:
        self.args = args
        self.client = client
        self.run = run
        checkpoint_dir = env_str("SLIPWAY_CHECKPOINT_DIR")
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir else None
        self.failure = FailureSwitch.from_env(self.checkpoint_dir or Path.cwd())
        self.step_seconds = env_float("SLIPWAY_STEP_SECONDS", 0.0, minimum=0.0)
        self.bad_model = env_flag("SLIPWAY_BAD_MODEL")
        self.serve_faults = serve_faults_from_env()  # checked now, not after the last step
        self.stop = StopSignal()
        self.last_checkpoint_step = 0

    def restore_or_start(self, data: DigitsSplit) -> TrainingState:
        if self.checkpoint_dir is None:
            log.warning("SLIPWAY_CHECKPOINT_DIR is not set: no checkpoints, a restart starts over")
            return new_state(self.args, data)
        restored = checkpoints.load_newest(self.checkpoint_dir)
        if restored is None:
            log.info("no checkpoint in %s: starting at step 1", self.checkpoint_dir)
            return new_state(self.args, data)
        checkpoint, payload = restored
        try:
            state = TrainingState.from_checkpoint(payload)
        except ValueError:
            raise ConfigError(
                f"{checkpoint.path} is not a checkpoint of this trainer; point SLIPWAY_CHECKPOINT_DIR "
                "at an empty directory or remove the file"
            ) from None
        self.last_checkpoint_step = state.step
        log.info("resuming from %s: step %d of %d", checkpoint.path, state.step, self.args.steps)
        self.client.set_tags(self.run.run_id, {RESUMED_FROM_STEP.name: str(state.step)})
        return state

    def log_params(self) -> None:
        params = {
            "steps": self.args.steps,
            "hiddenUnits": self.args.hidden_units,
            "learningRate": self.args.learning_rate,
            "batchSize": self.args.batch_size,
            "checkpointEvery": self.args.checkpoint_every,
            "seed": self.args.seed,
            "dataset": "sklearn-digits",
            "badModel": self.bad_model,
        }
        # MLflow params are write-once: a resumed attempt only adds what is missing.
        logged = self.run.params
        for key, value in params.items():
            if key in logged and logged[key] != str(value):
                log.warning(
                    "param %s=%s differs from the earlier attempt's %s; MLflow keeps the first", key, value, logged[key]
                )
        missing = {k: v for k, v in params.items() if k not in logged}
        self.client.log_batch(self.run.run_id, params=missing, metrics=[Metric("totalSteps", self.args.steps, 0)])

    def checkpoint(self, state: TrainingState) -> None:
        if self.checkpoint_dir is None or state.step <= self.last_checkpoint_step:
            return
        saved = checkpoints.save_checkpoint(self.checkpoint_dir, state.step, state.to_checkpoint())
        checkpoints.prune_checkpoints(self.checkpoint_dir, self.args.keep_checkpoints)
        self.last_checkpoint_step = state.step
        self.client.log_batch(
            self.run.run_id,
            metrics=[Metric("checkpointStep", state.step, state.step, now_millis())],
            tags={CHECKPOINT.name: str(saved.path), CHECKPOINT_STEP.name: str(state.step)},
        )
        log.info("checkpoint %s", saved.path)

    def train(self) -> TrainingState:
        from threadpoolctl import threadpool_limits

        self.stop.install()
        data = digits_split()
        state = self.restore_or_start(data)
        self.log_params()
        features = state.scaler.transform(data.train_x)
        labels = training_labels(data, self.bad_model, self.args.seed)
        with threadpool_limits(limits=self.args.threads):
            while state.step < self.args.steps:
                step = state.step + 1
                if self.stop.event.is_set():
                    self.checkpoint(state)
                    raise WorkloadExit(EXIT_TERMINATED, f"stopped by SIGTERM after step {state.step}")
                if self.failure.trips(step):
                    raise WorkloadExit(self.failure.exit_code, f"SLIPWAY_FAIL_AT_STEP={step}: simulated failure")
                metrics = train_step(state, features, labels)
                if self.step_seconds:
                    self.stop.event.wait(self.step_seconds)
                timestamp = now_millis()
                self.client.log_batch(
                    self.run.run_id, metrics=[Metric(k, v, step, timestamp) for k, v in metrics.items()]
                )
                log.info(
                    "step %d/%d loss=%.4f accuracy=%.4f", step, self.args.steps, metrics["loss"], metrics["accuracy"]
                )
                if step % self.args.checkpoint_every == 0 or step == self.args.steps:
                    self.checkpoint(state)
        return state

    def publish(self, state: TrainingState) -> None:
        with tempfile.TemporaryDirectory(prefix="slipway-train-") as tmp:
            model_dir = Path(tmp) / MODEL_ARTIFACT_PATH
            metadata = model_metadata(self.args, self.run.run_id, self.bad_model, self.serve_faults)
            model_file = export_model(state, model_dir, metadata)
            uri = self.client.upload_dir(self.run.run_id, model_dir, MODEL_ARTIFACT_PATH)
            self.client.set_tags(
                self.run.run_id,
                {
                    MODEL_URI.name: uri,
                    MODEL_DIGEST.name: file_digest(model_file),
                    MODEL_SIZE.name: str(model_file.stat().st_size),
                },
            )
        log.info("model uploaded to %s", uri)
        if self.serve_faults:
            log.warning("the model carries serve fault switches: %s", self.serve_faults)


def train(args: argparse.Namespace) -> None:
    rank = env_int("NODE_RANK", 0, minimum=0)
    if rank != 0:
        log.info("NODE_RANK=%d: this reference trainer is single-process; rank 0 trains and reports", rank)
        return
    client = mlflow_client()
    run = ensure_run(client, run_name="train")
    # Every start counts, preempted ones too (the Job does not count those as failures).
    attempts = int(ATTEMPTS.read(run.tags) or 0) + 1
    client.set_tags(run.run_id, {ATTEMPTS.name: str(attempts)})
    trainer = Trainer(args, client, run)
    with tracked_run(client, run):
        state = trainer.train()
        trainer.publish(state)
    log.info("finished: %s", client.run_url(run.experiment_id, run.run_id))


def main(argv: list[str] | None = None) -> int:
    return run_workload(lambda: train(parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
