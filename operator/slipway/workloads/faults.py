"""The reference server's fault switches, for rollback tests and demos: which are set, from where
(the environment, the model version's tags, the model's metadata), and their values. See "Fault
switches" in :mod:`slipway.workloads.serve`."""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from slipway.mlflow.programtags import FAULT
from slipway.workloads.common import EXIT_ERROR, METADATA_FILE, ConfigError, WorkloadExit

log = logging.getLogger("slipway.workloads.serve")  # the server's one logger

# The fault switches: their names in model version tags (after the prefix of the tag family
# slipway.mlflow.programtags.FAULT) and in the "faults" object of slipway-model.json, and their
# environment variables.
FAULT_ENV = {
    "errorRate": "SLIPWAY_FAULT_ERROR_RATE",
    "latencySeconds": "SLIPWAY_FAULT_LATENCY_SECONDS",
    "crashOnStart": "SLIPWAY_FAULT_CRASH_ON_START",
    "errorsAfterSeconds": "SLIPWAY_FAULT_ERRORS_AFTER_SECONDS",
    "loadSeconds": "SLIPWAY_FAULT_LOAD_SECONDS",
    # --api openai: a slower prefill, slower decoding (see openai_api.py)
    "firstTokenDelaySeconds": "SLIPWAY_FAULT_FIRST_TOKEN_DELAY_SECONDS",
    "tokenDelaySeconds": "SLIPWAY_FAULT_TOKEN_DELAY_SECONDS",
}


@dataclass(frozen=True)
class Faults:
    """The fault switches, settled once at start (see "Fault switches" in the module docstring)."""

    error_rate: float = 0.0
    latency_seconds: float = 0.0
    crash_on_start: bool = False
    first_token_delay_seconds: float = 0.0
    token_delay_seconds: float = 0.0
    errors_after_seconds: float = 0.0
    load_seconds: float = 0.0
    # Where each switch that was set came from, e.g. {"errorRate": "model version tag slipway.dev/fault-errorRate"}.
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    @classmethod
    def from_env(cls) -> Faults:
        """The switches the environment sets, without the model's own."""
        return resolve_faults(os.environ)

    def fails(self, draw: float, serving_for: float = float("inf")) -> bool:
        """Whether a request with the uniform random ``draw`` in [0, 1) gets an injected 500, once
        the model has served for ``errors_after_seconds`` (``serving_for``: how long it has)."""
        return serving_for >= self.errors_after_seconds and draw < self.error_rate

    def active(self) -> bool:
        return bool(
            self.error_rate
            or self.latency_seconds
            or self.crash_on_start
            or self.first_token_delay_seconds
            or self.token_delay_seconds
            or self.load_seconds
        )

    def source(self, switch: str) -> str:
        return self.sources.get(switch, "no source")

    def describe(self) -> str:
        """Each switch that was set, with its value and where it came from; "none set" if none was."""
        values = {
            "errorRate": self.error_rate,
            "latencySeconds": self.latency_seconds,
            "crashOnStart": self.crash_on_start,
            "firstTokenDelaySeconds": self.first_token_delay_seconds,
            "tokenDelaySeconds": self.token_delay_seconds,
            "errorsAfterSeconds": self.errors_after_seconds,
            "loadSeconds": self.load_seconds,
        }
        return ", ".join(f"{switch}={values[switch]} ({where})" for switch, where in self.sources.items()) or "none set"


def resolve_faults(
    env: Mapping[str, str], tags: Mapping[str, str] | None = None, metadata_faults: Any = None
) -> Faults:
    """The fault switches, each from the first that sets it (a non-empty value) of: the
    environment ``env``, the model version ``tags`` (``slipway.dev/fault-<switch>``, or
    ``slipway.fault.<switch>`` as earlier versions named them), and the ``faults`` object of the
    model's metadata. A bad value is a ConfigError that says where it is."""
    tags = tags or {}
    metadata_faults = {} if metadata_faults is None else metadata_faults
    if not isinstance(metadata_faults, Mapping):
        raise ConfigError(f"{METADATA_FILE}: faults must be an object, not {metadata_faults!r}")
    unknown = [f"model version tag {name}" for key, name in FAULT.members(tags).items() if key not in FAULT_ENV] + [
        f"{METADATA_FILE} faults.{key}" for key in metadata_faults if key not in FAULT_ENV
    ]
    if unknown:
        log.warning("ignoring unknown fault switches: %s (known: %s)", ", ".join(unknown), ", ".join(FAULT_ENV))
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for switch, variable in FAULT_ENV.items():
        tag = FAULT.of(switch)
        candidates = (
            (env.get(variable), f"env {variable}"),
            (tag.read(tags), f"model version tag {tag.where(tags)}"),
            (metadata_faults.get(switch), f"{METADATA_FILE} faults.{switch}"),
        )
        for raw, where in candidates:
            if raw is None or (isinstance(raw, str) and not raw.strip()):
                continue
            values[switch] = _fault_value(switch, raw, where)
            sources[switch] = where
            break
    return Faults(
        error_rate=values.get("errorRate", 0.0),
        latency_seconds=values.get("latencySeconds", 0.0),
        crash_on_start=values.get("crashOnStart", False),
        first_token_delay_seconds=values.get("firstTokenDelaySeconds", 0.0),
        token_delay_seconds=values.get("tokenDelaySeconds", 0.0),
        errors_after_seconds=values.get("errorsAfterSeconds", 0.0),
        load_seconds=values.get("loadSeconds", 0.0),
        sources=sources,
    )


def _fault_value(switch: str, raw: object, where: str) -> float | bool:
    """One switch's value from a string (env, tag) or a JSON value (metadata)."""
    if switch == "crashOnStart":
        text = str(raw).strip().lower()  # JSON true/false arrive as True/False
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{where}={raw!r} is not a boolean (use 1 or 0)")
    maximum = 1.0 if switch == "errorRate" else math.inf
    value = math.nan
    if isinstance(raw, (int, float, str)) and not isinstance(raw, bool):  # JSON true is no number
        with contextlib.suppress(ValueError):
            value = float(raw)
    if not (math.isfinite(value) and 0.0 <= value <= maximum):
        bounds = "in [0, 1]" if switch == "errorRate" else "of seconds, at least 0"
        raise ConfigError(f"{where}={raw!r} must be a number {bounds}")
    return value


def crash_if_asked(faults: Faults) -> None:
    if faults.crash_on_start:
        raise WorkloadExit(EXIT_ERROR, f"crashOnStart ({faults.source('crashOnStart')}): crashing at start")
