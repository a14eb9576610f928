"""What a ModelArtifact tells the frame: its row of the kinds table, its status and its pass, the
TrainingRun it names (that run's changes wake it), and the registered model whose aliases it moves
(a change of it wakes the InferenceDeployments that follow them)."""

from __future__ import annotations

from slipway import behaviour, kinds
from slipway.artifact.handler import PASS

STATUS, STEP = PASS

REGISTRATION = behaviour.register(
    behaviour.Registration(
        kinds.MODEL_ARTIFACT,
        STATUS,
        STEP,
        refers={kinds.TRAINING_RUN.kind: behaviour.spec_path("source", "trainingRunRef", "name")},
        moves=behaviour.spec_path("model", "name"),
    )
)
