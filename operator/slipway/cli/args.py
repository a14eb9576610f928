"""``kubectl slipway``'s arguments: the commands, their flags and help, and the exit codes."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import Any

OK, ERROR, USAGE, REFUSED, STALLED, TIMED_OUT = 0, 1, 2, 3, 4, 5
OUTPUTS = ("json", "yaml")
SHELLS = ("bash", "zsh")

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
--context, -n/--namespace (default: the context's namespace). Every request
goes through kubectl (found on PATH) with those flags, so any kubeconfig that
works with kubectl works here.
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


# Durations as the CRDs write them (slipway.models.base.DURATION_PATTERN; a unit test holds them equal).
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration(text: str) -> float:
    """``5m``, ``30s``, ``1h30m``, ``250ms``, or plain seconds."""
    if text.replace(".", "", 1).isdigit():
        return float(text)
    if not re.fullmatch(DURATION_PATTERN, text):
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}: use a number with ms, s, m or h, e.g. 30s or 5m")
    parts = re.findall(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)", text)
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)


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
    _list(command)
    _history(command)
    _steering(command)
    _wait(command)
    _version(command)
    _completion(command)
    return top


def _output(sub: argparse.ArgumentParser, what: str) -> None:
    sub.add_argument(
        "-o",
        "--output",
        choices=OUTPUTS,
        default=None,
        help=f"print {what} as JSON or YAML (a kubectl List) instead of text",
    )


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
    _output(get, "the objects of the tree, roots first")


def _list(command: Callable[[str, str, str], argparse.ArgumentParser]) -> None:
    sub = command(
        "list",
        "list TrainingRuns, ModelArtifacts and InferenceDeployments, one line each",
        "One line an object, of all three kinds (or of the kinds given): KIND/NAME, the phase, the progress "
        "(a TrainingRun's step; an InferenceDeployment's canary step of N and canary weight while a canary is in "
        "flight), the version (what a ModelArtifact registered; what an InferenceDeployment's stable track serves, "
        "and its canary's) and the age. In the namespace (-n, or the context's), or in all with -A.",
    )
    sub.add_argument("kinds", nargs="*", metavar="KIND", help="only these kinds, e.g. idep (default: all three)")
    sub.add_argument("-A", "--all-namespaces", action="store_true", help="list in every namespace")
    _output(sub, "the objects")


def _history(command: Callable[[str, str, str], argparse.ArgumentParser]) -> None:
    sub = command(
        "history",
        "what an InferenceDeployment served, promoted and rolled back, and when",
        "An InferenceDeployment's history, oldest first: each phase it went through with the version it was "
        "rolling out (its Events: canary started, analysed, paused, promoted, rolled back, ...), each rollback "
        "with its reason, failed metric and time (status.lastRollback), and what it serves now (status.stable, "
        "status.canary, status.previousStable). Read from the object's status and its Events only: the plugin "
        "does not talk to MLflow, so an alias moved or a version tagged in MLflow by hand is not shown. Events "
        "last an hour by default (kube-apiserver --event-ttl); older than that, only what status keeps is shown: "
        "the tracks now and the last rollback.",
    )
    sub.add_argument("ref", nargs="+", metavar="NAME", help="an InferenceDeployment: NAME or idep/NAME")


def _version(command: Callable[[str, str, str], argparse.ArgumentParser]) -> None:
    sub = command(
        "version",
        "print the plugin's version and the operator's",
        "The plugin's version, then the operator's: the Deployments labelled app.kubernetes.io/name=slipway and "
        "app.kubernetes.io/component=operator, in every namespace you may list (else in slipway-system), by "
        "their app.kubernetes.io/version label (the Helm chart sets it) or their image's tag (manifests/). "
        '"operator: not found" when there is none; exit 1 when the API server cannot be reached.',
    )
    sub.add_argument("--client", action="store_true", help="the plugin's version only; no API request")


def _completion(command: Callable[[str, str, str], argparse.ArgumentParser]) -> None:
    sub = command(
        "completion",
        "print a shell completion script (bash or zsh)",
        "A completion script for kubectl-slipway's commands, flags, kinds and choices. bash: "
        "source <(kubectl-slipway completion bash), or save it in ~/.local/share/bash-completion/completions/"
        "kubectl-slipway. zsh: save it as _kubectl-slipway in a directory of $fpath, or source it after compinit.",
    )
    sub.add_argument("shell", choices=SHELLS, help="bash or zsh")


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
