"""The fault suite: each test injects one fault into the real local cluster while a lifecycle runs,
then counts what a user would count (Jobs, MLflow runs and versions, aliases, phases) and times
the recovery. Every test records its figures; the terminal summary prints them, one block per
fault, whether the test passed or not (`make test-faults`, and part of `make test`)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

# MLflow sends no events: in tests the operator looks at aliases and training progress every 2 s.
os.environ.setdefault("SLIPWAY_ALIAS_POLL_SECONDS", "2")
os.environ.setdefault("SLIPWAY_PROGRESS_POLL_SECONDS", "2")

from slipway_testing import OperatorReplica, report  # noqa: E402 - after the settings above


@dataclass
class Figures:
    """What one fault test injected, what it counted afterwards, and how long recovery took."""

    test: str
    injected: list[str] = field(default_factory=list)
    counted: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    outcome: str = "?"

    def inject(self, what: str) -> None:
        self.injected.append(what)

    def count(self, **counts: Any) -> None:
        self.counted.update(counts)

    def took(self, what: str, seconds: float) -> None:
        self.timings[what] = round(seconds, 1)

    def render(self) -> str:
        lines = [f"{self.test} [{self.outcome}]"]
        lines += [f"  injected  {what}" for what in self.injected]
        lines += [f"  counted   {key}: {value}" for key, value in self.counted.items()]
        lines += [f"  time      {what}: {seconds:.1f}s" for what, seconds in self.timings.items()]
        return "\n".join(lines)


FIGURES = "fault figures"
"""The user property that carries a test's rendered figures: reports travel from pytest-xdist's
workers to the process that prints the summary, module globals do not."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[Any]:
    rep = yield
    if rep.when == "call":
        item.rep_call = rep  # the operators fixture prints their logs when the test failed
    figures = getattr(item, "fault_figures", None)
    if figures is not None and rep.when == "call":
        figures.outcome = rep.outcome
    if figures is not None and rep.when == "teardown":
        rep.user_properties.append((FIGURES, figures.render()))
    return rep


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> Iterator[Figures]:
    found = Figures(request.node.name)
    request.node.fault_figures = found
    yield found
    report("\n" + found.render())


def pytest_terminal_summary(terminalreporter: Any) -> None:
    rendered = [
        value
        for reports in terminalreporter.stats.values()
        for rep in reports
        if getattr(rep, "when", None) == "teardown"
        for key, value in getattr(rep, "user_properties", ())
        if key == FIGURES
    ]
    if rendered:
        terminalreporter.section("fault suite: injected, counted, time to recover")
        for text in rendered:
            terminalreporter.write_line(text)


@pytest.fixture
def operators(
    cluster, slipway_crds, namespace, tmp_path, request: pytest.FixtureRequest
) -> Iterator[Callable[..., OperatorReplica]]:
    """A factory of operator processes watching the test's namespace; all stopped afterwards. When the
    test failed, the end of each one's log is printed with the failure."""
    started: list[OperatorReplica] = []

    def start(name: str = "operator", **kwargs: Any) -> OperatorReplica:
        replica = OperatorReplica(name, cluster, namespace, tmp_path, **kwargs)
        started.append(replica)
        return replica

    yield start
    for replica in started:
        replica.stop()
    call = getattr(request.node, "rep_call", None)
    if call is not None and call.failed:
        for replica in started:
            print(f"--- the last 150 lines of {replica.name}'s log ---")
            print("\n".join(replica.log().splitlines()[-150:]))
