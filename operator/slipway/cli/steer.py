"""``kubectl slipway promote|abort|retry`` (annotations the operator acts on and removes) and
``pause|resume`` (spec.rollout.paused) on an InferenceDeployment."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, TextIO

from slipway.cli import view
from slipway.cli.args import OK, REFUSED
from slipway.cli.client import ApiError, Failure, Session, patch, read
from slipway.cli.refs import INFERENCE_DEPLOYMENT, Kind, UsageError, parse_ref


def _deployment(args: argparse.Namespace) -> tuple[Kind, str]:
    kind, name = parse_ref(args.ref, default=INFERENCE_DEPLOYMENT)
    if kind is not INFERENCE_DEPLOYMENT:
        raise UsageError(f"{args.command} applies to an InferenceDeployment (idep), not a {kind.kind}")
    return kind, name


def _with_conflict_retry(attempt: Callable[[], int]) -> int:
    """Patches carry the resourceVersion the decision was made on: if the object changed meanwhile,
    read it again and decide again."""
    for _ in range(5):
        try:
            return attempt()
        except ApiError as exc:
            if exc.status != 409:
                raise
    raise Failure("the object kept changing under five attempts to patch it; try again")


def cmd_annotate(session: Session, args: argparse.Namespace, out: TextIO) -> int:
    kind, name = _deployment(args)
    annotation = view.ACTIONS[args.command]
    where = f"InferenceDeployment {session.namespace}/{name}"

    def attempt() -> int:
        obj = read(session, kind, name, f"{args.command} {name}")
        if (obj["metadata"].get("annotations") or {}).get(annotation):
            out.write(f"{where}: {annotation} is already set; the operator removes it once it has acted\n")
            return OK
        refusal = view.action_refusal(args.command, obj)
        if refusal:
            raise Failure(refusal, REFUSED)
        body = {
            "metadata": {"annotations": {annotation: "true"}, "resourceVersion": obj["metadata"]["resourceVersion"]}
        }
        patch(session, kind, name, body, f"{args.command} {name}")
        out.write(
            f"{where}: {args.command} requested ({annotation}=true); the operator removes the annotation once "
            f"it has acted. Follow it: kubectl slipway get idep/{name} -w\n"
        )
        return OK

    return _with_conflict_retry(attempt)


def cmd_pause(session: Session, args: argparse.Namespace, out: TextIO) -> int:
    kind, name = _deployment(args)
    paused = args.command == "pause"
    where = f"InferenceDeployment {session.namespace}/{name}"

    def attempt() -> int:
        obj = read(session, kind, name, f"{args.command} {name}")
        if bool(((obj.get("spec") or {}).get("rollout") or {}).get("paused")) == paused:
            out.write(f"{where}: spec.rollout.paused is already {str(paused).lower()}\n")
            return OK
        body: dict[str, Any] = {
            "metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
            "spec": {"rollout": {"paused": paused}},
        }
        patch(session, kind, name, body, f"{args.command} {name}")
        effect = "held at its current step" if paused else "resumed"
        out.write(f"{where}: spec.rollout.paused={str(paused).lower()} ({effect})\n")
        return OK

    return _with_conflict_retry(attempt)
