"""What every analysis provider shares: what it is asked to measure, what the operator lends it, and
the row of the registry it is.

An analysis (``spec.rollout.analysis``, or a bake's) measures each metric on the canary's pods (and
the stable's where a metric compares with it) through a :class:`slipway.inference.analysis.Provider`, and
:mod:`slipway.inference.analysis` judges the measurements. A :class:`Source` is where such providers come
from: one row of :data:`slipway.inference.providers.PROVIDERS`. It says which metrics it answers, what of the
spec it refuses, and opens providers for one analysis of one InferenceDeployment.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol

from slipway.config import OperatorConfig
from slipway.inference.analysis import Provider
from slipway.inference.model import Analysis
from slipway.prometheus import PrometheusClient


@dataclass(frozen=True)
class Target:
    """One analysis of one InferenceDeployment: its settings, and the tracks it measures."""

    settings: Analysis  # spec.rollout.analysis, or the bake's
    namespace: str
    deployment: str  # the InferenceDeployment's name
    versions: Mapping[str, str] = field(default_factory=dict)  # track -> model version
    revisions: Mapping[str, str] = field(default_factory=dict)  # track -> revision (narrower than its version)


@dataclass(frozen=True)
class Services:
    """What the operator lends a source: its settings (None: no allow-list is checked), its own
    Prometheus (``--prometheus-url``, None without one), how long one request may take, and the
    names of the cluster's namespaces (from its cache; None: not known, as outside the operator)."""

    config: OperatorConfig | None
    prometheus: PrometheusClient | None
    timeout: float
    namespaces: Callable[[], Collection[str]] | None = None


# What a source opened for one analysis: a maker of providers (each call a new one, keeping its own
# ``unavailable``: the dry-run metrics are asked through another than the deciding ones), or why it
# cannot be asked at all (every metric it answers is then Inconclusive with that message).
Opened = Callable[[], Provider] | str


class Source(Protocol):
    """One source of analysis values: one row of :data:`slipway.inference.providers.PROVIDERS`."""

    name: str  # its key in the registry
    metrics: frozenset[str]  # the metric names (metrics without a query) it answers, whatever the preset
    presets: frozenset[str]  # the spec.rollout.analysis.preset values whose built-in metrics it answers

    def refusal(self, settings: Analysis, config: OperatorConfig) -> str | None:
        """Why the operator will not run an analysis with ``settings`` (naming the field and the
        fix), or None. Checked at every pass: a refused spec is InvalidSpec."""
        ...

    def open(self, target: Target, services: Services) -> AbstractContextManager[Opened]:
        """Providers for one analysis of ``target``; what it opened is closed when the analysis is over."""
        ...
