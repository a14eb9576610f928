"""The kubectl plugin's reference: ``kubectl slipway --help`` and each command's help, as argparse
prints them (at a fixed width, so the page does not depend on the terminal)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from contextlib import contextmanager

from slipway import __version__
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


def install_lines(version: str) -> list[str]:
    """How to install the plugin from a build of the repository: the distribution ``slipway-operator``
    is on no package index (``slipway`` there is an unrelated project)."""
    dist = f"dist/{version}"
    return [
        "## Install",
        "",
        f"The plugin is on no package index. `make plugin` (or `make release`) writes it as one file, "
        f"`{dist}/kubectl-slipway.pyz`: Python 3.11 or newer runs it, and it makes its API requests through "
        "`kubectl`, so both must be on `PATH`; it needs no other package. Put it on `PATH` as "
        "`kubectl-slipway`, and kubectl runs it as `kubectl slipway`:",
        "",
        "```sh",
        "make plugin",
        f"install -D -m 0755 {dist}/kubectl-slipway.pyz ~/.local/bin/kubectl-slipway",
        "kubectl slipway version --client",
        "```",
        "",
        f"With [krew](https://krew.sigs.k8s.io/), from the same build: `kubectl krew install "
        f"--manifest={dist}/plugin.yaml --archive={dist}/kubectl-slipway.tar.gz`. The Python package installs "
        "it too, as a console script, with the operator's dependencies: `pipx install .` in a clone of Slipway, "
        f"or `pipx install {dist}/slipway_operator-{version}-py3-none-any.whl` of `make release`. Shell "
        "completion: `kubectl slipway completion bash` or `zsh` (below).",
    ]


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
            *install_lines(__version__),
            "",
            "## Usage",
            "",
            "How to use it on a live rollout is in [Steer a rollout](../how-to/steer-a-rollout.md).",
            "",
            *_block(top.format_help()),
        ]
        for name, sub in commands(top).items():
            lines += ["", f"## kubectl slipway {name}", "", *_block(sub.format_help())]
    return "\n".join(lines) + "\n"
