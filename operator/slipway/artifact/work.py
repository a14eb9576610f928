"""The work key of a ModelArtifact (pure): what its MLflow versions are found by besides its uid.

The key hashes what the user wrote: the spec with every field equal to its default left out, whether
the user wrote it, the API server filled it in from the CRD's schema or the operator's model did. A
release that adds a field with a default therefore keeps the key of every artifact applied again
without it (``quantization: {}`` and no ``quantization`` are the same work, as they always were).

Versions registered before the key left defaults out (the ``slipway.dev/work`` tag of a build
from before this rule) carry :func:`legacy_work_key`: the spec with the defaults of that schema
filled in. It is looked up after the current key, so such a version is adopted and not registered
again. Its fields are frozen in :data:`LEGACY_FIELDS`: a field added since is left out of it, and a
spec that sets one to anything but its default has no legacy key (no version of before can be for it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from slipway.mlflow.records import work_key

GATE_FIELDS = ("metric", "min", "max", "maxRelativeDrop", "maxRelativeToBaseline", "baseline", "onMissingBaseline")
# The ModelArtifact spec's fields (as the API spells them) when the legacy key was the rule; None is a
# leaf kept whole, a mapping the fields of an object (or of each object of a list). Never add to it.
LEGACY_FIELDS: Mapping[str, Any] = {
    "model": {"name": None},
    "source": {
        "trainingRunRef": {"name": None},
        "mlflowRun": {"runId": None, "artifactPath": None},
        "uri": None,
    },
    "quantization": {"method": None, "image": None, "command": None, "args": None},
    "validation": {
        "image": None,
        "command": None,
        "args": None,
        "env": {"name": None, "value": None, "valueFrom": None},
        "gates": dict.fromkeys(GATE_FIELDS),
    },
    "aliases": None,
}


def written(spec: BaseModel) -> dict[str, Any]:
    """The spec as the user wrote it: no field that equals its default (or is unset)."""
    return spec.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_defaults=True)


def current_work_key(namespace: str, name: str, spec: BaseModel, source: str) -> str:
    """The key versions are registered with now: namespace, name, what the user wrote and the source."""
    return work_key(namespace, name, written(spec), source)


def legacy_work_key(namespace: str, name: str, spec: BaseModel, source: str) -> str | None:
    """The key a version registered under the earlier rule carries (the spec with its defaults, as
    that schema had them), or None when the spec sets a field that schema did not have."""
    if _pruned(written(spec), LEGACY_FIELDS) != written(spec):
        return None
    full = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    return work_key(namespace, name, _pruned(full, LEGACY_FIELDS), source)


def work_keys(namespace: str, name: str, spec: BaseModel, source: str) -> list[str]:
    """The keys a version of this work may carry: the current one first (the one registered with)."""
    keys = [current_work_key(namespace, name, spec, source)]
    legacy = legacy_work_key(namespace, name, spec, source)
    return keys + ([legacy] if legacy and legacy not in keys else [])


def _pruned(value: Any, fields: Mapping[str, Any] | None) -> Any:
    """``value`` with only ``fields`` (recursively; each item of a list of objects alike)."""
    if fields is None:
        return value
    if isinstance(value, list):
        return [_pruned(item, fields) for item in value]
    if not isinstance(value, Mapping):
        return value
    return {key: _pruned(item, fields[key]) for key, item in value.items() if key in fields}
