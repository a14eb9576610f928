"""MLflow's model and run URIs: the one place that writes and reads ``models:/`` and ``runs:/``.

- ``models:/<name>/<version>[/<path>]`` — a registered model version (a non-numeric
  ``<version>`` is an MLflow stage, which Slipway does not use);
- ``models:/<name>@<alias>`` — the version an alias points at;
- ``models:/<model_id>`` — an MLflow 3 logged model;
- ``runs:/<run_id>[/<path>]`` — a file or directory in a run's artifacts.
"""

from __future__ import annotations

from dataclasses import dataclass

MODELS_SCHEME = "models:"
RUNS_SCHEME = "runs:"


@dataclass(frozen=True)
class ModelUri:
    """A parsed ``models:/`` URI; exactly one of ``version``, ``alias`` or neither (a logged model)."""

    name: str  # the registered model, or the logged model's id
    version: str | None = None
    alias: str | None = None
    path: str = ""  # inside the version's artifacts

    @property
    def registered_version(self) -> str | None:
        """The version number this URI names, None for an alias, a stage or a logged model."""
        return self.version if self.version is not None and self.version.isdigit() else None


@dataclass(frozen=True)
class RunUri:
    """A parsed ``runs:/`` URI."""

    run_id: str
    path: str = ""  # inside the run's artifacts


def parse_model_uri(uri: str) -> ModelUri | None:
    """The parts of a ``models:/`` URI; None for any other URI."""
    if not uri.startswith(MODELS_SCHEME):
        return None
    ref = uri[len(MODELS_SCHEME) :].strip("/")
    if "@" in ref:
        name, alias = ref.split("@", 1)
        return ModelUri(name, alias=alias)
    name, _, rest = ref.partition("/")
    if not rest:
        return ModelUri(name)
    version, _, path = rest.partition("/")
    return ModelUri(name, version=version, path=path.strip("/"))


def parse_run_uri(uri: str) -> RunUri | None:
    """The parts of a ``runs:/`` (or ``runs://``) URI; None for any other URI."""
    if not uri.startswith(RUNS_SCHEME):
        return None
    run_id, _, path = uri[len(RUNS_SCHEME) :].lstrip("/").partition("/")
    return RunUri(run_id, path.strip("/"))


def run_artifact_uri(run_id: str, artifact_path: str = "") -> str:
    """The ``runs:/<run_id>/<path>`` URI of a run's artifact."""
    return f"runs:/{run_id}/{artifact_path.strip('/')}".rstrip("/")


def model_version_uri(name: str, version: str | int) -> str:
    """The registry URI of one version, ``models:/<name>/<version>``."""
    return f"models:/{name}/{version}"
