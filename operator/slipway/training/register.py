"""What a TrainingRun tells the frame: its row of the kinds table, its status and its pass. Its
watches of training pods and Kueue Workloads are in ``training.watches``."""

from __future__ import annotations

from slipway import behaviour, kinds
from slipway.training import watches  # noqa: F401 - registers its pod and Workload indexes
from slipway.training.handler import PASS

STATUS, STEP = PASS

REGISTRATION = behaviour.register(behaviour.Registration(kinds.TRAINING_RUN, STATUS, STEP))
