"""A small, typed, synchronous client for MLflow's REST API (tracking, registry, artifacts).

This is the only package in Slipway that talks to MLflow. It speaks plain REST over
``httpx`` because the ``mlflow`` package pins dependencies that conflict with the
Kubernetes client. :class:`MlflowClient` is the one object callers use; it is composed of:

- :mod:`.http` — the connection, auth, retries and bounds;
- :mod:`.errors` — MLflow's answers mapped onto :class:`MlflowError`, :class:`MlflowNotFound`
  and :class:`MlflowUnavailable`, in Slipway's words;
- :mod:`.tracking` — experiments, runs, metrics, params and tags;
- :mod:`.registry` — registered models, versions, version tags and aliases;
- :mod:`.artifacts` — upload, list and download, and artifact URI resolution;
- :mod:`.logged_models` — MLflow 3's logged models (``models:/m-<id>``);
- :mod:`.sources` — a model to register found as MLflow's client finds it, and its files' digest;
- :mod:`.records` — Slipway's own runs and versions, tagged with an object's uid and looked
  up before any create;
- :mod:`.proof` — the proof (an HMAC under the operator's key) that Slipway made an experiment,
  model, run or version;

with two pure helpers: :mod:`.uris` (the ``models:/`` and ``runs:/`` URI parser) and
:mod:`.filters` (search filters).
"""

from __future__ import annotations

from slipway.mlflow.artifacts import ARTIFACT_PROXY, ArtifactFile, Artifacts
from slipway.mlflow.errors import (
    LeaseDeadlinePassed,
    MlflowAnswerTooLarge,
    MlflowError,
    MlflowNotFound,
    MlflowUnavailable,
)
from slipway.mlflow.filters import model_version_filter, tag_filter
from slipway.mlflow.http import API
from slipway.mlflow.logged_models import LoggedModel, LoggedModels
from slipway.mlflow.proof import PROOF_TAG, Guard, Proof, Unproven
from slipway.mlflow.records import ROLE_TAG, UID_TAG, Records
from slipway.mlflow.registry import ModelVersion, RegisteredModel, Registry
from slipway.mlflow.sources import FileTree, Found, ModelSources
from slipway.mlflow.tracking import RUN_STATUSES, TERMINAL_RUN_STATUSES, Metric, Run, Tracking, now_millis
from slipway.mlflow.uris import ModelUri, RunUri, model_version_uri, parse_model_uri, parse_run_uri, run_artifact_uri

__all__ = [
    "API",
    "ARTIFACT_PROXY",
    "PROOF_TAG",
    "ROLE_TAG",
    "RUN_STATUSES",
    "TERMINAL_RUN_STATUSES",
    "UID_TAG",
    "ArtifactFile",
    "FileTree",
    "Found",
    "Guard",
    "LeaseDeadlinePassed",
    "LoggedModel",
    "LoggedModels",
    "Metric",
    "MlflowAnswerTooLarge",
    "MlflowClient",
    "MlflowError",
    "MlflowNotFound",
    "MlflowUnavailable",
    "ModelSources",
    "ModelUri",
    "ModelVersion",
    "Proof",
    "RegisteredModel",
    "Run",
    "RunUri",
    "Unproven",
    "model_version_filter",
    "model_version_uri",
    "now_millis",
    "parse_model_uri",
    "parse_run_uri",
    "run_artifact_uri",
    "tag_filter",
]


class MlflowClient(ModelSources, Artifacts, Records, Tracking, Registry):
    """A synchronous client for one MLflow tracking server: tracking, registry and artifacts.

    ``retries`` applies only to idempotent requests answered with :class:`MlflowUnavailable`;
    keep it 0 inside operator handlers (kopf retries with backoff) and raise it in workloads.
    """
