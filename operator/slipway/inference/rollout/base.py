"""What the rollout planner reads and what it decides: the revision asked for (:class:`Desired`), the
observed tracks (:class:`Track`), a pass's observations (:class:`Observed`) and its :class:`Plan`,
with the helpers every case of the state machine shares (pure)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from slipway.inference.analysis import AnalysisOutcome
from slipway.inference.model import InferenceDeploymentSpec
from slipway.inference.traffic import Router
from slipway.status.conditions import Cond, Status

PROMOTE_ANNOTATION = "slipway.dev/promote"
ABORT_ANNOTATION = "slipway.dev/abort"
RETRY_ANNOTATION = "slipway.dev/retry"
MANUAL_ANNOTATIONS = (PROMOTE_ANNOTATION, ABORT_ANNOTATION, RETRY_ANNOTATION)


@dataclass(frozen=True)
class Desired:
    """The revision the spec asks for (resolved from a ModelArtifact or an MLflow alias)."""

    version: str
    uri: str
    model: str = ""
    revision: str = ""
    digest: str = ""  # Slipway's digest over the version's files, from its ModelArtifact's status (none: unknown)


@dataclass(frozen=True)
class Track:
    """An observed Deployment and the problem its pods report, if any."""

    version: str | None
    uri: str | None
    replicas: int
    ready: int
    updated: int
    generation_observed: bool
    pods: int  # non-terminated pods
    revision: str | None = None
    model: str | None = None
    available: int | None = None
    problem: tuple[str, str] | None = None  # (reason, message) of a pod that cannot run: the scheduler's words
    # When the Deployment controller last saw its roll progress (its Progressing condition's
    # lastUpdateTime: a pod of the new template made or ready, an old one gone). It sees every step
    # of a surge roll, which a pass may not: a new pod ready and an old one removed leave the
    # ready count where it was.
    progressed: datetime | None = None

    @property
    def current_ready(self) -> int:
        """Ready pods of the current template (a rolling update's old pods do not count)."""
        return min(self.ready, self.updated) if self.generation_observed else 0

    @property
    def complete(self) -> bool:
        """Every desired replica runs the current template and is available, and no pod of an older
        template is left (a rolling update counts its old pods as ready and available too)."""
        available = self.ready if self.available is None else self.available
        return (
            self.generation_observed
            and self.updated >= self.replicas
            and self.pods <= self.updated
            and min(available, self.ready) >= self.replicas
        )

    def serves(self, desired: Desired) -> bool:
        return self.revision == desired.revision


@dataclass(frozen=True)
class RegistryView:
    """What MLflow records, read only while an InferenceDeployment has no stable of its own
    (slipway.inference.rollout.restore): the desired version's ``slipway.dev/rollback`` tag as MLflow holds it
    (None: no tag; honoured only if it names this deployment, see slipway.inference.rollout.rollbacktag) and
    the version the promote alias names now, with its revision for this spec (None: no such alias)."""

    rollback_tag: str | None = None
    promoted: Desired | None = None


@dataclass
class Observed:
    """What a pass observed, and the traffic router of its spec.traffic.mode (``router``): the one the
    handler applies the plan through, so that every share of traffic the plan holds is that router's."""

    spec: InferenceDeploymentSpec
    desired: Desired | None
    desired_problem: str | None
    stable: Track | None
    canary: Track | None
    status: dict[str, Any]
    annotations: dict[str, str]
    now: datetime
    analysis: AnalysisOutcome | None = None
    registry: RegistryView | None = None  # read only while there is no stable of its own; None: not read
    deployment: str = ""  # namespace/name: what its rollback tags name, the only tags its restore honours
    router: Router = field(kw_only=True)


@dataclass
class Plan:
    phase: str
    conditions: list[Cond]
    stable: Desired | None = None  # roll the stable Deployment to this (None: leave it as it is)
    revert_stable: bool = False  # restore the stable's previous template (a failed promotion)
    canary: Desired | None = None  # what the canary Deployment should serve (None: scaled to zero)
    canary_replicas: int = 0  # the canary's replica count now (a move toward the step's split)
    stable_replicas: int | None = None  # the stable's replica count now (None: no stable track yet)
    stable_target: int | None = None  # the stable's count once traffic has moved (None: all of spec.replicas)
    stable_budget: tuple[int, int] | None = None  # the stable's (maxSurge, maxUnavailable) for a roll, if not spec's
    weight: int = 0  # the real share of traffic on the canary
    requested_weight: int | None = None  # the current step's weight
    route_weight: int = 0  # the weight the router sends to the canary (GatewayAPI: its backend weight)
    rollout: Desired | None = None  # the revision being rolled out, for status.canary
    analyze: bool = False
    analyze_track: str = "canary"  # whose pods an analysis judges: the canary's, or the stable's in a bake
    next_analysis: float | None = None  # seconds until the next analysis is due (a canary under analysis)
    wake_in: float | None = None  # seconds until something planned is due without a change (a held-out canary leaves)
    held_out: bool = False  # the canary's pods kept with no traffic after a rollback (scaleDownDelaySeconds)
    traffic_left: datetime | None = None  # held out while the gateway applies the route that left them (budget)
    registry: list[dict[str, Any]] = field(default_factory=list)  # new MLflow updates, written to status first
    durable: bool = False  # a decision: write the status before acting on it
    consumed_annotation: str | None = None
    status: dict[str, Any] = field(default_factory=dict)


def make_plan(
    phase: str,
    summary: Callable[[str, str], list[Cond]],
    reason: str,
    message: str,
    progressing: Status = "True",
    degraded: tuple[str, str] | None = None,
    **kw: Any,
) -> Plan:
    """A plan whose summary, Progressing and Degraded conditions tell the same story."""
    conditions = [
        *summary(reason, message),
        Cond("Progressing", progressing, reason, message),
        Cond("Degraded", "True", *degraded) if degraded else Cond("Degraded", "False", reason, ""),
    ]
    return Plan(phase, conditions, **kw)


def served_by(track: Track) -> Desired:
    return Desired(track.version or "", track.uri or "", track.model or "", track.revision or "")


def describe(desired: Desired) -> str:
    return f"{desired.model} version {desired.version} (revision {desired.revision})"


def describe_track(track: Track) -> str:
    return f"{track.model or '?'} version {track.version} (revision {track.revision})"


def combined_verdict(results: list[str | None]) -> str:
    """The verdict of the latest analysis: any Failed fails, any Inconclusive holds, none yet holds."""
    if "Failed" in results:
        return "Failed"
    if "Inconclusive" in results or not results:
        return "Inconclusive"
    return "Passed"
