"""Pydantic models of Slipway's three kinds; the CRDs in crds/ are generated from them."""

from slipway.models.base import Condition
from slipway.models.inferencedeployment import (
    InferenceDeployment,
    InferenceDeploymentSpec,
    InferenceDeploymentStatus,
)
from slipway.models.modelartifact import ModelArtifact, ModelArtifactSpec, ModelArtifactStatus
from slipway.models.trainingrun import TrainingRun, TrainingRunSpec, TrainingRunStatus

__all__ = [
    "Condition",
    "InferenceDeployment",
    "InferenceDeploymentSpec",
    "InferenceDeploymentStatus",
    "ModelArtifact",
    "ModelArtifactSpec",
    "ModelArtifactStatus",
    "TrainingRun",
    "TrainingRunSpec",
    "TrainingRunStatus",
]
