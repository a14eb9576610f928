"""Slipway's CRDs, previous and current, copied into a private API group: a test may install, upgrade
and delete them on the shared cluster without touching the real ``slipway.dev`` kinds other tests
use. And the comparison of an object as stored with the same object read back."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
UPGRADE_DATA = ROOT / "tests" / "data" / "crd-upgrade"
PREVIOUS = UPGRADE_DATA / "previous"
KINDS = ("TrainingRun", "ModelArtifact", "InferenceDeployment")


def previous_commit() -> str:
    """The commit whose crds/ tests/data/crd-upgrade/previous/ holds (first line of its COMMIT file)."""
    return (PREVIOUS / "COMMIT").read_text().split()[0]


def load_crds(directory: Path) -> dict[str, dict[str, Any]]:
    """The CRDs of ``directory`` (slipway.dev_*.yaml) by kind."""
    docs = [yaml.safe_load(p.read_text()) for p in sorted(directory.glob("slipway.dev_*.yaml"))]
    return {d["spec"]["names"]["kind"]: d for d in docs}


def previous_crds() -> dict[str, dict[str, Any]]:
    return load_crds(PREVIOUS)


def current_crds() -> dict[str, dict[str, Any]]:
    return load_crds(ROOT / "crds")


def git_crd(commit: str, name: str) -> str | None:
    """crds/<name> as ``commit`` has it, or None where git or that commit is not at hand."""
    try:
        done = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:crds/{name}"], capture_output=True,
                              text=True, timeout=30)  # fmt: skip
    except FileNotFoundError:
        return None
    return done.stdout if done.returncode == 0 else None


def private_names(kind: str, tag: str) -> dict[str, str]:
    """The names a kind takes in the private copy: prefixed, so that neither ``kubectl get trainingruns``
    nor a short name nor the ``slipway`` category of another test ever resolves to the copy."""
    return {
        "kind": f"{tag.capitalize()}{kind}",
        "listKind": f"{tag.capitalize()}{kind}List",
        "plural": f"{tag}{kind.lower()}s",
        "singular": f"{tag}{kind.lower()}",
    }


def privatize(crd: dict[str, Any], group: str, tag: str) -> dict[str, Any]:
    """A copy of ``crd`` served in ``group`` under names prefixed with ``tag`` (no short names, no
    categories); the versions, schemas, rules and subresources are left exactly as they are."""
    out = copy.deepcopy(crd)
    names = private_names(crd["spec"]["names"]["kind"], tag)
    out["spec"]["group"] = group
    out["spec"]["names"] = names
    out["metadata"] = {"name": f"{names['plural']}.{group}"}
    return out


def leaves(value: Any, path: str = "") -> dict[str, Any]:
    """Every scalar (and empty list or map) of ``value`` by its path, such as ``status.gates[0].passed``."""
    if isinstance(value, dict) and value:
        return {k: v for key, item in value.items() for k, v in leaves(item, f"{path}.{key}" if path else key).items()}
    if isinstance(value, list) and value:
        return {k: v for i, item in enumerate(value) for k, v in leaves(item, f"{path}[{i}]").items()}
    return {path: value}


def lost(stored: Any, read: Any) -> list[str]:
    """The paths of ``stored`` that ``read`` does not have with the same value (pruned, changed)."""
    after = leaves(read)
    return [f"{path}: {value!r} -> {after.get(path, '<missing>')!r}" for path, value in leaves(stored).items()
            if path not in after or after[path] != value]  # fmt: skip


def added(stored: Any, read: Any) -> list[str]:
    """The paths ``read`` has and ``stored`` has not (defaults of the new schema)."""
    before = leaves(stored)
    return sorted(path for path in leaves(read) if path not in before)
