"""What the pure decision (slipway.artifact.decide) asks of a ModelArtifact pass next: a read (what
it lacks to decide), a write (what it decided), or :class:`Settle`, the status the pass ends on."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from slipway.artifact.gates import GateOutcome
from slipway.artifact.state import ArtifactState, Source


@dataclass(frozen=True)
class ReadSource:
    """Resolve spec.source in MLflow, with the allow-list's checks; ``run_id``: the run of the
    TrainingRun it names, once that run succeeded."""

    run_id: str | None = None


@dataclass(frozen=True)
class EnsureModel:
    """Find the registered model the versions go in, or make it (with Slipway's proof)."""


@dataclass(frozen=True)
class ReadVersion:
    """Look up the version registered for ``role``: by each work key in turn, then by the uid."""

    role: str
    work: list[str]


@dataclass(frozen=True)
class ReadFiles:
    """Read the files at ``uri``, the version to register, a few seconds of this pass's worth."""

    role: str
    uri: str


@dataclass(frozen=True)
class Register:
    """Register ``source`` as the version for ``role`` with ``tags``; ``skipped``: the Warning that
    its files are more than the operator digests."""

    role: str
    source: Source
    tags: dict[str, str]
    work: str | None
    skipped: str | None = None


@dataclass(frozen=True)
class StartStep:
    """Find or make the step's MLflow run (by tags), and read its Job."""

    step: str


@dataclass(frozen=True)
class CreateJob:
    """Create the step's Job (it reads the namespace's MLflow credentials, if any, by reference)."""

    step: str
    job: dict[str, Any]


@dataclass(frozen=True)
class ReadRun:
    """Read the step's MLflow run, its Job completed: its metrics and tags as the step left them."""

    step: str


@dataclass(frozen=True)
class ReadGateInputs:
    """Read the price table and the versions the gates compare with (``refs``: aliases or numbers)."""

    refs: list[str]


@dataclass(frozen=True)
class RecordGates:
    """Write ``tags`` on the candidate ``version``, in order: its validation metrics, every gate's
    outcome, then the decision (the tag a later pass reads the decision back from)."""

    version: str
    tags: dict[str, str]


@dataclass(frozen=True)
class ReadAliases:
    """Read which version each of ``aliases`` points at now."""

    aliases: list[str]


@dataclass(frozen=True)
class MoveAliases:
    """Point ``move`` at ``version`` and record them on it (``tags``); ``kept``: alias -> the newer
    version it stays on."""

    version: str
    move: list[str]
    kept: dict[str, str]
    tags: dict[str, str]


@dataclass(frozen=True)
class ReadCost:
    """The gates are decided (``counted``: their outcomes, counted in the metrics now); read what the
    lineage cost is made of."""

    counted: list[GateOutcome]


@dataclass(frozen=True)
class Settle:
    """The pass ends: write ``tags`` on ``version`` (the lineage cost MLflow lacks), then the status,
    and run again in ``recheck`` seconds (None: when something changes). ``pods``: the state of a
    step's Job, which names what its pods lacked when the namespace gave them no MLflow credentials."""

    state: ArtifactState
    fields: dict[str, Any] = field(default_factory=dict)
    recheck: float | None = None
    pods: bool = False
    version: str = ""
    tags: dict[str, str] = field(default_factory=dict)


Decision = (
    ReadSource
    | EnsureModel
    | ReadVersion
    | ReadFiles
    | Register
    | StartStep
    | CreateJob
    | ReadRun
    | ReadGateInputs
    | RecordGates
    | ReadAliases
    | MoveAliases
    | ReadCost
    | Settle
)
