"""Prometheus' own reading of a query (its parser, built as the oracle command), and what it reads
outside a namespace."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from slipway_testing.cluster import ROOT

PROMQL_ORACLE = ROOT / ".cache" / "promqlparse" / "promqlparse"
"""Prometheus' parser as a command (`make promql-oracle`, tests/tools/promqlparse)."""


def require_promql_oracle() -> None:
    if not PROMQL_ORACLE.exists():
        import pytest

        pytest.fail(f"{PROMQL_ORACLE.relative_to(ROOT)} is missing: run `make promql-oracle` (Prometheus' parser)")


def promql_parse(texts: list[str]) -> list[dict[str, Any]]:
    """Prometheus' reading of each query: one oracle process for the whole batch."""
    require_promql_oracle()
    stdin = "".join(json.dumps(t) + "\n" for t in texts)
    done = subprocess.run([str(PROMQL_ORACLE)], input=stdin, capture_output=True, text=True, check=True, timeout=120)
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(answers) == len(texts), done.stderr
    return answers


def promql_escapes(answer: dict[str, Any], namespace: str) -> list[str]:
    """What a parser's answer reads outside the namespace: each selector without namespace="<ns>", or
    with another matcher on the namespace label (the same one twice is the same)."""
    found = []
    for mode, reading in answer.items():
        for selector in reading.get("selectors") or []:
            ns = [m for m in selector if m["name"] == "namespace"]
            if not ns or any(m != {"name": "namespace", "type": "=", "value": namespace} for m in ns):
                found.append(f"{mode}: {selector}")
    return found
