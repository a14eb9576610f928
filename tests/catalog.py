"""The catalog of invalid specs under tests/data/invalid, shared by unit and cluster tests.

Each file is one object, headed by the error a user must see:
``# field: spec.nodes`` (the field the error names) and optionally
``# message: ...`` (words both the operator and the API server say).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

DATA = Path(__file__).resolve().parent / "data"


@dataclass(frozen=True)
class InvalidCase:
    path: Path
    field: str
    message: str | None
    obj: dict[str, Any]

    @property
    def id(self) -> str:
        return self.path.stem


def load_invalid() -> list[InvalidCase]:
    cases = []
    for path in sorted((DATA / "invalid").glob("*.yaml")):
        text = path.read_text()
        header = dict(line[2:].split(": ", 1) for line in text.splitlines() if line.startswith("# ") and ": " in line)
        cases.append(InvalidCase(path, header["field"], header.get("message"), yaml.safe_load(text)))
    return cases


def load_valid() -> list[tuple[Path, dict[str, Any]]]:
    """Valid examples: tests/data/valid and the samples/ users copy from."""
    paths = sorted((DATA / "valid").glob("*.yaml")) + sorted((DATA.parents[1] / "samples").glob("*.yaml"))
    loaded = [(p, yaml.safe_load(p.read_text())) for p in paths]
    return [(p, o) for p, o in loaded if str(o.get("apiVersion", "")).startswith("slipway.dev/")]  # not the Namespace
