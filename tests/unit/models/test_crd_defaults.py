"""A spec field the previous release's CRDs do not have gets no schema default: the API server writes
a default into every stored object it returns, and the previous operator, whose spec models refuse
fields they do not know, would stall every such object after a downgrade (found by
tests/integration/test_upgrade.py with spec.rollout.analysis.gateway). The default lives in the model."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from slipway_testing.cluster import ROOT
from slipway_testing.upgrades import PREVIOUS

FILES = ("slipway.dev_trainingruns.yaml", "slipway.dev_modelartifacts.yaml", "slipway.dev_inferencedeployments.yaml")


def properties(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node under ``node``, by its dotted path (list items as ``[]``)."""
    for name, child in (node.get("properties") or {}).items():
        yield f"{path}.{name}", child
        yield from properties(child, f"{path}.{name}")
        if "items" in child:
            yield f"{path}.{name}[]", child["items"]
            yield from properties(child["items"], f"{path}.{name}[]")


def spec_schema(text: str) -> dict[str, Any]:
    crd = yaml.safe_load(text)
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("name", FILES)
def test_no_spec_field_newer_than_the_previous_release_has_a_schema_default(name: str) -> None:
    shown = subprocess.run(["git", "show", f"{PREVIOUS}:crds/{name}"], cwd=ROOT, capture_output=True, text=True)
    assert shown.returncode == 0, f"git show {PREVIOUS}:crds/{name}: {shown.stderr} (a clone with its history)"
    known = {path for path, _ in properties(spec_schema(shown.stdout))}
    current = spec_schema((ROOT / "crds" / name).read_text())
    defaulted = [path for path, node in properties(current) if "default" in node and path not in known]
    assert defaulted == [], f"spec fields newer than {PREVIOUS} with a CRD default: {defaulted}"
