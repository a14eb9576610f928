"""``kubectl slipway``'s arguments: the commands, their flags and help, and the exit codes."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from slipway.models.base import parse_duration

OK, ERROR, USAGE, REFUSED, STALLED, TIMED_OUT = 0, 1, 2, 3, 4, 5

EPILOG = """\
exit codes:
  0  done: shown, annotated, patched, or the wait's condition was reached
  1  the object was not found or deleted, the Slipway CRDs are not installed,
     the kubeconfig cannot be read, or the API server refused or did not answer
  2  usage: an unknown command, kind, phase or duration
  3  refused: promote, abort or retry cannot apply in the object's current phase
     (the message says why and what would)
  4  wait: the object is Stalled (Stalled=True at its current generation); the
     Stalled message is printed: a person must act
  5  wait: --timeout passed before the condition was reached

Kinds: trainingrun (tr), modelartifact (ma), inferencedeployment (idep), by
plural, singular or short name. Like kubectl: KUBECONFIG or --kubeconfig,
--context, -n/--namespace (default: the context's namespace).
"""


def _common(parser: argparse.ArgumentParser, suppress: bool) -> None:
    """kubectl's connection flags; accepted before and after the command."""

    def default(value: Any) -> Any:
        return argparse.SUPPRESS if suppress else value

    parser.add_argument(
        "--kubeconfig", default=default(None), help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)"
    )
    parser.add_argument("--context", default=default(None), help="kubeconfig context (default: the current one)")
    parser.add_argument("-n", "--namespace", default=default(None), help="namespace (default: the context's)")


def duration(text: str) -> float:
    """``5m``, ``30s``, ``1h30m``, or plain seconds."""
    try:
        return float(text) if text.replace(".", "", 1).isdigit() else parse_duration(text).total_seconds()
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="kubectl slipway",
        description="See a Slipway lifecycle (TrainingRun -> ModelArtifact -> InferenceDeployment) as a tree, "
        "steer an InferenceDeployment's rollout, and wait for any of the three kinds.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _common(top, suppress=False)
    commands = top.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, help_: str, description: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(
            name,
            help=help_,
            description=description,
            epilog=EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        _common(sub, suppress=True)
        return sub

    _get(command)
    _steering(command)
    _wait(command)
    return top


def _get(command: Callable[[str, str, str], argparse.ArgumentParser]) -> None:
    get = command(
        "get",
        "show the lifecycle tree an object belongs to",
        "The tree of one lifecycle: the TrainingRun, the ModelArtifact it made (status.artifactRef) with its "
        "versions and gates, and the InferenceDeployments that serve them (spec.model.artifactRef, or "
        "spec.model.name and alias serving one of its versions) with phase, Ready, the stable and canary "
        "tracks (model version, revision, ready/replicas, weight, requested weight, step of N), the last "
        "analysis and lastRollback. Starting from any of the three kinds shows the tree it belongs to.",
    )
    get.add_argument("ref", nargs="+", metavar="KIND/NAME", help="e.g. idep/digits, tr/digits, ma digits")
    get.add_argument("-w", "--watch", action="store_true", help="redraw on every change until interrupted")
    get.add_argument(
        "--timeout", type=duration, default=None, help="with --watch: stop after this long (e.g. 5m); exit 0"
    )


def _steering(command: Callable[[str, str, str], argparse.ArgumentParser]) -> None:
    """promote, abort, retry (annotations) and pause, resume (spec.rollout.paused)."""
    for action, what in (
        (
            "promote",
            "skip the remaining canary steps and promote now (annotation slipway.dev/promote=true). "
            "Applies while a canary is in flight: Progressing, Analyzing or Paused.",
        ),
        (
            "abort",
            "roll the canary back now, or revert a promotion or a bake in progress (annotation "
            "slipway.dev/abort=true). Applies while a canary is in flight, Promoting or Baking.",
        ),
        (
            "retry",
            "roll out again the revision that was rolled back (annotation slipway.dev/retry=true). "
            "Applies when the phase is RolledBack and that rollback was not retried yet.",
        ),
    ):
        description = (
            f"InferenceDeployment: {what} The operator removes the annotation once it has acted. "
            "Refused (exit 3) when it cannot apply in the current phase."
        )
        sub = command(action, what.split(" (")[0], description)
        sub.add_argument("ref", nargs="+", metavar="NAME", help="an InferenceDeployment: NAME or idep/NAME")

    gitops = (
        "This writes the spec: a GitOps tool (Argo CD, Flux) that owns the object will revert it on its next "
        "sync; set spec.rollout.paused in Git there instead."
    )
    for action, what in (
        (
            "pause",
            "hold the rollout at its current step: spec.rollout.paused=true (the phase becomes Paused; "
            "a paused rollout never times out).",
        ),
        ("resume", "continue a paused rollout: spec.rollout.paused=false."),
    ):
        sub = command(action, what.split(":")[0], f"InferenceDeployment: {what} {gitops}")
        sub.add_argument("ref", nargs="+", metavar="NAME", help="an InferenceDeployment: NAME or idep/NAME")


def _wait(command: Callable[[str, str, str], argparse.ArgumentParser]) -> None:
    wait = command(
        "wait",
        "wait until an object is Ready or in a phase",
        "Wait until the object is Ready (the Ready condition True at its current generation) or in the phase "
        "given. Prints a line each time the phase, Ready or the step changes. Exits 0 when reached; at once "
        "with 4 and the Stalled message when the object goes Stalled=True at its current generation (a "
        "rolled-back canary, an invalid spec, a permanent training failure, ...); 5 on timeout. A phase "
        "already reached counts: to wait for a rollout you started, wait once it is in flight.",
    )
    wait.add_argument("ref", nargs="+", metavar="KIND/NAME", help="e.g. idep/digits")
    wait.add_argument(
        "--for",
        dest="target",
        default="Ready",
        metavar="Ready|PHASE",
        help="Ready (default), or a phase of the kind, e.g. Promoted, Validated, Succeeded",
    )
    wait.add_argument("--timeout", type=duration, default=300.0, help="give up after this long (default 5m)")
