"""The samples/ lifecycle's objects as the lifecycle tests apply them (the process runtime's in
e2e/tests/test_lifecycle.py, the real node's in tests/realnode/test_lifecycle.py): the TrainingRun
and InferenceDeployment of samples/ for one MLflow model, the canary's steps shortened, and the
stage times they print."""

from __future__ import annotations

import copy
import time
from typing import Any

import yaml

from slipway_testing.cluster import ROOT


def sample(name: str) -> dict[str, Any]:
    """samples/``name``, parsed."""
    return yaml.safe_load((ROOT / "samples" / name).read_text())  # type: ignore[no-any-return]


def training(name: str, model: str, env: dict[str, str] | None = None, trainer: str = "train") -> dict[str, Any]:
    """samples/trainingrun-digits.yaml as TrainingRun ``name`` of ``model`` (its experiment too):
    12 steps, a checkpoint every 4, ``trainer`` (slipway.workloads.<trainer>) with ``env`` (the
    fault switches, SLIPWAY_BAD_MODEL)."""
    body = copy.deepcopy(sample("trainingrun-digits.yaml"))
    body["metadata"] = {"name": name}
    body["spec"]["command"] = ["python", "-m", f"slipway.workloads.{trainer}"]
    body["spec"]["model"]["name"] = model
    body["spec"]["mlflow"]["experiment"] = model
    body["spec"]["args"] = ["--steps", "12", "--checkpoint-every", "4"]
    if env:
        body["spec"]["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return body


def serving(model: str) -> dict[str, Any]:
    """samples/inferencedeployment-digits.yaml for ``model``: canary steps of 10 s, analysis every 5 s."""
    body = copy.deepcopy(sample("inferencedeployment-digits.yaml"))
    body["spec"]["model"]["name"] = model
    body["spec"]["rollout"]["steps"] = [{"weight": 20, "pause": "10s"}, {"weight": 50, "pause": "10s"}]
    body["spec"]["rollout"]["analysis"]["interval"] = "5s"
    return body


class Stages:
    """Each stage's time since the start (or since the stage before, ``since_last``)."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.times: dict[str, float] = {}

    def mark(self, name: str) -> None:
        self.times[name] = time.monotonic() - self.start

    def report(self, since_last: bool = False) -> str:
        lines, last, width = [], 0.0, max([40, *map(len, self.times)])
        for name, t in self.times.items():
            lines.append(f"  {name:<{width}} {t - last if since_last else t:6.1f}s")
            last = t
        return "\n".join(lines)
