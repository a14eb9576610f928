"""The kubectl plugin's reference: ``kubectl slipway --help`` and each command's help, as argparse
prints them (at a fixed width, so the page does not depend on the terminal)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from contextlib import contextmanager

from slipway.cli.args import parser
from slipway.reference.common import GENERATED

WIDTH = "100"


@contextmanager
def _columns() -> Iterator[None]:
    """argparse wraps help at $COLUMNS: fixed while the page is written."""
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = before


def commands(top: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Each command's own parser, in the order the plugin lists them."""
    for action in top._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _block(text: str) -> list[str]:
    return ["```text", text.rstrip("\n"), "```"]


def markdown() -> str:
    with _columns():
        top = parser()
        lines = [
            "# kubectl slipway",
            "",
            GENERATED.format(source="the argparse help of operator/slipway/cli"),
            "",
            "`pipx install slipway-operator` (or `pip install slipway-operator`; the distribution `slipway` on "
            "the package index is an unrelated project) installs the console script `kubectl-slipway`; with it on "
            "`PATH`, kubectl runs it as `kubectl slipway`. How to use it on a live rollout is in "
            "[Steer a rollout](../how-to/steer-a-rollout.md).",
            "",
            *_block(top.format_help()),
        ]
        for name, sub in commands(top).items():
            lines += ["", f"## kubectl slipway {name}", "", *_block(sub.format_help())]
    return "\n".join(lines) + "\n"
