"""The kinds ``kubectl slipway`` knows and how a command line names one of their objects (pure:
no I/O): :func:`resolve_kind` and :func:`parse_ref` read ``idep/digits``, ``inferencedeployment
digits``, ...; :func:`lookup` and :func:`name_of` read the objects' dicts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from slipway import kinds

Obj = Mapping[str, Any]


class UsageError(ValueError):
    """A command line that names no known kind, or no object: exit code 2."""


@dataclass(frozen=True)
class Kind:
    kind: str
    plural: str
    short: str
    phases: tuple[str, ...]
    api_version: str

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def names(self) -> tuple[str, ...]:
        return (self.singular, self.plural, self.short)


def _kind(kind: kinds.Kind, phases: tuple[str, ...]) -> Kind:
    return Kind(kind.kind, kind.plural, kind.short, phases, kind.api_version)


# The phases of each kind, as its status model declares them (TrainingPhase, ArtifactPhase,
# DeploymentPhase): written out here so the plugin needs no pydantic; a unit test holds them equal.
TRAINING_PHASES = ("Pending", "Running", "Succeeded", "Failed", "Suspended")
ARTIFACT_PHASES = ("Registering", "Quantizing", "Validating", "Validated", "Rejected", "Failed")
DEPLOYMENT_PHASES = ("Progressing", "Analyzing", "Promoting", "Baking", "Promoted", "RolledBack", "Paused", "Failed")

TRAINING_RUN = _kind(kinds.TRAINING_RUN, TRAINING_PHASES)
MODEL_ARTIFACT = _kind(kinds.MODEL_ARTIFACT, ARTIFACT_PHASES)
INFERENCE_DEPLOYMENT = _kind(kinds.INFERENCE_DEPLOYMENT, DEPLOYMENT_PHASES)
KINDS = (TRAINING_RUN, MODEL_ARTIFACT, INFERENCE_DEPLOYMENT)
KIND_NAMES = ", ".join(f"{k.singular} ({k.short})" for k in KINDS)
CANARY_PHASES = ("Progressing", "Analyzing", "Paused")  # a canary may be in flight


def resolve_kind(text: str) -> Kind:
    """A kind by its plural, singular or short name, optionally with the group (``idep.slipway.dev``)."""
    word = text.lower().removesuffix(".slipway.dev")
    for kind in KINDS:
        if word in kind.names:
            return kind
    raise UsageError(f"unknown kind {text!r}: use one of {KIND_NAMES}")


def parse_ref(words: list[str], default: Kind | None = None) -> tuple[Kind, str]:
    """``KIND/NAME``, ``KIND NAME``, or (with a default kind) ``NAME``."""
    if len(words) == 1 and "/" in words[0]:
        kind_text, _, name = words[0].partition("/")
        if not name or "/" in name:
            raise UsageError(f"{words[0]!r}: write KIND/NAME, e.g. idep/digits")
        return resolve_kind(kind_text), name
    if len(words) == 2 and "/" not in words[0] + words[1]:
        return resolve_kind(words[0]), words[1]
    if len(words) == 1 and default is not None:
        return default, words[0]
    expected = "NAME or idep/NAME" if default is not None else "KIND/NAME or KIND NAME (e.g. idep/digits)"
    raise UsageError(f"expected {expected}, got {' '.join(words) or 'nothing'}")


def name_of(obj: Obj) -> str:
    """The object's ``metadata.name``."""
    return str(obj["metadata"]["name"])


def lookup(obj: Obj | None, *path: str) -> Any:
    """The value at ``path`` in the object's nested dicts; None where a key is missing."""
    value: Any = obj
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value
